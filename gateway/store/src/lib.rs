//! gateway-store: the durable state of the gateway behind one `Store` port, with an embedded
//! SQLite implementation (the default) and a PostgreSQL one for several gateway processes.
//!
//! Both implementations run the same conformance suite (`conformance`, feature
//! `conformance`), so a behaviour the runtime relies on is a tested property of both.
//!
//! The port is split by concern: [`Catalog`] (agents, environments), [`Sessions`],
//! [`EventLog`], [`RunQueue`]. [`Store`] is their sum plus health and wake-ups.

mod error;
mod feeds;
mod files;
mod metrics;
mod model;
#[doc(hidden)]
pub mod peers;
pub mod rows;
mod skills;
mod vaults;
pub mod wake;
mod webhooks;
mod work;

mod sql;

pub use sql::postgres::{self, PgStore};
pub use sql::sqlite::{self, SqliteStore};
pub use sql::{Engine, SqlStore};

#[cfg(feature = "conformance")]
pub mod conformance;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::agent::{Agent, AgentSpec};
use gateway_core::environment::{Environment, EnvironmentSpec};
use gateway_core::event::{Event, NewEvent};
use gateway_core::run::{Claim, Fence, Run, WorkerOffer};
use gateway_core::session::{EnvironmentState, Session};
use gateway_core::{AgentId, ApiKeyId, DeliveryId, EnvironmentId, EventId, RunId, SessionId};

pub use error::{Guard, Result, StoreError};
pub use feeds::{Fed, FeedBatch, FeedKey, FeedSettlement, Feeds, LIFECYCLE_FEED, Subscribe};
pub use files::{CHUNK_BYTES, Files, NewFile, StoredFile, UploadQuota};
pub use metrics::StoreMetrics;
pub use model::*;
pub use peers::Peers;
pub use skills::{NewSkillVersion, SkillFile, Skills, StoredSkill, StoredSkillVersion};
pub use vaults::{NewCredential, SealedCredential, Vaults};
pub use wake::{Hint, Tip, Wakeups};
pub use webhooks::{EndpointOrigin, FEED_KINDS, NewEndpoint, WebhookEndpoint, Webhooks};
pub use work::{Beat, Poll, Pollers, Stop, WorkItem, WorkQueue, WorkState, WorkStats};

/// Agents (versioned, archive-only) and environments.
#[async_trait]
pub trait Catalog: Send + Sync {
    /// Creates version 1.
    async fn create_agent(&self, spec: AgentSpec) -> Result<Agent>;
    /// The latest version, or the given one.
    async fn get_agent(&self, id: &AgentId, version: Option<u32>) -> Result<Agent>;
    /// Appends version `base + 1` if the agent is still at `base`; `StaleVersion` otherwise.
    /// The check and the insert happen in one transaction, so two concurrent updates from
    /// the same base cannot both succeed.
    async fn update_agent(&self, id: &AgentId, base: u32, spec: AgentSpec) -> Result<Agent>;
    async fn archive_agent(&self, id: &AgentId) -> Result<Agent>;
    async fn list_agents(&self, filter: &AgentFilter, page: &PageRequest) -> Result<Page<Agent>>;
    /// One item per version, newest first unless `page.order` says otherwise.
    async fn list_agent_versions(&self, id: &AgentId, page: &PageRequest) -> Result<Page<Agent>>;

    async fn create_environment(&self, spec: EnvironmentSpec) -> Result<Environment>;
    async fn get_environment(&self, id: &EnvironmentId) -> Result<Environment>;
    async fn update_environment(&self, id: &EnvironmentId, spec: EnvironmentSpec) -> Result<Environment>;
    async fn archive_environment(&self, id: &EnvironmentId) -> Result<Environment>;
    /// Refused (`Guard::EnvironmentInUse`) while a live session references it.
    async fn delete_environment(&self, id: &EnvironmentId) -> Result<()>;
    async fn list_environments(&self, filter: &EnvironmentFilter, page: &PageRequest) -> Result<Page<Environment>>;
}

