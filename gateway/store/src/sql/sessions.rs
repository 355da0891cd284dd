//! Sessions and the admission of client inputs.

use async_trait::async_trait;
use gateway_core::admission::{SessionState, admit};
use gateway_core::environment::ConnectionStatus;
use gateway_core::event::{Event, EventPayload, NewEvent, Usage};
use gateway_core::placement::Requirements;
use gateway_core::run::{Claim, RunState, WorkerOffer};
use gateway_core::session::{
    BudgetChange, EnvironmentState, PendingAction, Resource, Session, SessionSnapshot, SessionStatus,
};
use gateway_core::{ResourceId, RunId, SessionId, Timestamp};

use super::WriteTx;
use super::conn::Arg;
use super::read::time_range_args;
use super::{Engine, Hints, SqlStore, query, query_as, session_cols};
use crate::Sessions;
use crate::error::{Guard, Result, StoreError};
use crate::model::{AdmissionWrites, LeaseTerms, NewSession, Page, PageRequest, SessionFilter, SessionPatch};
use crate::rows::{GuardRow, LockedSessionRow};
use crate::wake::Hint;

const SESSION_BY_ID: &str = concat!("SELECT ", session_cols!(), " FROM sessions WHERE id = $1 AND deleted_at IS NULL");

/// The statuses filter as a JSON array parameter (None: no filter).
fn statuses_param(filter: &SessionFilter) -> Option<String> {
    if filter.statuses.is_empty() {
        None
    } else {
        let names: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        serde_json::to_string(&names).ok()
    }
}

