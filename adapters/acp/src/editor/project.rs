//! Committed events and previews as `session/update`s: the editor's view of a session.
//!
//! The same projection serves a live prompt and a `session/load` replay, so what an editor
//! sees after reloading is what it saw live. Text already streamed as previews is never sent
//! twice: the projector remembers, per message id, what it sent, and sends only the rest of
//! the committed message. Paths are shown as the editor knows them: a path under the
//! sandbox's view of the workspace (`/workspace` with the namespace provider) is shown under
//! the editor's `cwd`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gateway_core::EventId;
use gateway_core::JsonObject;
use gateway_core::content::ContentBlock;
use gateway_core::event::{Event, EventKind, EventPayload, ReportTopic, ToolOrigin, ToolPermission, Usage};
use gateway_runtime::Preview;
use serde_json::{Value, json};

use crate::rpc::clip;
use crate::wire::{self, tool_kind};

/// Largest tool output text shown in one update.
const MAX_TOOL_TEXT: usize = 64 * 1024;

/// The context window `usage_update` reports when the serving model's is not configured: the
/// Claude models' 200k tokens.
const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// A tool call as the editor was shown it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub name: String,
    pub input: JsonObject,
    pub origin: ToolOrigin,
}

impl ToolCall {
    /// What the editor shows as the call's title.
    pub fn title(&self) -> String {
        if self.origin == ToolOrigin::Backend {
            return self.name.clone();
        }
        let s = |k: &str| self.input.get(k).and_then(Value::as_str).unwrap_or("");
        let t = match self.name.as_str() {
            "bash" => format!("Run `{}`", clip(s("command").lines().next().unwrap_or(""), 120)),
            "read" => format!("Read {}", s("file_path")),
            "write" => format!("Write {}", s("file_path")),
            "edit" => format!("Edit {}", s("file_path")),
            "glob" | "grep" => format!("Search {}", s("pattern")),
            other => other.to_owned(),
        };
        clip(&t, 200).to_owned()
    }

    pub fn kind(&self) -> &'static str {
        if self.origin == ToolOrigin::Backend { "other" } else { tool_kind(&self.name) }
    }

    /// The call's file as the editor knows it: relative paths against `cwd`, absolute ones
    /// under the sandbox's `inner` root mapped back under `cwd`.
    fn path(&self, cwd: &Path, inner: Option<&Path>) -> Option<String> {
        let p = Path::new(self.input.get("file_path").and_then(Value::as_str)?);
        let shown = match inner.and_then(|root| p.strip_prefix(root).ok()) {
            Some(rest) if rest.as_os_str().is_empty() => cwd.to_path_buf(),
            Some(rest) => cwd.join(rest),
            None => cwd.join(p),
        };
        Some(shown.display().to_string())
    }

    /// `locations` and, for file changes, a diff `content`.
    fn details(&self, cwd: &Path, inner: Option<&Path>) -> (Value, Option<Value>) {
        if self.origin == ToolOrigin::Backend {
            return (json!([]), None);
        }
        let Some(path) = self.path(cwd, inner) else { return (json!([]), None) };
        let s = |k: &str| self.input.get(k).and_then(Value::as_str);
        let diff = match self.name.as_str() {
            "write" => s("content").map(|new| json!([{"type": "diff", "path": path, "newText": new}])),
            "edit" => match (s("old_string"), s("new_string")) {
                (Some(old), Some(new)) => Some(json!([{"type": "diff", "path": path, "oldText": old, "newText": new}])),
                _ => None,
            },
            _ => None,
        };
        (json!([{"path": path}]), diff)
    }

    /// The `toolCall` of a permission request for this call.
    pub fn permission_subject(&self, id: &EventId, cwd: &Path, inner: Option<&Path>) -> Value {
        let (locations, diff) = self.details(cwd, inner);
        let mut v = json!({
            "toolCallId": id.to_string(),
            "title": self.title(),
            "kind": self.kind(),
            "status": "pending",
            "rawInput": Value::Object(self.input.clone()),
            "locations": locations,
        });
        if let Some(d) = diff {
            v["content"] = d;
        }
        v
    }
}

