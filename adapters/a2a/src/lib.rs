//! gateway-a2a: Agent2Agent (v1.0 canonical, v0.3 at the edges).
//!
//! - Server: an agent card per published agent, JSON-RPC and HTTP+JSON bindings with SSE,
//!   tasks kept in the gateway's store (contextId = session), push notifications from the
//!   durable outbox, and an optional built-in conformance agent.
//! - Outbound backend: a published agent `a2a:<remote>` runs its turns on a remote A2A agent.
//!
//! Entry points are fixed by the server (composition root); their bodies are being built.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_core::agent::BackendRef;
use gateway_runtime::auth::Authenticator;
use gateway_runtime::{Backend, Coordinator, PublishedAgents};
use tokio_util::sync::CancellationToken;

/// What the A2A server needs from the process.
#[derive(Clone)]
pub struct A2aContext {
    pub coordinator: Coordinator,
    pub agents: PublishedAgents,
    pub auth: Arc<Authenticator>,
    /// The URL clients reach this gateway at (cards point here).
    pub public_url: String,
    pub allow_private_push_targets: bool,
    pub shutdown: CancellationToken,
}

/// `[remotes.a2a.NAME]`: a remote A2A agent.
#[derive(Clone, Default)]
pub struct RemoteConfig {
    pub url: String,
    /// Sent as `Authorization`; never logged.
    pub auth: Option<String>,
}

/// The A2A routes: cards, JSON-RPC and HTTP+JSON bindings.
pub fn router(ctx: A2aContext) -> axum::Router {
    let _ = ctx;
    axum::Router::new()
}

/// Delivers push notifications from the outbox until `ctx.shutdown`.
pub async fn run_push_deliveries(ctx: A2aContext) {
    ctx.shutdown.cancelled().await;
}

/// One backend per configured remote, registered as `a2a:<name>`.
pub fn backends(remotes: &BTreeMap<String, RemoteConfig>) -> Vec<(BackendRef, Arc<dyn Backend>)> {
    let _ = remotes;
    Vec::new()
}

/// The built-in conformance agent's backend, registered as `builtin:conformance` when
/// `[a2a] conformance_agent` is on.
pub fn conformance_backend() -> Option<(BackendRef, Arc<dyn Backend>)> {
    None
}
