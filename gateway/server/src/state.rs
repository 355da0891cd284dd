//! The gateway's local state on disk is private to its user, whatever the umask: `data_dir`
//! and the workspaces root are created 0700 (the SQLite store makes its own files 0600, the
//! secret key file is made 0600 by the [`SecretBox`]).
//!
//! A `data_dir` that already exists with a looser mode is reported, not changed: the operator
//! may have pointed it at a directory they share on purpose, and a chmod of the wrong
//! directory (`/srv`, a home) would be worse than the warning. The workspaces root is the
//! gateway's own directory, so it is tightened. Every session workspace lives under it, so
//! its 0700 also closes the workspaces of earlier versions (created 0755).
//!
//! [`SecretBox`]: gateway_services::SecretBox

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
#[error("cannot create {path}: {error}")]
pub struct StateDirError {
    path: PathBuf,
    error: std::io::Error,
}

/// Where session workspaces live.
pub fn workspaces_root(config: &Config) -> PathBuf {
    Path::new(&config.data_dir).join("workspaces")
}

/// Creates `data_dir` and the workspaces root privately (or reports and tightens them).
pub fn prepare(config: &Config) -> Result<(), StateDirError> {
    let data_dir = Path::new(&config.data_dir);
    if !private_dir(data_dir)? {
        warn!(
            path = %data_dir.display(),
            "data_dir is readable by other users; it holds session workspaces and the secret key: `chmod 700` it"
        );
    }
    let workspaces = workspaces_root(config);
    if !private_dir(&workspaces)? {
        match std::fs::set_permissions(&workspaces, std::fs::Permissions::from_mode(0o700)) {
            Ok(()) => info!(path = %workspaces.display(), "made the workspaces root private (0700)"),
            Err(e) => warn!(path = %workspaces.display(), error = %e, "the workspaces root is readable by other users"),
        }
    }
    Ok(())
}

/// Creates `dir` (and missing parents) with mode 0700; says whether it is private now (an
/// existing directory keeps its mode).
fn private_dir(dir: &Path) -> Result<bool, StateDirError> {
    let err = |error| StateDirError { path: dir.to_owned(), error };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    let mode = std::fs::metadata(dir).map_err(err)?.permissions().mode();
    Ok(mode & 0o077 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
    }

    #[test]
    fn state_directories_are_created_private_and_the_workspaces_root_is_tightened() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = Config { data_dir: tmp.path().join("a/data").display().to_string(), ..Config::default() };
        prepare(&config).expect("created");
        assert_eq!(mode(Path::new(&config.data_dir)), 0o700);
        assert_eq!(mode(&workspaces_root(&config)), 0o700);

        let shared = tmp.path().join("shared");
        std::fs::create_dir_all(shared.join("workspaces")).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(shared.join("workspaces"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let config = Config { data_dir: shared.display().to_string(), ..Config::default() };
        prepare(&config).expect("existing");
        assert_eq!(mode(&shared), 0o755, "an existing data_dir is reported, not changed");
        assert_eq!(mode(&workspaces_root(&config)), 0o700, "the workspaces root is ours: tightened");
    }
}
