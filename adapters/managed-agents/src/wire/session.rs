//! Sessions: creation (three agent forms, initial events), updates, and the response shape
//! with the extension field `environment_state`.

use std::collections::BTreeMap;

use gateway_core::session::Session;
use gateway_core::{AgentId, Metadata};
use serde::Deserialize;
use serde_json::{Value, json};

use super::agent::{OverridesIn, definition};
use super::event::EventIn;
use super::{Patch, check_metadata, opt_time, time};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
pub struct AgentRefObject {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    #[serde(default)]
    pub version: Option<u32>,
    #[serde(flatten)]
    pub overrides: OverridesIn,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // parsed once per request, never stored
pub enum AgentRefIn {
    Id(String),
    Object(AgentRefObject),
}

#[derive(Debug, Deserialize)]
pub struct SessionCreate {
    pub agent: AgentRefIn,
    pub environment_id: String,
    #[serde(default)]
    pub initial_events: Option<Vec<EventIn>>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub resources: Option<Vec<Value>>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub vault_ids: Option<Vec<String>>,
    #[serde(default)]
    pub budget: Option<Value>,
}

/// The agent a session asks for: id and pinned version (overrides: `take_overrides`).
pub struct AgentChoice {
    pub id: AgentId,
    pub version: Option<u32>,
}

fn agent_id(s: &str) -> Result<AgentId, ApiError> {
    AgentId::parse(s).map_err(|_| ApiError::not_found(format!("agent {s:?} not found")).code("agent_not_found"))
}

impl SessionCreate {
    /// Checks what this gateway does not support, and the agent form.
    pub fn validate(&self) -> Result<AgentChoice, ApiError> {
        if let Some(r) = self.resources.as_ref().and_then(|r| r.first()) {
            let kind = r.get("type").and_then(Value::as_str).unwrap_or("unknown");
            return Err(ApiError::not_supported(format!("session resources (type {kind:?})")));
        }
        if self.vault_ids.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::not_supported("vault_ids"));
        }
        if self.budget.as_ref().is_some_and(|b| !b.is_null()) {
            return Err(ApiError::not_supported("budget"));
        }
        if let Some(m) = &self.metadata {
            check_metadata(m)?;
        }
        if let Some(t) = &self.title
            && t.chars().count() > 512
        {
            return Err(ApiError::invalid("title exceeds 512 characters"));
        }
        if self.initial_events.as_ref().is_some_and(|e| e.len() > 50) {
            return Err(ApiError::invalid("at most 50 initial_events are allowed"));
        }
        match &self.agent {
            AgentRefIn::Id(id) => Ok(AgentChoice { id: agent_id(id)?, version: None }),
            AgentRefIn::Object(o) => match o.kind.as_str() {
                "agent" | "agent_with_overrides" => Ok(AgentChoice { id: agent_id(&o.id)?, version: o.version }),
                other => {
                    Err(ApiError::invalid(format!("agent.type must be agent or agent_with_overrides, not {other:?}")))
                }
            },
        }
    }

    /// Takes the overrides out (only for `agent_with_overrides`).
    pub fn take_overrides(&mut self) -> Option<OverridesIn> {
        match &mut self.agent {
            AgentRefIn::Object(o) if o.kind == "agent_with_overrides" => Some(std::mem::take(&mut o.overrides)),
            _ => None,
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct SessionUpdate {
    #[serde(default)]
    pub title: Patch<String>,
    #[serde(default)]
    pub metadata: Patch<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    pub agent: Option<Value>,
    #[serde(default)]
    pub budget: Option<Value>,
    #[serde(default)]
    pub vault_ids: Option<Value>,
}

pub fn session_out(s: &Session) -> Value {
    let a = &s.snapshot.agent;
    json!({
        "id": s.id,
        "type": "session",
        "environment_id": s.environment_id,
        "status": s.status.as_str(),
        "agent": definition(a.id.as_str(), a.version, &a.spec),
        "metadata": s.metadata,
        "title": s.title,
        "resources": [],
        "vault_ids": [],
        "outcome_evaluations": [],
        "stats": {},
        "usage": {},
        "budget": Value::Null,
        "deployment_id": Value::Null,
        "created_at": time(s.created_at),
        "updated_at": time(s.updated_at),
        "archived_at": opt_time(s.archived_at),
        "environment_state": s.environment_state.as_str(),
    })
}
