//! Uploaded files: metadata and content in the database (docs/adr/0017).
//!
//! The content is kept as chunks of at most [`CHUNK_BYTES`], each written in a transaction of
//! its own before the file's metadata row makes it visible, so an upload holds neither a
//! writer nor memory for its whole size, and every gateway process sharing the database can
//! read what any of them stored. Chunks whose file was never created (an upload cut short, a
//! crash) are removed by [`Files::sweep_file_chunks`]; until then they count against the
//! uploader's [`UploadQuota`].
//!
//! A file mounted by a live session cannot be deleted: the sessions' file resources are
//! mirrored in a table the delete checks in its own statement, after it has locked the file's
//! row against mounts being recorded (which hold it shared), so a mount and a delete never
//! both commit (`sql/files.rs`, `record_file_mounts`).

use async_trait::async_trait;
use gateway_core::{FileId, Timestamp};

use crate::error::Result;
use crate::{Page, PageRequest};

/// The most bytes one stored chunk holds.
pub const CHUNK_BYTES: usize = 1 << 20;

/// A file as the store keeps it: what it was created with, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub meta: NewFile,
    pub created_at: Timestamp,
}

/// What an upload's chunks may add up to, checked in the transaction that stores each chunk,
/// before it is stored. Exact on SQLite (one writer); on PostgreSQL chunks stored at the same
/// moment may each see the room before the others: at most one chunk more per write in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadQuota {
    /// Who uploads: the API key's id (keyless local clients share one name).
    pub owner: String,
    /// Bytes `owner`'s uploads in progress (chunks stored, file not yet created, not yet
    /// swept) may hold: uploads cut short count until the sweep removes them.
    pub max_pending_bytes: u64,
    /// Bytes all created files and all uploads in progress may hold together.
    pub max_stored_bytes: u64,
}

/// A file whose chunks are stored, to be made visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    pub id: FileId,
    pub filename: String,
    pub mime_type: String,
    pub size_bytes: u64,
    /// Hex SHA-256 of the content, checked by every reader that materializes it.
    pub sha256: String,
    pub chunks: u32,
}

#[async_trait]
pub trait Files: Send + Sync {
    /// Stores chunk `seq` (from 0) of a file not yet created; committed on return. Refused,
    /// storing nothing, when it would take `quota.owner`'s uploads in progress past
    /// `max_pending_bytes` (`Guard::UploadQuota`) or all files and uploads past
    /// `max_stored_bytes` (`Guard::StorageQuota`).
    async fn put_file_chunk(&self, id: &FileId, seq: u32, bytes: Vec<u8>, quota: &UploadQuota) -> Result<()>;
    /// Removes what an upload that will not be finished stored (its file was never created):
    /// its room in the quotas is free at once, without waiting for the sweep.
    async fn discard_upload(&self, id: &FileId) -> Result<()>;
    /// Makes the file visible, once its `chunks` chunks holding `size_bytes` bytes are all
    /// stored (`Corrupt` otherwise, and nothing changes).
    async fn create_file(&self, new: NewFile) -> Result<StoredFile>;
    async fn get_file(&self, id: &FileId) -> Result<StoredFile>;
    /// Newest first unless `page.order` says otherwise.
    async fn list_files(&self, page: &PageRequest) -> Result<Page<StoredFile>>;
    /// Chunk `seq` of a created file.
    async fn file_chunk(&self, id: &FileId, seq: u32) -> Result<Vec<u8>>;
    /// Deletes the file and its content. Refused (`Guard::FileInUse`) while a session that
    /// is not deleted mounts it.
    async fn delete_file(&self, id: &FileId) -> Result<()>;
    /// Removes the uploads whose last chunk is older than `older_than_secs` (database clock)
    /// and whose file was never created, and chunks of no file and no upload that old.
    /// Returns how many chunks.
    async fn sweep_file_chunks(&self, older_than_secs: u64) -> Result<u64>;
}
