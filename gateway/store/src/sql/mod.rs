//! One SQL implementation of the Store port, generic over the database engine.
//!
//! SQLite and PostgreSQL both accept `$N` parameters, `RETURNING`, row-value comparisons and
//! `ON CONFLICT`, and both schemas use the same column types (TEXT, BIGINT, BOOLEAN), so
//! nearly every statement is shared. What differs lives in [`Engine`]: how to read the
//! database clock, how a write transaction begins, how the session row is locked, how a
//! list parameter is expanded, and whether commits notify other processes.
//!
//! Concurrency argument, engine by engine:
//! - SQLite: every write transaction starts with `BEGIN IMMEDIATE` on the single writer
//!   connection, so writers are serialized and a read-check-write sequence cannot interleave.
//! - PostgreSQL: a write transaction first locks the session row (`FOR UPDATE`) and only then
//!   touches its runs; claims lock only run rows (`FOR UPDATE SKIP LOCKED`). One lock order
//!   everywhere, so no deadlock; and every check that guards a write reads a locked row.
//!
//! In both, the fence check (`lease_owner`, `lease_epoch`) is a predicate of the same
//! `UPDATE` as part of the same transaction as the event inserts.

/// ` LIMIT CAST($n AS BIGINT)`, the one way a statement takes its row limit as a parameter.
/// SQLite (3.47 and later) reads a bare `LIMIT $n`'s bound value while planning and marks the
/// statement to be prepared again whenever `$n` is bound anew, which sqlx does on every
/// execution: the claim query was compiled afresh on every claim (a fifth of a millisecond of
/// the single writer's time each; `sqlite3Reprepare` under perf). A cast is not a parameter to
/// the planner, so the prepared statement stays cached; the plan never depended on the limit.
macro_rules! limit {
    ($n:literal) => {
        concat!(" LIMIT CAST($", stringify!($n), " AS BIGINT)")
    };
}
pub(crate) use limit;

mod catalog;
pub(crate) mod conn;
mod documents;
mod events;
mod feeds;
mod files;
mod keys;
mod lateness;
mod migrations;
mod outbox;
pub(crate) mod read;
mod runs;
mod sessions;
mod skills;
mod vaults;
mod webhooks;
mod work;

pub mod postgres;
pub mod sqlite;

use std::future::Future;
use std::ops::DerefMut;
use std::sync::Arc;

use gateway_core::event::{Event, NewEvent};
use gateway_core::{RunId, SessionId, Timestamp};

use crate::error::Result;
use crate::wake::{Hint, Wakeups};
pub(crate) use conn::{Conn, query, query_as};

