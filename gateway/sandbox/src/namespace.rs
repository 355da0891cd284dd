//! The `namespace` provider: every process runs in a bubblewrap sandbox.
//!
//! All namespaces are unshared (user, mount, pid, ipc, uts, cgroup, network), capabilities
//! are dropped, processes run as uid/gid 65534, the system (`/usr` and a curated part of
//! `/etc`) and the sandbox's own root are read-only, `/tmp` and `/dev/shm` are private tmpfs
//! mounts and the only writable host directory is the workspace, bound at `/workspace` from
//! the directory handle checked at realization (`--bind-fd`, never a path), less its mounted
//! inputs, each bound read-only over itself ([`crate::readonly`]). A sandbox that may
//! use the network gets its own network namespace connected by slirp4netns, which cannot
//! reach the host's loopback ([`net`]). Processes are limited by the sandbox's `pids` cgroup
//! where the gateway can create one ([`crate::cgroup`]), and by a shell prologue inside the
//! sandbox (see [`argv::limits_script`]).
//!
//! The gateway does not need privileges for this: bubblewrap uses unprivileged user
//! namespaces. [`NamespaceProvider::check`] fails when they are unavailable, and when the
//! gateway runs as root without a cgroup to bound processes (uid 0 ignores `ulimit -u`), so
//! placement fails closed instead of silently running unconfined.

pub(crate) mod argv;
pub(crate) mod net;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use gateway_core::environment::ProviderTier;
use gateway_core::placement::NetworkControl;

use crate::cgroup::{Cgroup, CgroupRoot};
use crate::local::SANDBOX_PATH;
use crate::{ProviderNotes, Sandbox, SandboxError, SandboxPolicy, SandboxProvider, WorkspaceDir};
use argv::{HostLayout, INNER_ROOT, Spec, WORKSPACE_FD};
use net::NetPipes;

/// How long a successful [`NamespaceProvider::check`] is trusted before it runs again.
const CHECK_CACHE: Duration = Duration::from_secs(30);
/// A sandboxed `true` that takes longer than this means something is badly wrong.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs processes in bubblewrap sandboxes.
#[derive(Debug)]
pub struct NamespaceProvider {
    /// `bwrap` as configured: a path, or a name looked up on the gateway's `PATH`.
    bwrap: PathBuf,
    /// `slirp4netns`, likewise: needed only by sandboxes that may use the network.
    slirp: PathBuf,
    last_ok: Mutex<Option<Instant>>,
    disable_userns: OnceLock<bool>,
    cgroups: OnceLock<Result<Arc<CgroupRoot>, String>>,
    /// The `resolv.conf` networked sandboxes see (shared with them: it lives as long as the
    /// last one).
    resolv: OnceLock<Result<Arc<ResolvConf>, String>>,
}

