//! Who may call the A2A bindings: the gateway's keys, presented as `x-api-key` or
//! `Authorization: Bearer` (the card's two security schemes), decided by the shared
//! [`Authenticator`](gateway_services::auth::Authenticator) with its keyless rules (loopback
//! peers, no web pages, only this gateway's host names) in the guard every face runs
//! (`gateway_face::guard`). Cards are public. A refused request gets 401 with a challenge
//! (421 for a foreign host, 403 for a credential that does not reach A2A), before any lookup
//! (so unknown and hidden tasks look the same). These refusals carry a `google.rpc.Status`
//! body on both bindings; a busy process or a body too slow is answered in the shape of the
//! binding the request addressed.

use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use gateway_face::{FaceContext, GuardedFace, Refusal};
use gateway_services::auth::Principal;

use crate::A2aContext;
use crate::error::A2aError;
use crate::server::version::Version;

impl GuardedFace for A2aContext {
    type Denied = A2aError;

    fn context(&self) -> &FaceContext {
        &self.face
    }

    async fn admits(&self, principal: &Principal, _: &Method, _: &Uri) -> Result<(), A2aError> {
        admitted(principal)
    }

    fn refusal(&self, refusal: Refusal<A2aError>, method: &Method, uri: &Uri) -> Response {
        let err = match refusal {
            Refusal::Busy(busy) => return in_binding(method, uri, A2aError::Busy(busy)),
            Refusal::TooSlow(reason) => return in_binding(method, uri, A2aError::TooSlow(reason)),
            Refusal::Unavailable(e) => A2aError::Unavailable(format!("cannot check credentials: {e}")),
            Refusal::ForeignHost(e) => A2aError::Misdirected(e.to_string()),
            Refusal::Unauthenticated(e) => A2aError::Unauthenticated(e.to_string()),
            Refusal::Forbidden(e) => e,
        };
        let (status, body) = err.rest(Version::V1);
        let mut r = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, gateway_face::guard::CHALLENGE);
        }
        r
    }
}

/// Whom A2A serves. Every A2A operation reaches every task of every published agent, so only
/// an API key (or, while no key exists, a local program) may call one. An environment key is
/// an executor's credential for one self-hosted environment's work queue and sessions on the
/// Managed Agents API (invariant 31, ADR 0013): it reaches nothing here, keys or no keys, from
/// any address. The match is exhaustive so that a new kind of caller is decided here too.
fn admitted(principal: &Principal) -> Result<(), A2aError> {
    match principal {
        Principal::Loopback | Principal::Key(_) => Ok(()),
        Principal::Environment { .. } => Err(A2aError::Forbidden(
            "an environment key is valid only for its own environment's work queue and sessions on the Managed \
             Agents API; A2A needs an API key"
                .into(),
        )),
    }
}

/// A refusal of a busy process or a slow body, in the shape of the binding the request
/// addressed: JSON-RPC for `POST /a2a/{agent}`, REST else (HTTP 503 with `Retry-After`, or 408).
fn in_binding(method: &Method, uri: &Uri, err: A2aError) -> Response {
    let segments = uri.path().trim_matches('/').split('/').count();
    if segments <= 2 && method == Method::POST {
        crate::server::jsonrpc::envelope_error(serde_json::value::RawValue::NULL, &err, Version::V1)
    } else {
        crate::server::rest::error_reply(&err, Version::V1, HeaderValue::from_static("application/json"))
    }
}
