//! The `local` provider: processes run directly on the host, in the workspace directory.
//!
//! **This is not a security boundary.** A process started here runs as the gateway's user and
//! can read (and write) anything that user can: the host filesystem, the network, other
//! sessions' workspaces. What `local` does give:
//!
//! - the file tools of the [`Hand`](crate::Hand) stay confined to the workspace (they go
//!   through a directory handle, not through the shell), and refuse to change a mounted
//!   input ([`crate::readonly`]); a shell, running as the gateway's user, can still change or
//!   delete one (the runtime places a deleted one again before the next turn);
//! - a cleared, minimal environment, so the gateway's own secrets in its environment do not
//!   reach the model's commands;
//! - a process group per shell, so time limits and cancellation kill what it started;
//! - where the gateway can create cgroups (it runs as root, or has a delegated cgroup), a
//!   cgroup per sandbox: a process limit, and [`Sandbox::terminate`] (session delete) kills
//!   every descendant, even one that called `setsid()`. Without one, such a child survives
//!   its session (the start-up log says so);
//! - output caps.
//!
//! Use it for development and for trusted single-user setups; use `namespace` otherwise.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};

use gateway_core::environment::ProviderTier;
use gateway_core::placement::NetworkControl;

use crate::cgroup::{Cgroup, CgroupRoot};
use crate::{ProviderNotes, Sandbox, SandboxError, SandboxPolicy, SandboxProvider, WorkspaceDir};

/// `PATH` given to sandboxed processes (both providers).
pub(crate) const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `LANG` given to sandboxed processes: UTF-8 without depending on generated locales.
pub(crate) const SANDBOX_LANG: &str = "C.UTF-8";
/// `TERM` given to sandboxed processes: no tty, no colours, no cursor movement.
pub(crate) const SANDBOX_TERM: &str = "dumb";
/// A bash prologue that closes every descriptor but the standard three. Rust opens its own
/// descriptors close-on-exec, but one the gateway *inherited* (from a shell, a supervisor, a
/// test runner) reaches every child unless closed; a sandboxed program gets its three
/// streams and nothing else (a directory descriptor from outside would be a way out).
pub(crate) const CLOSE_INHERITED_FDS: &str =
    "for d in /proc/self/fd/*; do d=${d##*/}; case $d in 0|1|2) ;; *) eval \"exec $d>&-\" 2>/dev/null;; esac; done; ";

/// Runs processes on the host. See the module documentation: not a security boundary.
#[derive(Debug)]
pub struct LocalProvider {
    cgroups: OnceLock<Result<Arc<CgroupRoot>, String>>,
}

impl Default for LocalProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalProvider {
    pub fn new() -> Self {
        Self { cgroups: OnceLock::new() }
    }

    /// Where this provider's cgroups go, or why it has none (probed once).
    pub fn cgroups(&self) -> Result<&Arc<CgroupRoot>, &str> {
        self.cgroups.get_or_init(|| CgroupRoot::probe().map(Arc::new)).as_ref().map_err(String::as_str)
    }
}

impl SandboxProvider for LocalProvider {
    fn tier(&self) -> ProviderTier {
        crate::ProviderKind::Local.tier()
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

    fn isolates(&self) -> bool {
        false
    }

    /// The host path: processes see the workspace where it really is.
    fn inner_root(&self, workspace: &Path) -> PathBuf {
        workspace.to_owned()
    }

    fn notes(&self) -> ProviderNotes {
        ProviderNotes {
            works: "runs tools on the host: not a security boundary",
            unusable_hint: "see the reason",
            networking_hint: "see the reason",
        }
    }

    fn open(&self, workspace: WorkspaceDir, policy: &SandboxPolicy) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let cgroup = match self.cgroups() {
            Ok(root) => Some(CgroupRoot::create(root, policy.limits.max_processes).map_err(|e| {
                unavailable(format!("cannot create the sandbox's cgroup under {}: {e}", root.dir().display()))
            })?),
            Err(_) => None,
        };
        Ok(Arc::new(LocalSandbox { workspace, policy: policy.clone(), cgroup }))
    }
}

fn unavailable(reason: String) -> SandboxError {
    SandboxError::Unavailable { provider: "local".into(), reason }
}

/// A host directory; processes run in it with a minimal environment.
#[derive(Debug)]
pub struct LocalSandbox {
    workspace: WorkspaceDir,
    policy: SandboxPolicy,
    cgroup: Option<Cgroup>,
}

impl Sandbox for LocalSandbox {
    fn workspace(&self) -> &WorkspaceDir {
        &self.workspace
    }

    /// The host path: processes see the workspace where it really is.
    fn inner_root(&self) -> &Path {
        self.workspace.path()
    }

    /// The working directory is the handle (`/proc/self/fd/N`, resolved by the child before
    /// it execs), not the path, so a path swapped since the environment was realized is never
    /// where a command starts.
    ///
    /// A bash prologue closes inherited descriptors and joins the sandbox's cgroup (when there
    /// is one) before it execs the program.
    fn command(&self, program: &str, args: &[String]) -> io::Result<tokio::process::Command> {
        let join = self.cgroup.as_ref().map(Cgroup::join_script).unwrap_or_default();
        let script = format!("{CLOSE_INHERITED_FDS}{join}exec \"$@\"");
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-c", &script, "sandbox", program])
            .args(args)
            .current_dir(self.workspace.proc_path())
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .env("HOME", self.workspace.path())
            .env("LANG", SANDBOX_LANG)
            .env("TERM", SANDBOX_TERM)
            .process_group(0)
            .kill_on_drop(true);
        Ok(cmd)
    }

    fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertises_the_local_tier_without_network_control() {
        let p = LocalProvider::new();
        assert_eq!(p.tier(), crate::ProviderKind::Local.tier());
        assert_eq!(p.network_control(), NetworkControl::None);
        assert!(!p.isolates(), "local is not a security boundary");
    }

    #[test]
    fn commands_start_in_the_handle_not_the_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = std::fs::canonicalize(tmp.path()).expect("canonical");
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        let sb = LocalProvider::new().open(WorkspaceDir::open(&path, None).expect("dir"), &policy).expect("open");
        assert_eq!(sb.inner_root(), path);
        let cmd = sb.command("pwd", &["-P".into()]).expect("command");
        let argv: Vec<_> = cmd.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(&argv[argv.len() - 3..], ["sandbox", "pwd", "-P"]);
        let cwd = cmd.as_std().get_current_dir().expect("a working directory").display().to_string();
        assert!(cwd.starts_with("/proc/self/fd/"), "{cwd}");
        let envs: Vec<_> = cmd.as_std().get_envs().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert_eq!(envs.len(), 4, "{envs:?}");
    }
}
