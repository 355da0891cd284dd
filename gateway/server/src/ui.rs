//! The live session viewer at `/ui/`: a read-only page built only on the gateway's own
//! public Managed Agents API, so it can never show or do more than an API client could.
//!
//! The page is a handful of plain files kept in `gateway/server/ui/` and compiled into the
//! binary, so the binary stays self-contained and nothing is fetched from anywhere else: no
//! CDN, no framework, no build step. The files hold no data; every session the page shows is
//! read by the page itself through `/v1` with the key the person typed, under the same
//! [`Authenticator`](gateway_services::auth::Authenticator) rules as any client. So these
//! routes need no authentication of their own, and serving them to anyone reveals nothing
//! but the viewer's code.
//!
//! Because the page runs in the gateway's own origin, and a keyless gateway serves its own
//! same-origin requests from loopback, the headers keep every other page out of that origin:
//! - `Content-Security-Policy` allows scripts, styles and connections from this origin only,
//!   no inline script or style (so nothing a session contains can ever run as code), no
//!   plugins, no `<base>`, no form submission (the sign-in form is handled by script, so a
//!   key can never end up in a URL), and `frame-ancestors 'none'` (with `X-Frame-Options:
//!   DENY` for older browsers): no foreign page can frame the viewer and trick clicks on it;
//! - `Cross-Origin-Opener-Policy: same-origin`: a foreign page that opens the viewer in a
//!   window keeps no handle on it;
//! - `X-Content-Type-Options: nosniff` with exact content types, and `Referrer-Policy:
//!   no-referrer` (the address may name a session);
//! - `Cache-Control: no-cache`: a browser revalidates on every load, so a new binary's page
//!   is never mixed with an old script.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The page's files: name under `/ui/`, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../ui/index.html")),
    ("viewer.css", "text/css; charset=utf-8", include_str!("../ui/viewer.css")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("../ui/api.js")),
    ("timeline.js", "text/javascript; charset=utf-8", include_str!("../ui/timeline.js")),
    ("viewer.js", "text/javascript; charset=utf-8", include_str!("../ui/viewer.js")),
];

/// Everything the page may load or connect to: its own origin, nothing inline.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The viewer's routes: `/ui` redirects to `/ui/`, which is the page; `/ui/{file}` its files.
pub fn router() -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { file("index.html") }))
        .route("/ui/{file}", get(|Path(name): Path<String>| async move { file(&name) }))
}

/// One of the page's files with the viewer's headers, or `404` for any other name.
fn file(name: &str) -> Response {
    let mut response = match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => {
            let mut r = (*body).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            r
        }
        None => (StatusCode::NOT_FOUND, "no such file in the viewer\n").into_response(),
    };
    let h = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
        (HeaderName::from_static("cross-origin-resource-policy"), "same-origin"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_the_viewer_headers_and_its_own_type() {
        for (name, content_type, body) in FILES {
            let r = file(name);
            assert_eq!(r.status(), StatusCode::OK, "{name}");
            let h = r.headers();
            assert_eq!(h[header::CONTENT_TYPE], *content_type, "{name}");
            assert!(h[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("frame-ancestors 'none'"));
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
            assert!(!body.is_empty(), "{name} is empty");
        }
        let missing = file("../Cargo.toml");
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert_eq!(missing.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }

    /// The policy allows no inline code, so the page must hold none: a `<script>` with a body
    /// or a `style=` attribute would be blocked by the browser, and the page would break
    /// silently.
    #[test]
    fn the_page_holds_no_inline_script_or_style() {
        let html = FILES.iter().find(|(n, _, _)| *n == "index.html").map(|f| f.2).unwrap_or_default();
        assert!(!html.contains("style="), "inline style attribute");
        assert!(!html.contains("<style"), "inline <style>");
        let inline_handler = html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            name > 0 && rest[name..].starts_with('=')
        });
        assert!(!inline_handler, "inline event handler attribute");
        for script in html.split("<script").skip(1) {
            let body = script.split_once('>').map(|(_, rest)| rest).unwrap_or_default();
            assert!(body.starts_with("</script>"), "inline script: {script:.80}");
        }
        assert!(!html.contains("http://") && !html.contains("https://"), "external asset");
    }

    /// Session content reaches the page only as text: the scripts never parse strings as
    /// markup or code, so a message holding `<img onerror=…>` stays a string on screen.
    #[test]
    fn the_scripts_never_turn_strings_into_markup_or_code() {
        for (name, _, body) in FILES.iter().filter(|(n, _, _)| n.ends_with(".js")) {
            for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("] {
                assert!(!body.contains(sink), "{name} uses {sink}");
            }
        }
    }
}
