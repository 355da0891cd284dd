//! `/v1/agents`.

use axum::Json;
use axum::extract::{Path, State};
use gateway_core::AgentId;
use gateway_store::{AgentFilter, Order};
use serde_json::Value;

use super::path_id;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, QueryParams};
use crate::pagination;
use crate::wire::agent::{AgentCreate, AgentUpdate, agent_out};

fn id(raw: &str) -> Result<AgentId, ApiError> {
    path_id("agent", "agent_not_found", raw)
}

pub async fn create(
    State(api): State<ManagedAgents>,
    ApiJson(body): ApiJson<AgentCreate>,
) -> Result<Json<Value>, ApiError> {
    let agent = api.coordinator.create_agent(body.into_spec()?).await?;
    Ok(Json(agent_out(&agent)))
}

pub async fn retrieve(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let version = match q.get("version") {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<u32>()
                .map_err(|_| ApiError::invalid(format!("version must be a positive integer, not {v:?}")))?,
        ),
    };
    let agent = api.coordinator.get_agent(&id(&raw)?, version).await?;
    Ok(Json(agent_out(&agent)))
}

/// Omitted fields are kept, arrays replaced, metadata merged; a stale `version` is a 409 and
/// an update that changes nothing returns the current version without a bump.
pub async fn update(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    ApiJson(body): ApiJson<AgentUpdate>,
) -> Result<Json<Value>, ApiError> {
    let id = id(&raw)?;
    let current = api.coordinator.get_agent(&id, None).await?;
    if current.archived_at.is_some() {
        return Err(ApiError::invalid(format!("agent {id} is archived")).code("agent_archived"));
    }
    if let Some(v) = body.version
        && v != current.version
    {
        return Err(ApiError::conflict(
            format!("agent {id} is at version {}, not {v}", current.version),
            "version_conflict",
        ));
    }
    let spec = body.apply(&current.spec)?;
    if spec == current.spec {
        return Ok(Json(agent_out(&current)));
    }
    let agent = api.coordinator.update_agent(&id, current.version, spec).await?;
    Ok(Json(agent_out(&agent)))
}

pub async fn archive(State(api): State<ManagedAgents>, Path(raw): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(agent_out(&api.coordinator.archive_agent(&id(&raw)?).await?)))
}

pub async fn list(State(api): State<ManagedAgents>, q: QueryParams) -> Result<Json<Value>, ApiError> {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let filter = AgentFilter { include_archived: q.bool("include_archived")?, created: q.created()? };
    let result = api.coordinator.list_agents(&filter, &page).await?;
    Ok(Json(pagination::list(&result, page.order, agent_out)))
}

pub async fn versions(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result = api.coordinator.list_agent_versions(&id(&raw)?, &page).await?;
    Ok(Json(pagination::list(&result, page.order, agent_out)))
}
