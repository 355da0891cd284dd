//! The run queue: claims, leases, fenced commits and settlements.

use std::time::Duration;

use async_trait::async_trait;
use gateway_core::event::{Event, EventPayload, NewEvent, StopReason};
use gateway_core::run::{Claim, Fence, Run, RunState, WorkerOffer};
use gateway_core::session::{PendingAction, Session, SessionStatus};
use gateway_core::{RunId, SessionId, Timestamp};

use super::WriteTx;
use super::sessions::Advance;
use super::{Engine, Hints, SqlStore, query, query_as, run_cols};
use crate::RunQueue;
use crate::error::{Guard, Result, StoreError};
use crate::model::{Commit, LeaseTerms, QueueStats, Renewal, RunOutcome, Settlement, millis};
use crate::rows::{ClaimCandidateRow, LockedSessionRow, RunRefRow};
use crate::wake::Hint;

/// Run columns qualified with the `r` alias, in `Run` order.
macro_rules! run_cols_r {
    () => {
        "r.id, r.session_id, r.state, r.backend, r.provider, r.lease_owner, r.lease_epoch, r.lease_expires_at, \
         r.crash_count, r.attempt, r.available_at, r.cancel_requested, r.started, r.input_seq, r.traceparent, r.tracestate, \
         r.created_at, r.updated_at"
    };
}
pub(crate) use run_cols_r;

/// The claim candidates: `$1` offered backends and `$2` offered providers (JSON arrays expanded
/// by `$in1`/`$in2`), `$3` the worker's host, `$4` now, `$5` the oldest heartbeat of a live
/// host, `$6` how many, `$7` only this session's runs (NULL: any session's). At most one per
/// session (the oldest queued one, or an expired running one, never both: a queued run waits
/// while any run of its session is running). Due queued runs, or running runs whose lease expired; never a second running run of
/// a session; runs of one session in creation order (database clock, then id); none while the session waits for client
/// answers. Placeable here, or (host gone) claimable anywhere to be failed.
macro_rules! claim_candidate_sql {
    ($in1:literal, $in2:literal, $lock:literal) => {
        concat!(
            "SELECT ",
            $crate::sql::runs::run_cols_r!(),
            ", s.env_host FROM runs r JOIN sessions s ON s.id = r.session_id \
             WHERE ((r.state = 'queued' AND r.available_at <= $4) OR (r.state = 'running' AND r.lease_expires_at <= $4)) \
               AND s.deleted_at IS NULL AND s.pending = '[]' AND ($7 IS NULL OR r.session_id = $7) \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.session_id = r.session_id AND o.id <> r.id AND o.state = 'running') \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.session_id = r.session_id AND o.state = 'queued' \
                               AND (o.created_at < r.created_at OR (o.created_at = r.created_at AND o.id < r.id))) \
               AND ((r.backend IN ",
            $in1,
            " AND (r.provider IS NULL OR r.provider IN ",
            $in2,
            ") AND (s.env_host IS NULL OR s.env_host = $3)) \
                 OR (s.env_host IS NOT NULL AND s.env_host <> $3 \
                     AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = s.env_host AND h.last_seen_at > $5))) \
             ORDER BY r.available_at, r.id",
            $crate::sql::limit!(6),
            $lock
        )
    };
}
pub(crate) use claim_candidate_sql;

/// The session status and pending actions after a run ends with `outcome`, given whether
/// another run of the session is still queued.
pub(crate) fn session_after(outcome: &RunOutcome, other_queued: bool) -> (SessionStatus, Vec<PendingAction>) {
    match outcome {
        RunOutcome::Parked { pending } => (SessionStatus::Idle, pending.clone()),
        RunOutcome::Terminated => (SessionStatus::Terminated, Vec::new()),
        RunOutcome::Retry { .. } => (SessionStatus::Rescheduling, Vec::new()),
        RunOutcome::Completed | RunOutcome::Cancelled | RunOutcome::Failed | RunOutcome::Indeterminate => {
            (if other_queued { SessionStatus::Running } else { SessionStatus::Idle }, Vec::new())
        }
    }
}

