//! The A2A client of scenario (b): one blocking v1.0 JSON-RPC `SendMessage` per request,
//! `Ok` only for a completed Task (or a direct Message answer).

use serde_json::{Value, json};

use super::{OpError, snippet};
use crate::driver::load::Outcome;

#[derive(Clone)]
pub struct A2aClient {
    http: reqwest::Client,
    pub url: String,
}

impl A2aClient {
    pub fn new(http: reqwest::Client, url: impl Into<String>) -> Self {
        Self { http, url: url.into() }
    }

    pub async fn send(&self, n: u64, text: &str) -> Result<(), OpError> {
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
            "messageId": crate::ids::new("msg"), "role": "ROLE_USER", "parts": [{"text": text}]}}});
        let resp = self.http.post(&self.url).header("A2A-Version", "1.0").json(&body).send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            return Err(OpError::answered(format!("http {}", status.as_u16()), snippet(&text)));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| OpError::transport("invalid json", e))?;
        if let Some(e) = v.get("error") {
            let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
            return Err(OpError::answered(format!("jsonrpc {code}"), snippet(&e.to_string())));
        }
        if v.pointer("/result/message").is_some() {
            return Ok(());
        }
        match v.pointer("/result/task/status/state").and_then(Value::as_str) {
            Some("TASK_STATE_COMPLETED") => Ok(()),
            Some(other) => Err(OpError::answered(format!("state {other}"), snippet(&text))),
            None => Err(OpError::answered("no task", snippet(&text))),
        }
    }

    pub async fn outcome(&self, n: u64, text: &str) -> Outcome {
        match self.send(n, text).await {
            Ok(()) => Outcome::Ok,
            Err(e) => e.outcome(),
        }
    }
}
