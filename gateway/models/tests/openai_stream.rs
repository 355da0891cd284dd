//! The OpenAI client reading answers: streamed chunks assembled, finish reasons, usage, cuts
//! and errors inside a stream.

mod common;

use common::{chunk, chunk_stream};
use gateway_models::conformance::{assert_events_spell_the_text, assistant, object, request, user};
use gateway_models::stub::Fault;
use gateway_models::{Block, ModelClient, ModelError, StopReason, StreamEvent, Usage};
use serde_json::{Value, json};

/// Frames of a scripted stream before its first text delta: the chunk opening the message.
const BEFORE_FIRST_DELTA: usize = 1;

fn usage_chunk(prompt: u64, completion: u64, cached: Option<u64>) -> Value {
    let mut usage =
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    if let Some(cached) = cached {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached, "audio_tokens": 0});
    }
    json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
           "choices": [], "usage": usage})
}

fn completion(message: Value, finish_reason: &str) -> Fault {
    let body = json!({"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55,
                  "prompt_tokens_details": {"cached_tokens": 32}}});
    Fault::Raw {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string(),
    }
}

#[tokio::test]
async fn text_and_a_tool_call_assemble_from_fragmented_deltas() {
    let (client, stub) = common::openai_client().await;
    let call = |delta: Value| chunk(json!({"tool_calls": [delta]}), None);
    stub.push_fault(chunk_stream(
        &[
            chunk(json!({"role": "assistant", "content": "", "refusal": null}), None),
            chunk(json!({"content": " "}), None),
            chunk(json!({"content": "Let me "}), None),
            chunk(json!({"reasoning_content": "ignored", "content": "check."}), None),
            call(json!({"index": 0, "id": "call_abc", "type": "function", "function": {"name": "bash", "arguments": ""}})),
            call(json!({"index": 0, "function": {"arguments": "{\"comm"}})),
            call(json!({"index": 0, "function": {"arguments": "and\": \"ls -"}})),
            call(json!({"index": 0, "function": {"arguments": "la\", \"n\": [1, {\"é\": true}]"}})),
            call(json!({"index": 0, "function": {"arguments": "}"}})),
            call(json!({"index": 1, "id": "call_def", "type": "function", "function": {"name": "lookup", "arguments": "{}"}})),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(120, 30, Some(100)),
        ],
        true,
    ));
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    let response = result.unwrap();
    assert_eq!(
        response.content,
        vec![
            Block::Text { text: " Let me check.".into() },
            Block::ToolUse {
                id: "call_abc".into(),
                name: "bash".into(),
                input: object(json!({"command": "ls -la", "n": [1, {"é": true}]})),
            },
            Block::ToolUse { id: "call_def".into(), name: "lookup".into(), input: object(json!({})) },
        ]
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::TextStart { index: 0 },
            StreamEvent::TextDelta { index: 0, text: " Let me ".into() },
            StreamEvent::TextDelta { index: 0, text: "check.".into() },
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.usage,
        Usage { input_tokens: 20, output_tokens: 30, cache_read_input_tokens: 100, cache_creation_input_tokens: 0 }
    );
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn finish_reasons_map_the_same_streamed_or_not() {
    let (client, stub) = common::openai_client().await;
    for (reason, expected) in [
        ("stop", StopReason::EndTurn),
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::Refusal),
        ("tool_calls", StopReason::ToolUse),
        ("something_new", StopReason::Other("something_new".into())),
    ] {
        stub.push_fault(chunk_stream(&[chunk(json!({"content": "partial"}), Some(reason))], true));
        let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
        assert_eq!(result.unwrap().stop_reason, expected, "streamed {reason}");
        stub.push_fault(completion(json!({"role": "assistant", "content": "partial"}), reason));
        let response = client.complete(&request(vec![user("x")])).await.unwrap();
        assert_eq!(response.stop_reason, expected, "whole {reason}");
    }
}

#[tokio::test]
async fn whole_answers_map_calls_refusals_and_cached_usage() {
    let (client, stub) = common::openai_client().await;
    let message = json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]});
    stub.push_fault(completion(message, "tool_calls"));
    let response = client.complete(&request(vec![user("x")])).await.unwrap();
    assert_eq!(
        response.content,
        vec![Block::ToolUse { id: "call_1".into(), name: "bash".into(), input: object(json!({"command": "ls"})) }]
    );
    assert_eq!(
        response.usage,
        Usage { input_tokens: 18, output_tokens: 5, cache_read_input_tokens: 32, ..Usage::default() }
    );

    stub.push_fault(completion(
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
        "stop",
    ));
    let refused = client.complete(&request(vec![user("x")])).await.unwrap();
    assert_eq!(refused.content, vec![Block::Text { text: "I can't help with that.".into() }]);
    assert_eq!(refused.stop_reason, StopReason::Refusal);
}

