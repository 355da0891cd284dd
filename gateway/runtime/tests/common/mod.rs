//! The runtime suite, written once and run on every store configuration, and helpers
//! shared by the runtime's test crates (each uses a subset, hence `dead_code`).
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use gateway_core::Metadata;
use gateway_core::agent::{AgentSpec, BackendRef};
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::environment::{ProviderTier, Provisioning};
use gateway_core::event::{ErrorKind, Event, EventKind, EventPayload, NewEvent, RetryStatus, StopReason};
use gateway_core::placement::{NetworkControl, Offer, ProviderOffer};
use gateway_core::run::RunState;
use gateway_core::session::{Session, SessionStatus};
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{
    AdmissionLimits, AgentSelection, BusyCause, CreateSession, Delivery, Preview, RetryPolicy, RuntimeError,
    SubscribeOptions, WorkerConfig, WorkerIdentity, WorkerPool,
};
use gateway_store::conformance::{Harness, agent_spec, env_spec};
use gateway_store::{Commit, EnvironmentChange, LeaseTerms, Store};

pub fn offer() -> Offer {
    Offer {
        providers: vec![ProviderOffer {
            tier: ProviderTier::new("local"),
            network: NetworkControl::None,
            installs_packages: false,
        }],
        acp_executors: ["agent".to_owned()].into(),
        a2a_remotes: ["remote".to_owned()].into(),
        ..Default::default()
    }
}

/// The gateway of one test: the shipped assembly with the scripted backend as `native`, no
/// Workers of its own (each test starts the pools it needs with [`workers`]).
pub type Rig = TestGateway;

pub async fn rig(store: Arc<dyn Store>) -> Rig {
    rig_with(store, AdmissionLimits::default()).await
}

/// [`rig`] with other admission bounds.
pub async fn rig_with(store: Arc<dyn Store>, limits: AdmissionLimits) -> Rig {
    TestGateway::builder()
        .store(store)
        .scripted()
        .offer(offer())
        .subscription_poll(Duration::from_millis(100))
        .no_workers()
        .admission(limits)
        .build()
        .await
}

/// Waits until `session` is idle after a turn of its own (seq past its first input).
pub async fn idle_after_a_turn(r: &Rig, session: &Session) -> bool {
    wait_for(20, || async {
        let s = r.coordinator.get_session(&session.id).await.unwrap();
        (s.status == SessionStatus::Idle && s.last_seq > 1).then_some(())
    })
    .await
    .is_some()
}

/// A pool's name, host and settings (derefs to the settings a test adjusts).
#[derive(Clone)]
pub struct Pool {
    pub instance: String,
    pub host: String,
    pub config: WorkerConfig,
}

impl std::ops::Deref for Pool {
    type Target = WorkerConfig;
    fn deref(&self) -> &WorkerConfig {
        &self.config
    }
}

impl std::ops::DerefMut for Pool {
    fn deref_mut(&mut self) -> &mut WorkerConfig {
        &mut self.config
    }
}

pub fn config(instance: &str, host: &str) -> Pool {
    let config = WorkerConfig {
        max_turns: 2,
        claim_batch: 16,
        lease: Duration::from_millis(600),
        host_ttl: Duration::from_secs(30),
        poll: Duration::from_millis(100),
        crash_budget: 3,
        retry: RetryPolicy { max_retries: 2, base: Duration::from_millis(20), max: Duration::from_millis(50) },
        shutdown_grace: Duration::from_millis(100),
    };
    Pool { instance: instance.into(), host: host.into(), config }
}

/// Workers of another process on the rig's store, running its backends.
pub fn workers(r: &Rig, pool: Pool) -> WorkerPool {
    let identity =
        WorkerIdentity { instance: pool.instance, host: pool.host, providers: vec![ProviderTier::new("local")] };
    r.workers(identity, pool.config)
}

pub async fn new_session(r: &Rig) -> Session {
    let agent = r.coordinator.create_agent(agent_spec("scripted")).await.unwrap();
    let env = r.coordinator.create_environment(env_spec("env")).await.unwrap();
    let req = CreateSession {
        budget: None,
        agent: AgentSelection { id: agent.id, version: None, overrides: None },
        environment_id: env.id,
        title: None,
        metadata: Metadata::new(),
        resources: vec![],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    r.coordinator.create_session(req).await.unwrap().0
}

pub fn say(text: &str) -> NewEvent {
    NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(text)] })
}

