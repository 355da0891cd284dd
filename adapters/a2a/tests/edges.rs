//! Attacks on the A2A edges (issue 13 §6, §9): each test sends what a hostile or unusual
//! client sends and asserts the bytes and statuses on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{Gateway, gateway};
use futures::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_each_bindings_error_shape() {
    let gw = gateway().await;
    let mut big = br#"{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"text":""#.to_vec();
    big.resize(gateway_a2a::BODY_LIMIT + (1 << 20), b'a');
    big.extend(br#""}}}"#);

    let (status, headers, body) = gw.post_rpc("echo", big.clone()).await;
    assert_eq!(status, StatusCode::OK, "a JSON-RPC error is an ordinary response");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        text(&body),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request too large: the body is larger than 8 MiB"}}"#
    );

    let req =
        Request::post("/a2a/echo/message:send").header("content-type", "application/json").header("a2a-version", "1.0");
    let (status, _, body) = gw.raw(req, big.clone()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        text(&body),
        r#"{"error":{"code":413,"details":[],"message":"request too large: the body is larger than 8 MiB","status":"INVALID_ARGUMENT"}}"#
    );

    let req = Request::post("/a2a/echo/v1/message:send").header("content-type", "application/json");
    let (status, _, body) = gw.raw(req, big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(text(&body), r#"{"code":-32600,"message":"request too large: the body is larger than 8 MiB"}"#);
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_many_small_values_is_refused_before_it_is_parsed() {
    let gw = gateway().await;
    // 2 bytes a value: under the byte limit, but ~32 bytes a node once parsed.
    let zeros = vec!["0"; gateway_a2a::MAX_VALUES + 1].join(",");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"SendMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":[{zeros}]}}]}}}}}}"#
    );
    let (status, _, answer) = gw.post_rpc("echo", body).await;
    assert_eq!(status, StatusCode::OK);
    let expected = format!(
        r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"request too large: the body holds more than {} JSON values"}}}}"#,
        gateway_a2a::MAX_VALUES
    );
    assert_eq!(text(&answer), expected);
    let listed = gw.rpc("ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "nothing was admitted: {listed}");
    gw.gw.stop().await;
}

