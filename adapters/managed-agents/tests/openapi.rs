//! The OpenAPI document (`schemas/managed-agents.openapi.json`, served at `GET /v1/openapi.json`)
//! against the adapter:
//!
//! - every `(method, path)` of [`served_routes`] is documented, and nothing else is;
//! - the document is OpenAPI 3.1.0 JSON whose every `$ref` resolves and whose every schema compiles;
//! - every response of a realistic scenario, driven over HTTP against the real router, the real
//!   Coordinator and Workers, the native backend with the fake model and the local sandbox,
//!   validates against the schema the document gives for its path, method and status; so does
//!   every frame of the event stream;
//! - negative controls: the schemas reject misspelled, missing and unknown fields;
//! - inputs at the edges of what the gateway accepts still come back in the documented (SDK)
//!   form.
//!
//! A validation failure prints the JSON pointer of each violation and the whole body.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_face::FaceContext;
use gateway_managed_agents::webhooks::Webhooks;
use gateway_managed_agents::{BODY_LIMIT, ManagedAgents, openapi, served_routes};
use gateway_models::fake::FakeModel;
use gateway_native::{NativeBackend, NativeConfig};
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{EnvironmentsConfig, RetryPolicy, WorkerConfig};
use gateway_services::SecretBox;
use gateway_services::auth::{Authenticator, generate_key};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const HTTP_METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

fn document() -> Value {
    serde_json::from_str(openapi::DOCUMENT).expect("schemas/managed-agents.openapi.json is not valid JSON")
}

// ------------------------------------------------------------------------------------------
// The document alone
// ------------------------------------------------------------------------------------------

#[test]
fn every_served_route_is_documented_and_no_other() {
    let doc = document();
    let paths = doc["paths"].as_object().expect("paths is an object");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("path item is an object")
                .keys()
                .filter(|k| HTTP_METHODS.contains(&k.as_str()))
                .map(|m| (m.clone(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let routes = served_routes();
    let served: BTreeSet<(String, String)> = routes.iter().map(|(m, p)| ((*m).to_owned(), p.clone())).collect();
    assert_eq!(served.len(), routes.len(), "the route list names a route twice");
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(undocumented.is_empty(), "served but not in the document: {undocumented:?}");
    assert!(unserved.is_empty(), "in the document but not served by the router: {unserved:?}");
}

#[test]
fn every_path_template_parameter_is_declared() {
    let doc = document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let names: Vec<&str> =
            path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
        for (method, op) in item.as_object().unwrap() {
            if !HTTP_METHODS.contains(&method.as_str()) {
                continue;
            }
            let params: Vec<Value> = op["parameters"]
                .as_array()
                .map(|ps| ps.iter().map(|p| resolve(&doc, p).clone()).collect())
                .unwrap_or_default();
            for n in &names {
                assert!(
                    params.iter().any(|p| p["in"] == "path" && p["name"] == *n && p["required"] == true),
                    "{method} {path}: path parameter {n} is not declared as a required path parameter"
                );
            }
            for p in params.iter().filter(|p| p["in"] == "path") {
                let name = p["name"].as_str().unwrap();
                assert!(names.contains(&name), "{method} {path}: path parameter {name} is not in the template");
            }
            assert!(op["operationId"].is_string(), "{method} {path}: no operationId");
            for (status, r) in op["responses"].as_object().expect("responses") {
                let r = resolve(&doc, r);
                assert!(r["description"].is_string(), "{method} {path} {status}: response without description");
            }
        }
    }
}

#[test]
fn the_document_is_openapi_3_1_and_every_ref_resolves() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let info = &doc["info"];
    assert!(info["title"].is_string() && info["version"].is_string(), "info needs title and version");
    assert!(
        info["description"].as_str().is_some_and(|d| d.contains("docs/adr/0007-managed-agents-decisions.md")),
        "info.description names the decisions ADR"
    );
    assert_eq!(doc["servers"], json!([{"url": "/"}]));
    let schemes = doc["components"]["securitySchemes"].as_object().expect("securitySchemes");
    assert!(
        schemes.values().any(|s| s["type"] == "apiKey" && s["in"] == "header" && s["name"] == "x-api-key"),
        "an x-api-key scheme"
    );
    assert!(schemes.values().any(|s| s["type"] == "http" && s["scheme"] == "bearer"), "a bearer scheme");

    let mut refs = Vec::new();
    collect_refs(&doc, "", &mut refs);
    assert!(refs.len() > 100, "the document uses components");
    let mut unresolved = Vec::new();
    for (at, r) in &refs {
        if lookup_ref(&doc, r).is_none() {
            unresolved.push(format!("{at}: {r}"));
        }
    }
    assert!(unresolved.is_empty(), "$refs that do not resolve:\n{}", unresolved.join("\n"));

    // Every named schema compiles as JSON Schema 2020-12 (the OpenAPI 3.1 dialect), formats on.
    let spec = Spec::new();
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        spec.validator(&json!({"$ref": format!("#/components/schemas/{name}")}));
    }
    // Error responses use the shared envelope.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, r) in op["responses"].as_object().unwrap() {
                if status.starts_with('2') {
                    continue;
                }
                let schema = &resolve(&doc, r)["content"]["application/json"]["schema"];
                let target = resolve(&doc, schema);
                let first = &target["allOf"][0]["$ref"];
                assert_eq!(first, "#/components/schemas/ErrorResponse", "{method} {path} {status}: not the envelope");
            }
        }
    }
}

fn collect_refs(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                if k == "$ref" {
                    out.push((at.to_owned(), x.as_str().expect("$ref is a string").to_owned()));
                } else {
                    collect_refs(x, &here, out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_refs(x, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn lookup_ref<'a>(doc: &'a Value, r: &str) -> Option<&'a Value> {
    let pointer = r.strip_prefix('#')?;
    doc.pointer(&percent_decode(pointer))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).expect("utf-8")
}

/// Follows `$ref`s (of any OpenAPI object) to the referenced object.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    let mut v = v;
    for _ in 0..16 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => v = lookup_ref(doc, r).unwrap_or_else(|| panic!("unresolved $ref {r}")),
            None => return v,
        }
    }
    panic!("$ref cycle")
}

// ------------------------------------------------------------------------------------------
// Validation against the document
// ------------------------------------------------------------------------------------------

/// The document and compiled validators for its schemas.
struct Spec {
    doc: Value,
    cache: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Spec {
    fn new() -> Self {
        let doc = document();
        Self { doc, cache: Mutex::new(HashMap::new()) }
    }

    /// A validator for `schema`, a schema of the document (its `$ref`s resolve against the
    /// document's components).
    fn validator(&self, schema: &Value) -> Arc<jsonschema::Validator> {
        let key = schema.to_string();
        if let Some(v) = self.cache.lock().unwrap().get(&key) {
            return Arc::clone(v);
        }
        let mut root = match schema {
            Value::Object(o) => o.clone(),
            other => panic!("a schema object, not {other}"),
        };
        root.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        root.insert("components".into(), self.doc["components"].clone());
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&Value::Object(root))
            .unwrap_or_else(|e| panic!("schema {key} does not compile: {e}"));
        let v = Arc::new(validator);
        self.cache.lock().unwrap().insert(key, Arc::clone(&v));
        v
    }

    fn operation(&self, method: &str, template: &str) -> Option<&Value> {
        let op = self.doc["paths"].get(template)?.get(method.to_ascii_lowercase())?;
        Some(op)
    }

    /// The response object the document gives for a status (exact, then `4XX`/`5XX`).
    fn response(&self, method: &str, template: &str, status: u16) -> Option<&Value> {
        let responses = &self.operation(method, template)?["responses"];
        let r = responses
            .get(status.to_string())
            .or_else(|| responses.get(format!("{}XX", status / 100)))
            .or_else(|| responses.get("default"))?;
        Some(resolve(&self.doc, r))
    }

    fn request_schema(&self, method: &str, template: &str) -> Option<&Value> {
        let body = resolve(&self.doc, self.operation(method, template)?.get("requestBody")?);
        body["content"]["application/json"].get("schema")
    }

    /// The part names the document gives for a `multipart/form-data` request body.
    fn multipart_fields(&self, method: &str, template: &str) -> Option<Vec<String>> {
        let body = resolve(&self.doc, self.operation(method, template)?.get("requestBody")?);
        let schema = resolve(&self.doc, body["content"].get("multipart/form-data")?.get("schema")?);
        Some(schema["properties"].as_object()?.keys().cloned().collect())
    }

    /// Violations of `instance` against `schema`, one line each (JSON pointer, message), with
    /// `oneOf` failures explained against the variants the instance's `type` names.
    fn violations(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.explain(schema, instance, "", 0, &mut out);
        out
    }

