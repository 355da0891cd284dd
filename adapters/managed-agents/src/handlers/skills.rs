//! `/v1/skills`: custom skills (`client.beta.skills`) and their versions. A skill is created
//! from uploaded files (multipart `files` parts whose filenames are paths under one directory
//! holding a `SKILL.md`); agents name skills with `{type: "custom", skill_id, version?}`
//! (docs/adr/0017). Prebuilt (`anthropic`) skills do not exist here: listing them gives none.

use std::sync::Arc;

use axum::Json;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, State};
use gateway_core::{SkillId, SkillVersionId};
use gateway_runtime::RuntimeError;
use gateway_services::skills::MAX_SKILL_BYTES;
use gateway_store::{Order, StoredSkill, StoredSkillVersion};
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{PathId, PathIds, QueryParams, multipart_error, path_id};
use crate::pagination;
use crate::wire::time;

const MAX_DISPLAY_NAME: usize = 255;

fn skill_out(s: &StoredSkill) -> Value {
    json!({
        "id": s.id,
        "type": "skill",
        "display_name": s.display_name,
        "latest_version_id": s.latest_version_id,
        "source": {"type": "custom"},
        "created_at": time(s.created_at),
        "updated_at": time(s.updated_at),
    })
}

fn version_out(v: &StoredSkillVersion) -> Value {
    json!({
        "id": v.id,
        "type": "skill_version",
        "skill_id": v.skill_id,
        "name": v.name,
        "description": v.description,
        "created_at": time(v.created_at),
    })
}

/// The uploaded form: its `files` parts (path, bytes) and `display_name`. Bounded as a whole
/// by the skill size limit, whatever the parts.
async fn form(
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<(Vec<(String, Vec<u8>)>, Option<String>), ApiError> {
    let mut multipart = multipart
        .map_err(|e| ApiError::invalid(format!("a skill upload is multipart/form-data: {}", e.body_text())))?;
    let (mut files, mut display_name, mut total) = (Vec::new(), None, 0usize);
    let too_large =
        || ApiError::content_too_large(format!("a skill's files hold at most {MAX_SKILL_BYTES} bytes in all"));
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().map(str::to_owned);
        let mut bytes = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            total += chunk.len();
            if total > MAX_SKILL_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        match name.as_str() {
            "files" | "files[]" => {
                let path =
                    filename.ok_or_else(|| ApiError::invalid("every `files` part needs a filename (its path)"))?;
                files.push((path, bytes));
            }
            "display_name" => {
                let text = String::from_utf8(bytes).map_err(|_| ApiError::invalid("display_name is not UTF-8"))?;
                if text.len() > MAX_DISPLAY_NAME || text.contains(['\n', '\r']) {
                    return Err(ApiError::invalid(format!(
                        "display_name is one line of at most {MAX_DISPLAY_NAME} bytes"
                    )));
                }
                display_name = Some(text).filter(|t| !t.is_empty());
            }
            other => {
                let other: String = other.chars().take(64).collect();
                return Err(ApiError::invalid(format!("unexpected form field {other:?}")));
            }
        }
    }
    Ok((files, display_name))
}

pub async fn create(State(api): State<Arc<ManagedAgents>>, multipart: Result<Multipart, MultipartRejection>) -> Reply {
    let (files, display_name) = form(multipart).await?;
    let (skill, _) = api.coordinator.create_skill(display_name, files).await?;
    Ok(Json(skill_out(&skill)))
}

/// `source=custom` or none: every skill here; `source=anthropic`: none (no prebuilt skills).
pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Asc, 20, 1000)?;
    match q.get("source") {
        None | Some("") | Some("custom") => {}
        Some(_) => {
            return Ok(Json(pagination::empty()));
        }
    }
    let result = api.coordinator.skills().list_skills(&page).await.map_err(RuntimeError::from)?;
    Ok(Json(pagination::list(&result, page.order, skill_out)))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SkillId>) -> Reply {
    let skill = api.coordinator.skills().get_skill(&id).await.map_err(RuntimeError::from)?;
    Ok(Json(skill_out(&skill)))
}

/// Deletes the skill and its versions. Sessions that already use it keep the copy placed in
/// their workspace; one not yet placed fails its turn naming the skill.
pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(sid): PathId<SkillId>) -> Reply {
    api.coordinator.skills().delete_skill(&sid).await.map_err(RuntimeError::from)?;
    Ok(Json(json!({"id": sid, "type": "skill_deleted"})))
}

pub async fn create_version(
    State(api): State<Arc<ManagedAgents>>,
    PathId(sid): PathId<SkillId>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Reply {
    let (files, display_name) = form(multipart).await?;
    if display_name.is_some() {
        return Err(ApiError::invalid("display_name is set when the skill is created"));
    }
    let version = api.coordinator.add_skill_version(&sid, files).await?;
    Ok(Json(version_out(&version)))
}

/// Newest first.
pub async fn list_versions(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<SkillId>,
    q: QueryParams,
) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 1000)?;
    let result = api.coordinator.skills().list_skill_versions(&id, &page).await.map_err(RuntimeError::from)?;
    Ok(Json(pagination::list(&result, page.order, version_out)))
}

/// A version by id, or `latest`.
pub async fn retrieve_version(
    State(api): State<Arc<ManagedAgents>>,
    Path((raw, version)): Path<(String, String)>,
) -> Reply {
    let sid = path_id::<SkillId>(&raw)?;
    if version != "latest" {
        path_id::<SkillVersionId>(&version)?;
    }
    let v = api.coordinator.skills().get_skill_version(&sid, &version).await.map_err(RuntimeError::from)?;
    Ok(Json(version_out(&v)))
}

/// The skill's only version cannot be deleted (409 `last_skill_version`): delete the skill.
pub async fn delete_version(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(sid, vid): PathIds<SkillId, SkillVersionId>,
) -> Reply {
    api.coordinator.skills().delete_skill_version(&sid, &vid).await.map_err(RuntimeError::from)?;
    Ok(Json(json!({"id": vid, "type": "skill_version_deleted"})))
}
