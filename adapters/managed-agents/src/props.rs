//! What every property test of this crate runs under: a fixed seed (so a failure reproduces),
//! which `PROPTEST_RNG_SEED` overrides, `PROPTEST_CASES` for a longer run, and no failure
//! files written into the source tree.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, contextualize_config};
use serde_json::Value;

/// `cases` runs from `seed`, unless the environment says otherwise.
pub(crate) fn config(seed: u64, cases: u32) -> Config {
    contextualize_config(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Any JSON value (finite numbers), nested up to 4 deep, about `size` values in all and up to
/// `breadth` in each array or object, with strings and keys from `text`.
pub(crate) fn json<S>(text: fn() -> S, size: u32, breadth: u32) -> impl Strategy<Value = Value>
where
    S: Strategy<Value = String> + 'static,
{
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    let items = 0..breadth as usize;
    leaf.prop_recursive(4, size, breadth, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), items.clone()).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, items.clone())
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
