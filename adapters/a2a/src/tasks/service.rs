//! The A2A operations, independent of binding and version: bindings parse into the v1.0
//! types, call these, and render what they return.
//!
//! contextId = session: a new context is a new session on the addressed agent (in the default
//! environment of its backend); a client-chosen contextId is bound to a new session through an
//! alias document. A task is the work started by one message (see `projection`).

use std::time::Duration;

use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::event::{EventPayload, NewEvent, ToolOrigin};
use gateway_core::{AgentId, EventId, SessionId, Timestamp};
use gateway_runtime::error::Guard;
use gateway_runtime::{AgentSelection, CreateSession, RuntimeError};
use gateway_store::AdmissionWrites;
use serde_json::Value;
use tracing::info;

use crate::A2aContext;
use crate::content::blocks_from_parts;
use crate::error::{A2aError, Result};
use crate::tasks::projection::Pending;
use crate::tasks::records::{self, AnswerRecord, CONTEXTS, ContextAlias, TaskRecord, task_id_for};
use crate::tasks::watch::Watch;
use crate::wire::{ListTasksRequest, Message, SendMessageRequest, Task, TaskState};

/// Longest CancelTask waits for the run to acknowledge the interrupt.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Most task records ListTasks scans: the agent's newest-created ones.
const LIST_SCAN: usize = 10_000;

/// What a send started: the task to follow, and from which seq its next settling counts.
pub struct Started {
    pub record: TaskRecord,
    pub min_seq: u64,
    /// What the send's own commit told it, when it created the task's session: its first
    /// watch then reads nothing it already holds ([`Watch::open_started`]).
    pub known: Option<Known>,
}

/// The events a send committed to the session it created, and the session's watch opened
/// before that commit.
pub struct Known {
    pub events: Vec<gateway_core::event::Event>,
    pub ahead: gateway_runtime::Ahead,
    /// Whether the agent is the conformance one, whose hints the projection honours.
    pub hints: bool,
}

impl Started {
    /// Opens the task's watch: from what the send holds, when it holds it (once).
    pub async fn watch(&mut self, coordinator: &gateway_runtime::Coordinator) -> Result<Watch> {
        match self.known.take() {
            Some(known) => Watch::open_started(coordinator, &self.record, known),
            None => Watch::open(coordinator, &self.record).await,
        }
    }
}

pub async fn agent(ctx: &A2aContext, name: &str) -> Result<AgentId> {
    ctx.agents
        .get(name)
        .cloned()
        .ok_or_else(|| A2aError::MethodNotFound(format!("no agent named {name:?} is published")))
}

fn bounded_id(what: &str, s: &str) -> Result<()> {
    if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
        return Err(A2aError::InvalidParams(format!("{what} must be 1-256 printable characters")));
    }
    Ok(())
}

/// The task record a client may see through this agent, or TaskNotFound.
pub async fn task_record(ctx: &A2aContext, agent_name: &str, id: &str) -> Result<(TaskRecord, u64)> {
    match records::task(ctx.coordinator.documents(), id).await? {
        Some((rec, v)) if rec.agent == agent_name => Ok((rec, v)),
        _ => Err(A2aError::TaskNotFound(id.chars().take(100).collect())),
    }
}

/// Where the message that starts a task goes.
enum Target {
    /// A session that exists: named by its id, or by a client-chosen contextId's alias.
    Existing { context_id: String, session_id: SessionId },
    /// A new session, created with the message; a client-chosen contextId is bound to it by
    /// an alias written in the same commit.
    New { session_id: SessionId, alias: Option<String> },
}

impl Target {
    fn session_id(&self) -> &SessionId {
        match self {
            Target::Existing { session_id, .. } | Target::New { session_id, .. } => session_id,
        }
    }

    fn context_id(&self) -> String {
        match self {
            Target::Existing { context_id, .. } => context_id.clone(),
            Target::New { alias: Some(c), .. } => c.clone(),
            Target::New { session_id, alias: None } => session_id.to_string(),
        }
    }
}

