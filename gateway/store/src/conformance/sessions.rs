//! Sessions and input admission.

use gateway_core::admission::AdmissionError;
use gateway_core::event::{EventKind, EventPayload, NewEvent, StopReason, ToolOrigin, ToolPermission};
use gateway_core::run::RunState;
use gateway_core::session::{EnvironmentState, PendingAction, PendingKind, SessionSnapshot, SessionStatus};
use gateway_core::{EnvironmentId, Metadata};

use super::{Harness, env_spec, msg, new_session, session, session_with, terms, worker};
use crate::{
    AdmissionWrites, EventFilter, Guard, Order, PageRequest, RunOutcome, SessionFilter, SessionPatch, Settlement,
    StoreError,
};

pub async fn creation_needs_a_live_environment(h: &dyn Harness) {
    let s = h.fresh().await;
    let live = session(&s).await;
    let snapshot: SessionSnapshot = live.snapshot.clone();
    let missing = new_session(EnvironmentId::new(), snapshot.clone(), vec![]);
    assert!(matches!(s.create_session(missing).await, Err(StoreError::NotFound { kind: "environment", .. })));
    let env = s.create_environment(env_spec("soon archived")).await.unwrap();
    s.archive_environment(&env.id).await.unwrap();
    let archived = new_session(env.id, snapshot, vec![]);
    assert!(matches!(s.create_session(archived).await, Err(StoreError::Guard(Guard::EnvironmentArchived(_)))));

    assert_eq!(live.status, SessionStatus::Idle);
    assert_eq!(live.environment_state, EnvironmentState::None);
    assert_eq!(live.last_seq, 0);
    let got = s.get_session(&live.id).await.unwrap();
    assert_eq!(got, live);
}

/// U+0000 in a text column (a session's title) is the caller's error on both engines, and
/// nothing of the refused write remains; inside a message, which is stored as JSON text
/// with the character escaped, it is kept.
pub async fn text_holding_nul_is_refused_alike_and_writes_nothing(h: &dyn Harness) {
    let s = h.fresh().await;
    let live = session(&s).await;
    let mut titled = new_session(live.environment_id.clone(), live.snapshot.clone(), vec![msg("hi")]);
    titled.title = Some("a\0b".into());
    let id = titled.id.clone();
    assert!(matches!(s.create_session(titled).await, Err(StoreError::Unstorable(_))));
    assert!(matches!(s.get_session(&id).await, Err(StoreError::NotFound { .. })), "nothing was written");
    let kept = session_with(&s, vec![msg("nul \0 inside")]).await;
    let log = s.events_after(&kept.id, 0, 10).await.unwrap();
    assert!(
        matches!(&log[0].payload, EventPayload::UserMessage { content }
            if matches!(&content[0], gateway_core::content::ContentBlock::Text { text } if text == "nul \0 inside")),
        "{:?}",
        log[0].payload
    );
}

pub async fn initial_inputs_start_a_run(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("hello"), msg("again")]).await;
    assert_eq!(sess.status, SessionStatus::Running);
    assert_eq!(sess.last_seq, 2);
    let runs = s.active_runs(&sess.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].state, RunState::Queued);
    let log = s.events_after(&sess.id, 0, 10).await.unwrap();
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert!(log.iter().all(|e| e.kind() == EventKind::UserMessage && e.run_id.is_none()));
}

