//! gateway-acp: the Agent Client Protocol (v1) on both faces.
//!
//! - Editor face ([`editor`]): the gateway is an ACP agent for editors, on stdio
//!   (`gateway acp`) and over WebSocket at `/acp` on `gateway serve`, which editors reach
//!   through the stdio relay `gateway acp --url` ([`relay`]).
//! - Backend face ([`backend`]): an ACP agent process (`[executors.acp.NAME]`) is a backend;
//!   the gateway is its client and serves its `fs/*` and `terminal/*` requests from the
//!   session's Hand.
//!
//! Both faces speak JSON-RPC through one small symmetric peer ([`rpc`]), written here rather
//! than taken from the `agent-client-protocol` crate (docs/adr/0008-acp.md says why).

pub mod backend;
pub mod editor;
pub mod names;
pub mod relay;
pub mod rpc;
mod stdio;
pub mod wire;
mod ws;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::BackendRef;
use gateway_face::FaceContext;
use gateway_runtime::{Backend, Coordinator, Environments};
use gateway_services::PublishedAgents;
use tokio_util::sync::CancellationToken;

use crate::backend::ProcessTable;
use crate::rpc::Peer;
use crate::rpc::framing::{self, MAX_MESSAGE_BYTES};

/// What the agent face needs from the process: what every face gets (editor connections
/// and their request handlers run on its `tasks`, the runtime's tracker, so the process waits
/// for them before it closes the store; its authenticator decides who may open `/acp`, and is
/// not consulted on stdio, where the editor started the process itself), and this face's own.
/// One constructor makes it for both transports (the server's `acp_context`).
#[derive(Clone)]
pub struct AcpContext {
    pub face: FaceContext,
    pub agents: PublishedAgents,
    /// Where a session `cwd` may be: `None` on stdio (any absolute directory; the editor
    /// started the process with the user's rights), the configured roots on network
    /// transports (empty: no session may be opened there).
    pub workspace_roots: Option<Vec<std::path::PathBuf>>,
    /// The agent processes of the backend face: `session/close` stops the session's.
    pub processes: Arc<ProcessTable>,
    /// What native sessions wait for before they can run (`gateway acp`'s model credential);
    /// `None` where the connection itself was authenticated (`/acp`, with a key).
    pub sign_in: Option<Arc<dyn EditorAuth>>,
    /// MCP servers editors run on their own machines and carry over their connections; the
    /// native loop's MCP client reaches them through the same value.
    pub channels: Arc<editor::EditorChannels>,
}

/// The credential a process of `gateway acp` needs before native sessions can run, and how an
/// editor's `authenticate` and `logout` reach it (ADR 0026). The process answers `initialize`
/// whether or not it has one: an editor can only offer its user a sign-in if the agent speaks.
pub trait EditorAuth: Send + Sync {
    /// What is missing, said to the editor; `None` when sessions can run. Looks again each
    /// time (a key `gateway login` stored since is found).
    fn missing(&self) -> Option<String>;
    /// Forgets the stored credential and the model built with it: a later turn of a native
    /// session needs a new sign-in (a credential in the process environment stays: the user
    /// set it there, not through the editor).
    fn logout(&self) -> Result<(), String>;
}

/// A face's context is the shared one plus its own fields: the editor reads
/// `ctx.coordinator` and `ctx.shutdown` as the process's, not as copies this face could get
/// out of step.
impl std::ops::Deref for AcpContext {
    type Target = FaceContext;
    fn deref(&self) -> &FaceContext {
        &self.face
    }
}

/// `[executors.acp.NAME]`: an ACP agent command, read from the configuration as it is here.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ExecutorConfig {
    pub command: String,
    pub args: Vec<String>,
    /// Often carries credentials: values never logged.
    pub env: BTreeMap<String, String>,
    /// Longest one turn may take: `acp.turn_timeout_secs`, one setting for every executor
    /// (not a key of its own).
    #[serde(skip)]
    pub turn_timeout: std::time::Duration,
}

impl std::fmt::Debug for ExecutorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("turn_timeout", &self.turn_timeout)
            .finish()
    }
}

