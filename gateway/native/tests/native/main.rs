//! The native backend end to end: Coordinator + Workers + the fake model (or the Anthropic
//! client against the loopback stub) + Session Environments on the local provider.
#![allow(clippy::unwrap_used)]

#[path = "../../../runtime/tests/common/mod.rs"]
mod common;
mod git_server;
mod harness;
mod models;
mod mounts;
mod workspaces;

use std::sync::Arc;
use std::time::Duration;

use common::{events, kinds, say, stop_of, texts, turn_ended, until};
use gateway_core::agent::{PermissionPolicy, ToolSpec};
use gateway_core::environment::Provisioning;
use gateway_core::event::{ErrorKind, EventKind, EventPayload, NewEvent, RetryStatus, StopReason, ToolPermission};
use gateway_core::session::{EnvironmentState, ResourceKind};
use gateway_models::fake::FakeModel;
use gateway_runtime::{Delivery, RuntimeError};
use gateway_sandbox::SandboxProvider;
use gateway_sandbox::local::LocalProvider;
use harness::{cloud, native, native_on, native_with, offer, session_error, tool_results, toolset};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_that_never_calls_a_tool_never_gets_an_environment() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let stream = n.stream(&s, true).await;
    n.coordinator.submit(&s.id, vec![say("hello there")]).await.unwrap();
    let got = until(stream, 30, turn_ended).await;
    let es = events(&got);
    use EventKind::*;
    assert_eq!(
        kinds(&es),
        vec![UserMessage, TurnStarted, ModelRequestStarted, AgentMessage, ModelRequestEnded, SessionUsage, TurnEnded]
    );
    assert_eq!(texts(&es), vec!["echo: hello there"]);
    let deltas =
        got.iter().filter(|d| matches!(d, Delivery::Preview(gateway_runtime::Preview::TextDelta { .. }))).count();
    assert!(deltas >= 2, "the fake model streams in at least two chunks, got {deltas}");
    assert_eq!(n.state(&s).await, EnvironmentState::None);
    assert!(std::fs::read_dir(n.workspaces.path()).unwrap().next().is_none(), "no workspace was created");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_first_tool_call_realizes_the_environment_and_files_survive_turns() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let first = n.turn(&s, r#"tool:write {"file_path": "notes.txt", "content": "remember me"}"#).await;
    use EventKind::*;
    assert_eq!(
        kinds(&first),
        vec![
            UserMessage,
            TurnStarted,
            ModelRequestStarted,
            ToolUse,
            ModelRequestEnded,
            ToolStarted,
            ToolResult,
            ModelRequestStarted,
            AgentMessage,
            ModelRequestEnded,
            SessionUsage,
            TurnEnded
        ]
    );
    assert_eq!(n.state(&s).await, EnvironmentState::Realized);
    assert!(texts(&first)[0].starts_with("done: "), "{:?}", texts(&first));

    let second = n.turn(&s, r#"tool:read {"file_path": "notes.txt"}"#).await;
    let (out, is_error) = tool_results(&second).remove(0);
    assert!(!is_error && out.contains("remember me"), "the file written in turn 1 is there in turn 2: {out}");

    // Another session cannot see it.
    let other = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let theirs = n.turn(&other, r#"tool:read {"file_path": "notes.txt"}"#).await;
    let (_, is_error) = tool_results(&theirs).remove(0);
    assert!(is_error, "sessions never share a workspace");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_provisioning_and_mounts_realize_before_the_first_model_step() {
    let n = native().await;
    let pool = n.workers(0);
    let eager =
        n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::Eager, "local"), vec![]).await.unwrap();
    n.turn(&eager, "just talk").await;
    assert_eq!(n.state(&eager).await, EnvironmentState::Realized, "eager: realized although no tool ran");

    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("README"), "the user's project").unwrap();
    let mounted = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            cloud(Provisioning::OnToolUse, "local"),
            vec![ResourceKind::workspace(std::fs::canonicalize(project.path()).unwrap().display().to_string(), None)],
        )
        .await
        .unwrap();
    n.turn(&mounted, "hello").await;
    assert_eq!(n.state(&mounted).await, EnvironmentState::Realized, "a mount forces realization");
    let read = n.turn(&mounted, r#"tool:read {"file_path": "README"}"#).await;
    assert!(tool_results(&read)[0].0.contains("the user's project"), "the agent works in the mounted directory");
    n.coordinator.delete_session(&mounted.id).await.unwrap();
    assert!(project.path().join("README").exists(), "release never deletes a client's own directory");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_provider_fails_closed_with_a_typed_error() {
    // The host offered `namespace` when it started, but bubblewrap is gone by the time the
    // first tool call needs it.
    let broken: Arc<dyn SandboxProvider> =
        Arc::new(gateway_sandbox::namespace::NamespaceProvider::new("/nonexistent/bwrap"));
    let n = native_on(
        Arc::new(FakeModel::new()),
        offer(&["namespace"]),
        Duration::from_secs(300),
        vec![Arc::new(LocalProvider::new()), broken],
    )
    .await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "namespace"), vec![])
        .await
        .unwrap();
    let es = n.turn(&s, r#"tool:write {"file_path": "x", "content": "y"}"#).await;
    let err = session_error(&es);
    let (kind, message) = err.expect("a typed error event");
    assert_eq!(kind, ErrorKind::PlacementFailed);
    assert!(message.contains("namespace"), "{message}");
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::Failed));
    assert!(tool_results(&es).is_empty(), "no weaker provider ran the tool");
    assert!(std::fs::read_dir(n.workspaces.path()).unwrap().next().is_none());
    // And at creation, a provider nobody offers is refused outright.
    let refused =
        n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "firecracker"), vec![]).await;
    assert!(matches!(refused, Err(RuntimeError::Placement(_))), "{refused:?}");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn always_ask_parks_until_allowed_or_denied() {
    let n = native().await;
    let pool = n.workers(0);
    let s =
        n.session(toolset(PermissionPolicy::AlwaysAsk), cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();
    for (allow, expect) in [(true, "hi from bash"), (false, "not today")] {
        let parked = n.turn(&s, r#"tool:bash {"command": "echo hi from bash"}"#).await;
        let call = parked.iter().find(|e| e.kind() == EventKind::ToolUse).unwrap().id.clone();
        assert_eq!(stop_of(parked.last().unwrap()), Some(StopReason::RequiresAction { event_ids: vec![call.clone()] }));
        assert!(tool_results(&parked).is_empty(), "nothing runs before the answer");
        let stream = n.stream(&s, false).await;
        let answer = EventPayload::ToolConfirmation {
            tool_use_id: call,
            allow,
            deny_message: (!allow).then(|| "not today".to_owned()),
        };
        n.coordinator.submit(&s.id, vec![NewEvent::new(answer)]).await.unwrap();
        let rest = events(&until(stream, 30, turn_ended).await);
        let (out, is_error) = tool_results(&rest).remove(0);
        assert!(out.contains(expect), "{out}");
        assert_eq!(is_error, !allow);
        assert!(texts(&rest)[0].starts_with("done: "));
        assert_eq!(stop_of(rest.last().unwrap()), Some(StopReason::EndTurn));
    }
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn custom_tools_park_for_the_client_result() {
    let n = native().await;
    let pool = n.workers(0);
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.tools.push(ToolSpec::Custom {
        name: "lookup".into(),
        description: "looks things up".into(),
        input_schema: serde_json::json!({"type": "object"}).as_object().unwrap().clone(),
    });
    let s = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();
    let parked = n.turn(&s, r#"custom:lookup {"q": "answer"}"#).await;
    let call = parked.iter().find(|e| e.kind() == EventKind::ToolUse).unwrap().id.clone();
    assert!(matches!(stop_of(parked.last().unwrap()), Some(StopReason::RequiresAction { .. })));
    let stream = n.stream(&s, false).await;
    let result = EventPayload::ClientToolResult {
        tool_use_id: call,
        content: vec![gateway_core::content::ContentBlock::text("forty-two")],
        is_error: false,
        origin: gateway_core::event::ToolOrigin::Custom,
    };
    n.coordinator.submit(&s.id, vec![NewEvent::new(result)]).await.unwrap();
    let rest = events(&until(stream, 30, turn_ended).await);
    assert_eq!(texts(&rest), vec!["done: forty-two"]);
    assert_eq!(n.state(&s).await, EnvironmentState::None, "custom tools need no environment");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_past_twenty_rounds_ends_with_a_clear_error() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let es = n.turn(&s, r#"repeat:bash {"command": "true"}"#).await;
    assert_eq!(es.iter().filter(|e| e.kind() == EventKind::ModelRequestStarted).count(), 20);
    let err = session_error(&es);
    let (kind, message) = err.unwrap();
    assert_eq!(kind, ErrorKind::RoundLimitReached);
    assert!(message.contains("20"), "{message}");
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::RoundLimit));
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_stops_a_running_tool() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let stream = n.stream(&s, false).await;
    let mut stream = Box::pin(stream);
    n.coordinator.submit(&s.id, vec![say(r#"tool:bash {"command": "sleep 60"}"#)]).await.unwrap();
    until(&mut stream, 30, |d| matches!(d, Delivery::Event(e) if e.kind() == EventKind::ToolStarted)).await;
    let started = std::time::Instant::now();
    n.coordinator.interrupt(&s.id).await.unwrap();
    let rest = events(&until(&mut stream, 30, turn_ended).await);
    assert!(started.elapsed() < Duration::from_secs(20), "the sleep was killed, not waited for");
    assert!(tool_results(&rest)[0].1, "the cancelled call reports an error");
    assert_eq!(stop_of(rest.last().unwrap()), Some(StopReason::Interrupted));

    // The next message is answered, not the cancelled call's result beside it.
    let next = n.turn(&s, "what now?").await;
    assert_eq!(texts(&next), vec!["echo: what now?"], "{next:#?}");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_hand_serves_a_session_across_turns() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    n.turn(&s, r#"tool:bash {"command": "export X=1"}"#).await;
    let second = n.turn(&s, r#"tool:bash {"command": "echo $X"}"#).await;
    assert_eq!(tool_results(&second), vec![("1\n".to_owned(), false)], "the shell of turn 1 runs turn 2");
    assert_eq!(n.state(&s).await, EnvironmentState::Realized, "no hibernation in between");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_started_tool_is_never_run_again_after_a_lost_claim() {
    let n = native().await;
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let first = n.workers(0);
    n.coordinator.submit(&s.id, vec![say(r#"tool:bash {"command": "echo ran >> marker; sleep 60"}"#)]).await.unwrap();
    common::wait_for(30, || async {
        let log = n.store.events_after(&s.id, 0, 100).await.unwrap();
        log.iter().any(|e| e.kind() == EventKind::ToolStarted).then_some(())
    })
    .await
    .expect("the call was journaled as started");
    common::wait_for(10, || async { n.workspaces.path().join(s.id.as_str()).join("marker").exists().then_some(()) })
        .await
        .unwrap();
    first.abort().await; // a crash: no settle, no release
    let stream = n.stream(&s, false).await;
    let second = n.workers(0);
    let rest = events(&until(stream, 30, turn_ended).await);
    let (out, is_error) = tool_results(&rest).remove(0);
    assert!(is_error && out.contains("indeterminate"), "{out}");
    let marker = std::fs::read_to_string(n.workspaces.path().join(s.id.as_str()).join("marker")).unwrap();
    assert_eq!(marker, "ran\n", "the command ran once, never twice");
    assert!(texts(&rest)[0].starts_with("done: indeterminate"));
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_environments_hibernate_and_wake_with_their_files() {
    let n = native_with(Arc::new(FakeModel::new()), offer(&[]), Duration::from_millis(200)).await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    n.turn(&s, r#"tool:bash {"command": "echo kept > file; export GONE=1"}"#).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    n.environments.hibernate_idle(&n.store).await;
    assert_eq!(n.state(&s).await, EnvironmentState::Hibernated);
    let es = n.turn(&s, r#"tool:bash {"command": "cat file; echo gone=$GONE"}"#).await;
    let (out, _) = tool_results(&es).remove(0);
    assert!(out.contains("kept"), "files survive hibernation: {out}");
    assert!(out.contains("gone=\n") || out.trim_end().ends_with("gone="), "the shell was restarted: {out}");
    assert_eq!(n.state(&s).await, EnvironmentState::Realized);

    n.coordinator.delete_session(&s.id).await.unwrap();
    assert!(!n.workspaces.path().join(s.id.as_str()).exists(), "release removes the workspace");
    pool.shutdown().await;
}

/// At most `max_live` environments stay live: realizing a third of two hibernates the least
/// recently used idle one (its files kept, its shell stopped), whose next turn wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_environments_are_capped_by_hibernating_the_least_recently_used() {
    let config = gateway_runtime::EnvironmentsConfig { max_live: Some(2), ..Default::default() };
    let n = harness::native_configured(config).await;
    let pool = n.workers(0);
    let mut sessions = Vec::new();
    for i in 0..3 {
        let s = n
            .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
            .await
            .unwrap();
        n.turn(&s, &format!(r#"tool:bash {{"command": "echo {i} > mine; echo ok"}}"#)).await;
        // The lease of the turn's Hand is given back by a task: let it run before the next.
        tokio::time::sleep(Duration::from_millis(100)).await;
        sessions.push(s);
    }
    let states = [n.state(&sessions[0]).await, n.state(&sessions[1]).await, n.state(&sessions[2]).await];
    assert_eq!(states, [EnvironmentState::Hibernated, EnvironmentState::Realized, EnvironmentState::Realized]);
    let es = n.turn(&sessions[0], r#"tool:bash {"command": "cat mine"}"#).await;
    assert_eq!(tool_results(&es), vec![("0\n".to_owned(), false)], "its files were kept");
    assert_eq!(n.state(&sessions[0]).await, EnvironmentState::Realized);
    assert_eq!(n.state(&sessions[1]).await, EnvironmentState::Hibernated, "now the least recently used");
    pool.shutdown().await;
}

/// Finding 6: a burst of first tool calls, many more than `max_live`, under an open files
/// limit that cannot hold them all at once: every turn completes (most after waiting for a
/// live place), none fails with "Too many open files". Before, realization opened past
/// `max_live` whenever every live environment was in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_first_tool_calls_waits_for_a_place_instead_of_running_out_of_descriptors() {
    const SESSIONS: usize = 40;
    let config = gateway_runtime::EnvironmentsConfig { max_live: Some(4), ..Default::default() };
    let n = harness::native_configured(config).await;
    let pool = n.workers_for(SESSIONS);
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let s = n
            .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
            .await
            .unwrap();
        sessions.push(s);
    }
    // This test runs in a process of its own (nextest): a limit with room for what is open
    // now and a few live environments, far from room for forty.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, open + 64, hard).unwrap();

    let turns = sessions.iter().map(|s| n.turn(s, r#"tool:bash {"command": "sleep 0.2; echo done"}"#));
    let ended = futures::future::join_all(turns).await;
    for (s, es) in sessions.iter().zip(&ended) {
        assert_eq!(session_error(es), None, "{}: {es:?}", s.id);
        assert_eq!(tool_results(es), vec![("done\n".to_owned(), false)], "{}", s.id);
        assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::EndTurn), "{}", s.id);
    }
    let (in_use, idle) = n.environments.census().await;
    assert!(in_use + idle <= 4, "never more than max_live live: {in_use} + {idle}");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_failures_are_rescheduled_then_end_with_a_typed_error() {
    let stub = gateway_models::stub::StubServer::start().await;
    let mut config = gateway_models::anthropic::AnthropicConfig::new(
        stub.base_url(),
        gateway_models::anthropic::Credential::ApiKey("k".into()),
    );
    config.patience.max_retries = 0;
    let client = gateway_models::anthropic::AnthropicClient::new(config).unwrap();
    let n = native_with(Arc::new(client), offer(&[]), Duration::from_secs(300)).await;
    for _ in 0..3 {
        stub.push_fault(gateway_models::stub::Fault::Status {
            status: 529,
            error_type: "overloaded_error".into(),
            retry_after_secs: None,
            retry_after_ms: None,
        });
    }
    let pool = n.workers(2);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    let es = n.turn(&s, "hello").await;
    let errors: Vec<(ErrorKind, RetryStatus)> = es
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::SessionError { kind, retry, .. } => Some((*kind, *retry)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        vec![
            (ErrorKind::ModelOverloaded, RetryStatus::Retrying),
            (ErrorKind::ModelOverloaded, RetryStatus::Retrying),
            (ErrorKind::ModelOverloaded, RetryStatus::Exhausted)
        ]
    );
    assert_eq!(es.iter().filter(|e| e.kind() == EventKind::TurnRescheduled).count(), 2);
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::RetriesExhausted));

    // A stream cut mid-message: the retry answers once; the cut attempt left no message.
    stub.push_fault(gateway_models::stub::Fault::CutAfterEvents(3));
    let es = n.turn(&s, "once please").await;
    assert_eq!(texts(&es), vec!["echo: once please"], "exactly one assistant message");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_gate_remote_callers_and_loopback_without_keys() {
    use gateway_services::auth::{AuthError, Authenticator, Caller, Principal, generate_key};
    let n = native().await;
    let auth = Authenticator::new(Arc::clone(&n.store));
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Ok(Principal::Loopback), "no keys: loopback is served");
    assert_eq!(auth.authenticate(Some("anything"), &Caller::LOCAL).await, Ok(Principal::Loopback));
    assert_eq!(auth.authenticate(None, &Caller::REMOTE).await, Err(AuthError::RemoteWithoutKeys));
    assert_eq!(
        auth.authenticate(None, &Caller::WEB_PAGE).await,
        Err(AuthError::BrowserWithoutKeys),
        "a web page is not local"
    );
    let rebound = Caller { foreign_host: Some("rebind.example".into()), ..Caller::LOCAL };
    let refused = auth.authenticate(None, &rebound).await.unwrap_err();
    assert_eq!(refused, AuthError::ForeignHost { host: "rebind.example".into() }, "a rebound name is not local");
    assert_eq!(refused.http_status().as_u16(), 421);
    assert!(refused.to_string().contains("Host header rebind.example is not this gateway's"), "{refused}");

    let key = generate_key();
    let stored = n.store.create_api_key("ci", &key.hash).await.unwrap();
    let auth = Authenticator::new(Arc::clone(&n.store)); // a fresh cache sees the new key
    assert_eq!(auth.authenticate(Some(&key.secret), &Caller::REMOTE).await, Ok(Principal::Key(stored.id.clone())));
    assert_eq!(
        auth.authenticate(Some(&key.secret), &rebound).await,
        Ok(Principal::Key(stored.id.clone())),
        "with keys, a valid key is served whatever name it addressed"
    );
    assert_eq!(
        auth.authenticate(Some("gwk_wrong"), &Caller::LOCAL).await,
        Err(AuthError::Invalid),
        "keys exist: loopback too"
    );
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Err(AuthError::Missing));
    n.store.revoke_api_key(&stored.id).await.unwrap();
    let auth = Authenticator::new(Arc::clone(&n.store));
    assert_eq!(
        auth.authenticate(Some(&key.secret), &Caller::LOCAL).await,
        Ok(Principal::Loopback),
        "revoked: back to no keys"
    );
}

/// Finding 14: a key created by another process (`gateway keys create` only writes to the
/// database) closes keyless access within `NO_KEYS_TTL`, and each change is logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_closes_keyless_access_within_a_second_and_says_so() {
    use gateway_services::auth::{AuthError, Authenticator, Caller, NO_KEYS_TTL, Principal, generate_key};
    let logs = mounts::LogCapture::install();
    let n = native().await;
    let auth = Authenticator::new(Arc::clone(&n.store));
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Ok(Principal::Loopback));
    let uri: http::Uri = "/metrics".parse().unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::HOST, "localhost".parse().unwrap());
    let peer = Some("127.0.0.1:5000".parse().unwrap());
    assert_eq!(auth.authorize_operator(peer, &uri, &headers).await, Ok(()), "keyless: /metrics is open");

    let key = generate_key();
    let stored = n.store.create_api_key("ci", &key.hash).await.unwrap();
    tokio::time::sleep(NO_KEYS_TTL + Duration::from_millis(200)).await;
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Err(AuthError::Missing), "keyless access is closed");
    assert!(auth.authorize_operator(peer, &uri, &headers).await.is_err(), "and /metrics needs the key");
    assert_eq!(auth.authenticate(Some(&key.secret), &Caller::LOCAL).await, Ok(Principal::Key(stored.id.clone())));
    let closed = "API keys now exist; keyless access is closed";
    assert_eq!(logs.text().matches(closed).count(), 1, "{}", logs.text());

    n.store.revoke_api_key(&stored.id).await.unwrap();
    auth.forget(&stored.id).await;
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Ok(Principal::Loopback));
    assert_eq!(auth.authenticate(None, &Caller::LOCAL).await, Ok(Principal::Loopback));
    let open = "no API keys exist any more; keyless access is open";
    assert_eq!(logs.text().matches(open).count(), 1, "{}", logs.text());
    assert_eq!(logs.text().matches(closed).count(), 1, "logged once, not per request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn previews_always_precede_their_committed_message() {
    // The fake model streams without delay and the message is committed right after its last
    // delta: the tightest race between the preview channel and the store.
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    for i in 0..25 {
        let stream = n.stream(&s, true).await;
        let text = format!("message number {i}");
        n.coordinator.submit(&s.id, vec![say(&text)]).await.unwrap();
        let got = until(stream, 30, turn_ended).await;
        let msg = events(&got).into_iter().find(|e| e.kind() == EventKind::AgentMessage).unwrap();
        let at = got.iter().position(|d| matches!(d, Delivery::Event(e) if e.id == msg.id)).unwrap();
        let mut folded = String::new();
        let mut started = false;
        for d in &got[..at] {
            match d {
                Delivery::Preview(gateway_runtime::Preview::Start { event_id, .. }) if *event_id == msg.id => {
                    started = true
                }
                Delivery::Preview(gateway_runtime::Preview::TextDelta { event_id, text, .. })
                    if *event_id == msg.id =>
                {
                    assert!(started, "turn {i}: a delta before its start");
                    folded.push_str(text);
                }
                _ => {}
            }
        }
        assert!(started, "turn {i}: the message arrived before its previews");
        assert_eq!(folded, format!("echo: {text}"), "turn {i}: deltas fold to the committed text");
        assert!(
            got[at + 1..].iter().all(|d| !matches!(d, Delivery::Preview(p) if *p.event_id() == msg.id)),
            "turn {i}: a preview after the committed message"
        );
        // The request's span start rides with the message's commit (ADR 0012): committed just
        // before it, so a preview may arrive before the span start, never a committed event.
        let span = events(&got).into_iter().find(|e| e.kind() == EventKind::ModelRequestStarted).unwrap();
        assert_eq!(span.seq + 1, msg.seq, "turn {i}: the span start is committed with its message");
    }
    pool.shutdown().await;
}

/// A built-in that needs approval is refused on a self-hosted session (the approval cannot be
/// routed to the executor yet): an error result, and no executor is asked for; never run
/// unapproved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_tool_on_a_self_hosted_session_is_refused_not_run_unapproved() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAsk), gateway_core::environment::EnvironmentConfig::SelfHosted, vec![])
        .await
        .unwrap();
    let es = n.turn(&s, r#"tool:bash {"command": "echo unapproved"}"#).await;
    let results = tool_results(&es);
    assert_eq!(results.len(), 1, "{es:?}");
    assert!(results[0].1 && results[0].0.contains("needs approval"), "{results:?}");
    assert!(
        !es.iter().any(|e| matches!(e.payload, EventPayload::ConnectionRequested { .. })),
        "no executor is asked for a call that will not run"
    );
    let use_event = es.iter().find(|e| e.kind() == EventKind::ToolUse).unwrap();
    assert!(matches!(&use_event.payload, EventPayload::ToolUse { permission: ToolPermission::Deny, .. }));
    assert_eq!(n.coordinator.get_session(&s.id).await.unwrap().pending_actions, vec![]);
    pool.shutdown().await;
}