/// The session behind a contextId. Reads only: a context that does not exist yet is made by
/// the commit that admits its first message (see [`send`]).
async fn resolve(ctx: &A2aContext, agent_name: &str, agent_id: &AgentId, asked: Option<&str>) -> Result<Target> {
    let Some(c) = asked else {
        return Ok(Target::New { session_id: SessionId::new(), alias: None });
    };
    bounded_id("contextId", c)?;
    if let Ok(sid) = SessionId::parse(c) {
        let session = ctx.coordinator.get_session(&sid).await.map_err(|e| match e {
            RuntimeError::NotFound { .. } => A2aError::InvalidParams(format!("unknown contextId {c:?}")),
            other => other.into(),
        })?;
        if &session.snapshot.agent.id != agent_id {
            return Err(A2aError::InvalidParams(format!("contextId {c:?} belongs to another agent")));
        }
        return Ok(Target::Existing { context_id: c.to_owned(), session_id: sid });
    }
    match records::get::<ContextAlias>(ctx.coordinator.documents(), CONTEXTS, c).await? {
        Some((alias, _)) if alias.agent != agent_name => {
            Err(A2aError::InvalidParams(format!("contextId {c:?} belongs to another agent")))
        }
        Some((alias, _)) => Ok(Target::Existing { context_id: c.to_owned(), session_id: alias.session_id }),
        None => Ok(Target::New { session_id: SessionId::new(), alias: Some(c.to_owned()) }),
    }
}

/// A new session of the published agent, in the default environment of its backend.
async fn session_request(
    ctx: &A2aContext,
    agent_name: &str,
    agent_id: &AgentId,
    first: NewEvent,
) -> Result<CreateSession> {
    let agent = ctx.coordinator.get_agent(agent_id, None).await?;
    let environment_id = ctx
        .agents
        .environment_for(&agent.spec.backend)
        .cloned()
        .ok_or_else(|| A2aError::Internal("no default environment is published for A2A sessions".into()))?;
    Ok(CreateSession {
        budget: None,
        agent: AgentSelection { id: agent_id.clone(), version: None, overrides: None },
        environment_id,
        title: Some(format!("A2A: {agent_name}")),
        metadata: [("a2a.agent".to_owned(), agent_name.to_owned())].into(),
        resources: vec![],
        initial_inputs: vec![first],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    })
}

/// How often a send resolves its contextId: a send that loses the race for a new
/// client-chosen contextId commits nothing, and its second resolution finds the winner's
/// session.
const RESOLVE_ATTEMPTS: usize = 2;