    fn explain(&self, schema: &Value, instance: &Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
        let indent = "    ".repeat(depth);
        let validator = self.validator(schema);
        for e in validator.iter_errors(instance) {
            let at = format!("{prefix}{}", e.instance_path().as_str());
            let shown = if at.is_empty() { "(root)" } else { at.as_str() };
            let schema_path = e.schema_path().as_str();
            out.push(format!("{indent}at {shown}: {} [schema {schema_path}]", short(&e.to_string())));
            if e.kind().keyword() != "oneOf" || depth >= 6 {
                continue;
            }
            // Explain a oneOf failure against the branch the discriminator picks (or every branch).
            let sub = instance.pointer(e.instance_path().as_str()).unwrap_or(instance);
            let Some(node) = schema_path.strip_suffix("/oneOf").and_then(|p| self.doc.pointer(p)) else { continue };
            let discriminator = &node["discriminator"];
            let branches: Vec<(String, Value)> =
                match (discriminator["propertyName"].as_str(), discriminator["mapping"].as_object()) {
                    (Some(prop), Some(mapping)) => {
                        match sub.get(prop).and_then(Value::as_str).and_then(|v| mapping.get(v)) {
                            Some(target) => vec![(ref_name(target), json!({"$ref": target}))],
                            None => {
                                let known: Vec<&String> = mapping.keys().collect();
                                out.push(format!("{indent}  {prop} {} is none of {known:?}", sub[prop]));
                                continue;
                            }
                        }
                    }
                    _ => node["oneOf"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                        .map(|(i, b)| (b.get("$ref").map(ref_name).unwrap_or_else(|| format!("oneOf[{i}]")), b.clone()))
                        .collect(),
                };
            for (name, branch) in branches {
                if branch == json!({"type": "null"}) && !sub.is_null() {
                    continue;
                }
                let mut inner = Vec::new();
                self.explain(&branch, sub, &at, depth + 1, &mut inner);
                if !inner.is_empty() {
                    out.push(format!("{indent}  as {name}:"));
                    out.extend(inner);
                }
            }
        }
    }
}

fn ref_name(r: &Value) -> String {
    r.as_str().and_then(|r| r.rsplit('/').next()).unwrap_or("?").to_owned()
}

fn short(s: &str) -> String {
    if s.chars().count() > 400 { format!("{}…", s.chars().take(400).collect::<String>()) } else { s.to_owned() }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

// ------------------------------------------------------------------------------------------
// The gateway, in process
// ------------------------------------------------------------------------------------------

struct Gateway {
    base: String,
    key: String,
    gw: TestGateway,
}

async fn start() -> Gateway {
    // A small delay between streamed chunks lets previews reach the stream before the commit.
    let model = Arc::new(FakeModel::with_chunk_delay(Duration::from_millis(10)));
    let workers = WorkerConfig {
        max_turns: 2,
        claim_batch: 16,
        lease: Duration::from_secs(10),
        poll: Duration::from_millis(100),
        retry: RetryPolicy { max_retries: 1, base: Duration::from_millis(20), max: Duration::from_millis(50) },
        shutdown_grace: Duration::from_millis(200),
        ..WorkerConfig::default()
    };
    let gw = TestGateway::builder()
        .backend_with(BackendRef::Native, move |envs| {
            Arc::new(NativeBackend::new(model, Some(Arc::clone(envs)), NativeConfig::default()))
        })
        .local_sandbox()
        .environments(EnvironmentsConfig { idle: Duration::from_secs(300), ..Default::default() })
        .host("openapi-host")
        .instance("openapi")
        .subscription_poll(Duration::from_millis(100))
        .workers(workers)
        .build()
        .await;
    assert!(!gw.coordinator.offer().providers.is_empty(), "the local sandbox provider works here");
    // A configured key: requests must present it (x-api-key or Bearer), so 401 is reachable.
    let key = generate_key();
    gw.store.create_api_key("openapi-test", &key.hash).await.unwrap();
    let webhooks = Webhooks::start(gw.coordinator.clone(), SecretBox::generate(), Default::default()).await.unwrap();
    let api = ManagedAgents {
        face: FaceContext::of(&gw, Arc::new(Authenticator::new(Arc::clone(&gw.store))), "http://127.0.0.1"),
        webhooks,
        default_provider: ProviderTier::new("local"),
        keep_alive: Duration::from_secs(15),
        vaults: Arc::new(gateway_services::vaults::VaultService::new(Arc::clone(&gw.store), SecretBox::generate())),
        server_probe: None,
    };
    let app = gateway_managed_agents::router(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(gw.shutdown.clone().cancelled_owned());
    // On the gateway's tracker, as the binary runs it: stopping waits for the server.
    gw.tasks.spawn(async move { serve.await });
    Gateway { base: format!("http://{addr}"), key: key.secret, gw }
}

impl Gateway {
    async fn stop(self) {
        self.gw.stop().await;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Auth {
    ApiKey,
    Bearer,
    None,
    Wrong,
}

/// An HTTP client that validates every response against the document and records what it saw.
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    spec: Spec,
    failures: Mutex<Vec<String>>,
    /// (METHOD, template) -> statuses seen.
    seen: Mutex<BTreeMap<(String, String), BTreeSet<u16>>>,
    frames: Mutex<usize>,
}

struct Reply {
    status: u16,
    body: Value,
}

/// A response as it came, before any validation.
struct Raw {
    status: u16,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
    }
}

async fn send(method: &str, path: &str, rb: reqwest::RequestBuilder) -> Raw {
    let resp = rb.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let bytes = resp.bytes().await.unwrap_or_else(|e| panic!("{method} {path}: {e}")).to_vec();
    Raw { status, headers, bytes }
}

/// Whether a response's `content-type` falls in a documented media range.
fn media_matches(range: &str, content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match range.strip_suffix("/*") {
        Some("*") => true,
        Some(kind) => essence.split('/').next() == Some(kind),
        None => essence == range,
    }
}

/// A downloaded 200.
struct Download {
    content_type: String,
    disposition: Option<String>,
    bytes: Vec<u8>,
}

/// One part of a hand-built `multipart/form-data` body.
struct Part<'a> {
    name: &'a str,
    filename: Option<&'a str>,
    content_type: Option<&'a str>,
    data: &'a [u8],
}

impl<'a> Part<'a> {
    fn file(filename: &'a str, content_type: Option<&'a str>, data: &'a [u8]) -> Self {
        Self { name: "file", filename: Some(filename), content_type, data }
    }

    /// One file of a skill upload: its filename is its path.
    fn skill_file(path: &'a str, data: &'a [u8]) -> Self {
        Self { name: "files", filename: Some(path), content_type: Some("application/octet-stream"), data }
    }

    fn field(name: &'a str, value: &'a str) -> Self {
        Self { name, filename: None, content_type: None, data: value.as_bytes() }
    }
}

impl Reply {
    fn ok(&self) -> &Value {
        assert_eq!(self.status, 200, "expected 200, got {}: {}", self.status, pretty(&self.body));
        &self.body
    }

    fn id(&self) -> String {
        self.ok()["id"].as_str().expect("an id").to_owned()
    }

    fn error_code(&self) -> Option<&str> {
        self.body["error"]["details"]["error_code"].as_str()
    }

    fn expect(&self, status: u16, code: Option<&str>) -> &Self {
        assert_eq!(self.status, status, "{}", pretty(&self.body));
        assert_eq!(self.error_code(), code, "{}", pretty(&self.body));
        self
    }
}

impl Client {
    fn new(gw: &Gateway) -> Self {
        Self {
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap(),
            base: gw.base.clone(),
            key: gw.key.clone(),
            spec: Spec::new(),
            failures: Mutex::new(Vec::new()),
            seen: Mutex::new(BTreeMap::new()),
            frames: Mutex::new(0),
        }
    }

    /// Records a disagreement (once: a report repeated with another body is the same finding).
    fn fail(&self, report: String) {
        let mut failures = self.failures.lock().unwrap();
        let finding = |r: &str| r.split("\nbody:").next().unwrap_or_default().to_owned();
        let key = finding(&report);
        if !failures.iter().any(|f| finding(f) == key) {
            // Also printed now, in case a later assertion ends the test first.
            eprintln!("{report}\n");
            failures.push(report);
        }
    }

    fn request(&self, method: Method, path: &str, auth: Auth) -> reqwest::RequestBuilder {
        let rb = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("anthropic-beta", "managed-agents-2026-04-01");
        match auth {
            Auth::ApiKey => rb.header("x-api-key", &self.key),
            Auth::Bearer => rb.bearer_auth(&self.key),
            Auth::None => rb,
            Auth::Wrong => rb.header("x-api-key", "gwk_not_a_key"),
        }
    }

    /// Sends a JSON request (validating its body against the documented request body when it
    /// is expected to succeed) and validates the response.
    async fn call(&self, method: Method, template: &str, path: &str, body: Option<Value>) -> Reply {
        self.call_as(method, template, path, body, Auth::ApiKey).await
    }

    async fn call_as(&self, method: Method, template: &str, path: &str, body: Option<Value>, auth: Auth) -> Reply {
        let mut rb = self.request(method.clone(), path, auth);
        if let Some(b) = &body {
            rb = rb.json(b);
        }
        let reply = self.finish(method.as_str(), template, path, rb).await;
        if let (Some(b), 200) = (&body, reply.status) {
            self.check_request(method.as_str(), template, b);
        }
        reply
    }

    /// Sends `raw` bytes as a JSON body (for malformed and oversized bodies).
    async fn call_raw(&self, method: Method, template: &str, path: &str, raw: Vec<u8>) -> Reply {
        let rb = self.request(method.clone(), path, Auth::ApiKey).header("content-type", "application/json").body(raw);
        self.finish(method.as_str(), template, path, rb).await
    }

    async fn finish(&self, method: &str, template: &str, path: &str, rb: reqwest::RequestBuilder) -> Reply {
        let raw = send(method, path, rb).await;
        self.judge(method, template, path, raw)
    }

    /// Validates a JSON response (every response but a download's 200).
    fn judge(&self, method: &str, template: &str, path: &str, raw: Raw) -> Reply {
        let Raw { status, bytes, .. } = &raw;
        let status = *status;
        let request_id = raw.header("request-id");
        let retry = raw.header("x-should-retry");
        let content_type = raw.header("content-type").unwrap_or_default();
        let body: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                self.fail(format!(
                    "{method} {path} -> {status}: body is not JSON ({e}): {}",
                    String::from_utf8_lossy(bytes)
                ));
                Value::Null
            }
        };
        let what = format!("{method} {template} ({path}) -> {status}");
        if !content_type.starts_with("application/json") {
            self.fail(format!("{what}: content-type {content_type:?}, not application/json"));
        }
        match &request_id {
            None => self.fail(format!("{what}: no request-id header")),
            Some(id) if status >= 400 && body["request_id"] != *id => {
                self.fail(format!("{what}: request_id {} differs from the request-id header {id}", body["request_id"]))
            }
            _ => {}
        }
        if status == 409 && retry.as_deref() != Some("false") {
            self.fail(format!("{what}: 409 without x-should-retry: false"));
        }
        self.check_response(method, template, status, "application/json", &body, &what);
        Reply { status, body }
    }

