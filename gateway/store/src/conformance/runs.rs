//! Claims, leases, fencing and settlements.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::EventId;
use gateway_core::agent::BackendRef;
use gateway_core::environment::ProviderTier;
use gateway_core::event::{Event, EventKind, EventPayload, NewEvent, StopReason, ToolOrigin, ToolPermission};
use gateway_core::run::RunState;
use gateway_core::session::{EnvironmentState, PendingAction, PendingKind, SessionStatus};

use super::{Harness, agent_text, msg, outlive, session, session_with, terms, worker};
use crate::{AdmissionWrites, Commit, EnvironmentChange, Guard, LeaseTerms, RunOutcome, Settlement, StoreError};

fn done() -> Settlement {
    Settlement { events: vec![agent_text("done")], outcome: RunOutcome::Completed, bindings: vec![] }
}

pub async fn claims_bump_the_epoch_and_hold_a_lease(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(300)).await.unwrap().expect("a claims");
    assert_eq!(a.fence.epoch, 1);
    assert_eq!(a.fence.session_id, sess.id);
    assert_eq!(a.run.lease_owner.as_deref(), Some("a"));
    assert!(!a.run.started, "first claim of a fresh run");
    assert!(!a.is_reclaim());
    let expires = a.run.lease_expires_at.unwrap();
    assert!(expires.0 - a.run.updated_at.0 >= 300, "lease runs from the database clock");
    assert!(s.claim_run(&worker("b", "h"), terms(300)).await.unwrap().is_none(), "a live lease is not claimable");

    outlive(300).await;
    let b = s.claim_run(&worker("b", "h"), terms(5_000)).await.unwrap().expect("expired lease is reclaimable");
    assert_eq!(b.fence.run_id, a.fence.run_id);
    assert_eq!(b.fence.epoch, 2, "every claim bumps the epoch");
    assert!(b.is_reclaim());
    assert!(b.run.started);
    assert_eq!(b.run.crash_count, 1);
}

pub async fn a_stale_worker_cannot_commit(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(200)).await.unwrap().unwrap();
    s.commit(&a.fence, Commit { events: vec![agent_text("from a, in time")], environment: None, bindings: vec![] })
        .await
        .unwrap();
    outlive(200).await;
    let b = s.claim_run(&worker("b", "h"), terms(5_000)).await.unwrap().unwrap();

    let late = s
        .commit(&a.fence, Commit { events: vec![agent_text("from a, too late")], environment: None, bindings: vec![] })
        .await;
    match late {
        Err(StoreError::Fenced { current_epoch, epoch, ref current_owner, .. }) => {
            assert_eq!((epoch, current_epoch), (1, 2));
            assert_eq!(current_owner, "b");
            let msg = late.as_ref().unwrap_err().to_string();
            assert!(msg.contains("epoch 2 held by b") && msg.contains("had 1"), "{msg}");
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(s.settle(&a.fence, done()).await.unwrap_err().is_fenced());
    assert!(s.release_run(&a.fence).await.unwrap_err().is_fenced());
    assert!(s.renew_lease(&a.fence, Duration::from_secs(1)).await.unwrap_err().is_fenced());

    s.commit(&b.fence, Commit { events: vec![agent_text("from b")], environment: None, bindings: vec![] })
        .await
        .unwrap();
    s.settle(&b.fence, done()).await.unwrap();
    let texts: Vec<String> = s
        .events_after(&sess.id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.payload {
            EventPayload::AgentMessage { content } => Some(gateway_core::content::plain_text(&content)),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec!["from a, in time", "from b", "done"], "nothing the fenced worker wrote is visible");
    let log = s.events_after(&sess.id, 0, 100).await.unwrap();
    let said: Vec<Option<i64>> = log.iter().filter(|e| e.kind() == EventKind::AgentMessage).map(|e| e.epoch).collect();
    assert_eq!(said, vec![Some(1), Some(2), Some(2)], "each claim writes under its own epoch");
    // The first claim committed the turn's start; the reclaim continued that turn.
    let starts: Vec<&Event> = log.iter().filter(|e| e.kind() == EventKind::TurnStarted).collect();
    assert_eq!(starts.len(), 1, "{log:?}");
    assert_eq!((starts[0].seq, starts[0].epoch), (2, Some(1)));
}

pub async fn racing_workers_claim_exactly_once(h: &dyn Harness) {
    let s = h.fresh().await;
    let other = h.second(&s).await;
    session_with(&s, vec![msg("only one of you")]).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 { Arc::clone(&s) } else { Arc::clone(&other) };
        tasks.push(tokio::spawn(async move { store.claim_run(&worker(&format!("w{i}"), "h"), terms(10_000)).await }));
    }
    let mut winners = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().is_some() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1, "exactly one worker wins the run");
}