/// Collects deliveries until `done` holds for one (inclusive) or the time runs out.
pub async fn until(
    stream: impl Stream<Item = Result<Delivery, RuntimeError>>,
    secs: u64,
    done: impl Fn(&Delivery) -> bool,
) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut stream = std::pin::pin!(stream);
    let res = tokio::time::timeout(Duration::from_secs(secs), async {
        while let Some(d) = stream.next().await {
            let d = d.expect("subscription item");
            let stop = done(&d);
            out.push(d);
            if stop {
                return;
            }
        }
    })
    .await;
    assert!(res.is_ok(), "timed out after {secs}s; got {:?}", kinds(&events(&out)));
    out
}

pub fn turn_ended(d: &Delivery) -> bool {
    matches!(d, Delivery::Event(e) if e.kind() == EventKind::TurnEnded)
}

pub fn events(ds: &[Delivery]) -> Vec<Event> {
    ds.iter()
        .filter_map(|d| match d {
            Delivery::Event(e) => Some(e.clone()),
            Delivery::Preview(_) => None,
        })
        .collect()
}

pub fn kinds(es: &[Event]) -> Vec<EventKind> {
    es.iter().map(|e| e.kind()).collect()
}

pub fn texts(es: &[Event]) -> Vec<String> {
    es.iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessage { content } => Some(plain_text(content)),
            _ => None,
        })
        .collect()
}

pub fn stop_of(e: &Event) -> Option<StopReason> {
    match &e.payload {
        EventPayload::TurnEnded { stop } => Some(stop.clone()),
        _ => None,
    }
}

pub fn assert_contiguous(es: &[Event], from: u64) {
    let seqs: Vec<u64> = es.iter().map(|e| e.seq).collect();
    let want: Vec<u64> = (from..from + es.len() as u64).collect();
    assert_eq!(seqs, want, "no gap, no duplicate");
}

async fn subscribe(
    r: &Rig,
    s: &Session,
    after_seq: u64,
    previews: bool,
) -> impl Stream<Item = Result<Delivery, RuntimeError>> {
    r.coordinator.subscribe(s, SubscribeOptions { after_seq, previews, poll: None })
}

// ---------------- the suite ----------------

pub async fn a_turn_runs_end_to_end(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let stream = subscribe(&r, &s, 0, false).await;
    let accepted = r.coordinator.submit(&s.id, vec![say("hello")]).await.unwrap();
    assert_eq!(accepted[0].seq, 1, "accepted means committed: the echo carries its seq");
    let got = events(&until(stream, 10, turn_ended).await);
    assert_eq!(
        kinds(&got),
        vec![EventKind::UserMessage, EventKind::TurnStarted, EventKind::AgentMessage, EventKind::TurnEnded]
    );
    assert_eq!(texts(&got), vec!["echo: hello"]);
    assert_eq!(stop_of(&got[3]), Some(StopReason::EndTurn));
    assert!(
        matches!(got[1].payload, EventPayload::TurnStarted { inputs_through: 1 }),
        "the turn names the inputs it answers: {:?}",
        got[1].payload
    );
    assert_contiguous(&got, 1);
    // The settle commits the idle status with the turn end.
    assert_eq!(r.coordinator.get_session(&s.id).await.unwrap().status, SessionStatus::Idle);
    pool.shutdown().await;
}

pub async fn subscriptions_join_mid_turn_without_gap_or_duplicate(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let from_start = subscribe(&r, &s, 0, false).await;
    r.coordinator.submit(&s.id, vec![say("steps 12 25")]).await.unwrap();
    // Join while the turn is committing steps, from a seq in the middle.
    tokio::time::sleep(Duration::from_millis(120)).await;
    let mid = subscribe(&r, &s, 3, false).await;
    let (all, tail) = tokio::join!(until(from_start, 20, turn_ended), until(mid, 20, turn_ended));
    let (all, tail) = (events(&all), events(&tail));
    assert_contiguous(&all, 1);
    assert_contiguous(&tail, 4);
    assert_eq!(&all[3..], &tail[..], "the late subscriber sees exactly the rest");
    assert_eq!(texts(&all).len(), 12);
    pool.shutdown().await;
}

