//! The self-hosted work queue and environment keys.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::BackendRef;
use gateway_core::environment::{ConnectionStatus, EnvironmentConfig};
use gateway_core::event::{Event, EventPayload};
use gateway_core::placement::{LocalInputs, place};
use gateway_core::session::{Session, SessionSnapshot};

use super::Harness;
use super::{agent_spec, env_spec, new_session, placement_offer};
use crate::{
    Beat, DeliveryClaim, EventFilter, Guard, Order, PageRequest, Poll, Pollers, Stop, Store, StoreError, WorkState,
};

const LEASE: Duration = Duration::from_secs(30);
const RECLAIM: Duration = Duration::from_secs(5);
const POLLERS: Pollers = Pollers { window: Duration::from_secs(30), max_per_environment: 100 };

async fn self_hosted_session(store: &Arc<dyn Store>) -> Session {
    let agent = store.create_agent(agent_spec("a")).await.unwrap();
    let mut spec = env_spec("self");
    spec.config = EnvironmentConfig::SelfHosted;
    let env = store.create_environment(spec).await.unwrap();
    let requirements =
        place(&BackendRef::Native, &env.spec.config, &LocalInputs::default(), &placement_offer()).unwrap();
    let snapshot =
        SessionSnapshot { agent, requirements, resources: vec![], vault_ids: vec![], client_tool_servers: vec![] };
    store.create_session(new_session(env.id, snapshot, vec![])).await.unwrap().0
}

async fn connection_events(store: &Arc<dyn Store>, s: &Session) -> Vec<Event> {
    let filter = EventFilter { kinds: vec![], created: Default::default() };
    let all = store.list_events(&s.id, &filter, &PageRequest::first(100, Order::Asc)).await.unwrap().items;
    all.into_iter()
        .filter(|e| {
            matches!(e.payload, EventPayload::EnvironmentConnection { .. } | EventPayload::ConnectionRequested { .. })
        })
        .collect()
}

fn statuses(events: &[Event]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match &e.payload {
            EventPayload::EnvironmentConnection { status, .. } => status.as_str(),
            _ => "requested",
        })
        .collect()
}

