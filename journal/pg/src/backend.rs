//! [`PgBackend`]: the journal's storage seam (`ctx_journal::Backend`) on PostgreSQL 15+
//! (spec/scale-out.md §3 and §4).
//!
//! Every write transaction first locks the one row of `ctx_meta` (`SELECT … FOR UPDATE`), so the
//! write transactions of every process serialize and positions are dense and in commit order.
//! Reads run in `REPEATABLE READ, READ ONLY` transactions on a small pool of their own
//! connections and never wait for a writer.
//!
//! A single append is two round trips (spec/scale-out.md §3.6): `BEGIN`, the position lock and
//! the lookups of the request's heads and event ids are pipelined; the record puts, the
//! projection writes, the new last position and `COMMIT` are pipelined. While other writers are
//! about, the commit is asynchronous — it releases the position lock before its WAL flush — and
//! a durability step joins the pipeline; nothing is answered on a commit before it is durable
//! (spec/scale-out.md §3.9).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ctx_journal::{
    Backend, CommitError, Digest, Finish, HeadDecodeError, IndexFinding, IndexKind, PutRecord,
    ReadError, ReadTxn, StorageError, StreamHead, StreamId, WriteTxn, decode_record_value,
};
use postgres::Row;
use postgres::config::Host;
use postgres::error::Severity;
use postgres::types::{FromSql, ToSql};
use tokio_postgres::Config;

use crate::conn::{Conn, ConnectError};
use crate::error::PgError;
use crate::schema::{HEAD_MISMATCH, PAGE_BYTES, PAGE_ROWS, Q, SchemaName, Sql};

/// Most idle read connections a backend keeps; more concurrent readers connect and disconnect.
const READERS_KEPT: usize = 8;
const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
/// A write transaction's first statement; the position lock (`Q::LockPosition`) follows it in the
/// same round trip.
const BEGIN_WRITE: &str = "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE";
/// Sent just before the `COMMIT` of a write transaction that put records (spec/scale-out.md §3.9).
const ASYNCHRONOUS_COMMIT: &str = "SET LOCAL synchronous_commit TO off";
const DEFAULT_SCHEMA: &str = "public";
const DEFAULT_PORT: u16 = 5432;
/// A write transaction sends its deferred projection writes once this many entries, or this
/// many bytes of keys and values, are waiting (and always before a scan and before `COMMIT`).
const PENDING_ENTRIES_MAX: usize = 1_000;
const PENDING_BYTES_MAX: usize = 8 << 20;
/// Most bytes of projection keys and values one transaction keeps to answer repeated lookups;
/// past it, lookups go to the server.
const KV_CACHE_BYTES_MAX: usize = 16 << 20;
/// A write transaction sends its queued record puts once this many records, or this many bytes
/// of records, are waiting (and always before a read of records and with `COMMIT`). 8,192 is the
/// journal's most records per group commit (spec/journal.md §9).
const PUTS_MAX: usize = 8_192;
const PUT_BYTES_MAX: usize = 8 << 20;

/// A projection entry's name: its table and key.
type KvKey = (String, Vec<u8>);

/// The bytes a cached or queued projection entry holds.
fn entry_size((table, key): &KvKey, value: Option<&[u8]>) -> usize {
    table.len() + key.len() + value.map_or(0, <[u8]>::len)
}

/// The bytes all cached or queued projection entries of `entries` hold.
fn total_size<'e>(entries: impl IntoIterator<Item = (&'e KvKey, &'e Option<Vec<u8>>)>) -> usize {
    entries
        .into_iter()
        .map(|(key, value)| entry_size(key, value.as_deref()))
        .sum()
}

/// A journal backend on one PostgreSQL database (and schema).
///
/// Connecting applies the schema's migrations; every process sharing the database may write, and
/// positions stay dense because write transactions serialize on the `ctx_meta` row.
pub struct PgBackend {
    config: Config,
    location: String,
    dbname: String,
    schema: SchemaName,
    sql: Sql,
    /// The write connection; held for the whole of a write transaction.
    writer: Mutex<Option<Conn>>,
    /// Idle read connections.
    readers: Mutex<Vec<Conn>>,
    /// Round trips to the server of every connection of this backend (connects included).
    round_trips: Arc<AtomicU64>,
    /// The last position when this backend's previous write transaction ended (its own last
    /// record, or the last position it found); `None` before its first one or after an unknown
    /// outcome. A transaction that finds another last position knows that another writer has
    /// committed since, and commits asynchronously (spec/scale-out.md §3.9).
    last_seen: Mutex<Option<u64>>,
}

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config holds the password: only the location is shown.
        f.debug_struct("PgBackend")
            .field("location", &self.location)
            .field("schema", &self.schema.name)
            .finish_non_exhaustive()
    }
}

impl PgBackend {
    /// Connects to the database named by `url` (a libpq-style `key=value` string or a
    /// `postgres://` URL), creates or upgrades the journal schema in its `public` schema, and
    /// returns the backend. TLS is not supported yet (`sslmode=require` fails to connect).
    pub fn connect(url: &str) -> Result<PgBackend, PgError> {
        PgBackend::connect_in_schema(url, DEFAULT_SCHEMA)
    }

    /// As [`PgBackend::connect`], with the journal's tables in PostgreSQL schema `schema`
    /// (created if missing), so that several journals can share one database.
    pub fn connect_in_schema(url: &str, schema: &str) -> Result<PgBackend, PgError> {
        let schema = SchemaName::new(schema)?;
        let mut config: Config = url.parse().map_err(|source| PgError::Config { source })?;
        if config.get_application_name().is_none() {
            config.application_name("ctx-journal");
        }
        let dbname = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or_default()
            .to_owned();
        let location = location_of(&config, &dbname, &schema);
        let sql = Sql::new(&schema);
        let backend = PgBackend {
            config,
            location,
            dbname,
            schema,
            sql,
            writer: Mutex::new(None),
            readers: Mutex::new(Vec::new()),
            round_trips: Arc::new(AtomicU64::new(0)),
            last_seen: Mutex::new(None),
        };
        let conn = backend.new_conn()?;
        crate::migrate::migrate(&conn, &backend.schema, &backend.location)?;
        *lock(&backend.writer) = Some(conn);
        Ok(backend)
    }

    /// The PostgreSQL schema holding the journal's tables.
    pub fn schema(&self) -> &str {
        &self.schema.name
    }

    /// True when the journal holds no records. Its answer is acted on (an import refuses a
    /// journal that is not empty), so, like a single lookup, it makes what it saw durable before
    /// answering (spec/scale-out.md §3.9).
    pub fn is_empty(&self) -> Result<bool, PgError> {
        let checking = "checking whether the journal is empty";
        let mut conn = self.reader()?;
        let (count, check) = match (
            conn.prepared(&self.sql, Q::IsEmpty),
            conn.prepared(&self.sql, Q::InFlight),
        ) {
            (Ok(count), Ok(check)) => (count, check),
            (Err(source), _) | (_, Err(source)) => return Err(self.query_error(checking, source)),
        };
        // The check runs in a later snapshot than the count, so it covers what the count saw.
        let client = conn.client();
        let (counted, checked) = conn.pipeline(futures_util::future::join(
            client.query(&count, &[]),
            client.query(&check, &[]),
        ));
        let rows = counted.map_err(|source| self.query_error(checking, source))?;
        let empty = match rows.first().map(|row| row.try_get::<_, bool>(0)) {
            Some(Ok(empty)) => empty,
            Some(Err(source)) => return Err(self.query_error(checking, source)),
            None => {
                return Err(PgError::Corrupt {
                    location: self.location.clone(),
                    reason: "checking whether the journal is empty answered no row".to_owned(),
                });
            }
        };
        let rows = checked.map_err(|source| {
            self.query_error("checking whether a commit may not be durable yet", source)
        })?;
        if self.in_flight_of(&rows)? {
            self.step_on(&mut conn).map_err(|source| {
                self.query_error("making the commits an emptiness check saw durable", source)
            })?;
        }
        self.keep_reader(conn);
        Ok(empty)
    }

