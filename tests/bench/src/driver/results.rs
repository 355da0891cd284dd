//! What a run measured, as written to the JSON results file and read by the report and the
//! plots. Everything is plain data; ratios are computed here once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::engine::Engine;
use super::load::{Side, Tally};
use super::stats::Summary;

/// One side of a comparison (or a single measurement), merged over its segments.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Figures {
    pub offered: u64,
    /// Offered rate (open loop), requests/s.
    pub offered_rate: Option<f64>,
    pub ok: u64,
    /// Answered with an error.
    pub refused: u64,
    /// No usable answer.
    pub broken: u64,
    pub timeouts: u64,
    pub errors: BTreeMap<String, u64>,
    pub seconds: f64,
    /// Completed requests per second of measured time (open loop: per second of offering,
    /// i.e. the completed share times the offered rate).
    pub throughput: f64,
    /// Open loop: successes completed during the offering window, per second of it.
    pub goodput_in_window: Option<f64>,
    pub latency: Summary,
    pub refused_latency: Summary,
    /// Server CPU milliseconds per completed request.
    pub cpu_ms_per_op: Option<f64>,
    /// Server CPU use over the measured time, in cores.
    pub cpu_cores: Option<f64>,
}

impl Figures {
    pub fn from_tally(t: &Tally, offered_rate: Option<f64>, measured_cpu: bool) -> Self {
        let ok = t.ok.len();
        let cpu_ms = t.cpu.as_secs_f64() * 1000.0;
        Figures {
            offered: t.offered,
            offered_rate,
            ok,
            refused: t.refused.len(),
            broken: t.broken,
            timeouts: t.timeouts,
            errors: t.errors.clone(),
            seconds: t.seconds,
            throughput: t.throughput(),
            goodput_in_window: (offered_rate.is_some() && t.seconds > 0.0).then(|| t.ok_in_window as f64 / t.seconds),
            latency: t.ok.summary(),
            refused_latency: t.refused.summary(),
            cpu_ms_per_op: (measured_cpu && ok > 0).then(|| cpu_ms / ok as f64),
            cpu_cores: (measured_cpu && t.seconds > 0.0).then(|| cpu_ms / 1000.0 / t.seconds),
        }
    }

    /// Completed share of what was offered.
    pub fn completed_share(&self) -> f64 {
        if self.offered > 0 { self.ok as f64 / self.offered as f64 } else { 0.0 }
    }

    /// Server CPU milliseconds over the whole measurement.
    pub fn cpu_ms(&self) -> Option<f64> {
        Some(self.cpu_cores? * self.seconds * 1000.0)
    }

    /// Goodput (open loop: during the offering) as a share of `capacity` requests/s.
    pub fn goodput_share(&self, capacity: f64) -> Option<f64> {
        ratio(self.goodput_in_window.unwrap_or(self.throughput), capacity)
    }
}

/// What refusing costs under overload, as a share of what serving costs, as a residual: the
/// server CPU of the overload segments beyond what their completed requests cost at
/// `served_ms` each (the CPU per request served at saturation), per refused request, divided
/// by `served_ms`. `None` without a refusal or a CPU figure. Negative when serving got cheaper
/// under load; noisy, since serving under overload does not cost what it did at saturation and
/// the difference lands on the refusals. [`RefusalCost`] measures the same directly.
pub fn residual_refusal_cpu_share(overload: &Figures, served_ms: f64) -> Option<f64> {
    let total = overload.cpu_ms()?;
    if overload.refused == 0 || served_ms <= 0.0 {
        return None;
    }
    Some((total - overload.ok as f64 * served_ms) / overload.refused as f64 / served_ms)
}

/// The label the A2A client counts a 503 answer under (`A2aClient::send`): the gateway's busy
/// answer.
pub const BUSY_ANSWER: &str = "http 503";

