//! The bearer token a connection presents. It lives in one type so it cannot leak by accident:
//! its `Debug` prints `[redacted]`, it has no `Display`, and [`BearerToken::scrub`] removes it
//! from any text (an error message built from a peer's answer) before that text leaves the crate.

use std::fmt;

/// An `Authorization: Bearer` credential for one MCP server connection.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token itself, for the one place that writes the header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the token replaced by `[redacted]`. A server may echo the
    /// header it received in an error body, which rmcp keeps in its error message.
    pub(crate) fn scrub(&self, text: String) -> String {
        if self.0.is_empty() || !text.contains(&self.0) {
            return text;
        }
        text.replace(&self.0, "[redacted]")
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let token = BearerToken::new("s3cr3t-value");
        assert_eq!(format!("{token:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(&token)), "Some([redacted])");
    }

    #[test]
    fn scrub_removes_every_occurrence() {
        let token = BearerToken::new("abc123");
        assert_eq!(token.scrub("got abc123 and abc123!".into()), "got [redacted] and [redacted]!");
        assert_eq!(token.scrub("nothing here".into()), "nothing here");
        assert_eq!(BearerToken::new("").scrub("keep".into()), "keep");
    }
}
