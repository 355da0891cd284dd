//! Managed Agents wire JSON read back into the core's neutral types: the inverse of the
//! projections in `wire/` (`wire::event::project`, `wire::session::session_out`), for clients
//! of a gateway (the `gateway sessions` commands in remote mode) that render what they read
//! the one way they render what they read from the store.
//!
//! Tolerant: an unknown event type, or a field this reader does not need, is skipped, never an
//! error. The projection loses a few distinctions (an interrupted turn is shown as
//! `end_turn`, a backend tool's use as `agent.tool_use`, a turn's input boundary not at all);
//! what comes back is the nearest neutral value, which is all a reader of the stream has.

use gateway_core::content::ContentBlock;
use gateway_core::environment::ConnectionStatus;
use gateway_core::event::{ErrorKind, EventPayload, RetryStatus, StopReason, ToolOrigin, ToolPermission, Usage};
use gateway_core::session::{EnvironmentState, SessionStatus, SessionSummary};
use gateway_core::{EnvironmentId, EventId, SessionId, Timestamp};
use serde_json::Value;

use crate::wire::content::{BlockIn, blocks_in};
use crate::wire::event::budget_in;

/// A committed event as a gateway's API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteEvent {
    pub id: EventId,
    pub at: Timestamp,
    pub payload: EventPayload,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn event_id(v: &Value, key: &str) -> Option<EventId> {
    str_of(v, key).and_then(|s| EventId::parse(s).ok())
}

/// Content blocks, each read as the API reads a client's (a block it cannot read is left out;
/// `redacted` is kept as such).
fn content(v: &Value) -> Vec<ContentBlock> {
    let Some(blocks) = v.get("content").and_then(Value::as_array) else { return Vec::new() };
    blocks
        .iter()
        .filter_map(|b| {
            if str_of(b, "type") == Some("redacted") {
                return Some(ContentBlock::Redacted);
            }
            let block: BlockIn = serde_json::from_value(b.clone()).ok()?;
            blocks_in(vec![block], true).ok()?.pop()
        })
        .collect()
}

fn stop_reason(v: &Value) -> StopReason {
    let stop = v.get("stop_reason").unwrap_or(&Value::Null);
    match str_of(stop, "type") {
        Some("requires_action") => StopReason::RequiresAction {
            event_ids: stop
                .get("event_ids")
                .and_then(Value::as_array)
                .map(|ids| ids.iter().filter_map(|i| i.as_str().and_then(|s| EventId::parse(s).ok())).collect())
                .unwrap_or_default(),
        },
        Some("retries_exhausted") => StopReason::RetriesExhausted,
        Some("refusal") => StopReason::Refusal,
        Some("budget_reached") => StopReason::BudgetReached,
        _ => StopReason::EndTurn,
    }
}

fn session_error(v: &Value) -> EventPayload {
    let error = v.get("error").unwrap_or(&Value::Null);
    let kind = match str_of(error, "type") {
        Some("model_overloaded_error") => ErrorKind::ModelOverloaded,
        Some("model_rate_limited_error") => ErrorKind::ModelRateLimited,
        Some("model_request_failed_error") => ErrorKind::ModelRequestFailed,
        Some("tool_use_limit_reached_error") => ErrorKind::RoundLimitReached,
        Some("compaction_limit_reached_error") => ErrorKind::CompactionLimitReached,
        Some("mcp_connection_failed_error") => ErrorKind::McpConnectionFailed,
        Some("mcp_authentication_failed_error") => ErrorKind::McpAuthenticationFailed,
        _ => ErrorKind::Unknown,
    };
    let retry = match error.get("retry_status").and_then(|r| str_of(r, "type")) {
        Some("retrying") => RetryStatus::Retrying,
        Some("exhausted") => RetryStatus::Exhausted,
        _ => RetryStatus::Terminal,
    };
    EventPayload::SessionError {
        kind,
        message: str_of(error, "message").unwrap_or_default().to_owned(),
        retry,
        server: str_of(error, "mcp_server_name").map(str::to_owned),
    }
}

fn tool_use(v: &Value, origin: ToolOrigin) -> EventPayload {
    let permission = match str_of(v, "evaluated_permission") {
        Some("ask") => ToolPermission::Ask,
        Some("deny") => ToolPermission::Deny,
        _ => ToolPermission::Allow,
    };
    EventPayload::ToolUse {
        name: str_of(v, "name").unwrap_or_default().to_owned(),
        input: v.get("input").and_then(Value::as_object).cloned().unwrap_or_default(),
        origin,
        permission,
        policy: None,
    }
}

