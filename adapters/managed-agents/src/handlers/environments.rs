//! `/v1/environments`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use gateway_core::EnvironmentId;
use gateway_core::agent::BackendRef;
use gateway_core::environment::EnvironmentConfig;
use gateway_core::placement::{LocalInputs, place};
use gateway_store::{EnvironmentFilter, Order};
use serde_json::json;

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathId, QueryParams};
use crate::pagination;
use crate::wire::environment::{EnvironmentCreate, EnvironmentUpdate, environment_out};

/// Refuses an environment this gateway could never honour (unknown provider, a network
/// policy its provider cannot enforce, packages to install) when it is written, rather than
/// at the first session. Uses the same placement rules sessions are placed with.
fn check_placeable(api: &ManagedAgents, config: &EnvironmentConfig) -> Result<(), ApiError> {
    if matches!(config, EnvironmentConfig::SelfHosted) {
        return Ok(());
    }
    place(&BackendRef::Native, config, &LocalInputs::default(), api.coordinator.offer())
        .map(|_| ())
        .map_err(|e| ApiError::invalid(e.to_string()).code(e.code()))
}

pub async fn create(State(api): State<Arc<ManagedAgents>>, ApiJson(body): ApiJson<EnvironmentCreate>) -> Reply {
    let spec = body.into_spec(&api.default_provider)?;
    check_placeable(&api, &spec.config)?;
    Ok(Json(environment_out(&api.coordinator.create_environment(spec).await?)))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<EnvironmentId>) -> Reply {
    Ok(Json(environment_out(&api.coordinator.get_environment(&id).await?)))
}

pub async fn update(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<EnvironmentId>,
    ApiJson(body): ApiJson<EnvironmentUpdate>,
) -> Reply {
    let current = api.coordinator.get_environment(&id).await?;
    let spec = body.apply(&current.spec, &api.default_provider)?;
    if spec == current.spec {
        return Ok(Json(environment_out(&current)));
    }
    check_placeable(&api, &spec.config)?;
    Ok(Json(environment_out(&api.coordinator.update_environment(&id, spec).await?)))
}

pub async fn archive(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<EnvironmentId>) -> Reply {
    Ok(Json(environment_out(&api.coordinator.archive_environment(&id).await?)))
}

pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<EnvironmentId>) -> Reply {
    api.coordinator.delete_environment(&id).await?;
    Ok(Json(json!({"id": id, "type": "environment_deleted"})))
}

pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let filter = EnvironmentFilter { include_archived: q.bool("include_archived")? };
    let result = api.coordinator.list_environments(&filter, &page).await?;
    Ok(Json(pagination::list(&result, page.order, environment_out)))
}
