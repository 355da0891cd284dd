//! `bench-a2a-echo`: a small A2A v1.0 JSON-RPC agent, the remote of scenario (b). Every
//! message is answered with a Task whose artifact is the message's text, completed at once or
//! after a fixed delay (`--delay-ms`): the cheapest remote a gateway could front, so the
//! ratio "through the gateway / straight to the remote" is the gateway's own cost.
//!
//! It serves what the gateway's outbound `a2a:` backend uses: the agent card at
//! `/.well-known/agent-card.json` (one JSON-RPC v1.0 interface), `SendMessage` (blocking,
//! or `returnImmediately` with GetTask polling), `SendStreamingMessage` (Task, then artifact
//! and status updates over SSE), `GetTask`, `CancelTask` and `SubscribeToTask`. The card says
//! `streaming: true` unless `--no-streaming`, and the gateway then streams, as it would from
//! any streaming remote. Missing `A2A-Version` headers are tolerated (answered as 1.0).

pub mod rpc;
pub mod tasks;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use rpc::{Request, RpcError};
use tasks::{COMPLETED, Task, Tasks};

/// Largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// How long each task works before it completes.
    pub delay: Duration,
    /// Advertise and serve `SendStreamingMessage`.
    pub streaming: bool,
    /// Tasks remembered for GetTask / SubscribeToTask; the oldest are forgotten beyond it.
    pub max_tasks: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

struct Echo {
    opts: Options,
    base: String,
    tasks: Tasks,
}

type Shared = Arc<Echo>;

fn card(echo: &Echo) -> Value {
    json!({
        "name": "bench-echo",
        "description": "Echoes every message back as an artifact (benchmark remote).",
        "supportedInterfaces": [{"url": format!("{}/", echo.base), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "provider": {"organization": "gateway-bench", "url": echo.base},
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"streaming": echo.opts.streaming, "pushNotifications": false, "extendedAgentCard": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "echo", "description": "Answers with the message's text.", "tags": ["echo"]}],
    })
}

