//! gateway-runtime: the application core between the adapters and the store.
//!
//! - [`Coordinator`]: the one service adapters call (sessions, inputs, subscriptions).
//! - [`WorkerPool`]: claims runs and executes them on a [`Backend`] under fenced leases.
//! - [`PreviewBus`]: in-process streaming previews (never stored).
//! - [`delivery::Deliveries`]: the outbox's HTTP deliveries, one deliverer per channel.
//! - [`Runtime`]: all of them assembled for one process, and stopped in order.

pub mod assembly;
pub mod backend;
pub mod coordinator;
pub mod delivery;
pub mod environment;
pub mod error;
pub mod executors;
pub mod load;
pub mod previews;
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
pub use previews::{Preview, PreviewBus};
pub use subscription::{Ahead, Delivery, SubscribeOptions};
pub use worker::{PoolParts, RetryPolicy, WorkerConfig, WorkerIdentity, WorkerPool};