pub async fn subscriptions_see_commits_of_another_store_handle(h: &dyn Harness) {
    let a = rig(h.fresh().await).await;
    let b = rig(h.second(&a.store).await).await;
    let pool = workers(&a, config("a", "h"));
    let s = new_session(&a).await;
    let stream = subscribe(&b, &s, 0, false).await;
    b.coordinator.submit(&s.id, vec![say("steps 5 10")]).await.unwrap();
    let got = events(&until(stream, 20, turn_ended).await);
    assert_contiguous(&got, 1);
    assert_eq!(texts(&got), vec!["step 1/5", "step 2/5", "step 3/5", "step 4/5", "step 5/5"]);
    pool.shutdown().await;
}

/// A subscription opened with a watch taken before the write it follows (as an A2A send
/// follows its task) starts after the events the writer holds and delivers every later one,
/// in order, once: from memory when this process committed them, from the store when hints
/// are off.
pub async fn a_subscription_opened_ahead_of_a_write_delivers_what_follows_it(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let ahead = r.coordinator.watch_ahead(&s.id);
    let accepted = r.coordinator.submit(&s.id, vec![say("steps 3 10")]).await.unwrap();
    let through = accepted.last().expect("the input is committed").seq;
    let options = SubscribeOptions { after_seq: through, previews: false, poll: None };
    let got = events(&until(r.coordinator.subscribe_ahead(ahead, options), 20, turn_ended).await);
    assert_contiguous(&got, through + 1);
    assert_eq!(got[0].kind(), EventKind::TurnStarted, "the first event after the input: {:?}", kinds(&got));
    assert_eq!(texts(&got), vec!["step 1/3", "step 2/3", "step 3/3"]);
    pool.shutdown().await;
}

/// Consumers that stop polling a subscription mid-read (a `select!` that took another branch)
/// and go on to read: more of them than the store has places to read must not wedge every
/// read of the process. (They did: the A2A push feeder did exactly this, and eight feeders
/// held every place while each waited for another.)
pub async fn subscriptions_left_mid_read_hold_no_place_to_read(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let s = new_session(&r).await;
    // Two commits: the last batch in memory does not start at seq 1, so a subscription from
    // the start reads the store.
    r.coordinator.submit(&s.id, vec![say("one")]).await.unwrap();
    r.coordinator.submit(&s.id, vec![say("two")]).await.unwrap();
    let places = h.options().max_connections as usize;
    let mut left = Vec::new();
    let reads = tokio::time::timeout(Duration::from_secs(20), async {
        for _ in 0..places * 4 {
            let mut stream = Box::pin(subscribe(&r, &s, 0, false).await);
            // Polled once, so its first read starts, then not again while this test reads.
            // On a loaded machine that read may already be done when the poll comes: keep
            // what it delivered.
            let early = match futures::poll!(stream.next()) {
                std::task::Poll::Ready(d) => Some(d),
                std::task::Poll::Pending => None,
            };
            left.push((stream, early));
        }
        r.coordinator.get_session(&s.id).await.unwrap()
    })
    .await;
    assert!(reads.is_ok(), "reads waited for places held by {} idle subscriptions", left.len());
    // And the subscriptions themselves still deliver when polled again.
    let (stream, early) = &mut left[0];
    let first = match early.take() {
        Some(d) => d,
        None => tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap(),
    };
    assert!(matches!(&first, Some(Ok(Delivery::Event(e))) if e.seq == 1), "the first delivery was {first:?}");
}

