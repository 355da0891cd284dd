//! gateway-sandbox: where a session's local work happens.
//!
//! - [`SandboxProvider`]: makes a [`Sandbox`] over a workspace directory. `local` runs
//!   processes on the host in the workspace with a cleared environment (confinement of file
//!   tools, time limits and output caps, but **not a security boundary**); `namespace` runs them
//!   in bubblewrap (all namespaces unshared, no capabilities, uid/gid 65534, read-only system,
//!   only the workspace writable, private /tmp, no network unless allowed, resource limits).
//! - [`Hand`]: the tool executor of one session: the built-in tools of
//!   `agent_toolset_20260401` that touch a workspace (`bash`, `read`, `write`, `edit`, `glob`,
//!   `grep`), all confined to it. `web_fetch` and `web_search` run in the gateway
//!   (`gateway_services::web`), never here.
//!
//! Every provider passes the one conformance suite in `conformance` (feature `conformance`);
//! providers that are a security boundary also pass its isolation suite.
//!
//! Module map: [`local`] and [`namespace`] are the providers, [`providers`] names them and
//! builds them from configuration; [`dir`] opens a workspace once,
//! to the handle every later use goes through; [`cgroup`] bounds and kills what a sandbox
//! starts; [`hand`] dispatches tool calls to `shell` (the persistent bash) and `files` (the
//! file tools, through a `cap_std` directory on the handle); `input` validates and bounds tool
//! inputs; [`tools`] holds the definitions.

pub mod cgroup;
pub mod dir;
mod files;
pub mod hand;
mod input;
pub mod local;
pub mod namespace;
pub mod providers;
pub mod readonly;
mod shell;
pub mod terminal;
mod text;
pub mod tools;

#[cfg(feature = "conformance")]
pub mod conformance;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gateway_core::environment::ProviderTier;
use gateway_core::placement::NetworkControl;
use serde::{Deserialize, Serialize};

pub use dir::{DirError, WorkspaceDir};
pub use files::FileError;
pub use hand::{Hand, MountWriter, ToolOutput};
pub use local::LocalProvider;
pub use namespace::NamespaceProvider;
pub use providers::{ProviderKind, ProviderSettings, UnknownProvider};
pub use readonly::ReadOnly;
pub use terminal::{TerminalError, TerminalExit, TerminalOutput, TerminalSpec, Terminals};
pub use text::capped_text;
pub use tools::{BuiltinToolDefinition, builtin_tool_definitions};

/// Why a sandbox could not be provided or used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The provider cannot work on this machine (e.g. bubblewrap missing, user namespaces off).
    #[error("sandbox provider {provider} is unavailable: {reason}")]
    Unavailable { provider: String, reason: String },
    /// The workspace is missing or unusable.
    #[error("workspace {path}: {reason}")]
    Workspace { path: String, reason: String },
    /// The workspace directory could not be opened as checked.
    #[error(transparent)]
    Dir(#[from] DirError),
    #[error("sandbox I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Resource limits applied to what runs in a sandbox.
///
/// Deserializable with the keys of the gateway's `[environments]` table (`command_timeout_secs`,
/// `max_command_timeout_secs`, `output_cap_bytes`); missing keys keep these defaults. The
/// process, file and memory limits are not configuration keys (yet): they keep their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Default wall-clock limit of one command (a tool input may ask for less or more, up to
    /// [`Limits::longest`]).
    #[serde(rename = "command_timeout_secs", with = "gateway_core::durations::secs")]
    pub wall_clock: Duration,
    #[serde(rename = "max_command_timeout_secs", with = "gateway_core::durations::secs")]
    pub max_wall_clock: Duration,
    /// Bytes of output kept per command; the rest is dropped and the result says so.
    #[serde(rename = "output_cap_bytes")]
    pub output_cap: usize,
    /// Processes (and threads) the sandbox may run at once: its cgroup's `pids.max` where the
    /// gateway can create cgroups, else `ulimit -u` (namespace provider; not binding for root).
    #[serde(skip)]
    pub max_processes: u64,
    /// Largest file a process may write, in bytes (namespace provider).
    #[serde(skip)]
    pub max_file_size: u64,
    /// Address space per process, in bytes (namespace provider).
    #[serde(skip)]
    pub max_memory: u64,
}

impl Limits {
    /// The longest any one command or terminal may run: `max_wall_clock`, but never less than
    /// the default `wall_clock` (an operator who raised only the default meant it to apply).
    pub fn longest(&self) -> Duration {
        self.max_wall_clock.max(self.wall_clock)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wall_clock: Duration::from_secs(120),
            max_wall_clock: Duration::from_secs(600),
            output_cap: 100_000,
            max_processes: 256,
            max_file_size: 1 << 30,
            max_memory: 4 << 30,
        }
    }
}

/// What a session's sandbox must enforce.
#[derive(Debug, Clone)]
pub struct SandboxPolicy {
    /// Whether processes may use the network (the namespace provider cuts it otherwise).
    pub network: bool,
    pub limits: Limits,
}

