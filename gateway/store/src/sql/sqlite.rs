//! SQLite: the embedded default. One file in WAL mode, `synchronous=FULL` so a commit is on
//! disk before the client hears "accepted", a single writer connection (writers are
//! serialized anyway; one connection avoids busy retries inside this process), and a pool of
//! readers that WAL lets run beside it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::events::list_events_sql;
use super::outbox::claim_deliveries_sql;
use super::runs::claim_candidate_sql;
use super::sessions::list_sessions_sql;
use super::{Engine, SqlStore};
use crate::error::{Result, StoreError};
use crate::wake::Wakeups;
use crate::{Store, StoreOptions};

pub type SqliteStore = SqlStore<Sqlite>;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// The database clock as integer milliseconds.
macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

impl Engine for Sqlite {
    const NAME: &'static str = "sqlite";
    const NOW: &'static str = concat!("SELECT ", now_ms!());
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    // BEGIN IMMEDIATE already holds the database's write lock for the whole transaction.
    const LOCK_SESSION: &'static str =
        concat!("SELECT ", super::session_cols!(), " FROM sessions WHERE id = $1 AND deleted_at IS NULL");
    const LOCK_SESSION_AT_NOW: &'static str = concat!(
        "SELECT ",
        super::session_cols!(),
        ", ",
        now_ms!(),
        " AS now_ms FROM sessions WHERE id = $1 AND deleted_at IS NULL"
    );
    const CLAIM_CANDIDATE: &'static str =
        claim_candidate_sql!("(SELECT value FROM json_each($1))", "(SELECT value FROM json_each($2))", "");
    const LIST_SESSIONS_ASC: &'static str = list_sessions_sql!("(SELECT value FROM json_each($4))", ">", "ASC");
    const LIST_SESSIONS_DESC: &'static str = list_sessions_sql!("(SELECT value FROM json_each($4))", "<", "DESC");
    const LIST_EVENTS_ASC: &'static str = list_events_sql!("(SELECT value FROM json_each($2))", ">", "ASC");
    const LIST_EVENTS_DESC: &'static str = list_events_sql!("(SELECT value FROM json_each($2))", "<", "DESC");
    const CLAIM_DELIVERIES: &'static str = claim_deliveries_sql!("");
    /// No row locks: `BEGIN IMMEDIATE` already serializes every writer.
    const RUN_PRESENCE: &'static str = "SELECT CASE WHEN state = 'running' THEN 'running' WHEN started THEN 'retrying' ELSE 'queued' END \
         FROM runs WHERE session_id = $1 AND state IN ('running', 'queued')";
    const NOTIFY: Option<&'static str> = None;
}

impl SqliteStore {
    /// Opens (creating if needed) the database file a `sqlite:` URL names.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let base = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("bad SQLite URL: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        if let Some(dir) = base.get_filename().parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
        }
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(base.clone())
            .await?;
        let read = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .connect_with(base.read_only(true))
            .await?;
        Ok(SqlStore {
            read,
            write,
            wake: Arc::new(Wakeups::new(options.wakeups)),
            background: tokio_util::sync::CancellationToken::new(),
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
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
        self.read.close().await;
    }

    fn engine(&self) -> &'static str {
        <Sqlite as Engine>::NAME
    }
}
