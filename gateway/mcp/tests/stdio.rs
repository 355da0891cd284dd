//! The client over a spawned process's pipes against the npm reference server
//! `@modelcontextprotocol/server-everything@2026.8.31` (stdio transport).

mod common;

use std::time::Duration;

use gateway_mcp::{Content, Limits, McpClient};
use serde_json::json;

#[tokio::test]
async fn everything_server_over_pipes() {
    let mut child = common::spawn_everything();
    let stdout = child.stdout.take().expect("piped stdout");
    let stdin = child.stdin.take().expect("piped stdin");
    let client = McpClient::connect_stdio(stdout, stdin, Limits::default()).await.expect("handshake");
    assert_eq!(client.server_name().as_deref(), Some("mcp-servers/everything"));

    // Once initialized, the server registers its capability-dependent tools (here only
    // `simulate-research-query`: this client offers no roots, sampling or elicitation) and
    // announces them with notifications/tools/list_changed.
    tokio::time::timeout(Duration::from_secs(10), client.tools_changed_signal())
        .await
        .expect("server-everything announces its late tools");
    assert!(client.tools_changed());

    let tools = client.list_tools().await.expect("listed");
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(!client.tools_changed(), "the listing took the announced change into account");
    for expected in ["echo", "get-sum", "get-tiny-image", "simulate-research-query"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    assert_eq!(echo.input_schema["type"], "object");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");

    let out = client.call_tool("echo", json!({"message": "hi there"}), Duration::from_secs(10)).await.expect("echo");
    assert!(!out.is_error);
    assert_eq!(out.content, vec![Content::Text("Echo: hi there".into())]);

    let out = client.call_tool("get-tiny-image", json!({}), Duration::from_secs(10)).await.expect("image");
    let image = out.content.iter().find_map(|c| match c {
        Content::Image { mime_type, data } => Some((mime_type, data)),
        _ => None,
    });
    let (mime_type, data) = image.expect("an image block");
    assert_eq!(mime_type, "image/png");
    assert!(data.starts_with("iVBOR"), "base64 of a PNG: {}", &data[..16.min(data.len())]);

    client.close().await;
    let _ = child.kill().await;
}
