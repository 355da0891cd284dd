//! Uploaded files: their bytes streamed into the store, bounded and digested on the way
//! (docs/adr/0017). The store keeps them as chunks ([`gateway_store::CHUNK_BYTES`]); an upload
//! holds at most one chunk in memory, and the file becomes visible only once every chunk is
//! committed.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::FileId;
use gateway_store::{CHUNK_BYTES, Files, NewFile, StoreError, StoredFile, UploadQuota};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// `[files]`: what uploads may be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesConfig {
    /// The largest file accepted, in bytes (the Managed Agents API's own limit is 500 MB).
    pub max_bytes: u64,
    /// Bytes one key's uploads in progress may hold (chunks stored, file not yet created),
    /// uploads cut short included until they are swept: four whole uploads of the largest
    /// size at once by default.
    pub max_pending_bytes_per_key: u64,
    /// Bytes all files and uploads in progress may hold together (the Managed Agents API's
    /// own storage limit is 100 GB per organization).
    pub max_stored_bytes: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            max_bytes: 500 * 1000 * 1000,
            max_pending_bytes_per_key: 2000 * 1000 * 1000,
            max_stored_bytes: 100 * 1000 * 1000 * 1000,
        }
    }
}

/// Whose uploads are counted together when the caller has no key (keyless local clients).
pub const ANONYMOUS: &str = "local";

/// The most one upload holds in memory while it is read: its pending chunk, and as much again
/// for the form parsing and the connection's buffers around it. What an upload is charged
/// against the process's body budget (`load::body`), however large the file.
pub const UPLOAD_HELD_BYTES: usize = 2 * CHUNK_BYTES;

/// Why an upload was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("the file is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One upload in progress. Dropped before [`FileUpload::finish`], its stored chunks belong to
/// no file and are swept later.
pub struct FileUpload {
    files: Arc<dyn Files>,
    id: FileId,
    limit: u64,
    quota: UploadQuota,
    pending: Vec<u8>,
    chunks: u32,
    size: u64,
    digest: Sha256,
}

impl FileUpload {
    pub fn new(files: Arc<dyn Files>, config: &FilesConfig) -> Self {
        Self {
            files,
            id: FileId::new(),
            limit: config.max_bytes,
            quota: UploadQuota {
                owner: ANONYMOUS.into(),
                max_pending_bytes: config.max_pending_bytes_per_key,
                max_stored_bytes: config.max_stored_bytes,
            },
            pending: Vec::new(),
            chunks: 0,
            size: 0,
            digest: Sha256::new(),
        }
    }

    /// Counts this upload against `owner`'s uploads in progress (an API key's id) rather than
    /// the keyless local clients' shared quota.
    pub fn owned_by(mut self, owner: impl Into<String>) -> Self {
        self.quota.owner = owner.into();
        self
    }

    /// Removes what was stored of an upload that will not be finished (refused, or its form
    /// was bad), so its room in the quotas is free at once. An upload dropped without this (the
    /// client went away) is swept later.
    pub async fn abandon(self) {
        if self.chunks > 0
            && let Err(e) = self.files.discard_upload(&self.id).await
        {
            warn!(file = %self.id, error = %e, "could not discard an abandoned upload; the sweep will");
        }
    }

    /// Takes the next bytes of the content; stores each full chunk as it fills.
    pub async fn push(&mut self, mut bytes: &[u8]) -> Result<(), UploadError> {
        self.size += bytes.len() as u64;
        if self.size > self.limit {
            return Err(UploadError::TooLarge { limit: self.limit });
        }
        self.digest.update(bytes);
        while !bytes.is_empty() {
            let room = CHUNK_BYTES - self.pending.len();
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            bytes = rest;
            if self.pending.len() == CHUNK_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), UploadError> {
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(CHUNK_BYTES));
        self.files.put_file_chunk(&self.id, self.chunks, chunk, &self.quota).await?;
        self.chunks += 1;
        Ok(())
    }

    /// Stores the rest and makes the file visible under `filename` and `mime_type`. Refused
    /// (its last chunk past a quota), it is abandoned: what it stored is removed at once.
    pub async fn finish(mut self, filename: String, mime_type: String) -> Result<StoredFile, UploadError> {
        if !self.pending.is_empty()
            && let Err(e) = self.flush().await
        {
            self.abandon().await;
            return Err(e);
        }
        let new = NewFile {
            id: self.id.clone(),
            filename,
            mime_type,
            size_bytes: self.size,
            sha256: hex::encode(std::mem::take(&mut self.digest).finalize()),
            chunks: self.chunks,
        };
        let file = self.files.create_file(new).await?;
        info!(file = %file.meta.id, bytes = file.meta.size_bytes, "file uploaded");
        Ok(file)
    }
}

/// How long an upload may go without a new chunk before it is swept (with its room in the
/// quotas): longer than any pause of a live upload.
pub const ORPHAN_CHUNK_GRACE: Duration = Duration::from_secs(3600);

/// Sweeps the chunks of abandoned uploads every few minutes until `stop`.
pub async fn sweep_abandoned_uploads(files: Arc<dyn Files>, stop: CancellationToken) {
    loop {
        match files.sweep_file_chunks(ORPHAN_CHUNK_GRACE.as_secs()).await {
            Ok(0) => {}
            Ok(n) => info!(chunks = n, "removed the chunks of abandoned uploads"),
            Err(e) => warn!(error = %e, "could not sweep abandoned uploads"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(300)) => {}
        }
    }
}
