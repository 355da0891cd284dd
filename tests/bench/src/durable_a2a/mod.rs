//! `bench-a2a-durable`: the minimal durable A2A proxy, the yardstick of scenario (b)'s
//! saturation and overload. For each blocking v1.0 JSON-RPC `SendMessage` it does what a
//! durable gateway in front of an A2A remote must do, and nothing more:
//!
//! 1. one transaction with the task row and the user's message, committed (one fsync)
//!    before the remote is called, so a crash after the call cannot lose the request;
//! 2. the same `SendMessage` to the remote (`--remote`), blocking;
//! 3. one transaction with the remote's answer and the task's final state, committed (one
//!    fsync) before the client is answered, so an answer the client saw is on disk;
//! 4. the answer: a Task with the remote's final status and artifacts, under this proxy's
//!    task id (the shape the gateway returns).
//!
//! Storage is [`crate::durable::store`], as in `bench-durable`: SQLite in WAL mode with
//! `synchronous=FULL`, one writer connection, one transaction per write, nothing grouped.
//! It always runs on SQLite: it is the floor of the work, not a second engine. Anything but
//! a blocking `SendMessage` is refused (the benchmark's client sends nothing else).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::{Value, json};

use crate::durable::store::{Store, StoreError, Write};
use crate::durable::wire::now;
use crate::echo::rpc::{self, RpcError};
use crate::echo::tasks::{COMPLETED, WORKING};

/// Largest request body accepted (the echo's limit).
pub const MAX_BODY: usize = crate::echo::MAX_BODY;
/// The state of a task whose remote failed or answered with an error.
pub const FAILED: &str = "TASK_STATE_FAILED";
/// Connecting to the remote gives up after this; a call once connected has no limit (the
/// client's timeout decides, as it does for the gateway).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("building the remote's HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

pub struct Options {
    pub listen: SocketAddr,
    /// The SQLite file (created; WAL, synchronous=FULL).
    pub database: PathBuf,
    /// The remote's JSON-RPC endpoint, e.g. `http://127.0.0.1:8091/`.
    pub remote: String,
}

struct Proxy {
    store: Store,
    http: reqwest::Client,
    remote: String,
}

type Shared = Arc<Proxy>;

fn router(proxy: Shared) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/", post(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(proxy)
}

async fn handle(State(proxy): State<Shared>, body: Bytes) -> Response {
    let req = match rpc::parse(&body) {
        Ok(r) => r,
        Err((id, e)) => return axum::Json(rpc::error(&id, &e)).into_response(),
    };
    let answer = match req.method.as_str() {
        "SendMessage" => send(&proxy, &req.params, body).await,
        other => Err(RpcError::new(rpc::METHOD_NOT_FOUND, format!("method {other:?} is not served by this baseline"))),
    };
    axum::Json(match answer {
        Ok(result) => rpc::result(&req.id, result),
        Err(e) => rpc::error(&req.id, &e),
    })
    .into_response()
}

fn store_failed(e: StoreError) -> RpcError {
    tracing::warn!(error = %e, "store error");
    RpcError::new(rpc::INTERNAL_ERROR, e.to_string())
}

/// Commit, call, commit, answer: the four steps of the module's doc.
async fn send(proxy: &Proxy, params: &Value, raw: Bytes) -> Result<Value, RpcError> {
    if params.pointer("/configuration/returnImmediately").and_then(Value::as_bool) == Some(true) {
        return Err(RpcError::new(rpc::INVALID_PARAMS, "this baseline serves blocking sends only"));
    }
    let (_, context) = rpc::message_text(params)?;
    let message = params.get("message").map(Value::to_string).unwrap_or_default();
    let id = crate::ids::new("task");
    let context = context.unwrap_or_else(|| crate::ids::new("ctx"));
    let opened = Write::TaskOpened {
        id: id.clone(),
        context_id: context.clone(),
        state: WORKING.into(),
        created_at: now(),
        message,
    };
    proxy.store.write(opened).await.map_err(store_failed)?;
    let answer = proxy.call(raw).await;
    let (state, stored) = match &answer {
        Ok(result) => (final_state(result), result.to_string()),
        Err(e) => (FAILED, json!({"code": e.code, "message": e.message}).to_string()),
    };
    let settled = Write::TaskSettled { id: id.clone(), state: state.into(), updated_at: now(), answer: stored };
    proxy.store.write(settled).await.map_err(store_failed)?;
    Ok(json!({"task": task(&id, &context, state, &answer?)}))
}

