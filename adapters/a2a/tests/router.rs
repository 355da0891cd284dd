//! The A2A router in process: real HTTP requests (`tower::ServiceExt::oneshot`) against the
//! real router, a real SQLite store, the Coordinator and Workers running the scripted backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gateway_a2a::A2aContext;
use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_core::placement::{NetworkControl, Offer, ProviderOffer};
use gateway_runtime::auth::{Authenticator, generate_key};
use gateway_runtime::testing::ScriptedBackend;
use gateway_runtime::{
    BackendRegistry, Coordinator, CoordinatorOptions, PreviewBus, PublishedAgents, WorkerConfig, WorkerPool,
};
use gateway_store::conformance::harness::SqliteHarness;
use gateway_store::conformance::{Harness, agent_spec, env_spec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

struct Gateway {
    router: axum::Router,
    key: String,
    pool: WorkerPool,
    _harness: SqliteHarness,
}

/// A gateway publishing agent `echo` (the scripted backend as `native`), with one API key.
async fn gateway() -> Gateway {
    let harness = SqliteHarness::new(true);
    let store = harness.fresh().await;
    let previews = PreviewBus::default();
    let offer = Offer {
        providers: vec![ProviderOffer {
            tier: ProviderTier::local(),
            network: NetworkControl::None,
            installs_packages: false,
        }],
        ..Default::default()
    };
    let coordinator = Coordinator::new(
        Arc::clone(&store),
        previews.clone(),
        offer,
        CoordinatorOptions { subscription_poll: Duration::from_millis(50) },
    );
    let env = coordinator.create_environment(env_spec("a2a")).await.unwrap();
    let agent = coordinator.create_agent(agent_spec("echo")).await.unwrap();
    let key = generate_key();
    store.create_api_key("test", &key.hash).await.unwrap();
    let mut backends = BackendRegistry::new();
    backends.register(BackendRef::Native, Arc::new(ScriptedBackend));
    let pool = WorkerPool::start(
        Arc::clone(&store),
        backends,
        previews,
        WorkerConfig {
            instance: "router-test".into(),
            workers: 2,
            poll: Duration::from_millis(50),
            shutdown_grace: Duration::from_millis(200),
            providers: vec![ProviderTier::local()],
            ..Default::default()
        },
    );
    let ctx = A2aContext {
        coordinator,
        agents: PublishedAgents {
            agents: vec![("echo".into(), agent.id)],
            environment: Some(env.id),
            ..Default::default()
        },
        auth: Arc::new(Authenticator::new(Arc::clone(&store))),
        public_url: "http://gateway.test".into(),
        secrets: gateway_runtime::SecretBox::generate(),
        allow_private_push_targets: false,
        shutdown: CancellationToken::new(),
    };
    Gateway { router: gateway_a2a::router(ctx), key: key.secret, pool, _harness: harness }
}

impl Gateway {
    async fn call(&self, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
        (status, headers, body)
    }

    /// A v1.0 JSON-RPC call with the gateway's key.
    async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let req = Request::post("/a2a/echo")
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("x-api-key", &self.key)
            .body(Body::from(body.to_string()))
            .unwrap();
        let (status, _, body) = self.call(req).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_completes_and_get_task_returns_it() {
    let gw = gateway().await;
    let sent = gw
        .rpc("SendMessage", json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}))
        .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "echo: hello");
    assert_eq!(task["history"][0]["messageId"], "m1");
    let id = task["id"].as_str().unwrap();

    let got = gw.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["id"], id);
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["result"]["contextId"], task["contextId"]);

    // The same task over HTTP+JSON.
    let req = Request::get(format!("/a2a/echo/tasks/{id}?historyLength=0"))
        .header("a2a-version", "1.0")
        .header("authorization", format!("Bearer {}", gw.key))
        .body(Body::empty())
        .unwrap();
    let (status, headers, body) = gw.call(req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(body.get("history").is_none(), "historyLength=0 omits history: {body}");

    let missing = gw.rpc("GetTask", json!({"id": "task_nope"})).await;
    assert_eq!(missing["error"]["code"], -32001);
    assert_eq!(missing["error"]["data"][0]["reason"], "TASK_NOT_FOUND");

    // Canceling a completed task: TaskNotCancelable, -32002 / HTTP 400.
    let again = gw.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(again["error"]["code"], -32002, "{again}");
    // The card declares no extended card: UnsupportedOperation.
    let card = gw.rpc("GetExtendedAgentCard", json!({})).await;
    assert_eq!(card["error"]["data"][0]["reason"], "UNSUPPORTED_OPERATION", "{card}");
    gw.pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_key_are_refused_before_any_lookup() {
    let gw = gateway().await;
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}});
    for key in [None, Some("gwk_wrong")] {
        let mut req =
            Request::post("/a2a/echo").header("content-type", "application/json").header("a2a-version", "1.0");
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        let (status, headers, body) = gw.call(req.body(Body::from(send.to_string())).unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "key {key:?}: {body}");
        assert!(headers.contains_key("www-authenticate"));
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(body["error"]["details"][0]["reason"], "UNAUTHENTICATED");
    }
    // A task of an unknown agent looks the same as a hidden one: 401 first.
    let req = Request::get("/a2a/nobody/tasks/task_x").header("a2a-version", "1.0").body(Body::empty()).unwrap();
    assert_eq!(gw.call(req).await.0, StatusCode::UNAUTHORIZED);
    // Cards stay public.
    let req = Request::get("/a2a/echo/.well-known/agent-card.json").body(Body::empty()).unwrap();
    let (status, _, card) = gw.call(req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(card["supportedInterfaces"][0]["url"], "http://gateway.test/a2a/echo");
    gw.pool.shutdown().await;
}
