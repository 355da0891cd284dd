//! What every HTTP model client does the same way, whatever API it speaks: one home for the
//! retry loop, the backoff decision, the bounds on everything read, and stream reading.
//!
//! A provider module ([`anthropic`](crate::anthropic), [`openai`](crate::openai)) owns only its
//! wire format: the URL path, the headers, the request body, how a response or a stream event
//! becomes a [`ModelResponse`], and how its error bodies read. It hands those to an
//! [`Endpoint`], which owns the rest:
//!
//! - **Retries.** Transient failures are retried a few times with jittered exponential
//!   backoff ([`Backoff`]), never sooner than the server asked (`retry-after-ms`,
//!   `retry-after`), never when it said not to (`x-should-retry: false`), and not at all when
//!   it asks for a wait longer than [`Patience::max_retry_after`]: that error goes to the
//!   caller, which can schedule the retry durably.
//! - **Never replay.** A stream is retried only while nothing has been reported to the caller:
//!   once a delta went out, a failure is returned (a cut as [`ModelError::StreamCut`]) rather
//!   than replayed, because the caller may already have shown or stored that text.
//! - **Bounds.** Non-streaming bodies, SSE lines and events, the whole stream, and error
//!   bodies are read up to fixed limits; a stream silent for longer than
//!   [`Patience::stream_idle_timeout`] is cut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};

use crate::{Block, ConfigError, ModelError, ModelResponse, StreamEvent};
use gateway_wire::backoff::Backoff;
use gateway_wire::causes::causes;
use gateway_wire::sse::{Decoder, Event};

/// Largest non-streaming body, SSE line or event, and accumulated response accepted.
pub(crate) const MAX_BODY_BYTES: usize = 16 << 20;
/// Largest stream accepted, framing included (deltas carry ~100 bytes of JSON each).
const MAX_STREAM_BYTES: usize = 64 << 20;
/// How much of an error response is read to find its message.
const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
/// How much of an unparseable error body is quoted in the error message.
const QUOTED_BODY_CHARS: usize = 300;

/// Extra attempts after a transient failure, unless configured.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 2;
/// Limit of a whole call (or a stream's headers), unless configured.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// How patient a client is: the retry and timeout settings every provider's config carries
/// (`AnthropicConfig::patience`, `OpenAiConfig::patience`), with one set of defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// Extra attempts after a transient failure (429, 529, 5xx, network errors, a stream cut
    /// before anything was reported). The caller sees the last error once they run out.
    pub max_retries: u32,
    /// The first retry waits about this long; each later one twice as long as the previous.
    pub retry_base: Duration,
    /// Ceiling of the exponential backoff (the server's `retry-after` may ask for longer).
    pub retry_max: Duration,
    /// A server asking to wait longer than this is not retried inside the client: the error
    /// (with its `retry_after`) goes to the caller, which can schedule the retry durably.
    pub max_retry_after: Duration,
    pub connect_timeout: Duration,
    /// Limit for a whole non-streaming call, and for a streaming call's response headers.
    pub request_timeout: Duration,
    /// Longest silence tolerated inside a stream. The Messages API sends `ping`s while it
    /// works; Chat Completions streams send none, so there this also bounds how long a model
    /// may think before its first token.
    pub stream_idle_timeout: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Patience {
    /// The defaults every provider's config starts from.
    pub(crate) const DEFAULT: Patience = Patience {
        max_retries: DEFAULT_MAX_RETRIES,
        retry_base: Duration::from_millis(500),
        retry_max: Duration::from_secs(8),
        max_retry_after: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(10),
        request_timeout: DEFAULT_REQUEST_TIMEOUT,
        stream_idle_timeout: Duration::from_secs(300),
    };

    /// How long to wait before retry number `retries + 1`, or `None` to give up.
    pub(crate) fn backoff(&self, failure: &Failure, retries: u32) -> Option<Duration> {
        if retries >= self.max_retries || !failure.error.is_transient() || failure.should_retry == Some(false) {
            return None;
        }
        let asked = failure.error.retry_after().unwrap_or_default();
        if asked > self.max_retry_after {
            return None;
        }
        Some(Backoff::new(self.retry_base, self.retry_max).delay(retries, Some(asked)))
    }
}

