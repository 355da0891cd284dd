//! `/v1/environments/{id}/work/*`: a self-hosted environment's work queue, as the official
//! SDK's poller and worker speak it (docs/notes/managed-agents-self-hosted-wire.md), and
//! `/v1/environments/{id}/keys`, the environment keys its executors present (an extension).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use gateway_core::environment::EnvironmentConfig;
use gateway_core::{ApiKeyId, EnvironmentId, WorkId};
use gateway_runtime::Executors;
use gateway_store::{Beat, Order, Stop};
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathKind, QueryParams, parse_json, path_id};
use crate::pagination;
use crate::wire::work::{KeyCreate, StopIn, WorkUpdate, heartbeat_out, key_out, lease_state, stats_out, work_out};

/// Longest `Anthropic-Worker-ID` kept (the SDK sends `<hostname>-<12 hex>`).
const MAX_WORKER_ID: usize = 256;
/// Longest environment key name.
const MAX_KEY_NAME: usize = 256;

/// The queue of the self-hosted environment a path names (`/v1/environments/{id}/work…`,
/// `…/keys…`), with the item or key id that follows it, if any. A cloud environment has no
/// work queue: its paths are refused before a handler reads anything else.
pub struct Queue {
    env: EnvironmentId,
    executors: Arc<Executors>,
    /// The second path id (a work item's, an environment key's), as sent.
    then: Option<String>,
}

impl FromRequestParts<Arc<ManagedAgents>> for Queue {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<ManagedAgents>) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, api)
            .await
            .map_err(|e| ApiError::invalid(format!("the request path cannot be read: {}", e.body_text())))?;
        let mut ids = params.iter().map(|(_, v)| v);
        let env = path_id::<EnvironmentId>(ids.next().unwrap_or_default())?;
        let then = ids.next().map(str::to_owned);
        let config = api.coordinator.get_environment(&env).await?.spec.config;
        if !matches!(config, EnvironmentConfig::SelfHosted) {
            return Err(ApiError::invalid(format!("environment {env} is not self_hosted and has no work queue"))
                .code("environment_not_self_hosted"));
        }
        Ok(Queue { env, executors: Arc::clone(api.coordinator.executors()?), then })
    }
}

impl Queue {
    /// The path's second id, of kind `T`.
    fn then<T: PathKind>(&self) -> Result<T, ApiError> {
        path_id(self.then.as_deref().unwrap_or_default())
    }
}

/// An optional whole-number query parameter in `range`.
fn millis_param(q: &QueryParams, name: &str, range: std::ops::RangeInclusive<u64>) -> Result<Option<u64>, ApiError> {
    match q.get(name) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::invalid(format!(
                "{name} must be an integer from {} to {}, not {v:?}",
                range.start(),
                range.end()
            ))),
        },
    }
}

/// `GET …/work/poll`: the next item, or `null` (HTTP 200: the SDK reads an empty poll only
/// that way).
pub async fn poll(queue: Queue, headers: HeaderMap, q: QueryParams) -> Reply {
    let block = millis_param(&q, "block_ms", 1..=999)?.map(Duration::from_millis);
    let reclaim = millis_param(&q, "reclaim_older_than_ms", 0..=86_400_000)?.map(Duration::from_millis);
    let worker = headers
        .get("anthropic-worker-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|w| !w.is_empty() && w.len() <= MAX_WORKER_ID);
    let item = queue.executors.poll(&queue.env, worker, block, reclaim).await?;
    Ok(Json(item.as_ref().map_or(Value::Null, work_out)))
}

pub async fn ack(queue: Queue) -> Reply {
    Ok(Json(work_out(&queue.executors.ack(&queue.env, &queue.then::<WorkId>()?).await?)))
}

/// `POST …/work/{id}/heartbeat?expected_last_heartbeat=…[&desired_ttl_seconds=…]`: 412
/// `heartbeat_precondition_failed` with the lease's `current_state` when another beat came
/// first (never 409, which the SDK would retry).
pub async fn heartbeat(queue: Queue, q: QueryParams) -> Reply {
    let Some(expected) = q.get("expected_last_heartbeat") else {
        return Err(ApiError::invalid("expected_last_heartbeat is required"));
    };
    let ttl = millis_param(&q, "desired_ttl_seconds", 1..=86_400)?.map(Duration::from_secs);
    match queue.executors.heartbeat(&queue.env, &queue.then::<WorkId>()?, expected, ttl).await? {
        Beat::Extended { item, .. } => Ok(Json(heartbeat_out(&item, true))),
        Beat::Ending { item } => Ok(Json(heartbeat_out(&item, false))),
        Beat::Mismatch { item } => Err(ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "invalid_request_error",
            "expected_last_heartbeat is not this work item's last heartbeat",
        )
        .code("heartbeat_precondition_failed")
        .details(json!({"current_state": lease_state(&item, false)}))),
    }
}

