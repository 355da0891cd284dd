//! The outbound backend `a2a:<remote>`: a turn runs on a remote A2A agent.
//!
//! Resumable by construction: the remote task id, the seq of the last input forwarded, the
//! remote state and how many parts of each remote artifact were committed are session
//! bindings, written in the same fenced commits as the events they explain. After a restart a
//! run finds them and re-attaches (SubscribeToTask, or GetTask polling) instead of sending the
//! message again, and commits only artifact parts it had not committed. Inputs carry a stable
//! messageId (our event id), so a remote that dedupes can drop a resend from the small window
//! between its acceptance and our commit.
//!
//! A remote that answers at once (its first event settles the task) costs the turn no commit
//! of its own: the send, the remote task and its answer ride with the settlement. Lost with
//! the claim (a crash in the one commit between), nothing of the turn is durable and the
//! resumed run sends the message again, with the same messageId: the same window as between
//! a remote's acceptance and our commit of it. A remote slower than [`FIRST_EVENT_GRACE`] to
//! say anything gets the send committed then, as before. Likewise, events that follow each
//! other within [`LINGER`] (a remote that streams its task, its artifact and its final status
//! at once) are committed together, with the last of them: one commit per burst, not per
//! event, and at least one every [`MAX_STAGED`] while a remote streams without pause.
//!
//! A remote INPUT_REQUIRED / AUTH_REQUIRED parks the turn on a custom tool use
//! (`a2a_input_required` / `a2a_auth_required`, input `{"prompt": ...}`); the client's result
//! is forwarded as the next message of the same remote task. Only such a result continues
//! the remote task: if the parked turn was interrupted instead, the next message cancels the
//! waiting remote task (best effort) and starts a new one in the same remote context. An
//! interrupt sends CancelTask; so does a turn past its deadline ([`Limits`]). A stream that
//! stays silent past the idle limit is dropped for GetTask polling. No Session Environment is
//! ever touched (placement gives these sessions none).

mod client;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{ErrorKind, Event, EventPayload, NewEvent, ToolOrigin, ToolPermission};
use gateway_core::session::{PendingAction, PendingKind};
use gateway_runtime::{Backend, BackendError, RunContext, TurnOutcome};
use gateway_store::{Documents, ReadDocuments};
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use crate::RemoteConfig;
use crate::content::parts_from_blocks;
use crate::tasks::projection::{REMOTE_AUTH_TOOL, REMOTE_INPUT_TOOL};
use crate::wire::{Artifact, Part, StreamResponse, TaskState};
use client::{CallError, Client};

const K_TASK: &str = "a2a.remote_task";
const K_CONTEXT: &str = "a2a.remote_context";
const K_SENT: &str = "a2a.sent_seq";
const K_STATE: &str = "a2a.remote_state";
const K_ARTIFACTS: &str = "a2a.artifact_parts";
/// Longest a best-effort CancelTask may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a remote stream's first event may take before the send is committed on its own.
/// An answer within it settles with the send in the turn's last commit (see the module
/// doc); past it, the window in which a crash would send the message again stays short.
const FIRST_EVENT_GRACE: Duration = Duration::from_millis(25);

/// How long a run waits for a remote's next event before committing what the last one
/// added. A remote that answers at once writes its task, its artifact and its final status
/// one after another, each a write of its own that arrives a few microseconds after the last
/// (more on a busy machine): waiting this long lets them share one commit instead of costing
/// one each, and delays the commit of an event that has no follower by no more than this.
const LINGER: Duration = Duration::from_millis(2);

/// The longest events are staged before what they add is committed, however closely they
/// follow each other: a remote that streams without pause still has its progress durable
/// (and seen by clients) this often.
const MAX_STAGED: Duration = FIRST_EVENT_GRACE;

/// The stream's next item if it arrives within `linger` (`None`: not yet). Cancel-safe: an
/// item that was not taken stays in the stream.
async fn next_within<S: futures::Stream + Unpin>(events: &mut S, linger: Duration) -> Option<Option<S::Item>> {
    if let Some(item) = events.next().now_or_never() {
        return Some(item);
    }
    tokio::time::timeout(linger, events.next()).await.ok()
}