fn final_state(outcome: &RunOutcome) -> RunState {
    match outcome {
        RunOutcome::Completed => RunState::Completed,
        RunOutcome::Parked { .. } => RunState::Parked,
        RunOutcome::Cancelled => RunState::Cancelled,
        RunOutcome::Failed | RunOutcome::Terminated => RunState::Failed,
        RunOutcome::Indeterminate => RunState::Indeterminate,
        RunOutcome::Retry { .. } => RunState::Queued,
    }
}

impl<E: Engine> SqlStore<E> {
    /// Explains why a fenced write matched no row.
    async fn fenced(tx: &mut WriteTx<E>, fence: &Fence) -> StoreError {
        let current = query_as::<RunRefRow>("SELECT lease_owner, lease_epoch, state FROM runs WHERE id = $1")
            .bind(fence.run_id.as_str())
            .fetch_optional(&mut **tx)
            .await;
        match current {
            Ok(Some(r)) => StoreError::Fenced {
                run_id: fence.run_id.clone(),
                owner: fence.owner.clone(),
                epoch: fence.epoch,
                current_owner: r.lease_owner.unwrap_or_else(|| "nobody".into()),
                current_epoch: r.lease_epoch,
                state: r.state,
            },
            Ok(None) => StoreError::not_found("run", &fence.run_id),
            Err(e) => e.into(),
        }
    }

