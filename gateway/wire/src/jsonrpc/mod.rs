//! A small symmetric JSON-RPC 2.0 peer: both sides send requests and notifications on one
//! connection, one message per line (or per WebSocket text frame). A protocol built on it
//! keeps its method names and its spans ([`Spans`]) to itself.
//!
//! Why it is correct under load and misuse:
//! - The read loop never waits for the other side. Each incoming request is split into a
//!   synchronous part (run in the read loop, so it sees messages in wire order) and a future
//!   (spawned), so a handler that itself calls the peer — a prompt turn asking permission, an
//!   agent reading a file — cannot deadlock the connection.
//! - Notifications are handled synchronously, in order (a stream of updates must
//!   keep their order); their handlers only hand the message on.
//! - Responses are matched by id against a table of outstanding requests; a request whose
//!   connection closes resolves to an error instead of hanging.
//! - A malformed line is answered `-32700` (or skipped, on a child's stdout where agents may
//!   print noise) and the connection stays up; an unknown method is `-32601`; a handler that
//!   fails answers an error for its request only. Nothing on the wire can panic the loop.
//! - Lines are bounded ([`framing`]); the outgoing queue is bounded in frames and in bytes, so
//!   a flood on either side back-pressures instead of growing memory. A handler that queues
//!   what it receives makes the read loop wait for room ([`Handler::ready`]) rather than drop.
//! - At most [`MAX_IN_FLIGHT`] requests of the other side are handled at once; one more is
//!   answered with an error at once. (Waiting instead would stall the read loop, and with it
//!   the responses the running handlers wait for: a deadlock.)
//! - A request whose caller stops waiting (its future dropped) forgets its id, so a late
//!   answer is logged and dropped instead of leaking an entry.

pub mod envelope;
pub mod framing;
mod id;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, warn};

pub use framing::Inbound;
use id::Id;

/// JSON-RPC 2.0's own error codes (a protocol adds its codes beside them).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// A JSON-RPC error object, sent or received.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(code::METHOD_NOT_FOUND, format!("method not found: {}", clip(method, 100)))
    }
    /// The connection closed before an answer came.
    pub fn closed() -> Self {
        Self::new(code::INTERNAL_ERROR, "the connection closed before the peer answered")
    }

    /// An error object received from the other side (message clipped, code defaulted).
    pub(crate) fn from_wire(v: &Value) -> Self {
        Self {
            code: v.get("code").and_then(Value::as_i64).unwrap_or(code::INTERNAL_ERROR),
            message: v.get("message").and_then(Value::as_str).map(|m| clip(m, 2000).to_owned()).unwrap_or_default(),
            data: v.get("data").cloned(),
        }
    }
}

/// What a handler returns for a request: a result or an error, computed later.
pub type Reply = BoxFuture<'static, Result<Value, RpcError>>;

/// Serves what the other side sends. Both methods run in the read loop and must not wait for
/// the peer; `request` returns the (spawned) future that computes the answer.
pub trait Handler: Send + Sync + 'static {
    fn request(&self, peer: &Peer, method: &str, params: Value) -> Reply;
    fn notification(&self, peer: &Peer, method: &str, params: Value);
    /// Awaited in the read loop before each message is dispatched: a handler that queues what
    /// it receives waits here for room (and keeps it for the next message), so a flood slows
    /// the sender down instead of being dropped. It must only wait for its own consumer.
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
    /// The connection ended (EOF, transport error or close).
    fn closed(&self) {}
}

