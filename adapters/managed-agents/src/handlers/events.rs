//! `/v1/sessions/{id}/events`: send and list.

use std::collections::HashSet;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gateway_core::event::{EventKind, NewEvent};
use gateway_runtime::auth::Principal;
use gateway_runtime::{EventFilter, Order};
use serde::Deserialize;
use serde_json::{Value, json};

use super::sessions::id;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, QueryParams};
use crate::pagination;
use crate::wire::event::{EventIn, project, type_filter};

#[derive(Deserialize)]
pub struct SendBody {
    events: Vec<EventIn>,
}

impl SendBody {
    /// The batch as core inputs: 1 to 100 events, each valid on its own (a 400 otherwise).
    fn into_inputs(self) -> Result<Vec<NewEvent>, ApiError> {
        if self.events.is_empty() || self.events.len() > 100 {
            return Err(ApiError::invalid("events must hold 1 to 100 events"));
        }
        self.events.into_iter().map(EventIn::into_new_event).collect()
    }
}

#[cfg(test)]
mod props;

/// Commits the batch, then echoes the client's events with their ids: "accepted" is only
/// said after the commit (invariant 4).
/// An environment key (a self-hosted executor) may send tool results only: it answers calls,
/// it does not drive the agent.
pub async fn send(
    State(api): State<ManagedAgents>,
    principal: Option<Extension<Principal>>,
    Path(raw): Path<String>,
    ApiJson(body): ApiJson<SendBody>,
) -> Result<Json<Value>, ApiError> {
    let id = id(&raw)?;
    let inputs = body.into_inputs()?;
    if let Some(Extension(Principal::Environment { .. })) = principal
        && inputs.iter().any(|e| e.payload.kind() != EventKind::ClientToolResult)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "an environment key may send only user.tool_result and user.custom_tool_result events",
        ));
    }
    let sent: HashSet<_> = inputs.iter().map(|e| e.id.clone()).collect();
    let committed = api.coordinator.submit(&id, inputs).await?;
    let data: Vec<Value> = committed.iter().filter(|e| sent.contains(&e.id)).filter_map(project).collect();
    Ok(Json(json!({"data": data})))
}

pub async fn list(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let id = id(&raw)?;
    let page = pagination::request(&q, Order::Asc, 100, 1000)?;
    let types = type_filter(&q.all("types"))?;
    if types.kinds.is_empty() {
        // Only types this gateway never emits were asked for.
        api.coordinator.get_session(&id).await?;
        return Ok(Json(json!({"data": [], "next_page": null})));
    }
    let filter = EventFilter { kinds: types.kinds.clone(), created: q.created()? };
    let result = api.coordinator.list_events(&id, &filter, &page).await?;
    let data = result.items.iter().filter_map(project).filter(|v| types.keeps(v)).collect();
    Ok(Json(pagination::body(&result, page.order, data, false)))
}
