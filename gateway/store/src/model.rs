//! Request and result types of the Store port: pages, filters, commits and settlements.

use std::time::Duration;

use gateway_core::event::{EventKind, NewEvent};
use gateway_core::session::{EnvironmentState, PendingAction, SessionSnapshot, SessionStatus};
use gateway_core::{AgentId, EnvironmentId, Metadata, SessionId, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    #[default]
    Asc,
    Desc,
}

/// A position in a list ordered by `(created_at, id)` (or by seq for events, with `id` empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyset {
    pub at: i64,
    pub id: String,
}

/// Where a page starts: after `key` in the list's order, or (backward) before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    pub key: Keyset,
    pub backward: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: u32,
    pub order: Order,
    pub cursor: Option<PageCursor>,
}

impl PageRequest {
    pub fn first(limit: u32, order: Order) -> Self {
        Self { limit, order, cursor: None }
    }
}

/// A page of results with cursors to the neighbouring pages (None at either end).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<PageCursor>,
    pub prev: Option<PageCursor>,
}

/// Inclusive/exclusive bounds on a timestamp, each optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeRange {
    pub gt: Option<Timestamp>,
    pub gte: Option<Timestamp>,
    pub lt: Option<Timestamp>,
    pub lte: Option<Timestamp>,
}

#[derive(Debug, Clone, Default)]
pub struct AgentFilter {
    pub include_archived: bool,
    pub created: TimeRange,
}

#[derive(Debug, Clone, Default)]
pub struct EnvironmentFilter {
    pub include_archived: bool,
}

#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    pub agent_id: Option<AgentId>,
    pub agent_version: Option<u32>,
    /// Empty: any status.
    pub statuses: Vec<SessionStatus>,
    pub created: TimeRange,
    pub include_archived: bool,
}

#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Empty: every kind.
    pub kinds: Vec<EventKind>,
    pub created: TimeRange,
}

/// A new session, with the inputs it starts with (admitted like any later batch) and the
/// adapter state that explains it, all committed in one transaction.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Chosen by the caller (like an event's id) so that documents written with the session
    /// can name it.
    pub id: SessionId,
    pub environment_id: EnvironmentId,
    /// Its resources' `created_at` is set by the store to the creation time (database clock).
    pub snapshot: SessionSnapshot,
    pub title: Option<String>,
    pub metadata: Metadata,
    /// Its spend ceiling, if it has one (it can only get one now).
    pub budget: Option<gateway_core::session::Budget>,
    pub initial_inputs: Vec<NewEvent>,
    pub writes: AdmissionWrites,
}

/// A document written in an admission's transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentWrite {
    pub namespace: String,
    pub key: String,
    pub body: serde_json::Value,
    /// None: create it (`DocumentConflict` if it exists); Some(v): update it if still at `v`.
    pub expected: Option<u64>,
}

impl DocumentWrite {
    /// A document that must not exist yet.
    pub fn create(namespace: impl Into<String>, key: impl Into<String>, body: serde_json::Value) -> Self {
        Self { namespace: namespace.into(), key: key.into(), body, expected: None }
    }
}

/// Adapter state admitted with client inputs: the admission twin of [`Commit::bindings`].
///
/// DESIGN §3, "admission is one transaction": the inputs, the session they create and the
/// documents and bindings that explain them commit together or not at all. A refused
/// admission or a document conflict (compare-and-set failure) rolls the whole transaction
/// back, so an adapter never has to compensate for a half-written request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionWrites {
    /// Written in order, after the inputs are admitted.
    pub documents: Vec<DocumentWrite>,
    /// Session bindings (key, value), replacing any earlier value of the key.
    pub bindings: Vec<(String, String)>,
    /// Channels that follow the session from this admission on (`crate::Feeds`): the
    /// admission's own events are fed to them already.
    pub subscriptions: Vec<crate::Subscribe>,
    /// The trace context of the request that submits the inputs, stored with the run the
    /// admission queues (if it queues one), so the turn's span joins the request's trace.
    pub trace: Option<gateway_core::trace::TraceContext>,
}

