//! The runtime assembly's shutdown (`Runtime::stop`): the signal, then the Workers, then every
//! tracked task, and only then the store.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::content::ContentBlock;
use gateway_core::event::{EventPayload, NewEvent};
use gateway_core::run::RunState;
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{AgentSelection, CreateSession};
use gateway_store::conformance::harness::SqliteHarness;
use gateway_store::conformance::{Harness, agent_spec, env_spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_returns_only_after_every_task_ended_and_closes_the_store_last() {
    let harness = SqliteHarness::new(true);
    let store = harness.fresh().await;
    // Another handle on the database: it stays open when the gateway closes its own.
    let observer = harness.second(&store).await;
    let gw = TestGateway::builder()
        .store(store)
        .scripted()
        .local_sandbox()
        .workers(TestGateway::quick_workers())
        .build()
        .await;

    // A turn that is still running when the process stops.
    let agent = gw.coordinator.create_agent(agent_spec("scripted")).await.unwrap();
    let env = gw.coordinator.create_environment(env_spec("env")).await.unwrap();
    let req = CreateSession {
        agent: AgentSelection { id: agent.id, version: None, overrides: None },
        environment_id: env.id,
        title: None,
        metadata: Default::default(),
        resources: vec![],
        initial_inputs: vec![],
    };
    let session = gw.coordinator.create_session(req).await.unwrap().0;
    let sleep = NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text("sleep 60000")] });
    gw.coordinator.submit(&session.id, vec![sleep]).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while observer.active_runs(&session.id).await.unwrap()[0].state != RunState::Running {
        assert!(tokio::time::Instant::now() < deadline, "the run was never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A background task that still needs the store for a while after the signal, as an adapter's
    // task releasing its leases does.
    let used: Arc<Mutex<Option<bool>>> = Arc::default();
    let (probe, store, signal) = (Arc::clone(&used), Arc::clone(&gw.store), gw.shutdown.clone());
    gw.tasks.spawn(async move {
        signal.cancelled().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open = store.ping().await.is_ok();
        *probe.lock().unwrap() = Some(open);
    });
    let tasks = gw.tasks.clone();

    gw.stop().await;
    assert_eq!(*used.lock().unwrap(), Some(true), "the task ended before stop returned, on a store still open");
    assert!(tasks.is_empty(), "no tracked task is alive when stop returns");
    let run = observer.active_runs(&session.id).await.unwrap().remove(0);
    assert_eq!((run.state, run.lease_owner), (RunState::Queued, None), "the running turn was released, not left");
}
