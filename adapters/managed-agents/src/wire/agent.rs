//! Agents: request parsing (create, update, per-session overrides) and the response shape.

use std::collections::{BTreeMap, HashSet};

use gateway_core::agent::{
    Agent, AgentOverrides, AgentSpec, BUILTIN_TOOLS, BackendRef, McpServerSpec, ModelSpec, NamedToolConfig,
    PermissionPolicy, SkillRef, ToolConfig, ToolSpec,
};
use gateway_core::models::ModelCatalog;
use gateway_core::{JsonObject, Metadata};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Patch, check_metadata, check_text, merge_metadata, opt_time, time};
use crate::error::ApiError;

/// The published toolset version this gateway implements.
pub const TOOLSET: &str = "agent_toolset_20260401";

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ModelIn {
    Id(String),
    Config { id: String, effort: Option<EffortIn>, speed: Option<String> },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum EffortIn {
    Name(String),
    Typed {
        #[serde(rename = "type")]
        kind: String,
    },
}

#[derive(Debug, Deserialize)]
pub struct PolicyIn {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize, Default)]
pub struct DefaultConfigIn {
    enabled: Option<bool>,
    permission_policy: Option<PolicyIn>,
}

#[derive(Debug, Deserialize)]
pub struct ToolConfigIn {
    name: String,
    enabled: Option<bool>,
    permission_policy: Option<PolicyIn>,
    #[serde(flatten)]
    extras: JsonObject,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum ToolIn {
    #[serde(rename = "agent_toolset_20260401")]
    Toolset {
        default_config: Option<DefaultConfigIn>,
        #[serde(default)]
        configs: Vec<ToolConfigIn>,
    },
    #[serde(rename = "mcp_toolset")]
    Mcp {
        mcp_server_name: String,
        default_config: Option<DefaultConfigIn>,
        #[serde(default)]
        configs: Vec<ToolConfigIn>,
    },
    #[serde(rename = "custom")]
    Custom { name: String, description: String, input_schema: JsonObject },
}

#[derive(Debug, Deserialize)]
pub struct McpServerIn {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    name: String,
    url: String,
}

#[derive(Debug, Deserialize)]
pub struct SkillIn {
    #[serde(rename = "type")]
    kind: String,
    skill_id: String,
    version: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct AgentCreate {
    pub name: String,
    pub model: ModelIn,
    pub system: Option<String>,
    pub description: Option<String>,
    pub tools: Option<Vec<ToolIn>>,
    pub mcp_servers: Option<Vec<McpServerIn>>,
    pub skills: Option<Vec<SkillIn>>,
    pub metadata: Option<Metadata>,
    pub multiagent: Option<Value>,
    pub execution_identity: Option<Value>,
    /// Extension: the published backend.
    pub backend: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct AgentUpdate {
    pub version: Option<u32>,
    pub name: Patch<String>,
    pub model: Patch<ModelIn>,
    pub system: Patch<String>,
    pub description: Patch<String>,
    pub tools: Patch<Vec<ToolIn>>,
    pub mcp_servers: Patch<Vec<McpServerIn>>,
    pub skills: Patch<Vec<SkillIn>>,
    pub metadata: Patch<BTreeMap<String, Option<String>>>,
    pub multiagent: Patch<Value>,
    pub execution_identity: Patch<Value>,
    pub backend: Patch<String>,
}

fn policy(p: Option<PolicyIn>, default: PermissionPolicy) -> Result<PermissionPolicy, ApiError> {
    match p.map(|p| p.kind) {
        None => Ok(default),
        Some(k) => match k.as_str() {
            "always_allow" => Ok(PermissionPolicy::AlwaysAllow),
            "always_ask" => Ok(PermissionPolicy::AlwaysAsk),
            "auto" => Ok(PermissionPolicy::Auto),
            other => Err(ApiError::invalid(format!("unknown permission_policy type {other:?}"))),
        },
    }
}

fn model_in(m: ModelIn) -> Result<ModelSpec, ApiError> {
    let spec = match m {
        ModelIn::Id(id) => ModelSpec { id, effort: None, speed: None },
        ModelIn::Config { id, effort, speed } => ModelSpec {
            id,
            effort: effort.map(|e| match e {
                EffortIn::Name(n) => n,
                EffortIn::Typed { kind } => kind,
            }),
            speed,
        },
    };
    check_text("model", &spec.id, 256)?;
    if let Some(e) = &spec.effort {
        ModelSpec::check_effort(e).map_err(|m| ApiError::invalid(format!("model.{m}")))?;
    }
    if let Some(s) = &spec.speed
        && !["standard", "fast"].contains(&s.as_str())
    {
        return Err(ApiError::invalid(format!("model.speed must be standard or fast, not {s:?}")));
    }
    Ok(spec)
}

fn valid_tool_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 128 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn tools_in(tools: Vec<ToolIn>, servers: &[McpServerSpec]) -> Result<Vec<ToolSpec>, ApiError> {
    if tools.len() > 256 {
        return Err(ApiError::invalid("at most 256 tools are allowed"));
    }
    let mut names: HashSet<String> = HashSet::new();
    let mut claim = |n: &str| -> Result<(), ApiError> {
        if names.insert(n.to_owned()) {
            Ok(())
        } else {
            Err(ApiError::invalid(format!("tool name {n:?} is used more than once")).code("tool_name_conflict"))
        }
    };
    let mut out = Vec::new();
    for t in tools {
        match t {
            ToolIn::Toolset { default_config, configs } => {
                let d = default_config.unwrap_or_default();
                let default_config = ToolConfig {
                    enabled: d.enabled.unwrap_or(true),
                    permission_policy: policy(d.permission_policy, PermissionPolicy::AlwaysAllow)?,
                };
                let mut seen = HashSet::new();
                let mut cfgs = Vec::new();
                for c in configs {
                    if !BUILTIN_TOOLS.contains(&c.name.as_str()) {
                        return Err(ApiError::invalid(format!(
                            "{:?} is not a tool of {TOOLSET} (known: {})",
                            c.name,
                            BUILTIN_TOOLS.join(", ")
                        )));
                    }
                    if !seen.insert(c.name.clone()) {
                        return Err(ApiError::invalid(format!("tool {:?} is configured twice", c.name)));
                    }
                    let mut extras = c.extras;
                    extras.remove("type");
                    normalize_url_sources(&mut extras);
                    cfgs.push(NamedToolConfig {
                        name: c.name,
                        enabled: c.enabled.unwrap_or(default_config.enabled),
                        permission_policy: policy(c.permission_policy, default_config.permission_policy)?,
                        extras,
                    });
                }
                for n in BUILTIN_TOOLS {
                    claim(n)?;
                }
                out.push(ToolSpec::Builtin { version: TOOLSET.into(), default_config, configs: cfgs });
            }
            ToolIn::Mcp { mcp_server_name, default_config, configs } => {
                if !servers.iter().any(|s| s.name == mcp_server_name) {
                    return Err(ApiError::invalid(format!(
                        "mcp_toolset references {mcp_server_name:?}, which is not in mcp_servers"
                    )));
                }
                let d = default_config.unwrap_or_default();
                let default_config = ToolConfig {
                    enabled: d.enabled.unwrap_or(true),
                    permission_policy: policy(d.permission_policy, PermissionPolicy::AlwaysAsk)?,
                };
                let cfgs = configs
                    .into_iter()
                    .map(|c| {
                        Ok(NamedToolConfig {
                            enabled: c.enabled.unwrap_or(default_config.enabled),
                            permission_policy: policy(c.permission_policy, default_config.permission_policy)?,
                            name: c.name,
                            extras: JsonObject::new(),
                        })
                    })
                    .collect::<Result<Vec<_>, ApiError>>()?;
                out.push(ToolSpec::Mcp { mcp_server_name, default_config, configs: cfgs });
            }
            ToolIn::Custom { name, description, input_schema } => {
                if !valid_tool_name(&name) {
                    return Err(ApiError::invalid(format!("custom tool name {name:?} must be 1-128 of [A-Za-z0-9_-]")));
                }
                if input_schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(ApiError::invalid(format!(
                        "input_schema of tool {name:?} must have \"type\": \"object\""
                    )));
                }
                claim(&name)?;
                out.push(ToolSpec::Custom { name, description, input_schema });
            }
        }
    }
    Ok(out)
}

/// `web_fetch` `url_sources` values may be written `"all"` / `"none"`; responses always use
/// the object form (`{"type": "all"}`), as the SDK's models require.
fn normalize_url_sources(extras: &mut JsonObject) {
    if let Some(Value::Object(sources)) = extras.get_mut("url_sources") {
        for v in sources.values_mut() {
            if let Value::String(s) = v {
                *v = json!({"type": s.clone()});
            }
        }
    }
}

/// `sessions.update`'s `agent`: only `tools` and `mcp_servers`, each replaced whole when sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionAgentUpdate {
    tools: Option<Vec<ToolIn>>,
    mcp_servers: Option<Vec<McpServerIn>>,
}

impl SessionAgentUpdate {
    /// The session's agent definition with the update applied; kept tools must still name
    /// servers that exist.
    pub fn apply(self, current: &AgentSpec) -> Result<AgentSpec, ApiError> {
        let mut spec = current.clone();
        if let Some(servers) = self.mcp_servers {
            spec.mcp_servers = servers_in(servers)?;
        }
        match self.tools {
            Some(tools) => spec.tools = tools_in(tools, &spec.mcp_servers)?,
            None => {
                for t in &spec.tools {
                    if let ToolSpec::Mcp { mcp_server_name, .. } = t
                        && !spec.mcp_servers.iter().any(|s| &s.name == mcp_server_name)
                    {
                        return Err(ApiError::invalid(format!(
                            "mcp_toolset references {mcp_server_name:?}, which is not in mcp_servers"
                        )));
                    }
                }
            }
        }
        Ok(spec)
    }
}

fn servers_in(servers: Vec<McpServerIn>) -> Result<Vec<McpServerSpec>, ApiError> {
    if servers.len() > 20 {
        return Err(ApiError::invalid("at most 20 MCP servers are allowed"));
    }
    let mut names = HashSet::new();
    servers
        .into_iter()
        .map(|s| {
            if s.kind.as_deref().is_some_and(|k| k != "url") {
                return Err(ApiError::invalid("mcp_servers entries must have type \"url\""));
            }
            if !names.insert(s.name.clone()) {
                return Err(ApiError::invalid(format!("MCP server name {:?} is used twice", s.name)));
            }
            Ok(McpServerSpec { name: s.name, url: s.url })
        })
        .collect()
}

fn skills_in(skills: Vec<SkillIn>) -> Result<Vec<SkillRef>, ApiError> {
    skills
        .into_iter()
        .map(|s| {
            match s.kind.as_str() {
                "custom" => {}
                "anthropic" => {
                    let id: String = s.skill_id.chars().take(128).collect();
                    return Err(ApiError::not_supported(format!("prebuilt skill {id:?} (type \"anthropic\")")));
                }
                other => {
                    return Err(ApiError::invalid(format!("skill type must be anthropic or custom, not {other:?}")));
                }
            }
            let version = s.version.unwrap_or_else(|| "latest".into());
            Ok(SkillRef { source: s.kind, skill_id: s.skill_id, version, resolved: None })
        })
        .collect()
}

fn backend_in(b: Option<String>) -> Result<BackendRef, ApiError> {
    match b {
        None => Ok(BackendRef::Native),
        Some(s) => BackendRef::parse(&s).map_err(|e| ApiError::invalid(e.to_string())),
    }
}

fn extensions(multiagent: Option<Value>, identity: Option<Value>) -> Result<JsonObject, ApiError> {
    let mut ext = JsonObject::new();
    if multiagent.as_ref().is_some_and(|m| !m.is_null()) {
        return Err(ApiError::not_supported("multiagent"));
    }
    if let Some(id) = identity.filter(|v| !v.is_null()) {
        if id.get("type").and_then(Value::as_str) != Some("service_account") {
            return Err(ApiError::not_supported("an execution_identity other than service_account"));
        }
        ext.insert("execution_identity".into(), id);
    }
    Ok(ext)
}

impl AgentCreate {
    pub fn into_spec(self) -> Result<AgentSpec, ApiError> {
        check_text("name", &self.name, 256)?;
        let metadata = self.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        let mcp_servers = servers_in(self.mcp_servers.unwrap_or_default())?;
        Ok(AgentSpec {
            name: self.name,
            description: self.description,
            system: self.system,
            model: model_in(self.model)?,
            tools: tools_in(self.tools.unwrap_or_default(), &mcp_servers)?,
            mcp_servers,
            skills: skills_in(self.skills.unwrap_or_default())?,
            metadata,
            backend: backend_in(self.backend)?,
            extensions: extensions(self.multiagent, self.execution_identity)?,
        })
    }
}

impl AgentUpdate {
    /// The spec after this update: omitted fields kept, arrays replaced, metadata merged.
    pub fn apply(self, current: &AgentSpec) -> Result<AgentSpec, ApiError> {
        let mut s = current.clone();
        match self.name {
            Patch::Keep => {}
            Patch::Clear => return Err(ApiError::invalid("name cannot be cleared")),
            Patch::Set(n) => {
                check_text("name", &n, 256)?;
                s.name = n;
            }
        }
        match self.model {
            Patch::Keep => {}
            Patch::Clear => return Err(ApiError::invalid("model cannot be cleared").code("agent_model_required")),
            Patch::Set(m) => s.model = model_in(m)?,
        }
        s.system = self.system.apply(s.system);
        s.description = self.description.apply(s.description);
        match self.mcp_servers {
            Patch::Keep => {}
            Patch::Clear => s.mcp_servers.clear(),
            Patch::Set(v) => s.mcp_servers = servers_in(v)?,
        }
        match self.tools {
            Patch::Keep => {}
            Patch::Clear => s.tools.clear(),
            Patch::Set(v) => s.tools = tools_in(v, &s.mcp_servers)?,
        }
        match self.skills {
            Patch::Keep => {}
            Patch::Clear => s.skills.clear(),
            Patch::Set(v) => s.skills = skills_in(v)?,
        }
        if let Patch::Set(m) = self.metadata {
            s.metadata = merge_metadata(&s.metadata, m)?;
        } else if self.metadata == Patch::Clear {
            s.metadata.clear();
        }
        match self.backend {
            Patch::Keep => {}
            Patch::Clear => s.backend = BackendRef::Native,
            Patch::Set(b) => s.backend = backend_in(Some(b))?,
        }
        let multiagent = match self.multiagent {
            Patch::Set(v) => Some(v),
            _ => None,
        };
        let identity = match self.execution_identity {
            Patch::Keep => s.extensions.get("execution_identity").cloned(),
            Patch::Clear => None,
            Patch::Set(v) => Some(v),
        };
        s.extensions = extensions(multiagent, identity)?;
        Ok(s)
    }
}

/// A session's per-session agent changes (`agent_with_overrides`).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct OverridesIn {
    pub model: Patch<ModelIn>,
    pub system: Patch<String>,
    pub tools: Patch<Vec<ToolIn>>,
    pub mcp_servers: Patch<Vec<McpServerIn>>,
    pub skills: Patch<Vec<SkillIn>>,
}

