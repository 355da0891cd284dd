//! The adapter's durable state, kept in the store's documents (protocol words stay out of
//! the schema): task records (and their newest-first index), context aliases, push configs,
//! feeder cursors, pinned remote cards.
//!
//! Documents list only in ascending key order, so ListTasks reads an index whose keys sort
//! newest first: `a2a.task_index/{agent}/{inverted creation time}/{task}`, each entry a copy
//! of the task record (kept in step by [`put_task`], [`set_state`] and [`delete_task`]).
//!
//! A task id is derived from the id of the event that started it (`sevt_X` -> `task_X`), so
//! the event log alone says which message started a task, and a backend running the turn can
//! find the task's record from the user message it reads.

use gateway_core::{EventId, SessionId};
use gateway_runtime::Documents;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::A2aError;
use crate::wire::TaskState;

pub const TASKS: &str = "a2a.task";
pub const TASK_INDEX: &str = "a2a.task_index";
pub const CONTEXTS: &str = "a2a.context";
pub const PUSH: &str = "a2a.push";
pub const FEED: &str = "a2a.feed";
pub const REMOTE_CARDS: &str = "a2a.remote_card";

const TASK_PREFIX: &str = "task_";

pub fn task_id_for(event: &EventId) -> String {
    format!("{TASK_PREFIX}{}", &event.as_str()[EventId::PREFIX.len()..])
}

/// The start event of a task id, if the id is well formed.
pub fn event_for(task_id: &str) -> Option<EventId> {
    let rest = task_id.strip_prefix(TASK_PREFIX)?;
    EventId::parse(&format!("{}{rest}", EventId::PREFIX)).ok()
}

/// What the adapter remembers about one task; the rest is projected from the event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub id: String,
    /// The contextId clients see (the session id, or the client's own id for an alias).
    pub context_id: String,
    pub session_id: SessionId,
    /// The published agent name the task was sent to.
    pub agent: String,
    /// The client's messageId of the message that started the task.
    pub message_id: String,
    #[serde(default)]
    pub reference_task_ids: Vec<String>,
    pub created_at: i64,
    /// Last known state and its time, maintained by the feeder (for ListTasks filters).
    pub state: TaskState,
    pub status_at: i64,
}

/// A client-chosen contextId bound to a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextAlias {
    pub session_id: SessionId,
    pub agent: String,
}

/// A stored push config, in the version it was registered with (decides the body shape).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushRecord {
    pub config: crate::wire::PushConfig,
    pub v03: bool,
}

/// The feeder's cursor for one unfinished task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedCursor {
    pub session_id: SessionId,
    /// Events up to this seq have been turned into deliveries.
    pub after_seq: u64,
    /// Which process feeds it, until when (local clock, milliseconds).
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub lease_until: i64,
}

fn store_err(e: gateway_runtime::RuntimeError) -> A2aError {
    e.into()
}

/// The index prefix of an agent's tasks. The name's length comes first, so one agent's
/// prefix is never a prefix of another's (names may contain `/`).
pub fn index_prefix(agent: &str) -> String {
    format!("{}:{agent}/", agent.len())
}

/// A task's index key: newest created first within its agent.
pub fn index_key(rec: &TaskRecord) -> String {
    let inverted = i64::MAX - rec.created_at.max(0);
    format!("{}{inverted:019}/{}", index_prefix(&rec.agent), rec.id)
}

pub async fn get<T: DeserializeOwned>(docs: &dyn Documents, ns: &str, key: &str) -> Result<Option<(T, u64)>, A2aError> {
    match docs.get_document(ns, key).await.map_err(|e| store_err(e.into()))? {
        None => Ok(None),
        Some(d) => {
            let v = serde_json::from_value(d.body)
                .map_err(|e| A2aError::Internal(format!("stored document {ns}/{key} is unreadable: {e}")))?;
            Ok(Some((v, d.version)))
        }
    }
}

pub async fn put<T: Serialize>(
    docs: &dyn Documents,
    ns: &str,
    key: &str,
    value: &T,
    expected: Option<u64>,
) -> Result<u64, A2aError> {
    let body: Value = serde_json::to_value(value).map_err(|e| A2aError::Internal(e.to_string()))?;
    let d = docs.put_document(ns, key, &body, expected).await.map_err(|e| store_err(e.into()))?;
    Ok(d.version)
}

/// Documents under `prefix`, at most `cap` of them, in key order. A document that does not
/// read as `T` is skipped with a warning (it cannot be served, but must not hide the others).
pub async fn list<T: DeserializeOwned>(
    docs: &dyn Documents,
    ns: &str,
    prefix: &str,
    cap: usize,
) -> Result<Vec<(String, T, u64)>, A2aError> {
    list_after(docs, ns, prefix, None, cap).await
}

