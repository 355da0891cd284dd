//! An agent's MCP servers as a tool source of the native loop (DESIGN §2 "Tool source"). Each
//! run of a turn connects to the servers the agent's MCP toolsets name, with the credential the
//! session's vaults hold for each (`gateway_core::vault::credential_for`), lists their tools and
//! offers them to the model beside the built-ins, under the names `gateway_mcp::OfferedNames`
//! gives. A server that cannot be reached, or refuses the credential, costs only its own tools:
//! the run commits a session error naming it, tells the model, and goes on (the next turn tries
//! again). An agent without MCP toolsets touches none of this: no vault read, no connection.
//!
//! Calls are journaled before they are sent, like every tool call (invariant 5): a run that
//! loses its claim after that reports the call indeterminate and never sends it again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::{AgentSpec, BUILTIN_TOOLS, McpServerSpec, ToolSpec};
use gateway_core::content::{ContentBlock, MediaSource};
use gateway_core::event::{ErrorKind, EventPayload, NewEvent, RetryStatus};
use gateway_core::{JsonObject, VaultId};
use gateway_mcp::{BearerToken, Content, Limits, McpClient, McpError, OfferedNames};
use gateway_models::ToolDefinition;
use gateway_services::ssrf;
use gateway_services::vaults::VaultService;

/// `[mcp]`: how agents' MCP servers are reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct McpConfig {
    /// Lets agents' MCP servers be on private and loopback addresses (the operator's own
    /// servers). Off: public addresses only, checked when the URL is read and again for every
    /// address a name resolves to.
    pub allow_private_servers: bool,
    /// Deadline of one tool call; a server that hangs costs its call, not the turn.
    pub call_timeout_secs: u64,
    /// Deadline of connecting to a server and listing its tools.
    pub connect_timeout_secs: u64,
    /// Most tools one server may offer.
    pub max_tools_per_server: usize,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            allow_private_servers: false,
            call_timeout_secs: 120,
            connect_timeout_secs: 30,
            max_tools_per_server: 256,
        }
    }
}

/// What the native backend needs to reach MCP servers: an HTTP client held to the SSRF rule,
/// the session's vault credentials, and the bounds.
pub struct McpAccess {
    vaults: Arc<VaultService>,
    http: reqwest::Client,
    allow_private: bool,
    limits: Limits,
    call_timeout: Duration,
}

impl McpAccess {
    /// `max_result_bytes`: the output cap built-in tools have, applied to MCP results too.
    pub fn new(config: &McpConfig, vaults: Arc<VaultService>, max_result_bytes: usize) -> Self {
        let connect = Duration::from_secs(config.connect_timeout_secs.max(1));
        let call_timeout = Duration::from_secs(config.call_timeout_secs.max(1));
        let limits = Limits {
            max_tools: config.max_tools_per_server,
            max_result_bytes,
            handshake_timeout: connect,
            list_timeout: connect,
            ..Limits::default()
        };
        Self {
            vaults,
            http: ssrf::client(config.allow_private_servers, call_timeout + connect),
            allow_private: config.allow_private_servers,
            limits,
            call_timeout,
        }
    }
}

/// One server this run reached, with its tools.
struct Server {
    name: String,
    client: McpClient,
    tools: Vec<gateway_mcp::ToolSpec>,
}

/// The MCP tools of one run.
pub(crate) struct McpTools {
    servers: Vec<Server>,
    names: OfferedNames,
    /// Servers this run could not use, and why (said to the model).
    unavailable: Vec<(String, String)>,
    call_timeout: Duration,
}

/// A connection failure as the session error it is committed as.
fn failure_event(server: &str, e: &McpError) -> NewEvent {
    let kind = match e {
        McpError::Unauthorized { .. } => ErrorKind::McpAuthenticationFailed,
        _ => ErrorKind::McpConnectionFailed,
    };
    NewEvent::new(EventPayload::SessionError {
        kind,
        message: format!("MCP server {server:?}: {e}"),
        // The turn goes on without the server; the next turn connects (and authenticates) again.
        retry: RetryStatus::Retrying,
        server: Some(server.to_owned()),
    })
}

