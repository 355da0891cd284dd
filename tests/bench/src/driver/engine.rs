//! The gateway's database for one run: a fresh SQLite file, or a fresh PostgreSQL schema in
//! the test database (`GATEWAY_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), the way the store's conformance harness does
//! it. Schemas are named `gwbench_<unix seconds>_<random>`; ones older than a day are dropped
//! when a run starts, so an interrupted run leaves nothing behind for long.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sqlx::Connection;

use super::error::{BenchError, Result};

pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

pub struct Database {
    pub url: String,
    schema: Option<(String, String)>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A name of ours (digits, lowercase letters, `_`): safe to splice into DDL.
fn schema_name() -> String {
    let suffix: String = crate::ids::new("x")[2..].to_ascii_lowercase().chars().take(12).collect();
    format!("gwbench_{}_{suffix}", now_secs())
}

/// `base` with connections placed in `schema` (libpq `options`).
pub fn with_search_path(base: &str, schema: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

impl Database {
    /// A database the bench did not create (nothing to drop afterwards).
    pub fn existing(url: impl Into<String>) -> Database {
        Database { url: url.into(), schema: None }
    }

    pub async fn fresh(engine: Engine, dir: &Path, pg_url: &str) -> Result<Database> {
        match engine {
            Engine::Sqlite => {
                Ok(Database { url: format!("sqlite://{}", dir.join("gateway.db").display()), schema: None })
            }
            Engine::Postgres => {
                let mut admin = sqlx::PgConnection::connect(pg_url).await?;
                let schema = schema_name();
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut admin).await?;
                admin.close().await?;
                Ok(Database { url: with_search_path(pg_url, &schema), schema: Some((pg_url.to_owned(), schema)) })
            }
        }
    }

    /// Drops the PostgreSQL schema (SQLite files go with their temporary directory).
    pub async fn drop(self) {
        if let Some((admin_url, schema)) = self.schema
            && let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
                .execute(&mut admin)
                .await;
            let _ = admin.close().await;
        }
    }
}

/// Checks PostgreSQL answers, drops stale bench schemas, and returns its version string.
pub async fn prepare_postgres(pg_url: &str) -> Result<String> {
    let mut admin = sqlx::PgConnection::connect(pg_url)
        .await
        .map_err(|e| BenchError::NoPostgres(pg_url.to_owned(), e.to_string()))?;
    let (version,): (String,) = sqlx::query_as("SHOW server_version").fetch_one(&mut admin).await?;
    let names: Vec<(String,)> =
        sqlx::query_as("SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE 'gwbench\\_%'")
            .fetch_all(&mut admin)
            .await?;
    let now = now_secs();
    for (name,) in names {
        let born = name.split('_').nth(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(now);
        if now.saturating_sub(born) > 86_400 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                .execute(&mut admin)
                .await;
        }
    }
    admin.close().await?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_urls_keep_existing_parameters() {
        assert_eq!(with_search_path("postgres://h/db", "s"), "postgres://h/db?options=-c%20search_path%3Ds");
        assert_eq!(
            with_search_path("postgres://h/db?sslmode=disable", "s"),
            "postgres://h/db?sslmode=disable&options=-c%20search_path%3Ds"
        );
        let n = schema_name();
        assert!(
            n.starts_with("gwbench_") && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{n}"
        );
    }
}
