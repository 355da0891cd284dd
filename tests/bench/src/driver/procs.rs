//! Child processes the driver starts and measures: spawn with a log file, wait until ready,
//! read CPU time and resident memory from `/proc`, wait until idle, stop.
//!
//! CPU time is `utime + stime` of `/proc/<pid>/stat` (every thread of the process) in clock
//! ticks of `USER_HZ`, which is 100 on every Linux architecture the project runs on; the
//! figures are deltas over windows of seconds, so a tick (10 ms) is small against them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::error::{BenchError, Result};

const USER_HZ: u64 = 100;

pub struct Proc {
    pub name: String,
    child: Child,
    pid: u32,
    log: PathBuf,
}

/// A loopback port free at the time of asking.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Clears `GATEWAY_*` variables from a child's environment: they override its config file,
/// and the bench must measure the configuration it wrote.
pub fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GATEWAY_") {
            cmd.env_remove(k);
        }
    }
}

impl Proc {
    /// Starts `cmd` with stderr (and stdout unless piped) appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path, pipe_stdio: bool) -> Result<Proc> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let out = file.try_clone()?;
        cmd.stderr(Stdio::from(file)).kill_on_drop(true);
        if pipe_stdio {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        } else {
            cmd.stdin(Stdio::null()).stdout(Stdio::from(out));
        }
        let child = cmd.spawn().map_err(|e| BenchError::Spawn(name.to_owned(), e))?;
        let pid = child.id().ok_or_else(|| BenchError::Proc(0, format!("{name} has no pid")))?;
        Ok(Proc { name: name.to_owned(), child, pid, log: log.to_owned() })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// CPU time used so far (user + system, all threads).
    pub fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map_err(|e| BenchError::Proc(self.pid, e.to_string()))?;
        cpu_of_stat(&stat).ok_or_else(|| BenchError::Proc(self.pid, "unreadable stat line".into()))
    }

    /// Resident set size (VmRSS) in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|e| BenchError::Proc(self.pid, e.to_string()))?;
        rss_of_status(&status).ok_or_else(|| BenchError::Proc(self.pid, "no VmRSS line".into()))
    }

    /// The last `n` lines of the process's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                Err(BenchError::Exited { name: self.name.clone(), status: status.to_string(), log: self.log_tail(20) })
            }
            _ => Ok(()),
        }
    }

    /// Polls `url` until it answers 2xx, the process exits, or `within` passes.
    pub async fn wait_http(&mut self, http: &reqwest::Client, url: &str, within: Duration) -> Result<()> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            self.check_alive()?;
            if let Ok(r) = http.get(url).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(BenchError::NotReady { name: self.name.clone(), secs: within.as_secs(), log: self.log_tail(20) })
    }

    /// Waits until the process uses under 5 % of a core over two consecutive 250 ms windows
    /// (its backlog is done), at most `max`. Returns how long it took, `None` if it never
    /// settled.
    pub async fn settle(&self, max: Duration) -> Option<Duration> {
        let start = Instant::now();
        let window = Duration::from_millis(250);
        let mut quiet = 0;
        let mut last = self.cpu().ok()?;
        while start.elapsed() < max {
            tokio::time::sleep(window).await;
            let now = self.cpu().ok()?;
            quiet = if now.saturating_sub(last) < window / 20 { quiet + 1 } else { 0 };
            last = now;
            if quiet >= 2 {
                return Some(start.elapsed());
            }
        }
        None
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

fn cpu_of_stat(stat: &str) -> Option<Duration> {
    // The command name (field 2) may hold spaces and parentheses: fields restart after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / USER_HZ))
}

fn rss_of_status(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}

/// Raises the soft limit of open files to the hard limit (children inherit it): 10,000
/// idle subscribers need 10,000 descriptors on each side. Returns the limit now in force.
pub fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                return hard;
            }
            soft
        }
        Err(_) => 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_lines_parse() {
        let stat = "1234 (gate way) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0";
        assert_eq!(cpu_of_stat(stat), Some(Duration::from_millis(3000)));
        assert_eq!(rss_of_status("Name:\tx\nVmRSS:\t  12345 kB\n"), Some(12345));
        assert_eq!(rss_of_status("Name:\tx\n"), None);
    }
}
