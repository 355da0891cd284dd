//! Authentication of the A2A bindings: the gateway's keys, presented as `x-api-key` or
//! `Authorization: Bearer` (the card's two security schemes), decided by the shared
//! [`Authenticator`](gateway_services::auth::Authenticator) with its keyless rules (loopback
//! peers, no web pages, only this gateway's host names). Cards are public. A refused request
//! gets 401 with a challenge (421 for a foreign host, 403 for a credential that does not reach
//! A2A), before any lookup (so unknown and hidden tasks look the same). These HTTP-level
//! refusals carry a `google.rpc.Status` body on both bindings.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_runtime::load::body::BodyRefusal;
use gateway_services::auth::{AuthError, Principal};

use crate::A2aContext;
use crate::error::A2aError;
use crate::server::version::Version;

pub async fn layer(State(ctx): State<A2aContext>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let err = match ctx.auth.authorize(peer, req.uri(), req.headers()).await {
        Ok(principal) => match admitted(&principal) {
            Ok(()) => match ctx.coordinator.load().try_key(&principal) {
                Ok(_key_place) => return next.run(req).await,
                Err(busy) => return refusal(req.method(), req.uri(), A2aError::Busy(busy)),
            },
            Err(e) => e,
        },
        Err(AuthError::Unavailable(e)) => A2aError::Unavailable(format!("cannot check credentials: {e}")),
        Err(e @ AuthError::ForeignHost { .. }) => A2aError::Misdirected(e.to_string()),
        Err(e) => A2aError::Unauthenticated(e.to_string()),
    };
    let (status, body) = err.rest(Version::V1);
    let mut r = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gateway\""));
    }
    r
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

/// Takes one of the process's request places (and one of its peer's) before authentication
/// or the body, held until the response head (a stream gives it back once open). Beyond the
/// bound: HTTP 503 with `Retry-After`, in the binding's error shape (JSON-RPC for
/// `POST /a2a/{agent}`, REST else). The body is read under the process's body budget and
/// minimum rate (`gateway_runtime::load::body`); a body cut off by either is answered here
/// (503, or 408 for a body too slow), whatever the handler made of it.
pub async fn admit(State(ctx): State<A2aContext>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let permit = match ctx.coordinator.load().try_request(peer) {
        Ok(permit) => permit,
        Err(busy) => return refusal(req.method(), req.uri(), A2aError::Busy(busy)),
    };
    let (parts, body) = req.into_parts();
    let (body, charge) = permit.meter(body, usize::MAX);
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    match charge.refusal() {
        None => response,
        Some(BodyRefusal::Busy(busy)) => refusal(&method, &uri, A2aError::Busy(busy)),
        Some(slow @ BodyRefusal::TooSlow { .. }) => refusal(&method, &uri, A2aError::TooSlow(slow.to_string())),
    }
}

/// A refusal before the handler, in the shape of the binding the request addressed.
fn refusal(method: &Method, uri: &Uri, err: A2aError) -> Response {
    let segments = uri.path().trim_matches('/').split('/').count();
    if segments <= 2 && method == Method::POST {
        crate::server::jsonrpc::envelope_error(serde_json::value::RawValue::NULL, &err, Version::V1)
    } else {
        crate::server::rest::error_reply(&err, Version::V1, HeaderValue::from_static("application/json"))
    }
}
