//! The Coordinator's side of a session's mounted inputs: resources added, removed and
//! re-placed; skills resolved and frozen; uploads begun (docs/adr/0017). Placing them in a
//! workspace is the environments' (`crate::environment`).

use std::sync::Arc;

use gateway_core::agent::{AgentSpec, ResolvedSkill};
use gateway_core::placement::place;
use gateway_core::session::{Resource, ResourceKind, Secret, Session};
use gateway_core::{ResourceId, SessionId, SkillId, Timestamp};
use gateway_store::{StoreError, StoredSkill, StoredSkillVersion};

use super::{Coordinator, local_inputs};
use crate::error::{Guard, Result, RuntimeError};
use gateway_services::files::FileUpload;

impl Coordinator {
    /// Adds a resource to a session (frozen like those it was created with: placement runs
    /// again for the whole set, so a mount on a session that could not honour it is refused).
    /// A new mount is placed before the next turn that runs.
    pub async fn add_resource(&self, session: &SessionId, kind: ResourceKind) -> Result<(Session, ResourceId)> {
        if matches!(kind, ResourceKind::Workspace { .. }) {
            return Err(RuntimeError::Invalid("a workspace is given when a session is created".into()));
        }
        let mut kind = kind;
        self.seal_tokens([&mut kind]);
        let id = ResourceId::new();
        let resource = Resource { id: id.clone(), kind, created_at: Timestamp(0) };
        let session = self.change_resources(session, |resources| resources.push(resource.clone())).await?;
        Ok((session, id))
    }

    /// Removes a resource from a session. Its file may be deleted from then on; a copy already
    /// placed in a realized workspace stays there (the workspace is the session's own).
    pub async fn remove_resource(&self, session: &SessionId, resource: &ResourceId) -> Result<Session> {
        let current = self.store.get_session(session).await?;
        if !current.snapshot.resources.iter().any(|r| &r.id == resource) {
            return Err(RuntimeError::NotFound { kind: "session resource", id: resource.to_string() });
        }
        self.change_resources(session, |resources| resources.retain(|r| &r.id != resource)).await
    }

    /// Replaces the token a repository resource is checked out with (used by the next
    /// checkout; one already in the workspace is not fetched again).
    pub async fn set_repository_token(
        &self,
        session: &SessionId,
        resource: &ResourceId,
        token: Secret,
    ) -> Result<Session> {
        let current = self.store.get_session(session).await?;
        match current.snapshot.resources.iter().find(|r| &r.id == resource).map(|r| &r.kind) {
            None => return Err(RuntimeError::NotFound { kind: "session resource", id: resource.to_string() }),
            Some(ResourceKind::Repository { .. }) => {}
            Some(_) => {
                return Err(RuntimeError::Invalid(format!(
                    "resource {resource} is not a repository; only a repository's authorization_token can be updated"
                )));
            }
        }
        self.change_resources(session, |resources| {
            for r in resources.iter_mut().filter(|r| &r.id == resource) {
                if let ResourceKind::Repository { authorization_token, .. } = &mut r.kind {
                    *authorization_token = Some(token.clone());
                }
                self.seal_tokens([&mut r.kind]);
            }
        })
        .await
    }

    /// Whether repository URLs may name non-public hosts (`environments.allow_private_repositories`;
    /// off where this process has no environments).
    pub(super) fn allow_private_repositories(&self) -> bool {
        self.environments.as_ref().is_some_and(|e| e.config().checkout.allow_private_repositories)
    }

