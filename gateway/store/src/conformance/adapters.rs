//! Bindings, documents and the delivery outbox.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::{Harness, agent_text, msg, session, session_with, terms, worker};
use crate::{
    AdmissionWrites, Commit, DeliveryClaim, DeliveryState, Guard, NewDelivery, RunOutcome, Settlement, StoreError,
};

pub async fn bindings_commit_with_their_events_under_the_fence(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(150)).await.unwrap().unwrap();
    let commit = Commit {
        events: vec![agent_text("sent to the remote")],
        environment: None,
        bindings: vec![("remote.task".into(), "task-1".into())],
    };
    s.commit(&a.fence, commit).await.unwrap();
    assert_eq!(s.bindings(&sess.id).await.unwrap(), BTreeMap::from([("remote.task".to_owned(), "task-1".to_owned())]));
    super::outlive(150).await;
    let b = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().unwrap();
    let stale = Commit { events: vec![], environment: None, bindings: vec![("remote.task".into(), "task-2".into())] };
    assert!(s.commit(&a.fence, stale).await.unwrap_err().is_fenced());
    assert_eq!(s.bindings(&sess.id).await.unwrap()["remote.task"], "task-1", "a fenced binding is not written");
    // More keys than one statement takes, and a key given twice: the last value wins.
    let mut many: Vec<(String, String)> = vec![("remote.task".into(), "task-2b".into())];
    many.extend((0..40).map(|i| (format!("k/{i:02}"), i.to_string())));
    many.push(("remote.task".into(), "task-3".into()));
    s.commit(&b.fence, Commit { events: vec![], environment: None, bindings: many }).await.unwrap();
    let bound = s.bindings(&sess.id).await.unwrap();
    assert_eq!((bound["remote.task"].as_str(), bound.len(), bound["k/39"].as_str()), ("task-3", 41, "39"));
    // A stale settlement writes none of its bindings; the owner's writes them with the end.
    let stale = Settlement {
        events: vec![],
        outcome: RunOutcome::Completed,
        bindings: vec![("remote.task".into(), "task-4".into())],
    };
    assert!(s.settle(&a.fence, stale).await.unwrap_err().is_fenced());
    assert_eq!(s.bindings(&sess.id).await.unwrap()["remote.task"], "task-3", "a fenced settlement writes nothing");
    let last = Settlement {
        events: vec![agent_text("the answer")],
        outcome: RunOutcome::Completed,
        bindings: vec![("remote.task".into(), "task-5".into()), ("remote.answered".into(), "7".into())],
    };
    let ended = s.settle(&b.fence, last).await.unwrap();
    assert_eq!(ended.len(), 1, "the settlement's own events: {ended:?}");
    let bound = s.bindings(&sess.id).await.unwrap();
    assert_eq!(
        (bound["remote.answered"].as_str(), bound["remote.task"].as_str(), bound.len()),
        ("7", "task-5", 42),
        "the settlement's bindings commit with it"
    );
}

