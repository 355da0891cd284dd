//! The assembly the native tests share: Coordinator + Workers + the fake model (or the
//! Anthropic client against the loopback stub) + Session Environments.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, events, say, turn_ended, until};
use futures::Stream;
use gateway_core::Metadata;
use gateway_core::agent::{AgentSpec, BackendRef, NamedToolConfig, PermissionPolicy, ToolConfig, ToolSpec};
use gateway_core::environment::{CloudConfig, EnvironmentConfig, Networking, Packages, ProviderTier, Provisioning};
use gateway_core::event::{Event, EventPayload};
use gateway_core::placement::{NetworkControl, Offer, ProviderOffer};
use gateway_core::session::{EnvironmentState, ResourceKind, Session};
use gateway_models::ModelClient;
use gateway_models::fake::FakeModel;
use gateway_runtime::{
    AgentSelection, BackendRegistry, Coordinator, CoordinatorOptions, CreateSession, Delivery, Environments,
    EnvironmentsConfig, NativeBackend, NativeConfig, PreviewBus, RuntimeError, SubscribeOptions, WorkerPool,
};
use gateway_sandbox::local::LocalProvider;
use gateway_sandbox::{Limits, SandboxProvider};
use gateway_store::Store;
use gateway_store::conformance::harness::SqliteHarness;
use gateway_store::conformance::{Harness, agent_spec, env_spec};

pub struct Native {
    pub store: Arc<dyn Store>,
    pub coordinator: Coordinator,
    pub envs: Arc<Environments>,
    pub previews: PreviewBus,
    pub root: tempfile::TempDir,
    pub model: Arc<dyn ModelClient>,
    _harness: SqliteHarness,
}

pub fn offer(extra: &[&str]) -> Offer {
    let mut providers =
        vec![ProviderOffer { tier: ProviderTier::local(), network: NetworkControl::None, installs_packages: false }];
    for tier in extra {
        providers.push(ProviderOffer {
            tier: ProviderTier((*tier).into()),
            network: NetworkControl::AllOrNothing,
            installs_packages: false,
        });
    }
    Offer { providers, ..Default::default() }
}

pub async fn native_with(model: Arc<dyn ModelClient>, offered: Offer, idle: Duration) -> Native {
    native_on(model, offered, idle, vec![Arc::new(LocalProvider::new())]).await
}

pub async fn native_on(
    model: Arc<dyn ModelClient>,
    offered: Offer,
    idle: Duration,
    providers: Vec<Arc<dyn SandboxProvider>>,
) -> Native {
    let harness = SqliteHarness::new(true);
    let store = harness.fresh().await;
    let root = tempfile::tempdir().unwrap();
    let envs = Environments::new(
        EnvironmentsConfig { host: "h".into(), root: root.path().to_owned(), limits: Limits::default(), idle },
        providers,
    );
    let previews = PreviewBus::default();
    let coordinator = Coordinator::new(
        Arc::clone(&store),
        previews.clone(),
        offered,
        CoordinatorOptions { subscription_poll: Duration::from_millis(100) },
    )
    .with_environments(Arc::clone(&envs));
    Native { store, coordinator, envs, previews, root, model, _harness: harness }
}

pub async fn native() -> Native {
    native_with(Arc::new(FakeModel::new()), offer(&[]), Duration::from_secs(300)).await
}

impl Native {
    pub fn workers(&self, max_retries: u32) -> WorkerPool {
        let mut backends = BackendRegistry::new();
        let backend =
            NativeBackend::new(Arc::clone(&self.model), Some(Arc::clone(&self.envs)), NativeConfig::default());
        backends.register(BackendRef::Native, Arc::new(backend));
        let mut cfg = common::config("n", "h");
        cfg.retry.max_retries = max_retries;
        cfg.lease = Duration::from_secs(2);
        cfg.providers = self.coordinator.offer().providers.iter().map(|p| p.tier.clone()).collect();
        WorkerPool::start(Arc::clone(&self.store), backends, self.previews.clone(), cfg)
    }

    pub async fn session(
        &self,
        agent: AgentSpec,
        env: EnvironmentConfig,
        resources: Vec<ResourceKind>,
    ) -> Result<Session, RuntimeError> {
        let agent = self.coordinator.create_agent(agent).await.unwrap();
        let mut e = env_spec("env");
        e.config = env;
        let env = self.coordinator.create_environment(e).await.unwrap();
        let req = CreateSession {
            agent: AgentSelection { id: agent.id, version: None, overrides: None },
            environment_id: env.id,
            title: None,
            metadata: Metadata::new(),
            resources,
            initial_inputs: vec![],
        };
        self.coordinator.create_session(req).await.map(|(s, _)| s)
    }

    pub async fn stream(
        &self,
        s: &Session,
        previews: bool,
    ) -> impl Stream<Item = Result<Delivery, RuntimeError>> + Send + 'static {
        let after_seq = self.coordinator.get_session(&s.id).await.unwrap().last_seq;
        self.coordinator.subscribe(&s.id, SubscribeOptions { after_seq, previews, poll: None }).await.unwrap()
    }

    /// Sends `text` and returns the deliveries of the turn it starts, up to its end.
    pub async fn turn(&self, s: &Session, text: &str) -> Vec<Event> {
        let stream = self.stream(s, false).await;
        self.coordinator.submit(&s.id, vec![say(text)]).await.unwrap();
        events(&until(stream, 30, turn_ended).await)
    }

    pub async fn state(&self, s: &Session) -> EnvironmentState {
        self.coordinator.get_session(&s.id).await.unwrap().environment_state
    }
}

pub fn toolset(policy: PermissionPolicy) -> AgentSpec {
    let mut a = agent_spec("tools");
    a.tools = vec![ToolSpec::Builtin {
        version: "agent_toolset_20260401".into(),
        default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAllow },
        configs: vec![NamedToolConfig {
            name: "bash".into(),
            enabled: true,
            permission_policy: policy,
            extras: Default::default(),
        }],
    }];
    a
}

pub fn cloud(provisioning: Provisioning, provider: &str) -> EnvironmentConfig {
    EnvironmentConfig::Cloud(Box::new(CloudConfig {
        networking: Networking::Unrestricted,
        packages: Packages::default(),
        provisioning,
        provider: ProviderTier(provider.into()),
    }))
}

pub fn tool_results(es: &[Event]) -> Vec<(String, bool)> {
    es.iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult { content, is_error, .. } => {
                Some((gateway_core::content::plain_text(content), *is_error))
            }
            _ => None,
        })
        .collect()
}
