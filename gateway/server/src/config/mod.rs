//! Configuration: a TOML file, every key overridable by `GATEWAY_*` environment variables
//! (nested keys with `__`, e.g. `GATEWAY_WORKERS__MAX_TURNS=8`). See the README for the reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use gateway_managed_agents::webhooks::{WebhookConfig, WebhookDelivery};
use gateway_models::anthropic::AnthropicSettings;
use gateway_native::{McpConfig, NativeConfig};
use gateway_runtime::{AdmissionLimits, EnvironmentsConfig, WorkerConfig};
use gateway_sandbox::ProviderKind;
use gateway_services::files::FilesConfig;
use gateway_services::web::WebConfig;
use serde::{Deserialize, Serialize};

use crate::listen::HttpLimits;

mod strict;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address the HTTP server binds.
    pub listen: String,
    /// `sqlite:PATH` (embedded default) or `postgres://...`.
    pub database_url: String,
    /// The default model of the native backend, serving every agent model id no `[models]`
    /// table names: `fake` (offline, deterministic), `anthropic` (the agent's id sent to the
    /// Messages API), or the name of a `[models.NAME]` table.
    pub model: String,
    /// `[models.NAME]`: the models agents select by NAME (their `model`), each with its
    /// provider, upstream id, credential variable, context window and list prices.
    pub models: BTreeMap<String, ModelTable>,
    /// Default sandbox provider tier offered to environments: a name
    /// [`ProviderKind::parse`] knows (`local` or `namespace`).
    pub sandbox: String,
    /// The URL clients reach this gateway at (behind a proxy); defaults to `http://<listen>`.
    pub public_url: Option<String>,
    /// Lets a real model run with the `local` provider, which is not a security boundary.
    #[serde(deserialize_with = "flag")]
    pub allow_unsafe_local_sandbox: bool,
    /// Where the gateway keeps local state other than the database (session workspaces, the
    /// secret key file). Created private (0700).
    pub data_dir: String,
    /// The file holding the key that seals secrets at rest (base64 of 32 bytes); default
    /// `<data_dir>/secret.key`, created at first start. `GATEWAY_SECRET_KEY` (the key
    /// itself, base64) wins over it; it is read from the environment only, never from a file.
    pub secret_key_file: Option<String>,
    /// Names this process in leases and logs; default `<hostname>-<pid>`.
    pub instance_name: Option<String>,
    /// The host identity Session Environments are pinned to; default the hostname.
    pub host_id: Option<String>,
    /// Send and use wake-up hints (polling stays authoritative either way).
    pub wakeups: bool,
    /// `[workers]`, `[environments]`, `[native]`, `[anthropic]`: the components' own
    /// configuration types, with their own defaults; this file only reads them.
    pub workers: WorkerConfig,
    /// `[admission]`: the load-shedding bounds (requests in flight, queued runs).
    pub admission: AdmissionLimits,
    /// `[files]`: what uploads may be (`max_bytes`).
    pub files: FilesConfig,
    pub environments: EnvironmentsConfig,
    pub native: NativeConfig,
    /// `[mcp]`: how agents' MCP servers are reached (`allow_private_servers`, deadlines).
    pub mcp: McpConfig,
    /// `[web]`: `web_fetch` (private targets, bounds) and `web_search` (its provider).
    pub web: WebConfig,
    pub anthropic: AnthropicSettings,
    pub log: LogConfig,
    /// `[telemetry]`: OpenTelemetry traces (off unless an OTLP endpoint is set).
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// Agents published from this file, by name.
    pub agents: BTreeMap<String, AgentConfig>,
    /// The agent editors and A2A clients get when they name none (default: the first).
    pub default_agent: Option<String>,
    pub executors: ExecutorsConfig,
    pub remotes: RemotesConfig,
    pub acp: AcpConfig,
    pub a2a: A2aConfig,
    /// `[[webhooks]]`: the operator's webhook endpoints (any address, private included).
    pub webhooks: Vec<WebhookConfig>,
    /// Lets webhook endpoints registered through the API reach private and loopback addresses.
    #[serde(deserialize_with = "flag")]
    pub allow_private_webhook_targets: bool,
    /// `[webhook_delivery]`: retry pacing.
    pub webhook_delivery: WebhookDelivery,
    /// `[http]`: deadlines and connection caps of the HTTP server.
    pub http: HttpLimits,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            database_url: "sqlite://data/gateway.db".into(),
            model: "fake".into(),
            models: BTreeMap::new(),
            sandbox: ProviderKind::Local.as_str().into(),
            public_url: None,
            allow_unsafe_local_sandbox: false,
            data_dir: "data".into(),
            secret_key_file: None,
            instance_name: None,
            host_id: None,
            wakeups: true,
            workers: WorkerConfig::default(),
            admission: AdmissionLimits::default(),
            files: FilesConfig::default(),
            environments: EnvironmentsConfig::default(),
            native: NativeConfig::default(),
            mcp: McpConfig::default(),
            web: WebConfig::default(),
            anthropic: AnthropicSettings::default(),
            log: LogConfig::default(),
            telemetry: crate::telemetry::TelemetryConfig::default(),
            agents: BTreeMap::new(),
            default_agent: None,
            executors: ExecutorsConfig::default(),
            remotes: RemotesConfig::default(),
            acp: AcpConfig::default(),
            a2a: A2aConfig::default(),
            webhooks: Vec::new(),
            allow_private_webhook_targets: false,
            webhook_delivery: WebhookDelivery::default(),
            http: HttpLimits::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    /// `auto` (JSON unless stderr is a terminal), `json` or `text`.
    pub format: String,
    /// A tracing filter, e.g. `info` or `gateway_runtime=debug,info`; `GATEWAY_LOG` overrides.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: "auto".into(), level: "info".into() }
    }
}

