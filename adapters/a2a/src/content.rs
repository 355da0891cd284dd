//! A2A parts <-> the core's content blocks.
//!
//! `text` -> Text, `data` -> Data, `url` -> Link, `raw` -> Resource (base64 blob). The reverse
//! direction maps every block the core can hold; `Redacted` is dropped.

use gateway_core::content::{ContentBlock, MediaSource};

use crate::error::A2aError;
use crate::wire::Part;

/// Media types our agents accept, besides parts without a declared type.
pub const INPUT_MODES: [&str; 2] = ["text/plain", "application/json"];

/// Longest accepted text part, data part or base64 payload (bytes).
const MAX_PART: usize = 4 * 1024 * 1024;
/// Most parts one message may carry.
pub const MAX_PARTS: usize = 64;

fn accepted(media_type: &str) -> bool {
    let base = media_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    INPUT_MODES.contains(&base.as_str()) || base.starts_with("text/") || base.starts_with("image/")
}

/// Converts incoming parts, refusing unaccepted media types and oversized content.
pub fn blocks_from_parts(parts: &[Part]) -> Result<Vec<ContentBlock>, A2aError> {
    if parts.is_empty() {
        return Err(A2aError::InvalidParams("message.parts must not be empty".into()));
    }
    if parts.len() > MAX_PARTS {
        return Err(A2aError::InvalidParams(format!("a message may carry at most {MAX_PARTS} parts")));
    }
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        if let Some(mt) = &p.media_type
            && !accepted(mt)
        {
            return Err(A2aError::ContentTypeNotSupported(format!(
                "part {i} has media type {:?}; accepted: {} (and text/*, image/*)",
                mt.chars().take(100).collect::<String>(),
                INPUT_MODES.join(", ")
            )));
        }
        let block = if let Some(t) = &p.text {
            bounded(i, t.len())?;
            ContentBlock::Text { text: t.clone() }
        } else if let Some(d) = &p.data {
            bounded(i, d.to_string().len())?;
            ContentBlock::Data { data: d.clone() }
        } else if let Some(u) = &p.url {
            bounded(i, u.len())?;
            ContentBlock::Link { uri: u.clone(), name: p.filename.clone(), mime_type: p.media_type.clone() }
        } else if let Some(raw) = &p.raw {
            bounded(i, raw.len())?;
            ContentBlock::Resource {
                uri: p.filename.clone().unwrap_or_default(),
                mime_type: p.media_type.clone(),
                text: None,
                blob: Some(raw.clone()),
            }
        } else {
            return Err(A2aError::InvalidParams(format!("part {i} has none of text, raw, url, data")));
        };
        out.push(block);
    }
    Ok(out)
}

fn bounded(i: usize, len: usize) -> Result<(), A2aError> {
    if len > MAX_PART {
        return Err(A2aError::InvalidParams(format!("part {i} exceeds {MAX_PART} bytes")));
    }
    Ok(())
}

/// The parts a content block projects to (none for withheld content).
pub fn part_from_block(b: &ContentBlock) -> Option<Part> {
    Some(match b {
        ContentBlock::Text { text } => Part::text(text.clone()),
        ContentBlock::Data { data } => Part::data(data.clone()),
        ContentBlock::Link { uri, name, mime_type } => {
            Part { url: Some(uri.clone()), filename: name.clone(), media_type: mime_type.clone(), ..Default::default() }
        }
        ContentBlock::Resource { uri, mime_type, text, blob } => {
            let filename = (!uri.is_empty()).then(|| uri.clone());
            match (text, blob) {
                (_, Some(b)) => {
                    Part { raw: Some(b.clone()), filename, media_type: mime_type.clone(), ..Default::default() }
                }
                (Some(t), None) => {
                    Part { text: Some(t.clone()), filename, media_type: mime_type.clone(), ..Default::default() }
                }
                (None, None) => Part { url: Some(uri.clone()), media_type: mime_type.clone(), ..Default::default() },
            }
        }
        ContentBlock::Image { source } | ContentBlock::Document { source, .. } => match source {
            MediaSource::Base64 { media_type, data } => {
                Part { raw: Some(data.clone()), media_type: Some(media_type.clone()), ..Default::default() }
            }
            MediaSource::Url { url } => Part { url: Some(url.clone()), ..Default::default() },
            MediaSource::Text { media_type, data } => {
                Part { text: Some(data.clone()), media_type: Some(media_type.clone()), ..Default::default() }
            }
            MediaSource::File { file_id } => Part { url: Some(format!("file:{file_id}")), ..Default::default() },
        },
        ContentBlock::Redacted => return None,
    })
}

pub fn parts_from_blocks(blocks: &[ContentBlock]) -> Vec<Part> {
    blocks.iter().filter_map(part_from_block).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_round_trip_through_blocks() {
        let parts = vec![
            Part::text("hi"),
            Part::data(json!({"k": 1})),
            Part { url: Some("https://e/x".into()), filename: Some("x".into()), ..Default::default() },
            Part { raw: Some("dGNr".into()), media_type: Some("text/plain".into()), ..Default::default() },
        ];
        let blocks = blocks_from_parts(&parts).unwrap();
        assert_eq!(parts_from_blocks(&blocks), parts);
    }

    #[test]
    fn unaccepted_media_types_and_empty_messages_are_refused() {
        let p = Part {
            text: Some("x".into()),
            media_type: Some("application/x-unsupported-tck-type".into()),
            ..Default::default()
        };
        assert_eq!(blocks_from_parts(&[p]).unwrap_err().code(), -32005);
        assert_eq!(blocks_from_parts(&[]).unwrap_err().code(), -32602);
        assert_eq!(blocks_from_parts(&[Part::default()]).unwrap_err().code(), -32602);
    }
}
