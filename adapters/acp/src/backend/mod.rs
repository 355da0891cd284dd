//! The backend face: a published backend `acp:<executor>` runs each session's turns in an ACP
//! agent process (one per session, see [`process`]), the gateway being its client.
//!
//! A turn sends the session's new user messages as one `session/prompt` and maps what the
//! agent reports ([`mapping`]) until the prompt's answer. A permission request parks the
//! core's turn (a `tool_use` asking permission): the agent's request stays outstanding in the
//! process table, and the run that resumes after the client's answer replies to it and keeps
//! consuming the same prompt. So a Managed Agents client sees `requires_action`, an A2A client
//! `INPUT_REQUIRED` and an editor a permission request, all from the core's one flow.
//!
//! What was sent and what was answered are session bindings ([`crate::names`]), staged with
//! the run's commits under its fence (a prompt costs no commit of its own): a run that finds
//! its inputs sent, not answered, and no prompt of its own to consume (the process died with
//! the gateway, or was stopped) fails explicitly instead of pretending the turn ended
//! (invariant 5: the agent may have acted). A run some Worker started before counts its
//! inputs as sent whatever was recorded ([`sent_through`]).

mod client;
mod mapping;
mod process;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::OptionFuture;
use gateway_core::event::{ErrorKind, Event, EventPayload};
use gateway_core::session::{ClientToolServer, PendingAction, PendingKind, Secret};
use gateway_core::turn::RunView;
use gateway_runtime::{Backend, BackendError, Environments, RunContext, TurnOutcome};
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::{info, warn};

pub use process::{Connection, Connector, MAX_PROCESSES, ProcessTable, SandboxConnector};

use crate::ExecutorConfig;
use crate::names::{
    ANSWERED_BINDING, MCP_SERVERS_NS, PENDING_SETTINGS_NS, SENT_BINDING, SETTINGS_SENT_BINDING, seq_of,
};
use crate::rpc::RpcError;
use crate::wire::{self, PromptSupport};
use client::AgentEvent;
use mapping::{Mapper, choose_option};
use process::{AgentProcess, Launch, Prompt, Turn};

/// How long a cancelled prompt may take to answer before its process is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// How long `session/close` waits for the session's interrupted turn before stopping its
/// process anyway.
pub const CLOSE_WAIT: Duration = Duration::from_secs(12);
/// Why a run whose prompt vanished fails.
const LOST_MID_TURN: &str = "the agent process was lost mid-turn; its effects are unknown — resend";

/// A failed turn (`backend_failed`) with its reason.
pub(crate) fn failed(message: impl Into<String>) -> BackendError {
    BackendError::Failed { kind: ErrorKind::BackendFailed, message: message.into() }
}

/// The answer to a permission request nobody will decide.
pub(crate) fn cancelled_outcome() -> Value {
    json!({"outcome": "cancelled"})
}

pub struct AcpBackend {
    name: String,
    config: ExecutorConfig,
    environments: Arc<Environments>,
    /// The process's agent processes, shared with the other executors and the editor face.
    processes: Arc<ProcessTable>,
    connector: Arc<dyn Connector>,
}

impl AcpBackend {
    pub fn new(
        name: String,
        config: ExecutorConfig,
        environments: Arc<Environments>,
        processes: Arc<ProcessTable>,
    ) -> Self {
        Self::with_connector(name, config, environments, processes, Arc::new(SandboxConnector))
    }

    /// A backend whose agents are reached through `connector` (tests: in-memory agents).
    pub fn with_connector(
        name: String,
        config: ExecutorConfig,
        environments: Arc<Environments>,
        processes: Arc<ProcessTable>,
        connector: Arc<dyn Connector>,
    ) -> Self {
        Self { name, config, environments, processes, connector }
    }

