//! One channel's deliverer: the loop that feeds, claims and starts attempts, and the attempt
//! itself (prepare, SSRF rule, send, judge, settle).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use super::pool::DeliveryPool;
use super::{Channel, Failure, Outgoing, Reach};
use crate::Coordinator;
use gateway_services::metrics::Settle;
use gateway_services::ssrf;
use gateway_store::{Delivery as OutboxDelivery, DeliveryClaim};

/// How long the loop waits before looking again once the feed has nothing left behind: the
/// most a fed event waits to become deliveries, and a queued delivery for its first attempt
/// (unless an attempt ends first). Under load the rows of the commits made meanwhile are
/// settled in one step instead of one step per commit (a settlement and a claim: two writes
/// each on SQLite's single writer).
const IDLE: Duration = Duration::from_millis(200);

pub(super) struct Deliverer {
    coordinator: Coordinator,
    channel: Arc<dyn Channel>,
    owner: String,
    /// For [`Reach::Any`] targets.
    trusted: reqwest::Client,
    /// For [`Reach::Public`] targets: refuses non-public addresses at connect time.
    guarded: reqwest::Client,
}

impl Deliverer {
    pub(super) fn new(coordinator: Coordinator, channel: Arc<dyn Channel>, owner: String) -> Arc<Self> {
        let settings = channel.settings();
        let timeout = settings.timeout.max(Duration::from_millis(1));
        Arc::new(Self {
            coordinator,
            trusted: ssrf::client(true, timeout),
            guarded: ssrf::client(settings.allow_private, timeout),
            channel,
            owner,
        })
    }

    /// Feeds and delivers until `stop`: each claimed delivery is an attempt of its own in the
    /// pool, claimed only as places free up, and the loop goes on while attempts are in
    /// flight. At `stop`, attempts in flight are ended (their leases expire and they are made
    /// again).
    pub(super) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let settings = self.channel.settings();
        let mut pool = DeliveryPool::new(settings.max_concurrent);
        loop {
            let free = pool.free();
            let step = self.channel.feed().await;
            let claimed = match step {
                Some(_) if free > 0 => self.claim(free, settings.lease()).await,
                _ => vec![],
            };
            for d in claimed {
                let me = Arc::clone(&self);
                pool.spawn(async move { me.attempt(d).await });
            }
            // Feed again at once only if the feed left rows behind. Otherwise wait, for the rows
            // of the commits to come to gather into one step, for an attempt to end (a place
            // for deliveries left due), or for the stop.
            if step.is_some_and(|s| s.full) {
                if stop.is_cancelled() {
                    break;
                }
                continue;
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(IDLE) => {}
                _ = pool.next_done() => {}
            }
        }
        pool.shutdown().await;
    }

    /// Leases up to `free` due deliveries of the channel's topics (none if the claim fails:
    /// the next round tries again).
    async fn claim(&self, free: usize, lease: Duration) -> Vec<OutboxDelivery> {
        let claim = DeliveryClaim {
            owner: &self.owner,
            topics: self.channel.topics(),
            limit: u32::try_from(free).unwrap_or(u32::MAX),
            lease,
        };
        self.coordinator.outbox().claim_deliveries(claim).await.unwrap_or_else(|e| {
            warn!(channel = self.channel.name(), error = %e, "cannot claim deliveries");
            vec![]
        })
    }

    /// Settles one attempt in the outbox and the metrics.
    async fn settle(&self, d: &OutboxDelivery, took: Duration, settle: Settle<'_>) {
        if let Err(e) = self.coordinator.settle_delivery(self.channel.name(), &d.id, took, settle).await {
            warn!(channel = self.channel.name(), topic = %d.topic, error = %e,
                "cannot record a delivery's outcome; its lease will expire");
        }
    }

    pub(super) async fn attempt(&self, d: OutboxDelivery) {
        let channel = self.channel.name();
        let attempt = d.attempts + 1;
        let span = tracing::info_span!(
            "delivery",
            otel.name = self.channel.span_name(),
            otel.kind = "client",
            http.request.method = "POST",
            delivery.channel = channel,
            delivery.topic = %d.topic,
            delivery.attempt = attempt,
        );
        let started = Instant::now();
        let result = self.send(&d).instrument(span).await;
        let took = started.elapsed();
        let retry = self.channel.settings().retry;
        match &result {
            Ok(()) => {
                debug!(channel, topic = %d.topic, attempt, "delivered");
                self.settle(&d, took, Settle::Delivered).await;
            }
            Err(Failure::Gone(e)) => {
                debug!(channel, topic = %d.topic, error = %e, "delivery target gone; given up");
                return self.settle(&d, Duration::ZERO, Settle::Failed { error: e }).await;
            }
            Err(Failure::Fail(e)) => {
                warn!(channel, topic = %d.topic, attempt, error = %e, "delivery refused; not retried");
                self.settle(&d, took, Settle::Failed { error: e }).await;
            }
            Err(Failure::Retry(e)) => {
                let settle = retry.after_failure(attempt, e);
                if matches!(settle, Settle::Failed { .. }) {
                    warn!(channel, topic = %d.topic, attempt, error = %e, "delivery failed; giving up");
                } else {
                    info!(channel, topic = %d.topic, attempt, error = %e, "delivery failed; will retry");
                }
                self.settle(&d, took, settle).await;
            }
        }
        self.channel.attempted(&d, result.is_ok()).await;
    }

    /// One request: prepared by the channel, checked against the SSRF rule, sent with the
    /// current trace's headers, and judged by the channel.
    async fn send(&self, d: &OutboxDelivery) -> Result<(), Failure> {
        let Outgoing { url, reach, headers, body } = self.channel.prepare(d).await?;
        let client = match reach {
            Reach::Any => &self.trusted,
            Reach::Public => {
                ssrf::check_url(&url, self.channel.settings().allow_private)
                    .map_err(|e| Failure::Fail(e.to_string()))?;
                &self.guarded
            }
        };
        let mut request = client.post(&url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        // The receiver may continue the delivery's trace (W3C headers).
        if let Some(trace) = gateway_core::trace::current() {
            for (name, value) in trace.headers() {
                request = request.header(name, value);
            }
        }
        let response = request.body(body).send().await.map_err(|e| Failure::Retry(ssrf::send_failure(e)))?;
        self.channel.judge(response.status().as_u16())
    }
}
