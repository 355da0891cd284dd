#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed setup aborts the test loudly
//! The Backend conformance suite: one set of behaviours every [`Backend`](crate::Backend) runs,
//! whatever it drives (the native model loop, an agent process, a remote agent, a scripted or
//! built-in one), on every store engine.
//!
//! Each backend's test file implements [`BackendUnderTest`] (how to put the backend on a test
//! gateway, open a session of it, and make the two kinds of turn the suite needs) and
//! instantiates every test with [`backend_suite!`](crate::backend_suite) once per store
//! harness. A backend is done when the suite passes on SQLite and PostgreSQL.
//!
//! The tests assert what a client sees in the session's event log (turn boundaries, replies,
//! stop reasons, epochs of committed events) and, where the backend acts on the world (a tool
//! run, a prompt sent to an agent, a message sent to a remote), how often the effect happened:
//! - [`answers_exactly_the_inputs_through_its_boundary`]: a message sent while a turn runs is
//!   answered by the next turn, and each reply answers its own message (`gateway_core::turn`).
//! - [`an_interrupt_ends_the_turn`]: promptly, `interrupted`, and the next message is answered
//!   with its own text, not a leftover of the interrupted turn (invariant 21).
//! - [`resumable_after_a_lost_claim_and_an_effect_is_never_repeated`]: the Workers crash
//!   mid-turn, a new claim ends the turn (or fails it explicitly, for a backend that cannot
//!   resume), the effect happened once and no committed output is repeated (invariants 5, 14).
//! - [`nothing_is_written_once_the_claim_is_lost`]: the run's lease is taken away mid-turn;
//!   no event of the old epoch is committed after that, and the turn ends once (invariant 2).

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{Event, EventKind, EventPayload, NewEvent, StopReason};
use gateway_core::run::Fence;
use gateway_core::session::Session;
use gateway_core::turn::RunView;
use gateway_core::{EventId, RunId};
use gateway_store::conformance::Harness;
use tokio::time::Instant;

use super::{TestGateway, TestGatewayBuilder};
use crate::worker::{RetryPolicy, WorkerConfig};

/// A turn the suite asks a backend for: the message that starts it and what its reply says.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The text of the user message that starts the turn.
    pub message: String,
    /// A text the turn's agent messages contain (joined) when it ran undisturbed.
    pub reply: String,
    /// What they contain when a new claim finished the turn after a lost claim (the native
    /// loop answers a call it cannot know the outcome of as indeterminate).
    pub resumed: String,
    /// How long the turn keeps working after its effect (zero for a quick turn).
    pub work: Duration,
}

impl Turn {
    /// A turn whose reply is the same however it was run.
    pub fn new(message: impl Into<String>, reply: impl Into<String>, work: Duration) -> Self {
        let reply = reply.into();
        Self { message: message.into(), resumed: reply.clone(), reply, work }
    }
}

/// A backend as the suite drives it.
#[async_trait]
pub trait BackendUnderTest: Send + Sync {
    /// Adds the backend, and what it needs (sandbox providers, environments' settings), to a
    /// gateway whose store and Workers the suite chose.
    fn register(&self, gateway: TestGatewayBuilder) -> TestGatewayBuilder;

    /// A new idle session of an agent published on the backend.
    async fn session(&self, gw: &TestGateway) -> Session;

    /// A turn that answers at once; its reply names `word`.
    fn answer(&self, word: &str) -> Turn;

    /// A turn that does its one externally observable effect (if the backend has any), then
    /// keeps working for about `work` (interruptibly) before it answers; its reply names `word`
    /// where the backend can say it. A backend with a fixed working time says so in
    /// [`Turn::work`].
    fn effect_then_work(&self, word: &str, work: Duration) -> Turn;

    /// Whether the session's first turn, an [`effect_then_work`](Self::effect_then_work) one,
    /// is past its effect and has journaled it: from here on a lost claim must not repeat it.
    async fn working(&self, gw: &TestGateway, session: &Session) -> bool;

