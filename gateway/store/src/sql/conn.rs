//! The port statements run through: one small connection trait that both engines implement,
//! with the SQL text, its arguments and its row decoding written once.
//!
//! Why not sqlx's own generic executor: sqlx runs every SQLite statement on a thread of its
//! own, a round trip of two thread wake-ups per statement (and one more per row returned),
//! and the single SQLite writer waits out every one of them while it holds the database. A
//! turn runs dozens of statements; measured on our machines that was most of its cost (ADR
//! 0014). Behind this trait SQLite statements are plain calls into the library on the
//! calling thread (`sqlite/conn.rs`). PostgreSQL statements run on tokio-postgres
//! connections (`postgres.rs`), which pipeline: a write's statements that nothing waits on go
//! out with its next statement ([`Conn::defer`], ADR 0038).
//!
//! The contract: a statement is a `&'static str` with `$1`, `$2`, ... placeholders (the same
//! text on both engines: SQLite reads `$N` as a named parameter, bound here by its number),
//! its arguments typed (a NULL keeps its type, which PostgreSQL needs), and its rows decoded
//! by column name into row structs ([`FromRow`]) or by position into tuples.

use std::borrow::Cow;
use std::future::Future;

/// A database error, reduced to what the store decides on.
#[derive(Debug)]
pub struct DbError {
    pub kind: DbErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbErrorKind {
    /// A unique or primary key constraint refused the write.
    UniqueViolation,
    /// A lock wait ran out (PostgreSQL `lock_timeout`).
    LockTimeout,
    /// The database cannot be reached or is closed; the operation may be retried.
    Unavailable,
    /// A value could not be decoded into the type asked for.
    Decode,
    /// An argument neither engine can store alike ([`Query::check_storable`]).
    Unstorable,
    Other,
}

impl DbError {
    pub fn new(kind: DbErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn decode(message: impl Into<String>) -> Self {
        Self::new(DbErrorKind::Decode, message)
    }

    pub fn is_unique_violation(&self) -> bool {
        self.kind == DbErrorKind::UniqueViolation
    }

    pub fn is_lock_timeout(&self) -> bool {
        self.kind == DbErrorKind::LockTimeout
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One argument of a statement. NULLs keep their type: PostgreSQL types every parameter.
#[derive(Debug, Clone)]
pub enum Arg<'q> {
    Int(Option<i64>),
    Bool(Option<bool>),
    Text(Option<Cow<'q, str>>),
    /// A BLOB (SQLite) or BYTEA (PostgreSQL).
    Bytes(Option<Cow<'q, [u8]>>),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}
impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}
impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(Some(v))
    }
}
impl<'q> From<&'q str> for Arg<'q> {
    fn from(v: &'q str) -> Self {
        Arg::Text(Some(Cow::Borrowed(v)))
    }
}
impl<'q> From<&'q String> for Arg<'q> {
    fn from(v: &'q String) -> Self {
        Arg::Text(Some(Cow::Borrowed(v.as_str())))
    }
}
impl From<String> for Arg<'_> {
    fn from(v: String) -> Self {
        Arg::Text(Some(Cow::Owned(v)))
    }
}
impl<'q> From<Option<&'q str>> for Arg<'q> {
    fn from(v: Option<&'q str>) -> Self {
        Arg::Text(v.map(Cow::Borrowed))
    }
}
impl From<Option<String>> for Arg<'_> {
    fn from(v: Option<String>) -> Self {
        Arg::Text(v.map(Cow::Owned))
    }
}

impl<'q> From<&'q [u8]> for Arg<'q> {
    fn from(v: &'q [u8]) -> Self {
        Arg::Bytes(Some(Cow::Borrowed(v)))
    }
}
impl From<Vec<u8>> for Arg<'_> {
    fn from(v: Vec<u8>) -> Self {
        Arg::Bytes(Some(Cow::Owned(v)))
    }
}

/// A statement and its arguments (`$1` is `args[0]`).
#[derive(Debug)]
pub struct Query<'q> {
    pub sql: &'static str,
    pub args: Vec<Arg<'q>>,
}

/// A statement whose rows decode into `R`.
pub struct QueryAs<'q, R> {
    query: Query<'q>,
    _rows: std::marker::PhantomData<fn() -> R>,
}

/// A statement run for its effect ([`Query::execute`]).
pub fn query<'q>(sql: &'static str) -> Query<'q> {
    Query { sql, args: Vec::new() }
}

/// A statement run for its rows.
pub fn query_as<'q, R: FromRow>(sql: &'static str) -> QueryAs<'q, R> {
    QueryAs { query: query(sql), _rows: std::marker::PhantomData }
}

impl<'q> Query<'q> {
    pub fn bind(mut self, arg: impl Into<Arg<'q>>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Refuses text holding U+0000 before either engine sees it: PostgreSQL cannot store it
    /// in a text column (the request failed as a database error) while SQLite kept it, so one
    /// request was answered two ways. Both engines call this first, for every statement.
    /// (JSON documents are stored as text with the character escaped, so they never hold it.)
    pub fn check_storable(&self) -> Result<(), DbError> {
        if self.args.iter().any(|a| matches!(a, Arg::Text(Some(t)) if t.contains('\0'))) {
            return Err(DbError::new(DbErrorKind::Unstorable, "text must not contain the character U+0000 (NUL)"));
        }
        Ok(())
    }

    /// Runs the statement; how many rows it changed.
    pub async fn execute<C: Conn + ?Sized>(self, conn: &mut C) -> Result<u64, DbError> {
        conn.execute(self).await
    }

    /// Runs a statement of a write for its effect alone ([`Conn::defer`]).
    pub async fn defer<C: Conn + ?Sized>(self, conn: &mut C) -> Result<(), DbError> {
        conn.defer(self).await
    }

    /// The statement with arguments of its own, to be sent later.
    pub fn into_owned(self) -> Query<'static> {
        let args = self
            .args
            .into_iter()
            .map(|a| match a {
                Arg::Int(v) => Arg::Int(v),
                Arg::Bool(v) => Arg::Bool(v),
                Arg::Text(v) => Arg::Text(v.map(|t| Cow::Owned(t.into_owned()))),
                Arg::Bytes(v) => Arg::Bytes(v.map(|b| Cow::Owned(b.into_owned()))),
            })
            .collect();
        Query { sql: self.sql, args }
    }
}

