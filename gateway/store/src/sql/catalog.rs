//! Agents (immutable versions) and environments.

use async_trait::async_trait;
use gateway_core::agent::{Agent, AgentSpec};
use gateway_core::environment::{Environment, EnvironmentSpec};
use gateway_core::{AgentId, EnvironmentId, Timestamp};

use super::Hints;
use super::conn::Arg;
use super::read::{keyset_sql, time_range_args, time_range_sql};
use super::{Engine, SqlStore, query, query_as};
use crate::Catalog;
use crate::error::{Guard, Result, StoreError};
use crate::model::{AgentFilter, EnvironmentFilter, Keyset, Page, PageRequest};
use crate::rows::{GuardRow, Scan, paginate};

const AGENT_SELECT: &str = "SELECT a.id, v.version, v.spec, a.created_at, v.created_at AS updated_at, a.archived_at \
     FROM agents a JOIN agent_versions v ON v.agent_id = a.id AND v.version = COALESCE($2, a.version) \
     WHERE a.id = $1";

/// `$1` include archived, `$2..$5` created gt/gte/lt/lte, `$6,$7` keyset bound, `$8` limit.
const LIST_AGENTS: [&str; 2] = keyset_sql!(
    concat!(
        "SELECT a.id, v.version, v.spec, a.created_at, v.created_at AS updated_at, a.archived_at \
         FROM agents a JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.version \
         WHERE ($1 OR a.archived_at IS NULL) AND",
        time_range_sql!("a.", 2, 3, 4, 5)
    ),
    "a.",
    6,
    7,
    8
);

/// `$1` agent id, `$2` version bound (exclusive), `$3` limit.
macro_rules! list_versions_sql {
    ($cmp:literal, $dir:literal) => {
        concat!(
            "SELECT a.id, v.version, v.spec, a.created_at, v.created_at AS updated_at, a.archived_at \
             FROM agents a JOIN agent_versions v ON v.agent_id = a.id \
             WHERE a.id = $1 AND ($2 IS NULL OR v.version ",
            $cmp,
            " $2) ORDER BY v.version ",
            $dir,
            $crate::sql::limit!(3)
        )
    };
}

const ENVIRONMENT_BY_ID: &str =
    "SELECT id, spec, created_at, updated_at, archived_at FROM environments WHERE id = $1 AND deleted_at IS NULL";

/// `$1` include archived, `$2,$3` keyset bound, `$4` limit.
const LIST_ENVIRONMENTS: [&str; 2] = keyset_sql!(
    "SELECT id, spec, created_at, updated_at, archived_at FROM environments \
     WHERE deleted_at IS NULL AND ($1 OR archived_at IS NULL) AND",
    "",
    2,
    3,
    4
);

impl<E: Engine> SqlStore<E> {
    async fn agent_guard(&self, id: &AgentId) -> Result<GuardRow> {
        query_as::<GuardRow>(
            "SELECT version, archived_at, CAST(NULL AS BIGINT) AS deleted_at FROM agents WHERE id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *self.reader().await?)
        .await?
        .ok_or_else(|| StoreError::not_found("agent", id))
    }
}

#[async_trait]
impl<E: Engine> Catalog for SqlStore<E> {
    async fn create_agent(&self, spec: AgentSpec) -> Result<Agent> {
        let id = AgentId::new();
        let json = serde_json::to_string(&spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query("INSERT INTO agents (id, version, created_at) VALUES ($1, 1, $2)")
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        query("INSERT INTO agent_versions (agent_id, version, spec, created_at) VALUES ($1, 1, $2, $3)")
            .bind(id.as_str())
            .bind(json)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Agent { id, version: 1, spec, created_at: Timestamp(now), updated_at: Timestamp(now), archived_at: None })
    }

    async fn get_agent(&self, id: &AgentId, version: Option<u32>) -> Result<Agent> {
        let row = query_as::<Agent>(AGENT_SELECT)
            .bind(id.as_str())
            .bind(version.map(i64::from))
            .maybe(&mut *self.reader().await?)
            .await?;
        row.ok_or_else(|| match version {
            Some(v) => StoreError::not_found("agent version", format!("{id} v{v}")),
            None => StoreError::not_found("agent", id),
        })
    }