    /// Round trips to the server so far, of every connection of this backend: each statement
    /// waited for, each pipeline of statements sent together, each connect. For measurements
    /// (spec/scale-out.md §3.6); the counter only grows.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn new_conn(&self) -> Result<Conn, PgError> {
        Conn::connect(&self.config, self.round_trips.clone()).map_err(|e| match e {
            ConnectError::Postgres(source) => PgError::Connect {
                location: self.location.clone(),
                source,
            },
            ConnectError::Runtime(source) => PgError::Runtime {
                location: self.location.clone(),
                source,
            },
        })
    }

    fn query_error(&self, what: &'static str, source: postgres::Error) -> PgError {
        PgError::Query {
            location: self.location.clone(),
            what,
            source,
        }
    }

    fn keep_reader(&self, conn: Conn) {
        if conn.is_closed() {
            return;
        }
        let mut kept = lock(&self.readers);
        if kept.len() < READERS_KEPT {
            kept.push(conn);
        }
    }

    /// A kept read connection that is still open, else a new one; outside any transaction.
    fn reader(&self) -> Result<Conn, PgError> {
        loop {
            let Some(conn) = lock(&self.readers).pop() else {
                break;
            };
            if !conn.is_closed() {
                return Ok(conn);
            }
        }
        self.new_conn()
    }

    /// A connection inside a new read transaction whose snapshot shows only durable commits
    /// (spec/scale-out.md §3.9): a kept connection if it still works (one that does not is
    /// dropped), else a new one.
    fn begin_read(&self) -> Result<Conn, PgError> {
        let mut begun = None;
        loop {
            let Some(conn) = lock(&self.readers).pop() else {
                break;
            };
            let mut conn = conn;
            if !conn.is_closed()
                && let Ok(in_flight) = self.begin_read_on(&mut conn)
            {
                begun = Some((conn, in_flight));
                break;
            }
        }
        let (conn, in_flight) = match begun {
            Some(begun) => begun,
            None => {
                let mut conn = self.new_conn()?;
                let in_flight = self.begin_read_on(&mut conn)?;
                (conn, in_flight)
            }
        };
        if in_flight {
            self.make_durable()?;
        }
        Ok(conn)
    }

    /// `BEGIN` and the durability check, whose statement takes the read transaction's snapshot,
    /// in one round trip; true when a commit the snapshot shows may not be durable yet.
    fn begin_read_on(&self, conn: &mut Conn) -> Result<bool, PgError> {
        let checking = "checking whether a commit may not be durable yet";
        let check = conn
            .prepared(&self.sql, Q::InFlight)
            .map_err(|source| self.query_error(checking, source))?;
        let client = conn.client();
        let (begun, checked) = conn.pipeline(futures_util::future::join(
            client.batch_execute(BEGIN_READ),
            client.query(&check, &[]),
        ));
        begun.map_err(|source| self.query_error("starting a read transaction", source))?;
        let rows = checked.map_err(|source| self.query_error(checking, source))?;
        self.in_flight_of(&rows)
    }

    /// The answer to the durability check (`Q::InFlight`).
    fn in_flight_of(&self, rows: &[Row]) -> Result<bool, PgError> {
        self.meta_value(rows, "the durability check's answer")
    }

    /// Makes every commit committed so far durable (spec/scale-out.md §3.9), on a read connection
    /// of its own: the one that asks is inside a read-only transaction.
    fn make_durable(&self) -> Result<(), PgError> {
        let mut conn = self.reader()?;
        self.step_on(&mut conn)
            .map_err(|source| self.query_error("making the commits a read sees durable", source))?;
        self.keep_reader(conn);
        Ok(())
    }

    /// The durability step (`Q::MakeDurable`) on `conn`, which must be outside any transaction:
    /// the step commits on its own.
    fn step_on(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        let step = conn.prepared(&self.sql, Q::MakeDurable)?;
        conn.execute(&step, &[]).map(drop)
    }

    /// Runs `work` in a write transaction on `conn` and ends it. `fresh`: the connection was made
    /// for this transaction (else it was kept from an earlier one, and may have died meanwhile).
    /// Returns the outcome and whether `conn` can be used again.
    fn run_write(
        &self,
        conn: &mut Conn,
        fresh: bool,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> (Result<Finish, CommitError>, bool) {
        let mut txn = Txn::write(conn, self, fresh);
        let ended = self.end_write(&mut txn, work);
        if txn.begun {
            *lock(&self.last_seen) = match &ended.0 {
                Ok(Finish::Commit) => txn.cursor.map(|next| next - 1),
                Err(CommitError::MaybeCommitted(_)) => None,
                _ => txn.began_at,
            };
        }
        ended
    }

    /// Runs `work` in `txn` and ends it, as [`PgBackend::run_write`].
    fn end_write(
        &self,
        txn: &mut Txn<'_>,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> (Result<Finish, CommitError>, bool) {
        let mut outcome = work(txn);
        // A transaction that only queued projection writes has sent nothing yet; it takes the
        // position lock like every writer (projection entries are written under it, S8).
        if matches!(outcome, Ok(Finish::Commit))
            && !txn.failed
            && !txn.begun
            && !txn.pending.is_empty()
            && let Err(e) = txn.begin(None)
        {
            outcome = Err(e);
        }
        // Nothing was sent when the transaction never began: there is nothing to end.
        let rollback =
            |txn: &mut Txn<'_>| !txn.lost && (!txn.begun || rollback(txn.conn, &self.sql));
        match outcome {
            Err(e) => (Err(CommitError::NotCommitted(e)), rollback(txn)),
            // The caller decides on what the transaction read (a conflict names a head, say), so
            // the answer waits until that is durable too; when that is not confirmed, the answer
            // is an error to retry instead.
            Ok(Finish::Abort) if txn.begun => match rollback(txn) {
                true => (Ok(Finish::Abort), true),
                false => (
                    Err(CommitError::NotCommitted(StorageError::message(format!(
                        "the write transaction at PostgreSQL {} was abandoned, but whether what \
                         it read is durable could not be confirmed",
                        self.location
                    )))),
                    false,
                ),
            },
            Ok(Finish::Abort) => (Ok(Finish::Abort), true),
            Ok(Finish::Commit) if txn.failed => (
                Err(CommitError::NotCommitted(StorageError::message(format!(
                    "a statement of this write transaction at PostgreSQL {} failed, so the \
                     server rolled the transaction back",
                    self.location
                )))),
                rollback(txn),
            ),
            Ok(Finish::Commit) if !txn.begun => (Ok(Finish::Commit), true),
            Ok(Finish::Commit) => {
                if let Some(reason) = self.injected(fail_point_before_commit()) {
                    return (
                        Err(CommitError::NotCommitted(StorageError::message(reason))),
                        rollback(txn),
                    );
                }
                match txn.commit() {
                    Ok(()) => match self.injected(fail_point_after_commit()) {
                        Some(reason) => (
                            Err(CommitError::MaybeCommitted(StorageError::message(reason))),
                            true,
                        ),
                        None => (Ok(Finish::Commit), true),
                    },
                    Err(Ended::Refused(error)) => {
                        (Err(CommitError::NotCommitted(error)), rollback(txn))
                    }
                    Err(Ended::Unknown(error)) => (Err(CommitError::MaybeCommitted(error)), false),
                }
            }
        }
    }

    /// The last committed position, from the answer to the position lock.
    fn last_of(&self, rows: &[Row]) -> Result<u64, PgError> {
        let last: i64 = self.meta_value(rows, "ctx_meta.last_position")?;
        u64::try_from(last).map_err(|_| PgError::Corrupt {
            location: self.location.clone(),
            reason: format!("ctx_meta.last_position is {last}"),
        })
    }

    /// The first column of the one row a statement on `ctx_meta` answers, named `what`.
    fn meta_value<'r, T: FromSql<'r>>(&self, rows: &'r [Row], what: &str) -> Result<T, PgError> {
        let corrupt = |reason: String| PgError::Corrupt {
            location: self.location.clone(),
            reason,
        };
        let row = rows
            .first()
            .ok_or_else(|| corrupt("ctx_meta has no row".to_owned()))?;
        row.try_get(0)
            .map_err(|e| corrupt(format!("{what} does not read: {e}")))
    }

    /// The message of a fail point that fires for this backend: one configured without an
    /// argument fires for every backend, one with an argument only for the database it names.
    fn injected(&self, point: Option<Option<String>>) -> Option<String> {
        match point? {
            None => Some(format!("injected failure at PostgreSQL {}", self.location)),
            Some(dbname) if dbname == self.dbname => {
                Some(format!("injected failure at PostgreSQL {}", self.location))
            }
            Some(_) => None,
        }
    }
}

