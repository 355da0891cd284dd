//! Network for sandboxes that may use it: a network namespace of their own, connected to the
//! outside by user-mode networking (`slirp4netns --disable-host-loopback`).
//!
//! Why not the host's network: a sandbox sharing it reaches `127.0.0.1`, and a gateway without
//! API keys trusts loopback clients, so a sandboxed command could drive every session (ADR
//! 0010). In its own namespace the sandbox's `127.0.0.1` is its own; slirp4netns makes its
//! outbound connections from the host as ordinary sockets (the peer sees the host's address,
//! never loopback) and refuses connections to the host's loopback (`10.0.2.2` is not mapped).
//!
//! Sequence, per sandboxed process: bubblewrap is started with `--json-status-fd` (it reports
//! the sandbox's pid) and `--block-fd` (the sandboxed program waits on it). A task reads the
//! pid, waits until bubblewrap has set up the namespace's loopback (slirp4netns brings `lo`
//! up, and bubblewrap fails if it finds it up already), attaches slirp4netns to that
//! process's namespaces, waits until slirp4netns says the interface is up, then unblocks the
//! program. It keeps slirp4netns until bubblewrap exits
//! (the status pipe closes). If anything fails the sandbox is killed: a program that asked
//! for network never runs without knowing it has none, and never on the host's network.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

/// How long slirp4netns may take to bring the interface up.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The resolver slirp4netns offers inside the namespace.
pub const SANDBOX_DNS: &str = "10.0.2.3";

/// The pipes one networked sandbox process needs, and where bubblewrap finds them.
pub struct NetPipes {
    /// The ends bubblewrap gets, at the child descriptors of `--json-status-fd` and
    /// `--block-fd`.
    pub child_ends: Vec<FdMapping>,
    /// The ends the attach task keeps.
    status_read: OwnedFd,
    block_write: OwnedFd,
}

impl NetPipes {
    pub fn new(status_fd: i32, block_fd: i32) -> std::io::Result<Self> {
        let (status_read, status_write) = std::io::pipe()?;
        let (block_read, block_write) = std::io::pipe()?;
        Ok(Self {
            child_ends: vec![
                FdMapping { parent_fd: OwnedFd::from(status_write), child_fd: status_fd },
                FdMapping { parent_fd: OwnedFd::from(block_read), child_fd: block_fd },
            ],
            status_read: OwnedFd::from(status_read),
            block_write: OwnedFd::from(block_write),
        })
    }

    /// Starts the task that attaches networking once bubblewrap reports its sandbox. It ends
    /// when bubblewrap exits (or never starts: the pipe's write end is dropped with the
    /// command).
    pub fn attach(self, slirp: PathBuf) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if let Err(e) = attach(self.status_read, self.block_write, slirp).await {
                tracing::warn!(error = %e, "sandbox networking failed; the sandbox was stopped");
            }
        })
    }
}

async fn attach(status: OwnedFd, block: OwnedFd, slirp: PathBuf) -> Result<(), String> {
    let status = pipe::Receiver::from_owned_fd(status).map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(status);
    let mut first = String::new();
    let n = lines.read_line(&mut first).await.map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(()); // bubblewrap never started the sandbox: nothing to connect
    }
    let pid = child_pid(&first).ok_or_else(|| format!("bubblewrap reported no child pid: {first:?}"))?;
    let stop = || {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    };
    // The user namespace that owns the sandbox's network namespace, held at once: bubblewrap
    // later moves the sandbox into a nested one (to switch to the sandbox's uid), and
    // slirp4netns, which by default joins the process's current user namespace, would have
    // no rights over the network from there.
    let owner = match std::fs::File::open(format!("/proc/{pid}/ns/user")) {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            stop();
            return Err(format!("cannot hold the sandbox's user namespace: {e}"));
        }
    };
    if let Err(e) = loopback_ready(pid).await {
        stop();
        return Err(e);
    }
    let mut slirp = match start_slirp(&slirp, pid, owner).await {
        Ok(child) => child,
        Err(e) => {
            stop();
            return Err(e);
        }
    };
    let mut block = pipe::Sender::from_owned_fd(block).map_err(|e| e.to_string())?;
    if let Err(e) = block.write_all(b"1").await {
        stop();
        return Err(format!("cannot start the sandboxed program: {e}"));
    }
    drop(block);
    // Keep slirp4netns until bubblewrap is gone (EOF on the status pipe), then stop it.
    let mut rest = Vec::new();
    let _ = lines.read_to_end(&mut rest).await;
    let _ = slirp.0.start_kill();
    let _ = slirp.0.wait().await;
    Ok(())
}

/// Waits until the sandbox's network namespace has its loopback address (bubblewrap adds it
/// before it waits on the block descriptor).
async fn loopback_ready(pid: i32) -> Result<(), String> {
    let table = format!("/proc/{pid}/net/fib_trie");
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        match tokio::fs::read_to_string(&table).await {
            Ok(t) if t.contains("127.0.0.1") => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("the sandbox went away before its network was attached: {e}")),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err("the sandbox's loopback was never set up".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A running slirp4netns (killed when dropped).
struct Slirp(tokio::process::Child);

async fn start_slirp(binary: &PathBuf, pid: i32, userns: OwnedFd) -> Result<Slirp, String> {
    let (ready_read, ready_write) = std::io::pipe().map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new(binary);
    cmd.args(["--configure", "--mtu=65520", "--disable-host-loopback", "--ready-fd=3"])
        .arg("--userns-path=/proc/self/fd/4")
        .args([pid.to_string(), "tap0".to_owned()])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let fds = vec![
        FdMapping { parent_fd: OwnedFd::from(ready_write), child_fd: 3 },
        FdMapping { parent_fd: userns, child_fd: 4 },
    ];
    cmd.fd_mappings(fds).map_err(|e| e.to_string())?;
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    drop(cmd); // our copy of the ready pipe's write end: EOF if slirp4netns dies
    let mut ready = pipe::Receiver::from_owned_fd(OwnedFd::from(ready_read)).map_err(|e| e.to_string())?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(READY_TIMEOUT, ready.read(&mut byte)).await {
        Ok(Ok(1)) => Ok(Slirp(child)),
        outcome => {
            let _ = child.start_kill();
            let mut err = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = tokio::time::timeout(Duration::from_secs(1), stderr.read_to_string(&mut err)).await;
            }
            let why = match outcome {
                Err(_) => "did not bring the interface up in time".to_owned(),
                _ => "exited before the interface was up".to_owned(),
            };
            Err(format!("slirp4netns {why}: {}", err.trim()))
        }
    }
}

/// `child-pid` from bubblewrap's first status document.
fn child_pid(doc: &str) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_str(doc.trim()).ok()?;
    v.get("child-pid")?.as_i64().and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_pid_is_read_from_the_status_document() {
        assert_eq!(child_pid("{ \"child-pid\": 23161, \"net-namespace\": 4026532183 }\n"), Some(23161));
        assert_eq!(child_pid("{ \"exit-code\": 0 }"), None);
        assert_eq!(child_pid("garbage"), None);
    }
}
