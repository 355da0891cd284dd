//! Session events: client-sent events in, committed neutral events out as Managed Agents
//! events, and the `types[]` filter vocabulary.

use gateway_core::EventId;
use gateway_core::agent::PermissionPolicy;
use gateway_core::event::{
    ErrorKind, Event, EventKind, EventPayload, NewEvent, RetryStatus, StopReason, ToolOrigin, ToolPermission,
};
use gateway_core::session::{Budget, BudgetChange};
use serde::Deserialize;
use serde_json::{Value, json};

use super::content::{BlockIn, blocks_in, blocks_out};
use super::time;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum EventIn {
    #[serde(rename = "user.message")]
    Message { content: Vec<BlockIn> },
    #[serde(rename = "user.interrupt")]
    Interrupt { session_thread_id: Option<String> },
    #[serde(rename = "user.tool_confirmation")]
    Confirmation { tool_use_id: String, result: String, deny_message: Option<String> },
    #[serde(rename = "user.custom_tool_result")]
    CustomToolResult { custom_tool_use_id: String, content: Option<Vec<BlockIn>>, is_error: Option<bool> },
    #[serde(rename = "user.tool_result")]
    ToolResult { tool_use_id: String, content: Option<Vec<BlockIn>>, is_error: Option<bool> },
    #[serde(rename = "user.define_outcome")]
    DefineOutcome {},
    #[serde(rename = "system.message")]
    SystemMessage {},
}

fn tool_use_id(s: &str) -> Result<EventId, ApiError> {
    EventId::parse(s).map_err(|_| {
        ApiError::invalid(format!("{s:?} is not a pending tool use of this session")).code("tool_use_not_pending")
    })
}

impl EventIn {
    pub fn into_new_event(self) -> Result<NewEvent, ApiError> {
        let payload = match self {
            EventIn::Message { content } => {
                if content.is_empty() {
                    return Err(ApiError::invalid("user.message content must not be empty"));
                }
                EventPayload::UserMessage { content: blocks_in(content, false)? }
            }
            EventIn::Interrupt { session_thread_id } => {
                if session_thread_id.is_some() {
                    return Err(ApiError::not_supported("user.interrupt with session_thread_id (threads)"));
                }
                EventPayload::UserInterrupt {}
            }
            EventIn::Confirmation { tool_use_id: id, result, deny_message } => {
                let allow = match result.as_str() {
                    "allow" => true,
                    "deny" => false,
                    other => return Err(ApiError::invalid(format!("result must be allow or deny, not {other:?}"))),
                };
                if allow && deny_message.is_some() {
                    return Err(ApiError::invalid("deny_message is only allowed with result \"deny\""));
                }
                EventPayload::ToolConfirmation { tool_use_id: tool_use_id(&id)?, allow, deny_message }
            }
            EventIn::CustomToolResult { custom_tool_use_id, content, is_error } => EventPayload::ClientToolResult {
                tool_use_id: tool_use_id(&custom_tool_use_id)?,
                content: blocks_in(content.unwrap_or_default(), true)?,
                is_error: is_error.unwrap_or(false),
                origin: ToolOrigin::Custom,
            },
            EventIn::ToolResult { tool_use_id: id, content, is_error } => EventPayload::ClientToolResult {
                tool_use_id: tool_use_id(&id)?,
                content: blocks_in(content.unwrap_or_default(), true)?,
                is_error: is_error.unwrap_or(false),
                origin: ToolOrigin::Builtin,
            },
            EventIn::DefineOutcome {} => return Err(ApiError::not_supported("user.define_outcome")),
            EventIn::SystemMessage {} => return Err(ApiError::not_supported("system.message")),
        };
        Ok(NewEvent::new(payload))
    }
}

fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ModelOverloaded => "model_overloaded_error",
        ErrorKind::ModelRateLimited => "model_rate_limited_error",
        ErrorKind::ModelRequestFailed => "model_request_failed_error",
        ErrorKind::RoundLimitReached => "tool_use_limit_reached_error",
        ErrorKind::CompactionLimitReached => "compaction_limit_reached_error",
        ErrorKind::McpConnectionFailed => "mcp_connection_failed_error",
        ErrorKind::McpAuthenticationFailed => "mcp_authentication_failed_error",
        ErrorKind::Unknown
        | ErrorKind::EnvironmentLost
        | ErrorKind::PlacementFailed
        | ErrorKind::Indeterminate
        | ErrorKind::BackendFailed
        | ErrorKind::EnvironmentConnectTimeout
        | ErrorKind::MountFailed => "unknown_error",
    }
}

fn stop_reason(stop: &StopReason) -> Value {
    match stop {
        StopReason::EndTurn | StopReason::Interrupted | StopReason::Failed => json!({"type": "end_turn"}),
        StopReason::RequiresAction { event_ids } => json!({"type": "requires_action", "event_ids": event_ids}),
        // The SDK documents `tool_use_limit_reached_error` as followed by `retries_exhausted`.
        StopReason::RetriesExhausted | StopReason::RoundLimit => json!({"type": "retries_exhausted"}),
        StopReason::Refusal => json!({"type": "refusal"}),
        StopReason::BudgetReached => json!({"type": "budget_reached"}),
    }
}

