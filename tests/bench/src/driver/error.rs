//! The driver's errors: what went wrong, with which process or request, so a failed
//! scenario can be reported in the results and the run go on.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0} not found (build it with `cargo build --release -p gateway -p gateway-bench`)")]
    MissingBinary(String),
    #[error("starting {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{name} did not become ready within {secs} s; its log ends with:\n{log}")]
    NotReady { name: String, secs: u64, log: String },
    #[error("{name} exited early ({status}); its log ends with:\n{log}")]
    Exited { name: String, status: String, log: String },
    #[error("reading /proc for pid {0}: {1}")]
    Proc(u32, String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("PostgreSQL at {0} is not reachable: {1}")]
    NoPostgres(String, String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Op(#[from] super::clients::OpError),
    #[error("writing results: {0}")]
    Json(#[from] serde_json::Error),
    #[error("plotting {0}: {1}")]
    Plot(String, String),
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
