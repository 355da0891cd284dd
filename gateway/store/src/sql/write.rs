//! Write transactions, and group commit on SQLite.
//!
//! Every write of the store runs in a [`WriteTx`] and ends with [`SqlStore::finish`], which
//! returns only once the write is durable: a client hears "accepted" after the fsync that
//! covers its write (invariant 4), never before.
//!
//! **PostgreSQL**: each write is its own transaction on a pooled connection; concurrent
//! commits share WAL flushes inside the server (PostgreSQL's own group commit).
//!
//! **SQLite** has one writer connection, and each commit costs an fsync. There, concurrent
//! logical writes share one transaction and one fsync: a write takes the batch (a FIFO lock),
//! runs inside its own `SAVEPOINT` (so a failing write rolls back only itself; savepoints nest
//! until the commit), releases the lock, and waits. The committer task takes the lock after
//! the writers already waiting for it (the lock is fair), commits the batch, and only then
//! answers each of its writes. Under load a commit covers every write that arrived while the previous one
//! was being flushed; alone, a write waits one task hop. If the commit fails, every write of
//! the batch fails: none was acknowledged. A statement error that made SQLite roll back the
//! whole transaction (disk full, I/O error) is found when its savepoint cannot be rolled back,
//! and fails the whole batch the same way.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::{Database, Pool, Transaction};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};
use tokio_util::sync::CancellationToken;

use super::Hints;
use super::lateness::{Lateness, Waiting};
use crate::error::{Result, StoreError};

/// The open batch of the SQLite writer: its transaction, and the writes waiting for it to be
/// committed.
pub(crate) struct Batch<DB: Database> {
    tx: Option<Transaction<'static, DB>>,
    /// A write ended without releasing its savepoint (it failed): roll it back first.
    dirty: bool,
    waiting: Vec<(Hints, oneshot::Sender<Result<()>>)>,
}

/// Shares commits between concurrent writes (SQLite).
pub(crate) struct Group<DB: Database> {
    batch: Arc<Mutex<Batch<DB>>>,
    ready: Notify,
}

/// How a store writes: plain transactions, or grouped ones.
pub(crate) struct Writer<DB: Database> {
    pool: Pool<DB>,
    begin: &'static str,
    group: Option<Arc<Group<DB>>>,
    committer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How long writes take from `begin` to their durable commit: the store's backlog, seen
    /// by admission (`lateness`). Under load it is the queue in front of the writer plus the
    /// batch's commit; alone, a few statements and one fsync.
    wait: Arc<Lateness>,
}

/// One logical write: a transaction of its own, or a savepoint in the shared batch. Derefs
/// to the connection its statements run on.
pub(crate) struct WriteTx<DB: Database>(Inner<DB>, Option<Waiting>);

enum Inner<DB: Database> {
    /// Always `Some` until committed or dropped.
    Own(Option<Transaction<'static, DB>>),
    /// Always `Some` until committed or dropped.
    Grouped(Option<OwnedMutexGuard<Batch<DB>>>),
}

impl<DB: Database> Drop for WriteTx<DB> {
    /// A write that ends without `commit` (refused, failed) rolls back at once, in a task of
    /// its own: sqlx would roll back only when the connection is next used, and until then
    /// the transaction's row locks stay held. (A grouped write's savepoint is rolled back by
    /// the next user of the batch.)
    fn drop(&mut self) {
        if let Inner::Own(tx) = &mut self.0
            && let Some(tx) = tx.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = tx.rollback().await;
            });
        }
    }
}

impl<DB: Database> Deref for WriteTx<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        match &self.0 {
            Inner::Own(tx) => tx.as_deref().expect("an open write holds its transaction"),
            Inner::Grouped(batch) => {
                batch.as_ref().and_then(|b| b.tx.as_deref()).expect("a grouped write holds the open batch")
            }
        }
    }
}

impl<DB: Database> DerefMut for WriteTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.0 {
            Inner::Own(tx) => tx.as_deref_mut().expect("an open write holds its transaction"),
            Inner::Grouped(batch) => {
                batch.as_mut().and_then(|b| b.tx.as_deref_mut()).expect("a grouped write holds the open batch")
            }
        }
    }
}