/// The Managed Agents form of a committed event; `None` for events this API does not show.
pub fn project(e: &Event) -> Option<Value> {
    let v = match &e.payload {
        EventPayload::UserMessage { content } => json!({"type": "user.message", "content": blocks_out(content, false)}),
        EventPayload::UserInterrupt {} => json!({"type": "user.interrupt"}),
        EventPayload::ToolConfirmation { tool_use_id, allow, deny_message } => {
            let mut v = json!({"type": "user.tool_confirmation", "tool_use_id": tool_use_id, "result": if *allow { "allow" } else { "deny" }});
            if let Some(m) = deny_message {
                v["deny_message"] = json!(m);
            }
            v
        }
        EventPayload::ClientToolResult { tool_use_id, content, is_error, origin } => match origin {
            ToolOrigin::Custom => {
                json!({"type": "user.custom_tool_result", "custom_tool_use_id": tool_use_id, "content": blocks_out(content, false), "is_error": is_error})
            }
            _ => {
                json!({"type": "user.tool_result", "tool_use_id": tool_use_id, "content": blocks_out(content, false), "is_error": is_error})
            }
        },
        EventPayload::TurnStarted { .. } => json!({"type": "session.status_running"}),
        EventPayload::TurnRescheduled {} => json!({"type": "session.status_rescheduled"}),
        EventPayload::TurnEnded { stop } => {
            let mut v = json!({"type": "session.status_idle", "stop_reason": stop_reason(stop)});
            if *stop == StopReason::Refusal {
                v["stop_details"] = json!({"type": "refusal"});
            }
            v
        }
        EventPayload::SessionError { kind, message, retry, server } => {
            let mut error = json!({
                "type": error_type(*kind),
                "message": message,
                "retry_status": {"type": match retry {
                    RetryStatus::Retrying => "retrying",
                    RetryStatus::Exhausted => "exhausted",
                    RetryStatus::Terminal => "terminal",
                }},
            });
            // The MCP errors name their server (the SDK requires it).
            if matches!(kind, ErrorKind::McpConnectionFailed | ErrorKind::McpAuthenticationFailed) {
                error["mcp_server_name"] = json!(server.as_deref().unwrap_or_default());
            }
            json!({"type": "session.error", "error": error})
        }
        EventPayload::SessionTerminated {} => json!({"type": "session.status_terminated"}),
        EventPayload::SessionDeleted {} => json!({"type": "session.deleted"}),
        // The vaults a session names are not in the SDK's event: an update of only those shows
        // no field but its type.
        EventPayload::SessionUpdated { title, metadata, agent, budget, .. } => {
            let mut v = json!({"type": "session.updated"});
            match budget {
                Some(BudgetChange::Set { budget }) => v["budget"] = budget_out(budget),
                Some(BudgetChange::Removed) => v["budget"] = Value::Null,
                None => {}
            }
            if let Some(t) = title {
                v["title"] = json!(t);
            }
            if let Some(m) = metadata {
                v["metadata"] = json!(m);
            }
            if let Some(a) = agent {
                v["agent"] = super::agent::definition(a.id.as_str(), a.version, &a.spec);
            }
            v
        }
        // Self-hosted sessions only (docs/adr/0013): extensions the SDK's event union lacks.
        EventPayload::EnvironmentConnection { environment_id, status, error } => {
            let mut environment = json!({"id": environment_id, "type": "self_hosted", "status": status.as_str()});
            if let Some(error) = error {
                environment["error"] = json!({"type": "environment_connection_error", "message": error});
            }
            json!({"type": format!("agent.session.environment.{}", status.as_str()), "environment": environment})
        }
        EventPayload::ConnectionRequested { environment_id } => json!({
            "type": "agent.session.requires_action",
            "required_action": {"type": "environment_connection", "environment_id": environment_id},
        }),
        EventPayload::AgentMessage { content } => {
            json!({"type": "agent.message", "content": blocks_out(content, true)})
        }
        EventPayload::AgentThinking { .. } => json!({"type": "agent.thinking"}),
        EventPayload::ToolUse { name, input, origin, permission, policy } => {
            let mut v = match origin {
                ToolOrigin::Custom => {
                    return Some(stamp(json!({"type": "agent.custom_tool_use", "name": name, "input": input}), e));
                }
                ToolOrigin::Mcp { server } => {
                    json!({"type": "agent.mcp_tool_use", "mcp_server_name": server, "name": name, "input": input})
                }
                ToolOrigin::Builtin | ToolOrigin::Backend => {
                    json!({"type": "agent.tool_use", "name": name, "input": input})
                }
            };
            v["evaluated_permission"] = json!(permission_name(*permission));
            if let Some(p) = policy {
                v["evaluation"] = evaluation(*p);
            }
            v
        }
        EventPayload::ToolStarted { .. } => return None,
        EventPayload::ToolResult { tool_use_id, origin, content, is_error } => match origin {
            ToolOrigin::Mcp { .. } => {
                json!({"type": "agent.mcp_tool_result", "mcp_tool_use_id": tool_use_id, "content": blocks_out(content, false), "is_error": is_error})
            }
            _ => {
                json!({"type": "agent.tool_result", "tool_use_id": tool_use_id, "content": blocks_out(content, false), "is_error": is_error})
            }
        },
        EventPayload::ModelRequestStarted {} => json!({"type": "span.model_request_start"}),
        // An ACP agent's modes, plan, commands...: this API has no events for them.
        EventPayload::AgentReport { .. } => return None,
        // The SDK's event says that compaction happened; the summary stays the model's.
        EventPayload::ContextCompacted { .. } => json!({"type": "agent.thread_context_compacted"}),
        EventPayload::SessionUsage { usage, budget } => json!({
            "type": "session.usage",
            "usage": usage_out(usage),
            "budget": budget.as_ref().map(budget_out),
        }),
        EventPayload::ModelRequestEnded { start_id, is_error, usage } => json!({
            "type": "span.model_request_end",
            "model_request_start_id": start_id,
            "is_error": is_error,
            "model_usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            },
        }),
    };
    Some(stamp(v, e))
}

/// A session's cumulative usage, in the SDK's `BetaManagedAgentsSessionUsage` shape (the
/// session object's `usage` and `session.usage`'s): cache writes are five-minute entries, the
/// only kind the gateway asks for.
pub fn usage_out(usage: &gateway_core::event::Usage) -> Value {
    let mut v = json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": usage.cache_creation_input_tokens, "ephemeral_1h_input_tokens": 0},
    });
    // Absent while a request of a model without list prices is counted, as the SDK reads it.
    // Whole cents spent, rounded down: a budget at or below the amount shown is one the
    // session has reached, which is what raising it is checked against.
    if let Some(micros) = usage.list_cost() {
        v["list_cost"] = usd(micros / MICROS_PER_CENT);
    }
    v
}

