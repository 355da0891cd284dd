//! A scripted remote A2A agent: an in-process HTTP server the outbound backend's tests (and
//! its run of the Backend conformance suite) talk to.
//!
//! "ask" -> INPUT_REQUIRED ("what?"), an answer on that task -> "answered: TEXT"; streaming
//! "hang" -> a stream that never sends anything, "quiet" -> the task (WORKING) then silence,
//! while GetTask says it completed with "late"; "work MS WORD" -> a WORKING task whose
//! artifact starts with "working on WORD" and gains a part "tick K" every 200 ms, completed
//! with a last part "done: WORD" once MS ms have passed (CancelTask cancels it); streaming
//! "burst WORD" -> the task (WORKING), an artifact update "burst: WORD" and the COMPLETED
//! status, written at once (as a remote that answers at once streams); "spaced WORD" -> the
//! same three events as writes of their own, 300 µs apart (as a remote on a busy machine
//! streams them); "trickle N" -> the task (WORKING), N artifact updates appending "k " (k = 1..N)
//! one every millisecond, then COMPLETED; anything else -> COMPLETED with "echo: TEXT".
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub params: Value,
    pub auth: Option<String>,
}

/// A `work` task: when it started, how long it works, the word it answers.
struct Work {
    started: Instant,
    work: Duration,
    word: String,
}

pub struct Fake {
    streaming: bool,
    /// The interface URL the card names (default: the server's own URL).
    pub interface: Mutex<String>,
    calls: Mutex<Vec<Call>>,
    tasks: Mutex<HashMap<String, Value>>,
    working: Mutex<HashMap<String, Work>>,
}

