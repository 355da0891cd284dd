//! The editor face: the gateway as an ACP agent (stdio for `gateway acp`, WebSocket at `/acp`).
//!
//! Every ACP session is a core session whose workspace is the editor's `cwd`; turns run on
//! the Workers like any other, and what the editor sees is a projection of the committed log
//! plus previews ([`project`]). Nothing protocol-specific is stored except what ACP needs to
//! find again: the tools the user always allows (`acp.allow_always`) and the MCP servers an
//! editor passed to an ACP-backed agent (`acp.mcp_servers`), as adapter documents.

mod channels;
mod opening;
mod project;
mod prompt;
mod sessions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gateway_core::SessionId;
use gateway_core::agent::BackendRef;
use gateway_core::session::{ResourceKind, Session};
use gateway_runtime::RuntimeError;
use gateway_services::published::CONFIG_NAME_KEY;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::AcpContext;
use crate::rpc::{Handler, Peer, Reply, RpcError, code};
use crate::wire::{PROTOCOL_VERSION, PromptSupport};

pub use channels::EditorChannels;
pub(crate) use channels::FromEditor;
pub use project::{Projector, ToolCall};

/// A session opened on this connection (by `new`, `load` or `resume`).
#[derive(Debug)]
pub(crate) struct Open {
    pub id: SessionId,
    pub cwd: String,
    /// The running prompt's cancel token; `Some` while a prompt runs (one at a time).
    pub prompt: Mutex<Option<CancellationToken>>,
}

impl Open {
    fn new(id: SessionId, cwd: String) -> Arc<Self> {
        Arc::new(Self { id, cwd, prompt: Mutex::new(None) })
    }
}

/// One editor connection.
pub struct Editor {
    pub(crate) ctx: AcpContext,
    /// The agent new sessions get (`gateway acp --agent`), else the published default.
    pub(crate) agent: Option<String>,
    sessions: Mutex<HashMap<String, Arc<Open>>>,
    /// This connection among those carrying MCP servers of their own ([`EditorChannels`]).
    pub(crate) channel_id: u64,
}

/// The connection's JSON-RPC handler.
pub struct EditorHandler(pub Arc<Editor>);

impl Editor {
    pub fn new(ctx: AcpContext, agent: Option<String>) -> Arc<Self> {
        let channel_id = ctx.channels.editor_id();
        Arc::new(Self { ctx, agent, sessions: Mutex::new(HashMap::new()), channel_id })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Open>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn open(&self, id: &str) -> Result<Arc<Open>, RpcError> {
        self.lock().get(id).cloned().ok_or_else(|| {
            crate::rpc::not_found(format!(
                "session {} is not open on this connection (session/new, session/load or session/resume it first)",
                crate::rpc::clip(id, 80)
            ))
        })
    }

    /// Opens a session on this connection. One already open stays as it is (with its
    /// running prompt, which a later cancel must still reach).
    pub(crate) fn remember(&self, id: SessionId, cwd: String) -> Arc<Open> {
        let key = id.to_string();
        Arc::clone(self.lock().entry(key).or_insert_with(|| Open::new(id, cwd)))
    }

    fn forget(&self, id: &str) -> Option<Arc<Open>> {
        self.lock().remove(id)
    }

    /// The name of the agent a new session gets.
    pub(crate) fn default_agent(&self) -> Result<(String, gateway_core::AgentId), RpcError> {
        let agents = &self.ctx.agents;
        let found = match &self.agent {
            Some(name) => agents.get(name).map(|id| (name.clone(), id.clone())),
            None => agents.default_agent().map(|(n, id)| (n.to_owned(), id.clone())),
        };
        found.ok_or_else(|| RpcError::internal("no agent is published (configure [agents.NAME])"))
    }

    /// What the chosen agent can take in a prompt: images only where the native loop passes
    /// them to the model; embedded resources always (they become text where needed).
    pub(crate) fn support(session: &Session) -> PromptSupport {
        PromptSupport { image: session.snapshot.agent.spec.backend == BackendRef::Native, embedded_context: true }
    }

    /// Cancels the running prompt of a session, if any. Another session is never touched.
    /// With no prompt running, a turn of the session parked on answers nobody is asked for
    /// (its editor went away) is interrupted, so the session takes prompts again.
    fn cancel(&self, session_id: &str) {
        let open = self.lock().get(session_id).cloned();
        match open {
            Some(open) => {
                if let Some(token) = open.prompt.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                    info!(session = %open.id, "session/cancel");
                    token.cancel();
                    return;
                }
                let coordinator = self.ctx.coordinator.clone();
                self.ctx.tasks.spawn(async move {
                    match coordinator.get_session(&open.id).await {
                        Ok(s) if !s.pending_actions.is_empty() => {
                            info!(session = %open.id, "session/cancel of a parked turn");
                            if let Err(e) = coordinator.interrupt(&open.id).await {
                                warn!(session = %open.id, error = %e, "interrupt failed");
                            }
                        }
                        _ => {}
                    }
                });
            }
            None => warn!(session = %crate::rpc::clip(session_id, 80), "session/cancel for a session not open here"),
        }
    }