    /// The session's process, started (and its session opened) if there is none.
    async fn process(&self, ctx: &RunContext) -> Result<Arc<AgentProcess>, BackendError> {
        if let Some(p) = self.processes.get(&ctx.session.id).await {
            return Ok(p);
        }
        let room = self.processes.reserve().await.map_err(failed)?;
        let lease = self.environments.acquire(&ctx.session).await?;
        let mut lease = lease;
        if let Some(change) = lease.acquired.change.take() {
            ctx.commit_environment(vec![], change).await?;
        }
        let mcp_servers = self.mcp_servers(ctx).await?;
        let launch = Launch {
            executor: &self.name,
            config: &self.config,
            connector: self.connector.as_ref(),
            lease,
            mcp_servers,
        };
        let p = process::start(ctx, launch).await?;
        self.processes.insert(ctx.session.id.clone(), Arc::clone(&p)).await;
        drop(room);
        Ok(p)
    }

    /// The client's MCP servers in ACP's `McpServer` form, their secret values opened. A
    /// session created before they were kept in its snapshot has them in a document.
    async fn mcp_servers(&self, ctx: &RunContext) -> Result<Value, BackendError> {
        let servers = &ctx.session.snapshot.client_tool_servers;
        if servers.is_empty() {
            return match ctx.documents().get_document(MCP_SERVERS_NS, ctx.session.id.as_str()).await {
                Ok(Some(doc)) => Ok(doc.body),
                Ok(None) => Ok(json!([])),
                Err(e) => Err(failed(format!("cannot read the session's MCP servers: {e}"))),
            };
        }
        let open = |pairs: &[(String, Secret)]| -> Result<Vec<Value>, BackendError> {
            pairs
                .iter()
                .map(|(name, value)| {
                    let value = self.environments.open_secret(value).map_err(failed)?;
                    Ok(json!({"name": name, "value": value.0}))
                })
                .collect()
        };
        let out = servers
            .iter()
            .map(|s| {
                Ok(match s {
                    ClientToolServer::Stdio { name, command, args, env } => {
                        json!({"name": name, "command": command, "args": args, "env": open(env)?})
                    }
                    ClientToolServer::Http { name, url, headers } => {
                        json!({"type": "http", "name": name, "url": url, "headers": open(headers)?})
                    }
                    // Refused when such a session is made (the editor face); never stored.
                    ClientToolServer::OnClient { name, .. } => {
                        return Err(failed(format!(
                            "the MCP server {name:?} runs on the editor's machine, which an ACP agent cannot reach"
                        )));
                    }
                })
            })
            .collect::<Result<Vec<Value>, BackendError>>()?;
        Ok(Value::Array(out))
    }
    /// The process, started within the deadline.
    async fn process_by(&self, ctx: &RunContext, deadline: Instant) -> Result<Arc<AgentProcess>, BackendError> {
        match tokio::time::timeout_at(deadline, self.process(ctx)).await {
            Ok(p) => p,
            Err(_) => {
                self.processes.close(&ctx.session.id).await;
                Err(failed(format!(
                    "ACP agent {:?} did not start within the turn deadline ({:?})",
                    self.name, self.config.turn_timeout
                )))
            }
        }
    }

    /// A prompt of the run's user messages not yet sent to the agent, recorded as sent;
    /// `None` if there are none. The record is staged, not committed before the send: it
    /// rides with the run's next commit (at the latest its settlement), and a claim that
    /// dies before then leaves a run that [`run`](Backend::run) treats as sent anyway
    /// ([`sent_through`]), so no prompt is ever sent twice and the turn costs no commit here.
    fn next_prompt(&self, ctx: &RunContext, view: &RunView, p: &AgentProcess, sent: &mut u64) -> Option<(Value, u64)> {
        let support = PromptSupport { image: p.caps.image, embedded_context: p.caps.embedded_context };
        let mut blocks = Vec::new();
        let mut last = *sent;
        for e in unsent(view, *sent) {
            if let EventPayload::UserMessage { content } = &e.payload {
                blocks.extend(wire::core_to_acp(content, support));
                last = e.seq;
            }
        }
        if blocks.is_empty() {
            return None;
        }
        ctx.stage_with_bindings([], [(SENT_BINDING.to_owned(), last.to_string())]);
        *sent = last;
        Some((json!({"sessionId": p.agent_session, "prompt": blocks}), last))
    }
}

