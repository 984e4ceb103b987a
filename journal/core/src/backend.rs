//! The backend seam: what a journal backend (redb in `redb/`, PostgreSQL in ctx-journal-pg) must
//! provide below the journal's core (spec/scale-out.md §2).
//!
//! The core — request validation, idempotency and expected-revision decisions, the digest chain
//! (formula D), the record MAC (formula M), the group commit, projection hooks and the
//! verification of every record read back — is the same for every backend. A backend stores and
//! orders opaque record bytes and projection key-value pairs, and owns atomicity and durability.
//!
//! Formula M binds a record to its global position, so positions must be known before a record is
//! sealed: a backend hands out the next position inside its write transaction, and positions are
//! dense, gap-free and in commit order on every backend (invariant J1). A backend shared by several
//! processes serializes its write transactions to keep that true.
//!
//! Transactions are closures rather than objects so that a backend can keep borrowed state (redb
//! tables borrow their transaction) for exactly the transaction's lifetime.

// The callbacks are spelled out in each signature: an alias would hide what a backend calls.
#![allow(clippy::type_complexity)]

use std::ops::ControlFlow;

use crate::error::{ReadError, StorageError};
use crate::types::{Digest, StreamHead, StreamId};

/// How a write transaction ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Finish {
    /// Make everything the transaction wrote durable, atomically.
    Commit,
    /// Discard everything the transaction wrote.
    Abort,
}

/// Why a write transaction did not (certainly) commit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// Nothing was committed: the failure happened before the commit was sent or the backend
    /// reported that it rolled back. The same work may be retried.
    #[error("nothing was committed: {0}")]
    NotCommitted(StorageError),
    /// The commit was sent but its answer was lost (a dropped connection, a failed fsync): it may
    /// or may not be durable. A caller retries with the same event ids, and the journal's
    /// idempotency resolves the retry to exactly one copy.
    #[error("the commit may or may not have happened: {0}")]
    MaybeCommitted(StorageError),
}

/// One record a write transaction stores: its sealed bytes (spec/journal.md §3, the record value)
/// and the fields a backend indexes. The core guarantees `revision` is the stream head's revision
/// plus one and `position` is the next position of this transaction.
#[derive(Clone, Copy, Debug)]
pub struct PutRecord<'a> {
    pub stream: StreamId,
    pub revision: u64,
    pub position: u64,
    pub event_id: &'a str,
    pub digest: Digest,
    pub bytes: &'a [u8],
}

