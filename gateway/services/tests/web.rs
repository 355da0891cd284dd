//! The web tools against servers on loopback: the SSRF setting, redirects and their re-check,
//! the byte, character and time bounds, and `web_search` against a stub speaking the Brave
//! Search API's wire format. No network beyond 127.0.0.1.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use gateway_services::web::{
    DomainRules, ERROR_EXCERPT_CHARS, MAX_REDIRECTS, SearchProvider, WebConfig, WebError, WebTool, WebTools,
    search_readiness,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PAGE: &str = "<!doctype html><html><head><title>Greeting</title><script>var hidden = 1;</script></head>\
    <body><h1>Welcome heading</h1><p>A first paragraph with <b>bold</b> words.</p></body></html>";
const KEY: &str = "test-subscription-key-5e1f";

fn open() -> DomainRules {
    DomainRules::default()
}

fn tools(change: impl FnOnce(&mut WebConfig)) -> WebTools {
    let mut config = WebConfig::default();
    change(&mut config);
    WebTools::with_search_key(&config, Some(KEY.to_owned())).unwrap()
}

fn private_allowed() -> WebTools {
    tools(|c| c.allow_private_targets = true)
}

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A site: an HTML page, text, JSON, an image, an error page, redirect chains. Counts hits.
async fn site() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = |h: Arc<AtomicUsize>| {
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let h = h.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                next.run(req).await
            }
        }
    };
    let router = Router::new()
        .route("/page", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }))
        .route("/long", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "é".repeat(5_000)) }))
        .route("/data.json", get(|| async { axum::Json(json!({"answer": 42, "tags": ["<b>", "x"]})) }))
        .route("/pixel.png", get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8; 3_000]) }))
        .route(
            "/missing",
            get(|| async {
                (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain")], "no such page. ".repeat(500))
            }),
        )
        .route(
            "/hop/{n}",
            get(|Path(n): Path<u32>| async move {
                if n == 0 { Redirect::temporary("/page") } else { Redirect::temporary(&format!("/hop/{}", n - 1)) }
            }),
        )
        .route("/loop", get(|| async { Redirect::to("/loop") }))
        .route(
            "/away",
            get(|headers: HeaderMap| async move {
                // Redirect to the same server under the name `localhost`.
                let host = headers.get(header::HOST).unwrap().to_str().unwrap().to_owned();
                let port = host.rsplit(':').next().unwrap().to_owned();
                Redirect::to(&format!("http://localhost:{port}/page"))
            }),
        )
        .route("/nowhere", get(|| async { (StatusCode::FOUND, "no location") }))
        .layer(axum::middleware::from_fn(counted(hits.clone())));
    (serve(router).await, hits)
}

#[tokio::test]
async fn loopback_is_refused_by_default_naming_the_setting() {
    let (addr, hits) = site().await;
    let web = tools(|_| {});
    for url in [format!("http://{addr}/page"), format!("http://localhost:{}/page", addr.port())] {
        let err = web.fetch(&url, None, &open()).await.unwrap_err();
        assert!(matches!(err, WebError::Refused { .. }), "{err:?}");
        assert!(err.to_string().contains("web.allow_private_targets = true"), "{err}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a refused target is never contacted");

    // The same through the tool-call entry point: an error result the model reads.
    let answer = web.answer(WebTool::Fetch, &json!({"url": format!("http://{addr}/page")}), &open()).await;
    assert!(answer.is_error && answer.text.starts_with("refused to fetch 127.0.0.1"), "{}", answer.text);
}

#[tokio::test]
async fn a_loopback_page_is_served_as_text_when_private_targets_are_allowed() {
    let (addr, _) = site().await;
    let web = private_allowed();
    let page = web.fetch(&format!("http://{addr}/page"), None, &open()).await.unwrap();
    assert_eq!(page.status, 200);
    assert_eq!(page.url, format!("http://{addr}/page"));
    assert_eq!(page.content_type.as_deref(), Some("text/html; charset=utf-8"));
    assert!(page.text.contains("Welcome heading"), "{}", page.text);
    assert!(page.text.contains("A first paragraph with"), "{}", page.text);
    for tag in ["<h1>", "<p>", "<b>", "</", "var hidden"] {
        assert!(!page.text.contains(tag), "{tag} in {}", page.text);
    }
    assert!(!page.is_error() && !page.is_cut() && !page.opaque);
    let rendered = gateway_services::web::render_fetch(&page);
    assert!(
        rendered.starts_with(&format!("URL: http://{addr}/page\nStatus: 200 OK\nContent-Type: text/html")),
        "{rendered}"
    );

    let data = web.fetch(&format!("http://{addr}/data.json"), None, &open()).await.unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&data.text).unwrap()["answer"], 42, "JSON is returned as is");

    let image = web.fetch(&format!("http://{addr}/pixel.png"), None, &open()).await.unwrap();
    assert!(image.opaque, "{image:?}");
    assert!(image.text.contains("image/png") && image.text.contains("3000 bytes"), "{}", image.text);
    assert!(!image.text.contains('\u{89}'), "the bytes are not returned");
}

