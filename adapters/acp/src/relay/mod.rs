//! `gateway acp --url URL`: the relay between an editor and a remote gateway (ADR 0030).
//!
//! The editor starts the relay as its ACP agent and speaks to it on stdio; the relay speaks to
//! `/acp` of a `gateway serve` over one WebSocket, authenticated with a gateway API key, and
//! passes each message on. It keeps just enough to survive that connection dropping:
//!
//! - the editor's `initialize` and the sessions it opened (their `cwd` and MCP servers), sent
//!   again on the new connection (`session/resume`) before anything else;
//! - every request the editor is waiting on. A `session/prompt` carries an event id the relay
//!   minted (`_meta` `gateway.promptId`), so sending it again is safe: the gateway follows the
//!   turn of the message it already has instead of admitting a second one, and sends only the
//!   updates after the last one the editor was shown (`gateway.afterSeq`, from the
//!   `gateway.seq` of each update). Reads (`session/list`, `load`, `resume`) are sent again
//!   too; any other request in flight when the connection dropped is answered with an error
//!   saying it may or may not have taken effect, since sending it twice could do it twice;
//! - the requests the gateway sent the editor (permissions), renumbered for the editor: an
//!   answer to one asked on a connection that has since dropped is not passed on (the gateway
//!   asks again when the prompt follows its turn once more, if the call still waits).
//!
//! A key the gateway refuses (401, 403) is not retried: the relay answers the editor itself,
//! `initialize` with a terminal sign-in (`gateway login --url URL`) and the session methods
//! with ACP's auth-required error, until `authenticate` finds a key that works. The editor's
//! stdio MCP servers run here, on the editor's machine, carried over the connection ([`mcp`]);
//! http ones pass on.

mod connection;
mod editor;
mod gateway;
mod mcp;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::SinkExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use connection::endpoint;
use connection::{Conn, Failure, next_frame, open};

use crate::names::AFTER_SEQ_META;
use gateway_wire::jsonrpc::envelope;

use crate::rpc::RpcError;
use crate::rpc::framing::{self, MAX_MESSAGE_BYTES};

/// Where the relay connects and with what key.
pub struct RelayConfig {
    /// The gateway's address as the user gave it (`https://gateway.example`): named in
    /// messages and in the terminal sign-in's arguments.
    pub url: String,
    /// The key to present, looked up again at each connection (a key `gateway login --url`
    /// stored since is found); `None` connects without one (a keyless gateway on loopback).
    pub key: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// Forgets the stored key (`logout`); `Ok(false)` when there was none.
    pub forget_key: Arc<dyn Fn() -> Result<bool, String> + Send + Sync>,
}

/// How long a request the editor sent may wait for a connection before it is answered that the
/// gateway cannot be reached.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(60);
/// Longest a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnection backoff: the first wait and the longest.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A ping on an idle connection this often; nothing heard for [`SILENT_LIMIT`] means it is dead.
const PING_EVERY: Duration = Duration::from_secs(15);
const SILENT_LIMIT: Duration = Duration::from_secs(45);
/// Most editor requests held while the connection is down.
const MAX_WAITING: usize = 256;

/// Methods sent again on a new connection when their answer was lost with the old one: the
/// prompt (made safe by its id) and requests that only read or re-open.
const SENT_AGAIN: &[&str] = &["initialize", "session/prompt", "session/list", "session/load", "session/resume"];

/// Serves the editor on stdio until it closes stdin or `shutdown` fires.
pub async fn serve_relay(config: RelayConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    serve_relay_on(config, crate::stdio::input(), crate::stdio::output(), shutdown).await
}

/// [`serve_relay`] with the editor on any pair of streams (tests drive it in memory).
pub async fn serve_relay_on(
    config: RelayConfig,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let endpoint = endpoint(&config.url).map_err(anyhow::Error::msg)?;
    let mut editor = framing::spawn_reader(input, MAX_MESSAGE_BYTES);
    let (to_editor, lines) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(write_lines(output, lines));
    let (server_output, mut servers) = mpsc::channel::<mcp::ServerOutput>(256);
    let mut relay = Relay::new(config, endpoint, to_editor, server_output);
    info!(gateway = %relay.config.url, "relaying ACP between stdio and the gateway");
    let mut ping = tokio::time::interval(PING_EVERY);
    loop {
        if relay.conn.is_none() && relay.refused.is_none() && Instant::now() >= relay.next_attempt {
            relay.connect().await;
        }
        relay.expire_waiting().await;
        let retry_at = relay.next_attempt;
        let waiting_to_connect = relay.conn.is_none() && relay.refused.is_none();
        tokio::select! {
            line = editor.recv() => match line {
                Some(line) => relay.on_editor(line).await,
                None => break,
            },
            frame = next_frame(&mut relay.conn) => relay.on_gateway(frame).await,
            Some(out) = servers.recv() => relay.on_server(out).await,
            _ = tokio::time::sleep_until(retry_at), if waiting_to_connect => {}
            _ = ping.tick() => relay.keep_alive().await,
            _ = shutdown.cancelled() => break,
        }
    }
    if let Some(mut conn) = relay.conn.take() {
        let _ = conn.ws.close(None).await;
    }
    drop(relay);
    // Answers already queued still reach the editor; then stdout is released.
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    Ok(())
}

