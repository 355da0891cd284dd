//! A scripted ACP agent speaking over in-memory pipes, plugged into the backend face through
//! its [`Connector`] seam. It acts on the first word of each prompt:
//!
//! - `echo TEXT`: says TEXT, `end_turn`.
//! - `flood N`: says `0,1,2,…,N-1,` in N chunks as fast as it can, `end_turn`.
//! - `slow`: says `tick`, waits for `session/cancel`, answers `cancelled`.
//! - `work MS WORD`: says `working on WORD. `, works MS ms (a `session/cancel` answers
//!   `cancelled` at once), says `done WORD`, `end_turn`.
//! - `ask`: asks permission; says `allowed` / `rejected` / `cancelled`, `end_turn`.
//! - `terminal`: opens a terminal running `sleep 30`, then never answers.
//! - `hang`: never answers.
//!
//! `session/load` replays [`LOAD_REPLAY`] chunks before answering (the gateway must discard
//! them). Each connection is one "process"; [`FakeConnector::crash_all`] kills them.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use gateway_acp::ExecutorConfig;
use gateway_acp::backend::{Connection, Connector};
use gateway_acp::rpc::framing::{self, MAX_MESSAGE_BYTES};
use gateway_acp::rpc::{Handler, Peer, PeerOptions, Reply, RpcError};
use gateway_sandbox::Hand;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// Updates a `session/load` replays.
pub const LOAD_REPLAY: usize = 3000;

/// What the fake agent advertises.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caps {
    pub load: bool,
    pub resume: bool,
    /// `session/new` is refused (an agent that cannot open a session: no credentials, say).
    pub refuse_new: bool,
}

/// The modes every fake agent's `session/new` answers with.
pub fn modes() -> Value {
    json!({"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]})
}

/// The settings every fake agent's `session/new` answers with.
pub fn settings() -> Value {
    json!([{"id": "depth", "name": "Depth", "type": "select", "currentValue": "shallow",
            "options": [{"value": "shallow", "name": "Shallow"}, {"value": "deep", "name": "Deep"}]}])
}

/// The commands every fake agent announces right after answering `session/new`.
pub fn commands() -> Value {
    json!([{"name": "review", "description": "Reviews the change", "input": {"hint": "what to look at"}}])
}

/// What every fake agent of a connector saw and did.
#[derive(Default)]
pub struct Seen {
    /// Methods received, in order, across connections.
    pub methods: Mutex<Vec<String>>,
    /// Terminals opened by `terminal` prompts.
    pub terminals: Mutex<Vec<String>>,
    pub cancelled: Notify,
    /// The text of every prompt received, in order, across connections.
    pub prompts: Mutex<Vec<String>>,
    /// Connections made (processes started).
    pub connections: Mutex<usize>,
    /// The `cwd` of the last `session/new`.
    pub cwd: Mutex<Option<String>>,
}

impl Seen {
    pub fn methods(&self) -> Vec<String> {
        self.methods.lock().unwrap().clone()
    }

    pub fn count(&self, method: &str) -> usize {
        self.methods.lock().unwrap().iter().filter(|m| *m == method).count()
    }
}

pub struct FakeConnector {
    pub caps: Caps,
    pub seen: Arc<Seen>,
    alive: Mutex<Vec<CancellationToken>>,
}

impl FakeConnector {
    pub fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Self { caps, seen: Arc::default(), alive: Mutex::new(Vec::new()) })
    }

    /// Every agent "process" dies at once (its pipes close).
    pub fn crash_all(&self) {
        for t in self.alive.lock().unwrap().drain(..) {
            t.cancel();
        }
    }
}