/// Sessions and the admission of client inputs.
#[async_trait]
pub trait Sessions: Send + Sync {
    /// Creates the session, admits its initial inputs and applies its `writes` in one
    /// transaction; the environment must exist and not be archived at that moment. A refused
    /// input or a conflicting document write (`Guard::DocumentConflict`) leaves nothing
    /// behind: no session, no event, no document, no binding.
    async fn create_session(&self, new: NewSession) -> Result<(Session, Vec<Event>)>;
    /// [`Sessions::create_session`] that also claims the run its initial inputs queued, as
    /// [`Sessions::submit_and_claim`] does.
    async fn create_session_and_claim(
        &self,
        new: NewSession,
        offer: &WorkerOffer,
        terms: LeaseTerms,
    ) -> Result<(Session, Vec<Event>, Option<Claim>)>;
    async fn get_session(&self, id: &SessionId) -> Result<Session>;
    async fn update_session(&self, id: &SessionId, patch: SessionPatch) -> Result<Session>;
    async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>>;
    /// Starts the backend of an idle session before its first input: queues a run with no
    /// inputs (an ACP agent's process then starts and says what it offers, and the turn
    /// ends), the session `running` until it settles. An input admitted while the run is
    /// queued joins it, as it would any queued run. Returns false, writing nothing, if the
    /// session is not idle, has a run, waits for answers, or is archived.
    async fn open_session(&self, id: &SessionId) -> Result<bool>;
    /// Refused while running.
    async fn archive_session(&self, id: &SessionId) -> Result<Session>;
    /// Refused while running. Appends `session_deleted` (the last event open streams see),
    /// marks the environment released (irreversibly) and hides the session from reads.
    async fn delete_session(&self, id: &SessionId) -> Result<()>;

    /// Moves the session's environment from one of `from` to `to` (compare-and-set, checked
    /// against the lifecycle rules) outside any run: hibernation by the host that holds it.
    /// Returns false, writing nothing, if the state was not one of `from`.
    async fn transition_environment(
        &self,
        id: &SessionId,
        from: &[EnvironmentState],
        to: EnvironmentState,
    ) -> Result<bool>;

    /// Gives up the environment of an idle session whose host is gone (not seen within
    /// `host_ttl`): the session's environment goes back to `none` with no host, and `lost`
    /// (the event that tells the session's clients the old workspace is lost) is appended, so
    /// the next run realizes a fresh environment wherever it is claimed. This is the only way
    /// back from a realized or hibernated environment, and only by explicit request: a run is
    /// never re-homed silently. `Guard::EnvironmentNotLost` while the host lives (or there is
    /// no environment), `Guard::SessionRunning` while a turn runs.
    async fn release_lost_environment(&self, id: &SessionId, host_ttl: Duration, lost: NewEvent) -> Result<Event>;

    /// The session's bindings: facts backends committed with `Commit::bindings`.
    async fn bindings(&self, id: &SessionId) -> Result<std::collections::BTreeMap<String, String>>;

    /// Replaces the frozen snapshot of a session no client has sent anything to and no run
    /// works on (an editor choosing another agent before its first prompt, the session perhaps
    /// opened: `open_session`). `Guard::SessionStarted` once it has an input or a run.
    async fn replace_snapshot(
        &self,
        id: &SessionId,
        snapshot: gateway_core::session::SessionSnapshot,
    ) -> Result<Session>;

    /// Replaces the session's resources and the requirements placed for them, if its
    /// resources are still `base` (by id, in order); `Guard::ResourcesChanged` otherwise.
    /// New resources (`created_at` 0) are stamped now; every file resource must name a file
    /// that exists (`NotFound` otherwise). Refused once the session is deleted or archived.
    async fn set_resources(
        &self,
        id: &SessionId,
        base: &[gateway_core::ResourceId],
        resources: Vec<gateway_core::session::Resource>,
        requirements: gateway_core::placement::Requirements,
    ) -> Result<Session>;

