//! The A2A client the outbound backend uses: card resolution (pinned in documents) and
//! JSON-RPC calls in the remote's version (v1.0, or v0.3 with the rewrites of `v03`).
//!
//! Credentials from `RemoteConfig.auth` go into the `Authorization` header only, and only to
//! the origin (scheme, host, port) of the configured remote URL: a card that names its
//! interface on another origin is refused rather than handed the credentials. Errors and logs
//! carry the remote's name and URL, never the header. Response bodies are read in chunks and
//! refused as soon as they pass [`MAX_BODY`].

use std::time::Duration;

use futures::{Stream, StreamExt};
use gateway_store::{Documents, ReadDocuments};
use gateway_wire::jsonrpc::envelope;
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::tasks::records::{self, REMOTE_CARDS};
use crate::v03::{self, Shape};
use crate::wire::{self, StreamResponse};

/// Largest response body or SSE event read from a remote.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Network trouble, timeouts, 5xx: worth retrying.
    #[error("remote unreachable: {0}")]
    Transport(String),
    /// The remote answered with a JSON-RPC error.
    #[error("remote error {code}: {message}")]
    Remote { code: i64, message: String },
    /// The remote's answer is not A2A.
    #[error("invalid remote response: {0}")]
    Invalid(String),
}

/// The interface chosen from the remote's card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub url: String,
    pub v1: bool,
    pub streaming: bool,
    /// The interface's `tenant`, sent in every request's params (v1.0).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// One `AgentInterface` of a card.
#[derive(Debug, Clone, PartialEq)]
pub struct Interface {
    pub url: String,
    pub binding: String,
    pub version: String,
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PinnedCard {
    source_url: String,
    card: Value,
}

/// `supportedInterfaces`, or (v0.3 cards) interfaces synthesised from the legacy fields.
pub fn interfaces(card: &Value) -> Vec<Interface> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    if let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array).filter(|l| !l.is_empty()) {
        return list
            .iter()
            .filter_map(|i| {
                Some(Interface {
                    url: text(i, "url")?,
                    binding: text(i, "protocolBinding").unwrap_or_else(|| "JSONRPC".into()),
                    version: text(i, "protocolVersion").unwrap_or_else(|| "0.3".into()),
                    tenant: text(i, "tenant"),
                })
            })
            .collect();
    }
    let version = text(card, "protocolVersion").unwrap_or_else(|| "0.3".into());
    let legacy = |url: String, binding: String| Interface { url, binding, version: version.clone(), tenant: None };
    let mut out = Vec::new();
    if let Some(url) = text(card, "url") {
        out.push(legacy(url, text(card, "preferredTransport").unwrap_or_else(|| "JSONRPC".into())));
    }
    for i in card.get("additionalInterfaces").and_then(Value::as_array).into_iter().flatten() {
        if let (Some(u), Some(t)) = (text(i, "url"), text(i, "transport")) {
            out.push(legacy(u, t));
        }
    }
    out
}

fn same_origin(a: &Url, b: &str) -> bool {
    Url::parse(b).is_ok_and(|b| b.origin() == a.origin())
}

