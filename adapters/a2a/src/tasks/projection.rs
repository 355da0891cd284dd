//! The task projection: a session's committed events -> one A2A Task and its stream updates.
//!
//! A task starts at the user message that created it and spans every turn until one ends
//! for good (INPUT_REQUIRED resumptions stay in the same task). The projection is a pure fold
//! over the event log, so GetTask, every subscriber, the blocking send and the push feed
//! derive identical states and identical, identically ordered updates from the same events.
//!
//! Mapping (docs/adr/0009-a2a.md): our message -> SUBMITTED; our turn's start -> WORKING;
//! each agent message -> one artifact (id = event id); a park -> INPUT_REQUIRED
//! (AUTH_REQUIRED for a remote's auth request) whose status message lists what it waits for;
//! end_turn -> COMPLETED, refusal -> REJECTED, interrupted -> CANCELED, any failure -> FAILED
//! with the error's message. Which events are our turn's (and not another task's in the same
//! session, e.g. a retry re-queued behind our message) is the core's rule: the task follows
//! its start message with a `TurnFollower` (`gateway_core::turn`).
//!
//! Projection hints: an agent message whose first block is a data block
//! `{"a2a.projection": {...}}` is projected as that hint says (`as`: `artifact` with
//! `artifactId`/`append`/`lastChunk`/`name`, `status` = the final status message, `message` =
//! a direct Message answer). Only sessions of the built-in conformance agent honour them
//! ([`Projector::honour_hints`]): the neutral events cannot say "this is a chunk of artifact
//! X" there. Anywhere else (including a remote agent's output relayed by the outbound backend)
//! such a block is ordinary data, so no agent can forge a task's final status or answer.

use std::collections::HashMap;

use gateway_core::content::ContentBlock;
use gateway_core::event::{Event, EventPayload, StopReason, ToolOrigin, ToolPermission};
use gateway_core::turn::{Relation, TurnFollower};
use gateway_core::{EventId, JsonObject, Timestamp};
use serde_json::{Map, Value, json};

use crate::content::parts_from_blocks;
use crate::wire::{Artifact, ArtifactUpdate, Message, Part, StatusUpdate, StreamResponse, Task, TaskState, TaskStatus};

/// The key of a projection hint block.
pub const HINT_KEY: &str = "a2a.projection";
/// Tool names the outbound backend parks on for a remote's interrupted states.
pub const REMOTE_INPUT_TOOL: &str = "a2a_input_required";
pub const REMOTE_AUTH_TOOL: &str = "a2a_auth_required";

/// A pending action as clients see it on an INPUT_REQUIRED task.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub tool_use_id: EventId,
    /// Approve/deny, rather than send a result.
    pub confirmation: bool,
    pub name: String,
}

pub struct Projector {
    task_id: String,
    context_id: String,
    start: EventId,
    /// Follows the start message once it is seen.
    follower: Option<TurnFollower>,
    /// The task reached a final state.
    done: bool,
    client_message_id: String,
    /// Whether projection hints steer this task (the conformance agent's sessions only).
    hints: bool,
    state: TaskState,
    status_at: Timestamp,
    status_message: Option<Message>,
    final_message: Option<Message>,
    last_error: Option<String>,
    artifacts: Vec<Artifact>,
    history: Vec<Message>,
    tools: HashMap<EventId, (String, JsonObject, bool)>,
    pending: Vec<Pending>,
    direct: Option<Message>,
    seen_output: bool,
    last_seq: u64,
    /// The session's model usage as its turn's end reported it (task metadata `usage`).
    usage: Option<Map<String, Value>>,
}

/// Most artifacts and history messages one task keeps (older ones are dropped first).
const MAX_ITEMS: usize = 1000;

