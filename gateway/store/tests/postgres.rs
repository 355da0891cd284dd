//! The Store conformance suite on PostgreSQL, with wake-ups (LISTEN/NOTIFY) on.
use gateway_store::conformance::harness::PgHarness;

gateway_store::conformance_suite!(PgHarness::new(true));
