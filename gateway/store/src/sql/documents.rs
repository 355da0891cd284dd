//! Adapter-owned JSON documents with compare-and-set versions.

use async_trait::async_trait;
use gateway_core::Timestamp;
use serde_json::Value;

use super::engine_impl;
use crate::error::{Guard, Result, StoreError};
use crate::rows::DocumentRow;
use crate::{Document, Documents};

engine_impl! {
    #[async_trait]
    impl Documents for SqlStore {
        async fn get_document(&self, namespace: &str, key: &str) -> Result<Option<Document>> {
            let row = sqlx::query_as::<DB, DocumentRow>(
                "SELECT namespace, key, body, version, created_at, updated_at FROM documents WHERE namespace = $1 AND key = $2",
            )
            .bind(namespace)
            .bind(key)
            .fetch_optional(&self.read)
            .await?;
            row.map(DocumentRow::into_document).transpose()
        }

        async fn put_document(&self, namespace: &str, key: &str, body: &Value, expected: Option<u64>) -> Result<Document> {
            let text = serde_json::to_string(body)?;
            let conflict = || StoreError::Guard(Guard::DocumentConflict { namespace: namespace.into(), key: key.into(), expected });
            let mut tx = self.begin_write().await?;
            let now = Self::now(&mut tx).await?;
            let (version, created_at) = match expected {
                None => {
                    let inserted = sqlx::query_as::<DB, (String,)>(
                        "INSERT INTO documents (namespace, key, body, version, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4) \
                         ON CONFLICT (namespace, key) DO NOTHING RETURNING key",
                    )
                    .bind(namespace)
                    .bind(key)
                    .bind(&text)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if inserted.is_none() {
                        return Err(conflict());
                    }
                    (1, now)
                }
                Some(v) => {
                    let updated = sqlx::query_as::<DB, (i64,)>(
                        "UPDATE documents SET body = $3, version = version + 1, updated_at = $4 \
                         WHERE namespace = $1 AND key = $2 AND version = $5 RETURNING created_at",
                    )
                    .bind(namespace)
                    .bind(key)
                    .bind(&text)
                    .bind(now)
                    .bind(i64::try_from(v).unwrap_or(i64::MAX))
                    .fetch_optional(&mut *tx)
                    .await?;
                    match updated {
                        Some((created,)) => (v + 1, created),
                        None => return Err(conflict()),
                    }
                }
            };
            tx.commit().await?;
            Ok(Document {
                namespace: namespace.into(),
                key: key.into(),
                body: body.clone(),
                version,
                created_at: Timestamp(created_at),
                updated_at: Timestamp(now),
            })
        }

        async fn list_documents(&self, namespace: &str, prefix: &str, after_key: Option<&str>, limit: u32) -> Result<Vec<Document>> {
            // Prefix match by range (no LIKE, so keys may contain % and _): key >= prefix and
            // key < prefix + U+10FFFF.
            let upper = format!("{prefix}\u{10FFFF}");
            let rows = sqlx::query_as::<DB, DocumentRow>(
                "SELECT namespace, key, body, version, created_at, updated_at FROM documents \
                 WHERE namespace = $1 AND key >= $2 AND key < $3 AND ($4 IS NULL OR key > $4) ORDER BY key LIMIT $5",
            )
            .bind(namespace)
            .bind(prefix)
            .bind(upper)
            .bind(after_key.map(str::to_owned))
            .bind(i64::from(limit.max(1)))
            .fetch_all(&self.read)
            .await?;
            rows.into_iter().map(DocumentRow::into_document).collect()
        }

        async fn delete_document(&self, namespace: &str, key: &str) -> Result<bool> {
            let mut tx = self.begin_write().await?;
            let deleted = sqlx::query_as::<DB, (String,)>("DELETE FROM documents WHERE namespace = $1 AND key = $2 RETURNING key")
                .bind(namespace)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(deleted.is_some())
        }
    }
}
