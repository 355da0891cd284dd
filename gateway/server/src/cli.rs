//! The command line: `gateway serve`, `acp`, `login`, `logout`, `migrate`, `keys`, `sessions`,
//! `check`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::serve::{self, Extensions};
use crate::telemetry;

#[derive(Debug, Parser)]
#[command(
    name = "gateway",
    version,
    about = "A protocol gateway for AI agents: Managed Agents API, ACP and A2A over one durable core"
)]
pub struct Cli {
    /// Configuration file (TOML). Default: $GATEWAY_CONFIG, else ./gateway.toml if it exists.
    #[arg(long, global = true, env = "GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve HTTP (Managed Agents API under /v1, health) and run Workers.
    Serve,
    /// Serve one editor over ACP on stdin/stdout (logs go to stderr).
    Acp {
        /// The published agent new sessions use (default: `default_agent`, else the first).
        #[arg(long, conflicts_with = "url")]
        agent: Option<String>,
        /// Relay to the gateway serving this URL (its `/acp`) instead of running one here; its
        /// API key comes from $GATEWAY_API_KEY, else `gateway login --url URL`.
        #[arg(long)]
        url: Option<String>,
    },
    /// Store an Anthropic API key for your user (read from the terminal, not echoed, or from
    /// stdin), for `gateway acp` started by an editor without ANTHROPIC_API_KEY. Editors run it
    /// as their terminal sign-in. With --url, store that gateway's API key instead.
    Login {
        /// The remote gateway whose API key to store (for `gateway acp --url`).
        #[arg(long)]
        url: Option<String>,
    },
    /// Forget the key `gateway login` stored (with --url, that gateway's).
    Logout {
        #[arg(long)]
        url: Option<String>,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// List sessions, show one, or follow one live (from the database, or a gateway's --url).
    Sessions(crate::sessions_cmd::SessionsArgs),
    /// Check the configuration, database, sandbox, model credentials, keys and public URL;
    /// exits non-zero when an item fails.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key; prints the secret once, on stdout.
    Create {
        /// A name to recognise the key by.
        #[arg(long, default_value = "default")]
        name: String,
        /// Make an environment key instead: valid only for this self-hosted environment's
        /// work queue and sessions (what its executors present).
        #[arg(long, value_name = "ENV_ID")]
        environment: Option<String>,
    },
    /// List keys (id, state, created, name); never the secrets.
    List {
        /// List this environment's keys instead of the API keys.
        #[arg(long, value_name = "ENV_ID")]
        environment: Option<String>,
    },
    /// Revoke a key by id.
    Revoke {
        id: String,
        /// The key is one of this environment's keys.
        #[arg(long, value_name = "ENV_ID")]
        environment: Option<String>,
    },
}

/// Parses the command line and runs it; the shipped binary's whole `main`.
pub fn main_with(ext: Extensions) -> std::process::ExitCode {
    let cli = Cli::parse();
    let file = cli.config.clone().or_else(|| {
        let default = PathBuf::from("gateway.toml");
        default.exists().then_some(default)
    });
    if matches!(cli.command, Command::Check) {
        // Check reports a configuration that does not load as one of its items.
        return crate::check::main(file.as_deref());
    }
    match &cli.command {
        // The user's own key, wherever the gateway keeps its state: no configuration needed.
        Command::Login { url } => return plain(crate::login::login(url.as_deref())),
        Command::Logout { url } => {
            return plain(crate::login::logout(url.as_deref()).map(|had| {
                eprintln!("{}", if had { "The stored key is forgotten." } else { "No key was stored." });
            }));
        }
        // A relay keeps no state of its own: no configuration either.
        Command::Acp { url: Some(url), .. } => return relay(url),
        _ => {}
    }
    let mut config = match Config::load(file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            // Logging is configured by the file that failed to load: report plainly.
            eprintln!("gateway: {e}");
            if matches!(cli.command, Command::Acp { .. }) {
                // An editor started this process: it shows the reason (ADR 0029).
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    rt.block_on(gateway_acp::serve_failure(e.to_string()));
                }
            }
            return std::process::ExitCode::from(2);
        }
    };
    if matches!(cli.command, Command::Acp { .. }) && file.is_none() {
        config.anchor_state_for_editor(Config::user_data_home());
    }
    let plain_errors = matches!(cli.command, Command::Sessions(_));
    if plain_errors {
        // A command a person reads: only warnings reach stderr, its output goes to stdout.
        config.log.level = "warn".into();
    }
    let telemetry = telemetry::init(&config.log, &config.telemetry);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            telemetry.shutdown();
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve => serve::serve(config, ext).await,
            Command::Acp { agent, .. } => serve::acp(config, ext, agent).await,
            Command::Migrate => serve::migrate(&config).await,
            Command::Keys { command } => serve::keys(&config, command).await,
            Command::Sessions(args) => crate::sessions_cmd::run(&config, args).await,
            Command::Check | Command::Login { .. } | Command::Logout { .. } => {
                unreachable!("handled before the configuration is loaded")
            }
        }
    });
    // Every task the gateway started has been joined: the spans they ended are queued.
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if plain_errors => {
            eprintln!("gateway: {e:#}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "gateway failed");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `gateway acp --url URL`: the editor's stdio relayed to a remote gateway's `/acp` (ADR 0030).
/// Logs go to stderr, as `gateway acp`'s; a URL the relay cannot use is said to the editor.
fn relay(url: &str) -> std::process::ExitCode {
    let telemetry = telemetry::init(&Config::default().log, &Default::default());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gateway: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let key_url = url.to_owned();
    let forget_url = url.to_owned();
    let config = gateway_acp::relay::RelayConfig {
        url: url.trim_end_matches('/').to_owned(),
        key: std::sync::Arc::new(move || crate::login::gateway_key(&key_url)),
        forget_key: std::sync::Arc::new(move || crate::login::logout(Some(&forget_url)).map_err(|e| format!("{e:#}"))),
    };
    let result = runtime.block_on(async {
        if let Err(reason) = gateway_acp::relay::endpoint(url) {
            gateway_acp::serve_failure(reason).await;
            return Ok(());
        }
        let shutdown = tokio_util::sync::CancellationToken::new();
        let relay = gateway_acp::relay::serve_relay(config, shutdown.clone());
        tokio::pin!(relay);
        tokio::select! {
            done = &mut relay => done,
            _ = tokio::signal::ctrl_c() => {
                shutdown.cancel();
                relay.await
            }
        }
    });
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "the relay failed");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A command a person runs in a terminal: its error on stderr, plainly.
fn plain(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