/// Asking, polling, acknowledging, beating and stopping: every connection change is an event
/// and the session's `connection`, and one live item per session.
pub async fn work_items_carry_a_sessions_connection(h: &dyn Harness) {
    let store = h.fresh().await;
    let s = self_hosted_session(&store).await;
    let env = s.environment_id.clone();
    assert_eq!(
        store.poll_work(&env, Poll { worker: Some("w1"), reclaim_after: RECLAIM, pollers: POLLERS }).await.unwrap(),
        None,
        "nothing asked for yet"
    );

    let asked = store.request_connection(&s.id).await.unwrap();
    assert_eq!(asked.state, WorkState::Queued);
    let again = store.request_connection(&s.id).await.unwrap();
    assert_eq!(again.id, asked.id, "one live item per session");
    assert_eq!(statuses(&connection_events(&store, &s).await), ["pending", "requested", "requested"]);
    assert_eq!(store.get_session(&s.id).await.unwrap().connection, Some(ConnectionStatus::Pending));

    let stats = store.work_stats(&env, Duration::from_secs(30)).await.unwrap();
    assert_eq!((stats.depth, stats.pending), (1, 0));
    let polled = store
        .poll_work(&env, Poll { worker: Some("w1"), reclaim_after: RECLAIM, pollers: POLLERS })
        .await
        .unwrap()
        .expect("the queued item");
    assert_eq!(polled.id, asked.id);
    assert_eq!(
        store.poll_work(&env, Poll { worker: Some("w2"), reclaim_after: RECLAIM, pollers: POLLERS }).await.unwrap(),
        None,
        "handed out once"
    );
    let stats = store.work_stats(&env, Duration::from_secs(30)).await.unwrap();
    assert_eq!((stats.depth, stats.pending, stats.workers_polling), (0, 1, 2));
    // Not acknowledged: handed out again once the reclaim time has passed.
    let redelivered = store
        .poll_work(&env, Poll { worker: Some("w2"), reclaim_after: Duration::ZERO, pollers: POLLERS })
        .await
        .unwrap();
    assert_eq!(redelivered.map(|w| w.id), Some(asked.id.clone()));

    let acked = store.ack_work(&env, &polled.id, LEASE).await.unwrap();
    assert_eq!(acked.state, WorkState::Starting);
    assert!(acked.acknowledged_at.is_some());
    let err = store.ack_work(&env, &polled.id, LEASE).await.unwrap_err();
    assert!(matches!(err, StoreError::Guard(Guard::WorkState { .. })), "{err}");
    assert_eq!(store.get_session(&s.id).await.unwrap().connection, Some(ConnectionStatus::Connected));
    let before = connection_events(&store, &s).await.len();
    let held = store.request_connection(&s.id).await.unwrap();
    assert_eq!(held.state, WorkState::Starting);
    assert_eq!(connection_events(&store, &s).await.len(), before, "a held item needs no request: nothing written");

    // Heartbeats: the first presents NO_HEARTBEAT, each later one the value the last returned.
    let Beat::Extended { item: first, .. } =
        store.heartbeat_work(&env, &polled.id, "NO_HEARTBEAT", LEASE).await.unwrap()
    else {
        panic!("the first beat extends the lease")
    };
    assert_eq!(first.state, WorkState::Active);
    let token = first.heartbeat.clone().expect("a beat leaves a value");
    assert!(!token.is_empty());
    let stale = store.heartbeat_work(&env, &polled.id, "NO_HEARTBEAT", LEASE).await.unwrap();
    assert!(matches!(stale, Beat::Mismatch { .. }), "a second first beat is another executor's");
    let Beat::Extended { item: second, .. } = store.heartbeat_work(&env, &polled.id, &token, LEASE).await.unwrap()
    else {
        panic!("the right value extends the lease")
    };
    assert_ne!(second.heartbeat, first.heartbeat, "each beat leaves a new value, even in the same millisecond");
    assert!(matches!(store.heartbeat_work(&env, &polled.id, &token, LEASE).await.unwrap(), Beat::Mismatch { .. }));

    // A graceful stop: `stopping` (still held), then the executor's force stop ends it.
    let Stop::Done { item, disconnected } = store.stop_work(&env, &polled.id, false).await.unwrap() else {
        panic!("stoppable")
    };
    assert_eq!((item.state, disconnected), (WorkState::Stopping, false));
    let ending = store.heartbeat_work(&env, &polled.id, "anything", LEASE).await.unwrap();
    assert!(matches!(ending, Beat::Ending { ref item } if item.state == WorkState::Stopping), "{ending:?}");
    let Stop::Done { item, disconnected } = store.stop_work(&env, &polled.id, true).await.unwrap() else {
        panic!("stoppable")
    };
    assert_eq!((item.state, disconnected), (WorkState::Stopped, true));
    assert!(item.stopped_at.is_some());
    assert!(matches!(store.stop_work(&env, &polled.id, true).await.unwrap(), Stop::AlreadyStopped { .. }));
    assert_eq!(store.get_session(&s.id).await.unwrap().connection, Some(ConnectionStatus::Disconnected));
    assert_eq!(
        statuses(&connection_events(&store, &s).await),
        ["pending", "requested", "requested", "connected", "disconnected"]
    );

    // The next request queues a new item.
    let next = store.request_connection(&s.id).await.unwrap();
    assert_ne!(next.id, polled.id);
    let listed = store.list_work(&env, &PageRequest::first(10, Order::Desc)).await.unwrap().items;
    assert_eq!(listed.iter().map(|w| &w.id).collect::<Vec<_>>(), [&next.id, &polled.id]);
}

