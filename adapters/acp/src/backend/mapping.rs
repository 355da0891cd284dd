//! An agent's `session/update`s as neutral events.
//!
//! - Message chunks stream as previews and are committed as one `agent_message` when
//!   something else happens (a tool call, a thought, a permission request, the turn's end),
//!   under the id the previews used.
//! - Thought chunks are committed as one `agent_thinking`.
//! - Tool calls become `tool_use` (origin `backend`: the agent runs them itself), `tool_started`
//!   when they run, `tool_result` when they finish. A call still `pending` is not committed
//!   until it runs or asks permission, so a call that asks is one `tool_use` with permission
//!   `ask`, which is what parks the core's turn.
//! - What the agent says about itself for its client (plans, commands, modes, settings, a
//!   title, usage) is kept as the agent sent it in an `agent_report` (ADR 0028), so an editor
//!   sees it through the gateway as it would connected directly: a plan is committed at once
//!   (the user watches it), the rest rides with the run's next commit. A report larger than
//!   [`REPORT_CAP`] is logged and skipped, as are unknown kinds: the turn never fails on them.

use gateway_core::content::ContentBlock;
use gateway_core::event::{EventKind, EventPayload, NewEvent, ReportTopic, ToolOrigin, ToolPermission};
use gateway_core::{EventId, JsonObject};
use gateway_runtime::{BackendError, Preview, RunContext};
use serde_json::Value;
use tracing::{debug, info};

use crate::rpc::clip;

/// Text an agent streams into one message (or thought) is committed once it reaches this
/// size and continues in a new one: an agent that never stops talking cannot grow the
/// gateway's memory for the whole turn deadline, nor make one giant event.
const TEXT_CAP: usize = 1 << 20;

/// Largest agent report kept (its JSON form).
const REPORT_CAP: usize = 64 * 1024;

/// The topic an update kind reports on, for the kinds kept as reports.
fn report_topic(kind: &str) -> Option<ReportTopic> {
    Some(match kind {
        "plan" => ReportTopic::Plan,
        "available_commands_update" => ReportTopic::Commands,
        "current_mode_update" => ReportTopic::Mode,
        "config_option_update" => ReportTopic::Settings,
        "session_info_update" => ReportTopic::Title,
        "usage_update" => ReportTopic::Usage,
        _ => return None,
    })
}

/// An update as a report, if it is small enough to keep.
pub(super) fn report_of(topic: ReportTopic, body: &Value) -> Option<NewEvent> {
    report(topic, body)
}

fn report(topic: ReportTopic, body: &Value) -> Option<NewEvent> {
    let size = serde_json::to_vec(body).map_or(usize::MAX, |b| b.len());
    if size > REPORT_CAP {
        info!(?topic, size, "agent report over 64 KiB skipped");
        return None;
    }
    Some(NewEvent::new(EventPayload::AgentReport { topic, body: body.clone() }))
}

/// What an agent's answer to `session/new`, `load` or `resume` says about itself: its modes
/// (kept whole: only an opening answer lists them) and its settings (as the update that
/// replaces them, `config_option_update`).
pub fn opening_reports(answer: &Value) -> Vec<NewEvent> {
    let mut out = Vec::new();
    if let Some(modes) = answer.get("modes").filter(|m| m.is_object()) {
        out.extend(report(ReportTopic::Modes, modes));
    }
    if let Some(options) = answer.get("configOptions").filter(|o| o.is_array()) {
        let update = serde_json::json!({"sessionUpdate": "config_option_update", "configOptions": options});
        out.extend(report(ReportTopic::Settings, &update));
    }
    out
}

/// One agent tool call as the gateway tracks it.
#[derive(Debug, Clone, Default)]
pub struct ToolState {
    pub title: String,
    pub input: JsonObject,
    /// The committed `tool_use`, once there is one.
    pub event: Option<EventId>,
    pub started: bool,
    pub finished: bool,
}

impl ToolState {
    fn merge(&mut self, u: &Value) {
        if let Some(t) = u.get("title").and_then(Value::as_str) {
            self.title = clip(t, 500).to_owned();
        }
        match u.get("rawInput") {
            Some(Value::Object(o)) => self.input = o.clone(),
            Some(Value::Null) | None => {}
            Some(other) => {
                self.input = JsonObject::new();
                self.input.insert("value".into(), other.clone());
            }
        }
    }

    fn tool_use(&self, permission: ToolPermission) -> NewEvent {
        let name = if self.title.is_empty() { "tool".to_owned() } else { self.title.clone() };
        NewEvent::new(EventPayload::ToolUse {
            name,
            input: self.input.clone(),
            origin: ToolOrigin::Backend,
            permission,
            policy: None,
        })
    }
}

