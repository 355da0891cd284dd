//! Webhooks (docs/adr/0013): signed, at-least-once notifications of session lifecycle events
//! to the application's endpoints.
//!
//! The path of one webhook: the commit that appends a lifecycle event also feeds it (the
//! store's event feed, while any endpoint is enabled); the webhook channel ([`channel`]) turns
//! fed events into one outbox delivery per interested endpoint, in one transaction; the
//! outbox then leases, retries and orders them per endpoint (topic `webhook:<endpoint id>`).
//! Each attempt is signed when it is sent (Standard Webhooks: the timestamp is the attempt's),
//! with the id the delivery was made with, so every retry carries the same `webhook-id`.
//!
//! The attempts are made by the runtime's delivery service
//! ([`gateway_runtime::delivery::Deliveries`]): at most `webhook_delivery.max_concurrent` at
//! once, each bounded by `webhook_delivery.timeout_ms`, one per endpoint, retried with the
//! one doubling backoff up to `webhook_delivery.max_backoff_ms`.
//!
//! Retried: network errors, 408, 429 and 5xx. A redirect is never followed (it fails the
//! delivery, like any other answer). After `DISABLE_AFTER` failed attempts in a row an
//! endpoint is disabled until it is re-enabled. Endpoints from the config file are the
//! operator's and may be private or loopback; endpoints registered through the API reach
//! public addresses only, unless `allow_private_webhook_targets` says otherwise.

pub mod channel;
mod payload;
pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use gateway_core::WebhookId;
use gateway_runtime::Coordinator;
use gateway_services::{SecretBox, ssrf};
use gateway_store::{EndpointOrigin, NewEndpoint, WebhookEndpoint};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

pub use payload::TYPES;

/// Failed attempts in a row after which an endpoint is disabled.
pub const DISABLE_AFTER: u32 = 20;
/// How often whether any endpoint is enabled is read again (another process may add one).
const REFRESH: Duration = Duration::from_secs(5);

/// `[[webhooks]]`: an endpoint of the operator's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    pub url: String,
    /// `whsec_` and base64 of the signing key.
    pub secret: String,
    /// The webhook types to send; empty: all.
    #[serde(default)]
    pub event_types: Vec<String>,
}

/// `[webhook_delivery]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookDelivery {
    /// The longest wait between two attempts (the backoff doubles from one second).
    pub max_backoff_ms: u64,
    /// Endpoints one API key may register through `POST /v1/webhooks` (keyless local clients
    /// count as one key; the config file's endpoints count against none).
    pub max_endpoints_per_key: u64,
    /// Delivery attempts in flight at once in this process, all endpoints together. An endpoint
    /// has at most one in flight: its deliveries are made in order.
    pub max_concurrent: usize,
    /// The longest one attempt may take, from connecting to the receiver's answer.
    pub timeout_ms: u64,
}

impl Default for WebhookDelivery {
    fn default() -> Self {
        Self { max_backoff_ms: 60_000, max_endpoints_per_key: 100, max_concurrent: 64, timeout_ms: 10_000 }
    }
}

impl WebhookDelivery {
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    fn max_backoff(&self) -> Duration {
        Duration::from_millis(self.max_backoff_ms.max(1))
    }
}

#[derive(Debug, Clone, Default)]
pub struct WebhookSettings {
    pub endpoints: Vec<WebhookConfig>,
    /// Let endpoints registered through the API reach private and loopback addresses.
    pub allow_private_targets: bool,
    pub delivery: WebhookDelivery,
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Runtime(#[from] gateway_runtime::RuntimeError),
}

impl From<gateway_runtime::error::StoreError> for WebhookError {
    fn from(e: gateway_runtime::error::StoreError) -> Self {
        WebhookError::Runtime(e.into())
    }
}

/// The webhooks of this process: the endpoints API's backing and the delivery channel
/// ([`channel`]).
pub struct Webhooks {
    coordinator: Coordinator,
    secrets: SecretBox,
    settings: WebhookSettings,
    /// The endpoints as last read: what fan-outs use. Read again after every change made
    /// here and every `REFRESH` (for changes made by other processes).
    endpoints: std::sync::RwLock<Vec<WebhookEndpoint>>,
    /// When the endpoints were last read.
    refreshed: std::sync::Mutex<tokio::time::Instant>,
}

/// A config endpoint's id: stable across restarts, derived from its URL.
fn config_id(url: &str) -> WebhookId {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let digest = Sha256::digest(url.as_bytes());
    let body: String = digest.iter().take(22).map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char).collect();
    WebhookId::parse(&format!("whk_{body}")).unwrap_or_else(|_| WebhookId::new())
}

