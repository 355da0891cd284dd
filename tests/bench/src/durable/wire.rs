//! The Managed Agents wire subset the baseline speaks: the same paths, status codes, bodies
//! and SSE frames the load generator reads from the gateway (see
//! `adapters/managed-agents`), and nothing else.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

/// Largest number of events one send may carry (the gateway's limit too).
pub const MAX_EVENTS: usize = 100;

/// An error answer in the API's shape: `{"type":"error","error":{"type":..,"message":..}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, kind: "invalid_request_error", message: message.into() }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, kind: "not_found_error", message: message.into() }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self { status: StatusCode::INTERNAL_SERVER_ERROR, kind: "api_error", message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"type": "error", "error": {"type": self.kind, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<super::store::StoreError> for ApiError {
    fn from(e: super::store::StoreError) -> Self {
        tracing::warn!(error = %e, "store error");
        ApiError::internal(e.to_string())
    }
}

/// Parses a JSON request body.
pub fn body(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
}

/// A required non-empty string field.
pub fn text_field<'a>(v: &'a Value, key: &str) -> Result<&'a str, ApiError> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::invalid(format!("{key} is required")))
}

/// `agent` on a session create: an id string or `{"id": ..}`.
pub fn agent_ref(v: &Value) -> Result<&str, ApiError> {
    match v.get("agent") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::Object(o)) => {
            o.get("id").and_then(Value::as_str).ok_or_else(|| ApiError::invalid("agent.id is required"))
        }
        _ => Err(ApiError::invalid("agent is required")),
    }
}

/// The user messages of a send: their content blocks, and the last text (what the fake
/// model of the gateway answers to).
pub struct UserMessages {
    pub contents: Vec<Value>,
    pub last_text: String,
}

pub fn user_messages(v: &Value) -> Result<UserMessages, ApiError> {
    let events = v.get("events").and_then(Value::as_array).ok_or_else(|| ApiError::invalid("events is required"))?;
    if events.is_empty() || events.len() > MAX_EVENTS {
        return Err(ApiError::invalid(format!("events must hold 1 to {MAX_EVENTS} events")));
    }
    let mut contents = Vec::with_capacity(events.len());
    let mut last_text = String::new();
    for e in events {
        if e.get("type").and_then(Value::as_str) != Some("user.message") {
            return Err(ApiError::invalid("this baseline accepts only user.message events"));
        }
        let content =
            e.get("content").and_then(Value::as_array).ok_or_else(|| ApiError::invalid("content is required"))?;
        for block in content {
            if let Some(t) = block.get("text").and_then(Value::as_str) {
                last_text = t.to_owned();
            }
        }
        contents.push(Value::Array(content.clone()));
    }
    Ok(UserMessages { contents, last_text })
}

/// One committed event: its id, its type and its JSON, ready to store and to frame.
pub struct Event {
    pub id: String,
    pub kind: &'static str,
    pub json: Value,
}

impl Event {
    pub fn new(kind: &'static str, mut fields: Value, now: &str) -> Self {
        let id = crate::ids::new("sevt");
        if let Value::Object(m) = &mut fields {
            m.insert("type".into(), json!(kind));
            m.insert("id".into(), json!(id));
            m.insert("processed_at".into(), json!(now));
        }
        Self { id, kind, json: fields }
    }

    /// `(id, body)` as stored.
    pub fn row(&self) -> (String, String) {
        (self.id.clone(), self.json.to_string())
    }

    /// The SSE frame the gateway sends for a committed event.
    pub fn frame(&self) -> Bytes {
        Bytes::from(format!("id: {}\nevent: {}\ndata: {}\n\n", self.id, self.kind, self.json))
    }
}

/// The events of one echo turn, committed together after the user message.
pub fn turn(text: &str, now: &str) -> Vec<Event> {
    vec![
        Event::new("session.status_running", json!({}), now),
        Event::new("agent.message", json!({"content": [{"type": "text", "text": format!("echo: {text}")}]}), now),
        Event::new("session.status_idle", json!({"stop_reason": {"type": "end_turn"}}), now),
    ]
}

pub fn now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_checked_and_the_last_text_answered() {
        let ok = json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]});
        let m = user_messages(&ok).unwrap();
        assert_eq!(m.last_text, "b");
        assert!(user_messages(&json!({"events": []})).is_err());
        assert!(user_messages(&json!({"events": [{"type": "user.interrupt"}]})).is_err());
        let t = turn("hi", "t");
        assert_eq!(
            t.iter().map(|e| e.kind).collect::<Vec<_>>(),
            ["session.status_running", "agent.message", "session.status_idle"]
        );
        let f = String::from_utf8(t[1].frame().to_vec()).unwrap();
        assert!(
            f.starts_with("id: sevt_") && f.contains("event: agent.message\ndata: {") && f.ends_with("\n\n"),
            "{f}"
        );
        assert!(f.contains("echo: hi"));
    }
}
