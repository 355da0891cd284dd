//! The echo agent's tasks: a bounded table whose entries compute their state from the clock
//! (working until `ready_at`, then completed), so no timer task exists per message and an
//! overload of the remote costs memory proportional to [`Tasks::max`] at most.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio::time::Instant;

pub const WORKING: &str = "TASK_STATE_WORKING";
pub const COMPLETED: &str = "TASK_STATE_COMPLETED";
pub const CANCELED: &str = "TASK_STATE_CANCELED";

#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub context: String,
    pub text: String,
    pub ready_at: Instant,
    pub canceled: bool,
}

impl Task {
    pub fn state(&self, now: Instant) -> &'static str {
        if self.canceled {
            CANCELED
        } else if now >= self.ready_at {
            COMPLETED
        } else {
            WORKING
        }
    }

    pub fn artifact(&self) -> Value {
        json!({"artifactId": "echo", "name": "echo", "parts": [{"text": self.text}]})
    }

    pub fn status(&self, state: &str) -> Value {
        json!({"state": state, "timestamp": crate::durable::wire::now()})
    }

    /// The v1.0 Task as of `now`: the artifact only once completed.
    pub fn json(&self, now: Instant) -> Value {
        let state = self.state(now);
        let mut t = json!({"id": self.id, "contextId": self.context, "status": self.status(state)});
        if state == COMPLETED {
            t["artifacts"] = json!([self.artifact()]);
        }
        t
    }
}

pub struct Tasks {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Task>,
    order: VecDeque<String>,
}

impl Tasks {
    pub fn new(max: usize) -> Self {
        Self { max: max.max(1), inner: Mutex::default() }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Keeps `task`, forgetting the oldest beyond the bound.
    pub fn insert(&self, task: Task) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while g.order.len() >= self.max {
            if let Some(old) = g.order.pop_front() {
                g.by_id.remove(&old);
            }
        }
        g.order.push_back(task.id.clone());
        g.by_id.insert(task.id.clone(), task);
    }

    pub fn get(&self, id: &str) -> Option<Task> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).by_id.get(id).cloned()
    }

    /// Cancels a task that has not completed; returns it as it now is.
    pub fn cancel(&self, id: &str, now: Instant) -> Option<Task> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let t = g.by_id.get_mut(id)?;
        if t.state(now) == WORKING {
            t.canceled = true;
        }
        Some(t.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn task(id: &str, ready_at: Instant) -> Task {
        Task { id: id.into(), context: "c".into(), text: "hi".into(), ready_at, canceled: false }
    }

    #[test]
    fn state_follows_the_clock_and_the_table_is_bounded() {
        let now = Instant::now();
        let tasks = Tasks::new(2);
        tasks.insert(task("a", now));
        tasks.insert(task("b", now + Duration::from_secs(5)));
        assert_eq!(tasks.get("a").unwrap().state(now), COMPLETED);
        assert_eq!(tasks.get("a").unwrap().json(now)["artifacts"][0]["parts"][0]["text"], "hi");
        assert_eq!(tasks.get("b").unwrap().state(now), WORKING);
        assert_eq!(tasks.cancel("b", now).unwrap().state(now), CANCELED);
        assert_eq!(tasks.cancel("a", now).unwrap().state(now), COMPLETED, "a completed task stays completed");
        tasks.insert(task("c", now));
        assert!(tasks.get("a").is_none(), "the oldest is forgotten beyond the bound");
    }
}
