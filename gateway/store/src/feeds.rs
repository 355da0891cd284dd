//! The feed: the durable hand-over between a commit and the outbound notifications it causes
//! (docs/adr/0023, "one delivery service"). Every channel of the delivery service is fed the
//! same way, so crash safety is argued once, here.
//!
//! - **Written by the commit.** The transaction that appends events also writes their feed
//!   rows: the lifecycle feed ([`LIFECYCLE_FEED`], events of [`crate::FEED_KINDS`] of every
//!   session, while `Webhooks::set_event_feed` is on) and, for a session some channel
//!   subscribed to ([`Subscribe`], written with an admission, or [`Feeds::follow`] later), one
//!   row per subscribed channel and event. So an event is fed if and only if it committed. A
//!   session nobody subscribed to costs its commits nothing more: the update that advances the
//!   session's log says whether it is subscribed.
//! - **Taken, then settled.** A channel reads its oldest rows ([`Feeds::take_feed`]: a read,
//!   nothing is held), turns them into deliveries outside any transaction (it may read what it
//!   needs to fold them), and settles ([`Feeds::settle_feed`]): the rows are deleted, the
//!   deliveries queued, the keys' progress recorded and the adapter's documents written, in
//!   one transaction that writes nothing unless every taken row was still there. A crash
//!   between take and settle leaves the rows to be taken again (at least once, never lost);
//!   two processes that took the same rows cannot both settle them (never queued twice), and
//!   since everyone takes from the oldest row, a later batch is never settled before an
//!   earlier one it overlaps (a key's deliveries are queued in order).
//!
//! The channel names are the adapters' (neutral strings to the store); the store names only
//! its own lifecycle feed.

use async_trait::async_trait;
use gateway_core::SessionId;
use gateway_core::event::Event;

use crate::error::Result;
use crate::{DocumentWrite, NewDelivery};

/// The channel name of the lifecycle feed (every row written before channels had names).
pub const LIFECYCLE_FEED: &str = "lifecycle";

/// A subscription written with an admission: `channel` follows the admission's session for
/// `key` (a name of the channel's own, such as a task id), from the session's first event
/// (`after_seq` 0; the channel decides what its key makes of events before it existed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub channel: String,
    pub key: String,
}

/// One key following one session, and how far it has been fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedKey {
    pub session_id: SessionId,
    pub key: String,
    /// Events up to this seq have been settled for this key.
    pub after_seq: u64,
}

/// One fed event: its feed position (what a settlement deletes) and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Fed {
    pub position: i64,
    pub event: Event,
}

/// What [`Feeds::take_feed`] read: the oldest rows of a channel, in feed order, and the
/// channel's subscriptions to the sessions of those rows (none for the lifecycle feed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeedBatch {
    pub fed: Vec<Fed>,
    pub keys: Vec<FeedKey>,
}

/// What one settlement writes, all or nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeedSettlement {
    /// The positions taken: deleted, every one of them still there or nothing is written.
    pub taken: Vec<i64>,
    /// Queued in this order (a topic's deliveries are made in the order queued).
    pub deliveries: Vec<NewDelivery>,
    /// The adapter state the deliveries explain (compare-and-set: a conflict writes nothing).
    pub documents: Vec<DocumentWrite>,
    /// Keys fed through a seq (`after_seq` only ever moves forward).
    pub advanced: Vec<(String, u64)>,
    /// Keys that follow nothing more: their subscriptions are deleted.
    pub ended: Vec<String>,
}

#[async_trait]
pub trait Feeds: Send + Sync {
    /// Up to `limit` of `channel`'s oldest feed rows with their events, and its
    /// subscriptions to their sessions. Holds nothing: settle what was taken.
    async fn take_feed(&self, channel: &str, limit: u32) -> Result<FeedBatch>;

    /// Settles taken rows in one transaction (see the module doc). False, writing nothing,
    /// when some taken row is gone (another settlement took it first); the caller drops what
    /// it made of the batch and takes again. A document conflict fails the call, also writing
    /// nothing.
    async fn settle_feed(&self, channel: &str, settlement: FeedSettlement) -> Result<bool>;

    /// Subscribes `channel` to an existing session for `key` from the session's next event:
    /// every event committed after this call is fed, none committed before. A key that is
    /// already subscribed keeps its progress. False, writing nothing, when the session does
    /// not exist or is deleted.
    async fn follow(&self, channel: &str, session: &SessionId, key: &str) -> Result<bool>;
}
