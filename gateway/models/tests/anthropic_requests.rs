//! What the Anthropic client puts on the wire: headers, body, URL, and what it never shows.

mod common;

use gateway_models::anthropic::{AnthropicClient, AnthropicConfig, Credential};
use gateway_models::conformance::{assistant, object, request, tool_result, user};
use gateway_models::stub::StubServer;
use gateway_models::{Block, ImageSource, Message, ModelClient, ModelError, ModelRequest, Role};
use serde_json::json;

#[tokio::test]
async fn an_api_key_goes_in_x_api_key() {
    let (client, stub) = common::stub_client().await;
    client.complete(&request(vec![user("hi")])).await.unwrap();
    let sent = &stub.requests()[0];
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(sent.header("x-api-key"), Some(common::API_KEY));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("accept"), Some("application/json"));
    assert_eq!(sent.header("anthropic-beta"), None);
}

#[tokio::test]
async fn a_bearer_token_goes_in_authorization_with_betas_and_version() {
    let stub = StubServer::start().await;
    let mut config = common::config(&stub, Credential::Bearer("oauth-token-xyz".into()));
    config.betas = vec!["oauth-2025-04-20".into(), "other-beta".into()];
    config.anthropic_version = "2099-01-01".into();
    let client = AnthropicClient::new(config).unwrap();
    common::stream(&client, &request(vec![user("hi")])).await.0.unwrap();
    let sent = &stub.requests()[0];
    assert_eq!(sent.header("authorization"), Some("Bearer oauth-token-xyz"));
    assert_eq!(sent.header("x-api-key"), None);
    assert_eq!(sent.header("anthropic-beta"), Some("oauth-2025-04-20,other-beta"));
    assert_eq!(sent.header("anthropic-version"), Some("2099-01-01"));
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn debug_output_never_shows_the_credential() {
    let stub = StubServer::start().await;
    for credential in [Credential::ApiKey(common::API_KEY.into()), Credential::Bearer(common::API_KEY.into())] {
        let config = common::config(&stub, credential.clone());
        let client = AnthropicClient::new(config.clone()).unwrap();
        for shown in [format!("{credential:?}"), format!("{config:?}"), format!("{client:?}"), format!("{client:#?}")] {
            assert!(!shown.contains("secret") && !shown.contains("sk-ant"), "the credential leaked: {shown}");
            assert!(shown.contains("redacted"), "{shown}");
        }
    }
}

#[tokio::test]
async fn the_body_has_the_messages_api_shape() {
    let (client, stub) = common::stub_client().await;
    let mut conversation = vec![
        image_and_text(),
        assistant(vec![
            Block::Text { text: "Let me look.".into() },
            Block::ToolUse { id: "toolu_1".into(), name: "bash".into(), input: object(json!({"command": "ls"})) },
        ]),
        tool_result("toolu_1", &["a.txt"]),
    ];
    if let Some(Block::ToolResult { is_error, .. }) = conversation[2].content.first_mut() {
        *is_error = true;
    }
    let request = request(conversation);
    common::stream(&client, &request).await.0.unwrap();
    client.complete(&request).await.unwrap();

    let expected = |stream: bool| {
        json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "text", "text": "what is this?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true,
                     "content": [{"type": "text", "text": "a.txt"}], "cache_control": {"type": "ephemeral"}}]}
            ],
            "tools": [
                {"name": "bash", "description": "Run a command",
                 "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
                {"name": "lookup", "description": "A custom tool", "input_schema": {"type": "object"},
                 "cache_control": {"type": "ephemeral"}}
            ],
            "stream": stream,
        })
    };
    let sent = stub.requests();
    assert_eq!(sent[0].body, expected(true));
    assert_eq!(sent[1].body, expected(false));
}

fn image_and_text() -> Message {
    Message {
        role: Role::User,
        content: vec![
            Block::Image {
                source: ImageSource::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() },
            },
            Block::Image { source: ImageSource::Url { url: "https://example.com/a.png".into() } },
            Block::Text { text: "what is this?".into() },
        ],
    }
}

#[tokio::test]
async fn absent_system_and_tools_are_left_out() {
    let (client, stub) = common::stub_client().await;
    let bare = ModelRequest {
        model: "m".into(),
        system: None,
        messages: vec![user("x")],
        tools: vec![],
        max_tokens: 5,
        thinking: None,
    };
    client.complete(&bare).await.unwrap();
    let empty_system = ModelRequest { system: Some(String::new()), ..bare };
    client.complete(&empty_system).await.unwrap();
    for sent in stub.requests() {
        let body = sent.body.as_object().unwrap();
        let mut keys: Vec<&str> = body.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["max_tokens", "messages", "model", "stream"]);
    }
}

#[tokio::test]
async fn a_base_url_path_prefix_is_kept() {
    let stub = StubServer::start().await;
    let config = common::config(&stub, Credential::ApiKey("k".into()));
    let config = AnthropicConfig { base_url: format!("{}/proxy/anthropic/", stub.base_url()), ..config };
    let client = AnthropicClient::new(config).unwrap();
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    // The stub serves only /v1/messages: the prefixed path proves the URL was joined right.
    assert!(matches!(error, ModelError::InvalidRequest { status: 404, .. }), "{error:?}");
    assert_eq!(stub.requests()[0].path, "/proxy/anthropic/v1/messages");
}

/// Extended thinking: the budget goes as `thinking`, and the model's reasoning goes back in
/// the assistant turn exactly as it came, with no cache breakpoint on it.
#[tokio::test]
async fn thinking_is_asked_for_and_sent_back_as_received() {
    let (client, stub) = common::stub_client().await;
    let thought = Block::Thinking { thinking: "Let me list.".into(), signature: "c2ln".into() };
    let mut conversation = vec![
        user("list"),
        assistant(vec![
            thought,
            Block::RedactedThinking { data: "EmwKAhgB".into() },
            Block::ToolUse { id: "toolu_1".into(), name: "bash".into(), input: object(json!({"command": "ls"})) },
        ]),
        tool_result("toolu_1", &["a.txt"]),
    ];
    let mut request = request(std::mem::take(&mut conversation));
    request.thinking = Some(2048);
    request.max_tokens = 4096;
    let _ = client.complete(&request).await;
    let sent = &stub.requests()[0].body;
    assert_eq!(sent["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    assert_eq!(
        sent["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "Let me list.", "signature": "c2ln"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
        ])
    );
}
