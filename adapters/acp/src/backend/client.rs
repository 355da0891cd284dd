//! What the gateway serves to an ACP agent process as its client: `session/update` and
//! `session/request_permission` are handed to the running turn (in wire order); `fs/*` and
//! `terminal/*` are served by the session's Hand, confined to the workspace.
//!
//! Nothing the agent says is dropped: when the turn's queue is full the connection's read
//! loop waits for room ([`Handler::ready`]), which stops reading the agent's stdout until the
//! turn catches up. What could wait for nobody is kept out of the queue: a `session/load`
//! replay is discarded as it arrives, and whoever waits for the agent between turns
//! (cancelling a leftover prompt) drains the queue meanwhile.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use gateway_sandbox::{FileError, Hand, TerminalError, TerminalExit, TerminalSpec};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::cancelled_outcome;
use crate::rpc::{Handler, Peer, Reply, RpcError, params};

/// Something the agent said that the turn must see, in order.
#[derive(Debug)]
pub enum AgentEvent {
    /// The `update` of a `session/update`.
    Update(Value),
    /// A `session/request_permission`; answered with an `outcome` object through `reply`.
    Permission { params: Value, reply: oneshot::Sender<Value> },
}

/// Updates queued for the turn before the agent's output stops being read (an agent flooding
/// faster than the turn commits, or between turns, is slowed down; memory stays bounded).
pub const EVENT_QUEUE: usize = 1024;

pub struct ClientHandler {
    hand: Arc<Hand>,
    events: mpsc::Sender<AgentEvent>,
    executor: String,
    /// Room reserved in `events` by [`Handler::ready`] for the next message.
    room: Mutex<Option<mpsc::OwnedPermit<AgentEvent>>>,
    /// Set while a `session/load` replays history: its updates are dropped as they arrive.
    replaying: Arc<AtomicBool>,
    /// The terminals the agent opened and has not released (they die with the process).
    terminals: Arc<Mutex<HashSet<String>>>,
}

impl ClientHandler {
    pub fn new(
        hand: Arc<Hand>,
        events: mpsc::Sender<AgentEvent>,
        executor: &str,
        terminals: Arc<Mutex<HashSet<String>>>,
    ) -> Self {
        Self {
            hand,
            events,
            executor: executor.to_owned(),
            room: Mutex::new(None),
            replaying: Arc::new(AtomicBool::new(false)),
            terminals,
        }
    }