pub async fn renewal_reports_cancel_and_fences(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(300)).await.unwrap().unwrap();
    assert!(!s.renew_lease(&a.fence, Duration::from_millis(1_000)).await.unwrap().cancel_requested);
    outlive(300).await;
    // Renewed past the original expiry: still ours.
    assert!(s.claim_run(&worker("b", "h"), terms(300)).await.unwrap().is_none());
    s.submit_inputs(&sess.id, vec![NewEvent::new(EventPayload::UserInterrupt {})], AdmissionWrites::default())
        .await
        .unwrap();
    assert!(s.renew_lease(&a.fence, Duration::from_millis(200)).await.unwrap().cancel_requested);
    outlive(200).await;
    let b = s.claim_run(&worker("b", "h"), terms(5_000)).await.unwrap().unwrap();
    assert!(b.run.cancel_requested, "cancel intent survives a reclaim");
    assert!(s.renew_lease(&a.fence, Duration::from_secs(1)).await.unwrap_err().is_fenced());
}

pub async fn release_requeues_without_a_crash(h: &dyn Harness) {
    let s = h.fresh().await;
    session_with(&s, vec![msg("go")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(10_000)).await.unwrap().unwrap();
    s.release_run(&a.fence).await.unwrap();
    let b = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("released run is claimable at once");
    assert_eq!(b.fence.epoch, 2);
    assert_eq!(b.run.crash_count, 0, "a release is not a crash");
    assert!(b.run.started);
}

pub async fn reclaims_count_crashes_and_indeterminate_settles(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("crashy")]).await;
    let mut last = None;
    for expected in 0..3u32 {
        let c = s.claim_run(&worker("w", "h"), terms(150)).await.unwrap().expect("claimable");
        assert_eq!(c.run.crash_count, expected);
        last = Some(c);
        outlive(150).await;
    }
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    assert_eq!(c.run.crash_count, 3);
    assert!(last.is_some_and(|l| l.fence.epoch < c.fence.epoch));
    let end = NewEvent::new(EventPayload::SessionError {
        kind: gateway_core::event::ErrorKind::Indeterminate,
        message: "crashed 3 times".into(),
        retry: gateway_core::event::RetryStatus::Exhausted,
        server: None,
    });
    s.settle(&c.fence, Settlement { events: vec![end], outcome: RunOutcome::Indeterminate, bindings: vec![] })
        .await
        .unwrap();
    assert_eq!(s.get_run(&c.fence.run_id).await.unwrap().state, RunState::Indeterminate);
    assert_eq!(s.get_session(&sess.id).await.unwrap().status, SessionStatus::Idle);
}

pub async fn one_running_run_per_session(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("first")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(10_000)).await.unwrap().unwrap();
    s.submit_inputs(&sess.id, vec![msg("second")], AdmissionWrites::default()).await.unwrap();
    assert_eq!(s.active_runs(&sess.id).await.unwrap().len(), 2);
    assert!(
        s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().is_none(),
        "the follow-up waits for the running run of its session"
    );
    let unrelated = session_with(&s, vec![msg("other session")]).await;
    let u = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("other sessions are not blocked");
    assert_eq!(u.fence.session_id, unrelated.id);
    s.settle(&a.fence, done()).await.unwrap();
    assert_eq!(s.get_session(&sess.id).await.unwrap().status, SessionStatus::Running, "the follow-up keeps it running");
    let b = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("follow-up claimable after settle");
    assert_eq!(b.fence.session_id, sess.id);
    assert_ne!(b.fence.run_id, a.fence.run_id);
}

pub async fn settlements_set_session_status(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    let events = s.settle(&c.fence, done()).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].run_id.as_ref(), Some(&c.fence.run_id));
    assert_eq!(s.get_run(&c.fence.run_id).await.unwrap().state, RunState::Completed);
    let after = s.get_session(&sess.id).await.unwrap();
    assert_eq!(after.status, SessionStatus::Idle);
    assert!(s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().is_none());

    s.submit_inputs(&sess.id, vec![msg("break it")], AdmissionWrites::default()).await.unwrap();
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    s.submit_inputs(&sess.id, vec![msg("queued behind")], AdmissionWrites::default()).await.unwrap();
    s.settle(&c.fence, Settlement { events: vec![], outcome: RunOutcome::Terminated, bindings: vec![] }).await.unwrap();
    assert_eq!(s.get_session(&sess.id).await.unwrap().status, SessionStatus::Terminated);
    assert!(s.active_runs(&sess.id).await.unwrap().is_empty(), "a terminated session keeps no queued work");
    assert!(matches!(
        s.submit_inputs(&sess.id, vec![msg("hello?")], AdmissionWrites::default()).await,
        Err(StoreError::Rejected(_))
    ));
}

