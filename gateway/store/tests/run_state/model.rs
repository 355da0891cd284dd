//! The in-memory model of runs and leases, the operations, and their replay against a store.
//!
//! The model decides everything the store's contract fixes (who may commit, which runs a claim
//! may take, what an admission queues) and learns from the store only what is not a decision:
//! a new run's id and creation time, and which of several allowed runs a claim took.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::run::{Fence, RunState};
use gateway_core::{RunId, SessionId};
use gateway_store::conformance::{Harness, agent_text, msg, session, terms, worker};
use gateway_store::{AdmissionWrites, Commit, RunOutcome, Settlement, Store, StoreError};
use proptest::prelude::*;

pub const SESSIONS: usize = 3;
pub const WORKERS: usize = 3;
/// Leases outlive any case: they end only by an `Expire` (or a claim after one).
const LEASE_MS: u64 = 60_000;

/// One step. Indices are taken modulo what exists when the step runs, so every sequence (and
/// every shrink of one) is meaningful.
#[derive(Debug, Clone)]
pub enum Op {
    /// A client sends a message to a session.
    Admit { session: usize },
    /// A worker claims whatever it may (a crashed worker restarts under its old name).
    Claim { worker: usize },
    /// A worker claims up to `limit` runs in one call, as a process's claim loop does.
    ClaimBatch { worker: usize, limit: u32 },
    /// A live worker renews one of the fences it was ever given.
    Renew { worker: usize, fence: usize },
    /// A live worker renews every fence it was ever given in one call, as a process's lease
    /// keeper does.
    RenewAll { worker: usize },
    /// A running run's lease lapses on the database clock.
    Expire { run: usize },
    /// A worker stops renewing; it keeps its fences and may still try to write with them.
    Crash { worker: usize },
    /// A worker commits an event under one of its fences.
    Commit { worker: usize, fence: usize },
    /// A worker settles a run under one of its fences.
    Settle { worker: usize, fence: usize, failed: bool },
    /// A worker gives a run back under one of its fences.
    Release { worker: usize, fence: usize },
}

pub fn op() -> impl Strategy<Value = Op> {
    let i = || 0..8usize;
    prop_oneof![
        3 => i().prop_map(|session| Op::Admit { session }),
        3 => i().prop_map(|worker| Op::Claim { worker }),
        1 => (i(), 1..4u32).prop_map(|(worker, limit)| Op::ClaimBatch { worker, limit }),
        1 => (i(), i()).prop_map(|(worker, fence)| Op::Renew { worker, fence }),
        1 => i().prop_map(|worker| Op::RenewAll { worker }),
        3 => i().prop_map(|run| Op::Expire { run }),
        1 => i().prop_map(|worker| Op::Crash { worker }),
        3 => (i(), i()).prop_map(|(worker, fence)| Op::Commit { worker, fence }),
        2 => (i(), i(), any::<bool>()).prop_map(|(worker, fence, failed)| Op::Settle { worker, fence, failed }),
        1 => (i(), i()).prop_map(|(worker, fence)| Op::Release { worker, fence }),
    ]
}

/// What the model knows of one run.
#[derive(Debug, Clone, PartialEq)]
struct RunModel {
    session: usize,
    state: RunState,
    owner: Option<String>,
    epoch: i64,
    crash_count: u32,
    started: bool,
    /// The lease lapsed and nobody renewed or reclaimed it since.
    lapsed: bool,
    /// The store's creation time (milliseconds): the claim order within a session.
    created_at: i64,
}

#[derive(Debug, Default)]
struct WorkerModel {
    crashed: bool,
    /// Every fence this worker was given, current or not.
    fences: Vec<Fence>,
}

struct Model {
    sessions: Vec<SessionId>,
    runs: BTreeMap<RunId, RunModel>,
    workers: Vec<WorkerModel>,
}

impl Model {
    /// A fence is live iff it names its run's current owner and epoch while the run is running.
    fn is_live(&self, fence: &Fence) -> bool {
        self.runs.get(&fence.run_id).is_some_and(|r| {
            r.state == RunState::Running && r.epoch == fence.epoch && r.owner.as_deref() == Some(&fence.owner)
        })
    }