impl<DB> Writer<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    /// A writer whose transactions each commit on their own.
    pub fn plain(pool: Pool<DB>, begin: &'static str) -> Self {
        Self { pool, begin, group: None, committer: std::sync::Mutex::new(None), wait: Default::default() }
    }

    /// A writer that groups commits, with its committer task (stopped by `stop`).
    pub fn grouped(
        pool: Pool<DB>,
        begin: &'static str,
        stop: CancellationToken,
        wake: Arc<crate::wake::Wakeups>,
    ) -> Self {
        let group = Arc::new(Group {
            batch: Arc::new(Mutex::new(Batch { tx: None, dirty: false, waiting: Vec::new() })),
            ready: Notify::new(),
        });
        let committer = tokio::spawn(commit_batches(Arc::clone(&group), stop, wake));
        Self {
            pool,
            begin,
            group: Some(group),
            committer: std::sync::Mutex::new(Some(committer)),
            wait: Default::default(),
        }
    }

    /// Starts a write.
    pub async fn begin(&self) -> Result<WriteTx<DB>> {
        let asked = Some(self.wait.wait());
        let Some(group) = &self.group else {
            let tx = self.pool.begin_with(self.begin).await?;
            return Ok(WriteTx(Inner::Own(Some(tx)), asked));
        };
        let mut batch = Arc::clone(&group.batch).lock_owned().await;
        undo_failed_write(&mut batch).await;
        if batch.tx.is_none() {
            batch.tx = Some(self.pool.begin_with(self.begin).await?);
        }
        let conn = batch.tx.as_deref_mut().expect("the batch was just opened");
        if let Err(e) = sqlx::query("SAVEPOINT w").execute(conn).await {
            fail_batch(&mut batch, "could not start a write in the batch");
            return Err(e.into());
        }
        batch.dirty = true;
        Ok(WriteTx(Inner::Grouped(Some(batch)), asked))
    }

    /// Makes the write durable; returns once it is (for a grouped write: once the batch that
    /// holds it is committed). `hints` are delivered by the caller's `deliver` after that.
    pub async fn commit(&self, mut tx: WriteTx<DB>, hints: Hints) -> Result<Hints> {
        let asked = tx.1.take();
        let batch = match &mut tx.0 {
            Inner::Own(own) => {
                if let Some(own) = own.take() {
                    own.commit().await?;
                    if let Some(asked) = asked {
                        asked.done();
                    }
                }
                return Ok(hints);
            }
            Inner::Grouped(batch) => batch.take(),
        };
        match batch {
            None => Ok(hints),
            Some(mut batch) => {
                // The savepoint is not released: savepoints nest until the batch's COMMIT
                // releases them all, and `ROLLBACK TO w` still undoes only the newest write.
                // One statement (one hop to SQLite's thread) less per write.
                batch.dirty = false;
                let (done, committed) = oneshot::channel();
                batch.waiting.push((hints, done));
                drop(batch);
                if let Some(group) = &self.group {
                    group.ready.notify_one();
                }
                // The committer delivers the batch's hints itself, after the commit.
                committed.await.map_err(|_| StoreError::Unavailable("the store closed before committing".into()))??;
                if let Some(asked) = asked {
                    asked.done();
                }
                Ok(Hints::default())
            }
        }
    }

    /// How long writes take now, from `begin` to durable: the moving average, or the oldest
    /// write still waiting if that is longer (zero when no write happened lately).
    pub fn lateness(&self) -> std::time::Duration {
        self.wait.now()
    }

    /// Waits until what the batch holds now is committed (or failed); at once when writes are
    /// not grouped.
    pub async fn sync(&self) -> Result<()> {
        let Some(group) = &self.group else { return Ok(()) };
        let (done, committed) = oneshot::channel();
        group.batch.lock().await.waiting.push((Hints::default(), done));
        group.ready.notify_one();
        committed.await.map_err(|_| StoreError::Unavailable("the store closed before committing".into()))?
    }

    /// Stops the committer (after committing what it holds) and waits for it.
    pub async fn stop(&self) {
        let handle = self.committer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }
}

/// Rolls back a savepoint a failed write left open. If that is impossible, SQLite already
/// rolled the whole transaction back (disk full, I/O error): every write of the batch failed.
async fn undo_failed_write<DB>(batch: &mut Batch<DB>)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    if !batch.dirty {
        return;
    }
    batch.dirty = false;
    let Some(conn) = batch.tx.as_deref_mut() else { return };
    let undone = async {
        sqlx::query("ROLLBACK TO w").execute(&mut *conn).await?;
        sqlx::query("RELEASE w").execute(&mut *conn).await
    };
    if undone.await.is_err() {
        fail_batch(batch, "the database rolled the batch back after a failed write");
    }
}

/// Drops the open transaction (rolling it back) and fails every write waiting for it.
fn fail_batch<DB: Database>(batch: &mut Batch<DB>, why: &str) {
    batch.tx = None;
    batch.dirty = false;
    for (_, done) in batch.waiting.drain(..) {
        let _ = done.send(Err(StoreError::Unavailable(why.to_owned())));
    }
}

/// Fault injection for the crash test (`fault_tests`): when set, the committer stops for good
/// right before committing a batch that has writes, as a process killed between the writes and
/// their fsync would.
#[cfg(test)]
pub(crate) static STALL_BEFORE_COMMIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Commits batches as writes finish, until `stop`; then commits what is left.
async fn commit_batches<DB>(group: Arc<Group<DB>>, stop: CancellationToken, wake: Arc<crate::wake::Wakeups>)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    loop {
        let stopping = tokio::select! {
            _ = group.ready.notified() => false,
            _ = stop.cancelled() => true,
        };
        {
            let mut batch = group.batch.lock().await;
            undo_failed_write(&mut batch).await;
            let waiting = std::mem::take(&mut batch.waiting);
            #[cfg(test)]
            if STALL_BEFORE_COMMIT.load(std::sync::atomic::Ordering::SeqCst) && !waiting.is_empty() {
                println!("STALLED {}", waiting.len());
                std::future::pending::<()>().await;
            }
            let result = match batch.tx.take() {
                Some(tx) => tx.commit().await.map_err(StoreError::from),
                None => Ok(()),
            };
            drop(batch);
            for (hints, done) in waiting {
                match &result {
                    Ok(()) => {
                        hints.deliver(&wake);
                        let _ = done.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = done.send(Err(StoreError::Unavailable(format!("the batch commit failed: {e}"))));
                    }
                }
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
#[path = "write_fault_tests.rs"]
mod fault_tests;
