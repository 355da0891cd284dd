//! The outbound backend against a scripted remote A2A agent (an in-process HTTP server,
//! `testkit::remote`), run by real Workers on a real store.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gateway_core::SessionId;
use gateway_core::event::{Event, EventPayload, NewEvent, StopReason, ToolOrigin};
use serde_json::Value;

use super::*;
use crate::testkit::remote::fake;
use crate::testkit::{Kit, turns_ended};

async fn gateway(url: &str, auth: Option<&str>) -> Kit {
    gateway_reusing_cards(url, auth, Duration::from_secs(30)).await
}

async fn gateway_reusing_cards(url: &str, auth: Option<&str>, card_reuse: Duration) -> Kit {
    let remotes: BTreeMap<String, RemoteConfig> =
        [("remote".to_owned(), RemoteConfig { url: url.to_owned(), auth: auth.map(str::to_owned) })].into();
    let limits = Limits {
        stream_idle: Duration::from_millis(300),
        turn_deadline: Duration::from_secs(30),
        poll_interval: Duration::from_millis(50),
        card_reuse,
    };
    Kit::new(remotes, limits).await
}

fn user(text: &str) -> NewEvent {
    NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(text)] })
}

fn texts(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessage { content } => Some(plain_text(content)),
            _ => None,
        })
        .collect()
}

fn last_stop(events: &[Event]) -> StopReason {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.payload {
            EventPayload::TurnEnded { stop } => Some(stop.clone()),
            _ => None,
        })
        .unwrap()
}

/// Submits inputs and waits for the session's `n`th turn end.
async fn turn(kit: &Kit, sid: &SessionId, inputs: Vec<NewEvent>, n: usize) -> Vec<Event> {
    kit.ctx.coordinator.submit(sid, inputs).await.unwrap();
    kit.wait_events(sid, 20, |evs| turns_ended(evs) >= n).await
}

