//! Authentication for `/v1`: `x-api-key` or `Authorization: Bearer`, decided by the shared
//! [`Authenticator`](gateway_services::auth::Authenticator) (which also applies the keyless
//! rules: loopback peers, no web pages, only this gateway's own host names).

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_core::{EnvironmentId, SessionId};
use gateway_runtime::RuntimeError;
use gateway_runtime::load::body::BodyRefusal;
use gateway_services::auth::{AuthError, Principal};

use crate::ManagedAgents;
use crate::error::ApiError;

pub async fn layer(State(api): State<ManagedAgents>, mut req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let principal = match api.auth.authorize(peer, req.uri(), req.headers()).await {
        Ok(p) => p,
        Err(e) => return refusal(&e).into_response(),
    };
    if let Principal::Environment { environment, .. } = &principal
        && let Err(e) = check_environment_scope(&api, environment, req.method(), req.uri().path()).await
    {
        return e.into_response();
    }
    let _key_place = match api.coordinator.load().try_key(&principal) {
        Ok(place) => place,
        Err(busy) => return ApiError::busy(&busy).into_response(),
    };
    req.extensions_mut().insert(principal);
    next.run(req).await
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

/// Takes one of the process's request places (and one of its peer's) before anything else
/// (authentication, body) is read, and holds it until the response head: a stream returns it
/// once it is open. Beyond the bound the answer is 529 `overloaded_error` with
/// `retry-after`, at once. The body is read under the process's body budget and minimum rate
/// (`gateway_runtime::load::body`): a body cut off by either is answered here, 529 or 408,
/// whatever the handler made of the broken body.
pub async fn admit(State(api): State<ManagedAgents>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let permit = match api.coordinator.load().try_request(peer) {
        Ok(permit) => permit,
        Err(busy) => return ApiError::busy(&busy).into_response(),
    };
    // A file upload streams into the store a chunk at a time; every other body is held whole.
    let held = if req.method() == Method::POST && req.uri().path() == "/v1/files" {
        gateway_services::files::UPLOAD_HELD_BYTES
    } else {
        usize::MAX
    };
    let (parts, body) = req.into_parts();
    let (body, charge) = permit.meter(body, held);
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    match charge.refusal() {
        None => response,
        Some(BodyRefusal::Busy(busy)) => ApiError::busy(&busy).into_response(),
        Some(slow @ BodyRefusal::TooSlow { .. }) => {
            ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout_error", slow.to_string()).into_response()
        }
    }
}
