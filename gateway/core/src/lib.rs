//! gateway-core: the neutral domain model every other crate speaks.
//!
//! Nothing here performs I/O. Protocol vocabulary (Managed Agents event names, ACP methods,
//! A2A task states) does not appear here: adapters project these types onto their wire.

pub mod admission;
pub mod agent;
pub mod content;
pub mod durations;
pub mod environment;
pub mod event;
pub mod ids;
pub mod models;
pub mod mounts;
pub mod placement;
pub mod run;
pub mod session;
pub mod time;
pub mod trace;
pub mod turn;
pub mod vault;

pub use ids::*;
pub use time::Timestamp;

/// String-to-string metadata as clients attach it to agents, environments and sessions.
pub type Metadata = std::collections::BTreeMap<String, String>;

/// A JSON object whose content is defined by someone else (a tool's input, a JSON schema).
/// This is the only place the core lets untyped JSON in, and only where the content is by
/// nature arbitrary.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;
