//! The self-hosted work queue (`crate::work`).
//!
//! Lock order is the one every writer keeps: the session row first, then its work items. A
//! transition that appends a connection event therefore reads the item unlocked, locks the
//! session, and then changes the item with an update conditional on the state it read.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::content::ContentBlock;
use gateway_core::environment::ConnectionStatus;
use gateway_core::event::{Event, EventPayload, NewEvent, ToolOrigin};
use gateway_core::session::PendingKind;
use gateway_core::{EnvironmentId, SessionId, WorkId};

use super::conn::Arg;
use super::read::keyset_sql;
use super::sessions::Advance;
use super::sessions::{AdmitWith, Runs};
use super::{Engine, Hints, SqlStore, query, query_as};
use crate::error::{Guard, Result, StoreError};
use crate::model::{Page, PageRequest, millis};
use crate::sql::WriteTx;
use crate::{Beat, Poll, Pollers, Stop, WorkItem, WorkQueue, WorkState, WorkStats};

/// Columns of a work item row, in `WorkItem` order.
macro_rules! work_cols {
    () => {
        "id, environment_id, session_id, state, metadata, created_at, acknowledged_at, started_at, \
         latest_heartbeat_at, stop_requested_at, stopped_at, heartbeat, ttl_ms"
    };
}

const WORK_BY_ID: &str = concat!("SELECT ", work_cols!(), " FROM work_items WHERE id = $1 AND environment_id = $2");
const LIVE_WORK: &str =
    concat!("SELECT ", work_cols!(), " FROM work_items WHERE session_id = $1 AND state <> 'stopped'");
/// `$1` environment, `$2,$3` keyset bound, `$4` limit.
const LIST_WORK: [&str; 2] =
    keyset_sql!(concat!("SELECT ", work_cols!(), " FROM work_items WHERE environment_id = $1 AND"), "", 2, 3, 4);
/// Ends the item of a deleted session (nobody reports its connection any more): `$1` id, `$2` now.
const END_ORPHANED: &str = "UPDATE work_items SET state = 'stopped', stopped_at = $2, \
     stop_requested_at = COALESCE(stop_requested_at, $2) WHERE id = $1 AND state <> 'stopped'";

/// The item a poll hands out: `$1` environment, `$2` now, `$3` re-deliver after (ms).
macro_rules! poll_work_sql {
    ($lock:literal) => {
        concat!(
            "SELECT w.id FROM work_items w JOIN sessions s ON s.id = w.session_id \
             WHERE w.environment_id = $1 AND w.state = 'queued' AND s.deleted_at IS NULL \
               AND (w.delivered_at IS NULL OR w.delivered_at <= $2 - $3) \
             ORDER BY w.created_at, w.id LIMIT 1",
            $lock
        )
    };
}
pub(crate) use poll_work_sql;

/// The result of a call whose executor was lost before it answered.
const LOST_CALL: &str = "the self-hosted executor running this tool call disconnected before answering; the call \
                         was not run again (it may or may not have taken effect)";

/// What a first heartbeat presents (the SDK's constant), or an empty value.
const NO_HEARTBEAT: &str = "NO_HEARTBEAT";

/// A heartbeat's opaque value: RFC 3339 with milliseconds and a counter, so two beats in one
/// millisecond still differ.
fn heartbeat_value(now: i64, previous: Option<&str>) -> String {
    let at = gateway_core::Timestamp(now).to_rfc3339();
    match previous {
        Some(p) if p.starts_with(&at) => {
            let n = p.rsplit_once('#').and_then(|(_, n)| n.parse::<u64>().ok()).unwrap_or(0);
            format!("{at}#{}", n + 1)
        }
        _ => at,
    }
}

impl<E: Engine> SqlStore<E> {
    async fn work_row(tx: &mut WriteTx<E>, environment: &EnvironmentId, id: &WorkId) -> Result<WorkItem> {
        query_as::<WorkItem>(WORK_BY_ID)
            .bind(id.as_str())
            .bind(environment.as_str())
            .found(&mut **tx, "work item", id)
            .await
    }

    async fn live_row(tx: &mut WriteTx<E>, session: &SessionId) -> Result<Option<WorkItem>> {
        query_as::<WorkItem>(LIVE_WORK).bind(session.as_str()).maybe(&mut **tx).await
    }

