//! `/v1/files`: the Files API (`client.beta.files`). Uploads stream into the store a chunk at
//! a time ([`gateway_services::files`]); downloads stream back out the same way, so neither
//! holds a whole file in memory (docs/adr/0017).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::extract::multipart::{Field, Multipart, MultipartRejection};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use gateway_core::FileId;
use gateway_runtime::RuntimeError;
use gateway_services::auth::Principal;
use gateway_services::files::{FileUpload, UploadError};
use gateway_store::{Order, StoredFile};
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{PathId, QueryParams, multipart_error};
use crate::pagination;
use crate::wire::time;

/// Longest kept filename, in bytes.
const MAX_FILENAME: usize = 255;
/// Longest MIME type taken from a part.
const MAX_MIME: usize = 255;
/// Most `ids` a list may name.
const MAX_IDS: usize = 100;

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::TooLarge { .. } => ApiError::content_too_large(e.to_string()),
            UploadError::Store(s) => RuntimeError::from(s).into(),
        }
    }
}

pub fn file_out(f: &StoredFile) -> Value {
    json!({
        "id": f.meta.id,
        "type": "file",
        "filename": f.meta.filename,
        "mime_type": f.meta.mime_type,
        "size_bytes": f.meta.size_bytes,
        "created_at": time(f.created_at),
        "downloadable": true,
        "expires_at": null,
    })
}

/// The part's filename as the API keeps it: its last path component, `unnamed` when absent.
fn filename_of(field: &Field<'_>) -> Result<String, ApiError> {
    let raw = field.file_name().unwrap_or_default();
    let last = raw.rsplit(['/', '\\']).next().unwrap_or_default().trim();
    if last.len() > MAX_FILENAME || last.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "the filename must be at most {MAX_FILENAME} bytes without control characters"
        )));
    }
    Ok(if last.is_empty() || last == "." || last == ".." { "unnamed".into() } else { last.into() })
}

fn mime_of(field: &Field<'_>) -> Result<String, ApiError> {
    match field.content_type() {
        None | Some("") => Ok("application/octet-stream".into()),
        Some(m) if m.len() <= MAX_MIME && m.is_ascii() && !m.chars().any(|c| c.is_ascii_control()) => Ok(m.into()),
        Some(_) => Err(ApiError::invalid("the file part's content type is not a valid MIME type")),
    }
}

/// `POST /v1/files`: one `file` part. Its bytes are bounded by `[files] max_bytes` (413
/// beyond); `expires_in_seconds` is refused (files here never expire, and a file that
/// outlived what its owner asked for would be a silent downgrade). Each chunk is stored only
/// within the key's quota of uploads in progress (429 beyond, `files.max_pending_bytes_per_key`)
/// and the quota of everything stored (413 beyond, `files.max_stored_bytes`). The file is made
/// visible only once the whole form has been read and accepted: a refused form's chunks are
/// discarded at once, and those of an upload the client abandoned are swept.
pub async fn upload(
    State(api): State<Arc<ManagedAgents>>,
    principal: Option<Extension<Principal>>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Reply {
    let mut multipart =
        multipart.map_err(|e| ApiError::invalid(format!("a file upload is multipart/form-data: {}", e.body_text())))?;
    let mut upload = api.coordinator.upload().owned_by(crate::auth::owner(principal.as_deref()));
    let mut received = None;
    match read_form(&mut multipart, &mut upload, &mut received).await {
        Ok(()) => {}
        Err(e) => {
            upload.abandon().await;
            return Err(e);
        }
    }
    let Some((filename, mime_type)) = received else {
        upload.abandon().await;
        return Err(ApiError::invalid("the upload has no `file` part"));
    };
    Ok(Json(file_out(&upload.finish(filename, mime_type).await?)))
}

/// Reads the form: the `file` part's bytes into `upload`, its name and type into `received`.
async fn read_form(
    multipart: &mut Multipart,
    upload: &mut FileUpload,
    received: &mut Option<(String, String)>,
) -> Result<(), ApiError> {
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("file") if received.is_none() => {
                let (filename, mime_type) = (filename_of(&field)?, mime_of(&field)?);
                while let Some(bytes) = field.chunk().await.map_err(multipart_error)? {
                    upload.push(&bytes).await?;
                }
                *received = Some((filename, mime_type));
            }
            Some("file") => return Err(ApiError::invalid("a file upload holds one `file` part")),
            Some("expires_in_seconds") => return Err(ApiError::not_supported("expires_in_seconds")),
            other => {
                let name: String = other.unwrap_or_default().chars().take(64).collect();
                return Err(ApiError::invalid(format!("unexpected form field {name:?}")));
            }
        }
    }
    Ok(())
}

