//! One ACP agent process per session: started inside the session's environment, kept across
//! turns in a per-host table, stopped on session close, crash, deadline, idleness, eviction.
//!
//! The process runs through the sandbox ([`SandboxConnector`]: its own process group, a
//! cleared environment plus the executor's `env`, the workspace as working directory). Its
//! stdout is the ACP connection (non-JSON lines are skipped with a warning), its stderr goes
//! to the logs line by line (each line bounded). The agent's own session id is committed as a
//! session binding, so after a gateway restart the next process can `session/resume` or
//! `session/load` it. Terminals the agent opened die with it.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::{EventId, SessionId};
use gateway_runtime::environment::Lease;
use gateway_runtime::{BackendError, RunContext};
use gateway_sandbox::Hand;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::client::{AgentEvent, ClientHandler, EVENT_QUEUE};
use super::failed;
use super::mapping::ToolState;
use crate::names::AGENT_SESSION_BINDING;
use crate::rpc::framing::{self, Inbound, MAX_MESSAGE_BYTES};
use crate::rpc::{Peer, RpcError};
use crate::wire::PROTOCOL_VERSION;

/// A process unused this long is stopped (its session can still continue: the next turn
/// starts a new one and resumes or loads the agent's session).
const IDLE: Duration = Duration::from_secs(30 * 60);
/// How long a stopped process gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Agent processes one gateway process keeps at once. Starting one more stops the least
/// recently used process no turn is using; when every one is busy the turn fails (the
/// session stays usable). Agents are heavy (a Node runtime is ~100 MB), so this bounds what
/// a burst of sessions can make a host hold.
pub const MAX_PROCESSES: usize = 64;
/// Longest agent stderr line logged whole; longer ones are cut.
const STDERR_LINE: usize = 16 * 1024;

/// What the agent advertised in `initialize`.
#[derive(Debug, Clone, Default)]
pub struct AgentCaps {
    pub load_session: bool,
    pub resume: bool,
    pub image: bool,
    pub embedded_context: bool,
    /// It takes `additionalDirectories` on `session/new`, `load` and `resume`.
    pub additional_directories: bool,
}

impl AgentCaps {
    fn read(init: &Value) -> Self {
        let caps = &init["agentCapabilities"];
        let yes = |v: &Value| v.as_bool().unwrap_or(false);
        let present = |v: &Value| v.is_object();
        Self {
            load_session: yes(&caps["loadSession"]),
            resume: present(&caps["sessionCapabilities"]["resume"]),
            image: yes(&caps["promptCapabilities"]["image"]),
            embedded_context: yes(&caps["promptCapabilities"]["embeddedContext"]),
            additional_directories: present(&caps["sessionCapabilities"]["additionalDirectories"]),
        }
    }
}

/// A permission request the agent is waiting on while the core's turn is parked.
pub struct Parked {
    pub reply: tokio::sync::oneshot::Sender<Value>,
    pub options: Value,
}

/// An outstanding `session/prompt` and the last user message it carries.
pub struct Prompt {
    pub task: tokio::task::JoinHandle<Result<Value, RpcError>>,
    pub seq: u64,
}

/// The mutable state a turn works on, locked by the one run of the session at a time.
pub struct Turn {
    pub events: mpsc::Receiver<AgentEvent>,
    /// The outstanding `session/prompt`, kept while the core's turn is parked.
    pub prompt: Option<Prompt>,
    pub parked: HashMap<EventId, Parked>,
    /// The agent's tool calls by its `toolCallId`.
    pub tools: HashMap<String, ToolState>,
}

/// The two ends of an agent's connection, and the process behind them if there is one.
pub struct Connection {
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub child: Option<tokio::process::Child>,
}

/// Makes an agent's connection. Production uses [`SandboxConnector`]; tests plug in agents
/// that speak over in-memory pipes.
pub trait Connector: Send + Sync {
    fn connect(&self, hand: &Hand, executor: &str, config: &crate::ExecutorConfig) -> Result<Connection, String>;
}

/// Starts the executor's command in the session's sandbox. Its `env` travels in the
/// environment of the spawned process, never on a command line (it often holds credentials).
pub struct SandboxConnector;

