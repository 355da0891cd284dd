//! PostgreSQL: the shared store for several gateway processes. Claims use
//! `FOR UPDATE SKIP LOCKED`; hints travel between processes with NOTIFY on one channel,
//! received by one listener connection per store.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use std::future::Future;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
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
        " AS now_ms, feed_subscribed FROM sessions WHERE id = $1 AND deleted_at IS NULL FOR UPDATE"
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

    type Conn = PgConn;
    type Db = PgDb;
}

/// The open PostgreSQL database: one pool of tokio-postgres connections for reads and
/// writes, each write a transaction of its own (the server groups concurrent commits' WAL
/// flushes itself); and a small sqlx pool for what sqlx does for us (migrations, LISTEN).
pub struct PgDb {
    /// Where statements run (ADR 0038). A connection goes back to it as it is dropped, with
    /// no round trip: a connection idle for long is checked when it is handed out again.
    pool: deadpool_postgres::Pool,
    /// Migrations, the listener's connection, and raw access for tests and tools.
    admin: PgPool,
    /// At most as many reads ask the pool at once as it has connections; the rest wait here,
    /// in a fair queue, so that time spent waiting is measured (`read_wait`).
    read_gate: tokio::sync::Semaphore,
    read_wait: Arc<Lateness>,
    /// Writes from `begin` to durable (see `lateness.rs`).
    write_wait: Arc<Lateness>,
    /// Where a commit's hints are delivered in this process.
    wake: Arc<Wakeups>,
    /// Commit latency (the same handles as the store's).
    metrics: crate::StoreMetrics,
}

/// A pooled connection, and what its open write has not sent yet.
pub struct PgConn {
    client: deadpool_postgres::Object,
    /// The write's `BEGIN`, sent with its first statement (ADR 0038).
    begin: bool,
    /// Sent with the next statement or the commit ([`Conn::defer`]), in order.
    deferred: Vec<Query<'static>>,
    /// In an open write: only a write defers; a read runs each statement when asked.
    writing: bool,
}

impl PgConn {
    fn new(client: deadpool_postgres::Object, writing: bool) -> Self {
        Self { client, begin: writing, deferred: Vec::new(), writing }
    }

    /// What must reach the server before the next statement, taken to be sent with it.
    fn ahead(&mut self) -> Ahead {
        Ahead { begin: std::mem::take(&mut self.begin), deferred: std::mem::take(&mut self.deferred) }
    }

    /// Whether nothing of the write has been sent: the server knows of no transaction.
    fn unsent(&self) -> bool {
        self.begin
    }
}

/// A write's `BEGIN` (if not sent yet) and its deferred statements.
struct Ahead {
    begin: bool,
    deferred: Vec<Query<'static>>,
}

/// A pooled connection to read on, while the read gate lets this read ask the pool.
pub struct PgReader<'a> {
    conn: PgConn,
    _place: tokio::sync::SemaphorePermit<'a>,
}

impl Deref for PgReader<'_> {
    type Target = PgConn;
    fn deref(&self) -> &PgConn {
        &self.conn
    }
}

impl DerefMut for PgReader<'_> {
    fn deref_mut(&mut self) -> &mut PgConn {
        &mut self.conn
    }
}

/// A write: a transaction of its own on a pooled connection. Its `BEGIN` goes out with its
/// first statement, in the same round trip; so does the clock, when the write asks for it
/// first. This type is what ends the transaction, committed or rolled back, before the pool
/// sees its connection again.
pub struct PgTx {
    /// In an open transaction until committed; `None` once committed or dropped.
    conn: Option<PgConn>,
    /// The database clock, once read ([`Db::clock`]).
    clock: Option<i64>,
    asked: Option<super::lateness::Waiting>,
}

impl Deref for PgTx {
    type Target = PgConn;
    fn deref(&self) -> &PgConn {
        self.conn.as_ref().expect("an open write holds its connection")
    }
}

impl DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut PgConn {
        self.conn.as_mut().expect("an open write holds its connection")
    }
}