/// The spans requests run in: a protocol names them and joins the trace context its callers
/// carry (which lives in its own params).
pub trait Spans: Send + Sync + 'static {
    /// The span of a request this side sends.
    fn outbound(&self, peer: &'static str, method: &str) -> tracing::Span;
    /// The span of a request of the other side, with its params.
    fn inbound(&self, peer: &'static str, method: &str, params: &Value) -> tracing::Span;
}

/// Spans named `jsonrpc_request`, joining no carried trace context.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainSpans;

impl Spans for PlainSpans {
    fn outbound(&self, peer: &'static str, method: &str) -> tracing::Span {
        tracing::info_span!("jsonrpc_request", otel.kind = "client", rpc.system = "jsonrpc", rpc.method = %clip(method, 100), peer)
    }
    fn inbound(&self, peer: &'static str, method: &str, _params: &Value) -> tracing::Span {
        tracing::info_span!("jsonrpc_request", otel.kind = "server", rpc.system = "jsonrpc", rpc.method = %clip(method, 100), peer)
    }
}

/// Connection-level options.
#[derive(Clone, Copy)]
pub struct PeerOptions {
    /// Skip lines that are not JSON with a warning instead of answering `-32700` (a child
    /// process's stdout, where agents may print stray log lines).
    pub lenient: bool,
    /// The spans requests run in.
    pub spans: &'static dyn Spans,
}

impl Default for PeerOptions {
    fn default() -> Self {
        Self { lenient: false, spans: &PlainSpans }
    }
}

impl std::fmt::Debug for PeerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerOptions").field("lenient", &self.lenient).finish_non_exhaustive()
    }
}

type Pending = Mutex<HashMap<String, oneshot::Sender<Result<Value, RpcError>>>>;

/// One outgoing message. It holds its share of the connection's byte budget until the writer
/// drops it, so frames waiting to be written never exceed [`OUT_BYTES`] (plus one frame).
#[derive(Debug)]
pub struct Frame {
    text: String,
    _budget: OwnedSemaphorePermit,
}

impl Frame {
    /// The serialized message (one line: JSON never holds a raw newline).
    pub fn text(&self) -> &str {
        &self.text
    }
}

struct Inner {
    out: mpsc::Sender<Frame>,
    /// Bytes of frames queued and not yet written.
    budget: Arc<Semaphore>,
    /// Requests of the other side being handled.
    in_flight: Arc<Semaphore>,
    pending: Pending,
    next_id: AtomicI64,
    closed: CancellationToken,
    name: &'static str,
    spans: &'static dyn Spans,
    /// Where the read loop and the request handlers run, so the process can wait for them.
    tasks: TaskTracker,
}

/// A handle on one connection: send requests and notifications, see when it closes.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("name", &self.inner.name).finish_non_exhaustive()
    }
}

/// Outgoing frames buffered before senders wait.
const OUT_QUEUE: usize = 256;
/// Outgoing bytes buffered before senders wait (twice the largest message).
pub const OUT_BYTES: usize = 2 * framing::MAX_MESSAGE_BYTES;
/// Requests of the other side handled at once on one connection. A prompt holds one for its
/// whole turn, so this is also how many sessions of one editor connection can prompt at once.
pub const MAX_IN_FLIGHT: usize = 32;

impl Peer {
    /// Starts serving a connection: `incoming` yields its lines, frames to send go to
    /// `outgoing`. Returns the peer and the read loop's task (it ends with the connection).
    pub fn start(
        name: &'static str,
        incoming: mpsc::Receiver<Inbound>,
        handler: Arc<dyn Handler>,
        options: PeerOptions,
    ) -> (Peer, mpsc::Receiver<Frame>, tokio::task::JoinHandle<()>) {
        Self::start_tracked(name, incoming, handler, options, &TaskTracker::new())
    }

    /// [`Peer::start`] with the read loop and every request handler tracked by `tasks`: a
    /// gateway's editor connections run on its runtime's tracker, so it stops them (their
    /// handlers call the Coordinator) before it closes the store.
    pub fn start_tracked(
        name: &'static str,
        incoming: mpsc::Receiver<Inbound>,
        handler: Arc<dyn Handler>,
        options: PeerOptions,
        tasks: &TaskTracker,
    ) -> (Peer, mpsc::Receiver<Frame>, tokio::task::JoinHandle<()>) {
        let (out, out_rx) = mpsc::channel(OUT_QUEUE);
        let peer = Peer {
            inner: Arc::new(Inner {
                out,
                budget: Arc::new(Semaphore::new(OUT_BYTES)),
                in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicI64::new(0),
                closed: CancellationToken::new(),
                name,
                spans: options.spans,
                tasks: tasks.clone(),
            }),
        };
        let task = tasks.spawn(read_loop(peer.clone(), incoming, handler, options));
        (peer, out_rx, task)
    }