/// Picks a JSON-RPC interface, v1.0 first. With credentials to send (`auth_origin`: the
/// configured remote URL), only interfaces on that origin qualify: a card must not be able to
/// send our credentials elsewhere.
pub fn choose(card: &Value, auth_origin: Option<&Url>) -> Result<Endpoint, CallError> {
    let streaming = card.pointer("/capabilities/streaming").and_then(Value::as_bool).unwrap_or(false);
    let jsonrpc: Vec<Interface> = interfaces(card)
        .into_iter()
        .filter(|i| i.binding.eq_ignore_ascii_case("JSONRPC") && Url::parse(&i.url).is_ok())
        .collect();
    if jsonrpc.is_empty() {
        return Err(CallError::Invalid("the remote's card offers no JSON-RPC interface".into()));
    }
    let allowed: Vec<&Interface> =
        jsonrpc.iter().filter(|i| auth_origin.is_none_or(|o| same_origin(o, &i.url))).collect();
    let major = |m: &str| allowed.iter().find(|i| i.version.split('.').next() == Some(m));
    let (iface, v1) = match (major("1"), major("0")) {
        (Some(i), _) => (i, true),
        (None, Some(i)) => (i, false),
        (None, None) => {
            let origin = auth_origin.map(|o| o.origin().ascii_serialization()).unwrap_or_default();
            let named: Vec<String> = jsonrpc
                .iter()
                .filter_map(|i| Url::parse(&i.url).ok().map(|u| u.origin().ascii_serialization()))
                .collect();
            return Err(CallError::Invalid(format!(
                "the remote's card names its JSON-RPC interface on {}, not on the configured remote's origin {origin}; \
                 refusing to send the configured credentials there (configure the remote's url on that origin)",
                named.join(", ")
            )));
        }
    };
    Ok(Endpoint { url: iface.url.clone(), v1, streaming, tenant: iface.tenant.clone() })
}

pub struct Client {
    pub http: reqwest::Client,
    pub endpoint: Endpoint,
    pub auth: Option<String>,
}

fn transport(e: reqwest::Error) -> CallError {
    CallError::Transport(e.without_url().to_string())
}

/// Fetches the remote's card, or reuses the one pinned for this remote and URL.
/// The remote's endpoint from its pinned card; a card not pinned yet is fetched, and pinned
/// when `pin` is given (start-up pins every remote; a backend only reads).
pub async fn resolve(
    http: &reqwest::Client,
    docs: &dyn ReadDocuments,
    pin: Option<&dyn Documents>,
    name: &str,
    url: &str,
    auth: Option<&str>,
) -> Result<Endpoint, CallError> {
    let pinned = records::get::<PinnedCard>(docs, REMOTE_CARDS, name).await.ok().flatten();
    let card = match &pinned {
        Some((p, _)) if p.source_url == url => p.card.clone(),
        _ => {
            let base = url.trim_end_matches('/');
            let mut card = None;
            let candidates = if base.ends_with(".json") {
                vec![base.to_owned()]
            } else {
                vec![format!("{base}/.well-known/agent-card.json"), format!("{base}/.well-known/agent.json")]
            };
            for c in candidates {
                let mut req = http.get(&c).timeout(Duration::from_secs(15));
                if let Some(a) = auth {
                    req = req.header("authorization", a);
                }
                let resp = req.send().await.map_err(transport)?;
                if resp.status().is_success() {
                    card = Some(read_json(resp).await?);
                    break;
                }
                if resp.status().is_server_error() {
                    return Err(CallError::Transport(format!("card fetch answered HTTP {}", resp.status())));
                }
            }
            let card = card.ok_or_else(|| CallError::Invalid(format!("no agent card at {base}")))?;
            if let Some(pin) = pin {
                let doc = PinnedCard { source_url: url.to_owned(), card: card.clone() };
                let _ = records::put(pin, REMOTE_CARDS, name, &doc, pinned.map(|(_, v)| v)).await;
                tracing::info!(remote = name, url, "remote agent card fetched and pinned");
            } else {
                tracing::warn!(remote = name, url, "remote agent card fetched but not pinned (it was not at start-up)");
            }
            card
        }
    };
    let origin = match auth {
        Some(_) => {
            Some(Url::parse(url).map_err(|_| CallError::Invalid(format!("the remote url {url:?} is not a URL")))?)
        }
        None => None,
    };
    choose(&card, origin.as_ref())
}

/// Reads a JSON body in chunks, refusing it as soon as it passes [`MAX_BODY`] (or at once,
/// when its declared length does).
pub async fn read_json(mut resp: reqwest::Response) -> Result<Value, CallError> {
    let too_large = || CallError::Invalid(format!("the remote's response exceeds {MAX_BODY} bytes"));
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| CallError::Invalid(e.to_string()))
}