/// Whether a remote event settles the turn (a terminal or interrupted state, or a message):
/// nothing follows it that could share its commit.
fn settles(event: &StreamResponse) -> bool {
    let state = match event {
        StreamResponse::Message(_) => return true,
        StreamResponse::ArtifactUpdate(_) => return false,
        StreamResponse::Task(t) => t.status.state,
        StreamResponse::StatusUpdate(u) => u.status.state,
    };
    state.is_terminal() || state.is_interrupted()
}

/// Whether what a remote event adds is committed now or staged for the next commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Commit,
    /// The next event is already here: what this one adds goes with it.
    Stage,
}

/// Time limits of remote turns.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest wait for the next event of a remote stream; past it the run polls GetTask.
    pub stream_idle: Duration,
    /// Longest a run follows one remote task; past it the remote task is canceled and the
    /// turn fails.
    pub turn_deadline: Duration,
    /// Interval of GetTask polling.
    pub poll_interval: Duration,
    /// How long a run reuses the endpoint read from the remote's pinned card before reading
    /// the card again ([`RemoteBackend::endpoint`]).
    pub card_reuse: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            stream_idle: Duration::from_secs(90),
            turn_deadline: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            card_reuse: Duration::from_secs(30),
        }
    }
}

pub struct RemoteBackend {
    name: String,
    config: RemoteConfig,
    http: reqwest::Client,
    limits: Limits,
    /// The endpoint last read from the pinned card, and when.
    endpoint: std::sync::Mutex<Option<(tokio::time::Instant, client::Endpoint)>>,
}

impl RemoteBackend {
    pub fn new(name: &str, config: RemoteConfig, limits: Limits) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default();
        Self { name: name.to_owned(), config, http, limits, endpoint: Default::default() }
    }
}

impl RemoteBackend {
    /// The remote's endpoint from its pinned card (fetched, not pinned, if there is none for
    /// the configured URL). Reused for [`Limits::card_reuse`]: a card changes only when a
    /// process pins it at start-up, and reading it on every run cost each turn a read of the
    /// store; a card pinned anew reaches this process within that time.
    async fn endpoint(&self, docs: &dyn ReadDocuments) -> Result<client::Endpoint, CallError> {
        let reused = self.endpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some((at, endpoint)) = reused
            && at.elapsed() < self.limits.card_reuse
        {
            return Ok(endpoint);
        }
        let endpoint =
            client::resolve(&self.http, docs, None, &self.name, &self.config.url, self.config.auth.as_deref()).await?;
        let read = Some((tokio::time::Instant::now(), endpoint.clone()));
        *self.endpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = read;
        Ok(endpoint)
    }

    /// Fetches and pins the remote's card (at start-up, with write access to the documents).
    pub async fn pin_card(&self, docs: &dyn Documents) -> Result<(), CallError> {
        client::resolve(&self.http, docs, Some(docs), &self.name, &self.config.url, self.config.auth.as_deref())
            .await
            .map(|_| ())
    }
}

fn failed(message: impl Into<String>) -> BackendError {
    BackendError::Failed { kind: ErrorKind::BackendFailed, message: message.into() }
}

fn from_call(e: CallError) -> BackendError {
    match e {
        CallError::Transport(m) => {
            BackendError::Transient { kind: ErrorKind::BackendFailed, message: m, retry_after: None }
        }
        other => failed(other.to_string()),
    }
}

/// Parts from a remote, as content blocks (no media-type policy: it is the remote's output).
fn blocks(parts: &[Part]) -> Vec<ContentBlock> {
    parts
        .iter()
        .filter_map(|p| {
            crate::content::blocks_from_parts(std::slice::from_ref(&Part { media_type: None, ..p.clone() })).ok()
        })
        .flatten()
        .collect()
}

