#![allow(clippy::unwrap_used)]
//! A real `gateway serve` under the request-place attacks of issue 28 (findings 3 and 4): one
//! peer multiplexing hundreds of HTTP/2 streams with bodies that never finish, one key doing
//! the same from several addresses, and a crowd of slow uploads. Each client gets its share,
//! the process keeps its memory, and everyone else is still served.

use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use gateway_tests::{Gateway, GatewayBuilder, eventually, rss_mib, workdir};
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

fn peer(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A client speaking HTTP/2 without TLS (prior knowledge, h2c), from `from`: every request
/// it sends shares one connection, each on a stream of its own.
fn h2c(from: IpAddr) -> reqwest::Client {
    reqwest::Client::builder().http2_prior_knowledge().local_address(from).pool_max_idle_per_host(1).build().unwrap()
}

/// A body that sends `first` bytes, then nothing until the test ends (the server's idle
/// deadline is far away): a request that holds its place while its body "uploads".
fn stalled_body(first: usize) -> reqwest::Body {
    let head = futures::stream::once(async move { Ok::<_, std::io::Error>(vec![b' '; first]) });
    reqwest::Body::wrap_stream(head.chain(futures::stream::pending()))
}

/// Sends `n` requests whose bodies stall, each announcing `length` bytes, and gives them
/// `settle` to be answered or to stay pending: the statuses of those answered, and the
/// requests still pending (to keep them open).
async fn stalled_posts(
    http: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    n: usize,
    length: usize,
    first: usize,
) -> (Vec<u16>, Vec<tokio::task::JoinHandle<()>>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut pending = Vec::new();
    for _ in 0..n {
        let mut req = http
            .post(url)
            .header("content-type", "application/json")
            .header("content-length", length)
            .body(stalled_body(first));
        if let Some(key) = key {
            req = req.header("x-api-key", key);
        }
        let tx = tx.clone();
        pending.push(tokio::spawn(async move {
            if let Ok(r) = req.send().await {
                let _ = tx.send(r.status().as_u16());
            }
        }));
    }
    // Refusals are answered at once; the places that were granted stay held.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut answered = Vec::new();
    while let Ok(s) = rx.try_recv() {
        answered.push(s);
    }
    (answered, pending)
}

/// Finding 3: one address, one HTTP/2 connection, 80 streams whose bodies never finish, on a
/// gateway whose bound is 64 requests: before, they took every place and a plain
/// `GET /v1/agents` from another client got 529. Now the address holds its 16 places, its
/// other streams are told to retry, and another client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_peer_multiplexing_streams_cannot_take_every_request_place() {
    let dir = workdir("peer-requests");
    let g = GatewayBuilder::new(TESTBED, "peer-requests")
        .cwd(&dir)
        .env("GATEWAY_ADMISSION__MAX_REQUESTS", 64)
        .env("GATEWAY_ADMISSION__MAX_REQUESTS_PER_PEER", 16)
        .spawn();
    g.ready(Duration::from_secs(30)).await;

    let attacker = h2c(peer(1));
    let (answered, _held) = stalled_posts(&attacker, &g.url("/v1/agents"), None, 80, 100_000, 10).await;
    assert_eq!(answered.len(), 64, "all but the address's 16 places are refused at once: {answered:?}");
    assert!(answered.iter().all(|s| *s == 529), "refused as busy: {answered:?}");

    let other = h2c(peer(2));
    let r = other.get(g.url("/v1/agents")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "another client is served meanwhile");
    let refused = attacker.get(g.url("/v1/agents")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 529);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("this address has 16 requests in flight"), "{body}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gateway keys …` against the gateway's directory; stdout.
fn keys(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(TESTBED)
        .arg("keys")
        .args(args)
        .current_dir(dir)
        .env_remove("GATEWAY_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "keys {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn secret(printed: &str, prefix: &str) -> String {
    printed.split_whitespace().find(|w| w.starts_with(prefix)).unwrap().to_owned()
}

async fn post(http: &reqwest::Client, g: &Gateway, key: &str, path: &str, body: Value) -> Value {
    let r = http.post(g.url(path)).header("x-api-key", key).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    r.json().await.unwrap()
}

/// Finding 3, by key: an environment key (an executor's) posting events to its own session
/// from six addresses, 12 stalled bodies each, on a gateway whose bound is 64: before, it
/// took every place and the application's own key got 529. Now the key holds its 32 places
/// whatever the addresses, and the application is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_from_many_addresses_cannot_take_every_request_place() {
    let dir = workdir("key-requests");
    let api_key = secret(&keys(&dir, &["create", "--name", "app"]), "gwk_");
    let g = GatewayBuilder::new(TESTBED, "key-requests")
        .cwd(&dir)
        .env("GATEWAY_ADMISSION__MAX_REQUESTS", 64)
        .env("GATEWAY_ADMISSION__MAX_REQUESTS_PER_KEY", 32)
        .spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let agent = post(&http, &g, &api_key, "/v1/agents", json!({"name": "a", "model": "claude-opus-4-7"})).await;
    let env =
        post(&http, &g, &api_key, "/v1/environments", json!({"name": "e", "config": {"type": "self_hosted"}})).await;
    let env_id = env["id"].as_str().unwrap();
    let session =
        post(&http, &g, &api_key, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env_id})).await;
    let events = g.url(&format!("/v1/sessions/{}/events", session["id"].as_str().unwrap()));
    let env_key = secret(&keys(&dir, &["create", "--environment", env_id]), "gwe_");

    let mut answered = Vec::new();
    let mut held = Vec::new();
    for last in 10..16 {
        let (a, h) = stalled_posts(&h2c(peer(last)), &events, Some(&env_key), 12, 100_000, 10).await;
        answered.extend(a);
        held.extend(h);
    }
    assert_eq!(answered.len(), 72 - 32, "the key's requests past its 32 are refused at once: {answered:?}");
    assert!(answered.iter().all(|s| *s == 529), "{answered:?}");

    let r = h2c(peer(20)).get(g.url("/v1/agents")).header("x-api-key", &api_key).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "the application's key is served meanwhile");
    drop(held);
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends a `size`-byte multipart upload to `/v1/files` from `from`: `fast` bytes at once, the
/// rest after `hold`. The status, or `None` if the connection failed.
async fn upload(url: String, from: IpAddr, size: usize, fast: usize, hold: Duration) -> Option<u16> {
    let boundary = "xBOUNDARYx";
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let length = head.len() + size + tail.len();
    let first: Vec<u8> = head.into_bytes().into_iter().chain(std::iter::repeat_n(b'a', fast)).collect();
    let rest: Vec<u8> = std::iter::repeat_n(b'a', size - fast).chain(tail.into_bytes()).collect();
    let body = futures::stream::iter([Ok::<_, std::io::Error>(first)]).chain(futures::stream::once(async move {
        tokio::time::sleep(hold).await;
        Ok(rest)
    }));
    let client = reqwest::Client::builder().local_address(from).build().unwrap();
    let r = client
        .post(url)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .header("content-length", length)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .ok()?;
    Some(r.status().as_u16())
}

/// Finding 4: 300 uploads of 1 MB, from 30 addresses, that send 900 kB and then wait 4 s
/// before the rest: before, each pinned ~2.3 MB (the attack took 1000 of them from 145 MB
/// to 2.4 GB, which stayed). Now the bytes of bodies held at once are bounded (32 MiB here):
/// the uploads past the budget are told to retry, the process grows by about the budget, a
/// well-behaved client is served meanwhile, and the memory is given back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_uploads_are_held_to_one_byte_budget_and_the_memory_comes_back() {
    let dir = workdir("upload-budget");
    let g = GatewayBuilder::new(TESTBED, "upload-budget")
        .cwd(&dir)
        .env("GATEWAY_ADMISSION__MAX_BODY_BYTES_IN_FLIGHT", 32 << 20)
        .spawn();
    g.ready(Duration::from_secs(30)).await;
    let pid = g.child.id();
    let before = rss_mib(pid);
    let uploads: Vec<_> = (0..300)
        .map(|i| {
            let url = g.url("/v1/files");
            tokio::spawn(upload(url, peer(30 + (i % 30) as u8), 1_000_000, 900_000, Duration::from_secs(4)))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = rss_mib(pid);
    let other = h2c(peer(99)).get(g.url("/v1/agents")).send().await.unwrap();
    assert_eq!(other.status().as_u16(), 200, "another client is served while the uploads wait");
    let mut statuses = Vec::new();
    for u in uploads {
        statuses.push(u.await.unwrap());
    }
    let stored = statuses.iter().filter(|s| **s == Some(200)).count();
    let busy = statuses.iter().filter(|s| **s == Some(529)).count();
    assert!(stored >= 20, "the uploads within the budget are stored: {statuses:?}");
    assert_eq!(stored + busy, 300, "the others are told to retry, none fails otherwise: {statuses:?}");
    assert!(
        during < before + 160,
        "the uploads held to a 32 MiB budget grew the process from {before} MiB to {during} MiB"
    );
    // jemalloc hands freed pages back from its background thread within about ten seconds.
    let after = eventually(60, "the memory of the uploads given back", || async {
        let now = rss_mib(pid);
        (now < before + 32).then_some(now)
    })
    .await;
    eprintln!("RSS: {before} MiB before, {during} MiB during, {after} MiB after");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 4's other half: a body that trickles just inside the idle deadline (a byte every
/// 200 ms here) is cut off with 408 once it falls below the minimum rate, so it cannot hold
/// its place and its memory for as long as it likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_minimum_rate_is_cut_off_with_408() {
    let dir = workdir("slow-body");
    let g = GatewayBuilder::new(TESTBED, "slow-body")
        .cwd(&dir)
        .env("GATEWAY_ADMISSION__MIN_BODY_BYTES_PER_SEC", 1000)
        .env("GATEWAY_ADMISSION__BODY_RATE_GRACE_SECS", 1)
        .spawn();
    g.ready(Duration::from_secs(30)).await;
    let trickle = futures::stream::unfold(0, |i| async move {
        (i < 100).then_some(())?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        Some((Ok::<_, std::io::Error>(vec![b' ']), i + 1))
    });
    let started = tokio::time::Instant::now();
    let r = reqwest::Client::new()
        .post(g.url("/v1/agents"))
        .header("content-type", "application/json")
        .header("content-length", 100)
        .body(reqwest::Body::wrap_stream(trickle))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 408);
    assert!(started.elapsed() < Duration::from_secs(10), "cut off soon after the grace: {:?}", started.elapsed());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "timeout_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("1000 bytes per second"), "{body}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}
