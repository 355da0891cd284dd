//! Runs, leases and the facts a Worker declares to claim them.

use serde::{Deserialize, Serialize};

use crate::agent::BackendRef;
use crate::environment::ProviderTier;
use crate::{RunId, SessionId, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Waiting to be claimed (possibly not before `available_at`).
    Queued,
    /// Claimed by a Worker holding a lease (or a lease that expired and awaits reclaim).
    Running,
    /// Finished normally.
    Completed,
    /// Ended waiting for client answers; a new run resumes the turn.
    Parked,
    /// Ended by an interrupt.
    Cancelled,
    /// Ended with an error.
    Failed,
    /// Ended after too many crashes: its effects are unknown.
    Indeterminate,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Parked => "parked",
            RunState::Cancelled => "cancelled",
            RunState::Failed => "failed",
            RunState::Indeterminate => "indeterminate",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Queued, Self::Running, Self::Completed, Self::Parked, Self::Cancelled, Self::Failed, Self::Indeterminate]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: RunId,
    pub session_id: SessionId,
    pub state: RunState,
    pub backend: BackendRef,
    /// The sandbox provider the run may need (None: never a local environment).
    pub provider: Option<ProviderTier>,
    pub lease_owner: Option<String>,
    /// Bumped by every claim; the fencing token of invariant 2.
    pub lease_epoch: i64,
    pub lease_expires_at: Option<Timestamp>,
    /// Consecutive claims that ended in a lost lease (invariant 6). Reset by a commit.
    pub crash_count: u32,
    /// Retries after transient backend failures.
    pub attempt: u32,
    pub available_at: Timestamp,
    /// Persisted cancel intent.
    pub cancel_requested: bool,
    /// Whether any Worker has started this run before.
    pub started: bool,
    /// The session's last seq when the run was first claimed: the inputs it answers. Inputs
    /// committed later belong to the next run.
    pub input_seq: Option<u64>,
    /// The trace context of the request that queued the run, if it was traced: the turn's
    /// span is opened under it (see `trace`).
    pub trace: Option<crate::trace::TraceContext>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a Worker can serve. It claims only runs it can place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOffer {
    /// Unique per Worker, e.g. `gw-a#0`; recorded as the lease owner.
    pub worker: String,
    /// The host this Worker runs on; session environments realized here stay here.
    pub host: String,
    pub backends: Vec<BackendRef>,
    pub providers: Vec<ProviderTier>,
}

/// The fencing token for one claim: every write of the run is conditional on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub run_id: RunId,
    pub session_id: SessionId,
    pub owner: String,
    pub epoch: i64,
}

/// A successful claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub fence: Fence,
    pub run: Run,
    /// The session as the claim left it (read under the claim's lock, its `last_seq` past the
    /// turn start the claim committed): the turn starts from it without reading it again.
    pub session: crate::session::Session,
    /// The run's input boundary, fixed by its first claim (see `turn`).
    pub inputs_through: u64,
    /// The session environment lives on a host that is gone; the run must fail with
    /// `EnvironmentLost` instead of getting a fresh environment here.
    pub environment_lost: bool,
}

impl Claim {
    /// Whether the previous holder lost its lease (crashed) and this claim picks the run up.
    pub fn is_reclaim(&self) -> bool {
        self.run.crash_count > 0
    }
}
