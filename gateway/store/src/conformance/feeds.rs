//! The feed (`crate::Feeds`): what a commit feeds to whom, and settlements that write all or
//! nothing, once.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::SessionId;
use gateway_core::event::Event;

use super::{Harness, msg, session};
use crate::{
    AdmissionWrites, DeliveryClaim, DocumentWrite, FeedSettlement, Guard, NewDelivery, Store, StoreError, Subscribe,
};

fn subscribe(pairs: &[(&str, &str)]) -> AdmissionWrites {
    AdmissionWrites {
        subscriptions: pairs.iter().map(|(c, k)| Subscribe { channel: (*c).into(), key: (*k).into() }).collect(),
        ..AdmissionWrites::default()
    }
}

async fn say(s: &Arc<dyn Store>, id: &SessionId, text: &str, writes: AdmissionWrites) -> Vec<Event> {
    s.submit_inputs(id, vec![msg(text)], writes).await.unwrap()
}

fn delivery(e: &Event) -> NewDelivery {
    NewDelivery {
        topic: format!("feed:{}", e.session_id),
        url: "https://example.com/hook".into(),
        headers: Default::default(),
        body: e.id.to_string(),
    }
}

async fn queued(s: &Arc<dyn Store>) -> Vec<String> {
    let got = s
        .claim_deliveries(DeliveryClaim { owner: "w", topics: "feed:", limit: 100, lease: Duration::from_secs(30) })
        .await
        .unwrap();
    got.into_iter().map(|d| d.body).collect()
}

/// A subscription written with an admission feeds that admission's events and every later
/// event of its session to its channel, once per channel, in seq order; a settlement queues
/// their deliveries once, and settling the same rows again writes nothing.
pub async fn subscribed_sessions_are_fed_to_each_subscribed_channel_once(h: &dyn Harness) {
    let s = h.fresh().await;
    let (a, b) = (session(&s).await, session(&s).await);
    let mut sent = say(&s, &a.id, "first", subscribe(&[("one", "k1"), ("two", "k2")])).await;
    say(&s, &b.id, "not followed", AdmissionWrites::default()).await;
    sent.extend(say(&s, &a.id, "second", AdmissionWrites::default()).await);
    let ids = |evs: &[Event]| evs.iter().map(|e| e.id.to_string()).collect::<Vec<_>>();

    let one = s.take_feed("one", 100).await.unwrap();
    let fed: Vec<Event> = one.fed.iter().map(|f| f.event.clone()).collect();
    assert_eq!(ids(&fed), ids(&sent), "the subscribed session's events, in order, nothing of the other");
    assert_eq!(one.keys.len(), 1);
    assert_eq!((one.keys[0].key.as_str(), one.keys[0].after_seq, &one.keys[0].session_id), ("k1", 0, &a.id));
    let two = s.take_feed("two", 100).await.unwrap();
    assert_eq!(two.fed.iter().map(|f| f.event.id.to_string()).collect::<Vec<_>>(), ids(&sent), "each channel its own");
    assert!(s.take_feed(crate::LIFECYCLE_FEED, 100).await.unwrap().fed.is_empty(), "the lifecycle feed is off");

    // Bounded takes start from the oldest row.
    let first = s.take_feed("one", 1).await.unwrap();
    assert_eq!(first.fed, one.fed[..1]);

    let last = sent.last().unwrap().seq;
    let settle = FeedSettlement {
        taken: one.fed.iter().map(|f| f.position).collect(),
        deliveries: fed.iter().map(delivery).collect(),
        advanced: vec![("k1".into(), last)],
        ..FeedSettlement::default()
    };
    assert!(s.settle_feed("one", settle.clone()).await.unwrap());
    assert!(!s.settle_feed("one", settle).await.unwrap(), "settled once: the second settlement writes nothing");
    assert_eq!(queued(&s).await.len(), 1, "one topic, made one at a time: the first is due");
    assert!(s.take_feed("one", 100).await.unwrap().fed.is_empty(), "nothing left to feed");
    let two_after = s.take_feed("two", 100).await.unwrap();
    assert_eq!(two_after.fed, two.fed, "another channel's rows are its own");

    let later = say(&s, &a.id, "third", AdmissionWrites::default()).await;
    let again = s.take_feed("one", 100).await.unwrap();
    assert_eq!(again.fed.iter().map(|f| f.event.id.clone()).collect::<Vec<_>>(), [later[0].id.clone()]);
    assert_eq!(again.keys[0].after_seq, last, "the key's progress as settled");
}

