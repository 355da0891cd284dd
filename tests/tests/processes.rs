#![allow(clippy::unwrap_used)]
//! Process-level fault tests: real `gateway` processes (with the scripted backend) on one
//! PostgreSQL database, killed, stopped and resumed while they work.

use std::collections::BTreeMap;
use std::time::Duration;

use gateway_core::SessionId;
use gateway_core::content::plain_text;
use gateway_core::event::{Event, EventKind, EventPayload, StopReason};
use gateway_store::conformance::harness::{PgHarness, test_database_url};
use gateway_store::conformance::{msg, session_with};
use gateway_store::{EventLog, PgStore, Store, StoreOptions};
use gateway_tests::{Gateway, GatewayBuilder, eventually};
use nix::sys::signal::Signal;
use std::sync::Arc;

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

async fn schema_store() -> (String, Arc<PgStore>) {
    let url = PgHarness::new_schema_url().await;
    let store = PgStore::connect(&url, &StoreOptions::default()).await.expect("connect");
    store.migrate().await.expect("migrate");
    (url, Arc::new(store))
}

/// A gateway on a shared PostgreSQL database. Its local state (the secret key file, any
/// workspaces) goes to one temporary `data_dir` per test process, so the gateways of a test
/// share their key, as processes sharing a database must, and nothing lands in `tests/`.
fn gateway(name: &str, url: &str, lease_secs: u64) -> GatewayBuilder {
    let data_dir = std::env::temp_dir().join(format!("gateway-processes-{}", std::process::id()));
    GatewayBuilder::new(TESTBED, name)
        .env("GATEWAY_DATA_DIR", data_dir.display())
        .env("GATEWAY_DATABASE_URL", url)
        .env("GATEWAY_WORKERS__LEASE_SECS", lease_secs)
        .env("GATEWAY_WORKERS__POLL_MS", 200)
        .env("GATEWAY_WORKERS__MAX_TURNS", 64)
        .env("GATEWAY_WORKERS__SHUTDOWN_GRACE_SECS", 1)
}

fn steps(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessage { content } => Some(plain_text(content)),
            _ => None,
        })
        .collect()
}

fn turn_ends(log: &[Event]) -> Vec<StopReason> {
    log.iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnded { stop } => Some(stop.clone()),
            _ => None,
        })
        .collect()
}

/// Every seq 1..n once, the expected steps once each in order, one turn start, one end.
fn assert_turn_completed_once(log: &[Event], n: u32) {
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "no duplicate or missing seq");
    let want: Vec<String> = (1..=n).map(|i| format!("step {i}/{n}")).collect();
    assert_eq!(steps(log), want, "each step exactly once");
    assert_eq!(log.iter().filter(|e| e.kind() == EventKind::TurnStarted).count(), 1);
    assert_eq!(turn_ends(log), vec![StopReason::EndTurn]);
}

