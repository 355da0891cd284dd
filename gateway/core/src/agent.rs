//! Agents: versioned definitions and their published backend.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{AgentId, JsonObject, Metadata, Timestamp};

/// Which engine runs this agent's turns. Published with the agent, frozen into each session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum BackendRef {
    /// The gateway's own model loop.
    Native,
    /// A configured ACP agent command (`[executors.acp.NAME]`).
    Acp { executor: String },
    /// A configured remote A2A agent (`[remotes.a2a.NAME]`).
    A2a { remote: String },
    /// An agent built into the gateway (e.g. the A2A conformance agent), published only by
    /// configuration; it needs no local environment.
    Builtin { name: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendRefError {
    #[error("backend {0:?} is not one of \"native\", \"acp:<executor>\", \"a2a:<remote>\"")]
    Malformed(String),
}

impl BackendRef {
    /// Parses `native`, `acp:<name>` or `a2a:<name>`; names are 1-64 of `[A-Za-z0-9_.-]`.
    pub fn parse(s: &str) -> Result<Self, BackendRefError> {
        fn name(n: &str) -> bool {
            !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        }
        match s.split_once(':') {
            None if s == "native" => Ok(BackendRef::Native),
            Some(("acp", n)) if name(n) => Ok(BackendRef::Acp { executor: n.to_owned() }),
            Some(("a2a", n)) if name(n) => Ok(BackendRef::A2a { remote: n.to_owned() }),
            Some(("builtin", n)) if name(n) => Ok(BackendRef::Builtin { name: n.to_owned() }),
            _ => Err(BackendRefError::Malformed(s.chars().take(100).collect())),
        }
    }

    pub fn is_native(&self) -> bool {
        matches!(self, BackendRef::Native)
    }

    /// The kind without its name (`native`, `acp`, `a2a`, `builtin`): a closed set, what
    /// metrics label turns with.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendRef::Native => "native",
            BackendRef::Acp { .. } => "acp",
            BackendRef::A2a { .. } => "a2a",
            BackendRef::Builtin { .. } => "builtin",
        }
    }
}

impl fmt::Display for BackendRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendRef::Native => f.write_str("native"),
            BackendRef::Acp { executor } => write!(f, "acp:{executor}"),
            BackendRef::A2a { remote } => write!(f, "a2a:{remote}"),
            BackendRef::Builtin { name } => write!(f, "builtin:{name}"),
        }
    }
}

impl TryFrom<String> for BackendRef {
    type Error = BackendRefError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<BackendRef> for String {
    fn from(b: BackendRef) -> String {
        b.to_string()
    }
}

/// The model an agent uses and how hard it thinks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub id: String,
    /// How hard the model works: one of [`ModelSpec::EFFORTS`]. The native loop asks for
    /// extended thinking with a budget that grows with it; unset, for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<String>,
}

impl ModelSpec {
    /// The efforts an agent may ask for, least first (the Managed Agents API's names).
    pub const EFFORTS: [&'static str; 5] = ["low", "medium", "high", "xhigh", "max"];

    /// Refuses an effort that is not one of [`ModelSpec::EFFORTS`], naming them.
    pub fn check_effort(effort: &str) -> Result<(), String> {
        if Self::EFFORTS.contains(&effort) {
            return Ok(());
        }
        Err(format!("effort must be one of {}, not {effort:?}", Self::EFFORTS.join(", ")))
    }
}

/// Whether a tool call runs at once or waits for a client's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPolicy {
    AlwaysAllow,
    AlwaysAsk,
    /// Accepted and stored; evaluated as `AlwaysAsk` (the conservative reading) until a
    /// classifier exists. See docs/adr.
    Auto,
}

