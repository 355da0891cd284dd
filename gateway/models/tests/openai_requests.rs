//! What the OpenAI client puts on the wire: headers, body, URL, and what it never shows.

mod common;

use gateway_models::conformance::{assistant, object, request, user};
use gateway_models::openai::{OpenAiClient, OpenAiConfig};
use gateway_models::stub::StubServer;
use gateway_models::{Block, ImageSource, Message, ModelClient, ModelError, ModelRequest, Role, ToolResultContent};
use serde_json::json;

#[tokio::test]
async fn an_api_key_goes_in_authorization_as_a_bearer() {
    let (client, stub) = common::openai_client().await;
    client.complete(&request(vec![user("hi")])).await.unwrap();
    common::stream(&client, &request(vec![user("hi")])).await.0.unwrap();
    let sent = stub.requests();
    for (sent, accept) in sent.iter().zip(["application/json", "text/event-stream"]) {
        assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/chat/completions"));
        assert_eq!(sent.header("authorization"), Some(format!("Bearer {}", common::OPENAI_KEY).as_str()));
        assert_eq!(sent.header("content-type"), Some("application/json"));
        assert_eq!(sent.header("accept"), Some(accept));
        assert_eq!(sent.header("x-api-key"), None);
    }
}

#[tokio::test]
async fn no_key_sends_no_authorization() {
    let stub = StubServer::start().await;
    for key in [None, Some("")] {
        let client = OpenAiClient::new(common::openai_config(&stub, key)).unwrap();
        client.complete(&request(vec![user("local")])).await.unwrap();
    }
    for sent in stub.requests() {
        assert_eq!(sent.header("authorization"), None, "{:?}", sent.headers);
    }
}

#[tokio::test]
async fn debug_output_never_shows_the_key() {
    let stub = StubServer::start().await;
    let config = common::openai_config(&stub, Some(common::OPENAI_KEY));
    let client = OpenAiClient::new(config.clone()).unwrap();
    for shown in [format!("{config:?}"), format!("{client:?}"), format!("{client:#?}")] {
        assert!(!shown.contains("secret") && !shown.contains("sk-proj"), "the key leaked: {shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
    let keyless = format!("{:?}", common::openai_config(&stub, None));
    assert!(keyless.contains("api_key: None"), "{keyless}");
}

/// A conversation using every block kind: images, text, reasoning, a tool call and its
/// (failed) result next to the user's next words.
fn everything() -> Vec<Message> {
    vec![
        Message {
            role: Role::User,
            content: vec![
                Block::Image {
                    source: ImageSource::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() },
                },
                Block::Image { source: ImageSource::Url { url: "https://example.com/a.png".into() } },
                Block::Text { text: "what is this?".into() },
            ],
        },
        assistant(vec![
            Block::Thinking { thinking: "Let me list.".into(), signature: "c2ln".into() },
            Block::RedactedThinking { data: "EmwK".into() },
            Block::Text { text: "Let me look.".into() },
            Block::ToolUse { id: "call_1".into(), name: "bash".into(), input: object(json!({"command": "ls"})) },
            Block::Text { text: "And more.".into() },
            Block::ToolUse { id: "call_2".into(), name: "lookup".into(), input: object(json!({})) },
        ]),
        Message {
            role: Role::User,
            content: vec![
                Block::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: vec![
                        ToolResultContent::Text { text: "a.txt\n".into() },
                        ToolResultContent::Text { text: "b.txt".into() },
                    ],
                    is_error: false,
                },
                Block::ToolResult {
                    tool_use_id: "call_2".into(),
                    content: vec![ToolResultContent::Text { text: "no such thing".into() }],
                    is_error: true,
                },
                Block::Text { text: "thanks".into() },
            ],
        },
        assistant(vec![Block::ToolUse {
            id: "call_3".into(),
            name: "bash".into(),
            input: object(json!({"command": "pwd"})),
        }]),
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "call_3".into(),
                content: vec![ToolResultContent::Text { text: "/".into() }],
                is_error: false,
            }],
        },
    ]
}

#[tokio::test]
async fn the_body_has_the_chat_completions_shape() {
    let (client, stub) = common::openai_client().await;
    let mut request = request(everything());
    request.thinking = Some(2048); // ignored by this provider
    common::stream(&client, &request).await.0.unwrap();
    client.complete(&request).await.unwrap();

    let expected = |stream: bool| {
        let mut body = json!({
            "model": "claude-test",
            "max_completion_tokens": 1024,
            "stream": stream,
            "messages": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "text", "text": "what is this?"}]},
                {"role": "assistant", "content": "Let me look.\n\nAnd more.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
                {"role": "tool", "tool_call_id": "call_2", "content": "[tool error] no such thing"},
                {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"pwd\"}"}}]},
                {"role": "tool", "tool_call_id": "call_3", "content": "/"}
            ],
            "tools": [
                {"type": "function", "function": {"name": "bash", "description": "Run a command",
                 "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "lookup", "description": "A custom tool",
                 "parameters": {"type": "object"}}}
            ],
        });
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    };
    let sent = stub.requests();
    assert_eq!(sent[0].body, expected(true));
    assert_eq!(sent[1].body, expected(false));
}

#[tokio::test]
async fn absent_system_and_tools_are_left_out() {
    let (client, stub) = common::openai_client().await;
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
        assert_eq!(keys, ["max_completion_tokens", "messages", "model", "stream"]);
        assert_eq!(sent.body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "x"}]}]));
    }
}

#[tokio::test]
async fn a_base_url_path_prefix_is_kept() {
    let stub = StubServer::start().await;
    let config =
        OpenAiConfig { base_url: format!("{}/proxy/v1/", stub.base_url()), ..common::openai_config(&stub, None) };
    let client = OpenAiClient::new(config).unwrap();
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    // The stub serves only /v1/chat/completions: the prefixed path proves the URL was joined right.
    assert!(matches!(error, ModelError::InvalidRequest { status: 404, .. }), "{error:?}");
    assert_eq!(stub.requests()[0].path, "/proxy/v1/chat/completions");
}

#[tokio::test]
async fn a_tool_loop_round_trips_through_the_stub() {
    // The stub checks what OpenAI checks: every call answered by a tool message, in place.
    let (client, _stub) = common::openai_client().await;
    let first = client.complete(&request(vec![user(r#"tool:bash {"command":"ls"}"#)])).await.unwrap();
    let [Block::ToolUse { id, .. }] = &first.content[..] else { panic!("{first:?}") };
    let failed = Message {
        role: Role::User,
        content: vec![Block::ToolResult {
            tool_use_id: id.clone(),
            content: vec![ToolResultContent::Text { text: "permission denied".into() }],
            is_error: true,
        }],
    };
    let conversation = vec![user(r#"tool:bash {"command":"ls"}"#), assistant(first.content.clone()), failed];
    let done = client.complete(&request(conversation)).await.unwrap();
    // The error marker travelled as a prefix and came back as the flag: the fake quotes the text only.
    assert_eq!(done.content, vec![Block::Text { text: "done: permission denied".into() }]);
}