    /// The runs a claim may take: per session, a running run whose lease lapsed, or (with no
    /// running run) its oldest queued runs (ties in creation time are the store's to break).
    fn claimable(&self) -> Vec<RunId> {
        let mut out = Vec::new();
        for s in 0..self.sessions.len() {
            let runs: Vec<(&RunId, &RunModel)> = self.runs.iter().filter(|(_, r)| r.session == s).collect();
            if let Some((id, r)) = runs.iter().find(|(_, r)| r.state == RunState::Running) {
                if r.lapsed {
                    out.push((*id).clone());
                }
                continue;
            }
            let queued: Vec<&(&RunId, &RunModel)> = runs.iter().filter(|(_, r)| r.state == RunState::Queued).collect();
            if let Some(oldest) = queued.iter().map(|(_, r)| r.created_at).min() {
                out.extend(queued.iter().filter(|(_, r)| r.created_at == oldest).map(|(id, _)| (*id).clone()));
            }
        }
        out
    }

    fn fence(&self, worker: usize, pick: usize) -> Option<Fence> {
        let fences = &self.workers[worker].fences;
        (!fences.is_empty()).then(|| fences[pick % fences.len()].clone())
    }
}

fn name(worker: usize) -> String {
    format!("w{worker}")
}

/// Runs `ops` on a fresh store from `harness` and on the model, checking agreement after each.
pub async fn replay(harness: &dyn Harness, ops: Vec<Op>) {
    let store = harness.fresh().await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(session(&store).await.id);
    }
    let mut m =
        Model { sessions, runs: BTreeMap::new(), workers: (0..WORKERS).map(|_| WorkerModel::default()).collect() };
    let mut epochs: BTreeMap<RunId, i64> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        apply(&store, &mut m, op).await;
        agree(&store, &m, &mut epochs).await.unwrap_or_else(|e| panic!("after step {step} ({op:?}): {e}"));
    }
    store.close().await;
}

async fn apply(store: &Arc<dyn Store>, m: &mut Model, op: &Op) {
    match *op {
        Op::Admit { session } => admit(store, m, session % SESSIONS).await,
        Op::Claim { worker } => claim(store, m, worker % WORKERS, None).await,
        Op::ClaimBatch { worker, limit } => claim(store, m, worker % WORKERS, Some(limit)).await,
        Op::RenewAll { worker } => {
            let w = worker % WORKERS;
            if m.workers[w].crashed {
                return;
            }
            let fences = m.workers[w].fences.clone();
            let renewed = store.renew_leases(&fences, Duration::from_millis(LEASE_MS)).await.expect("renew leases");
            assert_eq!(renewed.len(), fences.len());
            for (fence, renewal) in fences.iter().zip(renewed) {
                let live = m.is_live(fence);
                assert_eq!(renewal.is_some(), live, "batch renewal of {fence:?}: the model says live = {live}");
                if live {
                    m.runs.get_mut(&fence.run_id).expect("known run").lapsed = false;
                }
            }
        }
        Op::Renew { worker, fence } => {
            let w = worker % WORKERS;
            if m.workers[w].crashed {
                return;
            }
            let Some(fence) = m.fence(w, fence) else { return };
            let live = m.is_live(&fence);
            let before = last_seqs(store, m).await;
            let result = store.renew_lease(&fence, Duration::from_millis(LEASE_MS)).await;
            fenced_write(store, m, &fence, live, before, result.map(|_| ())).await;
            if live {
                m.runs.get_mut(&fence.run_id).expect("known run").lapsed = false;
            }
        }
        Op::Expire { run } => {
            let running: Vec<Fence> = m
                .runs
                .iter()
                .filter(|(_, r)| r.state == RunState::Running)
                .map(|(id, r)| Fence {
                    run_id: id.clone(),
                    session_id: m.sessions[r.session].clone(),
                    owner: r.owner.clone().expect("a running run has an owner"),
                    epoch: r.epoch,
                })
                .collect();
            if running.is_empty() {
                return;
            }
            let fence = &running[run % running.len()];
            store.renew_lease(fence, Duration::ZERO).await.expect("the holder's fence renews");
            m.runs.get_mut(&fence.run_id).expect("known run").lapsed = true;
        }
        Op::Crash { worker } => m.workers[worker % WORKERS].crashed = true,
        Op::Commit { worker, fence } => {
            let Some(fence) = m.fence(worker % WORKERS, fence) else { return };
            let live = m.is_live(&fence);
            let commit = Commit { events: vec![agent_text("work")], environment: None, bindings: vec![] };
            let before = last_seqs(store, m).await;
            let result = store.commit(&fence, commit).await;
            fenced_write(store, m, &fence, live, before, result.map(|_| ())).await;
        }
        Op::Settle { worker, fence, failed } => {
            let Some(fence) = m.fence(worker % WORKERS, fence) else { return };
            let live = m.is_live(&fence);
            let outcome = if failed { RunOutcome::Failed } else { RunOutcome::Completed };
            let settlement = Settlement { events: vec![agent_text("done")], outcome, bindings: vec![] };
            let before = last_seqs(store, m).await;
            let result = store.settle(&fence, settlement).await;
            fenced_write(store, m, &fence, live, before, result.map(|_| ())).await;
            if live {
                let r = m.runs.get_mut(&fence.run_id).expect("known run");
                r.state = if failed { RunState::Failed } else { RunState::Completed };
                r.owner = None;
            }
        }
        Op::Release { worker, fence } => {
            let Some(fence) = m.fence(worker % WORKERS, fence) else { return };
            let live = m.is_live(&fence);
            let before = last_seqs(store, m).await;
            let result = store.release_run(&fence).await;
            fenced_write(store, m, &fence, live, before, result).await;
            if live {
                let r = m.runs.get_mut(&fence.run_id).expect("known run");
                r.state = RunState::Queued;
                r.owner = None;
                r.lapsed = false;
            }
        }
    }
}