/// Turns a session's events into updates for one editor.
#[derive(Debug)]
pub struct Projector {
    cwd: PathBuf,
    /// Where the sandbox shows the workspace to its processes (its provider's answer,
    /// `Coordinator::inner_root`); `cwd` itself where the provider shows it where it is.
    inner_root: Option<PathBuf>,
    tools: HashMap<EventId, ToolCall>,
    /// Text streamed so far per message id, per content block index.
    streamed: HashMap<EventId, Vec<String>>,
    /// Reasoning streamed so far per thinking event id.
    thoughts: HashMap<EventId, String>,
    /// Whether user messages are shown (a replay shows them; a live prompt's own text is not
    /// echoed back).
    show_user: bool,
    /// The tokens of the model requests projected so far (a prompt's: its turn's).
    usage: Usage,
    /// The serving model's context window, and how much of it the last request filled.
    context_window: u64,
    context_used: u64,
    /// What an ACP agent last said about its modes and settings (`agent_report`s).
    agent: AgentState,
    /// The tokens an ACP agent counted for the last turn projected (its prompt answer's).
    agent_turn_usage: Option<Value>,
}

/// An ACP agent's modes, settings and commands as its reports left them: what opening a
/// session answers with (and sends after the answer), before the agent process runs again.
#[derive(Debug, Clone, Default)]
pub struct AgentState {
    /// `SessionModeState`: the modes and the current one.
    pub modes: Option<Value>,
    /// The settings (`configOptions`).
    pub settings: Option<Value>,
    /// The last `available_commands_update`, whole.
    pub commands: Option<Value>,
}

impl Projector {
    pub fn new(cwd: impl Into<PathBuf>, show_user: bool) -> Self {
        Self {
            cwd: cwd.into(),
            inner_root: None,
            tools: HashMap::new(),
            streamed: HashMap::new(),
            thoughts: HashMap::new(),
            show_user,
            usage: Usage::default(),
            context_window: DEFAULT_CONTEXT_WINDOW,
            context_used: 0,
            agent: AgentState::default(),
            agent_turn_usage: None,
        }
    }

    /// Reports `window` (the serving model's context window, when configured) as the
    /// context's size.
    pub fn with_context_window(mut self, window: Option<u64>) -> Self {
        self.context_window = window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
        self
    }

