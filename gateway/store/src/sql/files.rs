//! Uploaded files (`crate::files`).

use async_trait::async_trait;
use gateway_core::session::{Resource, ResourceKind};
use gateway_core::{FileId, SessionId, Timestamp};

use super::conn::from_row;
use super::read::{Decode, keyset_sql};
use super::{Engine, Hints, SqlStore, WriteTx, query, query_as};
use crate::error::{Guard, Result, StoreError};
use crate::model::{Page, PageRequest};
use crate::{Files, NewFile, StoredFile, UploadQuota};

struct FileRow {
    id: String,
    filename: String,
    mime_type: String,
    size_bytes: i64,
    sha256: String,
    chunks: i64,
    created_at: i64,
}
from_row!(FileRow { id, filename, mime_type, size_bytes, sha256, chunks, created_at });

impl Decode for FileRow {
    type Out = StoredFile;
    fn decode(self) -> Result<StoredFile> {
        let meta = NewFile {
            id: FileId::parse(&self.id).map_err(StoreError::corrupt)?,
            filename: self.filename,
            mime_type: self.mime_type,
            size_bytes: u64::try_from(self.size_bytes).map_err(StoreError::corrupt)?,
            sha256: self.sha256,
            chunks: u32::try_from(self.chunks).map_err(StoreError::corrupt)?,
        };
        Ok(StoredFile { meta, created_at: Timestamp(self.created_at) })
    }
}

const FILE_BY_ID: &str =
    "SELECT id, filename, mime_type, size_bytes, sha256, chunks, created_at FROM files WHERE id = $1";

/// `$1,$2` keyset bound, `$3` limit.
const LIST_FILES: [&str; 2] =
    keyset_sql!("SELECT id, filename, mime_type, size_bytes, sha256, chunks, created_at FROM files WHERE", "", 1, 2, 3);