impl<E: Engine> SqlStore<E> {
    /// Locks and reads a live session for the rest of the transaction.
    pub(crate) async fn lock_session(tx: &mut WriteTx<E>, id: &SessionId) -> Result<Session> {
        query_as::<Session>(E::LOCK_SESSION)
            .bind(id.as_str())
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::not_found("session", id))
    }

    /// Locks the session row, then reads the clock: a transaction that waited for the lock
    /// never writes an earlier time than the one it waited for, so event times follow seq
    /// order (clamped to the row's last update in case the clock steps back).
    ///
    /// One round trip: the clock is read in the locking statement. Should it be read before
    /// a wait for the lock, the clamp to the locked row's `updated_at` (the time of the
    /// transaction waited for) still keeps times in seq order.
    pub(crate) async fn lock_session_at_now(tx: &mut WriteTx<E>, id: &SessionId) -> Result<(Session, i64)> {
        let locked = Self::lock_row_at_now(tx, id).await?;
        let now = locked.now();
        Ok((locked.row, now))
    }

    /// [`Self::lock_session_at_now`] for a write that advances the session: `hints` learn
    /// whether it is subscribed, so its advance is sent with the commit (ADR 0038).
    pub(crate) async fn lock_session_to_advance(
        tx: &mut WriteTx<E>,
        id: &SessionId,
        hints: &mut Hints,
    ) -> Result<(Session, i64)> {
        let locked = Self::lock_row_at_now(tx, id).await?;
        hints.knows_subscription(id, locked.feed_subscribed);
        let now = locked.now();
        Ok((locked.row, now))
    }

    async fn lock_row_at_now(tx: &mut WriteTx<E>, id: &SessionId) -> Result<LockedSessionRow> {
        query_as::<LockedSessionRow>(E::LOCK_SESSION_AT_NOW)
            .bind(id.as_str())
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::not_found("session", id))
    }

    /// Which runs of the session are unfinished: (running, queued).
    /// Whether the session has a running run, a fresh queued run, and a started run
    /// queued for its retry (see [`SessionState`]). On PostgreSQL the rows are locked:
    /// a claim in flight fixes its run's input boundary from the committed `last_seq`,
    /// so admission must wait for it to see that run as running (and queue a run of its
    /// own for these inputs) rather than count on it to read them.
    async fn run_presence(tx: &mut WriteTx<E>, id: &SessionId) -> Result<(bool, bool, bool)> {
        let kinds: Vec<(String,)> = query_as(E::RUN_PRESENCE).bind(id.as_str()).fetch_all(&mut **tx).await?;
        let has = |kind: &str| kinds.iter().any(|(k,)| k == kind);
        Ok((has("running"), has("queued"), has("retrying")))
    }

    /// Creates the session and admits its initial inputs (`Sessions::create_session`), and
    /// with `claim`, claims the run they queued in the same transaction
    /// (`Sessions::create_session_and_claim`).
    async fn create_in(
        &self,
        new: NewSession,
        claim: Option<(&WorkerOffer, LeaseTerms)>,
    ) -> Result<(Session, Vec<Event>, Option<Claim>)> {
        let id = new.id;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let mut snapshot = new.snapshot;
        for resource in &mut snapshot.resources {
            resource.created_at = Timestamp(now);
        }
        let agent = &snapshot.agent;
        let env = query_as::<GuardRow>(
            "SELECT CAST(0 AS BIGINT) AS version, archived_at, deleted_at FROM environments WHERE id = $1",
        )
        .bind(new.environment_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        match env {
            None | Some(GuardRow { deleted_at: Some(_), .. }) => {
                return Err(StoreError::not_found("environment", &new.environment_id));
            }
            Some(GuardRow { archived_at: Some(_), .. }) => {
                return Err(StoreError::Guard(Guard::EnvironmentArchived(new.environment_id.to_string())));
            }
            Some(_) => {}
        }
        let inserted = query_as::<Session>(concat!(
            "INSERT INTO sessions (id, environment_id, agent_id, agent_version, snapshot, title, metadata, status, pending, \
             env_state, env_host, last_seq, created_at, updated_at, budget_max_micros) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'idle', '[]', 'none', NULL, 0, $8, $8, $9) RETURNING ",
            session_cols!()
        ))
        .bind(id.as_str())
        .bind(new.environment_id.as_str())
        .bind(agent.id.as_str())
        .bind(i64::from(agent.version))
        .bind(serde_json::to_string(&snapshot)?)
        .bind(new.title.clone())
        .bind(serde_json::to_string(&new.metadata)?)
        .bind(now)
        .bind(new.budget.map(|b| super::bigint(b.max_list_cost_micros)))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            if e.is_unique_violation() { StoreError::Guard(Guard::SessionExists(id.to_string())) } else { e.into() }
        })?;
        Self::record_file_mounts(&mut tx, &id, &snapshot.resources, false).await?;
        let mut hints = Hints::default();
        // Nobody else can subscribe a session before this transaction commits it.
        hints.knows_subscription(&id, false);
        // The row this transaction inserted is locked by it: admission needs no lock of its own.
        let admitted = match new.initial_inputs.is_empty() {
            true => None,
            false => Some(
                Self::admit_locked(
                    &mut tx,
                    inserted.clone(),
                    new.initial_inputs,
                    AdmitWith { runs: Runs::NoneYet, start: claim, trace: new.writes.trace.as_ref() },
                    now,
                    &mut hints,
                )
                .await?,
            ),
        };
        // A conflict here returns before `finish`: the session, its inputs and every
        // write roll back together.
        Self::apply_admission_writes(&mut tx, &id, &new.writes, now, &mut hints).await?;
        let (session, events, claim) = match admitted {
            None => (inserted, Vec::new(), None),
            Some(mut admitted) => {
                let claim = match (admitted.claim.take(), claim) {
                    (Some(started), _) => Some(started),
                    (None, Some((offer, terms))) => {
                        Self::claim_admitted(
                            &mut tx,
                            &admitted.session,
                            admitted.startable,
                            offer,
                            terms,
                            now,
                            &mut hints,
                        )
                        .await?
                    }
                    (None, None) => None,
                };
                // As this transaction leaves it: the claim's turn start advanced it further.
                let session = claim.as_ref().map_or(admitted.session, |c| c.session.clone());
                (session, admitted.events, claim)
            }
        };
        self.finish(tx, hints).await?;
        Ok((session, events, claim))
    }

    /// After an admission in `tx`: claims the run it queued, if it queued one that `offer`
    /// may claim at once (the session's next run, placeable there), with its turn start. The
    /// admission's run-ready hint goes only if the run is left for the Workers.
    async fn claim_admitted(
        tx: &mut WriteTx<E>,
        session: &Session,
        startable: Option<RunId>,
        offer: &WorkerOffer,
        terms: LeaseTerms,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Option<Claim>> {
        if !hints.take_run_ready() {
            return Ok(None);
        }
        let claim = match startable {
            Some(run) => Self::start_admitted(tx, session, run, offer, terms, now, hints).await?,
            None => None,
        };
        let claim = match claim {
            Some(claim) => Some(claim),
            None => Self::claim_within(tx, offer, terms, 1, Some(&session.id), hints).await?.pop(),
        };
        if claim.is_none() {
            hints.push(Hint::RunReady);
        }
        Ok(claim)
    }

    /// Runs admission on a locked session row and applies its decision.
    ///
    /// With `start` (an admitting process with a free turn slot, ADR 0016), a run it queues
    /// that nothing stands before and that the offer can place is started in the same
    /// statements ([`Self::admit_and_start`]); `Admitted::claim` then holds it.
    pub(crate) async fn admit_locked(
        tx: &mut WriteTx<E>,
        session: Session,
        inputs: Vec<NewEvent>,
        with: AdmitWith<'_>,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Admitted> {
        let AdmitWith { runs, start, trace } = with;
        let (run_running, run_queued, run_retrying) = match runs {
            Runs::Read => Self::run_presence(tx, &session.id).await?,
            Runs::NoneYet => (false, false, false),
        };
        let state = SessionState {
            status: session.status,
            archived: session.archived_at.is_some(),
            pending: session.pending_actions.clone(),
            run_running,
            run_queued,
            run_retrying,
        };
        let decision = admit(&state, inputs)?;
        let alone = !run_running && !run_queued && !run_retrying && decision.pending.is_empty();
        if let Some((offer, terms)) =
            start.filter(|(offer, _)| decision.enqueue_run && alone && placeable(&session, offer))
        {
            return Self::admit_and_start(tx, session, decision, (offer, terms), trace, now, hints).await;
        }
        let events = Self::append_events(tx, &session.id, session.last_seq, decision.events, now, None).await?;

        if decision.cancel_running {
            let ids = query_as::<(String,)>(
                "UPDATE runs SET cancel_requested = TRUE, updated_at = $2 WHERE session_id = $1 AND state = 'running' RETURNING id",
            )
            .bind(session.id.as_str())
            .bind(now)
            .fetch_all(&mut **tx)
            .await?;
            for (id,) in ids {
                if let Ok(run) = RunId::parse(&id) {
                    hints.push(Hint::CancelRequested(run));
                }
            }
        }
        if decision.cancel_queued {
            query("UPDATE runs SET state = 'cancelled', updated_at = $2 WHERE session_id = $1 AND state = 'queued'")
                .bind(session.id.as_str())
                .bind(now)
                .execute(&mut **tx)
                .await?;
        }
        let queued = match decision.enqueue_run {
            true => Some(Self::enqueue_run(tx, &session, trace, now, hints).await?),
            false => None,
        };
        let advance = Advance::Status(decision.status, &decision.pending);
        Self::advance_session(tx, &session.id, session.last_seq, &events, now, advance, hints).await?;
        let mut session = session;
        session.last_seq += events.len() as u64;
        session.updated_at = Timestamp::from_millis(now);
        session.status = decision.status;
        session.pending_actions = decision.pending;
        Ok(Admitted { session, events, startable: queued.filter(|_| alone), claim: None })
    }

    /// An admission whose inputs queue the session's next run, started at once by the
    /// admitting process: the rows that queueing it ([`Self::enqueue_run`]) and then claiming
    /// it ([`Self::start_admitted`]) would leave, in three statements fewer. The inputs and the
    /// turn start are appended together, the run is inserted running under the claim's lease
    /// (epoch 1), and the session advances once. Nothing stands before the run (the caller
    /// checked), so no other run's cancel applies and nobody is told a run is ready.
    async fn admit_and_start(
        tx: &mut WriteTx<E>,
        session: Session,
        decision: gateway_core::admission::Admission,
        (offer, terms): (&WorkerOffer, LeaseTerms),
        trace: Option<&gateway_core::trace::TraceContext>,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Admitted> {
        let inputs_through = session.last_seq + decision.events.len() as u64;
        let lease =
            Lease { owner: offer.worker.as_str(), expires_at: now + crate::model::millis(terms.lease), inputs_through };
        let mut run = Self::insert_run(tx, &session, trace, now, Some(lease)).await?;
        // A first claim: no Worker had started it (as `start_admitted` leaves it).
        run.started = false;
        let by = (&run.id, run.lease_epoch);
        let start = NewEvent::new(EventPayload::TurnStarted { inputs_through });
        let authored = decision.events.into_iter().map(|e| (e, None)).chain([(start, Some(by))]).collect();
        let mut events = Self::append_authored(tx, &session.id, session.last_seq, authored, now).await?;
        let advance = Advance::Status(decision.status, &decision.pending);
        Self::advance_session(tx, &session.id, session.last_seq, &events, now, advance, hints).await?;
        events.pop();
        let fence = gateway_core::run::Fence {
            run_id: run.id.clone(),
            session_id: session.id.clone(),
            owner: offer.worker.clone(),
            epoch: run.lease_epoch,
        };
        let mut session = session;
        session.last_seq = inputs_through + 1;
        session.updated_at = Timestamp::from_millis(now);
        session.status = decision.status;
        session.pending_actions = decision.pending;
        let claim = Claim { fence, run, session: session.clone(), inputs_through, environment_lost: false };
        Ok(Admitted { session, events, startable: None, claim: Some(claim) })
    }

    /// Queues a run of the locked `session` for its backend and placement.
    async fn enqueue_run(
        tx: &mut WriteTx<E>,
        session: &Session,
        trace: Option<&gateway_core::trace::TraceContext>,
        now: i64,
        hints: &mut Hints,
    ) -> Result<RunId> {
        let run = Self::insert_run(tx, session, trace, now, None).await?;
        hints.push(Hint::RunReady);
        Ok(run.id)
    }

    /// Inserts a run of the locked `session` for its backend and placement: queued, or
    /// running under `lease` (epoch 1) when its admission starts it at once.
    async fn insert_run(
        tx: &mut WriteTx<E>,
        session: &Session,
        trace: Option<&gateway_core::trace::TraceContext>,
        now: i64,
        lease: Option<Lease<'_>>,
    ) -> Result<gateway_core::run::Run> {
        let req = &session.snapshot.requirements;
        let run = gateway_core::run::Run {
            id: RunId::new(),
            session_id: session.id.clone(),
            state: if lease.is_some() { RunState::Running } else { RunState::Queued },
            backend: req.backend.clone(),
            provider: req.provider().map(|p| gateway_core::environment::ProviderTier(p.to_string())),
            lease_owner: lease.as_ref().map(|l| l.owner.to_owned()),
            lease_epoch: i64::from(lease.is_some()),
            lease_expires_at: lease.as_ref().map(|l| Timestamp(l.expires_at)),
            crash_count: 0,
            attempt: 0,
            available_at: Timestamp(now),
            cancel_requested: false,
            started: lease.is_some(),
            input_seq: lease.as_ref().map(|l| l.inputs_through),
            trace: trace.cloned(),
            created_at: Timestamp(now),
            updated_at: Timestamp(now),
        };
        // Deferred: every value of the row is known here, so nothing waits for its answer.
        query(
            "INSERT INTO runs (id, session_id, state, backend, provider, traceparent, tracestate, available_at, \
             created_at, updated_at, lease_owner, lease_epoch, lease_expires_at, started, input_seq) \
             VALUES ($1, $2, $8, $3, $4, $6, $7, $5, $5, $5, $9, $10, $11, $12, $13)",
        )
        .bind(run.id.as_str())
        .bind(session.id.as_str())
        .bind(req.backend.to_string())
        .bind(req.provider().map(|p| p.to_string()))
        .bind(now)
        .bind(trace.map(|t| t.traceparent.clone()))
        .bind(trace.and_then(|t| t.tracestate.clone()))
        .bind(run.state.as_str())
        .bind(lease.as_ref().map(|l| l.owner))
        .bind(run.lease_epoch)
        .bind(lease.as_ref().map(|l| l.expires_at))
        .bind(run.started)
        .bind(lease.as_ref().map(|l| super::bigint(l.inputs_through)))
        .defer(&mut **tx)
        .await?;
        Ok(run)
    }

    /// Appends `events` to the locked `session`'s log and advances the session with them
    /// ([`SqlStore::advance_session`]).
    pub(crate) async fn append_and_advance(
        tx: &mut WriteTx<E>,
        session: &Session,
        events: Vec<NewEvent>,
        now: i64,
        by: Option<(&RunId, i64)>,
        advance: Advance<'_>,
        hints: &mut Hints,
    ) -> Result<Vec<Event>> {
        let events = Self::append_events(tx, &session.id, session.last_seq, events, now, by).await?;
        Self::advance_session(tx, &session.id, session.last_seq, &events, now, advance, hints).await?;
        Ok(events)
    }

    /// Records that `events`, appended after `before`, advanced the session: its last seq and
    /// update time, and what `advance` names, in one write of the locked row; and the hints
    /// that wake its watchers once the transaction commits. Returns the new last seq. Every
    /// writer that appends to a session's log ends with this, so the row's `last_seq` is
    /// always the log's (invariant 9: no gap, no duplicate). [`Advance::Log`] with no events
    /// writes nothing: the log did not move.
    pub(crate) async fn advance_session(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        before: u64,
        events: &[Event],
        now: i64,
        advance: Advance<'_>,
        hints: &mut Hints,
    ) -> Result<u64> {
        let last_seq = before + events.len() as u64;
        if events.is_empty() && matches!(advance, Advance::Log) {
            return Ok(last_seq);
        }
        // The same update adds the usage of the model requests these events end to the
        // session's, and says whether a channel subscribed to the session (`feeds.rs`): a
        // session nobody follows costs its commits no further statement.
        macro_rules! update {
            ($set:literal) => {
                concat!(
                    "UPDATE sessions SET last_seq = $2, updated_at = $3",
                    $set,
                    " WHERE id = $1 RETURNING feed_subscribed"
                )
            };
            ($set:literal, $i:literal, $o:literal, $r:literal, $w:literal, $c:literal, $u:literal) => {
                concat!(
                    "UPDATE sessions SET last_seq = $2, updated_at = $3",
                    $set,
                    ", usage_input_tokens = usage_input_tokens + $",
                    $i,
                    ", usage_output_tokens = usage_output_tokens + $",
                    $o,
                    ", usage_cache_read_tokens = usage_cache_read_tokens + $",
                    $r,
                    ", usage_cache_write_tokens = usage_cache_write_tokens + $",
                    $w,
                    ", usage_list_cost_micros = usage_list_cost_micros + $",
                    $c,
                    ", usage_unpriced_requests = usage_unpriced_requests + $",
                    $u,
                    " WHERE id = $1 RETURNING feed_subscribed"
                )
            };
        }
        let usage = Usage::of_requests(events.iter().map(|e| &e.payload));
        let counted = usage != Usage::default();
        let (sql, mut extra) = match advance {
            Advance::Log if counted => (update!("", 4, 5, 6, 7, 8, 9), vec![]),
            Advance::Log => (update!(""), vec![]),
            Advance::Status(status, pending) => (
                if counted {
                    update!(", status = $4, pending = $5", 6, 7, 8, 9, 10, 11)
                } else {
                    update!(", status = $4, pending = $5")
                },
                vec![Arg::from(status.as_str()), Arg::from(serde_json::to_string(pending)?)],
            ),
            Advance::Connection(status) => (
                if counted { update!(", connection = $4", 5, 6, 7, 8, 9, 10) } else { update!(", connection = $4") },
                vec![Arg::from(status.as_str())],
            ),
            Advance::Deleted => (
                if counted {
                    update!(", deleted_at = $3, env_state = $4, pending = '[]'", 5, 6, 7, 8, 9, 10)
                } else {
                    update!(", deleted_at = $3, env_state = $4, pending = '[]'")
                },
                vec![Arg::from(EnvironmentState::Released.as_str())],
            ),
        };
        if counted {
            let tokens = [
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_input_tokens,
                usage.cache_creation_input_tokens,
                usage.list_cost_micros,
                usage.unpriced_requests,
            ];
            extra.extend(tokens.map(|n| Arg::from(super::bigint(n))));
        }
        let args = [Arg::from(session.as_str()), Arg::from(last_seq as i64), Arg::from(now)].into_iter().chain(extra);
        if hints.knows_subscription_of(session) {
            // Nothing to read back: it goes out with the commit.
            query(sql).bind_all(args).defer(&mut **tx).await?;
        } else {
            let (subscribed,) = query_as::<(i64,)>(sql).bind_all(args).fetch_one(&mut **tx).await?;
            if subscribed != 0 {
                hints.subscribed(session);
            }
        }
        hints.push(Hint::SessionAdvanced(session.clone(), last_seq));
        hints.committed(session, events);
        Ok(last_seq)
    }

    /// Sets session bindings (key, value) inside `tx`: the one upsert behind both the
    /// fenced commit's bindings and an admission's. A key given twice takes its last value
    /// (one multi-row upsert may not touch a row twice on PostgreSQL).
    pub(crate) async fn write_bindings(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        bindings: &[(String, String)],
        now: i64,
    ) -> Result<()> {
        let last: std::collections::BTreeMap<&str, &str> =
            bindings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let rows: Vec<(&str, &str)> = last.into_iter().collect();
        for chunk in rows.chunks(super::INSERT_CHUNK) {
            let mut q = query(super::upsert_bindings_sql(chunk.len()));
            for (key, value) in chunk {
                q = q.bind(session.as_str()).bind(*key).bind(*value).bind(now);
            }
            q.defer(&mut **tx).await?;
        }
        Ok(())
    }
}

/// The lease a run is inserted under when its admission starts it ([`SqlStore::insert_run`]).
struct Lease<'a> {
    owner: &'a str,
    expires_at: i64,
    /// The run's input boundary.
    inputs_through: u64,
}