/// Checks a fenced write's answer: accepted iff the model says the fence is live; refused
/// `Fenced` otherwise, with nothing written to the session's log.
async fn fenced_write(
    store: &Arc<dyn Store>,
    m: &Model,
    fence: &Fence,
    live: bool,
    before: Vec<u64>,
    result: Result<(), StoreError>,
) {
    match (live, result) {
        (true, Ok(())) => {}
        (true, Err(e)) => panic!("a live fence {fence:?} was refused: {e}"),
        (false, Ok(())) => {
            panic!("a stale fence {fence:?} was accepted; the model holds {:?}", m.runs.get(&fence.run_id))
        }
        (false, Err(e)) => {
            assert!(e.is_fenced(), "a stale fence {fence:?} must be refused Fenced, got {e}");
            assert_eq!(before, last_seqs(store, m).await, "a refused write wrote nothing");
        }
    }
}

async fn admit(store: &Arc<dyn Store>, m: &mut Model, s: usize) {
    let id = m.sessions[s].clone();
    // A message needs a run of its own unless a run that has not started yet waits: that one
    // will read it. (A released run has started: its inputs are fixed.)
    let enqueues = !m.runs.values().any(|r| r.session == s && r.state == RunState::Queued && !r.started);
    store.submit_inputs(&id, vec![msg("hi")], AdmissionWrites::default()).await.expect("admitted");
    let new: Vec<_> = store
        .active_runs(&id)
        .await
        .expect("active runs")
        .into_iter()
        .filter(|r| !m.runs.contains_key(&r.id))
        .collect();
    assert_eq!(new.len(), usize::from(enqueues), "admission queued {new:?}; the model expected {enqueues}");
    for r in new {
        let model = RunModel {
            session: s,
            state: RunState::Queued,
            owner: None,
            epoch: 0,
            crash_count: 0,
            started: false,
            lapsed: false,
            created_at: r.created_at.0,
        };
        m.runs.insert(r.id, model);
    }
}

