//! One `session/prompt`: the user's message is admitted, the turn streams as
//! `session/update`s, `always_ask` tools become `session/request_permission`s, and the turn's
//! end becomes the stop reason.
//!
//! The subscription is opened *before* the message is submitted, so no preview or event of
//! the turn can be missed. Which events are the prompt's turn is decided by the core's
//! `TurnFollower` (`gateway_core::turn`), fed every committed event: only the turn's own
//! events are shown, only its error is its failure, and only its end ends the prompt. A turn
//! another client started earlier, even one retried after our message, does not.
//!
//! After a cancel the answer is `cancelled` whatever happens next: the turn failing, the
//! session ending, the stream breaking.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use gateway_core::event::{ErrorKind, EventPayload, NewEvent, StopReason};
use gateway_core::session::PendingKind;
use gateway_core::turn::{Relation, TurnFollower};
use gateway_core::{EventId, SessionId};
use gateway_runtime::{Delivery, SubscribeOptions};
use gateway_store::SessionPatch;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Editor, Open, Projector, ToolCall, runtime_error};
use crate::names::{AFTER_SEQ_META, ALLOW_ALWAYS_NS, PROMPT_ID_META, SEQ_META};
use crate::rpc::{Peer, RpcError, params};
use crate::wire::{self, PermissionAnswer};

#[derive(Deserialize)]
struct PromptParams {
    prompt: Value,
}

/// What a relay (`gateway acp --url`, ADR 0030) adds to a prompt's `_meta` so that sending it
/// again on a new connection, after the old one dropped, is safe: the user message's event id
/// (`gateway.promptId`, minted by the relay), and the seq of the last update the editor was
/// shown (`gateway.afterSeq`). A prompt whose message is already in the session is not
/// admitted again: it follows that message's turn, and only updates after `afterSeq` are sent.
/// Updates of such a prompt carry their event's seq (`_meta` `gateway.seq`) for the next resend.
#[derive(Debug, Default, PartialEq)]
struct Resend {
    prompt_id: Option<EventId>,
    after_seq: u64,
}

impl Resend {
    fn read(raw: &Value) -> Result<Self, RpcError> {
        let Some(meta) = raw.get("_meta") else { return Ok(Self::default()) };
        let prompt_id = match meta.get(PROMPT_ID_META) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(EventId::parse(s).map_err(|e| {
                RpcError::invalid_params(format!(
                    "`_meta.{PROMPT_ID_META}` must be an event id minted by the relay: {e}"
                ))
            })?),
            Some(_) => return Err(RpcError::invalid_params(format!("`_meta.{PROMPT_ID_META}` must be a string"))),
        };
        let after_seq = match meta.get(AFTER_SEQ_META) {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_u64().ok_or_else(|| {
                RpcError::invalid_params(format!("`_meta.{AFTER_SEQ_META}` must be a non-negative integer"))
            })?,
        };
        Ok(Self { prompt_id, after_seq })
    }
}

/// The seq of the prompt's message if a prompt with this id was admitted before.
async fn admitted_before(ed: &Editor, session: &SessionId, prompt: &EventId) -> Result<Option<u64>, RpcError> {
    match ed.ctx.coordinator.find_event(session, prompt).await.map_err(runtime_error)? {
        Some(e) if matches!(e.payload, EventPayload::UserMessage { .. }) => Ok(Some(e.seq)),
        Some(_) => {
            Err(RpcError::invalid_params(format!("`_meta.{PROMPT_ID_META}` names an event that is not a prompt")))
        }
        None => Ok(None),
    }
}

/// Clears the session's prompt slot when the prompt ends, however it ends.
struct Slot(Arc<Open>);

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.prompt.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Registers the prompt (in the read loop): one prompt per session at a time.
pub(super) fn begin(ed: &Editor, raw: &Value) -> Result<(Arc<Open>, CancellationToken), RpcError> {
    let id = raw
        .get("sessionId")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("`sessionId` is required"))?;
    let open = ed.open(id)?;
    let mut slot = open.prompt.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_some() {
        return Err(RpcError::new(crate::rpc::code::INVALID_REQUEST, "a prompt is already running in this session"));
    }
    let token = CancellationToken::new();
    *slot = Some(token.clone());
    drop(slot);
    Ok((open, token))
}

