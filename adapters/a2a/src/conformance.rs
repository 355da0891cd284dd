//! The built-in conformance agent (`builtin:conformance`, published as `conformance` when
//! `[a2a] conformance_agent = true`): the A2A TCK's SUT contract (protocols/a2a.md §9).
//!
//! Behaviour is keyed on the messageId prefix (read from the task record the A2A adapter wrote
//! before committing the message), falling back to the message text (so Managed Agents clients
//! and card-driven runners such as a2a-proof reach the same scenarios). It runs through the
//! core like any agent: neutral events committed under its run's fence, projection hints
//! where A2A needs more than the neutral events say (docs/adr/0009-a2a.md).

use std::time::Duration;

use async_trait::async_trait;
use gateway_core::agent::BackendRef;
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{Event, EventKind, EventPayload, NewEvent, ToolOrigin, ToolPermission};
use gateway_core::session::{PendingAction, PendingKind};
use gateway_runtime::{Backend, BackendError, RunContext, TurnOutcome};
use serde_json::json;

use crate::tasks::projection::hint;
use crate::tasks::records::{self, AnswerRecord, TaskRecord, task_id_for};

pub struct ConformanceBackend;

/// The builtin name the conformance agent is published under (`builtin:conformance`).
pub const BUILTIN_NAME: &str = "conformance";

/// Whether a backend is the conformance agent: only its sessions' projection hints count.
pub fn is_conformance(backend: &BackendRef) -> bool {
    matches!(backend, BackendRef::Builtin { name } if name == BUILTIN_NAME)
}

fn say(blocks: Vec<ContentBlock>) -> NewEvent {
    NewEvent::new(EventPayload::AgentMessage { content: blocks })
}

fn artifact(text: &str) -> NewEvent {
    say(vec![ContentBlock::text(text)])
}

fn status(text: &str) -> NewEvent {
    say(vec![hint(json!({"as": "status"})), ContentBlock::text(text)])
}

fn file_artifact(url: bool) -> NewEvent {
    let block = if url {
        ContentBlock::Link {
            uri: "https://example.com/output.txt".into(),
            name: Some("output.txt".into()),
            mime_type: Some("text/plain".into()),
        }
    } else {
        ContentBlock::Resource {
            uri: "output.txt".into(),
            mime_type: Some("text/plain".into()),
            text: None,
            blob: Some("dGNr".into()),
        }
    };
    say(vec![block])
}

/// The scenario names, longest first so `tck-artifact-file-url` wins over `tck-artifact-file`.
const SCENARIOS: [&str; 17] = [
    "tck-stream-artifact-chunked",
    "test-resubscribe-message-id",
    "tck-stream-artifact-file",
    "tck-stream-artifact-text",
    "tck-stream-ordering-001",
    "tck-artifact-file-url",
    "tck-message-response",
    "tck-input-required",
    "tck-artifact-file",
    "tck-artifact-text",
    "tck-artifact-data",
    "tck-complete-task",
    "tck-reject-task",
    "tck-stream-001",
    "tck-stream-002",
    "tck-stream-003",
    "tck-",
];

pub fn scenario(key: &str) -> Option<&'static str> {
    SCENARIOS.iter().copied().find(|s| key.starts_with(s)).filter(|s| *s != "tck-")
}

async fn pause(ctx: &RunContext, ms: u64) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => true,
        _ = ctx.interrupted() => false,
    }
}

