//! `web_search` through the operator's search provider (the Brave Search API:
//! `GET {base_url}/res/v1/web/search?q=…&count=…`, key in `X-Subscription-Token`, results in
//! `web.results[]` with `title`, `url`, `description`).
//!
//! The provider's URL is the operator's choice, not the model's, so it does not pass the SSRF
//! guard (an operator may well run a provider proxy on a private address); what the model
//! controls (the query, the count) only fills query parameters. The request still has a
//! deadline, follows no redirect (a redirect would carry the key to another host), and its
//! answer is read only up to `max_response_bytes`. The key is read once from the environment
//! variable the config names, sent as a sensitive header, and never written into an error
//! (an error detail the provider sends back has it scrubbed) or a log line.

use reqwest::header::{ACCEPT, HeaderValue};
use serde::Deserialize;

use super::body;
use super::{
    DomainRules, MAX_QUERY_CHARS, MAX_QUERY_WORDS, MAX_SEARCH_RESULTS, SearchConfig, SearchProvider, WebError,
    WebTools, tool_input,
};
use crate::ssrf;

/// The path of Brave's web search under its API root.
const BRAVE_WEB_SEARCH_PATH: &str = "/res/v1/web/search";
/// The header Brave reads the key from.
const BRAVE_KEY_HEADER: &str = "x-subscription-token";
/// The most characters of a result's title and description kept.
const MAX_TITLE_CHARS: usize = 300;
const MAX_DESCRIPTION_CHARS: usize = 1_000;
/// The most characters of a provider's error detail quoted.
const MAX_DETAIL_CHARS: usize = 200;

/// The `web_search` tool's input.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SearchInput {
    /// What to search for.
    pub query: String,
    /// How many results (1..=20); the operator's `max_results` when absent.
    #[serde(default)]
    pub count: Option<u32>,
}

impl SearchInput {
    /// The input of a tool call, checked against its bounds.
    pub fn parse(input: &serde_json::Value) -> Result<Self, WebError> {
        let this: Self = tool_input(input, r#"web_search takes {"query": string, "count"?: integer 1..=20}"#)?;
        check_query(&this.query)?;
        check_count(this.count)?;
        Ok(this)
    }
}

/// The query as sent: whitespace collapsed, bounded like the provider bounds it.
fn check_query(query: &str) -> Result<String, WebError> {
    let words: Vec<&str> = query.split_whitespace().collect();
    let q = words.join(" ");
    if q.is_empty() || q.chars().count() > MAX_QUERY_CHARS || words.len() > MAX_QUERY_WORDS {
        return Err(WebError::BadInput(format!(
            "query must be 1..={MAX_QUERY_CHARS} characters and at most {MAX_QUERY_WORDS} words"
        )));
    }
    Ok(q)
}

fn check_count(count: Option<u32>) -> Result<(), WebError> {
    match count {
        Some(n) if n == 0 || n > MAX_SEARCH_RESULTS => {
            Err(WebError::BadInput(format!("count must be 1..={MAX_SEARCH_RESULTS}")))
        }
        _ => Ok(()),
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub description: String,
}

/// The text the model reads for a search: one numbered entry per result.
pub fn render_search(query: &str, hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return format!("No results for \"{query}\".");
    }
    let mut out = format!("Results for \"{query}\":\n");
    for (i, h) in hits.iter().enumerate() {
        out.push_str(&format!("\n{}. {}\n   {}\n", i + 1, h.title, h.url));
        if !h.description.is_empty() {
            out.push_str(&format!("   {}\n", h.description));
        }
    }
    out
}

/// The provider, ready to call: built once from the config and the key.
#[derive(Debug)]
pub(crate) struct SearchBackend {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    /// The key as a sensitive header value (its `Debug` shows nothing of it).
    key: HeaderValue,
    key_env: String,
}

impl SearchBackend {
    /// The provider of `config` with `key`, or why searches cannot run (the error a search
    /// then answers and `gateway check` reports).
    pub(crate) fn prepare(config: &SearchConfig, key: Option<String>) -> Result<Self, WebError> {
        let key_env = config.api_key_env.clone();
        let Some(SearchProvider::Brave) = config.provider else {
            return Err(WebError::NoSearchProvider { key_env });
        };
        let Some(key) = key.filter(|k| !k.trim().is_empty()) else {
            return Err(WebError::NoSearchKey { key_env });
        };
        let mut key = HeaderValue::from_str(key.trim())
            .map_err(|_| WebError::ProviderFailed(format!("the key in {key_env} is not a valid HTTP header value")))?;
        key.set_sensitive(true);
        let endpoint = format!("{}{BRAVE_WEB_SEARCH_PATH}", config.base_url.trim_end_matches('/'));
        let endpoint = reqwest::Url::parse(&endpoint)
            .map_err(|_| WebError::ProviderFailed(format!("web.search.base_url {:?} is not a URL", config.base_url)))?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .build()
            .map_err(|e| WebError::ProviderFailed(format!("building the HTTP client failed: {e}")))?;
        Ok(Self { client, endpoint, key, key_env })
    }

