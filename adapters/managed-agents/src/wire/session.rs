//! Sessions: creation (three agent forms, initial events), updates, and the response shape
//! with the extension field `environment_state`.

use std::collections::BTreeMap;

use gateway_core::environment::ConnectionStatus;
use gateway_core::models::ModelCatalog;
use gateway_core::placement::ToolExecution;
use gateway_core::session::{Checkout, MAX_RESOURCES, Resource, ResourceKind, Secret, Session};
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
    pub initial_events: Option<Vec<EventIn>>,
    pub metadata: Option<Metadata>,
    pub resources: Option<Vec<Value>>,
    pub title: Option<String>,
    pub vault_ids: Option<Vec<String>>,
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

/// A session resource as the client sent it. Files and repositories are handed to the core,
/// whose placement decides whether the session can have them (a remote A2A agent never can),
/// so the refusal names the deciding rule.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResourceIn {
    File {
        file_id: String,
        mount_path: Option<String>,
    },
    GithubRepository {
        url: String,
        authorization_token: Option<String>,
        checkout: Option<Checkout>,
        mount_path: Option<String>,
    },
    MemoryStore {},
}

const MAX_RESOURCE_FIELD: usize = 4096;

fn bounded(field: &str, v: String) -> Result<String, ApiError> {
    if v.is_empty() || v.len() > MAX_RESOURCE_FIELD {
        return Err(ApiError::invalid(format!("resources: {field} must be 1 to {MAX_RESOURCE_FIELD} bytes")));
    }
    Ok(v)
}

impl ResourceIn {
    fn into_kind(self) -> Result<ResourceKind, ApiError> {
        Ok(match self {
            ResourceIn::File { file_id, mount_path } => {
                let mount_path = mount_path.unwrap_or_else(|| format!("/mnt/session/uploads/{file_id}"));
                ResourceKind::File {
                    file_id: bounded("file_id", file_id)?,
                    mount_path: bounded("mount_path", mount_path)?,
                }
            }
            ResourceIn::GithubRepository { url, authorization_token, checkout, mount_path } => {
                let repo = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default().trim_end_matches(".git");
                let mount_path = mount_path.unwrap_or_else(|| format!("/workspace/{repo}"));
                ResourceKind::Repository {
                    url: bounded("url", url)?,
                    mount_path: bounded("mount_path", mount_path)?,
                    checkout,
                    authorization_token: authorization_token
                        .map(|t| bounded("authorization_token", t))
                        .transpose()?
                        .map(Secret),
                }
            }
            ResourceIn::MemoryStore {} => {
                return Err(ApiError::not_supported("session resources (type \"memory_store\")"));
            }
        })
    }
}

/// One resource as a client sent it (`resources[]` at creation, `resources.add`), checked for
/// shape and size; the core checks its mount path and placement decides whether it can be had.
pub fn resource_in(raw: Value) -> Result<ResourceKind, ApiError> {
    let r: ResourceIn = serde_json::from_value(raw).map_err(|e| ApiError::invalid(format!("resources: {e}")))?;
    r.into_kind()
}

/// A resource as the API shows it (a client workspace, which only editors mount, is not one).
/// Repository tokens are never shown.
pub fn resource_out(r: &Resource) -> Option<Value> {
    let at = time(r.created_at);
    Some(match &r.kind {
        ResourceKind::File { file_id, mount_path } => json!({
            "id": r.id,
            "type": "file",
            "file_id": file_id,
            "mount_path": mount_path,
            "created_at": at,
            "updated_at": at,
        }),
        ResourceKind::Repository { url, mount_path, checkout, .. } => json!({
            "id": r.id,
            "type": "github_repository",
            "url": url,
            "mount_path": mount_path,
            "checkout": checkout,
            "created_at": at,
            "updated_at": at,
        }),
        ResourceKind::Workspace { .. } => return None,
    })
}

/// `resources.update`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceUpdate {
    authorization_token: String,
}

impl ResourceUpdate {
    pub fn token(self) -> Result<Secret, ApiError> {
        bounded("authorization_token", self.authorization_token).map(Secret)
    }
}

impl SessionCreate {
    /// The resources, checked for shape and size; placement decides whether they can be had.
    pub fn take_resources(&mut self) -> Result<Vec<ResourceKind>, ApiError> {
        let raw = self.resources.take().unwrap_or_default();
        if raw.len() > MAX_RESOURCES {
            return Err(ApiError::invalid(format!("at most {MAX_RESOURCES} resources are allowed")));
        }
        raw.into_iter().map(resource_in).collect()
    }

    /// Checks what this gateway does not support, and the agent form.
    pub fn validate(&self) -> Result<AgentChoice, ApiError> {
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

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct SessionUpdate {
    pub title: Patch<String>,
    pub metadata: Patch<BTreeMap<String, Option<String>>>,
    pub agent: Option<Value>,
    /// Absent: keep; `null`: remove; an object: replace.
    pub budget: Patch<Value>,
    pub vault_ids: Option<Vec<String>>,
}

/// A session. A self-hosted one (its tools run on an executor) also shows its executor
/// connection as the extension `environment` (docs/adr/0013); cloud sessions keep the SDK's
/// exact shape.
pub fn session_out(s: &Session, remote_url: &str, models: &ModelCatalog) -> Value {
    let a = &s.snapshot.agent;
    let mut out = json!({
        "id": s.id,
        "type": "session",
        "environment_id": s.environment_id,
        "status": s.status.as_str(),
        "agent": definition(a.id.as_str(), a.version, &a.spec),
        "metadata": s.metadata,
        "title": s.title,
        "resources": s.snapshot.resources.iter().filter_map(resource_out).collect::<Vec<_>>(),
        "vault_ids": s.snapshot.vault_ids,
        "outcome_evaluations": [],
        "stats": {},
        "usage": super::event::usage_out(&s.usage),
        "budget": s.budget.as_ref().map(super::event::budget_out),
        "deployment_id": Value::Null,
        "created_at": time(s.created_at),
        "updated_at": time(s.updated_at),
        "archived_at": opt_time(s.archived_at),
        "environment_state": s.environment_state.as_str(),
        "serving_model": super::agent::serving_model(&a.spec, models),
    });
    if s.snapshot.requirements.tool_execution == ToolExecution::External {
        let status = s.connection.unwrap_or(ConnectionStatus::Disconnected);
        out["environment"] = json!({
            "id": s.environment_id,
            "type": "self_hosted",
            "status": status.as_str(),
            "remote_url": remote_url,
        });
    }
    out
}
