//! A response body as the model reads it: read up to a byte bound (the rest is never read),
//! classified by its media type, HTML turned into readable text by `html2text`, and cut to a
//! character bound. Pure functions but [`read_capped`], so each rule has one table test.

/// Width the HTML renderer wraps paragraphs at (the model reads lines, not a terminal).
const HTML_WRAP_COLUMNS: usize = 120;
/// Width a short fragment is rendered at: wider than any fragment, whose lines are then joined.
const FRAGMENT_COLUMNS: usize = 10_000;

/// What a body holds, by its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `text/html`, `application/xhtml+xml`: converted to text.
    Html,
    /// `text/*`, JSON, XML, JavaScript: returned as text (lossy UTF-8).
    Text,
    /// Anything else (images, archives, binaries): described, never returned.
    Opaque,
}

/// The kind of a body from its `Content-Type`; without one, from whether the bytes read look
/// like text (valid UTF-8 without NUL) or HTML.
pub(crate) fn kind(content_type: Option<&str>, body: &[u8]) -> Kind {
    let Some(ct) = content_type else {
        let head = String::from_utf8_lossy(&body[..body.len().min(512)]).trim_start().to_ascii_lowercase();
        return if head.starts_with("<!doctype html") || head.starts_with("<html") {
            Kind::Html
        } else if std::str::from_utf8(body).is_ok() && !body.contains(&0) {
            Kind::Text
        } else {
            Kind::Opaque
        };
    };
    let essence = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/ecmascript"
        | "application/x-ndjson"
        | "application/yaml"
        | "application/toml"
        | "application/x-sh" => Kind::Text,
        e if e.starts_with("text/") || e.ends_with("+json") || e.ends_with("+xml") => Kind::Text,
        _ => Kind::Opaque,
    }
}

/// HTML as readable text: headings, paragraphs, lists and tables kept, tags dropped, links
/// numbered with their targets listed at the end (so the model can follow them). CPU-bound:
/// callers run it off the async workers. A page the renderer cannot handle is given as its
/// lossy text rather than not at all.
///
/// The renderer's time grows with the square of tag nesting (measured: 10,000 nested `<div>`s
/// take about 2 s, 100,000 about 190 s in a debug build), and a thread cannot be stopped once
/// it runs: a page nested deeper than [`MAX_HTML_DEPTH`] is not rendered, and says so.
pub(crate) fn html_to_text(html: &[u8]) -> String {
    let html = String::from_utf8_lossy(html);
    let depth = nesting_depth(&html);
    if depth > MAX_HTML_DEPTH {
        return format!(
            "[the page's HTML nests {depth} elements deep, more than the {MAX_HTML_DEPTH} this gateway renders; \
             it was not converted]"
        );
    }
    html2text::config::plain()
        .allow_width_overflow()
        .string_from_read(html.as_bytes(), HTML_WRAP_COLUMNS)
        .unwrap_or_else(|_| html.into_owned())
}

/// The deepest element nesting a page renders with (real pages stay far below a few hundred).
pub(crate) const MAX_HTML_DEPTH: usize = 2000;

/// Elements that never hold content, so never nest (HTML's void elements).
const VOID: [&str; 14] =
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"];