impl Projector {
    pub fn new(task_id: &str, context_id: &str, start: EventId, client_message_id: &str) -> Self {
        Self {
            task_id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            start,
            follower: None,
            done: false,
            client_message_id: client_message_id.to_owned(),
            hints: false,
            state: TaskState::Submitted,
            status_at: Timestamp(0),
            status_message: None,
            final_message: None,
            last_error: None,
            artifacts: Vec::new(),
            history: Vec::new(),
            tools: HashMap::new(),
            pending: Vec::new(),
            direct: None,
            seen_output: false,
            last_seq: 0,
            usage: None,
        }
    }

    /// Lets projection hints steer this task. Only for sessions whose agent is the built-in
    /// conformance agent; everyone else's hint blocks stay ordinary data.
    pub fn honour_hints(mut self, on: bool) -> Self {
        self.hints = on;
        self
    }

    pub fn state(&self) -> TaskState {
        self.state
    }
    pub fn status_at(&self) -> Timestamp {
        self.status_at
    }
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
    pub fn is_final(&self) -> bool {
        self.done
    }
    pub fn is_interrupted(&self) -> bool {
        !self.done && self.follower.as_ref().is_some_and(TurnFollower::is_parked)
    }
    fn working(&self) -> bool {
        !self.done && self.follower.as_ref().is_some_and(|f| f.running().is_some())
    }
    /// Final or interrupted: where blocking sends return and streams close.
    pub fn settled(&self) -> bool {
        self.is_final() || self.is_interrupted()
    }
    /// The turn has not produced anything yet (streams hold the first Task until then, so a
    /// direct Message answer can still replace it).
    pub fn quiet(&self) -> bool {
        !(self.done || self.is_interrupted() || (self.working() && self.seen_output))
    }
    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }
    /// A direct Message answer (projection hint), if the agent gave one.
    pub fn direct_message(&self) -> Option<&Message> {
        self.direct.as_ref()
    }

    fn msg(&self, id: String, role_user: bool, parts: Vec<Part>) -> Message {
        let mut m = Message::agent(id, parts);
        if role_user {
            m.role = crate::wire::Role::User;
        }
        m.task_id = Some(self.task_id.clone());
        m.context_id = Some(self.context_id.clone());
        m
    }

    fn push_history(&mut self, m: Message) {
        if self.history.len() >= MAX_ITEMS {
            self.history.remove(0);
        }
        self.history.push(m);
    }

    fn status(&self) -> TaskStatus {
        TaskStatus {
            state: self.state,
            message: self.status_message.clone(),
            timestamp: Some(self.status_at.to_rfc3339()),
        }
    }

    fn set_state(&mut self, state: TaskState, at: Timestamp, message: Option<Message>) -> Vec<StreamResponse> {
        self.state = state;
        self.status_at = at;
        if let Some(m) = &message {
            self.push_history(m.clone());
        }
        self.status_message = message;
        vec![StreamResponse::StatusUpdate(StatusUpdate {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
            metadata: self.metadata(),
        })]
    }

    /// The task's metadata: the session's model usage once its turn reported it (tokens and,
    /// for models with list prices, the list cost in US dollars). A2A defines no usage
    /// field; the key is ours.
    fn metadata(&self) -> Option<Map<String, Value>> {
        self.usage.as_ref().map(|u| Map::from_iter([("usage".to_owned(), Value::Object(u.clone()))]))
    }

    fn finish(&mut self, state: TaskState, e: &Event) -> Vec<StreamResponse> {
        self.done = true;
        self.pending.clear();
        let message = self.final_message.take().or_else(|| match (state, &self.last_error) {
            (TaskState::Failed, Some(err)) => Some(self.msg(e.id.to_string(), false, vec![Part::text(err.clone())])),
            (TaskState::Failed, None) => {
                Some(self.msg(e.id.to_string(), false, vec![Part::text("the session ended before the task finished")]))
            }
            _ => None,
        });
        self.set_state(state, e.created_at, message)
    }

    /// Folds one committed event in (events must come in seq order); returns the updates a
    /// stream shows for it.
    pub fn apply(&mut self, e: &Event) -> Vec<StreamResponse> {
        self.last_seq = e.seq;
        let Some(follower) = self.follower.as_mut() else {
            if e.id == self.start
                && let EventPayload::UserMessage { content } = &e.payload
            {
                let m = self.msg(self.client_message_id.clone(), true, parts_from_blocks(content));
                self.push_history(m);
                self.status_at = e.created_at;
                self.follower = Some(TurnFollower::new(e.seq));
            }
            return vec![];
        };
        if self.done {
            return vec![];
        }
        let parked = follower.is_parked();
        match follower.follow(e) {
            Relation::Before | Relation::Other => vec![],
            Relation::Started => {
                self.pending.clear();
                self.set_state(TaskState::Working, e.created_at, None)
            }
            Relation::Ours => self.output(e),
            // While the task waits, the answers are part of its history.
            Relation::Input if parked => self.answer(e),
            Relation::Input => vec![],
            Relation::Parked(ids) => self.park(e, &ids),
            Relation::Ended(stop) => match stop {
                // (A park is `Relation::Parked`, never an end.)
                StopReason::RequiresAction { .. } | StopReason::EndTurn => self.finish(TaskState::Completed, e),
                StopReason::Refusal => self.finish(TaskState::Rejected, e),
                StopReason::Interrupted => self.finish(TaskState::Canceled, e),
                StopReason::RetriesExhausted
                | StopReason::RoundLimit
                | StopReason::Failed
                | StopReason::BudgetReached => self.finish(TaskState::Failed, e),
            },
            Relation::Closed => self.finish(TaskState::Failed, e),
        }
    }

    /// Our turn's own output.
    fn output(&mut self, e: &Event) -> Vec<StreamResponse> {
        match &e.payload {
            EventPayload::SessionUsage { usage, .. } => {
                let mut u = Map::new();
                u.insert("inputTokens".into(), json!(usage.input_tokens));
                u.insert("outputTokens".into(), json!(usage.output_tokens));
                u.insert("cacheReadInputTokens".into(), json!(usage.cache_read_input_tokens));
                u.insert("cacheCreationInputTokens".into(), json!(usage.cache_creation_input_tokens));
                if let Some(micros) = usage.list_cost() {
                    u.insert("listCostUsd".into(), json!(micros as f64 / 1e6));
                }
                self.usage = Some(u);
                vec![]
            }
            EventPayload::AgentMessage { content } => {
                self.seen_output = true;
                self.agent_output(e, content)
            }
            EventPayload::ToolUse { name, input, origin, permission, .. } => {
                self.seen_output = true;
                let confirm = *permission == ToolPermission::Ask && *origin != ToolOrigin::Custom;
                if self.tools.len() < MAX_ITEMS {
                    self.tools.insert(e.id.clone(), (name.clone(), input.clone(), confirm));
                }
                vec![]
            }
            EventPayload::SessionError { message, retry, .. } => {
                if *retry != gateway_core::event::RetryStatus::Retrying {
                    self.last_error = Some(message.clone());
                }
                vec![]
            }
            _ => {
                self.seen_output = true;
                vec![]
            }
        }
    }

    /// A client's answer to what the parked task waits for, as a history message.
    fn answer(&mut self, e: &Event) -> Vec<StreamResponse> {
        let m = match &e.payload {
            EventPayload::ToolConfirmation { tool_use_id, allow, deny_message } => {
                let mut d = json!({"tool_use_id": tool_use_id, "allow": allow});
                if let Some(m) = deny_message {
                    d["deny_message"] = json!(m);
                }
                self.msg(e.id.to_string(), true, vec![Part::data(d)])
            }
            EventPayload::ClientToolResult { content, .. } => {
                self.msg(e.id.to_string(), true, parts_from_blocks(content))
            }
            _ => return vec![],
        };
        self.push_history(m);
        vec![]
    }

    fn park(&mut self, e: &Event, ids: &[EventId]) -> Vec<StreamResponse> {
        self.pending.clear();
        let mut lines = Vec::new();
        let mut data = Vec::new();
        let mut auth = false;
        for id in ids {
            let (name, input, confirmation) =
                self.tools.get(id).cloned().unwrap_or_else(|| ("tool".into(), JsonObject::new(), false));
            auth |= name == REMOTE_AUTH_TOOL;
            let prompt = input.get("prompt").and_then(Value::as_str).map(str::to_owned);
            lines.push(match (&prompt, confirmation) {
                (Some(p), _) => p.clone(),
                (None, true) => format!("Approve tool `{name}`? Reply \"allow\" or \"deny\"."),
                (None, false) => format!("Run tool `{name}` and send its result."),
            });
            data.push(Part::data(json!({
                "tool_use_id": id,
                "kind": if confirmation { "confirmation" } else { "client_result" },
                "name": name,
                "input": input,
            })));
            self.pending.push(Pending { tool_use_id: id.clone(), confirmation, name });
        }
        let mut parts = vec![Part::text(lines.join("\n"))];
        parts.extend(data);
        let message = self.msg(e.id.to_string(), false, parts);
        let state = if auth { TaskState::AuthRequired } else { TaskState::InputRequired };
        self.set_state(state, e.created_at, Some(message))
    }

    fn agent_output(&mut self, e: &Event, content: &[ContentBlock]) -> Vec<StreamResponse> {
        let (hint, rest) = match content.first() {
            Some(ContentBlock::Data { data: Value::Object(m) })
                if self.hints && m.len() == 1 && m.contains_key(HINT_KEY) =>
            {
                (m.get(HINT_KEY).cloned().unwrap_or(Value::Null), &content[1..])
            }
            _ => (Value::Null, content),
        };
        let parts = parts_from_blocks(rest);
        if parts.is_empty() {
            return vec![];
        }
        let s = |k: &str| hint.get(k).and_then(Value::as_str).map(str::to_owned);
        let b = |k: &str| hint.get(k).and_then(Value::as_bool).unwrap_or(false);
        match s("as").as_deref() {
            Some("status") => {
                self.final_message = Some(self.msg(e.id.to_string(), false, parts));
                vec![]
            }
            Some("message") => {
                let mut m = Message::agent(e.id.to_string(), parts);
                m.context_id = Some(self.context_id.clone());
                self.direct = Some(m);
                vec![]
            }
            _ => {
                let id = s("artifactId").unwrap_or_else(|| e.id.to_string());
                let append = b("append");
                let last_chunk = if hint.is_null() { true } else { b("lastChunk") };
                let chunk =
                    Artifact { artifact_id: id.clone(), name: s("name"), description: None, parts, metadata: None };
                match self.artifacts.iter_mut().find(|a| a.artifact_id == id) {
                    Some(existing) if append => existing.parts.extend(chunk.parts.clone()),
                    Some(existing) => *existing = chunk.clone(),
                    None => {
                        if self.artifacts.len() >= MAX_ITEMS {
                            self.artifacts.remove(0);
                        }
                        self.artifacts.push(chunk.clone());
                    }
                }
                vec![StreamResponse::ArtifactUpdate(ArtifactUpdate {
                    task_id: self.task_id.clone(),
                    context_id: self.context_id.clone(),
                    artifact: chunk,
                    append,
                    last_chunk,
                    metadata: None,
                })]
            }
        }
    }

    /// The Task as of the events folded so far. `history_length`: None = all, 0 = none,
    /// n = the n newest.
    pub fn task(&self, history_length: Option<i64>, include_artifacts: bool) -> Task {
        let history = match history_length {
            None => self.history.clone(),
            Some(n) => {
                let n = usize::try_from(n.max(0)).unwrap_or(0);
                self.history[self.history.len().saturating_sub(n)..].to_vec()
            }
        };
        Task {
            id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
            artifacts: if include_artifacts { self.artifacts.clone() } else { vec![] },
            history,
            metadata: self.metadata(),
        }
    }
}

/// The hint block an agent puts first in a message to steer its projection.
pub fn hint(value: Value) -> ContentBlock {
    ContentBlock::Data { data: json!({ HINT_KEY: value }) }
}

#[cfg(test)]
#[path = "projection_tests.rs"]
mod tests;