/// `POST …/work/{id}/stop`, body `{}` or `{"force": true}` (an empty body is `{}`). 409 when
/// it is already stopped.
pub async fn stop(queue: Queue, body: Bytes) -> Reply {
    let stop: StopIn = if body.iter().all(u8::is_ascii_whitespace) { StopIn::default() } else { parse_json(&body)? };
    match queue.executors.stop(&queue.env, &queue.then::<WorkId>()?, stop.force.unwrap_or(false)).await? {
        Stop::Done { item, .. } => Ok(Json(work_out(&item))),
        Stop::AlreadyStopped { item } => {
            Err(ApiError::conflict(format!("work item {} is already stopped", item.id), "work_already_stopped"))
        }
    }
}

pub async fn retrieve(queue: Queue) -> Reply {
    Ok(Json(work_out(&queue.executors.get(&queue.env, &queue.then::<WorkId>()?).await?)))
}

pub async fn update(queue: Queue, ApiJson(body): ApiJson<WorkUpdate>) -> Reply {
    if body.metadata.len() > 16
        || body.metadata.iter().any(|(k, v)| k.len() > 64 || v.as_ref().is_some_and(|v| v.len() > 512))
    {
        return Err(ApiError::invalid("metadata holds at most 16 keys of 64 bytes, values of 512 bytes"));
    }
    Ok(Json(work_out(&queue.executors.update_metadata(&queue.env, &queue.then::<WorkId>()?, body.metadata).await?)))
}

pub async fn list(queue: Queue, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result = queue.executors.list(&queue.env, &page).await?;
    Ok(Json(pagination::list(&result, page.order, work_out)))
}

pub async fn stats(queue: Queue) -> Reply {
    Ok(Json(stats_out(&queue.executors.stats(&queue.env).await?)))
}

// ---- environment keys ----

/// `POST /v1/environments/{id}/keys`: the secret is in this answer only.
pub async fn create_key(queue: Queue, body: Bytes) -> Reply {
    let body: KeyCreate =
        if body.iter().all(u8::is_ascii_whitespace) { KeyCreate::default() } else { parse_json(&body)? };
    let name = body.name.unwrap_or_else(|| "executor".to_owned());
    if name.is_empty() || name.len() > MAX_KEY_NAME {
        return Err(ApiError::invalid(format!("name must hold 1 to {MAX_KEY_NAME} bytes")));
    }
    let (key, secret) = queue.executors.create_key(&queue.env, &name).await?;
    Ok(Json(key_out(&key, Some(&secret))))
}

pub async fn list_keys(queue: Queue) -> Reply {
    let data: Vec<Value> = queue.executors.list_keys(&queue.env).await?.iter().map(|k| key_out(k, None)).collect();
    Ok(Json(json!({"data": data, "next_page": null})))
}

pub async fn revoke_key(State(api): State<Arc<ManagedAgents>>, queue: Queue) -> Reply {
    let id: ApiKeyId = queue.then()?;
    if !queue.executors.revoke_key(&queue.env, &id).await? {
        return Err(ApiError::not_found(format!("environment key {:?} not found or already revoked", id.as_str()))
            .code("environment_key_not_found"));
    }
    api.auth.forget(&id).await;
    Ok(Json(json!({"id": id, "type": "environment_key_revoked"})))
}
