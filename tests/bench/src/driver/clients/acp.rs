//! The ACP client of scenario (c): an editor on the agent's stdio. Requests are answered
//! strictly in turn (one prompt at a time); notifications are read and dropped; requests
//! from the agent (permission prompts, file reads) are refused, since neither side of the
//! comparison should make any.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use super::OpError;
use crate::driver::error::{BenchError, Result};
use crate::driver::procs::Proc;
use crate::lines;

/// Longest one request may take (a first prompt starts the agent process).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub struct AcpPeer {
    pub proc: Proc,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl AcpPeer {
    /// Takes over the piped stdio of `proc`.
    pub fn new(mut proc: Proc) -> Result<Self> {
        let child = proc.child_mut();
        let stdin = child.stdin.take().ok_or_else(|| BenchError::Proc(0, "no stdin pipe".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| BenchError::Proc(0, "no stdout pipe".into()))?;
        Ok(Self { proc, stdin, stdout: BufReader::with_capacity(64 * 1024, stdout), next_id: 0 })
    }

    async fn write(&mut self, v: &Value) -> Result<(), OpError> {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        self.stdin.write_all(&line).await.map_err(|e| OpError::transport("stdin", e))?;
        self.stdin.flush().await.map_err(|e| OpError::transport("stdin", e))
    }

    /// Sends a request and reads until its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, OpError> {
        self.next_id += 1;
        let id = self.next_id;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        tokio::time::timeout(REQUEST_TIMEOUT, self.response(id))
            .await
            .map_err(|_| OpError::transport("timeout", format!("{method} took over {} s", REQUEST_TIMEOUT.as_secs())))?
    }

    async fn response(&mut self, id: u64) -> Result<Value, OpError> {
        loop {
            let line = lines::next_line(&mut self.stdout, lines::MAX_LINE)
                .await
                .map_err(|e| OpError::transport("stdout", e))?
                .ok_or_else(|| OpError::transport("stdout closed", "the agent exited"))?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
            match (msg.get("id"), msg.get("method")) {
                (Some(rid), None) if rid.as_u64() == Some(id) => {
                    if let Some(e) = msg.get("error") {
                        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
                        return Err(OpError::answered(format!("jsonrpc {code}"), e.to_string()));
                    }
                    return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
                }
                (Some(rid), Some(_)) => {
                    let refusal = json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not offered by the bench client"}});
                    self.write(&refusal).await?;
                }
                _ => {}
            }
        }
    }

    /// Closes the agent's stdin (an editor going away), then stops it.
    pub async fn stop(self) {
        let AcpPeer { proc, stdin, .. } = self;
        drop(stdin);
        proc.stop(crate::driver::targets::STOP_GRACE).await;
    }

    pub async fn initialize(&mut self) -> Result<(), OpError> {
        let params = json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
            "clientInfo": {"name": "gateway-bench", "version": env!("CARGO_PKG_VERSION")}});
        self.request("initialize", params).await.map(|_| ())
    }

    pub async fn new_session(&mut self, cwd: &std::path::Path) -> Result<String, OpError> {
        let r = self.request("session/new", json!({"cwd": cwd.display().to_string(), "mcpServers": []})).await?;
        r.get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| OpError::answered("no sessionId", r.to_string()))
    }

    /// One prompt; `Ok` only for `end_turn`.
    pub async fn prompt(&mut self, session: &str, text: &str) -> Result<(), OpError> {
        let r = self
            .request("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}))
            .await?;
        match r.get("stopReason").and_then(Value::as_str) {
            Some("end_turn") => Ok(()),
            other => Err(OpError::answered(format!("stopReason {}", other.unwrap_or("?")), r.to_string())),
        }
    }
}
