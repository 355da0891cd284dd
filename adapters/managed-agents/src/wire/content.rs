//! Content blocks: Managed Agents wire <-> core.

use gateway_core::content::{ContentBlock, MediaSource};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;

/// A content block as a client sends it: one of the core's blocks, whose `text`, `image` and
/// `document` shapes (and their sources' `base64`, `url`, `file`, `text`) are this API's, or a
/// `search_result`. [`blocks_in`] refuses the core blocks this API does not define and checks
/// what serde cannot.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockIn {
    SearchResult {
        source: String,
        title: String,
        #[serde(default)]
        content: Vec<TextIn>,
    },
    #[serde(untagged)]
    Core(ContentBlock),
}

#[derive(Debug, Deserialize)]
pub struct TextIn {
    pub text: String,
}

/// Converts wire blocks; `allow_search` admits `search_result` (tool results only).
pub fn blocks_in(blocks: Vec<BlockIn>, allow_search: bool) -> Result<Vec<ContentBlock>, ApiError> {
    if blocks.len() > 1000 {
        return Err(ApiError::invalid("content has more than 1000 blocks"));
    }
    blocks
        .into_iter()
        .map(|b| match b {
            BlockIn::Core(text @ ContentBlock::Text { .. }) => Ok(text),
            BlockIn::Core(ContentBlock::Image { source }) => {
                Ok(ContentBlock::Image { source: source_in(source, Kind::Image)? })
            }
            BlockIn::Core(ContentBlock::Document { source, title, context }) => {
                Ok(ContentBlock::Document { source: source_in(source, Kind::Document)?, title, context })
            }
            BlockIn::Core(other) => {
                let kind = serde_json::to_value(&other).ok().and_then(|v| v["type"].as_str().map(str::to_owned));
                Err(ApiError::invalid(format!(
                    "unknown content block type {:?}: expected text, image, document or search_result",
                    kind.unwrap_or_default()
                )))
            }
            BlockIn::SearchResult { source, title, content } if allow_search => {
                let text = content.into_iter().map(|t| t.text).collect::<Vec<_>>().join("\n");
                Ok(ContentBlock::Text { text: format!("{title} ({source})\n{text}") })
            }
            BlockIn::SearchResult { .. } => {
                Err(ApiError::invalid("search_result blocks are only allowed in tool results"))
            }
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Image,
    Document,
}

/// A source as the block it is in allows it: base64 data that decodes, and a `text` source
/// only in a document, as `text/plain`.
fn source_in(s: MediaSource, kind: Kind) -> Result<MediaSource, ApiError> {
    match s {
        MediaSource::Base64 { media_type, data } => {
            MediaSource::base64(media_type, data).map_err(|e| ApiError::invalid(e.to_string()))
        }
        MediaSource::Text { .. } if kind == Kind::Image => {
            Err(ApiError::invalid("an image source must be of type base64, url or file, not text"))
        }
        MediaSource::Text { media_type, .. } if media_type != "text/plain" => Err(ApiError::invalid(format!(
            "a text document source must have media_type \"text/plain\", not {media_type:?}"
        ))),
        other => Ok(other),
    }
}

fn source_out(s: &MediaSource) -> Value {
    match s {
        MediaSource::Base64 { media_type, data } => json!({"type": "base64", "media_type": media_type, "data": data}),
        MediaSource::Url { url } => json!({"type": "url", "url": url}),
        MediaSource::File { file_id } => json!({"type": "file", "file_id": file_id}),
        MediaSource::Text { media_type, data } => json!({"type": "text", "media_type": media_type, "data": data}),
    }
}

/// Core blocks in wire form. `text_only` (agent messages) renders anything but text as text.
pub fn blocks_out(blocks: &[ContentBlock], text_only: bool) -> Vec<Value> {
    blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => json!({"type": "text", "text": text}),
            ContentBlock::Redacted => json!({"type": "redacted"}),
            ContentBlock::Image { source } if !text_only => json!({"type": "image", "source": source_out(source)}),
            ContentBlock::Document { source, title, context } if !text_only => {
                let mut d = json!({"type": "document", "source": source_out(source)});
                if let Some(t) = title {
                    d["title"] = json!(t);
                }
                if let Some(c) = context {
                    d["context"] = json!(c);
                }
                d
            }
            ContentBlock::Link { uri, name, .. } => {
                json!({"type": "text", "text": format!("[{}]({uri})", name.clone().unwrap_or_else(|| uri.clone()))})
            }
            ContentBlock::Resource { uri, text: Some(t), .. } => json!({"type": "text", "text": format!("{uri}:\n{t}")}),
            ContentBlock::Resource { uri, .. } => json!({"type": "text", "text": format!("[binary resource {uri}]")}),
            ContentBlock::Data { data } => json!({"type": "text", "text": data.to_string()}),
            ContentBlock::Image { .. } => json!({"type": "text", "text": "[image]"}),
            ContentBlock::Document { title, .. } => {
                json!({"type": "text", "text": format!("[document{}]", title.as_ref().map(|t| format!(" {t}")).unwrap_or_default())})
            }
        })
        .collect()
}