/// An editor's `gateway acp` that cannot start (a configuration it cannot load, a database it
/// cannot open, another gateway's secret key, an unsafe sandbox) still speaks ACP on stdio
/// until the editor closes it: `initialize` is answered, and every other request gets an error
/// naming the reason, which the editor shows its user. A process that exits at once is only
/// "connection closed" to an editor (ADR 0029).
pub async fn serve_failure(reason: String) {
    let tasks = tokio_util::task::TaskTracker::new();
    let incoming = framing::spawn_reader(stdio::input(), MAX_MESSAGE_BYTES);
    let handler = Arc::new(Unavailable { reason });
    let (peer, frames, reader) = Peer::start_tracked("editor", incoming, handler, crate::rpc::options(false), &tasks);
    let writer = framing::spawn_writer(stdio::output(), frames);
    let _ = reader.await;
    drop(peer);
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(2), tasks.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

/// The handler of [`serve_failure`].
struct Unavailable {
    reason: String,
}

impl rpc::Handler for Unavailable {
    fn request(&self, _peer: &Peer, method: &str, _params: serde_json::Value) -> rpc::Reply {
        let answer = match method {
            "initialize" => Ok(serde_json::json!({
                "protocolVersion": wire::PROTOCOL_VERSION,
                "agentCapabilities": {},
                "authMethods": [],
                "agentInfo": wire::implementation(),
            })),
            _ => Err(rpc::RpcError::internal(format!("the gateway could not start: {}", self.reason))
                .with_data(serde_json::json!({"reason": "startup_failed"}))),
        };
        Box::pin(async move { answer })
    }

    fn notification(&self, _peer: &Peer, _method: &str, _params: serde_json::Value) {}

    fn closed(&self) {}
}

/// `gateway acp`: serves one editor over stdin/stdout until stdin closes or the gateway shuts
/// down (`ctx.shutdown`: the connection is closed, its running prompts answer that the gateway
/// is shutting down). `agent` names the published agent new sessions use (default: the
/// configured default agent).
pub async fn serve_stdio(ctx: AcpContext, agent: Option<String>) -> anyhow::Result<()> {
    let (shutdown, tasks) = (ctx.shutdown.clone(), ctx.tasks.clone());
    let _connected = gateway_services::metrics::GaugeGuard::new(&ctx.coordinator.metrics().editor_connections);
    let editor = editor::Editor::new(ctx, agent);
    let incoming = framing::spawn_reader(stdio::input(), MAX_MESSAGE_BYTES);
    let handler = Arc::new(editor::EditorHandler(editor));
    let (peer, frames, reader) = Peer::start_tracked("editor", incoming, handler, crate::rpc::options(false), &tasks);
    let writer = framing::spawn_writer(stdio::output(), frames);
    tracing::info!("serving ACP on stdio");
    let closed_by_editor = tokio::select! {
        _ = reader => true,
        _ = shutdown.cancelled() => {
            peer.close();
            false
        }
    };
    drop(peer);
    // Frames already queued still go out; then stdout is released.
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    if closed_by_editor {
        tracing::info!("the editor closed stdin");
    }
    Ok(())
}

/// The ACP endpoint `/acp` (WebSocket) of `gateway serve`, which the relay connects to.
pub fn router(ctx: AcpContext) -> axum::Router {
    ws::router(ctx)
}

/// The ACP face of `gateway serve`: `/acp` over WebSocket.
impl gateway_face::Face for AcpContext {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn router(&self) -> axum::Router {
        router(self.clone())
    }
}

/// Stops idle ACP agent processes and those of deleted sessions, every 30 s until `stop`.
pub async fn maintain(coordinator: Coordinator, processes: Arc<ProcessTable>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => processes.sweep(&coordinator).await,
        }
    }
}

/// One backend per configured executor, registered as `acp:<name>`, all keeping their agent
/// processes in `processes` (stopped by [`Backend::stop`] once the process's Workers stopped).
pub fn backends(
    executors: &BTreeMap<String, ExecutorConfig>,
    environments: &Arc<Environments>,
    processes: &Arc<ProcessTable>,
) -> Vec<(BackendRef, Arc<dyn Backend>)> {
    executors
        .iter()
        .map(|(name, config)| {
            let backend =
                backend::AcpBackend::new(name.clone(), config.clone(), Arc::clone(environments), Arc::clone(processes));
            (BackendRef::Acp { executor: name.clone() }, Arc::new(backend) as Arc<dyn Backend>)
        })
        .collect()
}
