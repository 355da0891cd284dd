//! Whole-text reads and writes for agents that edit files themselves (the ACP client methods
//! `fs/read_text_file` and `fs/write_text_file`), confined exactly like the file tools.
//!
//! Unlike the `read` tool, which shows numbered lines for a model, these return the raw text:
//! the agent writes it back. Errors are typed so a protocol adapter can tell "no such file"
//! (which agents use to decide whether to create one) from a refused path.

use std::io::Read;

use cap_std::fs::{OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

use super::read::read_bounded;
use super::{Workspace, check_regular, describe};
use crate::input::MAX_TEXT_BYTES;

/// Why a text file could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// The file (or a parent directory) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The path leaves the workspace, or is not accessible.
    #[error("{0}")]
    Refused(String),
    /// The request cannot be served as asked (a directory, binary content, too large).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
}

fn classify(raw: &str, e: &std::io::Error) -> FileError {
    let text = describe(raw, e);
    match e.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound(text),
        _ if text.starts_with("refused") => FileError::Refused(text),
        std::io::ErrorKind::IsADirectory | std::io::ErrorKind::NotADirectory => FileError::Invalid(text),
        _ => FileError::Failed(text),
    }
}

fn refused_or_invalid(text: String) -> FileError {
    if text.starts_with("refused") { FileError::Refused(text) } else { FileError::Invalid(text) }
}

/// The text of a file, from 1-based line `line` (default 1), at most `limit` lines.
pub fn read_text(ws: &Workspace, raw: &str, line: Option<u64>, limit: Option<u64>) -> Result<String, FileError> {
    let at = ws.resolve(raw).map_err(refused_or_invalid)?;
    if at.rel.as_os_str().is_empty() {
        return Err(FileError::Invalid(format!("{raw} is a directory (the workspace root)")));
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
    let file = at.dir.open_with(&at.rel, &options).map_err(|e| classify(raw, &e))?;
    check_regular(raw, &file).map_err(refused_or_invalid)?;
    let bytes = read_bounded(file.take(MAX_TEXT_BYTES as u64 + 1), MAX_TEXT_BYTES)
        .map_err(|e| classify(raw, &e))?
        .ok_or_else(|| FileError::Invalid(format!("{raw} is larger than {MAX_TEXT_BYTES} bytes")))?;
    if bytes.contains(&0) {
        return Err(FileError::Invalid(format!("{raw} is a binary file (it contains NUL bytes)")));
    }
    let text = String::from_utf8(bytes).map_err(|_| FileError::Invalid(format!("{raw} is not valid UTF-8 text")))?;
    if line.is_none() && limit.is_none() {
        return Ok(text);
    }
    let start = line.unwrap_or(1).max(1);
    let skip = usize::try_from(start - 1).unwrap_or(usize::MAX);
    let take = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)).unwrap_or(usize::MAX);
    Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
}

/// Creates or replaces a file (parents created), like the `write` tool.
pub fn write_text(ws: &Workspace, raw: &str, content: &str) -> Result<(), FileError> {
    if content.len() > MAX_TEXT_BYTES {
        return Err(FileError::Invalid(format!("content is larger than {MAX_TEXT_BYTES} bytes")));
    }
    // The parent missing is not an error here: `write` creates it.
    super::write(ws, raw, content).map(|_| ()).map_err(|text| {
        if text.starts_with("refused") {
            FileError::Refused(text)
        } else if text.contains("directory") {
            FileError::Invalid(text)
        } else {
            FileError::Failed(text)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        crate::files::tests::workspace(10)
    }

    #[test]
    fn reads_select_lines_and_keep_newlines() {
        let (t, w) = ws();
        std::fs::write(t.path().join("a.txt"), "1\n2\n3\n4").expect("write");
        assert_eq!(read_text(&w, "/workspace/a.txt", None, None), Ok("1\n2\n3\n4".into()));
        assert_eq!(read_text(&w, "a.txt", Some(2), Some(2)), Ok("2\n3\n".into()));
        assert_eq!(read_text(&w, "a.txt", Some(4), None), Ok("4".into()));
        assert_eq!(read_text(&w, "a.txt", Some(9), None), Ok(String::new()));
        assert_eq!(read_text(&w, "a.txt", None, Some(1)), Ok("1\n".into()), "the output cap does not apply");
    }

    #[test]
    fn errors_are_typed() {
        let (t, w) = ws();
        assert!(matches!(read_text(&w, "missing.txt", None, None), Err(FileError::NotFound(_))));
        assert!(matches!(read_text(&w, "/etc/passwd", None, None), Err(FileError::Refused(_))));
        assert!(matches!(read_text(&w, "../x", None, None), Err(FileError::Refused(_))));
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        assert!(matches!(read_text(&w, "d", None, None), Err(FileError::Invalid(_))));
        std::fs::write(t.path().join("b"), b"a\0b").expect("write");
        assert!(matches!(read_text(&w, "b", None, None), Err(FileError::Invalid(_))));
        assert!(matches!(write_text(&w, "/tmp/x", "y"), Err(FileError::Refused(_))));
        assert!(matches!(write_text(&w, "d", "y"), Err(FileError::Invalid(_))));
        write_text(&w, "new/dir/f.txt", "hi").expect("write creates parents");
        assert_eq!(std::fs::read_to_string(t.path().join("new/dir/f.txt")).expect("read"), "hi");
    }
}