impl Backend for PgBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    /// Nothing is cached across transactions: every write transaction reads the last position
    /// and the event ids from the database, so a retry after an unknown outcome is safe.
    fn fail_stop_on_uncertain_commit(&self) -> bool {
        false
    }

    fn read(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let mut conn = self
            .begin_read()
            .map_err(|e| ReadError::Storage(StorageError::new(e)))?;
        let mut txn = Txn::read(&mut conn, self);
        let result = work(&mut txn);
        let lost = txn.lost;
        // A read-only transaction changes nothing: COMMIT and ROLLBACK only end it. A failure to
        // end it drops the connection and does not change what was read.
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        if !lost && conn.batch_execute(end).is_ok() {
            self.keep_reader(conn);
        }
        result
    }

    /// A single lookup runs in PostgreSQL's implicit one-statement transaction: one round trip
    /// instead of three (`BEGIN`, the lookup, `COMMIT`).
    fn read_single(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let mut conn = self
            .reader()
            .map_err(|e| ReadError::Storage(StorageError::new(e)))?;
        let mut txn = Txn::read(&mut conn, self);
        // The lookup's own snapshot is not kept, so the durability check follows it in the same
        // round trip, in a later snapshot that shows at least what the lookup saw.
        txn.check_after_first = true;
        let mut result = work(&mut txn);
        let (lost, statements, in_flight) = (txn.lost, txn.statements, txn.in_flight);
        // The core's promise (Backend::read_single): more than one statement here would not share
        // a snapshot.
        assert!(
            statements <= 1,
            "a single-lookup read issued {statements} statements"
        );
        // The connection is outside any transaction again, so it makes the commits durable
        // itself (spec/scale-out.md §3.9).
        if result.is_ok()
            && in_flight
            && !lost
            && let Err(source) = self.step_on(&mut conn)
        {
            result = Err(ReadError::Storage(StorageError::new(
                self.query_error("making the commits a lookup saw durable", source),
            )));
        }
        if !lost && !conn.is_closed() {
            self.keep_reader(conn);
        }
        result
    }

    fn write(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError> {
        let mut slot = lock(&self.writer);
        // Taken out for the transaction: if `work` panics, the connection is dropped with it and
        // the server rolls the transaction back.
        let (mut conn, fresh) = match slot.take().filter(|conn| !conn.is_closed()) {
            Some(conn) => (conn, false),
            None => (
                self.new_conn()
                    .map_err(|e| CommitError::NotCommitted(StorageError::new(e)))?,
                true,
            ),
        };
        let (result, usable) = self.run_write(&mut conn, fresh, work);
        if usable && !conn.is_closed() {
            *slot = Some(conn);
        }
        result
    }
}

/// How a write transaction commits (spec/scale-out.md §3.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Commit {
    /// Records, another writer about: marked in `ctx_meta.async_position`, committed
    /// asynchronously, then the durability step.
    Asynchronous,
    /// Records, no other writer since this backend's previous transaction: a synchronous commit,
    /// visible only once durable.
    Synchronous,
    /// No records: a synchronous commit (if it wrote anything), then the durability step for
    /// what it read.
    WithoutRecords,
}

/// How a commit that was sent ended, when it did not commit.
enum Ended {
    /// Nothing was committed: the server answered the `COMMIT`, or a statement before it, with
    /// an error, or the session had ended before the commit was sent.
    Refused(StorageError),
    /// No answer, or a FATAL or PANIC one: it may have committed.
    Unknown(StorageError),
}

/// Why a statement of a transaction failed: the statement itself, or what had to be sent before
/// it (the transaction's `BEGIN` and position lock, or its queued record puts).
enum Failure {
    Pg(postgres::Error),
    Before(StorageError),
}

impl From<postgres::Error> for Failure {
    fn from(error: postgres::Error) -> Failure {
        Failure::Pg(error)
    }
}

/// A write transaction's record puts not sent yet, as the columns of `ctx_put_records`.
#[derive(Default)]
struct Puts {
    positions: Vec<i64>,
    streams: Vec<Vec<u8>>,
    revisions: Vec<i64>,
    event_ids: Vec<String>,
    records: Vec<Vec<u8>>,
    digests: Vec<Vec<u8>>,
    bytes: usize,
}

impl Puts {
    /// The parameters of `ctx_put_records` (spec/scale-out.md §3.6), in its order.
    fn params(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.positions,
            &self.streams,
            &self.revisions,
            &self.event_ids,
            &self.records,
            &self.digests,
        ]
    }

    fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// The queued projection writes as the parameters of `Q::KvFlush`: the removed tables and keys,
/// then the put tables, keys and values.
type KvParams<'p> = (
    Vec<&'p str>,
    Vec<&'p [u8]>,
    Vec<&'p str>,
    Vec<&'p [u8]>,
    Vec<&'p [u8]>,
);

fn kv_params(pending: &BTreeMap<KvKey, Option<Vec<u8>>>) -> KvParams<'_> {
    let (mut removed_tables, mut removed_keys) = (Vec::new(), Vec::new());
    let (mut tables, mut keys, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for ((table, key), value) in pending {
        match value {
            None => {
                removed_tables.push(table.as_str());
                removed_keys.push(key.as_slice());
            }
            Some(value) => {
                tables.push(table.as_str());
                keys.push(key.as_slice());
                values.push(value.as_slice());
            }
        }
    }
    (removed_tables, removed_keys, tables, keys, values)
}

