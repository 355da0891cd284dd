//! The test gateway: the shipped assembly ([`Runtime::assemble`]) on a store of the test's
//! choosing, with the backends, offer, sandboxes and Workers the test needs. Tests get what
//! the binary runs (one Coordinator, one preview bus, one tracker, one shutdown order),
//! never a hand-made copy of it.
//!
//! ```ignore
//! let gw = TestGateway::builder().scripted().local_sandbox().workers(TestGateway::quick_workers()).build().await;
//! gw.coordinator.submit(&session, inputs).await?;
//! gw.stop().await;
//! ```

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::BackendRef;
use gateway_core::placement::Offer;
use gateway_sandbox::{LocalProvider, SandboxProvider};
use gateway_store::Store;
use gateway_store::conformance::Harness;
use gateway_store::conformance::harness::SqliteHarness;

use crate::assembly::{Runtime, RuntimeConfig, offer_of};
use crate::backend::{Backend, BackendRegistry};
use crate::coordinator::CoordinatorOptions;
use crate::environment::{Environments, EnvironmentsConfig};
use crate::load::AdmissionLimits;
use crate::worker::{RetryPolicy, WorkerConfig};

use super::ScriptedBackend;

/// Makes a backend once the gateway's environments exist.
type MakeBackend = Box<dyn FnOnce(&Arc<Environments>) -> Arc<dyn Backend> + Send>;

/// A gateway runtime in a test. Derefs to its [`Runtime`] (`gw.coordinator`, `gw.store`,
/// `gw.start_workers()`, `gw.crash_workers()`, ...).
pub struct TestGateway {
    runtime: Runtime,
    /// The environments' root: session workspaces live in `<workspaces>/<session id>`
    /// (removed with the gateway).
    pub workspaces: tempfile::TempDir,
    /// Keeps the databases of a harness the gateway made its store with.
    _harness: Option<Box<dyn Harness>>,
}

impl Deref for TestGateway {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

impl DerefMut for TestGateway {
    fn deref_mut(&mut self) -> &mut Runtime {
        &mut self.runtime
    }
}

impl TestGateway {
    /// A gateway on a fresh SQLite store, host `h`, instance `test`, no sandbox provider, no
    /// backend, the production Worker settings; each builder method changes one of these.
    pub fn builder() -> TestGatewayBuilder {
        TestGatewayBuilder {
            store: None,
            harness: None,
            backends: Vec::new(),
            providers: Vec::new(),
            environments: EnvironmentsConfig::default(),
            offer: None,
            host: "h".into(),
            instance: "test".into(),
            workers: Some(WorkerConfig::default()),
            // A busy test machine (tests running beside each other on few cores) must not make
            // a test's gateway refuse turns as saturated: lateness is not shed unless a test
            // sets its own limits ([`TestGatewayBuilder::admission`]), as the shedder's do.
            coordinator: CoordinatorOptions {
                admission: AdmissionLimits { max_lag: Duration::from_secs(600), ..AdmissionLimits::default() },
                ..CoordinatorOptions::default()
            },
        }
    }

    /// Worker settings that keep tests fast: 2 turns at once, 50 ms polls, 5 s leases, one quick
    /// retry, 200 ms of shutdown grace.
    pub fn quick_workers() -> WorkerConfig {
        WorkerConfig {
            max_turns: 2,
            claim_batch: 16,
            lease: Duration::from_secs(5),
            poll: Duration::from_millis(50),
            retry: RetryPolicy { max_retries: 1, base: Duration::from_millis(20), max: Duration::from_millis(50) },
            shutdown_grace: Duration::from_millis(200),
            ..WorkerConfig::default()
        }
    }

    /// Stops it as the binary stops: Workers, backends, every task, then the store.
    pub async fn stop(self) {
        self.runtime.stop().await;
    }
}

/// How a [`TestGateway`] is made; see [`TestGateway::builder`].
pub struct TestGatewayBuilder {
    store: Option<Arc<dyn Store>>,
    harness: Option<Box<dyn Harness>>,
    backends: Vec<(BackendRef, MakeBackend)>,
    providers: Vec<Arc<dyn SandboxProvider>>,
    environments: EnvironmentsConfig,
    offer: Option<Offer>,
    host: String,
    instance: String,
    workers: Option<WorkerConfig>,
    coordinator: CoordinatorOptions,
}

impl TestGatewayBuilder {
    /// Runs on `store` (another handle on a test's database, or a store the test keeps).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Runs on a fresh store of `harness` (SQLite or PostgreSQL), kept while the gateway lives.
    pub fn harness(mut self, harness: impl Harness + 'static) -> Self {
        self.harness = Some(Box::new(harness));
        self
    }

