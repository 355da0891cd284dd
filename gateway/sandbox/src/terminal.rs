//! Terminals: commands an agent starts, polls and stops itself (the ACP client methods
//! `terminal/create`, `output`, `wait_for_exit`, `kill`, `release`).
//!
//! Each terminal is one process started through [`Sandbox::command`] (so inside the sandbox,
//! with its cleared environment, in its own process group), its stdout and stderr merged into
//! one pipe. Output is kept up to a byte limit, dropping from the *start* on a character
//! boundary, as the protocol asks. A working directory must lie inside the workspace (checked
//! through the workspace's directory handle, like the file tools); extra environment variables
//! and the directory are applied by `env` inside the sandbox: they come from the agent, a
//! sandboxed party, so they must never reach the launcher's own environment (see
//! [`Sandbox::command_with_env`]). An exit is reported only after the output written before
//! it has been read. A terminal that outlives the sandbox's longest wall-clock limit is
//! killed; kill, release, hibernation and dropping the table kill the terminal's whole
//! process group, including children its command left in the background.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::Sandbox;
use crate::files::Workspace;

/// Terminals one table may hold at once.
pub const MAX_TERMINALS: usize = 32;
/// Longest command, argument list or environment accepted (bytes, all together).
const MAX_SPEC_BYTES: usize = 1 << 20;
/// How long an exited command's remaining output may take to reach EOF before the exit is
/// published anyway (a background child can keep the pipe open indefinitely).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct TerminalSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// A directory inside the workspace (absolute as the sandbox sees it, or relative).
    pub cwd: Option<String>,
    /// Bytes of output kept (default and maximum: the sandbox's output cap).
    pub output_byte_limit: Option<u64>,
}