impl OverridesIn {
    pub fn into_overrides(self, base: &AgentSpec) -> Result<AgentOverrides, ApiError> {
        let mut o = AgentOverrides::default();
        match self.model {
            Patch::Keep => {}
            Patch::Clear => return Err(ApiError::invalid("model cannot be cleared").code("agent_model_required")),
            Patch::Set(m) => o.model = Some(model_in(m)?),
        }
        match self.system {
            Patch::Keep => {}
            Patch::Clear => o.system = Some(None),
            Patch::Set(v) => o.system = Some(Some(v)),
        }
        let servers_changed = !matches!(self.mcp_servers, Patch::Keep);
        let servers = match self.mcp_servers {
            Patch::Keep => base.mcp_servers.clone(),
            Patch::Clear => Vec::new(),
            Patch::Set(v) => servers_in(v)?,
        };
        if servers_changed {
            o.mcp_servers = Some(servers.clone());
        }
        match self.tools {
            Patch::Keep => {}
            Patch::Clear => o.tools = Some(Vec::new()),
            Patch::Set(v) => o.tools = Some(tools_in(v, &servers)?),
        }
        match self.skills {
            Patch::Keep => {}
            Patch::Clear => o.skills = Some(Vec::new()),
            Patch::Set(v) => o.skills = Some(skills_in(v)?),
        }
        Ok(o)
    }
}