pub async fn an_interrupt_stops_a_running_turn(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let stream = subscribe(&r, &s, 0, false).await;
    r.coordinator.submit(&s.id, vec![say("sleep 60000")]).await.unwrap();
    let mut stream = Box::pin(stream);
    let started =
        until(&mut stream, 10, |d| matches!(d, Delivery::Event(e) if e.kind() == EventKind::TurnStarted)).await;
    assert_eq!(events(&started).len(), 2);
    r.coordinator.interrupt(&s.id).await.unwrap();
    let rest = events(&until(&mut stream, 10, turn_ended).await);
    assert_eq!(kinds(&rest), vec![EventKind::UserInterrupt, EventKind::TurnEnded]);
    assert_eq!(stop_of(&rest[1]), Some(StopReason::Interrupted));
    assert_eq!(r.coordinator.get_session(&s.id).await.unwrap().status, SessionStatus::Idle);
    pool.shutdown().await;
}

pub async fn transient_failures_are_retried_then_exhausted(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let stream = subscribe(&r, &s, 0, false).await;
    r.coordinator.submit(&s.id, vec![say("fail")]).await.unwrap();
    let got = events(&until(stream, 20, turn_ended).await);
    use EventKind::*;
    assert_eq!(
        kinds(&got),
        vec![
            UserMessage,
            TurnStarted,
            SessionError,
            TurnRescheduled,
            TurnStarted,
            SessionError,
            TurnRescheduled,
            TurnStarted,
            SessionError,
            TurnEnded
        ]
    );
    let retry: Vec<RetryStatus> = got
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::SessionError { retry, kind, .. } => {
                assert_eq!(*kind, ErrorKind::ModelOverloaded);
                Some(*retry)
            }
            _ => None,
        })
        .collect();
    assert_eq!(retry, vec![RetryStatus::Retrying, RetryStatus::Retrying, RetryStatus::Exhausted]);
    assert_eq!(stop_of(got.last().unwrap()), Some(StopReason::RetriesExhausted));
    pool.shutdown().await;
}

pub async fn crashes_past_the_budget_end_the_run_indeterminate(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let s = new_session(&r).await;
    r.coordinator.submit(&s.id, vec![say("sleep 60000")]).await.unwrap();
    let run_id = r.store.active_runs(&s.id).await.unwrap()[0].id.clone();
    let mut cfg = config("crashy", "h");
    cfg.crash_budget = 1;
    cfg.max_turns = 1;
    // Each pool claims the run and dies without a trace, twice.
    for expected_crashes in 0..2 {
        let pool = workers(&r, cfg.clone());
        let claimed = wait_for(10, || async {
            let run = r.store.get_run(&run_id).await.unwrap();
            (run.state == RunState::Running && run.crash_count == expected_crashes).then_some(())
        })
        .await;
        assert!(claimed.is_some(), "claim {expected_crashes} happened");
        pool.abort().await;
    }
    let pool = workers(&r, cfg);
    let ended = wait_for(10, || async {
        let run = r.store.get_run(&run_id).await.unwrap();
        run.state.is_final().then_some(run)
    })
    .await
    .expect("the third claim settles the run");
    assert_eq!(ended.state, RunState::Indeterminate);
    let log = r.store.events_after(&s.id, 0, 100).await.unwrap();
    let last_two = &log[log.len() - 2..];
    assert!(matches!(last_two[0].payload, EventPayload::SessionError { kind: ErrorKind::Indeterminate, .. }));
    assert_eq!(stop_of(&last_two[1]), Some(StopReason::Failed));
    assert!(last_two[1].epoch.unwrap() >= 3, "settled through the fenced path of the third claim");
    pool.shutdown().await;
}

