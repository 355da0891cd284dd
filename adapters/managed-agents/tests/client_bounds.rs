//! Bounds on what one client can make the gateway keep or wait for, as the attacks sent it:
//! uploads cut short (their chunks held space with no quota), a storage quota, downloads a
//! browser could render as a page of the gateway's origin, webhook endpoints without number,
//! and slow receivers delaying every other endpoint's deliveries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::post;
use gateway_managed_agents::webhooks::{WebhookDelivery, WebhookSettings};
use gateway_services::files::FilesConfig;
use serde_json::{Value, json};
use support::{Gateway, multipart, refusal, say, start};
use tokio::io::AsyncWriteExt;

const MIB: usize = 1 << 20;

async fn with_files(files: FilesConfig) -> Gateway {
    start(|b| b.files(files), Default::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_in_progress_count_against_their_keys_quota_until_they_end() {
    let files = FilesConfig { max_pending_bytes_per_key: MIB as u64 * 3 / 2, ..Default::default() };
    let g = with_files(files).await;

    // The attack: an upload whose first chunk (1 MiB) is stored, and which then stalls.
    let (content_type, body) = multipart("big.bin", "application/octet-stream", &vec![7u8; 4 * MIB]);
    let mut tcp = tokio::net::TcpStream::connect(g.base.trim_start_matches("http://")).await.unwrap();
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body[..MIB + MIB / 5]).await.unwrap();
    tcp.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Its chunk counts: the next 600 KB upload of the same (keyless) client passes the 1.5 MiB
    // its uploads in progress may hold, and is refused as a throttle, to be retried later.
    let r = g.upload("next.bin", "application/octet-stream", &vec![1u8; 600 * 1024]).await;
    let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let (status, error) = refusal(r).await;
    assert_eq!((status, error["type"].as_str()), (429, Some("rate_limit_error")), "{error}");
    assert_eq!(error["details"]["error_code"], "upload_quota_exceeded");
    assert!(error["message"].as_str().unwrap().contains("files.max_pending_bytes_per_key"), "{error}");
    assert_eq!(retry_after.as_deref(), Some("10"));
    assert_eq!(g.get("/v1/files").await["data"], json!([]), "no file was made");

    // Cut short, the upload is abandoned: its room is free at once, not after the sweep.
    drop(tcp);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = g.upload("next.bin", "application/octet-stream", &vec![1u8; 600 * 1024]).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(Instant::now() < deadline, "the cut-short upload's chunks still count");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    g.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_files_are_bounded_in_all() {
    let files = FilesConfig { max_stored_bytes: 3 * MIB as u64, ..Default::default() };
    let g = with_files(files).await;
    for name in ["a", "b"] {
        let r = g.upload(name, "text/plain", &vec![b'x'; MIB]).await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let r = g.upload("c", "text/plain", &vec![b'x'; MIB + MIB / 5]).await;
    let no_retry = r.headers().get("x-should-retry").map(|v| v.to_str().unwrap().to_owned());
    let (status, error) = refusal(r).await;
    assert_eq!((status, error["type"].as_str()), (413, Some("request_too_large")), "{error}");
    assert_eq!(error["details"]["error_code"], "storage_quota_exceeded");
    assert!(error["message"].as_str().unwrap().contains("files.max_stored_bytes"), "{error}");
    assert_eq!(no_retry.as_deref(), Some("false"), "only deleting files makes room");
    assert_eq!(g.get("/v1/files").await["data"].as_array().unwrap().len(), 2);
    // Deleting a file makes room.
    let a = g.get("/v1/files").await["data"][1]["id"].as_str().unwrap().to_owned();
    assert_eq!(g.http.delete(g.url(&format!("/v1/files/{a}"))).send().await.unwrap().status(), 200);
    let r = g.upload("c", "text/plain", &vec![b'x'; MIB + MIB / 5]).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    g.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_are_never_rendered_as_a_page_of_the_gateway() {
    let g = with_files(FilesConfig::default()).await;
    let page = b"<html><script>fetch('/v1/agents')</script></html>";
    let r = g.upload("page.html", "text/html", page).await;
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let r = g.http.get(g.url(&format!("/v1/files/{id}/content"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "text/html", "the uploader's type, as uploaded");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["content-disposition"], "attachment; filename=\"page.html\"");
    assert_eq!(r.bytes().await.unwrap().as_ref(), page);
    g.gw.stop().await;
}

fn webhooks(delivery: WebhookDelivery) -> WebhookSettings {
    WebhookSettings { allow_private_targets: true, delivery, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_endpoints_are_bounded_per_key() {
    let delivery = WebhookDelivery { max_endpoints_per_key: 2, ..Default::default() };
    let g = start(|b| b, webhooks(delivery)).await;
    let mut made = Vec::new();
    for n in 0..2 {
        made.push(g.created("/v1/webhooks", json!({"url": format!("http://127.0.0.1:9/{n}")})).await);
    }
    let (status, error) = refusal(g.post("/v1/webhooks", json!({"url": "http://127.0.0.1:9/2"})).await).await;
    assert_eq!((status, error["type"].as_str()), (400, Some("invalid_request_error")), "{error}");
    assert_eq!(error["details"]["error_code"], "webhook_endpoint_limit");
    assert!(error["message"].as_str().unwrap().contains("webhook_delivery.max_endpoints_per_key"), "{error}");
    assert_eq!(g.get("/v1/webhooks").await["data"].as_array().unwrap().len(), 2);
    let r = g.http.delete(g.url(&format!("/v1/webhooks/{}", made[0]))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    g.created("/v1/webhooks", json!({"url": "http://127.0.0.1:9/2"})).await;
    g.gw.stop().await;
}

/// How long the slow receivers take to answer (the attack's were 9.9 s).
const SLOW: Duration = Duration::from_secs(9);
const SLOW_ENDPOINTS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_receivers_do_not_delay_another_endpoints_delivery() {
    // Receivers: forty that answer after SLOW, one that answers at once.
    let slow_started = Arc::new(AtomicUsize::new(0));
    let (fast_tx, mut fast_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let started = Arc::clone(&slow_started);
    let app = axum::Router::new()
        .route(
            "/slow/{n}",
            post(move || {
                let started = Arc::clone(&started);
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(SLOW).await;
                    "ok"
                }
            }),
        )
        .route(
            "/fast",
            post(move || {
                let _ = fast_tx.send(Instant::now());
                async { "ok" }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receivers = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let g = start(|b| b, webhooks(WebhookDelivery::default())).await;
    // More slow endpoints than one claim of the old loop took (16, all awaited together): the
    // fast endpoint's delivery waited behind one or two rounds of slow answers.
    for n in 0..SLOW_ENDPOINTS {
        g.created("/v1/webhooks", json!({"url": format!("{receivers}/slow/{n}")})).await;
    }
    g.created("/v1/webhooks", json!({"url": format!("{receivers}/fast")})).await;
    let agent = g.created("/v1/agents", json!({"name": "a", "model": "claude-sonnet-4-6"})).await;
    let env = g.created("/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session = g.created("/v1/sessions", json!({"agent": agent, "environment_id": env})).await;

    let sent = Instant::now();
    assert_eq!(g.post(&format!("/v1/sessions/{session}/events"), say("hello")).await.status(), 200);
    let arrived = tokio::time::timeout(SLOW * 3, fast_rx.recv()).await.expect("the fast endpoint got nothing").unwrap();
    let took = arrived - sent;
    assert!(took < SLOW / 2, "the fast endpoint's first delivery took {took:?} (slow receivers answer after {SLOW:?})");
    // Meanwhile every slow endpoint's delivery is in flight at once (none can have answered).
    while slow_started.load(Ordering::SeqCst) < SLOW_ENDPOINTS {
        let waited = sent.elapsed();
        assert!(
            waited < SLOW / 2,
            "after {waited:?} only {} slow deliveries started",
            slow_started.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its later deliveries come without waiting for the slow endpoints either.
    let second = tokio::time::timeout(SLOW * 3, fast_rx.recv()).await.expect("no second delivery").unwrap();
    assert!(second - sent < SLOW / 2, "the fast endpoint's second delivery took {:?}", second - sent);
    g.gw.stop().await;
    server.abort();
}
