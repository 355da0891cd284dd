//! Invariant 31 on the A2A face, tested as the attack of issue 28: an executor's environment
//! key (`gwe_…`), presented from another host, tried every A2A operation (list every task,
//! read one, cancel one, send a message whose tool call would run on the gateway's host) on
//! both bindings and both versions. Each is refused 403 `PERMISSION_DENIED` before any lookup,
//! with or without API keys configured, and nothing is created or changed; API keys and
//! keyless local programs are served as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use common::Gateway;
use gateway_core::environment::EnvironmentConfig;
use gateway_services::auth::generate_environment_key;
use gateway_store::conformance::env_spec;
use gateway_store::{Order, PageRequest, SessionFilter};
use serde_json::{Value, json};

/// A caller on another host (TEST-NET-3), and one on this host.
const REMOTE: &str = "203.0.113.7:40001";
const LOCAL: &str = "127.0.0.1:40001";

/// How a request presents its key.
#[derive(Clone, Copy, Debug)]
enum Presented<'a> {
    None,
    Header(&'a str),
    Bearer(&'a str),
}

/// A request from `peer` (as the server's connection info records it), presenting `key`.
fn request(peer: &str, key: Presented<'_>, method: &str, uri: &str, v1: bool, body: Option<Value>) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(uri);
    if v1 {
        req = req.header("a2a-version", "1.0");
    }
    req = match key {
        Presented::None => req,
        Presented::Header(k) => req.header("x-api-key", k),
        Presented::Bearer(k) => req.header("authorization", format!("Bearer {k}")),
    };
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let mut req = req.body(body).unwrap();
    req.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
    req
}

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

/// The message of the attack: the fake model's tool syntax for a shell command (what ran
/// `id` as root on the host in issue 28).
fn bash_message(id: &str, task: Option<&str>) -> Value {
    let mut m = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": "tool:bash {\"command\":\"id\"}"}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

/// Every operation of the attack, on agent `echo` (and the built-in `conformance` agent's
/// list): `(what, method, uri, v1.0 header, body)`.
fn attacks(task: &str) -> Vec<(String, &'static str, String, bool, Option<Value>)> {
    let v03_message = json!({"messageId": "m03", "role": "user", "kind": "message",
        "parts": [{"kind": "text", "text": "tool:bash {\"command\":\"id\"}"}]});
    vec![
        ("JSON-RPC ListTasks".into(), "POST", "/a2a/echo".into(), true, Some(rpc("ListTasks", json!({})))),
        (
            "JSON-RPC ListTasks of another agent".into(),
            "POST",
            "/a2a/conformance".into(),
            true,
            Some(rpc("ListTasks", json!({}))),
        ),
        ("JSON-RPC GetTask".into(), "POST", "/a2a/echo".into(), true, Some(rpc("GetTask", json!({"id": task})))),
        ("JSON-RPC CancelTask".into(), "POST", "/a2a/echo".into(), true, Some(rpc("CancelTask", json!({"id": task})))),
        (
            "JSON-RPC SendMessage".into(),
            "POST",
            "/a2a/echo".into(),
            true,
            Some(rpc("SendMessage", json!({"message": bash_message("m1", None)}))),
        ),
        (
            "JSON-RPC SendMessage on the task".into(),
            "POST",
            "/a2a/echo/".into(),
            true,
            Some(rpc("SendMessage", json!({"message": bash_message("m2", Some(task))}))),
        ),
        (
            "JSON-RPC SendStreamingMessage".into(),
            "POST",
            "/a2a/echo".into(),
            true,
            Some(rpc("SendStreamingMessage", json!({"message": bash_message("m3", None)}))),
        ),
        (
            "JSON-RPC SubscribeToTask".into(),
            "POST",
            "/a2a/echo".into(),
            true,
            Some(rpc("SubscribeToTask", json!({"id": task}))),
        ),
        (
            "JSON-RPC v0.3 message/send".into(),
            "POST",
            "/a2a/echo".into(),
            false,
            Some(rpc("message/send", json!({"message": v03_message}))),
        ),
        (
            "JSON-RPC v0.3 tasks/get".into(),
            "POST",
            "/a2a/echo".into(),
            false,
            Some(rpc("tasks/get", json!({"id": task}))),
        ),
        ("REST ListTasks".into(), "GET", "/a2a/echo/tasks".into(), true, None),
        ("REST GetTask".into(), "GET", format!("/a2a/echo/tasks/{task}"), true, None),
        ("REST CancelTask".into(), "POST", format!("/a2a/echo/tasks/{task}:cancel"), true, Some(json!({}))),
        (
            "REST SendMessage".into(),
            "POST",
            "/a2a/echo/message:send".into(),
            true,
            Some(json!({"message": bash_message("m4", None)})),
        ),
        (
            "REST v0.3 message:send".into(),
            "POST",
            "/a2a/echo/v1/message:send".into(),
            false,
            Some(json!({"message": {"messageId": "m5", "role": "ROLE_USER", "content": [{"text": "tool:bash {}"}]}})),
        ),
        ("REST v0.3 tasks/get".into(), "GET", format!("/a2a/echo/v1/tasks/{task}"), false, None),
    ]
}

/// An environment key of a new self-hosted environment, as `POST /v1/environments/{id}/keys`
/// makes it.
async fn environment_key(gw: &Gateway) -> String {
    let mut spec = env_spec("executors");
    spec.config = EnvironmentConfig::SelfHosted;
    let env = gw.gw.coordinator.create_environment(spec).await.unwrap();
    let key = generate_environment_key();
    gw.gw.store.create_environment_key(&env.id, "executor", &key.hash).await.unwrap();
    key.secret
}

/// Every session and its last event: what any A2A operation that got through would change.
async fn footprint(gw: &Gateway) -> Vec<(String, u64, String)> {
    let page = PageRequest::first(100, Order::Asc);
    let sessions = gw.gw.coordinator.list_sessions(&SessionFilter::default(), &page).await.unwrap();
    sessions.items.iter().map(|s| (s.id.to_string(), s.last_seq, format!("{:?}", s.status))).collect()
}

/// A completed task made by a caller A2A serves (`key` presented from `peer`): its id.
async fn a_task(gw: &Gateway, peer: &str, key: Presented<'_>) -> String {
    let send =
        rpc("SendMessage", json!({"message": {"messageId": "m0", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}));
    let (status, _, body) = gw.call(request(peer, key, "POST", "/a2a/echo", true, Some(send))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    task["id"].as_str().unwrap().to_owned()
}

/// The attack: every operation with the environment key (as `x-api-key` and as a bearer
/// token) from another host is 403 `PERMISSION_DENIED` in a `google.rpc.Status` body that
/// names no task, and leaves every session as it was.
async fn environment_key_reaches_nothing(gw: &Gateway, task: &str) {
    let env_key = environment_key(gw).await;
    let before = footprint(gw).await;
    for presented in [Presented::Header(&env_key), Presented::Bearer(&env_key)] {
        for (what, method, uri, v1, body) in attacks(task) {
            let (status, headers, body) = gw.call(request(REMOTE, presented, method, &uri, v1, body)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{what} with {presented:?}: {body}");
            assert_eq!(body["error"]["status"], "PERMISSION_DENIED", "{what}: {body}");
            assert_eq!(body["error"]["code"], 403, "{what}: {body}");
            assert!(body["error"]["message"].as_str().unwrap().contains("environment key"), "{what}: {body}");
            assert!(!body.to_string().contains(task), "{what} shows nothing of the task: {body}");
            assert!(!headers.contains_key("www-authenticate"), "{what}: a 403 is no challenge to authenticate");
        }
    }
    assert_eq!(footprint(gw).await, before, "nothing was created, sent or canceled");
}

/// Invariant 31 with API keys configured: the environment key is refused everywhere; the
/// API key, from the same remote address, still lists the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_reaches_no_a2a_operation_on_a_gateway_with_api_keys() {
    let gw = common::gateway().await;
    let task = a_task(&gw, REMOTE, Presented::Header(&gw.key)).await;
    environment_key_reaches_nothing(&gw, &task).await;

    let list = rpc("ListTasks", json!({}));
    let (status, _, body) =
        gw.call(request(REMOTE, Presented::Header(&gw.key), "POST", "/a2a/echo", true, Some(list))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["tasks"][0]["id"], task.as_str(), "the API key is served: {body}");
    let (status, _, body) = gw
        .call(request(REMOTE, Presented::Bearer(&gw.key), "GET", &format!("/a2a/echo/tasks/{task}"), true, None))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], task.as_str());
    gw.gw.stop().await;
}

/// Invariant 31 without any API key, where issue 28 found the environment key accepted from
/// any address: refused everywhere. A local program is still served without a key; another
/// host without a key is still refused 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_reaches_no_a2a_operation_on_a_keyless_gateway() {
    let gw = common::keyless().await;
    let task = a_task(&gw, LOCAL, Presented::None).await;
    environment_key_reaches_nothing(&gw, &task).await;

    let (status, _, body) = gw.call(request(LOCAL, Presented::None, "GET", "/a2a/echo/tasks", true, None)).await;
    assert_eq!(status, StatusCode::OK, "a local program is served: {body}");
    assert_eq!(body["tasks"][0]["id"], task.as_str(), "{body}");
    let (status, _, body) = gw.call(request(REMOTE, Presented::None, "GET", "/a2a/echo/tasks", true, None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // Cards stay public, whoever asks.
    let env_key = environment_key(&gw).await;
    let card =
        request(REMOTE, Presented::Header(&env_key), "GET", "/a2a/echo/.well-known/agent-card.json", false, None);
    assert_eq!(gw.call(card).await.0, StatusCode::OK);
    gw.gw.stop().await;
}
