//! The native backend: the gateway's own model loop.
//!
//! One run executes (or resumes) one turn: model request, tool calls, model request, ... until
//! the model stops, a tool needs a client's answer (the turn parks), a client interrupts, or
//! the round limit is reached. Everything it does is committed through the run's fence
//! before anything depends on it; a resumed run reads the log and continues from there:
//! a tool call journaled as started but without a result is reported indeterminate, never
//! run again (invariant 5).
//!
//! Its own crate, beside the ACP and A2A backends, because it is one backend among several:
//! it uses only the runtime's Backend port ([`RunContext`]) and its Session Environments, and it
//! is the one user of the model clients (`gateway-models`), so the dispatch engine no longer
//! depends on them (docs/adr/0023).

pub mod compaction;
pub mod conversation;
pub mod mcp;
pub mod models;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gateway_core::agent::{AgentSpec, PermissionPolicy, ToolAvailability, ToolSpec};
use gateway_core::content::ContentBlock;
use gateway_core::event::{
    ErrorKind, Event, EventKind, EventPayload, NewEvent, ThinkingSeal, ToolOrigin, ToolPermission, Usage,
};
use gateway_core::models::ServedModel;
use gateway_core::placement::ToolExecution;
use gateway_core::session::{ClientToolServer, PendingAction, PendingKind, ResourceKind};
use gateway_core::turn::RunView;
use gateway_core::{EventId, JsonObject, mounts};
use gateway_models::{Block, ModelError, ModelRequest, StopReason as ModelStop, StreamEvent};
use gateway_sandbox::ToolOutput;
pub use models::Models;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use gateway_runtime::backend::{Backend, BackendError, RunContext, TurnOutcome};
use gateway_runtime::environment::{Environments, Lease};
use gateway_runtime::executors::Connection;
use gateway_runtime::previews::Preview;

pub use gateway_services::web::WebTools;
use gateway_services::web::{DomainRules, WebAnswer, WebTool};
use mcp::McpTools;
pub use mcp::{McpAccess, McpConfig};

/// `[native]`: the model loop's bounds (missing keys keep these defaults).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct NativeConfig {
    /// Model requests per turn before the turn ends with a round-limit error.
    pub max_rounds: u32,
    /// `max_tokens` of each model request.
    pub max_tokens: u32,
    /// Compactions in a row (without the model answering in between) before the turn ends
    /// with a compaction-limit error: a conversation that still does not fit after this
    /// many summaries will not.
    pub max_compactions: u32,
}

impl Default for NativeConfig {
    fn default() -> Self {
        Self { max_rounds: 20, max_tokens: 8192, max_compactions: 3 }
    }
}

pub struct NativeBackend {
    models: Models,
    environments: Option<Arc<Environments>>,
    config: NativeConfig,
    /// How agents' MCP servers are reached; without it, an agent's MCP servers are reported
    /// unavailable at every turn (never silently dropped).
    mcp: Option<Arc<McpAccess>>,
    /// `web_fetch` and `web_search`; without them, both answer that they are not available.
    web: Option<Arc<WebTools>>,
}

impl NativeBackend {
    /// A backend asking `models` (one client for every id, or the configured routes).
    pub fn new(models: impl Into<Models>, environments: Option<Arc<Environments>>, config: NativeConfig) -> Self {
        Self { models: models.into(), environments, config, mcp: None, web: None }
    }

    /// Lets this backend run the web tools.
    pub fn with_web(mut self, web: Arc<WebTools>) -> Self {
        self.web = Some(web);
        self
    }

    /// Lets this backend call agents' MCP servers.
    pub fn with_mcp(mut self, access: Arc<McpAccess>) -> Self {
        self.mcp = Some(access);
        self
    }
}

/// How a tool call the model made is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// A built-in the Hand runs now.
    Execute,
    /// A built-in that waits for a client's approval.
    Ask,
    /// Run by the client (custom tools, self-hosted executors); the turn parks for the result.
    Client,
    /// Not offered to this agent.
    Unavailable,
    /// A built-in whose policy asks for approval, on a session whose executor runs its tools:
    /// refused, never run unapproved (the approval cannot yet be routed to the executor).
    NeedsApproval,
}

/// How a call is handled, where it comes from, the name it is journaled under (an MCP tool's
/// own name, whatever name it was offered under) and the policy that decided it.
fn route(
    agent: &AgentSpec,
    execution: ToolExecution,
    mcp: Option<&McpTools>,
    name: &str,
) -> (Route, ToolOrigin, String, Option<PermissionPolicy>) {
    if matches!(agent.builtin_tool(name), ToolAvailability::Disabled)
        && agent.custom_tool(name).is_none()
        && let Some((server, tool)) = mcp.and_then(|m| m.resolve(name))
    {
        let origin = ToolOrigin::Mcp { server: server.clone() };
        return match mcp.map_or(ToolAvailability::Disabled, |m| m.availability(agent, &server, &tool)) {
            ToolAvailability::Enabled(p) if p.requires_approval() => (Route::Ask, origin, tool, Some(p)),
            ToolAvailability::Enabled(p) => (Route::Execute, origin, tool, Some(p)),
            ToolAvailability::Disabled => (Route::Unavailable, origin, tool, None),
        };
    }
    let (r, origin, policy) = route_local(agent, execution, name);
    (r, origin, name.to_owned(), policy)
}