    async fn initialize(&self, params: Value) -> Result<Value, RpcError> {
        let asked = params.get("protocolVersion").and_then(Value::as_u64);
        if asked.is_none() {
            return Err(RpcError::invalid_params("`protocolVersion` (an integer) is required"));
        }
        let image = match self.default_agent() {
            Ok((_, id)) => match self.ctx.coordinator.get_agent(&id, None).await {
                Ok(a) => a.spec.backend == BackendRef::Native,
                Err(e) => return Err(runtime_error(e)),
            },
            Err(e) => return Err(e),
        };
        let mut capabilities = json!({
            "loadSession": true,
            "promptCapabilities": {"image": image, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": true, "sse": false},
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}, "additionalDirectories": {}},
        });
        if self.ctx.sign_in.is_some() {
            capabilities["auth"] = json!({"logout": {}});
        }
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": capabilities,
            "authMethods": auth_methods(self.ctx.sign_in.is_some(), offers_terminal_auth(&params)),
            "agentInfo": crate::wire::implementation(),
        }))
    }

    /// `authenticate`: the method must be one `initialize` offered; it succeeds once native
    /// sessions can run (a terminal sign-in has stored the key, or the environment holds one).
    fn authenticate(&self, params: &Value) -> Result<Value, RpcError> {
        let method = params.get("methodId").and_then(Value::as_str).unwrap_or_default();
        if ![AGENT_METHOD, TERMINAL_METHOD].contains(&method) {
            return Err(RpcError::invalid_params(format!(
                "unknown auth method {:?} (this agent offers {AGENT_METHOD:?} and {TERMINAL_METHOD:?})",
                crate::rpc::clip(method, 80)
            )));
        }
        match self.ctx.sign_in.as_ref().and_then(|a| a.missing()) {
            None => Ok(json!({})),
            Some(missing) => Err(crate::rpc::auth_required(format!(
                "{missing}; run `gateway login` in a terminal (the {TERMINAL_METHOD:?} method) and authenticate again"
            ))),
        }
    }

    /// Sessions of a native agent need the model's credential: without it they are refused
    /// with ACP's auth error, which an editor answers by offering its user a sign-in.
    pub(crate) fn require_auth(&self, backend: &BackendRef) -> Result<(), RpcError> {
        if *backend != BackendRef::Native {
            return Ok(());
        }
        match self.ctx.sign_in.as_ref().and_then(|a| a.missing()) {
            None => Ok(()),
            Some(missing) => Err(crate::rpc::auth_required(format!(
                "authentication required: {missing} (sign in with `gateway login`, then authenticate)"
            ))),
        }
    }
}

/// The always-offered method: "agent" auth (the registry's default type), the gateway using
/// the credential it has or finds.
const AGENT_METHOD: &str = "gateway";
/// The terminal sign-in: the editor runs this binary with `login` in a terminal.
const TERMINAL_METHOD: &str = "gateway-login";

/// `initialize`'s `authMethods` (ADR 0026). Without a credential to need (`/acp`, whose
/// connection presented a key) the agent method still stands, so every editor and the ACP
/// registry's check see one they can drive.
fn auth_methods(needs_credential: bool, terminal: bool) -> Value {
    let agent = if needs_credential {
        "Use the model credential this gateway has: ANTHROPIC_API_KEY in its environment, or the key `gateway login` stored"
    } else {
        "This connection is signed in with its gateway API key"
    };
    let login = (needs_credential && terminal)
        .then_some(("Stores an Anthropic API key for this user (gateway login)".to_owned(), vec!["login".to_owned()]));
    auth_method_list(agent.to_owned(), login)
}

