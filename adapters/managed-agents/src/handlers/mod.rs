//! Request handlers, one module per resource.

pub mod agents;
pub mod environments;
pub mod events;
pub mod files;
pub mod sessions;
pub mod skills;
pub mod webhook_endpoints;
pub mod work;

use axum::http::StatusCode;

use crate::error::ApiError;

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route in this gateway's Managed Agents API (see /v1/openapi.json)")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method not allowed on this route")
}

/// Parses a path id of the expected kind; a malformed id is simply not found.
pub fn path_id<T: std::str::FromStr>(kind: &'static str, code: &'static str, raw: &str) -> Result<T, ApiError> {
    raw.parse::<T>().map_err(|_| ApiError::not_found(format!("{kind} {raw:?} not found")).code(code))
}
