//! Where the `sessions` commands read from: the configured database (read-only use of the
//! store's queries), or a running gateway's API (`--url`). Both give the same core values, so
//! the commands and the renderer do not know which one they read.
//!
//! Following a session resumes where it left off, whichever the source: from the store by
//! sequence number (events after the last seq printed; seqs have no gaps), from the API by
//! event id (the stream replays the events after the last id printed, `Last-Event-ID`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::{Stream, StreamExt};
use gateway_core::event::{Event, EventPayload};
use gateway_core::session::{SessionStatus, SessionSummary};
use gateway_core::{AgentId, EventId, SessionId, Timestamp};
use gateway_managed_agents::client::{Client, ClientError, RemoteEvent};
use gateway_store::{AgentFilter, EventFilter, Order, PageRequest, SessionFilter, Store};

/// How often a follower reading the store asks for new events.
const POLL: Duration = Duration::from_millis(200);
/// Events read from the store per poll.
const BATCH: u32 = 500;

/// A committed event as the commands print it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: EventId,
    /// The event's place in its session (known when read from the store).
    pub seq: Option<u64>,
    pub at: Timestamp,
    pub payload: EventPayload,
}

impl From<Event> for Seen {
    fn from(e: Event) -> Self {
        Self { id: e.id, seq: Some(e.seq), at: e.created_at, payload: e.payload }
    }
}

impl From<RemoteEvent> for Seen {
    fn from(e: RemoteEvent) -> Self {
        Self { id: e.id, seq: None, at: e.at, payload: e.payload }
    }
}

/// Where following resumes: after the last event printed.
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    pub seq: u64,
    pub id: Option<EventId>,
}

impl Cursor {
    pub fn advance(&mut self, e: &Seen) {
        if let Some(seq) = e.seq {
            self.seq = seq;
        }
        self.id = Some(e.id.clone());
    }
}

pub enum Source {
    Store(Arc<dyn Store>),
    Remote(Client),
}

impl Source {
    pub async fn close(&self) {
        if let Source::Store(store) = self {
            store.close().await;
        }
    }

    /// The newest sessions first, at most `limit`, of these statuses (any if empty) and this
    /// agent (an agent id, or a name matched exactly).
    pub async fn list(
        &self,
        statuses: &[SessionStatus],
        agent: Option<&str>,
        limit: u32,
    ) -> anyhow::Result<Vec<SessionSummary>> {
        // An agent named rather than given by id: the sessions of every agent of that name.
        let agents: Vec<Option<AgentId>> = match agent {
            None => vec![None],
            Some(a) => match AgentId::parse(a) {
                Ok(id) => vec![Some(id)],
                Err(_) => self.agents_named(a).await?.into_iter().map(Some).collect(),
            },
        };
        let mut sessions = Vec::new();
        for agent_id in agents {
            sessions.extend(match self {
                Source::Store(store) => {
                    let filter = SessionFilter { agent_id, statuses: statuses.to_vec(), ..Default::default() };
                    let page = store.list_sessions(&filter, &PageRequest::first(limit, Order::Desc)).await?;
                    page.items.iter().map(SessionSummary::from).collect::<Vec<_>>()
                }
                Source::Remote(client) => {
                    client.list_sessions(statuses, agent_id.as_ref().map(|a| a.as_str()), limit).await?
                }
            });
        }
        sessions.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        sessions.truncate(limit as usize);
        Ok(sessions)
    }

    /// The ids of the agents called `name` (usually one; names are not unique).
    async fn agents_named(&self, name: &str) -> anyhow::Result<Vec<AgentId>> {
        match self {
            Source::Store(store) => {
                let filter = AgentFilter { include_archived: true, ..Default::default() };
                let mut page = PageRequest::first(100, Order::Desc);
                let mut ids = Vec::new();
                loop {
                    let got = store.list_agents(&filter, &page).await?;
                    ids.extend(got.items.into_iter().filter(|a| a.spec.name == name).map(|a| a.id));
                    match got.next {
                        Some(next) => page.cursor = Some(next),
                        None => return Ok(ids),
                    }
                }
            }
            Source::Remote(client) => {
                Ok(client.agent_ids_named(name).await?.iter().filter_map(|id| AgentId::parse(id).ok()).collect())
            }
        }
    }

