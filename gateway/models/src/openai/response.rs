//! Building a [`ModelResponse`] from what a Chat Completions server returns: a whole
//! `chat.completion`, or the `chat.completion.chunk`s of a stream ending with `data: [DONE]`.
//!
//! The answer is the first choice's message (the client never asks for more than one). Its
//! content becomes one text block (dropped when it is only whitespace, as the Anthropic client
//! drops such blocks) followed by one `tool_use` block per tool call, in the calls' order; a
//! `refusal` is the text, with [`StopReason::Refusal`]. Streamed tool calls arrive as deltas
//! keyed by `index`: the first carries the call's id and name, the following ones fragments of
//! its `arguments`, concatenated and parsed as a JSON object once the stream ended (a malformed
//! one is a [`ModelError::Protocol`]). Streamed text is announced, as with Anthropic, once it
//! has visible text, under its index in the final content (always 0: the text block comes
//! first). Fields this client does not use (`logprobs`, `reasoning_content` from vLLM and
//! DeepSeek, `audio`, ...) are ignored.

use std::collections::BTreeMap;

use serde_json::Value;

use super::errors::{self, ErrorObject};
use crate::http::{Assemble, ByteBudget, Progress, StreamedText, has_visible_text};
use crate::{Block, JsonObject, ModelError, ModelResponse, StopReason, StreamEvent, Usage};
use gateway_wire::sse::Event;

/// Most tool calls one response may make.
const MAX_TOOL_CALLS: usize = 1024;

/// Parses a non-streaming response body.
pub(crate) fn parse_completion(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ModelError::Protocol(format!("invalid chat completion JSON: {e}")))?;
    // Some proxies answer an error with a 200.
    if let Some(error) = ErrorObject::from_body(&value) {
        return Err(errors::from_stream_error(error));
    }
    let choice = first_choice(&value).ok_or_else(|| ModelError::Protocol("the completion has no choices".into()))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let refusal = message.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty());
    let text = refusal.map(str::to_owned).or_else(|| content_text(message.get("content")));
    let mut content = Vec::new();
    if let Some(text) = text.filter(|t| has_visible_text(t)) {
        content.push(Block::Text { text });
    }
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let field = |name: &str| call.get(name).or_else(|| call.pointer(&format!("/function/{name}")));
        let text = |name: &str| field(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        let arguments = match field("arguments") {
            Some(Value::Object(input)) => Value::Object(input.clone()).to_string(),
            Some(Value::String(json)) => json.clone(),
            _ => String::new(),
        };
        content.push(tool_use(text("id"), text("name"), &arguments)?);
    }
    let stop_reason = stop_reason(choice.get("finish_reason"), refusal.is_some())?;
    let usage = value.get("usage").map(usage_from).unwrap_or_default();
    Ok(ModelResponse { content, stop_reason, usage })
}

/// The choice the client asked for: index 0 (or the first, if the server numbers none).
fn first_choice(value: &Value) -> Option<&Value> {
    let choices = value.get("choices")?.as_array()?;
    choices.iter().find(|c| c.get("index").and_then(Value::as_u64) == Some(0)).or_else(|| choices.first())
}

/// A message's `content`: a string, or (as some servers send it) a list of text parts.
fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            Some(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().concat())
        }
        _ => None,
    }
}

/// A finished tool call; `arguments` must be a JSON object (empty means no arguments).
fn tool_use(id: String, name: String, arguments: &str) -> Result<Block, ModelError> {
    if id.is_empty() || name.is_empty() {
        return Err(ModelError::Protocol("a tool call lacks its id or function name".into()));
    }
    let input = if arguments.trim().is_empty() {
        JsonObject::new()
    } else {
        serde_json::from_str::<JsonObject>(arguments).map_err(|e| {
            ModelError::Protocol(format!("the arguments of tool call {name} are not a JSON object: {e}"))
        })?
    };
    Ok(Block::ToolUse { id, name, input })
}

/// `finish_reason` in the neutral vocabulary; a refusal ends like a stop.
fn stop_reason(reason: Option<&Value>, refused: bool) -> Result<StopReason, ModelError> {
    let reason =
        reason.and_then(Value::as_str).ok_or_else(|| ModelError::Protocol("the answer has no finish_reason".into()))?;
    Ok(match reason {
        "stop" if refused => StopReason::Refusal,
        "stop" => StopReason::EndTurn,
        "tool_calls" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    })
}

