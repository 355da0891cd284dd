//! Repository resources: cloned with `git` into a private staging directory beside the
//! workspaces, then moved into the session's workspace in one rename (ADR 0017). Clones run on
//! the host as the gateway's user, so everything that could let a repository URL or a token
//! reach further than the repository is closed here:
//!
//! - only `http` and `https` URLs, without credentials in them; only git's `http`/`https`
//!   transports; redirects are not followed;
//! - the host is resolved once and checked with the SSRF filter (no loopback, private or
//!   link-local address unless `environments.allow_private_repositories`), and git is pinned
//!   to the checked address (`http.curloptResolve`), so DNS rebinding cannot move it;
//! - the token reaches git only through its environment (`GIT_CONFIG_*`, an
//!   `Authorization` header), never its argv, a config file or the clone's `.git/config`;
//! - no system or user git configuration is read (no credential helpers, no hooks), nothing
//!   prompts;
//! - the clone is bounded in time and in bytes on disk, and killed (its whole process group)
//!   past either bound; what it left is removed.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use gateway_core::session::{Checkout, Secret};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt as _;

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
}

impl Default for CheckoutConfig {
    fn default() -> Self {
        Self {
            git: PathBuf::from("git"),
            allow_private_repositories: false,
            timeout: Duration::from_secs(300),
            max_repository_bytes: 1 << 30,
        }
    }
}

/// How often a running clone's size is measured.
const SIZE_EVERY: Duration = Duration::from_millis(200);
/// The most of git's error output kept for the error message.
const STDERR_KEPT: usize = 2048;

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
    ) -> Result<(), String> {
        let staging = dest.parent().ok_or("the clone's directory has no parent")?;
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
    ) -> Result<(), String> {
        let pin = self.resolve(url).await?;
        let mut args: Vec<String> = vec!["clone".into(), "--quiet".into(), "--template=".into()];
        match checkout {
            None => args.extend(["--depth".into(), "1".into()]),
            Some(Checkout::Branch { name }) => {
                check_branch(name)?;
                args.extend(["--depth".into(), "1".into(), "--single-branch".into(), "--branch".into(), name.clone()]);
            }
            // Any commit: the whole history is fetched (a server need not serve unadvertised
            // commits by id), then the commit checked out.
            Some(Checkout::Commit { sha }) => {
                check_sha(sha)?;
                args.push("--no-checkout".into());
            }
        }
        args.extend(["--".into(), url.into(), dest.display().to_string()]);
        self.git(staging, &pin, token, &args, Some(dest)).await?;
        if let Some(Checkout::Commit { sha }) = checkout {
            let args =
                ["-C".into(), dest.display().to_string(), "checkout".into(), "--quiet".into(), "--detach".into()];
            let mut args = args.to_vec();
            args.push(sha.clone());
            self.git(staging, &pin, None, &args, Some(dest)).await?;
        }
        Ok(())
    }

    /// Checks the URL and resolves its host to the address git must use.
    async fn resolve(&self, url: &str) -> Result<Option<String>, String> {
        let parsed = ssrf::check_url(url, self.allow_private_repositories).map_err(|e| match e {
            ssrf::TargetError::BadUrl(_) => "the URL must be http or https, without credentials in it".to_owned(),
            ssrf::TargetError::Private(h) => format!("{h} is a loopback, private or link-local address"),
        })?;
        let host = parsed.host_str().unwrap_or_default().to_owned();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() {
            return Ok(None);
        }
        let addrs: Vec<IpAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .map(|a| a.ip())
            .collect();
        let allowed = addrs.into_iter().find(|ip| self.allow_private_repositories || ssrf::is_public(*ip));
        let ip = allowed.ok_or_else(|| format!("{host} resolves only to loopback, private or link-local addresses"))?;
        let shown = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        Ok(Some(format!("{bare}:{port}:{shown}")))
    }

    /// Runs git with `args` in a clean environment; bounded in time and (with `watch`) in the
    /// bytes under that directory.
    async fn git(
        &self,
        staging: &Path,
        pin: &Option<String>,
        token: Option<&Secret>,
        args: &[String],
        watch: Option<&Path>,
    ) -> Result<(), String> {
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
        let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", self.git.display()))?;
        let pgid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
        let mut stderr = child.stderr.take();
        let read_stderr = async move {
            let mut out = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.take(64 * 1024).read_to_end(&mut out).await;
            }
            out
        };
        let limit = self.max_repository_bytes;
        let too_big = async {
            let Some(dir) = watch else { return std::future::pending().await };
            loop {
                tokio::time::sleep(SIZE_EVERY).await;
                let dir = dir.to_path_buf();
                let size = tokio::task::spawn_blocking(move || disk_bytes(&dir)).await.unwrap_or(0);
                if size > limit {
                    return size;
                }
            }
        };
        let outcome = tokio::select! {
            done = async { tokio::join!(child.wait(), read_stderr) } => Ok(done),
            _ = tokio::time::sleep(self.timeout) => Err(format!("the checkout took longer than {:?}", self.timeout)),
            size = too_big => Err(format!("the checkout grew past {limit} bytes ({size} on disk)")),
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
        let status = status.map_err(|e| e.to_string())?;
        if status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&stderr).trim().to_owned();
        if let Some(token) = token.filter(|t| !t.0.is_empty()) {
            text = text.replace(&token.0, "<redacted>");
        }
        let start = text.len().saturating_sub(STDERR_KEPT);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        Err(format!("git failed ({status}): {}", &text[start..]))
    }
}

/// A branch name git will read as a name: not an option, no whitespace or control characters.
fn check_branch(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 255
        || name.starts_with('-')
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!("{name:?} is not a branch name"));
    }
    Ok(())
}

/// A commit id: 4 to 64 hexadecimal digits.
fn check_sha(sha: &str) -> Result<(), String> {
    if !(4..=64).contains(&sha.len()) || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{sha:?} is not a commit id"));
    }
    Ok(())
}

/// Bytes of the regular files under `dir` (symlinks not followed).
fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_and_ids_reach_git_as_refs() {
        assert!(check_branch("main").is_ok() && check_branch("feature/x-1").is_ok());
        for bad in ["", "-c", "--upload-pack=x", "a b", "a\nb"] {
            assert!(check_branch(bad).is_err(), "{bad:?}");
        }
        assert!(check_sha("0123abcd").is_ok());
        for bad in ["", "abc", "--x", "xyz123", &"a".repeat(65)] {
            assert!(check_sha(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn urls_that_could_reach_further_are_refused_before_git_runs() {
        let c = CheckoutConfig { git: PathBuf::from("/nonexistent/git"), ..Default::default() };
        for (url, why) in [
            ("file:///etc", "http or https"),
            ("ext::sh -c id", "http or https"),
            ("https://user:token@example.com/r.git", "without credentials"),
            ("http://127.0.0.1/r.git", "loopback, private"),
            ("http://localhost:8080/r.git", "loopback, private"),
            ("http://[::1]/r.git", "loopback, private"),
            ("http://10.1.2.3/r.git", "loopback, private"),
        ] {
            let err = c.resolve(url).await.unwrap_err();
            assert!(err.contains(why), "{url}: {err}");
        }
    }
}
