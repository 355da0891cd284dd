//! The HTTP surface shared by every protocol: health, readiness, metrics, and the assembled
//! router.
//!
//! These routes need no key. Health and readiness say nothing an attacker can use, so they
//! stay open (orchestrators probe them by IP). Metrics are reads of this process's state:
//! while no key exists they are served only to requests addressed to one of the gateway's
//! own names, so a DNS-rebound page cannot read them ([`check_addressed`]).
//!
//! [`check_addressed`]: gateway_runtime::auth::Authenticator::check_addressed

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use gateway_runtime::Coordinator;
use gateway_runtime::auth::Authenticator;
use serde_json::json;

#[derive(Clone)]
pub struct AppState {
    pub coordinator: Coordinator,
    pub auth: Arc<Authenticator>,
}

/// The whole HTTP application: health, and each protocol adapter's routes.
pub fn router(
    state: AppState,
    managed_agents: gateway_managed_agents::ManagedAgents,
    a2a: gateway_a2a::A2aContext,
    acp: Option<gateway_acp::AcpContext>,
) -> Router {
    let metrics = Router::new()
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(state.clone(), addressed_to_us));
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(metrics)
        .with_state(state)
        .merge(gateway_managed_agents::router(managed_agents))
        .merge(gateway_a2a::router(a2a));
    if let Some(acp) = acp {
        app = app.merge(gateway_acp::router(acp));
    }
    app
}

/// Liveness: the process answers.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Refuses a keyless gateway's metrics to requests addressed to another name (421), in plain
/// text like the metrics themselves.
async fn addressed_to_us(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    match state.auth.check_addressed(peer, req.uri(), req.headers()).await {
        Ok(()) => next.run(req).await,
        Err(e) => {
            let status = e.http_status();
            if status == StatusCode::SERVICE_UNAVAILABLE {
                tracing::warn!(error = %e, "cannot check API keys");
            }
            (status, e.to_string()).into_response()
        }
    }
}

/// Prometheus metrics of this process.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.coordinator.metrics().render())
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