/// What one run knows about its remote task, mirrored in session bindings.
struct Remote {
    task: Option<String>,
    context: Option<String>,
    state: Option<TaskState>,
    /// Parts committed per remote artifact id.
    parts: BTreeMap<String, usize>,
}

impl Remote {
    fn from_bindings(b: &BTreeMap<String, String>) -> Self {
        let text = |k: &str| b.get(k).filter(|v| !v.is_empty()).cloned();
        Remote {
            task: text(K_TASK),
            context: text(K_CONTEXT),
            state: text(K_STATE).and_then(|s| TaskState::parse(&json!(s))),
            parts: text(K_ARTIFACTS).and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default(),
        }
    }

    /// Every binding, written whole each time (empty = unknown), so nothing a previous turn
    /// knew can outlive what this one knows.
    fn bindings(&self) -> Vec<(String, String)> {
        vec![
            (K_ARTIFACTS.to_owned(), serde_json::to_string(&self.parts).unwrap_or_default()),
            (K_TASK.to_owned(), self.task.clone().unwrap_or_default()),
            (K_CONTEXT.to_owned(), self.context.clone().unwrap_or_default()),
            (K_STATE.to_owned(), self.state.map(|s| s.name().to_owned()).unwrap_or_default()),
        ]
    }

    /// [`bindings`](Self::bindings), and `sent` as the seq of the last input the remote has.
    fn bindings_sent(&self, sent: Option<u64>) -> Vec<(String, String)> {
        let mut b = self.bindings();
        b.extend(sent.map(|seq| (K_SENT.to_owned(), seq.to_string())));
        b
    }

    /// New content from an artifact (a snapshot or an update), counting committed parts.
    fn artifact(&mut self, a: &Artifact, append: bool) -> Vec<ContentBlock> {
        let seen = self.parts.entry(a.artifact_id.clone()).or_insert(0);
        let fresh: &[Part] = if append { &a.parts } else { a.parts.get(*seen..).unwrap_or(&[]) };
        *seen = if append { *seen + a.parts.len() } else { (*seen).max(a.parts.len()) };
        blocks(fresh)
    }
}

#[async_trait]
impl Backend for RemoteBackend {
    async fn run(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        let span =
            info_span!("a2a_remote", remote = %self.name, session = %ctx.session.id, run = %ctx.claim.fence.run_id);
        let started = std::time::Instant::now();
        let result = self.turn(ctx).instrument(span).await;
        ctx.remote_call_ended(started, &result);
        result
    }
}

/// The tool use the remote task's input request parked on, if the last one is answered by
/// `inputs` (a `ClientToolResult` for it): only then does the next message continue the
/// remote task.
fn answers_remote_request(history: &[Event], inputs: &[&Event]) -> bool {
    let asked = history.iter().rev().find_map(|e| match &e.payload {
        EventPayload::ToolUse { name, .. } if name == REMOTE_INPUT_TOOL || name == REMOTE_AUTH_TOOL => Some(&e.id),
        _ => None,
    });
    asked.is_some_and(|asked| {
        inputs
            .iter()
            .any(|e| matches!(&e.payload, EventPayload::ClientToolResult { tool_use_id, .. } if tool_use_id == asked))
    })
}

/// How a wait for the remote ended early.
enum Stop {
    Interrupted,
    Deadline,
}