/// The neutral payload of one wire event; `None` for a type this reader does not show.
fn payload(v: &Value) -> Option<EventPayload> {
    let t = str_of(v, "type")?;
    let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    Some(match t {
        "user.message" => EventPayload::UserMessage { content: content(v) },
        "user.interrupt" => EventPayload::UserInterrupt {},
        "user.tool_confirmation" => EventPayload::ToolConfirmation {
            tool_use_id: event_id(v, "tool_use_id")?,
            allow: str_of(v, "result") == Some("allow"),
            deny_message: str_of(v, "deny_message").map(str::to_owned),
        },
        "user.custom_tool_result" => EventPayload::ClientToolResult {
            tool_use_id: event_id(v, "custom_tool_use_id")?,
            content: content(v),
            is_error,
            origin: ToolOrigin::Custom,
        },
        "user.tool_result" => EventPayload::ClientToolResult {
            tool_use_id: event_id(v, "tool_use_id")?,
            content: content(v),
            is_error,
            origin: ToolOrigin::Builtin,
        },
        "session.status_running" => EventPayload::TurnStarted { inputs_through: 0 },
        "session.status_rescheduled" => EventPayload::TurnRescheduled {},
        "session.status_idle" => EventPayload::TurnEnded { stop: stop_reason(v) },
        "session.status_terminated" => EventPayload::SessionTerminated {},
        "session.deleted" => EventPayload::SessionDeleted {},
        "session.error" => session_error(v),
        "agent.message" => EventPayload::AgentMessage { content: content(v) },
        "agent.thinking" => EventPayload::AgentThinking { text: None, seal: None },
        "agent.tool_use" => tool_use(v, ToolOrigin::Builtin),
        "agent.custom_tool_use" => tool_use(v, ToolOrigin::Custom),
        "agent.mcp_tool_use" => {
            tool_use(v, ToolOrigin::Mcp { server: str_of(v, "mcp_server_name").unwrap_or_default().to_owned() })
        }
        "agent.tool_result" => EventPayload::ToolResult {
            tool_use_id: event_id(v, "tool_use_id")?,
            origin: ToolOrigin::Builtin,
            content: content(v),
            is_error,
        },
        "agent.mcp_tool_result" => EventPayload::ToolResult {
            tool_use_id: event_id(v, "mcp_tool_use_id")?,
            origin: ToolOrigin::Mcp { server: String::new() },
            content: content(v),
            is_error,
        },
        "agent.session.requires_action" => {
            let action = v.get("required_action")?;
            EventPayload::ConnectionRequested {
                environment_id: EnvironmentId::parse(str_of(action, "environment_id")?).ok()?,
            }
        }
        "session.usage" => {
            let usage = v.get("usage").unwrap_or(&Value::Null);
            let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            let written = |k: &str| usage.pointer(&format!("/cache_creation/{k}")).and_then(Value::as_u64).unwrap_or(0);
            EventPayload::SessionUsage {
                usage: Usage {
                    input_tokens: n("input_tokens"),
                    output_tokens: n("output_tokens"),
                    cache_read_input_tokens: n("cache_read_input_tokens"),
                    cache_creation_input_tokens: written("ephemeral_5m_input_tokens")
                        + written("ephemeral_1h_input_tokens"),
                    ..crate::wire::event::usage_cost_in(usage)
                },
                budget: v.get("budget").filter(|b| !b.is_null()).and_then(|b| budget_in(b.clone()).ok()),
            }
        }
        "span.model_request_start" => EventPayload::ModelRequestStarted {},
        "span.model_request_end" => {
            let usage = v.get("model_usage").unwrap_or(&Value::Null);
            let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            EventPayload::ModelRequestEnded {
                start_id: event_id(v, "model_request_start_id")?,
                is_error,
                usage: Usage {
                    input_tokens: n("input_tokens"),
                    output_tokens: n("output_tokens"),
                    cache_read_input_tokens: n("cache_read_input_tokens"),
                    cache_creation_input_tokens: n("cache_creation_input_tokens"),
                    ..Usage::default()
                },
            }
        }
        other => {
            let status = other.strip_prefix("agent.session.environment.")?;
            let environment = v.get("environment")?;
            EventPayload::EnvironmentConnection {
                environment_id: EnvironmentId::parse(str_of(environment, "id")?).ok()?,
                status: ConnectionStatus::parse(status)?,
                error: environment.get("error").and_then(|e| str_of(e, "message")).map(str::to_owned),
            }
        }
    })
}

/// A committed event of a list or a stream; `None` for previews and types not shown.
pub fn event(v: &Value) -> Option<RemoteEvent> {
    Some(RemoteEvent {
        id: event_id(v, "id")?,
        at: Timestamp::parse_rfc3339(str_of(v, "processed_at")?)?,
        payload: payload(v)?,
    })
}

