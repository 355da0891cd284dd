//! The harness of the router tests: the real A2A router on the shipped assembly
//! (`TestGateway`: a SQLite store, the Coordinator and Workers running the scripted backend),
//! called in process with real HTTP requests (`tower::ServiceExt::oneshot`).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use gateway_a2a::A2aContext;
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{AdmissionLimits, WorkerConfig};
use gateway_services::PublishedAgents;
use gateway_services::auth::{Authenticator, generate_key};
use gateway_store::conformance::{agent_spec, env_spec};
use serde_json::{Value, json};
use tower::ServiceExt;

pub struct Gateway {
    pub router: axum::Router,
    /// The gateway's API key; empty for a [`keyless`] gateway (an empty header is no key).
    pub key: String,
    pub gw: TestGateway,
}

/// A gateway publishing agent `echo` (the scripted backend as `native`) and the built-in
/// `conformance` agent, with one API key.
pub async fn gateway() -> Gateway {
    gateway_with(Some(test_workers()), AdmissionLimits::default(), gateway_a2a::DEFAULT_BLOCKING_TIMEOUT).await
}

fn test_workers() -> WorkerConfig {
    WorkerConfig {
        max_turns: 2,
        claim_batch: 16,
        poll: Duration::from_millis(50),
        shutdown_grace: Duration::from_millis(200),
        ..Default::default()
    }
}

/// [`gateway`] with no API key: only local programs are served without a key.
pub async fn keyless() -> Gateway {
    build(Some(test_workers()), AdmissionLimits::default(), gateway_a2a::DEFAULT_BLOCKING_TIMEOUT, false).await
}

/// [`gateway`] with other bounds; without Workers, runs stay queued.
pub async fn gateway_with(
    workers: Option<WorkerConfig>,
    limits: AdmissionLimits,
    blocking_timeout: Duration,
) -> Gateway {
    build(workers, limits, blocking_timeout, true).await
}

async fn build(
    workers: Option<WorkerConfig>,
    limits: AdmissionLimits,
    blocking_timeout: Duration,
    with_key: bool,
) -> Gateway {
    let builder = TestGateway::builder()
        .scripted()
        .backends([gateway_a2a::conformance_backend()])
        .local_sandbox()
        .subscription_poll(Duration::from_millis(50))
        .instance("router-test")
        .admission(limits);
    let gw = match workers {
        Some(w) => builder.workers(w),
        None => builder.no_workers(),
    }
    .build()
    .await;
    let (store, coordinator) = (Arc::clone(&gw.store), gw.coordinator.clone());
    let env = coordinator.create_environment(env_spec("a2a")).await.unwrap();
    let agent = coordinator.create_agent(agent_spec("echo")).await.unwrap();
    let mut spec = agent_spec("conformance");
    spec.backend = gateway_a2a::conformance_backend().0;
    let conformance = coordinator.create_agent(spec).await.unwrap();
    let key = match with_key {
        true => {
            let key = generate_key();
            store.create_api_key("test", &key.hash).await.unwrap();
            key.secret
        }
        false => String::new(),
    };
    let ctx = A2aContext {
        face: gateway_face::FaceContext::of(
            &gw,
            Arc::new(Authenticator::new(Arc::clone(&store))),
            "http://gateway.test",
        ),
        agents: PublishedAgents {
            agents: vec![("echo".into(), agent.id), ("conformance".into(), conformance.id)],
            environment: Some(env.id),
            ..Default::default()
        },
        secrets: gateway_services::SecretBox::generate(),
        allow_private_push_targets: false,
        blocking_timeout,
    };
    Gateway { router: gateway_a2a::router(ctx), key, gw }
}

impl Gateway {
    pub async fn call(&self, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
        (status, headers, body)
    }

    /// A v1.0 JSON-RPC call with the gateway's key.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let (status, _, body) = self.rpc_raw(method, params).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    pub async fn rpc_raw(&self, method: &str, params: Value) -> (StatusCode, axum::http::HeaderMap, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.call(self.rpc_request("echo", body.to_string())).await
    }

    /// A v1.0 JSON-RPC POST of `body` to agent `agent`'s URL with the gateway's key, for a
    /// caller that reads the answer itself (a stream).
    pub fn rpc_request(&self, agent: &str, body: impl Into<Body>) -> Request<Body> {
        Request::post(format!("/a2a/{agent}"))
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("x-api-key", &self.key)
            .body(body.into())
            .unwrap()
    }

    /// A request with the gateway's key; the answer's bytes as they are.
    pub async fn raw(
        &self,
        req: axum::http::request::Builder,
        body: impl Into<Body>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let req = req.header("x-api-key", &self.key).body(body.into()).unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        (status, headers, axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap())
    }

    /// A JSON-RPC POST to agent `agent`'s URL (v1.0 header, the gateway's key) of `body` as is.
    pub async fn post_rpc(&self, agent: &str, body: impl Into<Body>) -> (StatusCode, HeaderMap, Bytes) {
        let req = Request::post(format!("/a2a/{agent}"))
            .header("content-type", "application/json")
            .header("a2a-version", "1.0");
        self.raw(req, body).await
    }

    /// A v1.0 JSON-RPC call to agent `agent`.
    pub async fn rpc_to(&self, agent: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (status, _, bytes) = self.post_rpc(agent, body.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
        serde_json::from_slice(&bytes).unwrap()
    }
}