    /// The switch that discards updates while a `session/load` replays history.
    pub fn replay_switch(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.replaying)
    }

    /// Queues an event in the room `ready` reserved (the read loop waited for it).
    fn queue(&self, event: AgentEvent) -> Result<(), AgentEvent> {
        let room = self.room.lock().unwrap_or_else(|p| p.into_inner()).take();
        match room {
            Some(permit) => {
                permit.send(event);
                Ok(())
            }
            // Only when the turn's side of the queue is gone (the process is being stopped).
            None => self.events.try_send(event).map_err(|e| e.into_inner()),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadParams {
    path: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WriteParams {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct EnvVar {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateParams {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    output_byte_limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminalParams {
    terminal_id: String,
}

fn file_error(e: FileError) -> RpcError {
    match e {
        FileError::NotFound(m) => crate::rpc::not_found(m),
        FileError::Refused(m) | FileError::Invalid(m) => RpcError::invalid_params(m),
        FileError::Failed(m) => RpcError::internal(m),
    }
}

fn terminal_error(e: TerminalError) -> RpcError {
    match e {
        TerminalError::NotFound(_) => crate::rpc::not_found(e.to_string()),
        TerminalError::Invalid(_) | TerminalError::Refused(_) | TerminalError::TooMany => {
            RpcError::invalid_params(e.to_string())
        }
        TerminalError::Spawn(_) => RpcError::internal(e.to_string()),
    }
}

fn exit_json(exit: &TerminalExit) -> Value {
    let mut v = json!({});
    if let Some(c) = exit.exit_code {
        v["exitCode"] = json!(c);
    }
    if let Some(s) = &exit.signal {
        v["signal"] = json!(s);
    }
    v
}

impl Handler for ClientHandler {
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.room.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                return;
            }
            if let Ok(permit) = self.events.clone().reserve_owned().await {
                *self.room.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
            }
        })
    }

    fn request(&self, _peer: &Peer, method: &str, raw: Value) -> Reply {
        let hand = Arc::clone(&self.hand);
        let terminals = Arc::clone(&self.terminals);
        match method {
            "session/request_permission" => {
                // Queued now, in wire order with the updates before it.
                let (reply, answer) = oneshot::channel();
                let asked = AgentEvent::Permission { params: raw, reply };
                if self.replaying.load(Ordering::SeqCst) || self.queue(asked).is_err() {
                    warn!(executor = %self.executor, "permission request while no turn can take it; cancelled");
                    return Box::pin(async { Ok(json!({"outcome": cancelled_outcome()})) });
                }
                Box::pin(async move { Ok(json!({"outcome": answer.await.unwrap_or_else(|_| cancelled_outcome())})) })
            }
            "fs/read_text_file" => Box::pin(async move {
                let p: ReadParams = params(raw)?;
                let content = hand.read_text_file(&p.path, p.line, p.limit).await.map_err(file_error)?;
                Ok(json!({"content": content}))
            }),
            "fs/write_text_file" => Box::pin(async move {
                let p: WriteParams = params(raw)?;
                hand.write_text_file(&p.path, &p.content).await.map_err(file_error)?;
                Ok(json!({}))
            }),
            "terminal/create" => Box::pin(async move {
                let p: CreateParams = params(raw)?;
                let spec = TerminalSpec {
                    command: p.command,
                    args: p.args,
                    env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
                    cwd: p.cwd,
                    output_byte_limit: p.output_byte_limit,
                };
                let id = hand.terminals().create(spec).await.map_err(terminal_error)?;
                terminals.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
                Ok(json!({"terminalId": id}))
            }),
            "terminal/output" => Box::pin(async move {
                let p: TerminalParams = params(raw)?;
                let out = hand.terminals().output(&p.terminal_id).map_err(terminal_error)?;
                let mut v = json!({"output": out.output, "truncated": out.truncated});
                if let Some(exit) = &out.exit {
                    v["exitStatus"] = exit_json(exit);
                }
                Ok(v)
            }),
            "terminal/wait_for_exit" => Box::pin(async move {
                let p: TerminalParams = params(raw)?;
                let exit = hand.terminals().wait_for_exit(&p.terminal_id).await.map_err(terminal_error)?;
                Ok(exit_json(&exit))
            }),
            "terminal/kill" => Box::pin(async move {
                let p: TerminalParams = params(raw)?;
                hand.terminals().kill(&p.terminal_id).map_err(terminal_error)?;
                Ok(json!({}))
            }),
            "terminal/release" => Box::pin(async move {
                let p: TerminalParams = params(raw)?;
                hand.terminals().release(&p.terminal_id).map_err(terminal_error)?;
                terminals.lock().unwrap_or_else(|p| p.into_inner()).remove(&p.terminal_id);
                Ok(json!({}))
            }),
            other => {
                let e = RpcError::method_not_found(other);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn notification(&self, _peer: &Peer, method: &str, raw: Value) {
        match method {
            "session/update" if self.replaying.load(Ordering::SeqCst) => {
                debug!(executor = %self.executor, "session/load replay discarded (the log has it)");
            }
            "session/update" => {
                let update = raw.get("update").cloned().unwrap_or(Value::Null);
                if self.queue(AgentEvent::Update(update)).is_err() {
                    debug!(executor = %self.executor, "an update after the turn's queue closed; dropped");
                }
            }
            other => {
                debug!(executor = %self.executor, method = %crate::rpc::clip(other, 80), "agent notification ignored")
            }
        }
    }
}
