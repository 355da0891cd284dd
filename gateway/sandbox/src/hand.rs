//! The Hand: one session's tool executor.
//!
//! It owns the session's persistent shell (started lazily on the first `bash` call) and a
//! directory handle on the workspace through which every file tool works. Tool inputs are
//! validated and bounded here; whatever goes wrong becomes an `is_error` [`ToolOutput`] the
//! model can read, never a panic or an `Err` the runtime has to interpret.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::files::{self, FileError, Placement, Workspace};
use crate::input::{self, BadInput, MAX_COMMAND_BYTES, MAX_PATH_BYTES, MAX_PATTERN_BYTES, MAX_TEXT_BYTES};
use crate::shell::{End, Outcome, Shell};
use crate::terminal::Terminals;
use crate::{Sandbox, SandboxError};

pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    /// The call failed (bad input, refused path, timeout, tool unavailable).
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: false }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: true }
    }
}

impl From<BadInput> for ToolOutput {
    fn from(e: BadInput) -> Self {
        Self::error(e.0)
    }
}

pub struct Hand {
    sandbox: Arc<dyn Sandbox>,
    files: Arc<Workspace>,
    shell: Mutex<Option<Shell>>,
    /// Commands an agent process runs and polls itself (ACP `terminal/*`).
    terminals: Terminals,
    /// Cancelled (and replaced) by `hibernate()`, so a running command does not hold the
    /// shell, and the hibernation, for up to its whole time limit.
    interrupt: std::sync::Mutex<CancellationToken>,
    /// The process's places for tool calls that run (shared by every Hand; none: unbounded).
    /// Turns are cheap waiting tasks, thousands at once; commands really use a core, so they
    /// wait here for one instead of all running at once.
    slots: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for Hand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hand").field("workspace", &self.workspace()).finish_non_exhaustive()
    }
}

impl Hand {
    /// The file tools work through a `cap_std` directory on the sandbox's workspace handle.
    pub fn new(sandbox: Arc<dyn Sandbox>) -> Result<Self, SandboxError> {
        let workspace = sandbox.workspace();
        let dir = workspace.cap_dir().map_err(|e| SandboxError::Workspace {
            path: workspace.path().display().to_string(),
            reason: e.to_string(),
        })?;
        // Every provider shows an additional directory at its own path (`WorkspaceDir::extra`).
        let extra = workspace
            .extra()
            .iter()
            .map(|d| {
                let dir = d.cap_dir().map_err(|e| SandboxError::Workspace {
                    path: d.path().display().to_string(),
                    reason: e.to_string(),
                })?;
                Ok((d.path().to_path_buf(), dir))
            })
            .collect::<Result<Vec<_>, SandboxError>>()?;
        let files = Arc::new(
            Workspace::new(dir, sandbox.inner_root().to_owned(), sandbox.policy().limits.output_cap)
                .with_read_only(Arc::clone(workspace.read_only()))
                .with_extra(extra),
        );
        Ok(Self {
            terminals: Terminals::new(Arc::clone(&sandbox), Arc::clone(&files)),
            sandbox,
            files,
            shell: Mutex::new(None),
            interrupt: std::sync::Mutex::new(CancellationToken::new()),
            slots: None,
        })
    }

    /// Tool calls of this Hand take one of `slots` while they run.
    pub fn with_command_slots(mut self, slots: Arc<Semaphore>) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Where the workspace was opened (for messages).
    pub fn workspace(&self) -> &Path {
        self.sandbox.workspace().path()
    }

    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// Runs built-in tool `tool` with `input`. Bad input is an `is_error` output, never a panic.
    pub async fn run(&self, tool: &str, input: &JsonObject, cancel: &CancellationToken) -> ToolOutput {
        // `select!` picks at random among ready branches: a call cancelled before it starts would
        // otherwise run whenever its slot and the shell happened to be free as well.
        if cancel.is_cancelled() {
            return ToolOutput::error("cancelled before the command started");
        }
        let _slot = match &self.slots {
            Some(slots) => tokio::select! {
                biased;
                _ = cancel.cancelled() => return ToolOutput::error("cancelled before the command started"),
                slot = Arc::clone(slots).acquire_owned() => slot.ok(),
            },
            None => None,
        };
        let result = match tool {
            "bash" => self.bash(input, cancel).await,
            "read" | "write" | "edit" | "glob" | "grep" => self.file_tool(tool, input, cancel).await,
            // The gateway runs the web tools itself (`gateway_services::web`), never a sandbox.
            "web_fetch" | "web_search" => Err(ToolOutput::error(format!("the {tool} tool does not run in a sandbox"))),
            other => Err(ToolOutput::error(format!("unknown tool: {}", truncate(other, 100)))),
        };
        result.unwrap_or_else(|e| e)
    }

