//! Agents (immutable versions) and environments.

use async_trait::async_trait;
use gateway_core::agent::{Agent, AgentSpec};
use gateway_core::environment::{Environment, EnvironmentSpec};
use gateway_core::{AgentId, EnvironmentId, Timestamp};

use super::Hints;
use super::{Engine, SqlStore, query, query_as};
use crate::Catalog;
use crate::error::{Guard, Result, StoreError};
use crate::model::{AgentFilter, EnvironmentFilter, Keyset, Page, PageRequest};
use crate::rows::{AgentRow, EnvironmentRow, GuardRow, Scan, paginate};

const AGENT_SELECT: &str = "SELECT a.id, v.version, v.spec, a.created_at, v.created_at AS updated_at, a.archived_at \
     FROM agents a JOIN agent_versions v ON v.agent_id = a.id AND v.version = COALESCE($2, a.version) \
     WHERE a.id = $1";

/// `$1` include archived, `$2..$5` created gt/gte/lt/lte, `$6,$7` keyset bound, `$8` limit.
macro_rules! list_agents_sql {
    ($cmp:literal, $dir:literal) => {
        concat!(
            "SELECT a.id, v.version, v.spec, a.created_at, v.created_at AS updated_at, a.archived_at \
             FROM agents a JOIN agent_versions v ON v.agent_id = a.id AND v.version = a.version \
             WHERE ($1 OR a.archived_at IS NULL) \
               AND ($2 IS NULL OR a.created_at > $2) AND ($3 IS NULL OR a.created_at >= $3) \
               AND ($4 IS NULL OR a.created_at < $4) AND ($5 IS NULL OR a.created_at <= $5) \
               AND ($6 IS NULL OR (a.created_at, a.id) ",
            $cmp,
            " ($6, $7)) ORDER BY a.created_at ",
            $dir,
            ", a.id ",
            $dir,
            $crate::sql::limit!(8)
        )
    };
}

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

/// `$1` include archived, `$2,$3` keyset bound, `$4` limit.
macro_rules! list_environments_sql {
    ($cmp:literal, $dir:literal) => {
        concat!(
            "SELECT id, spec, created_at, updated_at, archived_at FROM environments \
             WHERE deleted_at IS NULL AND ($1 OR archived_at IS NULL) \
               AND ($2 IS NULL OR (created_at, id) ",
            $cmp,
            " ($2, $3)) ORDER BY created_at ",
            $dir,
            ", id ",
            $dir,
            $crate::sql::limit!(4)
        )
    };
}

