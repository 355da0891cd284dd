//! The crate's one error type and the one place rmcp's errors are mapped to it.
//!
//! Callers act on the kind, not the text: `Unauthorized` becomes `mcp_authentication_failed_error`
//! (and, for OAuth, one refresh and retry), `Connection` becomes `mcp_connection_failed_error`,
//! the others a failed tool call. Messages never hold the bearer token (every message built from a
//! peer's answer passes through [`BearerToken::scrub`]) nor the server URL (reqwest's own message
//! names it, and a URL's query may carry a credential; only its causes are kept).

use std::error::Error as StdError;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError, StreamableHttpError};

use crate::secret::BearerToken;
use gateway_wire::causes::causes;

/// Why an MCP operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server refused the credentials (HTTP 401 or 403).
    #[error("the MCP server refused the credentials (HTTP {status})")]
    Unauthorized { status: u16 },
    /// The server could not be reached, refused the connection, was refused by the caller's
    /// resolver (SSRF guard), does not speak Streamable HTTP, or closed the connection.
    #[error("cannot reach the MCP server: {0}")]
    Connection(String),
    /// The server did not answer in time; only this operation is lost.
    #[error("the MCP server did not answer {operation} within {}", humanize(*.timeout))]
    Timeout { operation: &'static str, timeout: Duration },
    /// The server answered, but not with what the protocol allows.
    #[error("the MCP server answered outside the protocol: {0}")]
    Protocol(String),
    /// The server answered the request with a JSON-RPC error (an unknown tool, bad arguments).
    #[error("the MCP server rejected the request (code {code}): {message}")]
    Rejected { code: i32, message: String },
    /// The caller's arguments cannot be sent (they must be a JSON object).
    #[error("bad tool arguments: {0}")]
    BadArguments(String),
    /// An answer exceeded one of the client's bounds ([`crate::Limits`]).
    #[error("the MCP server's answer exceeds a bound: {0}")]
    TooLarge(String),
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

type Http = StreamableHttpError<reqwest::Error>;

/// Maps a failed handshake.
pub(crate) fn from_init(error: ClientInitializeError, token: Option<&BearerToken>) -> McpError {
    let mapped = match error {
        ClientInitializeError::TransportError { error, .. } => classify(error.error.as_ref()),
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => return from_init(*fallback, token),
        ClientInitializeError::ConnectionClosed(context) => {
            McpError::Connection(format!("the connection closed during the handshake ({context})"))
        }
        ClientInitializeError::JsonRpcError(data) => {
            McpError::Rejected { code: data.code.0, message: bounded(data.message.to_string()) }
        }
        ClientInitializeError::Cancelled => McpError::Connection("the handshake was cancelled".into()),
        other => McpError::Protocol(bounded(other.to_string())),
    };
    scrub(mapped, token)
}

/// Maps a failed request on an open connection.
pub(crate) fn from_service(error: ServiceError, token: Option<&BearerToken>) -> McpError {
    let mapped = match error {
        ServiceError::McpError(data) => {
            McpError::Rejected { code: data.code.0, message: bounded(data.message.to_string()) }
        }
        ServiceError::TransportSend(error) => classify(error.error.as_ref()),
        ServiceError::TransportClosed => McpError::Connection("the connection to the server closed".into()),
        ServiceError::Timeout { timeout } => McpError::Timeout { operation: "the request", timeout },
        ServiceError::Cancelled { .. } => McpError::Connection("the request was cancelled".into()),
        other => McpError::Protocol(bounded(other.to_string())),
    };
    scrub(mapped, token)
}

/// Classifies a transport error by walking its causes.
fn classify(error: &(dyn StdError + Send + Sync + 'static)) -> McpError {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = current {
        if e.is::<AuthRequiredError>() {
            return McpError::Unauthorized { status: 401 };
        }
        if e.is::<InsufficientScopeError>() {
            return McpError::Unauthorized { status: 403 };
        }
        if let Some(mapped) = e.downcast_ref::<Http>().and_then(classify_http) {
            return mapped;
        }
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            return McpError::Connection(describe_reqwest(e));
        }
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            return McpError::Connection(bounded(e.to_string()));
        }
        current = e.source();
    }
    McpError::Protocol(bounded(causes(error)))
}