/// OpenAI counts cached tokens inside `prompt_tokens`; the neutral usage counts them apart
/// (as Anthropic does), so fresh input is the difference. `null` counters count as zero.
fn usage_from(value: &Value) -> Usage {
    let count = |pointer: &str| value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let cached = count("/prompt_tokens_details/cached_tokens");
    Usage {
        input_tokens: count("/prompt_tokens").saturating_sub(cached),
        output_tokens: count("/completion_tokens"),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

/// A tool call the stream is assembling.
#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a response from a stream's chunks, reporting text as it arrives.
#[derive(Debug)]
pub(crate) struct Assembler {
    content: Vec<Block>,
    /// The answer's text block, announced once it has visible text.
    text: StreamedText,
    refused: bool,
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<Value>,
    usage: Usage,
    done: bool,
    budget: ByteBudget,
}

impl Assembler {
    /// An assembler accepting at most `limit` bytes of text and tool arguments.
    pub fn new(limit: usize) -> Self {
        Self {
            content: Vec::new(),
            text: StreamedText::default(),
            refused: false,
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: Usage::default(),
            done: false,
            budget: ByteBudget::new(limit),
        }
    }

    /// Handles one chunk's data.
    pub fn handle(
        &mut self,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<Progress, ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Progress::Done);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| ModelError::Protocol(format!("invalid JSON in a chunk: {e}")))?;
        if let Some(error) = ErrorObject::from_body(&chunk) {
            return Err(errors::from_stream_error(error));
        }
        if let Some(choice) = first_choice(&chunk) {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.text(text, on_event)?;
            }
            if let Some(refusal) = delta.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty()) {
                self.refused = true;
                self.text(refusal, on_event)?;
            }
            for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                self.call_delta(call)?;
            }
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                self.finish_reason = Some(reason.clone());
            }
        }
        // OpenAI sends usage in a last chunk without choices; some servers with the finish.
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_from(usage);
        }
        Ok(Progress::Continue)
    }

    /// The assembled response, if the stream completed.
    pub fn finish(mut self) -> Result<ModelResponse, ModelError> {
        if !self.done {
            return Err(ModelError::StreamCut("the stream ended before data: [DONE]".into()));
        }
        for (_, call) in std::mem::take(&mut self.calls) {
            self.content.push(tool_use(call.id, call.name, &call.arguments)?);
        }
        let stop_reason = stop_reason(self.finish_reason.as_ref(), self.refused)?;
        Ok(ModelResponse { content: self.content, stop_reason, usage: self.usage })
    }

    fn text(&mut self, text: &str, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<(), ModelError> {
        if text.is_empty() {
            return Ok(());
        }
        self.budget.take(text.len())?;
        self.text.push(text, &mut self.content, on_event);
        Ok(())
    }

    /// Merges one `tool_calls` delta: id and name from the first that has them, `arguments`
    /// appended. A delta without `index` (some servers send each call whole) is a new call.
    fn call_delta(&mut self, delta: &Value) -> Result<(), ModelError> {
        let index = match delta.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            None => self.calls.keys().next_back().map_or(0, |last| last.saturating_add(1)),
        };
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS {
            return Err(ModelError::Protocol(format!("the answer makes more than {MAX_TOOL_CALLS} tool calls")));
        }
        let text = |pointer: &str| delta.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty());
        let arguments = match delta.pointer("/function/arguments") {
            Some(Value::String(part)) => part.clone(),
            Some(object @ Value::Object(_)) => object.to_string(),
            _ => String::new(),
        };
        self.budget.take(arguments.len())?;
        let call = self.calls.entry(index).or_default();
        if let Some(id) = text("/id").filter(|_| call.id.is_empty()) {
            call.id = id.to_owned();
        }
        if let Some(name) = text("/function/name").filter(|_| call.name.is_empty()) {
            call.name = name.to_owned();
        }
        call.arguments.push_str(&arguments);
        Ok(())
    }
}

