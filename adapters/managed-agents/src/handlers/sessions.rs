//! `/v1/sessions`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use gateway_core::agent::{AgentSpec, BackendRef};
use gateway_core::event::EventKind;
use gateway_core::session::{Resource, ResourceKind, Session, SessionStatus};
use gateway_core::{AgentId, EnvironmentId, ResourceId, SessionId, VaultId};
use gateway_runtime::{AgentSelection, CreateSession};
use gateway_store::{Keyset, Order, Page, PageCursor, SessionFilter, SessionPatch};
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathId, PathIds, QueryParams};
use crate::pagination;
use crate::wire::Patch;
use crate::wire::agent::SessionAgentUpdate;
use crate::wire::event::budget_in;
use crate::wire::merge_metadata;
use crate::wire::session::{ResourceUpdate, SessionCreate, SessionUpdate, resource_in, resource_out, session_out};

pub async fn create(State(api): State<Arc<ManagedAgents>>, ApiJson(mut body): ApiJson<SessionCreate>) -> Reply {
    let choice = body.validate()?;
    let resources = body.take_resources()?;
    let overrides = match body.take_overrides() {
        None => None,
        Some(o) => {
            let base = api.coordinator.get_agent(&choice.id, choice.version).await?;
            Some(o.into_overrides(&base.spec)?)
        }
    };
    let environment_id = EnvironmentId::parse(&body.environment_id).map_err(|_| {
        ApiError::not_found(format!("environment {:?} not found", body.environment_id)).code("environment_not_found")
    })?;
    let mut initial_inputs = Vec::new();
    for e in body.initial_events.take().unwrap_or_default() {
        let event = e.into_new_event()?;
        if event.payload.kind() != EventKind::UserMessage {
            return Err(ApiError::invalid("initial_events may only contain user.message events"));
        }
        initial_inputs.push(event);
    }
    let budget = body.budget.take().filter(|b| !b.is_null()).map(budget_in).transpose()?;
    if budget.is_some() {
        let mut agent = api.coordinator.get_agent(&choice.id, choice.version).await?.spec;
        if let Some(o) = &overrides {
            o.apply(&mut agent);
        }
        check_budgetable(&api, &agent)?;
    }
    let req = CreateSession {
        budget,
        agent: AgentSelection { id: choice.id, version: choice.version, overrides },
        environment_id,
        title: body.title,
        metadata: body.metadata.unwrap_or_default(),
        resources,
        initial_inputs,
        vault_ids: vault_ids(body.vault_ids.unwrap_or_default())?,
        client_tool_servers: Vec::new(),
    };
    let (session, _) = api.coordinator.create_session(req).await?;
    Ok(Json(session_out(&session, &api.public_url, &api.models)))
}

/// The session's vaults as named: an id that cannot be one is a vault that does not exist.
fn vault_ids(raw: Vec<String>) -> Result<Vec<VaultId>, ApiError> {
    raw.into_iter()
        .map(|id| {
            VaultId::parse(&id)
                .map_err(|_| ApiError::not_found(format!("vault {id:?} not found")).code("vault_not_found"))
        })
        .collect()
}

/// A budget needs list prices to count against: every model the session can run must have
/// one (here, the one its native agent's model id is served by; another backend's spend is
/// not the gateway's to measure).
fn check_budgetable(api: &ManagedAgents, agent: &AgentSpec) -> Result<(), ApiError> {
    if agent.backend == BackendRef::Native && api.models.serving(&agent.model.id).prices.is_some() {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "model {:?} has no list price, so no budget can measure its cost (configure prices in its [models] table, or omit the budget)",
        agent.model.id
    ))
    .code("model_not_budgetable"))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>) -> Reply {
    Ok(Json(session_out(&api.coordinator.get_session(&id).await?, &api.public_url, &api.models)))
}

pub async fn update(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<SessionId>,
    ApiJson(body): ApiJson<SessionUpdate>,
) -> Reply {
    let current = api.coordinator.get_session(&id).await?;
    let budget = match body.budget {
        Patch::Keep => None,
        Patch::Clear => Some(None),
        Patch::Set(v) => {
            let budget = budget_in(v)?;
            check_budgetable(&api, &current.snapshot.agent.spec)?;
            Some(Some(budget))
        }
    };
    let agent = match body.agent {
        None => None,
        Some(v) => {
            let update: SessionAgentUpdate =
                serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("agent: {e}")))?;
            Some(update.apply(&current.snapshot.agent.spec)?)
        }
    };
    let vaults = body.vault_ids.map(vault_ids).transpose()?;
    let title = match body.title {
        Patch::Keep => None,
        Patch::Clear => Some(None),
        Patch::Set(t) => {
            if t.chars().count() > 512 {
                return Err(ApiError::invalid("title exceeds 512 characters"));
            }
            Some(Some(t))
        }
    };
    let metadata = match body.metadata {
        Patch::Keep => None,
        Patch::Clear => Some(Default::default()),
        Patch::Set(m) => Some(merge_metadata(&current.metadata, m)?),
    };
    let snapshot = match (agent, vaults) {
        (None, None) => None,
        (agent, vaults) => Some(api.coordinator.redefine_session(&current, agent, vaults).await?),
    };
    let session = api.coordinator.update_session(&id, SessionPatch { title, metadata, snapshot, budget }).await?;
    Ok(Json(session_out(&session, &api.public_url, &api.models)))
}