#[tokio::test]
async fn the_stub_reports_cached_prompt_tokens_on_a_repeated_prefix() {
    let (client, _stub) = common::openai_client().await;
    let first = client.complete(&request(vec![user(&"a long first question ".repeat(10))])).await.unwrap();
    assert_eq!(first.usage.cache_read_input_tokens, 0, "{:?}", first.usage);
    let conversation =
        vec![user(&"a long first question ".repeat(10)), assistant(first.content.clone()), user("and a follow-up")];
    let (second, _) = common::stream(&client, &request(conversation)).await;
    let usage = second.unwrap().usage;
    // The system prompt and the first message (15 + 220 characters, 58 tokens as the fake
    // counts) were sent before.
    assert_eq!(usage.cache_read_input_tokens, 58, "{usage:?}");
    assert!(usage.input_tokens >= 1);
}

#[tokio::test]
async fn malformed_arguments_are_a_protocol_error_and_not_retried() {
    let (client, stub) = common::openai_client().await;
    let call = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "bash", "arguments": "{\"command\": \"ls"}}]});
    stub.push_fault(chunk_stream(&[chunk(call, None), chunk(json!({}), Some("tool_calls"))], true));
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(&result, Err(ModelError::Protocol(m)) if m.contains("bash")), "{result:?}");
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "not json"}}]});
    stub.push_fault(completion(message, "tool_calls"));
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(matches!(error, ModelError::Protocol(_)), "{error:?}");
    assert_eq!(stub.requests().len(), 2, "protocol errors are not retried");
}

#[tokio::test]
async fn a_cut_before_any_text_is_retried() {
    let (client, stub) = common::openai_client().await;
    stub.push_fault(Fault::CutAfterEvents(BEFORE_FIRST_DELTA));
    let (result, events) = common::stream(&client, &request(vec![user("again please")])).await;
    let response = result.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: again please".into() }]);
    assert_eq!(stub.requests().len(), 2);
    assert_events_spell_the_text(&events, &response);
}

#[tokio::test]
async fn a_cut_after_the_first_delta_is_returned_not_replayed() {
    let (client, stub) = common::openai_client().await;
    stub.push_fault(Fault::CutAfterEvents(BEFORE_FIRST_DELTA + 1));
    let (result, events) = common::stream(&client, &request(vec![user("this answer will be cut")])).await;
    assert!(matches!(result, Err(ModelError::StreamCut(_))), "{result:?}");
    assert_eq!(stub.requests().len(), 1, "a stream that reported text is never retried");
    let [StreamEvent::TextStart { index: 0 }, StreamEvent::TextDelta { index: 0, text }] = &events[..] else {
        panic!("expected the start and the first delta once: {events:?}");
    };
    assert!(!text.is_empty() && "echo: this answer will be cut".starts_with(text.as_str()), "{text:?}");
}

#[tokio::test]
async fn a_clean_end_without_done_is_a_cut() {
    let (client, stub) = common::openai_client().await;
    let chunks = [chunk(json!({"content": "par"}), None), chunk(json!({}), Some("stop")), usage_chunk(1, 1, None)];
    stub.push_fault(chunk_stream(&chunks, false));
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::StreamCut(_))), "{result:?}");
    assert_eq!(
        events,
        vec![StreamEvent::TextStart { index: 0 }, StreamEvent::TextDelta { index: 0, text: "par".into() }]
    );
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn an_error_chunk_after_text_is_typed_and_not_retried() {
    let (client, stub) = common::openai_client().await;
    stub.push_fault(Fault::ErrorEvent { error_type: "server_error".into(), after_events: BEFORE_FIRST_DELTA + 1 });
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert_eq!(
        result,
        Err(ModelError::Server { status: 500, message: "stub fault: server_error".into(), retry_after: None })
    );
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn an_error_chunk_before_text_is_retried_if_transient() {
    let (client, stub) = common::openai_client().await;
    stub.push_fault(Fault::ErrorEvent { error_type: "server_error".into(), after_events: BEFORE_FIRST_DELTA });
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert_eq!(result.unwrap().content, vec![Block::Text { text: "echo: x".into() }]);
    assert_eq!(stub.requests().len(), 2);

    stub.push_fault(Fault::ErrorEvent { error_type: "invalid_request_error".into(), after_events: 0 });
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::InvalidRequest { status: 400, .. })), "{result:?}");
    assert!(events.is_empty());
    assert_eq!(stub.requests().len(), 3);
}

#[tokio::test]
async fn garbage_and_json_instead_of_a_stream_are_protocol_errors() {
    let (client, stub) = common::openai_client().await;
    stub.push_fault(completion(json!({"role": "assistant", "content": "x"}), "stop"));
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(&result, Err(ModelError::Protocol(m)) if m.contains("event stream")), "{result:?}");
    stub.push_fault(Fault::Raw {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: "data: {not json\n\n".into(),
    });
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
    stub.push_fault(Fault::Raw { status: 200, headers: vec![], body: "<html>hello</html>".into() });
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(matches!(error, ModelError::Protocol(_)), "{error:?}");
    assert_eq!(stub.requests().len(), 3, "protocol errors are not retried");
}