impl Connector for FakeConnector {
    fn connect(&self, _hand: &Hand, _executor: &str, _config: &ExecutorConfig) -> Result<Connection, String> {
        let (gateway_end, agent_end) = tokio::io::duplex(64 * 1024);
        let (gateway_in, gateway_out) = tokio::io::split(gateway_end);
        let (agent_in, mut agent_out) = tokio::io::split(agent_end);
        let dead = CancellationToken::new();
        self.alive.lock().unwrap().push(dead.clone());
        *self.seen.connections.lock().unwrap() += 1;

        let (to_peer, incoming) = mpsc::channel(64);
        let agent = Arc::new(FakeAgent { caps: self.caps, seen: Arc::clone(&self.seen), dead: dead.clone() });
        let (peer, mut frames, _loop) = Peer::start("fake-agent", incoming, agent, PeerOptions::default());
        let reading = dead.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(agent_in);
            loop {
                let line = tokio::select! {
                    l = framing::next_line(&mut reader, MAX_MESSAGE_BYTES) => l,
                    _ = reading.cancelled() => break,
                };
                match line {
                    Ok(Some(l)) => {
                        if to_peer.send(l).await.is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
        });
        tokio::spawn(async move {
            loop {
                let frame = tokio::select! {
                    f = frames.recv() => f,
                    _ = dead.cancelled() => None,
                };
                let Some(frame) = frame else { break };
                let line = format!("{}\n", frame.text());
                let written = tokio::select! {
                    w = agent_out.write_all(line.as_bytes()) => w.is_ok(),
                    _ = dead.cancelled() => false,
                };
                if !written {
                    break;
                }
            }
            peer.close();
            // Dropping the write half (and the reader's half) closes the gateway's stdout.
        });
        Ok(Connection { stdin: Box::new(gateway_out), stdout: Box::new(gateway_in), stderr: None, child: None })
    }
}

struct FakeAgent {
    caps: Caps,
    seen: Arc<Seen>,
    dead: CancellationToken,
}

fn chunk(session: &Value, text: &str) -> Value {
    json!({"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}})
}

impl Handler for FakeAgent {
    fn request(&self, peer: &Peer, method: &str, params: Value) -> Reply {
        self.seen.methods.lock().unwrap().push(method.to_owned());
        let peer = peer.clone();
        let seen = Arc::clone(&self.seen);
        let caps = self.caps;
        match method {
            "initialize" => Box::pin(async move {
                let mut agent = json!({"loadSession": caps.load});
                if caps.resume {
                    agent["sessionCapabilities"] = json!({"resume": {}});
                }
                Ok(json!({"protocolVersion": 1, "agentCapabilities": agent, "authMethods": []}))
            }),
            "session/new" if caps.refuse_new => {
                Box::pin(async move { Err(RpcError::new(-32000, "no credentials for the fake agent")) })
            }
            "session/new" => {
                *self.seen.cwd.lock().unwrap() = params["cwd"].as_str().map(str::to_owned);
                // As claude-agent-acp does: the commands follow the answer.
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    let update = json!({"sessionUpdate": "available_commands_update", "availableCommands": commands()});
                    peer.notify("session/update", json!({"sessionId": "fake-session", "update": update})).await;
                });
                Box::pin(async move {
                    Ok(json!({"sessionId": "fake-session", "modes": modes(), "configOptions": settings()}))
                })
            }
            "session/resume" => Box::pin(async move { Ok(json!({})) }),
            "session/load" => Box::pin(async move {
                let sid = params["sessionId"].clone();
                for i in 0..LOAD_REPLAY {
                    peer.notify("session/update", chunk(&sid, &format!("replayed {i} "))).await;
                }
                Ok(json!({}))
            }),
            "session/prompt" => {
                let dead = self.dead.clone();
                Box::pin(async move { prompt(peer, seen, dead, params).await })
            }
            other => {
                let e = RpcError::method_not_found(other);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn notification(&self, _peer: &Peer, method: &str, _params: Value) {
        self.seen.methods.lock().unwrap().push(method.to_owned());
        if method == "session/cancel" {
            self.seen.cancelled.notify_waiters();
        }
    }
}

async fn prompt(peer: Peer, seen: Arc<Seen>, dead: CancellationToken, params: Value) -> Result<Value, RpcError> {
    let sid = params["sessionId"].clone();
    let text: String = params["prompt"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    seen.prompts.lock().unwrap().push(text.clone());
    let mut words = text.split_whitespace();
    let end = |reason: &str| Ok(json!({"stopReason": reason}));
    match words.next().unwrap_or("") {
        "echo" => {
            peer.notify("session/update", chunk(&sid, &words.collect::<Vec<_>>().join(" "))).await;
            end("end_turn")
        }
        // Reads a file of its working directory itself, as an agent process does.
        "cat" => {
            let cwd = seen.cwd.lock().unwrap().clone().unwrap_or_default();
            let path = std::path::Path::new(&cwd).join(words.next().unwrap_or_default());
            let said =
                std::fs::read_to_string(&path).unwrap_or_else(|e| format!("cannot read {}: {e}", path.display()));
            peer.notify("session/update", chunk(&sid, &said)).await;
            end("end_turn")
        }
        "flood" => {
            let n: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(1000);
            for i in 0..n {
                peer.notify("session/update", chunk(&sid, &format!("{i},"))).await;
            }
            end("end_turn")
        }
        "slow" => {
            let cancelled = seen.cancelled.notified();
            peer.notify("session/update", chunk(&sid, "tick")).await;
            cancelled.await;
            end("cancelled")
        }
        "work" => {
            let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1000);
            let word = words.collect::<Vec<_>>().join(" ");
            let cancelled = seen.cancelled.notified();
            peer.notify("session/update", chunk(&sid, &format!("working on {word}. "))).await;
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                _ = cancelled => return end("cancelled"),
                _ = dead.cancelled() => return Err(RpcError::internal("gone")),
            }
            peer.notify("session/update", chunk(&sid, &format!("done {word}"))).await;
            end("end_turn")
        }
        "ask" => {
            let asked = peer
                .request(
                    "session/request_permission",
                    json!({
                        "sessionId": sid,
                        "toolCall": {"toolCallId": "call-1", "title": "Write approved.txt", "kind": "edit", "status": "pending"},
                        "options": [
                            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}
                        ]
                    }),
                )
                .await?;
            let said = match asked["outcome"]["outcome"].as_str() {
                Some("selected") if asked["outcome"]["optionId"] == "yes" => "allowed",
                Some("selected") => "rejected",
                _ => "cancelled",
            };
            peer.notify("session/update", chunk(&sid, said)).await;
            end("end_turn")
        }
        "terminal" => {
            let created =
                peer.request("terminal/create", json!({"sessionId": sid, "command": "sleep", "args": ["30"]})).await?;
            if let Some(id) = created["terminalId"].as_str() {
                seen.terminals.lock().unwrap().push(id.to_owned());
            }
            dead.cancelled().await;
            Err(RpcError::internal("gone"))
        }
        _ => {
            // `hang` and anything else: never answer (until the process dies).
            dead.cancelled().await;
            Err(RpcError::internal("gone"))
        }
    }
}