    /// Maps paths under the sandbox's view of the workspace back under `cwd`.
    pub fn with_inner_root(mut self, inner_root: Option<PathBuf>) -> Self {
        self.inner_root = inner_root;
        self
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn inner_root(&self) -> Option<&Path> {
        self.inner_root.as_deref()
    }

    pub fn tool(&self, id: &EventId) -> Option<&ToolCall> {
        self.tools.get(id)
    }

    /// The agent's modes and settings as the events projected so far left them.
    pub fn agent_state(&self) -> &AgentState {
        &self.agent
    }

    /// The tokens of the turn projected, as a prompt response's `usage`: an ACP agent's own
    /// count when it gave one, else the native model requests' (`None` when neither).
    pub fn usage(&self) -> Option<Value> {
        if let Some(agent) = &self.agent_turn_usage {
            return Some(agent.clone());
        }
        let u = &self.usage;
        let input = u.prompt_tokens();
        (input + u.output_tokens > 0).then(|| {
            json!({
                "totalTokens": input + u.output_tokens,
                "inputTokens": input,
                "outputTokens": u.output_tokens,
                "cachedReadTokens": u.cache_read_input_tokens,
                "cachedWriteTokens": u.cache_creation_input_tokens,
            })
        })
    }

    /// The updates for a preview.
    pub fn preview(&mut self, p: &Preview) -> Vec<Value> {
        match p {
            Preview::Start { event_id, kind } if *kind == EventKind::AgentMessage => {
                self.streamed.entry(event_id.clone()).or_default();
                vec![]
            }
            Preview::Start { event_id, kind } if *kind == EventKind::AgentThinking => {
                self.thoughts.entry(event_id.clone()).or_default();
                vec![]
            }
            Preview::Start { .. } => vec![],
            Preview::ThoughtDelta { event_id, text } => {
                let Some(shown) = self.thoughts.get_mut(event_id) else { return vec![] };
                shown.push_str(text);
                vec![chunk("agent_thought_chunk", text, event_id)]
            }
            Preview::TextDelta { event_id, index, text } => {
                let Some(parts) = self.streamed.get_mut(event_id) else { return vec![] };
                if parts.len() <= *index {
                    parts.resize(index + 1, String::new());
                }
                parts[*index].push_str(text);
                vec![chunk("agent_message_chunk", text, event_id)]
            }
        }
    }

    /// The updates for a committed event.
    pub fn event(&mut self, e: &Event) -> Vec<Value> {
        match &e.payload {
            EventPayload::UserMessage { content } if self.show_user => wire::core_to_acp(content, full())
                .into_iter()
                .map(|block| json!({"sessionUpdate": "user_message_chunk", "content": block, "messageId": e.id.to_string()}))
                .collect(),
            EventPayload::AgentMessage { content } => self.message(&e.id, content),
            EventPayload::AgentThinking { text: Some(t), .. } if !t.is_empty() => {
                // Only what its previews did not already show.
                let shown = self.thoughts.remove(&e.id).unwrap_or_default();
                let rest = unsent(&e.id, t, &shown);
                if rest.is_empty() { vec![] } else { vec![chunk("agent_thought_chunk", rest, &e.id)] }
            }
            // ACP's compaction updates are unstable and capability-gated; every editor shows a
            // thought, so the summary the model now works from is shown as one (ADR 0035).
            EventPayload::ContextCompacted { summary, .. } => {
                let text = format!("Context compacted. The model now sees this summary of the earlier conversation:\n\n{summary}");
                vec![chunk("agent_thought_chunk", &text, &e.id)]
            }
            EventPayload::ToolUse { name, input, origin, permission, .. } => {
                let call = ToolCall { name: name.clone(), input: input.clone(), origin: origin.clone() };
                let (locations, diff) = call.details(&self.cwd, self.inner_root.as_deref());
                let status = match permission {
                    ToolPermission::Deny => "failed",
                    _ => "pending",
                };
                let mut u = json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": e.id.to_string(),
                    "title": call.title(),
                    "kind": call.kind(),
                    "status": status,
                    "rawInput": Value::Object(input.clone()),
                    "locations": locations,
                });
                if let Some(d) = diff {
                    u["content"] = d;
                }
                self.tools.insert(e.id.clone(), call);
                vec![u]
            }
            EventPayload::ToolStarted { tool_use_id } => {
                vec![json!({"sessionUpdate": "tool_call_update", "toolCallId": tool_use_id.to_string(), "status": "in_progress"})]
            }
            EventPayload::ToolResult { tool_use_id, content, is_error, .. }
            | EventPayload::ClientToolResult { tool_use_id, content, is_error, .. } => {
                let text = gateway_core::content::plain_text(content);
                let mut shown = vec![json!({"type": "content", "content": wire::text_block(clip(&text, MAX_TOOL_TEXT))})];
                if !is_error
                    && let Some(call) = self.tools.get(tool_use_id)
                    && let (_, Some(Value::Array(diff))) = call.details(&self.cwd, self.inner_root.as_deref())
                {
                    shown = diff.into_iter().chain(shown).collect();
                }
                vec![json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_use_id.to_string(),
                    "status": if *is_error { "failed" } else { "completed" },
                    "content": shown,
                    "rawOutput": {"text": clip(&text, MAX_TOOL_TEXT), "isError": is_error},
                })]
            }
            EventPayload::AgentReport { topic, body } => self.report(*topic, body),
            // What the context holds after a model request: its input (cached or not) and the
            // output it added.
            EventPayload::ModelRequestEnded { is_error: false, usage, .. } => {
                self.usage.add(usage);
                self.context_used = usage.prompt_tokens() + usage.output_tokens;
                vec![self.usage_update(None)]
            }
            // The session's totals after a turn: what it has cost so far, when the models it
            // ran on have list prices.
            EventPayload::SessionUsage { usage, .. } => match usage.list_cost() {
                Some(micros) => vec![self.usage_update(Some(micros))],
                None => vec![],
            },
            _ => vec![],
        }
    }

    /// A `usage_update`: the context's fill, and the session's cumulative cost if known.
    fn usage_update(&self, cost_micros: Option<u64>) -> Value {
        let used = self.context_used;
        let mut update = json!({"sessionUpdate": "usage_update", "used": used, "size": self.context_window.max(used)});
        if let Some(micros) = cost_micros {
            update["cost"] = json!({"amount": micros as f64 / 1e6, "currency": "USD"});
        }
        update
    }

    /// An ACP agent's report, shown as the agent sent it (ADR 0028); its modes and settings
    /// are remembered for `session/load`. A body that is not the update its topic names is
    /// not shown (the editor's SDK would refuse the frame).
    fn report(&mut self, topic: ReportTopic, body: &Value) -> Vec<Value> {
        let kind = match topic {
            ReportTopic::Modes => {
                self.agent.modes = Some(body.clone());
                // Only an opening answer lists the modes; an editor already open learns the
                // current one.
                return match body.get("currentModeId") {
                    Some(id) => vec![json!({"sessionUpdate": "current_mode_update", "currentModeId": id})],
                    None => vec![],
                };
            }
            ReportTopic::Mode => "current_mode_update",
            ReportTopic::Settings => "config_option_update",
            ReportTopic::Commands => "available_commands_update",
            ReportTopic::Plan => "plan",
            ReportTopic::Title => "session_info_update",
            ReportTopic::Usage => "usage_update",
            ReportTopic::Notice => return vec![],
            ReportTopic::TurnUsage => {
                self.agent_turn_usage = Some(body.clone());
                return vec![];
            }
        };
        if body.get("sessionUpdate").and_then(Value::as_str) != Some(kind) {
            tracing::debug!(?topic, "an agent report that is not its topic's update; not shown");
            return vec![];
        }
        match topic {
            ReportTopic::Mode => {
                if let (Some(modes), Some(id)) = (self.agent.modes.as_mut(), body.get("currentModeId")) {
                    modes["currentModeId"] = id.clone();
                }
            }
            ReportTopic::Settings => self.agent.settings = body.get("configOptions").cloned(),
            ReportTopic::Commands => self.agent.commands = Some(body.clone()),
            _ => {}
        }
        vec![body.clone()]
    }

    /// A committed message: only what previews did not already show.
    fn message(&mut self, id: &EventId, content: &[ContentBlock]) -> Vec<Value> {
        let streamed = self.streamed.remove(id).unwrap_or_default();
        let mut out = Vec::new();
        let texts = content.iter().filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        });
        for (i, text) in texts.enumerate() {
            let rest = unsent(id, text, streamed.get(i).map(String::as_str).unwrap_or(""));
            if !rest.is_empty() {
                out.push(chunk("agent_message_chunk", rest, id));
            }
        }
        out
    }
}

