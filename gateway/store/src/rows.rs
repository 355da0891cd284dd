//! Row shapes shared by both engines, and their conversion into domain types.
//!
//! Both schemas store ids and JSON documents as TEXT and times as BIGINT milliseconds from
//! the database clock, so one set of row structs decodes either engine's rows.

use gateway_core::agent::{Agent, AgentSpec};
use gateway_core::environment::{ConnectionStatus, Environment, EnvironmentSpec};
use gateway_core::event::{Event, EventPayload};
use gateway_core::run::{Run, RunState};
use gateway_core::session::{EnvironmentState, Session, SessionStatus};
use gateway_core::{AgentId, EnvironmentId, EventId, RunId, SessionId, Timestamp};

use crate::error::{Result, StoreError};
use crate::model::{Keyset, Order, Page, PageCursor, PageRequest};
use crate::sql::conn::{DbError, FromRow, Row, from_row};
use crate::sql::read::{Decode, Listed};

/// Each value listed in `(created_at, id)` order, and its place in it.
macro_rules! listed {
    ($($ty:ty),+) => {
        $(impl Listed for $ty {
            fn keyset(&self) -> Keyset {
                Keyset { at: self.created_at.0, id: self.id.to_string() }
            }
        })+
    };
}
listed!(Agent, Environment, Session, crate::WorkItem, crate::StoredFile, crate::StoredSkill, crate::StoredSkillVersion);

fn ts(ms: i64) -> Timestamp {
    Timestamp(ms)
}

fn id<T: std::str::FromStr>(s: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    s.parse::<T>().map_err(StoreError::corrupt)
}

fn version(v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| StoreError::corrupt(format!("version {v} out of range")))
}

pub struct AgentRow {
    pub id: String,
    pub version: i64,
    pub spec: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub archived_at: Option<i64>,
}

impl Decode for AgentRow {
    type Out = Agent;
    fn decode(self) -> Result<Agent> {
        let spec: AgentSpec = serde_json::from_str(&self.spec)?;
        Ok(Agent {
            id: id::<AgentId>(&self.id)?,
            version: version(self.version)?,
            spec,
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            archived_at: self.archived_at.map(ts),
        })
    }
}

pub struct EnvironmentRow {
    pub id: String,
    pub spec: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub archived_at: Option<i64>,
}

impl Decode for EnvironmentRow {
    type Out = Environment;
    fn decode(self) -> Result<Environment> {
        let spec: EnvironmentSpec = serde_json::from_str(&self.spec)?;
        Ok(Environment {
            id: id::<EnvironmentId>(&self.id)?,
            spec,
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            archived_at: self.archived_at.map(ts),
        })
    }
}

/// A locked session row and the database clock, read together.
pub struct LockedSessionRow {
    pub row: SessionRow,
    pub now_ms: i64,
}

pub struct SessionRow {
    pub id: String,
    pub environment_id: String,
    pub snapshot: String,
    pub title: Option<String>,
    pub metadata: String,
    pub status: String,
    pub pending: String,
    pub env_state: String,
    pub env_host: Option<String>,
    pub connection: Option<String>,
    pub last_seq: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub archived_at: Option<i64>,
}

impl SessionRow {
    /// The pending actions, without taking the row apart.
    pub fn clone_pending(&self) -> Result<Vec<gateway_core::session::PendingAction>> {
        Ok(serde_json::from_str(&self.pending)?)
    }
}

