//! PostgreSQL: the shared store for several gateway processes. Claims use
//! `FOR UPDATE SKIP LOCKED`; hints travel between processes with NOTIFY on one channel,
//! received by one listener connection per store.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres};
use tokio_util::sync::CancellationToken;

use super::documents::claim_documents_sql;
use super::events::list_events_sql;
use super::outbox::claim_deliveries_sql;
use super::runs::claim_candidate_sql;
use super::sessions::list_sessions_sql;
use super::webhooks::take_feed_sql;
use super::work::poll_work_sql;
use super::write::Writer;
use super::{Engine, SqlStore, WAKE_CHANNEL};
use crate::error::{Result, StoreError};
use crate::wake::{Hint, Wakeups};
use crate::{Store, StoreOptions};

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
    const BEGIN_WRITE: &'static str = "BEGIN";
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
    const RENEW_LEASES: &'static str = "UPDATE runs SET lease_expires_at = $2 WHERE state = 'running' \
         AND (id, lease_owner, lease_epoch) IN \
             (SELECT h->>0, h->>1, (h->>2)::BIGINT FROM json_array_elements($1::json) AS h) \
         RETURNING id, CASE WHEN cancel_requested THEN 'y' ELSE 'n' END";
    const CLAIM_CANDIDATE: &'static str = claim_candidate_sql!(
        "(SELECT json_array_elements_text($1::json))",
        "(SELECT json_array_elements_text($2::json))",
        " FOR UPDATE OF r SKIP LOCKED"
    );
    const LIST_SESSIONS_ASC: &'static str =
        list_sessions_sql!("(SELECT json_array_elements_text($4::json))", ">", "ASC");
    const LIST_SESSIONS_DESC: &'static str =
        list_sessions_sql!("(SELECT json_array_elements_text($4::json))", "<", "DESC");
    const LIST_EVENTS_ASC: &'static str = list_events_sql!("(SELECT json_array_elements_text($2::json))", ">", "ASC");
    const LIST_EVENTS_DESC: &'static str = list_events_sql!("(SELECT json_array_elements_text($2::json))", "<", "DESC");
    const CLAIM_DELIVERIES: &'static str = claim_deliveries_sql!(" FOR UPDATE OF o SKIP LOCKED");
    const TAKE_FEED: &'static str = take_feed_sql!(" FOR UPDATE OF f SKIP LOCKED");
    const POLL_WORK: &'static str = poll_work_sql!(" FOR UPDATE OF w SKIP LOCKED");
    const CLAIM_DOCUMENTS: &'static str = claim_documents_sql!(" FOR UPDATE SKIP LOCKED");
    /// Locked: a claim holds its run row from choosing it to committing its input boundary
    /// (`FOR UPDATE OF r`), so admission waits for it and then sees the run running.
    const RUN_PRESENCE: &'static str = "SELECT CASE WHEN state = 'running' THEN 'running' WHEN started THEN 'retrying' ELSE 'queued' END \
         FROM runs WHERE session_id = $1 AND state IN ('running', 'queued') FOR UPDATE";
    const NOTIFY: Option<&'static str> = Some("SELECT pg_notify($1, $2)");
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
            .connect_with(connect)
            .await?;
        let wake = Arc::new(Wakeups::new(options.wakeups));
        let background = CancellationToken::new();
        if options.wakeups {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(WAKE_CHANNEL).await?;
            tokio::spawn(listen(listener, Arc::clone(&wake), background.clone()));
        }
        let writer = Writer::plain(pool.clone(), <Postgres as Engine>::BEGIN_WRITE);
        Ok(SqlStore {
            read_gate: SqlStore::read_gate(&pool),
            read_wait: Default::default(),
            feed: Default::default(),
            read: pool.clone(),
            write: pool,
            writer,
            wake,
            background,
        })
    }

    /// The pool, for tests and tools that need raw access.
    pub fn pool(&self) -> &PgPool {
        &self.write
    }
}

/// Forwards NOTIFY payloads to the local hub. After a lost connection (which the listener
/// re-establishes by itself) hints may have been missed, so every local waiter is woken to
/// re-check; polling would find the work anyway, this only saves latency.
async fn listen(mut listener: PgListener, wake: Arc<Wakeups>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            n = listener.try_recv() => match n {
                Ok(Some(n)) => {
                    for line in n.payload().lines() {
                        if let Some(h) = Hint::decode(line) {
                            wake.deliver(&h);
                        }
                    }
                }
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

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&*self.reader().await?).await?;
        Ok(())
    }

    async fn sync(&self) -> Result<()> {
        self.writer.sync().await
    }

    fn wakeups(&self) -> Arc<Wakeups> {
        Arc::clone(&self.wake)
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.write).await?;
        Ok(())
    }

    async fn close(&self) {
        self.background.cancel();
        self.write.close().await;
    }

    fn engine(&self) -> &'static str {
        <Postgres as Engine>::NAME
    }
}
