//! Messages between the processes that share one database, outside any transaction: what
//! travels here is best effort (a message may be lost, never reordered between one sender
//! and one receiver) and is never stored. On PostgreSQL they ride NOTIFY, sent by one task
//! per process in order; SQLite serves one process and has none.
//!
//! Two kinds share the one ordered queue, each on its own channel: the commit hints of the
//! wake-up hub (`wake.rs`), queued when their transaction has committed, and the messages of
//! callers, one line of text each that the store does not read (the runtime's preview relay,
//! `gateway_runtime::previews`). Lines of one kind that queue up together share a NOTIFY
//! payload, and every payload queued by then goes in one statement, so a busy process pays
//! one round trip per batch rather than one per commit inside each write transaction.

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

/// Which channel a queued line goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Commit hints, read by the other processes' wake-up hubs.
    Wake,
    /// Callers' messages, read through [`Peers::subscribe`].
    Peers,
}

/// The messages of one process's store: what it sends and what the others sent.
pub struct Peers {
    outbox: mpsc::Sender<(Lane, String)>,
    inbox: broadcast::Sender<Arc<str>>,
    /// The first line of every payload this process sends, so it can skip its own.
    origin: String,
    dropped: Counter,
}

/// The sending end the engine's task drains ([`Peers::new`]).
pub(crate) struct Outbox {
    rx: mpsc::Receiver<(Lane, String)>,
    origin: String,
    sent: Counter,
    dropped: Counter,
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
        self.queue(Lane::Peers, message)
    }

    /// Queues a committed transaction's hints (encoded, one line each) for the other
    /// processes' wake-up hubs. A hint lost here costs them latency, never work (invariant 3).
    pub(crate) fn hints(&self, lines: impl IntoIterator<Item = String>) {
        for line in lines {
            self.queue(Lane::Wake, line);
        }
    }

    fn queue(&self, lane: Lane, line: String) -> bool {
        match self.outbox.try_send((lane, line)) {
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
    /// Waits for the next lines and packs every one queued by then into payloads under the
    /// NOTIFY limit, in order: consecutive lines of one lane share a payload (headed by this
    /// process's origin), a change of lane starts the next. `None` once every sender is gone.
    pub async fn next_payloads(&mut self) -> Option<Vec<(Lane, String)>> {
        let first = self.rx.recv().await?;
        let mut payloads: Vec<(Lane, String)> = Vec::new();
        let mut push = |(lane, line): (Lane, String)| match payloads.last_mut() {
            Some((l, current)) if *l == lane && current.len() + 1 + line.len() <= PAYLOAD_LIMIT => {
                current.push('\n');
                current.push_str(&line);
            }
            _ => payloads.push((lane, format!("{}\n{line}", self.origin))),
        };
        push(first);
        // A bounded batch, so one round trip never carries an unbounded statement.
        for _ in 1..256 {
            match self.rx.try_recv() {
                Ok(item) => push(item),
                Err(_) => break,
            }
        }
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
        let lines: Vec<&str> = payloads.iter().flat_map(|(_, p)| p.lines()).filter(|l| !l.starts_with("o:")).collect();
        assert_eq!(lines.iter().map(|l| &l[..1]).collect::<String>(), "01234");
        assert!(
            payloads.iter().all(|(l, p)| *l == Lane::Peers && p.len() < 8_000 && p.starts_with("o:0000000000000001\n"))
        );
    }

    #[tokio::test]
    async fn hints_and_messages_keep_their_order_each_lane_in_its_own_payloads() {
        let (peers, mut out) = pair();
        peers.hints(["s:a:1".to_owned(), "r".to_owned()]);
        peers.send("preview".into());
        peers.hints(["s:a:2".to_owned()]);
        let payloads = out.next_payloads().await.unwrap();
        let o = "o:0000000000000001";
        assert_eq!(
            payloads,
            vec![
                (Lane::Wake, format!("{o}\ns:a:1\nr")),
                (Lane::Peers, format!("{o}\npreview")),
                (Lane::Wake, format!("{o}\ns:a:2")),
            ]
        );
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