pub async fn retry_waits_for_its_backoff(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("flaky")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    s.settle(
        &c.fence,
        Settlement {
            events: vec![],
            outcome: RunOutcome::Retry { after: Duration::from_millis(400) },
            bindings: vec![],
        },
    )
    .await
    .unwrap();
    assert_eq!(s.get_session(&sess.id).await.unwrap().status, SessionStatus::Rescheduling);
    assert!(s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().is_none(), "not before the backoff");
    tokio::time::sleep(Duration::from_millis(550)).await;
    let again = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().expect("claimable after the backoff");
    assert_eq!(again.run.attempt, 1);
    assert_eq!(again.run.crash_count, 0);
    assert_eq!(again.fence.epoch, 2);
}

pub async fn claims_respect_backend_and_provider(h: &dyn Harness) {
    let s = h.fresh().await;
    session_with(&s, vec![msg("native work on local")]).await;
    let mut acp_only = worker("acp", "h");
    acp_only.backends = vec![BackendRef::Acp { executor: "x".into() }];
    assert!(s.claim_run(&acp_only, terms(10_000)).await.unwrap().is_none());
    let mut ns_only = worker("ns", "h");
    ns_only.providers = vec![ProviderTier::new("namespace")];
    assert!(s.claim_run(&ns_only, terms(10_000)).await.unwrap().is_none());
    assert!(s.claim_run(&worker("ok", "h"), terms(10_000)).await.unwrap().is_some());
}

pub async fn environment_pins_runs_to_its_host_until_the_host_is_gone(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("make a file")]).await;
    s.heartbeat_host("h1").await.unwrap();
    s.heartbeat_host("h2").await.unwrap();
    let c = s.claim_run(&worker("w1", "h1"), terms(10_000)).await.unwrap().unwrap();
    let realized = EnvironmentChange { state: EnvironmentState::Realized, host: Some("h1".into()) };
    s.commit(&c.fence, Commit { events: vec![agent_text("realized")], environment: Some(realized), bindings: vec![] })
        .await
        .unwrap();
    s.settle(&c.fence, done()).await.unwrap();
    let after = s.get_session(&sess.id).await.unwrap();
    assert_eq!(after.environment_state, EnvironmentState::Realized);
    assert_eq!(after.environment_host.as_deref(), Some("h1"));

    s.submit_inputs(&sess.id, vec![msg("again")], AdmissionWrites::default()).await.unwrap();
    assert!(s.claim_run(&worker("w2", "h2"), terms(10_000)).await.unwrap().is_none(), "pinned to h1 while h1 lives");
    let short = LeaseTerms { lease: Duration::from_secs(10), host_ttl: Duration::from_millis(300) };
    tokio::time::sleep(Duration::from_millis(450)).await;
    s.heartbeat_host("h2").await.unwrap();
    let lost = s.claim_run(&worker("w2", "h2"), short).await.unwrap().expect("h1 is gone: claimable to be failed");
    assert!(lost.environment_lost);
    assert_eq!(lost.fence.session_id, sess.id);

    // On its own host, the same session's runs are never "lost".
    let other = session_with(&s, vec![msg("x")]).await;
    let c = s.claim_run(&worker("w2", "h2"), short).await.unwrap().unwrap();
    assert_eq!(c.fence.session_id, other.id);
    assert!(!c.environment_lost);
}

