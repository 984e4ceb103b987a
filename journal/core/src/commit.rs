//! Appends: request validation, the leader/follower group commit, idempotency and expected
//! revision checks, writing records, heads and sealed chunks, projection hooks, and the bulk merge
//! of the event-id index (spec/journal.md, "Appends").

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use rkyv::util::AlignedVec;

use crate::backend::{CommitError, Finish, PutRecord, WriteTxn};
use crate::codec::{self, RecordView};
use crate::error::{AppendError, ConflictKind, ReadError, StorageError};
use crate::hook::{HookTxn, ProjectionHook};
use crate::limits::{
    BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, GROUP_RECORDS_MAX, POSITION_MAX,
};
use crate::shared::{Pending, Reply, Shared};
use crate::sync::lock;
use crate::types::{
    AppendOutcome, AppendedRecord, Digest, ExpectedRevision, InputError, Record, StreamAppend,
    record_digest,
};
use crate::verified::verified_at;

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

impl Shared {
    /// [`crate::Journal::append`].
    pub(crate) fn append(&self, append: StreamAppend) -> Result<AppendOutcome, AppendError> {
        let mut outcomes = self.append_batch(vec![append])?;
        // append_batch returns exactly one outcome per stream append it was given.
        outcomes.pop().ok_or(AppendError::Input(InputError::Empty))
    }

