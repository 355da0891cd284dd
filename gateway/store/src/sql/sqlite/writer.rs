//! Group commit on SQLite's one write connection.
//!
//! Every write of the store runs in a [`WriteTx`] and ends with [`Writer::commit`], which
//! returns only once the write is durable: a client hears "accepted" after the fsync that
//! covers its write (invariant 4), never before.
//!
//! SQLite has one writer at a time, and each commit costs an fsync, so concurrent logical
//! writes share one transaction and one fsync. A write takes the open batch (a FIFO lock),
//! runs its statements inside its own `SAVEPOINT` on the calling thread (so a failing write
//! rolls back only itself; savepoints nest until the commit), releases the lock and waits.
//! The committer thread takes the lock after the writers already waiting for it (the lock is
//! fair), commits the batch, delivers its hints and only then answers each of its writes.
//! Under load a commit covers every write that arrived while the previous one was being
//! flushed; alone, a write waits for one wake-up of the committer. The fsync runs on that
//! thread so no task's thread stalls on the disk. If the commit fails, every write of the
//! batch fails: none was acknowledged. A statement error that made SQLite roll back the whole
//! transaction (disk full, I/O error) is found when its savepoint cannot be rolled back, and
//! fails the whole batch the same way.
//!
//! Checkpoints, which copy the log back into the database file, run on a thread of their own
//! beside the committer, never inside its COMMIT (`checkpoint.rs`).
//!
//! A failed commit also marks the writer as failing ([`Writer::health`]) until a commit
//! succeeds: reads still work on a full disk, so readiness must ask the writer, not a reader.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

use super::checkpoint::Checkpointer;
use crate::error::{Result, StoreError};
use crate::sql::Hints;
use crate::sql::lateness::{Lateness, Waiting};
use crate::wake::Wakeups;

/// The open batch: the write connection, whether its transaction is open, and the writes
/// waiting for it to be committed.
pub(crate) struct Batch {
    conn: Connection,
    open: bool,
    /// A write ended without committing (it failed): roll its savepoint back first.
    dirty: bool,
    waiting: Vec<(Hints, oneshot::Sender<Result<()>>)>,
    /// Asks the committer to run (see `Drop for WriteTx`).
    ask: mpsc::Sender<Ask>,
    failing: Failing,
}

/// Why the last batch failed to commit, until one commits: the writer's health.
type Failing = Arc<std::sync::Mutex<Option<String>>>;

fn set_failing(failing: &Failing, why: Option<String>) {
    *failing.lock().unwrap_or_else(|p| p.into_inner()) = why;
}

/// What the committer thread is asked to do.
enum Ask {
    Commit,
    Stop,
}

/// The writer of a SQLite store, with its committer thread.
pub(crate) struct Writer {
    batch: Arc<Mutex<Batch>>,
    ask: mpsc::Sender<Ask>,
    committer: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    checkpointer: Arc<Checkpointer>,
    /// How long writes take from `begin` to durable: the store's backlog, seen by admission
    /// (`lateness`). Under load it is the queue in front of the writer plus the batch's
    /// commit; alone, a few statements and one fsync.
    wait: Arc<Lateness>,
    failing: Failing,
}

/// One logical write: a savepoint in the shared batch. Derefs to the connection its
/// statements run on.
pub struct WriteTx {
    /// Always `Some` until committed or dropped.
    batch: Option<OwnedMutexGuard<Batch>>,
    asked: Option<Waiting>,
}

impl Drop for WriteTx {
    /// A write that ends without committing (refused, failed, or one that found nothing to
    /// write) leaves its savepoint to be rolled back and the batch's transaction open, holding
    /// the database's write lock. The committer closes it now rather than at the next write:
    /// another connection to the file (another process) must not wait on a batch nobody
    /// writes to.
    fn drop(&mut self) {
        if let Some(batch) = &self.batch {
            let _ = batch.ask.send(Ask::Commit);
        }
    }
}

impl Deref for WriteTx {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.batch.as_ref().expect("a write holds the open batch").conn
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.batch.as_mut().expect("a write holds the open batch").conn
    }
}