    /// The terminals of agents that run commands themselves.
    pub fn terminals(&self) -> &Terminals {
        &self.terminals
    }

    /// A text file's content (ACP `fs/read_text_file`): from 1-based `line`, at most `limit`
    /// lines, confined like the file tools.
    pub async fn read_text_file(&self, path: &str, line: Option<u64>, limit: Option<u64>) -> Result<String, FileError> {
        if path.len() > MAX_PATH_BYTES {
            return Err(FileError::Invalid(format!("the path is too long ({} bytes)", path.len())));
        }
        let files = Arc::clone(&self.files);
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || files::read_text(&files, &path, line, limit))
            .await
            .map_err(|e| FileError::Failed(format!("the read failed: {e}")))?
    }

    /// Creates or replaces a text file (ACP `fs/write_text_file`), confined like the file tools.
    pub async fn write_text_file(&self, path: &str, content: &str) -> Result<(), FileError> {
        if path.len() > MAX_PATH_BYTES {
            return Err(FileError::Invalid(format!("the path is too long ({} bytes)", path.len())));
        }
        let files = Arc::clone(&self.files);
        let (path, content) = (path.to_owned(), content.to_owned());
        tokio::task::spawn_blocking(move || files::write_text(&files, &path, &content))
            .await
            .map_err(|e| FileError::Failed(format!("the write failed: {e}")))?
    }

    /// Whether something is already at `rel` in the workspace (a mount placed earlier).
    pub async fn occupied(&self, rel: &Path) -> bool {
        let (files, rel) = (Arc::clone(&self.files), rel.to_path_buf());
        tokio::task::spawn_blocking(move || files.occupied(&rel)).await.unwrap_or(false)
    }

    /// Makes the file at `rel` (a mounted input, already placed) read-only to this session:
    /// the file tools refuse to change it, and processes the sandbox starts cannot where the
    /// provider enforces it ([`crate::readonly`]). When it was not read-only before, a shell
    /// already running is stopped (its next command starts a fresh one that sees the file
    /// read-only), since a process keeps the view it started with. Fails when something other
    /// than a regular file is at `rel`.
    pub async fn protect(&self, rel: &Path) -> std::io::Result<()> {
        let (files, rel) = (Arc::clone(&self.files), rel.to_path_buf());
        let newly = tokio::task::spawn_blocking(move || files.protect(&rel)).await.map_err(std::io::Error::other)??;
        if newly
            && self.sandbox.enforces_read_only()
            && let Some(shell) = self.shell.lock().await.take()
        {
            shell.kill().await;
        }
        Ok(())
    }

    /// Starts placing a mounted input at `rel` in the workspace: it appears there, whole and
    /// read-only, only on [`MountWriter::finish`].
    pub async fn place(&self, rel: &Path) -> std::io::Result<MountWriter> {
        let (files, rel) = (Arc::clone(&self.files), rel.to_path_buf());
        let placement = tokio::task::spawn_blocking(move || Placement::begin(files, &rel))
            .await
            .map_err(std::io::Error::other)??;
        Ok(MountWriter(Some(placement)))
    }

    /// Moves the directory `name` of `from` (a gateway-owned directory on the workspace's
    /// filesystem) to `rel` in the workspace ([`Workspace::adopt`]).
    pub async fn adopt(&self, from: &Path, name: &Path, rel: &Path) -> std::io::Result<()> {
        let (files, from, name, rel) =
            (Arc::clone(&self.files), from.to_path_buf(), name.to_path_buf(), rel.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let from = cap_std::fs::Dir::open_ambient_dir(&from, cap_std::ambient_authority())?;
            files.adopt(&from, &name, &rel)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Where processes in this sandbox find `rel` of the workspace.
    pub fn inner_path(&self, rel: &Path) -> std::path::PathBuf {
        self.sandbox.inner_root().join(rel)
    }

    /// Stops whatever the Hand keeps running (the persistent shell, terminals); the files stay.
    /// A command running at that moment is interrupted (its call answers "cancelled").
    pub async fn hibernate(&self) {
        self.terminals.release_all();
        let interrupt = std::mem::take(&mut *self.interrupt.lock().unwrap_or_else(|p| p.into_inner()));
        interrupt.cancel();
        if let Some(shell) = self.shell.lock().await.take() {
            shell.kill().await;
        }
    }

    /// Stops everything, for good: what [`Hand::hibernate`] stops, and every process the
    /// sandbox started that is still running, even one that left its process group (session
    /// delete).
    pub async fn release(&self) {
        self.hibernate().await;
        self.sandbox.terminate();
    }

    async fn bash(&self, input: &JsonObject, cancel: &CancellationToken) -> Result<ToolOutput, ToolOutput> {
        let command = input::opt_str(input, "command", MAX_COMMAND_BYTES)?;
        let restart = input::flag(input, "restart")?;
        let timeout_ms = input::opt_positive(input, "timeout_ms")?;
        if command.is_some_and(|c| c.contains('\0')) {
            return Err(ToolOutput::error("`command` contains a NUL byte"));
        }
        if command.is_none() && !restart {
            return Err(ToolOutput::error("`command` is required (or `restart: true` to restart the shell)"));
        }
        let limits = &self.sandbox.policy().limits;
        let limit = timeout_ms.map(Duration::from_millis).unwrap_or(limits.wall_clock).min(limits.longest());

        let interrupt = self.interrupt.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let stopped = || async {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = interrupt.cancelled() => {}
            }
        };
        let mut shell = tokio::select! {
            biased;
            _ = stopped() => return Err(ToolOutput::error("cancelled before the command started")),
            guard = self.shell.lock() => guard,
        };
        let dead = shell.as_mut().is_some_and(|s| !s.is_alive());
        if (restart || dead)
            && let Some(old) = shell.take()
        {
            old.kill().await;
        }
        let Some(command) = command else {
            return Ok(ToolOutput::ok("the shell was restarted"));
        };
        let running = match shell.as_mut() {
            Some(running) => running,
            None => {
                let started = Shell::spawn(self.sandbox.as_ref())
                    .map_err(|e| ToolOutput::error(format!("could not start the shell: {e}")))?;
                shell.insert(started)
            }
        };
        let outcome = running.run(command, limit, stopped(), limits.output_cap).await;
        if !matches!(outcome.end, End::Exited(_))
            && let Some(gone) = shell.take()
        {
            gone.kill().await;
        }
        Ok(bash_output(outcome, limits.output_cap))
    }

    async fn file_tool(
        &self,
        tool: &str,
        input: &JsonObject,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolOutput> {
        let call = FileCall::parse(tool, input)?;
        let files = Arc::clone(&self.files);
        let task = tokio::task::spawn_blocking(move || call.execute(&files));
        let result = tokio::select! {
            joined = task => joined.map_err(|e| ToolOutput::error(format!("the {tool} tool failed: {e}")))?,
            _ = cancel.cancelled() => return Err(ToolOutput::error("cancelled")),
        };
        Ok(match result {
            Ok(text) => ToolOutput::ok(text),
            Err(text) => ToolOutput::error(text),
        })
    }
}

/// A validated file tool call, owning its inputs so it can move to the blocking pool.
enum FileCall {
    Read { path: String, range: Option<(u64, Option<u64>)> },
    Write { path: String, content: String },
    Edit { path: String, old: String, new: String, all: bool },
    Glob { pattern: String, path: Option<String> },
    Grep { pattern: String, path: Option<String> },
}

impl FileCall {
    fn parse(tool: &str, input: &JsonObject) -> Result<Self, BadInput> {
        let path = |field| input::req_str(input, field, MAX_PATH_BYTES).map(str::to_owned);
        let opt_path = || input::opt_str(input, "path", MAX_PATH_BYTES).map(|p| p.map(str::to_owned));
        let pattern = || input::req_str(input, "pattern", MAX_PATTERN_BYTES).map(str::to_owned);
        let text = |field| input::req_str(input, field, MAX_TEXT_BYTES).map(str::to_owned);
        let call = match tool {
            "read" => Self::Read { path: path("file_path")?, range: input::view_range(input)? },
            "write" => Self::Write { path: path("file_path")?, content: text("content")? },
            "edit" => Self::Edit {
                path: path("file_path")?,
                old: text("old_string")?,
                new: text("new_string")?,
                all: input::flag(input, "replace_all")?,
            },
            "glob" => Self::Glob { pattern: pattern()?, path: opt_path()? },
            _ => Self::Grep { pattern: pattern()?, path: opt_path()? },
        };
        if let Self::Read { path, .. } | Self::Write { path, .. } | Self::Edit { path, .. } = &call
            && path.is_empty()
        {
            return Err(BadInput("`file_path` must not be empty".into()));
        }
        Ok(call)
    }

    fn execute(self, ws: &Workspace) -> files::FileResult {
        match self {
            Self::Read { path, range } => files::read(ws, &path, range),
            Self::Write { path, content } => files::write(ws, &path, &content),
            Self::Edit { path, old, new, all } => files::edit(ws, &path, &old, &new, all),
            Self::Glob { pattern, path } => files::glob(ws, &pattern, path.as_deref()),
            Self::Grep { pattern, path } => files::grep(ws, &pattern, path.as_deref()),
        }
    }
}

/// The `bash` tool's answer: the output, then notes on truncation and how it ended.
fn bash_output(outcome: Outcome, cap: usize) -> ToolOutput {
    let Outcome { output: mut text, dropped, end } = outcome;
    let mut note = |line: String| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&line);
    };
    if dropped > 0 {
        note(format!("[output truncated: {dropped} more bytes were dropped (the cap is {cap} bytes)]"));
    }
    let fresh = "the next call starts a fresh shell";
    let is_error = match end {
        End::Exited(0) => false,
        End::Exited(code) => {
            note(format!("exit code: {code}"));
            false
        }
        End::TimedOut(after) => {
            note(format!("[timed out after {after:?}: the command and everything it started were killed; {fresh}]"));
            true
        }
        End::Cancelled => {
            note(format!("[cancelled: the command and everything it started were killed; {fresh}]"));
            true
        }
        End::ShellGone(status) => {
            let how = status.map(|s| s.to_string()).unwrap_or_else(|| "unknown status".into());
            note(format!("[the shell exited ({how}) before the command finished; {fresh}]"));
            true
        }
        End::Io(e) => {
            note(format!("[lost the shell: {e}; {fresh}]"));
            true
        }
    };
    if text.is_empty() {
        text.push_str("(no output)");
    }
    ToolOutput { text, is_error }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(output: &str, dropped: usize, end: End) -> ToolOutput {
        bash_output(Outcome { output: output.into(), dropped, end }, 10)
    }

    #[test]
    fn bash_answers_say_how_the_command_ended() {
        assert_eq!(outcome("hi\n", 0, End::Exited(0)), ToolOutput::ok("hi\n"));
        assert_eq!(outcome("", 0, End::Exited(0)), ToolOutput::ok("(no output)"));
        assert_eq!(outcome("x", 0, End::Exited(2)), ToolOutput::ok("x\nexit code: 2"));
        let t = outcome("so far", 0, End::TimedOut(Duration::from_millis(500)));
        assert!(t.is_error && t.text.starts_with("so far\n[timed out after 500ms"), "{t:?}");
        assert!(outcome("", 0, End::Cancelled).text.contains("cancelled"));
        let cut = outcome("0123456789", 5, End::Exited(0));
        assert!(!cut.is_error && cut.text.contains("truncated: 5 more bytes"), "{cut:?}");
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate("héllo", 2), "hé");
        assert_eq!(truncate("ab", 5), "ab");
    }
}

/// A mounted input being written into the workspace ([`Hand::place`]); its blocking writes
/// run on the blocking pool. Dropped unfinished, it leaves nothing behind.
#[derive(Debug)]
pub struct MountWriter(Option<Placement>);

impl MountWriter {
    pub async fn write(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        let mut placement = self.0.take().ok_or_else(|| std::io::Error::other("placement already finished"))?;
        let (placement, written) = tokio::task::spawn_blocking(move || {
            let written = placement.write(&bytes);
            (placement, written)
        })
        .await
        .map_err(std::io::Error::other)?;
        self.0 = Some(placement);
        written
    }

    pub async fn finish(mut self) -> std::io::Result<()> {
        let placement = self.0.take().ok_or_else(|| std::io::Error::other("placement already finished"))?;
        tokio::task::spawn_blocking(move || placement.finish()).await.map_err(std::io::Error::other)?
    }
}
