//! The runtime assembly: its shutdown (`Runtime::stop`: the signal, then the Workers, then
//! every tracked task, and only then the store), and the handoff of admitted turns from its
//! Coordinator to its Workers.
#![allow(clippy::unwrap_used)]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{new_session, say};
use gateway_core::event::EventPayload;
use gateway_core::run::RunState;
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{AdmissionLimits, WorkerConfig};
use gateway_store::conformance::Harness;
use gateway_store::conformance::harness::SqliteHarness;

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
    let session = new_session(&gw).await;
    gw.coordinator.submit(&session.id, vec![say("sleep 60000")]).await.unwrap();
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

/// A message admitted while the process's Workers run is claimed by its own admission (the
/// input and the turn start in one commit) and run by those Workers; with the Workers
/// stopped, the run waits in the queue for whichever Workers start next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_hands_its_turn_to_the_running_workers_and_otherwise_queues_it() {
    let harness = SqliteHarness::new(true);
    let mut gw = handoff_rig(&harness, TestGateway::quick_workers()).await;
    let session = new_session(&gw).await;
    let settled = |gw: &TestGateway, n: u64| {
        let (store, id) = (Arc::clone(&gw.store), session.id.clone());
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let log = store.events_after(&id, 0, 100).await.unwrap();
                let ends = log.iter().filter(|e| matches!(e.payload, EventPayload::TurnEnded { .. })).count();
                if ends as u64 >= n {
                    return log;
                }
                assert!(tokio::time::Instant::now() < deadline, "turn {n} never ended: {log:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    let admitted = gw.coordinator.submit(&session.id, vec![say("hello")]).await.unwrap();
    let log = settled(&gw, 1).await;
    let start = log.iter().find(|e| matches!(e.payload, EventPayload::TurnStarted { .. })).unwrap();
    assert_eq!(start.seq, admitted[0].seq + 1, "the turn starts right after its input");
    assert_eq!(claimed(&gw), (1, 1), "claimed by the admission, run by the Workers");

    gw.stop_workers().await;
    gw.coordinator.submit(&session.id, vec![say("while stopped")]).await.unwrap();
    let waiting = gw.store.active_runs(&session.id).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!((waiting[0].state, waiting[0].lease_owner.clone()), (RunState::Queued, None), "no door: queued");
    gw.start_workers();
    settled(&gw, 2).await;
    assert_eq!(claimed(&gw), (2, 1), "the queued run was claimed by the Workers' own query");
    gw.stop().await;
}

/// A gateway with `workers` on a database of `harness` (which must outlive it), whose
/// admissions may hand their turns over. A busy test machine never makes it "late": the
/// handoff's own conditions are what these tests look at.
async fn handoff_rig(harness: &SqliteHarness, workers: WorkerConfig) -> TestGateway {
    TestGateway::builder()
        .store(harness.fresh().await)
        .scripted()
        .local_sandbox()
        .workers(workers)
        .admission(AdmissionLimits { max_lag: Duration::from_secs(600), ..AdmissionLimits::default() })
        .build()
        .await
}

/// Runs claimed by the process's Workers, and how many of them its admissions handed over.
fn claimed(gw: &TestGateway) -> (u64, u64) {
    (gw.metrics.runs_claimed.get(), gw.metrics.runs_handed_off.get())
}

/// Handoffs are for a lightly loaded process: with four turns running, the next admission
/// leaves its run to the Workers' batched claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_running_several_turns_leaves_new_ones_to_its_claim_query() {
    let harness = SqliteHarness::new(true);
    let gw = handoff_rig(&harness, WorkerConfig { max_turns: 16, ..TestGateway::quick_workers() }).await;
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(new_session(&gw).await);
    }
    for s in &sessions {
        gw.coordinator.submit(&s.id, vec![say("sleep 5000")]).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for s in &sessions {
        while gw.store.active_runs(&s.id).await.unwrap()[0].state != RunState::Running {
            assert!(tokio::time::Instant::now() < deadline, "a run was never claimed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A Worker counts a claim when it starts the turn, just after the claim committed.
    while claimed(&gw).0 < 5 {
        assert!(tokio::time::Instant::now() < deadline, "a claim was never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(claimed(&gw), (5, 4), "four handed off while few ran, the fifth claimed by the Workers");
    gw.stop().await;
}
