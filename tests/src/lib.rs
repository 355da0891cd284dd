//! Helpers for end-to-end tests: start gateway processes, signal them, wait for conditions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub mod load;
pub mod pg_cluster;
pub mod tmpfs;

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A fresh, empty directory for one test's gateway (its `./data`), named after the test and
/// this process.
pub fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gateway-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test directory");
    dir
}

/// Resident memory of process `pid`, in MiB (`VmRSS` of `/proc/PID/status`).
pub fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).expect("VmRSS") / 1024
}

/// A running gateway process; killed when dropped.
pub struct Gateway {
    pub name: String,
    pub port: u16,
    pub child: Child,
    pub log: PathBuf,
}

pub struct GatewayBuilder {
    binary: PathBuf,
    name: String,
    env: HashMap<String, String>,
    cwd: Option<PathBuf>,
    args: Vec<String>,
    umask: Option<u32>,
}

impl GatewayBuilder {
    pub fn new(binary: impl Into<PathBuf>, name: &str) -> Self {
        Self {
            binary: binary.into(),
            name: name.to_owned(),
            env: HashMap::new(),
            cwd: None,
            args: vec!["serve".into()],
            umask: None,
        }
    }

    pub fn env(mut self, k: &str, v: impl ToString) -> Self {
        self.env.insert(k.to_owned(), v.to_string());
        self
    }

    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Starts the process with this umask (through `sh -c 'umask …; exec …'`, so the pid is
    /// still the gateway's).
    pub fn umask(mut self, mask: u32) -> Self {
        self.umask = Some(mask);
        self
    }

    /// Starts the process; `GATEWAY_LISTEN` is set to a free port unless given.
    pub fn spawn(self) -> Gateway {
        let port = match self.env.get("GATEWAY_LISTEN") {
            Some(l) => l.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port in GATEWAY_LISTEN"),
            None => free_port(),
        };
        let log = std::env::temp_dir().join(format!("gateway-{}-{}-{port}.log", self.name, std::process::id()));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = match self.umask {
            None => Command::new(&self.binary),
            Some(mask) => {
                let mut sh = Command::new("/bin/sh");
                sh.arg("-c").arg(format!("umask {mask:03o} && exec \"$0\" \"$@\"")).arg(&self.binary);
                sh
            }
        };
        cmd.args(&self.args)
            .env_remove("GATEWAY_CONFIG")
            .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
            .env("GATEWAY_INSTANCE_NAME", &self.name)
            .env("GATEWAY_LOG__FORMAT", "json")
            .env("GATEWAY_LOG", "info")
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary.display()));
        Gateway { name: self.name, port, child, log }
    }
}

impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, s: Signal) {
        kill(self.pid(), s).expect("signal the gateway");
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&self, within: Duration) {
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(r) = client.get(self.url("/readyz")).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} not ready in {within:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the process to exit and returns its status code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not exit in {within:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 50 ms until it yields a value; panics with `what` after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {secs}s waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