impl Writer {
    /// A writer on `conn` (the database at `path`), with its committer and checkpoint
    /// threads (stopped by [`Writer::stop`]).
    pub(crate) fn start(
        conn: Connection,
        path: &std::path::Path,
        wake: Arc<Wakeups>,
        metrics: crate::StoreMetrics,
    ) -> Result<Self> {
        let checkpointer = Arc::new(Checkpointer::start(path)?);
        let (ask, asks) = mpsc::channel();
        let failing = Failing::default();
        let batch = Arc::new(Mutex::new(Batch {
            conn,
            open: false,
            dirty: false,
            waiting: Vec::new(),
            ask: ask.clone(),
            failing: Arc::clone(&failing),
        }));
        let committer = {
            let batch = Arc::clone(&batch);
            let checkpointer = Arc::clone(&checkpointer);
            std::thread::Builder::new()
                .name("sqlite-commit".into())
                .spawn(move || commit_batches(&batch, &asks, &wake, &metrics, &checkpointer))
                .map_err(|e| StoreError::Unavailable(format!("cannot start the SQLite committer: {e}")))?
        };
        Ok(Self {
            batch,
            ask,
            committer: std::sync::Mutex::new(Some(committer)),
            checkpointer,
            wait: Default::default(),
            failing,
        })
    }

    fn ask(&self, what: Ask) {
        let _ = self.ask.send(what);
    }

    /// Starts a write.
    pub(crate) async fn begin(&self) -> Result<WriteTx> {
        let asked = Some(self.wait.wait());
        let mut batch = Arc::clone(&self.batch).lock_owned().await;
        undo_failed_write(&mut batch);
        let opened = if batch.open {
            run(&batch.conn, "SAVEPOINT w")
        } else {
            run(&batch.conn, "BEGIN IMMEDIATE").and_then(|()| run(&batch.conn, "SAVEPOINT w"))
        };
        if let Err(e) = opened {
            fail_batch(&mut batch, "could not start a write in the batch");
            return Err(StoreError::from(super::conn::db_error(e)));
        }
        batch.open = true;
        batch.dirty = true;
        Ok(WriteTx { batch: Some(batch), asked })
    }

    /// Makes the write durable; returns once the batch that holds it is committed. The
    /// committer delivers `hints` after that commit.
    pub(crate) async fn commit(&self, mut tx: WriteTx, hints: Hints) -> Result<()> {
        let asked = tx.asked.take();
        let Some(mut batch) = tx.batch.take() else { return Ok(()) };
        // The savepoint is not released: savepoints nest until the batch's COMMIT releases
        // them all, and `ROLLBACK TO w` still undoes only the newest write.
        batch.dirty = false;
        let (done, committed) = oneshot::channel();
        batch.waiting.push((hints, done));
        drop(batch);
        self.ask(Ask::Commit);
        committed.await.map_err(|_| StoreError::Unavailable("the store closed before committing".into()))??;
        if let Some(asked) = asked {
            asked.done();
        }
        Ok(())
    }

    /// How long writes take now, from `begin` to durable: the moving average, or the oldest
    /// write still waiting if that is longer (zero when no write happened lately).
    pub(crate) fn lateness(&self) -> std::time::Duration {
        self.wait.now()
    }

    /// Whether writes commit. While they do (the last batch committed) this costs nothing;
    /// after a failed commit (a full disk, an I/O error) it commits a probe write, which
    /// dirties the database header (`user_version`, rewritten unchanged) so the commit must
    /// append to the WAL as any write would: the writer is healthy again only when that
    /// commit succeeds. Without the probe, a gateway taken out of service for failing writes
    /// would never see them succeed again.
    pub(crate) async fn health(&self) -> Result<()> {
        if self.failing.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Ok(());
        }
        let tx = self.begin().await?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(super::conn::db_error)?;
        tx.pragma_update(None, "user_version", version).map_err(super::conn::db_error)?;
        self.commit(tx, Hints::default()).await
    }

    /// Waits until what the batch holds now is committed (or failed).
    pub(crate) async fn sync(&self) -> Result<()> {
        let (done, committed) = oneshot::channel();
        self.batch.lock().await.waiting.push((Hints::default(), done));
        self.ask(Ask::Commit);
        committed.await.map_err(|_| StoreError::Unavailable("the store closed before committing".into()))?
    }

    /// Stops the committer (after committing what the batch holds) and the checkpoint
    /// thread, and waits for both.
    pub(crate) async fn stop(&self) {
        self.ask(Ask::Stop);
        let handle = self.committer.lock().unwrap_or_else(|p| p.into_inner()).take();
        let checkpointer = Arc::clone(&self.checkpointer);
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(handle) = handle {
                let _ = handle.join();
            }
            checkpointer.stop();
        })
        .await;
    }
}