/// A session object as the digest the `sessions` commands show.
pub fn session(v: &Value) -> Option<SessionSummary> {
    let agent = v.get("agent").unwrap_or(&Value::Null);
    let time = |k: &str| str_of(v, k).and_then(Timestamp::parse_rfc3339);
    Some(SessionSummary {
        id: SessionId::parse(str_of(v, "id")?).ok()?,
        status: SessionStatus::parse(str_of(v, "status")?)?,
        agent_id: str_of(agent, "id").unwrap_or_default().to_owned(),
        agent_name: str_of(agent, "name").unwrap_or_default().to_owned(),
        backend: str_of(agent, "backend").unwrap_or("native").to_owned(),
        environment_state: str_of(v, "environment_state")
            .and_then(EnvironmentState::parse)
            .unwrap_or(EnvironmentState::None),
        title: str_of(v, "title").map(str::to_owned),
        created_at: time("created_at")?,
        updated_at: time("updated_at")?,
    })
}

#[cfg(test)]
mod tests {
    use gateway_core::event::{Event, EventKind};
    use gateway_core::{JsonObject, RunId};

    use super::*;
    use crate::wire::event::project;

    fn committed(payload: EventPayload) -> Event {
        Event {
            id: EventId::new(),
            session_id: SessionId::new(),
            seq: 3,
            created_at: Timestamp(1_764_417_600_123),
            run_id: Some(RunId::new()),
            epoch: Some(1),
            payload,
        }
    }

    /// Every event the API shows reads back as the same kind, id and time, and the payloads a
    /// reader renders (text, tool calls, results, errors, turn ends) read back whole: the
    /// projection and this decoder cannot drift apart unnoticed.
    #[test]
    fn every_projected_event_reads_back() {
        let tool = EventId::new();
        let mut input = JsonObject::new();
        input.insert("command".into(), Value::from("sleep 2; echo hi"));
        let exact = vec![
            EventPayload::UserMessage { content: vec![ContentBlock::text("hi")] },
            EventPayload::UserInterrupt {},
            EventPayload::ToolConfirmation { tool_use_id: tool.clone(), allow: false, deny_message: Some("no".into()) },
            EventPayload::ClientToolResult {
                tool_use_id: tool.clone(),
                content: vec![ContentBlock::text("42")],
                is_error: true,
                origin: ToolOrigin::Custom,
            },
            EventPayload::TurnRescheduled {},
            EventPayload::TurnEnded { stop: StopReason::RequiresAction { event_ids: vec![tool.clone()] } },
            EventPayload::TurnEnded { stop: StopReason::Refusal },
            EventPayload::SessionError {
                kind: ErrorKind::ModelOverloaded,
                message: "busy".into(),
                retry: RetryStatus::Retrying,
                server: None,
            },
            EventPayload::SessionTerminated {},
            EventPayload::SessionDeleted {},
            EventPayload::EnvironmentConnection {
                environment_id: EnvironmentId::new(),
                status: ConnectionStatus::Failed,
                error: Some("no executor".into()),
            },
            EventPayload::ConnectionRequested { environment_id: EnvironmentId::new() },
            EventPayload::AgentMessage { content: vec![ContentBlock::text("done: hi\n")] },
            EventPayload::AgentThinking { text: None, seal: None },
            EventPayload::ToolUse {
                name: "bash".into(),
                input,
                origin: ToolOrigin::Builtin,
                permission: ToolPermission::Ask,
                policy: None,
            },
            EventPayload::ToolResult {
                tool_use_id: tool.clone(),
                origin: ToolOrigin::Builtin,
                content: vec![ContentBlock::text("hi\n")],
                is_error: false,
            },
            EventPayload::ModelRequestStarted {},
            EventPayload::ModelRequestEnded { start_id: tool.clone(), is_error: false, usage: Usage::default() },
        ];
        for p in exact {
            let e = committed(p);
            let back = event(&project(&e).unwrap()).unwrap_or_else(|| panic!("{:?} did not read back", e.kind()));
            let kind = e.kind();
            assert_eq!((back.id, back.at, back.payload), (e.id, e.created_at, e.payload), "{kind:?}");
        }
        let lossy = [
            (EventPayload::TurnStarted { inputs_through: 7 }, EventKind::TurnStarted),
            (EventPayload::TurnEnded { stop: StopReason::Interrupted }, EventKind::TurnEnded),
        ];
        for (p, kind) in lossy {
            let back = event(&project(&committed(p)).unwrap()).unwrap();
            assert_eq!(back.payload.kind(), kind);
        }
        let unknown = serde_json::json!({"type": "session.thread_created", "id": EventId::new(), "processed_at": "2025-11-29T12:00:00.123Z"});
        assert_eq!(event(&unknown), None, "a type this reader does not show is skipped");
    }
}
