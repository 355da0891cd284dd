#![allow(clippy::unwrap_used)]
//! The trust boundary of a real `gateway serve`, tested as the attacks it stops: a page that
//! rebinds its DNS name to 127.0.0.1, a cross-site request without `Origin`, another local user
//! reading the state files, and a reader of the database looking for credentials.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, eventually, workdir};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

/// `POST` a JSON body to the Managed Agents API from a local client; the created object.
async fn create(http: &reqwest::Client, g: &Gateway, path: &str, body: Value) -> Value {
    let r = http.post(g.url(path)).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    r.json().await.unwrap()
}

/// A session of the default agent, made by a local client.
async fn a_session(http: &reqwest::Client, g: &Gateway) -> String {
    let agent = create(http, g, "/v1/agents", json!({"name": "a", "model": "claude-sonnet-4-6"})).await;
    let env = create(http, g, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session = create(http, g, "/v1/sessions", json!({"agent": agent["id"], "environment_id": env["id"]})).await;
    session["id"].as_str().unwrap().to_owned()
}

/// The requests a rebound page would make, one per face that reads or acts: the session
/// list, an SSE event stream, A2A JSON-RPC and REST, metrics, and the ACP WebSocket upgrade.
fn faces(http: &reqwest::Client, g: &Gateway, session: &str) -> Vec<(&'static str, reqwest::RequestBuilder)> {
    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}});
    vec![
        ("sessions", http.get(g.url("/v1/sessions"))),
        ("event stream", http.get(g.url(&format!("/v1/sessions/{session}/events/stream")))),
        ("a2a json-rpc", http.post(g.url("/a2a/default")).header("a2a-version", "1.0").json(&rpc)),
        ("a2a rest tasks", http.get(g.url("/a2a/default/tasks")).header("a2a-version", "1.0")),
        ("metrics", http.get(g.url("/metrics"))),
        (
            "acp websocket",
            http.get(g.url("/acp"))
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-version", "13")
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ),
    ]
}

/// The status a face answers when it serves the request.
fn served(face: &str) -> u16 {
    if face == "acp websocket" { 101 } else { 200 }
}

