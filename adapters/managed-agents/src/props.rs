//! What every property test of this crate runs under: a fixed seed (so a failure reproduces),
//! which `PROPTEST_RNG_SEED` overrides, `PROPTEST_CASES` for a longer run, and no failure
//! files written into the source tree.

use proptest::test_runner::{Config, RngSeed, contextualize_config};

/// `cases` runs from `seed`, unless the environment says otherwise.
pub(crate) fn config(seed: u64, cases: u32) -> Config {
    contextualize_config(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    })
}