    /// How many times the effect of `effect_then_work` turns happened in the session (marker
    /// lines, prompts an agent received, messages a remote received); `None`: the backend has
    /// no external effect, and the suite asserts only that no committed output is repeated.
    async fn effects(&self, gw: &TestGateway, session: &Session) -> Option<usize>;

    /// What a crash of the gateway's Workers does: by default they stop without settling or
    /// releasing anything. A backend whose state dies with the process (agent processes) stops
    /// it too.
    async fn crash(&self, gw: &mut TestGateway, _session: &Session) {
        gw.crash_workers().await;
    }

    /// For a backend that cannot finish a turn a lost claim interrupted (the agent that was
    /// working on it is gone): a text of the explicit error it fails the turn with. `None`: a
    /// new claim must finish the turn.
    fn lost_claim_failure(&self) -> Option<&'static str> {
        None
    }
}

/// Instantiates every Backend conformance test for a store harness and a backend under test
/// (expressions evaluated inside each async test, so they may `.await`).
#[macro_export]
macro_rules! backend_suite {
    ($harness:expr, $backend:expr) => {
        $crate::backend_suite!(@each $harness, $backend;
            answers_exactly_the_inputs_through_its_boundary,
            an_interrupt_ends_the_turn,
            resumable_after_a_lost_claim_and_an_effect_is_never_repeated,
            nothing_is_written_once_the_claim_is_lost
        );
    };
    (@each $harness:expr, $backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = $harness;
                let backend = $backend;
                $crate::testing::backends::$name(&harness, &backend).await;
            }
        )*
    };
}

/// The suite's Workers: room for more than one turn (a new claim can start while a lost one
/// is still stuck), short leases so a crashed claim expires within a second, quick polls, no
/// retries to wait for.
pub fn suite_workers() -> WorkerConfig {
    WorkerConfig {
        max_turns: 4,
        claim_batch: 16,
        lease: Duration::from_secs(1),
        host_ttl: Duration::from_secs(30),
        poll: Duration::from_millis(50),
        crash_budget: 3,
        retry: RetryPolicy { max_retries: 1, base: Duration::from_millis(20), max: Duration::from_millis(50) },
        shutdown_grace: Duration::from_millis(200),
    }
}

/// A gateway with the backend on a fresh store of `harness`, its Workers running.
pub async fn gateway(harness: &dyn Harness, backend: &dyn BackendUnderTest) -> TestGateway {
    let builder = TestGateway::builder()
        .store(harness.fresh().await)
        .workers(suite_workers())
        .subscription_poll(Duration::from_millis(50));
    backend.register(builder).build().await
}

// ---------------- what a client sees ----------------

/// The session's committed log, oldest first.
pub async fn log(gw: &TestGateway, session: &Session) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    loop {
        let after = out.last().map_or(0, |e| e.seq);
        let batch = gw.store.events_after(&session.id, after, 1000).await.unwrap();
        let done = batch.len() < 1000;
        out.extend(batch);
        if done {
            return out;
        }
    }
}

/// Sends a user message; the committed input.
pub async fn send(gw: &TestGateway, session: &Session, text: &str) -> Event {
    let input = NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(text)] });
    gw.coordinator.submit(&session.id, vec![input]).await.unwrap().pop().unwrap()
}

/// Waits (polling every 20 ms) until `f` yields, at most `secs`; panics naming `what`.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The log once `n` turns have ended (at most `secs`).
async fn ended(gw: &TestGateway, session: &Session, n: usize, secs: u64) -> Vec<Event> {
    wait_for(secs, &format!("{n} turn end(s)"), || async {
        let log = log(gw, session).await;
        (log.iter().filter(|e| e.kind() == EventKind::TurnEnded).count() >= n).then_some(log)
    })
    .await
}

