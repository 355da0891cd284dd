//! The `local` provider: processes run directly on the host, in the workspace directory.
//!
//! **This is not a security boundary.** A process started here runs as the gateway's user and
//! can read (and write) anything that user can: the host filesystem, the network, other
//! sessions' workspaces. What `local` does give:
//!
//! - the file tools of the [`Hand`](crate::Hand) stay confined to the workspace (they go
//!   through a directory handle, not through the shell);
//! - a cleared, minimal environment, so the gateway's own secrets in its environment do not
//!   reach the model's commands;
//! - a process group per shell, so time limits and cancellation kill everything it started;
//! - output caps.
//!
//! Use it for development and for trusted single-user setups; use `namespace` otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use gateway_core::environment::ProviderTier;
use gateway_core::placement::NetworkControl;

use crate::{Sandbox, SandboxError, SandboxPolicy, SandboxProvider};

/// `PATH` given to sandboxed processes (both providers).
pub(crate) const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `LANG` given to sandboxed processes: UTF-8 without depending on generated locales.
pub(crate) const SANDBOX_LANG: &str = "C.UTF-8";
/// `TERM` given to sandboxed processes: no tty, no colours, no cursor movement.
pub(crate) const SANDBOX_TERM: &str = "dumb";

/// Runs processes on the host. See the module documentation: not a security boundary.
#[derive(Debug, Default, Clone)]
pub struct LocalProvider;

impl LocalProvider {
    pub fn new() -> Self {
        Self
    }
}

impl SandboxProvider for LocalProvider {
    fn tier(&self) -> ProviderTier {
        ProviderTier::local()
    }

    fn network_control(&self) -> NetworkControl {
        NetworkControl::None
    }

    /// Ok when `bash` can be started with the sandbox's environment (the `bash` tool needs it).
    fn check(&self) -> Result<(), SandboxError> {
        let status = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", "true"])
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(unavailable(format!("`bash -c true` failed: {s}"))),
            Err(e) => Err(unavailable(format!("cannot run bash: {e}"))),
        }
    }

    /// Creates the workspace directory if it is missing.
    fn open(&self, workspace: &Path, policy: &SandboxPolicy) -> Result<Arc<dyn Sandbox>, SandboxError> {
        std::fs::create_dir_all(workspace).map_err(|e| workspace_error(workspace, e))?;
        let workspace = std::fs::canonicalize(workspace).map_err(|e| workspace_error(workspace, e))?;
        if !workspace.is_dir() {
            return Err(SandboxError::Workspace {
                path: workspace.display().to_string(),
                reason: "not a directory".into(),
            });
        }
        Ok(Arc::new(LocalSandbox { workspace, policy: policy.clone() }))
    }
}

fn unavailable(reason: String) -> SandboxError {
    SandboxError::Unavailable { provider: "local".into(), reason }
}

pub(crate) fn workspace_error(path: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::Workspace { path: path.display().to_string(), reason: e.to_string() }
}

/// A host directory; processes run in it with a minimal environment.
#[derive(Debug)]
pub struct LocalSandbox {
    workspace: PathBuf,
    policy: SandboxPolicy,
}

impl Sandbox for LocalSandbox {
    fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The host path: processes see the workspace where it really is.
    fn inner_root(&self) -> &Path {
        &self.workspace
    }

    fn command(&self, program: &str, args: &[String]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .env("HOME", &self.workspace)
            .env("LANG", SANDBOX_LANG)
            .env("TERM", SANDBOX_TERM)
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertises_the_local_tier_without_network_control() {
        let p = LocalProvider::new();
        assert_eq!(p.tier(), ProviderTier::local());
        assert_eq!(p.network_control(), NetworkControl::None);
    }

    #[test]
    fn open_creates_a_missing_workspace_and_command_runs_there() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ws = tmp.path().join("a/b");
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        let sb = LocalProvider::new().open(&ws, &policy).expect("open");
        assert!(ws.is_dir());
        assert_eq!(sb.inner_root(), sb.workspace());
        let cmd = sb.command("pwd", &[]);
        assert_eq!(cmd.as_std().get_current_dir(), Some(sb.workspace()));
        let envs: Vec<_> = cmd.as_std().get_envs().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert_eq!(envs.len(), 4, "{envs:?}");
    }

    #[test]
    fn open_refuses_a_file_as_workspace() {
        let tmp = tempfile::NamedTempFile::new().expect("tempfile");
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        assert!(matches!(LocalProvider::new().open(tmp.path(), &policy), Err(SandboxError::Workspace { .. })));
    }
}