    /// Sends a request and waits for its answer (an error if the connection closes first).
    /// Dropping the future forgets the request: a late answer is dropped.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let span = self.inner.spans.outbound(self.inner.name, method);
        self.request_traced(method, params).instrument(span).await
    }

    async fn request_traced(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(id.to_string(), tx);
        let _forget = Forget { peer: self, id: id.to_string() };
        let frame = envelope::request(id, method, params);
        if !self.send(frame).await {
            return Err(RpcError::closed());
        }
        tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| Err(RpcError::closed())),
            _ = self.inner.closed.cancelled() => Err(RpcError::closed()),
        }
    }

    /// Sends a notification, waiting for room in the outgoing queue; false if the connection
    /// is gone.
    pub async fn notify(&self, method: &str, params: Value) -> bool {
        self.send(envelope::notification(method, params)).await
    }

    /// Sends a notification only if the outgoing queue has room now (never waits: for paths
    /// that must not hang on a peer that stopped reading); false if it was not sent.
    pub fn try_notify(&self, method: &str, params: Value) -> bool {
        let Some(text) = self.serialize(&envelope::notification(method, params)) else {
            return false;
        };
        let Ok(budget) = Arc::clone(&self.inner.budget).try_acquire_many_owned(cost(&text)) else { return false };
        self.inner.out.try_send(Frame { text, _budget: budget }).is_ok()
    }

    /// Requests sent and not answered yet.
    pub fn outstanding(&self) -> usize {
        self.lock_pending().len()
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.is_cancelled()
    }

    /// Resolves when the connection closes.
    pub async fn closed(&self) {
        self.inner.closed.cancelled().await
    }

    /// Closes the connection from this side: outstanding requests fail, the loop stops.
    pub fn close(&self) {
        self.inner.closed.cancel();
        self.lock_pending().clear();
    }

    fn serialize(&self, frame: &impl Serialize) -> Option<String> {
        if self.is_closed() {
            return None;
        }
        serde_json::to_string(frame)
            .map_err(|e| warn!(peer = self.inner.name, error = %e, "could not serialize a frame"))
            .ok()
    }

    /// Queues a frame, waiting for room; gives up when the connection closes.
    async fn send(&self, frame: Value) -> bool {
        let Some(text) = self.serialize(&frame) else { return false };
        self.queue(text).await
    }

    /// Queues a serialized frame, waiting for room; gives up when the connection closes.
    async fn queue(&self, text: String) -> bool {
        let closed = &self.inner.closed;
        let budget = tokio::select! {
            b = Arc::clone(&self.inner.budget).acquire_many_owned(cost(&text)) => b,
            _ = closed.cancelled() => return false,
        };
        let Ok(budget) = budget else { return false };
        tokio::select! {
            sent = self.inner.out.send(Frame { text, _budget: budget }) => sent.is_ok(),
            _ = closed.cancelled() => false,
        }
    }

    /// Answers a request; the id goes out exactly as it came in ([`Id`]).
    async fn respond(&self, id: Id, result: Result<Value, RpcError>) {
        if self.is_closed() {
            return;
        }
        self.queue(envelope::response(id.raw(), result.as_ref())).await;
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Result<Value, RpcError>>>> {
        self.inner.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes a request's entry however its future ends (answered, closed, or dropped).
struct Forget<'a> {
    peer: &'a Peer,
    id: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.peer.lock_pending().remove(&self.id);
    }
}

/// A frame's share of the byte budget (a frame larger than the budget waits for all of it).
fn cost(text: &str) -> u32 {
    u32::try_from(text.len().clamp(1, OUT_BYTES)).unwrap_or(u32::MAX)
}

