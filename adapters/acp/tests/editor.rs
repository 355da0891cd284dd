//! The editor face over in-memory lines, on a real core: sessions, prompts, cancels, close.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Options, connect, connect_as, eventually, rig, turn_ended, until};
use gateway_core::SessionId;
use gateway_core::event::{EventKind, EventPayload, StopReason};
use gateway_runtime::{AgentSelection, CreateSession};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_editors_open_workspaces_only_under_the_configured_roots() {
    let r = rig(Options::default()).await;
    let root = r.projects.path().join("allowed");
    let inside = root.join("project");
    std::fs::create_dir_all(&inside).unwrap();
    let outside = r.project("elsewhere");
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let ws = connect(r.context(Some(vec![root.clone()])));
    ws.initialize().await;
    // A missing path outside answers like an existing one: nothing is learnt about the host.
    let missing = r.projects.path().join("no-such-dir").display().to_string();
    for refused in
        [outside.clone(), missing, root.join("link").display().to_string(), format!("{}/project/..", root.display())]
    {
        if refused.ends_with("..") {
            // `root/project/..` is the root itself: inside.
            assert!(ws.new_session(&refused).await.is_ok());
            continue;
        }
        let e = ws.new_session(&refused).await.unwrap_err();
        assert_eq!(e.code, -32602, "{refused}: {e:?}");
        assert!(e.message.contains("[acp] workspace_roots"), "{e:?}");
    }
    let sid = ws.new_session(&inside.display().to_string()).await.unwrap();
    assert!(!sid.is_empty());

    // A session made on stdio outside the roots cannot be opened over the network.
    let stdio = connect(r.context(None));
    stdio.initialize().await;
    let elsewhere = stdio.new_session(&outside).await.unwrap();
    for method in ["session/load", "session/resume"] {
        let params = json!({"sessionId": elsewhere, "cwd": inside.display().to_string(), "mcpServers": []});
        let e = ws.call(method, params).await.unwrap_err();
        assert_eq!(e.code, -32602, "{method}: {e:?}");
    }
    let listed = ws.call("session/list", json!({})).await.unwrap();
    let ids: Vec<&str> =
        listed["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    assert!(ids.contains(&sid.as_str()) && !ids.contains(&elsewhere.as_str()), "{ids:?}");

    // No roots configured: nothing can be opened.
    let none = connect(r.context(Some(vec![])));
    none.initialize().await;
    let e = none.new_session(&inside.display().to_string()).await.unwrap_err();
    assert!(e.code == -32602 && e.message.contains("workspace_roots"), "{e:?}");
    // Stdio is unchanged: any absolute directory.
    assert!(stdio.new_session(&inside.display().to_string()).await.is_ok());
}

/// Issue 28 finding 8, as the attack: a session made through another face (as the Managed
/// Agents API and A2A make them: no workspace resource) has a transcript; a network editor
/// names a project under the roots and loads or resumes it. Both are refused `-32602`, no
/// history is replayed, the session is not opened on the connection (a prompt is `-32002`),
/// and nothing is committed, so no tool ran. A local editor (stdio) is refused the same: the
/// session's tools do not run in the directory it names. An editor's own session opens only
/// in its own workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_an_editor_workspace_is_not_opened_on_any_transport() {
    let r = rig(Options::default()).await;
    let request = CreateSession {
        budget: None,
        agent: AgentSelection { id: r.agents.get("scripted").unwrap().clone(), version: None, overrides: None },
        environment_id: r.agents.environment.clone().unwrap(),
        title: None,
        metadata: Default::default(),
        resources: vec![],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    let (cloud, _) = r.coordinator.create_session(request).await.unwrap();
    let stream = r.stream(&cloud, 0).await;
    r.say(&cloud, "a private conversation").await;
    until(stream, 30, turn_ended).await;
    let committed = r.events(&cloud).await.len();

    let root = std::fs::canonicalize(r.projects.path()).unwrap().join("roots");
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let network = connect(r.context(Some(vec![root.clone()])));
    let stdio = connect(r.context(None));
    for ed in [&network, &stdio] {
        ed.initialize().await;
        for method in ["session/load", "session/resume"] {
            let params = json!({"sessionId": cloud.id.to_string(), "cwd": project, "mcpServers": []});
            let e = ed.call(method, params).await.unwrap_err();
            assert_eq!(e.code, -32602, "{method}: {e:?}");
            assert!(e.message.contains("no editor workspace"), "{method}: {e:?}");
        }
        assert!(ed.updates.lock().unwrap().is_empty(), "no history was replayed");
        let params = json!({"sessionId": cloud.id.to_string(), "prompt": [{"type": "text", "text": "ask"}]});
        let e = ed.call("session/prompt", params).await.unwrap_err();
        assert_eq!(e.code, -32002, "the session was not opened: {e:?}");
    }
    assert_eq!(r.events(&cloud).await.len(), committed, "nothing was committed to the session");

    // An editor's own session opens in its workspace (named as the editor spells it), and
    // only there.
    let other = root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let sid = network.new_session(&project.display().to_string()).await.unwrap();
    for ed in [&network, &stdio] {
        let params = json!({"sessionId": sid, "cwd": other, "mcpServers": []});
        let e = ed.call("session/resume", params).await.unwrap_err();
        assert!(e.code == -32602 && e.message.contains("not the workspace"), "{e:?}");
        let spelled = format!("{}/../project/", other.display());
        ed.call("session/load", json!({"sessionId": sid, "cwd": spelled, "mcpServers": []})).await.unwrap();
    }
}

/// The attack of invariant 19: a network editor opens a session on a project under the
/// roots, then the project is swapped for a symlink to `/`. Neither a prompt on the editor's
/// connection nor a message through the core (what the Managed Agents API sends) runs the
/// agent there: both turns fail closed, naming the workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_swapped_after_session_new_fails_closed_on_every_face() {
    let r = rig(Options { environment_idle: Duration::ZERO, ..Default::default() }).await;
    let root = std::fs::canonicalize(r.projects.path()).unwrap().join("allowed");
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let ws = connect(r.context(Some(vec![root.clone()])));
    ws.initialize().await;
    let sid = ws.new_session(&project.display().to_string()).await.unwrap();
    // The agent process started with the session (ADR 0033) works in the directory it was
    // given; once it and its environment are gone, the next realization finds the swap.
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), 1, "the agent started with its session");
    r.put_to_sleep(&sid).await;
    std::fs::rename(&project, root.join("project.orig")).unwrap();
    std::os::unix::fs::symlink("/", &project).unwrap();

    // Through the core, as the Managed Agents API submits it.
    let session = r.coordinator.get_session(&SessionId::parse(&sid).unwrap()).await.unwrap();
    let stream = r.stream(&session, session.last_seq).await;
    r.say(&session, "hello").await;
    let events = until(stream, 30, turn_ended).await;
    let errors = common::errors(&events);
    assert!(errors.iter().any(|m| m.contains(&project.display().to_string())), "{errors:?}");
    assert!(matches!(&events.last().unwrap().payload, EventPayload::TurnEnded { stop: StopReason::Failed }));
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), 1, "no agent process was started in the swapped workspace");

    // Through the editor's own connection.
    let answer = ws.prompt(&sid, "hello").await.unwrap();
    let e = answer.expect_err("the prompt fails");
    assert!(e.message.contains(&project.display().to_string()), "{e:?}");
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), 1);
}

