#![allow(clippy::unwrap_used)]
//! `/metrics` of a real `gateway serve`, scraped while a turn runs and after it (issue 14):
//! the histograms and gauges an operator reads, with values that follow what happened.

use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, eventually, workdir};
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

async fn post(http: &reqwest::Client, g: &Gateway, path: &str, body: Value) -> Value {
    let r = http.post(g.url(path)).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "POST {path}");
    r.json().await.unwrap()
}

async fn scrape(http: &reqwest::Client, g: &Gateway) -> String {
    let r = http.get(g.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    r.text().await.unwrap()
}

/// The value of one series (its name with labels exactly as exposed); `None` if absent.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.split(' ').next()?.parse().ok())
}

fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// A WebSocket handshake on `/acp`, by hand (the handshake is all this test needs).
async fn open_acp_websocket(g: &Gateway) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = g.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "GET /acp HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut got = [0u8; 512];
    let n = tcp.read(&mut got).await.unwrap();
    let answer = String::from_utf8_lossy(&got[..n]);
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    tcp
}

/// A turn whose tool call sleeps one second: while it runs, the running turn, the open stream
/// and the environment in use show; afterwards its duration is in the bucket above one second,
/// its first event (the tool call, before the sleep) in the one below, both model requests
/// (the tool call, then the answer) are counted as ok, the requests that drove it are timed
/// by route template, and the store shows its commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_during_and_after_a_turn_shows_its_latencies_and_gauges() {
    let dir = workdir("metrics");
    let g = GatewayBuilder::new(TESTBED, "metrics").cwd(&dir).env("GATEWAY_TESTBED_NATIVE", "model").spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let toolset = json!([{"type": "agent_toolset_20260401",
        "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}}}]);
    let agent =
        post(&http, &g, "/v1/agents", json!({"name": "a", "model": "claude-sonnet-4-6", "tools": toolset})).await;
    let env = post(&http, &g, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session = post(&http, &g, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env["id"]})).await;
    let id = session["id"].as_str().unwrap();

    let before = scrape(&http, &g).await;
    assert_eq!(must(&before, "gateway_turns_running"), 0.0);
    assert_eq!(must(&before, "gateway_subscriptions_open"), 0.0);
    assert_eq!(must(&before, "gateway_outbox_pending"), 0.0);
    assert_eq!(must(&before, "gateway_editor_connections"), 0.0);
    assert_eq!(must(&before, "gateway_runs_queued"), 0.0);
    assert_eq!(must(&before, "gateway_runs_oldest_queued_seconds"), 0.0);
    assert!(value(&before, "gateway_turn_duration_seconds_count{backend=\"native\",outcome=\"completed\"}").is_none());

    // An editor connected over the ACP WebSocket counts while its connection lasts.
    let editor = open_acp_websocket(&g).await;
    eventually(5, "the editor counted", || async {
        (must(&scrape(&http, &g).await, "gateway_editor_connections") == 1.0).then_some(())
    })
    .await;
    drop(editor);
    eventually(5, "the editor gone", || async {
        (must(&scrape(&http, &g).await, "gateway_editor_connections") == 0.0).then_some(())
    })
    .await;

    let stream = http.get(g.url(&format!("/v1/sessions/{id}/events/stream"))).send().await.unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let say = json!({"events": [{"type": "user.message", "content": [
        {"type": "text", "text": r#"tool:bash {"command": "sleep 1; echo slept"}"#}]}]});
    post(&http, &g, &format!("/v1/sessions/{id}/events"), say).await;

    // During the turn: the command holds the environment.
    let during = eventually(10, "a scrape while the command runs", || async {
        let m = scrape(&http, &g).await;
        (must(&m, "gateway_environments{state=\"in_use\"}") == 1.0).then_some(m)
    })
    .await;
    assert_eq!(must(&during, "gateway_turns_running"), 1.0, "{during}");
    assert_eq!(must(&during, "gateway_subscriptions_open"), 1.0, "{during}");

    // The turn's duration is observed as its outcome is decided, just before the settlement
    // commits; the run counts as settled (and the environment idle) once that commit is back.
    let done = "gateway_turn_duration_seconds_count{backend=\"native\",outcome=\"completed\"}";
    let settled = "gateway_runs_settled_total{outcome=\"completed\"}";
    let idle = "gateway_environments{state=\"idle\"}";
    let after = eventually(30, "the turn ends and its run settles", || async {
        let m = scrape(&http, &g).await;
        (value(&m, done) == Some(1.0) && value(&m, settled) == Some(1.0) && value(&m, idle) == Some(1.0)).then_some(m)
    })
    .await;
    let turn = |le: &str| {
        must(
            &after,
            &format!("gateway_turn_duration_seconds_bucket{{le=\"{le}\",backend=\"native\",outcome=\"completed\"}}"),
        )
    };
    // It slept a second: not within 1 s, within 5 s (the bucket bounds are 1, 2.5, 5).
    assert_eq!(turn("1.0"), 0.0, "{after}");
    assert_eq!(turn("5.0"), 1.0, "{after}");
    let first =
        |le: &str| must(&after, &format!("gateway_turn_first_event_seconds_bucket{{le=\"{le}\",backend=\"native\"}}"));
    assert_eq!(first("1.0"), 1.0, "the tool call shows before the command's second: {after}");
    assert_eq!(must(&after, "gateway_model_request_duration_seconds_count{outcome=\"ok\"}"), 2.0, "{after}");
    assert_eq!(must(&after, "gateway_runs_settled_total{outcome=\"completed\"}"), 1.0);
    assert_eq!(must(&after, "gateway_turns_running"), 0.0);
    assert_eq!(must(&after, "gateway_environments{state=\"in_use\"}"), 0.0);
    assert_eq!(must(&after, "gateway_environments{state=\"idle\"}"), 1.0);
    let sent = "gateway_http_request_duration_seconds_count{face=\"managed_agents\",method=\"POST\",route=\"/v1/sessions/{id}/events\",status=\"2xx\"}";
    assert_eq!(must(&after, sent), 1.0, "{after}");
    assert!(!after.contains(id), "no session id in any label");
    assert!(must(&after, "gateway_store_writes_committed_total") >= 5.0, "{after}");
    assert!(must(&after, "gateway_store_commit_duration_seconds_count") >= 1.0, "{after}");
    assert!(must(&after, "gateway_store_commit_batch_writes_count") >= 1.0, "{after}");
    drop(stream);
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}