/// How far the run's inputs may have reached the agent: what an earlier run recorded, and,
/// for a run a Worker started before this claim (its claim was lost, or released at
/// shutdown), all of its inputs, since that Worker's staged record of what it sent died with
/// it. Such a run never resends: it consumes its prompt if its process still runs it, and
/// otherwise fails explicitly (invariant 5), even in the rare case that the lost Worker had
/// not sent it yet.
fn sent_through(ctx: &RunContext, view: &RunView, recorded: u64) -> u64 {
    if ctx.claim.run.started { recorded.max(view.inputs_through()) } else { recorded }
}

/// The run's user messages after `sent` (`gateway_core::turn`: its inputs, up to its boundary).
fn unsent(view: &RunView, sent: u64) -> impl Iterator<Item = &Event> {
    view.inputs_after(sent).filter(|e| matches!(e.payload, EventPayload::UserMessage { .. }))
}

/// The answer a client gave to a parked tool use, if any (among the run's inputs).
fn confirmation(view: &RunView, id: &gateway_core::EventId) -> Option<bool> {
    view.inputs().collect::<Vec<_>>().into_iter().rev().find_map(|e| match &e.payload {
        EventPayload::ToolConfirmation { tool_use_id, allow, .. } if tool_use_id == id => Some(*allow),
        _ => None,
    })
}

/// An outstanding `session/prompt` taken out of its process for one run; put back on drop.
struct Outstanding<'a> {
    prompt: Option<Prompt>,
    slot: &'a mut Option<Prompt>,
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.prompt.take() {
            *self.slot = Some(p);
        }
    }
}

/// A stop reason as a turn outcome; an unknown one ends the turn normally (and is logged).
fn outcome(result: &Value) -> TurnOutcome {
    match result.get("stopReason").and_then(Value::as_str).unwrap_or("") {
        "end_turn" => TurnOutcome::EndTurn,
        "cancelled" => TurnOutcome::Interrupted,
        "refusal" => TurnOutcome::Refusal,
        "max_turn_requests" => {
            TurnOutcome::RoundLimit { message: "the agent reached its limit of requests for one turn".into() }
        }
        "max_tokens" => {
            info!("the agent stopped at its token limit; the turn ends");
            TurnOutcome::EndTurn
        }
        other => {
            warn!(stop_reason = %crate::rpc::clip(other, 80), "unknown stop reason; ending the turn normally");
            TurnOutcome::EndTurn
        }
    }
}

/// How long shutdown lets running turns keep their agent processes.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

#[async_trait]
impl Backend for AcpBackend {
    /// Stops the agent processes (after their running turns, at most 10 s): agents that do not
    /// exit when their stdin closes would otherwise outlive the gateway. Idempotent: the table
    /// is empty after the first executor's stop.
    async fn stop(&self) {
        self.processes.close_all(SHUTDOWN_WAIT).await;
    }

    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        let started = Instant::now();
        let result = self.turn(ctx, started + self.config.turn_timeout).await;
        ctx.remote_call_ended(started.into_std(), &result);
        result
    }
}