impl Decode for SessionRow {
    type Out = Session;
    fn decode(self) -> Result<Session> {
        Ok(Session {
            id: id::<SessionId>(&self.id)?,
            environment_id: id::<EnvironmentId>(&self.environment_id)?,
            snapshot: serde_json::from_str(&self.snapshot)?,
            title: self.title,
            metadata: serde_json::from_str(&self.metadata)?,
            status: SessionStatus::parse(&self.status)
                .ok_or_else(|| StoreError::corrupt(format!("session status {:?}", self.status)))?,
            pending_actions: serde_json::from_str(&self.pending)?,
            environment_state: EnvironmentState::parse(&self.env_state)
                .ok_or_else(|| StoreError::corrupt(format!("environment state {:?}", self.env_state)))?,
            environment_host: self.env_host,
            connection: self
                .connection
                .map(|c| {
                    ConnectionStatus::parse(&c).ok_or_else(|| StoreError::corrupt(format!("connection status {c:?}")))
                })
                .transpose()?,
            last_seq: u64::try_from(self.last_seq).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            archived_at: self.archived_at.map(ts),
        })
    }
}

pub struct EventRow {
    pub session_id: String,
    pub seq: i64,
    pub id: String,
    pub payload: String,
    pub created_at: i64,
    pub run_id: Option<String>,
    pub epoch: Option<i64>,
}

impl Decode for EventRow {
    type Out = Event;
    fn decode(self) -> Result<Event> {
        let payload: EventPayload = serde_json::from_str(&self.payload)?;
        Ok(Event {
            id: id::<EventId>(&self.id)?,
            session_id: id::<SessionId>(&self.session_id)?,
            seq: u64::try_from(self.seq).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            run_id: self.run_id.as_deref().map(id::<RunId>).transpose()?,
            epoch: self.epoch,
            payload,
        })
    }
}

pub struct RunRow {
    pub id: String,
    pub session_id: String,
    pub state: String,
    pub backend: String,
    pub provider: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub lease_expires_at: Option<i64>,
    pub crash_count: i64,
    pub attempt: i64,
    pub available_at: i64,
    pub cancel_requested: bool,
    pub started: bool,
    pub input_seq: Option<i64>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Decode for RunRow {
    type Out = Run;
    fn decode(self) -> Result<Run> {
        Ok(Run {
            id: id::<RunId>(&self.id)?,
            session_id: id::<SessionId>(&self.session_id)?,
            state: RunState::parse(&self.state)
                .ok_or_else(|| StoreError::corrupt(format!("run state {:?}", self.state)))?,
            backend: gateway_core::agent::BackendRef::parse(&self.backend).map_err(StoreError::corrupt)?,
            provider: self.provider.map(gateway_core::environment::ProviderTier),
            lease_owner: self.lease_owner,
            lease_epoch: self.lease_epoch,
            lease_expires_at: self.lease_expires_at.map(ts),
            crash_count: u32::try_from(self.crash_count).unwrap_or(u32::MAX),
            attempt: u32::try_from(self.attempt).unwrap_or(u32::MAX),
            available_at: ts(self.available_at),
            cancel_requested: self.cancel_requested,
            started: self.started,
            input_seq: self.input_seq.and_then(|s| u64::try_from(s).ok()),
            trace: self
                .traceparent
                .map(|traceparent| gateway_core::trace::TraceContext { traceparent, tracestate: self.tracestate }),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
        })
    }
}

/// The scan a page request needs: ascending after a key, or descending before one. Backward
/// pages scan against the list order and are reversed afterwards.
pub struct Scan {
    pub ascending: bool,
    /// Exclusive bound in scan direction.
    pub bound: Option<Keyset>,
    /// Rows to fetch: one more than the page, to learn whether more exist.
    pub fetch: i64,
}

impl Scan {
    pub fn plan(req: &PageRequest) -> Self {
        let backward = req.cursor.as_ref().is_some_and(|c| c.backward);
        let ascending = (req.order == Order::Asc) != backward;
        Scan { ascending, bound: req.cursor.as_ref().map(|c| c.key.clone()), fetch: i64::from(req.limit.max(1)) + 1 }
    }

