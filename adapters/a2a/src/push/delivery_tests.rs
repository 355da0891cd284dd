//! Store-backed tests of the push channel's feed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap as Map;

use serde_json::{Value, json};

use super::*;
use crate::testkit::Kit;
use crate::wire::{PushConfig, SendMessageRequest, TaskState};
use gateway_store::DeliveryClaim;

/// What the tests claim from the outbox: every push delivery due, up to 64.
const PUSHES: DeliveryClaim<'static> =
    DeliveryClaim { owner: "test", topics: PUSH_TOPICS, limit: 64, lease: Duration::from_secs(60) };

/// Feeds until nothing is left, as the channel's feed step does between claims.
async fn feed_all(feeder: &Feeder) {
    while feeder.feed().await.unwrap().taken > 0 {}
}

/// Two processes feeding the same task's events (each with its own projections) queue each
/// update once and in order: a settlement of rows the other settled first writes nothing, and
/// the process that lost folds the task again from the log before it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_feeding_one_task_queue_each_update_once_in_order() {
    let kit = Kit::new(Map::new(), Default::default()).await;
    let req: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "tck-stream-artifact-chunked-1", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"taskPushNotificationConfig": {"id": "p", "url": "http://127.0.0.1:9/hook"}},
    }))
    .unwrap();
    let mut started = crate::tasks::service::send(&kit.ctx, "conformance", &req, false).await.unwrap();
    let (here, elsewhere) = (Feeder::new(&kit.ctx), Feeder::new(&kit.ctx));
    let racing = async {
        let done = crate::tasks::service::settle(&kit.ctx, &mut started).await.unwrap();
        for _ in 0..3 {
            tokio::join!(feed_all(&here), feed_all(&elsewhere));
        }
        done
    };
    let (done, _) = tokio::join!(racing, async {
        for _ in 0..50 {
            tokio::join!(feed_all(&here), feed_all(&elsewhere));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert_eq!(done.proj.state(), TaskState::Completed);
    let id = started.record.id.clone();
    let got = drain(&kit).await;
    let shape = shape(&got[&format!("a2a:{id}:p")]);
    assert_eq!(shape, vec!["TASK_STATE_WORKING", "chunk-1 ", "chunk-2", "TASK_STATE_COMPLETED"]);
    kit.shutdown().await;
}

/// What v1.0 push bodies say, in order: each status update's state, each artifact update's text.
fn shape(bodies: &[Value]) -> Vec<String> {
    bodies
        .iter()
        .map(|b| match (b.get("statusUpdate"), b.get("artifactUpdate")) {
            (Some(s), _) => s["status"]["state"].as_str().unwrap().to_owned(),
            (_, Some(a)) => a["artifact"]["parts"][0]["text"].as_str().unwrap().to_owned(),
            _ => panic!("{b}"),
        })
        .collect()
}

/// Every delivery of the outbox, per topic, in the order the deliverer would make them.
async fn drain(kit: &Kit) -> Map<String, Vec<Value>> {
    let outbox = kit.ctx.coordinator.outbox();
    let mut by_topic: Map<String, Vec<Value>> = Map::new();
    loop {
        let claimed = outbox.claim_deliveries(PUSHES).await.unwrap();
        if claimed.is_empty() {
            return by_topic;
        }
        for d in claimed {
            by_topic.entry(d.topic.clone()).or_default().push(serde_json::from_str(&d.body).unwrap());
            outbox.delivered(&d.id).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_keep_the_task_order_and_v03_receivers_get_status_changes_only() {
    let kit = Kit::new(Map::new(), Default::default()).await;
    let req: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "tck-stream-artifact-chunked-1", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"taskPushNotificationConfig": {"id": "v1", "url": "http://127.0.0.1:9/v1"}},
    }))
    .unwrap();
    let mut started = crate::tasks::service::send(&kit.ctx, "conformance", &req, false).await.unwrap();
    let v03 = PushConfig {
        id: Some("v03".into()),
        task_id: None,
        url: "http://127.0.0.1:9/v03".into(),
        token: None,
        authentication: None,
    };
    crate::push::create(&kit.ctx, &started.record, v03, true).await.unwrap();
    let done = crate::tasks::service::settle(&kit.ctx, &mut started).await.unwrap();
    assert_eq!(done.proj.state(), TaskState::Completed);

    let id = started.record.id.clone();
    feed_all(&Feeder::new(&kit.ctx)).await;
    let got = drain(&kit).await;

    let v1 = &got[&format!("a2a:{id}:v1")];
    let shape = shape(v1);
    assert_eq!(shape, vec!["TASK_STATE_WORKING", "chunk-1 ", "chunk-2", "TASK_STATE_COMPLETED"]);

    let v03 = &got[&format!("a2a:{id}:v03")];
    let states: Vec<&str> = v03.iter().map(|b| b["status"]["state"].as_str().unwrap()).collect();
    assert_eq!(states, vec!["working", "completed"], "one v0.3 Task per status change: {v03:?}");
    assert!(v03.iter().all(|b| b["kind"] == "task"));
    assert_eq!(v03[1]["artifacts"][0]["parts"].as_array().unwrap().len(), 2, "the final Task has the output");
    assert!(v03[0]["artifacts"].as_array().is_none_or(Vec::is_empty), "each snapshot is as of its own status");
    // The finished task's subscription ended with it: a later message of its context is fed
    // to the new task only.
    let next: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "next-1", "role": "ROLE_USER", "parts": [{"text": "x"}], "contextId": started.record.context_id},
        "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/next"}},
    }))
    .unwrap();
    let later = crate::tasks::service::send(&kit.ctx, "conformance", &next, false).await.unwrap();
    let fed = kit.ctx.coordinator.feeds().take_feed(CHANNEL, 64).await.unwrap();
    assert_eq!(fed.keys.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(), vec![later.record.id.as_str()]);
    kit.shutdown().await;
}

