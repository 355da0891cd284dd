//! The stub's side of the Messages API wire format: reading requests as leniently as the real
//! API does, and writing responses exactly as it does.
//!
//! Requests come from this crate's client and from third-party programs (Claude Code through
//! `claude-agent-acp`), which use more of the API than the gateway: `system` as text blocks,
//! string contents, `cache_control`, `thinking`, `metadata`, document blocks... Whatever does
//! not change the fake model's answer is accepted and ignored.

use serde_json::{Value, json};

use crate::fake::text_chunks;
use crate::{
    Block, ImageSource, JsonObject, Message, ModelRequest, ModelResponse, Role, ToolDefinition, ToolResultContent,
};

/// A request as the stub understood it.
pub(crate) struct ParsedRequest {
    pub request: ModelRequest,
    pub stream: bool,
}

/// Reads a Messages API request body; the error is the message of a 400 answer.
pub(crate) fn parse_request(body: &Value) -> Result<ParsedRequest, String> {
    let object = body.as_object().ok_or("the request body must be a JSON object")?;
    let model = object.get("model").and_then(Value::as_str).ok_or("model: field required")?.to_owned();
    let max_tokens = object.get("max_tokens").and_then(Value::as_u64).ok_or("max_tokens: field required")?;
    let stream = object.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let system = match object.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(blocks)) => Some(blocks.iter().filter_map(text_of).collect::<Vec<_>>().join("\n")),
        Some(_) => return Err("system: expected a string or a list of text blocks".into()),
    };
    let messages = object
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: field required")?
        .iter()
        .enumerate()
        .map(|(n, message)| parse_message(message).map_err(|e| format!("messages.{n}: {e}")))
        .filter_map(Result::transpose)
        .collect::<Result<Vec<_>, _>>()?;
    let tools =
        object.get("tools").and_then(Value::as_array).map(|tools| tools.iter().filter_map(parse_tool).collect());
    let request = ModelRequest {
        model,
        system,
        messages,
        tools: tools.unwrap_or_default(),
        max_tokens: u32::try_from(max_tokens).unwrap_or(u32::MAX),
        thinking: super::rules::thinking_budget(body).map(|b| u32::try_from(b).unwrap_or(u32::MAX)),
    };
    Ok(ParsedRequest { request, stream })
}

/// One conversation entry; `None` for a `role: "system"` entry (the API takes them inside
/// `messages`, as Claude Code sends them; they do not change the fake model's answer).
fn parse_message(message: &Value) -> Result<Option<Message>, String> {
    let role = match message.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => return Ok(None),
        other => return Err(format!("role: unexpected value {other:?}")),
    };
    let content = match message.get("content") {
        Some(Value::String(text)) => vec![Block::Text { text: text.clone() }],
        Some(Value::Array(blocks)) => blocks.iter().filter_map(parse_block).collect(),
        _ => return Err("content: expected a string or a list of blocks".into()),
    };
    Ok(Some(Message { role, content }))
}

/// One content block, or `None` for the kinds the fake model does not read (thinking,
/// documents, server tool results, images from sources it does not know, ...).
fn parse_block(block: &Value) -> Option<Block> {
    let field = |name: &str| block.get(name).and_then(Value::as_str).map(str::to_owned);
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(Block::Text { text: field("text")? }),
        "image" => {
            let source = serde_json::from_value::<ImageSource>(block.get("source")?.clone()).ok()?;
            Some(Block::Image { source })
        }
        "tool_use" => Some(Block::ToolUse {
            id: field("id")?,
            name: field("name")?,
            input: block.get("input").and_then(Value::as_object).cloned().unwrap_or_default(),
        }),
        "thinking" => Some(Block::Thinking { thinking: field("thinking")?, signature: field("signature")? }),
        "redacted_thinking" => Some(Block::RedactedThinking { data: field("data")? }),
        "tool_result" => {
            let content = match block.get("content") {
                Some(Value::String(text)) => vec![ToolResultContent::Text { text: text.clone() }],
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(text_of).map(|text| ToolResultContent::Text { text }).collect()
                }
                _ => Vec::new(),
            };
            Some(Block::ToolResult {
                tool_use_id: field("tool_use_id")?,
                content,
                is_error: block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            })
        }
        _ => None,
    }
}

/// The text of a `{"type":"text","text":...}` block.
fn text_of(block: &Value) -> Option<String> {
    (block.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| block.get("text").and_then(Value::as_str).map(str::to_owned))
        .flatten()
}

/// A tool definition; server tools (`{"type":"web_search_...","name":...}`) get an empty schema.
fn parse_tool(tool: &Value) -> Option<ToolDefinition> {
    Some(ToolDefinition {
        name: tool.get("name").and_then(Value::as_str)?.to_owned(),
        description: tool.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
        input_schema: tool.get("input_schema").and_then(Value::as_object).cloned().unwrap_or_default(),
    })
}

/// The body of a non-streaming answer.
pub(crate) fn message_json(id: &str, model: &str, response: &ModelResponse) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": response.content,
        "stop_reason": response.stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "cache_creation_input_tokens": response.usage.cache_creation_input_tokens,
            "cache_read_input_tokens": response.usage.cache_read_input_tokens,
        },
    })
}

