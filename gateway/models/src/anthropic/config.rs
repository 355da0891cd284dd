//! How an [`AnthropicClient`](super::AnthropicClient) reaches the API, and how patiently.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::http::{DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT, Patience};

/// The public endpoint; `ANTHROPIC_BASE_URL` overrides it when the server passes that on.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` this client's request and response shapes are written for.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// `[anthropic]`: what an operator may set about the client, in the gateway's file or its
/// `GATEWAY_ANTHROPIC__*` variables; missing keys keep the client's defaults. The credential is
/// deliberately not here: it comes from the environment only and is given to [`Self::config`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnthropicSettings {
    /// Scheme, host and optional path prefix ([`DEFAULT_BASE_URL`]).
    pub base_url: String,
    /// See [`AnthropicConfig::max_retries`].
    pub max_retries: u32,
    /// See [`AnthropicConfig::request_timeout`], in seconds.
    pub request_timeout_secs: u64,
}

impl Default for AnthropicSettings {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            max_retries: DEFAULT_MAX_RETRIES,
            request_timeout_secs: DEFAULT_REQUEST_TIMEOUT.as_secs(),
        }
    }
}

impl AnthropicSettings {
    /// The client's settings: these, the defaults for the rest, and `credential`.
    pub fn config(&self, credential: Credential) -> AnthropicConfig {
        let mut config = AnthropicConfig::new(self.base_url.clone(), credential);
        config.patience.max_retries = self.max_retries;
        config.patience.request_timeout = Duration::from_secs(self.request_timeout_secs);
        config
    }
}

/// The secret that authenticates the gateway. Its `Debug` never shows the secret, so configs
/// and clients can be logged freely.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// An API key, sent as `x-api-key`.
    ApiKey(String),
    /// A bearer token (OAuth, or a gateway in front of the API), sent as `Authorization: Bearer`.
    Bearer(String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// Settings of an [`AnthropicClient`](super::AnthropicClient). Start from
/// [`AnthropicConfig::new`] and override fields.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicConfig {
    /// Scheme, host and optional path prefix; `/v1/messages` is appended.
    pub base_url: String,
    pub credential: Credential,
    pub anthropic_version: String,
    /// Values of the `anthropic-beta` header (none by default).
    pub betas: Vec<String>,
    /// Retries and timeouts.
    pub patience: Patience,
}

impl AnthropicConfig {
    /// The defaults, for `base_url` (usually [`DEFAULT_BASE_URL`]) and `credential`.
    pub fn new(base_url: impl Into<String>, credential: Credential) -> Self {
        Self {
            base_url: base_url.into(),
            credential,
            anthropic_version: DEFAULT_ANTHROPIC_VERSION.to_owned(),
            betas: Vec::new(),
            patience: Patience::DEFAULT,
        }
    }
}
