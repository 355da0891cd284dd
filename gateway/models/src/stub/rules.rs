//! What the real Messages API checks and counts beyond the fake model's script, so tests prove
//! the client does what the API requires:
//!
//! - **Extended thinking.** A request with `thinking` enabled is answered with a `thinking`
//!   block first (a `redacted_thinking` one when the last user text contains `redacted`),
//!   signed by the stub. As the API does, a request whose final assistant message calls a tool
//!   must start that message with a thinking block, and every thinking block sent back must
//!   carry the signature the stub gave it, byte for byte: otherwise 400.
//! - **Prompt caching.** Blocks are read in the API's cache order (tools, system, messages); a
//!   `cache_control` breakpoint writes the prefix up to it, and a later request whose prefix
//!   up to one of its breakpoints (or up to 20 blocks before one) was written reads it:
//!   `cache_read_input_tokens` and `cache_creation_input_tokens` are counted as the fake counts
//!   tokens (characters / 4), the rest stays `input_tokens`. Unlike the API, any length caches.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use crate::{Block, ModelResponse, Role};

/// How far before a breakpoint the API looks for an earlier cached prefix.
const LOOKBACK_BLOCKS: usize = 20;

/// The stub's signature of a thinking text (or of redacted data's seed).
pub(crate) fn sign(text: &str) -> String {
    let mut h = DefaultHasher::new();
    "stub-thinking".hash(&mut h);
    text.hash(&mut h);
    format!("stubsig{:016x}", h.finish())
}

/// Extended thinking's budget asked for, if any.
pub(crate) fn thinking_budget(body: &Value) -> Option<u64> {
    let thinking = body.get("thinking")?;
    match thinking.get("type").and_then(Value::as_str) {
        Some("enabled") => thinking.get("budget_tokens").and_then(Value::as_u64),
        Some("adaptive") => Some(0),
        _ => None,
    }
}

/// The API's checks of the thinking blocks a request sends back; the error is a 400's message.
pub(crate) fn check_thinking(body: &Value) -> Result<(), String> {
    let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let enabled = thinking_budget(body).is_some();
    if let Some(max) = body.get("max_tokens").and_then(Value::as_u64)
        && let Some(budget) = thinking_budget(body).filter(|b| *b > 0)
    {
        if budget < 1024 {
            return Err("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into());
        }
        if budget >= max {
            return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
        }
    }
    for (n, message) in messages.iter().enumerate() {
        let Some(blocks) = message.get("content").and_then(Value::as_array) else { continue };
        for (k, block) in blocks.iter().enumerate() {
            match block.get("type").and_then(Value::as_str) {
                Some("thinking") => {
                    let text = block.get("thinking").and_then(Value::as_str).unwrap_or_default();
                    let signature = block.get("signature").and_then(Value::as_str).unwrap_or_default();
                    if signature != sign(text) {
                        return Err(format!("messages.{n}.content.{k}: Invalid `signature` in `thinking` block"));
                    }
                }
                Some("redacted_thinking") => {
                    let data = block.get("data").and_then(Value::as_str).unwrap_or_default();
                    if !redacted_is_ours(data) {
                        return Err(format!("messages.{n}.content.{k}: Invalid `data` in `redacted_thinking` block"));
                    }
                }
                _ => {}
            }
        }
    }
    if !enabled {
        return Ok(());
    }
    let last_assistant = messages.iter().enumerate().rev().find(|(_, m)| m.get("role") == Some(&"assistant".into()));
    if let Some((n, message)) = last_assistant {
        let blocks = message.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let calls = blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
        let first = blocks.first().and_then(|b| b.get("type")).and_then(Value::as_str).unwrap_or("");
        if calls && !matches!(first, "thinking" | "redacted_thinking") {
            return Err(format!(
                "messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When \
                 `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
                 lastmost set of `tool_use` and `tool_result` blocks)."
            ));
        }
    }
    Ok(())
}

/// Whether redacted reasoning is as the stub gave it: `redacted:<seed><signature of seed>`.
fn redacted_is_ours(data: &str) -> bool {
    let Some(rest) = data.strip_prefix("redacted:") else { return false };
    rest.len() > SEED_CHARS && rest.is_char_boundary(SEED_CHARS) && {
        let (seed, signature) = rest.split_at(SEED_CHARS);
        signature == sign(seed)
    }
}

/// Hex digits of a redacted block's seed.
const SEED_CHARS: usize = 16;

/// Puts the model's reasoning first in a response to a thinking request.
pub(crate) fn add_thinking(response: &mut ModelResponse, last_user_text: &str) {
    let block = if last_user_text.contains("redacted") {
        let seed = format!("{:016x}", {
            let mut h = DefaultHasher::new();
            last_user_text.hash(&mut h);
            h.finish()
        });
        Block::RedactedThinking { data: format!("redacted:{seed}{}", sign(&seed)) }
    } else {
        let quoted: String = last_user_text.chars().take(80).collect();
        let thinking = format!("The user said {quoted:?}; I follow my script.");
        Block::Thinking { signature: sign(&thinking), thinking }
    };
    response.content.insert(0, block);
}

