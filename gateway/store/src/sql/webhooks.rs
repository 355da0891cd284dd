//! Webhook endpoints (`crate::webhooks`); their feed is `feeds.rs`.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use gateway_core::WebhookId;

use super::{Engine, Hints, SqlStore, query, query_as};
use crate::error::{Guard, Result, StoreError};
use crate::rows::WebhookRow;
use crate::sql::WriteTx;
use crate::{EndpointOrigin, NewEndpoint, WebhookEndpoint, Webhooks};

macro_rules! webhook_cols {
    () => {
        "id, origin, url, secret, event_types, description, status, consecutive_failures, created_at, disabled_at"
    };
}

const WEBHOOK_BY_ID: &str = concat!("SELECT ", webhook_cols!(), " FROM webhook_endpoints WHERE id = $1");

impl<E: Engine> SqlStore<E> {
    /// Creates the endpoint, or replaces the address, secret and types of the one with its id
    /// (keeping its failure record and creator).
    async fn upsert_webhook(tx: &mut WriteTx<E>, e: &NewEndpoint, created_by: Option<&str>, now: i64) -> Result<()> {
        query(
            "INSERT INTO webhook_endpoints (id, origin, url, secret, event_types, description, status, consecutive_failures, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, 'enabled', 0, $7, $8) \
             ON CONFLICT (id) DO UPDATE SET url = excluded.url, secret = excluded.secret, \
             event_types = excluded.event_types, description = excluded.description",
        )
        .bind(e.id.as_str())
        .bind(e.origin.as_str())
        .bind(e.url.as_str())
        .bind(e.secret.as_str())
        .bind(serde_json::to_string(&e.event_types)?)
        .bind(e.description.clone())
        .bind(now)
        .bind(created_by.map(str::to_owned))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Commits a write of endpoint `id` and answers with the endpoint as that transaction left
    /// it: every write of an endpoint returns it, read before the commit so no other write
    /// comes between.
    async fn commit_webhook(&self, mut tx: WriteTx<E>, id: &WebhookId) -> Result<WebhookEndpoint> {
        let out =
            query_as::<WebhookRow>(WEBHOOK_BY_ID).bind(id.as_str()).found(&mut *tx, "webhook endpoint", id).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(out)
    }
}

#[async_trait]
impl<E: Engine> Webhooks for SqlStore<E> {
    fn set_event_feed(&self, on: bool) {
        self.feed.store(on, Ordering::Relaxed);
    }

    async fn put_webhook(&self, e: NewEndpoint) -> Result<WebhookEndpoint> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        Self::upsert_webhook(&mut tx, &e, None, now).await?;
        self.commit_webhook(tx, &e.id).await
    }

    async fn register_webhook(&self, e: NewEndpoint, creator: &str, max_per_creator: u64) -> Result<WebhookEndpoint> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let (count,) = query_as::<(i64,)>(
            "SELECT COUNT(*) FROM webhook_endpoints WHERE origin = 'api' AND created_by = $1 AND id <> $2",
        )
        .bind(creator)
        .bind(e.id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        let count = u64::try_from(count).map_err(StoreError::corrupt)?;
        if count >= max_per_creator {
            return Err(StoreError::Guard(Guard::WebhookLimit {
                creator: creator.to_owned(),
                count,
                limit: max_per_creator,
            }));
        }
        Self::upsert_webhook(&mut tx, &e, Some(creator), now).await?;
        self.commit_webhook(tx, &e.id).await
    }

    async fn prune_config_webhooks(&self, keep: &[WebhookId]) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let rows = query_as::<(String,)>("SELECT id FROM webhook_endpoints WHERE origin = 'config'")
            .fetch_all(&mut *tx)
            .await?;
        for (id,) in rows.into_iter().filter(|(id,)| !keep.iter().any(|k| k.as_str() == id)) {
            query("DELETE FROM webhook_endpoints WHERE id = $1").bind(id).execute(&mut *tx).await?;
        }
        self.finish(tx, Hints::default()).await
    }

    async fn list_webhooks(&self) -> Result<Vec<WebhookEndpoint>> {
        query_as::<WebhookRow>(concat!("SELECT ", webhook_cols!(), " FROM webhook_endpoints ORDER BY created_at, id"))
            .decoded(&mut *self.reader().await?)
            .await
    }

    async fn get_webhook(&self, id: &WebhookId) -> Result<WebhookEndpoint> {
        self.by_id::<WebhookRow>(WEBHOOK_BY_ID, "webhook endpoint", id.as_str()).await
    }

    async fn delete_webhook(&self, id: &WebhookId) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let gone =
            Self::deleted(&mut tx, "DELETE FROM webhook_endpoints WHERE id = $1 RETURNING id", id.as_str()).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(gone)
    }

    async fn set_webhook_enabled(&self, id: &WebhookId, enabled: bool) -> Result<WebhookEndpoint> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query(
            "UPDATE webhook_endpoints SET status = $2, consecutive_failures = 0, \
             disabled_at = CASE WHEN $2 = 'enabled' THEN NULL ELSE COALESCE(disabled_at, $3) END WHERE id = $1",
        )
        .bind(id.as_str())
        .bind(if enabled { "enabled" } else { "disabled" })
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.commit_webhook(tx, id).await
    }

    async fn record_webhook_attempt(&self, id: &WebhookId, ok: bool, disable_after: u32) -> Result<WebhookEndpoint> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        if ok {
            query("UPDATE webhook_endpoints SET consecutive_failures = 0 WHERE id = $1")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
        } else {
            query(
                "UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1, \
                 status = CASE WHEN consecutive_failures + 1 >= $2 THEN 'disabled' ELSE status END, \
                 disabled_at = CASE WHEN consecutive_failures + 1 >= $2 THEN COALESCE(disabled_at, $3) ELSE disabled_at END \
                 WHERE id = $1",
            )
            .bind(id.as_str())
            .bind(i64::from(disable_after))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        self.commit_webhook(tx, id).await
    }
}

impl crate::rows::WebhookRow {
    pub(crate) fn origin(&self) -> Result<EndpointOrigin> {
        match self.origin.as_str() {
            "config" => Ok(EndpointOrigin::Config),
            "api" => Ok(EndpointOrigin::Api),
            other => Err(StoreError::corrupt(format!("webhook origin {other:?}"))),
        }
    }
}