async fn until_working(gw: &TestGateway, session: &Session, backend: &dyn BackendUnderTest) {
    wait_for(20, "the turn to do its effect and keep working", || async {
        backend.working(gw, session).await.then_some(())
    })
    .await
}

fn kinds(log: &[Event]) -> Vec<EventKind> {
    log.iter().map(Event::kind).collect()
}

/// The runs that started turns, in order, with the boundary of their first `turn_started`.
fn runs(log: &[Event]) -> Vec<(RunId, u64)> {
    let mut seen = HashSet::new();
    log.iter()
        .filter_map(|e| match (&e.payload, &e.run_id) {
            (EventPayload::TurnStarted { inputs_through }, Some(run)) if seen.insert(run.clone()) => {
                Some((run.clone(), *inputs_through))
            }
            _ => None,
        })
        .collect()
}

fn of<'a>(log: &'a [Event], run: &'a RunId) -> impl Iterator<Item = &'a Event> {
    log.iter().filter(move |e| e.run_id.as_ref() == Some(run))
}

/// The texts of a run's agent messages.
fn said(log: &[Event], run: &RunId) -> Vec<String> {
    of(log, run)
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessage { content } => Some(plain_text(content)),
            _ => None,
        })
        .collect()
}

fn ends<'a>(log: &'a [Event], run: &'a RunId) -> Vec<(&'a Event, StopReason)> {
    of(log, run)
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnded { stop } => Some((e, stop.clone())),
            _ => None,
        })
        .collect()
}

