//! The push channel's feed step: fed task events become push deliveries.
//!
//! The store feeds this channel every event of a session some task follows (the task's
//! subscription, key = task id, written with its message or when a config is added later) and
//! says how far each task has been fed (`after_seq`). A step takes a bounded batch, folds each
//! task's new events through its [`Projector`], turns the updates into deliveries for the
//! task's configs, and settles everything in one transaction: the rows deleted, the
//! deliveries queued, each task's progress recorded, and a finished task's subscription
//! removed.
//!
//! Projections are cached per task as of the last settled seq, so a push body is not refolded
//! from the task's start for every event; a task missing from the cache (a restart, another
//! process settled it, a failed settlement) is folded again from the log up to its settled
//! seq ([`Watch::open_folding`]). An entry is put back only after its settlement committed,
//! so the cache never runs ahead of what the store says was fed.

use std::collections::{BTreeMap, HashMap};

use gateway_core::SessionId;
use gateway_core::event::Event;
use gateway_runtime::delivery::FeedStep;
use gateway_store::FeedSettlement;
use tracing::{debug, info, warn};

use super::delivery::{CHANNEL, Ready, delivery, ready};
use crate::A2aContext;
use crate::error::A2aError;
use crate::tasks::projection::Projector;
use crate::tasks::records::{self, PushRecord, store_err};
use crate::tasks::watch::Watch;

/// Most fed rows one step takes (one settlement).
const BATCH: u32 = 256;
/// Most task projections kept between steps; past it the cache starts again (each task is
/// then refolded once from the log).
const MAX_CACHED: usize = 4096;

/// A task's projection as of the last seq settled for it.
struct Folded {
    proj: Projector,
    /// The task's `after_seq` in the store when this projection was put back.
    fed_through: u64,
}

pub(super) struct Feeder {
    ctx: A2aContext,
    cache: tokio::sync::Mutex<HashMap<String, Folded>>,
}

impl Feeder {
    pub(super) fn new(ctx: &A2aContext) -> Self {
        Self { ctx: ctx.clone(), cache: Default::default() }
    }

    /// One step: takes fed events, settles what they make.
    pub(super) async fn feed(&self) -> Result<FeedStep, A2aError> {
        let feeds = self.ctx.coordinator.feeds();
        let batch = feeds.take_feed(CHANNEL, BATCH).await.map_err(store_err)?;
        if batch.fed.is_empty() {
            return Ok(FeedStep::default());
        }
        let full = FeedStep::of(batch.fed.len(), BATCH as usize).full;
        let mut by_session: BTreeMap<&SessionId, Vec<&Event>> = BTreeMap::new();
        for f in &batch.fed {
            by_session.entry(&f.event.session_id).or_default().push(&f.event);
        }
        for events in by_session.values_mut() {
            events.sort_by_key(|e| e.seq);
        }
        let mut settlement =
            FeedSettlement { taken: batch.fed.iter().map(|f| f.position).collect(), ..FeedSettlement::default() };
        let mut cache = self.cache.lock().await;
        let mut folded = Vec::new();
        // Sessions whose rows stay fed: a key of theirs could not be folded now (a read
        // failed). Their other keys still settle, and skip these rows when they come again.
        let mut stuck: Vec<&SessionId> = Vec::new();
        for key in &batch.keys {
            let Some(events) = by_session.get(&key.session_id) else { continue };
            let Some(upto) = events.last().map(|e| e.seq).filter(|&upto| upto > key.after_seq) else { continue };
            let cached = cache.remove(&key.key).filter(|f| f.fed_through == key.after_seq);
            let configs = match super::records(self.ctx.coordinator.documents(), &key.key).await {
                Ok(configs) => configs,
                Err(e) => {
                    warn!(task = %key.key, error = %e, "cannot read a task's push configs; its events stay fed");
                    stuck.push(&key.session_id);
                    continue;
                }
            };
            let (mut task, updates) = match self.fold(&key.key, key.after_seq, upto, events, cached, &configs).await {
                Ok(Some(folded)) => folded,
                Ok(None) => {
                    settlement.ended.push(key.key.clone());
                    continue;
                }
                Err(e) => {
                    warn!(task = %key.key, error = %e, "cannot fold a task's fed events; they stay fed");
                    stuck.push(&key.session_id);
                    continue;
                }
            };
            let id = key.key.as_str();
            settlement
                .deliveries
                .extend(updates.iter().flat_map(|r| configs.iter().filter_map(move |c| delivery(id, c, r))));
            if task.proj.is_final() {
                info!(task = %key.key, state = task.proj.state().name(), "task finished; push feed done");
                settlement.ended.push(key.key.clone());
            } else {
                settlement.advanced.push((key.key.clone(), upto));
                task.fed_through = upto;
                folded.push((key.key.clone(), task));
            }
        }
        if !stuck.is_empty() {
            settlement.taken =
                batch.fed.iter().filter(|f| !stuck.contains(&&f.event.session_id)).map(|f| f.position).collect();
        }
        let taken = settlement.taken.len();
        match feeds.settle_feed(CHANNEL, settlement).await {
            Ok(true) => {
                if cache.len() + folded.len() > MAX_CACHED {
                    cache.clear();
                }
                cache.extend(folded);
            }
            // Another process settled some of these rows first: nothing was written; the
            // projections are dropped and the rows taken again.
            Ok(false) => debug!(rows = taken, "push feed settled elsewhere first; taking again"),
            Err(e) => return Err(store_err(e)),
        }
        Ok(FeedStep { taken, full })
    }

    /// Task `task_id`'s projection folded through `upto`, with the updates of the events after
    /// `after_seq`: from the cached projection when it is exactly at `after_seq` and the fed
    /// events follow it without a gap, else folded again from the log. None when the task or
    /// its session is gone (its subscription then ends).
    async fn fold(
        &self,
        task_id: &str,
        after_seq: u64,
        upto: u64,
        events: &[&Event],
        cached: Option<Folded>,
        configs: &[PushRecord],
    ) -> Result<Option<(Folded, Vec<Ready>)>, A2aError> {
        let mut out = Vec::new();
        // The cached projection goes on only if the fed events continue it without a gap (a
        // key sees its session's events from before the task started too: those the
        // projection already folded are skipped).
        if let Some(mut task) = cached
            && events.iter().find(|e| e.seq > after_seq).is_some_and(|e| e.seq <= task.proj.last_seq() + 1)
        {
            let folded_through = after_seq.max(task.proj.last_seq());
            for e in events.iter().filter(|e| e.seq > folded_through) {
                if task.proj.is_final() {
                    break;
                }
                let updates = task.proj.apply(e);
                ready(&task.proj, updates, configs, &mut out);
            }
            return Ok(Some((task, out)));
        }
        let docs = self.ctx.coordinator.documents();
        let Some((rec, _)) = records::task(docs, task_id).await? else { return Ok(None) };
        let mut w = match Watch::open_folding(&self.ctx.coordinator, &rec, after_seq).await {
            Ok(w) => w,
            Err(A2aError::TaskNotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        while w.proj.last_seq() < upto && !w.proj.is_final() {
            let Some(updates) = w.next().await.transpose()? else { break };
            ready(&w.proj, updates, configs, &mut out);
        }
        Ok(Some((Folded { proj: w.proj, fed_through: after_seq }, out)))
    }
}
