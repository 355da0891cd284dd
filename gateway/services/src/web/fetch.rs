//! `web_fetch`: one GET of an http(s) URL through the SSRF guard, redirects followed by hand.
//!
//! The guarded client ([`crate::ssrf::client`]) follows no redirect and resolves names only to
//! public addresses (unless the operator allowed private targets), so DNS rebinding cannot
//! move a checked name to an internal address. Each `Location` is resolved against the URL
//! that answered it and checked exactly like the first URL ([`WebTools::check_target`]: the
//! guard's literal check, then the agent's domain rules) before it is fetched through the
//! same client. One deadline covers the whole chain and the body; the body is read only up
//! to `max_fetch_bytes`.

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use serde::Deserialize;
use tokio::time::{Instant, timeout_at};

use super::body::{self, Kind};
use super::{DomainRules, MAX_REDIRECTS, MAX_URL_CHARS, WebError, WebTools, tool_input};
use crate::ssrf;

/// The most characters of an error page (4xx/5xx) returned: enough to see what the server
/// said, not a page of boilerplate.
pub const ERROR_EXCERPT_CHARS: usize = 1_000;
/// The most bytes of an error page read.
const ERROR_BODY_BYTES: u64 = 64 * 1024;
/// What the fetch asks for: text first, anything else accepted (and then only described).
const ACCEPT_TEXT: &str = "text/html, application/xhtml+xml, text/*;q=0.9, application/json;q=0.9, */*;q=0.5";

/// The `web_fetch` tool's input.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FetchInput {
    /// The absolute http(s) URL to fetch.
    pub url: String,
    /// The most characters of text the model wants (at most the operator's `max_text_chars`).
    #[serde(default)]
    pub max_chars: Option<u64>,
}

impl FetchInput {
    /// The input of a tool call, checked against its bounds.
    pub fn parse(input: &serde_json::Value) -> Result<Self, WebError> {
        let this: Self = tool_input(input, r#"web_fetch takes {"url": string, "max_chars"?: integer}"#)?;
        if this.url.trim().is_empty() || this.url.chars().count() > MAX_URL_CHARS {
            return Err(WebError::BadInput(format!("url must be 1..={MAX_URL_CHARS} characters")));
        }
        if this.max_chars == Some(0) {
            return Err(WebError::BadInput("max_chars must be at least 1".to_owned()));
        }
        Ok(this)
    }
}

/// What a fetch returned: a neutral value the caller renders ([`render_fetch`]) or maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The URL that answered (after redirects).
    pub url: String,
    /// Its HTTP status.
    pub status: u16,
    /// Its `Content-Type`, as sent.
    pub content_type: Option<String>,
    /// The text the model reads: the page's text, or a description of a body that is not text.
    pub text: String,
    /// Whether `text` is a description of a non-text body rather than the body.
    pub opaque: bool,
    /// Body bytes read.
    pub bytes_read: u64,
    /// The body went on past `max_fetch_bytes` and the rest was not read.
    pub bytes_cut: bool,
    /// The text was cut at the character bound.
    pub chars_cut: bool,
}

impl Fetched {
    /// An HTTP error status (4xx/5xx): the call's result is an error the model can read.
    pub fn is_error(&self) -> bool {
        self.status >= 400
    }

    /// Whether anything was left out.
    pub fn is_cut(&self) -> bool {
        self.bytes_cut || self.chars_cut
    }
}

/// The text the model reads for a fetch.
pub fn render_fetch(f: &Fetched) -> String {
    let status = reqwest::StatusCode::from_u16(f.status).ok().and_then(|s| s.canonical_reason());
    let mut out = format!("URL: {}\nStatus: {}", f.url, f.status);
    if let Some(reason) = status {
        out.push(' ');
        out.push_str(reason);
    }
    out.push_str(&format!("\nContent-Type: {}\n\n", f.content_type.as_deref().unwrap_or("(none)")));
    if f.is_error() {
        out.push_str(&format!("The server answered HTTP {}. ", f.status));
        out.push_str(if f.text.is_empty() { "The body was empty." } else { "Start of the body:\n\n" });
    }
    out.push_str(&f.text);
    if f.bytes_cut {
        out.push_str(&format!("\n\n[cut: only the first {} bytes of the body were read]", f.bytes_read));
    }
    if f.chars_cut {
        out.push_str(&format!("\n\n[cut: the text was shortened to {} characters]", f.text.chars().count()));
    }
    out
}

