//! Why a web tool call produced no result. Each message is written for the model that made the
//! call (it reads it as the tool's error result) and for the operator who reads the log: it
//! names the fact and, where the operator can change it, the setting. No message carries a
//! search key, and none carries more of a URL than its host.

use crate::ssrf::TargetError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebError {
    /// The tool's input is malformed or out of bounds.
    #[error("invalid input: {0}")]
    BadInput(String),
    /// Not a URL the tool fetches.
    #[error("cannot fetch {0}: the URL must be absolute http or https, without credentials, at most 2048 characters")]
    BadUrl(String),
    /// The SSRF guard refused a non-public target (first URL or a redirect).
    #[error(
        "refused to fetch {host}: it is a loopback, private or other non-public address; the operator can allow such targets with web.allow_private_targets = true"
    )]
    Refused { host: String },
    /// The agent's domain rules do not permit a host (first URL or a redirect).
    #[error("refused to fetch {host}: {why}")]
    DomainNotPermitted { host: String, why: String },
    /// The fetch or search took longer than its bound.
    #[error("timed out after {secs} s (the operator's web.{setting})")]
    Timeout { secs: u64, setting: &'static str },
    /// A redirect chain longer than [`super::MAX_REDIRECTS`].
    #[error("too many redirects: more than {max} (last location on {host})")]
    TooManyRedirects { max: usize, host: String },
    /// A redirect whose `Location` is missing or unreadable.
    #[error("the server answered a redirect ({status}) without a usable Location")]
    BadRedirect { status: u16 },
    /// The request could not be sent or its answer read (connection refused, reset, TLS...).
    #[error("{0}")]
    Request(String),
    /// No search provider is configured.
    #[error("web_search has no provider: set web.search.provider = \"brave\" and the {key_env} environment variable")]
    NoSearchProvider { key_env: String },
    /// The provider is configured but its key is not in the environment.
    #[error(
        "web_search has no API key: set the {key_env} environment variable (named by web.search.api_key_env) for the gateway"
    )]
    NoSearchKey { key_env: String },
    /// The provider refused the key (401/403) or the rate (429).
    #[error("the search provider refused the request (HTTP {status}{detail}); check the key in {key_env} and its plan")]
    ProviderRefused { status: u16, detail: String, key_env: String },
    /// The provider failed otherwise, or answered something this gateway cannot read.
    #[error("the search provider failed: {0}")]
    ProviderFailed(String),
}

impl WebError {
    /// A guard refusal of [`crate::ssrf::check_url`] as the tool says it.
    pub(crate) fn from_target(e: TargetError) -> Self {
        match e {
            TargetError::BadUrl(url) => Self::BadUrl(url),
            TargetError::Private(host) => Self::Refused { host },
        }
    }
}
