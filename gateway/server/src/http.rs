//! The HTTP surface shared by every protocol: health, readiness, and the assembled router.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use gateway_runtime::Coordinator;
use serde_json::json;

#[derive(Clone)]
pub struct AppState {
    pub coordinator: Coordinator,
}

/// The whole HTTP application: health, and each protocol adapter's routes.
pub fn router(
    state: AppState,
    managed_agents: gateway_managed_agents::ManagedAgents,
    a2a: gateway_a2a::A2aContext,
    acp: Option<gateway_acp::AcpContext>,
) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
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