/// SendMessage / SendStreamingMessage up to the point where the message is committed.
///
/// One commit (DESIGN §3): the message, the session of a new context (with the alias of a
/// client-chosen contextId), the task record, its index entry, and an inline push config with
/// the task's push feed subscription are admitted together. If admission refuses the message or a document
/// conflicts, none of them is written, so nothing is left to undo.
pub async fn send(ctx: &A2aContext, agent_name: &str, req: &SendMessageRequest, v03: bool) -> Result<Started> {
    let agent_id = agent(ctx, agent_name).await?;
    let msg = &req.message;
    bounded_id("message.messageId", &msg.message_id)?;
    if msg.role != crate::wire::Role::User {
        return Err(A2aError::InvalidParams("message.role must be ROLE_USER".into()));
    }
    if let Some(task_id) = &msg.task_id {
        return follow_up(ctx, agent_name, task_id, msg).await;
    }
    let mut pass = Some(ctx.coordinator.check_new_turn()?);
    let blocks = blocks_from_parts(&msg.parts)?;
    if msg.reference_task_ids.len() > 32 {
        return Err(A2aError::InvalidParams("at most 32 referenceTaskIds".into()));
    }
    let event = NewEvent::new(EventPayload::UserMessage { content: blocks });
    let push = req.configuration.as_ref().and_then(|c| c.task_push_notification_config.clone());
    for _ in 0..RESOLVE_ATTEMPTS {
        let target = resolve(ctx, agent_name, &agent_id, msg.context_id.as_deref()).await?;
        let record = TaskRecord {
            id: task_id_for(&event.id),
            context_id: target.context_id(),
            session_id: target.session_id().clone(),
            agent: agent_name.to_owned(),
            message_id: msg.message_id.clone(),
            reference_task_ids: msg.reference_task_ids.clone(),
            created_at: 0,
            state: TaskState::Submitted,
            status_at: 0,
        };
        let mut documents = records::task_writes(&record)?;
        if let Some(cfg) = push.clone() {
            documents.push(crate::push::inline(ctx, &record.id, cfg, v03)?);
        }
        if let Target::New { alias: Some(c), session_id } = &target {
            let alias = ContextAlias { session_id: session_id.clone(), agent: agent_name.to_owned() };
            documents.push(records::create(CONTEXTS, c, &alias)?);
        }
        // Only a task with a config is fed to the push channel: feeding every task cost A2A
        // throughput a tenth under overload (ADR 0023). A config added later follows the task
        // from then on (`push::create`).
        let subscriptions = push.as_ref().map(|_| records::subscription(&record)).into_iter().collect();
        let writes = AdmissionWrites { documents, subscriptions, ..AdmissionWrites::default() };
        let admitted = match target {
            Target::Existing { session_id, .. } => {
                ctx.coordinator.submit_with(&session_id, vec![event.clone()], writes, pass.take()).await.map(|_| None)
            }
            Target::New { session_id, .. } => {
                let request = session_request(ctx, agent_name, &agent_id, event.clone()).await?;
                let ahead = ctx.coordinator.watch_ahead(&session_id);
                ctx.coordinator.create_session_with(request, session_id, writes, pass.take()).await.map(
                    |(session, events)| {
                        let hints = crate::conformance::is_conformance(&session.snapshot.agent.spec.backend);
                        Some(Known { events, ahead, hints })
                    },
                )
            }
        };
        match admitted {
            Ok(known) => {
                info!(task = %record.id, context = %record.context_id, session = %record.session_id, agent = agent_name, "task submitted");
                return Ok(Started { record, min_seq: 0, known });
            }
            // Another send bound this contextId first; nothing of this one was committed. Its
            // binding may still be in a commit in flight: wait for it, then resolve again.
            Err(RuntimeError::Guard(Guard::DocumentConflict { namespace, .. })) if namespace == CONTEXTS => {
                ctx.coordinator.sync().await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(A2aError::Unavailable("the contextId was bound concurrently; retry".into()))
}

/// A message on an existing task: answers to what an INPUT_REQUIRED task waits for.
async fn follow_up(ctx: &A2aContext, agent_name: &str, task_id: &str, msg: &Message) -> Result<Started> {
    let (record, _) = task_record(ctx, agent_name, task_id).await?;
    if let Some(c) = &msg.context_id
        && c != &record.context_id
    {
        return Err(A2aError::InvalidParams(format!("task {task_id} belongs to another contextId")));
    }
    let watch = Watch::open(&ctx.coordinator, &record).await?;
    if watch.proj.is_final() {
        return Err(A2aError::UnsupportedOperation(format!(
            "task {task_id} is {} and takes no more messages",
            watch.proj.state().name()
        )));
    }
    if !watch.proj.is_interrupted() {
        return Err(A2aError::UnsupportedOperation(format!(
            "task {task_id} is still working; wait for it to finish or ask for input, or cancel it"
        )));
    }
    let answers = answers(msg, watch.proj.pending())?;
    let record_of = AnswerRecord { message_id: msg.message_id.clone() };
    let documents =
        answers.iter().map(|a| records::create(records::ANSWERS, a.id.as_str(), &record_of)).collect::<Result<_>>()?;
    let writes = AdmissionWrites { documents, ..AdmissionWrites::default() };
    let committed = ctx.coordinator.submit_with(&record.session_id, answers, writes, None).await?;
    let min_seq = committed.iter().map(|e| e.seq).max().unwrap_or(watch.opened_at);
    info!(task = %task_id, context = %record.context_id, answers = committed.len(), "task answered");
    Ok(Started { record, min_seq, known: None })
}

/// Turns a follow-up message into answers (docs/adr/0009-a2a.md): data parts
/// `{"tool_use_id", "allow"}` / `{"tool_use_id", "result"}` answer named actions; otherwise
/// the message answers the single pending action (text allow/deny for an approval, the whole
/// message as the result otherwise).
pub fn answers(msg: &Message, pending: &[Pending]) -> Result<Vec<NewEvent>> {
    let mut out = Vec::new();
    for p in &msg.parts {
        let Some(Value::Object(d)) = &p.data else { continue };
        let Some(id) = d.get("tool_use_id").and_then(Value::as_str) else { continue };
        let tool_use_id = EventId::parse(id)
            .map_err(|_| A2aError::InvalidParams(format!("tool_use_id {id:?} is not an event id")))?;
        let payload = if let Some(allow) = d.get("allow").and_then(Value::as_bool) {
            EventPayload::ToolConfirmation {
                tool_use_id,
                allow,
                deny_message: d.get("deny_message").and_then(Value::as_str).map(str::to_owned),
            }
        } else if let Some(r) = d.get("result") {
            let content = match r {
                Value::String(s) => vec![ContentBlock::text(s.clone())],
                other => vec![ContentBlock::Data { data: other.clone() }],
            };
            let is_error = d.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            EventPayload::ClientToolResult { tool_use_id, content, is_error, origin: ToolOrigin::Custom }
        } else {
            return Err(A2aError::InvalidParams(format!("the answer to {id} needs \"allow\" or \"result\"")));
        };
        out.push(NewEvent::new(payload));
    }
    if !out.is_empty() {
        return Ok(out);
    }
    let [only] = pending else {
        return Err(A2aError::InvalidParams(format!(
            "the task waits for {} actions; answer each with a data part {{\"tool_use_id\": ..., \"allow\": true|false}} or {{\"tool_use_id\": ..., \"result\": ...}}",
            pending.len()
        )));
    };
    let payload = if only.confirmation {
        let blocks = blocks_from_parts(&msg.parts)?;
        let text = plain_text(&blocks).trim().to_ascii_lowercase();
        let allow = match text.as_str() {
            "allow" | "yes" | "y" | "approve" | "ok" => true,
            "deny" | "no" | "n" | "reject" => false,
            _ => {
                return Err(A2aError::InvalidParams(format!(
                    "the task waits for approval of tool `{}`: reply \"allow\" or \"deny\"",
                    only.name
                )));
            }
        };
        EventPayload::ToolConfirmation { tool_use_id: only.tool_use_id.clone(), allow, deny_message: None }
    } else {
        EventPayload::ClientToolResult {
            tool_use_id: only.tool_use_id.clone(),
            content: blocks_from_parts(&msg.parts)?,
            is_error: false,
            origin: ToolOrigin::Custom,
        }
    };
    Ok(vec![NewEvent::new(payload)])
}

/// Blocks until the task settles, or `blocking_timeout` passes (the task is then returned as
/// it stands, `working`: a blocking send never waits without bound), and returns its watch.
pub async fn settle(ctx: &A2aContext, started: &mut Started) -> Result<Watch> {
    let mut w = started.watch(&ctx.coordinator).await?;
    let wait = w.wait_settled(started.min_seq);
    tokio::select! {
        r = tokio::time::timeout(ctx.blocking_timeout, wait) => { if let Ok(r) = r { r?; } }
        _ = ctx.shutdown.cancelled() => {}
    }
    Ok(w)
}

pub async fn get_task(ctx: &A2aContext, agent_name: &str, id: &str, history_length: Option<i64>) -> Result<Task> {
    let (rec, _) = task_record(ctx, agent_name, id).await?;
    let w = Watch::open(&ctx.coordinator, &rec).await?;
    Ok(w.proj.task(history_length, true))
}

pub async fn cancel(ctx: &A2aContext, agent_name: &str, id: &str) -> Result<Task> {
    let (rec, _) = task_record(ctx, agent_name, id).await?;
    let mut w = Watch::open(&ctx.coordinator, &rec).await?;
    if w.proj.is_final() {
        return Err(A2aError::TaskNotCancelable(id.to_owned()));
    }
    ctx.coordinator.interrupt(&rec.session_id).await?;
    info!(task = %id, context = %rec.context_id, "task cancel requested");
    let _ = tokio::time::timeout(CANCEL_WAIT, async {
        while !w.proj.is_final() {
            if w.next().await.is_none() {
                break;
            }
        }
    })
    .await;
    Ok(w.proj.task(None, true))
}

pub struct TaskPage {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: usize,
    pub total_size: usize,
}

/// ListTasks: newest status first; filters read the tasks' states as of this call.
pub async fn list_tasks(ctx: &A2aContext, agent_name: &str, req: &ListTasksRequest) -> Result<TaskPage> {
    list_tasks_scanning(ctx, agent_name, req, LIST_SCAN).await
}

/// ListTasks over the `scan` newest-created tasks of the agent (their index entries). Tasks
/// whose session is gone are skipped: they cannot be projected any more.
pub async fn list_tasks_scanning(
    ctx: &A2aContext,
    agent_name: &str,
    req: &ListTasksRequest,
    scan: usize,
) -> Result<TaskPage> {
    let page_size = match req.page_size {
        None | Some(0) => 50,
        Some(n @ 1..=100) => n as usize,
        Some(n) => return Err(A2aError::InvalidParams(format!("pageSize {n} is outside 1-100"))),
    };
    let status = match &req.status {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() || s == "TASK_STATE_UNSPECIFIED" => None,
        Some(v) => Some(TaskState::parse(v).ok_or_else(|| A2aError::InvalidParams(format!("unknown status {v}")))?),
    };
    let after = match &req.status_timestamp_after {
        None => None,
        Some(s) => Some(
            Timestamp::parse_rfc3339(s)
                .ok_or_else(|| A2aError::InvalidParams(format!("statusTimestampAfter {s:?} is not RFC 3339")))?,
        ),
    };
    if let Some(h) = req.history_length
        && h < 0
    {
        return Err(A2aError::InvalidParams("historyLength must not be negative".into()));
    }
    let scanned: Vec<TaskRecord> = records::task_index(ctx.coordinator.documents(), agent_name, scan)
        .await?
        .into_iter()
        .filter(|r| r.agent == agent_name)
        .filter(|r| req.context_id.as_ref().is_none_or(|c| &r.context_id == c))
        .collect();
    let mut recs: Vec<TaskRecord> = brought_up_to_date(ctx, scanned)
        .await?
        .into_iter()
        .filter(|r| status.is_none_or(|s| r.state == s))
        .filter(|r| after.is_none_or(|t| r.status_at >= t.millis()))
        .collect();
    recs.sort_by(|a, b| (b.status_at, &b.id).cmp(&(a.status_at, &a.id)));
    let mut total_size = recs.len();
    let start = match &req.page_token {
        None => 0,
        Some(tok) => {
            let (at, id) = decode_token(tok)?;
            recs.iter().position(|r| (r.status_at, r.id.as_str()) < (at, id.as_str())).unwrap_or(recs.len())
        }
    };
    let mut tasks = Vec::new();
    let mut rest = recs.iter().skip(start).peekable();
    let mut last = None;
    while tasks.len() < page_size
        && let Some(r) = rest.next()
    {
        match Watch::open(&ctx.coordinator, r).await {
            Ok(w) => tasks.push(w.proj.task(req.history_length, req.include_artifacts.unwrap_or(false))),
            // Its session was deleted (or its message is not committed yet): nothing to show.
            Err(A2aError::TaskNotFound(_)) => {
                total_size -= 1;
                continue;
            }
            Err(e) => return Err(e),
        }
        last = Some(r);
    }
    let next_page_token = match (rest.peek(), last) {
        (Some(_), Some(last)) => encode_token(last.status_at, &last.id),
        _ => String::new(),
    };
    Ok(TaskPage { tasks, next_page_token, page_size, total_size })
}

/// Index entries with the states their tasks' logs show now. An entry is written when its task
/// is created, and otherwise only here: an unfinished task's entry is brought up to date from
/// its log and written back, so a task is projected for this until an entry records its end
/// (finished entries are read as they are). An entry whose session is gone stays as it is
/// (paging skips it).
async fn brought_up_to_date(ctx: &A2aContext, recs: Vec<TaskRecord>) -> Result<Vec<TaskRecord>> {
    use futures::{StreamExt, TryStreamExt};
    /// Logs read at once.
    const READS: usize = 8;
    futures::stream::iter(recs)
        .map(|mut r| async move {
            if r.state.is_terminal() {
                return Ok(r);
            }
            let proj = match Watch::open(&ctx.coordinator, &r).await {
                Ok(w) => w.proj,
                Err(A2aError::TaskNotFound(_)) => return Ok(r),
                Err(e) => return Err(e),
            };
            let (state, at) = (proj.state(), proj.status_at().millis());
            if (state, at) != (r.state, r.status_at) {
                records::record_state(ctx.coordinator.documents(), &r, state, at).await?;
                (r.state, r.status_at) = (state, at);
            }
            Ok(r)
        })
        .buffered(READS)
        .try_collect()
        .await
}

fn encode_token(at: i64, id: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{at}:{id}"))
}

fn decode_token(tok: &str) -> Result<(i64, String)> {
    use base64::Engine;
    let bad = || A2aError::InvalidParams("pageToken is not a token this server issued".into());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tok.as_bytes()).map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let (at, id) = s.split_once(':').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_owned()))
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
