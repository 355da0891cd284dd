//! Which committed events become which webhooks, and their thin payloads
//! (`{"type": "event", "id": "whe_…", "created_at", "data": {"type", "id": <session>, …}}`).

use gateway_core::environment::ConnectionStatus;
use gateway_core::event::{Event, EventPayload};
use gateway_store::WebhookEndpoint;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::wire::time;

/// Every webhook type this gateway sends.
pub const TYPES: [&str; 5] = [
    "agent.session.action_required",
    "agent.session.failed",
    "session.status_run_started",
    "session.status_idled",
    "session.status_terminated",
];

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

/// The webhook id of an event for an endpoint: derived from both, so a fan-out repeated
/// after a crash sends the same id (receivers deduplicate on it), and retries reuse it.
fn webhook_id(e: &Event, endpoint: &WebhookEndpoint) -> String {
    let digest = Sha256::digest(format!("{}/{}", e.id, endpoint.spec.id).as_bytes());
    format!("whe_{}", &hex::encode(digest)[..24])
}

/// The `(endpoint, webhook id, body)` of each delivery an event makes.
pub fn deliveries<'a>(e: &Event, endpoints: &'a [WebhookEndpoint]) -> Vec<(&'a WebhookEndpoint, String, String)> {
    let Some((kind, extra)) = webhook_of(e) else { return vec![] };
    endpoints
        .iter()
        .filter(|ep| ep.enabled && (ep.spec.event_types.is_empty() || ep.spec.event_types.iter().any(|t| t == kind)))
        .map(|ep| {
            let id = webhook_id(e, ep);
            let mut data = json!({"type": kind, "id": e.session_id, "organization_id": "", "workspace_id": ""});
            if let (Some(data), Value::Object(extra)) = (data.as_object_mut(), extra.clone()) {
                data.extend(extra);
            }
            let body = json!({"type": "event", "id": id, "created_at": time(e.created_at), "data": data});
            (ep, id, body.to_string())
        })
        .collect()
}
