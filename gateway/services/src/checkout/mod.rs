//! Repository resources: cloned with `git` into a private staging directory beside the
//! workspaces, then moved into the session's workspace in one rename (ADR 0017). Clones run on
//! the host as the gateway's user, so everything that could let a repository URL or a token
//! reach further than the repository is closed here:
//!
//! - only `http` and `https` URLs, without credentials in them, written exactly as they are
//!   read, and git is given the checked URL's serialization, never the client's text
//!   ([`target`]); only git's `http`/`https` transports; redirects are not followed;
//! - the host is resolved once and checked with the SSRF filter (no loopback, private or
//!   link-local address unless `environments.allow_private_repositories`), and git is pinned
//!   to the checked address (`http.curloptResolve`), so DNS rebinding cannot move it;
//! - the token reaches git only through its environment (`GIT_CONFIG_*`, an
//!   `Authorization` header), never its argv, a config file or the clone's `.git/config`;
//! - no system or user git configuration is read (no credential helpers, no hooks), nothing
//!   prompts;
//! - the clone is bounded in time, in bytes on disk and in entries (files, directories,
//!   links), and killed (its whole process group) past any bound; what it left is removed;
//! - git's own error output stays in the operator's log: the client is told the host and
//!   what kind of failure it was, never what the network answered (that would turn a
//!   checkout into a port scanner that reads back).

mod target;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use gateway_core::session::{Checkout, Secret};
use serde::{Deserialize, Serialize};
pub use target::{MAX_URL, RepositoryError, check_checkout, repository_url};
use tokio::io::AsyncReadExt as _;
use tracing::warn;

use crate::ssrf;

/// `[environments]` settings of repository checkouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckoutConfig {
    /// The git program.
    pub git: PathBuf,
    /// Lets repository URLs name loopback, private and link-local addresses.
    pub allow_private_repositories: bool,
    /// How long one checkout may take.
    #[serde(rename = "checkout_timeout_secs", with = "gateway_core::durations::secs")]
    pub timeout: Duration,
    /// The most bytes one checkout may put on disk (its `.git` included).
    pub max_repository_bytes: u64,
    /// The most entries (files, directories, symlinks; its `.git` included) one checkout may
    /// put on disk: a small pack can hold very many empty files, which the byte bound never
    /// sees.
    pub max_repository_entries: u64,
}

impl Default for CheckoutConfig {
    fn default() -> Self {
        Self {
            git: PathBuf::from("git"),
            allow_private_repositories: false,
            timeout: Duration::from_secs(300),
            max_repository_bytes: 1 << 30,
            // Ten times what most repositories under the byte bound hold (rust-lang/rust, a
            // large one, checks out ~60,000 entries with its shallow `.git`), far below what
            // hurts a filesystem; a repository with more is also one over the byte bound in
            // practice (the Linux kernel: ~95,000 entries, ~1.5 GiB).
            max_repository_entries: 100_000,
        }
    }
}

/// How often a running clone's size is measured.
const SIZE_EVERY: Duration = Duration::from_millis(200);
/// The most of git's error output kept for the operator's log.
const STDERR_KEPT: usize = 2048;

/// Why a checkout did not happen. The message is what the client sees (in the turn's error):
/// the host and the kind of failure; git's own words go to the operator's log only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckoutError {
    /// The resource is not one git may be given (also refused when it was added).
    #[error(transparent)]
    Refused(#[from] RepositoryError),
    #[error("cannot resolve the repository host {0}")]
    Resolve(String),
    #[error(
        "the repository host {0} resolves only to loopback, private or link-local addresses (environments.allow_private_repositories is off)"
    )]
    PrivateOnly(String),
    #[error("could not fetch the repository from {0}; the gateway's log has git's report")]
    Fetch(String),
    #[error("the branch {branch:?} is not in the repository at {host}")]
    NoBranch { host: String, branch: String },
    #[error("the commit {sha} is not in the repository at {host}")]
    NoCommit { host: String, sha: String },
    #[error("the checkout took longer than {0:?} (environments.checkout_timeout_secs)")]
    Timeout(Duration),
    #[error("the checkout grew past {limit} bytes ({size} on disk; environments.max_repository_bytes)")]
    TooLarge { limit: u64, size: u64 },
    #[error(
        "the checkout has more than {limit} entries ({entries} files, directories and links; environments.max_repository_entries)"
    )]
    TooManyEntries { limit: u64, entries: u64 },
    #[error("cannot run git: {0}")]
    Git(String),
    #[error("{0}")]
    Staging(String),
}

/// How one git command ended, before it is judged against what it was asked to do.
enum GitEnd {
    Done,
    /// git failed; its (redacted, bounded) error output.
    Failed(String),
}

