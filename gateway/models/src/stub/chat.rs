//! The stub's side of the OpenAI Chat Completions wire format (`POST /v1/chat/completions`):
//! reading requests back into the neutral [`ModelRequest`] the fake model answers, and
//! writing `chat.completion` / `chat.completion.chunk` objects exactly as OpenAI does (the
//! official `openai` Python package's types validate them: `tests/openai_sdk.rs`).
//!
//! Beyond the script it checks what the API checks about tool calls, so tests prove the client
//! orders them right: every `tool` message answers a call of the assistant message before it,
//! and every call is answered before the conversation goes on (otherwise 400, with OpenAI's
//! wording). It also counts cached prompt tokens as OpenAI's automatic prompt cache reports
//! them: the longest prefix of whole messages (with the same model and tools) an earlier
//! request of the same credential sent, counted as the fake counts tokens (characters / 4).
//! Unlike the API, any length caches.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};

use crate::fake::text_chunks;
use crate::openai::TOOL_ERROR_PREFIX;
use crate::{
    Block, ImageSource, Message, ModelRequest, ModelResponse, Role, StopReason, ToolDefinition, ToolResultContent,
};

/// A request as the stub understood it.
pub(crate) struct ParsedChat {
    pub request: ModelRequest,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk carries the usage.
    pub include_usage: bool,
}

/// Reads a Chat Completions request body; the error is the message of a 400 answer.
pub(crate) fn parse_request(body: &Value) -> Result<ParsedChat, String> {
    let object = body.as_object().ok_or("the request body must be a JSON object")?;
    let model = object.get("model").and_then(Value::as_str).ok_or("you must provide a model parameter")?.to_owned();
    let raw = object.get("messages").and_then(Value::as_array).ok_or("Missing required parameter: 'messages'.")?;
    if raw.is_empty() {
        return Err("Invalid 'messages': empty array. Expected an array with minimum length 1.".into());
    }
    let stream = object.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let options = object.get("stream_options").filter(|o| !o.is_null());
    if options.is_some() && !stream {
        return Err("The 'stream_options' parameter is only allowed when 'stream' is enabled.".into());
    }
    let include_usage = options.and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let max_tokens =
        ["max_completion_tokens", "max_tokens"].iter().find_map(|k| object.get(*k).and_then(Value::as_u64));
    let mut conversation = Conversation::default();
    for (n, message) in raw.iter().enumerate() {
        conversation.add(message).map_err(|e| format!("messages[{n}]: {e}"))?;
    }
    let Conversation { system, messages, unanswered, .. } = conversation;
    if !unanswered.is_empty() {
        return Err(unanswered_error(&unanswered));
    }
    let tools = object.get("tools").and_then(Value::as_array).map(|t| t.iter().filter_map(parse_tool).collect());
    let request = ModelRequest {
        model,
        system: (!system.is_empty()).then(|| system.join("\n")),
        messages,
        tools: tools.unwrap_or_default(),
        max_tokens: max_tokens.map_or(u32::MAX, |m| u32::try_from(m).unwrap_or(u32::MAX)),
        thinking: None,
    };
    Ok(ParsedChat { request, stream, include_usage })
}

/// The neutral conversation being rebuilt from the wire's messages.
#[derive(Default)]
struct Conversation {
    system: Vec<String>,
    messages: Vec<Message>,
    /// Calls of the last assistant message no `tool` message answered yet.
    unanswered: Vec<String>,
    /// The last neutral message is a user turn opened by `tool` messages, which the next
    /// `user` message completes.
    tool_turn: bool,
}

