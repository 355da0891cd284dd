//! Statements on a SQLite connection, run where they are called.
//!
//! A statement here is a call into the SQLite library on the calling thread: prepared once per
//! connection (the statement cache), bound, stepped, its rows decoded, in microseconds and
//! without a wait. The futures of [`Conn`] are therefore ready when they are made; a task
//! that runs a statement holds its thread for as long as SQLite works on it, which for the
//! store's statements (keyed lookups and bounded scans) is far less than the thread hops
//! through which sqlx would have run them (module doc of `sql::conn`).
//!
//! Readers are connections of their own, opened read-only and pooled: WAL lets them read
//! beside the writer, and since a read never waits on anything while it holds one, a process
//! needs about as many as it has threads that run tasks. The pool opens another when every
//! connection is taken rather than wait.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Statement};

use crate::error::{Result, StoreError};
use crate::sql::conn::{Arg, Conn, DbError, DbErrorKind, FromRow, Query, Row, Value};

/// Prepared statements kept per connection: every statement of the store, with room to spare
/// (the multi-row inserts have one text per row count).
const STATEMENT_CACHE: usize = 512;
/// How long a connection waits for a lock another process holds (SQLite's own retry).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The one write connection: creates the file, puts it in WAL mode with
    /// `synchronous=FULL` (a commit is on disk before a client hears "accepted"), and leaves
    /// checkpoints to the [`Checkpointer`](super::checkpoint::Checkpointer).
    Writer,
    /// A read-only connection; leaves the journal mode to the writer.
    Reader,
    /// The checkpoint thread's connection: it writes the database file, never a row.
    Checkpointer,
}

/// Opens a connection to `path` with the store's settings for `role`.
pub(crate) fn open(path: &Path, role: Role) -> Result<Connection> {
    let flags = match role {
        Role::Writer => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Role::Checkpointer => OpenFlags::SQLITE_OPEN_READ_WRITE,
        Role::Reader => OpenFlags::SQLITE_OPEN_READ_ONLY,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let unavailable = |e: rusqlite::Error| StoreError::Unavailable(format!("cannot open {}: {e}", path.display()));
    let conn = Connection::open_with_flags(path, flags).map_err(unavailable)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(unavailable)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // `temp_store = MEMORY`: every logical write runs in a savepoint of its group commit, and
    // SQLite keeps a savepoint's undo pages (its statement journal) in a temporary *file* by
    // default: a write() per page a turn touches, a share of every commit measured in
    // profiles. The journal lives as long as its transaction, so memory bounds it well; the
    // sort b-trees of the claim query go there too.
    let pragmas = match role {
        Role::Writer => {
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 0; \
             PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;"
        }
        Role::Checkpointer => "PRAGMA synchronous = FULL;",
        Role::Reader => "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
    };
    conn.execute_batch(pragmas).map_err(unavailable)?;
    if role == Role::Writer {
        // A first read opens the WAL and its index: while this connection lives, another that
        // closes (the migration's) is never the last one, which would delete the `-wal` file.
        conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(())).map_err(unavailable)?;
    }
    Ok(conn)
}

/// Maps a SQLite error to what the store decides on.
pub(crate) fn db_error(e: rusqlite::Error) -> DbError {
    use rusqlite::ErrorCode;
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
            ErrorCode::ConstraintViolation if matches!(f.extended_code, 2067 | 1555) => DbErrorKind::UniqueViolation,
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked | ErrorCode::CannotOpen | ErrorCode::DiskFull => {
                DbErrorKind::Unavailable
            }
            _ => DbErrorKind::Other,
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::InvalidColumnName(..)
        | rusqlite::Error::Utf8Error(..) => DbErrorKind::Decode,
        _ => DbErrorKind::Other,
    };
    DbError::new(kind, e.to_string())
}

