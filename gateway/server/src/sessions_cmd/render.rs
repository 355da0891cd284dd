//! The one renderer of a session's events as lines for a person: `sessions show` and
//! `sessions tail`, from the store or from a gateway's API alike (both hand it the core's
//! [`EventPayload`]). One line per event worth reading: user input, agent text, tool calls
//! with their input, tool results, approvals waited for, errors, turn status and the
//! environment's connection. Bookkeeping events (tool start markers, model request spans)
//! print nothing unless they report a failure.

use std::collections::HashMap;

use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{EventPayload, RetryStatus, StopReason, ToolOrigin, ToolPermission};
use gateway_core::{EventId, Timestamp};

use crate::term::{Paint, one_line};

/// How much of an agent's or user's text a line shows.
const TEXT_CHARS: usize = 2000;
/// How much of a tool's input or result a line shows.
const TOOL_CHARS: usize = 300;
/// Tool names remembered for their results; past this the memory starts again (a result
/// then shows without its tool's name).
const TOOLS_REMEMBERED: usize = 10_000;

/// Renders events to lines; remembers tool names so a result can say whose it is.
#[derive(Debug)]
pub struct Renderer {
    paint: Paint,
    tools: HashMap<EventId, String>,
}

impl Renderer {
    pub fn new(paint: Paint) -> Self {
        Self { paint, tools: HashMap::new() }
    }

    /// The line for one committed event, or `None` for an event not worth a line.
    pub fn line(&mut self, id: &EventId, at: Timestamp, payload: &EventPayload) -> Option<String> {
        let (label, colour, text) = self.describe(id, payload)?;
        let time = at.to_rfc3339();
        let time = time.get(11..19).unwrap_or(&time);
        Some(format!("{} {} {text}", self.paint.paint("2", time), self.paint.paint(colour, &format!("{label:<8}"))))
    }

    fn tool_name(&self, id: &EventId) -> &str {
        self.tools.get(id).map_or("tool", String::as_str)
    }