pub async fn lists_filter_and_paginate_both_ways(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = session(&s).await;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let b = session_with(&s, vec![msg("go")]).await;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let c = session(&s).await;

    let all = SessionFilter::default();
    let desc = s.list_sessions(&all, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(
        desc.items.iter().map(|x| x.id.clone()).collect::<Vec<_>>(),
        vec![c.id.clone(), b.id.clone(), a.id.clone()]
    );

    let running = SessionFilter { statuses: vec![SessionStatus::Running], ..Default::default() };
    let got = s.list_sessions(&running, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(got.items.iter().map(|x| x.id.clone()).collect::<Vec<_>>(), vec![b.id.clone()]);

    let by_agent = SessionFilter { agent_id: Some(a.snapshot.agent.id.clone()), ..Default::default() };
    let got = s.list_sessions(&by_agent, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(got.items.len(), 1);
    assert_eq!(got.items[0].id, a.id);

    let mut recent = SessionFilter::default();
    recent.created.gt = Some(a.created_at);
    let got = s.list_sessions(&recent, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|x| x.id.clone()).collect::<Vec<_>>(), vec![b.id.clone(), c.id.clone()]);

    // Pages of one, forward then back.
    let p1 = s.list_sessions(&all, &PageRequest::first(1, Order::Desc)).await.unwrap();
    assert_eq!(p1.items[0].id, c.id);
    assert!(p1.prev.is_none());
    let p2 = s
        .list_sessions(&all, &PageRequest { cursor: p1.next.clone(), ..PageRequest::first(1, Order::Desc) })
        .await
        .unwrap();
    assert_eq!(p2.items[0].id, b.id);
    let back = s
        .list_sessions(&all, &PageRequest { cursor: p2.prev.clone(), ..PageRequest::first(1, Order::Desc) })
        .await
        .unwrap();
    assert_eq!(back.items[0].id, c.id);
    assert!(back.prev.is_none(), "the first page has no previous page");

    s.archive_session(&a.id).await.unwrap();
    assert_eq!(s.list_sessions(&all, &PageRequest::first(10, Order::Desc)).await.unwrap().items.len(), 2);
    let with = SessionFilter { include_archived: true, ..Default::default() };
    assert_eq!(s.list_sessions(&with, &PageRequest::first(10, Order::Desc)).await.unwrap().items.len(), 3);

    let patched = s
        .update_session(
            &c.id,
            SessionPatch {
                title: Some(None),
                metadata: Some(Metadata::from([("k".into(), "v".into())])),
                snapshot: None,
                budget: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.title, None);
    assert_eq!(patched.metadata.get("k").map(String::as_str), Some("v"));
}

/// An update appends one event naming what changed (nothing changed: nothing written); the
/// session's definition (its agent, its vaults) changes only while it is idle.
pub async fn updates_record_what_changed_and_redefining_waits_for_idle(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("work")]).await;
    let patch = |title: Option<&str>, snapshot: Option<SessionSnapshot>| SessionPatch {
        title: title.map(|t| Some(t.to_owned())),
        metadata: None,
        snapshot,
        budget: None,
    };
    let mut next = sess.snapshot.clone();
    next.vault_ids = vec![gateway_core::VaultId::new()];
    let refused = s.update_session(&sess.id, patch(None, Some(next.clone()))).await.unwrap_err();
    assert!(matches!(refused, StoreError::Guard(Guard::SessionRunning(_))), "{refused:?}");
    let titled = s.update_session(&sess.id, patch(Some("renamed"), None)).await.unwrap();
    assert_eq!(
        (titled.title.as_deref(), &titled.snapshot),
        (Some("renamed"), &sess.snapshot),
        "a title changes while running"
    );

    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    s.settle(&claim.fence, Settlement { events: vec![], outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    let redefined = s.update_session(&sess.id, patch(None, Some(next.clone()))).await.unwrap();
    assert_eq!(redefined.snapshot, next);
    let unchanged = s.update_session(&sess.id, patch(Some("renamed"), Some(next.clone()))).await.unwrap();
    assert_eq!(unchanged.last_seq, redefined.last_seq, "nothing changed: nothing written");

    let updates: Vec<EventPayload> = s
        .events_after(&sess.id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind() == EventKind::SessionUpdated)
        .map(|e| e.payload)
        .collect();
    assert_eq!(
        updates,
        vec![
            EventPayload::SessionUpdated {
                title: Some("renamed".into()),
                metadata: None,
                agent: None,
                vault_ids: None,
                budget: None,
            },
            EventPayload::SessionUpdated {
                title: None,
                metadata: None,
                agent: None,
                vault_ids: Some(next.vault_ids),
                budget: None
            },
        ]
    );
}

pub async fn archive_and_delete_are_refused_while_running(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("work")]).await;
    assert!(matches!(s.archive_session(&sess.id).await, Err(StoreError::Guard(Guard::SessionRunning(_)))));
    assert!(matches!(s.delete_session(&sess.id).await, Err(StoreError::Guard(Guard::SessionRunning(_)))));
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    s.settle(&claim.fence, Settlement { events: vec![], outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    let archived = s.archive_session(&sess.id).await.unwrap();
    assert!(archived.archived_at.is_some());
    assert!(matches!(
        s.submit_inputs(&sess.id, vec![msg("more")], AdmissionWrites::default()).await,
        Err(StoreError::Rejected(AdmissionError::Archived))
    ));
}

pub async fn delete_ends_the_log_and_releases_the_environment(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("hi")]).await;
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    s.settle(&claim.fence, Settlement { events: vec![], outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    s.delete_session(&sess.id).await.unwrap();
    assert!(matches!(s.get_session(&sess.id).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(
        s.submit_inputs(&sess.id, vec![msg("x")], AdmissionWrites::default()).await,
        Err(StoreError::NotFound { .. })
    ));
    let log = s.events_after(&sess.id, 0, 10).await.unwrap();
    assert_eq!(log.last().map(|e| e.kind()), Some(EventKind::SessionDeleted), "open streams read the deletion last");
    let kinds: Vec<EventKind> = log.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, vec![EventKind::UserMessage, EventKind::TurnStarted, EventKind::SessionDeleted]);
}

pub async fn partial_answers_re_emit_idle_and_the_last_resumes(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("do two things")]).await;
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    let tool = |name: &str| {
        NewEvent::new(EventPayload::ToolUse {
            name: name.into(),
            input: Default::default(),
            origin: ToolOrigin::Builtin,
            permission: ToolPermission::Ask,
            policy: None,
        })
    };
    let (x, y) = (tool("bash"), tool("write"));
    let pending = vec![
        PendingAction { event_id: x.id.clone(), kind: PendingKind::Confirmation },
        PendingAction { event_id: y.id.clone(), kind: PendingKind::Confirmation },
    ];
    s.settle(
        &claim.fence,
        Settlement {
            events: vec![x.clone(), y.clone()],
            outcome: RunOutcome::Parked { pending: pending.clone() },
            bindings: vec![],
        },
    )
    .await
    .unwrap();
    let parked = s.get_session(&sess.id).await.unwrap();
    assert_eq!(parked.status, SessionStatus::Idle);
    assert_eq!(parked.pending_actions, pending);

    let confirm =
        |id| NewEvent::new(EventPayload::ToolConfirmation { tool_use_id: id, allow: true, deny_message: None });
    let echoed = s.submit_inputs(&sess.id, vec![confirm(x.id.clone())], AdmissionWrites::default()).await.unwrap();
    match &echoed[1].payload {
        EventPayload::TurnEnded { stop: StopReason::RequiresAction { event_ids } } => {
            assert_eq!(event_ids, &vec![y.id.clone()])
        }
        other => panic!("expected a re-emitted idle, got {other:?}"),
    }
    assert!(s.active_runs(&sess.id).await.unwrap().is_empty());
    // Answering the same id twice is refused, and nothing is written.
    let before = s.get_session(&sess.id).await.unwrap().last_seq;
    assert!(matches!(
        s.submit_inputs(&sess.id, vec![confirm(x.id.clone())], AdmissionWrites::default()).await,
        Err(StoreError::Rejected(AdmissionError::NotPending(_)))
    ));
    assert_eq!(s.get_session(&sess.id).await.unwrap().last_seq, before);

    s.submit_inputs(&sess.id, vec![confirm(y.id.clone())], AdmissionWrites::default()).await.unwrap();
    let resumed = s.get_session(&sess.id).await.unwrap();
    assert_eq!(resumed.status, SessionStatus::Running);
    assert!(resumed.pending_actions.is_empty());
    assert_eq!(s.active_runs(&sess.id).await.unwrap().len(), 1, "the last answer queues the resuming run");
}

pub async fn interrupt_cancels_queued_runs_and_flags_running_ones(h: &dyn Harness) {
    let s = h.fresh().await;
    let queued = session_with(&s, vec![msg("never mind")]).await;
    let out = s
        .submit_inputs(&queued.id, vec![NewEvent::new(EventPayload::UserInterrupt {})], AdmissionWrites::default())
        .await
        .unwrap();
    assert!(matches!(out.last().map(|e| &e.payload), Some(EventPayload::TurnEnded { stop: StopReason::Interrupted })));
    assert!(s.active_runs(&queued.id).await.unwrap().is_empty());
    assert_eq!(s.get_session(&queued.id).await.unwrap().status, SessionStatus::Idle);

    let running = session_with(&s, vec![msg("long job")]).await;
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    assert_eq!(claim.fence.session_id, running.id);
    s.submit_inputs(
        &running.id,
        vec![NewEvent::new(EventPayload::UserInterrupt {}), msg("do this instead")],
        AdmissionWrites::default(),
    )
    .await
    .unwrap();
    let run = s.get_run(&claim.fence.run_id).await.unwrap();
    assert!(run.cancel_requested, "cancel intent is persisted on the running run");
    let active = s.active_runs(&running.id).await.unwrap();
    assert_eq!(active.len(), 2, "the redirect queues a run behind the interrupted one");
    let filter = EventFilter { kinds: vec![EventKind::UserInterrupt], created: Default::default() };
    let page = s.list_events(&running.id, &filter, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(page.items.len(), 1);
}

pub async fn opening_queues_one_run_without_inputs_that_a_message_joins(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![]).await;
    assert_eq!(sess.status, SessionStatus::Idle);
    assert!(s.open_session(&sess.id).await.unwrap(), "an idle session without a run opens");
    assert_eq!(s.get_session(&sess.id).await.unwrap().status, SessionStatus::Running);
    assert!(!s.open_session(&sess.id).await.unwrap(), "a session with a queued run is not opened again");
    let runs = s.active_runs(&sess.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert!(s.events_after(&sess.id, 0, 10).await.unwrap().is_empty(), "opening appends nothing");

    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    assert_eq!(claim.fence.run_id, runs[0].id);
    assert_eq!(claim.inputs_through, 0, "the run has no inputs");
    assert!(!s.open_session(&sess.id).await.unwrap(), "nor while its run runs");
    let ended = NewEvent::new(EventPayload::TurnEnded { stop: StopReason::EndTurn });
    let end = Settlement { events: vec![ended], outcome: RunOutcome::Completed, bindings: vec![] };
    s.settle(&claim.fence, end).await.unwrap();
    let after = s.get_session(&sess.id).await.unwrap();
    assert_eq!(after.status, SessionStatus::Idle);
    let kinds: Vec<EventKind> = s.events_after(&sess.id, 0, 10).await.unwrap().iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, vec![EventKind::TurnStarted, EventKind::TurnEnded]);

    // A message admitted while an opening run is queued is that run's input.
    assert!(s.open_session(&sess.id).await.unwrap());
    s.submit_inputs(&sess.id, vec![msg("hi")], AdmissionWrites::default()).await.unwrap();
    assert_eq!(s.active_runs(&sess.id).await.unwrap().len(), 1, "the message joins the queued run");
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    assert_eq!(claim.inputs_through, after.last_seq + 1);

    // An archived session is never opened.
    let archived = session_with(&s, vec![]).await;
    s.archive_session(&archived.id).await.unwrap();
    assert!(!s.open_session(&archived.id).await.unwrap());
    assert!(s.active_runs(&archived.id).await.unwrap().is_empty());
}

pub async fn model_usage_adds_up_on_the_session_with_its_commits(h: &dyn Harness) {
    use gateway_core::event::Usage;
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("count")]).await;
    assert_eq!(sess.usage, Usage::default());
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    let ended = |input, output, read, write, cost, unpriced| {
        let start = NewEvent::new(EventPayload::ModelRequestStarted {});
        let usage = Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: write,
            list_cost_micros: cost,
            unpriced_requests: unpriced,
        };
        let end = EventPayload::ModelRequestEnded { start_id: start.id.clone(), is_error: false, usage };
        vec![start, NewEvent::new(end)]
    };
    let commit = crate::Commit { events: ended(10, 5, 0, 100, 1500, 0), environment: None, bindings: vec![] };
    s.commit(&claim.fence, commit).await.unwrap();
    let mut last = ended(3, 7, 100, 20, 0, 1);
    last.push(NewEvent::new(EventPayload::TurnEnded { stop: StopReason::EndTurn }));
    s.settle(&claim.fence, Settlement { events: last, outcome: RunOutcome::Completed, bindings: vec![] })
        .await
        .unwrap();
    let after = s.get_session(&sess.id).await.unwrap();
    let sum = Usage {
        input_tokens: 13,
        output_tokens: 12,
        cache_read_input_tokens: 100,
        cache_creation_input_tokens: 120,
        list_cost_micros: 1500,
        unpriced_requests: 1,
    };
    assert_eq!(after.usage, sum, "both requests counted, once each");
    // A fenced (stale) commit adds nothing.
    assert!(
        s.commit(&claim.fence, crate::Commit { events: ended(1, 1, 1, 1, 0, 0), environment: None, bindings: vec![] })
            .await
            .is_err()
    );
    assert_eq!(s.get_session(&sess.id).await.unwrap().usage, sum);
    let listed = s.list_sessions(&SessionFilter::default(), &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(listed.items.iter().find(|x| x.id == sess.id).unwrap().usage, sum, "lists read it too");
}

