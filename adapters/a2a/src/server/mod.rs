//! The server side of A2A: agent cards, the JSON-RPC and HTTP+JSON bindings with their SSE
//! streams, version negotiation, authentication, and the operations both bindings dispatch to.

pub mod auth;
pub mod body;
pub mod card;
pub mod jsonrpc;
pub mod ops;
pub mod rest;
pub mod sse;
pub mod version;