/// A session whose environment's host is gone is released only by request, only once the
/// host is gone and only while idle: it goes back to `none` with no host, the event saying so
/// is in its log, and its next run is claimable anywhere without being "lost".
pub async fn a_lost_environment_is_released_only_by_request_and_only_once_its_host_is_gone(h: &dyn Harness) {
    let s = h.fresh().await;
    let lost_event = || NewEvent::new(EventPayload::AgentMessage { content: vec![] });
    let sess = session_with(&s, vec![msg("make a file")]).await;
    let never = session(&s).await;
    s.heartbeat_host("h1").await.unwrap();
    let c = s.claim_run(&worker("w1", "h1"), terms(10_000)).await.unwrap().unwrap();
    let realized = EnvironmentChange { state: EnvironmentState::Realized, host: Some("h1".into()) };
    s.commit(&c.fence, Commit { events: vec![], environment: Some(realized), bindings: vec![] }).await.unwrap();
    s.settle(&c.fence, done()).await.unwrap();

    let ttl = Duration::from_millis(300);
    let refused = s.release_lost_environment(&sess.id, ttl, lost_event()).await.unwrap_err();
    assert!(
        matches!(&refused, StoreError::Guard(Guard::EnvironmentNotLost { host: Some(h), .. }) if h == "h1"),
        "h1 is alive: {refused:?}"
    );
    let refused = s.release_lost_environment(&never.id, ttl, lost_event()).await.unwrap_err();
    assert!(matches!(refused, StoreError::Guard(Guard::EnvironmentNotLost { host: None, .. })), "nothing to release");

    tokio::time::sleep(Duration::from_millis(450)).await;
    let before = s.get_session(&sess.id).await.unwrap().last_seq;
    let event = s.release_lost_environment(&sess.id, ttl, lost_event()).await.expect("h1 is gone");
    assert_eq!(event.seq, before + 1, "the release is recorded in the session's log");
    let after = s.get_session(&sess.id).await.unwrap();
    assert_eq!((after.environment_state, after.environment_host), (EnvironmentState::None, None));
    assert_eq!(after.status, SessionStatus::Idle);
    let again = s.release_lost_environment(&sess.id, ttl, lost_event()).await.unwrap_err();
    assert!(matches!(again, StoreError::Guard(Guard::EnvironmentNotLost { .. })), "released once");

    s.submit_inputs(&sess.id, vec![msg("again")], AdmissionWrites::default()).await.unwrap();
    s.heartbeat_host("h2").await.unwrap();
    let c = s.claim_run(&worker("w2", "h2"), terms(10_000)).await.unwrap().expect("claimable anywhere");
    assert_eq!(c.fence.session_id, sess.id);
    assert!(!c.environment_lost, "a fresh environment, not a lost one");
}

pub async fn released_environment_is_final(h: &dyn Harness) {
    let s = h.fresh().await;
    session_with(&s, vec![msg("go")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    let to = |state| Commit {
        events: vec![],
        environment: Some(EnvironmentChange { state, host: Some("h".into()) }),
        bindings: vec![],
    };
    s.commit(&c.fence, to(EnvironmentState::Realized)).await.unwrap();
    s.commit(&c.fence, to(EnvironmentState::Hibernated)).await.unwrap();
    s.commit(&c.fence, to(EnvironmentState::Realized)).await.unwrap();
    s.commit(&c.fence, to(EnvironmentState::Released)).await.unwrap();
    match s.commit(&c.fence, to(EnvironmentState::Realized)).await {
        Err(StoreError::Guard(Guard::EnvironmentTransition { from: "released", to: "realized", .. })) => {}
        other => panic!("released must be final, got {other:?}"),
    }
}

pub async fn environment_transitions_outside_runs_compare_and_set(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("go")]).await;
    use EnvironmentState::*;
    assert!(!s.transition_environment(&sess.id, &[Realized], Hibernated).await.unwrap(), "not realized yet");
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    let realized = EnvironmentChange { state: Realized, host: Some("h".into()) };
    s.commit(&c.fence, Commit { events: vec![], environment: Some(realized), bindings: vec![] }).await.unwrap();
    s.settle(&c.fence, done()).await.unwrap();
    assert!(s.transition_environment(&sess.id, &[Realized], Hibernated).await.unwrap());
    assert_eq!(s.get_session(&sess.id).await.unwrap().environment_state, Hibernated);
    assert!(!s.transition_environment(&sess.id, &[Realized], Hibernated).await.unwrap(), "compare-and-set");
    s.delete_session(&sess.id).await.unwrap();
    assert!(s.transition_environment(&sess.id, &[Hibernated], Realized).await.is_err(), "deleted: gone");
}

