//! Process metrics, exported by the server at `/metrics` in the OpenMetrics text format
//! (which Prometheus scrapes), on `prometheus-client`.
//!
//! One [`Metrics`] value per process, made by whoever assembles it and passed to every part
//! that measures (no global recorder: tests run several gateways in one process). Every
//! series is declared here with its help text, so this file and `docs/ops/metrics.md` are
//! the whole catalogue. Labels take values from closed sets only (backend kinds, outcomes,
//! route templates, status classes): never a session, run or task id, so the number of series
//! is bounded whatever clients send.
//!
//! Hot paths pay one atomic add (counters, gauges) or one short lock (a histogram's
//! observation, a family's lookup); gauges that need a query (the outbox, environments) are
//! refreshed when `/metrics` is scraped (`gateway_runtime::Coordinator::refresh_metrics`), so a
//! gateway nobody scrapes does not pay for them.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use gateway_store::{OutboxStats, QueueStats, RunOutcome, StoreMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use gateway_core::admission::BusyCause;

/// Fast operations (an HTTP answer, a delivery, the first event of a turn): 1 ms to 60 s.
const FAST_BUCKETS: [f64; 15] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Slow operations (a turn, a model request, a remote agent's answer): 50 ms to 30 min.
const SLOW_BUCKETS: [f64; 14] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];

/// A float gauge (seconds, cores).
type FloatGauge = Gauge<f64, AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn fast() -> Histogram {
    Histogram::new(FAST_BUCKETS)
}

