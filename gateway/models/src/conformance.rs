#![allow(clippy::unwrap_used)] // test support: a failed expectation should abort the test loudly
//! The [`ModelClient`] conformance suite: what a caller may rely on from any model client that
//! follows the fake model's script (feature `stub`).
//!
//! Each scenario takes a client; [`model_conformance_suite!`](crate::model_conformance_suite)
//! instantiates all of them as tests for a setup function. This crate runs the suite on
//! [`FakeModel`](crate::fake::FakeModel) directly, and on
//! [`AnthropicClient`](crate::anthropic::AnthropicClient) and
//! [`OpenAiClient`](crate::openai::OpenAiClient) talking to the
//! [`StubServer`](crate::stub::StubServer), which proves each client and the stub carry every
//! behaviour over the real wire format unchanged.

use std::sync::Mutex;

use serde_json::json;

use crate::{
    Block, JsonObject, Message, ModelClient, ModelError, ModelRequest, ModelResponse, Role, StopReason, StreamEvent,
    ToolDefinition, ToolResultContent,
};

/// Instantiates every conformance scenario as a `#[tokio::test]`.
///
/// `$setup` is an async function returning `(client, guard)`: the client under test and
/// whatever must live as long as the test (a stub server, or `()`).
#[macro_export]
macro_rules! model_conformance_suite {
    ($setup:path) => {
        $crate::model_conformance_suite!(@each $setup;
            echo_complete,
            echo_stream_reports_text_in_deltas,
            stream_splits_multibyte_text_on_char_boundaries,
            echo_reads_the_most_recent_user_text,
            tool_command_calls_the_tool,
            tool_result_gets_a_done_reply,
            done_quotes_at_most_200_chars,
            custom_command_behaves_like_tool,
            repeat_calls_the_tool_again_after_results,
            invalid_json_input_is_reported_as_text,
            responses_are_deterministic
        );
    };
    (@each $setup:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let (client, _guard) = $setup().await;
                $crate::conformance::$name(&client).await;
            }
        )*
    };
}

// ---- fixtures ----

pub fn user(text: &str) -> Message {
    Message { role: Role::User, content: vec![Block::Text { text: text.to_owned() }] }
}

pub fn assistant(content: Vec<Block>) -> Message {
    Message { role: Role::Assistant, content }
}

/// A user message answering tool call `id` with `parts` of text.
pub fn tool_result(id: &str, parts: &[&str]) -> Message {
    let content = parts.iter().map(|text| ToolResultContent::Text { text: (*text).to_owned() }).collect();
    Message {
        role: Role::User,
        content: vec![Block::ToolResult { tool_use_id: id.to_owned(), content, is_error: false }],
    }
}

pub fn object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// A request with a system prompt and two tools, as the gateway sends them.
pub fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "claude-test".into(),
        system: Some("You are a test.".into()),
        messages,
        tools: vec![
            ToolDefinition {
                name: "bash".into(),
                description: "Run a command".into(),
                input_schema: object(json!({"type": "object", "properties": {"command": {"type": "string"}}})),
            },
            ToolDefinition {
                name: "lookup".into(),
                description: "A custom tool".into(),
                input_schema: object(json!({"type": "object"})),
            },
        ],
        max_tokens: 1024,
        thinking: None,
    }
}

/// Streams `request`, returning the result and every event reported.
pub async fn stream(
    client: &dyn ModelClient,
    request: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
    let events = Mutex::new(Vec::new());
    let result = client.stream(request, &|event| events.lock().unwrap().push(event)).await;
    (result, events.into_inner().unwrap())
}

/// Checks that `events` announce and spell out exactly the text blocks of `response`, and
/// returns how many deltas each text block got.
pub fn assert_events_spell_the_text(events: &[StreamEvent], response: &ModelResponse) -> Vec<usize> {
    let mut texts: Vec<(usize, String, usize)> = Vec::new();
    for event in events {
        match event {
            StreamEvent::TextStart { index } => {
                assert!(texts.iter().all(|(i, _, _)| i != index), "block {index} started twice: {events:?}");
                texts.push((*index, String::new(), 0));
            }
            StreamEvent::TextDelta { index, text } => {
                let Some((_, whole, deltas)) = texts.iter_mut().find(|(i, _, _)| i == index) else {
                    panic!("delta for block {index} before its TextStart: {events:?}");
                };
                whole.push_str(text);
                *deltas += 1;
            }
            // Reasoning is not the response's text.
            StreamEvent::ThinkingStart { .. } | StreamEvent::ThinkingDelta { .. } => {}
        }
    }
    let expected: Vec<(usize, &str)> = response
        .content
        .iter()
        .enumerate()
        .filter_map(|(i, block)| match block {
            Block::Text { text } => Some((i, text.as_str())),
            _ => None,
        })
        .collect();
    let seen: Vec<(usize, &str)> = texts.iter().map(|(i, text, _)| (*i, text.as_str())).collect();
    assert_eq!(seen, expected, "the streamed text differs from the response's text blocks");
    texts.iter().map(|(_, _, deltas)| *deltas).collect()
}

