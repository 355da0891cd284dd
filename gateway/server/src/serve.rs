//! `gateway serve` and `gateway migrate`: the composition root.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_core::placement::Offer;
use gateway_managed_agents::ManagedAgents;
use gateway_runtime::auth::{Authenticator, OwnNames};
use gateway_runtime::{
    Backend, BackendRegistry, Coordinator, CoordinatorOptions, NativeBackend, NativeConfig, PreviewBus, RetryPolicy,
    WorkerConfig, WorkerPool,
};
use gateway_store::{Store, StoreOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::compose;
use crate::config::{Config, redact_url};
use crate::http::{AppState, router};

/// What a build of the binary adds beyond configuration: the test-bed binary registers a
/// scripted backend here; the shipped binary adds nothing.
#[derive(Default, Clone)]
pub struct Extensions {
    pub backends: Vec<(BackendRef, Arc<dyn Backend>)>,
}

pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let options = StoreOptions { wakeups: config.wakeups, ..Default::default() };
    let store = gateway_store::open(&config.database_url, &options)
        .await
        .with_context(|| format!("opening the database at {}", redact_url(&config.database_url)))?;
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}

pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let store = open_store(config).await?;
    info!(database = %redact_url(&config.database_url), engine = store.engine(), "migrations applied");
    store.close().await;
    Ok(())
}

/// The running core of a gateway process: what `serve` and `acp` share.
pub struct Runtime {
    pub store: Arc<dyn Store>,
    pub coordinator: Coordinator,
    pub environments: Arc<gateway_runtime::Environments>,
    pub published: gateway_runtime::PublishedAgents,
    pub pool: WorkerPool,
    pub shutdown: CancellationToken,
}

impl Runtime {
    /// Stops claiming, finishes or releases running turns, closes the store.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.pool.shutdown().await;
        gateway_acp::shutdown().await;
        self.store.close().await;
    }
}

/// Opens the store, registers the backends, publishes configured agents and starts Workers.
pub async fn start_runtime(config: &Config, ext: Extensions) -> anyhow::Result<Runtime> {
    crate::state::prepare(config)?;
    let environments = compose::environments(config);
    let provider_offers = environments.offers();
    compose::startup_guard(config, &provider_offers.iter().map(|p| p.tier.clone()).collect::<Vec<_>>())?;
    let model = compose::model_client(config)?;
    let store = open_store(config).await?;
    let previews = PreviewBus::default();

    let mut backends = BackendRegistry::new();
    let native = NativeBackend::new(
        model,
        Some(Arc::clone(&environments)),
        NativeConfig { max_rounds: config.native.max_rounds, max_tokens: config.native.max_tokens },
    );
    backends.register(BackendRef::Native, Arc::new(native));
    for (r, b) in gateway_acp::backends(&compose::acp_executors(config), Arc::clone(&environments)) {
        backends.register(r, b);
    }
    let remotes = compose::a2a_remotes(config);
    for (r, b) in gateway_a2a::backends(&remotes) {
        backends.register(r, b);
    }
    if config.a2a.conformance_agent {
        let (r, b) = gateway_a2a::conformance_backend();
        backends.register(r, b);
    }
    for (r, b) in ext.backends {
        backends.register(r, b);
    }
    let offered = backends.offered();
    let mut offer = Offer { providers: provider_offers, ..Default::default() };
    for b in &offered {
        match b {
            BackendRef::Native => {}
            BackendRef::Acp { executor } => {
                offer.acp_executors.insert(executor.clone());
            }
            BackendRef::A2a { remote } => {
                offer.a2a_remotes.insert(remote.clone());
            }
            BackendRef::Builtin { name } => {
                offer.builtins.insert(name.clone());
            }
        }
    }
    let metrics = Arc::new(gateway_runtime::Metrics::default());
    let coordinator =
        Coordinator::new(Arc::clone(&store), previews.clone(), offer.clone(), CoordinatorOptions::default())
            .with_environments(Arc::clone(&environments))
            .with_metrics(Arc::clone(&metrics));
    let published = crate::publish::publish(config, &coordinator).await?;
    if !remotes.is_empty() {
        let store = Arc::clone(&store);
        tokio::spawn(async move { gateway_a2a::pin_remote_cards(store.as_ref(), &remotes).await });
    }
    let w = &config.workers;
    let pool = WorkerPool::start(
        Arc::clone(&store),
        backends,
        previews,
        WorkerConfig {
            instance: config.instance_name(),
            host: config.host_id(),
            workers: w.count,
            lease: Duration::from_secs(w.lease_secs),
            host_ttl: Duration::from_secs(w.host_ttl_secs),
            poll: Duration::from_millis(w.poll_ms),
            crash_budget: w.crash_budget,
            retry: RetryPolicy { max_retries: w.max_retries, ..Default::default() },
            shutdown_grace: Duration::from_secs(w.shutdown_grace_secs),
            providers: offer.providers.iter().map(|p| p.tier.clone()).collect(),
            metrics,
        },
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(Arc::clone(&environments).maintain(Arc::clone(&store), shutdown.child_token()));
    if !config.executors.acp.is_empty() {
        tokio::spawn(gateway_acp::maintain(coordinator.clone(), shutdown.child_token()));
    }
    Ok(Runtime { store, coordinator, environments, published, pool, shutdown })
}

pub async fn serve(config: Config, ext: Extensions) -> anyhow::Result<()> {
    let rt = start_runtime(&config, ext).await?;
    let shutdown = rt.shutdown.clone();
    // Without keys, requests must address one of this gateway's names (no DNS rebinding).
    let names = OwnNames::with_public_url(&config.public_url());
    let auth = Arc::new(Authenticator::new(Arc::clone(&rt.store)).with_names(names));
    let secrets = match compose::secret_box(&config, rt.coordinator.documents()).await {
        Ok(s) => s,
        Err(e) => {
            rt.stop().await;
            return Err(e);
        }
    };
    match auth.live_keys().await {
        Ok(0) => warn!(
            public_url = %config.public_url(),
            "no API keys configured: serving programs on this host only (any credentials accepted; \
             web pages, other hosts, and requests addressed to names other than localhost, loopback \
             addresses and the public_url host are refused); create a key with `gateway keys create` to serve them"
        ),
        Ok(n) => info!(keys = n, "API keys required (x-api-key or Authorization: Bearer)"),
        Err(e) => warn!(error = %e, "cannot count API keys"),
    }
    let managed_agents = ManagedAgents {
        coordinator: rt.coordinator.clone(),
        auth: Arc::clone(&auth),
        default_provider: ProviderTier(config.sandbox.clone()),
        keep_alive: Duration::from_secs(15),
        shutdown: shutdown.clone(),
    };
    let a2a = gateway_a2a::A2aContext {
        coordinator: rt.coordinator.clone(),
        agents: rt.published.clone(),
        auth: Arc::clone(&auth),
        public_url: config.public_url(),
        secrets,
        allow_private_push_targets: config.a2a.allow_private_push_targets,
        shutdown: shutdown.clone(),
    };
    tokio::spawn(gateway_a2a::run_push_deliveries(a2a.clone()));
    let acp = config.acp.websocket.then(|| gateway_acp::AcpContext {
        coordinator: rt.coordinator.clone(),
        agents: rt.published.clone(),
        auth: Some(Arc::clone(&auth)),
        workspace_roots: Some(config.acp.workspace_roots.iter().map(std::path::PathBuf::from).collect()),
        shutdown: shutdown.clone(),
    });
    let app =
        router(AppState { coordinator: rt.coordinator.clone(), auth: Arc::clone(&auth) }, managed_agents, a2a, acp);
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?
        .tap_io(|tcp| {
            // Small SSE frames must not wait for Nagle plus delayed ACK.
            if let Err(e) = tcp.set_nodelay(true) {
                warn!(error = %e, "could not set TCP_NODELAY");
            }
        });
    info!(
        listen = %config.listen,
        database = %redact_url(&config.database_url),
        engine = rt.store.engine(),
        instance = %config.instance_name(),
        host = %config.host_id(),
        model = %config.model,
        sandbox = %config.sandbox,
        "gateway serving"
    );

    tokio::spawn(watch_signals(shutdown.clone()));
    let http = axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let http = tokio::spawn(async move { http.await });

    shutdown.cancelled().await;
    info!("shutting down: no new claims, finishing or releasing running turns");
    let Runtime { store, pool, .. } = rt;
    pool.shutdown().await;
    gateway_acp::shutdown().await;
    match tokio::time::timeout(Duration::from_secs(5), http).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "HTTP server ended with an error"),
        Ok(Err(e)) => warn!(error = %e, "HTTP server task failed"),
        Err(_) => warn!("open connections did not close within 5s; exiting anyway"),
    }
    store.close().await;
    info!("stopped");
    Ok(())
}

