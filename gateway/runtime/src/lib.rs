//! gateway-runtime: the application core between the adapters and the store.
//!
//! - [`Coordinator`]: the one service adapters call (sessions, inputs, subscriptions).
//! - [`WorkerPool`]: claims runs and executes them on a [`Backend`] under fenced leases.
//! - [`PreviewBus`]: in-process streaming previews (never stored).
//! - [`delivery::Deliveries`]: the outbox's HTTP deliveries, one deliverer per channel.
//! - [`Runtime`]: all of them assembled for one process, and stopped in order.

pub mod assembly;
pub mod auth;
pub mod backend;
pub mod checkout;
pub mod coordinator;
pub mod delivery;
pub mod environment;
pub mod error;
pub mod executors;
pub mod files;
pub mod load;
pub mod metrics;
pub mod native;
pub mod places;
pub mod previews;
pub mod published;
pub mod secrets;
pub mod skills;
pub mod ssrf;
pub mod subscription;
pub mod worker;

#[cfg(feature = "testing")]
pub mod testing;

pub use assembly::{Runtime, RuntimeConfig};
pub use backend::{Backend, BackendError, BackendRegistry, RunContext, TurnOutcome};
pub use coordinator::{AgentSelection, Coordinator, CoordinatorOptions, CreateSession, TurnPass};
pub use environment::{Environments, EnvironmentsConfig};
pub use error::{Result, RuntimeError};
pub use executors::{Connection, ExecutorSettings, Executors};
pub use load::{AdmissionLimits, Busy, BusyCause, RequestPermit};
pub use metrics::Metrics;
pub use native::{NativeBackend, NativeConfig};
pub use previews::{Preview, PreviewBus};
pub use published::PublishedAgents;
pub use secrets::{SecretBox, SecretError};
pub use subscription::{Delivery, SubscribeOptions};
pub use worker::{PoolParts, RetryPolicy, WorkerConfig, WorkerIdentity, WorkerPool};

/// An outbox delivery (named apart from subscription deliveries).
pub use gateway_store::Delivery as OutboxDelivery;
/// The store types the Coordinator's API speaks (filters, pages), so adapters need not
/// depend on the store crate.
pub use gateway_store::{
    AdmissionWrites, AgentFilter, DeliveryState, Document, DocumentLease, DocumentWrite, Documents, EnvironmentFilter,
    EventFilter, Keyset, NewDelivery, Order, Outbox, Page, PageCursor, PageRequest, ReadDocuments, SessionFilter,
    SessionPatch, StoredFile, StoredSkill, StoredSkillVersion, TimeRange,
};
pub use gateway_store::{
    ApiKey, Beat, EndpointOrigin, NewEndpoint, Stop, WebhookEndpoint, WorkItem, WorkState, WorkStats,
};
