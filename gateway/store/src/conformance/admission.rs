//! Admission writes (DESIGN §3, "admission is one transaction") and document leases on the
//! database clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_core::admission::AdmissionError;
use gateway_core::event::{EventPayload, NewEvent};
use gateway_core::session::{Resource, ResourceKind, SessionStatus};
use gateway_core::{ResourceId, Timestamp};
use serde_json::json;

use super::{Harness, msg, new_session, session, session_with, terms, worker};
use crate::{AdmissionWrites, DocumentWrite, Guard, PageRequest, SessionFilter, Store, StoreError};

fn doc(key: &str, body: serde_json::Value) -> DocumentWrite {
    DocumentWrite::create("ns", key, body)
}

fn writes(documents: Vec<DocumentWrite>, bindings: &[(&str, &str)]) -> AdmissionWrites {
    AdmissionWrites {
        documents,
        bindings: bindings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        trace: None,
        subscriptions: vec![],
    }
}

fn is_conflict_on(e: &StoreError, key: &str) -> bool {
    matches!(e, StoreError::Guard(Guard::DocumentConflict { key: k, .. }) if k == key)
}

async fn session_count(s: &Arc<dyn Store>) -> usize {
    s.list_sessions(&SessionFilter::default(), &PageRequest::first(100, Default::default())).await.unwrap().items.len()
}

pub async fn admission_writes_commit_with_their_inputs(h: &dyn Harness) {
    let s = h.fresh().await;
    // A new session, its first input and the documents and bindings that explain them.
    let template = session(&s).await;
    let mut new = new_session(template.environment_id.clone(), template.snapshot.clone(), vec![msg("start")]);
    let id = new.id.clone();
    new.writes = writes(vec![doc("alias/c1", json!({"session": id.as_str()}))], &[("origin", "c1")]);
    let (created, events) = s.create_session(new).await.unwrap();
    assert_eq!(created.id, id, "the caller's id, so documents can name the session");
    assert_eq!(events.len(), 1);
    let alias = s.get_document("ns", "alias/c1").await.unwrap().expect("the alias commits with the session");
    assert_eq!(alias.body, json!({"session": id.as_str()}));
    assert_eq!(alias.created_at, events[0].created_at, "one transaction, one database time");
    assert_eq!(s.bindings(&id).await.unwrap(), BTreeMap::from([("origin".to_owned(), "c1".to_owned())]));

    // A later input with a new document, a compare-and-set update and a binding.
    let before = s.put_document("ns", "counter", &json!({"n": 1}), None).await.unwrap();
    let update =
        DocumentWrite { expected: Some(before.version), ..DocumentWrite::create("ns", "counter", json!({"n": 2})) };
    let w = writes(vec![doc("task/2", json!({"state": "submitted"})), update], &[("origin", "c2"), ("last", "task/2")]);
    let echoed = s.submit_inputs(&id, vec![msg("more")], w).await.unwrap();
    let task = s.get_document("ns", "task/2").await.unwrap().expect("written with the input");
    assert_eq!(task.created_at, echoed[0].created_at);
    let counter = s.get_document("ns", "counter").await.unwrap().unwrap();
    assert_eq!((counter.version, counter.body), (before.version + 1, json!({"n": 2})));
    let bindings = s.bindings(&id).await.unwrap();
    assert_eq!((bindings["origin"].as_str(), bindings["last"].as_str()), ("c2", "task/2"));
}

pub async fn a_document_conflict_rolls_back_the_whole_admission(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session(&s).await;
    let taken = s.put_document("ns", "taken", &json!({"owner": "someone else"}), None).await.unwrap();

    // Creating a document that exists: the input, the other document and the binding go too.
    let w = writes(vec![doc("fresh", json!({})), doc("taken", json!({}))], &[("k", "v")]);
    let err = s.submit_inputs(&sess.id, vec![msg("hello")], w).await.unwrap_err();
    assert!(is_conflict_on(&err, "taken"), "{err:?}");
    // So is one admission creating the same document twice (both creations share a statement).
    let w = writes(vec![doc("fresh", json!({"n": 1})), doc("fresh", json!({"n": 2}))], &[]);
    let err = s.submit_inputs(&sess.id, vec![msg("hello")], w).await.unwrap_err();
    assert!(is_conflict_on(&err, "fresh"), "{err:?}");
    // A stale compare-and-set is a conflict as well.
    let stale = DocumentWrite { expected: Some(taken.version + 7), ..doc("taken", json!({})) };
    let err = s.submit_inputs(&sess.id, vec![msg("hello")], writes(vec![doc("fresh", json!({})), stale], &[])).await;
    assert!(is_conflict_on(&err.unwrap_err(), "taken"));

    let after = s.get_session(&sess.id).await.unwrap();
    assert_eq!((after.last_seq, after.status), (0, SessionStatus::Idle), "no input was committed");
    assert!(s.events_after(&sess.id, 0, 10).await.unwrap().is_empty());
    assert!(s.active_runs(&sess.id).await.unwrap().is_empty(), "no run was queued");
    assert!(s.get_document("ns", "fresh").await.unwrap().is_none(), "no document was written");
    assert!(s.bindings(&sess.id).await.unwrap().is_empty(), "no binding was written");
    assert_eq!(s.get_document("ns", "taken").await.unwrap().unwrap(), taken, "the other writer's document is intact");

    // The same for a new session: nothing of it remains, not even the session.
    let before = session_count(&s).await;
    let mut new = new_session(sess.environment_id.clone(), sess.snapshot.clone(), vec![msg("start")]);
    let id = new.id.clone();
    new.writes = writes(vec![doc("fresh", json!({})), doc("taken", json!({}))], &[("k", "v")]);
    assert!(is_conflict_on(&s.create_session(new).await.unwrap_err(), "taken"));
    assert!(matches!(s.get_session(&id).await, Err(StoreError::NotFound { .. })));
    assert!(s.events_after(&id, 0, 10).await.unwrap().is_empty());
    assert_eq!(session_count(&s).await, before);
    assert!(s.get_document("ns", "fresh").await.unwrap().is_none());

    // A new session under the id of an existing one is refused the same way.
    let mut again = new_session(sess.environment_id.clone(), sess.snapshot.clone(), vec![msg("start")]);
    again.id = sess.id.clone();
    again.writes = writes(vec![doc("fresh", json!({}))], &[]);
    let err = s.create_session(again).await.unwrap_err();
    assert!(matches!(&err, StoreError::Guard(Guard::SessionExists(id)) if id == sess.id.as_str()), "{err:?}");
    assert!(s.get_document("ns", "fresh").await.unwrap().is_none());
    assert!(s.events_after(&sess.id, 0, 10).await.unwrap().is_empty());

    // Without the conflict the same admission goes through.
    s.submit_inputs(&sess.id, vec![msg("hello")], writes(vec![doc("fresh", json!({}))], &[("k", "v")])).await.unwrap();
    assert!(s.get_document("ns", "fresh").await.unwrap().is_some());
}