fn guard(e: StoreError) -> Guard {
    match e {
        StoreError::Guard(g) => g,
        other => panic!("expected a guard, got {other:?}"),
    }
}

pub async fn a_budget_is_set_at_creation_raised_or_removed_never_added(h: &dyn Harness) {
    use gateway_core::event::Usage;
    use gateway_core::session::{Budget, BudgetChange};
    let s = h.fresh().await;
    let plain = session_with(&s, vec![]).await;
    assert_eq!(plain.budget, None);
    let add = SessionPatch { budget: Some(Some(Budget { max_list_cost_micros: 5 })), ..SessionPatch::default() };
    let refused = s.update_session(&plain.id, add.clone()).await.unwrap_err();
    assert!(matches!(guard(refused), Guard::BudgetCreateOnly(_)), "a session created without one cannot get one");

    let capped = {
        let mut new = new_session(plain.environment_id.clone(), plain.snapshot.clone(), vec![msg("spend")]);
        new.budget = Some(Budget { max_list_cost_micros: 2_000 });
        s.create_session(new).await.unwrap().0
    };
    assert_eq!(capped.budget, Some(Budget { max_list_cost_micros: 2_000 }));
    // It spends 1500 micro-dollars.
    let claim = s.claim_run(&worker("w", "h"), terms(5_000)).await.unwrap().unwrap();
    let start = NewEvent::new(EventPayload::ModelRequestStarted {});
    let usage = Usage { input_tokens: 1, list_cost_micros: 1_500, ..Usage::default() };
    let end = NewEvent::new(EventPayload::ModelRequestEnded { start_id: start.id.clone(), is_error: false, usage });
    let mut events = vec![start, end];
    events.push(NewEvent::new(EventPayload::TurnEnded { stop: StopReason::EndTurn }));
    s.settle(&claim.fence, Settlement { events, outcome: RunOutcome::Completed, bindings: vec![] }).await.unwrap();

    let lower = SessionPatch { budget: Some(Some(Budget { max_list_cost_micros: 1_500 })), ..SessionPatch::default() };
    let refused = s.update_session(&capped.id, lower).await.unwrap_err();
    assert!(matches!(guard(refused), Guard::BudgetNotRaised { spent_micros: 1_500, .. }), "at what it spent");
    let raise = SessionPatch { budget: Some(Some(Budget { max_list_cost_micros: 9_000 })), ..SessionPatch::default() };
    let raised = s.update_session(&capped.id, raise).await.unwrap();
    assert_eq!(raised.budget, Some(Budget { max_list_cost_micros: 9_000 }));
    let removed = s.update_session(&capped.id, SessionPatch { budget: Some(None), ..SessionPatch::default() }).await;
    assert_eq!(removed.unwrap().budget, None);
    let refused = s.update_session(&capped.id, add).await.unwrap_err();
    assert!(matches!(guard(refused), Guard::BudgetCreateOnly(_)), "a removed budget cannot come back");

    let changes: Vec<_> = s
        .events_after(&capped.id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.payload {
            EventPayload::SessionUpdated { budget, .. } => budget,
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        vec![BudgetChange::Set { budget: Budget { max_list_cost_micros: 9_000 } }, BudgetChange::Removed],
        "each change is recorded"
    );
}