/// `gateway acp`: one editor on stdin/stdout; the process runs its own Workers.
pub async fn acp(config: Config, ext: Extensions, agent: Option<String>) -> anyhow::Result<()> {
    let rt = start_runtime(&config, ext).await?;
    let ctx = gateway_acp::AcpContext {
        coordinator: rt.coordinator.clone(),
        agents: rt.published.clone(),
        auth: None,
        workspace_roots: None,
        shutdown: rt.shutdown.clone(),
    };
    tokio::spawn(watch_signals(rt.shutdown.clone()));
    let result = tokio::select! {
        r = gateway_acp::serve_stdio(ctx, agent) => r,
        _ = rt.shutdown.cancelled() => Ok(()),
    };
    rt.stop().await;
    result
}

/// SIGTERM or SIGINT starts a graceful shutdown.
async fn watch_signals(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers; stop the process with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received"),
        _ = int.recv() => info!("SIGINT received"),
    }
    token.cancel();
}

/// `gateway keys …`: API keys are made, listed and revoked against the configured database.
pub async fn keys(config: &Config, command: crate::cli::KeysCommand) -> anyhow::Result<()> {
    use crate::cli::KeysCommand;
    let store = open_store(config).await?;
    let result = async {
        match command {
            KeysCommand::Create { name } => {
                let key = gateway_runtime::auth::generate_key();
                let stored = store.create_api_key(&name, &key.hash).await?;
                info!(id = %stored.id, name = %stored.name, "API key created; it is shown once, on stdout");
                // The secret goes to stdout only, so it can be captured; never to the logs.
                println!("{}", key.secret);
            }
            KeysCommand::List => {
                for k in store.list_api_keys().await? {
                    let state = if k.revoked_at.is_some() { "revoked" } else { "active" };
                    println!("{}\t{}\t{}\t{}", k.id, state, k.created_at.to_rfc3339(), k.name);
                }
            }
            KeysCommand::Revoke { id } => {
                let id = gateway_core::ApiKeyId::parse(&id)?;
                if !store.revoke_api_key(&id).await? {
                    anyhow::bail!("no active key {id}");
                }
                info!(%id, "API key revoked (takes effect within 10 s)");
            }
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    store.close().await;
    result
}
