//! The file tools (`read`, `write`, `edit`, `glob`, `grep`), confined to the workspace.
//!
//! Confinement does not rest on string checks of host paths: every access goes through a
//! `cap_std::fs::Dir` opened on the workspace, which resolves paths beneath that directory
//! (with `openat2(RESOLVE_BENEATH)` where the kernel has it, component by component without
//! following escaping symlinks elsewhere). A `..` that climbs out, an absolute symlink, or a
//! symlink swapped in between a check and an open is refused by the kernel or by cap-std, not
//! by us. The string rules in [`Workspace::resolve`] only turn the tool's path into a path
//! relative to that directory and give clearer errors for the obvious cases.
//!
//! The tools are blocking (std I/O); the Hand runs them on the blocking thread pool.

mod edit;
mod place;
mod read;
mod search;
mod text;

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::{Dir, File, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

use crate::readonly::ReadOnly;

pub use edit::{edit, write};
pub use place::Placement;
pub use read::read;
pub use search::{glob, grep};
pub use text::{FileError, read_text, write_text};

/// A tool's answer: `Ok(text)` or `Err(text of the error)`.
pub type FileResult = Result<String, String>;

/// The workspace as the file tools see it.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    /// Where processes in the sandbox see the workspace: absolute tool paths are read
    /// against it.
    inner_root: PathBuf,
    /// The session's additional directories: where the sandbox shows each (its own absolute
    /// path), and its handle. Absolute paths under one are read against it.
    extra: Vec<(PathBuf, Dir)>,
    /// Bytes of output a tool may return.
    output_cap: usize,
    /// Files no tool may change (mounted inputs).
    read_only: Arc<ReadOnly>,
}

/// A path a tool named, resolved: the directory it lies beneath and the path relative to it.
#[derive(Debug)]
pub struct At<'a> {
    pub dir: &'a Dir,
    /// Relative to `dir`, cleaned (empty: `dir` itself).
    pub rel: PathBuf,
    /// Where the sandbox shows `dir`.
    inner: &'a Path,
    /// `dir` is the workspace itself (not an additional directory).
    primary: bool,
}

impl At<'_> {
    /// Where processes in the sandbox see the path.
    pub fn inner_path(&self) -> PathBuf {
        self.inner.join(&self.rel)
    }

    /// How tool output names the path so it can be passed to another tool: relative to the
    /// workspace, or absolute in an additional directory.
    pub fn shown(&self) -> PathBuf {
        if self.primary { self.rel.clone() } else { self.inner_path() }
    }
}

impl Workspace {
    pub fn new(dir: Dir, inner_root: PathBuf, output_cap: usize) -> Self {
        Self { dir, inner_root, extra: Vec::new(), output_cap: output_cap.max(1), read_only: Arc::default() }
    }

    /// The same, with the session's additional directories (`(where the sandbox shows it,
    /// its handle)`).
    pub fn with_extra(mut self, extra: Vec<(PathBuf, Dir)>) -> Self {
        self.extra = extra;
        self
    }

    /// The same, with `read_only` (shared with the sandbox over this workspace).
    pub fn with_read_only(mut self, read_only: Arc<ReadOnly>) -> Self {
        self.read_only = read_only;
        self
    }

    /// Makes the regular file at `rel` read-only ([`ReadOnly::add`]); true when it was not.
    pub fn protect(&self, rel: &Path) -> io::Result<bool> {
        self.read_only.add(&self.dir, rel)
    }

    /// Refuses to change `raw` when what it resolves to (through symlinks inside the
    /// workspace) is a read-only file; a path that does not exist yet is writable. Checked
    /// before a file is opened for writing, so the refusal says why (a 0444 file would
    /// otherwise fail as "not accessible", or be written when the gateway is root); the
    /// opened descriptor is checked again ([`Workspace::check_opened_writable`]).
    pub fn check_writable(&self, raw: &str, at: &At<'_>) -> Result<(), String> {
        match at.dir.metadata(&at.rel) {
            Ok(meta) if self.read_only.holds(meta.dev(), meta.ino()) => Err(read_only(raw)),
            _ => Ok(()),
        }
    }

    /// Refuses to change the opened `file` when it is a read-only file (what was opened is
    /// what is judged, whatever happened to the path meanwhile).
    pub fn check_opened_writable(&self, raw: &str, file: &File) -> Result<(), String> {
        let meta = file.metadata().map_err(|e| describe(raw, &e))?;
        if self.read_only.holds(meta.dev(), meta.ino()) { Err(read_only(raw)) } else { Ok(()) }
    }

