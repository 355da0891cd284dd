//! The editor's stdio MCP servers, run by the relay on the editor's machine and carried over
//! its connection (ACP's MCP-over-ACP; ADR 0032). The gateway never runs them: it sees each as
//! a `type: "acp"` server, opens it with `mcp/connect` when a turn needs its tools, speaks MCP
//! to it in `mcp/message`s, and closes it with `mcp/disconnect`. A server's id is derived from
//! what it is (its command, arguments, environment and the session's directory), so a relay
//! started again by the editor gives the same server the same id.

use std::collections::HashMap;
use std::process::Stdio;

use gateway_wire::jsonrpc::envelope;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{Relay, Sent};
use crate::rpc::RpcError;
use crate::rpc::framing::{Inbound, MAX_MESSAGE_BYTES, next_line};

/// Most servers the relay runs at once.
const MAX_RUNNING: usize = 32;

/// An editor's stdio server, as the editor described it.
#[derive(Clone)]
pub(super) struct LocalServer {
    name: String,
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<String>,
}

/// A server the relay runs for one `mcp/connect`.
pub(super) struct Running {
    /// Lines for its stdin (a task writes them, so a stuck server never holds the relay).
    stdin: mpsc::Sender<String>,
    /// Killed when dropped.
    _child: tokio::process::Child,
    next_id: u64,
    /// The gateway's `mcp/message` requests waiting for the server's answer, by the id the
    /// server got.
    waiting: HashMap<u64, Value>,
}

/// What a running server wrote (a line), or that it ended (`None`).
pub(super) type ServerOutput = (String, Option<String>);

/// A stable id for a server: FNV-1a over what it is (not a secret: the relay's own name for it).
fn server_id(server: &Value, cwd: Option<&str>) -> String {
    let text = json!([server, cwd]).to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("stdio-{hash:016x}")
}

/// Whether an `mcpServers` entry runs over stdio (no `type`, or `"stdio"`).
fn is_stdio(server: &Value) -> bool {
    server.get("type").and_then(Value::as_str).unwrap_or("stdio") == "stdio"
}

