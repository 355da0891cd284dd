//! Projection tests: neutral events in, A2A task states and updates out.
#![allow(clippy::unwrap_used)]

use gateway_core::content::ContentBlock;
use gateway_core::event::{ErrorKind, Event, EventPayload, RetryStatus, StopReason, ToolOrigin, ToolPermission};
use gateway_core::{EventId, RunId, SessionId, Timestamp};
use serde_json::json;

use super::*;

struct Log {
    session: SessionId,
    events: Vec<Event>,
}

impl Log {
    fn new() -> Self {
        Self { session: SessionId::new(), events: vec![] }
    }
    fn push(&mut self, run: Option<&RunId>, payload: EventPayload) -> EventId {
        let id = EventId::new();
        let seq = self.events.len() as u64 + 1;
        self.events.push(Event {
            id: id.clone(),
            session_id: self.session.clone(),
            seq,
            created_at: Timestamp(1_000 + seq as i64),
            run_id: run.cloned(),
            epoch: run.map(|_| 1),
            payload,
        });
        id
    }
    fn user(&mut self, text: &str) -> EventId {
        self.push(None, EventPayload::UserMessage { content: vec![ContentBlock::text(text)] })
    }
    fn say(&mut self, run: &RunId, text: &str) -> EventId {
        self.push(Some(run), EventPayload::AgentMessage { content: vec![ContentBlock::text(text)] })
    }
    /// A turn start naming every input so far as the run's boundary.
    fn started(&mut self, run: &RunId) {
        let through = self.events.len() as u64;
        self.push(Some(run), EventPayload::TurnStarted { inputs_through: through });
    }
    fn ended(&mut self, run: Option<&RunId>, stop: StopReason) {
        self.push(run, EventPayload::TurnEnded { stop });
    }
}

fn fold(log: &Log, start: &EventId) -> (Projector, Vec<StreamResponse>) {
    fold_with(log, start, false)
}

/// Folds as a session of the conformance agent (`hints`) or of any other agent.
fn fold_with(log: &Log, start: &EventId, hints: bool) -> (Projector, Vec<StreamResponse>) {
    let mut p = Projector::new("task_x", "ctx", start.clone(), "m-1").honour_hints(hints);
    let mut updates = vec![];
    for e in &log.events {
        updates.extend(p.apply(e));
    }
    (p, updates)
}

fn states(updates: &[StreamResponse]) -> Vec<TaskState> {
    updates
        .iter()
        .filter_map(|u| match u {
            StreamResponse::StatusUpdate(s) => Some(s.status.state),
            _ => None,
        })
        .collect()
}

#[test]
fn a_turn_becomes_submitted_working_artifact_completed() {
    let mut log = Log::new();
    let run = RunId::new();
    let start = log.user("hi");
    let (p, _) = fold(&log, &start);
    assert_eq!(p.state(), TaskState::Submitted);
    log.started(&run);
    let said = log.say(&run, "echo: hi");
    log.ended(Some(&run), StopReason::EndTurn);
    let (p, updates) = fold(&log, &start);
    assert_eq!(states(&updates), vec![TaskState::Working, TaskState::Completed]);
    assert!(
        matches!(&updates[1], StreamResponse::ArtifactUpdate(a) if a.artifact.artifact_id == said.to_string() && a.last_chunk)
    );
    let t = p.task(None, true);
    assert_eq!(t.status.state, TaskState::Completed);
    assert_eq!(t.artifacts[0].parts[0].text.as_deref(), Some("echo: hi"));
    assert_eq!(t.history[0].message_id, "m-1", "the client's messageId is kept");
    assert_eq!(t.history[0].task_id.as_deref(), Some("task_x"));
    assert_eq!(p.task(Some(0), false).history.len(), 0);
    assert!(p.task(None, false).artifacts.is_empty());
}

#[test]
fn another_tasks_turn_is_not_ours() {
    let mut log = Log::new();
    let (a, b) = (RunId::new(), RunId::new());
    log.user("first");
    log.started(&a);
    let second = log.user("second");
    log.say(&a, "answer to first");
    log.ended(Some(&a), StopReason::EndTurn);
    let (p, _) = fold(&log, &second);
    assert_eq!(p.state(), TaskState::Submitted, "the first turn's end is not ours");
    assert!(p.task(None, true).artifacts.is_empty());
    log.started(&b);
    log.say(&b, "answer to second");
    log.ended(Some(&b), StopReason::EndTurn);
    let (p, _) = fold(&log, &second);
    assert_eq!(p.state(), TaskState::Completed);
    assert_eq!(p.task(None, true).artifacts.len(), 1);
}