/// Millionths of a dollar in one cent, the minor unit amounts are written in.
const MICROS_PER_CENT: u64 = 10_000;

/// An amount in US cents, as the API writes money: an integer decimal string.
fn usd(cents: u64) -> Value {
    json!({"amount": cents.to_string(), "currency": "USD"})
}

/// The cost fields of a usage [`usage_out`] wrote: its `list_cost`, or unpriced without one.
pub fn usage_cost_in(usage: &Value) -> gateway_core::event::Usage {
    let cents = usage.pointer("/list_cost/amount").and_then(Value::as_str).and_then(|a| a.parse::<u64>().ok());
    match cents {
        Some(c) => {
            gateway_core::event::Usage { list_cost_micros: c.saturating_mul(MICROS_PER_CENT), ..Default::default() }
        }
        None => gateway_core::event::Usage { unpriced_requests: 1, ..Default::default() },
    }
}

pub fn budget_out(b: &Budget) -> Value {
    json!({"type": "limit", "max_list_cost": usd(b.max_list_cost_micros / MICROS_PER_CENT)})
}

/// A `{type: "limit", max_list_cost: {amount, currency}}` budget: a whole number of US cents
/// written as the API writes it (digits, no leading zero).
pub fn budget_in(v: Value) -> Result<Budget, ApiError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Amount {
        amount: String,
        currency: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Limit {
        #[serde(rename = "type")]
        kind: String,
        max_list_cost: Amount,
    }
    let limit: Limit = serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("budget: {e}")))?;
    if limit.kind != "limit" {
        return Err(ApiError::invalid(format!("budget.type must be \"limit\", not {:?}", limit.kind)));
    }
    if limit.max_list_cost.currency != "USD" {
        return Err(ApiError::invalid(format!(
            "budget.max_list_cost.currency must be \"USD\", not {:?}",
            limit.max_list_cost.currency
        )));
    }
    let amount = &limit.max_list_cost.amount;
    let canonical = !amount.is_empty()
        && amount.len() <= 15
        && amount.bytes().all(|b| b.is_ascii_digit())
        && (amount == "0" || !amount.starts_with('0'));
    let cents: Option<u64> = canonical.then(|| amount.parse().ok()).flatten();
    let Some(micros) = cents.and_then(|c| c.checked_mul(MICROS_PER_CENT)) else {
        return Err(ApiError::invalid(format!(
            "budget.max_list_cost.amount must be a whole number of cents written as digits with no leading zero, not {amount:?}"
        )));
    };
    Ok(Budget { max_list_cost_micros: micros })
}

fn stamp(mut v: Value, e: &Event) -> Value {
    v["id"] = json!(e.id);
    v["processed_at"] = time(e.created_at);
    v
}

/// How the policy judged a call. `auto` is evaluated conservatively: it asks, with the SDK's
/// "no judgement was reached" reason.
fn evaluation(p: PermissionPolicy) -> Value {
    match p {
        PermissionPolicy::AlwaysAllow => json!({"type": "always_allow"}),
        PermissionPolicy::AlwaysAsk => json!({"type": "always_ask"}),
        PermissionPolicy::Auto => {
            json!({"type": "auto", "evaluated_permission": {"type": "ask", "reason_code": "indeterminate"}})
        }
    }
}

fn permission_name(p: ToolPermission) -> &'static str {
    match p {
        ToolPermission::Allow => "allow",
        ToolPermission::Ask => "ask",
        ToolPermission::Deny => "deny",
    }
}