/// One read or write transaction on a connection.
struct Txn<'a> {
    conn: &'a mut Conn,
    backend: &'a PgBackend,
    /// Write transactions: the position of the next record, once the transaction has begun.
    cursor: Option<u64>,
    /// The transaction has begun on the server. A write transaction begins with its first
    /// statement (usually the core's prefetch, in the same round trip); a read one before `work`.
    begun: bool,
    /// The connection was made for this transaction, so a failure of its first statement is not
    /// a kept connection that died meanwhile.
    fresh: bool,
    /// A statement failed: PostgreSQL has aborted the transaction.
    failed: bool,
    /// A statement failed without an answer from the server: the connection is unusable.
    lost: bool,
    /// Stream heads read or written by this transaction, so the core's second look at a head
    /// costs no round trip. A read transaction sees one snapshot, and no other writer can move a
    /// head while a write transaction holds the position lock, so they stay true until it ends.
    heads: HashMap<StreamId, Option<StreamHead>>,
    /// Event ids looked up by [`WriteTxn::prefetch`] or put by this transaction, with their
    /// positions; true for the same reason as `heads`.
    events: HashMap<String, Option<u64>>,
    /// Projection entries this transaction read or sent (`None`: absent), up to
    /// [`KV_CACHE_BYTES_MAX`]; true for the same reason as `heads`, because only write
    /// transactions write projection entries and they hold the position lock.
    kv: HashMap<KvKey, Option<Vec<u8>>>,
    kv_bytes: usize,
    /// Write transactions: projection writes not sent yet (`None`: a removal). A projection hook
    /// writes a handful of entries per record; sending them together before `COMMIT` saves a
    /// round trip each.
    pending: BTreeMap<KvKey, Option<Vec<u8>>>,
    pending_bytes: usize,
    /// Write transactions: record puts not sent yet; they go with `COMMIT`, or before a
    /// statement that reads records.
    puts: Puts,
    /// Statements sent, for the one-statement promise of [`Backend::read_single`].
    statements: u32,
    /// A single lookup ([`Backend::read_single`]): its first statement is followed by the
    /// durability check in the same round trip (spec/scale-out.md §3.9).
    check_after_first: bool,
    /// The durability check found a commit that may not be durable yet.
    in_flight: bool,
    /// Write transactions: records were put.
    records_put: bool,
    /// Write transactions: the last position the position lock found.
    began_at: Option<u64>,
    /// Write transactions: another writer has committed since this backend's previous write
    /// transaction, so this one, if it puts records, commits asynchronously (spec/scale-out.md
    /// §3.9).
    others_wrote: bool,
}