fn only_text(response: &ModelResponse) -> &str {
    match &response.content[..] {
        [Block::Text { text }] => text,
        other => panic!("expected one text block, got {other:?}"),
    }
}

fn only_tool_use(response: &ModelResponse) -> (&str, &str, &JsonObject) {
    match &response.content[..] {
        [Block::ToolUse { id, name, input }] => (id, name, input),
        other => panic!("expected one tool_use block, got {other:?}"),
    }
}

/// Completes and streams `request`, checks both agree, and returns the response. The second
/// asks what the first did: a client with a prompt cache reads what the first wrote, so the
/// split of input tokens between fresh and cached may differ, never their sum.
async fn both_ways(client: &dyn ModelClient, request: &ModelRequest) -> ModelResponse {
    let completed = client.complete(request).await.unwrap();
    let (streamed, events) = stream(client, request).await;
    let streamed = streamed.unwrap();
    assert_same_answer(&streamed, &completed, "stream() and complete() disagree");
    assert_events_spell_the_text(&events, &streamed);
    completed
}

/// Two answers to the same request agree: content, stop reason, output, and the request's
/// size in input tokens (how much of it a prompt cache served may differ).
fn assert_same_answer(a: &ModelResponse, b: &ModelResponse, what: &str) {
    let input = |u: &crate::Usage| u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
    assert_eq!(input(&a.usage), input(&b.usage), "{what}: the requests' sizes differ");
    let same_split = ModelResponse { usage: b.usage.clone(), ..a.clone() };
    assert_eq!(&same_split, b, "{what}");
}

// ---- scenarios ----

pub async fn echo_complete(client: &dyn ModelClient) {
    let response = client.complete(&request(vec![user("hello there")])).await.unwrap();
    assert_eq!(only_text(&response), "echo: hello there");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert!(response.usage.input_tokens >= 1 && response.usage.output_tokens >= 1, "{:?}", response.usage);
}

pub async fn echo_stream_reports_text_in_deltas(client: &dyn ModelClient) {
    let request = request(vec![user("hello there, streaming world")]);
    let (result, events) = stream(client, &request).await;
    let response = result.unwrap();
    assert_eq!(only_text(&response), "echo: hello there, streaming world");
    assert_eq!(events.first(), Some(&StreamEvent::TextStart { index: 0 }));
    let deltas = assert_events_spell_the_text(&events, &response);
    assert!(deltas[0] >= 2, "expected 2+ deltas, got {events:?}");
    assert_same_answer(&response, &client.complete(&request).await.unwrap(), "stream() and complete() disagree");
}

pub async fn stream_splits_multibyte_text_on_char_boundaries(client: &dyn ModelClient) {
    let text = "héllo wörld 🌍🌍🌍 ünïcödé — 日本語";
    let response = both_ways(client, &request(vec![user(text)])).await;
    assert_eq!(only_text(&response), format!("echo: {text}"));
}

pub async fn echo_reads_the_most_recent_user_text(client: &dyn ModelClient) {
    let conversation = vec![
        user("first"),
        assistant(vec![Block::Text { text: "echo: first".into() }]),
        user("tool:bash {\"command\":\"ls\"}"),
        assistant(vec![Block::Text { text: "no".into() }]),
        // Two inputs merged into one message, as the native loop sends them: the latest counts.
        Message {
            role: Role::User,
            content: vec![Block::Text { text: "custom:lookup {}".into() }, Block::Text { text: "second".into() }],
        },
    ];
    let response = both_ways(client, &request(conversation)).await;
    assert_eq!(only_text(&response), "echo: second");
}