/// How an admission ([`SqlStore::admit_locked`]) runs, besides its inputs.
pub(crate) struct AdmitWith<'a> {
    pub runs: Runs,
    /// The offer and lease terms of an admitting process with a free turn slot.
    pub start: Option<(&'a WorkerOffer, LeaseTerms)>,
    /// The request's trace context, kept with the run it queues.
    pub trace: Option<&'a gateway_core::trace::TraceContext>,
}

/// What admission ([`SqlStore::admit_locked`]) knows of the session's runs.
pub(crate) enum Runs {
    /// Nothing: it reads them (locked on PostgreSQL, see `run_presence`).
    Read,
    /// The session row was inserted by this transaction, so no run of it can exist: a
    /// statement saved on every session created with its first message.
    NoneYet,
}

/// What a session's advance ([`SqlStore::advance_session`]) writes besides its last seq and
/// update time.
pub(crate) enum Advance<'a> {
    /// Nothing else: only the log moved.
    Log,
    /// Its status and pending actions, decided with the events.
    Status(SessionStatus, &'a [PendingAction]),
    /// Its executor's connection.
    Connection(ConnectionStatus),
    /// Its deletion: the environment is released and nothing is pending any more.
    Deleted,
}

fn refuse_if_running(s: &Session) -> Result<()> {
    if matches!(s.status, SessionStatus::Running | SessionStatus::Rescheduling) {
        return Err(StoreError::Guard(Guard::SessionRunning(s.id.to_string())));
    }
    Ok(())
}

