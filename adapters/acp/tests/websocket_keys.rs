//! Invariant 31 on `/acp`, tested as the attack of issue 28: an executor's environment key
//! (`gwe_…`), presented from another host, opened an editor connection and with it loaded an
//! unrelated session, prompted it and opened new ones. The upgrade is now refused 403 before
//! any connection exists (so `session/load`, `session/new` and `session/prompt` are
//! unreachable), with or without API keys configured; API keys and keyless local programs
//! still connect.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use common::{Options, Rig, rig};
use gateway_core::environment::EnvironmentConfig;
use gateway_services::auth::{Authenticator, generate_environment_key, generate_key};
use gateway_store::conformance::env_spec;

/// A caller on another host (TEST-NET-3), and one on this host.
const REMOTE: &str = "203.0.113.7:40002";
const LOCAL: &str = "127.0.0.1:40002";

/// Serves `/acp` of `r` (with the gateway's authenticator and roots) on a loopback port; every
/// request is recorded as coming from `peer`, as the server's connection info would say.
async fn serve(r: &Rig, peer: &'static str) -> SocketAddr {
    let mut ctx = r.context(Some(vec![r.projects.path().to_path_buf()]));
    ctx.face.auth = Arc::new(Authenticator::new(Arc::clone(&r.store)));
    let app = gateway_acp::router(ctx).layer(middleware::from_fn(move |mut req: Request, next: Next| async move {
        req.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        next.run(req).await
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// An environment key of a new self-hosted environment, as `POST /v1/environments/{id}/keys`
/// makes it.
async fn environment_key(r: &Rig) -> String {
    let mut spec = env_spec("executors");
    spec.config = EnvironmentConfig::SelfHosted;
    let env = r.coordinator.create_environment(spec).await.unwrap();
    let key = generate_environment_key();
    r.store.create_environment_key(&env.id, "executor", &key.hash).await.unwrap();
    key.secret
}

/// The status and body of a WebSocket upgrade of `/acp` presenting `key` (`x-api-key` when
/// `header`, else a bearer token).
async fn upgrade(addr: SocketAddr, key: Option<&str>, header: bool) -> (u16, String, bool) {
    let mut req = reqwest::Client::new()
        .get(format!("http://{addr}/acp"))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
    req = match (key, header) {
        (Some(k), true) => req.header("x-api-key", k),
        (Some(k), false) => req.bearer_auth(k),
        (None, _) => req,
    };
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r.headers().contains_key("www-authenticate");
    let body = if status == 101 { String::new() } else { r.text().await.unwrap() };
    (status, body, challenge)
}

/// The attack, on a gateway `r` already served as `REMOTE` sees it at `remote`: the
/// environment key (either way of presenting it) gets 403 and no connection.
async fn refused(r: &Rig, remote: SocketAddr) {
    let env_key = environment_key(r).await;
    for header in [true, false] {
        let (status, body, challenge) = upgrade(remote, Some(&env_key), header).await;
        assert_eq!(status, 403, "the environment key (header {header}) opens no editor connection: {body}");
        assert!(body.contains("environment key"), "{body}");
        assert!(!challenge, "a 403 is no challenge to authenticate");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_opens_no_acp_connection_on_a_gateway_with_api_keys() {
    let r = rig(Options::default()).await;
    let key = generate_key();
    r.store.create_api_key("editor", &key.hash).await.unwrap();
    let remote = serve(&r, REMOTE).await;
    refused(&r, remote).await;
    for header in [true, false] {
        assert_eq!(upgrade(remote, Some(&key.secret), header).await.0, 101, "the API key connects");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_opens_no_acp_connection_on_a_keyless_gateway() {
    let r = rig(Options::default()).await;
    let remote = serve(&r, REMOTE).await;
    refused(&r, remote).await;
    let (status, _, challenge) = upgrade(remote, None, true).await;
    assert!(status == 401 && challenge, "another host without a key is refused: {status}");
    let local = serve(&r, LOCAL).await;
    refused(&r, local).await;
    assert_eq!(upgrade(local, None, true).await.0, 101, "a local program connects without a key");
}
