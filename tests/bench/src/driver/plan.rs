//! How long and how hard each scenario runs: the full plan (the published figures) or the
//! quick one (a few seconds per scenario, for trying the bench and for CI smoke runs).

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Interleaved rounds: 1 = A B, 2 = A B B A, ...
    pub rounds: usize,
    pub warmup: Duration,
    /// Longest wait for a server to go idle between segments.
    pub settle_max: Duration,
    pub ma_clients: usize,
    pub ma_window: Duration,
    pub a2a_rates: Vec<f64>,
    pub a2a_window: Duration,
    pub a2a_delay: Duration,
    pub a2a_timeout: Duration,
    pub sat_connections: usize,
    pub sat_text_bytes: usize,
    pub sat_window: Duration,
    pub acp_prompts: usize,
    pub fsync_commits: usize,
    pub subscribers: usize,
    pub subscriber_sessions: usize,
    pub parked: usize,
    /// Turns of scenario (f), one after another.
    pub preview_trials: usize,
    /// Words (= deltas) per turn of scenario (f), and the pause between them.
    pub preview_words: usize,
    pub preview_drip: Duration,
}

impl Plan {
    pub fn new(quick: bool, rounds: Option<usize>) -> Self {
        let full = Plan {
            quick: false,
            rounds: 2,
            warmup: Duration::from_secs(2),
            settle_max: Duration::from_secs(20),
            ma_clients: 16,
            ma_window: Duration::from_secs(10),
            a2a_rates: vec![100.0, 500.0],
            a2a_window: Duration::from_secs(10),
            a2a_delay: Duration::from_secs(1),
            a2a_timeout: Duration::from_secs(10),
            sat_connections: 32,
            sat_text_bytes: 1024,
            sat_window: Duration::from_secs(10),
            acp_prompts: 500,
            fsync_commits: 2000,
            subscribers: 10_000,
            subscriber_sessions: 1000,
            parked: 1000,
            preview_trials: 100,
            preview_words: 10,
            preview_drip: Duration::from_millis(20),
        };
        let mut plan = if quick {
            Plan {
                quick: true,
                rounds: 1,
                warmup: Duration::from_millis(500),
                settle_max: Duration::from_secs(5),
                ma_window: Duration::from_secs(2),
                a2a_rates: vec![100.0],
                a2a_window: Duration::from_secs(2),
                a2a_timeout: Duration::from_secs(5),
                sat_window: Duration::from_secs(2),
                acp_prompts: 50,
                fsync_commits: 200,
                subscribers: 1000,
                subscriber_sessions: 100,
                parked: 100,
                preview_trials: 20,
                ..full
            }
        } else {
            full
        };
        if let Some(r) = rounds {
            plan.rounds = r.max(1);
        }
        plan
    }
}