    /// The bound's parts as SQL parameters (NULLs when unbounded).
    pub fn bound_parts(&self) -> (Option<i64>, String) {
        match &self.bound {
            Some(k) => (Some(k.at), k.id.clone()),
            None => (None, String::new()),
        }
    }
}

/// Turns scanned rows into a page with neighbour cursors.
pub(crate) fn paginate<T>(req: &PageRequest, mut rows: Vec<T>, key: impl Fn(&T) -> Keyset) -> Page<T> {
    let backward = req.cursor.as_ref().is_some_and(|c| c.backward);
    let limit = req.limit.max(1) as usize;
    let more = rows.len() > limit;
    rows.truncate(limit);
    if backward {
        rows.reverse();
    }
    let first = rows.first().map(&key);
    let last = rows.last().map(&key);
    let (has_next, has_prev) = if backward { (true, more) } else { (more, req.cursor.is_some()) };
    Page {
        next: if has_next { last.map(|key| PageCursor { key, backward: false }) } else { None },
        prev: if has_prev { first.map(|key| PageCursor { key, backward: true }) } else { None },
        items: rows,
    }
}

/// The lease facts of a run, read to explain a fenced write.
pub struct RunRefRow {
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub state: String,
}

/// A claim candidate: the run and where its session's environment lives.
pub struct ClaimCandidateRow {
    pub run: RunRow,
    pub env_host: Option<String>,
}

/// Existence and lifecycle facts used to explain a refused write.
pub struct GuardRow {
    pub version: i64,
    pub archived_at: Option<i64>,
    pub deleted_at: Option<i64>,
}

pub struct ApiKeyRow {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub environment_id: Option<String>,
}

impl Decode for ApiKeyRow {
    type Out = crate::ApiKey;
    fn decode(self) -> Result<crate::ApiKey> {
        Ok(crate::ApiKey {
            id: id::<gateway_core::ApiKeyId>(&self.id)?,
            name: self.name,
            created_at: ts(self.created_at),
            revoked_at: self.revoked_at.map(ts),
            environment_id: self.environment_id.as_deref().map(id::<EnvironmentId>).transpose()?,
        })
    }
}

pub struct DocumentRow {
    pub namespace: String,
    pub key: String,
    pub body: String,
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
}

impl DocumentRow {
    pub fn into_document(self) -> Result<crate::Document> {
        let lease = match (self.lease_owner, self.lease_expires_at) {
            (Some(owner), Some(at)) => Some(crate::DocumentLease { owner, expires_at: ts(at) }),
            _ => None,
        };
        Ok(crate::Document {
            namespace: self.namespace,
            key: self.key,
            body: serde_json::from_str(&self.body)?,
            version: u64::try_from(self.version).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            lease,
        })
    }
}

pub struct DeliveryRow {
    pub id: String,
    pub topic: String,
    pub url: String,
    pub headers: String,
    pub body: String,
    pub attempts: i64,
}

impl DeliveryRow {
    pub fn into_delivery(self) -> Result<crate::Delivery> {
        Ok(crate::Delivery {
            id: id::<gateway_core::DeliveryId>(&self.id)?,
            topic: self.topic,
            url: self.url,
            headers: serde_json::from_str(&self.headers)?,
            body: self.body,
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
        })
    }
}

pub struct DeliveryStateRow {
    pub state: String,
    pub attempts: i64,
}

pub struct WorkItemRow {
    pub id: String,
    pub environment_id: String,
    pub session_id: String,
    pub state: String,
    pub metadata: String,
    pub created_at: i64,
    pub acknowledged_at: Option<i64>,
    pub started_at: Option<i64>,
    pub latest_heartbeat_at: Option<i64>,
    pub stop_requested_at: Option<i64>,
    pub stopped_at: Option<i64>,
    pub heartbeat: Option<String>,
    pub ttl_ms: Option<i64>,
}

impl Decode for WorkItemRow {
    type Out = crate::WorkItem;
    fn decode(self) -> Result<crate::WorkItem> {
        Ok(crate::WorkItem {
            id: id::<gateway_core::WorkId>(&self.id)?,
            environment_id: id::<EnvironmentId>(&self.environment_id)?,
            session_id: id::<SessionId>(&self.session_id)?,
            state: crate::WorkState::parse(&self.state)
                .ok_or_else(|| StoreError::corrupt(format!("work state {:?}", self.state)))?,
            metadata: serde_json::from_str(&self.metadata)?,
            created_at: ts(self.created_at),
            acknowledged_at: self.acknowledged_at.map(ts),
            started_at: self.started_at.map(ts),
            latest_heartbeat_at: self.latest_heartbeat_at.map(ts),
            stop_requested_at: self.stop_requested_at.map(ts),
            stopped_at: self.stopped_at.map(ts),
            heartbeat: self.heartbeat,
            ttl: self.ttl_ms.and_then(|ms| u64::try_from(ms).ok()).map(std::time::Duration::from_millis),
        })
    }
}

pub struct WebhookRow {
    pub id: String,
    pub origin: String,
    pub url: String,
    pub secret: String,
    pub event_types: String,
    pub description: Option<String>,
    pub status: String,
    pub consecutive_failures: i64,
    pub created_at: i64,
    pub disabled_at: Option<i64>,
}

impl Decode for WebhookRow {
    type Out = crate::WebhookEndpoint;
    fn decode(self) -> Result<crate::WebhookEndpoint> {
        Ok(crate::WebhookEndpoint {
            id: id::<gateway_core::WebhookId>(&self.id)?,
            origin: self.origin()?,
            event_types: serde_json::from_str(&self.event_types)?,
            enabled: self.status == "enabled",
            consecutive_failures: u32::try_from(self.consecutive_failures).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            disabled_at: self.disabled_at.map(ts),
            url: self.url,
            secret: self.secret,
            description: self.description,
        })
    }
}

/// A fed event and its place in the feed.
pub struct FeedRow {
    pub position: i64,
    pub event: EventRow,
}

// Each row struct from the columns of its fields' names.
from_row!(AgentRow { id, version, spec, created_at, updated_at, archived_at });
from_row!(EnvironmentRow { id, spec, created_at, updated_at, archived_at });
from_row!(SessionRow {
    id,
    environment_id,
    snapshot,
    title,
    metadata,
    status,
    pending,
    env_state,
    env_host,
    connection,
    last_seq,
    created_at,
    updated_at,
    archived_at
});
from_row!(EventRow { session_id, seq, id, payload, created_at, run_id, epoch });
from_row!(RunRow {
    id,
    session_id,
    state,
    backend,
    provider,
    lease_owner,
    lease_epoch,
    lease_expires_at,
    crash_count,
    attempt,
    available_at,
    cancel_requested,
    started,
    input_seq,
    traceparent,
    tracestate,
    created_at,
    updated_at
});
from_row!(RunRefRow { lease_owner, lease_epoch, state });
from_row!(GuardRow { version, archived_at, deleted_at });
from_row!(ApiKeyRow { id, name, created_at, revoked_at, environment_id });
from_row!(DocumentRow { namespace, key, body, version, created_at, updated_at, lease_owner, lease_expires_at });
from_row!(DeliveryRow { id, topic, url, headers, body, attempts });
from_row!(DeliveryStateRow { state, attempts });
from_row!(WorkItemRow {
    id,
    environment_id,
    session_id,
    state,
    metadata,
    created_at,
    acknowledged_at,
    started_at,
    latest_heartbeat_at,
    stop_requested_at,
    stopped_at,
    heartbeat,
    ttl_ms
});
from_row!(WebhookRow {
    id,
    origin,
    url,
    secret,
    event_types,
    description,
    status,
    consecutive_failures,
    created_at,
    disabled_at
});

impl FromRow for LockedSessionRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        Ok(Self { row: SessionRow::from_row(row)?, now_ms: row.get("now_ms")? })
    }
}

impl FromRow for ClaimCandidateRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        Ok(Self { run: RunRow::from_row(row)?, env_host: row.get("env_host")? })
    }
}

impl FromRow for FeedRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        Ok(Self { position: row.get("position")?, event: EventRow::from_row(row)? })
    }
}
