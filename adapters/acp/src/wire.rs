//! ACP v1 wire vocabulary shared by both faces: content blocks both ways, tool kinds, stop
//! reasons, permission options.
//!
//! Input is read tolerantly (unknown fields ignored, unknown content types reported as such),
//! output is built with exactly the fields the v1 schema defines (checked by the TypeScript
//! peer in `tests/compat/acp`, which parses everything against the schema).

use gateway_core::content::{ContentBlock, MediaSource};
use serde_json::{Map, Value, json};

use crate::rpc::RpcError;

/// The protocol version both faces speak.
pub const PROTOCOL_VERSION: u64 = 1;

/// How the gateway names itself to its ACP peers (`agentInfo` to editors, `clientInfo` to
/// agent processes).
pub fn implementation() -> Value {
    json!({"name": "gateway", "title": "Gateway", "version": env!("CARGO_PKG_VERSION")})
}
/// Content blocks accepted in one prompt.
pub const MAX_PROMPT_BLOCKS: usize = 256;

/// What a prompt may carry, as negotiated.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptSupport {
    pub image: bool,
    pub embedded_context: bool,
}

fn str_field(o: &Map<String, Value>, k: &str) -> Option<String> {
    o.get(k).and_then(Value::as_str).map(str::to_owned)
}

/// An ACP prompt (`ContentBlock[]`) as core content. Refuses what the agent cannot take,
/// naming the block, rather than dropping it silently.
pub fn prompt_to_core(prompt: &Value, support: PromptSupport) -> Result<Vec<ContentBlock>, RpcError> {
    let blocks = prompt.as_array().ok_or_else(|| RpcError::invalid_params("`prompt` must be an array"))?;
    if blocks.len() > MAX_PROMPT_BLOCKS {
        return Err(RpcError::invalid_params(format!("a prompt holds at most {MAX_PROMPT_BLOCKS} blocks")));
    }
    let mut out = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        let o = b.as_object().ok_or_else(|| RpcError::invalid_params(format!("prompt[{i}] is not an object")))?;
        let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
        let missing = |f: &str| RpcError::invalid_params(format!("prompt[{i}] ({kind}) needs `{f}`"));
        let block = match kind {
            "text" => ContentBlock::Text { text: str_field(o, "text").ok_or_else(|| missing("text"))? },
            "image" if support.image => ContentBlock::Image {
                source: MediaSource::base64(
                    str_field(o, "mimeType").ok_or_else(|| missing("mimeType"))?,
                    str_field(o, "data").ok_or_else(|| missing("data"))?,
                )
                .map_err(|e| RpcError::invalid_params(format!("prompt[{i}] (image): {e}")))?,
            },
            "resource_link" => ContentBlock::Link {
                uri: str_field(o, "uri").ok_or_else(|| missing("uri"))?,
                name: str_field(o, "name"),
                mime_type: str_field(o, "mimeType"),
            },
            "resource" if support.embedded_context => {
                let r = o.get("resource").and_then(Value::as_object).ok_or_else(|| missing("resource"))?;
                ContentBlock::Resource {
                    uri: str_field(r, "uri").ok_or_else(|| missing("resource.uri"))?,
                    mime_type: str_field(r, "mimeType"),
                    text: str_field(r, "text"),
                    blob: str_field(r, "blob"),
                }
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "prompt[{i}]: content type {:?} is not supported by this agent (see promptCapabilities)",
                    crate::rpc::clip(other, 40)
                )));
            }
        };
        out.push(block);
    }
    if out.is_empty() {
        return Err(RpcError::invalid_params("the prompt is empty"));
    }
    Ok(out)
}

/// Core content as ACP content blocks (for a backend agent's prompt, or replay to an editor).
/// Blocks ACP cannot carry become text that says what they were.
pub fn core_to_acp(blocks: &[ContentBlock], support: PromptSupport) -> Vec<Value> {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text_block(text)),
            ContentBlock::Image { source: MediaSource::Base64 { media_type, data } } if support.image => {
                Some(json!({"type": "image", "mimeType": media_type, "data": data}))
            }
            ContentBlock::Image { .. } => Some(text_block("[an image the agent cannot take was omitted]")),
            ContentBlock::Link { uri, name, mime_type } => {
                let mut o =
                    json!({"type": "resource_link", "uri": uri, "name": name.clone().unwrap_or_else(|| uri.clone())});
                if let Some(m) = mime_type {
                    o["mimeType"] = json!(m);
                }
                Some(o)
            }
            ContentBlock::Resource { uri, mime_type, text, blob } if support.embedded_context => {
                let mut r = json!({"uri": uri});
                match (text, blob) {
                    (Some(t), _) => r["text"] = json!(t),
                    (None, Some(b)) => r["blob"] = json!(b),
                    (None, None) => r["text"] = json!(""),
                }
                if let Some(m) = mime_type {
                    r["mimeType"] = json!(m);
                }
                Some(json!({"type": "resource", "resource": r}))
            }
            ContentBlock::Resource { uri, text: Some(t), .. } => Some(text_block(&format!("Contents of {uri}:\n{t}"))),
            ContentBlock::Resource { uri, .. } => Some(text_block(&format!("[binary resource {uri}]"))),
            ContentBlock::Document { source: MediaSource::Text { data, .. }, .. } => Some(text_block(data)),
            ContentBlock::Document { title, .. } => {
                Some(text_block(&format!("[document {} omitted]", title.as_deref().unwrap_or(""))))
            }
            ContentBlock::Data { data } => Some(text_block(&data.to_string())),
            ContentBlock::Redacted => None,
        })
        .collect()
}

