//! A loopback stub of the Anthropic Messages API and the OpenAI Chat Completions API, for
//! tests only (feature `stub`).
//!
//! [`StubServer`] speaks both real wire formats (JSON, and server-sent events in each API's
//! frame order) and answers with [`FakeModel`]'s script, so the same conversations give the
//! same answers through [`AnthropicClient`](crate::anthropic::AnthropicClient) and
//! [`OpenAiClient`](crate::openai::OpenAiClient) as from the fake directly. To make the fake
//! call a tool, the last user text starts with `tool:<name> <json input>` (see
//! [`fake`](crate::fake) for the whole script). It records every request and can be told to
//! misbehave: each [`Fault`] pushed is consumed by the next request, in order. It is also
//! meant to stand in for the API behind third-party programs (e.g. `claude-agent-acp`, the
//! official `openai` SDK), so it accepts any tool names and the request shapes real clients
//! send. It is test support, not shipped behaviour: no TLS, no auth check.
//!
//! Beyond the script it checks and counts what the Messages API does for extended thinking and
//! prompt caching (`rules`), and what Chat Completions checks about tool calls and counts
//! for its automatic prompt cache (`chat`).
//!
//! Routes: `POST /v1/messages` (any query string, e.g. `?beta=true`),
//! `POST /v1/messages/count_tokens`, and `POST /v1/chat/completions` (a client's base URL is
//! then `<base_url>/v1`, as OpenAI's SDKs take it); anything else is recorded and answered 404.
//! Every [`Fault`] applies to every answering route; each route writes errors in its own API's
//! shape.

mod chat;
mod rules;
mod wire;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Request};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::fake::FakeModel;

/// Requests real clients send can be large (long conversations, big tool results).
const MAX_REQUEST_BYTES: usize = 64 << 20;
/// How long a cut stream lingers before the connection drops, so the frames before the cut
/// reach the client first.
const CUT_FLUSH_DELAY: Duration = Duration::from_millis(50);

/// A deviation from the scripted answer, consumed by the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and the API's error body (`error_type` as its type), plus
    /// the retry headers given.
    Status { status: u16, error_type: String, retry_after_secs: Option<u64>, retry_after_ms: Option<u64> },
    /// Stream this many frames of the scripted answer (see [`StubServer`] for their order),
    /// then drop the connection without the end (`message_stop`, `data: [DONE]`). A
    /// non-streaming answer is cut halfway.
    CutAfterEvents(usize),
    /// Stream this many frames, then an error event of this type (Chat Completions: a chunk
    /// holding `error`), then end the response. A non-streaming request gets the error's usual
    /// HTTP status instead.
    ErrorEvent { error_type: String, after_events: usize },
    /// Wait this long, then answer normally.
    Delay(Duration),
    /// Answer with exactly this, whatever was asked (e.g. a hand-written event stream).
    Raw { status: u16, headers: Vec<(String, String)>, body: String },
}

impl Fault {
    /// A [`Fault::Status`] without retry headers.
    pub fn status(status: u16, error_type: &str) -> Self {
        Fault::Status { status, error_type: error_type.to_owned(), retry_after_secs: None, retry_after_ms: None }
    }
}

/// A request the stub received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Header names in lowercase; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body (`Null` when it was not JSON).
    pub body: Value,
    pub received_at: Instant,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

#[derive(Default)]
struct Shared {
    model: FakeModel,
    requests: Mutex<Vec<RecordedRequest>>,
    faults: Mutex<VecDeque<Fault>>,
    next_id: AtomicU64,
    /// The prompt cache per credential (the API's is per organization).
    caches: Mutex<BTreeMap<String, rules::PromptCache>>,
    /// Chat Completions' automatic prompt cache, per credential.
    chat_caches: Mutex<BTreeMap<String, chat::PrefixCache>>,
}

impl Shared {
    fn record(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: Value) {
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            names.entry(name.as_str().to_owned()).and_modify(|v| *v = format!("{v}, {value}")).or_insert(value.into());
        }
        let request = RecordedRequest {
            method: method.to_string(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            headers: names,
            body,
            received_at: Instant::now(),
        };
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    }

    fn next_fault(&self) -> Option<Fault> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner).pop_front()
    }
}

/// The running stub. Streamed Messages answers are the frames `message_start`, `ping`, then for
/// each content block `content_block_start`, two or more deltas (none for `redacted_thinking`)
/// and `content_block_stop`, then `message_delta` and `message_stop`, so
/// [`Fault::CutAfterEvents(4)`](Fault::CutAfterEvents) cuts right after the first delta.
/// Streamed Chat Completions answers are a chunk opening the message, two or more text chunks,
/// per tool call a chunk naming it and two or more argument chunks, a chunk with the
/// `finish_reason`, a usage chunk (if asked for) and `data: [DONE]`, so `CutAfterEvents(2)` cuts
/// right after the first text delta. Dropping the stub stops it.
pub struct StubServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl StubServer {
    /// Starts a stub on a free loopback port.
    ///
    /// # Panics
    /// If no loopback port can be bound: a test cannot run without one.
    pub async fn start() -> Self {
        Self::try_start().await.expect("bind the model API stub to a loopback port")
    }

