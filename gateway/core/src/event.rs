//! Neutral events: the committed facts of a session's thread.
//!
//! The event log is the single source of truth. Every protocol view (Managed Agents events,
//! ACP session updates, A2A tasks and their history) is a projection of these payloads, so
//! they carry what all three need and use none of their names.

use serde::{Deserialize, Serialize};

use crate::content::ContentBlock;
use crate::{EventId, JsonObject, RunId, SessionId, Timestamp};

/// Where a tool comes from; decides who executes it and how its use is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ToolOrigin {
    /// A built-in tool run by the session's Hand (or a self-hosted executor).
    Builtin,
    /// A tool served by a named MCP server.
    Mcp { server: String },
    /// A tool the client executes and answers.
    Custom,
    /// A tool an external agent process ran on its own (ACP backend); shown, never executed here.
    Backend,
}

/// The decision a tool call was given when it was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolPermission {
    Allow,
    /// Parked until a client confirms or denies.
    Ask,
    Deny,
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StopReason {
    /// The agent finished.
    EndTurn,
    /// The turn waits for client answers to these tool-use events.
    RequiresAction { event_ids: Vec<EventId> },
    /// A client interrupted the turn.
    Interrupted,
    /// Transient failures were retried until the budget ran out.
    RetriesExhausted,
    /// The model declined.
    Refusal,
    /// The turn hit the model/tool round limit.
    RoundLimit,
    /// The turn failed (see the preceding `session_error`).
    Failed,
    /// The session's budget is used up: no further model request was made.
    BudgetReached,
}

/// Neutral error categories carried by `session_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Unknown,
    ModelOverloaded,
    ModelRateLimited,
    ModelRequestFailed,
    RoundLimitReached,
    /// The context was compacted as often in a row as allowed, and still did not fit.
    CompactionLimitReached,
    /// The host holding the session's environment is gone; the environment is not recreated
    /// elsewhere.
    EnvironmentLost,
    /// The environment could not be realized as required (fails closed).
    PlacementFailed,
    /// The run crashed more often than its budget allows; its effects are unknown.
    Indeterminate,
    /// The backend (agent process, remote agent) failed.
    BackendFailed,
    /// No self-hosted executor connected within the connect timeout; the input it was
    /// needed for was not run.
    EnvironmentConnectTimeout,
    /// A mounted input (an uploaded file, a repository, a skill) could not be placed in the
    /// session's environment; the turn did not run without it.
    MountFailed,
    /// An MCP server could not be reached (or spoke no MCP); the turn went on without its tools.
    McpConnectionFailed,
    /// An MCP server refused the session's credential (or asked for one it does not have); the
    /// turn went on without its tools, and the next turn tries again.
    McpAuthenticationFailed,
}

impl ErrorKind {
    /// The kind's name as serialized (a closed set: what metrics label errors with).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unknown => "unknown",
            ErrorKind::ModelOverloaded => "model_overloaded",
            ErrorKind::ModelRateLimited => "model_rate_limited",
            ErrorKind::ModelRequestFailed => "model_request_failed",
            ErrorKind::RoundLimitReached => "round_limit_reached",
            ErrorKind::CompactionLimitReached => "compaction_limit_reached",
            ErrorKind::EnvironmentLost => "environment_lost",
            ErrorKind::PlacementFailed => "placement_failed",
            ErrorKind::Indeterminate => "indeterminate",
            ErrorKind::BackendFailed => "backend_failed",
            ErrorKind::EnvironmentConnectTimeout => "environment_connect_timeout",
            ErrorKind::MountFailed => "mount_failed",
            ErrorKind::McpConnectionFailed => "mcp_connection_failed",
            ErrorKind::McpAuthenticationFailed => "mcp_authentication_failed",
        }
    }
}

