//! Adapter-owned JSON documents with compare-and-set versions.
//!
//! One write path, [`SqlStore::write_document`], serves both `put_document` (its own
//! transaction) and admissions (the admission's transaction, see `sessions.rs`), so a document
//! written with an input obeys exactly the same compare-and-set rule as one written alone.

use async_trait::async_trait;
use gateway_core::SessionId;
use serde_json::Value;

use super::{Engine, SqlStore, query_as};
use super::{Hints, WriteTx};
use crate::error::{Guard, Result, StoreError};
use crate::model::{AdmissionWrites, DocumentWrite};
use crate::rows::DocumentRow;
use crate::{Document, Documents, ReadDocuments};

/// Columns of a document row, in `DocumentRow` order.
macro_rules! document_cols {
    () => {
        "namespace, key, body, version, created_at, updated_at"
    };
}

/// The exclusive upper bound of keys starting with `prefix`: prefix matches are key ranges
/// (no LIKE, so keys may contain `%` and `_`).
fn prefix_end(prefix: &str) -> String {
    format!("{prefix}\u{10FFFF}")
}

impl<E: Engine> SqlStore<E> {
    /// Creates (`expected` None) or compare-and-set updates one document at `now`, inside
    /// `tx`. A conflict is `Guard::DocumentConflict` and writes nothing; the caller's
    /// transaction then rolls back as a whole.
    pub(crate) async fn write_document(tx: &mut WriteTx<E>, w: &DocumentWrite, now: i64) -> Result<Document> {
        let text = serde_json::to_string(&w.body)?;
        let row = match w.expected {
            None => {
                query_as::<DocumentRow>(concat!(
                    "INSERT INTO documents (namespace, key, body, version, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4) \
                     ON CONFLICT (namespace, key) DO NOTHING RETURNING ",
                    document_cols!()
                ))
                .bind(w.namespace.as_str())
                .bind(w.key.as_str())
                .bind(&text)
                .bind(now)
                .fetch_optional(&mut **tx)
                .await?
            }
            Some(v) => {
                query_as::<DocumentRow>(concat!(
                    "UPDATE documents SET body = $3, version = version + 1, updated_at = $4 \
                     WHERE namespace = $1 AND key = $2 AND version = $5 RETURNING ",
                    document_cols!()
                ))
                .bind(w.namespace.as_str())
                .bind(w.key.as_str())
                .bind(&text)
                .bind(now)
                .bind(super::bigint(v))
                .fetch_optional(&mut **tx)
                .await?
            }
        };
        match row {
            Some(row) => row.into_document(),
            None => Err(StoreError::Guard(Guard::DocumentConflict {
                namespace: w.namespace.clone(),
                key: w.key.clone(),
                expected: w.expected,
            })),
        }
    }

    /// Creates `docs` at `now` inside `tx`, as many in one statement as it takes: an A2A
    /// send creates two or three, and each statement is a round trip on PostgreSQL. One that
    /// exists (or is given twice) is `Guard::DocumentConflict`, as [`Self::write_document`]
    /// answers it.
    async fn create_documents(tx: &mut WriteTx<E>, docs: &[&DocumentWrite], now: i64) -> Result<()> {
        for chunk in docs.chunks(super::INSERT_CHUNK) {
            let mut q = query_as::<(String, String)>(super::create_documents_sql(chunk.len()));
            for w in chunk {
                q = q.bind(w.namespace.as_str()).bind(w.key.as_str()).bind(serde_json::to_string(&w.body)?);
                q = q.bind(1_i64).bind(now).bind(now);
            }
            let created = q.fetch_all(&mut **tx).await?;
            if created.len() < chunk.len() {
                let same = |a: &DocumentWrite, b: &DocumentWrite| a.namespace == b.namespace && a.key == b.key;
                let existed = |w: &DocumentWrite| !created.iter().any(|(n, k)| *n == w.namespace && *k == w.key);
                let w = (0..chunk.len())
                    .find(|&i| existed(chunk[i]) || chunk[..i].iter().any(|o| same(o, chunk[i])))
                    .map_or(chunk[0], |i| chunk[i]);
                return Err(StoreError::Guard(Guard::DocumentConflict {
                    namespace: w.namespace.clone(),
                    key: w.key.clone(),
                    expected: None,
                }));
            }
        }
        Ok(())
    }

    /// Writes an admission's documents, feed subscriptions and bindings inside its transaction, after its
    /// inputs (`sessions.rs`). Any failure aborts the admission.
    pub(crate) async fn apply_admission_writes(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        writes: &AdmissionWrites,
        now: i64,
        hints: &mut Hints,
    ) -> Result<()> {
        // Documents created in a row go in one statement; an update (compare-and-set) alone.
        let mut creates: Vec<&DocumentWrite> = Vec::new();
        for w in &writes.documents {
            if w.expected.is_none() {
                creates.push(w);
                continue;
            }
            Self::create_documents(tx, &std::mem::take(&mut creates), now).await?;
            Self::write_document(tx, w, now).await?;
        }
        Self::create_documents(tx, &creates, now).await?;
        Self::subscribe(tx, session, &writes.subscriptions, now, hints).await?;
        Self::write_bindings(tx, session, &writes.bindings, now).await
    }
}

#[async_trait]
impl<E: Engine> ReadDocuments for SqlStore<E> {
    async fn get_document(&self, namespace: &str, key: &str) -> Result<Option<Document>> {
        let row = query_as::<DocumentRow>(concat!(
            "SELECT ",
            document_cols!(),
            " FROM documents WHERE namespace = $1 AND key = $2"
        ))
        .bind(namespace)
        .bind(key)
        .fetch_optional(&mut *self.reader().await?)
        .await?;
        row.map(DocumentRow::into_document).transpose()
    }

    async fn list_documents(
        &self,
        namespace: &str,
        prefix: &str,
        after_key: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Document>> {
        let rows = query_as::<DocumentRow>(concat!(
            "SELECT ",
            document_cols!(),
            " FROM documents WHERE namespace = $1 AND key >= $2 AND key < $3 AND ($4 IS NULL OR key > $4) ORDER BY key",
            crate::sql::limit!(5)
        ))
        .bind(namespace)
        .bind(prefix)
        .bind(prefix_end(prefix))
        .bind(after_key.map(str::to_owned))
        .bind(i64::from(limit.max(1)))
        .fetch_all(&mut *self.reader().await?)
        .await?;
        rows.into_iter().map(DocumentRow::into_document).collect()
    }
}

#[async_trait]
impl<E: Engine> Documents for SqlStore<E> {
    async fn put_document(&self, namespace: &str, key: &str, body: &Value, expected: Option<u64>) -> Result<Document> {
        let write = DocumentWrite { namespace: namespace.into(), key: key.into(), body: body.clone(), expected };
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let document = Self::write_document(&mut tx, &write, now).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(document)
    }

    async fn delete_document(&self, namespace: &str, key: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let deleted = query_as::<(String,)>("DELETE FROM documents WHERE namespace = $1 AND key = $2 RETURNING key")
            .bind(namespace)
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(deleted.is_some())
    }
}