/// Push credentials are stored and queued sealed, and opened only to be answered to their
/// client or sent to their receiver; another key cannot open them and nothing is sent sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_credentials_are_sealed_at_rest_and_opened_to_be_sent() {
    let kit = Kit::new(Map::new(), Default::default()).await;
    let req: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "sealed-1", "role": "ROLE_USER", "parts": [{"text": "x"}]},
    }))
    .unwrap();
    let mut started = crate::tasks::service::send(&kit.ctx, "conformance", &req, false).await.unwrap();
    let cfg = PushConfig {
        id: Some("c1".into()),
        task_id: None,
        url: "http://127.0.0.1:9/hook".into(),
        token: Some("tok-plain-7".into()),
        authentication: Some(crate::wire::AuthInfo {
            scheme: "Bearer".into(),
            credentials: Some("cred-plain-7".into()),
        }),
    };
    crate::push::create(&kit.ctx, &started.record, cfg.clone(), false).await.unwrap();
    let docs = kit.ctx.coordinator.documents();
    let stored = docs.get_document(records::PUSH, &started.record.id).await.unwrap().expect("stored").body.to_string();
    assert!(!stored.contains("tok-plain-7") && !stored.contains("cred-plain-7"), "{stored}");
    assert!(stored.contains(gateway_services::secrets::SEALED_PREFIX), "{stored}");

    let read = crate::push::get(&kit.ctx, &started.record, "c1").await.unwrap();
    assert_eq!((read.token, read.authentication), (cfg.token.clone(), cfg.authentication.clone()), "answered in clear");

    let done = crate::tasks::service::settle(&kit.ctx, &mut started).await.unwrap();
    assert_eq!(done.proj.state(), TaskState::Completed);
    feed_all(&Feeder::new(&kit.ctx)).await;
    let claimed = kit.ctx.coordinator.outbox().claim_deliveries(PUSHES).await.unwrap();
    assert!(!claimed.is_empty());
    for d in &claimed {
        let queued = serde_json::to_string(&d.headers).unwrap();
        assert!(!queued.contains("tok-plain-7") && !queued.contains("cred-plain-7"), "{queued}");
        assert_eq!(header_value(&kit.ctx.secrets, &d.headers["x-a2a-notification-token"]).unwrap(), "tok-plain-7");
        assert_eq!(header_value(&kit.ctx.secrets, &d.headers["authorization"]).unwrap(), "Bearer cred-plain-7");
    }

    // A process with another key: reads and deliveries fail, naming why, and send nothing.
    let mut other = kit.ctx.clone();
    other.secrets = gateway_services::SecretBox::generate();
    let refused = crate::push::get(&other, &started.record, "c1").await.unwrap_err();
    assert!(matches!(refused, crate::error::A2aError::SealedCredentials { .. }), "{refused:?}");
    assert!(refused.to_string().contains("cannot be read"), "{refused}");
    let channel = PushChannel::new(&other);
    let Err(Failure::Retry(failed)) = channel.prepare(&claimed[0]).await else { panic!("a sealed header was sent") };
    assert!(failed.contains("sealed with another key"), "{failed}");
    // The failed attempt is counted as one to retry, under its channel.
    gateway_runtime::delivery::attempt_once(&kit.ctx.coordinator, std::sync::Arc::new(channel), claimed[0].clone())
        .await;
    let metrics = kit.ctx.coordinator.metrics().render();
    let retried = "gateway_delivery_duration_seconds_count{channel=\"a2a_push\",outcome=\"retry\"} 1\n";
    assert!(metrics.contains(retried), "{metrics}");
    kit.shutdown().await;
}

