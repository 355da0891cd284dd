//! Where a session's mounted inputs (uploaded files, repositories) live in its workspace.
//!
//! Clients name a mount by the path a sandboxed process sees (`mount_path`): a path under
//! [`WORKSPACE_VIEW`], or under [`SESSION_MOUNTS`] (the Managed Agents default for files is
//! `/mnt/session/uploads/<file_id>`). Every mount is materialized *inside* the session's
//! workspace directory, so that one directory holds everything a session has (it is what a
//! sandbox binds, what an ACP agent gets as `cwd`, what release removes): `/workspace/a/b` is
//! `a/b` in the workspace, `/mnt/session/a` is `mnt/session/a`. The `namespace` sandbox shows
//! `/mnt/session` at its absolute path too; the `local` one cannot, so the model is told the
//! real path there (ADR 0017). This module is the one place that mapping is decided.

use std::path::{Component, Path, PathBuf};

/// Where sandboxed processes see the workspace.
pub const WORKSPACE_VIEW: &str = "/workspace";
/// Where sandboxed processes see session mounts outside the workspace view.
pub const SESSION_MOUNTS: &str = "/mnt/session";
/// Where [`SESSION_MOUNTS`] is inside the workspace directory.
pub const SESSION_MOUNTS_IN_WORKSPACE: &str = "mnt/session";
/// Where an agent's skills are placed in the workspace: `skills/<name>/`.
pub const SKILLS_IN_WORKSPACE: &str = "skills";
/// Longest accepted `mount_path`, in bytes.
pub const MAX_MOUNT_PATH: usize = 1024;

/// A `mount_path` this gateway cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountPathError {
    #[error(
        "mount_path {0:?} must be an absolute path under {WORKSPACE_VIEW}/ or {SESSION_MOUNTS}/ without `.` or `..` components (at most {MAX_MOUNT_PATH} bytes)"
    )]
    Outside(String),
    #[error("mount_path {0:?} is used by two resources")]
    Duplicate(String),
    #[error("mount_path {inner:?} lies inside the mount {outer:?}")]
    Nested { outer: String, inner: String },
    #[error("mount_path {0:?} is where the agent's skill {1:?} is placed ({SKILLS_IN_WORKSPACE}/{1}/)")]
    SkillPlace(String, String),
}

/// Where the skill `name` is placed, relative to the workspace.
pub fn skill_relative(name: &str) -> PathBuf {
    Path::new(SKILLS_IN_WORKSPACE).join(name)
}

/// Checks that no mount lands on, inside or above the place of one of `skills` (by name).
pub fn check_skill_places<'a>(
    mount_paths: impl IntoIterator<Item = &'a str>,
    skills: &[&str],
) -> Result<(), MountPathError> {
    for raw in mount_paths {
        let rel = workspace_relative(raw)?;
        for name in skills {
            let place = skill_relative(name);
            if rel.starts_with(&place) || place.starts_with(&rel) {
                return Err(MountPathError::SkillPlace(raw.to_owned(), (*name).to_owned()));
            }
        }
    }
    Ok(())
}

/// The place of `mount_path` relative to the workspace directory. Refuses anything that is not
/// a plain absolute path strictly below one of the two roots.
pub fn workspace_relative(mount_path: &str) -> Result<PathBuf, MountPathError> {
    let outside = || MountPathError::Outside(mount_path.to_owned());
    if mount_path.len() > MAX_MOUNT_PATH || mount_path.contains('\0') || !mount_path.starts_with('/') {
        return Err(outside());
    }
    // `Path::components` drops `.` and repeated slashes silently; a client path with them is
    // refused rather than reinterpreted.
    if mount_path.split('/').skip(1).any(|part| part.is_empty() || part == "." || part == "..") {
        return Err(outside());
    }
    let path = Path::new(mount_path);
    if !path.components().skip(1).all(|c| matches!(c, Component::Normal(_))) {
        return Err(outside());
    }
    if let Ok(rest) = path.strip_prefix(WORKSPACE_VIEW)
        && rest.components().next().is_some()
    {
        return Ok(rest.to_path_buf());
    }
    if let Ok(rest) = path.strip_prefix(SESSION_MOUNTS)
        && rest.components().next().is_some()
    {
        return Ok(Path::new(SESSION_MOUNTS_IN_WORKSPACE).join(rest));
    }
    Err(outside())
}

/// Checks a session's mount paths together: each valid, none used twice, none inside another
/// (a file cannot also be a directory).
pub fn check_all<'a>(mount_paths: impl IntoIterator<Item = &'a str>) -> Result<(), MountPathError> {
    let mut seen: Vec<(PathBuf, &str)> = Vec::new();
    for raw in mount_paths {
        let rel = workspace_relative(raw)?;
        for (other, other_raw) in &seen {
            if *other == rel {
                return Err(MountPathError::Duplicate(raw.to_owned()));
            }
            if rel.starts_with(other) {
                return Err(MountPathError::Nested { outer: (*other_raw).to_owned(), inner: raw.to_owned() });
            }
            if other.starts_with(&rel) {
                return Err(MountPathError::Nested { outer: raw.to_owned(), inner: (*other_raw).to_owned() });
            }
        }
        seen.push((rel, raw));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_roots_map_into_the_workspace() {
        assert_eq!(workspace_relative("/workspace/data/a.txt").unwrap(), Path::new("data/a.txt"));
        assert_eq!(workspace_relative("/mnt/session/uploads/file_1").unwrap(), Path::new("mnt/session/uploads/file_1"));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "relative/a",
            "/workspace",
            "/workspace/",
            "/mnt/session",
            "/etc/passwd",
            "/workspace/../etc/passwd",
            "/workspace/./a",
            "/workspace//a",
            "/workspace/a/",
            "/mnt/sessionx/a",
            "/workspacex/a",
            "/workspace/a\0b",
        ] {
            assert!(workspace_relative(bad).is_err(), "{bad:?} accepted");
        }
        assert!(workspace_relative(&format!("/workspace/{}", "a".repeat(MAX_MOUNT_PATH))).is_err());
    }

    #[test]
    fn a_session_cannot_mount_twice_at_one_place_or_inside_a_file() {
        assert!(check_all(["/workspace/a", "/workspace/b", "/mnt/session/a"]).is_ok());
        assert_eq!(check_all(["/workspace/a", "/workspace/a"]), Err(MountPathError::Duplicate("/workspace/a".into())));
        assert!(matches!(check_all(["/workspace/a", "/workspace/a/b"]), Err(MountPathError::Nested { .. })));
        assert!(matches!(check_all(["/workspace/a/b", "/workspace/a"]), Err(MountPathError::Nested { .. })));
        // `/workspace/mnt/session/x` and `/mnt/session/x` are one place in the workspace.
        assert!(check_all(["/workspace/mnt/session/x", "/mnt/session/x"]).is_err());
    }

    #[test]
    fn mounts_keep_off_the_places_of_skills() {
        assert!(check_skill_places(["/workspace/skills-data", "/workspace/skills/other"], &["greeter"]).is_ok());
        for bad in ["/workspace/skills/greeter", "/workspace/skills/greeter/x", "/workspace/skills"] {
            assert!(matches!(check_skill_places([bad], &["greeter"]), Err(MountPathError::SkillPlace(..))), "{bad}");
        }
    }
}