/// Every event type this API defines for lists, with the neutral kind that produces it
/// (`None`: a type this gateway never emits, e.g. multi-agent threads).
const TYPES: &[(&str, Option<EventKind>)] = &[
    ("user.message", Some(EventKind::UserMessage)),
    ("user.interrupt", Some(EventKind::UserInterrupt)),
    ("user.tool_confirmation", Some(EventKind::ToolConfirmation)),
    ("user.custom_tool_result", Some(EventKind::ClientToolResult)),
    ("user.tool_result", Some(EventKind::ClientToolResult)),
    ("user.define_outcome", None),
    ("system.message", None),
    ("agent.message", Some(EventKind::AgentMessage)),
    ("agent.thinking", Some(EventKind::AgentThinking)),
    ("agent.tool_use", Some(EventKind::ToolUse)),
    ("agent.custom_tool_use", Some(EventKind::ToolUse)),
    ("agent.mcp_tool_use", Some(EventKind::ToolUse)),
    ("agent.tool_result", Some(EventKind::ToolResult)),
    ("agent.mcp_tool_result", Some(EventKind::ToolResult)),
    ("agent.thread_context_compacted", Some(EventKind::ContextCompacted)),
    ("agent.thread_message_sent", None),
    ("agent.thread_message_received", None),
    ("session.status_running", Some(EventKind::TurnStarted)),
    ("session.status_rescheduled", Some(EventKind::TurnRescheduled)),
    ("session.status_idle", Some(EventKind::TurnEnded)),
    ("session.status_terminated", Some(EventKind::SessionTerminated)),
    ("session.error", Some(EventKind::SessionError)),
    ("session.updated", Some(EventKind::SessionUpdated)),
    ("session.usage", Some(EventKind::SessionUsage)),
    ("session.thread_created", None),
    ("session.thread_status_running", None),
    ("session.thread_status_idle", None),
    ("session.thread_status_rescheduled", None),
    ("session.thread_status_terminated", None),
    ("agent.session.requires_action", Some(EventKind::ConnectionRequested)),
    ("agent.session.environment.pending", Some(EventKind::EnvironmentConnection)),
    ("agent.session.environment.connected", Some(EventKind::EnvironmentConnection)),
    ("agent.session.environment.disconnected", Some(EventKind::EnvironmentConnection)),
    ("agent.session.environment.failed", Some(EventKind::EnvironmentConnection)),
    ("span.model_request_start", Some(EventKind::ModelRequestStarted)),
    ("span.model_request_end", Some(EventKind::ModelRequestEnded)),
    ("span.outcome_evaluation_start", None),
    ("span.outcome_evaluation_ongoing", None),
    ("span.outcome_evaluation_end", None),
];

/// The kinds to read from the store for a `types[]` filter, and the projected type names to
/// keep. An empty filter means every listable type.
pub struct TypeFilter {
    pub kinds: Vec<EventKind>,
    pub names: Option<Vec<String>>,
}

pub fn type_filter(types: &[&str]) -> Result<TypeFilter, ApiError> {
    if types.len() > 100 {
        return Err(ApiError::invalid("at most 100 types[] values are allowed"));
    }
    if types.is_empty() {
        let mut kinds: Vec<EventKind> = TYPES.iter().filter_map(|(_, k)| *k).collect();
        kinds.sort();
        kinds.dedup();
        return Ok(TypeFilter { kinds, names: None });
    }
    let mut kinds = Vec::new();
    for t in types {
        if *t == "session.deleted" {
            return Err(ApiError::invalid("session.deleted is not a listable event type"));
        }
        match TYPES.iter().find(|(n, _)| n == t) {
            Some((_, Some(k))) => kinds.push(*k),
            Some((_, None)) => {}
            None => return Err(ApiError::invalid(format!("types[] value {t:?} is not an event type"))),
        }
    }
    kinds.sort();
    kinds.dedup();
    Ok(TypeFilter { kinds, names: Some(types.iter().map(|t| (*t).to_owned()).collect()) })
}

impl TypeFilter {
    pub fn keeps(&self, projected: &Value) -> bool {
        match &self.names {
            None => true,
            Some(names) => projected.get("type").and_then(Value::as_str).is_some_and(|t| names.iter().any(|n| n == t)),
        }
    }
}
