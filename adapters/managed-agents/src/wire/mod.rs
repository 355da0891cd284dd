//! Wire shapes of the Managed Agents API and their translation to and from the core.
//! Tolerant on input (unknown fields ignored), exact on output (every required key).

pub mod agent;
pub mod content;
pub mod environment;
pub mod event;
pub mod session;
pub mod vault;
pub mod work;

use gateway_core::{Metadata, Timestamp};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::error::ApiError;

pub fn time(t: Timestamp) -> Value {
    Value::String(t.to_rfc3339())
}

pub fn opt_time(t: Option<Timestamp>) -> Value {
    t.map(time).unwrap_or(Value::Null)
}

/// A field of an update: absent (keep), `null` (clear), or a value (replace).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Patch<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            None => Patch::Clear,
            Some(v) => Patch::Set(v),
        })
    }
}

impl<T> Patch<T> {
    pub fn apply(self, current: Option<T>) -> Option<T> {
        match self {
            Patch::Keep => current,
            Patch::Clear => None,
            Patch::Set(v) => Some(v),
        }
    }
}

/// Checks metadata limits: at most 16 pairs, keys up to 64 and values up to 512 characters.
pub fn check_metadata(m: &Metadata) -> Result<(), ApiError> {
    if m.len() > 16 {
        return Err(ApiError::invalid(format!("metadata has {} pairs; at most 16 are allowed", m.len()))
            .code("invalid_metadata"));
    }
    for (k, v) in m {
        if k.is_empty() || k.chars().count() > 64 {
            return Err(
                ApiError::invalid(format!("metadata key {k:?} must be 1 to 64 characters")).code("invalid_metadata")
            );
        }
        if v.chars().count() > 512 {
            return Err(
                ApiError::invalid(format!("metadata value of {k:?} exceeds 512 characters")).code("invalid_metadata")
            );
        }
    }
    Ok(())
}

/// Merges a metadata patch: a `null` value deletes its key.
pub fn merge_metadata(
    current: &Metadata,
    patch: std::collections::BTreeMap<String, Option<String>>,
) -> Result<Metadata, ApiError> {
    let mut out = current.clone();
    for (k, v) in patch {
        match v {
            Some(v) => {
                out.insert(k, v);
            }
            None => {
                out.remove(&k);
            }
        }
    }
    check_metadata(&out)?;
    Ok(out)
}

/// Checks a required, bounded string.
pub fn check_text(field: &str, v: &str, max: usize) -> Result<(), ApiError> {
    if v.trim().is_empty() {
        return Err(ApiError::invalid(format!("{field} must not be empty")));
    }
    if v.chars().count() > max {
        return Err(ApiError::invalid(format!("{field} exceeds {max} characters")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Patch;
    use super::agent::{AgentCreate, AgentUpdate};
    use super::environment::EnvironmentUpdate;

    /// Optional fields need no `#[serde(default)]`: absent and `null` both read as `None`;
    /// an update's absent field keeps, its `null` clears (the container's default).
    #[test]
    fn absent_fields_read_as_none_and_keep() {
        let a: AgentCreate = serde_json::from_str(r#"{"name":"a","model":"m"}"#).unwrap();
        assert!(a.system.is_none() && a.tools.is_none() && a.metadata.is_none() && a.backend.is_none());
        let a: AgentCreate = serde_json::from_str(r#"{"name":"a","model":"m","system":null,"tools":null}"#).unwrap();
        assert!(a.system.is_none() && a.tools.is_none());
        let u: AgentUpdate = serde_json::from_str(r#"{"system":null}"#).unwrap();
        assert_eq!((u.version, u.name, u.system), (None, Patch::Keep, Patch::Clear));
        let e: EnvironmentUpdate = serde_json::from_str(r#"{"name":"n"}"#).unwrap();
        assert_eq!((e.name, e.description), (Patch::Set("n".to_owned()), Patch::Keep));
    }

    /// Blocks are read into the core's blocks where the shapes are the same; the core blocks
    /// this API does not define, a `text` image source, a bad media type and undecodable
    /// base64 are refused by name.
    #[test]
    fn content_blocks_read_into_core_blocks_or_are_refused() {
        use super::content::{BlockIn, blocks_in};
        use gateway_core::content::{ContentBlock, MediaSource};
        let read = |j: &str, search: bool| {
            let blocks: Vec<BlockIn> = serde_json::from_str(j).map_err(|e| e.to_string())?;
            blocks_in(blocks, search).map_err(|e| format!("{e:?}"))
        };
        let ok = read(
            r#"[{"type":"text","text":"hi"},{"type":"image","source":{"type":"url","url":"u"}},
                {"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"},"title":"t"},
                {"type":"search_result","source":"s","title":"T","content":[{"text":"x"}]}]"#,
            true,
        );
        assert_eq!(
            ok,
            Ok(vec![
                ContentBlock::text("hi"),
                ContentBlock::Image { source: MediaSource::Url { url: "u".into() } },
                ContentBlock::Document {
                    source: MediaSource::Text { media_type: "text/plain".into(), data: "d".into() },
                    title: Some("t".into()),
                    context: None,
                },
                ContentBlock::text("T (s)\nx"),
            ])
        );
        for (j, search, says) in [
            (r#"[{"type":"redacted"}]"#, true, "unknown content block type \\\"redacted\\\""),
            (r#"[{"type":"data","data":{}}]"#, true, "unknown content block type \\\"data\\\""),
            (r#"[{"type":"image","source":{"type":"text","media_type":"text/plain","data":"d"}}]"#, true, "not text"),
            (
                r#"[{"type":"document","source":{"type":"text","media_type":"text/html","data":"d"}}]"#,
                true,
                "text/plain",
            ),
            (r#"[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"@@"}}]"#, true, "base64"),
            (r#"[{"type":"search_result","source":"s","title":"T"}]"#, false, "only allowed in tool results"),
        ] {
            let got = read(j, search).unwrap_err();
            assert!(got.contains(says), "{j}: {got}");
        }
        assert!(read(r#"[{"type":"bogus"}]"#, true).is_err());
    }
}
