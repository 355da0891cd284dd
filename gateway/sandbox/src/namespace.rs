//! The `namespace` provider: every process runs in a bubblewrap sandbox.
//!
//! All namespaces are unshared (user, mount, pid, ipc, uts, cgroup, and the network unless
//! the policy allows it), capabilities are dropped, processes run as uid/gid 65534, the system
//! (`/usr` and a curated part of `/etc`) and the sandbox's own root are read-only, `/tmp` and
//! `/dev/shm` are private tmpfs mounts and the only writable host directory is the workspace,
//! mounted at `/workspace`. Resource limits are
//! applied by a shell prologue inside the sandbox (see [`argv::limits_script`]).
//!
//! The gateway does not need privileges for this: bubblewrap uses unprivileged user
//! namespaces. [`NamespaceProvider::check`] fails when they are unavailable, so placement
//! fails closed instead of silently running unconfined.

pub mod argv;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gateway_core::environment::ProviderTier;
use gateway_core::placement::NetworkControl;

use crate::local::{SANDBOX_PATH, workspace_error};
use crate::{Sandbox, SandboxError, SandboxPolicy, SandboxProvider};
use argv::{HostLayout, INNER_ROOT, Spec};

/// How long a successful [`NamespaceProvider::check`] is trusted before it runs again.
const CHECK_CACHE: Duration = Duration::from_secs(30);
/// A sandboxed `true` that takes longer than this means something is badly wrong.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs processes in bubblewrap sandboxes.
#[derive(Debug)]
pub struct NamespaceProvider {
    /// `bwrap` as configured: a path, or a name looked up on the gateway's `PATH`.
    bwrap: PathBuf,
    last_ok: Mutex<Option<Instant>>,
    disable_userns: OnceLock<bool>,
}

impl Default for NamespaceProvider {
    /// Uses `bwrap` from the gateway's `PATH`.
    fn default() -> Self {
        Self::new("bwrap")
    }
}

impl NamespaceProvider {
    /// Uses the given bubblewrap executable: a path, or a name looked up on the gateway's
    /// `PATH` (when the provider is checked or a sandbox opened, not now).
    pub fn new(bwrap: impl Into<PathBuf>) -> Self {
        Self { bwrap: bwrap.into(), last_ok: Mutex::new(None), disable_userns: OnceLock::new() }
    }

    fn unavailable(reason: impl Into<String>) -> SandboxError {
        SandboxError::Unavailable { provider: "namespace".into(), reason: reason.into() }
    }

    /// The absolute path of bubblewrap, resolved now (the sandbox's cleared environment must
    /// not decide which program runs).
    fn resolve_bwrap(&self) -> Result<PathBuf, SandboxError> {
        find_program(&self.bwrap).ok_or_else(|| {
            Self::unavailable(format!("bubblewrap ({}) not found or not executable", self.bwrap.display()))
        })
    }

    /// Whether this bubblewrap knows `--disable-userns` (0.8+), asked once.
    fn disable_userns(&self, bwrap: &Path) -> bool {
        *self.disable_userns.get_or_init(|| {
            std::process::Command::new(bwrap)
                .arg("--help")
                .env_clear()
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("--disable-userns"))
                .unwrap_or(false)
        })
    }

    fn sandbox(&self, workspace: PathBuf, policy: &SandboxPolicy) -> Result<NamespaceSandbox, SandboxError> {
        let bwrap = self.resolve_bwrap()?;
        let disable_userns = self.disable_userns(&bwrap);
        Ok(NamespaceSandbox {
            bwrap,
            workspace,
            inner_root: PathBuf::from(INNER_ROOT),
            policy: policy.clone(),
            layout: HostLayout::probe(),
            disable_userns,
        })
    }

    /// Runs a sandboxed `true` over a scratch workspace.
    fn probe(&self) -> Result<(), SandboxError> {
        let scratch = tempfile::tempdir().map_err(|e| Self::unavailable(format!("no scratch directory: {e}")))?;
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        let sandbox = self.sandbox(scratch.path().to_owned(), &policy)?;
        let mut child = std::process::Command::new(&sandbox.bwrap)
            .args(sandbox.argv("true", &[]))
            .env_clear()
            .envs(argv::sandbox_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Self::unavailable(format!("cannot run {}: {e}", sandbox.bwrap.display())))?;
        let deadline = Instant::now() + CHECK_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Self::unavailable("a sandboxed `true` did not finish in time"));
                }
                Err(e) => return Err(Self::unavailable(format!("waiting for bubblewrap: {e}"))),
            }
        };
        if status.success() {
            return Ok(());
        }
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.by_ref().take(4096).read_to_string(&mut stderr);
        }
        Err(Self::unavailable(format!(
            "a sandboxed `true` failed ({status}); are unprivileged user namespaces enabled? {}",
            stderr.trim()
        )))
    }
}

