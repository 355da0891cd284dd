//! `gateway-bench`: end-to-end benchmarks of the `gateway` binary through real sockets and
//! processes, each compared in the same run with a baseline the bench builds itself.
//!
//! The crate is a black box around the gateway: it never links the gateway's crates, only
//! starts the release binary with a generated configuration and speaks its wire protocols.
//! The baselines ([`durable`], [`durable_a2a`], [`echo`], [`acp_stub`]) speak the same wire subset the load
//! generator ([`driver`]) uses, so the client code path is identical for both sides of every
//! ratio.

pub mod acp_stub;
pub mod driver;
pub mod durable;
pub mod durable_a2a;
pub mod echo;
pub mod ids;
pub mod lines;
pub mod signals;
pub mod sse;
pub mod telemetry;
