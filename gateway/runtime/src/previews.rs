//! Streaming previews: partial agent output shown while a turn runs.
//!
//! Previews never touch storage (invariant 7): they travel on an in-process broadcast per
//! session and reach only subscribers that asked for them. The complete event is committed
//! normally with the same id as its preview, and subscriptions drop any preview for an id
//! they have already delivered committed, so the committed event is always the last word.
//!
//! Previews are local to the process running the turn; subscribers attached to another
//! gateway process see only committed events (docs/adr/0004).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gateway_core::event::EventKind;
use gateway_core::{EventId, SessionId};
use tokio::sync::broadcast;

#[derive(Debug, Clone, PartialEq)]
pub enum Preview {
    /// An event with this id and kind has begun; deltas follow.
    Start { event_id: EventId, kind: EventKind },
    /// More text for content block `index` of the event.
    TextDelta { event_id: EventId, index: usize, text: String },
    /// More of the agent's reasoning (an `agent_thinking` event's text). A face that shows
    /// reasoning only as a progress signal has a `Start` and no use for these.
    ThoughtDelta { event_id: EventId, text: String },
}

impl Preview {
    pub fn event_id(&self) -> &EventId {
        match self {
            Preview::Start { event_id, .. }
            | Preview::TextDelta { event_id, .. }
            | Preview::ThoughtDelta { event_id, .. } => event_id,
        }
    }
}

/// A preview and its place in the session's log: it follows the committed event with seq
/// `after_seq` (the last event its run had committed when it was published). Subscriptions
/// use it to interleave previews and committed events in the order they happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub after_seq: u64,
    pub preview: Preview,
}

/// Per-session broadcast channels, created on first use and dropped with their last receiver.
#[derive(Clone, Default)]
pub struct PreviewBus {
    channels: Arc<Mutex<HashMap<SessionId, broadcast::Sender<Placed>>>>,
}

/// Previews a slow subscriber may fall behind by before it loses some (it still gets every
/// committed event; previews are best effort by design).
const PREVIEW_BUFFER: usize = 256;

impl PreviewBus {
    pub fn publish(&self, session: &SessionId, after_seq: u64, preview: Preview) {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(session) {
            // No receiver is fine: nobody asked for previews.
            let _ = tx.send(Placed { after_seq, preview });
        }
    }

    pub fn subscribe(&self, session: &SessionId) -> broadcast::Receiver<Placed> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.entry(session.clone()).or_insert_with(|| broadcast::channel(PREVIEW_BUFFER).0).subscribe()
    }
}