/// What a refusal costs, measured directly: fresh gateways configured to refuse every message
/// that would start a turn (`[admission] max_queued_runs = 0`, refused by the same check as a
/// saturated gateway's refusals), offered the overload step's rate for its window against the
/// instant remote. Nothing is served, so nothing has to be subtracted: the gateway's CPU over
/// the segments divided by the refusals is the CPU per refusal (with the process's idle work
/// over the window, a few background probes, charged to them too).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RefusalCost {
    /// The refusal segments, merged.
    pub figures: Figures,
    /// Requests answered with an error.
    pub refused: u64,
    /// The gateway's CPU over the segments, ms.
    pub cpu_ms: Option<f64>,
    /// `cpu_ms / refused`; `None` when a message was accepted or none refused (see `notes`).
    pub cpu_ms_per_refusal: Option<f64>,
    /// The gateway's CPU per message served at saturation, ms: what a refusal is compared with.
    pub served_cpu_ms: Option<f64>,
    /// `cpu_ms_per_refusal / served_cpu_ms`.
    pub share_of_served: Option<f64>,
    /// Why there is no figure, or what besides busy answers the CPU was spent on.
    pub notes: Vec<String>,
}

impl RefusalCost {
    /// The figures of the refusal segments against `served_cpu_ms`, the CPU per message served
    /// at saturation. A segment that accepted anything measured more than refusals, and one
    /// that refused nothing measured nothing: neither gives a figure, each says so in a note.
    pub fn measure(figures: Figures, served_cpu_ms: Option<f64>) -> Self {
        let cpu_ms = figures.cpu_ms();
        let mut notes = Vec::new();
        if figures.ok > 0 {
            notes.push(format!(
                "the gateway meant to refuse every turn accepted {} of {} messages: its CPU is not the refusals' alone, no figure",
                figures.ok, figures.offered
            ));
        }
        if figures.refused == 0 {
            notes
                .push(format!("the gateway meant to refuse every turn refused none of {}: no figure", figures.offered));
        }
        let other: Vec<String> =
            figures.errors.iter().filter(|(k, _)| *k != BUSY_ANSWER).map(|(k, n)| format!("{n} × {k}")).collect();
        if !other.is_empty() && figures.refused > 0 {
            notes.push(format!(
                "besides busy ({BUSY_ANSWER}) answers: {}; their CPU is charged to the refusals",
                other.join(", ")
            ));
        }
        let per = cpu_ms.filter(|_| figures.ok == 0 && figures.refused > 0).map(|ms| ms / figures.refused as f64);
        let share = per.zip(served_cpu_ms.filter(|s| *s > 0.0)).map(|(p, s)| p / s);
        RefusalCost {
            refused: figures.refused,
            cpu_ms,
            cpu_ms_per_refusal: per,
            served_cpu_ms,
            share_of_served: share,
            notes,
            figures,
        }
    }
}

/// One measured segment, for the spread between rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Segment {
    pub round: usize,
    pub side: Side,
    pub throughput: f64,
    pub p50_ms: f64,
    pub ok: u64,
    pub errors: u64,
    /// How long the server took to go idle afterwards (`None`: it did not within the cap).
    pub settle_s: Option<f64>,
}

/// Gateway against its baseline, measured interleaved in one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub scenario: String,
    pub engine: Engine,
    pub gateway: Figures,
    pub baseline: Figures,
    pub segments: Vec<Segment>,
    pub notes: Vec<String>,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite()).then(|| a / b)
}

impl Comparison {
    pub fn throughput_ratio(&self) -> Option<f64> {
        ratio(self.gateway.throughput, self.baseline.throughput)
    }
    pub fn p50_ratio(&self) -> Option<f64> {
        ratio(self.gateway.latency.p50_ms, self.baseline.latency.p50_ms)
    }
    pub fn cpu_ratio(&self) -> Option<f64> {
        ratio(self.gateway.cpu_ms_per_op?, self.baseline.cpu_ms_per_op?)
    }
    pub fn completed_ratio(&self) -> Option<f64> {
        ratio(self.gateway.ok as f64, self.baseline.ok as f64)
    }
}

