//! The embedded backend: the journal's tables in one redb file (spec/journal.md §4), behind the
//! backend seam (spec/scale-out.md §2).
//!
//! What is redb-specific lives here, and only here: the per-stream position index (heads with an
//! unsealed tail plus sealed chunks), the event-id index merged in bulk with the unmerged ids kept
//! in memory, heads staged per transaction and written once at its end, the tables, the creation
//! of the file, redb's integrity check and (with the `testing` feature) interposition on the
//! file. Nothing outside this folder names a redb type.

// The callbacks are spelled out in each signature: an alias would hide what a backend calls.
#![allow(clippy::type_complexity)]

pub(crate) mod audit;
pub(crate) mod compact;
pub(crate) mod create;
#[cfg(feature = "testing")]
pub(crate) mod interpose;
mod tables;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::ops::{Bound, ControlFlow};
use std::sync::Mutex;

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition,
    WriteTransaction,
};
use rkyv::util::AlignedVec;

use self::tables::{CHUNKS, EVENT_IDS, META, META_EVENT_INDEX_UPTO, RECORDS, STREAMS, Tables};
use crate::backend::{
    Backend, CommitError, Finish, HeadDecodeError, IndexFinding, IndexKind, PutRecord, ReadTxn,
    WriteTxn,
};
use crate::codec::{HeadState, chunk_key, chunk_position, decode_record, encode_chunk, event_key};
use crate::error::{ReadError, StorageError};
use crate::limits::STREAM_CHUNK_REVISIONS;
use crate::sync::lock;
use crate::types::{Digest, StreamHead, StreamId};

/// What may sit between redb and the database file: a [`interpose::StorageWrapper`] with the
/// `testing` feature; nothing otherwise (an uninhabited type, so `Option<&Wrapper>` is always
/// `None` in a production build).
#[cfg(feature = "testing")]
pub(crate) type Wrapper = dyn interpose::StorageWrapper;
#[cfg(not(feature = "testing"))]
pub(crate) enum Wrapper {}

// redb's errors reach callers only as the opaque `StorageError`, so redb's types stay out of the
// public API.
macro_rules! storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                StorageError(Box::new(redb::Error::from(e)))
            }
        }
    )*};
}
storage_from!(
    redb::Error,
    redb::SetDurabilityError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::DatabaseError,
    redb::CompactionError
);

/// State only the committing transaction touches. `recent` maps the event ids at positions at or
/// after `event_index_upto` (not yet merged into the on-disk event index) to their positions.
pub(crate) struct Writer {
    pub(crate) next_position: u64,
    pub(crate) event_index_upto: u64,
    pub(crate) recent: HashMap<Box<str>, u64>,
    /// Whether commits save the allocator state ([`QUICK_REPAIR_FROM_BYTES`]).
    pub(crate) quick_repair: bool,
    /// Commits since the file's size was last looked at.
    pub(crate) commits_since_size_check: u64,
    /// A unit of work is open: commits are not synced (spec/journal.md §14).
    pub(crate) deferred: bool,
    /// A commit of the unit is not durable yet.
    pub(crate) pending: bool,
    /// Unmerged event ids at which a commit merges them (`OpenOptions::event_index_merge_records`).
    pub(crate) merge_records: u64,
}

impl Writer {
    /// Whether a commit whose records end before `next_position` merges the event-id index.
    fn merge_due(&self, next_position: u64) -> bool {
        next_position - self.event_index_upto >= self.merge_records
    }
}

/// Whether the database file at `path` is large enough for quick repair. A file whose size cannot
/// be read gets it: the cost is a second sync per commit, the risk of not having it a long open.
fn quick_repair_wanted(path: Option<&std::path::Path>) -> bool {
    path.is_some_and(|p| std::fs::metadata(p).map_or(true, |m| m.len() >= QUICK_REPAIR_FROM_BYTES))
}

