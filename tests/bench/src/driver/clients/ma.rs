//! The Managed Agents client of scenarios (a), (e) and (f): setup (agent, environment), then
//! the round trip: create a session, open its event stream, send a `user.message`, read the
//! stream to `session.status_idle`. Streams opened with [`MaClient::open_previews`] also carry
//! the previews of `agent.message` (`event_start`, `event_delta`), which [`Frame`] tells apart.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::{OpError, snippet};
use crate::driver::load::Outcome;
use crate::sse::Frames;

/// Longest a stream may stay silent while a turn is expected.
const STREAM_IDLE: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct MaClient {
    http: reqwest::Client,
    pub base: String,
    agent: String,
    environment: String,
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> Result<Value, OpError> {
    let resp = http.post(url).json(body).send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        return Err(OpError::answered(format!("http {}", status.as_u16()), snippet(&text)));
    }
    serde_json::from_str(&text).map_err(|e| OpError::answered("invalid json", e.to_string()))
}

fn id_of(v: &Value) -> Result<String, OpError> {
    v.get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| OpError::answered("no id", snippet(&v.to_string())))
}

/// The agent every round trip uses: the fake model, no tools.
pub fn echo_agent() -> Value {
    json!({"name": "bench", "model": "claude-sonnet-4-6"})
}

/// An agent whose turns park on a custom tool (`custom:wait {}` makes the fake model call it).
pub fn parking_agent() -> Value {
    json!({"name": "bench-park", "model": "claude-sonnet-4-6", "tools": [{"type": "custom", "name": "wait",
        "description": "Parks the turn until the client answers.", "input_schema": {"type": "object"}}]})
}

/// What one stream frame is, for a reader that times previews against committed events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `event_start`: the preview of event `event_id` begins.
    Start { event_id: String },
    /// `event_delta`: text added to the preview of event `event_id`.
    Delta { event_id: String, text: String },
    /// A committed event (`agent.message`, `session.status_idle`, …), or anything else
    /// with a `type` (an `error` frame).
    Event { kind: String, id: String },
}

impl Frame {
    /// Classifies a frame's JSON data. Tolerant: missing fields read as empty strings, so an
    /// odd frame is kept (and shows up as a mismatch) rather than ending the stream.
    pub fn of(v: &Value) -> Frame {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "event_start" => Frame::Start { event_id: s("/event/id") },
            "event_delta" => Frame::Delta { event_id: s("/event_id"), text: s("/delta/content/text") },
            kind => Frame::Event { kind: kind.to_owned(), id: s("/id") },
        }
    }
}

/// The query asking a stream for `agent.message` previews.
const PREVIEWS: &str = "?event_deltas[]=agent.message";

/// An open event stream.
pub struct EventStream {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    frames: Frames,
}

impl EventStream {
    /// The next frame's JSON data.
    pub async fn next(&mut self) -> Result<Value, OpError> {
        loop {
            if let Some(data) = self.frames.next_data() {
                return serde_json::from_str(&data).map_err(|e| OpError::transport("bad frame", e));
            }
            match tokio::time::timeout(STREAM_IDLE, self.body.next()).await {
                Err(_) => return Err(OpError::transport("stream silent", format!("{} s", STREAM_IDLE.as_secs()))),
                Ok(None) => return Err(OpError::transport("stream ended", "before the turn ended")),
                Ok(Some(Err(e))) => return Err(e.into()),
                Ok(Some(Ok(chunk))) => self.frames.push(&chunk).map_err(|e| OpError::transport("bad frame", e))?,
            }
        }
    }

    /// The next frame, classified.
    pub async fn next_frame(&mut self) -> Result<Frame, OpError> {
        Ok(Frame::of(&self.next().await?))
    }

    /// Reads to the next `session.status_idle` (or error / terminated) and returns it, with
    /// whether an `agent.message` came before it.
    pub async fn until_idle(&mut self) -> Result<(Value, bool), OpError> {
        let mut said = false;
        loop {
            let v = self.next().await?;
            match v.get("type").and_then(Value::as_str).unwrap_or_default() {
                "agent.message" => said = true,
                "session.status_idle" => return Ok((v, said)),
                t @ ("session.error" | "session.status_terminated" | "error") => {
                    return Err(OpError::answered(t.to_owned(), snippet(&v.to_string())));
                }
                _ => {}
            }
        }
    }
}