/// An engine: its dialect (the statements that differ), the connection its statements run on,
/// and the database it keeps open. Statements that embed engine-specific fragments are built
/// from one template per statement (macros below), so the SQL text exists once.
pub trait Engine: Sized + Send + Sync + 'static {
    const NAME: &'static str;
    /// Selects the database clock as BIGINT milliseconds.
    const NOW: &'static str;
    /// The database's clock is this process's: SQLite runs inside the process and reads the
    /// same system clock (its VFS `xCurrentTimeInt64`), so [`SqlStore::now`] reads it without a
    /// statement.
    const IN_PROCESS_CLOCK: bool = false;
    /// Selects a live session row, locked for the rest of the transaction.
    const LOCK_SESSION: &'static str;
    /// `LOCK_SESSION` plus the database clock (`now_ms`) and `feed_subscribed`, in the same
    /// round trip.
    const LOCK_SESSION_AT_NOW: &'static str;
    /// Selects a created file's id (`$1`), the row held against a delete until the end of the
    /// transaction: what a session takes before it records a mount (see `files.rs`).
    const SHARE_FILE: &'static str;
    /// Selects a created file's id (`$1`), the row held against mounts and other deletes until
    /// the end of the transaction: what a delete takes before it checks the mounts.
    const LOCK_FILE: &'static str;
    /// Picks the work item a poll hands out (see `work.rs`).
    const POLL_WORK: &'static str;
    /// Picks the claim candidates (see `runs.rs`).
    const CLAIM_CANDIDATE: &'static str;
    /// Run at the start of a claim's transaction: bounds how long it may wait for a session
    /// row (PostgreSQL `lock_timeout`). A claim holds run rows while it locks sessions, the
    /// reverse of every other writer's order, so it must never wait long: a session it cannot
    /// lock soon is left for the next claim.
    const CLAIM_SETUP: Option<&'static str>;
    /// Renews the leases named in `$1` (a JSON array of `[run id, owner, epoch]`) that are
    /// still held, to expire at `$2`; returns `(id, 'y' | 'n')`: each renewed run, and whether
    /// its cancel was requested.
    const RENEW_LEASES: &'static str;
    /// `(queued, oldest_wait_ms)`: how many runs wait to be claimed, and how long the oldest
    /// one a Worker could claim now (due, first of its session, its session neither running
    /// another nor waiting for answers) has waited, on the database clock (NULL if none).
    const QUEUE_STATS: &'static str;
    /// The kind (`running`, `queued`, `retrying`) of each active run of session `$1`, the
    /// rows locked where the engine locks rows (see `sessions.rs`, `run_presence`).
    const RUN_PRESENCE: &'static str;
    /// `[ascending, descending]` (see `sessions.rs`, `list_sessions_sql`).
    const LIST_SESSIONS: [&'static str; 2];
    const LIST_EVENTS_ASC: &'static str;
    /// `id, last_seq` of the sessions whose ids are in the JSON array `$1` (deleted ones too:
    /// their last event is the deletion).
    const SESSION_TIPS: &'static str;
    /// Deletes channel `$1`'s feed rows whose ids are in the JSON array `$2` (see `feeds.rs`).
    const DELETE_FEED_ROWS: &'static str;
    const LIST_EVENTS_DESC: &'static str;
    /// Picks due outbox deliveries (see `outbox.rs`).
    const CLAIM_DELIVERIES: &'static str;
    /// Selects 1 if sqlx's `_sqlx_migrations` table exists (in the schema queries resolve
    /// to), else 0.
    const MIGRATIONS_TABLE_EXISTS: &'static str;

    /// The connection statements run on.
    type Conn: Conn;
    /// What the engine keeps open.
    type Db: Db<Conn = Self::Conn>;
}

/// An engine's open database: where reads get a connection, and how a write begins and
/// becomes durable.
pub trait Db: Send + Sync + 'static {
    type Conn: Conn;
    /// A connection to read on, for as long as it is held.
    type Reader<'a>: DerefMut<Target = Self::Conn> + Send
    where
        Self: 'a;
    /// A write in progress: dropped without [`Db::commit`], it writes nothing.
    type Tx: DerefMut<Target = Self::Conn> + Send;

    fn reader(&self) -> impl Future<Output = Result<Self::Reader<'_>>> + Send;
    fn begin(&self) -> impl Future<Output = Result<Self::Tx>> + Send;
    /// The database clock of `tx`, read once and then kept, where the engine keeps it
    /// (PostgreSQL: read with the transaction's `BEGIN` where it can); `None` elsewhere.
    fn clock(_tx: &mut Self::Tx) -> impl Future<Output = Result<Option<i64>>> + Send {
        async { Ok(None) }
    }
    /// Returns once the write is durable (invariant 4), its `hints` delivered in this process
    /// after the commit they describe.
    fn commit(&self, tx: Self::Tx, hints: Hints) -> impl Future<Output = Result<()>> + Send;
    /// Returns once every write begun before it is durable (or failed).
    fn sync(&self) -> impl Future<Output = Result<()>> + Send;
    /// How late writes and reads run now (see `lateness.rs`).
    fn lateness(&self) -> std::time::Duration;
}

/// A write in progress on engine `E`; derefs to the connection its statements run on.
pub(crate) type WriteTx<E> = <<E as Engine>::Db as Db>::Tx;

/// The notification channel hints travel on between processes.
pub const WAKE_CHANNEL: &str = "gateway_wake";