impl Connector for SandboxConnector {
    fn connect(&self, hand: &Hand, executor: &str, config: &crate::ExecutorConfig) -> Result<Connection, String> {
        let env: Vec<(String, String)> = config.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut cmd = hand
            .sandbox()
            .command_with_env(&config.command, &config.args, &env)
            .map_err(|e| format!("cannot prepare ACP agent {executor:?} ({}): {e}", config.command))?;
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child =
            cmd.spawn().map_err(|e| format!("cannot start ACP agent {executor:?} ({}): {e}", config.command))?;
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(stdin), Some(stdout), Some(stderr)) => Ok(Connection {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: Some(Box::new(stderr)),
                child: Some(child),
            }),
            _ => Err("the agent process has no pipes".into()),
        }
    }
}

pub struct AgentProcess {
    pub peer: Peer,
    pub agent_session: String,
    pub caps: AgentCaps,
    /// Locked by the one run using the process (owned guards: a run may swap processes).
    pub turn: Arc<tokio::sync::Mutex<Turn>>,
    pub hand: Arc<Hand>,
    pgid: Option<Pid>,
    child: Mutex<Option<tokio::process::Child>>,
    last_used: Mutex<Instant>,
    /// Terminals the agent opened and has not released: they die with the process.
    terminals: Arc<Mutex<HashSet<String>>>,
    /// Being stopped on purpose (session closed): a turn that sees the connection close
    /// then reports an interruption, not a crash.
    closing: AtomicBool,
    /// Started and not yet given a prompt: the first turn sends the settings kept for the
    /// session while no process ran (`names::PENDING_SETTINGS_NS`).
    fresh: AtomicBool,
    /// Keeps the environment in use (never hibernated) while the process lives.
    _lease: Lease,
}

impl AgentProcess {
    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> bool {
        self.last_used().elapsed() > IDLE
    }

    /// Whether a run holds the turn right now.
    fn busy(&self) -> bool {
        self.turn.try_lock().is_err()
    }

    /// Whether the process is still connected (its stdout open).
    pub fn alive(&self) -> bool {
        !self.peer.is_closed()
    }

    /// Whether this is the process's first turn (true once).
    pub fn first_turn(&self) -> bool {
        self.fresh.swap(false, Ordering::Relaxed)
    }

    /// Whether the process is being stopped on purpose (its session was closed).
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// How the process ended, if it has.
    pub fn exit_status(&self) -> Option<String> {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        child.as_mut().and_then(|c| c.try_wait().ok().flatten()).map(|s| s.to_string())
    }

    fn release_terminals(&self) {
        let ids: Vec<String> = self.terminals.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for id in ids {
            let _ = self.hand.terminals().release(&id);
        }
    }

    /// SIGTERM to the whole group, a grace period, SIGKILL; then reaps the process. Its
    /// terminals are released (killed) too.
    pub async fn kill(&self) {
        self.peer.close();
        self.release_terminals();
        let child = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (Some(mut child), Some(pgid)) = (child, self.pgid) else { return };
        let _ = killpg(pgid, Signal::SIGTERM);
        if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = child.wait().await;
        } else {
            // The leader is gone; stragglers of its group are not.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        info!(pgid = pgid.as_raw(), "ACP agent process stopped");
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.release_terminals();
        if let (Some(pgid), true) = (self.pgid, self.child.get_mut().map(|c| c.is_some()).unwrap_or(false)) {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// How to start one executor.
pub struct Launch<'a> {
    pub executor: &'a str,
    pub config: &'a crate::ExecutorConfig,
    pub connector: &'a dyn Connector,
    pub lease: Lease,
    pub mcp_servers: Value,
}

/// Logs an agent's stderr line by line, each line bounded.
fn log_stderr(stderr: Box<dyn AsyncRead + Send + Unpin>, executor: String, session: SessionId) {
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr);
        while let Ok(Some(line)) = framing::next_line(&mut reader, STDERR_LINE).await {
            match line {
                Inbound::Line(line) => {
                    info!(target: "acp_agent", executor = %executor, %session, "{}", crate::rpc::clip(&line, 2000))
                }
                Inbound::TooLong(n) => {
                    info!(target: "acp_agent", executor = %executor, %session, "(a stderr line of {n} bytes, not shown)")
                }
            }
        }
    });
}

