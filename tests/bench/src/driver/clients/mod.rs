//! Clients of the three protocols: each used unchanged against the gateway and against its
//! baseline, so both sides of a ratio run the same client code.

pub mod a2a;
pub mod acp;
pub mod ma;

use super::load::Outcome;

/// Why one request failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The server answered with an error status or error object.
    #[error("{label}: {detail}")]
    Answered { label: String, detail: String },
    /// No usable answer: connection trouble, a stream that ended early.
    #[error("{label}: {detail}")]
    Transport { label: String, detail: String },
}

impl OpError {
    pub fn answered(label: impl Into<String>, detail: impl Into<String>) -> Self {
        OpError::Answered { label: label.into(), detail: detail.into() }
    }
    pub fn transport(label: impl Into<String>, detail: impl ToString) -> Self {
        OpError::Transport { label: label.into(), detail: detail.to_string() }
    }

    /// What happened, without the detail (the key errors are counted by).
    pub fn label(&self) -> &str {
        match self {
            OpError::Answered { label, .. } | OpError::Transport { label, .. } => label,
        }
    }

    pub fn outcome(&self) -> Outcome {
        match self {
            OpError::Answered { label, .. } => Outcome::Refused(label.clone()),
            OpError::Transport { label, .. } => Outcome::Broken(label.clone()),
        }
    }
}

impl From<reqwest::Error> for OpError {
    fn from(e: reqwest::Error) -> Self {
        let label = if e.is_timeout() {
            "client timeout"
        } else if e.is_connect() {
            "connect error"
        } else {
            "transport error"
        };
        OpError::transport(label, e.without_url())
    }
}

/// One HTTP client for every target: keep-alive pool large enough for the open-loop bursts,
/// no proxies (only loopback is measured), Nagle off like the servers.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4096)
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// The first 300 characters of a body, for error details.
pub fn snippet(body: &str) -> String {
    body.chars().take(300).collect()
}