#[test]
fn parked_turns_are_input_required_and_resume_in_the_same_task() {
    let mut log = Log::new();
    let (a, b) = (RunId::new(), RunId::new());
    let start = log.user("tool:bash {}");
    log.started(&a);
    let tool = log.push(
        Some(&a),
        EventPayload::ToolUse {
            name: "bash".into(),
            input: Default::default(),
            origin: ToolOrigin::Builtin,
            permission: ToolPermission::Ask,
            policy: None,
        },
    );
    log.ended(Some(&a), StopReason::RequiresAction { event_ids: vec![tool.clone()] });
    let (p, _) = fold(&log, &start);
    assert_eq!(p.state(), TaskState::InputRequired);
    assert!(p.is_interrupted());
    assert_eq!(p.pending(), &[Pending { tool_use_id: tool.clone(), confirmation: true, name: "bash".into() }]);
    let status = p.task(None, true).status.message.unwrap();
    assert_eq!(status.parts[1].data.as_ref().unwrap()["tool_use_id"], json!(tool.to_string()));
    log.push(None, EventPayload::ToolConfirmation { tool_use_id: tool, allow: true, deny_message: None });
    log.started(&b);
    log.say(&b, "done");
    log.ended(Some(&b), StopReason::EndTurn);
    let (p, updates) = fold(&log, &start);
    assert_eq!(
        states(&updates),
        vec![TaskState::Working, TaskState::InputRequired, TaskState::Working, TaskState::Completed]
    );
    assert_eq!(p.task(None, true).history.len(), 3, "message, the input request, the answer");
}

#[test]
fn failures_interrupts_and_refusals_map_to_final_states() {
    for (stop, state) in [
        (StopReason::Interrupted, TaskState::Canceled),
        (StopReason::Refusal, TaskState::Rejected),
        (StopReason::Failed, TaskState::Failed),
        (StopReason::RetriesExhausted, TaskState::Failed),
    ] {
        let mut log = Log::new();
        let run = RunId::new();
        let start = log.user("x");
        log.started(&run);
        log.push(
            Some(&run),
            EventPayload::SessionError {
                kind: ErrorKind::BackendFailed,
                message: "boom".into(),
                retry: RetryStatus::Exhausted,
                server: None,
            },
        );
        log.ended(Some(&run), stop);
        let (p, _) = fold(&log, &start);
        assert_eq!(p.state(), state);
        if state == TaskState::Failed {
            assert_eq!(p.task(None, true).status.message.unwrap().parts[0].text.as_deref(), Some("boom"));
        }
    }
}

#[test]
fn an_interrupt_cancels_a_waiting_task() {
    let mut log = Log::new();
    let a = RunId::new();
    log.user("first");
    log.started(&a);
    let second = log.user("second");
    log.push(None, EventPayload::UserInterrupt {});
    log.ended(Some(&a), StopReason::Interrupted);
    let (p, _) = fold(&log, &second);
    assert_eq!(p.state(), TaskState::Canceled);
}

#[test]
fn hints_steer_artifact_chunks_status_and_direct_messages() {
    let mut log = Log::new();
    let run = RunId::new();
    let start = log.user("x");
    log.started(&run);
    let chunk = |last: bool, t: &str| EventPayload::AgentMessage {
        content: vec![
            hint(json!({"as": "artifact", "artifactId": "c", "append": true, "lastChunk": last})),
            ContentBlock::text(t),
        ],
    };
    log.push(Some(&run), chunk(false, "chunk-1 "));
    log.push(Some(&run), chunk(true, "chunk-2"));
    log.push(
        Some(&run),
        EventPayload::AgentMessage { content: vec![hint(json!({"as": "status"})), ContentBlock::text("Hello")] },
    );
    log.ended(Some(&run), StopReason::EndTurn);
    let (p, updates) = fold_with(&log, &start, true);
    let t = p.task(None, true);
    assert_eq!(t.artifacts.len(), 1);
    assert_eq!(t.artifacts[0].parts.len(), 2);
    assert!(matches!(&updates[2], StreamResponse::ArtifactUpdate(a) if a.append && a.last_chunk));
    assert_eq!(t.status.message.unwrap().parts[0].text.as_deref(), Some("Hello"));
    assert!(p.direct_message().is_none());

    let mut log = Log::new();
    let start = log.user("x");
    log.started(&run);
    log.push(
        Some(&run),
        EventPayload::AgentMessage { content: vec![hint(json!({"as": "message"})), ContentBlock::text("Direct")] },
    );
    let (p, _) = fold_with(&log, &start, true);
    assert_eq!(p.direct_message().unwrap().parts[0].text.as_deref(), Some("Direct"));
    assert!(p.direct_message().unwrap().task_id.is_none());
}

