//! Environments: request parsing and the response shape, with the extension fields
//! `config.sandbox_provisioning` and `config.provider`.

use std::collections::BTreeMap;

use gateway_core::Metadata;
use gateway_core::environment::{
    CloudConfig, Environment, EnvironmentConfig, EnvironmentSpec, Networking, Packages, ProviderTier, Provisioning,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Patch, check_metadata, check_text, merge_metadata, opt_time, time};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NetworkingIn {
    Unrestricted,
    Limited {
        #[serde(default)]
        allowed_hosts: Vec<String>,
        #[serde(default)]
        allow_mcp_servers: bool,
        #[serde(default)]
        allow_package_managers: bool,
    },
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct PackagesIn {
    apt: Vec<String>,
    cargo: Vec<String>,
    gem: Vec<String>,
    go: Vec<String>,
    npm: Vec<String>,
    pip: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // parsed once per request, never stored
pub enum ConfigIn {
    Cloud {
        networking: Option<NetworkingIn>,
        packages: Option<PackagesIn>,
        sandbox_provisioning: Option<String>,
        provider: Option<String>,
    },
    SelfHosted,
}

#[derive(Debug, Deserialize)]
pub struct EnvironmentCreate {
    pub name: String,
    pub config: Option<ConfigIn>,
    pub description: Option<String>,
    pub metadata: Option<Metadata>,
    pub scope: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct EnvironmentUpdate {
    pub name: Patch<String>,
    pub config: Patch<ConfigIn>,
    pub description: Patch<String>,
    pub metadata: Patch<BTreeMap<String, Option<String>>>,
    pub scope: Patch<String>,
}

fn scope_in(s: Option<String>) -> Result<Option<String>, ApiError> {
    match s.as_deref() {
        None | Some("organization") | Some("account") => Ok(s),
        Some(other) => Err(ApiError::invalid(format!("scope must be organization or account, not {other:?}"))),
    }
}

/// `default_provider` fills an omitted `provider`; the choice is stored, so a later change of
/// the gateway's default never changes an existing environment.
fn config_in(c: Option<ConfigIn>, default_provider: &ProviderTier) -> Result<EnvironmentConfig, ApiError> {
    let c =
        c.unwrap_or(ConfigIn::Cloud { networking: None, packages: None, sandbox_provisioning: None, provider: None });
    Ok(match c {
        ConfigIn::SelfHosted => EnvironmentConfig::SelfHosted,
        ConfigIn::Cloud { networking, packages, sandbox_provisioning, provider } => {
            let provisioning = match sandbox_provisioning.as_deref() {
                None | Some("on_tool_use") => Provisioning::OnToolUse,
                Some("eager") => Provisioning::Eager,
                Some(other) => {
                    return Err(ApiError::invalid(format!(
                        "config.sandbox_provisioning must be on_tool_use or eager, not {other:?}"
                    )));
                }
            };
            let provider = match provider {
                None => default_provider.clone(),
                Some(p)
                    if !p.is_empty()
                        && p.len() <= 64
                        && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
                {
                    ProviderTier(p)
                }
                Some(p) => return Err(ApiError::invalid(format!("config.provider {p:?} is not a provider name"))),
            };
            let networking = match networking {
                None | Some(NetworkingIn::Unrestricted) => Networking::Unrestricted,
                Some(NetworkingIn::Limited { allowed_hosts, allow_mcp_servers, allow_package_managers }) => {
                    Networking::Limited { allowed_hosts, allow_mcp_servers, allow_package_managers }
                }
            };
            let p = packages.unwrap_or_default();
            let packages = Packages { apt: p.apt, cargo: p.cargo, gem: p.gem, go: p.go, npm: p.npm, pip: p.pip };
            EnvironmentConfig::Cloud(Box::new(CloudConfig { networking, packages, provisioning, provider }))
        }
    })
}

impl EnvironmentCreate {
    pub fn into_spec(self, default_provider: &ProviderTier) -> Result<EnvironmentSpec, ApiError> {
        check_text("name", &self.name, 256)?;
        let metadata = self.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        Ok(EnvironmentSpec {
            name: self.name,
            description: self.description,
            metadata,
            scope: scope_in(self.scope)?,
            config: config_in(self.config, default_provider)?,
        })
    }
}

impl EnvironmentUpdate {
    pub fn apply(
        self,
        current: &EnvironmentSpec,
        default_provider: &ProviderTier,
    ) -> Result<EnvironmentSpec, ApiError> {
        let mut s = current.clone();
        match self.name {
            Patch::Keep => {}
            Patch::Clear => return Err(ApiError::invalid("name cannot be cleared")),
            Patch::Set(n) => {
                check_text("name", &n, 256)?;
                s.name = n;
            }
        }
        s.description = self.description.apply(s.description);
        match self.metadata {
            Patch::Keep => {}
            Patch::Clear => s.metadata.clear(),
            Patch::Set(m) => s.metadata = merge_metadata(&s.metadata, m)?,
        }
        match self.scope {
            Patch::Keep => {}
            Patch::Clear => s.scope = None,
            Patch::Set(v) => s.scope = scope_in(Some(v))?,
        }
        if let Patch::Set(c) = self.config {
            let next = config_in(Some(c), default_provider)?;
            if next.kind() != s.config.kind() {
                return Err(ApiError::invalid(format!(
                    "config.type cannot change from {} to {}",
                    s.config.kind(),
                    next.kind()
                ))
                .code("invalid_config_type_change"));
            }
            s.config = next;
        }
        Ok(s)
    }
}

fn config_out(c: &EnvironmentConfig) -> Value {
    match c {
        EnvironmentConfig::SelfHosted => json!({"type": "self_hosted"}),
        EnvironmentConfig::Cloud(c) => {
            let networking = match &c.networking {
                Networking::Unrestricted => json!({"type": "unrestricted"}),
                Networking::Limited { allowed_hosts, allow_mcp_servers, allow_package_managers } => json!({
                    "type": "limited",
                    "allowed_hosts": allowed_hosts,
                    "allow_mcp_servers": allow_mcp_servers,
                    "allow_package_managers": allow_package_managers,
                }),
            };
            let p = &c.packages;
            json!({
                "type": "cloud",
                "networking": networking,
                "packages": {"type": "packages", "apt": p.apt, "cargo": p.cargo, "gem": p.gem, "go": p.go, "npm": p.npm, "pip": p.pip},
                "sandbox_provisioning": match c.provisioning { Provisioning::OnToolUse => "on_tool_use", Provisioning::Eager => "eager" },
                "provider": c.provider.as_str(),
            })
        }
    }
}

pub fn environment_out(e: &Environment) -> Value {
    let mut v = json!({
        "id": e.id,
        "type": "environment",
        "name": e.spec.name,
        "description": e.spec.description,
        "metadata": e.spec.metadata,
        "config": config_out(&e.spec.config),
        "created_at": time(e.created_at),
        "updated_at": time(e.updated_at),
        "archived_at": opt_time(e.archived_at),
    });
    if let Some(scope) = &e.spec.scope {
        v["scope"] = json!(scope);
    }
    v
}