impl Drop for PgTx {
    /// A write that ends without `commit` (refused, failed, cancelled) rolls back at once, in
    /// a task of its own, before its connection goes back to the pool: until then the
    /// transaction's row locks stay held, and the pool would hand out a connection inside it.
    /// A connection the rollback cannot reach (or with no runtime to run it) is closed.
    fn drop(&mut self) {
        let Some(conn) = self.conn.take().filter(|c| !c.unsent()) else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if conn.client.batch_execute("ROLLBACK").await.is_err() {
                        discard(conn.client);
                    }
                });
            }
            Err(_) => discard(conn.client),
        }
    }
}

/// Closes a connection instead of returning it to the pool: its state is unknown.
fn discard(client: deadpool_postgres::Object) {
    drop(deadpool_postgres::Object::take(client));
}

impl Db for PgDb {
    type Conn = PgConn;
    type Reader<'a> = PgReader<'a>;
    type Tx = PgTx;

    async fn reader(&self) -> Result<PgReader<'_>> {
        let waiting = self.read_wait.wait();
        let place =
            self.read_gate.acquire().await.map_err(|_| StoreError::Unavailable("the store is closed".into()))?;
        waiting.done();
        let client = self.pool.get().await.map_err(pool_error)?;
        Ok(PgReader { conn: PgConn::new(client, false), _place: place })
    }

    async fn begin(&self) -> Result<PgTx> {
        let asked = Some(self.write_wait.wait());
        let client = self.pool.get().await.map_err(pool_error)?;
        Ok(PgTx { conn: Some(PgConn::new(client, true)), clock: None, asked })
    }

    async fn clock(tx: &mut PgTx) -> Result<Option<i64>> {
        if tx.clock.is_none() {
            let (now,): (i64,) = super::query_as(Postgres::NOW).fetch_one(&mut **tx).await?;
            tx.clock = Some(now);
        }
        Ok(tx.clock)
    }

    async fn commit(&self, mut tx: PgTx, hints: Hints) -> Result<()> {
        // A write that sent nothing and deferred nothing has nothing to commit.
        if let Some(mut conn) = tx.conn.take().filter(|c| !(c.unsent() && c.deferred.is_empty())) {
            let started = std::time::Instant::now();
            let ahead = conn.ahead();
            let committed = after(&conn.client, ahead, conn.client.batch_execute("COMMIT")).await;
            self.metrics.committed(1, started.elapsed());
            if committed.is_err() {
                // Whether the server committed is unknown: the connection is not reused.
                discard(conn.client);
            }
            committed?;
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

/// Maps a tokio-postgres error to what the store decides on.
pub(crate) fn pg_error(e: tokio_postgres::Error) -> DbError {
    use tokio_postgres::error::SqlState;
    let kind = match e.code() {
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => DbErrorKind::UniqueViolation,
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => DbErrorKind::LockTimeout,
        Some(c) if server_unavailable(c.code()) => DbErrorKind::Unavailable,
        Some(_) => DbErrorKind::Other,
        // No SQLSTATE: the connection is closed or its socket failed, or a value did not
        // convert (which the row decoder reports itself).
        None if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) => {
            DbErrorKind::Unavailable
        }
        None => DbErrorKind::Other,
    };
    let message = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
    DbError::new(kind, message)
}

/// Maps an error of the sqlx pool (connecting, the listener, migrations).
pub(crate) fn sqlx_error(e: sqlx::Error) -> DbError {
    let kind = match &e {
        sqlx::Error::Database(d) if d.code().as_deref().is_some_and(server_unavailable) => DbErrorKind::Unavailable,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
            DbErrorKind::Unavailable
        }
        _ => DbErrorKind::Other,
    };
    DbError::new(kind, e.to_string())
}

/// Maps a pool error: no connection within the acquire timeout, or none could be opened.
fn pool_error(e: deadpool_postgres::PoolError) -> DbError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Timeout(_) | PoolError::Closed | PoolError::PostCreateHook(_) => {
            DbError::new(DbErrorKind::Unavailable, format!("no database connection: {e}"))
        }
        PoolError::NoRuntimeSpecified => DbError::new(DbErrorKind::Other, e.to_string()),
    }
}