    /// [`crate::Journal::append_batch`].
    pub(crate) fn append_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        if !self.check_process() {
            return Err(AppendError::ForkedProcess);
        }
        let records = validate_batch(&batch)?;
        if let Some(detail) = &self.write_refusal {
            return Err(AppendError::Integrity {
                detail: detail.clone(),
            });
        }
        if self.is_fail_stopped() {
            return Err(AppendError::FailStopped);
        }
        let slot = Arc::new(Mutex::new(None));
        let mut queue = lock(&self.queue);
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
                queue = lock(&self.queue);
            }
            let group = take_group(&mut queue.pending);
            queue.last_group = group.len();
            drop(queue);
            {
                let _commit = lock(&self.commit);
                self.commit_group(group);
            }
            queue = lock(&self.queue);
            queue.leading = false;
            self.group_done.notify_all();
        }
    }

    /// Commits one group and fills every request's slot.
    fn commit_group(&self, group: Vec<Pending>) {
        if self.is_fail_stopped() {
            for p in &group {
                *lock(&p.slot) = Some(Err(AppendError::FailStopped));
            }
            return;
        }
        let hooks: Vec<Arc<dyn ProjectionHook>> = self
            .hooks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run_group(&group, &hooks)
        }));
        let replies = match run {
            Ok(replies) => replies,
            Err(_) => {
                self.failed.store(true, Ordering::Release);
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

    /// Runs one group commit in one backend write transaction. Requests that are refused write
    /// nothing; a request whose hook fails has written into the transaction, so the transaction is
    /// aborted and the group re-run without it.
    fn run_group(&self, group: &[Pending], hooks: &[Arc<dyn ProjectionHook>]) -> Vec<Reply> {
        let mut replies: Vec<Option<Reply>> = group.iter().map(|_| None).collect();
        // Requests whose hook failed; they stay out of every later attempt.
        let mut excluded = vec![false; group.len()];
        loop {
            let mut retry = false;
            let mut injected = None;
            let ended = self.backend.write(&mut |txn| {
                retry = false;
                injected = None;
                let mut written = false;
                for (i, pending) in group.iter().enumerate() {
                    if excluded[i] {
                        continue;
                    }
                    match self.apply(txn, &pending.batch, hooks) {
                        Ok(outcomes) => {
                            // A request that only replays stored records writes nothing: a group
                            // of those and refusals does not commit.
                            written |= outcomes.iter().any(|o| !o.replayed);
                            replies[i] = Some(Ok(outcomes));
                        }
                        Err(Step::Refused(e)) => replies[i] = Some(Err(e)),
                        Err(Step::HookFailed(e)) => {
                            // The failed request has written into this transaction: drop it and
                            // decide every other request afresh, since a refusal may have
                            // depended on what the excluded request wrote.
                            for (j, reply) in replies.iter_mut().enumerate() {
                                if !excluded[j] {
                                    *reply = None;
                                }
                            }
                            excluded[i] = true;
                            replies[i] = Some(Err(e));
                            retry = true;
                            return Ok(Finish::Abort);
                        }
                        Err(Step::Storage(e)) => return Err(e),
                    }
                }
                if !written {
                    return Ok(Finish::Abort);
                }
                injected = fail_point_before_commit();
                if injected.is_some() {
                    return Ok(Finish::Abort);
                }
                Ok(Finish::Commit)
            });
            if retry {
                continue;
            }
            if let Some(reason) = injected {
                // The transaction was aborted: nothing of it can have been written.
                return self.fail_all(&mut replies, reason, false);
            }
            match ended {
                Ok(Finish::Abort) => {}
                Ok(Finish::Commit) => {
                    if let Some(reason) = fail_point_after_commit() {
                        return self.fail_all(&mut replies, reason, true);
                    }
                }
                Err(CommitError::NotCommitted(e)) => {
                    return self.fail_all(&mut replies, e.to_string(), false);
                }
                Err(CommitError::MaybeCommitted(e)) => {
                    return self.fail_all(&mut replies, e.to_string(), true);
                }
            }
            return replies
                .into_iter()
                .map(|r| r.unwrap_or(Err(AppendError::FailStopped)))
                .collect();
        }
    }

    /// Answers every request still waiting after a failed commit. On a backend that caches state
    /// across transactions (redb), any failure fail-stops the journal: it refuses writes until
    /// reopened, because it cannot know what reached the disk, and every answer is "maybe
    /// committed". On other backends only an `uncertain` commit answers "maybe committed", the
    /// rest "not committed", and the journal goes on.
    fn fail_all(
        &self,
        replies: &mut [Option<Reply>],
        reason: String,
        uncertain: bool,
    ) -> Vec<Reply> {
        let stop = self.backend.fail_stop_on_uncertain_commit();
        if stop {
            self.failed.store(true, Ordering::Release);
        }
        replies
            .iter_mut()
            .map(|r| match r.take() {
                Some(Err(e)) => Err(e),
                _ if uncertain || stop => Err(AppendError::MaybeCommitted {
                    reason: reason.clone(),
                }),
                _ => Err(AppendError::NotCommitted {
                    reason: reason.clone(),
                }),
            })
            .collect()
    }

    /// Applies one request to the transaction: all checks first, then the writes.
    fn apply(
        &self,
        txn: &mut dyn WriteTxn,
        batch: &[StreamAppend],
        hooks: &[Arc<dyn ProjectionHook>],
    ) -> Result<Vec<AppendOutcome>, Step> {
        // Phase 1: decide each stream's fate without writing.
        let streams: Vec<_> = batch.iter().map(|part| part.stream).collect();
        let event_ids: Vec<&str> = batch
            .iter()
            .flat_map(|part| part.records.iter().map(|r| r.event_id.as_str()))
            .collect();
        txn.prefetch(&streams, &event_ids).map_err(read)?;
        let mut plans = Vec::with_capacity(batch.len());
        for part in batch {
            let mut existing = Vec::with_capacity(part.records.len());
            for record in &part.records {
                existing.push(txn.find_event(&record.event_id).map_err(read)?);
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
                        let stored = self.read_for_write(txn, pos)?;
                        let kind = if stored.stream == part.stream {
                            ConflictKind::PartialRetry
                        } else {
                            ConflictKind::OtherStream
                        };
                        return Err(Step::Refused(AppendError::Conflict {
                            event_id: other.event_id.clone(),
                            stream: stored.stream,
                            revision: stored.revision,
                            kind,
                        }));
                    };
                    let stored = self.read_for_write(txn, *position)?;
                    if !stored.same_content(&part.stream, record) {
                        // Another stream is named first: no content could make that a retry.
                        let kind = if stored.stream == part.stream {
                            ConflictKind::OtherContent
                        } else {
                            ConflictKind::OtherStream
                        };
                        return Err(Step::Refused(AppendError::Conflict {
                            event_id: record.event_id.clone(),
                            stream: stored.stream,
                            revision: stored.revision,
                            kind,
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
            let current = txn
                .head(&part.stream)
                .map_err(read)?
                .map_or(0, |h| h.revision);
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
                let head = txn.head(&part.stream).map_err(read)?;
                let (revision, previous) =
                    head.map_or((1, Digest::ZERO), |h| (h.revision + 1, h.digest));
                let position = txn.next_position().map_err(read)?;
                if position >= POSITION_MAX || revision >= POSITION_MAX {
                    return Err(Step::Storage(StorageError::message(format!(
                        "position {position} or revision {revision} of stream {} is past the journal's limit",
                        part.stream
                    ))));
                }
                let digest = record_digest(
                    &part.stream,
                    revision,
                    &record.event_id,
                    &record.kind,
                    record.occurred_at,
                    &previous,
                    &record.payload,
                );
                let mac = self.mac.tag(position, &digest);
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
                txn.put_record(&PutRecord {
                    stream: part.stream,
                    revision,
                    position,
                    event_id: &record.event_id,
                    digest,
                    bytes: &value,
                })
                .map_err(Step::Storage)?;
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
                    let hook_txn = HookTxn::new(&mut *txn, &self.mac, self.scan_threads);
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

    /// Reads and authenticates the record at `position` for an idempotency decision.
    fn read_for_write(&self, txn: &mut dyn WriteTxn, position: u64) -> Result<Record, Step> {
        let mut found = None;
        let mut scratch = AlignedVec::<16>::new();
        txn.record(position, &mut |bytes| {
            found = Some(bytes.map(|bytes| {
                verified_at(bytes, position, &mut scratch, &self.mac).map(|v| v.to_record())
            }));
        })
        .map_err(read)?;
        match found.flatten() {
            None => Err(Step::Refused(AppendError::Read(ReadError::Corrupt {
                position,
                reason: "the event index names a position with no record".to_owned(),
            }))),
            Some(Err(e)) => Err(Step::Refused(AppendError::Read(e))),
            Some(Ok(record)) => Ok(record),
        }
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

/// A read inside the write transaction: a storage failure stops the group, a corrupt record
/// refuses only the request that met it.
fn read(e: ReadError) -> Step {
    match e {
        ReadError::Storage(e) => Step::Storage(e),
        e => Step::Refused(AppendError::Read(e)),
    }
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

    use std::sync::atomic::AtomicBool;
    use std::sync::{Condvar, RwLock};
    use std::time::Duration;

    use super::*;
    use crate::codec::event_key;
    use crate::hook::HookError;
    use crate::journal::{Journal, OpenOptions};
    use crate::limits::EVENT_INDEX_MERGE_RECORDS;
    use crate::lock;
    use crate::redb::RedbBackend;
    use crate::redb::testing;
    use crate::shared::Queue;
    use crate::types::StreamId;
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
        let commit = lock(&j.shared.commit);
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
        j.shared.commit_group(group);
        drop(commit);
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
        let fake = Journal {
            shared: Arc::new(Shared {
                backend: testing::scratch_backend(&dir.path().join("x.redb")),
                mac: j.shared.mac.clone(),
                keyed: j.shared.keyed.clone(),
                data_dir: dir.path().to_path_buf(),
                pid,
                queue: Mutex::new(Queue::default()),
                group_done: Condvar::new(),
                commit: Mutex::new(()),
                failed: AtomicBool::new(false),
                write_refusal: None,
                created: true,
                hooks: RwLock::new(Vec::new()),
                scan_threads: 1,
                _lock: Some(lock::acquire(dir.path(), Duration::ZERO).unwrap()),
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
            RedbBackend::of(&j).event_index_upto() > 1,
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
    fn a_handle_with_a_small_merge_threshold_keeps_the_unmerged_tail_small() {
        let dir = tempfile::tempdir().unwrap();
        let small = OpenOptions::new().event_index_merge_records(8);
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let s = StreamId::derive("unit", b"small-merge").unwrap();
        for i in 1..=20 {
            j.append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record(&format!("d{i}"), b"p")],
            ))
            .unwrap();
        }
        assert_eq!(
            RedbBackend::of(&j).event_index_upto(),
            1,
            "the default threshold merges nothing of 20 records"
        );
        drop(j);
        // The first commit of a handle with threshold 8 merges the 20 unmerged ids, and the
        // tail then never reaches 8.
        let j = Journal::open(dir.path(), &small).unwrap();
        for i in 21..=40 {
            j.append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record(&format!("d{i}"), b"p")],
            ))
            .unwrap();
            let unmerged = i + 1 - RedbBackend::of(&j).event_index_upto();
            assert!(unmerged < 8, "{unmerged} unmerged after record {i}");
        }
        // Old ids are still found, through the merged index.
        let replay = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![record("d3", b"p")],
            ))
            .unwrap();
        assert!(replay.replayed);
        assert_eq!(replay.records[0].revision, 3);
        let report = j.verify().unwrap();
        assert!(report.is_ok(), "{report:?}");
    }

    #[test]
    #[should_panic(expected = "event_index_merge_records must be between 1 and")]
    fn a_merge_threshold_above_the_limit_is_a_programmer_error() {
        let _ = OpenOptions::new().event_index_merge_records(EVENT_INDEX_MERGE_RECORDS + 1);
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
            let _commit = lock(&j.shared.commit);
            testing::insert_event_index(&j, event_key("zzz"), 1);
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
