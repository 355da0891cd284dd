//! gateway-managed-agents: the Managed Agents API (the REST + SSE shape of Anthropic's Claude
//! Managed Agents beta) over the gateway's core. The official `anthropic` SDKs work against it
//! with only `base_url` changed. Decisions the reference leaves open: docs/adr/0007.
//!
//! This crate is an anti-corruption layer: it parses the wire shapes, calls the
//! [`Coordinator`], and projects neutral events back into Managed Agents events. Errors are
//! mapped once, in `error.rs`.

mod auth;
pub mod client;
pub mod error;
mod extract;
mod handlers;
pub mod openapi;
mod pagination;
#[cfg(test)]
mod props;
mod request_id;
mod routes;
mod stream;
pub mod webhooks;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use gateway_core::environment::ProviderTier;
use gateway_face::FaceContext;

pub use error::ApiError;
pub use extract::BODY_LIMIT;
pub use routes::served_routes;

/// What the adapter needs from the process: what every face gets (its `public_url` is the
/// base URL executors reach this gateway at, a self-hosted session's `remote_url`; its
/// `shutdown` ends open streams so the server can drain), and this face's own settings.
#[derive(Clone)]
pub struct ManagedAgents {
    pub face: FaceContext,
    /// The sandbox provider environments get when they name none.
    pub default_provider: ProviderTier,
    /// How often an idle stream sends a `: keep-alive` comment.
    pub keep_alive: Duration,
    /// Webhook endpoints (the `/v1/webhooks` extension) and their delivery.
    pub webhooks: Arc<webhooks::Webhooks>,
    /// Vaults: credentials sealed on the way in.
    pub vaults: Arc<gateway_services::vaults::VaultService>,
    /// Checks a credential against its server (`mcp_oauth_validate`); None: every check is
    /// `unknown` (no MCP client in this process).
    pub server_probe: Option<Arc<dyn gateway_services::vaults::ServerProbe>>,
}

/// A face's context is the shared one plus its own fields: handlers read `api.coordinator`
/// and `api.public_url` as the process's, not as copies this face could get out of step.
impl std::ops::Deref for ManagedAgents {
    type Target = FaceContext;
    fn deref(&self) -> &FaceContext {
        &self.face
    }
}

/// The Managed Agents face: the `/v1` routes (webhook deliveries run as their own task, started
/// with the webhooks service).
impl gateway_face::Face for ManagedAgents {
    fn name(&self) -> &'static str {
        "managed_agents"
    }

    fn router(&self) -> Router {
        router(self.clone())
    }
}

/// The `/v1` routes of the Managed Agents API (mount at the root), built from [`routes::routes`].
/// Their state is one `Arc` of the face: axum clones the state of every layer for every request.
pub fn router(api: ManagedAgents) -> Router {
    let api = Arc::new(api);
    let routes = routes::routes()
        .into_iter()
        .fold(Router::new(), |router, route| router.route(route.path, route.handler))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&api), gateway_face::guard::<ManagedAgents>))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(api);
    routes.layer(middleware::from_fn(request_id::layer))
}