/// One claim (`limit` None) or a batch: each claimed run is one the model allows, at most one
/// per session, and as many as allowed up to the limit.
async fn claim(store: &Arc<dyn Store>, m: &mut Model, w: usize, limit: Option<u32>) {
    let allowed = m.claimable();
    let before: Vec<u64> = last_seqs(store, m).await;
    let offer = worker(&name(w), "h");
    let claims = match limit {
        None => store.claim_run(&offer, terms(LEASE_MS)).await.expect("claim").into_iter().collect(),
        Some(limit) => store.claim_runs(&offer, terms(LEASE_MS), limit).await.expect("claim runs"),
    };
    let mut sessions: Vec<usize> = allowed.iter().map(|id| m.runs[id].session).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let want = sessions.len().min(limit.unwrap_or(1) as usize);
    assert_eq!(claims.len(), want, "claimed {} runs while {allowed:?} were claimable (limit {limit:?})", claims.len());
    if claims.is_empty() {
        assert_eq!(before, last_seqs(store, m).await, "an empty claim wrote nothing");
    }
    let mut claimed_sessions: Vec<&gateway_core::SessionId> = claims.iter().map(|c| &c.fence.session_id).collect();
    claimed_sessions.sort();
    claimed_sessions.dedup();
    assert_eq!(claimed_sessions.len(), claims.len(), "one run per session in a batch");
    for claim in claims {
        take(m, w, &allowed, claim);
    }
}

fn take(m: &mut Model, w: usize, allowed: &[RunId], claim: gateway_core::run::Claim) {
    let id = claim.fence.run_id.clone();
    assert!(allowed.contains(&id), "claimed {id}, but only {allowed:?} were claimable");
    let r = m.runs.get_mut(&id).expect("known run");
    assert_eq!(claim.fence.epoch, r.epoch + 1, "a claim bumps the epoch by one");
    assert_eq!(claim.run.started, r.started, "the claim reports whether the run had started");
    if r.state == RunState::Running {
        r.crash_count += 1;
    }
    assert_eq!(claim.run.crash_count, r.crash_count, "only a reclaim of a lapsed lease counts a crash");
    r.state = RunState::Running;
    r.owner = Some(name(w));
    r.epoch = claim.fence.epoch;
    r.started = true;
    r.lapsed = false;
    let worker = &mut m.workers[w];
    worker.crashed = false;
    worker.fences.push(claim.fence);
}

async fn last_seqs(store: &Arc<dyn Store>, m: &Model) -> Vec<u64> {
    let mut out = Vec::new();
    for id in &m.sessions {
        out.push(store.get_session(id).await.expect("session").last_seq);
    }
    out
}

/// The store agrees with the model; epochs never went down since the last look.
async fn agree(store: &Arc<dyn Store>, m: &Model, epochs: &mut BTreeMap<RunId, i64>) -> Result<(), String> {
    for (s, id) in m.sessions.iter().enumerate() {
        let active = store.active_runs(id).await.map_err(|e| e.to_string())?;
        let running = active.iter().filter(|r| r.state == RunState::Running).count();
        if running > 1 {
            return Err(format!("session {s} has {running} running runs"));
        }
        let seen: BTreeMap<RunId, (RunState, Option<String>, i64, u32, bool)> = active
            .into_iter()
            .map(|r| (r.id, (r.state, r.lease_owner, r.lease_epoch, r.crash_count, r.started)))
            .collect();
        let expected: BTreeMap<RunId, (RunState, Option<String>, i64, u32, bool)> = m
            .runs
            .iter()
            .filter(|(_, r)| r.session == s && !r.state.is_final())
            .map(|(id, r)| (id.clone(), (r.state, r.owner.clone(), r.epoch, r.crash_count, r.started)))
            .collect();
        if seen != expected {
            return Err(format!("session {s}: the store has {seen:?}, the model {expected:?}"));
        }
    }
    for (id, r) in &m.runs {
        let run = store.get_run(id).await.map_err(|e| e.to_string())?;
        let last = epochs.insert(id.clone(), run.lease_epoch).unwrap_or(0);
        if run.lease_epoch < last {
            return Err(format!("run {id}: epoch went from {last} to {}", run.lease_epoch));
        }
        if r.state.is_final() && run.state != r.state {
            return Err(format!("run {id} settled {:?} but the store says {:?}", r.state, run.state));
        }
        if run.lease_epoch != r.epoch {
            return Err(format!("run {id}: the store's epoch is {}, the model's {}", run.lease_epoch, r.epoch));
        }
    }
    Ok(())
}