/// The frames of a streamed answer, in the API's order: `message_start`, `ping`, then per
/// block `content_block_start`, its deltas (two or more) and `content_block_stop`, then
/// `message_delta` and `message_stop`.
pub(crate) fn sse_frames(id: &str, model: &str, response: &ModelResponse) -> Vec<String> {
    let mut frames = vec![
        frame(json!({
            "type": "message_start",
            "message": {
                "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": response.usage.input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": response.usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": response.usage.cache_read_input_tokens,
                },
            },
        })),
        frame(json!({"type": "ping"})),
    ];
    for (index, block) in response.content.iter().enumerate() {
        let (start, deltas): (Value, Vec<Value>) = match block {
            Block::Text { text } => (
                json!({"type": "text", "text": ""}),
                text_chunks(text).into_iter().map(|chunk| json!({"type": "text_delta", "text": chunk})).collect(),
            ),
            Block::ToolUse { id, name, input } => {
                let input = Value::Object(input.clone()).to_string();
                let deltas = text_chunks(&input)
                    .into_iter()
                    .map(|chunk| json!({"type": "input_json_delta", "partial_json": chunk}))
                    .collect();
                (json!({"type": "tool_use", "id": id, "name": name, "input": JsonObject::new()}), deltas)
            }
            Block::Thinking { thinking, signature } => {
                let mut deltas: Vec<Value> = text_chunks(thinking)
                    .into_iter()
                    .map(|chunk| json!({"type": "thinking_delta", "thinking": chunk}))
                    .collect();
                deltas.push(json!({"type": "signature_delta", "signature": signature}));
                (json!({"type": "thinking", "thinking": "", "signature": ""}), deltas)
            }
            // Whole in its start, as the API sends it.
            Block::RedactedThinking { data } => (json!({"type": "redacted_thinking", "data": data}), vec![]),
            // The fake model answers with text and tool calls only.
            Block::Image { .. } | Block::ToolResult { .. } => continue,
        };
        frames.push(frame(json!({"type": "content_block_start", "index": index, "content_block": start})));
        frames.extend(
            deltas
                .into_iter()
                .map(|delta| frame(json!({"type": "content_block_delta", "index": index, "delta": delta}))),
        );
        frames.push(frame(json!({"type": "content_block_stop", "index": index})));
    }
    frames.push(frame(json!({
        "type": "message_delta",
        "delta": {"stop_reason": response.stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": response.usage.output_tokens},
    })));
    frames.push(frame(json!({"type": "message_stop"})));
    frames
}

/// An `error` event, as the API sends it mid-stream.
pub(crate) fn error_frame(error_type: &str) -> String {
    frame(error_body(error_type, &format!("stub fault: {error_type}")))
}

/// The API's error envelope.
pub(crate) fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

/// The HTTP status the API uses for an error type.
pub(crate) fn status_for(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

fn frame(data: Value) -> String {
    let kind = data.get("type").and_then(Value::as_str).unwrap_or("message");
    String::from_utf8_lossy(&gateway_wire::sse::json_frame(None, Some(kind), &data)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_real_clients_send_are_accepted() {
        let body = json!({
            "model": "claude-x", "max_tokens": 32000, "stream": true,
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "Be brief."}],
            "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
            "messages": [
                {"role": "user", "content": "tool:Bash {\"command\":\"ls\"}"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "...", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {"type": "url", "url": "u"}}, {"type": "text", "text": "b"}]},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "plain", "is_error": true},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}},
                    {"type": "image", "source": {"type": "file", "file_id": "f"}},
                    {"type": "text", "text": "<system-reminder>x</system-reminder>", "cache_control": {"type": "ephemeral"}}]}
            ]
        });
        let ParsedRequest { request, stream } = parse_request(&body).unwrap();
        assert!(stream);
        assert_eq!(request.system.as_deref(), Some("You are Claude Code.\nBe brief."));
        assert_eq!(request.tools.len(), 2);
        assert_eq!(request.max_tokens, 32000);
        assert_eq!(request.messages[0].content, vec![Block::Text { text: "tool:Bash {\"command\":\"ls\"}".into() }]);
        assert_eq!(request.messages[1].content[0], Block::Thinking { thinking: "...".into(), signature: "sig".into() });
        assert_eq!(request.thinking, Some(1024));
        let last = &request.messages[2].content;
        assert_eq!(last.len(), 3);
        assert_eq!(
            last[0],
            Block::ToolResult {
                tool_use_id: "t1".into(),
                content: vec![
                    ToolResultContent::Text { text: "a".into() },
                    ToolResultContent::Text { text: "b".into() }
                ],
                is_error: false,
            }
        );
        assert!(matches!(&last[1], Block::ToolResult { is_error: true, content, .. } if content.len() == 1));
    }

    #[test]
    fn requests_missing_what_the_api_requires_are_refused() {
        assert!(parse_request(&json!({"max_tokens": 1, "messages": []})).is_err());
        assert!(parse_request(&json!({"model": "m", "messages": []})).is_err());
        assert!(parse_request(&json!({"model": "m", "max_tokens": 1})).is_err());
        let bad_role = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]});
        assert_eq!(parse_request(&bad_role).err().unwrap(), "messages.0: role: unexpected value Some(\"tool\")");
    }

    #[test]
    fn system_entries_inside_messages_are_accepted_and_ignored() {
        let body = json!({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "reminder"}]},
        ]});
        let parsed = parse_request(&body).unwrap();
        assert_eq!(parsed.request.messages.len(), 1);
        assert_eq!(parsed.request.messages[0].role, Role::User);
    }
}
