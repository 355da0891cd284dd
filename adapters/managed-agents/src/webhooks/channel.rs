//! Webhooks as a channel of the runtime's delivery service: what only webhooks know (the
//! fan-out of fed events to endpoints, Standard Webhooks signing, which endpoints may reach
//! private addresses, disabling an endpoint that keeps failing). Claiming, the pool, the SSRF
//! client, retries and metrics are the service's.

use std::collections::BTreeMap;

use async_trait::async_trait;
use gateway_core::WebhookId;
use gateway_runtime::delivery::{Channel, ChannelSettings, Failure, FeedStep, Outgoing, Reach, RetryPolicy};
use gateway_store::{
    Delivery as OutboxDelivery, EndpointOrigin, FeedSettlement, LIFECYCLE_FEED, NewDelivery, WebhookEndpoint,
};
use tracing::warn;

use super::{DISABLE_AFTER, REFRESH, Webhooks, payload, sign};

/// Outbox topics of webhooks: `webhook:<endpoint id>`.
const TOPICS: &str = "webhook:";
/// Most fed events one step fans out (one settlement).
const BATCH: u32 = 64;

impl Webhooks {
    /// Takes fed lifecycle events and settles the deliveries they make for `endpoints` (one
    /// per endpoint that wants the event), with the fed rows deleted, in one transaction
    /// (`Feeds::settle_feed`). Says how many events it took, and whether that was a full batch.
    async fn fan_out(&self, endpoints: &[WebhookEndpoint]) -> FeedStep {
        let feeds = self.coordinator.feeds();
        let taken = match feeds.take_feed(LIFECYCLE_FEED, BATCH).await {
            Ok(taken) => taken,
            Err(e) => {
                warn!(error = %e, "cannot take fed webhook events");
                return FeedStep::default();
            }
        };
        let deliveries = taken
            .fed
            .iter()
            .flat_map(|f| payload::deliveries(&f.event, endpoints))
            .map(|(ep, id, body)| NewDelivery {
                topic: format!("{TOPICS}{}", ep.spec.id),
                url: ep.spec.url.clone(),
                headers: BTreeMap::from([("webhook-id".to_owned(), id)]),
                body,
            })
            .collect();
        let settlement =
            FeedSettlement { taken: taken.fed.iter().map(|f| f.position).collect(), deliveries, ..Default::default() };
        match feeds.settle_feed(LIFECYCLE_FEED, settlement).await {
            Ok(true) => FeedStep::of(taken.fed.len(), BATCH as usize),
            // Another process settled these rows first: its deliveries stand.
            Ok(false) => FeedStep::default(),
            Err(e) => {
                warn!(error = %e, "cannot fan webhook events out");
                FeedStep::default()
            }
        }
    }

    fn endpoint_of(d: &OutboxDelivery) -> Option<WebhookId> {
        d.topic.strip_prefix(TOPICS).and_then(|id| WebhookId::parse(id).ok())
    }
}

#[async_trait]
impl Channel for Webhooks {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn span_name(&self) -> &'static str {
        "webhook POST"
    }

    fn topics(&self) -> &'static str {
        TOPICS
    }

    fn settings(&self) -> ChannelSettings {
        let delivery = &self.settings.delivery;
        ChannelSettings {
            max_concurrent: delivery.max_concurrent,
            timeout: delivery.timeout(),
            retry: RetryPolicy::doubling(delivery.max_backoff(), None),
            allow_private: self.settings.allow_private_targets,
        }
    }

    /// Reads the endpoints again every `REFRESH`, then fans fed events out. Without endpoints
    /// nothing is fed or queued: no write for the store's writer. (Deliveries queued before the
    /// last endpoint went are failed once one exists again.)
    async fn feed(&self) -> Option<FeedStep> {
        let due = {
            let mut refreshed = self.refreshed.lock().unwrap_or_else(|p| p.into_inner());
            let due = refreshed.elapsed() >= REFRESH;
            if due {
                *refreshed = tokio::time::Instant::now();
            }
            due
        };
        if due {
            self.refresh_feed().await;
        }
        let endpoints = self.endpoints.read().unwrap_or_else(|p| p.into_inner()).clone();
        if endpoints.is_empty() {
            return None;
        }
        Some(self.fan_out(&endpoints).await)
    }

    async fn prepare(&self, d: &OutboxDelivery) -> Result<Outgoing, Failure> {
        let Some(endpoint_id) = Self::endpoint_of(d) else {
            return Err(Failure::Gone("not a webhook topic".into()));
        };
        let endpoint = match self.coordinator.webhooks().get_webhook(&endpoint_id).await {
            Ok(e) => e,
            Err(e) => return Err(Failure::Gone(format!("endpoint gone: {e}"))),
        };
        if !endpoint.enabled {
            return Err(Failure::Gone("endpoint disabled".into()));
        }
        let secret = self
            .secrets
            .open(&endpoint.spec.secret)
            .map_err(|e| Failure::Fail(format!("cannot open its secret: {e}")))?;
        let id = d.headers.get("webhook-id").cloned().unwrap_or_default();
        // The receiver compares this with its own clock (within five minutes): the wall clock of
        // the attempt, not a stored time.
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let signature = sign::signature(&secret.0, &id, timestamp, &d.body)
            .ok_or_else(|| Failure::Fail("its secret is not a signing key".into()))?;
        let reach = match endpoint.spec.origin {
            EndpointOrigin::Config => Reach::Any,
            EndpointOrigin::Api => Reach::Public,
        };
        Ok(Outgoing {
            url: d.url.clone(),
            reach,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("user-agent".into(), concat!("gateway-webhooks/", env!("CARGO_PKG_VERSION")).into()),
                ("webhook-id".into(), id),
                ("webhook-timestamp".into(), timestamp.to_string()),
                ("webhook-signature".into(), signature),
            ],
            body: d.body.clone(),
        })
    }

    /// Counts the endpoint's failures in a row, and disables it after [`DISABLE_AFTER`].
    async fn attempted(&self, d: &OutboxDelivery, delivered: bool) {
        let Some(endpoint) = Self::endpoint_of(d) else { return };
        match self.coordinator.webhooks().record_webhook_attempt(&endpoint, delivered, DISABLE_AFTER).await {
            Ok(after) if !after.enabled && !delivered && after.consecutive_failures == DISABLE_AFTER => {
                warn!(endpoint = %endpoint, failures = after.consecutive_failures, "webhook endpoint disabled")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot record a webhook attempt"),
        }
    }
}

/// The lease and wait rules webhooks had before the delivery service: kept as a check that
/// the service's rules are the same.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::WebhookDelivery;
    use std::time::Duration;

    #[test]
    fn webhook_retries_double_from_a_second_up_to_max_backoff_and_never_give_up() {
        let delivery = WebhookDelivery { max_backoff_ms: 5_000, ..WebhookDelivery::default() };
        let retry = RetryPolicy::doubling(delivery.max_backoff(), None);
        let waits: Vec<Duration> = (1..=5)
            .map(|attempt| match retry.after_failure(attempt, "e") {
                gateway_services::metrics::Settle::Retry { after, .. } => after,
                other => panic!("gave up: {other:?}"),
            })
            .collect();
        let s = Duration::from_secs;
        assert_eq!(waits, [s(1), s(2), s(4), s(5), s(5)]);
    }
}
