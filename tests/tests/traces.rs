#![allow(clippy::unwrap_used)]
//! OpenTelemetry traces across two gateway processes: a caller's trace continues through
//! gateway A's request, turn and outbound A2A call into gateway B's request, turn and model
//! request, all exported over OTLP HTTP/protobuf to a receiver this test runs. And a dead
//! collector neither slows nor fails a turn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use gateway_tests::{Gateway, GatewayBuilder, free_port, workdir};
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

/// The caller's trace: its id and the span the caller sent the request from.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// One exported span, with the `service.name` of the process that exported it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// A minimal OTLP HTTP receiver: `POST /v1/traces` with a protobuf body.
async fn receiver() -> (String, Spans) {
    async fn export(State(spans): State<Spans>, body: Bytes) -> StatusCode {
        let Ok(request) = ExportTraceServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
        let mut spans = spans.lock().unwrap();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                });
            }
        }
        StatusCode::OK
    }
    let spans = Spans::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().route("/v1/traces", post(export)).with_state(Arc::clone(&spans));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A gateway serving `config` (TOML), exporting traces to `collector` as `service`.
fn gateway(name: &str, config: &str, collector: &str) -> Gateway {
    let port = free_port();
    let dir = workdir(&format!("traces-{name}"));
    let file = dir.join("gateway.toml");
    let url = format!("http://127.0.0.1:{port}");
    std::fs::write(&file, format!("public_url = \"{url}\"\n{config}")).unwrap();
    GatewayBuilder::new(TESTBED, name)
        .cwd(&dir)
        .env("GATEWAY_CONFIG", file.display())
        .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEWAY_TESTBED_NATIVE", "model")
        .env("GATEWAY_TELEMETRY__OTLP_ENDPOINT", collector)
        .env("GATEWAY_TELEMETRY__SERVICE_NAME", name)
        // Export promptly, so the test does not wait the default 5 s per batch.
        .env("OTEL_BSP_SCHEDULE_DELAY", 100)
        .spawn()
}

/// Sends `text` to `agent` over A2A JSON-RPC (blocking send) with `headers`; returns the
/// answer and how long it took.
async fn send(gw: &Gateway, agent: &str, text: &str, headers: &[(&str, &str)]) -> (Value, Duration) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": format!("m-{}", unique()), "role": "ROLE_USER", "parts": [{"text": text}]}}});
    let mut request = reqwest::Client::new().post(gw.url(&format!("/a2a/{agent}"))).header("A2A-Version", "1.0");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let started = Instant::now();
    let response = request.json(&body).timeout(Duration::from_secs(30)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    (response.json().await.unwrap(), started.elapsed())
}

/// A message id no other message of the test has.
fn unique() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn state_of(answer: &Value) -> &str {
    answer["result"]["task"]["status"]["state"].as_str().unwrap_or_else(|| panic!("no task in {answer}"))
}

/// Whether `ancestor` is `span`'s parent, or its parent's, and so on, within `trace`.
fn descends(trace: &[Received], span: &Received, ancestor: &Received) -> bool {
    let mut at = span;
    for _ in 0..trace.len() {
        if at.parent == ancestor.span_id {
            return true;
        }
        match trace.iter().find(|s| s.span_id == at.parent) {
            Some(parent) => at = parent,
            None => return false,
        }
    }
    false
}

