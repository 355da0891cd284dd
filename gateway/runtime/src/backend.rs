//! The Backend port: what runs a turn (the native model loop, an ACP agent process, a remote
//! A2A agent), and the context a Worker hands it.
//!
//! A backend never writes to the store directly: every event goes through
//! [`RunContext::commit`], which is fenced by the claim's lease epoch. A backend that lost
//! its lease therefore cannot write anything, whatever it does (invariant 2), and the Worker,
//! not the backend, settles the run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::agent::BackendRef;
use gateway_core::event::{ErrorKind, Event, NewEvent};
use gateway_core::run::Claim;
use gateway_core::session::{PendingAction, Session};
use gateway_core::turn::RunView;
use gateway_store::{Commit, EnvironmentChange, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::previews::{Preview, PreviewBus};

/// How a turn ended, as far as the backend is concerned. The Worker turns it into the
/// closing events and the run's final state.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// The agent finished its turn.
    EndTurn,
    /// The turn waits for client answers to these tool uses.
    Parked { pending: Vec<PendingAction> },
    /// The turn stopped because a client interrupted it.
    Interrupted,
    /// The model declined.
    Refusal,
    /// The session's budget is used up: the next model request was not made.
    BudgetReached,
    /// The context was compacted as often in a row as allowed and still did not fit.
    CompactionLimit { message: String },
    /// The turn hit the model/tool round limit; the message says which.
    RoundLimit { message: String },
}

/// Why a turn could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// May succeed if tried again (rate limits, overload, network).
    #[error("{message}")]
    Transient { kind: ErrorKind, message: String, retry_after: Option<Duration> },
    /// The turn failed; the session stays usable.
    #[error("{message}")]
    Failed { kind: ErrorKind, message: String },
    /// The session cannot continue.
    #[error("{message}")]
    Terminal { kind: ErrorKind, message: String },
    /// The lease was lost (fenced) or the Worker is shutting down: stop, write nothing more.
    #[error("run abandoned: {0}")]
    Abandoned(String),
}

impl BackendError {
    /// The error's kind, or `abandoned` (a closed set: what metrics label failed calls with).
    pub fn kind_name(&self) -> &'static str {
        match self {
            BackendError::Transient { kind, .. }
            | BackendError::Failed { kind, .. }
            | BackendError::Terminal { kind, .. } => kind.as_str(),
            BackendError::Abandoned(_) => "abandoned",
        }
    }
}

impl From<StoreError> for BackendError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Fenced { .. } => BackendError::Abandoned(e.to_string()),
            StoreError::Unavailable(m) => BackendError::Transient {
                kind: ErrorKind::Unknown,
                message: format!("store unavailable: {m}"),
                retry_after: None,
            },
            other => BackendError::Failed { kind: ErrorKind::Unknown, message: other.to_string() },
        }
    }
}

/// Runs turns for one kind of published backend.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Runs (or resumes) the turn of `ctx`'s run. It must be resumable: after a crash a new
    /// claim calls it again with the events committed so far in the session's history, and a
    /// tool use without a result there must not be executed again (invariant 5).
    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError>;

    /// Stops what the backend keeps across turns (the ACP backend's agent processes). The
    /// process calls it once its Workers have stopped, before it closes the store; it may be
    /// called once per registration of the same backend, so it must be idempotent. Most
    /// backends keep nothing.
    async fn stop(&self) {}
}

/// The backends a process can run, by published backend.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: HashMap<BackendRef, Arc<dyn Backend>>,
}

impl BackendRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, backend: BackendRef, imp: Arc<dyn Backend>) {
        self.backends.insert(backend, imp);
    }

    pub fn get(&self, backend: &BackendRef) -> Option<&Arc<dyn Backend>> {
        self.backends.get(backend)
    }

    /// Stops every registered backend ([`Backend::stop`]), one after another.
    pub async fn stop_all(&self) {
        for backend in self.backends.values() {
            backend.stop().await;
        }
    }

    /// What a Worker of this process offers to claim.
    pub fn offered(&self) -> Vec<BackendRef> {
        let mut v: Vec<BackendRef> = self.backends.keys().cloned().collect();
        v.sort();
        v
    }
}

/// How many of the newest events [`RunContext::turn_view`] reads first: a plain turn of a
/// forwarding backend is a handful of events (its input, its start, an answer or two, its
/// end, and the end of the turn before), so one read almost always covers it; a longer one
/// is read again with a window eight times as wide. Each event read is decoded, so reading
/// 64 for a turn of six cost a third of a millisecond per ACP prompt (measured).
const TURN_WINDOW: u64 = 16;

/// What a run staged for its next commit or its settlement.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    pub(crate) events: Vec<NewEvent>,
    pub(crate) bindings: Vec<(String, String)>,
}

