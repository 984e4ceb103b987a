//! One narrow error per operation; each message is a sentence that names the path and the value
//! that broke the rule.

use std::path::PathBuf;
use std::time::Duration;

/// [`crate::fsync_dir`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    #[error("directory {path:?} could not be {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// [`crate::read_bounded`] or [`crate::read_bounded_file`] refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("file {path:?} could not be {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path:?} is a symbolic link, which a bounded read does not follow")]
    Symlink { path: PathBuf },
    #[error("{path:?} is not a regular file (file type {file_type:#o})")]
    NotRegularFile { path: PathBuf, file_type: u32 },
    #[error("file {path:?} is {size_bytes} bytes or more; the limit is {limit_bytes} bytes")]
    TooLarge {
        path: PathBuf,
        /// The file's size when it was refused (at least `limit_bytes + 1`).
        size_bytes: u64,
        limit_bytes: u64,
    },
}

/// [`crate::write_durable`] failed; the temporary file it created is gone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("{path:?} could not be {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path:?} has no parent directory to write it in")]
    NoParent { path: PathBuf },
}

/// A directory or file broke an owner-private rule, or could not be inspected or created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateError {
    #[error("{path:?} could not be {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path:?} is a symbolic link; it must be a real directory or file")]
    Symlink { path: PathBuf },
    #[error("{path:?} is not a directory (file type {file_type:#o})")]
    NotDirectory { path: PathBuf, file_type: u32 },
    #[error("{path:?} is not a regular file (file type {file_type:#o})")]
    NotRegularFile { path: PathBuf, file_type: u32 },
    #[error("{path:?} has mode {found:04o}; it must be exactly {required:04o}")]
    ModeNotExact {
        path: PathBuf,
        found: u32,
        required: u32,
    },
    #[error("{path:?} has mode {found:04o}, which sets the forbidden bits {forbidden:04o}")]
    ModeForbidden {
        path: PathBuf,
        found: u32,
        forbidden: u32,
    },
    #[error("{path:?} is owned by uid {found}, not by this process's effective uid {expected}")]
    Owner {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
}

/// [`crate::DirLock::acquire`] refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    #[error("lock file {path:?} could not be {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("lock file {path:?} is held by {holder}; waited {waited:?}")]
    Held {
        path: PathBuf,
        /// The holder record the lock file holds (`pid <n> (<program>)`), or "an unknown holder".
        holder: String,
        waited: Duration,
    },
    #[error("lock file {path:?} is unsafe to lock: {source}")]
    Unsafe {
        path: PathBuf,
        #[source]
        source: PrivateError,
    },
}
