//! An agent's MCP servers as a tool source of the native loop (DESIGN §2 "Tool source"). Each
//! run of a turn connects to the servers the agent's MCP toolsets name, with the credential the
//! session's vaults hold for each (`gateway_core::vault::credential_for`), lists their tools and
//! offers them to the model beside the built-ins, under the names `gateway_mcp::OfferedNames`
//! gives. A server that cannot be reached, or refuses the credential, costs only its own tools:
//! the run commits a session error naming it, tells the model, and goes on (the next turn tries
//! again). An agent without MCP toolsets touches none of this: no vault read, no connection.
//!
//! The session's client (an editor) may bring servers too (`SessionSnapshot::client_tool_servers`):
//! a command started in the session's sandbox, or a URL. They share the agent's servers' one
//! namespace, and their tools always ask (the client's user approves each call).
//!
//! Calls are journaled before they are sent, like every tool call (invariant 5): a run that
//! loses its claim after that reports the call indeterminate and never sends it again.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::JsonObject;
use gateway_core::agent::{AgentSpec, BUILTIN_TOOLS, McpServerSpec, PermissionPolicy, ToolAvailability, ToolSpec};
use gateway_core::content::{ContentBlock, MediaSource};
use gateway_core::event::{ErrorKind, EventPayload, NewEvent, RetryStatus};
use gateway_core::session::{ClientToolServer, Secret, SessionSnapshot};
use gateway_core::vault::{Credential, CredentialAuth, CredentialSecret};
use gateway_mcp::{BearerToken, Content, Limits, McpClient, McpError, OfferedNames};
use gateway_models::ToolDefinition;
use gateway_runtime::environment::Environments;
use gateway_sandbox::Hand;
use gateway_services::ssrf;
use gateway_services::vaults::{ProbeOutcome, ServerProbe, VaultError, VaultService};

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
    /// The servers clients carry over their own connections (an editor relay's).
    on_client: Option<Arc<dyn gateway_mcp::ClientChannels>>,
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
            on_client: None,
        }
    }

    /// Reaches the servers clients carry over their connections through `channels`.
    pub fn with_client_channels(mut self, channels: Arc<dyn gateway_mcp::ClientChannels>) -> Self {
        self.on_client = Some(channels);
        self
    }
}

/// A credential's check (`VaultService::validate`): the handshake and the tool listing a turn
/// would make, under the same SSRF rule and deadlines.
#[async_trait::async_trait]
impl ServerProbe for McpAccess {
    async fn probe(&self, url: &str, token: &str) -> ProbeOutcome {
        match connect_url(self, url, Some(BearerToken::new(token)), &[]).await {
            Ok(_) => ProbeOutcome::Accepted,
            Err(McpError::Unauthorized { status }) => ProbeOutcome::Refused { status },
            Err(e) => ProbeOutcome::Failed { message: e.to_string() },
        }
    }
}

/// One server this run reached, with its tools.
struct Server {
    name: String,
    /// Brought by the session's client (an editor), not declared by the agent.
    from_client: bool,
    client: McpClient,
    tools: Vec<gateway_mcp::ToolSpec>,
    /// A command server's process (in the session's sandbox), stopped when the run ends.
    _process: Option<tokio::process::Child>,
}

/// Where a connection goes: an agent's server, or one the session's client brought.
enum Target<'a> {
    Agent(&'a McpServerSpec),
    Client(&'a ClientToolServer),
}

impl Target<'_> {
    fn name(&self) -> &str {
        match self {
            Target::Agent(s) => &s.name,
            Target::Client(s) => s.name(),
        }
    }
}

/// What connecting to a client's servers needs from the run: the session's Hand (a command
/// runs in its sandbox) and the key that opens their sealed values.
pub(crate) struct ClientSide<'a> {
    pub hand: Option<Arc<Hand>>,
    pub environments: Option<&'a Environments>,
    /// The session, whose client carries its `OnClient` servers.
    pub session: &'a str,
}

/// The MCP tools of one run.
pub(crate) struct McpTools {
    servers: Vec<Server>,
    names: OfferedNames,
    /// The names MCP tools may not be offered under (built-in and custom tools).
    reserved: BTreeSet<String>,
    /// Servers this run could not use, and why (said to the model).
    unavailable: Vec<(String, String)>,
    call_timeout: Duration,
}

/// Why a server cannot be used this run.
#[derive(Debug)]
enum Failure {
    Mcp(McpError),
    /// The credential's OAuth token could not be refreshed.
    Refresh(VaultError),
}

impl From<McpError> for Failure {
    fn from(e: McpError) -> Self {
        Failure::Mcp(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Mcp(e) => e.fmt(f),
            Failure::Refresh(e) => write!(f, "the credential could not be refreshed: {e}"),
        }
    }
}