/// [`route`] for the built-in and custom tools.
fn route_local(
    agent: &AgentSpec,
    execution: ToolExecution,
    name: &str,
) -> (Route, ToolOrigin, Option<PermissionPolicy>) {
    match agent.builtin_tool(name) {
        // A self-hosted executor runs the tools that touch its machine; web tools stay here.
        ToolAvailability::Enabled(p) if execution == ToolExecution::External && is_local_tool(name) => {
            let r = if p.requires_approval() { Route::NeedsApproval } else { Route::Client };
            (r, ToolOrigin::Builtin, Some(p))
        }
        ToolAvailability::Enabled(p) if p.requires_approval() => (Route::Ask, ToolOrigin::Builtin, Some(p)),
        ToolAvailability::Enabled(p) => (Route::Execute, ToolOrigin::Builtin, Some(p)),
        ToolAvailability::Disabled if agent.custom_tool(name).is_some() => (Route::Client, ToolOrigin::Custom, None),
        ToolAvailability::Disabled => (Route::Unavailable, ToolOrigin::Builtin, None),
    }
}

/// Tools that need no local environment: answered without realizing one.
fn is_local_tool(name: &str) -> bool {
    WebTool::from_name(name).is_none()
}

/// The domain rules an agent's toolset gives a web tool (`allowed_domains`,
/// `blocked_domains` of its entry).
fn domain_rules(agent: &AgentSpec, name: &str) -> Result<DomainRules, gateway_services::web::WebError> {
    let extras = agent.tools.iter().find_map(|t| match t {
        ToolSpec::Builtin { configs, .. } => configs.iter().find(|c| c.name == name).map(|c| &c.extras),
        _ => None,
    });
    let list = |key: &str| -> Vec<String> {
        extras
            .and_then(|e| e.get(key))
            .and_then(serde_json::Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    DomainRules::new(&list("allowed_domains"), &list("blocked_domains"))
}

/// The span of one tool call (OpenTelemetry's `execute_tool`), whatever runs it.
fn tool_span(name: &str, id: &EventId) -> tracing::Span {
    tracing::info_span!(
        "tool_call",
        otel.name = format!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %id,
    )
}

fn text_result(tool_use_id: &EventId, origin: ToolOrigin, text: impl Into<String>, is_error: bool) -> NewEvent {
    NewEvent::new(EventPayload::ToolResult {
        tool_use_id: tool_use_id.clone(),
        origin,
        content: vec![ContentBlock::text(text)],
        is_error,
    })
}

/// A model response's usage, in the log's terms (priced separately).
fn model_usage(u: &gateway_models::Usage) -> Usage {
    Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        ..Usage::default()
    }
}

fn model_error(e: ModelError) -> BackendError {
    let kind = match &e {
        ModelError::RateLimited { .. } => ErrorKind::ModelRateLimited,
        ModelError::Overloaded { .. } => ErrorKind::ModelOverloaded,
        _ => ErrorKind::ModelRequestFailed,
    };
    if e.is_transient() {
        BackendError::Transient { kind, retry_after: e.retry_after(), message: e.to_string() }
    } else {
        BackendError::Failed { kind, message: e.to_string() }
    }
}

/// One run of one turn: what the run may see, and the Hand once acquired.
struct Turn<'a> {
    backend: &'a NativeBackend,
    ctx: &'a RunContext,
    /// The log as this run sees it (`gateway_core::turn`).
    view: RunView,
    lease: Option<Lease>,
    /// The agent's MCP servers, connected at this run's first need (None: not yet, or the
    /// agent has none).
    mcp: Option<McpTools>,
}

impl<'a> Turn<'a> {
    async fn commit(&mut self, events: Vec<NewEvent>) -> Result<Vec<Event>, BackendError> {
        let committed = self.ctx.commit(events).await?;
        self.view.record(committed.iter().cloned());
        Ok(committed)
    }

    fn turn(&self) -> &[Event] {
        self.view.turn()
    }

