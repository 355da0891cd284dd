//! The two web tools of the built-in toolset: `web_fetch` (an SSRF-guarded GET whose answer
//! the model reads as text) and `web_search` (through the operator's search provider).
//!
//! [`WebTools`] is built once from `[web]` ([`WebConfig`]) at start-up, holds the guarded fetch
//! client and the search provider, and is cheap to clone (one `Arc`). Its calls return neutral
//! values ([`Fetched`], [`SearchHit`]) or a typed [`WebError`] whose message a model can read;
//! [`render_fetch`] and [`render_search`] give the text a tool result carries, and
//! [`WebTools::answer`] does the whole call (input checked, tool run, text rendered) for a
//! tool loop. An agent's allowed and blocked domains arrive as [`DomainRules`] per call: they
//! only narrow what the operator's settings permit.
//!
//! - [`config`]: `[web]` and `[web.search]`, their defaults and ranges.
//! - [`fetch`]: the fetch, its redirects and its result; [`body`]: bounded reading, media
//!   types, HTML to text.
//! - [`search`]: the Brave Search API client and its result.
//! - [`domains`]: the agent's domain rules.

mod body;
mod config;
mod domains;
mod error;
mod fetch;
mod search;

use std::sync::Arc;

/// Bounded body reads, shared with the other outbound clients of this crate (token endpoints).
pub(crate) use body::read_capped;
pub use config::{
    MAX_QUERY_CHARS, MAX_QUERY_WORDS, MAX_REDIRECTS, MAX_SEARCH_RESULTS, MAX_URL_CHARS, SearchConfig, SearchProvider,
    WebConfig, WebConfigError,
};
pub use domains::{DomainRules, MAX_DOMAIN_RULES};
pub use error::WebError;
pub use fetch::{ERROR_EXCERPT_CHARS, FetchInput, Fetched, render_fetch};
pub use search::{SearchHit, SearchInput, render_search};

use search::SearchBackend;

/// A tool call's input read into its type; a shape it does not fit is the model's error,
/// naming the shape the tool takes (`usage`).
fn tool_input<T: serde::de::DeserializeOwned>(input: &serde_json::Value, usage: &str) -> Result<T, WebError> {
    T::deserialize(input).map_err(|e| WebError::BadInput(format!("{usage}: {e}")))
}

/// The web tools, ready to call. Clones share one fetch client and one search client.
#[derive(Debug, Clone)]
pub struct WebTools {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: WebConfig,
    /// The SSRF-guarded client: no redirects, public-only resolver unless private targets
    /// are allowed, the fetch timeout per request (the whole chain has its own deadline).
    fetch_client: reqwest::Client,
    /// The search provider, or why there is none (the error every search answers).
    search: Result<SearchBackend, WebError>,
}

impl WebTools {
    /// The tools of `config`, the search key read from the environment variable
    /// `web.search.api_key_env` names (once: a new key needs a restart).
    pub fn new(config: &WebConfig) -> Result<Self, WebConfigError> {
        Self::with_search_key(config, std::env::var(&config.search.api_key_env).ok())
    }

    /// The tools of `config` with the search key given (tests; a composition root that reads
    /// its secrets elsewhere).
    pub fn with_search_key(config: &WebConfig, key: Option<String>) -> Result<Self, WebConfigError> {
        config.validate()?;
        let fetch_client = crate::ssrf::client(config.allow_private_targets, config.fetch_timeout);
        let search = SearchBackend::prepare(&config.search, key);
        Ok(Self { inner: Arc::new(Inner { config: config.clone(), fetch_client, search }) })
    }

    /// The settings these tools were built from.
    pub fn config(&self) -> &WebConfig {
        &self.inner.config
    }

    /// One tool call of a model: `input` checked, the tool run, its result rendered.
    pub async fn answer(&self, tool: WebTool, input: &serde_json::Value, domains: &DomainRules) -> WebAnswer {
        let result = match tool {
            WebTool::Fetch => match FetchInput::parse(input) {
                Ok(i) => self
                    .fetch(&i.url, i.max_chars, domains)
                    .await
                    .map(|f| WebAnswer { text: render_fetch(&f), is_error: f.is_error() }),
                Err(e) => Err(e),
            },
            WebTool::Search => match SearchInput::parse(input) {
                Ok(i) => self.search(&i.query, i.count, domains).await.map(|hits| WebAnswer {
                    text: render_search(&i.query.split_whitespace().collect::<Vec<_>>().join(" "), &hits),
                    is_error: false,
                }),
                Err(e) => Err(e),
            },
        };
        result.unwrap_or_else(|e| WebAnswer { text: e.to_string(), is_error: true })
    }
}

/// Which web tool a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebTool {
    Fetch,
    Search,
}

impl WebTool {
    /// The tool of a built-in tool name, if it is a web tool.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "web_fetch" => Some(Self::Fetch),
            "web_search" => Some(Self::Search),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fetch => "web_fetch",
            Self::Search => "web_search",
        }
    }
}

/// A tool call's result as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebAnswer {
    pub text: String,
    pub is_error: bool,
}

/// Whether `web_search` can run with `config` and this process's environment: the settings'
/// ranges, a provider, and its key in the environment. `Err` says what to set (the key's
/// variable by name, never its value); for `gateway check`.
pub fn search_readiness(config: &WebConfig) -> Result<(), String> {
    config.validate().map_err(|e| e.to_string())?;
    let key = std::env::var(&config.search.api_key_env).ok();
    SearchBackend::prepare(&config.search, key).map(drop).map_err(|e| e.to_string())
}
