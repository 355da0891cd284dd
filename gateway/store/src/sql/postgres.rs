//! PostgreSQL: the shared store for several gateway processes. Claims use
//! `FOR UPDATE SKIP LOCKED`; hints travel between processes with NOTIFY on one channel,
//! received by one listener connection per store.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use super::conn::{Arg, Conn, DbError, DbErrorKind, FromRow, Query, Row, Value};
use super::events::list_events_sql;
use super::lateness::Lateness;
use super::outbox::claim_deliveries_sql;
use super::runs::claim_candidate_sql;
use super::sessions::list_sessions_sql;
use super::work::poll_work_sql;
use super::{Db, Engine, Hints, SqlStore, WAKE_CHANNEL};
use crate::error::{Result, StoreError};
use crate::peers::{Lane, Outbox, Peers};
use crate::wake::Wakeups;
use crate::{Store, StoreOptions};

/// The PostgreSQL engine.
pub struct Postgres;

pub type PgStore = SqlStore<Postgres>;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// The database clock as BIGINT milliseconds.
macro_rules! now_ms {
    () => {
        "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    };
}

impl Engine for Postgres {
    const NAME: &'static str = "postgres";
    const NOW: &'static str = concat!("SELECT ", now_ms!());
    const LOCK_SESSION: &'static str =
        concat!("SELECT ", super::session_cols!(), " FROM sessions WHERE id = $1 AND deleted_at IS NULL FOR UPDATE");
    const LOCK_SESSION_AT_NOW: &'static str = concat!(
        "SELECT ",
        super::session_cols!(),
        ", ",
        now_ms!(),
        " AS now_ms FROM sessions WHERE id = $1 AND deleted_at IS NULL FOR UPDATE"
    );
    const CLAIM_SETUP: Option<&'static str> = Some("SET LOCAL lock_timeout = '200ms'");
    const QUEUE_STATS: &'static str = super::queue_stats_sql!(now_ms!());
    const MIGRATIONS_TABLE_EXISTS: &'static str =
        "SELECT CAST(CASE WHEN to_regclass('_sqlx_migrations') IS NULL THEN 0 ELSE 1 END AS BIGINT)";
    const RENEW_LEASES: &'static str = "UPDATE runs SET lease_expires_at = $2 WHERE state = 'running' \
         AND (id, lease_owner, lease_epoch) IN \
             (SELECT h->>0, h->>1, (h->>2)::BIGINT FROM json_array_elements($1::json) AS h) \
         RETURNING id, lease_owner, lease_epoch, CASE WHEN cancel_requested THEN 'y' ELSE 'n' END";
    const CLAIM_CANDIDATE: &'static str = claim_candidate_sql!(
        "(SELECT json_array_elements_text($1::json))",
        "(SELECT json_array_elements_text($2::json))",
        " FOR UPDATE OF r SKIP LOCKED"
    );
    const LIST_SESSIONS: [&'static str; 2] = list_sessions_sql!("(SELECT json_array_elements_text($4::json))");
    const SESSION_TIPS: &'static str =
        "SELECT id, last_seq FROM sessions WHERE id IN (SELECT json_array_elements_text($1::json))";
    const DELETE_FEED_ROWS: &'static str =
        "DELETE FROM event_feed WHERE channel = $1 AND id IN (SELECT json_array_elements_text($2::json)::BIGINT)";
    const LIST_EVENTS_ASC: &'static str = list_events_sql!("(SELECT json_array_elements_text($2::json))", ">", "ASC");
    const LIST_EVENTS_DESC: &'static str = list_events_sql!("(SELECT json_array_elements_text($2::json))", "<", "DESC");
    const CLAIM_DELIVERIES: &'static str = claim_deliveries_sql!(" FOR UPDATE OF o SKIP LOCKED");
    const POLL_WORK: &'static str = poll_work_sql!(" FOR UPDATE OF w SKIP LOCKED");
    const SHARE_FILE: &'static str = "SELECT id FROM files WHERE id = $1 FOR SHARE";
    const LOCK_FILE: &'static str = "SELECT id FROM files WHERE id = $1 FOR UPDATE";
    /// Locked: a claim holds its run row from choosing it to committing its input boundary
    /// (`FOR UPDATE OF r`), so admission waits for it and then sees the run running.
    const RUN_PRESENCE: &'static str = "SELECT CASE WHEN state = 'running' THEN 'running' WHEN started THEN 'retrying' ELSE 'queued' END \
         FROM runs WHERE session_id = $1 AND state IN ('running', 'queued') FOR UPDATE";

    type Conn = PgConnection;
    type Db = PgDb;
}

