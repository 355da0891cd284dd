//! Messages between the processes that share one database, outside any transaction: what
//! travels here is best effort (a message may be lost, never reordered between one sender
//! and one receiver) and is never stored. On PostgreSQL they ride NOTIFY on their own
//! channel, sent by one task per process in order; SQLite serves one process and has none.
//!
//! The store knows nothing of what the messages mean: a message is one line of text a
//! caller encodes (the runtime's preview relay, `gateway_runtime::previews`). Many lines
//! share one NOTIFY payload when they queue up, so a busy sender costs one round trip per
//! batch, not per message.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{broadcast, mpsc};

/// The longest message [`Peers::send`] takes. A NOTIFY payload must stay under 8000 bytes
/// and also carries the sender's origin line.
pub const MAX_MESSAGE: usize = 7_900;

/// The longest NOTIFY payload PostgreSQL takes (its limit is "shorter than 8000 bytes").
const PAYLOAD_LIMIT: usize = 7_999;

/// Messages queued to send before new ones are dropped (the database is slower than the
/// senders: previews are best effort, and memory stays bounded).
const OUTBOX: usize = 4_096;

/// Messages from other processes a slow receiver may fall behind by before it loses some.
const INBOX: usize = 4_096;

/// The messages of one process's store: what it sends and what the others sent.
pub struct Peers {
    outbox: mpsc::Sender<String>,
    inbox: broadcast::Sender<Arc<str>>,
    /// The first line of every payload this process sends, so it can skip its own.
    origin: String,
    dropped: Counter,
}

/// The sending end the engine's task drains ([`Peers::new`]).
pub(crate) struct Outbox {
    pub rx: mpsc::Receiver<String>,
    pub origin: String,
    pub sent: Counter,
    pub dropped: Counter,
}

impl Peers {
    /// A channel and the outbox its engine task sends from. `origin` identifies this process
    /// (the wake-up hub's, so one tag names the process on both channels).
    pub(crate) fn new(origin: String, metrics: &crate::StoreMetrics) -> (Self, Outbox) {
        let (outbox, rx) = mpsc::channel(OUTBOX);
        let peers = Self {
            outbox,
            inbox: broadcast::channel(INBOX).0,
            origin: origin.clone(),
            dropped: metrics.peer_dropped.clone(),
        };
        let out = Outbox { rx, origin, sent: metrics.peer_sent.clone(), dropped: metrics.peer_dropped.clone() };
        (peers, out)
    }

    /// Queues one message for every other process. Returns false (and counts it dropped) when
    /// it cannot go: longer than [`MAX_MESSAGE`], holding a line break, or the queue full.
    pub fn send(&self, message: String) -> bool {
        if message.len() > MAX_MESSAGE || message.contains('\n') {
            self.dropped.inc();
            return false;
        }
        match self.outbox.try_send(message) {
            Ok(()) => true,
            Err(_) => {
                self.dropped.inc();
                false
            }
        }
    }

    /// Messages other processes send from now on, in the order each sent them.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.inbox.subscribe()
    }

    /// Delivers a received payload's lines, unless this process sent it.
    pub(crate) fn deliver(&self, payload: &str) {
        // The first line is always the sender's origin.
        let mut lines = payload.lines();
        if lines.next() == Some(self.origin.as_str()) {
            return;
        }
        for line in lines.filter(|l| !l.is_empty()) {
            // Nobody listening is fine: nobody here asked.
            let _ = self.inbox.send(Arc::from(line));
        }
    }
}

impl Outbox {
    /// Waits for the next messages and packs every one queued by then into payloads under
    /// the NOTIFY limit, in order. `None` once every sender is gone.
    pub async fn next_payloads(&mut self) -> Option<Vec<String>> {
        let first = self.rx.recv().await?;
        let mut payloads = Vec::new();
        let mut current = self.origin.clone();
        let origin = self.origin.len();
        let mut push = |m: String, current: &mut String| {
            if current.len() > origin && current.len() + 1 + m.len() > PAYLOAD_LIMIT {
                payloads.push(std::mem::replace(current, self.origin.clone()));
            }
            current.push('\n');
            current.push_str(&m);
        };
        push(first, &mut current);
        let mut taken = 1;
        // A bounded batch, so one round trip never carries an unbounded statement.
        while taken < 256 {
            match self.rx.try_recv() {
                Ok(m) => {
                    push(m, &mut current);
                    taken += 1;
                }
                Err(_) => break,
            }
        }
        payloads.push(current);
        Some(payloads)
    }

    /// Counts what one send did with `messages` messages.
    pub fn settled(&self, messages: usize, delivered: bool) {
        let counter = if delivered { &self.sent } else { &self.dropped };
        counter.inc_by(messages as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Peers, Outbox) {
        Peers::new("o:0000000000000001".into(), &crate::StoreMetrics::default())
    }

    #[tokio::test]
    async fn queued_messages_share_payloads_under_the_limit_in_order() {
        let (peers, mut out) = pair();
        let big = "x".repeat(3_000);
        for i in 0..5 {
            assert!(peers.send(format!("{i}{big}")));
        }
        let payloads = out.next_payloads().await.unwrap();
        assert_eq!(payloads.len(), 3, "two 3 kB messages fit one payload, a third does not");
        let lines: Vec<&str> = payloads.iter().flat_map(|p| p.lines()).filter(|l| !l.starts_with("o:")).collect();
        assert_eq!(lines.iter().map(|l| &l[..1]).collect::<String>(), "01234");
        assert!(payloads.iter().all(|p| p.len() < 8_000 && p.starts_with("o:0000000000000001\n")));
    }

    #[test]
    fn messages_that_cannot_travel_are_refused_not_cut() {
        let (peers, _out) = pair();
        assert!(!peers.send("x".repeat(MAX_MESSAGE + 1)));
        assert!(!peers.send("two\nlines".into()));
        assert!(peers.send("x".repeat(MAX_MESSAGE)));
    }

    #[tokio::test]
    async fn a_process_hears_others_and_not_itself() {
        let (peers, _out) = pair();
        let mut rx = peers.subscribe();
        peers.deliver("o:0000000000000001\nmine");
        peers.deliver("o:00000000000000ff\na\nb");
        assert_eq!(&*rx.recv().await.unwrap(), "a");
        assert_eq!(&*rx.recv().await.unwrap(), "b");
        assert!(rx.try_recv().is_err(), "its own payload was skipped");
    }
}
