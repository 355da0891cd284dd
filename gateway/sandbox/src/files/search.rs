//! `glob` and `grep`: walking the workspace through directory handles.
//!
//! The walk opens each subdirectory from its parent's handle and never follows symlinks
//! (symlinked directories are not entered, symlinked files are listed by `glob` but not
//! searched by `grep`), so it cannot leave the workspace and cannot loop. Whatever cannot be
//! read is skipped. The walk is bounded in depth and in entries visited.

use std::io::BufReader;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, DirEntry, OpenOptions, OpenOptionsExt};
use globset::GlobBuilder;
use nix::fcntl::OFlag;
use regex::bytes::RegexBuilder;

use super::read::{looks_binary, next_line};
use super::{FileResult, Workspace, describe};

/// Deepest directory level entered.
const MAX_DEPTH: usize = 64;
/// Entries looked at per call, at most.
const MAX_VISITED: usize = 100_000;
/// Paths `glob` returns, at most.
const MAX_GLOB_RESULTS: usize = 1_000;
/// Matching lines `grep` returns, at most.
const MAX_GREP_MATCHES: usize = 500;
/// Characters of a matching line shown.
const MAX_GREP_LINE_CHARS: usize = 500;
/// Files larger than this are not searched.
const MAX_GREP_FILE_BYTES: u64 = 16 << 20;
/// Compiled regex size limit, so a pathological pattern fails instead of eating memory.
const REGEX_SIZE_LIMIT: usize = 10 << 20;

/// Where a search starts: a directory handle and how its paths are shown (relative to the
/// workspace root, or absolute in an additional directory, so they can be passed straight to
/// `read` or `edit`).
enum Base<'a> {
    Dir(Dir, PathBuf),
    File(super::At<'a>),
}

fn base<'a>(ws: &'a Workspace, raw: Option<&str>) -> Result<Base<'a>, String> {
    let raw = raw.unwrap_or(".");
    let at = ws.resolve(raw)?;
    if at.rel.as_os_str().is_empty() {
        return at.dir.try_clone().map(|d| Base::Dir(d, at.shown())).map_err(|e| describe(raw, &e));
    }
    match at.dir.open_dir(&at.rel) {
        Ok(dir) => Ok(Base::Dir(dir, at.shown())),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) => Ok(Base::File(at)),
        Err(e) => Err(describe(raw, &e)),
    }
}

/// Paths matching a glob pattern (`*` stays within a path component, `**` crosses them),
/// matched relative to `path` (default: the workspace root), sorted. Directories are not
/// listed.
pub fn glob(ws: &Workspace, pattern: &str, path: Option<&str>) -> FileResult {
    // An absolute pattern in an additional directory searches there when no path is given.
    let (under, relative) = ws.relative_pattern(pattern);
    let matcher = GlobBuilder::new(relative)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob pattern: {e}"))?
        .compile_matcher();
    let path = path.or_else(|| under.and_then(Path::to_str));
    let Base::Dir(dir, shown) = base(ws, path)? else {
        return Err(format!("{} is not a directory", path.unwrap_or(".")));
    };
    let mut found = Vec::new();
    let mut walk = Walk::default();
    let _ = walk.run(&dir, Path::new(""), 0, &mut |_, rel, entry| {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) && matcher.is_match(rel) {
            found.push(shown.join(rel).to_string_lossy().into_owned());
        }
        ControlFlow::Continue(())
    });
    found.sort();
    let total = found.len();
    if total == 0 {
        return Ok(format!("no paths match {pattern}{}", walk.note()));
    }
    let mut out: String = found.iter().take(MAX_GLOB_RESULTS).map(|p| format!("{p}\n")).collect();
    if total > MAX_GLOB_RESULTS {
        out.push_str(&format!("[{} more paths not shown: narrow the pattern]\n", total - MAX_GLOB_RESULTS));
    }
    out.push_str(&walk.note());
    Ok(out)
}