impl Conversation {
    fn add(&mut self, message: &Value) -> Result<(), String> {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "tool" && !self.unanswered.is_empty() {
            return Err(unanswered_error(&self.unanswered));
        }
        let content = message.get("content");
        match role {
            "system" | "developer" => self.system.push(texts(content).concat()),
            "user" => {
                let blocks = user_blocks(content)?;
                let completes_tool_turn = std::mem::take(&mut self.tool_turn);
                match self.messages.last_mut() {
                    Some(last) if completes_tool_turn => last.content.extend(blocks),
                    _ => self.messages.push(Message { role: Role::User, content: blocks }),
                }
            }
            "assistant" => {
                self.tool_turn = false;
                let mut blocks: Vec<Block> =
                    texts(content).into_iter().filter(|t| !t.is_empty()).map(|text| Block::Text { text }).collect();
                for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let block = tool_call(call)?;
                    if let Block::ToolUse { id, .. } = &block {
                        self.unanswered.push(id.clone());
                    }
                    blocks.push(block);
                }
                self.messages.push(Message { role: Role::Assistant, content: blocks });
            }
            "tool" => {
                let id = message.get("tool_call_id").and_then(Value::as_str).ok_or("tool_call_id: field required")?;
                let Some(at) = self.unanswered.iter().position(|u| u == id) else {
                    return Err("messages with role 'tool' must be a response to a preceeding message with \
                                'tool_calls'."
                        .into());
                };
                self.unanswered.remove(at);
                let text = texts(content).concat();
                let (text, is_error) = match text.strip_prefix(TOOL_ERROR_PREFIX) {
                    Some(rest) => (rest.to_owned(), true),
                    None => (text, false),
                };
                let block = Block::ToolResult {
                    tool_use_id: id.to_owned(),
                    content: vec![ToolResultContent::Text { text }],
                    is_error,
                };
                match self.messages.last_mut() {
                    Some(last) if self.tool_turn => last.content.push(block),
                    _ => self.messages.push(Message { role: Role::User, content: vec![block] }),
                }
                self.tool_turn = true;
            }
            other => {
                return Err(format!(
                    "Invalid value: '{other}'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'."
                ));
            }
        }
        Ok(())
    }
}

fn unanswered_error(ids: &[String]) -> String {
    format!(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id'. The following tool_call_ids did not have response messages: {}",
        ids.join(", ")
    )
}

/// The texts of a `content`: a string, or the `text` parts of a list.
fn texts(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// A user message's content: text and image parts; others (audio, files) are ignored.
fn user_blocks(content: Option<&Value>) -> Result<Vec<Block>, String> {
    let parts = match content {
        Some(Value::String(text)) => return Ok(vec![Block::Text { text: text.clone() }]),
        Some(Value::Array(parts)) => parts,
        _ => return Err("content: expected a string or an array of content parts".into()),
    };
    let mut blocks = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part.get("text").and_then(Value::as_str).ok_or("text part without text")?;
                blocks.push(Block::Text { text: text.to_owned() });
            }
            Some("image_url") => {
                let url = part.pointer("/image_url/url").and_then(Value::as_str).ok_or("image_url part without url")?;
                blocks.push(Block::Image { source: image_source(url) });
            }
            _ => {}
        }
    }
    Ok(blocks)
}

/// A `data:<type>;base64,<data>` URL as inline data, anything else as a URL.
fn image_source(url: &str) -> ImageSource {
    let inline = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(','))
        .and_then(|(meta, data)| meta.strip_suffix(";base64").map(|media| (media, data)));
    match inline {
        Some((media_type, data)) => ImageSource::Base64 { media_type: media_type.to_owned(), data: data.to_owned() },
        None => ImageSource::Url { url: url.to_owned() },
    }
}

/// An assistant message's tool call; its `arguments` must hold a JSON object.
fn tool_call(call: &Value) -> Result<Block, String> {
    let text = |pointer: &str| call.pointer(pointer).and_then(Value::as_str);
    let id = text("/id").ok_or("tool_calls: id required")?;
    let name = text("/function/name").ok_or("tool_calls: function.name required")?;
    let arguments = text("/function/arguments").ok_or("tool_calls: function.arguments must be a string")?;
    let input =
        serde_json::from_str(arguments).map_err(|e| format!("tool_calls: arguments are not a JSON object: {e}"))?;
    Ok(Block::ToolUse { id: id.to_owned(), name: name.to_owned(), input })
}

fn parse_tool(tool: &Value) -> Option<ToolDefinition> {
    let function = tool.get("function")?;
    Some(ToolDefinition {
        name: function.get("name").and_then(Value::as_str)?.to_owned(),
        description: function.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
        input_schema: function.get("parameters").and_then(Value::as_object).cloned().unwrap_or_default(),
    })
}

