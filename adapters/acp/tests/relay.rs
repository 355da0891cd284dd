//! The relay `gateway acp --url` (ADR 0030) against a scripted gateway on a loopback
//! WebSocket, the editor on in-memory pipes: what it does when the connection drops mid-request,
//! when the key is refused, and when nothing answers. (A real `gateway serve` killed mid-turn is
//! `tests/compat/acp/editor_relay.py`.)
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use gateway_acp::relay::{RelayConfig, serve_relay_on};
use gateway_acp::rpc::RpcError;
use gateway_wire::jsonrpc::envelope;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio_util::sync::CancellationToken;

/// What the scripted gateway does with a message on its `n`th connection (from 1).
enum Out {
    Send(Value),
    Close,
}

type Script = fn(usize, &Value) -> Vec<Out>;

#[derive(Clone)]
struct Gateway {
    script: Script,
    /// Every message received, with the connection it came on.
    seen: Arc<Mutex<Vec<(usize, Value)>>>,
    connections: Arc<Mutex<usize>>,
    refuse: bool,
}

async fn upgrade(State(g): State<Gateway>, ws: WebSocketUpgrade) -> Response {
    if g.refuse {
        return (StatusCode::UNAUTHORIZED, "the API key is not valid").into_response();
    }
    let n = {
        let mut c = g.connections.lock().unwrap();
        *c += 1;
        *c
    };
    ws.on_upgrade(move |socket| serve(g, socket, n))
}

async fn serve(g: Gateway, socket: WebSocket, n: usize) {
    let (mut sink, mut stream) = socket.split();
    while let Some(Ok(frame)) = stream.next().await {
        let Message::Text(text) = frame else { continue };
        let msg: Value = serde_json::from_str(text.as_str()).unwrap();
        g.seen.lock().unwrap().push((n, msg.clone()));
        for out in (g.script)(n, &msg) {
            match out {
                Out::Send(v) => sink.send(Message::Text(v.to_string().into())).await.unwrap(),
                Out::Close => return,
            }
        }
    }
}

async fn gateway(script: Script, refuse: bool) -> (SocketAddr, Gateway) {
    let g = Gateway { script, seen: Arc::default(), connections: Arc::default(), refuse };
    let app = axum::Router::new().route("/acp", axum::routing::get(upgrade)).with_state(g.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, g)
}

fn answer(msg: &Value, result: Value) -> Out {
    let id = serde_json::value::to_raw_value(&msg["id"]).unwrap();
    Out::Send(serde_json::from_str(&envelope::response::<RpcError>(&id, Ok(&result))).unwrap())
}

/// The editor's ends of the relay's stdio.
struct Editor {
    to_relay: DuplexStream,
    from_relay: tokio::io::Lines<BufReader<DuplexStream>>,
    stop: CancellationToken,
}

impl Editor {
    fn start(url: String) -> Self {
        let (to_relay, relay_in) = tokio::io::duplex(1 << 20);
        let (relay_out, from_relay) = tokio::io::duplex(1 << 20);
        let stop = CancellationToken::new();
        let config =
            RelayConfig { url, key: Arc::new(|| Some("gw_test_key".to_owned())), forget_key: Arc::new(|| Ok(true)) };
        tokio::spawn(serve_relay_on(config, relay_in, relay_out, stop.clone()));
        Self { to_relay, from_relay: BufReader::new(from_relay).lines(), stop }
    }

    async fn send(&mut self, msg: Value) {
        self.to_relay.write_all(format!("{msg}\n").as_bytes()).await.unwrap();
    }

    /// The next message the editor gets.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.from_relay.next_line()).await.unwrap();
        serde_json::from_str(&line.unwrap().unwrap()).unwrap()
    }

    /// Messages up to the answer to request `id` (which is last).
    async fn until_answer(&mut self, id: u64) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let m = self.next().await;
            let done = m["id"] == json!(id) && m.get("method").is_none();
            got.push(m);
            if done {
                return got;
            }
        }
    }
}

