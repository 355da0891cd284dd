//! Which committed events become which webhooks, and their thin payloads
//! (`{"type": "event", "id": "whe_…", "created_at", "data": {"type", "id": <session>, …}}`).

use gateway_core::environment::ConnectionStatus;
use gateway_core::event::{Event, EventPayload, StopReason};
use gateway_store::WebhookEndpoint;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::wire::time;

/// Every webhook type this gateway sends.
pub const TYPES: [&str; 6] = [
    "agent.session.action_required",
    "session.budget_reached",
    "agent.session.failed",
    "session.status_run_started",
    "session.status_idled",
    "session.status_terminated",
];

/// The webhook types of an event and what their `data` adds: a turn that stopped at the
/// session's budget is both an idle and the budget's notice.
fn webhooks_of(e: &Event) -> Vec<(&'static str, Value)> {
    if let EventPayload::TurnEnded { stop: StopReason::BudgetReached } = &e.payload {
        return vec![("session.status_idled", json!({})), ("session.budget_reached", json!({}))];
    }
    webhook_of(e).into_iter().collect()
}

/// The webhook type of an event and what its `data` adds, if it is one.
fn webhook_of(e: &Event) -> Option<(&'static str, Value)> {
    match &e.payload {
        EventPayload::TurnStarted { .. } => Some(("session.status_run_started", json!({}))),
        EventPayload::TurnEnded { .. } => Some(("session.status_idled", json!({}))),
        EventPayload::SessionTerminated {} => Some(("session.status_terminated", json!({}))),
        EventPayload::ConnectionRequested { environment_id } => Some((
            "agent.session.action_required",
            json!({"required_action": {"type": "environment_connection", "environment_id": environment_id}}),
        )),
        EventPayload::EnvironmentConnection { status: ConnectionStatus::Failed, error, environment_id } => Some((
            "agent.session.failed",
            json!({
                "environment_id": environment_id,
                "error": {"type": "environment_connection_error", "message": error.clone().unwrap_or_default()},
            }),
        )),
        _ => None,
    }
}

/// The webhook id of an event for an endpoint: derived from both (and from the type, when
/// the event makes more than one), so a fan-out repeated after a crash sends the same id
/// (receivers deduplicate on it), and retries reuse it.
fn webhook_id(e: &Event, endpoint: &WebhookEndpoint, kind: &str, first: bool) -> String {
    let seed =
        if first { format!("{}/{}", e.id, endpoint.spec.id) } else { format!("{}/{}/{kind}", e.id, endpoint.spec.id) };
    let digest = Sha256::digest(seed.as_bytes());
    format!("whe_{}", &hex::encode(digest)[..24])
}

/// The `(endpoint, webhook id, body)` of each delivery an event makes.
pub fn deliveries<'a>(e: &Event, endpoints: &'a [WebhookEndpoint]) -> Vec<(&'a WebhookEndpoint, String, String)> {
    let mut out = Vec::new();
    for (n, (kind, extra)) in webhooks_of(e).into_iter().enumerate() {
        out.extend(deliveries_of(e, kind, &extra, n == 0, endpoints));
    }
    out
}

/// The deliveries of one webhook type an event makes.
fn deliveries_of<'a>(
    e: &Event,
    kind: &'static str,
    extra: &Value,
    first: bool,
    endpoints: &'a [WebhookEndpoint],
) -> Vec<(&'a WebhookEndpoint, String, String)> {
    endpoints
        .iter()
        .filter(|ep| ep.enabled && (ep.spec.event_types.is_empty() || ep.spec.event_types.iter().any(|t| t == kind)))
        .map(|ep| {
            let id = webhook_id(e, ep, kind, first);
            let mut data = json!({"type": kind, "id": e.session_id, "organization_id": "", "workspace_id": ""});
            if let (Some(data), Value::Object(extra)) = (data.as_object_mut(), extra.clone()) {
                data.extend(extra);
            }
            let body = json!({"type": "event", "id": id, "created_at": time(e.created_at), "data": data});
            (ep, id, body.to_string())
        })
        .collect()
}
