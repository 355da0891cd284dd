//! The Backend conformance suite (`gateway_runtime::testing::backends`) on the ACP backend,
//! against the in-memory fake agent ([`common::fake_agent`]), on SQLite and PostgreSQL. The
//! effect is a prompt the agent received.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::FakeConnector;
use gateway_acp::ExecutorConfig;
use gateway_acp::backend::{AcpBackend, ProcessTable};
use gateway_core::agent::BackendRef;
use gateway_core::environment::{EnvironmentConfig, Provisioning};
use gateway_core::session::Session;
use gateway_runtime::testing::{BackendUnderTest, TestGateway, TestGatewayBuilder, Turn};
use gateway_runtime::{AgentSelection, CreateSession, EnvironmentsConfig};
use gateway_store::conformance::{agent_spec, env_spec};

/// The ACP backend on a fake agent. A crash of the gateway kills its agent processes (they
/// are its children) unless `agent_survives` (only the Workers died: the process table, and
/// the prompt in flight, are still there).
struct Acp {
    fake: Arc<FakeConnector>,
    processes: Arc<ProcessTable>,
    agent_survives: bool,
}

impl Acp {
    fn new(agent_survives: bool) -> Self {
        Self { fake: FakeConnector::new(Default::default()), processes: Arc::default(), agent_survives }
    }

    fn prompts(&self) -> Vec<String> {
        self.fake.seen.prompts.lock().unwrap().clone()
    }
}

#[async_trait]
impl BackendUnderTest for Acp {
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder {
        let (connector, table) = (Arc::clone(&self.fake), Arc::clone(&self.processes));
        let executor = ExecutorConfig { turn_timeout: Duration::from_secs(30), ..Default::default() };
        gateway
            .backend_with(BackendRef::Acp { executor: "fake".into() }, move |envs| {
                Arc::new(AcpBackend::with_connector("fake".into(), executor, Arc::clone(envs), table, connector))
            })
            .local_sandbox()
            .environments(EnvironmentsConfig { idle: Duration::from_secs(3600), ..Default::default() })
    }

    async fn session(&self, gw: &TestGateway) -> Session {
        let mut agent = agent_spec("fake");
        agent.backend = BackendRef::Acp { executor: "fake".into() };
        let agent = gw.coordinator.create_agent(agent).await.unwrap();
        let mut env = env_spec("eager");
        if let EnvironmentConfig::Cloud(c) = &mut env.config {
            c.provisioning = Provisioning::Eager;
        }
        let env = gw.coordinator.create_environment(env).await.unwrap();
        let req = CreateSession {
            budget: None,
            agent: AgentSelection { id: agent.id, version: None, overrides: None },
            environment_id: env.id,
            title: None,
            metadata: Default::default(),
            resources: vec![],
            initial_inputs: vec![],
            vault_ids: Vec::new(),
            client_tool_servers: Vec::new(),
        };
        gw.coordinator.create_session(req).await.unwrap().0
    }

    fn answer(&self, word: &str) -> Turn {
        Turn::new(format!("echo {word}"), word, Duration::ZERO)
    }

    fn effect_then_work(&self, word: &str, work: Duration) -> Turn {
        Turn::new(format!("work {} {word}", work.as_millis()), format!("done {word}"), work)
    }

    async fn working(&self, _gw: &TestGateway, _session: &Session) -> bool {
        // The backend records a prompt as sent (a fenced binding) before it sends it.
        !self.prompts().is_empty()
    }

    async fn effects(&self, _gw: &TestGateway, _session: &Session) -> Option<usize> {
        Some(self.prompts().iter().filter(|p| p.starts_with("work ")).count())
    }

    async fn crash(&self, gw: &mut TestGateway, session: &Session) {
        gw.crash_workers().await;
        if !self.agent_survives {
            self.processes.close(&session.id).await;
        }
    }

    fn lost_claim_failure(&self) -> Option<&'static str> {
        // It never sends a prompt again: a turn whose agent is gone fails saying so.
        (!self.agent_survives).then_some("lost mid-turn")
    }
}

mod sqlite {
    use gateway_store::conformance::harness::SqliteHarness;
    gateway_runtime::backend_suite!(SqliteHarness::new(true), super::Acp::new(false));

    /// Only the Workers crashed: the agent is still answering the prompt, and the new claim
    /// consumes it to the end (never sending it again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_surviving_agent_finishes_the_turn_of_a_crashed_worker() {
        let harness = SqliteHarness::new(true);
        let backend = super::Acp::new(true);
        gateway_runtime::testing::backends::resumable_after_a_lost_claim_and_an_effect_is_never_repeated(
            &harness, &backend,
        )
        .await;
    }
}

mod postgres {
    use gateway_store::conformance::harness::PgHarness;
    gateway_runtime::backend_suite!(PgHarness::new(true), super::Acp::new(false));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_surviving_agent_finishes_the_turn_of_a_crashed_worker() {
        let harness = PgHarness::new(true);
        let backend = super::Acp::new(true);
        gateway_runtime::testing::backends::resumable_after_a_lost_claim_and_an_effect_is_never_repeated(
            &harness, &backend,
        )
        .await;
    }
}
