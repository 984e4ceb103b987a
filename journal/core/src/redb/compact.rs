//! Offline compaction of a journal's database file (spec/journal.md §10, "Compaction").
//!
//! redb grows its file by doubling and reuses freed pages only inside it, so a journal's file can
//! be up to twice the pages it holds. Compaction moves pages down and truncates the file; it
//! changes no key and no value, so every record, digest and MAC stays byte for byte what it was.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redb::Database;

use super::create::DATABASE_FILE;
use crate::error::{OpenError, StorageError};
use crate::lock;
use crate::verdict::standing_verdict;

/// What a compaction did to the database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// The file's size before, in bytes.
    pub file_bytes_before: u64,
    /// The file's size after, in bytes.
    pub file_bytes_after: u64,
}

/// Why a compaction did not run or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The journal could not be opened or locked, or storage failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The file is left as it is: the last audit found it damaged, or redb's integrity check
    /// found it corrupt or had to repair it.
    #[error("journal {path:?} is not compacted because {reason}")]
    Refused { path: PathBuf, reason: String },
}

impl From<StorageError> for CompactError {
    fn from(e: StorageError) -> Self {
        CompactError::Open(e.into())
    }
}

/// Most rounds of redb's compaction one call runs: each round moves what it can and reports
/// whether it moved anything, and a round that moves nothing ends the loop earlier.
const COMPACTION_ROUNDS_MAX: usize = 8;

/// Compacts the journal database in `dir` under the journal's process lock (waiting up to
/// `lock_wait`), after redb's integrity check of the file has passed.
///
/// **Rule:** as for [`check_storage_integrity`](crate::check_storage_integrity), call it while
/// this process has no [`Journal`](crate::Journal) of `dir` open; redb needs the file to itself.
///
/// A directory whose last audit left an integrity verdict is refused (the damaged file is the
/// evidence, and compaction would rewrite it), and so is a file the integrity check finds corrupt
/// or had to repair: run `ctx audit` first.
pub fn compact_storage(dir: &Path, lock_wait: Duration) -> Result<Compaction, CompactError> {
    if !dir.is_absolute() {
        return Err(OpenError::RelativePath {
            path: dir.to_path_buf(),
        }
        .into());
    }
    let db_path = dir.join(DATABASE_FILE);
    if !db_path.is_file() {
        return Err(OpenError::Corrupt {
            path: db_path,
            reason: "there is no journal database to compact".to_owned(),
        }
        .into());
    }
    let _lock = lock::acquire(dir, lock_wait)?;
    if let Some(verdict) = standing_verdict(dir) {
        return Err(CompactError::Refused {
            path: db_path,
            reason: verdict,
        });
    }
    let size = |path: &Path| {
        std::fs::metadata(path).map(|m| m.len()).map_err(|source| {
            CompactError::from(OpenError::Io {
                path: path.to_path_buf(),
                source,
            })
        })
    };
    let file_bytes_before = size(&db_path)?;
    let mut db = Database::builder()
        .set_cache_size(super::REDB_CACHE_MAX_BYTES)
        .open(&db_path)
        .map_err(StorageError::from)?;
    let refuse = |reason: String| CompactError::Refused {
        path: db_path.clone(),
        reason,
    };
    match db.check_integrity() {
        Ok(true) => {}
        Ok(false) => {
            return Err(refuse(
                "redb's integrity check had to repair it; run `ctx audit` to verify the records \
                 first"
                    .to_owned(),
            ));
        }
        Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail))) => {
            return Err(refuse(format!(
                "redb's integrity check found it corrupt ({detail})"
            )));
        }
        Err(e) => return Err(StorageError::from(e).into()),
    }
    for _ in 0..COMPACTION_ROUNDS_MAX {
        if !db.compact().map_err(StorageError::from)? {
            break;
        }
    }
    // The database closes, and its file is final, before its size is read and the lock dropped.
    drop(db);
    Ok(Compaction {
        file_bytes_before,
        file_bytes_after: size(&db_path)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::journal::{Journal, OpenOptions};
    use crate::types::{ExpectedRevision, NewRecord, StreamAppend, StreamId, Timestamp};

    #[test]
    fn compaction_shrinks_a_grown_file_and_keeps_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        // Records written one commit at a time grow the file by doubling past what it holds.
        let s = StreamId::derive("unit", b"compact").unwrap();
        for i in 0..400u32 {
            let expected = match i {
                0 => ExpectedRevision::NoStream,
                n => ExpectedRevision::Exact(u64::from(n)),
            };
            j.append(StreamAppend::new(
                s,
                expected,
                vec![NewRecord::new(
                    format!("e{i}"),
                    "k",
                    Timestamp(1),
                    vec![(i % 251) as u8; 3000 + (i as usize % 7) * 500],
                )],
            ))
            .unwrap();
        }
        let before: Vec<_> = j.read_stream(&s, 1, 400).unwrap();
        // An open handle holds the lock: compaction refuses rather than race it.
        let held = compact_storage(dir.path(), Duration::ZERO).unwrap_err();
        assert!(
            matches!(held, CompactError::Open(OpenError::Locked { .. })),
            "{held}"
        );
        drop(j);
        let done = compact_storage(dir.path(), Duration::ZERO).unwrap();
        assert!(
            done.file_bytes_after < done.file_bytes_before,
            "{done:?} did not shrink the file"
        );
        let on_disk = std::fs::metadata(dir.path().join(DATABASE_FILE))
            .unwrap()
            .len();
        assert_eq!(on_disk, done.file_bytes_after);
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        assert_eq!(j.read_stream(&s, 1, 400).unwrap(), before);
        let report = j.verify().unwrap();
        assert!(report.failures.is_empty(), "{report:?}");
    }

    #[test]
    fn a_directory_with_an_integrity_verdict_is_not_compacted() {
        let dir = tempfile::tempdir().unwrap();
        drop(Journal::open(dir.path(), &OpenOptions::new()).unwrap());
        crate::verdict::record_integrity_failure(dir.path(), "record 7 failed its MAC").unwrap();
        let refused = compact_storage(dir.path(), Duration::ZERO).unwrap_err();
        assert!(matches!(refused, CompactError::Refused { .. }), "{refused}");
        let text = refused.to_string();
        assert!(
            text.contains(
                "is not compacted because `ctx audit` found it damaged (record 7 failed its MAC)"
            ),
            "{text}"
        );
    }
}