/// The open PostgreSQL database: one pool for reads and writes, each write a transaction of
/// its own (the server groups concurrent commits' WAL flushes itself).
pub struct PgDb {
    pool: PgPool,
    /// At most as many reads ask the pool at once as it has connections; the rest wait here,
    /// in a fair queue without a timeout. With thousands of tasks waiting inside sqlx's own
    /// acquire, acquisitions near their timeout take a connection and drop it, and the pool
    /// stops serving anyone while the process idles (launchbadge/sqlx#3132).
    read_gate: tokio::sync::Semaphore,
    read_wait: Arc<Lateness>,
    /// Writes from `begin` to durable (see `lateness.rs`).
    write_wait: Arc<Lateness>,
    /// Where a commit's hints are delivered in this process.
    wake: Arc<Wakeups>,
    /// Commit latency (the same handles as the store's).
    metrics: crate::StoreMetrics,
}

/// A pooled connection to read on, while the read gate lets this read ask the pool.
pub struct PgReader<'a> {
    conn: PoolConnection<sqlx::Postgres>,
    _place: tokio::sync::SemaphorePermit<'a>,
}

impl Deref for PgReader<'_> {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for PgReader<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// A write: a transaction of its own on a pooled connection, begun with the database clock
/// read in the same round trip (`BEGIN; SELECT clock` as one simple query). Nearly every write
/// reads the clock first, and a transaction begun by sqlx costs a round trip for its `BEGIN`
/// alone. Begun and ended by hand, so sqlx does not know the connection is in a transaction:
/// this type is what ends it, committed or rolled back, before the pool sees it again.
pub struct PgTx {
    /// In an open transaction until committed; `None` once committed or dropped.
    conn: Option<PoolConnection<sqlx::Postgres>>,
    /// The database clock when the transaction began.
    began_at: i64,
    asked: Option<super::lateness::Waiting>,
}

/// Begins a transaction and reads the database clock in one round trip.
const BEGIN_AT_NOW: &str = concat!("BEGIN; SELECT ", now_ms!());

impl Deref for PgTx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.conn.as_deref().expect("an open write holds its connection")
    }
}

impl DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn.as_deref_mut().expect("an open write holds its connection")
    }
}

impl Drop for PgTx {
    /// A write that ends without `commit` (refused, failed, cancelled) rolls back at once, in
    /// a task of its own, before its connection goes back to the pool: until then the
    /// transaction's row locks stay held, and the pool would hand out a connection inside it.
    /// A connection the rollback cannot reach (or with no runtime to run it) is closed.
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err() {
                        conn.close_on_drop();
                    }
                });
            }
            Err(_) => conn.close_on_drop(),
        }
    }
}

impl Db for PgDb {
    type Conn = PgConnection;
    type Reader<'a> = PgReader<'a>;
    type Tx = PgTx;

    async fn reader(&self) -> Result<PgReader<'_>> {
        let waiting = self.read_wait.wait();
        let place =
            self.read_gate.acquire().await.map_err(|_| StoreError::Unavailable("the store is closed".into()))?;
        waiting.done();
        let conn = self.pool.acquire().await.map_err(pg_error)?;
        Ok(PgReader { conn, _place: place })
    }

    async fn begin(&self) -> Result<PgTx> {
        let asked = Some(self.write_wait.wait());
        let conn = self.pool.acquire().await.map_err(pg_error)?;
        // Held by the write before `BEGIN` is sent, so a failure after it rolls back.
        let mut tx = PgTx { conn: Some(conn), began_at: 0, asked };
        let clock = sqlx::raw_sql(BEGIN_AT_NOW).fetch_one(&mut *tx).await.map_err(pg_error)?;
        tx.began_at = sqlx::Row::try_get(&clock, 0).map_err(pg_error)?;
        Ok(tx)
    }

    fn began_at(tx: &PgTx) -> Option<i64> {
        Some(tx.began_at)
    }

    async fn commit(&self, mut tx: PgTx, hints: Hints) -> Result<()> {
        if let Some(mut conn) = tx.conn.take() {
            let started = std::time::Instant::now();
            let committed = sqlx::raw_sql("COMMIT").execute(&mut *conn).await;
            self.metrics.committed(1, started.elapsed());
            if committed.is_err() {
                // Whether the server committed is unknown: the connection is not reused.
                conn.close_on_drop();
            }
            committed.map_err(pg_error)?;
        }
        if let Some(asked) = tx.asked.take() {
            asked.done();
        }
        hints.deliver(&self.wake);
        Ok(())
    }

    async fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn lateness(&self) -> std::time::Duration {
        self.write_wait.now().max(self.read_wait.now())
    }
}

