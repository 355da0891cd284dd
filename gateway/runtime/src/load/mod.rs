//! Load shedding: the bounds on what one process admits, and the one answer beyond them.
//!
//! A gateway that queues without bound under a burst makes everyone wait until their
//! requests time out, the accepted ones included. So admission is bounded twice
//! (DESIGN §3, "Overload is refused"):
//!
//! - **requests in flight**: requests whose response head is not sent yet (bodies being read,
//!   admissions committing, blocking sends waiting for their turn). Each face's router takes
//!   a [`RequestPermit`] before it reads a body; a stream's permit is returned with the
//!   response head, so idle subscribers cost nothing here. One peer address holds at most
//!   `max_requests_per_peer` of them (each HTTP/2 stream is a request, so one connection
//!   carrying hundreds of streams counts them all against its peer), and once authenticated
//!   one key at most `max_requests_per_key` ([`Load::try_key`]): no single client can take
//!   every place, however many connections or addresses it uses.
//! - **request bodies** ([`body`]): the bytes of bodies being read are charged to one budget
//!   for the process, and a body must keep arriving at a minimum rate, so slow uploads can
//!   neither pin the process's memory nor hold their places for ever.
//! - **queued runs**: inputs that would start a turn are refused while more runs wait to be
//!   claimed than `max_queued_runs`, or while the oldest run a Worker could claim has waited
//!   longer than `max_queue_wait_ms` (claims that do not keep up, whatever the reason), both
//!   counted in the store (so across every process on it) and sampled every [`SAMPLE_EVERY`]
//!   by [`Load::sample_queue`]: one aggregate query in the background, never on a request's
//!   path (under load that query waits like any read, and the request that took the sample
//!   waited with it).
//! - **a saturated process**: turns are tasks, so an overload rarely shows as a queue of runs;
//!   it shows as work running late: every task (cores saturated: [`Load::measure_lag`] wakes
//!   every [`LAG_EVERY`] and averages how late it woke) or every store access (the store
//!   saturated: `Store::lateness`, how long reads wait for a place and writes take to be
//!   durable). Past `max_lag_ms` for either, inputs that would start a turn are refused, so
//!   the turns already accepted keep their latency instead of all of them timing out together.
//!   Lateness counts only while the process itself is busy ([`BUSY_CORES`] of its own CPU,
//!   [`Load::cpu`]): a process that runs late while using little CPU is starved by its
//!   neighbours (CPU steal, a stalled disk, another program), not overloaded by its clients,
//!   and refusing them would not make it any less late (ADR 0015).
//!
//! Beyond any bound the answer is [`Busy`] at once, which each face maps once, at its edge,
//! to its protocol's overload answer with the retry hint. Nothing accepted is ever dropped:
//! the bounds apply before an admission commits, never after.

pub mod body;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gateway_store::Store;
use serde::{Deserialize, Serialize};

pub use gateway_core::admission::BusyCause;
use gateway_services::auth::Principal;
use gateway_services::metrics::Metrics;
use gateway_services::places::{Place, Places};

/// How often the queued runs are counted.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// `[admission]`: the bounds on what this process admits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdmissionLimits {
    /// Requests in flight at once (all faces; health and metrics not counted).
    pub max_requests: usize,
    /// Requests in flight at once from one IP address (each HTTP/2 stream counts). Behind a
    /// proxy every client shares the proxy's address: raise this there.
    pub max_requests_per_peer: usize,
    /// Requests in flight at once with one key (keyless local clients count as one key).
    pub max_requests_per_key: usize,
    /// The bytes of request bodies the process holds while they are read, all requests
    /// together; past it a body is refused as busy ([`body`]).
    pub max_body_bytes_in_flight: usize,
    /// The slowest a request body may arrive, on average since its head, once
    /// `body_rate_grace_secs` have passed; a slower one is cut off with 408.
    pub min_body_bytes_per_sec: u64,
    #[serde(rename = "body_rate_grace_secs", with = "gateway_core::durations::secs")]
    pub body_rate_grace: Duration,
    /// Runs waiting to be claimed (in the whole store) beyond which new turns are refused.
    pub max_queued_runs: u64,
    /// The retry hint sent with a refusal.
    #[serde(rename = "retry_after_secs", with = "gateway_core::durations::secs")]
    pub retry_after: Duration,
    /// How long the oldest run that could be claimed may have waited before new turns are
    /// refused: Workers that do not keep up with the queue (whatever the reason) show here.
    #[serde(rename = "max_queue_wait_ms", with = "gateway_core::durations::millis")]
    pub max_queue_wait: Duration,
    /// How late this process's tasks (moving average), or its store's reads and writes
    /// (`Store::lateness`), may run before new turns are refused.
    #[serde(rename = "max_lag_ms", with = "gateway_core::durations::millis")]
    pub max_lag: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_requests: 4096,
            max_requests_per_peer: 1024,
            max_requests_per_key: 1024,
            max_body_bytes_in_flight: 256 << 20,
            min_body_bytes_per_sec: 4096,
            body_rate_grace: Duration::from_secs(10),
            max_queued_runs: 10_000,
            retry_after: Duration::from_secs(1),
            max_queue_wait: Duration::from_secs(2),
            max_lag: Duration::from_millis(50),
        }
    }
}