/// A claim that died before committing `turn_started` leaves no turn to continue: the
/// reclaiming Worker starts it (A2A tasks and editors wait for that event).
/// A claim commits its turn's start; a claim lost right after it (before any other write)
/// leaves that start for the reclaim, which continues the turn instead of starting another.
pub async fn a_reclaim_continues_the_turn_its_lost_claim_started(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let s = new_session(&r).await;
    r.coordinator.submit(&s.id, vec![say("hello")]).await.unwrap();
    let offer = gateway_core::run::WorkerOffer {
        worker: "dead#0".into(),
        host: "h".into(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    };
    let terms = LeaseTerms { lease: Duration::from_millis(200), host_ttl: Duration::from_secs(30) };
    let lost = r.store.claim_run(&offer, terms).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pool = workers(&r, config("successor", "h"));
    let log = wait_for(10, || async {
        let log = r.store.events_after(&s.id, 0, 100).await.unwrap();
        log.iter().any(|e| stop_of(e).is_some()).then_some(log)
    })
    .await
    .expect("the reclaimed run ends its turn");
    let started: Vec<_> = log.iter().filter(|e| e.kind() == EventKind::TurnStarted).collect();
    assert_eq!(started.len(), 1, "{:?}", log.iter().map(|e| e.kind()).collect::<Vec<_>>());
    assert_eq!(started[0].run_id.as_ref(), Some(&lost.fence.run_id));
    assert_eq!(started[0].epoch, Some(lost.fence.epoch), "started by the lost claim itself");
    let ended = log.iter().find(|e| stop_of(e).is_some()).unwrap();
    assert!(ended.epoch.unwrap() > lost.fence.epoch, "ended by the successor's reclaim");
    pool.shutdown().await;
}

pub async fn graceful_shutdown_releases_the_lease_for_a_successor(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let mut cfg = config("first", "h");
    cfg.lease = Duration::from_secs(60);
    let first = workers(&r, cfg);
    let s = new_session(&r).await;
    r.coordinator.submit(&s.id, vec![say("steps 6 150")]).await.unwrap();
    wait_for(10, || async {
        let log = r.store.events_after(&s.id, 0, 100).await.unwrap();
        (texts(&log).len() >= 2).then_some(())
    })
    .await
    .expect("two steps committed");
    first.shutdown().await;
    let run = r.store.active_runs(&s.id).await.unwrap().remove(0);
    assert_eq!(run.state, RunState::Queued, "released, not left to expire");
    assert_eq!(run.lease_owner, None);
    let mut cfg = config("second", "h");
    cfg.lease = Duration::from_secs(60);
    let second = workers(&r, cfg);
    let log = wait_for(15, || async {
        let log = r.store.events_after(&s.id, 0, 100).await.unwrap();
        log.last().is_some_and(|e| e.kind() == EventKind::TurnEnded).then_some(log)
    })
    .await
    .expect("the successor finishes the turn long before the 60 s lease would expire");
    let steps: Vec<String> = (1..=6).map(|i| format!("step {i}/6")).collect();
    assert_eq!(texts(&log), steps, "every step exactly once across the hand-over");
    second.shutdown().await;
}

pub async fn previews_reach_only_subscribers_that_asked(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let with = subscribe(&r, &s, 0, true).await;
    let without = subscribe(&r, &s, 0, false).await;
    r.coordinator.submit(&s.id, vec![say("preview hello world")]).await.unwrap();
    let (with, without) = tokio::join!(until(with, 10, turn_ended), until(without, 10, turn_ended));
    assert!(without.iter().all(|d| matches!(d, Delivery::Event(_))), "no previews unasked");
    let msg = events(&with).into_iter().find(|e| e.kind() == EventKind::AgentMessage).unwrap();
    let mut saw_start = false;
    let mut text = String::new();
    let mut after_commit = false;
    for d in &with {
        match d {
            Delivery::Preview(Preview::Start { event_id, kind }) => {
                assert_eq!((event_id, *kind), (&msg.id, EventKind::AgentMessage));
                saw_start = true;
            }
            Delivery::Preview(Preview::TextDelta { event_id, text: t, .. }) => {
                assert!(saw_start, "start before deltas");
                assert!(!after_commit, "nothing for an id after its committed event");
                assert_eq!(event_id, &msg.id);
                text.push_str(t);
            }
            Delivery::Preview(Preview::ThoughtDelta { .. }) => panic!("the fake model does not think"),
            Delivery::Event(e) if e.id == msg.id => after_commit = true,
            Delivery::Event(_) => {}
        }
    }
    assert!(saw_start);
    assert_eq!(text, "hello world", "deltas concatenate to the committed text");
    assert_eq!(texts(&[msg]), vec!["hello world"]);
    let stored = r.store.events_after(&s.id, 0, 100).await.unwrap();
    assert_eq!(stored.len(), events(&with).len(), "previews are never stored");
    pool.shutdown().await;
}

pub async fn a_parked_turn_resumes_on_the_answer(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let pool = workers(&r, config("a", "h"));
    let s = new_session(&r).await;
    let stream = subscribe(&r, &s, 0, false).await;
    let mut stream = Box::pin(stream);
    r.coordinator.submit(&s.id, vec![say("ask")]).await.unwrap();
    let first = events(&until(&mut stream, 10, turn_ended).await);
    let tool_use = first.iter().find(|e| e.kind() == EventKind::ToolUse).unwrap().id.clone();
    assert_eq!(stop_of(first.last().unwrap()), Some(StopReason::RequiresAction { event_ids: vec![tool_use.clone()] }));
    let parked = r.coordinator.get_session(&s.id).await.unwrap();
    assert_eq!(parked.status, SessionStatus::Idle);
    assert_eq!(parked.pending_actions.len(), 1);
    let answer =
        NewEvent::new(EventPayload::ToolConfirmation { tool_use_id: tool_use, allow: false, deny_message: None });
    r.coordinator.submit(&s.id, vec![answer]).await.unwrap();
    let second = events(&until(&mut stream, 10, turn_ended).await);
    assert_eq!(
        kinds(&second),
        vec![EventKind::ToolConfirmation, EventKind::TurnStarted, EventKind::AgentMessage, EventKind::TurnEnded]
    );
    assert_eq!(texts(&second), vec!["denied"]);
    pool.shutdown().await;
}

pub async fn a_lost_environment_fails_the_run_instead_of_moving(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let s = new_session(&r).await;
    // A first turn realizes the environment on h1 (done by hand: the scripted backend has no
    // environment), then h1 disappears.
    r.coordinator.submit(&s.id, vec![say("first")]).await.unwrap();
    r.store.heartbeat_host("h1").await.unwrap();
    let w1 = gateway_core::run::WorkerOffer {
        worker: "h1#0".into(),
        host: "h1".into(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    };
    let terms = LeaseTerms { lease: Duration::from_secs(10), host_ttl: Duration::from_secs(30) };
    let c = r.store.claim_run(&w1, terms).await.unwrap().unwrap();
    let realized =
        EnvironmentChange { state: gateway_core::session::EnvironmentState::Realized, host: Some("h1".into()) };
    r.store.commit(&c.fence, Commit { events: vec![], environment: Some(realized), bindings: vec![] }).await.unwrap();
    r.store
        .settle(
            &c.fence,
            gateway_store::Settlement {
                events: vec![],
                outcome: gateway_store::RunOutcome::Completed,
                bindings: vec![],
            },
        )
        .await
        .unwrap();
    let stream = subscribe(&r, &s, r.coordinator.get_session(&s.id).await.unwrap().last_seq, false).await;
    let mut cfg = config("h2", "h2");
    cfg.host_ttl = Duration::from_millis(400);
    let pool = workers(&r, cfg);
    r.coordinator.submit(&s.id, vec![say("second")]).await.unwrap();
    let got = events(&until(stream, 15, turn_ended).await);
    assert!(
        got.iter().any(|e| matches!(e.payload, EventPayload::SessionError { kind: ErrorKind::EnvironmentLost, .. })),
        "typed environment-lost error: {:?}",
        kinds(&got)
    );
    assert!(texts(&got).is_empty(), "the run never executed elsewhere");
    pool.shutdown().await;
}

pub async fn placement_refusals_name_their_rule(h: &dyn Harness) {
    let r = rig(h.fresh().await).await;
    let mut spec: AgentSpec = agent_spec("acp");
    spec.backend = BackendRef::Acp { executor: "agent".into() };
    let agent = r.coordinator.create_agent(spec.clone()).await.unwrap();
    let env = r.coordinator.create_environment(env_spec("deferred")).await.unwrap();
    let req = CreateSession {
        budget: None,
        agent: AgentSelection { id: agent.id.clone(), version: None, overrides: None },
        environment_id: env.id.clone(),
        title: None,
        metadata: Metadata::new(),
        resources: vec![],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    match r.coordinator.create_session(req.clone()).await {
        Err(RuntimeError::Placement(e)) => assert!(e.to_string().contains("ACP + on_tool_use"), "{e}"),
        other => panic!("expected a placement refusal, got {other:?}"),
    }
    let mut eager = env_spec("eager");
    if let gateway_core::environment::EnvironmentConfig::Cloud(c) = &mut eager.config {
        c.provisioning = Provisioning::Eager;
    }
    let eager = r.coordinator.create_environment(eager).await.unwrap();
    let ok = CreateSession { budget: None, environment_id: eager.id, ..req };
    r.coordinator.create_session(ok).await.expect("ACP with eager provisioning is placed");

    // A remote A2A agent with a mounted workspace: refused, never silently run locally.
    spec.backend = BackendRef::A2a { remote: "remote".into() };
    let remote = r.coordinator.create_agent(spec.clone()).await.unwrap();
    let with_mount = CreateSession {
        budget: None,
        agent: AgentSelection { id: remote.id, version: None, overrides: None },
        environment_id: env.id.clone(),
        title: None,
        metadata: Metadata::new(),
        resources: vec![gateway_core::session::ResourceKind::workspace("/tmp", None)],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    match r.coordinator.create_session(with_mount).await {
        Err(RuntimeError::Placement(e)) => assert!(e.to_string().contains("A2A + local inputs"), "{e}"),
        other => panic!("expected a placement refusal, got {other:?}"),
    }

    spec.backend = BackendRef::A2a { remote: "nowhere".into() };
    match r.coordinator.create_agent(spec).await {
        Err(RuntimeError::Invalid(m)) => assert!(m.contains("no A2A remote named \"nowhere\""), "{m}"),
        other => panic!("expected an unknown-remote refusal, got {other:?}"),
    }
}

pub async fn previews_are_delivered_before_their_committed_event(h: &dyn Harness) {
    // Deterministic form of the race: the previews are queued and the message committed
    // before the subscriber reads anything; it must still deliver the previews first.
    let r = rig(h.fresh().await).await;
    let s = new_session(&r).await;
    r.coordinator.submit(&s.id, vec![say("go")]).await.unwrap();
    let stream = subscribe(&r, &s, 0, true).await;
    let offer = gateway_core::run::WorkerOffer {
        worker: "w".into(),
        host: "h".into(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    };
    let c = r
        .store
        .claim_run(&offer, LeaseTerms { lease: Duration::from_secs(10), host_ttl: Duration::from_secs(30) })
        .await
        .unwrap()
        .unwrap();
    let message = NewEvent::new(EventPayload::AgentMessage { content: vec![ContentBlock::text("hello")] });
    let after = r.store.get_session(&s.id).await.unwrap().last_seq;
    r.previews.publish(&s.id, after, Preview::Start { event_id: message.id.clone(), kind: EventKind::AgentMessage });
    r.previews.publish(&s.id, after, Preview::TextDelta { event_id: message.id.clone(), index: 0, text: "hel".into() });
    r.previews.publish(&s.id, after, Preview::TextDelta { event_id: message.id.clone(), index: 0, text: "lo".into() });
    r.store
        .commit(&c.fence, Commit { events: vec![message.clone()], environment: None, bindings: vec![] })
        .await
        .unwrap();
    let got = until(stream, 10, |d| matches!(d, Delivery::Event(e) if e.id == message.id)).await;
    let order: Vec<String> = got
        .iter()
        .map(|d| match d {
            Delivery::Event(e) => format!("{:?}", e.kind()),
            Delivery::Preview(Preview::Start { .. }) => "start".into(),
            Delivery::Preview(Preview::TextDelta { text, .. }) => format!("delta {text}"),
            Delivery::Preview(Preview::ThoughtDelta { text, .. }) => format!("thought {text}"),
        })
        .collect();
    assert_eq!(order, vec!["UserMessage", "TurnStarted", "start", "delta hel", "delta lo", "AgentMessage"]);
}

/// Polls `f` every 20 ms until it yields a value or `secs` pass.
/// Past `max_queued_runs`, a message that would start another turn is refused at once as busy
/// and nothing of it is stored; interrupts (which end accepted work) still pass; once the queue
/// drains, messages are admitted again.
pub async fn new_turns_are_refused_while_too_many_wait(h: &dyn Harness) {
    let limits = AdmissionLimits { max_queued_runs: 2, retry_after: Duration::from_secs(3), ..Default::default() };
    let r = rig_with(h.fresh().await, limits).await;
    let (a, b, c) = (new_session(&r).await, new_session(&r).await, new_session(&r).await);
    r.coordinator.submit(&a.id, vec![say("one")]).await.unwrap();
    r.coordinator.submit(&b.id, vec![say("two")]).await.unwrap();
    // The queue is sampled every SAMPLE_EVERY; past it, two runs wait.
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;
    match r.coordinator.submit(&c.id, vec![say("three")]).await {
        Err(RuntimeError::Busy(busy)) => {
            assert_eq!(busy.cause, BusyCause::QueuedRuns);
            assert_eq!(busy.retry_after, Duration::from_secs(3));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    let stored = r
        .coordinator
        .list_events(&c.id, &Default::default(), &gateway_store::PageRequest::first(10, gateway_store::Order::Asc))
        .await
        .unwrap();
    assert!(stored.items.is_empty(), "a refused message leaves nothing behind: {:?}", stored.items);
    r.coordinator.interrupt(&a.id).await.expect("an interrupt passes whatever the queue");

    let pool = workers(&r, config("a", "h"));
    assert!(idle_after_a_turn(&r, &b).await, "the queued turns run");
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;
    r.coordinator.submit(&c.id, vec![say("three again")]).await.expect("admitted once the queue drained");
    pool.shutdown().await;
}

/// A run that could be claimed but waits past `max_queue_wait_ms` (no Worker keeps up) makes
/// the next message that would start a turn busy; once it is claimed, messages pass again.
pub async fn new_turns_are_refused_while_claims_lag_behind(h: &dyn Harness) {
    let limits = AdmissionLimits { max_queue_wait: Duration::from_millis(200), ..Default::default() };
    let r = rig_with(h.fresh().await, limits).await;
    let (a, b) = (new_session(&r).await, new_session(&r).await);
    r.coordinator.submit(&a.id, vec![say("waits")]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    match r.coordinator.submit(&b.id, vec![say("refused")]).await {
        Err(RuntimeError::Busy(busy)) => assert_eq!(busy.cause, BusyCause::QueueWait, "{busy}"),
        other => panic!("expected busy, got {other:?}"),
    }
    let pool = workers(&r, config("a", "h"));
    assert!(idle_after_a_turn(&r, &a).await, "the waiting turn runs once a Worker claims it");
    tokio::time::sleep(gateway_runtime::load::SAMPLE_EVERY + Duration::from_millis(50)).await;
    r.coordinator.submit(&b.id, vec![say("admitted")]).await.expect("the queue keeps up again");
    pool.shutdown().await;
}

pub async fn wait_for<T, F, Fut>(secs: u64, f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if let Some(v) = f().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[macro_export]
macro_rules! runtime_suite {
    ($harness:expr) => {
        $crate::runtime_suite!(@each $harness;
            a_turn_runs_end_to_end,
            subscriptions_join_mid_turn_without_gap_or_duplicate,
            subscriptions_see_commits_of_another_store_handle,
            a_subscription_opened_ahead_of_a_write_delivers_what_follows_it,
            subscriptions_left_mid_read_hold_no_place_to_read,
            an_interrupt_stops_a_running_turn,
            transient_failures_are_retried_then_exhausted,
            crashes_past_the_budget_end_the_run_indeterminate,
            a_reclaim_continues_the_turn_its_lost_claim_started,
            graceful_shutdown_releases_the_lease_for_a_successor,
            previews_reach_only_subscribers_that_asked,
            previews_are_delivered_before_their_committed_event,
            a_parked_turn_resumes_on_the_answer,
            a_lost_environment_fails_the_run_instead_of_moving,
            placement_refusals_name_their_rule,
            new_turns_are_refused_while_too_many_wait,
            new_turns_are_refused_while_claims_lag_behind
        );
    };
    (@each $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let harness = $harness;
                common::$name(&harness).await;
            }
        )*
    };
}