/// Starts the executor in the session's sandbox, initializes it and opens (or reopens) the
/// agent's session.
pub async fn start(ctx: &RunContext, launch: Launch<'_>) -> Result<Arc<AgentProcess>, BackendError> {
    let Launch { executor, config, connector, lease, mcp_servers } = launch;
    let hand = Arc::clone(&lease.acquired.hand);
    let conn = connector.connect(&hand, executor, config).map_err(failed)?;
    let pgid = match &conn.child {
        Some(child) => {
            let pid =
                child.id().and_then(|p| i32::try_from(p).ok()).ok_or_else(|| failed("the agent exited at once"))?;
            Some(Pid::from_raw(pid))
        }
        None => None,
    };
    if let Some(stderr) = conn.stderr {
        log_stderr(stderr, executor.to_owned(), ctx.session.id.clone());
    }
    let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
    let terminals = Arc::new(Mutex::new(HashSet::new()));
    let handler = Arc::new(ClientHandler::new(Arc::clone(&hand), events_tx, executor, Arc::clone(&terminals)));
    let replay = handler.replay_switch();
    let incoming = framing::spawn_reader(conn.stdout, MAX_MESSAGE_BYTES);
    let (peer, frames, _reader) = Peer::start("agent", incoming, handler, crate::rpc::options(true));
    framing::spawn_writer(conn.stdin, frames);
    info!(executor, pid = pgid.map(|p| p.as_raw()), "ACP agent process started");

    let mut process = AgentProcess {
        peer: peer.clone(),
        agent_session: String::new(),
        caps: AgentCaps::default(),
        turn: Arc::new(tokio::sync::Mutex::new(Turn {
            events,
            prompt: None,
            parked: HashMap::new(),
            tools: HashMap::new(),
        })),
        hand: Arc::clone(&hand),
        pgid,
        child: Mutex::new(conn.child),
        last_used: Mutex::new(Instant::now()),
        terminals,
        closing: AtomicBool::new(false),
        fresh: AtomicBool::new(true),
        _lease: lease,
    };
    let init = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
        "clientInfo": crate::wire::implementation(),
    });
    let answer = |process: &AgentProcess, what: &str, e: RpcError| {
        let status = process.exit_status().map(|s| format!(" (the process exited: {s})")).unwrap_or_default();
        failed(format!("ACP agent {executor:?} failed {what}: {}{status}", e.message))
    };
    let init = match peer.request("initialize", init).await {
        Ok(init) => init,
        Err(e) => {
            let err = answer(&process, "initialize", e);
            process.kill().await;
            return Err(err);
        }
    };
    if init.get("protocolVersion").and_then(Value::as_u64) != Some(PROTOCOL_VERSION) {
        process.kill().await;
        return Err(failed(format!("ACP agent {executor:?} does not speak protocol version {PROTOCOL_VERSION}")));
    }
    process.caps = AgentCaps::read(&init);
    // An http MCP server goes only to an agent that says it takes one.
    let http = init.pointer("/agentCapabilities/mcpCapabilities/http").and_then(Value::as_bool) == Some(true);
    let mcp_servers = match mcp_servers {
        Value::Array(servers) if !http => Value::Array(
            servers
                .into_iter()
                .filter(|s| {
                    let keep = s.get("type").and_then(Value::as_str) != Some("http");
                    if !keep {
                        tracing::warn!(executor, server = ?s.get("name"), "the ACP agent takes no http MCP servers; not passed");
                    }
                    keep
                })
                .collect(),
        ),
        other => other,
    };
    let cwd = hand.sandbox().inner_root().display().to_string();
    // The session's additional directories, where its sandbox shows them (their own paths).
    let additional: Vec<String> =
        hand.sandbox().workspace().extra().iter().map(|d| d.path().display().to_string()).collect();
    let with_dirs = |mut params: Value| {
        if !additional.is_empty() {
            if process.caps.additional_directories {
                params["additionalDirectories"] = json!(additional);
            } else {
                warn!(
                    executor,
                    "the ACP agent does not take additionalDirectories; they are in its sandbox but it is not told"
                );
            }
        }
        params
    };
    let known = ctx.bindings().await?.get(AGENT_SESSION_BINDING).cloned();
    let reopened = match known {
        Some(id) if process.caps.load_session || process.caps.resume => {
            // Resume when offered: it does not replay. A load's replay is discarded as it
            // arrives (the log has it), so it can never fill the turn's queue.
            let method = if process.caps.resume { "session/resume" } else { "session/load" };
            let params = with_dirs(json!({"sessionId": id, "cwd": cwd, "mcpServers": mcp_servers}));
            replay.store(true, Ordering::SeqCst);
            let reopened = peer.request(method, params).await;
            replay.store(false, Ordering::SeqCst);
            match reopened {
                Ok(answer) => {
                    info!(executor, agent_session = %id, method, "reopened the agent's session");
                    ctx.stage(super::mapping::opening_reports(&answer));
                    Some(id)
                }
                Err(e) => {
                    warn!(executor, error = %e, method, "the agent could not reopen its session; starting a new one");
                    None
                }
            }
        }
        Some(_) => {
            warn!(executor, "the agent cannot load or resume sessions; starting a new one (it forgets earlier turns)");
            None
        }
        None => None,
    };
    process.agent_session = match reopened {
        Some(id) => id,
        None => {
            let created =
                match peer.request("session/new", with_dirs(json!({"cwd": cwd, "mcpServers": mcp_servers}))).await {
                    Ok(created) => created,
                    Err(e) => {
                        let err = answer(&process, "session/new", e);
                        process.kill().await;
                        return Err(err);
                    }
                };
            let Some(id) = created.get("sessionId").and_then(Value::as_str).map(str::to_owned) else {
                process.kill().await;
                return Err(failed(format!("ACP agent {executor:?} answered session/new without a sessionId")));
            };
            let reports = super::mapping::opening_reports(&created);
            ctx.commit_bindings(reports, vec![(AGENT_SESSION_BINDING.to_owned(), id.clone())]).await?;
            id
        }
    };
    Ok(Arc::new(process))
}

