//! MCP servers an editor runs on its own machine and carries over its connection (ACP's
//! MCP-over-ACP: `type: "acp"` servers, what the relay `gateway acp --url` makes of the editor's
//! stdio servers; ADR 0032). The native loop reaches one through [`EditorChannels`]
//! (`gateway_mcp::ClientChannels`): a byte stream per connection, bridged to `mcp/connect`,
//! `mcp/message` and `mcp/disconnect` on the editor connection that has the session open.
//!
//! Only the gateway process holding that connection can reach the server, and only while it
//! is open: a turn run elsewhere, or while the editor is away, is told the server is
//! unreachable (a session error, as for any MCP server that cannot be reached).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use gateway_wire::jsonrpc::envelope;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::rpc::framing::{Inbound, MAX_MESSAGE_BYTES, next_line};
use crate::rpc::{Peer, RpcError};

/// How long the editor may take to start a server (`mcp/connect`).
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Bytes buffered each way between the MCP client and a bridge.
const PIPE_BYTES: usize = 1 << 20;
/// Most bridges open at once in this process.
const MAX_BRIDGES: usize = 256;
/// `_meta` of `mcp/connect`: the session the server is wanted for (the relay keeps each
/// session's servers apart).
pub const SESSION_META: &str = "gateway.sessionId";

/// What an editor sends a bridge: the server's notifications and requests to the client.
pub(crate) enum FromEditor {
    Notification { method: String, params: Value },
    Request { method: String, params: Value, reply: oneshot::Sender<Result<Value, RpcError>> },
}

/// The editor connections that carry servers, by session, and the open bridges.
#[derive(Default)]
pub struct EditorChannels {
    /// Per session, the connections that opened it with servers of their own (latest last).
    editors: Mutex<HashMap<String, Vec<(u64, Peer)>>>,
    bridges: Arc<Mutex<HashMap<String, mpsc::Sender<FromEditor>>>>,
    next_editor: AtomicU64,
    tasks: TaskTracker,
}

impl std::fmt::Debug for EditorChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EditorChannels").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EditorChannels {
    /// A number for a new editor connection.
    pub(crate) fn editor_id(&self) -> u64 {
        self.next_editor.fetch_add(1, Ordering::Relaxed)
    }

    /// `editor` (its connection `peer`) has `session` open and carries its servers.
    pub(crate) fn attach(&self, session: &str, editor: u64, peer: &Peer) {
        let mut editors = lock(&self.editors);
        let list = editors.entry(session.to_owned()).or_default();
        list.retain(|(e, p)| *e != editor && !p.is_closed());
        list.push((editor, peer.clone()));
    }

    /// `editor` no longer has `session` open (`None`: any; its connection closed).
    pub(crate) fn detach(&self, editor: u64, session: Option<&str>) {
        let mut editors = lock(&self.editors);
        editors.retain(|s, list| {
            if session.is_none_or(|only| only == s) {
                list.retain(|(e, _)| *e != editor);
            }
            !list.is_empty()
        });
    }

    /// A server's message for the client side of the bridge `connection`.
    pub(crate) async fn deliver(&self, connection: &str, message: FromEditor) -> Result<(), RpcError> {
        let bridge = lock(&self.bridges).get(connection).cloned();
        let bridge = bridge.ok_or_else(|| crate::rpc::not_found("no such MCP connection"))?;
        bridge.send(message).await.map_err(|_| crate::rpc::not_found("the MCP connection is closed"))
    }

    /// Waits for the bridges to end (the process is stopping; their connections are closing).
    pub async fn stop(&self) {
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.tasks.wait()).await;
    }
}

