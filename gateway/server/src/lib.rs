//! The `gateway` binary's library: configuration, CLI, and the composition root that wires
//! the store, the runtime and the protocol adapters into one process.

pub mod check;
pub mod cli;
pub mod compose;
pub mod config;
pub mod db;
pub mod http;
pub mod listen;
pub mod login;
mod measure;
pub mod publish;
pub mod serve;
pub mod sessions_cmd;
pub mod state;
pub mod telemetry;
pub mod term;
pub mod ui;

pub use serve::Extensions;

/// The process's allocator. glibc's keeps what a burst of requests allocated (a thousand
/// slow uploads took the process to 2.4 GB, and it stayed there after they ended: issue 28,
/// finding 4); jemalloc returns freed pages to the system within seconds, from its own
/// background thread, so an idle gateway shrinks back after a burst.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