    /// The tool's `path` as a directory and a path relative to it: the workspace (a relative
    /// path, or an absolute one under the sandbox's view of the workspace or under
    /// `/mnt/session`, the session mounts kept in the workspace), or the additional directory
    /// an absolute path lies under (compared by whole components).
    ///
    /// Refuses NUL bytes, absolute paths under none of those, and `..` components that climb
    /// above the directory. Symlinks are left to cap-std.
    pub fn resolve(&self, raw: &str) -> Result<At<'_>, String> {
        if raw.contains('\0') {
            return Err("refused: the path contains a NUL byte".into());
        }
        let path = Path::new(raw);
        let primary = |rel: PathBuf| (&self.dir, rel, self.inner_root.as_path(), true);
        let (dir, relative, inner, is_primary) = if path.is_absolute() {
            if let Ok(inside) = path.strip_prefix(&self.inner_root) {
                primary(inside.to_path_buf())
            } else if let Some((inner, dir, inside)) =
                self.extra.iter().find_map(|(inner, dir)| Some((inner, dir, path.strip_prefix(inner).ok()?)))
            {
                (dir, inside.to_path_buf(), inner.as_path(), false)
            } else if let Ok(rest) = path.strip_prefix(gateway_core::mounts::SESSION_MOUNTS) {
                // Session mounts live in the workspace (`gateway_core::mounts`).
                primary(Path::new(gateway_core::mounts::SESSION_MOUNTS_IN_WORKSPACE).join(rest))
            } else {
                return Err(format!("refused: {raw} is outside the workspace ({})", self.inner_root.display()));
            }
        } else {
            primary(path.to_path_buf())
        };
        let mut depth: usize = 0;
        let mut clean = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::CurDir => {}
                Component::ParentDir => {
                    depth = depth.checked_sub(1).ok_or_else(|| format!("refused: {raw} is outside the workspace"))?;
                    clean.push("..");
                }
                Component::Normal(name) => {
                    depth += 1;
                    clean.push(name);
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("refused: {raw} is outside the workspace"));
                }
            }
        }
        Ok(At { dir, rel: clean, inner, primary: is_primary })
    }

    /// A glob pattern written as an absolute path, made relative to the directory it lies in,
    /// with that directory's path (`None`: the workspace; other patterns unchanged).
    pub fn relative_pattern<'a>(&self, pattern: &'a str) -> (Option<&Path>, &'a str) {
        let root = self.inner_root.to_string_lossy();
        if let Some(rest) = pattern.strip_prefix(root.as_ref()).and_then(|p| p.strip_prefix('/')) {
            return (None, rest);
        }
        for (inner, _) in &self.extra {
            let base = inner.to_string_lossy();
            if let Some(rest) = pattern.strip_prefix(base.as_ref()).and_then(|p| p.strip_prefix('/')) {
                return (Some(inner.as_path()), rest);
            }
        }
        (None, pattern)
    }

    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    pub fn output_cap(&self) -> usize {
        self.output_cap
    }

    /// Opens an existing regular file beneath the workspace (`write`: also for writing).
    ///
    /// `O_NONBLOCK` keeps a FIFO planted in the workspace from hanging the tool; the type is
    /// checked on the opened descriptor, so a swap after the open changes nothing.
    pub fn open_regular(&self, raw: &str, at: &At<'_>, write: bool) -> Result<File, String> {
        if at.rel.as_os_str().is_empty() {
            return Err(format!("{raw} is a directory (the workspace root)"));
        }
        let mut options = OpenOptions::new();
        options.read(true).write(write).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
        if write {
            self.check_writable(raw, at)?;
        }
        let file = at.dir.open_with(&at.rel, &options).map_err(|e| describe(raw, &e))?;
        check_regular(raw, &file)?;
        if write {
            self.check_opened_writable(raw, &file)?;
        }
        Ok(file)
    }
}

/// The refusal of a change to a read-only file, as the model reads it.
fn read_only(raw: &str) -> String {
    format!("refused: {raw} is a mounted input and read-only; write your changes to another path")
}

/// Refuses anything but a regular file (directories, FIFOs, devices, sockets).
pub fn check_regular(raw: &str, file: &File) -> Result<(), String> {
    let meta = file.metadata().map_err(|e| describe(raw, &e))?;
    if meta.is_dir() {
        return Err(format!("{raw} is a directory"));
    }
    if !meta.is_file() {
        return Err(format!("{raw} is not a regular file"));
    }
    Ok(())
}

