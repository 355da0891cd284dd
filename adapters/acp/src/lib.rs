//! gateway-acp: the Agent Client Protocol (v1) on both faces.
//!
//! - Agent face: the gateway is an ACP agent for editors, on stdio (`gateway acp`) and,
//!   experimentally, over WebSocket at `/acp` on `gateway serve`.
//! - Client face: an ACP agent process (`[executors.acp.NAME]`) is a backend; the gateway is
//!   its client and serves its `fs/*` and `terminal/*` requests from the session's Hand.
//!
//! Entry points are fixed by the server (composition root); their bodies are being built.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_core::agent::BackendRef;
use gateway_runtime::{Backend, Coordinator, Environments, PublishedAgents};
use tokio_util::sync::CancellationToken;

/// What the agent face needs from the process.
#[derive(Clone)]
pub struct AcpContext {
    pub coordinator: Coordinator,
    pub agents: PublishedAgents,
    pub shutdown: CancellationToken,
}

/// `[executors.acp.NAME]`: an ACP agent command.
#[derive(Debug, Clone, Default)]
pub struct ExecutorConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Longest one turn may take.
    pub turn_timeout: std::time::Duration,
}

/// `gateway acp`: serves one editor over stdin/stdout until stdin closes. `agent` names the
/// published agent new sessions use (default: the configured default agent).
pub async fn serve_stdio(ctx: AcpContext, agent: Option<String>) -> anyhow::Result<()> {
    let _ = (ctx, agent);
    anyhow::bail!("the ACP agent face is not available in this build yet")
}

/// The experimental ACP endpoint `/acp` (WebSocket) of `gateway serve`.
pub fn router(ctx: AcpContext) -> axum::Router {
    let _ = ctx;
    axum::Router::new()
}

/// One backend per configured executor, registered as `acp:<name>`.
pub fn backends(
    executors: &BTreeMap<String, ExecutorConfig>,
    environments: Arc<Environments>,
) -> Vec<(BackendRef, Arc<dyn Backend>)> {
    let _ = (executors, environments);
    Vec::new()
}