async fn read_loop(peer: Peer, mut incoming: mpsc::Receiver<Inbound>, handler: Arc<dyn Handler>, options: PeerOptions) {
    let name = peer.inner.name;
    loop {
        let inbound = tokio::select! {
            i = incoming.recv() => i,
            _ = peer.inner.closed.cancelled() => None,
        };
        let Some(inbound) = inbound else { break };
        let line = match inbound {
            Inbound::Line(line) => line,
            Inbound::TooLong(len) => {
                warn!(peer = name, bytes = len, "message over the size limit; dropped");
                let e = RpcError::new(code::PARSE_ERROR, format!("message too large ({len} bytes)"));
                peer.respond(Id::null(), Err(e)).await;
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let message = match envelope::parse_message(line.as_bytes()) {
            Ok(message) => message,
            Err(refused) if refused.is_parse_error() && options.lenient => {
                warn!(peer = name, line = %clip(&line, 200), "skipping a line that is not JSON-RPC");
                continue;
            }
            Err(refused) => {
                debug!(peer = name, error = %refused.message, "refused message");
                peer.respond(Id::of(refused.id), Err(RpcError::new(refused.code, refused.message))).await;
                continue;
            }
        };
        // Room for what the handler queues, before the message is looked at; a closed
        // connection stops the wait.
        tokio::select! {
            _ = handler.ready() => {}
            _ = peer.inner.closed.cancelled() => break,
        }
        dispatch(&peer, handler.as_ref(), message).await;
    }
    peer.close();
    handler.closed();
    debug!(peer = name, "connection closed");
}

/// Handles one message read by [`envelope::parse_message`].
async fn dispatch(peer: &Peer, handler: &dyn Handler, message: envelope::Message<'_>) {
    let request = match message {
        envelope::Message::Request(request) => request,
        envelope::Message::Response(response) => {
            match peer.lock_pending().remove(&Id::key(response.id)) {
                Some(tx) => {
                    let _ = tx.send(response.answer());
                }
                None => {
                    warn!(peer = peer.inner.name, id = %clip(response.id.get(), 100), "response to no outstanding request")
                }
            }
            return;
        }
    };
    let method = request.method;
    let params = request.params.map_or(Ok(Value::Null), |p| serde_json::from_str::<Value>(p.get()));
    let Some(id) = request.id.map(Id::of) else {
        if method.starts_with("$/") {
            // Protocol-level notifications (`$/cancel_request`, `$/progress`): tolerated
            // and ignored; every request is still answered, by its own handler.
            debug!(peer = peer.inner.name, method = %clip(&method, 100), "$/ notification ignored");
            return;
        }
        match params {
            Ok(params) => handler.notification(peer, &method, params),
            Err(e) => {
                debug!(peer = peer.inner.name, method = %clip(&method, 100), error = %e, "unreadable notification params")
            }
        }
        return;
    };
    let params = match params {
        Ok(params) => params,
        Err(e) => return peer.respond(id, Err(RpcError::invalid_params(format!("invalid params: {e}")))).await,
    };
    let Ok(permit) = Arc::clone(&peer.inner.in_flight).try_acquire_owned() else {
        warn!(peer = peer.inner.name, method = %clip(&method, 100), "too many requests in flight; refused");
        let e = RpcError::internal(format!(
            "too many requests in flight on this connection (at most {MAX_IN_FLIGHT}); wait for earlier answers"
        ));
        peer.respond(id, Err(e)).await;
        return;
    };
    let span = peer.inner.spans.inbound(peer.inner.name, &method, &params);
    let reply = span.in_scope(|| handler.request(peer, &method, params));
    let peer = peer.clone();
    peer.inner.tasks.clone().spawn(
        async move {
            let (result, then) = AFTER_ANSWER
                .scope(RefCell::new(Vec::new()), async {
                    let result = reply.await;
                    (result, AFTER_ANSWER.with(RefCell::take))
                })
                .await;
            let answered = result.is_ok();
            peer.respond(id, result).await;
            if answered {
                for frame in then {
                    peer.send(frame).await;
                }
            }
            drop(permit);
        }
        .instrument(span),
    );
}

tokio::task_local! {
    /// The notifications a request's answer asked to follow it ([`notify_after_answer`]).
    static AFTER_ANSWER: RefCell<Vec<Value>>;
}

/// Queues a notification to go out right after the answer to the request being answered,
/// and only if that answer is a result. Some updates are about what the answer makes known
/// (what an agent offers in a session the answer just created): the peer must read the
/// answer first, and a handler cannot send after returning. Called from the answer's own
/// future (not a task it spawned); false, sending nothing, anywhere else.
pub fn notify_after_answer(method: &str, params: Value) -> bool {
    AFTER_ANSWER.try_with(|then| then.borrow_mut().push(envelope::notification(method, params))).is_ok()
}

/// At most `max` characters of `s`.
pub fn clip(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Parses a request's params into `T`, answering `-32602` with serde's reason.
pub fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))
}
