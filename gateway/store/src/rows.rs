//! Row shapes shared by both engines, and their conversion into domain types.
//!
//! Both schemas store ids and JSON documents as TEXT and times as BIGINT milliseconds from
//! the database clock, so one set of row structs decodes either engine's rows.

use gateway_core::Timestamp;
use gateway_core::agent::Agent;
use gateway_core::environment::{ConnectionStatus, Environment};
use gateway_core::event::{Event, EventPayload, Usage};
use gateway_core::run::{Run, RunState};
use gateway_core::session::{Budget, EnvironmentState, Session, SessionStatus};

use crate::error::{Result, StoreError};
use crate::model::{Keyset, Order, Page, PageCursor, PageRequest};
use crate::sql::conn::{DbError, FromRow, Row, Value, from_row};
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
listed!(
    Agent,
    Environment,
    Session,
    crate::WorkItem,
    crate::StoredSkill,
    crate::StoredSkillVersion,
    gateway_core::vault::Vault,
    gateway_core::vault::Credential
);

impl Listed for crate::StoredFile {
    fn keyset(&self) -> Keyset {
        Keyset { at: self.created_at.0, id: self.meta.id.to_string() }
    }
}

fn ts(ms: i64) -> Timestamp {
    Timestamp(ms)
}

fn id<T: std::str::FromStr>(s: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    s.parse::<T>().map_err(StoreError::corrupt)
}

/// The columns of a row, read by name into domain values: a value that does not parse (an
/// id, a state, a JSON document) is a decode error, which the store reports as a corrupt row.
struct Cols<'r, R: Row>(&'r R);

impl<R: Row> Cols<'_, R> {
    fn get<T: Value>(&self, col: &str) -> Result<T, DbError> {
        self.0.get(col)
    }

    fn parse<T: std::str::FromStr>(&self, col: &str) -> Result<T, DbError>
    where
        T::Err: std::fmt::Display,
    {
        self.get::<String>(col)?.parse().map_err(|e: T::Err| DbError::decode(e.to_string()))
    }

    fn opt_parse<T: std::str::FromStr>(&self, col: &str) -> Result<Option<T>, DbError>
    where
        T::Err: std::fmt::Display,
    {
        let text: Option<String> = self.get(col)?;
        text.map(|t| t.parse().map_err(|e: T::Err| DbError::decode(e.to_string()))).transpose()
    }

    /// A state column, `what` naming it in the error.
    fn state<T>(&self, col: &str, parse: impl Fn(&str) -> Option<T>, what: &str) -> Result<T, DbError> {
        let text: String = self.get(col)?;
        parse(&text).ok_or_else(|| DbError::decode(format!("{what} {text:?}")))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, col: &str) -> Result<T, DbError> {
        serde_json::from_str(&self.get::<String>(col)?).map_err(|e| DbError::decode(e.to_string()))
    }

    fn time(&self, col: &str) -> Result<Timestamp, DbError> {
        self.get(col).map(ts)
    }

    fn opt_time(&self, col: &str) -> Result<Option<Timestamp>, DbError> {
        Ok(self.get::<Option<i64>>(col)?.map(ts))
    }

    /// A token counter (never negative: only ever added to).
    fn tokens(&self, col: &str) -> Result<u64, DbError> {
        Ok(u64::try_from(self.get::<i64>(col)?).unwrap_or(0))
    }

    /// A count that saturates rather than fails.
    fn count(&self, col: &str) -> Result<u32, DbError> {
        Ok(u32::try_from(self.get::<i64>(col)?).unwrap_or(u32::MAX))
    }
}

/// Values decoded straight from their rows: reading them is their decoding.
macro_rules! decoded_from_row {
    ($($ty:ty),+) => {
        $(impl Decode for $ty {
            type Out = Self;
            fn decode(self) -> Result<Self> {
                Ok(self)
            }
        })+
    };
}
decoded_from_row!(Agent, Environment, Session, Event, Run, crate::ApiKey, crate::WorkItem);

