//! The delivery outbox: leased, retried, ordered per topic.

use std::time::Duration;

use async_trait::async_trait;
use gateway_core::DeliveryId;

use super::Hints;
use super::{Engine, SqlStore, query, query_as};
use crate::error::Result;
use crate::model::millis;
use crate::rows::{DeliveryRow, DeliveryStateRow};
use crate::sql::WriteTx;
use crate::{Delivery, DeliveryClaim, DeliveryState, NewDelivery, Outbox, OutboxStats};

/// Due deliveries: pending, due, not leased (or lease expired), and the oldest pending one of
/// their topic, of topics starting with `$3`. `$1` now, `$2` limit.
macro_rules! claim_deliveries_sql {
    ($lock:literal) => {
        concat!(
            "SELECT o.id, o.topic, o.url, o.headers, o.body, o.attempts FROM outbox o \
             WHERE o.state = 'pending' AND o.next_attempt_at <= $1 AND substr(o.topic, 1, length($3)) = $3 \
               AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= $1) \
               AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.topic = o.topic AND p.state = 'pending' \
                               AND (p.created_at, p.id) < (o.created_at, o.id)) \
             ORDER BY o.next_attempt_at, o.id",
            $crate::sql::limit!(2),
            $lock
        )
    };
}
pub(crate) use claim_deliveries_sql;

#[async_trait]
impl<E: Engine> Outbox for SqlStore<E> {
    async fn enqueue_deliveries(&self, deliveries: Vec<NewDelivery>) -> Result<Vec<DeliveryId>> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let ids = Self::insert_deliveries(&mut tx, deliveries, now).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(ids)
    }

    async fn claim_deliveries(&self, claim: DeliveryClaim<'_>) -> Result<Vec<Delivery>> {
        let DeliveryClaim { owner, topics, limit, lease } = claim;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let rows = query_as::<DeliveryRow>(E::CLAIM_DELIVERIES)
            .bind(now)
            .bind(i64::from(limit.max(1)))
            .bind(topics)
            .fetch_all(&mut *tx)
            .await?;
        for r in &rows {
            query("UPDATE outbox SET lease_owner = $2, lease_expires_at = $3, updated_at = $4 WHERE id = $1")
                .bind(r.id.as_str())
                .bind(owner)
                .bind(now + millis(lease))
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        self.finish(tx, Hints::default()).await?;
        rows.into_iter().map(DeliveryRow::into_delivery).collect()
    }

    async fn delivered(&self, id: &DeliveryId) -> Result<()> {
        self.settle_delivery(id, "delivered", None, None).await
    }

    async fn retry_delivery(&self, id: &DeliveryId, after: Duration, error: &str) -> Result<()> {
        self.settle_delivery(id, "pending", Some(after), Some(error)).await
    }

    async fn fail_delivery(&self, id: &DeliveryId, error: &str) -> Result<()> {
        self.settle_delivery(id, "failed", None, Some(error)).await
    }

    async fn delivery_state(&self, id: &DeliveryId) -> Result<Option<(DeliveryState, u32)>> {
        let row = query_as::<DeliveryStateRow>("SELECT state, attempts FROM outbox WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&mut *self.reader().await?)
            .await?;
        Ok(row.map(|r| {
            let state = match r.state.as_str() {
                "delivered" => DeliveryState::Delivered,
                "failed" => DeliveryState::Failed,
                _ => DeliveryState::Pending,
            };
            (state, u32::try_from(r.attempts).unwrap_or(u32::MAX))
        }))
    }

    async fn outbox_stats(&self) -> Result<OutboxStats> {
        let mut conn = self.reader().await?;
        let (pending, oldest): (i64, Option<i64>) =
            query_as("SELECT COUNT(*), MIN(created_at) FROM outbox WHERE state = 'pending'")
                .fetch_one(&mut *conn)
                .await?;
        let now = Self::now_on(&mut conn).await?;
        let age = oldest.map_or(0, |t| now.saturating_sub(t).max(0));
        Ok(OutboxStats { pending: pending.max(0) as u64, oldest_age: Duration::from_millis(age as u64) })
    }
}

impl<E: Engine> SqlStore<E> {
    /// Ends an attempt: counts it, releases the lease, and sets the next state. A delivery
    /// already final stays so: a deliverer whose lease expired while another delivered the
    /// row must not put it back in the queue (its late answer is ignored).
    async fn settle_delivery(
        &self,
        id: &DeliveryId,
        state: &str,
        after: Option<Duration>,
        error: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query(
            "UPDATE outbox SET state = $2, attempts = attempts + 1, lease_owner = NULL, lease_expires_at = NULL, \
             next_attempt_at = $3, last_error = COALESCE($4, last_error), updated_at = $5 WHERE id = $1 AND state = 'pending'",
        )
        .bind(id.as_str())
        .bind(state)
        .bind(now + after.map(millis).unwrap_or(0))
        .bind(error.map(|e| e.chars().take(1000).collect::<String>()))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(())
    }
}

impl<E: Engine> SqlStore<E> {
    /// Inserts deliveries in a write transaction.
    pub(crate) async fn insert_deliveries(
        tx: &mut WriteTx<E>,
        deliveries: Vec<NewDelivery>,
        now: i64,
    ) -> Result<Vec<DeliveryId>> {
        let mut ids = Vec::with_capacity(deliveries.len());
        // created_at orders a topic's deliveries: strictly after everything the topic
        // already holds (so a later batch never sorts before an earlier one, even if the
        // clock stepped back or both fell in one millisecond), and in the batch's order.
        let mut next: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for d in deliveries {
            let at = match next.get(&d.topic) {
                Some(at) => *at,
                None => {
                    let (last,): (i64,) = query_as("SELECT COALESCE(MAX(created_at), 0) FROM outbox WHERE topic = $1")
                        .bind(d.topic.as_str())
                        .fetch_one(&mut **tx)
                        .await?;
                    now.max(last + 1)
                }
            };
            next.insert(d.topic.clone(), at + 1);
            let id = DeliveryId::new();
            query(
                "INSERT INTO outbox (id, topic, url, headers, body, state, next_attempt_at, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $6)",
            )
            .bind(id.as_str())
            .bind(d.topic)
            .bind(d.url)
            .bind(serde_json::to_string(&d.headers)?)
            .bind(d.body)
            .bind(now)
            .bind(at)
            .execute(&mut **tx)
            .await?;
            ids.push(id);
        }
        Ok(ids)
    }
}