impl McpTools {
    /// Connects to every server the agent's toolsets name (at once, each within the connect
    /// deadline). Returns the tools and the session errors of the servers that failed.
    pub(crate) async fn connect(access: &McpAccess, agent: &AgentSpec, vault_ids: &[VaultId]) -> (Self, Vec<NewEvent>) {
        let wanted = agent.mcp_servers_in_use();
        let credentials = if vault_ids.is_empty() {
            None
        } else {
            match access.vaults.session_credentials(vault_ids).await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the session's vaults; MCP servers are called without credentials");
                    None
                }
            }
        };
        let credentials = &credentials;
        let attempts = wanted.iter().map(|spec| async move {
            let token = match credentials {
                Some(c) => match c.for_server(access.vaults.secrets(), &spec.url) {
                    Ok(found) => found.map(|(_, secret)| BearerToken::new(secret.token.0)),
                    Err(e) => {
                        tracing::warn!(server = %spec.name, error = %e, "a vault credential cannot be opened");
                        None
                    }
                },
                None => None,
            };
            (spec, connect_one(access, spec, token).await)
        });
        let results = futures::future::join_all(attempts).await;
        let (mut servers, mut unavailable, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for (spec, result) in results {
            match result {
                Ok((client, tools)) => servers.push(Server { name: spec.name.clone(), client, tools }),
                Err(e) => {
                    tracing::info!(server = %spec.name, error = %e, "MCP server unavailable for this run");
                    errors.push(failure_event(&spec.name, &e));
                    unavailable.push((spec.name.clone(), e.to_string()));
                }
            }
        }
        let reserved: BTreeSet<String> = BUILTIN_TOOLS
            .iter()
            .map(|n| (*n).to_owned())
            .chain(agent.tools.iter().filter_map(|t| match t {
                ToolSpec::Custom { name, .. } => Some(name.clone()),
                _ => None,
            }))
            .collect();
        let names = OfferedNames::new(
            servers.iter().map(|s| (s.name.as_str(), s.tools.iter().map(|t| t.name.as_str()))),
            &reserved,
        );
        (Self { servers, names, unavailable, call_timeout: access.call_timeout }, errors)
    }

    /// This process reaches no MCP server (no `McpAccess`): every server the agent uses is
    /// reported unavailable, never silently left out.
    pub(crate) fn not_configured(agent: &AgentSpec) -> (Self, Vec<NewEvent>) {
        let why = McpError::Connection("this gateway process has no MCP client configured".into());
        let servers = agent.mcp_servers_in_use();
        let errors = servers.iter().map(|s| failure_event(&s.name, &why)).collect();
        let unavailable = servers.iter().map(|s| (s.name.clone(), why.to_string())).collect();
        let tools =
            Self { servers: Vec::new(), names: OfferedNames::default(), unavailable, call_timeout: Duration::ZERO };
        (tools, errors)
    }

    /// The tools offered to the model: every tool of a reached server its toolset enables.
    pub(crate) fn definitions(&self, agent: &AgentSpec) -> Vec<ToolDefinition> {
        let mut out = Vec::new();
        for s in &self.servers {
            for t in &s.tools {
                if matches!(agent.mcp_tool(&s.name, &t.name), gateway_core::agent::ToolAvailability::Disabled) {
                    continue;
                }
                let Some(offered) = self.names.offered(&s.name, &t.name) else { continue };
                out.push(ToolDefinition {
                    name: offered.to_owned(),
                    description: t.description.clone().unwrap_or_default(),
                    input_schema: t.input_schema.as_object().cloned().unwrap_or_default(),
                });
            }
        }
        out
    }

    /// The (server, tool) an offered name (or `<server>/<tool>`) stands for.
    pub(crate) fn resolve(&self, name: &str) -> Option<(String, String)> {
        self.names.resolve(name).map(|(s, t)| (s.to_owned(), t.to_owned()))
    }

    /// The name a tool of a server was offered under (for replaying the conversation).
    pub(crate) fn offered(&self, server: &str, tool: &str) -> Option<&str> {
        self.names.offered(server, tool)
    }

    /// What the model is told about the servers this run could not use.
    pub(crate) fn note(&self) -> Option<String> {
        if self.unavailable.is_empty() {
            return None;
        }
        let lines: Vec<String> = self.unavailable.iter().map(|(s, why)| format!("- {s}: {why}")).collect();
        Some(format!(
            "These MCP servers are unavailable for now, so their tools are not offered:\n{}",
            lines.join("\n")
        ))
    }

    /// Calls a tool; every failure is a tool result the model reads (`is_error`).
    pub(crate) async fn call(&self, server: &str, tool: &str, input: &JsonObject) -> (Vec<ContentBlock>, bool) {
        let Some(s) = self.servers.iter().find(|s| s.name == server) else {
            return (vec![ContentBlock::text(format!("MCP server {server:?} is unavailable in this turn"))], true);
        };
        match s.client.call_tool(tool, serde_json::Value::Object(input.clone()), self.call_timeout).await {
            Ok(out) => (out.content.into_iter().map(block).collect(), out.is_error),
            Err(e) => {
                (vec![ContentBlock::text(format!("the call to {tool} on MCP server {server:?} failed: {e}"))], true)
            }
        }
    }
}

async fn connect_one(
    access: &McpAccess,
    spec: &McpServerSpec,
    token: Option<BearerToken>,
) -> Result<(McpClient, Vec<gateway_mcp::ToolSpec>), McpError> {
    ssrf::check_url(&spec.url, access.allow_private).map_err(|e| {
        McpError::Connection(format!("{e} (an operator allows private servers with mcp.allow_private_servers)"))
    })?;
    let client = McpClient::connect_http(access.http.clone(), &spec.url, token, access.limits.clone()).await?;
    let tools = client.list_tools().await?;
    Ok((client, tools))
}

/// An MCP content block as the log keeps it.
fn block(c: Content) -> ContentBlock {
    match c {
        Content::Text(text) => ContentBlock::text(text),
        Content::Image { mime_type, data } => {
            ContentBlock::Image { source: MediaSource::Base64 { media_type: mime_type, data } }
        }
        Content::Other(v) => ContentBlock::Data { data: v },
    }
}
