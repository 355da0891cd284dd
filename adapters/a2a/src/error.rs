//! A2A errors and the one mapping from runtime errors to them (protocols/a2a.md §5).
//!
//! Every handler returns [`A2aError`]; the binding renders it: JSON-RPC v1.0 with an
//! `ErrorInfo` in `data`, JSON-RPC v0.3 with `{code, message}` only, REST v1.0 as a
//! `google.rpc.Status`, REST v0.3 as an ad-hoc `{code, message}` body with the HTTP status.
//!
//! Errors this server cannot produce have no variant: the card declares push notifications
//! (so PushNotificationNotSupported never applies). The card declares no extended card: v1.0
//! says that is UnsupportedOperation; v0.3 had only AuthenticatedExtendedCardNotConfigured
//! (-32007) for it, which its SDK answers, so v0.3 callers get that.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use gateway_core::admission::AdmissionError;
use gateway_runtime::{Busy, RuntimeError};
use serde_json::{Value, json};

use crate::server::version::Version;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum A2aError {
    #[error("task {0} not found")]
    TaskNotFound(String),
    #[error("task {0} cannot be canceled: it is already in a final state")]
    TaskNotCancelable(String),
    #[error("{0}")]
    UnsupportedOperation(String),
    #[error("{0}")]
    ContentTypeNotSupported(String),
    #[error("{0}")]
    InvalidAgentResponse(String),
    #[error("{0}")]
    VersionNotSupported(String),
    /// v0.3's answer to `agent/getAuthenticatedExtendedCard` on a card without one.
    #[error("this agent has no authenticated extended card")]
    ExtendedCardNotConfigured,
    /// The body is larger than the routes accept, or holds more JSON values than they parse
    /// (`server::body`). JSON-RPC: Invalid Request (-32600), since A2A names no error for
    /// it and the request as sent is not one the server takes; REST: HTTP 413.
    #[error("request too large: {0}")]
    TooLarge(String),
    /// The body arrived more slowly than the gateway's minimum rate and was cut off:
    /// JSON-RPC Invalid Request (-32600) like a body too large; REST: HTTP 408.
    #[error("request timeout: {0}")]
    TooSlow(String),
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("method not found: {0}")]
    MethodNotFound(String),
    #[error("{0}")]
    Unauthenticated(String),
    /// An authenticated caller whose credential does not reach A2A (an environment key):
    /// HTTP 403 `PERMISSION_DENIED`, before any lookup.
    #[error("{0}")]
    Forbidden(String),
    /// The request addressed a host name that is not this gateway's (keyless gateways only).
    #[error("{0}")]
    Misdirected(String),
    /// A stored push config's credentials cannot be opened with this gateway's secret key.
    #[error("the credentials of push config {config} cannot be read: {error}")]
    SealedCredentials { config: String, error: gateway_services::SecretError },
    /// The store is unreachable; retry later.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
    /// A stored document changed concurrently (compare-and-set lost); callers retry.
    #[error("concurrent update: {0}")]
    Conflict(String),
    /// Overload: refused before anything was admitted; HTTP 503 with `Retry-After` on both
    /// bindings (ADR 0012: A2A names no busy error of its own).
    #[error("{0}")]
    Busy(Busy),
}

impl A2aError {
    pub fn code(&self) -> i64 {
        match self {
            A2aError::TaskNotFound(_) => -32001,
            A2aError::TaskNotCancelable(_) => -32002,
            A2aError::UnsupportedOperation(_) => -32004,
            A2aError::ContentTypeNotSupported(_) => -32005,
            A2aError::InvalidAgentResponse(_) => -32006,
            A2aError::ExtendedCardNotConfigured => -32007,
            A2aError::VersionNotSupported(_) => -32009,
            A2aError::Parse(_) => -32700,
            A2aError::InvalidRequest(_) | A2aError::TooLarge(_) | A2aError::TooSlow(_) => -32600,
            A2aError::InvalidParams(_) => -32602,
            A2aError::MethodNotFound(_) => -32601,
            A2aError::Unauthenticated(_)
            | A2aError::Forbidden(_)
            | A2aError::Misdirected(_)
            | A2aError::SealedCredentials { .. }
            | A2aError::Unavailable(_)
            | A2aError::Internal(_)
            | A2aError::Conflict(_)
            | A2aError::Busy(_) => -32603,
        }
    }