/// The agent processes of this gateway process, by session. One value, made by the process's
/// composition and handed to whoever needs it: the backends of every executor add to it, the
/// editor face's `session/close` and the maintenance sweep stop what it holds, and the
/// backends' stop (after the Workers stopped) closes it.
pub struct ProcessTable {
    procs: tokio::sync::Mutex<HashMap<SessionId, Arc<AgentProcess>>>,
    /// Sessions an editor of this gateway process kept settings for since their last turn
    /// here (the backend reads the kept settings only then, or when a process starts: not a
    /// store read per turn).
    settings_kept: std::sync::Mutex<HashSet<SessionId>>,
    /// Starts under way (counted against the cap until inserted).
    starting: AtomicUsize,
    cap: usize,
}

impl Default for ProcessTable {
    fn default() -> Self {
        Self::with_cap(MAX_PROCESSES)
    }
}

/// Room for one more process, held while it starts.
pub struct Reservation<'a>(&'a ProcessTable);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.starting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The process to stop to make room: the least recently used one no turn holds.
fn eviction_victim<'a>(candidates: impl Iterator<Item = (&'a SessionId, bool, Instant)>) -> Option<SessionId> {
    candidates.filter(|(_, busy, _)| !busy).min_by_key(|(_, _, used)| *used).map(|(id, _, _)| id.clone())
}

impl ProcessTable {
    pub fn with_cap(cap: usize) -> Self {
        Self {
            procs: tokio::sync::Mutex::new(HashMap::new()),
            settings_kept: std::sync::Mutex::new(HashSet::new()),
            starting: AtomicUsize::new(0),
            cap: cap.max(1),
        }
    }

    /// Notes that settings were kept for `session` (`names::PENDING_SETTINGS_NS`).
    pub fn settings_kept(&self, session: &SessionId) {
        self.settings_kept.lock().unwrap_or_else(|p| p.into_inner()).insert(session.clone());
    }

    /// Whether settings were kept for `session` since the last ask (and forgets it).
    pub fn take_settings_kept(&self, session: &SessionId) -> bool {
        self.settings_kept.lock().unwrap_or_else(|p| p.into_inner()).remove(session)
    }

    /// The live process of a session; a dead one is removed and reaped.
    pub async fn get(&self, session: &SessionId) -> Option<Arc<AgentProcess>> {
        let dead = {
            let mut procs = self.procs.lock().await;
            match procs.get(session) {
                Some(p) if p.alive() => return Some(Arc::clone(p)),
                Some(_) => procs.remove(session),
                None => None,
            }
        };
        if let Some(p) = dead {
            p.kill().await;
        }
        None
    }