impl RemoteBackend {
    async fn turn(&self, ctx: &RunContext) -> Result<TurnOutcome, BackendError> {
        let endpoint = self.endpoint(ctx.documents()).await.map_err(from_call)?;
        let client = Client { http: self.http.clone(), endpoint, auth: self.config.auth.clone() };
        // Two reads that do not depend on each other, made at once: one wait, not two.
        let (b, view) = tokio::try_join!(ctx.bindings(), ctx.turn_view())?;
        let mut remote = Remote::from_bindings(&b);
        let sent: u64 = b.get(K_SENT).and_then(|s| s.parse().ok()).unwrap_or(0);
        // Only this run's inputs not yet forwarded (`gateway_core::turn`): a message queued
        // behind the run belongs to the next one, and counting it here would make a resumed
        // run abandon the remote task it follows.
        let inputs: Vec<&Event> = view
            .inputs_after(sent)
            .filter(|e| matches!(e.payload, EventPayload::UserMessage { .. } | EventPayload::ClientToolResult { .. }))
            .collect();
        let deadline = Instant::now() + self.limits.turn_deadline;

        if let Some(last) = inputs.last() {
            let mut content = Vec::new();
            for e in &inputs {
                if let EventPayload::UserMessage { content: c } | EventPayload::ClientToolResult { content: c, .. } =
                    &e.payload
                {
                    content.extend(c.iter().cloned());
                }
            }
            let waiting = remote.state.is_some_and(TaskState::is_interrupted);
            let continuing = waiting && remote.task.is_some() && answers_remote_request(view.events(), &inputs);
            if waiting
                && !continuing
                && let Some(old) = &remote.task
            {
                // The client interrupted the parked turn instead of answering: the remote
                // task still waits for input that will never come.
                info!(remote_task = %old, "the remote task's input request was abandoned; canceling it");
                self.cancel_remote(&client, old).await;
            }
            let mut message = json!({
                "messageId": last.id.to_string(),
                "role": "ROLE_USER",
                "parts": parts_from_blocks(&content),
            });
            if let Some(c) = &remote.context {
                message["contextId"] = json!(c);
            }
            if continuing && let Some(t) = &remote.task {
                message["taskId"] = json!(t);
            }
            if !continuing {
                remote.task = None;
                remote.parts.clear();
            }
            remote.state = None;
            info!(
                inputs = inputs.len(),
                continuing,
                streaming = client.endpoint.streaming,
                v1 = client.endpoint.v1,
                "sending to the remote agent"
            );
            let seq = last.seq;
            if client.endpoint.streaming {
                let send = client.stream("SendStreamingMessage", json!({"message": message, "configuration": {}}));
                let events = match self.guard(ctx, deadline, send).await? {
                    Ok(r) => r.map_err(from_call)?,
                    Err(stop) => return self.stop(ctx, &client, &mut remote, Some(seq), stop).await,
                };
                // The remote answered 2xx with a stream: it has the message. Recorded with its
                // first event, or on its own if that takes longer than FIRST_EVENT_GRACE, so no
                // retry or later turn sends it again, however the stream goes on.
                return self.follow(ctx, &client, &mut remote, Some(seq), events, deadline).await;
            }
            let send =
                client.call("SendMessage", json!({"message": message, "configuration": {"returnImmediately": true}}));
            let result = match self.guard(ctx, deadline, send).await? {
                Ok(r) => r.map_err(from_call)?,
                Err(stop) => return self.stop(ctx, &client, &mut remote, Some(seq), stop).await,
            };
            let event = StreamResponse::from_value(result).map_err(|e| failed(e.to_string()))?;
            if let Some(outcome) = self.absorb(ctx, &mut remote, Some(seq), event, Hold::Commit).await? {
                return Ok(outcome);
            }
            return self.poll(ctx, &client, &mut remote, deadline).await;
        }

        match (&remote.task, remote.state) {
            (Some(task), state) if !state.is_some_and(|s| s.is_terminal() || s.is_interrupted()) => {
                info!(remote_task = %task, "re-attaching to the remote task after a restart");
                if client.endpoint.streaming
                    && let Ok(Ok(events)) =
                        self.guard(ctx, deadline, client.stream("SubscribeToTask", json!({"id": task}))).await?
                {
                    return self.follow(ctx, &client, &mut remote, None, events, deadline).await;
                }
                self.poll(ctx, &client, &mut remote, deadline).await
            }
            _ => Ok(TurnOutcome::EndTurn),
        }
    }

