//! Store errors: typed, so each adapter maps them once to its protocol's error format.

use gateway_core::RunId;
use gateway_core::admission::AdmissionError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },

    /// Optimistic concurrency: the caller based its change on an older version.
    #[error("agent {id} is at version {current}, not {expected}")]
    StaleVersion { id: String, current: u32, expected: u32 },

    /// A state guard refused the operation (e.g. deleting a running session).
    #[error("{0}")]
    Guard(Guard),

    /// The inputs were refused by the admission rules.
    #[error(transparent)]
    Rejected(#[from] AdmissionError),

    /// The writer no longer holds the run's lease epoch; nothing it asked to write was written.
    #[error(
        "run {run_id} fenced: lease epoch {current_epoch} held by {current_owner} (state {state}), this worker {owner} had {epoch}"
    )]
    Fenced { run_id: RunId, owner: String, epoch: i64, current_owner: String, current_epoch: i64, state: String },

    /// The database could not be reached or timed out; the operation may be retried.
    #[error("database unavailable: {0}")]
    Unavailable(String),

    /// A value given to be stored is one the store refuses on every engine (text holding
    /// U+0000): the caller's input is invalid.
    #[error("{0}")]
    Unstorable(String),

    /// A stored value could not be decoded: a bug or a manual edit, never a client error.
    #[error("corrupt row: {0}")]
    Corrupt(String),

    #[error("database error: {0}")]
    Database(String),

    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

/// Why a state guard refused an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Guard {
    #[error("session {0} is running; interrupt it and wait for idle first")]
    SessionRunning(String),
    #[error("environment {0} is archived")]
    EnvironmentArchived(String),
    #[error("environment {0} is still referenced by sessions")]
    EnvironmentInUse(String),
    #[error("agent {0} is archived")]
    AgentArchived(String),
    #[error("session {0} is archived")]
    SessionArchived(String),
    #[error("environment of session {session} cannot go from {from} to {to}")]
    EnvironmentTransition { session: String, from: &'static str, to: &'static str },
    /// A new session was given the id of an existing (or deleted) one.
    #[error("session {0} already exists; a new session needs a new id")]
    SessionExists(String),
    #[error("session {0} already has history; its agent can no longer change")]
    SessionStarted(String),
    /// A work item is not in a state the operation accepts (acknowledging an item that is
    /// no longer queued, stopping one already stopped).
    #[error("work item {id} is {state}")]
    WorkState { id: String, state: &'static str },
    /// A file mounted by a live session cannot be deleted.
    #[error("file {file} is mounted by session {session}; delete the resource or the session first")]
    FileInUse { file: String, session: String },
    /// An upload's chunk would take its uploader's uploads in progress past their quota.
    #[error(
        "uploads in progress of {owner} hold {pending} bytes; one more chunk of {chunk} would pass their limit of {limit}"
    )]
    UploadQuota { owner: String, pending: u64, chunk: u64, limit: u64 },
    /// An upload's chunk would take the stored files and uploads past their quota.
    #[error(
        "files and uploads in progress hold {stored} bytes; one more chunk of {chunk} would pass the limit of {limit}"
    )]
    StorageQuota { stored: u64, chunk: u64, limit: u64 },
    /// An API key has registered as many webhook endpoints as it may.
    #[error("{creator} has registered {count} webhook endpoints, the most it may ({limit})")]
    WebhookLimit { creator: String, count: u64, limit: u64 },
    /// A skill's versions all have the skill's name.
    #[error("skill {skill} is named {expected:?}; a new version named {given:?} cannot be added to it")]
    SkillNameChanged { skill: String, expected: String, given: String },
    /// A skill keeps at least one version: delete the skill instead.
    #[error("version {version} is the only version of skill {skill}; delete the skill instead")]
    LastSkillVersion { skill: String, version: String },
    /// The session's resources changed since the caller read them.
    #[error("the resources of session {0} were changed concurrently; read them again")]
    ResourcesChanged(String),
    #[error("vault {0} is archived")]
    VaultArchived(String),
    /// A vault holds at most `gateway_core::vault::MAX_VAULT_CREDENTIALS` live credentials.
    #[error("vault {vault} holds {limit} live credentials, the most it may; archive or delete one first")]
    VaultFull { vault: String, limit: u64 },
    /// A vault holds one live credential per server.
    #[error("vault {vault} already holds live credential {existing} for {server_url}; update or archive it")]
    CredentialExists { vault: String, existing: String, server_url: String },
    #[error("credential {0} is archived")]
    CredentialArchived(String),
    /// Another live process holds this host id with its workspaces in another directory.
    #[error("host id {host} is in use by a live process whose session workspaces are in {workspaces}")]
    HostInUse { host: String, workspaces: String },
    /// Only an environment whose host is gone may be released by hand
    /// ([`crate::Sessions::release_lost_environment`]).
    #[error(
        "the environment of session {session} is {state}{}; only an environment whose host is gone can be released",
        host.as_deref().map(|h| format!(" on host {h}, which is alive")).unwrap_or_default()
    )]
    EnvironmentNotLost { session: String, state: &'static str, host: Option<String> },
    /// A session created without a budget (or whose budget was removed) cannot get one.
    #[error("session {0} has no budget; a budget can only be set when the session is created")]
    BudgetCreateOnly(String),
    /// A new budget must stay above what the session has already spent.
    #[error(
        "session {session} has already spent {spent_micros} micro-USD; a budget of {asked_micros} would not be above it"
    )]
    BudgetNotRaised { session: String, spent_micros: u64, asked_micros: u64 },
    #[error("document {namespace}/{key} was changed concurrently (expected version {expected:?})")]
    DocumentConflict { namespace: String, key: String, expected: Option<u64> },
}

impl StoreError {
    pub fn not_found(kind: &'static str, id: impl ToString) -> Self {
        StoreError::NotFound { kind, id: id.to_string() }
    }

    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. })
    }

    pub fn corrupt(what: impl std::fmt::Display) -> Self {
        StoreError::Corrupt(what.to_string())
    }
}

impl From<crate::sql::conn::DbError> for StoreError {
    fn from(e: crate::sql::conn::DbError) -> Self {
        use crate::sql::conn::DbErrorKind;
        match e.kind {
            DbErrorKind::Unavailable => StoreError::Unavailable(e.message),
            DbErrorKind::Decode => StoreError::Corrupt(e.message),
            DbErrorKind::Unstorable => StoreError::Unstorable(e.message),
            DbErrorKind::UniqueViolation | DbErrorKind::LockTimeout | DbErrorKind::Other => {
                StoreError::Database(e.message)
            }
        }
    }
}

/// Errors of sqlx itself: opening a migration connection, a PostgreSQL pool or listener.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        crate::sql::postgres::sqlx_error(e).into()
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
