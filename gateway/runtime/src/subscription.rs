//! Subscriptions: a session's committed events from a given seq, then the live tail.
//!
//! Why there is no gap and no duplicate across the catch-up/live boundary: there is no
//! boundary. Every committed event is read from the store by seq, in order, strictly after
//! the last seq delivered; wake-ups only decide *when* to read again, never *what* is
//! delivered. A missed wake-up delays delivery by at most one poll interval (invariant 3).
//!
//! The poll is the process's, not each subscription's ([`poll_session_tips`]): one read of the
//! last seq of every watched session per interval, delivered to the session's watch when it
//! moved. A subscription reads the store only when its watch says the log moved past what it
//! delivered, so thousands of idle subscribers cost one small read per interval in all, and a
//! commit costs one read per subscriber (none for one this process made: its batch is shared
//! in memory).
//!
//! Previews are merged by position: each carries the seq of the last event its run had
//! committed when it was published, and is delivered right after that event and before the
//! next one. A run publishes an event's previews before committing it, so by the time the
//! committed event is read, its previews are already queued here and go out first; the
//! committed event is always the last frame for its id.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use gateway_core::event::{Event, EventKind};
use gateway_core::{EventId, SessionId};
use gateway_store::{Store, Tip};
use tokio::sync::{broadcast, watch};

use crate::error::RuntimeError;
use crate::previews::{Placed, Preview, PreviewBus};
use gateway_services::metrics::{GaugeGuard, Metrics};

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Event(Event),
    Preview(Preview),
}

#[derive(Debug, Clone, Default)]
pub struct SubscribeOptions {
    /// Deliver committed events with seq greater than this.
    pub after_seq: u64,
    /// Also deliver streaming previews of events in flight.
    pub previews: bool,
    /// How often to read the store when no wake-up arrives (None: the Coordinator's default).
    pub poll: Option<Duration>,
}

/// Most sessions asked about in one read of [`poll_session_tips`].
const TIPS_PER_READ: usize = 500;

/// How many committed ids with previews a subscription remembers, to drop late previews.
const CLOSED_MEMORY: usize = 256;
const BATCH: u32 = 500;

struct State {
    store: Arc<dyn Store>,
    session: SessionId,
    last_seq: u64,
    /// Only for a watch whose hub channel is gone (not expected): read again after this long.
    poll: Duration,
    buffer: VecDeque<Event>,
    watch: watch::Receiver<Tip>,
    previews: Option<broadcast::Receiver<Placed>>,
    /// Previews received but not yet delivered, in arrival (= publication) order.
    pending: VecDeque<Placed>,
    /// Previews started on this subscription and not yet closed by their committed event.
    open: HashSet<EventId>,
    /// Recently committed ids that had previews: later previews for them are stale.
    closed: VecDeque<EventId>,
    need_read: bool,
    ended: bool,
    _open: GaugeGuard,
}

impl State {
    /// Reads what was committed after `last_seq`, in a task of its own. A consumer may stop
    /// polling this stream mid-read (a `select!` that took another branch, a timeout) and go
    /// on to other work that reads: had the read run inside the stream, it would keep its
    /// place to read all that time, and a few such consumers would hold every place while
    /// waiting for one. Detached, the read ends and gives its place back on its own; its
    /// result waits here for the next poll (or is dropped with the stream).
    async fn read_after(&self) -> Result<Vec<Event>, gateway_store::StoreError> {
        let (store, session, after) = (Arc::clone(&self.store), self.session.clone(), self.last_seq);
        tokio::spawn(async move { store.events_after(&session, after, BATCH).await })
            .await
            .unwrap_or_else(|e| Err(gateway_store::StoreError::Unavailable(format!("a subscription read failed: {e}"))))
    }

    fn accept_preview(&mut self, p: Preview) -> Option<Preview> {
        match &p {
            Preview::Start { event_id, .. } => {
                if self.closed.contains(event_id) || !self.open.insert(event_id.clone()) {
                    return None;
                }
            }
            Preview::TextDelta { event_id, .. } | Preview::ThoughtDelta { event_id, .. } => {
                if !self.open.contains(event_id) {
                    // Started before this subscription attached, or already closed.
                    return None;
                }
            }
        }
        Some(p)
    }

    /// Moves previews that have already arrived into `pending`, without waiting.
    fn drain_previews(&mut self) {
        let Some(rx) = self.previews.as_mut() else { return };
        loop {
            match rx.try_recv() {
                Ok(placed) => self.pending.push_back(placed),
                Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(broadcast::error::TryRecvError::Empty) => return,
                Err(broadcast::error::TryRecvError::Closed) => {
                    self.previews = None;
                    return;
                }
            }
        }
    }

    /// Delivers the next buffered committed event.
    fn deliver_next(&mut self) -> Option<Delivery> {
        let e = self.buffer.pop_front()?;
        self.last_seq = e.seq;
        self.note_committed(&e);
        if e.kind() == EventKind::SessionDeleted {
            self.ended = true;
            self.buffer.clear();
            self.pending.clear();
        }
        Some(Delivery::Event(e))
    }

    fn note_committed(&mut self, e: &Event) {
        if self.open.remove(&e.id) {
            self.closed.push_back(e.id.clone());
            if self.closed.len() > CLOSED_MEMORY {
                self.closed.pop_front();
            }
        }
    }
}

