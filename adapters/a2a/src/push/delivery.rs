//! Push delivery: the push channel ([`PushChannel`]) through which the runtime's delivery
//! service POSTs a task's updates, fed like every channel by the store's feed (`feed.rs`).
//!
//! A task with a push config subscribes its session to this channel: in the transaction that
//! admits its message when the config comes with it (`tasks::service::send`), else when the
//! config is added (`Feeds::follow` in `push::create`). Each event committed after that is fed
//! to the channel by its own commit; a task without a config costs its commits nothing here.
//! The channel's feed step folds fed events through each task's projection and settles: the
//! fed rows deleted and the deliveries queued in one transaction (`Feeds::settle_feed`). A
//! crash before the settlement feeds the same events again (at least once, receivers must be
//! idempotent) and loses none.
//! The outbox orders a config's deliveries (one topic per config) and keeps them across
//! restarts; the delivery service retries with the one doubling backoff and gives up after
//! [`MAX_ATTEMPTS`].
//!
//! v0.3 configs get the v0.3 `Task` as their body (what v0.3 receivers expect), on status
//! changes only and with at most [`V03_HISTORY`] history messages: a snapshot per artifact
//! update would make a task's deliveries grow with the square of its output.

use std::collections::BTreeMap;
use std::time::Duration;

use gateway_runtime::delivery::{Channel, ChannelSettings, Failure, FeedStep, Outgoing, Reach, RetryPolicy};
use gateway_services::{SecretBox, SecretError};
use gateway_store::{Delivery as OutboxDelivery, NewDelivery};
use tracing::warn;

use super::feed::Feeder;
use crate::A2aContext;
use crate::tasks::projection::Projector;
use crate::tasks::records;
use crate::v03::{self, Shape};
use crate::wire::StreamResponse;

/// Attempts per delivery before it is given up.
pub const MAX_ATTEMPTS: u32 = 6;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Most history messages in a v0.3 push body.
pub const V03_HISTORY: i64 = 20;

/// Push attempts in flight at once in this process.
const MAX_CONCURRENT: usize = 16;

/// One update of a task, with the v0.3 Task snapshot as of that update (status changes only).
pub(super) struct Ready {
    update: StreamResponse,
    v03_task: Option<String>,
}

/// The updates `proj` just made that `configs` are sent, each with its v0.3 snapshot taken now
/// (before the next event is folded in) if a v0.3 config will want it. A task nobody asked
/// pushes for makes none: only its state is followed.
pub(super) fn ready(
    proj: &Projector,
    updates: Vec<StreamResponse>,
    configs: &[records::PushRecord],
    out: &mut Vec<Ready>,
) {
    if configs.is_empty() {
        return;
    }
    let v03 = configs.iter().any(|c| c.v03);
    for update in updates {
        let v03_task = (v03 && matches!(update, StreamResponse::StatusUpdate(_))).then(|| {
            let task = serde_json::to_value(proj.task(Some(V03_HISTORY), true)).unwrap_or_default();
            v03::task_out(&task, Shape::JsonRpc).to_string()
        });
        out.push(Ready { update, v03_task });
    }
}

/// One delivery of an update to one config: the v1.0 `StreamResponse`, or for configs
/// registered over v0.3 the v0.3 Task (status changes only; none for other updates).
///
/// The config's credentials go into the outbox as they are stored, sealed: the token as the
/// whole header value, the credentials after the authorization scheme. [`PushChannel`] opens them
/// just before sending (see [`header_value`]), so the outbox table never holds them in clear.
pub(super) fn delivery(task_id: &str, c: &records::PushRecord, r: &Ready) -> Option<NewDelivery> {
    let body = if c.v03 { r.v03_task.clone()? } else { serde_json::to_string(&r.update).unwrap_or_default() };
    let mut headers = BTreeMap::new();
    headers.insert("content-type".to_owned(), "application/json".to_owned());
    if let Some(a) = &c.config.authentication {
        headers
            .insert("authorization".to_owned(), format!("{} {}", a.scheme, a.credentials.clone().unwrap_or_default()));
    }
    if let Some(t) = &c.config.token {
        headers.insert("x-a2a-notification-token".to_owned(), t.clone());
    }
    Some(NewDelivery {
        topic: format!("{PUSH_TOPICS}{task_id}:{}", c.config.id.clone().unwrap_or_default()),
        url: c.config.url.clone(),
        headers,
        body,
    })
}

/// The outbox topics of push deliveries (one per task and config): the delivery loop claims
/// only these.
pub(crate) const PUSH_TOPICS: &str = "a2a:";

/// Any failure is retried, doubling from a second up to a minute, [`MAX_ATTEMPTS`] in all.
fn retry_policy() -> RetryPolicy {
    RetryPolicy::doubling(Duration::from_secs(60), Some(MAX_ATTEMPTS))
}

/// The channel's name: its feed's and its metrics'.
pub(crate) const CHANNEL: &str = "a2a_push";

