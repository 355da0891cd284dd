//! The event log.

use std::collections::BTreeSet;
use std::sync::Arc;

use gateway_core::event::EventKind;
use gateway_core::{EventId, Timestamp};

use super::{Harness, agent_text, msg, session, session_with, terms, worker};
use crate::{AdmissionWrites, Commit, EventFilter, Order, PageRequest, TimeRange};

pub async fn seqs_increase_without_gap_under_concurrency(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session(&s).await;
    // Inputs from several clients at once, while a worker commits output.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = Arc::clone(&s);
        let id = sess.id.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..5 {
                s.submit_inputs(&id, vec![msg(&format!("{i}/{j}")), msg("more")], AdmissionWrites::default())
                    .await
                    .unwrap();
            }
        }));
    }
    let submitters_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let claimer = {
        let s = Arc::clone(&s);
        let done = Arc::clone(&submitters_done);
        tokio::spawn(async move {
            let mut runs = 0;
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                match s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap() {
                    Some(c) => {
                        s.commit(
                            &c.fence,
                            Commit { events: vec![agent_text("out")], environment: None, bindings: vec![] },
                        )
                        .await
                        .unwrap();
                        s.settle(
                            &c.fence,
                            crate::Settlement {
                                events: vec![],
                                outcome: crate::RunOutcome::Completed,
                                bindings: vec![],
                            },
                        )
                        .await
                        .unwrap();
                        runs += 1;
                    }
                    None if finished => return runs,
                    None => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
                }
            }
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    submitters_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let runs = claimer.await.unwrap();
    assert!(runs >= 1);
    let log = s.events_after(&sess.id, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "seqs are 1..n with no gap and no duplicate");
    assert_eq!(log.iter().filter(|e| e.kind() == EventKind::UserMessage).count(), 80);
    assert_eq!(log.iter().filter(|e| e.kind() == EventKind::AgentMessage).count(), runs);
    let ids: BTreeSet<&EventId> = log.iter().map(|e| &e.id).collect();
    assert_eq!(ids.len(), log.len());
    assert_eq!(s.get_session(&sess.id).await.unwrap().last_seq, log.len() as u64);
    for w in log.windows(2) {
        assert!(w[0].created_at <= w[1].created_at, "commit times follow seq order");
    }
}

pub async fn lists_filter_by_kind_and_time_and_page_by_seq(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("one")]).await;
    let c = s.claim_run(&worker("w", "h"), terms(10_000)).await.unwrap().unwrap();
    s.commit(&c.fence, Commit { events: vec![agent_text("a"), agent_text("b")], environment: None, bindings: vec![] })
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.commit(&c.fence, Commit { events: vec![agent_text("c")], environment: None, bindings: vec![] }).await.unwrap();

    // The log: the message (1), the turn's start the claim committed (2), a, b (3, 4), c (5).
    let all = EventFilter::default();
    let page = s.list_events(&sess.id, &all, &PageRequest::first(3, Order::Asc)).await.unwrap();
    assert_eq!(page.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    let page2 = s
        .list_events(&sess.id, &all, &PageRequest { cursor: page.next.clone(), ..PageRequest::first(3, Order::Asc) })
        .await
        .unwrap();
    assert_eq!(page2.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
    assert!(page2.next.is_none());

    let desc = s.list_events(&sess.id, &all, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(desc.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![5, 4, 3, 2, 1]);

    let agent_only = EventFilter { kinds: vec![EventKind::AgentMessage], created: TimeRange::default() };
    let got = s.list_events(&sess.id, &agent_only, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4, 5]);

    let last = desc.items[0].created_at;
    let late = EventFilter { kinds: vec![], created: TimeRange { gte: Some(last), ..Default::default() } };
    let got = s.list_events(&sess.id, &late, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![5]);
    let early = EventFilter { kinds: vec![], created: TimeRange { lt: Some(last), ..Default::default() } };
    let got = s.list_events(&sess.id, &early, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    let none = EventFilter {
        kinds: vec![],
        created: TimeRange { gt: Some(Timestamp(last.0 + 60_000)), ..Default::default() },
    };
    assert!(s.list_events(&sess.id, &none, &PageRequest::first(10, Order::Asc)).await.unwrap().items.is_empty());
}

pub async fn events_after_and_find_by_id(h: &dyn Harness) {
    let s = h.fresh().await;
    let sess = session_with(&s, vec![msg("a"), msg("b"), msg("c")]).await;
    let log = s.events_after(&sess.id, 1, 10).await.unwrap();
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.events_after(&sess.id, 0, 1).await.unwrap().len(), 1, "limit is honoured");
    let found = s.find_event(&sess.id, &log[0].id).await.unwrap().unwrap();
    assert_eq!(found, log[0]);
    assert!(s.find_event(&sess.id, &EventId::new()).await.unwrap().is_none());
    let other = session(&s).await;
    assert!(s.find_event(&other.id, &log[0].id).await.unwrap().is_none(), "ids are looked up within their session");
}
