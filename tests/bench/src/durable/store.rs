//! The baseline's storage: one SQLite file in WAL mode with `synchronous=FULL` (every commit
//! fsyncs the WAL, as the gateway's own SQLite store does), one writer connection owned by a
//! task, and a small pool for reads.
//!
//! Every [`Write`] is exactly one transaction and one fsynced commit; nothing is grouped, so
//! a round trip costs the commits the benchmark promises (three for `bench-durable`, two for
//! `bench-a2a-durable`) and no more. The caller hears back only after the commit returned, so
//! "accepted" always means "on disk". Both baselines use this store, each on its own file;
//! the schema holds the tables of both.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

/// Writes queued for the writer beyond this wait (backpressure, not unbounded memory).
const QUEUE: usize = 1024;

const SCHEMA: [&str; 6] = [
    "CREATE TABLE IF NOT EXISTS catalog (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, environment_id TEXT NOT NULL, \
     created_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, \
     body TEXT NOT NULL, PRIMARY KEY (session_id, seq))",
    // bench-a2a-durable: a task and its messages (the user's, then the remote's answer).
    "CREATE TABLE IF NOT EXISTS a2a_tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, state TEXT NOT NULL, \
     created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS a2a_messages (task_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL, \
     body TEXT NOT NULL, PRIMARY KEY (task_id, seq))",
    "PRAGMA wal_autocheckpoint = 1000",
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("the writer task has stopped")]
    WriterGone,
}

/// One logical write: one transaction.
#[derive(Debug)]
pub enum Write {
    /// An agent or environment (setup, not part of a round trip).
    Catalog { id: String, body: String },
    /// Commit 1 of a round trip.
    Session { id: String, agent_id: String, environment_id: String, created_at: String },
    /// Commits 2 and 3: events appended to a session in one transaction, `(id, body)` each.
    Events { session_id: String, events: Vec<(String, String)> },
    /// bench-a2a-durable, before the remote is called: the task row and the user's message.
    TaskOpened { id: String, context_id: String, state: String, created_at: String, message: String },
    /// bench-a2a-durable, before the client is answered: the remote's answer and the task's
    /// final state.
    TaskSettled { id: String, state: String, updated_at: String, answer: String },
}

type Job = (Write, oneshot::Sender<Result<(), sqlx::Error>>);

#[derive(Clone)]
pub struct Store {
    writes: mpsc::Sender<Job>,
    reads: SqlitePool,
}

fn options(path: &Path) -> Result<SqliteConnectOptions, sqlx::Error> {
    Ok(SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full))
}

impl Store {
    /// Opens (creating) the database file and starts the writer task.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let opts = options(path)?;
        let mut writer = SqliteConnection::connect_with(&opts).await?;
        for ddl in SCHEMA {
            sqlx::query(ddl).execute(&mut writer).await?;
        }
        let reads = SqlitePoolOptions::new().max_connections(4).connect_with(opts).await?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(writer, rx));
        Ok(Self { writes: tx, reads })
    }

    /// Commits `w` and returns once the commit (and its fsync) returned.
    pub async fn write(&self, w: Write) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes.send((w, tx)).await.map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?.map_err(StoreError::from)
    }

    pub async fn catalog_exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query("SELECT 1 FROM catalog WHERE id = ?").bind(id).fetch_optional(&self.reads).await?.is_some())
    }

    pub async fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query("SELECT 1 FROM sessions WHERE id = ?").bind(id).fetch_optional(&self.reads).await?.is_some())
    }

    /// A bench-a2a-durable task's state and how many messages it holds.
    pub async fn task(&self, id: &str) -> Result<Option<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT state, (SELECT COUNT(*) FROM a2a_messages WHERE task_id = t.id) FROM a2a_tasks t WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.reads)
        .await?)
    }
}

/// The one writer: each job in its own transaction, in arrival order.
async fn write_loop(mut conn: SqliteConnection, mut jobs: mpsc::Receiver<Job>) {
    while let Some((write, reply)) = jobs.recv().await {
        let _ = reply.send(apply(&mut conn, write).await);
    }
}

