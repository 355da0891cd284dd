//! The HTTP surface shared by every protocol: health, readiness, metrics, and the assembled
//! router.
//!
//! Health and readiness need no key: they say nothing an attacker can use, so they stay open
//! (orchestrators probe them by IP). Metrics are reads of this process's state: once a key
//! exists they need an API key; while none exists they are served only to requests addressed
//! to one of the gateway's own names, so a DNS-rebound page cannot read them
//! ([`authorize_operator`]).
//!
//! [`authorize_operator`]: gateway_services::auth::Authenticator::authorize_operator

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use gateway_core::trace::TraceContext;
use gateway_face::Face;
use gateway_runtime::Coordinator;
use gateway_services::auth::{Authenticator, Principal};
use serde_json::json;
use tracing::Instrument;

use crate::measure::measured;
use gateway_services::places::Places;

#[derive(Clone)]
pub struct AppState {
    pub coordinator: Coordinator,
    pub auth: Arc<Authenticator>,
}

/// The whole HTTP application: health, metrics, the viewer, and every face's routes, each
/// measured under the face's name.
pub fn router(state: AppState, faces: &[Box<dyn Face>], max_streams_per_key: usize) -> Router {
    let measures = Arc::clone(state.coordinator.metrics());
    let metrics = Router::new()
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(state.clone(), operators_only));
    let auth = Arc::clone(&state.auth);
    let ops = Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).merge(metrics);
    let mut app = measured(ops, "ops", Arc::clone(&measures)).with_state(state);
    for face in faces {
        app = app.merge(measured(face.router(), face.name(), Arc::clone(&measures)));
    }
    let app = app.merge(measured(crate::ui::router(), "ui", measures));
    let streams = Arc::new(Streams { auth, open: Places::new(max_streams_per_key, usize::MAX) });
    app.layer(middleware::from_fn_with_state(streams, govern_streams)).layer(middleware::from_fn(trace_requests))
}

/// While traces are exported: one span per request of a protocol face, named by the route's
/// template (`HTTP POST /a2a/{agent}`, never a raw id), a child of the caller's W3C
/// `traceparent` when it sent one. Health, readiness and metrics probes are not traced (they
/// would bury the requests that matter). Without tracing, nothing happens here.
async fn trace_requests(req: Request, next: Next) -> Response {
    if !gateway_core::trace::enabled() || matches!(req.uri().path(), "/healthz" | "/readyz" | "/metrics") {
        return next.run(req).await;
    }
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_owned());
    let method = req.method().clone();
    let name = match &route {
        Some(route) => format!("HTTP {method} {route}"),
        None => format!("HTTP {method}"),
    };
    let span = tracing::info_span!(
        "http_request",
        otel.name = %name,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = route,
        url.path = req.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    let carried = {
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        header("traceparent").and_then(|tp| TraceContext::from_headers(tp, header("tracestate")))
    };
    gateway_core::trace::adopt(&span, carried.as_ref());
    let response = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The event streams open in this process, by the key that opened them.
struct Streams {
    auth: Arc<Authenticator>,
    open: Places<Principal>,
}

/// Every event stream, whichever face served it, is held to two rules the faces authorised
/// it under when it opened:
/// - one key holds at most `http.max_streams_per_key` open streams (keyless local clients
///   count as one key); past it the stream is refused `429` with `retry-after`, so one
///   client cannot hold every subscription the process can serve;
/// - a stream opened with a key ends when that key is revoked: a revoked key must not keep
///   reading a session for as long as its connection lasts.
async fn govern_streams(State(streams): State<Arc<Streams>>, req: Request, next: Next) -> Response {
    let secret = gateway_services::auth::presented_key_in(req.headers()).map(str::to_owned);
    let response = next.run(req).await;
    let is_stream = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !is_stream {
        return response;
    }
    let principal = match &secret {
        Some(secret) => match streams.auth.principal_of(secret).await {
            Ok(p) => p,
            // Keyless: whatever a local client presents, it was served as one.
            Err(_) => Principal::Loopback,
        },
        None => Principal::Loopback,
    };
    let place = match streams.open.take(principal.clone()) {
        Ok(place) => place,
        Err(full) => {
            tracing::warn!(limit = full.holder, "event stream refused: too many open for one key");
            return too_many_streams(full.holder);
        }
    };
    let revoked = streams.auth.until_revoked(&principal);
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().take_until(revoked).map(move |chunk| {
        let _held = &place;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// `429` with a retry hint, in the error shape of the Managed Agents API (the face most
/// streams come from; the others' clients read the status).
fn too_many_streams(limit: usize) -> Response {
    let body = json!({"type": "error", "error": {"type": "rate_limit_error", "message": format!(
        "this key has {limit} event streams open, the most one key may hold; close one or retry later"
    )}});
    let mut refused = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
    refused.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    refused
}

/// Liveness: the process answers.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Serves the operator's routes only to whom [`Authenticator::authorize_operator`] allows,
/// refusing in plain text like the metrics themselves.
async fn operators_only(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    match state.auth.authorize_operator(peer, req.uri(), req.headers()).await {
        Ok(()) => next.run(req).await,
        Err(e) => {
            let status = e.http_status();
            if status == StatusCode::SERVICE_UNAVAILABLE {
                tracing::warn!(error = %e, "cannot check API keys");
            }
            let mut refused = (status, e.to_string()).into_response();
            if status == StatusCode::UNAUTHORIZED {
                refused.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer realm=\"gateway\""),
                );
            }
            refused
        }
    }
}

/// The metrics of this process (OpenMetrics text, which Prometheus scrapes).
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    state.coordinator.refresh_metrics().await;
    (
        [(axum::http::header::CONTENT_TYPE, gateway_services::metrics::CONTENT_TYPE)],
        state.coordinator.metrics().render(),
    )
}

/// Readiness: the database answers within two seconds.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), state.coordinator.ready()).await {
        Ok(Ok(())) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "error": e.to_string()}))),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "error": "database did not answer within 2s"})),
        ),
    }
}
