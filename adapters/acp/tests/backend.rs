//! The backend face against a scripted in-memory ACP agent, through real Workers and a real
//! store: what a client of the session sees in its event log.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Caps, Options, Rig, errors, eventually, rig, texts, turn_ended, until};
use gateway_core::event::{EventPayload, NewEvent, StopReason};
use gateway_core::session::{ResourceKind, Session};

fn stop_of(e: &gateway_core::event::Event) -> Option<StopReason> {
    match &e.payload {
        EventPayload::TurnEnded { stop } => Some(stop.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_updates_is_committed_whole() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let n = 30_000;
    let stream = r.stream(&s, 0).await;
    r.say(&s, &format!("flood {n}")).await;
    let got = until(stream, 120, turn_ended).await;
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::EndTurn));
    let expected: String = (0..n).map(|i| format!("{i},")).collect();
    assert_eq!(texts(&got).concat().len(), expected.len(), "no update was dropped");
    assert_eq!(texts(&got).concat(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_agent_was_lost_mid_turn_fails_explicitly() {
    let mut r = rig(Options::default()).await;
    let s = prompt_in_flight(&r).await;
    // The gateway dies mid-turn, and its agent process with it.
    r.crash_workers().await;
    resumed_without_its_agent_fails_unsent(&mut r, &s).await;
}

/// Its record of the prompt sent rides with the run's next commit, which a Worker stopped
/// past its shutdown grace never makes: the released run is still known to have started, so
/// it is failed explicitly, never sent to the agent a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_released_at_shutdown_mid_prompt_is_not_sent_again() {
    let mut r = rig(Options::default()).await;
    let s = prompt_in_flight(&r).await;
    // Shutdown: the grace runs out and the lease is released (no crash counted).
    r.stop_workers().await;
    let run = r.store.active_runs(&s.id).await.unwrap().remove(0);
    assert_eq!((run.crash_count, run.lease_owner.as_deref()), (0, None), "released, not crashed");
    resumed_without_its_agent_fails_unsent(&mut r, &s).await;
}

/// A session whose prompt the agent received and never answers.
async fn prompt_in_flight(r: &Rig) -> Session {
    let s = r.session("fake").await;
    r.say(&s, "hang").await;
    let seen = r.fake.seen.clone();
    eventually(10, || seen.count("session/prompt") == 1).await;
    s
}

/// With the Workers stopped, the session's agent process goes too (as with the gateway);
/// the Workers that start next fail the run as one whose agent may have acted, and do not
/// send its prompt again.
async fn resumed_without_its_agent_fails_unsent(r: &mut Rig, s: &Session) {
    r.processes.close(&s.id).await;
    let after = r.events(s).await.last().unwrap().seq;
    let stream = r.stream(s, after).await;
    r.start_workers();
    let got = until(stream, 20, turn_ended).await;
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::Failed), "{got:?}");
    let errs = errors(&got);
    assert!(errs.iter().any(|m| m.contains("lost mid-turn") && m.contains("resend")), "{errs:?}");
    assert_eq!(r.fake.seen.count("session/prompt"), 1, "the prompt is not sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_with_a_confirmation_follow_the_resumed_prompt_in_the_same_run() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "ask").await;
    let parked = until(stream, 20, turn_ended).await;
    let Some(StopReason::RequiresAction { event_ids }) = stop_of(parked.last().unwrap()) else {
        panic!("the turn parks: {parked:?}");
    };
    let after = parked.last().unwrap().seq;
    let stream = r.stream(&s, after).await;
    let confirm = NewEvent::new(EventPayload::ToolConfirmation {
        tool_use_id: event_ids[0].clone(),
        allow: true,
        deny_message: None,
    });
    r.coordinator.submit(&s.id, vec![confirm, common::user("echo afterwards")]).await.unwrap();
    let got = until(stream, 20, turn_ended).await;
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::EndTurn));
    assert_eq!(texts(&got), vec!["allowed", "afterwards"], "both prompts were answered in this run");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all = r.events(&s).await;
    assert_eq!(all.iter().filter(|e| turn_ended(e)).count(), 2, "no further run: nothing was left over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_die_with_their_agent_process() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "terminal").await;
    let seen = r.fake.seen.clone();
    eventually(10, || !seen.terminals.lock().unwrap().is_empty()).await;
    let id = seen.terminals.lock().unwrap()[0].clone();
    let lease = r.environments.acquire(&r.coordinator.get_session(&s.id).await.unwrap()).await.unwrap();
    let terminals = lease.acquired.hand.terminals();
    assert!(terminals.output(&id).is_ok(), "the terminal runs");
    r.fake.crash_all();
    let got = until(stream, 20, turn_ended).await;
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::Failed));
    eventually(10, || terminals.output(&id).is_err()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_stops_dead_processes() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "echo hi").await;
    until(stream, 20, turn_ended).await;
    assert_eq!(r.processes.len().await, 1);
    r.fake.crash_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.processes.sweep(&r.coordinator).await;
    assert!(r.processes.is_empty().await, "a dead process is stopped and forgotten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_gateway_stops_its_agent_processes() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "echo hi").await;
    until(stream, 20, turn_ended).await;
    let processes = std::sync::Arc::clone(&r.processes);
    assert_eq!(processes.len().await, 1);
    r.stop().await;
    assert!(processes.is_empty().await, "the agent process stops with the gateway, it does not outlive it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_resumes_the_agents_session_when_offered() {
    let r = rig(Options { caps: Caps { load: true, resume: true, ..Default::default() }, ..Default::default() }).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "echo one").await;
    let first = until(stream, 20, turn_ended).await;
    r.processes.close(&s.id).await;
    let stream = r.stream(&s, first.last().unwrap().seq).await;
    r.say(&s, "echo two").await;
    let got = until(stream, 20, turn_ended).await;
    assert_eq!(texts(&got), vec!["two"]);
    let methods = r.fake.seen.methods();
    assert!(
        methods.contains(&"session/resume".to_owned()) && !methods.contains(&"session/load".to_owned()),
        "{methods:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_replay_is_discarded_without_blocking_the_agent() {
    let r = rig(Options { caps: Caps { load: true, ..Default::default() }, ..Default::default() }).await;
    let s = r.session("fake").await;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "echo one").await;
    let first = until(stream, 20, turn_ended).await;
    r.processes.close(&s.id).await;
    let stream = r.stream(&s, first.last().unwrap().seq).await;
    r.say(&s, "echo two").await;
    // The replay (more updates than the turn's queue holds) must neither block the load's
    // answer nor reach the log.
    let got = until(stream, 30, turn_ended).await;
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::EndTurn));
    assert_eq!(texts(&got), vec!["two"]);
    assert!(r.fake.seen.methods().contains(&"session/load".to_owned()));
}