    /// Registers `backend` for agents published with `backend_ref`.
    pub fn backend(self, backend_ref: BackendRef, backend: Arc<dyn Backend>) -> Self {
        self.backend_with(backend_ref, move |_| backend)
    }

    /// Registers the backend `make` builds against the gateway's environments (the native
    /// and ACP backends realize sandboxes through them).
    pub fn backend_with(
        mut self,
        backend_ref: BackendRef,
        make: impl FnOnce(&Arc<Environments>) -> Arc<dyn Backend> + Send + 'static,
    ) -> Self {
        self.backends.push((backend_ref, Box::new(make)));
        self
    }

    /// Registers every `(ref, backend)` pair (an adapter's `backends()` list).
    pub fn backends(self, backends: impl IntoIterator<Item = (BackendRef, Arc<dyn Backend>)>) -> Self {
        backends.into_iter().fold(self, |b, (r, backend)| b.backend(r, backend))
    }

    /// The scripted backend ([`ScriptedBackend`]) as the native backend.
    pub fn scripted(self) -> Self {
        self.backend(BackendRef::Native, Arc::new(ScriptedBackend))
    }

    /// Offers exactly `offer` to placement instead of what the providers and backends offer.
    pub fn offer(mut self, offer: Offer) -> Self {
        self.offer = Some(offer);
        self
    }

    /// Adds a sandbox provider to the gateway's environments.
    pub fn sandbox(mut self, provider: Arc<dyn SandboxProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Adds the `local` sandbox provider.
    pub fn local_sandbox(self) -> Self {
        self.sandbox(Arc::new(LocalProvider::new()))
    }

    /// The environments' settings (idle time, command limits).
    pub fn environments(mut self, config: EnvironmentsConfig) -> Self {
        self.environments = config;
        self
    }

    /// The host identity environments are pinned to (and the Workers run on).
    pub fn host(mut self, host: &str) -> Self {
        self.host = host.into();
        self
    }

    /// The name of the gateway's Workers.
    pub fn instance(mut self, instance: &str) -> Self {
        self.instance = instance.into();
        self
    }

    /// The gateway's Worker settings.
    pub fn workers(mut self, config: WorkerConfig) -> Self {
        self.workers = Some(config);
        self
    }

    /// No Workers of its own: the test starts pools with [`Runtime::workers`].
    pub fn no_workers(mut self) -> Self {
        self.workers = None;
        self
    }

    /// How often subscriptions read the store without a wake-up.
    pub fn subscription_poll(mut self, every: Duration) -> Self {
        self.coordinator.subscription_poll = every;
        self
    }

    /// The bounds beyond which work is refused as busy.
    pub fn admission(mut self, limits: AdmissionLimits) -> Self {
        self.coordinator.admission = limits;
        self
    }

    /// What uploads may be (size and quotas).
    pub fn files(mut self, config: gateway_services::files::FilesConfig) -> Self {
        self.coordinator.files = config;
        self
    }

    /// Assembles the gateway; its Workers (if any) run at once.
    pub async fn build(self) -> TestGateway {
        let (store, harness) = match (self.store, self.harness) {
            (Some(store), harness) => (store, harness),
            (None, Some(harness)) => (harness.fresh().await, Some(harness)),
            (None, None) => {
                let harness: Box<dyn Harness> = Box::new(SqliteHarness::new(true));
                (harness.fresh().await, Some(harness))
            }
        };
        let workspaces = tempfile::tempdir().expect("a temporary directory for workspaces");
        let files = Arc::clone(&store);
        let secrets = Some(gateway_services::secrets::SecretBox::generate());
        let environments =
            Environments::new(self.host, workspaces.path(), self.environments, self.providers, files, secrets);
        let mut backends = BackendRegistry::new();
        for (backend_ref, make) in self.backends {
            backends.register(backend_ref, make(&environments));
        }
        let offer = self
            .offer
            .unwrap_or_else(|| offer_of(environments.offers(), environments.checks_out_repositories(), &backends));
        let config = RuntimeConfig {
            instance: self.instance,
            workers: self.workers,
            coordinator: self.coordinator,
            offer,
            metrics: Default::default(),
        };
        let runtime = Runtime::assemble(store, config, environments, backends);
        TestGateway { runtime, workspaces, _harness: harness }
    }
}
