//! An admission that queues a turn this process can run hands it straight to its Workers.
//!
//! Without this, a turn costs two commits before it starts: the admission, then a Worker's
//! claim (which commits the turn start), with a wake-up and a claim query in between. When
//! the admitting process is lightly loaded, the admission's own transaction claims the run it
//! queued (`Sessions::submit_and_claim`, the same claim rules as any Worker's), and the claim
//! is delivered here to the process's pool, which runs it as if its dispatcher had claimed
//! it: one commit fewer before the turn starts, whatever the face (ADR 0016).
//!
//! The door is open only while the process's primary pool runs and runs few turns
//! ([`FEW_TURNS`]; the Coordinator also asks `Load::keeping_up`): [`Handoff::reserve`] takes
//! one of its turn slots first, so a handed-off claim never exceeds `max_turns`. A claim that finds the door shut after all (the pool
//! stopped between the reservation and the delivery) is given back to the queue by its
//! admitter.

use std::sync::{Arc, Mutex};

use gateway_core::run::{Claim, Fence, WorkerOffer};
use gateway_store::LeaseTerms;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// A process running fewer turns than this hands its admissions' turns over. The handoff
/// pays when turns are few (an editor's prompts, a handful of users): it saves a commit and
/// a wake-up on each. With more in flight the dispatcher's batched claims are the cheaper
/// path (one claim transaction for every run that became ready meanwhile, where a handoff
/// claims each in its admission: measured, A2A saturation on PostgreSQL fell by a fifth with
/// 32 in flight), and they pace the turns that start: handing off every admission of a
/// burst would start them all at once, before the admission bounds could see the load.
pub(super) const FEW_TURNS: usize = 4;

/// A claim and the turn slot reserved for it.
pub(super) type Delivery = (Claim, OwnedSemaphorePermit);

/// The process's door to its Workers (shared by its Coordinator and its primary pool).
#[derive(Default)]
pub struct Handoff {
    door: Mutex<Option<Door>>,
}

/// What the running pool lends its admitters.
pub(super) struct Door {
    pub offer: Arc<WorkerOffer>,
    pub terms: LeaseTerms,
    pub slots: Arc<Semaphore>,
    /// The pool's turn slots in all (`max_turns`).
    pub capacity: usize,
    /// Handoffs only while fewer turns than this run ([`FEW_TURNS`], at most `claim_batch`).
    pub below: usize,
    pub deliveries: mpsc::UnboundedSender<Delivery>,
}

/// A free turn slot of the pool, held while the admission that may fill it commits.
pub struct Reserved {
    pub offer: Arc<WorkerOffer>,
    pub terms: LeaseTerms,
    slot: OwnedSemaphorePermit,
    deliveries: mpsc::UnboundedSender<Delivery>,
}

impl Handoff {
    /// A turn slot of the running pool, if it has one free and runs few turns.
    pub fn reserve(&self) -> Option<Reserved> {
        let door = self.door.lock().unwrap_or_else(|p| p.into_inner());
        let door = door.as_ref()?;
        if door.capacity.saturating_sub(door.slots.available_permits()) >= door.below {
            return None;
        }
        let slot = Arc::clone(&door.slots).try_acquire_owned().ok()?;
        Some(Reserved { offer: Arc::clone(&door.offer), terms: door.terms, slot, deliveries: door.deliveries.clone() })
    }

    /// Opens the door for a pool until the returned guard is dropped (the pool's dispatcher
    /// holds it, so a pool that stops or is aborted closes it).
    pub(super) fn open(self: &Arc<Self>, door: Door) -> Opened {
        *self.door.lock().unwrap_or_else(|p| p.into_inner()) = Some(door);
        Opened(Arc::clone(self))
    }
}

pub(super) struct Opened(Arc<Handoff>);

impl Drop for Opened {
    fn drop(&mut self) {
        *self.0.door.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Reserved {
    /// Gives the claim to the pool; if the pool has stopped, its fence comes back, for the
    /// caller to release the run.
    pub fn deliver(self, claim: Claim) -> Result<(), Fence> {
        self.deliveries.send((claim, self.slot)).map_err(|e| e.0.0.fence)
    }
}