    fn describe(&mut self, id: &EventId, payload: &EventPayload) -> Option<(&'static str, &'static str, String)> {
        use EventPayload as P;
        Some(match payload {
            P::UserMessage { content } => ("user", "1;36", blocks(content, TEXT_CHARS)),
            P::UserInterrupt {} => ("user", "1;36", "(interrupt)".into()),
            P::ToolConfirmation { tool_use_id, allow, deny_message } => {
                let name = self.tool_name(tool_use_id);
                let verdict = match (allow, deny_message) {
                    (true, _) => format!("{name} allowed"),
                    (false, None) => format!("{name} denied"),
                    (false, Some(m)) => format!("{name} denied: {}", one_line(m, TOOL_CHARS)),
                };
                ("confirm", "35", verdict)
            }
            P::ClientToolResult { tool_use_id, content, is_error, .. } => {
                ("result", "34", result(self.tool_name(tool_use_id), "client", content, *is_error))
            }
            P::TurnStarted { .. } => ("status", "2", "running".into()),
            P::TurnRescheduled {} => ("status", "2", "rescheduled: retrying after a transient failure".into()),
            P::TurnEnded { stop } => ("status", "2", format!("idle ({})", stop_text(stop))),
            P::SessionError { kind, message, retry, .. } => {
                let retry = match retry {
                    RetryStatus::Retrying => "retrying",
                    RetryStatus::Exhausted => "retries exhausted",
                    RetryStatus::Terminal => "final",
                };
                let kind = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned));
                let text = format!("{}: {} ({retry})", kind.unwrap_or_default(), one_line(message, TEXT_CHARS));
                ("error", "1;31", text)
            }
            P::SessionTerminated {} => ("status", "2", "terminated".into()),
            P::SessionDeleted {} => ("status", "2", "deleted".into()),
            P::SessionUpdated { title, metadata, agent, vault_ids, budget } => {
                let changed: Vec<&str> = [
                    (title.is_some(), "title"),
                    (metadata.is_some(), "metadata"),
                    (agent.is_some(), "agent"),
                    (vault_ids.is_some(), "vaults"),
                    (budget.is_some(), "budget"),
                ]
                .into_iter()
                .filter_map(|(c, what)| c.then_some(what))
                .collect();
                ("status", "2", format!("updated: {}", changed.join(", ")))
            }
            P::EnvironmentConnection { status, error, .. } => {
                let mut text = format!("executor {}", status.as_str());
                if let Some(e) = error {
                    text.push_str(": ");
                    text.push_str(&one_line(e, TOOL_CHARS));
                }
                ("env", "34", text)
            }
            P::ConnectionRequested { .. } => ("env", "34", "waiting for an executor to connect".into()),
            P::AgentMessage { content } => ("agent", "32", blocks(content, TEXT_CHARS)),
            P::AgentThinking { text, .. } => {
                ("thinking", "2", text.as_deref().map_or_else(|| "…".to_owned(), |t| one_line(t, TEXT_CHARS)))
            }
            P::ToolUse { name, input, origin, permission, .. } => {
                if self.tools.len() >= TOOLS_REMEMBERED {
                    self.tools.clear();
                }
                self.tools.insert(id.clone(), name.clone());
                let input = one_line(&serde_json::Value::Object(input.clone()).to_string(), TOOL_CHARS);
                let name = match origin {
                    ToolOrigin::Mcp { server } => format!("{server}/{name}"),
                    _ => name.clone(),
                };
                match (permission, origin) {
                    (ToolPermission::Ask, _) => ("approval", "1;35", format!("{name} {input} waits for approval")),
                    (ToolPermission::Deny, _) => ("tool", "33", format!("{name} {input} denied by policy")),
                    (_, ToolOrigin::Custom) => ("tool", "33", format!("{name} {input} (the client answers)")),
                    _ => ("tool", "33", format!("{name} {input}")),
                }
            }
            P::ToolResult { tool_use_id, content, is_error, .. } => {
                ("result", "34", result(self.tool_name(tool_use_id), "", content, *is_error))
            }
            P::ModelRequestEnded { is_error: true, .. } => ("error", "1;31", "a model request failed".into()),
            P::AgentReport { topic, body } => {
                let topic = serde_json::to_value(topic).ok().and_then(|v| v.as_str().map(str::to_owned));
                ("report", "2", format!("{}: {}", topic.unwrap_or_default(), one_line(&body.to_string(), TOOL_CHARS)))
            }
            P::ContextCompacted { summary, .. } => {
                ("status", "2", format!("context compacted: {}", one_line(summary, TOOL_CHARS)))
            }
            // The conversation, not its accounting (the session object carries the usage).
            P::ToolStarted { .. }
            | P::ModelRequestStarted {}
            | P::ModelRequestEnded { .. }
            | P::SessionUsage { .. } => {
                return None;
            }
        })
    }
}

/// Text blocks as one line; other blocks as a bracketed word.
fn blocks(content: &[ContentBlock], max: usize) -> String {
    let others = content.iter().filter(|b| !matches!(b, ContentBlock::Text { .. })).count();
    let mut text = one_line(&plain_text(content), max);
    if others > 0 {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("[+{others} non-text block{}]", if others == 1 { "" } else { "s" }));
    }
    text
}

fn result(name: &str, from: &str, content: &[ContentBlock], is_error: bool) -> String {
    let from = if from.is_empty() { String::new() } else { format!(" ({from})") };
    let verdict = if is_error { "failed" } else { "ok" };
    format!("{name}{from} {verdict}: {}", blocks(content, TOOL_CHARS))
}