    /// Records that `worker` polled `environment` at `now`. A known worker's row is touched (one
    /// statement, the usual case); a new one first prunes the environment's rows older than
    /// the window, then is inserted only while fewer than the bound remain. So an environment
    /// holds at most `max_per_environment` rows after any poll (on PostgreSQL, concurrent
    /// first polls of new workers may each see room: at most one row more per poll in flight).
    async fn record_poller(
        tx: &mut WriteTx<E>,
        environment: &EnvironmentId,
        worker: &str,
        now: i64,
        pollers: Pollers,
    ) -> Result<()> {
        let known = query_as::<(String,)>(
            "UPDATE work_pollers SET polled_at = $3 WHERE environment_id = $1 AND worker_id = $2 RETURNING worker_id",
        )
        .bind(environment.as_str())
        .bind(worker)
        .bind(now)
        .fetch_optional(&mut **tx)
        .await?;
        if known.is_some() {
            return Ok(());
        }
        query("DELETE FROM work_pollers WHERE environment_id = $1 AND polled_at <= $2")
            .bind(environment.as_str())
            .bind(now - millis(pollers.window))
            .execute(&mut **tx)
            .await?;
        query(
            "INSERT INTO work_pollers (environment_id, worker_id, polled_at) SELECT $1, $2, $3 \
             WHERE (SELECT COUNT(*) FROM work_pollers WHERE environment_id = $1) < $4 \
             ON CONFLICT (environment_id, worker_id) DO UPDATE SET polled_at = excluded.polled_at",
        )
        .bind(environment.as_str())
        .bind(worker)
        .bind(now)
        .bind(super::bigint(pollers.max_per_environment))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Appends connection events to a locked session and records its new connection.
    async fn append_connection(
        tx: &mut WriteTx<E>,
        session: &gateway_core::session::Session,
        status: ConnectionStatus,
        events: Vec<NewEvent>,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Vec<Event>> {
        Self::append_and_advance(tx, session, events, now, None, Advance::Connection(status), hints).await
    }

    fn connection_event(
        session: &gateway_core::session::Session,
        status: ConnectionStatus,
        error: Option<&str>,
    ) -> NewEvent {
        NewEvent::new(EventPayload::EnvironmentConnection {
            environment_id: session.environment_id.clone(),
            status,
            error: error.map(str::to_owned),
        })
    }

    /// Moves `item` to `stopped` (or `stopping`) under the locked session; a held item's
    /// session becomes disconnected. Returns None if the item was no longer in the state
    /// read, else whether the session was disconnected.
    async fn stop_locked(
        tx: &mut WriteTx<E>,
        session: &gateway_core::session::Session,
        item: &WorkItem,
        to: WorkState,
        now: i64,
        hints: &mut Hints,
    ) -> Result<Option<bool>> {
        let stopped_at = (to == WorkState::Stopped).then_some(now);
        let done = query_as::<(String,)>(
            "UPDATE work_items SET state = $3, stop_requested_at = COALESCE(stop_requested_at, $4), stopped_at = $5 \
             WHERE id = $1 AND state = $2 RETURNING id",
        )
        .bind(item.id.as_str())
        .bind(item.state.as_str())
        .bind(to.as_str())
        .bind(now)
        .bind(stopped_at)
        .fetch_optional(&mut **tx)
        .await?;
        if done.is_none() {
            return Ok(None);
        }
        // A stopping item is still held until its executor stops it; the connection ends
        // when it is stopped.
        let disconnect = to == WorkState::Stopped
            && item.state != WorkState::Queued
            && session.connection == Some(ConnectionStatus::Connected);
        if disconnect {
            let event = Self::connection_event(session, ConnectionStatus::Disconnected, None);
            Self::append_connection(tx, session, ConnectionStatus::Disconnected, vec![event], now, hints).await?;
            Self::answer_lost_calls(tx, &session.id, now, hints).await?;
        }
        Ok(Some(disconnect))
    }

    /// Answers, with an error result, every built-in call of the session that waits for
    /// its executor, in the transaction that disconnects it: the executor is gone, and the
    /// call must not run again (invariant 5). Admitted like any answer, so the turn resumes.
    async fn answer_lost_calls(tx: &mut WriteTx<E>, session: &SessionId, now: i64, hints: &mut Hints) -> Result<()> {
        let locked = Self::lock_session(tx, session).await?;
        let pending = locked.pending_actions.clone();
        let mut answers = Vec::new();
        for p in pending.iter().filter(|p| p.kind == PendingKind::ClientResult) {
            let found = query_as::<(String,)>("SELECT payload FROM events WHERE session_id = $1 AND id = $2")
                .bind(session.as_str())
                .bind(p.event_id.as_str())
                .fetch_optional(&mut **tx)
                .await?;
            let Some((payload,)) = found else { continue };
            if let EventPayload::ToolUse { origin: ToolOrigin::Builtin, .. } = serde_json::from_str(&payload)? {
                answers.push(NewEvent::new(EventPayload::ClientToolResult {
                    tool_use_id: p.event_id.clone(),
                    content: vec![ContentBlock::text(LOST_CALL)],
                    is_error: true,
                    origin: ToolOrigin::Builtin,
                }));
            }
        }
        if !answers.is_empty() {
            Self::admit_locked(
                tx,
                locked,
                answers,
                AdmitWith { runs: Runs::Read, start: None, trace: None },
                now,
                hints,
            )
            .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<E: Engine> WorkQueue for SqlStore<E> {
    async fn request_connection(&self, session: &SessionId) -> Result<WorkItem> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, session).await?;
        if let Some(item) = Self::live_row(&mut tx, session).await? {
            if item.state.is_held() {
                drop(tx);
                return Ok(item);
            }
            // Still waiting for an executor: announce the request again, nothing else.
            let mut hints = Hints::default();
            let ask = NewEvent::new(EventPayload::ConnectionRequested { environment_id: s.environment_id.clone() });
            Self::append_connection(&mut tx, &s, ConnectionStatus::Pending, vec![ask], now, &mut hints).await?;
            self.finish(tx, hints).await?;
            return Ok(item);
        }
        let id = WorkId::new();
        query(
            "INSERT INTO work_items (id, environment_id, session_id, state, metadata, created_at) \
             VALUES ($1, $2, $3, 'queued', '{}', $4)",
        )
        .bind(id.as_str())
        .bind(s.environment_id.as_str())
        .bind(session.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let mut hints = Hints::default();
        let events = vec![
            Self::connection_event(&s, ConnectionStatus::Pending, None),
            NewEvent::new(EventPayload::ConnectionRequested { environment_id: s.environment_id.clone() }),
        ];
        Self::append_connection(&mut tx, &s, ConnectionStatus::Pending, events, now, &mut hints).await?;
        let item = Self::work_row(&mut tx, &s.environment_id, &id).await?;
        self.finish(tx, hints).await?;
        Ok(item)
    }

    async fn live_work(&self, session: &SessionId) -> Result<Option<WorkItem>> {
        query_as::<WorkItem>(LIVE_WORK).bind(session.as_str()).maybe(&mut *self.reader().await?).await
    }

    async fn give_up_connection(&self, session: &SessionId, error: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let (s, now) = Self::lock_session_at_now(&mut tx, session).await?;
        let item = Self::live_row(&mut tx, session).await?;
        if item.as_ref().is_some_and(|i| i.state != WorkState::Queued) {
            drop(tx);
            return Ok(false);
        }
        let mut hints = Hints::default();
        if let Some(item) = &item {
            Self::stop_locked(&mut tx, &s, item, WorkState::Stopped, now, &mut hints).await?;
        }
        let event = Self::connection_event(&s, ConnectionStatus::Failed, Some(error));
        Self::append_connection(&mut tx, &s, ConnectionStatus::Failed, vec![event], now, &mut hints).await?;
        self.finish(tx, hints).await?;
        Ok(true)
    }

    async fn poll_work(&self, environment: &EnvironmentId, poll: Poll<'_>) -> Result<Option<WorkItem>> {
        let Poll { worker, reclaim_after, pollers } = poll;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        if let Some(worker) = worker {
            Self::record_poller(&mut tx, environment, worker, now, pollers).await?;
        }
        let picked = query_as::<(String,)>(E::POLL_WORK)
            .bind(environment.as_str())
            .bind(now)
            .bind(millis(reclaim_after))
            .fetch_optional(&mut *tx)
            .await?;
        let item = match picked {
            Some((id,)) => {
                query("UPDATE work_items SET delivered_at = $2, worker_id = $3 WHERE id = $1")
                    .bind(id.as_str())
                    .bind(now)
                    .bind(worker.map(str::to_owned))
                    .execute(&mut *tx)
                    .await?;
                let id = id.parse::<WorkId>().map_err(StoreError::corrupt)?;
                Some(Self::work_row(&mut tx, environment, &id).await?)
            }
            None => None,
        };
        self.finish(tx, Hints::default()).await?;
        Ok(item)
    }

    async fn ack_work(&self, environment: &EnvironmentId, id: &WorkId, lease: Duration) -> Result<WorkItem> {
        let mut tx = self.begin_write().await?;
        let item = Self::work_row(&mut tx, environment, id).await?;
        if item.state != WorkState::Queued {
            drop(tx);
            return Err(StoreError::Guard(Guard::WorkState { id: id.to_string(), state: item.state.as_str() }));
        }
        let (s, now) = Self::lock_session_at_now(&mut tx, &item.session_id).await?;
        let done = query_as::<(String,)>(
            "UPDATE work_items SET state = 'starting', acknowledged_at = $2, ttl_ms = $3, lease_expires_at = $4 \
             WHERE id = $1 AND state = 'queued' RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .bind(millis(lease))
        .bind(now + millis(lease))
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            drop(tx);
            return Err(StoreError::Guard(Guard::WorkState { id: id.to_string(), state: "no longer queued" }));
        }
        let mut hints = Hints::default();
        let event = Self::connection_event(&s, ConnectionStatus::Connected, None);
        Self::append_connection(&mut tx, &s, ConnectionStatus::Connected, vec![event], now, &mut hints).await?;
        let item = Self::work_row(&mut tx, environment, id).await?;
        self.finish(tx, hints).await?;
        Ok(item)
    }

    async fn heartbeat_work(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        expected: &str,
        ttl: Duration,
    ) -> Result<Beat> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let item = Self::work_row(&mut tx, environment, id).await?;
        if matches!(item.state, WorkState::Stopping | WorkState::Stopped) {
            drop(tx);
            return Ok(Beat::Ending { item });
        }
        let matches = match item.heartbeat.as_deref() {
            None => expected.is_empty() || expected == NO_HEARTBEAT,
            Some(last) => last == expected,
        };
        if !matches || item.state == WorkState::Queued {
            drop(tx);
            return Ok(Beat::Mismatch { item });
        }
        let value = heartbeat_value(now, item.heartbeat.as_deref());
        let done = query_as::<(String,)>(
            "UPDATE work_items SET state = 'active', started_at = COALESCE(started_at, $2), latest_heartbeat_at = $2, \
             heartbeat = $3, ttl_ms = $4, lease_expires_at = $5 \
             WHERE id = $1 AND state IN ('starting', 'active') AND COALESCE(heartbeat, '') = COALESCE($6, '') RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .bind(value.as_str())
        .bind(millis(ttl))
        .bind(now + millis(ttl))
        .bind(item.heartbeat.clone())
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            let item = Self::work_row(&mut tx, environment, id).await?;
            drop(tx);
            return Ok(Beat::Mismatch { item });
        }
        let item = Self::work_row(&mut tx, environment, id).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Beat::Extended { item, ttl })
    }

    async fn stop_work(&self, environment: &EnvironmentId, id: &WorkId, force: bool) -> Result<Stop> {
        let mut tx = self.begin_write().await?;
        let item = Self::work_row(&mut tx, environment, id).await?;
        if item.state == WorkState::Stopped {
            drop(tx);
            return Ok(Stop::AlreadyStopped { item });
        }
        let (s, now) = match Self::lock_session_at_now(&mut tx, &item.session_id).await {
            Ok(locked) => locked,
            // A deleted session's item.
            Err(StoreError::NotFound { .. }) => {
                let now = Self::now(&mut tx).await?;
                query(END_ORPHANED).bind(id.as_str()).bind(now).execute(&mut *tx).await?;
                let item = Self::work_row(&mut tx, environment, id).await?;
                self.finish(tx, Hints::default()).await?;
                return Ok(Stop::Done { item, disconnected: false });
            }
            Err(e) => return Err(e),
        };
        let to = if force || item.state == WorkState::Queued || item.state == WorkState::Stopping {
            WorkState::Stopped
        } else {
            WorkState::Stopping
        };
        let mut hints = Hints::default();
        let Some(disconnected) = Self::stop_locked(&mut tx, &s, &item, to, now, &mut hints).await? else {
            drop(tx);
            return Err(StoreError::Guard(Guard::WorkState { id: id.to_string(), state: "changing" }));
        };
        let item = Self::work_row(&mut tx, environment, id).await?;
        self.finish(tx, hints).await?;
        Ok(Stop::Done { item, disconnected })
    }

    async fn get_work(&self, environment: &EnvironmentId, id: &WorkId) -> Result<WorkItem> {
        query_as::<WorkItem>(WORK_BY_ID)
            .bind(id.as_str())
            .bind(environment.as_str())
            .found(&mut *self.reader().await?, "work item", id)
            .await
    }

    async fn update_work_metadata(
        &self,
        environment: &EnvironmentId,
        id: &WorkId,
        patch: BTreeMap<String, Option<String>>,
    ) -> Result<WorkItem> {
        let mut tx = self.begin_write().await?;
        let mut item = Self::work_row(&mut tx, environment, id).await?;
        for (k, v) in patch {
            match v {
                Some(v) => item.metadata.insert(k, v),
                None => item.metadata.remove(&k),
            };
        }
        query("UPDATE work_items SET metadata = $2 WHERE id = $1")
            .bind(id.as_str())
            .bind(serde_json::to_string(&item.metadata)?)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(item)
    }

    async fn list_work(&self, environment: &EnvironmentId, page: &PageRequest) -> Result<Page<WorkItem>> {
        self.list_page::<WorkItem>(page, LIST_WORK, [Arg::from(environment.as_str())]).await
    }

    async fn work_stats(&self, environment: &EnvironmentId, polling_window: Duration) -> Result<WorkStats> {
        let mut reader = self.reader().await?;
        let (depth, pending, oldest): (i64, i64, Option<i64>) = query_as(
            "SELECT COALESCE(SUM(CASE WHEN delivered_at IS NULL THEN 1 ELSE 0 END), 0), \
                    COALESCE(SUM(CASE WHEN delivered_at IS NULL THEN 0 ELSE 1 END), 0), MIN(created_at) \
             FROM work_items WHERE environment_id = $1 AND state = 'queued'",
        )
        .bind(environment.as_str())
        .fetch_one(&mut *reader)
        .await?;
        let (now,): (i64,) = query_as(E::NOW).fetch_one(&mut *reader).await?;
        let since = now - millis(polling_window);
        let (polling,): (i64,) =
            query_as("SELECT COUNT(*) FROM work_pollers WHERE environment_id = $1 AND polled_at > $2")
                .bind(environment.as_str())
                .bind(since)
                .fetch_one(&mut *reader)
                .await?;
        let n = |v: i64| u64::try_from(v).map_err(StoreError::corrupt);
        Ok(WorkStats {
            depth: n(depth)?,
            pending: n(pending)?,
            oldest_queued_at: oldest.map(gateway_core::Timestamp),
            workers_polling: n(polling)?,
        })
    }

    async fn expire_work(&self) -> Result<Vec<SessionId>> {
        // Read first, on the read pool: the sweep runs every second and mostly finds
        // nothing, which must cost the single writer nothing. Each lapse is checked again
        // under the session's lock before it is ended.
        let lapsed = {
            let mut reader = self.reader().await?;
            let (now,): (i64,) = query_as(E::NOW).fetch_one(&mut *reader).await?;
            query_as::<(String, String)>(
                "SELECT id, environment_id FROM work_items WHERE state IN ('starting', 'active', 'stopping') AND lease_expires_at < $1 \
                 ORDER BY lease_expires_at LIMIT 100",
            )
            .bind(now)
            .fetch_all(&mut *reader)
            .await?
        };
        let mut sessions = Vec::new();
        for (id, environment) in lapsed {
            let id = id.parse::<WorkId>().map_err(StoreError::corrupt)?;
            let environment = environment.parse::<EnvironmentId>().map_err(StoreError::corrupt)?;
            let mut tx = self.begin_write().await?;
            let item = Self::work_row(&mut tx, &environment, &id).await?;
            let Ok((s, now)) = Self::lock_session_at_now(&mut tx, &item.session_id).await else {
                // A deleted session's item.
                let now = Self::now(&mut tx).await?;
                query(END_ORPHANED).bind(id.as_str()).bind(now).execute(&mut *tx).await?;
                self.finish(tx, Hints::default()).await?;
                continue;
            };
            let mut hints = Hints::default();
            // Checked again under the lock: a beat may have renewed it meanwhile.
            let still = query_as::<(String,)>(
                "SELECT id FROM work_items WHERE id = $1 AND lease_expires_at < $2 AND state <> 'stopped'",
            )
            .bind(id.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if still.is_some()
                && Self::stop_locked(&mut tx, &s, &item, WorkState::Stopped, now, &mut hints).await?.is_some()
            {
                self.finish(tx, hints).await?;
                sessions.push(item.session_id);
            } else {
                drop(tx);
            }
        }
        Ok(sessions)
    }
}
