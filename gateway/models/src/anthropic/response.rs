//! Building a [`ModelResponse`] from what the Messages API returns: a whole JSON message, or
//! the events of a stream.
//!
//! Only the blocks the gateway understands are kept: `text`, `tool_use`, and `thinking` and
//! `redacted_thinking` (sent back as received on the turn's later requests). Others
//! (`server_tool_use`, `web_search_tool_result`, ...) are skipped so that a newer API or a
//! proxy adding them does not break the session. Text blocks holding nothing but
//! whitespace are dropped too, because the API refuses them when the conversation is sent back.
//! Block indexes reported in [`StreamEvent`]s are positions in the returned content, so a
//! text block is only given an index (and announced) once it has visible text.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::errors::{self, ErrorObject};
use crate::http::{ByteBudget, Progress, StreamedText, has_visible_text};
use crate::{Block, JsonObject, ModelError, ModelResponse, StopReason, StreamEvent, Usage};

/// Parses a non-streaming response body.
pub(crate) fn parse_message(body: &[u8]) -> Result<ModelResponse, ModelError> {
    #[derive(Deserialize)]
    struct Message {
        #[serde(default)]
        content: Vec<Value>,
        stop_reason: Option<StopReason>,
        #[serde(default)]
        usage: Option<Value>,
    }
    let message: Message =
        serde_json::from_slice(body).map_err(|e| ModelError::Protocol(format!("invalid message JSON: {e}")))?;
    let mut content = Vec::new();
    for block in message.content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
                if has_visible_text(text) {
                    content.push(Block::Text { text: text.to_owned() });
                }
            }
            Some("tool_use") => {
                let (id, name) = tool_identity(&block)?;
                let input = match block.get("input") {
                    Some(Value::Object(input)) => input.clone(),
                    None | Some(Value::Null) => JsonObject::new(),
                    Some(other) => {
                        return Err(ModelError::Protocol(format!("tool_use input is not an object: {other}")));
                    }
                };
                content.push(Block::ToolUse { id, name, input });
            }
            Some("thinking") => {
                let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
                content.push(Block::Thinking { thinking: field("thinking"), signature: field("signature") });
            }
            Some("redacted_thinking") => {
                let data = block.get("data").and_then(Value::as_str).unwrap_or_default().to_owned();
                content.push(Block::RedactedThinking { data });
            }
            _ => {}
        }
    }
    let stop_reason =
        message.stop_reason.ok_or_else(|| ModelError::Protocol("the message has no stop_reason".into()))?;
    let usage = message.usage.as_ref().map(usage_from).transpose()?.unwrap_or_default();
    Ok(ModelResponse { content, stop_reason, usage })
}

fn tool_identity(block: &Value) -> Result<(String, String), ModelError> {
    let field = |name: &str| block.get(name).and_then(Value::as_str).map(str::to_owned);
    match (field("id"), field("name")) {
        (Some(id), Some(name)) => Ok((id, name)),
        _ => Err(ModelError::Protocol("a tool_use block lacks its id or name".into())),
    }
}

/// A content block the stream has opened and not yet closed.
#[derive(Debug)]
enum Open {
    /// Text, announced once it has visible text.
    Text(StreamedText),
    Tool {
        id: String,
        name: String,
        start_input: JsonObject,
        json: String,
    },
    /// Reasoning (the response's `nth`): its text and signature arrive in deltas.
    Thinking {
        nth: usize,
        thinking: String,
        signature: String,
    },
    /// Encrypted reasoning, whole in its start.
    Redacted {
        data: String,
    },
    Skipped,
}

/// Assembles a response from stream events, reporting text as it arrives.
#[derive(Debug)]
pub(crate) struct Assembler {
    content: Vec<Block>,
    open: BTreeMap<u64, Open>,
    /// Thinking blocks started so far.
    thoughts: usize,
    stop_reason: Option<StopReason>,
    usage: Usage,
    done: bool,
    budget: ByteBudget,
}

impl Assembler {
    /// An assembler accepting at most `limit` bytes of text and tool input.
    pub fn new(limit: usize) -> Self {
        Self {
            content: Vec::new(),
            open: BTreeMap::new(),
            thoughts: 0,
            stop_reason: None,
            usage: Usage::default(),
            done: false,
            budget: ByteBudget::new(limit),
        }
    }