fn policy_out(p: PermissionPolicy) -> Value {
    json!({"type": match p {
        PermissionPolicy::AlwaysAllow => "always_allow",
        PermissionPolicy::AlwaysAsk => "always_ask",
        PermissionPolicy::Auto => "auto",
    }})
}

fn tools_out(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| match t {
            ToolSpec::Builtin { version, default_config, configs } => json!({
                "type": version,
                "default_config": {"enabled": default_config.enabled, "permission_policy": policy_out(default_config.permission_policy)},
                "configs": configs.iter().map(|c| {
                    let mut v = json!({
                        "type": c.name, "name": c.name, "enabled": c.enabled,
                        "permission_policy": policy_out(c.permission_policy),
                    });
                    if let Some(o) = v.as_object_mut() {
                        for (k, x) in &c.extras {
                            o.entry(k.clone()).or_insert_with(|| x.clone());
                        }
                    }
                    v
                }).collect::<Vec<_>>(),
            }),
            ToolSpec::Mcp { mcp_server_name, default_config, configs } => json!({
                "type": "mcp_toolset",
                "mcp_server_name": mcp_server_name,
                "default_config": {"enabled": default_config.enabled, "permission_policy": policy_out(default_config.permission_policy)},
                "configs": configs.iter().map(|c| json!({
                    "name": c.name, "enabled": c.enabled, "permission_policy": policy_out(c.permission_policy),
                })).collect::<Vec<_>>(),
            }),
            ToolSpec::Custom { name, description, input_schema } => json!({
                "type": "custom", "name": name, "description": description, "input_schema": input_schema,
            }),
        })
        .collect()
}