/// Scenario (b) on one engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct A2aResults {
    pub engine: Engine,
    pub remote_delay_ms: u64,
    pub open_loop: Vec<Comparison>,
    pub saturation: Option<Comparison>,
    /// Open loop against the instant remote, offered half the gateway's saturation
    /// throughput: a tail the 1 s remote of `open_loop` would hide shows here.
    pub instant_half_load: Option<Comparison>,
    /// The gateway offered twice its measured saturation throughput.
    pub overload: Option<Figures>,
    /// Saturation against the durable A2A baseline (`bench-a2a-durable`, always on SQLite):
    /// the same gateway segments as `saturation`, interleaved gateway, durable, direct.
    #[serde(default)]
    pub saturation_durable: Option<Comparison>,
    /// The durable A2A baseline offered twice its own saturation throughput.
    #[serde(default)]
    pub overload_durable: Option<Figures>,
    /// A gateway refusing every turn, offered what `overload` was: the CPU per refusal,
    /// measured directly. Absent from results written before it existed.
    #[serde(default)]
    pub refusal: Option<RefusalCost>,
    pub notes: Vec<String>,
}

impl A2aResults {
    /// The gateway's CPU per refused request under overload, as a share of its CPU per
    /// request served at saturation, as the residual of [`residual_refusal_cpu_share`].
    /// `refusal` has the direct figure.
    pub fn residual_refusal_cpu_share(&self) -> Option<f64> {
        residual_refusal_cpu_share(self.overload.as_ref()?, self.saturation.as_ref()?.gateway.cpu_ms_per_op?)
    }

    /// The same residual for the durable A2A baseline, against its own saturation.
    pub fn durable_residual_refusal_cpu_share(&self) -> Option<f64> {
        residual_refusal_cpu_share(
            self.overload_durable.as_ref()?,
            self.saturation_durable.as_ref()?.baseline.cpu_ms_per_op?,
        )
    }
}

/// One segment of scenario (g).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessSegment {
    pub round: usize,
    /// Gateway processes the load went to: 1 or 2.
    pub processes: usize,
    pub throughput: f64,
    pub p50_ms: f64,
    pub ok: u64,
    pub errors: u64,
}

/// Scenario (g), PostgreSQL only: (b)'s saturation load (closed loop, instant remote) on one
/// gateway process with a fresh database, and split across two processes on one fresh
/// database, interleaved round by round. The CPU figures of `two` are both processes' summed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessesResults {
    pub engine: Engine,
    /// Closed-loop connections; with two processes, half go to each.
    pub connections: u64,
    pub text_bytes: u64,
    pub one: Figures,
    pub two: Figures,
    pub segments: Vec<ProcessSegment>,
}

impl ProcessesResults {
    /// Messages/s of two processes over one.
    pub fn throughput_ratio(&self) -> Option<f64> {
        ratio(self.two.throughput, self.one.throughput)
    }
}

/// Scenario (f): previews of one turn, seen by a subscriber on the process that runs it (B)
/// and by one on another process of the same database (A). Deltas are matched by event id
/// and text (the k-th delta of a text in an event at A is the k-th at B).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PreviewResults {
    pub engine: Option<Engine>,
    pub trials_wanted: u64,
    /// Trials that ran to the end: both subscribers saw the turn go idle.
    pub trials: u64,
    /// Deltas per turn, and the model's pause between them.
    pub words: u64,
    pub drip_ms: u64,
    /// Deltas B's subscriber received, and how many of those A's received too.
    pub deltas_local: u64,
    pub deltas_relayed: u64,
    /// Arrival at A minus arrival at B, per delta both received (a delta A got first counts 0).
    pub added: Summary,
    /// How long before the committed `agent.message` A's first delta arrived, per trial in
    /// which it came first.
    pub lead: Summary,
    /// Trials in which A's first delta arrived before the committed message.
    pub early_trials: u64,
    pub errors: BTreeMap<String, u64>,
    pub notes: Vec<String>,
}

impl PreviewResults {
    /// The share of B's deltas A received (previews are best effort).
    pub fn relayed_share(&self) -> Option<f64> {
        ratio(self.deltas_relayed as f64, self.deltas_local as f64)
    }