    /// Handles one SSE event (`name` is its `event:` field, `data` its data).
    pub fn handle(
        &mut self,
        name: &str,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<Progress, ModelError> {
        let value: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(_) if !is_known(name) => return Ok(Progress::Continue),
            Err(e) => return Err(ModelError::Protocol(format!("invalid JSON in a {name} event: {e}"))),
        };
        // The data's own `type` is authoritative; the event name is only a fallback.
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                if let Some(usage) = value.pointer("/message/usage") {
                    self.usage = usage_from(usage)?;
                }
            }
            "content_block_start" => self.start_block(&value, on_event)?,
            "content_block_delta" => self.delta(&value, on_event)?,
            "content_block_stop" => {
                let index = block_index(&value)?;
                self.stop_block(index)?;
            }
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").filter(|v| !v.is_null()) {
                    let reason = StopReason::deserialize(reason)
                        .map_err(|e| ModelError::Protocol(format!("invalid stop_reason: {e}")))?;
                    self.stop_reason = Some(reason);
                }
                if let Some(Value::Object(usage)) = value.get("usage") {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(Progress::Done);
            }
            "error" => {
                let error = value
                    .get("error")
                    .cloned()
                    .and_then(|e| ErrorObject::deserialize(e).ok())
                    .unwrap_or(ErrorObject { kind: "api_error".into(), message: data.chars().take(300).collect() });
                return Err(errors::from_error_event(error));
            }
            // `ping` and event types newer than this client.
            _ => {}
        }
        Ok(Progress::Continue)
    }

    /// The assembled response, if the stream completed.
    pub fn finish(mut self) -> Result<ModelResponse, ModelError> {
        if !self.done {
            return Err(ModelError::StreamCut("the stream ended before message_stop".into()));
        }
        // Blocks a sloppy server never closed are still complete at message_stop.
        let open: Vec<u64> = self.open.keys().copied().collect();
        for index in open {
            self.stop_block(index)?;
        }
        let stop_reason =
            self.stop_reason.ok_or_else(|| ModelError::Protocol("the stream ended without a stop_reason".into()))?;
        Ok(ModelResponse { content: self.content, stop_reason, usage: self.usage })
    }

    fn start_block(&mut self, value: &Value, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<(), ModelError> {
        let index = block_index(value)?;
        let block = value.get("content_block").unwrap_or(&Value::Null);
        let open = match block.get("type").and_then(Value::as_str) {
            Some("text") => Open::Text(StreamedText::default()),
            Some("tool_use") => {
                let (id, name) = tool_identity(block)?;
                let start_input = match block.get("input") {
                    Some(Value::Object(input)) => input.clone(),
                    _ => JsonObject::new(),
                };
                Open::Tool { id, name, start_input, json: String::new() }
            }
            Some("thinking") => {
                let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
                let nth = self.thoughts;
                self.thoughts += 1;
                on_event(StreamEvent::ThinkingStart { nth });
                let thinking = field("thinking");
                self.budget.take(thinking.len())?;
                if !thinking.is_empty() {
                    on_event(StreamEvent::ThinkingDelta { nth, text: thinking.clone() });
                }
                Open::Thinking { nth, thinking, signature: field("signature") }
            }
            Some("redacted_thinking") => {
                let data = block.get("data").and_then(Value::as_str).unwrap_or_default().to_owned();
                self.budget.take(data.len())?;
                Open::Redacted { data }
            }
            _ => Open::Skipped,
        };
        self.open.insert(index, open);
        // The API starts text blocks empty, but a block may carry initial text.
        if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.text(index, text, on_event)?;
        }
        Ok(())
    }

    fn delta(&mut self, value: &Value, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<(), ModelError> {
        let index = block_index(value)?;
        let delta = value.get("delta").unwrap_or(&Value::Null);
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let text = delta.get("text").and_then(Value::as_str).unwrap_or_default();
                self.text(index, text, on_event)
            }
            Some("input_json_delta") => {
                let partial = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                self.budget.take(partial.len())?;
                if let Some(Open::Tool { json, .. }) = self.open.get_mut(&index) {
                    json.push_str(partial);
                }
                Ok(())
            }
            Some(kind @ ("thinking_delta" | "signature_delta")) => {
                let field = if kind == "thinking_delta" { "thinking" } else { "signature" };
                let part = delta.get(field).and_then(Value::as_str).unwrap_or_default();
                self.budget.take(part.len())?;
                if let Some(Open::Thinking { nth, thinking, signature }) = self.open.get_mut(&index) {
                    if kind == "thinking_delta" {
                        thinking.push_str(part);
                        on_event(StreamEvent::ThinkingDelta { nth: *nth, text: part.to_owned() });
                    } else {
                        signature.push_str(part);
                    }
                }
                Ok(())
            }
            // citations_delta, ...
            _ => Ok(()),
        }
    }

    fn text(
        &mut self,
        index: u64,
        text: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<(), ModelError> {
        self.budget.take(text.len())?;
        if let Some(Open::Text(streamed)) = self.open.get_mut(&index) {
            streamed.push(text, &mut self.content, on_event);
        }
        Ok(())
    }

    fn stop_block(&mut self, index: u64) -> Result<(), ModelError> {
        match self.open.remove(&index) {
            Some(Open::Tool { id, name, start_input, json }) => {
                let input = if json.trim().is_empty() {
                    start_input
                } else {
                    serde_json::from_str::<JsonObject>(&json).map_err(|e| {
                        ModelError::Protocol(format!("tool_use input of {name} is not a JSON object: {e}"))
                    })?
                };
                self.content.push(Block::ToolUse { id, name, input });
            }
            Some(Open::Thinking { thinking, signature, .. }) => {
                self.content.push(Block::Thinking { thinking, signature })
            }
            Some(Open::Redacted { data }) => self.content.push(Block::RedactedThinking { data }),
            // Text already sits in `content` if it was kept; whitespace-only text is dropped.
            Some(Open::Text(_) | Open::Skipped) | None => {}
        }
        Ok(())
    }

    fn merge_usage(&mut self, usage: &JsonObject) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        if let Some(n) = field("output_tokens") {
            self.usage.output_tokens = n;
        }
        if let Some(n) = field("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.usage.cache_read_input_tokens = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.usage.cache_creation_input_tokens = n;
        }
    }
}