impl Fake {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn methods(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.method).collect()
    }

    /// The texts of the messages the remote received (first part of each), in order.
    pub fn messages(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "SendMessage" || c.method == "SendStreamingMessage")
            .map(|c| c.params["message"]["parts"][0]["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

fn task(id: &str, state: &str, artifact: Option<&str>, status_text: Option<&str>) -> Value {
    let mut t = json!({"id": id, "contextId": "rctx", "status": {"state": state}});
    if let Some(a) = artifact {
        t["artifacts"] = json!([{"artifactId": "a1", "parts": [{"text": a}]}]);
    }
    if let Some(s) = status_text {
        t["status"]["message"] = json!({"messageId": "sm", "role": "ROLE_AGENT", "parts": [{"text": s}]});
    }
    t
}

/// A `work` task as it stands now.
fn work_task(id: &str, w: &Work) -> Value {
    let elapsed = w.started.elapsed();
    let ticks = (elapsed.min(w.work).as_millis() / 200) as usize;
    let mut parts = vec![json!({"text": format!("working on {}", w.word)})];
    parts.extend((1..=ticks).map(|k| json!({"text": format!("tick {k}")})));
    let done = elapsed >= w.work;
    if done {
        parts.push(json!({"text": format!("done: {}", w.word)}));
    }
    let state = if done { "TASK_STATE_COMPLETED" } else { "TASK_STATE_WORKING" };
    json!({"id": id, "contextId": "rctx", "status": {"state": state}, "artifacts": [{"artifactId": "a1", "parts": parts}]})
}

async fn card(State(f): State<Arc<Fake>>) -> Response {
    let url = f.interface.lock().unwrap().clone();
    axum::Json(json!({
        "name": "fake", "description": "a scripted remote", "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": f.streaming},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    }))
    .into_response()
}

fn sse(id: &Value, results: Vec<Value>, then_hang: bool) -> Response {
    sse_spaced(id, results, then_hang, Duration::ZERO)
}

/// An SSE response of `results`, `pause` between one frame and the next.
fn sse_spaced(id: &Value, results: Vec<Value>, then_hang: bool, pause: Duration) -> Response {
    let frames: Vec<Result<bytes::Bytes, std::io::Error>> = results
        .into_iter()
        .map(|r| Ok(bytes::Bytes::from(format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": id, "result": r})))))
        .collect();
    let stream = futures::stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
        if i > 0 && !pause.is_zero() {
            // A pause of that length, not rounded up to the timer's millisecond, during which
            // the server writes the frames before (a pause inside the poll would not let it).
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(pause)).await;
        }
        frame
    });
    let body = if then_hang {
        Body::from_stream(stream.chain(futures::stream::pending()).boxed())
    } else {
        Body::from_stream(stream.boxed())
    };
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn rpc(State(f): State<Arc<Fake>>, headers: HeaderMap, axum::Json(req): axum::Json<Value>) -> Response {
    let method = req["method"].as_str().unwrap_or_default().to_owned();
    let params = req["params"].clone();
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    f.calls.lock().unwrap().push(Call { method: method.clone(), params: params.clone(), auth });
    let id = req["id"].clone();
    let text = params["message"]["parts"][0]["text"].as_str().unwrap_or_default().to_owned();
    let reply = |result: Value| axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    let mut tasks = f.tasks.lock().unwrap();
    let mut working = f.working.lock().unwrap();
    let n = tasks.len();
    match method.as_str() {
        "SendMessage" | "SendStreamingMessage" => {
            let mut words = text.split_whitespace();
            let t = match params["message"]["taskId"].as_str() {
                Some(tid) => task(tid, "TASK_STATE_COMPLETED", Some(&format!("answered: {text}")), None),
                None if words.next() == Some("work") => {
                    let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1000);
                    let w = Work {
                        started: Instant::now(),
                        work: Duration::from_millis(ms),
                        word: words.collect::<Vec<_>>().join(" "),
                    };
                    let tid = format!("t{n}");
                    let t = work_task(&tid, &w);
                    working.insert(tid, w);
                    t
                }
                None if text == "ask" => task(&format!("t{n}"), "TASK_STATE_INPUT_REQUIRED", None, Some("what?")),
                None if text.starts_with("burst ") => {
                    task(&format!("t{n}"), "TASK_STATE_COMPLETED", Some(&format!("burst: {}", &text[6..])), None)
                }
                None if text.starts_with("spaced ") => {
                    task(&format!("t{n}"), "TASK_STATE_COMPLETED", Some(&format!("spaced: {}", &text[7..])), None)
                }
                None if text == "hang" || text == "quiet" => task(&format!("t{n}"), "TASK_STATE_WORKING", None, None),
                None => task(&format!("t{n}"), "TASK_STATE_COMPLETED", Some(&format!("echo: {text}")), None),
            };
            let tid = t["id"].as_str().unwrap().to_owned();
            if text == "quiet" {
                tasks.insert(tid.clone(), task(&format!("t{n}"), "TASK_STATE_COMPLETED", Some("late"), None));
            } else {
                tasks.insert(tid.clone(), t.clone());
            }
            if method == "SendMessage" {
                return reply(json!({"task": t}));
            }
            let working = json!({"task": task(&tid, "TASK_STATE_WORKING", None, None)});
            let done = json!({"statusUpdate": {"taskId": tid, "contextId": "rctx", "status": {"state": "TASK_STATE_COMPLETED"}}});
            for (prefix, pause) in [("burst", Duration::ZERO), ("spaced", Duration::from_micros(300))] {
                if let Some(word) = text.strip_prefix(prefix).and_then(|t| t.strip_prefix(' ')) {
                    let artifact = json!({"artifactUpdate": {"taskId": tid, "contextId": "rctx",
                        "artifact": {"artifactId": "a1", "parts": [{"text": format!("{prefix}: {word}")}]}, "lastChunk": true}});
                    return sse_spaced(&id, vec![working, artifact, done], false, pause);
                }
            }
            if let Some(n) = text.strip_prefix("trickle ").and_then(|n| n.parse::<usize>().ok()) {
                let mut frames = vec![working];
                frames.extend((1..=n).map(|k| {
                    json!({"artifactUpdate": {"taskId": tid, "contextId": "rctx", "append": k > 1,
                        "artifact": {"artifactId": "a1", "parts": [{"text": format!("{k} ")}]}, "lastChunk": k == n}})
                }));
                frames.push(done);
                return sse_spaced(&id, frames, false, Duration::from_millis(1));
            }
            match text.as_str() {
                "hang" => sse(&id, vec![], true),
                "quiet" => sse(&id, vec![json!({"task": t})], true),
                _ => sse(&id, vec![json!({"task": t})], false),
            }
        }
        "GetTask" => {
            let tid = params["id"].as_str().unwrap();
            match working.get(tid) {
                Some(w) => reply(work_task(tid, w)),
                None => reply(tasks[tid].clone()),
            }
        }
        "CancelTask" => {
            let tid = params["id"].as_str().unwrap();
            if let Some(w) = working.remove(tid) {
                tasks.insert(tid.to_owned(), work_task(tid, &w));
            }
            let t = tasks.get_mut(tid).unwrap();
            t["status"] = json!({"state": "TASK_STATE_CANCELED"});
            reply(t.clone())
        }
        _ => {
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}})).into_response()
        }
    }
}

/// Starts a fake remote; returns it and its URL.
pub async fn fake(streaming: bool) -> (Arc<Fake>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let f = Arc::new(Fake {
        streaming,
        interface: Mutex::new(url.clone()),
        calls: Mutex::default(),
        tasks: Mutex::default(),
        working: Mutex::default(),
    });
    let app = axum::Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route("/", post(rpc))
        .with_state(Arc::clone(&f));
    // TCP_NODELAY, as real servers set it: otherwise a frame written while the last one waits
    // for its (delayed) acknowledgement is held for it, milliseconds that no remote adds.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // A blocking thread for `sse_spaced`'s pauses, started now so that a first pause does not
    // last as long as starting it.
    let _ = tokio::task::spawn_blocking(|| ()).await;
    tokio::spawn(async move { axum::serve(listener, app).await });
    (f, url)
}
