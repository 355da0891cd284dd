//! The run state machine against a model (issue 13): random interleavings of admit, claim (one
//! or a batch), renew (one or all of a worker's leases), lease expiry, worker crash, commit,
//! settle and release over three sessions and three workers, applied to a real store and to an
//! in-memory model (`model.rs`), which must agree after every step.
//!
//! Properties checked after every operation (on SQLite and on PostgreSQL):
//! - the store's active runs of every session are exactly the model's (state, owner, epoch,
//!   crash count, started), so at most one run per session is running;
//! - at most one live epoch per run: a renew, commit, settle or release with any fence but the
//!   run's current one is refused `Fenced` and writes nothing (the session's last seq stands);
//! - a claim takes a run the model allows (the oldest queued run of a session without a running
//!   run, or a running run whose lease has lapsed), and takes one whenever one is allowed; a
//!   batch takes one per session, as many as allowed up to its limit;
//! - epochs only increase, by one per claim; settled runs stay settled.
//!
//! Lease expiry follows the database clock without sleeping: `Expire` renews the holder's lease
//! for zero time, so it lapses at the database's `now` and the next claim, reading a later
//! `now`, may take it. A crashed worker stops renewing but keeps its fences, and may still try
//! to commit with them (a paused process waking up).
//!
//! Reproducible: the seed is fixed ([`SEED`]) and cases default to [`DEFAULT_CASES`] (2–5 s on
//! SQLite, 8–20 s on PostgreSQL on a shared 2-core machine). A longer run, or another seed:
//! `PROPTEST_CASES=2000 cargo nextest run -p gateway-store run_state` (add `PROPTEST_RNG_SEED=<u64>`).

mod model;

use gateway_store::conformance::Harness;
use gateway_store::conformance::harness::{PgHarness, SqliteHarness};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner, contextualize_config};

/// The fixed seed of `scripts/test` runs (`PROPTEST_RNG_SEED` overrides it).
const SEED: u64 = 0x6761_7465_7761_7913;
/// Cases per engine by default (`PROPTEST_CASES` overrides it).
const DEFAULT_CASES: u32 = 32;
/// Operations per case: enough for runs to be claimed, lapse and be reclaimed several times.
const OPS: std::ops::RangeInclusive<usize> = 10..=80;

fn config() -> Config {
    // Environment variables win over these defaults.
    contextualize_config(Config {
        cases: DEFAULT_CASES,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        // Every shrink step opens a fresh store: bound the time a failure takes to report.
        max_shrink_iters: 256,
        ..Config::default()
    })
}

fn check<H: Harness>(harness: H) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut runner = TestRunner::new(config());
    let ops = prop::collection::vec(model::op(), OPS);
    let result = runner.run(&ops, |ops| {
        rt.block_on(model::replay(&harness, ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn run_state_machine_agrees_with_the_model_on_sqlite() {
    check(SqliteHarness::new(false));
}

#[test]
fn run_state_machine_agrees_with_the_model_on_postgres() {
    check(PgHarness::new(false));
}
