//! The client over Streamable HTTP against the official Python SDK's server (mcp==2.3.0,
//! `peers/bearer_server.py`), which requires a bearer token and logs every tool call it receives.

mod common;

use std::time::{Duration, Instant};

use common::PythonServer;
use gateway_mcp::{BearerToken, Content, Limits, McpClient, McpError};
use serde_json::json;

const TOKEN: &str = "tok-9f8e7d6c5b4a-secret";

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("reqwest client")
}

async fn connect(server: &PythonServer, token: &str) -> Result<McpClient, McpError> {
    McpClient::connect_http(http(), &server.url(), Some(BearerToken::new(token)), Limits::default()).await
}

fn assert_no_token(err: &McpError) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(TOKEN), "the token leaked: {shown}");
}

#[tokio::test]
async fn tools_are_listed_with_schemas_and_add_returns_the_sum() {
    let server = PythonServer::start(TOKEN, true).await;
    let client = connect(&server, TOKEN).await.expect("connected");
    assert_eq!(client.server_name().as_deref(), Some("bearer-test"));
    assert!(!format!("{client:?}").contains(TOKEN), "Debug of the client shows the token");

    let tools = client.list_tools().await.expect("listed");
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["add", "echo", "sleep", "big", "grow"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let add = tools.iter().find(|t| t.name == "add").expect("add");
    assert_eq!(add.input_schema["type"], "object");
    assert_eq!(add.input_schema["properties"]["a"]["type"], "integer");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    assert_eq!(add.description.as_deref(), Some("Adds two integers."));

    let out = client.call_tool("add", json!({"a": 2, "b": 40}), Duration::from_secs(10)).await.expect("called");
    assert!(!out.is_error);
    assert_eq!(out.content, vec![Content::Text("42".into())]);
    assert_eq!(server.calls(), vec![json!({"tool": "add", "arguments": {"a": 2, "b": 40}})]);
    client.close().await;
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized_and_reaches_no_tool() {
    for challenge in [true, false] {
        let server = PythonServer::start(TOKEN, challenge).await;
        let wrong = format!("{TOKEN}-wrong");
        let err = connect(&server, &wrong).await.expect_err("refused");
        assert_eq!(err, McpError::Unauthorized { status: 401 }, "challenge={challenge}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(&wrong), "the token leaked: {shown}");
        assert!(server.calls().is_empty());
    }
}

#[tokio::test]
async fn a_closed_port_is_a_connection_failure() {
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let err = McpClient::connect_http(http(), &url, Some(BearerToken::new(TOKEN)), Limits::default())
        .await
        .expect_err("nothing listens");
    assert!(matches!(&err, McpError::Connection(m) if m.contains("onnect")), "{err:?}");
    assert_no_token(&err);
}

#[tokio::test]
async fn a_resolver_that_refuses_the_address_is_a_connection_failure() {
    /// Stands for the gateway's SSRF resolver: every name resolves to nothing allowed.
    struct Refuse;
    impl reqwest::dns::Resolve for Refuse {
        fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
            Box::pin(async { Err("target is a non-public address".into()) })
        }
    }
    let http = reqwest::Client::builder().dns_resolver(std::sync::Arc::new(Refuse)).build().expect("client");
    let err = McpClient::connect_http(http, "http://mcp.internal.example/mcp", None, Limits::default())
        .await
        .expect_err("refused by the resolver");
    assert!(matches!(&err, McpError::Connection(m) if m.contains("non-public")), "{err:?}");
}

#[tokio::test]
async fn a_hung_tool_costs_only_its_call() {
    let server = PythonServer::start(TOKEN, true).await;
    let client = connect(&server, TOKEN).await.expect("connected");
    let started = Instant::now();
    let err =
        client.call_tool("sleep", json!({"seconds": 30}), Duration::from_millis(700)).await.expect_err("timed out");
    let took = started.elapsed();
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(5), "took {took:?}");
    assert_no_token(&err);
    // The connection is still usable.
    let out = client.call_tool("echo", json!({"text": "still here"}), Duration::from_secs(10)).await.expect("called");
    assert_eq!(out.content, vec![Content::Text("still here".into())]);
}

#[tokio::test]
async fn an_oversized_result_is_cut() {
    let server = PythonServer::start(TOKEN, true).await;
    let limits = Limits { max_result_bytes: 4096, ..Limits::default() };
    let client =
        McpClient::connect_http(http(), &server.url(), Some(BearerToken::new(TOKEN)), limits).await.expect("connected");
    let out = client.call_tool("big", json!({"size": 100_000}), Duration::from_secs(10)).await.expect("called");
    assert!(out.truncated);
    assert_eq!(out.content[0], Content::Text("x".repeat(4096)));
    assert!(matches!(out.content.last(), Some(Content::Text(m)) if m.contains("of 100000 bytes")));
}

#[tokio::test]
async fn a_tool_list_change_is_signalled() {
    let server = PythonServer::start(TOKEN, true).await;
    let client = connect(&server, TOKEN).await.expect("connected");
    let before = client.list_tools().await.expect("listed");
    assert!(!before.iter().any(|t| t.name == "late"));
    client.call_tool("grow", json!({"name": "late"}), Duration::from_secs(10)).await.expect("grown");
    tokio::time::timeout(Duration::from_secs(10), client.tools_changed_signal()).await.expect("change announced");
    let after = client.list_tools().await.expect("listed again");
    assert!(after.iter().any(|t| t.name == "late"), "{after:?}");
    assert!(!client.tools_changed());
}

#[tokio::test]
async fn a_server_without_streamable_http_is_a_connection_failure_that_says_so() {
    let server = PythonServer::start(TOKEN, true).await;
    let url = format!("http://127.0.0.1:{}/sse-only", server.port);
    let err =
        McpClient::connect_http(http(), &url, Some(BearerToken::new(TOKEN)), Limits::default()).await.expect_err("404");
    assert!(
        matches!(&err, McpError::Connection(m) if m.contains("HTTP 404") && m.contains("legacy HTTP+SSE")),
        "{err:?}"
    );
    assert_no_token(&err);
}

#[tokio::test]
async fn a_silent_server_times_out_the_handshake() {
    // The kernel completes TCP connections to a listening socket nobody accepts from: the
    // request is sent and never answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let limits = Limits { handshake_timeout: Duration::from_millis(600), ..Limits::default() };
    let started = Instant::now();
    let err = McpClient::connect_http(http(), &url, Some(BearerToken::new(TOKEN)), limits).await.expect_err("silent");
    assert!(matches!(err, McpError::Timeout { operation: "the handshake", .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(listener);
}

#[tokio::test]
async fn a_token_revoked_mid_session_is_unauthorized() {
    let server = PythonServer::start(TOKEN, true).await;
    let client = connect(&server, TOKEN).await.expect("connected");
    client.call_tool("revoke", json!({}), Duration::from_secs(10)).await.expect("revoked");
    let err = client.call_tool("add", json!({"a": 1, "b": 2}), Duration::from_secs(10)).await.expect_err("refused");
    assert_eq!(err, McpError::Unauthorized { status: 401 });
    assert_eq!(server.calls().len(), 1, "only revoke reached a tool: {:?}", server.calls());
}
