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
use gateway_native::{Models, NativeBackend, NativeConfig};
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{
    AgentSelection, CreateSession, Delivery, EnvironmentsConfig, RuntimeError, SubscribeOptions, WorkerPool,
};
use gateway_sandbox::local::LocalProvider;
use gateway_sandbox::{Limits, SandboxProvider};
use gateway_store::conformance::{agent_spec, env_spec};

/// A gateway running the native backend on the fake model (or the Anthropic client against
/// the loopback stub), with Session Environments; derefs to its [`TestGateway`].
pub struct Native {
    gw: TestGateway,
}

impl std::ops::Deref for Native {
    type Target = TestGateway;
    fn deref(&self) -> &TestGateway {
        &self.gw
    }
}

pub fn offer(extra: &[&str]) -> Offer {
    let mut providers = vec![ProviderOffer {
        tier: ProviderTier::new("local"),
        network: NetworkControl::None,
        installs_packages: false,
    }];
    for tier in extra {
        providers.push(ProviderOffer {
            tier: ProviderTier((*tier).into()),
            network: NetworkControl::AllOrNothing,
            installs_packages: false,
        });
    }
    Offer { providers, ..Default::default() }
}

pub async fn native_with(model: impl Into<Models>, offered: Offer, idle: Duration) -> Native {
    native_on(model, offered, idle, vec![Arc::new(LocalProvider::new())]).await
}

pub async fn native_on(
    model: impl Into<Models>,
    offered: Offer,
    idle: Duration,
    providers: Vec<Arc<dyn SandboxProvider>>,
) -> Native {
    let model: Models = model.into();
    let builder = TestGateway::builder()
        .backend_with(BackendRef::Native, move |envs| {
            Arc::new(NativeBackend::new(model.clone(), Some(Arc::clone(envs)), NativeConfig::default()))
        })
        .offer(offered)
        .environments(EnvironmentsConfig { idle, limits: Limits::default(), ..Default::default() })
        .subscription_poll(Duration::from_millis(100))
        .no_workers();
    let builder = providers.into_iter().fold(builder, |b, p| b.sandbox(p));
    Native { gw: builder.build().await }
}

/// The fake model, the local provider, these environment settings, repositories offered.
pub async fn native_configured(environments: EnvironmentsConfig) -> Native {
    let model: Arc<dyn ModelClient> = Arc::new(FakeModel::new());
    let builder = TestGateway::builder()
        .backend_with(BackendRef::Native, move |envs| {
            Arc::new(NativeBackend::new(model, Some(Arc::clone(envs)), NativeConfig::default()))
        })
        .offer(Offer { repositories: true, ..offer(&[]) })
        .environments(environments)
        .subscription_poll(Duration::from_millis(100))
        .no_workers()
        .sandbox(Arc::new(LocalProvider::new()));
    Native { gw: builder.build().await }
}

pub async fn native() -> Native {
    native_with(Arc::new(FakeModel::new()), offer(&[]), Duration::from_secs(300)).await
}

impl Native {
    /// Workers of another process on this host (each call: one more, as after a restart).
    pub fn workers(&self, max_retries: u32) -> WorkerPool {
        let mut cfg = common::config("n", "h").config;
        cfg.retry.max_retries = max_retries;
        cfg.lease = Duration::from_secs(2);
        self.gw.workers(self.gw.identity("n"), cfg)
    }

    /// Workers of another process on this host running up to `max_turns` turns at once.
    pub fn workers_for(&self, max_turns: usize) -> WorkerPool {
        let mut cfg = common::config("n", "h").config;
        cfg.retry.max_retries = 0;
        cfg.lease = Duration::from_secs(2);
        cfg.max_turns = max_turns;
        self.gw.workers(self.gw.identity("n"), cfg)
    }

    pub async fn session(
        &self,
        agent: AgentSpec,
        env: EnvironmentConfig,
        resources: Vec<ResourceKind>,
    ) -> Result<Session, RuntimeError> {
        self.session_capped(agent, env, resources, None).await
    }

    /// [`Self::session`] with a budget.
    pub async fn session_capped(
        &self,
        agent: AgentSpec,
        env: EnvironmentConfig,
        resources: Vec<ResourceKind>,
        budget: Option<gateway_core::session::Budget>,
    ) -> Result<Session, RuntimeError> {
        let agent = self.coordinator.create_agent(agent).await.unwrap();
        let mut e = env_spec("env");
        e.config = env;
        let env = self.coordinator.create_environment(e).await.unwrap();
        let req = CreateSession {
            budget,
            agent: AgentSelection { id: agent.id, version: None, overrides: None },
            environment_id: env.id,
            title: None,
            metadata: Metadata::new(),
            resources,
            initial_inputs: vec![],
            vault_ids: Vec::new(),
            client_tool_servers: Vec::new(),
        };
        self.coordinator.create_session(req).await.map(|(s, _)| s)
    }

    pub async fn stream(
        &self,
        s: &Session,
        previews: bool,
    ) -> impl Stream<Item = Result<Delivery, RuntimeError>> + Send + 'static {
        let read = self.coordinator.get_session(&s.id).await.unwrap();
        self.coordinator.subscribe(&read, SubscribeOptions { after_seq: read.last_seq, previews, poll: None })
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

/// The typed error a turn ended with, if any: its kind and message.
pub fn session_error(es: &[Event]) -> Option<(gateway_core::event::ErrorKind, String)> {
    es.iter().find_map(|e| match &e.payload {
        EventPayload::SessionError { kind, message, .. } => Some((*kind, message.clone())),
        _ => None,
    })
}

/// A gateway whose native backend talks to the loopback Anthropic API stub (which records
/// every request), on the local provider.
pub async fn native_on_stub() -> (gateway_models::stub::StubServer, Native) {
    let stub = gateway_models::stub::StubServer::start().await;
    let client = gateway_models::anthropic::AnthropicClient::new(gateway_models::anthropic::AnthropicConfig::new(
        stub.base_url(),
        gateway_models::anthropic::Credential::ApiKey("k".into()),
    ))
    .unwrap();
    let n = native_with(Arc::new(client), offer(&[]), Duration::from_secs(300)).await;
    (stub, n)
}