/// `[models.NAME]`: a model agents select by NAME.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(default)]
pub struct ModelTable {
    /// `anthropic` (the Messages API), `openai` (Chat Completions: OpenAI, vLLM, Ollama,
    /// LiteLLM, OpenRouter...) or `fake`.
    pub provider: String,
    /// The provider's endpoint; default its public one (`https://api.anthropic.com`,
    /// `https://api.openai.com/v1`).
    pub base_url: Option<String>,
    /// The name of the environment variable holding the credential (never the credential:
    /// credentials come from the environment only). Default `ANTHROPIC_API_KEY` for
    /// `anthropic`; none for `openai` (a local server needs none).
    pub api_key_env: Option<String>,
    /// The id sent upstream; default NAME.
    pub model: Option<String>,
    /// Tokens the model reads at most; conversations are compacted to stay under it.
    pub context_window: Option<u64>,
    /// List USD per million `input`, `output`, `cache_write` and `cache_read` tokens: what
    /// `list_cost` and budgets count. Without prices a session's cost is unknown.
    pub prices: Option<gateway_core::models::Prices>,
}

impl ModelTable {
    pub const PROVIDERS: [&'static str; 3] = ["anthropic", "openai", "fake"];

    /// What can be checked without building the client (which checks `base_url`).
    fn check(&self, name: &str) -> Result<(), String> {
        if name == gateway_core::models::DEFAULT_NAME {
            return Err(format!("a model table cannot be named {name:?}: it names the default model"));
        }
        if !Self::PROVIDERS.contains(&self.provider.as_str()) {
            return Err(format!("provider must be one of {}, not {:?}", Self::PROVIDERS.join(", "), self.provider));
        }
        if let Some(var) = &self.api_key_env {
            let valid = !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!("api_key_env must name an environment variable (letters, digits, _), not {var:?}"));
            }
        }
        if self.model.as_deref() == Some("") {
            return Err("model must not be empty".into());
        }
        if self.context_window == Some(0) {
            return Err("context_window must be positive".into());
        }
        if let Some(p) = &self.prices {
            p.check()?;
        }
        Ok(())
    }
}

/// `[agents.NAME]`: an agent published from configuration.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct AgentConfig {
    /// `native` (default), `acp:<executor>`, `a2a:<remote>`.
    pub backend: Option<String>,
    /// The model id (native agents); default `claude-sonnet-4-5`.
    pub model: Option<String>,
    /// Other models an editor may switch this agent's sessions to (the ACP `model` option,
    /// between prompts); `model` is always offered first.
    pub models: Vec<String>,
    /// How hard the model works (native agents): `low`, `medium`, `high`, `xhigh` or `max` ask
    /// for extended thinking with a growing budget (ADR 0034). Unset: no thinking.
    pub effort: Option<String>,
    pub system: Option<String>,
    pub description: Option<String>,
    /// Built-in tools that run without asking (default: read, glob, grep); the others
    /// (bash, write, edit, ...) ask the client first. An MCP tool is named `<server>/<tool>`.
    pub allow: Option<Vec<String>>,
    /// MCP servers (Streamable HTTP) the agent's tools come from, by name: their URL. Their
    /// tools ask first unless `allow` names them.
    pub mcp_servers: BTreeMap<String, String>,
}