fn agent_key(a: &Agent) -> Keyset {
    Keyset { at: a.created_at.0, id: a.id.to_string() }
}

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

    async fn environment_row(&self, id: &EnvironmentId) -> Result<EnvironmentRow> {
        query_as::<EnvironmentRow>(
            "SELECT id, spec, created_at, updated_at, archived_at FROM environments WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *self.reader().await?)
        .await?
        .ok_or_else(|| StoreError::not_found("environment", id))
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
        let row = query_as::<AgentRow>(AGENT_SELECT)
            .bind(id.as_str())
            .bind(version.map(i64::from))
            .fetch_optional(&mut *self.reader().await?)
            .await?;
        match row {
            Some(r) => r.into_agent(),
            None => Err(match version {
                Some(v) => StoreError::not_found("agent version", format!("{id} v{v}")),
                None => StoreError::not_found("agent", id),
            }),
        }
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
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let done = query_as::<(String,)>(
            "UPDATE agents SET archived_at = COALESCE(archived_at, $2) WHERE id = $1 RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            return Err(StoreError::not_found("agent", id));
        }
        self.finish(tx, Hints::default()).await?;
        self.get_agent(id, None).await
    }

    async fn list_agents(&self, filter: &AgentFilter, page: &PageRequest) -> Result<Page<Agent>> {
        let scan = Scan::plan(page);
        let sql = if scan.ascending { list_agents_sql!(">", "ASC") } else { list_agents_sql!("<", "DESC") };
        let (bound_at, bound_id) = scan.bound_parts();
        let c = filter.created;
        let rows = query_as::<AgentRow>(sql)
            .bind(filter.include_archived)
            .bind(c.gt.map(|t| t.0))
            .bind(c.gte.map(|t| t.0))
            .bind(c.lt.map(|t| t.0))
            .bind(c.lte.map(|t| t.0))
            .bind(bound_at)
            .bind(bound_id)
            .bind(scan.fetch)
            .fetch_all(&mut *self.reader().await?)
            .await?;
        let agents = rows.into_iter().map(AgentRow::into_agent).collect::<Result<Vec<_>>>()?;
        Ok(paginate(page, agents, agent_key))
    }

    async fn list_agent_versions(&self, id: &AgentId, page: &PageRequest) -> Result<Page<Agent>> {
        self.agent_guard(id).await?;
        let scan = Scan::plan(page);
        let sql = if scan.ascending { list_versions_sql!(">", "ASC") } else { list_versions_sql!("<", "DESC") };
        let rows = query_as::<AgentRow>(sql)
            .bind(id.as_str())
            .bind(scan.bound.as_ref().map(|k| k.at))
            .bind(scan.fetch)
            .fetch_all(&mut *self.reader().await?)
            .await?;
        let agents = rows.into_iter().map(AgentRow::into_agent).collect::<Result<Vec<_>>>()?;
        Ok(paginate(page, agents, |a| Keyset { at: i64::from(a.version), id: String::new() }))
    }

    async fn create_environment(&self, spec: EnvironmentSpec) -> Result<Environment> {
        let id = EnvironmentId::new();
        let json = serde_json::to_string(&spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query("INSERT INTO environments (id, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)")
            .bind(id.as_str())
            .bind(json)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Environment { id, spec, created_at: Timestamp(now), updated_at: Timestamp(now), archived_at: None })
    }

    async fn get_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        self.environment_row(id).await?.into_environment()
    }

    async fn update_environment(&self, id: &EnvironmentId, spec: EnvironmentSpec) -> Result<Environment> {
        let json = serde_json::to_string(&spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let done = query_as::<(String,)>(
            "UPDATE environments SET spec = $2, updated_at = $3 WHERE id = $1 AND deleted_at IS NULL RETURNING id",
        )
        .bind(id.as_str())
        .bind(json)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            return Err(StoreError::not_found("environment", id));
        }
        self.finish(tx, Hints::default()).await?;
        self.get_environment(id).await
    }

    async fn archive_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let done = query_as::<(String,)>(
            "UPDATE environments SET archived_at = COALESCE(archived_at, $2), updated_at = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING id",
        )
        .bind(id.as_str())
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if done.is_none() {
            return Err(StoreError::not_found("environment", id));
        }
        self.finish(tx, Hints::default()).await?;
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
            self.environment_row(id).await?;
            return Err(StoreError::Guard(Guard::EnvironmentInUse(id.to_string())));
        }
        self.finish(tx, Hints::default()).await?;
        Ok(())
    }

    async fn list_environments(&self, filter: &EnvironmentFilter, page: &PageRequest) -> Result<Page<Environment>> {
        let scan = Scan::plan(page);
        let sql = if scan.ascending { list_environments_sql!(">", "ASC") } else { list_environments_sql!("<", "DESC") };
        let (bound_at, bound_id) = scan.bound_parts();
        let rows = query_as::<EnvironmentRow>(sql)
            .bind(filter.include_archived)
            .bind(bound_at)
            .bind(bound_id)
            .bind(scan.fetch)
            .fetch_all(&mut *self.reader().await?)
            .await?;
        let envs = rows.into_iter().map(EnvironmentRow::into_environment).collect::<Result<Vec<_>>>()?;
        Ok(paginate(page, envs, |e| Keyset { at: e.created_at.0, id: e.id.to_string() }))
    }
}
