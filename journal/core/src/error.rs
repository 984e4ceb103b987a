//! Why the journal's operations fail. Builds on `types` (the values an error names); `codec` and
//! everything above build on it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::types::{ExpectedRevision, InputError, StreamId};

/// A failure of the storage underneath the journal: redb and the file system, or another
/// backend (spec/scale-out.md) and its connection.
#[derive(Debug, thiserror::Error)]
#[error("the journal's storage failed: {0}")]
pub struct StorageError(pub(crate) Box<dyn std::error::Error + Send + Sync + 'static>);

impl StorageError {
    /// A backend's failure, kept as the error's source.
    pub fn new(source: impl std::error::Error + Send + Sync + 'static) -> StorageError {
        StorageError(Box::new(source))
    }

    /// A backend's failure described by a sentence.
    pub fn message(message: impl Into<String>) -> StorageError {
        StorageError(message.into().into())
    }
}

/// Why opening a journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("the journal backend at {location} could not be read: {reason}")]
    Backend { location: String, reason: String },
    #[error("data directory {path:?} is not an absolute path")]
    RelativePath { path: PathBuf },
    #[error("data directory {path:?} could not be prepared: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("data directory {path:?} is held by another process ({holder}); waited {waited:?}")]
    Locked {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
    #[error("data directory {path:?} has a journal but no installation key file")]
    KeyMissing { path: PathBuf },
    #[error("installation key file {path:?} is invalid: {reason}")]
    KeyInvalid { path: PathBuf, reason: &'static str },
    #[error("the installation key could not be generated: {reason}")]
    KeyGeneration { reason: String },
    #[error("journal {path:?} has format version {found}; this build reads version {supported}")]
    FormatVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("journal {path:?} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "journal {path:?} was opened by this process before it forked; a forked process cannot use it"
    )]
    ForkedProcess { path: PathBuf },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The ctx-fs errors an open meets. Each has an `Io` variant (the operating system's error and the
/// path ctx-fs was working on); its other variants are broken file rules.
pub(crate) trait FsError: std::error::Error + Send + Sync + Sized + 'static {
    /// The `Io` variant's path and error, or the error itself when it is another variant.
    fn into_io(self) -> Result<(PathBuf, std::io::Error), Self>;
}

macro_rules! fs_error {
    ($($t:ty),*) => {$(
        impl FsError for $t {
            fn into_io(self) -> Result<(PathBuf, std::io::Error), Self> {
                match self {
                    Self::Io { path, source, .. } => Ok((path, source)),
                    other => Err(other),
                }
            }
        }
    )*};
}
fs_error!(
    ctx_fs::LockError,
    ctx_fs::PrivateError,
    ctx_fs::ReadError,
    ctx_fs::SyncError,
    ctx_fs::WriteError
);

impl OpenError {
    /// A ctx-fs failure while preparing `path`, as [`OpenError::Io`] on `path`: the operating
    /// system's error when it is one, the ctx-fs error itself otherwise. The one conversion from
    /// ctx-fs into `OpenError`; a caller matches the variants it reports otherwise (a held lock, a
    /// key file that breaks its rules) before handing over the rest.
    pub(crate) fn fs(path: &Path, error: impl FsError) -> OpenError {
        let source = match error.into_io() {
            Ok((_, source)) => source,
            Err(other) => std::io::Error::other(other),
        };
        OpenError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// As [`OpenError::fs`], but an I/O failure is reported on the path ctx-fs names (a temporary
    /// file, the directory synced) rather than on `path`.
    pub(crate) fn fs_named(path: &Path, error: impl FsError) -> OpenError {
        match error.into_io() {
            Ok((named, source)) => OpenError::Io {
                path: named,
                source,
            },
            Err(other) => OpenError::fs(path, other),
        }
    }
}

/// Why reading from a journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error(
        "authentication failed for stream {stream} revision {revision} (position {position}): {reason}"
    )]
    AuthenticationFailed {
        stream: StreamId,
        revision: u64,
        position: u64,
        reason: &'static str,
    },
    #[error("record at position {position} is corrupt: {reason}")]
    Corrupt { position: u64, reason: String },
    #[error(
        "this journal handle was opened before the process forked; a forked process cannot use it"
    )]
    ForkedProcess,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why an append was refused or failed. Only [`AppendError::Storage`] and