impl<E: Engine> SqlStore<E> {
    /// Records which files the session's resources mount, replacing what was recorded (a new
    /// session has nothing to replace: `replace` false spares it a statement); every one must
    /// exist. In the transaction that writes the resources, so the record never differs from
    /// them.
    ///
    /// Why a delete can never slip between this check and the commit (invariant 35): each
    /// file row is read with [`Engine::SHARE_FILE`], which PostgreSQL holds until this
    /// transaction ends, and a delete first takes the same row with [`Engine::LOCK_FILE`]
    /// (exclusive) before it reads `file_mounts` in a statement of its own. If the mount took
    /// the row first, the delete waits for it to commit and then, under READ COMMITTED, its next
    /// statement sees the committed mount and refuses (`FileInUse`). If the delete took it
    /// first, the mount waits, finds the row gone and refuses (`NotFound`). A plain read here
    /// (as before) let both commit: the delete's `NOT EXISTS` could not see the uncommitted
    /// mount. On SQLite every writer is serialized by `BEGIN IMMEDIATE`, so the same reads
    /// need no lock. Shared locks do not conflict with each other, so sessions mounting one
    /// file never wait for each other.
    pub(crate) async fn record_file_mounts(
        tx: &mut WriteTx<E>,
        session: &SessionId,
        resources: &[Resource],
        replace: bool,
    ) -> Result<()> {
        if replace {
            query("DELETE FROM file_mounts WHERE session_id = $1").bind(session.as_str()).execute(&mut **tx).await?;
        }
        for r in resources {
            let ResourceKind::File { file_id, .. } = &r.kind else { continue };
            let exists = query_as::<(String,)>(E::SHARE_FILE).bind(file_id.as_str()).fetch_optional(&mut **tx).await?;
            if exists.is_none() {
                return Err(StoreError::not_found("file", file_id));
            }
            query("INSERT INTO file_mounts (file_id, session_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(file_id.as_str())
                .bind(session.as_str())
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<E: Engine> Files for SqlStore<E> {
    async fn put_file_chunk(&self, id: &FileId, seq: u32, bytes: Vec<u8>, quota: &UploadQuota) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let chunk = bytes.len() as u64;
        let (pending,) =
            query_as::<(i64,)>("SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM file_uploads WHERE owner = $1")
                .bind(quota.owner.as_str())
                .fetch_one(&mut *tx)
                .await?;
        let pending = u64::try_from(pending).map_err(StoreError::corrupt)?;
        if pending.saturating_add(chunk) > quota.max_pending_bytes {
            return Err(StoreError::Guard(Guard::UploadQuota {
                owner: quota.owner.clone(),
                pending,
                chunk,
                limit: quota.max_pending_bytes,
            }));
        }
        let (stored,) = query_as::<(i64,)>(
            "SELECT CAST((SELECT COALESCE(SUM(size_bytes), 0) FROM files) \
                       + (SELECT COALESCE(SUM(bytes), 0) FROM file_uploads) AS BIGINT)",
        )
        .fetch_one(&mut *tx)
        .await?;
        let stored = u64::try_from(stored).map_err(StoreError::corrupt)?;
        if stored.saturating_add(chunk) > quota.max_stored_bytes {
            return Err(StoreError::Guard(Guard::StorageQuota { stored, chunk, limit: quota.max_stored_bytes }));
        }
        query("INSERT INTO file_chunks (file_id, seq, bytes, created_at) VALUES ($1, $2, $3, $4)")
            .bind(id.as_str())
            .bind(i64::from(seq))
            .bind(bytes)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        query(
            "INSERT INTO file_uploads (file_id, owner, bytes, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (file_id) DO UPDATE SET bytes = file_uploads.bytes + excluded.bytes, updated_at = excluded.updated_at",
        )
        .bind(id.as_str())
        .bind(quota.owner.as_str())
        .bind(i64::try_from(chunk).map_err(StoreError::corrupt)?)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.finish(tx, Hints::default()).await
    }

    async fn discard_upload(&self, id: &FileId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        query("DELETE FROM file_chunks WHERE file_id = $1 AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = $1)")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        query("DELETE FROM file_uploads WHERE file_id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await
    }

    async fn create_file(&self, new: NewFile) -> Result<StoredFile> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let (chunks, bytes) = query_as::<(i64, i64)>(
            "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(bytes)), 0) AS BIGINT) FROM file_chunks WHERE file_id = $1",
        )
        .bind(new.id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        if chunks != i64::from(new.chunks) || u64::try_from(bytes).ok() != Some(new.size_bytes) {
            return Err(StoreError::corrupt(format!(
                "file {}: {chunks} chunks of {bytes} bytes stored, {} of {} announced",
                new.id, new.chunks, new.size_bytes
            )));
        }
        query(
            "INSERT INTO files (id, filename, mime_type, size_bytes, sha256, chunks, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(new.id.as_str())
        .bind(new.filename.as_str())
        .bind(new.mime_type.as_str())
        .bind(i64::try_from(new.size_bytes).map_err(StoreError::corrupt)?)
        .bind(new.sha256.as_str())
        .bind(i64::from(new.chunks))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        // Its bytes now count as a file's, no longer as an upload's.
        query("DELETE FROM file_uploads WHERE file_id = $1").bind(new.id.as_str()).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(StoredFile { meta: new, created_at: Timestamp(now) })
    }

    async fn get_file(&self, id: &FileId) -> Result<StoredFile> {
        self.by_id::<FileRow>(FILE_BY_ID, "file", id.as_str()).await
    }

    async fn list_files(&self, page: &PageRequest) -> Result<Page<StoredFile>> {
        self.list_page::<FileRow>(page, LIST_FILES, []).await
    }

    async fn file_chunk(&self, id: &FileId, seq: u32) -> Result<Vec<u8>> {
        // Only a created file's chunks: an upload in progress is not readable.
        query_as::<(Vec<u8>,)>(
            "SELECT c.bytes FROM file_chunks c JOIN files f ON f.id = c.file_id WHERE c.file_id = $1 AND c.seq = $2",
        )
        .bind(id.as_str())
        .bind(i64::from(seq))
        .fetch_optional(&mut *self.reader().await?)
        .await?
        .map(|(bytes,)| bytes)
        .ok_or_else(|| StoreError::not_found("file chunk", format!("{id}/{seq}")))
    }

    async fn delete_file(&self, id: &FileId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // The row first, exclusively, so no mount is being recorded while the mounts are read
        // (see `record_file_mounts`); then the check and the delete, in one statement that
        // sees every mount committed before the lock was granted.
        if query_as::<(String,)>(E::LOCK_FILE).bind(id.as_str()).fetch_optional(&mut *tx).await?.is_none() {
            return Err(StoreError::not_found("file", id));
        }
        let gone = query_as::<(String,)>(
            "DELETE FROM files WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM file_mounts m WHERE m.file_id = $1) RETURNING id",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if gone.is_none() {
            let user =
                query_as::<(String,)>("SELECT session_id FROM file_mounts WHERE file_id = $1 ORDER BY session_id")
                    .bind(id.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
            return Err(match user {
                Some((session,)) => StoreError::Guard(Guard::FileInUse { file: id.to_string(), session }),
                None => StoreError::not_found("file", id),
            });
        }
        query("DELETE FROM file_chunks WHERE file_id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await
    }

    async fn sweep_file_chunks(&self, older_than_secs: u64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let before = now.saturating_sub(i64::try_from(older_than_secs.saturating_mul(1000)).unwrap_or(i64::MAX));
        // Uploads whose last chunk is that old: every chunk of theirs, whatever its own age.
        let mut swept = query_as::<(String,)>(
            "DELETE FROM file_chunks WHERE file_id IN (SELECT u.file_id FROM file_uploads u WHERE u.updated_at < $1 \
               AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = u.file_id)) RETURNING file_id",
        )
        .bind(before)
        .fetch_all(&mut *tx)
        .await?;
        query("DELETE FROM file_uploads WHERE updated_at < $1").bind(before).execute(&mut *tx).await?;
        // Chunks of no file and no upload (stored before uploads were recorded).
        swept.extend(
            query_as::<(String,)>(
                "DELETE FROM file_chunks WHERE created_at < $1 \
                   AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = file_chunks.file_id) \
                   AND NOT EXISTS (SELECT 1 FROM file_uploads u WHERE u.file_id = file_chunks.file_id) RETURNING file_id",
            )
            .bind(before)
            .fetch_all(&mut *tx)
            .await?,
        );
        self.finish(tx, Hints::default()).await?;
        Ok(swept.len() as u64)
    }
}
