//! The Anthropic Messages API client: `POST /v1/messages`, JSON or server-sent events.
//!
//! One [`AnthropicClient`] serves every session; it holds no conversation state. Transient
//! failures are retried inside the client, a few times, with jittered exponential backoff and
//! never sooner than the server asked (`retry-after-ms`, `retry-after`). A stream is retried
//! only while nothing has been reported to the caller: once a text delta went out, a failure
//! is returned (a cut as [`ModelError::StreamCut`]) rather than replayed, because the caller may
//! already have shown or stored that text.
//!
//! Everything read from the network is bounded: SSE lines and events, the accumulated
//! response, non-streaming bodies and error bodies.

mod config;
mod errors;
mod response;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

pub use config::{
    AnthropicConfig, AnthropicSettings, ConfigError, Credential, DEFAULT_ANTHROPIC_VERSION, DEFAULT_BASE_URL,
};

use self::response::{Assembler, Progress};
use crate::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};
use gateway_wire::backoff::Backoff;
use gateway_wire::causes::causes;
use gateway_wire::sse::{Decoder, Event};

/// Largest non-streaming body, SSE line or event, and accumulated response accepted.
const MAX_BODY_BYTES: usize = 16 << 20;
/// Largest stream accepted, framing included (deltas carry ~100 bytes of JSON each).
const MAX_STREAM_BYTES: usize = 64 << 20;
/// How much of an error response is read to find its message.
const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// A [`ModelClient`] for the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicClient {
    config: AnthropicConfig,
    url: reqwest::Url,
    headers: HeaderMap,
    http: reqwest::Client,
}

impl fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicClient").field("url", &self.url.as_str()).field("config", &self.config).finish()
    }
}

impl AnthropicClient {
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let url = messages_url(&config.base_url)?;
        let headers = fixed_headers(&config)?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("gateway-models/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Http(causes(&e)))?;
        Ok(Self { config, url, headers, http })
    }

    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// One non-streaming attempt.
    async fn attempt_complete(&self, body: &[u8]) -> Result<ModelResponse, Failure> {
        let response = self.open(body, false).await?;
        let bytes = read_body(response, MAX_BODY_BYTES).await?;
        Ok(response::parse_message(&bytes)?)
    }

    /// One streaming attempt, reporting text through `on_event`.
    async fn attempt_stream(
        &self,
        body: &[u8],
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, Failure> {
        let opening = tokio::time::timeout(self.config.request_timeout, self.open(body, true));
        let mut response = opening.await.map_err(|_| timed_out(self.config.request_timeout))??;
        let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !content_type.starts_with("text/event-stream") {
            return Err(
                ModelError::Protocol(format!("expected an event stream, got content-type {content_type:?}")).into()
            );
        }
        let mut decoder = Decoder::new(MAX_BODY_BYTES);
        let mut assembler = Assembler::new(MAX_BODY_BYTES);
        let mut events: Vec<Event> = Vec::new();
        let mut received = 0usize;
        loop {
            let idle = self.config.stream_idle_timeout;
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
                if assembler.handle(&event.event, &event.data, on_event)? == Progress::Done {
                    return Ok(assembler.finish()?);
                }
            }
            fed.map_err(|too_large| ModelError::Protocol(too_large.to_string()))?;
        }
        Ok(assembler.finish()?)
    }

    /// Sends the request; a response that is not a success becomes a typed failure.
    async fn open(&self, body: &[u8], stream: bool) -> Result<reqwest::Response, Failure> {
        let accept = if stream { "text/event-stream" } else { "application/json" };
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
        Err(Failure {
            error: errors::from_status(status, &headers, &body),
            should_retry: errors::should_retry(&headers),
        })
    }

    /// How long to wait before retry number `retries + 1`, or `None` to give up.
    fn backoff(&self, failure: &Failure, retries: u32) -> Option<Duration> {
        if retries >= self.config.max_retries || !failure.error.is_transient() || failure.should_retry == Some(false) {
            return None;
        }
        let asked = failure.error.retry_after().unwrap_or_default();
        if asked > self.config.max_retry_after {
            return None;
        }
        Some(Backoff::new(self.config.retry_base, self.config.retry_max).delay(retries, Some(asked)))
    }

