//! Push delivery: a feeder that turns committed task updates into outbox deliveries, and the
//! push channel ([`PushChannel`]) through which the runtime's delivery service POSTs them.
//!
//! The feeder keeps one cursor document per unfinished task (`a2a.feed/{task}`: the last seq
//! turned into deliveries), written with the task's message in one commit, so a cursor exists
//! exactly when its task does. Which process feeds a task is the cursor document's lease,
//! claimed and renewed through the store on the database clock (`Documents::claim_documents`,
//! `renew_document`): processes whose clocks drift never both feed a task for long, and a
//! process that dies leaves its tasks to the others once its leases expire. Deliveries are
//! enqueued before the cursor moves, so a crash repeats some (at-least-once, receivers must
//! be idempotent) and loses none. The outbox orders a config's deliveries (one topic per
//! config) and keeps them across restarts; the delivery service retries with the one doubling
//! backoff and gives up after [`MAX_ATTEMPTS`].
//!
//! Order: the outbox keeps a topic's deliveries in enqueue order, across batches (a store
//! guarantee, tested by the store conformance suite). The feeder still enqueues every update
//! that is ready in one batch per pass: one transaction instead of many.
//!
//! v0.3 configs get the v0.3 `Task` as their body (what v0.3 receivers expect), on status
//! changes only and with at most [`V03_HISTORY`] history messages: a snapshot per artifact
//! update would make a task's deliveries grow with the square of its output.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_runtime::delivery::{Channel, ChannelSettings, Failure, Outgoing, Reach, RetryPolicy};
use gateway_services::{SecretBox, SecretError};
use gateway_store::{Delivery as OutboxDelivery, NewDelivery};
use tracing::{debug, info, warn};

use crate::A2aContext;
use crate::tasks::records::{self, FEED, FeedCursor, store_err};
use crate::tasks::watch::Watch;
use crate::v03::{self, Shape};
use crate::wire::StreamResponse;

/// Attempts per delivery before it is given up.
pub const MAX_ATTEMPTS: u32 = 6;
/// How long a feeder's claim on a cursor holds (renewed at least every third of it).
const LEASE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(500);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a pass waits for more ready events before it enqueues what it has.
const GATHER: Duration = Duration::from_millis(20);
/// Most updates one pass turns into one batch.
const MAX_PASS_UPDATES: usize = 256;
/// Most history messages in a v0.3 push body.
pub const V03_HISTORY: i64 = 20;

/// Push attempts in flight at once in this process.
const MAX_CONCURRENT: usize = 16;

/// Runs the feeder until shutdown (the deliveries it queues are made by the delivery
/// service, through [`PushChannel`]).
pub async fn run(ctx: A2aContext) {
    let owner = format!("a2a-{}", &gateway_core::EventId::new().as_str()[5..]);
    feed_loop(ctx.clone(), owner).await;
}

/// Most cursors one feeder pass claims.
const FEED_PAGE: u32 = 1_000;