/// The store: the engine's database, and the wake-up hub its commits feed.
pub struct SqlStore<E: Engine> {
    pub(crate) db: E::Db,
    pub(crate) wake: Arc<Wakeups>,
    /// Messages between processes: PostgreSQL's only (one SQLite file serves one process).
    pub(crate) peers: Option<Arc<crate::peers::Peers>>,
    pub(crate) background: tokio_util::sync::CancellationToken,
    /// Commits feed lifecycle events ([`crate::LIFECYCLE_FEED`], see `feeds.rs`).
    pub(crate) feed: std::sync::atomic::AtomicBool,
    /// Logical writes committed, commit latency and batch sizes.
    pub(crate) metrics: crate::StoreMetrics,
}

impl<E: Engine> SqlStore<E> {
    /// A connection to read on.
    pub(crate) async fn reader(&self) -> Result<<E::Db as Db>::Reader<'_>> {
        self.db.reader().await
    }
}

/// The body of [`Engine::QUEUE_STATS`], around the engine's clock expression.
macro_rules! queue_stats_sql {
    ($now:expr) => {
        concat!(
            "SELECT COUNT(*), MAX(CASE WHEN r.available_at <= ",
            $now,
            " AND s.pending = '[]' \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.session_id = r.session_id AND o.state = 'running') \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.session_id = r.session_id AND o.state = 'queued' AND o.created_at < r.created_at) \
             THEN ",
            $now,
            " - r.available_at END) FROM runs r JOIN sessions s ON s.id = r.session_id WHERE r.state = 'queued'"
        )
    };
}
pub(crate) use queue_stats_sql;

/// Columns of a session row, as `Session` reads them (`rows.rs`).
macro_rules! session_cols {
    () => {
        "id, environment_id, snapshot, title, metadata, status, pending, env_state, env_host, connection, last_seq, created_at, updated_at, archived_at, usage_input_tokens, usage_output_tokens, usage_cache_read_tokens, usage_cache_write_tokens, usage_list_cost_micros, usage_unpriced_requests, budget_max_micros"
    };
}
pub(crate) use session_cols;

/// Columns of a run row, in `Run` order.
macro_rules! run_cols {
    () => {
        "id, session_id, state, backend, provider, lease_owner, lease_epoch, lease_expires_at, crash_count, attempt, available_at, cancel_requested, started, input_seq, traceparent, tracestate, created_at, updated_at"
    };
}
pub(crate) use run_cols;

/// Columns of an event row, as `Event` reads them (`rows.rs`).
macro_rules! event_cols {
    () => {
        "session_id, seq, id, payload, created_at, run_id, epoch"
    };
}
pub(crate) use event_cols;

/// Hints collected during a transaction, sent to other processes inside it (PostgreSQL) and
/// delivered locally after it commits, with the batches of events it committed.
#[derive(Default)]
pub struct Hints {
    hints: Vec<Hint>,
    batches: Vec<(SessionId, Vec<Event>)>,
    /// Sessions of this transaction some channel subscribed to (`feeds.rs`): their batches
    /// are fed to the subscribed channels.
    subscribed: Vec<SessionId>,
    /// Sessions whose subscription this transaction knows for the rest of it: read under
    /// their row lock (only a writer holding that lock subscribes a session, and it is never
    /// undone), or created by it. Their advance need not read it back (`advance_session`).
    known: Vec<SessionId>,
}

impl Hints {
    pub fn push(&mut self, h: Hint) {
        self.hints.push(h);
    }

    /// Removes the run-ready hint, saying whether there was one: an admission that claims
    /// the run it queued has nobody to wake.
    pub fn take_run_ready(&mut self) -> bool {
        let before = self.hints.len();
        self.hints.retain(|h| !matches!(h, Hint::RunReady));
        self.hints.len() != before
    }

    /// Shares a committed batch with this process's watchers of the session.
    pub fn committed(&mut self, session: &SessionId, events: &[Event]) {
        if !events.is_empty() {
            self.batches.push((session.clone(), events.to_vec()));
        }
    }

    /// Notes that `session` has feed subscriptions (said by the update that advanced it, or
    /// written by this transaction).
    pub fn subscribed(&mut self, session: &SessionId) {
        if !self.subscribed.contains(session) {
            self.subscribed.push(session.clone());
        }
    }