/// How a terminal's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalExit {
    pub exit_code: Option<i32>,
    /// The signal's name (e.g. `SIGKILL`) when a signal ended it.
    pub signal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalOutput {
    pub output: String,
    /// Output was dropped from the start to stay within the limit.
    pub truncated: bool,
    pub exit: Option<TerminalExit>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TerminalError {
    #[error("no terminal {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error("at most {MAX_TERMINALS} terminals may be open at once; release one first")]
    TooMany,
    #[error("cannot start the command: {0}")]
    Spawn(String),
}

/// Output kept so far: the newest `limit` bytes.
#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Buffer {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Never start inside a UTF-8 sequence: skip continuation bytes.
            while cut < self.bytes.len() && (self.bytes[cut] & 0b1100_0000) == 0b1000_0000 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

struct Terminal {
    pgid: Pid,
    output: Arc<Mutex<Buffer>>,
    exit: watch::Receiver<Option<TerminalExit>>,
    task: tokio::task::JoinHandle<()>,
    /// The group was found empty once: it is never signalled again (its id may be reused).
    gone: AtomicBool,
}

impl Terminal {
    /// Kills the whole process group, even when its leader has exited: children it left in
    /// the background are still members and must die on kill, release and hibernation. A
    /// group id cannot be reused while any member lives; once none does the call fails with
    /// `ESRCH` and the group is never signalled again. (The one remaining window, a group
    /// that emptied and whose id was recycled before the first kill after it, needs a full
    /// cycle of the host's pid space in between.)
    fn kill(&self) {
        if self.gone.load(Ordering::Relaxed) {
            return;
        }
        match killpg(self.pgid, Signal::SIGKILL) {
            Ok(()) => {}
            Err(nix::errno::Errno::ESRCH) => self.gone.store(true, Ordering::Relaxed),
            Err(e) => tracing::warn!(pgid = self.pgid.as_raw(), error = %e, "could not kill a terminal"),
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.kill();
        self.task.abort();
    }
}

/// The terminals of one sandbox.
pub struct Terminals {
    sandbox: Arc<dyn Sandbox>,
    files: Arc<Workspace>,
    open: Mutex<HashMap<String, Arc<Terminal>>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Terminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminals").field("workspace", &self.sandbox.workspace()).finish_non_exhaustive()
    }
}

impl Terminals {
    pub(crate) fn new(sandbox: Arc<dyn Sandbox>, files: Arc<Workspace>) -> Self {
        Self { sandbox, files, open: Mutex::new(HashMap::new()), next: AtomicU64::new(1) }
    }

    fn get(&self, id: &str) -> Result<Arc<Terminal>, TerminalError> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(id).cloned().ok_or_else(|| TerminalError::NotFound(id.chars().take(100).collect()))
    }

    /// Starts a command; its id at once (the command runs on).
    pub async fn create(&self, spec: TerminalSpec) -> Result<String, TerminalError> {
        let argv = self.argv(&spec)?;
        let env = assignments(&spec.env)?;
        if self.open.lock().unwrap_or_else(|p| p.into_inner()).len() >= MAX_TERMINALS {
            return Err(TerminalError::TooMany);
        }
        let limits = &self.sandbox.policy().limits;
        let cap = limits.output_cap as u64;
        let limit = spec.output_byte_limit.unwrap_or(cap).min(cap) as usize;
        let (reader, writer) = io::pipe().map_err(|e| TerminalError::Spawn(e.to_string()))?;
        let spawn_err = |e: io::Error| TerminalError::Spawn(e.to_string());
        let mut cmd = match &env {
            None => self.sandbox.command("env", &argv),
            Some(_) => {
                let wrapped: Vec<String> = [ENV_FROM_STDIN.to_owned(), "terminal".to_owned(), "env".to_owned()]
                    .into_iter()
                    .chain(argv)
                    .collect();
                let mut args = vec!["--noprofile".to_owned(), "--norc".to_owned(), "-c".to_owned()];
                args.extend(wrapped);
                self.sandbox.command("bash", &args)
            }
        }
        .map_err(spawn_err)?;
        let stdin = if env.is_some() { Stdio::piped() } else { Stdio::null() };
        cmd.stdin(stdin).stdout(writer.try_clone().map_err(spawn_err)?).stderr(writer);
        let mut child = cmd.spawn().map_err(spawn_err)?;
        drop(cmd);
        if let (Some(env), Some(mut stdin)) = (env, child.stdin.take()) {
            // In a task: more than a pipe's worth must not block `create`.
            tokio::spawn(async move {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut stdin, &env).await;
            });
        }
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| spawn_err(io::Error::other("exited at once")))?;
        let pgid = Pid::from_raw(pid);
        let mut pipe = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(spawn_err)?;
        let output = Arc::new(Mutex::new(Buffer { limit, ..Default::default() }));
        let (exit_tx, exit_rx) = watch::channel(None);
        let wall_clock = limits.longest();
        let sink = Arc::clone(&output);
        let task = tokio::spawn(async move {
            let read = async {
                let mut buf = vec![0u8; 32 * 1024];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push(&buf[..n]);
                }
            };
            let wait = async {
                tokio::select! {
                    status = child.wait() => status.ok(),
                    _ = tokio::time::sleep(wall_clock) => {
                        tracing::info!(pid, "a terminal outlived the sandbox's wall-clock limit; killing it");
                        let _ = killpg(pgid, Signal::SIGKILL);
                        child.wait().await.ok()
                    }
                }
            };
            tokio::pin!(read, wait);
            // The exit is published only once the pipe is drained (EOF), so whoever sees the
            // exit sees all the output written before it. A child left in the background may
            // hold the pipe open: then the exit waits at most DRAIN_AFTER_EXIT and reading
            // goes on behind it.
            let mut drained = false;
            let status = loop {
                tokio::select! {
                    status = &mut wait => break status,
                    _ = &mut read, if !drained => drained = true,
                }
            };
            if !drained {
                drained = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut read).await.is_ok();
            }
            let exit = TerminalExit {
                exit_code: status.and_then(|s| s.code()),
                signal: status.and_then(|s| s.signal()).map(signal_name),
            };
            let _ = exit_tx.send(Some(exit));
            tracing::debug!(pid, ?status, drained, "terminal finished");
            if !drained {
                read.await;
            }
        });
        let id = format!("term_{}", self.next.fetch_add(1, Ordering::Relaxed));
        let term = Arc::new(Terminal { pgid, output, exit: exit_rx, task, gone: AtomicBool::new(false) });
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), term);
        Ok(id)
    }

    /// The output kept so far and, if it has exited, how.
    pub fn output(&self, id: &str) -> Result<TerminalOutput, TerminalError> {
        let t = self.get(id)?;
        let exit = t.exit.borrow().clone();
        let buf = t.output.lock().unwrap_or_else(|p| p.into_inner());
        Ok(TerminalOutput { output: String::from_utf8_lossy(&buf.bytes).into_owned(), truncated: buf.truncated, exit })
    }

    /// Waits until the command exits.
    pub async fn wait_for_exit(&self, id: &str) -> Result<TerminalExit, TerminalError> {
        let t = self.get(id)?;
        let mut rx = t.exit.clone();
        let exit = rx.wait_for(Option::is_some).await.map_err(|_| TerminalError::NotFound(id.into()))?;
        Ok(exit.clone().unwrap_or(TerminalExit { exit_code: None, signal: None }))
    }

    /// Kills the command (and everything it started); the terminal stays readable.
    pub fn kill(&self, id: &str) -> Result<(), TerminalError> {
        self.get(id)?.kill();
        Ok(())
    }

    /// Kills the command if it still runs and forgets the terminal.
    pub fn release(&self, id: &str) -> Result<(), TerminalError> {
        let removed = self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        match removed {
            Some(t) => {
                t.kill();
                Ok(())
            }
            None => Err(TerminalError::NotFound(id.chars().take(100).collect())),
        }
    }

    /// Kills and forgets every terminal.
    pub fn release_all(&self) {
        let all: Vec<_> = self.open.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for (_, t) in all {
            t.kill();
        }
    }

    /// `env [-C dir] -- command args..`, validated (the variables travel apart, see
    /// [`assignments`]).
    fn argv(&self, spec: &TerminalSpec) -> Result<Vec<String>, TerminalError> {
        let size = spec.command.len()
            + spec.args.iter().map(String::len).sum::<usize>()
            + spec.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if size > MAX_SPEC_BYTES {
            return Err(TerminalError::Invalid(format!("the command is too large ({size} bytes)")));
        }
        if spec.command.is_empty() {
            return Err(TerminalError::Invalid("`command` must not be empty".into()));
        }
        let all = std::iter::once(&spec.command).chain(&spec.args).chain(spec.env.iter().flat_map(|(k, v)| [k, v]));
        if all.into_iter().any(|s| s.contains('\0')) {
            return Err(TerminalError::Invalid("the command contains a NUL byte".into()));
        }
        let mut argv = Vec::new();
        if let Some(cwd) = &spec.cwd {
            let at = self.files.resolve(cwd).map_err(TerminalError::Refused)?;
            if !at.rel.as_os_str().is_empty() {
                let meta = at
                    .dir
                    .metadata(&at.rel)
                    .map_err(|e| TerminalError::Refused(format!("cwd {cwd}: {}", crate::files::describe(cwd, &e))))?;
                if !meta.is_dir() {
                    return Err(TerminalError::Invalid(format!("cwd {cwd} is not a directory")));
                }
            }
            argv.push("-C".to_owned());
            argv.push(at.inner_path().display().to_string());
        }
        // Options end here; then the command (which must not look like an assignment).
        argv.push("--".to_owned());
        if spec.command.contains('=') {
            return Err(TerminalError::Invalid("`command` must not contain '='".into()));
        }
        argv.push(spec.command.clone());
        argv.extend(spec.args.iter().cloned());
        Ok(argv)
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        self.release_all();
    }
}