    /// Claims up to `limit` runs inside `tx` (of `session` only, if given), each in a
    /// savepoint, starting each claimed run's turn: the body of [`RunQueue::claim_runs`],
    /// shared with an admission that claims its own run (`submit_and_claim`).
    pub(crate) async fn claim_within(
        tx: &mut WriteTx<E>,
        offer: &WorkerOffer,
        terms: LeaseTerms,
        limit: u32,
        session: Option<&SessionId>,
        hints: &mut Hints,
    ) -> Result<Vec<Claim>> {
        let backends: Vec<String> = offer.backends.iter().map(|b| b.to_string()).collect();
        let providers: Vec<&str> = offer.providers.iter().map(|p| p.as_str()).collect();
        if let Some(setup) = E::CLAIM_SETUP {
            query(setup).execute(&mut **tx).await?;
        }
        let now = Self::now(tx).await?;
        let candidates = query_as::<ClaimCandidateRow>(E::CLAIM_CANDIDATE)
            .bind(serde_json::to_string(&backends)?)
            .bind(serde_json::to_string(&providers)?)
            .bind(offer.host.as_str())
            .bind(now)
            .bind(now - millis(terms.host_ttl))
            .bind(i64::from(limit))
            .bind(session.map(SessionId::as_str))
            .fetch_all(&mut **tx)
            .await?;
        let mut claims = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            // Each candidate in a savepoint: one that cannot be taken (its session is
            // locked by an admission on PostgreSQL, a lost race) leaves the others be.
            query("SAVEPOINT c").execute(&mut **tx).await?;
            match Self::claim_one(tx, offer, terms, candidate, hints).await {
                Ok(Some(claim)) => {
                    query("RELEASE c").execute(&mut **tx).await?;
                    claims.push(claim);
                }
                Ok(None) => {
                    query("ROLLBACK TO c").execute(&mut **tx).await?;
                    query("RELEASE c").execute(&mut **tx).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(claims)
    }

    /// Takes one claim candidate inside `claim_runs`' transaction: locks its session (or
    /// gives up, on PostgreSQL, when an admission holds it longer than `CLAIM_SETUP`
    /// allows: a claim holds run rows, the reverse of every other writer's lock order),
    /// moves the run to running under a new epoch, and commits its turn start with it.
    async fn claim_one(
        tx: &mut WriteTx<E>,
        offer: &WorkerOffer,
        terms: LeaseTerms,
        candidate: ClaimCandidateRow,
        hints: &mut Hints,
    ) -> Result<Option<Claim>> {
        let locked = query_as::<LockedSessionRow>(E::LOCK_SESSION_AT_NOW)
            .bind(candidate.run.session_id.as_str())
            .fetch_optional(&mut **tx)
            .await;
        let locked = match locked {
            Ok(Some(locked)) => locked,
            Ok(None) => return Ok(None),
            Err(e) if e.is_lock_timeout() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let now = locked.now();
        let mut session = locked.row;
        let was_started = candidate.run.started;
        let environment_lost = candidate.env_host.as_deref().is_some_and(|h| h != offer.host);
        let claimed = query_as::<Run>(concat!(
            "UPDATE runs SET state = 'running', lease_owner = $2, lease_epoch = lease_epoch + 1, lease_expires_at = $3, \
             crash_count = CASE WHEN state = 'running' THEN crash_count + 1 ELSE crash_count END, \
             started = TRUE, updated_at = $4, \
             input_seq = COALESCE(input_seq, (SELECT s.last_seq FROM sessions s WHERE s.id = runs.session_id)) \
             WHERE id = $1 RETURNING ",
            run_cols!()
        ))
        .bind(candidate.run.id.as_str())
        .bind(offer.worker.as_str())
        .bind(now + millis(terms.lease))
        .bind(now)
        .fetch_one(&mut **tx)
        .await;
        let mut run = match claimed {
            Ok(run) => run,
            // Another claim of the same session won (PostgreSQL race caught by the
            // one-running-run-per-session index): not an error, no claim.
            Err(e) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Report whether a Worker had started this run before this claim.
        run.started = was_started;
        // Set by this claim (first claim) or an earlier one: never missing here.
        let inputs_through = run
            .input_seq
            .ok_or_else(|| StoreError::Corrupt(format!("run {} was claimed without an input boundary", run.id)))?;
        let fence = Fence {
            run_id: run.id.clone(),
            session_id: run.session_id.clone(),
            owner: offer.worker.clone(),
            epoch: run.lease_epoch,
        };
        // A reclaim continues the turn its predecessor started, if the log says it did
        // (that claim may have died before its turn start was committed: impossible since
        // claims commit it themselves, but runs of older versions may still be in flight).
        let continuing = was_started && run.crash_count > 0 && Self::turn_in_progress(tx, &run).await?;
        if !continuing {
            let start = NewEvent::new(EventPayload::TurnStarted { inputs_through });
            let by = Some((&run.id, run.lease_epoch));
            let events = Self::append_and_advance(tx, &session, vec![start], now, by, Advance::Log, hints).await?;
            session.last_seq += events.len() as u64;
            session.updated_at = Timestamp::from_millis(now);
        }
        Ok(Some(Claim { fence, run, session, inputs_through, environment_lost }))
    }

    /// Claims the run an admission just queued in `tx`, when `offer` may take it, without
    /// looking for it: the admission holds the session's lock and knows the run is the
    /// session's only one ([`super::sessions::Admitted::startable`]), so the general claim's lock timeout, clock read,
    /// candidate search, savepoint and second session lock (six round trips on PostgreSQL,
    /// every turn) have nothing to decide. `None` when `offer` cannot run it (another backend
    /// or provider, or an environment on another host): the caller tries the general claim,
    /// which also fails the runs of a host that is gone.
    pub(crate) async fn start_admitted(
        tx: &mut WriteTx<E>,
        session: &Session,
        run: RunId,
        offer: &WorkerOffer,
        terms: LeaseTerms,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Option<Claim>> {
        if !super::sessions::placeable(session, offer) {
            return Ok(None);
        }
        let inputs_through = session.last_seq;
        let claimed = query_as::<Run>(concat!(
            "UPDATE runs SET state = 'running', lease_owner = $2, lease_epoch = lease_epoch + 1, lease_expires_at = $3, \
             started = TRUE, updated_at = $4, input_seq = $5 WHERE id = $1 AND state = 'queued' RETURNING ",
            run_cols!()
        ))
        .bind(run.as_str())
        .bind(offer.worker.as_str())
        .bind(now + millis(terms.lease))
        .bind(now)
        .bind(super::bigint(inputs_through))
        .fetch_optional(&mut **tx)
        .await?;
        let Some(mut run) = claimed else { return Ok(None) };
        // A first claim: no Worker had started it.
        run.started = false;
        let fence = Fence {
            run_id: run.id.clone(),
            session_id: run.session_id.clone(),
            owner: offer.worker.clone(),
            epoch: run.lease_epoch,
        };
        let start = NewEvent::new(EventPayload::TurnStarted { inputs_through });
        let by = Some((&run.id, run.lease_epoch));
        let events = Self::append_and_advance(tx, session, vec![start], now, by, Advance::Log, hints).await?;
        let mut session = session.clone();
        session.last_seq += events.len() as u64;
        session.updated_at = Timestamp::from_millis(now);
        Ok(Some(Claim { fence, run, session, inputs_through, environment_lost: false }))
    }

    /// Whether the session's latest turn boundary is a `turn_started` of `run` (not yet
    /// rescheduled): a reclaim then continues that turn.
    async fn turn_in_progress(tx: &mut WriteTx<E>, run: &Run) -> Result<bool> {
        let last = query_as::<(String, String)>(
            "SELECT kind, COALESCE(run_id, '') FROM events WHERE session_id = $1 \
             AND kind IN ('turn_started', 'turn_rescheduled') ORDER BY seq DESC LIMIT 1",
        )
        .bind(run.session_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        Ok(last.is_some_and(|(kind, by)| kind == "turn_started" && by == run.id.as_str()))
    }

    /// The fence check: the lease is still `fence`'s, in this transaction.
    async fn check_fence(tx: &mut WriteTx<E>, fence: &Fence, now: i64) -> Result<()> {
        let held = query_as::<(String,)>(
            "UPDATE runs SET updated_at = $4 WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running' RETURNING id",
        )
        .bind(fence.run_id.as_str())
        .bind(fence.owner.as_str())
        .bind(fence.epoch)
        .bind(now)
        .fetch_optional(&mut **tx)
        .await?;
        if held.is_some() { Ok(()) } else { Err(Self::fenced(tx, fence).await) }
    }
}

#[async_trait]
impl<E: Engine> RunQueue for SqlStore<E> {
    async fn claim_runs(&self, offer: &WorkerOffer, terms: LeaseTerms, limit: u32) -> Result<Vec<Claim>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let mut hints = Hints::default();
        let claims = Self::claim_within(&mut tx, offer, terms, limit, None, &mut hints).await?;
        if claims.is_empty() {
            return Ok(claims);
        }
        self.finish(tx, hints).await?;
        Ok(claims)
    }

    async fn renew_lease(&self, fence: &Fence, lease: Duration) -> Result<Renewal> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let renewed = query_as::<(i64,)>(
            "UPDATE runs SET lease_expires_at = $4 WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running' \
             RETURNING CAST(CASE WHEN cancel_requested THEN 1 ELSE 0 END AS BIGINT)",
        )
        .bind(fence.run_id.as_str())
        .bind(fence.owner.as_str())
        .bind(fence.epoch)
        .bind(now + millis(lease))
        .fetch_optional(&mut *tx)
        .await?;
        let Some((cancel,)) = renewed else {
            return Err(Self::fenced(&mut tx, fence).await);
        };
        self.finish(tx, Hints::default()).await?;
        Ok(Renewal { cancel_requested: cancel != 0 })
    }

    async fn renew_leases(&self, fences: &[Fence], lease: Duration) -> Result<Vec<Option<Renewal>>> {
        if fences.is_empty() {
            return Ok(Vec::new());
        }
        let held: Vec<(&str, &str, i64)> =
            fences.iter().map(|f| (f.run_id.as_str(), f.owner.as_str(), f.epoch)).collect();
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let renewed = query_as::<(String, String, i64, String)>(E::RENEW_LEASES)
            .bind(serde_json::to_string(&held)?)
            .bind(now + millis(lease))
            .fetch_all(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        // Answered by the whole fence, not the run id: a stale fence of a run renewed in the
        // same batch under its current fence is still lost.
        let renewed: std::collections::HashMap<(String, String, i64), bool> =
            renewed.into_iter().map(|(id, owner, epoch, cancel)| ((id, owner, epoch), cancel == "y")).collect();
        Ok(fences
            .iter()
            .map(|f| {
                let key = (f.run_id.as_str().to_owned(), f.owner.clone(), f.epoch);
                renewed.get(&key).map(|cancel| Renewal { cancel_requested: *cancel })
            })
            .collect())
    }

    async fn release_run(&self, fence: &Fence) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let released = query_as::<(String,)>(
            "UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, available_at = $4, updated_at = $4 \
             WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running' RETURNING id",
        )
        .bind(fence.run_id.as_str())
        .bind(fence.owner.as_str())
        .bind(fence.epoch)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if released.is_none() {
            return Err(Self::fenced(&mut tx, fence).await);
        }
        let mut hints = Hints::default();
        hints.push(Hint::RunReady);
        self.finish(tx, hints).await
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> Result<Vec<Event>> {
        let mut tx = self.begin_write().await?;
        let mut hints = Hints::default();
        // Lock order: the session row first, then the run row (see module docs).
        let (session, now) = Self::lock_session_to_advance(&mut tx, &fence.session_id, &mut hints).await?;
        Self::check_fence(&mut tx, fence, now).await?;
        if let Some(change) = &commit.environment {
            if !session.environment_state.may_become(change.state) {
                return Err(StoreError::Guard(Guard::EnvironmentTransition {
                    session: session.id.to_string(),
                    from: session.environment_state.as_str(),
                    to: change.state.as_str(),
                }));
            }
            query("UPDATE sessions SET env_state = $2, env_host = COALESCE($3, env_host) WHERE id = $1")
                .bind(session.id.as_str())
                .bind(change.state.as_str())
                .bind(change.host.clone())
                .execute(&mut *tx)
                .await?;
        }
        Self::write_bindings(&mut tx, &session.id, &commit.bindings, now).await?;
        let by = Some((&fence.run_id, fence.epoch));
        let events =
            Self::append_and_advance(&mut tx, &session, commit.events, now, by, Advance::Log, &mut hints).await?;
        self.finish(tx, hints).await?;
        Ok(events)
    }

    async fn settle(&self, fence: &Fence, mut settlement: Settlement) -> Result<Vec<Event>> {
        let mut tx = self.begin_write().await?;
        let mut hints = Hints::default();
        let (session, now) = Self::lock_session_to_advance(&mut tx, &fence.session_id, &mut hints).await?;
        // An interrupt admitted after the Worker last looked (admission sets the intent
        // under this same session lock, and ends no turn itself: "the Worker settles it")
        // must not be undone by a retry or a park: the turn ends interrupted here.
        if matches!(settlement.outcome, RunOutcome::Retry { .. } | RunOutcome::Parked { .. }) {
            let (cancel,): (i64,) =
                query_as("SELECT CAST(CASE WHEN cancel_requested THEN 1 ELSE 0 END AS BIGINT) FROM runs WHERE id = $1")
                    .bind(fence.run_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await?
                    .unwrap_or((0,));
            if cancel == 1 {
                settlement = Settlement {
                    events: vec![NewEvent::new(EventPayload::TurnEnded { stop: StopReason::Interrupted })],
                    outcome: RunOutcome::Cancelled,
                    bindings: std::mem::take(&mut settlement.bindings),
                };
            }
        }
        let state = final_state(&settlement.outcome);
        let available_at = match &settlement.outcome {
            RunOutcome::Retry { after } => now + millis(*after),
            _ => now,
        };
        // A terminated session's waiting runs end with it (before the settlement, whose
        // statement then also tells whether any run still waits: one round trip less).
        if matches!(settlement.outcome, RunOutcome::Terminated) {
            query("UPDATE runs SET state = 'cancelled', updated_at = $2 WHERE session_id = $1 AND state = 'queued'")
                .bind(session.id.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        let settled = query_as::<(i64,)>(
            "UPDATE runs SET state = $4, lease_owner = NULL, lease_expires_at = NULL, available_at = $5, \
             attempt = attempt + $6, cancel_requested = FALSE, updated_at = $7 \
             WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running' \
             RETURNING (SELECT COUNT(*) FROM runs q WHERE q.session_id = runs.session_id AND q.id <> runs.id AND q.state = 'queued')",
        )
        .bind(fence.run_id.as_str())
        .bind(fence.owner.as_str())
        .bind(fence.epoch)
        .bind(state.as_str())
        .bind(available_at)
        .bind(i64::from(matches!(settlement.outcome, RunOutcome::Retry { .. })))
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((others_queued,)) = settled else {
            return Err(Self::fenced(&mut tx, fence).await);
        };
        // A run settled for a retry waits again itself.
        let queued = others_queued > 0 || state == RunState::Queued;
        Self::write_bindings(&mut tx, &session.id, &settlement.bindings, now).await?;
        let (status, pending) = session_after(&settlement.outcome, queued);
        if queued {
            hints.push(Hint::RunReady);
        }
        let (by, advance) = (Some((&fence.run_id, fence.epoch)), Advance::Status(status, &pending));
        let events =
            Self::append_and_advance(&mut tx, &session, settlement.events, now, by, advance, &mut hints).await?;
        self.finish(tx, hints).await?;
        Ok(events)
    }

    async fn get_run(&self, id: &RunId) -> Result<Run> {
        self.by_id::<Run>(concat!("SELECT ", run_cols!(), " FROM runs WHERE id = $1"), "run", id.as_str()).await
    }

    async fn active_runs(&self, session: &SessionId) -> Result<Vec<Run>> {
        query_as::<Run>(concat!(
            "SELECT ",
            run_cols!(),
            " FROM runs WHERE session_id = $1 AND state IN ('queued', 'running') ORDER BY id"
        ))
        .bind(session.as_str())
        .decoded(&mut *self.reader().await?)
        .await
    }

    fn lateness(&self) -> std::time::Duration {
        super::Db::lateness(&self.db)
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        let (n, oldest): (i64, Option<i64>) = query_as(E::QUEUE_STATS).fetch_one(&mut *self.reader().await?).await?;
        Ok(QueueStats {
            queued: n.max(0) as u64,
            oldest_wait: std::time::Duration::from_millis(oldest.unwrap_or(0).max(0) as u64),
        })
    }

    async fn heartbeat_host(&self, host: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query(
            "INSERT INTO hosts (id, last_seen_at) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at",
        )
        .bind(host)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(())
    }

    async fn claim_host(&self, host: &str, workspaces: &str, ttl: std::time::Duration) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let held: Option<(Option<String>, i64)> = query_as("SELECT workspaces, last_seen_at FROM hosts WHERE id = $1")
            .bind(host)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some((Some(theirs), seen)) = held
            && theirs != workspaces
            && now.saturating_sub(seen) < crate::model::millis(ttl)
        {
            return Err(StoreError::Guard(Guard::HostInUse { host: host.to_owned(), workspaces: theirs }));
        }
        query(
            "INSERT INTO hosts (id, last_seen_at, workspaces) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE \
             SET last_seen_at = excluded.last_seen_at, workspaces = excluded.workspaces",
        )
        .bind(host)
        .bind(now)
        .bind(workspaces)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_status_after_each_outcome() {
        use SessionStatus::*;
        let cases = [
            (RunOutcome::Completed, false, Idle),
            (RunOutcome::Completed, true, Running),
            (RunOutcome::Cancelled, false, Idle),
            (RunOutcome::Failed, true, Running),
            (RunOutcome::Indeterminate, false, Idle),
            (RunOutcome::Terminated, true, Terminated),
            (RunOutcome::Retry { after: Duration::from_secs(1) }, false, Rescheduling),
            (RunOutcome::Parked { pending: vec![] }, true, Idle),
        ];
        for (outcome, queued, want) in cases {
            assert_eq!(session_after(&outcome, queued).0, want, "{outcome:?} queued={queued}");
        }
    }
}
