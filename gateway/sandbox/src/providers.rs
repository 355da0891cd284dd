//! The providers this crate can build, and the one place their names are read.
//!
//! A deployment names its default provider in configuration (`sandbox = "local"`); everything
//! else about a provider (whether it is a security boundary, what it needs on the host, where
//! processes see the workspace) is asked of the built [`SandboxProvider`], never decided by
//! comparing its name elsewhere. So adding a provider is: a variant here, its module, and the
//! conformance suite passing; no match on names in the runtime, the server or an adapter.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use gateway_core::environment::ProviderTier;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::{LocalProvider, NamespaceProvider, SandboxProvider};

/// A provider this crate can build. Its name is its tier ([`ProviderKind::tier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// Processes on the host, in the workspace: not a security boundary ([`crate::local`]).
    Local,
    /// Processes in bubblewrap ([`crate::namespace`]).
    Namespace,
}

impl ProviderKind {
    /// Every provider, in the order they are named to an operator.
    pub const ALL: [ProviderKind; 2] = [ProviderKind::Local, ProviderKind::Namespace];

    /// The name configuration and environments use.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Namespace => "namespace",
        }
    }

    /// The provider named `name`, or an error listing the names there are.
    pub fn parse(name: &str) -> Result<Self, UnknownProvider> {
        Self::ALL.into_iter().find(|k| k.as_str() == name).ok_or_else(|| UnknownProvider(name.to_owned()))
    }

    /// The tier placement compares environments' requests with.
    pub fn tier(self) -> ProviderTier {
        ProviderTier(self.as_str().to_owned())
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider name this crate cannot build. Displays as `must be "local" or "namespace",
/// not "<name>"`, to follow the name of the setting that held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProvider(pub String);

impl fmt::Display for UnknownProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = ProviderKind::ALL.iter().map(|k| format!("{:?}", k.as_str())).collect();
        let (last, rest) = names.split_last().expect("at least one provider");
        if rest.is_empty() {
            write!(f, "must be {last}, not {:?}", self.0)
        } else {
            write!(f, "must be {} or {last}, not {:?}", rest.join(", "), self.0)
        }
    }
}

impl std::error::Error for UnknownProvider {}

/// What building the providers takes from configuration. Flattened into the gateway's
/// `[environments]` table, so its keys sit there (`bwrap`); missing keys keep these defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderSettings {
    /// The bubblewrap program of the `namespace` provider: a path, or a name looked up on the
    /// gateway's `PATH`.
    pub bwrap: PathBuf,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self { bwrap: PathBuf::from("bwrap") }
    }
}

/// The providers a host may offer: `local` only when it is the default (it is not a security
/// boundary), `namespace` always (offered only where bubblewrap works, see [`available`]).
///
/// What a provider cannot do here is said once, at start-up: `local` without a cgroup cannot
/// stop a `setsid` child at session delete; `namespace` without slirp4netns fails the turns of
/// sessions whose environment allows networking.
pub fn host_providers(default: ProviderKind, settings: &ProviderSettings) -> Vec<Arc<dyn SandboxProvider>> {
    let mut out: Vec<Arc<dyn SandboxProvider>> = Vec::new();
    if default == ProviderKind::Local {
        let local = LocalProvider::new();
        if let Err(why) = local.cgroups() {
            warn!(
                reason = why,
                "the local sandbox cannot hold its processes in a cgroup here: a process a command detaches with \
                 setsid() survives its session's delete, and nothing bounds how many a session starts \
                 (run as root or with a delegated cgroup, or use the namespace sandbox)"
            );
        }
        out.push(Arc::new(local));
    }
    let namespace = NamespaceProvider::new(settings.bwrap.clone());
    if let Err(e) = namespace.check_networking() {
        warn!(error = %e, "namespace sandboxes of environments that allow networking will fail their turns");
    }
    out.push(Arc::new(namespace));
    out
}

/// The providers among `providers` that work on this host right now ([`SandboxProvider::check`]);
/// each one that does not is logged and left out.
pub fn available<'a>(
    providers: impl IntoIterator<Item = &'a Arc<dyn SandboxProvider>>,
) -> Vec<Arc<dyn SandboxProvider>> {
    providers
        .into_iter()
        .filter(|p| match p.check() {
            Ok(()) => true,
            Err(e) => {
                warn!(provider = %p.tier(), error = %e, "sandbox provider unavailable; not offered");
                false
            }
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row per name: what it parses to (the tier is the same name), or the message.
    #[test]
    fn names_table() {
        let rows: [(&str, Result<ProviderKind, &str>); 5] = [
            ("local", Ok(ProviderKind::Local)),
            ("namespace", Ok(ProviderKind::Namespace)),
            ("", Err(r#"must be "local" or "namespace", not """#)),
            ("docker", Err(r#"must be "local" or "namespace", not "docker""#)),
            ("Local", Err(r#"must be "local" or "namespace", not "Local""#)),
        ];
        for (name, want) in rows {
            let got = ProviderKind::parse(name).map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{name:?}");
            if let Ok(kind) = got {
                assert_eq!((kind.as_str(), kind.tier().as_str()), (name, name));
            }
        }
    }

    #[test]
    fn settings_default_to_bwrap_on_path() {
        let s: ProviderSettings = serde_json::from_str("{}").expect("empty settings");
        assert_eq!(s.bwrap, PathBuf::from("bwrap"));
    }

    #[test]
    fn local_is_built_only_when_it_is_the_default() {
        let settings = ProviderSettings::default();
        let tiers = |d| host_providers(d, &settings).iter().map(|p| p.tier().0).collect::<Vec<_>>();
        assert_eq!(tiers(ProviderKind::Local), ["local", "namespace"]);
        assert_eq!(tiers(ProviderKind::Namespace), ["namespace"]);
    }
}