/// [`list`] from the first key after `after`.
pub async fn list_after<T: DeserializeOwned>(
    docs: &dyn Documents,
    ns: &str,
    prefix: &str,
    after: Option<&str>,
    cap: usize,
) -> Result<Vec<(String, T, u64)>, A2aError> {
    let mut out = Vec::new();
    let mut after: Option<String> = after.map(str::to_owned);
    while out.len() < cap {
        let batch = docs.list_documents(ns, prefix, after.as_deref(), 200).await.map_err(|e| store_err(e.into()))?;
        let done = batch.len() < 200;
        for d in batch {
            after = Some(d.key.clone());
            match serde_json::from_value(d.body) {
                Ok(v) => out.push((d.key, v, d.version)),
                Err(e) => tracing::warn!(namespace = ns, key = %d.key, error = %e, "skipping an unreadable document"),
            }
        }
        if done {
            break;
        }
    }
    out.truncate(cap);
    Ok(out)
}

pub async fn delete(docs: &dyn Documents, ns: &str, key: &str) -> Result<(), A2aError> {
    docs.delete_document(ns, key).await.map_err(|e| store_err(e.into()))?;
    Ok(())
}

pub async fn task(docs: &dyn Documents, id: &str) -> Result<Option<(TaskRecord, u64)>, A2aError> {
    if event_for(id).is_none() {
        return Ok(None);
    }
    get(docs, TASKS, id).await
}

/// Stores a new task record and its index entry.
pub async fn put_task(docs: &dyn Documents, rec: &TaskRecord) -> Result<(), A2aError> {
    put(docs, TASKS, &rec.id, rec, None).await?;
    if let Err(e) = put(docs, TASK_INDEX, &index_key(rec), rec, None).await {
        let _ = delete(docs, TASKS, &rec.id).await;
        return Err(e);
    }
    Ok(())
}

/// Removes a task record and its index entry.
pub async fn delete_task(docs: &dyn Documents, rec: &TaskRecord) -> Result<(), A2aError> {
    delete(docs, TASK_INDEX, &index_key(rec)).await?;
    delete(docs, TASKS, &rec.id).await
}

/// Records the last known state of a task in the record, then in its index entry
/// (compare-and-set, a few attempts each).
pub async fn set_state(docs: &dyn Documents, id: &str, state: TaskState, at: i64) -> Result<(), A2aError> {
    let mut updated = None;
    for _ in 0..5 {
        let Some((mut rec, version)) = task(docs, id).await? else { return Ok(()) };
        if rec.state == state && rec.status_at >= at {
            updated = Some(rec);
            break;
        }
        rec.state = state;
        rec.status_at = rec.status_at.max(at);
        match put(docs, TASKS, id, &rec, Some(version)).await {
            Ok(_) => {
                updated = Some(rec);
                break;
            }
            Err(A2aError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    let Some(rec) = updated else { return Ok(()) };
    let key = index_key(&rec);
    for _ in 0..5 {
        let version = match get::<TaskRecord>(docs, TASK_INDEX, &key).await? {
            Some((entry, _)) if entry.state == rec.state && entry.status_at >= rec.status_at => return Ok(()),
            Some((_, v)) => Some(v),
            None => None,
        };
        match put(docs, TASK_INDEX, &key, &rec, version).await {
            Ok(_) => return Ok(()),
            Err(A2aError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_derive_from_their_start_event() {
        let e = EventId::new();
        let t = task_id_for(&e);
        assert!(t.starts_with("task_"));
        assert_eq!(event_for(&t), Some(e));
        assert_eq!(event_for("task_nope"), None);
        assert_eq!(event_for("sevt_x"), None);
    }

    fn rec(agent: &str, created_at: i64) -> TaskRecord {
        TaskRecord {
            id: task_id_for(&EventId::new()),
            context_id: "c".into(),
            session_id: SessionId::new(),
            agent: agent.into(),
            message_id: "m".into(),
            reference_task_ids: vec![],
            created_at,
            state: TaskState::Submitted,
            status_at: created_at,
        }
    }

    #[test]
    fn index_keys_sort_newest_first_within_an_agent() {
        let (old, new, newer) = (rec("a", 1_000), rec("a", 2_000), rec("a", 1_700_000_000_000));
        let mut keys = vec![index_key(&old), index_key(&newer), index_key(&new)];
        keys.sort();
        assert_eq!(keys, vec![index_key(&newer), index_key(&new), index_key(&old)]);
        assert!(index_key(&old).starts_with(&index_prefix("a")));
        // One agent's prefix never covers another agent's keys.
        assert!(!index_key(&rec("a/b", 1)).starts_with(&index_prefix("a")));
        assert!(!index_key(&rec("ab", 1)).starts_with(&index_prefix("a")));
    }
}
