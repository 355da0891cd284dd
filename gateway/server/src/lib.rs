//! The `gateway` binary's library: configuration, CLI, and the composition root that wires
//! the store, the runtime and the protocol adapters into one process.

pub mod check;
pub mod cli;
pub mod compose;
pub mod config;
pub mod db;
pub mod http;
pub mod listen;
mod measure;
mod places;
pub mod publish;
pub mod serve;
pub mod sessions_cmd;
pub mod state;
pub mod telemetry;
pub mod term;
pub mod ui;

pub use serve::Extensions;
