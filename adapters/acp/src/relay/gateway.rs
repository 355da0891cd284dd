//! What the relay does with the gateway's messages.

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, Message};
use tracing::warn;

use super::{EditorRequest, Opened, Relay, Sent};
use crate::names::SEQ_META;

impl Relay {
    pub(super) async fn on_gateway(&mut self, frame: Option<Result<Message, tungstenite::Error>>) {
        let text = match frame {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(_))) | None => {
                return self.dropped("the gateway closed the connection".into()).await;
            }
            Some(Err(e)) => return self.dropped(e.to_string()).await,
            Some(Ok(_)) => {
                if let Some(c) = self.conn.as_mut() {
                    c.heard = Instant::now();
                }
                return;
            }
        };
        if let Some(c) = self.conn.as_mut() {
            c.heard = Instant::now();
        }
        let Ok(mut message) = serde_json::from_str::<Value>(text.as_str()) else {
            return warn!("the gateway sent a frame that is not JSON; ignored");
        };
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str).map(str::to_owned), id) {
            (None, Some(id)) => self.gateway_answer(id, message).await,
            (Some(method), Some(theirs)) if method.starts_with("mcp/") => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                self.mcp_request(&method, theirs, params).await;
            }
            (Some(method), None) if method == "mcp/message" => {
                self.mcp_notification(message.get("params").cloned().unwrap_or(Value::Null)).await;
            }
            (Some(_), Some(theirs)) => {
                self.next_asked += 1;
                let ours = self.next_asked;
                self.asked.insert(ours, (self.generation, theirs));
                message["id"] = json!(ours);
                self.tell_editor(message).await;
            }
            (Some(method), None) => {
                if method == "session/update"
                    && let (Some(session), Some(seq)) = (
                        message.pointer("/params/sessionId").and_then(Value::as_str),
                        message.pointer("/params/_meta").and_then(|m| m.get(SEQ_META)).and_then(Value::as_u64),
                    )
                {
                    let shown = self.shown.entry(session.to_owned()).or_default();
                    *shown = (*shown).max(seq);
                }
                self.tell_editor(message).await;
            }
            (None, None) => {}
        }
    }

    pub(super) async fn gateway_answer(&mut self, id: Value, mut message: Value) {
        let Some(sent) = id.as_u64().and_then(|n| self.sent.remove(&n)) else { return };
        let ok = message.get("error").is_none();
        match sent {
            Sent::Reopen { method, session } => {
                if !ok {
                    warn!(method, session = ?session, error = %message["error"], "re-opening on the new connection failed");
                    if let Some(session) = session {
                        self.sessions.remove(&session);
                    }
                }
                if let Some(conn) = self.conn.as_mut() {
                    conn.reopening = conn.reopening.saturating_sub(1);
                }
                self.flush().await;
            }
            Sent::Mcp { connection, id } => self.answer_server(&connection, id, &message).await,
            Sent::Editor(r) => {
                if ok {
                    self.remember(&r, &message);
                }
                if r.method == "initialize"
                    && let Some(result) = message.get_mut("result")
                {
                    *result = self.initialize_answer(result.take());
                }
                message["id"] = r.id;
                self.tell_editor(message).await;
            }
        }
    }

    /// What the relay keeps of an answered request: the sessions the editor has open.
    pub(super) fn remember(&mut self, r: &EditorRequest, answer: &Value) {
        let session = match r.method.as_str() {
            "session/new" => answer.pointer("/result/sessionId"),
            _ => r.params.get("sessionId"),
        };
        let Some(session) = session.and_then(Value::as_str).map(str::to_owned) else { return };
        match r.method.as_str() {
            "session/new" | "session/load" | "session/resume" => {
                let cwd = r.params.get("cwd").cloned().unwrap_or(Value::Null);
                let mcp_servers = r.params.get("mcpServers").cloned().unwrap_or_else(|| json!([]));
                let additional_directories = r.params.get("additionalDirectories").cloned();
                self.sessions.insert(session, Opened { cwd, mcp_servers, additional_directories });
            }
            "session/close" | "session/delete" => {
                self.sessions.remove(&session);
                self.shown.remove(&session);
            }
            _ => {}
        }
    }
}