/// What a tool call's `content` (and `rawOutput`) say, as text.
fn result_text(u: &Value) -> String {
    let mut parts = Vec::new();
    for c in u.get("content").and_then(Value::as_array).into_iter().flatten() {
        match c.get("type").and_then(Value::as_str) {
            Some("content") => {
                if let Some(ContentBlock::Text { text }) = c.get("content").and_then(crate::wire::acp_to_core) {
                    parts.push(text);
                }
            }
            Some("diff") => parts.push(format!("edited {}", c.get("path").and_then(Value::as_str).unwrap_or("a file"))),
            Some("terminal") => {
                parts.push(format!("terminal {}", c.get("terminalId").and_then(Value::as_str).unwrap_or("")))
            }
            _ => {}
        }
    }
    if parts.is_empty()
        && let Some(raw) = u.get("rawOutput").filter(|v| !v.is_null())
    {
        parts.push(match raw {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    parts.join("\n")
}

/// The text being streamed, not yet committed.
#[derive(Default)]
pub struct Mapper {
    message: Option<(EventId, String, Option<String>)>,
    thought: Option<String>,
}

impl Mapper {
    /// Commits buffered text and thoughts.
    pub async fn flush(&mut self, ctx: &RunContext) -> Result<(), BackendError> {
        let events = self.take_streamed();
        if !events.is_empty() {
            ctx.commit(events).await?;
        }
        Ok(())
    }

    /// The text streamed so far, and `bindings`, staged for the settlement: at the prompt's
    /// answer, so the turn's last text, the fact that the agent answered and the turn's end
    /// cost one commit. Lost with the claim, they leave the prompt sent and not answered,
    /// which the resumed run reports as a failed turn (the agent may have acted), never as
    /// an answer.
    pub fn stage_with(&mut self, ctx: &RunContext, bindings: Vec<(String, String)>) {
        ctx.stage_with_bindings(self.take_streamed(), bindings);
    }

    fn take_streamed(&mut self) -> Vec<NewEvent> {
        let mut events = Vec::new();
        if let Some(t) = self.thought.take() {
            events.push(NewEvent::new(EventPayload::AgentThinking { text: Some(t), seal: None }));
        }
        if let Some((id, text, _)) = self.message.take() {
            events
                .push(NewEvent { id, payload: EventPayload::AgentMessage { content: vec![ContentBlock::text(text)] } });
        }
        events
    }

    /// Maps one update; tool state lives in `tools` (it outlives a parked run).
    pub async fn update(
        &mut self,
        ctx: &RunContext,
        tools: &mut std::collections::HashMap<String, ToolState>,
        u: &Value,
    ) -> Result<(), BackendError> {
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        match kind {
            "agent_message_chunk" => {
                let Some(ContentBlock::Text { text }) = u.get("content").and_then(crate::wire::acp_to_core) else {
                    debug!("non-text message chunk skipped");
                    return Ok(());
                };
                let message_id = u.get("messageId").and_then(Value::as_str).map(str::to_owned);
                if self.thought.is_some()
                    || self.message.as_ref().is_some_and(|(_, _, m)| message_id.is_some() && *m != message_id)
                {
                    self.flush(ctx).await?;
                }
                let (id, buf, _) = self.message.get_or_insert_with(|| {
                    let id = EventId::new();
                    ctx.preview(Preview::Start { event_id: id.clone(), kind: EventKind::AgentMessage });
                    (id, String::new(), message_id)
                });
                ctx.preview(Preview::TextDelta { event_id: id.clone(), index: 0, text: text.clone() });
                buf.push_str(&text);
                if buf.len() >= TEXT_CAP {
                    self.flush(ctx).await?;
                }
            }
            "agent_thought_chunk" => {
                if let Some(ContentBlock::Text { text }) = u.get("content").and_then(crate::wire::acp_to_core) {
                    if self.message.is_some() {
                        self.flush(ctx).await?;
                    }
                    let thought = self.thought.get_or_insert_with(String::new);
                    thought.push_str(&text);
                    if thought.len() >= TEXT_CAP {
                        self.flush(ctx).await?;
                    }
                }
            }
            "tool_call" | "tool_call_update" => {
                self.flush(ctx).await?;
                let Some(call_id) = u.get("toolCallId").and_then(Value::as_str) else {
                    info!(kind, "tool update without a toolCallId skipped");
                    return Ok(());
                };
                let state = tools.entry(clip(call_id, 200).to_owned()).or_default();
                state.merge(u);
                let status = u.get("status").and_then(Value::as_str).unwrap_or("pending");
                let mut events = Vec::new();
                if matches!(status, "in_progress" | "completed" | "failed") && state.event.is_none() {
                    let e = state.tool_use(ToolPermission::Allow);
                    state.event = Some(e.id.clone());
                    events.push(e);
                }
                if let Some(id) = &state.event {
                    if matches!(status, "in_progress" | "completed" | "failed") && !state.started {
                        state.started = true;
                        events.push(NewEvent::new(EventPayload::ToolStarted { tool_use_id: id.clone() }));
                    }
                    if matches!(status, "completed" | "failed") && !state.finished {
                        state.finished = true;
                        events.push(NewEvent::new(EventPayload::ToolResult {
                            tool_use_id: id.clone(),
                            origin: ToolOrigin::Backend,
                            content: vec![ContentBlock::text(result_text(u))],
                            is_error: status == "failed",
                        }));
                    }
                }
                if !events.is_empty() {
                    ctx.commit(events).await?;
                }
            }
            "plan" => {
                // The user watches the plan as the agent works: shown at once, after the text
                // it follows.
                if let Some(e) = report(ReportTopic::Plan, u) {
                    let mut events = self.take_streamed();
                    events.push(e);
                    ctx.commit(events).await?;
                }
            }
            kind if report_topic(kind).is_some() => {
                if let Some(e) = report_topic(kind).and_then(|topic| report(topic, u)) {
                    ctx.stage([e]);
                }
            }
            "user_message_chunk" => {
                debug!(kind, "update kind without a neutral event; skipped");
            }
            other => info!(kind = %clip(other, 80), "unknown session/update kind; skipped"),
        }
        Ok(())
    }

    /// A permission request: the tool call it is about, committed as a `tool_use` asking
    /// permission. Returns that event's id (what the parked turn waits on).
    pub async fn permission(
        &mut self,
        ctx: &RunContext,
        tools: &mut std::collections::HashMap<String, ToolState>,
        params: &Value,
    ) -> Result<EventId, BackendError> {
        self.flush(ctx).await?;
        let call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let call_id = call.get("toolCallId").and_then(Value::as_str).map(|s| clip(s, 200).to_owned());
        let mut fresh = ToolState::default();
        let state = match &call_id {
            Some(id) => tools.entry(id.clone()).or_default(),
            None => &mut fresh,
        };
        state.merge(&call);
        let event = state.tool_use(ToolPermission::Ask);
        let id = event.id.clone();
        if state.event.is_none() {
            // The call's results will be reported against this event.
            state.event = Some(id.clone());
        }
        ctx.commit(vec![event]).await?;
        Ok(id)
    }
}

/// The option of a permission request to select for a core answer, by kind.
pub fn choose_option(options: &Value, allow: bool) -> Option<String> {
    let kinds: &[&str] = if allow { &["allow_once", "allow_always"] } else { &["reject_once", "reject_always"] };
    let opts = options.as_array()?;
    kinds.iter().find_map(|k| {
        opts.iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some(k))
            .and_then(|o| o.get("optionId").and_then(Value::as_str))
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_chosen_by_kind() {
        let o = json!([
            {"optionId": "a", "kind": "allow_always", "name": "A"},
            {"optionId": "b", "kind": "reject_once", "name": "B"},
            {"optionId": "c", "kind": "allow_once", "name": "C"}
        ]);
        assert_eq!(choose_option(&o, true).as_deref(), Some("c"));
        assert_eq!(choose_option(&o, false).as_deref(), Some("b"));
        assert_eq!(choose_option(&json!([{"optionId": "x", "kind": "allow_always"}]), false), None);
    }

    #[test]
    fn an_opening_answer_reports_modes_and_settings_and_big_reports_are_skipped() {
        let answer = json!({
            "sessionId": "s",
            "modes": {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]},
            "configOptions": [{"id": "model", "name": "Model", "type": "select", "currentValue": "x", "options": []}],
        });
        let reports: Vec<_> = opening_reports(&answer).into_iter().map(|e| e.payload).collect();
        assert_eq!(
            reports,
            vec![
                EventPayload::AgentReport { topic: ReportTopic::Modes, body: answer["modes"].clone() },
                EventPayload::AgentReport {
                    topic: ReportTopic::Settings,
                    body: json!({"sessionUpdate": "config_option_update", "configOptions": answer["configOptions"]}),
                },
            ]
        );
        assert!(opening_reports(&json!({"sessionId": "s"})).is_empty());
        let big = json!({"sessionUpdate": "plan", "entries": [{"content": "x".repeat(REPORT_CAP)}]});
        assert!(report(ReportTopic::Plan, &big).is_none(), "over 64 KiB is not kept");
        assert_eq!(report_topic("usage_update"), Some(ReportTopic::Usage));
        assert_eq!(report_topic("agent_message_chunk"), None);
    }

    #[test]
    fn results_read_content_then_raw_output() {
        let u = json!({"content": [
            {"type": "content", "content": {"type": "text", "text": "out"}},
            {"type": "diff", "path": "/w/a", "newText": "x"}
        ]});
        assert_eq!(result_text(&u), "out\nedited /w/a");
        assert_eq!(result_text(&json!({"rawOutput": {"code": 1}})), "{\"code\":1}");
        assert_eq!(result_text(&json!({})), "");
    }
}
