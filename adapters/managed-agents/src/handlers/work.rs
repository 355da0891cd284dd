//! `/v1/environments/{id}/work/*`: a self-hosted environment's work queue, as the official
//! SDK's poller and worker speak it (docs/notes/managed-agents-self-hosted-wire.md), and
//! `/v1/environments/{id}/keys`, the environment keys its executors present (an extension).

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use gateway_core::environment::EnvironmentConfig;
use gateway_core::{ApiKeyId, EnvironmentId, WorkId};
use gateway_runtime::Executors;
use gateway_store::{Beat, Order, Stop};
use serde_json::{Value, json};

use super::path_id;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, QueryParams, parse_json};
use crate::pagination;
use crate::wire::work::{KeyCreate, StopIn, WorkUpdate, heartbeat_out, key_out, lease_state, stats_out, work_out};

/// Longest `Anthropic-Worker-ID` kept (the SDK sends `<hostname>-<12 hex>`).
const MAX_WORKER_ID: usize = 256;
/// Longest environment key name.
const MAX_KEY_NAME: usize = 256;

fn env_id(raw: &str) -> Result<EnvironmentId, ApiError> {
    path_id("environment", "environment_not_found", raw)
}

fn work_id(raw: &str) -> Result<WorkId, ApiError> {
    path_id("work item", "work_not_found", raw)
}

/// The environment, which must be self-hosted: a cloud environment has no work queue.
async fn self_hosted<'a>(api: &'a ManagedAgents, raw: &str) -> Result<(EnvironmentId, &'a Executors), ApiError> {
    let id = env_id(raw)?;
    let env = api.coordinator.get_environment(&id).await?;
    if !matches!(env.spec.config, EnvironmentConfig::SelfHosted) {
        return Err(ApiError::invalid(format!("environment {id} is not self_hosted and has no work queue"))
            .code("environment_not_self_hosted"));
    }
    Ok((id, api.coordinator.executors()?))
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
pub async fn poll(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let block = millis_param(&q, "block_ms", 1..=999)?.map(Duration::from_millis);
    let reclaim = millis_param(&q, "reclaim_older_than_ms", 0..=86_400_000)?.map(Duration::from_millis);
    let worker = headers
        .get("anthropic-worker-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|w| !w.is_empty() && w.len() <= MAX_WORKER_ID);
    let item = executors.poll(&env, worker, block, reclaim).await?;
    Ok(Json(item.as_ref().map_or(Value::Null, work_out)))
}

pub async fn ack(
    State(api): State<ManagedAgents>,
    Path((raw, work)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    Ok(Json(work_out(&executors.ack(&env, &work_id(&work)?).await?)))
}

/// `POST …/work/{id}/heartbeat?expected_last_heartbeat=…[&desired_ttl_seconds=…]`: 412
/// `heartbeat_precondition_failed` with the lease's `current_state` when another beat came
/// first (never 409, which the SDK would retry).
pub async fn heartbeat(
    State(api): State<ManagedAgents>,
    Path((raw, work)): Path<(String, String)>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let Some(expected) = q.get("expected_last_heartbeat") else {
        return Err(ApiError::invalid("expected_last_heartbeat is required"));
    };
    let ttl = millis_param(&q, "desired_ttl_seconds", 1..=86_400)?.map(Duration::from_secs);
    match executors.heartbeat(&env, &work_id(&work)?, expected, ttl).await? {
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
pub async fn stop(
    State(api): State<ManagedAgents>,
    Path((raw, work)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let stop: StopIn = if body.iter().all(u8::is_ascii_whitespace) { StopIn::default() } else { parse_json(&body)? };
    match executors.stop(&env, &work_id(&work)?, stop.force.unwrap_or(false)).await? {
        Stop::Done { item, .. } => Ok(Json(work_out(&item))),
        Stop::AlreadyStopped { item } => {
            Err(ApiError::conflict(format!("work item {} is already stopped", item.id), "work_already_stopped"))
        }
    }
}

pub async fn retrieve(
    State(api): State<ManagedAgents>,
    Path((raw, work)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    Ok(Json(work_out(&executors.get(&env, &work_id(&work)?).await?)))
}

pub async fn update(
    State(api): State<ManagedAgents>,
    Path((raw, work)): Path<(String, String)>,
    ApiJson(body): ApiJson<WorkUpdate>,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    if body.metadata.len() > 16
        || body.metadata.iter().any(|(k, v)| k.len() > 64 || v.as_ref().is_some_and(|v| v.len() > 512))
    {
        return Err(ApiError::invalid("metadata holds at most 16 keys of 64 bytes, values of 512 bytes"));
    }
    Ok(Json(work_out(&executors.update_metadata(&env, &work_id(&work)?, body.metadata).await?)))
}

pub async fn list(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result = executors.list(&env, &page).await?;
    Ok(Json(pagination::list(&result, page.order, work_out)))
}

pub async fn stats(State(api): State<ManagedAgents>, Path(raw): Path<String>) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    Ok(Json(stats_out(&executors.stats(&env).await?)))
}

// ---- environment keys ----

/// `POST /v1/environments/{id}/keys`: the secret is in this answer only.
pub async fn create_key(
    State(api): State<ManagedAgents>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let body: KeyCreate =
        if body.iter().all(u8::is_ascii_whitespace) { KeyCreate::default() } else { parse_json(&body)? };
    let name = body.name.unwrap_or_else(|| "executor".to_owned());
    if name.is_empty() || name.len() > MAX_KEY_NAME {
        return Err(ApiError::invalid(format!("name must hold 1 to {MAX_KEY_NAME} bytes")));
    }
    let (key, secret) = executors.create_key(&env, &name).await?;
    Ok(Json(key_out(&key, Some(&secret))))
}

pub async fn list_keys(State(api): State<ManagedAgents>, Path(raw): Path<String>) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let data: Vec<Value> = executors.list_keys(&env).await?.iter().map(|k| key_out(k, None)).collect();
    Ok(Json(json!({"data": data, "next_page": null})))
}

pub async fn revoke_key(
    State(api): State<ManagedAgents>,
    Path((raw, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (env, executors) = self_hosted(&api, &raw).await?;
    let id: ApiKeyId = path_id("environment key", "environment_key_not_found", &key)?;
    if !executors.revoke_key(&env, &id).await? {
        return Err(ApiError::not_found(format!("environment key {key:?} not found or already revoked"))
            .code("environment_key_not_found"));
    }
    api.auth.forget(&id).await;
    Ok(Json(json!({"id": id, "type": "environment_key_revoked"})))
}
