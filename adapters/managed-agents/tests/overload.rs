//! Load shedding on the wire: beyond the admission bounds, the Managed Agents API answers
//! `529 overloaded_error` at once, with `retry-after` and `retry-after-ms` (the SDK honours
//! both), the request id in the envelope, and nothing stored; accepted work is unaffected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_face::FaceContext;
use gateway_managed_agents::ManagedAgents;
use gateway_managed_agents::webhooks::Webhooks;
use gateway_models::fake::FakeModel;
use gateway_native::{NativeBackend, NativeConfig};
use gateway_runtime::AdmissionLimits;
use gateway_runtime::testing::TestGateway;
use gateway_services::SecretBox;
use gateway_services::auth::Authenticator;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

struct Gateway {
    base: String,
    gw: TestGateway,
    http: reqwest::Client,
}

/// A keyless gateway (loopback clients) with no Workers, so queued runs stay queued.
async fn start(limits: AdmissionLimits) -> Gateway {
    let gw = TestGateway::builder()
        .backend_with(BackendRef::Native, |envs| {
            Arc::new(NativeBackend::new(
                Arc::new(FakeModel::default()),
                Some(Arc::clone(envs)),
                NativeConfig::default(),
            ))
        })
        .local_sandbox()
        .no_workers()
        .admission(limits)
        .build()
        .await;
    let webhooks = Webhooks::start(gw.coordinator.clone(), SecretBox::generate(), Default::default()).await.unwrap();
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
    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.http.post(format!("{}{path}", self.base)).json(&body).send().await.unwrap()
    }

    async fn created(&self, path: &str, body: Value) -> String {
        let r = self.post(path, body).await;
        assert_eq!(r.status(), 200, "POST {path}");
        r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
    }

    async fn session(&self) -> String {
        let agent = self.created("/v1/agents", json!({"name": "a", "model": "claude-sonnet-4-6"})).await;
        let env = self.created("/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
        self.created("/v1/sessions", json!({"agent": agent, "environment_id": env})).await
    }
}

fn say(text: &str) -> Value {
    json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]})
}

/// The refusal every overload gets: 529, the retry hint twice, the envelope with the request id.
async fn assert_overloaded(r: reqwest::Response, retry_secs: u64, names: &str) {
    assert_eq!(r.status().as_u16(), 529);
    let h = r.headers();
    assert_eq!(h["retry-after"], retry_secs.to_string().as_str());
    assert_eq!(h["retry-after-ms"], (retry_secs * 1000).to_string().as_str());
    let request_id = h["request-id"].to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
    assert_eq!(body["request_id"], request_id.as_str());
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(names), "the message names the bound: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_past_the_queued_runs_bound_gets_529_and_leaves_nothing() {
    let limits = AdmissionLimits { max_queued_runs: 1, retry_after: Duration::from_secs(2), ..Default::default() };
    let g = start(limits).await;
    let (a, b) = (g.session().await, g.session().await);
    let r = g.post(&format!("/v1/sessions/{a}/events"), say("first")).await;
    assert_eq!(r.status(), 200, "below the bound a message is accepted");
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;

    let asked = Instant::now();
    let r = g.post(&format!("/v1/sessions/{b}/events"), say("second")).await;
    assert!(asked.elapsed() < Duration::from_secs(1), "refused at once, not queued");
    assert_overloaded(r, 2, "turns wait to start").await;
    let events: Value =
        g.http.get(format!("{}/v1/sessions/{b}/events", g.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(events["data"], json!([]), "nothing of the refused message is stored");

    // Reads and interrupts are not new turns: they pass.
    let r = g.post(&format!("/v1/sessions/{a}/events"), json!({"events": [{"type": "user.interrupt"}]})).await;
    assert_eq!(r.status(), 200);
    g.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_bound_get_529_while_a_body_is_still_being_read() {
    let limits = AdmissionLimits { max_requests: 1, ..Default::default() };
    let g = start(limits).await;
    // One request whose body never finishes arriving holds the only place.
    let addr = g.base.trim_start_matches("http://").to_owned();
    let slow_request = || async {
        let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = "POST /v1/agents HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{";
        slow.write_all(head.as_bytes()).await.unwrap();
        slow
    };
    let mut slow = slow_request().await;
    let refused = async {
        loop {
            // On a busy machine the slow head may be read while a probe holds the place: then
            // the slow request itself is refused (its connection has an answer) and is sent again.
            let mut answer = [0u8; 1];
            if !matches!(slow.try_read(&mut answer), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                slow = slow_request().await;
            }
            let r = g.http.get(format!("{}/v1/agents", g.base)).send().await.unwrap();
            if r.status().as_u16() == 529 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let r = tokio::time::timeout(Duration::from_secs(10), refused).await.expect("refused while the body is read");
    assert_overloaded(r, 1, "requests are in flight").await;
    drop(slow);
    let admitted = async {
        loop {
            let r = g.http.get(format!("{}/v1/agents", g.base)).send().await.unwrap();
            if r.status() == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), admitted).await.expect("the place is free once the client left");
    g.gw.stop().await;
}