fn check_types(types: &[String]) -> Result<(), WebhookError> {
    match types.iter().find(|t| !TYPES.contains(&t.as_str())) {
        Some(t) => Err(WebhookError::Invalid(format!("event_types: {t:?} is not one of {}", TYPES.join(", ")))),
        None => Ok(()),
    }
}

impl Webhooks {
    /// Writes the config file's endpoints (and forgets those removed from it), then turns the
    /// event feed on if any endpoint is enabled.
    pub async fn start(
        coordinator: Coordinator,
        secrets: SecretBox,
        settings: WebhookSettings,
    ) -> Result<Arc<Self>, WebhookError> {
        let store = coordinator.webhooks();
        let mut keep = Vec::new();
        for c in &settings.endpoints {
            reqwest::Url::parse(&c.url)
                .map_err(|e| WebhookError::Invalid(format!("[[webhooks]] url {:?}: {e}", c.url)))?;
            if !sign::is_valid_secret(&c.secret) {
                return Err(WebhookError::Invalid(format!(
                    "[[webhooks]] {}: secret must be whsec_ and the base64 of at least 16 bytes",
                    c.url
                )));
            }
            check_types(&c.event_types)?;
            let id = config_id(&c.url);
            store
                .put_webhook(NewEndpoint {
                    id: id.clone(),
                    origin: EndpointOrigin::Config,
                    url: c.url.clone(),
                    secret: secrets.seal(&c.secret),
                    event_types: c.event_types.clone(),
                    description: Some("from the config file".into()),
                })
                .await?;
            keep.push(id);
        }
        store.prune_config_webhooks(&keep).await?;
        let me = Arc::new(Self {
            coordinator,
            secrets,
            settings,
            endpoints: Default::default(),
            refreshed: std::sync::Mutex::new(tokio::time::Instant::now()),
        });
        me.refresh_feed().await;
        if !keep.is_empty() {
            info!(endpoints = keep.len(), "webhook endpoints from the config file");
        }
        Ok(me)
    }

    /// Reads the endpoints again, and turns the event feed on while any is enabled.
    async fn refresh_feed(&self) {
        match self.coordinator.webhooks().list_webhooks().await {
            Ok(all) => {
                self.coordinator.webhooks().set_event_feed(all.iter().any(|e| e.enabled));
                *self.endpoints.write().unwrap_or_else(|p| p.into_inner()) = all;
            }
            Err(e) => warn!(error = %e, "cannot read webhook endpoints"),
        }
    }

    // ---- the endpoints API ----

    /// Registers an endpoint for `creator` (an API key's id), within its
    /// `max_endpoints_per_key`; returns it and its secret (shown once).
    pub async fn create(
        &self,
        url: &str,
        event_types: Vec<String>,
        description: Option<String>,
        creator: &str,
    ) -> Result<(WebhookEndpoint, String), WebhookError> {
        ssrf::check_url(url, self.settings.allow_private_targets)
            .map_err(|e| WebhookError::Invalid(format!("url: {e}")))?;
        check_types(&event_types)?;
        let secret = sign::new_secret();
        let endpoint = self
            .coordinator
            .webhooks()
            .register_webhook(
                NewEndpoint {
                    id: WebhookId::new(),
                    origin: EndpointOrigin::Api,
                    url: url.to_owned(),
                    secret: self.secrets.seal(&secret),
                    event_types,
                    description,
                },
                creator,
                self.settings.delivery.max_endpoints_per_key,
            )
            .await?;
        self.refresh_feed().await;
        Ok((endpoint, secret))
    }

    pub async fn list(&self) -> Result<Vec<WebhookEndpoint>, WebhookError> {
        Ok(self.coordinator.webhooks().list_webhooks().await?)
    }

    pub async fn get(&self, id: &WebhookId) -> Result<WebhookEndpoint, WebhookError> {
        Ok(self.coordinator.webhooks().get_webhook(id).await?)
    }

    pub async fn delete(&self, id: &WebhookId) -> Result<bool, WebhookError> {
        let gone = self.coordinator.webhooks().delete_webhook(id).await?;
        self.refresh_feed().await;
        Ok(gone)
    }

    pub async fn enable(&self, id: &WebhookId) -> Result<WebhookEndpoint, WebhookError> {
        let e = self.coordinator.webhooks().set_webhook_enabled(id, true).await?;
        self.refresh_feed().await;
        Ok(e)
    }
}
