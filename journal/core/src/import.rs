//! Import: exported records appended into an empty journal in one write transaction, each record
//! checked to reproduce its exported digest and chain (spec/journal.md §13).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use crate::backend::{CommitError, Finish, PutRecord};
use crate::codec::{MacKey, RecordView, encode_record};
use crate::error::StorageError;
use crate::hook::{HookTxn, ProjectionHook};
use crate::journal::Journal;
use crate::limits::POSITION_MAX;
use crate::sync::lock;
use crate::types::{AppendedRecord, Digest, InputError, NewRecord, StreamId, record_digest};

/// One exported record, as [`Importer::push`] takes it: its place in the exporting journal and
/// its content, previous digest and digest. The digest is the installation-independent D
/// (spec/journal.md §3), so an import into another installation reproduces it; the MAC is not
/// exported and is made afresh under the importing journal's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportRecord {
    pub stream: StreamId,
    pub revision: u64,
    pub position: u64,
    pub record: NewRecord,
    pub previous_digest: Digest,
    pub digest: Digest,
}

/// Why an import was refused or failed. Every refusal leaves the journal unchanged: the import is
/// one write transaction, committed only after the last record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("the journal already holds {records} records; an import needs an empty journal")]
    NotEmpty { records: u64 },
    #[error("the record at position {position} is refused: {error}")]
    Input { position: u64, error: InputError },
    #[error("the record at position {found} is out of order: the next position is {expected}")]
    Position { expected: u64, found: u64 },
    #[error(
        "stream {stream} revision {found} (position {position}) is out of order: the stream is at revision {current}"
    )]
    Revision {
        stream: StreamId,
        current: u64,
        found: u64,
        position: u64,
    },
    #[error(
        "stream {stream} revision {revision} (position {position}) does not chain: its previous digest {found} is not {expected}, the digest of the revision before it"
    )]
    Chain {
        stream: StreamId,
        revision: u64,
        position: u64,
        expected: Digest,
        found: Digest,
    },
    #[error(
        "stream {stream} revision {revision} (position {position}) does not reproduce its digest: the content hashes to {computed}, the export says {found}"
    )]
    Digest {
        stream: StreamId,
        revision: u64,
        position: u64,
        computed: Digest,
        found: Digest,
    },
    #[error(
        "event id {event_id} at position {position} is already used by the record at position {first}"
    )]
    DuplicateEventId {
        event_id: String,
        position: u64,
        first: u64,
    },
    #[error("projection hook {hook} refused record {event_id}: {message}")]
    Hook {
        hook: String,
        event_id: String,
        message: String,
        code: Option<&'static str>,
    },
    #[error("the record at position {position} read back from the import is corrupt: {reason}")]
    Corrupt { position: u64, reason: &'static str },
    #[error(
        "this journal handle was opened before the process forked; a forked process cannot use it"
    )]
    ForkedProcess,
    #[error("the journal stopped accepting writes after a failed commit; reopen it")]
    FailStopped,
    #[error(
        "the journal refuses writes because it failed an integrity check when opened: {detail}"
    )]
    WriteRefused { detail: String },
    #[error("the import panicked and was rolled back: {message}")]
    Panicked { message: String },
    #[error(
        "the import commit may or may not have reached the disk ({reason}); reopen the journal and check whether it is empty"
    )]
    MaybeCommitted { reason: String },
    #[error("reading the journal during the import failed: {0}")]
    Read(#[from] crate::error::ReadError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<crate::error::ProjectionError> for ImportError {
    fn from(e: crate::error::ProjectionError) -> Self {
        ImportError::Storage(StorageError::message(e.to_string()))
    }
}

/// The write side of [`Journal::import`]: takes the exported records in position order.
pub struct Importer<'t> {
    txn: HookTxn<'t>,
    mac: &'t MacKey,
    hooks: &'t [Arc<dyn ProjectionHook>],
    next_position: u64,
    /// Each stream's head so far: its revision and digest.
    heads: HashMap<StreamId, (u64, Digest)>,
    value: Vec<u8>,
}

impl std::fmt::Debug for Importer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Importer")
            .field("next_position", &self.next_position)
            .field("streams", &self.heads.len())
            .finish_non_exhaustive()
    }
}

