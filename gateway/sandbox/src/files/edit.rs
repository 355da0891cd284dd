//! `write` and `edit`: changing files beneath the workspace.

use std::io::{Seek, SeekFrom, Write};

use cap_std::fs::{File, OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

use super::read::read_bounded;
use super::{At, FileResult, Workspace, check_regular, describe};
use crate::input::MAX_TEXT_BYTES;

/// Creates or overwrites a file, creating missing parent directories.
pub fn write(ws: &Workspace, raw: &str, content: &str) -> FileResult {
    let at = ws.resolve(raw)?;
    if at.rel.as_os_str().is_empty() {
        return Err(format!("{raw} is a directory (the workspace root)"));
    }
    if let Some(parent) = at.rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        at.dir.create_dir_all(parent).map_err(|e| match e.kind() {
            // cap-std's answer for a parent that is a file, or a symlink it will not follow.
            std::io::ErrorKind::AlreadyExists => {
                format!("refused: a parent of {raw} is not a directory inside the workspace")
            }
            _ => describe(raw, &e),
        })?;
    }
    let mut file = create_or_open(ws, raw, &at)?;
    replace_contents(&mut file, content.as_bytes()).map_err(|e| describe(raw, &e))?;
    Ok(format!("wrote {} bytes to {raw}", content.len()))
}

/// Opens for writing without truncating: the type is checked on the descriptor first, so a
/// FIFO or device swapped in is refused before anything is written or truncated.
fn create_or_open(ws: &Workspace, raw: &str, at: &At<'_>) -> Result<File, String> {
    ws.check_writable(raw, at)?;
    let mut options = OpenOptions::new();
    options.write(true).create(true).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
    let file = at.dir.open_with(&at.rel, &options).map_err(|e| describe(raw, &e))?;
    check_regular(raw, &file)?;
    ws.check_opened_writable(raw, &file)?;
    Ok(file)
}

fn replace_contents(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytes)?;
    file.flush()
}

/// Replaces `old` by `new`: exactly one occurrence unless `replace_all`.
pub fn edit(ws: &Workspace, raw: &str, old: &str, new: &str, replace_all: bool) -> FileResult {
    if old.is_empty() {
        return Err("`old_string` must not be empty (use write to create a file)".into());
    }
    if old == new {
        return Err("`old_string` and `new_string` are the same: nothing to change".into());
    }
    let at = ws.resolve(raw)?;
    // One descriptor for reading and writing back: nothing can be swapped in between.
    let mut file = ws.open_regular(raw, &at, true)?;
    let bytes = read_bounded(&mut file, MAX_TEXT_BYTES)
        .map_err(|e| describe(raw, &e))?
        .ok_or_else(|| format!("{raw} is larger than {MAX_TEXT_BYTES} bytes; edit refuses files this large"))?;
    if bytes.contains(&0) {
        return Err(format!("{raw} is a binary file (it contains NUL bytes); edit changes text files only"));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{raw} is not valid UTF-8; edit changes text only"))?;
    let count = text.matches(old).count();
    match count {
        0 => return Err(format!("`old_string` was not found in {raw}")),
        1 => {}
        n if !replace_all => {
            return Err(format!(
                "`old_string` occurs {n} times in {raw}; add surrounding context to make it unique, \
                 or pass replace_all: true to replace every occurrence"
            ));
        }
        _ => {}
    }
    let updated = if replace_all { text.replace(old, new) } else { text.replacen(old, new, 1) };
    if updated.len() > MAX_TEXT_BYTES {
        return Err(format!("the edited file would exceed {MAX_TEXT_BYTES} bytes"));
    }
    replace_contents(&mut file, updated.as_bytes()).map_err(|e| describe(raw, &e))?;
    let noun = if count == 1 { "occurrence" } else { "occurrences" };
    Ok(format!("replaced {count} {noun} in {raw}"))
}