fn stop_text(stop: &StopReason) -> String {
    match stop {
        StopReason::EndTurn => "end of turn".into(),
        StopReason::RequiresAction { event_ids } => {
            let n = event_ids.len();
            format!(
                "waiting for {n} answer{} or approval{}",
                if n == 1 { "" } else { "s" },
                if n == 1 { "" } else { "s" }
            )
        }
        StopReason::Interrupted => "interrupted".into(),
        StopReason::RetriesExhausted => "retries exhausted".into(),
        StopReason::Refusal => "the model refused".into(),
        StopReason::RoundLimit => "tool round limit reached".into(),
        StopReason::Failed => "failed".into(),
        StopReason::BudgetReached => "budget reached".into(),
    }
}

#[cfg(test)]
mod tests {
    use gateway_core::JsonObject;
    use gateway_core::event::ErrorKind;

    use super::*;

    /// A live turn as a person reads it: one table row per event, in order.
    #[test]
    fn a_turn_reads_as_one_line_per_event() {
        let at = Timestamp::parse_rfc3339("2026-12-04T16:50:07.250Z").unwrap();
        let tool = EventId::new();
        let mut input = JsonObject::new();
        input.insert("command".into(), "sleep 2; echo hi".into());
        let rows: Vec<(EventId, EventPayload, Option<&str>)> = vec![
            (
                EventId::new(),
                EventPayload::UserMessage { content: vec![ContentBlock::text("tool:bash {…}\nnext line")] },
                Some("16:50:07 user     tool:bash {…} ⏎ next line"),
            ),
            (EventId::new(), EventPayload::TurnStarted { inputs_through: 1 }, Some("16:50:07 status   running")),
            (EventId::new(), EventPayload::ModelRequestStarted {}, None),
            (
                tool.clone(),
                EventPayload::ToolUse {
                    name: "bash".into(),
                    input: input.clone(),
                    origin: ToolOrigin::Builtin,
                    permission: ToolPermission::Allow,
                    policy: None,
                },
                Some(r#"16:50:07 tool     bash {"command":"sleep 2; echo hi"}"#),
            ),
            (EventId::new(), EventPayload::ToolStarted { tool_use_id: tool.clone() }, None),
            (
                EventId::new(),
                EventPayload::ToolResult {
                    tool_use_id: tool.clone(),
                    origin: ToolOrigin::Builtin,
                    content: vec![ContentBlock::text("hi\n")],
                    is_error: false,
                },
                Some("16:50:07 result   bash ok: hi"),
            ),
            (
                EventId::new(),
                EventPayload::AgentMessage { content: vec![ContentBlock::text("done: "), ContentBlock::text("hi")] },
                Some("16:50:07 agent    done: hi"),
            ),
            (
                EventId::new(),
                EventPayload::ToolUse {
                    name: "write".into(),
                    input: JsonObject::new(),
                    origin: ToolOrigin::Builtin,
                    permission: ToolPermission::Ask,
                    policy: None,
                },
                Some("16:50:07 approval write {} waits for approval"),
            ),
            (
                EventId::new(),
                EventPayload::SessionError {
                    kind: ErrorKind::ModelOverloaded,
                    message: "busy".into(),
                    retry: RetryStatus::Retrying,
                    server: None,
                },
                Some("16:50:07 error    model_overloaded: busy (retrying)"),
            ),
            (
                EventId::new(),
                EventPayload::TurnEnded { stop: StopReason::RequiresAction { event_ids: vec![tool] } },
                Some("16:50:07 status   idle (waiting for 1 answer or approval)"),
            ),
        ];
        let mut r = Renderer::new(Paint { colour: false });
        for (id, payload, want) in rows {
            assert_eq!(r.line(&id, at, &payload).as_deref(), want, "{payload:?}");
        }
        let mut coloured = Renderer::new(Paint { colour: true });
        let line = coloured.line(&EventId::new(), at, &EventPayload::TurnStarted { inputs_through: 1 }).unwrap();
        assert_eq!(line, "\x1b[2m16:50:07\x1b[0m \x1b[2mstatus  \x1b[0m running");
    }
}
