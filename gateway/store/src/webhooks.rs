//! Webhook endpoints, and the switch of the lifecycle feed that hands committed lifecycle
//! events to them (docs/adr/0013). The store knows neither webhook types nor payloads: an
//! adapter takes the fed events (`crate::Feeds`, channel [`crate::LIFECYCLE_FEED`]) and maps
//! each to its deliveries.

use async_trait::async_trait;
use gateway_core::event::EventKind;
use gateway_core::{Timestamp, WebhookId};

use crate::error::Result;

/// The kinds of event the feed carries while any endpoint is enabled: a turn's start and end,
/// a termination, and a self-hosted session's connection changes and requests.
pub const FEED_KINDS: [EventKind; 5] = [
    EventKind::TurnStarted,
    EventKind::TurnEnded,
    EventKind::SessionTerminated,
    EventKind::EnvironmentConnection,
    EventKind::ConnectionRequested,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointOrigin {
    /// The operator's config file: trusted to reach private and loopback addresses.
    Config,
    /// Registered through the API: public addresses only, unless the operator allows more.
    Api,
}

impl EndpointOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointOrigin::Config => "config",
            EndpointOrigin::Api => "api",
        }
    }
}

/// A registered endpoint: what it was registered with, and how its deliveries have gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEndpoint {
    pub spec: NewEndpoint,
    pub enabled: bool,
    pub consecutive_failures: u32,
    pub created_at: Timestamp,
    pub disabled_at: Option<Timestamp>,
}

/// An endpoint to register (or, for one from the configuration, to put in place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEndpoint {
    pub id: WebhookId,
    pub origin: EndpointOrigin,
    pub url: String,
    /// The signing secret, sealed by the caller (the store never sees it in clear).
    pub secret: String,
    /// Empty: every type.
    pub event_types: Vec<String>,
    pub description: Option<String>,
}

#[async_trait]
pub trait Webhooks: Send + Sync {
    /// Whether commits feed lifecycle events (on while any endpoint is enabled: without one,
    /// a turn writes nothing more).
    fn set_event_feed(&self, on: bool);

    /// Creates an endpoint, or replaces the address, secret and types of the one with its id
    /// (a config endpoint at start), keeping its failure record.
    async fn put_webhook(&self, endpoint: NewEndpoint) -> Result<WebhookEndpoint>;
    /// Registers an endpoint created through the API by `creator` (an API key's id; keyless
    /// local clients share one name), refused (`Guard::WebhookLimit`) when `creator` already
    /// registered `max_per_creator` that still exist. Exact on SQLite; on PostgreSQL
    /// registrations by one creator at the same moment may each see room (at most one more per
    /// registration in flight).
    async fn register_webhook(
        &self,
        endpoint: NewEndpoint,
        creator: &str,
        max_per_creator: u64,
    ) -> Result<WebhookEndpoint>;
    /// Deletes the config endpoints not in `keep` (removed from the file).
    async fn prune_config_webhooks(&self, keep: &[WebhookId]) -> Result<()>;
    async fn list_webhooks(&self) -> Result<Vec<WebhookEndpoint>>;
    async fn get_webhook(&self, id: &WebhookId) -> Result<WebhookEndpoint>;
    async fn delete_webhook(&self, id: &WebhookId) -> Result<bool>;
    /// Re-enables an endpoint (its failure count starts again) or disables it.
    async fn set_webhook_enabled(&self, id: &WebhookId, enabled: bool) -> Result<WebhookEndpoint>;
    /// Records a delivery attempt: a success clears the failure count; a failure adds one,
    /// and the `disable_after`-th failure in a row disables the endpoint.
    async fn record_webhook_attempt(&self, id: &WebhookId, ok: bool, disable_after: u32) -> Result<WebhookEndpoint>;
}