impl Relay {
    /// Replaces the editor's stdio servers in a `session/new`, `load` or `resume` by servers
    /// the relay carries, and remembers how to run each.
    pub(super) fn carry_stdio_servers(&mut self, params: &mut Value) -> Result<(), RpcError> {
        let cwd = params.get("cwd").and_then(Value::as_str).map(str::to_owned);
        let Some(servers) = params.get_mut("mcpServers").and_then(Value::as_array_mut) else { return Ok(()) };
        for server in servers.iter_mut().filter(|s| is_stdio(s)) {
            let text = |k: &str| server.get(k).and_then(Value::as_str).map(str::to_owned);
            let (Some(name), Some(command)) = (text("name"), text("command")) else {
                return Err(RpcError::invalid_params("a stdio MCP server needs `name` and `command`"));
            };
            let args = server
                .get("args")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            let env = server
                .get("env")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| {
                            Some((p.get("name")?.as_str()?.to_owned(), p.get("value")?.as_str()?.to_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let id = server_id(server, cwd.as_deref());
            self.local_servers
                .insert(id.clone(), LocalServer { name: name.clone(), command, args, env, cwd: cwd.clone() });
            *server = json!({"type": "acp", "name": name, "serverId": id});
        }
        Ok(())
    }

    /// The gateway's `mcp/connect`, `mcp/message` and `mcp/disconnect` requests.
    pub(super) async fn mcp_request(&mut self, method: &str, id: Value, params: Value) {
        let answer = match method {
            "mcp/connect" => self.connect_server(&params),
            "mcp/message" => match self.tell_server(&params, Some(id.clone())).await {
                // Answered when the server answers.
                Ok(()) => return,
                Err(e) => Err(e),
            },
            "mcp/disconnect" => {
                let connection = params.get("connectionId").and_then(Value::as_str).unwrap_or_default();
                if self.running.remove(connection).is_some() {
                    info!(connection, "an MCP server the editor runs was closed by the gateway");
                }
                Ok(json!({}))
            }
            other => Err(RpcError::method_not_found(other)),
        };
        self.answer_gateway(id, answer).await;
    }

    /// The gateway's `mcp/message` notifications.
    pub(super) async fn mcp_notification(&mut self, params: Value) {
        if let Err(e) = self.tell_server(&params, None).await {
            warn!(error = %e.message, "an MCP notification for no running server");
        }
    }

    fn connect_server(&mut self, params: &Value) -> Result<Value, RpcError> {
        let id = params.get("serverId").and_then(Value::as_str).unwrap_or_default();
        let server = self.local_servers.get(id).cloned().ok_or_else(|| {
            crate::rpc::not_found(format!("no MCP server {:?} on this editor", crate::rpc::clip(id, 80)))
        })?;
        if self.running.len() >= MAX_RUNNING {
            return Err(RpcError::internal(format!("{MAX_RUNNING} MCP servers already run here; retry later")));
        }
        let mut cmd = tokio::process::Command::new(&server.command);
        cmd.args(&server.args)
            .envs(server.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(cwd) = &server.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn().map_err(|e| {
            RpcError::internal(format!("cannot start the MCP server {:?} ({}): {e}", server.name, server.command))
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RpcError::internal("the MCP server's process has no pipes"));
        };
        self.next_connection += 1;
        let connection = format!("mcpc-{}", self.next_connection);
        let (tx, mut lines) = mpsc::channel::<String>(64);
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = lines.recv().await {
                if stdin.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
        });
        let output = self.server_output.clone();
        let from = connection.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            while let Ok(Some(line)) = next_line(&mut reader, MAX_MESSAGE_BYTES).await {
                if let Inbound::Line(text) = line
                    && output.send((from.clone(), Some(text))).await.is_err()
                {
                    return;
                }
            }
            let _ = output.send((from, None)).await;
        });
        info!(server = %server.name, %connection, "started an MCP server the editor runs");
        self.running
            .insert(connection.clone(), Running { stdin: tx, _child: child, next_id: 0, waiting: HashMap::new() });
        Ok(json!({"connectionId": connection}))
    }

    /// An MCP message from the gateway to a running server: a request (`gateway_id`, answered
    /// when the server answers) or a notification.
    async fn tell_server(&mut self, params: &Value, gateway_id: Option<Value>) -> Result<(), RpcError> {
        let text = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (connection, method) = (text("connectionId"), text("method"));
        let inner = params.get("params").cloned().unwrap_or(Value::Null);
        let server = self
            .running
            .get_mut(&connection)
            .ok_or_else(|| crate::rpc::not_found("no such MCP connection (its server ended)"))?;
        let line = match gateway_id {
            Some(id) => {
                server.next_id += 1;
                server.waiting.insert(server.next_id, id);
                envelope::request(server.next_id, &method, inner)
            }
            None => envelope::notification(&method, inner),
        };
        server.stdin.send(line.to_string()).await.map_err(|_| RpcError::internal("the MCP server's input is closed"))
    }

    /// What a running server wrote: an answer to the gateway's request, or its own request or
    /// notification for the client side (the gateway's MCP client). `None`: it ended.
    pub(super) async fn on_server(&mut self, (connection, line): ServerOutput) {
        let Some(line) = line else {
            if let Some(server) = self.running.remove(&connection) {
                for (_, id) in server.waiting {
                    let e = RpcError::internal("the MCP server ended before it answered");
                    self.answer_gateway(id, Err(e)).await;
                }
            }
            return;
        };
        let Ok(message) = serde_json::from_str::<Value>(&line) else { return };
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        let params = message.get("params").cloned();
        match (method, message.get("id").cloned()) {
            (None, Some(id)) => {
                let gateway_id =
                    id.as_u64().and_then(|n| self.running.get_mut(&connection).and_then(|s| s.waiting.remove(&n)));
                if let Some(gateway_id) = gateway_id {
                    let answer = envelope::read_response(&message).map_err(RpcError::from);
                    self.answer_gateway(gateway_id, answer).await;
                }
            }
            (Some(method), Some(id)) => {
                let relay_id = self.next_request_id();
                self.sent.insert(relay_id, Sent::Mcp { connection: connection.clone(), id });
                let params = json!({"connectionId": connection, "method": method, "params": params});
                self.send(envelope::request(relay_id, "mcp/message", params)).await;
            }
            (Some(method), None) => {
                let params = json!({"connectionId": connection, "method": method, "params": params});
                self.send(envelope::notification("mcp/message", params)).await;
            }
            (None, None) => {}
        }
    }

    /// The gateway's answer to a server's request, back to the server.
    pub(super) async fn answer_server(&mut self, connection: &str, id: Value, message: &Value) {
        let Some(server) = self.running.get(connection) else { return };
        let Ok(id) = serde_json::value::to_raw_value(&id) else { return };
        let answer = envelope::read_response(message).map_err(RpcError::from);
        let _ = server.stdin.send(envelope::response(&id, answer.as_ref())).await;
    }

    async fn answer_gateway(&mut self, id: Value, answer: Result<Value, RpcError>) {
        let Ok(id) = serde_json::value::to_raw_value(&id) else { return };
        self.send_text(envelope::response(&id, answer.as_ref())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_keeps_its_id_and_another_server_gets_another() {
        let fs = json!({"name": "fs", "command": "npx", "args": ["server-filesystem", "/p"], "env": []});
        assert_eq!(server_id(&fs, Some("/p")), server_id(&fs.clone(), Some("/p")));
        assert_ne!(server_id(&fs, Some("/p")), server_id(&fs, Some("/q")));
        let other = json!({"name": "fs", "command": "npx", "args": ["server-filesystem", "/q"], "env": []});
        assert_ne!(server_id(&fs, Some("/p")), server_id(&other, Some("/p")));
    }
}