const BIG_ID: &str = "1234567890123456789012345678901234567890";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_40_digit_id_comes_back_byte_for_byte() {
    let gw = gateway().await;
    let body = format!(r#"{{"jsonrpc":"2.0","id":{BIG_ID},"method":"GetTask","params":{{"id":"task_nope"}}}}"#);
    let (status, _, answer) = gw.post_rpc("echo", body).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text(&answer).starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{BIG_ID},"error":{{"code":-32001,"#)),
        "{}",
        text(&answer)
    );

    // A result, and each frame of a stream, echo it too; so do other exotic ids.
    for id in [BIG_ID, "1e400", r#""\u00e9""#, "-0.10"] {
        let send = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"SendMessage","params":{send}}}"#);
        let (_, _, answer) = gw.post_rpc("echo", body).await;
        assert!(
            text(&answer).starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"task":"#)),
            "{}",
            text(&answer)
        );
    }
    let send = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let body = format!(r#"{{"jsonrpc":"2.0","id":{BIG_ID},"method":"SendStreamingMessage","params":{send}}}"#);
    let (status, headers, stream) = gw.post_rpc("echo", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    let frames: Vec<&str> = text(&stream).split("\n\n").filter(|f| f.starts_with("data: ")).collect();
    assert!(frames.len() >= 2, "{}", text(&stream));
    for f in frames {
        assert!(f.starts_with(&format!(r#"data: {{"jsonrpc":"2.0","id":{BIG_ID},"result":"#)), "{f}");
    }
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_is_not_answered_nor_acted_on() {
    let gw = gateway().await;
    let send = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    for method in ["SendMessage", "ListTasks", "NoSuchMethod"] {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": send});
        let (status, _, answer) = gw.post_rpc("echo", body.to_string()).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{method}");
        assert!(answer.is_empty(), "{method}: {}", text(&answer));
    }
    // `"id": null` is a request (with a discouraged id), answered.
    let body = json!({"jsonrpc": "2.0", "id": null, "method": "ListTasks", "params": {}});
    let (status, _, answer) = gw.post_rpc("echo", body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text(&answer),
        r#"{"jsonrpc":"2.0","id":null,"result":{"nextPageToken":"","pageSize":50,"tasks":[],"totalSize":0}}"#,
        "no task was sent"
    );
    // Without a method it is no notification but an invalid request.
    let (_, _, answer) = gw.post_rpc("echo", r#"{"jsonrpc":"2.0"}"#).await;
    assert_eq!(json_of(&answer)["error"]["code"], -32600);
    gw.gw.stop().await;
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_agent_answers_every_operation_alike() {
    let gw = gateway().await;
    let send = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    for (method, params) in
        [("SendMessage", send.clone()), ("ListTasks", json!({})), ("GetTask", json!({"id": "task_x"}))]
    {
        let answer = gw.rpc_to("nobody", method, params).await;
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
        assert_eq!(answer["error"]["message"], r#"method not found: no agent named "nobody" is published"#, "{method}");
    }
    for (method, path, body) in [("GET", "tasks", String::new()), ("POST", "message:send", send.to_string())] {
        let req = Request::builder().method(method).uri(format!("/a2a/nobody/{path}")).header("a2a-version", "1.0");
        let (status, _, answer) = gw.raw(req, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {}", text(&answer));
        assert_eq!(json_of(&answer)["error"]["status"], "UNIMPLEMENTED");
    }
    gw.gw.stop().await;
}

/// A blocking send to the conformance agent with the TCK's messageId prefix.
async fn tck_send(gw: &Gateway, prefix: &str, task_id: Option<&str>) -> Value {
    let mut message =
        json!({"messageId": format!("{prefix}-{}", rand_suffix()), "role": "ROLE_USER", "parts": [{"text": "TCK"}]});
    if let Some(t) = task_id {
        message["taskId"] = json!(t);
    }
    let answer = gw.rpc_to("conformance", "SendMessage", json!({"message": message})).await;
    answer["result"]["task"].clone()
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_on_an_input_required_task_follow_their_own_prefix() {
    let gw = gateway().await;
    let task = tck_send(&gw, "tck-input-required", None).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    let id = task["id"].as_str().unwrap();
    let again = tck_send(&gw, "tck-input-required", Some(id)).await;
    assert_eq!(again["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "parked again: {again}");
    let done = tck_send(&gw, "tck-complete-task", Some(id)).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["status"]["message"]["parts"][0]["text"], "Hello from TCK", "{done}");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_to_an_input_required_task_stays_open_until_it_settles_again() {
    let gw = gateway().await;
    let task = tck_send(&gw, "tck-input-required", None).await;
    let id = task["id"].as_str().unwrap().to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": id}});
    let resp = gw.router.clone().oneshot(gw.rpc_request("conformance", body.to_string())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut frames = resp.into_body().into_data_stream();
    let first = frames.next().await.unwrap().unwrap();
    assert!(text(&first).contains("TASK_STATE_INPUT_REQUIRED"), "{}", text(&first));
    let quiet = tokio::time::timeout(Duration::from_millis(800), frames.next()).await;
    assert!(quiet.is_err(), "the stream stays open: {:?}", quiet.map(|f| f.map(|b| b.map(|b| text(&b).to_owned()))));

    let done = tck_send(&gw, "tck-complete-task", Some(&id)).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut seen = String::new();
        while let Some(f) = frames.next().await {
            seen.push_str(text(&f.unwrap()));
        }
        seen
    })
    .await
    .expect("the stream closes once the task completes");
    assert!(rest.contains("TASK_STATE_COMPLETED"), "{rest}");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v03_part_without_a_kind_is_invalid_params() {
    let gw = gateway().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
        "params": {"message": {"kind": "message", "messageId": "m", "role": "user", "parts": [{"text": "hi"}]}}});
    let (_, _, answer) = gw.post_rpc("echo", body.to_string()).await;
    assert_eq!(
        text(&answer),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: message.parts[0] needs a kind (\"text\", \"file\" or \"data\") in A2A 0.3"}}"#
    );
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_asks_for_the_extended_card_get_authenticated_extended_card_not_configured() {
    let gw = gateway().await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "agent/getAuthenticatedExtendedCard"});
    let (_, _, answer) = gw.post_rpc("echo", body.to_string()).await;
    assert_eq!(json_of(&answer)["error"]["code"], -32007, "{}", text(&answer));
    let (status, _, answer) = gw.raw(Request::get("/a2a/echo/v1/card"), Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json_of(&answer)["code"], -32007);

    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_rest_cancel_of_a_completed_task_is_409() {
    let gw = gateway().await;
    let task = tck_send(&gw, "tck-complete-task", None).await;
    let id = task["id"].as_str().unwrap();
    let (status, _, answer) =
        gw.raw(Request::post(format!("/a2a/conformance/v1/tasks/{id}:cancel")), Body::empty()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{}", text(&answer));
    assert_eq!(json_of(&answer)["code"], -32002);

    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_rest_push_configs_take_the_a2a_sdk_03_request_body() {
    let gw = gateway().await;
    let task = tck_send(&gw, "tck-input-required", None).await;
    let id = task["id"].as_str().unwrap();
    let body = json!({"parent": format!("tasks/{id}"), "configId": "c1", "config": {
        "name": format!("tasks/{id}/pushNotificationConfigs/c1"),
        "pushNotificationConfig": {"url": "https://example.com/hook", "token": "t"}}});
    let req = Request::post(format!("/a2a/conformance/v1/tasks/{id}/pushNotificationConfigs"))
        .header("content-type", "application/json");
    let (status, _, answer) = gw.raw(req, body.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{}", text(&answer));
    let created = json_of(&answer);
    assert_eq!(created["name"], format!("tasks/{id}/pushNotificationConfigs/c1"), "{created}");
    assert_eq!(created["pushNotificationConfig"]["url"], "https://example.com/hook", "{created}");
    gw.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_say_when_they_last_changed() {
    let gw = gateway().await;
    for path in ["/.well-known/agent-card.json", "/a2a/conformance/.well-known/agent-card.json"] {
        let (status, headers, _) = gw.raw(Request::get(path), Body::empty()).await;
        assert_eq!(status, StatusCode::OK);
        let modified = headers["last-modified"].to_str().unwrap();
        assert!(modified.ends_with(" GMT") && modified.len() == 29, "an IMF-fixdate: {modified}");
    }
    gw.gw.stop().await;
}
