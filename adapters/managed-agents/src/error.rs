//! The Managed Agents error envelope, and the one mapping from runtime errors to it.
//!
//! Handlers return [`ApiError`]; it becomes a response carrying itself as an extension, and
//! the request-id middleware renders the final body, so every error has the exact envelope
//! `{"type":"error","error":{"type","message","details"?},"request_id"}` with the same id as
//! the `request-id` header.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_core::admission::AdmissionError;
use std::time::Duration;

use gateway_runtime::error::Guard;
use gateway_runtime::{Busy, RuntimeError};
use serde_json::{Value, json};

/// When a client refused for its uploads in progress should try again: long enough for an
/// upload of its own to finish.
const UPLOAD_QUOTA_RETRY_AFTER: Duration = Duration::from_secs(10);
/// When a client refused for an unavailable database should try again.
const UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub error_code: Option<&'static str>,
    /// `x-should-retry: false` for deterministic conflicts and failures.
    pub no_retry: bool,
    /// `retry-after` / `retry-after-ms` on an overload refusal (the SDK honours both).
    pub retry_after: Option<Duration>,
    /// More members of `error.details` beside `error_code` (an object).
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            error_code: None,
            no_retry: false,
            retry_after: None,
            details: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn not_supported(what: impl std::fmt::Display) -> Self {
        Self::invalid(format!("{what} is not supported by this gateway")).code("not_supported")
    }

    /// 503 with `retry-after`: the database (and with it whatever reads it, credentials
    /// included) is unavailable for now; a restarting database is back in seconds.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(UNAVAILABLE_RETRY_AFTER),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "api_error", message)
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    pub fn conflict(message: impl Into<String>, code: &'static str) -> Self {
        Self { no_retry: true, ..Self::new(StatusCode::CONFLICT, "conflict_error", message).code(code) }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::content_too_large(format!("request body exceeds {limit} bytes"))
    }

    /// 413 `request_too_large` with the limit the content exceeded in words.
    pub fn content_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", message)
    }

    /// The overload refusal: 529 `overloaded_error`, which the SDK retries after the hint.
    pub fn busy(busy: &Busy) -> Self {
        Self {
            retry_after: Some(busy.retry_after),
            ..Self::new(StatusCode::from_u16(529).expect("529 is a status code"), "overloaded_error", busy.to_string())
        }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.error_code = Some(code);
        self
    }

    /// Adds members to `error.details` (e.g. a heartbeat's `current_state`).
    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The envelope body for a request id.
    pub fn body(&self, request_id: &str) -> Value {
        let mut error = json!({"type": self.kind, "message": self.message});
        if self.error_code.is_some() || self.details.is_some() {
            let mut details = self.details.clone().filter(Value::is_object).unwrap_or_else(|| json!({}));
            if let Some(code) = self.error_code {
                details["error_code"] = json!(code);
            }
            error["details"] = details;
        }
        json!({"type": "error", "error": error, "request_id": request_id})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Rendered by `request_id::layer`, which knows the request id.
        let mut r = self.status.into_response();
        if self.no_retry {
            r.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if let Some(after) = self.retry_after {
            let headers = r.headers_mut();
            headers.insert("retry-after", HeaderValue::from(after.as_secs().max(1)));
            headers.insert("retry-after-ms", HeaderValue::from(after.as_millis().max(1) as u64));
        }
        r.extensions_mut().insert(self);
        r
    }
}

