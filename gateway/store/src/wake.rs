//! Wake-ups: in-process hints that something may have changed.
//!
//! Correctness never depends on a wake-up (invariant 3). Every waiter also polls on a timer,
//! so a lost, late or disabled hint costs latency, never a missed run or event. Hints are
//! sent after the transaction that justifies them has committed; on PostgreSQL the same hints
//! also travel between processes through LISTEN/NOTIFY and arrive here via `deliver`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gateway_core::event::Event;
use gateway_core::{RunId, SessionId};
use tokio::sync::watch;

/// What a session watcher learns: the seq of the last committed event and, when that commit
/// happened in this process, the batch of events it committed. Watchers that are caught up
/// to the batch's first event take it from here instead of reading the store; anyone else
/// (a lagging watcher, a hint from another process) reads the store, so correctness never
/// depends on the batch.
#[derive(Debug, Clone, Default)]
pub struct Tip {
    pub seq: u64,
    pub batch: Option<Arc<[Event]>>,
}

/// Fewest session channels before `watch_session` sweeps unwatched ones.
const SWEEP_MIN: usize = 1024;

/// The in-process wake-up hub of one store.
pub struct Wakeups {
    enabled: bool,
    /// The first line of every NOTIFY payload this hub's store sends (`o:` and a random tag,
    /// written by `peers.rs`), so that its listener can tell its own commits coming back from
    /// other processes'.
    origin: String,
    /// A generation counter bumped by every run-ready hint.
    runs: watch::Sender<u64>,
    sessions: Mutex<HashMap<SessionId, watch::Sender<Tip>>>,
    /// The size at which `watch_session` next drops channels nobody watches: sweeping on
    /// every call would cost a scan of every session per subscription (quadratic under load).
    sweep_at: std::sync::atomic::AtomicUsize,
    cancels: Mutex<HashMap<RunId, watch::Sender<bool>>>,
    /// A generation counter bumped by every cancel hint, for whoever holds many runs.
    any_cancel: watch::Sender<u64>,
}

/// A hint as it travels between processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// A run may be claimable.
    RunReady,
    /// A session's log advanced to this seq.
    SessionAdvanced(SessionId, u64),
    /// A run's cancel intent was set.
    CancelRequested(RunId),
}

impl Hint {
    pub fn encode(&self) -> String {
        match self {
            Hint::RunReady => "r".to_owned(),
            Hint::SessionAdvanced(s, seq) => format!("s:{s}:{seq}"),
            Hint::CancelRequested(r) => format!("c:{r}"),
        }
    }

    pub fn decode(s: &str) -> Option<Self> {
        if s == "r" {
            return Some(Hint::RunReady);
        }
        if let Some(rest) = s.strip_prefix("s:") {
            let (id, seq) = rest.split_once(':')?;
            return Some(Hint::SessionAdvanced(SessionId::parse(id).ok()?, seq.parse().ok()?));
        }
        if let Some(id) = s.strip_prefix("c:") {
            return Some(Hint::CancelRequested(RunId::parse(id).ok()?));
        }
        None
    }
}

impl Wakeups {
    pub fn new(enabled: bool) -> Self {
        let mut tag = [0u8; 8];
        // Two processes with one tag would skip each other's hints (as ids, `gateway_core::ids`,
        // the OS random source failing is not recoverable).
        getrandom::fill(&mut tag).expect("operating system random source unavailable");
        Self {
            enabled,
            origin: format!("o:{:016x}", u64::from_be_bytes(tag)),
            runs: watch::channel(0).0,
            sessions: Mutex::new(HashMap::new()),
            sweep_at: std::sync::atomic::AtomicUsize::new(SWEEP_MIN),
            cancels: Mutex::new(HashMap::new()),
            any_cancel: watch::channel(0).0,
        }
    }

    /// The tag that names this process in what it sends to others.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Delivers a NOTIFY payload, unless this hub's own store sent it: those hints were
    /// delivered here when their commit returned, and a second run-ready hint would send a
    /// Worker to claim again for nothing (five statements on PostgreSQL, every turn). Lines
    /// this version does not know are skipped, so processes of other versions can share a
    /// database.
    pub fn deliver_notified(&self, payload: &str) {
        let mut lines = payload.lines().peekable();
        if lines.peek() == Some(&self.origin.as_str()) {
            return;
        }
        for hint in lines.filter_map(Hint::decode) {
            self.deliver(&hint);
        }
    }

    /// Delivers a hint to local waiters (no-op when wake-ups are disabled).
    pub fn deliver(&self, hint: &Hint) {
        if !self.enabled {
            return;
        }
        match hint {
            Hint::RunReady => self.bump_runs(),
            Hint::SessionAdvanced(session, seq) => self.advance(session, *seq),
            Hint::CancelRequested(run) => {
                let map = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(tx) = map.get(run) {
                    tx.send_replace(true);
                }
                self.any_cancel.send_modify(|g| *g = g.wrapping_add(1));
            }
        }
    }

