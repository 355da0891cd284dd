//! The per-session event log.

use async_trait::async_trait;
use gateway_core::event::Event;
use gateway_core::{EventId, SessionId};

use super::read::time_range_args;
use super::{Engine, SqlStore, event_cols, query_as};
use crate::EventLog;
use crate::error::{Result, StoreError};
use crate::model::{EventFilter, Keyset, Page, PageRequest};
use crate::rows::{Scan, paginate};

#[async_trait]
impl<E: Engine> EventLog for SqlStore<E> {
    async fn list_events(&self, session: &SessionId, filter: &EventFilter, page: &PageRequest) -> Result<Page<Event>> {
        let scan = Scan::plan(page);
        let sql = if scan.ascending { E::LIST_EVENTS_ASC } else { E::LIST_EVENTS_DESC };
        let kinds = if filter.kinds.is_empty() {
            None
        } else {
            let names: Vec<&str> = filter.kinds.iter().map(|k| k.as_str()).collect();
            Some(serde_json::to_string(&names)?)
        };
        let events = query_as::<Event>(sql)
            .bind(session.as_str())
            .bind(kinds)
            .bind_all(time_range_args(filter.created))
            .bind(scan.bound.as_ref().map(|k| k.at))
            .bind(scan.fetch)
            .decoded(&mut *self.reader().await?)
            .await?;
        Ok(paginate(page, events, |e| Keyset { at: e.seq as i64, id: String::new() }))
    }

    async fn events_after(&self, session: &SessionId, after: u64, limit: u32) -> Result<Vec<Event>> {
        query_as::<Event>(concat!(
            "SELECT ",
            event_cols!(),
            " FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq",
            crate::sql::limit!(3)
        ))
        .bind(session.as_str())
        .bind(after as i64)
        .bind(i64::from(limit.max(1)))
        .decoded(&mut *self.reader().await?)
        .await
    }

    async fn session_tips(&self, sessions: &[SessionId]) -> Result<Vec<(SessionId, u64)>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(&sessions.iter().map(SessionId::as_str).collect::<Vec<_>>())?;
        let rows = query_as::<(String, i64)>(E::SESSION_TIPS).bind(ids).fetch_all(&mut *self.reader().await?).await?;
        rows.into_iter()
            .map(|(id, seq)| Ok((SessionId::parse(&id).map_err(StoreError::corrupt)?, seq as u64)))
            .collect()
    }

    async fn find_event(&self, session: &SessionId, id: &EventId) -> Result<Option<Event>> {
        query_as::<Event>(concat!("SELECT ", event_cols!(), " FROM events WHERE session_id = $1 AND id = $2"))
            .bind(session.as_str())
            .bind(id.as_str())
            .maybe(&mut *self.reader().await?)
            .await
    }
}

/// `$1` session, `$2` kinds (JSON array or NULL; expanded by `$in_list`), `$3..$6` created
/// gt/gte/lt/lte, `$7` seq bound (exclusive), `$8` limit.
macro_rules! list_events_sql {
    ($in_list:literal, $cmp:literal, $dir:literal) => {
        concat!(
            "SELECT ",
            $crate::sql::event_cols!(),
            " FROM events WHERE session_id = $1 \
               AND ($2 IS NULL OR kind IN ",
            $in_list,
            ") AND",
            $crate::sql::read::time_range_sql!("", 3, 4, 5, 6),
            " ($7 IS NULL OR seq ",
            $cmp,
            " $7) ORDER BY seq ",
            $dir,
            $crate::sql::limit!(8)
        )
    };
}
pub(crate) use list_events_sql;