#[async_trait]
impl Backend for ConformanceBackend {
    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        // The run's inputs (`gateway_core::turn`): its message, and the answers to it when
        // the turn resumes after asking for input.
        let view = ctx.turn_view().await?;
        let inputs: Vec<&Event> = view.inputs().collect();
        let Some(i) = inputs.iter().rposition(|e| e.kind() == EventKind::UserMessage) else {
            return Ok(TurnOutcome::EndTurn);
        };
        let start: &Event = inputs[i];
        let text = match &start.payload {
            EventPayload::UserMessage { content } => plain_text(content),
            _ => String::new(),
        };
        // A follow-up on the INPUT_REQUIRED task is an answer; the TCK's contract keys it on
        // its own messageId like a first message (`tck-input-required` parks the task again,
        // `tck-complete-task` completes it); one that names no scenario completes it with
        // the answer quoted.
        let answered = inputs[i + 1..].iter().rev().find_map(|e| match &e.payload {
            EventPayload::ClientToolResult { content, .. } => Some((e.id.clone(), plain_text(content))),
            _ => None,
        });
        let docs = ctx.documents();
        let (message_id, text) = match &answered {
            Some((answer, answer_text)) => {
                let asked = records::get::<AnswerRecord>(docs, records::ANSWERS, answer.as_str()).await;
                (asked.ok().flatten().map(|(r, _)| r.message_id).unwrap_or_default(), answer_text.clone())
            }
            None => {
                let asked = records::get::<TaskRecord>(docs, records::TASKS, &task_id_for(&start.id)).await;
                (asked.ok().flatten().map(|(r, _)| r.message_id).unwrap_or_default(), text)
            }
        };
        if let Some((_, answer)) = &answered
            && scenario(&message_id).is_none()
        {
            ctx.commit(vec![status(&format!("Input received: {answer}"))]).await?;
            return Ok(TurnOutcome::EndTurn);
        }
        let key = if scenario(&message_id).is_some() { message_id.as_str() } else { text.trim() };
        let step = 50;
        let events = match scenario(key) {
            Some("tck-complete-task") => vec![status("Hello from TCK")],
            Some("tck-artifact-text") => vec![artifact("Generated text content")],
            Some("tck-artifact-data") => {
                vec![say(vec![ContentBlock::Data { data: json!({"key": "value", "count": 42}) }])]
            }
            Some("tck-artifact-file") | Some("tck-stream-artifact-file") => vec![file_artifact(false)],
            Some("tck-artifact-file-url") => vec![file_artifact(true)],
            Some("tck-message-response") => {
                vec![say(vec![hint(json!({"as": "message"})), ContentBlock::text("Direct message response")])]
            }
            Some("tck-reject-task") => {
                ctx.commit(vec![status("rejected")]).await?;
                return Ok(TurnOutcome::Refusal);
            }
            Some("tck-input-required") => {
                let tool = NewEvent::new(EventPayload::ToolUse {
                    name: "input".into(),
                    input: json!({"prompt": "Please provide input"}).as_object().cloned().unwrap_or_default(),
                    origin: ToolOrigin::Custom,
                    permission: ToolPermission::Allow,
                    policy: None,
                });
                let pending = vec![PendingAction { event_id: tool.id.clone(), kind: PendingKind::ClientResult }];
                ctx.commit(vec![tool]).await?;
                return Ok(TurnOutcome::Parked { pending });
            }
            Some("tck-stream-001") => vec![artifact("Stream hello from TCK")],
            Some("tck-stream-002") => vec![],
            Some("tck-stream-003") => vec![artifact("Stream task lifecycle")],
            Some("tck-stream-ordering-001") => vec![artifact("Ordered output")],
            Some("tck-stream-artifact-text") => vec![artifact("Streamed text content")],
            Some("tck-stream-artifact-chunked") => vec![
                say(vec![
                    hint(json!({"as": "artifact", "artifactId": "chunked", "append": true})),
                    ContentBlock::text("chunk-1 "),
                ]),
                say(vec![
                    hint(json!({"as": "artifact", "artifactId": "chunked", "append": true, "lastChunk": true})),
                    ContentBlock::text("chunk-2"),
                ]),
            ],
            Some("test-resubscribe-message-id") => {
                if !pause(ctx, 4000).await {
                    return Ok(TurnOutcome::Interrupted);
                }
                vec![status("Resubscribe scenario done")]
            }
            _ => vec![status(&format!("Echo: {text}"))],
        };
        for e in events {
            if !pause(ctx, step).await {
                return Ok(TurnOutcome::Interrupted);
            }
            ctx.commit(vec![e]).await?;
        }
        Ok(TurnOutcome::EndTurn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins() {
        assert_eq!(scenario("tck-artifact-file-url-123"), Some("tck-artifact-file-url"));
        assert_eq!(scenario("tck-artifact-file-123"), Some("tck-artifact-file"));
        assert_eq!(scenario("tck-stream-artifact-chunked-9"), Some("tck-stream-artifact-chunked"));
        assert_eq!(scenario("tck-unknown"), None);
        assert_eq!(scenario("hello"), None);
    }
}