fn signal_name(n: i32) -> String {
    Signal::try_from(n).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("signal {n}"))
}

/// Reads `NAME=VALUE` assignments, NUL-separated, from stdin, exports them and runs its
/// arguments with stdin closed. An agent's terminal variables (often tokens) travel this way
/// because every argv of the host is world-readable in `/proc/*/cmdline`, and with
/// `namespace` the bubblewrap process keeps the sandboxed command's argv for its whole life.
const ENV_FROM_STDIN: &str = r#"while IFS= read -r -d '' kv; do export "$kv" || exit 125; done; exec "$@" </dev/null"#;

/// The variables as `ENV_FROM_STDIN` reads them; `None` when there are none. Names must be
/// shell identifiers (what `export` takes).
fn assignments(env: &[(String, String)]) -> Result<Option<Vec<u8>>, TerminalError> {
    if env.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for (k, v) in env {
        let mut chars = k.chars();
        let valid = chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
        if !valid {
            return Err(TerminalError::Invalid(format!(
                "invalid environment variable name {:?}",
                k.chars().take(100).collect::<String>()
            )));
        }
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_keeps_the_newest_bytes_on_a_character_boundary() {
        let mut b = Buffer { limit: 4, ..Default::default() };
        b.push(b"ab");
        assert!(!b.truncated);
        b.push("cdé".as_bytes()); // 6 bytes: a b c d 0xC3 0xA9
        assert!(b.truncated);
        assert_eq!(String::from_utf8(b.bytes.clone()).expect("utf8"), "cdé");
        let mut b = Buffer { limit: 3, ..Default::default() };
        b.push("éé".as_bytes()); // a cut after 1 byte would land inside the first é
        assert_eq!(String::from_utf8(b.bytes.clone()).expect("utf8"), "é");
    }
}