    /// Room for one more process: below the cap, or by stopping the least recently used
    /// process no turn holds. Fails when every process is busy.
    pub async fn reserve(&self) -> Result<Reservation<'_>, String> {
        let victim = {
            let mut procs = self.procs.lock().await;
            if procs.len() + self.starting.load(Ordering::SeqCst) < self.cap {
                self.starting.fetch_add(1, Ordering::SeqCst);
                return Ok(Reservation(self));
            }
            let candidates = procs.iter().map(|(id, p)| (id, p.busy() && p.alive(), p.last_used()));
            let Some(id) = eviction_victim(candidates) else {
                return Err(format!(
                    "this gateway already runs {} ACP agent processes, all busy (the limit per host is {}); try again later",
                    procs.len(),
                    self.cap
                ));
            };
            self.starting.fetch_add(1, Ordering::SeqCst);
            procs.remove(&id).map(|p| (id, p))
        };
        if let Some((id, p)) = victim {
            info!(session = %id, "stopping the least recently used ACP agent process to make room");
            p.kill().await;
        }
        Ok(Reservation(self))
    }

    pub async fn insert(&self, session: SessionId, process: Arc<AgentProcess>) {
        // Killed after the table's lock is released: stopping takes up to the kill grace.
        let old = self.procs.lock().await.insert(session, process);
        if let Some(old) = old {
            old.kill().await;
        }
    }

    /// Stops every process once no turn is using one (or after `wait`): gateway shutdown.
    pub async fn close_all(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let busy = self.procs.lock().await.values().any(|p| p.busy());
            if !busy || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let all: Vec<Arc<AgentProcess>> = self.procs.lock().await.drain().map(|(_, p)| p).collect();
        for p in all {
            p.kill().await;
        }
    }

    /// Stops the processes that died, are idle past their limit, or whose session is gone
    /// (deleted through any API, on any gateway process). A process a turn holds is left
    /// alone unless it died; "holds" is checked again under the table's lock right before
    /// the process is removed, so a turn that started meanwhile keeps it.
    pub async fn sweep(&self, coordinator: &gateway_runtime::Coordinator) {
        let all: Vec<(SessionId, Arc<AgentProcess>)> =
            self.procs.lock().await.iter().map(|(id, p)| (id.clone(), Arc::clone(p))).collect();
        for (id, p) in all {
            let dead = !p.alive();
            if !dead && p.busy() {
                continue;
            }
            let idle = p.idle();
            let gone = !dead
                && !idle
                && matches!(coordinator.get_session(&id).await, Err(gateway_runtime::RuntimeError::NotFound { .. }));
            if !(dead || idle || gone) {
                continue;
            }
            let removed = {
                let mut procs = self.procs.lock().await;
                match procs.get(&id) {
                    Some(q) if Arc::ptr_eq(q, &p) && (dead || !q.busy()) => procs.remove(&id),
                    _ => None,
                }
            };
            if let Some(p) = removed {
                info!(session = %id, dead, idle, deleted = gone, "stopping the ACP agent process");
                p.kill().await;
            }
        }
    }

    /// Stops and forgets a session's process at once (crash, deadline, abandoned run).
    pub async fn close(&self, session: &SessionId) {
        let removed = self.procs.lock().await.remove(session);
        if let Some(p) = removed {
            p.kill().await;
        }
    }

    /// Stops and forgets `process` if it is still the session's (a turn found it dead).
    pub async fn discard(&self, session: &SessionId, process: &Arc<AgentProcess>) {
        let removed = {
            let mut procs = self.procs.lock().await;
            match procs.get(session) {
                Some(q) if Arc::ptr_eq(q, process) => procs.remove(session),
                _ => None,
            }
        };
        if let Some(p) = removed {
            p.kill().await;
        }
    }

    /// Stops a session's process after its running turn ends, waiting at most `wait` (the
    /// caller interrupted that turn): session close. A turn still running then sees the
    /// connection close as an interruption, not a crash.
    pub async fn close_after_turn(&self, session: &SessionId, wait: Duration) {
        let Some(p) = self.procs.lock().await.get(session).cloned() else { return };
        p.closing.store(true, Ordering::Relaxed);
        let held = tokio::time::timeout(wait, p.turn.lock()).await;
        if held.is_err() {
            warn!(session = %session, "the session's turn did not end in time; stopping its ACP agent process");
        }
        self.discard(session, &p).await;
        drop(held);
    }

    /// Processes in the table.
    pub async fn len(&self) -> usize {
        self.procs.lock().await.len()
    }

    /// Whether the table holds no process.
    pub async fn is_empty(&self) -> bool {
        self.procs.lock().await.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_takes_the_least_recently_used_idle_process() {
        let (a, b, c) = (SessionId::new(), SessionId::new(), SessionId::new());
        let now = Instant::now();
        let old = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        let older = now.checked_sub(Duration::from_secs(120)).unwrap_or(now);
        // The oldest is busy: the next oldest idle one goes.
        let list = [(&a, true, older), (&b, false, old), (&c, false, now)];
        assert_eq!(eviction_victim(list.into_iter()), Some(b.clone()));
        let all_busy = [(&a, true, older), (&b, true, old)];
        assert_eq!(eviction_victim(all_busy.into_iter()), None);
    }
}
