#![allow(clippy::unwrap_used)]
//! MCP calls and crashes (issue 30, invariant 5): a gateway killed with SIGKILL between
//! journaling an MCP call and committing its result. After a restart on the same database the
//! call is reported indeterminate, and the server received it once: it is never sent again.
//!
//! The server is the Python `mcp` SDK's `MCPServer` (mcp 2.x) over Streamable HTTP
//! (`gateway/mcp/tests/peers/bearer_server.py`, installed by `gateway/mcp/tests/peers/install`),
//! requiring a bearer token the session's vault holds, and logging each call it receives.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, eventually, free_port, workdir};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");
const TOKEN: &str = "mcp-crash-token-93b1";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `bearer_server.py` on a free port (killed on drop) and its call log.
struct McpServer {
    child: tokio::process::Child,
    port: u16,
    calls: PathBuf,
}

impl McpServer {
    async fn start(dir: &Path) -> Self {
        let python = root().join(".cache/venv-mcp/bin/python");
        assert!(python.exists(), "the Python MCP SDK is missing: run gateway/mcp/tests/peers/install");
        let port = free_port();
        let calls = dir.join("mcp-calls.jsonl");
        let child = tokio::process::Command::new(python)
            .arg(root().join("gateway/mcp/tests/peers/bearer_server.py"))
            .arg(port.to_string())
            .env("MCP_TEST_TOKEN", TOKEN)
            .env("MCP_CALL_LOG", &calls)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        eventually(30, "the MCP server listens", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
        })
        .await;
        Self { child, port, calls }
    }

    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn gateway(name: &str, dir: &Path) -> Gateway {
    GatewayBuilder::new(TESTBED, name)
        .cwd(dir)
        .env("GATEWAY_TESTBED_NATIVE", "model")
        .env("GATEWAY_MCP__ALLOW_PRIVATE_SERVERS", "true")
        .env("GATEWAY_WORKERS__LEASE_SECS", 2)
        .env("GATEWAY_WORKERS__POLL_MS", 200)
        .spawn()
}

async fn post(http: &reqwest::Client, g: &Gateway, path: &str, body: Value) -> Value {
    let r = http.post(g.url(path)).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "POST {path}");
    r.json().await.unwrap()
}

async fn events(http: &reqwest::Client, g: &Gateway, session: &str) -> Vec<Value> {
    let r = http.get(g.url(&format!("/v1/sessions/{session}/events?limit=1000"))).send().await.unwrap();
    let body: Value = r.json().await.unwrap();
    body["data"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_cut_by_a_crash_is_reported_indeterminate_and_never_sent_again() {
    let dir = workdir("mcp-crash");
    let server = McpServer::start(&dir).await;
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    let http = reqwest::Client::new();

    let first = gateway("mcp-a", &dir);
    first.ready(Duration::from_secs(30)).await;
    let vault = post(&http, &first, "/v1/vaults", json!({"display_name": "v"})).await;
    let vid = vault["id"].as_str().unwrap().to_owned();
    let credential = json!({"auth": {"type": "static_bearer", "token": TOKEN, "mcp_server_url": url}});
    post(&http, &first, &format!("/v1/vaults/{vid}/credentials"), credential).await;
    let agent = post(
        &http,
        &first,
        "/v1/agents",
        json!({"name": "a", "model": "claude-sonnet-4-6",
               "mcp_servers": [{"type": "url", "name": "slow", "url": url}],
               "tools": [{"type": "mcp_toolset", "mcp_server_name": "slow",
                          "default_config": {"permission_policy": {"type": "always_allow"}}}]}),
    )
    .await;
    let env = post(&http, &first, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let session = post(
        &http,
        &first,
        "/v1/sessions",
        json!({"agent": agent["id"], "environment_id": env["id"], "vault_ids": [vid]}),
    )
    .await;
    let sid = session["id"].as_str().unwrap().to_owned();
    let say = json!({"events": [{"type": "user.message", "content": [
        {"type": "text", "text": r#"tool:sleep {"seconds": 60}"#}]}]});
    post(&http, &first, &format!("/v1/sessions/{sid}/events"), say).await;

    // The server has the call: it was journaled before it was sent. Kill the gateway mid-call.
    eventually(30, "the server received the call", || async { (server.calls().len() == 1).then_some(()) }).await;
    first.signal(Signal::SIGKILL);
    drop(first);

    let second = gateway("mcp-b", &dir);
    second.ready(Duration::from_secs(30)).await;
    let log = eventually(60, "the turn ended after the restart", || async {
        let log = events(&http, &second, &sid).await;
        log.iter().any(|e| e["type"] == "session.status_idle" && e["stop_reason"]["type"] == "end_turn").then_some(log)
    })
    .await;
    let uses: Vec<&Value> = log.iter().filter(|e| e["type"] == "agent.mcp_tool_use").collect();
    assert_eq!(uses.len(), 1, "{log:#?}");
    assert_eq!((uses[0]["name"].as_str(), uses[0]["mcp_server_name"].as_str()), (Some("sleep"), Some("slow")));
    let results: Vec<&Value> = log.iter().filter(|e| e["type"] == "agent.mcp_tool_result").collect();
    assert_eq!(results.len(), 1, "{log:#?}");
    assert_eq!(results[0]["mcp_tool_use_id"], uses[0]["id"]);
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0].to_string().contains("indeterminate"), "{}", results[0]);
    // Give a wrongly resent call time to arrive, then check the server saw one call only.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.calls(), vec![json!({"tool": "sleep", "arguments": {"seconds": 60.0}})]);
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
