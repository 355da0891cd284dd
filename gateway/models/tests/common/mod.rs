//! Helpers shared by the test files: an Anthropic client pointed at a fresh stub.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::Mutex;
use std::time::Duration;

use gateway_models::anthropic::{AnthropicClient, AnthropicConfig, Credential};
use gateway_models::stub::StubServer;
use gateway_models::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};

pub const API_KEY: &str = "sk-ant-test-0123456789-secret";

/// A config for `stub` with short backoffs, so retry tests stay fast.
pub fn config(stub: &StubServer, credential: Credential) -> AnthropicConfig {
    let mut config = AnthropicConfig::new(stub.base_url(), credential);
    config.retry_base = Duration::from_millis(10);
    config.retry_max = Duration::from_millis(40);
    config.request_timeout = Duration::from_secs(10);
    config.stream_idle_timeout = Duration::from_secs(10);
    config
}

/// A fresh stub and a client for it authenticating with [`API_KEY`].
pub async fn stub_client() -> (AnthropicClient, StubServer) {
    let stub = StubServer::start().await;
    let client = AnthropicClient::new(config(&stub, Credential::ApiKey(API_KEY.into()))).expect("client for the stub");
    (client, stub)
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