/// Makes sandboxes of one tier.
///
/// Every question about a provider is answered here, so nothing outside this crate compares
/// tier names to decide what a provider does: whether it is a security boundary
/// ([`SandboxProvider::isolates`], which the gateway's start-up guard asks), where processes
/// see the workspace ([`SandboxProvider::inner_root`], which editors' paths are mapped
/// through), what it needs for networking and what an operator is told about it. The
/// conformance suite checks the answers against what a sandboxed process really sees.
pub trait SandboxProvider: Send + Sync {
    fn tier(&self) -> ProviderTier;
    /// How far this provider can restrict the network (used by placement).
    fn network_control(&self) -> NetworkControl;
    /// Whether the provider works on this machine right now. Checked at start-up (to decide
    /// what the gateway offers) and again at every realization (placement fails closed).
    fn check(&self) -> Result<(), SandboxError>;
    /// Whether this provider is a security boundary: a process it starts cannot reach the
    /// host's files, other workspaces, the host's network or the gateway's privileges. A real
    /// model's tools never run on a provider that is not, unless the operator said so.
    fn isolates(&self) -> bool;
    /// Whether sandboxes that may use the network can be made here (Ok where the provider
    /// needs nothing more for them); an error says what is missing. Such sandboxes fail
    /// their turns while it is missing; the others work.
    fn check_networking(&self) -> Result<(), SandboxError> {
        Ok(())
    }
    /// Where processes in this provider's sandboxes see a workspace whose host path is
    /// `workspace`; absolute paths that tools and agents name are read against it. The same
    /// as [`Sandbox::inner_root`] of a sandbox over that workspace, and known without one
    /// (an editor shows paths of a session whose sandbox is hibernated or on another host).
    fn inner_root(&self, workspace: &Path) -> PathBuf;
    /// What an operator is told about this provider (`gateway check`).
    fn notes(&self) -> ProviderNotes;
    /// A sandbox over an opened workspace directory (the directory outlives the sandbox:
    /// hibernation drops the sandbox, keeps the files). Everything the sandbox does reaches
    /// the workspace through this handle, never through its path.
    fn open(&self, workspace: WorkspaceDir, policy: &SandboxPolicy) -> Result<Arc<dyn Sandbox>, SandboxError>;
}

/// What an operator is told about a provider, beside its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderNotes {
    /// What "works" means for it (`runs tools on the host: not a security boundary`).
    pub works: &'static str,
    /// What to do when [`SandboxProvider::check`] fails.
    pub unusable_hint: &'static str,
    /// What to do when [`SandboxProvider::check_networking`] fails.
    pub networking_hint: &'static str,
}

/// A sandbox bound to one workspace.
pub trait Sandbox: Send + Sync {
    /// The workspace directory (its handle; `.path()` for messages).
    fn workspace(&self) -> &WorkspaceDir;
    /// Where the workspace appears to processes inside the sandbox (`/workspace` in the
    /// namespace provider, the host path for `local`). Absolute tool paths are read against it.
    fn inner_root(&self) -> &Path;
    /// A command that runs `program args..` inside the sandbox, in the workspace, with a
    /// cleared environment, in its own process group (and the sandbox's cgroup, where there
    /// is one), killed when dropped. Fails when the descriptors it needs cannot be made.
    fn command(&self, program: &str, args: &[String]) -> io::Result<tokio::process::Command>;
    /// [`Sandbox::command`] plus environment variables for the program whose values must not
    /// appear in any argv (`/proc/*/cmdline` is readable by every user of the host): the
    /// credentials of an operator-configured agent command. They travel in the environment
    /// of the process the gateway spawns (bubblewrap itself for `namespace`, outside the
    /// sandbox), so they must come from the operator, never from a sandboxed party; what an
    /// agent asks for goes through `env NAME=VALUE` inside the sandbox instead.
    fn command_with_env(
        &self,
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> io::Result<tokio::process::Command> {
        let mut cmd = self.command(program, args)?;
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }
    fn policy(&self) -> &SandboxPolicy;
    /// The cgroup every process this sandbox starts joins, where the provider has one: what
    /// [`Sandbox::terminate`] and [`Sandbox::contains_descendants`] rest on.
    fn cgroup(&self) -> Option<&cgroup::Cgroup>;
    /// Kills every process this sandbox started that is still running, including those that
    /// left their process group (`setsid`). Where the provider has no cgroup this reaches only
    /// what the owners of those processes kill themselves (README: what `local` does not
    /// protect).
    fn terminate(&self) {
        if let Some(cg) = self.cgroup() {
            cg.kill_all();
        }
    }
    /// Whether [`Sandbox::terminate`] reaches every descendant (a cgroup holds them).
    fn contains_descendants(&self) -> bool {
        self.cgroup().is_some()
    }
    /// Whether processes this sandbox starts cannot change the workspace's read-only files
    /// ([`WorkspaceDir::read_only`]) as they were when the process started: then a process
    /// started before a file became read-only must be restarted for it to hold.
    fn enforces_read_only(&self) -> bool {
        false
    }
}