/// `additionalDirectories`: each is checked like the `cwd` (under the roots over the network),
/// none inside the workspace or a system directory; they are kept with the session (listed,
/// fixed on load), and one swapped after `session/new` fails the session's turns closed like a
/// swapped workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn additional_directories_are_checked_kept_and_fail_closed_when_swapped() {
    let r = rig(Options { environment_idle: Duration::ZERO, ..Default::default() }).await;
    let root = std::fs::canonicalize(r.projects.path()).unwrap().join("allowed");
    let (project, lib) = (root.join("project"), root.join("lib"));
    std::fs::create_dir_all(project.join("sub")).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let outside = r.project("elsewhere");
    let ws = connect(r.context(Some(vec![root.clone()])));
    let caps = ws.call("initialize", json!({"protocolVersion": 1})).await.unwrap();
    assert_eq!(caps["agentCapabilities"]["sessionCapabilities"]["additionalDirectories"], json!({}), "{caps}");
    let new = |dirs: Vec<String>| json!({"cwd": project, "mcpServers": [], "additionalDirectories": dirs});
    let s = |p: &std::path::Path| p.display().to_string();
    let cases = [
        (vec![outside.clone()], "workspace_roots"),
        (vec![s(&project.join("sub"))], "inside"),
        (vec!["relative".to_owned()], "absolute"),
    ];
    for (dirs, said) in cases {
        let e = ws.call("session/new", new(dirs.clone())).await.unwrap_err();
        assert!(e.code == -32602 && e.message.contains(said), "{dirs:?}: {e:?}");
    }
    let stdio = connect(r.context(None));
    stdio.initialize().await;
    let e = stdio.call("session/new", new(vec!["/usr/share".into()])).await.unwrap_err();
    assert!(e.code == -32602 && e.message.contains("system directory"), "{e:?}");

    let created = ws.call("session/new", new(vec![s(&lib)])).await.unwrap();
    let sid = created["sessionId"].as_str().unwrap().to_owned();
    let listed = ws.call("session/list", json!({})).await.unwrap();
    let mine = listed["sessions"].as_array().unwrap().iter().find(|x| x["sessionId"] == sid.as_str()).unwrap().clone();
    assert_eq!(mine["additionalDirectories"], json!([s(&lib)]), "{mine}");
    let load =
        |dirs: Vec<String>| json!({"sessionId": sid, "cwd": project, "mcpServers": [], "additionalDirectories": dirs});
    ws.call("session/resume", load(vec![s(&lib)])).await.unwrap();
    ws.call("session/resume", load(vec![])).await.unwrap();
    let other = root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let e = ws.call("session/resume", load(vec![s(&other)])).await.unwrap_err();
    assert!(e.code == -32602 && e.message.contains("fixed"), "{e:?}");

    // Swapped for a symlink to `/` after session/new (and after the agent process the
    // session started with is gone): the turn fails closed, naming it.
    let started = *r.fake.seen.connections.lock().unwrap();
    r.put_to_sleep(&sid).await;
    std::fs::rename(&lib, root.join("lib.orig")).unwrap();
    std::os::unix::fs::symlink("/", &lib).unwrap();
    let session = r.coordinator.get_session(&SessionId::parse(&sid).unwrap()).await.unwrap();
    let stream = r.stream(&session, session.last_seq).await;
    r.say(&session, "hello").await;
    let events = until(stream, 30, turn_ended).await;
    let errors = common::errors(&events);
    assert!(errors.iter().any(|m| m.contains(&s(&lib))), "{errors:?}");
    assert!(matches!(&events.last().unwrap().payload, EventPayload::TurnEnded { stop: StopReason::Failed }));
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), started, "no agent process was started");
}

