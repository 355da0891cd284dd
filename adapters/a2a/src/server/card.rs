//! Agent cards: one per published agent at `/a2a/{agent}/.well-known/agent-card.json`, and the
//! default agent's at the origin's `/.well-known/agent-card.json`.
//!
//! Dual-version (what `a2a-sdk` 1.3 emits): v1.0 and v0.3 entries in `supportedInterfaces`
//! (JSON-RPC and HTTP+JSON, all on the agent's base URL under `public_url`), plus the legacy
//! v0.3 top-level fields. Capabilities are what this server implements: streaming and push,
//! no extended card. Security schemes are the gateway's own (x-api-key, bearer).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gateway_core::Timestamp;
use gateway_core::agent::Agent;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::A2aContext;
use crate::content::INPUT_MODES;

/// The base URL of an agent's interfaces.
pub fn base_url(ctx: &A2aContext, agent: &str) -> String {
    format!("{}/a2a/{agent}", ctx.public_url.trim_end_matches('/'))
}

fn skills(agent: &Agent, name: &str) -> Value {
    if crate::conformance::is_conformance(&agent.spec.backend) {
        let examples = ["tck-complete-task", "tck-artifact-text", "tck-artifact-data", "tck-stream-001"];
        return json!([{
            "id": "tck-scenarios",
            "name": "TCK scenarios",
            "description": "The A2A TCK's behaviours, chosen by the messageId (or text) prefix",
            "tags": ["conformance", "test"],
            "examples": examples,
            "inputModes": INPUT_MODES,
            "outputModes": ["text/plain", "application/json"],
        }]);
    }
    let description = agent.spec.description.clone().unwrap_or_else(|| format!("Chat with {name}"));
    json!([{
        "id": "chat",
        "name": name,
        "description": description,
        "tags": ["chat", agent.spec.backend.to_string()],
        "examples": ["Hello"],
    }])
}

/// The card as JSON.
pub fn card(ctx: &A2aContext, name: &str, agent: &Agent) -> Value {
    let url = base_url(ctx, name);
    let description = agent.spec.description.clone().unwrap_or_else(|| format!("Agent {name} on this gateway"));
    let iface =
        |binding: &str, version: &str| json!({"url": url, "protocolBinding": binding, "protocolVersion": version});
    json!({
        "name": name,
        "description": description,
        "supportedInterfaces": [
            iface("JSONRPC", "1.0"), iface("HTTP+JSON", "1.0"), iface("JSONRPC", "0.3"), iface("HTTP+JSON", "0.3"),
        ],
        "provider": {"organization": "gateway", "url": ctx.public_url},
        "version": agent.version.to_string(),
        "capabilities": {"streaming": true, "pushNotifications": true, "extendedAgentCard": false},
        "securitySchemes": {
            "apiKey": {
                "apiKeySecurityScheme": {"location": "header", "name": "x-api-key"},
                "type": "apiKey", "in": "header", "name": "x-api-key",
            },
            "bearer": {
                "httpAuthSecurityScheme": {"scheme": "Bearer"},
                "type": "http", "scheme": "Bearer",
            },
        },
        "securityRequirements": [{"schemes": {"apiKey": {"list": []}}}, {"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": INPUT_MODES,
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills(agent, name),
        // v0.3 legacy fields (a dual-version card).
        "protocolVersion": "0.3",
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [{"url": url, "transport": "JSONRPC"}, {"url": url, "transport": "HTTP+JSON"}],
        "security": [{"apiKey": []}, {"bearer": []}],
    })
}

/// An HTTP date (RFC 9110 IMF-fixdate), or `None` for a time it cannot show.
fn http_date(t: Timestamp) -> Option<String> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let at = time::OffsetDateTime::from_unix_timestamp(t.millis().div_euclid(1000)).ok()?;
    at.format(&format).ok()
}

/// Serves a card with a strong ETag over its bytes, a short max-age, and `Last-Modified`:
/// when the agent's published version was last changed (the card's other inputs, the
/// gateway's configuration, change only with a restart; the ETag covers those).
pub fn respond(body: &Value, headers: &HeaderMap, modified: Timestamp) -> Response {
    let bytes = body.to_string();
    let etag = format!("\"{}\"", hex::encode(&Sha256::digest(bytes.as_bytes())[..16]));
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().trim_start_matches("W/") == etag || t.trim() == "*"));
    let mut r = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], bytes).into_response()
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    if let Some(v) = http_date(modified).and_then(|d| HeaderValue::from_str(&d).ok()) {
        h.insert(header::LAST_MODIFIED, v);
    }
    r
}

async fn load(ctx: &A2aContext, name: &str) -> Result<Agent, Response> {
    let not_found = || {
        (
            StatusCode::NOT_FOUND,
            axum::Json(
                json!({"error": {"code": 404, "status": "NOT_FOUND", "message": format!("no agent named {name:?}")}}),
            ),
        )
            .into_response()
    };
    let Some(id) = ctx.agents.get(name) else { return Err(not_found()) };
    ctx.coordinator.get_agent(id, None).await.map_err(|e| {
        let (status, body) = crate::error::A2aError::from(e).rest(crate::server::version::Version::V1);
        (status, axum::Json(body)).into_response()
    })
}

pub async fn agent_card(State(ctx): State<Arc<A2aContext>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    match load(&ctx, &name).await {
        Ok(agent) => respond(&card(&ctx, &name, &agent), &headers, agent.updated_at),
        Err(r) => r,
    }
}

pub async fn root_card(State(ctx): State<Arc<A2aContext>>, headers: HeaderMap) -> Response {
    let Some((name, _)) = ctx.agents.default_agent() else {
        return (StatusCode::NOT_FOUND, "no agent is published").into_response();
    };
    let name = name.to_owned();
    match load(&ctx, &name).await {
        Ok(agent) => respond(&card(&ctx, &name, &agent), &headers, agent.updated_at),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_modified_is_an_imf_fixdate() {
        assert_eq!(
            http_date(Timestamp::from_millis(1_794_232_475_999)).as_deref(),
            Some("Mon, 09 Nov 2026 13:54:35 GMT")
        );
        assert_eq!(http_date(Timestamp::from_millis(0)).as_deref(), Some("Thu, 01 Jan 1970 00:00:00 GMT"));
    }
}
