//! The HTTP+JSON binding under `/a2a/{agent}/`: v1.0 paths (`message:send`, `tasks/{id}`…,
//! requiring `A2A-Version: 1.0`), v0.3 paths under `v1/` (the v0.3 proto's ProtoJSON), and an
//! optional `{tenant}/` prefix (ignored: one tenant). Legacy `v1/` is matched before tenants.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing::{Instrument, info_span};

use crate::A2aContext;
use crate::error::{A2aError, Result};
use crate::server::body;
use crate::server::ops::{self, Op, Outcome};
use crate::server::version::{self, Version};
use crate::v03::{self, Shape};
use crate::wire::{self, ListTasksRequest};

const ROOTS: [&str; 4] = ["message:send", "message:stream", "tasks", "extendedAgentCard"];

fn content_type(headers: &HeaderMap) -> HeaderValue {
    let asked = headers
        .get(header::CONTENT_TYPE)
        .or_else(|| headers.get(header::ACCEPT))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if asked.contains("application/a2a+json") {
        HeaderValue::from_static("application/a2a+json")
    } else {
        HeaderValue::from_static("application/json")
    }
}

fn reply(status: axum::http::StatusCode, body: &Value, ct: HeaderValue) -> Response {
    (status, [(header::CONTENT_TYPE, ct)], body.to_string()).into_response()
}

/// An error in the binding's body, with the overload answer's HTTP parts when it is one.
pub(crate) fn error_reply(e: &A2aError, version: Version, ct: HeaderValue) -> Response {
    let (status, b) = e.rest(version);
    e.with_retry_hint(reply(status, &b, ct))
}

/// The query's pairs, form-decoded (at most 64).
fn query(uri: &Uri) -> Vec<(String, String)> {
    let q = uri.query().unwrap_or_default();
    form_urlencoded::parse(q.as_bytes()).take(64).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn body_json(body: &Bytes) -> Result<Value> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| A2aError::Parse(e.to_string()))
}

