//! Uploaded files: metadata and content in the database (docs/adr/0017).
//!
//! The content is kept as chunks of at most [`CHUNK_BYTES`], each written in a transaction of
//! its own before the file's metadata row makes it visible, so an upload holds neither a
//! writer nor memory for its whole size, and every gateway process sharing the database can
//! read what any of them stored. Chunks whose file was never created (an upload cut short, a
//! crash) are removed by [`Files::sweep_file_chunks`].
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

/// A file as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub id: FileId,
    pub filename: String,
    pub mime_type: String,
    pub size_bytes: u64,
    /// Hex SHA-256 of the content, checked by every reader that materializes it.
    pub sha256: String,
    pub chunks: u32,
    pub created_at: Timestamp,
}

/// A file whose chunks are stored, to be made visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    pub id: FileId,
    pub filename: String,
    pub mime_type: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub chunks: u32,
}

#[async_trait]
pub trait Files: Send + Sync {
    /// Stores chunk `seq` (from 0) of a file not yet created; committed on return.
    async fn put_file_chunk(&self, id: &FileId, seq: u32, bytes: Vec<u8>) -> Result<()>;
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
    /// Removes chunks older than `older_than_secs` (database clock) that belong to no file.
    /// Returns how many.
    async fn sweep_file_chunks(&self, older_than_secs: u64) -> Result<u64>;
}
