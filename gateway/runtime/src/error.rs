//! Runtime errors: what the Coordinator tells adapters. Each adapter maps these once to its
//! protocol's error format.

use gateway_core::admission::AdmissionError;
use gateway_core::placement::PlacementError;
pub use gateway_store::Guard;
pub use gateway_store::StoreError;

use crate::load::Busy;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// The request is malformed or names something this gateway does not offer.
    #[error("{0}")]
    Invalid(String),
    /// Placement refused the session (names the rule).
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error("agent {id} is at version {current}, not {expected}")]
    StaleVersion { id: String, current: u32, expected: u32 },
    /// A state guard refused the operation.
    #[error(transparent)]
    Guard(Guard),
    /// The inputs were refused by the admission rules.
    #[error(transparent)]
    Rejected(AdmissionError),
    /// An admission bound is reached: refused at once, retry after the hint.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The store is unreachable; the operation may be retried.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for RuntimeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, id } => RuntimeError::NotFound { kind, id },
            StoreError::StaleVersion { id, current, expected } => RuntimeError::StaleVersion { id, current, expected },
            StoreError::Guard(g) => RuntimeError::Guard(g),
            StoreError::Rejected(a) => RuntimeError::Rejected(a),
            StoreError::Unavailable(m) => RuntimeError::Unavailable(m),
            StoreError::Unstorable(m) => RuntimeError::Invalid(m),
            other => RuntimeError::Internal(other.to_string()),
        }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