impl WebTools {
    /// Fetches `url` (see the module doc); `max_chars` narrows the operator's text bound.
    pub async fn fetch(&self, url: &str, max_chars: Option<u64>, domains: &DomainRules) -> Result<Fetched, WebError> {
        let config = &self.inner.config;
        let deadline = Instant::now() + config.fetch_timeout;
        let timed_out = || WebError::Timeout { secs: config.fetch_timeout.as_secs(), setting: "fetch_timeout_secs" };
        let mut target = self.check_target(url, domains)?;
        let mut redirects = 0;
        let response = loop {
            let sent = self.inner.fetch_client.get(target.clone()).header(ACCEPT, ACCEPT_TEXT).send();
            let response = match timeout_at(deadline, sent).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) if e.is_timeout() => return Err(timed_out()),
                Ok(Err(e)) => return Err(send_error(e)),
                Ok(Ok(r)) => r,
            };
            if !response.status().is_redirection() || response.status() == reqwest::StatusCode::NOT_MODIFIED {
                break response;
            }
            let status = response.status().as_u16();
            let location = response.headers().get(LOCATION).and_then(|l| l.to_str().ok());
            let next = location.and_then(|l| target.join(l).ok()).ok_or(WebError::BadRedirect { status })?;
            if redirects == MAX_REDIRECTS {
                return Err(WebError::TooManyRedirects {
                    max: MAX_REDIRECTS,
                    host: next.host_str().unwrap_or_default().to_owned(),
                });
            }
            redirects += 1;
            target = self.check_target(next.as_str(), domains)?;
        };

        let status = response.status().as_u16();
        let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let final_url = response.url().to_string();
        let (cap, max_chars) = if status >= 400 {
            (config.max_fetch_bytes.min(ERROR_BODY_BYTES), ERROR_EXCERPT_CHARS)
        } else {
            let wanted = max_chars.and_then(|m| usize::try_from(m).ok()).unwrap_or(usize::MAX);
            (config.max_fetch_bytes, wanted.min(config.max_text_chars))
        };
        let read = match timeout_at(deadline, body::read_capped(response, cap)).await {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) if e.is_timeout() => return Err(timed_out()),
            Ok(Err(e)) => return Err(WebError::Request(format!("reading the body failed: {}", ssrf::send_failure(e)))),
            Ok(Ok(read)) => read,
        };
        let bytes_read = read.bytes.len() as u64;
        let kind = body::kind(content_type.as_deref(), &read.bytes);
        let text = match kind {
            Kind::Html => {
                let html = read.bytes;
                let converted = tokio::task::spawn_blocking(move || body::html_to_text(&html));
                match timeout_at(deadline, converted).await {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(_)) => return Err(WebError::Request("converting the page to text failed".to_owned())),
                    Ok(Ok(text)) => text,
                }
            }
            Kind::Text => String::from_utf8_lossy(&read.bytes).into_owned(),
            Kind::Opaque => describe_opaque(content_type.as_deref(), bytes_read, read.cut),
        };
        let (text, chars_cut) = body::cut_chars(text, max_chars);
        Ok(Fetched {
            url: final_url,
            status,
            content_type,
            text,
            opaque: kind == Kind::Opaque,
            bytes_read,
            bytes_cut: read.cut,
            chars_cut,
        })
    }

    /// The check every URL of a fetch passes, the first and each redirect's: the SSRF
    /// guard's check of the URL itself (scheme, credentials, literal non-public addresses and
    /// `localhost`), then the agent's domain rules. Names are checked again at connect time by
    /// the guarded client's resolver.
    pub fn check_target(&self, url: &str, domains: &DomainRules) -> Result<reqwest::Url, WebError> {
        let parsed = ssrf::check_url(url, self.inner.config.allow_private_targets).map_err(WebError::from_target)?;
        domains.check(&parsed)?;
        Ok(parsed)
    }
}

/// A failed send as the model reads it: a guard refusal names the setting; anything else
/// says what failed without the URL.
fn send_error(e: reqwest::Error) -> WebError {
    match ssrf::refusal(&e) {
        Some(refused) => WebError::from_target(refused.clone()),
        None => WebError::Request(ssrf::send_failure(e)),
    }
}

fn describe_opaque(content_type: Option<&str>, bytes: u64, cut: bool) -> String {
    let size = if cut { format!("more than {bytes} bytes") } else { format!("{bytes} bytes") };
    format!(
        "[content not shown: {}, {size}; web_fetch returns text, HTML, JSON and XML only]",
        content_type.unwrap_or("unknown type")
    )
}
