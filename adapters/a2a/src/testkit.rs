//! A gateway in a test: a fresh SQLite store, a Coordinator, Workers running the scripted
//! backend (as `native`), the conformance agent and any remotes, and the A2A context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_core::event::{Event, EventKind};
use gateway_core::placement::{NetworkControl, Offer, ProviderOffer};
use gateway_core::{AgentId, SessionId};
use gateway_runtime::auth::Authenticator;
use gateway_runtime::testing::ScriptedBackend;
use gateway_runtime::{
    BackendRegistry, Coordinator, CoordinatorOptions, PreviewBus, PublishedAgents, RetryPolicy, WorkerConfig,
    WorkerPool,
};
use gateway_store::Store;
use gateway_store::conformance::harness::SqliteHarness;
use gateway_store::conformance::{Harness, agent_spec, env_spec};
use tokio_util::sync::CancellationToken;

use crate::{A2aContext, RemoteConfig, RemoteLimits};

pub struct Kit {
    pub store: Arc<dyn Store>,
    pub ctx: A2aContext,
    pool: Option<WorkerPool>,
    _harness: SqliteHarness,
}

impl Kit {
    /// A gateway publishing `echo` (scripted), `conformance` and one agent per remote.
    pub async fn new(remotes: BTreeMap<String, RemoteConfig>, limits: RemoteLimits) -> Kit {
        let harness = SqliteHarness::new(true);
        let store = harness.fresh().await;
        let previews = PreviewBus::default();
        let mut offer = Offer {
            providers: vec![ProviderOffer {
                tier: ProviderTier::local(),
                network: NetworkControl::None,
                installs_packages: false,
            }],
            ..Default::default()
        };
        offer.builtins.insert(crate::conformance::BUILTIN_NAME.into());
        offer.a2a_remotes.extend(remotes.keys().cloned());
        let coordinator = Coordinator::new(
            Arc::clone(&store),
            previews.clone(),
            offer,
            CoordinatorOptions { subscription_poll: Duration::from_millis(50) },
        );
        let env = coordinator.create_environment(env_spec("a2a")).await.unwrap();
        let mut agents = PublishedAgents { environment: Some(env.id), ..Default::default() };
        let mut publish = async |name: &str, backend: BackendRef| {
            let mut spec = agent_spec(name);
            spec.backend = backend;
            let agent = coordinator.create_agent(spec).await.unwrap();
            agents.agents.push((name.to_owned(), agent.id));
        };
        publish("echo", BackendRef::Native).await;
        publish("conformance", BackendRef::Builtin { name: crate::conformance::BUILTIN_NAME.into() }).await;
        for name in remotes.keys() {
            publish(name, BackendRef::A2a { remote: name.clone() }).await;
        }
        let mut backends = BackendRegistry::new();
        backends.register(BackendRef::Native, Arc::new(ScriptedBackend));
        let (r, b) = crate::conformance_backend();
        backends.register(r, b);
        for (r, b) in crate::backends_with(&remotes, limits) {
            backends.register(r, b);
        }
        let pool = WorkerPool::start(
            Arc::clone(&store),
            backends,
            previews,
            WorkerConfig {
                instance: "test".into(),
                workers: 2,
                lease: Duration::from_secs(5),
                poll: Duration::from_millis(50),
                retry: RetryPolicy { max_retries: 1, base: Duration::from_millis(20), max: Duration::from_millis(50) },
                shutdown_grace: Duration::from_millis(200),
                providers: vec![ProviderTier::local()],
                ..Default::default()
            },
        );
        let ctx = A2aContext {
            coordinator,
            agents,
            auth: Arc::new(Authenticator::new(Arc::clone(&store))),
            public_url: "http://gateway.test".into(),
            secrets: gateway_runtime::SecretBox::generate(),
            allow_private_push_targets: true,
            shutdown: CancellationToken::new(),
        };
        Kit { store, ctx, pool: Some(pool), _harness: harness }
    }

    pub fn agent(&self, name: &str) -> AgentId {
        self.ctx.agents.get(name).cloned().unwrap()
    }

    /// A new idle session of the published agent `name`, on the default environment.
    pub async fn session(&self, name: &str) -> SessionId {
        let req = gateway_runtime::CreateSession {
            agent: gateway_runtime::AgentSelection { id: self.agent(name), version: None, overrides: None },
            environment_id: self.ctx.agents.environment.clone().unwrap(),
            title: None,
            metadata: Default::default(),
            resources: vec![],
            initial_inputs: vec![],
        };
        self.ctx.coordinator.create_session(req).await.unwrap().0.id
    }

    pub async fn shutdown(mut self) {
        self.ctx.shutdown.cancel();
        if let Some(pool) = self.pool.take() {
            pool.shutdown().await;
        }
    }

    /// The session's events once `done` holds for them (panics after `secs`).
    pub async fn wait_events(&self, session: &SessionId, secs: u64, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let events = self.store.events_after(session, 0, 1000).await.unwrap();
            if done(&events) {
                return events;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out; events: {:?}", kinds(&events));
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

pub fn kinds(events: &[Event]) -> Vec<EventKind> {
    events.iter().map(Event::kind).collect()
}

/// How many turns of the session ended.
pub fn turns_ended(events: &[Event]) -> usize {
    events.iter().filter(|e| e.kind() == EventKind::TurnEnded).count()
}
