//! One connection to one MCP server.
//!
//! The connection is opened over Streamable HTTP (a URL, a reqwest client the caller built, e.g.
//! the SSRF-guarded `gateway_services::ssrf::client`, and an optional bearer token) or over a pair
//! of pipes (the stdin/stdout of a process the caller spawned, e.g. inside a sandbox: this crate
//! never spawns processes). Both speak through rmcp's client; what leaves this module is neutral
//! ([`ToolSpec`], [`ToolOutput`], [`McpError`]).
//!
//! The legacy HTTP+SSE transport (protocol 2024-11-05) is not offered: rmcp 3.11 ships no client
//! for it. A server that answers the Streamable HTTP handshake with 404 or 405 fails with
//! [`McpError::Connection`] saying so.
//!
//! Ownership: rmcp runs the connection on tasks tied to a cancellation guard inside the
//! `RunningService` this type owns; dropping an [`McpClient`] cancels them (and with them the
//! HTTP worker or the pipe reader). [`McpClient::close`] does the same and waits for them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

use crate::content::{ToolOutput, bounded_output};
use crate::error::{self, McpError};
use crate::limits::Limits;
use crate::secret::BearerToken;
use crate::tools::{Listing, ToolSpec};

/// A live connection to one MCP server. Calls may run concurrently (`&self`).
pub struct McpClient {
    service: RunningService<RoleClient, Handler>,
    changes: Arc<ToolChanges>,
    /// The change generation the last complete listing saw.
    listed: AtomicU64,
    limits: Limits,
    token: Option<BearerToken>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.server_name())
            .field("token", &self.token)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Connects over Streamable HTTP and completes the handshake within
    /// [`Limits::handshake_timeout`]. `http` decides where the connection may go (pass the
    /// SSRF-guarded client for URLs users name); `token`, when given, is sent as
    /// `Authorization: Bearer` on every request.
    ///
    /// A resolver only sees names: a URL with a literal address (`http://10.0.0.5/mcp`) never
    /// reaches it, so a caller guarding against SSRF checks the URL first
    /// (`gateway_services::ssrf::check_url`) and passes the guarded client for the names.
    pub async fn connect_http(
        http: reqwest::Client,
        url: &str,
        token: Option<BearerToken>,
        limits: Limits,
    ) -> Result<Self, McpError> {
        Self::connect_http_with_headers(http, url, token, &[], limits).await
    }

    /// [`Self::connect_http`], sending `headers` too on every request (an editor's server
    /// configuration). An `Authorization: Bearer` header is taken as the token, so it is kept
    /// out of messages like one; other header values are sent as given. A name or value that
    /// HTTP cannot carry fails with [`McpError::BadArguments`] naming the header.
    pub async fn connect_http_with_headers(
        http: reqwest::Client,
        url: &str,
        mut token: Option<BearerToken>,
        headers: &[(String, String)],
        limits: Limits,
    ) -> Result<Self, McpError> {
        let mut custom = std::collections::HashMap::new();
        for (name, value) in headers {
            if name.eq_ignore_ascii_case("authorization")
                && let Some(bearer) = value.strip_prefix("Bearer ")
            {
                token = Some(BearerToken::new(bearer.trim()));
                continue;
            }
            let bad = || McpError::BadArguments(format!("header {name:?} cannot be sent"));
            let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value = http::HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            custom.insert(name, value);
        }
        let parsed =
            reqwest::Url::parse(url).map_err(|_| McpError::Connection("the server URL is not a URL".into()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(McpError::Connection("the server URL must be http or https".into()));
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(url)
            .max_json_response_size(limits.max_message_bytes)
            .max_sse_event_size(limits.max_message_bytes)
            .max_error_response_size(4096);
        if let Some(token) = &token {
            config = config.auth_header(token.expose());
        }
        if !custom.is_empty() {
            config = config.custom_headers(custom);
        }
        let transport = StreamableHttpClientTransport::with_client(http, config);
        Self::start(transport, token, limits).await
    }

    /// Connects over a pair of pipes (newline-delimited JSON-RPC, the MCP stdio transport):
    /// `read` carries the server's stdout, `write` its stdin. A line over
    /// [`Limits::max_message_bytes`] is dropped unread (the request it answered then times out).
    pub async fn connect_stdio<R, W>(read: R, write: W, limits: Limits) -> Result<Self, McpError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let transport = AsyncRwTransport::new_client(read, write).with_max_line_length(limits.max_message_bytes);
        Self::start(transport, None, limits).await
    }

    async fn start<T, E, A>(transport: T, token: Option<BearerToken>, limits: Limits) -> Result<Self, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let changes = Arc::new(ToolChanges::default());
        let handler = Handler { changes: changes.clone() };
        let service = match tokio::time::timeout(limits.handshake_timeout, handler.serve(transport)).await {
            Err(_) => return Err(McpError::Timeout { operation: "the handshake", timeout: limits.handshake_timeout }),
            Ok(Err(e)) => return Err(error::from_init(e, token.as_ref())),
            Ok(Ok(service)) => service,
        };
        Ok(Self { service, changes, listed: AtomicU64::new(0), limits, token })
    }

    /// The name the server gave itself in the handshake, if any.
    pub fn server_name(&self) -> Option<String> {
        let info = self.service.peer().peer_info()?;
        info.server_info.as_ref().map(|i| i.name.clone())
    }

    /// Every tool the server offers, following pagination, within [`Limits`]: more than
    /// `max_tools` tools or `max_schema_bytes` of schemas fail with [`McpError::TooLarge`]; each
    /// page must arrive within `list_timeout`. Clears [`Self::tools_changed`] for the changes
    /// announced before the listing started.
    pub async fn list_tools(&self) -> Result<Vec<ToolSpec>, McpError> {
        let generation = self.changes.generation.load(Ordering::Acquire);
        let mut listing = Listing::new(&self.limits);
        let mut cursor: Option<String> = None;
        for _ in 0..self.limits.max_pages {
            let params = cursor.take().map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = tokio::time::timeout(self.limits.list_timeout, self.service.peer().list_tools(params))
                .await
                .map_err(|_| McpError::Timeout { operation: "tools/list", timeout: self.limits.list_timeout })?
                .map_err(|e| error::from_service(e, self.token.as_ref()))?;
            listing.add_page(page.tools)?;
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => {
                    self.listed.store(generation, Ordering::Release);
                    return Ok(listing.finish());
                }
            }
        }
        Err(McpError::TooLarge(format!("the tool list runs past {} pages", self.limits.max_pages)))
    }

    /// Whether the server announced a change of its tools (`notifications/tools/list_changed`)
    /// since the last complete [`Self::list_tools`].
    pub fn tools_changed(&self) -> bool {
        self.changes.generation.load(Ordering::Acquire) != self.listed.load(Ordering::Acquire)
    }

    /// Waits until [`Self::tools_changed`] is true.
    pub async fn tools_changed_signal(&self) {
        loop {
            let notified = self.changes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.tools_changed() {
                return;
            }
            notified.await;
        }
    }

    /// Calls a tool. `arguments` must be a JSON object (or null for none). The call is abandoned
    /// after `timeout` (the server is told it was cancelled), costing only this call. The result
    /// keeps at most [`Limits::max_result_bytes`] of content, cut with a visible marker.
    pub async fn call_tool(&self, name: &str, arguments: Value, timeout: Duration) -> Result<ToolOutput, McpError> {
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return Err(McpError::BadArguments("tool arguments must be a JSON object".into())),
        };
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        let result = tokio::time::timeout(timeout, self.service.peer().call_tool(params))
            .await
            .map_err(|_| McpError::Timeout { operation: "the tool call", timeout })?
            .map_err(|e| error::from_service(e, self.token.as_ref()))?;
        Ok(bounded_output(result, self.limits.max_result_bytes))
    }

    /// Ends the connection and waits for its tasks to stop.
    pub async fn close(mut self) {
        if let Err(e) = self.service.close().await {
            tracing::warn!(error = %e, "MCP connection task ended abnormally");
        }
    }
}

/// Records tool-list changes announced by the server.
#[derive(Debug, Default)]
struct ToolChanges {
    generation: AtomicU64,
    notify: Notify,
}

/// The client side rmcp drives: no sampling, roots or elicitation offered; it only listens for
/// tool-list changes.
struct Handler {
    changes: Arc<ToolChanges>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.generation.fetch_add(1, Ordering::AcqRel);
        self.changes.notify.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("gateway", env!("CARGO_PKG_VERSION")))
    }
}