fn asked(events: &[Event]) -> gateway_core::EventId {
    events
        .iter()
        .rev()
        .find(|e| matches!(&e.payload, EventPayload::ToolUse { name, .. } if name == REMOTE_INPUT_TOOL))
        .unwrap()
        .id
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_continues_the_remote_task_with_credentials_on_its_origin() {
    let (remote, url) = fake(false).await;
    let kit = gateway(&url, Some("Bearer s3cret")).await;
    let sid = kit.session("remote").await;
    let evs = turn(&kit, &sid, vec![user("ask")], 1).await;
    assert!(matches!(last_stop(&evs), StopReason::RequiresAction { .. }));
    let answer = NewEvent::new(EventPayload::ClientToolResult {
        tool_use_id: asked(&evs),
        content: vec![ContentBlock::text("Ada")],
        is_error: false,
        origin: ToolOrigin::Custom,
    });
    let evs = turn(&kit, &sid, vec![answer], 2).await;
    assert_eq!(texts(&evs).last().map(String::as_str), Some("answered: Ada"));
    let calls = remote.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].params["message"]["taskId"], "t0", "the answer goes to the waiting remote task");
    assert!(calls.iter().all(|c| c.auth.as_deref() == Some("Bearer s3cret")));
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_input_request_cancels_the_remote_task_instead_of_continuing_it() {
    let (remote, url) = fake(false).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    let evs = turn(&kit, &sid, vec![user("ask")], 1).await;
    assert!(matches!(last_stop(&evs), StopReason::RequiresAction { .. }));
    // The client interrupts the parked turn instead of answering, then says something new.
    kit.ctx.coordinator.interrupt(&sid).await.unwrap();
    let evs = turn(&kit, &sid, vec![user("hello")], 3).await;
    assert_eq!(texts(&evs).last().map(String::as_str), Some("echo: hello"));
    assert_eq!(remote.methods(), vec!["SendMessage", "CancelTask", "SendMessage"]);
    let calls = remote.calls();
    assert_eq!(calls[1].params["id"], "t0", "the abandoned remote task is canceled");
    let next = &calls[2].params["message"];
    assert!(next.get("taskId").is_none(), "a new remote task, not the old one: {next}");
    assert_eq!(next["contextId"], "rctx", "in the same remote context");
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_interrupted_before_any_remote_event_is_not_sent_again() {
    let (remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    kit.ctx.coordinator.submit(&sid, vec![user("hang")]).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while remote.calls().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the remote never got the message");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kit.ctx.coordinator.interrupt(&sid).await.unwrap();
    let evs = kit.wait_events(&sid, 10, |evs| turns_ended(evs) >= 1).await;
    assert_eq!(last_stop(&evs), StopReason::Interrupted);
    let evs = turn(&kit, &sid, vec![user("second")], 2).await;
    assert_eq!(texts(&evs).last().map(String::as_str), Some("echo: second"));
    let calls = remote.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].params["message"]["parts"], json!([{"text": "second"}]), "the canceled message is not resent");
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_falls_back_to_polling() {
    let (remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    let evs = turn(&kit, &sid, vec![user("quiet")], 1).await;
    assert_eq!(last_stop(&evs), StopReason::EndTurn);
    assert_eq!(texts(&evs), vec!["late"]);
    assert_eq!(remote.methods()[..2], ["SendStreamingMessage", "GetTask"]);
    kit.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_sent_to_an_interface_on_another_origin() {
    let (remote, url) = fake(false).await;
    // The card names the same server under another host name: another origin.
    *remote.interface.lock().unwrap() = url.replace("127.0.0.1", "localhost");
    let kit = gateway(&url, Some("Bearer s3cret")).await;
    let sid = kit.session("remote").await;
    let evs = turn(&kit, &sid, vec![user("hi")], 1).await;
    assert_eq!(last_stop(&evs), StopReason::Failed);
    let error = evs
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::SessionError { message, .. } => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert!(error.contains("refusing to send the configured credentials"), "{error}");
    assert!(remote.calls().is_empty(), "no request reached the other origin");
    kit.shutdown().await;
}

#[test]
fn every_binding_is_written_each_time() {
    let remote = Remote { task: None, context: Some("c".into()), state: None, parts: BTreeMap::new() };
    let b: BTreeMap<String, String> = remote.bindings().into_iter().collect();
    assert_eq!(b.get(K_STATE).map(String::as_str), Some(""), "an unknown state clears the old one");
    assert_eq!(b.get(K_TASK).map(String::as_str), Some(""));
    let back = Remote::from_bindings(&b);
    assert_eq!((back.task, back.state, back.context.as_deref()), (None, None, Some("c")));
}

/// A remote that accepted the message (its stream opened) but never names a task: the turn
/// fails saying so, and the message is neither retried nor joined to the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_remote_accepted_is_never_sent_again() {
    let (remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    let evs = turn(&kit, &sid, vec![user("hang")], 1).await;
    assert_eq!(last_stop(&evs), StopReason::Failed, "not retried: a retry would send it again");
    let evs = turn(&kit, &sid, vec![user("second")], 2).await;
    assert_eq!(texts(&evs).last().map(String::as_str), Some("echo: second"));
    let sends: Vec<Value> = remote
        .calls()
        .into_iter()
        .filter(|c| c.method == "SendStreamingMessage")
        .map(|c| c.params["message"]["parts"].clone())
        .collect();
    assert_eq!(sends, vec![json!([{"text": "hang"}]), json!([{"text": "second"}])]);
    kit.shutdown().await;
}

/// The writes the cheapest of three turns costs the store (background writes such as lease
/// renewals may fall inside one), each turn saying `say(n)` and answered `answer(n)`, with the
/// bindings a resumed or later run reads all written. A first turn fetches and pins the
/// remote's card and is not counted.
async fn cheapest_turn_writes(
    kit: &Kit,
    sid: &SessionId,
    say: impl Fn(usize) -> String,
    answer: impl Fn(usize) -> String,
) -> u64 {
    turn(kit, sid, vec![user("warm")], 1).await;
    let mut writes = u64::MAX;
    for n in 2..=4 {
        let before = kit.store.writes_committed();
        let evs = turn(kit, sid, vec![user(&say(n))], n).await;
        writes = writes.min(kit.store.writes_committed() - before);
        assert_eq!(last_stop(&evs), StopReason::EndTurn);
        assert_eq!(texts(&evs).last().cloned(), Some(answer(n)));
        let sent = evs.iter().rfind(|e| matches!(e.payload, EventPayload::UserMessage { .. })).unwrap().seq;
        let b = kit.ctx.coordinator.bindings(sid).await.unwrap();
        assert_eq!(b.get(K_SENT), Some(&sent.to_string()));
        assert_eq!(b.get(K_TASK).map(String::as_str), Some(format!("t{}", n - 1).as_str()));
        assert_eq!(b.get(K_STATE).map(String::as_str), Some("TASK_STATE_COMPLETED"));
    }
    writes
}

/// A remote that streams its task, its artifact and its final status at once: events that
/// arrived together are committed together, so the turn still costs the store only its
/// admission and its settlement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_arrive_together_settle_together() {
    let (_remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    let writes = cheapest_turn_writes(&kit, &sid, |n| format!("burst m{n}"), |n| format!("burst: m{n}")).await;
    assert_eq!(writes, 2, "the admission and the settlement, nothing in between");
    kit.shutdown().await;
}

/// The same three events as writes of their own, a little apart (as a remote on a busy machine
/// streams them): a run waits [`super::LINGER`] for the next event before committing, so they
/// still share the settlement's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_follow_closely_settle_together() {
    let (_remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    let writes = cheapest_turn_writes(&kit, &sid, |n| format!("spaced m{n}"), |n| format!("spaced: m{n}")).await;
    assert_eq!(writes, 2, "the admission and the settlement, nothing in between");
    kit.shutdown().await;
}

/// A remote that streams without pause (an artifact part every millisecond for 80 ms) has its
/// progress committed at least every [`super::MAX_STAGED`], not only when the task settles;
/// every part arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_streams_without_pause_is_committed_as_it_goes() {
    let (_remote, url) = fake(true).await;
    let kit = gateway(&url, None).await;
    let sid = kit.session("remote").await;
    turn(&kit, &sid, vec![user("warm")], 1).await;
    let before = kit.store.writes_committed();
    let evs = turn(&kit, &sid, vec![user("trickle 80")], 2).await;
    let writes = kit.store.writes_committed() - before;
    assert_eq!(last_stop(&evs), StopReason::EndTurn);
    let parts: Vec<String> = texts(&evs).into_iter().skip(1).collect();
    let want: Vec<String> = (1..=80).map(|k| format!("{k} ")).collect();
    assert_eq!(parts, want, "every part once, in order");
    // 80 ms of parts, a commit at least every 25 ms: the admission, two or more on the way,
    // the settlement.
    assert!(writes >= 4, "{writes} writes: progress waited for the settlement");
    kit.shutdown().await;
}

/// A remote whose first word settles the task (streamed, or as the SendMessage answer): the
/// send, the remote task and the answer ride with the settlement, so the turn costs the store
/// its admission (which claims it, or the Workers' claim) and its settlement, no commit of its
/// own in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_comes_at_once_settles_with_the_send_in_one_commit() {
    for streaming in [true, false] {
        let (_remote, url) = fake(streaming).await;
        let kit = gateway(&url, None).await;
        let sid = kit.session("remote").await;
        let writes = cheapest_turn_writes(&kit, &sid, |n| format!("m{n}"), |n| format!("echo: m{n}")).await;
        assert_eq!(writes, 2, "streaming {streaming}: the admission and the settlement");
        kit.shutdown().await;
    }
}

/// A run reuses the endpoint of the remote's pinned card for `card_reuse` instead of reading
/// the card from the store every turn, and follows a card pinned anew (as another process's
/// start-up pins it) once that time has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_card_is_read_again_only_after_its_reuse_time() {
    let (first, url) = fake(false).await;
    let (second, second_url) = fake(false).await;
    let reuse = Duration::from_secs(3);
    let kit = gateway_reusing_cards(&url, None, reuse).await;
    let sid = kit.session("remote").await;
    turn(&kit, &sid, vec![user("one")], 1).await;
    let read_at = tokio::time::Instant::now();
    // The card pinned for this remote now names the second remote's interface.
    let card: Value = reqwest::get(format!("{}/.well-known/agent-card.json", second_url.trim_end_matches('/')))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let docs = kit.ctx.coordinator.documents();
    let pinned =
        crate::tasks::records::get::<Value>(docs, crate::tasks::records::REMOTE_CARDS, "remote").await.unwrap();
    let repinned = serde_json::json!({"sourceUrl": url, "card": card});
    let version = pinned.map(|(_, v)| v);
    crate::tasks::records::put(docs, crate::tasks::records::REMOTE_CARDS, "remote", &repinned, version).await.unwrap();

    turn(&kit, &sid, vec![user("two")], 2).await;
    assert!(read_at.elapsed() < reuse, "the second turn ran within the reuse time; the test proves nothing");
    assert_eq!((first.calls().len(), second.calls().len()), (2, 0), "the endpoint read for the first turn is reused");

    tokio::time::sleep(reuse.saturating_sub(read_at.elapsed()) + Duration::from_millis(100)).await;
    let evs = turn(&kit, &sid, vec![user("three")], 3).await;
    assert_eq!(texts(&evs).last().map(String::as_str), Some("echo: three"));
    assert_eq!((first.calls().len(), second.calls().len()), (2, 1), "past the reuse time the card is read again");
    kit.shutdown().await;
}