impl MaClient {
    /// Creates the agent and a cloud environment the sessions use.
    pub async fn setup(http: reqwest::Client, base: &str, agent: &Value) -> Result<Self, OpError> {
        let a = post(&http, &format!("{base}/v1/agents"), agent).await?;
        let env = json!({"name": "bench", "config": {"type": "cloud", "networking": {"type": "unrestricted"}}});
        let e = post(&http, &format!("{base}/v1/environments"), &env).await?;
        Ok(Self { http, base: base.to_owned(), agent: id_of(&a)?, environment: id_of(&e)? })
    }

    /// The same agent and environment through another gateway process on the same database.
    pub fn on(&self, base: &str) -> MaClient {
        MaClient { base: base.to_owned(), ..self.clone() }
    }

    pub async fn create_session(&self) -> Result<String, OpError> {
        let body = json!({"agent": self.agent, "environment_id": self.environment});
        id_of(&post(&self.http, &format!("{}/v1/sessions", self.base), &body).await?)
    }

    /// Opens the live stream; returns once the response headers arrived (the server has
    /// subscribed by then).
    pub async fn open_stream(&self, session: &str) -> Result<EventStream, OpError> {
        self.open(session, "").await
    }

    /// Opens the live stream with the previews of `agent.message`; returns once the response
    /// headers arrived.
    pub async fn open_previews(&self, session: &str) -> Result<EventStream, OpError> {
        self.open(session, PREVIEWS).await
    }

    async fn open(&self, session: &str, query: &str) -> Result<EventStream, OpError> {
        let url = format!("{}/v1/sessions/{session}/events/stream{query}", self.base);
        let resp = self.http.get(url).header("accept", "text/event-stream").send().await?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            return Err(OpError::answered(format!("http {status}"), snippet(&resp.text().await.unwrap_or_default())));
        }
        Ok(EventStream { body: resp.bytes_stream().boxed(), frames: Frames::default() })
    }

    pub async fn send(&self, session: &str, text: &str) -> Result<(), OpError> {
        let body = json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]});
        post(&self.http, &format!("{}/v1/sessions/{session}/events", self.base), &body).await.map(|_| ())
    }

    /// One round trip; `Ok` only for an `end_turn` idle after an `agent.message`.
    pub async fn round_trip(&self, text: &str) -> Result<(), OpError> {
        let session = self.create_session().await?;
        let mut stream = self.open_stream(&session).await?;
        self.send(&session, text).await?;
        let (idle, said) = stream.until_idle().await?;
        let stop = idle.pointer("/stop_reason/type").and_then(Value::as_str).unwrap_or_default();
        if stop != "end_turn" || !said {
            return Err(OpError::answered(format!("idle {stop}"), snippet(&idle.to_string())));
        }
        Ok(())
    }

    /// A turn that parks: `Ok` for a `requires_action` idle.
    pub async fn park(&self) -> Result<(), OpError> {
        let session = self.create_session().await?;
        let mut stream = self.open_stream(&session).await?;
        self.send(&session, "custom:wait {}").await?;
        let (idle, _) = stream.until_idle().await?;
        match idle.pointer("/stop_reason/type").and_then(Value::as_str) {
            Some("requires_action") => Ok(()),
            other => Err(OpError::answered(format!("idle {}", other.unwrap_or("?")), snippet(&idle.to_string()))),
        }
    }

    pub async fn outcome(&self, text: &str) -> Outcome {
        match self.round_trip(text).await {
            Ok(()) => Outcome::Ok,
            Err(e) => e.outcome(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_told_apart() {
        let rows = [
            (
                json!({"type": "event_start", "event": {"type": "agent.message", "id": "sevt_1"}}),
                Frame::Start { event_id: "sevt_1".into() },
            ),
            (
                json!({"type": "event_delta", "event_id": "sevt_1",
                    "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": " two"}}}),
                Frame::Delta { event_id: "sevt_1".into(), text: " two".into() },
            ),
            (
                json!({"type": "agent.message", "id": "sevt_1", "content": [{"type": "text", "text": "one two"}]}),
                Frame::Event { kind: "agent.message".into(), id: "sevt_1".into() },
            ),
            (json!({"type": "error", "error": {}}), Frame::Event { kind: "error".into(), id: String::new() }),
            (json!({"type": "event_delta"}), Frame::Delta { event_id: String::new(), text: String::new() }),
        ];
        for (data, want) in rows {
            assert_eq!(Frame::of(&data), want, "{data}");
        }
    }
}