    /// Admits a batch of client inputs with `gateway_core::admission::admit`, on the session
    /// row locked for the transaction: appends the events, updates status and pending
    /// actions, queues or cancels runs, and applies the adapter's `writes` (documents and
    /// bindings that explain the inputs). Returns the committed events: a client is told
    /// "accepted" only after this returns (invariant 4). A refusal (`Rejected`) or a
    /// conflicting document write (`Guard::DocumentConflict`) commits nothing at all.
    async fn submit_inputs(&self, id: &SessionId, inputs: Vec<NewEvent>, writes: AdmissionWrites)
    -> Result<Vec<Event>>;

    /// [`Sessions::submit_inputs`] whose transaction also claims the run the admission
    /// queued, for `offer`, when that run can be claimed at once (as
    /// [`RunQueue::claim_runs`] would: the session's next run, placeable here), with its turn
    /// start: the admission and the turn's start are one commit instead of two. Returns the
    /// claim, which the caller must run or release; without one, the run waits for a Worker
    /// as after any admission.
    async fn submit_and_claim(
        &self,
        id: &SessionId,
        inputs: Vec<NewEvent>,
        writes: AdmissionWrites,
        offer: &WorkerOffer,
        terms: LeaseTerms,
    ) -> Result<(Vec<Event>, Option<Claim>)>;
}

/// The per-session event log: the single source of truth.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Events in seq order (or reverse). The page key is the seq (`Keyset::at`).
    async fn list_events(&self, session: &SessionId, filter: &EventFilter, page: &PageRequest) -> Result<Page<Event>>;
    /// Events with seq greater than `after`, ascending, at most `limit`: the subscription path.
    async fn events_after(&self, session: &SessionId, after: u64, limit: u32) -> Result<Vec<Event>>;
    async fn find_event(&self, session: &SessionId, id: &EventId) -> Result<Option<Event>>;
    /// The seq of the last event of each of `sessions` that exists, in one read: what the
    /// process-wide subscription poll asks about every watched session at once.
    async fn session_tips(&self, sessions: &[SessionId]) -> Result<Vec<(SessionId, u64)>>;
}

/// Run dispatch with leases fenced by epochs (invariant 2).
#[async_trait]
pub trait RunQueue: Send + Sync {
    /// Claims the oldest eligible run: queued and due, or running with an expired lease (a
    /// reclaim, which counts as a crash of the previous holder). Eligible means the worker
    /// offers the run's backend and provider and, once the session's environment lives on a
    /// host, is on that host; when that host is gone any worker may claim the run, with
    /// `environment_lost` set, to fail it. Never two running runs of one session. Every
    /// claim bumps the epoch; lease expiry is on the database clock.
    ///
    /// Claims up to `limit` runs (of distinct sessions) in one transaction, and in that same
    /// commit starts each claimed run's turn: a `turn_started` naming its input boundary,
    /// unless the run is a reclaim whose turn its predecessor already started. So a turn's
    /// start costs no commit of its own, and no claim exists without its turn start.
    async fn claim_runs(&self, offer: &WorkerOffer, terms: LeaseTerms, limit: u32) -> Result<Vec<Claim>>;
    /// [`RunQueue::claim_runs`] for one run.
    async fn claim_run(&self, offer: &WorkerOffer, terms: LeaseTerms) -> Result<Option<Claim>> {
        Ok(self.claim_runs(offer, terms, 1).await?.pop())
    }
    /// Extends the lease; `Fenced` if the epoch is no longer held.
    async fn renew_lease(&self, fence: &Fence, lease: Duration) -> Result<Renewal>;
    /// Extends every lease in `fences` still held by its fence, in one statement (a process
    /// renews all it holds at once). The answer is in `fences`' order: `None` for a lease that
    /// is lost (fenced), which its holder must abandon.
    async fn renew_leases(&self, fences: &[Fence], lease: Duration) -> Result<Vec<Option<Renewal>>>;
    /// Gives the run back to the queue without counting a crash (graceful shutdown).
    async fn release_run(&self, fence: &Fence) -> Result<()>;
    /// Appends events (and an environment change) if and only if `fence` still holds the
    /// lease, in the same transaction as the check; also renews the lease and resets the
    /// crash count. A stale fence gets `Fenced` and nothing is written.
    async fn commit(&self, fence: &Fence, commit: Commit) -> Result<Vec<Event>>;
    /// The final fenced commit: events, the run's end state and the session's status.
    async fn settle(&self, fence: &Fence, settlement: Settlement) -> Result<Vec<Event>>;
    async fn get_run(&self, id: &RunId) -> Result<Run>;
    /// The session's unfinished runs, oldest first.
    async fn active_runs(&self, session: &SessionId) -> Result<Vec<Run>>;
    /// How many runs wait to be claimed, in every session, and how long the oldest claimable
    /// one has waited (the admission bounds sample it).
    async fn queue_stats(&self) -> Result<QueueStats>;
    /// How late the store's work runs now: the longer of a read's wait for a place and a
    /// write's time from begin to durable, each the moving average of finished work or the
    /// age of the oldest still waiting, whichever is longer. The store's backlog: admission refuses new
    /// turns when it is too long. Zero for a store that does not measure it.
    fn lateness(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Records that this host is alive (environments realized on it stay claimable here).
    async fn heartbeat_host(&self, host: &str) -> Result<()>;
    /// Claims host id `host` for a process keeping its session workspaces in `workspaces`
    /// (and records it alive): refused with `Guard::HostInUse` while a process that keeps them
    /// elsewhere was seen under that id within `ttl`, since each would run turns on the
    /// other's workspaces.
    async fn claim_host(&self, host: &str, workspaces: &str, ttl: std::time::Duration) -> Result<()>;
}

/// A stored API key (never the secret: only its hash is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub name: String,
    pub created_at: gateway_core::Timestamp,
    pub revoked_at: Option<gateway_core::Timestamp>,
    /// Set on an environment key: valid only for that environment's work queue and sessions,
    /// and never counted as an API key.
    pub environment_id: Option<EnvironmentId>,
}

