//! The journal handle: open, group-committed appends, verified reads, the verification pass.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table,
    TableDefinition, WriteTransaction,
};
use rkyv::util::AlignedVec;

use crate::codec::{
    self, FORMAT_VERSION, HeadState, Integrity, MacKey, RecordView, authenticate, chunk_key,
    chunk_position, decode_record, encode_chunk, record_digest,
};
use crate::error::{
    AppendError, InputError, OpenError, ProjectionError, ReadError, StorageError, VerifyError,
};
use crate::hook::{HookTxn, ProjectionHook, table_def};
use crate::key::{self, KeySource};
use crate::limits::{
    BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, EVENT_INDEX_MERGE_RECORDS,
    GROUP_RECORDS_MAX, STREAM_CHUNK_REVISIONS,
};
use crate::lock::{self, ProcessLock};
use crate::types::{
    AppendOutcome, AppendedRecord, Digest, ExpectedRevision, Record, StreamAppend, StreamHead,
    StreamId,
};
use crate::verify::VerifyReport;

pub(crate) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");
pub(crate) const STREAMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("journal.streams");
pub(crate) const CHUNKS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("journal.stream_chunks");
pub(crate) const EVENT_IDS: TableDefinition<&str, u64> = TableDefinition::new("journal.event_ids");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("journal.meta");

const META_FORMAT: &str = "format_version";
const META_EVENT_INDEX_UPTO: &str = "event_index_upto";

/// The redb file's name inside the data directory.
pub const DATABASE_FILE: &str = "journal.redb";

/// Options for [`Journal::open`].
#[derive(Clone)]
pub struct OpenOptions {
    lock_wait: Duration,
    key_source: Arc<KeySource>,
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("lock_wait", &self.lock_wait)
            .finish_non_exhaustive()
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            lock_wait: Duration::ZERO,
            key_source: Arc::new(key::os_random_key),
        }
    }
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// How long to wait for another process to release the data directory before failing with
    /// [`OpenError::Locked`]. Zero (the default) fails at once.
    pub fn lock_wait(mut self, wait: Duration) -> OpenOptions {
        self.lock_wait = wait;
        self
    }

    /// Where the installation key's 32 random bytes come from when a journal is created.
    pub fn key_source(
        mut self,
        source: impl Fn() -> Result<[u8; 32], String> + Send + Sync + 'static,
    ) -> OpenOptions {
        self.key_source = Arc::new(source);
        self
    }
}

/// Journals open in this process, by canonical data directory, so a second open shares the first.
static OPEN_JOURNALS: LazyLock<Mutex<HashMap<PathBuf, Weak<Shared>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A handle to an open journal. Clones and repeated opens of one directory share one journal.
#[derive(Clone)]
pub struct Journal {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("data_dir", &self.shared.data_dir)
            .finish_non_exhaustive()
    }
}

struct Shared {
    // Field order matters for drop: the database closes before the process lock is released.
    db: Database,
    mac: MacKey,
    data_dir: PathBuf,
    pid: u32,
    queue: Mutex<Queue>,
    /// Signalled whenever a group commit finishes and its slots are filled.
    group_done: Condvar,
    writer: Mutex<Writer>,
    failed: AtomicBool,
    /// Set when the open found a record it could not authenticate in the unmerged tail; the
    /// journal then serves reads and verification but refuses writes.
    write_refusal: Option<String>,
    /// True when this open created the database file.
    created: bool,
    hooks: RwLock<Vec<Arc<dyn ProjectionHook>>>,
    _lock: ProcessLock,
}

/// State only the committing thread touches. `recent` maps the event ids at positions at or after
/// `event_index_upto` (not yet merged into the on-disk event index) to their positions.
struct Writer {
    next_position: u64,
    event_index_upto: u64,
    recent: HashMap<Box<str>, u64>,
}

type Reply = Result<Vec<AppendOutcome>, AppendError>;

/// Requests waiting for a group commit, and whether a leader is committing one now.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    leading: bool,
}

/// Takes whole requests from the front of the queue, up to `GROUP_RECORDS_MAX` records (a
/// single larger request still goes alone).
fn take_group(pending: &mut Vec<Pending>) -> Vec<Pending> {
    let mut total = 0;
    let mut count = 0;
    for p in pending.iter() {
        if count > 0 && total + p.records > GROUP_RECORDS_MAX {
            break;
        }
        total += p.records;
        count += 1;
    }
    pending.drain(..count).collect()
}

