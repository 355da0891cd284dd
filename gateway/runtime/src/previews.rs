//! Streaming previews: partial agent output shown while a turn runs.
//!
//! Previews never touch storage (invariant 7): they travel on an in-process broadcast per
//! session and reach only subscribers that asked for them. The complete event is committed
//! normally with the same id as its preview, and subscriptions drop any preview for an id
//! they have already delivered committed, so the committed event is always the last word.
//!
//! With several processes on one database (PostgreSQL), a subscriber may be attached to a
//! process other than the one running the turn. Each process tells the others which
//! sessions it has preview subscribers for ([`PreviewBus::relay`], refreshed while they
//! last), and the process running a turn sends that session's previews to the others
//! through the store's messages between processes ([`Peers`]), only while someone elsewhere
//! watches: a session nobody watches costs a map lookup. Relayed previews are as best
//! effort as local ones; the committed event stays authoritative (docs/adr/0004).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::event::EventKind;
use gateway_core::{EventId, SessionId};
use gateway_store::Peers;
use gateway_store::peers::MAX_MESSAGE;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// Per-session broadcast channels, created on first use and dropped with their last
/// receiver; and, with other processes on the database, who watches where.
#[derive(Clone, Default)]
pub struct PreviewBus {
    channels: Arc<Mutex<HashMap<SessionId, broadcast::Sender<Placed>>>>,
    /// The other processes, when the store connects this one to them.
    peers: Option<Arc<Peers>>,
    /// Sessions some other process has preview subscribers for, until when it last said so
    /// plus [`WATCH_TTL`].
    watched_elsewhere: Arc<Mutex<HashMap<SessionId, Instant>>>,
}

/// How often a process repeats which sessions it watches. A process that stops saying so
/// (its subscribers left, or it died) stops receiving them [`WATCH_TTL`] later.
const WATCH_EVERY: Duration = Duration::from_secs(2);
const WATCH_TTL: Duration = Duration::from_secs(5);

/// Previews a slow subscriber may fall behind by before it loses some (it still gets every
/// committed event; previews are best effort by design).
const PREVIEW_BUFFER: usize = 256;

impl PreviewBus {
    /// A bus that also reaches the subscribers of the processes behind `peers`.
    pub fn with_peers(peers: Option<Arc<Peers>>) -> Self {
        Self { peers, ..Self::default() }
    }

    pub fn publish(&self, session: &SessionId, after_seq: u64, preview: Preview) {
        if let Some(peers) = &self.peers
            && self.is_watched_elsewhere(session)
        {
            for message in Relayed::preview(session, after_seq, &preview) {
                peers.send(message);
            }
        }
        self.deliver(session, Placed { after_seq, preview });
    }

    /// Hands a preview to this process's subscribers of the session, if any.
    fn deliver(&self, session: &SessionId, placed: Placed) {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(session) {
            // No receiver is fine: nobody asked for previews.
            let _ = tx.send(placed);
        }
    }

