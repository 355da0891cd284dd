//! The adapter's durable state, kept in the store's documents (protocol words stay out of
//! the schema): task records (and their newest-first index), context aliases, push configs,
//! pinned remote cards.
//!
//! Documents list only in ascending key order, so ListTasks reads an index whose keys sort
//! newest first: `a2a.task_index/{agent}/{inverted creation time}/{task}`, each entry a copy
//! of the task record (created with it by [`task_writes`]) whose state ListTasks brings up to
//! date from the log while the task is unfinished ([`record_state`]).
//!
//! A task id is derived from the id of the event that started it (`sevt_X` -> `task_X`), so
//! the event log alone says which message started a task, and a backend running the turn can
//! find the task's record from the user message it reads.
//!
//! A task's record, index entry, and inline push config with its feed subscription are written
//! in the transaction that admits its message ([`task_writes`], [`subscription`],
//! `service::send`): none of them exists without the message, and none has to be removed when a
//! send fails.

use gateway_core::{EventId, SessionId};
use gateway_store::{Document, DocumentWrite, Documents, ReadDocuments, Subscribe};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::A2aError;
use crate::wire::TaskState;

pub const TASKS: &str = "a2a.task";
pub const TASK_INDEX: &str = "a2a.task_index";
pub const CONTEXTS: &str = "a2a.context";
pub const PUSH: &str = "a2a.push";
pub const REMOTE_CARDS: &str = "a2a.remote_card";
/// Follow-up messages by the answer event they became (key: the event id).
pub const ANSWERS: &str = "a2a.answer";

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
    /// Set only in records stored before a task's documents were admitted with its message
    /// (it keyed their index entry); 0 since. A task's creation time is now the `created_at`
    /// of its record document: the database time of the commit that admitted its message.
    #[serde(default)]
    pub created_at: i64,
    /// Last known state and its time: in the index entry, maintained by the push channel's
    /// feed (for ListTasks filters); in the record, the state it was created in.
    pub state: TaskState,
    /// 0 until the feed first records a state; read as the record's creation time then.
    #[serde(default)]
    pub status_at: i64,
}

/// The client's messageId of a follow-up message, which the log cannot hold: the message
/// became answer events (tool results, confirmations). Written with the answers; the
/// conformance agent reads it for the TCK's per-message scenarios.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerRecord {
    pub message_id: String,
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

/// A store error as the adapter's error (the one mapping for every document call).
pub(crate) fn store_err(e: impl Into<gateway_runtime::RuntimeError>) -> A2aError {
    A2aError::from(e.into())
}

/// The index prefix of an agent's tasks. The name's length comes first, so one agent's
/// prefix is never a prefix of another's (names may contain `/`).
pub fn index_prefix(agent: &str) -> String {
    format!("{}:{agent}/", agent.len())
}

/// A task's index key: newest created first within its agent. Created means the time its
/// id was minted (known before the message commits, unlike the commit's time); records
/// stored with a `created_at` of their own keep the key that was made from it.
pub fn index_key(rec: &TaskRecord) -> String {
    let created = match rec.created_at {
        0 => event_for(&rec.id).map(|e| e.minted_millis()).unwrap_or(0),
        legacy => legacy,
    };
    let inverted = i64::MAX - created.max(0);
    format!("{}{inverted:019}/{}", index_prefix(&rec.agent), rec.id)
}

/// A value as a document body.
fn body<T: Serialize>(value: &T) -> Result<Value, A2aError> {
    serde_json::to_value(value).map_err(|e| A2aError::Internal(e.to_string()))
}

/// A new document holding `value`, to be written with an admission.
pub fn create<T: Serialize>(ns: &str, key: &str, value: &T) -> Result<DocumentWrite, A2aError> {
    Ok(DocumentWrite::create(ns, key, body(value)?))
}

/// The documents of a new task, created with the message that starts it: the record and its
/// index entry (plus, from `push`, an inline push config).
pub fn task_writes(rec: &TaskRecord) -> Result<Vec<DocumentWrite>, A2aError> {
    Ok(vec![create(TASKS, &rec.id, rec)?, create(TASK_INDEX, &index_key(rec), rec)?])
}

/// The push channel's subscription of a new task sent with a push config, written with its
/// message. A task without one is not fed; a config added later follows it from then on.
pub fn subscription(rec: &TaskRecord) -> Subscribe {
    Subscribe { channel: crate::push::delivery::CHANNEL.to_owned(), key: rec.id.clone() }
}

