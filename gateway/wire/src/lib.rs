//! Wire mechanisms that do not belong to any one protocol, each with one home.
//!
//! Faces (`adapters/`), backends and the model client all speak JSON-RPC, server-sent events or
//! retry with backoff; before this crate each kept its own copy, and a fix found in one (ids
//! echoed byte for byte, a bounded SSE line) had to be found again in the others. This crate
//! depends on no gateway crate and knows no protocol's vocabulary (`scripts/check-invariants`).

pub mod backoff;
pub mod causes;
pub mod jsonrpc;
pub mod sse;