    /// Connects the agent's MCP servers once per run, committing a session error for each
    /// that cannot be used. An agent without MCP toolsets costs nothing here.
    async fn ensure_mcp(&mut self) -> Result<(), BackendError> {
        let snapshot = &self.ctx.session.snapshot;
        if self.mcp.is_some()
            || (snapshot.agent.spec.mcp_servers_in_use().is_empty() && snapshot.client_tool_servers.is_empty())
        {
            return Ok(());
        }
        // A client's command servers run in the session's sandbox.
        let hand = match snapshot.client_tool_servers.iter().any(|s| matches!(s, ClientToolServer::Stdio { .. })) {
            true => Some(self.hand_with(vec![]).await?),
            false => None,
        };
        let snapshot = &self.ctx.session.snapshot;
        let session = self.ctx.session.id.to_string();
        let side = mcp::ClientSide { hand, environments: self.backend.environments.as_deref(), session: &session };
        let (tools, errors) = match &self.backend.mcp {
            Some(access) => McpTools::connect(access, &snapshot.agent.spec, snapshot, side).await,
            None => McpTools::not_configured(snapshot),
        };
        self.mcp = Some(tools);
        if !errors.is_empty() {
            self.commit(errors).await?;
        }
        Ok(())
    }

    /// The session's Hand, realizing the environment with `events` (committed together).
    async fn hand_with(&mut self, events: Vec<NewEvent>) -> Result<Arc<gateway_sandbox::Hand>, BackendError> {
        if let Some(lease) = &self.lease {
            let hand = Arc::clone(&lease.acquired.hand);
            if !events.is_empty() {
                self.commit(events).await?;
            }
            return Ok(hand);
        }
        let Some(envs) = &self.backend.environments else {
            return Err(BackendError::Failed {
                kind: ErrorKind::PlacementFailed,
                message: "no sandbox provider is configured on this host".into(),
            });
        };
        let mut lease = envs.acquire(&self.ctx.session).await?;
        let hand = Arc::clone(&lease.acquired.hand);
        match lease.acquired.change.take() {
            Some(change) => {
                let committed = self.ctx.commit_environment(events, change).await?;
                self.view.record(committed);
            }
            None if !events.is_empty() => {
                self.commit(events).await?;
            }
            None => {}
        }
        self.lease = Some(lease);
        Ok(hand)
    }

    /// Journals the call as started, runs it, commits its result. An interrupt cancels the
    /// tool; its (partial) result is still committed.
    async fn execute(
        &mut self,
        id: &EventId,
        origin: &ToolOrigin,
        name: &str,
        input: &JsonObject,
    ) -> Result<(), BackendError> {
        if let ToolOrigin::Mcp { server } = origin {
            return self.execute_mcp(id, server, name, input).await;
        }
        if let Some(tool) = WebTool::from_name(name) {
            return self.execute_web(id, tool, name, input).await;
        }
        let hand = self.hand_with(vec![NewEvent::new(EventPayload::ToolStarted { tool_use_id: id.clone() })]).await?;
        let cancel = CancellationToken::new();
        let span = tool_span(name, id);
        let run = hand.run(name, input, &cancel).instrument(span);
        tokio::pin!(run);
        let out: ToolOutput = tokio::select! {
            out = &mut run => out,
            _ = self.ctx.interrupted() => {
                cancel.cancel();
                run.await
            }
        };
        self.commit(vec![text_result(id, ToolOrigin::Builtin, out.text, out.is_error)]).await?;
        Ok(())
    }

    /// An MCP call: journaled as started (committed) before it is sent, so a run that loses
    /// its claim afterwards reports it indeterminate and never sends it again. An interrupt
    /// abandons the call (the server is told it was cancelled).
    async fn execute_mcp(
        &mut self,
        id: &EventId,
        server: &str,
        tool: &str,
        input: &JsonObject,
    ) -> Result<(), BackendError> {
        self.ensure_mcp().await?;
        self.commit(vec![NewEvent::new(EventPayload::ToolStarted { tool_use_id: id.clone() })]).await?;
        let span = tool_span(tool, id);
        let (content, is_error) = match &self.mcp {
            Some(mcp) => tokio::select! {
                out = mcp.call(server, tool, input).instrument(span) => out,
                _ = self.ctx.interrupted() => (vec![ContentBlock::text("the call was interrupted")], true),
            },
            // The session no longer names the server (its agent was changed since the call).
            None => (vec![ContentBlock::text(format!("MCP server {server:?} is not one of this session's"))], true),
        };
        let origin = ToolOrigin::Mcp { server: server.to_owned() };
        self.commit(vec![NewEvent::new(EventPayload::ToolResult {
            tool_use_id: id.clone(),
            origin,
            content,
            is_error,
        })])
        .await?;
        Ok(())
    }

    /// A web tool: journaled as started, run by the gateway (never in a sandbox, whatever the
    /// session's environment), held to the agent's domain rules for it.
    async fn execute_web(
        &mut self,
        id: &EventId,
        tool: WebTool,
        name: &str,
        input: &JsonObject,
    ) -> Result<(), BackendError> {
        let Some(web) = self.backend.web.clone() else {
            let out = format!("{name} is not available in this gateway");
            self.commit(vec![text_result(id, ToolOrigin::Builtin, out, true)]).await?;
            return Ok(());
        };
        self.commit(vec![NewEvent::new(EventPayload::ToolStarted { tool_use_id: id.clone() })]).await?;
        let span = tool_span(name, id);
        let answer = match domain_rules(&self.ctx.session.snapshot.agent.spec, name) {
            Ok(rules) => {
                let input = serde_json::Value::Object(input.clone());
                tokio::select! {
                    a = web.answer(tool, &input, &rules).instrument(span) => a,
                    _ = self.ctx.interrupted() => WebAnswer { text: "the call was interrupted".into(), is_error: true },
                }
            }
            Err(e) => WebAnswer { text: e.to_string(), is_error: true },
        };
        self.commit(vec![text_result(id, ToolOrigin::Builtin, answer.text, answer.is_error)]).await?;
        Ok(())
    }

