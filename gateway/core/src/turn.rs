//! Turns: which client inputs a run answers, and which committed events are which turn's.
//!
//! **The rule.** A run's input boundary (`inputs_through`) is the session's last seq when the
//! run was first claimed; every event the run commits carries its run id, and its first is a
//! `turn_started` naming the boundary (the Worker writes it before anything else, even for a
//! run it fails at once). A turn is the work from a client's input to an end that waits for
//! nothing more: one run, or several when it parks for client answers and a new run resumes
//! it. A run answers the inputs committed up to its boundary that no earlier turn covered:
//! those after the boundary of the turn before (its runs' boundaries, or the seq of an end the
//! admission itself wrote, which closes everything before it). Inputs committed while a run
//! works belong to the next one.
//!
//! Two views are built on the rule, and no backend or face restates it:
//! - [`RunView`], for backends: the log as one run sees it (everything up to its boundary,
//!   plus its own commits), its current turn, and the inputs it answers.
//! - [`TurnFollower`], for faces: follows one committed input through the log and labels each
//!   later event relative to it ([`Relation`]): another turn's, its turn's start, its own, a
//!   park, the end with its stop reason.

use crate::event::{Event, EventPayload, StopReason};
use crate::{EventId, RunId};

/// Whether an end is final for the turn (a park waits for answers and is not).
fn ends_turn(stop: &StopReason) -> bool {
    !matches!(stop, StopReason::RequiresAction { .. })
}

/// The log as one run sees it.
#[derive(Debug, Clone)]
pub struct RunView {
    run: RunId,
    inputs_through: u64,
    events: Vec<Event>,
}

impl RunView {
    /// The view of `run` (boundary `inputs_through`) over a session's committed history, in
    /// seq order: every event up to the boundary, and the run's own commits after it.
    pub fn new(run: &RunId, inputs_through: u64, history: impl IntoIterator<Item = Event>) -> Self {
        let events =
            history.into_iter().filter(|e| e.seq <= inputs_through || e.run_id.as_ref() == Some(run)).collect();
        Self { run: run.clone(), inputs_through, events }
    }

    /// Adds what the run itself just committed.
    pub fn record(&mut self, committed: impl IntoIterator<Item = Event>) {
        self.events.extend(committed.into_iter().filter(|e| e.run_id.as_ref() == Some(&self.run)));
    }

    pub fn run(&self) -> &RunId {
        &self.run
    }

    pub fn inputs_through(&self) -> u64 {
        self.inputs_through
    }

    /// Everything the run may see, oldest first (the whole conversation a model is shown).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The current turn: everything after the last turn that really ended (a park is not an
    /// end, so a resumed turn includes its calls and the answers to them).
    pub fn turn(&self) -> &[Event] {
        &self.events[self.turn_start()..]
    }

    fn turn_start(&self) -> usize {
        self.events
            .iter()
            .rposition(|e| matches!(&e.payload, EventPayload::TurnEnded { stop } if ends_turn(stop)))
            .map_or(0, |i| i + 1)
    }

    /// Whether this view, taken over the events after seq `from` only (0: the whole history),
    /// answers as the whole history would: it holds the end of the turn before the current
    /// one, before that end the boundary of that turn (a run's start, or an end the admission
    /// wrote), and everything after that boundary (the inputs it leaves to this turn may come
    /// before the end). Earlier events cannot matter: boundaries only grow along the log (a
    /// run starts only for an input after every earlier end), so the newest boundary before
    /// the current turn is the highest.
    pub fn covers_its_turn(&self, from: u64) -> bool {
        if from == 0 {
            return true;
        }
        let start = self.turn_start();
        start > 0
            && self.events[..start].iter().any(|e| {
                matches!(e.payload, EventPayload::TurnStarted { .. })
                    || matches!(e.payload, EventPayload::TurnEnded { .. } if e.run_id.is_none())
            })
            && from <= self.covered()
    }

