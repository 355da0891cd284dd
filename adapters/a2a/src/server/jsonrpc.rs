//! The JSON-RPC binding: `POST /a2a/{agent}` (and with a trailing slash, no redirect).
//!
//! The method name picks the version family: PascalCase = v1.0 (requires `A2A-Version: 1.0`,
//! else -32009 naming the header), slash names = v0.3 (params and results rewritten at the
//! edge). Errors before a stream starts are ordinary JSON-RPC responses (HTTP 200); a
//! notification (no `id`) gets 204 and nothing else. Bodies are admitted by `server::body`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use gateway_wire::jsonrpc::envelope;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tracing::{Instrument, debug, info_span, warn};

use crate::A2aContext;
use crate::error::{A2aError, Result};
use crate::server::body;
use crate::server::ops::{self, Op, Outcome};
use crate::server::version::{self, Version};
use crate::v03::{self, Shape};
use crate::wire::{self, ListTasksRequest, PushConfig, PushConfigRef, SendMessageRequest, TaskIdRequest};

/// A JSON-RPC response, its result or its error, with the request's id echoed as its raw text
/// ([`envelope::response`]).
fn envelope(id: &RawValue, outcome: std::result::Result<&Value, &Value>) -> Response {
    let body = envelope::response(id, outcome);
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

pub(crate) fn envelope_error(id: &RawValue, e: &A2aError, version: Version) -> Response {
    e.with_retry_hint(envelope(id, Err(&e.jsonrpc(version))))
}

fn is_v1(method: &str) -> bool {
    matches!(
        method,
        "SendMessage"
            | "SendStreamingMessage"
            | "GetTask"
            | "ListTasks"
            | "CancelTask"
            | "SubscribeToTask"
            | "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig"
            | "GetExtendedAgentCard"
    )
}

pub async fn handle(
    State(ctx): State<Arc<A2aContext>>,
    Path(agent): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    let null = RawValue::NULL;
    let body = match body::accept(body) {
        Ok(b) => b,
        Err(e) => return envelope_error(null, &e, Version::V1),
    };
    if let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
        && !ct.to_ascii_lowercase().contains("json")
    {
        let e = A2aError::ContentTypeNotSupported(format!("JSON-RPC requests must be application/json, not {ct:?}"));
        return envelope_error(null, &e, Version::V1);
    }
    let request = match envelope::parse_request(&body) {
        Ok(r) => r,
        Err(refused) => {
            let e = if refused.is_parse_error() {
                A2aError::Parse(refused.message)
            } else {
                A2aError::InvalidRequest(refused.message)
            };
            return envelope_error(refused.id, &e, Version::V1);
        }
    };
    let method = request.method;
    // JSON-RPC 2.0 §4.1: a request without an id is a notification, and the server never
    // answers one. A2A defines no notifications (every method returns something), so none is
    // acted on either: 204, no body.
    let Some(id) = request.id else {
        debug!(%method, "a JSON-RPC notification (no id): not answered");
        return StatusCode::NO_CONTENT.into_response();
    };
    let params = match request.params.map(|p| serde_json::from_str::<Value>(p.get())) {
        None => json!({}),
        Some(Ok(p @ Value::Object(_))) => p,
        Some(_) => {
            return envelope_error(id, &A2aError::InvalidParams("params must be an object".into()), Version::V1);
        }
    };
    let asked = match version::requested(&headers, uri.query()) {
        Ok(v) => v,
        Err(e) => return envelope_error(id, &e, Version::V1),
    };
    let version = if is_v1(&method) {
        if let Err(e) = version::v1_required(asked) {
            return envelope_error(id, &e, Version::V1);
        }
        Version::V1
    } else {
        Version::V03
    };
    let id = id.to_owned();
    drop(body);
    let span = info_span!("a2a", binding = "jsonrpc", %method, version = version.as_str(), %agent);
    dispatch(ctx, agent, method, params, id, version).instrument(span).await
}

fn op_for(method: &str, params: Value) -> Result<Op> {
    let task_id_of =
        |p: &Value| p.get("id").or_else(|| p.get("taskId")).and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(match method {
        "SendMessage" => Op::Send { req: Box::new(wire::parse::<SendMessageRequest>(params)?), stream: false },
        "SendStreamingMessage" => Op::Send { req: Box::new(wire::parse(params)?), stream: true },
        "GetTask" | "tasks/get" => {
            let r: TaskIdRequest = wire::parse(params)?;
            Op::Get { id: r.id, history_length: r.history_length }
        }
        "ListTasks" => Op::List(wire::parse::<ListTasksRequest>(params)?),
        "CancelTask" | "tasks/cancel" => Op::Cancel { id: wire::parse::<TaskIdRequest>(params)?.id },
        "SubscribeToTask" | "tasks/resubscribe" => Op::Subscribe { id: wire::parse::<TaskIdRequest>(params)?.id },
        "CreateTaskPushNotificationConfig" => Op::PushCreate(wire::parse::<PushConfig>(params)?),
        "GetTaskPushNotificationConfig" => {
            let r: PushConfigRef = wire::parse(params)?;
            Op::PushGet { task_id: r.task_id, id: r.id.unwrap_or_default() }
        }
        "ListTaskPushNotificationConfigs" => Op::PushList { task_id: wire::parse::<PushConfigRef>(params)?.task_id },
        "DeleteTaskPushNotificationConfig" => {
            let r: PushConfigRef = wire::parse(params)?;
            Op::PushDelete { task_id: r.task_id, id: r.id.unwrap_or_default() }
        }
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Op::ExtendedCard,
        "message/send" => {
            Op::Send { req: Box::new(wire::parse(v03::send_in(params, Shape::JsonRpc)?)?), stream: false }
        }
        "message/stream" => {
            Op::Send { req: Box::new(wire::parse(v03::send_in(params, Shape::JsonRpc)?)?), stream: true }
        }
        "tasks/pushNotificationConfig/set" => {
            let mut p = params;
            wire::normalize(&mut p);
            let task_id = task_id_of(&p);
            Op::PushCreate(wire::parse(v03::push_create_in(p, &task_id))?)
        }
        "tasks/pushNotificationConfig/get" => {
            let mut p = params;
            wire::normalize(&mut p);
            let id = p.get("pushNotificationConfigId").and_then(Value::as_str).unwrap_or_default().to_owned();
            let task_id = task_id_of(&p);
            if id.is_empty() {
                // v0.3 allowed omitting the config id: the task's first config.
                Op::PushList { task_id }
            } else {
                Op::PushGet { task_id, id }
            }
        }
        "tasks/pushNotificationConfig/list" => Op::PushList { task_id: task_id_of(&params) },
        "tasks/pushNotificationConfig/delete" => {
            let mut p = params;
            wire::normalize(&mut p);
            let id = p.get("pushNotificationConfigId").and_then(Value::as_str).unwrap_or_default().to_owned();
            Op::PushDelete { task_id: task_id_of(&p), id }
        }
        other => return Err(A2aError::MethodNotFound(other.chars().take(100).collect())),
    })
}

async fn dispatch(
    ctx: Arc<A2aContext>,
    agent: String,
    method: String,
    params: Value,
    id: Box<RawValue>,
    version: Version,
) -> Response {
    let op = match op_for(&method, params) {
        Ok(op) => op,
        Err(e) => return envelope_error(&id, &e, version),
    };
    let v03_get_first = method == "tasks/pushNotificationConfig/get" && matches!(op, Op::PushList { .. });
    match ops::execute(&ctx, &agent, op, version).await {
        Ok(Outcome::Value(kind, v)) => {
            let mut result = ops::render(kind, &v, version, Shape::JsonRpc);
            if v03_get_first {
                result = match result.as_array().and_then(|a| a.first()) {
                    Some(first) => first.clone(),
                    None => return envelope_error(&id, &A2aError::TaskNotFound("push config".into()), version),
                };
            }
            envelope(&id, Ok(&result))
        }
        Ok(Outcome::Stream { watch, min_seq, send, history_length }) => {
            let render: crate::server::sse::Render = Box::new(move |item| {
                let outcome = match item {
                    Ok(u) => Ok(ops::render_event(u, version, Shape::JsonRpc)),
                    Err(e) => Err(e.jsonrpc(version)),
                };
                envelope::response(&id, outcome.as_ref())
            });
            ops::stream_response(&ctx, watch, min_seq, send, history_length, render)
        }
        Err(e) => {
            if matches!(e, A2aError::Internal(_) | A2aError::Unavailable(_)) {
                warn!(error = %e, "request failed");
            }
            envelope_error(&id, &e, version)
        }
    }
}