/// Most bytes of pages redb caches for one open database, read or written (spec/journal.md §10).
/// redb's default is 1 GiB, so an audit or a reopen held nearly the whole file in memory; with
/// this bound a process's memory no longer tracks the journal's size.
pub const REDB_CACHE_MAX_BYTES: usize = 32 * 1024 * 1024;

/// From this file size on, every commit saves redb's allocator state (quick repair, which also
/// makes the commit two-phase), so the first open after a crash reads that state instead of
/// walking the whole file (spec/journal.md §10). Below it a full repair is short and a commit
/// keeps its single sync.
pub const QUICK_REPAIR_FROM_BYTES: u64 = 64 * 1024 * 1024;

/// How many commits pass between two looks at the file's size in a long-lived process.
const QUICK_REPAIR_RECHECK_COMMITS: u64 = 1024;

pub(crate) struct RedbBackend {
    pub(crate) db: Database,
    writer: Mutex<Writer>,
    location: String,
    /// The database file, for its size (quick repair); `None` for a file behind a test wrapper
    /// that is not on disk under this name.
    path: Option<std::path::PathBuf>,
}

impl RedbBackend {
    pub(crate) fn new(
        db: Database,
        mut writer: Writer,
        location: String,
        path: Option<std::path::PathBuf>,
    ) -> RedbBackend {
        writer.quick_repair = quick_repair_wanted(path.as_deref());
        RedbBackend {
            db,
            writer: Mutex::new(writer),
            location,
            path,
        }
    }

    #[cfg(test)]
    pub(crate) fn event_index_upto(&self) -> u64 {
        lock(&self.writer).event_index_upto
    }
}

fn corrupt(position: u64, reason: impl Into<String>) -> ReadError {
    ReadError::Corrupt {
        position,
        reason: reason.into(),
    }
}

fn table_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

impl Backend for RedbBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn fail_stop_on_uncertain_commit(&self) -> bool {
        true
    }

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn read(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let txn = self.db.begin_read().map_err(StorageError::from)?;
        work(&mut RedbRead { txn: &txn })
    }

    fn write(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError> {
        let mut writer = lock(&self.writer);
        writer.commits_since_size_check += 1;
        if !writer.quick_repair && writer.commits_since_size_check >= QUICK_REPAIR_RECHECK_COMMITS {
            writer.commits_since_size_check = 0;
            writer.quick_repair = quick_repair_wanted(self.path.as_deref());
        }
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| CommitError::NotCommitted(e.into()))?;
        txn.set_quick_repair(writer.quick_repair);
        if writer.deferred {
            txn.set_durability(redb::Durability::None)
                .map_err(|e| CommitError::NotCommitted(e.into()))?;
        }
        let staged = {
            let tables = Tables::open(&txn).map_err(CommitError::NotCommitted)?;
            let mut write = RedbWrite {
                txn: &txn,
                tables,
                staged: Staged::new(writer.next_position),
                writer: &writer,
                scratch: AlignedVec::new(),
            };
            match work(&mut write) {
                Err(e) => {
                    drop(write);
                    txn.abort()
                        .map_err(|e| CommitError::NotCommitted(e.into()))?;
                    return Err(CommitError::NotCommitted(e));
                }
                Ok(Finish::Abort) => None,
                Ok(Finish::Commit) => {
                    write.finish().map_err(CommitError::NotCommitted)?;
                    Some(write.staged)
                }
            }
        };
        let Some(staged) = staged else {
            txn.abort()
                .map_err(|e| CommitError::NotCommitted(e.into()))?;
            return Ok(Finish::Abort);
        };
        // redb cannot say whether a failed commit reached the disk.
        txn.commit()
            .map_err(|e| CommitError::MaybeCommitted(e.into()))?;
        writer.pending |= writer.deferred;
        let merged = writer.merge_due(staged.next_position);
        writer.next_position = staged.next_position;
        if merged {
            writer.event_index_upto = staged.next_position;
            writer.recent.clear();
        } else {
            for (event_id, position) in staged.event_ids {
                writer.recent.insert(event_id.into_boxed_str(), position);
            }
        }
        Ok(Finish::Commit)
    }

    fn defer_durability(&self) -> bool {
        lock(&self.writer).deferred = true;
        true
    }

    fn make_durable(&self, end: bool) -> Result<(), CommitError> {
        let mut writer = lock(&self.writer);
        // Under the writer's lock, so no commit of the unit lands after this sync undeferred.
        if end {
            writer.deferred = false;
        }
        if !writer.pending {
            return Ok(());
        }
        // An empty transaction committed with redb's default (immediate) durability makes the
        // current root, and so every non-durable commit before it, durable at once.
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| CommitError::NotCommitted(e.into()))?;
        txn.set_quick_repair(writer.quick_repair);
        txn.commit()
            .map_err(|e| CommitError::MaybeCommitted(e.into()))?;
        writer.pending = false;
        Ok(())
    }
}