/// Lines matching a regular expression, as `path:line:text`, in files under `path` (a
/// directory or one file; default: the workspace root). Binary files are skipped.
pub fn grep(ws: &Workspace, pattern: &str, path: Option<&str>) -> FileResult {
    let regex = RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regular expression: {e}"))?;
    let mut out = Output::new(ws.output_cap());
    let mut walk = Walk::default();
    match base(ws, path)? {
        Base::File(at) => {
            let raw = path.unwrap_or(".");
            let file = ws.open_regular(raw, &at, false)?;
            let _ = search_file(file, &at.shown(), &regex, &mut out);
        }
        Base::Dir(dir, shown) => {
            let _ = walk.run(&dir, Path::new(""), 0, &mut |parent, rel, entry| {
                if !entry.file_type().is_ok_and(|t| t.is_file()) {
                    return ControlFlow::Continue(());
                }
                let mut options = OpenOptions::new();
                options.read(true).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
                match parent.open_with(entry.file_name(), &options) {
                    Ok(file) => search_file(file, &shown.join(rel), &regex, &mut out),
                    Err(_) => ControlFlow::Continue(()),
                }
            });
        }
    }
    let mut text = out.text;
    if out.matches == 0 {
        text = format!("no lines match {pattern}\n");
    }
    if let Some(why) = out.stopped {
        text.push_str(&why);
    }
    text.push_str(&walk.note());
    Ok(text)
}

struct Output {
    text: String,
    matches: usize,
    cap: usize,
    stopped: Option<String>,
}

impl Output {
    fn new(cap: usize) -> Self {
        Self { text: String::new(), matches: 0, cap, stopped: None }
    }
}

fn search_file(
    file: cap_std::fs::File,
    shown: &Path,
    regex: &regex::bytes::Regex,
    out: &mut Output,
) -> ControlFlow<()> {
    if !file.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX_GREP_FILE_BYTES) {
        return ControlFlow::Continue(());
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if looks_binary(&mut reader) {
        return ControlFlow::Continue(());
    }
    let mut line = Vec::new();
    let mut number = 0u64;
    while let Ok(Some(_)) = next_line(&mut reader, &mut line, super::read::MAX_LINE_BYTES) {
        number += 1;
        if !regex.is_match(&line) {
            continue;
        }
        let text: String = String::from_utf8_lossy(&line).chars().take(MAX_GREP_LINE_CHARS).collect();
        let entry = format!("{}:{number}:{text}\n", shown.display());
        if out.text.len() + entry.len() > out.cap {
            out.stopped = Some(format!("[output truncated at {} bytes: narrow the pattern or path]\n", out.cap));
            return ControlFlow::Break(());
        }
        out.text.push_str(&entry);
        out.matches += 1;
        if out.matches >= MAX_GREP_MATCHES {
            out.stopped = Some(format!("[stopped after {MAX_GREP_MATCHES} matches: narrow the pattern or path]\n"));
            return ControlFlow::Break(());
        }
    }
    ControlFlow::Continue(())
}

/// A bounded depth-first walk, entries of each directory in name order.
#[derive(Default)]
struct Walk {
    visited: usize,
    skipped: usize,
    exhausted: bool,
}

type Visit<'a> = dyn FnMut(&Dir, &Path, &DirEntry) -> ControlFlow<()> + 'a;

impl Walk {
    fn run(&mut self, dir: &Dir, prefix: &Path, depth: usize, visit: &mut Visit<'_>) -> ControlFlow<()> {
        let Ok(entries) = dir.entries() else {
            self.skipped += 1;
            return ControlFlow::Continue(());
        };
        let mut entries: Vec<DirEntry> = entries.filter_map(Result::ok).take(MAX_VISITED).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if self.visited >= MAX_VISITED {
                self.exhausted = true;
                return ControlFlow::Break(());
            }
            self.visited += 1;
            let rel = prefix.join(entry.file_name());
            visit(dir, &rel, &entry)?;
            // `file_type` does not follow symlinks: a symlinked directory is never entered.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if depth + 1 >= MAX_DEPTH {
                    self.skipped += 1;
                    continue;
                }
                match entry.open_dir() {
                    Ok(sub) => self.run(&sub, &rel, depth + 1, visit)?,
                    Err(_) => self.skipped += 1,
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn note(&self) -> String {
        let mut note = String::new();
        if self.exhausted {
            note.push_str(&format!("[stopped after visiting {MAX_VISITED} entries: narrow the path]\n"));
        }
        if self.skipped > 0 {
            note.push_str(&format!("[{} directories could not be read or were too deep]\n", self.skipped));
        }
        note
    }
}