/// A settlement whose document write conflicts writes nothing: its rows stay fed, no
/// delivery is queued, no key moves.
pub async fn a_settlement_is_all_or_nothing(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = session(&s).await;
    s.put_document("ns", "state", &serde_json::json!({"v": 1}), None).await.unwrap();
    let sent = say(&s, &a.id, "hello", subscribe(&[("one", "k1")])).await;
    let taken = s.take_feed("one", 10).await.unwrap();
    assert_eq!(taken.fed.len(), sent.len());
    let stale = DocumentWrite {
        namespace: "ns".into(),
        key: "state".into(),
        body: serde_json::json!({"v": 2}),
        expected: Some(7),
    };
    let settle = FeedSettlement {
        taken: taken.fed.iter().map(|f| f.position).collect(),
        deliveries: sent.iter().map(delivery).collect(),
        documents: vec![stale],
        advanced: vec![("k1".into(), sent[0].seq)],
        ended: vec![],
    };
    let refused = s.settle_feed("one", settle.clone()).await.unwrap_err();
    assert!(matches!(refused, StoreError::Guard(Guard::DocumentConflict { .. })), "{refused:?}");
    assert!(queued(&s).await.is_empty(), "no delivery queued");
    let again = s.take_feed("one", 10).await.unwrap();
    assert_eq!(again, taken, "rows and progress as they were");
    assert_eq!(s.get_document("ns", "state").await.unwrap().unwrap().body, serde_json::json!({"v": 1}));

    let current = s.get_document("ns", "state").await.unwrap().unwrap().version;
    let fixed = FeedSettlement {
        documents: vec![DocumentWrite { expected: Some(current), ..settle.documents[0].clone() }],
        ..settle
    };
    assert!(s.settle_feed("one", fixed).await.unwrap());
    assert_eq!(queued(&s).await.len(), 1);
    assert_eq!(s.get_document("ns", "state").await.unwrap().unwrap().body, serde_json::json!({"v": 2}));
}

/// An ended key's subscription is gone: its session's later events are fed to the channels
/// still subscribed, and to no channel once none is. A session nobody subscribed to is fed to
/// no channel.
pub async fn an_ended_key_and_an_unsubscribed_session_are_fed_nothing(h: &dyn Harness) {
    let s = h.fresh().await;
    let (a, b) = (session(&s).await, session(&s).await);
    say(&s, &a.id, "hello", subscribe(&[("one", "k1"), ("two", "k2")])).await;
    say(&s, &b.id, "unfollowed", AdmissionWrites::default()).await;
    for channel in ["one", "two"] {
        let taken = s.take_feed(channel, 10).await.unwrap();
        let key = taken.keys[0].key.clone();
        let settle = FeedSettlement {
            taken: taken.fed.iter().map(|f| f.position).collect(),
            ended: if channel == "one" { vec![key] } else { vec![] },
            ..FeedSettlement::default()
        };
        assert!(s.settle_feed(channel, settle).await.unwrap());
    }
    let later = say(&s, &a.id, "more", AdmissionWrites::default()).await;
    say(&s, &b.id, "still unfollowed", AdmissionWrites::default()).await;
    assert!(s.take_feed("one", 10).await.unwrap().fed.is_empty(), "an ended key's channel is fed nothing more");
    let two = s.take_feed("two", 10).await.unwrap();
    assert_eq!(two.fed.iter().map(|f| f.event.id.clone()).collect::<Vec<_>>(), [later[0].id.clone()]);
    for f in &two.fed {
        assert_eq!(f.event.session_id, a.id, "the unsubscribed session is never fed");
    }
}

/// A key that follows a session later is fed what commits after it, nothing before; following
/// again keeps the key's progress; a session that does not exist cannot be followed.
pub async fn a_followed_session_is_fed_from_its_next_event(h: &dyn Harness) {
    let s = h.fresh().await;
    let a = session(&s).await;
    let before = say(&s, &a.id, "before", AdmissionWrites::default()).await;
    assert!(s.follow("one", &a.id, "k1").await.unwrap());
    assert!(s.take_feed("one", 10).await.unwrap().fed.is_empty(), "what committed before is not fed");

    let after = say(&s, &a.id, "after", AdmissionWrites::default()).await;
    assert!(s.follow("one", &a.id, "k1").await.unwrap(), "following again is allowed");
    let taken = s.take_feed("one", 10).await.unwrap();
    assert_eq!(taken.fed.iter().map(|f| f.event.id.clone()).collect::<Vec<_>>(), [after[0].id.clone()]);
    let tip = before.last().unwrap().seq;
    assert_eq!(taken.keys.len(), 1);
    assert_eq!((taken.keys[0].key.as_str(), taken.keys[0].after_seq), ("k1", tip), "fed from the tip it followed at");

    assert!(!s.follow("one", &SessionId::new(), "k2").await.unwrap(), "no such session");
    assert!(s.take_feed("one", 10).await.unwrap().keys.iter().all(|k| k.key == "k1"), "and no subscription written");
}
