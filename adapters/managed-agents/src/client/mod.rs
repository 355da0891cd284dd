//! A small client of a gateway's own Managed Agents API: what the `gateway sessions` commands
//! read from a running gateway (`--url`). It speaks the wire and hands back core types
//! ([`SessionSummary`], [`RemoteEvent`] with an [`EventPayload`]), so no protocol word leaves
//! this crate and the commands render remote and stored sessions alike.
//!
//! Bounded: a response body, and one event of a stream, are read up to [`MAX_BODY`] bytes.
//! The API key goes in the `x-api-key` header and nowhere else (never in a URL, never in an
//! error message).
//!
//! [`EventPayload`]: gateway_core::event::EventPayload

mod decode;

use std::time::Duration;

use futures::{Stream, StreamExt};
use gateway_core::session::{SessionStatus, SessionSummary};
use gateway_core::{EventId, SessionId};
use gateway_wire::sse;
use serde_json::Value;

pub use decode::RemoteEvent;

/// The largest response body, or stream event, this client reads.
pub const MAX_BODY: usize = 16 * 1024 * 1024;
/// The most pages of 100 agents [`Client::agent_ids_named`] reads.
pub const MAX_AGENT_PAGES: usize = 100;
/// How long a plain request may take (streams have no overall deadline).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The gateway could not be reached, or the connection broke.
    #[error("cannot reach the gateway: {0}")]
    Transport(String),
    /// The gateway answered with an error.
    #[error("the gateway answered {status}: {message}")]
    Refused { status: u16, message: String },
    /// The gateway's answer was not what the API promises.
    #[error("unexpected answer from the gateway: {0}")]
    Invalid(String),
}

impl ClientError {
    /// Whether trying again later may succeed (a stream reconnects on these).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Refused { status, .. } => *status >= 500 || *status == 429,
            ClientError::Invalid(_) => false,
        }
    }
}

fn transport(e: reqwest::Error) -> ClientError {
    // reqwest's message names the URL, which holds no secret (the key is a header).
    ClientError::Transport(e.to_string())
}

/// A gateway's API at `base` (e.g. `http://127.0.0.1:8080`), with an API key or none.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base).field("key", &self.key.as_ref().map(|_| "***")).finish()
    }
}

