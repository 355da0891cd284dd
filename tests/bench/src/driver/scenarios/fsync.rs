//! (d) The fsync floor: the latency of one durable commit, measured on the disk and database
//! the other scenarios use. SQLite: a file in the work directory, WAL, `synchronous=FULL`,
//! one single-row INSERT per transaction (what the gateway's SQLite store pays per commit).
//! PostgreSQL: the same INSERT in autocommit through one connection, default settings.

use std::str::FromStr;
use std::time::Instant;

use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use super::Ctx;
use crate::driver::engine::{self, Engine};
use crate::driver::error::Result;
use crate::driver::results::FsyncResults;
use crate::driver::stats::{Latencies, Summary};

/// Commits made before measuring (file growth, connection and plan caches warm up).
const WARMUP: usize = 20;

async fn sqlite(ctx: &Ctx) -> Result<Summary> {
    let dir = ctx.dir(Engine::Sqlite, "fsync")?;
    let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", dir.join("fsync.db").display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full);
    let mut conn = sqlx::SqliteConnection::connect_with(&opts).await?;
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)").execute(&mut conn).await?;
    let mut l = Latencies::default();
    for i in 0..WARMUP + ctx.plan.fsync_commits {
        let t0 = Instant::now();
        sqlx::query("INSERT INTO t (v) VALUES (?)").bind(format!("row {i}")).execute(&mut conn).await?;
        if i >= WARMUP {
            l.record(t0.elapsed());
        }
    }
    conn.close().await?;
    Ok(l.summary())
}

async fn postgres(ctx: &Ctx) -> Result<Summary> {
    let dir = ctx.dir(Engine::Postgres, "fsync")?;
    let db = engine::Database::fresh(Engine::Postgres, &dir, &ctx.pg_url).await?;
    let result = async {
        let mut conn = sqlx::PgConnection::connect(&db.url).await?;
        sqlx::query("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)").execute(&mut conn).await?;
        let mut l = Latencies::default();
        for i in 0..WARMUP + ctx.plan.fsync_commits {
            let t0 = Instant::now();
            sqlx::query("INSERT INTO t (v) VALUES ($1)").bind(format!("row {i}")).execute(&mut conn).await?;
            if i >= WARMUP {
                l.record(t0.elapsed());
            }
        }
        conn.close().await?;
        Ok::<_, sqlx::Error>(l.summary())
    }
    .await;
    db.drop().await;
    Ok(result?)
}

pub async fn run(ctx: &Ctx, with_postgres: bool) -> Result<FsyncResults> {
    let sqlite = sqlite(ctx).await?;
    tracing::info!(p50_ms = format!("{:.3}", sqlite.p50_ms), "(d) SQLite fsynced commit");
    let postgres = if with_postgres {
        let s = postgres(ctx).await?;
        tracing::info!(p50_ms = format!("{:.3}", s.p50_ms), "(d) PostgreSQL commit");
        Some(s)
    } else {
        None
    };
    Ok(FsyncResults { sqlite, postgres, dir: ctx.work.display().to_string() })
}
