//! The one guard in front of every face's protected routes: admission, authentication, the
//! face's own admission rule, and the metered body, in that order.
//!
//! The order is the contract. A request place is taken before anything but the request's head
//! is read, so an overloaded process refuses at once, without a key lookup or a body read; only
//! then is the caller authenticated, then judged by the face ([`GuardedFace::admits`]), then
//! given one of its key's places; the handler runs with the [`Principal`] in the request's
//! extensions and the body metered against the process's budget and minimum rate. A body cut
//! off by the meter is answered here, whatever the handler made of the broken body. Each step
//! that refuses hands the face a [`Refusal`], and the face alone turns it into its wire shape.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::Response;
use gateway_runtime::Busy;
use gateway_runtime::load::body::BodyRefusal;
use gateway_services::auth::{AuthError, Principal};

use crate::FaceContext;

/// The challenge a face sends with a 401 when its clients expect one (an API key presented as
/// `x-api-key` or as a bearer token).
pub const CHALLENGE: HeaderValue = HeaderValue::from_static("Bearer realm=\"gateway\"");

/// Why the guard answered instead of the handler. `D` is the face's own reason for turning
/// an authenticated caller away ([`GuardedFace::Denied`]).
#[derive(Debug)]
pub enum Refusal<D> {
    /// No key, a key that is not valid, or a keyless request from where keyless requests are
    /// not served (another host, a web page). Never [`AuthError::ForeignHost`] or
    /// [`AuthError::Unavailable`], which have their own variants.
    Unauthenticated(AuthError),
    /// A keyless request addressed to a host name that is not this gateway's (DNS rebinding);
    /// always an [`AuthError::ForeignHost`].
    ForeignHost(AuthError),
    /// The keys cannot be checked right now (the store does not answer); the detail, for the
    /// operator.
    Unavailable(String),
    /// An authenticated caller this face does not serve (here).
    Forbidden(D),
    /// A bound of the process's admission is reached: retry after the hint.
    Busy(Busy),
    /// The body arrived more slowly than the process's minimum rate (the reason, in words).
    TooSlow(String),
}

impl<D> Refusal<D> {
    /// The status most faces answer with: 401, 421, 503 (also when busy), 403, 408. A face
    /// with a status of its own for one of them (Managed Agents' 529 when busy) matches on the
    /// refusal instead.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Refusal::ForeignHost(_) => StatusCode::MISDIRECTED_REQUEST,
            Refusal::Unavailable(_) | Refusal::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            Refusal::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
        }
    }

    fn of_auth(e: AuthError) -> Self {
        match e {
            AuthError::Unavailable(detail) => {
                tracing::warn!(error = %detail, "cannot check API keys");
                Refusal::Unavailable(detail)
            }
            e @ AuthError::ForeignHost { .. } => Refusal::ForeignHost(e),
            e @ (AuthError::Missing
            | AuthError::Invalid
            | AuthError::RemoteWithoutKeys
            | AuthError::BrowserWithoutKeys) => Refusal::Unauthenticated(e),
        }
    }
}

/// The refusal in words, as a plain-text body says it.
impl<D: fmt::Display> fmt::Display for Refusal<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unauthenticated(e) | Refusal::ForeignHost(e) => e.fmt(f),
            Refusal::Unavailable(detail) => write!(f, "cannot check credentials: {detail}"),
            Refusal::Forbidden(reason) => reason.fmt(f),
            Refusal::Busy(busy) => busy.fmt(f),
            Refusal::TooSlow(reason) => f.write_str(reason),
        }
    }
}

/// A face behind [`guard`]: what the guard needs from it, and the face's words for a refusal.
pub trait GuardedFace: Send + Sync + 'static {
    /// Why the face turns an authenticated caller away, in its own terms (its error type).
    type Denied: Send;

    /// The process as this face sees it: its coordinator's admission and its authenticator.
    fn context(&self) -> &FaceContext;

    /// Whether the face serves `principal` for this request. Decided after authentication and
    /// before the key's place is taken, so a caller the face refuses holds no place of its
    /// key's. Asynchronous because a rule may need the store (an environment key reaches only
    /// its environment's sessions).
    fn admits(
        &self,
        principal: &Principal,
        method: &Method,
        uri: &Uri,
    ) -> impl Future<Output = Result<(), Self::Denied>> + Send;

    /// The face's answer to a refusal of the request `method uri`: its status, headers and
    /// error body.
    fn refusal(&self, refusal: Refusal<Self::Denied>, method: &Method, uri: &Uri) -> Response;

    /// How many bytes of this request's body the process holds at once: the whole body for a
    /// route that buffers it (the default), a chunk for one that streams it to the store.
    fn held_body(&self, method: &Method, uri: &Uri) -> usize {
        let _ = (method, uri);
        usize::MAX
    }
}

/// The guard, as an axum middleware: `router.layer(middleware::from_fn_with_state(face,
/// gateway_face::guard::<F>))`, `face` an `Arc<F>`: axum clones a middleware's state for
/// every request, and a face's context is dozens of fields (a refused request spent a tenth
/// of its CPU cloning them). See the module documentation for the order it keeps.
pub async fn guard<F: GuardedFace>(State(face): State<Arc<F>>, mut req: Request, next: Next) -> Response {
    let ctx = face.context();
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    // Held until the response head: a stream gives its place back once it is open.
    let permit = match ctx.coordinator.load().try_request(peer.map(|p| p.ip())) {
        Ok(permit) => permit,
        Err(busy) => return face.refusal(Refusal::Busy(busy), req.method(), req.uri()),
    };
    let principal = match ctx.auth.authorize(peer, req.uri(), req.headers()).await {
        Ok(principal) => principal,
        Err(e) => return face.refusal(Refusal::of_auth(e), req.method(), req.uri()),
    };
    if let Err(denied) = face.admits(&principal, req.method(), req.uri()).await {
        return face.refusal(Refusal::Forbidden(denied), req.method(), req.uri());
    }
    let _key_place = match ctx.coordinator.load().try_key(&principal) {
        Ok(place) => place,
        Err(busy) => return face.refusal(Refusal::Busy(busy), req.method(), req.uri()),
    };
    req.extensions_mut().insert(principal);
    let held = face.held_body(req.method(), req.uri());
    let (parts, body) = req.into_parts();
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let (body, charge) = permit.meter(body, held);
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    match charge.refusal() {
        None => response,
        Some(BodyRefusal::Busy(busy)) => face.refusal(Refusal::Busy(busy), &method, &uri),
        Some(slow @ BodyRefusal::TooSlow { .. }) => face.refusal(Refusal::TooSlow(slow.to_string()), &method, &uri),
    }
}

#[cfg(test)]
mod tests;