/// Whether a SQLSTATE says the server, not the statement, failed: it is shutting down or
/// restarting (`57P01`-`57P03`, sent to every session by `pg_ctl stop -m fast|immediate` and
/// while it recovers), the connection broke (class `08`), or it ran out of resources
/// (class `53`: disk full, too many connections). Such a statement may succeed once the
/// server is back, so the client is told to retry (503), not that the gateway failed (500).
fn server_unavailable(sqlstate: &str) -> bool {
    sqlstate.starts_with("08") || sqlstate.starts_with("53") || matches!(sqlstate, "57P01" | "57P02" | "57P03")
}

/// A statement prepared on this connection, once per connection (tokio-postgres's statements
/// are named and cached by the pool), its parameters typed by the arguments' types, as sqlx
/// typed them before (a NULL keeps its type).
async fn prepare(
    client: &deadpool_postgres::ClientWrapper,
    q: &Query<'_>,
) -> Result<tokio_postgres::Statement, DbError> {
    use tokio_postgres::types::Type;
    let types: Vec<Type> = q
        .args
        .iter()
        .map(|a| match a {
            Arg::Int(_) => Type::INT8,
            Arg::Bool(_) => Type::BOOL,
            Arg::Text(_) => Type::TEXT,
            Arg::Bytes(_) => Type::BYTEA,
        })
        .collect();
    client.prepare_typed_cached(q.sql, &types).await.map_err(pg_error)
}

/// The arguments of a statement, in order.
fn params<'a>(q: &'a Query<'_>) -> Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)> {
    q.args
        .iter()
        .map(|a| match a {
            Arg::Int(v) => v as &(dyn tokio_postgres::types::ToSql + Sync),
            Arg::Bool(v) => v as _,
            Arg::Text(v) => v as _,
            Arg::Bytes(v) => v as _,
        })
        .collect()
}

/// Sends what is `ahead` (the `BEGIN`, the deferred statements) and then `last`, pipelined
/// (no wait in between), and answers with `last`'s answer; a failure answers instead, the
/// first in the order sent (once one statement of a transaction fails, the server refuses the
/// ones after it).
async fn after<T>(
    client: &deadpool_postgres::ClientWrapper,
    ahead: Ahead,
    last: impl Future<Output = std::result::Result<T, tokio_postgres::Error>> + Send,
) -> std::result::Result<T, DbError> {
    if !ahead.begin && ahead.deferred.is_empty() {
        return last.await.map_err(pg_error);
    }
    let mut statements = Vec::with_capacity(ahead.deferred.len());
    for q in &ahead.deferred {
        statements.push(prepare(client, q).await?);
    }
    let params: Vec<_> = ahead.deferred.iter().map(params).collect();
    let begin = async {
        match ahead.begin {
            true => client.batch_execute("BEGIN").await,
            false => Ok(()),
        }
    };
    // The joins poll in order, and a tokio-postgres request is queued on its connection when
    // first polled: the statements reach the server in the order they were deferred.
    let earlier = futures::future::join_all(statements.iter().zip(&params).map(|(s, p)| client.execute(s, p)));
    let (begun, earlier, last) = futures::join!(begin, earlier, last);
    begun.map_err(pg_error)?;
    for answer in earlier {
        answer.map_err(pg_error)?;
    }
    last.map_err(pg_error)
}

struct PgRowRef<'a>(&'a tokio_postgres::Row);

impl Row for PgRowRef<'_> {
    fn get<T: Value>(&self, column: &str) -> std::result::Result<T, DbError> {
        self.0.try_get(column).map_err(|e| DbError::decode(format!("column {column}: {e}")))
    }

    fn get_at<T: Value>(&self, index: usize) -> std::result::Result<T, DbError> {
        self.0.try_get(index).map_err(|e| DbError::decode(format!("column {index}: {e}")))
    }
}

impl Conn for PgConn {
    async fn execute<'q>(&mut self, query: Query<'q>) -> std::result::Result<u64, DbError> {
        query.check_storable()?;
        let statement = prepare(&self.client, &query).await?;
        let params = params(&query);
        let ahead = self.ahead();
        after(&self.client, ahead, self.client.execute(&statement, &params)).await
    }

    async fn fetch<'q, R: FromRow>(&mut self, query: Query<'q>, limit: usize) -> std::result::Result<Vec<R>, DbError> {
        query.check_storable()?;
        let statement = prepare(&self.client, &query).await?;
        let params = params(&query);
        let ahead = self.ahead();
        let rows = after(&self.client, ahead, self.client.query(&statement, &params)).await?;
        rows.iter().take(limit).map(|row| R::from_row(&PgRowRef(row))).collect()
    }

    async fn defer<'q>(&mut self, query: Query<'q>) -> std::result::Result<(), DbError> {
        if !self.writing {
            return self.execute(query).await.map(drop);
        }
        query.check_storable()?;
        self.deferred.push(query.into_owned());
        Ok(())
    }
}

