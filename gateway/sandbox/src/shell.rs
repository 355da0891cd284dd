//! The persistent shell behind the `bash` tool.
//!
//! One `bash --noprofile --norc` per Hand, started inside the sandbox, reading commands from a
//! pipe we own, its stdout and stderr merged into one pipe at the OS level (both are the same
//! pipe's write end, so interleaving is what the process produced). Shell state (`cd`,
//! variables, functions) therefore persists between calls.
//!
//! Each command is sent as `eval '<command>' </dev/null` followed by a `printf` of a fresh
//! random token and `$?`. Quoting the command into `eval` means a syntax error in it is an
//! error of that command, not a shell waiting forever for the rest of a string; the random
//! token means the command cannot fake its own completion. Commands read `/dev/null`, never
//! our command pipe.
//!
//! The shell is the leader of its own process group (`Sandbox::command` asks for that), so a
//! timeout or cancellation kills the whole group with one `SIGKILL`: the shell, the command
//! and whatever it left running in the background. With bubblewrap the group is bubblewrap's;
//! killing it tears down the sandbox's pid namespace, which takes every process inside.

mod collect;

use std::io;
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin};

use crate::Sandbox;
pub use collect::Collector;

/// How long to keep reading after the shell itself exited, for what it printed last.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// A running shell.
#[derive(Debug)]
pub struct Shell {
    child: Child,
    pgid: Pid,
    stdin: ChildStdin,
    output: pipe::Receiver,
    killed: bool,
}

/// How one command ended.
#[derive(Debug)]
pub enum End {
    /// The command completed with this exit status; the shell is still usable.
    Exited(i32),
    TimedOut(Duration),
    Cancelled,
    /// The shell itself went away before the command completed (e.g. the command ran `exit`).
    ShellGone(Option<ExitStatus>),
    /// Talking to the shell failed.
    Io(io::Error),
}

/// One command's result.
#[derive(Debug)]
pub struct Outcome {
    pub output: String,
    /// Bytes of output past the cap, dropped.
    pub dropped: usize,
    pub end: End,
}

impl Shell {
    /// Starts `bash` in the sandbox. Must be called from a Tokio runtime.
    pub fn spawn(sandbox: &dyn Sandbox) -> io::Result<Self> {
        let (reader, writer) = io::pipe()?;
        let mut cmd = sandbox.command("bash", &["--noprofile".into(), "--norc".into()])?;
        cmd.stdin(Stdio::piped()).stdout(writer.try_clone()?).stderr(writer);
        let mut child = cmd.spawn()?;
        // The command holds our copies of the write end: drop it so EOF can be seen.
        drop(cmd);
        let pid = child.id().ok_or_else(|| io::Error::other("the shell exited at once"))?;
        let stdin = child.stdin.take().ok_or_else(|| io::Error::other("the shell has no stdin"))?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
        let pgid = Pid::from_raw(i32::try_from(pid).map_err(io::Error::other)?);
        tracing::debug!(pid, "started a persistent shell");
        Ok(Self { child, pgid, stdin, output, killed: false })
    }

    /// Runs one command, at most `limit` long, keeping at most `cap` bytes of output.
    /// `cancelled` resolves when the caller gives up on the command.
    pub async fn run(
        &mut self,
        command: &str,
        limit: Duration,
        cancelled: impl Future<Output = ()>,
        cap: usize,
    ) -> Outcome {
        let token = match new_token() {
            Ok(token) => token,
            Err(e) => return Outcome { output: String::new(), dropped: 0, end: End::Io(e) },
        };
        let script = format!("eval {} </dev/null; printf '\\n%s:%d\\n' {token} \"$?\"\n", shell_quote(command));
        let mut collector = Collector::new(&token, cap);
        let Self { child, stdin, output, .. } = self;
        let end = {
            let work = async {
                stdin.write_all(script.as_bytes()).await?;
                stdin.flush().await?;
                read_until_sentinel(output, &mut collector).await
            };
            tokio::select! {
                result = work => match result {
                    Ok(Some(status)) => End::Exited(status),
                    Ok(None) => End::ShellGone(child.try_wait().ok().flatten()),
                    Err(e) => End::Io(e),
                },
                status = child.wait() => {
                    // Keep what the shell printed before it went.
                    let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, read_until_sentinel(output, &mut collector)).await;
                    End::ShellGone(status.ok())
                }
                _ = tokio::time::sleep(limit) => End::TimedOut(limit),
                _ = cancelled => End::Cancelled,
            }
        };
        collector.finish();
        let (output, dropped) = collector.into_parts();
        Outcome { output, dropped, end }
    }

    /// Whether the shell is still running (it may have been killed while idle, e.g. by the
    /// OOM killer).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the shell's whole process group and reaps the shell.
    pub async fn kill(mut self) {
        self.kill_group();
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    fn kill_group(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        match killpg(self.pgid, Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid = self.pgid.as_raw(), error = %e, "could not kill a shell's process group"),
        }
    }
}

impl Drop for Shell {
    /// A Hand dropped without `hibernate()` must not leave the shell's background jobs
    /// running (`kill_on_drop` alone only kills the shell itself).
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Reads until the sentinel (`Some(status)`) or the end of the stream (`None`).
async fn read_until_sentinel(output: &mut pipe::Receiver, collector: &mut Collector) -> io::Result<Option<i32>> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = output.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(status) = collector.feed(&buf[..n]) {
            return Ok(Some(status));
        }
    }
}

/// A fresh unguessable token (128 random bits).
fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("no randomness: {e}")))?;
    Ok(format!("__gw_done_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// `s` as one single-quoted shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn tokens_are_fresh() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_ne!(a, b);
        assert_eq!(a.len(), "__gw_done_".len() + 32);
    }
}