    /// Sleeps before the next retry and says `true`, or says `false` if there is none.
    async fn wait_before_retry(&self, failure: &Failure, retries: u32) -> bool {
        let Some(delay) = self.backoff(failure, retries) else { return false };
        tracing::warn!(
            retry = retries + 1,
            max_retries = self.config.max_retries,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error = %failure.error,
            "model API call failed; retrying"
        );
        tokio::time::sleep(delay).await;
        true
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = request_body(request, false)?;
        let mut retries = 0;
        loop {
            let attempt = tokio::time::timeout(self.config.request_timeout, self.attempt_complete(&body));
            let failure = match attempt.await {
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(failure)) => failure,
                Err(_) => timed_out(self.config.request_timeout).into(),
            };
            if !self.wait_before_retry(&failure, retries).await {
                return Err(failure.error);
            }
            retries += 1;
        }
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        let body = request_body(request, true)?;
        let reported = AtomicBool::new(false);
        let relay = |event: StreamEvent| {
            reported.store(true, Ordering::Relaxed);
            on_event(event);
        };
        let mut retries = 0;
        loop {
            let failure = match self.attempt_stream(&body, &relay).await {
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
}

/// A failed attempt, with the server's opinion on retrying it (`x-should-retry`).
#[derive(Debug)]
struct Failure {
    error: ModelError,
    should_retry: Option<bool>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Self { error, should_retry: None }
    }
}

/// The request body, in the Messages API's shape, with prompt-cache breakpoints: after the
/// system prompt, after the tools, and after the conversation's last block (the moving end).
/// A tool loop sends the same prefix every round; with the breakpoints the API reads it from
/// its cache instead of paying for it again (`cache_read_input_tokens`), and each round
/// writes its own end for the next. The API ignores breakpoints on prefixes too short to cache.
fn request_body(request: &ModelRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
    let encode = |e: serde_json::Error| ModelError::Protocol(format!("cannot encode the request: {e}"));
    let breakpoint = || serde_json::json!({"type": "ephemeral"});
    let mut body = serde_json::json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": serde_json::to_value(&request.messages).map_err(encode)?,
        "stream": stream,
    });
    // The API refuses an empty system prompt; no prompt means the same.
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body["system"] = serde_json::json!([{"type": "text", "text": system, "cache_control": breakpoint()}]);
    }
    if !request.tools.is_empty() {
        let mut tools = serde_json::to_value(&request.tools).map_err(encode)?;
        if let Some(last) = tools.as_array_mut().and_then(|t| t.last_mut()) {
            last["cache_control"] = breakpoint();
        }
        body["tools"] = tools;
    }
    let end = body["messages"]
        .as_array_mut()
        .and_then(|m| m.last_mut())
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|c| c.last_mut())
        // Thinking blocks take no breakpoint (the API refuses one there).
        .filter(|b| !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")));
    if let Some(block) = end {
        block["cache_control"] = breakpoint();
    }
    if let Some(budget) = request.thinking {
        body["thinking"] = serde_json::json!({"type": "enabled", "budget_tokens": budget});
    }
    serde_json::to_vec(&body).map_err(encode)
}

fn messages_url(base_url: &str) -> Result<reqwest::Url, ConfigError> {
    let invalid = |reason: String| ConfigError::BaseUrl { url: base_url.to_owned(), reason };
    let base = reqwest::Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https".into()));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("a base URL has no query or fragment".into()));
    }
    let path = format!("{}/v1/messages", base.path().trim_end_matches('/'));
    let mut url = base;
    url.set_path(&path);
    Ok(url)
}

fn fixed_headers(config: &AnthropicConfig) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    let (name, value) = match &config.credential {
        Credential::ApiKey(key) => (HeaderName::from_static("x-api-key"), key.clone()),
        Credential::Bearer(token) => (AUTHORIZATION, format!("Bearer {token}")),
    };
    let mut value = HeaderValue::from_str(&value).map_err(|_| ConfigError::Credential)?;
    value.set_sensitive(true);
    headers.insert(name, value);
    let version =
        HeaderValue::from_str(&config.anthropic_version).map_err(|_| ConfigError::Header("anthropic-version"))?;
    headers.insert(HeaderName::from_static("anthropic-version"), version);
    if !config.betas.is_empty() {
        let betas =
            HeaderValue::from_str(&config.betas.join(",")).map_err(|_| ConfigError::Header("anthropic-beta"))?;
        headers.insert(HeaderName::from_static("anthropic-beta"), betas);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(headers)
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

    #[test]
    fn the_messages_path_is_appended_to_any_prefix() {
        let url = |base: &str| messages_url(base).map(|u| u.to_string());
        assert_eq!(url("https://api.anthropic.com").unwrap(), "https://api.anthropic.com/v1/messages");
        assert_eq!(url("http://127.0.0.1:9/").unwrap(), "http://127.0.0.1:9/v1/messages");
        assert_eq!(url("https://proxy.example/anthropic/").unwrap(), "https://proxy.example/anthropic/v1/messages");
        assert!(url("ftp://x").is_err());
        assert!(url("not a url").is_err());
        assert!(url("https://x/?a=b").is_err());
    }

    #[test]
    fn credentials_that_cannot_be_headers_are_refused_without_echoing_them() {
        let config = AnthropicConfig::new(DEFAULT_BASE_URL, Credential::ApiKey("sk-secret\nInjected: yes".into()));
        let error = AnthropicClient::new(config).unwrap_err();
        assert_eq!(error, ConfigError::Credential);
        assert!(!error.to_string().contains("sk-secret"));
    }

    #[test]
    fn backoff_grows_is_capped_and_respects_the_server() {
        let mut config = AnthropicConfig::new(DEFAULT_BASE_URL, Credential::ApiKey("k".into()));
        config.max_retries = 10;
        config.retry_base = Duration::from_millis(100);
        config.retry_max = Duration::from_millis(1000);
        let client = AnthropicClient::new(config).unwrap();
        let server =
            |retry_after| Failure::from(ModelError::Server { status: 500, message: String::new(), retry_after });
        for _ in 0..50 {
            let first = client.backoff(&server(None), 0).unwrap();
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100), "{first:?}");
            let late = client.backoff(&server(None), 8).unwrap();
            assert!(late >= Duration::from_millis(500) && late <= Duration::from_millis(1000), "{late:?}");
        }
        assert_eq!(client.backoff(&server(Some(Duration::from_secs(5))), 0), Some(Duration::from_secs(5)));
        assert_eq!(client.backoff(&server(Some(Duration::from_secs(61))), 0), None, "beyond max_retry_after");
        assert_eq!(client.backoff(&server(None), 10), None, "retries exhausted");
        let refused = Failure {
            error: ModelError::Server { status: 500, message: String::new(), retry_after: None },
            should_retry: Some(false),
        };
        assert_eq!(client.backoff(&refused, 0), None, "x-should-retry: false");
        let invalid = Failure::from(ModelError::InvalidRequest { status: 400, message: String::new() });
        assert_eq!(client.backoff(&invalid, 0), None);
    }
}
