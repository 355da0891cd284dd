//! Building the runtime's parts from configuration: the model client, the sandbox providers,
//! the Session Environments, the native backend, and the start-up guard.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use gateway_core::environment::ProviderTier;
use gateway_models::ModelClient;
use gateway_models::anthropic::{AnthropicClient, AnthropicConfig, Credential};
use gateway_models::fake::FakeModel;
use gateway_runtime::secrets::{KeyOrigin, SecretBox};
use gateway_runtime::{Environments, EnvironmentsConfig};
use gateway_sandbox::local::LocalProvider;
use gateway_sandbox::namespace::NamespaceProvider;
use gateway_sandbox::{Limits, SandboxProvider};
use tracing::{info, warn};

use crate::config::Config;

/// The model client `config.model` names. Credentials come from the environment only.
pub fn model_client(config: &Config) -> anyhow::Result<Arc<dyn ModelClient>> {
    match config.model.as_str() {
        "fake" => Ok(Arc::new(FakeModel::new())),
        "anthropic" => {
            let credential = match (std::env::var("ANTHROPIC_API_KEY"), std::env::var("ANTHROPIC_AUTH_TOKEN")) {
                (Ok(key), _) if !key.is_empty() => Credential::ApiKey(key),
                (_, Ok(token)) if !token.is_empty() => Credential::Bearer(token),
                _ => bail!("model \"anthropic\" needs ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the environment"),
            };
            let base_url = std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| config.anthropic.base_url.clone());
            let mut c = AnthropicConfig::new(base_url, credential);
            c.max_retries = config.anthropic.max_retries;
            c.request_timeout = Duration::from_secs(config.anthropic.request_timeout_secs);
            Ok(Arc::new(AnthropicClient::new(c).context("building the Anthropic client")?))
        }
        other => bail!("unknown model {other:?}"),
    }
}

/// The providers this host may offer: `local` only when it is the configured sandbox (it is
/// not a security boundary), `namespace` always (when bubblewrap works here).
///
/// What a provider cannot do here is said once, at start-up: `local` without a cgroup cannot
/// stop a `setsid` child at session delete; `namespace` without slirp4netns fails the turns of
/// sessions whose environment allows networking.
pub fn providers(config: &Config) -> Vec<Arc<dyn SandboxProvider>> {
    let mut out: Vec<Arc<dyn SandboxProvider>> = Vec::new();
    if config.sandbox == "local" {
        let local = LocalProvider::new();
        if let Err(why) = local.cgroups() {
            warn!(
                reason = why,
                "the local sandbox cannot hold its processes in a cgroup here: a process a command detaches with \
                 setsid() survives its session's delete, and nothing bounds how many a session starts \
                 (run as root or with a delegated cgroup, or use the namespace sandbox)"
            );
        }
        out.push(Arc::new(local));
    }
    let namespace = NamespaceProvider::new(PathBuf::from(&config.environments.bwrap));
    if let Err(e) = namespace.networking() {
        warn!(error = %e, "namespace sandboxes of environments that allow networking will fail their turns");
    }
    out.push(Arc::new(namespace));
    out
}

pub fn environments(config: &Config) -> Arc<Environments> {
    let e = &config.environments;
    let limits = Limits {
        wall_clock: Duration::from_secs(e.command_timeout_secs),
        max_wall_clock: Duration::from_secs(e.max_command_timeout_secs.max(e.command_timeout_secs)),
        output_cap: e.output_cap_bytes,
        ..Limits::default()
    };
    Environments::new(
        EnvironmentsConfig {
            host: config.host_id(),
            root: crate::state::workspaces_root(config),
            limits,
            idle: Duration::from_secs(e.idle_secs.max(1)),
        },
        providers(config),
    )
}

/// Refuses configurations that would run a real model's tool calls without a security
/// boundary, unless the operator explicitly accepted that.
pub fn startup_guard(config: &Config, offered: &[ProviderTier]) -> anyhow::Result<()> {
    let real_model = config.model != "fake";
    let local = offered.contains(&ProviderTier::local());
    if real_model && local {
        if config.allow_unsafe_local_sandbox {
            warn!(
                "running a real model with the local sandbox provider, which is NOT a security boundary \
                 (GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX is set)"
            );
        } else {
            bail!(
                "refusing to start: model {:?} with the local sandbox provider, which is not a security boundary; \
                 use GATEWAY_SANDBOX=namespace, or set GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX=1 to accept the risk",
                config.model
            );
        }
    }
    if offered.is_empty() {
        warn!("no sandbox provider works on this host: sessions that need a local environment will be refused");
    } else {
        info!(providers = ?offered.iter().map(|p| p.as_str()).collect::<Vec<_>>(), "sandbox providers offered");
    }
    Ok(())
}

/// The box that seals secrets at rest: the key from `GATEWAY_SECRET_KEY`, else from the key
/// file (created at first start), checked against the key that sealed this database's
/// values so that processes sharing a database never seal with different keys.
pub async fn secret_box(config: &Config, docs: &dyn gateway_runtime::Documents) -> anyhow::Result<SecretBox> {
    let path = config.secret_key_path();
    let (secrets, origin) =
        SecretBox::load(Config::secret_key_from_env().as_deref(), &path).context("loading the secret key")?;
    match &origin {
        KeyOrigin::Environment => info!(key_id = secrets.key_id(), "secret key from GATEWAY_SECRET_KEY"),
        KeyOrigin::File(p) => info!(key_id = secrets.key_id(), path = %p.display(), "secret key from its file"),
        KeyOrigin::Created(p) => warn!(
            key_id = secrets.key_id(),
            path = %p.display(),
            "created a new secret key; back it up: secrets sealed with it cannot be read without it"
        ),
    }
    secrets.verify_for(docs).await.context("checking the secret key")?;
    Ok(secrets)
}

/// `[executors.acp.*]` as the ACP adapter takes them.
pub fn acp_executors(config: &Config) -> std::collections::BTreeMap<String, gateway_acp::ExecutorConfig> {
    config
        .executors
        .acp
        .iter()
        .map(|(name, e)| {
            let executor = gateway_acp::ExecutorConfig {
                command: e.command.clone(),
                args: e.args.clone(),
                env: e.env.clone(),
                turn_timeout: Duration::from_secs(config.acp.turn_timeout_secs),
            };
            (name.clone(), executor)
        })
        .collect()
}

/// `[remotes.a2a.*]` as the A2A adapter takes them.
pub fn a2a_remotes(config: &Config) -> std::collections::BTreeMap<String, gateway_a2a::RemoteConfig> {
    config
        .remotes
        .a2a
        .iter()
        .map(|(name, r)| (name.clone(), gateway_a2a::RemoteConfig { url: r.url.clone(), auth: r.auth.clone() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_model_with_the_local_provider_needs_explicit_consent() {
        let mut c = Config { model: "anthropic".into(), ..Config::default() };
        let err = startup_guard(&c, &[ProviderTier::local()]).unwrap_err().to_string();
        assert!(err.contains("GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX"), "{err}");
        assert!(startup_guard(&c, &[ProviderTier::namespace()]).is_ok(), "namespace is a boundary");
        c.allow_unsafe_local_sandbox = true;
        assert!(startup_guard(&c, &[ProviderTier::local()]).is_ok());
        let fake = Config::default();
        assert!(startup_guard(&fake, &[ProviderTier::local()]).is_ok(), "zero-config fake + local always starts");
    }
}
