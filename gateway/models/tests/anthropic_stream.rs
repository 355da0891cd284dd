//! The Anthropic client's streaming: cuts, error events, and tolerance of what it does not use.

mod common;

use gateway_models::conformance::{assert_events_spell_the_text, object, request, user};
use gateway_models::stub::{Fault, StubServer};
use gateway_models::{Block, ModelError, StopReason, StreamEvent, Usage};
use serde_json::json;

/// Frames of a scripted stream: `message_start`, `ping`, `content_block_start`, then deltas.
const BEFORE_FIRST_DELTA: usize = 3;

fn sse(status: u16, body: &str) -> Fault {
    Fault::Raw { status, headers: vec![("content-type".into(), "text/event-stream".into())], body: body.into() }
}

#[tokio::test]
async fn a_cut_before_any_text_is_retried() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::CutAfterEvents(BEFORE_FIRST_DELTA));
    let (result, events) = common::stream(&client, &request(vec![user("again please")])).await;
    let response = result.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: again please".into() }]);
    assert_eq!(stub.requests().len(), 2);
    assert_events_spell_the_text(&events, &response);
}

#[tokio::test]
async fn a_cut_after_the_first_delta_is_returned_not_replayed() {
    let (client, stub) = common::stub_client().await;
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
async fn an_error_event_after_text_is_typed_and_not_retried() {
    let (client, stub) = common::stub_client().await;
    let fault =
        |error_type: &str| Fault::ErrorEvent { error_type: error_type.into(), after_events: BEFORE_FIRST_DELTA + 1 };
    stub.push_fault(fault("overloaded_error"));
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert_eq!(
        result,
        Err(ModelError::Overloaded { status: 529, message: "stub fault: overloaded_error".into(), retry_after: None })
    );
    assert_eq!(events.len(), 2, "{events:?}");
    stub.push_fault(fault("api_error"));
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Server { status: 500, .. })), "{result:?}");
    assert_eq!(stub.requests().len(), 2);
}

#[tokio::test]
async fn an_error_event_before_text_is_retried_if_transient() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::ErrorEvent { error_type: "overloaded_error".into(), after_events: 1 });
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert_eq!(result.unwrap().content, vec![Block::Text { text: "echo: x".into() }]);
    assert_eq!(stub.requests().len(), 2);

    stub.push_fault(Fault::ErrorEvent { error_type: "invalid_request_error".into(), after_events: 1 });
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::InvalidRequest { status: 400, .. })), "{result:?}");
    assert!(events.is_empty());
    assert_eq!(stub.requests().len(), 3);
}

#[tokio::test]
async fn a_clean_end_before_message_stop_is_a_cut() {
    let (client, stub) = common::stub_client().await;
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"par\"}}\n\n",
    );
    stub.push_fault(sse(200, body));
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::StreamCut(_))), "{result:?}");
    assert_eq!(
        events,
        vec![StreamEvent::TextStart { index: 0 }, StreamEvent::TextDelta { index: 0, text: "par".into() }]
    );
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn unknown_blocks_events_and_deltas_are_skipped() {
    let (client, stub) = common::stub_client().await;
    // CRLF line endings, a comment, JSON split over two data lines, and blocks this client
    // does not use before, between and after the ones it does.
    let frames = [
        ": keep-alive comment",
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1,\"cache_read_input_tokens\":5}}}",
        "event: ping\ndata: {\"type\":\"ping\"}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"xx\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\ndata: \"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"citations_delta\",\"citation\":{}}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\", world\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srv\",\"name\":\"web_search\",\"input\":{}}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\":\\\"q\\\"}\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":4,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srv\",\"content\":[]}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":4}",
        "event: brand_new_event\ndata: {\"type\":\"brand_new_event\",\"anything\":true}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":5,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"Bash\",\"input\":{}}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"l\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"s\\\"}\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":5}",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":42}}",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}",
    ];
    let body: String = frames.iter().map(|frame| format!("{}\r\n\r\n", frame.replace('\n', "\r\n"))).collect();
    stub.push_fault(sse(200, &body));
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    let response = result.unwrap();
    assert_eq!(
        response.content,
        vec![
            Block::Thinking { thinking: "hmm".into(), signature: "sig".into() },
            Block::RedactedThinking { data: "xx".into() },
            Block::Text { text: "Hello, world".into() },
            Block::ToolUse { id: "toolu_9".into(), name: "Bash".into(), input: object(json!({"command": "ls"})) },
        ]
    );
    assert_eq!(
        events,
        vec![
            StreamEvent::ThinkingStart { nth: 0 },
            StreamEvent::ThinkingDelta { nth: 0, text: "hmm".into() },
            StreamEvent::TextStart { index: 2 },
            StreamEvent::TextDelta { index: 2, text: "Hello".into() },
            StreamEvent::TextDelta { index: 2, text: ", world".into() },
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.usage,
        Usage { input_tokens: 11, output_tokens: 42, cache_read_input_tokens: 5, ..Usage::default() }
    );
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_a_protocol_error() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::Raw {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: r#"{"content":[],"stop_reason":"end_turn"}"#.into(),
    });
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn garbage_instead_of_a_message_is_a_protocol_error() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::Raw { status: 200, headers: vec![], body: "<html>hello</html>".into() });
    let error = gateway_models::ModelClient::complete(&client, &request(vec![user("x")])).await.unwrap_err();
    assert!(matches!(error, ModelError::Protocol(_)), "{error:?}");
    stub.push_fault(sse(200, "event: content_block_delta\ndata: {not json\n\n"));
    let (result, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
    assert_eq!(stub.requests().len(), 2, "protocol errors are not retried");
}

#[tokio::test]
async fn a_stub_fault_queue_applies_in_order_across_calls() {
    let stub = StubServer::start().await;
    let client = gateway_models::anthropic::AnthropicClient::new({
        let mut config = common::config(&stub, gateway_models::anthropic::Credential::ApiKey(common::API_KEY.into()));
        config.patience.max_retries = 0;
        config
    })
    .unwrap();
    stub.push_fault(Fault::status(500, "api_error"));
    stub.push_fault(Fault::CutAfterEvents(1));
    let (first, _) = common::stream(&client, &request(vec![user("x")])).await;
    let (second, _) = common::stream(&client, &request(vec![user("x")])).await;
    let (third, _) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(first, Err(ModelError::Server { status: 500, .. })), "{first:?}");
    assert!(matches!(second, Err(ModelError::StreamCut(_))), "{second:?}");
    assert!(third.is_ok(), "{third:?}");
}