    /// Whether anyone in this process watches the session (so a commit knows whether sharing
    /// its batch is worth a copy).
    pub fn is_watched(&self, session: &SessionId) -> bool {
        self.enabled
            && self
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(session)
                .is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// The sessions someone in this process watches, with the seq each watch last learnt: what
    /// the process-wide subscription poll asks the store about.
    pub fn watched_sessions(&self) -> Vec<(SessionId, u64)> {
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().filter(|(_, tx)| tx.receiver_count() > 0).map(|(id, tx)| (id.clone(), tx.borrow().seq)).collect()
    }

    /// Delivers a seq the store was polled for, enabled or not: the poll is the safety net
    /// that makes a missed (or disabled) hint cost latency only (invariant 3).
    pub fn deliver_polled(&self, session: &SessionId, seq: u64) {
        self.advance(session, seq);
    }

    /// Moves the session's watch to `seq` if that is further than it knows (without a batch:
    /// the watchers read the store); drops the channel if nobody watches any more.
    fn advance(&self, session: &SessionId, seq: u64) {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = map.get(session) else { return };
        if tx.receiver_count() == 0 {
            map.remove(session);
            return;
        }
        tx.send_if_modified(|cur| {
            let advanced = seq > cur.seq;
            if advanced {
                *cur = Tip { seq, batch: None };
            }
            advanced
        });
    }

    /// Delivers a batch this process just committed (contiguous, ascending seqs).
    pub fn deliver_committed(&self, session: &SessionId, batch: Arc<[Event]>) {
        let Some(last) = batch.last().map(|e| e.seq) else { return };
        if !self.enabled {
            return;
        }
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(session) {
            tx.send_if_modified(|cur| {
                // Also fill in the batch of a seq already announced without one.
                let better = last > cur.seq || (last == cur.seq && cur.batch.is_none());
                if better {
                    *cur = Tip { seq: last, batch: Some(Arc::clone(&batch)) };
                }
                better
            });
        }
    }

    /// Wakes every local waiter of every kind: used after a lost notification connection, when
    /// hints may have been missed.
    pub fn deliver_all(&self) {
        if !self.enabled {
            return;
        }
        self.bump_runs();
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        for tx in map.values() {
            tx.send_modify(|_| {});
        }
        let map = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        for tx in map.values() {
            tx.send_modify(|_| {});
        }
        self.any_cancel.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn bump_runs(&self) {
        self.runs.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// A receiver that changes at every run-ready hint. A Worker marks it seen before it
    /// tries to claim and waits on it after finding nothing, so a hint sent in between is
    /// never lost; with wake-ups disabled it never changes and the poll timer decides.
    pub fn watch_runs(&self) -> watch::Receiver<u64> {
        self.runs.subscribe()
    }

    /// A receiver that changes when the session's log may have advanced.
    pub fn watch_session(&self, session: &SessionId) -> watch::Receiver<Tip> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let sweep_at = self.sweep_at.load(std::sync::atomic::Ordering::Relaxed);
        if map.len() >= sweep_at {
            map.retain(|_, tx| tx.receiver_count() > 0);
            self.sweep_at.store((2 * map.len()).max(SWEEP_MIN), std::sync::atomic::Ordering::Relaxed);
        }
        map.entry(session.clone()).or_insert_with(|| watch::channel(Tip::default()).0).subscribe()
    }

    /// A receiver that changes at every cancel hint, whichever run it names: what a process
    /// that renews many leases at once waits on to learn of interrupts at once.
    pub fn watch_cancels(&self) -> watch::Receiver<u64> {
        self.any_cancel.subscribe()
    }

    /// A receiver that turns true when the run's cancel intent may have been set.
    pub fn watch_cancel(self: &Arc<Self>, run: &RunId) -> CancelWatch {
        let mut map = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        let rx = map.entry(run.clone()).or_insert_with(|| watch::channel(false).0).subscribe();
        CancelWatch { hub: Arc::clone(self), run: run.clone(), rx }
    }
}

/// A cancel watch that unregisters itself when dropped.
pub struct CancelWatch {
    hub: Arc<Wakeups>,
    run: RunId,
    pub rx: watch::Receiver<bool>,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        let mut map = self.hub.cancels.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.run).is_some_and(|tx| tx.receiver_count() <= 1) {
            map.remove(&self.run);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_round_trip() {
        for h in [Hint::RunReady, Hint::SessionAdvanced(SessionId::new(), 42), Hint::CancelRequested(RunId::new())] {
            assert_eq!(Hint::decode(&h.encode()), Some(h));
        }
        assert_eq!(Hint::decode("s:nope:1"), None);
        assert_eq!(Hint::decode("x"), None);
    }

    #[test]
    fn a_hub_skips_its_own_notifications_and_delivers_other_processes() {
        let ours = Wakeups::new(true);
        let theirs = Wakeups::new(true);
        // As `peers.rs` sends them: the origin line, then one line per hint.
        let payload = format!("{}\n{}", ours.origin(), Hint::RunReady.encode());
        let (mine, mut other) = (ours.watch_runs(), theirs.watch_runs());
        ours.deliver_notified(&payload);
        assert!(!mine.has_changed().unwrap(), "our own commit, already delivered here, is not delivered again");
        theirs.deliver_notified(&payload);
        assert!(other.has_changed().unwrap(), "another process's commit wakes this one");
        other.borrow_and_update();
        // A payload of an older version (no origin line) is still delivered.
        ours.deliver_notified("r");
        assert!(mine.has_changed().unwrap());
    }

    #[tokio::test]
    async fn session_watch_sees_advances_and_disabled_hub_stays_silent() {
        let hub = Wakeups::new(true);
        let s = SessionId::new();
        let mut rx = hub.watch_session(&s);
        hub.deliver(&Hint::SessionAdvanced(s.clone(), 3));
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow().seq, 3);

        let off = Wakeups::new(false);
        let mut rx = off.watch_session(&s);
        off.deliver(&Hint::SessionAdvanced(s, 3));
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), rx.changed()).await.is_err());
    }
}
