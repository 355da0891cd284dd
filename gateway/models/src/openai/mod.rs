//! The OpenAI Chat Completions client: `POST {base_url}/chat/completions`, JSON or
//! server-sent events.
//!
//! Chat Completions is the API most model servers speak: OpenAI's own, and the
//! OpenAI-compatible servers people run locally (vLLM, Ollama, llama.cpp, LM Studio) or reach
//! through routers. One [`OpenAiClient`] serves every session; it holds no conversation state.
//! Retries, the never-replay rule for streams, and the bounds on everything read are the
//! crate's shared HTTP mechanics (the private `http` module), the same as the Anthropic
//! client's; this module owns the Chat Completions format only (`request` and `response` say
//! how the neutral port maps onto it, `errors` how failures read).
//!
//! What this provider does not carry: extended thinking ([`ModelRequest::thinking`] is
//! ignored: reasoning models choose their own effort here, and the reasoning they return is
//! not sent back), and prompt-cache breakpoints (OpenAI caches long prefixes by itself and
//! reports the hits, which become [`Usage::cache_read_input_tokens`](crate::Usage)).

mod config;
mod errors;
mod request;
mod response;

use std::fmt;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

pub use crate::ConfigError;
pub use config::{DEFAULT_OPENAI_BASE_URL, OpenAiConfig};
#[cfg(feature = "stub")]
pub(crate) use request::TOOL_ERROR_PREFIX;

use self::response::Assembler;
use crate::http::{self, Endpoint, MAX_BODY_BYTES};
use crate::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};

/// A [`ModelClient`] for the OpenAI Chat Completions API and servers imitating it. It ignores
/// [`ModelRequest::thinking`] and sends no reasoning blocks back (see the module documentation).
#[derive(Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    endpoint: Endpoint,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("url", &self.endpoint.url().as_str())
            .field("config", &self.config)
            .finish()
    }
}

impl OpenAiClient {
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let url = http::endpoint_url(&config.base_url, "/chat/completions")?;
        let headers = fixed_headers(&config)?;
        let endpoint = Endpoint::new(url, headers, config.patience, errors::from_status)?;
        Ok(Self { config, endpoint })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

#[async_trait]
impl ModelClient for OpenAiClient {
    /// `request.thinking` is ignored (see the module documentation).
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = request::request_body(request, false)?;
        self.endpoint.complete(&body, response::parse_completion).await
    }

    /// `request.thinking` is ignored (see the module documentation).
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        let body = request::request_body(request, true)?;
        self.endpoint.stream(&body, || Assembler::new(MAX_BODY_BYTES), on_event).await
    }
}

/// `Authorization: Bearer <key>` when there is a key (marked sensitive, so no log or debug
/// output of the headers shows it), and the body's type.
fn fixed_headers(config: &OpenAiConfig) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ConfigError::Credential)?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_cannot_be_headers_are_refused_without_echoing_them() {
        let config = OpenAiConfig::new(DEFAULT_OPENAI_BASE_URL, Some("sk-secret\nInjected: yes".into()));
        let error = OpenAiClient::new(config).unwrap_err();
        assert_eq!(error, ConfigError::Credential);
        assert!(!error.to_string().contains("sk-secret"));
    }

    #[test]
    fn the_url_keeps_the_sdk_style_base() {
        let client = OpenAiClient::new(OpenAiConfig::new(DEFAULT_OPENAI_BASE_URL, None)).unwrap();
        assert_eq!(client.endpoint.url().as_str(), "https://api.openai.com/v1/chat/completions");
        let ollama = OpenAiClient::new(OpenAiConfig::new("http://localhost:11434/v1/", None)).unwrap();
        assert_eq!(ollama.endpoint.url().as_str(), "http://localhost:11434/v1/chat/completions");
        assert!(OpenAiClient::new(OpenAiConfig::new("localhost:11434", None)).is_err());
    }
}