/// The methods, by their one set of ids: the agent method with its description, and the
/// terminal sign-in (its description and the arguments the editor runs this binary with) when
/// offered. The relay offers the same methods for its gateway's key.
pub(crate) fn auth_method_list(agent: String, terminal: Option<(String, Vec<String>)>) -> Value {
    let mut methods = vec![json!({"id": AGENT_METHOD, "name": "Gateway", "description": agent})];
    if let Some((description, args)) = terminal {
        methods.push(json!({
            "id": TERMINAL_METHOD,
            "name": "Sign in from a terminal",
            "description": description,
            "type": "terminal",
            "args": args,
        }));
    }
    Value::Array(methods)
}

/// Whether the client runs terminal sign-ins: `clientCapabilities.auth.terminal`, or the
/// `terminal-auth` flag in `_meta` that clients used before it (and the registry's check sends).
pub(crate) fn offers_terminal_auth(params: &Value) -> bool {
    let caps = params.get("clientCapabilities");
    let flag = caps.and_then(|c| c.pointer("/auth/terminal")).and_then(Value::as_bool).unwrap_or(false);
    let meta = caps.and_then(|c| c.pointer("/_meta/terminal-auth")).and_then(Value::as_bool).unwrap_or(false);
    flag || meta
}

impl Handler for EditorHandler {
    fn request(&self, peer: &Peer, method: &str, params: Value) -> Reply {
        let ed = Arc::clone(&self.0);
        let peer = peer.clone();
        match method {
            "initialize" => Box::pin(async move { ed.initialize(params).await }),
            "authenticate" => Box::pin(async move { ed.authenticate(&params) }),
            "logout" => Box::pin(async move {
                match &ed.ctx.sign_in {
                    Some(auth) => auth.logout().map(|()| json!({})).map_err(RpcError::internal),
                    None => Err(RpcError::method_not_found("logout")),
                }
            }),
            "session/new" => Box::pin(async move { sessions::new_session(&ed, &peer, params).await }),
            "session/load" => Box::pin(async move { sessions::load(&ed, &peer, params, true).await }),
            "session/resume" => Box::pin(async move { sessions::load(&ed, &peer, params, false).await }),
            "session/list" => Box::pin(async move { sessions::list(&ed, params).await }),
            "session/close" => {
                // The cancel happens now, in order with what came before on the wire.
                let id = params.get("sessionId").and_then(Value::as_str).unwrap_or("").to_owned();
                if let Err(e) = ed.open(&id) {
                    return Box::pin(async move { Err(e) });
                }
                ed.cancel(&id);
                let open = ed.forget(&id);
                ed.ctx.channels.detach(ed.channel_id, Some(&id));
                Box::pin(async move { sessions::close(&ed, open, &id).await })
            }
            "session/delete" => {
                // Like close, in order with what came before; then the session is deleted
                // through the core (its environment released), as the Managed Agents delete.
                let id = params.get("sessionId").and_then(Value::as_str).unwrap_or("").to_owned();
                if ed.open(&id).is_ok() {
                    ed.cancel(&id);
                }
                let open = ed.forget(&id);
                ed.ctx.channels.detach(ed.channel_id, Some(&id));
                Box::pin(async move { sessions::delete(&ed, open, &id).await })
            }
            "session/set_mode" => Box::pin(async move { sessions::set_mode(&ed, params).await }),
            "session/set_config_option" => Box::pin(async move { sessions::set_config_option(&ed, params).await }),
            "session/prompt" => {
                // Registered before anything else is read, so a cancel right behind the prompt
                // is never lost, and a second prompt for the session is refused.
                match prompt::begin(&ed, &params) {
                    Ok((open, cancel)) => Box::pin(prompt::run(ed, peer, open, cancel, params)),
                    Err(e) => Box::pin(async move { Err(e) }),
                }
            }
            // A server the editor runs asks the client side (the native loop's MCP client).
            "mcp/message" => Box::pin(async move {
                let (connection, method, params) = mcp_message(params)?;
                let (reply, answer) = tokio::sync::oneshot::channel();
                ed.ctx.channels.deliver(&connection, FromEditor::Request { method, params, reply }).await?;
                answer.await.map_err(|_| RpcError::internal("the MCP connection closed"))?
            }),
            other => {
                let e = RpcError::method_not_found(other);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn notification(&self, _peer: &Peer, method: &str, params: Value) {
        match method {
            "mcp/message" => match mcp_message(params) {
                Ok((connection, method, params)) => {
                    let ed = Arc::clone(&self.0);
                    self.0.ctx.tasks.spawn(async move {
                        let delivered =
                            ed.ctx.channels.deliver(&connection, FromEditor::Notification { method, params }).await;
                        if let Err(e) = delivered {
                            tracing::debug!(error = %e.message, "an MCP notification for no open connection");
                        }
                    });
                }
                Err(e) => tracing::debug!(error = %e.message, "a malformed mcp/message notification"),
            },
            "session/cancel" => self.0.cancel(params.get("sessionId").and_then(Value::as_str).unwrap_or("")),
            other => tracing::debug!(method = %crate::rpc::clip(other, 80), "notification ignored"),
        }
    }

    fn closed(&self) {
        // Prompts stop waiting (they watch the connection); their turns finish in the core and
        // stay loadable: an editor that reconnects sees them with `session/load`.
        tracing::debug!(sessions = self.0.lock().len(), "editor connection closed");
        self.0.ctx.channels.detach(self.0.channel_id, None);
    }
}

/// An `mcp/message`'s connection, inner method and params.
fn mcp_message(params: Value) -> Result<(String, String, Value), RpcError> {
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
    let (Some(connection), Some(method)) = (text("connectionId"), text("method")) else {
        return Err(RpcError::invalid_params("mcp/message needs `connectionId` and `method`"));
    };
    Ok((connection, method, params.get("params").cloned().unwrap_or(Value::Null)))
}

/// The workspace directory of a session opened by an editor, if it has one.
pub(crate) fn workspace_of(session: &Session) -> Option<&str> {
    session.snapshot.resources.iter().find_map(|r| match &r.kind {
        ResourceKind::Workspace { path, .. } => Some(path.as_str()),
        _ => None,
    })
}

/// A `session_info_update` with the session's title and when it last changed.
pub(crate) fn session_info(session: &Session) -> Value {
    json!({
        "sessionUpdate": "session_info_update",
        "title": session.title,
        "updatedAt": session.updated_at.to_rfc3339(),
    })
}

/// The config-file name of a session's agent.
pub(crate) fn agent_name(session: &Session) -> Option<&str> {
    session.snapshot.agent.spec.metadata.get(CONFIG_NAME_KEY).map(String::as_str)
}

/// A runtime error as an ACP error, once, here.
pub(crate) fn runtime_error(e: RuntimeError) -> RpcError {
    match e {
        RuntimeError::NotFound { kind, id } => crate::rpc::not_found(format!("{kind} {id} not found")),
        RuntimeError::Invalid(m) => RpcError::invalid_params(m),
        e @ (RuntimeError::Placement(_) | RuntimeError::Rejected(_) | RuntimeError::Guard(_)) => {
            RpcError::new(code::INVALID_REQUEST, e.to_string())
        }
        RuntimeError::StaleVersion { .. } => RpcError::new(code::INVALID_REQUEST, e.to_string()),
        // The database is restarting or out of reach: "retry later" in the same terms as an
        // overload, so an editor can tell it from a failure of the gateway.
        RuntimeError::Unavailable(m) => RpcError::internal(format!("service unavailable: {m}"))
            .with_data(serde_json::json!({"reason": "unavailable", "retry_after_ms": 1000})),
        // ACP names no busy error: -32603 naming the cause, with the hint in `data` (ADR 0012).
        RuntimeError::Busy(busy) => RpcError::internal(busy.to_string()).with_data(serde_json::json!({
            "reason": "overloaded",
            "cause": busy.cause.as_str(),
            "retry_after_ms": busy.retry_after.as_millis() as u64,
        })),
        RuntimeError::Internal(m) => RpcError::internal(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unreachable database and an overload both tell the editor when to try again; only
    /// a failure of the gateway itself is a bare internal error.
    #[test]
    fn retry_later_errors_carry_their_hint() {
        let down = runtime_error(RuntimeError::Unavailable("restarting".into()));
        assert_eq!(down.code, code::INTERNAL_ERROR);
        assert_eq!(down.data, Some(serde_json::json!({"reason": "unavailable", "retry_after_ms": 1000})));
        assert_eq!(runtime_error(RuntimeError::Internal("bug".into())).data, None);
    }
}
