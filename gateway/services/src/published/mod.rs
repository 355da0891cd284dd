//! Agents published by configuration (`[agents.NAME]`), by name.
//!
//! Editors (ACP) and other agents (A2A) address agents by name, and the config file is where
//! operators publish them. The server syncs each `[agents.NAME]` into the store at start-up
//! (an agent carrying the metadata key [`CONFIG_NAME_KEY`]) and hands this map to adapters.

use std::collections::BTreeMap;

use gateway_core::{AgentId, EnvironmentId};

/// Metadata key marking an agent as published by the config file under this name.
pub const CONFIG_NAME_KEY: &str = "gateway.config_name";
/// Metadata key marking the environment protocol faces use when a client names none.
pub const DEFAULT_ENVIRONMENT_KEY: &str = "gateway.default_environment";

#[derive(Debug, Clone, Default)]
pub struct PublishedAgents {
    /// `(name, agent id)`, in config order.
    pub agents: Vec<(String, AgentId)>,
    /// The name of the agent used when a client names none.
    pub default: Option<String>,
    /// The environment sessions get when their protocol has no notion of one (ACP, A2A):
    /// `on_tool_use` provisioning ...
    pub environment: Option<EnvironmentId>,
    /// ... and an `eager` one, for agents whose process needs its environment before it
    /// starts (ACP executors; placement refuses them `on_tool_use`).
    pub eager_environment: Option<EnvironmentId>,
    /// The models each published agent's sessions may run on, by agent name, its own model
    /// first (`[agents.NAME] model` and `models`): what an editor may choose between.
    pub models: BTreeMap<String, Vec<String>>,
}

impl PublishedAgents {
    pub fn get(&self, name: &str) -> Option<&AgentId> {
        self.agents.iter().find(|(n, _)| n == name).map(|(_, id)| id)
    }

    /// The default environment suited to a backend.
    pub fn environment_for(&self, backend: &gateway_core::agent::BackendRef) -> Option<&EnvironmentId> {
        match backend {
            gateway_core::agent::BackendRef::Acp { .. } => self.eager_environment.as_ref(),
            _ => self.environment.as_ref(),
        }
    }

    /// The agent a client gets by default: the configured default, else the first.
    pub fn default_agent(&self) -> Option<(&str, &AgentId)> {
        match &self.default {
            Some(d) => self.agents.iter().find(|(n, _)| n == d).map(|(n, id)| (n.as_str(), id)),
            None => self.agents.first().map(|(n, id)| (n.as_str(), id)),
        }
    }
}
