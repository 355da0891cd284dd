//! How late the store's reads and writes run: what admission reads as the store's backlog
//! (`Store::lateness`).

use std::sync::Arc;

/// How late the store's work runs (writes: from `begin` to durable; reads: the wait for a
/// place): a moving average of finished work, and the age of the oldest work still waiting.
/// A saturated store shows here long before anything else. The average counts only while
/// work finishes (a last sample older than a second is no backlog); the oldest wait covers
/// the store that finishes nothing at all, which an average of finished work never sees.
pub(crate) struct Lateness {
    avg_us: std::sync::atomic::AtomicU64,
    /// When the last sample was taken, in milliseconds since `base` (this is on every read and
    /// write: atomics, and one short lock for `waiting`).
    at_ms: std::sync::atomic::AtomicU64,
    base: std::time::Instant,
    /// When each operation still waiting began, oldest first. Approximately: one that ends
    /// removes the oldest entry, whichever it was, so the count is exact and the oldest age
    /// is never overstated.
    waiting: std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>,
}

impl Default for Lateness {
    fn default() -> Self {
        Self {
            avg_us: Default::default(),
            at_ms: Default::default(),
            base: std::time::Instant::now(),
            waiting: Default::default(),
        }
    }
}

impl Lateness {
    fn record(&self, waited: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        let avg = self.avg_us.load(Relaxed);
        self.avg_us.store(avg - avg / 16 + us / 16, Relaxed);
        // +1: zero means "never sampled".
        self.at_ms.store(self.base.elapsed().as_millis() as u64 + 1, Relaxed);
    }

    /// Counts an operation as waiting from now until it is [`Waiting::done`] (sampled) or
    /// dropped (given up: not sampled).
    pub(crate) fn wait(self: &Arc<Self>) -> Waiting {
        let since = std::time::Instant::now();
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).push_back(since);
        Waiting { of: Arc::clone(self), since }
    }

    pub(crate) fn now(&self) -> std::time::Duration {
        use std::sync::atomic::Ordering::Relaxed;
        let oldest =
            self.waiting.lock().unwrap_or_else(|p| p.into_inner()).front().map(|t| t.elapsed()).unwrap_or_default();
        let at = self.at_ms.load(Relaxed);
        let age_ms = (self.base.elapsed().as_millis() as u64 + 1).saturating_sub(at);
        if at == 0 || age_ms >= 1000 {
            return oldest;
        }
        oldest.max(std::time::Duration::from_micros(self.avg_us.load(Relaxed)))
    }
}

/// One operation counted by [`Lateness`] while it waits.
pub(crate) struct Waiting {
    of: Arc<Lateness>,
    since: std::time::Instant,
}

impl Waiting {
    /// The operation got what it waited for: its wait becomes a sample.
    pub(crate) fn done(self) {
        self.of.record(self.since.elapsed());
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.of.waiting.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Lateness;

    #[test]
    fn lateness_averages_recent_samples_and_forgets_an_old_one() {
        let l = Lateness::default();
        assert_eq!(l.now(), Duration::ZERO, "never sampled");
        for _ in 0..64 {
            l.record(Duration::from_millis(200));
        }
        let avg = l.now();
        assert!(avg > Duration::from_millis(150) && avg <= Duration::from_millis(200), "{avg:?}");
        std::thread::sleep(Duration::from_millis(1050));
        assert_eq!(l.now(), Duration::ZERO, "a last sample older than a second is no backlog");
    }

    #[test]
    fn work_still_waiting_counts_before_it_finishes() {
        let l = std::sync::Arc::new(Lateness::default());
        let first = l.wait();
        let second = l.wait();
        std::thread::sleep(Duration::from_millis(120));
        assert!(l.now() >= Duration::from_millis(120), "{:?}: nothing finished, yet two waits are late", l.now());
        drop(first);
        assert!(l.now() >= Duration::from_millis(120), "one is still waiting");
        second.done();
        let after = l.now();
        assert!(after < Duration::from_millis(120), "{after:?}: only the average of one sample is left");
        assert!(after > Duration::ZERO, "the finished wait is a sample");
    }
}