impl Importer<'_> {
    /// Records imported so far.
    pub fn records(&self) -> u64 {
        self.next_position - 1
    }

    /// Streams imported so far.
    pub fn streams(&self) -> u64 {
        self.heads.len() as u64
    }

    /// Appends one exported record. It must be the next position, the next revision of its
    /// stream, chain to that stream's previous record, and its content must hash to its exported
    /// digest (formula D); its event id must be new. The record gets a fresh MAC under this
    /// journal's key, and every registered projection hook sees it, as in an append.
    pub fn push(&mut self, r: &ImportRecord) -> Result<AppendedRecord, ImportError> {
        let position = self.next_position;
        if r.position != position || position >= POSITION_MAX {
            return Err(ImportError::Position {
                expected: position,
                found: r.position,
            });
        }
        r.record
            .validate()
            .map_err(|error| ImportError::Input { position, error })?;
        let (current, previous) = self
            .heads
            .get(&r.stream)
            .copied()
            .unwrap_or((0, Digest::ZERO));
        if r.revision != current + 1 {
            return Err(ImportError::Revision {
                stream: r.stream,
                current,
                found: r.revision,
                position,
            });
        }
        if r.previous_digest != previous {
            return Err(ImportError::Chain {
                stream: r.stream,
                revision: r.revision,
                position,
                expected: previous,
                found: r.previous_digest,
            });
        }
        let record = &r.record;
        let digest = record_digest(
            &r.stream,
            r.revision,
            &record.event_id,
            &record.kind,
            record.occurred_at,
            &previous,
            &record.payload,
        );
        if digest != r.digest {
            return Err(ImportError::Digest {
                stream: r.stream,
                revision: r.revision,
                position,
                computed: digest,
                found: r.digest,
            });
        }
        let existing = self
            .txn
            .with_txn(|txn| txn.find_event(&record.event_id))??;
        if let Some(first) = existing {
            return Err(ImportError::DuplicateEventId {
                event_id: record.event_id.clone(),
                position,
                first,
            });
        }
        let mac = self.mac.tag(position, &digest);
        encode_record(
            &r.stream,
            r.revision,
            position,
            record,
            &previous,
            &digest,
            mac,
            &mut self.value,
        );
        let put = PutRecord {
            stream: r.stream,
            revision: r.revision,
            position,
            event_id: &record.event_id,
            digest,
            bytes: &self.value,
        };
        self.txn.with_txn(|txn| txn.put_record(&put))??;
        self.heads.insert(r.stream, (r.revision, digest));
        self.next_position += 1;
        if !self.hooks.is_empty() {
            let view = RecordView {
                stream: r.stream,
                revision: r.revision,
                position,
                event_id: &record.event_id,
                kind: &record.kind,
                occurred_at: record.occurred_at,
                payload: &record.payload,
                previous_digest: previous,
                digest,
                mac,
            };
            for hook in self.hooks {
                hook.apply(&self.txn, &view)
                    .map_err(|e| ImportError::Hook {
                        hook: hook.name().to_owned(),
                        event_id: record.event_id.clone(),
                        message: e.message().to_owned(),
                        code: e.code(),
                    })?;
            }
        }
        Ok(AppendedRecord {
            revision: r.revision,
            position,
            digest,
        })
    }
}