pub async fn snapshots_change_only_before_history(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session(&s).await;
    let mut snapshot = sess.snapshot.clone();
    snapshot.agent.spec.system = Some("other agent".into());
    let replaced = s.replace_snapshot(&sess.id, snapshot.clone()).await.unwrap();
    assert_eq!(replaced.snapshot.agent.spec.system.as_deref(), Some("other agent"));
    // Opened (a run with no inputs): not while its run is there, again once it ended.
    assert!(s.open_session(&sess.id).await.unwrap());
    let refused = s.replace_snapshot(&sess.id, snapshot.clone()).await;
    assert!(matches!(refused, Err(StoreError::Guard(Guard::SessionStarted(_)))), "{refused:?}");
    // The refused write held the run's row until its rollback, which runs just after the
    // refusal returns (on PostgreSQL, in a task of its own): a claim skips a locked run
    // (`SKIP LOCKED`) and takes it at its next attempt.
    let mut claim = None;
    for _ in 0..100 {
        claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap();
        if claim.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let claim = claim.expect("the opened session's run is claimed once the refused write rolled back");
    let ended = gateway_core::event::NewEvent::new(gateway_core::event::EventPayload::TurnEnded {
        stop: gateway_core::event::StopReason::EndTurn,
    });
    s.settle(&claim.fence, Settlement { events: vec![ended], outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    s.replace_snapshot(&sess.id, snapshot.clone()).await.unwrap();
    s.submit_inputs(&sess.id, vec![msg("hi")], AdmissionWrites::default()).await.unwrap();
    assert!(matches!(s.replace_snapshot(&sess.id, snapshot).await, Err(StoreError::Guard(Guard::SessionStarted(_)))));
}

pub async fn documents_are_versioned_and_listed_by_prefix(h: &dyn Harness) {
    let s = h.fresh().await;
    let d = s.put_document("ns", "task/1", &json!({"state": "working"}), None).await.unwrap();
    assert_eq!(d.version, 1);
    assert!(matches!(
        s.put_document("ns", "task/1", &json!({}), None).await,
        Err(StoreError::Guard(Guard::DocumentConflict { .. }))
    ));
    let d2 = s.put_document("ns", "task/1", &json!({"state": "done"}), Some(1)).await.unwrap();
    assert_eq!(d2.version, 2);
    assert!(
        matches!(
            s.put_document("ns", "task/1", &json!({}), Some(1)).await,
            Err(StoreError::Guard(Guard::DocumentConflict { .. }))
        ),
        "a stale version is refused"
    );
    assert_eq!(s.get_document("ns", "task/1").await.unwrap().unwrap().body, json!({"state": "done"}));
    assert!(s.get_document("other", "task/1").await.unwrap().is_none(), "namespaces are separate");
    for k in ["task/2", "task/3", "push/1", "task_%"] {
        s.put_document("ns", k, &json!({"k": k}), None).await.unwrap();
    }
    let tasks = s.list_documents("ns", "task/", None, 10).await.unwrap();
    assert_eq!(tasks.iter().map(|d| d.key.as_str()).collect::<Vec<_>>(), vec!["task/1", "task/2", "task/3"]);
    let page = s.list_documents("ns", "task/", Some("task/1"), 1).await.unwrap();
    assert_eq!(page[0].key, "task/2");
    assert!(s.delete_document("ns", "task/2").await.unwrap());
    assert!(!s.delete_document("ns", "task/2").await.unwrap());
}

fn delivery(topic: &str, body: &str) -> NewDelivery {
    NewDelivery {
        topic: topic.into(),
        url: "http://127.0.0.1:9/hook".into(),
        headers: BTreeMap::from([("authorization".into(), "Bearer t".into())]),
        body: body.into(),
    }
}

/// Up to ten due deliveries of any topic, leased to `owner` for `lease`.
fn any_topic(owner: &str, lease: Duration) -> DeliveryClaim<'_> {
    DeliveryClaim { owner, topics: "", limit: 10, lease }
}

pub async fn the_outbox_leases_retries_and_keeps_topic_order(h: &dyn Harness) {
    let s = h.fresh().await;
    assert_eq!(s.outbox_stats().await.unwrap(), crate::OutboxStats::default(), "empty");
    let ids = s.enqueue_deliveries(vec![delivery("a", "a1"), delivery("a", "a2"), delivery("b", "b1")]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let stats = s.outbox_stats().await.unwrap();
    assert_eq!(stats.pending, 3);
    assert!(stats.oldest_age >= Duration::from_millis(20) && stats.oldest_age < Duration::from_secs(60), "{stats:?}");
    let first = s.claim_deliveries(any_topic("w1", Duration::from_secs(30))).await.unwrap();
    let bodies: Vec<&str> = first.iter().map(|d| d.body.as_str()).collect();
    assert_eq!(bodies.len(), 2, "one per topic: a2 waits for a1 ({bodies:?})");
    assert!(bodies.contains(&"a1") && bodies.contains(&"b1"));
    assert_eq!(first.iter().find(|d| d.body == "a1").unwrap().headers["authorization"], "Bearer t");
    assert!(s.claim_deliveries(any_topic("w2", Duration::from_secs(30))).await.unwrap().is_empty(), "leased");

    let a1 = first.iter().find(|d| d.body == "a1").unwrap().id.clone();
    s.retry_delivery(&a1, Duration::from_millis(300), "connection refused").await.unwrap();
    assert!(
        s.claim_deliveries(any_topic("w2", Duration::from_secs(30))).await.unwrap().is_empty(),
        "a1 backs off; a2 still waits"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = s.claim_deliveries(any_topic("w2", Duration::from_secs(30))).await.unwrap();
    assert_eq!(again.iter().map(|d| (d.body.as_str(), d.attempts)).collect::<Vec<_>>(), vec![("a1", 1)]);
    s.delivered(&a1).await.unwrap();
    assert_eq!(s.delivery_state(&a1).await.unwrap(), Some((DeliveryState::Delivered, 2)));
    // w1's lease on a1 had expired; its late retry must not undo w2's delivery.
    s.retry_delivery(&a1, Duration::from_millis(1), "late answer of a stale deliverer").await.unwrap();
    assert_eq!(s.delivery_state(&a1).await.unwrap(), Some((DeliveryState::Delivered, 2)), "final stays final");
    let next = s.claim_deliveries(any_topic("w2", Duration::from_secs(30))).await.unwrap();
    assert_eq!(next.iter().map(|d| d.body.as_str()).collect::<Vec<_>>(), vec!["a2"]);
    s.fail_delivery(&next[0].id, "gave up").await.unwrap();
    assert_eq!(s.delivery_state(&ids[1]).await.unwrap().map(|x| x.0), Some(DeliveryState::Failed));
    assert_eq!(s.outbox_stats().await.unwrap().pending, 1, "delivered and failed ones are not pending: b1 is");

    // An expired lease makes a delivery due again (the deliverer crashed); b1 is still leased.
    let c1 = s.enqueue_deliveries(vec![delivery("c", "c1")]).await.unwrap().remove(0);
    let leased = s.claim_deliveries(any_topic("w3", Duration::from_millis(100))).await.unwrap();
    assert_eq!(leased.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), vec![c1.clone()]);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let reclaimed = s.claim_deliveries(any_topic("w4", Duration::from_secs(30))).await.unwrap();
    assert_eq!(reclaimed.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), vec![c1], "b1's 30 s lease still holds");
    assert_eq!(s.delivery_state(&ids[2]).await.unwrap(), Some((DeliveryState::Pending, 0)));
}

pub async fn outbox_batches_of_one_topic_stay_in_enqueue_order(h: &dyn Harness) {
    let s = h.fresh().await;
    // Back-to-back batches fall in one clock millisecond; their order must still hold.
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.extend(s.enqueue_deliveries(vec![delivery("t", &format!("t{n}"))]).await.unwrap());
    }
    for (n, id) in ids.iter().enumerate() {
        let got = s.claim_deliveries(any_topic("w", Duration::from_secs(30))).await.unwrap();
        assert_eq!(got.iter().map(|d| d.body.clone()).collect::<Vec<_>>(), vec![format!("t{n}")]);
        s.delivered(id).await.unwrap();
    }
}