impl<'q, R: FromRow> QueryAs<'q, R> {
    pub fn bind(mut self, arg: impl Into<Arg<'q>>) -> Self {
        self.query.args.push(arg.into());
        self
    }

    pub async fn fetch_all<C: Conn + ?Sized>(self, conn: &mut C) -> Result<Vec<R>, DbError> {
        conn.fetch(self.query, usize::MAX).await
    }

    pub async fn fetch_optional<C: Conn + ?Sized>(self, conn: &mut C) -> Result<Option<R>, DbError> {
        Ok(conn.fetch(self.query, 1).await?.pop())
    }

    pub async fn fetch_one<C: Conn + ?Sized>(self, conn: &mut C) -> Result<R, DbError> {
        self.fetch_optional(conn)
            .await?
            .ok_or_else(|| DbError::new(DbErrorKind::Other, "the statement returned no row"))
    }
}

/// A connection statements run on: a pooled reader, or a write transaction's connection.
pub trait Conn: Send {
    /// Runs a statement to its end; how many rows it changed.
    fn execute<'q>(&mut self, query: Query<'q>) -> impl Future<Output = Result<u64, DbError>> + Send;
    /// Runs a statement to its end and decodes up to `limit` of its rows.
    fn fetch<'q, R: FromRow>(
        &mut self,
        query: Query<'q>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<R>, DbError>> + Send;
    /// Runs a statement of a write for its effect alone. An engine that pipelines
    /// (PostgreSQL) sends it with the write's next statement or its commit, and that one's
    /// answer carries its failure; elsewhere it runs now. So a caller defers only a statement
    /// whose outcome it does not read and whose failure it does not tell apart from another's:
    /// any failure ends the write.
    fn defer<'q>(&mut self, query: Query<'q>) -> impl Future<Output = Result<(), DbError>> + Send {
        async move { self.execute(query).await.map(drop) }
    }
}

/// A row being decoded: columns by name or by position.
pub trait Row {
    fn get<T: Value>(&self, column: &str) -> Result<T, DbError>;
    fn get_at<T: Value>(&self, index: usize) -> Result<T, DbError>;
}

/// A column type both engines decode: SQLite values by hand (`from_sqlite`), PostgreSQL
/// values by tokio-postgres's own decoder, the same for every type.
pub trait Value: Sized + for<'r> tokio_postgres::types::FromSql<'r> {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError>;
}

/// A row struct (or tuple) decoded from a result row.
pub trait FromRow: Sized + Send {
    fn from_row<R: Row>(row: &R) -> Result<Self, DbError>;
}

fn sqlite_type(value: rusqlite::types::ValueRef<'_>, want: &str) -> DbError {
    DbError::decode(format!("expected {want}, found SQLite {:?}", value.data_type()))
}

impl Value for i64 {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError> {
        match value {
            rusqlite::types::ValueRef::Integer(i) => Ok(i),
            other => Err(sqlite_type(other, "an integer")),
        }
    }
}

impl Value for bool {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError> {
        match value {
            rusqlite::types::ValueRef::Integer(i) => Ok(i != 0),
            other => Err(sqlite_type(other, "a boolean")),
        }
    }
}

impl Value for String {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError> {
        match value {
            rusqlite::types::ValueRef::Text(bytes) => {
                String::from_utf8(bytes.to_vec()).map_err(|e| DbError::decode(e.to_string()))
            }
            other => Err(sqlite_type(other, "text")),
        }
    }
}

impl Value for Vec<u8> {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError> {
        match value {
            rusqlite::types::ValueRef::Blob(bytes) => Ok(bytes.to_vec()),
            other => Err(sqlite_type(other, "a blob")),
        }
    }
}

impl<T: Value> Value for Option<T> {
    fn from_sqlite(value: rusqlite::types::ValueRef<'_>) -> Result<Self, DbError> {
        match value {
            rusqlite::types::ValueRef::Null => Ok(None),
            other => T::from_sqlite(other).map(Some),
        }
    }
}

macro_rules! tuple_from_row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Value + Send),+> FromRow for ($($t,)+) {
            fn from_row<R: Row>(row: &R) -> Result<Self, DbError> {
                Ok(($(row.get_at::<$t>($i)?,)+))
            }
        }
    };
}
tuple_from_row!(A 0);
tuple_from_row!(A 0, B 1);
tuple_from_row!(A 0, B 1, C 2);
tuple_from_row!(A 0, B 1, C 2, D 3);

/// Implements [`FromRow`] for a row struct, each field from the column of its name.
macro_rules! from_row {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl $crate::sql::conn::FromRow for $ty {
            fn from_row<R: $crate::sql::conn::Row>(row: &R) -> Result<Self, $crate::sql::conn::DbError> {
                Ok(Self { $($field: row.get(stringify!($field))?),+ })
            }
        }
    };
}
pub(crate) use from_row;
