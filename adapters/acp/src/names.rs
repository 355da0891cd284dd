//! What the ACP adapter keeps in the store, by name: adapter documents (per session, written
//! by the editor face) and session bindings (facts the backend face must find again after a
//! restart). One place, so both faces agree on them.

/// Document namespace: the tools a user answered "always" for, per session (editor face).
pub const ALLOW_ALWAYS_NS: &str = "acp.allow_always";
/// Document namespace: a native session's permission preset (`gateway_core::agent::
/// PermissionPreset`), as the editor last chose it (editor face).
pub const PERMISSIONS_NS: &str = "acp.permissions";
/// Document namespace: settings an editor changed on an ACP-backed session's agent while its
/// process was not running (`{"requests": [{n, method, params}]}`, numbered in order); the
/// backend face sends those after [`SETTINGS_SENT_BINDING`] before the next prompt.
pub const PENDING_SETTINGS_NS: &str = "acp.pending_settings";
/// Document namespace: the MCP servers an editor passed to an ACP-backed session; the backend
/// face hands them to the agent's `session/new` / `load` / `resume`.
pub const MCP_SERVERS_NS: &str = "acp.mcp_servers";

/// Binding: the agent's own session id.
pub const AGENT_SESSION_BINDING: &str = "acp.agent_session_id";
/// Binding: the seq of the last user message sent to the agent in a prompt. Staged with the
/// run's next commit, not committed before the send: a run started by an earlier claim counts
/// all its inputs as sent (`backend::sent_through`).
pub const SENT_BINDING: &str = "acp.sent_seq";
/// Binding: the seq of the last user message of a prompt the agent answered. Below
/// [`SENT_BINDING`] while a prompt is outstanding; a run that finds its inputs sent but not
/// answered, and no prompt to consume, lost the agent mid-turn.
pub const ANSWERED_BINDING: &str = "acp.answered_seq";
/// Binding: the number of the last kept setting sent to the agent ([`PENDING_SETTINGS_NS`]),
/// staged with the run's next commit.
pub const SETTINGS_SENT_BINDING: &str = "acp.settings_sent";

/// `_meta` of a relay's `session/prompt`: the event id its user message gets (ADR 0030).
pub const PROMPT_ID_META: &str = "gateway.promptId";
/// `_meta` of a relay's `session/prompt`: the seq of the last update the editor was shown.
pub const AFTER_SEQ_META: &str = "gateway.afterSeq";
/// `_meta` of a `session/update` sent for a relay's prompt: the seq of the event it shows.
pub const SEQ_META: &str = "gateway.seq";

/// A binding that holds a seq (or a count), as a number: 0 when absent or unreadable.
pub fn seq_of(bindings: &std::collections::BTreeMap<String, String>, name: &str) -> u64 {
    bindings.get(name).and_then(|s| s.parse().ok()).unwrap_or(0)
}