fn stop_reason(reason: &str) -> Value {
    json!({"stopReason": reason})
}

/// Longest title taken from a prompt.
const TITLE_CHARS: usize = 80;

/// A session's title from its first prompt: the first line of text, cut at a word.
fn title_of(content: &[gateway_core::content::ContentBlock]) -> Option<String> {
    let text = gateway_core::content::plain_text(content);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    if line.chars().count() <= TITLE_CHARS {
        return Some(line.to_owned());
    }
    let cut: String = line.chars().take(TITLE_CHARS - 1).collect();
    let at_word = cut.rsplit_once(' ').map_or(cut.as_str(), |(head, _)| head).trim_end();
    Some(format!("{at_word}…"))
}

pub(super) async fn run(
    ed: Arc<Editor>,
    peer: Peer,
    open: Arc<Open>,
    cancel: CancellationToken,
    raw: Value,
) -> Result<Value, RpcError> {
    let _slot = Slot(Arc::clone(&open));
    match drive(&ed, &peer, &open, &cancel, raw).await {
        Err(e) if cancel.is_cancelled() => {
            info!(session = %open.id, error = %e, "the prompt was cancelled; answering cancelled");
            Ok(stop_reason("cancelled"))
        }
        other => other,
    }
}

async fn drive(
    ed: &Arc<Editor>,
    peer: &Peer,
    open: &Arc<Open>,
    cancel: &CancellationToken,
    raw: Value,
) -> Result<Value, RpcError> {
    let resend = Resend::read(&raw)?;
    let p: PromptParams = params(raw)?;
    let coordinator = &ed.ctx.coordinator;
    let id = open.id.clone();
    let session = coordinator.get_session(&id).await.map_err(runtime_error)?;
    ed.require_auth(&session.snapshot.agent.spec.backend)?;
    // The workspace is not re-checked here: every realization and wake of the session's
    // environment opens it without symlinks and checks it is the directory recorded at
    // creation, whichever face the turn came from (invariant 19).
    let content = wire::prompt_to_core(&p.prompt, Editor::support(&session))?;
    let earlier = match &resend.prompt_id {
        Some(prompt) => admitted_before(ed, &id, prompt).await?,
        None => None,
    };
    let after_seq = earlier.map_or(session.last_seq, |seq| seq - 1);
    let options = SubscribeOptions { after_seq, previews: true, poll: None };
    let stream = coordinator.subscribe(&session, options);
    tokio::pin!(stream);
    let message_seq = match earlier {
        Some(seq) => {
            info!(session = %id, seq, "a prompt sent again after a lost connection follows its turn");
            seq
        }
        None => admit(ed, peer, &session, content, resend.prompt_id.as_ref()).await?,
    };
    debug!(session = %id, seq = message_seq, "prompt admitted");

    let projector = super::sessions::projector(ed, &open.cwd, &session, false);
    let numbered = resend.prompt_id.is_some();
    let mut turn = Turn { ed, peer, id: &id, projector, cancel, numbered };
    let mut follower = TurnFollower::new(message_seq);
    let mut interrupted = false;
    let mut last_error: Option<(ErrorKind, String)> = None;
    loop {
        let next = tokio::select! {
            d = stream.next() => d,
            _ = cancel.cancelled(), if !interrupted => {
                interrupted = true;
                if let Err(e) = coordinator.interrupt(&id).await {
                    warn!(session = %id, error = %e, "interrupt failed");
                }
                continue;
            }
            _ = ed.ctx.shutdown.cancelled() => return Err(RpcError::internal("the gateway is shutting down")),
            // The editor went away: stop watching; the turn itself goes on.
            _ = peer.closed() => return Err(RpcError::closed()),
        };
        let delivery = match next {
            None => return Err(RpcError::internal("the session's event stream ended")),
            Some(Err(e)) => return Err(runtime_error(e)),
            Some(Ok(d)) => d,
        };
        let event = match delivery {
            // One run works on a session at a time: previews while ours runs are ours.
            Delivery::Preview(p) if follower.running().is_some() => {
                let updates = turn.projector.preview(&p);
                turn.send(updates, None).await;
                continue;
            }
            Delivery::Preview(_) => continue,
            Delivery::Event(e) => e,
        };
        let relation = follower.follow(&event);
        if matches!(relation, Relation::Started | Relation::Ours | Relation::Parked(_) | Relation::Ended(_)) {
            let updates = turn.projector.event(&event);
            // What the editor was shown before its connection dropped is not sent again.
            if event.seq > resend.after_seq {
                turn.send(updates, Some(event.seq)).await;
            }
        }
        match relation {
            Relation::Ours => {
                if let EventPayload::SessionError { kind, message, .. } = &event.payload {
                    last_error = Some((*kind, message.clone()));
                }
            }
            // The answers resume the turn in a new run, whose start the follower sees.
            Relation::Parked(ids) if !cancel.is_cancelled() => turn.answer(&ids).await?,
            Relation::Parked(_) => return Ok(stop_reason("cancelled")),
            Relation::Ended(stop) => {
                let reason = match stop {
                    _ if cancel.is_cancelled() => "cancelled",
                    StopReason::EndTurn => "end_turn",
                    StopReason::Interrupted | StopReason::RequiresAction { .. } => "cancelled",
                    // ACP's closed set has no budget: the nearest is "no more requests this turn".
                    StopReason::RoundLimit | StopReason::BudgetReached => "max_turn_requests",
                    StopReason::Refusal => "refusal",
                    StopReason::Failed | StopReason::RetriesExhausted => return Err(turn_failed(last_error)),
                };
                info!(session = %id, stop = reason, "prompt finished");
                let mut answer = stop_reason(reason);
                if let Some(usage) = turn.projector.usage() {
                    answer["usage"] = usage;
                }
                return Ok(answer);
            }
            Relation::Closed if matches!(event.payload, EventPayload::SessionDeleted {}) => {
                return Err(crate::rpc::not_found("the session was deleted"));
            }
            Relation::Closed => {
                return Err(RpcError::internal("the session was terminated and takes no more prompts"));
            }
            Relation::Before | Relation::Input | Relation::Other | Relation::Started => {}
        }
    }
}

