//! Store-backed tests of the operations: a real SQLite store, Workers, the scripted backend.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::tasks::records::{CONTEXTS, ContextAlias, PUSH, TASK_INDEX, TASKS, TaskRecord};
use crate::testkit::Kit;
use crate::wire::{self, PushConfig};

fn send_req(text: &str, context: Option<&str>, extra: Value) -> SendMessageRequest {
    let mut v = json!({"message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]}});
    if let Some(c) = context {
        v["message"]["contextId"] = json!(c);
    }
    if let Value::Object(extra) = extra {
        v.as_object_mut().unwrap().extend(extra);
    }
    wire::parse(v).unwrap()
}

async fn send_and_settle(kit: &Kit, agent: &str, req: SendMessageRequest) -> Task {
    let mut started = send(&kit.ctx, agent, &req, false).await.unwrap();
    settle(&kit.ctx, &mut started).await.unwrap().proj.task(None, true)
}

/// Tasks whose push feed subscription has events fed and not yet settled (nothing settles
/// them here: the kit runs no delivery service).
async fn subscribed(kit: &Kit) -> usize {
    kit.ctx.coordinator.feeds().take_feed(crate::push::delivery::CHANNEL, 1000).await.unwrap().keys.len()
}

async fn count(kit: &Kit, ns: &str) -> usize {
    kit.ctx.coordinator.documents().list_documents(ns, "", None, 1000).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_shows_the_newest_tasks_and_skips_deleted_sessions() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        let t = send_and_settle(&kit, "echo", send_req(text, None, json!({}))).await;
        assert_eq!(t.status.state, TaskState::Completed);
        ids.push(t.id);
        // Creation times are milliseconds: keep them apart.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let all = ListTasksRequest::default();
    // With room for only two records, the scan reads the two newest, not the two oldest.
    let page = list_tasks_scanning(&kit.ctx, "echo", &all, 2).await.unwrap();
    let got: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);

    // A task whose session was deleted is skipped, not an error for the whole list.
    let gone = records::task(kit.ctx.coordinator.documents(), &ids[2]).await.unwrap().unwrap().0;
    kit.ctx.coordinator.delete_session(&gone.session_id).await.unwrap();
    let page = list_tasks(&kit.ctx, "echo", &all).await.unwrap();
    let got: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(got, vec![ids[1].as_str(), ids[0].as_str()]);
    assert_eq!((page.total_size, page.next_page_token.as_str()), (2, ""));

    // Paging walks the rest in order.
    let first =
        list_tasks(&kit.ctx, "echo", &ListTasksRequest { page_size: Some(1), ..Default::default() }).await.unwrap();
    assert_eq!(first.tasks[0].id, ids[1]);
    let req = ListTasksRequest { page_size: Some(1), page_token: Some(first.next_page_token), ..Default::default() };
    let second = list_tasks(&kit.ctx, "echo", &req).await.unwrap();
    assert_eq!(second.tasks[0].id, ids[0]);
    assert_eq!(second.next_page_token, "");
    kit.shutdown().await;
}

/// Every document of the adapter's task state, by namespace.
async fn task_state(kit: &Kit) -> [usize; 5] {
    [
        count(kit, TASKS).await,
        count(kit, TASK_INDEX).await,
        count(kit, PUSH).await,
        subscribed(kit).await,
        count(kit, CONTEXTS).await,
    ]
}

fn inline_push() -> Value {
    json!({"configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook", "token": "t"}}})
}

/// The acceptance test of DESIGN §3 for A2A: the task's documents are written in the
/// transaction that admits its message, so a failure inside that transaction (here: the
/// admission refuses the message) leaves neither the task nor its push config nor its feed subscription
/// behind, and there is no compensating code that could have removed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_is_not_accepted_leaves_no_record_config_or_subscription() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let parked = send_and_settle(&kit, "conformance", send_req("tck-input-required", None, inline_push())).await;
    assert_eq!(parked.status.state, TaskState::InputRequired);
    let session = SessionId::parse(&parked.context_id).unwrap();
    let before = kit.store.events_after(&session, 0, 1000).await.unwrap().len();
    assert_eq!(task_state(&kit).await, [1, 1, 1, 1, 0]);
    // A new task in a context that waits for answers: refused inside the admission.
    let refused =
        send(&kit.ctx, "conformance", &send_req("again", Some(&parked.context_id), inline_push()), false).await;
    assert!(matches!(refused, Err(A2aError::UnsupportedOperation(_))), "{:?}", refused.err());
    assert_eq!(task_state(&kit).await, [1, 1, 1, 1, 0], "no record, index entry, push config or subscription");
    assert_eq!(kit.store.events_after(&session, 0, 1000).await.unwrap().len(), before, "the message was not committed");
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_to_an_archived_context_commits_nothing() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let done = send_and_settle(&kit, "echo", send_req("first", Some("my-context"), json!({}))).await;
    assert_eq!(done.status.state, TaskState::Completed);
    let (alias, _) = records::get::<ContextAlias>(kit.ctx.coordinator.documents(), CONTEXTS, "my-context")
        .await
        .unwrap()
        .expect("the alias was committed with the first message");
    kit.ctx.coordinator.archive_session(&alias.session_id).await.unwrap();
    let before = kit.store.events_after(&alias.session_id, 0, 1000).await.unwrap().len();
    let state = task_state(&kit).await;
    let refused = send(&kit.ctx, "echo", &send_req("late", Some("my-context"), inline_push()), false).await;
    assert!(matches!(refused, Err(A2aError::UnsupportedOperation(_))), "{:?}", refused.err());
    assert_eq!(task_state(&kit).await, state);
    assert_eq!(kit.store.events_after(&alias.session_id, 0, 1000).await.unwrap().len(), before);
    kit.shutdown().await;
}