/// The `result` of a JSON-RPC response envelope in v1.0 form, or its `error`.
fn rpc_result(envelope: &Value, v1: bool) -> Result<Value, CallError> {
    let result = envelope::read_response(envelope).map_err(|answer| match answer {
        envelope::Answer::Error(e) => {
            CallError::Remote { code: e.code, message: e.message.chars().take(500).collect() }
        }
        envelope::Answer::NotAResponse => CallError::Invalid("no result".into()),
    })?;
    Ok(if v1 { result } else { result_from_v03(result) })
}

fn v03_method(m: &str) -> &'static str {
    match m {
        "SendMessage" => "message/send",
        "SendStreamingMessage" => "message/stream",
        "GetTask" => "tasks/get",
        "CancelTask" => "tasks/cancel",
        _ => "tasks/resubscribe",
    }
}

/// v1.0 request params in v0.3 form.
fn params_v03(params: &Value) -> Value {
    let mut out = params.as_object().cloned().unwrap_or_default();
    if let Some(m) = params.get("message") {
        out.insert("message".into(), v03::message_out(m, Shape::JsonRpc));
    }
    if let Some(c) = params.get("configuration") {
        let immediate = c.get("returnImmediately").and_then(Value::as_bool).unwrap_or(false);
        out.insert("configuration".into(), json!({"blocking": !immediate}));
    }
    Value::Object(out)
}

/// A v0.3 result (with `kind`) as a v1.0 StreamResponse value.
pub fn result_from_v03(v: Value) -> Value {
    fn fix_status(s: &mut Map<String, Value>) {
        if let Some(m) = s.remove("message") {
            s.insert("message".into(), v03::message_in(m));
        }
    }
    let Value::Object(mut m) = v else { return v };
    let kind = m.remove("kind").and_then(|k| k.as_str().map(str::to_owned)).unwrap_or_default();
    if let Some(Value::Object(s)) = m.get_mut("status") {
        fix_status(s);
    }
    if let Some(Value::Array(h)) = m.remove("history") {
        m.insert("history".into(), Value::Array(h.into_iter().map(v03::message_in).collect()));
    }
    let fix_artifact = |a: Value| {
        let Value::Object(mut a) = a else { return a };
        if let Some(Value::Array(ps)) = a.remove("parts") {
            a.insert("parts".into(), Value::Array(ps.into_iter().map(v03::part_in).collect()));
        }
        Value::Object(a)
    };
    if let Some(Value::Array(arts)) = m.remove("artifacts") {
        m.insert("artifacts".into(), Value::Array(arts.into_iter().map(fix_artifact).collect()));
    }
    if let Some(a) = m.remove("artifact") {
        m.insert("artifact".into(), fix_artifact(a));
    }
    m.remove("final");
    let key = match kind.as_str() {
        "task" => "task",
        "status-update" => "statusUpdate",
        "artifact-update" => "artifactUpdate",
        _ => return json!({"message": v03::message_in(Value::Object(m))}),
    };
    json!({ key: Value::Object(m) })
}

impl Client {
    pub fn request(&self, method: &str, params: &Value) -> reqwest::RequestBuilder {
        let (method, params) = if self.endpoint.v1 {
            let mut params = params.clone();
            if let (Some(t), Value::Object(m)) = (&self.endpoint.tenant, &mut params) {
                m.entry("tenant").or_insert_with(|| json!(t));
            }
            (method.to_owned(), params)
        } else {
            (v03_method(method).to_owned(), params_v03(params))
        };
        let id = gateway_core::EventId::new().to_string();
        let body = envelope::request(id, &method, params);
        let mut req = self.http.post(&self.endpoint.url).json(&body);
        if self.endpoint.v1 {
            req = req.header("A2A-Version", "1.0");
        }
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        // The remote agent's work joins this call's trace (W3C headers), if it traces.
        if let Some(trace) = gateway_core::trace::current() {
            for (name, value) in trace.headers() {
                req = req.header(name, value);
            }
        }
        req
    }

