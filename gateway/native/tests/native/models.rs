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

/// Models by name: `claude` on the Messages API stub, `local` on its Chat Completions route,
/// `priced` the fake at list prices (dear ones, so one request costs cents), the fake for the
/// rest.
fn routed(stub: &gateway_models::stub::StubServer) -> gateway_native::Models {
    use gateway_core::models::{ModelCatalog, ModelEntry, Prices};
    use gateway_models::ModelClient;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;
    let entry = |provider: &str, model: &str, prices| ModelEntry {
        provider: provider.into(),
        model: Some(model.into()),
        context_window: None,
        prices,
    };
    let dear = Prices { input: 1000.0, output: 1000.0, cache_write: 1000.0, cache_read: 1000.0 };
    let catalog = ModelCatalog::new(
        BTreeMap::from([
            ("claude".to_owned(), entry("anthropic", "claude-sonnet-4-5", None)),
            ("local".to_owned(), entry("openai", "qwen3:8b", None)),
            ("priced".to_owned(), entry("fake", "priced", Some(dear))),
        ]),
        Err(ModelEntry { provider: "fake".into(), model: None, context_window: None, prices: None }),
    )
    .unwrap();
    let anthropic = gateway_models::anthropic::AnthropicClient::new(gateway_models::anthropic::AnthropicConfig::new(
        stub.base_url(),
        gateway_models::anthropic::Credential::ApiKey("k".into()),
    ))
    .unwrap();
    let openai = gateway_models::openai::OpenAiClient::new(gateway_models::openai::OpenAiConfig::new(
        format!("{}/v1", stub.base_url()),
        Some("o".into()),
    ))
    .unwrap();
    let fake: Arc<dyn ModelClient> = Arc::new(gateway_models::fake::FakeModel::new());
    let clients = HashMap::from([
        ("claude".to_owned(), Arc::new(anthropic) as Arc<dyn ModelClient>),
        ("local".to_owned(), Arc::new(openai) as Arc<dyn ModelClient>),
        ("priced".to_owned(), Arc::clone(&fake)),
    ]);
    gateway_native::Models::new(Arc::new(catalog), clients, fake)
}

/// One agent definition, two providers: changing its `model` moves it from the Messages API
/// to an OpenAI-compatible server, each sent the id its table names, each completing a
/// streamed tool loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_agent_runs_on_either_provider_by_its_model_name() {
    let stub = gateway_models::stub::StubServer::start().await;
    let n = crate::harness::native_with(routed(&stub), crate::harness::offer(&[]), std::time::Duration::from_secs(300))
        .await;
    let pool = n.workers(0);
    for (name, path, upstream) in
        [("claude", "/v1/messages", "claude-sonnet-4-5"), ("local", "/v1/chat/completions", "qwen3:8b")]
    {
        let mut agent = toolset(PermissionPolicy::AlwaysAllow);
        agent.model.id = name.into();
        let s = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();
        let turn = n.turn(&s, "tool:bash {\"command\":\"echo via-provider\"}").await;
        assert_eq!(session_error(&turn), None, "{name}");
        assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn), "{name}");
        let outputs: Vec<String> = tool_results(&turn).into_iter().map(|(out, _)| out.trim().to_owned()).collect();
        assert_eq!(outputs, ["via-provider"], "{name}");
        assert!(
            turn.iter().any(|e| matches!(&e.payload, EventPayload::AgentMessage { .. })),
            "{name} answered after the tool"
        );
        let sent: Vec<Value> = stub.requests().into_iter().filter(|r| r.path == path).map(|r| r.body).collect();
        assert_eq!(sent.len(), 2, "{name}: the call and the answer after its result");
        assert!(sent.iter().all(|b| b["model"] == upstream && b["stream"] == true), "{name}: {sent:?}");
        // The model's usage is counted; these tables have no prices, so its cost is unknown.
        let used = turn.iter().find_map(|e| match &e.payload {
            EventPayload::SessionUsage { usage, .. } => Some(usage.clone()),
            _ => None,
        });
        let used = used.expect("the turn ends with the session's usage");
        assert!(used.input_tokens > 0 && used.output_tokens > 0, "{name}: {used:?}");
        assert_eq!((used.list_cost(), used.unpriced_requests), (None, 2), "{name}");
    }
    // The tool result went back to the OpenAI-compatible server as a `tool` message.
    let last = stub.requests().into_iter().rfind(|r| r.path == "/v1/chat/completions").unwrap().body;
    let tool = last["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
    assert!(tool.is_some_and(|t| t["content"].as_str().unwrap_or_default().contains("via-provider")), "{last}");
    pool.shutdown().await;
}

