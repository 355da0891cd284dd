//! Who may call `/v1`: `x-api-key` or `Authorization: Bearer`, decided by the shared
//! [`Authenticator`](gateway_services::auth::Authenticator) (which also applies the keyless
//! rules: loopback peers, no web pages, only this gateway's own host names) in the guard every
//! face runs (`gateway_face::guard`). What is this face's own: how far an environment key
//! reaches, and the envelope a refusal is answered with.

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use gateway_core::{EnvironmentId, SessionId};
use gateway_face::{FaceContext, GuardedFace, Refusal};
use gateway_runtime::RuntimeError;
use gateway_services::auth::Principal;

use crate::ManagedAgents;
use crate::error::ApiError;

/// `/v1` behind the one guard (`gateway_face::guard`): a request place before anything else is
/// read, then the key, then [`check_environment_scope`], then the key's place, the body read
/// under the process's budget and minimum rate. A file upload streams into the store a chunk
/// at a time; every other body is held whole.
impl GuardedFace for ManagedAgents {
    type Denied = ApiError;

    fn context(&self) -> &FaceContext {
        &self.face
    }

    async fn admits(&self, principal: &Principal, method: &Method, uri: &Uri) -> Result<(), ApiError> {
        match principal {
            Principal::Environment { environment, .. } => {
                check_environment_scope(self, environment, method, uri.path()).await
            }
            Principal::Loopback | Principal::Key(_) => Ok(()),
        }
    }

    /// The envelope of a refused request: 401 `authentication_error` (no challenge), 421
    /// `permission_error` for a request addressed to another host's name, 503 `api_error` with
    /// `retry-after` when keys cannot be checked, 529 `overloaded_error` with `retry-after`
    /// when busy (the SDKs retry after the hint), 408 `timeout_error` for a body too slow.
    fn refusal(&self, refusal: Refusal<ApiError>, _: &Method, _: &Uri) -> Response {
        let error = match refusal {
            Refusal::Unauthenticated(e) => ApiError::unauthorized(e.to_string()),
            Refusal::ForeignHost(e) => ApiError::new(e.http_status(), "permission_error", e.to_string()),
            Refusal::Unavailable(_) => ApiError::unavailable("cannot check credentials right now"),
            Refusal::Forbidden(e) => e,
            Refusal::Busy(busy) => ApiError::busy(&busy),
            Refusal::TooSlow(reason) => ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout_error", reason),
        };
        error.into_response()
    }

    fn held_body(&self, method: &Method, uri: &Uri) -> usize {
        if method == Method::POST && uri.path() == "/v1/files" {
            gateway_services::files::UPLOAD_HELD_BYTES
        } else {
            usize::MAX
        }
    }
}

/// What an environment key may reach (docs/adr/0013): its environment's work queue, and its
/// environment's sessions: retrieve, and events list, stream and send (the send handler
/// further admits only tool results). Everything else is 403.
async fn check_environment_scope(
    api: &ManagedAgents,
    environment: &EnvironmentId,
    method: &Method,
    path: &str,
) -> Result<(), ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "an environment key is valid only for its own environment's work queue and sessions",
        )
    };
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match segments.as_slice() {
        ["", "v1", "environments", env, "work", ..] if *env == environment.as_str() => Ok(()),
        ["", "v1", "sessions", session, rest @ ..] => {
            let readable = match rest {
                [] | ["stream"] | ["events", "stream"] => method == Method::GET,
                ["events"] => method == Method::GET || method == Method::POST,
                _ => false,
            };
            if !readable {
                return Err(refused());
            }
            let Ok(id) = session.parse::<SessionId>() else { return Err(refused()) };
            match api.coordinator.get_session(&id).await {
                Ok(s) if s.environment_id == *environment => Ok(()),
                Ok(_) | Err(RuntimeError::NotFound { .. }) => Err(refused()),
                Err(e) => Err(e.into()),
            }
        }
        _ => Err(refused()),
    }
}

/// Whose quota a request's uploads and webhook endpoints count against: its key's id, or the
/// one name every keyless local client shares.
pub(crate) fn owner(principal: Option<&Principal>) -> String {
    match principal {
        Some(Principal::Key(key) | Principal::Environment { key, .. }) => key.to_string(),
        Some(Principal::Loopback) | None => gateway_services::files::ANONYMOUS.to_owned(),
    }
}
