//! The neutral [`ModelRequest`] in the Chat Completions shape.
//!
//! The two conversation models differ in where things live, not in what they say:
//!
//! - The system prompt is the first message, `role: "system"`.
//! - A user turn's `tool_result` blocks become `role: "tool"` messages, one per result,
//!   carrying the call's id as `tool_call_id`; they come first, in order, because the API
//!   wants every call of the previous assistant message answered before anything else. The
//!   rest of the turn (text, images) follows as one `user` message of content parts.
//! - An assistant turn's text becomes `content` (blocks joined by a blank line), its `tool_use`
//!   blocks `tool_calls`, with `arguments` as a JSON string.
//! - Reasoning (`thinking`, `redacted_thinking`) is not sent: Chat Completions has no field
//!   for it in a request, and the blocks are Anthropic's signed reasoning, meaningless to
//!   another provider. Dropping them changes nothing the model needs: its answer is there.

use serde_json::{Value, json};

use crate::{Block, ImageSource, Message, ModelError, ModelRequest, Role, ToolResultContent};

/// How a failed tool result is marked. Chat Completions' `tool` messages have no error flag,
/// so `is_error` travels in the content, as a prefix a model reads plainly (and the test stub
/// reads back into `is_error`).
pub(crate) const TOOL_ERROR_PREFIX: &str = "[tool error] ";

/// The request body. `max_tokens` goes as `max_completion_tokens` (OpenAI deprecated
/// `max_tokens`, and its reasoning models refuse it); a stream asks for usage in a last chunk
/// (`stream_options.include_usage`), without which a streamed call reports none.
pub(crate) fn request_body(request: &ModelRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
    let encode = |e: serde_json::Error| ModelError::Protocol(format!("cannot encode the request: {e}"));
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    // An empty system prompt is no system prompt.
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message.role {
            Role::User => user_messages(message, &mut messages),
            Role::Assistant => messages.push(assistant_message(message)?),
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "max_completion_tokens": request.max_tokens,
        "stream": stream,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name, "description": tool.description, "parameters": tool.input_schema,
                }})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    serde_json::to_vec(&body).map_err(encode)
}

/// A user turn: its tool results as `tool` messages, then the rest as one `user` message.
fn user_messages(message: &Message, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            Block::ToolResult { tool_use_id, content, is_error } => {
                // Parts are text only; joined as the model would read them side by side.
                let mut text: String = content
                    .iter()
                    .map(|part| match part {
                        ToolResultContent::Text { text } => text.as_str(),
                    })
                    .collect();
                if *is_error {
                    text.insert_str(0, TOOL_ERROR_PREFIX);
                }
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}));
            }
            Block::Text { text } => parts.push(json!({"type": "text", "text": text})),
            Block::Image { source } => {
                parts.push(json!({"type": "image_url", "image_url": {"url": image_url(source)}}))
            }
            // Not a user's block; nothing to send.
            Block::ToolUse { .. } | Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
}

/// An assistant turn: text as `content` (null when the turn only called tools), calls as
/// `tool_calls`.
fn assistant_message(message: &Message) -> Result<Value, ModelError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            Block::Text { text } => texts.push(text.as_str()),
            Block::ToolUse { id, name, input } => {
                let arguments = serde_json::to_string(input)
                    .map_err(|e| ModelError::Protocol(format!("cannot encode the input of {name}: {e}")))?;
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}));
            }
            // Reasoning stays with the provider that made it (see the module documentation).
            Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
            Block::Image { .. } | Block::ToolResult { .. } => {}
        }
    }
    let content = match (texts.is_empty(), calls.is_empty()) {
        (true, false) => Value::Null,
        _ => Value::String(texts.join("\n\n")),
    };
    let mut out = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        out["tool_calls"] = Value::Array(calls);
    }
    Ok(out)
}

/// An image as Chat Completions takes it: a URL, inline data as a `data:` URL.
fn image_url(source: &ImageSource) -> String {
    match source {
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url { url } => url.clone(),
    }
}
