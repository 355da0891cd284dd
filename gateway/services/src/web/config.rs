//! `[web]`: the operator's settings of the two web tools, with their defaults. The composition
//! root only parses the file and the environment into [`WebConfig`]; every bound the tools
//! enforce is a field here or a named constant beside the code that enforces it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The most redirects one fetch follows (each hop re-checked like the first URL).
pub const MAX_REDIRECTS: usize = 5;
/// The longest URL a fetch accepts (the SSRF guard refuses longer ones too).
pub const MAX_URL_CHARS: usize = 2048;
/// The longest query a search accepts (Brave's own limit: 400 characters, 50 words).
pub const MAX_QUERY_CHARS: usize = 400;
/// The most words a query may have (Brave's own limit).
pub const MAX_QUERY_WORDS: usize = 50;
/// The most results one search may ask for (Brave answers at most 20 per request).
pub const MAX_SEARCH_RESULTS: u32 = 20;

/// Upper bounds on the operator's own settings, so a typo cannot make a tool unbounded.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_FETCH_BYTES: u64 = 64 * 1024 * 1024;
const MAX_TEXT_CHARS: usize = 10_000_000;
const MAX_SEARCH_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// `[web]` settings of `web_fetch` and `web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Lets fetches reach loopback, private, link-local and other non-public addresses
    /// (the SSRF guard refuses them otherwise). Off by default: a model can be talked into
    /// fetching a cloud metadata endpoint or an internal admin page.
    pub allow_private_targets: bool,
    /// Total time of one fetch, every redirect and the body included.
    #[serde(rename = "fetch_timeout_secs", with = "gateway_core::durations::secs")]
    pub fetch_timeout: Duration,
    /// The most body bytes one fetch reads; the rest is never read, and the result says so.
    pub max_fetch_bytes: u64,
    /// The most characters of text one fetch returns to the model; the result says when cut.
    pub max_text_chars: usize,
    /// `[web.search]`: the search provider.
    pub search: SearchConfig,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            allow_private_targets: false,
            fetch_timeout: Duration::from_secs(30),
            max_fetch_bytes: 2 * 1024 * 1024,
            max_text_chars: 100_000,
            search: SearchConfig::default(),
        }
    }
}

/// The search providers `web_search` can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchProvider {
    /// The Brave Search API (`GET /res/v1/web/search`, key in `X-Subscription-Token`).
    Brave,
}

/// `[web.search]` settings. The key itself is never here: only the name of the environment
/// variable that holds it, so a config file can be shared and logged without leaking it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// The provider; unset, `web_search` answers an error that says how to set one.
    pub provider: Option<SearchProvider>,
    /// The provider's API root, chosen by the operator (so not subject to the SSRF guard).
    pub base_url: String,
    /// The NAME of the environment variable that holds the API key.
    pub api_key_env: String,
    /// Results returned when the model does not ask for a number (1..=20).
    pub max_results: u32,
    /// Total time of one search request.
    #[serde(rename = "timeout_secs", with = "gateway_core::durations::secs")]
    pub timeout: Duration,
    /// The most bytes of the provider's answer read; a larger answer is an error.
    pub max_response_bytes: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            provider: None,
            base_url: "https://api.search.brave.com".to_owned(),
            api_key_env: "BRAVE_SEARCH_API_KEY".to_owned(),
            max_results: 10,
            timeout: Duration::from_secs(15),
            max_response_bytes: 1024 * 1024,
        }
    }
}

/// A `[web]` setting out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("web.{key}: {problem}")]
pub struct WebConfigError {
    pub key: &'static str,
    pub problem: String,
}

