//! The A2A router in process: real HTTP requests (`tower::ServiceExt::oneshot`) against the
//! real router, on the shipped assembly (`TestGateway`: a SQLite store, the Coordinator and
//! Workers running the scripted backend).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{gateway, gateway_with};
use gateway_runtime::AdmissionLimits;
use serde_json::{Value, json};

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
    gw.gw.stop().await;
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
    gw.gw.stop().await;
}

fn send(text: &str) -> Value {
    json!({"message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// The `google.rpc.RetryInfo` of an overload answer's v1.0 details.
fn retry_delay(details: &Value) -> Option<&str> {
    details.as_array()?.iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")?["retryDelay"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_past_its_deadline_answers_with_the_task_as_it_stands() {
    let gw = gateway_with(None, AdmissionLimits::default(), Duration::from_millis(300)).await;
    let asked = std::time::Instant::now();
    let sent = gw.rpc("SendMessage", send("slow")).await;
    assert!(asked.elapsed() < Duration::from_secs(5), "the deadline holds: {:?}", asked.elapsed());
    let state = sent["result"]["task"]["status"]["state"].as_str().unwrap_or_default().to_owned();
    assert!(matches!(state.as_str(), "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"), "not final yet: {sent}");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queued_runs_bound_both_bindings_answer_503_with_a_retry_hint() {
    let limits = AdmissionLimits { max_queued_runs: 1, retry_after: Duration::from_secs(2), ..Default::default() };
    let gw = gateway_with(None, limits, Duration::from_millis(100)).await;
    gw.rpc("SendMessage", send("first")).await;
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;

    let (status, headers, body) = gw.rpc_raw("SendMessage", send("second")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(body["id"], 1, "the JSON-RPC envelope answers the request: {body}");
    assert_eq!(body["error"]["code"], -32603);
    assert!(body["error"]["message"].as_str().unwrap().contains("busy"), "{body}");
    assert_eq!(retry_delay(&body["error"]["data"]), Some("2s"), "{body}");

    let req = Request::post("/a2a/echo/message:send")
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header("x-api-key", &gw.key)
        .body(Body::from(send("third").to_string()))
        .unwrap();
    let (status, headers, body) = gw.call(req).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(body["error"]["status"], "UNAVAILABLE", "a google.rpc.Status: {body}");
    assert_eq!(retry_delay(&body["error"]["details"]), Some("2s"), "{body}");

    let listed = gw.rpc("ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"].as_array().map(Vec::len), Some(1), "only the admitted task exists: {listed}");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_in_flight_bound_is_refused_while_a_blocking_send_waits() {
    let limits = AdmissionLimits { max_requests: 1, ..Default::default() };
    let gw = Arc::new(gateway_with(None, limits, Duration::from_secs(2)).await);
    let waiting = tokio::spawn({
        let gw = Arc::clone(&gw);
        async move { gw.rpc("SendMessage", send("held")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // the send holds the place first
    let refused = async {
        loop {
            let (status, headers, body) = gw.rpc_raw("ListTasks", json!({})).await;
            if status == StatusCode::SERVICE_UNAVAILABLE {
                return (headers, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (headers, body) = tokio::time::timeout(Duration::from_secs(2), refused).await.expect("refused while one waits");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(body["id"], Value::Null, "refused before the body was read: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("requests are in flight"), "{body}");
    let held = waiting.await.unwrap();
    assert!(held["result"]["task"]["id"].is_string(), "the accepted send still answers: {held}");
    let listed = gw.rpc("ListTasks", json!({})).await;
    assert!(listed["result"]["tasks"].is_array(), "admitted again once the place is free: {listed}");
    Arc::try_unwrap(gw).ok().expect("the only reference").gw.stop().await;
}