impl SandboxProvider for NamespaceProvider {
    fn tier(&self) -> ProviderTier {
        ProviderTier::namespace()
    }

    fn network_control(&self) -> NetworkControl {
        NetworkControl::AllOrNothing
    }

    /// Ok when bubblewrap is installed and can create the sandbox (user namespaces usable).
    /// A success is remembered for a short while; failures are never cached.
    fn check(&self) -> Result<(), SandboxError> {
        let mut last_ok = self.last_ok.lock().unwrap_or_else(|p| p.into_inner());
        if last_ok.is_some_and(|t| t.elapsed() < CHECK_CACHE) {
            return Ok(());
        }
        self.probe()?;
        *last_ok = Some(Instant::now());
        Ok(())
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
        Ok(Arc::new(self.sandbox(workspace, policy)?))
    }
}

/// A workspace seen through bubblewrap.
#[derive(Debug)]
pub struct NamespaceSandbox {
    bwrap: PathBuf,
    workspace: PathBuf,
    inner_root: PathBuf,
    policy: SandboxPolicy,
    layout: HostLayout,
    disable_userns: bool,
}

impl NamespaceSandbox {
    /// The bubblewrap arguments that run `program args..` in this sandbox.
    pub fn argv(&self, program: &str, args: &[String]) -> Vec<OsString> {
        let spec = Spec {
            workspace: &self.workspace,
            network: self.policy.network,
            limits: &self.policy.limits,
            layout: &self.layout,
            disable_userns: self.disable_userns,
        };
        argv::bwrap_args(&spec, program, args)
    }
}

impl Sandbox for NamespaceSandbox {
    fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn inner_root(&self) -> &Path {
        &self.inner_root
    }

    /// bubblewrap runs with exactly the sandbox's environment (the gateway's is cleared), and
    /// the sandboxed program inherits it: nothing of it is on a command line.
    fn command(&self, program: &str, args: &[String]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bwrap);
        cmd.args(self.argv(program, args))
            .current_dir("/")
            .env_clear()
            .envs(argv::sandbox_env())
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }
}

/// `program` if it contains a `/` and is executable, else the first executable `program` in
/// the gateway's `PATH` (or the sandbox's default `PATH` when it has none).
fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.as_os_str().is_empty() {
        return None;
    }
    if program.components().count() > 1 || program.is_absolute() {
        return executable(program).then(|| program.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| SANDBOX_PATH.into());
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_absolute() && executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bwrap_makes_the_provider_unavailable() {
        let p = NamespaceProvider::new("/nonexistent/bwrap");
        assert!(matches!(p.check(), Err(SandboxError::Unavailable { .. })));
        let p = NamespaceProvider::new("no-such-bwrap-on-path");
        assert!(matches!(p.check(), Err(SandboxError::Unavailable { .. })));
        let tmp = tempfile::tempdir().expect("tempdir");
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        assert!(matches!(p.open(tmp.path(), &policy), Err(SandboxError::Unavailable { .. })));
    }

    #[test]
    fn programs_are_found_on_path() {
        assert!(find_program(Path::new("sh")).is_some_and(|p| p.is_absolute()));
        assert_eq!(find_program(Path::new("/bin/sh")), Some(PathBuf::from("/bin/sh")));
        assert_eq!(find_program(Path::new("")), None);
    }

    #[test]
    fn advertises_the_namespace_tier_with_all_or_nothing_network() {
        let p = NamespaceProvider::default();
        assert_eq!(p.tier(), ProviderTier::namespace());
        assert_eq!(p.network_control(), NetworkControl::AllOrNothing);
    }
}