impl Journal {
    /// Imports exported records into this journal, which must be empty: `f` pushes the records
    /// in position order through the [`Importer`] (see [`Importer::push`] for what each must
    /// satisfy). Everything happens in one write transaction, serialized with appends (it holds
    /// the committer's lock, and the backend serializes write transactions), committed only when
    /// `f` returns `Ok`: an `Err` from `f` or from a push, or a panic, leaves the journal empty.
    /// A failed commit fail-stops a redb journal, as a failed append does.
    ///
    /// The records stay in the transaction until the commit, so an import's size is bounded by
    /// what the backend can hold in one transaction; the importer itself keeps only each stream's
    /// head in memory (and redb its unmerged event ids).
    pub fn import<R, E: From<ImportError>>(
        &self,
        f: impl FnOnce(&mut Importer<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        if !self.check_process() {
            return Err(ImportError::ForkedProcess.into());
        }
        if let Some(detail) = &self.shared.write_refusal {
            return Err(ImportError::WriteRefused {
                detail: detail.clone(),
            }
            .into());
        }
        let _commit = lock(&self.shared.commit);
        if self.is_fail_stopped() {
            return Err(ImportError::FailStopped.into());
        }
        let hooks: Vec<Arc<dyn ProjectionHook>> = self
            .shared
            .hooks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut f = Some(f);
        let mut outcome: Option<Result<R, E>> = None;
        let ended = self.shared.backend.write(&mut |txn| {
            let Some(f) = f.take() else {
                return Err(StorageError::message("the backend ran an import twice"));
            };
            let records = txn
                .last_position()
                .map_err(|e| StorageError::message(e.to_string()))?;
            if records > 0 {
                outcome = Some(Err(ImportError::NotEmpty { records }.into()));
                return Ok(Finish::Abort);
            }
            let mut importer = Importer {
                txn: HookTxn::new(txn, &self.shared.mac, self.shared.scan_threads),
                mac: &self.shared.mac,
                hooks: &hooks,
                next_position: 1,
                heads: HashMap::new(),
                value: Vec::new(),
            };
            // The panic is caught while the transaction is alive, so it is aborted normally: a
            // redb write transaction dropped during unwinding leaks its pages until a repair.
            let run = catch_unwind(AssertUnwindSafe(|| f(&mut importer)));
            Ok(match run {
                Err(payload) => {
                    let message = crate::hook::panic_message(payload.as_ref());
                    outcome = Some(Err(ImportError::Panicked { message }.into()));
                    Finish::Abort
                }
                Ok(Err(e)) => {
                    outcome = Some(Err(e));
                    Finish::Abort
                }
                Ok(Ok(result)) => {
                    outcome = Some(Ok(result));
                    Finish::Commit
                }
            })
        });
        match ended {
            Ok(_) => outcome.unwrap_or_else(|| {
                Err(
                    ImportError::from(StorageError::message("the backend did not run the import"))
                        .into(),
                )
            }),
            Err(CommitError::NotCommitted(e)) => Err(ImportError::Storage(e).into()),
            Err(CommitError::MaybeCommitted(e)) => {
                // As after a failed group commit: redb cannot say whether the commit reached the
                // disk, so stop writing until the journal is reopened.
                if self.shared.backend.fail_stop_on_uncertain_commit() {
                    self.shared.failed.store(true, Ordering::Release);
                }
                Err(ImportError::MaybeCommitted {
                    reason: e.to_string(),
                }
                .into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::ops::ControlFlow;

    use super::*;
    use crate::hook::HookError;
    use crate::journal::OpenOptions;
    use crate::types::{ExpectedRevision, StreamAppend, Timestamp};

    fn source() -> (tempfile::TempDir, Journal, Vec<ImportRecord>) {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let a = StreamId::derive("unit", b"a").unwrap();
        let b = StreamId::derive("unit", b"b").unwrap();
        // Interleaved streams, one long enough to seal two chunks.
        for i in 0..40u64 {
            let stream = if i % 3 == 0 { b } else { a };
            j.append(StreamAppend::new(
                stream,
                ExpectedRevision::Any,
                vec![NewRecord::new(
                    format!("e{i}"),
                    "unit.kind",
                    Timestamp(i as i64),
                    format!("payload {i}").into_bytes(),
                )],
            ))
            .unwrap();
        }
        let mut out = Vec::new();
        j.scan(1, |v| {
            out.push(ImportRecord {
                stream: v.stream,
                revision: v.revision,
                position: v.position,
                record: NewRecord::new(v.event_id, v.kind, v.occurred_at, v.payload.to_vec()),
                previous_digest: v.previous_digest,
                digest: v.digest,
            });
            ControlFlow::Continue(())
        })
        .unwrap();
        (dir, j, out)
    }

    fn push_all(j: &Journal, records: &[ImportRecord]) -> Result<u64, ImportError> {
        j.import(|imp| {
            for r in records {
                imp.push(r)?;
            }
            Ok(imp.records())
        })
    }

    #[test]
    fn an_import_reproduces_every_record_and_verifies() {
        let (_src_dir, src, records) = source();
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        assert_eq!(push_all(&j, &records).unwrap(), 40);
        assert_eq!(src.read_all(1, 100).unwrap(), j.read_all(1, 100).unwrap());
        let report = j.verify().unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.streams, 2);
        // The writer continues after the import, and idempotency sees imported event ids.
        let a = records[1].stream;
        let retry = j
            .append(StreamAppend::new(
                a,
                ExpectedRevision::Any,
                vec![records[1].record.clone()],
            ))
            .unwrap();
        assert!(retry.replayed);
        let next = j
            .append(StreamAppend::new(
                a,
                ExpectedRevision::Exact(26),
                vec![NewRecord::new("new", "unit.kind", Timestamp(1), vec![])],
            ))
            .unwrap();
        assert_eq!(next.records[0].position, 41);
        // A second import is refused: the journal is no longer empty.
        let again = push_all(&j, &records).unwrap_err();
        assert!(
            matches!(again, ImportError::NotEmpty { records: 41 }),
            "{again}"
        );
        drop(j);
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        assert!(j.verify().unwrap().is_ok());
    }

    #[test]
    fn a_record_that_does_not_reproduce_is_refused_and_nothing_is_written() {
        let (_src_dir, _src, records) = source();
        type Edit = Box<dyn Fn(&mut Vec<ImportRecord>)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("payload", Box::new(|r| r[20].record.payload.push(b'!'))),
            (
                "digest",
                Box::new(|r| r[20].digest = Digest::from_bytes([7; 32])),
            ),
            (
                "previous digest",
                Box::new(|r| r[20].previous_digest = Digest::from_bytes([7; 32])),
            ),
            ("missing record", Box::new(|r| drop(r.remove(20)))),
            (
                "duplicate event id",
                Box::new(|r| {
                    // Same content as record 0 but in its own stream: reproduces, yet reuses
                    // the event id.
                    let mut copy = r[0].clone();
                    copy.stream = StreamId::derive("unit", b"c").unwrap();
                    copy.revision = 1;
                    copy.position = 41;
                    copy.previous_digest = Digest::ZERO;
                    copy.digest = copy.record.digest_at(&copy.stream, 1, &Digest::ZERO);
                    r.push(copy);
                }),
            ),
        ];
        for (what, edit) in cases {
            let mut edited = records.clone();
            edit(&mut edited);
            let dir = tempfile::tempdir().unwrap();
            let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
            let err = push_all(&j, &edited).unwrap_err();
            match (what, &err) {
                (
                    "payload" | "digest",
                    ImportError::Digest {
                        revision, position, ..
                    },
                ) => {
                    assert_eq!((*revision, *position), (records[20].revision, 21), "{what}");
                }
                ("previous digest", ImportError::Chain { position: 21, .. })
                | (
                    "missing record",
                    ImportError::Position {
                        expected: 21,
                        found: 22,
                    },
                )
                | (
                    "duplicate event id",
                    ImportError::DuplicateEventId {
                        position: 41,
                        first: 1,
                        ..
                    },
                ) => {}
                _ => panic!("{what}: unexpected {err:?}"),
            }
            assert!(err.to_string().contains("position"), "{what}: {err}");
            assert_eq!(j.head_position().unwrap(), 0, "{what}: nothing written");
            assert!(j.verify().unwrap().is_ok());
            // The refused import left the journal writable and empty: a clean import works.
            assert_eq!(push_all(&j, &records).unwrap(), 40, "{what}");
        }
    }

    /// Refuses the record with event id "e7".
    struct Refuse;

    impl ProjectionHook for Refuse {
        fn name(&self) -> &str {
            "refuse"
        }

        fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
            tx.insert("proj.refuse.seen", record.event_id.as_bytes(), b"")?;
            if record.event_id == "e7" {
                return Err(HookError::with_code("refused", "e7 is refused"));
            }
            Ok(())
        }
    }

    #[test]
    fn hooks_see_imported_records_and_a_refusal_or_panic_rolls_everything_back() {
        let (_src_dir, _src, records) = source();
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        assert!(j.register_hook(Arc::new(Refuse)));
        let err = push_all(&j, &records).unwrap_err();
        assert!(
            matches!(&err, ImportError::Hook { code: Some("refused"), event_id, .. } if event_id == "e7"),
            "{err:?}"
        );
        let mut seen = 0;
        j.projection_scan("proj.refuse.seen", |_, _| {
            seen += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!((j.head_position().unwrap(), seen), (0, 0));
        let panic = j
            .import(|imp| -> Result<(), ImportError> {
                imp.push(&records[0])?;
                panic!("the source broke");
            })
            .unwrap_err();
        assert!(matches!(panic, ImportError::Panicked { .. }), "{panic}");
        assert_eq!(j.head_position().unwrap(), 0);
        // Importing without the refused record's tail works, and the hook saw each record.
        assert_eq!(push_all(&j, &records[..6]).unwrap(), 6);
        j.projection_scan("proj.refuse.seen", |_, _| {
            seen += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(seen, 6);
        assert!(j.verify().unwrap().is_ok());
    }
}
