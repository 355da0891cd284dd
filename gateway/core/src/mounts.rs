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
/// Longest name one path component may have (Linux `NAME_MAX`): a longer one cannot be
/// created on any filesystem the gateway writes to.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest accepted path of a file in a tree placed in the workspace (a skill's), in bytes.
pub const MAX_TREE_PATH: usize = 1024;

/// Most additional directories a client workspace may have.
pub const MAX_EXTRA_ROOTS: usize = 16;

/// Where an additional directory may not be: the system directories a sandbox builds its own
/// view of (a bind there would hide or be hidden by them), and the session's own views.
const RESERVED_ROOTS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    WORKSPACE_VIEW,
    SESSION_MOUNTS,
];

/// An additional directory of a client workspace this gateway cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraRootError {
    #[error("additional directory {0:?} must be an absolute path without `.` or `..` components")]
    NotAbsolute(String),
    #[error("additional directory {0:?} is a system directory (or lies in one) that sandboxes provide themselves")]
    Reserved(String),
    #[error("additional directory {inner:?} lies inside {outer:?} (the workspace or another additional directory)")]
    Nested { outer: String, inner: String },
    #[error("a session takes at most {MAX_EXTRA_ROOTS} additional directories")]
    TooMany,
}

/// Checks a client workspace's additional directories against its own directory `primary` and
/// each other: absolute and plain, none a system directory, none inside another or holding
/// one (a directory is seen once, at one place). Every sandbox shows each at its own absolute
/// path, so this one rule decides what a session may be given.
pub fn check_extra_roots<'a>(primary: &str, extra: impl IntoIterator<Item = &'a str>) -> Result<(), ExtraRootError> {
    let extra: Vec<&str> = extra.into_iter().collect();
    if extra.len() > MAX_EXTRA_ROOTS {
        return Err(ExtraRootError::TooMany);
    }
    // Written as it is read: `/` then plain names (no empty, `.` or `..` ones).
    let plain = |p: &str| {
        p.len() <= MAX_MOUNT_PATH
            && !p.contains('\0')
            && p.strip_prefix('/').is_some_and(|rest| rest.split('/').all(|c| !c.is_empty() && c != "." && c != ".."))
    };
    let mut seen: Vec<&str> = vec![primary];
    for p in extra {
        if !plain(p) {
            return Err(ExtraRootError::NotAbsolute(p.chars().take(200).collect()));
        }
        if RESERVED_ROOTS.iter().any(|r| Path::new(p).starts_with(r)) {
            return Err(ExtraRootError::Reserved(p.to_owned()));
        }
        for other in &seen {
            let (a, b) = (Path::new(p), Path::new(other));
            if a.starts_with(b) {
                return Err(ExtraRootError::Nested { outer: (*other).to_owned(), inner: p.to_owned() });
            }
            if b.starts_with(a) {
                return Err(ExtraRootError::Nested { outer: p.to_owned(), inner: (*other).to_owned() });
            }
        }
        seen.push(p);
    }
    Ok(())
}

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
    #[error(
        "two of the agent's skills are named {0:?}; each is placed at {SKILLS_IN_WORKSPACE}/<name>/, so one would hide the other"
    )]
    SkillName(String),
}

/// A tree of files (a skill version's) that cannot be written under one directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error(
        "file {0:?}: every path must be a plain relative path (no empty, `.` or `..` components, no NUL or backslash) of at most {MAX_TREE_PATH} bytes"
    )]
    NotPlain(String),
    #[error("file {0:?}: a path component is longer than {MAX_NAME_BYTES} bytes")]
    LongName(String),
    #[error("file {0:?} is given twice")]
    Duplicate(String),
    #[error("{file:?} is a file, so {inner:?} cannot be inside it")]
    FileAndDirectory { file: String, inner: String },
}

/// Checks the relative paths of files to be written under one directory (a skill's, at
/// `skills/<name>/`): each plain and short enough, each component a name a filesystem takes,
/// none given twice, none both a file and a directory of another. The one rule both the
/// upload of a version and its placement apply, so a version that is accepted can be placed.
pub fn check_tree<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<(), TreeError> {
    let paths: Vec<&str> = paths.into_iter().collect();
    let mut files = std::collections::HashSet::with_capacity(paths.len());
    // Every directory some file needs, and one file that needs it.
    let mut dirs: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for path in &paths {
        let parts: Vec<&str> = path.split('/').collect();
        let plain = path.len() <= MAX_TREE_PATH
            && parts.iter().all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains(['\\', '\0']));
        if !plain {
            return Err(TreeError::NotPlain(path.chars().take(200).collect()));
        }
        if parts.iter().any(|p| p.len() > MAX_NAME_BYTES) {
            return Err(TreeError::LongName(path.chars().take(200).collect()));
        }
        if !files.insert(*path) {
            return Err(TreeError::Duplicate((*path).to_owned()));
        }
        let mut end = 0;
        for part in &parts[..parts.len() - 1] {
            end += part.len();
            dirs.entry(&path[..end]).or_insert(path);
            end += 1;
        }
    }
    for path in &paths {
        if let Some(inner) = dirs.get(path) {
            return Err(TreeError::FileAndDirectory { file: (*path).to_owned(), inner: (*inner).to_owned() });
        }
    }
    Ok(())
}

