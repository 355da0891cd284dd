//! Webhooks (docs/adr/0013): signed, at-least-once notifications of session lifecycle events
//! to the application's endpoints.
//!
//! The path of one webhook: the commit that appends a lifecycle event also feeds it (the
//! store's event feed, while any endpoint is enabled); this service's loop turns fed events
//! into one outbox delivery per interested endpoint, in one transaction; the outbox then
//! leases, retries and orders them per endpoint (topic `webhook:<endpoint id>`). Each attempt
//! is signed when it is sent (Standard Webhooks: the timestamp is the attempt's), with the id
//! the delivery was made with, so every retry carries the same `webhook-id`.
//!
//! Attempts run in a pool ([`pool::DeliveryPool`]): at most
//! `webhook_delivery.max_concurrent` at once, each bounded by `webhook_delivery.timeout_ms`,
//! one per endpoint (the outbox orders each endpoint's deliveries), claimed only as places
//! free up, so a slow receiver delays only its own deliveries.
//!
//! Retried: network errors, 408, 429 and 5xx. A redirect is never followed (it fails the
//! delivery, like any other answer). After `DISABLE_AFTER` failed attempts in a row an
//! endpoint is disabled until it is re-enabled. Endpoints from the config file are the
//! operator's and may be private or loopback; endpoints registered through the API reach
//! public addresses only, unless `allow_private_webhook_targets` says otherwise.

