//! The Anthropic Messages API client: `POST /v1/messages`, JSON or server-sent events.
//!
//! One [`AnthropicClient`] serves every session; it holds no conversation state. Retries (with
//! backoff that honours `retry-after`), the never-replay rule for streams, and the bounds on
//! everything read are the crate's shared HTTP mechanics (the private `http` module, used by
//! every HTTP client); this module owns the Messages API's format only.

mod config;
mod errors;
mod response;

use std::fmt;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

pub use crate::ConfigError;
pub use config::{AnthropicConfig, AnthropicSettings, Credential, DEFAULT_ANTHROPIC_VERSION, DEFAULT_BASE_URL};

use self::response::Assembler;
use crate::http::{self, Assemble, Endpoint, MAX_BODY_BYTES, Progress};
use crate::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};
use gateway_wire::sse::Event;

/// A [`ModelClient`] for the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicClient {
    config: AnthropicConfig,
    endpoint: Endpoint,
}

impl fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("url", &self.endpoint.url().as_str())
            .field("config", &self.config)
            .finish()
    }
}

impl AnthropicClient {
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let url = messages_url(&config.base_url)?;
        let headers = fixed_headers(&config)?;
        let endpoint = Endpoint::new(url, headers, config.patience, errors::from_status)?;
        Ok(Self { config, endpoint })
    }

    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = request_body(request, false)?;
        self.endpoint.complete(&body, response::parse_message).await
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        let body = request_body(request, true)?;
        self.endpoint.stream(&body, || Assembler::new(MAX_BODY_BYTES), on_event).await
    }
}

impl Assemble for Assembler {
    fn event(&mut self, event: &Event, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) -> Result<Progress, ModelError> {
        self.handle(&event.event, &event.data, on_event)
    }

    fn end(self) -> Result<ModelResponse, ModelError> {
        self.finish()
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
    http::endpoint_url(base_url, "/v1/messages")
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
}