/// A session's watch opened before a write this process is about to make to it
/// ([`Coordinator::watch_ahead`](crate::Coordinator::watch_ahead)): the write's own hint, and
/// the batch it committed, reach a subscription later opened with it
/// ([`Coordinator::subscribe_ahead`](crate::Coordinator::subscribe_ahead)), which then reads
/// nothing to catch up with the events the writer already holds.
pub struct Ahead {
    pub(crate) session: SessionId,
    pub(crate) watch: watch::Receiver<Tip>,
}

/// The stream behind `Coordinator::subscribe`. It ends after delivering `session_deleted`.
///
/// With a watch opened `ahead` of the writes through `options.after_seq`, the first read is
/// skipped when the watch's tip is exactly that seq: every later commit changes the watch.
/// A watch showing anything else (hints disabled, a later commit) reads as usual.
pub(crate) fn subscribe(
    store: Arc<dyn Store>,
    bus: &PreviewBus,
    session: SessionId,
    options: SubscribeOptions,
    metrics: Arc<Metrics>,
    ahead: Option<watch::Receiver<Tip>>,
) -> impl Stream<Item = Result<Delivery, RuntimeError>> + Send + use<> {
    let open = GaugeGuard::new(&metrics.subscriptions_open);
    let need_read = ahead.as_ref().is_none_or(|w| w.borrow().seq != options.after_seq);
    let watch = ahead.unwrap_or_else(|| store.wakeups().watch_session(&session));
    let poll = options.poll.unwrap_or(Duration::from_millis(500));
    let previews = options.previews.then(|| bus.subscribe(&session));
    let state = State {
        store,
        session,
        last_seq: options.after_seq,
        poll,
        buffer: VecDeque::new(),
        watch,
        previews,
        pending: VecDeque::new(),
        open: HashSet::new(),
        closed: VecDeque::new(),
        need_read,
        ended: false,
        _open: open,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            st.drain_previews();
            // Previews placed after an event already delivered go out now; committed events
            // placed before a pending preview go out before it.
            if let Some(after) = st.pending.front().map(|p| p.after_seq) {
                if after <= st.last_seq {
                    if let Some(placed) = st.pending.pop_front()
                        && let Some(p) = st.accept_preview(placed.preview)
                    {
                        return Some((Ok(Delivery::Preview(p)), st));
                    }
                    continue;
                }
                if st.buffer.front().is_some_and(|e| e.seq <= after) {
                    return st.deliver_next().map(|d| (Ok(d), st));
                }
                // The event this preview follows is committed but not read yet.
                st.need_read = true;
            } else if !st.buffer.is_empty() {
                return st.deliver_next().map(|d| (Ok(d), st));
            }
            if st.ended {
                return None;
            }
            if st.need_read {
                // Mark the watch as seen *before* reading, so a commit that lands after this
                // read changes it again and wakes the wait below.
                let tip = st.watch.borrow_and_update().clone();
                // A batch this process just committed, contiguous with what was delivered:
                // take it from memory instead of the store.
                if let Some(batch) = tip.batch.filter(|b| {
                    b.first().is_some_and(|f| f.seq <= st.last_seq + 1) && b.last().is_some_and(|l| l.seq > st.last_seq)
                }) {
                    let last = st.last_seq;
                    st.buffer.extend(batch.iter().filter(|e| e.seq > last).cloned());
                    st.need_read = false;
                    continue;
                }
                match st.read_after().await {
                    Ok(batch) if !batch.is_empty() => {
                        // A read short of its limit found everything committed before it
                        // began; a later commit changes the watch marked above. Reading
                        // again only to find nothing cost every catch-up a second read.
                        st.need_read = batch.len() >= BATCH as usize;
                        st.buffer.extend(batch);
                        continue;
                    }
                    Ok(_) => st.need_read = false,
                    Err(e) => {
                        st.ended = true;
                        return Some((Err(RuntimeError::from(e)), st));
                    }
                }
            }
            let preview = async {
                match st.previews.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = st.watch.changed() => {
                    if changed.is_err() {
                        // The hub dropped this session's channel: poll on this stream's own.
                        tokio::time::sleep(st.poll).await;
                        st.need_read = true;
                    } else {
                        // Only a log that moved past what was delivered is worth a read.
                        st.need_read = st.watch.borrow().seq > st.last_seq;
                    }
                }
                p = preview => match p {
                    Ok(placed) => st.pending.push_back(placed),
                    // Fell behind or the bus closed: previews are best effort; carry on.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => st.previews = None,
                },
            }
        }
    })
}

/// The process's subscription poll: every `every`, one read of the last seq of every session
/// a subscription of this process watches (in reads of at most [`TIPS_PER_READ`]), delivered
/// to the watches of those that moved. Hints usually come first; this bounds how late a
/// missed or disabled one makes a subscriber (invariant 3). Runs until `stop`.
pub async fn poll_session_tips(store: Arc<dyn Store>, every: Duration, stop: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        let watched = store.wakeups().watched_sessions();
        for chunk in watched.chunks(TIPS_PER_READ) {
            let ids: Vec<SessionId> = chunk.iter().map(|(id, _)| id.clone()).collect();
            match store.session_tips(&ids).await {
                Ok(tips) => {
                    for (session, seq) in tips {
                        store.wakeups().deliver_polled(&session, seq);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "subscription poll failed; trying again next interval"),
            }
        }
    }
}
