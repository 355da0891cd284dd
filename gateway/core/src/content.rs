//! Content blocks: what users send and agents produce, in the core's own shape.
//!
//! The set is the union of what the three protocols carry (text, images, documents, links to
//! resources, embedded resources, structured data); each adapter maps its wire parts onto it
//! and rejects what its backend cannot take.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        source: MediaSource,
    },
    Document {
        source: MediaSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<String>,
    },
    /// A reference to a resource the agent may fetch (ACP `resource_link`, A2A `url` part).
    Link {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A resource whose content travels inline (ACP embedded `resource`).
    Resource {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Base64 bytes, when the resource is binary.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    /// Structured data (A2A `data` part). Arbitrary by nature.
    Data {
        data: serde_json::Value,
    },
    /// Content withheld from the client.
    Redacted,
}

impl ContentBlock {
    pub fn text(s: impl Into<String>) -> Self {
        ContentBlock::Text { text: s.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
    File { file_id: String },
    Text { media_type: String, data: String },
}

/// Inline data that is not base64: refused when it arrives, rather than by a model after
/// the turn started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the data of a base64 source is not valid base64: {0}")]
pub struct InvalidBase64(String);

impl MediaSource {
    /// Inline bytes as every face carries them: standard base64, padded (what the model API
    /// accepts). The data is decoded once here to check it, and kept as given.
    pub fn base64(media_type: impl Into<String>, data: String) -> Result<Self, InvalidBase64> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(&data).map_err(|e| InvalidBase64(e.to_string()))?;
        Ok(MediaSource::Base64 { media_type: media_type.into(), data })
    }
}

/// The concatenated text of a list of blocks (non-text blocks are skipped).
pub fn plain_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}
