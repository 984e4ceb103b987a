//! Projection maintenance: write transactions that only touch projection tables, serialized with
//! the group committer, that can replay the journal into projections (rebuild, catch-up, check);
//! and the read side of projection tables (spec/journal.md, "Projection maintenance").

use std::cell::RefCell;
use std::ops::{ControlFlow, Deref};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;

use crate::backend::{CommitError, Finish, ReadTxn};
use crate::codec::RecordView;
use crate::error::{ProjectionError, ReadError, StorageError};
use crate::hook::{HookError, HookTxn, check_table, get_once, scan_pages};
use crate::journal::Journal;
use crate::sync::lock;

/// The write transaction of [`Journal::maintain`]: everything a [`HookTxn`] offers (through
/// `Deref`), plus the journal head and a verified replay of the records.
pub struct MaintenanceTxn<'t> {
    hook: HookTxn<'t>,
    head: u64,
}

impl std::fmt::Debug for MaintenanceTxn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaintenanceTxn")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl<'t> Deref for MaintenanceTxn<'t> {
    type Target = HookTxn<'t>;

    fn deref(&self) -> &HookTxn<'t> {
        &self.hook
    }
}

impl MaintenanceTxn<'_> {
    /// The last global position in the journal (0 when empty). No append of this handle can
    /// commit while the maintenance transaction is open, and the backend serializes write
    /// transactions, so this does not change during it.
    pub fn head_position(&self) -> u64 {
        self.head
    }

    /// Calls `f` for every record with position ≥ `from_position`, in position order, inside this
    /// transaction. Each record is checked exactly as [`Journal::scan`] checks it (gap-free
    /// positions, structure, D and M); a record that fails is an error and is never shown to `f`.
    /// Returns the number of records visited. An `Err` from `f` stops the replay and is returned
    /// as [`ProjectionError::Apply`], naming the record.
    ///
    /// Records are copied out a page at a time, so `f` may use the transaction's projection
    /// tables between them.
    pub fn replay(
        &self,
        from_position: u64,
        f: impl FnMut(&HookTxn<'_>, &RecordView<'_>) -> Result<(), HookError>,
    ) -> Result<u64, ProjectionError> {
        let from = from_position.max(1);
        let visited = self.hook.replay(from, u64::MAX, f)?;
        // The records must reach the head of this transaction (a backend that leaves out the
        // newest records is caught here, as in `Journal::scan`).
        if from <= self.head && from + visited <= self.head {
            return Err(crate::parallel::records_end_early(from + visited, self.head).into());
        }
        Ok(visited)
    }
}

/// A consistent read-only snapshot of the projection tables, for reading several tables (or one
/// table several times) as of one commit.
pub struct ProjectionRead<'t> {
    txn: RefCell<&'t mut dyn ReadTxn>,
}

impl std::fmt::Debug for ProjectionRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProjectionRead")
    }
}

fn busy() -> ProjectionError {
    StorageError::message(
        "a projection snapshot was used from inside one of its own `get` callbacks",
    )
    .into()
}

impl ProjectionRead<'_> {
    /// Calls `f` with the value stored under `key`, if any. A missing table holds nothing. The
    /// bytes have alignment 1.
    pub fn get<R>(
        &self,
        table: &'static str,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, ProjectionError> {
        check_table(table)?;
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        get_once(|cb| txn.kv_get(table, key, cb), f)
    }

    /// Calls `f` with every entry of `table` in key order until it returns `Break`. A missing
    /// table holds nothing. The bytes have alignment 1.
    pub fn scan(
        &self,
        table: &'static str,
        f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError> {
        check_table(table)?;
        scan_pages(
            |after, cb| {
                let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
                txn.kv_scan(table, after, cb).map_err(|e| match e {
                    ReadError::Storage(e) => ProjectionError::Storage(e),
                    e => ProjectionError::Read(e),
                })
            },
            f,
        )
    }
}

