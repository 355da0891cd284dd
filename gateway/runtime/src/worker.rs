//! Workers: claim a run, execute its backend under a lease, settle it with a fenced commit.
//!
//! A process runs N Workers sharing one host identity. Each claim is renewed by a lease
//! keeper while the backend runs; losing the lease (a renewal or commit is fenced) abandons
//! the run without writing anything more. Graceful shutdown stops claiming, lets running
//! turns finish for a grace period, then releases their leases so another process picks
//! them up at once instead of after lease expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use gateway_core::environment::ProviderTier;
use gateway_core::event::{ErrorKind, EventKind, EventPayload, NewEvent, RetryStatus, StopReason};
use gateway_core::run::{Claim, Run, WorkerOffer};
use gateway_store::{EventFilter, LeaseTerms, Order, PageRequest, RunOutcome, Settlement, Store, StoreError};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::backend::{BackendError, BackendRegistry, RunContext, TurnOutcome};
use crate::metrics::Metrics;
use crate::previews::PreviewBus;

/// Retries after transient backend failures: exponential backoff with jitter.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base: Duration::from_secs(1), max: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// Backoff before retry number `attempt + 1`: half fixed, half random ("equal jitter"),
    /// never shorter than what the failure asked for.
    pub fn backoff(&self, attempt: u32, at_least: Option<Duration>) -> Duration {
        let exp = self.base.saturating_mul(2u32.saturating_pow(attempt.min(16))).min(self.max);
        let half = exp / 2;
        let jittered = half + half.mul_f64(fastrand::f64());
        jittered.max(at_least.unwrap_or_default())
    }
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this process's Workers `<instance>#<n>` (the lease owner recorded in the store).
    pub instance: String,
    /// The host this process runs on; environments realized here stay here.
    pub host: String,
    pub workers: usize,
    pub lease: Duration,
    pub host_ttl: Duration,
    /// How often an idle Worker polls for due runs when no wake-up arrives.
    pub poll: Duration,
    /// Consecutive crashes (lost leases) a run may have before it ends as indeterminate.
    pub crash_budget: u32,
    pub retry: RetryPolicy,
    pub shutdown_grace: Duration,
    pub providers: Vec<ProviderTier>,
    /// Where claims and settlements are counted (shared with the Coordinator for `/metrics`).
    pub metrics: Arc<Metrics>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            instance: "gateway".into(),
            host: "localhost".into(),
            workers: 4,
            lease: Duration::from_secs(30),
            host_ttl: Duration::from_secs(90),
            poll: Duration::from_secs(1),
            crash_budget: 3,
            retry: RetryPolicy::default(),
            shutdown_grace: Duration::from_secs(10),
            providers: vec![ProviderTier::local()],
            metrics: Arc::new(Metrics::default()),
        }
    }
}

struct Shared {
    store: Arc<dyn Store>,
    backends: BackendRegistry,
    previews: PreviewBus,
    config: WorkerConfig,
    /// Stop claiming new runs.
    stop: CancellationToken,
    /// Grace is over: abandon running turns and release their leases.
    drain: CancellationToken,
}

/// The Workers of one process.
pub struct WorkerPool {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
}