/// A new client-chosen contextId is one session: its alias is written by the commit that
/// creates the session with its first message, so a send that loses the race for it commits
/// nothing (no unused session) and lands in the winner's session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_messages_of_a_new_context_make_one_session() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let sends = (0..8).map(|i| {
        let ctx = kit.ctx.clone();
        tokio::spawn(async move {
            let req = send_req(&format!("hello {i}"), Some("shared"), inline_push());
            send(&ctx, "echo", &req, false).await.map(|s| s.record)
        })
    });
    let records: Vec<TaskRecord> =
        futures::future::join_all(sends).await.into_iter().map(|r| r.unwrap().unwrap()).collect();
    let session = &records[0].session_id;
    assert!(records.iter().all(|r| &r.session_id == session && r.context_id == "shared"), "{records:?}");
    let filter = gateway_store::SessionFilter { agent_id: Some(kit.agent("echo")), ..Default::default() };
    let page = gateway_store::PageRequest::first(100, Default::default());
    let sessions = kit.ctx.coordinator.list_sessions(&filter, &page).await.unwrap().items;
    assert_eq!(sessions.iter().map(|s| &s.id).collect::<Vec<_>>(), vec![session], "one session for the context");
    assert_eq!(task_state(&kit).await, [8, 8, 8, 8, 1]);
    let messages = kit.store.events_after(session, 0, 1000).await.unwrap();
    let users = messages.iter().filter(|e| e.kind() == gateway_core::event::EventKind::UserMessage).count();
    assert_eq!(users, 8, "every send was admitted once");
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_times_are_the_database_time_of_its_admission() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let started = send(&kit.ctx, "echo", &send_req("when", None, json!({})), false).await.unwrap();
    let (rec, _) = records::task(kit.ctx.coordinator.documents(), &started.record.id).await.unwrap().unwrap();
    let events = kit.store.events_after(&rec.session_id, 0, 10).await.unwrap();
    let message = events.iter().find(|e| e.kind() == gateway_core::event::EventKind::UserMessage).unwrap();
    assert_eq!(rec.status_at, message.created_at.millis(), "submitted when its message was committed");
    let listed = list_tasks(&kit.ctx, "echo", &ListTasksRequest::default()).await.unwrap();
    assert_eq!(listed.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), vec![rec.id.as_str()]);
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_push_configs_never_exceed_the_limit() {
    let kit = Kit::new(BTreeMap::new(), Default::default()).await;
    let t = send_and_settle(&kit, "echo", send_req("hi", None, json!({}))).await;
    let (rec, _) = task_record(&kit.ctx, "echo", &t.id).await.unwrap();
    let creates = (0..24).map(|i| {
        let (ctx, rec) = (kit.ctx.clone(), rec.clone());
        tokio::spawn(async move {
            let cfg = PushConfig {
                id: Some(format!("c{i}")),
                task_id: None,
                url: "http://127.0.0.1:9/hook".into(),
                token: None,
                authentication: None,
            };
            crate::push::create(&ctx, &rec, cfg, false).await
        })
    });
    let results: Vec<_> = futures::future::join_all(creates).await.into_iter().map(Result::unwrap).collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let stored = crate::push::list(&kit.ctx, &rec).await.unwrap();
    assert_eq!((ok, stored.len()), (16, 16), "{results:?}");
    assert!(results.iter().all(|r| r.is_ok() || matches!(r, Err(A2aError::InvalidParams(_)))), "{results:?}");
    // Replacing a known id and deleting stay possible at the limit.
    let known = stored[0].id.clone().unwrap();
    let again = PushConfig { url: "https://example.com/h".into(), ..stored[0].clone() };
    crate::push::create(&kit.ctx, &rec, again, false).await.unwrap_or_else(|e| panic!("replace at limit: {e}"));
    crate::push::delete(&kit.ctx, &rec, &known).await.unwrap();
    assert_eq!(crate::push::list(&kit.ctx, &rec).await.unwrap().len(), 15);
    kit.shutdown().await;
}
