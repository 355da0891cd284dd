//! The Workers of a process: turns are tasks, not threads.
//!
//! A turn mostly waits (on a model, a remote agent, an ACP process, a client), so a process
//! runs up to `max_turns` of them at once, each a task costing its buffers, never a thread,
//! a claim loop or a database connection. One dispatcher claims runs in batches (one query
//! takes up to the free capacity, and commits each claimed turn's start with it), spawns a
//! task per turn, and waits on run-ready hints with polling as the authority (invariant 3).
//! One lease keeper renews every held lease in one statement ([`leases`]); losing a lease
//! abandons its turn without writing anything more. Graceful shutdown stops claiming, lets
//! running turns finish for a grace period, then releases their leases so another process
//! picks them up at once instead of after lease expiry.
//!
//! Work that really consumes a core (sandboxed commands) is bounded apart from this, by the
//! Session Environments (`environments.max_commands`).

mod handoff;
mod leases;
mod turn;

use std::sync::Arc;
use std::time::Duration;

use gateway_core::environment::ProviderTier;
use gateway_core::run::WorkerOffer;
use gateway_store::{LeaseTerms, Store};
use gateway_wire::backoff::Backoff;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};

use crate::backend::BackendRegistry;
use crate::previews::PreviewBus;
use gateway_services::metrics::Metrics;
pub use handoff::{Handoff, Reserved};
use leases::Leases;

/// Retries after transient backend failures: exponential backoff with jitter. Only
/// `max_retries` is a configuration key (`workers.max_retries`); the backoff's shape is not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    pub max_retries: u32,
    #[serde(skip)]
    pub base: Duration,
    #[serde(skip)]
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base: Duration::from_secs(1), max: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// Backoff before retry number `attempt + 1`: the one jittered backoff
    /// ([`Backoff::new`]), never shorter than what the failure asked for.
    pub fn backoff(&self, attempt: u32, at_least: Option<Duration>) -> Duration {
        Backoff::new(self.base, self.max).delay(attempt, at_least)
    }
}

/// `[workers]`: how many turns a process runs at once and how it holds their claims.
/// Deserializable with the documented keys (`max_turns`, `claim_batch`, `lease_secs`,
/// `poll_ms`, `host_ttl_secs`, `crash_budget`, `max_retries`, `shutdown_grace_secs`); missing
/// keys keep these defaults. (`count`, the number of Workers each holding one turn, is gone:
/// ADR 0012.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    /// Turns in flight at once in this process (each a task; most of them wait).
    pub max_turns: usize,
    /// Most runs one claim query takes.
    pub claim_batch: usize,
    #[serde(rename = "lease_secs", with = "gateway_core::durations::secs")]
    pub lease: Duration,
    /// A host not seen for this long is gone; its sessions' runs fail with `environment_lost`.
    #[serde(rename = "host_ttl_secs", with = "gateway_core::durations::secs")]
    pub host_ttl: Duration,
    /// How often an idle Worker polls for due runs when no wake-up arrives.
    #[serde(rename = "poll_ms", with = "gateway_core::durations::millis")]
    pub poll: Duration,
    /// Consecutive crashes (lost leases) a run may have before it ends as indeterminate.
    pub crash_budget: u32,
    #[serde(flatten)]
    pub retry: RetryPolicy,
    /// On shutdown: how long running turns get to finish before their leases are released.
    #[serde(rename = "shutdown_grace_secs", with = "gateway_core::durations::secs")]
    pub shutdown_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_turns: 4096,
            claim_batch: 64,
            lease: Duration::from_secs(30),
            host_ttl: Duration::from_secs(90),
            poll: Duration::from_secs(1),
            crash_budget: 3,
            retry: RetryPolicy::default(),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Who a pool's Workers are and what they can run: facts of the process, not configuration.
#[derive(Debug, Clone)]
pub struct WorkerIdentity {
    /// The lease owner recorded in the store for every run this pool claims.
    pub instance: String,
    /// The host this process runs on; environments realized here stay here.
    pub host: String,
    /// The sandbox providers the Workers offer to claims.
    pub providers: Vec<ProviderTier>,
}

