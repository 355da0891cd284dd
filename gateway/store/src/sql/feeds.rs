//! The feed (`crate::feeds`): rows written by the committing transaction, taken and settled
//! by the channels of the delivery service.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use gateway_core::SessionId;

use super::{Engine, Hints, SqlStore, query, query_as};
use crate::error::Result;
use crate::feeds::{FeedBatch, FeedKey, FeedSettlement, Feeds, LIFECYCLE_FEED, Subscribe};
use crate::rows::FeedRow;
use crate::sql::WriteTx;
use crate::{FEED_KINDS, StoreError};

/// A channel's oldest rows with their events: `$1` channel, `$2` limit.
const TAKE_FEED: &str = concat!(
    "SELECT f.id AS position, e.session_id, e.seq, e.id, e.payload, e.created_at, e.run_id, e.epoch \
     FROM event_feed f JOIN events e ON e.session_id = f.session_id AND e.id = f.event_id \
     WHERE f.channel = $1 ORDER BY f.id",
    crate::sql::limit!(2)
);

/// One row per subscribed channel for each event of a session in seqs `[$2, $3]` (one
/// statement per committed batch, in seq order).
const FEED_SUBSCRIBED: &str = "INSERT INTO event_feed (channel, session_id, event_id) \
     SELECT s.channel, e.session_id, e.id FROM events e \
     CROSS JOIN (SELECT DISTINCT channel FROM feed_subscriptions WHERE session_id = $1) s \
     WHERE e.session_id = $1 AND e.seq >= $2 AND e.seq <= $3 ORDER BY e.seq, s.channel";

impl<E: Engine> SqlStore<E> {
    /// Feeds the events of a transaction's batches (in the transaction): the lifecycle kinds
    /// while that feed is on, and everything of a subscribed session to its channels. The
    /// inserts are deferred: they go out with the commit.
    pub(crate) async fn feed_events(&self, tx: &mut WriteTx<E>, hints: &Hints) -> Result<()> {
        let lifecycle = self.feed.load(Ordering::Relaxed);
        for (session, events) in hints.batches() {
            if lifecycle {
                for e in events.iter().filter(|e| FEED_KINDS.contains(&e.kind())) {
                    query("INSERT INTO event_feed (channel, session_id, event_id) VALUES ($1, $2, $3)")
                        .bind(LIFECYCLE_FEED)
                        .bind(session.as_str())
                        .bind(e.id.as_str())
                        .defer(&mut **tx)
                        .await?;
                }
            }
            if let (true, Some(first), Some(last)) = (hints.is_subscribed(session), events.first(), events.last()) {
                query(FEED_SUBSCRIBED)
                    .bind(session.as_str())
                    .bind(super::bigint(first.seq))
                    .bind(super::bigint(last.seq))
                    .defer(&mut **tx)
                    .await?;
            }
        }
        Ok(())
    }

    /// Writes an admission's subscriptions (in its transaction) and marks the session
    /// subscribed, so this transaction's events and every later commit's are fed.
    pub(crate) async fn subscribe(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        subscriptions: &[Subscribe],
        now: i64,
        hints: &mut Hints,
    ) -> Result<()> {
        if subscriptions.is_empty() {
            return Ok(());
        }
        for s in subscriptions {
            query(
                "INSERT INTO feed_subscriptions (channel, key, session_id, after_seq, created_at) \
                 VALUES ($1, $2, $3, 0, $4) ON CONFLICT (channel, key) DO NOTHING",
            )
            .bind(s.channel.as_str())
            .bind(s.key.as_str())
            .bind(session.as_str())
            .bind(now)
            .defer(&mut **tx)
            .await?;
        }
        query("UPDATE sessions SET feed_subscribed = 1 WHERE id = $1 AND feed_subscribed = 0")
            .bind(session.as_str())
            .defer(&mut **tx)
            .await?;
        hints.subscribed(session);
        Ok(())
    }
}