/// A task sent without a push config is not fed to the push channel (ListTasks still sees its
/// state, from its log); a config added while it waits for input follows it from then on: it
/// gets the updates after it was added, none from before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_fed_only_from_when_it_has_a_config() {
    let kit = Kit::new(Map::new(), Default::default()).await;
    let first: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "tck-input-required", "role": "ROLE_USER", "parts": [{"text": "x"}]},
    }))
    .unwrap();
    let mut started = crate::tasks::service::send(&kit.ctx, "conformance", &first, false).await.unwrap();
    let parked = crate::tasks::service::settle(&kit.ctx, &mut started).await.unwrap();
    assert_eq!(parked.proj.state(), TaskState::InputRequired);
    let feeds = kit.ctx.coordinator.feeds();
    assert_eq!(feeds.take_feed(CHANNEL, 64).await.unwrap(), Default::default(), "a task without a config is not fed");
    let id = started.record.id.clone();
    let listed = |state: &'static str| {
        let req = crate::wire::ListTasksRequest { status: Some(json!(state)), ..Default::default() };
        let ctx = kit.ctx.clone();
        async move {
            let page = crate::tasks::service::list_tasks(&ctx, "conformance", &req).await.unwrap();
            page.tasks.into_iter().map(|t| t.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("TASK_STATE_INPUT_REQUIRED").await, vec![id.clone()]);
    assert_eq!(listed("TASK_STATE_SUBMITTED").await, Vec::<String>::new());
    let docs = kit.ctx.coordinator.documents();
    let key = records::index_key(&started.record);
    let (entry, _) = records::get::<records::TaskRecord>(docs, records::TASK_INDEX, &key).await.unwrap().unwrap();
    assert_eq!((entry.state, entry.status_at), (TaskState::InputRequired, parked.proj.status_at().millis()));

    let late = PushConfig {
        id: Some("late".into()),
        task_id: None,
        url: "http://127.0.0.1:9/late".into(),
        token: None,
        authentication: None,
    };
    crate::push::create(&kit.ctx, &started.record, late, false).await.unwrap();
    let answer: SendMessageRequest = crate::wire::parse(json!({
        "message": {"messageId": "tck-complete-task", "role": "ROLE_USER", "parts": [{"text": "y"}], "taskId": id},
    }))
    .unwrap();
    let mut answered = crate::tasks::service::send(&kit.ctx, "conformance", &answer, false).await.unwrap();
    let done = crate::tasks::service::settle(&kit.ctx, &mut answered).await.unwrap();
    assert_eq!(done.proj.state(), TaskState::Completed);
    feed_all(&Feeder::new(&kit.ctx)).await;
    let got = drain(&kit).await;
    assert_eq!(got.keys().collect::<Vec<_>>(), [&format!("a2a:{id}:late")]);
    assert_eq!(shape(&got[&format!("a2a:{id}:late")]), vec!["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]);
    assert_eq!(listed("TASK_STATE_COMPLETED").await, vec![id.clone()]);
    assert_eq!(listed("TASK_STATE_INPUT_REQUIRED").await, Vec::<String>::new());
    kit.shutdown().await;
}