impl AdmissionWrites {
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty() && self.bindings.is_empty() && self.subscriptions.is_empty()
    }
}

/// Changes to a session's client-editable fields; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SessionPatch {
    pub title: Option<Option<String>>,
    pub metadata: Option<Metadata>,
    /// A new frozen definition (the agent's tools and MCP servers, the vaults): only while
    /// the session is idle (`Guard::SessionRunning` otherwise).
    pub snapshot: Option<gateway_core::session::SessionSnapshot>,
    /// `Some(Some(b))` replaces the budget (`Guard::BudgetCreateOnly` on a session without
    /// one, `Guard::BudgetNotRaised` at or below what it spent), `Some(None)` removes it.
    pub budget: Option<Option<gateway_core::session::Budget>>,
}

/// A change to the session's environment lifecycle, recorded with the events that explain it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentChange {
    pub state: EnvironmentState,
    /// The host the environment now lives on (set when realized).
    pub host: Option<String>,
}

/// What a fenced commit writes: events, optionally an environment change, and session
/// bindings (facts a backend must find again after a restart).
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub events: Vec<NewEvent>,
    pub environment: Option<EnvironmentChange>,
    pub bindings: Vec<(String, String)>,
}

/// A JSON document owned by an adapter.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub namespace: String,
    pub key: String,
    pub body: serde_json::Value,
    /// Bumped by every write; the token of compare-and-set updates.
    pub version: u64,
    pub created_at: gateway_core::Timestamp,
    pub updated_at: gateway_core::Timestamp,
}

/// An HTTP delivery to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// Deliveries of one topic are made one at a time, oldest first.
    pub topic: String,
    pub url: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
}

/// A leased delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: gateway_core::DeliveryId,
    pub topic: String,
    pub url: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
}

/// What a deliverer asks the outbox for (`Outbox::claim_deliveries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryClaim<'a> {
    /// Who holds the leases taken.
    pub owner: &'a str,
    /// Only topics that start with this (each channel claims its own kind: `a2a:` pushes,
    /// `webhook:` webhooks).
    pub topics: &'a str,
    /// The most deliveries leased at once.
    pub limit: u32,
    /// How long each lease holds.
    pub lease: std::time::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
}

/// How a run ends (or is put back).
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    Completed,
    /// Waits for client answers; the session becomes idle with these pending actions.
    Parked {
        pending: Vec<PendingAction>,
    },
    Cancelled,
    Failed,
    /// Unrecoverable: the session is terminated.
    Terminated,
    /// Crashed past the budget; effects unknown.
    Indeterminate,
    /// Transient failure: queue the run again no earlier than `after`; the session shows
    /// `rescheduling` until a Worker picks it up.
    Retry {
        after: Duration,
    },
}

/// The final fenced commit of a claim.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub events: Vec<NewEvent>,
    pub outcome: RunOutcome,
    /// Session bindings written with the settlement (a backend's last facts, staged so the
    /// turn's end costs one commit).
    pub bindings: Vec<(String, String)>,
}

/// Lease parameters for claims.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTerms {
    /// How long a claim or renewal holds the lease.
    pub lease: Duration,
    /// A host not seen for this long is gone: environments realized there are lost.
    pub host_ttl: Duration,
}

/// What a renewal learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    pub cancel_requested: bool,
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The run queue at a glance (what admission samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Runs waiting to be claimed, in every session.
    pub queued: u64,
    /// How long the oldest run a Worker could claim now has waited (zero if none): a queue
    /// that Workers do not keep up with grows this, whatever the reason.
    pub oldest_wait: std::time::Duration,
}

/// How a database's schema compares with the migrations this build carries (what `gateway
/// check` reports; `migrate` applies the pending ones).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationStatus {
    /// This build's migrations the database has not applied, as `version description`.
    pub pending: Vec<String>,
    /// Versions the database has applied that this build does not know: a newer gateway
    /// migrated it, and this one would refuse to start on it.
    pub unknown: Vec<i64>,
    /// Versions recorded as failed (a migration that stopped half way).
    pub failed: Vec<i64>,
}