/// Files mounted into an ACP-backed session are in the agent process's `cwd` before its first
/// prompt, and one added later is there before the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_finds_the_sessions_mounted_files_in_its_cwd() {
    let r = rig(Options::default()).await;
    let upload = |content: &'static [u8]| {
        let mut u = r.coordinator.upload();
        async move {
            u.push(content).await.unwrap();
            u.finish("f".into(), "text/plain".into()).await.unwrap()
        }
    };
    let first = upload(b"first mounted file").await;
    let id = r.agents.get("fake").unwrap().clone();
    let agent = r.coordinator.get_agent(&id, None).await.unwrap();
    let req = gateway_runtime::CreateSession {
        budget: None,
        agent: gateway_runtime::AgentSelection { id, version: None, overrides: None },
        environment_id: r.agents.environment_for(&agent.spec.backend).unwrap().clone(),
        title: None,
        metadata: Default::default(),
        resources: vec![ResourceKind::File {
            file_id: first.meta.id.to_string(),
            mount_path: "/workspace/in/a.txt".into(),
        }],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    let s = r.coordinator.create_session(req).await.unwrap().0;
    let stream = r.stream(&s, 0).await;
    r.say(&s, "cat in/a.txt").await;
    let got = until(stream, 30, turn_ended).await;
    assert_eq!(texts(&got).concat(), "first mounted file");

    let later = upload(b"added between turns").await;
    let mount = ResourceKind::File { file_id: later.meta.id.to_string(), mount_path: "/mnt/session/uploads/b".into() };
    r.coordinator.add_resource(&s.id, mount).await.unwrap();
    let after = r.coordinator.get_session(&s.id).await.unwrap().last_seq;
    let stream = r.stream(&s, after).await;
    r.say(&s, "cat mnt/session/uploads/b").await;
    let got = until(stream, 30, turn_ended).await;
    assert_eq!(texts(&got).concat(), "added between turns", "the process that was already running sees it");
}

/// A client's own directory (an editor's `cwd`) is never written: files are not mounted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_never_mounted_into_a_clients_own_directory() {
    let r = rig(Options::default()).await;
    let s = r.session("fake").await;
    let mut u = r.coordinator.upload();
    u.push(b"x").await.unwrap();
    let f = u.finish("f".into(), "text/plain".into()).await.unwrap();
    let mount = ResourceKind::File { file_id: f.meta.id.to_string(), mount_path: "/workspace/x".into() };
    let refused = r.coordinator.add_resource(&s.id, mount).await;
    assert!(matches!(refused, Err(gateway_runtime::RuntimeError::Invalid(_))), "{refused:?}");
    assert!(!std::path::Path::new(&r.project("ws-fake")).join("x").exists());
}