/// Maps a sqlx error to what the store decides on.
pub(crate) fn pg_error(e: sqlx::Error) -> DbError {
    let kind = match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => DbErrorKind::UniqueViolation,
        sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => DbErrorKind::LockTimeout,
        sqlx::Error::Database(d) if d.code().as_deref().is_some_and(server_unavailable) => DbErrorKind::Unavailable,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
            DbErrorKind::Unavailable
        }
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::ColumnNotFound(_) => {
            DbErrorKind::Decode
        }
        _ => DbErrorKind::Other,
    };
    DbError::new(kind, e.to_string())
}

/// Whether a SQLSTATE says the server, not the statement, failed: it is shutting down or
/// restarting (`57P01`-`57P03`, sent to every session by `pg_ctl stop -m fast|immediate` and
/// while it recovers), the connection broke (class `08`), or it ran out of resources
/// (class `53`: disk full, too many connections). Such a statement may succeed once the
/// server is back, so the client is told to retry (503), not that the gateway failed (500).
fn server_unavailable(sqlstate: &str) -> bool {
    sqlstate.starts_with("08") || sqlstate.starts_with("53") || matches!(sqlstate, "57P01" | "57P02" | "57P03")
}

/// The sqlx statement of a [`Query`], its arguments bound in order.
fn statement<'q>(q: &'q Query<'q>) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let mut statement = sqlx::query(q.sql);
    for arg in &q.args {
        statement = match arg {
            Arg::Int(v) => statement.bind(*v),
            Arg::Bool(v) => statement.bind(*v),
            Arg::Text(v) => statement.bind(v.as_deref()),
            Arg::Bytes(v) => statement.bind(v.as_deref()),
        };
    }
    statement
}

struct PgRowRef<'a>(&'a PgRow);

impl Row for PgRowRef<'_> {
    fn get<T: Value>(&self, column: &str) -> std::result::Result<T, DbError> {
        T::from_pg(self.0, column)
    }

    fn get_at<T: Value>(&self, index: usize) -> std::result::Result<T, DbError> {
        T::from_pg(self.0, index)
    }
}

impl Conn for PgConnection {
    async fn execute<'q>(&mut self, query: Query<'q>) -> std::result::Result<u64, DbError> {
        query.check_storable()?;
        let done = statement(&query).execute(&mut *self).await.map_err(pg_error)?;
        Ok(done.rows_affected())
    }

    async fn fetch<'q, R: FromRow>(&mut self, query: Query<'q>, limit: usize) -> std::result::Result<Vec<R>, DbError> {
        query.check_storable()?;
        let rows = if limit == 1 {
            statement(&query).fetch_optional(&mut *self).await.map_err(pg_error)?.into_iter().collect()
        } else {
            statement(&query).fetch_all(&mut *self).await.map_err(pg_error)?
        };
        rows.iter().take(limit).map(|row| R::from_row(&PgRowRef(row))).collect()
    }
}

impl PgStore {
    /// Connects a pool and, when wake-ups are on, starts the one listener of this store.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("bad PostgreSQL URL: {e}")))?
            .application_name("gateway")
            // A process paused inside a transaction (SIGSTOP, a debugger, a VM freeze) would
            // hold its session row lock forever; the server ends such transactions instead.
            .options([("idle_in_transaction_session_timeout", "5s")]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            // sqlx pings every idle connection it hands out, a round trip before each read
            // and write: about a dozen per A2A message, beside the 34 statements it then ran
            // (ADR 0037). A connection back within the last second was sound
            // then; one idle longer (across a database restart, say) is still checked.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > IDLE_BEFORE_PING {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await?;
        let wake = Arc::new(Wakeups::new(options.wakeups));
        let background = CancellationToken::new();
        let (peers, outbox) = Peers::new(wake.origin().to_owned(), &options.metrics);
        let peers = Arc::new(peers);
        let mut listener = PgListener::connect_with(&pool).await?;
        if options.wakeups {
            listener.listen(WAKE_CHANNEL).await?;
        }
        listener.listen(PEERS_CHANNEL).await?;
        tokio::spawn(listen(listener, Arc::clone(&wake), Arc::clone(&peers), background.clone()));
        tokio::spawn(send_to_peers(outbox, pool.clone(), background.clone()));
        let read_gate = tokio::sync::Semaphore::new(pool.options().get_max_connections().max(1) as usize);
        Ok(SqlStore {
            db: PgDb {
                pool,
                read_gate,
                read_wait: Default::default(),
                write_wait: Default::default(),
                wake: Arc::clone(&wake),
                metrics: options.metrics.clone(),
            },
            wake,
            peers: Some(peers),
            background,
            feed: Default::default(),
            metrics: options.metrics.clone(),
        })
    }

    /// The pool, for tests and tools that need raw access.
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }
}