/// API keys and environment keys, by the hash of their secret.
#[async_trait]
pub trait ApiKeys: Send + Sync {
    async fn create_api_key(&self, name: &str, hash: &str) -> Result<ApiKey>;
    /// The live (not revoked) key with this hash.
    async fn find_api_key(&self, hash: &str) -> Result<Option<ApiKey>>;
    async fn list_api_keys(&self) -> Result<Vec<ApiKey>>;
    /// Revokes a key; false if it does not exist or was already revoked.
    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool>;
    /// How many live API keys exist (zero means loopback-only service). Environment keys do
    /// not count.
    async fn count_api_keys(&self) -> Result<u64>;
    async fn create_environment_key(&self, environment: &EnvironmentId, name: &str, hash: &str) -> Result<ApiKey>;
    async fn list_environment_keys(&self, environment: &EnvironmentId) -> Result<Vec<ApiKey>>;
    /// Revokes one of `environment`'s keys; false if it is not one, or already revoked.
    async fn revoke_environment_key(&self, environment: &EnvironmentId, id: &ApiKeyId) -> Result<bool>;
}

/// Reading the adapters' documents: all a backend gets (it writes only through its fenced
/// commits, so a run that lost its lease can change nothing).
#[async_trait]
pub trait ReadDocuments: Send + Sync {
    async fn get_document(&self, namespace: &str, key: &str) -> Result<Option<Document>>;
    /// Documents whose key starts with `prefix`, by key, after `after_key`.
    async fn list_documents(
        &self,
        namespace: &str,
        prefix: &str,
        after_key: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Document>>;
}

/// JSON documents in namespaces, owned by adapters (so protocol vocabulary stays out of the
/// schema). Writes are compare-and-set on the document's version; documents that explain an
/// input are written with it instead (`AdmissionWrites`), and documents that explain fed
/// deliveries with their settlement (`Feeds::settle_feed`).
#[async_trait]
pub trait Documents: ReadDocuments {
    /// Creates the document when `expected` is None (fails with `StaleVersion`-like
    /// `DocumentConflict` if it exists), else updates it if still at `expected`.
    async fn put_document(
        &self,
        namespace: &str,
        key: &str,
        body: &serde_json::Value,
        expected: Option<u64>,
    ) -> Result<Document>;
    async fn delete_document(&self, namespace: &str, key: &str) -> Result<bool>;
}

/// Durable outbound HTTP deliveries with leases and retries, one at a time per topic.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// Stores deliveries durably. A topic's deliveries are made in the order they were
    /// enqueued, within a call and across calls (callers enqueue one topic from one place at a
    /// time, as a leased feeder does).
    async fn enqueue_deliveries(&self, deliveries: Vec<NewDelivery>) -> Result<Vec<DeliveryId>>;
    /// Leases up to `claim.limit` due deliveries of `claim.topics`, each the oldest pending one
    /// of its topic, so a topic's deliveries are made in order. An expired lease makes a
    /// delivery due again.
    async fn claim_deliveries(&self, claim: DeliveryClaim<'_>) -> Result<Vec<Delivery>>;
    async fn delivered(&self, id: &DeliveryId) -> Result<()>;
    /// Schedules another attempt no earlier than `after`.
    async fn retry_delivery(&self, id: &DeliveryId, after: Duration, error: &str) -> Result<()>;
    /// Gives up on a delivery; later deliveries of its topic proceed.
    async fn fail_delivery(&self, id: &DeliveryId, error: &str) -> Result<()>;
    async fn delivery_state(&self, id: &DeliveryId) -> Result<Option<(DeliveryState, u32)>>;
    /// Deliveries not yet made or given up on, and how long the oldest of them has waited
    /// since it was enqueued (for operators: a growing age is a receiver that stopped taking).
    async fn outbox_stats(&self) -> Result<OutboxStats>;
}

/// The outbox at a glance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxStats {
    pub pending: u64,
    pub oldest_age: Duration,
}