async fn log_of(store: &PgStore, s: &SessionId) -> Vec<Event> {
    store.events_after(s, 0, 10_000).await.expect("read log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_runs_survive_a_sigkill_and_complete_exactly_once() {
    let (url, store) = schema_store().await;
    let a = gateway("a", &url, 2).spawn();
    let b = gateway("b", &url, 2).spawn();
    a.ready(Duration::from_secs(30)).await;
    b.ready(Duration::from_secs(30)).await;

    let dyn_store: Arc<dyn Store> = store.clone();
    let mut sessions = Vec::new();
    for _ in 0..50 {
        sessions.push(session_with(&dyn_store, vec![msg("steps 4 150")]).await.id);
    }

    // Wait until process a holds a run in the middle of its turn, then kill it outright.
    let (victim, a_epoch): (String, i64) = eventually(30, "process a mid-turn", || async {
        sqlx::query_as(
            "SELECT r.id, r.lease_epoch FROM runs r WHERE r.state = 'running' AND r.lease_owner = 'a' \
             AND EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.kind = 'agent_message')",
        )
        .fetch_optional(store.pool())
        .await
        .ok()
        .flatten()
    })
    .await;
    a.signal(Signal::SIGKILL);

    eventually(90, "all 50 turns ended", || async {
        let (open,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs WHERE state IN ('queued', 'running')")
            .fetch_one(store.pool())
            .await
            .ok()?;
        (open == 0).then_some(())
    })
    .await;
    for s in &sessions {
        assert_turn_completed_once(&log_of(&store, s).await, 4);
    }

    // The survivor took the victim over after lease expiry, with a higher epoch.
    let (session_id,): (String,) = sqlx::query_as("SELECT session_id FROM runs WHERE id = $1")
        .bind(&victim)
        .fetch_one(store.pool())
        .await
        .unwrap();
    let log = log_of(&store, &SessionId::parse(&session_id).unwrap()).await;
    let by_epoch: BTreeMap<i64, usize> = log.iter().filter_map(|e| e.epoch).fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e).or_default() += 1;
        m
    });
    assert!(by_epoch.contains_key(&a_epoch), "a committed part of the victim's turn: {by_epoch:?}");
    assert!(by_epoch.keys().any(|&e| e > a_epoch), "b finished it under a higher epoch: {by_epoch:?}");
    let (state, crashes): (String, i64) = sqlx::query_as("SELECT state, crash_count FROM runs WHERE id = $1")
        .bind(&victim)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(state, "completed");
    assert_eq!(crashes, 1, "the kill counted as one crash");
    let (claimed_by_a,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM runs WHERE state <> 'completed'").fetch_one(store.pool()).await.unwrap();
    assert_eq!(claimed_by_a, 0);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_lease_holder_cannot_commit_after_takeover() {
    let (url, store) = schema_store().await;
    let a = gateway("a", &url, 1).spawn();
    let b = gateway("b", &url, 1).spawn();
    a.ready(Duration::from_secs(30)).await;
    b.ready(Duration::from_secs(30)).await;
    let dyn_store: Arc<dyn Store> = store.clone();
    let session = session_with(&dyn_store, vec![msg("steps 8 300")]).await.id;

    let (run, owner, epoch): (String, String, i64) = eventually(30, "a step committed", || async {
        sqlx::query_as(
            "SELECT r.id, r.lease_owner, r.lease_epoch FROM runs r WHERE r.state = 'running' \
             AND EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND e.kind = 'agent_message')",
        )
        .fetch_optional(store.pool())
        .await
        .ok()
        .flatten()
    })
    .await;
    // The lease owner is the process's instance name (one dispatcher per process: ADR 0012).
    let (holder, other) = if owner == "a" { (&a, &b) } else { (&b, &a) };
    holder.signal(Signal::SIGSTOP);
    let stopped_at = log_of(&store, &session).await.len() as u64;

    // The other process takes over after the lease expires and finishes the turn.
    eventually(60, "takeover and completion", || async {
        let (state, e): (String, i64) = sqlx::query_as("SELECT state, lease_epoch FROM runs WHERE id = $1")
            .bind(&run)
            .fetch_one(store.pool())
            .await
            .ok()?;
        (state == "completed" && e > epoch).then_some(())
    })
    .await;
    let before_resume = log_of(&store, &session).await;
    holder.signal(Signal::SIGCONT);
    // Give the resumed process time to wake up and try its late commit or renewal: whichever
    // runs first after SIGCONT finds the lease gone (a commit is refused as fenced; a renewal
    // reports the lease lost and the turn is abandoned before its next commit).
    eventually(20, "the resumed holder is fenced", || async {
        let log = holder.log();
        (log.contains("fenced") || log.contains("lease lost")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let log = log_of(&store, &session).await;
    assert_eq!(log, before_resume, "nothing the resumed holder wrote is visible");
    assert_turn_completed_once(&log, 8);
    for e in &log {
        if e.epoch == Some(epoch) {
            assert!(e.seq <= stopped_at + 1, "holder's epoch {epoch} committed seq {} after it was stopped", e.seq);
        }
    }
    assert!(log.iter().any(|e| e.epoch.is_some_and(|x| x > epoch)), "the taker committed under a higher epoch");
    assert!(!other.log().contains("fenced"), "the taker was never fenced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_releases_running_turns_to_another_process() {
    let (url, store) = schema_store().await;
    let mut a = gateway("a", &url, 60).spawn();
    a.ready(Duration::from_secs(30)).await;
    let dyn_store: Arc<dyn Store> = store.clone();
    let session = session_with(&dyn_store, vec![msg("steps 8 250")]).await.id;
    eventually(30, "two steps", || async { (steps(&log_of(&store, &session).await).len() >= 2).then_some(()) }).await;
    a.signal(Signal::SIGTERM);
    assert_eq!(a.exit_code(Duration::from_secs(20)).await, Some(0), "graceful exit; log:\n{}", a.log());
    let log = a.log();
    let joined = log.find("every background task has stopped").unwrap_or_else(|| panic!("tasks joined; log:\n{log}"));
    assert!(log[..joined].contains("workers stopped"), "the Workers stopped before the store closed; log:\n{log}");
    let (state, owner): (String, Option<String>) =
        sqlx::query_as("SELECT state, lease_owner FROM runs").fetch_one(store.pool()).await.unwrap();
    assert_eq!((state.as_str(), owner), ("queued", None), "the lease was released, not left to expire (60 s)");

    let b = gateway("b", &url, 60).spawn();
    b.ready(Duration::from_secs(30)).await;
    eventually(30, "b finishes the turn", || async {
        (!turn_ends(&log_of(&store, &session).await).is_empty()).then_some(())
    })
    .await;
    let log = log_of(&store, &session).await;
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    let want: Vec<String> = (1..=8).map(|i| format!("step {i}/8")).collect();
    assert_eq!(steps(&log), want, "each step once across the hand-over");
    assert_eq!(turn_ends(&log), vec![StopReason::EndTurn]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readyz_fails_while_the_database_is_unreachable() {
    let base = test_database_url();
    let admin = sqlx::PgPool::connect(&base).await.expect("admin connection");
    let db = format!("gwt_ready_{}", std::process::id());
    let _ =
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).execute(&admin).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&admin).await.expect("create database");
    let url = match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{db}"),
        None => panic!("unexpected test database URL {base}"),
    };
    let g = gateway("ready", &url, 30).spawn();
    g.ready(Duration::from_secs(30)).await;
    let client = reqwest::Client::new();
    let status = |c: reqwest::Client, u: String| async move {
        c.get(u).timeout(Duration::from_secs(5)).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
    };
    assert_eq!(status(client.clone(), g.url("/healthz")).await, 200);

    sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {db} WITH ALLOW_CONNECTIONS false")))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&db)
        .execute(&admin)
        .await
        .unwrap();
    eventually(20, "readyz 503 while the database refuses connections", || async {
        (status(client.clone(), g.url("/readyz")).await == 503).then_some(())
    })
    .await;
    assert_eq!(status(client.clone(), g.url("/healthz")).await, 200, "liveness does not depend on the database");

    sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true")))
        .execute(&admin)
        .await
        .unwrap();
    eventually(30, "readyz 200 again", || async {
        (status(client.clone(), g.url("/readyz")).await == 200).then_some(())
    })
    .await;
    drop(g);
    let _ =
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).execute(&admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_defaults_serve_from_a_sqlite_file_under_data() {
    let dir = std::env::temp_dir().join(format!("gateway-defaults-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let g = GatewayBuilder::new(TESTBED, "defaults").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    assert!(dir.join("data/gateway.db").exists(), "the default database is ./data/gateway.db");
    let metrics = reqwest::get(g.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("# TYPE gateway_runs_claimed counter\n"), "{metrics}");
    assert!(metrics.contains("\ngateway_runs_claimed_total 0\n"), "{metrics}");
    let log = g.log();
    assert!(log.contains("\"engine\":\"sqlite\""), "{log}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_on_the_local_sandbox_refuses_to_start_without_consent() {
    let dir = std::env::temp_dir().join(format!("gateway-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut refused = GatewayBuilder::new(TESTBED, "guard")
        .cwd(&dir)
        .env("GATEWAY_MODEL", "anthropic")
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
        .spawn();
    assert_eq!(refused.exit_code(Duration::from_secs(30)).await, Some(1));
    let log = refused.log();
    assert!(log.contains("GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX"), "{log}");
    assert!(!log.contains("sk-test-not-a-real-key"), "the API key never reaches the logs");

    let consented = GatewayBuilder::new(TESTBED, "guard-ok")
        .cwd(&dir)
        .env("GATEWAY_MODEL", "anthropic")
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
        .env("GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX", "1")
        .spawn();
    consented.ready(Duration::from_secs(30)).await;
    assert!(!consented.log().contains("sk-test-not-a-real-key"));
    drop(consented);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WebSocket upgrade request for `/acp` (answered 101 or refused before the upgrade).
fn acp_upgrade(http: &reqwest::Client, g: &Gateway) -> reqwest::RequestBuilder {
    http.get(g.url("/acp"))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
}

/// An A2A v1.0 JSON-RPC `GetTask` of the default agent.
fn a2a_get_task(http: &reqwest::Client, g: &Gateway) -> reqwest::RequestBuilder {
    let rpc = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "task_x"}});
    http.post(g.url("/a2a/default")).header("A2A-Version", "1.0").json(&rpc)
}

/// Without keys, loopback clients are trusted, but not a web page the user visits: its
/// browser marks every request it lets a page send to `127.0.0.1` with `Origin` (and cannot
/// attach a key), so no face serves it: Managed Agents, A2A, the ACP WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_pages_get_no_loopback_trust() {
    let dir = std::env::temp_dir().join(format!("gateway-origin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let g = GatewayBuilder::new(TESTBED, "origin").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let with = |r: reqwest::RequestBuilder, origin: Option<&str>| match origin {
        Some(o) => r.header("origin", o),
        None => r,
    };
    for origin in [None, Some("https://evil.example"), Some("http://127.0.0.1:8080"), Some("null")] {
        let local = origin.is_none();
        // A "simple" cross-site POST (text/plain) needs no preflight: its effect is the risk.
        let body = r#"{"name": "planted", "model": "claude-sonnet-4-6"}"#;
        let ma = with(http.post(g.url("/v1/agents")).header("content-type", "text/plain").body(body), origin)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(ma == 401, !local, "Managed Agents from {origin:?}: {ma}");
        let a2a = with(a2a_get_task(&http, &g), origin).send().await.unwrap().status().as_u16();
        assert_eq!(a2a == 401, !local, "A2A from {origin:?}: {a2a}");
        let acp = with(acp_upgrade(&http, &g), origin).send().await.unwrap().status().as_u16();
        assert_eq!(acp, if local { 101 } else { 401 }, "ACP WebSocket from {origin:?}");
    }
    let listed: serde_json::Value = http.get(g.url("/v1/agents")).send().await.unwrap().json().await.unwrap();
    let planted = listed["data"].as_array().unwrap().iter().filter(|a| a["name"] == "planted").count();
    assert_eq!(planted, 1, "only the local client's agent was created: {listed}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Once a key exists, every network face of `gateway serve` wants one, loopback or not:
/// Managed Agents, A2A (cards stay public) and the ACP WebSocket (refused before the upgrade).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_network_face_requires_a_key_once_one_exists() {
    let dir = std::env::temp_dir().join(format!("gateway-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(TESTBED)
        .args(["keys", "create", "--name", "faces"])
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env("GATEWAY_LOG__FORMAT", "json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("gwk_"), "{key}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&key), "the secret never reaches the log");

    let g = GatewayBuilder::new(TESTBED, "faces").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let with = |r: reqwest::RequestBuilder, key: Option<&str>| match key {
        Some(k) => r.header("x-api-key", k),
        None => r,
    };
    for key_sent in [None, Some("gwk_wrong"), Some(key.as_str())] {
        let ok = key_sent == Some(key.as_str());
        let ma = with(http.get(g.url("/v1/agents")), key_sent).send().await.unwrap().status();
        assert_eq!(ma.as_u16(), if ok { 200 } else { 401 }, "Managed Agents with {key_sent:?}");
        let a2a = with(a2a_get_task(&http, &g), key_sent).send().await.unwrap();
        assert_eq!(a2a.status().as_u16() == 401, !ok, "A2A with {key_sent:?}: {}", a2a.status());
        let acp = with(acp_upgrade(&http, &g), key_sent).send().await.unwrap();
        assert_eq!(acp.status().as_u16(), if ok { 101 } else { 401 }, "ACP WebSocket with {key_sent:?}");
        if !ok {
            assert!(acp.headers().contains_key("www-authenticate"));
        }
    }
    // An empty `x-api-key:` (a client's unset variable) does not hide a good bearer token.
    let both = http.get(g.url("/v1/agents")).header("x-api-key", "").bearer_auth(&key).send().await.unwrap();
    assert_eq!(both.status().as_u16(), 200, "empty x-api-key beside a valid bearer token");
    let card = http.get(g.url("/.well-known/agent-card.json")).send().await.unwrap().status();
    assert_eq!(card.as_u16(), 200, "agent cards are public");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two processes on one host and one database, each with its own data directory, would run
/// each other's turns on workspaces they do not have (both default to the hostname as host
/// id): the second refuses to start, naming the clash and the ways out; with a host id of its
/// own it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_process_with_its_own_data_dir_needs_its_own_host_id() {
    let (url, _store) = schema_store().await;
    let a = gateway("a", &url, 60).spawn();
    a.ready(Duration::from_secs(30)).await;
    let shared = std::env::temp_dir().join(format!("gateway-processes-{}", std::process::id()));
    let own = std::env::temp_dir().join(format!("gateway-processes-own-{}", std::process::id()));
    let second = |name: &str| {
        GatewayBuilder::new(TESTBED, name)
            .env("GATEWAY_DATA_DIR", own.display())
            .env("GATEWAY_DATABASE_URL", &url)
            // Processes sharing a database share the key that seals its secrets.
            .env("GATEWAY_SECRET_KEY_FILE", shared.join("secret.key").display())
    };
    let mut refused = second("b").spawn();
    assert_eq!(refused.exit_code(Duration::from_secs(30)).await, Some(1), "log:\n{}", refused.log());
    let log = refused.log();
    let workspaces = std::fs::canonicalize(shared.join("workspaces")).unwrap();
    assert!(log.contains("refusing to start: host id"), "{log}");
    assert!(log.contains(&workspaces.display().to_string()), "it names where the holder's workspaces are: {log}");
    assert!(log.contains("GATEWAY_HOST_ID"), "and the way out: {log}");

    let started = second("b2").env("GATEWAY_HOST_ID", "second-host").spawn();
    started.ready(Duration::from_secs(30)).await;
    drop(started);
    drop(a);
    let _ = std::fs::remove_dir_all(&own);
}

async fn post_json(http: &reqwest::Client, g: &Gateway, path: &str, body: serde_json::Value) -> serde_json::Value {
    let r = http.post(g.url(path)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{path}: {v}");
    v
}

/// A client streaming a session from one process sees the previews of a turn another process
/// runs (PostgreSQL relays them, docs/adr/0004): each delta in order, the first long before the
/// committed message, whose text they add up to; the committed event is the last word.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_on_one_process_shows_the_previews_of_a_turn_another_runs() {
    use serde_json::json;
    let (url, store) = schema_store().await;
    let (a, b) = (gateway("a", &url, 60).spawn(), gateway("b", &url, 60).spawn());
    a.ready(Duration::from_secs(30)).await;
    b.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let agent = post_json(&http, &a, "/v1/agents", json!({"name": "drip", "model": "claude-sonnet-4-6"})).await;
    let env = post_json(&http, &a, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session =
        post_json(&http, &a, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env["id"]})).await;
    let sid = session["id"].as_str().unwrap();

    let stream = http
        .get(a.url(&format!("/v1/sessions/{sid}/events/stream?event_deltas[]=agent.message")))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    // A tells B at once that it streams the session, through the database: give that a moment
    // (a turn that starts before B heard loses the previews of its first message, ADR 0004).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    // B receives the message, so B's admission runs the turn (docs/adr/0016).
    let words = ["one", "two", "three", "four", "five", "six"];
    let body = json!({"events": [{"type": "user.message",
        "content": [{"type": "text", "text": format!("drip 150 {}", words.join(" "))}]}]});
    post_json(&http, &b, &format!("/v1/sessions/{sid}/events"), body).await;
    let owner: String = eventually(10, "the turn running", || async {
        sqlx::query_scalar("SELECT lease_owner FROM runs WHERE session_id = $1 AND state = 'running'")
            .bind(sid)
            .fetch_optional(store.pool())
            .await
            .unwrap()
    })
    .await;
    // The test gateways are named by their instance (`GatewayBuilder`).
    assert_eq!(owner, "b", "B runs the turn, A streams it");

    let mut frames: Vec<(Duration, String, serde_json::Value)> = Vec::new();
    let mut sse = Sse::new(stream);
    let read = async {
        while let Some(f) = sse.next().await {
            let committed_message = f.event == "agent.message";
            frames.push((started.elapsed(), f.event, f.data));
            if committed_message {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("the committed message within 30 s");

    let kinds: Vec<&str> = frames.iter().map(|(_, k, _)| k.as_str()).collect();
    let message = frames.last().unwrap();
    let start = frames.iter().position(|(_, k, _)| k == "event_start").unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(frames[start].2["event"]["id"], message.2["id"], "the preview has the committed event's id");
    let deltas: Vec<&(Duration, String, serde_json::Value)> =
        frames.iter().filter(|(_, k, _)| k == "event_delta").collect();
    assert_eq!(deltas.len(), words.len(), "every delta, once: {kinds:?}");
    assert!(frames.iter().position(|(_, k, _)| k == "event_delta").unwrap() > start, "start before deltas: {kinds:?}");
    let text: String = deltas.iter().map(|(_, _, d)| d["delta"]["content"]["text"].as_str().unwrap()).collect();
    assert_eq!(text, words.join(" "), "the deltas in order add up to the message");
    assert_eq!(message.2["content"][0]["text"], words.join(" "));
    let early = message.0 - deltas[0].0;
    assert!(early >= Duration::from_millis(400), "the first delta came {early:?} before the committed message");
    drop((a, b));
}

/// The Managed Agents events of a session, as `(type, text)` of each: an error's message, a
/// message's text, a tool result's output.
async fn shown_events(http: &reqwest::Client, g: &Gateway, sid: &str) -> Vec<(String, String)> {
    let v: serde_json::Value =
        http.get(g.url(&format!("/v1/sessions/{sid}/events?limit=1000"))).send().await.unwrap().json().await.unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = e["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| e["content"].as_array().map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect()))
                .unwrap_or_default();
            (e["type"].as_str().unwrap_or_default().to_owned(), text)
        })
        .collect()
}

async fn idle_after(http: &reqwest::Client, g: &Gateway, sid: &str, events_at_least: usize) -> Vec<(String, String)> {
    eventually(60, "the session idle after its turn", || async {
        let s: serde_json::Value =
            http.get(g.url(&format!("/v1/sessions/{sid}"))).send().await.ok()?.json().await.ok()?;
        let shown = shown_events(http, g, sid).await;
        (s["status"] == "idle"
            && shown.len() >= events_at_least
            && shown.iter().any(|(t, _)| t == "session.status_idle"))
        .then_some(shown)
    })
    .await
}

/// A session whose environment's host is gone fails every turn, closed, until it is released
/// by request (`gateway sessions release-environment`, or the API extension); the release is
/// recorded in its log, refused once done, and the next turn runs in a fresh environment on the
/// process that has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_whose_host_is_gone_recovers_through_an_explicit_release() {
    use serde_json::json;
    let (url, store) = schema_store().await;
    let root = std::env::temp_dir().join(format!("gateway-lost-host-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let host = |name: &str| {
        GatewayBuilder::new(TESTBED, name)
            .env("GATEWAY_TESTBED_NATIVE", "model")
            .env("GATEWAY_DATA_DIR", root.join(name).display())
            .env("GATEWAY_SECRET_KEY_FILE", root.join("secret.key").display())
            .env("GATEWAY_DATABASE_URL", &url)
            .env("GATEWAY_HOST_ID", format!("host-{name}"))
            .env("GATEWAY_WORKERS__HOST_TTL_SECS", 2)
            .env("GATEWAY_WORKERS__POLL_MS", 200)
    };
    let a = host("a").spawn();
    a.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let tools = json!([{"type": "agent_toolset_20260401",
        "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}}}]);
    let agent =
        post_json(&http, &a, "/v1/agents", json!({"name": "w", "model": "claude-sonnet-4-6", "tools": tools})).await;
    let env = post_json(&http, &a, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session =
        post_json(&http, &a, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env["id"]})).await;
    let sid = session["id"].as_str().unwrap().to_owned();
    let say = |text: &str| json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]});
    let bash = |command: &str| say(&format!("tool:bash {}", json!({"command": command})));

    post_json(&http, &a, &format!("/v1/sessions/{sid}/events"), bash("echo kept > note.txt && echo wrote")).await;
    let before = idle_after(&http, &a, &sid, 1).await;
    let env_host = || async {
        sqlx::query_scalar::<_, Option<String>>("SELECT env_host FROM sessions WHERE id = $1")
            .bind(&sid)
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    assert_eq!(env_host().await.as_deref(), Some("host-a"), "realized on a: {before:?}");

    // Host a is gone for good; b (another host) takes the session's next message.
    a.signal(Signal::SIGKILL);
    let b = host("b").spawn();
    b.ready(Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    post_json(&http, &b, &format!("/v1/sessions/{sid}/events"), say("hello")).await;
    let failed = idle_after(&http, &b, &sid, before.len() + 1).await;
    let new = &failed[before.len()..];
    assert!(
        new.iter().any(|(t, m)| t == "session.error" && m.contains("host that is gone")),
        "the turn fails closed: {new:?}"
    );
    assert!(!new.iter().any(|(t, _)| t == "agent.message"), "nothing ran elsewhere: {new:?}");
    assert_eq!(env_host().await.as_deref(), Some("host-a"), "not re-homed silently");

    // The operator releases it from the command line (on the database).
    let out = std::process::Command::new(TESTBED)
        .args(["sessions", "release-environment", &sid])
        .env_remove("GATEWAY_CONFIG")
        .env_remove("GATEWAY_URL")
        .env("GATEWAY_DATA_DIR", root.join("cli"))
        .env("GATEWAY_DATABASE_URL", &url)
        .env("GATEWAY_WORKERS__HOST_TTL_SECS", "2")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("released the environment of") && stdout.contains("is none"), "{stdout}");
    assert_eq!(env_host().await, None);

    // Released once: the API extension now answers 409 in the API's error shape.
    let again = http.post(b.url(&format!("/v1/sessions/{sid}/environment/release"))).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 409);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["error"]["type"], "conflict_error", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("only an environment whose host is gone"), "{body}");

    let released = shown_events(&http, &b, &sid).await;
    assert!(
        released[failed.len()..].iter().any(|(t, m)| t == "session.error" && m.contains("released on request")),
        "the loss is recorded: {:?}",
        &released[failed.len()..]
    );
    post_json(&http, &b, &format!("/v1/sessions/{sid}/events"), bash("cat note.txt 2>/dev/null || echo fresh")).await;
    let after = idle_after(&http, &b, &sid, released.len() + 1).await;
    let new = &after[released.len()..];
    assert!(new.iter().any(|(t, m)| t == "agent.tool_result" && m.contains("fresh")), "a fresh workspace: {new:?}");
    assert!(!new.iter().any(|(t, _)| t == "session.error"), "{new:?}");
    assert_eq!(env_host().await.as_deref(), Some("host-b"));
    drop(b);
    let _ = std::fs::remove_dir_all(&root);
}

/// One frame of a Managed Agents event stream.
struct Frame {
    event: String,
    /// Committed events only (previews have none).
    id: Option<String>,
    data: serde_json::Value,
}

/// A Managed Agents event stream, read frame by frame.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

impl Sse {
    fn new(resp: reqwest::Response) -> Self {
        Self { resp, buf: String::new() }
    }

    /// The next frame with data; `None` when the connection ends or breaks (a killed process).
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let field = |name: &str| frame.lines().find_map(|l| l.strip_prefix(name)).map(str::to_owned);
                if let Some(data) = field("data: ") {
                    let event = field("event: ").unwrap_or_default();
                    return Some(Frame { event, id: field("id: "), data: serde_json::from_str(&data).unwrap() });
                }
                continue;
            }
            let chunk = self.resp.chunk().await.ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Reads committed events (`id`, JSON) into `frames` until one satisfies `last` (true) or the
/// connection ends (false).
async fn read_committed(
    sse: &mut Sse,
    frames: &mut Vec<(String, serde_json::Value)>,
    last: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    while let Some(f) = sse.next().await {
        let Some(id) = f.id else { continue };
        let done = last(&f.data);
        frames.push((id, f.data));
        if done {
            return true;
        }
    }
    false
}

/// The process a client streams from, and that runs the turn, is SIGKILLed mid-turn: the
/// client reconnects to the other process with `Last-Event-ID`, which takes the turn over once
/// the lease lapses, and the client sees every event of the session exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_of_a_killed_process_resumes_on_another_losing_and_repeating_nothing() {
    use serde_json::json;
    let (url, store) = schema_store().await;
    let (a, b) = (gateway("a", &url, 2).spawn(), gateway("b", &url, 2).spawn());
    a.ready(Duration::from_secs(30)).await;
    b.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let agent = post_json(&http, &b, "/v1/agents", json!({"name": "steps", "model": "claude-sonnet-4-6"})).await;
    let env = post_json(&http, &b, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session =
        post_json(&http, &b, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env["id"]})).await;
    let sid = session["id"].as_str().unwrap().to_owned();
    let stream_url = |g: &Gateway| g.url(&format!("/v1/sessions/{sid}/events/stream"));

    let first = http.get(stream_url(&b)).send().await.unwrap();
    let body = json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": "steps 8 250"}]}]});
    post_json(&http, &b, &format!("/v1/sessions/{sid}/events"), body).await;
    let mut frames = Vec::new();
    // Read from B until three steps are in, then kill B under the open stream.
    let steps = std::cell::Cell::new(0);
    let third_step = |v: &serde_json::Value| {
        steps.set(steps.get() + usize::from(v["type"] == "agent.message"));
        steps.get() >= 3
    };
    let mut sse = Sse::new(first);
    let read = read_committed(&mut sse, &mut frames, third_step);
    let three = tokio::time::timeout(Duration::from_secs(30), read).await.expect("three steps from B within 30 s");
    assert!(three, "B's stream stayed open until the third step");
    b.signal(Signal::SIGKILL);

    // Reconnect to A after the last event seen, until the turn ends there.
    let idle_end = |v: &serde_json::Value| v["type"] == "session.status_idle" && v["stop_reason"]["type"] == "end_turn";
    let resumed = async {
        loop {
            let last = frames.last().map(|(id, _)| id.clone()).unwrap();
            let resp = http.get(stream_url(&a)).header("last-event-id", &last).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            if read_committed(&mut Sse::new(resp), &mut frames, idle_end).await {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), resumed).await.expect("the turn ends on A");

    let log = log_of(&store, &SessionId::parse(&sid).unwrap()).await;
    assert_turn_completed_once(&log, 8);
    let seen: Vec<String> = frames.iter().map(|(id, _)| id.clone()).collect();
    let unique: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice: {seen:?}");
    // Every committed event the API shows, in the log's order (the stream shows all but the
    // few kinds the API keeps to itself, which list and stream alike skip).
    let listed: serde_json::Value =
        http.get(a.url(&format!("/v1/sessions/{sid}/events?limit=1000"))).send().await.unwrap().json().await.unwrap();
    let listed: Vec<String> =
        listed["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_owned()).collect();
    let streamed: Vec<&String> = seen.iter().filter(|id| listed.contains(id)).collect();
    assert_eq!(streamed, listed.iter().collect::<Vec<_>>(), "every listed event was streamed once, in order");
    drop(a);
}
