//! SSE streams of tasks (protocols/a2a.md §6), shared by both bindings and both versions.
//!
//! A stream is driven by a [`Watch`]: the first frame is the Task (or, for a send whose agent
//! answers with a direct Message, that Message alone), then one frame per update, closing once
//! the task settles (final or interrupted). A `: keep-alive` comment goes out every 15 s; the
//! stream ends at shutdown. Each frame is one `data:` line of compact JSON, shaped by the
//! caller's `render` (JSON-RPC envelope or bare REST body, v1.0 or v0.3).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::error::A2aError;
use crate::tasks::watch::Watch;
use crate::wire::StreamResponse;

const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a send's stream holds its first Task back waiting for the turn's first output.
const FIRST_OUTPUT_WAIT: Duration = Duration::from_millis(1500);

/// How frames are rendered, as compact JSON text: `Ok` = a stream event, `Err` = the closing
/// error. Text rather than a `Value`, so a JSON-RPC envelope can carry its raw id.
pub type Render = Box<dyn Fn(Result<&StreamResponse, &A2aError>) -> String + Send + Sync>;

fn frame(v: &str) -> Bytes {
    gateway_wire::sse::frame(None, None, v)
}

struct St {
    watch: Box<Watch>,
    render: Render,
    shutdown: CancellationToken,
    min_seq: u64,
    /// A send (may answer with a direct Message) rather than a subscription.
    send: bool,
    started: bool,
    done: bool,
    queue: std::collections::VecDeque<String>,
    history_length: Option<i64>,
}

/// Builds the SSE response for a watch.
pub fn respond(
    watch: Box<Watch>,
    render: Render,
    shutdown: CancellationToken,
    min_seq: u64,
    send: bool,
    history_length: Option<i64>,
) -> Response {
    let st = St {
        watch,
        render,
        shutdown,
        min_seq,
        send,
        started: false,
        done: false,
        queue: Default::default(),
        history_length,
    };
    let body = futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(v) = st.queue.pop_front() {
                return Some((Ok::<_, Infallible>(frame(&v)), st));
            }
            if st.done {
                return None;
            }
            if !st.started {
                start(&mut st).await;
                continue;
            }
            if st.watch.settled_after(st.min_seq) {
                st.done = true;
                continue;
            }
            let next = tokio::select! {
                n = st.watch.next() => n,
                _ = tokio::time::sleep(KEEP_ALIVE) => {
                    return Some((Ok(Bytes::from_static(gateway_wire::sse::KEEP_ALIVE)), st));
                }
                _ = st.shutdown.cancelled() => None,
            };
            match next {
                None => st.done = true,
                Some(Ok(updates)) => {
                    for u in &updates {
                        st.queue.push_back((st.render)(Ok(u)));
                    }
                }
                Some(Err(e)) => {
                    st.queue.push_back((st.render)(Err(&e)));
                    st.done = true;
                }
            }
        }
    });
    let mut r = Response::new(Body::from_stream(body));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(gateway_wire::sse::MEDIA_TYPE));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// The first frame. A send waits briefly for the turn's first output, so an agent that
/// answers with a direct Message can still do so instead of a Task.
async fn start(st: &mut St) {
    st.started = true;
    if st.send {
        let deadline = tokio::time::Instant::now() + FIRST_OUTPUT_WAIT;
        while st.watch.proj.quiet() && st.watch.proj.direct_message().is_none() {
            // The Task as it was before the first output, so that output still streams as
            // its own update.
            let before = st.watch.proj.task(st.history_length, true);
            match tokio::time::timeout_at(deadline, st.watch.next()).await {
                Ok(Some(Ok(updates))) => {
                    if st.watch.proj.direct_message().is_none() && !st.watch.proj.quiet() {
                        st.queue.push_back((st.render)(Ok(&StreamResponse::Task(before))));
                        for u in &updates {
                            st.queue.push_back((st.render)(Ok(u)));
                        }
                        return;
                    }
                }
                Ok(Some(Err(e))) => {
                    st.queue.push_back((st.render)(Err(&e)));
                    st.done = true;
                    return;
                }
                Ok(None) | Err(_) => break,
            }
        }
        if let Some(m) = st.watch.proj.direct_message() {
            debug!("answering the stream with a direct message");
            st.queue.push_back((st.render)(Ok(&StreamResponse::Message(m.clone()))));
            st.done = true;
            return;
        }
    }
    // A subscription to an interrupted task (INPUT_REQUIRED, AUTH_REQUIRED) stays open: the
    // client subscribes to see what follows the answer, and the stream ends at the next final
    // or interrupted state (`Watch::settled_after` counts only states after the opening).
    let task = st.watch.proj.task(st.history_length, true);
    st.queue.push_back((st.render)(Ok(&StreamResponse::Task(task))));
}