    /// The span of one call to the remote agent (OpenTelemetry RPC conventions).
    fn span(&self, method: &str) -> tracing::Span {
        tracing::info_span!(
            "a2a_call",
            otel.name = format!("A2A {method}"),
            otel.kind = "client",
            rpc.system = "jsonrpc",
            rpc.method = %method,
            server.address = Url::parse(&self.endpoint.url).ok().and_then(|u| u.host_str().map(str::to_owned)),
        )
    }

    /// A unary call; the result in v1.0 form (SendMessage: `{task}|{message}`; GetTask and
    /// CancelTask: the Task).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        self.call_traced(method, params).instrument(self.span(method)).await
    }

    async fn call_traced(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let resp = self.request(method, &params).timeout(Duration::from_secs(60)).send().await.map_err(transport)?;
        if resp.status().is_server_error() {
            return Err(CallError::Transport(format!("HTTP {}", resp.status())));
        }
        let v = rpc_result(&read_json(resp).await?, self.endpoint.v1)?;
        if !self.endpoint.v1 && matches!(method, "GetTask" | "CancelTask") {
            return Ok(v.get("task").cloned().unwrap_or(v));
        }
        Ok(v)
    }

    /// A streaming call: the remote's events in v1.0 form.
    pub async fn stream(
        &self,
        method: &str,
        params: Value,
    ) -> Result<impl Stream<Item = Result<StreamResponse, CallError>> + Send + use<>, CallError> {
        // The span covers opening the stream (the remote's answer to the call).
        let open = async { self.request(method, &params).header("accept", "text/event-stream").send().await };
        let resp = open.instrument(self.span(method)).await.map_err(transport)?;
        if resp.status().is_server_error() {
            return Err(CallError::Transport(format!("HTTP {}", resp.status())));
        }
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with(gateway_wire::sse::MEDIA_TYPE));
        if !is_sse {
            // An error before the stream started is an ordinary JSON-RPC response.
            let v = rpc_result(&read_json(resp).await?, self.endpoint.v1)?;
            return Err(CallError::Invalid(format!(
                "expected an event stream, got {}",
                v.to_string().chars().take(200).collect::<String>()
            )));
        }
        let v1 = self.endpoint.v1;
        let bytes = resp.bytes_stream().map(|r| r.map_err(transport));
        let events = gateway_wire::sse::decode(bytes, MAX_BODY).filter_map(move |item| async move {
            let data = match item {
                // An event with an empty `data` carries nothing to read.
                Ok(event) if event.data.is_empty() => return None,
                Ok(event) => event.data,
                Err(gateway_wire::sse::Error::Transport(e)) => return Some(Err(e)),
                Err(gateway_wire::sse::Error::TooLarge(too)) => {
                    return Some(Err(CallError::Invalid(format!(
                        "an event of the remote's stream exceeds {} bytes",
                        too.limit
                    ))));
                }
            };
            Some(parse_event(&data, v1))
        });
        Ok(events)
    }
}

/// One event of a remote's stream: a JSON-RPC response whose result is a v1.0 StreamResponse.
fn parse_event(data: &str, v1: bool) -> Result<StreamResponse, CallError> {
    let envelope: Value = serde_json::from_str(data).map_err(|e| CallError::Invalid(e.to_string()))?;
    StreamResponse::from_value(rpc_result(&envelope, v1)?).map_err(|e| CallError::Invalid(e.to_string()))
}