/// A relay's prompt (ADR 0030) names the event id its message gets: sent again on a new
/// connection (the relay's, after the old one dropped), it is answered from that message's
/// turn, not admitted twice, and only updates after the seq the editor saw are sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sent_again_with_its_id_follows_its_turn_and_is_not_admitted_twice() {
    let r = rig(Options::default()).await;
    let project = r.project("p");
    let ed = connect_as(r.context(None), Some("scripted"));
    ed.initialize().await;
    let sid = ed.new_session(&project).await.unwrap();
    let prompt_id = gateway_core::EventId::new();
    let prompt = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "once"}],
                        "_meta": {"gateway.promptId": prompt_id.as_str()}});
    let first = ed.call("session/prompt", prompt.clone()).await.unwrap();
    assert_eq!(first["stopReason"], "end_turn");
    let seen =
        ed.seqs.lock().unwrap().iter().flatten().copied().max().expect("updates of committed events carry their seq");

    let again = connect_as(r.context(None), Some("scripted"));
    again.initialize().await;
    again.call("session/resume", json!({"sessionId": sid, "cwd": project, "mcpServers": []})).await.unwrap();
    // (The resume announces the session's title.)
    again.updates.lock().unwrap().clear();
    let mut resent = prompt.clone();
    resent["_meta"]["gateway.afterSeq"] = json!(seen);
    let second = again.call("session/prompt", resent).await.unwrap();
    assert_eq!(second["stopReason"], "end_turn", "answered from the turn that ran");
    let repeated = again.updates.lock().unwrap().clone();
    assert!(repeated.is_empty(), "nothing the editor saw is sent again: {repeated:?}");
    // Without a seq, the turn's updates are sent again (what a relay that saw none asks for).
    let third = again.call("session/prompt", prompt).await.unwrap();
    assert_eq!(third["stopReason"], "end_turn");
    let text: String = again
        .updates
        .lock()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "echo: once");

    let session = r.coordinator.get_session(&SessionId::parse(&sid).unwrap()).await.unwrap();
    let messages: Vec<_> = r
        .events(&session)
        .await
        .into_iter()
        .filter(|e| matches!(e.payload, EventPayload::UserMessage { .. }))
        .map(|e| e.id)
        .collect();
    assert_eq!(messages, [prompt_id], "one message, with the relay's id");
    let bad =
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "x"}], "_meta": {"gateway.promptId": "nope"}});
    let e = again.call("session/prompt", bad).await.unwrap_err();
    assert_eq!(e.code, -32602, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_earlier_turn_does_not_end_a_later_prompt() {
    let r = rig(Options { retry_base: Duration::from_millis(1500), ..Default::default() }).await;
    let ed = connect_as(r.context(None), Some("scripted"));
    ed.initialize().await;
    let sid = ed.new_session(&r.project("p")).await.unwrap();
    let id = SessionId::parse(&sid).unwrap();
    let session = r.coordinator.get_session(&id).await.unwrap();
    // Another client's turn fails transiently; its retry waits.
    let stream = r.stream(&session, 0).await;
    r.coordinator.submit(&id, vec![common::user("fail")]).await.unwrap();
    until(stream, 10, |e| e.kind() == EventKind::TurnRescheduled).await;
    // Our prompt comes in meanwhile. The retried run starts (naming its earlier inputs) and
    // ends after our message: that end is not ours.
    let answer = ed.prompt(&sid, "sleep 300").await.unwrap().unwrap();
    assert_eq!(answer["stopReason"], "end_turn");
    let events = r.events(&session).await;
    let ours = events.iter().rposition(|e| matches!(e.payload, EventPayload::UserMessage { .. })).unwrap();
    let ends = events[ours..].iter().filter(|e| turn_ended(e)).count();
    let starts: Vec<_> = events[ours..]
        .iter()
        .filter_map(|e| match e.payload {
            EventPayload::TurnStarted { inputs_through } => Some(inputs_through),
            _ => None,
        })
        .collect();
    let our_seq = events[ours].seq;
    assert_eq!(starts.iter().filter(|b| **b >= our_seq).count(), 1, "one turn answers our message: {starts:?}");
    assert!(starts.iter().any(|b| *b < our_seq), "the earlier turn was retried after our message: {starts:?}");
    assert_eq!(
        ends, 2,
        "the earlier turn ended (its retries exhausted) and so did ours: the prompt waited for its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_an_open_session_keeps_its_running_prompt() {
    let r = rig(Options::default()).await;
    let ed = connect_as(r.context(None), Some("scripted"));
    ed.initialize().await;
    let cwd = r.project("p");
    let sid = ed.new_session(&cwd).await.unwrap();
    let running = ed.prompt(&sid, "sleep 5000");
    tokio::time::sleep(Duration::from_millis(300)).await;
    ed.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []})).await.unwrap();
    let params = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]});
    let e = ed.call("session/prompt", params).await.unwrap_err();
    assert_eq!(e.code, -32600, "the first prompt still runs: {e:?}");
    ed.cancel(&sid).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(answer["stopReason"], "cancelled", "the cancel reached the running prompt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_cancel_every_ending_answers_cancelled() {
    let r = rig(Options::default()).await;
    let ctx = r.context(None);
    let shutdown = ctx.shutdown.clone();
    let ed = connect(ctx);
    ed.initialize().await;
    let sid = ed.new_session(&r.project("p")).await.unwrap();
    // The agent ignores the cancel, so the turn is still running when the gateway stops.
    let running = ed.prompt(&sid, "hang");
    let seen = r.fake.seen.clone();
    eventually(10, || seen.count("session/prompt") == 1).await;
    ed.cancel(&sid).await;
    eventually(10, || seen.count("session/cancel") == 1).await;
    shutdown.cancel();
    let answer = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    assert_eq!(answer.unwrap()["stopReason"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_mid_turn_interrupts_it_cleanly() {
    let r = rig(Options::default()).await;
    let ed = connect(r.context(None));
    ed.initialize().await;
    let sid = ed.new_session(&r.project("p")).await.unwrap();
    let running = ed.prompt(&sid, "slow");
    eventually(10, || ed.text().contains("tick")).await;
    ed.call("session/close", json!({"sessionId": sid})).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(15), running).await.unwrap().unwrap().unwrap();
    assert_eq!(answer["stopReason"], "cancelled");
    let session = r.coordinator.get_session(&SessionId::parse(&sid).unwrap()).await.unwrap();
    let events = r.events(&session).await;
    let ended: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnded { stop } => Some(stop.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![StopReason::EndTurn, StopReason::Interrupted], "opened, then interrupted, not failed");
    assert!(common::errors(&events).is_empty(), "{:?}", common::errors(&events));
    // Closed here: closing again, or prompting, needs it opened again.
    let e = ed.call("session/close", json!({"sessionId": sid})).await.unwrap_err();
    assert_eq!(e.code, -32002);
    let other = connect(r.context(None));
    other.initialize().await;
    let e = other.call("session/close", json!({"sessionId": sid})).await.unwrap_err();
    assert_eq!(e.code, -32002, "a session not open on this connection cannot be closed from it");
}

/// A turn parked while no editor was there to answer (the editor went away mid-turn) does not
/// lock the session: a new prompt interrupts it, and so does a cancel with no prompt running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_parked_without_an_editor_does_not_lock_the_session() {
    let r = rig(Options::default()).await;
    let ed = connect_as(r.context(None), Some("scripted"));
    ed.initialize().await;
    let sid = ed.new_session(&r.project("p")).await.unwrap();
    let id = SessionId::parse(&sid).unwrap();
    let session = r.coordinator.get_session(&id).await.unwrap();
    let parked = |r: &common::Rig| {
        let (c, id) = (r.coordinator.clone(), id.clone());
        async move { !c.get_session(&id).await.unwrap().pending_actions.is_empty() }
    };

    // Another client's turn parks on an approval nobody on this connection is asked for.
    let stream = r.stream(&session, 0).await;
    r.coordinator.submit(&id, vec![common::user("ask")]).await.unwrap();
    until(stream, 10, turn_ended).await;
    assert!(parked(&r).await);
    let answer = tokio::time::timeout(Duration::from_secs(10), ed.prompt(&sid, "hello")).await.unwrap().unwrap();
    assert_eq!(answer.unwrap()["stopReason"], "end_turn");
    let events = r.events(&session).await;
    let stops: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnded { stop } => Some(stop.clone()),
            _ => None,
        })
        .collect();
    assert!(
        matches!(stops[..], [StopReason::RequiresAction { .. }, StopReason::Interrupted, StopReason::EndTurn]),
        "{stops:?}"
    );
    assert!(common::texts(&events).contains(&"echo: hello".to_owned()));

    // Parked again; a cancel with no prompt running releases it.
    let stream = r.stream(&session, events.last().unwrap().seq).await;
    r.coordinator.submit(&id, vec![common::user("ask")]).await.unwrap();
    until(stream, 10, turn_ended).await;
    assert!(parked(&r).await);
    ed.cancel(&sid).await;
    for _ in 0..100 {
        if !parked(&r).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!parked(&r).await, "the cancel interrupted the parked turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_past_the_queued_runs_bound_gets_an_error_naming_the_cause() {
    let admission = gateway_runtime::AdmissionLimits { max_queued_runs: 1, ..Default::default() };
    let mut r = rig(Options { admission, ..Default::default() }).await;
    // Another client's message waits for a Worker (there is none now).
    r.crash_workers().await;
    let busy = r.session("scripted").await;
    r.coordinator.submit(&busy.id, vec![common::user("queued")]).await.unwrap();
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;

    let ed = connect_as(r.context(None), Some("scripted"));
    ed.initialize().await;
    let sid = ed.new_session(&r.project("p")).await.unwrap();
    let params = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]});
    let e = ed.call("session/prompt", params).await.unwrap_err();
    assert_eq!(e.code, -32603, "{e:?}");
    assert!(e.message.contains("busy"), "{e:?}");
    let data = e.data.clone().expect("the error says why and when to retry");
    assert_eq!(data["cause"], "queued_runs");
    assert_eq!(data["retry_after_ms"], 1000);
    let session = r.coordinator.get_session(&SessionId::parse(&sid).unwrap()).await.unwrap();
    assert!(r.events(&session).await.is_empty(), "nothing of the refused prompt is stored");
    r.coordinator.interrupt(&busy.id).await.unwrap();
}