#[async_trait]
impl<E: Engine> Sessions for SqlStore<E> {
    async fn create_session(&self, new: NewSession) -> Result<(Session, Vec<Event>)> {
        let (session, events, _) = self.create_in(new, None).await?;
        Ok((session, events))
    }

    async fn create_session_and_claim(
        &self,
        new: NewSession,
        offer: &WorkerOffer,
        terms: LeaseTerms,
    ) -> Result<(Session, Vec<Event>, Option<Claim>)> {
        self.create_in(new, Some((offer, terms))).await
    }

    async fn get_session(&self, id: &SessionId) -> Result<Session> {
        self.by_id::<Session>(SESSION_BY_ID, "session", id.as_str()).await
    }

    async fn update_session(&self, id: &SessionId, patch: SessionPatch) -> Result<Session> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, id).await?;
        if s.archived_at.is_some() {
            return Err(StoreError::Guard(Guard::SessionArchived(id.to_string())));
        }
        // What changed, as the event that records it (nothing changed: nothing written).
        let title = patch.title.filter(|t| *t != s.title);
        let metadata = patch.metadata.filter(|m| *m != s.metadata);
        let snapshot = patch.snapshot.filter(|n| *n != s.snapshot);
        if snapshot.is_some() {
            refuse_if_running(&s)?;
        }
        let budget = patch.budget.filter(|b| *b != s.budget);
        if let Some(Some(new)) = budget {
            if s.budget.is_none() {
                return Err(StoreError::Guard(Guard::BudgetCreateOnly(id.to_string())));
            }
            let spent = s.usage.list_cost_micros;
            if new.max_list_cost_micros <= spent {
                return Err(StoreError::Guard(Guard::BudgetNotRaised {
                    session: id.to_string(),
                    spent_micros: spent,
                    asked_micros: new.max_list_cost_micros,
                }));
            }
        }
        if title.is_none() && metadata.is_none() && snapshot.is_none() && budget.is_none() {
            return Ok(s);
        }
        let new_budget = budget.unwrap_or(s.budget);
        let (new_title, new_metadata) =
            (title.clone().unwrap_or(s.title.clone()), metadata.clone().unwrap_or(s.metadata.clone()));
        let new_snapshot = snapshot.as_ref().unwrap_or(&s.snapshot);
        query(
            "UPDATE sessions SET title = $2, metadata = $3, snapshot = $4, agent_id = $5, agent_version = $6, \
             updated_at = $7, budget_max_micros = $8 WHERE id = $1",
        )
        .bind(id.as_str())
        .bind(new_title.clone())
        .bind(serde_json::to_string(&new_metadata)?)
        .bind(serde_json::to_string(new_snapshot)?)
        .bind(new_snapshot.agent.id.as_str())
        .bind(i64::from(new_snapshot.agent.version))
        .bind(now)
        .bind(new_budget.map(|b| super::bigint(b.max_list_cost_micros)))
        .execute(&mut *tx)
        .await?;
        let event = EventPayload::SessionUpdated {
            title: title.and(new_title),
            metadata: metadata.filter(|m| !m.is_empty()),
            agent: snapshot.as_ref().filter(|n| n.agent != s.snapshot.agent).map(|n| Box::new(n.agent.clone())),
            vault_ids: snapshot.as_ref().filter(|n| n.vault_ids != s.snapshot.vault_ids).map(|n| n.vault_ids.clone()),
            budget: budget.map(|b| match b {
                Some(budget) => BudgetChange::Set { budget },
                None => BudgetChange::Removed,
            }),
        };
        let mut hints = Hints::default();
        Self::append_and_advance(&mut tx, &s, vec![NewEvent::new(event)], now, None, Advance::Log, &mut hints).await?;
        self.finish(tx, hints).await?;
        self.get_session(id).await
    }

    async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>> {
        let lead = [
            Arg::from(filter.include_archived),
            Arg::from(filter.agent_id.as_ref().map(|a| a.to_string())),
            Arg::from(filter.agent_version.map(i64::from)),
            Arg::from(statuses_param(filter)),
        ];
        self.list_page::<Session>(page, E::LIST_SESSIONS, lead.into_iter().chain(time_range_args(filter.created))).await
    }

    async fn archive_session(&self, id: &SessionId) -> Result<Session> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, id).await?;
        refuse_if_running(&s)?;
        query("UPDATE sessions SET archived_at = COALESCE(archived_at, $2), updated_at = $2 WHERE id = $1")
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        self.get_session(id).await
    }

    async fn delete_session(&self, id: &SessionId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, id).await?;
        refuse_if_running(&s)?;
        let mut hints = Hints::default();
        let deleted = vec![NewEvent::new(EventPayload::SessionDeleted {})];
        Self::append_and_advance(&mut tx, &s, deleted, now, None, Advance::Deleted, &mut hints).await?;
        // Its files may be deleted from now on.
        query("DELETE FROM file_mounts WHERE session_id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        query("UPDATE runs SET state = $2, updated_at = $3 WHERE session_id = $1 AND state = 'queued'")
            .bind(id.as_str())
            .bind(RunState::Cancelled.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        // Its work item ends: an unheld one at once, a held one through its executor (the
        // next heartbeat answers `stopping`).
        query(
            "UPDATE work_items SET state = CASE WHEN state = 'queued' THEN 'stopped' ELSE 'stopping' END, \
             stopped_at = CASE WHEN state = 'queued' THEN $2 ELSE stopped_at END, \
             stop_requested_at = COALESCE(stop_requested_at, $2) \
             WHERE session_id = $1 AND state IN ('queued', 'starting', 'active')",
        )
        .bind(id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, hints).await
    }

    async fn release_lost_environment(
        &self,
        id: &SessionId,
        host_ttl: std::time::Duration,
        lost: NewEvent,
    ) -> Result<Event> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, id).await?;
        refuse_if_running(&s)?;
        let not_lost = || {
            StoreError::Guard(Guard::EnvironmentNotLost {
                session: id.to_string(),
                state: s.environment_state.as_str(),
                host: s.environment_host.clone(),
            })
        };
        let (EnvironmentState::Realized | EnvironmentState::Hibernated, Some(host)) =
            (s.environment_state, s.environment_host.as_deref())
        else {
            return Err(not_lost());
        };
        let seen: Option<(i64,)> =
            query_as("SELECT last_seen_at FROM hosts WHERE id = $1").bind(host).fetch_optional(&mut *tx).await?;
        // The claim's rule (`claim_candidate_sql`): alive while seen within the TTL.
        if seen.is_some_and(|(seen,)| now.saturating_sub(seen) < crate::model::millis(host_ttl)) {
            return Err(not_lost());
        }
        query("UPDATE sessions SET env_state = $2, env_host = NULL, updated_at = $3 WHERE id = $1")
            .bind(id.as_str())
            .bind(EnvironmentState::None.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let mut hints = Hints::default();
        let mut events = Self::append_and_advance(&mut tx, &s, vec![lost], now, None, Advance::Log, &mut hints).await?;
        self.finish(tx, hints).await?;
        events.pop().ok_or_else(|| StoreError::Unavailable("the release appended no event".into()))
    }

    async fn transition_environment(
        &self,
        id: &SessionId,
        from: &[EnvironmentState],
        to: EnvironmentState,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, id).await?;
        if !from.contains(&s.environment_state) {
            return Ok(false);
        }
        if !s.environment_state.may_become(to) {
            return Err(StoreError::Guard(Guard::EnvironmentTransition {
                session: id.to_string(),
                from: s.environment_state.as_str(),
                to: to.as_str(),
            }));
        }
        query("UPDATE sessions SET env_state = $2, updated_at = $3 WHERE id = $1")
            .bind(id.as_str())
            .bind(to.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(true)
    }

    async fn bindings(&self, id: &SessionId) -> Result<std::collections::BTreeMap<String, String>> {
        let rows =
            query_as::<(String, String)>("SELECT key, value FROM session_bindings WHERE session_id = $1 ORDER BY key")
                .bind(id.as_str())
                .fetch_all(&mut *self.reader().await?)
                .await?;
        Ok(rows.into_iter().collect())
    }

    async fn replace_snapshot(&self, id: &SessionId, snapshot: SessionSnapshot) -> Result<Session> {
        let mut tx = self.begin_write().await?;
        let (_, now) = Self::lock_session_at_now(&mut tx, id).await?;
        // A session opened before its first input (`open_session`) has a turn of its own in
        // its log but has not started: no client said anything yet, and no run works on it.
        let (running, queued, retrying) = Self::run_presence(&mut tx, id).await?;
        let inputs = query_as::<(i64,)>(
            "SELECT seq FROM events WHERE session_id = $1 \
             AND kind IN ('user_message', 'user_interrupt', 'tool_confirmation', 'client_tool_result') LIMIT 1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if inputs.is_some() || running || queued || retrying {
            return Err(StoreError::Guard(Guard::SessionStarted(id.to_string())));
        }
        query("UPDATE sessions SET snapshot = $2, agent_id = $3, agent_version = $4, updated_at = $5 WHERE id = $1")
            .bind(id.as_str())
            .bind(serde_json::to_string(&snapshot)?)
            .bind(snapshot.agent.id.as_str())
            .bind(i64::from(snapshot.agent.version))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        self.get_session(id).await
    }

    async fn set_resources(
        &self,
        id: &SessionId,
        base: &[ResourceId],
        mut resources: Vec<Resource>,
        requirements: Requirements,
    ) -> Result<Session> {
        let mut tx = self.begin_write().await?;
        let (current, now) = Self::lock_session_at_now(&mut tx, id).await?;
        if current.archived_at.is_some() {
            return Err(StoreError::Guard(Guard::SessionArchived(id.to_string())));
        }
        if !current.snapshot.resources.iter().map(|r| &r.id).eq(base.iter()) {
            return Err(StoreError::Guard(Guard::ResourcesChanged(id.to_string())));
        }
        for r in resources.iter_mut().filter(|r| r.created_at.0 == 0) {
            r.created_at = Timestamp(now);
        }
        Self::record_file_mounts(&mut tx, id, &resources, true).await?;
        let mut snapshot = current.snapshot;
        snapshot.resources = resources;
        snapshot.requirements = requirements;
        query("UPDATE sessions SET snapshot = $2, updated_at = $3 WHERE id = $1")
            .bind(id.as_str())
            .bind(serde_json::to_string(&snapshot)?)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let session = Self::lock_session(&mut tx, id).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(session)
    }

    async fn open_session(&self, id: &SessionId) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let (session, now) = Self::lock_session_at_now(&mut tx, id).await?;
        let (running, queued, retrying) = Self::run_presence(&mut tx, id).await?;
        let idle = session.status == SessionStatus::Idle && session.pending_actions.is_empty();
        if !idle || session.archived_at.is_some() || running || queued || retrying {
            return Ok(false);
        }
        let mut hints = Hints::default();
        Self::enqueue_run(&mut tx, &session, gateway_core::trace::current().as_ref(), now, &mut hints).await?;
        let advance = Advance::Status(SessionStatus::Running, &session.pending_actions);
        Self::advance_session(&mut tx, id, session.last_seq, &[], now, advance, &mut hints).await?;
        self.finish(tx, hints).await?;
        Ok(true)
    }

    async fn submit_inputs(
        &self,
        id: &SessionId,
        inputs: Vec<NewEvent>,
        writes: AdmissionWrites,
    ) -> Result<Vec<Event>> {
        let mut tx = self.begin_write().await?;
        let mut hints = Hints::default();
        let (row, now) = Self::lock_session_to_advance(&mut tx, id, &mut hints).await?;
        let with = AdmitWith { runs: Runs::Read, start: None, trace: writes.trace.as_ref() };
        let events = Self::admit_locked(&mut tx, row, inputs, with, now, &mut hints).await?.events;
        // Refused inputs returned above; a conflicting write returns here. Either way the
        // transaction is dropped uncommitted and nothing of the admission remains.
        Self::apply_admission_writes(&mut tx, id, &writes, now, &mut hints).await?;
        self.finish(tx, hints).await?;
        Ok(events)
    }

    async fn submit_and_claim(
        &self,
        id: &SessionId,
        inputs: Vec<NewEvent>,
        writes: AdmissionWrites,
        offer: &WorkerOffer,
        terms: LeaseTerms,
    ) -> Result<(Vec<Event>, Option<Claim>)> {
        let mut tx = self.begin_write().await?;
        let mut hints = Hints::default();
        let (row, now) = Self::lock_session_to_advance(&mut tx, id, &mut hints).await?;
        let with = AdmitWith { runs: Runs::Read, start: Some((offer, terms)), trace: writes.trace.as_ref() };
        let mut admitted = Self::admit_locked(&mut tx, row, inputs, with, now, &mut hints).await?;
        Self::apply_admission_writes(&mut tx, id, &writes, now, &mut hints).await?;
        let claim = match admitted.claim.take() {
            Some(started) => Some(started),
            None => {
                Self::claim_admitted(&mut tx, &admitted.session, admitted.startable, offer, terms, now, &mut hints)
                    .await?
            }
        };
        self.finish(tx, hints).await?;
        Ok((admitted.events, claim))
    }
}