/// Binds `args` by the number in each placeholder's name: SQLite numbers `$N` parameters in
/// order of first appearance, not by `N`, and a `$N` used twice is one parameter.
fn bind(statement: &mut Statement<'_>, args: &[Arg<'_>]) -> Result<(), DbError> {
    for index in 1..=statement.parameter_count() {
        let n = statement
            .parameter_name(index)
            .and_then(|name| name.strip_prefix('$'))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| DbError::new(DbErrorKind::Other, format!("parameter {index} is not named $N")))?;
        let arg = args
            .get(n.wrapping_sub(1))
            .ok_or_else(|| DbError::new(DbErrorKind::Other, format!("no argument for ${n} ({} given)", args.len())))?;
        let bound = match arg {
            Arg::Int(v) => statement.raw_bind_parameter(index, v),
            Arg::Bool(v) => statement.raw_bind_parameter(index, v),
            Arg::Text(v) => statement.raw_bind_parameter(index, v.as_deref()),
            Arg::Bytes(v) => statement.raw_bind_parameter(index, v.as_deref()),
        };
        bound.map_err(db_error)?;
    }
    Ok(())
}

/// A SQLite result row, decoded by column name or position.
struct LiteRow<'a, 'stmt>(&'a rusqlite::Row<'stmt>);

impl Row for LiteRow<'_, '_> {
    fn get<T: Value>(&self, column: &str) -> Result<T, DbError> {
        let value = self.0.get_ref(column).map_err(db_error)?;
        T::from_sqlite(value).map_err(|e| DbError::decode(format!("column {column}: {}", e.message)))
    }

    fn get_at<T: Value>(&self, index: usize) -> Result<T, DbError> {
        let value = self.0.get_ref(index).map_err(db_error)?;
        T::from_sqlite(value).map_err(|e| DbError::decode(format!("column {index}: {}", e.message)))
    }
}

fn run_execute(conn: &Connection, query: &Query<'_>) -> Result<u64, DbError> {
    query.check_storable()?;
    let mut statement = conn.prepare_cached(query.sql).map_err(db_error)?;
    bind(&mut statement, &query.args)?;
    // Stepped to the end whether or not it returns rows (a RETURNING clause run for its effect).
    let mut rows = statement.raw_query();
    while rows.next().map_err(db_error)?.is_some() {}
    Ok(conn.changes())
}

/// Decodes up to `limit` rows. Stopping early is safe for writes: SQLite applies a statement's
/// whole change on its first step, RETURNING or not.
fn run_fetch<R: FromRow>(conn: &Connection, query: &Query<'_>, limit: usize) -> Result<Vec<R>, DbError> {
    query.check_storable()?;
    let mut statement = conn.prepare_cached(query.sql).map_err(db_error)?;
    bind(&mut statement, &query.args)?;
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while out.len() < limit {
        match rows.next().map_err(db_error)? {
            Some(row) => out.push(R::from_row(&LiteRow(row))?),
            None => break,
        }
    }
    Ok(out)
}

impl Conn for Connection {
    fn execute<'q>(&mut self, query: Query<'q>) -> impl Future<Output = Result<u64, DbError>> + Send {
        std::future::ready(run_execute(self, &query))
    }

    fn fetch<'q, R: FromRow>(
        &mut self,
        query: Query<'q>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<R>, DbError>> + Send {
        std::future::ready(run_fetch(self, &query, limit))
    }
}

/// Read-only connections, taken for one read and put back.
pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// How many idle connections are kept; ones opened beyond it under a burst are closed.
    keep: usize,
}

impl Readers {
    pub(crate) fn open(path: &Path, keep: usize) -> Result<Self> {
        let keep = keep.max(1);
        let idle = (0..keep).map(|_| open(path, Role::Reader)).collect::<Result<Vec<_>>>()?;
        Ok(Self { path: path.to_path_buf(), idle: Mutex::new(idle), keep })
    }

    pub(crate) fn take(&self) -> Result<Reader<'_>> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open(&self.path, Role::Reader)?,
        };
        Ok(Reader { conn: Some(conn), from: self })
    }

    /// Closes every idle connection (the store is closing).
    pub(crate) fn close(&self) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// A reader taken from [`Readers`]; goes back when dropped.
pub struct Reader<'a> {
    conn: Option<Connection>,
    from: &'a Readers,
}

impl Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("a reader holds its connection until dropped")
    }
}

impl DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("a reader holds its connection until dropped")
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let mut idle = self.from.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < self.from.keep {
                idle.push(conn);
            }
        }
    }
}
