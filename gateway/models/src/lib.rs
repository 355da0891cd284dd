//! gateway-models: model clients behind one small stateless interface.
//!
//! A [`ModelClient`] takes a whole [`ModelRequest`] (system prompt, conversation, tools) and
//! returns the model's complete [`ModelResponse`]; the streaming variant also reports text
//! deltas as they arrive. Clients keep no conversation state: the native loop rebuilds the
//! request from the session's committed event log every round.
//!
//! Implementations: [`fake::FakeModel`] (offline, deterministic; the default),
//! [`anthropic::AnthropicClient`] (the Anthropic Messages API) and [`openai::OpenAiClient`]
//! (the OpenAI Chat Completions API, which OpenAI serves and local servers such as vLLM and
//! Ollama imitate), both over HTTP(S) with SSE streaming. The two HTTP clients share one
//! home for retries, backoff, bounded reads and stream reading (`http`, crate-private); each
//! owns only its API's wire format.
//!
//! Test support behind the `stub` feature: `stub::StubServer`, a loopback stand-in for both
//! APIs that answers with the fake model's script, and `conformance`, the behaviours every
//! [`ModelClient`] must show, run on every implementation.

pub mod anthropic;
#[cfg(feature = "stub")]
pub mod conformance;
pub mod fake;
mod http;

pub use http::Patience;
pub mod openai;
#[cfg(feature = "stub")]
pub mod stub;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub type JsonObject = serde_json::Map<String, serde_json::Value>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One content block of a message, in the Messages API's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    ToolUse {
        id: String,
        name: String,
        input: JsonObject,
    },
    ToolResult {
        tool_use_id: String,
        content: Vec<ToolResultContent>,
        #[serde(default)]
        is_error: bool,
    },
    /// The model's reasoning. Sent back exactly as received, signature included, on the
    /// turn's later requests: the API refuses a tool loop whose assistant turn lost it.
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Reasoning the API returned encrypted; sent back as it came.
    RedactedThinking {
        data: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolResultContent {
    Text { text: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub input_schema: JsonObject,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub model: String,
    pub system: Option<String>,
    /// Alternating user/assistant messages, starting with a user message.
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    pub max_tokens: u32,
    /// Extended thinking's budget in tokens (at least 1024, below `max_tokens`); `None`: off.
    pub thinking: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    PauseTurn,
    /// A reason this client does not know; kept verbatim.
    #[serde(untagged)]
    Other(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    pub content: Vec<Block>,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

/// Progress of a streamed response.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A text block starts at `index` of the response content.
    TextStart { index: usize },
    /// More text for the text block at `index`.
    TextDelta { index: usize, text: String },
    /// The response's reasoning block number `nth` (counting `thinking` blocks only, from 0)
    /// starts.
    ThinkingStart { nth: usize },
    /// More reasoning for thinking block number `nth`.
    ThinkingDelta { nth: usize, text: String },
}

/// Why a model call failed. `is_transient` errors may succeed when tried again later.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("rate limited by the model API (HTTP 429): {message}")]
    RateLimited { message: String, retry_after: Option<Duration> },
    #[error("the model API is overloaded (HTTP {status}): {message}")]
    Overloaded { status: u16, message: String, retry_after: Option<Duration> },
    #[error("the model API failed (HTTP {status}): {message}")]
    Server { status: u16, message: String, retry_after: Option<Duration> },
    #[error("network error talking to the model API: {0}")]
    Network(String),
    /// The response stream ended or broke before the API marked its end (`message_stop`,
    /// `data: [DONE]`).
    #[error("the model's response stream was cut: {0}")]
    StreamCut(String),
    #[error("the model API refused the credentials (HTTP {status}): {message}")]
    Authentication { status: u16, message: String },
    #[error("the model API rejected the request (HTTP {status}): {message}")]
    InvalidRequest { status: u16, message: String },
    /// The API answered something this client cannot parse.
    #[error("unexpected response from the model API: {0}")]
    Protocol(String),
}

impl ModelError {
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ModelError::RateLimited { .. }
                | ModelError::Overloaded { .. }
                | ModelError::Server { .. }
                | ModelError::Network(_)
                | ModelError::StreamCut(_)
        )
    }

    /// The error's kind, a closed set (what metrics label failed requests with).
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Overloaded { .. } => "overloaded",
            ModelError::Server { .. } => "server",
            ModelError::Network(_) => "network",
            ModelError::StreamCut(_) => "stream_cut",
            ModelError::Authentication { .. } => "authentication",
            ModelError::InvalidRequest { .. } => "invalid_request",
            ModelError::Protocol(_) => "protocol",
        }
    }

    /// How long the API asked callers to wait, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after, .. }
            | ModelError::Overloaded { retry_after, .. }
            | ModelError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Why an HTTP model client could not be built from its config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid model API base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: String },
    /// The secret itself is deliberately not part of the message.
    #[error("the model API credential contains characters an HTTP header cannot carry")]
    Credential,
    #[error("invalid value for the {0} header")]
    Header(&'static str),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// A stateless model client.
#[async_trait]
pub trait ModelClient: Send + Sync {
    /// The whole response at once.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;

    /// The whole response, reporting text as it arrives. A client never replays deltas: if
    /// it retries internally, it does so only before the first event was reported.
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError>;
}