/// A connection failure as the session error it is committed as.
fn failure_event(server: &str, e: &Failure) -> NewEvent {
    let kind = match e {
        Failure::Mcp(McpError::Unauthorized { .. }) | Failure::Refresh(_) => ErrorKind::McpAuthenticationFailed,
        Failure::Mcp(_) => ErrorKind::McpConnectionFailed,
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
    pub(crate) async fn connect(
        access: &McpAccess,
        agent: &AgentSpec,
        snapshot: &SessionSnapshot,
        side: ClientSide<'_>,
    ) -> (Self, Vec<NewEvent>) {
        let vault_ids = &snapshot.vault_ids;
        let wanted: Vec<Target> = agent
            .mcp_servers_in_use()
            .into_iter()
            .map(Target::Agent)
            .chain(snapshot.client_tool_servers.iter().map(Target::Client))
            .collect();
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
        let (credentials, side) = (&credentials, &side);
        let attempts = wanted.iter().map(|target| async move {
            let result = match target {
                Target::Agent(spec) => {
                    let found = match credentials {
                        Some(c) => match c.for_server(access.vaults.secrets(), &spec.url) {
                            Ok(found) => found,
                            Err(e) => {
                                tracing::warn!(server = %spec.name, error = %e, "a vault credential cannot be opened");
                                None
                            }
                        },
                        None => None,
                    };
                    connect_agent_server(access, spec, found).await
                }
                Target::Client(server) => connect_client(access, server, side).await,
            };
            (target, result)
        });
        let results = futures::future::join_all(attempts).await;
        let (mut servers, mut unavailable, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for (target, result) in results {
            let name = target.name().to_owned();
            match result {
                Ok((client, tools, process)) => servers.push(Server {
                    name,
                    from_client: matches!(target, Target::Client(_)),
                    client,
                    tools,
                    _process: process,
                }),
                Err(e) => {
                    tracing::info!(server = %name, error = %e, "MCP server unavailable for this run");
                    errors.push(failure_event(&name, &e));
                    unavailable.push((name, e.to_string()));
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
        let mut tools =
            Self { servers, names: OfferedNames::default(), reserved, unavailable, call_timeout: access.call_timeout };
        tools.name_tools();
        (tools, errors)
    }

    fn name_tools(&mut self) {
        self.names = OfferedNames::new(
            self.servers.iter().map(|s| (s.name.as_str(), s.tools.iter().map(|t| t.name.as_str()))),
            &self.reserved,
        );
    }

    /// Lists again the tools of every server that announced a change
    /// (`notifications/tools/list_changed`) since its last listing, so the next model request
    /// offers what the servers offer now; a tool a server adds mid-turn is then offered under
    /// its toolset's policy (an MCP toolset asks by default). A listing that fails keeps the
    /// tools listed before: their calls get the server's own answer.
    pub(crate) async fn refresh_changed(&mut self) {
        let relists = self.servers.iter_mut().filter(|s| s.client.tools_changed()).map(|s| async move {
            match s.client.list_tools().await {
                Ok(tools) => {
                    tracing::info!(server = %s.name, tools = tools.len(), "MCP server's tools listed again after it announced a change");
                    s.tools = tools;
                    true
                }
                Err(e) => {
                    tracing::warn!(server = %s.name, error = %e, "listing an MCP server's changed tools failed; keeping its earlier list");
                    false
                }
            }
        });
        if futures::future::join_all(relists).await.contains(&true) {
            self.name_tools();
        }
    }

    /// This process reaches no MCP server (no `McpAccess`): every server the session uses is
    /// reported unavailable, never silently left out.
    pub(crate) fn not_configured(snapshot: &SessionSnapshot) -> (Self, Vec<NewEvent>) {
        let why = Failure::Mcp(McpError::Connection("this gateway process has no MCP client configured".into()));
        let agent_servers = snapshot.agent.spec.mcp_servers_in_use().into_iter().map(|s| s.name.clone());
        let client_servers = snapshot.client_tool_servers.iter().map(|s| s.name().to_owned());
        let names: Vec<String> = agent_servers.chain(client_servers).collect();
        let errors = names.iter().map(|s| failure_event(s, &why)).collect();
        let unavailable = names.into_iter().map(|s| (s, why.to_string())).collect();
        let tools = Self {
            servers: Vec::new(),
            names: OfferedNames::default(),
            reserved: BTreeSet::new(),
            unavailable,
            call_timeout: Duration::ZERO,
        };
        (tools, errors)
    }

    /// Whether a tool may be called, and under which policy: an agent's server's tools as its
    /// toolset says; a client's server's tools always ask (the client's user approves them).
    pub(crate) fn availability(&self, agent: &AgentSpec, server: &str, tool: &str) -> ToolAvailability {
        match self.servers.iter().find(|s| s.name == server) {
            Some(s) if s.from_client => ToolAvailability::Enabled(PermissionPolicy::AlwaysAsk),
            _ => agent.mcp_tool(server, tool),
        }
    }

    /// The tools offered to the model: every tool of a reached server that may be called.
    pub(crate) fn definitions(&self, agent: &AgentSpec) -> Vec<ToolDefinition> {
        let mut out = Vec::new();
        for s in &self.servers {
            for t in &s.tools {
                if matches!(self.availability(agent, &s.name, &t.name), ToolAvailability::Disabled) {
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

type Connected = (McpClient, Vec<gateway_mcp::ToolSpec>, Option<tokio::process::Child>);

/// An agent's server with the credential its session's vaults hold for it: an OAuth token is
/// refreshed first when it is about to expire, and once more when the server refuses it.
async fn connect_agent_server(
    access: &McpAccess,
    spec: &McpServerSpec,
    credential: Option<(Credential, CredentialSecret)>,
) -> Result<Connected, Failure> {
    let Some((credential, secret)) = credential else {
        return Ok(connect_url(access, &spec.url, None, &[]).await.map(|(c, t)| (c, t, None))?);
    };
    let (credential, secret) = access.vaults.refreshed(&credential, secret, false).await.map_err(Failure::Refresh)?;
    let first = connect_url(access, &spec.url, Some(BearerToken::new(secret.token.0.clone())), &[]).await;
    let can_refresh = matches!(&credential.spec.auth, CredentialAuth::OAuth { refresh: Some(_), .. });
    let (client, tools) = match first {
        Err(McpError::Unauthorized { .. }) if can_refresh => {
            let (_, secret) = access.vaults.refreshed(&credential, secret, true).await.map_err(Failure::Refresh)?;
            connect_url(access, &spec.url, Some(BearerToken::new(secret.token.0)), &[]).await?
        }
        other => other?,
    };
    Ok((client, tools, None))
}

/// A server at a URL, through the SSRF rule.
async fn connect_url(
    access: &McpAccess,
    url: &str,
    token: Option<BearerToken>,
    headers: &[(String, String)],
) -> Result<(McpClient, Vec<gateway_mcp::ToolSpec>), McpError> {
    ssrf::check_url(url, access.allow_private).map_err(|e| {
        McpError::Connection(format!("{e} (an operator allows private servers with mcp.allow_private_servers)"))
    })?;
    let client =
        McpClient::connect_http_with_headers(access.http.clone(), url, token, headers, access.limits.clone()).await?;
    let tools = client.list_tools().await?;
    Ok((client, tools))
}

/// A client's server: a command started in the session's sandbox (its `env` in the process's
/// environment, never its command line), or a URL called with its headers.
async fn connect_client(
    access: &McpAccess,
    server: &ClientToolServer,
    side: &ClientSide<'_>,
) -> Result<Connected, Failure> {
    let open = |pairs: &[(String, Secret)]| -> Result<Vec<(String, String)>, McpError> {
        pairs
            .iter()
            .map(|(k, v)| {
                let opened = match side.environments {
                    Some(envs) => envs.open_secret(v).map_err(McpError::Connection)?,
                    None => v.clone(),
                };
                Ok((k.clone(), opened.0))
            })
            .collect()
    };
    match server {
        ClientToolServer::Http { url, headers, .. } => {
            Ok(connect_url(access, url, None, &open(headers)?).await.map(|(c, t)| (c, t, None))?)
        }
        ClientToolServer::Stdio { command, args, env, .. } => {
            let hand = side.hand.as_ref().ok_or_else(|| {
                McpError::Connection("the session has no sandbox to run the server's command in".into())
            })?;
            let env = open(env)?;
            let mut cmd = hand
                .sandbox()
                .command_with_env(command, args, &env)
                .map_err(|e| McpError::Connection(format!("cannot prepare {command:?}: {e}")))?;
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
            let mut child = cmd.spawn().map_err(|e| McpError::Connection(format!("cannot start {command:?}: {e}")))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(McpError::Connection("the server's process has no pipes".into()).into());
            };
            let client = McpClient::connect_stdio(stdout, stdin, access.limits.clone()).await?;
            let tools = client.list_tools().await?;
            Ok((client, tools, Some(child)))
        }
        ClientToolServer::OnClient { name, server_id } => {
            let channels = access
                .on_client
                .as_ref()
                .ok_or_else(|| McpError::Connection("this gateway cannot reach servers its clients run".into()))?;
            let stream = channels.open(side.session, server_id).await.map_err(|why| {
                McpError::Connection(format!("the client runs the server {name:?} on its own machine: {why}"))
            })?;
            let (read, write) = tokio::io::split(stream);
            let client = McpClient::connect_stdio(read, write, access.limits.clone()).await?;
            let tools = client.list_tools().await?;
            Ok((client, tools, None))
        }
    }
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