    /// Where the inputs of earlier turns end: the highest boundary of their runs, or the seq
    /// of an end the admission wrote (an interrupt of a queued or parked turn).
    fn covered(&self) -> u64 {
        self.events[..self.turn_start()]
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::TurnStarted { inputs_through } => Some(*inputs_through),
                EventPayload::TurnEnded { .. } if e.run_id.is_none() => Some(e.seq),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The client inputs this run answers, oldest first.
    pub fn inputs(&self) -> impl Iterator<Item = &Event> {
        let covered = self.covered();
        self.events.iter().filter(move |e| e.kind().is_input() && e.seq > covered && e.seq <= self.inputs_through)
    }

    /// This run's inputs after `seq` (what a backend that forwards inputs has not handed on).
    pub fn inputs_after(&self, seq: u64) -> impl Iterator<Item = &Event> {
        self.inputs().filter(move |e| e.seq > seq)
    }

    /// The newest text a user sent among this run's inputs.
    pub fn last_user_text(&self) -> Option<String> {
        self.inputs()
            .filter_map(|e| match &e.payload {
                EventPayload::UserMessage { content } => Some(crate::content::plain_text(content)),
                _ => None,
            })
            .last()
    }
}

/// What a committed event is to the turn a face follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Relation {
    /// Committed before the followed input (or is it).
    Before,
    /// A client input committed after it (answers to a park, an interrupt, the next message).
    Input,
    /// Another turn's event.
    Other,
    /// The followed turn started (or resumed after a park).
    Started,
    /// The followed turn's own output (messages, tool calls, errors).
    Ours,
    /// The followed turn waits for answers to these tool uses.
    Parked(Vec<EventId>),
    /// The followed turn ended.
    Ended(StopReason),
    /// The session was terminated or deleted: nothing more will happen.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Committed; no turn answers it yet.
    Waiting,
    Running,
    Parked,
    Done,
}

/// Follows one committed input through the session's log (events in seq order).
#[derive(Debug, Clone)]
pub struct TurnFollower {
    input_seq: u64,
    run: Option<RunId>,
    phase: Phase,
}

impl TurnFollower {
    /// Follows the input committed at `input_seq` (the last of its batch).
    pub fn new(input_seq: u64) -> Self {
        Self { input_seq, run: None, phase: Phase::Waiting }
    }

    pub fn input_seq(&self) -> u64 {
        self.input_seq
    }

    /// The run working on the followed turn right now, if one is.
    pub fn running(&self) -> Option<&RunId> {
        self.run.as_ref().filter(|_| self.phase == Phase::Running)
    }

