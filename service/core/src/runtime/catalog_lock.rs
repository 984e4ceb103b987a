//! The catalog lock of a data directory (`.catalog.lock`, spec/cli.md §2): held shared while a
//! process loads `catalog/`, exclusive while an ingest replaces it, waited for at most 10 s.

use std::time::Duration;

use ctx_fs::{DirLock, LockError, LockOptions, create_private_dir_all};

use super::RuntimeError;
use crate::data_dir::Layout;

/// How long an open or an ingest waits for another process's catalog ingest before giving up,
/// so that a stuck process can never hang a host's hook.
const CATALOG_LOCK_WAIT_MAX_MS: u64 = 10_000;
/// Pause between two attempts at the catalog lock.
const CATALOG_LOCK_POLL_MS: u64 = 5;

/// A held lock on the data directory's catalog: shared while a runtime loads it, exclusive while
/// an ingest replaces it. An ingest swaps the catalog directory with two renames; without the
/// lock a concurrent open could look between them and find no catalog, or two first ingests
/// could both rename into place and one fail.
pub(crate) struct CatalogLock {
    _lock: DirLock,
}

impl CatalogLock {
    /// Takes the lock (`exclusive` for an ingest), creating the data directory and its lock file
    /// when absent.
    pub(crate) fn acquire(layout: &Layout, exclusive: bool) -> Result<CatalogLock, RuntimeError> {
        create_private_dir_all(layout.root())?;
        let path = layout.root().join(".catalog.lock");
        let poll = Duration::from_millis(CATALOG_LOCK_POLL_MS);
        let mut options = LockOptions::new(Duration::from_millis(CATALOG_LOCK_WAIT_MAX_MS))
            .poll(poll, poll)
            .self_held_grace(Duration::ZERO);
        if !exclusive {
            options = options.shared();
        }
        match DirLock::acquire(&path, &options) {
            Ok(lock) => Ok(CatalogLock { _lock: lock }),
            Err(LockError::Held { .. }) => Err(RuntimeError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "another process held the catalog lock for more than {} s",
                        CATALOG_LOCK_WAIT_MAX_MS / 1_000
                    ),
                ),
            }),
            Err(LockError::Io { source, .. }) => Err(RuntimeError::Io { path, source }),
            Err(other) => Err(RuntimeError::Io {
                path,
                source: std::io::Error::other(other),
            }),
        }
    }

    /// The exclusive lock if it is free at this moment (no wait): proof that no ingest runs.
    pub(crate) fn try_exclusive(layout: &Layout) -> Result<CatalogLock, LockError> {
        let options = LockOptions::new(Duration::ZERO).self_held_grace(Duration::ZERO);
        DirLock::acquire(&layout.root().join(".catalog.lock"), &options)
            .map(|lock| CatalogLock { _lock: lock })
    }
}