/// `[acp]`: the ACP faces.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct AcpConfig {
    /// Serve the ACP endpoint `/acp` (WebSocket) on `gateway serve`, for `gateway acp --url`.
    pub websocket: bool,
    /// Longest a backend agent process may take for one turn.
    pub turn_timeout_secs: u64,
    /// Directories under which an editor on the WebSocket endpoint may open a session `cwd`
    /// (the directory becomes the session's workspace, read and written with the gateway's
    /// rights). Empty: WebSocket editors cannot open sessions. `gateway acp` on stdio is not
    /// limited: the editor started it with the user's own rights.
    pub workspace_roots: Vec<String>,
}

impl Default for AcpConfig {
    fn default() -> Self {
        Self { websocket: true, turn_timeout_secs: 1800, workspace_roots: Vec::new() }
    }
}

/// `[a2a]`: the A2A server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct A2aConfig {
    /// Allow push-notification targets on loopback or private addresses (tests only).
    #[serde(deserialize_with = "flag")]
    pub allow_private_push_targets: bool,
    /// Publish the built-in conformance agent (the A2A TCK's scenarios) as `conformance`.
    #[serde(deserialize_with = "flag")]
    pub conformance_agent: bool,
    /// The longest a blocking `SendMessage` waits for its task to settle; past it the task is
    /// returned as it stands (`working`) and the client polls or subscribes.
    #[serde(rename = "blocking_timeout_secs", with = "gateway_core::durations::secs")]
    pub blocking_timeout: std::time::Duration,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            allow_private_push_targets: false,
            conformance_agent: false,
            blocking_timeout: gateway_a2a::DEFAULT_BLOCKING_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ExecutorsConfig {
    /// `[executors.acp.NAME]`: ACP agent commands.
    pub acp: BTreeMap<String, gateway_acp::ExecutorConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RemotesConfig {
    /// `[remotes.a2a.NAME]`: remote A2A agents.
    pub a2a: BTreeMap<String, gateway_a2a::RemoteConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    Missing(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Environment variables that start with `GATEWAY_` but are not configuration keys.
/// `SECRET_KEY` is a credential: read by [`Config::secret_key_from_env`], never from a file.
const NOT_CONFIG: [&str; 4] = ["TEST_DATABASE_URL", "LOG", "CONFIG", "SECRET_KEY"];

impl Config {
    /// Defaults, then the file (if any), then `GATEWAY_*` variables.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::Missing(path.to_owned()));
            }
            fig = fig.merge(Toml::file(path));
        }
        let env = Env::prefixed("GATEWAY_").ignore(&NOT_CONFIG).split("__");
        fig = fig.merge(env.clone());
        let config: Config = fig.extract().map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let unknown = strict::unknown_keys(file, &env);
        if !unknown.is_empty() {
            let all: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            return Err(ConfigError::Invalid(all.join("; ")));
        }
        config.validate()?;
        let mut config = config;
        if let Some(path) = file {
            config.anchor_state_to(path, |key| std::env::var_os(format!("GATEWAY_{key}")).is_some());
        }
        Ok(config)
    }

    /// Where a configuration file's state is (ADR 0029): `data_dir` and a SQLite database
    /// given as relative paths (or left at their defaults, `data` and `data/gateway.db`) are
    /// relative to the file's directory, so every command run with one `--config` (`serve`,
    /// `acp` from an editor, `sessions`, `keys`, `check`) finds the same state wherever it is
    /// started. A value from the environment (`set_by_env`) is the caller's, relative to its
    /// working directory.
    fn anchor_state_to(&mut self, file: &Path, set_by_env: impl Fn(&str) -> bool) {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let base = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        if !set_by_env("DATA_DIR") && Path::new(&self.data_dir).is_relative() {
            self.data_dir = base.join(&self.data_dir).display().to_string();
        }
        if !set_by_env("DATABASE_URL")
            && let Some(rest) = self.database_url.strip_prefix("sqlite://")
            && !rest.starts_with('/')
            && !rest.starts_with(':')
        {
            self.database_url = format!("sqlite://{}", base.join(rest).display());
        }
    }

    /// `gateway acp` without a configuration file is started by editors, usually from the
    /// user's project directory (or from `/`). Left at their defaults, the database and
    /// `data_dir` (secret key, workspaces) would land in `./data` there; each goes to
    /// `<data_home>/gateway` instead (`$XDG_DATA_HOME`, else `~/.local/share`), so one
    /// editor's sessions are listed and loadable from any project. Settings the user made
    /// (in the environment) are kept as they are.
    pub fn anchor_state_for_editor(&mut self, data_home: Option<PathBuf>) {
        let defaults = Config::default();
        let Some(home) = data_home else { return };
        let dir = home.join("gateway");
        if self.database_url == defaults.database_url {
            self.database_url = format!("sqlite://{}", dir.join("gateway.db").display());
        }
        if self.data_dir == defaults.data_dir {
            self.data_dir = dir.display().to_string();
        }
    }

    /// `$XDG_DATA_HOME`, else `$HOME/.local/share`.
    pub fn user_data_home() -> Option<PathBuf> {
        user_dir("XDG_DATA_HOME", ".local/share")
    }

    /// `$XDG_CONFIG_HOME`, else `$HOME/.config`.
    pub fn user_config_home() -> Option<PathBuf> {
        user_dir("XDG_CONFIG_HOME", ".config")
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (name, table) in &self.models {
            table.check(name).map_err(|e| ConfigError::Invalid(format!("models.{name}: {e}")))?;
        }
        if !matches!(self.model.as_str(), "fake" | "anthropic") && !self.models.contains_key(&self.model) {
            return Err(ConfigError::Invalid(format!(
                "model must be \"fake\", \"anthropic\" or the name of a [models] table, not {:?}",
                self.model
            )));
        }
        if let Err(e) = ProviderKind::parse(&self.sandbox) {
            return Err(ConfigError::Invalid(format!("sandbox {e}")));
        }
        if !matches!(self.log.format.as_str(), "auto" | "json" | "text") {
            return Err(ConfigError::Invalid(format!(
                "log.format must be auto, json or text, not {:?}",
                self.log.format
            )));
        }
        if self.workers.max_turns == 0 || self.workers.claim_batch == 0 || self.workers.lease.is_zero() {
            return Err(ConfigError::Invalid(
                "workers.max_turns, workers.claim_batch and workers.lease_secs must be positive".into(),
            ));
        }
        Ok(())
    }

    pub fn host_id(&self) -> String {
        self.host_id.clone().unwrap_or_else(hostname)
    }

    pub fn instance_name(&self) -> String {
        self.instance_name.clone().unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()))
    }

    /// Where the secret key file is (or will be created).
    pub fn secret_key_path(&self) -> PathBuf {
        match &self.secret_key_file {
            Some(f) => PathBuf::from(f),
            None => Path::new(&self.data_dir).join("secret.key"),
        }
    }

    /// `GATEWAY_SECRET_KEY`, if set: the key that seals secrets at rest, base64.
    pub fn secret_key_from_env() -> Option<String> {
        std::env::var("GATEWAY_SECRET_KEY").ok().filter(|k| !k.trim().is_empty())
    }

    pub fn public_url(&self) -> String {
        self.public_url.clone().unwrap_or_else(|| format!("http://{}", self.listen)).trim_end_matches('/').to_owned()
    }
}