impl Journal {
    /// Runs `f` in a write transaction that only projection tables can be written in, serialized
    /// with the group committer: no append commits while it runs (it holds the committer's lock,
    /// and the backend serializes write transactions), and it sees every committed record. `f`
    /// returns its result and whether to commit; `false` aborts, so a caller can compute
    /// something (such as a rebuilt projection's digest) without changing anything. A commit has
    /// the same durability as an append.
    ///
    /// Refused when the journal is fail-stopped or refuses writes. An `Err` or a panic in `f`
    /// aborts the transaction. A failed commit fail-stops a redb journal, as a failed append does.
    /// `f` must not append to or maintain this journal: it would wait for itself.
    pub fn maintain<R>(
        &self,
        f: impl FnOnce(&MaintenanceTxn<'_>) -> Result<(R, bool), HookError>,
    ) -> Result<R, ProjectionError> {
        if !self.check_process() {
            return Err(ProjectionError::ForkedProcess);
        }
        if let Some(detail) = &self.shared.write_refusal {
            return Err(ProjectionError::WriteRefused {
                detail: detail.clone(),
            });
        }
        // The same lock the group committer holds around each group commit.
        let _commit = lock(&self.shared.commit);
        if self.is_fail_stopped() {
            return Err(ProjectionError::FailStopped);
        }
        let mut f = Some(f);
        let mut outcome: Option<Result<R, ProjectionError>> = None;
        let ended = self.shared.backend.write(&mut |txn| {
            let Some(f) = f.take() else {
                return Err(StorageError::message("the backend ran a maintenance twice"));
            };
            let head = txn
                .last_position()
                .map_err(|e| StorageError::message(e.to_string()))?;
            // The panic is caught while the transaction is still alive, so it is aborted
            // normally: a redb write transaction dropped during unwinding leaks its pages until
            // the database is repaired.
            let run = {
                let maintenance = MaintenanceTxn {
                    hook: HookTxn::new(txn, &self.shared.mac, self.shared.scan_threads),
                    head,
                };
                catch_unwind(AssertUnwindSafe(|| f(&maintenance)))
            };
            Ok(match run {
                Err(payload) => {
                    let message = crate::hook::panic_message(payload.as_ref());
                    outcome = Some(Err(ProjectionError::Panicked { message }));
                    Finish::Abort
                }
                Ok(Err(e)) => {
                    outcome = Some(Err(e.into_projection_error()));
                    Finish::Abort
                }
                Ok(Ok((result, commit))) => {
                    outcome = Some(Ok(result));
                    if commit {
                        Finish::Commit
                    } else {
                        Finish::Abort
                    }
                }
            })
        });
        match ended {
            Ok(_) => outcome.unwrap_or_else(|| {
                Err(StorageError::message("the backend did not run the maintenance").into())
            }),
            Err(CommitError::NotCommitted(e)) => Err(e.into()),
            Err(CommitError::MaybeCommitted(e)) => {
                // The backend cannot say whether a failed commit reached the disk; like a failed
                // group commit, a redb journal stops writing until it is reopened.
                if self.shared.backend.fail_stop_on_uncertain_commit() {
                    self.shared.failed.store(true, Ordering::Release);
                }
                Err(ProjectionError::MaybeCommitted {
                    reason: e.to_string(),
                })
            }
        }
    }

    /// Calls `f` with every entry of a projection table in key order, in a read transaction (a
    /// consistent snapshot that never waits for the writer). A missing table holds nothing.
    pub fn projection_scan(
        &self,
        table: &'static str,
        f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError> {
        self.projection_read(|read| read.scan(table, f))?
    }

    /// Calls `f` with a read-only snapshot of the projection tables, so several tables can be read
    /// as of one commit.
    pub fn projection_read<R>(
        &self,
        f: impl FnOnce(&ProjectionRead<'_>) -> R,
    ) -> Result<R, ProjectionError> {
        if !self.check_process() {
            return Err(ProjectionError::ForkedProcess);
        }
        let mut f = Some(f);
        let mut out = None;
        self.shared
            .backend
            .read(&mut |txn| {
                if let Some(f) = f.take() {
                    out = Some(f(&ProjectionRead {
                        txn: RefCell::new(txn),
                    }));
                }
                Ok(())
            })
            .map_err(|e| match e {
                ReadError::Storage(e) => ProjectionError::Storage(e),
                e => ProjectionError::Read(e),
            })?;
        out.ok_or_else(|| StorageError::message("the backend did not run the read").into())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use super::*;
    use crate::error::AppendError;
    use crate::hook::ProjectionHook;
    use crate::journal::OpenOptions;
    use crate::redb::testing;
    use crate::types::{ExpectedRevision, NewRecord, StreamAppend, StreamId, Timestamp};

    const T: &str = "proj.test";

    fn open(dir: &tempfile::TempDir) -> Journal {
        Journal::open(dir.path(), &OpenOptions::new()).unwrap()
    }

    fn append(j: &Journal, stream: &[u8], ids: &[&str]) -> Result<(), AppendError> {
        let s = StreamId::derive("unit", stream).unwrap();
        let records = ids
            .iter()
            .map(|id| NewRecord::new(*id, "unit", Timestamp(1), id.as_bytes().to_vec()))
            .collect();
        j.append(StreamAppend::new(s, ExpectedRevision::Any, records))
            .map(|_| ())
    }

    fn entries(j: &Journal, table: &'static str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        j.projection_scan(table, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    /// Stores each record's event id under its position (big-endian, so keys sort by position).
    struct Log(&'static str);

    impl ProjectionHook for Log {
        fn name(&self) -> &str {
            self.0
        }

        fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
            if record.payload.starts_with(b"refuse") {
                return Err(HookError::with_code("refused", "the payload says refuse"));
            }
            tx.insert(
                T,
                &record.position.to_be_bytes(),
                record.event_id.as_bytes(),
            )?;
            Ok(())
        }
    }

    #[test]
    fn hook_txn_scans_in_key_order_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        j.maintain(|m| {
            for k in [3u8, 1, 2] {
                m.insert(T, &[k], &[k * 10])?;
            }
            let mut seen = Vec::new();
            m.scan(T, |k, v| {
                seen.push((k[0], v[0]));
                ControlFlow::Continue(())
            })?;
            assert_eq!(seen, [(1, 10), (2, 20), (3, 30)]);
            let mut first = Vec::new();
            m.scan(T, |k, _| {
                first.push(k[0]);
                ControlFlow::Break(())
            })?;
            assert_eq!(first, [1]);
            Ok(((), true))
        })
        .unwrap();
        assert_eq!(entries(&j, T).len(), 3);
        j.maintain(|m| {
            m.clear(T)?;
            let mut n = 0;
            m.scan(T, |_, _| {
                n += 1;
                ControlFlow::Continue(())
            })?;
            assert_eq!(n, 0);
            // Clearing a table that does not exist is not an error.
            m.clear("proj.never")?;
            Ok(((), true))
        })
        .unwrap();
        assert!(entries(&j, T).is_empty());
    }

    #[test]
    fn table_names_outside_the_projection_prefix_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let err = j
            .maintain(|m| {
                m.clear("journal.records")?;
                Ok(((), true))
            })
            .unwrap_err();
        assert!(
            matches!(&err, ProjectionError::TableName { name } if name == "journal.records"),
            "{err}"
        );
        let err = j
            .projection_scan("journal.records", |_, _| ControlFlow::Continue(()))
            .unwrap_err();
        assert!(matches!(err, ProjectionError::TableName { .. }), "{err}");
        append(&j, b"s", &["a1"]).unwrap();
        assert_eq!(j.read_all(1, 10).unwrap().len(), 1);
    }

    #[test]
    fn projection_scan_of_a_missing_table_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        assert!(entries(&j, "proj.missing").is_empty());
        let got = j
            .projection_read(|r| r.get("proj.missing", b"k", |v| v.is_none()))
            .unwrap()
            .unwrap();
        assert!(got);
    }

    #[test]
    fn errors_stay_send_and_sync() {
        // HookError now carries a ProjectionError; it must still cross threads as it did.
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<HookError>();
        assert_send_sync::<ProjectionError>();
    }

    #[test]
    fn hook_error_codes_reach_the_appender() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        assert!(j.register_hook(Arc::new(Log("log"))));
        let s = StreamId::derive("unit", b"s").unwrap();
        let err = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![NewRecord::new(
                    "r1",
                    "unit",
                    Timestamp(1),
                    b"refuse".to_vec(),
                )],
            ))
            .unwrap_err();
        assert!(
            matches!(&err, AppendError::Hook { hook, code: Some("refused"), message, .. }
                if hook == "log" && message == "the payload says refuse"),
            "{err}"
        );
        assert_eq!(HookError::new("m").code(), None);
        assert_eq!(HookError::with_code("c", "m").code(), Some("c"));
    }

    #[test]
    fn registering_a_hook_name_twice_keeps_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        assert!(j.register_hook(Arc::new(Log("log"))));
        assert!(!j.register_hook(Arc::new(Log("log"))));
        // A second handle shares the journal and its hooks.
        assert!(!open(&dir).register_hook(Arc::new(Log("log"))));
        append(&j, b"s", &["a1"]).unwrap();
        assert_eq!(j.shared.hooks.read().unwrap().len(), 1);
        assert_eq!(entries(&j, T).len(), 1);
    }

    #[test]
    fn replay_visits_records_from_a_position_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1", "a2"]).unwrap();
        append(&j, b"b", &["b1"]).unwrap();
        append(&j, b"a", &["a3"]).unwrap();
        let seen = j
            .maintain(|m| {
                assert_eq!(m.head_position(), 4);
                let mut seen = Vec::new();
                let n = m.replay(2, |tx, r| {
                    seen.push((r.position, r.event_id.to_owned()));
                    Log("log").apply(tx, r)
                })?;
                assert_eq!(n, 3);
                assert_eq!(m.replay(5, |_, _| Ok(()))?, 0);
                // Position 0 means "from the start".
                assert_eq!(m.replay(0, |_, _| Ok(()))?, 4);
                Ok((seen, true))
            })
            .unwrap();
        assert_eq!(seen, [(2, "a2".into()), (3, "b1".into()), (4, "a3".into())]);
        assert_eq!(entries(&j, T).len(), 3);
    }

    #[test]
    fn an_aborted_maintenance_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1", "a2"]).unwrap();
        let n = j
            .maintain(|m| {
                let n = m.replay(1, |tx, r| Log("log").apply(tx, r))?;
                let mut stored = 0;
                m.scan(T, |_, _| {
                    stored += 1;
                    ControlFlow::Continue(())
                })?;
                assert_eq!(stored, 2, "visible inside the transaction");
                Ok((n, false))
            })
            .unwrap();
        assert_eq!(n, 2);
        assert!(entries(&j, T).is_empty());
    }

    #[test]
    fn refusals_and_panics_abort_and_come_back_typed() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1"]).unwrap();
        let s = StreamId::derive("unit", b"a").unwrap();
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![NewRecord::new(
                "a2",
                "unit",
                Timestamp(1),
                b"refuse".to_vec(),
            )],
        ))
        .unwrap();
        let err = j
            .maintain(|m| {
                m.replay(1, |tx, r| Log("log").apply(tx, r))?;
                Ok(((), true))
            })
            .unwrap_err();
        assert!(
            matches!(&err, ProjectionError::Apply { position: 2, event_id, code: Some("refused"), .. }
                if event_id == "a2"),
            "{err}"
        );
        assert_eq!(err.code(), Some("refused"));
        assert!(
            entries(&j, T).is_empty(),
            "the first record was rolled back"
        );

        let err = j
            .maintain(|m| {
                m.insert(T, b"k", b"v")?;
                Err::<((), bool), _>(HookError::with_code("mine", "no"))
            })
            .unwrap_err();
        assert!(
            matches!(&err, ProjectionError::Hook { message, code: Some("mine") } if message == "no"),
            "{err}"
        );

        let err = j
            .maintain(|m| -> Result<((), bool), HookError> {
                m.insert(T, b"k", b"v")?;
                panic!("maintenance bug");
            })
            .unwrap_err();
        assert!(
            matches!(&err, ProjectionError::Panicked { message } if message == "maintenance bug"),
            "{err}"
        );
        assert!(entries(&j, T).is_empty());
        // The panic left the journal writable and its file clean.
        assert!(!j.is_fail_stopped());
        append(&j, b"b", &["b1"]).unwrap();
        j.maintain(|m| {
            m.insert(T, b"k", b"v")?;
            Ok(((), true))
        })
        .unwrap();
        assert_eq!(entries(&j, T).len(), 1);
        assert!(j.verify().unwrap().is_ok());
    }

    #[test]
    fn replay_refuses_a_record_that_does_not_authenticate() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1", "a2", "a3"]).unwrap();
        // Move record 2's value to position 3: its MAC binds it to position 2.
        {
            let _commit = lock(&j.shared.commit);
            let two = testing::record_value(&j, 2);
            testing::put_record_value(&j, 3, &two);
        }
        let mut shown = Vec::new();
        let err = j
            .maintain(|m| {
                m.replay(1, |_, r| {
                    shown.push(r.position);
                    Ok(())
                })?;
                Ok(((), true))
            })
            .unwrap_err();
        assert!(
            matches!(
                &err,
                ProjectionError::Read(ReadError::AuthenticationFailed { .. })
            ),
            "{err}"
        );
        assert_eq!(shown, [1, 2]);
    }

    #[test]
    fn maintenance_is_refused_when_the_journal_is_fail_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        j.shared.failed.store(true, Ordering::Release);
        let err = j.maintain(|_| Ok(((), true))).unwrap_err();
        assert!(matches!(err, ProjectionError::FailStopped), "{err}");
    }

    #[test]
    fn maintenance_is_refused_when_the_journal_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1"]).unwrap();
        {
            let _commit = lock(&j.shared.commit);
            let mut v = testing::record_value(&j, 1);
            let last = v.len() - 1;
            v[last] ^= 1;
            testing::put_record_value(&j, 1, &v);
        }
        drop(j);
        let j = open(&dir);
        assert!(j.write_refusal().is_some());
        let err = j.maintain(|_| Ok(((), true))).unwrap_err();
        assert!(matches!(err, ProjectionError::WriteRefused { .. }), "{err}");
    }

    #[test]
    fn no_append_commits_while_maintenance_runs() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, b"a", &["a1"]).unwrap();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let appender = {
            let j = j.clone();
            std::thread::spawn(move || {
                // Wait until the maintenance holds the writer, then try to append.
                started_rx.recv().unwrap();
                append(&j, b"b", &["b1"]).unwrap();
            })
        };
        j.maintain(|m| {
            started_tx.send(()).unwrap();
            // Give the appender ample time to try; it must not get through.
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert_eq!(
                j.head_position().unwrap(),
                1,
                "an append committed meanwhile"
            );
            assert_eq!(m.head_position(), 1);
            assert_eq!(m.replay(1, |_, _| Ok(()))?, 1);
            Ok(((), true))
        })
        .unwrap();
        appender.join().unwrap();
        assert_eq!(j.head_position().unwrap(), 2);
    }
}