impl WorkerPool {
    pub fn start(store: Arc<dyn Store>, backends: BackendRegistry, previews: PreviewBus, config: WorkerConfig) -> Self {
        let shared = Arc::new(Shared {
            store,
            backends,
            previews,
            config,
            stop: CancellationToken::new(),
            drain: CancellationToken::new(),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(heartbeat(Arc::clone(&shared)));
        for n in 0..shared.config.workers.max(1) {
            let offer = WorkerOffer {
                worker: format!("{}#{n}", shared.config.instance),
                host: shared.config.host.clone(),
                backends: shared.backends.offered(),
                providers: shared.config.providers.clone(),
            };
            tasks.spawn(worker_loop(Arc::clone(&shared), offer));
        }
        info!(instance = %shared.config.instance, host = %shared.config.host, workers = shared.config.workers, "workers started");
        Self { shared, tasks }
    }

    /// Stops claiming, waits up to the grace period for running turns, then releases the
    /// leases of those still running and returns when every Worker has stopped.
    pub async fn shutdown(mut self) {
        self.shared.stop.cancel();
        let grace = self.shared.config.shutdown_grace;
        let finished = tokio::time::timeout(grace, async { while self.tasks.join_next().await.is_some() {} }).await;
        if finished.is_err() {
            info!("shutdown grace over; releasing the leases of running turns");
            self.shared.drain.cancel();
            while self.tasks.join_next().await.is_some() {}
        }
        info!("workers stopped");
    }

    /// Stops every Worker at once without settling or releasing anything: what a crash does.
    /// For fault-injection tests.
    pub fn abort(mut self) {
        self.tasks.abort_all();
        self.tasks.detach_all();
    }
}

async fn heartbeat(w: Arc<Shared>) {
    let every = (w.config.host_ttl / 3).max(Duration::from_millis(100));
    loop {
        if let Err(e) = w.store.heartbeat_host(&w.config.host).await {
            warn!(error = %e, "host heartbeat failed");
        }
        tokio::select! {
            _ = w.stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

async fn worker_loop(w: Arc<Shared>, offer: WorkerOffer) {
    let terms = LeaseTerms { lease: w.config.lease, host_ttl: w.config.host_ttl };
    let mut ready = w.store.wakeups().watch_runs();
    loop {
        if w.stop.is_cancelled() {
            return;
        }
        // Seen before the claim: a hint sent while we look is not lost.
        ready.borrow_and_update();
        match w.store.claim_run(&offer, terms).await {
            Ok(Some(claim)) => {
                w.config.metrics.runs_claimed.fetch_add(1, Ordering::Relaxed);
                if claim.is_reclaim() {
                    w.config.metrics.runs_reclaimed.fetch_add(1, Ordering::Relaxed);
                }
                let span = info_span!("run", session = %claim.fence.session_id, run = %claim.fence.run_id, epoch = claim.fence.epoch, worker = %offer.worker);
                execute(&w, claim).instrument(span).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => warn!(worker = %offer.worker, error = %e, "claim failed"),
        }
        tokio::select! {
            _ = w.stop.cancelled() => return,
            _ = ready.changed() => {}
            _ = tokio::time::sleep(w.config.poll) => {}
        }
    }
}

/// Whether the session's latest turn boundary is a `turn_started` of this run (not yet
/// rescheduled). A store error counts as "no": starting the turn again is the safe side.
async fn turn_in_progress(store: &Arc<dyn Store>, run: &Run) -> bool {
    let filter = EventFilter { kinds: vec![EventKind::TurnStarted, EventKind::TurnRescheduled], ..Default::default() };
    match store.list_events(&run.session_id, &filter, &PageRequest::first(1, Order::Desc)).await {
        Ok(page) => {
            page.items.first().is_some_and(|e| e.kind() == EventKind::TurnStarted && e.run_id.as_ref() == Some(&run.id))
        }
        Err(_) => false,
    }
}

fn ended(stop: StopReason) -> NewEvent {
    NewEvent::new(EventPayload::TurnEnded { stop })
}

fn error_event(kind: ErrorKind, message: impl Into<String>, retry: RetryStatus) -> NewEvent {
    NewEvent::new(EventPayload::SessionError { kind, message: message.into(), retry })
}

/// Runs one claim to its settlement.
async fn execute(w: &Arc<Shared>, claim: Claim) {
    let run = &claim.run;
    let settle_now = |events: Vec<NewEvent>, outcome: RunOutcome| settle(w, &claim, Settlement { events, outcome });

    if claim.environment_lost {
        warn!("the session environment's host is gone; failing the run");
        let msg = "the session environment was realized on a host that is gone; it is not recreated elsewhere";
        return settle_now(
            vec![error_event(ErrorKind::EnvironmentLost, msg, RetryStatus::Exhausted), ended(StopReason::Failed)],
            RunOutcome::Failed,
        )
        .await;
    }
    if run.crash_count > w.config.crash_budget {
        warn!(crashes = run.crash_count, "crash budget exhausted; ending the run as indeterminate");
        let msg = format!(
            "the run lost its worker {} times (budget {}); its effects are unknown",
            run.crash_count, w.config.crash_budget
        );
        return settle_now(
            vec![error_event(ErrorKind::Indeterminate, msg, RetryStatus::Exhausted), ended(StopReason::Failed)],
            RunOutcome::Indeterminate,
        )
        .await;
    }
    if run.cancel_requested {
        return settle_now(vec![ended(StopReason::Interrupted)], RunOutcome::Cancelled).await;
    }
    let session = match w.store.get_session(&claim.fence.session_id).await {
        Ok(s) => s,
        Err(StoreError::NotFound { .. }) => {
            return settle_now(vec![], RunOutcome::Cancelled).await;
        }
        Err(e) => {
            warn!(error = %e, "cannot load the session; leaving the run to be reclaimed");
            return;
        }
    };
    let Some(backend) = w.backends.get(&run.backend).cloned() else {
        let msg = format!("backend {} is not available in this process", run.backend);
        return settle_now(
            vec![error_event(ErrorKind::BackendFailed, msg, RetryStatus::Exhausted), ended(StopReason::Failed)],
            RunOutcome::Failed,
        )
        .await;
    };

    let ctx = RunContext {
        claim: claim.clone(),
        last_seq: std::sync::atomic::AtomicU64::new(session.last_seq),
        session,
        host: w.config.host.clone(),
        store: Arc::clone(&w.store),
        previews: w.previews.clone(),
        interrupted: CancellationToken::new(),
        abandoned: CancellationToken::new(),
    };
    // A reclaim continues the turn its predecessor started, if the log says it did (a claim
    // may have died before committing `turn_started`); anything else starts one. A duplicate
    // `turn_started` would be harmless, a missing one is not (A2A tasks wait for it).
    let continuing = run.started && run.crash_count > 0 && turn_in_progress(&w.store, run).await;
    if !continuing
        && let Err(e) =
            ctx.commit(vec![NewEvent::new(EventPayload::TurnStarted { inputs_through: run.input_seq })]).await
    {
        warn!(error = %e, "could not start the turn");
        return;
    }

    // Aborted when dropped, so a Worker that dies (panic, abort) stops renewing its lease.
    w.config.metrics.turns_running.fetch_add(1, Ordering::Relaxed);
    let _running = Gauge(&w.config.metrics.turns_running);
    let keeper = AbortOnDropHandle::new(tokio::spawn(keep_lease(
        Arc::clone(w),
        claim.clone(),
        ctx.interrupted.clone(),
        ctx.abandoned.clone(),
    )));
    let result = tokio::select! {
        r = backend.run(&ctx) => Some(r),
        _ = w.drain.cancelled() => None,
    };
    ctx.abandoned.cancel();
    drop(keeper);

    let Some(result) = result else {
        info!("releasing the run for another process");
        w.config.metrics.runs_released.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = w.store.release_run(&claim.fence).await {
            warn!(error = %e, "release failed; the lease will expire instead");
        }
        return;
    };
    let (events, outcome) = match result {
        Ok(TurnOutcome::EndTurn) => (vec![ended(StopReason::EndTurn)], RunOutcome::Completed),
        Ok(TurnOutcome::Refusal) => (vec![ended(StopReason::Refusal)], RunOutcome::Completed),
        Ok(TurnOutcome::Interrupted) => (vec![ended(StopReason::Interrupted)], RunOutcome::Cancelled),
        Ok(TurnOutcome::Parked { pending }) => {
            let event_ids = pending.iter().map(|p| p.event_id.clone()).collect();
            (vec![ended(StopReason::RequiresAction { event_ids })], RunOutcome::Parked { pending })
        }
        Ok(TurnOutcome::RoundLimit { message }) => (
            vec![
                error_event(ErrorKind::RoundLimitReached, message, RetryStatus::Exhausted),
                ended(StopReason::RoundLimit),
            ],
            RunOutcome::Failed,
        ),
        Err(BackendError::Abandoned(why)) => {
            info!(%why, "run abandoned; nothing more is written");
            w.config.metrics.runs_fenced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(_) if ctx.is_interrupted() => (vec![ended(StopReason::Interrupted)], RunOutcome::Cancelled),
        Err(BackendError::Transient { kind, message, retry_after }) if run.attempt < w.config.retry.max_retries => {
            let after = w.config.retry.backoff(run.attempt, retry_after);
            info!(%message, attempt = run.attempt + 1, ?after, "transient failure; rescheduling");
            (
                vec![
                    error_event(kind, message, RetryStatus::Retrying),
                    NewEvent::new(EventPayload::TurnRescheduled {}),
                ],
                RunOutcome::Retry { after },
            )
        }
        Err(BackendError::Transient { kind, message, .. }) => (
            vec![error_event(kind, message, RetryStatus::Exhausted), ended(StopReason::RetriesExhausted)],
            RunOutcome::Failed,
        ),
        Err(BackendError::Failed { kind, message }) => {
            (vec![error_event(kind, message, RetryStatus::Exhausted), ended(StopReason::Failed)], RunOutcome::Failed)
        }
        Err(BackendError::Terminal { kind, message }) => (
            vec![error_event(kind, message, RetryStatus::Terminal), NewEvent::new(EventPayload::SessionTerminated {})],
            RunOutcome::Terminated,
        ),
    };
    settle(w, &claim, Settlement { events, outcome }).await;
}

/// Decrements a gauge when dropped (a turn that panics or is aborted still leaves it).
struct Gauge<'a>(&'a AtomicI64);

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The final fenced commit, retried briefly if the store is unavailable (the lease usually
/// outlives a short outage; if it does not, the run is reclaimed and resumed elsewhere).
async fn settle(w: &Arc<Shared>, claim: &Claim, settlement: Settlement) {
    for attempt in 0..5u32 {
        match w.store.settle(&claim.fence, settlement.clone()).await {
            Ok(_) => {
                debug!(outcome = ?settlement.outcome, "run settled");
                w.config.metrics.settled(&settlement.outcome);
                return;
            }
            Err(e @ StoreError::Fenced { .. }) => {
                info!(error = %e, "settlement fenced; another worker owns the run");
                w.config.metrics.runs_fenced.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(StoreError::Unavailable(m)) if attempt < 4 => {
                warn!(error = %m, "store unavailable while settling; retrying");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt + 1))).await;
            }
            Err(e) => {
                warn!(error = %e, "settlement failed; the lease will expire and the run be reclaimed");
                return;
            }
        }
    }
}

/// Renews the lease every third of its length and on cancel hints. Sets `interrupted` when a
/// client asked to cancel, `abandoned` when the lease is lost.
async fn keep_lease(w: Arc<Shared>, claim: Claim, interrupted: CancellationToken, abandoned: CancellationToken) {
    let every = (w.config.lease / 3).max(Duration::from_millis(50));
    let wake = w.store.wakeups();
    let mut cancel_hint = wake.watch_cancel(&claim.fence.run_id);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            hinted = cancel_hint.rx.changed() => {
                if hinted.is_err() {
                    tokio::time::sleep(every).await;
                }
            }
        }
        match w.store.renew_lease(&claim.fence, w.config.lease).await {
            Ok(r) => {
                if r.cancel_requested && !interrupted.is_cancelled() {
                    info!("interrupt requested");
                    interrupted.cancel();
                }
            }
            Err(e @ StoreError::Fenced { .. }) => {
                warn!(error = %e, "lease lost; abandoning the run");
                abandoned.cancel();
                return;
            }
            Err(e) => warn!(error = %e, "lease renewal failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let p = RetryPolicy { max_retries: 5, base: Duration::from_millis(100), max: Duration::from_secs(1) };
        for attempt in 0..8 {
            let b = p.backoff(attempt, None);
            let exp = Duration::from_millis(100 * 2u64.pow(attempt)).min(Duration::from_secs(1));
            assert!(b >= exp / 2 && b <= exp, "attempt {attempt}: {b:?} not in [{:?}, {exp:?}]", exp / 2);
        }
        assert_eq!(p.backoff(0, Some(Duration::from_secs(7))), Duration::from_secs(7));
    }
}
