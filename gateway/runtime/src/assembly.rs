//! The runtime of one gateway process, put together in one place. `gateway serve`,
//! `gateway acp` and the test gateway (`testing::TestGateway`) all run what
//! [`Runtime::assemble`] builds, so no second wiring can drift from the shipped one.
//!
//! Shutdown follows tokio-rs/mini-redis: one signal every background task watches
//! ([`Runtime::shutdown`]), and one tracker every background task is spawned on
//! ([`Runtime::tasks`]), the Workers' own tasks and lease keepers included. [`Runtime::stop`]
//! sends the signal, lets the Workers finish or release their turns, stops what backends keep
//! across turns, and then waits until the tracker is empty before it closes the store: the
//! store is never closed under a task that still uses it.

use std::sync::Arc;

use gateway_core::agent::BackendRef;
use gateway_core::placement::{Offer, ProviderOffer};
use gateway_store::Store;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::backend::BackendRegistry;
use crate::coordinator::{Coordinator, CoordinatorOptions};
use crate::environment::Environments;
use crate::executors::Executors;
use crate::previews::PreviewBus;
use crate::worker::{Handoff, PoolParts, WorkerConfig, WorkerIdentity, WorkerPool};
use gateway_services::metrics::Metrics;

/// What [`Runtime::assemble`] needs besides the store, the environments and the backends.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Names this process's Workers (`<instance>#<n>`) in leases and logs.
    pub instance: String,
    /// The Workers this process runs; `None`: none yet (a test starts its own pools with
    /// [`Runtime::workers`]).
    pub workers: Option<WorkerConfig>,
    pub coordinator: CoordinatorOptions,
    /// What sessions may be placed on: in the binary, [`offer_of`] the environments' working
    /// providers and the backends; tests widen it to reach refusals of backends they do not run.
    pub offer: Offer,
    /// The process's series; made by the caller so the store it opened can share them
    /// ([`Metrics::new`]).
    pub metrics: Arc<Metrics>,
}

/// The running core of one gateway process.
pub struct Runtime {
    pub store: Arc<dyn Store>,
    pub coordinator: Coordinator,
    /// Self-hosted executors: the work queue's waits and lease sweep.
    pub executors: Arc<Executors>,
    pub environments: Arc<Environments>,
    pub previews: PreviewBus,
    pub metrics: Arc<Metrics>,
    /// Every background task of the process is spawned here (the adapters' too: the server
    /// spawns them with `runtime.tasks.spawn`), so [`Runtime::stop`] can wait for them.
    pub tasks: TaskTracker,
    /// Cancelled when the process stops: every background task watches it.
    pub shutdown: CancellationToken,
    backends: BackendRegistry,
    instance: String,
    workers: Option<WorkerConfig>,
    pool: Option<WorkerPool>,
    /// The primary pool's door for the turns the Coordinator's admissions claim.
    handoff: Arc<Handoff>,
    /// A runtime dropped without [`Runtime::stop`] (a test that ends) still stops its tasks.
    _cancel_on_drop: DropGuard,
}

/// The offer of a process: its working sandbox providers, whether its environments check out
/// repositories ([`Environments::checks_out_repositories`]) and what its backends can run.
pub fn offer_of(providers: Vec<ProviderOffer>, repositories: bool, backends: &BackendRegistry) -> Offer {
    let mut offer = Offer { providers, repositories, ..Default::default() };
    for backend in backends.offered() {
        match backend {
            BackendRef::Native => {}
            BackendRef::Acp { executor } => {
                offer.acp_executors.insert(executor);
            }
            BackendRef::A2a { remote } => {
                offer.a2a_remotes.insert(remote);
            }
            BackendRef::Builtin { name } => {
                offer.builtins.insert(name);
            }
        }
    }
    offer
}