impl PermissionPolicy {
    /// Whether a call under this policy must be approved before it runs.
    pub fn requires_approval(self) -> bool {
        !matches!(self, PermissionPolicy::AlwaysAllow)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolConfig {
    pub enabled: bool,
    pub permission_policy: PermissionPolicy,
}

/// One entry of a toolset's per-tool configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedToolConfig {
    pub name: String,
    pub enabled: bool,
    pub permission_policy: PermissionPolicy,
    /// Tool-specific settings the gateway stores and returns but does not interpret
    /// (e.g. `web_fetch` domain lists).
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub extras: JsonObject,
}

/// The built-in tools of `agent_toolset_20260401`.
pub const BUILTIN_TOOLS: [&str; 8] = ["bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolSpec {
    /// The built-in toolset; `version` is its published name, e.g. `agent_toolset_20260401`.
    Builtin { version: String, default_config: ToolConfig, configs: Vec<NamedToolConfig> },
    /// Tools served by an MCP server declared in `mcp_servers`.
    Mcp { mcp_server_name: String, default_config: ToolConfig, configs: Vec<NamedToolConfig> },
    /// A tool the client executes; calls park the session until the client answers.
    Custom { name: String, description: String, input_schema: JsonObject },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerSpec {
    pub name: String,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillRef {
    /// `anthropic` or `custom`.
    pub source: String,
    pub skill_id: String,
    pub version: String,
    /// The version this reference named when a session was created (`latest` resolved),
    /// frozen into the session's agent snapshot; `None` in agent definitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedSkill>,
}

/// A skill version as a session uses it: placed at `skills/<name>/` in its workspace and
/// described to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedSkill {
    pub version_id: String,
    pub name: String,
    pub description: String,
}

/// Everything a client defines about an agent; one immutable value per version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    pub name: String,
    pub description: Option<String>,
    pub system: Option<String>,
    pub model: ModelSpec,
    pub tools: Vec<ToolSpec>,
    pub mcp_servers: Vec<McpServerSpec>,
    pub skills: Vec<SkillRef>,
    pub metadata: Metadata,
    pub backend: BackendRef,
    /// Definition parts the core does not interpret but must keep per version (e.g. a
    /// multi-agent roster, an execution identity). Opaque by design.
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub extensions: JsonObject,
}

/// The built-in tools that change nothing (in the workspace or elsewhere): what a read-only
/// session keeps, and what an "ask before changes" session runs unasked.
pub const READING_TOOLS: [&str; 5] = ["read", "glob", "grep", "web_fetch", "web_search"];

/// A client's choice of how much a session's agent may do unasked, applied over the tool
/// settings of its definition (an editor's permission option; ADR 0027). A preset changes
/// policies and may switch tools off; it never offers a tool the definition does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPreset {
    /// The agent's own settings.
    AsDefined,
    /// Reading tools run at once; every other tool (shell, edits, MCP) asks.
    AskBeforeChanges,
    /// Every offered tool runs without asking.
    AllowAll,
    /// Only the reading tools are offered (shell, edits and MCP tools are switched off).
    ReadOnly,
}

impl PermissionPreset {
    pub const ALL: [PermissionPreset; 4] = [Self::AsDefined, Self::AskBeforeChanges, Self::AllowAll, Self::ReadOnly];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AsDefined => "as_defined",
            Self::AskBeforeChanges => "ask_before_changes",
            Self::AllowAll => "allow_all",
            Self::ReadOnly => "read_only",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// A tool's setting under this preset, from its setting in the definition.
    fn apply(self, reads: bool, defined: ToolConfig) -> ToolConfig {
        let policy = match self {
            Self::AsDefined => return defined,
            Self::AllowAll => PermissionPolicy::AlwaysAllow,
            Self::AskBeforeChanges | Self::ReadOnly if reads => PermissionPolicy::AlwaysAllow,
            Self::AskBeforeChanges => PermissionPolicy::AlwaysAsk,
            Self::ReadOnly => return ToolConfig { enabled: false, ..defined },
        };
        ToolConfig { enabled: defined.enabled, permission_policy: policy }
    }
}

/// How a built-in tool is configured for an agent, if it is offered at all./// How a built-in tool is configured for an agent, if it is offered at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAvailability {
    Enabled(PermissionPolicy),
    Disabled,
}

impl AgentSpec {
    /// Resolves a built-in tool's configuration: its own entry, else the toolset default;
    /// `Disabled` when the agent has no built-in toolset or `name` is not a built-in tool
    /// (a custom tool's name never picks up the toolset's default).
    pub fn builtin_tool(&self, name: &str) -> ToolAvailability {
        if !BUILTIN_TOOLS.contains(&name) {
            return ToolAvailability::Disabled;
        }
        self.tools
            .iter()
            .find_map(|t| match t {
                ToolSpec::Builtin { default_config, configs, .. } => Some(entry(*default_config, configs, name)),
                _ => None,
            })
            .unwrap_or(ToolAvailability::Disabled)
    }

    /// The built-in tools this agent may call.
    pub fn enabled_builtin_tools(&self) -> Vec<(&'static str, PermissionPolicy)> {
        BUILTIN_TOOLS
            .iter()
            .filter_map(|n| match self.builtin_tool(n) {
                ToolAvailability::Enabled(p) => Some((*n, p)),
                ToolAvailability::Disabled => None,
            })
            .collect()
    }

    /// The MCP servers whose tools this agent offers: those an `Mcp` toolset names, in the
    /// toolsets' order (a server without a toolset is declared, not used).
    pub fn mcp_servers_in_use(&self) -> Vec<&McpServerSpec> {
        self.tools
            .iter()
            .filter_map(|t| match t {
                ToolSpec::Mcp { mcp_server_name, .. } => self.mcp_servers.iter().find(|s| &s.name == mcp_server_name),
                _ => None,
            })
            .collect()
    }