/// A failed attempt, with the server's opinion on retrying it (`x-should-retry`).
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: ModelError,
    pub should_retry: Option<bool>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Self { error, should_retry: None }
    }
}

/// What a stream is doing after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Continue,
    /// The API marked the end: the response is complete.
    Done,
}

/// Whether text shows anything: a text block that is only whitespace is dropped, and a
/// streamed one is not announced before it has something to show.
pub(crate) fn has_visible_text(text: &str) -> bool {
    !text.trim().is_empty()
}

/// A streamed text block. Its text waits until it has something visible; then the block takes
/// its place at the end of the response's content, announced with [`StreamEvent::TextStart`]
/// under that index, and every piece goes there as a [`StreamEvent::TextDelta`].
#[derive(Debug, Default)]
pub(crate) struct StreamedText {
    at: Option<usize>,
    pending: String,
}

impl StreamedText {
    /// Adds `text` to the block, in `content`, reporting it through `on_event`.
    pub(crate) fn push(
        &mut self,
        text: &str,
        content: &mut Vec<Block>,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) {
        if let Some(position) = self.at {
            if let Some(Block::Text { text: whole }) = content.get_mut(position) {
                whole.push_str(text);
            }
            on_event(StreamEvent::TextDelta { index: position, text: text.to_owned() });
            return;
        }
        self.pending.push_str(text);
        if has_visible_text(&self.pending) {
            let first = std::mem::take(&mut self.pending);
            let position = content.len();
            self.at = Some(position);
            content.push(Block::Text { text: first.clone() });
            on_event(StreamEvent::TextStart { index: position });
            on_event(StreamEvent::TextDelta { index: position, text: first });
        }
    }
}

/// The bytes of text, reasoning and tool input one response may accumulate.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: usize,
    limit: usize,
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> Self {
        Self { used: 0, limit }
    }

    /// Counts `bytes` more, refusing a response past the limit.
    pub(crate) fn take(&mut self, bytes: usize) -> Result<(), ModelError> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            return Err(ModelError::Protocol(format!("the response exceeds {} bytes", self.limit)));
        }
        Ok(())
    }
}

