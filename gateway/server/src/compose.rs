//! Building the runtime's parts from configuration: the model client, the Session
//! Environments, the backends, and the start-up guard. The parts' settings and defaults are
//! their crates' own; what is decided here is which implementation each configured name
//! means, and where credentials come from (the environment, else the key `gateway login`
//! stored for the user; never the configuration file).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, bail};
use gateway_acp::backend::ProcessTable;
use gateway_core::agent::BackendRef;
use gateway_core::models::{ModelCatalog, ModelEntry};
use gateway_models::anthropic::{AnthropicClient, Credential};
use gateway_models::fake::FakeModel;
use gateway_models::openai::{DEFAULT_OPENAI_BASE_URL, OpenAiClient, OpenAiConfig};
use gateway_models::{ModelClient, ModelError, ModelRequest, ModelResponse, StreamEvent};
use gateway_native::{McpAccess, Models, NativeBackend, WebTools};
use gateway_runtime::{BackendRegistry, Environments};
use gateway_sandbox::providers::host_providers;
use gateway_sandbox::{ProviderKind, SandboxProvider};
use gateway_services::secrets::{KeyOrigin, SecretBox};
use gateway_store::Store;
use tracing::{info, warn};

use crate::config::{Config, ModelTable};
use crate::serve::Extensions;

/// The default model's client: `fake`, `anthropic` (credentials from the environment, else
/// from the key `gateway login` stored, `crate::login`), or the `[models]` table
/// `config.model` names.
pub fn model_client(config: &Config) -> anyhow::Result<Arc<dyn ModelClient>> {
    match config.model.as_str() {
        "fake" => Ok(Arc::new(FakeModel::new())),
        "anthropic" => {
            let credential = match (std::env::var("ANTHROPIC_API_KEY"), std::env::var("ANTHROPIC_AUTH_TOKEN")) {
                (Ok(key), _) if !key.is_empty() => Credential::ApiKey(key),
                (_, Ok(token)) if !token.is_empty() => Credential::Bearer(token),
                _ => match crate::login::stored_anthropic_key() {
                    Some(key) => Credential::ApiKey(key),
                    None => bail!(
                        "model \"anthropic\" needs ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the environment, or a \
                         key stored by `gateway login`"
                    ),
                },
            };
            let mut settings = config.anthropic.clone();
            if let Some(base_url) = std::env::var("ANTHROPIC_BASE_URL").ok().filter(|u| !u.is_empty()) {
                settings.base_url = base_url;
            }
            let client = AnthropicClient::new(settings.config(credential)).context("building the Anthropic client")?;
            Ok(Arc::new(client))
        }
        name => match config.models.get(name) {
            Some(table) => table_client(config, name, table),
            None => bail!("unknown model {name:?}"),
        },
    }
}

/// The client of the `[models.NAME]` table `table`, its credential read from the variable
/// the table names (only the variable's name ever appears in an error).
pub fn table_client(config: &Config, name: &str, table: &ModelTable) -> anyhow::Result<Arc<dyn ModelClient>> {
    let credential = |default: Option<&str>| -> anyhow::Result<Option<String>> {
        let Some(var) = table.api_key_env.as_deref().or(default) else { return Ok(None) };
        match std::env::var(var) {
            Ok(value) if !value.is_empty() => Ok(Some(value)),
            _ => bail!("[models.{name}] needs its credential in the environment variable {var}, which is not set"),
        }
    };
    Ok(match table.provider.as_str() {
        "fake" => Arc::new(FakeModel::new()),
        "anthropic" => {
            let key = credential(Some("ANTHROPIC_API_KEY"))?.unwrap_or_default();
            let mut settings = config.anthropic.clone();
            if let Some(base_url) = &table.base_url {
                settings.base_url.clone_from(base_url);
            }
            let client = AnthropicClient::new(settings.config(Credential::ApiKey(key)))
                .with_context(|| format!("[models.{name}]"))?;
            Arc::new(client)
        }
        "openai" => {
            let base_url = table.base_url.clone().unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.to_owned());
            let client = OpenAiClient::new(OpenAiConfig::new(base_url, credential(None)?))
                .with_context(|| format!("[models.{name}]"))?;
            Arc::new(client)
        }
        other => bail!("[models.{name}]: unknown provider {other:?}"),
    })
}

