//! The stub as a third-party client sees it: the raw wire format.

use gateway_models::fake::FakeModel;
use gateway_models::stub::{Fault, StubServer};
use gateway_models::{ModelRequest, conformance};
use serde_json::{Value, json};

async fn post(stub: &StubServer, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", stub.base_url()))
        .json(&body)
        .send()
        .await
        .expect("the stub answers")
}

/// The `(event, data)` pairs of an event-stream body.
fn frames(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let (event, data) = frame.split_once('\n').expect("an event line and a data line");
            let event = event.strip_prefix("event: ").expect("event line").to_owned();
            let data = data.strip_prefix("data: ").expect("data line");
            (event, serde_json::from_str(data).expect("JSON data"))
        })
        .collect()
}

#[tokio::test]
async fn streamed_frames_follow_the_api_order() {
    let stub = StubServer::start().await;
    let body = json!({"model": "claude-x", "max_tokens": 100, "stream": true,
                      "messages": [{"role": "user", "content": "tool:Bash {\"command\":\"ls -la\"}"}]});
    let response = post(&stub, "/v1/messages?beta=true", body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let frames = frames(&response.text().await.unwrap());
    let names: Vec<&str> = frames.iter().map(|(event, _)| event.as_str()).collect();
    let deltas = names.iter().filter(|n| **n == "content_block_delta").count();
    assert!(deltas >= 2, "{names:?}");
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    for (event, data) in &frames {
        assert_eq!(data["type"], event.as_str());
    }
    assert_eq!(frames[0].1["message"]["model"], "claude-x");
    assert_eq!(frames[2].1["content_block"]["name"], "Bash");
    let input: String =
        frames[3..3 + deltas].iter().map(|(_, data)| data["delta"]["partial_json"].as_str().unwrap()).collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"command": "ls -la"}));
    assert_eq!(frames[frames.len() - 2].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(stub.requests()[0].query.as_deref(), Some("beta=true"));
}

#[tokio::test]
async fn plain_answers_have_the_message_shape_and_the_fake_usage() {
    let stub = StubServer::start().await;
    let body = json!({"model": "claude-x", "max_tokens": 100,
                      "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]});
    let response = post(&stub, "/v1/messages", body).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    let expected_usage = FakeModel::new()
        .respond(&ModelRequest {
            system: Some("sys".into()),
            ..conformance::request(vec![conformance::user("hi there")])
        })
        .usage;
    assert_eq!(
        message,
        json!({
            "id": "msg_stub_0001", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "echo: hi there"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": expected_usage.input_tokens, "output_tokens": expected_usage.output_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        })
    );
}

#[tokio::test]
async fn bad_requests_get_the_api_error_shape() {
    let stub = StubServer::start().await;
    let response = post(&stub, "/v1/messages", json!({"max_tokens": 1, "messages": []})).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["message"], "model: field required");
}

#[tokio::test]
async fn status_faults_carry_retry_headers() {
    let stub = StubServer::start().await;
    stub.push_fault(Fault::Status {
        status: 429,
        error_type: "rate_limit_error".into(),
        retry_after_secs: Some(2),
        retry_after_ms: Some(1500),
    });
    let body = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]});
    let response = post(&stub, "/v1/messages", body.clone()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(response.headers()["retry-after-ms"], "1500");
    assert_eq!(post(&stub, "/v1/messages", body).await.status(), 200, "a fault is consumed once");
}

#[tokio::test]
async fn token_counts_and_unknown_paths() {
    let stub = StubServer::start().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "12345678"}]});
    let counted: Value = post(&stub, "/v1/messages/count_tokens", body).await.json().await.unwrap();
    assert_eq!(counted, json!({"input_tokens": 2}));
    let response = post(&stub, "/v1/models", json!({})).await;
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "not_found_error");
    let paths: Vec<String> = stub.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/messages/count_tokens", "/v1/models"]);
}