impl AcpBackend {
    /// One turn with the session's agent process, until `deadline`.
    async fn turn(&self, ctx: &RunContext, deadline: Instant) -> Result<TurnOutcome, BackendError> {
        // A process stopped while this run waited for its turn (swept, closed, evicted) is
        // replaced once.
        let mut attempts = 0;
        let (p, mut guard) = loop {
            let p = self.process_by(ctx, deadline).await?;
            let guard = Arc::clone(&p.turn).lock_owned().await;
            if p.alive() || attempts > 0 {
                break (p, guard);
            }
            attempts += 1;
            drop(guard);
            self.processes.discard(&ctx.session.id, &p).await;
        };
        p.touch();
        if has_mounts(&ctx.session) {
            // Files and repositories added to the session since its process started are placed
            // in its `cwd` before the prompt that may need them (the acquisition places what
            // is missing; the process's own lease keeps the environment from hibernating, so
            // there is no lifecycle change to commit here).
            drop(self.environments.acquire(&ctx.session).await?);
        }
        let view = ctx.turn_view().await?;
        let bindings = ctx.bindings().await?;
        let mut sent = sent_through(ctx, &view, seq_of(&bindings, SENT_BINDING));
        let answered = seq_of(&bindings, ANSWERED_BINDING);
        let turn = &mut *guard;

        // A parked permission answered by the client: reply and keep consuming that prompt.
        let replies: Vec<(gateway_core::EventId, bool)> =
            turn.parked.keys().filter_map(|id| confirmation(&view, id).map(|a| (id.clone(), a))).collect();
        if !replies.is_empty() && turn.prompt.is_some() {
            for (id, allow) in replies {
                if let Some(parked) = turn.parked.remove(&id) {
                    let outcome = match choose_option(&parked.options, allow) {
                        Some(option) => json!({"outcome": "selected", "optionId": option}),
                        None => cancelled_outcome(),
                    };
                    let _ = parked.reply.send(outcome);
                }
            }
        } else if turn.prompt.is_some() && turn.parked.is_empty() && unsent(&view, sent).next().is_none() {
            // This run's own prompt still runs in this process (an earlier claim of the run
            // was abandoned or retried): keep consuming it.
            info!("the agent is still answering this run's prompt; consuming it");
        } else {
            // Anything left from an earlier turn (interrupted while parked) is cancelled first.
            self.settle_leftovers(ctx, &p, turn, deadline).await?;
            if let Some(lost) = lost_permission(&view) {
                return Err(failed(lost));
            }
            // Kept settings are read only when there may be some: a process's first turn, or
            // an editor here kept one since (no store read per turn).
            let kept = self.processes.take_settings_kept(&ctx.session.id);
            let first = p.first_turn();
            if first || kept {
                apply_pending_settings(ctx, &p, &bindings).await;
            }
            match self.next_prompt(ctx, &view, &p, &mut sent) {
                Some((prompt, seq)) => send_prompt(&p, turn, prompt, seq),
                None if ctx.claim.run.started && view.inputs_through() > answered => {
                    warn!(sent, answered, "this run's prompt is gone with its agent process");
                    return Err(failed(LOST_MID_TURN));
                }
                None if first => {
                    // A session opened before its first prompt (`Coordinator::open_session`).
                    listen_after_opening(ctx, turn).await?;
                    info!("the agent process started; nothing to send yet, the turn ends");
                    return Ok(TurnOutcome::EndTurn);
                }
                None => {
                    info!("nothing new to send to the agent; the turn ends");
                    return Ok(TurnOutcome::EndTurn);
                }
            }
        }
        let mut result = self.consume(ctx, &p, turn, deadline).await;
        // Messages that came with a confirmation (or while the prompt ran) go as a follow-up
        // prompt in the same run once the resumed one has ended.
        while matches!(result, Ok(TurnOutcome::EndTurn | TurnOutcome::Refusal | TurnOutcome::RoundLimit { .. })) {
            let Some((prompt, seq)) = self.next_prompt(ctx, &view, &p, &mut sent) else { break };
            info!(seq, "sending the messages that arrived meanwhile as a follow-up prompt");
            send_prompt(&p, turn, prompt, seq);
            result = self.consume(ctx, &p, turn, deadline).await;
        }
        p.touch();
        match &result {
            Err(BackendError::Abandoned(_)) => self.processes.discard(&ctx.session.id, &p).await,
            Err(_) if !p.alive() => self.processes.discard(&ctx.session.id, &p).await,
            _ => {}
        }
        result
    }
}

/// How long the agent may take to answer a setting sent before a prompt.
const SETTING_WAIT: Duration = Duration::from_secs(30);

