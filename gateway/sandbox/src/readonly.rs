//! Files of a workspace that the agent may read but never change: a session's mounted inputs.
//!
//! A 0444 mode is not enough: the file tools run with the gateway's rights (root ignores the
//! mode), and a sandboxed process owns the workspace, so it can `chmod`, delete or rename over
//! anything in it. Two enforcers therefore hold the promise, one per way of writing:
//!
//! - **The file tools** (`write`, `edit`, ACP `fs/write_text_file`) refuse a path that resolves
//!   to one of these files, compared by identity (device and inode) of what they opened, so a
//!   symlink, a `..` or a hard link to it is refused as well as its own path.
//! - **The `namespace` sandbox** binds each file read-only over itself (`--ro-bind-fd`) in
//!   every process it starts, from a descriptor opened here (never a path looked up again): a
//!   write or `chmod` gets `EROFS`, an unlink or a rename over it `EBUSY`, a hard link `EXDEV`.
//!   A process started before a file was added keeps the view it started with, so the Hand
//!   restarts its shell when a file is added (see `Hand::protect`).
//!
//! `local` has only the first: a shell there runs as the gateway's user and can change
//! anything that user can (it is not a security boundary).

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

/// One read-only file: where it is in the workspace, a descriptor on it, and its identity.
#[derive(Debug)]
struct Entry {
    rel: PathBuf,
    file: cap_std::fs::File,
    identity: (u64, u64),
}

/// The read-only files of one workspace.
#[derive(Debug, Default)]
pub struct ReadOnly {
    entries: Mutex<Vec<Entry>>,
}

impl ReadOnly {
    /// Makes the regular file at `rel` (relative to `dir`, the workspace) read-only; true when
    /// it was not already. Refused when nothing or something other than a regular file is
    /// there, or when a symlink is (the file itself is protected, never what a link names).
    pub fn add(&self, dir: &Dir, rel: &Path) -> io::Result<bool> {
        let before = dir.symlink_metadata(rel)?;
        if !before.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", rel.display()),
            ));
        }
        let mut options = OpenOptions::new();
        options.read(true).custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
        let file = dir.open_with(rel, &options)?;
        let meta = file.metadata()?;
        let identity = (meta.dev(), meta.ino());
        // A swap between the look and the open opened something else: refuse it.
        if identity != (before.dev(), before.ino()) || !meta.is_file() {
            return Err(io::Error::other(format!("{} changed while it was being protected", rel.display())));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.iter().any(|e| e.identity == identity && e.rel == rel) {
            return Ok(false);
        }
        entries.retain(|e| e.rel != rel);
        entries.push(Entry { rel: rel.to_path_buf(), file, identity });
        Ok(true)
    }

    /// Whether the file with this device and inode is read-only.
    pub fn holds(&self, dev: u64, ino: u64) -> bool {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|e| e.identity == (dev, ino))
    }

    /// Where each read-only file is in the workspace, with a new descriptor on it (for a
    /// sandbox to bind over that place).
    pub fn binds(&self) -> io::Result<Vec<(PathBuf, OwnedFd)>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .map(|e| {
                let fd = e.file.try_clone()?.into_std();
                Ok((e.rel.clone(), OwnedFd::from(fd)))
            })
            .collect()
    }

    /// How many files are read-only.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_told_by_identity_and_links_are_not_protected_themselves() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        std::fs::write(tmp.path().join("ro.csv"), "a,b\n").unwrap();
        std::os::unix::fs::symlink("ro.csv", tmp.path().join("link")).unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        let ro = ReadOnly::default();
        assert!(ro.add(&dir, Path::new("ro.csv")).unwrap());
        assert!(!ro.add(&dir, Path::new("ro.csv")).unwrap(), "once");
        assert!(ro.add(&dir, Path::new("link")).is_err(), "a symlink is refused");
        assert!(ro.add(&dir, Path::new("d")).is_err(), "a directory is refused");
        assert!(ro.add(&dir, Path::new("missing")).is_err());
        let meta = std::fs::metadata(tmp.path().join("link")).unwrap();
        use std::os::unix::fs::MetadataExt as _;
        assert!(ro.holds(meta.dev(), meta.ino()), "reached through the link, it is the protected file");
        let binds = ro.binds().unwrap();
        assert_eq!(binds.len(), 1);
        assert_eq!(binds[0].0, Path::new("ro.csv"));
    }
}
