//! `GET /v1/sessions/{id}/events/stream`: Server-Sent Events.
//!
//! Every frame is `event: <type>` plus exactly one `data:` line of compact JSON identical to
//! the list item; committed events also carry `id: <event id>`, so a client can reconnect with
//! `Last-Event-ID` and receive exactly the events it missed (an extension of the official
//! API; docs/adr/0007). Without it the stream is live: events committed after it opened.
//! Previews (`event_start` / `event_delta`) go only to streams that asked with
//! `event_deltas[]` and are never replayed.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::{Stream, StreamExt};
use gateway_core::event::EventKind;
use gateway_core::{EventId, SessionId};
use gateway_runtime::{Delivery, Preview, RuntimeError, SubscribeOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{PathId, QueryParams};
use crate::request_id::RequestId;
use crate::wire::event::project;

const DELTA_TYPES: [&str; 2] = ["agent.message", "agent.thinking"];

/// One SSE frame: `data` as compact JSON, always one `data:` line (`gateway_wire::sse`).
fn frame(event: &str, id: Option<&str>, data: &Value) -> Bytes {
    gateway_wire::sse::json_frame(id, Some(event), data)
}

fn preview_frame(p: &Preview, wanted: &[&str]) -> Option<Bytes> {
    match p {
        Preview::Start { event_id, kind } => {
            let t = match kind {
                EventKind::AgentMessage => "agent.message",
                EventKind::AgentThinking => "agent.thinking",
                _ => return None,
            };
            wanted.contains(&t).then(|| {
                frame("event_start", None, &json!({"type": "event_start", "event": {"type": t, "id": event_id}}))
            })
        }
        Preview::TextDelta { event_id, index, text } => wanted.contains(&"agent.message").then(|| {
            frame(
                "event_delta",
                None,
                &json!({
                    "type": "event_delta",
                    "event_id": event_id,
                    "delta": {"type": "content_delta", "index": index, "content": {"type": "text", "text": text}},
                }),
            )
        }),
        // The SDK's `agent.thinking` preview is start-only: no deltas follow it.
        Preview::ThoughtDelta { .. } => None,
    }
}

#[cfg(test)]
mod thinking {
    use gateway_core::EventId;
    use gateway_core::event::EventKind;
    use gateway_runtime::Preview;

    /// The SDK's thinking preview: an `event_start` of `agent.thinking`, never a delta (the
    /// reasoning's text would otherwise show as the message's).
    #[test]
    fn reasoning_previews_are_a_start_and_no_delta() {
        let wanted = ["agent.message", "agent.thinking"];
        let id = EventId::new();
        let start =
            super::preview_frame(&Preview::Start { event_id: id.clone(), kind: EventKind::AgentThinking }, &wanted)
                .expect("a start frame");
        let text = String::from_utf8(start.to_vec()).unwrap_or_default();
        assert!(text.contains("\"type\":\"agent.thinking\"") && text.contains("event_start"), "{text}");
        let delta = Preview::ThoughtDelta { event_id: id, text: "secret".into() };
        assert!(super::preview_frame(&delta, &wanted).is_none());
    }
}

#[cfg(test)]
mod props;

type Deliveries = Pin<Box<dyn Stream<Item = Result<Delivery, RuntimeError>> + Send>>;

struct Sse {
    deliveries: Deliveries,
    wanted: Vec<&'static str>,
    keep_alive: Duration,
    shutdown: CancellationToken,
    request_id: String,
    done: bool,
}

pub async fn stream(
    State(api): State<Arc<ManagedAgents>>,
    PathId(session_id): PathId<SessionId>,
    headers: HeaderMap,
    q: QueryParams,
    request_id: Option<axum::Extension<RequestId>>,
) -> Result<Response, ApiError> {
    let asked = q.all("event_deltas");
    if asked.len() > 100 {
        return Err(ApiError::invalid("at most 100 event_deltas[] values are allowed"));
    }
    let mut wanted: Vec<&'static str> = Vec::new();
    for t in asked {
        match DELTA_TYPES.iter().find(|d| **d == t) {
            Some(d) => wanted.push(d),
            None => {
                return Err(ApiError::invalid(format!(
                    "event_deltas[] value {t:?} must be agent.message or agent.thinking"
                )));
            }
        }
    }
    let session = api.coordinator.get_session(&session_id).await?;
    let resume_from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| q.get("after_id").map(str::to_owned))
        .filter(|s| !s.is_empty());
    let after_seq = match resume_from {
        None => session.last_seq,
        Some(raw_id) => {
            let unknown = || ApiError::invalid(format!("{raw_id:?} is not an event of session {session_id}"));
            let event_id = EventId::parse(&raw_id).map_err(|_| unknown())?;
            api.coordinator.find_event(&session_id, &event_id).await?.ok_or_else(unknown)?.seq
        }
    };
    let deliveries =
        api.coordinator.subscribe(&session, SubscribeOptions { after_seq, previews: !wanted.is_empty(), poll: None });
    let state = Sse {
        deliveries: Box::pin(deliveries),
        wanted,
        keep_alive: api.keep_alive,
        shutdown: api.shutdown.clone(),
        request_id: request_id.map(|r| r.0.0).unwrap_or_default(),
        done: false,
    };
    let body = futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            let next = tokio::select! {
                d = st.deliveries.next() => d,
                _ = tokio::time::sleep(st.keep_alive) => {
                    return Some((Ok::<_, Infallible>(Bytes::from_static(gateway_wire::sse::KEEP_ALIVE)), st));
                }
                _ = st.shutdown.cancelled() => return None,
            };
            match next {
                None => return None,
                Some(Ok(Delivery::Event(e))) => {
                    let Some(v) = project(&e) else { continue };
                    if e.kind() == EventKind::SessionDeleted {
                        st.done = true;
                    }
                    let t = v.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
                    return Some((Ok(frame(&t, Some(e.id.as_str()), &v)), st));
                }
                Some(Ok(Delivery::Preview(p))) => {
                    if let Some(b) = preview_frame(&p, &st.wanted) {
                        return Some((Ok(b), st));
                    }
                }
                Some(Err(e)) => {
                    st.done = true;
                    let err: ApiError = e.into();
                    return Some((Ok(frame("error", None, &err.body(&st.request_id))), st));
                }
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(gateway_wire::sse::MEDIA_TYPE));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
