//! Checkpoints off the commit path.
//!
//! In WAL mode a commit appends to the `-wal` file, and a *checkpoint* later copies those pages
//! back into the database file. By default the connection whose commit takes the log past 1000
//! pages runs that checkpoint inside its COMMIT: it writes every page back and fsyncs the
//! database before the COMMIT returns. On the store's one write connection that held every
//! write queued behind the batch for the whole copy, tens of milliseconds every few hundred
//! turns: a steady tail at moderate load and, once a copy outlasted `max_lag_ms`, turns refused
//! as if the process were overloaded (issue 33).
//!
//! So the writer turns automatic checkpoints off, and a thread of its own, on a connection of
//! its own, copies the log back every [`EVERY`] in PASSIVE mode, beside the writer: copying
//! never blocks a write. Copying alone never shortens the log, though: SQLite starts the log
//! over only at a write that begins when every page in it is copied, and under steady load a
//! write begins right after each commit, before the thread can catch up. So once the log holds
//! [`RESTART_PAGES`], the committer copies the few pages the thread has not yet copied itself,
//! right after a commit (a short copy and one fsync), and the next write starts the log over.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use rusqlite::Connection;
use tracing::{debug, warn};

use crate::error::{Result, StoreError};

/// How often the thread copies the log back.
pub(crate) const EVERY: Duration = Duration::from_millis(200);

/// The log length (pages) past which the committer finishes a copy itself so the log starts
/// over: 16 MiB at SQLite's default 4 KiB page, sixteen times what SQLite lets it reach.
pub(crate) const RESTART_PAGES: i64 = 4096;

/// What a checkpoint reports: (busy, pages in the log, pages copied back).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(bool, i64, i64)> {
    conn.prepare_cached("PRAGMA wal_checkpoint(PASSIVE)")?
        .query_row([], |r| Ok((r.get::<_, i64>(0)? != 0, r.get(1)?, r.get(2)?)))
}

/// The checkpoint thread, and the flag it raises for the committer.
pub(crate) struct Checkpointer {
    stop: mpsc::Sender<()>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    restart: Arc<AtomicBool>,
}

impl Checkpointer {
    /// Starts the thread on a connection of its own to `path` (whose writer has already
    /// turned automatic checkpoints off).
    pub(crate) fn start(path: &Path) -> Result<Self> {
        let conn = super::conn::open(path, super::conn::Role::Checkpointer)?;
        let (stop, stopped) = mpsc::channel();
        let restart = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&restart);
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    match checkpoint(&conn) {
                        Ok((_, log, _)) => flag.store(log >= RESTART_PAGES, Ordering::Relaxed),
                        Err(e) => warn!(error = %e, "the SQLite checkpoint failed; retrying"),
                    }
                }
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the SQLite checkpointer: {e}")))?;
        Ok(Self { stop, thread: std::sync::Mutex::new(Some(thread)), restart })
    }

    /// Called by the committer right after a commit, on the write connection: if the log is
    /// long, copies what the thread has not copied yet so the next write starts the log over.
    pub(crate) fn after_commit(&self, writer: &Connection) {
        if !self.restart.load(Ordering::Relaxed) {
            return;
        }
        match checkpoint(writer) {
            // The thread is copying right now (busy), or a reader's snapshot still needs a
            // page: try again after the next commit.
            Ok((busy, log, copied)) if busy || copied < log => {
                debug!(log, copied, "the SQLite log could not be copied back whole yet")
            }
            Ok(_) => self.restart.store(false, Ordering::Relaxed),
            Err(e) => warn!(error = %e, "the SQLite checkpoint after a commit failed"),
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::sqlite::conn::{Role, open};

    /// Writes `rows` rows of 32 KiB, each in its own transaction on the write connection, the
    /// way the committer does (`after` runs after each commit); returns the largest size the
    /// `-wal` file reached.
    fn write_steadily(path: &Path, rows: usize, after: impl Fn(&Connection)) -> u64 {
        let conn = open(path, Role::Writer).unwrap();
        conn.execute_batch("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, body BLOB)").unwrap();
        let wal = path.with_extension("db-wal");
        let mut largest = 0;
        for _ in 0..rows {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            conn.execute("INSERT INTO t(body) VALUES (zeroblob(32768))", []).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            after(&conn);
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
            std::thread::sleep(Duration::from_micros(200));
        }
        largest
    }

    /// 64 MiB written without a pause: with the thread and the committer's finishing copy the
    /// log starts over and stays near [`RESTART_PAGES`]; every row is in the database file.
    #[test]
    fn the_log_starts_over_under_steady_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        // The writer first: it makes the file WAL.
        drop(open(&path, Role::Writer).unwrap());
        let checkpointer = Checkpointer::start(&path).unwrap();
        let largest = write_steadily(&path, 2048, |conn| checkpointer.after_commit(conn));
        checkpointer.stop();
        let bound = 3 * RESTART_PAGES as u64 * 4096;
        assert!(largest < bound, "the log reached {largest} bytes (bound {bound})");
        let reader = open(&path, Role::Reader).unwrap();
        let n: i64 = reader.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2048);
    }

    /// The same writes with automatic checkpoints off and nothing copying back: the log holds
    /// all 64 MiB. (What the test above would see without the checkpointer.)
    #[test]
    fn without_a_checkpointer_the_log_grows_with_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let largest = write_steadily(&path, 2048, |_| {});
        assert!(largest > 64 << 20, "the log reached only {largest} bytes");
    }
}
