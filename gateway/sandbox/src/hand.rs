//! The Hand: one session's tool executor.
//!
//! Interface fixed by the runtime; implementation in progress.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{Sandbox, SandboxError};

pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    /// The call failed (bad input, refused path, timeout, tool unavailable).
    pub is_error: bool,
}

pub struct Hand {
    sandbox: Arc<dyn Sandbox>,
}

impl Hand {
    pub fn new(sandbox: Arc<dyn Sandbox>) -> Result<Self, SandboxError> {
        Ok(Self { sandbox })
    }

    pub fn workspace(&self) -> &Path {
        self.sandbox.workspace()
    }

    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// Runs built-in tool `tool` with `input`. Bad input is an `is_error` output, never a panic.
    pub async fn run(&self, tool: &str, input: &JsonObject, cancel: &CancellationToken) -> ToolOutput {
        let _ = (input, cancel);
        ToolOutput { text: format!("tool {tool} is not implemented yet"), is_error: true }
    }

    /// Stops whatever the Hand keeps running (the persistent shell); the files stay.
    pub async fn hibernate(&self) {}
}