/// Whether the failed work will be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryStatus {
    Retrying,
    Exhausted,
    Terminal,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// The list cost of the requests whose model has list prices, in millionths of a US
    /// dollar ([`crate::models::Prices::cost_micros`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub list_cost_micros: u64,
    /// Requests served by a model without list prices: while any is counted, the cost is
    /// unknown (and a budget cannot measure it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_requests: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` (saturating: counters only grow).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_input_tokens = self.cache_read_input_tokens.saturating_add(other.cache_read_input_tokens);
        self.cache_creation_input_tokens =
            self.cache_creation_input_tokens.saturating_add(other.cache_creation_input_tokens);
        self.list_cost_micros = self.list_cost_micros.saturating_add(other.list_cost_micros);
        self.unpriced_requests = self.unpriced_requests.saturating_add(other.unpriced_requests);
    }

    /// The list cost in millionths of a US dollar, or `None` while a request of an unpriced
    /// model is counted.
    pub fn list_cost(&self) -> Option<u64> {
        (self.unpriced_requests == 0).then_some(self.list_cost_micros)
    }

    /// The request's whole input, fresh or from the prompt cache.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.cache_read_input_tokens).saturating_add(self.cache_creation_input_tokens)
    }

    /// The usage of the model requests `events` end.
    pub fn of_requests<'a>(events: impl IntoIterator<Item = &'a EventPayload>) -> Usage {
        let mut sum = Usage::default();
        for e in events {
            if let EventPayload::ModelRequestEnded { usage, .. } = e {
                sum.add(usage);
            }
        }
        sum
    }
}

/// The payload of one committed event. The serde tag is the event's neutral kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventPayload {
    // -- inputs from clients --
    UserMessage {
        content: Vec<ContentBlock>,
    },
    UserInterrupt {},
    ToolConfirmation {
        tool_use_id: EventId,
        allow: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deny_message: Option<String>,
    },
    /// A client's answer to a custom tool call, or a self-hosted executor's tool result.
    ClientToolResult {
        tool_use_id: EventId,
        content: Vec<ContentBlock>,
        is_error: bool,
        /// `Custom` for a custom tool's result, `Builtin` for a self-hosted executor's.
        #[serde(default = "ToolOrigin::custom")]
        origin: ToolOrigin,
    },

    // -- turn lifecycle --
    TurnStarted {
        /// The run's input boundary: the last seq of the inputs it answers (see `turn`).
        /// Inputs committed after it belong to a later turn. Events stored before the field
        /// existed were given `seq - 1` by migration 0004.
        inputs_through: u64,
    },
    TurnRescheduled {},
    TurnEnded {
        stop: StopReason,
    },
    SessionError {
        kind: ErrorKind,
        message: String,
        retry: RetryStatus,
        /// The tool server the error is about (the MCP errors), by the name the agent gave it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    SessionTerminated {},
    SessionDeleted {},
    /// A client changed the session's settings; each field is present when it changed (the
    /// agent as the session now runs it, whole). They apply from the next turn.
    SessionUpdated {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<crate::Metadata>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<Box<crate::agent::Agent>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vault_ids: Option<Vec<crate::VaultId>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<crate::session::BudgetChange>,
    },

    // -- self-hosted environments --
    /// The connection of the session's self-hosted executor changed: a report of state,
    /// never a request for compute.
    EnvironmentConnection {
        environment_id: crate::EnvironmentId,
        status: crate::environment::ConnectionStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Input needs the session's self-hosted executor and none is connected: the gateway asks
    /// for one (announced before it waits).
    ConnectionRequested {
        environment_id: crate::EnvironmentId,
    },

    // -- agent output --
    AgentMessage {
        content: Vec<ContentBlock>,
    },
    AgentThinking {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// What the model needs back with this reasoning on the turn's later requests, opaque
        /// to the gateway: its signature over `text`, or the reasoning itself when the model
        /// returned it encrypted (`text` is then `None`). Kept so a resumed run, after a crash
        /// or a park, asks the model exactly what the log says happened.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seal: Option<ThinkingSeal>,
    },
    ToolUse {
        name: String,
        input: JsonObject,
        origin: ToolOrigin,
        permission: ToolPermission,
        /// The policy that decided `permission`, when one applied (built-in and MCP tools).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<crate::agent::PermissionPolicy>,
    },
    /// Journal entry: the tool call is about to execute (invariant 5). A call with this
    /// marker and no result was interrupted by a lost claim and is never run again.
    ToolStarted {
        tool_use_id: EventId,
    },
    ToolResult {
        tool_use_id: EventId,
        origin: ToolOrigin,
        content: Vec<ContentBlock>,
        is_error: bool,
    },
    ModelRequestStarted {},
    ModelRequestEnded {
        start_id: EventId,
        is_error: bool,
        usage: Usage,
    },
    /// The session's model usage so far (every request of every turn), after a turn that
    /// asked a model: committed with the turn's end, so the log says what the usage was then.
    /// The conversation's older part, summarised by the model so the next request fits its
    /// context window: the model is shown `summary` in place of every event up to seq
    /// `through` (the events themselves stay in the log).
    ContextCompacted {
        summary: String,
        through: u64,
    },
    SessionUsage {
        usage: Usage,
        /// The session's budget then, if it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<crate::session::Budget>,
    },
    /// What the agent behind a backend told its client about itself, beyond messages and tool
    /// calls: the modes it works in, its settings, its commands, its plan, a title, its usage,
    /// a notice (ADR 0028). `body` is the agent's own words, kept as it sent them: the core
    /// stores and orders them and never reads them; a face that speaks the agent's protocol
    /// shows them (live and when a client opens the session later), the others have no place
    /// for them.
    AgentReport {
        topic: ReportTopic,
        body: serde_json::Value,
    },
}

/// What an [`EventPayload::AgentReport`] is about. The last report of a topic is the agent's
/// current word on it (a plan, its modes and settings are replaced whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportTopic {
    /// The modes it can work in, and the current one.
    Modes,
    /// A change of the current mode.
    Mode,
    /// Its settings (options the client may change) and their current values.
    Settings,
    /// The commands it understands.
    Commands,
    /// Its plan of work.
    Plan,
    /// A title for the session.
    Title,
    /// The tokens and cost it reports.
    Usage,
    /// The tokens it counted for a whole turn, as it answered the turn.
    TurnUsage,
    /// Something it wants the user to know.
    Notice,
}