/// A provider's assembly of one streamed response from its SSE events.
pub(crate) trait Assemble: Send {
    /// Handles one event, reporting text through `on_event` as it arrives.
    fn event(&mut self, event: &Event, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<Progress, ModelError>;

    /// The response, once the stream ended (after [`Progress::Done`], or without it: a cut).
    fn end(self) -> Result<ModelResponse, ModelError>;
}

/// A provider's reading of an unsuccessful HTTP response (status, headers, the body's start).
pub(crate) type ReadError = fn(StatusCode, &HeaderMap, &[u8]) -> ModelError;

/// One API endpoint a client posts to, and everything about talking to it that does not
/// depend on the API's format.
#[derive(Clone)]
pub(crate) struct Endpoint {
    http: reqwest::Client,
    url: reqwest::Url,
    /// Sent with every request; credentials in it are marked sensitive.
    headers: HeaderMap,
    patience: Patience,
    read_error: ReadError,
}

impl Endpoint {
    pub(crate) fn new(
        url: reqwest::Url,
        headers: HeaderMap,
        patience: Patience,
        read_error: ReadError,
    ) -> Result<Self, ConfigError> {
        let http = reqwest::Client::builder()
            .connect_timeout(patience.connect_timeout)
            .user_agent(concat!("gateway-models/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Http(causes(&e)))?;
        Ok(Self { http, url, headers, patience, read_error })
    }

    pub(crate) fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// Posts `body` for a whole JSON answer, read by `parse`, retrying transient failures.
    pub(crate) async fn complete(
        &self,
        body: &[u8],
        parse: fn(&[u8]) -> Result<ModelResponse, ModelError>,
    ) -> Result<ModelResponse, ModelError> {
        let limit = self.patience.request_timeout;
        let mut retries = 0;
        loop {
            let failure = match tokio::time::timeout(limit, self.attempt_complete(body, parse)).await {
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(failure)) => failure,
                Err(_) => timed_out(limit).into(),
            };
            if !self.wait_before_retry(&failure, retries).await {
                return Err(failure.error);
            }
            retries += 1;
        }
    }

    /// Posts `body` for an event stream, assembled by a fresh `assembler()` per attempt,
    /// retrying transient failures only while nothing was reported.
    pub(crate) async fn stream<A: Assemble>(
        &self,
        body: &[u8],
        assembler: impl Fn() -> A + Send + Sync,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        let reported = AtomicBool::new(false);
        let relay = |event: StreamEvent| {
            reported.store(true, Ordering::Relaxed);
            on_event(event);
        };
        let mut retries = 0;
        loop {
            let failure = match self.attempt_stream(body, assembler(), &relay).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            // Never replay: the caller has seen part of this answer.
            if reported.load(Ordering::Relaxed) || !self.wait_before_retry(&failure, retries).await {
                return Err(failure.error);
            }
            retries += 1;
        }
    }

    /// One non-streaming attempt.
    async fn attempt_complete(
        &self,
        body: &[u8],
        parse: fn(&[u8]) -> Result<ModelResponse, ModelError>,
    ) -> Result<ModelResponse, Failure> {
        let response = self.open(body, false).await?;
        let bytes = read_body(response, MAX_BODY_BYTES).await?;
        Ok(parse(&bytes)?)
    }

    /// One streaming attempt, reporting text through `on_event`.
    async fn attempt_stream<A: Assemble>(
        &self,
        body: &[u8],
        mut assembler: A,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, Failure> {
        let limit = self.patience.request_timeout;
        let mut response = tokio::time::timeout(limit, self.open(body, true)).await.map_err(|_| timed_out(limit))??;
        let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !content_type.starts_with(gateway_wire::sse::MEDIA_TYPE) {
            return Err(
                ModelError::Protocol(format!("expected an event stream, got content-type {content_type:?}")).into()
            );
        }
        let mut decoder = Decoder::new(MAX_BODY_BYTES);
        let mut events: Vec<Event> = Vec::new();
        let mut received = 0usize;
        loop {
            let idle = self.patience.stream_idle_timeout;
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => return Err(ModelError::StreamCut(format!("no data for {}s", idle.as_secs_f64())).into()),
                Ok(Err(e)) => return Err(ModelError::StreamCut(causes(&e)).into()),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            received = received.saturating_add(chunk.len());
            if received > MAX_STREAM_BYTES {
                return Err(ModelError::Protocol(format!("the stream exceeds {MAX_STREAM_BYTES} bytes")).into());
            }
            let fed = decoder.feed(&chunk, &mut events);
            for event in events.drain(..) {
                if assembler.event(&event, on_event)? == Progress::Done {
                    return Ok(assembler.end()?);
                }
            }
            fed.map_err(|too_large| ModelError::Protocol(too_large.to_string()))?;
        }
        Ok(assembler.end()?)
    }

    /// Sends the request; a response that is not a success becomes a typed failure.
    async fn open(&self, body: &[u8], stream: bool) -> Result<reqwest::Response, Failure> {
        let accept = if stream { gateway_wire::sse::MEDIA_TYPE } else { "application/json" };
        let mut request = self.http.post(self.url.clone()).headers(self.headers.clone()).header(ACCEPT, accept);
        // The model request's span continues at the provider, if it traces (W3C headers).
        if let Some(trace) = gateway_core::trace::current() {
            for (name, value) in trace.headers() {
                request = request.header(name, value);
            }
        }
        let response = request.body(body.to_vec()).send().await.map_err(|e| ModelError::Network(causes(&e)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = read_prefix(response, MAX_ERROR_BODY_BYTES).await;
        Err(Failure { error: (self.read_error)(status, &headers, &body), should_retry: should_retry(&headers) })
    }

    /// Sleeps before the next retry and says `true`, or says `false` if there is none.
    async fn wait_before_retry(&self, failure: &Failure, retries: u32) -> bool {
        let Some(delay) = self.patience.backoff(failure, retries) else { return false };
        tracing::warn!(
            retry = retries + 1,
            max_retries = self.patience.max_retries,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error = %failure.error,
            "model API call failed; retrying"
        );
        tokio::time::sleep(delay).await;
        true
    }
}

/// `base_url` (scheme, host, optional path prefix) with `path` appended to its path.
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> Result<reqwest::Url, ConfigError> {
    let invalid = |reason: String| ConfigError::BaseUrl { url: base_url.to_owned(), reason };
    let base = reqwest::Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https".into()));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("a base URL has no query or fragment".into()));
    }
    let path = format!("{}{path}", base.path().trim_end_matches('/'));
    let mut url = base;
    url.set_path(&path);
    Ok(url)
}

/// What a provider's error body says beyond the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    None,
    /// The API says it is overloaded, whatever the status (Anthropic's `overloaded_error`).
    Overloaded,
    /// The failure cannot pass by waiting, whatever the status (OpenAI's `insufficient_quota`,
    /// sent with a 429).
    Permanent,
}

/// The error for an unsuccessful HTTP status. The status decides the kind (it is what proxies
/// and load balancers also speak); the provider's `hint` refines it where the status alone is
/// ambiguous.
pub(crate) fn status_error(
    status: StatusCode,
    message: String,
    retry_after: Option<Duration>,
    hint: Hint,
) -> ModelError {
    let code = status.as_u16();
    match (code, hint) {
        (400..=499, Hint::Permanent) => ModelError::InvalidRequest { status: code, message },
        (429, _) => ModelError::RateLimited { message, retry_after },
        (529, _) | (_, Hint::Overloaded) => ModelError::Overloaded { status: code, message, retry_after },
        (500..=599, _) => ModelError::Server { status: code, message, retry_after },
        (401 | 403, _) => ModelError::Authentication { status: code, message },
        (400..=499, _) => ModelError::InvalidRequest { status: code, message },
        _ => ModelError::Protocol(format!("unexpected HTTP status {status}: {message}")),
    }
}

/// The wait the server asked for: `retry-after-ms` (milliseconds) wins over `retry-after`
/// (seconds; the HTTP-date form is ignored).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    let seconds = number("retry-after-ms").map(|ms| ms / 1000.0).or_else(|| number("retry-after"))?;
    // Anything beyond a day is nonsense; keep the conversion in range.
    Some(Duration::from_secs_f64(seconds.min(86_400.0)))
}

/// The server's explicit opinion on retrying (`x-should-retry`), if it gave one.
fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// An error body nobody could parse, quoted (bounded) as the error's message.
pub(crate) fn quote_body(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return status.canonical_reason().unwrap_or("no error message").to_owned();
    }
    let mut quoted: String = text.chars().take(QUOTED_BODY_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    quoted
}

/// Reads a whole body, refusing more than `limit` bytes.
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| ModelError::Network(causes(&e)))? {
        if body.len() + chunk.len() > limit {
            return Err(ModelError::Protocol(format!("the response exceeds {limit} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads at most `limit` bytes of a body, keeping what arrived if reading fails: enough to
/// find the message of an error response.
async fn read_prefix(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(limit - body.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

fn timed_out(limit: Duration) -> ModelError {
    ModelError::Network(format!("no response within {}s", limit.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_path_is_appended_to_any_prefix() {
        let url = |base: &str, path: &str| endpoint_url(base, path).map(|u| u.to_string());
        assert_eq!(
            url("https://api.openai.com/v1", "/chat/completions").unwrap(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url("http://localhost:11434/v1/", "/chat/completions").unwrap(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(url("http://127.0.0.1:9", "/v1/messages").unwrap(), "http://127.0.0.1:9/v1/messages");
        assert!(url("ftp://x", "/p").is_err());
        assert!(url("not a url", "/p").is_err());
        assert!(url("https://x/#f", "/p").is_err());
    }

    #[test]
    fn backoff_grows_is_capped_and_respects_the_server() {
        let patience = Patience {
            max_retries: 10,
            retry_base: Duration::from_millis(100),
            retry_max: Duration::from_millis(1000),
            ..Patience::DEFAULT
        };
        let server =
            |retry_after| Failure::from(ModelError::Server { status: 500, message: String::new(), retry_after });
        for _ in 0..50 {
            let first = patience.backoff(&server(None), 0).unwrap();
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100), "{first:?}");
            let late = patience.backoff(&server(None), 8).unwrap();
            assert!(late >= Duration::from_millis(500) && late <= Duration::from_millis(1000), "{late:?}");
        }
        assert_eq!(patience.backoff(&server(Some(Duration::from_secs(5))), 0), Some(Duration::from_secs(5)));
        assert_eq!(patience.backoff(&server(Some(Duration::from_secs(61))), 0), None, "beyond max_retry_after");
        assert_eq!(patience.backoff(&server(None), 10), None, "retries exhausted");
        let refused = Failure {
            error: ModelError::Server { status: 500, message: String::new(), retry_after: None },
            should_retry: Some(false),
        };
        assert_eq!(patience.backoff(&refused, 0), None, "x-should-retry: false");
        let invalid = Failure::from(ModelError::InvalidRequest { status: 400, message: String::new() });
        assert_eq!(patience.backoff(&invalid, 0), None);
    }

    #[test]
    fn the_status_table() {
        // (status, hint) -> kind and whether a retry may help.
        let rows: &[(u16, Hint, &str, bool)] = &[
            (429, Hint::None, "rate_limited", true),
            (429, Hint::Permanent, "invalid_request", false),
            (529, Hint::None, "overloaded", true),
            (503, Hint::Overloaded, "overloaded", true),
            (500, Hint::None, "server", true),
            (502, Hint::None, "server", true),
            (401, Hint::None, "authentication", false),
            (403, Hint::None, "authentication", false),
            (400, Hint::None, "invalid_request", false),
            (404, Hint::None, "invalid_request", false),
            (422, Hint::None, "invalid_request", false),
            (302, Hint::None, "protocol", false),
        ];
        for &(code, hint, kind, transient) in rows {
            let error = status_error(StatusCode::from_u16(code).unwrap(), "m".into(), None, hint);
            assert_eq!((error.kind(), error.is_transient()), (kind, transient), "{code} {hint:?}: {error:?}");
        }
    }

    #[test]
    fn retry_after_headers() {
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "1500")])), Some(Duration::from_millis(1500)));
        assert_eq!(retry_after(&headers(&[("retry-after", "3")])), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250.5")])),
            Some(Duration::from_micros(250_500))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "1e300")])), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_after(&HeaderMap::new()), None);
        assert_eq!(should_retry(&headers(&[("x-should-retry", "false")])), Some(false));
        assert_eq!(should_retry(&headers(&[("x-should-retry", "maybe")])), None);
    }

    #[test]
    fn unparseable_error_bodies_are_quoted_and_bounded() {
        let long = "<html>".repeat(200);
        let message = quote_body(StatusCode::BAD_GATEWAY, long.as_bytes());
        assert!(message.starts_with("<html>") && message.chars().count() == QUOTED_BODY_CHARS + 1);
        assert_eq!(quote_body(StatusCode::BAD_GATEWAY, b" "), "Bad Gateway");
    }
}