/// Event types whose data must be JSON; the data of unknown ones is not our business.
fn is_known(name: &str) -> bool {
    matches!(
        name,
        "message_start"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
            | "error"
    )
}

fn block_index(value: &Value) -> Result<u64, ModelError> {
    value
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| ModelError::Protocol("a block event lacks its index".into()))
}

fn usage_from(value: &Value) -> Result<Usage, ModelError> {
    // `null` counters (seen from some proxies) count as zero rather than failing the call.
    let mut usage = Usage::default();
    let Value::Object(fields) = value else {
        return Err(ModelError::Protocol("usage is not an object".into()));
    };
    let field = |name: &str| fields.get(name).and_then(Value::as_u64).unwrap_or(0);
    usage.input_tokens = field("input_tokens");
    usage.output_tokens = field("output_tokens");
    usage.cache_read_input_tokens = field("cache_read_input_tokens");
    usage.cache_creation_input_tokens = field("cache_creation_input_tokens");
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn run(frames: &[(&str, &str)]) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
        let seen = Mutex::new(Vec::new());
        let on_event = |e: StreamEvent| seen.lock().unwrap().push(e);
        let mut assembler = Assembler::new(1 << 20);
        let mut result = None;
        for (name, data) in frames {
            match assembler.handle(name, data, &on_event) {
                Ok(Progress::Continue) => {}
                Ok(Progress::Done) => break,
                Err(e) => {
                    result = Some(Err(e));
                    break;
                }
            }
        }
        let result = result.unwrap_or_else(|| assembler.finish());
        let events = seen.into_inner().unwrap();
        (result, events)
    }

    const START: (&str, &str) = (
        "message_start",
        r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":null}}}"#,
    );
    const STOP: (&str, &str) = ("message_stop", r#"{"type":"message_stop"}"#);

    fn end(reason: &str) -> (&'static str, String) {
        (
            "message_delta",
            format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}"}},"usage":{{"output_tokens":7}}}}"#),
        )
    }

    #[test]
    fn thinking_is_kept_whole_and_skipped_or_blank_blocks_do_not_shift_indexes() {
        let end = end("tool_use");
        let frames = [
            START,
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"m"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB+sig=="}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":5,"content_block":{"type":"redacted_thinking","data":"EmwK"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":5}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":6,"content_block":{"type":"server_tool_use","id":"s","name":"web_search"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":6}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\n\n"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":" "}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"!"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"command\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":3}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"t2","name":"noargs","input":{}}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":4}"#),
            ("ping", r#"{"type": "ping"}"#),
            ("message_delta", end.1.as_str()),
            STOP,
        ];
        let (result, events) = run(&frames);
        let response = result.unwrap();
        let input: JsonObject = serde_json::from_str(r#"{"command":"ls"}"#).unwrap();
        assert_eq!(
            response.content,
            vec![
                Block::Thinking { thinking: "hmm".into(), signature: "EqQB+sig==".into() },
                Block::RedactedThinking { data: "EmwK".into() },
                Block::Text { text: " Hi!".into() },
                Block::ToolUse { id: "t1".into(), name: "Bash".into(), input },
                Block::ToolUse { id: "t2".into(), name: "noargs".into(), input: JsonObject::new() },
            ]
        );
        assert_eq!(
            events,
            vec![
                StreamEvent::ThinkingStart { nth: 0 },
                StreamEvent::ThinkingDelta { nth: 0, text: "hm".into() },
                StreamEvent::ThinkingDelta { nth: 0, text: "m".into() },
                StreamEvent::TextStart { index: 2 },
                StreamEvent::TextDelta { index: 2, text: " Hi".into() },
                StreamEvent::TextDelta { index: 2, text: "!".into() },
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.usage, Usage { input_tokens: 10, output_tokens: 7, ..Usage::default() });
    }

    #[test]
    fn a_stream_without_message_stop_is_cut() {
        let (result, _) = run(&[START]);
        assert!(matches!(result, Err(ModelError::StreamCut(_))), "{result:?}");
    }

    #[test]
    fn unknown_stop_reasons_are_kept_and_unknown_events_ignored() {
        let end = end("model_context_window_exceeded");
        let (result, _) = run(&[START, ("mystery", "not json"), ("message_delta", end.1.as_str()), STOP]);
        assert_eq!(result.unwrap().stop_reason, StopReason::Other("model_context_window_exceeded".into()));
    }

    #[test]
    fn broken_json_and_bad_tool_input_are_protocol_errors() {
        let (result, _) = run(&[START, ("content_block_delta", "{oops")]);
        assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
        let (result, _) = run(&[
            START,
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"x","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"[1]"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ]);
        assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
    }

    #[test]
    fn error_events_are_typed() {
        let (result, _) =
            run(&[START, ("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)]);
        assert_eq!(
            result,
            Err(ModelError::Overloaded { status: 529, message: "Overloaded".into(), retry_after: None })
        );
    }

    #[test]
    fn the_size_limit_holds() {
        let mut assembler = Assembler::new(4);
        let ignore = |_: StreamEvent| {};
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
        assembler.handle("content_block_start", start, &ignore).unwrap();
        let delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"12345"}}"#;
        assert!(matches!(assembler.handle("content_block_delta", delta, &ignore), Err(ModelError::Protocol(_))));
    }

    #[test]
    fn whole_messages_parse_with_the_same_rules() {
        let body = br#"{"id":"m","type":"message","role":"assistant","model":"x","content":[
            {"type":"thinking","thinking":"...","signature":"s"},
            {"type":"text","text":"  "},
            {"type":"text","text":"hello"},
            {"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}},
            {"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls"}}
        ],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}"#;
        let response = parse_message(body).unwrap();
        assert_eq!(response.content.len(), 3);
        assert_eq!(response.content[0], Block::Thinking { thinking: "...".into(), signature: "s".into() });
        assert_eq!(response.content[1], Block::Text { text: "hello".into() });
        assert!(matches!(&response.content[2], Block::ToolUse { name, .. } if name == "bash"));
        assert_eq!(response.usage.output_tokens, 4);
        assert!(matches!(parse_message(b"<html>"), Err(ModelError::Protocol(_))));
        assert!(matches!(parse_message(br#"{"content":[]}"#), Err(ModelError::Protocol(_))));
    }
}