/// What an admission did, in its transaction.
pub(crate) struct Admitted {
    /// The session as the admission left it (its row, locked by the transaction).
    pub session: Session,
    pub events: Vec<Event>,
    /// The run it queued, when nothing stands before it (no other run of the session running,
    /// queued or retrying, no pending action): the admission may start it at once
    /// ([`SqlStore::start_admitted`]).
    pub startable: Option<RunId>,
    /// The run it queued and started in the same statements, when it was given a start
    /// ([`SqlStore::admit_and_start`]).
    pub claim: Option<Claim>,
}

/// Whether `offer` can run `session`'s turns: its backend, its sandbox provider, and the host
/// its environment lives on.
pub(crate) fn placeable(session: &Session, offer: &WorkerOffer) -> bool {
    let req = &session.snapshot.requirements;
    offer.backends.contains(&req.backend)
        && req.provider().is_none_or(|p| offer.providers.contains(p))
        && session.environment_host.as_deref().is_none_or(|h| h == offer.host)
}

/// `$1` include archived, `$2` agent id, `$3` agent version, `$4` statuses (JSON array or
/// NULL; expanded by `$in_list`), `$5..$8` created gt/gte/lt/lte, `$9,$10` keyset bound,
/// `$11` limit.
macro_rules! list_sessions_sql {
    ($in_list:literal) => {
        $crate::sql::read::keyset_sql!(
            concat!(
                "SELECT ",
                $crate::sql::session_cols!(),
                " FROM sessions WHERE deleted_at IS NULL AND ($1 OR archived_at IS NULL) \
                   AND ($2 IS NULL OR agent_id = $2) AND ($3 IS NULL OR agent_version = $3) \
                   AND ($4 IS NULL OR status IN ",
                $in_list,
                ") AND",
                $crate::sql::read::time_range_sql!("", 5, 6, 7, 8)
            ),
            "",
            9,
            10,
            11
        )
    };
}
pub(crate) use list_sessions_sql;