struct Pending {
    batch: Vec<StreamAppend>,
    records: usize,
    slot: Arc<Mutex<Option<Reply>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is handled where it can happen (the group commit
    // catches it and fail-stops), so the data behind a poisoned lock is still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Journal {
    /// Opens the journal in `dir` (an absolute path), creating the directory, the installation
    /// key and the database on first use.
    pub fn open(dir: impl AsRef<Path>, options: &OpenOptions) -> Result<Journal, OpenError> {
        let dir = dir.as_ref();
        if !dir.is_absolute() {
            return Err(OpenError::RelativePath {
                path: dir.to_path_buf(),
            });
        }
        create_private_dir(dir).map_err(|source| OpenError::Io {
            path: dir.into(),
            source,
        })?;
        let dir = dir.canonicalize().map_err(|source| OpenError::Io {
            path: dir.into(),
            source,
        })?;
        let mut open = lock(&OPEN_JOURNALS);
        if let Some(shared) = open.get(&dir).and_then(Weak::upgrade) {
            if shared.pid != std::process::id() {
                return Err(OpenError::ForkedProcess { path: dir });
            }
            return Ok(Journal { shared });
        }
        let process_lock = lock::acquire(&dir, options.lock_wait)?;
        let db_path = dir.join(DATABASE_FILE);
        let exists = db_path.exists();
        let key = key::load_or_create(&dir, !exists, options.key_source.as_ref())?;
        let db = Database::builder()
            .create(&db_path)
            .map_err(StorageError::from)?;
        let mac = MacKey::new(key.bytes());
        let (writer, write_refusal) = initialize(&db, &mac, &db_path)?;
        let shared = Arc::new(Shared {
            db,
            mac,
            data_dir: dir.clone(),
            pid: std::process::id(),
            queue: Mutex::new(Queue::default()),
            group_done: Condvar::new(),
            writer: Mutex::new(writer),
            failed: AtomicBool::new(false),
            write_refusal,
            created: !exists,
            hooks: RwLock::new(Vec::new()),
            _lock: process_lock,
        });
        open.retain(|_, weak| weak.strong_count() > 0);
        open.insert(dir, Arc::downgrade(&shared));
        Ok(Journal { shared })
    }

    /// The canonical data directory.
    pub fn data_dir(&self) -> &Path {
        &self.shared.data_dir
    }

    /// Registers a projection hook; it sees every record appended from now on.
    pub fn register_hook(&self, hook: Arc<dyn ProjectionHook>) {
        self.shared
            .hooks
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook);
    }

    /// True when the open that first loaded this journal in this process created it.
    pub fn was_created(&self) -> bool {
        self.shared.created
    }

    /// Why this journal refuses writes, when open found a record in the unmerged tail that does
    /// not authenticate (see [`AppendError::Integrity`]). Reads and `verify` still work.
    pub fn write_refusal(&self) -> Option<&str> {
        self.shared.write_refusal.as_deref()
    }