impl CheckoutConfig {
    /// Whether git runs here (placement offers repositories only then).
    pub fn available(&self) -> bool {
        std::process::Command::new(&self.git)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Clones `url` at `checkout` into `dest` (a path that does not exist yet, in a private
    /// directory: git's home and working directory are its parent); on any failure nothing is
    /// left there.
    pub async fn clone_into(
        &self,
        dest: &Path,
        url: &str,
        checkout: Option<&Checkout>,
        token: Option<&Secret>,
    ) -> Result<(), CheckoutError> {
        let staging =
            dest.parent().ok_or_else(|| CheckoutError::Staging("the clone's directory has no parent".into()))?;
        let result = self.run_clone(staging, dest, url, checkout, token).await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(dest);
        }
        result
    }

    async fn run_clone(
        &self,
        staging: &Path,
        dest: &Path,
        url: &str,
        checkout: Option<&Checkout>,
        token: Option<&Secret>,
    ) -> Result<(), CheckoutError> {
        let url = repository_url(url, self.allow_private_repositories)?;
        if let Some(checkout) = checkout {
            check_checkout(checkout)?;
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let pin = self.resolve(&url).await?;
        let mut args: Vec<String> = vec!["clone".into(), "--quiet".into(), "--template=".into()];
        match checkout {
            None => args.extend(["--depth".into(), "1".into()]),
            Some(Checkout::Branch { name }) => {
                args.extend(["--depth".into(), "1".into(), "--single-branch".into(), "--branch".into(), name.clone()]);
            }
            // Any commit: the whole history is fetched (a server need not serve unadvertised
            // commits by id), then the commit checked out.
            Some(Checkout::Commit { .. }) => args.push("--no-checkout".into()),
        }
        // The checked URL's serialization, never the text as given.
        args.extend(["--".into(), url.as_str().into(), dest.display().to_string()]);
        if let GitEnd::Failed(report) = self.git(staging, &pin, token, &args, dest).await? {
            warn!(host, report, "git could not clone a repository");
            return Err(match checkout {
                Some(Checkout::Branch { name }) if report.contains("not found in upstream") => {
                    CheckoutError::NoBranch { host, branch: name.clone() }
                }
                _ => CheckoutError::Fetch(host),
            });
        }
        if let Some(Checkout::Commit { sha }) = checkout {
            let args =
                ["-C".into(), dest.display().to_string(), "checkout".into(), "--quiet".into(), "--detach".into()];
            let mut args = args.to_vec();
            args.push(sha.clone());
            if let GitEnd::Failed(report) = self.git(staging, &pin, None, &args, dest).await? {
                warn!(host, report, "git could not check out a commit");
                return Err(CheckoutError::NoCommit { host, sha: sha.clone() });
            }
        }
        Ok(())
    }

    /// Resolves the (checked) URL's host to the address git must use.
    async fn resolve(&self, url: &reqwest::Url) -> Result<Option<String>, CheckoutError> {
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() {
            return Ok(None);
        }
        let looked_up = tokio::net::lookup_host((bare, port)).await.map(|a| a.map(|a| a.ip()).collect::<Vec<_>>());
        let addrs = match looked_up {
            Ok(addrs) => addrs,
            Err(e) => {
                warn!(host, error = %e, "cannot resolve a repository host");
                return Err(CheckoutError::Resolve(host.clone()));
            }
        };
        let allowed = addrs.into_iter().find(|ip| self.allow_private_repositories || ssrf::is_public(*ip));
        let ip = allowed.ok_or_else(|| CheckoutError::PrivateOnly(host.clone()))?;
        let shown = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        Ok(Some(format!("{bare}:{port}:{shown}")))
    }

    /// Runs git with `args` in a clean environment, bounded in time and in the bytes and
    /// entries under `watch` (measured while it runs and once more when it ends).
    async fn git(
        &self,
        staging: &Path,
        pin: &Option<String>,
        token: Option<&Secret>,
        args: &[String],
        watch: &Path,
    ) -> Result<GitEnd, CheckoutError> {
        let mut cmd = tokio::process::Command::new(&self.git);
        let mut config: Vec<(&str, String)> = vec![
            ("protocol.allow", "never".into()),
            ("protocol.http.allow", "always".into()),
            ("protocol.https.allow", "always".into()),
            ("http.followRedirects", "false".into()),
            ("credential.helper", String::new()),
            ("core.askPass", String::new()),
            ("core.hooksPath", "/dev/null".into()),
        ];
        if let Some(pin) = pin {
            config.push(("http.curloptResolve", pin.clone()));
        }
        if let Some(token) = token {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", token.0));
            config.push(("http.extraHeader", format!("Authorization: Basic {basic}")));
        }
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .env("HOME", staging)
            .env("LANG", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (key, value)) in config.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        cmd.args(args)
            .current_dir(staging)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| CheckoutError::Git(format!("{}: {e}", self.git.display())))?;
        let pgid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
        let mut stderr = child.stderr.take();
        let read_stderr = async move {
            let mut out = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.take(64 * 1024).read_to_end(&mut out).await;
            }
            out
        };
        let too_big = async {
            loop {
                tokio::time::sleep(SIZE_EVERY).await;
                if let Err(over) = self.within_bounds(watch).await {
                    return over;
                }
            }
        };
        let outcome = tokio::select! {
            done = async { tokio::join!(child.wait(), read_stderr) } => Ok(done),
            _ = tokio::time::sleep(self.timeout) => Err(CheckoutError::Timeout(self.timeout)),
            over = too_big => Err(over),
        };
        let (status, stderr) = match outcome {
            Ok(done) => done,
            Err(why) => {
                // git's helpers (`git-remote-https`) share its process group.
                if let Some(pgid) = pgid {
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                }
                let _ = child.wait().await;
                return Err(why);
            }
        };
        let status = status.map_err(|e| CheckoutError::Git(e.to_string()))?;
        // What git left counts too, whether it finished between two measurements or failed.
        self.within_bounds(watch).await?;
        if status.success() {
            return Ok(GitEnd::Done);
        }
        let mut text = String::from_utf8_lossy(&stderr).trim().to_owned();
        if let Some(token) = token.filter(|t| !t.0.is_empty()) {
            text = text.replace(&token.0, "<redacted>");
        }
        let start = text.len().saturating_sub(STDERR_KEPT);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        Ok(GitEnd::Failed(format!("{status}: {}", &text[start..])))
    }