/// Where the skill `name` is placed, relative to the workspace.
pub fn skill_relative(name: &str) -> PathBuf {
    Path::new(SKILLS_IN_WORKSPACE).join(name)
}

/// Checks that no two of `skills` (by name) share a place, and that no mount lands on,
/// inside or above the place of one of them.
pub fn check_skill_places<'a>(
    mount_paths: impl IntoIterator<Item = &'a str>,
    skills: &[&str],
) -> Result<(), MountPathError> {
    for (i, name) in skills.iter().enumerate() {
        if skills[..i].contains(name) {
            return Err(MountPathError::SkillName((*name).to_owned()));
        }
    }
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
    #[test]
    fn additional_directories_are_plain_apart_and_not_system_directories() {
        assert_eq!(check_extra_roots("/home/u/app", ["/home/u/lib", "/srv/data", "/tmp/x"]), Ok(()));
        assert!(
            check_extra_roots("/home/u/app", ["/home/u/app/sub"])
                .is_err_and(|e| matches!(e, ExtraRootError::Nested { .. }))
        );
        assert!(
            check_extra_roots("/home/u/app/sub", ["/home/u/app"])
                .is_err_and(|e| matches!(e, ExtraRootError::Nested { .. }))
        );
        assert!(check_extra_roots("/a", ["/b", "/b"]).is_err_and(|e| matches!(e, ExtraRootError::Nested { .. })));
        // A prefix of the text is not a parent directory.
        assert_eq!(check_extra_roots("/home/u/app", ["/home/u/apple"]), Ok(()));
        for reserved in ["/usr/local/src", "/etc", "/proc/1", "/workspace/x", "/mnt/session/a", "/lib64"] {
            assert_eq!(check_extra_roots("/home/u/app", [reserved]), Err(ExtraRootError::Reserved(reserved.into())));
        }
        for bad in ["relative", "/", "/a/../b", "/a/./b", "/a//b", "/a/", ""] {
            assert!(
                check_extra_roots("/home/u/app", [bad]).is_err_and(|e| matches!(e, ExtraRootError::NotAbsolute(_))),
                "{bad}"
            );
        }
        let many: Vec<String> = (0..=MAX_EXTRA_ROOTS).map(|i| format!("/d{i}")).collect();
        assert_eq!(check_extra_roots("/w", many.iter().map(String::as_str)), Err(ExtraRootError::TooMany));
    }

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

    /// Finding 12: trees the placement could never write are refused by the same rule.
    #[test]
    fn the_tree_table() {
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        let fits = "n".repeat(MAX_NAME_BYTES);
        let deep = format!("{}/f", "d/".repeat(MAX_TREE_PATH / 2));
        let long_path = format!("a/{long}");
        let fits_path = format!("a/{fits}");
        let rows: Vec<(Vec<&str>, Result<(), &str>)> = vec![
            (vec!["SKILL.md", "scripts/run.sh", "data/a/b.txt"], Ok(())),
            (vec!["SKILL.md", "x-y", "x/y"], Ok(())),
            (vec!["SKILL.md", &fits_path], Ok(())),
            (vec!["SKILL.md", "x", "x/y"], Err("is a file, so \"x/y\" cannot be inside it")),
            (vec!["x/y/z", "SKILL.md", "x/y"], Err("is a file, so \"x/y/z\"")),
            (vec!["SKILL.md", "SKILL.md/x"], Err("\"SKILL.md\" is a file")),
            (vec!["SKILL.md", &long_path], Err("longer than 255 bytes")),
            (vec!["SKILL.md", "a", "a"], Err("given twice")),
            (vec!["SKILL.md", "a//b"], Err("plain relative")),
            (vec!["SKILL.md", "a/./b"], Err("plain relative")),
            (vec!["SKILL.md", "../b"], Err("plain relative")),
            (vec!["SKILL.md", "/b"], Err("plain relative")),
            (vec!["SKILL.md", "a/"], Err("plain relative")),
            (vec!["SKILL.md", "a\\b"], Err("plain relative")),
            (vec!["SKILL.md", "a\0b"], Err("plain relative")),
            (vec!["SKILL.md", &deep], Err("plain relative")),
        ];
        for (paths, want) in rows {
            let got = check_tree(paths.iter().copied()).map_err(|e| e.to_string());
            match (&got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) if e.contains(w) => {}
                _ => panic!("{paths:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn two_skills_of_one_name_are_refused() {
        assert!(check_skill_places(std::iter::empty(), &["a", "b"]).is_ok());
        assert_eq!(
            check_skill_places(std::iter::empty(), &["a", "b", "a"]),
            Err(MountPathError::SkillName("a".into()))
        );
    }

    #[test]
    fn mounts_keep_off_the_places_of_skills() {
        assert!(check_skill_places(["/workspace/skills-data", "/workspace/skills/other"], &["greeter"]).is_ok());
        for bad in ["/workspace/skills/greeter", "/workspace/skills/greeter/x", "/workspace/skills"] {
            assert!(matches!(check_skill_places([bad], &["greeter"]), Err(MountPathError::SkillPlace(..))), "{bad}");
        }
    }
}