    async fn update_agent(&self, id: &AgentId, base: u32, spec: AgentSpec) -> Result<Agent> {
        let json = serde_json::to_string(&spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        // The version check and the bump are one statement on a row this transaction now
        // holds: a concurrent update from the same base finds version != base.
        let bumped = query_as::<(i64,)>(
            "UPDATE agents SET version = version + 1 WHERE id = $1 AND version = $2 AND archived_at IS NULL RETURNING created_at",
        )
        .bind(id.as_str())
        .bind(i64::from(base))
        .fetch_optional(&mut *tx)
        .await?;
        let Some((created_at,)) = bumped else {
            drop(tx);
            let g = self.agent_guard(id).await?;
            if g.archived_at.is_some() {
                return Err(StoreError::Guard(Guard::AgentArchived(id.to_string())));
            }
            return Err(StoreError::StaleVersion {
                id: id.to_string(),
                current: u32::try_from(g.version).unwrap_or(0),
                expected: base,
            });
        };
        let version = base + 1;
        query("INSERT INTO agent_versions (agent_id, version, spec, created_at) VALUES ($1, $2, $3, $4)")
            .bind(id.as_str())
            .bind(i64::from(version))
            .bind(json)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Agent {
            id: id.clone(),
            version,
            spec,
            created_at: Timestamp(created_at),
            updated_at: Timestamp(now),
            archived_at: None,
        })
    }

    async fn archive_agent(&self, id: &AgentId) -> Result<Agent> {
        self.update_one("agent", id.as_str(), |now| {
            query_as("UPDATE agents SET archived_at = COALESCE(archived_at, $2) WHERE id = $1 RETURNING id")
                .bind(id.as_str())
                .bind(now)
        })
        .await?;
        self.get_agent(id, None).await
    }

    async fn list_agents(&self, filter: &AgentFilter, page: &PageRequest) -> Result<Page<Agent>> {
        let lead = std::iter::once(Arg::from(filter.include_archived)).chain(time_range_args(filter.created));
        self.list_page::<Agent>(page, LIST_AGENTS, lead).await
    }

    async fn list_agent_versions(&self, id: &AgentId, page: &PageRequest) -> Result<Page<Agent>> {
        self.agent_guard(id).await?;
        let scan = Scan::plan(page);
        let sql = if scan.ascending { list_versions_sql!(">", "ASC") } else { list_versions_sql!("<", "DESC") };
        let agents = query_as::<Agent>(sql)
            .bind(id.as_str())
            .bind(scan.bound.as_ref().map(|k| k.at))
            .bind(scan.fetch)
            .decoded(&mut *self.reader().await?)
            .await?;
        Ok(paginate(page, agents, |a| Keyset { at: i64::from(a.version), id: String::new() }))
    }

    async fn create_environment(&self, spec: EnvironmentSpec) -> Result<Environment> {
        let id = EnvironmentId::new();
        let json = serde_json::to_string(&spec)?;
        let now = self
            .write_one(|now| {
                query("INSERT INTO environments (id, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)")
                    .bind(id.as_str())
                    .bind(json)
                    .bind(now)
            })
            .await?;
        Ok(Environment { id, spec, created_at: Timestamp(now), updated_at: Timestamp(now), archived_at: None })
    }

    async fn get_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        self.by_id::<Environment>(ENVIRONMENT_BY_ID, "environment", id.as_str()).await
    }

    async fn update_environment(&self, id: &EnvironmentId, spec: EnvironmentSpec) -> Result<Environment> {
        let json = serde_json::to_string(&spec)?;
        self.update_one("environment", id.as_str(), |now| {
            query_as(
                "UPDATE environments SET spec = $2, updated_at = $3 WHERE id = $1 AND deleted_at IS NULL RETURNING id",
            )
            .bind(id.as_str())
            .bind(json)
            .bind(now)
        })
        .await?;
        self.get_environment(id).await
    }

    async fn archive_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        self.update_one("environment", id.as_str(), |now| {
            query_as(
                "UPDATE environments SET archived_at = COALESCE(archived_at, $2), updated_at = $2 \
                 WHERE id = $1 AND deleted_at IS NULL RETURNING id",
            )
            .bind(id.as_str())
            .bind(now)
        })
        .await?;
        self.get_environment(id).await
    }

    async fn delete_environment(&self, id: &EnvironmentId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        // The reference check and the tombstone are one statement.
        let done = query_as::<(String,)>(
            "UPDATE environments SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.environment_id = $1 AND s.deleted_at IS NULL) RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            drop(tx);
            self.get_environment(id).await?;
            return Err(StoreError::Guard(Guard::EnvironmentInUse(id.to_string())));
        }
        self.finish(tx, Hints::default()).await?;
        Ok(())
    }

    async fn list_environments(&self, filter: &EnvironmentFilter, page: &PageRequest) -> Result<Page<Environment>> {
        self.list_page::<Environment>(page, LIST_ENVIRONMENTS, [Arg::from(filter.include_archived)]).await
    }
}