#[tokio::test]
async fn error_statuses_are_error_results_with_an_excerpt() {
    let (addr, _) = site().await;
    let web = private_allowed();
    let missing = web.fetch(&format!("http://{addr}/missing"), None, &open()).await.unwrap();
    assert!(missing.is_error());
    assert_eq!(missing.status, 404);
    assert!(missing.text.starts_with("no such page."), "{}", missing.text);
    assert!(missing.text.chars().count() <= ERROR_EXCERPT_CHARS && missing.chars_cut);
    let answer = web.answer(WebTool::Fetch, &json!({"url": format!("http://{addr}/missing")}), &open()).await;
    assert!(answer.is_error && answer.text.contains("Status: 404 Not Found"), "{}", answer.text);
    assert!(answer.text.contains("The server answered HTTP 404"), "{}", answer.text);
}

#[tokio::test]
async fn redirects_are_followed_by_hand_and_bounded() {
    let (addr, _) = site().await;
    let web = private_allowed();
    let five = web.fetch(&format!("http://{addr}/hop/{}", MAX_REDIRECTS - 1), None, &open()).await.unwrap();
    assert_eq!(five.url, format!("http://{addr}/page"), "{MAX_REDIRECTS} redirects are followed");
    assert!(five.text.contains("Welcome heading"));

    let six = web.fetch(&format!("http://{addr}/hop/{MAX_REDIRECTS}"), None, &open()).await.unwrap_err();
    assert!(matches!(six, WebError::TooManyRedirects { max: MAX_REDIRECTS, .. }), "{six:?}");
    let looping = web.fetch(&format!("http://{addr}/loop"), None, &open()).await.unwrap_err();
    assert!(looping.to_string().contains("too many redirects: more than 5"), "{looping}");

    let nowhere = web.fetch(&format!("http://{addr}/nowhere"), None, &open()).await.unwrap_err();
    assert_eq!(nowhere, WebError::BadRedirect { status: 302 });
}

