//! Process metrics, exported by the server at `/metrics` in the Prometheus text format.
//!
//! Plain atomic counters and gauges: the hot paths (claims, settlements, subscriptions) pay
//! one relaxed atomic add each, and no metrics library is needed for a handful of series.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use gateway_store::RunOutcome;

use crate::load::BusyCause;

#[derive(Debug, Default)]
pub struct Metrics {
    pub runs_claimed: AtomicU64,
    pub runs_reclaimed: AtomicU64,
    /// Claims taken by an admission of this process and handed to its Workers.
    pub runs_handed_off: AtomicU64,
    pub runs_fenced: AtomicU64,
    pub runs_released: AtomicU64,
    pub turns_running: AtomicI64,
    pub subscriptions_open: AtomicI64,
    /// Runs waiting to be claimed, as last sampled by the admission bound.
    pub runs_queued: AtomicI64,
    /// How late the process or its store runs (microseconds), as last sampled by admission.
    pub lateness_us: AtomicU64,
    /// The CPU the process uses (thousandths of a core), as last sampled by admission.
    pub cpu_milli: AtomicU64,
    settled: [AtomicU64; 7],
    refused: [AtomicU64; BUSY_CAUSES.len()],
}

const OUTCOMES: [&str; 7] = ["completed", "parked", "cancelled", "failed", "terminated", "indeterminate", "retry"];

fn outcome_index(o: &RunOutcome) -> usize {
    match o {
        RunOutcome::Completed => 0,
        RunOutcome::Parked { .. } => 1,
        RunOutcome::Cancelled => 2,
        RunOutcome::Failed => 3,
        RunOutcome::Terminated => 4,
        RunOutcome::Indeterminate => 5,
        RunOutcome::Retry { .. } => 6,
    }
}

/// In the order of `refused`'s index.
const BUSY_CAUSES: [BusyCause; 4] =
    [BusyCause::Requests, BusyCause::QueuedRuns, BusyCause::QueueWait, BusyCause::Saturated];

impl Metrics {
    pub fn settled(&self, outcome: &RunOutcome) {
        self.settled[outcome_index(outcome)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self, cause: BusyCause) {
        // Exhaustive, so a new cause cannot be counted under another's name.
        let i = match cause {
            BusyCause::Requests => 0,
            BusyCause::QueuedRuns => 1,
            BusyCause::QueueWait => 2,
            BusyCause::Saturated => 3,
        };
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            &mut out,
            "gateway_runs_claimed_total",
            "Runs claimed by this process's Workers.",
            self.runs_claimed.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "gateway_runs_handed_off_total",
            "Of the claimed runs, those claimed by the admission that queued them (one commit for both).",
            self.runs_handed_off.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "gateway_runs_reclaimed_total",
            "Claims that took over a run whose previous holder lost its lease.",
            self.runs_reclaimed.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "gateway_runs_fenced_total",
            "Writes refused because the lease epoch moved on.",
            self.runs_fenced.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "gateway_runs_released_total",
            "Runs handed back at shutdown.",
            self.runs_released.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP gateway_runs_settled_total Runs settled, by outcome.\n# TYPE gateway_runs_settled_total counter"
        );
        for (i, name) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "gateway_runs_settled_total{{outcome=\"{name}\"}} {}",
                self.settled[i].load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP gateway_admissions_refused_total Work refused as busy, by the bound reached.\n# TYPE gateway_admissions_refused_total counter"
        );
        for (i, cause) in BUSY_CAUSES.iter().enumerate() {
            let _ = writeln!(
                out,
                "gateway_admissions_refused_total{{cause=\"{}\"}} {}",
                cause.as_str(),
                self.refused[i].load(Ordering::Relaxed)
            );
        }
        gauge(
            &mut out,
            "gateway_runs_queued",
            "Runs waiting to be claimed (every process), as last sampled by admission.",
            self.runs_queued.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "gateway_admission_lateness_seconds",
            "How late the process's tasks or its store's writes run (moving average), as last sampled by admission: past admission.max_lag_ms while the process is busy, new turns are refused.",
            self.lateness_us.load(Ordering::Relaxed) as f64 / 1e6,
        );
        gauge(
            &mut out,
            "gateway_process_cpu_cores",
            "The CPU this process uses (moving average, in cores), as last sampled by admission: lateness counts as overload only from half a core.",
            self.cpu_milli.load(Ordering::Relaxed) as f64 / 1e3,
        );
        gauge(
            &mut out,
            "gateway_turns_running",
            "Turns executing in this process.",
            self.turns_running.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "gateway_subscriptions_open",
            "Open event subscriptions (streams) in this process.",
            self.subscriptions_open.load(Ordering::Relaxed),
        );
        out
    }
}

/// One gauge series, integer or fractional.
fn gauge(out: &mut String, name: &str, help: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.runs_claimed.fetch_add(3, Ordering::Relaxed);
        m.settled(&RunOutcome::Completed);
        m.settled(&RunOutcome::Retry { after: std::time::Duration::from_secs(1) });
        let text = m.render();
        assert!(text.contains("gateway_runs_claimed_total 3\n"), "{text}");
        assert!(text.contains("gateway_runs_settled_total{outcome=\"completed\"} 1\n"));
        assert!(text.contains("gateway_runs_settled_total{outcome=\"retry\"} 1\n"));
        assert!(text.contains("# TYPE gateway_turns_running gauge"));
    }
}
