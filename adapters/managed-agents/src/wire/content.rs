//! Content blocks: Managed Agents wire <-> core.

use gateway_core::content::{ContentBlock, MediaSource};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockIn {
    Text {
        text: String,
    },
    Image {
        source: ImageSourceIn,
    },
    Document {
        source: DocumentSourceIn,
        title: Option<String>,
        context: Option<String>,
    },
    SearchResult {
        source: String,
        title: String,
        #[serde(default)]
        content: Vec<TextIn>,
    },
}

#[derive(Debug, Deserialize)]
pub struct TextIn {
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSourceIn {
    Base64 { media_type: String, data: String },
    Url { url: String },
    File { file_id: String },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DocumentSourceIn {
    Base64 { media_type: String, data: String },
    Url { url: String },
    File { file_id: String },
    Text { media_type: String, data: String },
}

/// Converts wire blocks; `allow_search` admits `search_result` (tool results only).
pub fn blocks_in(blocks: Vec<BlockIn>, allow_search: bool) -> Result<Vec<ContentBlock>, ApiError> {
    if blocks.len() > 1000 {
        return Err(ApiError::invalid("content has more than 1000 blocks"));
    }
    blocks
        .into_iter()
        .map(|b| match b {
            BlockIn::Text { text } => Ok(ContentBlock::Text { text }),
            BlockIn::Image { source } => Ok(ContentBlock::Image { source: image_source_in(source)? }),
            BlockIn::Document { source, title, context } => {
                Ok(ContentBlock::Document { source: document_source_in(source)?, title, context })
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

fn image_source_in(s: ImageSourceIn) -> Result<MediaSource, ApiError> {
    Ok(match s {
        ImageSourceIn::Base64 { media_type, data } => base64_source(media_type, data)?,
        ImageSourceIn::Url { url } => MediaSource::Url { url },
        ImageSourceIn::File { file_id } => MediaSource::File { file_id },
    })
}

fn base64_source(media_type: String, data: String) -> Result<MediaSource, ApiError> {
    MediaSource::base64(media_type, data).map_err(|e| ApiError::invalid(e.to_string()))
}

fn document_source_in(s: DocumentSourceIn) -> Result<MediaSource, ApiError> {
    Ok(match s {
        DocumentSourceIn::Base64 { media_type, data } => base64_source(media_type, data)?,
        DocumentSourceIn::Url { url } => MediaSource::Url { url },
        DocumentSourceIn::File { file_id } => MediaSource::File { file_id },
        DocumentSourceIn::Text { media_type, data } => {
            if media_type != "text/plain" {
                return Err(ApiError::invalid(format!(
                    "a text document source must have media_type \"text/plain\", not {media_type:?}"
                )));
            }
            MediaSource::Text { media_type, data }
        }
    })
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