    pub fn subscribe(&self, session: &SessionId) -> broadcast::Receiver<Placed> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, tx| tx.receiver_count() > 0);
        let new = !map.contains_key(session);
        let rx = map.entry(session.clone()).or_insert_with(|| broadcast::channel(PREVIEW_BUFFER).0).subscribe();
        drop(map);
        // Said at once, so a turn running elsewhere starts sending before the next refresh.
        if new && let Some(peers) = &self.peers {
            Relayed::watching(std::slice::from_ref(session)).into_iter().for_each(|m| {
                peers.send(m);
            });
        }
        rx
    }

    fn is_watched_elsewhere(&self, session: &SessionId) -> bool {
        let map = self.watched_elsewhere.lock().unwrap_or_else(|p| p.into_inner());
        map.get(session).is_some_and(|until| *until > Instant::now())
    }

    /// Sessions this process has preview subscribers for.
    fn watched_here(&self) -> Vec<SessionId> {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().filter(|(_, tx)| tx.receiver_count() > 0).map(|(s, _)| s.clone()).collect()
    }

    /// Exchanges previews with the other processes until `stop`: tells them every
    /// [`WATCH_EVERY`] which sessions this process watches, learns which ones they watch,
    /// and hands their previews to this process's subscribers. Returns at once without
    /// other processes.
    pub async fn relay(self, stop: CancellationToken) {
        let Some(peers) = self.peers.clone() else { return };
        let mut inbox = peers.subscribe();
        let mut every = tokio::time::interval(WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {
                    for message in Relayed::watching(&self.watched_here()) {
                        peers.send(message);
                    }
                    let now = Instant::now();
                    self.watched_elsewhere.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, until| *until > now);
                }
                message = inbox.recv() => match message {
                    Ok(line) => self.receive(&line),
                    // Fell behind: previews are best effort, and watches are repeated.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// One message from another process. Lines this version does not read are skipped, so
    /// processes of different versions can share a database.
    fn receive(&self, line: &str) {
        let Ok(message) = serde_json::from_str::<Relayed>(line) else { return };
        match message {
            Relayed::Watching { sessions } => {
                let until = Instant::now() + WATCH_TTL;
                let mut map = self.watched_elsewhere.lock().unwrap_or_else(|p| p.into_inner());
                for session in sessions {
                    map.insert(session, until);
                }
            }
            Relayed::Preview { session, after_seq, preview } => {
                if let Some(preview) = preview.into_preview() {
                    self.deliver(&session, Placed { after_seq, preview });
                }
            }
        }
    }
}

/// What processes tell each other about previews, one JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t")]
enum Relayed {
    /// "I have preview subscribers for these sessions."
    #[serde(rename = "watching")]
    Watching { sessions: Vec<SessionId> },
    /// A preview of a turn the sender runs.
    #[serde(rename = "preview")]
    Preview { session: SessionId, after_seq: u64, preview: RelayedPreview },
}

/// [`Preview`] as it travels (an event kind by its stable name).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "p")]
enum RelayedPreview {
    #[serde(rename = "start")]
    Start { event_id: EventId, kind: String },
    #[serde(rename = "text")]
    Text { event_id: EventId, index: usize, text: String },
    #[serde(rename = "thought")]
    Thought { event_id: EventId, text: String },
}

impl RelayedPreview {
    fn into_preview(self) -> Option<Preview> {
        Some(match self {
            RelayedPreview::Start { event_id, kind } => Preview::Start { event_id, kind: EventKind::parse(&kind)? },
            RelayedPreview::Text { event_id, index, text } => Preview::TextDelta { event_id, index, text },
            RelayedPreview::Thought { event_id, text } => Preview::ThoughtDelta { event_id, text },
        })
    }
}

impl Relayed {
    /// The messages announcing `sessions`, each under the size a message may have.
    fn watching(sessions: &[SessionId]) -> Vec<String> {
        // Session ids are ~27 bytes: a few hundred per message.
        sessions
            .chunks(200)
            .filter_map(|chunk| serde_json::to_string(&Relayed::Watching { sessions: chunk.to_vec() }).ok())
            .collect()
    }

    /// The messages carrying one preview. A delta too long for one message is cut into
    /// several at character boundaries: their texts add up to the same text, in order.
    fn preview(session: &SessionId, after_seq: u64, preview: &Preview) -> Vec<String> {
        let encode = |preview: RelayedPreview| {
            serde_json::to_string(&Relayed::Preview { session: session.clone(), after_seq, preview }).ok()
        };
        let (event_id, text, index) = match preview {
            Preview::Start { event_id, kind } => {
                return encode(RelayedPreview::Start { event_id: event_id.clone(), kind: kind.as_str().to_owned() })
                    .into_iter()
                    .collect();
            }
            Preview::TextDelta { event_id, index, text } => (event_id, text.as_str(), Some(*index)),
            Preview::ThoughtDelta { event_id, text } => (event_id, text.as_str(), None),
        };
        let piece = |text: &str| {
            let event_id = event_id.clone();
            let text = text.to_owned();
            encode(match index {
                Some(index) => RelayedPreview::Text { event_id, index, text },
                None => RelayedPreview::Thought { event_id, text },
            })
        };
        let mut out = Vec::new();
        let mut rest = vec![text];
        // Depth first, left half before right, so the pieces stay in order.
        while let Some(part) = rest.pop() {
            match piece(part) {
                Some(m) if m.len() <= MAX_MESSAGE => out.push(m),
                Some(_) if part.chars().nth(1).is_some() => {
                    // Two characters or more: a boundary strictly inside exists.
                    let mid = (part.len() / 2).max(1);
                    let mid = (mid..part.len()).find(|&i| part.is_char_boundary(i)).unwrap_or(part.len());
                    let (left, right) = part.split_at(mid);
                    rest.push(right);
                    rest.push(left);
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(messages: &[String]) -> String {
        messages
            .iter()
            .map(|m| match serde_json::from_str::<Relayed>(m).unwrap() {
                Relayed::Preview { preview: RelayedPreview::Text { text, .. }, .. } => text,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_long_delta_travels_in_pieces_that_add_up_in_order() {
        let session = SessionId::new();
        let event_id = EventId::new();
        // Quotes and control characters grow when escaped; multi-byte characters must not be split.
        let text: String = (0..9_000).map(|i| ['a', '"', '\u{1}', 'é', '語'][i % 5]).collect();
        let messages = Relayed::preview(&session, 7, &Preview::TextDelta { event_id, index: 2, text: text.clone() });
        assert!(messages.len() > 1);
        assert!(messages.iter().all(|m| m.len() <= MAX_MESSAGE && !m.contains('\n')));
        assert_eq!(texts(&messages), text);
    }

    #[test]
    fn previews_round_trip_and_unknown_lines_are_skipped() {
        let bus = PreviewBus::default();
        let session = SessionId::new();
        let mut rx = bus.subscribe(&session);
        let sent = [
            Preview::Start { event_id: EventId::new(), kind: EventKind::AgentThinking },
            Preview::ThoughtDelta { event_id: EventId::new(), text: "hm".into() },
            Preview::TextDelta { event_id: EventId::new(), index: 1, text: "hi".into() },
        ];
        bus.receive("{\"t\":\"from_a_later_version\"}");
        bus.receive("not json");
        for p in &sent {
            for m in Relayed::preview(&session, 3, p) {
                bus.receive(&m);
            }
        }
        for p in sent {
            assert_eq!(rx.try_recv().unwrap(), Placed { after_seq: 3, preview: p });
        }
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn previews_go_to_other_processes_only_while_they_watch() {
        let bus = PreviewBus::default();
        let (watched, other) = (SessionId::new(), SessionId::new());
        assert!(!bus.is_watched_elsewhere(&watched));
        for m in Relayed::watching(std::slice::from_ref(&watched)) {
            bus.receive(&m);
        }
        assert!(bus.is_watched_elsewhere(&watched));
        assert!(!bus.is_watched_elsewhere(&other), "a session nobody watches elsewhere is not sent");
    }
}