/// Admits the prompt's message (interrupting a turn parked with no editor to answer it), with
/// the relay's id when it gave one; titles a native session from its first prompt. Returns the
/// message's seq. A relay's prompt that raced its own earlier send finds that one instead.
async fn admit(
    ed: &Editor,
    peer: &Peer,
    session: &gateway_core::session::Session,
    content: Vec<gateway_core::content::ContentBlock>,
    prompt_id: Option<&EventId>,
) -> Result<u64, RpcError> {
    let coordinator = &ed.ctx.coordinator;
    let id = &session.id;
    // A turn parked while no editor was connected to answer (it went away mid-turn) would
    // refuse every new message: the new prompt interrupts it (the parked calls are not run).
    let mut inputs = Vec::with_capacity(2);
    if !session.pending_actions.is_empty() {
        info!(session = %id, pending = session.pending_actions.len(), "a new prompt interrupts the parked turn");
        inputs.push(NewEvent::new(EventPayload::UserInterrupt {}));
    }
    // An ACP agent titles its own sessions (its `session_info_update` passes through).
    let native = session.snapshot.agent.spec.backend == gateway_core::agent::BackendRef::Native;
    let title = (native && session.title.is_none()).then(|| title_of(&content)).flatten();
    let message = EventPayload::UserMessage { content };
    inputs.push(match prompt_id {
        Some(prompt) => NewEvent { id: prompt.clone(), payload: message },
        None => NewEvent::new(message),
    });
    let committed = match coordinator.submit(id, inputs).await {
        Ok(c) => c,
        Err(e) => match prompt_id {
            Some(prompt) => match admitted_before(ed, id, prompt).await? {
                Some(seq) => return Ok(seq),
                None => return Err(runtime_error(e)),
            },
            None => return Err(runtime_error(e)),
        },
    };
    // A session without a title takes its first prompt's first line, as editors list it.
    if let Some(title) = title {
        let patch = SessionPatch { title: Some(Some(title.clone())), ..Default::default() };
        match coordinator.update_session(id, patch).await {
            Ok(s) => {
                let update = super::session_info(&s);
                peer.notify("session/update", json!({"sessionId": id.to_string(), "update": update})).await;
            }
            Err(e) => warn!(session = %id, error = %e, "cannot keep the session's title"),
        }
    }
    Ok(committed.last().map(|e| e.seq).unwrap_or(session.last_seq))
}