/// Booleans as operators write them in environment variables: `1`/`0`, `true`/`false`,
/// `yes`/`no`.
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Int(i64),
        Text(String),
    }
    match Flag::deserialize(d)? {
        Flag::Bool(b) => Ok(b),
        Flag::Int(i) => Ok(i != 0),
        Flag::Text(t) => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            other => Err(serde::de::Error::custom(format!("expected a boolean, got {other:?}"))),
        },
    }
}

/// A user's XDG base directory: the variable when it holds an absolute path, else `under_home`
/// in `$HOME`.
fn user_dir(var: &str, under_home: &str) -> Option<PathBuf> {
    let xdg = std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(under_home)))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A database URL safe to log: any password replaced.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_editor_gets_its_state_under_the_user_data_home_unless_configured() {
        let mut c = super::Config::default();
        c.anchor_state_for_editor(Some("/home/u/.local/share".into()));
        assert_eq!(c.database_url, "sqlite:///home/u/.local/share/gateway/gateway.db");
        assert_eq!(c.data_dir, "/home/u/.local/share/gateway");
        let mut configured = super::Config { database_url: "postgres://db/x".into(), ..Default::default() };
        configured.anchor_state_for_editor(Some("/home/u/.local/share".into()));
        assert_eq!(configured.database_url, "postgres://db/x", "the user's database is kept");
        assert_eq!(
            configured.data_dir, "/home/u/.local/share/gateway",
            "the secret key and workspaces still never land in the editor's working directory"
        );
    }

    #[test]
    fn a_config_files_state_is_beside_it_unless_the_environment_says_otherwise() {
        let mut c = super::Config::default();
        c.anchor_state_to(Path::new("/etc/gw/gateway.toml"), |_| false);
        assert_eq!(
            (c.data_dir.as_str(), c.database_url.as_str()),
            ("/etc/gw/data", "sqlite:///etc/gw/data/gateway.db")
        );
        let mut c = super::Config {
            data_dir: "/var/lib/gw".into(),
            database_url: "sqlite://state/gw.db?mode=rwc".into(),
            ..Default::default()
        };
        c.anchor_state_to(Path::new("/etc/gw/gateway.toml"), |_| false);
        assert_eq!(
            (c.data_dir.as_str(), c.database_url.as_str()),
            ("/var/lib/gw", "sqlite:///etc/gw/state/gw.db?mode=rwc")
        );
        let mut c = super::Config { database_url: "postgres://db/x".into(), ..Default::default() };
        c.anchor_state_to(Path::new("/etc/gw/gateway.toml"), |key| key == "DATA_DIR");
        assert_eq!(
            (c.data_dir.as_str(), c.database_url.as_str()),
            ("data", "postgres://db/x"),
            "the environment's own"
        );
    }

    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(redact_url("postgres://u:s3cret@db:5432/x"), "postgres://u:***@db:5432/x");
        assert_eq!(redact_url("postgres://u@db/x"), "postgres://u@db/x");
        assert_eq!(redact_url("sqlite://data/gateway.db"), "sqlite://data/gateway.db");
    }

    /// The defaults README documents, as the components define them (no copy here).
    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness signature
    fn the_components_defaults_are_the_documented_ones() {
        figment::Jail::expect_with(|_| {
            let c = Config::load(None).map_err(|e| e.to_string())?;
            let w = &c.workers;
            assert_eq!(
                (w.max_turns, w.claim_batch, w.lease, w.poll, w.host_ttl),
                (4096, 64, secs(30), ms(1000), secs(90))
            );
            assert_eq!((w.crash_budget, w.retry.max_retries, w.shutdown_grace), (3, 3, secs(10)));
            let e = &c.environments;
            assert_eq!((e.idle, e.limits.wall_clock, e.limits.max_wall_clock), (secs(300), secs(120), secs(600)));
            assert_eq!((e.limits.output_cap, e.providers.bwrap.as_path()), (100_000, Path::new("bwrap")));
            assert_eq!((c.native.max_rounds, c.native.max_tokens), (20, 8192));
            let a = &c.anthropic;
            assert_eq!(
                (a.base_url.as_str(), a.max_retries, a.request_timeout_secs),
                ("https://api.anthropic.com", 2, 600)
            );
            Ok(())
        });
    }

    /// Every documented key of `[workers]`, `[environments]`, `[native]` and `[anthropic]`
    /// reaches its component, from the file and from `GATEWAY_*` (flattened keys too).
    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness signature
    fn every_documented_component_key_reaches_its_component() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "g.toml",
                "[workers]\nmax_turns = 2\nclaim_batch = 3\nlease_secs = 11\npoll_ms = 250\nhost_ttl_secs = 45\ncrash_budget = 5\n\
                 max_retries = 7\nshutdown_grace_secs = 3\n\
                 [environments]\nidle_secs = 60\ncommand_timeout_secs = 30\nmax_command_timeout_secs = 90\n\
                 output_cap_bytes = 5000\nbwrap = \"/opt/bwrap\"\n\
                 [native]\nmax_rounds = 4\nmax_tokens = 100\n\
                 [mcp]\nallow_private_servers = true\ncall_timeout_secs = 7\nconnect_timeout_secs = 8\nmax_tools_per_server = 9\n\
                 [anthropic]\nbase_url = \"http://stub\"\nmax_retries = 0\nrequest_timeout_secs = 9\n\
                 [telemetry]\notlp_endpoint = \"http://collector:4318\"\nservice_name = \"edge\"\n",
            )?;
            let c = Config::load(Some(Path::new("g.toml"))).map_err(|e| e.to_string())?;
            let t = &c.telemetry;
            assert_eq!(
                (t.otlp_endpoint.as_deref(), t.service_name.as_deref()),
                (Some("http://collector:4318"), Some("edge"))
            );
            let w = &c.workers;
            assert_eq!((w.max_turns, w.claim_batch, w.lease, w.poll, w.host_ttl), (2, 3, secs(11), ms(250), secs(45)));
            assert_eq!((w.crash_budget, w.retry.max_retries, w.shutdown_grace), (5, 7, secs(3)));
            let e = &c.environments;
            assert_eq!((e.idle, e.limits.wall_clock, e.limits.max_wall_clock), (secs(60), secs(30), secs(90)));
            assert_eq!((e.limits.output_cap, e.providers.bwrap.as_path()), (5000, Path::new("/opt/bwrap")));
            let limit_defaults = EnvironmentsConfig::default().limits;
            assert_eq!(e.limits.max_processes, limit_defaults.max_processes, "not a key: its default");
            assert_eq!((c.native.max_rounds, c.native.max_tokens), (4, 100));
            let m = &c.mcp;
            assert_eq!(
                (m.allow_private_servers, m.call_timeout_secs, m.connect_timeout_secs, m.max_tools_per_server),
                (true, 7, 8, 9)
            );
            let a = &c.anthropic;
            assert_eq!((a.base_url.as_str(), a.max_retries, a.request_timeout_secs), ("http://stub", 0, 9));

            jail.set_env("GATEWAY_WORKERS__MAX_RETRIES", "8");
            jail.set_env("GATEWAY_WORKERS__POLL_MS", "300");
            jail.set_env("GATEWAY_ENVIRONMENTS__OUTPUT_CAP_BYTES", "6000");
            jail.set_env("GATEWAY_ENVIRONMENTS__COMMAND_TIMEOUT_SECS", "31");
            jail.set_env("GATEWAY_NATIVE__MAX_TOKENS", "101");
            jail.set_env("GATEWAY_MCP__ALLOW_PRIVATE_SERVERS", "false");
            jail.set_env("GATEWAY_ANTHROPIC__REQUEST_TIMEOUT_SECS", "10");
            let c = Config::load(Some(Path::new("g.toml"))).map_err(|e| e.to_string())?;
            assert_eq!((c.workers.retry.max_retries, c.workers.poll, c.workers.lease), (8, ms(300), secs(11)));
            assert_eq!((c.environments.limits.output_cap, c.environments.limits.wall_clock), (6000, secs(31)));
            assert_eq!((c.native.max_tokens, c.anthropic.request_timeout_secs), (101, 10));
            assert!(!c.mcp.allow_private_servers);
            Ok(())
        });
    }

    /// A misspelt key or section refuses the start, naming the key and the nearest known one,
    /// from the file and from nested `GATEWAY_*` variables; every key spelt right (tables keyed
    /// by the operator's names included) still loads.
    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness signature
    fn an_unknown_key_refuses_the_start_naming_the_nearest_known_one() {
        figment::Jail::expect_with(|jail| {
            let refused = |file: &str| Config::load(Some(Path::new(file))).expect_err(file).to_string();
            jail.create_file("section.toml", "[workres]\nmax_turns = 2\n")?;
            assert_eq!(
                refused("section.toml"),
                "invalid configuration: unknown configuration key `workres` (the nearest known key is `workers`)"
            );
            jail.create_file(
                "nested.toml",
                "[workers]\nmax_turn = 2\n[agents.helper]\nbackned = \"native\"\n\
                 [[webhooks]]\nurl = \"https://h/\"\nsecret = \"whsec_x\"\nevent_type = []\n\
                 [telemetry]\notlp_endpont = \"http://c:4318\"\n",
            )?;
            let e = refused("nested.toml");
            for expected in [
                "`workers.max_turn` (the nearest known key is `workers.max_turns`)",
                "`agents.helper.backned` (the nearest known key is `agents.helper.backend`)",
                "`webhooks[0].event_type` (the nearest known key is `webhooks[0].event_types`)",
                "`telemetry.otlp_endpont` (the nearest known key is `telemetry.otlp_endpoint`)",
            ] {
                assert!(e.contains(expected), "{expected} in {e}");
            }

            jail.create_file(
                "good.toml",
                "listen = \"127.0.0.1:9\"\n[workers]\nmax_turns = 2\nmax_retries = 1\n\
                 [environments]\noutput_cap_bytes = 10\nidle_secs = 5\n\
                 [agents.helper]\nbackend = \"acp:x\"\nallow = [\"read\"]\n\
                 [executors.acp.x]\ncommand = \"agent\"\nenv = { ANY_NAME = \"v\" }\n\
                 [remotes.a2a.r]\nurl = \"http://r/\"\n\
                 [[webhooks]]\nurl = \"https://h/\"\nsecret = \"whsec_x\"\n",
            )?;
            Config::load(Some(Path::new("good.toml"))).map_err(|e| e.to_string())?;

            jail.set_env("GATEWAY_URL", "http://client-side/");
            jail.set_env("GATEWAY_API_KEY", "not configuration");
            Config::load(None).map_err(|e| e.to_string())?;
            jail.set_env("GATEWAY_WORKERS__MAX_TURN", "3");
            assert_eq!(
                Config::load(None).expect_err("nested variable").to_string(),
                "invalid configuration: unknown configuration key `GATEWAY_WORKERS__MAX_TURN` \
                 (the nearest known key is `GATEWAY_WORKERS__MAX_TURNS`)"
            );
            Ok(())
        });
    }

    fn secs(n: u64) -> std::time::Duration {
        std::time::Duration::from_secs(n)
    }

    fn ms(n: u64) -> std::time::Duration {
        std::time::Duration::from_millis(n)
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness signature
    fn environment_overrides_file_and_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("g.toml", "listen = \"0.0.0.0:9000\"\nmodel = \"fake\"\n[workers]\nmax_turns = 2\n")?;
            jail.set_env("GATEWAY_WORKERS__MAX_TURNS", "7");
            jail.set_env("GATEWAY_DATABASE_URL", "postgres://u:p@h/db");
            jail.set_env("GATEWAY_TEST_DATABASE_URL", "ignored");
            let c = Config::load(Some(Path::new("g.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.listen, "0.0.0.0:9000");
            assert_eq!(c.workers.max_turns, 7);
            assert_eq!(c.database_url, "postgres://u:p@h/db");
            assert_eq!(c.sandbox, "local");
            assert_eq!(
                c.secret_key_path(),
                std::path::absolute("data/secret.key").expect("absolute"),
                "default: under data_dir, beside the file"
            );
            jail.set_env("GATEWAY_SECRET_KEY_FILE", "/run/secrets/gateway.key");
            jail.set_env("GATEWAY_SECRET_KEY", "a2V5");
            let c = Config::load(Some(Path::new("g.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.secret_key_path(), Path::new("/run/secrets/gateway.key"));
            assert_eq!(
                Config::secret_key_from_env().as_deref(),
                Some("a2V5"),
                "the key itself only from the environment"
            );
            jail.set_env("GATEWAY_ALLOW_UNSAFE_LOCAL_SANDBOX", "1");
            assert!(Config::load(None).map_err(|e| e.to_string())?.allow_unsafe_local_sandbox);
            jail.set_env("GATEWAY_SANDBOX", "docker");
            let err = Config::load(None).unwrap_err().to_string();
            assert_eq!(err, r#"invalid configuration: sandbox must be "local" or "namespace", not "docker""#);
            jail.set_env("GATEWAY_SANDBOX", "namespace");
            jail.set_env("GATEWAY_MODEL", "gpt");
            assert!(Config::load(None).is_err());
            Ok(())
        });
    }
}