/// What a pool's Workers share with the rest of their process.
#[derive(Clone)]
pub struct PoolParts {
    pub store: Arc<dyn Store>,
    /// Self-hosted executors, which a turn may wait for.
    pub executors: Arc<crate::executors::Executors>,
    pub backends: BackendRegistry,
    pub previews: PreviewBus,
    /// Where claims and settlements are counted (shared with the Coordinator for `/metrics`).
    pub metrics: Arc<Metrics>,
    /// Every task the pool spawns is tracked here too, so the process that owns the tracker
    /// can wait for all of them, lease keepers included, before it closes the store.
    pub tasks: TaskTracker,
    /// The pool stops claiming when this is cancelled. Give it a child of the process's
    /// shutdown signal: [`WorkerPool::shutdown`] cancels it too, and must stop only this pool.
    pub stop: CancellationToken,
    /// Where this process's admissions hand the turns they claim to its Workers: given to the
    /// process's primary pool only.
    pub handoff: Option<Arc<Handoff>>,
}

struct Shared {
    store: Arc<dyn Store>,
    executors: Arc<crate::executors::Executors>,
    backends: BackendRegistry,
    previews: PreviewBus,
    metrics: Arc<Metrics>,
    tasks: TaskTracker,
    identity: WorkerIdentity,
    config: WorkerConfig,
    handoff: Option<Arc<Handoff>>,
    leases: Arc<Leases>,
    /// This pool's turns, so a crash ([`WorkerPool::abort`]) can wait until none is left.
    turns: TaskTracker,
    /// Stop claiming new runs.
    stop: CancellationToken,
    /// Grace is over: abandon running turns and release their leases.
    drain: CancellationToken,
}

/// The Workers of one process: a dispatcher, a lease keeper, a host heartbeat.
pub struct WorkerPool {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    /// The dispatcher: its turns end (or are released) before the keeper and heartbeat stop.
    dispatcher: Option<tokio::task::JoinHandle<()>>,
    keeping: CancellationToken,
}

impl WorkerPool {
    pub fn start(parts: PoolParts, identity: WorkerIdentity, config: WorkerConfig) -> Self {
        let PoolParts { store, executors, backends, previews, metrics, tasks: tracker, stop, handoff } = parts;
        let shared = Arc::new(Shared {
            store,
            executors,
            backends,
            previews,
            metrics,
            tasks: tracker,
            identity,
            config,
            handoff,
            leases: Arc::new(Leases::default()),
            turns: TaskTracker::new(),
            stop,
            drain: CancellationToken::new(),
        });
        let keeping = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(shared.tasks.track_future(heartbeat(Arc::clone(&shared), keeping.clone())));
        tasks.spawn(shared.tasks.track_future(Arc::clone(&shared.leases).keep(
            Arc::clone(&shared.store),
            shared.config.lease,
            keeping.clone(),
        )));
        let dispatcher = Some(tokio::spawn(shared.tasks.track_future(dispatch(Arc::clone(&shared)))));
        info!(
            instance = %shared.identity.instance,
            host = %shared.identity.host,
            max_turns = shared.config.max_turns,
            "workers started"
        );
        Self { shared, tasks, dispatcher, keeping }
    }

    /// Stops claiming, waits up to the grace period for running turns, then releases the
    /// leases of those still running and returns when every turn has stopped.
    pub async fn shutdown(mut self) {
        self.shared.stop.cancel();
        if let Some(dispatcher) = self.dispatcher.take() {
            let _ = dispatcher.await;
        }
        self.keeping.cancel();
        while self.tasks.join_next().await.is_some() {}
        info!("workers stopped");
    }

    /// Stops everything at once without settling or releasing anything: what a crash does.
    /// For fault-injection tests. Returns once no turn of the pool is left: a task is only
    /// cancelled when it is next polled, and a turn polled on another thread meanwhile could
    /// otherwise still act after the "crash" (settle a turn the test meant to leave behind).
    pub async fn abort(mut self) {
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.abort();
            // Dropping the dispatcher drops its turns' JoinSet, which aborts every turn.
            let _ = dispatcher.await;
        }
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        self.shared.turns.close();
        self.shared.turns.wait().await;
    }
}

