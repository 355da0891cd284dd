//! A workspace directory resolved once, to an open handle.
//!
//! Why a handle and not a path: a path is looked up again every time it is used, and whoever
//! can write to any directory on it can make the next lookup land somewhere else (a symlink
//! to `/` put in place of the project directory, or a `renameat2(RENAME_EXCHANGE)` racing the
//! lookup). A [`WorkspaceDir`] is opened with `openat2` and `RESOLVE_NO_SYMLINKS` (beneath its
//! root with `RESOLVE_BENEATH` too, when it has one), so no symlink anywhere on the path is
//! followed; its identity (device and inode) is read from the open descriptor, so what is
//! compared is what was opened; and everything after the open uses the descriptor: the file
//! tools through a `cap_std` directory on it, bubblewrap through `--bind-fd`, `local` processes
//! through `/proc/self/fd/N` as their working directory. A race can therefore only make the
//! open fail (a symlink: `ELOOP`) or open another directory, which [`WorkspaceDir::expect`]
//! refuses; it can never make the sandbox use a directory other than the one checked.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use gateway_core::session::DirIdentity;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;

use crate::readonly::ReadOnly;

/// Why a workspace directory could not be opened (or is not the one that was checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirError {
    #[error("workspace {path}: must be an absolute path without `.` or `..` components")]
    NotCanonical { path: String },
    #[error("workspace {path} is not under its allowed root {root}")]
    OutsideRoot { path: String, root: String },
    #[error("workspace {path}: a symbolic link is on the path; workspaces are never opened through symlinks")]
    Symlink { path: String },
    #[error("workspace {path} does not exist")]
    Missing { path: String },
    #[error("workspace {path} is not a directory")]
    NotADirectory { path: String },
    #[error(
        "workspace {path} is no longer the directory that was checked when the session was created \
         ({expected}, now {found}); it was replaced or moved, so it is not used"
    )]
    Replaced { path: String, expected: DirIdentity, found: DirIdentity },
    #[error("workspace {path}: {reason}")]
    Io { path: String, reason: String },
}

/// An open directory, and what it was opened as.
pub struct WorkspaceDir {
    fd: OwnedFd,
    identity: DirIdentity,
    /// The path it was opened at, for messages and for programs that want a path (`HOME` on
    /// `local`). Never used to reach the directory again.
    path: PathBuf,
    /// Its files the agent may not change (mounted inputs), shared by the file tools and the
    /// sandbox over it.
    read_only: Arc<ReadOnly>,
    /// The session's additional directories (an editor's `additionalDirectories`), opened and
    /// checked like this one. Every provider shows each at its own absolute path ([`path`]):
    /// the file tools read absolute paths under it against it, `namespace` binds it there,
    /// `local` needs nothing.
    ///
    /// [`path`]: WorkspaceDir::path
    extra: Vec<WorkspaceDir>,
}

impl fmt::Debug for WorkspaceDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkspaceDir")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .field("extra", &self.extra)
            .finish()
    }
}

fn how() -> OpenHow {
    OpenHow::new().flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY)
}

impl WorkspaceDir {
    /// Opens `path` (absolute, canonical) without following any symlink on it. With `root`,
    /// `path` must lie under it, and is resolved beneath the opened root (`RESOLVE_BENEATH`).
    pub fn open(path: &Path, root: Option<&Path>) -> Result<Self, DirError> {
        let shown = || path.display().to_string();
        canonical(path).then_some(()).ok_or_else(|| DirError::NotCanonical { path: shown() })?;
        let fd = match root {
            None => openat2(nix::fcntl::AT_FDCWD, path, how().resolve(ResolveFlag::RESOLVE_NO_SYMLINKS)),
            Some(root) => {
                canonical(root)
                    .then_some(())
                    .ok_or_else(|| DirError::NotCanonical { path: root.display().to_string() })?;
                let rel = path
                    .strip_prefix(root)
                    .map_err(|_| DirError::OutsideRoot { path: shown(), root: root.display().to_string() })?;
                let root_fd = openat2(nix::fcntl::AT_FDCWD, root, how().resolve(ResolveFlag::RESOLVE_NO_SYMLINKS))
                    .map_err(|e| errno(root, e))?;
                let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
                openat2(&root_fd, rel, how().resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH))
            }
        }
        .map_err(|e| errno(path, e))?;
        Self::from_fd(fd, path.to_owned())
    }

    /// Opens (creating it with mode 0700 when `create` and it is missing) the directory `name`,
    /// one path component, beneath `self`, without following a symlink.
    pub fn child(&self, name: &str, create: bool) -> Result<Self, DirError> {
        let path = self.path.join(name);
        let single = matches!(Path::new(name).components().collect::<Vec<_>>()[..], [Component::Normal(_)]);
        if !single {
            return Err(DirError::NotCanonical { path: path.display().to_string() });
        }
        if create {
            match nix::sys::stat::mkdirat(&self.fd, name, Mode::S_IRWXU) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(errno(&path, e)),
            }
        }
        let fd =
            openat2(&self.fd, name, how().resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH))
                .map_err(|e| errno(&path, e))?;
        Self::from_fd(fd, path)
    }

    fn from_fd(fd: OwnedFd, path: PathBuf) -> Result<Self, DirError> {
        let file = std::fs::File::from(fd);
        let meta =
            file.metadata().map_err(|e| DirError::Io { path: path.display().to_string(), reason: e.to_string() })?;
        if !meta.is_dir() {
            return Err(DirError::NotADirectory { path: path.display().to_string() });
        }
        let identity = DirIdentity { device: meta.dev(), inode: meta.ino() };
        Ok(Self { fd: OwnedFd::from(file), identity, path, read_only: Arc::default(), extra: Vec::new() })
    }

    /// `self` if it is the directory `expected` names, else [`DirError::Replaced`].
    pub fn expect(self, expected: DirIdentity) -> Result<Self, DirError> {
        if self.identity == expected {
            Ok(self)
        } else {
            Err(DirError::Replaced { path: self.path.display().to_string(), expected, found: self.identity })
        }
    }

    pub fn identity(&self) -> DirIdentity {
        self.identity
    }

    /// With the session's additional directories (each opened like this one, none inside
    /// another; `gateway_core::mounts::check_extra_roots`).
    pub fn with_extra(mut self, extra: Vec<WorkspaceDir>) -> Self {
        self.extra = extra;
        self
    }

    /// The session's additional directories, each seen at its own path.
    pub fn extra(&self) -> &[WorkspaceDir] {
        &self.extra
    }

    /// Its files the agent may read but not change ([`ReadOnly`]).
    pub fn read_only(&self) -> &Arc<ReadOnly> {
        &self.read_only
    }

    /// Where it was opened (for messages; never to reach the directory again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new descriptor on the same directory (for a child process, or a `cap_std` handle).
    pub fn duplicate(&self) -> std::io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The directory as a `cap_std` handle, through which the file tools work.
    pub fn cap_dir(&self) -> std::io::Result<cap_std::fs::Dir> {
        Ok(cap_std::fs::Dir::from_std_file(std::fs::File::from(self.duplicate()?)))
    }

    /// A path that names this very directory in this process and in a child it forks (until
    /// the child execs): the working directory of `local` processes.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

