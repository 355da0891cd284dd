#![allow(clippy::unwrap_used)]
//! The baselines speak the wire the driver's clients expect: one round trip each, through
//! the real binaries, with the same client code the benchmark uses against the gateway.

use std::path::PathBuf;
use std::time::Duration;

use gateway_bench::driver::clients::{self, a2a::A2aClient, acp::AcpPeer, ma};
use gateway_bench::driver::targets::{self, Bins};
use gateway_bench::sse::Frames;

fn bins() -> Bins {
    Bins {
        gateway: PathBuf::from("unused"),
        durable: env!("CARGO_BIN_EXE_bench-durable").into(),
        a2a_durable: env!("CARGO_BIN_EXE_bench-a2a-durable").into(),
        echo: env!("CARGO_BIN_EXE_bench-a2a-echo").into(),
        acp_stub: env!("CARGO_BIN_EXE_bench-acp-stub").into(),
    }
}

#[tokio::test]
async fn bench_durable_serves_the_managed_agents_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let http = clients::http();
    let server = targets::durable(&bins(), &http, dir.path()).await.unwrap();
    let client = ma::MaClient::setup(http.clone(), &server.base, &ma::echo_agent()).await.unwrap();
    for i in 0..3 {
        client.round_trip(&format!("hello {i}")).await.unwrap();
    }
    let missing = http.get(format!("{}/v1/sessions/sesn_nope/events/stream", server.base)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    server.stop().await;
}

#[tokio::test]
async fn bench_a2a_echo_answers_blocking_and_streaming_sends() {
    let dir = tempfile::tempdir().unwrap();
    let http = clients::http();
    let server = targets::echo(&bins(), &http, dir.path(), "echo", Duration::from_millis(50)).await.unwrap();
    let card: serde_json::Value =
        http.get(format!("{}/.well-known/agent-card.json", server.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    A2aClient::new(http.clone(), format!("{}/", server.base)).send(1, "hi").await.unwrap();

    let body = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}});
    let text = http.post(format!("{}/", server.base)).json(&body).send().await.unwrap().text().await.unwrap();
    let mut frames = Frames::default();
    frames.push(text.as_bytes()).unwrap();
    let mut kinds = Vec::new();
    while let Some(data) = frames.next_data() {
        let v: serde_json::Value = serde_json::from_str(&data).unwrap();
        let result = v["result"].as_object().unwrap();
        kinds.push(result.keys().next().unwrap().clone());
        if let Some(s) = result.get("statusUpdate") {
            assert_eq!(s["status"]["state"], "TASK_STATE_COMPLETED");
        }
    }
    assert_eq!(kinds, ["task", "artifactUpdate", "statusUpdate"]);
    server.stop().await;
}

#[tokio::test]
async fn bench_a2a_durable_commits_around_each_send_to_its_remote() {
    let dir = tempfile::tempdir().unwrap();
    let http = clients::http();
    let echo = targets::echo(&bins(), &http, dir.path(), "echo", Duration::ZERO).await.unwrap();
    let proxy = targets::a2a_durable(&bins(), &http, dir.path(), &format!("{}/", echo.base)).await.unwrap();
    let client = A2aClient::new(http.clone(), format!("{}/", proxy.base));
    for i in 0..3 {
        client.send(i, "hi").await.unwrap();
    }
    let params =
        serde_json::json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "echo me"}]}});
    let body = gateway_wire::jsonrpc::envelope::request("x", "SendMessage", params);
    let v: serde_json::Value =
        http.post(format!("{}/", proxy.base)).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["id"], "x");
    let task = &v["result"]["task"];
    assert!(task["id"].as_str().unwrap().starts_with("task_"), "{v}");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "echo me");

    // A remote that is gone: the task is still committed, as failed, and the client hears why.
    echo.stop().await;
    let err = client.send(9, "lost").await.unwrap_err();
    assert_eq!(err.label(), "jsonrpc -32603", "{err}");

    let db =
        sqlx::SqlitePool::connect(&format!("sqlite://{}", dir.path().join("a2a-durable.db").display())).await.unwrap();
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, COUNT(*) FROM a2a_tasks GROUP BY state ORDER BY state")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(states, [("TASK_STATE_COMPLETED".to_owned(), 4), ("TASK_STATE_FAILED".to_owned(), 1)]);
    let (messages,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM a2a_messages").fetch_one(&db).await.unwrap();
    assert_eq!(messages, 10, "the user's message and the answer, per task");
    db.close().await;
    proxy.stop().await;
}

#[tokio::test]
async fn bench_acp_stub_answers_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let mut peer = AcpPeer::new(targets::acp_stub(&bins(), dir.path()).unwrap()).unwrap();
    peer.initialize().await.unwrap();
    let session = peer.new_session(dir.path()).await.unwrap();
    peer.prompt(&session, "hi").await.unwrap();
    peer.prompt(&session, "again").await.unwrap();
    peer.stop().await;
}
