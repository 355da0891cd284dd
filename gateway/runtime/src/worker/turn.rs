//! One claimed run, from its claim to its settlement: the backend runs under the pool's
//! lease keeper, and its outcome becomes the closing events and the run's final state in one
//! fenced commit.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::event::{ErrorKind, EventPayload, NewEvent, RetryStatus, StopReason, Usage};
use gateway_core::run::Claim;
use gateway_store::{RunOutcome, Settlement, StoreError};
use tracing::{debug, info, warn};

use super::Shared;
use super::leases::Held;
use crate::backend::{BackendError, FirstEvent, RunContext, TurnOutcome};

fn ended(stop: StopReason) -> NewEvent {
    NewEvent::new(EventPayload::TurnEnded { stop })
}

fn error_event(kind: ErrorKind, message: impl Into<String>, retry: RetryStatus) -> NewEvent {
    NewEvent::new(EventPayload::SessionError { kind, message: message.into(), retry, server: None })
}

/// Runs one claim to its settlement. Its turn was started by the claim itself (the store
/// commits `turn_started` with it); its lease is renewed by the pool's lease keeper, which
/// sets `held.interrupted` on a client's interrupt and `held.abandoned` when the lease is lost.
pub(super) async fn execute(w: &Arc<Shared>, claim: Claim, held: &Held) {
    let run = &claim.run;
    let settle_now = |events: Vec<NewEvent>, outcome: RunOutcome| {
        settle(w, &claim, Settlement { events, outcome, bindings: vec![] })
    };

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
    let session = claim.session.clone();
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
        host: w.identity.host.clone(),
        store: Arc::clone(&w.store),
        executors: Arc::clone(&w.executors),
        previews: w.previews.clone(),
        interrupted: held.interrupted.clone(),
        abandoned: held.abandoned.clone(),
        staged: Default::default(),
        first: FirstEvent::now(),
        requested: Default::default(),
        metrics: Arc::clone(&w.metrics),
    };

    let _running = gateway_services::metrics::GaugeGuard::new(&w.metrics.turns_running);
    let kind = run.backend.kind();
    let result = tokio::select! {
        r = backend.run(&ctx) => Some(r),
        _ = w.drain.cancelled() => None,
    };
    ctx.abandoned.cancel();

    let Some(result) = result else {
        info!("releasing the run for another process");
        w.metrics.runs_released.inc();
        w.metrics.turn(kind, "released", ctx.first.started.elapsed());
        if let Err(e) = w.store.release_run(&claim.fence).await {
            warn!(error = %e, "release failed; the lease will expire instead");
        }
        return;
    };
    let (events, outcome) = match result {
        Ok(TurnOutcome::EndTurn) => (vec![ended(StopReason::EndTurn)], RunOutcome::Completed),
        Ok(TurnOutcome::Refusal) => (vec![ended(StopReason::Refusal)], RunOutcome::Completed),
        Ok(TurnOutcome::BudgetReached) => (vec![ended(StopReason::BudgetReached)], RunOutcome::Completed),
        Ok(TurnOutcome::Interrupted) => (vec![ended(StopReason::Interrupted)], RunOutcome::Cancelled),
        Ok(TurnOutcome::Parked { pending }) => {
            let event_ids = pending.iter().map(|p| p.event_id.clone()).collect();
            (vec![ended(StopReason::RequiresAction { event_ids })], RunOutcome::Parked { pending })
        }
        // As the Managed Agents API has it: an error, then idle with retries exhausted.
        Ok(TurnOutcome::CompactionLimit { message }) => (
            vec![
                error_event(ErrorKind::CompactionLimitReached, message, RetryStatus::Exhausted),
                ended(StopReason::RetriesExhausted),
            ],
            RunOutcome::Failed,
        ),
        Ok(TurnOutcome::RoundLimit { message }) => (
            vec![
                error_event(ErrorKind::RoundLimitReached, message, RetryStatus::Exhausted),
                ended(StopReason::RoundLimit),
            ],
            RunOutcome::Failed,
        ),
        Err(BackendError::Abandoned(why)) => {
            info!(%why, "run abandoned; nothing more is written");
            w.metrics.runs_fenced.inc();
            w.metrics.turn(kind, "abandoned", ctx.first.started.elapsed());
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
    w.metrics.turn(kind, gateway_services::metrics::outcome_name(&outcome), ctx.first.started.elapsed());
    // What the backend staged (its last model request's events) commits with the settlement:
    // the turn's end costs one commit.
    let staged = ctx.take_staged();
    let mut all = staged.events;
    // A turn that asked a model ends with the session's usage so far: what it had when the
    // run was claimed (a resumed run's earlier claims included) and what this run used.
    let mut used = ctx.requested.lock().unwrap_or_else(|p| p.into_inner()).clone();
    used.add(&Usage::of_requests(all.iter().map(|e| &e.payload)));
    if used != Usage::default() {
        let mut usage = claim.session.usage.clone();
        usage.add(&used);
        all.push(NewEvent::new(EventPayload::SessionUsage { usage, budget: claim.session.budget }));
    }
    all.extend(events);
    settle(w, &claim, Settlement { events: all, outcome, bindings: staged.bindings }).await;
}

/// The final fenced commit, retried briefly if the store is unavailable (the lease usually
/// outlives a short outage; if it does not, the run is reclaimed and resumed elsewhere).
pub(super) async fn settle(w: &Arc<Shared>, claim: &Claim, settlement: Settlement) {
    for attempt in 0..5u32 {
        match w.store.settle(&claim.fence, settlement.clone()).await {
            Ok(_) => {
                debug!(outcome = ?settlement.outcome, "run settled");
                w.metrics.settled(&settlement.outcome);
                return;
            }
            Err(e @ StoreError::Fenced { .. }) => {
                info!(error = %e, "settlement fenced; another worker owns the run");
                w.metrics.runs_fenced.inc();
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