impl AsFd for WorkspaceDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Absolute, without `.`/`..` components (symlinks are refused at the open).
fn canonical(path: &Path) -> bool {
    path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn errno(path: &Path, e: Errno) -> DirError {
    let path = path.display().to_string();
    match e {
        Errno::ELOOP => DirError::Symlink { path },
        Errno::ENOENT => DirError::Missing { path },
        Errno::ENOTDIR => DirError::NotADirectory { path },
        Errno::EXDEV => DirError::OutsideRoot { path, root: "its root".into() },
        Errno::ENOSYS => {
            DirError::Io { path, reason: "this kernel has no openat2 (Linux 5.6 or later is required)".into() }
        }
        other => DirError::Io { path, reason: other.desc().to_owned() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    #[test]
    fn a_directory_opens_and_keeps_its_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let d = WorkspaceDir::open(&real(tmp.path()), None).unwrap();
        let again = WorkspaceDir::open(&real(tmp.path()), None).unwrap();
        assert_eq!(d.identity(), again.identity());
        assert!(again.expect(d.identity()).is_ok());
        assert!(d.cap_dir().unwrap().create_dir("made").is_ok());
        assert!(tmp.path().join("made").is_dir());
    }

    #[test]
    fn symlinks_anywhere_on_the_path_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = real(tmp.path());
        std::fs::create_dir(base.join("proj")).unwrap();
        std::os::unix::fs::symlink("/", base.join("root-link")).unwrap();
        std::os::unix::fs::symlink(base.join("proj"), base.join("proj-link")).unwrap();
        assert!(matches!(WorkspaceDir::open(&base.join("root-link"), None), Err(DirError::Symlink { .. })));
        assert!(matches!(WorkspaceDir::open(&base.join("proj-link"), None), Err(DirError::Symlink { .. })));
        assert!(matches!(WorkspaceDir::open(&base.join("proj-link/x"), None), Err(DirError::Symlink { .. })));
        assert!(matches!(WorkspaceDir::open(&base.join("proj/../proj"), None), Err(DirError::NotCanonical { .. })));
        assert!(matches!(WorkspaceDir::open(Path::new("rel"), None), Err(DirError::NotCanonical { .. })));
        let root = WorkspaceDir::open(&base, None).unwrap();
        assert!(matches!(root.child("root-link", false), Err(DirError::Symlink { .. })));
        assert!(matches!(root.child("../x", true), Err(DirError::NotCanonical { .. })));
    }

    #[test]
    fn a_replaced_directory_is_told_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let base = real(tmp.path());
        std::fs::create_dir(base.join("proj")).unwrap();
        let checked = WorkspaceDir::open(&base.join("proj"), Some(&base)).unwrap().identity();
        std::fs::rename(base.join("proj"), base.join("old")).unwrap();
        std::fs::create_dir(base.join("proj")).unwrap();
        let now = WorkspaceDir::open(&base.join("proj"), Some(&base)).unwrap();
        assert!(matches!(now.expect(checked), Err(DirError::Replaced { .. })));
        assert!(matches!(
            WorkspaceDir::open(&base.join("proj"), Some(Path::new("/nonexistent-root"))),
            Err(DirError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn children_are_created_private_and_never_through_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = WorkspaceDir::open(&real(tmp.path()), None).unwrap();
        let child = root.child("s1", true).unwrap();
        let mode = std::fs::metadata(tmp.path().join("s1")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(root.child("s1", false).unwrap().identity(), child.identity());
        assert!(matches!(root.child("missing", false), Err(DirError::Missing { .. })));
    }
}