fn slow() -> Histogram {
    Histogram::new(SLOW_BUCKETS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// An agent (by name) and the configured model that served it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentModel {
    agent: String,
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentModelKind {
    agent: String,
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendOutcome {
    backend: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelOutcome {
    channel: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    face: &'static str,
    method: &'static str,
    /// The route's template (`/v1/sessions/{id}`), never the path itself.
    route: String,
    status: &'static str,
}

/// What became of one outbound delivery attempt (`gateway_runtime::Coordinator::settle_delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle<'a> {
    /// The receiver took it.
    Delivered,
    /// It failed and is tried again no earlier than `after`.
    Retry { after: Duration, error: &'a str },
    /// It failed for good (refused, endpoint gone or disabled, out of attempts).
    Failed { error: &'a str },
}

impl Settle<'_> {
    fn as_str(&self) -> &'static str {
        match self {
            Settle::Delivered => "delivered",
            Settle::Retry { .. } => "retry",
            Settle::Failed { .. } => "failed",
        }
    }
}

/// A registry that remembers the names it was given.
struct Named<'a> {
    registry: &'a mut Registry,
    names: &'a mut Vec<&'static str>,
}

impl Named<'_> {
    fn add(&mut self, name: &'static str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.names.push(name);
        self.registry.register(name, help, metric);
    }
}

/// Every series of one process.
pub struct Metrics {
    registry: Registry,
    names: Vec<&'static str>,
    pub runs_claimed: Counter,
    /// Claims taken by an admission of this process and handed to its Workers.
    pub runs_handed_off: Counter,
    /// Claims that took a run over from a holder whose lease expired.
    pub runs_reclaimed: Counter,
    pub runs_fenced: Counter,
    pub runs_released: Counter,
    settled: Family<OutcomeLabel, Counter>,
    refused: Family<CauseLabel, Counter>,
    pub turns_running: Gauge,
    pub subscriptions_open: Gauge,
    /// Editors connected over ACP (stdio or WebSocket).
    pub editor_connections: Gauge,
    runs_queued: Gauge,
    runs_oldest_queued: FloatGauge,
    lateness: FloatGauge,
    cpu: FloatGauge,
    outbox_pending: Gauge,
    outbox_oldest: FloatGauge,
    environments: Family<StateLabel, Gauge>,
    requests: Histograms<RequestLabels>,
    turns: Histograms<BackendOutcome>,
    first_event: Histograms<BackendLabel>,
    model_requests: Histograms<OutcomeLabel>,
    model_tokens: Family<AgentModelKind, Counter>,
    model_cost: Family<AgentModel, Counter<f64, std::sync::atomic::AtomicU64>>,
    remote_calls: Histograms<BackendOutcome>,
    deliveries: Histograms<ChannelOutcome>,
    /// The store's own series (commits), registered here.
    store: StoreMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(StoreMetrics::default())
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The process's series, the store's (whose handles the store was opened with) among them.
    pub fn new(store: StoreMetrics) -> Self {
        let mut m = Self {
            registry: Registry::default(),
            names: Vec::new(),
            runs_claimed: Counter::default(),
            runs_handed_off: Counter::default(),
            runs_reclaimed: Counter::default(),
            runs_fenced: Counter::default(),
            runs_released: Counter::default(),
            settled: Family::default(),
            refused: Family::default(),
            turns_running: Gauge::default(),
            subscriptions_open: Gauge::default(),
            editor_connections: Gauge::default(),
            runs_queued: Gauge::default(),
            runs_oldest_queued: FloatGauge::default(),
            lateness: FloatGauge::default(),
            cpu: FloatGauge::default(),
            outbox_pending: Gauge::default(),
            outbox_oldest: FloatGauge::default(),
            environments: Family::default(),
            requests: Family::new_with_constructor(fast),
            turns: Family::new_with_constructor(slow),
            first_event: Family::new_with_constructor(fast),
            model_requests: Family::new_with_constructor(slow),
            model_tokens: Family::default(),
            model_cost: Family::default(),
            remote_calls: Family::new_with_constructor(slow),
            deliveries: Family::new_with_constructor(fast),
            store,
        };
        // Series that should read 0 rather than be absent before their first event.
        for outcome in OUTCOMES {
            let _ = m.settled.get_or_create(&OutcomeLabel { outcome });
        }
        for cause in BUSY_CAUSES {
            let _ = m.refused.get_or_create(&CauseLabel { cause: cause.as_str() });
        }
        for state in ["in_use", "idle"] {
            let _ = m.environments.get_or_create(&StateLabel { state });
        }
        m.register_all();
        m
    }

    /// The names of every family registered (a family with no observation yet is absent
    /// from the exposition, so this is where to read what exists).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    fn register_all(&mut self) {
        let mut r = Named { registry: &mut self.registry, names: &mut self.names };
        r.add("gateway_runs_claimed", "Runs claimed by this process's Workers", self.runs_claimed.clone());
        r.add(
            "gateway_runs_handed_off",
            "Of the claimed runs, those claimed by the admission that queued them (one commit for both)",
            self.runs_handed_off.clone(),
        );
        r.add(
            "gateway_runs_reclaimed",
            "Claims that took over a run whose previous holder lost its lease (lease takeovers)",
            self.runs_reclaimed.clone(),
        );
        r.add("gateway_runs_fenced", "Writes refused because the lease epoch moved on", self.runs_fenced.clone());
        r.add("gateway_runs_released", "Runs handed back at shutdown", self.runs_released.clone());
        r.add("gateway_runs_settled", "Runs settled, by outcome", self.settled.clone());
        r.add("gateway_admissions_refused", "Work refused as busy, by the bound reached", self.refused.clone());
        r.add("gateway_turns_running", "Turns executing in this process", self.turns_running.clone());
        r.add(
            "gateway_subscriptions_open",
            "Open event subscriptions (streams) in this process, every face",
            self.subscriptions_open.clone(),
        );
        r.add(
            "gateway_editor_connections",
            "Editors connected to this process over ACP (stdio or WebSocket)",
            self.editor_connections.clone(),
        );
        r.add(
            "gateway_runs_queued",
            "Runs waiting to be claimed (every process), as last sampled by admission",
            self.runs_queued.clone(),
        );
        r.add(
            "gateway_runs_oldest_queued_seconds",
            "How long the oldest claimable run has waited (every process), as last sampled by admission",
            self.runs_oldest_queued.clone(),
        );
        r.add(
            "gateway_admission_lateness_seconds",
            "How late the process's tasks or its store's writes run (moving average), as last sampled by admission: past admission.max_lag_ms while the process is busy, new turns are refused",
            self.lateness.clone(),
        );
        r.add(
            "gateway_process_cpu_cores",
            "The CPU this process uses (moving average, in cores), as last sampled by admission: lateness counts as overload only from half a core",
            self.cpu.clone(),
        );
        r.add(
            "gateway_outbox_pending",
            "Outbound deliveries (webhooks, A2A push) not yet made nor given up on, every process",
            self.outbox_pending.clone(),
        );
        r.add(
            "gateway_outbox_oldest_pending_seconds",
            "How long the oldest pending delivery has waited since it was enqueued",
            self.outbox_oldest.clone(),
        );
        r.add(
            "gateway_environments",
            "Session environments live in this process: in_use (a command or turn holds it) or idle",
            self.environments.clone(),
        );
        r.add(
            "gateway_http_request_duration_seconds",
            "Time to answer an HTTP request (to the response head; a stream counts until it opens), by face, method, route template and status class",
            self.requests.clone(),
        );
        r.add(
            "gateway_turn_duration_seconds",
            "Time from a turn's start in a Worker to its end, by backend kind and outcome",
            self.turns.clone(),
        );
        r.add(
            "gateway_turn_first_event_seconds",
            "Time from a turn's start to the first event a client can see (a streamed preview or a committed event), by backend kind",
            self.first_event.clone(),
        );
        r.add(
            "gateway_model_request_duration_seconds",
            "Time one model API request took (whole streamed response), by outcome: ok or the error kind",
            self.model_requests.clone(),
        );
        r.add(
            "gateway_model_tokens",
            "Tokens of the model requests native agents made, by agent, configured model and kind (input, output, cache_read, cache_write)",
            self.model_tokens.clone(),
        );
        r.add(
            "gateway_model_list_cost_usd",
            "List cost in US dollars of the model requests native agents made, by agent and configured model (models with list prices only)",
            self.model_cost.clone(),
        );
        r.add(
            "gateway_remote_call_duration_seconds",
            "Time one call to a remote agent took (an ACP agent's prompt, an outbound A2A message until its answer), by backend kind and outcome: ok or the error kind",
            self.remote_calls.clone(),
        );
        r.add(
            "gateway_delivery_duration_seconds",
            "Time one outbound delivery attempt took, by channel (webhook, a2a_push) and outcome (delivered, retry, failed)",
            self.deliveries.clone(),
        );
        self.store.register(r.registry);
        self.names.extend(StoreMetrics::NAMES);
    }

    pub fn settled(&self, outcome: &RunOutcome) {
        self.settled.get_or_create(&OutcomeLabel { outcome: outcome_name(outcome) }).inc();
    }

    pub fn refused(&self, cause: BusyCause) {
        self.refused.get_or_create(&CauseLabel { cause: cause.as_str() }).inc();
    }

    /// What admission last read of the run queue and the process's lateness.
    pub fn sampled(&self, queue: Option<QueueStats>, lateness: Duration, cpu_cores: f64) {
        if let Some(q) = queue {
            self.runs_queued.set(i64::try_from(q.queued).unwrap_or(i64::MAX));
            self.runs_oldest_queued.set(q.oldest_wait.as_secs_f64());
        }
        self.lateness.set(lateness.as_secs_f64());
        self.cpu.set(cpu_cores);
    }

    /// The outbox as last read.
    pub fn outbox(&self, stats: OutboxStats) {
        self.outbox_pending.set(i64::try_from(stats.pending).unwrap_or(i64::MAX));
        self.outbox_oldest.set(stats.oldest_age.as_secs_f64());
    }

    /// The live environments of this process as last counted.
    pub fn environments(&self, in_use: usize, idle: usize) {
        self.environments.get_or_create(&StateLabel { state: "in_use" }).set(in_use as i64);
        self.environments.get_or_create(&StateLabel { state: "idle" }).set(idle as i64);
    }

    /// One HTTP request answered. `face` names the adapter that served it; `route` is the
    /// matched route template (`None`: nothing matched, recorded as `unmatched`).
    pub fn request(&self, face: &'static str, method: &http::Method, route: Option<&str>, status: u16, took: Duration) {
        let labels = RequestLabels {
            face,
            method: method_name(method),
            route: route.unwrap_or("unmatched").to_owned(),
            status: status_class(status),
        };
        self.requests.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// One turn ended (`outcome`: a settled outcome's name, `released` or `abandoned`).
    pub fn turn(&self, backend: &'static str, outcome: &'static str, took: Duration) {
        self.turns.get_or_create(&BackendOutcome { backend, outcome }).observe(took.as_secs_f64());
    }

    /// The first event a client could see of a turn, `took` after it started.
    pub fn first_event(&self, backend: &'static str, took: Duration) {
        self.first_event.get_or_create(&BackendLabel { backend }).observe(took.as_secs_f64());
    }

    /// One model request (`outcome`: `ok` or the error's kind).
    pub fn model_request(&self, outcome: &'static str, took: Duration) {
        self.model_requests.get_or_create(&OutcomeLabel { outcome }).observe(took.as_secs_f64());
    }

    /// What one model request of `agent` served by the configured model `model` used.
    pub fn model_usage(&self, agent: &str, model: &str, usage: &gateway_core::event::Usage) {
        let kinds = [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_input_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
        ];
        for (kind, n) in kinds {
            let label = AgentModelKind { agent: agent.to_owned(), model: model.to_owned(), kind };
            self.model_tokens.get_or_create(&label).inc_by(n);
        }
        if usage.unpriced_requests == 0 {
            let label = AgentModel { agent: agent.to_owned(), model: model.to_owned() };
            self.model_cost.get_or_create(&label).inc_by(usage.list_cost_micros as f64 / 1e6);
        }
    }

    /// One call to a remote agent by a backend of kind `backend` (`outcome`: `ok` or the
    /// error's kind).
    pub fn remote_call(&self, backend: &'static str, outcome: &'static str, took: Duration) {
        self.remote_calls.get_or_create(&BackendOutcome { backend, outcome }).observe(took.as_secs_f64());
    }

    /// One outbound delivery attempt on `channel` (`webhook`, `a2a_push`).
    pub fn delivery(&self, channel: &'static str, outcome: &Settle<'_>, took: Duration) {
        self.deliveries
            .get_or_create(&ChannelOutcome { channel, outcome: outcome.as_str() })
            .observe(took.as_secs_f64());
    }

    /// The OpenMetrics text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Counts one in a gauge for as long as it lives (a stream, a turn, a connection), so one
/// that panics or is dropped mid-way still leaves it.
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    pub fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const OUTCOMES: [&str; 7] = ["completed", "parked", "cancelled", "failed", "terminated", "indeterminate", "retry"];

/// The name a settled outcome is counted under (one of [`OUTCOMES`]).
pub fn outcome_name(o: &RunOutcome) -> &'static str {
    match o {
        RunOutcome::Completed => OUTCOMES[0],
        RunOutcome::Parked { .. } => OUTCOMES[1],
        RunOutcome::Cancelled => OUTCOMES[2],
        RunOutcome::Failed => OUTCOMES[3],
        RunOutcome::Terminated => OUTCOMES[4],
        RunOutcome::Indeterminate => OUTCOMES[5],
        RunOutcome::Retry { .. } => OUTCOMES[6],
    }
}

const BUSY_CAUSES: [BusyCause; 4] =
    [BusyCause::Requests, BusyCause::QueuedRuns, BusyCause::QueueWait, BusyCause::Saturated];

/// Standard methods by name; anything else (extension methods are any token) as `OTHER`,
/// so a client cannot mint series.
fn method_name(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::DELETE => "DELETE",
        http::Method::PATCH => "PATCH",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of one series line (name with its labels, as exposed).
    fn value(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line[series.len() + 1..].parse().unwrap()
    }

    #[test]
    fn renders_counters_gauges_and_histograms_in_openmetrics_text() {
        let m = Metrics::default();
        m.runs_claimed.inc_by(3);
        m.settled(&RunOutcome::Completed);
        m.settled(&RunOutcome::Retry { after: Duration::from_secs(1) });
        m.turn("native", "completed", Duration::from_millis(1200));
        m.request("a2a", &http::Method::from_bytes(b"BREW").unwrap(), None, 404, Duration::from_millis(3));
        let text = m.render();
        assert_eq!(value(&text, "gateway_runs_claimed_total"), 3.0);
        assert_eq!(value(&text, "gateway_runs_settled_total{outcome=\"completed\"}"), 1.0);
        assert_eq!(value(&text, "gateway_runs_settled_total{outcome=\"retry\"}"), 1.0);
        assert_eq!(value(&text, "gateway_runs_settled_total{outcome=\"failed\"}"), 0.0, "present before the first");
        assert!(text.contains("# TYPE gateway_turns_running gauge"));
        // 1.2 s is above the 1 s bucket and within the 2.5 s one.
        let bucket = |le: &str| {
            value(
                &text,
                &format!(
                    "gateway_turn_duration_seconds_bucket{{le=\"{le}\",backend=\"native\",outcome=\"completed\"}}"
                ),
            )
        };
        assert_eq!((bucket("1.0"), bucket("2.5")), (0.0, 1.0), "{text}");
        assert_eq!(
            value(
                &text,
                "gateway_http_request_duration_seconds_count{face=\"a2a\",method=\"OTHER\",route=\"unmatched\",status=\"4xx\"}"
            ),
            1.0
        );
        assert!(text.contains("# TYPE gateway_store_commit_duration_seconds histogram"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