/// Giving up on a queued item fails the connection and leaves nothing to poll; giving up on a
/// held one changes nothing. A lapsed lease disconnects; a deleted session's item is ended.
pub async fn unanswered_requests_fail_and_lapsed_leases_disconnect(h: &dyn Harness) {
    let store = h.fresh().await;
    let s = self_hosted_session(&store).await;
    let env = s.environment_id.clone();
    store.request_connection(&s.id).await.unwrap();
    assert!(store.give_up_connection(&s.id, "nobody came").await.unwrap());
    assert_eq!(
        store.poll_work(&env, Poll { worker: None, reclaim_after: RECLAIM, pollers: POLLERS }).await.unwrap(),
        None,
        "a late executor finds nothing"
    );
    let events = connection_events(&store, &s).await;
    assert!(matches!(
        &events.last().unwrap().payload,
        EventPayload::EnvironmentConnection { status: ConnectionStatus::Failed, error: Some(e), .. } if e == "nobody came"
    ));
    assert_eq!(store.get_session(&s.id).await.unwrap().connection, Some(ConnectionStatus::Failed));

    // Held in time: giving up is refused.
    let item = store.request_connection(&s.id).await.unwrap();
    store.poll_work(&env, Poll { worker: None, reclaim_after: RECLAIM, pollers: POLLERS }).await.unwrap().unwrap();
    store.ack_work(&env, &item.id, Duration::from_millis(200)).await.unwrap();
    assert!(!store.give_up_connection(&s.id, "late").await.unwrap());
    assert_eq!(store.expire_work().await.unwrap(), vec![], "the lease still runs");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.expire_work().await.unwrap(), vec![s.id.clone()]);
    assert_eq!(store.get_work(&env, &item.id).await.unwrap().state, WorkState::Stopped);
    assert_eq!(store.get_session(&s.id).await.unwrap().connection, Some(ConnectionStatus::Disconnected));
    assert!(matches!(store.heartbeat_work(&env, &item.id, "x", LEASE).await.unwrap(), Beat::Ending { .. }));

    // Deleting the session ends its work item.
    let item = store.request_connection(&s.id).await.unwrap();
    store.delete_session(&s.id).await.unwrap();
    assert_eq!(store.get_work(&env, &item.id).await.unwrap().state, WorkState::Stopped);
    assert_eq!(
        store.poll_work(&env, Poll { worker: None, reclaim_after: RECLAIM, pollers: POLLERS }).await.unwrap(),
        None
    );
}

