//! The Store conformance suite on PostgreSQL with wake-ups off: polling alone must suffice.
use gateway_store::conformance::harness::PgHarness;

gateway_store::conformance_suite!(PgHarness::new(false));