fn classify_http(error: &Http) -> Option<McpError> {
    Some(match error {
        StreamableHttpError::AuthRequired(_) => McpError::Unauthorized { status: 401 },
        StreamableHttpError::InsufficientScope(_) => McpError::Unauthorized { status: 403 },
        StreamableHttpError::ResponseBodyTooLarge { max_size } => {
            McpError::TooLarge(format!("an HTTP response body is over {max_size} bytes"))
        }
        StreamableHttpError::HttpStatus(status) => {
            McpError::Connection(format!("the server answered HTTP {}", status.status))
        }
        StreamableHttpError::Client(e) => McpError::Connection(describe_reqwest(e)),
        StreamableHttpError::Io(e) => McpError::Connection(bounded(e.to_string())),
        // rmcp reports a 401/403 without a `WWW-Authenticate` challenge, and any other non-JSON
        // failure status, only as text starting "HTTP <status>".
        StreamableHttpError::UnexpectedServerResponse(text) => match http_status_prefix(text) {
            Some(status @ (401 | 403)) => McpError::Unauthorized { status },
            Some(status @ (404 | 405)) => McpError::Connection(format!(
                "the server answered HTTP {status} to a Streamable HTTP request; it may speak only the \
                 legacy HTTP+SSE transport, which this client does not support"
            )),
            Some(status) => McpError::Connection(format!("the server answered HTTP {status}")),
            None => McpError::Protocol(bounded(text.to_string())),
        },
        StreamableHttpError::SessionExpired => McpError::Connection("the server ended the session (HTTP 404)".into()),
        _ => return None,
    })
}

/// The status of rmcp's "HTTP 404 Not Found: …" diagnostics.
fn http_status_prefix(text: &str) -> Option<u16> {
    let rest = text.strip_prefix("HTTP ")?;
    let digits = rest.get(..3)?;
    digits.parse().ok()
}

/// A reqwest failure without the URL reqwest's own message carries: its kind and its causes
/// (the OS error, or the SSRF resolver's refusal).
fn describe_reqwest(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connecting failed"
    } else if error.is_timeout() {
        "the HTTP request timed out"
    } else if error.is_body() || error.is_decode() {
        "reading the response failed"
    } else {
        "the HTTP request failed"
    };
    match error.source() {
        Some(source) => bounded(format!("{kind}: {}", causes(source))),
        None => bounded(kind.to_owned()),
    }
}

/// Peer-derived text in an error is kept short: it is for an operator, not a transcript.
fn bounded(mut text: String) -> String {
    const MAX: usize = 512;
    if text.len() > MAX {
        let mut end = MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn scrub(error: McpError, token: Option<&BearerToken>) -> McpError {
    let Some(token) = token else { return error };
    match error {
        McpError::Connection(m) => McpError::Connection(token.scrub(m)),
        McpError::Protocol(m) => McpError::Protocol(token.scrub(m)),
        McpError::TooLarge(m) => McpError::TooLarge(token.scrub(m)),
        McpError::Rejected { code, message } => McpError::Rejected { code, message: token.scrub(message) },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_prefix_is_read_from_rmcp_diagnostics() {
        assert_eq!(http_status_prefix("HTTP 401 Unauthorized: nope"), Some(401));
        assert_eq!(http_status_prefix("HTTP 405 Method Not Allowed: "), Some(405));
        assert_eq!(http_status_prefix("expect json"), None);
        assert_eq!(http_status_prefix("HTTP 4"), None);
    }

    #[test]
    fn unchallenged_401_and_legacy_404_are_classified() {
        let e = Http::UnexpectedServerResponse("HTTP 403 Forbidden: no".into());
        assert_eq!(classify(&e), McpError::Unauthorized { status: 403 });
        let e = Http::UnexpectedServerResponse("HTTP 404 Not Found: ".into());
        assert!(matches!(classify(&e), McpError::Connection(m) if m.contains("legacy HTTP+SSE")));
    }

    #[test]
    fn messages_are_scrubbed_and_bounded() {
        let token = BearerToken::new("tok-123");
        let e = scrub(McpError::Protocol("echoed tok-123".into()), Some(&token));
        assert_eq!(e.to_string(), "the MCP server answered outside the protocol: echoed [redacted]");
        assert!(bounded("x".repeat(10_000)).len() < 600);
    }
}