    /// Before a self-hosted session's built-in calls park for their results: makes sure an
    /// executor serves the session, asking for one and waiting (DESIGN §5a). Returns the
    /// outcome that ends the turn instead: interrupted while waiting; or, when nobody came in
    /// time, the calls answered with an error (a late executor must not run them) and the turn
    /// failed with a typed error.
    async fn await_executor(&mut self, calls: &[EventId]) -> Result<Option<TurnOutcome>, BackendError> {
        if calls.is_empty() {
            return Ok(None);
        }
        match self.ctx.connect_executor().await? {
            Connection::Connected => Ok(None),
            Connection::Cancelled => Ok(Some(TurnOutcome::Interrupted)),
            Connection::TimedOut => {
                let secs = self.ctx.executor_settings().connect_timeout.as_secs();
                let message = format!(
                    "no self-hosted executor connected to environment {} within {secs}s; the tool call was not run",
                    self.ctx.session.environment_id
                );
                // Answered as an executor's result would be: that is what tells any executor
                // (the official worker counts only `user.tool_result`s) the call is settled.
                let results = calls
                    .iter()
                    .map(|id| {
                        NewEvent::new(EventPayload::ClientToolResult {
                            tool_use_id: id.clone(),
                            content: vec![ContentBlock::text(message.clone())],
                            is_error: true,
                            origin: ToolOrigin::Builtin,
                        })
                    })
                    .collect();
                self.commit(results).await?;
                Err(BackendError::Failed { kind: ErrorKind::EnvironmentConnectTimeout, message })
            }
        }
    }

