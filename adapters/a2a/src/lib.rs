//! gateway-a2a: Agent2Agent (v1.0 canonical, v0.3 at the edges). Decisions: docs/adr/0009-a2a.md.
//!
//! - Server: an agent card per published agent, JSON-RPC and HTTP+JSON bindings with SSE,
//!   tasks projected from the gateway's event log (contextId = session), push notifications
//!   from the durable outbox, and an optional built-in conformance agent.
//! - Outbound backend: a published agent `a2a:<remote>` runs its turns on a remote A2A agent.
//!
//! Module map: `wire` (v1.0 types) and `v03` (v0.3 rewrites at the edges); `server` (cards,
//! the JSON-RPC and HTTP+JSON bindings, SSE, versions, auth, the operations they dispatch to);
//! `tasks` (the service, the projection of events onto tasks, watches, the adapter's
//! documents); `push` (configs, the push channel and its feed, the SSRF guard); `outbound` (the
//! remote backend); `conformance` (the built-in TCK agent); `content` (parts <-> blocks).

#[cfg(test)]
mod backend_suite;
mod conformance;
mod content;
pub mod error;
mod outbound;
mod push;
mod server;
mod tasks;
#[cfg(test)]
mod testkit;
mod v03;
pub mod wire;

use push::delivery;
pub use server::body::{BODY_LIMIT, MAX_VALUES};
pub use server::version;
use server::{card, jsonrpc, rest};

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{any, get, post};
use gateway_core::agent::BackendRef;
use gateway_face::FaceContext;
use gateway_runtime::Backend;
use gateway_services::{PublishedAgents, SecretBox};

/// What the A2A server needs from the process: what every face gets (cards point at its
/// `public_url`), and this face's own settings.
#[derive(Clone)]
pub struct A2aContext {
    pub face: FaceContext,
    pub agents: PublishedAgents,
    /// Seals push-notification credentials before they are stored (see `push`).
    pub secrets: SecretBox,
    pub allow_private_push_targets: bool,
    /// The longest a blocking `SendMessage` waits before answering with the task as it stands.
    pub blocking_timeout: std::time::Duration,
}

/// A face's context is the shared one plus its own fields: handlers read `ctx.coordinator`
/// and `ctx.shutdown` as the process's, not as copies this face could get out of step.
impl std::ops::Deref for A2aContext {
    type Target = FaceContext;
    fn deref(&self) -> &FaceContext {
        &self.face
    }
}

/// `a2a.blocking_timeout_secs`: below the common client timeouts (30 s and more), so a slow
/// turn answers `working` instead of a timeout.
pub const DEFAULT_BLOCKING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

/// `[remotes.a2a.NAME]`: a remote A2A agent, read from the configuration as it is here.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RemoteConfig {
    pub url: String,
    /// Sent as `Authorization`; never logged.
    pub auth: Option<String>,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &self.url)
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The A2A routes: cards (public), JSON-RPC and HTTP+JSON bindings (authenticated). Their
/// state is one `Arc` of the context: axum clones the state of every layer for every request.
pub fn router(ctx: A2aContext) -> axum::Router {
    let ctx = Arc::new(ctx);
    let protected = axum::Router::new()
        .route("/a2a/{agent}", post(jsonrpc::handle))
        .route("/a2a/{agent}/", post(jsonrpc::handle))
        .route("/a2a/{agent}/{*rest}", any(rest::handle))
        .layer(middleware::from_fn_with_state(Arc::clone(&ctx), gateway_face::guard::<A2aContext>));
    axum::Router::new()
        .route("/.well-known/agent-card.json", get(card::root_card))
        .route("/.well-known/agent.json", get(card::root_card))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(card::agent_card))
        .route("/a2a/{agent}/.well-known/agent.json", get(card::agent_card))
        .merge(protected)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(ctx)
}

/// The push-notification channel of the runtime's delivery service: it feeds itself from the
/// store's feed (no background task of its own) and makes the deliveries.
pub fn push_channel(ctx: &A2aContext) -> Arc<dyn gateway_runtime::delivery::Channel> {
    Arc::new(delivery::PushChannel::new(ctx))
}

/// The A2A face: its routes. It has no background work: push notifications are a channel of
/// the delivery service ([`push_channel`]).
impl gateway_face::Face for A2aContext {
    fn name(&self) -> &'static str {
        "a2a"
    }

    fn router(&self) -> axum::Router {
        router(self.clone())
    }
}

pub use outbound::Limits as RemoteLimits;

/// One backend per configured remote, registered as `a2a:<name>`.
pub fn backends(remotes: &BTreeMap<String, RemoteConfig>) -> Vec<(BackendRef, Arc<dyn Backend>)> {
    backends_with(remotes, RemoteLimits::default())
}

/// [`backends`] with other time limits (tests use short ones).
pub fn backends_with(
    remotes: &BTreeMap<String, RemoteConfig>,
    limits: RemoteLimits,
) -> Vec<(BackendRef, Arc<dyn Backend>)> {
    remotes
        .iter()
        .map(|(name, cfg)| {
            let backend: Arc<dyn Backend> = Arc::new(outbound::RemoteBackend::new(name, cfg.clone(), limits));
            (BackendRef::A2a { remote: name.clone() }, backend)
        })
        .collect()
}

/// Fetches and pins each remote's agent card (publication time: the process start that
/// syncs configured agents). A remote that does not answer is logged and fetched again at its
/// first turn, so one unreachable remote never keeps the gateway from serving the others. A
/// pinned card is kept until the remote's configured URL changes.
pub async fn pin_remote_cards(docs: &dyn gateway_store::Documents, remotes: &BTreeMap<String, RemoteConfig>) {
    for (name, cfg) in remotes {
        let backend = outbound::RemoteBackend::new(name, cfg.clone(), RemoteLimits::default());
        if let Err(e) = backend.pin_card(docs).await {
            tracing::warn!(remote = %name, error = %e, "remote agent card not fetched at start; retried at the first turn");
        }
    }
}

/// The built-in conformance agent's backend, registered as `builtin:conformance` when
/// `[a2a] conformance_agent` is on.
pub fn conformance_backend() -> (BackendRef, Arc<dyn Backend>) {
    (BackendRef::Builtin { name: conformance::BUILTIN_NAME.into() }, Arc::new(conformance::ConformanceBackend))
}
