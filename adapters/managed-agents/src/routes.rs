//! The one list of operations this face serves. The router is built from it and
//! [`served_routes`] reads it, so the OpenAPI test checks the routes the router really has
//! instead of a hand-kept copy.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter, on};

use crate::ManagedAgents;
use crate::handlers::{agents, environments, events, files, sessions, skills, vaults, webhook_endpoints, work};
use crate::{openapi, stream};

/// The HTTP methods the API uses; each knows its filter and its OpenAPI name, so a route's
/// method is written once.
#[derive(Clone, Copy)]
enum Verb {
    Get,
    Post,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    /// The method as an OpenAPI path item names it.
    fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Delete => "delete",
        }
    }
}

/// One operation: a method on a path template as the router matches it (the first parameter is
/// `{id}`, which metrics report as the route label), and its handler.
pub(crate) struct Route {
    verb: Verb,
    pub(crate) path: &'static str,
    pub(crate) handler: MethodRouter<Arc<ManagedAgents>>,
}

impl Route {
    fn new<H, T>(verb: Verb, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, Arc<ManagedAgents>>,
        T: 'static,
    {
        Self { verb, path, handler: on(verb.filter(), handler) }
    }

    /// An upload is bounded by `[files] max_bytes` as it streams in, not by the JSON limit.
    fn unbounded_body(mut self) -> Self {
        self.handler = self.handler.layer(DefaultBodyLimit::disable());
        self
    }

    /// The path as the OpenAPI document writes it: `{id}` is named after the resource
    /// (`/v1/agents/{id}` is `/v1/agents/{agent_id}`).
    fn documented_path(&self) -> String {
        let resource = self.path.split('/').nth(2).unwrap_or_default();
        let singular = resource.strip_suffix('s').unwrap_or(resource);
        self.path.replacen("{id}", &format!("{{{singular}_id}}"), 1)
    }
}

/// Every operation of the Managed Agents API (`/v1`).
pub(crate) fn routes() -> Vec<Route> {
    use Verb::{Delete, Get, Post};
    vec![
        Route::new(Post, "/v1/agents", agents::create),
        Route::new(Get, "/v1/agents", agents::list),
        Route::new(Get, "/v1/agents/{id}", agents::retrieve),
        Route::new(Post, "/v1/agents/{id}", agents::update),
        Route::new(Post, "/v1/agents/{id}/archive", agents::archive),
        Route::new(Get, "/v1/agents/{id}/versions", agents::versions),
        Route::new(Post, "/v1/environments", environments::create),
        Route::new(Get, "/v1/environments", environments::list),
        Route::new(Get, "/v1/environments/{id}", environments::retrieve),
        Route::new(Post, "/v1/environments/{id}", environments::update),
        Route::new(Delete, "/v1/environments/{id}", environments::delete),
        Route::new(Post, "/v1/environments/{id}/archive", environments::archive),
        Route::new(Get, "/v1/environments/{id}/work", work::list),
        Route::new(Get, "/v1/environments/{id}/work/poll", work::poll),
        Route::new(Get, "/v1/environments/{id}/work/stats", work::stats),
        Route::new(Get, "/v1/environments/{id}/work/{work_id}", work::retrieve),
        Route::new(Post, "/v1/environments/{id}/work/{work_id}", work::update),
        Route::new(Post, "/v1/environments/{id}/work/{work_id}/ack", work::ack),
        Route::new(Post, "/v1/environments/{id}/work/{work_id}/heartbeat", work::heartbeat),
        Route::new(Post, "/v1/environments/{id}/work/{work_id}/stop", work::stop),
        Route::new(Post, "/v1/environments/{id}/keys", work::create_key),
        Route::new(Get, "/v1/environments/{id}/keys", work::list_keys),
        Route::new(Delete, "/v1/environments/{id}/keys/{key_id}", work::revoke_key),
        Route::new(Post, "/v1/sessions", sessions::create),
        Route::new(Get, "/v1/sessions", sessions::list),
        Route::new(Get, "/v1/sessions/{id}", sessions::retrieve),
        Route::new(Post, "/v1/sessions/{id}", sessions::update),
        Route::new(Delete, "/v1/sessions/{id}", sessions::delete),
        Route::new(Post, "/v1/sessions/{id}/archive", sessions::archive),
        Route::new(Post, "/v1/sessions/{id}/environment/release", sessions::release_environment),
        Route::new(Get, "/v1/sessions/{id}/resources", sessions::resources),
        Route::new(Post, "/v1/sessions/{id}/resources", sessions::add_resource),
        Route::new(Get, "/v1/sessions/{id}/resources/{resource_id}", sessions::retrieve_resource),
        Route::new(Post, "/v1/sessions/{id}/resources/{resource_id}", sessions::update_resource),
        Route::new(Delete, "/v1/sessions/{id}/resources/{resource_id}", sessions::delete_resource),
        Route::new(Post, "/v1/files", files::upload).unbounded_body(),
        Route::new(Get, "/v1/files", files::list),
        Route::new(Get, "/v1/files/{id}", files::retrieve),
        Route::new(Delete, "/v1/files/{id}", files::delete),
        Route::new(Get, "/v1/files/{id}/content", files::download),
        Route::new(Post, "/v1/skills", skills::create),
        Route::new(Get, "/v1/skills", skills::list),
        Route::new(Get, "/v1/skills/{id}", skills::retrieve),
        Route::new(Delete, "/v1/skills/{id}", skills::delete),
        Route::new(Post, "/v1/skills/{id}/versions", skills::create_version),
        Route::new(Get, "/v1/skills/{id}/versions", skills::list_versions),
        Route::new(Get, "/v1/skills/{id}/versions/{version}", skills::retrieve_version),
        Route::new(Delete, "/v1/skills/{id}/versions/{version}", skills::delete_version),
        Route::new(Post, "/v1/vaults", vaults::create),
        Route::new(Get, "/v1/vaults", vaults::list),
        Route::new(Get, "/v1/vaults/{id}", vaults::retrieve),
        Route::new(Post, "/v1/vaults/{id}", vaults::update),
        Route::new(Delete, "/v1/vaults/{id}", vaults::delete),
        Route::new(Post, "/v1/vaults/{id}/archive", vaults::archive),
        Route::new(Post, "/v1/vaults/{id}/credentials", vaults::create_credential),
        Route::new(Get, "/v1/vaults/{id}/credentials", vaults::list_credentials),
        Route::new(Get, "/v1/vaults/{id}/credentials/{credential_id}", vaults::retrieve_credential),
        Route::new(Post, "/v1/vaults/{id}/credentials/{credential_id}", vaults::update_credential),
        Route::new(Delete, "/v1/vaults/{id}/credentials/{credential_id}", vaults::delete_credential),
        Route::new(Post, "/v1/vaults/{id}/credentials/{credential_id}/archive", vaults::archive_credential),
        Route::new(Post, "/v1/vaults/{id}/credentials/{credential_id}/mcp_oauth_validate", vaults::validate_credential),
        Route::new(Post, "/v1/sessions/{id}/events", events::send),
        Route::new(Get, "/v1/sessions/{id}/events", events::list),
        Route::new(Get, "/v1/sessions/{id}/events/stream", stream::stream),
        Route::new(Get, "/v1/sessions/{id}/stream", stream::stream),
        Route::new(Post, "/v1/webhooks", webhook_endpoints::create),
        Route::new(Get, "/v1/webhooks", webhook_endpoints::list),
        Route::new(Get, "/v1/webhooks/{id}", webhook_endpoints::retrieve),
        Route::new(Delete, "/v1/webhooks/{id}", webhook_endpoints::delete),
        Route::new(Post, "/v1/webhooks/{id}/enable", webhook_endpoints::enable),
        Route::new(Get, "/v1/openapi.json", openapi::serve),
    ]
}

/// The routes this face serves, as `(method, path template)` in the OpenAPI document's
/// spelling: the OpenAPI test checks that every one is documented, and nothing else.
pub fn served_routes() -> Vec<(&'static str, String)> {
    routes().iter().map(|r| (r.verb.name(), r.documented_path())).collect()
}

#[cfg(test)]
mod tests {
    use super::served_routes;

    #[test]
    fn the_first_parameter_is_named_after_its_resource_and_the_others_are_kept() {
        let routes = served_routes();
        let has = |m: &str, p: &str| routes.iter().any(|(rm, rp)| *rm == m && rp == p);
        assert!(has("get", "/v1/agents/{agent_id}"));
        assert!(has("delete", "/v1/environments/{environment_id}/keys/{key_id}"));
        assert!(has("get", "/v1/skills/{skill_id}/versions/{version}"));
        assert!(has("post", "/v1/files"));
        assert!(!routes.iter().any(|(_, p)| p.contains("{id}")), "every {{id}} is renamed");
    }
}