/// A journal backend: durable storage of records and projection tables.
pub trait Backend: Send + Sync + 'static {
    /// Where the records live, for messages: a file path or a database name, never a password.
    fn location(&self) -> String;

    /// True when a commit whose outcome is unknown leaves this process's cached state possibly
    /// wrong, so the journal must refuse writes until it is reopened (redb caches the next
    /// position and unmerged event ids). A backend that reads everything inside its transaction
    /// returns false, and the journal goes on after a [`CommitError::MaybeCommitted`].
    fn fail_stop_on_uncertain_commit(&self) -> bool;

    /// This crate's tests only: the backend as `Any`, so a test can reach the redb file behind a
    /// journal. Compiled out of every other build, so no implementor outside sees it.
    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any;

    /// Runs `work` in a read-only transaction: a consistent snapshot as of one commit.
    fn read(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError>;

    /// Runs `work`, which issues at most one read (one [`ReadTxn`] call that is a single lookup:
    /// `head`, `last_position` or `kv_get`), as [`Backend::read`] does. One lookup sees one
    /// snapshot by itself, so a backend whose transactions cost round trips may run it without an
    /// explicit transaction. The default is [`Backend::read`].
    fn read_single(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        self.read(work)
    }

    /// Runs `work` in a write transaction and ends it as `work` says. Write transactions of one
    /// backend are serialized (across processes too, for a shared backend): each sees every
    /// earlier commit. An `Err` from `work` aborts and is returned as `NotCommitted`.
    fn write(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError>;

    /// Starts a unit of work (spec/journal.md §14): later commits stay atomic, ordered and
    /// visible to this process, but become durable together only at [`Backend::make_durable`]
    /// (or when the backend closes); a crash before that loses all of them and none of the
    /// commits before the unit. Returns false when this backend cannot defer, and then every
    /// commit stays durable on its own. The default cannot.
    fn defer_durability(&self) -> bool {
        false
    }

    /// Makes every commit so far durable: one sync when a deferred commit is pending, nothing
    /// otherwise. With `end`, the unit ends too: later commits are durable on their own again.
    fn make_durable(&self, end: bool) -> Result<(), CommitError> {
        let _ = end;
        Ok(())
    }
}

/// Reads inside a transaction. Bytes passed to callbacks have alignment 1.
pub trait ReadTxn {
    /// The head of `stream`, or `None` when it has no records.
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError>;

    /// The last position written (0 when there are no records).
    fn last_position(&mut self) -> Result<u64, ReadError>;

    /// Calls `f(revision, position, bytes)` for the records of `stream` with revisions
    /// `from..=to` in revision order, until it breaks. Every revision in the range is at most the
    /// head's; one that has no record is an error naming it.
    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError>;

    /// Calls `f` with the bytes stored at `position`, if any.
    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError>;

    /// Calls `f(position, bytes)` for every record from position `from` in position order, until
    /// it breaks. Positions are passed as stored; the core checks they have no gaps.
    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError>;

    /// Calls `f` with every stream head in stream-id order: the key as stored and the decoded
    /// head, or why it does not decode.
    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError>;

    /// Checks the backend's own indexes against the records (the verification pass), reporting
    /// each disagreement to `finding`. A backend without derived indexes reports nothing.
    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError>;

    /// Calls `f` with the value of `key` in projection table `table`; a missing table holds
    /// nothing.
    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError>;

    /// Calls `f` with the entries of projection table `table` whose keys are greater than
    /// `after` (all when `None`), in key order, until it breaks. A missing table holds nothing.
    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError>;
}

/// Writes inside a transaction. Reads through [`ReadTxn`] see this transaction's own writes.
pub trait WriteTxn: ReadTxn {
    /// The position the next record of this transaction gets: the last committed position plus
    /// one, plus the records this transaction has put.
    fn next_position(&mut self) -> Result<u64, ReadError>;

    /// The position of the record with `event_id`, committed or put by this transaction.
    fn find_event(&mut self, event_id: &str) -> Result<Option<u64>, ReadError>;

    /// A hint, before the core decides an append request: the heads of `streams` and the
    /// positions of `event_ids` are about to be looked up. A backend whose lookups are round
    /// trips may fetch them together and answer the next [`ReadTxn::head`] and
    /// [`WriteTxn::find_event`] calls from what it fetched (kept true by its own puts). The
    /// default does nothing.
    fn prefetch(&mut self, streams: &[StreamId], event_ids: &[&str]) -> Result<(), ReadError> {
        let _ = (streams, event_ids);
        Ok(())
    }

    /// Stores a sealed record and moves its stream's head to it.
    fn put_record(&mut self, record: &PutRecord<'_>) -> Result<(), StorageError>;

    fn kv_put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StorageError>;

    /// Removes `key`; true when it was there.
    fn kv_remove(&mut self, table: &str, key: &[u8]) -> Result<bool, StorageError>;

    /// Removes every entry of `table`.
    fn kv_clear(&mut self, table: &str) -> Result<(), StorageError>;
}

/// A disagreement between a backend's index and the records, found by
/// [`ReadTxn::check_indexes`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexFinding {
    pub kind: IndexKind,
    pub stream: Option<StreamId>,
    pub revision: Option<u64>,
    pub position: Option<u64>,
    pub detail: String,
}

/// Which index disagrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexKind {
    /// The (stream, revision) → position index.
    Position,
    /// The event id → position index.
    Event,
}

/// Why a stored stream head does not decode, in the words of the backend that stored it; reported
/// per head by [`ReadTxn::heads`] so that verification can name the stream and go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct HeadDecodeError {
    reason: String,
}

impl HeadDecodeError {
    /// A head that does not decode, for `reason` (a sentence naming the value at fault).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The backend's sentence.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
