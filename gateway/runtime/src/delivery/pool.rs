//! A pool of outbound delivery attempts: at most `max` in flight in this process, each its own
//! task, so the loop that claims deliveries never waits for a receiver. It claims only as many
//! as there are free places, and a slow receiver holds one place for at most its attempt's
//! timeout while every other delivery goes on.
//!
//! One receiver has at most one attempt in flight by the outbox's rule, not the pool's: a
//! topic's deliveries are leased one at a time, in order, and each receiver is one topic. A
//! slow receiver therefore delays only its own deliveries. The pool knows nothing of channels.

use std::future::Future;

use tokio::task::JoinSet;

pub struct DeliveryPool {
    tasks: JoinSet<()>,
    max: usize,
}

impl DeliveryPool {
    pub fn new(max: usize) -> Self {
        Self { tasks: JoinSet::new(), max: max.max(1) }
    }

    /// Free places, once the attempts that ended are collected.
    pub fn free(&mut self) -> usize {
        while let Some(ended) = self.tasks.try_join_next() {
            log_panic(ended);
        }
        self.max.saturating_sub(self.tasks.len())
    }

    /// Starts an attempt. The caller took its place with [`DeliveryPool::free`].
    pub fn spawn(&mut self, attempt: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(attempt);
    }

    /// Returns when an attempt ends (never, while none is in flight).
    pub async fn next_done(&mut self) {
        match self.tasks.join_next().await {
            Some(ended) => log_panic(ended),
            None => std::future::pending().await,
        }
    }

    /// Ends every attempt in flight and waits for their tasks. An attempt cut short this way
    /// keeps its lease until it expires; then it is delivered again (at least once).
    pub async fn shutdown(&mut self) {
        self.tasks.abort_all();
        while let Some(ended) = self.tasks.join_next().await {
            if !ended.as_ref().is_err_and(|e| e.is_cancelled()) {
                log_panic(ended);
            }
        }
    }
}

fn log_panic(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::error!(error = %e, "a delivery attempt panicked; its lease will expire and it is tried again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn places_free_as_attempts_end_and_shutdown_ends_the_rest() {
        let mut pool = DeliveryPool::new(2);
        let ended = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let e = Arc::clone(&ended);
        pool.spawn(async move {
            let _ = rx.await;
            e.fetch_add(1, Ordering::SeqCst);
        });
        pool.spawn(std::future::pending());
        assert_eq!(pool.free(), 0);
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), pool.next_done()).await.unwrap();
        assert_eq!((pool.free(), ended.load(Ordering::SeqCst)), (1, 1));
        tokio::time::timeout(Duration::from_secs(5), pool.shutdown()).await.unwrap();
        assert_eq!(pool.free(), 2, "the stuck attempt was ended");
    }
}