    /// The share of the trials run in which A's first delta beat the committed message (a
    /// trial that failed is one in which it did not).
    pub fn early_share(&self) -> Option<f64> {
        ratio(self.early_trials as f64, self.trials_wanted as f64)
    }
}

/// Scenario (d).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FsyncResults {
    pub sqlite: Summary,
    pub postgres: Option<Summary>,
    pub dir: String,
}

/// Scenario (e) on one engine; memory in KiB.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryResults {
    pub engine: Option<Engine>,
    pub rss_ready_kib: u64,
    pub sessions: u64,
    pub rss_sessions_kib: u64,
    pub subscribers_wanted: u64,
    pub subscribers: u64,
    pub rss_subscribed_kib: u64,
    pub kib_per_subscriber: f64,
    /// Gateway CPU use (cores) while the subscribers sat idle.
    pub idle_cpu_cores: f64,
    pub rss_unsubscribed_kib: u64,
    pub parked_wanted: u64,
    pub parked: u64,
    pub park_errors: BTreeMap<String, u64>,
    /// A fresh gateway process on the same database, before any session parks.
    pub rss_before_parked_kib: u64,
    pub rss_parked_kib: u64,
    pub kib_per_parked: f64,
    /// bench-durable with the same subscribers, for reference.
    pub baseline_rss_ready_kib: u64,
    pub baseline_rss_subscribed_kib: u64,
    pub baseline_subscribers: u64,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub memory: String,
    pub work_dir: String,
    pub disk: String,
    pub postgres: Option<String>,
    pub nofile_limit: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub started: String,
    pub finished: String,
    pub quick: bool,
    pub rounds: usize,
    pub gateway_binary: String,
    pub gateway_version: String,
    /// When the measured binary was built (its modification time).
    pub gateway_built: String,
    /// `/proc/loadavg` when the run started and ended: other work on the machine shows here.
    pub load_start: String,
    pub load_end: String,
    pub git: Option<String>,
    pub command: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub meta: Meta,
    pub machine: Machine,
    pub fsync: Option<FsyncResults>,
    pub managed_agents: Vec<Comparison>,
    pub a2a: Vec<A2aResults>,
    pub acp: Vec<Comparison>,
    pub memory: Vec<MemoryResults>,
    pub previews: Option<PreviewResults>,
    /// Scenario (g); absent from results written before it existed.
    #[serde(default)]
    pub processes: Option<ProcessesResults>,
    /// Scenarios that could not run, and why.
    pub failures: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overload(ok: u64, refused: u64, cpu_ms: Option<f64>) -> Figures {
        Figures { ok, refused, seconds: 2.0, cpu_cores: cpu_ms.map(|ms| ms / 1000.0 / 2.0), ..Figures::default() }
    }

    #[test]
    fn a_refusal_costs_what_the_overload_spent_beyond_its_served_requests() {
        // (ok, refused, CPU ms of the overload, CPU ms per served request at saturation) → share
        let cases = [
            (100, 100, Some(110.0), 1.0, Some(0.1)),
            (100, 50, Some(100.0), 1.0, Some(0.0)),
            (100, 100, Some(300.0), 1.0, Some(2.0)),
            (100, 10, Some(90.0), 1.0, Some(-1.0)),
            (100, 0, Some(100.0), 1.0, None),
            (100, 10, None, 1.0, None),
            (100, 10, Some(100.0), 0.0, None),
        ];
        for (ok, refused, cpu, served, want) in cases {
            let got = residual_refusal_cpu_share(&overload(ok, refused, cpu), served);
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9, "{ok} {refused} {cpu:?}: {g} != {w}"),
                _ => assert_eq!(got, want, "{ok} {refused} {cpu:?}"),
            }
        }
    }

    #[test]
    fn results_without_the_durable_a2a_baseline_still_read() {
        let old = r#"{"engine": "sqlite", "remote_delay_ms": 1000, "open_loop": [], "saturation": null,
            "instant_half_load": null, "overload": null, "notes": []}"#;
        let a: A2aResults = serde_json::from_str(old).unwrap();
        assert!(a.saturation_durable.is_none() && a.overload_durable.is_none());
        assert_eq!(a.residual_refusal_cpu_share(), None);
    }

    #[test]
    fn a_refusal_costs_the_refusing_gateways_cpu_over_its_refusals() {
        // (ok, refused, other errors, CPU ms, CPU ms per served message)
        //   → (CPU ms per refusal, share of a served one, notes)
        let cases = [
            (0, 200, 0, Some(20.0), Some(1.0), Some(0.1), Some(0.1), 0),
            (0, 200, 0, Some(20.0), Some(0.5), Some(0.1), Some(0.2), 0),
            (0, 200, 0, Some(20.0), None, Some(0.1), None, 0),
            (0, 200, 0, Some(20.0), Some(0.0), Some(0.1), None, 0),
            (0, 200, 0, None, Some(1.0), None, None, 0),
            // Timeouts or other answers: still divided, but said.
            (0, 200, 3, Some(20.0), Some(1.0), Some(0.1), Some(0.1), 1),
            // Something accepted: no figure, and a note.
            (5, 195, 0, Some(20.0), Some(1.0), None, None, 1),
            // Nothing refused: no figure, and a note.
            (0, 0, 0, Some(20.0), Some(1.0), None, None, 1),
            (0, 0, 200, Some(20.0), Some(1.0), None, None, 1),
        ];
        for (ok, refused, other, cpu, served, per, share, notes) in cases {
            let mut f = overload(ok, refused, cpu);
            f.offered = ok + refused + other;
            if refused > 0 {
                f.errors.insert(BUSY_ANSWER.into(), refused);
            }
            if other > 0 {
                f.errors.insert("timeout".into(), other);
            }
            let c = RefusalCost::measure(f, served);
            let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() < 1e-9,
                _ => a == b,
            };
            let case = format!("{ok} {refused} {other} {cpu:?} {served:?}: {c:?}");
            assert!(close(c.cpu_ms_per_refusal, per) && close(c.share_of_served, share), "{case}");
            assert_eq!((c.refused, c.notes.len()), (refused, notes), "{case}");
            assert!(close(c.cpu_ms, cpu), "{case}");
        }
    }

    #[test]
    fn results_without_the_direct_refusal_measure_still_read() {
        let old = r#"{"engine": "sqlite", "remote_delay_ms": 1000, "open_loop": [], "saturation": null,
            "instant_half_load": null, "overload": null, "saturation_durable": null,
            "overload_durable": null, "notes": []}"#;
        let a: A2aResults = serde_json::from_str(old).unwrap();
        assert!(a.refusal.is_none());
        let mut new = a.clone();
        new.refusal = Some(RefusalCost::measure(overload(0, 100, Some(5.0)), Some(1.0)));
        let json = serde_json::to_value(&new).unwrap();
        for field in ["refused", "cpu_ms", "cpu_ms_per_refusal", "share_of_served"] {
            assert!(json["refusal"].get(field).is_some(), "{field}: {json}");
        }
        let back: A2aResults = serde_json::from_value(json).unwrap();
        let share = back.refusal.and_then(|r| r.share_of_served).unwrap_or_default();
        assert!((share - 0.05).abs() < 1e-9, "{share}");
    }

    #[test]
    fn results_without_the_two_process_row_still_read() {
        let mut old = serde_json::to_value(Results::default()).unwrap();
        assert!(old.as_object_mut().unwrap().remove("processes").is_some());
        let r: Results = serde_json::from_value(old).unwrap();
        assert!(r.processes.is_none());
    }

    #[test]
    fn the_two_process_ratio_is_two_over_one() {
        let figures = |throughput| Figures { throughput, ..Figures::default() };
        let mut p = ProcessesResults {
            engine: Engine::Postgres,
            connections: 32,
            text_bytes: 1024,
            one: figures(400.0),
            two: figures(300.0),
            segments: vec![],
        };
        assert_eq!(p.throughput_ratio(), Some(0.75));
        p.one.throughput = 0.0;
        assert_eq!(p.throughput_ratio(), None);
    }
}
