#![allow(clippy::unwrap_used)]
//! Issue 28's critical finding, replayed on a real `gateway serve`: with one environment key
//! (`gwe_…`, made for a self-hosted environment's executor) a caller on another host listed
//! every A2A task, sent `tool:bash` messages that ran on the gateway's host, and opened `/acp`
//! editor connections (then `session/load` of any session, prompts, `session/new`). Invariant
//! 31: that key now reaches nothing on A2A (JSON-RPC and REST, v1.0 and v0.3) and opens no
//! `/acp` connection, on a gateway with API keys and on one without; the callers those faces
//! serve (an API key from anywhere, a local program of a keyless gateway) still get in.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, workdir};
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

/// This host's address on its default route, so the attacker's requests come from a peer
/// that is not on loopback; loopback when the host has no such route (the key must be refused
/// from any address, so the test still holds, with less reach). No packet is sent: a UDP
/// `connect` only picks the source address.
fn outside_address() -> IpAddr {
    let picked = UdpSocket::bind("0.0.0.0:0").and_then(|s| {
        s.connect("203.0.113.1:9")?;
        s.local_addr()
    });
    match picked {
        Ok(a) if !a.ip().is_loopback() && !a.ip().is_unspecified() => a.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// A gateway on every address of this host, its own name being `outside` (so requests
/// addressed to it there are not refused as another host's), running the shipped fake model
/// (whose `tool:bash {...}` calls bash).
fn gateway(dir: &Path, name: &str, outside: IpAddr) -> Gateway {
    let port = gateway_tests::free_port();
    GatewayBuilder::new(TESTBED, name)
        .cwd(dir)
        .env("GATEWAY_LISTEN", format!("0.0.0.0:{port}"))
        .env("GATEWAY_PUBLIC_URL", format!("http://{outside}:{port}"))
        .env("GATEWAY_TESTBED_NATIVE", "model")
        .spawn()
}

/// A request as `key` presents it (`x-api-key`), or none.
fn with(r: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
    match key {
        Some(k) => r.header("x-api-key", k),
        None => r,
    }
}

/// An environment key of a new self-hosted environment, made through the Managed Agents API
/// by the gateway's operator (`admin`: the API key, or none on a keyless gateway).
async fn environment_key(http: &reqwest::Client, g: &Gateway, admin: Option<&str>) -> String {
    let env = json!({"name": "executors", "config": {"type": "self_hosted"}});
    let r = with(http.post(g.url("/v1/environments")), admin).json(&env).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let env: Value = r.json().await.unwrap();
    let path = format!("/v1/environments/{}/keys", env["id"].as_str().unwrap());
    let r = with(http.post(g.url(&path)), admin).json(&json!({"name": "executor"})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let key: Value = r.json().await.unwrap();
    let key = key["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("gwe_"), "{key}");
    key
}

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// The ids of the default agent's A2A tasks, as `key` sees them from `base`.
async fn tasks(http: &reqwest::Client, base: &str, key: Option<&str>) -> Vec<String> {
    let r = with(http.get(format!("{base}/a2a/default/tasks")), key).header("a2a-version", "1.0").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{base} with {key:?}");
    let body: Value = r.json().await.unwrap();
    body["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect()
}

/// The status of an `/acp` WebSocket upgrade at `base` presenting `key`.
async fn acp_upgrade(http: &reqwest::Client, base: &str, key: Option<&str>) -> (u16, String) {
    let r = with(http.get(format!("{base}/acp")), key)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, if status == 101 { String::new() } else { r.text().await.unwrap() })
}

/// The attack from `base` (another host, where it has one) with the environment key: every
/// A2A operation and the `/acp` upgrade are 403, and the tasks `admin` sees are unchanged
/// (nothing was sent, so no tool ran).
async fn attack(http: &reqwest::Client, g: &Gateway, base: &str, admin: Option<&str>) {
    let env_key = environment_key(http, g, admin).await;
    let sent =
        rpc("SendMessage", json!({"message": {"messageId": "m0", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}));
    let r =
        with(http.post(g.url("/a2a/default")), admin).header("a2a-version", "1.0").json(&sent).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let task = r.json::<Value>().await.unwrap()["result"]["task"]["id"].as_str().unwrap().to_owned();
    let before = tasks(http, &g.url(""), admin).await;
    assert_eq!(before, vec![task.clone()]);

    let bash =
        |id: &str| json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": "tool:bash {\"command\":\"id\"}"}]});
    let v03 = json!({"messageId": "m9", "role": "user", "kind": "message", "parts": [{"kind": "text", "text": "tool:bash {\"command\":\"id\"}"}]});
    let rpc_url = format!("{base}/a2a/default");
    let attempts: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("ListTasks", http.post(&rpc_url).header("a2a-version", "1.0").json(&rpc("ListTasks", json!({})))),
        ("GetTask", http.post(&rpc_url).header("a2a-version", "1.0").json(&rpc("GetTask", json!({"id": task})))),
        ("CancelTask", http.post(&rpc_url).header("a2a-version", "1.0").json(&rpc("CancelTask", json!({"id": task})))),
        (
            "SendMessage",
            http.post(&rpc_url).header("a2a-version", "1.0").json(&rpc("SendMessage", json!({"message": bash("m1")}))),
        ),
        ("v0.3 message/send", http.post(&rpc_url).json(&rpc("message/send", json!({"message": v03})))),
        ("REST ListTasks", http.get(format!("{rpc_url}/tasks")).header("a2a-version", "1.0")),
        ("REST GetTask", http.get(format!("{rpc_url}/tasks/{task}")).header("a2a-version", "1.0")),
        (
            "REST CancelTask",
            http.post(format!("{rpc_url}/tasks/{task}:cancel")).header("a2a-version", "1.0").json(&json!({})),
        ),
        (
            "REST SendMessage",
            http.post(format!("{rpc_url}/message:send"))
                .header("a2a-version", "1.0")
                .json(&json!({"message": bash("m2")})),
        ),
    ];
    for (what, req) in attempts {
        let r = req.header("x-api-key", &env_key).send().await.unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_eq!(status, 403, "{what} from {base} with the environment key: {body}");
        assert!(body.contains("PERMISSION_DENIED") && !body.contains(&task), "{what}: {body}");
    }
    let (status, body) = acp_upgrade(http, base, Some(&env_key)).await;
    assert_eq!(status, 403, "/acp from {base} with the environment key: {body}");
    assert_eq!(tasks(http, &g.url(""), admin).await, before, "no task was created or sent to");
}

/// A gateway with an API key: the environment key reaches nothing; the API key, from the
/// same outside address, is served on both faces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_reaches_nothing_on_a2a_or_acp_of_a_gateway_with_api_keys() {
    let dir = workdir("envkey-keys");
    let out = std::process::Command::new(TESTBED)
        .args(["keys", "create", "--name", "operator"])
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let api_key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let outside = outside_address();
    let g = gateway(&dir, "envkey-keys", outside);
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://{outside}:{}", g.port);
    attack(&http, &g, &base, Some(&api_key)).await;
    assert_eq!(tasks(&http, &base, Some(&api_key)).await.len(), 1, "the API key lists tasks from outside");
    assert_eq!(acp_upgrade(&http, &base, Some(&api_key)).await.0, 101, "the API key opens /acp from outside");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway without API keys, where issue 28 found the environment key accepted from any
/// address: it reaches nothing; local programs are still served without a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_reaches_nothing_on_a2a_or_acp_of_a_keyless_gateway() {
    let dir = workdir("envkey-keyless");
    let outside = outside_address();
    let g = gateway(&dir, "envkey-keyless", outside);
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://{outside}:{}", g.port);
    if !outside.is_loopback() {
        let r = http.get(format!("{base}/a2a/default/tasks")).header("a2a-version", "1.0").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "the attacker's address is not on loopback: no key, no service");
    }
    attack(&http, &g, &base, None).await;
    assert_eq!(tasks(&http, &g.url(""), None).await.len(), 1, "a local program lists tasks without a key");
    assert_eq!(acp_upgrade(&http, &g.url(""), None).await.0, 101, "a local program opens /acp without a key");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}