/// Two stores polling one queue hand each item to one of them.
pub async fn racing_polls_take_each_item_once(h: &dyn Harness) {
    let a = h.fresh().await;
    let b = h.second(&a).await;
    let mut sessions = Vec::new();
    let first = self_hosted_session(&a).await;
    let env = first.environment_id.clone();
    sessions.push(first);
    for _ in 0..5 {
        let snapshot = sessions[0].snapshot.clone();
        sessions.push(a.create_session(new_session(env.clone(), snapshot, vec![])).await.unwrap().0);
    }
    for s in &sessions {
        a.request_connection(&s.id).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 { Arc::clone(&a) } else { Arc::clone(&b) };
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(w) = store
                .poll_work(&env, Poll { worker: None, reclaim_after: Duration::from_secs(60), pollers: POLLERS })
                .await
                .unwrap()
            {
                got.push(w.id);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!((before, all.len()), (6, 6), "every item handed out exactly once");
}

/// Environment keys: found by hash with their environment, never counted or listed as API keys.
pub async fn environment_keys_are_scoped_and_not_api_keys(h: &dyn Harness) {
    let store = h.fresh().await;
    let s = self_hosted_session(&store).await;
    let env = s.environment_id.clone();
    let k = store.create_environment_key(&env, "worker", "ee11").await.unwrap();
    assert_eq!(k.environment_id.as_ref(), Some(&env));
    assert_eq!(store.count_api_keys().await.unwrap(), 0, "an environment key does not close a keyless gateway");
    assert!(store.list_api_keys().await.unwrap().is_empty());
    let found = store.find_api_key("ee11").await.unwrap().unwrap();
    assert_eq!(found.environment_id, Some(env.clone()));
    let api = store.create_api_key("ci", "aa22").await.unwrap();
    assert!(!store.revoke_environment_key(&env, &api.id).await.unwrap(), "an API key is not the environment's");
    assert!(!store.revoke_api_key(&k.id).await.unwrap(), "nor is an environment key an API key");
    assert_eq!(store.list_environment_keys(&env).await.unwrap().len(), 1);
    assert!(store.revoke_environment_key(&env, &k.id).await.unwrap());
    assert!(store.find_api_key("ee11").await.unwrap().is_none());
}

/// Takes up to `limit` rows of the lifecycle feed and settles the deliveries `fan` makes of
/// each: what the webhook channel does.
async fn fan_out(store: &Arc<dyn Store>, fan: impl Fn(&Event) -> Vec<crate::NewDelivery>) -> usize {
    let taken = store.take_feed(crate::LIFECYCLE_FEED, 10).await.unwrap();
    let settlement = crate::FeedSettlement {
        taken: taken.fed.iter().map(|f| f.position).collect(),
        deliveries: taken.fed.iter().flat_map(|f| fan(&f.event)).collect(),
        ..Default::default()
    };
    assert!(store.settle_feed(crate::LIFECYCLE_FEED, settlement).await.unwrap());
    taken.fed.len()
}

/// While the feed is on, a committed lifecycle event becomes the deliveries a fan-out makes
/// of it, once; with it off, nothing is fed.
pub async fn fed_events_become_deliveries_once(h: &dyn Harness) {
    let store = h.fresh().await;
    let s = self_hosted_session(&store).await;
    let fan = |e: &Event| {
        vec![crate::NewDelivery {
            topic: format!("webhook:{}", e.kind().as_str()),
            url: "https://example.com/hook".into(),
            headers: Default::default(),
            body: e.id.to_string(),
        }]
    };
    store.request_connection(&s.id).await.unwrap();
    assert_eq!(fan_out(&store, fan).await, 0, "the feed was off");
    store.set_event_feed(true);
    store.request_connection(&s.id).await.unwrap();
    let requested = connection_events(&store, &s).await.pop().unwrap();
    assert_eq!(fan_out(&store, fan).await, 1);
    assert_eq!(fan_out(&store, fan).await, 0, "fanned out once");
    let other = store
        .claim_deliveries(DeliveryClaim { owner: "w", topics: "a2a:", limit: 10, lease: Duration::from_secs(30) })
        .await
        .unwrap();
    assert!(other.is_empty(), "another consumer's prefix sees none of them");
    let got = store
        .claim_deliveries(DeliveryClaim { owner: "w", topics: "webhook:", limit: 10, lease: Duration::from_secs(30) })
        .await
        .unwrap();
    assert_eq!(got.iter().map(|d| d.body.clone()).collect::<Vec<_>>(), [requested.id.to_string()]);
    store.set_event_feed(false);
}

/// Endpoints: replaced by id keeping their record, disabled by the n-th failure in a row,
/// re-enabled with a fresh count; config endpoints no longer in the file are pruned.
pub async fn webhook_endpoints_disable_after_failures(h: &dyn Harness) {
    use crate::{EndpointOrigin, NewEndpoint};
    let store = h.fresh().await;
    let new = |origin, url: &str| NewEndpoint {
        id: gateway_core::WebhookId::new(),
        origin,
        url: url.into(),
        secret: "sealed".into(),
        event_types: vec!["idle".into()],
        description: None,
    };
    let api = store.put_webhook(new(EndpointOrigin::Api, "https://a.example")).await.unwrap();
    let config = store.put_webhook(new(EndpointOrigin::Config, "https://b.example")).await.unwrap();
    assert!(api.enabled && api.consecutive_failures == 0);
    for _ in 0..2 {
        assert!(store.record_webhook_attempt(&api.spec.id, false, 3).await.unwrap().enabled);
    }
    assert_eq!(
        store.record_webhook_attempt(&api.spec.id, true, 3).await.unwrap().consecutive_failures,
        0,
        "a success resets"
    );
    for _ in 0..2 {
        store.record_webhook_attempt(&api.spec.id, false, 3).await.unwrap();
    }
    let off = store.record_webhook_attempt(&api.spec.id, false, 3).await.unwrap();
    assert!(!off.enabled && off.disabled_at.is_some(), "{off:?}");
    let mut again = new(EndpointOrigin::Api, "https://a2.example");
    again.id = api.spec.id.clone();
    let replaced = store.put_webhook(again).await.unwrap();
    assert_eq!(
        (replaced.spec.url.as_str(), replaced.enabled),
        ("https://a2.example", false),
        "replacing keeps its record"
    );
    let on = store.set_webhook_enabled(&api.spec.id, true).await.unwrap();
    assert!(on.enabled && on.consecutive_failures == 0 && on.disabled_at.is_none());
    store.prune_config_webhooks(&[]).await.unwrap();
    let left: Vec<_> = store.list_webhooks().await.unwrap().into_iter().map(|e| e.spec.id).collect();
    assert_eq!(left, std::slice::from_ref(&api.spec.id), "the config endpoint was pruned: {:?}", config.spec.id);
    assert!(store.delete_webhook(&api.spec.id).await.unwrap());
    assert!(!store.delete_webhook(&api.spec.id).await.unwrap());
}

/// Every distinct `Anthropic-Worker-ID` was a row kept forever (43,490 in 16 s from one key):
/// rows outside the window are pruned, an environment records at most its bound, a worker
/// past it is still served, and `workers_polling` counts only live workers.
pub async fn pollers_are_pruned_outside_their_window_and_bounded_per_environment(h: &dyn Harness) {
    let store = h.fresh().await;
    let s = self_hosted_session(&store).await;
    let other = self_hosted_session(&store).await;
    let env = s.environment_id.clone();
    let window = Duration::from_secs(2);
    let bounds = Pollers { window, max_per_environment: 3 };
    let polling = |env| {
        let store = Arc::clone(&store);
        async move { store.work_stats(&env, window).await.unwrap().workers_polling }
    };
    for w in ["w1", "w2", "w3", "w4", "w5"] {
        assert_eq!(
            store.poll_work(&env, Poll { worker: Some(w), reclaim_after: RECLAIM, pollers: bounds }).await.unwrap(),
            None
        );
    }
    assert_eq!(polling(env.clone()).await, 3, "two workers past the bound are not recorded");
    store.request_connection(&s.id).await.unwrap();
    let served =
        store.poll_work(&env, Poll { worker: Some("w6"), reclaim_after: RECLAIM, pollers: bounds }).await.unwrap();
    assert_eq!(served.map(|w| w.session_id), Some(s.id.clone()), "a worker past the bound is served");
    assert_eq!(polling(env.clone()).await, 3);
    // The bound is per environment.
    store
        .poll_work(&other.environment_id, Poll { worker: Some("w1"), reclaim_after: RECLAIM, pollers: bounds })
        .await
        .unwrap();
    assert_eq!(polling(other.environment_id.clone()).await, 1);

    // Known workers keep their rows fresh; the others lapse and make room.
    tokio::time::sleep(window / 2).await;
    store.poll_work(&env, Poll { worker: Some("w1"), reclaim_after: RECLAIM, pollers: bounds }).await.unwrap();
    tokio::time::sleep(window / 2 + Duration::from_millis(200)).await;
    assert_eq!(polling(env.clone()).await, 1, "only w1 polled within the window");
    for w in ["w7", "w8", "w9"] {
        store.poll_work(&env, Poll { worker: Some(w), reclaim_after: RECLAIM, pollers: bounds }).await.unwrap();
    }
    assert_eq!(polling(env.clone()).await, 3, "w1, w7 and w8: the lapsed rows were pruned, w9 is past the bound");
    // A window as long as the test shows every row the environment still holds.
    let all = store.work_stats(&env, Duration::from_secs(3600)).await.unwrap().workers_polling;
    assert_eq!(all, 3, "lapsed rows are gone, not merely uncounted");
}

/// Endpoints registered through the API are bounded per creating key (a loop of
/// `POST /v1/webhooks` made every delivery wait); deleting one makes room, another key has
/// room of its own, and the operator's config endpoints count against none.
pub async fn webhook_endpoints_are_bounded_per_creating_key(h: &dyn Harness) {
    use crate::{EndpointOrigin, NewEndpoint};
    let store = h.fresh().await;
    let new = |origin, url: &str| NewEndpoint {
        id: gateway_core::WebhookId::new(),
        origin,
        url: url.into(),
        secret: "sealed".into(),
        event_types: vec![],
        description: None,
    };
    store.put_webhook(new(EndpointOrigin::Config, "https://config.example")).await.unwrap();
    let first = store.register_webhook(new(EndpointOrigin::Api, "https://1.example"), "k1", 2).await.unwrap();
    store.register_webhook(new(EndpointOrigin::Api, "https://2.example"), "k1", 2).await.unwrap();
    let refused = store.register_webhook(new(EndpointOrigin::Api, "https://3.example"), "k1", 2).await.unwrap_err();
    assert!(matches!(&refused, StoreError::Guard(Guard::WebhookLimit { count: 2, limit: 2, .. })), "{refused:?}");
    assert_eq!(store.list_webhooks().await.unwrap().len(), 3, "nothing was written");
    store.register_webhook(new(EndpointOrigin::Api, "https://k2.example"), "k2", 2).await.unwrap();
    assert!(store.delete_webhook(&first.spec.id).await.unwrap());
    store.register_webhook(new(EndpointOrigin::Api, "https://3.example"), "k1", 2).await.unwrap();
    assert_eq!(store.list_webhooks().await.unwrap().len(), 4);
}