pub async fn tool_command_calls_the_tool(client: &dyn ModelClient) {
    let request = request(vec![user(r#"tool:bash {"command":"ls"}"#)]);
    let (result, events) = stream(client, &request).await;
    let response = result.unwrap();
    assert!(events.is_empty(), "a tool call reports no text: {events:?}");
    let (id, name, input) = only_tool_use(&response);
    assert!(id.starts_with("toolu_"), "{id}");
    assert_eq!(name, "bash");
    assert_eq!(input, &object(json!({"command": "ls"})));
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_same_answer(&response, &client.complete(&request).await.unwrap(), "stream() and complete() disagree");
}

pub async fn tool_result_gets_a_done_reply(client: &dyn ModelClient) {
    let first = client.complete(&request(vec![user(r#"tool:bash {"command":"ls"}"#)])).await.unwrap();
    let (id, _, _) = only_tool_use(&first);
    let conversation = vec![
        user(r#"tool:bash {"command":"ls"}"#),
        assistant(first.content.clone()),
        tool_result(id, &["file_a\n", "file_b"]),
    ];
    let response = both_ways(client, &request(conversation)).await;
    assert_eq!(only_text(&response), "done: file_a\nfile_b");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
}

pub async fn done_quotes_at_most_200_chars(client: &dyn ModelClient) {
    let long = format!("{}{}", "ü".repeat(150), "x".repeat(100));
    let conversation = vec![
        user(r#"tool:bash {"command":"cat big"}"#),
        assistant(vec![Block::ToolUse {
            id: "toolu_fake_1".into(),
            name: "bash".into(),
            input: object(json!({"command": "cat big"})),
        }]),
        tool_result("toolu_fake_1", &[&long[..100], &long[100..]]),
    ];
    let response = both_ways(client, &request(conversation)).await;
    assert_eq!(only_text(&response), format!("done: {}{}", "ü".repeat(150), "x".repeat(50)));
}

pub async fn custom_command_behaves_like_tool(client: &dyn ModelClient) {
    let prompt = r#"custom:lookup {"q":"rust","n":[1,2]}"#;
    let first = both_ways(client, &request(vec![user(prompt)])).await;
    let (id, name, input) = only_tool_use(&first);
    assert_eq!(name, "lookup");
    assert_eq!(input, &object(json!({"q": "rust", "n": [1, 2]})));
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    let conversation = vec![user(prompt), assistant(first.content.clone()), tool_result(id, &["found it"])];
    let second = both_ways(client, &request(conversation)).await;
    assert_eq!(only_text(&second), "done: found it");
}

pub async fn repeat_calls_the_tool_again_after_results(client: &dyn ModelClient) {
    let prompt = r#"repeat:bash {"command":"date"}"#;
    let mut conversation = vec![user(prompt)];
    let mut ids = Vec::new();
    for round in 0..3 {
        let response = both_ways(client, &request(conversation.clone())).await;
        assert_eq!(response.stop_reason, StopReason::ToolUse, "round {round}");
        let (id, name, input) = only_tool_use(&response);
        assert_eq!((name, input), ("bash", &object(json!({"command": "date"}))));
        assert!(!ids.contains(&id.to_owned()), "tool-use id {id} reused in one conversation");
        ids.push(id.to_owned());
        let result = tool_result(id, &["Mon"]);
        conversation.push(assistant(response.content.clone()));
        conversation.push(result);
    }
}

pub async fn invalid_json_input_is_reported_as_text(client: &dyn ModelClient) {
    for prompt in [r#"tool:bash {"command": "#, "tool:bash [1, 2]", "custom:lookup"] {
        let response = both_ways(client, &request(vec![user(prompt)])).await;
        let text = only_text(&response);
        let name = if prompt.starts_with("tool:") { "bash" } else { "lookup" };
        let expected = format!("fake model: invalid JSON input for tool {name}: ");
        assert!(text.starts_with(&expected) && text.len() > expected.len(), "{prompt:?} gave {text:?}");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
    }
}

pub async fn responses_are_deterministic(client: &dyn ModelClient) {
    let conversation = vec![user("tool:bash {}"), assistant(vec![Block::Text { text: "hm".into() }]), user("again")];
    let request = request(conversation);
    let first = client.complete(&request).await.unwrap();
    let second = client.complete(&request).await.unwrap();
    assert_same_answer(&first, &second, "the same request was answered differently");
    assert_eq!(only_text(&first), "echo: again");
}
