//! Logs: `tracing` to stderr (stdout stays free for protocol frames), JSON unless stderr is
//! a terminal. `GATEWAY_LOG` (or `RUST_LOG`) overrides the configured filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogConfig;

pub fn init(config: &LogConfig) {
    let filter =
        std::env::var("GATEWAY_LOG").or_else(|_| std::env::var("RUST_LOG")).unwrap_or_else(|_| config.level.clone());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match config.format.as_str() {
        "json" => true,
        "text" => false,
        _ => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second initialisation (tests calling twice) is harmless: keep the first.
    let _ = if json { builder.json().flatten_event(true).try_init() } else { builder.try_init() };
}