    /// Whether what is under `dir` is within the byte and entry bounds.
    async fn within_bounds(&self, dir: &Path) -> Result<(), CheckoutError> {
        let (bytes_limit, entries_limit) = (self.max_repository_bytes, self.max_repository_entries);
        let dir = dir.to_path_buf();
        let usage = tokio::task::spawn_blocking(move || disk_usage(&dir, entries_limit)).await.unwrap_or_default();
        if usage.entries > entries_limit {
            return Err(CheckoutError::TooManyEntries { limit: entries_limit, entries: usage.entries });
        }
        if usage.bytes > bytes_limit {
            return Err(CheckoutError::TooLarge { limit: bytes_limit, size: usage.bytes });
        }
        Ok(())
    }
}

/// What a checkout put on disk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Usage {
    /// Bytes of its regular files.
    bytes: u64,
    /// Its files, directories and symlinks.
    entries: u64,
}

/// What is under `dir` (symlinks not followed); the walk stops once past `max_entries`.
fn disk_usage(dir: &Path, max_entries: u64) -> Usage {
    let mut usage = Usage::default();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            usage.entries += 1;
            if usage.entries > max_entries {
                return usage;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(entry.path()),
                Ok(t) if t.is_file() => usage.bytes += entry.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn urls_that_could_reach_further_are_refused_before_git_runs() {
        let c = CheckoutConfig { git: PathBuf::from("/nonexistent/git"), ..Default::default() };
        let dest = tempfile::tempdir().unwrap();
        for (url, why) in [
            ("file:///etc", "http or https"),
            ("ext::sh -c id", "whitespace"),
            ("https://user:token@example.com/r.git", "credentials"),
            ("http://127.0.0.1/r.git", "loopback, private"),
            ("http://localhost:8080/r.git", "loopback, private"),
            ("http://[::1]/r.git", "loopback, private"),
            ("http://10.1.2.3/r.git", "loopback, private"),
            ("http://example.com\\@127.0.0.1/r.git", "backslash"),
        ] {
            let err = c.clone_into(&dest.path().join("r"), url, None, None).await.unwrap_err();
            assert!(matches!(err, CheckoutError::Refused(_)), "{url}: {err}");
            assert!(err.to_string().contains(why), "{url}: {err}");
        }
        let branch = Checkout::Branch { name: "main\0".into() };
        let err = c.clone_into(&dest.path().join("r"), "https://example.com/r.git", Some(&branch), None).await;
        assert!(matches!(err, Err(CheckoutError::Refused(RepositoryError::Branch(_)))), "{err:?}");
    }

    #[test]
    fn usage_counts_every_entry_and_stops_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        for i in 0..10 {
            std::fs::write(dir.path().join("d").join(i.to_string()), b"12345").unwrap();
        }
        assert_eq!(disk_usage(dir.path(), 1000), Usage { bytes: 50, entries: 11 });
        assert!(disk_usage(dir.path(), 3).entries == 4, "the walk stops once past the bound");
    }
}