/// How long a pooled connection may have been idle before it is pinged when handed out.
const IDLE_BEFORE_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// How long readiness waits for the database: an answer slower than this is no answer.
const PING_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// The NOTIFY channel of messages between processes (`peers.rs`), apart from the hints'.
const PEERS_CHANNEL: &str = "gateway_peers";

/// Forwards NOTIFY payloads to the local hub and the peers' inbox. After a lost connection
/// (which the listener re-establishes by itself) hints may have been missed, so every local
/// waiter is woken to re-check; polling would find the work anyway, this only saves latency.
/// Peer messages lost meanwhile stay lost: they are best effort.
async fn listen(mut listener: PgListener, wake: Arc<Wakeups>, peers: Arc<Peers>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            n = listener.try_recv() => match n {
                Ok(Some(n)) if n.channel() == PEERS_CHANNEL => peers.deliver(n.payload()),
                Ok(Some(n)) => wake.deliver_notified(n.payload()),
                Ok(None) => {
                    tracing::warn!("wake-up listener lost its connection; reconnecting");
                    wake.deliver_all();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "wake-up listener failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// Sends the queued hints and messages, in order, every batch in one statement on a pooled
/// connection: a connection is held only while a batch is on its way, so a quiet process
/// spends nothing here. A failed batch is dropped (best effort) after a short pause, so a
/// database that is down is not hammered.
async fn send_to_peers(mut outbox: Outbox, pool: PgPool, stop: CancellationToken) {
    loop {
        let payloads = tokio::select! {
            _ = stop.cancelled() => return,
            p = outbox.next_payloads() => match p {
                Some(p) => p,
                None => return,
            },
        };
        let lines: usize = payloads.iter().map(|(_, p)| p.lines().count() - 1).sum();
        let (channels, payloads): (Vec<&str>, Vec<String>) = payloads
            .into_iter()
            .map(|(lane, p)| {
                (
                    match lane {
                        Lane::Wake => WAKE_CHANNEL,
                        Lane::Peers => PEERS_CHANNEL,
                    },
                    p,
                )
            })
            .unzip();
        let sent = sqlx::query(
            "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(c, p, n) ORDER BY n",
        )
        .bind(&channels)
        .bind(&payloads)
        .execute(&pool)
        .await;
        outbox.settled(lines, sent.is_ok());
        if let Err(e) = sent {
            tracing::debug!(error = %e, lines, "hints and messages to other processes dropped");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

#[async_trait]
impl Store for PgStore {
    /// Answers within [`PING_DEADLINE`]: a pool that cannot connect retries until its
    /// acquire timeout (seconds), and a load balancer must hear "not ready" well before that.
    async fn ping(&self) -> Result<()> {
        let ping =
            async { super::query("SELECT 1").execute(&mut *self.reader().await?).await.map_err(StoreError::from) };
        match tokio::time::timeout(PING_DEADLINE, ping).await {
            Ok(answered) => answered.map(|_| ()),
            Err(_) => Err(StoreError::Unavailable(format!("no answer within {PING_DEADLINE:?}"))),
        }
    }

    async fn sync(&self) -> Result<()> {
        self.db.sync().await
    }

    fn wakeups(&self) -> Arc<Wakeups> {
        Arc::clone(&self.wake)
    }

    fn peers(&self) -> Option<Arc<Peers>> {
        self.peers.clone()
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.db.pool).await?;
        Ok(())
    }

    async fn migration_status(&self) -> Result<crate::MigrationStatus> {
        super::migrations::status(self, &MIGRATOR).await
    }

    async fn close(&self) {
        self.background.cancel();
        self.db.pool.close().await;
    }

    fn writes_committed(&self) -> u64 {
        self.metrics.writes.get()
    }

    fn engine(&self) -> &'static str {
        Postgres::NAME
    }
}

#[cfg(test)]
mod tests {
    use super::server_unavailable;

    #[test]
    fn server_side_failures_are_unavailable_and_statement_failures_are_not() {
        let table = [
            ("57P01", true, "admin_shutdown: pg_ctl stop -m fast|immediate"),
            ("57P02", true, "crash_shutdown"),
            ("57P03", true, "cannot_connect_now: starting up or recovering"),
            ("08006", true, "connection_failure"),
            ("08000", true, "connection_exception"),
            ("53100", true, "disk_full"),
            ("53300", true, "too_many_connections"),
            ("57014", false, "query_canceled: a statement timeout is the statement's"),
            ("23505", false, "unique_violation"),
            ("22021", false, "character_not_in_repertoire (a NUL in text)"),
            ("42P01", false, "undefined_table: a bug"),
        ];
        for (code, want, why) in table {
            assert_eq!(server_unavailable(code), want, "{code}: {why}");
        }
    }
}