impl WebConfig {
    /// Checks every setting's range (start-up and `gateway check` call this through
    /// [`super::WebTools::new`]).
    pub fn validate(&self) -> Result<(), WebConfigError> {
        let err = |key, problem: String| Err(WebConfigError { key, problem });
        if self.fetch_timeout.is_zero() || self.fetch_timeout > MAX_TIMEOUT {
            return err("fetch_timeout_secs", format!("must be 1..={}", MAX_TIMEOUT.as_secs()));
        }
        if self.max_fetch_bytes == 0 || self.max_fetch_bytes > MAX_FETCH_BYTES {
            return err("max_fetch_bytes", format!("must be 1..={MAX_FETCH_BYTES}"));
        }
        if self.max_text_chars == 0 || self.max_text_chars > MAX_TEXT_CHARS {
            return err("max_text_chars", format!("must be 1..={MAX_TEXT_CHARS}"));
        }
        let s = &self.search;
        if s.max_results == 0 || s.max_results > MAX_SEARCH_RESULTS {
            return err("search.max_results", format!("must be 1..={MAX_SEARCH_RESULTS}"));
        }
        if s.timeout.is_zero() || s.timeout > MAX_TIMEOUT {
            return err("search.timeout_secs", format!("must be 1..={}", MAX_TIMEOUT.as_secs()));
        }
        if s.max_response_bytes == 0 || s.max_response_bytes > MAX_SEARCH_RESPONSE_BYTES {
            return err("search.max_response_bytes", format!("must be 1..={MAX_SEARCH_RESPONSE_BYTES}"));
        }
        if s.api_key_env.is_empty() || s.api_key_env.contains(['=', '\0']) {
            return err("search.api_key_env", "must name an environment variable".to_owned());
        }
        match reqwest::Url::parse(&s.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.query().is_none() => Ok(()),
            _ => {
                err("search.base_url", format!("must be an absolute http(s) URL without a query, not {:?}", s.base_url))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_toml_names() {
        let c = WebConfig::default();
        assert!(!c.allow_private_targets);
        assert_eq!(c.fetch_timeout, Duration::from_secs(30));
        assert_eq!(c.max_fetch_bytes, 2 * 1024 * 1024);
        assert_eq!(c.max_text_chars, 100_000);
        assert_eq!(c.search.provider, None);
        assert_eq!(c.search.base_url, "https://api.search.brave.com");
        assert_eq!(c.search.api_key_env, "BRAVE_SEARCH_API_KEY");
        assert_eq!(c.search.max_results, 10);
        assert_eq!(c.validate(), Ok(()));

        let parsed: WebConfig = serde_json::from_value(serde_json::json!({
            "allow_private_targets": true,
            "fetch_timeout_secs": 5,
            "search": {"provider": "brave", "max_results": 3}
        }))
        .expect("parses");
        assert!(parsed.allow_private_targets);
        assert_eq!(parsed.fetch_timeout, Duration::from_secs(5));
        assert_eq!(parsed.search.provider, Some(SearchProvider::Brave));
        assert_eq!(parsed.search.max_results, 3);
        assert_eq!(parsed.max_text_chars, 100_000, "unset keys keep their defaults");

        // A misspelt safety switch is an error, not a silent default.
        assert!(serde_json::from_value::<WebConfig>(serde_json::json!({"allow_private_target": true})).is_err());
        assert!(serde_json::from_value::<WebConfig>(serde_json::json!({"search": {"provider": "bing"}})).is_err());
    }

    #[test]
    fn out_of_range_settings_name_their_key() {
        type Change = fn(&mut WebConfig);
        let cases: [(Change, &str); 6] = [
            (|c| c.fetch_timeout = Duration::ZERO, "web.fetch_timeout_secs"),
            (|c| c.max_fetch_bytes = 0, "web.max_fetch_bytes"),
            (|c| c.max_text_chars = 0, "web.max_text_chars"),
            (|c| c.search.max_results = 21, "web.search.max_results"),
            (|c| c.search.base_url = "api.search.brave.com".into(), "web.search.base_url"),
            (|c| c.search.api_key_env = String::new(), "web.search.api_key_env"),
        ];
        for (change, key) in cases {
            let mut c = WebConfig::default();
            change(&mut c);
            let e = c.validate().expect_err(key);
            assert!(e.to_string().starts_with(key), "{e}");
        }
    }
}