/// A secret that does not open is the operator's problem (another key, an altered row), never
/// the client's: an internal error, logged without the value (so is any other failure of the
/// service beside the store's, which have their own answers).
impl From<gateway_services::vaults::VaultError> for ApiError {
    fn from(e: gateway_services::vaults::VaultError) -> Self {
        match e {
            gateway_services::vaults::VaultError::Store(s) => RuntimeError::from(s).into(),
            other => RuntimeError::Internal(other.to_string()).into(),
        }
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let message = e.to_string();
        match e {
            RuntimeError::NotFound { kind, .. } => {
                let code = match kind {
                    "environment" => Some("environment_not_found"),
                    "session" => Some("session_not_found"),
                    "agent" | "agent version" => Some("agent_not_found"),
                    "work item" => Some("work_not_found"),
                    "webhook endpoint" => Some("webhook_not_found"),
                    "file" => Some("file_not_found"),
                    "session resource" => Some("session_resource_not_found"),
                    "skill" | "skill version" => Some("skill_not_found"),
                    "vault" => Some("vault_not_found"),
                    "vault credential" => Some("credential_not_found"),
                    _ => None,
                };
                let err = ApiError::not_found(message);
                match code {
                    Some(c) => err.code(c),
                    None => err,
                }
            }
            RuntimeError::Invalid(m) => ApiError::invalid(m),
            RuntimeError::Placement(p) => ApiError::invalid(p.to_string()).code(p.code()),
            RuntimeError::StaleVersion { .. } => ApiError::conflict(message, "version_conflict"),
            RuntimeError::Guard(g) => match g {
                Guard::SessionRunning(_) => ApiError::conflict(message, "session_running"),
                Guard::EnvironmentInUse(_) => ApiError::conflict(message, "environment_in_use"),
                Guard::EnvironmentNotLost { .. } => ApiError::conflict(message, "environment_not_lost"),
                Guard::EnvironmentArchived(_) => ApiError::invalid(message).code("environment_archived"),
                Guard::AgentArchived(_) => ApiError::invalid(message).code("agent_archived"),
                Guard::SessionArchived(_) => ApiError::invalid(message).code("session_archived"),
                Guard::EnvironmentTransition { .. } | Guard::SessionStarted(_) => ApiError::invalid(message),
                // A start-up refusal; no request meets it.
                Guard::HostInUse { .. } => ApiError::conflict(message, "conflict"),
                Guard::DocumentConflict { .. } | Guard::SessionExists(_) => ApiError::conflict(message, "conflict"),
                Guard::WorkState { .. } => ApiError::conflict(message, "work_state_conflict"),
                Guard::FileInUse { .. } => ApiError::conflict(message, "file_in_use"),
                Guard::ResourcesChanged(_) => ApiError::conflict(message, "conflict"),
                Guard::SkillNameChanged { .. } => ApiError::invalid(message).code("skill_name_mismatch"),
                Guard::LastSkillVersion { .. } => ApiError::conflict(message, "last_skill_version"),
                Guard::VaultArchived(_) => ApiError::invalid(message).code("vault_archived"),
                Guard::BudgetCreateOnly(_) => ApiError::invalid(message).code("budget_create_only"),
                Guard::BudgetNotRaised { .. } => ApiError::invalid(message).code("budget_not_raised"),
                Guard::CredentialArchived(_) => ApiError::invalid(message).code("credential_archived"),
                Guard::VaultFull { .. } => ApiError::invalid(message).code("vault_credential_limit"),
                Guard::CredentialExists { .. } => ApiError::conflict(message, "credential_exists"),
                // The key's own uploads in progress (or abandoned, until swept) fill its quota:
                // the per-client throttle, retried once some finish.
                Guard::UploadQuota { .. } => ApiError {
                    retry_after: Some(UPLOAD_QUOTA_RETRY_AFTER),
                    ..ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "rate_limit_error",
                        format!("{message} (files.max_pending_bytes_per_key)"),
                    )
                    .code("upload_quota_exceeded")
                },
                // Only deleting files makes room: not retried.
                Guard::StorageQuota { .. } => ApiError {
                    no_retry: true,
                    ..ApiError::content_too_large(format!("{message} (files.max_stored_bytes)"))
                        .code("storage_quota_exceeded")
                },
                Guard::WebhookLimit { .. } => {
                    ApiError::invalid(format!("{message}; delete one first (webhook_delivery.max_endpoints_per_key)"))
                        .code("webhook_endpoint_limit")
                }
            },
            RuntimeError::Rejected(a) => match a {
                AdmissionError::Archived => ApiError::invalid(message).code("session_archived"),
                AdmissionError::Terminated => ApiError::invalid(message).code("session_terminated"),
                AdmissionError::AwaitingAnswers(_) => ApiError::conflict(message, "session_requires_action"),
                AdmissionError::NotPending(_) => ApiError::invalid(message).code("tool_use_not_pending"),
                AdmissionError::Empty | AdmissionError::NotAnInput(_) => ApiError::invalid(message),
            },
            RuntimeError::Busy(busy) => ApiError::busy(&busy),
            RuntimeError::Unavailable(m) => {
                tracing::warn!(error = %m, "store unavailable");
                // Without a hint the SDK backs off on its own schedule; with it every client
                // retries at the same pace.
                ApiError::unavailable("the gateway's database is unavailable; retry later")
            }
            RuntimeError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                ApiError {
                    no_retry: true,
                    ..ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "api_error", "internal error")
                }
            }
        }
    }
}
