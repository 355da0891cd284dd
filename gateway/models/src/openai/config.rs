//! How an [`OpenAiClient`](super::OpenAiClient) reaches a Chat Completions server, and how
//! patiently.

use std::fmt;

use crate::http::Patience;

/// OpenAI's endpoint, written as the official SDKs take a base URL: with the `/v1` prefix.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

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
    /// Retries and timeouts.
    pub patience: Patience,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("patience", &self.patience)
            .finish()
    }
}

impl OpenAiConfig {
    /// The defaults, for `base_url` (usually [`DEFAULT_OPENAI_BASE_URL`]) and `api_key`.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self { base_url: base_url.into(), api_key, patience: Patience::DEFAULT }
    }
}
