//! Authentication for `/v1`: `x-api-key` or `Authorization: Bearer`, decided by the shared
//! [`Authenticator`](gateway_runtime::auth::Authenticator).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_runtime::auth::{AuthError, Caller};

use crate::ManagedAgents;
use crate::error::ApiError;

/// The key a client presented, from `x-api-key` or a bearer token.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let value = |name| headers.get(name).and_then(|v: &axum::http::HeaderValue| v.to_str().ok());
    gateway_runtime::auth::presented_key(value("x-api-key"), value(axum::http::header::AUTHORIZATION.as_str()))
}

pub async fn layer(State(api): State<ManagedAgents>, req: Request, next: Next) -> Response {
    let loopback = req.extensions().get::<ConnectInfo<SocketAddr>>().is_some_and(|c| c.0.ip().is_loopback());
    let caller = Caller::of(loopback, req.headers().contains_key(axum::http::header::ORIGIN));
    let key = presented_key(req.headers()).map(str::to_owned);
    match api.auth.authenticate(key.as_deref(), caller).await {
        Ok(_) => next.run(req).await,
        Err(AuthError::Unavailable(e)) => {
            tracing::warn!(error = %e, "cannot check API keys");
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                "cannot check credentials right now",
            )
            .into_response()
        }
        Err(e) => ApiError::unauthorized(e.to_string()).into_response(),
    }
}
