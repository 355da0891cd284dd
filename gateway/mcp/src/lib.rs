//! The gateway's MCP client: the native model loop's way to the tools of an agent's MCP servers
//! and of an editor's MCP servers (DESIGN §2, tool sources).
//!
//! - [`McpClient`]: one connection, over Streamable HTTP (with the caller's reqwest client, so
//!   the SSRF guard applies, and an optional [`BearerToken`]) or over a spawned process's pipes;
//!   bounded [`McpClient::list_tools`] and [`McpClient::call_tool`]; tool-list change signal.
//! - [`McpError`]: what went wrong, as kinds a caller maps once to its protocol's errors.
//! - [`OfferedNames`]: the names tools of several servers are offered to a model under.
//!
//! MCP's own vocabulary (rmcp's types, method names) stays inside this crate.

mod client;
mod content;
mod error;
mod limits;
mod names;
mod secret;
mod tools;

pub use client::McpClient;
pub use content::{Content, ToolOutput};
pub use error::McpError;
pub use limits::Limits;
pub use names::{MAX_NAME_LEN, OfferedNames};
pub use secret::BearerToken;
pub use tools::ToolSpec;
