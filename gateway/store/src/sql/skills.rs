//! Custom skills (`crate::skills`).

use async_trait::async_trait;
use gateway_core::{SkillId, SkillVersionId, Timestamp};

use super::conn::Arg;
use super::conn::from_row;
use super::read::{Decode, keyset_sql};
use super::{Engine, Hints, SqlStore, WriteTx, query, query_as};
use crate::error::{Guard, Result, StoreError};
use crate::model::{Page, PageRequest};
use crate::{NewSkillVersion, SkillFile, Skills, StoredSkill, StoredSkillVersion};

struct SkillRow {
    id: String,
    display_name: String,
    name: String,
    latest_version_id: String,
    created_at: i64,
    updated_at: i64,
}
from_row!(SkillRow { id, display_name, name, latest_version_id, created_at, updated_at });

impl Decode for SkillRow {
    type Out = StoredSkill;
    fn decode(self) -> Result<StoredSkill> {
        Ok(StoredSkill {
            id: SkillId::parse(&self.id).map_err(StoreError::corrupt)?,
            display_name: self.display_name,
            name: self.name,
            latest_version_id: SkillVersionId::parse(&self.latest_version_id).map_err(StoreError::corrupt)?,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

struct VersionRow {
    id: String,
    skill_id: String,
    name: String,
    description: String,
    created_at: i64,
}
from_row!(VersionRow { id, skill_id, name, description, created_at });

impl Decode for VersionRow {
    type Out = StoredSkillVersion;
    fn decode(self) -> Result<StoredSkillVersion> {
        Ok(StoredSkillVersion {
            id: SkillVersionId::parse(&self.id).map_err(StoreError::corrupt)?,
            skill_id: SkillId::parse(&self.skill_id).map_err(StoreError::corrupt)?,
            name: self.name,
            description: self.description,
            created_at: Timestamp(self.created_at),
        })
    }
}

struct FileRow {
    path: String,
    executable: bool,
    bytes: Vec<u8>,
}
from_row!(FileRow { path, executable, bytes });

const SKILL_BY_ID: &str =
    "SELECT id, display_name, name, latest_version_id, created_at, updated_at FROM skills WHERE id = $1";

/// `$1,$2` keyset bound, `$3` limit.
const LIST_SKILLS: [&str; 2] = keyset_sql!(
    "SELECT id, display_name, name, latest_version_id, created_at, updated_at FROM skills WHERE",
    "",
    1,
    2,
    3
);

/// `$1` skill, `$2,$3` keyset bound, `$4` limit.
const LIST_VERSIONS: [&str; 2] = keyset_sql!(
    "SELECT id, skill_id, name, description, created_at FROM skill_versions WHERE skill_id = $1 AND",
    "",
    2,
    3,
    4
);

impl<E: Engine> SqlStore<E> {
    async fn insert_version(tx: &mut WriteTx<E>, skill: &SkillId, v: &NewSkillVersion, now: i64) -> Result<()> {
        query("INSERT INTO skill_versions (id, skill_id, name, description, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(v.id.as_str())
            .bind(skill.as_str())
            .bind(v.name.as_str())
            .bind(v.description.as_str())
            .bind(now)
            .execute(&mut **tx)
            .await?;
        for f in &v.files {
            query("INSERT INTO skill_files (version_id, path, executable, bytes) VALUES ($1, $2, $3, $4)")
                .bind(v.id.as_str())
                .bind(f.path.as_str())
                .bind(f.executable)
                .bind(f.bytes.as_slice())
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    async fn skill_in(tx: &mut WriteTx<E>, id: &SkillId) -> Result<StoredSkill> {
        query_as::<SkillRow>(SKILL_BY_ID).bind(id.as_str()).found(&mut **tx, "skill", id).await
    }
}

#[async_trait]
impl<E: Engine> Skills for SqlStore<E> {
    async fn create_skill(
        &self,
        id: &SkillId,
        display_name: &str,
        version: NewSkillVersion,
    ) -> Result<(StoredSkill, StoredSkillVersion)> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query(
            "INSERT INTO skills (id, display_name, name, latest_version_id, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(id.as_str())
        .bind(display_name)
        .bind(version.name.as_str())
        .bind(version.id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        Self::insert_version(&mut tx, id, &version, now).await?;
        let skill = Self::skill_in(&mut tx, id).await?;
        self.finish(tx, Hints::default()).await?;
        let stored = StoredSkillVersion {
            id: version.id,
            skill_id: id.clone(),
            name: version.name,
            description: version.description,
            created_at: Timestamp(now),
        };
        Ok((skill, stored))
    }

    async fn add_skill_version(&self, skill: &SkillId, version: NewSkillVersion) -> Result<StoredSkillVersion> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let current = Self::skill_in(&mut tx, skill).await?;
        if current.name != version.name {
            return Err(StoreError::Guard(Guard::SkillNameChanged {
                skill: skill.to_string(),
                expected: current.name,
                given: version.name,
            }));
        }
        Self::insert_version(&mut tx, skill, &version, now).await?;
        query("UPDATE skills SET latest_version_id = $2, updated_at = $3 WHERE id = $1")
            .bind(skill.as_str())
            .bind(version.id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(StoredSkillVersion {
            id: version.id,
            skill_id: skill.clone(),
            name: version.name,
            description: version.description,
            created_at: Timestamp(now),
        })
    }

    async fn get_skill(&self, id: &SkillId) -> Result<StoredSkill> {
        self.by_id::<SkillRow>(SKILL_BY_ID, "skill", id.as_str()).await
    }

    async fn list_skills(&self, page: &PageRequest) -> Result<Page<StoredSkill>> {
        self.list_page::<SkillRow>(page, LIST_SKILLS, []).await
    }

    async fn delete_skill(&self, id: &SkillId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        if !Self::deleted(&mut tx, "DELETE FROM skills WHERE id = $1 RETURNING id", id.as_str()).await? {
            return Err(StoreError::not_found("skill", id));
        }
        query("DELETE FROM skill_files WHERE version_id IN (SELECT id FROM skill_versions WHERE skill_id = $1)")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        query("DELETE FROM skill_versions WHERE skill_id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await
    }

    async fn get_skill_version(&self, skill: &SkillId, version: &str) -> Result<StoredSkillVersion> {
        let mut conn = self.reader().await?;
        let row = if version == "latest" {
            query_as::<VersionRow>(
                "SELECT v.id, v.skill_id, v.name, v.description, v.created_at FROM skill_versions v \
                 JOIN skills s ON s.latest_version_id = v.id WHERE s.id = $1",
            )
            .bind(skill.as_str())
            .maybe(&mut *conn)
            .await?
        } else {
            query_as::<VersionRow>(
                "SELECT id, skill_id, name, description, created_at FROM skill_versions WHERE skill_id = $1 AND id = $2",
            )
            .bind(skill.as_str())
            .bind(version)
            .maybe(&mut *conn)
            .await?
        };
        row.ok_or_else(|| StoreError::not_found("skill version", format!("{skill}/{version}")))
    }

    async fn list_skill_versions(&self, skill: &SkillId, page: &PageRequest) -> Result<Page<StoredSkillVersion>> {
        self.get_skill(skill).await?;
        self.list_page::<VersionRow>(page, LIST_VERSIONS, [Arg::from(skill.as_str())]).await
    }

    async fn delete_skill_version(&self, skill: &SkillId, version: &SkillVersionId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        Self::skill_in(&mut tx, skill).await?;
        let gone = query_as::<(String,)>("DELETE FROM skill_versions WHERE skill_id = $1 AND id = $2 RETURNING id")
            .bind(skill.as_str())
            .bind(version.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if gone.is_none() {
            return Err(StoreError::not_found("skill version", format!("{skill}/{version}")));
        }
        let newest = query_as::<(String,)>(
            "SELECT id FROM skill_versions WHERE skill_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .bind(skill.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((newest,)) = newest else {
            // Dropped without `finish`: nothing changes.
            return Err(StoreError::Guard(Guard::LastSkillVersion {
                skill: skill.to_string(),
                version: version.to_string(),
            }));
        };
        query("DELETE FROM skill_files WHERE version_id = $1").bind(version.as_str()).execute(&mut *tx).await?;
        query("UPDATE skills SET latest_version_id = $2, updated_at = $3 WHERE id = $1")
            .bind(skill.as_str())
            .bind(newest)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await
    }

    async fn skill_files(&self, version: &SkillVersionId) -> Result<Vec<SkillFile>> {
        let rows =
            query_as::<FileRow>("SELECT path, executable, bytes FROM skill_files WHERE version_id = $1 ORDER BY path")
                .bind(version.as_str())
                .fetch_all(&mut *self.reader().await?)
                .await?;
        Ok(rows.into_iter().map(|r| SkillFile { path: r.path, executable: r.executable, bytes: r.bytes }).collect())
    }
}