impl Client {
    pub fn new(base: &str, key: Option<String>) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), key: key.filter(|k| !k.is_empty()) })
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.keyed(self.http.get(format!("{}{path}", self.base)))
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.keyed(self.http.post(format!("{}{path}", self.base)))
    }

    fn keyed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(k) => req.header("x-api-key", k),
            None => req,
        }
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let resp = req.timeout(REQUEST_TIMEOUT).send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let body = read_bounded(resp).await?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let message = v
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
            return Err(ClientError::Refused { status, message });
        }
        Ok(v)
    }

    /// The most recent sessions (up to `limit`, at most 100), newest first.
    pub async fn list_sessions(
        &self,
        statuses: &[SessionStatus],
        agent_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SessionSummary>, ClientError> {
        let mut query = vec![("limit", limit.clamp(1, 100).to_string())];
        query.extend(statuses.iter().map(|s| ("statuses[]", s.as_str().to_owned())));
        if let Some(a) = agent_id {
            query.push(("agent_id", a.to_owned()));
        }
        let v = self.json(self.get(&format!("/v1/sessions?{}", encode(&query)))).await?;
        data(&v)?.iter().map(|s| decode::session(s).ok_or_else(|| invalid("a session", s))).collect()
    }

    /// The ids of the agents named `name` (archived ones too), reading every page of the
    /// agent list (at most [`MAX_AGENT_PAGES`]).
    pub async fn agent_ids_named(&self, name: &str) -> Result<Vec<String>, ClientError> {
        let mut ids = Vec::new();
        let mut page: Option<String> = None;
        for _ in 0..MAX_AGENT_PAGES {
            let mut query = vec![("limit", "100".to_owned()), ("include_archived", "true".to_owned())];
            query.extend(page.take().map(|p| ("page", p)));
            let v = self.json(self.get(&format!("/v1/agents?{}", encode(&query)))).await?;
            for a in data(&v)? {
                if a.get("name").and_then(Value::as_str) == Some(name)
                    && let Some(id) = a.get("id").and_then(Value::as_str)
                {
                    ids.push(id.to_owned());
                }
            }
            match v.get("next_page").and_then(Value::as_str) {
                Some(next) => page = Some(next.to_owned()),
                None => break,
            }
        }
        Ok(ids)
    }

    pub async fn session(&self, id: &SessionId) -> Result<SessionSummary, ClientError> {
        let v = self.json(self.get(&format!("/v1/sessions/{id}"))).await?;
        decode::session(&v).ok_or_else(|| invalid("a session", &v))
    }

    /// Releases the environment of a session whose host is gone (the gateway's extension
    /// `POST /v1/sessions/{id}/environment/release`); the session as it is then.
    pub async fn release_environment(&self, id: &SessionId) -> Result<SessionSummary, ClientError> {
        let v = self.json(self.post(&format!("/v1/sessions/{id}/environment/release"))).await?;
        decode::session(&v).ok_or_else(|| invalid("a session", &v))
    }

    /// The session's last `limit` (at most 1000) shown events, oldest first.
    pub async fn recent_events(&self, id: &SessionId, limit: u32) -> Result<Vec<RemoteEvent>, ClientError> {
        let query = [("order", "desc".to_owned()), ("limit", limit.clamp(1, 1000).to_string())];
        let v = self.json(self.get(&format!("/v1/sessions/{id}/events?{}", encode(&query)))).await?;
        let mut events: Vec<RemoteEvent> = data(&v)?.iter().filter_map(decode::event).collect();
        events.reverse();
        Ok(events)
    }

    /// The session's events as they are committed: those after `after` first (the API replays
    /// them, so a reconnecting reader loses none and sees none twice), else from now on.
    pub async fn stream(
        &self,
        id: &SessionId,
        after: Option<&EventId>,
    ) -> Result<impl Stream<Item = Result<RemoteEvent, ClientError>> + Send + use<>, ClientError> {
        let mut req = self.get(&format!("/v1/sessions/{id}/events/stream")).header("accept", "text/event-stream");
        if let Some(after) = after {
            req = req.header("last-event-id", after.as_str());
        }
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = read_bounded(resp).await.unwrap_or_default();
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let message = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("no details").to_owned();
            return Err(ClientError::Refused { status, message });
        }
        let events = sse::decode(resp.bytes_stream(), MAX_BODY).filter_map(|item| async move {
            let frame = match item {
                Ok(frame) => frame,
                Err(sse::Error::Transport(e)) => return Some(Err(transport(e))),
                Err(sse::Error::TooLarge(too)) => {
                    return Some(Err(ClientError::Invalid(format!("a stream event exceeds {} bytes", too.limit))));
                }
            };
            let v = serde_json::from_str::<Value>(&frame.data).ok()?;
            if frame.event == "error" {
                let message = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("error");
                return Some(Err(ClientError::Refused { status: 500, message: message.to_owned() }));
            }
            decode::event(&v).map(Ok)
        });
        Ok(events)
    }
}

fn encode(pairs: &[(&str, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        query.append_pair(k, v);
    }
    query.finish()
}

fn invalid(what: &str, v: &Value) -> ClientError {
    let mut shown = v.to_string();
    shown.truncate(200);
    ClientError::Invalid(format!("expected {what}, got {shown}"))
}

fn data(v: &Value) -> Result<&Vec<Value>, ClientError> {
    v.get("data").and_then(Value::as_array).ok_or_else(|| invalid("a list", v))
}

/// The body, refused as soon as it passes [`MAX_BODY`].
async fn read_bounded(resp: reqwest::Response) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(transport)?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(ClientError::Invalid(format!("a response exceeds {MAX_BODY} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
