//! Exponential backoff: the one rule for how long to wait before trying again.
//!
//! Callers: the model client (between API retries), the worker (between a run's retries), and
//! the outbound delivery of webhooks and push notifications.

use std::time::Duration;

/// Waits that double from `first` up to `max`. A jittered backoff waits a random time in
/// `[1/2, 1]` of the exponential step so that clients that failed together do not retry
/// together; an exact one waits the step itself (where retries are already spread out, or a
/// test needs the number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub jitter: bool,
}

impl Backoff {
    /// A jittered backoff: the default for anything that talks to a shared service.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { first, max, jitter: true }
    }

    /// A backoff without jitter.
    pub const fn exact(first: Duration, max: Duration) -> Self {
        Self { first, max, jitter: false }
    }

    /// The wait before attempt `attempt + 1` (attempt 0 is the first retry), never shorter than
    /// what the other side `asked` for (a `Retry-After`).
    pub fn delay(&self, attempt: u32, asked: Option<Duration>) -> Duration {
        let step = self.first.saturating_mul(2u32.saturating_pow(attempt.min(31))).min(self.max);
        let wait = if self.jitter { step.mul_f64(0.5 + fastrand::f64() / 2.0) } else { step };
        wait.max(asked.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_backoff_table() {
        // (first, max, attempt, asked) -> exact wait; a jittered wait lies in [wait / 2, wait].
        let rows: &[(u64, u64, u32, Option<u64>, u64)] = &[
            (1, 60, 0, None, 1),
            (1, 60, 1, None, 2),
            (1, 60, 3, None, 8),
            (1, 60, 6, None, 60),
            (1, 60, 30, None, 60),
            (1, 60, u32::MAX, None, 60),
            (1, 30, 0, Some(7), 7),
            (1, 30, 4, Some(7), 16),
            (2, 30, 2, None, 8),
        ];
        for &(first, max, attempt, asked, want) in rows {
            let asked = asked.map(S);
            let exact = Backoff::exact(S(first), S(max));
            assert_eq!(exact.delay(attempt, asked), S(want), "exact {first}/{max} attempt {attempt} asked {asked:?}");
            let jittered = Backoff::new(S(first), S(max));
            let floor = (S(want) / 2).max(asked.unwrap_or_default());
            for _ in 0..100 {
                let d = jittered.delay(attempt, asked);
                assert!(d >= floor && d <= S(want), "jittered {first}/{max} attempt {attempt}: {d:?}");
            }
        }
    }
}
