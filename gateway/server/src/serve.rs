//! `gateway serve`, `gateway acp` and `gateway migrate`: the composition root.
//!
//! Both serving commands run the one runtime assembly ([`Runtime::assemble`]) and stop it the
//! one way ([`Runtime::stop`]): every background task started here (card pinning, ACP
//! maintenance, push deliveries, the signal watcher, the HTTP server) is spawned on the
//! runtime's task tracker and watches its shutdown signal, so the store closes only after
//! all of them ended.

use gateway_models::ModelClient;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway_acp::backend::ProcessTable;
use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_face::FaceContext;
use gateway_managed_agents::ManagedAgents;
use gateway_native::McpAccess;
use gateway_runtime::assembly::offer_of;
use gateway_runtime::environment::offers_of;
use gateway_runtime::{Backend, CoordinatorOptions, Runtime, RuntimeConfig};
use gateway_services::auth::{Authenticator, OwnNames};
use gateway_services::secrets::SecretBox;
use gateway_services::vaults::VaultService;
use gateway_services::{Metrics, PublishedAgents};
use gateway_store::{Store, StoreMetrics, StoreOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::compose;
use crate::config::{Config, redact_url};
use crate::http::{AppState, router};

/// How long open HTTP connections get to close after the shutdown signal.
const CONNECTIONS_GRACE: Duration = Duration::from_secs(5);

/// What a build of the binary adds beyond configuration: the test-bed binary registers a
/// scripted backend here; the shipped binary adds nothing.
#[derive(Default, Clone)]
pub struct Extensions {
    pub backends: Vec<(BackendRef, Arc<dyn Backend>)>,
}

pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    open_measured_store(config, StoreMetrics::default()).await
}