/// The last user text of a request as the fake reads it (for the reasoning's wording).
pub(crate) fn last_user_text(request: &crate::ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.iter().rev())
        .find_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The prompt cache the stub keeps across requests: the prefixes breakpoints wrote.
#[derive(Default)]
pub(crate) struct PromptCache {
    written: HashSet<u64>,
}

/// What a request read from and wrote to the cache, in tokens.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CacheUse {
    pub read: u64,
    pub written: u64,
}

impl PromptCache {
    /// Accounts one request: reads the longest cached prefix a breakpoint reaches, writes the
    /// prefixes of its breakpoints past it.
    pub(crate) fn account(&mut self, body: &Value) -> CacheUse {
        let segments = segments(body);
        let mut prefix = DefaultHasher::new();
        let mut hashes = Vec::with_capacity(segments.len());
        let mut chars = Vec::with_capacity(segments.len());
        let mut total = 0usize;
        for (json, _) in &segments {
            json.hash(&mut prefix);
            hashes.push(prefix.finish());
            total += weight(json);
            chars.push(total);
        }
        let breakpoints: Vec<usize> = segments.iter().enumerate().filter(|(_, (_, bp))| *bp).map(|(i, _)| i).collect();
        let hit = breakpoints
            .iter()
            .flat_map(|&b| (b.saturating_sub(LOOKBACK_BLOCKS - 1)..=b).rev())
            .filter(|&i| self.written.contains(&hashes[i]))
            .max();
        let Some(&last) = breakpoints.last() else { return CacheUse::default() };
        for &b in &breakpoints {
            self.written.insert(hashes[b]);
        }
        let read_chars = hit.map_or(0, |i| chars[i]);
        CacheUse { read: (read_chars / 4) as u64, written: (chars[last].saturating_sub(read_chars) / 4) as u64 }
    }
}

/// A block's size in characters, as the fake model counts it: a text block's text, else
/// the block's JSON.
fn weight(json: &str) -> usize {
    let parsed: Option<Value> = serde_json::from_str(json).ok();
    match parsed.as_ref().and_then(|b| b.get("text")).and_then(Value::as_str) {
        Some(text) => text.chars().count(),
        None => json.chars().count(),
    }
}

/// The request's blocks in cache order, each as canonical text without its breakpoint, and
/// whether it carries one.
fn segments(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |block: &Value| {
        let mut block = block.clone();
        let breakpoint = block.as_object_mut().and_then(|o| o.remove("cache_control")).is_some();
        out.push((block.to_string(), breakpoint));
    };
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        push(tool);
    }
    match body.get("system") {
        Some(Value::Array(blocks)) => blocks.iter().for_each(&mut push),
        Some(text @ Value::String(_)) => push(text),
        _ => {}
    }
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().for_each(&mut push),
            Some(text) => push(text),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_breakpoint_writes_its_prefix_and_a_later_one_reads_it() {
        let mut cache = PromptCache::default();
        let cc = json!({"type": "ephemeral"});
        let first = json!({"system": [{"type": "text", "text": "s".repeat(400), "cache_control": cc}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "u".repeat(40), "cache_control": cc}]}]});
        assert_eq!(cache.account(&first), CacheUse { read: 0, written: 110 });
        let second = json!({"system": [{"type": "text", "text": "s".repeat(400), "cache_control": cc}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "u".repeat(40)}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "a".repeat(40)}]},
                         {"role": "user", "content": [{"type": "text", "text": "v".repeat(40), "cache_control": cc}]}]});
        // The prefix through the first user block was written; the rest is written now.
        assert_eq!(cache.account(&second), CacheUse { read: 110, written: 20 });
        assert_eq!(cache.account(&json!({"messages": [{"role": "user", "content": "x"}]})), CacheUse::default());
    }

    #[test]
    fn thinking_sent_back_must_be_signed_and_lead_a_tool_calling_turn() {
        let thought = "I think.";
        let body = |first: serde_json::Value| {
            json!({"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [first, {"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]})
        };
        let good = json!({"type": "thinking", "thinking": thought, "signature": sign(thought)});
        assert_eq!(check_thinking(&body(good)), Ok(()));
        let forged = json!({"type": "thinking", "thinking": "I think!", "signature": sign(thought)});
        assert!(check_thinking(&body(forged)).unwrap_err().contains("Invalid `signature`"));
        let lost = json!({"type": "text", "text": "hm"});
        assert!(check_thinking(&body(lost)).unwrap_err().contains("must start with a thinking block"));
        let mut small = body(json!({"type": "text", "text": "hm"}));
        small["thinking"]["budget_tokens"] = json!(5000);
        assert!(check_thinking(&small).unwrap_err().contains("max_tokens"));
    }
}