    /// Notes whether `session` is subscribed, as this transaction read it under the session's
    /// row lock or made it (see `known`).
    pub fn knows_subscription(&mut self, session: &SessionId, subscribed: bool) {
        if subscribed {
            self.subscribed(session);
        }
        if !self.known.contains(session) {
            self.known.push(session.clone());
        }
    }

    pub fn knows_subscription_of(&self, session: &SessionId) -> bool {
        self.known.contains(session)
    }

    pub fn is_subscribed(&self, session: &SessionId) -> bool {
        self.subscribed.contains(session)
    }

    /// The batches of events the transaction committed.
    pub fn batches(&self) -> &[(SessionId, Vec<Event>)] {
        &self.batches
    }

    /// Delivers the hints in this process; only ever after the commit they describe.
    pub fn deliver(self, wake: &Wakeups) {
        for (session, events) in self.batches {
            if wake.is_watched(&session) {
                wake.deliver_committed(&session, events.into());
            }
        }
        for h in &self.hints {
            wake.deliver(h);
        }
    }
}

impl<E: Engine> SqlStore<E> {
    pub(crate) async fn begin_write(&self) -> Result<WriteTx<E>> {
        self.db.begin().await
    }

    /// The database clock, read inside the transaction so every row it writes agrees (on
    /// PostgreSQL, read once and kept by the transaction: every caller reads it before any
    /// wait of its own, or clamps what it writes as `lock_session_at_now` does).
    pub(crate) async fn now(tx: &mut WriteTx<E>) -> Result<i64> {
        if E::IN_PROCESS_CLOCK {
            return Ok(in_process_now());
        }
        if let Some(now) = <E::Db as Db>::clock(tx).await? {
            return Ok(now);
        }
        let (now,): (i64,) = query_as(E::NOW).fetch_one(&mut **tx).await?;
        Ok(now)
    }

    /// Runs `delete` (a `DELETE … WHERE id = $1 RETURNING id` of the store's own) for `id` in
    /// `tx`; whether a row went.
    pub(crate) async fn deleted(tx: &mut WriteTx<E>, delete: &'static str, id: &str) -> Result<bool> {
        Ok(query_as::<(String,)>(delete).bind(id).fetch_optional(&mut **tx).await?.is_some())
    }

    /// The database clock, read on a read connection (for figures, not for rows).
    pub(crate) async fn now_on<'c>(conn: &mut <E::Db as Db>::Reader<'c>) -> Result<i64> {
        if E::IN_PROCESS_CLOCK {
            return Ok(in_process_now());
        }
        let (now,): (i64,) = query_as(E::NOW).fetch_one(&mut **conn).await?;
        Ok(now)
    }

    /// Commits (durably: see [`Db::commit`]); the hints are delivered locally after it, and
    /// on PostgreSQL queued for the other processes ([`crate::Peers`]): after the commit, so
    /// they never announce what did not happen, and outside the transaction, so a write does
    /// not wait for its NOTIFY (batched with others' by the sending task).
    pub(crate) async fn finish(&self, mut tx: WriteTx<E>, hints: Hints) -> Result<()> {
        if !hints.batches.is_empty()
            && (self.feed.load(std::sync::atomic::Ordering::Relaxed) || !hints.subscribed.is_empty())
        {
            self.feed_events(&mut tx, &hints).await?;
        }
        let remote = (self.peers.is_some() && self.wake.enabled() && !hints.hints.is_empty())
            .then(|| hints.hints.iter().map(Hint::encode).collect::<Vec<_>>());
        self.db.commit(tx, hints).await?;
        self.metrics.writes.inc();
        if let (Some(peers), Some(lines)) = (&self.peers, remote) {
            peers.hints(lines);
        }
        Ok(())
    }

    /// Appends events after `last_seq`: seqs `last_seq+1 ..`, no gap, no duplicate (the
    /// primary key forbids duplicates; the caller holds the session's write lock and
    /// stores the returned last seq in the same transaction).
    pub(crate) async fn append_events(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        last_seq: u64,
        events: Vec<NewEvent>,
        now: i64,
        by: Option<(&RunId, i64)>,
    ) -> Result<Vec<Event>> {
        Self::append_authored(tx, session, last_seq, events.into_iter().map(|e| (e, by)).collect(), now).await
    }

    /// [`Self::append_events`] with each event's own author (the run and epoch that
    /// committed it; `None` for a client's input), so that inputs and the turn start they
    /// begin go in one statement.
    pub(crate) async fn append_authored(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        last_seq: u64,
        events: Vec<(NewEvent, Option<(&RunId, i64)>)>,
        now: i64,
    ) -> Result<Vec<Event>> {
        let mut out = Vec::with_capacity(events.len());
        let mut seq = last_seq;
        let mut events = events.into_iter().peekable();
        while events.peek().is_some() {
            let chunk: Vec<_> = events.by_ref().take(INSERT_CHUNK).collect();
            let mut q = query(insert_events_sql(chunk.len()));
            for (e, by) in chunk {
                seq += 1;
                let payload = serde_json::to_string(&e.payload)?;
                q = q
                    .bind(session.as_str())
                    .bind(seq as i64)
                    .bind(e.id.to_string())
                    .bind(e.payload.kind().as_str())
                    .bind(payload)
                    .bind(now)
                    .bind(by.map(|(r, _)| r.to_string()))
                    .bind(by.map(|(_, epoch)| epoch));
                out.push(Event {
                    id: e.id,
                    session_id: session.clone(),
                    seq,
                    created_at: Timestamp(now),
                    run_id: by.map(|(r, _)| r.clone()),
                    epoch: by.map(|(_, epoch)| epoch),
                    payload: e.payload,
                });
            }
            // Deferred: every value of the rows is known here, and nothing reads them back.
            q.defer(&mut **tx).await?;
        }
        Ok(out)
    }
}

