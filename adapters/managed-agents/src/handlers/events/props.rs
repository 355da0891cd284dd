//! Property tests (issue 13) of the event input: whatever body a client POSTs to
//! `/v1/sessions/{id}/events`, decoding never panics and either yields core inputs or a typed
//! 400 (`invalid_request_error`). Seeded: `PROPTEST_RNG_SEED` overrides the fixed seed;
//! `PROPTEST_CASES=5000 cargo nextest run -p gateway-managed-agents props` for a longer run.
#![allow(clippy::unwrap_used)]

use axum::http::StatusCode;
use gateway_core::content::plain_text;
use gateway_core::event::EventPayload;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::SendBody;
use crate::extract::parse_json;

const SEED: u64 = 0x6576_656e_7473_696e;

fn config() -> proptest::test_runner::Config {
    crate::props::config(SEED, 1024)
}

/// The handler's decoding, from the body's bytes to core inputs.
fn decode(bytes: &[u8]) -> Result<Vec<gateway_core::event::NewEvent>, crate::error::ApiError> {
    parse_json::<SendBody>(bytes).and_then(SendBody::into_inputs)
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), Just(String::new()), Just("allow".into()), Just("deny".into())]
}

fn any_json() -> impl Strategy<Value = Value> {
    crate::props::json(text, 32, 5)
}

/// Values shaped like the API's: known type names and field names, any values in them.
fn shaped(depth: u32) -> BoxedStrategy<Value> {
    const TYPES: [&str; 14] = [
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.tool_result",
        "user.define_outcome",
        "system.message",
        "text",
        "image",
        "document",
        "search_result",
        "base64",
        "url",
        "file",
    ];
    const FIELDS: [&str; 16] = [
        "content",
        "text",
        "source",
        "media_type",
        "data",
        "url",
        "file_id",
        "title",
        "context",
        "tool_use_id",
        "custom_tool_use_id",
        "result",
        "deny_message",
        "is_error",
        "session_thread_id",
        "events",
    ];
    let value =
        if depth == 0 { any_json().boxed() } else { prop_oneof![2 => shaped(depth - 1), 1 => any_json()].boxed() };
    let list = prop::collection::vec(value.clone(), 0..4).prop_map(Value::Array);
    let field_value = prop_oneof![value, list];
    (
        prop::sample::select(&TYPES[..]),
        prop::collection::btree_map(prop::sample::select(&FIELDS[..]), field_value, 0..4),
    )
        .prop_map(|(t, fields)| {
            let mut o: serde_json::Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            o.insert("type".into(), json!(t));
            Value::Object(o)
        })
        .boxed()
}

fn body() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => any_json(),
        3 => prop::collection::vec(shaped(2), 0..4).prop_map(|events| json!({"events": events})),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Any JSON body decodes or is a 400 `invalid_request_error`; never a panic, never another status.
    #[test]
    fn any_json_body_decodes_or_is_a_typed_400(body in body()) {
        let bytes = serde_json::to_vec(&body).unwrap();
        if let Err(e) = decode(&bytes) {
            prop_assert_eq!(e.status, StatusCode::BAD_REQUEST, "{:?}", e);
            prop_assert_eq!(e.kind, "invalid_request_error");
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Any bytes (truncated, invalid UTF-8, NULs): the same.
    #[test]
    fn any_bytes_decode_or_are_a_typed_400(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = decode(&bytes) {
            prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }

    /// A message of any text is decoded to exactly that text.
    #[test]
    fn a_message_keeps_its_text_exactly(texts in prop::collection::vec(any::<String>(), 1..4)) {
        let content: Vec<Value> = texts.iter().map(|t| json!({"type": "text", "text": t})).collect();
        let bytes = serde_json::to_vec(&json!({"events": [{"type": "user.message", "content": content}]})).unwrap();
        let inputs = decode(&bytes).unwrap();
        prop_assert_eq!(inputs.len(), 1);
        match &inputs[0].payload {
            EventPayload::UserMessage { content } => prop_assert_eq!(plain_text(content), texts.concat()),
            other => prop_assert!(false, "decoded {:?}", other),
        }
    }
}
