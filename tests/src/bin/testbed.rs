//! `gateway` with the scripted test backend registered as the native backend. Used only by
//! the process-level tests; shipped builds never contain it.

use std::sync::Arc;

use gateway_core::agent::BackendRef;
use gateway_runtime::testing::ScriptedBackend;

fn main() -> std::process::ExitCode {
    gateway::cli::main_with(gateway::Extensions { backends: vec![(BackendRef::Native, Arc::new(ScriptedBackend))] })
}
