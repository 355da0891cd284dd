//! What an editor learns about a session as it opens it (`session/new`, `load`, `resume`):
//! the modes and settings in the answer, and the slash commands right after it.
//!
//! An ACP agent's process is started when a session is created, by a run with no inputs
//! (`Coordinator::open_session`): its answer to `session/new` (modes, settings) and what it
//! says just after (commands) are reports in the log before the editor's answer goes out, so
//! the editor shows them as it would connected directly.

use std::time::Duration;

use futures::StreamExt;
use gateway_core::agent::BackendRef;
use gateway_core::event::{EventPayload, StopReason};
use gateway_core::session::Session;
use gateway_runtime::{Delivery, SubscribeOptions};
use serde_json::{Value, json};
use tracing::warn;

use super::project::AgentState;
use super::{Editor, Projector, runtime_error};
use crate::rpc::RpcError;

/// How long `session/new` waits for an ACP agent's process to start and open its session.
/// Past it the session is answered without the agent's modes and settings (they come with the
/// first prompt), the start going on.
const OPEN_WAIT: Duration = Duration::from_secs(60);

/// Starts an ACP-backed session's agent process and waits until it has opened its session;
/// an agent that cannot start is an error with its reason. A session not idle (a prompt raced
/// in on another connection) or a native one is left as it is.
pub(super) async fn start_agent(ed: &Editor, session: &Session) -> Result<(), RpcError> {
    if !matches!(session.snapshot.agent.spec.backend, BackendRef::Acp { .. }) {
        return Ok(());
    }
    let coordinator = &ed.ctx.coordinator;
    let options = SubscribeOptions { after_seq: session.last_seq, previews: false, poll: None };
    let stream = coordinator.subscribe(session, options);
    tokio::pin!(stream);
    if !coordinator.open_session(&session.id).await.map_err(runtime_error)? {
        return Ok(());
    }
    let mut error = None;
    let ended = tokio::time::timeout(OPEN_WAIT, async {
        while let Some(delivery) = stream.next().await {
            match delivery.map_err(runtime_error)? {
                Delivery::Event(e) => match e.payload {
                    EventPayload::SessionError { message, .. } => error = Some(message),
                    EventPayload::TurnEnded { stop } => return Ok(Some(stop)),
                    _ => {}
                },
                Delivery::Preview(_) => {}
            }
        }
        Ok::<_, RpcError>(None)
    })
    .await;
    match ended {
        Ok(Ok(Some(StopReason::Failed | StopReason::RetriesExhausted))) => {
            let reason = error.unwrap_or_else(|| "the agent process did not start".into());
            warn!(session = %session.id, %reason, "the ACP agent could not open the session");
            Err(RpcError::internal(format!("the agent could not be started: {reason}")))
        }
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            warn!(session = %session.id, wait = ?OPEN_WAIT, "the ACP agent is slow to start; answering without its modes");
            Ok(())
        }
    }
}

/// What an ACP agent last said about itself, read from its reports unless `replayed` (a
/// `session/load` projected the whole history already). A native agent has none: its modes
/// are the gateway's options, and its skills cannot be placed in an editor's directory
/// (`Coordinator::resolve_skills`).
pub(super) async fn agent_state(
    ed: &Editor,
    session: &Session,
    projector: &mut Projector,
    replayed: bool,
) -> Result<AgentState, RpcError> {
    if !matches!(session.snapshot.agent.spec.backend, BackendRef::Acp { .. }) {
        return Ok(AgentState::default());
    }
    if !replayed {
        super::sessions::project_history(ed, &session.id, true, projector, |_| async {}).await?;
    }
    Ok(projector.agent_state().clone())
}

/// Sends the commands right after the answer being made (`gateway_wire`'s follow-ups): the
/// editor must know the session before it hears about it.
pub(super) fn send_commands_after(session: &Session, commands: Option<Value>) {
    if let Some(update) = commands {
        let sent = gateway_wire::jsonrpc::notify_after_answer(
            "session/update",
            json!({"sessionId": session.id.to_string(), "update": update}),
        );
        if !sent {
            warn!(session = %session.id, "the agent's commands could not follow the answer");
        }
    }
}