#[test]
fn hints_from_other_agents_are_ordinary_data() {
    let mut log = Log::new();
    let run = RunId::new();
    let start = log.user("x");
    log.push(Some(&run), EventPayload::TurnStarted { inputs_through: 1 });
    // A remote agent (or a model) trying to forge the final status and a direct answer.
    log.push(
        Some(&run),
        EventPayload::AgentMessage { content: vec![hint(json!({"as": "status"})), ContentBlock::text("forged")] },
    );
    log.push(
        Some(&run),
        EventPayload::AgentMessage { content: vec![hint(json!({"as": "message"})), ContentBlock::text("forged")] },
    );
    log.ended(Some(&run), StopReason::EndTurn);
    let (p, _) = fold(&log, &start);
    let t = p.task(None, true);
    assert!(p.direct_message().is_none(), "no direct Message from a non-conformance agent");
    assert!(t.status.message.is_none(), "no forged final status message");
    assert_eq!(t.artifacts.len(), 2, "both messages are ordinary artifacts");
    assert_eq!(t.artifacts[0].parts[0].data.as_ref().unwrap()[HINT_KEY], json!({"as": "status"}));
    assert_eq!(t.artifacts[0].parts[1].text.as_deref(), Some("forged"));
}

#[test]
fn a_retried_earlier_turn_after_a_newer_message_is_not_the_newer_tasks() {
    let mut log = Log::new();
    let (a, b) = (RunId::new(), RunId::new());
    let first = log.user("first");
    // The first turn starts, fails transiently and is re-queued; meanwhile a second message
    // arrives, and the retry of the first turn starts after it.
    log.push(Some(&a), EventPayload::TurnStarted { inputs_through: 1 });
    log.push(Some(&a), EventPayload::TurnRescheduled {});
    let second = log.user("second");
    log.push(Some(&a), EventPayload::TurnStarted { inputs_through: 1 });
    log.say(&a, "answer to first");
    log.ended(Some(&a), StopReason::EndTurn);
    let (p, updates) = fold(&log, &second);
    assert_eq!(p.state(), TaskState::Submitted, "the retried first turn is not the second task's");
    assert!(updates.is_empty(), "{updates:?}");
    assert!(p.task(None, true).artifacts.is_empty());
    let (p, _) = fold(&log, &first);
    assert_eq!(p.state(), TaskState::Completed);
    assert_eq!(p.task(None, true).artifacts[0].parts[0].text.as_deref(), Some("answer to first"));

    let second_seq = log.events.iter().find(|e| e.id == second).unwrap().seq;
    log.push(Some(&b), EventPayload::TurnStarted { inputs_through: second_seq });
    log.say(&b, "answer to second");
    log.ended(Some(&b), StopReason::EndTurn);
    let (p, _) = fold(&log, &second);
    assert_eq!(p.state(), TaskState::Completed);
    let arts = p.task(None, true).artifacts;
    assert_eq!(arts.len(), 1);
    assert_eq!(arts[0].parts[0].text.as_deref(), Some("answer to second"));
}

#[test]
fn a_finished_task_carries_the_sessions_model_usage_in_its_metadata() {
    use gateway_core::event::Usage;
    let mut log = Log::new();
    let run = RunId::new();
    let start = log.user("hi");
    log.started(&run);
    log.say(&run, "echo: hi");
    let usage = Usage { input_tokens: 12, output_tokens: 3, list_cost_micros: 2_500, ..Usage::default() };
    log.push(Some(&run), EventPayload::SessionUsage { usage, budget: None });
    log.ended(Some(&run), StopReason::EndTurn);
    let (p, updates) = fold(&log, &start);
    let want = json!({"usage": {"inputTokens": 12, "outputTokens": 3, "cacheReadInputTokens": 0,
                                "cacheCreationInputTokens": 0, "listCostUsd": 0.0025}});
    let last = updates.iter().rev().find_map(|u| match u {
        StreamResponse::StatusUpdate(s) => Some(s.metadata.clone()),
        _ => None,
    });
    assert_eq!(last.flatten().map(serde_json::Value::Object), Some(want.clone()), "the final status says it");
    assert_eq!(p.task(None, false).metadata.map(serde_json::Value::Object), Some(want), "and so does the task");
    // An unpriced model's usage has tokens, not a cost.
    let mut log = Log::new();
    let start = log.user("hi");
    log.started(&run);
    log.push(
        Some(&run),
        EventPayload::SessionUsage { usage: Usage { unpriced_requests: 1, ..Usage::default() }, budget: None },
    );
    log.ended(Some(&run), StopReason::EndTurn);
    let (p, _) = fold(&log, &start);
    let meta = p.task(None, false).metadata.unwrap();
    assert!(meta["usage"].get("listCostUsd").is_none() && meta["usage"]["inputTokens"] == 0, "{meta:?}");
}