/// What of a committed `text` its previews (`sent`) did not show. Previews lost on the way
/// (a slow editor) leave them disagreeing: chunks cannot be taken back, so everything after
/// what both agree on is sent, and nothing is lost.
fn unsent<'t>(id: &EventId, text: &'t str, sent: &str) -> &'t str {
    if let Some(rest) = text.strip_prefix(sent) {
        return rest;
    }
    let agreed: usize = text.chars().zip(sent.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a.len_utf8()).sum();
    tracing::warn!(event = %id, "committed text differs from its previews; sending it from where they diverged");
    &text[agreed..]
}

fn full() -> wire::PromptSupport {
    wire::PromptSupport { image: true, embedded_context: true }
}

fn chunk(kind: &str, text: &str, id: &EventId) -> Value {
    json!({"sessionUpdate": kind, "content": wire::text_block(text), "messageId": id.to_string()})
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::{SessionId, Timestamp};

    fn ev(payload: EventPayload) -> Event {
        Event {
            id: EventId::new(),
            session_id: SessionId::new(),
            seq: 1,
            created_at: Timestamp(0),
            run_id: None,
            epoch: None,
            payload,
        }
    }

    #[test]
    fn agent_reports_pass_through_and_leave_the_modes_settings_and_commands_for_a_load() {
        let mut p = Projector::new("/w", true);
        let report = |topic, body: Value| ev(EventPayload::AgentReport { topic, body });
        let modes = json!({"currentModeId": "default", "availableModes": [{"id": "default", "name": "D"}, {"id": "plan", "name": "P"}]});
        assert_eq!(
            p.event(&report(ReportTopic::Modes, modes.clone())),
            vec![json!({"sessionUpdate": "current_mode_update", "currentModeId": "default"})]
        );
        let plan =
            json!({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "pending"}]});
        assert_eq!(p.event(&report(ReportTopic::Plan, plan.clone())), vec![plan]);
        let mode = json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"});
        assert_eq!(p.event(&report(ReportTopic::Mode, mode.clone())), vec![mode]);
        let settings = json!({"sessionUpdate": "config_option_update", "configOptions": [{"id": "model"}]});
        p.event(&report(ReportTopic::Settings, settings));
        // A body that is not its topic's update is not shown.
        let commands = json!({"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "r", "description": "d"}]});
        assert_eq!(p.event(&report(ReportTopic::Commands, commands.clone())), vec![commands.clone()]);
        assert!(p.event(&report(ReportTopic::Commands, json!({"sessionUpdate": "plan"}))).is_empty());
        let state = p.agent_state();
        assert_eq!(state.modes.as_ref().map(|m| m["currentModeId"].clone()), Some(json!("plan")));
        assert_eq!(state.settings, Some(json!([{"id": "model"}])));
        assert_eq!(state.commands, Some(commands), "the last valid command list, not the refused one");
    }

    #[test]
    fn usage_updates_fill_the_serving_models_window_and_carry_the_sessions_cost() {
        use gateway_core::event::Usage;
        let mut p = Projector::new("/w", false).with_context_window(Some(32_000));
        let used = Usage { input_tokens: 100, cache_read_input_tokens: 900, output_tokens: 50, ..Usage::default() };
        let end =
            ev(EventPayload::ModelRequestEnded { start_id: EventId::new(), is_error: false, usage: used.clone() });
        assert_eq!(p.event(&end), vec![json!({"sessionUpdate": "usage_update", "used": 1050, "size": 32_000})]);
        // The turn's end reports the session's totals: its cost when every request was priced.
        let total = Usage { list_cost_micros: 12_500, ..used.clone() };
        let reported = p.event(&ev(EventPayload::SessionUsage { usage: total, budget: None }));
        assert_eq!(
            reported,
            vec![
                json!({"sessionUpdate": "usage_update", "used": 1050, "size": 32_000, "cost": {"amount": 0.0125, "currency": "USD"}})
            ]
        );
        let unpriced = Usage { unpriced_requests: 1, ..used };
        assert!(p.event(&ev(EventPayload::SessionUsage { usage: unpriced, budget: None })).is_empty(), "no cost known");
        // Without a configured window, the Claude models' is shown.
        let mut p = Projector::new("/w", false);
        assert_eq!(p.event(&end)[0]["size"], 200_000);
    }

    #[test]
    fn a_compaction_is_shown_as_a_thought_holding_its_summary() {
        let mut p = Projector::new("/w", true);
        let e = ev(EventPayload::ContextCompacted { summary: "we fixed the bug".into(), through: 7 });
        let shown = p.event(&e);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0]["sessionUpdate"], "agent_thought_chunk");
        assert!(shown[0]["content"]["text"].as_str().unwrap().ends_with("we fixed the bug"));
    }

    #[test]
    fn committed_text_after_previews_sends_only_the_rest() {
        let mut p = Projector::new("/w", false);
        let mut e = ev(EventPayload::AgentMessage { content: vec![ContentBlock::text("hello world")] });
        let id = e.id.clone();
        assert!(p.preview(&Preview::Start { event_id: id.clone(), kind: EventKind::AgentMessage }).is_empty());
        let u = p.preview(&Preview::TextDelta { event_id: id.clone(), index: 0, text: "hello ".into() });
        assert_eq!(u[0]["content"]["text"], "hello ");
        let u = p.event(&e);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0]["content"]["text"], "world");
        assert_eq!(u[0]["messageId"], id.to_string());
        // Fully streamed: nothing more. Not streamed at all: everything.
        e.id = EventId::new();
        assert_eq!(p.event(&e)[0]["content"]["text"], "hello world");
        // A delta for a message whose start was not seen is not shown (the commit will be).
        assert!(p.preview(&Preview::TextDelta { event_id: EventId::new(), index: 0, text: "x".into() }).is_empty());
    }

    #[test]
    fn reasoning_streams_as_thought_chunks_and_its_commit_sends_only_the_rest() {
        let mut p = Projector::new("/w", false);
        let e = ev(EventPayload::AgentThinking { text: Some("first, then".into()), seal: None });
        let id = e.id.clone();
        assert!(p.preview(&Preview::Start { event_id: id.clone(), kind: EventKind::AgentThinking }).is_empty());
        let u = p.preview(&Preview::ThoughtDelta { event_id: id.clone(), text: "first, ".into() });
        assert_eq!(
            (u[0]["sessionUpdate"].as_str(), u[0]["content"]["text"].as_str()),
            (Some("agent_thought_chunk"), Some("first, "))
        );
        let u = p.event(&e);
        assert_eq!((u.len(), u[0]["content"]["text"].as_str()), (1, Some("then")));
        // A thought whose start was not seen is shown at its commit, whole.
        assert!(p.preview(&Preview::ThoughtDelta { event_id: EventId::new(), text: "x".into() }).is_empty());
    }

    #[test]
    fn previews_lost_on_the_way_lose_no_committed_text() {
        let mut p = Projector::new("/w", false);
        let e = ev(EventPayload::AgentMessage { content: vec![ContentBlock::text("A B C D")] });
        let id = e.id.clone();
        p.preview(&Preview::Start { event_id: id.clone(), kind: EventKind::AgentMessage });
        // "B " was dropped by a full preview buffer.
        for delta in ["A ", "C "] {
            p.preview(&Preview::TextDelta { event_id: id.clone(), index: 0, text: delta.into() });
        }
        let u = p.event(&e);
        assert_eq!(u[0]["content"]["text"], "B C D", "everything after the last agreed character");
    }

    #[test]
    fn tool_calls_carry_kind_status_locations_and_diffs() {
        let mut p = Projector::new("/w", true);
        let input: JsonObject =
            serde_json::from_value(json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"})).expect("obj");
        let call = ev(EventPayload::ToolUse {
            name: "edit".into(),
            input,
            origin: ToolOrigin::Builtin,
            permission: ToolPermission::Ask,
            policy: None,
        });
        let u = &p.event(&call)[0];
        assert_eq!(u["sessionUpdate"], "tool_call");
        assert_eq!(u["kind"], "edit");
        assert_eq!(u["status"], "pending");
        assert_eq!(u["locations"][0]["path"], "/w/a.txt");
        assert_eq!(u["content"][0], json!({"type": "diff", "path": "/w/a.txt", "oldText": "x", "newText": "y"}));
        let started = p.event(&ev(EventPayload::ToolStarted { tool_use_id: call.id.clone() }));
        assert_eq!(started[0]["status"], "in_progress");
        let done = p.event(&ev(EventPayload::ToolResult {
            tool_use_id: call.id.clone(),
            origin: ToolOrigin::Builtin,
            content: vec![ContentBlock::text("boom")],
            is_error: true,
        }));
        assert_eq!(done[0]["status"], "failed");
        assert_eq!(done[0]["content"][0]["content"]["text"], "boom");
    }

    #[test]
    fn sandbox_paths_are_shown_under_the_editors_cwd() {
        let read = |path: &str| {
            let input: JsonObject = serde_json::from_value(json!({"file_path": path})).expect("obj");
            ev(EventPayload::ToolUse {
                name: "read".into(),
                input,
                origin: ToolOrigin::Builtin,
                permission: ToolPermission::Allow,
                policy: None,
            })
        };
        let mut ns = Projector::new("/home/me/proj", false).with_inner_root(Some("/workspace".into()));
        assert_eq!(ns.event(&read("/workspace/src/a.rs"))[0]["locations"][0]["path"], "/home/me/proj/src/a.rs");
        assert_eq!(ns.event(&read("b.rs"))[0]["locations"][0]["path"], "/home/me/proj/b.rs");
        assert_eq!(ns.event(&read("/workspace"))[0]["locations"][0]["path"], "/home/me/proj");
        // Without a distinct inner root (the local provider), absolute paths are the host's.
        let mut local = Projector::new("/home/me/proj", false);
        assert_eq!(local.event(&read("/workspace/x"))[0]["locations"][0]["path"], "/workspace/x");
    }
}