impl Drop for Editor {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

const SESSION: &str = "sesn_000000000000000000000A";

/// Connection 1 drops while a prompt runs (after one update); connection 2 answers.
fn drops_mid_request(n: usize, msg: &Value) -> Vec<Out> {
    let method = msg["method"].as_str().unwrap_or_default();
    match (n, method) {
        (_, "initialize") => {
            vec![answer(msg, json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}))]
        }
        (_, "session/new") => vec![answer(msg, json!({"sessionId": SESSION}))],
        (_, "session/resume") => vec![answer(msg, json!({}))],
        (1, "session/prompt") => vec![
            Out::Send(envelope::notification(
                "session/update",
                json!({
                    "sessionId": SESSION, "_meta": {"gateway.seq": 7},
                    "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "before"}},
                }),
            )),
            Out::Close,
        ],
        (_, "session/prompt") => vec![answer(msg, json!({"stopReason": "end_turn"}))],
        _ => vec![],
    }
}

/// A prompt in flight when the connection drops is sent again on the next one, after the
/// session is re-opened, with the same id and the seq the editor saw, and answered once; a
/// request that is not safe to send twice is answered `connection_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_resends_the_prompt_once_and_answers_the_rest_connection_lost() {
    let (addr, g) = gateway(drops_mid_request, false).await;
    let mut ed = Editor::start(format!("http://{addr}"));
    ed.send(envelope::request(1, "initialize", json!({"protocolVersion": 1}))).await;
    ed.until_answer(1).await;
    ed.send(envelope::request(2, "session/new", json!({"cwd": "/p", "mcpServers": []}))).await;
    ed.until_answer(2).await;
    let prompt = json!({"sessionId": SESSION, "prompt": [{"type": "text", "text": "hi"}]});
    ed.send(envelope::request(3, "session/prompt", prompt)).await;
    let got = ed.until_answer(3).await;
    assert_eq!(got.last().unwrap()["result"], json!({"stopReason": "end_turn"}), "{got:?}");
    let answers = got.iter().filter(|m| m["id"] == json!(3)).count();
    assert_eq!(answers, 1, "answered once: {got:?}");
    assert_eq!(got[0]["params"]["update"]["content"]["text"], "before", "what came before the drop reached the editor");

    let seen = g.seen.lock().unwrap().clone();
    let prompts: Vec<&(usize, Value)> = seen.iter().filter(|(_, m)| m["method"] == "session/prompt").collect();
    assert_eq!(prompts.len(), 2, "sent once on each connection: {prompts:?}");
    let (first, again) = (&prompts[0].1["params"]["_meta"], &prompts[1].1["params"]["_meta"]);
    assert!(first["gateway.promptId"].as_str().unwrap().starts_with("sevt_"), "{first}");
    assert_eq!(again["gateway.promptId"], first["gateway.promptId"], "the same prompt id");
    assert_eq!(again["gateway.afterSeq"], 7, "with the seq the editor saw");
    let second: Vec<&str> = seen.iter().filter(|(n, _)| *n == 2).map(|(_, m)| m["method"].as_str().unwrap()).collect();
    assert_eq!(second, ["initialize", "session/resume", "session/prompt"], "re-opened before anything else");
    let resumed = seen.iter().find(|(_, m)| m["method"] == "session/resume").unwrap();
    assert_eq!(resumed.1["params"]["sessionId"], SESSION);
}

/// Connection 1 drops on a mode change; later connections answer everything.
fn drops_on_set_mode(n: usize, msg: &Value) -> Vec<Out> {
    let method = msg["method"].as_str().unwrap_or_default();
    match (n, method) {
        (1, "session/set_mode") => vec![Out::Close],
        (_, "initialize") => {
            vec![answer(msg, json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}))]
        }
        (_, "session/new") => vec![answer(msg, json!({"sessionId": SESSION}))],
        (_, "session/resume") | (_, "session/set_mode") => vec![answer(msg, json!({}))],
        _ => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_flight_when_the_connection_drops_is_answered_connection_lost_not_sent_twice() {
    let (addr, g) = gateway(drops_on_set_mode, false).await;
    let mut ed = Editor::start(format!("http://{addr}"));
    ed.send(envelope::request(1, "session/new", json!({"cwd": "/p", "mcpServers": []}))).await;
    ed.until_answer(1).await;
    let mode = json!({"sessionId": SESSION, "modeId": "plan"});
    ed.send(envelope::request(2, "session/set_mode", mode)).await;
    let got = ed.until_answer(2).await;
    let error = &got.last().unwrap()["error"];
    assert_eq!(error["code"], -32603, "{got:?}");
    assert_eq!(error["data"]["reason"], "connection_lost", "{got:?}");
    // The relay reconnects (and re-opens the session) without sending the change again.
    for _ in 0..100 {
        if g.seen.lock().unwrap().iter().any(|(n, m)| *n == 2 && m["method"] == "session/resume") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = g.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|(n, m)| *n == 2 && m["method"] == "session/resume"), "{seen:?}");
    let modes = seen.iter().filter(|(_, m)| m["method"] == "session/set_mode").count();
    assert_eq!(modes, 1, "the change was not sent twice: {seen:?}");
}

