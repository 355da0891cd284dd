//! What the store measures of its own commits, for `/metrics`.
//!
//! The store owns these handles (they are cheap clones of shared cells) and the process's
//! registry holds the same cells ([`StoreMetrics::register`]), so a commit records without
//! knowing who reads: the runtime registers them once and the exporter encodes them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Commit latency buckets (seconds): an fsync on a good disk is ~0.1–1 ms, a PostgreSQL
/// round trip a few ms, a stalled disk seconds.
const COMMIT_BUCKETS: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Logical writes sharing one transaction (group commit on SQLite; always 1 on PostgreSQL).
const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

#[derive(Debug, Clone)]
pub struct StoreMetrics {
    /// Logical writes committed ([`Store::writes_committed`](crate::Store::writes_committed)).
    pub(crate) writes: Counter,
    /// How long one transaction's commit took: on SQLite one group commit and its fsync.
    pub(crate) commit_seconds: Histogram,
    /// How many logical writes one commit carried.
    pub(crate) batch_writes: Histogram,
    /// Messages sent to the other processes sharing the database (`peers.rs`).
    pub(crate) peer_sent: Counter,
    /// Messages to the other processes that were dropped: a full queue, a failed send.
    pub(crate) peer_dropped: Counter,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        Self {
            writes: Counter::default(),
            commit_seconds: Histogram::new(COMMIT_BUCKETS),
            batch_writes: Histogram::new(BATCH_BUCKETS),
            peer_sent: Counter::default(),
            peer_dropped: Counter::default(),
        }
    }
}

impl StoreMetrics {
    /// The families [`StoreMetrics::register`] adds.
    pub const NAMES: [&'static str; 5] = [
        "gateway_store_writes_committed",
        "gateway_store_commit_duration_seconds",
        "gateway_store_commit_batch_writes",
        "gateway_store_peer_messages_sent",
        "gateway_store_peer_messages_dropped",
    ];

    /// Adds these series to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            Self::NAMES[0],
            "Logical writes (admissions, fenced commits, settlements, claims, documents) the store committed",
            self.writes.clone(),
        );
        registry.register(
            Self::NAMES[1],
            "Time one database commit took; on SQLite one group commit including its fsync",
            self.commit_seconds.clone(),
        );
        registry.register(
            Self::NAMES[2],
            "Logical writes that shared one commit (SQLite group commit; 1 on PostgreSQL)",
            self.batch_writes.clone(),
        );
        registry.register(
            Self::NAMES[3],
            "Messages (live previews) sent to the other processes sharing a PostgreSQL database",
            self.peer_sent.clone(),
        );
        registry.register(
            Self::NAMES[4],
            "Messages to the other processes that were dropped (queue full, send failed); best effort by design",
            self.peer_dropped.clone(),
        );
    }

    /// One commit of `writes` logical writes that took `took`.
    pub(crate) fn committed(&self, writes: usize, took: std::time::Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
        self.batch_writes.observe(writes as f64);
    }
}