impl PgStore {
    /// Connects the pools and, when wake-ups are on, starts the one listener of this store.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let bad_url = |e: &dyn std::fmt::Display| StoreError::Unavailable(format!("bad PostgreSQL URL: {e}"));
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| bad_url(&e))?;
        config.application_name("gateway");
        // A process paused inside a transaction (SIGSTOP, a debugger, a VM freeze) would
        // hold its session row lock forever; the server ends such transactions instead.
        let idle = "-c idle_in_transaction_session_timeout=5s";
        let server_options = config.get_options().map_or_else(|| idle.to_owned(), |o| format!("{o} {idle}"));
        config.options(server_options);
        let manager = deadpool_postgres::Manager::from_config(
            config,
            tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(options.max_connections.max(2) as usize)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.acquire_timeout))
            // A connection back within the last second was sound then (a broken one is
            // known closed and not reused); one idle longer, across a database restart say,
            // is checked with a round trip before it is handed out (ADR 0037).
            .pre_recycle(deadpool_postgres::Hook::async_fn(|client, metrics| {
                Box::pin(async move {
                    if metrics.last_used() > IDLE_BEFORE_PING {
                        client.batch_execute("").await.map_err(deadpool_postgres::HookError::Backend)?;
                    }
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL pool: {e}")))?;
        let admin_options = PgConnectOptions::from_str(url).map_err(|e| bad_url(&e))?.application_name("gateway");
        let admin = PgPoolOptions::new()
            .max_connections(ADMIN_CONNECTIONS)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(admin_options)
            .await?;
        let wake = Arc::new(Wakeups::new(options.wakeups));
        let background = CancellationToken::new();
        let (peers, outbox) = Peers::new(wake.origin().to_owned(), &options.metrics);
        let peers = Arc::new(peers);
        let mut listener = PgListener::connect_with(&admin).await?;
        if options.wakeups {
            listener.listen(WAKE_CHANNEL).await?;
        }
        listener.listen(PEERS_CHANNEL).await?;
        tokio::spawn(listen(listener, Arc::clone(&wake), Arc::clone(&peers), background.clone()));
        tokio::spawn(send_to_peers(outbox, pool.clone(), background.clone()));
        let read_gate = tokio::sync::Semaphore::new(pool.status().max_size.max(1));
        Ok(SqlStore {
            db: PgDb {
                pool,
                admin,
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

    /// A sqlx pool on the same database, for tests and tools that need raw access.
    pub fn pool(&self) -> &PgPool {
        &self.db.admin
    }
}

/// The sqlx pool's connections: the listener's, one for migrations or a tool, one spare.
const ADMIN_CONNECTIONS: u32 = 3;

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
async fn send_to_peers(mut outbox: Outbox, pool: deadpool_postgres::Pool, stop: CancellationToken) {
    use tokio_postgres::types::Type;
    const NOTIFY: &str =
        "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(c, p, n) ORDER BY n";
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
        let sent = async {
            let client = pool.get().await.map_err(pool_error)?;
            let statement =
                client.prepare_typed_cached(NOTIFY, &[Type::TEXT_ARRAY, Type::TEXT_ARRAY]).await.map_err(pg_error)?;
            client.execute(&statement, &[&channels, &payloads]).await.map_err(pg_error)
        }
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
        MIGRATOR.run(&self.db.admin).await?;
        Ok(())
    }

    async fn migration_status(&self) -> Result<crate::MigrationStatus> {
        super::migrations::status(self, &MIGRATOR).await
    }

    async fn close(&self) {
        self.background.cancel();
        self.db.pool.close();
        self.db.admin.close().await;
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
    use crate::sql::conn::DbErrorKind;
    use crate::sql::{Db, query, query_as};
    use crate::{PgStore, StoreOptions};

    /// A store on a fresh schema with a scratch table `t (id BIGINT PRIMARY KEY, v TEXT)`.
    async fn scratch() -> PgStore {
        let url = crate::conformance::harness::PgHarness::new_schema_url().await;
        let store = PgStore::connect(&url, &StoreOptions::default()).await.expect("connect");
        let mut tx = store.db.begin().await.unwrap();
        query("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)").execute(&mut *tx).await.unwrap();
        store.db.commit(tx, Default::default()).await.unwrap();
        store
    }

    async fn rows(store: &PgStore) -> Vec<(i64, String)> {
        query_as("SELECT id, v FROM t ORDER BY id").fetch_all(&mut *store.db.reader().await.unwrap()).await.unwrap()
    }

    #[tokio::test]
    async fn deferred_statements_run_in_order_before_the_next_one_and_commit_with_the_write() {
        let store = scratch().await;
        let mut tx = store.db.begin().await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(1).bind("a").defer(&mut *tx).await.unwrap();
        query("UPDATE t SET v = $2 WHERE id = $1").bind(1).bind("b").defer(&mut *tx).await.unwrap();
        let (v,): (String,) = query_as("SELECT v FROM t WHERE id = $1").bind(1).fetch_one(&mut *tx).await.unwrap();
        assert_eq!(v, "b", "the deferred insert and update ran, in order, before the read");
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(2).bind("c").defer(&mut *tx).await.unwrap();
        store.db.commit(tx, Default::default()).await.unwrap();
        assert_eq!(rows(&store).await, [(1, "b".to_owned()), (2, "c".to_owned())]);
    }

    #[tokio::test]
    async fn a_deferred_failure_answers_the_next_statement_and_leaves_nothing() {
        let store = scratch().await;
        let mut tx = store.db.begin().await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(1).bind("a").defer(&mut *tx).await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(1).bind("again").defer(&mut *tx).await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(2).bind("b").defer(&mut *tx).await.unwrap();
        let e = query_as::<(i64,)>("SELECT COUNT(*) FROM t").fetch_one(&mut *tx).await.unwrap_err();
        assert_eq!(e.kind, DbErrorKind::UniqueViolation, "the first failure in order answers: {e}");
        drop(tx);
        assert!(rows(&store).await.is_empty(), "the write rolled back whole");

        // At the commit too: the failure is the commit's answer and nothing is committed.
        let mut tx = store.db.begin().await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(3).bind("c").defer(&mut *tx).await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(3).bind("c").defer(&mut *tx).await.unwrap();
        let e = store.db.commit(tx, Default::default()).await.unwrap_err();
        assert!(matches!(e, crate::StoreError::Database(_)), "{e:?}");
        assert!(rows(&store).await.is_empty());
    }

    #[tokio::test]
    async fn a_write_that_sends_nothing_leaves_no_transaction_open() {
        let store = scratch().await;
        for _ in 0..8 {
            let tx = store.db.begin().await.unwrap();
            store.db.commit(tx, Default::default()).await.unwrap();
            drop(store.db.begin().await.unwrap());
        }
        // Every connection of the pool at once. On one left inside a transaction, `now()` (the
        // transaction's start) stands still between two statements.
        const NOW_US: &str = "SELECT CAST(EXTRACT(EPOCH FROM now()) * 1000000 AS BIGINT)";
        let size = store.db.pool.status().max_size;
        let mut readers = Vec::with_capacity(size);
        for _ in 0..size {
            readers.push(store.db.reader().await.unwrap());
        }
        for reader in &mut readers {
            let (before,): (i64,) = query_as(NOW_US).fetch_one(&mut **reader).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let (after,): (i64,) = query_as(NOW_US).fetch_one(&mut **reader).await.unwrap();
            assert!(after > before, "a pooled connection was left inside a transaction");
        }
        drop(readers);
        let mut tx = store.db.begin().await.unwrap();
        query("INSERT INTO t (id, v) VALUES ($1, $2)").bind(1).bind("a").execute(&mut *tx).await.unwrap();
        store.db.commit(tx, Default::default()).await.unwrap();
        assert_eq!(rows(&store).await, [(1, "a".to_owned())]);
    }

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