/// Which configured model serves each agent model id ([`ModelCatalog`]): the `[models]`
/// tables by name, and the default (`config.model`) for every other id.
pub fn model_catalog(config: &Config) -> ModelCatalog {
    let entry = |table: &ModelTable, name: &str| ModelEntry {
        provider: table.provider.clone(),
        model: Some(table.model.clone().unwrap_or_else(|| name.to_owned())),
        context_window: table.context_window,
        prices: table.prices,
    };
    let named = config.models.iter().map(|(name, table)| (name.clone(), entry(table, name))).collect();
    let default = match config.model.as_str() {
        // The built-in defaults send each agent's own id.
        builtin @ ("fake" | "anthropic") => {
            Err(ModelEntry { provider: builtin.to_owned(), model: None, context_window: None, prices: None })
        }
        table => Ok(table.to_owned()),
    };
    // Validation refused a default that names no table.
    ModelCatalog::new(named, default).unwrap_or_else(|_| ModelCatalog::single(&config.model))
}

/// The native loop's models: a client per `[models]` table, and `default` for the rest.
pub fn native_models(config: &Config, default: Arc<dyn ModelClient>) -> anyhow::Result<Models> {
    let mut clients = HashMap::new();
    for (name, table) in &config.models {
        // The default table's client is `default` (deferred in `gateway acp`).
        let client = if *name == config.model { Arc::clone(&default) } else { table_client(config, name, table)? };
        clients.insert(name.clone(), client);
    }
    Ok(Models::new(Arc::new(model_catalog(config)), clients, default))
}

/// Whether any configured model is a real one (not the offline fake).
pub fn real_model(config: &Config) -> bool {
    let catalog = model_catalog(config);
    catalog.default_model().1.provider != "fake" || catalog.named().any(|(_, m)| m.provider != "fake")
}

/// The model of `gateway acp`, which must answer its editor before a credential exists (ADR
/// 0026): built at the first need once one does (`gateway login` in the editor's terminal),
/// forgotten at `logout`. Until then a request fails as a refused credential would, and the
/// editor face refuses native sessions with ACP's auth error ([`gateway_acp::EditorAuth`]).
pub struct DeferredModel {
    config: Config,
    built: std::sync::RwLock<Option<Arc<dyn ModelClient>>>,
}

impl DeferredModel {
    pub fn new(config: &Config) -> Arc<Self> {
        Arc::new(Self { config: config.clone(), built: std::sync::RwLock::new(None) })
    }

    /// The model, built now if its credential has appeared; what is missing otherwise.
    fn ready(&self) -> Result<Arc<dyn ModelClient>, String> {
        if let Some(model) = self.built.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Ok(Arc::clone(model));
        }
        let model = model_client(&self.config).map_err(|e| format!("{e:#}"))?;
        *self.built.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&model));
        Ok(model)
    }
}

#[async_trait::async_trait]
impl ModelClient for DeferredModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.ready().map_err(not_signed_in)?.complete(request).await
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        self.ready().map_err(not_signed_in)?.stream(request, on_event).await
    }
}

fn not_signed_in(message: String) -> ModelError {
    ModelError::Authentication { status: 401, message }
}

impl gateway_acp::EditorAuth for DeferredModel {
    fn missing(&self) -> Option<String> {
        self.ready().err()
    }

