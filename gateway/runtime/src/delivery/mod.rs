//! Outbound delivery: one service that makes the outbox's HTTP deliveries for every channel
//! (webhooks, A2A push notifications), with one retry policy, one pool and one SSRF-guarded
//! client.
//!
//! A channel says what it knows and nothing else ([`Channel`]): which outbox topics are its
//! own, how to turn a queued delivery into a request (signing, opening sealed credentials),
//! how to judge the receiver's answer, and what to record once an attempt is over. The
//! service owns the rest, once for all channels: claiming due deliveries as places free up
//! ([`pool::DeliveryPool`], at most `max_concurrent` in flight per channel, one per topic by
//! the outbox's rule, so a slow receiver delays only its own deliveries), the SSRF rule
//! (checked before sending and again at connect time, [`gateway_services::ssrf`]), the attempt's time
//! limit, its span and W3C trace headers, the backoff between attempts ([`RetryPolicy`]), and
//! settling the outcome in the outbox and the metrics in one call
//! ([`crate::Coordinator::settle_delivery`], labelled with the channel's name).
//!
//! Correctness does not depend on this process staying up: a claimed delivery is leased well
//! past its attempt's time limit, so a process that stops mid-attempt leaves it to whoever
//! claims it after the lease expires (at least once; receivers must be idempotent).

mod deliverer;
pub mod pool;
pub mod retry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::Coordinator;
use gateway_store::Delivery as OutboxDelivery;
pub use retry::RetryPolicy;

/// Which addresses a request may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Any address: a target the operator configured.
    Any,
    /// Public addresses only, unless the channel's settings allow private targets: a target a
    /// client named.
    Public,
}

/// One attempt's request, as the channel made it from a queued delivery.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub url: String,
    pub reach: Reach,
    /// Header names and values in clear (the service adds the trace headers).
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Why an attempt did not deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Try again after the policy's backoff, while it has attempts left.
    Retry(String),
    /// Never try again (refused, not retryable).
    Fail(String),
    /// Not an attempt on a receiver at all (its target is gone or disabled): given up without
    /// telling the channel ([`Channel::attempted`]) and without counting time.
    Gone(String),
}

/// What one feed step did ([`Channel::feed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedStep {
    /// Fed rows the step settled.
    pub taken: usize,
    /// The step took as many rows as one step may: more may be waiting, so the next step
    /// comes at once. Otherwise the service waits before the next one, and the rows committed
    /// meanwhile are taken together: one settlement for many commits rather than one each.
    pub full: bool,
}

impl FeedStep {
    /// A step that took `taken` rows of the `limit` it asked for.
    pub fn of(taken: usize, limit: usize) -> Self {
        Self { taken, full: taken >= limit }
    }
}

/// How a channel's deliveries are made.
#[derive(Debug, Clone, Copy)]
pub struct ChannelSettings {
    /// Attempts in flight at once in this process, all receivers together.
    pub max_concurrent: usize,
    /// The longest one attempt may take, from connecting to the receiver's answer.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Whether [`Reach::Public`] targets may still be private or loopback addresses.
    pub allow_private: bool,
}

impl ChannelSettings {
    /// How long a claimed delivery is leased: well past its attempt's time limit, so another
    /// process takes it over only once this one is surely done with it.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(60).max(self.timeout.saturating_mul(2))
    }
}

/// One kind of outbound notification: the protocol's part of a delivery.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The name outcomes are counted under (`gateway_delivery_duration_seconds{channel}`) and
    /// spans carry: `webhook`, `a2a_push`.
    fn name(&self) -> &'static str;

    /// The span's name as a tracing backend shows it (`webhook POST`).
    fn span_name(&self) -> &'static str;

    /// The outbox topics that are this channel's (a prefix: `webhook:`, `a2a:`).
    fn topics(&self) -> &'static str;

    fn settings(&self) -> ChannelSettings;

    /// Called before each claim: turns newly fed events into outbox deliveries, if the
    /// channel fans out here, and says what the step did. `None` when nothing can be due (no
    /// receiver at all), so the service does not even claim: no write for the store's writer.
    async fn feed(&self) -> Option<FeedStep> {
        Some(FeedStep::default())
    }

    /// The request for one attempt, made just before it is sent (a signature's timestamp is
    /// the attempt's; sealed credentials are opened only here).
    async fn prepare(&self, delivery: &OutboxDelivery) -> Result<Outgoing, Failure>;

    /// The receiver's answer judged (never a redirect: none is followed). By default 2xx
    /// delivers; 408, 429 and 5xx are retried; anything else fails for good.
    fn judge(&self, status: u16) -> Result<(), Failure> {
        match status {
            200..=299 => Ok(()),
            408 | 429 | 500..=599 => Err(Failure::Retry(format!("HTTP {status}"))),
            300..=399 => Err(Failure::Fail(format!("HTTP {status}: redirects are not followed"))),
            _ => Err(Failure::Fail(format!("HTTP {status}"))),
        }
    }

    /// An attempt on a receiver ended (`delivered` or not), after it was settled: for
    /// per-receiver bookkeeping such as disabling an endpoint that keeps failing.
    async fn attempted(&self, _delivery: &OutboxDelivery, _delivered: bool) {}
}

/// The delivery service of this process: one [`Channel`] deliverer each, run together.
pub struct Deliveries {
    coordinator: Coordinator,
    owner: String,
    channels: Vec<Arc<dyn Channel>>,
}

impl Deliveries {
    /// A service whose claims are made as `owner` (`<instance>/<channel>`).
    pub fn new(coordinator: Coordinator, owner: impl Into<String>) -> Self {
        Self { coordinator, owner: owner.into(), channels: Vec::new() }
    }

    /// Adds a channel: everything a new kind of notification needs here.
    #[must_use]
    pub fn with(mut self, channel: Arc<dyn Channel>) -> Self {
        self.channels.push(channel);
        self
    }

    /// Delivers on every channel until `stop`; returns once every deliverer and every attempt
    /// it started has ended. Attempts in flight at `stop` are ended: their leases expire and
    /// they are made again, here or by another process.
    pub async fn run(self, stop: CancellationToken) {
        let runs = self.channels.into_iter().map(|channel| {
            let owner = format!("{}/{}", self.owner, channel.name());
            deliverer::Deliverer::new(self.coordinator.clone(), channel, owner).run(stop.clone())
        });
        futures::future::join_all(runs).await;
    }
}

/// Makes one attempt of a claimed delivery now, exactly as the service would (prepare, send,
/// judge, settle, [`Channel::attempted`]): for tests of a channel.
pub async fn attempt_once(coordinator: &Coordinator, channel: Arc<dyn Channel>, delivery: OutboxDelivery) {
    deliverer::Deliverer::new(coordinator.clone(), channel, "attempt".into()).attempt(delivery).await;
}