impl FromRow for Agent {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        let version: i64 = c.get("version")?;
        Ok(Agent {
            id: c.parse("id")?,
            version: u32::try_from(version).map_err(|_| DbError::decode(format!("version {version} out of range")))?,
            spec: c.json("spec")?,
            created_at: c.time("created_at")?,
            updated_at: c.time("updated_at")?,
            archived_at: c.opt_time("archived_at")?,
        })
    }
}

impl FromRow for Environment {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        Ok(Environment {
            id: c.parse("id")?,
            spec: c.json("spec")?,
            created_at: c.time("created_at")?,
            updated_at: c.time("updated_at")?,
            archived_at: c.opt_time("archived_at")?,
        })
    }
}

impl FromRow for Run {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        let input_seq: Option<i64> = c.get("input_seq")?;
        let traceparent: Option<String> = c.get("traceparent")?;
        let tracestate: Option<String> = c.get("tracestate")?;
        Ok(Run {
            id: c.parse("id")?,
            session_id: c.parse("session_id")?,
            state: c.state("state", RunState::parse, "run state")?,
            backend: gateway_core::agent::BackendRef::parse(&c.get::<String>("backend")?)
                .map_err(|e| DbError::decode(e.to_string()))?,
            provider: c.get::<Option<String>>("provider")?.map(gateway_core::environment::ProviderTier),
            lease_owner: c.get("lease_owner")?,
            lease_epoch: c.get("lease_epoch")?,
            lease_expires_at: c.opt_time("lease_expires_at")?,
            crash_count: c.count("crash_count")?,
            attempt: c.count("attempt")?,
            available_at: c.time("available_at")?,
            cancel_requested: c.get("cancel_requested")?,
            started: c.get("started")?,
            input_seq: input_seq.and_then(|s| u64::try_from(s).ok()),
            trace: traceparent.map(|traceparent| gateway_core::trace::TraceContext { traceparent, tracestate }),
            created_at: c.time("created_at")?,
            updated_at: c.time("updated_at")?,
        })
    }
}

impl FromRow for crate::ApiKey {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        Ok(crate::ApiKey {
            id: c.parse("id")?,
            name: c.get("name")?,
            created_at: c.time("created_at")?,
            revoked_at: c.opt_time("revoked_at")?,
            environment_id: c.opt_parse("environment_id")?,
        })
    }
}

impl FromRow for crate::WorkItem {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        let ttl_ms: Option<i64> = c.get("ttl_ms")?;
        Ok(crate::WorkItem {
            id: c.parse("id")?,
            environment_id: c.parse("environment_id")?,
            session_id: c.parse("session_id")?,
            state: c.state("state", crate::WorkState::parse, "work state")?,
            metadata: c.json("metadata")?,
            created_at: c.time("created_at")?,
            acknowledged_at: c.opt_time("acknowledged_at")?,
            started_at: c.opt_time("started_at")?,
            latest_heartbeat_at: c.opt_time("latest_heartbeat_at")?,
            stop_requested_at: c.opt_time("stop_requested_at")?,
            stopped_at: c.opt_time("stopped_at")?,
            heartbeat: c.get("heartbeat")?,
            ttl: ttl_ms.and_then(|ms| u64::try_from(ms).ok()).map(std::time::Duration::from_millis),
        })
    }
}

/// A locked session row and the database clock, read together.
pub struct LockedSessionRow {
    pub row: Session,
    pub now_ms: i64,
    /// Whether a channel subscribed to the session (`feeds.rs`).
    pub feed_subscribed: bool,
}

