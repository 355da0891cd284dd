//! Harnesses that make isolated stores for tests: a temporary SQLite file per store, or a
//! fresh PostgreSQL schema per store in the database at `GATEWAY_TEST_DATABASE_URL`.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::Harness;
use crate::{PgStore, SqliteStore, Store, StoreOptions};

/// The PostgreSQL database tests use unless `GATEWAY_TEST_DATABASE_URL` says otherwise.
pub const DEFAULT_TEST_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

pub fn test_database_url() -> String {
    std::env::var("GATEWAY_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_TEST_DATABASE_URL.to_owned())
}

/// Temporary SQLite files, removed when the harness is dropped.
pub struct SqliteHarness {
    options: StoreOptions,
    dir: tempfile::TempDir,
    last: Mutex<Option<String>>,
}

impl SqliteHarness {
    pub fn new(wakeups: bool) -> Self {
        Self {
            options: StoreOptions { wakeups, ..Default::default() },
            dir: tempfile::tempdir().expect("temporary directory"),
            last: Mutex::new(None),
        }
    }

    /// A URL for a new database file in this harness's directory.
    pub fn new_url(&self) -> String {
        let name = format!("{}.db", gateway_core::RunId::new());
        format!("sqlite://{}", self.dir.path().join(name).display())
    }
}

#[async_trait]
impl Harness for SqliteHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        let url = self.new_url();
        let store = SqliteStore::connect(&url, &self.options).await.expect("open SQLite");
        store.migrate().await.expect("migrate SQLite");
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
        Arc::new(store)
    }

    async fn second(&self, _store: &Arc<dyn Store>) -> Arc<dyn Store> {
        let url = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone().expect("fresh() first");
        Arc::new(SqliteStore::connect(&url, &self.options).await.expect("reopen SQLite"))
    }

    fn options(&self) -> StoreOptions {
        self.options.clone()
    }
}

/// A fresh schema per store. Schemas are named `gwt_<unix seconds>_<random>`; ones older than
/// an hour are dropped when a harness starts, so crashed test runs leave nothing for long.
pub struct PgHarness {
    options: StoreOptions,
    last: Mutex<Option<String>>,
}

impl PgHarness {
    pub fn new(wakeups: bool) -> Self {
        Self { options: StoreOptions { wakeups, max_connections: 4, ..Default::default() }, last: Mutex::new(None) }
    }

    /// Creates an empty schema and returns a database URL whose connections use it.
    pub async fn new_schema_url() -> String {
        let base = test_database_url();
        let admin = sqlx::PgPool::connect(&base).await.expect("connect to the test PostgreSQL (is it running?)");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        drop_stale_schemas(&admin, now).await;
        let suffix = gateway_core::RunId::new().as_str()[4..].to_ascii_lowercase();
        let schema = format!("gwt_{now}_{suffix}");
        // The name is ours (digits and base62), so it is safe to splice into DDL.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .expect("create schema");
        admin.close().await;
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{schema}")
    }
}

async fn drop_stale_schemas(admin: &sqlx::PgPool, now: u64) {
    let names: Vec<(String,)> = sqlx::query_as("SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE 'gwt\\_%'")
        .fetch_all(admin)
        .await
        .unwrap_or_default();
    for (name,) in names {
        let born = name.split('_').nth(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(now);
        if now.saturating_sub(born) > 3600 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            let _ =
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE"))).execute(admin).await;
        }
    }
}

#[async_trait]
impl Harness for PgHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        let url = Self::new_schema_url().await;
        let store = PgStore::connect(&url, &self.options).await.expect("open PostgreSQL");
        store.migrate().await.expect("migrate PostgreSQL");
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
        Arc::new(store)
    }

    async fn second(&self, _store: &Arc<dyn Store>) -> Arc<dyn Store> {
        let url = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone().expect("fresh() first");
        Arc::new(PgStore::connect(&url, &self.options).await.expect("reopen PostgreSQL"))
    }

    fn options(&self) -> StoreOptions {
        self.options.clone()
    }
}
