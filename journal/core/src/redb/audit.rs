//! redb's own integrity check of a journal's database file (spec/journal.md §13).

use std::path::Path;
use std::time::Duration;

use redb::Database;

use super::create::DATABASE_FILE;
use crate::error::{OpenError, StorageError};
use crate::lock;

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
/// **Rule:** call it while this process has no [`Journal`](crate::Journal) of `dir` open. The process lock is an
/// `flock`, which belongs to the open file, so an open handle in this process holds the lock
/// against this call too: the call then waits its grace period and fails with
/// [`OpenError::Locked`] instead of checking a file another handle is writing. Conversely, a
/// [`Journal::open`](crate::Journal::open) of `dir` in this process waits while the check runs.
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
    let mut db = match Database::builder()
        .set_cache_size(super::REDB_CACHE_MAX_BYTES)
        .open(&db_path)
    {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::journal::{Journal, OpenOptions};
    use crate::types::{ExpectedRevision, NewRecord, StreamAppend, StreamId, Timestamp};

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
}
