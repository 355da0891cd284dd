//! The self-hosted work queue's wire shapes (`BetaSelfHostedWork` and friends, as
//! `anthropic==2.14.0` models them) and environment keys (an extension, docs/adr/0013).

use std::collections::BTreeMap;

use gateway_store::{ApiKey, WorkItem, WorkStats};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{opt_time, time};

/// A work item. `secret` is always null: every per-item call authenticates with the
/// environment key (the worker falls back to it), so no second credential is minted.
pub fn work_out(w: &WorkItem) -> Value {
    json!({
        "id": w.id,
        "type": "work",
        "environment_id": w.environment_id,
        "data": {"type": "session", "id": w.session_id},
        "state": w.state.as_str(),
        "metadata": w.metadata,
        "created_at": time(w.created_at),
        "secret": Value::Null,
        "acknowledged_at": opt_time(w.acknowledged_at),
        "started_at": opt_time(w.started_at),
        "latest_heartbeat_at": opt_time(w.latest_heartbeat_at),
        "stop_requested_at": opt_time(w.stop_requested_at),
        "stopped_at": opt_time(w.stopped_at),
    })
}

/// The lease as a heartbeat reports it (`BetaWorkLeaseState` without `type`).
pub fn lease_state(w: &WorkItem, extended: bool) -> Value {
    json!({
        "last_heartbeat": w.heartbeat,
        "lease_extended": extended,
        "state": w.state.as_str(),
        "ttl_seconds": w.ttl.map_or(0, |t| t.as_secs()),
    })
}

/// A successful heartbeat's answer. `last_heartbeat` is never empty once a beat was recorded
/// (an empty value would make the worker send an empty precondition next).
pub fn heartbeat_out(w: &WorkItem, extended: bool) -> Value {
    let mut v = lease_state(w, extended);
    v["type"] = json!("work_heartbeat");
    if v["last_heartbeat"].is_null() {
        v["last_heartbeat"] = json!("");
    }
    v
}

pub fn stats_out(s: &WorkStats) -> Value {
    json!({
        "type": "work_queue_stats",
        "depth": s.depth,
        "pending": s.pending,
        "oldest_queued_at": opt_time(s.oldest_queued_at),
        "workers_polling": s.workers_polling,
    })
}

/// `POST …/work/{id}/stop`: `{}` or `{"force": bool}` (the worker sends an empty body too).
#[derive(Debug, Default, Deserialize)]
pub struct StopIn {
    pub force: Option<bool>,
}

/// `POST …/work/{id}`: `{"metadata": {key: string | null}}`.
#[derive(Debug, Deserialize)]
pub struct WorkUpdate {
    pub metadata: BTreeMap<String, Option<String>>,
}

/// `POST /v1/environments/{id}/keys`.
#[derive(Debug, Default, Deserialize)]
pub struct KeyCreate {
    pub name: Option<String>,
}

/// An environment key (never its secret, except once in `key` when it is created).
pub fn key_out(k: &ApiKey, secret: Option<&str>) -> Value {
    let mut v = json!({
        "id": k.id,
        "type": "environment_key",
        "environment_id": k.environment_id,
        "name": k.name,
        "created_at": time(k.created_at),
        "revoked_at": opt_time(k.revoked_at),
    });
    if let Some(secret) = secret {
        v["key"] = json!(secret);
    }
    v
}