    /// Runs `work` unless the client interrupts, the deadline passes or the run is abandoned
    /// (lease lost, shutdown) first.
    async fn guard<T>(
        &self,
        ctx: &RunContext,
        deadline: Instant,
        work: impl std::future::Future<Output = T>,
    ) -> Result<Result<T, Stop>, BackendError> {
        tokio::select! {
            r = work => Ok(Ok(r)),
            _ = ctx.interrupted() => Ok(Err(Stop::Interrupted)),
            _ = tokio::time::sleep_until(deadline) => Ok(Err(Stop::Deadline)),
            _ = ctx.abandoned() => Err(BackendError::Abandoned("the run was abandoned while waiting for the remote".into())),
        }
    }

    /// Follows a remote stream until the task settles; an early end, a broken stream or a
    /// silence longer than [`Limits::stream_idle`] falls back to polling.
    async fn follow(
        &self,
        ctx: &RunContext,
        client: &Client,
        remote: &mut Remote,
        mut sent: Option<u64>,
        events: impl futures::Stream<Item = Result<StreamResponse, CallError>> + Send,
        deadline: Instant,
    ) -> Result<TurnOutcome, BackendError> {
        let mut events = std::pin::pin!(events);
        let idle = self.limits.stream_idle;
        // The next event when it arrived right after the one before (see below).
        let mut ready = None;
        // Since when events have been staged without a commit.
        let mut staged_since: Option<Instant> = None;
        loop {
            let grace = sent.is_some() && FIRST_EVENT_GRACE < idle;
            let wait = if grace { FIRST_EVENT_GRACE } else { idle };
            let next = match ready.take() {
                Some(event) => Ok(event),
                None => match self.guard(ctx, deadline, tokio::time::timeout(wait, events.next())).await? {
                    Ok(n) => n,
                    Err(stop) => return self.stop(ctx, client, remote, sent, stop).await,
                },
            };
            if !matches!(next, Ok(Some(Ok(_)))) {
                // No first event to record the send with: it is committed on its own, before
                // the stream's silence or end is acted on (a turn that fails now must not
                // send the message again either).
                if sent.is_some() {
                    ctx.commit_bindings(vec![], remote.bindings_sent(sent.take())).await?;
                }
                if grace && next.is_err() {
                    continue;
                }
            }
            match next {
                Ok(Some(Ok(event))) => {
                    // Events that arrive together are committed together: a remote that
                    // answers at once sends its task, artifact and final status in one go,
                    // and they ride with the settlement instead of costing a commit each.
                    let stage_more = staged_since.is_none_or(|t| t.elapsed() < MAX_STAGED);
                    ready = if stage_more && !settles(&event) { next_within(&mut events, LINGER).await } else { None };
                    let hold = if ready.is_some() { Hold::Stage } else { Hold::Commit };
                    staged_since = if hold == Hold::Stage { staged_since.or(Some(Instant::now())) } else { None };
                    if let Some(outcome) = self.absorb(ctx, remote, sent.take(), event, hold).await? {
                        return Ok(outcome);
                    }
                }
                Err(_) if remote.task.is_some() => {
                    warn!(idle_secs = idle.as_secs(), "the remote stream went silent; polling the task instead");
                    return self.poll(ctx, client, remote, deadline).await;
                }
                // The remote has the message but named no task to follow: not retried (a retry
                // would send it again), the turn fails saying so.
                Err(_) => {
                    return Err(failed(format!(
                        "the remote accepted the message but its stream stayed silent for {} s before naming a task; \
                         the message is not sent again",
                        idle.as_secs()
                    )));
                }
                Ok(Some(Err(CallError::Transport(m)))) | Ok(Some(Err(CallError::Invalid(m))))
                    if remote.task.is_some() =>
                {
                    warn!(error = %m, "remote stream broke; polling the task instead");
                    return self.poll(ctx, client, remote, deadline).await;
                }
                Ok(Some(Err(e))) if remote.task.is_none() => {
                    return Err(failed(format!(
                        "the remote's stream broke before naming a task ({}); the message is not sent again",
                        from_call(e)
                    )));
                }
                Ok(Some(Err(e))) => return Err(from_call(e)),
                Ok(None) if remote.task.is_some() => return self.poll(ctx, client, remote, deadline).await,
                Ok(None) => return Err(failed("the remote closed its stream before naming a task")),
            }
        }
    }