fn decode<T: DeserializeOwned>(d: Document) -> Result<(T, u64), A2aError> {
    let v = serde_json::from_value(d.body)
        .map_err(|e| A2aError::Internal(format!("stored document {}/{} is unreadable: {e}", d.namespace, d.key)))?;
    Ok((v, d.version))
}

/// A task record (or index entry) as stored, its status time defaulting to its creation.
fn decode_task(d: Document) -> Result<(TaskRecord, u64), A2aError> {
    let created = d.created_at.millis();
    let (mut rec, version) = decode::<TaskRecord>(d)?;
    if rec.status_at == 0 {
        rec.status_at = created;
    }
    Ok((rec, version))
}

pub async fn get<T: DeserializeOwned>(
    docs: &dyn ReadDocuments,
    ns: &str,
    key: &str,
) -> Result<Option<(T, u64)>, A2aError> {
    docs.get_document(ns, key).await.map_err(store_err)?.map(decode).transpose()
}

pub async fn put<T: Serialize>(
    docs: &dyn Documents,
    ns: &str,
    key: &str,
    value: &T,
    expected: Option<u64>,
) -> Result<u64, A2aError> {
    let d = docs.put_document(ns, key, &body(value)?, expected).await.map_err(store_err)?;
    Ok(d.version)
}

/// The index entries of an agent's tasks, newest created first, at most `cap`.
pub async fn task_index(docs: &dyn Documents, agent: &str, cap: usize) -> Result<Vec<TaskRecord>, A2aError> {
    let (ns, prefix) = (TASK_INDEX, index_prefix(agent));
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    while out.len() < cap {
        let batch = docs.list_documents(ns, &prefix, after.as_deref(), 200).await.map_err(store_err)?;
        let done = batch.len() < 200;
        for d in batch {
            let key = d.key.clone();
            after = Some(key.clone());
            // An entry that cannot be read cannot be served, but must not hide the others.
            match decode_task(d) {
                Ok((rec, _)) => out.push(rec),
                Err(e) => tracing::warn!(namespace = ns, key = %key, error = %e, "skipping an unreadable document"),
            }
        }
        if done {
            break;
        }
    }
    out.truncate(cap);
    Ok(out)
}

pub async fn task(docs: &dyn Documents, id: &str) -> Result<Option<(TaskRecord, u64)>, A2aError> {
    if event_for(id).is_none() {
        return Ok(None);
    }
    docs.get_document(TASKS, id).await.map_err(store_err)?.map(decode_task).transpose()
}

/// Records in a task's index entry the state its log showed at `at` (ListTasks filters and
/// sorts on it), compare-and-set on the entry as read now. Nothing is written when the entry
/// already says so or says something newer (a finished task, a later status: another reader
/// got there first), nor when the entry changed between the read and the write. The task
/// record itself keeps the task as created.
pub async fn record_state(docs: &dyn Documents, rec: &TaskRecord, state: TaskState, at: i64) -> Result<(), A2aError> {
    let key = index_key(rec);
    let (mut entry, version) = match get::<TaskRecord>(docs, TASK_INDEX, &key).await? {
        Some((entry, _)) if entry.state.is_terminal() || entry.status_at > at => return Ok(()),
        Some((entry, _)) if entry.state == state && entry.status_at == at => return Ok(()),
        Some((entry, v)) => (entry, Some(v)),
        None => (rec.clone(), None),
    };
    entry.state = state;
    entry.status_at = at;
    match put(docs, TASK_INDEX, &key, &entry, version).await {
        Ok(_) | Err(A2aError::Conflict(_)) => Ok(()),
        Err(e) => Err(e),
    }
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
    fn new_records_are_indexed_by_the_time_their_id_was_minted() {
        let old = rec("a", 0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let new = rec("a", 0);
        let legacy = rec("a", 1_000);
        assert!(index_key(&new) < index_key(&old), "the later id sorts first");
        let minted = event_for(&new.id).unwrap().minted_millis();
        assert_eq!(index_key(&new), index_key(&TaskRecord { created_at: minted, ..new.clone() }));
        assert!(index_key(&legacy).ends_with(&format!("{:019}/{}", i64::MAX - 1_000, legacy.id)), "legacy keys stay");
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