impl<'a> Txn<'a> {
    /// A transaction on `conn`, which is already inside `BEGIN` (or runs one statement alone).
    fn read(conn: &'a mut Conn, backend: &'a PgBackend) -> Txn<'a> {
        Txn::new(conn, backend, true, false)
    }

    /// A write transaction on `conn`, not begun yet.
    fn write(conn: &'a mut Conn, backend: &'a PgBackend, fresh: bool) -> Txn<'a> {
        Txn::new(conn, backend, false, fresh)
    }

    fn new(conn: &'a mut Conn, backend: &'a PgBackend, begun: bool, fresh: bool) -> Txn<'a> {
        Txn {
            conn,
            backend,
            cursor: None,
            begun,
            fresh,
            failed: false,
            lost: false,
            heads: HashMap::new(),
            events: HashMap::new(),
            kv: HashMap::new(),
            kv_bytes: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            puts: Puts::default(),
            statements: 0,
            check_after_first: false,
            in_flight: false,
            records_put: false,
            began_at: None,
            others_wrote: false,
        }
    }

    /// Begins the write transaction and takes the position lock (spec/scale-out.md §3.4), with
    /// `lookups` (the core's prefetch: event ids and stream keys) in the same round trip; returns
    /// the lookups' rows. The lookups run after the lock is granted, and under `READ COMMITTED`
    /// each statement takes a new snapshot, so they see every earlier commit. A kept connection
    /// whose session ended meanwhile (an idle timeout, a server restart, pg_terminate_backend)
    /// reports that on this first statement, as an I/O error or a FATAL answer; nothing had been
    /// done on it, so a new connection takes its place, once.
    fn begin(&mut self, lookups: Option<(&[&str], &[&[u8]])>) -> Result<Vec<Row>, StorageError> {
        loop {
            match self.try_begin(lookups) {
                Ok((last, rows)) => {
                    self.begun = true;
                    self.cursor = Some(last + 1);
                    self.began_at = Some(last);
                    self.others_wrote =
                        lock(&self.backend.last_seen).is_some_and(|mine| mine != last);
                    return Ok(rows);
                }
                Err(Failure::Pg(source)) if !self.fresh && !answered(&source) => {
                    *self.conn = self.backend.new_conn().map_err(StorageError::new)?;
                    self.fresh = true;
                }
                Err(failure) => {
                    self.begun = true;
                    self.failed = true;
                    if self.conn.is_closed() || matches!(&failure, Failure::Pg(e) if !answered(e)) {
                        self.lost = true;
                    }
                    return Err(self.storage("starting a write transaction", failure));
                }
            }
        }
    }

    /// One attempt of [`Txn::begin`]: the last committed position and the lookups' rows.
    fn try_begin(
        &mut self,
        lookups: Option<(&[&str], &[&[u8]])>,
    ) -> Result<(u64, Vec<Row>), Failure> {
        let lock = self.conn.prepared(&self.backend.sql, Q::LockPosition)?;
        let statement = match lookups {
            Some(_) => Some(self.conn.prepared(&self.backend.sql, Q::Prefetch)?),
            None => None,
        };
        let client = self.conn.client();
        let begin = client.batch_execute(BEGIN_WRITE);
        let locked = client.query(&lock, &[]);
        let (begun, locked, rows) = match (&statement, lookups) {
            (Some(statement), Some((ids, keys))) => {
                let params: [&(dyn ToSql + Sync); 2] = [&ids, &keys];
                let lookup = client.query(statement, &params);
                self.statements += 3;
                self.conn
                    .pipeline(futures_util::future::join3(begin, locked, lookup))
            }
            _ => {
                self.statements += 2;
                let (begun, locked) = self
                    .conn
                    .pipeline(futures_util::future::join(begin, locked));
                (begun, locked, Ok(Vec::new()))
            }
        };
        begun?;
        let last = self
            .backend
            .last_of(&locked?)
            .map_err(|e| Failure::Before(StorageError::new(e)))?;
        Ok((last, rows?))
    }

    /// Caches the rows of a prefetch (`Q::Prefetch`): event ids with their positions, stream
    /// heads.
    fn absorb_prefetch(&mut self, rows: &[Row]) -> Result<(), ReadError> {
        for row in rows {
            let kind: i32 = column(row, 0, "a prefetch row")?;
            if kind == 0 {
                let id: String = column(row, 1, "a prefetched event id")?;
                let raw: Option<i64> = column(row, 2, "a prefetched position")?;
                let position = match raw {
                    None => None,
                    Some(raw) => Some(counter(raw).ok_or_else(|| ReadError::Corrupt {
                        position: 0,
                        reason: format!("the record of event {id} has position {raw}"),
                    })?),
                };
                self.events.insert(id, position);
            } else {
                let key: Vec<u8> = column(row, 3, "a prefetched stream")?;
                let stream = <[u8; 32]>::try_from(key.as_slice())
                    .map(StreamId::from_bytes)
                    .map_err(|_| ReadError::Corrupt {
                        position: 0,
                        reason: format!("a prefetched stream id is {} bytes long", key.len()),
                    })?;
                let revision: Option<i64> = column(row, 4, "a prefetched head")?;
                let head = match revision {
                    None => None,
                    Some(_) => Some(head_of_row(row, 4).map_err(|reason| ReadError::Corrupt {
                        position: 0,
                        reason: format!("the head of stream {stream}: {reason}"),
                    })?),
                };
                self.heads.entry(stream).or_insert(head);
            }
        }
        Ok(())
    }

    /// Remembers a projection entry's value as the server has it, while the cache has room.
    fn remember(&mut self, key: KvKey, value: Option<Vec<u8>>) {
        self.forget(&key);
        let size = entry_size(&key, value.as_deref());
        if self.kv_bytes + size <= KV_CACHE_BYTES_MAX {
            self.kv_bytes += size;
            self.kv.insert(key, value);
        }
    }

    /// Drops a projection entry from the cache.
    fn forget(&mut self, key: &KvKey) {
        if let Some(old) = self.kv.remove(key) {
            self.kv_bytes -= entry_size(key, old.as_deref());
        }
    }

    /// Queues a projection write (superseding what the cache knows); sends the queue when it is
    /// full.
    fn defer(&mut self, key: KvKey, value: Option<Vec<u8>>) -> Result<(), StorageError> {
        self.forget(&key);
        self.pending_bytes += entry_size(&key, value.as_deref());
        if let Some(old) = self.pending.insert(key.clone(), value) {
            self.pending_bytes -= entry_size(&key, old.as_deref());
        }
        if self.pending.len() >= PENDING_ENTRIES_MAX || self.pending_bytes >= PENDING_BYTES_MAX {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends the queued projection writes in one statement.
    fn flush(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let (removed_tables, removed_keys, tables, keys, values) = kv_params(&pending);
        self.execute(
            Q::KvFlush,
            &[&removed_tables, &removed_keys, &tables, &keys, &values],
        )
        .map_err(|e| self.storage("writing projection entries", e))?;
        for (key, value) in pending {
            self.remember(key, value);
        }
        Ok(())
    }

    /// Sends the queued record puts in one statement.
    fn send_puts(&mut self) -> Result<(), StorageError> {
        if self.puts.is_empty() {
            return Ok(());
        }
        let puts = std::mem::take(&mut self.puts);
        let result = self
            .conn
            .prepared(&self.backend.sql, Q::PutRecords)
            .and_then(|statement| self.conn.query(&statement, &puts.params()));
        self.note(result).map(drop).map_err(|e| self.put_error(e))
    }

    /// A failure of `ctx_put_records`: the head compare names the core's and the storage's
    /// disagreement; anything else (a unique violation) is the statement's error.
    fn put_error(&self, source: postgres::Error) -> StorageError {
        match source.as_db_error() {
            Some(db) if db.code().code() == HEAD_MISMATCH => StorageError::message(format!(
                "at PostgreSQL {}: {}: the journal's core and its storage disagree, which is \
                 corruption or a bug",
                self.backend.location,
                db.message()
            )),
            _ => self.storage("storing records", Failure::Pg(source)),
        }
    }

    /// Sends the queued record puts (which move the last position too) and projection writes,
    /// and `COMMIT`, in one round trip. An ERROR in the puts or writes aborts the transaction,
    /// and the `COMMIT` behind it can then only roll back (PostgreSQL answers such a `COMMIT`
    /// with `ROLLBACK` and no error, so every earlier answer is checked first).
    fn commit(&mut self) -> Result<(), Ended> {
        let puts = std::mem::take(&mut self.puts);
        let pending = std::mem::take(&mut self.pending);
        // How the transaction commits (spec/scale-out.md §3.9). With records, while another
        // writer has committed since this backend's previous transaction: asynchronously, so the
        // position lock is released before the WAL flush, and the durability step behind it
        // waits for that flush, which concurrent writers share. With records and no other writer
        // about: synchronously, as a lone writer gains nothing from releasing the lock early and
        // would pay for a second transaction. Without records (projection writes alone):
        // synchronously, then the step, for what it read.
        let skip_durable = self.backend.injected(fail_point_skip_durable());
        let mode = match (
            self.records_put,
            self.others_wrote || skip_durable.is_some(),
        ) {
            (true, true) => Commit::Asynchronous,
            (true, false) => Commit::Synchronous,
            (false, _) => Commit::WithoutRecords,
        };
        let statements = (|| -> Result<_, postgres::Error> {
            let put = match puts.is_empty() {
                true => None,
                false => Some(self.conn.prepared(&self.backend.sql, Q::PutRecords)?),
            };
            let flush = match pending.is_empty() {
                true => None,
                false => Some(self.conn.prepared(&self.backend.sql, Q::KvFlush)?),
            };
            let step = self.conn.prepared(&self.backend.sql, Q::MakeDurable)?;
            let mark = match mode {
                Commit::Asynchronous => {
                    Some(self.conn.prepared(&self.backend.sql, Q::MarkAsynchronous)?)
                }
                _ => None,
            };
            Ok((put, flush, step, mark))
        })();
        let (put, flush, step, mark) = match statements {
            Ok(statements) => statements,
            Err(source) => {
                // Preparing sends nothing of the transaction; the connection decides what next.
                if !answered(&source) || self.conn.is_closed() {
                    self.lost = true;
                }
                return Err(Ended::Refused(
                    self.storage("preparing the commit's statements", Failure::Pg(source)),
                ));
            }
        };
        // A session that ended while this transaction was idle (it was terminated, the server
        // went down) has committed nothing: said so now, nothing of the commit is sent.
        self.conn.settle();
        if self.conn.is_closed() {
            self.lost = true;
            return Err(Ended::Refused(StorageError::message(format!(
                "the connection to PostgreSQL {} closed during the write transaction, before its \
                 commit was sent",
                self.backend.location
            ))));
        }
        let (removed_tables, removed_keys, tables, keys, values) = kv_params(&pending);
        let put_params = puts.params();
        let flush_params: [&(dyn ToSql + Sync); 5] =
            [&removed_tables, &removed_keys, &tables, &keys, &values];
        let client = self.conn.client();
        let put_future = async {
            match &put {
                Some(statement) => Some(client.query(statement, &put_params).await),
                None => None,
            }
        };
        let flush_future = async {
            match &flush {
                Some(statement) => Some(client.execute(statement, &flush_params).await),
                None => None,
            }
        };
        // Both statements are polled at once, so both are sent in this round trip.
        let pre_commit_future = async {
            match &mark {
                Some(mark) => {
                    let (marked, set) = futures_util::future::join(
                        client.execute(mark, &[]),
                        client.batch_execute(ASYNCHRONOUS_COMMIT),
                    )
                    .await;
                    Some(marked.map(drop).and(set))
                }
                None => None,
            }
        };
        let commit_future = client.batch_execute("COMMIT");
        let stepped = mode != Commit::Synchronous && skip_durable.is_none();
        let durable_future = async {
            match stepped {
                true => Some(client.execute(&step, &[]).await),
                false => None,
            }
        };
        let (put_result, flush_result, pre_commit_result, commit_result, durable_result) =
            self.conn.pipeline(futures_util::future::join5(
                put_future,
                flush_future,
                pre_commit_future,
                commit_future,
                durable_future,
            ));
        self.statements += 1
            + u32::from(put.is_some())
            + u32::from(flush.is_some())
            + 2 * u32::from(mark.is_some())
            + u32::from(stepped);
        // Any answer from the server to a statement before COMMIT that is an error (an ERROR, or
        // a FATAL that ended the session) means the server never committed: it runs the
        // pipeline in order and stops the transaction, or the session, at the error.
        let before_commit = [
            (put_result.and_then(Result::err), None),
            (
                flush_result.and_then(Result::err),
                Some("writing projection entries"),
            ),
            (
                pre_commit_result.and_then(Result::err),
                Some("marking an asynchronous commit"),
            ),
        ];
        for (source, what) in before_commit {
            let Some(source) = source.filter(|e| e.as_db_error().is_some()) else {
                continue;
            };
            if !answered(&source) {
                self.lost = true;
            }
            return Err(Ended::Refused(match what {
                None => self.put_error(source),
                Some(what) => self.storage(what, Failure::Pg(source)),
            }));
        }
        match commit_result {
            // Committed and visible; the answer says so only once it is durable too.
            Ok(()) => match (durable_result, skip_durable) {
                (Some(Ok(_)), _) => Ok(()),
                (None, None) => Ok(()),
                (Some(Err(source)), _) => {
                    if !answered(&source) || self.conn.is_closed() {
                        self.lost = true;
                    }
                    Err(Ended::Unknown(self.storage(
                        "confirming that a commit is durable",
                        Failure::Pg(source),
                    )))
                }
                (None, Some(reason)) => {
                    self.lost = true;
                    Err(Ended::Unknown(StorageError::message(format!(
                        "{reason}: the commit's durability step was not sent"
                    ))))
                }
            },
            Err(source) => {
                // An ERROR answer ends the transaction without committing it (a failure after
                // the commit record is a PANIC in PostgreSQL). No answer, or a FATAL or PANIC
                // one, leaves the outcome unknown.
                let refused = answered(&source);
                let error = self.storage("committing a write transaction", Failure::Pg(source));
                if refused {
                    Err(Ended::Refused(error))
                } else {
                    self.lost = true;
                    Err(Ended::Unknown(error))
                }
            }
        }
    }

    /// What must be sent before statement `q`: a write transaction's `BEGIN` and position lock,
    /// and its queued record puts before a statement that reads records (S3: reads see the
    /// transaction's own puts).
    fn ready(&mut self, q: Q) -> Result<(), Failure> {
        if !self.begun {
            self.begin(None).map_err(Failure::Before)?;
        }
        let reads_records = !matches!(
            q,
            Q::KvGet
                | Q::KvScanFirst
                | Q::KvScanAfter
                | Q::KvRemove
                | Q::KvClear
                | Q::KvFlush
                | Q::Prefetch
                | Q::PutRecords
        );
        if reads_records {
            self.send_puts().map_err(Failure::Before)?;
        }
        Ok(())
    }

    fn query(&mut self, q: Q, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Failure> {
        self.ready(q)?;
        let statement = self.conn.prepared(&self.backend.sql, q);
        let check = match self.check_after_first {
            true => Some(self.conn.prepared(&self.backend.sql, Q::InFlight)),
            false => None,
        };
        let result = match (statement, check) {
            (Ok(statement), Some(Ok(check))) => {
                self.check_after_first = false;
                let client = self.conn.client();
                let (rows, checked) = self.conn.pipeline(futures_util::future::join(
                    client.query(&statement, params),
                    client.query(&check, &[]),
                ));
                match checked {
                    Ok(answer) if rows.is_ok() => {
                        self.in_flight = self
                            .backend
                            .in_flight_of(&answer)
                            .map_err(|e| Failure::Before(StorageError::new(e)))?;
                        rows
                    }
                    Ok(_) => rows,
                    Err(source) => rows.and(Err(source)),
                }
            }
            (Ok(statement), None) => self.conn.query(&statement, params),
            (Err(source), _) | (_, Some(Err(source))) => Err(source),
        };
        Ok(self.note(result)?)
    }

    fn execute(&mut self, q: Q, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Failure> {
        self.ready(q)?;
        let result = self
            .conn
            .prepared(&self.backend.sql, q)
            .and_then(|statement| self.conn.execute(&statement, params));
        Ok(self.note(result)?)
    }

    fn note<T>(&mut self, result: Result<T, postgres::Error>) -> Result<T, postgres::Error> {
        self.statements += 1;
        if let Err(e) = &result {
            self.failed = true;
            if !answered(e) || self.conn.is_closed() {
                self.lost = true;
            }
        }
        result
    }

    fn storage(&self, what: &'static str, failure: impl Into<Failure>) -> StorageError {
        match failure.into() {
            Failure::Pg(source) => StorageError::new(self.backend.query_error(what, source)),
            Failure::Before(error) => error,
        }
    }

    fn read_error(&self, what: &'static str, failure: impl Into<Failure>) -> ReadError {
        ReadError::Storage(self.storage(what, failure))
    }
}

/// A column's value, or a corruption error naming the column.
fn column<'r, T: FromSql<'r>>(row: &'r Row, index: usize, what: &str) -> Result<T, ReadError> {
    row.try_get(index).map_err(|e| ReadError::Corrupt {
        position: 0,
        reason: format!("{what}: column {index} does not read: {e}"),
    })
}

/// A stored position or revision: at least 1 (positions and revisions are below 2^63 because
/// they are bigint).
fn counter(value: i64) -> Option<u64> {
    u64::try_from(value).ok().filter(|v| *v >= 1)
}

/// Why a stored stream head (revision, position, digest) does not decode.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("revision {0} is not a revision")]
    Revision(i64),
    #[error("position {0} is not a position")]
    Position(i64),
    #[error("the digest is {0} bytes long, not 32")]
    DigestLength(usize),
    /// A head column does not read.
    #[error("{0}")]
    Column(#[from] postgres::Error),
}

fn decode_head(revision: i64, position: i64, digest: &[u8]) -> Result<StreamHead, HeadError> {
    let revision = counter(revision).ok_or(HeadError::Revision(revision))?;
    let position = counter(position).ok_or(HeadError::Position(position))?;
    let digest: [u8; 32] = digest
        .try_into()
        .map_err(|_| HeadError::DigestLength(digest.len()))?;
    Ok(StreamHead {
        revision,
        position,
        digest: Digest::from_bytes(digest),
    })
}

fn head_of_row(row: &Row, offset: usize) -> Result<StreamHead, HeadError> {
    let revision: i64 = row.try_get(offset)?;
    let position: i64 = row.try_get(offset + 1)?;
    let digest: &[u8] = row.try_get(offset + 2)?;
    decode_head(revision, position, digest)
}

impl ReadTxn for Txn<'_> {
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        if let Some(head) = self.heads.get(stream) {
            return Ok(*head);
        }
        let key: &[u8] = stream.as_bytes();
        let rows = self
            .query(Q::Head, &[&key])
            .map_err(|e| self.read_error("reading a stream head", e))?;
        let head = match rows.first() {
            None => None,
            Some(row) => Some(head_of_row(row, 0).map_err(|reason| ReadError::Corrupt {
                position: 0,
                reason: format!("the head of stream {stream}: {reason}"),
            })?),
        };
        self.heads.insert(*stream, head);
        Ok(head)
    }

    fn last_position(&mut self) -> Result<u64, ReadError> {
        if let Some(next) = self.cursor {
            return Ok(next - 1);
        }
        let rows = self
            .query(Q::LastPosition, &[])
            .map_err(|e| self.read_error("reading the last position", e))?;
        let Some(row) = rows.first() else {
            return Err(ReadError::Corrupt {
                position: 0,
                reason: "ctx_meta has no row".to_owned(),
            });
        };
        let last: i64 = column(row, 0, "ctx_meta")?;
        u64::try_from(last).map_err(|_| ReadError::Corrupt {
            position: 0,
            reason: format!("ctx_meta.last_position is {last}"),
        })
    }

    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        if from > to {
            return Ok(());
        }
        let missing = |revision: u64| ReadError::Corrupt {
            position: 0,
            reason: format!("stream {stream} has no record at revision {revision}"),
        };
        let key: &[u8] = stream.as_bytes();
        let last = i64::try_from(to).unwrap_or(i64::MAX);
        let mut expected = from;
        loop {
            let Ok(first) = i64::try_from(expected) else {
                return Err(missing(expected));
            };
            let rows = self
                .query(
                    Q::StreamPage,
                    &[&key, &first, &last, &PAGE_ROWS, &PAGE_BYTES],
                )
                .map_err(|e| self.read_error("reading a stream's records", e))?;
            if rows.is_empty() {
                return Err(missing(expected));
            }
            for row in &rows {
                let revision: i64 = column(row, 0, "a record row")?;
                if counter(revision) != Some(expected) {
                    return Err(missing(expected));
                }
                let raw: i64 = column(row, 1, "a record row")?;
                let position = counter(raw).ok_or_else(|| ReadError::Corrupt {
                    position: 0,
                    reason: format!(
                        "the record of stream {stream} at revision {revision} has position {raw}"
                    ),
                })?;
                let bytes: &[u8] = column(row, 2, "a record row")?;
                if f(expected, position, bytes).is_break() || expected == to {
                    return Ok(());
                }
                expected += 1;
            }
        }
    }

    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError> {
        let Ok(key) = i64::try_from(position) else {
            f(None);
            return Ok(());
        };
        let rows = self
            .query(Q::Record, &[&key])
            .map_err(|e| self.read_error("reading a record", e))?;
        match rows.first() {
            Some(row) => f(Some(column(row, 0, "a record row")?)),
            None => f(None),
        }
        Ok(())
    }

    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let Ok(mut next) = i64::try_from(from) else {
            return Ok(());
        };
        loop {
            let rows = self
                .query(Q::RecordsPage, &[&next, &PAGE_ROWS, &PAGE_BYTES])
                .map_err(|e| self.read_error("reading records", e))?;
            if rows.is_empty() {
                return Ok(());
            }
            for row in &rows {
                let raw: i64 = column(row, 0, "a record row")?;
                let position = u64::try_from(raw).map_err(|_| ReadError::Corrupt {
                    position: 0,
                    reason: format!("a record row has position {raw}"),
                })?;
                let bytes: &[u8] = column(row, 1, "a record row")?;
                if f(position, bytes).is_break() {
                    return Ok(());
                }
                let Some(after) = raw.checked_add(1) else {
                    return Ok(());
                };
                next = after;
            }
        }
    }

    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let rows = match &after {
                None => self.query(Q::HeadsFirst, &[&PAGE_ROWS]),
                Some(key) => {
                    let key: &[u8] = key;
                    self.query(Q::HeadsAfter, &[&key, &PAGE_ROWS])
                }
            }
            .map_err(|e| self.read_error("reading stream heads", e))?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            for row in &rows {
                let key: &[u8] = column(row, 0, "a stream head row")?;
                f(
                    key,
                    head_of_row(row, 1).map_err(|e| HeadDecodeError::new(e.to_string())),
                );
            }
            after = Some(column::<&[u8]>(last, 0, "a stream head row")?.to_vec());
        }
    }

    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError> {
        let mut after = i64::MIN;
        loop {
            let rows = self
                .query(Q::CheckPage, &[&after, &PAGE_ROWS, &PAGE_BYTES])
                .map_err(|e| self.read_error("reading records to check the indexes", e))?;
            if rows.is_empty() {
                return Ok(());
            }
            for row in &rows {
                let raw_position: i64 = column(row, 0, "a record row")?;
                let raw_stream: &[u8] = column(row, 1, "a record row")?;
                let raw_revision: i64 = column(row, 2, "a record row")?;
                let event_id: &str = column(row, 3, "a record row")?;
                let bytes: &[u8] = column(row, 4, "a record row")?;
                check_row(
                    raw_position,
                    raw_stream,
                    raw_revision,
                    event_id,
                    bytes,
                    finding,
                );
                after = raw_position;
            }
        }
    }

    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError> {
        let name = (table.to_owned(), key.to_vec());
        if let Some(value) = self.pending.get(&name).or_else(|| self.kv.get(&name)) {
            f(value.as_deref());
            return Ok(());
        }
        let rows = self
            .query(Q::KvGet, &[&table, &key])
            .map_err(|e| self.read_error("reading a projection entry", e))?;
        let value = match rows.first() {
            Some(row) => Some(column::<&[u8]>(row, 0, "a projection row")?.to_vec()),
            None => None,
        };
        f(value.as_deref());
        self.remember(name, value);
        Ok(())
    }

    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        // The scan reads the server's rows, so this transaction's queued writes go first.
        self.flush().map_err(ReadError::Storage)?;
        let mut after: Option<Vec<u8>> = after.map(<[u8]>::to_vec);
        loop {
            let rows = match &after {
                None => self.query(Q::KvScanFirst, &[&table, &PAGE_ROWS, &PAGE_BYTES]),
                Some(key) => {
                    let key: &[u8] = key;
                    self.query(Q::KvScanAfter, &[&table, &key, &PAGE_ROWS, &PAGE_BYTES])
                }
            }
            .map_err(|e| self.read_error("scanning a projection table", e))?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            for row in &rows {
                let key: &[u8] = column(row, 0, "a projection row")?;
                let value: &[u8] = column(row, 1, "a projection row")?;
                if f(key, value).is_break() {
                    return Ok(());
                }
            }
            after = Some(column::<&[u8]>(last, 0, "a projection row")?.to_vec());
        }
    }
}