    /// Sends a `multipart/form-data` upload to `POST /v1/files`.
    async fn upload(&self, parts: &[Part<'_>]) -> Reply {
        self.upload_to(FILES, FILES, parts).await
    }

    /// Sends a `multipart/form-data` upload to `POST path`, built by hand (a fixed boundary,
    /// one part each). The parts of an accepted upload must be fields the document names.
    async fn upload_to(&self, template: &str, path: &str, parts: &[Part<'_>]) -> Reply {
        const BOUNDARY: &str = "openapi-test-boundary-Zm9ybS1kYXRh";
        let mut body = Vec::new();
        for p in parts {
            body.extend_from_slice(
                format!("--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"{}\"", p.name).as_bytes(),
            );
            if let Some(f) = p.filename {
                body.extend_from_slice(format!("; filename=\"{f}\"").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            if let Some(t) = p.content_type {
                body.extend_from_slice(format!("content-type: {t}\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            body.extend_from_slice(p.data);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        let rb = self
            .request(Method::POST, path, Auth::ApiKey)
            .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
            .body(body);
        let reply = self.finish("POST", template, path, rb).await;
        if reply.status == 200 {
            match self.spec.multipart_fields("POST", template) {
                None => self.fail(format!("POST {template}: the document has no multipart/form-data request body")),
                Some(fields) => {
                    for p in parts.iter().filter(|p| !fields.iter().any(|f| f == p.name)) {
                        self.fail(format!("POST {template}: accepted a part {:?} the document does not name", p.name));
                    }
                }
            }
        }
        reply
    }

    /// Downloads raw content. A 200 must come in a media type the document gives for it
    /// (not JSON), with the announced length; its bytes are the caller's to check. Any other
    /// answer is an error envelope, validated like every response.
    async fn download(&self, template: &str, path: &str) -> Result<Download, Reply> {
        let raw = send("GET", path, self.request(Method::GET, path, Auth::ApiKey)).await;
        if raw.status != 200 {
            return Err(self.judge("GET", template, path, raw));
        }
        self.seen.lock().unwrap().entry(("GET".into(), template.into())).or_default().insert(200);
        let what = format!("GET {template} ({path}) -> 200");
        if raw.header("request-id").is_none() {
            self.fail(format!("{what}: no request-id header"));
        }
        let content_type = raw.header("content-type").unwrap_or_default();
        let documented: Vec<String> = self
            .spec
            .response("GET", template, 200)
            .and_then(|r| r["content"].as_object())
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        if documented.iter().any(|m| m == "application/json")
            || !documented.iter().any(|m| media_matches(m, &content_type))
        {
            self.fail(format!("{what}: content-type {content_type:?}; documented (never JSON): {documented:?}"));
        }
        if raw.header("content-length") != Some(raw.bytes.len().to_string()) {
            self.fail(format!(
                "{what}: content-length {:?} for {} bytes",
                raw.header("content-length"),
                raw.bytes.len()
            ));
        }
        Ok(Download { content_type, disposition: raw.header("content-disposition"), bytes: raw.bytes })
    }

    fn check_response(&self, method: &str, template: &str, status: u16, media: &str, body: &Value, what: &str) {
        self.seen.lock().unwrap().entry((method.to_owned(), template.to_owned())).or_default().insert(status);
        let Some(response) = self.spec.response(method, template, status) else {
            self.fail(format!("{what}: the document has no response for this status\nbody:\n{}", pretty(body)));
            return;
        };
        let Some(schema) = response["content"][media]["schema"].as_object().map(|o| Value::Object(o.clone())) else {
            self.fail(format!("{what}: the document gives no {media} schema for this response"));
            return;
        };
        let v = self.spec.violations(&schema, body);
        if !v.is_empty() {
            self.fail(format!("{what}: body does not match {schema}\n{}\nbody:\n{}", v.join("\n"), pretty(body)));
        }
    }

    fn check_request(&self, method: &str, template: &str, body: &Value) {
        let Some(schema) = self.spec.request_schema(method, template).cloned() else {
            self.fail(format!("{method} {template}: sent a body but the document has no requestBody"));
            return;
        };
        let v = self.spec.violations(&schema, body);
        if !v.is_empty() {
            self.fail(format!(
                "{method} {template}: an accepted request body does not match the documented {schema}\n{}\nbody:\n{}",
                v.join("\n"),
                pretty(body)
            ));
        }
    }

    /// Opens an event stream. Non-200 answers are validated like any response.
    async fn stream(&self, template: &str, path: &str, last_event_id: Option<&str>) -> Result<Sse, Reply> {
        // The official SDK sends `accept: application/json` on the stream request too.
        let mut rb = self
            .request(Method::GET, path, Auth::Bearer)
            .header("accept", "application/json")
            .timeout(Duration::from_secs(600));
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id);
        }
        let resp = rb.send().await.unwrap();
        let status = resp.status().as_u16();
        if status != 200 {
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            let what = format!("GET {template} ({path}) -> {status}");
            self.check_response("GET", template, status, "application/json", &body, &what);
            return Err(Reply { status, body });
        }
        self.seen.lock().unwrap().entry(("GET".into(), template.into())).or_default().insert(200);
        let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        if !content_type.starts_with("text/event-stream") {
            self.fail(format!("GET {path}: stream content-type {content_type:?}"));
        }
        if self.spec.response("GET", template, 200).and_then(|r| r["content"].get("text/event-stream")).is_none() {
            self.fail(format!("GET {template}: the document has no text/event-stream response"));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut buf = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let raw: String = buf.drain(..end + 2).collect();
                    if tx.send(raw).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Sse { template: template.to_owned(), rx, task, previews_started: BTreeSet::new() })
    }

    /// Validates one SSE frame against the document; returns (event name, data) for data frames.
    fn check_frame(&self, sse: &mut Sse, raw: &str) -> Option<(String, Value)> {
        let (mut id, mut event, mut data) = (None, None, Vec::new());
        for line in raw.lines() {
            if line.starts_with(':') || line.is_empty() {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => id = Some(value.to_owned()),
                "event" => event = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                other => self.fail(format!("{}: unexpected SSE field {other:?} in frame {raw:?}", sse.template)),
            }
        }
        if data.is_empty() && event.is_none() {
            return None; // a comment (keep-alive)
        }
        *self.frames.lock().unwrap() += 1;
        let what = format!("GET {} stream frame {raw:?}", sse.template);
        if data.len() != 1 {
            self.fail(format!("{what}: {} data lines, not exactly one", data.len()));
            return None;
        }
        let Ok(value) = serde_json::from_str::<Value>(&data[0]) else {
            self.fail(format!("{what}: data is not JSON"));
            return None;
        };
        let Some(event) = event else {
            self.fail(format!("{what}: no event: line"));
            return None;
        };
        if value["type"] != event.as_str() {
            self.fail(format!("{what}: event {event:?} differs from data.type {}", value["type"]));
        }
        let preview = matches!(event.as_str(), "event_start" | "event_delta");
        match (&id, preview || event == "error") {
            (Some(id), false) if value["id"] == id.as_str() => {}
            (None, true) => {}
            _ => self.fail(format!("{what}: id line {id:?} does not fit (data.id {})", value["id"])),
        }
        match event.as_str() {
            "event_start" => {
                sse.previews_started.insert(value["event"]["id"].as_str().unwrap_or_default().to_owned());
            }
            "event_delta" if !sse.previews_started.contains(value["event_id"].as_str().unwrap_or_default()) => {
                self.fail(format!("{what}: a delta before its event_start"));
            }
            _ => {}
        }
        let media = self.spec.response("GET", &sse.template, 200).map(|r| &r["content"]["text/event-stream"]);
        match media.and_then(|m| m.get("x-frame-data")) {
            None => self.fail(format!("GET {}: the document gives no x-frame-data schema", sse.template)),
            Some(schema) => {
                let v = self.spec.violations(schema, &value);
                if !v.is_empty() {
                    self.fail(format!(
                        "{what}: data does not match {schema}\n{}\ndata:\n{}",
                        v.join("\n"),
                        pretty(&value)
                    ));
                }
            }
        }
        Some((event, value))
    }

    /// Reads frames until `stop` accepts one (or the stream ends); returns the data frames.
    async fn read_until(&self, sse: &mut Sse, stop: impl Fn(&str, &Value) -> bool) -> Vec<(String, Value)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let raw = match tokio::time::timeout(left, sse.rx.recv()).await {
                Ok(Some(raw)) => raw,
                Ok(None) => return out,
                Err(_) => panic!("stream {}: timed out; frames so far: {out:?}", sse.template),
            };
            if let Some((event, data)) = self.check_frame(sse, &raw) {
                let done = stop(&event, &data);
                out.push((event, data));
                if done {
                    return out;
                }
            }
        }
    }
}

struct Sse {
    template: String,
    rx: mpsc::UnboundedReceiver<String>,
    task: tokio::task::JoinHandle<()>,
    previews_started: BTreeSet<String>,
}

impl Drop for Sse {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn idle_with(reason: &'static str) -> impl Fn(&str, &Value) -> bool {
    move |event, data| event == "session.status_idle" && data["stop_reason"]["type"] == reason
}

fn types(frames: &[(String, Value)]) -> Vec<&str> {
    frames.iter().map(|(e, _)| e.as_str()).collect()
}

fn say(text: &str) -> Value {
    json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]})
}

const AGENTS: &str = "/v1/agents";
const AGENT: &str = "/v1/agents/{agent_id}";
const AGENT_ARCHIVE: &str = "/v1/agents/{agent_id}/archive";
const AGENT_VERSIONS: &str = "/v1/agents/{agent_id}/versions";
const ENVS: &str = "/v1/environments";
const ENV: &str = "/v1/environments/{environment_id}";
const ENV_ARCHIVE: &str = "/v1/environments/{environment_id}/archive";
const SESSIONS: &str = "/v1/sessions";
const SESSION: &str = "/v1/sessions/{session_id}";
const SESSION_ARCHIVE: &str = "/v1/sessions/{session_id}/archive";
const SESSION_RELEASE: &str = "/v1/sessions/{session_id}/environment/release";
const RESOURCES: &str = "/v1/sessions/{session_id}/resources";
const RESOURCE: &str = "/v1/sessions/{session_id}/resources/{resource_id}";
const FILES: &str = "/v1/files";
const FILE: &str = "/v1/files/{file_id}";
const FILE_CONTENT: &str = "/v1/files/{file_id}/content";
const SKILLS: &str = "/v1/skills";
const SKILL: &str = "/v1/skills/{skill_id}";
const SKILL_VERSIONS: &str = "/v1/skills/{skill_id}/versions";
const SKILL_VERSION: &str = "/v1/skills/{skill_id}/versions/{version}";
const EVENTS: &str = "/v1/sessions/{session_id}/events";
const STREAM: &str = "/v1/sessions/{session_id}/events/stream";
const STREAM_ALIAS: &str = "/v1/sessions/{session_id}/stream";
const OPENAPI: &str = "/v1/openapi.json";

const WORK: &str = "/v1/environments/{environment_id}/work";
const WORK_POLL: &str = "/v1/environments/{environment_id}/work/poll";
const WORK_STATS: &str = "/v1/environments/{environment_id}/work/stats";
const WORK_ITEM: &str = "/v1/environments/{environment_id}/work/{work_id}";
const WORK_ACK: &str = "/v1/environments/{environment_id}/work/{work_id}/ack";
const WORK_HEARTBEAT: &str = "/v1/environments/{environment_id}/work/{work_id}/heartbeat";
const WORK_STOP: &str = "/v1/environments/{environment_id}/work/{work_id}/stop";
const KEYS: &str = "/v1/environments/{environment_id}/keys";
const WEBHOOKS: &str = "/v1/webhooks";
const WEBHOOK: &str = "/v1/webhooks/{webhook_id}";
const WEBHOOK_ENABLE: &str = "/v1/webhooks/{webhook_id}/enable";
const KEY: &str = "/v1/environments/{environment_id}/keys/{key_id}";
const VAULTS: &str = "/v1/vaults";
const VAULT: &str = "/v1/vaults/{vault_id}";
const VAULT_ARCHIVE: &str = "/v1/vaults/{vault_id}/archive";
const CREDENTIALS: &str = "/v1/vaults/{vault_id}/credentials";
const CREDENTIAL: &str = "/v1/vaults/{vault_id}/credentials/{credential_id}";
const CREDENTIAL_ARCHIVE: &str = "/v1/vaults/{vault_id}/credentials/{credential_id}/archive";
const CREDENTIAL_VALIDATE: &str = "/v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate";

/// The release of an environment whose host is gone (the gateway's extension): refused for a
/// session without one, granted for one realized on a host that never heartbeats here. The
/// gateway's own Workers are stopped first, so the test's claim on the gone host is the only one.
async fn lost_environment(c: &Client, gw: &mut Gateway) {
    use gateway_core::run::WorkerOffer;
    use gateway_core::session::EnvironmentState;
    use gateway_store::{Commit, EnvironmentChange, LeaseTerms, RunOutcome, Settlement};
    gw.gw.stop_workers().await;
    let agent = c
        .call(Method::POST, AGENTS, AGENTS, Some(json!({"name": "lost", "model": "claude-sonnet-4-6"})))
        .await
        .ok()
        .clone();
    let env =
        c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "lost", "config": {"type": "cloud"}}))).await.ok().clone();
    let session = c
        .call(Method::POST, SESSIONS, SESSIONS, Some(json!({"agent": agent["id"], "environment_id": env["id"]})))
        .await
        .ok()
        .clone();
    let sid = session["id"].as_str().unwrap().to_owned();
    let release = format!("/v1/sessions/{sid}/environment/release");
    c.call(Method::POST, SESSION_RELEASE, &release, None).await.expect(409, Some("environment_not_lost"));

    c.call(Method::POST, EVENTS, &format!("/v1/sessions/{sid}/events"), Some(say("hello"))).await.ok();
    let gone = WorkerOffer {
        worker: "gone#0".into(),
        host: "gone-host".into(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    };
    let terms = LeaseTerms { lease: Duration::from_secs(10), host_ttl: Duration::from_secs(90) };
    let claim = gw.gw.store.claim_run(&gone, terms).await.unwrap().expect("the queued run");
    let realized = EnvironmentChange { state: EnvironmentState::Realized, host: Some("gone-host".into()) };
    gw.gw
        .store
        .commit(&claim.fence, Commit { events: vec![], environment: Some(realized), bindings: vec![] })
        .await
        .unwrap();
    let done = Settlement { events: vec![], outcome: RunOutcome::Completed, bindings: vec![] };
    gw.gw.store.settle(&claim.fence, done).await.unwrap();

    let released = c.call(Method::POST, SESSION_RELEASE, &release, None).await.ok().clone();
    assert_eq!(released["id"], sid.as_str(), "the session comes back");
    let events =
        c.call(Method::GET, EVENTS, &format!("/v1/sessions/{sid}/events?order=desc&limit=1"), None).await.ok().clone();
    let last = &events["data"][0];
    assert_eq!(last["type"], "session.error", "{}", pretty(last));
    assert!(last["error"]["message"].as_str().unwrap().contains("gone-host"), "{}", pretty(last));
    c.call(Method::POST, SESSION_RELEASE, &release, None).await.expect(409, Some("environment_not_lost"));
}