pub async fn runs_record_the_inputs_they_answer(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("one"), msg("two")]).await;
    let a = s.claim_run(&worker("a", "h"), terms(200)).await.unwrap().unwrap();
    assert_eq!(a.run.input_seq, Some(2));
    s.commit(&a.fence, Commit { events: vec![agent_text("working")], environment: None, bindings: vec![] })
        .await
        .unwrap();
    s.submit_inputs(&sess.id, vec![msg("three")], AdmissionWrites::default()).await.unwrap();
    outlive(200).await;
    let b = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().unwrap();
    assert_eq!(b.fence.run_id, a.fence.run_id);
    assert_eq!(b.run.input_seq, Some(2), "a reclaim keeps the boundary; message three is the next run's");
}

/// A message admitted while a started run waits for its retry is not covered by that run
/// (its inputs were fixed at its first claim): it gets a run of its own, claimed after the
/// retry.
pub async fn messages_during_a_retry_backoff_get_their_own_run(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("flaky")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    let retry = RunOutcome::Retry { after: Duration::from_millis(300) };
    s.settle(&c.fence, Settlement { events: vec![], outcome: retry, bindings: vec![] }).await.unwrap();
    s.submit_inputs(&sess.id, vec![msg("meanwhile")], AdmissionWrites::default()).await.unwrap();
    let active = s.active_runs(&sess.id).await.unwrap();
    assert_eq!(active.len(), 2, "the retry and a run for the new message: {active:?}");
    assert!(s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().is_none(), "the retry goes first");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let again = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    assert_eq!(again.fence.run_id, c.fence.run_id);
    assert_eq!(again.run.input_seq, Some(1));
    s.settle(&again.fence, done()).await.unwrap();
    let next = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().expect("the message's own run");
    assert_ne!(next.fence.run_id, c.fence.run_id);
    // flaky (1), its turn's start (2), meanwhile (3), the retry's start (4) and reply (5).
    assert_eq!(next.run.input_seq, Some(5), "through the message and the retried turn's reply");
    assert_eq!(next.inputs_through, 5);
}

/// An interrupt admitted while a run works is not undone when that run then settles for a
/// retry or a park: the turn ends interrupted.
pub async fn an_interrupt_outlives_a_retry_or_park_settlement(h: &dyn Harness) {
    for park in [false, true] {
        let s = h.fresh().await;
        let sess = session_with(&s, vec![msg("flaky")]).await;
        let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
        s.submit_inputs(&sess.id, vec![NewEvent::new(EventPayload::UserInterrupt {})], AdmissionWrites::default())
            .await
            .unwrap();
        let outcome = if park {
            let pending = vec![PendingAction { event_id: EventId::new(), kind: PendingKind::Confirmation }];
            RunOutcome::Parked { pending }
        } else {
            RunOutcome::Retry { after: Duration::from_millis(10) }
        };
        let events = s.settle(&c.fence, Settlement { events: vec![], outcome, bindings: vec![] }).await.unwrap();
        assert!(
            matches!(
                events.last().map(|e| &e.payload),
                Some(EventPayload::TurnEnded { stop: StopReason::Interrupted })
            ),
            "park={park}: {events:?}"
        );
        let after = s.get_session(&sess.id).await.unwrap();
        assert_eq!(after.status, SessionStatus::Idle, "park={park}");
        assert!(after.pending_actions.is_empty(), "park={park}");
        assert!(s.active_runs(&sess.id).await.unwrap().is_empty(), "park={park}: nothing left to retry");
    }
}

pub async fn parked_sessions_are_not_claimed(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("ask first")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    // A message arrives while the run works; then the run parks.
    s.submit_inputs(&sess.id, vec![msg("while you work")], AdmissionWrites::default()).await.unwrap();
    let tool = NewEvent::new(EventPayload::ToolUse {
        name: "bash".into(),
        input: Default::default(),
        origin: ToolOrigin::Builtin,
        permission: ToolPermission::Ask,
        policy: None,
    });
    let pending = vec![PendingAction { event_id: tool.id.clone(), kind: PendingKind::Confirmation }];
    s.settle(
        &c.fence,
        Settlement { events: vec![tool.clone()], outcome: RunOutcome::Parked { pending }, bindings: vec![] },
    )
    .await
    .unwrap();
    assert!(
        s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().is_none(),
        "the queued follow-up waits for the answer"
    );
    s.submit_inputs(
        &sess.id,
        vec![NewEvent::new(EventPayload::ToolConfirmation { tool_use_id: tool.id, allow: true, deny_message: None })],
        AdmissionWrites::default(),
    )
    .await
    .unwrap();
    assert_eq!(s.active_runs(&sess.id).await.unwrap().len(), 1, "the queued run doubles as the resume");
    assert!(s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().is_some());
}