impl gateway_mcp::ClientChannels for EditorChannels {
    fn open(
        &self,
        session: &str,
        server_id: &str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<DuplexStream, String>> + Send + 'static>> {
        let peer = lock(&self.editors)
            .get(session)
            .and_then(|list| list.iter().rev().find(|(_, p)| !p.is_closed()).map(|(_, p)| p.clone()));
        let bridges = Arc::clone(&self.bridges);
        let tasks = self.tasks.clone();
        let (session, server_id) = (session.to_owned(), server_id.to_owned());
        Box::pin(async move {
            let peer = peer.ok_or("its editor is not connected to this gateway process")?;
            if lock(&bridges).len() >= MAX_BRIDGES {
                return Err(format!("{MAX_BRIDGES} connections to editors' servers are open; retry later"));
            }
            let params = json!({"serverId": server_id, "_meta": {SESSION_META: session}});
            let answer = tokio::time::timeout(CONNECT_WAIT, peer.request("mcp/connect", params))
                .await
                .map_err(|_| format!("the editor did not start it within {}s", CONNECT_WAIT.as_secs()))?
                .map_err(|e| format!("the editor could not start it: {}", e.message))?;
            let connection = answer
                .get("connectionId")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty() && c.len() <= 200)
                .ok_or("the editor answered mcp/connect without a connectionId")?
                .to_owned();
            let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
            let (tx, rx) = mpsc::channel(64);
            lock(&bridges).insert(connection.clone(), tx);
            tasks.spawn(bridge(peer, connection, ours, rx, bridges));
            Ok(theirs)
        })
    }
}

/// Carries one MCP connection between the native loop's client (`stream`) and the editor:
/// the client's requests and notifications become `mcp/message`s to the editor, the server's
/// come back through [`EditorChannels::deliver`]. Ends when either side goes; the editor is
/// then told (`mcp/disconnect`).
async fn bridge(
    peer: Peer,
    connection: String,
    stream: DuplexStream,
    mut from_editor: mpsc::Receiver<FromEditor>,
    bridges: Arc<Mutex<HashMap<String, mpsc::Sender<FromEditor>>>>,
) {
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    let mut calls = FuturesUnordered::new();
    // The server's requests, by the id the client answers them under.
    let mut asked: HashMap<u64, oneshot::Sender<Result<Value, RpcError>>> = HashMap::new();
    let mut next_id: u64 = 0;
    loop {
        let line = tokio::select! {
            line = next_line(&mut read, MAX_MESSAGE_BYTES) => match line {
                Ok(Some(Inbound::Line(text))) => Some(text),
                Ok(Some(Inbound::TooLong(_))) => continue,
                Ok(None) | Err(_) => break,
            },
            Some(answer) = calls.next() => {
                let answer: String = answer;
                if !answer.is_empty() && write.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                    break;
                }
                None
            }
            message = from_editor.recv() => {
                let out = match message {
                    None => break,
                    Some(FromEditor::Notification { method, params }) => envelope::notification(&method, params),
                    Some(FromEditor::Request { method, params, reply }) => {
                        next_id += 1;
                        asked.insert(next_id, reply);
                        envelope::request(next_id, &method, params)
                    }
                };
                if write.write_all(format!("{out}\n").as_bytes()).await.is_err() {
                    break;
                }
                None
            }
            _ = peer.closed() => break,
        };
        let Some(text) = line else { continue };
        let Ok(message) = serde_json::from_str::<Value>(&text) else {
            debug!(%connection, "the MCP client wrote a line that is not JSON; skipped");
            continue;
        };
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, message.get("id").cloned()) {
            (Some(method), Some(id)) => {
                let peer = peer.clone();
                let params = json!({"connectionId": connection, "method": method, "params": message.get("params")});
                calls.push(async move {
                    let answer = peer.request("mcp/message", params).await;
                    match serde_json::value::to_raw_value(&id) {
                        Ok(id) => envelope::response(&id, answer.as_ref()),
                        // A JSON value always serializes; nothing to answer otherwise.
                        Err(_) => String::new(),
                    }
                });
            }
            (Some(method), None) => {
                let params = json!({"connectionId": connection, "method": method, "params": message.get("params")});
                peer.notify("mcp/message", params).await;
            }
            (None, Some(id)) => {
                if let Some(reply) = id.as_u64().and_then(|n| asked.remove(&n)) {
                    let _ = reply.send(envelope::read_response(&message).map_err(RpcError::from));
                }
            }
            (None, None) => {}
        }
    }
    lock(&bridges).remove(&connection);
    if !peer.is_closed() {
        let disconnect = peer.request("mcp/disconnect", json!({"connectionId": connection}));
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(5), disconnect).await {
            warn!(%connection, error = %e.message, "the editor did not take mcp/disconnect");
        }
    }
}