/// A key the gateway refuses: the relay answers the editor itself, with the terminal sign-in
/// that stores a key for this gateway, and ACP's auth-required error on session methods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_answered_with_the_sign_in_for_this_gateway() {
    let (addr, g) = gateway(drops_on_set_mode, true).await;
    let url = format!("http://{addr}");
    let mut ed = Editor::start(url.clone());
    let init = json!({"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": true}}});
    ed.send(envelope::request(1, "initialize", init)).await;
    let got = ed.until_answer(1).await;
    let methods = &got.last().unwrap()["result"]["authMethods"];
    let login = methods.as_array().unwrap().iter().find(|m| m["id"] == "gateway-login").expect("terminal sign-in");
    assert_eq!(login["type"], "terminal");
    assert_eq!(login["args"], json!(["login", "--url", url]));
    ed.send(envelope::request(2, "session/new", json!({"cwd": "/p", "mcpServers": []}))).await;
    let got = ed.until_answer(2).await;
    let error = &got.last().unwrap()["error"];
    assert_eq!(error["code"], -32000, "{got:?}");
    assert!(error["message"].as_str().unwrap().contains(&format!("gateway login --url {url}")), "{error}");
    assert!(g.seen.lock().unwrap().is_empty(), "nothing reached the gateway");
}

/// With no gateway to reach, a prompt waits for one; cancelled before it was ever sent, it is
/// answered `cancelled` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_cancelled_before_it_was_ever_sent_is_answered_cancelled() {
    let addr = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let mut ed = Editor::start(format!("http://{addr}"));
    let prompt = json!({"sessionId": SESSION, "prompt": [{"type": "text", "text": "hi"}]});
    ed.send(envelope::request(1, "session/prompt", prompt)).await;
    ed.send(envelope::notification("session/cancel", json!({"sessionId": SESSION}))).await;
    let got = ed.until_answer(1).await;
    assert_eq!(got.last().unwrap()["result"], json!({"stopReason": "cancelled"}), "{got:?}");
}

/// The editor's stdio MCP servers never reach the gateway as commands: the relay sends them as
/// servers it carries (`type: "acp"`, an id), and starts only those the editor declared: a
/// `mcp/connect` for any other id is refused.
fn asks_for_an_unknown_server(_: usize, msg: &Value) -> Vec<Out> {
    match msg["method"].as_str() {
        Some("session/new") => vec![
            answer(msg, json!({"sessionId": SESSION})),
            Out::Send(envelope::request(900, "mcp/connect", json!({"serverId": "stdio-0000000000000000"}))),
        ],
        _ => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_reach_the_gateway_as_ids_and_only_declared_ones_are_started() {
    let (addr, g) = gateway(asks_for_an_unknown_server, false).await;
    let mut ed = Editor::start(format!("http://{addr}"));
    let server =
        json!({"name": "fs", "command": "/bin/echo", "args": ["never"], "env": [{"name": "TOKEN", "value": "s3cret"}]});
    let params = json!({"cwd": "/tmp", "mcpServers": [server, {"type": "http", "name": "web", "url": "https://x/mcp", "headers": []}]});
    ed.send(envelope::request(1, "session/new", params)).await;
    ed.until_answer(1).await;
    for _ in 0..100 {
        if g.seen.lock().unwrap().iter().any(|(_, m)| m["id"] == 900) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = g.seen.lock().unwrap().clone();
    let created = &seen.iter().find(|(_, m)| m["method"] == "session/new").unwrap().1["params"]["mcpServers"];
    assert_eq!(created[0]["type"], "acp", "{created}");
    assert_eq!(created[0]["name"], "fs");
    assert!(created[0]["serverId"].as_str().unwrap().starts_with("stdio-"), "{created}");
    assert!(!created.to_string().contains("/bin/echo") && !created.to_string().contains("s3cret"), "{created}");
    assert_eq!(created[1]["type"], "http", "an http server passes as it is");
    let refused = seen.iter().find(|(_, m)| m["id"] == 900).expect("the relay answered mcp/connect");
    assert_eq!(refused.1["error"]["code"], -32002, "{:?}", refused.1);
}