/// Sends the settings an editor changed while the session's agent process was not running
/// (`names::PENDING_SETTINGS_NS`), in order, before the prompt that follows them, skipping
/// those an earlier run sent (`names::SETTINGS_SENT_BINDING`, staged with this run's next
/// commit). What the agent accepted is kept as its report (its new mode, its settings). A
/// setting the agent refuses is logged and dropped: the prompt still goes.
async fn apply_pending_settings(
    ctx: &RunContext,
    p: &AgentProcess,
    bindings: &std::collections::BTreeMap<String, String>,
) {
    let requests = match ctx.documents().get_document(PENDING_SETTINGS_NS, ctx.session.id.as_str()).await {
        Ok(Some(doc)) => doc.body.get("requests").and_then(Value::as_array).cloned().unwrap_or_default(),
        Ok(None) => return,
        Err(e) => {
            warn!(error = %e, "cannot read the settings kept for the agent");
            return;
        }
    };
    let sent = seq_of(bindings, SETTINGS_SENT_BINDING);
    let mut last = sent;
    let mut reports = Vec::new();
    for request in requests {
        let n = request.get("n").and_then(Value::as_u64).unwrap_or(0);
        let (Some(method), Some(mut params)) =
            (request.get("method").and_then(Value::as_str), request.get("params").cloned())
        else {
            continue;
        };
        if n <= sent {
            continue;
        }
        last = last.max(n);
        // Sent by the editor face while the process ran (its answer kept), or to send now.
        let answer = match request.get("answer") {
            Some(answer) => Some(answer.clone()),
            None => {
                params["sessionId"] = json!(p.agent_session);
                match tokio::time::timeout(SETTING_WAIT, p.peer.request(method, params.clone())).await {
                    Ok(Ok(answer)) => {
                        info!(method, "a kept setting was sent to the agent");
                        Some(answer)
                    }
                    Ok(Err(e)) => {
                        warn!(method, error = %e, "the agent refused a kept setting");
                        None
                    }
                    Err(_) => {
                        warn!(method, "the agent did not answer a kept setting in time");
                        None
                    }
                }
            }
        };
        let Some(answer) = answer else { continue };
        reports.extend(match method {
            "session/set_mode" => mapping::report_of(
                gateway_core::event::ReportTopic::Mode,
                &json!({"sessionUpdate": "current_mode_update", "currentModeId": params["modeId"]}),
            ),
            _ => mapping::opening_reports(&answer).into_iter().next(),
        });
    }
    if last > sent {
        ctx.stage_with_bindings(reports, [(SETTINGS_SENT_BINDING.to_owned(), last.to_string())]);
    }
}

/// How long an opening run listens for what the agent says just after its session opened,
/// once quiet (claude-agent-acp sends its commands right after its answer), and at most.
const OPENING_QUIET: Duration = Duration::from_millis(250);
const OPENING_LISTEN: Duration = Duration::from_secs(2);

/// Keeps what the agent reports right after opening its session (its commands) with the
/// opening run, so the editor has them with `session/new`'s answer rather than at the first
/// prompt. Anything later waits in the queue for the next turn, as between turns.
async fn listen_after_opening(ctx: &RunContext, turn: &mut Turn) -> Result<(), BackendError> {
    let mut mapper = Mapper::default();
    let until = Instant::now() + OPENING_LISTEN;
    loop {
        let quiet = (Instant::now() + OPENING_QUIET).min(until);
        tokio::select! {
            ev = turn.events.recv() => match ev {
                Some(AgentEvent::Update(u)) => mapper.update(ctx, &mut turn.tools, &u).await?,
                // No prompt runs: nothing may be done on the session's behalf.
                Some(AgentEvent::Permission { reply, .. }) => { let _ = reply.send(cancelled_outcome()); }
                None => break,
            },
            _ = tokio::time::sleep_until(quiet) => break,
        }
    }
    mapper.stage_with(ctx, vec![]);
    turn.tools.clear();
    Ok(())
}

/// Sends a prompt; its answer is awaited by whichever run consumes the turn.
fn send_prompt(p: &AgentProcess, turn: &mut Turn, prompt: Value, seq: u64) {
    let peer = p.peer.clone();
    // In the turn's span: the agent request is part of the turn's trace.
    let task =
        tokio::spawn(tracing::Instrument::in_current_span(async move { peer.request("session/prompt", prompt).await }));
    turn.prompt = Some(Prompt { task, seq });
}