    /// Starts a stub on a free loopback port.
    pub async fn try_start() -> io::Result<Self> {
        Self::try_start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts a stub on `addr` (e.g. a fixed port for a program configured in advance).
    pub async fn try_start_on(addr: SocketAddr) -> io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/chat/completions", post(chat_completions))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(&shared));
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::warn!(%error, "the model API stub stopped");
            }
        });
        Ok(Self { addr, shared, shutdown: Some(shutdown), task: Some(task) })
    }

    /// `http://127.0.0.1:<port>`, the client's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Queues a fault for the next request that does not find an earlier one queued.
    pub fn push_fault(&self, fault: Fault) {
        self.shared.faults.lock().unwrap_or_else(PoisonError::into_inner).push_back(fault);
    }

    /// Stops accepting connections and waits (up to 5 s) for open ones to finish.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err()
        {
            task.abort();
        }
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A request every route records before it answers: the extractor does the recording, so each
/// handler starts from what it received and the stub's shared state.
struct Recorded {
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    /// The body as JSON; `None` when it is not JSON (recorded as `null`).
    json: Option<Value>,
    /// The API key or bearer token the request carried (whose prompt cache it uses).
    credential: String,
}

impl FromRequest<Arc<Shared>> for Recorded {
    type Rejection = axum::extract::rejection::BytesRejection;

    async fn from_request(request: Request, shared: &Arc<Shared>) -> Result<Self, Self::Rejection> {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, shared).await?;
        let json = serde_json::from_slice::<Value>(&body).ok();
        shared.record(&method, &uri, &headers, json.clone().unwrap_or(Value::Null));
        let credential = ["x-api-key", "authorization"]
            .iter()
            .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()))
            .unwrap_or_default()
            .to_owned();
        Ok(Recorded { shared: Arc::clone(shared), method, uri, json, credential })
    }
}

/// Applies the faults that replace or delay the answer, whatever the route: a wait, a status
/// (its body from the route's `error_body`), a raw answer. `Some` is the response to send
/// instead of the answer.
async fn before_answer(fault: &Option<Fault>, error_body: fn(&str, &str) -> Value) -> Option<Response> {
    match fault {
        Some(Fault::Delay(delay)) => tokio::time::sleep(*delay).await,
        Some(Fault::Status { status, error_type, retry_after_secs, retry_after_ms }) => {
            let mut response = json_error(*status, &error_body(error_type, &format!("stub fault: {error_type}")));
            let headers = response.headers_mut();
            if let Some(secs) = retry_after_secs {
                headers.insert(header::RETRY_AFTER, header::HeaderValue::from(*secs));
            }
            if let Some(ms) = retry_after_ms {
                headers.insert("retry-after-ms", header::HeaderValue::from(*ms));
            }
            return Some(response);
        }
        Some(Fault::Raw { status, headers, body }) => return Some(raw_response(*status, headers, body.clone())),
        _ => {}
    }
    None
}

async fn messages(Recorded { shared, json, credential, .. }: Recorded) -> Response {
    let fault = shared.next_fault();
    if let Some(response) = before_answer(&fault, wire::error_body).await {
        return response;
    }
    let Some(json) = json else {
        return error_response(400, "invalid_request_error", "the request body is not JSON");
    };
    let parsed = match wire::parse_request(&json).and_then(|parsed| rules::check_thinking(&json).map(|()| parsed)) {
        Ok(parsed) => parsed,
        Err(message) => return error_response(400, "invalid_request_error", &message),
    };
    let mut response = shared.model.respond(&parsed.request);
    if rules::thinking_budget(&json).is_some() {
        rules::add_thinking(&mut response, &rules::last_user_text(&parsed.request));
    }
    let cached =
        shared.caches.lock().unwrap_or_else(PoisonError::into_inner).entry(credential).or_default().account(&json);
    // The request's size stays the fake's count; the cache serves part of it (at least one
    // token is always fresh: the API counts the request's framing).
    let usage = &mut response.usage;
    let cacheable = usage.input_tokens.saturating_sub(1);
    usage.cache_read_input_tokens = cached.read.min(cacheable);
    usage.cache_creation_input_tokens = cached.written.min(cacheable - usage.cache_read_input_tokens);
    usage.input_tokens -= usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
    let id = format!("msg_stub_{:04}", shared.next_id.fetch_add(1, Ordering::Relaxed) + 1);
    let model = &parsed.request.model;
    if parsed.stream {
        return event_stream(wire::sse_frames(&id, model, &response), fault, wire::error_frame);
    }
    let body = wire::message_json(&id, model, &response).to_string();
    json_answer(body, fault, wire::status_for, wire::error_body)
}

