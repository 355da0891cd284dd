//! The readers and one-statement writes every table shares: a row by id or NotFound, every
//! row decoded, a keyset page, and a write transaction around one statement.
//!
//! Why one home: each table used to spell these out (fetch, `ok_or_else(not_found)`, decode;
//! plan the scan, bind the bound, fetch one more than the page, paginate), so a fix to one
//! (say, how a backward page binds its bound) had to be found in seven places. Each helper
//! here is the whole of its rule; a table supplies only its SQL and its row type.

use super::conn::{Arg, Conn, FromRow, Query, QueryAs};
use super::{Engine, Hints, SqlStore};
use crate::error::{Result, StoreError};
use crate::model::{Keyset, Page, PageRequest, TimeRange};
use crate::rows::{Scan, paginate};

/// A row struct that becomes a domain value: the one conversion every reader applies to it.
pub(crate) trait Decode: FromRow {
    type Out;
    fn decode(self) -> Result<Self::Out>;
}

/// A domain value listed in `(created_at, id)` order: its place in that order.
pub(crate) trait Listed {
    fn keyset(&self) -> Keyset;
}

/// The two statements of a list paginated by `(created_at, id)`: `[ascending, descending]`.
/// `$select` is the statement up to and including its last `AND` (or `WHERE`); `$t` the
/// column qualifier (`""` or `"a."`); `$at, $id` the parameters of the exclusive bound (NULL:
/// unbounded) and `$limit` the row limit's. [`SqlStore::list_page`] binds those three last.
macro_rules! keyset_sql {
    ($select:expr, $t:literal, $at:tt, $id:tt, $limit:tt) => {
        [
            $crate::sql::read::keyset_sql!(@one $select, $t, ">", "ASC", $at, $id, $limit),
            $crate::sql::read::keyset_sql!(@one $select, $t, "<", "DESC", $at, $id, $limit),
        ]
    };
    (@one $select:expr, $t:literal, $cmp:literal, $dir:literal, $at:tt, $id:tt, $limit:tt) => {
        concat!(
            $select,
            " ($",
            stringify!($at),
            " IS NULL OR (",
            $t,
            "created_at, ",
            $t,
            "id) ",
            $cmp,
            " ($",
            stringify!($at),
            ", $",
            stringify!($id),
            ")) ORDER BY ",
            $t,
            "created_at ",
            $dir,
            ", ",
            $t,
            "id ",
            $dir,
            $crate::sql::limit!($limit)
        )
    };
}
pub(crate) use keyset_sql;

/// The filter on a creation time range: parameters `$gt..$lte` (each NULL: no bound), bound by
/// [`time_range_args`] in that order; `$t` qualifies the column. Ends in `AND`.
macro_rules! time_range_sql {
    ($t:literal, $gt:tt, $gte:tt, $lt:tt, $lte:tt) => {
        concat!(
            " ($",
            stringify!($gt),
            " IS NULL OR ",
            $t,
            "created_at > $",
            stringify!($gt),
            ")",
            " AND ($",
            stringify!($gte),
            " IS NULL OR ",
            $t,
            "created_at >= $",
            stringify!($gte),
            ")",
            " AND ($",
            stringify!($lt),
            " IS NULL OR ",
            $t,
            "created_at < $",
            stringify!($lt),
            ")",
            " AND ($",
            stringify!($lte),
            " IS NULL OR ",
            $t,
            "created_at <= $",
            stringify!($lte),
            ") AND"
        )
    };
}
pub(crate) use time_range_sql;

/// The four parameters of [`time_range_sql`], in its order.
pub(crate) fn time_range_args(c: TimeRange) -> [Arg<'static>; 4] {
    [c.gt, c.gte, c.lt, c.lte].map(|t| Arg::from(t.map(|t| t.0)))
}

impl<'q> super::conn::Query<'q> {
    /// Binds `args` in order.
    pub(crate) fn bind_all(self, args: impl IntoIterator<Item = Arg<'q>>) -> Self {
        args.into_iter().fold(self, super::conn::Query::bind)
    }
}

impl<'q, R: FromRow> QueryAs<'q, R> {
    /// Binds `args` in order.
    pub(crate) fn bind_all(self, args: impl IntoIterator<Item = Arg<'q>>) -> Self {
        args.into_iter().fold(self, QueryAs::bind)
    }
}

impl<'q, R: Decode> QueryAs<'q, R> {
    /// The row the statement selects, decoded; `NotFound(what, id)` if there is none.
    pub(crate) async fn found<C: Conn + ?Sized>(
        self,
        conn: &mut C,
        what: &'static str,
        id: impl ToString,
    ) -> Result<R::Out> {
        self.fetch_optional(conn).await?.ok_or_else(|| StoreError::not_found(what, id))?.decode()
    }

