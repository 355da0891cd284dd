//! `/v1/agents`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use gateway_core::AgentId;
use gateway_store::{AgentFilter, Order};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathId, QueryParams};
use crate::pagination;
use crate::wire::agent::{AgentCreate, AgentUpdate, agent_out};

pub async fn create(State(api): State<Arc<ManagedAgents>>, ApiJson(body): ApiJson<AgentCreate>) -> Reply {
    let agent = api.coordinator.create_agent(body.into_spec()?).await?;
    Ok(Json(agent_out(&agent, &api.models)))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<AgentId>, q: QueryParams) -> Reply {
    let version = match q.get("version") {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<u32>()
                .map_err(|_| ApiError::invalid(format!("version must be a positive integer, not {v:?}")))?,
        ),
    };
    let agent = api.coordinator.get_agent(&id, version).await?;
    Ok(Json(agent_out(&agent, &api.models)))
}

/// Omitted fields are kept, arrays replaced, metadata merged; a stale `version` is a 409 and
/// an update that changes nothing returns the current version without a bump.
pub async fn update(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<AgentId>,
    ApiJson(body): ApiJson<AgentUpdate>,
) -> Reply {
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
        return Ok(Json(agent_out(&current, &api.models)));
    }
    let agent = api.coordinator.update_agent(&id, current.version, spec).await?;
    Ok(Json(agent_out(&agent, &api.models)))
}

pub async fn archive(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<AgentId>) -> Reply {
    Ok(Json(agent_out(&api.coordinator.archive_agent(&id).await?, &api.models)))
}

pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let filter = AgentFilter { include_archived: q.bool("include_archived")?, created: q.created()? };
    let result = api.coordinator.list_agents(&filter, &page).await?;
    Ok(Json(pagination::list(&result, page.order, |a| agent_out(a, &api.models))))
}

pub async fn versions(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<AgentId>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result = api.coordinator.list_agent_versions(&id, &page).await?;
    Ok(Json(pagination::list(&result, page.order, |a| agent_out(a, &api.models))))
}
