//! A gateway in a test: the shipped assembly (`TestGateway`) on a fresh SQLite store, Workers
//! running the scripted backend (as `native`), the conformance agent and any remotes, and the
//! A2A context; a scripted remote A2A agent ([`remote`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::BackendRef;
use gateway_core::event::{Event, EventKind};
use gateway_core::{AgentId, SessionId};
use gateway_runtime::testing::TestGateway;
use gateway_services::PublishedAgents;
use gateway_services::auth::Authenticator;
use gateway_store::Store;
use gateway_store::conformance::{agent_spec, env_spec};

use crate::{A2aContext, RemoteConfig, RemoteLimits};

pub mod remote;

pub struct Kit {
    pub store: Arc<dyn Store>,
    pub ctx: A2aContext,
    gateway: TestGateway,
}

impl Kit {
    /// A gateway publishing `echo` (scripted), `conformance` and one agent per remote.
    pub async fn new(remotes: BTreeMap<String, RemoteConfig>, limits: RemoteLimits) -> Kit {
        let gateway = TestGateway::builder()
            .scripted()
            .backends([crate::conformance_backend()])
            .backends(crate::backends_with(&remotes, limits))
            .local_sandbox()
            .subscription_poll(Duration::from_millis(50))
            .workers(TestGateway::quick_workers())
            .build()
            .await;
        let coordinator = gateway.coordinator.clone();
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
        let store = Arc::clone(&gateway.store);
        let ctx = A2aContext {
            face: gateway_face::FaceContext::of(
                &gateway,
                Arc::new(Authenticator::new(Arc::clone(&store))),
                "http://gateway.test",
            ),
            agents,
            secrets: gateway_services::SecretBox::generate(),
            allow_private_push_targets: true,
            blocking_timeout: crate::DEFAULT_BLOCKING_TIMEOUT,
        };
        Kit { store, ctx, gateway }
    }

    pub fn agent(&self, name: &str) -> AgentId {
        self.ctx.agents.get(name).cloned().unwrap()
    }

    /// A new idle session of the published agent `name`, on the default environment.
    pub async fn session(&self, name: &str) -> SessionId {
        let req = gateway_runtime::CreateSession {
            budget: None,
            agent: gateway_runtime::AgentSelection { id: self.agent(name), version: None, overrides: None },
            environment_id: self.ctx.agents.environment.clone().unwrap(),
            title: None,
            metadata: Default::default(),
            resources: vec![],
            initial_inputs: vec![],
            vault_ids: Vec::new(),
            client_tool_servers: Vec::new(),
        };
        self.ctx.coordinator.create_session(req).await.unwrap().0.id
    }

    /// Stops the gateway as the binary does (signal, Workers, tasks, store).
    pub async fn shutdown(self) {
        self.gateway.stop().await;
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
