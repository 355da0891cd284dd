//! The leases a process holds, renewed together.
//!
//! Why one keeper and not one per turn: a process holds thousands of turns that mostly wait
//! (on a model, a remote agent, a client); a renewal statement per turn every few seconds
//! would cost more than the turns. The keeper renews every held lease in one statement
//! (`RunQueue::renew_leases`) every third of the lease, and at once when any interrupt is
//! hinted. A lease the store reports lost is abandoned (`Held::abandoned`): the turn writes
//! nothing more, since every commit is fenced anyway (invariant 2). An interrupt the store
//! reports sets `Held::interrupted`. A failed renewal statement is retried at the next tick;
//! a lease that expires meanwhile is reclaimable by another process, which is what a lost
//! lease means.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::RunId;
use gateway_core::run::Fence;
use gateway_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// One held lease and the signals of its turn.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub fence: Fence,
    /// A client asked to interrupt the turn.
    pub interrupted: CancellationToken,
    /// The lease is lost (or the pool stops): write nothing more.
    pub abandoned: CancellationToken,
}

/// The leases of one pool, by run and epoch: the same pool may claim a run again (its lease
/// was released or expired) while the turn of the older claim still winds down.
#[derive(Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<(RunId, i64), Held>>,
}

/// Removes a lease from the keeper's set when its turn ends, however it ends.
pub(crate) struct Holding {
    leases: Arc<Leases>,
    key: (RunId, i64),
    pub held: Held,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.leases.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
}

impl Leases {
    /// Starts renewing `fence` until the returned holding is dropped. An older claim of the
    /// same run this pool still holds lost its lease (a claim bumps the epoch): it is
    /// abandoned now rather than at its next refused commit.
    pub fn hold(self: &Arc<Self>, fence: Fence) -> Holding {
        let held = Held { fence, interrupted: CancellationToken::new(), abandoned: CancellationToken::new() };
        let key = (held.fence.run_id.clone(), held.fence.epoch);
        let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for (old, h) in map.iter() {
            if old.0 == key.0 && old.1 < key.1 {
                h.abandoned.cancel();
            }
        }
        map.insert(key.clone(), held.clone());
        Holding { leases: Arc::clone(self), key, held }
    }

    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn snapshot(&self) -> Vec<Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Renews every held lease once; abandons the lost ones, interrupts the cancelled ones.
    pub async fn renew(&self, store: &Arc<dyn Store>, lease: Duration) {
        let held = self.snapshot();
        if held.is_empty() {
            return;
        }
        let fences: Vec<Fence> = held.iter().map(|h| h.fence.clone()).collect();
        match store.renew_leases(&fences, lease).await {
            Ok(renewals) => {
                for (h, renewal) in held.iter().zip(renewals) {
                    match renewal {
                        Some(r) if r.cancel_requested && !h.interrupted.is_cancelled() => {
                            info!(run = %h.fence.run_id, "interrupt requested");
                            h.interrupted.cancel();
                        }
                        Some(_) => {}
                        None if !h.abandoned.is_cancelled() => {
                            warn!(run = %h.fence.run_id, epoch = h.fence.epoch, "lease lost; abandoning the run");
                            h.abandoned.cancel();
                        }
                        None => {}
                    }
                }
            }
            Err(e) => warn!(error = %e, leases = fences.len(), "lease renewal failed; retrying"),
        }
    }

    /// Renews every third of the lease, and at once on any interrupt hint, until `stop`.
    pub async fn keep(self: Arc<Self>, store: Arc<dyn Store>, lease: Duration, stop: CancellationToken) {
        let every = (lease / 3).max(Duration::from_millis(50));
        let mut cancels = store.wakeups().watch_cancels();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
                hinted = cancels.changed() => {
                    if hinted.is_err() {
                        tokio::time::sleep(every).await;
                    }
                }
            }
            self.renew(&store, lease).await;
        }
    }
}
