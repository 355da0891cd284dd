//! The runtime suite on this store configuration.
mod common;

use gateway_store::conformance::harness::*;

runtime_suite!(PgHarness::new(false));
