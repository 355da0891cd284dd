//! Following one task: a session subscription folded through the [`Projector`].
//!
//! A watch starts at the task's start message, folds everything committed up to the moment it
//! opened (the "current Task"), then yields the updates of each later event. Every reader of a
//! task (GetTask, blocking sends, streams, subscribers, the push feed) goes through here, so
//! they all see the same states in the same order.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use gateway_core::event::Event;
use gateway_runtime::{Coordinator, Delivery, RuntimeError, SubscribeOptions};

use crate::error::A2aError;
use crate::tasks::projection::Projector;
use crate::tasks::records::{TaskRecord, event_for};
use crate::tasks::service::Known;
use crate::wire::StreamResponse;

type Events = Pin<Box<dyn Stream<Item = Result<Delivery, RuntimeError>> + Send>>;

pub struct Watch {
    pub proj: Projector,
    events: Events,
    /// The session's last seq when the watch opened.
    pub opened_at: u64,
    /// The seq of the last event that changed the task's state.
    pub status_seq: u64,
}

impl Watch {
    /// Opens a watch and folds the task's history up to now.
    pub async fn open(coordinator: &Coordinator, rec: &TaskRecord) -> Result<Watch, A2aError> {
        Self::open_folding(coordinator, rec, u64::MAX).await
    }

    /// Opens a watch folding silently only up to `fold_upto` (or now, if earlier): later
    /// events come out of [`Watch::next`] with their updates (where the push feed refolds a
    /// task it has not cached).
    pub async fn open_folding(coordinator: &Coordinator, rec: &TaskRecord, fold_upto: u64) -> Result<Watch, A2aError> {
        let not_found = || A2aError::TaskNotFound(rec.id.clone());
        let start = event_for(&rec.id).ok_or_else(not_found)?;
        let session = coordinator.get_session(&rec.session_id).await.map_err(|e| match e {
            RuntimeError::NotFound { .. } => not_found(),
            other => other.into(),
        })?;
        let start_seq = coordinator.find_event(&rec.session_id, &start).await?.ok_or_else(not_found)?.seq;
        let events =
            coordinator.subscribe(&session, SubscribeOptions { after_seq: start_seq - 1, previews: false, poll: None });
        let hints = crate::conformance::is_conformance(&session.snapshot.agent.spec.backend);
        let mut w = Watch::new(rec, start, hints, Box::pin(events), session.last_seq);
        let upto = w.opened_at.min(fold_upto.max(start_seq));
        // A final task never changes again: the rest of a long session is not read for it.
        while w.proj.last_seq() < upto && !w.proj.is_final() {
            if w.next().await.transpose()?.is_none() {
                break;
            }
        }
        Ok(w)
    }

    /// Opens the watch of a task whose send created its session, from what that send holds:
    /// its committed events folded here, the rest of the log followed from the watch opened
    /// before the commit. The same watch as [`Watch::open`] gives, without its three reads
    /// (the session, the start event, the log so far).
    pub fn open_started(coordinator: &Coordinator, rec: &TaskRecord, known: Known) -> Result<Watch, A2aError> {
        let start = event_for(&rec.id).ok_or_else(|| A2aError::TaskNotFound(rec.id.clone()))?;
        let Some(at) = known.events.iter().position(|e| e.id == start) else {
            return Err(A2aError::Internal(format!("the send of task {} did not commit its message", rec.id)));
        };
        let through = known.events.last().map_or(0, |e| e.seq);
        let options = SubscribeOptions { after_seq: through, previews: false, poll: None };
        let events = Box::pin(coordinator.subscribe_ahead(known.ahead, options));
        let mut w = Watch::new(rec, start, known.hints, events, through);
        for e in &known.events[at..] {
            w.fold(e);
        }
        Ok(w)
    }

    /// A watch of `rec` from its start event, following `events`, nothing folded yet.
    fn new(rec: &TaskRecord, start: gateway_core::EventId, hints: bool, events: Events, opened_at: u64) -> Watch {
        Watch {
            proj: Projector::new(&rec.id, &rec.context_id, start, &rec.message_id).honour_hints(hints),
            events,
            opened_at,
            status_seq: 0,
        }
    }

    /// Folds one committed event into the projection; its updates.
    fn fold(&mut self, e: &Event) -> Vec<StreamResponse> {
        let updates = self.proj.apply(e);
        if updates.iter().any(|u| matches!(u, StreamResponse::StatusUpdate(_))) {
            self.status_seq = e.seq;
        }
        updates
    }

    /// Folds the next committed event; returns its updates (often none). `None` when the
    /// session's stream ended (the session was deleted).
    pub async fn next(&mut self) -> Option<Result<Vec<StreamResponse>, A2aError>> {
        loop {
            match self.events.next().await? {
                Ok(Delivery::Event(e)) => return Some(Ok(self.fold(&e))),
                Ok(Delivery::Preview(_)) => continue,
                Err(e) => return Some(Err(e.into())),
            }
        }
    }

    /// Whether the task has settled (final or interrupted) through an event after `min_seq`.
    pub fn settled_after(&self, min_seq: u64) -> bool {
        self.proj.settled() && (self.status_seq > min_seq || self.proj.is_final())
    }

    /// Folds events until the task settles after `min_seq` (or the session ends).
    pub async fn wait_settled(&mut self, min_seq: u64) -> Result<(), A2aError> {
        while !self.settled_after(min_seq) {
            if self.next().await.transpose()?.is_none() {
                break;
            }
        }
        Ok(())
    }
}
