//! Progress and diagnostics go to stderr through `tracing` (stdout stays free: the ACP stub
//! speaks its protocol there). `BENCH_LOG` sets the filter; the default is `info` (sqlx's
//! PostgreSQL notices, such as `DROP SCHEMA … CASCADE` listing what it dropped, stay quiet).

use std::io::IsTerminal;

/// Installs the stderr subscriber once per process.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .compact()
        .try_init();
}
