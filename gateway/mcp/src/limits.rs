//! The bounds every connection enforces. A tool server is code the gateway does not control: what it
//! sends is bounded before it is kept (message size at the transport, counts and sizes here), and
//! every wait has a deadline so a hung server costs only the operation that waits on it.

use std::time::Duration;

use serde::Deserialize;

/// Per-connection bounds; the defaults suit a model loop (a few hundred tools, results a model can
/// read). Deserializable so the composition root only parses configuration into it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most tools one server may offer; more fail the listing with `TooLarge`.
    pub max_tools: usize,
    /// Most bytes of tool descriptions and input schemas (as JSON) one server may offer in total.
    pub max_schema_bytes: usize,
    /// Most `tools/list` pages followed (a server that hands out cursors forever is cut off).
    pub max_pages: usize,
    /// Most bytes of content one tool result keeps; the rest is cut with a visible marker.
    pub max_result_bytes: usize,
    /// Most bytes of one incoming protocol message (an HTTP body, an SSE event, a stdio line).
    /// Larger messages are refused by the transport before they are buffered.
    pub max_message_bytes: usize,
    /// Deadline of the initialize handshake.
    #[serde(rename = "handshake_timeout_ms", with = "millis")]
    pub handshake_timeout: Duration,
    /// Deadline of one `tools/list` page.
    #[serde(rename = "list_timeout_ms", with = "millis")]
    pub list_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_tools: 512,
            max_schema_bytes: 1024 * 1024,
            max_pages: 64,
            max_result_bytes: 1024 * 1024,
            max_message_bytes: 16 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(30),
            list_timeout: Duration::from_secs(30),
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_overrides_only_what_it_names() {
        let limits: Limits = serde_json::from_str(r#"{"max_tools": 8, "list_timeout_ms": 1500}"#).expect("parses");
        assert_eq!(limits.max_tools, 8);
        assert_eq!(limits.list_timeout, Duration::from_millis(1500));
        assert_eq!(limits.max_result_bytes, Limits::default().max_result_bytes);
        assert!(serde_json::from_str::<Limits>(r#"{"max_tool": 8}"#).is_err());
    }
}
