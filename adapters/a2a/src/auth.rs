//! Authentication of the A2A bindings: the gateway's keys, presented as `x-api-key` or
//! `Authorization: Bearer` (the card's two security schemes). Cards are public. A refused
//! request gets 401 with a challenge, before any lookup (so unknown and hidden tasks look the
//! same).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_runtime::auth::{AuthError, Caller};

use crate::A2aContext;
use crate::error::A2aError;
use crate::version::Version;

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let value = |name| headers.get(name).and_then(|v: &axum::http::HeaderValue| v.to_str().ok());
    gateway_runtime::auth::presented_key(value("x-api-key"), value(axum::http::header::AUTHORIZATION.as_str()))
}

pub async fn layer(State(ctx): State<A2aContext>, req: Request, next: Next) -> Response {
    let loopback = req.extensions().get::<ConnectInfo<SocketAddr>>().is_some_and(|c| c.0.ip().is_loopback());
    let caller = Caller::of(loopback, req.headers().contains_key(header::ORIGIN));
    let key = presented_key(req.headers()).map(str::to_owned);
    let err = match ctx.auth.authenticate(key.as_deref(), caller).await {
        Ok(_) => return next.run(req).await,
        Err(AuthError::Unavailable(e)) => A2aError::Unavailable(format!("cannot check credentials: {e}")),
        Err(e) => A2aError::Unauthenticated(e.to_string()),
    };
    let (status, body) = err.rest(Version::V1);
    let mut r = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gateway\""));
    }
    r
}
