//! A deterministic scripted backend, the test gateway ([`TestGateway`]) and the Backend
//! conformance suite ([`backends`]) for tests (feature `testing`). Shipped configuration never
//! registers them; only test code and the test-bed binary do.
//!
//! The script is the newest user text among the run's inputs (`RunContext::view`):
//! - `steps N MS`: commits `step i/N` for i = 1..N, one commit each, MS apart. Resumable: after
//!   a crash it continues after the last step committed in this turn.
//! - `sleep MS`: waits (interruptibly), then says `slept`.
//! - `preview TEXT`: streams TEXT as previews in two halves, then commits it with the same id.
//! - `drip MS TEXT`: streams TEXT word by word as previews, MS apart (a slow model), then
//!   commits it with the same id.
//! - `ask`: emits a tool use needing approval and parks; on resume says `approved` or `denied`.
//! - `fail`: a transient failure (retried by the Worker).
//! - `fatal` / `terminal`: a failed turn / a terminated session.
//! - anything else: says `echo: <text>`.

use async_trait::async_trait;
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{ErrorKind, EventKind, EventPayload, NewEvent, ToolOrigin, ToolPermission};
use gateway_core::session::{PendingAction, PendingKind};
use std::time::Duration;

use crate::backend::{Backend, BackendError, RunContext, TurnOutcome};
use crate::previews::Preview;

pub mod backends;
mod gateway;
pub use backends::{BackendUnderTest, Turn};
pub use gateway::{TestGateway, TestGatewayBuilder};

pub struct ScriptedBackend;

fn say(text: impl Into<String>) -> NewEvent {
    NewEvent::new(EventPayload::AgentMessage { content: vec![ContentBlock::text(text)] })
}

async fn pause(ctx: &RunContext, ms: u64) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => true,
        _ = ctx.interrupted() => false,
    }
}

#[async_trait]
impl Backend for ScriptedBackend {
    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        let view = ctx.view().await?;
        let script = view.last_user_text().unwrap_or_default();
        let script = script.as_str();
        let this_turn = view.turn();
        let mut words = script.split_whitespace();
        match words.next().unwrap_or("") {
            "steps" => {
                let n: u32 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1);
                let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let done = this_turn
                    .iter()
                    .filter(|e| matches!(&e.payload, EventPayload::AgentMessage { content } if plain_text(content).starts_with("step ")))
                    .count() as u32;
                for i in done + 1..=n {
                    if !pause(ctx, ms).await {
                        return Ok(TurnOutcome::Interrupted);
                    }
                    ctx.commit(vec![say(format!("step {i}/{n}"))]).await?;
                }
                Ok(TurnOutcome::EndTurn)
            }
            "sleep" => {
                let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1000);
                if !pause(ctx, ms).await {
                    return Ok(TurnOutcome::Interrupted);
                }
                ctx.commit(vec![say("slept")]).await?;
                Ok(TurnOutcome::EndTurn)
            }
            "preview" => {
                let text: String = script.trim_start_matches("preview").trim().to_owned();
                let event = say(text.clone());
                ctx.preview(Preview::Start { event_id: event.id.clone(), kind: EventKind::AgentMessage });
                let mid = text.len() / 2;
                let (a, b) = text.split_at(text.char_indices().map(|(i, _)| i).find(|&i| i >= mid).unwrap_or(0));
                for part in [a, b] {
                    ctx.preview(Preview::TextDelta { event_id: event.id.clone(), index: 0, text: part.to_owned() });
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                ctx.commit(vec![event]).await?;
                Ok(TurnOutcome::EndTurn)
            }
            "drip" => {
                let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(100);
                let text = words.collect::<Vec<_>>().join(" ");
                let event = say(text.clone());
                ctx.preview(Preview::Start { event_id: event.id.clone(), kind: EventKind::AgentMessage });
                for (i, word) in text.split(' ').enumerate() {
                    if !pause(ctx, ms).await {
                        return Ok(TurnOutcome::Interrupted);
                    }
                    let piece = if i == 0 { word.to_owned() } else { format!(" {word}") };
                    ctx.preview(Preview::TextDelta { event_id: event.id.clone(), index: 0, text: piece });
                }
                ctx.commit(vec![event]).await?;
                Ok(TurnOutcome::EndTurn)
            }
            "ask" => {
                let answer = this_turn.iter().find_map(|e| match &e.payload {
                    EventPayload::ToolConfirmation { allow, .. } => Some(*allow),
                    _ => None,
                });
                match answer {
                    Some(allow) => {
                        ctx.commit(vec![say(if allow { "approved" } else { "denied" })]).await?;
                        Ok(TurnOutcome::EndTurn)
                    }
                    None => {
                        let tool = NewEvent::new(EventPayload::ToolUse {
                            name: "bash".into(),
                            input: Default::default(),
                            origin: ToolOrigin::Builtin,
                            permission: ToolPermission::Ask,
                            policy: Some(gateway_core::agent::PermissionPolicy::AlwaysAsk),
                        });
                        let pending =
                            vec![PendingAction { event_id: tool.id.clone(), kind: PendingKind::Confirmation }];
                        ctx.commit(vec![tool]).await?;
                        Ok(TurnOutcome::Parked { pending })
                    }
                }
            }
            "fail" => Err(BackendError::Transient {
                kind: ErrorKind::ModelOverloaded,
                message: "scripted transient failure".into(),
                retry_after: Some(Duration::from_millis(50)),
            }),
            "fatal" => Err(BackendError::Failed { kind: ErrorKind::BackendFailed, message: "scripted failure".into() }),
            "terminal" => {
                Err(BackendError::Terminal { kind: ErrorKind::Unknown, message: "scripted termination".into() })
            }
            _ => {
                ctx.commit(vec![say(format!("echo: {script}"))]).await?;
                Ok(TurnOutcome::EndTurn)
            }
        }
    }
}
