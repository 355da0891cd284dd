//! Subscriptions: a session's committed events from a given seq, then the live tail.
//!
//! Why there is no gap and no duplicate across the catch-up/live boundary: there is no
//! boundary. Every committed event is read from the store by seq, in order, strictly after
//! the last seq delivered; wake-ups only decide *when* to read again, never *what* is
//! delivered. A missed wake-up delays delivery by at most one poll interval (invariant 3).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use gateway_core::event::{Event, EventKind};
use gateway_core::{EventId, SessionId};
use gateway_store::Store;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::error::RuntimeError;
use crate::previews::{Preview, PreviewBus};

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

/// How many committed ids with previews a subscription remembers, to drop late previews.
const CLOSED_MEMORY: usize = 256;
const BATCH: u32 = 500;

struct State {
    store: Arc<dyn Store>,
    session: SessionId,
    last_seq: u64,
    poll: Duration,
    buffer: VecDeque<Event>,
    watch: watch::Receiver<u64>,
    previews: Option<broadcast::Receiver<Preview>>,
    /// Previews started on this subscription and not yet closed by their committed event.
    open: HashSet<EventId>,
    /// Recently committed ids that had previews: later previews for them are stale.
    closed: VecDeque<EventId>,
    need_read: bool,
    next_poll: Instant,
    ended: bool,
}

impl State {
    fn accept_preview(&mut self, p: Preview) -> Option<Preview> {
        match &p {
            Preview::Start { event_id, .. } => {
                if self.closed.contains(event_id) || !self.open.insert(event_id.clone()) {
                    return None;
                }
            }
            Preview::TextDelta { event_id, .. } => {
                if !self.open.contains(event_id) {
                    // Started before this subscription attached, or already closed.
                    return None;
                }
            }
        }
        Some(p)
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

/// The stream behind `Coordinator::subscribe`. It ends after delivering `session_deleted`.
pub(crate) fn subscribe(
    store: Arc<dyn Store>,
    bus: &PreviewBus,
    session: SessionId,
    options: SubscribeOptions,
) -> impl Stream<Item = Result<Delivery, RuntimeError>> + Send + 'static {
    let watch = store.wakeups().watch_session(&session);
    let previews = options.previews.then(|| bus.subscribe(&session));
    let state = State {
        store,
        session,
        last_seq: options.after_seq,
        poll: options.poll.unwrap_or(Duration::from_millis(500)),
        buffer: VecDeque::new(),
        watch,
        previews,
        open: HashSet::new(),
        closed: VecDeque::new(),
        need_read: true,
        next_poll: Instant::now(),
        ended: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.buffer.pop_front() {
                st.last_seq = e.seq;
                st.note_committed(&e);
                if e.kind() == EventKind::SessionDeleted {
                    st.ended = true;
                    st.buffer.clear();
                }
                return Some((Ok(Delivery::Event(e)), st));
            }
            if st.ended {
                return None;
            }
            if st.need_read {
                // Mark the watch as seen *before* reading, so a commit that lands after this
                // read changes it again and wakes the wait below.
                st.watch.borrow_and_update();
                st.next_poll = Instant::now() + st.poll;
                match st.store.events_after(&st.session, st.last_seq, BATCH).await {
                    Ok(batch) if !batch.is_empty() => {
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
            // Biased: a commit hint is handled before a preview that is ready at the same time,
            // so previews do not overtake committed events that precede them.
            tokio::select! {
                biased;
                changed = st.watch.changed() => {
                    if changed.is_err() {
                        // The hub dropped this session's channel: fall back to the poll timer.
                        tokio::time::sleep_until(st.next_poll).await;
                    }
                    st.need_read = true;
                }
                p = preview => match p {
                    Ok(p) => {
                        if let Some(p) = st.accept_preview(p) {
                            return Some((Ok(Delivery::Preview(p)), st));
                        }
                    }
                    // Fell behind or the bus closed: previews are best effort; carry on.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => st.previews = None,
                },
                _ = tokio::time::sleep_until(st.next_poll) => st.need_read = true,
            }
        }
    })
}