/// How often the lag probe wakes.
pub const LAG_EVERY: Duration = Duration::from_millis(10);

/// How often the process's own CPU use is read (every this many lag probes).
const CPU_EVERY: u32 = 10;

/// The CPU the process must be using itself (in cores, moving average) before its lateness
/// counts as an overload. Well below what one overloaded process takes (a core or more: the
/// SQLite writer alone keeps one busy), well above an idle or lightly loaded one.
pub const BUSY_CORES: f64 = 0.5;

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
            BusyCause::PeerRequests => {
                format!(
                    "the gateway is busy: this address has {} requests in flight, the most one may have",
                    self.limit
                )
            }
            BusyCause::KeyRequests => {
                format!("the gateway is busy: this key has {} requests in flight, the most one may have", self.limit)
            }
            BusyCause::BodyBytes => {
                format!("the gateway is busy: {} bytes of request bodies are being read", self.limit)
            }
            BusyCause::QueuedRuns => format!("the gateway is busy: more than {} turns wait to start", self.limit),
            BusyCause::QueueWait => {
                format!("the gateway is busy: turns wait more than {} ms to start", self.limit)
            }
            BusyCause::Saturated => {
                format!("the gateway is busy: its work runs more than {} ms late", self.limit)
            }
        }
    }
}

/// Held while a request is handled; dropping it frees its place (the process's and its
/// peer's).
pub struct RequestPermit {
    _place: Place<Option<IpAddr>>,
    bodies: Arc<body::Budget>,
}

