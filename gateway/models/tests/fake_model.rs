//! What only the fake model promises: pacing and its usage formula.

use std::sync::Mutex;
use std::time::Duration;

use gateway_models::conformance::{request, user};
use gateway_models::fake::FakeModel;
use gateway_models::{ModelClient, ModelRequest, StreamEvent, Usage};

#[tokio::test]
async fn a_chunk_delay_lets_a_caller_interrupt_mid_stream() {
    let model = FakeModel::with_chunk_delay(Duration::from_millis(300));
    let events = Mutex::new(Vec::new());
    let request = request(vec![user("a long enough answer to be split into chunks")]);
    let record = |event| events.lock().unwrap().push(event);
    let call = model.stream(&request, &record);
    assert!(
        tokio::time::timeout(Duration::from_millis(150), call).await.is_err(),
        "the stream should still be running"
    );
    let events = events.into_inner().unwrap();
    let [StreamEvent::TextStart { index: 0 }, StreamEvent::TextDelta { index: 0, text }] = &events[..] else {
        panic!("expected the start and one delta before the interruption: {events:?}");
    };
    assert!(text.starts_with("echo: a"));
}

#[tokio::test]
async fn without_a_delay_complete_and_stream_are_immediate_and_equal() {
    let model = FakeModel::new();
    let request = request(vec![user("quick")]);
    let streamed = tokio::time::timeout(Duration::from_secs(1), model.stream(&request, &|_| {})).await;
    assert_eq!(streamed.unwrap().unwrap(), model.complete(&request).await.unwrap());
}

#[test]
fn usage_counts_characters_over_four() {
    let model = FakeModel::new();
    let request = ModelRequest {
        model: "m".into(),
        system: Some("12345678".into()),      // 8 chars
        messages: vec![user("ééééééééééé€")], // 12 chars, 25 bytes
        tools: vec![],
        max_tokens: 10,
        thinking: None,
    };
    // Reply "echo: ééééééééééé€": 18 chars.
    assert_eq!(model.respond(&request).usage, Usage { input_tokens: 5, output_tokens: 4, ..Usage::default() });
    let tiny = ModelRequest { system: None, messages: vec![], ..request };
    assert_eq!(model.respond(&tiny).usage, Usage { input_tokens: 1, output_tokens: 1, ..Usage::default() });
}
