//! The client's bounds against rmcp's own server side, in process over a pipe: pagination is
//! followed, too many tools or pages fail with `TooLarge`, oversized results are cut visibly, an
//! oversized message costs only its call, and `tools/list_changed` is recorded.

use std::sync::Arc;
use std::time::Duration;

use gateway_mcp::{Content, Limits, McpClient, McpError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

/// A server with `pages` pages of `per_page` tools (`endless`: every page hands out another
/// cursor), whose `big` tool answers `result_bytes` of text and whose `grow` tool announces a
/// tool-list change.
#[derive(Clone)]
struct Server {
    pages: usize,
    per_page: usize,
    endless: bool,
    result_bytes: usize,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let page: usize = request.and_then(|r| r.cursor).map_or(0, |c| c.parse().unwrap_or(0));
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let serde_json::Value::Object(schema) = schema else { unreachable!() };
        let schema = Arc::new(schema);
        let tools = if self.endless {
            Vec::new()
        } else {
            (0..self.per_page).map(|i| Tool::new(format!("t{page}_{i}"), "a tool", schema.clone())).collect()
        };
        let mut result = ListToolsResult::with_all_items(tools);
        if self.endless || page + 1 < self.pages {
            result.next_cursor = Some((page + 1).to_string());
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "big" => Ok(CallToolResult::success(vec![ContentBlock::text("y".repeat(self.result_bytes))]).into()),
            "grow" => {
                context
                    .peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                Ok(CallToolResult::success(vec![ContentBlock::text("grown")]).into())
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// Serves `server` on one end of a pipe and connects a client to the other.
async fn connect(server: Server, limits: Limits) -> (McpClient, tokio::task::JoinHandle<()>) {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(server_io)).await {
            let _ = running.waiting().await;
        }
    });
    let (read, write) = tokio::io::split(client_io);
    let client = McpClient::connect_stdio(read, write, limits).await.expect("handshake");
    (client, task)
}

fn server() -> Server {
    Server { pages: 3, per_page: 5, endless: false, result_bytes: 10 }
}

#[tokio::test]
async fn pagination_is_followed_in_order() {
    let (client, task) = connect(server(), Limits::default()).await;
    let tools = client.list_tools().await.expect("listed");
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 15);
    assert_eq!(names[0], "t0_0");
    assert_eq!(names[14], "t2_4");
    assert_eq!(tools[0].input_schema["properties"]["n"]["type"], "integer");
    client.close().await;
    task.abort();
}

#[tokio::test]
async fn too_many_tools_fail_the_listing() {
    let (client, task) = connect(Server { pages: 3, per_page: 200, ..server() }, Limits::default()).await;
    let err = client.list_tools().await.expect_err("600 tools are over 512");
    assert!(matches!(&err, McpError::TooLarge(m) if m.contains("512")), "{err:?}");
    task.abort();
}

#[tokio::test]
async fn endless_cursors_are_cut_off() {
    let limits = Limits { max_pages: 10, ..Limits::default() };
    let (client, task) = connect(Server { endless: true, ..server() }, limits).await;
    let err = client.list_tools().await.expect_err("cursors forever");
    assert!(matches!(&err, McpError::TooLarge(m) if m.contains("10 pages")), "{err:?}");
    task.abort();
}

#[tokio::test]
async fn an_oversized_result_is_cut_with_a_marker() {
    let limits = Limits { max_result_bytes: 1000, ..Limits::default() };
    let (client, task) = connect(Server { result_bytes: 200_000, ..server() }, limits).await;
    let out = client.call_tool("big", json!({}), Duration::from_secs(10)).await.expect("called");
    assert!(out.truncated);
    assert_eq!(out.content.len(), 2);
    assert_eq!(out.content[0], Content::Text("y".repeat(1000)));
    assert!(
        matches!(&out.content[1], Content::Text(m) if m.contains("kept 1000 of 200000 bytes")),
        "{:?}",
        out.content[1]
    );
    task.abort();
}

#[tokio::test]
async fn an_oversized_message_costs_only_its_call() {
    let limits = Limits { max_message_bytes: 50_000, ..Limits::default() };
    let (client, task) = connect(Server { result_bytes: 100_000, ..server() }, limits).await;
    let err = client.call_tool("big", json!({}), Duration::from_millis(500)).await.expect_err("line dropped");
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    // The connection survives: the next call is answered.
    assert_eq!(client.list_tools().await.expect("still connected").len(), 15);
    task.abort();
}

#[tokio::test]
async fn a_server_error_is_a_rejection() {
    let (client, task) = connect(server(), Limits::default()).await;
    let err = client.call_tool("missing", json!({}), Duration::from_secs(5)).await.expect_err("no such tool");
    assert!(matches!(&err, McpError::Rejected { message, .. } if message.contains("no tool missing")), "{err:?}");
    let err = client.call_tool("big", json!([1]), Duration::from_secs(5)).await.expect_err("arguments not an object");
    assert!(matches!(err, McpError::BadArguments(_)), "{err:?}");
    task.abort();
}

#[tokio::test]
async fn list_changed_is_recorded_until_the_next_listing() {
    let (client, task) = connect(server(), Limits::default()).await;
    client.list_tools().await.expect("listed");
    assert!(!client.tools_changed());
    client.call_tool("grow", json!({}), Duration::from_secs(5)).await.expect("called");
    tokio::time::timeout(Duration::from_secs(5), client.tools_changed_signal()).await.expect("change announced");
    assert!(client.tools_changed());
    client.list_tools().await.expect("listed again");
    assert!(!client.tools_changed());
    task.abort();
}

#[tokio::test]
async fn dropping_the_client_ends_the_connection() {
    let (client, task) = connect(server(), Limits::default()).await;
    client.list_tools().await.expect("listed");
    drop(client);
    // The server's session ends only when the client's side of the pipe is gone, which happens
    // only when the tasks rmcp spawned for the client have stopped.
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("server saw the end").expect("joined");
}
