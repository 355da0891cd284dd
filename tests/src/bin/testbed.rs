//! `gateway` with the scripted test backend registered as the native backend. Used only by
//! the process-level tests; shipped builds never contain it.
//!
//! With `GATEWAY_TESTBED_NATIVE=model` the native backend stays the shipped one (the
//! configured model, the offline fake by default, with its sandbox tools): for tests of what
//! a turn does in its environment through a real process.

use std::sync::Arc;

use gateway_core::agent::BackendRef;
use gateway_runtime::testing::ScriptedBackend;

fn main() -> std::process::ExitCode {
    let shipped = std::env::var("GATEWAY_TESTBED_NATIVE").is_ok_and(|v| v == "model");
    let backends = if shipped { Vec::new() } else { vec![(BackendRef::Native, Arc::new(ScriptedBackend) as _)] };
    gateway::cli::main_with(gateway::Extensions { backends })
}