/// `GET /v1/files`: newest first; `ids` names up to 100 files (one page, unknown ids left out).
/// No file here belongs to a scope, so a `scope_id` filter matches none.
pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    let ids = q.all("ids");
    if !ids.is_empty() {
        if q.get("page").is_some() || q.get("limit").is_some() {
            return Err(ApiError::invalid("ids cannot be combined with page or limit"));
        }
        let mut wanted: Vec<&str> = ids;
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() > MAX_IDS {
            return Err(ApiError::invalid(format!("ids names at most {MAX_IDS} files")));
        }
        let mut data = Vec::new();
        for raw in wanted {
            let Ok(fid) = raw.parse::<FileId>() else { continue };
            match api.coordinator.files().get_file(&fid).await {
                Ok(f) => data.push(f),
                Err(gateway_runtime::error::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(RuntimeError::from(e).into()),
            }
        }
        data.sort_by(|a, b| (b.created_at, b.meta.id.as_str()).cmp(&(a.created_at, a.meta.id.as_str())));
        return Ok(Json(json!({"data": data.iter().map(file_out).collect::<Vec<_>>(), "next_page": null})));
    }
    let page = pagination::request(&q, Order::Desc, 20, 1000)?;
    if q.get("scope_id").is_some() {
        return Ok(Json(pagination::empty()));
    }
    let result = api.coordinator.files().list_files(&page).await.map_err(RuntimeError::from)?;
    Ok(Json(pagination::list(&result, page.order, file_out)))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<FileId>) -> Reply {
    let file = api.coordinator.files().get_file(&id).await.map_err(RuntimeError::from)?;
    Ok(Json(file_out(&file)))
}

/// `GET /v1/files/{id}/content`: the bytes as uploaded, streamed chunk by chunk.
pub async fn download(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<FileId>) -> Result<Response, ApiError> {
    let file = api.coordinator.files().get_file(&id).await.map_err(RuntimeError::from)?;
    let (coordinator, fid, chunks) = (api.coordinator.clone(), file.meta.id.clone(), file.meta.chunks);
    let stream = futures::stream::unfold(0u32, move |seq| {
        let (coordinator, fid) = (coordinator.clone(), fid.clone());
        async move {
            if seq >= chunks {
                return None;
            }
            // A file deleted mid-download ends the body early: the client sees a short read
            // against the announced length, never other bytes.
            let chunk = coordinator.files().file_chunk(&fid, seq).await.map_err(std::io::Error::other);
            Some((chunk, seq + 1))
        }
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    let mime = HeaderValue::from_str(&file.meta.mime_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, mime);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(file.meta.size_bytes));
    // The content type is the uploader's word, and the bytes are the uploader's: a browser
    // must neither guess another type from them (`nosniff`) nor render them as a page of this
    // origin (`attachment`, whatever the type), or an uploaded `text/html` or SVG would run
    // script with the gateway's origin.
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    let ascii: String =
        file.meta.filename.chars().map(|c| if c.is_ascii_graphic() && c != '"' { c } else { '_' }).collect();
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{ascii}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    headers.insert(header::CONTENT_DISPOSITION, disposition);
    Ok(response)
}

/// `DELETE /v1/files/{id}`: refused with 409 `file_in_use` while a session mounts the file.
pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(fid): PathId<FileId>) -> Reply {
    api.coordinator.files().delete_file(&fid).await.map_err(RuntimeError::from)?;
    Ok(Json(json!({"id": fid, "type": "file_deleted"})))
}
