//! SQLite: the embedded default. One file in WAL mode, `synchronous=FULL` so a commit is on
//! disk before the client hears "accepted", a single writer connection whose concurrent
//! writes share transactions and fsyncs (`writer.rs`), and read-only connections that WAL
//! lets read beside it (`conn.rs`); a thread copies the log back into the database file beside
//! the writer (`checkpoint.rs`). Statements run on the calling thread, without a thread
//! hop each (ADR 0014).
//!
//! The database holds every transcript, so its files are private to the gateway's user
//! whatever the umask: the file is created 0600 before SQLite opens it (SQLite gives the
//! `-wal` and `-shm` files the database file's mode), a missing parent directory is created
//! 0700, and files of an earlier version left readable by others are tightened.

mod checkpoint;
mod conn;
mod writer;

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnectOptions;

use super::events::list_events_sql;
use super::outbox::claim_deliveries_sql;
use super::runs::claim_candidate_sql;
use super::sessions::list_sessions_sql;
use super::work::poll_work_sql;
use super::{Db, Engine, Hints, SqlStore};
use crate::error::{Result, StoreError};
use crate::wake::Wakeups;
use crate::{Store, StoreOptions};
use conn::{Reader, Readers};
use writer::{WriteTx, Writer};

/// The SQLite engine.
pub struct Sqlite;

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
    const IN_PROCESS_CLOCK: bool = true;
    // BEGIN IMMEDIATE already holds the database's write lock for the whole transaction.
    const LOCK_SESSION: &'static str =
        concat!("SELECT ", super::session_cols!(), " FROM sessions WHERE id = $1 AND deleted_at IS NULL");
    const LOCK_SESSION_AT_NOW: &'static str = concat!(
        "SELECT ",
        super::session_cols!(),
        ", ",
        now_ms!(),
        " AS now_ms, feed_subscribed FROM sessions WHERE id = $1 AND deleted_at IS NULL"
    );
    // BEGIN IMMEDIATE: no one else holds a session while a claim runs.
    const CLAIM_SETUP: Option<&'static str> = None;
    const QUEUE_STATS: &'static str = super::queue_stats_sql!(now_ms!());
    const MIGRATIONS_TABLE_EXISTS: &'static str =
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'";
    const RENEW_LEASES: &'static str = "UPDATE runs SET lease_expires_at = $2 WHERE state = 'running' AND EXISTS \
         (SELECT 1 FROM json_each($1) h WHERE json_extract(h.value, '$[0]') = runs.id \
          AND json_extract(h.value, '$[1]') = runs.lease_owner AND json_extract(h.value, '$[2]') = runs.lease_epoch) \
         RETURNING id, lease_owner, lease_epoch, CASE WHEN cancel_requested THEN 'y' ELSE 'n' END";
    const CLAIM_CANDIDATE: &'static str =
        claim_candidate_sql!("(SELECT value FROM json_each($1))", "(SELECT value FROM json_each($2))", "");
    const LIST_SESSIONS: [&'static str; 2] = list_sessions_sql!("(SELECT value FROM json_each($4))");
    const SESSION_TIPS: &'static str =
        "SELECT id, last_seq FROM sessions WHERE id IN (SELECT value FROM json_each($1))";
    const DELETE_FEED_ROWS: &'static str =
        "DELETE FROM event_feed WHERE channel = $1 AND id IN (SELECT value FROM json_each($2))";
    const LIST_EVENTS_ASC: &'static str = list_events_sql!("(SELECT value FROM json_each($2))", ">", "ASC");
    const LIST_EVENTS_DESC: &'static str = list_events_sql!("(SELECT value FROM json_each($2))", "<", "DESC");
    const CLAIM_DELIVERIES: &'static str = claim_deliveries_sql!("");
    const POLL_WORK: &'static str = poll_work_sql!("");
    // BEGIN IMMEDIATE: a mount and a delete never run at once.
    const SHARE_FILE: &'static str = "SELECT id FROM files WHERE id = $1";
    const LOCK_FILE: &'static str = "SELECT id FROM files WHERE id = $1";
    /// No row locks: `BEGIN IMMEDIATE` already serializes every writer.
    const RUN_PRESENCE: &'static str = "SELECT CASE WHEN state = 'running' THEN 'running' WHEN started THEN 'retrying' ELSE 'queued' END \
         FROM runs WHERE session_id = $1 AND state IN ('running', 'queued')";

    type Conn = rusqlite::Connection;
    type Db = SqliteDb;
}

/// The open SQLite database: the writer and the readers.
pub struct SqliteDb {
    path: PathBuf,
    writer: Writer,
    readers: Readers,
}

impl Db for SqliteDb {
    type Conn = rusqlite::Connection;
    type Reader<'a> = Reader<'a>;
    type Tx = WriteTx;