/// Claims cursors and feeds each in its own task until shutdown; returns once every task it
/// started has stopped (and released its lease).
async fn feed_loop(ctx: A2aContext, owner: String) {
    let watching: Arc<Mutex<HashSet<String>>> = Arc::default();
    let feeders = tokio_util::task::TaskTracker::new();
    // Each pass claims the cursors no live lease holds (a fresh task's, or those of a process
    // that stopped), so tasks being fed, here or elsewhere, never crowd out the others.
    loop {
        match ctx.coordinator.documents().claim_documents(FEED, "", &owner, LEASE, FEED_PAGE).await {
            Ok(claimed) => {
                for doc in claimed {
                    let task_id = doc.key;
                    if watching.lock().unwrap_or_else(|p| p.into_inner()).contains(&task_id) {
                        // Our own lease lapsed while its feeder was slow; that feeder renews it.
                        continue;
                    }
                    let cursor: FeedCursor = match serde_json::from_value(doc.body) {
                        Ok(c) => c,
                        Err(e) => {
                            warn!(task = %task_id, error = %e, "skipping an unreadable push feeder cursor");
                            continue;
                        }
                    };
                    watching.lock().unwrap_or_else(|p| p.into_inner()).insert(task_id.clone());
                    let (ctx, watching, owner) = (ctx.clone(), Arc::clone(&watching), owner.clone());
                    feeders.spawn(async move {
                        if let Err(e) = feed_task(&ctx, &task_id, cursor, &owner).await {
                            debug!(task = %task_id, error = %e, "feeder stopped; another pass resumes it");
                            release(&ctx, &task_id, &owner).await;
                        }
                        watching.lock().unwrap_or_else(|p| p.into_inner()).remove(&task_id);
                    });
                }
            }
            Err(e) => warn!(error = %e, "cannot claim push feeder cursors"),
        }
        tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    feeders.close();
    feeders.wait().await;
}

/// Gives a cursor's lease up so the next pass (of any process) takes it at once; if that
/// fails, the lease simply expires.
async fn release(ctx: &A2aContext, task_id: &str, owner: &str) {
    if let Err(e) = ctx.coordinator.documents().release_document(FEED, task_id, owner).await {
        debug!(task = %task_id, error = %e, "cannot release a push feeder cursor; its lease will expire");
    }
}

/// One update of a pass, with the v0.3 Task snapshot as of that update (status changes only).
struct Ready {
    update: StreamResponse,
    v03_task: Option<String>,
}

fn ready(w: &Watch, updates: Vec<StreamResponse>, out: &mut Vec<Ready>) {
    for update in updates {
        let v03_task = matches!(update, StreamResponse::StatusUpdate(_)).then(|| {
            let task = serde_json::to_value(w.proj.task(Some(V03_HISTORY), true)).unwrap_or_default();
            v03::task_out(&task, Shape::JsonRpc).to_string()
        });
        out.push(Ready { update, v03_task });
    }
}

/// Feeds one task from its cursor, whose lease `owner` holds, until the task ends, the lease
/// is lost, or shutdown.
async fn feed_task(
    ctx: &A2aContext,
    task_id: &str,
    mut cursor: FeedCursor,
    owner: &str,
) -> Result<(), crate::error::A2aError> {
    let docs = ctx.coordinator.documents();
    let Some((rec, _)) = records::task(docs, task_id).await? else {
        return records::delete(docs, FEED, task_id).await;
    };
    let mut w = match Watch::open_folding(&ctx.coordinator, &rec, cursor.after_seq).await {
        Ok(w) => w,
        // The cursor was committed with the task's message, so its session is gone.
        Err(crate::error::A2aError::TaskNotFound(_)) => return records::delete(docs, FEED, task_id).await,
        Err(e) => return Err(e),
    };
    let mut known_state = rec.state;
    let mut ended = false;
    loop {
        if !w.proj.is_final() && !feed_pass(ctx, &mut w, &rec, &mut ended).await? {
            release(ctx, task_id, owner).await;
            return Ok(());
        }
        // The task's new state, if any, is written with the cursor's lease: one commit per
        // pass, and none at all by a feeder that lost the task to another.
        let mut also = Vec::new();
        if w.proj.state() != known_state {
            also.extend(records::state_write(docs, &rec, w.proj.state(), w.proj.status_at().millis()).await?);
        }
        if w.proj.is_final() {
            if docs.retire_document(FEED, task_id, owner, &also).await.map_err(store_err)? {
                info!(task = %task_id, state = w.proj.state().name(), "task finished; push feeder done");
            } else {
                debug!(task = %task_id, "another process took this finished task's push feed over");
            }
            return Ok(());
        }
        known_state = w.proj.state();
        cursor.after_seq = cursor.after_seq.max(w.proj.last_seq());
        let body = serde_json::to_value(&cursor).map_err(|e| crate::error::A2aError::Internal(e.to_string()))?;
        let renewed = docs.renew_document(FEED, task_id, owner, LEASE, Some(&body), &also).await.map_err(store_err)?;
        if renewed.is_none() {
            debug!(task = %task_id, "another process took this task's push feed over");
            return Ok(());
        }
    }
}

/// One pass: waits for the task's next event (or a third of the lease, to renew it), gathers
/// every update ready right after it, and enqueues their deliveries in one batch. False when
/// the feed should stop (shutdown, or the session's stream ended).
async fn feed_pass(
    ctx: &A2aContext,
    w: &mut Watch,
    rec: &records::TaskRecord,
    ended: &mut bool,
) -> Result<bool, crate::error::A2aError> {
    let next = if *ended {
        None
    } else {
        tokio::select! {
            n = w.next() => n,
            _ = tokio::time::sleep(LEASE / 3) => Some(Ok(vec![])),
            _ = ctx.shutdown.cancelled() => None,
        }
    };
    let Some(first) = next else { return Ok(false) };
    let mut pass = Vec::new();
    ready(w, first?, &mut pass);
    while !pass.is_empty() && pass.len() < MAX_PASS_UPDATES && !w.proj.is_final() {
        match tokio::time::timeout(GATHER, w.next()).await {
            Ok(Some(updates)) => ready(w, updates?, &mut pass),
            Ok(None) => {
                *ended = true;
                break;
            }
            Err(_) => break,
        }
    }
    if !pass.is_empty() {
        let docs = ctx.coordinator.documents();
        let configs = crate::push::records(docs, &rec.id).await?;
        let task = rec.id.as_str();
        let batch: Vec<NewDelivery> =
            pass.iter().flat_map(|r| configs.iter().filter_map(move |c| delivery(task, c, r))).collect();
        if !batch.is_empty() {
            ctx.coordinator.outbox().enqueue_deliveries(batch).await.map_err(store_err)?;
        }
    }
    Ok(true)
}

/// One delivery of an update to one config: the v1.0 `StreamResponse`, or for configs
/// registered over v0.3 the v0.3 Task (status changes only; none for other updates).
///
/// The config's credentials go into the outbox as they are stored, sealed: the token as the
/// whole header value, the credentials after the authorization scheme. [`PushChannel`] opens them
/// just before sending (see [`header_value`]), so the outbox table never holds them in clear.
fn delivery(task_id: &str, c: &records::PushRecord, r: &Ready) -> Option<NewDelivery> {
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

/// Push notifications as a channel of the runtime's delivery service: what only A2A knows
/// (opening a config's sealed credentials just before sending). Claiming, the pool, the SSRF
/// client, retries and metrics are the service's.
pub struct PushChannel {
    secrets: SecretBox,
    allow_private: bool,
}

impl PushChannel {
    pub fn new(ctx: &A2aContext) -> Self {
        Self { secrets: ctx.secrets.clone(), allow_private: ctx.allow_private_push_targets }
    }
}

#[async_trait::async_trait]
impl Channel for PushChannel {
    fn name(&self) -> &'static str {
        "a2a_push"
    }

    fn span_name(&self) -> &'static str {
        "A2A push POST"
    }

    fn topics(&self) -> &'static str {
        PUSH_TOPICS
    }

    fn settings(&self) -> ChannelSettings {
        ChannelSettings {
            max_concurrent: MAX_CONCURRENT,
            timeout: REQUEST_TIMEOUT,
            retry: RetryPolicy::doubling(Duration::from_secs(60), Some(MAX_ATTEMPTS)),
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
        let retry = PushChannel { secrets: SecretBox::generate(), allow_private: false }.settings().retry;
        let s = Duration::from_secs;
        assert_eq!(retry.after_failure(1, "e"), Settle::Retry { after: s(1), error: "e" });
        assert_eq!(retry.after_failure(4, "e"), Settle::Retry { after: s(8), error: "e" });
        assert_eq!(retry.after_failure(MAX_ATTEMPTS, "e"), Settle::Failed { error: "e" });
        let long = RetryPolicy::doubling(s(60), None);
        assert_eq!(long.after_failure(31, "e"), Settle::Retry { after: s(60), error: "e" });
    }
}
