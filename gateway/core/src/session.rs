//! Sessions: one conversation, with its frozen agent snapshot and requirements.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::placement::Requirements;
use crate::{EnvironmentId, EventId, Metadata, ResourceId, SessionId, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No work queued or running (possibly waiting for client answers).
    Idle,
    /// A run is queued or executing.
    Running,
    /// A transient failure; the run is queued again with a backoff.
    Rescheduling,
    /// Final: the session takes no more input.
    Terminated,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::Rescheduling => "rescheduling",
            SessionStatus::Terminated => "terminated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Idle, Self::Running, Self::Rescheduling, Self::Terminated].into_iter().find(|v| v.as_str() == s)
    }
}

/// The lifecycle of a session's local environment (invariant 8: `Released` is final).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentState {
    None,
    Realized,
    Hibernated,
    Released,
}

impl EnvironmentState {
    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentState::None => "none",
            EnvironmentState::Realized => "realized",
            EnvironmentState::Hibernated => "hibernated",
            EnvironmentState::Released => "released",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::None, Self::Realized, Self::Hibernated, Self::Released].into_iter().find(|v| v.as_str() == s)
    }

    /// Whether moving from `self` to `next` is allowed. Nothing leaves `Released`.
    pub fn may_become(self, next: EnvironmentState) -> bool {
        use EnvironmentState::*;
        match (self, next) {
            (Released, _) => false,
            (_, Released) => true,
            (None, Realized) | (Realized, Hibernated) | (Hibernated, Realized) => true,
            (a, b) => a == b,
        }
    }
}

/// A string that must never be printed (tokens, keys). `Debug` shows a placeholder.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Checkout {
    Branch { name: String },
    Commit { sha: String },
}

/// The most resources a session may have.
pub const MAX_RESOURCES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResourceKind {
    /// An uploaded file mounted read-only into the workspace.
    File { file_id: String, mount_path: String },
    /// A git repository checked out into the workspace.
    Repository {
        url: String,
        mount_path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkout: Option<Checkout>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        authorization_token: Option<Secret>,
    },
    /// A directory of the client's machine used as the session's workspace (an editor's `cwd`).
    Workspace {
        /// The directory as checked at creation: absolute, canonical, no symlink in it.
        path: String,
        /// The allowed root it was checked against (network editors): every realization
        /// resolves `path` beneath it, never outside.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<String>,
        /// Which directory was checked, recorded by the Coordinator when the session is
        /// created. A realization or wake whose `path` no longer names this directory (it was
        /// replaced, renamed over, or swapped for a symlink) fails closed. `None` only in
        /// sessions stored before identities were recorded (ADR 0010).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<DirIdentity>,
        /// More of the client's directories the session may use (an editor's
        /// `additionalDirectories`), each opened and checked like `path` and seen by the
        /// session's processes at its own absolute path (`mounts::check_extra_roots`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        additional: Vec<ExtraRoot>,
    },
}

/// One of a client workspace's additional directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraRoot {
    /// Absolute, canonical, no symlink in it (as `Workspace::path`).
    pub path: String,
    /// The allowed root it was checked against (network editors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Which directory was checked, recorded by the Coordinator (as `Workspace::identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DirIdentity>,
}

impl ResourceKind {
    /// A client workspace as an adapter asks for it; the Coordinator resolves it.
    pub fn workspace(path: impl Into<String>, root: Option<String>) -> Self {
        ResourceKind::Workspace { path: path.into(), root, identity: None, additional: Vec::new() }
    }

    /// A client workspace with additional directories (`(path, root)` each, checked by the
    /// adapter like the workspace's own path).
    pub fn workspace_with(
        path: impl Into<String>,
        root: Option<String>,
        additional: impl IntoIterator<Item = (String, Option<String>)>,
    ) -> Self {
        let additional = additional.into_iter().map(|(path, root)| ExtraRoot { path, root, identity: None }).collect();
        ResourceKind::Workspace { path: path.into(), root, identity: None, additional }
    }
}

/// The identity of a directory on this host: what a path named when it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DirIdentity {
    pub device: u64,
    pub inode: u64,
}

impl fmt::Display for DirIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {} inode {}", self.device, self.inode)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub id: ResourceId,
    pub kind: ResourceKind,
    pub created_at: Timestamp,
}

/// What a parked turn waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingKind {
    /// Approve or deny a tool call (`always_ask`).
    Confirmation,
    /// Run the tool and send its result (custom tools, self-hosted executors).
    ClientResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAction {
    /// The tool-use event that waits.
    pub event_id: EventId,
    pub kind: PendingKind,
}