impl Assemble for Assembler {
    fn event(&mut self, event: &Event, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<Progress, ModelError> {
        // Chat Completions names no events; the data says everything.
        self.handle(&event.data, on_event)
    }

    fn end(self) -> Result<ModelResponse, ModelError> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    fn run(chunks: &[Value], done: bool) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
        let seen = Mutex::new(Vec::new());
        let on_event = |e: StreamEvent| seen.lock().unwrap().push(e);
        let mut assembler = Assembler::new(1 << 20);
        let mut data: Vec<String> = chunks.iter().map(Value::to_string).collect();
        if done {
            data.push("[DONE]".into());
        }
        let mut result = None;
        for data in &data {
            match assembler.handle(data, &on_event) {
                Ok(Progress::Continue) => {}
                Ok(Progress::Done) => break,
                Err(e) => {
                    result = Some(Err(e));
                    break;
                }
            }
        }
        let result = result.unwrap_or_else(|| assembler.finish());
        (result, seen.into_inner().unwrap())
    }

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    #[test]
    fn text_and_fragmented_calls_assemble_in_order() {
        let chunks = [
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "\n"}), None),
            chunk(json!({"content": "Hi"}), None),
            chunk(json!({"content": "!"}), None),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "b", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}]}),
                None,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ": [1,"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": " 2]}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                             "prompt_tokens_details": {"cached_tokens": 64}}}),
        ];
        let (result, events) = run(&chunks, true);
        let response = result.unwrap();
        assert_eq!(
            response.content,
            vec![
                Block::Text { text: "\nHi!".into() },
                Block::ToolUse {
                    id: "call_a".into(),
                    name: "a".into(),
                    input: serde_json::from_value(json!({"x": [1, 2]})).unwrap()
                },
                Block::ToolUse { id: "call_b".into(), name: "b".into(), input: JsonObject::new() },
            ]
        );
        assert_eq!(
            events,
            vec![
                StreamEvent::TextStart { index: 0 },
                StreamEvent::TextDelta { index: 0, text: "\nHi".into() },
                StreamEvent::TextDelta { index: 0, text: "!".into() },
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 36, output_tokens: 7, cache_read_input_tokens: 64, cache_creation_input_tokens: 0 }
        );
    }

    #[test]
    fn a_stream_without_done_is_cut_and_errors_are_typed() {
        let (result, _) = run(&[chunk(json!({"content": "x"}), Some("stop"))], false);
        assert!(matches!(result, Err(ModelError::StreamCut(_))), "{result:?}");
        let (result, _) = run(&[json!({"error": {"message": "boom", "type": "server_error"}})], true);
        assert_eq!(result, Err(ModelError::Server { status: 500, message: "boom".into(), retry_after: None }));
        let (result, _) = run(&[chunk(json!({"content": "x"}), None)], true);
        assert!(matches!(&result, Err(ModelError::Protocol(m)) if m.contains("finish_reason")), "{result:?}");
    }

    #[test]
    fn malformed_arguments_are_a_protocol_error() {
        let call = json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": "{\"x\": "}}]});
        let (result, _) = run(&[chunk(call, Some("tool_calls"))], true);
        assert!(matches!(&result, Err(ModelError::Protocol(m)) if m.contains("not a JSON object")), "{result:?}");
        let call = json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": "[1]"}}]});
        let (result, _) = run(&[chunk(call, Some("tool_calls"))], true);
        assert!(matches!(result, Err(ModelError::Protocol(_))), "{result:?}");
        let (result, _) = run(
            &[chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}), Some("tool_calls"))],
            true,
        );
        assert!(matches!(&result, Err(ModelError::Protocol(m)) if m.contains("lacks")), "{result:?}");
    }

    #[test]
    fn finish_reasons_map_and_refusals_are_text() {
        for (reason, expected) in [
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::Refusal),
            ("function_call", StopReason::Other("function_call".into())),
        ] {
            let (result, _) = run(&[chunk(json!({"content": "x"}), Some(reason))], true);
            assert_eq!(result.unwrap().stop_reason, expected, "{reason}");
        }
        let (result, events) =
            run(&[chunk(json!({"refusal": "I can't."}), None), chunk(json!({}), Some("stop"))], true);
        let response = result.unwrap();
        assert_eq!(
            (response.content, response.stop_reason),
            (vec![Block::Text { text: "I can't.".into() }], StopReason::Refusal)
        );
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn the_size_and_count_limits_hold() {
        let mut assembler = Assembler::new(4);
        let ignore = |_: StreamEvent| {};
        let long = chunk(json!({"content": "12345"}), None).to_string();
        assert!(matches!(assembler.handle(&long, &ignore), Err(ModelError::Protocol(_))));
        let mut assembler = Assembler::new(1 << 20);
        let calls: Vec<Value> =
            (0..=MAX_TOOL_CALLS).map(|i| json!({"index": i, "id": "c", "function": {"name": "n"}})).collect();
        let many = chunk(json!({"tool_calls": calls}), None).to_string();
        assert!(matches!(assembler.handle(&many, &ignore), Err(ModelError::Protocol(_))));
    }

    #[test]
    fn whole_completions_parse_with_the_same_rules() {
        let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null, "message": {
                "role": "assistant", "content": "Let me look.", "refusal": null, "reasoning_content": "hm",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
                      "prompt_tokens_details": {"cached_tokens": null}}});
        let response = parse_completion(body.to_string().as_bytes()).unwrap();
        assert_eq!(response.content[0], Block::Text { text: "Let me look.".into() });
        assert!(
            matches!(&response.content[1], Block::ToolUse { id, input, .. } if id == "call_1" && input["command"] == "ls")
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.usage, Usage { input_tokens: 10, output_tokens: 4, ..Usage::default() });
        let blank = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "  "}}]});
        assert_eq!(parse_completion(blank.to_string().as_bytes()).unwrap().content, vec![]);
        assert!(matches!(parse_completion(b"<html>"), Err(ModelError::Protocol(_))));
        assert!(matches!(parse_completion(br#"{"choices":[]}"#), Err(ModelError::Protocol(_))));
        let no_reason = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]});
        assert!(matches!(parse_completion(no_reason.to_string().as_bytes()), Err(ModelError::Protocol(_))));
    }
}