    async fn reader(&self) -> Result<Reader<'_>> {
        self.readers.take()
    }

    async fn begin(&self) -> Result<WriteTx> {
        self.writer.begin().await
    }

    async fn commit(&self, tx: WriteTx, hints: Hints) -> Result<()> {
        self.writer.commit(tx, hints).await
    }

    async fn sync(&self) -> Result<()> {
        self.writer.sync().await
    }

    fn lateness(&self) -> std::time::Duration {
        // Reads never wait here: they run on the calling thread.
        self.writer.lateness()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database file a `sqlite:` URL names.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let parsed =
            SqliteConnectOptions::from_str(url).map_err(|e| StoreError::Unavailable(format!("bad SQLite URL: {e}")))?;
        if !on_disk(url) {
            return Err(StoreError::Unavailable(format!(
                "{url:?}: the SQLite store needs a database file it can write (not in memory, not read-only)"
            )));
        }
        let path = parsed.get_filename().to_path_buf();
        private_files(&path)?;
        let wake = Arc::new(Wakeups::new(options.wakeups));
        // The writer first: it creates the file and makes it WAL, which the readers need.
        let write = conn::open(&path, conn::Role::Writer)?;
        let readers = Readers::open(&path, options.max_connections as usize)?;
        let writer = Writer::start(write, &path, Arc::clone(&wake), options.metrics.clone())?;
        Ok(SqlStore {
            db: SqliteDb { path, writer, readers },
            wake,
            peers: None,
            background: tokio_util::sync::CancellationToken::new(),
            feed: Default::default(),
            metrics: options.metrics.clone(),
        })
    }
}

/// Whether a `sqlite:` URL names a file (not `:memory:` nor `mode=memory`, nor read-only).
fn on_disk(url: &str) -> bool {
    let (database, query) = url.split_once('?').unwrap_or((url, ""));
    let memory_or_ro =
        query.split('&').any(|p| matches!(p, "mode=memory" | "mode=ro" | "immutable=true" | "immutable=1"));
    !database.ends_with(":memory:") && !memory_or_ro
}

/// Creates the database file 0600 (and a missing parent 0700) unless it exists; tightens an
/// existing database file and its `-wal` / `-shm` to 0600.
fn private_files(db: &Path) -> Result<()> {
    let unavailable =
        |what: &Path, e: std::io::Error| StoreError::Unavailable(format!("cannot create {}: {e}", what.display()));
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| unavailable(dir, e))?;
    }
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(db) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unavailable(db, e)),
    }
    let mut names = vec![db.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        names.push(PathBuf::from(name));
    }
    for path in names {
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 == 0 {
            continue;
        }
        match std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
            Ok(()) => {
                tracing::warn!(path = %path.display(), was = format!("{mode:o}"), "made a database file private (0600)")
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "a database file is readable by other users"),
        }
    }
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    /// Ready when the database reads and writes: a full disk still reads.
    async fn ping(&self) -> Result<()> {
        let mut reader = self.reader().await?;
        super::query("SELECT 1").execute(&mut *reader).await?;
        drop(reader);
        self.db.writer.health().await
    }

    async fn sync(&self) -> Result<()> {
        self.db.sync().await
    }

    fn wakeups(&self) -> Arc<Wakeups> {
        Arc::clone(&self.wake)
    }

    /// Runs sqlx's migrator on a connection of its own, so databases of earlier versions
    /// (migrated by sqlx, which kept the store's connections then) keep their history.
    async fn migrate(&self) -> Result<()> {
        let options = SqliteConnectOptions::new()
            .filename(&self.db.path)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(10));
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
        let migrated = MIGRATOR.run(&pool).await;
        pool.close().await;
        migrated?;
        Ok(())
    }

    async fn migration_status(&self) -> Result<crate::MigrationStatus> {
        super::migrations::status(self, &MIGRATOR).await
    }

    async fn close(&self) {
        self.background.cancel();
        self.db.writer.stop().await;
        self.db.readers.close();
    }

    fn writes_committed(&self) -> u64 {
        self.metrics.writes.get()
    }

    fn engine(&self) -> &'static str {
        Sqlite::NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
    }

    #[tokio::test]
    async fn database_files_are_private_whatever_the_umask() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let db = tmp.path().join("state/gateway.db");
        let store =
            SqliteStore::connect(&format!("sqlite://{}", db.display()), &StoreOptions::default()).await.expect("open");
        store.migrate().await.expect("migrate");
        assert_eq!(mode(db.parent().expect("dir")), 0o700);
        for suffix in ["", "-wal", "-shm"] {
            let f = PathBuf::from(format!("{}{suffix}", db.display()));
            assert!(f.exists(), "{} exists (WAL mode)", f.display());
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        store.close().await;

        // A database of an earlier version, left readable by everyone, is tightened.
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let store = SqliteStore::connect(&format!("sqlite://{}", db.display()), &StoreOptions::default())
            .await
            .expect("reopen");
        assert_eq!(mode(&db), 0o600);
        store.close().await;
    }

    #[test]
    fn only_file_urls_get_a_file() {
        assert!(on_disk("sqlite://data/gateway.db"));
        assert!(on_disk("sqlite:gateway.db?mode=rwc"));
        assert!(!on_disk("sqlite::memory:"));
        assert!(!on_disk("sqlite://x.db?mode=memory"));
        assert!(!on_disk("sqlite://x.db?mode=ro"));
    }
}