    /// Repository tokens are stored sealed (`Environments::seal_tokens`).
    pub(super) fn seal_tokens<'a>(&self, resources: impl IntoIterator<Item = &'a mut ResourceKind>) {
        if let Some(envs) = &self.environments {
            envs.seal_tokens(resources);
        }
    }

    /// Applies `change` to the session's resources, re-places the session for the new set and
    /// stores both by compare-and-set, reading again if another change came first.
    async fn change_resources(&self, id: &SessionId, change: impl Fn(&mut Vec<Resource>)) -> Result<Session> {
        let mut attempts = 0;
        loop {
            let current = self.store.get_session(id).await?;
            let base: Vec<ResourceId> = current.snapshot.resources.iter().map(|r| r.id.clone()).collect();
            let mut resources = current.snapshot.resources.clone();
            change(&mut resources);
            let kinds: Vec<ResourceKind> = resources.iter().map(|r| r.kind.clone()).collect();
            let environment = self.store.get_environment(&current.environment_id).await?;
            let agent = &current.snapshot.agent;
            let inputs = local_inputs(&agent.spec, &kinds);
            let requirements = place(&agent.spec.backend, &environment.spec.config, &inputs, &self.offer)?;
            check_resources(&kinds, self.allow_private_repositories())?;
            check_skill_places(&agent.spec, &kinds)?;
            match self.store.set_resources(id, &base, resources, requirements).await {
                Err(StoreError::Guard(Guard::ResourcesChanged(_))) if attempts < 3 => attempts += 1,
                other => return Ok(other?),
            }
        }
    }

    /// Freezes which version each of the agent's skills is for this session (`latest`
    /// resolved now), with the name and description the session will use. A skill or version
    /// that does not exist is not found. Skills are placed in the session's workspace, so a
    /// session whose workspace is a client's own directory gets none.
    pub(super) async fn resolve_skills(&self, agent: &mut AgentSpec, resources: &[ResourceKind]) -> Result<()> {
        if agent.skills.is_empty() {
            return Ok(());
        }
        if resources.iter().any(|r| matches!(r, ResourceKind::Workspace { .. })) {
            return Err(RuntimeError::Invalid(
                "an agent with skills cannot work in a client's own directory: its skills would be written there"
                    .into(),
            ));
        }
        for skill in &mut agent.skills {
            let not_found = || RuntimeError::NotFound { kind: "skill", id: skill.skill_id.clone() };
            let id = SkillId::parse(&skill.skill_id).map_err(|_| not_found())?;
            let version = match self.store.get_skill_version(&id, &skill.version).await {
                Err(StoreError::NotFound { .. }) => {
                    return Err(RuntimeError::NotFound {
                        kind: "skill version",
                        id: format!("{}/{}", skill.skill_id, skill.version),
                    });
                }
                other => other?,
            };
            skill.resolved = Some(ResolvedSkill {
                version_id: version.id.to_string(),
                name: version.name,
                description: version.description,
            });
        }
        check_skill_places(agent, resources)
    }

    // ---- skills ----

    /// Custom skills and their versions (reads and deletes).
    pub fn skills(&self) -> &dyn gateway_store::Skills {
        self.store.as_ref()
    }

    /// Creates a skill from its uploaded files (`(path, bytes)`), named by its `SKILL.md`;
    /// `display_name` defaults to that name.
    pub async fn create_skill(
        &self,
        display_name: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(StoredSkill, StoredSkillVersion)> {
        let version = gateway_services::skills::version_of(files).map_err(|e| RuntimeError::Invalid(e.0))?;
        let display_name = display_name.unwrap_or_else(|| version.name.clone());
        Ok(self.store.create_skill(&SkillId::new(), &display_name, version).await?)
    }

    /// Adds a version of a skill from its uploaded files; it becomes the latest.
    pub async fn add_skill_version(
        &self,
        skill: &SkillId,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<StoredSkillVersion> {
        let version = gateway_services::skills::version_of(files).map_err(|e| RuntimeError::Invalid(e.0))?;
        Ok(self.store.add_skill_version(skill, version).await?)
    }

    // ---- files ----

    /// Uploaded files: metadata, content and deletion.
    pub fn files(&self) -> &dyn gateway_store::Files {
        self.store.as_ref()
    }

    /// Starts an upload, bounded by `[files]`.
    pub fn upload(&self) -> FileUpload {
        FileUpload::new(Arc::clone(&self.store) as _, &self.options.files)
    }
}

/// Every mount of a session at a place of its own (`gateway_core::mounts`), none in a
/// client's own directory, and repositories git may be given (`checkout::repository_url`:
/// http or https, no credentials, written as they are read, no literal non-public host unless
/// `allow_private`; a branch or commit git reads as one). Which addresses a host name reaches
/// is checked when the checkout runs.
pub(super) fn check_resources(resources: &[ResourceKind], allow_private: bool) -> Result<()> {
    if resources.len() > gateway_core::session::MAX_RESOURCES {
        let max = gateway_core::session::MAX_RESOURCES;
        return Err(RuntimeError::Invalid(format!("a session has at most {max} resources")));
    }
    let client_dir = resources.iter().any(|r| matches!(r, ResourceKind::Workspace { .. }));
    if client_dir && resources.iter().any(|r| !matches!(r, ResourceKind::Workspace { .. })) {
        // The workspace is the client's own directory (an editor's `cwd`): never written to.
        return Err(RuntimeError::Invalid(
            "files and repositories cannot be mounted into a session whose workspace is the client's own directory"
                .into(),
        ));
    }
    for r in resources {
        if let ResourceKind::Workspace { path, additional, .. } = r {
            gateway_core::mounts::check_extra_roots(path, additional.iter().map(|e| e.path.as_str()))
                .map_err(|e| RuntimeError::Invalid(e.to_string()))?;
        }
    }
    let paths = resources.iter().filter_map(|r| match r {
        ResourceKind::File { mount_path, .. } | ResourceKind::Repository { mount_path, .. } => {
            Some(mount_path.as_str())
        }
        ResourceKind::Workspace { .. } => None,
    });
    gateway_core::mounts::check_all(paths).map_err(|e| RuntimeError::Invalid(e.to_string()))?;
    for r in resources {
        if let ResourceKind::Repository { url, checkout, .. } = r {
            // The error never echoes the URL: one refused for holding credentials would show them.
            gateway_services::checkout::repository_url(url, allow_private)
                .map_err(|e| RuntimeError::Invalid(e.to_string()))?;
            if let Some(checkout) = checkout {
                gateway_services::checkout::check_checkout(checkout)
                    .map_err(|e| RuntimeError::Invalid(e.to_string()))?;
            }
        }
    }
    Ok(())
}

/// An agent names each skill once: two references to one skill would be placed at one
/// `skills/<name>/`, the second silently hidden (names of different skills are checked when
/// a session resolves them, `check_skill_places`).
pub(super) fn check_skill_refs(agent: &AgentSpec) -> Result<()> {
    for (i, skill) in agent.skills.iter().enumerate() {
        if agent.skills[..i].iter().any(|s| s.skill_id == skill.skill_id) {
            return Err(RuntimeError::Invalid(format!("skill {} is given twice", skill.skill_id)));
        }
    }
    Ok(())
}

/// No two of the agent's (resolved) skills share a name, and no mount lands where one of
/// them is placed.
fn check_skill_places(agent: &AgentSpec, resources: &[ResourceKind]) -> Result<()> {
    let names: Vec<&str> = agent.skills.iter().filter_map(|s| s.resolved.as_ref()).map(|r| r.name.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let paths = resources.iter().filter_map(|r| match r {
        ResourceKind::File { mount_path, .. } | ResourceKind::Repository { mount_path, .. } => {
            Some(mount_path.as_str())
        }
        ResourceKind::Workspace { .. } => None,
    });
    gateway_core::mounts::check_skill_places(paths, &names).map_err(|e| RuntimeError::Invalid(e.to_string()))
}
