//! The Backend conformance suite (`gateway_runtime::testing::backends`) on the A2A adapter's
//! backends, on SQLite and PostgreSQL: the outbound backend against the scripted remote
//! (`testkit::remote`; the effect is a message the remote received) and the built-in
//! conformance agent (no external effect).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::agent::BackendRef;
use gateway_core::event::EventKind;
use gateway_core::session::Session;
use gateway_runtime::testing::backends::log;
use gateway_runtime::testing::{BackendUnderTest, TestGateway, TestGatewayBuilder, Turn};
use gateway_runtime::{AgentSelection, CreateSession};
use gateway_store::conformance::{agent_spec, env_spec};

use crate::testkit::remote::{Fake, fake};
use crate::{RemoteConfig, RemoteLimits};

async fn session_of(gw: &TestGateway, backend: BackendRef) -> Session {
    let mut agent = agent_spec("agent");
    agent.backend = backend;
    let agent = gw.coordinator.create_agent(agent).await.unwrap();
    let env = gw.coordinator.create_environment(env_spec("a2a")).await.unwrap();
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

/// The outbound backend (`a2a:remote`) on a scripted remote, polling its tasks.
struct Outbound {
    remote: Arc<Fake>,
    url: String,
}

impl Outbound {
    async fn start() -> Self {
        let (remote, url) = fake(false).await;
        Self { remote, url }
    }

    fn work_messages(&self) -> usize {
        self.remote.messages().iter().filter(|m| m.starts_with("work ")).count()
    }
}

#[async_trait]
impl BackendUnderTest for Outbound {
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder {
        let remotes: BTreeMap<String, RemoteConfig> =
            [("remote".to_owned(), RemoteConfig { url: self.url.clone(), auth: None })].into();
        let limits = RemoteLimits {
            stream_idle: Duration::from_millis(300),
            turn_deadline: Duration::from_secs(30),
            poll_interval: Duration::from_millis(50),
            card_reuse: Duration::from_secs(30),
        };
        gateway.backends(crate::backends_with(&remotes, limits)).local_sandbox()
    }

    async fn session(&self, gw: &TestGateway) -> Session {
        session_of(gw, BackendRef::A2a { remote: "remote".into() }).await
    }

    fn answer(&self, word: &str) -> Turn {
        Turn::new(word, format!("echo: {word}"), Duration::ZERO)
    }

    fn effect_then_work(&self, word: &str, work: Duration) -> Turn {
        Turn::new(format!("work {} {word}", work.as_millis()), format!("done: {word}"), work)
    }

    async fn working(&self, gw: &TestGateway, session: &Session) -> bool {
        // Received by the remote, and recorded as sent (a fenced binding).
        let sent =
            gw.coordinator.bindings(&session.id).await.unwrap().get("a2a.sent_seq").is_some_and(|s| !s.is_empty());
        self.work_messages() > 0 && sent
    }

    async fn effects(&self, _gw: &TestGateway, _session: &Session) -> Option<usize> {
        Some(self.work_messages())
    }
}

/// The built-in conformance agent: `test-resubscribe-message-id` works 4 s, then answers.
struct Conformance;

#[async_trait]
impl BackendUnderTest for Conformance {
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder {
        gateway.backends([crate::conformance_backend()]).local_sandbox()
    }

    async fn session(&self, gw: &TestGateway) -> Session {
        session_of(gw, BackendRef::Builtin { name: crate::conformance::BUILTIN_NAME.into() }).await
    }

    fn answer(&self, word: &str) -> Turn {
        Turn::new(word, format!("Echo: {word}"), Duration::ZERO)
    }

    fn effect_then_work(&self, _word: &str, _work: Duration) -> Turn {
        Turn::new("test-resubscribe-message-id", "Resubscribe scenario done", Duration::from_secs(4))
    }

    async fn working(&self, gw: &TestGateway, session: &Session) -> bool {
        log(gw, session).await.iter().any(|e| e.kind() == EventKind::TurnStarted)
    }

    async fn effects(&self, _gw: &TestGateway, _session: &Session) -> Option<usize> {
        None
    }
}

mod outbound {
    mod sqlite {
        use gateway_store::conformance::harness::SqliteHarness;
        gateway_runtime::backend_suite!(SqliteHarness::new(true), super::super::Outbound::start().await);
    }
    mod postgres {
        use gateway_store::conformance::harness::PgHarness;
        gateway_runtime::backend_suite!(PgHarness::new(true), super::super::Outbound::start().await);
    }
}

mod conformance_agent {
    mod sqlite {
        use gateway_store::conformance::harness::SqliteHarness;
        gateway_runtime::backend_suite!(SqliteHarness::new(true), super::super::Conformance);
    }
    mod postgres {
        use gateway_store::conformance::harness::PgHarness;
        gateway_runtime::backend_suite!(PgHarness::new(true), super::super::Conformance);
    }
}