    /// Resolves an MCP tool's configuration: its own entry in its server's toolset, else the
    /// toolset's default (which the API sets to `always_ask`, so a tool a server adds later
    /// never runs unapproved); `Disabled` when no toolset names the server.
    pub fn mcp_tool(&self, server: &str, name: &str) -> ToolAvailability {
        self.tools
            .iter()
            .find_map(|t| match t {
                ToolSpec::Mcp { mcp_server_name, default_config, configs } if mcp_server_name == server => {
                    Some(entry(*default_config, configs, name))
                }
                _ => None,
            })
            .unwrap_or(ToolAvailability::Disabled)
    }

    /// This definition as a session runs it under `preset`: every built-in tool gets its own
    /// entry (its defined setting with the preset applied, its extras kept), and each MCP
    /// toolset's default and entries the preset's setting for tools that change things (an
    /// MCP tool may do anything).
    pub fn with_preset(mut self, preset: PermissionPreset) -> AgentSpec {
        if preset == PermissionPreset::AsDefined {
            return self;
        }
        for tool in &mut self.tools {
            match tool {
                ToolSpec::Builtin { default_config, configs, .. } => {
                    let mut entries = Vec::with_capacity(BUILTIN_TOOLS.len());
                    for name in BUILTIN_TOOLS {
                        let own = configs.iter().find(|c| c.name == name);
                        let defined = match entry(*default_config, configs, name) {
                            ToolAvailability::Enabled(policy) => {
                                ToolConfig { enabled: true, permission_policy: policy }
                            }
                            ToolAvailability::Disabled => {
                                ToolConfig { enabled: false, permission_policy: default_config.permission_policy }
                            }
                        };
                        let set = preset.apply(READING_TOOLS.contains(&name), defined);
                        entries.push(NamedToolConfig {
                            name: name.to_owned(),
                            enabled: set.enabled,
                            permission_policy: set.permission_policy,
                            extras: own.map(|c| c.extras.clone()).unwrap_or_default(),
                        });
                    }
                    *configs = entries;
                }
                ToolSpec::Mcp { default_config, configs, .. } => {
                    *default_config = preset.apply(false, *default_config);
                    for c in configs.iter_mut() {
                        let set = preset
                            .apply(false, ToolConfig { enabled: c.enabled, permission_policy: c.permission_policy });
                        (c.enabled, c.permission_policy) = (set.enabled, set.permission_policy);
                    }
                }
                ToolSpec::Custom { .. } => {}
            }
        }
        self
    }

    pub fn custom_tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| matches!(t, ToolSpec::Custom { name: n, .. } if n == name))
    }
}

/// A tool of a toolset: its own entry, else the toolset's default.
fn entry(default: ToolConfig, configs: &[NamedToolConfig], name: &str) -> ToolAvailability {
    let cfg = configs
        .iter()
        .find(|c| c.name == name)
        .map(|c| ToolConfig { enabled: c.enabled, permission_policy: c.permission_policy })
        .unwrap_or(default);
    if cfg.enabled { ToolAvailability::Enabled(cfg.permission_policy) } else { ToolAvailability::Disabled }
}

/// Per-session replacements for parts of an agent version; `None` inherits the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentOverrides {
    pub model: Option<ModelSpec>,
    pub system: Option<Option<String>>,
    pub tools: Option<Vec<ToolSpec>>,
    pub mcp_servers: Option<Vec<McpServerSpec>>,
    pub skills: Option<Vec<SkillRef>>,
}

impl AgentOverrides {
    pub fn apply(&self, spec: &mut AgentSpec) {
        if let Some(m) = &self.model {
            spec.model = m.clone();
        }
        if let Some(s) = &self.system {
            spec.system = s.clone();
        }
        if let Some(t) = &self.tools {
            spec.tools = t.clone();
        }
        if let Some(m) = &self.mcp_servers {
            spec.mcp_servers = m.clone();
        }
        if let Some(s) = &self.skills {
            spec.skills = s.clone();
        }
    }
}

