//! Agents and environments.

use std::sync::Arc;

use gateway_core::Metadata;

use super::{Harness, agent_spec, env_spec, session};
use crate::{AgentFilter, EnvironmentFilter, Guard, Order, PageRequest, StoreError};

pub async fn agents_are_versioned(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = s.create_agent(agent_spec("first")).await.unwrap();
    assert_eq!(a.version, 1);
    let mut spec = a.spec.clone();
    spec.system = Some("v2".into());
    let b = s.update_agent(&a.id, 1, spec).await.unwrap();
    assert_eq!(b.version, 2);
    assert_eq!(b.created_at, a.created_at);
    assert_eq!(s.get_agent(&a.id, None).await.unwrap().spec.system.as_deref(), Some("v2"));
    assert_eq!(s.get_agent(&a.id, Some(1)).await.unwrap().spec.system.as_deref(), Some("be brief"));
    assert!(matches!(s.get_agent(&a.id, Some(3)).await, Err(StoreError::NotFound { .. })));

    match s.update_agent(&a.id, 1, agent_spec("stale")).await {
        Err(StoreError::StaleVersion { current: 2, expected: 1, .. }) => {}
        other => panic!("expected StaleVersion, got {other:?}"),
    }
    let versions = s.list_agent_versions(&a.id, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(versions.items.iter().map(|v| v.version).collect::<Vec<_>>(), vec![2, 1]);
    let page = s.list_agent_versions(&a.id, &PageRequest::first(1, Order::Desc)).await.unwrap();
    assert_eq!(page.items[0].version, 2);
    let next = PageRequest { cursor: page.next.clone(), ..PageRequest::first(1, Order::Desc) };
    assert_eq!(s.list_agent_versions(&a.id, &next).await.unwrap().items[0].version, 1);
}

pub async fn concurrent_updates_from_one_base_have_one_winner(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = s.create_agent(agent_spec("race")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = Arc::clone(&s);
        let id = a.id.clone();
        tasks.push(tokio::spawn(async move { s.update_agent(&id, 1, agent_spec(&format!("w{i}"))).await }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(agent) => {
                assert_eq!(agent.version, 2);
                ok += 1;
            }
            Err(StoreError::StaleVersion { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(ok, 1, "exactly one update from base 1 may win");
    assert_eq!(s.get_agent(&a.id, None).await.unwrap().version, 2);
}

pub async fn archived_agents_reject_updates(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = s.create_agent(agent_spec("old")).await.unwrap();
    let archived = s.archive_agent(&a.id).await.unwrap();
    assert!(archived.archived_at.is_some());
    assert!(matches!(s.update_agent(&a.id, 1, agent_spec("x")).await, Err(StoreError::Guard(Guard::AgentArchived(_)))));
}

pub async fn agent_lists_paginate_and_filter(h: &dyn Harness) {
    let s = h.fresh().await;
    let mut ids = Vec::new();
    for n in ["a", "b", "c"] {
        ids.push(s.create_agent(agent_spec(n)).await.unwrap().id);
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let all = AgentFilter::default();
    let mut seen = Vec::new();
    let mut req = PageRequest::first(1, Order::Asc);
    loop {
        let page = s.list_agents(&all, &req).await.unwrap();
        assert!(page.items.len() <= 1);
        seen.extend(page.items.iter().map(|a| a.id.clone()));
        match page.next {
            Some(c) => req.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ids, "limit=1 pages walk every agent once, oldest first");

    let desc = s.list_agents(&all, &PageRequest::first(2, Order::Desc)).await.unwrap();
    assert_eq!(desc.items.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), vec![ids[2].clone(), ids[1].clone()]);
    assert!(desc.prev.is_none());
    let second = s
        .list_agents(&all, &PageRequest { cursor: desc.next.clone(), ..PageRequest::first(2, Order::Desc) })
        .await
        .unwrap();
    assert_eq!(second.items.len(), 1);
    let back = s
        .list_agents(&all, &PageRequest { cursor: second.prev.clone(), ..PageRequest::first(2, Order::Desc) })
        .await
        .unwrap();
    assert_eq!(back.items.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), vec![ids[2].clone(), ids[1].clone()]);

    s.archive_agent(&ids[0]).await.unwrap();
    let live = s.list_agents(&all, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(live.items.len(), 2);
    let with = AgentFilter { include_archived: true, ..Default::default() };
    assert_eq!(s.list_agents(&with, &PageRequest::first(10, Order::Asc)).await.unwrap().items.len(), 3);

    let b = s.get_agent(&ids[1], None).await.unwrap();
    let mut since = AgentFilter { include_archived: true, ..Default::default() };
    since.created.gte = Some(b.created_at);
    let got = s.list_agents(&since, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), vec![ids[1].clone(), ids[2].clone()]);
    since.created.gte = None;
    since.created.lt = Some(b.created_at);
    let got = s.list_agents(&since, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(got.items.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), vec![ids[0].clone()]);
}

pub async fn environments_crud_and_delete_guard(h: &dyn Harness) {
    let s = h.fresh().await;
    let e = s.create_environment(env_spec("env")).await.unwrap();
    let mut spec = e.spec.clone();
    spec.metadata = Metadata::from([("k".to_owned(), "v".to_owned())]);
    let u = s.update_environment(&e.id, spec).await.unwrap();
    assert_eq!(u.spec.metadata.get("k").map(String::as_str), Some("v"));
    assert!(u.updated_at >= e.updated_at);

    let sess = session(&s).await;
    // The fixture made its own environment; delete it while referenced.
    let referenced = sess.environment_id.clone();
    assert!(matches!(s.delete_environment(&referenced).await, Err(StoreError::Guard(Guard::EnvironmentInUse(_)))));
    s.delete_session(&sess.id).await.unwrap();
    s.delete_environment(&referenced).await.unwrap();
    assert!(matches!(s.get_environment(&referenced).await, Err(StoreError::NotFound { .. })));

    let archived = s.archive_environment(&e.id).await.unwrap();
    assert!(archived.archived_at.is_some());
    let live = s.list_environments(&EnvironmentFilter::default(), &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert!(live.items.is_empty(), "archived and deleted environments are hidden");
    let all = s
        .list_environments(&EnvironmentFilter { include_archived: true }, &PageRequest::first(10, Order::Asc))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1, "deleted environments stay hidden");
}

pub async fn api_keys_are_found_by_hash_until_revoked(h: &dyn Harness) {
    let s = h.fresh().await;
    assert_eq!(s.count_api_keys().await.unwrap(), 0);
    let k = s.create_api_key("ci", "ab12").await.unwrap();
    s.create_api_key("other", "cd34").await.unwrap();
    assert_eq!(s.count_api_keys().await.unwrap(), 2);
    assert_eq!(s.find_api_key("ab12").await.unwrap().map(|f| f.id), Some(k.id.clone()));
    assert!(s.find_api_key("nope").await.unwrap().is_none());
    assert!(s.create_api_key("dup", "ab12").await.is_err(), "hashes are unique");
    assert!(s.revoke_api_key(&k.id).await.unwrap());
    assert!(!s.revoke_api_key(&k.id).await.unwrap(), "revoking twice changes nothing");
    assert!(s.find_api_key("ab12").await.unwrap().is_none(), "a revoked key no longer authenticates");
    assert_eq!(s.count_api_keys().await.unwrap(), 1);
    let all = s.list_api_keys().await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().any(|a| a.id == k.id && a.revoked_at.is_some()));
}
