//! Appends: request validation, the leader/follower group commit, idempotency and expected
//! revision checks, writing records, heads and sealed chunks, projection hooks, and the bulk merge
//! of the event-id index (spec/journal.md, "Appends").

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use redb::{ReadableTable, Table, WriteTransaction};
use rkyv::util::AlignedVec;

use crate::codec::{
    self, HeadState, RecordView, authenticate, chunk_key, decode_record, encode_chunk, event_key,
    record_digest,
};
use crate::error::{AppendError, InputError, ReadError, StorageError};
use crate::hook::{HookTxn, ProjectionHook};
use crate::journal::{
    CHUNKS, EVENT_IDS, Journal, META, META_EVENT_INDEX_UPTO, RECORDS, STREAMS, Writer, auth_failed,
    lock,
};
use crate::limits::{
    BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, EVENT_INDEX_MERGE_RECORDS,
    GROUP_RECORDS_MAX, STREAM_CHUNK_REVISIONS,
};
use crate::types::{
    AppendOutcome, AppendedRecord, Digest, ExpectedRevision, Record, StreamAppend, StreamId,
};

pub(crate) type Reply = Result<Vec<AppendOutcome>, AppendError>;

/// Requests waiting for a group commit, and whether a leader is committing one now.
#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) pending: Vec<Pending>,
    pub(crate) leading: bool,
    /// Requests in the previous group: how many callers are likely to come back soon.
    pub(crate) last_group: usize,
}

/// Most scheduler turns a new leader gives returning callers before it drains the queue.
const GATHER_TURNS_MAX: u32 = 4;

/// Takes whole requests from the front of the queue, up to `GROUP_RECORDS_MAX` records (a
/// single larger request still goes alone).
pub(crate) fn take_group(pending: &mut Vec<Pending>) -> Vec<Pending> {
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

pub(crate) struct Pending {
    batch: Vec<StreamAppend>,
    records: usize,
    slot: Arc<Mutex<Option<Reply>>>,
}

impl Journal {
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
            // Callers answered by the previous group are usually about to queue their next
            // request. Giving them a few scheduler turns before draining turns alternating groups
            // of 1 and N-1 into groups of N; it costs microseconds against a commit's fsync.
            let mut turns = 0;
            while queue.pending.len() < queue.last_group && turns < GATHER_TURNS_MAX {
                drop(queue);
                std::thread::yield_now();
                turns += 1;
                queue = lock(&self.shared.queue);
            }
            let group = take_group(&mut queue.pending);
            queue.last_group = group.len();
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
                            // A request that only replays stored records writes nothing: a group
                            // of those and refusals does not commit.
                            written[i] = outcomes.iter().any(|o| !o.replayed);
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
        let mut scratch = AlignedVec::<16>::new();
        for part in batch {
            let mut existing = Vec::with_capacity(part.records.len());
            for record in &part.records {
                existing.push(lookup_event(
                    tables,
                    staged,
                    writer,
                    &record.event_id,
                    &mut scratch,
                )?);
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
                            .ok_or(Step::Storage(StorageError::message(
                                "event lookup changed under the writer",
                            )))?;
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
                                code: e.code(),
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

    fn read_for_write(&self, tables: &Tables<'_>, position: u64) -> Result<Record, Step> {
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
        Ok(view.to_record())
    }

    fn identify(&self, tables: &Tables<'_>, position: u64) -> Result<(StreamId, u64), Step> {
        let v = self.read_for_write(tables, position)?;
        Ok((v.stream, v.revision))
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

/// Moves `head` of `stream` to a new record at `position` with digest `digest`, sealing a full
/// chunk of positions into `chunks` (spec/journal.md §4). Shared by appends and imports, so both
/// write the same layout.
pub(crate) fn advance_head(
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

impl From<StorageError> for Step {
    fn from(e: StorageError) -> Self {
        Step::Storage(e)
    }
}

pub(crate) struct Tables<'t> {
    pub(crate) records: Table<'t, u64, &'static [u8]>,
    pub(crate) streams: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) chunks: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) event_ids: Table<'t, (u64, u64), ()>,
    pub(crate) meta: Table<'t, &'static str, &'static [u8]>,
}

impl<'t> Tables<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Tables<'t>, StorageError> {
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
        let mut head = previous.unwrap_or_else(HeadState::empty);
        advance_head(&mut tables.chunks, &stream, &mut head, position, digest).map_err(storage)?;
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
    scratch: &mut AlignedVec<16>,
) -> Result<Option<u64>, Step> {
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
        .map_err(storage)?
    {
        let position = entry.map_err(storage)?.0.value().1;
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
        let view = decode_record(guard.value(), scratch).map_err(|reason| {
            Step::Refused(AppendError::Read(ReadError::Corrupt {
                position,
                reason: reason.into(),
            }))
        })?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Condvar, RwLock};
    use std::time::Duration;

    use redb::Database;

    use super::*;
    use crate::codec::event_key;
    use crate::hook::HookError;
    use crate::journal::{EVENT_IDS, OpenOptions, Shared};
    use crate::lock;
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
        assert!(j.register_hook(Arc::new(Counter)));
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
                keyed: j.shared.keyed.clone(),
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

    #[test]
    fn an_event_index_hash_collision_is_resolved_by_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let s = StreamId::derive("unit", b"collide").unwrap();
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![record("a1", b"p")],
        ))
        .unwrap();
        // Forge what a 64-bit collision would look like: the key of "zzz" pointing at the record
        // of "a1", in the merged part of the index.
        {
            let _writer = lock(&j.shared.writer);
            let txn = j.shared.db.begin_write().unwrap();
            txn.open_table(EVENT_IDS)
                .unwrap()
                .insert((event_key("zzz"), 1), ())
                .unwrap();
            txn.commit().unwrap();
        }
        let new = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Exact(1),
                vec![record("zzz", b"q")],
            ))
            .unwrap();
        assert!(!new.replayed);
        assert_eq!((new.records[0].revision, new.records[0].position), (2, 2));
        // The forged entry is an index entry without its record, which verify reports.
        let report = j.verify().unwrap();
        assert_eq!(report.failures.len(), 1, "{report:?}");
        assert_eq!(
            report.failures[0].kind,
            crate::verify::FailureKind::EventIndex
        );
    }
}