/// Held while an authenticated request is handled; dropping it frees its key's place.
pub struct KeyPermit(#[allow(dead_code)] Place<Principal>);

/// The admission bounds of one process, shared by its faces through the Coordinator.
pub struct Load {
    limits: AdmissionLimits,
    /// Requests in flight, by peer address (`None`: a request without one, as in tests).
    requests: Places<Option<IpAddr>>,
    /// Authenticated requests in flight, by key.
    keys: Places<Principal>,
    bodies: Arc<body::Budget>,
    queued: AtomicU64,
    /// How long the oldest claimable run had waited at the last sample, in milliseconds.
    oldest_ms: AtomicU64,
    /// The moving average of the lag probe, in microseconds.
    lag_us: AtomicU64,
    /// The moving average of the process's own CPU use, in thousandths of a core.
    cpu_milli: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Load {
    pub fn new(limits: AdmissionLimits, metrics: Arc<Metrics>) -> Self {
        Self {
            requests: Places::new(limits.max_requests_per_peer.max(1), limits.max_requests.max(1)),
            keys: Places::new(limits.max_requests_per_key.max(1), usize::MAX),
            bodies: Arc::new(body::Budget::new(&limits, Arc::clone(&metrics))),
            limits,
            queued: AtomicU64::new(0),
            oldest_ms: AtomicU64::new(0),
            lag_us: AtomicU64::new(0),
            cpu_milli: AtomicU64::new(0),
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

    /// A place for one request from `peer`, or `Busy` at once: never a wait. Taken before
    /// anything of the request but its head is read.
    pub fn try_request(&self, peer: Option<IpAddr>) -> Result<RequestPermit, Busy> {
        // `::ffff:a.b.c.d` is the same peer as `a.b.c.d`.
        match self.requests.take(peer.map(|p| p.to_canonical())) {
            Ok(place) => Ok(RequestPermit { _place: place, bodies: Arc::clone(&self.bodies) }),
            Err(full) if full.total >= self.limits.max_requests.max(1) => {
                Err(self.busy(BusyCause::Requests, self.limits.max_requests as u64))
            }
            Err(_) => Err(self.busy(BusyCause::PeerRequests, self.limits.max_requests_per_peer as u64)),
        }
    }

    /// A place for one request of `principal`'s, once it is authenticated, or `Busy` at
    /// once. Held with the request's [`RequestPermit`].
    pub fn try_key(&self, principal: &Principal) -> Result<KeyPermit, Busy> {
        self.keys
            .take(principal.clone())
            .map(KeyPermit)
            .map_err(|_| self.busy(BusyCause::KeyRequests, self.limits.max_requests_per_key as u64))
    }

    /// Measures how late this process's tasks run, until `stop`: a task that sleeps
    /// [`LAG_EVERY`] and records how much later than that it woke, averaged over about 16
    /// wakes (so one slow poll is not an overload, a saturated second is). Every
    /// [`CPU_EVERY`] wakes it also reads the CPU the process has used, averaged over about
    /// four readings (half a second).
    pub async fn measure_lag(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut last = (Instant::now(), own_cpu());
        for wake in 1u32.. {
            let start = Instant::now();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LAG_EVERY) => {}
            }
            let late = start.elapsed().saturating_sub(LAG_EVERY).as_micros() as u64;
            let avg = self.lag_us.load(Ordering::Relaxed);
            self.lag_us.store(avg - avg / 16 + late / 16, Ordering::Relaxed);
            if wake % CPU_EVERY == 0 {
                let now = (Instant::now(), own_cpu());
                let wall = now.0.duration_since(last.0).as_micros().max(1);
                let used = now.1.saturating_sub(last.1).as_micros();
                let milli = (used * 1000 / wall) as u64;
                let avg = self.cpu_milli.load(Ordering::Relaxed);
                self.cpu_milli.store(avg - avg / 4 + milli / 4, Ordering::Relaxed);
                last = now;
            }
        }
    }

    /// The CPU the process used lately, in cores (moving average of the probe's readings).
    pub fn cpu(&self) -> f64 {
        self.cpu_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// The lag probe's moving average.
    pub fn lag(&self) -> Duration {
        Duration::from_micros(self.lag_us.load(Ordering::Relaxed))
    }

    /// What the saturation bound compares with `max_lag_ms`: the later of the process's
    /// tasks and its store's reads and writes.
    fn lateness(&self, store: &dyn Store) -> Duration {
        self.lag().max(store.lateness())
    }

    /// Counts the runs waiting to be claimed every [`SAMPLE_EVERY`], and copies what the
    /// saturation bound reads into the metrics, until `stop`. A store
    /// that cannot count keeps the last figures: it is not a reason to refuse, and the
    /// admissions that follow meet the same store and report it properly.
    pub async fn sample_queue(self: Arc<Self>, store: Arc<dyn Store>, stop: tokio_util::sync::CancellationToken) {
        loop {
            let queue = store.queue_stats().await.ok();
            if let Some(q) = queue {
                self.queued.store(q.queued, Ordering::Relaxed);
                self.oldest_ms.store(q.oldest_wait.as_millis() as u64, Ordering::Relaxed);
            }
            // What the saturation bound reads, for operators wondering why turns are refused.
            self.metrics.sampled(queue, self.lateness(store.as_ref()), self.cpu());
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SAMPLE_EVERY) => {}
            }
        }
    }

    /// Refuses a new turn while too many runs wait to be claimed (as of the last sample), or
    /// while the process or its store runs late because of the process's own work (it is
    /// using at least [`BUSY_CORES`]). Never waits.
    pub fn check_queue(&self, store: &dyn Store) -> Result<(), Busy> {
        if self.queued.load(Ordering::Relaxed) >= self.limits.max_queued_runs {
            return Err(self.busy(BusyCause::QueuedRuns, self.limits.max_queued_runs));
        }
        let oldest = Duration::from_millis(self.oldest_ms.load(Ordering::Relaxed));
        if oldest > self.limits.max_queue_wait {
            return Err(self.busy(BusyCause::QueueWait, self.limits.max_queue_wait.as_millis() as u64));
        }
        if self.lateness(store) > self.limits.max_lag && self.cpu() >= BUSY_CORES {
            return Err(self.busy(BusyCause::Saturated, self.limits.max_lag.as_millis() as u64));
        }
        Ok(())
    }

    /// Whether the Workers keep up: no run waits to be claimed (as of the last sample) and
    /// neither the process nor its store runs later than a quarter of `max_lag_ms`. Only
    /// then may an admission claim its own turn (ADR 0016): under load its runs queue, so
    /// the queue bounds above see the backlog and shed it, and the claim query paces the
    /// turns that start.
    pub fn keeping_up(&self, store: &dyn Store) -> bool {
        self.queued.load(Ordering::Relaxed) == 0 && self.lateness(store) < self.limits.max_lag / 4
    }

    /// Requests in flight now (for tests and metrics).
    pub fn requests_in_flight(&self) -> usize {
        self.requests.open()
    }
}

/// The CPU time this process has used so far (user and system, every thread).
fn own_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else { return Duration::ZERO };
    let duration = |t: nix::sys::time::TimeVal| {
        Duration::new(t.tv_sec().max(0) as u64, 0) + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    duration(usage.user_time()) + duration(usage.system_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_beyond_the_bound_are_refused_at_once_and_admitted_again_when_one_ends() {
        let metrics = Arc::new(Metrics::default());
        let limits = AdmissionLimits { max_requests: 2, max_requests_per_peer: 2, ..Default::default() };
        let load = Load::new(limits, Arc::clone(&metrics));
        let a = load.try_request(None).expect("first");
        let _b = load.try_request(None).expect("second");
        let busy = load.try_request(None).err().expect("the third is refused");
        assert_eq!(busy.cause, BusyCause::Requests);
        assert_eq!(busy.retry_after, Duration::from_secs(1));
        assert_eq!(busy.to_string(), "the gateway is busy: 2 requests are in flight; retry in 1s");
        assert_eq!(load.requests_in_flight(), 2);
        drop(a);
        assert!(load.try_request(None).is_ok(), "a freed place is taken again");
        assert!(metrics.render().contains("gateway_admissions_refused_total{cause=\"requests\"} 1\n"));
    }

    /// Runs `stall` on a current-thread runtime with a lag probe, 60 times, and returns
    /// whether a new turn is refused afterwards, with the metrics as they were then; then
    /// checks the process recovers. One at a time: the probe reads the whole process's CPU.
    fn admitted_after(stall: impl Fn()) -> (Result<(), Busy>, String) {
        use gateway_store::conformance::Harness;
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = gateway_store::conformance::harness::SqliteHarness::new(true).fresh().await;
            let limits = AdmissionLimits { max_lag: Duration::from_millis(10), ..Default::default() };
            let metrics = Arc::new(Metrics::default());
            let load = Arc::new(Load::new(limits, Arc::clone(&metrics)));
            let stop = tokio_util::sync::CancellationToken::new();
            let probe = tokio::spawn(Arc::clone(&load).measure_lag(stop.clone()));
            let sampler = tokio::spawn(Arc::clone(&load).sample_queue(Arc::clone(&store), stop.clone()));
            assert!(load.check_queue(store.as_ref()).is_ok(), "idle: admitted");
            for _ in 0..60 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                stall();
            }
            assert!(load.lag() > Duration::from_millis(10), "the tasks ran late: {:?}", load.lag());
            let verdict = load.check_queue(store.as_ref());
            let seen = metrics.render();
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(load.lag() < Duration::from_millis(10), "the average decays: {:?}", load.lag());
            assert!(load.check_queue(store.as_ref()).is_ok(), "recovered: admitted again");
            stop.cancel();
            probe.await.unwrap();
            sampler.await.unwrap();
            (verdict, seen)
        })
    }

    /// The value of an unlabelled series in a Prometheus text exposition.
    fn series(text: &str, name: &str) -> f64 {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no {name}"));
        line[name.len() + 1..].parse().unwrap()
    }

    #[test]
    fn a_process_saturated_by_its_own_work_refuses_new_turns_until_it_recovers() {
        // The runtime's thread kept busy again and again, a second thread with it (so that CPU
        // steal on a shared machine cannot take the process below half a core): what a
        // saturated process looks like to its tasks.
        let spin = || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(30) {
                std::hint::spin_loop();
            }
        };
        let saturate = || {
            std::thread::scope(|s| {
                s.spawn(spin);
                spin();
            })
        };
        // The premise needs the cores: on a shared machine (tests running beside this one) the
        // two spinning threads may get less than `BUSY_CORES`, which is starvation, rightly
        // admitted (the next test). Such a round says nothing and is run again; a round that
        // had the cores must refuse.
        let (verdict, metrics) = (0..3)
            .map(|_| admitted_after(saturate))
            .find(|(_, metrics)| series(metrics, "gateway_process_cpu_cores") >= BUSY_CORES)
            .expect("three rounds without the cores the test needs: the machine is too busy to say");
        let busy = verdict.expect_err("saturated: refused");
        assert_eq!(busy.cause, BusyCause::Saturated);
        assert!(busy.to_string().contains("runs more than 10 ms late"), "{busy}");
        // What an operator sees: the two figures the refusal was decided on.
        assert!(series(&metrics, "gateway_admission_lateness_seconds") > 0.010, "{metrics}");
        assert!(series(&metrics, "gateway_process_cpu_cores") >= BUSY_CORES, "{metrics}");
    }

    #[test]
    fn a_process_late_because_it_is_starved_admits_new_turns() {
        // The thread blocked without using CPU: what CPU steal, a stalled disk or a busy
        // neighbour look like to the tasks. Refusing clients would not help; they are admitted.
        let (verdict, metrics) = admitted_after(|| std::thread::sleep(Duration::from_millis(30)));
        verdict.expect("starved, not saturated: admitted");
        assert!(series(&metrics, "gateway_admission_lateness_seconds") > 0.010, "{metrics}");
        assert!(series(&metrics, "gateway_process_cpu_cores") < BUSY_CORES, "{metrics}");
    }
}