    /// True once a failed commit has stopped the journal; it refuses writes until reopened.
    pub fn is_fail_stopped(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    fn check_process(&self) -> bool {
        self.shared.pid == std::process::id()
    }

    /// Appends records to one stream atomically.
    pub fn append(&self, append: StreamAppend) -> Result<AppendOutcome, AppendError> {
        let mut outcomes = self.append_batch(vec![append])?;
        // append_batch returns exactly one outcome per stream append it was given.
        outcomes.pop().ok_or(AppendError::Input(InputError::Empty))
    }

    /// Appends to several streams in one atomic commit: all of it is written, or none.
    pub fn append_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        if !self.check_process() {
            return Err(AppendError::ForkedProcess);
        }
        let records = validate_batch(&batch)?;
        if let Some(detail) = &self.shared.write_refusal {
            return Err(AppendError::Integrity {
                detail: detail.clone(),
            });
        }
        if self.is_fail_stopped() {
            return Err(AppendError::FailStopped);
        }
        let slot = Arc::new(Mutex::new(None));
        let mut queue = lock(&self.shared.queue);
        queue.pending.push(Pending {
            batch,
            records,
            slot: slot.clone(),
        });
        // Leader/follower group commit: whoever finds no leader drains the queue and commits it;
        // everyone else sleeps until a group finishes, then finds its answer or leads the next
        // group. Answered followers never wait behind the next group's fsync.
        loop {
            if let Some(reply) = lock(&slot).take() {
                return reply;
            }
            if queue.leading {
                queue = self
                    .shared
                    .group_done
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            queue.leading = true;
            let group = take_group(&mut queue.pending);
            drop(queue);
            {
                let mut writer = lock(&self.shared.writer);
                self.commit_group(&mut writer, group);
            }
            queue = lock(&self.shared.queue);
            queue.leading = false;
            self.shared.group_done.notify_all();
        }
    }

    /// Commits one group and fills every request's slot.
    fn commit_group(&self, writer: &mut Writer, group: Vec<Pending>) {
        if self.is_fail_stopped() {
            for p in &group {
                *lock(&p.slot) = Some(Err(AppendError::FailStopped));
            }
            return;
        }
        let hooks: Vec<Arc<dyn ProjectionHook>> = self
            .shared
            .hooks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run_group(writer, &group, &hooks)
        }));
        let replies = match run {
            Ok(replies) => replies,
            Err(_) => {
                self.shared.failed.store(true, Ordering::Release);
                group
                    .iter()
                    .map(|_| {
                        Err(AppendError::MaybeCommitted {
                            reason: "a projection hook or the committer panicked".to_owned(),
                        })
                    })
                    .collect()
            }
        };
        for (p, reply) in group.iter().zip(replies) {
            *lock(&p.slot) = Some(reply);
        }
    }

    /// Runs one group commit. Requests that are refused write nothing; a request whose hook fails
    /// has written into the transaction, so the transaction is dropped and the group re-run
    /// without it.
    fn run_group(
        &self,
        writer: &mut Writer,
        group: &[Pending],
        hooks: &[Arc<dyn ProjectionHook>],
    ) -> Vec<Reply> {
        let mut replies: Vec<Option<Reply>> = group.iter().map(|_| None).collect();
        // Requests whose hook failed; they stay out of every later attempt.
        let mut excluded = vec![false; group.len()];
        'attempt: loop {
            let txn = match self.shared.db.begin_write() {
                Ok(txn) => txn,
                Err(e) => return self.fail_all(&mut replies, StorageError::from(e).to_string()),
            };
            let mut staged = Staged::new(writer.next_position);
            let mut written = vec![false; group.len()];
            {
                let mut tables = match Tables::open(&txn) {
                    Ok(t) => t,
                    Err(e) => return self.fail_all(&mut replies, e.to_string()),
                };
                for (i, pending) in group.iter().enumerate() {
                    if excluded[i] {
                        continue;
                    }
                    match self.apply(
                        &txn,
                        &mut tables,
                        &mut staged,
                        writer,
                        &pending.batch,
                        hooks,
                    ) {
                        Ok(outcomes) => {
                            written[i] = true;
                            replies[i] = Some(Ok(outcomes));
                        }
                        Err(Step::Refused(e)) => replies[i] = Some(Err(e)),
                        Err(Step::HookFailed(e)) => {
                            // The failed request has written into this transaction: drop it and
                            // decide every other request afresh, since a refusal may have depended
                            // on what the excluded request wrote.
                            for (j, reply) in replies.iter_mut().enumerate() {
                                if !excluded[j] {
                                    *reply = None;
                                }
                            }
                            excluded[i] = true;
                            replies[i] = Some(Err(e));
                            drop(tables);
                            drop(txn);
                            continue 'attempt;
                        }
                        Err(Step::Storage(e)) => return self.fail_all(&mut replies, e.to_string()),
                    }
                }
                if let Err(e) = staged.flush(&mut tables) {
                    return self.fail_all(&mut replies, e.to_string());
                }
                let merge =
                    staged.next_position - writer.event_index_upto >= EVENT_INDEX_MERGE_RECORDS;
                if merge && let Err(e) = merge_event_index(&mut tables, writer, &staged) {
                    return self.fail_all(&mut replies, e.to_string());
                }
            }
            if !written.iter().any(|w| *w) {
                drop(txn);
                return replies
                    .into_iter()
                    .map(|r| r.unwrap_or(Err(AppendError::FailStopped)))
                    .collect();
            }
            let injected = fail_point_before_commit();
            if let Some(reason) = injected {
                drop(txn);
                return self.fail_all(&mut replies, reason);
            }
            if let Err(e) = txn.commit() {
                return self.fail_all(&mut replies, StorageError::from(e).to_string());
            }
            writer.next_position = staged.next_position;
            if staged.next_position - writer.event_index_upto >= EVENT_INDEX_MERGE_RECORDS {
                writer.event_index_upto = staged.next_position;
                writer.recent.clear();
            } else {
                for (event_id, position) in staged.event_ids {
                    writer.recent.insert(event_id.into_boxed_str(), position);
                }
            }
            let injected = fail_point_after_commit();
            if let Some(reason) = injected {
                return self.fail_all(&mut replies, reason);
            }
            return replies
                .into_iter()
                .map(|r| r.unwrap_or(Err(AppendError::FailStopped)))
                .collect();
        }
    }

    /// Fail-stop: answers every request still waiting with "maybe committed" and refuses further
    /// writes, because after a failed commit the journal cannot know what reached the disk.
    fn fail_all(&self, replies: &mut [Option<Reply>], reason: String) -> Vec<Reply> {
        self.shared.failed.store(true, Ordering::Release);
        replies
            .iter_mut()
            .map(|r| match r.take() {
                Some(Err(e)) => Err(e),
                _ => Err(AppendError::MaybeCommitted {
                    reason: reason.clone(),
                }),
            })
            .collect()
    }

    /// Applies one request to the transaction: all checks first, then the writes.
    fn apply(
        &self,
        txn: &WriteTransaction,
        tables: &mut Tables<'_>,
        staged: &mut Staged,
        writer: &Writer,
        batch: &[StreamAppend],
        hooks: &[Arc<dyn ProjectionHook>],
    ) -> Result<Vec<AppendOutcome>, Step> {
        // Phase 1: decide each stream's fate without writing.
        let mut plans = Vec::with_capacity(batch.len());
        for part in batch {
            let mut existing = Vec::with_capacity(part.records.len());
            for record in &part.records {
                existing.push(lookup_event(tables, staged, writer, &record.event_id)?);
            }
            let found = existing.iter().filter(|e| e.is_some()).count();
            if found > 0 {
                let mut replay = Vec::with_capacity(part.records.len());
                for (record, position) in part.records.iter().zip(&existing) {
                    let Some(position) = position else {
                        // Part of this append is new and part is not: that is not a retry.
                        let (pos, other) = existing
                            .iter()
                            .zip(&part.records)
                            .find_map(|(p, r)| p.map(|p| (p, r)))
                            .ok_or(Step::Storage(StorageError(redb::Error::Corrupted(
                                "event lookup changed under the writer".to_owned(),
                            ))))?;
                        let (stream, revision) = self.identify(tables, pos)?;
                        return Err(Step::Refused(AppendError::Conflict {
                            event_id: other.event_id.clone(),
                            stream,
                            revision,
                        }));
                    };
                    let stored = self.read_for_write(tables, *position)?;
                    if !stored.same_content(&part.stream, record) {
                        return Err(Step::Refused(AppendError::Conflict {
                            event_id: record.event_id.clone(),
                            stream: stored.stream,
                            revision: stored.revision,
                        }));
                    }
                    replay.push(AppendedRecord {
                        revision: stored.revision,
                        position: stored.position,
                        digest: stored.digest,
                    });
                }
                plans.push(Plan::Replay(replay));
                continue;
            }
            let current = staged.head(tables, &part.stream)?.map_or(0, |h| h.revision);
            let ok = match part.expected {
                ExpectedRevision::Any => true,
                ExpectedRevision::NoStream => current == 0,
                ExpectedRevision::Exact(n) => current == n,
            };
            if !ok {
                return Err(Step::Refused(AppendError::WrongRevision {
                    stream: part.stream,
                    expected: part.expected,
                    current,
                }));
            }
            plans.push(Plan::Write);
        }
        // Phase 2: write. Nothing below refuses the request except a hook.
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut value = Vec::new();
        for (part, plan) in batch.iter().zip(plans) {
            if let Plan::Replay(records) = plan {
                outcomes.push(AppendOutcome {
                    stream: part.stream,
                    records,
                    replayed: true,
                });
                continue;
            }
            let mut appended = Vec::with_capacity(part.records.len());
            for record in &part.records {
                let head = staged.head(tables, &part.stream)?.cloned();
                let (revision, previous) = head
                    .as_ref()
                    .map_or((1, Digest::ZERO), |h| (h.revision + 1, h.digest));
                let position = staged.next_position;
                let digest = record_digest(
                    &part.stream,
                    revision,
                    &record.event_id,
                    &record.kind,
                    record.occurred_at,
                    &previous,
                    &record.payload,
                );
                let mac = self.shared.mac.tag(position, &digest);
                codec::encode_record(
                    &part.stream,
                    revision,
                    position,
                    record,
                    &previous,
                    &digest,
                    mac,
                    &mut value,
                );
                tables
                    .records
                    .insert(position, value.as_slice())
                    .map_err(storage)?;
                staged.advance(tables, part.stream, head, position, digest)?;
                staged.event_ids.insert(record.event_id.clone(), position);
                appended.push(AppendedRecord {
                    revision,
                    position,
                    digest,
                });
                if !hooks.is_empty() {
                    let view = RecordView {
                        stream: part.stream,
                        revision,
                        position,
                        event_id: &record.event_id,
                        kind: &record.kind,
                        occurred_at: record.occurred_at,
                        payload: &record.payload,
                        previous_digest: previous,
                        digest,
                        mac,
                    };
                    let hook_txn = HookTxn { txn };
                    for hook in hooks {
                        if let Err(e) = hook.apply(&hook_txn, &view) {
                            return Err(Step::HookFailed(AppendError::Hook {
                                hook: hook.name().to_owned(),
                                event_id: record.event_id.clone(),
                                message: e.message().to_owned(),
                            }));
                        }
                    }
                }
            }
            outcomes.push(AppendOutcome {
                stream: part.stream,
                records: appended,
                replayed: false,
            });
        }
        Ok(outcomes)
    }

    fn read_for_write(&self, tables: &Tables<'_>, position: u64) -> Result<OwnedView, Step> {
        let guard = tables
            .records
            .get(position)
            .map_err(storage)?
            .ok_or_else(|| {
                Step::Refused(AppendError::Read(ReadError::Corrupt {
                    position,
                    reason: "the event index names a position with no record".to_owned(),
                }))
            })?;
        let mut scratch = AlignedVec::<16>::new();
        let view = decode_record(guard.value(), &mut scratch).map_err(|reason| {
            Step::Refused(AppendError::Read(ReadError::Corrupt {
                position,
                reason: reason.into(),
            }))
        })?;
        if let Err(kind) = authenticate(&view, &self.shared.mac) {
            return Err(Step::Refused(AppendError::Read(auth_failed(&view, kind))));
        }
        Ok(OwnedView {
            stream: view.stream,
            revision: view.revision,
            position: view.position,
            digest: view.digest,
            event_id: view.event_id.to_owned(),
            kind: view.kind.to_owned(),
            occurred_at: view.occurred_at,
            payload: view.payload.to_vec(),
        })
    }

    fn identify(&self, tables: &Tables<'_>, position: u64) -> Result<(StreamId, u64), Step> {
        let v = self.read_for_write(tables, position)?;
        Ok((v.stream, v.revision))
    }

    // ----- reads -----

    fn begin_read(&self) -> Result<ReadTransaction, ReadError> {
        if !self.check_process() {
            return Err(ReadError::ForkedProcess);
        }
        Ok(self.shared.db.begin_read().map_err(StorageError::from)?)
    }

    /// The head of a stream, or `None` when it has no records.
    pub fn stream_head(&self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        let txn = self.begin_read()?;
        let head = read_head(&txn, stream)?;
        Ok(head.map(|h| StreamHead {
            revision: h.revision,
            position: h.position,
            digest: h.digest,
        }))
    }

    /// The last global position written (0 for an empty journal).
    pub fn head_position(&self) -> Result<u64, ReadError> {
        let txn = self.begin_read()?;
        let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
        Ok(records
            .last()
            .map_err(StorageError::from)?
            .map_or(0, |(k, _)| k.value()))
    }

    /// Reads up to `max` records of a stream starting at revision `from` (1-based), verifying each
    /// record's digest, MAC and chain link.
    pub fn read_stream(
        &self,
        stream: &StreamId,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, ReadError> {
        let mut out = Vec::new();
        self.visit_stream(stream, from, max, |view| {
            out.push(view.to_record());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Visits up to `max` records of a stream from revision `from`, zero-copy and verified.
    pub fn visit_stream(
        &self,
        stream: &StreamId,
        from: u64,
        max: usize,
        mut f: impl FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let txn = self.begin_read()?;
        let Some(head) = read_head(&txn, stream)? else {
            return Ok(());
        };
        let from = from.max(1);
        if from > head.revision || max == 0 {
            return Ok(());
        }
        let last = head.revision.min(from.saturating_add(max as u64 - 1));
        let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
        let chunks = txn.open_table(CHUNKS).map_err(StorageError::from)?;
        let mut scratch = AlignedVec::<16>::new();
        let mut previous = if from == 1 {
            Digest::ZERO
        } else {
            let position = position_of(&chunks, stream, &head, from - 1)?;
            let guard = get_record(&records, position, stream, from - 1)?;
            let view =
                self.decode_verified(guard.value(), &mut scratch, stream, from - 1, position)?;
            view.digest
        };
        for revision in from..=last {
            let position = position_of(&chunks, stream, &head, revision)?;
            let guard = get_record(&records, position, stream, revision)?;
            let view =
                self.decode_verified(guard.value(), &mut scratch, stream, revision, position)?;
            if view.previous_digest != previous {
                return Err(ReadError::AuthenticationFailed {
                    stream: *stream,
                    revision,
                    position,
                    reason: "the record does not chain to its predecessor",
                });
            }
            previous = view.digest;
            if f(&view).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn decode_verified<'a>(
        &self,
        value: &'a [u8],
        scratch: &'a mut AlignedVec<16>,
        stream: &StreamId,
        revision: u64,
        position: u64,
    ) -> Result<RecordView<'a>, ReadError> {
        let fail = |reason| ReadError::AuthenticationFailed {
            stream: *stream,
            revision,
            position,
            reason,
        };
        let view = decode_record(value, scratch).map_err(fail)?;
        if view.stream != *stream || view.revision != revision || view.position != position {
            return Err(fail(
                "the record's header names another place in the journal",
            ));
        }
        authenticate(&view, &self.shared.mac).map_err(|kind| auth_failed(&view, kind))?;
        Ok(view)
    }

    /// Reads up to `max` records in global order starting at position `from`, verified.
    pub fn read_all(&self, from: u64, max: usize) -> Result<Vec<Record>, ReadError> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        self.scan(from, |view| {
            out.push(view.to_record());
            if out.len() >= max {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(out)
    }

    /// Visits every record from global position `from` in commit order, zero-copy, verifying each
    /// record's digest and MAC and that positions have no gaps. Returns the number visited.
    pub fn scan(
        &self,
        from: u64,
        mut f: impl FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ReadError> {
        let txn = self.begin_read()?;
        let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
        let from = from.max(1);
        let mut scratch = AlignedVec::<16>::new();
        let mut visited = 0;
        for (expected, entry) in (from..).zip(records.range(from..).map_err(StorageError::from)?) {
            let (key, value) = entry.map_err(StorageError::from)?;
            let position = key.value();
            if position != expected {
                return Err(ReadError::Corrupt {
                    position: expected,
                    reason: format!("positions jump from {} to {position}", expected - 1),
                });
            }
            let view = decode_record(value.value(), &mut scratch).map_err(|reason| {
                ReadError::Corrupt {
                    position,
                    reason: reason.to_owned(),
                }
            })?;
            if view.position != position {
                return Err(auth_failed(&view, Integrity::Digest));
            }
            authenticate(&view, &self.shared.mac).map_err(|kind| auth_failed(&view, kind))?;
            visited += 1;
            if f(&view).is_break() {
                break;
            }
        }
        Ok(visited)
    }

    /// Reads a projection value written by a hook. The bytes have alignment 1.
    pub fn projection_get<R>(
        &self,
        table: &'static str,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, ProjectionError> {
        if !self.check_process() {
            return Err(ProjectionError::ForkedProcess);
        }
        let def = table_def(table)?;
        let txn = self.shared.db.begin_read().map_err(StorageError::from)?;
        let t = match txn.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(f(None)),
            Err(e) => return Err(StorageError::from(e).into()),
        };
        let guard = t.get(key).map_err(StorageError::from)?;
        Ok(f(guard.as_ref().map(|g| g.value())))
    }

    /// The full verification pass: every record's structure, digest, MAC and chain link, gap-free
    /// positions, contiguous revisions, and agreement of the stream heads, the per-stream position
    /// index and the event-id index with the records. Findings are reported, not raised.
    pub fn verify(&self) -> Result<VerifyReport, VerifyError> {
        if !self.check_process() {
            return Err(VerifyError::ForkedProcess);
        }
        let txn = self.shared.db.begin_read().map_err(StorageError::from)?;
        crate::verify::run(&txn, &self.shared.mac)
    }
}

/// Returns the injected failure when the `journal-before-commit` fail point is configured.
fn fail_point_before_commit() -> Option<String> {
    fail::fail_point!("journal-before-commit", |arg| Some(
        arg.unwrap_or_else(|| "injected failure before commit".to_owned())
    ));
    None
}

/// Returns the injected failure when the `journal-after-commit` fail point is configured.
fn fail_point_after_commit() -> Option<String> {
    fail::fail_point!("journal-after-commit", |arg| Some(
        arg.unwrap_or_else(|| "injected failure after commit".to_owned())
    ));
    None
}

enum Plan {
    Write,
    Replay(Vec<AppendedRecord>),
}

enum Step {
    Refused(AppendError),
    HookFailed(AppendError),
    Storage(StorageError),
}

fn storage(e: impl Into<StorageError>) -> Step {
    Step::Storage(e.into())
}

impl From<StorageError> for Step {
    fn from(e: StorageError) -> Self {
        Step::Storage(e)
    }
}

struct OwnedView {
    stream: StreamId,
    revision: u64,
    position: u64,
    digest: Digest,
    event_id: String,
    kind: String,
    occurred_at: crate::types::Timestamp,
    payload: Vec<u8>,
}

impl OwnedView {
    fn same_content(&self, stream: &StreamId, new: &crate::types::NewRecord) -> bool {
        self.stream == *stream
            && self.event_id == new.event_id
            && self.kind == new.kind
            && self.occurred_at == new.occurred_at
            && self.payload == new.payload
    }
}

pub(crate) fn auth_failed(view: &RecordView<'_>, kind: Integrity) -> ReadError {
    ReadError::AuthenticationFailed {
        stream: view.stream,
        revision: view.revision,
        position: view.position,
        reason: match kind {
            Integrity::Digest => "the record digest does not match its content",
            Integrity::Mac => "the record MAC does not match the installation key",
        },
    }
}

struct Tables<'t> {
    records: Table<'t, u64, &'static [u8]>,
    streams: Table<'t, &'static [u8], &'static [u8]>,
    chunks: Table<'t, &'static [u8], &'static [u8]>,
    event_ids: Table<'t, &'static str, u64>,
    meta: Table<'t, &'static str, &'static [u8]>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Tables<'t>, StorageError> {
        Ok(Tables {
            records: txn.open_table(RECORDS)?,
            streams: txn.open_table(STREAMS)?,
            chunks: txn.open_table(CHUNKS)?,
            event_ids: txn.open_table(EVENT_IDS)?,
            meta: txn.open_table(META)?,
        })
    }
}

/// What the current group has written but not committed: heads of touched streams (flushed to
/// the streams table once per group) and event ids (moved into the writer's map after commit).
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

    fn head(&mut self, tables: &Tables<'_>, stream: &StreamId) -> Result<Option<&HeadState>, Step> {
        let entry = match self.heads.entry(*stream) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let head = match tables
                    .streams
                    .get(stream.as_bytes().as_slice())
                    .map_err(storage)?
                {
                    Some(g) => Some(HeadState::decode(g.value()).map_err(|reason| {
                        Step::Refused(AppendError::Read(ReadError::Corrupt {
                            position: 0,
                            reason: format!("stream {stream}: {reason}"),
                        }))
                    })?),
                    None => None,
                };
                v.insert(head)
            }
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
    ) -> Result<(), Step> {
        let mut head = previous.unwrap_or(HeadState {
            revision: 0,
            position: 0,
            digest: Digest::ZERO,
            tail: Vec::new(),
        });
        head.revision += 1;
        head.position = position;
        head.digest = digest;
        head.tail.push(position);
        if head.revision.is_multiple_of(STREAM_CHUNK_REVISIONS) {
            let chunk = head.revision / STREAM_CHUNK_REVISIONS - 1;
            let key = chunk_key(&stream, chunk);
            tables
                .chunks
                .insert(key.as_slice(), encode_chunk(&head.tail).as_slice())
                .map_err(storage)?;
            head.tail.clear();
        }
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
        for stream in &self.dirty {
            if let Some(Some(head)) = self.heads.get(stream) {
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
) -> Result<Option<u64>, Step> {
    if let Some(p) = staged.event_ids.get(event_id) {
        return Ok(Some(*p));
    }
    if let Some(p) = writer.recent.get(event_id) {
        return Ok(Some(*p));
    }
    Ok(tables
        .event_ids
        .get(event_id)
        .map_err(storage)?
        .map(|g| g.value()))
}

/// Merges the unmerged event ids into the on-disk index in key order, so the B-tree pages are
/// touched once per merge instead of once per record (spec/journal.md, J9).
fn merge_event_index(
    tables: &mut Tables<'_>,
    writer: &Writer,
    staged: &Staged,
) -> Result<(), StorageError> {
    let mut all: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, v) in &writer.recent {
        all.insert(k, *v);
    }
    for (k, v) in &staged.event_ids {
        all.insert(k, *v);
    }
    for (k, v) in all {
        tables.event_ids.insert(k, v)?;
    }
    tables.meta.insert(
        META_EVENT_INDEX_UPTO,
        staged.next_position.to_le_bytes().as_slice(),
    )?;
    Ok(())
}

fn read_head(txn: &ReadTransaction, stream: &StreamId) -> Result<Option<HeadState>, ReadError> {
    let streams = match txn.open_table(STREAMS) {
        Ok(t) => t,
        Err(e) => return Err(StorageError::from(e).into()),
    };
    match streams
        .get(stream.as_bytes().as_slice())
        .map_err(StorageError::from)?
    {
        Some(g) => HeadState::decode(g.value())
            .map(Some)
            .map_err(|reason| ReadError::Corrupt {
                position: 0,
                reason: format!("stream {stream}: {reason}"),
            }),
        None => Ok(None),
    }
}

pub(crate) fn position_of(
    chunks: &impl ReadableTable<&'static [u8], &'static [u8]>,
    stream: &StreamId,
    head: &HeadState,
    revision: u64,
) -> Result<u64, ReadError> {
    let index = (revision - 1) % STREAM_CHUNK_REVISIONS;
    let chunk = (revision - 1) / STREAM_CHUNK_REVISIONS;
    let sealed = head.revision / STREAM_CHUNK_REVISIONS;
    let corrupt = |reason: &str| ReadError::Corrupt {
        position: 0,
        reason: format!("position index of stream {stream} at revision {revision}: {reason}"),
    };
    if chunk < sealed {
        let key = chunk_key(stream, chunk);
        let guard = chunks
            .get(key.as_slice())
            .map_err(StorageError::from)?
            .ok_or_else(|| corrupt("a sealed chunk is missing"))?;
        chunk_position(guard.value(), index).map_err(corrupt)
    } else {
        head.tail
            .get(index as usize)
            .copied()
            .ok_or_else(|| corrupt("the head has no such entry"))
    }
}

fn get_record<'a>(
    records: &'a redb::ReadOnlyTable<u64, &'static [u8]>,
    position: u64,
    stream: &StreamId,
    revision: u64,
) -> Result<redb::AccessGuard<'a, &'static [u8]>, ReadError> {
    records
        .get(position)
        .map_err(StorageError::from)?
        .ok_or(ReadError::AuthenticationFailed {
            stream: *stream,
            revision,
            position,
            reason: "the record is missing",
        })
}

fn validate_batch(batch: &[StreamAppend]) -> Result<usize, InputError> {
    if batch.is_empty() {
        return Err(InputError::Empty);
    }
    if batch.len() > BATCH_STREAMS_MAX {
        return Err(InputError::TooManyStreams {
            count: batch.len(),
            max: BATCH_STREAMS_MAX,
        });
    }
    let mut streams = HashSet::new();
    let mut event_ids = HashSet::new();
    let mut records = 0usize;
    let mut bytes = 0usize;
    for part in batch {
        if !streams.insert(part.stream) {
            return Err(InputError::DuplicateStream {
                stream: part.stream,
            });
        }
        if part.records.is_empty() {
            return Err(InputError::EmptyStream {
                stream: part.stream,
            });
        }
        if part.expected == ExpectedRevision::Exact(0) {
            return Err(InputError::ExactZero {
                stream: part.stream,
            });
        }
        records += part.records.len();
        if records > BATCH_RECORDS_MAX {
            return Err(InputError::TooManyRecords {
                count: records,
                max: BATCH_RECORDS_MAX,
            });
        }
        for record in &part.records {
            record.validate()?;
            bytes += record.payload.len();
            if !event_ids.insert(record.event_id.as_str()) {
                return Err(InputError::DuplicateEventId {
                    event_id: record.event_id.clone(),
                });
            }
        }
    }
    if bytes > BATCH_PAYLOAD_MAX_BYTES {
        return Err(InputError::BatchTooLarge {
            bytes,
            max: BATCH_PAYLOAD_MAX_BYTES,
        });
    }
    Ok(records)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Creates the tables of a new journal or checks the format of an existing one, and rebuilds the
/// writer's in-memory state: the next position and the unmerged event ids.
fn initialize(
    db: &Database,
    mac: &MacKey,
    path: &Path,
) -> Result<(Writer, Option<String>), OpenError> {
    let txn = db.begin_write().map_err(StorageError::from)?;
    let (event_index_upto, next_position) = {
        let tables = Tables::open(&txn)?;
        let mut meta = tables.meta;
        let format = meta
            .get(META_FORMAT)
            .map_err(StorageError::from)?
            .map(|g| g.value().to_vec());
        match format {
            None => {
                if !tables.records.is_empty().map_err(StorageError::from)? {
                    return Err(OpenError::Corrupt {
                        path: path.into(),
                        reason: "records exist but the format version is missing".into(),
                    });
                }
                meta.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                    .map_err(StorageError::from)?;
                meta.insert(META_EVENT_INDEX_UPTO, 1u64.to_le_bytes().as_slice())
                    .map_err(StorageError::from)?;
            }
            Some(bytes) => {
                let found = <[u8; 4]>::try_from(bytes.as_slice())
                    .map(u32::from_le_bytes)
                    .map_err(|_| OpenError::Corrupt {
                        path: path.into(),
                        reason: "the format version is not 4 bytes".into(),
                    })?;
                if found != FORMAT_VERSION {
                    return Err(OpenError::FormatVersion {
                        path: path.into(),
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
            }
        }
        let upto = meta
            .get(META_EVENT_INDEX_UPTO)
            .map_err(StorageError::from)?
            .and_then(|g| <[u8; 8]>::try_from(g.value()).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| OpenError::Corrupt {
                path: path.into(),
                reason: "the event index checkpoint is missing".into(),
            })?;
        let next = tables
            .records
            .last()
            .map_err(StorageError::from)?
            .map_or(1, |(k, _)| k.value() + 1);
        (upto, next)
    };
    txn.commit().map_err(StorageError::from)?;
    if event_index_upto == 0 || event_index_upto > next_position {
        return Err(OpenError::Corrupt {
            path: path.into(),
            reason: format!(
                "the event index checkpoint {event_index_upto} is past the last record {}",
                next_position - 1
            ),
        });
    }
    let mut recent = HashMap::new();
    let read = db.begin_read().map_err(StorageError::from)?;
    let records = read.open_table(RECORDS).map_err(StorageError::from)?;
    let mut scratch = AlignedVec::<16>::new();
    let mut refusal = None;
    for entry in records
        .range(event_index_upto..)
        .map_err(StorageError::from)?
    {
        let (key, value) = entry.map_err(StorageError::from)?;
        let position = key.value();
        // A record that does not authenticate could hide an event id, and appending past it
        // could then duplicate an event; reads and the verification pass stay available.
        match decode_record(value.value(), &mut scratch) {
            Ok(view) if view.position == position && authenticate(&view, mac).is_ok() => {
                recent.insert(Box::from(view.event_id), position);
            }
            Ok(view) => {
                refusal.get_or_insert_with(|| {
                    format!(
                        "authentication failed for stream {} revision {} (position {position})",
                        view.stream, view.revision
                    )
                });
            }
            Err(reason) => {
                refusal.get_or_insert_with(|| format!("record at position {position}: {reason}"));
            }
        }
    }
    Ok((
        Writer {
            next_position,
            event_index_upto,
            recent,
        },
        refusal,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::hook::HookError;
    use crate::types::{NewRecord, Timestamp};

    fn record(id: &str, payload: &[u8]) -> NewRecord {
        NewRecord::new(id, "unit", Timestamp(7), payload.to_vec())
    }

    /// Counts records per kind in a projection table and refuses payloads starting with "bad".
    struct Counter;

    impl ProjectionHook for Counter {
        fn name(&self) -> &str {
            "counter"
        }

        fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
            let key = record.stream.as_bytes().as_slice();
            let n = tx.get("proj.counter", key, |v| {
                v.map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            })?;
            tx.insert("proj.counter", key, &(n + 1).to_le_bytes())?;
            if record.payload.starts_with(b"bad") {
                return Err(HookError::new("payload starts with bad"));
            }
            Ok(())
        }
    }

    fn count(j: &Journal, s: &StreamId) -> u64 {
        j.projection_get("proj.counter", s.as_bytes(), |v| {
            v.map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
        })
        .unwrap()
    }

    #[test]
    fn hook_failure_aborts_only_its_own_append_inside_a_group() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        j.register_hook(Arc::new(Counter));
        let a = StreamId::derive("unit", b"a").unwrap();
        let b = StreamId::derive("unit", b"b").unwrap();
        // Queue three requests and commit them as one group by leading it from this thread.
        let mut writer = lock(&j.shared.writer);
        let slots: Vec<_> = [
            vec![StreamAppend::new(
                a,
                ExpectedRevision::NoStream,
                vec![record("a1", b"ok")],
            )],
            vec![StreamAppend::new(
                b,
                ExpectedRevision::NoStream,
                vec![record("b1", b"bad")],
            )],
            // Refused while b1 is in the group (b1 made stream b exist), accepted once b1 is out.
            vec![StreamAppend::new(
                b,
                ExpectedRevision::NoStream,
                vec![record("b2", b"ok")],
            )],
        ]
        .into_iter()
        .map(|batch| {
            let slot = Arc::new(Mutex::new(None));
            lock(&j.shared.queue).pending.push(Pending {
                batch,
                records: 1,
                slot: slot.clone(),
            });
            slot
        })
        .collect();
        let group = take_group(&mut lock(&j.shared.queue).pending);
        assert_eq!(group.len(), 3);
        j.commit_group(&mut writer, group);
        drop(writer);
        let replies: Vec<Reply> = slots.iter().map(|s| lock(s).take().unwrap()).collect();
        assert_eq!(replies[0].as_ref().unwrap()[0].records[0].position, 1);
        assert!(
            matches!(&replies[1], Err(AppendError::Hook { hook, event_id, .. })
            if hook == "counter" && event_id == "b1")
        );
        let b2 = &replies[2].as_ref().unwrap()[0];
        assert_eq!((b2.records[0].revision, b2.records[0].position), (1, 2));
        assert_eq!(j.read_stream(&b, 1, 10).unwrap()[0].event_id, "b2");
        assert_eq!((count(&j, &a), count(&j, &b)), (1, 1));
        assert!(j.verify().unwrap().is_ok());
    }

    #[test]
    fn a_handle_from_another_process_id_refuses_to_work() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let s = StreamId::derive("unit", b"fork").unwrap();
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![record("f1", b"x")],
        ))
        .unwrap();
        // A forked child inherits the handle with the parent's pid; simulate that child by
        // building a handle whose recorded pid is not ours.
        let foreign_pid = std::process::id().wrapping_add(1);
        let err = with_pid(&j, foreign_pid, |h| {
            h.append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record("f2", b"y")],
            ))
        })
        .unwrap_err();
        assert!(matches!(err, AppendError::ForkedProcess), "{err}");
        assert!(err.to_string().contains("forked"));
        let err = with_pid(&j, foreign_pid, |h| h.read_stream(&s, 1, 10)).unwrap_err();
        assert!(matches!(err, ReadError::ForkedProcess));
        assert_eq!(j.read_stream(&s, 1, 10).unwrap().len(), 1);
    }

    /// Runs `f` with a handle that believes it was opened by process `pid`.
    fn with_pid<R>(j: &Journal, pid: u32, f: impl FnOnce(&Journal) -> R) -> R {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder()
            .create(dir.path().join("x.redb"))
            .unwrap();
        let fake = Journal {
            shared: Arc::new(Shared {
                db,
                mac: j.shared.mac.clone(),
                data_dir: dir.path().to_path_buf(),
                pid,
                queue: Mutex::new(Queue::default()),
                group_done: Condvar::new(),
                writer: Mutex::new(Writer {
                    next_position: 1,
                    event_index_upto: 1,
                    recent: HashMap::new(),
                }),
                failed: AtomicBool::new(false),
                write_refusal: None,
                created: true,
                hooks: RwLock::new(Vec::new()),
                _lock: lock::acquire(dir.path(), Duration::ZERO).unwrap(),
            }),
        };
        f(&fake)
    }

    #[test]
    fn the_event_index_merges_and_still_finds_old_event_ids() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let s = StreamId::derive("unit", b"merge").unwrap();
        let total = EVENT_INDEX_MERGE_RECORDS + 100;
        let mut next = 1;
        while next <= total {
            let n = (total - next + 1).min(4000);
            let records = (next..next + n)
                .map(|i| record(&format!("m{i}"), b"p"))
                .collect();
            j.append(StreamAppend::new(s, ExpectedRevision::Any, records))
                .unwrap();
            next += n;
        }
        assert!(
            lock(&j.shared.writer).event_index_upto > 1,
            "a merge happened"
        );
        let replay = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record("m5", b"p")],
            ))
            .unwrap();
        assert!(replay.replayed);
        assert_eq!(replay.records[0].revision, 5);
        drop(j);
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let tail = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record(&format!("m{total}"), b"p")],
            ))
            .unwrap();
        assert!(tail.replayed);
        assert_eq!(tail.records[0].revision, total);
        let report = j.verify().unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.records, total);
    }
}