    /// Finishes what an earlier run of this turn left open. Returns an outcome when the turn
    /// must not call the model again (it parks again, or the model had already finished).
    async fn resume(&mut self) -> Result<Option<TurnOutcome>, BackendError> {
        let turn: Vec<Event> = self.turn().to_vec();
        let answered: HashSet<&EventId> =
            turn.iter()
                .filter_map(|e| match &e.payload {
                    EventPayload::ToolResult { tool_use_id, .. }
                    | EventPayload::ClientToolResult { tool_use_id, .. } => Some(tool_use_id),
                    _ => None,
                })
                .collect();
        let started: HashSet<&EventId> = turn
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::ToolStarted { tool_use_id } => Some(tool_use_id),
                _ => None,
            })
            .collect();
        let confirmed: HashMap<&EventId, (bool, Option<&String>)> = turn
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::ToolConfirmation { tool_use_id, allow, deny_message } => {
                    Some((tool_use_id, (*allow, deny_message.as_ref())))
                }
                _ => None,
            })
            .collect();

        // Close model-request spans a lost claim left open.
        let ended: HashSet<&EventId> = turn
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::ModelRequestEnded { start_id, .. } => Some(start_id),
                _ => None,
            })
            .collect();
        let dangling: Vec<NewEvent> = turn
            .iter()
            .filter(|e| e.kind() == EventKind::ModelRequestStarted && !ended.contains(&e.id))
            .map(|e| {
                NewEvent::new(EventPayload::ModelRequestEnded {
                    start_id: e.id.clone(),
                    is_error: true,
                    usage: Usage::default(),
                })
            })
            .collect();
        if !dangling.is_empty() {
            self.commit(dangling).await?;
        }

        let mut pending = Vec::new();
        let mut executor_calls = Vec::new();
        for e in &turn {
            let EventPayload::ToolUse { name, input, origin, permission, .. } = &e.payload else { continue };
            if answered.contains(&e.id) || *origin == ToolOrigin::Backend {
                continue;
            }
            let id = &e.id;
            match (origin, permission) {
                (ToolOrigin::Custom, _) => {
                    pending.push(PendingAction { event_id: id.clone(), kind: PendingKind::ClientResult })
                }
                (ToolOrigin::Builtin, ToolPermission::Allow)
                    if self.ctx.session.snapshot.requirements.tool_execution == ToolExecution::External
                        && is_local_tool(name) =>
                {
                    executor_calls.push(id.clone());
                    pending.push(PendingAction { event_id: id.clone(), kind: PendingKind::ClientResult })
                }
                _ if started.contains(id) => {
                    let msg = "indeterminate: this tool call was started by a run that lost its claim; it may or may not \
                               have taken effect and was not run again";
                    self.commit(vec![text_result(id, origin.clone(), msg, true)]).await?;
                }
                (_, ToolPermission::Ask) => match confirmed.get(id) {
                    Some((true, _)) => self.execute(id, origin, name, input).await?,
                    Some((false, message)) => {
                        let text = match message {
                            Some(m) => format!("The user denied this tool call: {m}"),
                            None => "The user denied this tool call.".to_owned(),
                        };
                        self.commit(vec![text_result(id, origin.clone(), text, true)]).await?;
                    }
                    None => pending.push(PendingAction { event_id: id.clone(), kind: PendingKind::Confirmation }),
                },
                (_, ToolPermission::Deny) => {
                    self.commit(vec![text_result(id, origin.clone(), "This tool call was denied by policy.", true)])
                        .await?;
                }
                (_, ToolPermission::Allow) => self.execute(id, origin, name, input).await?,
            }
            if self.ctx.is_interrupted() {
                return Ok(Some(TurnOutcome::Interrupted));
            }
        }
        if let Some(outcome) = self.await_executor(&executor_calls).await? {
            return Ok(Some(outcome));
        }
        if !pending.is_empty() {
            return Ok(Some(TurnOutcome::Parked { pending }));
        }
        // If the last model response ended the turn (no tool calls after it), the turn is over:
        // asking again would answer twice.
        let last_start = turn.iter().rposition(|e| e.kind() == EventKind::ModelRequestStarted);
        let last_end =
            turn.iter().rposition(|e| matches!(&e.payload, EventPayload::ModelRequestEnded { is_error: false, .. }));
        if let (Some(s), Some(end)) = (last_start, last_end)
            && end > s
            && !turn[s..].iter().any(|e| e.kind() == EventKind::ToolUse)
        {
            return Ok(Some(TurnOutcome::EndTurn));
        }
        Ok(None)
    }

    /// The agent's system prompt, followed by where the session's mounted files are (the
    /// paths they were mounted at where the sandbox shows them there, else their real paths:
    /// the `local` sandbox; `gateway_core::mounts`), the client's additional directories, and
    /// which skills it has, with each one's description and directory, as the Managed Agents
    /// documentation describes.
    fn system_prompt(&self) -> Option<String> {
        let base = self.environment_prompt();
        let Some(note) = self.mcp.as_ref().and_then(McpTools::note) else { return base };
        Some(match base {
            Some(s) if !s.is_empty() => format!("{s}\n\n{note}"),
            _ => note,
        })
    }

    /// The system prompt with what the environment holds (mounted files, skills).
    fn environment_prompt(&self) -> Option<String> {
        let system = self.ctx.session.snapshot.agent.spec.system.clone();
        let Some(hand) = self.lease.as_ref().map(|l| &l.acquired.hand) else { return system };
        let in_view = hand.inner_path(std::path::Path::new("")) == std::path::Path::new(mounts::WORKSPACE_VIEW);
        // Mounted files, and a client's additional directories (at their own paths in every
        // sandbox), in one walk of the session's resources.
        let (mut lines, mut extra) = (Vec::new(), Vec::new());
        for r in &self.ctx.session.snapshot.resources {
            match &r.kind {
                ResourceKind::File { mount_path, .. } => {
                    let Ok(rel) = mounts::workspace_relative(mount_path) else { continue };
                    lines.push(if in_view {
                        format!("- {mount_path}")
                    } else {
                        format!("- {mount_path}: at {}", hand.inner_path(&rel).display())
                    });
                }
                ResourceKind::Workspace { additional, .. } => {
                    extra.extend(additional.iter().map(|e| format!("- {}", e.path)));
                }
                ResourceKind::Repository { .. } => {}
            }
        }
        let skills: Vec<String> = self
            .ctx
            .session
            .snapshot
            .agent
            .spec
            .skills
            .iter()
            .filter_map(|k| k.resolved.as_ref())
            .map(|k| {
                let dir = hand.inner_path(&mounts::skill_relative(&k.name));
                format!("- {}: {} (read {}/SKILL.md before using it)", k.name, k.description, dir.display())
            })
            .collect();
        let mut notes = Vec::new();
        if !lines.is_empty() {
            notes.push(format!("Files mounted in your environment (read-only):\n{}", lines.join("\n")));
        }
        if !extra.is_empty() {
            notes.push(format!(
                "Directories beside your workspace that you may also read and change (name files in them by absolute path):\n{}",
                extra.join("\n")
            ));
        }
        if !skills.is_empty() {
            notes.push(format!(
                "Skills available in your environment, each a directory whose SKILL.md says how to use it:\n{}",
                skills.join("\n")
            ));
        }
        if notes.is_empty() {
            return system;
        }
        let note = notes.join("\n\n");
        Some(match system {
            Some(s) if !s.is_empty() => format!("{s}\n\n{note}"),
            _ => note,
        })
    }

    /// The turn's end if the session's budget is used up (or cannot measure what was used):
    /// checked before every model request.
    fn budget_reached(&self) -> Option<TurnOutcome> {
        let budget = self.ctx.session.budget?;
        budget.reached_by(&self.ctx.usage()).then_some(TurnOutcome::BudgetReached)
    }

    /// The next model request, as the log now stands.
    fn request(&self, served: &ServedModel) -> ModelRequest {
        let agent = &self.ctx.session.snapshot.agent.spec;
        let mcp = self.mcp.as_ref();
        let mut tools = conversation::tool_definitions(agent);
        tools.extend(mcp.map(|m| m.definitions(agent)).unwrap_or_default());
        let offered = |server: &str, tool: &str| mcp.and_then(|m| m.offered(server, tool)).map(str::to_owned);
        let thinking = thinking_budget(agent.model.effort.as_deref());
        let max_tokens = self.backend.config.max_tokens;
        ModelRequest {
            model: served.model.clone(),
            system: self.system_prompt(),
            messages: conversation::messages_with(self.view.events(), &offered, thinking.is_some()),
            tools,
            // The answer's room stays what it was, beside the reasoning's.
            max_tokens: thinking.map_or(max_tokens, |budget| budget.saturating_add(max_tokens)),
            thinking,
        }
    }

    /// Summarises the conversation through seq `through` with the model and commits the
    /// summary (with the request's span): the next request shows it in their place. Returns
    /// the turn's end if the budget or an interrupt stops it first.
    async fn compact(
        &mut self,
        served: &ServedModel,
        client: &Arc<dyn gateway_models::ModelClient>,
        next: &ModelRequest,
        through: u64,
    ) -> Result<Result<(), TurnOutcome>, BackendError> {
        if let Some(outcome) = self.budget_reached() {
            return Ok(Err(outcome));
        }
        let covered: Vec<Event> = self.view.events().iter().filter(|e| e.seq <= through).cloned().collect();
        let request = {
            let mcp = self.mcp.as_ref();
            let offered = |server: &str, tool: &str| mcp.and_then(|m| m.offered(server, tool)).map(str::to_owned);
            compaction::summary_request(next, conversation::messages_with(&covered, &offered, false))
        };
        let start = NewEvent::new(EventPayload::ModelRequestStarted {});
        let start_id = start.id.clone();
        let close = |is_error: bool, usage: Usage| {
            NewEvent::new(EventPayload::ModelRequestEnded { start_id: start_id.clone(), is_error, usage })
        };
        let response = match self.ask(client, &request, None).await {
            Ok(r) => r,
            Err(error) => return self.unanswered(vec![start, close(true, Usage::default())], error),
        };
        let summary = compaction::summary_of(&response.content);
        let usage = self.used(served, &response.usage);
        if summary.trim().is_empty() {
            self.ctx.stage([start, close(true, usage)]);
            return Err(BackendError::Failed {
                kind: ErrorKind::ModelRequestFailed,
                message: "the model returned no summary when asked to compact the conversation".into(),
            });
        }
        let compacted = NewEvent::new(EventPayload::ContextCompacted { summary, through });
        self.commit(vec![start, close(false, usage), compacted]).await?;
        Ok(Ok(()))
    }

    /// Asks the model (streaming progress to `on_event`, or for the whole answer at once)
    /// under the request's trace span, unless the client interrupts first (`Err(None)`), and
    /// times it for the metrics.
    async fn ask(
        &self,
        client: &Arc<dyn gateway_models::ModelClient>,
        request: &ModelRequest,
        on_event: Option<&(dyn Fn(StreamEvent) + Send + Sync)>,
    ) -> Result<gateway_models::ModelResponse, Option<ModelError>> {
        let span = tracing::info_span!(
            "model_request",
            otel.name = format!("chat {}", request.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.request.model = %request.model,
            gen_ai.request.max_tokens = request.max_tokens,
        );
        let asking = async {
            match on_event {
                Some(on_event) => client.stream(request, on_event).await,
                None => client.complete(request).await,
            }
        };
        let asked = std::time::Instant::now();
        let answered = tokio::select! {
            r = asking.instrument(span) => Some(r),
            _ = self.ctx.interrupted() => None,
        };
        let outcome = match &answered {
            None => "interrupted",
            Some(Ok(_)) => "ok",
            Some(Err(e)) => e.kind(),
        };
        self.ctx.metrics().model_request(outcome, asked.elapsed());
        match answered {
            Some(Ok(response)) => Ok(response),
            Some(Err(e)) => Err(Some(e)),
            None => Err(None),
        }
    }

    /// A request that got no answer: `ended` (its span, closed as failed) rides with the
    /// settlement, and the turn ends interrupted (`None`) or fails with the model's error.
    fn unanswered<T>(
        &self,
        ended: Vec<NewEvent>,
        error: Option<ModelError>,
    ) -> Result<Result<T, TurnOutcome>, BackendError> {
        self.ctx.stage(ended);
        match error {
            None => Ok(Err(TurnOutcome::Interrupted)),
            Some(e) => Err(model_error(e)),
        }
    }

    /// A response's usage as the log keeps it, priced at `served`'s list prices, and counted
    /// in the agent's metrics.
    fn used(&self, served: &ServedModel, usage: &gateway_models::Usage) -> Usage {
        let usage = models::priced(served, model_usage(usage));
        self.ctx.metrics().model_usage(&self.ctx.session.snapshot.agent.spec.name, &served.name, &usage);
        usage
    }

    /// One model request; commits its output. Returns the tool calls to handle, or the
    /// outcome if the model ended the turn.
    async fn model_round(&mut self) -> Result<Result<Vec<(NewEvent, Route)>, TurnOutcome>, BackendError> {
        self.ensure_mcp().await?;
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.refresh_changed().await;
        }
        if let Some(outcome) = self.budget_reached() {
            return Ok(Err(outcome));
        }
        let backend = self.backend;
        let (served, client) = backend.models.route(&self.ctx.session.snapshot.agent.spec.model.id);
        let mut request = self.request(&served);
        if let Some(window) = served.context_window {
            let mut compactions = 0;
            while compaction::too_long(&request, window) {
                let cut = compaction::cut(self.view.events()).filter(|_| compactions < backend.config.max_compactions);
                let Some(through) = cut else {
                    return Ok(Err(TurnOutcome::CompactionLimit {
                        message: format!(
                            "the conversation does not fit the model's context window of {window} tokens, even after \
                             {compactions} compaction(s) in a row"
                        ),
                    }));
                };
                if let Err(outcome) = self.compact(&served, client, &request, through).await? {
                    return Ok(Err(outcome));
                }
                compactions += 1;
                request = self.request(&served);
            }
        }
        let agent = &self.ctx.session.snapshot.agent.spec;
        // The request's start needs no commit of its own: it rides with the round's output (or
        // with the turn's end). Lost with a lost claim, the request is simply asked again.
        let start = NewEvent::new(EventPayload::ModelRequestStarted {});
        let start_id = start.id.clone();
        self.ctx.stage([start]);
        let message_id = EventId::new();
        let ctx = self.ctx;
        // Response block index -> index among the message's text blocks.
        let text_index: Mutex<HashMap<usize, usize>> = Mutex::new(HashMap::new());
        // The event id of each thinking block, in order: its previews and its commit share it.
        let thought_ids: Mutex<Vec<EventId>> = Mutex::new(Vec::new());
        let on_event = |ev: StreamEvent| match ev {
            StreamEvent::TextStart { index } => {
                let mut map = text_index.lock().unwrap_or_else(|p| p.into_inner());
                if map.is_empty() {
                    ctx.preview(Preview::Start { event_id: message_id.clone(), kind: EventKind::AgentMessage });
                }
                let n = map.len();
                map.insert(index, n);
            }
            StreamEvent::TextDelta { index, text } => {
                if let Some(&i) = text_index.lock().unwrap_or_else(|p| p.into_inner()).get(&index) {
                    ctx.preview(Preview::TextDelta { event_id: message_id.clone(), index: i, text });
                }
            }
            StreamEvent::ThinkingStart { nth } => {
                let mut ids = thought_ids.lock().unwrap_or_else(|p| p.into_inner());
                if ids.len() == nth {
                    let id = EventId::new();
                    ctx.preview(Preview::Start { event_id: id.clone(), kind: EventKind::AgentThinking });
                    ids.push(id);
                }
            }
            StreamEvent::ThinkingDelta { nth, text } => {
                if let Some(id) = thought_ids.lock().unwrap_or_else(|p| p.into_inner()).get(nth) {
                    ctx.preview(Preview::ThoughtDelta { event_id: id.clone(), text });
                }
            }
        };
        let close = |is_error: bool, usage: Usage| {
            NewEvent::new(EventPayload::ModelRequestEnded { start_id: start_id.clone(), is_error, usage })
        };
        let response = match self.ask(client, &request, Some(&on_event)).await {
            Ok(r) => r,
            Err(error) => return self.unanswered(vec![close(true, Usage::default())], error),
        };

        let execution = self.ctx.session.snapshot.requirements.tool_execution;
        // The model's reasoning first, as it came: later requests of the turn send it back.
        // A thinking block commits under the id its previews had.
        let mut streamed = thought_ids.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter();
        let mut events: Vec<NewEvent> = response
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Thinking { thinking, signature } => Some(NewEvent {
                    id: streamed.next().unwrap_or_else(EventId::new),
                    payload: EventPayload::AgentThinking {
                        text: Some(thinking.clone()),
                        seal: Some(ThinkingSeal::Signature(signature.clone())),
                    },
                }),
                Block::RedactedThinking { data } => Some(NewEvent::new(EventPayload::AgentThinking {
                    text: None,
                    seal: Some(ThinkingSeal::Redacted(data.clone())),
                })),
                _ => None,
            })
            .collect();
        let texts: Vec<ContentBlock> = response
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(ContentBlock::text(text.clone())),
                _ => None,
            })
            .collect();
        if !texts.is_empty() {
            events.push(NewEvent { id: message_id.clone(), payload: EventPayload::AgentMessage { content: texts } });
        }
        let mut routes = Vec::new();
        for b in &response.content {
            if let Block::ToolUse { name, input, .. } = b {
                let (r, origin, name, policy) = route(agent, execution, self.mcp.as_ref(), name);
                // A tool the agent does not have is journaled as denied, so no resumed run can
                // ever execute it.
                let permission = match r {
                    Route::Ask => ToolPermission::Ask,
                    Route::Unavailable | Route::NeedsApproval => ToolPermission::Deny,
                    Route::Execute | Route::Client => ToolPermission::Allow,
                };
                let event =
                    NewEvent::new(EventPayload::ToolUse { name, input: input.clone(), origin, permission, policy });
                routes.push((event.id.clone(), r));
                events.push(event);
            }
        }
        events.push(close(false, self.used(&served, &response.usage)));
        if routes.is_empty() {
            // The model's last word and the turn's end commit together, in the settlement.
            self.ctx.stage(events);
            return Ok(Err(match response.stop_reason {
                ModelStop::Refusal => TurnOutcome::Refusal,
                _ => TurnOutcome::EndTurn,
            }));
        }
        let calls = |events: &[NewEvent]| {
            routes
                .iter()
                .filter_map(|(id, r)| events.iter().find(|e| &e.id == id).map(|e| (e.clone(), *r)))
                .collect::<Vec<_>>()
        };
        if routes.iter().all(|(_, r)| *r == Route::Client) {
            // Calls only a client answers: their uses and the park commit together, in the
            // settlement, so no answer can arrive before the session waits for it (a
            // self-hosted executor answers as soon as it sees a call). Lost with a lost claim,
            // the round is simply asked again.
            let calls = calls(&events);
            self.ctx.stage(events);
            return Ok(Ok(calls));
        }
        let committed: Vec<NewEvent> =
            self.commit(events).await?.into_iter().map(|e| NewEvent { id: e.id, payload: e.payload }).collect();
        Ok(Ok(calls(&committed)))
    }
}

