//! gateway-services: the services the gateway runs beside its dispatch engine, one module each.
//!
//! None of them claims, runs or fences a turn; that is `gateway-runtime`'s job. They answer
//! questions every face and the engine share (who is calling, how many places are left, where a
//! repository may be cloned from), so they sit below the runtime and depend only on the domain
//! (`gateway-core`) and the store.
//!
//! - [`auth`]: API keys, environment keys and who a keyless caller is.
//! - [`secrets`]: credentials sealed at rest ([`SecretBox`]).
//! - [`files`] and [`skills`]: uploads streamed into the store; skill directories checked.
//! - [`checkout`]: repository resources cloned for a session, through the [`ssrf`] guard.
//! - [`ssrf`]: the filter and HTTP client for outbound requests to addresses clients name.
//! - [`places`]: bounded places per holder (connections, streams, requests in flight).
//! - [`metrics`]: every series `/metrics` exports ([`Metrics`]).
//! - [`published`]: agents published by configuration, by name.
//! - [`vaults`]: credentials for MCP servers, sealed on the way in ([`vaults::VaultService`]).
//! - [`web`]: the web tools of the built-in toolset (fetch through the [`ssrf`] guard, search
//!   through the operator's provider) ([`web::WebTools`]).

pub mod auth;
pub mod checkout;
pub mod files;
pub mod metrics;
pub mod places;
pub mod published;
pub mod secrets;
pub mod skills;
pub mod ssrf;
pub mod vaults;
pub mod web;

pub use metrics::Metrics;
pub use published::PublishedAgents;
pub use secrets::{SecretBox, SecretError};