    fn logout(&self) -> Result<(), String> {
        crate::login::logout(None).map_err(|e| format!("{e:#}"))?;
        *self.built.write().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

/// This host's Session Environments: `[environments]`, pinned to `host_id`, workspaces under
/// `<data_dir>/workspaces`, made by `providers` ([`sandbox_providers`]), mounting files from
/// `content` (uploaded files, skills), sealing repository tokens with `secrets`.
/// The Session Environments; unless configured, as many live at once as `fd_limit` allows.
pub fn environments(
    config: &Config,
    providers: Vec<Arc<dyn SandboxProvider>>,
    content: Arc<dyn Store>,
    secrets: SecretBox,
    fd_limit: u64,
) -> Arc<Environments> {
    let root = crate::state::workspaces_root(config);
    let mut settings = config.environments.clone();
    settings.max_live.get_or_insert(gateway_runtime::EnvironmentsConfig::live_for(fd_limit));
    Environments::new(config.host_id(), root, settings, providers, content, Some(secrets))
}

/// The sandbox providers the configured `sandbox` allows on this host. A name the sandbox
/// crate does not know (refused when the configuration loads) allows only the boundaries.
pub fn sandbox_providers(config: &Config) -> Vec<Arc<dyn SandboxProvider>> {
    let default = ProviderKind::parse(&config.sandbox).unwrap_or(ProviderKind::Namespace);
    host_providers(default, &config.environments.providers)
}

/// Every backend this process runs: native, one per ACP executor (keeping their agent
/// processes in `processes`), one per A2A remote, the conformance agent if enabled, and what
/// the build adds.
pub fn backends(
    config: &Config,
    environments: &Arc<Environments>,
    processes: &Arc<ProcessTable>,
    model: Arc<dyn ModelClient>,
    mcp: Arc<McpAccess>,
    ext: Extensions,
) -> anyhow::Result<BackendRegistry> {
    let mut backends = BackendRegistry::new();
    let web = WebTools::new(&config.web).context("[web]")?;
    let native =
        NativeBackend::new(native_models(config, model)?, Some(Arc::clone(environments)), config.native.clone())
            .with_mcp(mcp)
            .with_web(Arc::new(web));
    backends.register(BackendRef::Native, Arc::new(native));
    for (r, b) in gateway_acp::backends(&acp_executors(config), environments, processes) {
        backends.register(r, b);
    }
    for (r, b) in gateway_a2a::backends(&config.remotes.a2a.clone()) {
        backends.register(r, b);
    }
    if config.a2a.conformance_agent {
        let (r, b) = gateway_a2a::conformance_backend();
        backends.register(r, b);
    }
    for (r, b) in ext.backends {
        backends.register(r, b);
    }
    Ok(backends)
}

/// Refuses configurations that would run a real model's tool calls without a security
/// boundary, unless the operator explicitly accepted that: any `offered` provider that does
/// not [isolate](SandboxProvider::isolates) is refused (the provider says so; its name is not
/// compared here).
pub fn startup_guard(config: &Config, offered: &[Arc<dyn SandboxProvider>]) -> anyhow::Result<()> {
    if real_model(config)
        && let Some(unsafe_one) = offered.iter().find(|p| !p.isolates())
    {
        let tier = unsafe_one.tier();
        if config.allow_unsafe_local_sandbox {
            warn!(
                "running a real model with the {tier} sandbox provider, which is NOT a security boundary \
                 (GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX is set)"
            );
        } else {
            bail!(
                "refusing to start: model {:?} with the {tier} sandbox provider, which is not a security boundary; \
                 use GATEWAY_SANDBOX=namespace, or set GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX=1 to accept the risk",
                config.model
            );
        }
    }
    if offered.is_empty() {
        warn!("no sandbox provider works on this host: sessions that need a local environment will be refused");
    } else {
        info!(providers = ?offered.iter().map(|p| p.tier().0).collect::<Vec<_>>(), "sandbox providers offered");
    }
    Ok(())
}

/// The box that seals secrets at rest: the key from `GATEWAY_SECRET_KEY`, else from the key
/// file (created at first start), checked against the key that sealed this database's
/// values so that processes sharing a database never seal with different keys.
pub async fn secret_box(config: &Config, docs: &dyn gateway_store::Documents) -> anyhow::Result<SecretBox> {
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

/// `[executors.acp.*]` as the ACP adapter takes them: each with the one turn timeout.
pub fn acp_executors(config: &Config) -> std::collections::BTreeMap<String, gateway_acp::ExecutorConfig> {
    let turn_timeout = std::time::Duration::from_secs(config.acp.turn_timeout_secs);
    config
        .executors
        .acp
        .iter()
        .map(|(name, e)| (name.clone(), gateway_acp::ExecutorConfig { turn_timeout, ..e.clone() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_model_with_the_local_provider_needs_explicit_consent() {
        let local: Arc<dyn SandboxProvider> = Arc::new(gateway_sandbox::LocalProvider::new());
        let namespace: Arc<dyn SandboxProvider> = Arc::new(gateway_sandbox::NamespaceProvider::default());
        let mut c = Config { model: "anthropic".into(), ..Config::default() };
        let err = startup_guard(&c, std::slice::from_ref(&local)).unwrap_err().to_string();
        assert!(err.contains("GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX"), "{err}");
        assert!(err.contains("with the local sandbox provider, which is not a security boundary"), "{err}");
        let both = [Arc::clone(&namespace), Arc::clone(&local)];
        assert!(startup_guard(&c, &both).is_err(), "any offered provider that does not isolate is refused");
        assert!(startup_guard(&c, std::slice::from_ref(&namespace)).is_ok(), "namespace is a boundary");
        c.allow_unsafe_local_sandbox = true;
        assert!(startup_guard(&c, std::slice::from_ref(&local)).is_ok());
        let fake = Config::default();
        assert!(startup_guard(&fake, std::slice::from_ref(&local)).is_ok(), "zero-config fake + local always starts");
    }
}
