//! Helpers shared by the test files: an Anthropic or OpenAI client pointed at a fresh stub.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::Mutex;
use std::time::Duration;

use gateway_models::anthropic::{AnthropicClient, AnthropicConfig, Credential};
use gateway_models::openai::{OpenAiClient, OpenAiConfig};
use gateway_models::stub::StubServer;
use gateway_models::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};

pub const API_KEY: &str = "sk-ant-test-0123456789-secret";

/// A config for `stub` with short backoffs, so retry tests stay fast.
pub fn config(stub: &StubServer, credential: Credential) -> AnthropicConfig {
    let mut config = AnthropicConfig::new(stub.base_url(), credential);
    config.patience.retry_base = Duration::from_millis(10);
    config.patience.retry_max = Duration::from_millis(40);
    config.patience.request_timeout = Duration::from_secs(10);
    config.patience.stream_idle_timeout = Duration::from_secs(10);
    config
}

/// A fresh stub and a client for it authenticating with [`API_KEY`].
pub async fn stub_client() -> (AnthropicClient, StubServer) {
    let stub = StubServer::start().await;
    let client = AnthropicClient::new(config(&stub, Credential::ApiKey(API_KEY.into()))).expect("client for the stub");
    (client, stub)
}

pub const OPENAI_KEY: &str = "sk-proj-test-0123456789-secret";

/// An OpenAI config for `stub` (base URL with `/v1`, as the SDKs take it) with short
/// backoffs, so retry tests stay fast.
pub fn openai_config(stub: &StubServer, api_key: Option<&str>) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(format!("{}/v1", stub.base_url()), api_key.map(str::to_owned));
    config.patience.retry_base = Duration::from_millis(10);
    config.patience.retry_max = Duration::from_millis(40);
    config.patience.request_timeout = Duration::from_secs(10);
    config.patience.stream_idle_timeout = Duration::from_secs(10);
    config
}

/// A fresh stub and an OpenAI client for it authenticating with [`OPENAI_KEY`].
pub async fn openai_client() -> (OpenAiClient, StubServer) {
    let stub = StubServer::start().await;
    let client = OpenAiClient::new(openai_config(&stub, Some(OPENAI_KEY))).expect("client for the stub");
    (client, stub)
}

/// A hand-written Chat Completions event stream: each value as a `data:` frame, then
/// `data: [DONE]` if `done`.
pub fn chunk_stream(chunks: &[serde_json::Value], done: bool) -> gateway_models::stub::Fault {
    let mut body: String = chunks.iter().map(|chunk| format!("data: {chunk}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    gateway_models::stub::Fault::Raw {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream; charset=utf-8".into())],
        body,
    }
}

/// A `chat.completion.chunk` with one choice.
pub fn chunk(delta: serde_json::Value, finish_reason: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

/// Streams `request`, returning the result and every event reported.
pub async fn stream(
    client: &dyn ModelClient,
    request: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
    let events = Mutex::new(Vec::new());
    let result = client.stream(request, &|event| events.lock().expect("events lock").push(event)).await;
    (result, events.into_inner().expect("events lock"))
}