impl Proxy {
    /// The client's request, byte for byte, to the remote; its `result`, or its error.
    async fn call(&self, raw: Bytes) -> Result<Value, RpcError> {
        let failed = |what: &str, e: reqwest::Error| {
            RpcError::new(rpc::INTERNAL_ERROR, format!("remote {}: {what}: {}", self.remote, e.without_url()))
        };
        let resp = self
            .http
            .post(&self.remote)
            .header("A2A-Version", "1.0")
            .header(header::CONTENT_TYPE, "application/json")
            .body(raw)
            .send()
            .await
            .map_err(|e| failed("unreachable", e))?;
        let v: Value = resp.json().await.map_err(|e| failed("unreadable answer", e))?;
        remote_result(v)
    }
}

/// The `result` of a remote's JSON-RPC answer, or its error as this proxy's.
fn remote_result(v: Value) -> Result<Value, RpcError> {
    use gateway_wire::jsonrpc::envelope::{Answer, read_response};
    match read_response(&v) {
        Ok(result) => Ok(result),
        Err(Answer::Error(e)) => Err(RpcError::new(e.code, format!("remote: {}", e.message))),
        Err(Answer::NotAResponse) => Err(RpcError::new(rpc::INTERNAL_ERROR, "the remote's answer has no result")),
    }
}

/// The task's final state from the remote's `result`: its Task's state, completed for a
/// direct Message answer, failed for anything else.
fn final_state(result: &Value) -> &'static str {
    if result.get("message").is_some() {
        return COMPLETED;
    }
    match result.pointer("/task/status/state").and_then(Value::as_str) {
        Some(COMPLETED) => COMPLETED,
        Some(WORKING) => WORKING,
        Some(crate::echo::tasks::CANCELED) => crate::echo::tasks::CANCELED,
        _ => FAILED,
    }
}

/// The Task the client gets: this proxy's ids, the remote's artifacts, and a direct Message
/// answer as the status message.
fn task(id: &str, context: &str, state: &str, result: &Value) -> Value {
    let mut status = json!({"state": state, "timestamp": now()});
    if let Some(m) = result.get("message") {
        status["message"] = m.clone();
    }
    let mut t = json!({"id": id, "contextId": context, "status": status});
    if let Some(a) = result.pointer("/task/artifacts") {
        t["artifacts"] = a.clone();
    }
    t
}

/// Serves until SIGTERM or SIGINT, then waits for requests in flight (at most
/// [`crate::signals::GRACE`]).
pub async fn serve(opts: Options) -> Result<(), ProxyError> {
    let store = Store::open(&opts.database).await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4096)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(ProxyError::Client)?;
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.map_err(|e| ProxyError::Bind(opts.listen, e))?.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    tracing::info!(listen = %opts.listen, database = %opts.database.display(), remote = opts.remote, "bench-a2a-durable serving");
    let proxy = Arc::new(Proxy { store, http, remote: opts.remote });
    let token = crate::signals::on_terminate();
    let server = axum::serve(listener, router(proxy)).with_graceful_shutdown(token.clone().cancelled_owned());
    crate::signals::serve_until(token, async { server.await.map_err(ProxyError::Serve) }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_answers_become_the_clients_task() {
        let echoed = json!({"task": {"id": "task_r", "contextId": "c", "status": {"state": COMPLETED},
            "artifacts": [{"artifactId": "echo", "parts": [{"text": "hi"}]}]}});
        let cases = [
            (echoed.clone(), COMPLETED),
            (json!({"message": {"role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}), COMPLETED),
            (json!({"task": {"id": "task_r", "status": {"state": WORKING}}}), WORKING),
            (json!({"task": {"id": "task_r", "status": {"state": "TASK_STATE_REJECTED"}}}), FAILED),
            (json!({}), FAILED),
        ];
        for (result, state) in cases {
            assert_eq!(final_state(&result), state, "{result}");
        }
        let t = task("task_p", "ctx_p", COMPLETED, &echoed);
        assert_eq!((t["id"].as_str(), t["contextId"].as_str()), (Some("task_p"), Some("ctx_p")));
        assert_eq!(t["status"]["state"], COMPLETED);
        assert_eq!(t["artifacts"][0]["parts"][0]["text"], "hi");
    }

    #[test]
    fn remote_errors_keep_their_code() {
        let e = remote_result(json!({"error": {"code": -32001, "message": "gone"}})).err().unwrap();
        assert_eq!((e.code, e.message.as_str()), (-32001, "remote: gone"));
        assert_eq!(remote_result(json!({"result": {"task": {}}})).unwrap(), json!({"task": {}}));
        assert_eq!(remote_result(json!([])).err().unwrap().code, rpc::INTERNAL_ERROR);
    }
}
