//! The one retry policy of outbound deliveries: how long to wait before the next attempt
//! (the shared [`Backoff`]), and after how many attempts to give up.

use std::time::Duration;

use gateway_wire::backoff::Backoff;

use gateway_services::metrics::Settle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub backoff: Backoff,
    /// Attempts after which a delivery is given up; `None`: retried until it is delivered or
    /// fails for good (a webhook endpoint that keeps failing is disabled instead).
    pub max_attempts: Option<u32>,
}

impl RetryPolicy {
    /// Exact waits doubling from one second up to `max`: deliveries are already spread out by
    /// the commits that queued them, so jitter would only make tests guess.
    pub const fn doubling(max: Duration, max_attempts: Option<u32>) -> Self {
        Self { backoff: Backoff::exact(Duration::from_secs(1), max), max_attempts }
    }

    /// What becomes of a delivery whose attempt number `attempt` (1 is the first) failed in a
    /// way worth retrying.
    pub fn after_failure<'a>(&self, attempt: u32, error: &'a str) -> Settle<'a> {
        match self.max_attempts {
            Some(max) if attempt >= max => Settle::Failed { error },
            _ => Settle::Retry { after: self.backoff.delay(attempt.saturating_sub(1), None), error },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_table() {
        const S: fn(u64) -> Duration = Duration::from_secs;
        // (max wait s, max attempts, failed attempt) -> Some(wait) or None (given up)
        let rows: &[(u64, Option<u32>, u32, Option<u64>)] = &[
            (60, Some(6), 1, Some(1)),
            (60, Some(6), 4, Some(8)),
            (60, Some(6), 5, Some(16)),
            (60, Some(6), 6, None),
            (60, Some(6), 7, None),
            (60, None, 1, Some(1)),
            (60, None, 7, Some(60)),
            (60, None, u32::MAX, Some(60)),
            (5, None, 4, Some(5)),
        ];
        for &(max, attempts, attempt, want) in rows {
            let got = RetryPolicy::doubling(S(max), attempts).after_failure(attempt, "e");
            let want = match want {
                Some(s) => Settle::Retry { after: S(s), error: "e" },
                None => Settle::Failed { error: "e" },
            };
            assert_eq!(got, want, "max {max}s, {attempts:?} attempts, attempt {attempt}");
        }
    }
}