/// Everything a backend may use while running one claimed run.
pub struct RunContext {
    pub claim: Claim,
    /// The session as it was when the run was claimed (its snapshot is frozen anyway).
    pub session: Session,
    /// The host this Worker runs on.
    pub host: String,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) executors: Arc<crate::executors::Executors>,
    pub(crate) previews: PreviewBus,
    pub(crate) interrupted: CancellationToken,
    pub(crate) abandoned: CancellationToken,
    /// The seq of the last event this run committed (or saw at claim): where its previews go.
    pub(crate) last_seq: std::sync::atomic::AtomicU64,
    /// Events and bindings staged to ride with the next commit, or with the settlement (see
    /// `stage`).
    pub(crate) staged: std::sync::Mutex<Staged>,
    /// When the turn started and whether a client has seen anything of it yet.
    pub(crate) first: FirstEvent,
    /// The usage of the model requests this run committed (its settlement reports the
    /// session's total with it).
    pub(crate) requested: std::sync::Mutex<gateway_core::event::Usage>,
    pub(crate) metrics: Arc<gateway_services::Metrics>,
}

/// Times a turn's first visible event (a preview or a commit) once.
#[derive(Debug)]
pub(crate) struct FirstEvent {
    pub(crate) started: std::time::Instant,
    seen: std::sync::atomic::AtomicBool,
}

impl FirstEvent {
    pub(crate) fn now() -> Self {
        Self { started: std::time::Instant::now(), seen: Default::default() }
    }
}

impl RunContext {
    /// The session's committed history, oldest first.
    pub async fn history(&self) -> Result<Vec<Event>, BackendError> {
        self.events_after(0).await
    }

    /// Every committed event after `seq`, oldest first.
    async fn events_after(&self, seq: u64) -> Result<Vec<Event>, BackendError> {
        let mut out = Vec::new();
        loop {
            let after = out.last().map(|e: &Event| e.seq).unwrap_or(seq);
            let batch = self.store.events_after(&self.session.id, after, 1000).await?;
            let done = batch.len() < 1000;
            out.extend(batch);
            if done {
                return Ok(out);
            }
        }
    }

    /// The log as this run sees it: everything up to its input boundary, and its own
    /// commits; its current turn and the inputs it answers (`gateway_core::turn`). The one
    /// way a backend learns what to answer.
    pub async fn view(&self) -> Result<RunView, BackendError> {
        Ok(RunView::new(&self.claim.fence.run_id, self.claim.inputs_through, self.history().await?))
    }

    /// [`view`](Self::view) for a backend that needs only the current turn (its inputs, its
    /// calls): one whose agent keeps its own conversation (ACP, A2A). It reads back from the
    /// newest events only as far as the turn before this one (`RunView::covers_its_turn`),
    /// so a turn costs the same in a session of ten events and of a hundred thousand: reading
    /// the whole history made every prompt of a long editor session slower by its length.
    pub async fn turn_view(&self) -> Result<RunView, BackendError> {
        let tip = self.last_seq.load(std::sync::atomic::Ordering::Relaxed).max(self.claim.inputs_through);
        let mut window = TURN_WINDOW;
        loop {
            let from = tip.saturating_sub(window);
            let view =
                RunView::new(&self.claim.fence.run_id, self.claim.inputs_through, self.events_after(from).await?);
            if view.covers_its_turn(from) {
                return Ok(view);
            }
            window = window.saturating_mul(8);
        }
    }

    /// Commits events under this run's fence. Fails with `Abandoned` if the lease is lost.
    pub async fn commit(&self, events: Vec<NewEvent>) -> Result<Vec<Event>, BackendError> {
        self.commit_with(Commit { events, environment: None, bindings: vec![] }).await
    }

    /// Commits events together with a change of the session environment's lifecycle.
    pub async fn commit_environment(
        &self,
        events: Vec<NewEvent>,
        change: EnvironmentChange,
    ) -> Result<Vec<Event>, BackendError> {
        self.commit_with(Commit { events, environment: Some(change), bindings: vec![] }).await
    }

    /// Commits events together with session bindings: facts the backend must find again
    /// after a restart (e.g. a remote task id), written under the same fence.
    pub async fn commit_bindings(
        &self,
        events: Vec<NewEvent>,
        bindings: Vec<(String, String)>,
    ) -> Result<Vec<Event>, BackendError> {
        self.commit_with(Commit { events, environment: None, bindings }).await
    }

    /// The session's bindings as committed so far.
    pub async fn bindings(&self) -> Result<std::collections::BTreeMap<String, String>, BackendError> {
        Ok(self.store.bindings(&self.session.id).await?)
    }