/// A run resuming a parked turn (its last input is a confirmation) whose agent process is
/// gone (gateway restart, crash): the request the client answered no longer exists.
fn lost_permission(view: &RunView) -> Option<String> {
    let last_input = view.inputs().last()?;
    matches!(last_input.payload, EventPayload::ToolConfirmation { .. }).then(|| {
        "the ACP agent process that asked for this permission is gone (restarted or crashed); \
         its request cannot be answered. Send the message again."
            .to_owned()
    })
}

impl AcpBackend {
    /// Cancels a prompt an earlier turn left outstanding (its turn was interrupted while
    /// parked): pending permissions answered `cancelled`, `session/cancel`, a bounded wait
    /// during which whatever the agent still sends is drained (never left to block it).
    async fn settle_leftovers(
        &self,
        ctx: &RunContext,
        p: &AgentProcess,
        turn: &mut Turn,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        for (_, parked) in turn.parked.drain() {
            let _ = parked.reply.send(cancelled_outcome());
        }
        if let Some(Prompt { mut task, seq }) = turn.prompt.take() {
            if !p.peer.try_notify("session/cancel", json!({"sessionId": p.agent_session})) {
                warn!("could not send session/cancel (the agent is not reading); waiting for its answer anyway");
            }
            let until = deadline.min(Instant::now() + CANCEL_GRACE);
            let mut open = true;
            let answered = loop {
                tokio::select! {
                    answer = &mut task => break answer.is_ok_and(|a| a.is_ok()),
                    ev = turn.events.recv(), if open => match ev {
                        Some(AgentEvent::Permission { reply, .. }) => { let _ = reply.send(cancelled_outcome()); }
                        Some(AgentEvent::Update(_)) => {}
                        None => open = false,
                    },
                    _ = tokio::time::sleep_until(until) => {
                        warn!("the agent did not answer a cancelled prompt in time");
                        break false;
                    }
                }
            };
            if answered {
                ctx.commit_bindings(vec![], vec![(ANSWERED_BINDING.to_owned(), seq.to_string())]).await?;
            }
        }
        while turn.events.try_recv().is_ok() {}
        turn.tools.clear();
        Ok(())
    }