/// [`open_store`], recording its commits in `metrics` (which the process's registry shows).
async fn open_measured_store(config: &Config, metrics: StoreMetrics) -> anyhow::Result<Arc<dyn Store>> {
    let options = StoreOptions { wakeups: config.wakeups, metrics, ..Default::default() };
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

/// What `serve` and `acp` share: the assembled runtime, the agents published from the file,
/// and the ACP agent processes (shared by the backends of every executor and the editor face).
pub struct Started {
    pub runtime: Runtime,
    pub published: PublishedAgents,
    pub processes: Arc<ProcessTable>,
    /// Seals secrets at rest (push credentials, webhook secrets, repository tokens).
    pub secrets: SecretBox,
    /// The open files limit in force (raised at start).
    pub fd_limit: u64,
    /// Vaults: credentials for MCP servers, sealed with `secrets`.
    pub vaults: Arc<VaultService>,
    /// How MCP servers are reached (the native loop's tool source, credential checks).
    pub mcp: Arc<McpAccess>,
    /// The MCP servers editors run on their own machines, through their connections.
    pub channels: Arc<gateway_acp::editor::EditorChannels>,
}

/// Raises the open files limit (see [`raise_fd_limit`]), checks the sandbox guard, opens the store, assembles the runtime (its Workers start),
/// publishes configured agents and starts the background tasks that need no HTTP server.
/// `model` is the configured model client ([`compose::model_client`], or the deferred one of
/// `gateway acp`).
pub async fn start_runtime(config: &Config, ext: Extensions, model: Arc<dyn ModelClient>) -> anyhow::Result<Started> {
    let fd_limit = raise_fd_limit();
    crate::state::prepare(config)?;
    let providers = compose::sandbox_providers(config);
    let offered = gateway_sandbox::providers::available(&providers);
    compose::startup_guard(config, &offered)?;
    let provider_offers = offers_of(&offered);
    let store_metrics = StoreMetrics::default();
    let store = open_measured_store(config, store_metrics.clone()).await?;
    if let Err(e) = claim_host(config, store.as_ref()).await {
        store.close().await;
        return Err(e);
    }
    let secrets = match compose::secret_box(config, store.as_ref()).await {
        Ok(s) => s,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    let environments = compose::environments(config, providers, Arc::clone(&store), secrets.clone(), fd_limit);

    let processes = Arc::new(ProcessTable::default());
    // Token endpoints of OAuth credentials are user-supplied URLs, like MCP servers: one rule.
    let vaults = Arc::new(
        VaultService::new(Arc::clone(&store), secrets.clone())
            .with_private_token_endpoints(config.mcp.allow_private_servers),
    );
    // MCP results are held to the output cap built-in tools have.
    // Servers editors run on their own machines (the relay's) are reached through their connections.
    let channels = Arc::new(gateway_acp::editor::EditorChannels::default());
    let mcp = Arc::new(
        McpAccess::new(&config.mcp, Arc::clone(&vaults), config.environments.limits.output_cap)
            .with_client_channels(Arc::clone(&channels) as Arc<dyn gateway_mcp::ClientChannels>),
    );
    let backends = match compose::backends(config, &environments, &processes, model, Arc::clone(&mcp), ext) {
        Ok(b) => b,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    let runtime_config = RuntimeConfig {
        instance: config.instance_name(),
        workers: Some(config.workers.clone()),
        coordinator: CoordinatorOptions {
            admission: config.admission.clone(),
            files: config.files.clone(),
            host_ttl: config.workers.host_ttl,
            ..CoordinatorOptions::default()
        },
        offer: offer_of(provider_offers, environments.checks_out_repositories(), &backends),
        metrics: Arc::new(Metrics::new(store_metrics)),
    };
    let runtime = Runtime::assemble(store, runtime_config, environments, backends);
    let published = match crate::publish::publish(config, &runtime.coordinator).await {
        Ok(p) => p,
        Err(e) => {
            runtime.stop().await;
            return Err(e);
        }
    };
    let remotes = config.remotes.a2a.clone();
    if !remotes.is_empty() {
        let (store, stop) = (Arc::clone(&runtime.store), runtime.shutdown.clone());
        runtime.tasks.spawn(async move {
            tokio::select! {
                _ = gateway_a2a::pin_remote_cards(store.as_ref(), &remotes) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
    if !config.executors.acp.is_empty() {
        let maintain =
            gateway_acp::maintain(runtime.coordinator.clone(), Arc::clone(&processes), runtime.shutdown.child_token());
        runtime.tasks.spawn(maintain);
    }
    Ok(Started { runtime, published, processes, secrets, fd_limit, vaults, mcp, channels })
}

/// Raises this process's soft limit on open files to its hard limit, so the gateway's own caps
/// (HTTP connections, live environments), not the kernel, decide when a client is refused. Returns the limit now in force.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                info!(from = soft, to = hard, "raised the open files limit");
                hard
            }
            Err(e) => {
                warn!(error = %e, limit = soft, "cannot raise the open files limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => {
            warn!(error = %e, "cannot read the open files limit");
            1024
        }
    }
}

pub async fn serve(config: Config, ext: Extensions) -> anyhow::Result<()> {
    let Started { runtime: rt, published, processes, secrets, fd_limit, vaults, mcp, channels } =
        start_runtime(&config, ext, compose::model_client(&config)?).await?;
    let shutdown = rt.shutdown.clone();
    let face = face_context(&rt, &config);
    let auth = Arc::clone(&face.auth);
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
    let webhook_settings = gateway_managed_agents::webhooks::WebhookSettings {
        endpoints: config.webhooks.clone(),
        allow_private_targets: config.allow_private_webhook_targets,
        delivery: config.webhook_delivery.clone(),
    };
    let webhooks = match gateway_managed_agents::webhooks::Webhooks::start(
        rt.coordinator.clone(),
        secrets.clone(),
        webhook_settings,
    )
    .await
    {
        Ok(w) => w,
        Err(e) => {
            rt.stop().await;
            return Err(e.into());
        }
    };
    let managed_agents = ManagedAgents {
        face: face.clone(),
        webhooks: Arc::clone(&webhooks),
        default_provider: ProviderTier(config.sandbox.clone()),
        keep_alive: Duration::from_secs(15),
        vaults,
        server_probe: Some(mcp as Arc<dyn gateway_services::vaults::ServerProbe>),
    };
    let a2a = gateway_a2a::A2aContext {
        face: face.clone(),
        agents: published.clone(),
        secrets,
        allow_private_push_targets: config.a2a.allow_private_push_targets,
        blocking_timeout: config.a2a.blocking_timeout,
    };
    let acp = config.acp.websocket.then(|| {
        let roots = config.acp.workspace_roots.iter().map(std::path::PathBuf::from).collect();
        acp_context(face.clone(), published.clone(), processes, Some(roots), None, Arc::clone(&channels))
    });
    let deliveries = gateway_runtime::delivery::Deliveries::new(rt.coordinator.clone(), config.instance_name())
        .with(Arc::clone(&webhooks) as Arc<dyn gateway_runtime::delivery::Channel>)
        .with(gateway_a2a::push_channel(&a2a));
    let mut faces: Vec<Box<dyn gateway_face::Face>> = vec![Box::new(managed_agents), Box::new(a2a)];
    faces.extend(acp.map(|acp| Box::new(acp) as Box<dyn gateway_face::Face>));
    let app = router(
        AppState { coordinator: rt.coordinator.clone(), auth: Arc::clone(&auth) },
        &faces,
        config.http.max_streams_per_key,
    );
    let listener = match tokio::net::TcpListener::bind(&config.listen).await {
        Ok(l) => l,
        Err(e) => {
            rt.stop().await;
            return Err(e).with_context(|| format!("binding {}", config.listen));
        }
    };
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

    rt.tasks.spawn(Arc::clone(&auth).watch_revocations(shutdown.clone()));
    // One delivery service for every outbound notification channel, joined with the
    // runtime's tasks on shutdown; each face's own background work, if it has any, too.
    rt.tasks.spawn(deliveries.run(shutdown.clone()));
    for face in &faces {
        face.background(&rt.tasks);
    }
    rt.tasks.spawn(watch_signals(shutdown.clone()));
    rt.tasks.spawn(crate::listen::serve(
        listener,
        app,
        config.http.clone(),
        fd_limit,
        shutdown.clone(),
        CONNECTIONS_GRACE,
    ));

    shutdown.cancelled().await;
    info!("shutting down: no new claims, finishing or releasing running turns");
    rt.stop().await;
    channels.stop().await;
    info!("stopped");
    Ok(())
}

/// `gateway acp`: one editor on stdin/stdout; the process runs its own Workers.
pub async fn acp(config: Config, ext: Extensions, agent: Option<String>) -> anyhow::Result<()> {
    // The process answers its editor even before it has a model credential: the editor can
    // then offer its user the sign-in `initialize` advertises (ADR 0026).
    let model = compose::DeferredModel::new(&config);
    let Started { runtime: rt, published, processes, channels, .. } =
        match start_runtime(&config, ext, model.clone()).await {
            Ok(started) => started,
            Err(e) => {
                // The editor shows the reason instead of "connection closed" (ADR 0029).
                tracing::error!(error = format!("{e:#}"), "gateway acp cannot start; answering the editor with why");
                gateway_acp::serve_failure(format!("{e:#}")).await;
                return Err(e);
            }
        };
    // The editor on stdin started this process: no caller to check, any workspace it names.
    let ctx = acp_context(face_context(&rt, &config), published, processes, None, Some(model), Arc::clone(&channels));
    rt.tasks.spawn(watch_signals(rt.shutdown.clone()));
    // Returns when the editor closes stdin, or at the shutdown signal.
    let result = match agent.as_deref().filter(|name| ctx.agents.get(name).is_none()) {
        Some(name) => {
            let known: Vec<&str> = ctx.agents.agents.iter().map(|(n, _)| n.as_str()).collect();
            let e = anyhow::anyhow!("--agent {name:?} is not a published agent (published: {})", known.join(", "));
            gateway_acp::serve_failure(format!("{e:#}")).await;
            Err(e)
        }
        None => gateway_acp::serve_stdio(ctx, agent).await,
    };
    rt.stop().await;
    channels.stop().await;
    result
}

/// Claims this process's host id with the directory its session workspaces live in: a live
/// process holding the same id (the hostname, by default) with its workspaces elsewhere would
/// run turns on workspaces this one does not have, and the other way round, so the start is
/// refused, naming the clash and the two ways out.
async fn claim_host(config: &Config, store: &dyn gateway_store::Store) -> anyhow::Result<()> {
    let root = crate::state::workspaces_root(config);
    let mine = std::fs::canonicalize(&root).or_else(|_| std::path::absolute(&root)).unwrap_or(root);
    let host = config.host_id();
    match store.claim_host(&host, &mine.display().to_string(), config.workers.host_ttl).await {
        Ok(()) => Ok(()),
        Err(gateway_store::StoreError::Guard(gateway_store::Guard::HostInUse { workspaces, .. })) => anyhow::bail!(
            "refusing to start: host id {host:?} is in use by another live gateway process on this database whose \
             session workspaces are in {workspaces}, not {}; give this process a host_id of its own \
             (GATEWAY_HOST_ID), or the same data_dir as the other",
            mine.display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context("claiming the host id")),
    }
}

/// What every face of this process shares, made once per process: its coordinator, its one
/// authenticator (keyless requests must address one of this gateway's names, so no DNS
/// rebinding), its `public_url`, and the runtime's shutdown signal and task tracker.
fn face_context(rt: &Runtime, config: &Config) -> FaceContext {
    let names = OwnNames::with_public_url(&config.public_url());
    let auth = Arc::new(Authenticator::new(Arc::clone(&rt.store)).with_names(names));
    FaceContext::of(rt, auth, config.public_url()).with_models(Arc::new(compose::model_catalog(config)))
}

/// The ACP editor face's context, for stdio and for `/acp` alike: `workspace_roots` `None` on
/// stdio (any absolute directory), the configured roots on the network.
fn acp_context(
    face: FaceContext,
    agents: PublishedAgents,
    processes: Arc<ProcessTable>,
    workspace_roots: Option<Vec<std::path::PathBuf>>,
    sign_in: Option<Arc<dyn gateway_acp::EditorAuth>>,
    channels: Arc<gateway_acp::editor::EditorChannels>,
) -> gateway_acp::AcpContext {
    gateway_acp::AcpContext { face, agents, workspace_roots, processes, sign_in, channels }
}

/// SIGTERM or SIGINT starts a graceful shutdown; the watcher ends with the shutdown, whatever
/// started it.
async fn watch_signals(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers; stop the process with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received"),
        _ = int.recv() => info!("SIGINT received"),
        _ = token.cancelled() => return,
    }
    token.cancel();
}

/// `gateway keys …`: API keys and environment keys are made, listed and revoked against the
/// configured database.
pub async fn keys(config: &Config, command: crate::cli::KeysCommand) -> anyhow::Result<()> {
    use crate::cli::KeysCommand;
    let store = open_store(config).await?;
    let executors = gateway_runtime::Executors::new(Arc::clone(&store), config.environments.executors());
    let env = |raw: Option<String>| raw.map(|e| gateway_core::EnvironmentId::parse(&e)).transpose();
    let result = async {
        match command {
            KeysCommand::Create { name, environment } => {
                let (stored, secret) = match env(environment)? {
                    Some(environment) => executors.create_key(&environment, &name).await?,
                    None => {
                        let key = gateway_services::auth::generate_key();
                        (store.create_api_key(&name, &key.hash).await?, key.secret)
                    }
                };
                let kind = if stored.environment_id.is_some() { "environment key" } else { "API key" };
                info!(id = %stored.id, name = %stored.name, "{kind} created; it is shown once, on stdout");
                // The secret goes to stdout only, so it can be captured; never to the logs.
                println!("{secret}");
            }
            KeysCommand::List { environment } => {
                let keys = match env(environment)? {
                    Some(environment) => executors.list_keys(&environment).await?,
                    None => store.list_api_keys().await?,
                };
                for k in keys {
                    let state = if k.revoked_at.is_some() { "revoked" } else { "active" };
                    println!("{}\t{}\t{}\t{}", k.id, state, k.created_at.to_rfc3339(), k.name);
                }
            }
            KeysCommand::Revoke { id, environment } => {
                let id = gateway_core::ApiKeyId::parse(&id)?;
                let revoked = match env(environment)? {
                    Some(environment) => executors.revoke_key(&environment, &id).await?,
                    None => store.revoke_api_key(&id).await?,
                };
                if !revoked {
                    anyhow::bail!("no active key {id}");
                }
                info!(%id, "key revoked (takes effect within 10 s)");
            }
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    store.close().await;
    result
}