/// The prompt prefixes the stub has seen for one credential.
#[derive(Default)]
pub(crate) struct PrefixCache {
    seen: HashSet<u64>,
}

impl PrefixCache {
    /// Cached tokens of a request (before capping): the fake's count of the longest prefix of
    /// whole messages seen before; records every prefix of this one.
    pub(crate) fn account(&mut self, body: &Value) -> u64 {
        let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let mut prefix = DefaultHasher::new();
        body.get("model").map(Value::to_string).hash(&mut prefix);
        body.get("tools").map(Value::to_string).hash(&mut prefix);
        let (mut chars, mut cached) = (0usize, 0usize);
        for message in messages {
            message.to_string().hash(&mut prefix);
            chars += weight(message);
            if !self.seen.insert(prefix.finish()) {
                cached = chars;
            }
        }
        u64::try_from(cached / 4).unwrap_or(u64::MAX)
    }
}

/// A message's size in characters, as the fake model counts it: its texts and its calls'
/// names and arguments.
fn weight(message: &Value) -> usize {
    let calls = message.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
    let call_chars = calls
        .map(|c| {
            ["/function/name", "/function/arguments"]
                .iter()
                .filter_map(|p| c.pointer(p)?.as_str())
                .map(|s| s.chars().count())
                .sum::<usize>()
        })
        .sum::<usize>();
    texts(message.get("content")).iter().map(|t| t.chars().count()).sum::<usize>() + call_chars
}

/// One answer's identity, shared by all its chunks.
pub(crate) struct Answer<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub response: &'a ModelResponse,
}

impl Answer<'_> {
    fn text(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .response
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        (!texts.is_empty()).then(|| texts.concat())
    }

    /// The tool calls, as `(id, name, arguments)`.
    fn calls(&self) -> Vec<(&str, &str, String)> {
        self.response
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, name, input } => {
                    Some((id.as_str(), name.as_str(), Value::Object(input.clone()).to_string()))
                }
                _ => None,
            })
            .collect()
    }

    fn finish_reason(&self) -> &'static str {
        match self.response.stop_reason {
            StopReason::ToolUse => "tool_calls",
            StopReason::MaxTokens => "length",
            StopReason::Refusal => "content_filter",
            _ => "stop",
        }
    }

    /// `usage`; `input_tokens` + `cache_read_input_tokens` is the prompt, as OpenAI counts it.
    fn usage(&self) -> Value {
        let usage = &self.response.usage;
        let prompt = usage.input_tokens + usage.cache_read_input_tokens;
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
            },
        })
    }

    /// The body of a non-streaming answer.
    pub(crate) fn completion(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.text(), "refusal": null, "annotations": []});
        let calls = self.calls();
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": self.finish_reason()}],
            "usage": self.usage(),
            "system_fingerprint": null,
        })
    }

    /// The frames of a streamed answer, in OpenAI's order: a chunk opening the message
    /// (`role`, empty `content`), the text in two or more chunks, per tool call a chunk with
    /// its id and name then its arguments in two or more chunks, a chunk with the
    /// `finish_reason`, then (with `include_usage`) a chunk without choices holding the usage,
    /// and `data: [DONE]`.
    pub(crate) fn frames(&self, include_usage: bool) -> Vec<String> {
        let chunk = |delta: Value, finish: Option<&str>| {
            let mut chunk = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": null,
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            // With include_usage, every chunk but the last says `usage: null`.
            if include_usage {
                chunk["usage"] = Value::Null;
            }
            frame(&chunk)
        };
        let mut frames = vec![chunk(json!({"role": "assistant", "content": "", "refusal": null}), None)];
        if let Some(text) = self.text() {
            frames.extend(text_chunks(&text).into_iter().map(|part| chunk(json!({"content": part}), None)));
        }
        for (index, (id, name, arguments)) in self.calls().into_iter().enumerate() {
            let start =
                json!({"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}});
            frames.push(chunk(json!({"tool_calls": [start]}), None));
            frames.extend(
                text_chunks(&arguments).into_iter().map(|part| {
                    chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}), None)
                }),
            );
        }
        frames.push(chunk(json!({}), Some(self.finish_reason())));
        if include_usage {
            frames.push(frame(&json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": null, "choices": [], "usage": self.usage(),
            })));
        }
        frames.push(DONE.to_owned());
        frames
    }
}

