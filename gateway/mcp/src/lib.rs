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

/// The MCP servers a session's client runs on its own machine and carries over its own
/// connection to the gateway (`ClientToolServer::OnClient`): whoever holds such connections
/// (the editor face) opens a byte stream to one, over which [`McpClient::connect_stdio`]
/// speaks MCP as it would to a process's pipes.
pub trait ClientChannels: Send + Sync {
    /// A stream to the server `server_id` of the client of `session`; an error says why there
    /// is none (the client is not connected to this gateway process, or refused).
    fn open(
        &self,
        session: &str,
        server_id: &str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<tokio::io::DuplexStream, String>> + Send + 'static>>;
}
