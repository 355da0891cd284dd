//! What the relay does with the editor's messages, and how it answers the editor itself.

use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::info;

use gateway_wire::jsonrpc::envelope;

use super::{EditorRequest, MAX_WAITING, Relay, Sent, UNREACHABLE_AFTER};
use crate::names::PROMPT_ID_META;
use crate::rpc::framing::{Inbound, MAX_MESSAGE_BYTES};
use crate::rpc::{RpcError, auth_required, code};
use crate::wire::PROTOCOL_VERSION;

impl Relay {
    pub(super) async fn on_editor(&mut self, line: Inbound) {
        let text = match line {
            Inbound::Line(t) => t,
            Inbound::TooLong(n) => {
                let message = format!("message of {n}+ bytes is over the {MAX_MESSAGE_BYTES}-byte limit");
                return self.answer_error(Value::Null, RpcError::new(code::PARSE_ERROR, message)).await;
            }
        };
        let message: Value = match serde_json::from_str(&text) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return self
                    .answer_error(Value::Null, RpcError::new(code::PARSE_ERROR, "not a JSON-RPC message"))
                    .await;
            }
        };
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method.as_deref(), id) {
            (Some(method), Some(id)) => {
                let method = method.to_owned();
                let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
                self.editor_request(id, method, params).await
            }
            (Some("session/cancel"), None) => self.editor_cancel(message).await,
            (Some(_), None) => {
                if self.ready() {
                    self.send(message).await;
                }
            }
            (None, Some(id)) => self.editor_answer(id, message).await,
            (None, None) => {}
        }
    }

    pub(super) fn ready(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.reopening == 0)
    }

    pub(super) async fn editor_request(&mut self, id: Value, method: String, mut params: Value) {
        match method.as_str() {
            "initialize" => self.init = Some(params.clone()),
            "authenticate" if self.refused.is_some() => return self.authenticate(id).await,
            "logout" => return self.logout(id).await,
            "session/new" | "session/load" | "session/resume" => {
                // The editor's stdio servers run here, carried over the connection.
                if let Err(e) = self.carry_stdio_servers(&mut params) {
                    return self.answer_error(id, e).await;
                }
            }
            "session/prompt" => {
                if !params.get("_meta").is_some_and(Value::is_object) {
                    params["_meta"] = json!({});
                }
                params["_meta"][PROMPT_ID_META] = json!(gateway_core::EventId::new().as_str());
            }
            _ => {}
        }
        if let Some(reason) = self.refused.clone() {
            if method == "initialize" {
                let answer = self.initialize_answer(json!({"protocolVersion": PROTOCOL_VERSION}));
                return self.answer(id, answer).await;
            }
            return self.answer_error(id, auth_required(self.sign_in_hint(&reason))).await;
        }
        let waiting = self.sent.values().filter(|s| matches!(s, Sent::Editor(r) if !r.sent)).count();
        if waiting >= MAX_WAITING {
            let message =
                format!("{waiting} requests already wait for the gateway at {}; retry later", self.config.url);
            return self.answer_error(id, RpcError::internal(message).with_data(json!({"reason": "overloaded"}))).await;
        }
        let relay_id = self.next_request_id();
        let ready = self.ready();
        let request = EditorRequest {
            id,
            method: method.clone(),
            params: params.clone(),
            sent: ready,
            ever_sent: ready,
            cancelled: false,
            waiting_since: Instant::now(),
        };
        self.sent.insert(relay_id, Sent::Editor(request));
        if ready {
            self.send(envelope::request(relay_id, &method, params)).await;
        }
    }

    /// A cancel reaches the gateway now if it can; a prompt waiting for a connection keeps it
    /// (sent after the prompt), and one never sent anywhere is answered `cancelled` at once.
    pub(super) async fn editor_cancel(&mut self, message: Value) {
        let session = message.pointer("/params/sessionId").cloned().unwrap_or(Value::Null);
        let mut unsent = None;
        for (relay_id, s) in self.sent.iter_mut() {
            if let Sent::Editor(r) = s
                && r.method == "session/prompt"
                && r.params.get("sessionId") == Some(&session)
            {
                r.cancelled = true;
                if !r.ever_sent {
                    unsent = Some(*relay_id);
                }
            }
        }
        if let Some(Sent::Editor(r)) = unsent.and_then(|id| self.sent.remove(&id)) {
            return self.answer(r.id, json!({"stopReason": "cancelled"})).await;
        }
        if self.ready() {
            self.send(message).await;
        }
    }

    /// The editor's answer to a request of the gateway's, passed on only to the connection
    /// that asked.
    pub(super) async fn editor_answer(&mut self, id: Value, mut message: Value) {
        let Some((generation, theirs)) = id.as_u64().and_then(|n| self.asked.remove(&n)) else { return };
        if self.conn.as_ref().is_some_and(|c| c.generation == generation) {
            message["id"] = theirs;
            self.send(message).await;
        } else {
            info!(connection = generation, "an answer to a request of a dropped connection is not passed on");
        }
    }

    /// `authenticate` after a refused key: the key is looked up again and tried at once.
    pub(super) async fn authenticate(&mut self, id: Value) {
        self.refused = None;
        self.connect().await;
        match (&self.refused, &self.conn) {
            (Some(reason), _) => {
                let message = self.sign_in_hint(reason);
                self.answer_error(id, auth_required(message)).await
            }
            (None, Some(_)) => self.answer(id, json!({})).await,
            (None, None) => {
                let message = format!("cannot reach the gateway at {}: {}", self.config.url, self.last_error);
                self.answer_error(id, RpcError::internal(message).with_data(json!({"reason": "unavailable"}))).await
            }
        }
    }

    /// `logout`: the stored key is forgotten and the connection closed; sessions need a new
    /// sign-in.
    pub(super) async fn logout(&mut self, id: Value) {
        match (self.config.forget_key)() {
            Ok(_) => {
                if let Some(mut conn) = self.conn.take() {
                    let _ = conn.ws.close(None).await;
                }
                self.refused = Some("signed out".into());
                self.answer_waiting_refused().await;
                self.answer(id, json!({})).await
            }
            Err(e) => self.answer_error(id, RpcError::internal(e)).await,
        }
    }

    pub(super) fn sign_in_hint(&self, reason: &str) -> String {
        format!(
            "the gateway at {} needs a valid API key ({reason}): run `gateway login --url {}` (or set GATEWAY_API_KEY), \
             then authenticate",
            self.config.url, self.config.url
        )
    }

    /// Requests waiting while the gateway refuses the key are answered so.
    pub(super) async fn answer_waiting_refused(&mut self) {
        let reason = self.refused.clone().unwrap_or_default();
        let waiting: Vec<EditorRequest> = std::mem::take(&mut self.sent)
            .into_values()
            .filter_map(|s| match s {
                Sent::Editor(r) => Some(r),
                Sent::Reopen { .. } | Sent::Mcp { .. } => None,
            })
            .collect();
        for r in waiting {
            if r.method == "initialize" {
                let answer = self.initialize_answer(json!({"protocolVersion": PROTOCOL_VERSION}));
                self.answer(r.id, answer).await;
            } else {
                let message = self.sign_in_hint(&reason);
                self.answer_error(r.id, auth_required(message)).await;
            }
        }
    }

    /// Requests that waited too long for a connection are answered that the gateway cannot
    /// be reached.
    pub(super) async fn expire_waiting(&mut self) {
        if self.conn.is_some() {
            return;
        }
        let expired: Vec<u64> = self
            .sent
            .iter()
            .filter(|(_, s)| matches!(s, Sent::Editor(r) if r.waiting_since.elapsed() >= UNREACHABLE_AFTER))
            .map(|(id, _)| *id)
            .collect();
        for relay_id in expired {
            if let Some(Sent::Editor(r)) = self.sent.remove(&relay_id) {
                let message = format!("cannot reach the gateway at {}: {}", self.config.url, self.last_error);
                self.answer_error(r.id, RpcError::internal(message).with_data(json!({"reason": "unavailable"}))).await;
            }
        }
    }

    /// The gateway's `initialize` answer as the relay's: its sign-in is the relay's (a key
    /// for this gateway, stored by `gateway login --url`), and it can sign out.
    pub(super) fn initialize_answer(&self, mut answer: Value) -> Value {
        let url = &self.config.url;
        let terminal = self.init.as_ref().is_some_and(crate::editor::offers_terminal_auth).then(|| {
            let args = ["login", "--url", url].map(str::to_owned).to_vec();
            (format!("Stores an API key for {url} (gateway login --url)"), args)
        });
        let agent = format!("Use the API key for {url}: GATEWAY_API_KEY, or the one `gateway login --url` stored");
        answer["authMethods"] = crate::editor::auth_method_list(agent, terminal);
        if !answer["agentCapabilities"].is_object() {
            answer["agentCapabilities"] = json!({});
        }
        answer["agentCapabilities"]["auth"] = json!({"logout": {}});
        if !answer["agentInfo"].is_object() {
            answer["agentInfo"] = crate::wire::implementation();
        }
        answer
    }

    pub(super) async fn answer(&mut self, id: Value, result: Value) {
        self.respond(id, Ok(&result)).await;
    }

    pub(super) async fn answer_error(&mut self, id: Value, error: RpcError) {
        self.respond(id, Err(&error)).await;
    }

    async fn respond(&mut self, id: Value, outcome: Result<&Value, &RpcError>) {
        let Ok(id) = serde_json::value::to_raw_value(&id) else { return };
        let _ = self.to_editor.send(envelope::response(&id, outcome)).await;
    }

    pub(super) async fn tell_editor(&mut self, message: Value) {
        // The editor closing stdout ends the relay through stdin; nothing to do here.
        let _ = self.to_editor.send(message.to_string()).await;
    }
}
