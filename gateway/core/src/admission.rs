//! Admission of client inputs: one pure function deciding what a batch of inputs does to a
//! session. The store runs it inside the transaction that appends the inputs, on the session
//! row it has locked, so two concurrent batches can never both see the same pending actions.

use crate::EventId;
use crate::event::{EventKind, EventPayload, NewEvent, StopReason};
use crate::session::{PendingAction, PendingKind, SessionStatus};

/// The facts about a session that admission reads, loaded under the session's row lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    pub status: SessionStatus,
    pub archived: bool,
    pub pending: Vec<PendingAction>,
    /// A run is claimed and executing (or its lease awaits reclaim).
    pub run_running: bool,
    /// A run that has not started yet waits in the queue: it will read every input admitted
    /// before its claim, so a new message needs no run of its own.
    pub run_queued: bool,
    /// A started run waits in the queue to be retried (after a transient failure or a
    /// release). Its inputs were fixed at its first claim, so a message admitted now needs a
    /// run of its own after it; an interrupt still cancels it.
    pub run_retrying: bool,
}

/// What the store must do, atomically, for an admitted batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// Events to append, in order (the inputs plus any re-emitted idle).
    pub events: Vec<NewEvent>,
    pub status: SessionStatus,
    pub pending: Vec<PendingAction>,
    /// Set the persisted cancel intent on the running run (its Worker settles it).
    pub cancel_running: bool,
    /// Cancel queued runs right away (nobody holds them).
    pub cancel_queued: bool,
    /// Queue a new run after the current one, if any.
    pub enqueue_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    #[error("no events to send")]
    Empty,
    #[error("event kind {0} cannot be sent by a client")]
    NotAnInput(&'static str),
    #[error("the session is terminated and takes no more input")]
    Terminated,
    #[error("the session is archived and takes no more input")]
    Archived,
    #[error("the session waits for answers to {0:?}; answer them or send an interrupt before a new message")]
    AwaitingAnswers(Vec<EventId>),
    #[error("event {0} is not waiting for this kind of answer")]
    NotPending(EventId),
}

/// Decides what a batch of client inputs does. Inputs are taken in order, so
/// `[interrupt, message]` redirects a running turn, and answers resolving the last pending
/// action resume the turn instead of re-emitting an idle.
pub fn admit(state: &SessionState, inputs: Vec<NewEvent>) -> Result<Admission, AdmissionError> {
    if inputs.is_empty() {
        return Err(AdmissionError::Empty);
    }
    if state.status == SessionStatus::Terminated {
        return Err(AdmissionError::Terminated);
    }
    if state.archived {
        return Err(AdmissionError::Archived);
    }

    let mut a = Admission {
        events: Vec::with_capacity(inputs.len() + 1),
        status: state.status,
        pending: state.pending.clone(),
        cancel_running: false,
        cancel_queued: false,
        enqueue_run: false,
    };
    // Whether, after the inputs so far, a run will still execute for this session.
    let mut running = state.run_running;
    let mut queued = state.run_queued;
    let mut retrying = state.run_retrying;
    let mut answered = false;

    for input in inputs {
        match &input.payload {
            EventPayload::UserMessage { .. } => {
                if !a.pending.is_empty() {
                    return Err(AdmissionError::AwaitingAnswers(
                        a.pending.iter().map(|p| p.event_id.clone()).collect(),
                    ));
                }
                if !queued {
                    a.enqueue_run = true;
                    queued = true;
                }
                a.status = SessionStatus::Running;
            }
            EventPayload::UserInterrupt {} => {
                if running {
                    a.cancel_running = true;
                    running = false;
                }
                if queued || retrying {
                    // A run queued by this very batch is simply not queued; runs already in
                    // the queue (fresh or retrying) are cancelled.
                    a.enqueue_run = false;
                    if state.run_queued || state.run_retrying {
                        a.cancel_queued = true;
                    }
                    queued = false;
                    retrying = false;
                }
                let parked = !a.pending.is_empty();
                a.pending.clear();
                if !a.cancel_running && (a.cancel_queued || parked || a.status != SessionStatus::Idle) {
                    // No Worker will settle this turn: end it here.
                    a.events.push(input.clone());
                    a.events.push(NewEvent::new(EventPayload::TurnEnded { stop: StopReason::Interrupted }));
                    a.status = SessionStatus::Idle;
                    continue;
                }
            }
            EventPayload::ToolConfirmation { tool_use_id, .. } => {
                take_pending(&mut a.pending, tool_use_id, PendingKind::Confirmation)?;
                answered = true;
            }
            EventPayload::ClientToolResult { tool_use_id, .. } => {
                take_pending(&mut a.pending, tool_use_id, PendingKind::ClientResult)?;
                answered = true;
            }
            other => return Err(AdmissionError::NotAnInput(other.kind().as_str())),
        }
        a.events.push(input);
    }

    if answered {
        if a.pending.is_empty() {
            if !queued && !running && !retrying {
                a.enqueue_run = true;
            }
            a.status = SessionStatus::Running;
        } else {
            a.events.push(NewEvent::new(EventPayload::TurnEnded {
                stop: StopReason::RequiresAction { event_ids: a.pending.iter().map(|p| p.event_id.clone()).collect() },
            }));
            a.status = SessionStatus::Idle;
        }
    }
    debug_assert!(a.events.iter().all(|e| e.payload.kind().is_input() || e.payload.kind() == EventKind::TurnEnded));
    Ok(a)
}