/// A budget below one turn's cost: the turn's first request runs (nothing was spent yet), the
/// next one is not made, and the turn ends at the budget; so does every later turn, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_stops_the_next_model_request_once_spent() {
    use gateway_core::session::Budget;
    let stub = gateway_models::stub::StubServer::start().await;
    let n = crate::harness::native_with(routed(&stub), crate::harness::offer(&[]), std::time::Duration::from_secs(300))
        .await;
    let pool = n.workers(0);
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.model.id = "priced".into();
    let budget = Budget { max_list_cost_micros: 10_000 };
    let s = n.session_capped(agent, cloud(Provisioning::OnToolUse, "local"), vec![], Some(budget)).await.unwrap();
    let turn = n.turn(&s, "tool:bash {\"command\":\"echo spent\"}").await;
    let requests = turn.iter().filter(|e| e.kind() == EventKind::ModelRequestStarted).count();
    assert_eq!(requests, 1, "the request after the tool was not made: {turn:?}");
    assert_eq!(tool_results(&turn).len(), 1, "the tool the first request asked for ran");
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::BudgetReached));
    let (usage, reported) = turn
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::SessionUsage { usage, budget } => Some((usage.clone(), *budget)),
            _ => None,
        })
        .expect("the session's usage");
    assert_eq!(reported, Some(budget));
    let cost = usage.list_cost().expect("a priced model's cost is known");
    // The fake's deterministic usage at 1000 USD per million tokens: one micro-dollar = a
    // thousandth of a token's price, so the cost is 1000 x the tokens.
    assert_eq!(cost, 1000 * (usage.input_tokens + usage.output_tokens));
    assert!(cost >= budget.max_list_cost_micros, "{cost}");
    let read = n.coordinator.get_session(&s.id).await.unwrap();
    assert_eq!(read.usage.list_cost(), Some(cost), "the session object counts it too");

    let again = n.turn(&s, "hello").await;
    assert!(again.iter().all(|e| e.kind() != EventKind::ModelRequestStarted), "no request: {again:?}");
    assert_eq!(stop_of(again.last().unwrap()), Some(StopReason::BudgetReached));
    pool.shutdown().await;
}

/// A session pushed past a small context window compacts and keeps answering: the log holds
/// the summary (naming what it covers) and the model is shown it in their place; a message
/// that cannot fit even alone ends its turn with the compaction-limit error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_session_compacts_and_keeps_answering_until_nothing_more_fits() {
    use gateway_core::event::ErrorKind;
    use gateway_core::models::{ModelCatalog, ModelEntry};
    use gateway_models::ModelClient;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;
    let stub = gateway_models::stub::StubServer::start().await;
    let entry = ModelEntry {
        provider: "anthropic".into(),
        model: Some("claude-haiku".into()),
        context_window: Some(1500),
        prices: None,
    };
    let catalog = ModelCatalog::new(BTreeMap::from([("small".to_owned(), entry)]), Ok("small".into())).unwrap();
    let client: Arc<dyn ModelClient> = Arc::new(
        gateway_models::anthropic::AnthropicClient::new(gateway_models::anthropic::AnthropicConfig::new(
            stub.base_url(),
            gateway_models::anthropic::Credential::ApiKey("k".into()),
        ))
        .unwrap(),
    );
    let models = gateway_native::Models::new(
        Arc::new(catalog),
        HashMap::from([("small".to_owned(), Arc::clone(&client))]),
        client,
    );
    let n = crate::harness::native_with(models, crate::harness::offer(&[]), std::time::Duration::from_secs(300)).await;
    let pool = n.workers(0);
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.tools = vec![];
    agent.model.id = "small".into();
    let s = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();

    let first = format!("first {}", "a".repeat(2000));
    let turn = n.turn(&s, &first).await;
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn));
    assert!(turn.iter().all(|e| e.kind() != EventKind::ContextCompacted), "the first turn fits");

    let second = format!("second {}", "b".repeat(2000));
    let turn = n.turn(&s, &second).await;
    assert_eq!(session_error(&turn), None);
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::EndTurn), "it keeps answering");
    let (summary, through) = turn
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::ContextCompacted { summary, through } => Some((summary.clone(), *through)),
            _ => None,
        })
        .expect("the second turn compacted the first");
    let second_seq = turn.iter().find(|e| e.kind() == EventKind::UserMessage).map(|e| e.seq);
    assert!(second_seq.is_some_and(|seq| through < seq), "the new message is kept whole");
    let answer = turn.iter().find_map(|e| match &e.payload {
        EventPayload::AgentMessage { content } => Some(gateway_core::content::plain_text(content)),
        _ => None,
    });
    assert_eq!(answer.as_deref(), Some(format!("echo: {second}").as_str()));
    // The request after the compaction: the summary first, the first turn gone, the new
    // message whole.
    let sent: Vec<Value> = stub.requests().into_iter().filter(|r| r.path == "/v1/messages").map(|r| r.body).collect();
    assert_eq!(sent.len(), 3, "the first turn, the summary, the second turn");
    assert!(sent[1]["messages"].to_string().contains(&first), "the summary request reads what it covers");
    let last = sent[2]["messages"].to_string();
    assert!(last.contains(&summary.replace('\n', "\\n")) && last.contains(&second), "{last}");
    assert!(!last.contains(&first), "the compacted turn is not sent again");
    // The log keeps everything; a restarted run shows the model the same (its view is the log).
    let all = n
        .coordinator
        .list_events(&s.id, &Default::default(), &gateway_store::PageRequest::first(100, gateway_store::Order::Asc))
        .await
        .unwrap()
        .items;
    assert!(all.iter().any(|e| matches!(&e.payload, EventPayload::UserMessage { content } if gateway_core::content::plain_text(content) == first)));

    // One message larger than the window: compacting what precedes it does not make room.
    let huge = format!("huge {}", "c".repeat(8000));
    let turn = n.turn(&s, &huge).await;
    assert_eq!(session_error(&turn).map(|(k, _)| k), Some(ErrorKind::CompactionLimitReached));
    assert_eq!(stop_of(turn.last().unwrap()), Some(StopReason::RetriesExhausted));
    // The only requests made were summaries: none that could not fit.
    let count = |k: EventKind| turn.iter().filter(|e| e.kind() == k).count();
    assert_eq!(count(EventKind::ContextCompacted), 1, "what preceded it was compacted once more: {turn:?}");
    assert_eq!(count(EventKind::ModelRequestStarted), 1, "{turn:?}");
    assert_eq!(count(EventKind::AgentMessage), 0);
    pool.shutdown().await;
}