    /// Polls GetTask until the remote task settles.
    async fn poll(
        &self,
        ctx: &RunContext,
        client: &Client,
        remote: &mut Remote,
        deadline: Instant,
    ) -> Result<TurnOutcome, BackendError> {
        let Some(task) = remote.task.clone() else { return Err(failed("no remote task to follow")) };
        loop {
            let t = match self.guard(ctx, deadline, client.call("GetTask", json!({"id": task}))).await? {
                Ok(t) => t.map_err(from_call)?,
                Err(stop) => return self.stop(ctx, client, remote, None, stop).await,
            };
            let event = StreamResponse::Task(client::task(t).map_err(|e| failed(e.to_string()))?);
            if let Some(outcome) = self.absorb(ctx, remote, None, event, Hold::Commit).await? {
                return Ok(outcome);
            }
            if let Err(stop) = self.guard(ctx, deadline, tokio::time::sleep(self.limits.poll_interval)).await? {
                return self.stop(ctx, client, remote, None, stop).await;
            }
        }
    }

    /// Best-effort CancelTask, bounded in time.
    async fn cancel_remote(&self, client: &Client, task: &str) {
        match tokio::time::timeout(CANCEL_TIMEOUT, client.call("CancelTask", json!({"id": task}))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(remote_task = %task, error = %e, "remote CancelTask failed"),
            Err(_) => warn!(remote_task = %task, "remote CancelTask timed out"),
        }
    }

    /// Ends the turn early: cancels the remote task (if one is known) and commits what is
    /// known, including `sent` when no remote event has recorded it yet, so inputs the
    /// client gave up on are not sent again with the next message.
    async fn stop(
        &self,
        ctx: &RunContext,
        client: &Client,
        remote: &mut Remote,
        sent: Option<u64>,
        why: Stop,
    ) -> Result<TurnOutcome, BackendError> {
        if let Some(task) = remote.task.clone() {
            info!(remote_task = %task, deadline = matches!(why, Stop::Deadline), "canceling the remote task");
            self.cancel_remote(client, &task).await;
        }
        remote.state = Some(TaskState::Canceled);
        ctx.commit_bindings(vec![], remote.bindings_sent(sent)).await?;
        match why {
            Stop::Interrupted => Ok(TurnOutcome::Interrupted),
            Stop::Deadline => Err(failed(format!(
                "the remote task did not settle within {} s; it was canceled",
                self.limits.turn_deadline.as_secs()
            ))),
        }
    }

