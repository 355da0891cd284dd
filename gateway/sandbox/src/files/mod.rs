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
    /// Bytes of output a tool may return.
    output_cap: usize,
    /// Files no tool may change (mounted inputs).
    read_only: Arc<ReadOnly>,
}

impl Workspace {
    pub fn new(dir: Dir, inner_root: PathBuf, output_cap: usize) -> Self {
        Self { dir, inner_root, output_cap: output_cap.max(1), read_only: Arc::default() }
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
    pub fn check_writable(&self, raw: &str, rel: &Path) -> Result<(), String> {
        match self.dir.metadata(rel) {
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

    /// The tool's `path` as a path relative to the workspace directory (empty: the root).
    ///
    /// Refuses NUL bytes, absolute paths not under the sandbox's view of the workspace (or
    /// under `/mnt/session`, the session mounts kept in the workspace), and
    /// `..` components that climb above the root. Symlinks are left to cap-std.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        if raw.contains('\0') {
            return Err("refused: the path contains a NUL byte".into());
        }
        let path = Path::new(raw);
        let mounts;
        let relative = if path.is_absolute() {
            match path.strip_prefix(&self.inner_root) {
                Ok(inside) => inside,
                // Session mounts live in the workspace (`gateway_core::mounts`).
                Err(_) => match path.strip_prefix(gateway_core::mounts::SESSION_MOUNTS) {
                    Ok(rest) => {
                        mounts = Path::new(gateway_core::mounts::SESSION_MOUNTS_IN_WORKSPACE).join(rest);
                        mounts.as_path()
                    }
                    Err(_) => {
                        return Err(format!("refused: {raw} is outside the workspace ({})", self.inner_root.display()));
                    }
                },
            }
        } else {
            path
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
        Ok(clean)
    }

    /// A glob pattern written as an absolute path inside the workspace, made relative to its
    /// root (other patterns unchanged).
    pub fn relative_pattern<'a>(&self, pattern: &'a str) -> &'a str {
        let root = self.inner_root.to_string_lossy();
        pattern.strip_prefix(root.as_ref()).and_then(|p| p.strip_prefix('/')).unwrap_or(pattern)
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
    pub fn open_regular(&self, raw: &str, rel: &Path, write: bool) -> Result<File, String> {
        if rel.as_os_str().is_empty() {
            return Err(format!("{raw} is a directory (the workspace root)"));
        }
        let mut options = OpenOptions::new();
        options.read(true).write(write).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
        if write {
            self.check_writable(raw, rel)?;
        }
        let file = self.dir.open_with(rel, &options).map_err(|e| describe(raw, &e))?;
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

    #[test]
    fn paths_resolve_relative_to_the_root() {
        let (_t, w) = ws();
        assert_eq!(w.resolve("a/b"), Ok(PathBuf::from("a/b")));
        assert_eq!(w.resolve("./a/../b"), Ok(PathBuf::from("a/../b")));
        assert_eq!(w.resolve("/workspace/x"), Ok(PathBuf::from("x")));
        assert_eq!(w.resolve("/workspace"), Ok(PathBuf::new()));
        assert_eq!(w.resolve("."), Ok(PathBuf::new()));
        assert_eq!(w.relative_pattern("/workspace/src/*.rs"), "src/*.rs");
        assert_eq!(w.relative_pattern("/workspaces/*.rs"), "/workspaces/*.rs");
        assert_eq!(w.relative_pattern("**/*.rs"), "**/*.rs");
    }

    #[test]
    fn obvious_escapes_are_refused() {
        let (_t, w) = ws();
        for bad in ["../x", "a/../../x", "/etc/passwd", "/workspacex/a", "/", "a\0b"] {
            assert!(w.resolve(bad).is_err_and(|e| e.starts_with("refused")), "{bad}");
        }
    }
}