impl FromRow for Session {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        let last_seq: i64 = c.get("last_seq")?;
        Ok(Session {
            id: c.parse("id")?,
            environment_id: c.parse("environment_id")?,
            snapshot: c.json("snapshot")?,
            title: c.get("title")?,
            metadata: c.json("metadata")?,
            status: c.state("status", SessionStatus::parse, "session status")?,
            pending_actions: c.json("pending")?,
            environment_state: c.state("env_state", EnvironmentState::parse, "environment state")?,
            environment_host: c.get("env_host")?,
            connection: match c.get::<Option<String>>("connection")? {
                Some(s) => Some(
                    ConnectionStatus::parse(&s).ok_or_else(|| DbError::decode(format!("connection status {s:?}")))?,
                ),
                None => None,
            },
            last_seq: u64::try_from(last_seq).map_err(|e| DbError::decode(e.to_string()))?,
            created_at: c.time("created_at")?,
            updated_at: c.time("updated_at")?,
            archived_at: c.opt_time("archived_at")?,
            usage: Usage {
                input_tokens: c.tokens("usage_input_tokens")?,
                output_tokens: c.tokens("usage_output_tokens")?,
                cache_read_input_tokens: c.tokens("usage_cache_read_tokens")?,
                cache_creation_input_tokens: c.tokens("usage_cache_write_tokens")?,
                list_cost_micros: c.tokens("usage_list_cost_micros")?,
                unpriced_requests: c.tokens("usage_unpriced_requests")?,
            },
            budget: c
                .get::<Option<i64>>("budget_max_micros")?
                .map(|m| Budget { max_list_cost_micros: u64::try_from(m).unwrap_or(0) }),
        })
    }
}

impl FromRow for Event {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let c = Cols(row);
        let seq: i64 = c.get("seq")?;
        Ok(Event {
            id: c.parse("id")?,
            session_id: c.parse("session_id")?,
            seq: u64::try_from(seq).map_err(|e| DbError::decode(e.to_string()))?,
            created_at: c.time("created_at")?,
            run_id: c.opt_parse("run_id")?,
            epoch: c.get("epoch")?,
            payload: c.json::<EventPayload>("payload")?,
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
    pub run: Run,
    pub env_host: Option<String>,
}

/// Existence and lifecycle facts used to explain a refused write.
pub struct GuardRow {
    pub version: i64,
    pub archived_at: Option<i64>,
    pub deleted_at: Option<i64>,
}

pub struct DocumentRow {
    pub namespace: String,
    pub key: String,
    pub body: String,
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

impl DocumentRow {
    pub fn into_document(self) -> Result<crate::Document> {
        Ok(crate::Document {
            namespace: self.namespace,
            key: self.key,
            body: serde_json::from_str(&self.body)?,
            version: u64::try_from(self.version).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
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
            spec: crate::NewEndpoint {
                id: id::<gateway_core::WebhookId>(&self.id)?,
                origin: self.origin()?,
                event_types: serde_json::from_str(&self.event_types)?,
                url: self.url,
                secret: self.secret,
                description: self.description,
            },
            enabled: self.status == "enabled",
            consecutive_failures: u32::try_from(self.consecutive_failures).map_err(StoreError::corrupt)?,
            created_at: ts(self.created_at),
            disabled_at: self.disabled_at.map(ts),
        })
    }
}

/// A fed event and its place in the feed.
pub struct FeedRow {
    pub position: i64,
    pub event: Event,
}

// Each row struct from the columns of its fields' names.
from_row!(RunRefRow { lease_owner, lease_epoch, state });
from_row!(GuardRow { version, archived_at, deleted_at });
from_row!(DocumentRow { namespace, key, body, version, created_at, updated_at });
from_row!(DeliveryRow { id, topic, url, headers, body, attempts });
from_row!(DeliveryStateRow { state, attempts });
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

impl LockedSessionRow {
    /// The write's clock: the database's, never before the locked row's last update (the
    /// time of a transaction this one may have waited for), so event times follow seq order.
    pub fn now(&self) -> i64 {
        self.now_ms.max(self.row.updated_at.0)
    }
}

impl FromRow for LockedSessionRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        let feed_subscribed: i64 = row.get("feed_subscribed")?;
        Ok(Self { row: Session::from_row(row)?, now_ms: row.get("now_ms")?, feed_subscribed: feed_subscribed != 0 })
    }
}

impl FromRow for ClaimCandidateRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        Ok(Self { run: Run::from_row(row)?, env_host: row.get("env_host")? })
    }
}

impl FromRow for FeedRow {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
        Ok(Self { position: row.get("position")?, event: Event::from_row(row)? })
    }
}