pub async fn archive(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>) -> Reply {
    Ok(Json(session_out(&api.coordinator.archive_session(&id).await?, &api.public_url, &api.models)))
}

/// `POST /v1/sessions/{id}/environment/release` (extension): gives up an environment whose
/// host is gone, so the next turn starts a fresh one (docs/adr/0036).
pub async fn release_environment(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>) -> Reply {
    api.coordinator.release_lost_environment(&id).await?;
    Ok(Json(session_out(&api.coordinator.get_session(&id).await?, &api.public_url, &api.models)))
}

pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>) -> Reply {
    api.coordinator.delete_session(&id).await?;
    Ok(Json(json!({"id": id, "type": "session_deleted"})))
}

pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    for unsupported in ["deployment_id", "memory_store_id"] {
        if q.get(unsupported).is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::not_supported(format!("the {unsupported} filter")));
        }
    }
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let agent_id = match q.get("agent_id") {
        None | Some("") => None,
        Some(a) => match AgentId::parse(a) {
            Ok(id) => Some(id),
            // No agent has this id, so no session does either.
            Err(_) => return Ok(Json(json!({"data": [], "next_page": null, "prev_page": null}))),
        },
    };
    let agent_version = match q.get("agent_version") {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<u32>().map_err(|_| ApiError::invalid(format!("agent_version must be an integer, not {v:?}")))?,
        ),
    };
    let statuses = q
        .all("statuses")
        .into_iter()
        .map(|s| {
            SessionStatus::parse(s)
                .ok_or_else(|| ApiError::invalid(format!("statuses[] value {s:?} is not a session status")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let filter = SessionFilter {
        agent_id,
        agent_version,
        statuses,
        created: q.created()?,
        include_archived: q.bool("include_archived")?,
    };
    let result = api.coordinator.list_sessions(&filter, &page).await?;
    let data = result.items.iter().map(|s| session_out(s, &api.public_url, &api.models)).collect();
    Ok(Json(pagination::body(&result, page.order, data, true)))
}

/// The session's resources in the order they were added (`order=desc`: newest first), a page
/// at a time. A cursor names the last resource shown and its position: if it has been
/// removed since, the one that took its place comes next.
pub async fn resources(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Asc, 20, 100)?;
    let session = api.coordinator.get_session(&id).await?;
    let mut all: Vec<&Resource> =
        session.snapshot.resources.iter().filter(|r| !matches!(r.kind, ResourceKind::Workspace { .. })).collect();
    if page.order == Order::Desc {
        all.reverse();
    }
    let start = match &page.cursor {
        None => 0,
        Some(c) => match all.iter().position(|r| r.id.as_str() == c.key.id) {
            Some(i) => i + 1,
            None => usize::try_from(c.key.at).unwrap_or(0).min(all.len()),
        },
    };
    let limit = page.limit.max(1) as usize;
    let items: Vec<&Resource> = all.iter().skip(start).take(limit).copied().collect();
    let end = start + items.len();
    let next = (end < all.len())
        .then(|| {
            items
                .last()
                .map(|r| PageCursor { key: Keyset { at: (end - 1) as i64, id: r.id.to_string() }, backward: false })
        })
        .flatten();
    let data = items.iter().filter_map(|r| resource_out(r)).collect();
    let result = Page { items, next, prev: None };
    Ok(Json(pagination::body(&result, page.order, data, false)))
}

pub async fn add_resource(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<SessionId>,
    ApiJson(body): ApiJson<Value>,
) -> Reply {
    let kind = resource_in(body)?;
    let (session, added) = api.coordinator.add_resource(&id, kind).await?;
    shown(&session, &added)
}

pub async fn retrieve_resource(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(id, rid): PathIds<SessionId, ResourceId>,
) -> Reply {
    shown(&api.coordinator.get_session(&id).await?, &rid)
}

/// `resources.update`: a repository's new `authorization_token` (files have nothing to update).
pub async fn update_resource(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(id, rid): PathIds<SessionId, ResourceId>,
    ApiJson(body): ApiJson<ResourceUpdate>,
) -> Reply {
    let token = body.token()?;
    let session = api.coordinator.set_repository_token(&id, &rid, token).await?;
    shown(&session, &rid)
}

pub async fn delete_resource(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(id, rid): PathIds<SessionId, ResourceId>,
) -> Reply {
    api.coordinator.remove_resource(&id, &rid).await?;
    Ok(Json(json!({"id": rid, "type": "session_resource_deleted"})))
}

/// The resource `rid` of `session`, as the API shows it.
fn shown(session: &Session, rid: &ResourceId) -> Reply {
    session.snapshot.resources.iter().find(|r| &r.id == rid).and_then(resource_out).map(Json).ok_or_else(|| {
        ApiError::not_found(format!("session resource {rid} not found")).code("session_resource_not_found")
    })
}