/// The frame that ends a Chat Completions stream.
const DONE: &str = "data: [DONE]\n\n";

/// A `data:`-only frame, as OpenAI sends them (no `event:` names).
fn frame(data: &Value) -> String {
    String::from_utf8_lossy(&gateway_wire::sse::json_frame(None, None, data)).into_owned()
}

/// OpenAI's error envelope.
pub(crate) fn error_body(error_type: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": null}})
}

/// An error chunk, as OpenAI sends one mid-stream.
pub(crate) fn error_frame(error_type: &str) -> String {
    frame(&error_body(error_type, &format!("stub fault: {error_type}")))
}

/// The HTTP status OpenAI uses for an error type (or code).
pub(crate) fn status_for(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" | "context_length_exceeded" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" | "model_not_found" => 404,
        "rate_limit_exceeded" | "insufficient_quota" | "requests" | "tokens" => 429,
        "overloaded_error" | "service_unavailable" => 503,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: Value) -> Value {
        json!({"model": "gpt-test", "messages": messages})
    }

    #[test]
    fn tool_messages_and_the_following_user_message_make_one_turn() {
        let parsed = parse_request(&body(json!([
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                                         {"type": "text", "text": "tool:bash {}"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "[tool error] boom"}]},
            {"role": "user", "content": "and now?"}
        ])))
        .unwrap();
        let request = parsed.request;
        assert_eq!(request.system.as_deref(), Some("Be brief."));
        assert_eq!(request.messages.len(), 3);
        assert_eq!(
            request.messages[0].content[0],
            Block::Image { source: ImageSource::Base64 { media_type: "image/png".into(), data: "iVBO".into() } }
        );
        assert_eq!(request.messages[1].content.len(), 2);
        let last = &request.messages[2];
        assert_eq!(last.role, Role::User);
        assert!(
            matches!(&last.content[0], Block::ToolResult { is_error: false, tool_use_id, .. } if tool_use_id == "c1")
        );
        assert!(matches!(&last.content[1], Block::ToolResult { is_error: true, content, .. }
            if content == &vec![ToolResultContent::Text { text: "boom".into() }]));
        assert_eq!(last.content[2], Block::Text { text: "and now?".into() });
    }

    #[test]
    fn tool_calls_must_be_answered_in_place() {
        let call = json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}]});
        let unanswered =
            parse_request(&body(json!([{"role": "user", "content": "x"}, call, {"role": "user", "content": "y"}])));
        assert!(unanswered.err().unwrap().contains("did not have response messages: c1"));
        let stray = parse_request(&body(
            json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c9", "content": "r"}]),
        ));
        assert!(stray.err().unwrap().contains("must be a response to a preceeding message"));
        let no_stream = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}});
        assert!(parse_request(&no_stream).err().unwrap().contains("only allowed when 'stream' is enabled"));
        assert!(parse_request(&body(json!([]))).is_err());
        assert!(parse_request(&json!({"messages": [{"role": "user", "content": "x"}]})).is_err());
    }

    #[test]
    fn the_longest_seen_prefix_of_whole_messages_is_cached() {
        let mut cache = PrefixCache::default();
        let first = body(json!([{"role": "user", "content": "u".repeat(40)}]));
        assert_eq!(cache.account(&first), 0);
        let second =
            body(json!([{"role": "user", "content": "u".repeat(40)}, {"role": "assistant", "content": "a".repeat(40)},
                                 {"role": "user", "content": "v".repeat(40)}]));
        assert_eq!(cache.account(&second), 10);
        assert_eq!(cache.account(&second), 30);
        let other_model = json!({"model": "other", "messages": second["messages"]});
        assert_eq!(cache.account(&other_model), 0);
    }
}
