//! The neutral shape of a tool result and the cut that keeps it within
//! [`Limits::max_result_bytes`](crate::Limits::max_result_bytes).
//!
//! The transport already refused any message over `max_message_bytes`, so the result in memory is
//! bounded; this cut bounds what travels on to the model and the event log. The cut is visible (a
//! text block saying what was kept), never silent: a model reading half a file must know it.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::tools::json_len;

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    /// An image: its MIME type and its bytes in base64, as the server sent them.
    Image {
        mime_type: String,
        data: String,
    },
    /// Anything else (audio, an embedded resource, a resource link), kept as its JSON.
    Other(Value),
}

impl Content {
    fn size(&self) -> usize {
        match self {
            Content::Text(t) => t.len(),
            Content::Image { mime_type, data } => mime_type.len() + data.len(),
            Content::Other(v) => json_len(v),
        }
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<Content>,
    /// The tool itself reported failure (the call reached it; the model should see why).
    pub is_error: bool,
    /// Content was cut to the result bound; the last block says so.
    pub truncated: bool,
}

/// Converts and bounds a result. Structured content is kept as JSON text only when the server
/// sent no content blocks (the protocol asks servers to mirror it as text otherwise).
pub(crate) fn bounded_output(result: CallToolResult, max_bytes: usize) -> ToolOutput {
    let mut blocks: Vec<Content> = result.content.into_iter().map(neutral).collect();
    if blocks.is_empty()
        && let Some(structured) = result.structured_content
    {
        blocks.push(Content::Text(structured.to_string()));
    }
    let (content, truncated) = cut(blocks, max_bytes);
    ToolOutput { content, is_error: result.is_error.unwrap_or(false), truncated }
}

fn neutral(block: ContentBlock) -> Content {
    match block {
        ContentBlock::Text(text) => Content::Text(text.text),
        ContentBlock::Image(image) => Content::Image { mime_type: image.mime_type, data: image.data },
        other => Content::Other(serde_json::to_value(&other).unwrap_or(Value::Null)),
    }
}

/// Keeps blocks while they fit in `max_bytes`. The first block that does not fit is cut when it
/// is text (at a character boundary) and dropped otherwise; every later block is dropped; a final
/// text block says how much was kept.
fn cut(blocks: Vec<Content>, max_bytes: usize) -> (Vec<Content>, bool) {
    let total: usize = blocks.iter().map(Content::size).sum();
    if total <= max_bytes {
        return (blocks, false);
    }
    let mut kept = Vec::new();
    let mut used = 0;
    for block in blocks {
        let size = block.size();
        if used + size <= max_bytes {
            used += size;
            kept.push(block);
            continue;
        }
        if let Content::Text(mut text) = block {
            let mut end = max_bytes - used;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            if end > 0 {
                text.truncate(end);
                used += end;
                kept.push(Content::Text(text));
            }
        }
        break;
    }
    kept.push(Content::Text(format!(
        "[output truncated by the gateway: kept {used} of {total} bytes; the limit is {max_bytes} bytes]"
    )));
    (kept, true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn small_results_pass_unchanged() {
        let blocks = vec![Content::Text("hello".into()), Content::Other(json!({"type": "audio"}))];
        assert_eq!(cut(blocks.clone(), 1000), (blocks, false));
    }

    #[test]
    fn oversized_text_is_cut_at_a_char_boundary_with_a_marker() {
        let (kept, truncated) = cut(vec![Content::Text("ab€cd".into()), Content::Text("later".into())], 3);
        assert!(truncated);
        assert_eq!(kept[0], Content::Text("ab".into()));
        assert_eq!(kept.len(), 2);
        assert!(matches!(&kept[1], Content::Text(m) if m.contains("kept 2 of 12 bytes")));
    }

    #[test]
    fn an_image_over_the_bound_is_dropped_not_cut() {
        let image = Content::Image { mime_type: "image/png".into(), data: "A".repeat(100) };
        let (kept, truncated) = cut(vec![Content::Text("caption".into()), image], 50);
        assert!(truncated);
        assert_eq!(kept[0], Content::Text("caption".into()));
        assert!(matches!(&kept[1], Content::Text(m) if m.starts_with("[output truncated")));
    }

    #[test]
    fn structured_content_stands_in_for_missing_blocks() {
        let result = CallToolResult::structured(json!({"sum": 3}));
        let mut result = result;
        result.content.clear();
        let out = bounded_output(result, 100);
        assert_eq!(out.content, vec![Content::Text(r#"{"sum":3}"#.into())]);
        assert!(!out.is_error);
    }
}
