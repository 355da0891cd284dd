//! `/v1/sessions/{id}/events`: send and list.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gateway_core::SessionId;
use gateway_core::event::{Event, EventPayload, NewEvent, ToolOrigin};
use gateway_services::auth::Principal;
use gateway_store::{EventFilter, Order};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathId, QueryParams};
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
///
/// An environment key (a self-hosted executor) answers the calls its work queue gave it and
/// nothing else: only `user.tool_result`s, each naming a built-in tool call of this session
/// (403 for a custom or MCP call, 400 `tool_use_not_pending` for an id that names no call, as
/// for any result that answers nothing). An executor's result is held to the output cap of
/// the gateway's own built-in tools before it is admitted, whoever sends it.
pub async fn send(
    State(api): State<Arc<ManagedAgents>>,
    principal: Option<Extension<Principal>>,
    PathId(id): PathId<SessionId>,
    ApiJson(body): ApiJson<SendBody>,
) -> Reply {
    let mut inputs = body.into_inputs()?;
    if let Some(Extension(Principal::Environment { .. })) = principal {
        for input in &inputs {
            check_executor_answer(&api, &id, &input.payload).await?;
        }
    }
    if let Ok(executors) = api.coordinator.executors() {
        for input in &mut inputs {
            if let EventPayload::ClientToolResult { origin: ToolOrigin::Builtin, content, .. } = &mut input.payload {
                *content = executors.cap_result(std::mem::take(content));
            }
        }
    }
    let sent: HashSet<_> = inputs.iter().map(|e| e.id.clone()).collect();
    let committed = api.coordinator.submit(&id, inputs).await?;
    let data: Vec<Value> = committed.iter().filter(|e| sent.contains(&e.id)).filter_map(project).collect();
    Ok(Json(json!({"data": data})))
}

/// Refuses what an environment key may not send: anything but a `user.tool_result` for a
/// built-in tool call of `session`. A call's origin is fixed when it is committed, so this
/// read cannot be outdated by the admission; whether the call still waits is the admission's
/// to check.
async fn check_executor_answer(api: &ManagedAgents, session: &SessionId, input: &EventPayload) -> Result<(), ApiError> {
    let refused = |message: &str| ApiError::new(StatusCode::FORBIDDEN, "permission_error", message);
    let EventPayload::ClientToolResult { tool_use_id, origin: ToolOrigin::Builtin, .. } = input else {
        return Err(refused(
            "an environment key may send only user.tool_result events, for the built-in tool calls its executor runs",
        ));
    };
    match api.coordinator.find_event(session, tool_use_id).await? {
        Some(Event { payload: EventPayload::ToolUse { origin: ToolOrigin::Builtin, .. }, .. }) => Ok(()),
        Some(Event { payload: EventPayload::ToolUse { .. }, .. }) => Err(refused(
            "an environment key answers only built-in tool calls; this call is the application's to answer",
        )),
        _ => Err(ApiError::invalid(format!("{tool_use_id} is not a pending tool use of this session"))
            .code("tool_use_not_pending")),
    }
}

pub async fn list(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<SessionId>, q: QueryParams) -> Reply {
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