/// Extended thinking's budget for the effort an agent asks for (`ModelSpec::EFFORTS`); none
/// without one. The Messages API wants at least 1024.
fn thinking_budget(effort: Option<&str>) -> Option<u32> {
    match effort? {
        "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(8192),
        "xhigh" => Some(16384),
        "max" => Some(32000),
        _ => None,
    }
}

#[async_trait]
impl Backend for NativeBackend {
    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        let mut turn = Turn { backend: self, ctx, view: ctx.view().await?, lease: None, mcp: None };

        if ctx.session.snapshot.requirements.environment.realize_before_execution() {
            turn.hand_with(vec![]).await?;
        }
        if let Some(outcome) = turn.resume().await? {
            return Ok(outcome);
        }
        loop {
            if ctx.is_interrupted() {
                return Ok(TurnOutcome::Interrupted);
            }
            let rounds = turn.turn().iter().filter(|e| e.kind() == EventKind::ModelRequestStarted).count() as u32;
            if rounds >= self.config.max_rounds {
                return Ok(TurnOutcome::RoundLimit {
                    message: format!(
                        "the turn reached its limit of {} model/tool rounds and was stopped",
                        self.config.max_rounds
                    ),
                });
            }
            let calls = match turn.model_round().await? {
                Ok(calls) => calls,
                Err(outcome) => return Ok(outcome),
            };
            let mut pending = Vec::new();
            let mut executor_calls = Vec::new();
            for (event, r) in calls {
                let EventPayload::ToolUse { name, input, origin, .. } = &event.payload else { continue };
                match r {
                    Route::Execute => turn.execute(&event.id, origin, name, input).await?,
                    Route::Ask => {
                        pending.push(PendingAction { event_id: event.id.clone(), kind: PendingKind::Confirmation })
                    }
                    Route::Client => {
                        if *origin == ToolOrigin::Builtin {
                            executor_calls.push(event.id.clone());
                        }
                        pending.push(PendingAction { event_id: event.id.clone(), kind: PendingKind::ClientResult })
                    }
                    Route::Unavailable => {
                        let text = format!("tool {name} is not available to this agent");
                        turn.commit(vec![text_result(&event.id, origin.clone(), text, true)]).await?;
                    }
                    Route::NeedsApproval => {
                        let text = format!(
                            "tool {name} needs approval, which sessions on a self-hosted environment do not support \
                             yet; the call was not run"
                        );
                        turn.commit(vec![text_result(&event.id, origin.clone(), text, true)]).await?;
                    }
                }
                if ctx.is_interrupted() {
                    return Ok(TurnOutcome::Interrupted);
                }
            }
            if let Some(outcome) = turn.await_executor(&executor_calls).await? {
                return Ok(outcome);
            }
            if !pending.is_empty() {
                return Ok(TurnOutcome::Parked { pending });
            }
        }
    }
}
