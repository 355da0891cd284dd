//! The work queue of self-hosted environments (DESIGN §5a, docs/adr/0013): how a session asks
//! for compute, and how an executor takes, holds and gives back its hold on the session.
//!
//! A work item is one executor's hold on one session. At most one item per session is live
//! (not `Stopped`), so two executors never serve one session. Every change of a session's
//! connection (`pending`, `connected`, `disconnected`, `failed`) is committed in the same
//! transaction as the event that reports it, so the session's log and its `connection` never
//! disagree.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::{EnvironmentId, SessionId, Timestamp, WorkId};

use crate::error::Result;
use crate::model::{Page, PageRequest};

/// Where a work item stands, as the Managed Agents work queue names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkState {
    /// Waiting for an executor to poll it (or re-delivered: polled but never acknowledged).
    Queued,
    /// Acknowledged: an executor holds it.
    Starting,
    /// Heartbeating.
    Active,
    /// Asked to stop; the executor finishes and stops it.
    Stopping,
    Stopped,
}

impl WorkState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Queued => "queued",
            WorkState::Starting => "starting",
            WorkState::Active => "active",
            WorkState::Stopping => "stopping",
            WorkState::Stopped => "stopped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Queued, Self::Starting, Self::Active, Self::Stopping, Self::Stopped]
            .into_iter()
            .find(|w| w.as_str() == s)
    }

    /// An executor holds the item: the session's executor is connected.
    pub fn is_held(self) -> bool {
        matches!(self, WorkState::Starting | WorkState::Active)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    pub id: WorkId,
    pub environment_id: EnvironmentId,
    pub session_id: SessionId,
    pub state: WorkState,
    pub metadata: BTreeMap<String, String>,
    pub created_at: Timestamp,
    pub acknowledged_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub latest_heartbeat_at: Option<Timestamp>,
    pub stop_requested_at: Option<Timestamp>,
    pub stopped_at: Option<Timestamp>,
    /// The opaque value the next heartbeat must present (None before the first beat).
    pub heartbeat: Option<String>,
    /// The lease length the last beat (or the acknowledgement) granted.
    pub ttl: Option<Duration>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// The lease runs for `ttl` more; the next beat presents `item.heartbeat`.
    Extended { item: WorkItem, ttl: Duration },
    /// The item is stopping or stopped: its lease is not extended and the executor should end
    /// it (no comparison is made, as the Managed Agents reference says).
    Ending { item: WorkItem },
    /// `expected_last_heartbeat` was not the item's last heartbeat: another executor (or an
    /// earlier life of this one) holds it. Nothing was written.
    Mismatch { item: WorkItem },
}

/// The outcome of a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The item is now `stopping` (or `stopped`). `disconnected` is set when this stop ended
    /// the session's connection (its executor was connected until now).
    Done { item: WorkItem, disconnected: bool },
    /// It was already stopped: nothing changed.
    AlreadyStopped { item: WorkItem },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkStats {
    /// Items waiting to be polled.
    pub depth: u64,
    /// Items polled but not yet acknowledged.
    pub pending: u64,
    pub oldest_queued_at: Option<Timestamp>,
    /// Distinct workers (by `Anthropic-Worker-ID`) that polled within the window.
    pub workers_polling: u64,
}

/// How the store keeps who polled an environment's queue (work stats' `workers_polling`):
/// one row per distinct `Anthropic-Worker-ID`, a value the client chooses. Without bounds
/// every new id was a row kept forever (tens of thousands in seconds, slowing every writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pollers {
    /// A worker that has not polled for this long no longer counts, and its row may go: the
    /// rows of an environment are pruned when a worker it does not know yet polls.
    pub window: Duration,
    /// The most workers one environment records at once (those within `window`). A poll from
    /// one more is served all the same, and not recorded: `workers_polling` stops at the bound.
    pub max_per_environment: u64,
}

/// A poll of an environment's queue (`WorkQueue::poll_work`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll<'a> {
    /// The polling worker's `Anthropic-Worker-ID`, recorded within `pollers`.
    pub worker: Option<&'a str>,
    /// An item handed out this long ago and not acknowledged is handed out again.
    pub reclaim_after: Duration,
    pub pollers: Pollers,
}

/// A self-hosted environment's work queue.
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Asks for an executor for `session`: queues a work item unless one is live, and, unless
    /// the live item is already held, appends `EnvironmentConnection{pending}` (when it queued
    /// one) and `ConnectionRequested` to the session's log, in one transaction. Returns the
    /// session's live item: the one queued now, or the one already live (a held one means
    /// nothing was written).
    async fn request_connection(&self, session: &SessionId) -> Result<WorkItem>;

    /// The session's live item, if any.
    async fn live_work(&self, session: &SessionId) -> Result<Option<WorkItem>>;

    /// Gives up waiting: if the session's live item is still queued (no executor took it), stops
    /// it and appends `EnvironmentConnection{failed, error}`; returns true. Returns false, writing
    /// nothing, when an executor holds it (it connected in time after all).
    async fn give_up_connection(&self, session: &SessionId, error: &str) -> Result<bool>;

    /// Hands out the oldest queued item of `environment` whose session is live and that no poll
    /// handed out in the last `poll.reclaim_after`, recording who polled within `poll.pollers`.
    async fn poll_work(&self, environment: &EnvironmentId, poll: Poll<'_>) -> Result<Option<WorkItem>>;

    /// Acknowledges a polled item: `queued` becomes `starting`, with a lease of `lease`, and
    /// the session's connection becomes `connected` (event appended). `Guard::WorkState` if
    /// the item is no longer queued.
    async fn ack_work(&self, environment: &EnvironmentId, id: &WorkId, lease: Duration) -> Result<WorkItem>;

    /// Renews the lease for `ttl` if `expected` is the item's last heartbeat (`"NO_HEARTBEAT"`
    /// or empty before the first).
    async fn heartbeat_work(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        expected: &str,
        ttl: Duration,
    ) -> Result<Beat>;

    /// Stops an item: `force` (or an item nobody holds) goes straight to `stopped`, otherwise
    /// to `stopping`. A held item's session becomes `disconnected` (event appended), and the
    /// built-in calls it waited for are answered with an error result (never run again), in
    /// the same transaction.
    async fn stop_work(&self, environment: &EnvironmentId, id: &WorkId, force: bool) -> Result<Stop>;

    async fn get_work(&self, environment: &EnvironmentId, id: &WorkId) -> Result<WorkItem>;

    /// Merges `patch` into the item's metadata (`None` deletes a key).
    async fn update_work_metadata(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        patch: BTreeMap<String, Option<String>>,
    ) -> Result<WorkItem>;

    /// Items of `environment`, newest first.
    async fn list_work(&self, environment: &EnvironmentId, page: &PageRequest) -> Result<Page<WorkItem>>;

    /// `workers_polling` counts the workers recorded within `polling_window`.
    async fn work_stats(&self, environment: &EnvironmentId, polling_window: Duration) -> Result<WorkStats>;

    /// Stops every held item whose lease lapsed (its executor is gone): each session becomes
    /// `disconnected` and its open built-in calls are answered with an error result, as by a
    /// stop. Returns those sessions.
    async fn expire_work(&self) -> Result<Vec<SessionId>>;
}