fn find<'a>(trace: &'a [Received], service: &str, name: impl Fn(&str) -> bool, what: &str) -> &'a Received {
    trace
        .iter()
        .find(|s| s.service == service && name(&s.name))
        .unwrap_or_else(|| panic!("no {what} span of {service} in the trace: {:#?}", trace))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_trace_crosses_two_gateways_in_parent_child_order() {
    let (collector, spans) = receiver().await;
    let b = gateway("gw-b", "[agents.echo]\nbackend = \"native\"\n", &collector);
    b.ready(Duration::from_secs(30)).await;
    let relay = format!("[agents.relay]\nbackend = \"a2a:b\"\n[remotes.a2a.b]\nurl = \"{}\"\n", b.url("/a2a/echo"));
    let a = gateway("gw-a", &relay, &collector);
    a.ready(Duration::from_secs(30)).await;

    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let (answer, _) = send(&a, "relay", "hello", &[("traceparent", &traceparent), ("tracestate", "client=1")]).await;
    assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
    assert!(answer.to_string().contains("echo: hello"), "B's answer came back through A: {answer}");

    // Spans arrive as each process's batches are exported; B's model request is among the
    // last to end.
    let deadline = Instant::now() + Duration::from_secs(20);
    let trace = loop {
        let trace: Vec<Received> = spans.lock().unwrap().iter().filter(|s| s.trace_id == TRACE_ID).cloned().collect();
        let has = |service: &str, name: &str| trace.iter().any(|s| s.service == service && s.name.starts_with(name));
        let complete = has("gw-a", "HTTP POST /a2a/{agent}")
            && has("gw-a", "turn")
            && has("gw-a", "A2A ")
            && has("gw-b", "HTTP POST /a2a/{agent}")
            && has("gw-b", "turn")
            && has("gw-b", "chat ");
        if complete {
            break trace;
        }
        assert!(
            Instant::now() < deadline,
            "the caller's trace lacks spans: {trace:#?}\nall: {:#?}",
            spans.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let a_request = find(&trace, "gw-a", |n| n == "HTTP POST /a2a/{agent}", "inbound request");
    let a_turn = find(&trace, "gw-a", |n| n == "turn", "turn");
    let a_call = find(&trace, "gw-a", |n| n.starts_with("A2A Send"), "outbound A2A call");
    let b_request = find(&trace, "gw-b", |n| n == "HTTP POST /a2a/{agent}", "inbound request");
    let b_turn = find(&trace, "gw-b", |n| n == "turn", "turn");
    let b_model = find(&trace, "gw-b", |n| n.starts_with("chat "), "model request");

    assert_eq!(a_request.parent, CLIENT_SPAN, "A's request is a child of the caller's span");
    let chain = [(a_turn, a_request), (a_call, a_turn), (b_request, a_call), (b_turn, b_request), (b_model, b_turn)];
    for (child, parent) in chain {
        assert!(
            descends(&trace, child, parent),
            "{}/{} is not under {}/{}: {trace:#?}",
            child.service,
            child.name,
            parent.service,
            parent.name
        );
    }
    assert_eq!(b_request.parent, a_call.span_id, "B's request continues A's outbound call (traceparent sent)");
    // Raw ids never name a span: the route's template does.
    assert!(trace.iter().all(|s| !s.name.contains("echo") && !s.name.contains("relay")), "{trace:#?}");
}

/// Accepts connections and never answers: the worst collector, one that hangs exports.
fn black_hole() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_collector_neither_slows_nor_fails_turns() {
    let collector = black_hole();
    let mut gw = gateway("gw-dead", "[agents.echo]\nbackend = \"native\"\n", &collector);
    gw.ready(Duration::from_secs(30)).await;
    assert!(gw.log().contains("exporting traces over OTLP"), "tracing is on: {}", gw.log());
    for i in 0..5 {
        let (answer, took) = send(&gw, "echo", &format!("turn {i}"), &[]).await;
        assert_eq!(state_of(&answer), "TASK_STATE_COMPLETED", "{answer}");
        assert!(took < Duration::from_secs(3), "turn {i} took {took:?} with a hanging collector");
        // Give the exporter time to start (and hang on) a batch between turns.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Shutdown waits for the last export only so long.
    let stopping = Instant::now();
    gw.signal(Signal::SIGTERM);
    assert_eq!(gw.exit_code(Duration::from_secs(20)).await, Some(0), "log:\n{}", gw.log());
    assert!(stopping.elapsed() < Duration::from_secs(15), "shutdown took {:?}", stopping.elapsed());
}