/// Rows per multi-row insert: one statement per chunk instead of one per row.
const INSERT_CHUNK: usize = 32;

/// A multi-row statement, `{head}(..), (..){tail}` with `n` rows (1..=INSERT_CHUNK) of `cols`
/// placeholders each. The text is made of placeholders and the caller's static text only, built
/// once per size and kept for the process's life, so it is as safe as a literal and each
/// size is prepared once.
fn multi_row_sql(
    cache: &'static std::sync::OnceLock<Vec<&'static str>>,
    head: &'static str,
    cols: usize,
    tail: &'static str,
    n: usize,
) -> &'static str {
    let all = cache.get_or_init(|| {
        (0..=INSERT_CHUNK)
            .map(|rows| {
                let values: Vec<String> = (0..rows)
                    .map(|r| {
                        let row: Vec<String> = (1..=cols).map(|c| format!("${}", r * cols + c)).collect();
                        format!("({})", row.join(", "))
                    })
                    .collect();
                &*Box::leak(format!("{head}{}{tail}", values.join(", ")).into_boxed_str())
            })
            .collect()
    });
    all[n.clamp(1, INSERT_CHUNK)]
}

/// `INSERT INTO events ... VALUES (...), (...)` for `n` rows.
fn insert_events_sql(n: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let head = "INSERT INTO events (session_id, seq, id, kind, payload, created_at, run_id, epoch) VALUES ";
    multi_row_sql(&SQL, head, 8, "", n)
}

/// The upsert of `n` session bindings.
pub(crate) fn upsert_bindings_sql(n: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let head = "INSERT INTO session_bindings (session_id, key, value, updated_at) VALUES ";
    let tail = " ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at";
    multi_row_sql(&SQL, head, 4, tail, n)
}

/// The creation of `n` documents: the rows it created (`namespace, key`); one that existed is
/// left as it was and missing from them.
pub(crate) fn create_documents_sql(n: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let head = "INSERT INTO documents (namespace, key, body, version, created_at, updated_at) VALUES ";
    multi_row_sql(&SQL, head, 6, " ON CONFLICT (namespace, key) DO NOTHING RETURNING namespace, key", n)
}

/// A counter (a seq, a version, a token count, a cost) as a BIGINT holds it: saturating,
/// never wrapping negative.
pub(crate) fn bigint(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The clock of an engine whose clock is this process's ([`Engine::IN_PROCESS_CLOCK`]).
fn in_process_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