    /// Stages events that need no commit of their own: they are committed, before its own
    /// events, by the run's next commit, or by its settlement when it has none (so a model
    /// request's span and its final answer cost one commit with the turn's end). Staged events
    /// are lost with the run if its claim is lost before then: only events whose loss a resumed
    /// run repairs may be staged (the model request is asked again), never a tool's journal
    /// entry (invariant 5) nor anything a client was told about.
    pub fn stage(&self, events: impl IntoIterator<Item = NewEvent>) {
        self.staged.lock().unwrap_or_else(|p| p.into_inner()).events.extend(events);
    }

    /// [`stage`](Self::stage) with session bindings, under the same rule: only facts whose
    /// loss with the claim a resumed run handles (it finds them missing and acts on that).
    pub fn stage_with_bindings(
        &self,
        events: impl IntoIterator<Item = NewEvent>,
        bindings: impl IntoIterator<Item = (String, String)>,
    ) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        staged.events.extend(events);
        staged.bindings.extend(bindings);
    }

    /// What is staged and not yet committed (for the settlement).
    pub(crate) fn take_staged(&self) -> Staged {
        std::mem::take(&mut *self.staged.lock().unwrap_or_else(|p| p.into_inner()))
    }

    async fn commit_with(&self, mut commit: Commit) -> Result<Vec<Event>, BackendError> {
        if self.abandoned.is_cancelled() {
            return Err(BackendError::Abandoned("lease lost before commit".into()));
        }
        let Staged { mut events, mut bindings } = self.take_staged();
        if !events.is_empty() {
            events.append(&mut commit.events);
            commit.events = events;
        }
        if !bindings.is_empty() {
            bindings.append(&mut commit.bindings);
            commit.bindings = bindings;
        }
        let committed = self.store.commit(&self.claim.fence, commit).await?;
        let used = gateway_core::event::Usage::of_requests(committed.iter().map(|e| &e.payload));
        self.requested.lock().unwrap_or_else(|p| p.into_inner()).add(&used);
        if let Some(last) = committed.last() {
            self.last_seq.fetch_max(last.seq, std::sync::atomic::Ordering::SeqCst);
            self.seen();
        }
        Ok(committed)
    }

    /// Publishes a streaming preview to subscribers that asked for them (never stored).
    pub fn preview(&self, preview: Preview) {
        let after_seq = self.last_seq.load(std::sync::atomic::Ordering::SeqCst);
        self.previews.publish(&self.session.id, after_seq, preview);
        self.seen();
    }

    /// Something of this turn became visible: the first time, how long that took.
    fn seen(&self) {
        if !self.first.seen.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.metrics.first_event(self.claim.run.backend.kind(), self.first.started.elapsed());
        }
    }

    /// This process's metrics, for backends timing their calls out (model requests, remote
    /// agents).
    /// The session's model usage up to now: what it had when the run was claimed, what this
    /// run committed, and what it staged (a budget is checked against all of it).
    pub fn usage(&self) -> gateway_core::event::Usage {
        let mut usage = self.session.usage.clone();
        usage.add(&self.requested.lock().unwrap_or_else(|p| p.into_inner()));
        let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        usage.add(&gateway_core::event::Usage::of_requests(staged.events.iter().map(|e| &e.payload)));
        usage
    }

    pub fn metrics(&self) -> &gateway_services::Metrics {
        &self.metrics
    }

    /// Records one turn's exchange with a remote agent (an ACP agent process, a remote A2A
    /// agent), started at `started`, as `gateway_remote_call_duration_seconds`.
    pub fn remote_call_ended(&self, started: std::time::Instant, result: &Result<TurnOutcome, BackendError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => e.kind_name(),
        };
        self.metrics.remote_call(self.claim.run.backend.kind(), outcome, started.elapsed());
    }

    /// Whether a client asked to interrupt this run.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted.is_cancelled()
    }

    /// Resolves when a client interrupts this run.
    pub async fn interrupted(&self) {
        self.interrupted.cancelled().await
    }

    /// Resolves when the run must stop without writing more (lease lost or shutdown).
    pub async fn abandoned(&self) {
        self.abandoned.cancelled().await
    }

    /// Makes sure a self-hosted executor serves this run's session, asking for one and waiting
    /// up to the connect timeout (DESIGN §5a); an interrupt ends the wait early. The port
    /// backends outside this crate (the native loop) reach executors through.
    pub async fn connect_executor(&self) -> Result<crate::executors::Connection, BackendError> {
        Ok(self.executors.connect(&self.session.id, &self.interrupted).await?)
    }

    /// The self-hosted executors' settings (connect timeout, output cap) of this process.
    pub fn executor_settings(&self) -> &crate::executors::ExecutorSettings {
        self.executors.settings()
    }

    /// The adapters' documents, read-only: a backend writes only through its fenced commits
    /// (`commit_bindings` for facts it must find again), so nothing it does outlives a lost
    /// lease.
    pub fn documents(&self) -> &dyn gateway_store::ReadDocuments {
        self.store.as_ref()
    }
}
