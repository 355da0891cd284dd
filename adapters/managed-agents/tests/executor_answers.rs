//! What a self-hosted executor (an environment key) may answer, as the attack sends it: only
//! `user.tool_result`s for the built-in calls its work queue gave it, never the application's
//! custom tools, never an id that names no call; and its results obey the output cap of the
//! gateway's own built-in tools, while the request body bound still refuses absurd bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use gateway_core::EventId;
use gateway_runtime::EnvironmentsConfig;
use serde_json::{Value, json};
use support::{Gateway, refusal, say, start};

/// The output cap of built-in tools in these tests (`[environments] output_cap_bytes`).
const CAP: usize = 1000;

struct SelfHosted {
    g: Gateway,
    env: String,
    session: String,
    key: String,
}

async fn self_hosted() -> SelfHosted {
    let mut envs = EnvironmentsConfig::default();
    envs.limits.output_cap = CAP;
    let g = start(|b| b.environments(envs), Default::default()).await;
    let env = g.created("/v1/environments", json!({"name": "mine", "config": {"type": "self_hosted"}})).await;
    let r = g.post(&format!("/v1/environments/{env}/keys"), json!({"name": "worker"})).await;
    assert_eq!(r.status(), 200);
    let key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_owned();
    let lookup = json!({"type": "custom", "name": "lookup", "description": "looks up",
                        "input_schema": {"type": "object", "properties": {}}});
    let agent = g
        .created(
            "/v1/agents",
            json!({"name": "a", "model": "claude-sonnet-4-6", "tools": [{"type": "agent_toolset_20260401"}, lookup]}),
        )
        .await;
    let session = g.created("/v1/sessions", json!({"agent": agent, "environment_id": env})).await;
    SelfHosted { g, env, session, key }
}

impl SelfHosted {
    /// Sends events as the executor (the environment key).
    async fn answer(&self, events: Value) -> reqwest::Response {
        let url = self.g.url(&format!("/v1/sessions/{}/events", self.session));
        self.g.http.post(url).bearer_auth(&self.key).json(&json!({"events": events})).send().await.unwrap()
    }

    /// Connects as the executor: polls the environment's queue until the session's item is
    /// handed out, and acknowledges it.
    async fn connect(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let item = loop {
            let url = self.g.url(&format!("/v1/environments/{}/work/poll?block_ms=500", self.env));
            let r = self.g.http.get(url).bearer_auth(&self.key).header("anthropic-worker-id", "w1").send().await;
            let polled: Value = r.unwrap().json().await.unwrap();
            if !polled.is_null() {
                break polled;
            }
            assert!(Instant::now() < deadline, "the session's work item never came");
        };
        let url = self.g.url(&format!("/v1/environments/{}/work/{}/ack", self.env, item["id"].as_str().unwrap()));
        let r = self.g.http.post(url).bearer_auth(&self.key).send().await.unwrap();
        assert_eq!(r.status(), 200, "ack: {}", r.text().await.unwrap());
    }
}

fn tool_result(id: &str, text: &str) -> Value {
    json!([{"type": "user.tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}]}])
}

fn custom_result(id: &str) -> Value {
    json!([{"type": "user.custom_tool_result", "custom_tool_use_id": id, "content": [{"type": "text", "text": "42"}]}])
}

async fn assert_forbidden(r: reqwest::Response, what: &str) {
    let (status, error) = refusal(r).await;
    assert_eq!((status, error["type"].as_str()), (403, Some("permission_error")), "{what}: {error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_key_answers_only_its_builtin_calls_and_within_the_output_cap() {
    let h = self_hosted().await;
    let (g, s) = (&h.g, h.session.as_str());

    // A built-in call goes to the executor.
    let r = g.post(&format!("/v1/sessions/{s}/events"), say(r#"tool:bash {"command": "cat big.log"}"#)).await;
    assert_eq!(r.status(), 200);
    h.connect().await;
    let call = g.wait_for_event(s, "agent.tool_use").await;
    let call_id = call["id"].as_str().unwrap();
    let message_id = g.events(s).await.into_iter().find(|e| e["type"] == "user.message").unwrap()["id"].clone();

    // Never as a custom tool's answer, never for an id that names no call.
    assert_forbidden(h.answer(custom_result(call_id)).await, "user.custom_tool_result").await;
    for unknown in [EventId::new().to_string(), message_id.as_str().unwrap().to_owned()] {
        let (status, error) = refusal(h.answer(tool_result(&unknown, "x")).await).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["details"]["error_code"], "tool_use_not_pending", "{error}");
    }

    // An absurd body is still refused whole by the body bound.
    let absurd = tool_result(call_id, &"x".repeat(33 << 20));
    assert_eq!(h.answer(absurd).await.status(), 413);

    // A 5 MiB result is admitted held to the output cap, with the note built-in output gets.
    let r = h.answer(tool_result(call_id, &"y".repeat(5 << 20))).await;
    assert_eq!(r.status(), 200);
    let echoed: Value = r.json().await.unwrap();
    let expected = json!([
        {"type": "text", "text": "y".repeat(CAP)},
        {"type": "text", "text": format!("[output truncated: {} more bytes were dropped (the cap is {CAP} bytes)]", (5 << 20) - CAP)},
    ]);
    assert_eq!(echoed["data"][0]["content"], expected);
    let stored = g.wait_for_event(s, "user.tool_result").await;
    assert_eq!(stored["content"], expected, "stored and served capped");
    g.wait_idle(s).await;

    // The application's custom tool is the application's to answer.
    let r = g.post(&format!("/v1/sessions/{s}/events"), say("custom:lookup {}")).await;
    assert_eq!(r.status(), 200);
    let custom = g.wait_for_event(s, "agent.custom_tool_use").await;
    let custom_id = custom["id"].as_str().unwrap();
    g.wait_idle(s).await;
    assert_forbidden(h.answer(custom_result(custom_id)).await, "user.custom_tool_result").await;
    assert_forbidden(h.answer(tool_result(custom_id, "forged")).await, "a user.tool_result for a custom call").await;
    assert_forbidden(h.answer(say("hello")["events"].clone()).await, "user.message").await;
    let r = g.post(&format!("/v1/sessions/{s}/events"), json!({"events": custom_result(custom_id)})).await;
    assert_eq!(r.status(), 200, "the application answers it");
    h.g.gw.stop().await;
}