/// A failed turn as an error response naming its cause.
fn turn_failed(error: Option<(ErrorKind, String)>) -> RpcError {
    let (kind, message) = error.unwrap_or((ErrorKind::Unknown, "the turn failed".into()));
    let kind = serde_json::to_value(kind).unwrap_or(Value::Null);
    RpcError::internal(format!("the turn failed: {message}")).with_data(json!({"kind": kind, "message": message}))
}

struct Turn<'a> {
    ed: &'a Editor,
    peer: &'a Peer,
    id: &'a SessionId,
    projector: Projector,
    cancel: &'a CancellationToken,
    /// A relay's prompt: updates of committed events carry their seq ([`Resend`]).
    numbered: bool,
}

impl Turn<'_> {
    async fn send(&self, updates: Vec<Value>, seq: Option<u64>) {
        for update in updates {
            let mut note = json!({"sessionId": self.id.to_string(), "update": update});
            if let (true, Some(seq)) = (self.numbered, seq) {
                note["_meta"] = json!({ SEQ_META: seq });
            }
            self.peer.notify("session/update", note).await;
        }
    }

    /// Answers a parked turn's tool confirmations: from the session's "always" rules, else by
    /// asking the editor, one request per call. A cancelled request cancels the prompt.
    async fn answer(&mut self, ids: &[EventId]) -> Result<(), RpcError> {
        let coordinator = &self.ed.ctx.coordinator;
        let session = coordinator.get_session(self.id).await.map_err(runtime_error)?;
        if session.pending_actions.iter().any(|p| p.kind == PendingKind::ClientResult) {
            return Err(RpcError::internal(
                "the agent called a tool the client must run; editors cannot answer those (use the Managed Agents API)",
            ));
        }
        // Calls answered meanwhile (a relay's prompt following its turn again sees the park
        // once more) are not asked about twice.
        let ids: Vec<&EventId> =
            ids.iter().filter(|id| session.pending_actions.iter().any(|p| &p.event_id == *id)).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut rules = Rules::load(self.ed, self.id).await;
        let mut answers = Vec::new();
        for id in ids {
            let call = match self.projector.tool(id) {
                Some(c) => c.clone(),
                None => match coordinator.find_event(self.id, id).await.map_err(runtime_error)? {
                    Some(gateway_core::event::Event {
                        payload: EventPayload::ToolUse { name, input, origin, .. },
                        ..
                    }) => ToolCall { name, input, origin },
                    _ => return Err(RpcError::internal(format!("the pending tool call {id} was not found"))),
                },
            };
            let answer = match rules.get(&call.name) {
                Some(allow) => {
                    debug!(session = %self.id, tool = %call.name, allow, "answered by an 'always' rule");
                    if allow { PermissionAnswer::AllowOnce } else { PermissionAnswer::RejectOnce }
                }
                None => self.ask(id, &call).await,
            };
            let allow = match answer {
                PermissionAnswer::Cancelled => {
                    self.cancel.cancel();
                    return Ok(());
                }
                PermissionAnswer::AllowAlways => {
                    rules.set(self.ed, self.id, &call.name, true).await;
                    true
                }
                PermissionAnswer::RejectAlways => {
                    rules.set(self.ed, self.id, &call.name, false).await;
                    false
                }
                PermissionAnswer::AllowOnce => true,
                PermissionAnswer::RejectOnce => false,
            };
            let deny_message = (!allow).then(|| "rejected in the editor".to_owned());
            answers.push(NewEvent::new(EventPayload::ToolConfirmation {
                tool_use_id: id.clone(),
                allow,
                deny_message,
            }));
        }
        coordinator.submit(self.id, answers).await.map_err(runtime_error)?;
        Ok(())
    }

    async fn ask(&self, id: &EventId, call: &ToolCall) -> PermissionAnswer {
        let options = wire::permission_options(&call.name);
        let request = json!({
            "sessionId": self.id.to_string(),
            "toolCall": call.permission_subject(id, self.projector.cwd(), self.projector.inner_root()),
            "options": options,
        });
        let asked = tokio::select! {
            r = self.peer.request("session/request_permission", request) => r,
            _ = self.cancel.cancelled() => return PermissionAnswer::Cancelled,
        };
        match asked {
            Ok(result) => wire::read_permission_outcome(&result, &options),
            Err(e) => {
                warn!(session = %self.id, error = %e, "the editor did not answer a permission request; rejecting the call");
                if self.peer.is_closed() { PermissionAnswer::Cancelled } else { PermissionAnswer::RejectOnce }
            }
        }
    }
}