fn router(echo: Shared) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/.well-known/agent-card.json", get(serve_card))
        .route("/.well-known/agent.json", get(serve_card))
        .route("/", post(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(echo)
}

async fn serve_card(State(echo): State<Shared>) -> Response {
    axum::Json(card(&echo)).into_response()
}

fn json_response(v: Value) -> Response {
    axum::Json(v).into_response()
}

async fn handle(State(echo): State<Shared>, body: Bytes) -> Response {
    let req = match rpc::parse(&body) {
        Ok(r) => r,
        Err((id, e)) => return json_response(rpc::error(&id, &e)),
    };
    let id = req.id.clone();
    match dispatch(&echo, req).await {
        Ok(r) => r,
        Err(e) => json_response(rpc::error(&id, &e)),
    }
}

fn new_task(echo: &Echo, params: &Value) -> Result<Task, RpcError> {
    let (text, context) = rpc::message_text(params)?;
    let task = Task {
        id: crate::ids::new("task"),
        context: context.unwrap_or_else(|| crate::ids::new("ctx")),
        text,
        ready_at: Instant::now() + echo.opts.delay,
        canceled: false,
    };
    echo.tasks.insert(task.clone());
    Ok(task)
}

async fn dispatch(echo: &Shared, req: Request) -> Result<Response, RpcError> {
    let now = Instant::now;
    match req.method.as_str() {
        "SendMessage" => {
            let task = new_task(echo, &req.params)?;
            let immediate =
                req.params.pointer("/configuration/returnImmediately").and_then(Value::as_bool).unwrap_or(false);
            if !immediate {
                tokio::time::sleep_until(task.ready_at).await;
            }
            let current = echo.tasks.get(&task.id).unwrap_or(task);
            Ok(json_response(rpc::result(&req.id, json!({"task": current.json(now())}))))
        }
        "SendStreamingMessage" if echo.opts.streaming => {
            let task = new_task(echo, &req.params)?;
            Ok(stream(Arc::clone(echo), req.id, task, true))
        }
        "SubscribeToTask" if echo.opts.streaming => {
            let id = rpc::task_id(&req.params)?;
            let task =
                echo.tasks.get(id).ok_or_else(|| RpcError::new(rpc::TASK_NOT_FOUND, format!("task {id} not found")))?;
            Ok(stream(Arc::clone(echo), req.id, task, false))
        }
        "GetTask" => {
            let id = rpc::task_id(&req.params)?;
            let task =
                echo.tasks.get(id).ok_or_else(|| RpcError::new(rpc::TASK_NOT_FOUND, format!("task {id} not found")))?;
            Ok(json_response(rpc::result(&req.id, task.json(now()))))
        }
        "CancelTask" => {
            let id = rpc::task_id(&req.params)?;
            let task = echo
                .tasks
                .cancel(id, now())
                .ok_or_else(|| RpcError::new(rpc::TASK_NOT_FOUND, format!("task {id} not found")))?;
            Ok(json_response(rpc::result(&req.id, task.json(now()))))
        }
        other => Err(RpcError::new(rpc::METHOD_NOT_FOUND, format!("method {other:?} is not served by this agent"))),
    }
}

fn sse_event(id: &Value, result: Value) -> Bytes {
    Bytes::from(format!("data: {}\n\n", rpc::result(id, result)))
}

/// The stream of one task: its snapshot now (for a new message, working), then at
/// `ready_at` the artifact and the final status (unless it was canceled meanwhile).
fn stream(echo: Shared, rpc_id: Value, task: Task, fresh: bool) -> Response {
    // A task that already settled has nothing to add after its snapshot.
    let settled = !fresh && task.state(Instant::now()) != tasks::WORKING;
    let first = if fresh {
        json!({"task": {"id": task.id, "contextId": task.context, "status": task.status(tasks::WORKING)}})
    } else {
        json!({"task": task.json(Instant::now())})
    };
    let frames = futures::stream::unfold(0u8, move |step| {
        let (echo, task, rpc_id, first) = (Arc::clone(&echo), task.clone(), rpc_id.clone(), first.clone());
        async move {
            let frame = match step {
                0 => sse_event(&rpc_id, first),
                1 if settled => return None,
                1 => {
                    tokio::time::sleep_until(task.ready_at).await;
                    let now = echo.tasks.get(&task.id).unwrap_or(task.clone());
                    if now.state(Instant::now()) != COMPLETED {
                        return None;
                    }
                    let update = json!({"taskId": task.id, "contextId": task.context, "artifact": task.artifact(), "lastChunk": true});
                    sse_event(&rpc_id, json!({"artifactUpdate": update}))
                }
                2 => {
                    let update =
                        json!({"taskId": task.id, "contextId": task.context, "status": task.status(COMPLETED)});
                    sse_event(&rpc_id, json!({"statusUpdate": update}))
                }
                _ => return None,
            };
            Some((Ok::<_, Infallible>(frame), step + 1))
        }
    });
    let mut r = Response::new(Body::from_stream(frames));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// Serves until SIGTERM or SIGINT.
pub async fn serve(opts: Options) -> Result<(), EchoError> {
    let listener = tokio::net::TcpListener::bind(opts.listen).await.map_err(|e| EchoError::Bind(opts.listen, e))?;
    let bound = listener.local_addr().map_err(EchoError::Serve)?;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let echo = Arc::new(Echo { base: format!("http://{bound}"), tasks: Tasks::new(opts.max_tasks), opts });
    tracing::info!(listen = %bound, delay_ms = echo.opts.delay.as_millis() as u64, streaming = echo.opts.streaming, "bench-a2a-echo serving");
    let token = crate::signals::on_terminate();
    let server = axum::serve(listener, router(echo)).with_graceful_shutdown(token.clone().cancelled_owned());
    crate::signals::serve_until(token, async { server.await.map_err(EchoError::Serve) }).await
}