/// Without keys, a page whose name was rebound to 127.0.0.1 addresses the gateway by that
/// name: every face answers 421 and shows nothing, on every name but the gateway's own
/// (loopback literals, `localhost`, the `public_url` host), where it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_page_reads_nothing_from_a_keyless_gateway() {
    let dir = workdir("rebind");
    let port = gateway_tests::free_port();
    let g = GatewayBuilder::new(TESTBED, "rebind")
        .cwd(&dir)
        .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEWAY_PUBLIC_URL", format!("http://gw.test:{port}"))
        .spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let session = a_session(&http, &g).await;

    for host in ["rebind.example", "rebind.example:80", "localhost.rebind.example", "app.localhost"] {
        for (face, req) in faces(&http, &g, &session) {
            let r = req.header("host", host).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 421, "{face} with Host {host}");
            let body = r.text().await.unwrap();
            assert!(!body.contains(&session), "{face} with Host {host} shows no data: {body}");
            assert!(body.contains(&format!("Host header {host} is not this gateway's")), "{face}: {body}");
            match face {
                "sessions" | "event stream" => {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(
                        (v["type"].as_str(), v["error"]["type"].as_str()),
                        (Some("error"), Some("permission_error"))
                    );
                }
                "a2a json-rpc" | "a2a rest tasks" => {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(v["error"]["code"], 421, "{body}");
                    assert_eq!(v["error"]["status"], "PERMISSION_DENIED", "{body}");
                }
                _ => {}
            }
        }
        let health = http.get(g.url("/healthz")).header("host", host).send().await.unwrap().status();
        assert_eq!(health.as_u16(), 200, "health probes stay open");
    }

    let own = [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("gw.test:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.2".to_owned(),
    ];
    for host in &own {
        for (face, req) in faces(&http, &g, &session) {
            let r = req.header("host", host.as_str()).send().await.unwrap();
            assert_eq!(r.status().as_u16(), served(face), "{face} with Host {host}");
            if face == "sessions" {
                assert!(r.text().await.unwrap().contains(&session), "the local client sees its session");
            }
        }
    }
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A browser marks a cross-site request with `Sec-Fetch-Site` even when it sends no
/// `Origin`: no loopback trust for it either. `none` (typed into the address bar) and
/// `same-origin` are the user's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_fetches_get_no_loopback_trust() {
    let dir = workdir("fetch-site");
    let g = GatewayBuilder::new(TESTBED, "fetch-site").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let session = a_session(&http, &g).await;
    for site in ["cross-site", "same-site"] {
        for (face, req) in faces(&http, &g, &session) {
            if face == "metrics" {
                continue; // keyless metrics are guarded by the Host rule only
            }
            let r = req.header("sec-fetch-site", site).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 401, "{face} with Sec-Fetch-Site {site}");
            let body = r.text().await.unwrap();
            assert!(body.contains("Sec-Fetch-Site"), "{face} says why: {body}");
            assert!(!body.contains(&session));
        }
    }
    for site in ["none", "same-origin"] {
        for (face, req) in faces(&http, &g, &session) {
            let r = req.header("sec-fetch-site", site).send().await.unwrap();
            assert_eq!(r.status().as_u16(), served(face), "{face} with Sec-Fetch-Site {site}");
        }
    }
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Once a key exists the Host rule no longer applies (a key is required from everyone): a
/// valid key is served on any name, and no key is refused 401, not 421.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_any_host_is_served_to_the_key_holder() {
    let dir = workdir("rebind-keyed");
    let out = std::process::Command::new(TESTBED)
        .args(["keys", "create", "--name", "rebind"])
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let g = GatewayBuilder::new(TESTBED, "rebind-keyed").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let authed = |r: reqwest::RequestBuilder| r.header("x-api-key", key.as_str()).header("host", "proxy.example");
    for (face, req) in faces(&http, &g, "sesn_unknown") {
        if face == "event stream" {
            continue; // no such session: 404 is the served answer
        }
        let r = authed(req).send().await.unwrap();
        assert_eq!(r.status().as_u16(), served(face), "{face} with a key and Host proxy.example");
    }
    for (face, req) in faces(&http, &g, "sesn_unknown") {
        if face == "event stream" {
            continue; // the stream of an unknown session is checked above
        }
        let r = req.header("host", "proxy.example").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{face} without a key");
        if face == "metrics" {
            assert!(r.headers().contains_key("www-authenticate"), "metrics say which credentials they want");
        }
    }
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

/// Another local user reads nothing: started with the most permissive umask, the gateway
/// still makes `data_dir` and the workspaces root 0700 and the database (with its WAL and
/// shared-memory files) and the secret key 0600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_files_are_private_whatever_the_umask() {
    let dir = workdir("modes");
    let g = GatewayBuilder::new(TESTBED, "modes").cwd(&dir).umask(0o000).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    a_session(&http, &g).await; // writes go through the WAL
    let data = dir.join("data");
    let table = [
        (data.clone(), 0o700),
        (data.join("workspaces"), 0o700),
        (data.join("gateway.db"), 0o600),
        (data.join("gateway.db-wal"), 0o600),
        (data.join("gateway.db-shm"), 0o600),
        (data.join("secret.key"), 0o600),
    ];
    for (path, want) in &table {
        assert_eq!(mode(path), *want, "{} is {:o}", path.display(), mode(path));
    }
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A push receiver on loopback that records each request's headers and answers 200.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let got: Arc<Mutex<Vec<BTreeMap<String, String>>>> = Arc::default();
        let seen = Arc::clone(&got);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 1 << 16 {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let headers = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    seen.lock().unwrap().push(headers);
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                });
            }
        });
        Receiver { port, got }
    }
}

