//! A keyless Managed Agents gateway on the test runtime, served on a loopback port, and the
//! raw HTTP the tests speak to it (what a client puts on the wire, what it gets back).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_face::FaceContext;
use gateway_managed_agents::ManagedAgents;
use gateway_managed_agents::webhooks::{WebhookSettings, Webhooks};
use gateway_models::fake::FakeModel;
use gateway_native::{NativeBackend, NativeConfig};
use gateway_runtime::testing::{TestGateway, TestGatewayBuilder};
use gateway_services::SecretBox;
use gateway_services::auth::Authenticator;
use serde_json::{Value, json};

pub struct Gateway {
    pub base: String,
    pub gw: TestGateway,
    pub http: reqwest::Client,
}

/// A test gateway with the fake model behind the native backend, the `local` sandbox and quick
/// Workers, changed by `configure`, serving the Managed Agents API with `webhooks`.
pub async fn start(
    configure: impl FnOnce(TestGatewayBuilder) -> TestGatewayBuilder,
    webhooks: WebhookSettings,
) -> Gateway {
    let builder = TestGateway::builder()
        .backend_with(BackendRef::Native, |envs| {
            Arc::new(NativeBackend::new(
                Arc::new(FakeModel::default()),
                Some(Arc::clone(envs)),
                NativeConfig::default(),
            ))
        })
        .local_sandbox()
        .workers(TestGateway::quick_workers());
    let gw = configure(builder).build().await;
    let webhooks = Webhooks::start(gw.coordinator.clone(), SecretBox::generate(), webhooks).await.unwrap();
    let deliveries = gateway_runtime::delivery::Deliveries::new(gw.coordinator.clone(), "test")
        .with(Arc::clone(&webhooks) as Arc<dyn gateway_runtime::delivery::Channel>);
    gw.tasks.spawn(deliveries.run(gw.shutdown.clone()));
    let api = ManagedAgents {
        face: FaceContext::of(&gw, Arc::new(Authenticator::new(Arc::clone(&gw.store))), "http://127.0.0.1"),
        webhooks,
        default_provider: ProviderTier::new("local"),
        keep_alive: Duration::from_secs(15),
        vaults: Arc::new(gateway_services::vaults::VaultService::new(Arc::clone(&gw.store), SecretBox::generate())),
        server_probe: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve =
        axum::serve(listener, gateway_managed_agents::router(api).into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(gw.shutdown.clone().cancelled_owned());
    gw.tasks.spawn(async move { serve.await });
    Gateway { base: format!("http://{addr}"), gw, http: reqwest::Client::new() }
}

impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.http.post(self.url(path)).json(&body).send().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> Value {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// POSTs `body` and returns the created object's id (200 expected).
    pub async fn created(&self, path: &str, body: Value) -> String {
        let r = self.post(path, body).await;
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "POST {path}: {body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Uploads `content` as `name` with `mime` (`POST /v1/files`, multipart).
    pub async fn upload(&self, name: &str, mime: &str, content: &[u8]) -> reqwest::Response {
        let (content_type, body) = multipart(name, mime, content);
        self.http.post(self.url("/v1/files")).header("content-type", content_type).body(body).send().await.unwrap()
    }

    /// The session's events, oldest first.
    pub async fn events(&self, session: &str) -> Vec<Value> {
        let page = self.get(&format!("/v1/sessions/{session}/events?limit=1000")).await;
        page["data"].as_array().unwrap().clone()
    }

    /// Waits (up to 30 s) for an event of `kind` in the session's log, and returns it.
    pub async fn wait_for_event(&self, session: &str, kind: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(e) = self.events(session).await.into_iter().rev().find(|e| e["type"] == kind) {
                return e;
            }
            assert!(Instant::now() < deadline, "no {kind} in {session}: {:?}", self.events(session).await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 30 s) until the session is idle.
    pub async fn wait_idle(&self, session: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.get(&format!("/v1/sessions/{session}")).await["status"] != "idle" {
            assert!(Instant::now() < deadline, "session {session} never became idle");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A `multipart/form-data` body holding one `file` part: its content type and bytes.
pub fn multipart(name: &str, mime: &str, content: &[u8]) -> (String, Vec<u8>) {
    let boundary = "gateway-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {mime}\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub fn say(text: &str) -> Value {
    json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]})
}

/// The error envelope of a refusal: its status, `error.type` and `details.error_code`.
pub async fn refusal(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    (status, body["error"].clone())
}
