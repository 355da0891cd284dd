//! Request ids: every response gets `request-id: req_…`; error responses get the envelope
//! rendered here with the same id (see `error.rs`).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use gateway_core::RunId;

use crate::error::ApiError;

/// A request's id, available to handlers as an extension.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

fn new_id() -> String {
    // Reuse the core's unguessable, time-sortable suffix.
    format!("req_{}", &RunId::new().as_str()[4..])
}

pub async fn layer(mut req: Request, next: Next) -> Response {
    let id = new_id();
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut response = next.run(req).await;
    if let Some(err) = response.extensions_mut().remove::<ApiError>() {
        let body = err.body(&id).to_string();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.remove(header::CONTENT_LENGTH);
        *response.body_mut() = Body::from(body);
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("request-id", v);
    }
    response
}