/// The frozen definition a session runs with, fixed at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    pub agent: Agent,
    pub requirements: Requirements,
    pub resources: Vec<Resource>,
    /// The vaults whose credentials the session's MCP servers are called with, highest
    /// priority first (`crate::vault::credential_for`); resolved at each turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vault_ids: Vec<crate::VaultId>,
    /// The tool servers the session's client brought (an editor's MCP servers), their secret
    /// values sealed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tool_servers: Vec<ClientToolServer>,
}

/// The most tool servers a client may bring to one session.
pub const MAX_CLIENT_TOOL_SERVERS: usize = 32;

/// A tool server (MCP) a client supplied for its session. Values that often hold credentials
/// (environment variables, headers) are [`Secret`]s, sealed before the session is stored and
/// opened only where the server is started or called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum ClientToolServer {
    /// A command run inside the session's sandbox, spoken to over its standard input and
    /// output; `env` is passed in its environment, never on its command line.
    Stdio { name: String, command: String, args: Vec<String>, env: Vec<(String, Secret)> },
    /// A server at a URL, called from the gateway with these headers.
    Http { name: String, url: String, headers: Vec<(String, Secret)> },
    /// A server the client runs on its own machine and carries over its own connection to the
    /// gateway (an editor relay's stdio servers): reachable only while that connection is open,
    /// from the gateway process that holds it. `server_id` is the client's name for it.
    OnClient { name: String, server_id: String },
}

impl ClientToolServer {
    pub fn name(&self) -> &str {
        match self {
            ClientToolServer::Stdio { name, .. }
            | ClientToolServer::Http { name, .. }
            | ClientToolServer::OnClient { name, .. } => name,
        }
    }

    /// Every secret value, to seal or open in place.
    pub fn secrets_mut(&mut self) -> impl Iterator<Item = &mut Secret> {
        let pairs: &mut [(String, Secret)] = match self {
            ClientToolServer::Stdio { env, .. } => env,
            ClientToolServer::Http { headers, .. } => headers,
            ClientToolServer::OnClient { .. } => &mut [],
        };
        pairs.iter_mut().map(|(_, v)| v)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: SessionId,
    pub environment_id: EnvironmentId,
    pub snapshot: SessionSnapshot,
    pub title: Option<String>,
    pub metadata: Metadata,
    pub status: SessionStatus,
    pub pending_actions: Vec<PendingAction>,
    pub environment_state: EnvironmentState,
    /// The host the environment was realized on; later runs are claimable only there.
    pub environment_host: Option<String>,
    /// A self-hosted session's executor connection (None until compute is first asked for,
    /// and always on cloud environments).
    pub connection: Option<crate::environment::ConnectionStatus>,
    /// The seq of the last committed event.
    pub last_seq: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
    /// The model usage of every request its turns made, summed as they committed.
    pub usage: crate::event::Usage,
    /// The spend ceiling its model requests stop at; `None`: uncapped.
    pub budget: Option<Budget>,
}

/// A session's hard spend ceiling: no model request starts once its usage's list cost has
/// reached it, or once a request of a model without list prices was counted (whose cost it
/// cannot measure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// In millionths of a US dollar, the unit [`Usage::list_cost_micros`](crate::event::Usage) counts in.
    pub max_list_cost_micros: u64,
}

impl Budget {
    /// Whether `usage` has used this budget up.
    pub fn reached_by(&self, usage: &crate::event::Usage) -> bool {
        usage.list_cost().is_none_or(|cost| cost >= self.max_list_cost_micros)
    }
}

/// How an update changed a session's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BudgetChange {
    Set { budget: Budget },
    Removed,
}

/// What an operator sees of a session in a list (`gateway sessions list`): a neutral digest
/// that a session read from the store and one read from a gateway's API both come to, so one
/// table prints either.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    pub id: SessionId,
    pub status: SessionStatus,
    pub agent_id: String,
    pub agent_name: String,
    /// The backend as configured (`native`, `acp:NAME`, `a2a:NAME`).
    pub backend: String,
    pub environment_state: EnvironmentState,
    pub title: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&Session> for SessionSummary {
    fn from(s: &Session) -> Self {
        let agent = &s.snapshot.agent;
        Self {
            id: s.id.clone(),
            status: s.status,
            agent_id: agent.id.to_string(),
            agent_name: agent.spec.name.clone(),
            backend: agent.spec.backend.to_string(),
            environment_state: s.environment_state,
            title: s.title.clone(),
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_is_final() {
        use EnvironmentState::*;
        assert!(None.may_become(Realized));
        assert!(Realized.may_become(Hibernated));
        assert!(Hibernated.may_become(Realized));
        assert!(Realized.may_become(Released));
        for next in [None, Realized, Hibernated] {
            assert!(!Released.may_become(next));
        }
        assert!(!Hibernated.may_become(None));
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret("ghp_supersecret".into());
        assert!(!format!("{s:?}").contains("supersecret"));
    }
}