/// An ACP agent's process starts with its session (ADR 0033): `session/new` answers with the
/// agent's modes and settings as the agent gave them, its commands follow the answer, and the
/// first prompt goes to the same process. An agent that cannot open a session fails
/// `session/new` with its reason and leaves no session behind; switching agents stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_opens_with_its_session_and_its_modes_settings_and_commands_reach_the_editor() {
    let mut r = rig(Options::default()).await;
    let mut other = gateway_store::conformance::agent_spec("other");
    other.backend = gateway_core::agent::BackendRef::Acp { executor: "fake".into() };
    let other = r.coordinator.create_agent(other).await.unwrap();
    r.agents.agents.push(("other".into(), other.id));
    let ed = connect(r.context(None));
    ed.initialize().await;
    let project = r.project("p");
    let created = ed.call("session/new", json!({"cwd": project, "mcpServers": []})).await.unwrap();
    let sid = created["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(created["modes"], common::fake_agent::modes(), "{created}");
    let options = created["configOptions"].as_array().unwrap();
    let ids: Vec<&str> = options.iter().filter_map(|o| o["id"].as_str()).collect();
    assert_eq!(ids, ["agent", "depth"], "the gateway's agent choice, then the agent's own: {created}");
    assert_eq!(options[1], common::fake_agent::settings()[0]);
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), 1);
    eventually(10, || {
        ed.updates.lock().unwrap().iter().any(|u| {
            u["sessionUpdate"] == "available_commands_update"
                && u["availableCommands"] == common::fake_agent::commands()
        })
    })
    .await;

    let answer = ed.prompt(&sid, "echo hello").await.unwrap().unwrap();
    assert_eq!(answer["stopReason"], "end_turn");
    assert!(ed.text().contains("hello"), "{}", ed.text());
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), 1, "the first prompt went to the process the session opened");
    assert_eq!(r.fake.seen.count("session/new"), 1);

    // Before a prompt, another agent may be chosen: the opened process goes, the new agent's
    // starts, and the answer has its settings.
    let second = ed.call("session/new", json!({"cwd": project, "mcpServers": []})).await.unwrap();
    let second_id = SessionId::parse(second["sessionId"].as_str().unwrap()).unwrap();
    let first_process = r.processes.get(&second_id).await.expect("opened");
    let started = *r.fake.seen.connections.lock().unwrap();
    let switched = ed
        .call(
            "session/set_config_option",
            json!({"sessionId": second_id.to_string(), "configId": "agent", "value": "other"}),
        )
        .await
        .unwrap();
    let options = switched["configOptions"].as_array().unwrap();
    assert_eq!(options.last(), Some(&common::fake_agent::settings()[0]), "{switched}");
    assert!(!first_process.alive(), "the first agent's process was stopped");
    assert_eq!(*r.fake.seen.connections.lock().unwrap(), started + 1, "the new agent's started");
    r.stop().await;

    // An agent that cannot open a session.
    let r = rig(Options { caps: common::Caps { refuse_new: true, ..Default::default() }, ..Default::default() }).await;
    let ed = connect(r.context(None));
    ed.initialize().await;
    let e = ed.call("session/new", json!({"cwd": r.project("p"), "mcpServers": []})).await.unwrap_err();
    assert!(e.message.contains("could not be started") && e.message.contains("no credentials"), "{e:?}");
    let listed = ed.call("session/list", json!({})).await.unwrap();
    assert_eq!(listed["sessions"], json!([]), "no session is left behind");
    r.stop().await;
}