/// The deepest nesting of open elements, read from the tags alone (a linear scan: what the
/// renderer would pay for is bounded before it is paid). Comments and void elements do not
/// nest; an unclosed element counts to the end, as a renderer would nest it.
fn nesting_depth(html: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix("!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let end = rest.find('>').unwrap_or(rest.len());
        let tag = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        if let Some(closing) = tag.strip_prefix('/') {
            if closing.starts_with(|c: char| c.is_ascii_alphabetic()) {
                depth = depth.saturating_sub(1);
            }
            continue;
        }
        if !tag.starts_with(|c: char| c.is_ascii_alphabetic()) || tag.ends_with('/') {
            continue;
        }
        let name: String = tag.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        if !VOID.iter().any(|v| v.eq_ignore_ascii_case(&name)) {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// A short piece of HTML (a search result's title or snippet, with `<strong>` marks and
/// entities) as one line of plain text.
pub(crate) fn html_fragment_to_line(html: &str) -> String {
    let text = html2text::config::plain_no_decorate()
        .allow_width_overflow()
        .string_from_read(html.as_bytes(), FRAGMENT_COLUMNS)
        .unwrap_or_else(|_| html.to_owned());
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` characters (on a character boundary); whether it was cut.
pub(crate) fn cut_chars(mut text: String, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => {
            text.truncate(at);
            (text, true)
        }
        None => (text, false),
    }
}

/// A body read up to `cap` bytes.
#[derive(Debug)]
pub(crate) struct Capped {
    pub bytes: Vec<u8>,
    /// The body had more than `cap` bytes; they were not read.
    pub cut: bool,
}

/// Reads a response body chunk by chunk, keeping at most `cap` bytes: past the cap it stops
/// reading and drops the response (closing the connection), so a body of any size costs at
/// most `cap` plus one chunk of memory. Whether the body went on past exactly `cap` bytes
/// is learned by reading one more chunk, which is dropped.
pub(crate) async fn read_capped(mut response: reqwest::Response, cap: u64) -> Result<Capped, reqwest::Error> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let expected = response.content_length().and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(expected.min(cap));
    while let Some(chunk) = response.chunk().await? {
        let room = cap - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Capped { bytes, cut: true });
        }
        bytes.extend_from_slice(&chunk);
        if bytes.len() == cap {
            let more = loop {
                match response.chunk().await? {
                    Some(c) if c.is_empty() => continue,
                    other => break other.is_some(),
                }
            };
            return Ok(Capped { bytes, cut: more });
        }
    }
    Ok(Capped { bytes, cut: false })
}

#[cfg(test)]
mod tests {
    #[test]
    fn nesting_is_measured_from_the_tags_and_deep_pages_are_not_rendered() {
        assert_eq!(super::nesting_depth("<html><body><p>a<br>b<img src=x></p><!-- <div> --></body></html>"), 3);
        assert_eq!(super::nesting_depth("<div/><p>x</p><p>y</p>"), 1);
        let deep = "<div>".repeat(super::MAX_HTML_DEPTH + 1);
        let started = std::time::Instant::now();
        let text = super::html_to_text(deep.as_bytes());
        assert!(text.contains("not converted"), "{text}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let ok = format!("{}hello{}", "<div>".repeat(50), "</div>".repeat(50));
        assert!(super::html_to_text(ok.as_bytes()).contains("hello"));
    }

    use super::*;

    #[test]
    fn media_types_decide_the_kind() {
        for (ct, body, want) in [
            (Some("text/html; charset=utf-8"), &b""[..], Kind::Html),
            (Some("Application/XHTML+XML"), b"", Kind::Html),
            (Some("text/plain"), b"", Kind::Text),
            (Some("text/csv"), b"", Kind::Text),
            (Some("application/json"), b"", Kind::Text),
            (Some("application/problem+json"), b"", Kind::Text),
            (Some("application/atom+xml"), b"", Kind::Text),
            (Some("application/xml"), b"", Kind::Text),
            (Some("image/png"), b"", Kind::Opaque),
            (Some("application/octet-stream"), b"hello", Kind::Opaque),
            (Some("application/pdf"), b"", Kind::Opaque),
            (None, b"  <!DOCTYPE html><p>x</p>", Kind::Html),
            (None, b"plain words", Kind::Text),
            (None, b"\x89PNG\r\n\x1a\n\0\0", Kind::Opaque),
        ] {
            assert_eq!(kind(ct, body), want, "{ct:?} {body:?}");
        }
    }

    #[test]
    fn html_becomes_text_without_tags() {
        let text = html_to_text(
            b"<html><head><title>T</title><style>p{color:red}</style><script>var x=1;</script></head>\
              <body><h1>Main heading</h1><p>First &amp; only paragraph.</p>\
              <a href=\"https://example.com/next\">next page</a></body></html>",
        );
        assert!(text.contains("Main heading"), "{text}");
        assert!(text.contains("First & only paragraph."), "{text}");
        assert!(text.contains("https://example.com/next"), "links are listed: {text}");
        for gone in ["<h1>", "<p>", "</", "color:red", "var x"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert_eq!(
            html_fragment_to_line("The <strong>Rust</strong>\n language &#x27;book&#x27;"),
            "The Rust language 'book'"
        );
    }

    #[test]
    fn cutting_respects_character_boundaries() {
        assert_eq!(cut_chars("héllo".into(), 2), ("hé".into(), true));
        assert_eq!(cut_chars("héllo".into(), 5), ("héllo".into(), false));
        assert_eq!(cut_chars(String::new(), 0), (String::new(), false));
        assert_eq!(cut_chars("ab".into(), 0), (String::new(), true));
    }
}