pub async fn a_refused_admission_writes_nothing(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session(&s).await;
    s.archive_session(&sess.id).await.unwrap();
    let err = s.submit_inputs(&sess.id, vec![msg("late")], writes(vec![doc("task", json!({}))], &[("k", "v")])).await;
    assert!(matches!(err, Err(StoreError::Rejected(AdmissionError::Archived))), "{err:?}");
    assert!(s.get_document("ns", "task").await.unwrap().is_none());
    assert!(s.bindings(&sess.id).await.unwrap().is_empty());

    // Inputs are needed to explain writes: an empty batch is refused with them.
    let live = session_with(&s, vec![]).await;
    let err = s.submit_inputs(&live.id, vec![], writes(vec![doc("task", json!({}))], &[])).await;
    assert!(matches!(err, Err(StoreError::Rejected(AdmissionError::Empty))), "{err:?}");
    assert!(s.get_document("ns", "task").await.unwrap().is_none());

    // A new session whose initial input is refused is not created, nor are its documents.
    let not_an_input = NewEvent::new(EventPayload::AgentMessage { content: vec![] });
    let mut new = new_session(sess.environment_id.clone(), sess.snapshot.clone(), vec![not_an_input]);
    let id = new.id.clone();
    new.writes = writes(vec![doc("alias", json!({}))], &[]);
    assert!(matches!(s.create_session(new).await, Err(StoreError::Rejected(AdmissionError::NotAnInput(_)))));
    assert!(matches!(s.get_session(&id).await, Err(StoreError::NotFound { .. })));
    assert!(s.get_document("ns", "alias").await.unwrap().is_none());
}

pub async fn resources_get_the_creation_time_of_the_database(h: &dyn Harness) {
    let s = h.fresh().await;
    let template = session(&s).await;
    let file = super::files::upload(&s, "a.txt", b"a").await;
    let mut snapshot = template.snapshot.clone();
    snapshot.resources = vec![Resource {
        id: ResourceId::new(),
        kind: ResourceKind::File { file_id: file.meta.id.to_string(), mount_path: "/workspace/a.txt".into() },
        // Whatever the caller says: the store records the time of the commit.
        created_at: Timestamp(1),
    }];
    let (created, _) = s.create_session(new_session(template.environment_id, snapshot, vec![])).await.unwrap();
    assert_eq!(created.snapshot.resources[0].created_at, created.created_at);
    let read = s.get_session(&created.id).await.unwrap();
    assert_eq!(read.snapshot.resources[0].created_at, created.created_at);
}

/// The trace context an admission carries is stored with the run it queues and comes back
/// with the claim (the turn's span is opened under it); an admission without one, or one
/// that queues no run, leaves runs without a context.
pub async fn runs_keep_the_trace_context_of_their_admission(h: &dyn Harness) {
    use gateway_core::trace::TraceContext;
    let s = h.fresh().await;
    let sess = session(&s).await;
    let traced = TraceContext {
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        tracestate: Some("vendor=opaque".into()),
    };
    let w = AdmissionWrites { trace: Some(traced.clone()), ..AdmissionWrites::default() };
    s.submit_inputs(&sess.id, vec![msg("traced")], w).await.unwrap();
    let claim = s.claim_run(&worker("a", "h"), terms(10_000)).await.unwrap().expect("the run is queued");
    assert_eq!(claim.run.trace.as_ref(), Some(&traced), "the claim carries the admission's context");
    assert_eq!(s.get_run(&claim.fence.run_id).await.unwrap().trace, Some(traced));

    let plain = session(&s).await;
    s.submit_inputs(&plain.id, vec![msg("untraced")], AdmissionWrites::default()).await.unwrap();
    let claim = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("the run is queued");
    assert_eq!(claim.run.session_id, plain.id);
    assert_eq!(claim.run.trace, None);
}