    /// Maps the agent's updates until its prompt answer, a permission request (park), a
    /// cancel, a crash or the deadline. Nothing here waits on the agent reading its stdin.
    async fn consume(
        &self,
        ctx: &RunContext,
        p: &AgentProcess,
        turn: &mut Turn,
        deadline: Instant,
    ) -> Result<TurnOutcome, BackendError> {
        let Turn { events, prompt: slot, parked, tools } = turn;
        // Whatever ends this run (even its future being dropped), an unanswered prompt goes
        // back to the process: a parked turn's resuming run, or the next turn, finds it.
        let mut prompt = Outstanding { prompt: slot.take(), slot };
        let Some(seq) = prompt.prompt.as_ref().map(|p| p.seq) else {
            return Err(failed("no prompt is outstanding"));
        };
        let mut mapper = Mapper::default();
        let mut cancelled_at: Option<Instant> = None;
        // The queue closes with the connection; the prompt's answer or the close decides then.
        let mut events_open = true;
        loop {
            let grace = cancelled_at.map(|t| t + CANCEL_GRACE).unwrap_or(deadline + CANCEL_GRACE);
            tokio::select! {
                biased;
                ev = events.recv(), if events_open => match ev {
                    Some(AgentEvent::Update(u)) => mapper.update(ctx, tools, &u).await?,
                    Some(AgentEvent::Permission { params, reply }) => {
                        if cancelled_at.is_some() {
                            let _ = reply.send(cancelled_outcome());
                            continue;
                        }
                        let options = params.get("options").cloned().unwrap_or(Value::Null);
                        let id = mapper.permission(ctx, tools, &params).await?;
                        parked.insert(id.clone(), process::Parked { reply, options });
                        info!(tool_use = %id, "the agent asks permission; the turn parks");
                        return Ok(TurnOutcome::Parked {
                            pending: vec![PendingAction { event_id: id, kind: PendingKind::Confirmation }],
                        });
                    }
                    None => events_open = false,
                },
                Some(answer) = OptionFuture::from(prompt.prompt.as_mut().map(|p| &mut p.task)) => {
                    prompt.prompt = None;
                    // Updates sent before the answer are already queued: map them first.
                    while let Ok(ev) = events.try_recv() {
                        match ev {
                            AgentEvent::Update(u) => mapper.update(ctx, tools, &u).await?,
                            AgentEvent::Permission { reply, .. } => { let _ = reply.send(cancelled_outcome()); }
                        }
                    }
                    let answer: Result<Value, RpcError> = answer.unwrap_or_else(|e| Err(RpcError::internal(e.to_string())));
                    let reached = answer.is_ok() || p.alive();
                    // The text so far and the fact that the agent answered ride with the
                    // settlement: the turn's end is one commit.
                    let answered = if reached { vec![(ANSWERED_BINDING.to_owned(), seq.to_string())] } else { vec![] };
                    // The tokens the agent counted for the turn ride with its end, for the
                    // editor's prompt response.
                    if let Some(usage) = answer.as_ref().ok().and_then(|r| r.get("usage")).filter(|u| u.is_object()) {
                        ctx.stage(mapping::report_of(gateway_core::event::ReportTopic::TurnUsage, usage));
                    }
                    mapper.stage_with(ctx, answered);
                    tools.clear();
                    return match answer {
                        _ if cancelled_at.is_some() => Ok(TurnOutcome::Interrupted),
                        Ok(result) => Ok(outcome(&result)),
                        Err(_) if !p.alive() && p.closing() => Ok(TurnOutcome::Interrupted),
                        Err(_) if !p.alive() => Err(self.crashed(p)),
                        Err(e) => Err(failed(format!("ACP agent {:?} answered the prompt with an error: {} (code {})", self.name, e.message, e.code))),
                    };
                }
                _ = ctx.interrupted(), if cancelled_at.is_none() => {
                    info!("interrupted; cancelling the agent's prompt");
                    cancelled_at = Some(Instant::now());
                    if !p.peer.try_notify("session/cancel", json!({"sessionId": p.agent_session})) {
                        warn!("could not send session/cancel (the agent is not reading); it is stopped after the grace period");
                    }
                }
                _ = tokio::time::sleep_until(grace), if cancelled_at.is_some() => {
                    warn!("the agent did not answer a cancelled prompt in time; stopping it");
                    mapper.flush(ctx).await?;
                    self.processes.close(&ctx.session.id).await;
                    return Ok(TurnOutcome::Interrupted);
                }
                _ = tokio::time::sleep_until(deadline), if cancelled_at.is_none() => {
                    warn!(timeout = ?self.config.turn_timeout, "turn deadline passed; stopping the agent");
                    mapper.flush(ctx).await?;
                    self.processes.close(&ctx.session.id).await;
                    return Err(failed(format!(
                        "ACP agent {:?} did not finish the turn within {:?}; it was stopped",
                        self.name, self.config.turn_timeout
                    )));
                }
                _ = p.peer.closed() => {
                    mapper.flush(ctx).await?;
                    if cancelled_at.is_some() || p.closing() {
                        info!("the agent process was stopped after a cancel; the turn is interrupted");
                        return Ok(TurnOutcome::Interrupted);
                    }
                    return Err(self.crashed(p));
                }
                _ = ctx.abandoned() => return Err(BackendError::Abandoned("the run's claim was lost".into())),
            }
        }
    }

    fn crashed(&self, p: &AgentProcess) -> BackendError {
        let status = p.exit_status().unwrap_or_else(|| "its output closed".into());
        warn!(executor = %self.name, %status, "ACP agent process ended during the turn");
        failed(format!("ACP agent {:?} exited during the turn ({status}); the next turn starts it again", self.name))
    }
}

/// Whether the session mounts inputs its workspace must hold (checked per turn only then, so
/// a session without mounts costs no acquisition per prompt).
fn has_mounts(session: &gateway_core::session::Session) -> bool {
    use gateway_core::session::ResourceKind;
    session
        .snapshot
        .resources
        .iter()
        .any(|r| matches!(r.kind, ResourceKind::File { .. } | ResourceKind::Repository { .. }))
}