async fn write_lines(mut out: impl tokio::io::AsyncWrite + Unpin, mut lines: mpsc::Receiver<String>) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// A request sent to the gateway, by the id the relay gave it.
enum Sent {
    /// The editor's, with its own id.
    Editor(EditorRequest),
    /// The relay's own re-opening of the editor's state on a new connection.
    Reopen { method: &'static str, session: Option<String> },
    /// A request of an MCP server the relay runs (its `connection`, its own `id`).
    Mcp { connection: String, id: Value },
}

struct EditorRequest {
    id: Value,
    method: String,
    params: Value,
    /// Sent on the current connection (else it waits for one).
    sent: bool,
    /// Sent on some connection: a prompt never sent can be answered `cancelled` by the relay.
    ever_sent: bool,
    /// The editor cancelled it (a prompt): the cancel is sent again after it.
    cancelled: bool,
    waiting_since: Instant,
}

/// A session the editor opened, as it opened it.
struct Opened {
    cwd: Value,
    mcp_servers: Value,
    additional_directories: Option<Value>,
}

struct Relay {
    config: RelayConfig,
    endpoint: String,
    to_editor: mpsc::Sender<String>,
    conn: Option<Conn>,
    generation: u64,
    next_attempt: Instant,
    backoff: Duration,
    last_error: String,
    /// Why the gateway refused the key, until `authenticate` finds one it takes.
    refused: Option<String>,
    /// The editor's `initialize` params, sent again on each connection.
    init: Option<Value>,
    next_id: u64,
    sent: BTreeMap<u64, Sent>,
    sessions: BTreeMap<String, Opened>,
    /// Per session, the seq of the last update the editor was shown.
    shown: HashMap<String, u64>,
    /// The gateway's requests to the editor: the editor's id → (connection, the gateway's id).
    asked: HashMap<u64, (u64, Value)>,
    next_asked: u64,
    /// The editor's stdio MCP servers, by the id the gateway knows them by (`mcp`).
    local_servers: HashMap<String, mcp::LocalServer>,
    /// Those running, by connection; their output comes back through `server_output`.
    running: HashMap<String, mcp::Running>,
    next_connection: u64,
    server_output: mpsc::Sender<mcp::ServerOutput>,
}

impl Relay {
    fn new(
        config: RelayConfig,
        endpoint: String,
        to_editor: mpsc::Sender<String>,
        server_output: mpsc::Sender<mcp::ServerOutput>,
    ) -> Self {
        Self {
            config,
            endpoint,
            to_editor,
            conn: None,
            generation: 0,
            next_attempt: Instant::now(),
            backoff: BACKOFF_FIRST,
            last_error: "not connected yet".into(),
            refused: None,
            init: None,
            next_id: 0,
            sent: BTreeMap::new(),
            sessions: BTreeMap::new(),
            shown: HashMap::new(),
            asked: HashMap::new(),
            next_asked: 0,
            local_servers: HashMap::new(),
            running: HashMap::new(),
            next_connection: 0,
            server_output,
        }
    }

    // ---- the connection ----