/// Whoever reads the database (a backup, a replica, another user) finds the transcripts but
/// not the push credentials: the documents and outbox tables hold them sealed, while the
/// receiver still gets them in clear and the client still reads its config back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_credentials_never_reach_the_database_in_clear() {
    const TOKEN: &str = "tok-7f3a9c-never-in-the-db";
    const CREDENTIALS: &str = "cred-51be02-never-in-the-db";
    let dir = workdir("sealed");
    let receiver = Receiver::start().await;
    let g =
        GatewayBuilder::new(TESTBED, "sealed").cwd(&dir).env("GATEWAY_A2A__ALLOW_PRIVATE_PUSH_TARGETS", "1").spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let rpc = |method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        http.post(g.url("/a2a/default")).header("a2a-version", "1.0").json(&body).send()
    };
    let push = json!({
        "id": "c1",
        "url": format!("http://127.0.0.1:{}/hook", receiver.port),
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
    });
    let message = json!({"messageId": "m-sealed", "role": "ROLE_USER", "parts": [{"text": "hello"}]});
    let sent: Value =
        rpc("SendMessage", json!({"message": message, "configuration": {"taskPushNotificationConfig": push}}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let task = sent["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("{sent}")).to_owned();

    let delivered = eventually(30, "a push delivery reaches the receiver", || async {
        receiver.got.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(delivered.get("x-a2a-notification-token").map(String::as_str), Some(TOKEN), "{delivered:?}");
    assert_eq!(delivered.get("authorization").cloned(), Some(format!("Bearer {CREDENTIALS}")));

    let read: Value =
        rpc("GetTaskPushNotificationConfig", json!({"taskId": task, "id": "c1"})).await.unwrap().json().await.unwrap();
    assert_eq!(read["result"]["token"], TOKEN, "the client reads its config back in clear: {read}");
    assert_eq!(read["result"]["authentication"]["credentials"], CREDENTIALS, "{read}");

    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", dir.join("data/gateway.db").display()))
        .await
        .unwrap();
    let documents: Vec<(String, String, String)> =
        sqlx::query_as("SELECT namespace, key, body FROM documents").fetch_all(&db).await.unwrap();
    let outbox: Vec<(String,)> = sqlx::query_as("SELECT headers FROM outbox").fetch_all(&db).await.unwrap();
    assert!(!outbox.is_empty(), "the delivery went through the outbox");
    let everything = format!("{documents:?}{outbox:?}");
    assert!(!everything.contains(TOKEN) && !everything.contains(CREDENTIALS), "{everything}");
    let push_doc =
        documents.iter().find(|(ns, key, _)| ns == "a2a.push" && *key == task).expect("the config is stored");
    assert!(push_doc.2.contains("sealed:v1:"), "{}", push_doc.2);
    db.close().await;
    assert!(!g.log().contains(TOKEN) && !g.log().contains(CREDENTIALS), "nor in the logs");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Processes sharing a database must share the key that seals its secrets: a gateway started
/// with another key (a second host that made its own key file) refuses to start, naming both
/// keys, instead of sealing values the others cannot open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_another_secret_key_refuses_the_database() {
    let dir = workdir("two-keys");
    let key_a = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="; // 32 bytes of 1
    let key_b = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="; // 32 bytes of 2
    let first = GatewayBuilder::new(TESTBED, "key-a").cwd(&dir).env("GATEWAY_SECRET_KEY", key_a).spawn();
    first.ready(Duration::from_secs(30)).await;
    drop(first);
    let mut second = GatewayBuilder::new(TESTBED, "key-b").cwd(&dir).env("GATEWAY_SECRET_KEY", key_b).spawn();
    assert_eq!(second.exit_code(Duration::from_secs(30)).await, Some(1));
    let log = second.log();
    assert!(log.contains("were sealed with key") && log.contains("same GATEWAY_SECRET_KEY"), "{log}");
    assert!(!log.contains(key_b) && !log.contains(key_a), "keys never reach the log");
    let again = GatewayBuilder::new(TESTBED, "key-a-again").cwd(&dir).env("GATEWAY_SECRET_KEY", key_a).spawn();
    again.ready(Duration::from_secs(30)).await;
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}
