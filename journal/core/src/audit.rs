//! Offline inspection of a journal: redb's own integrity check of the database file, and a listing
//! of every stream with its head (spec/journal.md §13).

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

use redb::Database;
use rkyv::util::AlignedVec;

use crate::codec::decode_record;
use crate::error::{OpenError, ReadError, StorageError};
use crate::journal::{DATABASE_FILE, Journal};
use crate::lock;
use crate::types::{StreamHead, StreamId};

/// What redb's integrity check found in a journal's database file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageIntegrity {
    /// Every page checksum and the allocator state verified.
    Clean,
    /// The check failed and redb repaired the file (for example after an unclean shutdown that
    /// the open did not already repair); the records that survive are verified separately.
    Repaired,
    /// The file is corrupt and redb could not repair it.
    Corrupt { detail: String },
}

/// Runs redb's integrity check (`Database::check_integrity`: every page checksum, the B-tree
/// structure and the allocator state) on the journal database in `dir`, repairing the file when
/// redb can.
///
/// redb needs exclusive access for this, so the check runs under the journal's process lock
/// (waiting up to `lock_wait` for another process to release it) on a database handle of its own.
/// **Rule:** call it while this process has no [`Journal`] of `dir` open. The process lock is an
/// `flock`, which belongs to the open file, so an open handle in this process holds the lock
/// against this call too: the call then waits its grace period and fails with
/// [`OpenError::Locked`] instead of checking a file another handle is writing. Conversely, a
/// [`Journal::open`] of `dir` in this process waits while the check runs.
///
/// Returns [`OpenError::Corrupt`] when `dir` holds no journal database (the check never creates
/// one).
pub fn check_storage_integrity(
    dir: &Path,
    lock_wait: Duration,
) -> Result<StorageIntegrity, OpenError> {
    if !dir.is_absolute() {
        return Err(OpenError::RelativePath {
            path: dir.to_path_buf(),
        });
    }
    let db_path = dir.join(DATABASE_FILE);
    if !db_path.is_file() {
        return Err(OpenError::Corrupt {
            path: db_path,
            reason: "there is no journal database to check".to_owned(),
        });
    }
    let _lock = lock::acquire(dir, lock_wait)?;
    let mut db = match Database::open(&db_path) {
        Ok(db) => db,
        Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail))) => {
            return Ok(StorageIntegrity::Corrupt { detail });
        }
        Err(e) => return Err(StorageError::from(e).into()),
    };
    let result = match db.check_integrity() {
        Ok(true) => StorageIntegrity::Clean,
        Ok(false) => StorageIntegrity::Repaired,
        Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail))) => {
            StorageIntegrity::Corrupt { detail }
        }
        Err(e) => return Err(StorageError::from(e).into()),
    };
    // The database closes before the lock guard is dropped (reverse declaration order).
    drop(db);
    Ok(result)
}

/// One stream as [`Journal::visit_streams`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub stream: StreamId,
    /// The stored head; `None` when it does not decode (the verification pass reports it).
    pub head: Option<StreamHead>,
    /// The kind of the stream's first record, read **without** authenticating it: good for
    /// telling streams apart (engine streams, query streams, …), not for trusting anything.
    /// `None` when the record cannot be found or does not decode.
    pub first_kind: Option<String>,
}

impl Journal {
    /// Calls `f` with every stream of the journal in stream-id order, in one read snapshot, until
    /// it returns `Break`. Returns the number of streams visited.
    pub fn visit_streams(
        &self,
        mut f: impl FnMut(&StreamInfo) -> ControlFlow<()>,
    ) -> Result<u64, ReadError> {
        if !self.check_process() {
            return Err(ReadError::ForkedProcess);
        }
        self.read(|txn| {
            let mut heads = Vec::new();
            txn.heads(&mut |key, head| {
                // Keys are written as 32-byte stream ids; anything else is reported by `verify`.
                if let Ok(bytes) = <[u8; 32]>::try_from(key) {
                    heads.push((StreamId::from_bytes(bytes), head.ok()));
                }
            })?;
            let mut scratch = AlignedVec::<16>::new();
            let mut visited = 0;
            for (stream, head) in heads {
                let mut first_kind = None;
                if head.is_some() {
                    // An index that cannot name the first record leaves the kind unknown.
                    let _ = txn.stream_records(&stream, 1, 1, &mut |_, _, value| {
                        first_kind = decode_record(value, &mut scratch)
                            .ok()
                            .map(|v| v.kind.to_owned());
                        ControlFlow::Break(())
                    });
                }
                visited += 1;
                if f(&StreamInfo {
                    stream,
                    head,
                    first_kind,
                })
                .is_break()
                {
                    break;
                }
            }
            Ok(visited)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::journal::OpenOptions;
    use crate::types::{ExpectedRevision, NewRecord, StreamAppend, Timestamp};

    #[test]
    fn the_integrity_check_passes_a_fresh_journal_and_needs_the_directory_closed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = check_storage_integrity(dir.path(), Duration::ZERO).unwrap_err();
        assert!(matches!(missing, OpenError::Corrupt { .. }), "{missing}");
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let s = StreamId::derive("unit", b"a").unwrap();
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![NewRecord::new("a1", "k", Timestamp(1), b"p".to_vec())],
        ))
        .unwrap();
        // Open in this process: the check refuses rather than race the open handle.
        let held = check_storage_integrity(dir.path(), Duration::ZERO).unwrap_err();
        assert!(matches!(held, OpenError::Locked { .. }), "{held}");
        drop(j);
        assert_eq!(
            check_storage_integrity(dir.path(), Duration::ZERO).unwrap(),
            StorageIntegrity::Clean
        );
        // The journal still opens and reads after the check.
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        assert_eq!(j.head_position().unwrap(), 1);
    }

    #[test]
    fn streams_are_listed_with_their_heads_and_first_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let a = StreamId::derive("unit", b"a").unwrap();
        let b = StreamId::derive("unit", b"b").unwrap();
        let records = |prefix: &str, kind: &str, n: usize| {
            (0..n)
                .map(|i| NewRecord::new(format!("{prefix}{i}"), kind, Timestamp(1), vec![]))
                .collect::<Vec<_>>()
        };
        // 17 revisions: the first one's position is in a sealed chunk.
        j.append(StreamAppend::new(
            a,
            ExpectedRevision::Any,
            records("a", "first.a", 17),
        ))
        .unwrap();
        j.append(StreamAppend::new(
            b,
            ExpectedRevision::Any,
            records("b", "first.b", 2),
        ))
        .unwrap();
        let mut seen = Vec::new();
        let n = j
            .visit_streams(|info| {
                seen.push(info.clone());
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(n, 2);
        seen.sort_by_key(|i| i.head.map(|h| h.revision));
        assert_eq!(seen[0].stream, b);
        assert_eq!(seen[0].first_kind.as_deref(), Some("first.b"));
        assert_eq!(seen[0].head.unwrap().position, 19);
        assert_eq!(seen[1].stream, a);
        assert_eq!(seen[1].first_kind.as_deref(), Some("first.a"));
        assert_eq!(seen[1].head.unwrap().revision, 17);
        assert_eq!(seen[1].head, j.stream_head(&a).unwrap());
    }
}