pub fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// ACP content blocks (from a backend agent) as core content; unknown types are skipped.
pub fn acp_to_core(block: &Value) -> Option<ContentBlock> {
    let o = block.as_object()?;
    match o.get("type").and_then(Value::as_str)? {
        "text" => Some(ContentBlock::Text { text: str_field(o, "text")? }),
        "image" => Some(ContentBlock::Image {
            source: MediaSource::Base64 { media_type: str_field(o, "mimeType")?, data: str_field(o, "data")? },
        }),
        "resource_link" => Some(ContentBlock::Link {
            uri: str_field(o, "uri")?,
            name: str_field(o, "name"),
            mime_type: str_field(o, "mimeType"),
        }),
        "resource" => {
            let r = o.get("resource")?.as_object()?;
            Some(ContentBlock::Resource {
                uri: str_field(r, "uri")?,
                mime_type: str_field(r, "mimeType"),
                text: str_field(r, "text"),
                blob: str_field(r, "blob"),
            })
        }
        _ => None,
    }
}

/// The ACP tool kind of a built-in tool.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "bash" => "execute",
        "read" => "read",
        "write" | "edit" => "edit",
        "glob" | "grep" | "web_search" => "search",
        "web_fetch" => "fetch",
        _ => "other",
    }
}

/// The four permission options the editor face offers, selected back by `kind`.
pub fn permission_options(tool: &str) -> Value {
    json!([
        {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "allow_always", "name": format!("Always allow {tool} in this session"), "kind": "allow_always"},
        {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
        {"optionId": "reject_always", "name": format!("Always reject {tool} in this session"), "kind": "reject_always"},
    ])
}

/// How the editor answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionAnswer {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
    Cancelled,
}

/// Reads a `session/request_permission` result against the options that were offered
/// (`[{optionId, kind}]`): the chosen option's *kind* decides, never its position or label.
pub fn read_permission_outcome(result: &Value, offered: &Value) -> PermissionAnswer {
    let outcome = result.get("outcome");
    let selected = outcome.and_then(|o| o.get("outcome")).and_then(Value::as_str) == Some("selected");
    let option = outcome.and_then(|o| o.get("optionId")).and_then(Value::as_str);
    let kind = offered.as_array().and_then(|opts| {
        opts.iter()
            .find(|o| o.get("optionId").and_then(Value::as_str) == option)
            .and_then(|o| o.get("kind").and_then(Value::as_str))
    });
    match (selected, kind) {
        (true, Some("allow_once")) => PermissionAnswer::AllowOnce,
        (true, Some("allow_always")) => PermissionAnswer::AllowAlways,
        (true, Some("reject_always")) => PermissionAnswer::RejectAlways,
        (true, _) => PermissionAnswer::RejectOnce,
        (false, _) => PermissionAnswer::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_convert_and_refuse_what_is_not_offered() {
        let p = json!([
            {"type": "text", "text": "hi", "annotations": {"priority": 1}},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "B"}}
        ]);
        let all = PromptSupport { image: true, embedded_context: true };
        let core = prompt_to_core(&p, all).expect("converts");
        assert_eq!(core.len(), 3);
        assert_eq!(core_to_acp(&core, all)[2]["resource"]["text"], "B");
        let err = prompt_to_core(&p, PromptSupport::default()).expect_err("resource refused");
        assert!(err.message.contains("\"resource\""), "{err:?}");
        let img = json!([{"type": "image", "mimeType": "image/png", "data": "AA=="}]);
        assert!(prompt_to_core(&img, PromptSupport::default()).is_err());
        assert!(prompt_to_core(&img, all).is_ok());
        assert!(prompt_to_core(&json!([]), all).is_err());
        assert!(prompt_to_core(&json!([{"type": "text"}]), all).is_err());
        assert!(prompt_to_core(&json!([{"type": "audio", "data": "", "mimeType": "a"}]), all).is_err());
    }

    #[test]
    fn permission_answers_go_by_kind() {
        let offered = json!([{"optionId": "x", "kind": "allow_always"}, {"optionId": "y", "kind": "reject_once"}]);
        let pick = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        assert_eq!(read_permission_outcome(&pick("x"), &offered), PermissionAnswer::AllowAlways);
        assert_eq!(read_permission_outcome(&pick("y"), &offered), PermissionAnswer::RejectOnce);
        assert_eq!(read_permission_outcome(&pick("zzz"), &offered), PermissionAnswer::RejectOnce);
        let cancelled = json!({"outcome": {"outcome": "cancelled"}});
        assert_eq!(read_permission_outcome(&cancelled, &offered), PermissionAnswer::Cancelled);
        assert_eq!(read_permission_outcome(&json!({}), &offered), PermissionAnswer::Cancelled);
    }
}