/// Runs one transaction-control statement (prepared once per connection, like the others).
fn run(conn: &Connection, sql: &'static str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.raw_execute().map(|_| ())
}

impl Drop for Writer {
    /// A store dropped without `close`: the committer commits what the batch holds and ends.
    fn drop(&mut self) {
        self.ask(Ask::Stop);
    }
}

/// Rolls back a savepoint a failed write left open. If that is impossible, SQLite already
/// rolled the whole transaction back (disk full, I/O error): every write of the batch failed.
fn undo_failed_write(batch: &mut Batch) {
    if !batch.dirty {
        return;
    }
    batch.dirty = false;
    if run(&batch.conn, "ROLLBACK TO w").and_then(|()| run(&batch.conn, "RELEASE w")).is_err() {
        fail_batch(batch, "the database rolled the batch back after a failed write");
    }
}

/// Rolls the open transaction back and fails every write waiting for it.
fn fail_batch(batch: &mut Batch, why: &str) {
    if batch.open && !batch.conn.is_autocommit() {
        let _ = run(&batch.conn, "ROLLBACK");
    }
    batch.open = false;
    batch.dirty = false;
    set_failing(&batch.failing, Some(why.to_owned()));
    for (_, done) in batch.waiting.drain(..) {
        let _ = done.send(Err(StoreError::Unavailable(why.to_owned())));
    }
}

/// Fault injection for the crash test (`fault_tests`): when set, the committer stops for good
/// right before committing a batch that has writes, as a process killed between the writes and
/// their fsync would.
#[cfg(test)]
pub(crate) static STALL_BEFORE_COMMIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The committer thread: commits batches as writes finish, until asked to stop (then commits
/// what is left). It takes the batch with `blocking_lock`, behind the writes already queued.
fn commit_batches(
    batch: &Mutex<Batch>,
    asks: &mpsc::Receiver<Ask>,
    wake: &Wakeups,
    metrics: &crate::StoreMetrics,
    checkpointer: &Checkpointer,
) {
    loop {
        let mut stopping = matches!(asks.recv(), Ok(Ask::Stop) | Err(_));
        // Every ask that arrived meanwhile is covered by this pass.
        while let Ok(ask) = asks.try_recv() {
            stopping |= matches!(ask, Ask::Stop);
        }
        let waiting;
        let result;
        {
            let mut batch = batch.blocking_lock();
            undo_failed_write(&mut batch);
            waiting = std::mem::take(&mut batch.waiting);
            #[cfg(test)]
            if STALL_BEFORE_COMMIT.load(std::sync::atomic::Ordering::SeqCst) && !waiting.is_empty() {
                println!("STALLED {}", waiting.len());
                loop {
                    std::thread::park();
                }
            }
            result = if batch.open {
                batch.open = false;
                let started = std::time::Instant::now();
                let committed = run(&batch.conn, "COMMIT");
                metrics.committed(waiting.len(), started.elapsed());
                let committed = committed.map_err(|e| {
                    let e = super::conn::db_error(e);
                    if !batch.conn.is_autocommit() {
                        let _ = run(&batch.conn, "ROLLBACK");
                    }
                    e
                });
                set_failing(&batch.failing, committed.as_ref().err().map(|e| format!("the last commit failed: {e}")));
                if committed.is_ok() {
                    checkpointer.after_commit(&batch.conn);
                }
                committed
            } else {
                Ok(())
            };
        }
        for (hints, done) in waiting {
            match &result {
                Ok(()) => {
                    hints.deliver(wake);
                    let _ = done.send(Ok(()));
                }
                Err(e) => {
                    let _ = done.send(Err(StoreError::Unavailable(format!("the batch commit failed: {e}"))));
                }
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
#[path = "writer_fault_tests.rs"]
mod fault_tests;
