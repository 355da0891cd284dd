//! Mounted inputs placed into the workspace (uploaded files, docs/adr/0017).
//!
//! A mount is written beside its place under a hidden temporary name and renamed into place
//! only once its content is complete and checked, so a mount is either whole or absent: a
//! failed or interrupted placement leaves nothing at the mount path, and the next acquisition
//! tries again. Every path goes through the workspace's `cap_std` directory, like the file
//! tools, so a symlink planted in the workspace cannot redirect a placement outside it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cap_std::fs::{File, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};

use super::Workspace;

/// Distinguishes the partial files of placements running at once in this process.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A mount being written. Dropped before [`Placement::finish`], it removes its partial file.
#[derive(Debug)]
pub struct Placement {
    workspace: std::sync::Arc<Workspace>,
    target: PathBuf,
    partial: PathBuf,
    file: Option<File>,
}

impl Workspace {
    /// Whether anything (a file, a directory, a symlink) is at `rel`.
    pub fn occupied(&self, rel: &Path) -> bool {
        self.dir().symlink_metadata(rel).is_ok()
    }

    /// Moves `name`, a directory prepared in `from` (which must be on the workspace's
    /// filesystem), to `rel` in the workspace, parents created: it appears whole, in one
    /// rename, or not at all.
    pub fn adopt(&self, from: &cap_std::fs::Dir, name: &Path, rel: &Path) -> io::Result<()> {
        if rel.file_name().is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no directory name"));
        }
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.dir().create_dir_all(parent)?;
        }
        from.rename(name, self.dir(), rel)
    }
}

impl Placement {
    /// Starts writing the mount at `rel` (relative to the workspace, parents created).
    pub fn begin(workspace: std::sync::Arc<Workspace>, rel: &Path) -> io::Result<Self> {
        let name = rel.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        if !parent.as_os_str().is_empty() {
            workspace.dir().create_dir_all(parent)?;
        }
        let mut partial_name = std::ffi::OsString::from(".");
        partial_name.push(name);
        partial_name.push(format!(
            ".partial-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let partial = parent.join(partial_name);
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true).mode(0o600);
        let file = workspace.dir().open_with(&partial, &options)?;
        Ok(Self { workspace, target: rel.to_path_buf(), partial, file: Some(file) })
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(bytes),
            None => Err(io::Error::other("placement already finished")),
        }
    }

    /// Makes the mount appear at its place, readable by everyone and writable by nobody (a
    /// mounted input is not the agent's to change).
    pub fn finish(mut self) -> io::Result<()> {
        let file = self.file.take().ok_or_else(|| io::Error::other("placement already finished"))?;
        file.set_permissions(Permissions::from_mode(0o444))?;
        drop(file);
        self.workspace.dir().rename(&self.partial, self.workspace.dir(), &self.target)
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = self.workspace.dir().remove_file(&self.partial);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cap_std::fs::Dir;

    use super::*;

    fn ws() -> (tempfile::TempDir, Arc<Workspace>) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).expect("open");
        (tmp, Arc::new(Workspace::new(dir, PathBuf::from("/workspace"), 10)))
    }

    #[test]
    fn a_mount_appears_whole_and_read_only_or_not_at_all() {
        let (t, w) = ws();
        let rel = Path::new("mnt/session/uploads/file_1");
        let mut p = Placement::begin(Arc::clone(&w), rel).expect("begin");
        p.write(b"half").expect("write");
        assert!(!w.occupied(rel), "nothing at the mount path before it is complete");
        drop(p);
        let left: Vec<_> = std::fs::read_dir(t.path().join("mnt/session/uploads")).expect("dir").collect();
        assert!(left.is_empty(), "an abandoned placement leaves no partial file: {left:?}");

        let mut p = Placement::begin(Arc::clone(&w), rel).expect("begin");
        p.write(b"\0\xffwhole").expect("write");
        p.finish().expect("finish");
        assert!(w.occupied(rel));
        let on_disk = t.path().join(rel);
        assert_eq!(std::fs::read(&on_disk).expect("read"), b"\0\xffwhole");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&on_disk).expect("meta").permissions().mode() & 0o777, 0o444);
    }

    #[test]
    fn a_symlink_in_the_workspace_cannot_send_a_mount_outside() {
        let (t, w) = ws();
        let outside = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), t.path().join("data")).expect("symlink");
        assert!(Placement::begin(Arc::clone(&w), Path::new("data/x")).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).expect("dir").count(), 0);
    }
}
