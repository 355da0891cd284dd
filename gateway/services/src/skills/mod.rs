//! Custom skills as uploaded: a directory of files with a `SKILL.md` at its root, whose
//! frontmatter names and describes the skill (docs/adr/0017).
//!
//! A multipart upload carries no file modes, so a file is executable when its content starts
//! with `#!` (a script meant to be run); everything else is 0644. That is the rule the
//! Managed Agents documentation's examples follow, and it never makes data executable.

use gateway_core::SkillVersionId;
use gateway_store::{NewSkillVersion, SkillFile};

/// The most bytes of all of a version's files together (the Managed Agents API's own limit).
pub const MAX_SKILL_BYTES: usize = 8 * 1024 * 1024;
/// The most files one version may have.
pub const MAX_SKILL_FILES: usize = 1000;
const MAX_NAME: usize = 64;
const MAX_DESCRIPTION: usize = 1024;
const MAX_PATH: usize = 1024;

/// Why an upload is not a skill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SkillError(pub String);

fn bad(message: impl Into<String>) -> SkillError {
    SkillError(message.into())
}

/// Makes a version of `files` (`(path, bytes)` as uploaded: every path under one top-level
/// directory, `SKILL.md` directly in it). Paths are kept relative to that directory.
pub fn version_of(files: Vec<(String, Vec<u8>)>) -> Result<NewSkillVersion, SkillError> {
    if files.is_empty() || files.len() > MAX_SKILL_FILES {
        return Err(bad(format!("a skill has 1 to {MAX_SKILL_FILES} files")));
    }
    if files.iter().map(|(_, b)| b.len()).sum::<usize>() > MAX_SKILL_BYTES {
        return Err(bad(format!("a skill's files hold at most {MAX_SKILL_BYTES} bytes in all")));
    }
    let mut top: Option<String> = None;
    let mut out: Vec<SkillFile> = Vec::with_capacity(files.len());
    for (raw, bytes) in files {
        let plain_top = raw.len() <= MAX_PATH
            && raw
                .split_once('/')
                .is_some_and(|(t, _)| !t.is_empty() && t != "." && t != ".." && !t.contains(['\\', '\0']));
        let Some((first, path)) = raw.split_once('/').filter(|_| plain_top) else {
            return Err(bad(format!(
                "file {:?}: every path must be a plain relative path inside the skill's one top-level directory",
                raw.chars().take(200).collect::<String>()
            )));
        };
        match &top {
            None => top = Some(first.to_owned()),
            Some(t) if t != first => return Err(bad("all files must be in the same top-level directory")),
            Some(_) => {}
        }
        out.push(SkillFile { executable: bytes.starts_with(b"#!"), path: path.to_owned(), bytes });
    }
    // The placement's own rule (`gateway_core::mounts::check_tree`): what is accepted here
    // can be written at `skills/<name>/`.
    gateway_core::mounts::check_tree(out.iter().map(|f| f.path.as_str())).map_err(|e| bad(e.to_string()))?;
    let top = top.unwrap_or_default();
    let manifest =
        out.iter().find(|f| f.path == "SKILL.md").ok_or_else(|| bad("the skill has no SKILL.md at its root"))?;
    let text = std::str::from_utf8(&manifest.bytes).map_err(|_| bad("SKILL.md is not UTF-8 text"))?;
    let (name, description) = frontmatter(text)?;
    let name = name.unwrap_or(top);
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(bad(format!(
            "the skill's name {name:?} must be 1 to {MAX_NAME} lowercase letters, digits and hyphens"
        )));
    }
    let description = description.ok_or_else(|| bad("SKILL.md's frontmatter has no description"))?;
    if description.is_empty() || description.len() > MAX_DESCRIPTION {
        return Err(bad(format!("the skill's description must be 1 to {MAX_DESCRIPTION} bytes")));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(NewSkillVersion { id: SkillVersionId::new(), name, description, files: out })
}

/// `name` and `description` from a `---`-delimited frontmatter of `key: value` lines.
fn frontmatter(text: &str) -> Result<(Option<String>, Option<String>), SkillError> {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(bad("SKILL.md must start with a frontmatter (`---`, `name:`, `description:`, `---`)"));
    }
    let (mut name, mut description) = (None, None);
    for line in lines {
        if line.trim_end() == "---" {
            return Ok((name, description));
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'').to_owned();
        match key.trim() {
            "name" => name = Some(value),
            "description" => description = Some(value),
            _ => {}
        }
    }
    Err(bad("SKILL.md's frontmatter is not closed with `---`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill_md(name: &str) -> Vec<u8> {
        format!("---\nname: {name}\ndescription: \"Says hello\"\n---\n# Greeter\nRun scripts/hello.sh\n").into_bytes()
    }

    #[test]
    fn a_directory_with_a_manifest_becomes_a_version() {
        let v = version_of(vec![
            ("greeter/SKILL.md".into(), skill_md("greeter")),
            ("greeter/scripts/hello.sh".into(), b"#!/bin/sh\necho hi\n".to_vec()),
            ("greeter/data.txt".into(), b"not a script".to_vec()),
        ])
        .unwrap();
        assert_eq!((v.name.as_str(), v.description.as_str()), ("greeter", "Says hello"));
        let modes: Vec<(&str, bool)> = v.files.iter().map(|f| (f.path.as_str(), f.executable)).collect();
        assert_eq!(modes, vec![("SKILL.md", false), ("data.txt", false), ("scripts/hello.sh", true)]);
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        let md = skill_md("greeter");
        for (files, why) in [
            (vec![("SKILL.md".to_owned(), md.clone())], "top-level directory"),
            (vec![("a/SKILL.md".into(), md.clone()), ("b/x".into(), vec![])], "same top-level"),
            (vec![("a/../SKILL.md".into(), md.clone())], "plain relative"),
            (vec![("a/x.txt".into(), vec![])], "no SKILL.md"),
            (vec![("a/SKILL.md".into(), b"no frontmatter".to_vec())], "frontmatter"),
            (vec![("a/SKILL.md".into(), skill_md("Bad Name"))], "lowercase"),
            (vec![("a/SKILL.md".into(), md.clone()), ("a/SKILL.md".into(), md.clone())], "twice"),
            (vec![("a/SKILL.md".into(), md.clone()), ("a/big".into(), vec![0; MAX_SKILL_BYTES])], "at most"),
            // Finding 12: versions the placement could never write.
            (vec![("a/SKILL.md".into(), md.clone()), ("a/x".into(), vec![]), ("a/x/y".into(), vec![])], "is a file"),
            (vec![("a/SKILL.md".into(), md.clone()), (format!("a/{}", "n".repeat(300)), vec![])], "longer than 255"),
            (vec![("a/SKILL.md".into(), md.clone()), ("a/SKILL.md/x".into(), vec![])], "is a file"),
            (vec![("a/SKILL.md".into(), md.clone()), ("a/b//c".into(), vec![])], "plain relative"),
            (vec![("a/SKILL.md".into(), md.clone()), ("a/".into(), vec![])], "plain relative"),
        ] {
            let err = version_of(files).unwrap_err();
            assert!(err.0.contains(why), "{why}: {err}");
        }
    }
}