    /// `text` without the key in it (a provider may quote what it was sent).
    fn scrub(&self, text: &str) -> String {
        match self.key.to_str() {
            Ok(k) if !k.is_empty() => text.replace(k, "[key]"),
            _ => text.to_owned(),
        }
    }
}

/// Brave's answer, as far as it is read (every other field ignored).
#[derive(Debug, Default, Deserialize)]
struct BraveAnswer {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Debug, Default, Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Debug, Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    description: String,
}

/// Brave's error body: `{"type": "ErrorResponse", "error": {"code", "detail", ...}}`.
#[derive(Debug, Deserialize)]
struct BraveError {
    error: BraveErrorDetail,
}

#[derive(Debug, Deserialize)]
struct BraveErrorDetail {
    #[serde(default)]
    code: String,
    #[serde(default)]
    detail: String,
}

impl WebTools {
    /// Searches through the configured provider; `count` defaults to the operator's
    /// `max_results`. With domain rules the provider is asked for its most results, and those
    /// the rules do not permit are dropped before `count` are kept.
    pub async fn search(
        &self,
        query: &str,
        count: Option<u32>,
        domains: &DomainRules,
    ) -> Result<Vec<SearchHit>, WebError> {
        let query = check_query(query)?;
        check_count(count)?;
        let backend = self.inner.search.as_ref().map_err(Clone::clone)?;
        let config = &self.inner.config.search;
        let wanted = count.unwrap_or(config.max_results).clamp(1, MAX_SEARCH_RESULTS);
        let ask = if domains.is_open() { wanted } else { MAX_SEARCH_RESULTS };
        let mut url = backend.endpoint.clone();
        url.query_pairs_mut().append_pair("q", &query).append_pair("count", &ask.to_string());
        let timed_out = || WebError::Timeout { secs: config.timeout.as_secs(), setting: "search.timeout_secs" };

        let response = backend
            .client
            .get(url)
            .header(ACCEPT, "application/json")
            .header(BRAVE_KEY_HEADER, backend.key.clone())
            .send()
            .await
            .map_err(|e| if e.is_timeout() { timed_out() } else { WebError::ProviderFailed(ssrf::send_failure(e)) })?;
        let status = response.status();
        let read = body::read_capped(response, config.max_response_bytes)
            .await
            .map_err(|e| if e.is_timeout() { timed_out() } else { WebError::ProviderFailed(ssrf::send_failure(e)) })?;
        if !status.is_success() {
            let said = serde_json::from_slice::<BraveError>(&read.bytes).ok().map(|b| b.error);
            let detail = said
                .map(|d| {
                    let text = [d.code, d.detail].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(": ");
                    body::cut_chars(backend.scrub(&text), MAX_DETAIL_CHARS).0
                })
                .filter(|d| !d.is_empty())
                .map(|d| format!(", {d}"))
                .unwrap_or_default();
            return Err(match status.as_u16() {
                401 | 403 | 429 => {
                    WebError::ProviderRefused { status: status.as_u16(), detail, key_env: backend.key_env.clone() }
                }
                s => WebError::ProviderFailed(format!("HTTP {s}{detail}")),
            });
        }
        if read.cut {
            return Err(WebError::ProviderFailed(format!(
                "its answer is larger than {} bytes (web.search.max_response_bytes)",
                config.max_response_bytes
            )));
        }
        let answer: BraveAnswer = serde_json::from_slice(&read.bytes)
            .map_err(|e| WebError::ProviderFailed(format!("its answer is not the expected JSON: {e}")))?;
        let hits = answer
            .web
            .unwrap_or_default()
            .results
            .into_iter()
            .filter_map(|r| {
                let url = reqwest::Url::parse(&r.url).ok().filter(|u| matches!(u.scheme(), "http" | "https"))?;
                domains.permits(&url).then(|| SearchHit {
                    title: fragment(&r.title, MAX_TITLE_CHARS),
                    url: url.to_string(),
                    description: fragment(&r.description, MAX_DESCRIPTION_CHARS),
                })
            })
            .take(wanted as usize)
            .collect();
        Ok(hits)
    }
}

/// A title or snippet (HTML marks and entities) as bounded plain text.
fn fragment(html: &str, max: usize) -> String {
    // Bound the input before parsing it, then the text after.
    let (html, _) = body::cut_chars(html.to_owned(), max * 4);
    body::cut_chars(body::html_fragment_to_line(&html), max).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_bounded() {
        let ok = SearchInput::parse(&serde_json::json!({"query": "rust  async", "count": 5})).expect("valid");
        assert_eq!(ok.count, Some(5));
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"query": 3}),
            serde_json::json!({"query": "   "}),
            serde_json::json!({"query": "x".repeat(MAX_QUERY_CHARS + 1)}),
            serde_json::json!({"query": "w ".repeat(MAX_QUERY_WORDS + 1)}),
            serde_json::json!({"query": "q", "count": 0}),
            serde_json::json!({"query": "q", "count": 21}),
            serde_json::json!({"query": "q", "count": -1}),
        ] {
            assert!(matches!(SearchInput::parse(&bad), Err(WebError::BadInput(_))), "{bad}");
        }
    }

    #[test]
    fn without_provider_or_key_the_error_names_the_setting() {
        let mut c = SearchConfig::default();
        let e = SearchBackend::prepare(&c, Some("k".into())).expect_err("no provider");
        assert_eq!(
            e.to_string(),
            "web_search has no provider: set web.search.provider = \"brave\" and the BRAVE_SEARCH_API_KEY environment variable"
        );
        c.provider = Some(SearchProvider::Brave);
        c.api_key_env = "MY_KEY".into();
        let e = SearchBackend::prepare(&c, None).expect_err("no key");
        assert!(e.to_string().contains("set the MY_KEY environment variable"), "{e}");
        let ready = SearchBackend::prepare(&c, Some("secret-key".into())).expect("ready");
        assert!(!format!("{ready:?}").contains("secret-key"), "the key never shows in Debug");
        assert_eq!(ready.endpoint.as_str(), "https://api.search.brave.com/res/v1/web/search");
    }

    #[test]
    fn rendering_numbers_each_result() {
        let hits = vec![
            SearchHit { title: "One".into(), url: "https://a.example/".into(), description: "first".into() },
            SearchHit { title: "Two".into(), url: "https://b.example/".into(), description: String::new() },
        ];
        assert_eq!(
            render_search("q", &hits),
            "Results for \"q\":\n\n1. One\n   https://a.example/\n   first\n\n2. Two\n   https://b.example/\n"
        );
        assert_eq!(render_search("q", &[]), "No results for \"q\".");
    }
}