    async fn connect(&mut self) {
        match tokio::time::timeout(CONNECT_TIMEOUT, open(&self.endpoint, (self.config.key)())).await {
            Ok(Ok(ws)) => {
                self.generation += 1;
                info!(gateway = %self.config.url, connection = self.generation, "connected to the gateway");
                self.backoff = BACKOFF_FIRST;
                self.conn = Some(Conn { ws, generation: self.generation, reopening: 0, heard: Instant::now() });
                self.reopen().await;
            }
            Ok(Err(Failure::Refused(reason))) => {
                warn!(gateway = %self.config.url, %reason, "the gateway refused the key");
                self.refused = Some(reason);
                self.answer_waiting_refused().await;
            }
            Ok(Err(Failure::Other(e))) => self.retry_later(e),
            Err(_) => self.retry_later(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
        }
    }

    fn retry_later(&mut self, error: String) {
        if self.generation > 0 || self.backoff == BACKOFF_FIRST {
            warn!(gateway = %self.config.url, %error, retry_in_ms = self.backoff.as_millis() as u64, "cannot reach the gateway");
        }
        self.last_error = error;
        self.next_attempt = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    /// On a new connection: the editor's `initialize` and `session/resume` of each session it
    /// opened, then (once they are answered, [`flush`](Self::flush)) what the editor waits for.
    async fn reopen(&mut self) {
        if let Some(init) = self.init.clone() {
            self.send_own("initialize", None, init).await;
        }
        let sessions: Vec<(String, Value)> = self
            .sessions
            .iter()
            .map(|(id, o)| {
                let mut params = json!({"sessionId": id, "cwd": o.cwd, "mcpServers": o.mcp_servers});
                if let Some(dirs) = &o.additional_directories {
                    params["additionalDirectories"] = dirs.clone();
                }
                (id.clone(), params)
            })
            .collect();
        for (id, params) in sessions {
            self.send_own("session/resume", Some(id), params).await;
        }
        self.flush().await;
    }

    async fn send_own(&mut self, method: &'static str, session: Option<String>, params: Value) {
        let id = self.next_request_id();
        self.sent.insert(id, Sent::Reopen { method, session });
        if let Some(conn) = self.conn.as_mut() {
            conn.reopening += 1;
        }
        self.send(envelope::request(id, method, params)).await;
    }

    fn next_request_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends what waits for the connection, in the order the editor sent it, once the
    /// connection is re-opened: prompts with the seq the editor has seen, and a cancel after a
    /// prompt the editor cancelled meanwhile.
    async fn flush(&mut self) {
        if !self.ready() {
            return;
        }
        let waiting: Vec<u64> =
            self.sent.iter().filter(|(_, s)| matches!(s, Sent::Editor(r) if !r.sent)).map(|(id, _)| *id).collect();
        for id in waiting {
            let Some(Sent::Editor(r)) = self.sent.get_mut(&id) else { continue };
            r.sent = true;
            r.ever_sent = true;
            let mut params = r.params.clone();
            let cancel = r.cancelled.then(|| params.get("sessionId").cloned()).flatten();
            if r.method == "session/prompt" {
                let session = params.get("sessionId").and_then(Value::as_str).unwrap_or_default();
                if let Some(seq) = self.shown.get(session) {
                    params["_meta"][AFTER_SEQ_META] = json!(seq);
                }
            }
            let method = r.method.clone();
            self.send(envelope::request(id, &method, params)).await;
            if let Some(session) = cancel {
                self.send(envelope::notification("session/cancel", json!({"sessionId": session}))).await;
            }
        }
    }

    async fn send(&mut self, message: Value) {
        self.send_text(message.to_string()).await;
    }

    async fn send_text(&mut self, text: String) {
        let Some(conn) = self.conn.as_mut() else { return };
        if let Err(e) = conn.ws.send(Message::Text(text.into())).await {
            self.dropped(format!("sending failed: {e}")).await;
        }
    }

    async fn keep_alive(&mut self) {
        let Some(conn) = self.conn.as_mut() else { return };
        if conn.heard.elapsed() > SILENT_LIMIT {
            self.dropped(format!("nothing heard for {}s", SILENT_LIMIT.as_secs())).await;
            return;
        }
        if let Err(e) = conn.ws.send(Message::Ping(Default::default())).await {
            self.dropped(format!("ping failed: {e}")).await;
        }
    }

    /// The connection is gone: what can be sent again waits for the next one; anything else in
    /// flight is answered that it may or may not have taken effect.
    async fn dropped(&mut self, why: String) {
        let Some(conn) = self.conn.take() else { return };
        warn!(gateway = %self.config.url, connection = conn.generation, reason = %why, "the connection to the gateway dropped; reconnecting");
        self.last_error = why;
        self.next_attempt = Instant::now() + self.backoff;
        // Answers to the dropped connection's requests have nowhere to go, and the MCP servers
        // it opened are its own (the gateway's clients of them are gone with it).
        self.asked.clear();
        self.running.clear();
        let mut lost = Vec::new();
        self.sent.retain(|id, s| match s {
            Sent::Reopen { .. } | Sent::Mcp { .. } => false,
            Sent::Editor(r) if r.sent && !SENT_AGAIN.contains(&r.method.as_str()) => {
                lost.push((*id, r.id.clone(), r.method.clone()));
                false
            }
            Sent::Editor(r) => {
                if r.sent {
                    r.sent = false;
                    r.waiting_since = Instant::now();
                }
                true
            }
        });
        for (_, id, method) in lost {
            let message = format!(
                "the connection to the gateway dropped while {method} was in flight; it may or may not have taken effect"
            );
            self.answer_error(id, RpcError::internal(message).with_data(json!({"reason": "connection_lost"}))).await;
        }
    }
}