    /// The `ErrorInfo.reason` of A2A-specific errors.
    pub fn reason(&self) -> Option<&'static str> {
        Some(match self {
            A2aError::TaskNotFound(_) => "TASK_NOT_FOUND",
            A2aError::TaskNotCancelable(_) => "TASK_NOT_CANCELABLE",
            A2aError::UnsupportedOperation(_) => "UNSUPPORTED_OPERATION",
            A2aError::ContentTypeNotSupported(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            A2aError::InvalidAgentResponse(_) => "INVALID_AGENT_RESPONSE",
            A2aError::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            A2aError::ExtendedCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            A2aError::Unauthenticated(_) => "UNAUTHENTICATED",
            _ => return None,
        })
    }

    /// HTTP status and gRPC status name of the REST binding (the 1.0.1 mapping).
    pub fn http(&self) -> (StatusCode, &'static str) {
        match self {
            A2aError::TaskNotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            A2aError::MethodNotFound(_) => (StatusCode::NOT_FOUND, "UNIMPLEMENTED"),
            A2aError::TaskNotCancelable(_)
            | A2aError::UnsupportedOperation(_)
            | A2aError::VersionNotSupported(_)
            | A2aError::ExtendedCardNotConfigured => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
            A2aError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "INVALID_ARGUMENT"),
            A2aError::TooSlow(_) => (StatusCode::REQUEST_TIMEOUT, "DEADLINE_EXCEEDED"),
            A2aError::ContentTypeNotSupported(_)
            | A2aError::Parse(_)
            | A2aError::InvalidRequest(_)
            | A2aError::InvalidParams(_) => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
            A2aError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
            A2aError::Forbidden(_) => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
            A2aError::Misdirected(_) => (StatusCode::MISDIRECTED_REQUEST, "PERMISSION_DENIED"),
            A2aError::Unavailable(_) | A2aError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
            A2aError::InvalidAgentResponse(_)
            | A2aError::Internal(_)
            | A2aError::Conflict(_)
            | A2aError::SealedCredentials { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        }
    }

    /// The message shown to clients. Internal details stay in the logs.
    pub fn public_message(&self) -> String {
        match self {
            A2aError::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                "internal error".into()
            }
            other => other.to_string(),
        }
    }

    fn error_info(&self) -> Option<Value> {
        self.reason().map(|reason| {
            json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
            })
        })
    }

    /// The v1.0 `details`: the ErrorInfo of A2A errors, a `RetryInfo` on an overload.
    fn details(&self) -> Vec<Value> {
        let mut details: Vec<Value> = self.error_info().into_iter().collect();
        if let A2aError::Busy(busy) = self {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{}s", busy.retry_after.as_secs().max(1)),
            }));
        }
        details
    }

    /// The HTTP parts of a "retry later" answer (overload, or the database unavailable), on
    /// a rendered error of either binding: status 503 (a JSON-RPC error is otherwise sent
    /// with 200) and `Retry-After` (the overload's hint; one second for a database that is
    /// restarting, as the Managed Agents face says).
    pub fn with_retry_hint(&self, mut r: Response) -> Response {
        let after = match self {
            A2aError::Busy(busy) => busy.retry_after.as_secs().max(1),
            A2aError::Unavailable(_) => 1,
            _ => return r,
        };
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(after));
        r
    }

    /// The JSON-RPC `error` object. v0.3 has no ErrorInfo (`data` omitted).
    pub fn jsonrpc(&self, version: Version) -> Value {
        let mut e = json!({"code": self.code(), "message": self.public_message()});
        if version == Version::V1 {
            let mut details = self.details();
            if let A2aError::InvalidParams(m) | A2aError::InvalidRequest(m) = self {
                details.push(json!({
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": "params", "description": m}],
                }));
            }
            if !details.is_empty() {
                e["data"] = Value::Array(details);
            }
        }
        e
    }

    /// The REST error body: `google.rpc.Status` for v1.0, `{code, message}` for v0.3. v0.3
    /// REST statuses follow its reference server (a2a-sdk 0.3: TaskNotCancelable 409, no
    /// extended card 404) where they differ from the 1.0.1 mapping.
    pub fn rest(&self, version: Version) -> (StatusCode, Value) {
        let (status, grpc) = self.http();
        match version {
            Version::V1 => {
                let body = json!({"error": {
                    "code": status.as_u16(),
                    "status": grpc,
                    "message": self.public_message(),
                    "details": self.details(),
                }});
                (status, body)
            }
            Version::V03 => {
                let status = match self {
                    A2aError::TaskNotCancelable(_) => StatusCode::CONFLICT,
                    A2aError::ExtendedCardNotConfigured => StatusCode::NOT_FOUND,
                    _ => status,
                };
                (status, json!({"code": self.code(), "message": self.public_message()}))
            }
        }
    }
}