pub async fn commit_hints_wake_session_watchers(h: &dyn Harness) {
    if !h.options().wakeups {
        return;
    }
    let s = h.fresh().await;
    let sess = session(&s).await;
    let wake = s.wakeups();
    let mut rx = wake.watch_session(&sess.id);
    // An interrupt on an idle session is recorded without queueing work, so no run-ready
    // hint is in flight when the run-ready waiter registers below.
    s.submit_inputs(&sess.id, vec![NewEvent::new(EventPayload::UserInterrupt {})], AdmissionWrites::default())
        .await
        .unwrap();
    // The first change is the local delivery, with the batch: our own NOTIFY (PostgreSQL)
    // does not come back to this process.
    tokio::time::timeout(Duration::from_secs(2), rx.changed())
        .await
        .expect("a local commit wakes its watchers within 2s")
        .unwrap();
    let tip = rx.borrow_and_update().clone();
    assert_eq!(tip.seq, 1);
    let batch = tip.batch.expect("a local commit shares its batch");
    assert_eq!(batch.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1], "exactly the committed events");
    let mut runs = wake.watch_runs();
    runs.borrow_and_update();
    s.submit_inputs(&sess.id, vec![msg("new work")], AdmissionWrites::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), runs.changed()).await.expect("run-ready hint within 2s").unwrap();
}

/// An admission that claims the run it queued commits the input, the claim and its turn
/// start together, and wakes no Worker for it; one whose run cannot be claimed there and
/// then (another run of the session is running, or the backend is not offered) claims
/// nothing, and the run waits, hinted, for a Worker as after any admission.
pub async fn an_admission_claims_its_own_run_with_its_turn_start(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session(&s).await;
    let mut runs = s.wakeups().watch_runs();
    runs.borrow_and_update();
    let (events, claim) = s
        .submit_and_claim(&sess.id, vec![msg("first")], AdmissionWrites::default(), &worker("a", "h"), terms(10_000))
        .await
        .unwrap();
    let claim = claim.expect("the admission claims the run it queued");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1]);
    assert_eq!(claim.fence.session_id, sess.id);
    assert_eq!((claim.fence.epoch, claim.fence.owner.as_str()), (1, "a"));
    assert_eq!(claim.inputs_through, 1, "the boundary is the admitted input");
    assert!(!claim.run.started && !claim.is_reclaim(), "a first claim");
    let log = s.events_after(&sess.id, 0, 10).await.unwrap();
    assert_eq!(
        log.iter().map(|e| (e.seq, e.payload.kind())).collect::<Vec<_>>(),
        vec![(1, EventKind::UserMessage), (2, EventKind::TurnStarted)],
        "the turn start is committed with the input"
    );
    assert_eq!((log[1].run_id.as_ref(), log[1].epoch), (Some(&claim.fence.run_id), Some(1)));
    assert_eq!(log[0].run_id, None, "the input is the client's");
    let stored = s.get_run(&claim.fence.run_id).await.unwrap();
    assert_eq!(stored.state, RunState::Running);
    assert_eq!((stored.lease_owner.as_deref(), stored.lease_epoch, stored.input_seq), (Some("a"), 1, Some(1)));
    assert_eq!(stored.lease_expires_at, claim.run.lease_expires_at, "the claim holds the stored lease");
    assert_eq!(claim.session.last_seq, 2, "the claim's session is past its turn start");
    assert_eq!(s.get_session(&sess.id).await.unwrap().last_seq, 2);
    assert!(s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().is_none(), "nothing left to claim");
    // Only where nothing else can hint: PostgreSQL's channel is shared by every store on the
    // database, and tests run beside this one.
    if h.options().wakeups && s.engine() == "sqlite" {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!runs.has_changed().unwrap(), "no Worker is woken for a run already claimed");
    }

    // A message while the run is running queues a run that must wait for it.
    let (_, none) = s
        .submit_and_claim(&sess.id, vec![msg("second")], AdmissionWrites::default(), &worker("a", "h"), terms(10_000))
        .await
        .unwrap();
    assert!(none.is_none(), "never a second running run of the session");
    if h.options().wakeups {
        tokio::time::timeout(Duration::from_secs(2), runs.changed()).await.expect("the queued run is hinted").unwrap();
    }
    s.settle(&claim.fence, done()).await.unwrap();

    // A backend this offer does not serve: queued for whoever does.
    let other = session(&s).await;
    let acp_only =
        gateway_core::run::WorkerOffer { backends: vec![BackendRef::Acp { executor: "x".into() }], ..worker("c", "h") };
    let (_, none) = s
        .submit_and_claim(&other.id, vec![msg("hi")], AdmissionWrites::default(), &acp_only, terms(10_000))
        .await
        .unwrap();
    assert!(none.is_none(), "a run is claimed only by an offer that can place it");
    let queued = s.active_runs(&other.id).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].state, RunState::Queued);

    // A session created with its first message: created, admitted and claimed at once.
    let template = session_with(&s, vec![]).await;
    let new = super::new_session(template.environment_id.clone(), template.snapshot.clone(), vec![msg("first")]);
    let (created, events, claim) = s.create_session_and_claim(new, &worker("d", "h"), terms(10_000)).await.unwrap();
    let claim = claim.expect("the creation claims the run its first message queued");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1]);
    assert_eq!((claim.fence.session_id.clone(), claim.inputs_through), (created.id.clone(), 1));
    assert_eq!(created.last_seq, 2, "the session read back includes its turn start");
    let kinds: Vec<EventKind> =
        s.events_after(&created.id, 0, 10).await.unwrap().iter().map(|e| e.payload.kind()).collect();
    assert_eq!(kinds, vec![EventKind::UserMessage, EventKind::TurnStarted]);
}

