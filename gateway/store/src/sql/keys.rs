//! API keys and environment keys: one table, one lookup by hash (docs/adr/0013).

use async_trait::async_trait;
use gateway_core::{ApiKeyId, EnvironmentId, Timestamp};

use super::Hints;
use super::{Engine, SqlStore, query, query_as};
use crate::error::{Result, StoreError};
use crate::{ApiKey, ApiKeys};

#[async_trait]
impl<E: Engine> ApiKeys for SqlStore<E> {
    async fn create_api_key(&self, name: &str, hash: &str) -> Result<ApiKey> {
        self.insert_key(None, name, hash).await
    }

    async fn find_api_key(&self, hash: &str) -> Result<Option<ApiKey>> {
        query_as::<ApiKey>(
            "SELECT id, name, created_at, revoked_at, environment_id FROM api_keys WHERE hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .maybe(&mut *self.reader().await?)
        .await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKey>> {
        query_as::<ApiKey>("SELECT id, name, created_at, revoked_at, environment_id FROM api_keys WHERE environment_id IS NULL ORDER BY created_at, id")
            .decoded(&mut *self.reader().await?)
            .await
    }

    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool> {
        self.revoke_key(id, None).await
    }

    async fn count_api_keys(&self) -> Result<u64> {
        let (n,): (i64,) =
            query_as("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL AND environment_id IS NULL")
                .fetch_one(&mut *self.reader().await?)
                .await?;
        u64::try_from(n).map_err(StoreError::corrupt)
    }

    async fn create_environment_key(&self, environment: &EnvironmentId, name: &str, hash: &str) -> Result<ApiKey> {
        self.insert_key(Some(environment), name, hash).await
    }

    async fn list_environment_keys(&self, environment: &EnvironmentId) -> Result<Vec<ApiKey>> {
        query_as::<ApiKey>(
            "SELECT id, name, created_at, revoked_at, environment_id FROM api_keys WHERE environment_id = $1 ORDER BY created_at, id",
        )
        .bind(environment.as_str())
        .decoded(&mut *self.reader().await?)
        .await
    }

    async fn revoke_environment_key(&self, environment: &EnvironmentId, id: &ApiKeyId) -> Result<bool> {
        self.revoke_key(id, Some(environment)).await
    }
}

impl<E: Engine> SqlStore<E> {
    async fn insert_key(&self, environment: Option<&EnvironmentId>, name: &str, hash: &str) -> Result<ApiKey> {
        let id = ApiKeyId::new();
        let now = self
            .write_one(|now| {
                query("INSERT INTO api_keys (id, name, hash, created_at, environment_id) VALUES ($1, $2, $3, $4, $5)")
                    .bind(id.as_str())
                    .bind(name)
                    .bind(hash)
                    .bind(now)
                    .bind(environment.map(|e| e.to_string()))
            })
            .await?;
        Ok(ApiKey {
            id,
            name: name.to_owned(),
            created_at: Timestamp(now),
            revoked_at: None,
            environment_id: environment.cloned(),
        })
    }

    /// Revokes an API key (`environment` None) or one of an environment's keys: a key of
    /// the other kind is not found.
    async fn revoke_key(&self, id: &ApiKeyId, environment: Option<&EnvironmentId>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let done = query_as::<(String,)>(
            "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL \
             AND COALESCE(environment_id, '') = COALESCE($3, '') RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .bind(environment.map(|e| e.to_string()))
        .fetch_optional(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(done.is_some())
    }
}