/// Compares one record row's columns with its decoded bytes.
fn check_row(
    raw_position: i64,
    raw_stream: &[u8],
    raw_revision: i64,
    event_id: &str,
    bytes: &[u8],
    finding: &mut dyn FnMut(IndexFinding),
) {
    let stream = <[u8; 32]>::try_from(raw_stream)
        .ok()
        .map(StreamId::from_bytes);
    let revision = counter(raw_revision);
    let position = counter(raw_position);
    let mut report = |kind: IndexKind, detail: String| {
        finding(IndexFinding {
            kind,
            stream,
            revision,
            position,
            detail,
        });
    };
    let record = match decode_record_value(bytes) {
        Ok(record) => record,
        Err(e) => {
            report(
                IndexKind::Position,
                format!("the record row at position {raw_position} does not decode: {e}"),
            );
            return;
        }
    };
    let mut disagree = Vec::new();
    if position != Some(record.position) {
        disagree.push(format!(
            "position column {raw_position}, record {}",
            record.position
        ));
    }
    if stream != Some(record.stream) {
        disagree.push(format!(
            "stream column {}, record {}",
            hex(raw_stream),
            record.stream
        ));
    }
    if revision != Some(record.revision) {
        disagree.push(format!(
            "revision column {raw_revision}, record {}",
            record.revision
        ));
    }
    if !disagree.is_empty() {
        report(
            IndexKind::Position,
            format!(
                "the record row's columns disagree with its bytes: {}",
                disagree.join("; ")
            ),
        );
    }
    if event_id != record.event_id {
        report(
            IndexKind::Event,
            format!(
                "the record row's event_id column is {:?}, its bytes say {:?}",
                event_id, record.event_id
            ),
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl WriteTxn for Txn<'_> {
    fn next_position(&mut self) -> Result<u64, ReadError> {
        if !self.begun {
            self.begin(None).map_err(ReadError::Storage)?;
        }
        self.cursor.ok_or_else(|| {
            ReadError::Storage(StorageError::message(
                "next_position was called outside a write transaction",
            ))
        })
    }

    fn find_event(&mut self, event_id: &str) -> Result<Option<u64>, ReadError> {
        if let Some(found) = self.events.get(event_id) {
            return Ok(*found);
        }
        let rows = self
            .query(Q::FindEvent, &[&event_id])
            .map_err(|e| self.read_error("looking up an event id", e))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let raw: i64 = column(row, 0, "a record row")?;
        counter(raw).map(Some).ok_or_else(|| ReadError::Corrupt {
            position: 0,
            reason: format!("the record of event {event_id} has position {raw}"),
        })
    }

    /// One round trip for every head and event id the core is about to ask for; what this
    /// transaction has already cached (its own puts among it) is not asked again.
    fn prefetch(&mut self, streams: &[StreamId], event_ids: &[&str]) -> Result<(), ReadError> {
        let ids: Vec<&str> = event_ids
            .iter()
            .copied()
            .filter(|id| !self.events.contains_key(*id))
            .collect();
        let keys: Vec<&[u8]> = streams
            .iter()
            .filter(|s| !self.heads.contains_key(*s))
            .map(|s| s.as_bytes().as_slice())
            .collect();
        if !self.begun {
            // The transaction's first round trip: BEGIN, the position lock and these lookups.
            let lookups = (!ids.is_empty() || !keys.is_empty()).then_some((&ids[..], &keys[..]));
            let rows = self.begin(lookups).map_err(ReadError::Storage)?;
            return self.absorb_prefetch(&rows);
        }
        if ids.is_empty() && keys.is_empty() {
            return Ok(());
        }
        let rows = self
            .query(Q::Prefetch, &[&ids, &keys])
            .map_err(|e| self.read_error("looking up event ids and stream heads", e))?;
        self.absorb_prefetch(&rows)
    }

    fn put_record(&mut self, record: &PutRecord<'_>) -> Result<(), StorageError> {
        if !self.begun {
            self.begin(None)?;
        }
        let Some(next) = self.cursor else {
            return Err(StorageError::message(
                "put_record was called outside a write transaction",
            ));
        };
        if record.position != next {
            self.failed = true;
            return Err(StorageError::message(format!(
                "record {} of stream {} was given position {}, but the next position is {next}",
                record.event_id, record.stream, record.position
            )));
        }
        let (Ok(position), Ok(revision)) = (
            i64::try_from(record.position),
            i64::try_from(record.revision),
        ) else {
            self.failed = true;
            return Err(StorageError::message(format!(
                "record {} has position {} and revision {}; both must be below 2^63",
                record.event_id, record.position, record.revision
            )));
        };
        // What this transaction knows is checked here, so that the caller hears of it at this
        // call; the server checks the rest when the puts are sent (spec/scale-out.md §3.6).
        if let Some(Some(stored)) = self.events.get(record.event_id) {
            self.failed = true;
            return Err(StorageError::message(format!(
                "event id {} is already stored at position {stored} of PostgreSQL {}; record {} \
                 of stream {} cannot take it again",
                record.event_id, self.backend.location, record.position, record.stream
            )));
        }
        let head = self.heads.get(&record.stream).copied();
        let expected = head.map(|head| head.map_or(0, |h| h.revision));
        if let Some(at) = expected
            && at.checked_add(1) != Some(record.revision)
        {
            self.failed = true;
            return Err(StorageError::message(format!(
                "the head of stream {} at PostgreSQL {} is at revision {at}, not {} (storing \
                 record {} at revision {} and position {}): the journal's core and its storage \
                 disagree, which is corruption or a bug",
                record.stream,
                self.backend.location,
                record.revision.saturating_sub(1),
                record.event_id,
                record.revision,
                record.position
            )));
        }
        let puts = &mut self.puts;
        puts.positions.push(position);
        puts.streams.push(record.stream.as_bytes().to_vec());
        puts.revisions.push(revision);
        puts.event_ids.push(record.event_id.to_owned());
        puts.records.push(record.bytes.to_vec());
        puts.digests.push(record.digest.as_bytes().to_vec());
        puts.bytes += record.bytes.len() + record.event_id.len() + 64;
        if puts.positions.len() >= PUTS_MAX || puts.bytes >= PUT_BYTES_MAX {
            self.send_puts()?;
        }
        self.cursor = Some(next + 1);
        self.records_put = true;
        self.events
            .insert(record.event_id.to_owned(), Some(record.position));
        self.heads.insert(
            record.stream,
            Some(StreamHead {
                revision: record.revision,
                position: record.position,
                digest: record.digest,
            }),
        );
        Ok(())
    }

    /// Queued, not sent: the entry reaches the server with the transaction's other projection
    /// writes (a failure there, such as a key past PostgreSQL's index entry limit, fails the
    /// commit: NotCommitted).
    fn kv_put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        self.defer((table.to_owned(), key.to_vec()), Some(value.to_vec()))
    }

    /// Queued when this transaction knows whether the entry is there; sent at once otherwise,
    /// since the answer needs the server.
    fn kv_remove(&mut self, table: &str, key: &[u8]) -> Result<bool, StorageError> {
        let name = (table.to_owned(), key.to_vec());
        let known = match self.pending.get(&name) {
            Some(value) => Some(value.is_some()),
            None => self.kv.get(&name).map(Option::is_some),
        };
        match known {
            Some(present) => {
                if present {
                    self.defer(name, None)?;
                }
                Ok(present)
            }
            None => {
                let removed = self
                    .execute(Q::KvRemove, &[&table, &key])
                    .map_err(|e| self.storage("removing a projection entry", e))?;
                self.remember(name, None);
                Ok(removed > 0)
            }
        }
    }

    fn kv_clear(&mut self, table: &str) -> Result<(), StorageError> {
        // Queued writes to the table are moot; cached entries of it are stale.
        self.pending.retain(|(t, _), _| t != table);
        self.pending_bytes = total_size(&self.pending);
        self.kv.retain(|(t, _), _| t != table);
        self.kv_bytes = total_size(&self.kv);
        self.execute(Q::KvClear, &[&table])
            .map(drop)
            .map_err(|e| self.storage("clearing a projection table", e))
    }
}

/// True when the server answered `error` with an ERROR: the statement (or COMMIT) failed and the
/// session goes on. False for no answer (I/O, a closed connection) and for FATAL or PANIC, which
/// end the session.
fn answered(error: &postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|db| matches!(db.parsed_severity(), Some(Severity::Error)))
}

