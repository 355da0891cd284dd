//! The Backend conformance suite (`gateway_runtime::testing::backends`) on the runtime's own
//! backends: the native loop (fake model, `local` sandbox) and the scripted test backend, each
//! on SQLite and PostgreSQL.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::Metadata;
use gateway_core::agent::{BackendRef, NamedToolConfig, PermissionPolicy, ToolConfig, ToolSpec};
use gateway_core::event::{EventKind, EventPayload};
use gateway_core::session::Session;
use gateway_models::fake::FakeModel;
use gateway_native::{NativeBackend, NativeConfig};
use gateway_runtime::testing::backends::log;
use gateway_runtime::testing::{BackendUnderTest, TestGateway, TestGatewayBuilder, Turn};
use gateway_runtime::{AgentSelection, CreateSession};
use gateway_store::conformance::{agent_spec, env_spec};

async fn session_of(gw: &TestGateway, agent: gateway_core::agent::AgentSpec) -> Session {
    let agent = gw.coordinator.create_agent(agent).await.unwrap();
    let env = gw.coordinator.create_environment(env_spec("env")).await.unwrap();
    let req = CreateSession {
        budget: None,
        agent: AgentSelection { id: agent.id, version: None, overrides: None },
        environment_id: env.id,
        title: None,
        metadata: Metadata::new(),
        resources: vec![],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    gw.coordinator.create_session(req).await.unwrap().0
}

/// The scripted backend: no external effect; `steps N 50` commits a step every 50 ms and
/// resumes after the last step committed.
struct Scripted;

#[async_trait]
impl BackendUnderTest for Scripted {
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder {
        gateway.scripted().local_sandbox()
    }

    async fn session(&self, gw: &TestGateway) -> Session {
        session_of(gw, agent_spec("scripted")).await
    }

    fn answer(&self, word: &str) -> Turn {
        Turn::new(word, format!("echo: {word}"), Duration::ZERO)
    }

    fn effect_then_work(&self, _word: &str, work: Duration) -> Turn {
        let n = (work.as_millis() / 50).max(2);
        Turn::new(format!("steps {n} 50"), format!("step {n}/{n}"), work)
    }

    async fn working(&self, gw: &TestGateway, session: &Session) -> bool {
        log(gw, session).await.iter().any(|e| e.kind() == EventKind::AgentMessage)
    }

    async fn effects(&self, _gw: &TestGateway, _session: &Session) -> Option<usize> {
        None
    }
}

/// The native loop on the fake model with the `local` sandbox: the effect is a line a bash
/// call appends to `marker` in the session's workspace.
struct Native;

#[async_trait]
impl BackendUnderTest for Native {
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder {
        gateway
            .backend_with(BackendRef::Native, |envs| {
                Arc::new(NativeBackend::new(
                    Arc::new(FakeModel::new()),
                    Some(Arc::clone(envs)),
                    NativeConfig::default(),
                ))
            })
            .local_sandbox()
    }

    async fn session(&self, gw: &TestGateway) -> Session {
        let mut agent = agent_spec("tools");
        agent.tools = vec![ToolSpec::Builtin {
            version: "agent_toolset_20260401".into(),
            default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAllow },
            configs: vec![NamedToolConfig {
                name: "bash".into(),
                enabled: true,
                permission_policy: PermissionPolicy::AlwaysAllow,
                extras: Default::default(),
            }],
        }];
        session_of(gw, agent).await
    }

    fn answer(&self, word: &str) -> Turn {
        Turn::new(word, format!("echo: {word}"), Duration::ZERO)
    }

    fn effect_then_work(&self, word: &str, work: Duration) -> Turn {
        let command = format!("echo {word} >> marker; sleep {:.3}; echo {word}", work.as_secs_f64());
        let message = format!("tool:bash {}", serde_json::json!({ "command": command }));
        // A call whose claim was lost is answered as indeterminate, never run again.
        Turn { message, reply: format!("done: {word}"), resumed: "done: indeterminate".into(), work }
    }

    async fn working(&self, gw: &TestGateway, session: &Session) -> bool {
        let started = log(gw, session).await.iter().any(|e| matches!(e.payload, EventPayload::ToolStarted { .. }));
        started && self.effects(gw, session).await.unwrap_or(0) > 0
    }

    async fn effects(&self, gw: &TestGateway, session: &Session) -> Option<usize> {
        let marker = gw.workspaces.path().join(session.id.as_str()).join("marker");
        Some(std::fs::read_to_string(marker).map(|m| m.lines().count()).unwrap_or(0))
    }
}

mod scripted {
    mod sqlite {
        use gateway_store::conformance::harness::SqliteHarness;
        gateway_runtime::backend_suite!(SqliteHarness::new(true), super::super::Scripted);
    }
    mod postgres {
        use gateway_store::conformance::harness::PgHarness;
        gateway_runtime::backend_suite!(PgHarness::new(true), super::super::Scripted);
    }
}

mod native {
    mod sqlite {
        use gateway_store::conformance::harness::SqliteHarness;
        gateway_runtime::backend_suite!(SqliteHarness::new(true), super::super::Native);
    }
    mod postgres {
        use gateway_store::conformance::harness::PgHarness;
        gateway_runtime::backend_suite!(PgHarness::new(true), super::super::Native);
    }
}