/// `POST /v1/chat/completions`: the fake's answer in the Chat Completions format.
async fn chat_completions(Recorded { shared, json, credential, .. }: Recorded) -> Response {
    let fault = shared.next_fault();
    if let Some(response) = before_answer(&fault, chat::error_body).await {
        return response;
    }
    let invalid = |message: &str| json_error(400, &chat::error_body("invalid_request_error", message));
    let Some(json) = json else {
        return invalid("We could not parse the JSON body of your request.");
    };
    let parsed = match chat::parse_request(&json) {
        Ok(parsed) => parsed,
        Err(message) => return invalid(&message),
    };
    let mut response = shared.model.respond(&parsed.request);
    let cached =
        shared.chat_caches.lock().unwrap_or_else(PoisonError::into_inner).entry(credential).or_default().account(&json);
    // The request's size stays the fake's count; the cache serves part of it, never all (as
    // with the Messages route, one token is always fresh).
    let usage = &mut response.usage;
    usage.cache_read_input_tokens = cached.min(usage.input_tokens.saturating_sub(1));
    usage.input_tokens -= usage.cache_read_input_tokens;
    let id = format!("chatcmpl-stub{:04}", shared.next_id.fetch_add(1, Ordering::Relaxed) + 1);
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let answer = chat::Answer { id: &id, created, model: &parsed.request.model, response: &response };
    if parsed.stream {
        return event_stream(answer.frames(parsed.include_usage), fault, chat::error_frame);
    }
    json_answer(answer.completion().to_string(), fault, chat::status_for, chat::error_body)
}

/// A streamed answer, possibly cut or ended by an error event (written by `error_frame`).
fn event_stream(mut frames: Vec<String>, fault: Option<Fault>, error_frame: fn(&str) -> String) -> Response {
    let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
    match fault {
        Some(Fault::CutAfterEvents(count)) => {
            frames.truncate(count);
            cut_body(frames.into_iter().map(Bytes::from).collect(), headers)
        }
        Some(Fault::ErrorEvent { error_type, after_events }) => {
            frames.truncate(after_events);
            frames.push(error_frame(&error_type));
            let chunks = futures::stream::iter(frames.into_iter().map(Ok::<_, io::Error>));
            (headers, Body::from_stream(chunks)).into_response()
        }
        _ => {
            let chunks = futures::stream::iter(frames.into_iter().map(Ok::<_, io::Error>));
            (headers, Body::from_stream(chunks)).into_response()
        }
    }
}

/// A non-streamed answer, possibly cut halfway or replaced by the error of an error event
/// (its status from `status_for`, its body from `error_body`).
fn json_answer(
    body: String,
    fault: Option<Fault>,
    status_for: fn(&str) -> u16,
    error_body: fn(&str, &str) -> Value,
) -> Response {
    match fault {
        Some(Fault::CutAfterEvents(_)) => {
            let half = body.as_bytes()[..body.len() / 2].to_vec();
            cut_body(vec![Bytes::from(half)], [(header::CONTENT_TYPE, "application/json")])
        }
        Some(Fault::ErrorEvent { error_type, .. }) => {
            json_error(status_for(&error_type), &error_body(&error_type, "stub fault"))
        }
        _ => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
    }
}

/// A 200 response whose body is `chunks` and then a broken connection.
fn cut_body<const N: usize>(chunks: Vec<Bytes>, headers: [(header::HeaderName, &'static str); N]) -> Response {
    let cut = futures::stream::once(async {
        // Let the chunks before the cut reach the client before the connection drops.
        tokio::time::sleep(CUT_FLUSH_DELAY).await;
        Err(io::Error::new(io::ErrorKind::ConnectionReset, "the stub cut the response"))
    });
    let body = futures::stream::iter(chunks.into_iter().map(Ok)).chain(cut);
    (headers, Body::from_stream(body)).into_response()
}

fn raw_response(status: u16, headers: &[(String, String)], body: String) -> Response {
    // A bare `Body` gets no content-type of its own: the fault says exactly what is sent.
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Body::from(body)).into_response();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) =
            (header::HeaderName::try_from(name.as_str()), header::HeaderValue::try_from(value.as_str()))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// A Messages API error.
fn error_response(status: u16, error_type: &str, message: &str) -> Response {
    json_error(status, &wire::error_body(error_type, message))
}

fn json_error(status: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn count_tokens(Recorded { shared, json, .. }: Recorded) -> Response {
    // count_tokens requests carry no max_tokens; the fake's count does not depend on it.
    let mut json = json.unwrap_or(Value::Null);
    if let Some(object) = json.as_object_mut() {
        object.entry("max_tokens").or_insert(json!(1));
    }
    match wire::parse_request(&json) {
        Ok(parsed) => {
            let tokens = shared.model.respond(&parsed.request).usage.input_tokens;
            ([(header::CONTENT_TYPE, "application/json")], json!({"input_tokens": tokens}).to_string()).into_response()
        }
        Err(message) => error_response(400, "invalid_request_error", &message),
    }
}

async fn not_found(Recorded { method, uri, .. }: Recorded) -> Response {
    error_response(404, "not_found_error", &format!("the stub does not serve {method} {}", uri.path()))
}