/// A private directory holding the `resolv.conf` of networked sandboxes.
#[derive(Debug)]
struct ResolvConf {
    _dir: tempfile::TempDir,
    path: PathBuf,
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
        Self {
            bwrap: bwrap.into(),
            slirp: PathBuf::from("slirp4netns"),
            last_ok: Mutex::new(None),
            disable_userns: OnceLock::new(),
            cgroups: OnceLock::new(),
            resolv: OnceLock::new(),
        }
    }

    /// Uses this `slirp4netns` (a path, or a name on the gateway's `PATH`) for networked
    /// sandboxes.
    pub fn with_slirp4netns(mut self, slirp: impl Into<PathBuf>) -> Self {
        self.slirp = slirp.into();
        self
    }

    /// Where this provider's cgroups go, or why it has none (probed once).
    pub fn cgroups(&self) -> Result<&Arc<CgroupRoot>, &str> {
        self.cgroups.get_or_init(|| CgroupRoot::probe().map(Arc::new)).as_ref().map_err(String::as_str)
    }

    /// The slirp4netns networked sandboxes need, or why there is none.
    pub fn networking(&self) -> Result<PathBuf, SandboxError> {
        find_program(&self.slirp).ok_or_else(|| {
            Self::unavailable(format!(
                "slirp4netns ({}) is needed for sandboxes that may use the network and was not found; \
                 sandboxes never share the host's network",
                self.slirp.display()
            ))
        })
    }

    /// Refuses to run as root without a cgroup: uid 0 is exempt from `RLIMIT_NPROC`, so
    /// nothing else would bound the processes a sandbox starts.
    fn process_limit(&self) -> Result<(), SandboxError> {
        match self.cgroups() {
            Ok(_) => Ok(()),
            Err(why) if nix::unistd::geteuid().is_root() => Err(Self::unavailable(format!(
                "the gateway runs as root, which `ulimit -u` does not limit, and it cannot create a pids cgroup \
                 to bound a sandbox's processes ({why}); run the gateway as an unprivileged user or give it a \
                 delegated cgroup"
            ))),
            Err(_) => Ok(()),
        }
    }

    /// The `resolv.conf` of networked sandboxes: slirp4netns's resolver only.
    fn resolv_conf(&self) -> Result<Arc<ResolvConf>, SandboxError> {
        let made = self.resolv.get_or_init(|| {
            let dir = tempfile::Builder::new().prefix("gateway-sandbox-").tempdir().map_err(|e| e.to_string())?;
            let path = dir.path().join("resolv.conf");
            let mut f = std::fs::File::create(&path).map_err(|e| e.to_string())?;
            writeln!(f, "nameserver {}", net::SANDBOX_DNS).map_err(|e| e.to_string())?;
            Ok(Arc::new(ResolvConf { _dir: dir, path }))
        });
        made.as_ref()
            .map(Arc::clone)
            .map_err(|e| Self::unavailable(format!("cannot write the sandbox's resolv.conf: {e}")))
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

    fn sandbox(&self, workspace: WorkspaceDir, policy: &SandboxPolicy) -> Result<NamespaceSandbox, SandboxError> {
        let bwrap = self.resolve_bwrap()?;
        let disable_userns = self.disable_userns(&bwrap);
        let network = match policy.network {
            false => None,
            true => Some(Network { slirp: self.networking()?, resolv: self.resolv_conf()? }),
        };
        let cgroup = match self.cgroups() {
            Ok(root) => Some(CgroupRoot::create(root, policy.limits.max_processes).map_err(|e| {
                Self::unavailable(format!("cannot create the sandbox's cgroup under {}: {e}", root.dir().display()))
            })?),
            Err(_) => None,
        };
        let inner_root = self.inner_root(workspace.path());
        Ok(NamespaceSandbox {
            bwrap,
            workspace,
            inner_root,
            policy: policy.clone(),
            layout: HostLayout::probe(),
            disable_userns,
            network,
            cgroup,
            attachments: Mutex::new(Vec::new()),
        })
    }

    /// Runs a sandboxed `true` over a scratch workspace.
    fn probe(&self) -> Result<(), SandboxError> {
        self.process_limit()?;
        let scratch = tempfile::tempdir().map_err(|e| Self::unavailable(format!("no scratch directory: {e}")))?;
        let policy = SandboxPolicy { network: false, limits: Default::default() };
        let path = std::fs::canonicalize(scratch.path()).map_err(|e| Self::unavailable(e.to_string()))?;
        let sandbox = self.sandbox(WorkspaceDir::open(&path, None)?, &policy)?;
        let fd = sandbox.workspace.duplicate().map_err(|e| Self::unavailable(e.to_string()))?;
        let mut cmd = std::process::Command::new(&sandbox.bwrap);
        cmd.args(sandbox.argv("true", &[], &[], &[]))
            .env_clear()
            .envs(argv::sandbox_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.fd_mappings(vec![FdMapping { parent_fd: fd, child_fd: WORKSPACE_FD }])
            .map_err(|e| Self::unavailable(e.to_string()))?;
        let mut child =
            cmd.spawn().map_err(|e| Self::unavailable(format!("cannot run {}: {e}", sandbox.bwrap.display())))?;
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
        crate::ProviderKind::Namespace.tier()
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

    fn isolates(&self) -> bool {
        true
    }

    fn check_networking(&self) -> Result<(), SandboxError> {
        self.networking().map(drop)
    }

    /// `/workspace`, wherever the workspace is on the host.
    fn inner_root(&self, _workspace: &Path) -> PathBuf {
        PathBuf::from(INNER_ROOT)
    }

    fn notes(&self) -> ProviderNotes {
        ProviderNotes {
            works: "bubblewrap can create a sandbox",
            unusable_hint: "install bubblewrap (Debian: apt install bubblewrap) or set environments.bwrap to its \
                            path; unprivileged user namespaces must be enabled",
            networking_hint: "install slirp4netns (Debian: apt install slirp4netns)",
        }
    }

    fn open(&self, workspace: WorkspaceDir, policy: &SandboxPolicy) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.process_limit()?;
        // Bound at their own paths: never over a system directory or each other (the rule
        // the Coordinator applied at creation, checked again where it matters most).
        let text = |p: &Path| p.to_str().map(str::to_owned);
        let extra: Option<Vec<String>> = workspace.extra().iter().map(|d| text(d.path())).collect();
        let refused = |reason: String| SandboxError::Workspace { path: workspace.path().display().to_string(), reason };
        let extra = extra.ok_or_else(|| refused("an additional directory's path is not UTF-8".into()))?;
        let primary = text(workspace.path()).unwrap_or_default();
        gateway_core::mounts::check_extra_roots(&primary, extra.iter().map(String::as_str))
            .map_err(|e| refused(e.to_string()))?;
        Ok(Arc::new(self.sandbox(workspace, policy)?))
    }
}

/// How a networked sandbox reaches the outside.
#[derive(Debug)]
struct Network {
    slirp: PathBuf,
    resolv: Arc<ResolvConf>,
}

/// A workspace seen through bubblewrap.
#[derive(Debug)]
pub struct NamespaceSandbox {
    bwrap: PathBuf,
    workspace: WorkspaceDir,
    inner_root: PathBuf,
    policy: SandboxPolicy,
    layout: HostLayout,
    disable_userns: bool,
    network: Option<Network>,
    cgroup: Option<Cgroup>,
    /// The tasks attaching networking to this sandbox's processes; aborted (and their
    /// slirp4netns killed) with the sandbox.
    attachments: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl NamespaceSandbox {
    /// The bubblewrap arguments that run `program args..` in this sandbox, with `read_only`
    /// (workspace-relative) bound read-only from descriptors [`argv::FIRST_READ_ONLY_FD`]...,
    /// and the additional directories `extra` (descriptor, place) bound writable.
    pub fn argv(
        &self,
        program: &str,
        args: &[String],
        read_only: &[PathBuf],
        extra: &[(i32, PathBuf)],
    ) -> Vec<OsString> {
        let spec = Spec {
            network: self.network.as_ref().map(|n| n.resolv.path.as_path()),
            limits: &self.policy.limits,
            layout: &self.layout,
            disable_userns: self.disable_userns,
            read_only,
            extra,
        };
        argv::bwrap_args(&spec, program, args)
    }
}

impl Drop for NamespaceSandbox {
    fn drop(&mut self) {
        for task in self.attachments.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
    }
}

impl Sandbox for NamespaceSandbox {
    fn workspace(&self) -> &WorkspaceDir {
        &self.workspace
    }

    fn inner_root(&self) -> &Path {
        &self.inner_root
    }

    /// bubblewrap runs with exactly the sandbox's environment (the gateway's is cleared), and
    /// the sandboxed program inherits it: nothing of it is on a command line. It gets the
    /// workspace as a descriptor, and (networked) the pipes its network attachment needs;
    /// it closes them before the program runs.
    fn command(&self, program: &str, args: &[String]) -> std::io::Result<tokio::process::Command> {
        let mut fds = vec![FdMapping { parent_fd: self.workspace.duplicate()?, child_fd: WORKSPACE_FD }];
        let pipes = match &self.network {
            Some(_) => Some(NetPipes::new(argv::STATUS_FD, argv::BLOCK_FD)?),
            None => None,
        };
        let mut read_only = Vec::new();
        for (i, (rel, fd)) in self.workspace.read_only().binds()?.into_iter().enumerate() {
            fds.push(FdMapping { parent_fd: fd, child_fd: argv::FIRST_READ_ONLY_FD + i as i32 });
            read_only.push(rel);
        }
        // The additional directories' descriptors follow the read-only files'.
        let mut extra = Vec::new();
        for (i, dir) in self.workspace.extra().iter().enumerate() {
            let child_fd = argv::FIRST_READ_ONLY_FD + (read_only.len() + i) as i32;
            fds.push(FdMapping { parent_fd: dir.duplicate()?, child_fd });
            extra.push((child_fd, dir.path().to_path_buf()));
        }
        let argv = self.argv(program, args, &read_only, &extra);
        let (exe, argv) = match &self.cgroup {
            Some(cg) => cg.wrap(self.bwrap.as_os_str(), argv),
            None => (self.bwrap.clone().into_os_string(), argv),
        };
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(argv).current_dir("/").env_clear().envs(argv::sandbox_env()).process_group(0).kill_on_drop(true);
        if let (Some(net), Some(mut pipes)) = (&self.network, pipes) {
            fds.append(&mut pipes.child_ends);
            let task = pipes.attach(net.slirp.clone());
            let mut attachments = self.attachments.lock().unwrap_or_else(|p| p.into_inner());
            attachments.retain(|t| !t.is_finished());
            attachments.push(task);
        }
        cmd.fd_mappings(fds).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(cmd)
    }

    fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// Every process is started with the read-only files bound read-only (`--ro-bind-fd`).
    fn enforces_read_only(&self) -> bool {
        true
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
        let dir = WorkspaceDir::open(&std::fs::canonicalize(tmp.path()).expect("canonical"), None).expect("dir");
        assert!(matches!(p.open(dir, &policy), Err(SandboxError::Unavailable { .. })));
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
        assert_eq!(p.tier(), crate::ProviderKind::Namespace.tier());
        assert_eq!(p.network_control(), NetworkControl::AllOrNothing);
        assert!(p.isolates(), "namespace is a security boundary");
    }
}