/// An I/O error as the model should read it. cap-std reports escapes (`..` out of the root,
/// symlinks leading outside) as `PermissionDenied`; the gateway's user can otherwise read the
/// whole workspace, so that is what it almost always means.
pub fn describe(raw: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("{raw}: no such file or directory"),
        io::ErrorKind::PermissionDenied => {
            format!("refused: {raw} resolves outside the workspace or is not accessible")
        }
        io::ErrorKind::NotADirectory => format!("{raw}: a component of the path is not a directory"),
        io::ErrorKind::IsADirectory => format!("{raw} is a directory"),
        // Opening a FIFO for writing without a reader, or a device without a driver.
        _ if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) => format!("{raw} is not a regular file"),
        _ if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            format!("refused: {raw} is a symlink that cannot be followed inside the workspace")
        }
        _ => format!("{raw}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        workspace(1000)
    }

    /// A fresh temporary workspace, seen inside as `/workspace`, whose outputs are cut at
    /// `output_cap` bytes (also what the tests of `text` start from).
    pub(super) fn workspace(output_cap: usize) -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).expect("open");
        (tmp, Workspace::new(dir, PathBuf::from("/workspace"), output_cap))
    }

    /// Where a resolved path lies: the workspace (`None`) or the additional directory shown at
    /// that path, and the relative path.
    fn place(w: &Workspace, raw: &str) -> Result<(Option<PathBuf>, PathBuf), String> {
        w.resolve(raw).map(|at| ((!at.primary).then(|| at.inner.to_path_buf()), at.rel))
    }

    #[test]
    fn paths_resolve_relative_to_the_root() {
        let (_t, w) = ws();
        let ours = |rel: &str| Ok((None, PathBuf::from(rel)));
        assert_eq!(place(&w, "a/b"), ours("a/b"));
        assert_eq!(place(&w, "./a/../b"), ours("a/../b"));
        assert_eq!(place(&w, "/workspace/x"), ours("x"));
        assert_eq!(place(&w, "/workspace"), ours(""));
        assert_eq!(place(&w, "."), ours(""));
        assert_eq!(w.relative_pattern("/workspace/src/*.rs"), (None, "src/*.rs"));
        assert_eq!(w.relative_pattern("/workspaces/*.rs"), (None, "/workspaces/*.rs"));
        assert_eq!(w.relative_pattern("**/*.rs"), (None, "**/*.rs"));
    }

    #[test]
    fn obvious_escapes_are_refused() {
        let (_t, w) = ws();
        for bad in ["../x", "a/../../x", "/etc/passwd", "/workspacex/a", "/", "a\0b"] {
            assert!(w.resolve(bad).is_err_and(|e| e.starts_with("refused")), "{bad}");
        }
    }

    /// An absolute path under an additional directory is read against it (by whole
    /// components: `/srv/lib` is not `/srv/library`), and cannot climb out of it.
    #[test]
    fn additional_directories_take_their_absolute_paths() {
        let (_t, w) = ws();
        let extra = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_ambient_dir(extra.path(), cap_std::ambient_authority()).expect("open");
        let w = w.with_extra(vec![(PathBuf::from("/srv/lib"), dir)]);
        let lib = Some(PathBuf::from("/srv/lib"));
        assert_eq!(place(&w, "/srv/lib/a/b.rs"), Ok((lib.clone(), PathBuf::from("a/b.rs"))));
        assert_eq!(place(&w, "/srv/lib"), Ok((lib.clone(), PathBuf::new())));
        assert_eq!(place(&w, "/workspace/x"), Ok((None, PathBuf::from("x"))));
        assert_eq!(w.resolve("/srv/lib/a/b.rs").expect("resolves").shown(), PathBuf::from("/srv/lib/a/b.rs"));
        assert_eq!(w.resolve("a").expect("resolves").shown(), PathBuf::from("a"));
        assert_eq!(w.relative_pattern("/srv/lib/**/*.rs"), (Some(Path::new("/srv/lib")), "**/*.rs"));
        for bad in ["/srv/library/x", "/srv/lib/../x", "/srv/lib/a/../../x", "/srv"] {
            assert!(w.resolve(bad).is_err_and(|e| e.starts_with("refused")), "{bad}");
        }
    }
}
