//! Custom skills: a name and immutable versions, each with its files (docs/adr/0017).

use async_trait::async_trait;
use gateway_core::{SkillId, SkillVersionId, Timestamp};

use crate::error::Result;
use crate::{Page, PageRequest};

/// One file of a skill version, at `path` relative to the skill's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    pub path: String,
    pub executable: bool,
    pub bytes: Vec<u8>,
}

/// A version to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSkillVersion {
    pub id: SkillVersionId,
    /// The skill's slug: every version of a skill has the same.
    pub name: String,
    pub description: String,
    pub files: Vec<SkillFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSkill {
    pub id: SkillId,
    pub display_name: String,
    pub name: String,
    pub latest_version_id: SkillVersionId,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSkillVersion {
    pub id: SkillVersionId,
    pub skill_id: SkillId,
    pub name: String,
    pub description: String,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait Skills: Send + Sync {
    /// Creates the skill with its first version, in one transaction.
    async fn create_skill(
        &self,
        id: &SkillId,
        display_name: &str,
        version: NewSkillVersion,
    ) -> Result<(StoredSkill, StoredSkillVersion)>;
    /// Adds a version, which becomes the latest. Its name must be the skill's
    /// (`Guard::SkillNameChanged`).
    async fn add_skill_version(&self, skill: &SkillId, version: NewSkillVersion) -> Result<StoredSkillVersion>;
    async fn get_skill(&self, id: &SkillId) -> Result<StoredSkill>;
    /// Oldest first unless `page.order` says otherwise.
    async fn list_skills(&self, page: &PageRequest) -> Result<Page<StoredSkill>>;
    /// Deletes the skill with every version.
    async fn delete_skill(&self, id: &SkillId) -> Result<()>;
    /// A version by id, or the latest for `"latest"`.
    async fn get_skill_version(&self, skill: &SkillId, version: &str) -> Result<StoredSkillVersion>;
    /// Newest first unless `page.order` says otherwise.
    async fn list_skill_versions(&self, skill: &SkillId, page: &PageRequest) -> Result<Page<StoredSkillVersion>>;
    /// Deletes a version; the skill's only version cannot be (`Guard::LastSkillVersion`).
    async fn delete_skill_version(&self, skill: &SkillId, version: &SkillVersionId) -> Result<()>;
    /// A version's files, by path.
    async fn skill_files(&self, version: &SkillVersionId) -> Result<Vec<SkillFile>>;
}