/// The whole durable state of the gateway.
#[async_trait]
pub trait Store:
    Catalog
    + Sessions
    + EventLog
    + RunQueue
    + ApiKeys
    + Documents
    + Outbox
    + WorkQueue
    + Webhooks
    + Feeds
    + Files
    + Skills
    + Vaults
{
    /// Succeeds while the database answers.
    async fn ping(&self) -> Result<()>;
    /// Returns once every write begun before it is durable (or failed). Commits may be
    /// grouped (SQLite), so a write refused for a conflict can be answered before the write it
    /// conflicted with is committed; a caller that reads to resolve the conflict calls this
    /// first, and its read then sees what it conflicted with.
    async fn sync(&self) -> Result<()>;
    /// The wake-up hub fed by this store's commits (and, on PostgreSQL, other processes').
    fn wakeups(&self) -> Arc<Wakeups>;
    /// Messages to and from the other processes sharing this database, where the engine
    /// has them (PostgreSQL): best effort, never stored (`peers.rs`).
    fn peers(&self) -> Option<Arc<Peers>> {
        None
    }
    /// Applies pending migrations.
    async fn migrate(&self) -> Result<()>;
    /// Compares the database's applied migrations with this build's, changing nothing.
    async fn migration_status(&self) -> Result<MigrationStatus>;
    /// Closes connections and background listeners.
    async fn close(&self);
    /// Logical writes this store committed since it was opened: each admission, fenced
    /// commit, settlement, claim or document write counts once, however many of them shared
    /// a transaction (group commit). What a path costs the database, for operators and for
    /// the tests that hold a path to its count of commits.
    fn writes_committed(&self) -> u64;
    /// `sqlite` or `postgres`.
    fn engine(&self) -> &'static str;
}

/// Connection settings common to both engines.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Whether to send and deliver wake-up hints (polling works without them).
    pub wakeups: bool,
    /// Where the store records its commits (the process registers the same handles).
    pub metrics: StoreMetrics,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            wakeups: true,
            metrics: StoreMetrics::default(),
        }
    }
}

/// Opens the store a URL names: `sqlite:...` or `postgres://...`. Does not migrate.
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?))
    } else {
        Err(StoreError::Unavailable(format!(
            "unsupported database URL scheme in {:?}: use sqlite:PATH or postgres://",
            url.split(':').next().unwrap_or_default()
        )))
    }
}