/// Decodes a v1.0 Task value.
pub fn task(v: Value) -> Result<wire::Task, CallError> {
    wire::parse(v).map_err(|e| CallError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TaskState;

    #[test]
    fn legacy_cards_get_synthesised_interfaces() {
        let card = json!({"url": "http://r/", "protocolVersion": "0.3.0", "capabilities": {"streaming": true}});
        assert_eq!(
            choose(&card, None).unwrap(),
            Endpoint { url: "http://r/".into(), v1: false, streaming: true, tenant: None }
        );
        let dual = json!({"supportedInterfaces": [
            {"url": "http://r/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://r/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://r/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        assert_eq!(choose(&dual, None).unwrap().url, "http://r/v1");
        let grpc = json!({"supportedInterfaces": [{"url": "http://g/", "protocolBinding": "GRPC"}]});
        assert!(choose(&grpc, None).unwrap_err().to_string().contains("no JSON-RPC interface"));
    }

    #[test]
    fn v03_results_become_v1_stream_responses() {
        let v = result_from_v03(json!({"kind": "status-update", "taskId": "t", "contextId": "c", "final": true,
            "status": {"state": "input-required", "message": {"kind": "message", "messageId": "m", "role": "agent",
            "parts": [{"kind": "text", "text": "more?"}]}}}));
        match StreamResponse::from_value(v).unwrap() {
            StreamResponse::StatusUpdate(s) => {
                assert_eq!(s.status.state, TaskState::InputRequired);
                assert_eq!(s.status.message.unwrap().parts[0].text.as_deref(), Some("more?"));
            }
            other => panic!("{other:?}"),
        }
    }

    fn endpoint_of(card: Value, auth_origin: Option<&str>) -> Result<Endpoint, CallError> {
        let origin = auth_origin.map(|o| Url::parse(o).unwrap());
        choose(&card, origin.as_ref())
    }

    #[test]
    fn credentials_go_only_to_the_configured_origin() {
        let card = json!({"supportedInterfaces": [
            {"url": "https://evil.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "https://r.example:8443/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        // Without credentials, any origin will do (v1.0 first).
        assert_eq!(endpoint_of(card.clone(), None).unwrap().url, "https://evil.example/rpc");
        // With them, only the configured origin qualifies, even if that means v0.3.
        let e = endpoint_of(card.clone(), Some("https://r.example:8443/card")).unwrap();
        assert_eq!((e.url.as_str(), e.v1), ("https://r.example:8443/v03", false));
        // Same host, other port or scheme: another origin.
        for configured in ["https://r.example/card", "http://r.example:8443/card", "https://other.example:8443/"] {
            let err = endpoint_of(card.clone(), Some(configured)).unwrap_err().to_string();
            assert!(err.contains("refusing to send the configured credentials"), "{configured}: {err}");
            assert!(err.contains("https://evil.example"), "the error names where the card points: {err}");
        }
    }

    #[test]
    fn the_interface_tenant_goes_into_every_request() {
        let card = json!({"supportedInterfaces": [
            {"url": "http://r/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "acme"}]});
        let endpoint = endpoint_of(card, None).unwrap();
        assert_eq!(endpoint.tenant.as_deref(), Some("acme"));
        let client = Client { http: reqwest::Client::new(), endpoint, auth: Some("Bearer s".into()) };
        let req = client.request("GetTask", &json!({"id": "t1"})).build().unwrap();
        let body: Value = serde_json::from_slice(req.body().unwrap().as_bytes().unwrap()).unwrap();
        assert_eq!(body["params"], json!({"id": "t1", "tenant": "acme"}));
        assert_eq!(req.headers()["a2a-version"], "1.0");
        assert_eq!(req.headers()["authorization"], "Bearer s");
    }

    /// Serves `body` once per connection on a local port, with or without a content-length.
    async fn serve_body(body: Vec<u8>, declare_length: bool) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut req = [0u8; 4096];
                    let _ = sock.read(&mut req).await;
                    let head = if declare_length {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n".to_owned()
                    };
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(&body).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        format!("http://{addr}/")
    }

    #[tokio::test]
    async fn oversized_bodies_are_refused_with_or_without_a_declared_length() {
        let big = vec![b' '; MAX_BODY + 10];
        for declared in [true, false] {
            let url = serve_body(big.clone(), declared).await;
            let resp = reqwest::get(&url).await.unwrap();
            let err = read_json(resp).await.unwrap_err().to_string();
            assert!(err.contains("exceeds"), "declared={declared}: {err}");
        }
        let url = serve_body(br#"{"ok": true}"#.to_vec(), false).await;
        assert_eq!(read_json(reqwest::get(&url).await.unwrap()).await.unwrap(), json!({"ok": true}));
    }
}
