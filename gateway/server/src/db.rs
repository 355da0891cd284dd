//! Opening the configured database for the commands that only read it (`sessions`, `check`):
//! never migrating it and never creating it, so looking at a gateway's state cannot change
//! that state. (`serve` and `migrate` open it with [`open_store`](crate::serve::open_store),
//! which migrates.)

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use gateway_store::{Store, StoreOptions};

use crate::config::{Config, redact_url};

/// The file a `sqlite:` URL names (`sqlite://data/gateway.db`, `sqlite:/abs.db?mode=rwc`);
/// `None` for other engines.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    Some(PathBuf::from(path))
}

/// Opens the configured database without migrating it (no wake-ups, a small pool). A SQLite
/// file that does not exist is an error rather than created.
pub async fn open_existing(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(file) = sqlite_file(&config.database_url)
        && !file.exists()
    {
        bail!(
            "no database at {}: no gateway has run with this configuration here (`gateway migrate` creates it)",
            file.display()
        );
    }
    let options = StoreOptions { max_connections: 2, wakeups: false, ..StoreOptions::default() };
    gateway_store::open(&config.database_url, &options)
        .await
        .with_context(|| format!("opening the database at {}", redact_url(&config.database_url)))
}

/// [`open_existing`], refusing a database whose schema this build does not match.
pub async fn open_migrated(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let store = open_existing(config).await?;
    let status = match store.migration_status().await {
        Ok(s) => s,
        Err(e) => {
            store.close().await;
            return Err(e).context("reading the database's migrations");
        }
    };
    if !status.pending.is_empty() || !status.unknown.is_empty() {
        store.close().await;
        bail!(
            "the database's schema does not match this gateway ({} migrations pending, {} unknown): run `gateway check`",
            status.pending.len(),
            status.unknown.len()
        );
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_their_file() {
        let cases = [
            ("sqlite://data/gateway.db", Some("data/gateway.db")),
            ("sqlite:///var/lib/gw.db?mode=rwc", Some("/var/lib/gw.db")),
            ("sqlite:gw.db", Some("gw.db")),
            ("postgres://u@h/db", None),
        ];
        for (url, want) in cases {
            assert_eq!(sqlite_file(url), want.map(PathBuf::from), "{url}");
        }
    }
}