/// The agent definition fields shared by agents and session snapshots.
pub fn definition(id: &str, version: u32, s: &AgentSpec) -> Value {
    let mut model = json!({"id": s.model.id});
    if let Some(e) = &s.model.effort {
        model["effort"] = json!({"type": e});
    }
    if let Some(sp) = &s.model.speed {
        model["speed"] = json!(sp);
    }
    json!({
        "id": id,
        "type": "agent",
        "name": s.name,
        "description": s.description,
        "system": s.system,
        "model": model,
        "tools": tools_out(&s.tools),
        "mcp_servers": s.mcp_servers.iter().map(|m| json!({"type": "url", "name": m.name, "url": m.url})).collect::<Vec<_>>(),
        // A session's snapshot shows the version it was frozen to.
        "skills": s.skills.iter().map(|k| {
            let version = k.resolved.as_ref().map_or(&k.version, |r| &r.version_id);
            json!({"type": k.source, "skill_id": k.skill_id, "version": version})
        }).collect::<Vec<_>>(),
        "multiagent": Value::Null,
        "execution_identity": s.extensions.get("execution_identity").cloned().unwrap_or_else(|| json!({"type": "service_account"})),
        "version": version,
        "backend": s.backend.to_string(),
    })
}

/// The extension field that says which configured model serves a native agent's model id
/// (`null` for agents another backend runs: their model is not the gateway's to choose).
pub fn serving_model(spec: &AgentSpec, models: &ModelCatalog) -> Value {
    if spec.backend != BackendRef::Native {
        return Value::Null;
    }
    let served = models.serving(&spec.model.id);
    json!({"name": served.name, "provider": served.provider, "model": served.model})
}

pub fn agent_out(a: &Agent, models: &ModelCatalog) -> Value {
    let mut v = definition(a.id.as_str(), a.version, &a.spec);
    v["serving_model"] = serving_model(&a.spec, models);
    v["metadata"] = json!(a.spec.metadata);
    v["created_at"] = time(a.created_at);
    v["updated_at"] = time(a.updated_at);
    v["archived_at"] = opt_time(a.archived_at);
    v
}