#[tokio::test]
async fn every_redirect_is_checked_again() {
    let (addr, hits) = site().await;
    // Private targets allowed, `localhost` blocked by the agent: the first URL (127.0.0.1)
    // passes, its redirect to localhost must not.
    let rules = DomainRules::new::<&str, &str>(&[], &["localhost"]).unwrap();
    let web = private_allowed();
    let err = web.fetch(&format!("http://{addr}/away"), None, &rules).await.unwrap_err();
    assert!(
        matches!(&err, WebError::DomainNotPermitted { host, .. } if host == "localhost"),
        "the redirect target is checked: {err:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1, "only the first URL was fetched");
    // Without the rule the same chain is followed.
    assert!(web.fetch(&format!("http://{addr}/away"), None, &open()).await.is_ok());

    // With private targets refused, the per-hop check refuses a redirect to the metadata
    // address or to loopback, however spelled, before anything is sent.
    let guarded = tools(|_| {});
    for hop in ["http://169.254.169.254/latest/meta-data", "http://[::ffff:127.0.0.1]/", "http://localhost./"] {
        let err = guarded.check_target(hop, &open()).unwrap_err();
        assert!(matches!(err, WebError::Refused { .. }), "{hop}: {err:?}");
    }
    assert!(guarded.check_target("https://example.com/", &open()).is_ok());
}

/// A raw HTTP server answering every connection with `head` and then `body` until the client
/// goes away; counts the body bytes written and connections closed by the client.
async fn endless(head: &'static str, chunk: Vec<u8>) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (written, closed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
    let (w, c) = (written.clone(), closed.clone());
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let (w, c, chunk) = (w.clone(), c.clone(), chunk.clone());
            tokio::spawn(async move {
                let mut req = [0u8; 4096];
                let _ = sock.read(&mut req).await;
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                if chunk.is_empty() {
                    // Stall: hold the connection open, send nothing more.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return;
                }
                while sock.write_all(&chunk).await.is_ok() {
                    w.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                c.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, written, closed)
}

#[tokio::test]
async fn the_body_cap_stops_reading() {
    let cap = 100_000u64;
    let (addr, written, closed) =
        endless("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n", vec![b'a'; 64 * 1024])
            .await;
    let web = tools(|c| {
        c.allow_private_targets = true;
        c.max_fetch_bytes = cap;
    });
    let f = web.fetch(&format!("http://{addr}/endless"), None, &open()).await.unwrap();
    assert_eq!(f.bytes_read, cap);
    assert!(f.bytes_cut && f.is_cut());
    assert_eq!(f.text.len() as u64, cap, "no more than the cap is kept");
    assert!(
        gateway_services::web::render_fetch(&f).contains("[cut: only the first 100000 bytes of the body were read]")
    );
    // The client dropped the connection: the server's writes fail soon after.
    let start = Instant::now();
    while closed.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the endless body is still being read");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What the server managed to write is bounded by the socket buffers, not the body.
    assert!(written.load(Ordering::SeqCst) < 64 * 1024 * 1024);
}

#[tokio::test]
async fn the_text_bound_cuts_and_says_so() {
    let (addr, _) = site().await;
    let web = tools(|c| {
        c.allow_private_targets = true;
        c.max_text_chars = 1_000;
    });
    let f = web.fetch(&format!("http://{addr}/long"), None, &open()).await.unwrap();
    assert_eq!(f.text.chars().count(), 1_000);
    assert!(f.chars_cut && !f.bytes_cut);
    assert!(gateway_services::web::render_fetch(&f).ends_with("[cut: the text was shortened to 1000 characters]"));
    // The model may ask for less, never for more.
    let small = web.fetch(&format!("http://{addr}/long"), Some(10), &open()).await.unwrap();
    assert_eq!(small.text, "é".repeat(10));
    let big = web.fetch(&format!("http://{addr}/long"), Some(1_000_000), &open()).await.unwrap();
    assert_eq!(big.text.chars().count(), 1_000);
}

#[tokio::test]
async fn a_slow_server_hits_the_timeout() {
    let web = tools(|c| {
        c.allow_private_targets = true;
        c.fetch_timeout = Duration::from_secs(1);
    });
    // One never answers; the other sends its head and then stalls the body.
    let (silent, _, _) = endless("", Vec::new()).await;
    let (stalled, _, _) =
        endless("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nabc", Vec::new()).await;
    for addr in [silent, stalled] {
        let start = Instant::now();
        let err = web.fetch(&format!("http://{addr}/slow"), None, &open()).await.unwrap_err();
        assert!(matches!(err, WebError::Timeout { secs: 1, .. }), "{err:?}");
        assert!(err.to_string().contains("web.fetch_timeout_secs"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    }
}

#[tokio::test]
async fn bad_inputs_are_errors_the_model_reads() {
    let web = private_allowed();
    for (input, said) in [
        (json!({"url": "ftp://example.com/x"}), "must be absolute http or https"),
        (json!({"url": "http://user:pw@example.com/"}), "must be absolute http or https"),
        (json!({"url": "not a url"}), "must be absolute http or https"),
        (json!({"url": format!("https://example.com/{}", "a".repeat(2048))}), "url must be 1..=2048 characters"),
        (json!({"url": 7}), "invalid input"),
        (json!({"url": "https://example.com/", "max_chars": 0}), "max_chars must be at least 1"),
        (json!({}), "invalid input"),
    ] {
        let a = web.answer(WebTool::Fetch, &input, &open()).await;
        assert!(a.is_error && a.text.contains(said), "{input}: {}", a.text);
    }
    let only_docs = DomainRules::new::<&str, &str>(&["docs.rs"], &[]).unwrap();
    let err = web.fetch("https://example.com/", None, &only_docs).await.unwrap_err();
    assert!(err.to_string().contains("not in this agent's allowed domains"), "{err}");
}

/// What the Brave stub received.
#[derive(Default)]
struct Seen {
    queries: Mutex<Vec<HashMap<String, String>>>,
    accepts: Mutex<Vec<String>>,
}

/// A stub of the Brave Search API: `/res/v1/web/search` answers only the right key, with
/// Brave's wire format (fields beyond the three read included, HTML marks in snippets).
async fn brave(body_padding: usize) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let handler = move |State(seen): State<Arc<Seen>>, Query(q): Query<HashMap<String, String>>, headers: HeaderMap| async move {
        seen.queries.lock().unwrap().push(q.clone());
        let accept = headers.get(header::ACCEPT).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        seen.accepts.lock().unwrap().push(accept);
        if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(KEY) {
            let body = json!({
                "type": "ErrorResponse",
                "error": {"id": "c4b6b3d1", "status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID",
                          "detail": "The provided subscription token is invalid.", "meta": {"component": "authentication"}},
                "time": 1_700_000_000
            });
            return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        }
        let result = |title: &str, url: &str, description: &str| {
            json!({
                "title": title, "url": url, "is_source_local": false, "is_source_both": false,
                "description": description, "page_age": "2025-01-15T00:00:00", "profile":
                {"name": "Example", "url": url, "long_name": "example", "img": "https://imgs.search.brave.com/x.png"},
                "language": "en", "family_friendly": true, "type": "search_result", "subtype": "generic",
                "is_live": false, "meta_url": {"scheme": "https", "netloc": "example", "hostname": "example",
                "favicon": "https://imgs.search.brave.com/f.png", "path": "› book"}, "age": "January 15, 2025",
                "extra_snippets": ["more text"]
            })
        };
        let results = vec![
            result(
                "The <strong>Rust</strong> Programming Language",
                "https://doc.rust-lang.org/book/",
                "The <strong>Rust</strong> book &amp; its chapters on <strong>async</strong>.",
            ),
            result("Asynchronous Programming in Rust", "https://rust-lang.github.io/async-book/", "The async book."),
            result("Tokio tutorial", "https://tokio.rs/tokio/tutorial", "Learn &#x27;tokio&#x27;."),
            result("Not http", "ftp://files.example/x", "dropped"),
        ];
        let body = json!({
            "type": "search",
            "query": {"original": q.get("q").cloned().unwrap_or_default(), "show_strict_warning": false,
                      "is_navigational": false, "more_results_available": true, "country": "us"},
            "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": false}], "top": [], "side": []},
            "web": {"type": "search", "results": results, "family_friendly": true},
            "padding": "x".repeat(body_padding)
        });
        axum::Json(body).into_response()
    };
    let router = Router::new().route("/res/v1/web/search", get(handler)).with_state(seen.clone());
    (serve(router).await, seen)
}

fn searcher(addr: SocketAddr, key: Option<&str>, change: impl FnOnce(&mut WebConfig)) -> WebTools {
    let mut config = WebConfig::default();
    config.search.provider = Some(SearchProvider::Brave);
    config.search.base_url = format!("http://{addr}/");
    change(&mut config);
    WebTools::with_search_key(&config, key.map(str::to_owned)).unwrap()
}

#[tokio::test]
async fn search_speaks_brave_and_renders_numbered_results() {
    let (addr, seen) = brave(0).await;
    // The provider is on loopback and private targets are refused: the operator's provider
    // URL is not subject to the SSRF guard.
    let web = searcher(addr, Some(KEY), |_| {});
    let answer = web.answer(WebTool::Search, &json!({"query": "rust  async\nbook", "count": 3}), &open()).await;
    assert!(!answer.is_error, "{}", answer.text);
    assert_eq!(
        answer.text,
        "Results for \"rust async book\":\n\n\
         1. The Rust Programming Language\n   https://doc.rust-lang.org/book/\n   The Rust book & its chapters on async.\n\n\
         2. Asynchronous Programming in Rust\n   https://rust-lang.github.io/async-book/\n   The async book.\n\n\
         3. Tokio tutorial\n   https://tokio.rs/tokio/tutorial\n   Learn 'tokio'.\n"
    );
    let q = seen.queries.lock().unwrap()[0].clone();
    assert_eq!(q.get("q").map(String::as_str), Some("rust async book"));
    assert_eq!(q.get("count").map(String::as_str), Some("3"));
    assert_eq!(seen.accepts.lock().unwrap()[0], "application/json");

    // Without a count, the operator's max_results is asked for.
    let web = searcher(addr, Some(KEY), |c| c.search.max_results = 2);
    let hits = web.search("tokio", None, &open()).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(seen.queries.lock().unwrap()[1].get("count").map(String::as_str), Some("2"));

    // Domain rules: the provider is asked for its most, blocked results are dropped.
    let rules = DomainRules::new::<&str, &str>(&[], &["rust-lang.org"]).unwrap();
    let hits = web.search("rust", Some(5), &rules).await.unwrap();
    let urls: Vec<_> = hits.iter().map(|h| h.url.as_str()).collect();
    assert_eq!(urls, ["https://rust-lang.github.io/async-book/", "https://tokio.rs/tokio/tutorial"]);
    assert_eq!(seen.queries.lock().unwrap()[2].get("count").map(String::as_str), Some("20"));
}

#[tokio::test]
async fn a_wrong_key_is_a_refusal_that_never_echoes_the_key() {
    let (addr, _) = brave(0).await;
    let wrong = "wrong-key-9d2c";
    let web = searcher(addr, Some(wrong), |_| {});
    let err = web.search("rust", None, &open()).await.unwrap_err();
    assert!(matches!(err, WebError::ProviderRefused { status: 401, .. }), "{err:?}");
    let said = err.to_string();
    assert!(said.contains("refused the request (HTTP 401, SUBSCRIPTION_TOKEN_INVALID"), "{said}");
    assert!(said.contains("BRAVE_SEARCH_API_KEY"), "{said}");
    assert!(!said.contains(wrong) && !format!("{err:?}").contains(wrong), "{said}");
    assert!(!format!("{web:?}").contains(wrong), "the tools' Debug hides the key");
}

#[tokio::test]
async fn without_a_provider_the_error_names_the_setting() {
    let web = tools(|_| {});
    let a = web.answer(WebTool::Search, &json!({"query": "rust"}), &open()).await;
    assert!(a.is_error);
    assert_eq!(
        a.text,
        "web_search has no provider: set web.search.provider = \"brave\" and the BRAVE_SEARCH_API_KEY environment variable"
    );
    let readiness = search_readiness(&WebConfig::default()).unwrap_err();
    assert!(readiness.contains("web.search.provider"), "{readiness}");

    let mut config = WebConfig::default();
    config.search.provider = Some(SearchProvider::Brave);
    config.search.api_key_env = "GATEWAY_TEST_WEB_SEARCH_KEY_THAT_IS_NEVER_SET".into();
    let readiness = search_readiness(&config).unwrap_err();
    assert!(
        readiness.contains("set the GATEWAY_TEST_WEB_SEARCH_KEY_THAT_IS_NEVER_SET environment variable"),
        "{readiness}"
    );
    let none = WebTools::new(&config).unwrap().search("rust", None, &open()).await.unwrap_err();
    assert!(matches!(none, WebError::NoSearchKey { .. }), "{none:?}");
    // A variable every test process has stands in for a set key.
    config.search.api_key_env = "PATH".into();
    assert_eq!(search_readiness(&config), Ok(()));
}

#[tokio::test]
async fn the_provider_answer_is_bounded() {
    let (addr, _) = brave(200_000).await;
    let web = searcher(addr, Some(KEY), |c| c.search.max_response_bytes = 100_000);
    let err = web.search("rust", None, &open()).await.unwrap_err();
    assert!(err.to_string().contains("larger than 100000 bytes (web.search.max_response_bytes)"), "{err}");
}