fn take_pending(pending: &mut Vec<PendingAction>, id: &EventId, kind: PendingKind) -> Result<(), AdmissionError> {
    match pending.iter().position(|p| &p.event_id == id && p.kind == kind) {
        Some(i) => {
            pending.remove(i);
            Ok(())
        }
        None => Err(AdmissionError::NotPending(id.clone())),
    }
}

/// Which admission bound refused work: the cause a face reports and `/metrics` counts
/// (`gateway_admissions_refused`). Domain vocabulary, so the runtime's bounds and the metrics
/// service name it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyCause {
    /// `max_requests` requests are in flight.
    Requests,
    /// `max_requests_per_peer` requests of one address are in flight.
    PeerRequests,
    /// `max_requests_per_key` requests of one key are in flight.
    KeyRequests,
    /// `max_body_bytes_in_flight` bytes of request bodies are being read.
    BodyBytes,
    /// `max_queued_runs` runs wait to be claimed.
    QueuedRuns,
    /// A run that could be claimed has waited longer than `max_queue_wait_ms`.
    QueueWait,
    /// The process's tasks or its store's reads and writes run later than `max_lag_ms`.
    Saturated,
}

impl BusyCause {
    pub fn as_str(self) -> &'static str {
        match self {
            BusyCause::Requests => "requests",
            BusyCause::PeerRequests => "peer_requests",
            BusyCause::KeyRequests => "key_requests",
            BusyCause::BodyBytes => "body_bytes",
            BusyCause::QueuedRuns => "queued_runs",
            BusyCause::QueueWait => "queue_wait",
            BusyCause::Saturated => "saturated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ContentBlock;

    fn idle() -> SessionState {
        SessionState {
            status: SessionStatus::Idle,
            archived: false,
            pending: vec![],
            run_running: false,
            run_queued: false,
            run_retrying: false,
        }
    }

    fn running() -> SessionState {
        SessionState { status: SessionStatus::Running, run_running: true, ..idle() }
    }

    fn msg() -> NewEvent {
        NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text("hi")] })
    }

    fn interrupt() -> NewEvent {
        NewEvent::new(EventPayload::UserInterrupt {})
    }

    fn confirm(id: &EventId) -> NewEvent {
        NewEvent::new(EventPayload::ToolConfirmation { tool_use_id: id.clone(), allow: true, deny_message: None })
    }

    fn parked(ids: &[EventId]) -> SessionState {
        SessionState {
            pending: ids
                .iter()
                .map(|id| PendingAction { event_id: id.clone(), kind: PendingKind::Confirmation })
                .collect(),
            ..idle()
        }
    }

    #[test]
    fn message_on_idle_queues_a_run() {
        let a = admit(&idle(), vec![msg()]).unwrap();
        assert!(a.enqueue_run);
        assert_eq!(a.status, SessionStatus::Running);
        assert_eq!(a.events.len(), 1);
    }

    #[test]
    fn message_while_running_queues_one_follow_up() {
        let a = admit(&running(), vec![msg(), msg()]).unwrap();
        assert!(a.enqueue_run);
        let b = admit(&SessionState { run_queued: true, ..running() }, vec![msg()]).unwrap();
        assert!(!b.enqueue_run, "a queued run already takes every new message");
    }

    #[test]
    fn message_while_a_turn_awaits_its_retry_queues_its_own_run() {
        let retrying = SessionState { status: SessionStatus::Rescheduling, run_retrying: true, ..idle() };
        let a = admit(&retrying, vec![msg()]).unwrap();
        assert!(a.enqueue_run, "the retried run answers only the inputs it started with");
        let b = admit(&SessionState { run_queued: true, ..retrying.clone() }, vec![msg()]).unwrap();
        assert!(!b.enqueue_run, "the run queued after the retry takes this message too");
        let c = admit(&retrying, vec![interrupt(), msg()]).unwrap();
        assert!(c.cancel_queued && c.enqueue_run, "an interrupt cancels the retry; the message gets a run");
        assert!(matches!(c.events[1].payload, EventPayload::TurnEnded { stop: StopReason::Interrupted }));
    }

    #[test]
    fn interrupt_then_message_redirects() {
        let a = admit(&running(), vec![interrupt(), msg()]).unwrap();
        assert!(a.cancel_running);
        assert!(a.enqueue_run);
        assert_eq!(a.events.len(), 2, "the Worker settles the interrupted turn");
    }

    #[test]
    fn interrupt_of_a_queued_run_ends_the_turn_here() {
        let st = SessionState { status: SessionStatus::Running, run_queued: true, ..idle() };
        let a = admit(&st, vec![interrupt()]).unwrap();
        assert!(a.cancel_queued);
        assert!(!a.cancel_running);
        assert_eq!(a.status, SessionStatus::Idle);
        assert!(matches!(a.events[1].payload, EventPayload::TurnEnded { stop: StopReason::Interrupted }));
    }

    #[test]
    fn interrupt_when_idle_is_recorded_without_a_turn_end() {
        let a = admit(&idle(), vec![interrupt()]).unwrap();
        assert_eq!(a.events.len(), 1);
        assert_eq!(a.status, SessionStatus::Idle);
    }

    #[test]
    fn interrupt_of_a_parked_turn_clears_pending() {
        let id = EventId::new();
        let a = admit(&parked(std::slice::from_ref(&id)), vec![interrupt()]).unwrap();
        assert!(a.pending.is_empty());
        assert!(matches!(a.events[1].payload, EventPayload::TurnEnded { stop: StopReason::Interrupted }));
    }

    #[test]
    fn partial_answers_re_emit_idle_with_the_rest() {
        let (x, y) = (EventId::new(), EventId::new());
        let a = admit(&parked(&[x.clone(), y.clone()]), vec![confirm(&x)]).unwrap();
        assert!(!a.enqueue_run);
        assert_eq!(a.status, SessionStatus::Idle);
        match &a.events[1].payload {
            EventPayload::TurnEnded { stop: StopReason::RequiresAction { event_ids } } => {
                assert_eq!(event_ids, &vec![y.clone()])
            }
            other => panic!("{other:?}"),
        }
        let b = admit(&parked(&[x.clone(), y.clone()]), vec![confirm(&x), confirm(&y)]).unwrap();
        assert!(b.enqueue_run);
        assert_eq!(b.events.len(), 2, "no intermediate idle when the batch answers everything");
    }

    #[test]
    fn answers_must_match_a_pending_action_of_their_kind() {
        let x = EventId::new();
        assert_eq!(admit(&idle(), vec![confirm(&x)]), Err(AdmissionError::NotPending(x.clone())));
        let result = NewEvent::new(EventPayload::ClientToolResult {
            tool_use_id: x.clone(),
            content: vec![],
            is_error: false,
            origin: crate::event::ToolOrigin::Custom,
        });
        assert_eq!(admit(&parked(std::slice::from_ref(&x)), vec![result]), Err(AdmissionError::NotPending(x.clone())));
        assert!(matches!(admit(&parked(&[x]), vec![msg()]), Err(AdmissionError::AwaitingAnswers(_))));
    }

    #[test]
    fn closed_sessions_and_non_inputs_are_refused() {
        let term = SessionState { status: SessionStatus::Terminated, ..idle() };
        assert_eq!(admit(&term, vec![msg()]), Err(AdmissionError::Terminated));
        assert_eq!(admit(&SessionState { archived: true, ..idle() }, vec![msg()]), Err(AdmissionError::Archived));
        assert_eq!(admit(&idle(), vec![]), Err(AdmissionError::Empty));
        let forged = NewEvent::new(EventPayload::AgentMessage { content: vec![] });
        assert_eq!(admit(&idle(), vec![forged]), Err(AdmissionError::NotAnInput("agent_message")));
    }
}
