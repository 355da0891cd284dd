//! The Store conformance suite on SQLite.
use gateway_store::conformance::harness::SqliteHarness;

gateway_store::conformance_suite!(SqliteHarness::new(true));
