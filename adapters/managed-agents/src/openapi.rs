//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of this surface, kept in `schemas/`.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The document, compiled in so the binary serves exactly what the tests checked.
pub const DOCUMENT: &str = include_str!("../../../schemas/managed-agents.openapi.json");

pub async fn serve() -> Response {
    let mut r = DOCUMENT.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