#[async_trait]
impl<E: Engine> Feeds for SqlStore<E> {
    async fn take_feed(&self, channel: &str, limit: u32) -> Result<FeedBatch> {
        let mut reader = self.reader().await?;
        let rows =
            query_as::<FeedRow>(TAKE_FEED).bind(channel).bind(i64::from(limit.max(1))).fetch_all(&mut *reader).await?;
        let mut sessions: Vec<&SessionId> = rows.iter().map(|r| &r.event.session_id).collect();
        sessions.sort();
        sessions.dedup();
        let mut keys = Vec::new();
        for session in sessions {
            // By session first: ordered by key, SQLite would walk the primary key's index,
            // every subscription of the channel, for each session.
            let mut subscribed = query_as::<(String, i64)>(
                "SELECT key, after_seq FROM feed_subscriptions WHERE session_id = $2 AND channel = $1",
            )
            .bind(channel)
            .bind(session.as_str())
            .fetch_all(&mut *reader)
            .await?;
            subscribed.sort_unstable();
            for (key, after_seq) in subscribed {
                let after_seq = u64::try_from(after_seq).map_err(StoreError::corrupt)?;
                keys.push(FeedKey { session_id: session.clone(), key, after_seq });
            }
        }
        let fed = rows.into_iter().map(|r| crate::feeds::Fed { position: r.position, event: r.event }).collect();
        Ok(FeedBatch { fed, keys })
    }

    async fn settle_feed(&self, channel: &str, s: FeedSettlement) -> Result<bool> {
        if s == FeedSettlement::default() {
            return Ok(true); // nothing to write: no write for the writer either
        }
        let mut tx = self.begin_write().await?;
        let positions = serde_json::to_string(&s.taken).map_err(StoreError::corrupt)?;
        let gone = query(E::DELETE_FEED_ROWS).bind(channel).bind(positions).execute(&mut *tx).await?;
        if gone != s.taken.len() as u64 {
            // Settled by someone else first: dropping the transaction writes nothing.
            return Ok(false);
        }
        let now = Self::now(&mut tx).await?;
        for (key, after_seq) in &s.advanced {
            query(
                "UPDATE feed_subscriptions SET after_seq = CASE WHEN after_seq < $3 THEN $3 ELSE after_seq END \
                 WHERE channel = $1 AND key = $2",
            )
            .bind(channel)
            .bind(key.as_str())
            .bind(super::bigint(*after_seq))
            .execute(&mut *tx)
            .await?;
        }
        for key in &s.ended {
            query("DELETE FROM feed_subscriptions WHERE channel = $1 AND key = $2")
                .bind(channel)
                .bind(key.as_str())
                .execute(&mut *tx)
                .await?;
        }
        for write in &s.documents {
            Self::write_document(&mut tx, write, now).await?;
        }
        if !s.deliveries.is_empty() {
            Self::insert_deliveries(&mut tx, s.deliveries, now).await?;
        }
        self.finish(tx, Hints::default()).await?;
        Ok(true)
    }

    async fn follow(&self, channel: &str, session: &SessionId, key: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // One statement marks the session and reads its tip: a commit appending to it either
        // advanced the row first (its events are at or below the tip, not fed) or waits for
        // this row lock and then sees the mark (its events are fed, all above the tip).
        let tip = query_as::<(i64,)>(
            "UPDATE sessions SET feed_subscribed = 1 WHERE id = $1 AND deleted_at IS NULL RETURNING last_seq",
        )
        .bind(session.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((tip,)) = tip else { return Ok(false) };
        let now = Self::now(&mut tx).await?;
        query(
            "INSERT INTO feed_subscriptions (channel, key, session_id, after_seq, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (channel, key) DO NOTHING",
        )
        .bind(channel)
        .bind(key)
        .bind(session.as_str())
        .bind(tip)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(true)
    }
}