// ----- reads -----

struct RedbRead<'t> {
    txn: &'t ReadTransaction,
}

impl ReadTxn for RedbRead<'_> {
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        Ok(read_head(self.txn, stream)?.map(|h| h.public()))
    }

    fn last_position(&mut self) -> Result<u64, ReadError> {
        let records = self.txn.open_table(RECORDS).map_err(StorageError::from)?;
        Ok(records
            .last()
            .map_err(StorageError::from)?
            .map_or(0, |(k, _)| k.value()))
    }

    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let Some(head) = read_head(self.txn, stream)? else {
            return Ok(());
        };
        let records = self.txn.open_table(RECORDS).map_err(StorageError::from)?;
        let chunks = self.txn.open_table(CHUNKS).map_err(StorageError::from)?;
        visit_stream_records(&records, &chunks, stream, &head, from, to, f)
    }

    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError> {
        let records = self.txn.open_table(RECORDS).map_err(StorageError::from)?;
        let guard = records.get(position).map_err(StorageError::from)?;
        f(guard.as_ref().map(|g| g.value()));
        Ok(())
    }

    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let records = self.txn.open_table(RECORDS).map_err(StorageError::from)?;
        visit_records(&records, from, f)
    }

    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError> {
        let streams = self.txn.open_table(STREAMS).map_err(StorageError::from)?;
        visit_heads(&streams, f)
    }

    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError> {
        let records = self.txn.open_table(RECORDS).map_err(StorageError::from)?;
        let streams = self.txn.open_table(STREAMS).map_err(StorageError::from)?;
        let chunks = self.txn.open_table(CHUNKS).map_err(StorageError::from)?;
        let event_ids = self.txn.open_table(EVENT_IDS).map_err(StorageError::from)?;
        let meta = self.txn.open_table(META).map_err(StorageError::from)?;
        check_indexes(&records, &streams, &chunks, &event_ids, &meta, finding)
    }

    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError> {
        let t = match self.txn.open_table(table_def(table)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                f(None);
                return Ok(());
            }
            Err(e) => return Err(StorageError::from(e).into()),
        };
        let guard = t.get(key).map_err(StorageError::from)?;
        f(guard.as_ref().map(|g| g.value()));
        Ok(())
    }

    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let t = match self.txn.open_table(table_def(table)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(StorageError::from(e).into()),
        };
        scan_table(&t, after, f)
    }
}

fn read_head(txn: &ReadTransaction, stream: &StreamId) -> Result<Option<HeadState>, ReadError> {
    let streams = txn.open_table(STREAMS).map_err(StorageError::from)?;
    decode_head(&streams, stream)
}

fn decode_head(
    streams: &impl ReadableTable<&'static [u8], &'static [u8]>,
    stream: &StreamId,
) -> Result<Option<HeadState>, ReadError> {
    match streams
        .get(stream.as_bytes().as_slice())
        .map_err(StorageError::from)?
    {
        Some(g) => HeadState::decode(g.value())
            .map(Some)
            .map_err(|reason| corrupt(0, format!("stream {stream}: {reason}"))),
        None => Ok(None),
    }
}