/// Ends the transaction on `conn` without committing, and makes durable what it read (the
/// durability step, spec/scale-out.md §3.9) in the same round trip; true when both succeeded, so
/// the connection can be used again.
fn rollback(conn: &mut Conn, sql: &Sql) -> bool {
    if conn.is_closed() {
        return false;
    }
    // Prepared on the first write transaction's commit, so this costs no round trip then.
    let Ok(step) = conn.prepared(sql, Q::MakeDurable) else {
        return false;
    };
    let client = conn.client();
    let (rolled_back, durable) = conn.pipeline(futures_util::future::join(
        client.batch_execute("ROLLBACK"),
        client.execute(&step, &[]),
    ));
    rolled_back.is_ok() && durable.is_ok()
}

/// Locks a mutex whose holder may have panicked: the data it guards (an idle connection or
/// none) stays valid, because a connection in use is taken out of it first.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Host(s), port and database for messages; never the user's password.
fn location_of(config: &Config, dbname: &str, schema: &SchemaName) -> String {
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(DEFAULT_PORT)
    };
    let mut hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            #[cfg(unix)]
            Host::Unix(path) => format!("{}:{}", path.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        hosts = config
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(i, addr)| format!("{addr}:{}", port(i)))
            .collect();
    }
    if hosts.is_empty() {
        hosts.push(format!("(default host):{}", port(0)));
    }
    let mut location = format!("{}/{dbname}", hosts.join(","));
    if schema.name != DEFAULT_SCHEMA {
        location.push_str(&format!(" schema {}", schema.name));
    }
    location
}

/// The `pg-before-commit` fail point: its argument, when configured.
fn fail_point_before_commit() -> Option<Option<String>> {
    fail::fail_point!("pg-before-commit", Some);
    None
}

/// The `pg-skip-durable` fail point: its argument, when configured. A commit it fires for sends no
/// durability step, as if its process died after `COMMIT` (spec/scale-out.md §4).
fn fail_point_skip_durable() -> Option<Option<String>> {
    fail::fail_point!("pg-skip-durable", Some);
    None
}

/// The `pg-after-commit` fail point: its argument, when configured.
fn fail_point_after_commit() -> Option<Option<String>> {
    fail::fail_point!("pg-after-commit", Some);
    None
}