/// Push notifications as a channel of the runtime's delivery service: what only A2A knows
/// (folding fed events into each task's updates, opening a config's sealed credentials just
/// before sending). Claiming, the pool, the SSRF client, retries and metrics are the service's.
pub struct PushChannel {
    secrets: SecretBox,
    allow_private: bool,
    feeder: Feeder,
}

impl PushChannel {
    pub fn new(ctx: &A2aContext) -> Self {
        Self { secrets: ctx.secrets.clone(), allow_private: ctx.allow_private_push_targets, feeder: Feeder::new(ctx) }
    }
}

#[async_trait::async_trait]
impl Channel for PushChannel {
    fn name(&self) -> &'static str {
        CHANNEL
    }

    fn span_name(&self) -> &'static str {
        "A2A push POST"
    }

    fn topics(&self) -> &'static str {
        PUSH_TOPICS
    }

    /// Folds newly fed task events into push deliveries and settles them (`feed.rs`).
    async fn feed(&self) -> Option<FeedStep> {
        Some(self.feeder.feed().await.unwrap_or_else(|e| {
            warn!(error = %e, "cannot feed push notifications; the events stay fed");
            FeedStep::default()
        }))
    }

    fn settings(&self) -> ChannelSettings {
        ChannelSettings {
            max_concurrent: MAX_CONCURRENT,
            timeout: REQUEST_TIMEOUT,
            retry: retry_policy(),
            allow_private: self.allow_private,
        }
    }

    async fn prepare(&self, d: &OutboxDelivery) -> Result<Outgoing, Failure> {
        let mut headers = Vec::with_capacity(d.headers.len());
        for (k, v) in &d.headers {
            let v = header_value(&self.secrets, v)
                .map_err(|e| Failure::Retry(format!("cannot send the {k} header: {e}")))?;
            headers.push((k.clone(), v));
        }
        Ok(Outgoing { url: d.url.clone(), reach: Reach::Public, headers, body: d.body.clone() })
    }

    /// Any answer but a success is retried, while attempts are left.
    fn judge(&self, status: u16) -> Result<(), Failure> {
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(Failure::Retry(format!("receiver answered HTTP {status}")))
        }
    }
}

/// A header value as sent: a sealed value opened, or `<scheme> <sealed>` with its sealed part
/// opened; other values as they are. A value that cannot be opened fails the delivery (and
/// is never sent sealed).
fn header_value(secrets: &SecretBox, v: &str) -> Result<String, SecretError> {
    if SecretBox::is_sealed(v) {
        return secrets.open(v).map(|s| s.0);
    }
    match v.split_once(' ') {
        Some((scheme, rest)) if SecretBox::is_sealed(rest) => Ok(format!("{scheme} {}", secrets.open(rest)?.0)),
        _ => Ok(v.to_owned()),
    }
}

#[cfg(test)]
#[path = "delivery_tests.rs"]
mod store_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_services::ssrf;

    #[test]
    fn sealed_header_values_are_opened_only_to_be_sent() {
        let secrets = SecretBox::generate();
        let token = secrets.seal("tok");
        let authorization = format!("Bearer {}", secrets.seal("push-secret"));
        assert_eq!(header_value(&secrets, &token), Ok("tok".to_owned()));
        assert_eq!(header_value(&secrets, &authorization), Ok("Bearer push-secret".to_owned()));
        assert_eq!(header_value(&secrets, "application/json"), Ok("application/json".to_owned()));
        assert_eq!(header_value(&secrets, "Bearer legacy-plain"), Ok("Bearer legacy-plain".to_owned()));
        let other = SecretBox::generate();
        for sealed in [&token, &authorization] {
            let refused = header_value(&other, sealed).unwrap_err();
            assert!(matches!(refused, SecretError::WrongKey { .. }), "another key fails, never sends ciphertext");
        }
    }

    /// The attack: a push URL whose host name passes registration (only literal addresses
    /// and `localhost` names are refused there) but resolves to a loopback address. The
    /// delivery client's resolver refuses it; the failure must say why.
    #[tokio::test]
    async fn a_name_resolving_to_a_non_public_address_is_reported_as_such() {
        let http = ssrf::client(false, Duration::from_secs(5));
        let refused = http.post("http://localhost:9/hook").send().await.unwrap_err();
        let said = ssrf::send_failure(refused);
        assert!(said.contains("non-public address"), "{said}");
        assert!(said.contains("localhost"), "{said}");
    }

    #[test]
    fn push_retries_double_from_a_second_up_to_a_minute_and_give_up_after_max_attempts() {
        use gateway_services::metrics::Settle;
        let retry = retry_policy();
        let s = Duration::from_secs;
        assert_eq!(retry.after_failure(1, "e"), Settle::Retry { after: s(1), error: "e" });
        assert_eq!(retry.after_failure(4, "e"), Settle::Retry { after: s(8), error: "e" });
        assert_eq!(retry.after_failure(MAX_ATTEMPTS, "e"), Settle::Failed { error: "e" });
        let long = RetryPolicy::doubling(s(60), None);
        assert_eq!(long.after_failure(31, "e"), Settle::Retry { after: s(60), error: "e" });
    }
}