/// One version of an agent, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub id: AgentId,
    pub version: u32,
    pub spec: AgentSpec,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_builtin_names_resolve_through_the_toolset() {
        let mut a = AgentSpec {
            name: "a".into(),
            description: None,
            system: None,
            model: ModelSpec { id: "m".into(), effort: None, speed: None },
            tools: vec![ToolSpec::Builtin {
                version: "agent_toolset_20260401".into(),
                default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAllow },
                configs: vec![NamedToolConfig {
                    name: "bash".into(),
                    enabled: true,
                    permission_policy: PermissionPolicy::AlwaysAsk,
                    extras: JsonObject::new(),
                }],
            }],
            mcp_servers: vec![],
            skills: vec![],
            metadata: Default::default(),
            backend: BackendRef::Native,
            extensions: JsonObject::new(),
        };
        assert_eq!(a.builtin_tool("bash"), ToolAvailability::Enabled(PermissionPolicy::AlwaysAsk));
        assert_eq!(a.builtin_tool("read"), ToolAvailability::Enabled(PermissionPolicy::AlwaysAllow));
        assert_eq!(a.builtin_tool("lookup"), ToolAvailability::Disabled, "a custom tool's name");
        a.tools.clear();
        assert_eq!(a.builtin_tool("read"), ToolAvailability::Disabled, "no toolset, no built-ins");
    }

    #[test]
    fn presets_change_policies_and_never_offer_what_the_definition_does_not() {
        let allow = ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAllow };
        let named = |name: &str, enabled: bool, policy| NamedToolConfig {
            name: name.into(),
            enabled,
            permission_policy: policy,
            extras: JsonObject::new(),
        };
        let mut fetch = named("web_fetch", true, PermissionPolicy::AlwaysAsk);
        fetch.extras.insert("allowed_domains".into(), serde_json::json!(["example.com"]));
        let defined = AgentSpec {
            name: "a".into(),
            description: None,
            system: None,
            model: ModelSpec { id: "m".into(), effort: None, speed: None },
            tools: vec![
                ToolSpec::Builtin {
                    version: "agent_toolset_20260401".into(),
                    default_config: allow,
                    configs: vec![named("grep", false, PermissionPolicy::AlwaysAllow), fetch],
                },
                ToolSpec::Mcp {
                    mcp_server_name: "s".into(),
                    default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAsk },
                    configs: vec![named("t", true, PermissionPolicy::AlwaysAllow)],
                },
            ],
            mcp_servers: vec![McpServerSpec { name: "s".into(), url: "https://s/mcp".into() }],
            skills: vec![],
            metadata: Default::default(),
            backend: BackendRef::Native,
            extensions: JsonObject::new(),
        };
        use PermissionPolicy::{AlwaysAllow as Allow, AlwaysAsk as Ask};
        use ToolAvailability::{Disabled, Enabled};
        let rows = [
            // (preset, bash, read, grep (disabled in the definition), web_fetch, mcp t, mcp other)
            (
                PermissionPreset::AsDefined,
                Enabled(Allow),
                Enabled(Allow),
                Disabled,
                Enabled(Ask),
                Enabled(Allow),
                Enabled(Ask),
            ),
            (
                PermissionPreset::AskBeforeChanges,
                Enabled(Ask),
                Enabled(Allow),
                Disabled,
                Enabled(Allow),
                Enabled(Ask),
                Enabled(Ask),
            ),
            (
                PermissionPreset::AllowAll,
                Enabled(Allow),
                Enabled(Allow),
                Disabled,
                Enabled(Allow),
                Enabled(Allow),
                Enabled(Allow),
            ),
            (PermissionPreset::ReadOnly, Disabled, Enabled(Allow), Disabled, Enabled(Allow), Disabled, Disabled),
        ];
        for (preset, bash, read, grep, web, t, other) in rows {
            let a = defined.clone().with_preset(preset);
            let got = (
                a.builtin_tool("bash"),
                a.builtin_tool("read"),
                a.builtin_tool("grep"),
                a.builtin_tool("web_fetch"),
                a.mcp_tool("s", "t"),
                a.mcp_tool("s", "other"),
            );
            assert_eq!(got, (bash, read, grep, web, t, other), "{preset:?}");
            let kept = a.tools.iter().find_map(|t| match t {
                ToolSpec::Builtin { configs, .. } => configs.iter().find(|c| c.name == "web_fetch").cloned(),
                _ => None,
            });
            assert_eq!(kept.map(|c| c.extras.len()), Some(1), "{preset:?} keeps a tool's extras");
            assert_eq!(PermissionPreset::parse(preset.as_str()), Some(preset));
        }
    }

    #[test]
    fn backend_refs_parse_and_print() {
        assert_eq!(BackendRef::parse("native").unwrap(), BackendRef::Native);
        assert_eq!(BackendRef::parse("acp:claude").unwrap(), BackendRef::Acp { executor: "claude".into() });
        assert_eq!(BackendRef::parse("a2a:echo-1").unwrap().to_string(), "a2a:echo-1");
        for bad in ["", "acp:", "a2a", "grpc:x", "acp:a b", "native:x"] {
            assert!(BackendRef::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