pub async fn handle(
    State(ctx): State<Arc<A2aContext>>,
    Path((agent, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    let ct = content_type(&headers);
    let (version, path) = match rest.strip_prefix("v1/") {
        Some(p) => (Version::V03, p.to_owned()),
        None => {
            let first = rest.split('/').next().unwrap_or_default();
            let path = if ROOTS.iter().any(|r| first == *r || first.starts_with("tasks")) || first == "card" {
                rest.clone()
            } else {
                rest.split_once('/').map(|(_, p)| p.to_owned()).unwrap_or_default()
            };
            let version = match path.strip_prefix("v1/") {
                Some(_) => Version::V03,
                None => Version::V1,
            };
            (version, path.strip_prefix("v1/").map(str::to_owned).unwrap_or(path))
        }
    };
    if version == Version::V1 {
        let checked = version::requested(&headers, uri.query()).and_then(version::v1_required);
        if let Err(e) = checked {
            return error_reply(&e, Version::V1, ct);
        }
    }
    let body = match body::accept(body) {
        Ok(b) => b,
        Err(e) => return error_reply(&e, version, ct),
    };
    let span =
        info_span!("a2a", binding = "http+json", method = %method, path = %path, version = version.as_str(), %agent);
    async move {
        let op = match route(&method, &path, &uri, &body, version) {
            Ok(op) => op,
            Err(e) => return error_reply(&e, version, ct),
        };
        match ops::execute(&ctx, &agent, op, version).await {
            Ok(Outcome::Value(kind, v)) => {
                reply(axum::http::StatusCode::OK, &ops::render(kind, &v, version, Shape::Rest), ct)
            }
            Ok(Outcome::Stream { watch, min_seq, send, history_length }) => {
                let render: crate::server::sse::Render = Box::new(move |item| match item {
                    Ok(u) => ops::render_event(u, version, Shape::Rest).to_string(),
                    Err(e) => e.rest(version).1.to_string(),
                });
                ops::stream_response(&ctx, watch, min_seq, send, history_length, render)
            }
            Err(e) => error_reply(&e, version, ct),
        }
    }
    .instrument(span)
    .await
}

fn route(method: &Method, path: &str, uri: &Uri, body: &Bytes, version: Version) -> Result<Op> {
    let not_found = || A2aError::MethodNotFound(format!("{method} {}", path.chars().take(200).collect::<String>()));
    let q = query(uri);
    let param = |k: &str| q.iter().find(|(n, _)| n == k || *n == camel_to_snake(k)).map(|(_, v)| v.clone());
    let int = |k: &str| -> Result<Option<i64>> {
        param(k)
            .filter(|v| !v.is_empty())
            .map(|v| v.parse().map_err(|_| A2aError::InvalidParams(format!("{k} must be an integer"))))
            .transpose()
    };
    let send = |stream: bool| -> Result<Op> {
        let v = body_json(body)?;
        let v = if version == Version::V03 { v03::send_in(v, Shape::Rest)? } else { v };
        Ok(Op::Send { req: Box::new(wire::parse(v)?), stream })
    };
    match (method.as_str(), path) {
        ("POST", "message:send") => return send(false),
        ("POST", "message:stream") => return send(true),
        ("GET", "extendedAgentCard") | ("GET", "card") => return Ok(Op::ExtendedCard),
        ("GET", "tasks") if version == Version::V1 => {
            return Ok(Op::List(ListTasksRequest {
                context_id: param("contextId").filter(|s| !s.is_empty()),
                status: param("status").map(Value::String),
                page_size: int("pageSize")?,
                page_token: param("pageToken").filter(|s| !s.is_empty()),
                history_length: int("historyLength")?,
                status_timestamp_after: param("statusTimestampAfter").filter(|s| !s.is_empty()),
                include_artifacts: param("includeArtifacts").map(|v| v == "true" || v == "1"),
            }));
        }
        _ => {}
    }
    let rest = path.strip_prefix("tasks/").ok_or_else(not_found)?;
    let mut segs = rest.split('/');
    let head = segs.next().unwrap_or_default();
    let tail: Vec<&str> = segs.collect();
    let (id, verb) = match head.rsplit_once(':') {
        Some((id, v)) if v == "cancel" || v == "subscribe" => (id.to_owned(), Some(v)),
        _ => (head.to_owned(), None),
    };
    if id.is_empty() || id.len() > 256 {
        return Err(not_found());
    }
    match (method.as_str(), verb, tail.as_slice()) {
        ("GET", None, []) => Ok(Op::Get { id, history_length: int("historyLength")? }),
        ("POST", Some("cancel"), []) => Ok(Op::Cancel { id }),
        ("GET" | "POST", Some("subscribe"), []) => Ok(Op::Subscribe { id }),
        ("POST", None, ["pushNotificationConfigs"]) => {
            let mut v = body_json(body)?;
            if version == Version::V03 {
                v = v03::push_create_in(v, &id);
            } else if let Value::Object(m) = &mut v {
                m.insert("taskId".into(), json!(id));
            }
            Ok(Op::PushCreate(wire::parse(v)?))
        }
        ("GET", None, ["pushNotificationConfigs"]) => Ok(Op::PushList { task_id: id }),
        ("GET", None, ["pushNotificationConfigs", cid]) => Ok(Op::PushGet { task_id: id, id: (*cid).to_owned() }),
        ("DELETE", None, ["pushNotificationConfigs", cid]) => Ok(Op::PushDelete { task_id: id, id: (*cid).to_owned() }),
        _ => Err(not_found()),
    }
}

fn camel_to_snake(k: &str) -> String {
    let mut out = String::with_capacity(k.len() + 4);
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let uri: Uri = "/x?contextId=a%20b+c&pageToken=100%&status=%zz".parse().unwrap();
        let pairs = query(&uri);
        let values: Vec<&str> = pairs.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, vec!["a b c", "100%", "%zz"]);
    }

    #[test]
    fn paths_route_to_operations() {
        let uri: Uri = "/x?historyLength=2".parse().unwrap();
        let b = Bytes::new();
        assert!(matches!(
            route(&Method::GET, "tasks/t1", &uri, &b, Version::V1),
            Ok(Op::Get { history_length: Some(2), .. })
        ));
        assert!(matches!(route(&Method::POST, "tasks/t1:cancel", &uri, &b, Version::V1), Ok(Op::Cancel { .. })));
        assert!(matches!(route(&Method::GET, "tasks/t1:subscribe", &uri, &b, Version::V1), Ok(Op::Subscribe { .. })));
        assert!(matches!(route(&Method::POST, "tasks/t1:subscribe", &uri, &b, Version::V1), Ok(Op::Subscribe { .. })));
        assert!(matches!(
            route(&Method::DELETE, "tasks/t1/pushNotificationConfigs/c", &uri, &b, Version::V1),
            Ok(Op::PushDelete { .. })
        ));
        assert!(route(&Method::PUT, "tasks/t1", &uri, &b, Version::V1).is_err());
    }
}
