//! The advisory process lock on `ctx.lock` in the data directory (spec/journal.md §8). redb locks
//! its own file; this separate lock lets a second process wait for a bounded time and name the
//! holder in its error. The lock itself is ctx-fs's [`ctx_fs::DirLock`] (spec/fs.md rule 8).

use std::path::Path;
use std::time::Duration;

use ctx_fs::{DirLock, LockError, LockOptions};

use crate::error::OpenError;

pub const LOCK_FILE: &str = "ctx.lock";

/// The held lock; dropping it releases the data directory.
#[derive(Debug)]
pub(crate) struct ProcessLock {
    _lock: DirLock,
}

/// Takes the lock of the data directory `dir`, waiting at most `wait` for another process. The
/// caller has checked that this process has the directory open nowhere, so a lock whose record
/// names this process is a copy inherited by a child between fork and exec (flock locks belong to
/// the open file, which fork shares); it goes away at the child's exec or exit, so the lock's
/// self-held grace waits for it a little even when told not to wait.
pub(crate) fn acquire(dir: &Path, wait: Duration) -> Result<ProcessLock, OpenError> {
    let path = dir.join(LOCK_FILE);
    match DirLock::acquire(&path, &LockOptions::new(wait)) {
        Ok(lock) => Ok(ProcessLock { _lock: lock }),
        Err(LockError::Held { holder, waited, .. }) => Err(OpenError::Locked {
            path: dir.to_path_buf(),
            holder,
            waited,
        }),
        Err(other) => Err(OpenError::fs(&path, other)),
    }
}
