//! The migration status of a database, read without changing it: `gateway check` must be
//! able to look at a production database without migrating it (`migrate` is the command that
//! writes). sqlx keeps its record in `_sqlx_migrations`; a database without that table has
//! applied nothing.

use sqlx::migrate::Migrator;

use super::{Engine, SqlStore, query_as};
use crate::error::Result;
use crate::model::MigrationStatus;

pub(crate) async fn status<E: Engine>(store: &SqlStore<E>, migrator: &Migrator) -> Result<MigrationStatus> {
    let mut reader = store.reader().await?;
    let (tables,): (i64,) = query_as(E::MIGRATIONS_TABLE_EXISTS).fetch_one(&mut *reader).await?;
    let applied: Vec<(i64, bool)> = if tables == 0 {
        Vec::new()
    } else {
        query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version").fetch_all(&mut *reader).await?
    };
    drop(reader);
    let known = || migrator.iter().filter(|m| !m.migration_type.is_down_migration());
    Ok(MigrationStatus {
        pending: known()
            .filter(|m| !applied.iter().any(|(v, ok)| *v == m.version && *ok))
            .map(|m| format!("{} {}", m.version, m.description))
            .collect(),
        unknown: applied.iter().filter(|(v, _)| !known().any(|m| m.version == *v)).map(|(v, _)| *v).collect(),
        failed: applied.iter().filter(|(_, ok)| !ok).map(|(v, _)| *v).collect(),
    })
}

#[cfg(test)]
mod tests {
    use crate::conformance::harness::PgHarness;
    use crate::{MigrationStatus, Store, StoreOptions};

    /// A fresh database has every migration pending and is left unmigrated by the question;
    /// after `migrate` none is pending.
    async fn status_is_read_without_migrating(store: &dyn Store) {
        let fresh = store.migration_status().await.unwrap();
        assert!(fresh.pending.len() >= 10 && fresh.pending[0].starts_with("1 "), "{fresh:?}");
        assert!(fresh.unknown.is_empty() && fresh.failed.is_empty());
        assert_eq!(store.migration_status().await.unwrap(), fresh, "asking changed nothing");
        store.migrate().await.unwrap();
        assert_eq!(store.migration_status().await.unwrap(), MigrationStatus::default());
    }

    #[tokio::test]
    async fn sqlite_migration_status() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.db");
        let store = crate::open(&format!("sqlite://{}", file.display()), &StoreOptions::default()).await.unwrap();
        status_is_read_without_migrating(store.as_ref()).await;
        // A newer gateway's migration, and one that failed part way.
        let db = rusqlite::Connection::open(&file).unwrap();
        db.execute_batch(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99999, 'from the future', 1, x'00', 0); \
             UPDATE _sqlx_migrations SET success = 0 WHERE version = 2;",
        )
        .unwrap();
        let status = store.migration_status().await.unwrap();
        assert_eq!((status.unknown, status.failed), (vec![99999], vec![2]));
        assert_eq!(status.pending.len(), 1, "the failed one is pending again: {:?}", status.pending);
        store.close().await;
    }

    #[tokio::test]
    async fn postgres_migration_status() {
        let url = PgHarness::new_schema_url().await;
        let store = crate::open(&url, &StoreOptions::default()).await.unwrap();
        status_is_read_without_migrating(store.as_ref()).await;
        store.close().await;
    }
}
