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
mod stream;
pub mod webhooks;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use gateway_core::environment::ProviderTier;
use gateway_runtime::Coordinator;
use gateway_services::auth::Authenticator;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use extract::BODY_LIMIT;

/// What the adapter needs from the process.
#[derive(Clone)]
pub struct ManagedAgents {
    pub coordinator: Coordinator,
    pub auth: Arc<Authenticator>,
    /// The sandbox provider environments get when they name none.
    pub default_provider: ProviderTier,
    /// The base URL executors reach this gateway at (a self-hosted session's `remote_url`).
    pub public_url: String,
    /// How often an idle stream sends a `: keep-alive` comment.
    pub keep_alive: Duration,
    /// Webhook endpoints (the `/v1/webhooks` extension) and their delivery.
    pub webhooks: Arc<webhooks::Webhooks>,
    /// Cancelled at shutdown: open streams end so the server can drain.
    pub shutdown: CancellationToken,
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

/// The `/v1` routes of the Managed Agents API (mount at the root).
pub fn router(api: ManagedAgents) -> Router {
    use handlers::{agents, environments, events, files, sessions, skills, webhook_endpoints, work};
    let routes = Router::new()
        .route("/v1/agents", post(agents::create).get(agents::list))
        .route("/v1/agents/{id}", get(agents::retrieve).post(agents::update))
        .route("/v1/agents/{id}/archive", post(agents::archive))
        .route("/v1/agents/{id}/versions", get(agents::versions))
        .route("/v1/environments", post(environments::create).get(environments::list))
        .route(
            "/v1/environments/{id}",
            get(environments::retrieve).post(environments::update).delete(environments::delete),
        )
        .route("/v1/environments/{id}/archive", post(environments::archive))
        .route("/v1/environments/{id}/work", get(work::list))
        .route("/v1/environments/{id}/work/poll", get(work::poll))
        .route("/v1/environments/{id}/work/stats", get(work::stats))
        .route("/v1/environments/{id}/work/{work_id}", get(work::retrieve).post(work::update))
        .route("/v1/environments/{id}/work/{work_id}/ack", post(work::ack))
        .route("/v1/environments/{id}/work/{work_id}/heartbeat", post(work::heartbeat))
        .route("/v1/environments/{id}/work/{work_id}/stop", post(work::stop))
        .route("/v1/environments/{id}/keys", post(work::create_key).get(work::list_keys))
        .route("/v1/environments/{id}/keys/{key_id}", axum::routing::delete(work::revoke_key))
        .route("/v1/sessions", post(sessions::create).get(sessions::list))
        .route("/v1/sessions/{id}", get(sessions::retrieve).post(sessions::update).delete(sessions::delete))
        .route("/v1/sessions/{id}/archive", post(sessions::archive))
        .route("/v1/sessions/{id}/resources", get(sessions::resources).post(sessions::add_resource))
        .route(
            "/v1/sessions/{id}/resources/{resource_id}",
            get(sessions::retrieve_resource).post(sessions::update_resource).delete(sessions::delete_resource),
        )
        // An upload is bounded by `[files] max_bytes` as it streams in, not by the JSON limit.
        .route("/v1/files", post(files::upload).layer(DefaultBodyLimit::disable()).get(files::list))
        .route("/v1/files/{id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::download))
        .route("/v1/skills", post(skills::create).get(skills::list))
        .route("/v1/skills/{id}", get(skills::retrieve).delete(skills::delete))
        .route("/v1/skills/{id}/versions", post(skills::create_version).get(skills::list_versions))
        .route("/v1/skills/{id}/versions/{version}", get(skills::retrieve_version).delete(skills::delete_version))
        .route("/v1/sessions/{id}/events", post(events::send).get(events::list))
        .route("/v1/sessions/{id}/events/stream", get(stream::stream))
        .route("/v1/sessions/{id}/stream", get(stream::stream))
        .route("/v1/webhooks", post(webhook_endpoints::create).get(webhook_endpoints::list))
        .route("/v1/webhooks/{id}", get(webhook_endpoints::retrieve).delete(webhook_endpoints::delete))
        .route("/v1/webhooks/{id}/enable", post(webhook_endpoints::enable))
        .route("/v1/openapi.json", get(openapi::serve))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(middleware::from_fn_with_state(api.clone(), auth::layer))
        .layer(middleware::from_fn_with_state(api.clone(), auth::admit))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(api);
    routes.layer(middleware::from_fn(request_id::layer))
}

/// The routes this adapter serves, as `(method, path template)`: the OpenAPI test checks
/// that every one is documented.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/agents"),
    ("get", "/v1/agents"),
    ("get", "/v1/agents/{agent_id}"),
    ("post", "/v1/agents/{agent_id}"),
    ("post", "/v1/agents/{agent_id}/archive"),
    ("get", "/v1/agents/{agent_id}/versions"),
    ("post", "/v1/environments"),
    ("get", "/v1/environments"),
    ("get", "/v1/environments/{environment_id}"),
    ("post", "/v1/environments/{environment_id}"),
    ("delete", "/v1/environments/{environment_id}"),
    ("post", "/v1/environments/{environment_id}/archive"),
    ("get", "/v1/environments/{environment_id}/work"),
    ("get", "/v1/environments/{environment_id}/work/poll"),
    ("get", "/v1/environments/{environment_id}/work/stats"),
    ("get", "/v1/environments/{environment_id}/work/{work_id}"),
    ("post", "/v1/environments/{environment_id}/work/{work_id}"),
    ("post", "/v1/environments/{environment_id}/work/{work_id}/ack"),
    ("post", "/v1/environments/{environment_id}/work/{work_id}/heartbeat"),
    ("post", "/v1/environments/{environment_id}/work/{work_id}/stop"),
    ("post", "/v1/environments/{environment_id}/keys"),
    ("get", "/v1/environments/{environment_id}/keys"),
    ("delete", "/v1/environments/{environment_id}/keys/{key_id}"),
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions"),
    ("get", "/v1/sessions/{session_id}"),
    ("post", "/v1/sessions/{session_id}"),
    ("delete", "/v1/sessions/{session_id}"),
    ("post", "/v1/sessions/{session_id}/archive"),
    ("get", "/v1/sessions/{session_id}/resources"),
    ("post", "/v1/sessions/{session_id}/resources"),
    ("get", "/v1/sessions/{session_id}/resources/{resource_id}"),
    ("post", "/v1/sessions/{session_id}/resources/{resource_id}"),
    ("delete", "/v1/sessions/{session_id}/resources/{resource_id}"),
    ("post", "/v1/files"),
    ("get", "/v1/files"),
    ("get", "/v1/files/{file_id}"),
    ("delete", "/v1/files/{file_id}"),
    ("get", "/v1/files/{file_id}/content"),
    ("post", "/v1/skills"),
    ("get", "/v1/skills"),
    ("get", "/v1/skills/{skill_id}"),
    ("delete", "/v1/skills/{skill_id}"),
    ("post", "/v1/skills/{skill_id}/versions"),
    ("get", "/v1/skills/{skill_id}/versions"),
    ("get", "/v1/skills/{skill_id}/versions/{version}"),
    ("delete", "/v1/skills/{skill_id}/versions/{version}"),
    ("post", "/v1/sessions/{session_id}/events"),
    ("get", "/v1/sessions/{session_id}/events"),
    ("get", "/v1/sessions/{session_id}/events/stream"),
    ("get", "/v1/sessions/{session_id}/stream"),
    ("post", "/v1/webhooks"),
    ("get", "/v1/webhooks"),
    ("get", "/v1/webhooks/{webhook_id}"),
    ("delete", "/v1/webhooks/{webhook_id}"),
    ("post", "/v1/webhooks/{webhook_id}/enable"),
    ("get", "/v1/openapi.json"),
];