#[tokio::test]
async fn stop_closes_the_port() {
    let stub = StubServer::start().await;
    let addr = stub.local_addr();
    stub.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

// ---- Chat Completions (`/v1/chat/completions`) ----

/// The JSON of each `data:` frame of a Chat Completions stream, and whether it ended with
/// `data: [DONE]`.
fn chunks(body: &str) -> (Vec<Value>, bool) {
    let mut frames: Vec<&str> = body.split("\n\n").filter(|frame| !frame.is_empty()).collect();
    let done = frames.last() == Some(&"data: [DONE]");
    if done {
        frames.pop();
    }
    let values = frames
        .into_iter()
        .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").expect("only data lines")).expect("JSON data"))
        .collect();
    (values, done)
}

#[tokio::test]
async fn chat_chunks_follow_openai_order_with_a_last_usage_chunk() {
    let stub = StubServer::start().await;
    let body = json!({"model": "gpt-x", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "tool:Bash {\"command\":\"ls -la\"}"}]});
    let response = post(&stub, "/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (chunks, done) = chunks(&response.text().await.unwrap());
    assert!(done, "the stream ends with data: [DONE]");
    let (usage, choices) = chunks.split_last().unwrap();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(
            (&chunk["id"], &chunk["model"], &chunk["created"]),
            (&chunks[0]["id"], &json!("gpt-x"), &chunks[0]["created"])
        );
    }
    assert_eq!(choices[0]["choices"][0]["delta"], json!({"role": "assistant", "content": "", "refusal": null}));
    assert_eq!(choices[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "Bash");
    let arguments: String = choices[2..choices.len() - 1]
        .iter()
        .map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap())
        .collect();
    assert!(choices.len() - 3 >= 2, "arguments come in two or more chunks");
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"command": "ls -la"}));
    assert_eq!(choices.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
    assert!(choices.iter().all(|c| c["usage"].is_null() && c.as_object().unwrap().contains_key("usage")));
    assert_eq!(usage["choices"], json!([]));
    let prompt = usage["usage"]["prompt_tokens"].as_u64().unwrap();
    let completion = usage["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(usage["usage"]["total_tokens"].as_u64(), Some(prompt + completion));
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test]
async fn a_plain_chat_completion_has_the_openai_shape() {
    let stub = StubServer::start().await;
    let body = json!({"model": "gpt-x", "messages": [{"role": "system", "content": "sys"},
                      {"role": "user", "content": [{"type": "text", "text": "hi there"}]}]});
    let response = post(&stub, "/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200);
    let mut completion: Value = response.json().await.unwrap();
    assert!(completion["created"].as_u64().unwrap() > 1_700_000_000);
    completion["created"] = json!(0);
    let expected_usage = FakeModel::new()
        .respond(&ModelRequest {
            system: Some("sys".into()),
            ..conformance::request(vec![conformance::user("hi there")])
        })
        .usage;
    let (prompt, output) = (expected_usage.input_tokens, expected_usage.output_tokens);
    assert_eq!(
        completion,
        json!({
            "id": "chatcmpl-stub0001", "object": "chat.completion", "created": 0, "model": "gpt-x",
            "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "echo: hi there", "refusal": null, "annotations": []}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
            "system_fingerprint": null,
        })
    );
}

#[tokio::test]
async fn chat_errors_have_the_openai_shape() {
    let stub = StubServer::start().await;
    let bad = post(&stub, "/v1/chat/completions", json!({"model": "m", "messages": []})).await;
    assert_eq!(bad.status(), 400);
    let error: Value = bad.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"].as_str().unwrap().contains("empty array"), "{error}");
    assert!(error["error"].as_object().unwrap().contains_key("code"));

    stub.push_fault(Fault::Status {
        status: 429,
        error_type: "rate_limit_exceeded".into(),
        retry_after_secs: Some(2),
        retry_after_ms: None,
    });
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    let limited = post(&stub, "/v1/chat/completions", body.clone()).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    let error: Value = limited.json().await.unwrap();
    assert_eq!(
        error,
        json!({"error": {"message": "stub fault: rate_limit_exceeded", "type": "rate_limit_exceeded", "param": null, "code": null}})
    );

    stub.push_fault(Fault::ErrorEvent { error_type: "server_error".into(), after_events: 1 });
    let streamed =
        post(&stub, "/v1/chat/completions", json!({"stream": true, "model": "m", "messages": body["messages"]})).await;
    let (chunks, done) = chunks(&streamed.text().await.unwrap());
    assert!(!done);
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[1]["error"]["type"], "server_error");
}