    pub async fn summary(&self, id: &SessionId) -> anyhow::Result<SessionSummary> {
        Ok(match self {
            Source::Store(store) => SessionSummary::from(&store.get_session(id).await?),
            Source::Remote(client) => client.session(id).await?,
        })
    }

    /// Releases the environment of a session whose host is gone (not seen within
    /// `host_ttl`, the database's rule; a gateway applies its own); the session as it is then.
    pub async fn release_environment(&self, id: &SessionId, host_ttl: Duration) -> anyhow::Result<SessionSummary> {
        Ok(match self {
            Source::Store(store) => {
                gateway_runtime::environment::release_lost(store.as_ref(), id, host_ttl).await?;
                SessionSummary::from(&store.get_session(id).await?)
            }
            Source::Remote(client) => client.release_environment(id).await?,
        })
    }

    /// The session's last `limit` events (at least one is read, to know where following
    /// starts), oldest first.
    pub async fn recent(&self, id: &SessionId, limit: u32) -> anyhow::Result<Vec<Seen>> {
        let limit = limit.clamp(1, 1000);
        Ok(match self {
            Source::Store(store) => {
                let page =
                    store.list_events(id, &EventFilter::default(), &PageRequest::first(limit, Order::Desc)).await?;
                page.items.into_iter().rev().map(Seen::from).collect()
            }
            Source::Remote(client) => client.recent_events(id, limit).await?.into_iter().map(Seen::from).collect(),
        })
    }

    /// The session's events after `cursor`, as they are committed, until the source fails.
    /// A store is polled; an API stream is opened once (the caller reconnects).
    pub async fn follow(
        &self,
        id: &SessionId,
        cursor: &Cursor,
    ) -> anyhow::Result<std::pin::Pin<Box<dyn Stream<Item = anyhow::Result<Seen>> + Send>>> {
        match self {
            Source::Store(store) => {
                let (store, id, after) = (Arc::clone(store), id.clone(), cursor.seq);
                let batches =
                    futures::stream::unfold((store, id, after, true), |(store, id, after, first)| async move {
                        if !first {
                            tokio::time::sleep(POLL).await;
                        }
                        let batch = store.events_after(&id, after, BATCH).await.context("reading the event log");
                        let next = match &batch {
                            Ok(events) => events.last().map_or(after, |e| e.seq),
                            Err(_) => after,
                        };
                        Some((batch, (store, id, next, false)))
                    });
                Ok(Box::pin(batches.flat_map(|batch| {
                    let items: Vec<anyhow::Result<Seen>> = match batch {
                        Ok(events) => events.into_iter().map(|e| Ok(Seen::from(e))).collect(),
                        Err(e) => vec![Err(e)],
                    };
                    futures::stream::iter(items)
                })))
            }
            Source::Remote(client) => {
                // Nothing seen yet: whatever the log holds now is new, then the stream after it.
                let (before, after) = match &cursor.id {
                    Some(id) => (Vec::new(), Some(id.clone())),
                    None => {
                        let all = client.recent_events(id, 1000).await?;
                        let last = all.last().map(|e| e.id.clone());
                        (all, last)
                    }
                };
                let stream = client.stream(id, after.as_ref()).await?;
                let before = futures::stream::iter(before.into_iter().map(|e| Ok(Seen::from(e))));
                Ok(Box::pin(before.chain(stream.map(|e| e.map(Seen::from).map_err(anyhow::Error::from)))))
            }
        }
    }
}

/// Whether an error of a follower is worth reconnecting after (a broken connection, an
/// unavailable database) rather than the end (a session that does not exist, a refused key).
pub fn transient(e: &anyhow::Error) -> bool {
    if let Some(c) = e.downcast_ref::<ClientError>() {
        return c.is_transient();
    }
    match e.downcast_ref::<gateway_store::StoreError>() {
        Some(gateway_store::StoreError::Unavailable(_)) => true,
        Some(_) => false,
        None => true,
    }
}
