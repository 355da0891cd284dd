//! Load shapes. **Closed loop**: `n` clients, each sends its next request when the previous
//! one is answered (measures capacity at a given concurrency). **Open loop**: requests are
//! due at a fixed rate whatever the server does, and each latency is measured from the
//! request's *due* time, not from when it was actually sent, so a server (or a driver) that
//! falls behind cannot hide its queueing (no coordinated omission).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::stats::Latencies;

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The server answered, with an error or an unexpected result (label: what it said).
    Refused(String),
    /// No answer: connection refused or reset, unreadable response (label: what happened).
    Broken(String),
}

/// What a measurement counted: merged over segments of one side.
#[derive(Clone, Default)]
pub struct Tally {
    pub ok: Latencies,
    /// Latency of answers that were errors (an overload answer should come fast).
    pub refused: Latencies,
    pub broken: u64,
    pub timeouts: u64,
    pub errors: BTreeMap<String, u64>,
    /// Requests offered (open loop) or started (closed loop).
    pub offered: u64,
    /// Open loop: successes that completed while requests were still being offered (the
    /// goodput under load; later ones are a backlog draining).
    pub ok_in_window: u64,
    /// Measured wall time.
    pub seconds: f64,
    /// Server CPU time over the measured windows.
    pub cpu: Duration,
}

impl Tally {
    fn count(&mut self, outcome: Result<Outcome, ()>, latency: Duration) {
        match outcome {
            Ok(Outcome::Ok) => self.ok.record(latency),
            Ok(Outcome::Refused(label)) => {
                self.refused.record(latency);
                *self.errors.entry(label).or_default() += 1;
            }
            Ok(Outcome::Broken(label)) => {
                self.broken += 1;
                *self.errors.entry(label).or_default() += 1;
            }
            Err(()) => {
                self.timeouts += 1;
                *self.errors.entry("timeout".into()).or_default() += 1;
            }
        }
    }

    pub fn merge(&mut self, o: &Tally) {
        self.ok.add(&o.ok);
        self.refused.add(&o.refused);
        self.broken += o.broken;
        self.timeouts += o.timeouts;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        self.offered += o.offered;
        self.ok_in_window += o.ok_in_window;
        self.seconds += o.seconds;
        self.cpu += o.cpu;
    }

    pub fn throughput(&self) -> f64 {
        if self.seconds > 0.0 { self.ok.len() as f64 / self.seconds } else { 0.0 }
    }
}

/// `clients` concurrent loops for `window`; requests started before its end are awaited.
pub async fn closed_loop<F, Fut>(clients: usize, window: Duration, timeout: Duration, op: F) -> Tally
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let end = start + window;
    let mut set = JoinSet::new();
    for c in 0..clients {
        let op = Arc::clone(&op);
        set.spawn(async move {
            let mut t = Tally::default();
            let mut i = c as u64;
            while Instant::now() < end {
                let t0 = Instant::now();
                let r = tokio::time::timeout(timeout, op(i)).await.map_err(|_| ());
                t.count(r, t0.elapsed());
                t.offered += 1;
                i += clients as u64;
            }
            t
        });
    }
    let mut total = Tally::default();
    while let Some(r) = set.join_next().await {
        if let Ok(t) = r {
            total.merge(&t);
        }
    }
    total.seconds = start.elapsed().as_secs_f64();
    total
}

/// `rate` requests per second for `window`, each given up after `timeout` counted from
/// its due time. Returns once every request has ended. `seconds` is the offering window,
/// so the throughput is the completed share times the offered rate.
pub async fn open_loop<F, Fut>(rate: f64, window: Duration, timeout: Duration, op: F) -> Tally
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let n = (rate * window.as_secs_f64()).round().max(1.0) as u64;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let op = Arc::clone(&op);
        set.spawn(async move {
            let r = tokio::time::timeout_at(due + timeout, op(i)).await.map_err(|_| ());
            (r, due.elapsed(), start.elapsed())
        });
    }
    let mut total = Tally { offered: n, ..Tally::default() };
    while let Some(r) = set.join_next().await {
        if let Ok((r, latency, done_at)) = r {
            if r == Ok(Outcome::Ok) && done_at <= window {
                total.ok_in_window += 1;
            }
            total.count(r, latency);
        }
    }
    total.seconds = window.as_secs_f64();
    total
}

/// The A/B order of interleaved measurements: A, B, B, A, A, B, …
pub fn schedule(rounds: usize) -> Vec<(usize, Side)> {
    interleave(rounds, &[Side::Gateway, Side::Baseline])
}

/// The order of interleaved measurements of any number of targets: forwards in even rounds,
/// backwards in odd ones (A, B, C, C, B, A, …), so a slow drift of the machine hits each
/// target alike and no target always runs right after the same other one.
pub fn interleave<T: Copy>(rounds: usize, targets: &[T]) -> Vec<(usize, T)> {
    (0..rounds)
        .flat_map(|r| {
            let round: Vec<(usize, T)> = targets.iter().map(|t| (r, *t)).collect();
            if r % 2 == 0 { round } else { round.into_iter().rev().collect() }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Gateway,
    Baseline,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_interleaves() {
        let s: Vec<Side> = schedule(2).into_iter().map(|x| x.1).collect();
        assert_eq!(s, [Side::Gateway, Side::Baseline, Side::Baseline, Side::Gateway]);
        let three: Vec<(usize, char)> = interleave(3, &['a', 'b', 'c']);
        let order: String = three.iter().map(|x| x.1).collect();
        assert_eq!(order, "abccbaabc");
        assert_eq!(three.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 0, 0, 1, 1, 1, 2, 2, 2]);
    }

    #[tokio::test]
    async fn open_loop_counts_from_the_due_time_and_times_out() {
        let t = open_loop(100.0, Duration::from_millis(100), Duration::from_millis(50), |i| async move {
            if i == 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if i == 1 { Outcome::Refused("busy".into()) } else { Outcome::Ok }
        })
        .await;
        assert_eq!(t.offered, 10);
        assert_eq!((t.ok.len(), t.refused.len(), t.timeouts), (8, 1, 1));
        assert_eq!(t.errors.get("busy"), Some(&1));
    }

    #[tokio::test]
    async fn closed_loop_runs_its_clients_for_the_window() {
        let t = closed_loop(4, Duration::from_millis(50), Duration::from_secs(1), |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Outcome::Ok
        })
        .await;
        assert!(t.ok.len() >= 20, "{}", t.ok.len());
        assert!(t.throughput() > 0.0);
    }
}
