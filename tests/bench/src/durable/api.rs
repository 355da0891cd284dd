//! The baseline's handlers. A round trip is: create the session (commit 1), open the stream,
//! send the `user.message` (commit 2, answered only after it), then the echo turn's three
//! events in one transaction (commit 3), streamed after that commit.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

use super::hub::Hub;
use super::store::{Store, Write};
use super::wire::{self, ApiError, Event};

/// Interval of `: keep-alive` comments on idle streams (the gateway's default too).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone)]
pub struct App {
    pub store: Store,
    pub hub: Hub,
    /// Turns in flight, joined on shutdown so none is cut between commit and publish.
    pub turns: TaskTracker,
}

async fn catalog(app: &App, prefix: &str, kind: &str, raw: &[u8]) -> Result<Json<Value>, ApiError> {
    let v = wire::body(raw)?;
    let name = wire::text_field(&v, "name")?;
    let id = crate::ids::new(prefix);
    let out = json!({"id": id, "type": kind, "name": name, "created_at": wire::now(), "version": 1});
    app.store.write(Write::Catalog { id: id.clone(), body: out.to_string() }).await?;
    Ok(Json(out))
}

pub async fn create_agent(State(app): State<App>, raw: Bytes) -> Result<Json<Value>, ApiError> {
    catalog(&app, "agent", "agent", &raw).await
}

pub async fn create_environment(State(app): State<App>, raw: Bytes) -> Result<Json<Value>, ApiError> {
    catalog(&app, "env", "environment", &raw).await
}

pub async fn create_session(State(app): State<App>, raw: Bytes) -> Result<Json<Value>, ApiError> {
    let v = wire::body(&raw)?;
    let agent_id = wire::agent_ref(&v)?.to_owned();
    let environment_id = wire::text_field(&v, "environment_id")?.to_owned();
    if !app.store.catalog_exists(&agent_id).await? {
        return Err(ApiError::not_found(format!("agent {agent_id:?} not found")));
    }
    if !app.store.catalog_exists(&environment_id).await? {
        return Err(ApiError::not_found(format!("environment {environment_id:?} not found")));
    }
    let id = crate::ids::new("sesn");
    let created_at = wire::now();
    let out = json!({"id": id, "type": "session", "status": "idle", "agent": {"id": agent_id},
        "environment_id": environment_id, "created_at": created_at});
    app.store.write(Write::Session { id, agent_id, environment_id, created_at }).await?;
    Ok(Json(out))
}

async fn existing(app: &App, id: &str) -> Result<(), ApiError> {
    if app.store.session_exists(id).await? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("session {id:?} not found")))
    }
}

/// Live stream of the session's events committed after it opened. The subscription is
/// taken before the response headers leave, so a client that waits for them misses nothing.
pub async fn stream(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    existing(&app, &id).await?;
    let sub = app.hub.subscribe(&id);
    let body = futures::stream::unfold(sub, |mut sub| async move {
        tokio::select! {
            f = sub.next() => f.map(|f| (Ok::<_, Infallible>(f), sub)),
            _ = tokio::time::sleep(KEEP_ALIVE) => Some((Ok(Bytes::from_static(b": keep-alive\n\n")), sub)),
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// Commits the user messages, answers, then runs the echo turn in the background.
pub async fn send(State(app): State<App>, Path(id): Path<String>, raw: Bytes) -> Result<Json<Value>, ApiError> {
    let v = wire::body(&raw)?;
    let messages = wire::user_messages(&v)?;
    existing(&app, &id).await?;
    let now = wire::now();
    let events: Vec<Event> =
        messages.contents.into_iter().map(|c| Event::new("user.message", json!({"content": c}), &now)).collect();
    app.store.write(Write::Events { session_id: id.clone(), events: events.iter().map(Event::row).collect() }).await?;
    app.hub.publish(&id, events.iter().map(Event::frame).collect());
    let turn = app.clone();
    let text = messages.last_text;
    app.turns.spawn(async move { run_turn(turn, id, text).await });
    Ok(Json(json!({"data": events.into_iter().map(|e| e.json).collect::<Vec<_>>()})))
}

/// The echo turn: three events, one transaction, published after the commit.
async fn run_turn(app: App, session: String, text: String) {
    let events = wire::turn(&text, &wire::now());
    let rows = events.iter().map(Event::row).collect();
    match app.store.write(Write::Events { session_id: session.clone(), events: rows }).await {
        Ok(()) => app.hub.publish(&session, events.iter().map(Event::frame).collect()),
        Err(e) => tracing::warn!(error = %e, session, "turn commit failed"),
    }
}
