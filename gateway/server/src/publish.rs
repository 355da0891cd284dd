//! Publishing what the config file declares: `[agents.NAME]` synced into the store, and the
//! default environments of the protocol faces (which, unlike the Managed Agents API, have no
//! notion of an environment).

use anyhow::Context;
use gateway_core::agent::{NamedToolConfig, PermissionPolicy, ToolConfig, ToolSpec};
use gateway_core::environment::ProviderTier;
use tracing::info;

use crate::config::Config;

/// Syncs `[agents.NAME]` into the store (creating or updating each one, marked with
/// `gateway.config_name`) and finds or creates the default environment of the protocol faces.
/// With no agent configured, a native agent named `default` is published.
pub async fn publish(
    config: &Config,
    coordinator: &gateway_runtime::Coordinator,
) -> anyhow::Result<gateway_services::PublishedAgents> {
    use gateway_core::agent::{AgentSpec, BUILTIN_TOOLS, BackendRef, McpServerSpec, ModelSpec};
    use gateway_services::published::CONFIG_NAME_KEY;
    use gateway_store::{AgentFilter, Order, PageRequest};

    let mut wanted = config.agents.clone();
    if wanted.is_empty() {
        wanted.insert("default".into(), crate::config::AgentConfig::default());
    }
    if config.a2a.conformance_agent {
        let conformance = crate::config::AgentConfig {
            backend: Some("builtin:conformance".into()),
            description: Some("The A2A TCK's scenarios, keyed on the messageId prefix".into()),
            ..Default::default()
        };
        wanted.entry("conformance".into()).or_insert(conformance);
    }
    let mut existing = std::collections::BTreeMap::new();
    let mut page = PageRequest::first(100, Order::Asc);
    loop {
        let p = coordinator.list_agents(&AgentFilter { include_archived: false, ..Default::default() }, &page).await?;
        for a in p.items {
            if let Some(name) = a.spec.metadata.get(CONFIG_NAME_KEY) {
                existing.insert(name.clone(), a);
            }
        }
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => break,
        }
    }
    let mut published = gateway_services::PublishedAgents::default();
    for (name, a) in &wanted {
        let backend = match &a.backend {
            Some(b) => BackendRef::parse(b).with_context(|| format!("[agents.{name}].backend"))?,
            None => BackendRef::Native,
        };
        let allow: Vec<String> = a.allow.clone().unwrap_or_else(|| vec!["read".into(), "glob".into(), "grep".into()]);
        let configs = BUILTIN_TOOLS
            .iter()
            .map(|t| NamedToolConfig {
                name: (*t).to_owned(),
                enabled: true,
                permission_policy: if allow.iter().any(|x| x == t) {
                    PermissionPolicy::AlwaysAllow
                } else {
                    PermissionPolicy::AlwaysAsk
                },
                extras: Default::default(),
            })
            .collect();
        let model = a.model.clone().unwrap_or_else(|| "claude-sonnet-4-5".into());
        let mut models = vec![model.clone()];
        for m in &a.models {
            if m.trim().is_empty() {
                anyhow::bail!("[agents.{name}].models holds an empty model id");
            }
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
        published.models.insert(name.clone(), models);
        if let Some(effort) = &a.effort {
            ModelSpec::check_effort(effort).map_err(|m| anyhow::anyhow!("[agents.{name}].{m}"))?;
        }
        let spec = AgentSpec {
            name: name.clone(),
            description: a.description.clone(),
            system: a.system.clone(),
            model: ModelSpec { id: model, effort: a.effort.clone(), speed: None },
            tools: vec![ToolSpec::Builtin {
                version: "agent_toolset_20260401".into(),
                default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAsk },
                configs,
            }]
            .into_iter()
            .chain(a.mcp_servers.keys().map(|server| mcp_toolset(server, &allow)))
            .collect(),
            mcp_servers: a
                .mcp_servers
                .iter()
                .map(|(name, url)| McpServerSpec { name: name.clone(), url: url.clone() })
                .collect(),
            skills: vec![],
            metadata: [(CONFIG_NAME_KEY.to_owned(), name.clone())].into(),
            backend,
            extensions: Default::default(),
        };
        let agent = match existing.get(name) {
            Some(current) if current.spec == spec => current.clone(),
            Some(current) => coordinator.update_agent(&current.id, current.version, spec).await?,
            None => coordinator.create_agent(spec).await.with_context(|| format!("publishing [agents.{name}]"))?,
        };
        published.agents.push((name.clone(), agent.id));
    }
    published.default = match &config.default_agent {
        Some(d) if published.get(d).is_none() => anyhow::bail!("default_agent {d:?} is not one of [agents.*]"),
        Some(d) => Some(d.clone()),
        None => published.agents.first().map(|(n, _)| n.clone()),
    };

    published.environment = Some(default_environment(config, coordinator, "default", false).await?);
    published.eager_environment = Some(default_environment(config, coordinator, "default-eager", true).await?);
    info!(agents = ?published.agents.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), default = ?published.default, "agents published");
    Ok(published)
}

/// Finds (by metadata) or creates one of the protocol faces' default environments.
async fn default_environment(
    config: &Config,
    coordinator: &gateway_runtime::Coordinator,
    name: &str,
    eager: bool,
) -> anyhow::Result<gateway_core::EnvironmentId> {
    use gateway_core::environment::{
        CloudConfig, EnvironmentConfig, EnvironmentSpec, Networking, Packages, Provisioning,
    };
    use gateway_services::published::DEFAULT_ENVIRONMENT_KEY;
    use gateway_store::{EnvironmentFilter, Order, PageRequest};
    let mut page = PageRequest::first(100, Order::Asc);
    loop {
        let p = coordinator.list_environments(&EnvironmentFilter { include_archived: false }, &page).await?;
        if let Some(e) =
            p.items.iter().find(|e| e.spec.metadata.get(DEFAULT_ENVIRONMENT_KEY).map(String::as_str) == Some(name))
        {
            return Ok(e.id.clone());
        }
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => break,
        }
    }
    let env = coordinator
        .create_environment(EnvironmentSpec {
            name: name.into(),
            description: Some("Used by editors (ACP) and A2A clients, which do not name an environment".into()),
            metadata: [(DEFAULT_ENVIRONMENT_KEY.to_owned(), name.to_owned())].into(),
            scope: None,
            config: EnvironmentConfig::Cloud(Box::new(CloudConfig {
                networking: Networking::Unrestricted,
                packages: Packages::default(),
                provisioning: if eager { Provisioning::Eager } else { Provisioning::OnToolUse },
                provider: ProviderTier(config.sandbox.clone()),
            })),
        })
        .await?;
    Ok(env.id)
}

/// The toolset of a configured MCP server: its tools ask first, but those `allow` names as
/// `<server>/<tool>`.
fn mcp_toolset(server: &str, allow: &[String]) -> ToolSpec {
    let prefix = format!("{server}/");
    let configs = allow
        .iter()
        .filter_map(|x| x.strip_prefix(&prefix))
        .map(|tool| NamedToolConfig {
            name: tool.to_owned(),
            enabled: true,
            permission_policy: PermissionPolicy::AlwaysAllow,
            extras: Default::default(),
        })
        .collect();
    ToolSpec::Mcp {
        mcp_server_name: server.to_owned(),
        default_config: ToolConfig { enabled: true, permission_policy: PermissionPolicy::AlwaysAsk },
        configs,
    }
}
