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

    /// The migrations of `engine` numbered `from..=to`, as their SQL text, in order.
    fn migrations(engine: &str, from: u32, to: u32) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(engine);
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files
            .into_iter()
            .filter(|f| {
                let n: u32 = f.file_name().unwrap().to_str().unwrap()[..4].parse().unwrap();
                (from..=to).contains(&n)
            })
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    /// What 0013 finds: a session of five events; the former push feeder's cursor of one of
    /// its tasks at seq 3; a cursor whose session is gone; a lifecycle feed row.
    const BEFORE_0013: &str = "\
        INSERT INTO environments (id, spec, created_at, updated_at) VALUES ('env', '{}', 0, 0); \
        INSERT INTO sessions (id, environment_id, agent_id, agent_version, snapshot, metadata, status, pending, \
          env_state, last_seq, created_at, updated_at) VALUES ('s1', 'env', 'agt', 1, '{}', '{}', 'idle', '[]', 'none', 5, 0, 0); \
        INSERT INTO events (session_id, seq, id, kind, payload, created_at) VALUES \
          ('s1', 1, 'e1', 'k', '{}', 0), ('s1', 2, 'e2', 'k', '{}', 0), ('s1', 3, 'e3', 'k', '{}', 0), \
          ('s1', 4, 'e4', 'k', '{}', 0), ('s1', 5, 'e5', 'k', '{}', 0); \
        INSERT INTO documents (namespace, key, body, version, created_at, updated_at) VALUES \
          ('a2a.feed', 'task_x', '{\"sessionId\":\"s1\",\"afterSeq\":3,\"owner\":\"old\"}', 4, 7, 9), \
          ('a2a.feed', 'task_gone', '{\"sessionId\":\"s9\",\"afterSeq\":0}', 1, 7, 7), \
          ('a2a.task', 'task_x', '{}', 1, 7, 7); \
        INSERT INTO event_feed (session_id, event_id) VALUES ('s1', 'e2');";

    /// What 0013 must leave, read back as one line per table.
    const AFTER_0013: [&str; 4] = [
        "SELECT channel || ':' || key || ':' || session_id || ':' || CAST(after_seq AS TEXT) FROM feed_subscriptions ORDER BY key",
        "SELECT f.channel || ':' || f.event_id FROM event_feed f ORDER BY f.id",
        "SELECT id || ':' || CAST(feed_subscribed AS TEXT) FROM sessions ORDER BY id",
        "SELECT namespace || '/' || key FROM documents ORDER BY namespace, key",
    ];

    fn expected_after_0013() -> [Vec<String>; 4] {
        let v = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        [
            v(&["a2a_push:task_x:s1:3"]),
            v(&["lifecycle:e2", "a2a_push:e4", "a2a_push:e5"]),
            v(&["s1:1"]),
            v(&["a2a.task/task_x"]),
        ]
    }

    /// 0013 turns the former push feeder's cursors into subscriptions, feeds the events each
    /// had not reached (and none it had), marks their sessions, drops the cursors, and names
    /// the rows written before channels existed the lifecycle feed's.
    #[test]
    fn sqlite_0013_turns_push_cursors_into_subscriptions() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        for sql in migrations("sqlite", 1, 12) {
            db.execute_batch(&sql).unwrap();
        }
        db.execute_batch(BEFORE_0013).unwrap();
        for sql in migrations("sqlite", 13, 13) {
            db.execute_batch(&sql).unwrap();
        }
        let got = AFTER_0013.map(|q| {
            let mut stmt = db.prepare(q).unwrap();
            stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect::<Vec<_>>()
        });
        assert_eq!(got, expected_after_0013());
    }

    #[tokio::test]
    async fn postgres_0013_turns_push_cursors_into_subscriptions() {
        let url = PgHarness::new_schema_url().await;
        let db = sqlx::PgPool::connect(&url).await.unwrap();
        for sql in migrations("postgres", 1, 12) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&db).await.unwrap();
        }
        sqlx::raw_sql(BEFORE_0013).execute(&db).await.unwrap();
        for sql in migrations("postgres", 13, 13) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&db).await.unwrap();
        }
        let mut got: [Vec<String>; 4] = Default::default();
        for (i, q) in AFTER_0013.iter().enumerate() {
            got[i] = sqlx::query_scalar::<_, String>(*q).fetch_all(&db).await.unwrap();
        }
        assert_eq!(got, expected_after_0013());
        db.close().await;
    }
}