/// The session's "always allow / always reject" answers, by tool name, kept as a document so
/// they survive reconnects and restarts.
struct Rules {
    tools: BTreeMap<String, bool>,
    version: Option<u64>,
}

impl Rules {
    async fn load(ed: &Editor, id: &SessionId) -> Self {
        match ed.ctx.coordinator.documents().get_document(ALLOW_ALWAYS_NS, id.as_str()).await {
            Ok(Some(doc)) => Self {
                tools: serde_json::from_value(doc.body.get("tools").cloned().unwrap_or(Value::Null))
                    .unwrap_or_default(),
                version: Some(doc.version),
            },
            Ok(None) => Self { tools: BTreeMap::new(), version: None },
            Err(e) => {
                warn!(session = %id, error = %e, "cannot read the 'always' answers; asking instead");
                Self { tools: BTreeMap::new(), version: None }
            }
        }
    }

    fn get(&self, tool: &str) -> Option<bool> {
        self.tools.get(tool).copied()
    }

    async fn set(&mut self, ed: &Editor, id: &SessionId, tool: &str, allow: bool) {
        self.tools.insert(tool.to_owned(), allow);
        let body = json!({"tools": self.tools});
        match ed.ctx.coordinator.documents().put_document(ALLOW_ALWAYS_NS, id.as_str(), &body, self.version).await {
            Ok(doc) => self.version = Some(doc.version),
            Err(e) => {
                warn!(session = %id, error = %e, "cannot keep an 'always' answer; it applies to this prompt only")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relay's `_meta` is read, anything malformed in it is the editor's error (never a
    /// prompt admitted without the id it was sent with), and an editor's own `_meta` is ignored.
    #[test]
    fn a_relays_prompt_id_and_seq_are_read_and_bad_ones_refused() {
        let id = EventId::new();
        let raw = json!({"_meta": {PROMPT_ID_META: id.as_str(), AFTER_SEQ_META: 7, "other": true}});
        assert_eq!(Resend::read(&raw).expect("accepted"), Resend { prompt_id: Some(id), after_seq: 7 });
        assert_eq!(Resend::read(&json!({"_meta": {"traceparent": "x"}})).expect("accepted"), Resend::default());
        assert_eq!(Resend::read(&json!({})).expect("accepted"), Resend::default());
        for bad in [
            json!({"_meta": {PROMPT_ID_META: "not-an-event-id"}}),
            json!({"_meta": {PROMPT_ID_META: 12}}),
            json!({"_meta": {AFTER_SEQ_META: -1}}),
            json!({"_meta": {AFTER_SEQ_META: "7"}}),
        ] {
            assert_eq!(Resend::read(&bad).expect_err("refused").code, crate::rpc::code::INVALID_PARAMS, "{bad}");
        }
    }
}
