//! Environments: where local work may happen and how its sandbox is provisioned.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{EnvironmentId, Metadata, Timestamp};

/// When a session's local environment is realized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Provisioning {
    /// At the first local tool call (or earlier when the session's inputs demand it).
    #[default]
    OnToolUse,
    /// Before the first step of the first run.
    Eager,
}

/// A sandbox provider tier, e.g. `local` or `namespace`. Open-ended so a deployment can offer
/// providers the core does not know by name; placement compares tiers by equality only, and
/// never substitutes one for another. The core names no provider: which tiers exist, and what
/// each can do, is the sandbox crate's (`gateway_sandbox::providers`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderTier(pub String);

impl ProviderTier {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProviderTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Networking {
    #[default]
    Unrestricted,
    Limited {
        allowed_hosts: Vec<String>,
        allow_mcp_servers: bool,
        allow_package_managers: bool,
    },
}

impl Networking {
    /// Whether a sandbox may reach the network at all.
    pub fn any_network(&self) -> bool {
        match self {
            Networking::Unrestricted => true,
            Networking::Limited { allowed_hosts, allow_mcp_servers, allow_package_managers } => {
                !allowed_hosts.is_empty() || *allow_mcp_servers || *allow_package_managers
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Packages {
    pub apt: Vec<String>,
    pub cargo: Vec<String>,
    pub gem: Vec<String>,
    pub go: Vec<String>,
    pub npm: Vec<String>,
    pub pip: Vec<String>,
}

impl Packages {
    pub fn is_empty(&self) -> bool {
        self.apt.is_empty()
            && self.cargo.is_empty()
            && self.gem.is_empty()
            && self.go.is_empty()
            && self.npm.is_empty()
            && self.pip.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudConfig {
    pub networking: Networking,
    pub packages: Packages,
    pub provisioning: Provisioning,
    pub provider: ProviderTier,
}

/// Where a self-hosted session's executor stands (DESIGN §5a). Changes are committed as
/// `EnvironmentConnection` events and kept on the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionStatus {
    /// Compute was asked for; no executor holds the session's work item yet.
    Pending,
    /// An executor holds the work item and renews its lease.
    Connected,
    /// The executor stopped, or its lease lapsed.
    Disconnected,
    /// No executor came within the connect timeout.
    Failed,
}

impl ConnectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionStatus::Pending => "pending",
            ConnectionStatus::Connected => "connected",
            ConnectionStatus::Disconnected => "disconnected",
            ConnectionStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Connected, Self::Disconnected, Self::Failed].into_iter().find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EnvironmentConfig {
    /// The gateway's own sandbox providers run local work.
    Cloud(Box<CloudConfig>),
    /// An external executor connects and runs tools; the gateway never realizes a sandbox.
    SelfHosted,
}

impl EnvironmentConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            EnvironmentConfig::Cloud(_) => "cloud",
            EnvironmentConfig::SelfHosted => "self_hosted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentSpec {
    pub name: String,
    pub description: Option<String>,
    pub metadata: Metadata,
    pub scope: Option<String>,
    pub config: EnvironmentConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub id: EnvironmentId,
    pub spec: EnvironmentSpec,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
}
