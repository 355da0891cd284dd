//! How an [`OpenAiClient`](super::OpenAiClient) reaches a Chat Completions server, and how
//! patiently.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::http::{DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT, Patience};

/// OpenAI's endpoint, written as the official SDKs take a base URL: with the `/v1` prefix.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// `[openai]`: what an operator may set about the client, in the gateway's file or its
/// environment; missing keys keep the client's defaults. The API key is deliberately not
/// here: it is a secret, read from the environment only and given to [`Self::config`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OpenAiSettings {
    /// See [`OpenAiConfig::base_url`] ([`DEFAULT_OPENAI_BASE_URL`]).
    pub base_url: String,
    /// See [`OpenAiConfig::max_retries`].
    pub max_retries: u32,
    /// See [`OpenAiConfig::request_timeout`], in seconds.
    pub request_timeout_secs: u64,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_OPENAI_BASE_URL.to_owned(),
            max_retries: DEFAULT_MAX_RETRIES,
            request_timeout_secs: DEFAULT_REQUEST_TIMEOUT.as_secs(),
        }
    }
}

impl OpenAiSettings {
    /// The client's settings: these, the defaults for the rest, and `api_key`.
    pub fn config(&self, api_key: Option<String>) -> OpenAiConfig {
        let mut config = OpenAiConfig::new(self.base_url.clone(), api_key);
        config.max_retries = self.max_retries;
        config.request_timeout = Duration::from_secs(self.request_timeout_secs);
        config
    }
}

/// Settings of an [`OpenAiClient`](super::OpenAiClient). Start from [`OpenAiConfig::new`] and
/// override fields. Its `Debug` never shows the API key, so configs and clients can be logged.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Scheme, host and path prefix, as the OpenAI SDKs take it (`/v1` included):
    /// [`DEFAULT_OPENAI_BASE_URL`], `http://localhost:11434/v1` for Ollama,
    /// `http://localhost:8000/v1` for vLLM. `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>`. `None` (or an empty key, which is how an unset
    /// environment variable often arrives) sends no `Authorization` at all: local servers
    /// (vLLM, Ollama) need none.
    pub api_key: Option<String>,
    /// Extra attempts after a transient failure (429, 5xx, network errors, a stream cut
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
    /// Longest silence tolerated inside a stream. Chat Completions streams send no
    /// keep-alives, so this also bounds how long a model may think before its first token.
    pub stream_idle_timeout: Duration,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .field("retry_max", &self.retry_max)
            .field("max_retry_after", &self.max_retry_after)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle_timeout", &self.stream_idle_timeout)
            .finish()
    }
}

impl OpenAiConfig {
    /// The defaults, for `base_url` (usually [`DEFAULT_OPENAI_BASE_URL`]) and `api_key`.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        let p = Patience::DEFAULT;
        Self {
            base_url: base_url.into(),
            api_key,
            max_retries: p.max_retries,
            retry_base: p.retry_base,
            retry_max: p.retry_max,
            max_retry_after: p.max_retry_after,
            connect_timeout: p.connect_timeout,
            request_timeout: p.request_timeout,
            stream_idle_timeout: p.stream_idle_timeout,
        }
    }

    pub(crate) fn patience(&self) -> Patience {
        Patience {
            max_retries: self.max_retries,
            retry_base: self.retry_base,
            retry_max: self.retry_max,
            max_retry_after: self.max_retry_after,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            stream_idle_timeout: self.stream_idle_timeout,
        }
    }
}