mod payload;
mod pool;
pub mod sign;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::WebhookId;
use gateway_runtime::metrics::Settle;
use gateway_runtime::{
    Coordinator, EndpointOrigin, NewDelivery, NewEndpoint, OutboxDelivery, SecretBox, WebhookEndpoint, ssrf,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

pub use payload::TYPES;

/// Failed attempts in a row after which an endpoint is disabled.
pub const DISABLE_AFTER: u32 = 20;
/// The channel webhook deliveries are counted under (`gateway_delivery_duration_seconds`).
const CHANNEL: &str = "webhook";
/// Outbox topics of webhooks: `webhook:<endpoint id>`.
const TOPICS: &str = "webhook:";
/// How often the loop looks again when it found nothing to do.
const IDLE: Duration = Duration::from_millis(200);
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

    /// How long a claimed delivery is leased: well past its attempt's timeout, so another
    /// process takes it over only once this one is surely done with it.
    fn lease(&self) -> Duration {
        Duration::from_secs(60).max(self.timeout().saturating_mul(2))
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

/// The webhooks of this process: the endpoints API's backing and the delivery loop.
pub struct Webhooks {
    coordinator: Coordinator,
    secrets: SecretBox,
    settings: WebhookSettings,
    /// For the operator's endpoints: any address.
    trusted: reqwest::Client,
    /// For endpoints registered through the API.
    registered: reqwest::Client,
    /// The endpoints as last read: what fan-outs use. Read again after every change made
    /// here and every `REFRESH` (for changes made by other processes).
    endpoints: std::sync::RwLock<Vec<WebhookEndpoint>>,
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
            trusted: ssrf::client(true, settings.delivery.timeout()),
            registered: ssrf::client(settings.allow_private_targets, settings.delivery.timeout()),
            coordinator,
            secrets,
            settings,
            endpoints: Default::default(),
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

    // ---- delivery ----

    /// Fans fed events out and delivers what is due, until `stop`: each claimed delivery is an
    /// attempt of its own in the pool, and the loop goes on while attempts are in flight. At
    /// `stop`, attempts in flight are ended (their leases expire and they are made again).
    pub async fn run(self: Arc<Self>, owner: String, stop: CancellationToken) {
        let mut pool = pool::DeliveryPool::new(self.settings.delivery.max_concurrent);
        let mut refreshed = tokio::time::Instant::now();
        loop {
            if refreshed.elapsed() >= REFRESH {
                self.refresh_feed().await;
                refreshed = tokio::time::Instant::now();
            }
            let endpoints = self.endpoints.read().unwrap_or_else(|p| p.into_inner()).clone();
            let free = pool.free();
            // Without endpoints nothing is fed or queued: no write for the store's writer.
            // (Deliveries queued before the last endpoint went are failed once one exists again.)
            let (fed, claimed) = if endpoints.is_empty() {
                (0, vec![])
            } else {
                let fed = self.fan_out(&endpoints).await;
                let claimed = if free == 0 {
                    vec![]
                } else {
                    let limit = u32::try_from(free).unwrap_or(u32::MAX);
                    let lease = self.settings.delivery.lease();
                    self.coordinator.outbox().claim_deliveries(&owner, TOPICS, limit, lease).await.unwrap_or_else(|e| {
                        warn!(error = %e, "cannot claim webhook deliveries");
                        vec![]
                    })
                };
                (fed, claimed)
            };
            let started = claimed.len();
            for d in claimed {
                let me = Arc::clone(&self);
                pool.spawn(async move { me.deliver(d).await });
            }
            // Look again at once only if there may be more to do now and a place to do it in.
            if (fed == 0 && started == 0) || started == free {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(IDLE) => {}
                    _ = pool.next_done() => {}
                }
            } else if stop.is_cancelled() {
                break;
            }
        }
        pool.shutdown().await;
    }

    async fn fan_out(&self, endpoints: &[WebhookEndpoint]) -> usize {
        let fan = |e: &gateway_core::event::Event| {
            payload::deliveries(e, endpoints)
                .into_iter()
                .map(|(ep, id, body)| NewDelivery {
                    topic: format!("{TOPICS}{}", ep.id),
                    url: ep.url.clone(),
                    headers: BTreeMap::from([("webhook-id".to_owned(), id)]),
                    body,
                })
                .collect()
        };
        match self.coordinator.webhooks().fan_out_feed(64, &fan).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "cannot fan webhook events out");
                0
            }
        }
    }

    /// Settles one attempt in the outbox and the metrics ([`Coordinator::settle_delivery`]).
    async fn settle(&self, d: &OutboxDelivery, took: Duration, settle: Settle<'_>) {
        if let Err(e) = self.coordinator.settle_delivery(CHANNEL, &d.id, took, settle).await {
            warn!(error = %e, "cannot record a webhook delivery's outcome; its lease will expire");
        }
    }

    async fn deliver(&self, d: OutboxDelivery) {
        let Some(endpoint_id) = d.topic.strip_prefix(TOPICS).and_then(|id| WebhookId::parse(id).ok()) else {
            return self.settle(&d, Duration::ZERO, Settle::Failed { error: "not a webhook topic" }).await;
        };
        let endpoint = match self.coordinator.webhooks().get_webhook(&endpoint_id).await {
            Ok(e) => e,
            Err(e) => {
                let error = format!("endpoint gone: {e}");
                return self.settle(&d, Duration::ZERO, Settle::Failed { error: &error }).await;
            }
        };
        if !endpoint.enabled {
            return self.settle(&d, Duration::ZERO, Settle::Failed { error: "endpoint disabled" }).await;
        }
        let span = tracing::info_span!(
            "webhook_delivery",
            otel.name = "webhook POST",
            otel.kind = "client",
            http.request.method = "POST",
            webhook.endpoint = %endpoint.id,
            webhook.attempt = d.attempts + 1,
        );
        let started = std::time::Instant::now();
        let attempt = self.post(&endpoint, &d).instrument(span).await;
        let took = started.elapsed();
        let ok = attempt.is_ok();
        match &attempt {
            Ok(()) => {
                debug!(endpoint = %endpoint.id, attempts = d.attempts + 1, "webhook delivered");
                self.settle(&d, took, Settle::Delivered).await
            }
            Err(Attempt::Retry(e)) => {
                info!(endpoint = %endpoint.id, attempt = d.attempts + 1, error = %e, "webhook failed; will retry");
                self.settle(&d, took, Settle::Retry { after: self.backoff(d.attempts), error: e }).await
            }
            Err(Attempt::Fail(e)) => {
                warn!(endpoint = %endpoint.id, error = %e, "webhook refused; not retried");
                self.settle(&d, took, Settle::Failed { error: e }).await
            }
        }
        match self.coordinator.webhooks().record_webhook_attempt(&endpoint.id, ok, DISABLE_AFTER).await {
            Ok(after) if !after.enabled && endpoint.enabled => {
                warn!(endpoint = %endpoint.id, failures = after.consecutive_failures, "webhook endpoint disabled")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot record a webhook attempt"),
        }
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let max = Duration::from_millis(self.settings.delivery.max_backoff_ms.max(1));
        Duration::from_secs(1).saturating_mul(1 << attempts.min(16)).min(max)
    }

    async fn post(&self, endpoint: &WebhookEndpoint, d: &OutboxDelivery) -> Result<(), Attempt> {
        let secret =
            self.secrets.open(&endpoint.secret).map_err(|e| Attempt::Fail(format!("cannot open its secret: {e}")))?;
        let id = d.headers.get("webhook-id").cloned().unwrap_or_default();
        // The receiver compares this with its own clock (within five minutes): the wall clock of
        // the attempt, not a stored time.
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let signature = sign::signature(&secret.0, &id, timestamp, &d.body)
            .ok_or_else(|| Attempt::Fail("its secret is not a signing key".into()))?;
        let client = match endpoint.origin {
            EndpointOrigin::Config => &self.trusted,
            EndpointOrigin::Api => {
                ssrf::check_url(&d.url, self.settings.allow_private_targets)
                    .map_err(|e| Attempt::Fail(e.to_string()))?;
                &self.registered
            }
        };
        let mut request = client.post(&d.url);
        // The receiver may continue the delivery's trace (W3C headers).
        if let Some(trace) = gateway_core::trace::current() {
            for (name, value) in trace.headers() {
                request = request.header(name, value);
            }
        }
        let response = request
            .header("content-type", "application/json")
            .header("user-agent", concat!("gateway-webhooks/", env!("CARGO_PKG_VERSION")))
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(d.body.clone())
            .send()
            .await
            .map_err(|e| Attempt::Retry(ssrf::send_failure(e)))?;
        let status = response.status();
        match status.as_u16() {
            200..=299 => Ok(()),
            408 | 429 | 500..=599 => Err(Attempt::Retry(format!("HTTP {status}"))),
            300..=399 => Err(Attempt::Fail(format!("HTTP {status}: redirects are not followed"))),
            _ => Err(Attempt::Fail(format!("HTTP {status}"))),
        }
    }
}

enum Attempt {
    Retry(String),
    Fail(String),
}