/// The kind of an event, as stored in the log's `kind` column and used in type filters.
/// How a model's reasoning goes back to it (see `EventPayload::AgentThinking`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingSeal {
    /// The model's signature over the reasoning's text.
    Signature(String),
    /// Reasoning the model returned encrypted.
    Redacted(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    UserMessage,
    UserInterrupt,
    ToolConfirmation,
    ClientToolResult,
    TurnStarted,
    TurnRescheduled,
    TurnEnded,
    SessionError,
    SessionTerminated,
    SessionDeleted,
    SessionUpdated,
    EnvironmentConnection,
    ConnectionRequested,
    AgentMessage,
    AgentThinking,
    ToolUse,
    ToolStarted,
    ToolResult,
    ModelRequestStarted,
    ModelRequestEnded,
    SessionUsage,
    ContextCompacted,
    AgentReport,
}

impl EventKind {
    pub const ALL: [EventKind; 23] = [
        EventKind::UserMessage,
        EventKind::UserInterrupt,
        EventKind::ToolConfirmation,
        EventKind::ClientToolResult,
        EventKind::TurnStarted,
        EventKind::TurnRescheduled,
        EventKind::TurnEnded,
        EventKind::SessionError,
        EventKind::SessionTerminated,
        EventKind::SessionDeleted,
        EventKind::SessionUpdated,
        EventKind::EnvironmentConnection,
        EventKind::ConnectionRequested,
        EventKind::AgentMessage,
        EventKind::AgentThinking,
        EventKind::ToolUse,
        EventKind::ToolStarted,
        EventKind::ToolResult,
        EventKind::ModelRequestStarted,
        EventKind::ModelRequestEnded,
        EventKind::SessionUsage,
        EventKind::ContextCompacted,
        EventKind::AgentReport,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::UserMessage => "user_message",
            EventKind::UserInterrupt => "user_interrupt",
            EventKind::ToolConfirmation => "tool_confirmation",
            EventKind::ClientToolResult => "client_tool_result",
            EventKind::TurnStarted => "turn_started",
            EventKind::TurnRescheduled => "turn_rescheduled",
            EventKind::TurnEnded => "turn_ended",
            EventKind::SessionError => "session_error",
            EventKind::SessionTerminated => "session_terminated",
            EventKind::SessionDeleted => "session_deleted",
            EventKind::SessionUpdated => "session_updated",
            EventKind::EnvironmentConnection => "environment_connection",
            EventKind::ConnectionRequested => "connection_requested",
            EventKind::AgentMessage => "agent_message",
            EventKind::AgentThinking => "agent_thinking",
            EventKind::ToolUse => "tool_use",
            EventKind::ToolStarted => "tool_started",
            EventKind::ToolResult => "tool_result",
            EventKind::ModelRequestStarted => "model_request_started",
            EventKind::ModelRequestEnded => "model_request_ended",
            EventKind::SessionUsage => "session_usage",
            EventKind::ContextCompacted => "context_compacted",
            EventKind::AgentReport => "agent_report",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Inputs come from clients; everything else is produced by the gateway.
    pub fn is_input(self) -> bool {
        matches!(
            self,
            EventKind::UserMessage
                | EventKind::UserInterrupt
                | EventKind::ToolConfirmation
                | EventKind::ClientToolResult
        )
    }
}

impl ToolOrigin {
    pub fn custom() -> Self {
        ToolOrigin::Custom
    }
}

impl EventPayload {
    pub fn kind(&self) -> EventKind {
        match self {
            EventPayload::UserMessage { .. } => EventKind::UserMessage,
            EventPayload::UserInterrupt {} => EventKind::UserInterrupt,
            EventPayload::ToolConfirmation { .. } => EventKind::ToolConfirmation,
            EventPayload::ClientToolResult { .. } => EventKind::ClientToolResult,
            EventPayload::TurnStarted { .. } => EventKind::TurnStarted,
            EventPayload::TurnRescheduled {} => EventKind::TurnRescheduled,
            EventPayload::TurnEnded { .. } => EventKind::TurnEnded,
            EventPayload::SessionError { .. } => EventKind::SessionError,
            EventPayload::SessionTerminated {} => EventKind::SessionTerminated,
            EventPayload::SessionDeleted {} => EventKind::SessionDeleted,
            EventPayload::SessionUpdated { .. } => EventKind::SessionUpdated,
            EventPayload::EnvironmentConnection { .. } => EventKind::EnvironmentConnection,
            EventPayload::ConnectionRequested { .. } => EventKind::ConnectionRequested,
            EventPayload::AgentMessage { .. } => EventKind::AgentMessage,
            EventPayload::AgentThinking { .. } => EventKind::AgentThinking,
            EventPayload::ToolUse { .. } => EventKind::ToolUse,
            EventPayload::ToolStarted { .. } => EventKind::ToolStarted,
            EventPayload::ToolResult { .. } => EventKind::ToolResult,
            EventPayload::ModelRequestStarted {} => EventKind::ModelRequestStarted,
            EventPayload::ModelRequestEnded { .. } => EventKind::ModelRequestEnded,
            EventPayload::SessionUsage { .. } => EventKind::SessionUsage,
            EventPayload::ContextCompacted { .. } => EventKind::ContextCompacted,
            EventPayload::AgentReport { .. } => EventKind::AgentReport,
        }
    }
}

/// An event about to be committed. Its id is chosen by the producer before the commit, so a
/// streaming preview and the committed event can share it (invariant 7).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub id: EventId,
    pub payload: EventPayload,
}

