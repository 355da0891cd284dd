//! The native loop with what a real model needs, against the Anthropic API stub (which
//! checks what the API checks): extended thinking sent back as received, and prompt caching.

use gateway_core::agent::PermissionPolicy;
use gateway_core::environment::Provisioning;
use gateway_core::event::{EventKind, EventPayload, StopReason, ThinkingSeal};
use gateway_runtime::{Delivery, Preview};
use serde_json::Value;

use crate::common::stop_of;
use crate::harness::{cloud, native_on_stub, session_error, tool_results, toolset};

/// The thinking blocks of a request's assistant messages, in order.
fn thinking_sent(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thinking_agent_completes_a_tool_loop_sending_its_reasoning_back_as_received() {
    let (stub, n) = native_on_stub().await;
    let pool = n.workers(0);
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.model.effort = Some("low".into());
    let s = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();

    let prompt = "tool:bash {\"command\":\"echo one\"}\nthen tool:bash {\"command\":\"echo two\"}\n\
                  then tool:bash {\"command\":\"echo three\"}";
    let turn = n.turn(&s, prompt).await;
    assert_eq!(session_error(&turn), None, "the stub refused a request");
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn));
    let outputs: Vec<String> = tool_results(&turn).into_iter().map(|(out, _)| out.trim().to_owned()).collect();
    assert_eq!(outputs, ["one", "two", "three"]);

    // Each round's reasoning is in the log ahead of its call, sealed with the model's signature.
    let thoughts: Vec<(String, String)> = turn
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentThinking { text: Some(t), seal: Some(ThinkingSeal::Signature(s)) } => {
                Some((t.clone(), s.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(thoughts.len(), 4, "one per model request: {turn:?}");

    let requests: Vec<Value> =
        stub.requests().into_iter().filter(|r| r.path == "/v1/messages").map(|r| r.body).collect();
    assert_eq!(requests.len(), 4, "three tool rounds and the answer");
    for (k, body) in requests.iter().enumerate() {
        assert_eq!(body["thinking"]["type"], "enabled");
        assert_eq!(body["thinking"]["budget_tokens"], 1024);
        assert!(body["max_tokens"].as_u64().unwrap() > 1024);
        // Request k sends back the reasoning of the k rounds before it, byte for byte.
        let sent: Vec<(String, String)> = thinking_sent(body)
            .iter()
            .map(|b| (b["thinking"].as_str().unwrap().to_owned(), b["signature"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(sent, thoughts[..k], "request {k}");
    }

    // Prompt caching: every request marks its moving end; the later ones read the prefix the
    // earlier ones wrote, and the log's request spans say so.
    for body in &requests {
        let last = body["messages"].as_array().unwrap().last().unwrap()["content"].as_array().unwrap().last().unwrap();
        assert_eq!(last["cache_control"]["type"], "ephemeral", "{last}");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    }
    let reads: Vec<u64> = turn
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ModelRequestEnded { usage, .. } => Some(usage.cache_read_input_tokens),
            _ => None,
        })
        .collect();
    assert_eq!(reads.len(), 4);
    assert_eq!(reads[0], 0, "nothing was cached before the first request");
    assert!(reads[1..].iter().all(|r| *r > 0), "later requests read the cache: {reads:?}");

    // The reasoning streams as it comes (previews: start, then deltas), under the id its
    // event commits with.
    let stream = n.stream(&s, true).await;
    n.coordinator.submit(&s.id, vec![crate::common::say("think aloud")]).await.unwrap();
    let got = crate::common::until(stream, 30, crate::common::turn_ended).await;
    let committed = crate::common::events(&got)
        .into_iter()
        .find_map(|e| match e.payload {
            EventPayload::AgentThinking { text: Some(t), .. } => Some((e.id, t)),
            _ => None,
        })
        .expect("the reasoning committed");
    let mut started = false;
    let mut streamed = String::new();
    for d in &got {
        match d {
            Delivery::Preview(Preview::Start { event_id, kind: EventKind::AgentThinking }) => {
                assert_eq!(event_id, &committed.0);
                started = true;
            }
            Delivery::Preview(Preview::ThoughtDelta { event_id, text }) => {
                assert!(started && event_id == &committed.0);
                streamed.push_str(text);
            }
            _ => {}
        }
    }
    assert_eq!(streamed, committed.1, "the deltas spell the committed reasoning");

    // Reasoning the model returns encrypted goes back the same way.
    let turn = n.turn(&s, "tool:bash {\"command\":\"echo redacted\"}").await;
    assert_eq!(session_error(&turn), None);
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn));
    let last = stub.requests().into_iter().rfind(|r| r.path == "/v1/messages").unwrap().body;
    let redacted: Vec<Value> = thinking_sent(&last).into_iter().filter(|b| b["type"] == "redacted_thinking").collect();
    assert_eq!(redacted.len(), 1, "{last}");
    pool.shutdown().await;
}

/// Without `model.effort` no thinking is asked for, and reasoning in the log is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_without_effort_asks_for_no_thinking() {
    let (stub, n) = native_on_stub().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let turn = n.turn(&s, "tool:bash {\"command\":\"echo x\"}").await;
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn));
    for r in stub.requests().into_iter().filter(|r| r.path == "/v1/messages") {
        assert!(r.body.get("thinking").is_none(), "{}", r.body);
        assert!(thinking_sent(&r.body).is_empty());
    }
    pool.shutdown().await;
}
