//! Load shedding: the bounds on what one process admits, and the one answer beyond them.
//!
//! A gateway that queues without bound under a burst makes everyone wait until their
//! requests time out, the accepted ones included. So admission is bounded twice
//! (DESIGN §3, "Overload is refused"):
//!
//! - **requests in flight**: requests whose response head is not sent yet (bodies being read,
//!   admissions committing, blocking sends waiting for their turn). Each face's router takes
//!   a [`RequestPermit`] before it reads a body; a stream's permit is returned with the
//!   response head, so idle subscribers cost nothing here.
//! - **queued runs**: inputs that would start a turn are refused while more runs wait to be
//!   claimed than `max_queued_runs`, counted in the store (so across every process on it)
//!   and sampled at most every [`SAMPLE_EVERY`]: a sample is one indexed `COUNT` on the
//!   admission path, never a query per request.
//!
//! Beyond either bound the answer is [`Busy`] at once, which each face maps once, at its edge,
//! to its protocol's overload answer with the retry hint. Nothing accepted is ever dropped:
//! the bounds apply before an admission commits, never after.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gateway_store::Store;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// How stale a queued-runs sample may be before an admission takes a new one.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// `[admission]`: the bounds on what this process admits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdmissionLimits {
    /// Requests in flight at once (all faces; health and metrics not counted).
    pub max_requests: usize,
    /// Runs waiting to be claimed (in the whole store) beyond which new turns are refused.
    pub max_queued_runs: u64,
    /// The retry hint sent with a refusal.
    #[serde(rename = "retry_after_secs", with = "gateway_core::durations::secs")]
    pub retry_after: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self { max_requests: 4096, max_queued_runs: 10_000, retry_after: Duration::from_secs(1) }
    }
}

/// Which bound refused the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyCause {
    /// `max_requests` requests are in flight.
    Requests,
    /// `max_queued_runs` runs wait to be claimed.
    QueuedRuns,
}

impl BusyCause {
    pub fn as_str(self) -> &'static str {
        match self {
            BusyCause::Requests => "requests",
            BusyCause::QueuedRuns => "queued_runs",
        }
    }
}

/// The refusal: which bound, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; retry in {}s", self.describe(), retry_after.as_secs().max(1))]
pub struct Busy {
    pub cause: BusyCause,
    pub limit: u64,
    pub retry_after: Duration,
}

impl Busy {
    fn describe(&self) -> String {
        match self.cause {
            BusyCause::Requests => format!("the gateway is busy: {} requests are in flight", self.limit),
            BusyCause::QueuedRuns => format!("the gateway is busy: more than {} turns wait to start", self.limit),
        }
    }
}

/// Held while a request is handled; dropping it frees its place.
pub struct RequestPermit(#[allow(dead_code)] OwnedSemaphorePermit);

/// The admission bounds of one process, shared by its faces through the Coordinator.
pub struct Load {
    limits: AdmissionLimits,
    requests: Arc<Semaphore>,
    queued: AtomicU64,
    /// When `queued` was last sampled; the lock also makes one admission sample at a time.
    sampled: Mutex<Option<Instant>>,
    metrics: Arc<Metrics>,
}

impl Load {
    pub fn new(limits: AdmissionLimits, metrics: Arc<Metrics>) -> Self {
        Self {
            requests: Arc::new(Semaphore::new(limits.max_requests.max(1))),
            limits,
            queued: AtomicU64::new(0),
            sampled: Mutex::new(None),
            metrics,
        }
    }

    pub fn limits(&self) -> &AdmissionLimits {
        &self.limits
    }

    fn busy(&self, cause: BusyCause, limit: u64) -> Busy {
        self.metrics.refused(cause);
        Busy { cause, limit, retry_after: self.limits.retry_after }
    }

    /// A place for one request, or `Busy` at once: never a wait.
    pub fn try_request(&self) -> Result<RequestPermit, Busy> {
        Arc::clone(&self.requests)
            .try_acquire_owned()
            .map(RequestPermit)
            .map_err(|_| self.busy(BusyCause::Requests, self.limits.max_requests as u64))
    }

    /// Refuses a new turn while too many runs wait to be claimed. The count is at most
    /// [`SAMPLE_EVERY`] old; while one admission samples it, the others use the last sample
    /// instead of waiting. A store that cannot count is not a reason to refuse: the admission
    /// that follows meets the same store and reports it properly.
    pub async fn check_queue(&self, store: &dyn Store) -> Result<(), Busy> {
        if let Ok(mut sampled) = self.sampled.try_lock()
            && sampled.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY)
        {
            if let Ok(n) = store.queued_runs().await {
                self.queued.store(n, Ordering::Relaxed);
                self.metrics.runs_queued.store(n as i64, Ordering::Relaxed);
            }
            *sampled = Some(Instant::now());
        }
        if self.queued.load(Ordering::Relaxed) >= self.limits.max_queued_runs {
            return Err(self.busy(BusyCause::QueuedRuns, self.limits.max_queued_runs));
        }
        Ok(())
    }

    /// Requests in flight now (for tests and metrics).
    pub fn requests_in_flight(&self) -> usize {
        self.limits.max_requests.max(1) - self.requests.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_beyond_the_bound_are_refused_at_once_and_admitted_again_when_one_ends() {
        let metrics = Arc::new(Metrics::default());
        let load = Load::new(AdmissionLimits { max_requests: 2, ..Default::default() }, Arc::clone(&metrics));
        let a = load.try_request().expect("first");
        let _b = load.try_request().expect("second");
        let busy = load.try_request().err().expect("the third is refused");
        assert_eq!(busy.cause, BusyCause::Requests);
        assert_eq!(busy.retry_after, Duration::from_secs(1));
        assert_eq!(busy.to_string(), "the gateway is busy: 2 requests are in flight; retry in 1s");
        assert_eq!(load.requests_in_flight(), 2);
        drop(a);
        assert!(load.try_request().is_ok(), "a freed place is taken again");
        assert!(metrics.render().contains("gateway_admissions_refused_total{cause=\"requests\"} 1\n"));
    }
}