impl NewEvent {
    pub fn new(payload: EventPayload) -> Self {
        Self { id: EventId::new(), payload }
    }
}

impl From<EventPayload> for NewEvent {
    fn from(payload: EventPayload) -> Self {
        Self::new(payload)
    }
}

/// A committed event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub session_id: SessionId,
    /// Strictly increasing per session, without gaps, starting at 1.
    pub seq: u64,
    /// Database clock at commit.
    pub created_at: Timestamp,
    /// The run that committed it (None for client inputs).
    pub run_id: Option<RunId>,
    /// The lease epoch under which it was committed (None for client inputs).
    pub epoch: Option<i64>,
    pub payload: EventPayload,
}

impl Event {
    pub fn kind(&self) -> EventKind {
        self.payload.kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_tag_matches_kind_for_every_variant() {
        let samples = vec![
            EventPayload::UserMessage { content: vec![ContentBlock::text("hi")] },
            EventPayload::UserInterrupt {},
            EventPayload::ToolConfirmation {
                tool_use_id: EventId::new(),
                allow: false,
                deny_message: Some("no".into()),
            },
            EventPayload::ClientToolResult {
                tool_use_id: EventId::new(),
                content: vec![],
                is_error: false,
                origin: ToolOrigin::Custom,
            },
            EventPayload::TurnStarted { inputs_through: 3 },
            EventPayload::TurnRescheduled {},
            EventPayload::TurnEnded { stop: StopReason::RequiresAction { event_ids: vec![EventId::new()] } },
            EventPayload::SessionError {
                kind: ErrorKind::EnvironmentLost,
                message: "m".into(),
                retry: RetryStatus::Terminal,
                server: None,
            },
            EventPayload::EnvironmentConnection {
                environment_id: crate::EnvironmentId::new(),
                status: crate::environment::ConnectionStatus::Failed,
                error: Some("no executor".into()),
            },
            EventPayload::ConnectionRequested { environment_id: crate::EnvironmentId::new() },
            EventPayload::SessionTerminated {},
            EventPayload::SessionDeleted {},
            EventPayload::SessionUpdated {
                title: Some("t".into()),
                metadata: None,
                agent: None,
                vault_ids: Some(vec![crate::VaultId::new()]),
                budget: Some(crate::session::BudgetChange::Removed),
            },
            EventPayload::AgentMessage { content: vec![ContentBlock::text("x")] },
            EventPayload::AgentThinking { text: Some("hm".into()), seal: Some(ThinkingSeal::Signature("s".into())) },
            EventPayload::ToolUse {
                name: "bash".into(),
                input: JsonObject::new(),
                origin: ToolOrigin::Mcp { server: "s".into() },
                permission: ToolPermission::Ask,
                policy: Some(crate::agent::PermissionPolicy::AlwaysAsk),
            },
            EventPayload::ToolResult {
                tool_use_id: EventId::new(),
                origin: ToolOrigin::Builtin,
                content: vec![],
                is_error: true,
            },
            EventPayload::ToolStarted { tool_use_id: EventId::new() },
            EventPayload::ModelRequestStarted {},
            EventPayload::ModelRequestEnded { start_id: EventId::new(), is_error: false, usage: Usage::default() },
            EventPayload::SessionUsage { usage: Usage { input_tokens: 3, ..Usage::default() }, budget: None },
            EventPayload::ContextCompacted { summary: "s".into(), through: 3 },
            EventPayload::AgentReport { topic: ReportTopic::Plan, body: serde_json::json!({"entries": []}) },
        ];
        assert_eq!(samples.len(), EventKind::ALL.len());
        for p in samples {
            let json = serde_json::to_value(&p).unwrap();
            assert_eq!(json["type"], p.kind().as_str());
            assert_eq!(EventKind::parse(p.kind().as_str()), Some(p.kind()));
            let back: EventPayload = serde_json::from_value(json).unwrap();
            assert_eq!(back, p);
        }
    }

    #[test]
    fn a_turn_start_always_names_its_boundary() {
        let json = serde_json::to_value(EventPayload::TurnStarted { inputs_through: 7 }).unwrap();
        assert_eq!(json, serde_json::json!({"type": "turn_started", "inputs_through": 7}));
        assert!(serde_json::from_value::<EventPayload>(serde_json::json!({"type": "turn_started"})).is_err());
    }
}