    /// Commits what one remote event adds; `Some(outcome)` once the remote task settled.
    /// `sent` (the first event after a send) also records the inputs as forwarded. With
    /// [`Hold::Stage`] (the next event is already here) what it would commit is staged for the
    /// next commit instead: lost with the claim, the resumed run finds the message unsent or
    /// the task unfinished and acts on that, the window the module doc describes.
    async fn absorb(
        &self,
        ctx: &RunContext,
        remote: &mut Remote,
        sent: Option<u64>,
        event: StreamResponse,
        hold: Hold,
    ) -> Result<Option<TurnOutcome>, BackendError> {
        // The remote task this run already made durable (every absorb commits it, save the last).
        let durable_task = remote.task.clone();
        let mut out = Vec::new();
        let mut status = None;
        match event {
            StreamResponse::Message(m) => {
                let c = blocks(&m.parts);
                if !c.is_empty() {
                    out.push(NewEvent::new(EventPayload::AgentMessage { content: c }));
                }
                if m.context_id.is_some() {
                    remote.context = m.context_id;
                }
                remote.state = Some(TaskState::Completed);
                status = Some((TaskState::Completed, None));
            }
            StreamResponse::Task(t) => {
                remote.task = Some(t.id.clone());
                remote.context = Some(t.context_id.clone());
                for a in &t.artifacts {
                    let c = remote.artifact(a, false);
                    if !c.is_empty() {
                        out.push(NewEvent::new(EventPayload::AgentMessage { content: c }));
                    }
                }
                status = Some((t.status.state, t.status.message));
            }
            StreamResponse::ArtifactUpdate(u) => {
                remote.task = Some(u.task_id.clone());
                let c = remote.artifact(&u.artifact, u.append);
                if !c.is_empty() {
                    out.push(NewEvent::new(EventPayload::AgentMessage { content: c }));
                }
            }
            StreamResponse::StatusUpdate(u) => {
                remote.task = Some(u.task_id.clone());
                remote.context = Some(u.context_id.clone());
                status = Some((u.status.state, u.status.message));
            }
        }
        let mut outcome = None;
        if let Some((state, message)) = status {
            remote.state = Some(state);
            let text = message.as_ref().map(|m| plain_text(&blocks(&m.parts))).unwrap_or_default();
            match state {
                TaskState::Completed => {
                    if let Some(m) = message.filter(|_| out.is_empty()) {
                        let c = blocks(&m.parts);
                        if !c.is_empty() {
                            out.push(NewEvent::new(EventPayload::AgentMessage { content: c }));
                        }
                    }
                    outcome = Some(Ok(TurnOutcome::EndTurn));
                }
                TaskState::Rejected => outcome = Some(Ok(TurnOutcome::Refusal)),
                TaskState::Canceled if ctx.is_interrupted() => outcome = Some(Ok(TurnOutcome::Interrupted)),
                TaskState::Canceled => outcome = Some(Err(failed("the remote agent canceled the task"))),
                TaskState::Failed => {
                    outcome = Some(Err(failed(format!(
                        "the remote agent failed the task: {}",
                        text.chars().take(500).collect::<String>()
                    ))))
                }
                TaskState::InputRequired | TaskState::AuthRequired => {
                    let name = if state == TaskState::AuthRequired { REMOTE_AUTH_TOOL } else { REMOTE_INPUT_TOOL };
                    let prompt = if text.is_empty() { "The remote agent needs more input.".to_owned() } else { text };
                    let input = json!({"prompt": prompt, "remote_task_id": remote.task})
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    let tool = NewEvent::new(EventPayload::ToolUse {
                        name: name.into(),
                        input,
                        origin: ToolOrigin::Custom,
                        permission: ToolPermission::Allow,
                        policy: None,
                    });
                    let pending = vec![PendingAction { event_id: tool.id.clone(), kind: PendingKind::ClientResult }];
                    out.push(tool);
                    outcome = Some(Ok(TurnOutcome::Parked { pending }));
                }
                TaskState::Submitted | TaskState::Working => {}
            }
        }
        let bindings = remote.bindings_sent(sent);
        match sent {
            // The remote settled the task with its first word: the send, the task and the
            // answer ride with the settlement (lost with the claim, the resumed run sends the
            // message again: see the module doc).
            Some(_) if outcome.is_some() => ctx.stage_with_bindings(out, bindings),
            // The remote has the message and goes on: durable now, so no reclaim sends it
            // again (with its next event, when that is already here).
            Some(_) if hold == Hold::Stage => ctx.stage_with_bindings(out, bindings),
            Some(_) => {
                ctx.commit_bindings(out, bindings).await?;
            }
            // The remote task settled: its last word rides with the settlement, the next
            // commit (one fewer per turn), provided the task it settled is already durable.
            // Lost with the claim, it is then not lost for good: the resumed run finds the
            // message sent and the task unfinished, and asks the remote task again. (A task
            // first named by its final event is committed now: a resumed run that knew no
            // task would end the turn without the answer.)
            None if outcome.is_some() && durable_task.is_some() && durable_task == remote.task => {
                ctx.stage_with_bindings(out, bindings)
            }
            None if hold == Hold::Stage => ctx.stage_with_bindings(out, bindings),
            None => {
                ctx.commit_bindings(out, bindings).await?;
            }
        }
        match outcome {
            Some(Ok(o)) => {
                info!(remote_task = ?remote.task, state = ?remote.state.map(TaskState::name), "remote task settled");
                Ok(Some(o))
            }
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