impl From<RuntimeError> for A2aError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::NotFound { kind, id } => A2aError::InvalidParams(format!("{kind} {id} not found")),
            RuntimeError::Invalid(m) => A2aError::InvalidParams(m),
            RuntimeError::Placement(p) => A2aError::UnsupportedOperation(p.to_string()),
            RuntimeError::Rejected(AdmissionError::AwaitingAnswers(ids)) => A2aError::UnsupportedOperation(format!(
                "the context waits for input on tool uses {ids:?}: answer them with a message on that task, or cancel it"
            )),
            RuntimeError::Rejected(a) => A2aError::UnsupportedOperation(a.to_string()),
            RuntimeError::Guard(g @ gateway_runtime::error::Guard::DocumentConflict { .. }) => {
                A2aError::Conflict(g.to_string())
            }
            RuntimeError::Guard(g) => A2aError::UnsupportedOperation(g.to_string()),
            RuntimeError::StaleVersion { .. } => A2aError::Internal(e.to_string()),
            RuntimeError::Unavailable(m) => A2aError::Unavailable(m),
            RuntimeError::Busy(b) => A2aError::Busy(b),
            RuntimeError::Internal(m) => A2aError::Internal(m),
        }
    }
}

pub type Result<T, E = A2aError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A database outage is "retry later" on both bindings, like an overload: 503 with
    /// `Retry-After`, never a 200 JSON-RPC error or a 500 a client would not retry.
    #[test]
    fn an_unavailable_database_is_503_with_retry_after_on_both_bindings() {
        let e = A2aError::Unavailable("restarting".into());
        for rendered in [
            axum::response::IntoResponse::into_response(axum::Json(e.jsonrpc(Version::V1))),
            axum::response::IntoResponse::into_response((StatusCode::SERVICE_UNAVAILABLE, "x")),
        ] {
            let r = e.with_retry_hint(rendered);
            assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        }
        let other = A2aError::TaskNotFound("t".into());
        let r = other.with_retry_hint(axum::response::IntoResponse::into_response(axum::Json(json!({}))));
        assert_eq!(r.status(), StatusCode::OK, "other errors keep their status");
    }

    #[test]
    fn v1_errors_carry_error_info_and_v03_do_not() {
        let e = A2aError::TaskNotFound("t1".into());
        let v1 = e.jsonrpc(Version::V1);
        assert_eq!(v1["code"], -32001);
        assert_eq!(v1["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(v1["data"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
        let v03 = e.jsonrpc(Version::V03);
        assert_eq!(v03["code"], -32001);
        assert!(v03.get("data").is_none());
    }

    #[test]
    fn rest_bodies_follow_the_binding_and_version() {
        let (status, body) = A2aError::TaskNotCancelable("t".into()).rest(Version::V1);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
        assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_CANCELABLE");
        let (status, body) = A2aError::TaskNotFound("t".into()).rest(Version::V03);
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["code"], -32001);
        // v0.3 follows its reference server: 409 for a task that cannot be canceled.
        let (status, body) = A2aError::TaskNotCancelable("t".into()).rest(Version::V03);
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body["code"], -32002);
    }

    #[test]
    fn internal_details_never_reach_clients() {
        let e = A2aError::Internal("db password=secret".into());
        assert_eq!(e.jsonrpc(Version::V1)["message"], "internal error");
    }
}
