//! Request handlers, one module per resource.

pub mod agents;
pub mod environments;
pub mod events;
pub mod files;
pub mod sessions;
pub mod skills;
pub mod vaults;
pub mod webhook_endpoints;
pub mod work;

use axum::Json;
use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ApiError;

/// What a handler answers: a JSON body, or the API's error shape.
pub type Reply = Result<Json<Value>, ApiError>;

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route in this gateway's Managed Agents API (see /v1/openapi.json)")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method not allowed on this route")
}