fn errors(log: &[Event], run: &RunId) -> Vec<String> {
    of(log, run)
        .filter_map(|e| match &e.payload {
            EventPayload::SessionError { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// The user messages the core's one rule gives `run` to answer while it worked (the log
/// before its end; an interrupt committed meanwhile is an input of the next run too).
fn messages_of(log: &[Event], run: &RunId, through: u64) -> Vec<EventId> {
    let end = ends(log, run).first().map_or(u64::MAX, |(e, _)| e.seq);
    let history = log.iter().filter(|e| e.seq < end).cloned();
    let view = RunView::new(run, through, history);
    view.inputs().filter(|e| e.kind() == EventKind::UserMessage).map(|e| e.id.clone()).collect()
}

/// The one end of `run`'s turn: a normal end whose reply names `reply`, or, for a backend that
/// cannot resume, the explicit failure it names.
fn assert_ends_once(log: &[Event], run: &RunId, reply: &str, failure: Option<&str>) {
    let ends = ends(log, run);
    assert_eq!(ends.len(), 1, "the turn ends exactly once: {:?}", kinds(log));
    let text = said(log, run).join("\n");
    match (&ends[0].1, failure) {
        (StopReason::EndTurn, _) => {
            assert!(text.contains(reply), "the finished turn answers {reply:?}; it said {text:?}")
        }
        (StopReason::Failed, Some(failure)) => {
            let errors = errors(log, run);
            assert!(errors.iter().any(|m| m.contains(failure)), "the failure names {failure:?}: {errors:?}");
        }
        (other, _) => panic!("the turn ended {other:?}; said {text:?}, errors {:?}", errors(log, run)),
    }
}

/// No agent message of the run is committed twice (a resumed turn continues after what its
/// lost claim committed).
fn assert_nothing_repeated(log: &[Event], run: &RunId) {
    let said = said(log, run);
    let mut seen = HashSet::new();
    for text in &said {
        assert!(seen.insert(text), "{text:?} was committed twice: {said:?}");
    }
}

async fn assert_effect_once(gw: &TestGateway, session: &Session, backend: &dyn BackendUnderTest) {
    if let Some(n) = backend.effects(gw, session).await {
        assert_eq!(n, 1, "the turn's effect happened exactly once");
    }
}

// ---------------- the suite ----------------

/// A message sent while a turn runs is answered by the next turn, not the running one; each
/// reply answers its own message.
pub async fn answers_exactly_the_inputs_through_its_boundary(h: &dyn Harness, backend: &dyn BackendUnderTest) {
    let gw = gateway(h, backend).await;
    let s = backend.session(&gw).await;
    let long = backend.effect_then_work("apple", Duration::from_millis(1500));
    let quick = backend.answer("banana");
    let first = send(&gw, &s, &long.message).await;
    until_working(&gw, &s, backend).await;
    let second = send(&gw, &s, &quick.message).await;
    let log = ended(&gw, &s, 2, 30).await;

    let runs = runs(&log);
    assert_eq!(runs.len(), 2, "two turns, one per message: {:?}", kinds(&log));
    let ((r1, through1), (r2, through2)) = (&runs[0], &runs[1]);
    assert!(
        (first.seq..second.seq).contains(through1),
        "the running turn's boundary ({through1}) includes its message ({}) and not the one sent meanwhile ({})",
        first.seq,
        second.seq
    );
    assert!(*through2 >= second.seq, "the next turn's boundary ({through2}) includes the message ({})", second.seq);
    assert_eq!(messages_of(&log, r1, *through1), vec![first.id.clone()], "the first run answers its message only");
    assert_eq!(messages_of(&log, r2, *through2), vec![second.id.clone()], "the second run answers the later one only");

    for (run, turn, other) in [(r1, &long, &quick), (r2, &quick, &long)] {
        let ends = ends(&log, run);
        assert_eq!(ends.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(), vec![StopReason::EndTurn]);
        let text = said(&log, run).join("\n");
        assert!(text.contains(&turn.reply), "{:?} is answered ({:?}); said {text:?}", turn.message, turn.reply);
        assert!(!text.contains(&other.reply), "the turn of {:?} answered another message: {text:?}", turn.message);
    }
    gw.stop().await;
}

/// Interrupting a running turn ends it `interrupted` promptly; the next message is answered
/// with its own text, not a leftover of the interrupted turn.
pub async fn an_interrupt_ends_the_turn(h: &dyn Harness, backend: &dyn BackendUnderTest) {
    let gw = gateway(h, backend).await;
    let s = backend.session(&gw).await;
    let long = backend.effect_then_work("apple", Duration::from_secs(30));
    send(&gw, &s, &long.message).await;
    until_working(&gw, &s, backend).await;
    let asked = Instant::now();
    gw.coordinator.interrupt(&s.id).await.unwrap();
    let log = ended(&gw, &s, 1, 10).await;
    let took = asked.elapsed();
    let promptly = (long.work / 2).min(Duration::from_secs(5));
    let run = runs(&log)[0].0.clone();
    assert_eq!(
        ends(&log, &run).iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(),
        vec![StopReason::Interrupted],
        "{:?}",
        kinds(&log)
    );
    assert!(took < promptly, "the interrupt ended the turn in {took:?}, not within {promptly:?}");

    let next = backend.answer("cherry");
    let sent = send(&gw, &s, &next.message).await;
    let log = ended(&gw, &s, 2, 20).await;
    let runs = runs(&log);
    assert_eq!(runs.len(), 2, "{:?}", kinds(&log));
    let (r2, through) = &runs[1];
    assert_eq!(messages_of(&log, r2, *through), vec![sent.id.clone()]);
    assert_eq!(ends(&log, r2).iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(), vec![StopReason::EndTurn]);
    let text = said(&log, r2).join("\n");
    assert!(text.contains(&next.reply), "the next message is answered ({:?}); said {text:?}", next.reply);
    assert!(!text.contains(&long.reply), "the next turn answered the interrupted one: {text:?}");
    let end = ends(&log, &run)[0].0.seq;
    assert!(of(&log, &run).all(|e| e.seq <= end), "the interrupted run commits nothing after its end");
    gw.stop().await;
}

/// The Workers crash mid-turn, after its effect; a new claim picks the run up and ends the turn
/// once (or fails it explicitly, for a backend that cannot resume); the effect happened once
/// and nothing committed is repeated.
pub async fn resumable_after_a_lost_claim_and_an_effect_is_never_repeated(
    h: &dyn Harness,
    backend: &dyn BackendUnderTest,
) {
    let mut gw = gateway(h, backend).await;
    let s = backend.session(&gw).await;
    let long = backend.effect_then_work("apple", Duration::from_millis(1500));
    send(&gw, &s, &long.message).await;
    until_working(&gw, &s, backend).await;
    let lost = gw.store.active_runs(&s.id).await.unwrap().remove(0);
    backend.crash(&mut gw, &s).await;
    gw.start_workers();
    ended(&gw, &s, 1, 30).await;
    // Late duplicates (a resent effect, a second end) would show by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = log(&gw, &s).await;

    let run = lost.id.clone();
    assert!(
        of(&log, &run).any(|e| e.epoch.is_some_and(|epoch| epoch > lost.lease_epoch)),
        "a new claim (epoch > {}) picked the run up: {:?}",
        lost.lease_epoch,
        kinds(&log)
    );
    assert_ends_once(&log, &run, &long.resumed, backend.lost_claim_failure());
    assert_nothing_repeated(&log, &run);
    assert_effect_once(&gw, &s, backend).await;
    gw.stop().await;
}

/// While a turn runs, its lease is taken away (the run released under its fence, so the next
/// claim bumps the epoch): no event of the old epoch is committed after that, and the turn
/// still ends once, its effect not repeated.
pub async fn nothing_is_written_once_the_claim_is_lost(h: &dyn Harness, backend: &dyn BackendUnderTest) {
    let gw = gateway(h, backend).await;
    let s = backend.session(&gw).await;
    let long = backend.effect_then_work("apple", Duration::from_millis(1500));
    send(&gw, &s, &long.message).await;
    until_working(&gw, &s, backend).await;
    let run = gw.store.active_runs(&s.id).await.unwrap().remove(0);
    let fence = Fence {
        run_id: run.id.clone(),
        session_id: s.id.clone(),
        owner: run.lease_owner.clone().expect("the working run is held"),
        epoch: run.lease_epoch,
    };
    let released = Instant::now();
    gw.store.release_run(&fence).await.unwrap();
    // Every commit under the old epoch from here on is refused, so none can follow this seq.
    let cut = gw.store.get_session(&s.id).await.unwrap().last_seq;
    ended(&gw, &s, 1, 30).await;
    // The old holder keeps working until it notices; give it the time to try its late writes.
    tokio::time::sleep_until(released + long.work + Duration::from_millis(500)).await;
    let log = log(&gw, &s).await;

    let stale: Vec<(u64, EventKind)> =
        of(&log, &run.id).filter(|e| e.epoch == Some(fence.epoch) && e.seq > cut).map(|e| (e.seq, e.kind())).collect();
    assert!(stale.is_empty(), "events of the lost claim (epoch {}) committed after seq {cut}: {stale:?}", fence.epoch);
    let first_new = of(&log, &run.id)
        .find(|e| e.epoch.is_some_and(|epoch| epoch > fence.epoch))
        .unwrap_or_else(|| panic!("a new claim picked the run up: {:?}", kinds(&log)));
    assert!(
        of(&log, &run.id).filter(|e| e.epoch == Some(fence.epoch)).all(|e| e.seq < first_new.seq),
        "no event of the old epoch follows the first of the new one"
    );
    let successors: HashSet<i64> = of(&log, &run.id).filter_map(|e| e.epoch).filter(|e| *e > fence.epoch).collect();
    assert_eq!(
        successors.len(),
        1,
        "one new claim finishes the turn (the stale holder's end costs it nothing): epochs {successors:?}"
    );
    assert_ends_once(&log, &run.id, &long.resumed, backend.lost_claim_failure());
    assert_nothing_repeated(&log, &run.id);
    assert_effect_once(&gw, &s, backend).await;
    gw.stop().await;
}