fn visit_records(
    records: &impl ReadableTable<u64, &'static [u8]>,
    from: u64,
    f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> Result<(), ReadError> {
    for entry in records.range(from..).map_err(StorageError::from)? {
        let (key, value) = entry.map_err(StorageError::from)?;
        if f(key.value(), value.value()).is_break() {
            break;
        }
    }
    Ok(())
}

fn visit_heads(
    streams: &impl ReadableTable<&'static [u8], &'static [u8]>,
    f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
) -> Result<(), ReadError> {
    for entry in streams.iter().map_err(StorageError::from)? {
        let (key, value) = entry.map_err(StorageError::from)?;
        let head = HeadState::decode(value.value())
            .map(|h| h.public())
            .map_err(HeadDecodeError::new);
        f(key.value(), head);
    }
    Ok(())
}

fn scan_table(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    after: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
) -> Result<(), ReadError> {
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    for entry in t
        .range::<&[u8]>((start, Bound::Unbounded))
        .map_err(StorageError::from)?
    {
        let (key, value) = entry.map_err(StorageError::from)?;
        if f(key.value(), value.value()).is_break() {
            break;
        }
    }
    Ok(())
}

fn visit_stream_records(
    records: &impl ReadableTable<u64, &'static [u8]>,
    chunks: &impl ReadableTable<&'static [u8], &'static [u8]>,
    stream: &StreamId,
    head: &HeadState,
    from: u64,
    to: u64,
    f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
) -> Result<(), ReadError> {
    for revision in from.max(1)..=to.min(head.revision) {
        let position = position_of(chunks, stream, head, revision)?;
        let guard = records.get(position).map_err(StorageError::from)?.ok_or(
            ReadError::AuthenticationFailed {
                stream: *stream,
                revision,
                position,
                reason: "the record is missing",
            },
        )?;
        if f(revision, position, guard.value()).is_break() {
            break;
        }
    }
    Ok(())
}

/// The position of `revision` of `stream` from its head's unsealed tail or a sealed chunk
/// (spec/journal.md §4).
pub(crate) fn position_of(
    chunks: &impl ReadableTable<&'static [u8], &'static [u8]>,
    stream: &StreamId,
    head: &HeadState,
    revision: u64,
) -> Result<u64, ReadError> {
    let index = (revision - 1) % STREAM_CHUNK_REVISIONS;
    let chunk = (revision - 1) / STREAM_CHUNK_REVISIONS;
    let sealed = head.revision / STREAM_CHUNK_REVISIONS;
    let fail = |reason: &str| {
        corrupt(
            0,
            format!("position index of stream {stream} at revision {revision}: {reason}"),
        )
    };
    if chunk < sealed {
        let key = chunk_key(stream, chunk);
        let guard = chunks
            .get(key.as_slice())
            .map_err(StorageError::from)?
            .ok_or_else(|| fail("a sealed chunk is missing"))?;
        chunk_position(guard.value(), index).map_err(fail)
    } else {
        head.tail
            .get(index as usize)
            .copied()
            .ok_or_else(|| fail("the head has no such entry"))
    }
}

/// The redb index checks of the verification pass: every record's (stream, revision) maps to its
/// position through the head and chunks, and every record below the merge checkpoint has its
/// event-index entry and nothing else is indexed (invariants J5 and J9).
fn check_indexes(
    records: &impl ReadableTable<u64, &'static [u8]>,
    streams: &impl ReadableTable<&'static [u8], &'static [u8]>,
    chunks: &impl ReadableTable<&'static [u8], &'static [u8]>,
    event_ids: &impl ReadableTable<(u64, u64), ()>,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    finding: &mut dyn FnMut(IndexFinding),
) -> Result<(), ReadError> {
    let event_index_upto = meta
        .get(META_EVENT_INDEX_UPTO)
        .map_err(StorageError::from)?
        .and_then(|g| <[u8; 8]>::try_from(g.value()).ok())
        .map_or(1, u64::from_le_bytes);
    let mut heads: HashMap<StreamId, Option<HeadState>> = HashMap::new();
    let mut scratch = AlignedVec::<16>::new();
    let mut indexed = 0u64;
    for entry in records.iter().map_err(StorageError::from)? {
        let (key, value) = entry.map_err(StorageError::from)?;
        let position = key.value();
        // A record that does not decode is the core's structure finding.
        let Ok(view) = decode_record(value.value(), &mut scratch) else {
            continue;
        };
        let (stream, revision) = (view.stream, view.revision);
        let head = match heads.entry(stream) {
            Entry::Occupied(o) => o.into_mut().as_ref(),
            Entry::Vacant(v) => v
                .insert(decode_head(streams, &stream).ok().flatten())
                .as_ref(),
        };
        let indexed_at = match head {
            // A storage failure is the pass's own error; only a missing or undecodable index
            // entry is an integrity finding.
            Some(h) if revision >= 1 && revision <= h.revision => {
                match position_of(chunks, &stream, h, revision) {
                    Ok(position) => Some(position),
                    Err(ReadError::Storage(e)) => return Err(e.into()),
                    Err(_) => None,
                }
            }
            _ => None,
        };
        if indexed_at != Some(position) {
            finding(IndexFinding {
                kind: IndexKind::Position,
                stream: Some(stream),
                revision: Some(revision),
                position: Some(position),
                detail: match indexed_at {
                    Some(p) => format!("the stream index says position {p}"),
                    None => "the stream index has no entry".to_owned(),
                },
            });
        }
        if position < event_index_upto {
            indexed += 1;
            let found = event_ids
                .get((event_key(view.event_id), position))
                .map_err(StorageError::from)?
                .is_some();
            if !found {
                finding(IndexFinding {
                    kind: IndexKind::Event,
                    stream: Some(stream),
                    revision: Some(revision),
                    position: Some(position),
                    detail: format!("event id {} is not in the event index", view.event_id),
                });
            }
        }
    }
    let indexed_entries = event_ids.len().map_err(StorageError::from)?;
    if indexed_entries != indexed {
        finding(IndexFinding {
            kind: IndexKind::Event,
            stream: None,
            revision: None,
            position: None,
            detail: format!(
                "the event index holds {indexed_entries} entries for {indexed} indexed records"
            ),
        });
    }
    Ok(())
}

// ----- writes -----

struct RedbWrite<'t, 'w> {
    txn: &'t WriteTransaction,
    tables: Tables<'t>,
    staged: Staged,
    writer: &'w Writer,
    scratch: AlignedVec<16>,
}

impl RedbWrite<'_, '_> {
    /// Writes the staged heads, and merges the event-id index when enough ids are unmerged.
    fn finish(&mut self) -> Result<(), StorageError> {
        self.staged.flush(&mut self.tables)?;
        if self.writer.merge_due(self.staged.next_position) {
            merge_event_index(&mut self.tables, self.writer, &self.staged)?;
        }
        Ok(())
    }
}

impl ReadTxn for RedbWrite<'_, '_> {
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        Ok(self
            .staged
            .head(&self.tables, stream)?
            .map(HeadState::public))
    }

    fn last_position(&mut self) -> Result<u64, ReadError> {
        Ok(self.staged.next_position - 1)
    }

    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let Some(head) = self.staged.head(&self.tables, stream)?.cloned() else {
            return Ok(());
        };
        visit_stream_records(
            &self.tables.records,
            &self.tables.chunks,
            stream,
            &head,
            from,
            to,
            f,
        )
    }

    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError> {
        let guard = self
            .tables
            .records
            .get(position)
            .map_err(StorageError::from)?;
        f(guard.as_ref().map(|g| g.value()));
        Ok(())
    }

    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        visit_records(&self.tables.records, from, f)
    }

    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError> {
        self.staged
            .flush(&mut self.tables)
            .map_err(ReadError::from)?;
        visit_heads(&self.tables.streams, f)
    }

    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError> {
        self.staged
            .flush(&mut self.tables)
            .map_err(ReadError::from)?;
        check_indexes(
            &self.tables.records,
            &self.tables.streams,
            &self.tables.chunks,
            &self.tables.event_ids,
            &self.tables.meta,
            finding,
        )
    }

    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError> {
        let t = self
            .txn
            .open_table(table_def(table))
            .map_err(StorageError::from)?;
        let guard = t.get(key).map_err(StorageError::from)?;
        f(guard.as_ref().map(|g| g.value()));
        Ok(())
    }

    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let t = self
            .txn
            .open_table(table_def(table))
            .map_err(StorageError::from)?;
        scan_table(&t, after, f)
    }
}