/// A self-hosted session driven through its work queue as an executor would: a tool call asks
/// for compute, the item is polled, acknowledged, beaten and stopped, and the call answered.
async fn self_hosted_turn(c: &Client, env: &str, session: &str, cloud_env: &str) {
    let w = |suffix: &str| format!("/v1/environments/{env}{suffix}");
    let key = c.call(Method::POST, KEYS, &w("/keys"), Some(json!({"name": "executor"}))).await;
    let key_id = key.id();
    assert!(key.ok()["key"].as_str().is_some_and(|k| k.starts_with("gwe_")), "the secret, once");
    let keys = c.call(Method::GET, KEYS, &w("/keys"), None).await;
    assert!(keys.ok()["data"][0].get("key").is_none(), "a listed key never shows its secret");
    c.call(Method::POST, KEYS, &format!("/v1/environments/{cloud_env}/keys"), None)
        .await
        .expect(400, Some("environment_not_self_hosted"));
    c.call(Method::GET, WORK_POLL, &format!("/v1/environments/{cloud_env}/work/poll"), None)
        .await
        .expect(400, Some("environment_not_self_hosted"));

    let empty = c.call(Method::GET, WORK_POLL, &w("/work/poll"), None).await;
    assert_eq!(empty.ok(), &Value::Null, "an empty poll is 200 null");
    c.call(Method::GET, WORK_POLL, &w("/work/poll?block_ms=0"), None).await.expect(400, None);
    c.call(
        Method::POST,
        EVENTS,
        &format!("/v1/sessions/{session}/events"),
        Some(say(r#"tool:bash {"command":"echo hi"}"#)),
    )
    .await
    .ok();
    let deadline = Instant::now() + Duration::from_secs(30);
    let item = loop {
        let polled =
            c.call(Method::GET, WORK_POLL, &w("/work/poll?block_ms=500&reclaim_older_than_ms=60000"), None).await;
        if !polled.ok().is_null() {
            break polled.body;
        }
        assert!(Instant::now() < deadline, "the tool call never queued work");
    };
    assert_eq!(item["data"]["id"], session);
    assert_eq!(item["state"], "queued");
    let work = item["id"].as_str().unwrap().to_owned();
    let i = |suffix: &str| format!("/v1/environments/{env}/work/{work}{suffix}");
    let stats = c.call(Method::GET, WORK_STATS, &w("/work/stats"), None).await;
    assert_eq!(stats.ok()["pending"], 1, "polled, not yet acknowledged");
    assert_eq!(c.call(Method::POST, WORK_ACK, &i("/ack"), None).await.ok()["state"], "starting");
    c.call(Method::POST, WORK_ACK, &i("/ack"), None).await.expect(409, Some("work_state_conflict"));
    let beat = c.call(Method::POST, WORK_HEARTBEAT, &i("/heartbeat?expected_last_heartbeat=NO_HEARTBEAT"), None).await;
    assert_eq!(beat.ok()["lease_extended"], true);
    let token = beat.ok()["last_heartbeat"].as_str().unwrap().to_owned();
    let stale = c.call(Method::POST, WORK_HEARTBEAT, &i("/heartbeat?expected_last_heartbeat=NO_HEARTBEAT"), None).await;
    stale.expect(412, Some("heartbeat_precondition_failed"));
    assert_eq!(stale.body["error"]["details"]["current_state"]["state"], "active");
    let again = format!("/heartbeat?expected_last_heartbeat={}&desired_ttl_seconds=60", urlencode(&token));
    assert_eq!(c.call(Method::POST, WORK_HEARTBEAT, &i(&again), None).await.ok()["ttl_seconds"], 60);
    c.call(Method::GET, WORK_ITEM, &i(""), None).await.ok();
    let updated = c.call(Method::POST, WORK_ITEM, &i(""), Some(json!({"metadata": {"host": "vm-1"}}))).await;
    assert_eq!(updated.ok()["metadata"]["host"], "vm-1");
    c.call(Method::GET, WORK, &w("/work?limit=5"), None).await.ok();

    // The executor answers the call; the turn ends.
    let parked = wait_status(c, session, "idle").await;
    assert_eq!(parked["environment"]["status"], "connected", "{}", pretty(&parked));
    let events = c.call(Method::GET, EVENTS, &format!("/v1/sessions/{session}/events"), None).await;
    let data = events.ok()["data"].as_array().unwrap().clone();
    let names: Vec<&str> = data.iter().filter_map(|e| e["type"].as_str()).collect();
    for t in
        ["agent.session.environment.pending", "agent.session.requires_action", "agent.session.environment.connected"]
    {
        assert!(names.contains(&t), "{t} in {names:?}");
    }
    let tool_use = data.iter().find(|e| e["type"] == "agent.tool_use").expect("agent.tool_use");
    c.call(
        Method::POST,
        EVENTS,
        &format!("/v1/sessions/{session}/events"),
        Some(json!({"events": [{"type": "user.tool_result", "tool_use_id": tool_use["id"], "is_error": false,
                                "content": [{"type": "text", "text": "hi"}]}]})),
    )
    .await
    .ok();
    wait_status(c, session, "idle").await;
    let stopped = c.call(Method::POST, WORK_STOP, &i("/stop"), Some(json!({"force": true}))).await;
    assert_eq!(stopped.ok()["state"], "stopped");
    c.call(Method::POST, WORK_STOP, &i("/stop"), None).await.expect(409, Some("work_already_stopped"));
    let ended = c.call(Method::GET, SESSION, &format!("/v1/sessions/{session}"), None).await;
    assert_eq!(ended.ok()["environment"]["status"], "disconnected");
    c.call(Method::DELETE, KEY, &format!("/v1/environments/{env}/keys/{key_id}"), None).await.ok();
    c.call(Method::DELETE, KEY, &format!("/v1/environments/{env}/keys/{key_id}"), None)
        .await
        .expect(404, Some("environment_key_not_found"));
}

/// Files and the file resources of sessions (ADR 0017): uploads, lists, the content, mounts
/// at creation and later, and the guard that keeps a mounted file from being deleted.
async fn files_and_resources(c: &Client, agent_id: &str, env_id: &str) {
    const UNKNOWN_FILE: &str = "/v1/files/file_0000000000000000000000";
    let notes = "first line\nsecond: h\u{e9}llo \u{2713}\n".as_bytes().to_vec();
    let file = c.upload(&[Part::file("notes.txt", Some("text/plain"), &notes)]).await;
    let file_id = file.id();
    assert_eq!(file.ok()["size_bytes"], notes.len(), "{}", pretty(&file.body));
    assert_eq!(file.ok()["mime_type"], "text/plain");
    let blob = [0u8, 0xff, b'\r', b'\n', 0x80];
    let other = c.upload(&[Part::file("dir/blob.bin", None, &blob)]).await;
    let other_id = other.id();
    assert_eq!(other.ok()["filename"], "blob.bin", "the last path component");
    assert_eq!(other.ok()["mime_type"], "application/octet-stream", "the default type");
    c.upload(&[Part::field("expires_in_seconds", "3600"), Part::file("x.txt", None, b"x")])
        .await
        .expect(400, Some("not_supported"));
    // Refused after its file part was read: the file is not stored (the list below starts
    // with `other`).
    c.upload(&[Part::file("late.txt", None, b"late"), Part::field("expires_in_seconds", "3600")])
        .await
        .expect(400, Some("not_supported"));
    c.upload(&[Part::field("purpose", "x")]).await.expect(400, None);
    c.call(Method::POST, FILES, FILES, Some(json!({"file": "not multipart"}))).await.expect(400, None);

    // Metadata, lists, content.
    let f = |suffix: &str| format!("/v1/files/{file_id}{suffix}");
    assert_eq!(c.call(Method::GET, FILE, &f(""), None).await.ok(), file.ok());
    let first = c.call(Method::GET, FILES, "/v1/files?limit=1", None).await;
    assert_eq!(first.ok()["data"][0]["id"], other_id, "newest first, and no refused upload");
    let next = first.ok()["next_page"].as_str().expect("a next page").to_owned();
    let second = c.call(Method::GET, FILES, &format!("/v1/files?limit=1&page={next}"), None).await;
    assert_eq!(second.ok()["data"][0]["id"], file_id);
    let named = c
        .call(
            Method::GET,
            FILES,
            &format!("/v1/files?ids[]={file_id}&ids[]={other_id}&ids[]=file_0000000000000000000000"),
            None,
        )
        .await;
    assert_eq!(named.ok()["data"].as_array().unwrap().len(), 2, "unknown ids are left out");
    c.call(Method::GET, FILES, &format!("/v1/files?ids[]={file_id}&limit=5"), None).await.expect(400, None);
    c.call(Method::GET, FILES, "/v1/files?limit=1001", None).await.expect(400, None);
    let scoped = c.call(Method::GET, FILES, "/v1/files?scope_id=scope_1", None).await;
    assert_eq!(scoped.ok()["data"], json!([]), "no file belongs to a scope");
    let content = c.download(FILE_CONTENT, &f("/content")).await.ok().expect("the content");
    assert_eq!(content.bytes, notes, "the bytes as uploaded");
    assert!(content.content_type.starts_with("text/plain"), "{}", content.content_type);
    assert!(content.disposition.is_some_and(|d| d.contains("notes.txt")), "a content-disposition with the filename");
    let raw = c.download(FILE_CONTENT, &format!("/v1/files/{other_id}/content")).await.ok().expect("the content");
    assert_eq!((raw.bytes.as_slice(), raw.content_type.as_str()), (&blob[..], "application/octet-stream"));
    c.download(FILE_CONTENT, &format!("{UNKNOWN_FILE}/content"))
        .await
        .err()
        .expect("404")
        .expect(404, Some("file_not_found"));
    c.call(Method::GET, FILE, UNKNOWN_FILE, None).await.expect(404, Some("file_not_found"));
    c.call(Method::GET, FILE, "/v1/files/nope", None).await.expect(404, Some("file_not_found"));

    // A session created with a file mounted; a mount path outside the two roots is refused.
    let with_file = |mount: &str| {
        json!({"agent": agent_id, "environment_id": env_id,
               "resources": [{"type": "file", "file_id": file_id, "mount_path": mount}]})
    };
    c.call(Method::POST, SESSIONS, SESSIONS, Some(with_file("/etc/notes.txt"))).await.expect(400, None);
    let mounted = c.call(Method::POST, SESSIONS, SESSIONS, Some(with_file("/workspace/data/notes.txt"))).await;
    let msid = mounted.id();
    let resources = mounted.ok()["resources"].as_array().expect("resources").clone();
    assert_eq!(resources.len(), 1, "{}", pretty(&mounted.body));
    assert_eq!(
        (&resources[0]["file_id"], &resources[0]["mount_path"]),
        (&json!(file_id), &json!("/workspace/data/notes.txt"))
    );
    let rid = resources[0]["id"].as_str().unwrap().to_owned();
    let r = |suffix: &str| format!("/v1/sessions/{msid}/resources{suffix}");

    // Resources: add (default mount path), list, retrieve, update (a file has nothing to update).
    let added = c.call(Method::POST, RESOURCES, &r(""), Some(json!({"type": "file", "file_id": other_id}))).await;
    assert_eq!(added.ok()["mount_path"], format!("/mnt/session/uploads/{other_id}"));
    c.call(Method::POST, RESOURCES, &r(""), Some(json!({"type": "file", "file_id": other_id}))).await.expect(400, None);
    c.call(
        Method::POST,
        RESOURCES,
        &r(""),
        Some(json!({"type": "file", "file_id": "file_0000000000000000000000", "mount_path": "/workspace/gone"})),
    )
    .await
    .expect(404, Some("file_not_found"));
    // A repository (checked out before the next turn; none runs here): its token is never shown,
    // and can be replaced.
    let repo = c
        .call(
            Method::POST,
            RESOURCES,
            &r(""),
            Some(
                json!({"type": "github_repository", "url": "https://github.com/o/r", "authorization_token": "ghp_first",
                        "checkout": {"type": "branch", "name": "main"}}),
            ),
        )
        .await;
    assert_eq!(repo.ok()["mount_path"], "/workspace/r", "the default mount path");
    assert!(!repo.body.to_string().contains("ghp_"), "{}", pretty(&repo.body));
    let repo_id = repo.id();
    let updated = c
        .call(Method::POST, RESOURCE, &r(&format!("/{repo_id}")), Some(json!({"authorization_token": "ghp_second"})))
        .await;
    assert_eq!(updated.ok(), repo.ok());
    c.call(
        Method::POST,
        RESOURCES,
        &r(""),
        Some(json!({"type": "github_repository", "url": "https://user:ghp_x@github.com/o/r", "mount_path": "/workspace/s"})),
    )
    .await
    .expect(400, None);
    c.call(Method::POST, RESOURCES, &r(""), Some(json!({"type": "memory_store", "memory_store_id": "m"})))
        .await
        .expect(400, Some("not_supported"));
    assert_eq!(
        c.call(Method::DELETE, RESOURCE, &r(&format!("/{repo_id}")), None).await.ok()["type"],
        "session_resource_deleted"
    );
    let page = c.call(Method::GET, RESOURCES, &r("?limit=1"), None).await;
    assert_eq!(page.ok()["data"][0]["id"], rid.as_str(), "in the order they were added");
    let next = page.ok()["next_page"].as_str().expect("a next page").to_owned();
    let rest = c.call(Method::GET, RESOURCES, &r(&format!("?limit=1&page={next}")), None).await;
    assert_eq!(rest.ok()["data"][0], *added.ok());
    c.call(Method::GET, RESOURCES, &r("?limit=101"), None).await.expect(400, None);
    c.call(Method::GET, RESOURCES, "/v1/sessions/sesn_0000000000000000000000/resources", None)
        .await
        .expect(404, Some("session_not_found"));
    assert_eq!(c.call(Method::GET, RESOURCE, &r(&format!("/{rid}")), None).await.ok(), &resources[0]);
    c.call(Method::POST, RESOURCE, &r(&format!("/{rid}")), Some(json!({"authorization_token": "ghp_x"})))
        .await
        .expect(400, None);
    c.call(Method::GET, RESOURCE, &r("/sesrsc_0000000000000000000000"), None)
        .await
        .expect(404, Some("session_resource_not_found"));

    // A mounted file cannot be deleted; removing the resource (or deleting the session) frees it.
    c.call(Method::DELETE, FILE, &f(""), None).await.expect(409, Some("file_in_use"));
    let removed = c.call(Method::DELETE, RESOURCE, &r(&format!("/{rid}")), None).await;
    assert_eq!(removed.ok()["type"], "session_resource_deleted");
    c.call(Method::DELETE, RESOURCE, &r(&format!("/{rid}")), None)
        .await
        .expect(404, Some("session_resource_not_found"));
    let left = c.call(Method::GET, SESSION, &format!("/v1/sessions/{msid}"), None).await;
    assert_eq!(left.ok()["resources"], json!([added.ok()]));
    assert_eq!(c.call(Method::DELETE, FILE, &f(""), None).await.ok()["type"], "file_deleted");
    c.call(Method::DELETE, FILE, &f(""), None).await.expect(404, Some("file_not_found"));
    c.call(Method::DELETE, FILE, &format!("/v1/files/{other_id}"), None).await.expect(409, Some("file_in_use"));
    c.call(Method::DELETE, SESSION, &format!("/v1/sessions/{msid}"), None).await.ok();
    c.call(Method::DELETE, FILE, &format!("/v1/files/{other_id}"), None).await.ok();
}

/// Vaults and their credentials (ADR 0024): every route, secrets never answered, one live
/// credential per server, the kind fixed, archived vaults frozen, and sessions naming vaults.
async fn vaults(c: &Client, agent_id: &str, env_id: &str) {
    let vault = c
        .call(Method::POST, VAULTS, VAULTS, Some(json!({"display_name": "Tools", "metadata": {"team": "docs"}})))
        .await;
    let vault_id = vault.id();
    let v = |suffix: &str| format!("/v1/vaults/{vault_id}{suffix}");
    c.call(Method::POST, VAULTS, VAULTS, Some(json!({"display_name": ""}))).await.expect(400, None);
    let renamed = c
        .call(
            Method::POST,
            VAULT,
            &v(""),
            Some(json!({"display_name": "Tools 2", "metadata": {"team": null, "k": "v"}})),
        )
        .await;
    assert_eq!(renamed.ok()["metadata"], json!({"k": "v"}), "a metadata patch");
    assert_eq!(c.call(Method::GET, VAULT, &v(""), None).await.ok()["display_name"], "Tools 2");
    c.call(Method::GET, VAULT, "/v1/vaults/nope", None).await.expect(404, Some("vault_not_found"));

    let bearer = json!({"display_name": "mcp", "auth": {"type": "static_bearer", "token": "tok-SECRET-1",
        "mcp_server_url": "https://mcp.example.com/mcp"}});
    let cred = c.call(Method::POST, CREDENTIALS, &v("/credentials"), Some(bearer)).await;
    let cred_id = cred.id();
    let k = |suffix: &str| format!("/v1/vaults/{vault_id}/credentials/{cred_id}{suffix}");
    let oauth = json!({"auth": {"type": "mcp_oauth", "access_token": "at-SECRET-2",
        "mcp_server_url": "https://oauth.example.com/mcp", "expires_at": "2999-01-01T00:00:00Z",
        "refresh": {"client_id": "cid", "refresh_token": "rt-SECRET-3", "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "cs-SECRET-4"}, "scope": "tools"}}});
    let oauth = c.call(Method::POST, CREDENTIALS, &v("/credentials"), Some(oauth)).await;
    assert_eq!(oauth.ok()["auth"]["refresh"]["token_endpoint_auth"], json!({"type": "client_secret_basic"}));
    let dup =
        json!({"auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "HTTPS://MCP.example.com:443/mcp/"}});
    c.call(Method::POST, CREDENTIALS, &v("/credentials"), Some(dup)).await.expect(409, Some("credential_exists"));
    let env_var = json!({"auth": {"type": "environment_variable", "secret_name": "X", "secret_value": "v",
        "networking": {"type": "unrestricted"}, "injection_location": {"header": true, "body": false}}});
    c.call(Method::POST, CREDENTIALS, &v("/credentials"), Some(env_var))
        .await
        .expect(400, Some("credential_type_not_supported"));
    let updated = c
        .call(
            Method::POST,
            CREDENTIAL,
            &k(""),
            Some(json!({"auth": {"type": "static_bearer", "token": "tok-SECRET-5"},
            "metadata": {"rotated": "yes"}})),
        )
        .await;
    assert_eq!(updated.ok()["metadata"], json!({"rotated": "yes"}));
    c.call(Method::POST, CREDENTIAL, &k(""), Some(json!({"auth": {"type": "mcp_oauth", "access_token": "x"}})))
        .await
        .expect(400, None);
    c.call(Method::GET, CREDENTIAL, &k(""), None).await.ok();
    // No MCP client in this test's gateway: the server cannot be asked.
    let checked = c.call(Method::POST, CREDENTIAL_VALIDATE, &k("/mcp_oauth_validate"), None).await;
    assert_eq!(
        (checked.ok()["status"].as_str(), checked.ok()["has_refresh_token"].as_bool()),
        (Some("unknown"), Some(false))
    );
    let listed = c.call(Method::GET, CREDENTIALS, &v("/credentials?limit=1"), None).await;
    assert!(listed.ok()["next_page"].is_string(), "two credentials, one per page");
    for body in [&cred.body, &oauth.body, &updated.body, &listed.body] {
        let text = body.to_string();
        assert!(!text.contains("SECRET"), "a secret came back: {text}");
    }

    // A session names the vault; a vault that does not exist cannot be named.
    let session = json!({"agent": agent_id, "environment_id": env_id, "vault_ids": [vault_id]});
    let named = c.call(Method::POST, SESSIONS, SESSIONS, Some(session)).await;
    assert_eq!(named.ok()["vault_ids"], json!([vault_id]));
    let missing = json!({"agent": agent_id, "environment_id": env_id, "vault_ids": ["vlt_0000000000000000000000"]});
    c.call(Method::POST, SESSIONS, SESSIONS, Some(missing)).await.expect(404, Some("vault_not_found"));

    // An idle session's tools, MCP servers and vaults change; the log says so.
    let sid = named.id();
    let update = json!({"agent": {"mcp_servers": [{"type": "url", "name": "docs", "url": "https://mcp.example.com/mcp"}],
                                  "tools": [{"type": "mcp_toolset", "mcp_server_name": "docs"}]},
                        "vault_ids": []});
    let updated = c.call(Method::POST, SESSION, &format!("/v1/sessions/{sid}"), Some(update)).await;
    assert_eq!(updated.ok()["vault_ids"], json!([]));
    assert_eq!(updated.ok()["agent"]["mcp_servers"][0]["name"], "docs");
    let bad = json!({"agent": {"tools": [{"type": "mcp_toolset", "mcp_server_name": "nowhere"}]}});
    c.call(Method::POST, SESSION, &format!("/v1/sessions/{sid}"), Some(bad)).await.expect(400, None);
    let log = c.call(Method::GET, EVENTS, &format!("/v1/sessions/{sid}/events"), None).await;
    let updates: Vec<&Value> =
        log.ok()["data"].as_array().unwrap().iter().filter(|e| e["type"] == "session.updated").collect();
    assert_eq!(updates.len(), 1, "{}", pretty(&log.body));
    assert_eq!(updates[0]["agent"]["tools"][0]["mcp_server_name"], "docs");

    c.call(Method::POST, CREDENTIAL_ARCHIVE, &k("/archive"), None).await.ok();
    c.call(Method::DELETE, CREDENTIAL, &k(""), None).await.ok();
    c.call(Method::GET, CREDENTIAL, &k(""), None).await.expect(404, Some("credential_not_found"));
    let archived = c.call(Method::POST, VAULT_ARCHIVE, &v("/archive"), None).await;
    assert!(archived.ok()["archived_at"].is_string());
    c.call(Method::POST, VAULT, &v(""), Some(json!({"display_name": "x"}))).await.expect(400, Some("vault_archived"));
    let live = c.call(Method::GET, VAULTS, "/v1/vaults", None).await;
    assert!(live.ok()["data"].as_array().unwrap().iter().all(|x| x["id"] != vault_id.as_str()), "archived: hidden");
    let all = c.call(Method::GET, VAULTS, "/v1/vaults?include_archived=true", None).await;
    assert!(all.ok()["data"].as_array().unwrap().iter().any(|x| x["id"] == vault_id.as_str()));
    c.call(Method::DELETE, VAULT, &v(""), None).await.ok();
    c.call(Method::GET, CREDENTIALS, &v("/credentials"), None).await.expect(404, Some("vault_not_found"));
}

/// Custom skills and their versions (ADR 0017): uploads, lists, versions and their guards, and
/// the agents and sessions that name them.
async fn skills(c: &Client, env_id: &str) {
    const UNKNOWN_SKILL: &str = "/v1/skills/skill_0000000000000000000000";
    let manifest = |name: &str, description: &str| {
        format!("---\nname: {name}\ndescription: \"{description}\"\n---\n# Greeter\nRun scripts/hello.sh\n")
            .into_bytes()
    };
    let (v1_md, script) = (manifest("greeter", "Says hello"), b"#!/bin/sh\necho hello\n".as_slice());
    let created = c
        .upload_to(
            SKILLS,
            SKILLS,
            &[
                Part::skill_file("greeter/SKILL.md", &v1_md),
                Part::skill_file("greeter/scripts/hello.sh", script),
                Part::field("display_name", "Greeter"),
            ],
        )
        .await;
    let skill_id = created.id();
    assert_eq!(
        (&created.ok()["display_name"], &created.ok()["source"]),
        (&json!("Greeter"), &json!({"type": "custom"}))
    );
    let v1 = created.ok()["latest_version_id"].as_str().expect("a first version").to_owned();
    // Neither display_name nor a `name:` in SKILL.md: both are the directory's name.
    let notes = c
        .upload_to(SKILLS, SKILLS, &[Part::skill_file("note-taker/SKILL.md", b"---\ndescription: Notes\n---\n")])
        .await;
    let notes_id = notes.id();
    assert_eq!(notes.ok()["display_name"], "note-taker");
    // Uploads that are not skills, and one over 8 MiB.
    for parts in [
        vec![Part::skill_file("greeter/README.md", b"no manifest")],
        vec![Part::skill_file("SKILL.md", &v1_md)],
        vec![Part::skill_file("greeter/SKILL.md", &v1_md), Part::field("display_name", "two\nlines")],
    ] {
        c.upload_to(SKILLS, SKILLS, &parts).await.expect(400, None);
    }
    c.call(Method::POST, SKILLS, SKILLS, Some(json!({"files": []}))).await.expect(400, None);
    let big = vec![b'x'; 8 * 1024 * 1024 + 1];
    c.upload_to(SKILLS, SKILLS, &[Part::skill_file("greeter/SKILL.md", &v1_md), Part::skill_file("greeter/big", &big)])
        .await
        .expect(413, None);

    // Lists (oldest first; no prebuilt skills) and retrieval.
    let first = c.call(Method::GET, SKILLS, "/v1/skills?limit=1", None).await;
    assert_eq!(first.ok()["data"][0]["id"], skill_id.as_str(), "oldest first");
    let next = first.ok()["next_page"].as_str().expect("a next page").to_owned();
    let second = c.call(Method::GET, SKILLS, &format!("/v1/skills?limit=1&page={next}"), None).await;
    assert_eq!(second.ok()["data"][0]["id"], notes_id.as_str());
    let custom = c.call(Method::GET, SKILLS, "/v1/skills?source=custom", None).await;
    assert_eq!(custom.ok()["data"].as_array().unwrap().len(), 2, "no refused upload was stored");
    let prebuilt = c.call(Method::GET, SKILLS, "/v1/skills?source=anthropic", None).await;
    assert_eq!(prebuilt.ok(), &json!({"data": [], "next_page": null}));
    c.call(Method::GET, SKILLS, "/v1/skills?limit=1001", None).await.expect(400, None);
    let k = |suffix: &str| format!("/v1/skills/{skill_id}{suffix}");
    assert_eq!(c.call(Method::GET, SKILL, &k(""), None).await.ok(), created.ok());
    c.call(Method::GET, SKILL, UNKNOWN_SKILL, None).await.expect(404, Some("skill_not_found"));
    c.call(Method::GET, SKILL, "/v1/skills/nope", None).await.expect(404, Some("skill_not_found"));

    // Versions: the same name only, no display_name; the new one is the latest.
    let v2_md = manifest("greeter", "Says hello twice");
    let other = manifest("other", "Another skill");
    c.upload_to(SKILL_VERSIONS, &k("/versions"), &[Part::skill_file("other/SKILL.md", &other)])
        .await
        .expect(400, Some("skill_name_mismatch"));
    c.upload_to(
        SKILL_VERSIONS,
        &k("/versions"),
        &[Part::skill_file("greeter/SKILL.md", &v2_md), Part::field("display_name", "Greeter 2")],
    )
    .await
    .expect(400, None);
    c.upload_to(SKILL_VERSIONS, &format!("{UNKNOWN_SKILL}/versions"), &[Part::skill_file("greeter/SKILL.md", &v2_md)])
        .await
        .expect(404, Some("skill_not_found"));
    let v2 = c.upload_to(SKILL_VERSIONS, &k("/versions"), &[Part::skill_file("greeter/SKILL.md", &v2_md)]).await;
    let v2_id = v2.id();
    assert_eq!(
        (&v2.ok()["skill_id"], &v2.ok()["name"], &v2.ok()["description"]),
        (&json!(skill_id), &json!("greeter"), &json!("Says hello twice"))
    );
    assert_eq!(c.call(Method::GET, SKILL, &k(""), None).await.ok()["latest_version_id"], v2_id.as_str());
    let page = c.call(Method::GET, SKILL_VERSIONS, &k("/versions?limit=1"), None).await;
    assert_eq!(page.ok()["data"][0]["id"], v2_id.as_str(), "newest first");
    let next = page.ok()["next_page"].as_str().expect("a next page").to_owned();
    let older = c.call(Method::GET, SKILL_VERSIONS, &k(&format!("/versions?limit=1&page={next}")), None).await;
    assert_eq!(older.ok()["data"][0]["id"], v1.as_str());
    c.call(Method::GET, SKILL_VERSIONS, &format!("{UNKNOWN_SKILL}/versions"), None)
        .await
        .expect(404, Some("skill_not_found"));
    let by_id = c.call(Method::GET, SKILL_VERSION, &k(&format!("/versions/{v1}")), None).await;
    assert_eq!((&by_id.ok()["name"], &by_id.ok()["description"]), (&json!("greeter"), &json!("Says hello")));
    assert_eq!(c.call(Method::GET, SKILL_VERSION, &k("/versions/latest"), None).await.ok(), v2.ok());
    c.call(Method::GET, SKILL_VERSION, &k("/versions/skillver_0000000000000000000000"), None)
        .await
        .expect(404, Some("skill_not_found"));

    // Agents name custom skills only; a session resolves them when it is created.
    let agent_with = |skill: Value| json!({"name": "greeter", "model": "claude-opus-4-7", "skills": [skill]});
    c.call(Method::POST, AGENTS, AGENTS, Some(agent_with(json!({"type": "anthropic", "skill_id": "xlsx"}))))
        .await
        .expect(400, Some("not_supported"));
    let agent =
        c.call(Method::POST, AGENTS, AGENTS, Some(agent_with(json!({"type": "custom", "skill_id": skill_id})))).await;
    assert_eq!(agent.ok()["skills"], json!([{"type": "custom", "skill_id": skill_id, "version": "latest"}]));
    let pinned = c
        .call(
            Method::POST,
            AGENTS,
            AGENTS,
            Some(agent_with(json!({"type": "custom", "skill_id": skill_id, "version": v1}))),
        )
        .await
        .id();
    let session_of = |agent: &str| json!({"agent": agent, "environment_id": env_id});
    let session = c.call(Method::POST, SESSIONS, SESSIONS, Some(session_of(&agent.id()))).await;
    assert_eq!(
        session.ok()["agent"]["skills"],
        json!([{"type": "custom", "skill_id": skill_id, "version": v2_id}]),
        "the snapshot names the skill, resolved to its latest version"
    );

    // Deleting versions: any but the last; a session of an agent pinned to a deleted one is refused.
    let deleted = c.call(Method::DELETE, SKILL_VERSION, &k(&format!("/versions/{v1}")), None).await;
    assert_eq!(deleted.ok(), &json!({"id": v1, "type": "skill_version_deleted"}));
    c.call(Method::POST, SESSIONS, SESSIONS, Some(session_of(&pinned))).await.expect(404, Some("skill_not_found"));
    c.call(Method::DELETE, SKILL_VERSION, &k(&format!("/versions/{v2_id}")), None)
        .await
        .expect(409, Some("last_skill_version"));
    assert_eq!(c.call(Method::GET, SKILL_VERSION, &k("/versions/latest"), None).await.ok(), v2.ok());

    // Deleting the skill: always allowed; sessions of agents that name it are refused from then on.
    let gone = c.call(Method::DELETE, SKILL, &k(""), None).await;
    assert_eq!(gone.ok(), &json!({"id": skill_id, "type": "skill_deleted"}));
    c.call(Method::POST, SESSIONS, SESSIONS, Some(session_of(&agent.id()))).await.expect(404, Some("skill_not_found"));
    c.call(Method::GET, SKILL, &k(""), None).await.expect(404, Some("skill_not_found"));
    c.call(Method::DELETE, SKILL, &k(""), None).await.expect(404, Some("skill_not_found"));
    c.call(Method::DELETE, SKILL, &format!("/v1/skills/{notes_id}"), None).await.ok();
    c.call(Method::DELETE, SESSION, &format!("/v1/sessions/{}", session.id()), None).await.ok();
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls a session until `status`.
async fn wait_status(c: &Client, session: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.call(Method::GET, SESSION, &format!("/v1/sessions/{session}"), None).await;
        if s.ok()["status"] == status {
            return s.body;
        }
        assert!(Instant::now() < deadline, "session {session} never became {status}: {}", pretty(&s.body));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------------------------------
// The scenario
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_response_of_a_realistic_scenario_matches_the_document() {
    let mut gw = start().await;
    let c = Client::new(&gw);
    scenario(&c).await;
    lost_environment(&c, &mut gw).await;
    gw.stop().await;

    // Coverage: every route answered 200 at least once (a route the document gives no 200,
    // such as a file resource's update, answered at all), and every documented error status
    // was seen.
    let seen = c.seen.lock().unwrap().clone();
    let mut missing = Vec::new();
    for (m, p) in served_routes() {
        let p = p.as_str();
        let key = (m.to_ascii_uppercase(), p.to_owned());
        let answered = match c.spec.response(m, p, 200) {
            Some(_) => seen.get(&key).is_some_and(|s| s.contains(&200)),
            None => seen.contains_key(&key),
        };
        if !answered {
            missing.push(format!("{} {p}", key.0));
        }
    }
    assert!(
        missing.is_empty(),
        "routes the scenario never got a 200 (or, without a documented 200, any answer) from: {missing:?}"
    );
    let statuses: BTreeSet<u16> = seen.values().flatten().copied().collect();
    for s in [400, 401, 404, 409, 413] {
        assert!(statuses.contains(&s), "the scenario never provoked a {s}");
    }
    assert!(*c.frames.lock().unwrap() > 20, "the scenario read stream frames");
    let failures = c.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} response(s) do not match the OpenAPI document:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

async fn scenario(c: &Client) {
    // The document is what is served.
    let served = c.call(Method::GET, OPENAPI, OPENAPI, None).await;
    assert_eq!(served.ok(), &document(), "GET /v1/openapi.json serves the document");

    // Authentication: both schemes, and 401 without or with a wrong key.
    c.call_as(Method::GET, AGENTS, AGENTS, None, Auth::None).await.expect(401, None);
    c.call_as(Method::GET, AGENTS, AGENTS, None, Auth::Wrong).await.expect(401, None);
    c.call_as(Method::GET, AGENTS, AGENTS, None, Auth::Bearer).await.ok();

    // ---- Agents
    let agent_body = json!({
        "name": "writer",
        "model": {"id": "claude-opus-4-7", "effort": "high", "speed": "standard"},
        "system": "You write files.",
        "description": "Writes files in its workspace.",
        "tools": [
            {
                "type": "agent_toolset_20260401",
                "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}},
                "configs": [
                    {"name": "write"},
                    {"name": "bash", "permission_policy": {"type": "always_allow"}},
                    {"name": "web_search", "enabled": false, "allowed_domains": ["example.com"],
                     "user_location": {"type": "approximate", "city": "Lyon"}},
                ],
            },
            {
                "type": "custom",
                "name": "lookup",
                "description": "Looks a word up.",
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
        ],
        "metadata": {"team": "docs"},
    });
    let agent = c.call_as(Method::POST, AGENTS, AGENTS, Some(agent_body), Auth::Bearer).await;
    let agent_id = agent.id();
    let a = |suffix: &str| format!("/v1/agents/{agent_id}{suffix}");
    let mcp_agent = c
        .call(
            Method::POST,
            AGENTS,
            AGENTS,
            Some(json!({
                "name": "mcp",
                "model": "claude-sonnet-4-6",
                "mcp_servers": [{"type": "url", "name": "docs", "url": "https://mcp.example.invalid/sse"}],
                "tools": [{"type": "mcp_toolset", "mcp_server_name": "docs",
                           "configs": [{"name": "search", "permission_policy": {"type": "auto"}}]}],
                "execution_identity": {"type": "service_account"},
                "backend": "native",
            })),
        )
        .await;
    let mcp_agent_id = mcp_agent.id();
    c.call(Method::GET, AGENT, &format!("/v1/agents/{mcp_agent_id}"), None).await.ok();
    c.call(Method::GET, AGENT, &a(""), None).await.ok();
    let v2 = c
        .call(
            Method::POST,
            AGENT,
            &a(""),
            Some(json!({"version": 1, "description": null, "metadata": {"team": null, "tier": "gold"}})),
        )
        .await;
    assert_eq!(v2.ok()["version"], 2);
    c.call(Method::POST, AGENT, &a(""), Some(json!({"version": 1, "system": "stale"})))
        .await
        .expect(409, Some("version_conflict"));
    c.call(Method::GET, AGENT, &a("?version=1"), None).await.ok();
    c.call(Method::GET, AGENT, &a("?version=x"), None).await.expect(400, None);
    let first = c.call(Method::GET, AGENT_VERSIONS, &a("/versions?limit=1"), None).await;
    let next = first.ok()["next_page"].as_str().expect("a next page").to_owned();
    c.call(Method::GET, AGENT_VERSIONS, &a(&format!("/versions?limit=1&page={next}")), None).await.ok();
    c.call(Method::GET, AGENT_VERSIONS, &a(&format!("/versions?limit=1&order=asc&page={next}")), None)
        .await
        .expect(400, None);
    c.call(Method::GET, AGENTS, "/v1/agents?limit=1&created_at[gte]=2020-01-01T00:00:00Z&include_archived=true", None)
        .await
        .ok();
    c.call(Method::GET, AGENTS, "/v1/agents?limit=0", None).await.expect(400, None);
    c.call(Method::GET, AGENT, "/v1/agents/agent_nope", None).await.expect(404, Some("agent_not_found"));
    c.call(Method::GET, AGENT_VERSIONS, "/v1/agents/agent_0000000000000000000000/versions", None)
        .await
        .expect(404, Some("agent_not_found"));
    c.call_raw(Method::POST, AGENTS, AGENTS, br#"{"name": "broken", "model": "#.to_vec()).await.expect(400, None);
    c.call(
        Method::POST,
        AGENTS,
        AGENTS,
        Some(json!({"name": "x", "model": "m", "multiagent": {"type": "coordinator"}})),
    )
    .await
    .expect(400, Some("not_supported"));
    // 413: one byte over the limit.
    let mut big = br#"{"name": ""#.to_vec();
    big.resize(BODY_LIMIT + 1, b'a');
    c.call_raw(Method::POST, AGENTS, AGENTS, big).await.expect(413, None);

    // ---- Webhook endpoints (their deliveries are tested against real verifiers in tests/compat)
    let hook = c
        .call(
            Method::POST,
            WEBHOOKS,
            WEBHOOKS,
            Some(json!({"url": "https://hooks.example.com/gw", "event_types": ["session.status_idled"]})),
        )
        .await;
    let hook_id = hook.id();
    assert!(hook.ok()["secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "the secret, once");
    c.call(Method::POST, WEBHOOKS, WEBHOOKS, Some(json!({"url": "http://127.0.0.1:9/hook"}))).await.expect(400, None);
    c.call(
        Method::POST,
        WEBHOOKS,
        WEBHOOKS,
        Some(json!({"url": "https://hooks.example.com", "event_types": ["bogus"]})),
    )
    .await
    .expect(400, None);
    let listed = c.call(Method::GET, WEBHOOKS, WEBHOOKS, None).await;
    assert!(listed.ok()["data"][0].get("secret").is_none(), "a listed endpoint never shows its secret");
    let h = |suffix: &str| format!("/v1/webhooks/{hook_id}{suffix}");
    c.call(Method::GET, WEBHOOK, &h(""), None).await.ok();
    assert_eq!(c.call(Method::POST, WEBHOOK_ENABLE, &h("/enable"), None).await.ok()["status"], "enabled");
    c.call(Method::DELETE, WEBHOOK, &h(""), None).await.ok();
    c.call(Method::GET, WEBHOOK, &h(""), None).await.expect(404, Some("webhook_not_found"));

    // ---- Environments
    let env = c
        .call(
            Method::POST,
            ENVS,
            ENVS,
            Some(json!({
                "name": "work",
                "description": "Local work",
                "config": {"type": "cloud", "networking": {"type": "unrestricted"}},
                "metadata": {"owner": "tests"},
                "scope": "organization",
            })),
        )
        .await;
    let env_id = env.id();
    let e = |suffix: &str| format!("/v1/environments/{env_id}{suffix}");
    let eager = c
        .call(
            Method::POST,
            ENVS,
            ENVS,
            Some(json!({"name": "eager", "config": {"type": "cloud", "sandbox_provisioning": "eager", "provider": "local"}})),
        )
        .await;
    let eager_id = eager.id();
    let self_hosted =
        c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "self", "config": {"type": "self_hosted"}}))).await;
    let self_hosted_id = self_hosted.id();
    c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "limited", "config": {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["example.com"]}}})))
        .await
        .expect(400, Some("network_policy_unsupported"));
    c.call(Method::GET, ENV, &e(""), None).await.ok();
    c.call(Method::POST, ENV, &e(""), Some(json!({"description": null, "metadata": {"owner": null, "k": "v"}})))
        .await
        .ok();
    c.call(Method::POST, ENV, &e(""), Some(json!({"config": {"type": "self_hosted"}})))
        .await
        .expect(400, Some("invalid_config_type_change"));
    c.call(Method::GET, ENVS, "/v1/environments?limit=2", None).await.ok();
    c.call(Method::GET, ENVS, "/v1/environments?include_archived=maybe", None).await.expect(400, None);
    c.call(Method::GET, ENV, "/v1/environments/env_0000000000000000000000", None)
        .await
        .expect(404, Some("environment_not_found"));
    let archived_env = c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "old"}))).await.id();
    c.call(Method::POST, ENV_ARCHIVE, &format!("/v1/environments/{archived_env}/archive"), None).await.ok();
    c.call(Method::POST, SESSIONS, SESSIONS, Some(json!({"agent": agent_id, "environment_id": archived_env})))
        .await
        .expect(400, Some("environment_archived"));
    let doomed = c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "doomed"}))).await.id();
    c.call(Method::DELETE, ENV, &format!("/v1/environments/{doomed}"), None).await.ok();
    c.call(Method::DELETE, ENV, &format!("/v1/environments/{doomed}"), None)
        .await
        .expect(404, Some("environment_not_found"));

    // ---- Sessions
    let session = c
        .call(
            Method::POST,
            SESSIONS,
            SESSIONS,
            Some(json!({"agent": agent_id, "environment_id": env_id, "title": "files", "metadata": {"case": "write"}})),
        )
        .await;
    assert_eq!(session.ok()["status"], "idle");
    let sid = session.id();
    let s = |suffix: &str| format!("/v1/sessions/{sid}{suffix}");
    c.call(Method::DELETE, ENV, &e(""), None).await.expect(409, Some("environment_in_use"));
    c.call(
        Method::POST,
        SESSIONS,
        SESSIONS,
        Some(json!({"agent": {"type": "agent", "id": agent_id, "version": 1}, "environment_id": eager_id})),
    )
    .await
    .ok();
    let self_hosted_session = c
        .call(
            Method::POST,
            SESSIONS,
            SESSIONS,
            Some(json!({"agent": agent_id, "environment_id": self_hosted_id, "metadata": {"where": "self-hosted"}})),
        )
        .await
        .id();
    self_hosted_turn(c, &self_hosted_id, &self_hosted_session, &env_id).await;
    c.call(
        Method::POST,
        SESSIONS,
        SESSIONS,
        Some(
            json!({"agent": agent_id, "environment_id": env_id, "resources": [{"type": "file", "file_id": "file_x"}]}),
        ),
    )
    .await
    .expect(404, Some("file_not_found"));
    files_and_resources(c, &agent_id, &env_id).await;
    skills(c, &env_id).await;
    vaults(c, &agent_id, &env_id).await;
    c.call(
        Method::POST,
        SESSIONS,
        SESSIONS,
        Some(json!({"agent": "agent_0000000000000000000000", "environment_id": env_id})),
    )
    .await
    .expect(404, Some("agent_not_found"));
    c.call(
        Method::POST,
        SESSIONS,
        SESSIONS,
        Some(json!({"agent": agent_id, "environment_id": "env_0000000000000000000000"})),
    )
    .await
    .expect(404, Some("environment_not_found"));
    c.call(Method::GET, SESSION, "/v1/sessions/sesn_0000000000000000000000", None)
        .await
        .expect(404, Some("session_not_found"));

    // A turn with a tool call, watched on the stream with message previews.
    let mut stream =
        c.stream(STREAM, &s("/events/stream?event_deltas[]=agent.message"), None).await.ok().expect("stream");
    let sent = c
        .call(Method::POST, EVENTS, &s("/events"), Some(say(r#"tool:write {"file_path":"a.txt","content":"x"}"#)))
        .await;
    let first_event = sent.ok()["data"][0]["id"].as_str().unwrap().to_owned();
    let turn = c.read_until(&mut stream, idle_with("end_turn")).await;
    let names = types(&turn);
    for t in [
        "user.message",
        "session.status_running",
        "span.model_request_start",
        "agent.tool_use",
        "agent.tool_result",
        "agent.message",
        "span.model_request_end",
    ] {
        assert!(names.contains(&t), "the turn has {t}: {names:?}");
    }
    let done = wait_status(c, &sid, "idle").await;
    assert_eq!(done["environment_state"], "realized", "the write realized the sandbox");

    // A plain message: its reply streams in previews.
    c.call(Method::POST, EVENTS, &s("/events"), Some(say("hello there"))).await.ok();
    let turn = c.read_until(&mut stream, idle_with("end_turn")).await;
    let names = types(&turn);
    assert!(names.contains(&"event_start") && names.contains(&"event_delta"), "previews were streamed: {names:?}");

    // A custom tool parks the session; a user.message is refused until it is answered.
    c.call(Method::POST, EVENTS, &s("/events"), Some(say(r#"custom:lookup {"q":"word"}"#))).await.ok();
    let turn = c.read_until(&mut stream, idle_with("requires_action")).await;
    let (_, custom_use) = turn.iter().find(|(e, _)| e == "agent.custom_tool_use").expect("agent.custom_tool_use");
    let custom_use_id = custom_use["id"].as_str().unwrap().to_owned();
    c.call(Method::POST, EVENTS, &s("/events"), Some(say("are you there?")))
        .await
        .expect(409, Some("session_requires_action"));
    c.call(
        Method::POST,
        EVENTS,
        &s("/events"),
        Some(json!({"events": [{"type": "user.tool_confirmation", "tool_use_id": first_event, "result": "allow"}]})),
    )
    .await
    .expect(400, Some("tool_use_not_pending"));
    c.call(
        Method::POST,
        EVENTS,
        &s("/events"),
        Some(json!({"events": [{"type": "user.custom_tool_result", "custom_tool_use_id": custom_use_id,
                                "content": [{"type": "text", "text": "a word"}], "is_error": false}]})),
    )
    .await
    .ok();
    c.read_until(&mut stream, idle_with("end_turn")).await;
    drop(stream);

    // Lists.
    let all = c.call(Method::GET, EVENTS, &s("/events"), None).await;
    assert!(all.ok()["data"].as_array().unwrap().len() > 15);
    let page = c.call(Method::GET, EVENTS, &s("/events?limit=2&order=desc"), None).await;
    let next = page.ok()["next_page"].as_str().expect("next page").to_owned();
    c.call(Method::GET, EVENTS, &s(&format!("/events?limit=2&order=desc&page={next}")), None).await.ok();
    c.call(
        Method::GET,
        EVENTS,
        &s("/events?types[]=agent.tool_use&types%5B%5D=agent.tool_result&created_at[gte]=2020-01-01T00:00:00Z"),
        None,
    )
    .await
    .ok();
    c.call(Method::GET, EVENTS, &s("/events?types[]=user.define_outcome"), None).await.ok();
    c.call(Method::GET, EVENTS, &s("/events?types[]=agent.bogus"), None).await.expect(400, None);
    c.call(Method::GET, EVENTS, &s("/events?limit=1001"), None).await.expect(400, None);
    c.call(Method::GET, RESOURCES, &s("/resources"), None).await.ok();
    let sessions = c.call(Method::GET, SESSIONS, "/v1/sessions?limit=1", None).await;
    let next = sessions.ok()["next_page"].as_str().expect("next page").to_owned();
    let older = c.call(Method::GET, SESSIONS, &format!("/v1/sessions?limit=1&page={next}"), None).await;
    assert!(older.ok()["prev_page"].is_string(), "the second page has a prev_page");
    c.call(
        Method::GET,
        SESSIONS,
        &format!("/v1/sessions?agent_id={agent_id}&agent_version=2&statuses[]=idle&include_archived=true&order=asc"),
        None,
    )
    .await
    .ok();
    c.call(Method::GET, SESSIONS, "/v1/sessions?statuses[]=sleeping", None).await.expect(400, None);
    c.call(Method::GET, SESSIONS, "/v1/sessions?deployment_id=depl_1", None).await.expect(400, Some("not_supported"));

    // Replay after an id, on both stream paths; bad stream parameters.
    let mut replay = c.stream(STREAM_ALIAS, &s("/stream"), Some(&first_event)).await.ok().expect("stream");
    let replayed = c.read_until(&mut replay, idle_with("end_turn")).await;
    assert_eq!(replayed[0].0, "session.status_running", "replay starts after the given event");
    drop(replay);
    let mut replay =
        c.stream(STREAM, &s(&format!("/events/stream?after_id={first_event}")), None).await.ok().expect("stream");
    c.read_until(&mut replay, |e, _| e == "agent.tool_use").await;
    drop(replay);
    c.stream(STREAM, &s("/events/stream?event_deltas[]=agent.tool_use"), None)
        .await
        .err()
        .expect("400")
        .expect(400, None);
    c.stream(STREAM, &s("/events/stream"), Some("sevt_0000000000000000000000"))
        .await
        .err()
        .expect("400")
        .expect(400, None);
    c.stream(STREAM_ALIAS, "/v1/sessions/sesn_0000000000000000000000/stream", None)
        .await
        .err()
        .expect("404")
        .expect(404, Some("session_not_found"));

    // Confirmation: always_ask parks the call; a denial becomes an error result and the turn goes on.
    let ask = c
        .call(
            Method::POST,
            SESSIONS,
            SESSIONS,
            Some(json!({
                "agent": {"type": "agent_with_overrides", "id": agent_id, "system": null,
                          "tools": [{"type": "agent_toolset_20260401",
                                     "default_config": {"permission_policy": {"type": "always_ask"}}}]},
                "environment_id": env_id,
            })),
        )
        .await;
    let ask_id = ask.id();
    let k = |suffix: &str| format!("/v1/sessions/{ask_id}{suffix}");
    let mut stream = c.stream(STREAM, &k("/events/stream"), None).await.ok().expect("stream");
    c.call(Method::POST, EVENTS, &k("/events"), Some(say(r#"tool:bash {"command":"echo hi"}"#))).await.ok();
    let turn = c.read_until(&mut stream, idle_with("requires_action")).await;
    let (_, tool_use) = turn.iter().find(|(e, _)| e == "agent.tool_use").expect("agent.tool_use");
    assert_eq!(tool_use["evaluated_permission"], "ask");
    let tool_use_id = tool_use["id"].as_str().unwrap().to_owned();
    c.call(
        Method::POST,
        EVENTS,
        &k("/events"),
        Some(json!({"events": [{"type": "user.tool_confirmation", "tool_use_id": tool_use_id,
                                "result": "deny", "deny_message": "not now"}]})),
    )
    .await
    .ok();
    c.read_until(&mut stream, idle_with("end_turn")).await;
    // An interrupt while idle, and an interrupt with a message.
    let interrupt =
        c.call(Method::POST, EVENTS, &k("/events"), Some(json!({"events": [{"type": "user.interrupt"}]}))).await;
    assert!([200, 400].contains(&interrupt.status), "{}", pretty(&interrupt.body));
    let redirect = c
        .call(
            Method::POST,
            EVENTS,
            &k("/events"),
            Some(json!({"events": [{"type": "user.interrupt"},
                                   {"type": "user.message", "content": [{"type": "text", "text": "again"}]}]})),
        )
        .await;
    if redirect.ok()["data"].as_array().is_some_and(|d| d.len() == 2) {
        c.read_until(&mut stream, idle_with("end_turn")).await;
    }
    drop(stream);

    // The round limit, in a session of its own: session.error (tool_use_limit_reached_error,
    // exhausted), then idle retries_exhausted (ADR 0007 §12, as the SDK documents it).
    let limited =
        c.call(Method::POST, SESSIONS, SESSIONS, Some(json!({"agent": agent_id, "environment_id": env_id}))).await.id();
    let mut stream =
        c.stream(STREAM, &format!("/v1/sessions/{limited}/events/stream"), None).await.ok().expect("stream");
    c.call(
        Method::POST,
        EVENTS,
        &format!("/v1/sessions/{limited}/events"),
        Some(say(r#"repeat:write {"file_path":"b.txt","content":"y"}"#)),
    )
    .await
    .ok();
    let turn = c.read_until(&mut stream, idle_with("retries_exhausted")).await;
    let (_, error) = turn.iter().find(|(e, _)| e == "session.error").expect("session.error");
    assert_eq!(error["error"]["retry_status"]["type"], "exhausted", "{}", pretty(error));
    assert_eq!(error["error"]["type"], "tool_use_limit_reached_error", "{}", pretty(error));
    drop(stream);

    // Guards of a running session.
    let mut stream = c.stream(STREAM, &s("/events/stream"), None).await.ok().expect("stream");
    c.call(Method::POST, EVENTS, &s("/events"), Some(say(r#"tool:bash {"command":"sleep 3"}"#))).await.ok();
    c.read_until(&mut stream, |e, _| e == "agent.tool_use").await;
    c.call(Method::POST, SESSION_ARCHIVE, &s("/archive"), None).await.expect(409, Some("session_running"));
    c.call(Method::DELETE, SESSION, &s(""), None).await.expect(409, Some("session_running"));
    c.call(Method::POST, SESSION, &s(""), Some(json!({"agent": {"tools": []}})))
        .await
        .expect(409, Some("session_running"));
    c.read_until(&mut stream, idle_with("end_turn")).await;

    // Updates, archive, delete (the open stream ends with session.deleted).
    c.call(Method::POST, SESSION, &s(""), Some(json!({"title": "renamed", "metadata": {"case": null, "k": "v"}})))
        .await
        .ok();
    let retooled = c.call(Method::POST, SESSION, &s(""), Some(json!({"agent": {"tools": []}}))).await;
    assert_eq!(retooled.ok()["agent"]["tools"], json!([]), "an idle session's tools change");
    c.call(Method::POST, SESSION, &s(""), Some(json!({"agent": {"model": "claude-opus-4-7"}}))).await.expect(400, None);
    c.call(Method::POST, SESSION, "/v1/sessions/sesn_0000000000000000000000", Some(json!({"title": "x"})))
        .await
        .expect(404, Some("session_not_found"));
    c.call(Method::DELETE, SESSION, &k(""), None).await.ok();
    c.call(Method::POST, SESSION_ARCHIVE, &s("/archive"), None).await.ok();
    c.call(Method::POST, EVENTS, &s("/events"), Some(say("after archive"))).await.expect(400, Some("session_archived"));
    c.call(Method::DELETE, SESSION, &s(""), None).await.ok();
    let end = c.read_until(&mut stream, |e, _| e == "session.deleted").await;
    assert_eq!(end.last().map(|(e, _)| e.as_str()), Some("session.deleted"));
    assert!(c.read_until(&mut stream, |_, _| true).await.is_empty(), "the stream ends after session.deleted");
    c.call(Method::GET, EVENTS, &s("/events"), None).await.expect(404, Some("session_not_found"));

    // Archive the agent; an archived agent refuses updates.
    c.call(Method::POST, AGENT_ARCHIVE, &a("/archive"), None).await.ok();
    c.call(Method::POST, AGENT, &a(""), Some(json!({"name": "renamed"}))).await.expect(400, Some("agent_archived"));
    c.call(Method::POST, AGENT_ARCHIVE, "/v1/agents/agent_0000000000000000000000/archive", None)
        .await
        .expect(404, Some("agent_not_found"));
    c.call(Method::POST, ENV_ARCHIVE, &e("/archive"), None).await.ok();
}

// ------------------------------------------------------------------------------------------
// Negative controls: the schemas are not vacuous
// ------------------------------------------------------------------------------------------

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

#[test]
fn the_schemas_reject_misspelled_missing_and_unknown_fields() {
    let spec = Spec::new();
    let t = "2026-04-01T12:00:00.000Z";
    let id = |p: &str| format!("{p}{}", "A".repeat(22));
    let agent = json!({
        "id": id("agent_"), "type": "agent", "name": "a", "description": null, "system": null,
        "model": {"id": "claude-opus-4-7"}, "tools": [], "mcp_servers": [], "skills": [], "metadata": {},
        "multiagent": null, "execution_identity": {"type": "service_account"}, "version": 1,
        "created_at": t, "updated_at": t, "archived_at": null, "backend": "native",
        "serving_model": {"name": "default", "provider": "fake", "model": "claude-opus-4-7"},
    });
    let changed = |key: &str, value: Option<Value>| {
        let mut v = agent.clone();
        match value {
            Some(x) => v[key] = x,
            None => {
                v.as_object_mut().unwrap().remove(key);
            }
        }
        v
    };
    let e = id("sevt_");
    let r = id("req_");
    let text = json!({"type": "text", "text": "h"});
    let file = json!({
        "id": id("file_"), "type": "file", "filename": "a.txt", "mime_type": "text/plain", "size_bytes": 1,
        "created_at": t, "downloadable": true, "expires_at": null,
    });
    let file_with = |key: &str, value: Value| {
        let mut v = file.clone();
        v[key] = value;
        v
    };
    let skill = json!({
        "id": id("skill_"), "type": "skill", "display_name": "Greeter", "latest_version_id": id("skillver_"),
        "source": {"type": "custom"}, "created_at": t, "updated_at": t,
    });
    let skill_with = |key: &str, value: Value| {
        let mut v = skill.clone();
        v[key] = value;
        v
    };
    let valid = [
        ("Agent", agent.clone()),
        ("Skill", skill.clone()),
        ("File", file.clone()),
        ("Event", json!({"type": "agent.message", "id": e, "processed_at": t, "content": [text]})),
        ("Event", json!({"type": "user.message", "id": e, "processed_at": null, "content": [text]})),
        (
            "StreamFrameData",
            json!({"type": "event_delta", "event_id": e,
                                   "delta": {"type": "content_delta", "index": 0, "content": text}}),
        ),
        (
            "ErrorResponse",
            json!({"type": "error", "error": {"type": "not_found_error", "message": "m"}, "request_id": r}),
        ),
    ];
    for (name, v) in &valid {
        let errs = spec.violations(&schema(name), v);
        assert!(errs.is_empty(), "{name} rejects a valid instance: {errs:?}\n{}", pretty(v));
    }
    let invalid = [
        ("Agent", changed("descripton", Some(json!(null))), "a misspelled key"),
        ("File", file_with("size_bytes", json!("1")), "a string size"),
        ("File", file_with("expires_at", json!(t)), "an expiry (files here never expire)"),
        (
            "FileResource",
            json!({"id": id("sesrsc_"), "type": "file", "file_id": id("file_"), "created_at": t, "updated_at": t}),
            "a file resource without mount_path",
        ),
        ("Skill", skill_with("source", json!("custom")), "a source that is not an object"),
        (
            "SkillVersion",
            json!({"id": id("skillver_"), "type": "skill_version", "skill_id": id("skill_"), "name": "Greeter",
                   "description": "d", "created_at": t}),
            "a name that is not a slug",
        ),
        ("Agent", changed("archived_at", None), "a missing nullable key"),
        ("Agent", changed("version", Some(json!("1"))), "a string version"),
        ("Agent", changed("backend", Some(json!("acp"))), "a malformed backend"),
        ("Agent", changed("created_at", Some(json!("yesterday"))), "a time that is not RFC 3339"),
        (
            "Event",
            json!({"type": "agent.message", "id": e, "processed_at": null, "content": []}),
            "agent.* without time",
        ),
        ("Event", json!({"type": "session.status_idle", "id": e, "processed_at": t}), "an idle without stop_reason"),
        ("Event", json!({"type": "agent.bogus", "id": e, "processed_at": t}), "an unknown event type"),
        (
            "Event",
            json!({"type": "agent.message", "id": e, "processed_at": t,
                   "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}),
            "an image in agent.message",
        ),
        (
            "Event",
            json!({"type": "agent.tool_use", "id": e, "processed_at": t, "name": "bash", "input": {},
                   "evaluated_permission": "deny", "evaluation": {"type": "always_allow"}}),
            "an evaluation that contradicts evaluated_permission",
        ),
        (
            "Event",
            json!({"type": "user.message", "id": e, "processed_at": t, "session_id": id("sesn_"), "content": [text]}),
            "a session_id on an event",
        ),
        (
            "StreamFrameData",
            json!({"type": "event_delta", "delta": {"type": "content_delta", "index": 0, "content": text}}),
            "a delta without event_id",
        ),
        (
            "ErrorResponse",
            json!({"type": "error", "error": {"type": "not_found_error", "message": "m"}}),
            "no request_id",
        ),
        (
            "ConflictError",
            json!({"type": "error", "error": {"type": "conflict_error", "message": "m"}, "request_id": r}),
            "a 409 without error_code",
        ),
        (
            "NotFoundError",
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "m"}, "request_id": r}),
            "a 404 of another error type",
        ),
    ];
    for (name, v, why) in &invalid {
        assert!(!spec.violations(&schema(name), v).is_empty(), "{name} accepts {why}:\n{}", pretty(v));
    }
}

// ------------------------------------------------------------------------------------------
// Inputs at the edges of what the SDK allows
// ------------------------------------------------------------------------------------------

/// Inputs the official request shapes allow (or that the gateway accepts) must still come back
/// in the response shapes of the SDK models.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_edge_inputs_come_back_in_the_documented_form() {
    let gw = start().await;
    let c = Client::new(&gw);
    // The request form of url_sources takes "all"/"none" shorthands; responses use objects.
    let agent = c
        .call(
            Method::POST,
            AGENTS,
            AGENTS,
            Some(json!({
                "name": "fetcher",
                "model": "claude-opus-4-7",
                "tools": [{"type": "agent_toolset_20260401",
                           "configs": [{"name": "web_fetch", "url_sources": {"user_input": "all", "client_tool_results": "none"}}]}],
            })),
        )
        .await;
    let agent_id = agent.id();
    let env_id = c.call(Method::POST, ENVS, ENVS, Some(json!({"name": "e"}))).await.id();
    let sid =
        c.call(Method::POST, SESSIONS, SESSIONS, Some(json!({"agent": agent_id, "environment_id": env_id}))).await.id();
    // An image may not have a text source, and a plain-text document source is text/plain.
    for block in [
        json!({"type": "image", "source": {"type": "text", "media_type": "text/plain", "data": "not an image"}}),
        json!({"type": "document", "source": {"type": "text", "media_type": "text/markdown", "data": "# doc"}}),
    ] {
        let sent = c
            .call(
                Method::POST,
                EVENTS,
                &format!("/v1/sessions/{sid}/events"),
                Some(
                    json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": "see"}, block]}]}),
                ),
            )
            .await;
        if sent.status == 200 {
            wait_status(&c, &sid, "idle").await;
        }
    }
    // A call of a tool the agent does not have is refused before any policy applies. The
    // document (after the SDK) says: such a refusal is `evaluated_permission: "deny"` with no
    // `evaluation`.
    let bare = c
        .call(
            Method::POST,
            SESSIONS,
            SESSIONS,
            Some(json!({"agent": {"type": "agent_with_overrides", "id": agent_id, "tools": []}, "environment_id": env_id})),
        )
        .await
        .id();
    let events = format!("/v1/sessions/{bare}/events");
    c.call(Method::POST, EVENTS, &events, Some(say(r#"tool:bash {"command":"true"}"#))).await.ok();
    let deadline = Instant::now() + Duration::from_secs(60);
    let uses = loop {
        let idle = c.call(Method::GET, EVENTS, &format!("{events}?types[]=session.status_idle"), None).await;
        if !idle.ok()["data"].as_array().unwrap().is_empty() {
            break c.call(Method::GET, EVENTS, &format!("{events}?types[]=agent.tool_use"), None).await;
        }
        assert!(Instant::now() < deadline, "the turn never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let tool_use = &uses.ok()["data"][0];
    if tool_use["evaluated_permission"] != "deny" || tool_use.get("evaluation").is_some() {
        c.fail(format!(
            "GET {EVENTS}: a call of a tool the agent does not have should be evaluated_permission \"deny\" without \
             evaluation (the document's AgentToolUseEvent, after the SDK), got:\n{}",
            pretty(tool_use)
        ));
    }
    gw.stop().await;
    let failures = c.failures.lock().unwrap();
    assert!(failures.is_empty(), "{} disagreement(s) with the document:\n\n{}", failures.len(), failures.join("\n\n"));
}