async fn heartbeat(w: Arc<Shared>, stop: CancellationToken) {
    let every = (w.config.host_ttl / 3).max(Duration::from_millis(100));
    loop {
        if let Err(e) = w.store.heartbeat_host(&w.identity.host).await {
            warn!(error = %e, "host heartbeat failed");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Claims runs while there is room, a task per turn, and runs the turns this process's
/// admissions hand over ([`Handoff`]); then, at shutdown, lets the turns finish for the grace
/// period and releases the rest.
async fn dispatch(w: Arc<Shared>) {
    let terms = LeaseTerms { lease: w.config.lease, host_ttl: w.config.host_ttl };
    let offer = WorkerOffer {
        worker: w.identity.instance.clone(),
        host: w.identity.host.clone(),
        backends: w.backends.offered(),
        providers: w.identity.providers.clone(),
    };
    let slots = Arc::new(Semaphore::new(w.config.max_turns.max(1)));
    let (deliveries, mut handed) = tokio::sync::mpsc::unbounded_channel();
    let door = w.handoff.as_ref().map(|h| {
        h.open(handoff::Door {
            offer: Arc::new(offer.clone()),
            terms,
            slots: Arc::clone(&slots),
            capacity: w.config.max_turns.max(1),
            below: handoff::FEW_TURNS.min(w.config.claim_batch.max(1)),
            deliveries,
        })
    });
    let mut turns: JoinSet<()> = JoinSet::new();
    let mut ready = w.store.wakeups().watch_runs();
    // Whether to run the claim query now: at start, on a hint, when polling is due, after a
    // full batch, and when a slot frees up after being full. A handed-off turn is no reason
    // to look (its admission claimed it), and a turn's end neither: its settlement hints when
    // its session has a run queued.
    let mut look = true;
    let mut next_poll = tokio::time::Instant::now();
    while !w.stop.is_cancelled() {
        while turns.try_join_next().is_some() {}
        if look {
            let room = slots.available_permits().min(w.config.claim_batch.max(1));
            if room == 0 {
                // Full: wait for a slot, freed by a turn's end or by an admission that gave
                // its reservation back (so with no turn running there is still a wake-up).
                tokio::select! {
                    _ = w.stop.cancelled() => break,
                    _ = slots.acquire() => {}
                    Some((claim, slot)) = handed.recv() => start_turn(&w, &mut turns, claim, slot, true),
                }
                continue;
            }
            // The slots are taken before the claim: admissions reserve theirs meanwhile
            // (handoff), and a claimed run without a slot would wait out its lease.
            let Ok(mut held) = Arc::clone(&slots).try_acquire_many_owned(room as u32) else { continue };
            // Seen before the claim: a hint sent while we look is not lost.
            ready.borrow_and_update();
            next_poll = tokio::time::Instant::now() + w.config.poll;
            let mut full_batch = false;
            match w.store.claim_runs(&offer, terms, room as u32).await {
                Ok(claims) => {
                    full_batch = claims.len() == room;
                    for claim in claims {
                        // One slot per claim; the query returns at most `room`.
                        let Some(slot) = held.split(1) else {
                            warn!("a claim beyond the turn limit; it will be reclaimed after its lease");
                            continue;
                        };
                        start_turn(&w, &mut turns, claim, slot, false);
                    }
                }
                Err(e) => warn!(error = %e, "claim failed"),
            }
            drop(held);
            look = full_batch; // a full batch: there may be more due right now
            if look {
                continue;
            }
        }
        tokio::select! {
            _ = w.stop.cancelled() => break,
            _ = ready.changed() => look = true,
            _ = tokio::time::sleep_until(next_poll) => look = true,
            Some((claim, slot)) = handed.recv() => start_turn(&w, &mut turns, claim, slot, true),
        }
    }
    // No more handoffs; those already delivered are claimed, so they run (or are released
    // after the grace) like the others.
    drop(door);
    handed.close();
    while let Ok((claim, slot)) = handed.try_recv() {
        start_turn(&w, &mut turns, claim, slot, true);
    }
    let finished =
        tokio::time::timeout(w.config.shutdown_grace, async { while turns.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        info!(running = w.leases.len(), "shutdown grace over; releasing the leases of running turns");
        w.drain.cancel();
        while turns.join_next().await.is_some() {}
    }
}

/// Runs one claim as a task holding its turn slot and its lease.
fn start_turn(
    w: &Arc<Shared>,
    turns: &mut JoinSet<()>,
    claim: gateway_core::run::Claim,
    slot: tokio::sync::OwnedSemaphorePermit,
    handed_off: bool,
) {
    w.metrics.runs_claimed.inc();
    if handed_off {
        w.metrics.runs_handed_off.inc();
    }
    if claim.is_reclaim() {
        w.metrics.runs_reclaimed.inc();
    }
    let span = info_span!(
        "run",
        otel.name = "turn",
        session = %claim.fence.session_id,
        run = %claim.fence.run_id,
        epoch = claim.fence.epoch,
        backend = %claim.run.backend,
    );
    // The turn belongs to the trace of the request that queued it, however long ago and
    // wherever that was (the context is stored with the run).
    gateway_core::trace::adopt(&span, claim.run.trace.as_ref());
    let holding = w.leases.hold(claim.fence.clone());
    let task = {
        let w = Arc::clone(w);
        async move {
            turn::execute(&w, claim, &holding.held).await;
            drop(holding);
            drop(slot);
        }
    };
    turns.spawn(w.tasks.track_future(w.turns.track_future(task).instrument(span)));
}