impl WriteTxn for RedbWrite<'_, '_> {
    fn next_position(&mut self) -> Result<u64, ReadError> {
        Ok(self.staged.next_position)
    }

    fn find_event(&mut self, event_id: &str) -> Result<Option<u64>, ReadError> {
        lookup_event(
            &self.tables,
            &self.staged,
            self.writer,
            event_id,
            &mut self.scratch,
        )
    }

    fn put_record(&mut self, record: &PutRecord<'_>) -> Result<(), StorageError> {
        let head = self
            .staged
            .head(&self.tables, &record.stream)
            .map_err(|e| StorageError::message(e.to_string()))?
            .cloned();
        // The core computes both from this transaction's own answers.
        assert_eq!(
            record.revision,
            head.as_ref().map_or(0, |h| h.revision) + 1,
            "a record must be its stream's next revision"
        );
        assert_eq!(
            record.position, self.staged.next_position,
            "a record must take the next position"
        );
        self.tables.records.insert(record.position, record.bytes)?;
        self.staged.advance(
            &mut self.tables,
            record.stream,
            head,
            record.position,
            record.digest,
        )?;
        self.staged
            .event_ids
            .insert(record.event_id.to_owned(), record.position);
        Ok(())
    }

    fn kv_put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let mut t = self.txn.open_table(table_def(table))?;
        t.insert(key, value)?;
        Ok(())
    }

    fn kv_remove(&mut self, table: &str, key: &[u8]) -> Result<bool, StorageError> {
        let mut t = self.txn.open_table(table_def(table))?;
        Ok(t.remove(key)?.is_some())
    }

    fn kv_clear(&mut self, table: &str) -> Result<(), StorageError> {
        // Deleting the redb table frees its pages in one step instead of removing entries one by
        // one; the next use recreates it empty.
        self.txn.delete_table(table_def(table))?;
        Ok(())
    }
}