impl Runtime {
    /// The one assembly: the offer, the Coordinator, the environments' maintenance task, and
    /// the Workers (if `config.workers` says so), all sharing one preview bus, one set of
    /// metrics, one shutdown signal and one task tracker.
    ///
    /// Backends are made by the caller against `environments` (the native and ACP backends
    /// realize sessions' sandboxes through it); state a backend keeps across turns is owned
    /// by the backend value and stopped through [`crate::Backend::stop`].
    pub fn assemble(
        store: Arc<dyn Store>,
        config: RuntimeConfig,
        environments: Arc<Environments>,
        backends: BackendRegistry,
    ) -> Self {
        let RuntimeConfig { instance, workers, coordinator: options, offer, metrics } = config;
        let subscription_poll = options.subscription_poll;
        let previews = PreviewBus::with_peers(store.peers());
        let executors = Arc::new(Executors::new(Arc::clone(&store), environments.config().executors()));
        let handoff = Arc::new(Handoff::default());
        let coordinator = Coordinator::new(Arc::clone(&store), previews.clone(), offer, options, Arc::clone(&metrics))
            .with_environments(Arc::clone(&environments))
            .with_executors(Arc::clone(&executors))
            .with_handoff(Arc::clone(&handoff));
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(Arc::clone(&executors).sweep(shutdown.child_token()));
        tasks.spawn(previews.clone().relay(shutdown.child_token()));
        tasks.spawn(crate::subscription::poll_session_tips(
            Arc::clone(&store),
            subscription_poll,
            shutdown.child_token(),
        ));
        tasks.spawn(Arc::clone(&environments).maintain(Arc::clone(&store), shutdown.child_token()));
        tasks.spawn(gateway_services::files::sweep_abandoned_uploads(Arc::clone(&store) as _, shutdown.child_token()));
        tasks.spawn(Arc::clone(coordinator.load()).measure_lag(shutdown.child_token()));
        tasks.spawn(Arc::clone(coordinator.load()).sample_queue(Arc::clone(&store), shutdown.child_token()));
        let mut runtime = Self {
            store,
            coordinator,
            executors,
            environments,
            previews,
            metrics,
            tasks,
            _cancel_on_drop: shutdown.clone().drop_guard(),
            shutdown,
            backends,
            instance,
            workers,
            pool: None,
            handoff,
        };
        runtime.start_workers();
        runtime
    }

    /// The identity of Workers named `instance` on this host: they offer the providers of the
    /// Coordinator's offer.
    pub fn identity(&self, instance: &str) -> WorkerIdentity {
        WorkerIdentity {
            instance: instance.to_owned(),
            host: self.environments.host().to_owned(),
            providers: self.coordinator.offer().providers.iter().map(|p| p.tier.clone()).collect(),
        }
    }

    /// What a pool of this process shares with it. Its Workers stop claiming when the process
    /// stops, and its tasks are this process's. Only the primary pool takes the admissions'
    /// handoffs.
    fn parts(&self, primary: bool) -> PoolParts {
        PoolParts {
            store: Arc::clone(&self.store),
            executors: Arc::clone(&self.executors),
            backends: self.backends.clone(),
            previews: self.previews.clone(),
            metrics: Arc::clone(&self.metrics),
            tasks: self.tasks.clone(),
            stop: self.shutdown.child_token(),
            handoff: primary.then(|| Arc::clone(&self.handoff)),
        }
    }

    /// Starts the configured Workers, unless they run (after [`Runtime::crash_workers`], as a
    /// restarted process would).
    pub fn start_workers(&mut self) {
        if self.pool.is_some() {
            return;
        }
        if let Some(config) = self.workers.clone() {
            self.pool = Some(WorkerPool::start(self.parts(true), self.identity(&self.instance), config));
        }
    }

    /// Stops the Workers gracefully ([`WorkerPool::shutdown`]).
    pub async fn stop_workers(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.shutdown().await;
        }
    }

    /// Kills the Workers without settling or releasing anything: what a crash does. Returns
    /// once none of their turns is left (`WorkerPool::abort`).
    pub async fn crash_workers(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.abort().await;
        }
    }

    /// Another pool of Workers on this runtime's store and backends, owned by the caller (a
    /// test's second process on the same host). It stops claiming when the runtime stops, but
    /// only its own [`WorkerPool::shutdown`] drains its running turns: shut it down first.
    pub fn workers(&self, identity: WorkerIdentity, config: WorkerConfig) -> WorkerPool {
        WorkerPool::start(self.parts(false), identity, config)
    }

    /// Stops the process: the signal, the Workers (grace, then release), the backends' state
    /// (ACP agent processes), every tracked task, and only then the store.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        self.stop_workers().await;
        self.backends.stop_all().await;
        self.tasks.close();
        self.tasks.wait().await;
        info!("every background task has stopped; closing the store");
        self.store.close().await;
    }
}
