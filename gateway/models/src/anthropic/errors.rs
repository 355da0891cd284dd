//! Turning the Messages API's failures into typed [`ModelError`]s.
//!
//! The API reports errors twice over: an HTTP status and a body
//! `{"type":"error","error":{"type":"overloaded_error","message":"..."}}`; mid-stream, only the
//! body arrives, as an `error` event. The status decides the kind (the shared rule,
//! [`http::status_error`]), the error type refines it where the status alone is ambiguous.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::ModelError;
use crate::http::{self, Hint};

/// The Messages API's error envelope.
#[derive(Debug, Deserialize)]
struct Envelope {
    error: ErrorObject,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ErrorObject {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub message: String,
}

/// The error for an unsuccessful HTTP response.
pub(crate) fn from_status(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> ModelError {
    let (kind, message) = match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope { error }) => (error.kind, error.message),
        Err(_) => (String::new(), http::quote_body(status, body)),
    };
    let hint = if kind == "overloaded_error" { Hint::Overloaded } else { Hint::None };
    http::status_error(status, message, http::retry_after(headers), hint)
}

/// The error for an `error` event received inside a stream, whose HTTP status was 200: the
/// status reported is the one the API documents for that error type.
pub(crate) fn from_error_event(error: ErrorObject) -> ModelError {
    let ErrorObject { kind, message } = error;
    let message = match (message.is_empty(), kind.is_empty()) {
        (false, _) => message,
        (true, false) => kind.clone(),
        (true, true) => "unknown error".to_owned(),
    };
    match kind.as_str() {
        "overloaded_error" => ModelError::Overloaded { status: 529, message, retry_after: None },
        "rate_limit_error" => ModelError::RateLimited { message, retry_after: None },
        "authentication_error" => ModelError::Authentication { status: 401, message },
        "permission_error" => ModelError::Authentication { status: 403, message },
        "invalid_request_error" => ModelError::InvalidRequest { status: 400, message },
        "billing_error" => ModelError::InvalidRequest { status: 402, message },
        "not_found_error" => ModelError::InvalidRequest { status: 404, message },
        "request_too_large" => ModelError::InvalidRequest { status: 413, message },
        "timeout_error" => ModelError::Server { status: 504, message, retry_after: None },
        // `api_error` and anything newer: an internal failure of the API.
        _ => ModelError::Server { status: 500, message, retry_after: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str) -> Vec<u8> {
        format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"m"}}}}"#).into_bytes()
    }

    #[test]
    fn statuses_map_to_kinds() {
        let none = HeaderMap::new();
        let at = |code: u16, kind: &str| from_status(StatusCode::from_u16(code).unwrap(), &none, &body(kind));
        assert_eq!(at(429, "rate_limit_error"), ModelError::RateLimited { message: "m".into(), retry_after: None });
        assert_eq!(
            at(529, "overloaded_error"),
            ModelError::Overloaded { status: 529, message: "m".into(), retry_after: None }
        );
        assert_eq!(
            at(503, "overloaded_error"),
            ModelError::Overloaded { status: 503, message: "m".into(), retry_after: None }
        );
        assert_eq!(at(500, "api_error"), ModelError::Server { status: 500, message: "m".into(), retry_after: None });
        assert_eq!(at(401, "authentication_error"), ModelError::Authentication { status: 401, message: "m".into() });
        assert_eq!(at(403, "permission_error"), ModelError::Authentication { status: 403, message: "m".into() });
        assert_eq!(at(413, "request_too_large"), ModelError::InvalidRequest { status: 413, message: "m".into() });
        assert!(matches!(at(302, "x"), ModelError::Protocol(_)));
    }

    #[test]
    fn unparseable_error_bodies_are_quoted_and_bounded() {
        let long = "<html>".repeat(200);
        let error = from_status(StatusCode::BAD_GATEWAY, &HeaderMap::new(), long.as_bytes());
        let ModelError::Server { status: 502, message, .. } = error else { panic!("{error:?}") };
        assert!(message.starts_with("<html>") && message.chars().count() == 301);
        let error = from_status(StatusCode::BAD_GATEWAY, &HeaderMap::new(), b"");
        assert_eq!(error, ModelError::Server { status: 502, message: "Bad Gateway".into(), retry_after: None });
    }

    #[test]
    fn error_events_map_to_kinds() {
        let event = |kind: &str| from_error_event(ErrorObject { kind: kind.into(), message: "m".into() });
        assert!(matches!(event("overloaded_error"), ModelError::Overloaded { status: 529, .. }));
        assert!(matches!(event("api_error"), ModelError::Server { status: 500, .. }));
        assert!(matches!(event("rate_limit_error"), ModelError::RateLimited { .. }));
        assert!(matches!(event("invalid_request_error"), ModelError::InvalidRequest { status: 400, .. }));
        assert!(matches!(event("something_new"), ModelError::Server { status: 500, .. }));
    }
}