/// Moves `head` of `stream` to a new record at `position` with digest `digest`, sealing a full
/// chunk of positions into `chunks` (spec/journal.md §4).
fn advance_head(
    chunks: &mut Table<'_, &'static [u8], &'static [u8]>,
    stream: &StreamId,
    head: &mut HeadState,
    position: u64,
    digest: Digest,
) -> Result<(), redb::StorageError> {
    head.revision += 1;
    head.position = position;
    head.digest = digest;
    head.tail.push(position);
    if head.revision.is_multiple_of(STREAM_CHUNK_REVISIONS) {
        let chunk = head.revision / STREAM_CHUNK_REVISIONS - 1;
        let key = chunk_key(stream, chunk);
        chunks.insert(key.as_slice(), encode_chunk(&head.tail).as_slice())?;
        head.tail.clear();
    }
    Ok(())
}

/// What the current transaction has written but not committed: heads of touched streams (written
/// to the streams table once, at the end) and event ids (moved into the writer's map after the
/// commit).
struct Staged {
    next_position: u64,
    heads: HashMap<StreamId, Option<HeadState>>,
    dirty: HashSet<StreamId>,
    event_ids: HashMap<String, u64>,
}

impl Staged {
    fn new(next_position: u64) -> Staged {
        Staged {
            next_position,
            heads: HashMap::new(),
            dirty: HashSet::new(),
            event_ids: HashMap::new(),
        }
    }

