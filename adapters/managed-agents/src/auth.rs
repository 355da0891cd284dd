//! Authentication for `/v1`: `x-api-key` or `Authorization: Bearer`, decided by the shared
//! [`Authenticator`](gateway_runtime::auth::Authenticator) (which also applies the keyless
//! rules: loopback peers, no web pages, only this gateway's own host names).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_runtime::auth::AuthError;

use crate::ManagedAgents;
use crate::error::ApiError;

pub async fn layer(State(api): State<ManagedAgents>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    match api.auth.authorize(peer, req.uri(), req.headers()).await {
        Ok(_) => next.run(req).await,
        Err(e) => refusal(&e).into_response(),
    }
}

/// The envelope of a refused request: 401 `authentication_error`, 421 `permission_error` for
/// a request addressed to another host's name, 503 `api_error` when keys cannot be checked.
fn refusal(e: &AuthError) -> ApiError {
    match e {
        AuthError::Unavailable(detail) => {
            tracing::warn!(error = %detail, "cannot check API keys");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "api_error", "cannot check credentials right now")
        }
        AuthError::ForeignHost { .. } => ApiError::new(e.http_status(), "permission_error", e.to_string()),
        _ => ApiError::unauthorized(e.to_string()),
    }
}

/// Takes one of the process's request places before anything else (authentication, body) is
/// read, and holds it until the response head: a stream returns it once it is open. Beyond
/// the bound the answer is 529 `overloaded_error` with `retry-after`, at once.
pub async fn admit(State(api): State<ManagedAgents>, req: Request, next: Next) -> Response {
    match api.coordinator.load().try_request() {
        Ok(_permit) => next.run(req).await,
        Err(busy) => ApiError::busy(&busy).into_response(),
    }
}