pub async fn hints_cross_store_handles(h: &dyn Harness) {
    let s = h.fresh().await;
    let other = h.second(&s).await;
    let sess = session(&s).await;
    let mut rx = other.wakeups().watch_session(&sess.id);
    s.submit_inputs(&sess.id, vec![msg("hello from the first handle")], AdmissionWrites::default()).await.unwrap();
    // The second handle always sees the commit by reading; with wake-ups on PostgreSQL it is
    // also told. SQLite serves one process, so its handles share no hints.
    assert_eq!(other.events_after(&sess.id, 0, 10).await.unwrap().len(), 1);
    if h.options().wakeups && s.engine() == "postgres" {
        tokio::time::timeout(Duration::from_secs(3), rx.changed())
            .await
            .expect("NOTIFY reached the other handle")
            .unwrap();
        assert_eq!(rx.borrow().seq, 1);
        assert!(rx.borrow().batch.is_none(), "another process's commit carries no batch: read the store");
    }
}

/// One claim call takes up to its limit, at most one run per session, and commits each
/// claimed run's turn start (naming its input boundary) in the same transaction.
pub async fn batched_claims_take_one_run_per_session_and_start_their_turns(h: &dyn Harness) {
    let s = h.fresh().await;
    let mut sessions = Vec::new();
    for i in 0..3 {
        sessions.push(session_with(&s, vec![msg(&format!("m{i}"))]).await);
    }
    assert_eq!(s.queue_stats().await.unwrap().queued, 3, "every session's run waits");
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let waited = s.queue_stats().await.unwrap().oldest_wait;
    assert!(waited >= std::time::Duration::from_millis(50), "the oldest claimable run has waited: {waited:?}");
    // A second queued run of the first session waits behind its first.
    let busy = &sessions[0];
    let first = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    assert_eq!(first.fence.session_id, busy.id);
    assert_eq!(s.queue_stats().await.unwrap().queued, 2, "a claimed run no longer waits");
    s.settle(&first.fence, Settlement { events: vec![], outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    s.submit_inputs(&busy.id, vec![msg("again")], AdmissionWrites::default()).await.unwrap();
    assert_eq!(s.queue_stats().await.unwrap().queued, 3);
    let claims = s.claim_runs(&worker("w", "h"), terms(10_000), 2).await.unwrap();
    assert_eq!(claims.len(), 2, "the limit is honoured");
    let more = s.claim_runs(&worker("w", "h"), terms(10_000), 10).await.unwrap();
    assert_eq!(more.len(), 1, "one run per session, whatever the limit");
    assert_eq!(s.queue_stats().await.unwrap(), crate::QueueStats::default(), "nothing waits");
    let all: Vec<_> = claims.iter().chain(&more).collect();
    let distinct: std::collections::BTreeSet<_> = all.iter().map(|c| c.fence.session_id.clone()).collect();
    assert_eq!(distinct.len(), 3);
    for c in all {
        let log = s.events_after(&c.fence.session_id, 0, 100).await.unwrap();
        let last = log.last().unwrap();
        assert_eq!(last.payload, EventPayload::TurnStarted { inputs_through: c.inputs_through }, "{log:?}");
        assert_eq!((last.run_id.as_ref(), last.epoch), (Some(&c.fence.run_id), Some(c.fence.epoch)));
        assert_eq!(c.inputs_through, last.seq - 1, "the boundary is the last input before the claim");
        // The turn starts from the session the claim hands over, without reading it again.
        let stored = s.get_session(&c.fence.session_id).await.unwrap();
        assert_eq!(c.session.last_seq, last.seq, "the claim's session is past its turn start");
        assert_eq!(c.session, stored, "the claim's session is the stored one");
    }
    assert!(s.claim_runs(&worker("w", "h"), terms(10_000), 10).await.unwrap().is_empty());
}

/// All of a process's leases renew in one call; a lost one is reported, not renewed.
pub async fn leases_renew_together_and_lost_ones_are_reported(h: &dyn Harness) {
    let s = h.fresh().await;
    let kept = session_with(&s, vec![msg("kept")]).await;
    let lost = session_with(&s, vec![msg("lost")]).await;
    let claims = s.claim_runs(&worker("a", "h"), terms(300), 10).await.unwrap();
    assert_eq!(claims.len(), 2);
    let (k, l) =
        if claims[0].fence.session_id == kept.id { (&claims[0], &claims[1]) } else { (&claims[1], &claims[0]) };
    assert_eq!(l.fence.session_id, lost.id);
    s.renew_lease(&k.fence, Duration::from_secs(10)).await.unwrap();
    outlive(300).await;
    let taken = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("the expired lease is reclaimed");
    assert_eq!(taken.fence.run_id, l.fence.run_id);
    s.submit_inputs(&kept.id, vec![NewEvent::new(EventPayload::UserInterrupt {})], AdmissionWrites::default())
        .await
        .unwrap();
    let renewed = s.renew_leases(&[k.fence.clone(), l.fence.clone()], Duration::from_secs(10)).await.unwrap();
    assert_eq!(renewed[0].as_ref().map(|r| r.cancel_requested), Some(true), "renewed, and the interrupt is reported");
    assert!(renewed[1].is_none(), "the lease another worker took is lost");
    assert!(s.renew_leases(&[], Duration::from_secs(1)).await.unwrap().is_empty());
    // Only the kept one was extended: b's lease is untouched by a's renewal.
    assert!(s.renew_lease(&taken.fence, Duration::from_secs(10)).await.is_ok());
    // A batch holding a run's current fence and a stale one of the same run: only the current
    // one is renewed (found by the run state property test).
    s.renew_lease(&taken.fence, Duration::ZERO).await.unwrap();
    let again = s.claim_run(&worker("b", "h"), terms(10_000)).await.unwrap().expect("the lapsed lease is reclaimed");
    assert_eq!((again.fence.run_id.clone(), again.fence.epoch), (l.fence.run_id.clone(), taken.fence.epoch + 1));
    let renewed = s.renew_leases(&[taken.fence.clone(), again.fence.clone()], Duration::from_secs(10)).await.unwrap();
    assert!(renewed[0].is_none(), "the stale fence is lost even though its run was renewed");
    assert!(renewed[1].is_some());
}

/// Two processes sharing a host id must share its workspaces: another directory is refused
/// while the id's holder is seen within the TTL, and allowed once it is gone.
pub async fn a_host_id_is_refused_to_a_process_keeping_workspaces_elsewhere_while_its_holder_lives(h: &dyn Harness) {
    let s = h.fresh().await;
    let ttl = Duration::from_secs(60);
    s.claim_host("h", "/srv/a/workspaces", ttl).await.unwrap();
    s.claim_host("h", "/srv/a/workspaces", ttl).await.expect("a restart, or a second process, with the same directory");
    s.claim_host("other", "/srv/b/workspaces", ttl).await.expect("another host id is another host");
    s.heartbeat_host("h").await.unwrap();
    match s.claim_host("h", "/srv/b/workspaces", ttl).await {
        Err(StoreError::Guard(Guard::HostInUse { host, workspaces })) => {
            assert_eq!((host.as_str(), workspaces.as_str()), ("h", "/srv/a/workspaces"), "it names the holder's");
        }
        other => panic!("expected HostInUse, got {other:?}"),
    }
    // A holder not seen within the TTL is gone: the id passes to the new directory.
    s.claim_host("h", "/srv/b/workspaces", Duration::ZERO).await.expect("the holder is gone");
    assert!(matches!(
        s.claim_host("h", "/srv/a/workspaces", ttl).await,
        Err(StoreError::Guard(Guard::HostInUse { .. }))
    ));
}
