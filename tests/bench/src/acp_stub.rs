//! `bench-acp-stub`: the trivial ACP agent of scenario (c), on stdio (one JSON-RPC message
//! per line). `initialize` echoes protocol version 1, `session/new` hands out an id, and each
//! `session/prompt` gets one `agent_message_chunk` update (`echo: <text>`) and then the
//! answer `{"stopReason":"end_turn"}`: the least an agent can do for a prompt, so a
//! gateway's round trip to it measures the gateway.
//!
//! Requests it does not know get -32601; notifications (`session/cancel`) and responses are
//! ignored. Lines are bounded ([`crate::lines::MAX_LINE`]); a bad line gets -32700 and the
//! stub reads on.

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};

use crate::lines::{self, LineError};

pub const PROTOCOL_VERSION: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error(transparent)]
    Read(#[from] LineError),
    #[error("writing stdout: {0}")]
    Write(#[from] std::io::Error),
}

/// What one inbound line makes the stub write, in order.
pub fn answer(line: &str, sessions: &mut u64) -> Vec<Value> {
    let Ok(msg) = serde_json::from_str::<Value>(line) else {
        return vec![json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}})];
    };
    let (Some(id), Some(method)) = (msg.get("id"), msg.get("method").and_then(Value::as_str)) else {
        return vec![]; // a notification or a response
    };
    let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    match method {
        "initialize" => vec![ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {"loadSession": false, "promptCapabilities": {}},
            "authMethods": [],
            "agentInfo": {"name": "bench-acp-stub", "version": env!("CARGO_PKG_VERSION")},
        }))],
        "session/new" => {
            *sessions += 1;
            vec![ok(json!({"sessionId": format!("stub-{sessions}")}))]
        }
        "session/prompt" => {
            let params = msg.get("params").cloned().unwrap_or(Value::Null);
            let text: String = params
                .get("prompt")
                .and_then(Value::as_array)
                .map(|blocks| blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": params.get("sessionId").cloned().unwrap_or(Value::Null),
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("echo: {text}")}},
            }});
            vec![update, ok(json!({"stopReason": "end_turn"}))]
        }
        other => vec![json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": format!("method {other:?} is not served by this stub")}})],
    }
}

/// Answers `input` on `output` until end of input.
pub async fn run(mut input: impl AsyncBufRead + Unpin, mut output: impl AsyncWrite + Unpin) -> Result<(), StubError> {
    let mut sessions = 0u64;
    loop {
        let line = match lines::next_line(&mut input, lines::MAX_LINE).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(LineError::TooLong(n)) => {
                tracing::warn!(bytes = n, "line too long; the stub stops");
                return Err(LineError::TooLong(n).into());
            }
            Err(e) => return Err(e.into()),
        };
        if line.trim().is_empty() {
            continue;
        }
        let out = answer(&line, &mut sessions);
        if out.is_empty() {
            continue;
        }
        let mut buf = Vec::with_capacity(256);
        for v in out {
            buf.extend_from_slice(v.to_string().as_bytes());
            buf.push(b'\n');
        }
        output.write_all(&buf).await?;
        output.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_gets_one_chunk_then_end_turn() {
        let mut n = 0;
        let init = answer(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#, &mut n);
        assert_eq!(init[0]["result"]["protocolVersion"], 1);
        let new =
            answer(r#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#, &mut n);
        assert_eq!(new[0]["result"]["sessionId"], "stub-1");
        let p = answer(
            r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"stub-1","prompt":[{"type":"text","text":"hi"}]}}"#,
            &mut n,
        );
        assert_eq!(p[0]["params"]["update"]["content"]["text"], "echo: hi");
        assert_eq!(p[1], json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}));
        assert!(answer(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#, &mut n).is_empty());
        assert_eq!(answer(r#"{"jsonrpc":"2.0","id":4,"method":"x"}"#, &mut n)[0]["error"]["code"], -32601);
        assert_eq!(answer("nope", &mut n)[0]["error"]["code"], -32700);
    }
}