async fn apply(conn: &mut SqliteConnection, write: Write) -> Result<(), sqlx::Error> {
    let mut tx = conn.begin().await?;
    match write {
        Write::Catalog { id, body } => {
            sqlx::query("INSERT INTO catalog (id, body) VALUES (?, ?)").bind(id).bind(body).execute(&mut *tx).await?;
        }
        Write::Session { id, agent_id, environment_id, created_at } => {
            sqlx::query("INSERT INTO sessions (id, agent_id, environment_id, created_at) VALUES (?, ?, ?, ?)")
                .bind(id)
                .bind(agent_id)
                .bind(environment_id)
                .bind(created_at)
                .execute(&mut *tx)
                .await?;
        }
        Write::Events { session_id, events } => {
            let (last,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?")
                .bind(&session_id)
                .fetch_one(&mut *tx)
                .await?;
            for (seq, (id, body)) in (last + 1..).zip(events) {
                sqlx::query("INSERT INTO events (session_id, seq, id, body) VALUES (?, ?, ?, ?)")
                    .bind(&session_id)
                    .bind(seq)
                    .bind(id)
                    .bind(body)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        Write::TaskOpened { id, context_id, state, created_at, message } => {
            sqlx::query("INSERT INTO a2a_tasks (id, context_id, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?)")
                .bind(&id)
                .bind(context_id)
                .bind(state)
                .bind(&created_at)
                .bind(&created_at)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO a2a_messages (task_id, seq, role, body) VALUES (?, 1, 'user', ?)")
                .bind(id)
                .bind(message)
                .execute(&mut *tx)
                .await?;
        }
        Write::TaskSettled { id, state, updated_at, answer } => {
            sqlx::query("UPDATE a2a_tasks SET state = ?, updated_at = ? WHERE id = ?")
                .bind(state)
                .bind(updated_at)
                .bind(&id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO a2a_messages (task_id, seq, role, body) VALUES (?, 2, 'agent', ?)")
                .bind(id)
                .bind(answer)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_are_readable_after_they_return() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("b.db")).await.unwrap();
        store.write(Write::Catalog { id: "agent_1".into(), body: "{}".into() }).await.unwrap();
        assert!(store.catalog_exists("agent_1").await.unwrap());
        let s =
            Write::Session { id: "s".into(), agent_id: "a".into(), environment_id: "e".into(), created_at: "t".into() };
        store.write(s).await.unwrap();
        assert!(store.session_exists("s").await.unwrap());
        let evs = vec![("e1".to_owned(), "{}".to_owned()), ("e2".to_owned(), "{}".to_owned())];
        store.write(Write::Events { session_id: "s".into(), events: evs }).await.unwrap();
        let n: (i64,) = sqlx::query_as("SELECT MAX(seq) FROM events").fetch_one(&store.reads).await.unwrap();
        assert_eq!(n.0, 2);
    }

    #[tokio::test]
    async fn a2a_tasks_open_then_settle_with_their_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.db")).await.unwrap();
        let opened = Write::TaskOpened {
            id: "task_1".into(),
            context_id: "ctx".into(),
            state: "TASK_STATE_WORKING".into(),
            created_at: "t0".into(),
            message: "{}".into(),
        };
        store.write(opened).await.unwrap();
        assert_eq!(store.task("task_1").await.unwrap(), Some(("TASK_STATE_WORKING".to_owned(), 1)));
        let settled = Write::TaskSettled {
            id: "task_1".into(),
            state: "TASK_STATE_COMPLETED".into(),
            updated_at: "t1".into(),
            answer: "{}".into(),
        };
        store.write(settled).await.unwrap();
        assert_eq!(store.task("task_1").await.unwrap(), Some(("TASK_STATE_COMPLETED".to_owned(), 2)));
        assert_eq!(store.task("task_2").await.unwrap(), None);
    }
}