    /// The row the statement selects, decoded, if there is one.
    pub(crate) async fn maybe<C: Conn + ?Sized>(self, conn: &mut C) -> Result<Option<R::Out>> {
        self.fetch_optional(conn).await?.map(R::decode).transpose()
    }

    /// Every row the statement selects, decoded.
    pub(crate) async fn decoded<C: Conn + ?Sized>(self, conn: &mut C) -> Result<Vec<R::Out>> {
        self.fetch_all(conn).await?.into_iter().map(R::decode).collect()
    }
}

impl<E: Engine> SqlStore<E> {
    /// The row `sql` selects by its one parameter `id`, decoded, on a read connection.
    pub(crate) async fn by_id<R: Decode>(&self, sql: &'static str, what: &'static str, id: &str) -> Result<R::Out> {
        super::query_as::<R>(sql).bind(id).found(&mut *self.reader().await?, what, id).await
    }

    /// One page of a list in `(created_at, id)` order: `sql` from [`keyset_sql`], `lead` its
    /// parameters before the bound. Fetches one row more than the page to learn whether more
    /// exist; a backward page scans against the list order (see [`Scan`]).
    pub(crate) async fn list_page<R: Decode>(
        &self,
        page: &PageRequest,
        sql: [&'static str; 2],
        lead: impl IntoIterator<Item = Arg<'_>> + Send,
    ) -> Result<Page<R::Out>>
    where
        R::Out: Listed,
    {
        let scan = Scan::plan(page);
        let (bound_at, bound_id) = scan.bound_parts();
        let rows = super::query_as::<R>(if scan.ascending { sql[0] } else { sql[1] })
            .bind_all(lead)
            .bind(bound_at)
            .bind(bound_id)
            .bind(scan.fetch)
            .decoded(&mut *self.reader().await?)
            .await?;
        Ok(paginate(page, rows, R::Out::keyset))
    }

    /// One statement in a write transaction of its own, `build` given the database clock;
    /// returns that clock, the time the statement wrote.
    pub(crate) async fn write_one<'q>(&self, build: impl FnOnce(i64) -> Query<'q>) -> Result<i64> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        build(now).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(now)
    }

    /// One `UPDATE .. RETURNING` of the row `id` in a write transaction of its own, `build`
    /// given the database clock; `NotFound(what, id)` (and nothing written) if it matched no row.
    pub(crate) async fn update_one<'q>(
        &self,
        what: &'static str,
        id: &str,
        build: impl FnOnce(i64) -> QueryAs<'q, (String,)>,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        if build(now).fetch_optional(&mut *tx).await?.is_none() {
            return Err(StoreError::not_found(what, id));
        }
        self.finish(tx, Hints::default()).await
    }
}

#[cfg(test)]
mod tests {
    use crate::model::TimeRange;
    use gateway_core::Timestamp;

    #[test]
    fn keyset_statements_bound_order_and_limit_in_both_directions() {
        let [asc, desc] = super::keyset_sql!("SELECT x FROM t WHERE k = $1 AND", "t.", 2, 3, 4);
        assert_eq!(
            asc,
            "SELECT x FROM t WHERE k = $1 AND ($2 IS NULL OR (t.created_at, t.id) > ($2, $3)) \
             ORDER BY t.created_at ASC, t.id ASC LIMIT CAST($4 AS BIGINT)"
        );
        assert_eq!(
            desc,
            "SELECT x FROM t WHERE k = $1 AND ($2 IS NULL OR (t.created_at, t.id) < ($2, $3)) \
             ORDER BY t.created_at DESC, t.id DESC LIMIT CAST($4 AS BIGINT)"
        );
    }

    #[test]
    fn a_time_range_is_four_optional_bounds_in_order() {
        assert_eq!(
            super::time_range_sql!("", 5, 6, 7, 8),
            " ($5 IS NULL OR created_at > $5) AND ($6 IS NULL OR created_at >= $6) \
             AND ($7 IS NULL OR created_at < $7) AND ($8 IS NULL OR created_at <= $8) AND"
        );
        let range = TimeRange { gt: Some(Timestamp(1)), lte: Some(Timestamp(9)), ..TimeRange::default() };
        let args = super::time_range_args(range).map(|a| format!("{a:?}"));
        assert_eq!(args, ["Int(Some(1))", "Int(None)", "Int(None)", "Int(Some(9))"]);
    }
}