/// [`AppendError::MaybeCommitted`] leave doubt about whether the records were written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("stream {stream} is at revision {current}, not at {expected}")]
    WrongRevision {
        stream: StreamId,
        expected: ExpectedRevision,
        current: u64,
    },
    /// An event id of the append is already in the journal and the append is not a retry of
    /// the one that stored it (spec/journal.md §6); `stream` and `revision` say where it is.
    #[error("{}", conflict_sentence(.event_id, .stream, .revision, .kind))]
    Conflict {
        event_id: String,
        stream: StreamId,
        revision: u64,
        /// What differs from the stored record.
        kind: ConflictKind,
    },
    #[error("projection hook {hook} refused record {event_id}: {message}")]
    Hook {
        hook: String,
        event_id: String,
        message: String,
        /// The hook's machine-readable code ([`crate::HookError::code`]), if it gave one.
        code: Option<&'static str>,
    },
    #[error("the journal stopped accepting writes after a failed commit; reopen it")]
    FailStopped,
    #[error(
        "the journal refuses writes because it failed an integrity check when opened: {detail}"
    )]
    Integrity { detail: String },
    #[error(
        "this journal handle was opened before the process forked; a forked process cannot use it"
    )]
    ForkedProcess,
    #[error("reading existing records for the append failed: {0}")]
    Read(#[from] ReadError),
    #[error(
        "the commit may or may not have reached the disk ({reason}); reopen and retry with the same event ids"
    )]
    MaybeCommitted { reason: String },
    #[error("the append was not committed ({reason}); nothing was written and it may be retried")]
    NotCommitted { reason: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why an event id already in the journal refuses an append (spec/journal.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictKind {
    /// The id is stored in another stream: an event id names one event in one stream, whatever
    /// the content.
    OtherStream,
    /// The id is stored in the appended stream with another kind, timestamp or payload.
    OtherContent,
    /// The id is stored in the appended stream, but other records of the same stream part are
    /// new: a retry repeats its original append exactly, so this is not one.
    PartialRetry,
}

/// The sentence of [`AppendError::Conflict`]: each kind names its own fault.
fn conflict_sentence(
    event_id: &str,
    stream: &StreamId,
    revision: &u64,
    kind: &ConflictKind,
) -> String {
    match kind {
        ConflictKind::OtherStream => format!(
            "event id {event_id} is already used in stream {stream} (at revision {revision}); an \
             event id names one event in one stream"
        ),
        ConflictKind::OtherContent => format!(
            "event id {event_id} is already in stream {stream} at revision {revision} with other \
             content"
        ),
        ConflictKind::PartialRetry => format!(
            "event id {event_id} is already in stream {stream} at revision {revision}, but other \
             records of the append are new; a retry repeats the original append exactly"
        ),
    }
}

/// Why a full verification pass could not run. Integrity findings are not errors; they are listed
/// in the returned report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    #[error(
        "this journal handle was opened before the process forked; a forked process cannot use it"
    )]
    ForkedProcess,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why a projection read, write or maintenance transaction failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    #[error("projection table name \"{name}\" must start with \"proj.\" and be at most 64 bytes")]
    TableName { name: String },
    #[error(
        "this journal handle was opened before the process forked; a forked process cannot use it"
    )]
    ForkedProcess,
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The maintenance closure refused; nothing it wrote was committed.
    #[error("projection maintenance was refused: {message}")]
    Hook {
        message: String,
        code: Option<&'static str>,
    },
    /// A replayed record was refused by the function applying it; nothing was committed.
    #[error("replaying record {event_id} at position {position} failed: {message}")]
    Apply {
        position: u64,
        event_id: String,
        message: String,
        code: Option<&'static str>,
    },
    /// A record read during a replay failed its structure or authentication checks.
    #[error("reading the journal for projection maintenance failed: {0}")]
    Read(#[from] ReadError),
    #[error("the journal stopped accepting writes after a failed commit; reopen it")]
    FailStopped,
    #[error(
        "the journal refuses writes because it failed an integrity check when opened: {detail}"
    )]
    WriteRefused { detail: String },
    /// The maintenance closure panicked; its transaction was aborted, nothing was committed.
    #[error("projection maintenance panicked and was rolled back: {message}")]
    Panicked { message: String },
    /// The maintenance commit failed; the journal is fail-stopped, as after a failed append.
    #[error(
        "the projection maintenance commit may or may not have reached the disk ({reason}); reopen the journal"
    )]
    MaybeCommitted { reason: String },
}

impl ProjectionError {
    /// The machine-readable code of a refusal ([`ProjectionError::Hook`] or
    /// [`ProjectionError::Apply`]), if its hook gave one.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ProjectionError::Hook { code, .. } | ProjectionError::Apply { code, .. } => *code,
            _ => None,
        }
    }
}

/// Why a stored record value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the record value is invalid: {reason}")]
pub struct DecodeError {
    pub(crate) reason: &'static str,
}