    pub fn is_parked(&self) -> bool {
        self.phase == Phase::Parked
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Labels the next committed event.
    pub fn follow(&mut self, e: &Event) -> Relation {
        if e.seq <= self.input_seq {
            return Relation::Before;
        }
        if self.phase == Phase::Done {
            return Relation::Other;
        }
        let ours = self.phase == Phase::Running && e.run_id.is_some() && e.run_id == self.run;
        match &e.payload {
            EventPayload::SessionTerminated {} | EventPayload::SessionDeleted {} => {
                self.phase = Phase::Done;
                Relation::Closed
            }
            EventPayload::TurnStarted { inputs_through }
                if matches!(self.phase, Phase::Waiting | Phase::Parked) && *inputs_through >= self.input_seq =>
            {
                self.run = e.run_id.clone();
                self.phase = Phase::Running;
                Relation::Started
            }
            // An interrupt cancels every queued run, the one that was to answer us included.
            EventPayload::UserInterrupt {} if self.phase == Phase::Waiting => {
                self.phase = Phase::Done;
                Relation::Ended(StopReason::Interrupted)
            }
            EventPayload::TurnEnded { stop }
                if ours || (e.run_id.is_none() && matches!(self.phase, Phase::Waiting | Phase::Parked)) =>
            {
                match stop {
                    StopReason::RequiresAction { event_ids } => {
                        self.phase = Phase::Parked;
                        Relation::Parked(event_ids.clone())
                    }
                    other => {
                        self.phase = Phase::Done;
                        Relation::Ended(other.clone())
                    }
                }
            }
            _ if e.run_id.is_none() => Relation::Input,
            _ if ours => Relation::Ours,
            _ => Relation::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ContentBlock;
    use crate::{SessionId, Timestamp};

    /// A log written as `(run, payload)` rows; seqs are positions from 1.
    fn log(rows: Vec<(Option<&RunId>, EventPayload)>) -> Vec<Event> {
        let session = SessionId::new();
        rows.into_iter()
            .enumerate()
            .map(|(i, (run, payload))| Event {
                id: EventId::new(),
                session_id: session.clone(),
                seq: i as u64 + 1,
                created_at: Timestamp(0),
                run_id: run.cloned(),
                epoch: run.map(|_| 1),
                payload,
            })
            .collect()
    }

    fn msg(t: &str) -> EventPayload {
        EventPayload::UserMessage { content: vec![ContentBlock::text(t)] }
    }
    fn started(through: u64) -> EventPayload {
        EventPayload::TurnStarted { inputs_through: through }
    }
    fn ended(stop: StopReason) -> EventPayload {
        EventPayload::TurnEnded { stop }
    }
    fn said(t: &str) -> EventPayload {
        EventPayload::AgentMessage { content: vec![ContentBlock::text(t)] }
    }
    fn parked() -> EventPayload {
        ended(StopReason::RequiresAction { event_ids: vec![] })
    }
    fn confirm() -> EventPayload {
        EventPayload::ToolConfirmation { tool_use_id: EventId::new(), allow: true, deny_message: None }
    }
    const END: StopReason = StopReason::EndTurn;

    fn texts(es: &[&Event]) -> Vec<String> {
        es.iter()
            .filter_map(|e| match &e.payload {
                EventPayload::UserMessage { content } => Some(crate::content::plain_text(content)),
                EventPayload::ToolConfirmation { .. } => Some("confirm".into()),
                EventPayload::UserInterrupt {} => Some("interrupt".into()),
                _ => None,
            })
            .collect()
    }

    /// One row per case: a log, the run whose view is taken (while it works), the inputs that
    /// run answers, and what a face following the message at `follow_seq` sees for each event.
    #[test]
    fn the_turn_table() {
        use Relation::*;
        let (r1, r2, r3) = (RunId::new(), RunId::new(), RunId::new());
        struct Row<'a> {
            name: &'a str,
            log: Vec<(Option<&'a RunId>, EventPayload)>,
            /// The run whose view is taken, its boundary, and the last seq committed when it
            /// takes it (the run is at work).
            view: (&'a RunId, u64, u64),
            answers: Vec<&'a str>,
            follow_seq: u64,
            labels: Vec<Relation>,
        }
        let rows = vec![
            Row {
                // Also a reclaim before turn_started: the log is the same, as the new claim
                // starts the turn and it is ours.
                name: "a plain turn",
                log: vec![(None, msg("a")), (Some(&r1), started(1)), (Some(&r1), said("x")), (Some(&r1), ended(END))],
                view: (&r1, 1, 3),
                answers: vec!["a"],
                follow_seq: 1,
                labels: vec![Before, Started, Ours, Ended(END)],
            },
            Row {
                name: "a message mid-turn belongs to the next run",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (None, msg("b")),
                    (Some(&r1), said("x")),
                    (Some(&r1), ended(END)),
                    (Some(&r2), started(5)),
                    (Some(&r2), ended(END)),
                ],
                view: (&r2, 5, 6),
                answers: vec!["b"],
                follow_seq: 3,
                labels: vec![Before, Before, Before, Other, Other, Started, Ended(END)],
            },
            Row {
                name: "the first run never sees the message sent mid-turn",
                log: vec![(None, msg("a")), (Some(&r1), started(1)), (None, msg("b")), (Some(&r1), said("x"))],
                view: (&r1, 1, 4),
                answers: vec!["a"],
                follow_seq: 1,
                labels: vec![Before, Started, Input, Ours],
            },
            Row {
                name: "a retry keeps its boundary; a message during the backoff gets its own run",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (Some(&r1), EventPayload::TurnRescheduled {}),
                    (None, msg("b")),
                    (Some(&r1), started(1)),
                    (Some(&r1), ended(END)),
                    (Some(&r2), started(6)),
                    (Some(&r2), ended(END)),
                ],
                view: (&r2, 6, 7),
                answers: vec!["b"],
                follow_seq: 4,
                labels: vec![Before, Before, Before, Before, Other, Other, Started, Ended(END)],
            },
            Row {
                name: "a park resumes in a new run that answers the message and the approval",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (Some(&r1), parked()),
                    (None, confirm()),
                    (Some(&r2), started(4)),
                    (Some(&r2), ended(END)),
                ],
                view: (&r2, 4, 5),
                answers: vec!["a", "confirm"],
                follow_seq: 1,
                labels: vec![Before, Started, Parked(vec![]), Input, Started, Ended(END)],
            },
            Row {
                name: "an interrupt of a queued run ends the turn without a run",
                log: vec![
                    (None, msg("a")),
                    (None, EventPayload::UserInterrupt {}),
                    (None, ended(StopReason::Interrupted)),
                    (None, msg("b")),
                    (Some(&r2), started(4)),
                ],
                view: (&r2, 4, 5),
                answers: vec!["b"],
                follow_seq: 1,
                labels: vec![Before, Ended(StopReason::Interrupted), Other, Other, Other],
            },
            Row {
                name: "an interrupt while another turn runs cancels the queued one silently",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (None, msg("b")),
                    (None, EventPayload::UserInterrupt {}),
                    (Some(&r1), ended(StopReason::Interrupted)),
                ],
                view: (&r1, 1, 4),
                answers: vec!["a"],
                follow_seq: 3,
                labels: vec![Before, Before, Before, Ended(StopReason::Interrupted), Other],
            },
            Row {
                name: "interrupt then a new message: the next run answers only the new text",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (None, EventPayload::UserInterrupt {}),
                    (None, msg("b")),
                    (Some(&r1), ended(StopReason::Interrupted)),
                    (Some(&r2), started(5)),
                ],
                view: (&r2, 5, 6),
                answers: vec!["interrupt", "b"],
                follow_seq: 4,
                labels: vec![Before, Before, Before, Before, Other, Started],
            },
            Row {
                name: "a failure before any work is still after the turn's start",
                log: vec![
                    (None, msg("a")),
                    (Some(&r1), started(1)),
                    (
                        Some(&r1),
                        EventPayload::SessionError {
                            kind: crate::event::ErrorKind::EnvironmentLost,
                            message: "gone".into(),
                            retry: crate::event::RetryStatus::Exhausted,
                            server: None,
                        },
                    ),
                    (Some(&r1), ended(StopReason::Failed)),
                ],
                view: (&r1, 1, 3),
                answers: vec!["a"],
                follow_seq: 1,
                labels: vec![Before, Started, Ours, Ended(StopReason::Failed)],
            },
            Row {
                name: "a queued run takes every message admitted before its claim",
                log: vec![(None, msg("a")), (None, msg("b")), (Some(&r3), started(2)), (Some(&r3), ended(END))],
                view: (&r3, 2, 3),
                answers: vec!["a", "b"],
                follow_seq: 1,
                labels: vec![Before, Input, Started, Ended(END)],
            },
            Row {
                name: "termination closes the turn",
                log: vec![(None, msg("a")), (Some(&r1), started(1)), (Some(&r1), EventPayload::SessionTerminated {})],
                view: (&r1, 1, 2),
                answers: vec!["a"],
                follow_seq: 1,
                labels: vec![Before, Started, Closed],
            },
        ];
        let mut partial = 0;
        for row in rows {
            let events = log(row.log);
            let (run, boundary, at) = row.view;
            let view = RunView::new(run, boundary, events.iter().filter(|e| e.seq <= at).cloned());
            assert_eq!(texts(&view.inputs().collect::<Vec<_>>()), row.answers, "{}: inputs", row.name);
            // A view over the newest events only answers the same, whenever it says it covers
            // its turn.
            for from in 1..at {
                let part = RunView::new(run, boundary, events.iter().filter(|e| e.seq > from && e.seq <= at).cloned());
                if part.covers_its_turn(from) {
                    partial += 1;
                    let (a, b) = (part.inputs().map(|e| e.seq).collect::<Vec<_>>(), view.inputs().map(|e| e.seq));
                    assert!(a.into_iter().eq(b), "{}: inputs from seq {from}", row.name);
                    assert_eq!(part.turn(), view.turn(), "{}: the turn from seq {from}", row.name);
                }
            }
            let mut follower = TurnFollower::new(row.follow_seq);
            let labels: Vec<Relation> = events.iter().map(|e| follower.follow(e)).collect();
            assert_eq!(labels, row.labels, "{}: labels", row.name);
        }
        assert!(partial >= 5, "only {partial} partial views covered their turn: the check is too strict to help");
    }

    #[test]
    fn a_view_holds_the_runs_own_commits_and_its_turn() {
        let (r1, r2) = (RunId::new(), RunId::new());
        let events = log(vec![
            (None, msg("a")),
            (Some(&r1), started(1)),
            (Some(&r1), ended(END)),
            (None, msg("b")),
            (Some(&r2), started(4)),
            (None, msg("c")),
            (Some(&r2), said("x")),
        ]);
        let view = RunView::new(&r2, 4, events.clone());
        let seqs: Vec<u64> = view.events().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5, 7], "c came after the boundary: the next run's");
        assert_eq!(view.turn().iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5, 7]);
        assert_eq!(view.last_user_text().as_deref(), Some("b"));
        assert_eq!(view.inputs_after(4).count(), 0);
        assert!(RunView::new(&r2, 4, events[1..].to_vec()).covers_its_turn(1), "r1's start and end are enough");
        assert!(!RunView::new(&r2, 4, events[2..].to_vec()).covers_its_turn(2), "r1's boundary is missing");
        assert!(!RunView::new(&r2, 4, events[3..].to_vec()).covers_its_turn(3), "the turn before is missing");
        let mut grown = RunView::new(&r2, 4, events[..5].to_vec());
        grown.record(events[5..].to_vec());
        assert_eq!(grown.events().len(), 6, "recording keeps only the run's own commits");
    }
}