    fn head(
        &mut self,
        tables: &Tables<'_>,
        stream: &StreamId,
    ) -> Result<Option<&HeadState>, ReadError> {
        let entry = match self.heads.entry(*stream) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert(decode_head(&tables.streams, stream)?),
        };
        Ok(entry.as_ref())
    }

    /// Moves the stream's head to a new record, sealing a full chunk of positions.
    fn advance(
        &mut self,
        tables: &mut Tables<'_>,
        stream: StreamId,
        previous: Option<HeadState>,
        position: u64,
        digest: Digest,
    ) -> Result<(), StorageError> {
        let mut head = previous.unwrap_or_else(HeadState::empty);
        advance_head(&mut tables.chunks, &stream, &mut head, position, digest)?;
        assert_eq!(
            head.tail.len() as u64,
            head.revision % STREAM_CHUNK_REVISIONS
        );
        self.heads.insert(stream, Some(head));
        self.dirty.insert(stream);
        self.next_position += 1;
        Ok(())
    }

    fn flush(&mut self, tables: &mut Tables<'_>) -> Result<(), StorageError> {
        let mut buf = Vec::new();
        for stream in self.dirty.drain() {
            if let Some(Some(head)) = self.heads.get(&stream) {
                head.encode(&mut buf);
                tables
                    .streams
                    .insert(stream.as_bytes().as_slice(), buf.as_slice())?;
            }
        }
        Ok(())
    }
}

fn lookup_event(
    tables: &Tables<'_>,
    staged: &Staged,
    writer: &Writer,
    event_id: &str,
    scratch: &mut AlignedVec<16>,
) -> Result<Option<u64>, ReadError> {
    if let Some(p) = staged.event_ids.get(event_id) {
        return Ok(Some(*p));
    }
    if let Some(p) = writer.recent.get(event_id) {
        return Ok(Some(*p));
    }
    // The on-disk index is keyed by a 64-bit hash of the event id; a hit is confirmed against the
    // record itself, so a hash collision costs a read, never a wrong answer.
    let key = event_key(event_id);
    for entry in tables
        .event_ids
        .range((key, 0)..=(key, u64::MAX))
        .map_err(StorageError::from)?
    {
        let position = entry.map_err(StorageError::from)?.0.value().1;
        let guard = tables
            .records
            .get(position)
            .map_err(StorageError::from)?
            .ok_or_else(|| corrupt(position, "the event index names a position with no record"))?;
        let view =
            decode_record(guard.value(), scratch).map_err(|reason| corrupt(position, reason))?;
        if view.event_id == event_id {
            return Ok(Some(position));
        }
    }
    Ok(None)
}

/// Merges the unmerged event ids into the on-disk index in key order, so the B-tree pages are
/// touched once per merge instead of once per record (spec/journal.md, J9).
fn merge_event_index(
    tables: &mut Tables<'_>,
    writer: &Writer,
    staged: &Staged,
) -> Result<(), StorageError> {
    let mut all: Vec<(u64, u64)> = writer
        .recent
        .iter()
        .map(|(k, v)| (event_key(k), *v))
        .chain(staged.event_ids.iter().map(|(k, v)| (event_key(k), *v)))
        .collect();
    all.sort_unstable();
    for key in all {
        tables.event_ids.insert(key, ())?;
    }
    tables.meta.insert(
        META_EVENT_INDEX_UPTO,
        staged.next_position.to_le_bytes().as_slice(),
    )?;
    Ok(())
}

impl HeadState {
    pub(crate) fn public(&self) -> StreamHead {
        StreamHead {
            revision: self.revision,
            position: self.position,
            digest: self.digest,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn quick_repair_starts_at_its_file_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(QUICK_REPAIR_FROM_BYTES - 1).unwrap();
        assert!(!quick_repair_wanted(Some(&path)));
        file.set_len(QUICK_REPAIR_FROM_BYTES).unwrap();
        assert!(quick_repair_wanted(Some(&path)));
        // A size that cannot be read errs on the side of a short reopen.
        assert!(quick_repair_wanted(Some(&dir.path().join("missing"))));
        assert!(!quick_repair_wanted(None));
    }
}
