//! The skill CAS's typed errors. `Display` is the reference's sentence (spec/skill-cas.md),
//! so callers and tests can match on it; the variant is the reference's exception class.
//!
//! | Variant | Reference class |
//! |---|---|
//! | [`SkillCasError::Invalid`] | `ValueError` / `TypeError` of a caller-supplied value |
//! | [`SkillCasError::Error`] | `SkillCasError` |
//! | [`SkillCasError::Conflict`] | `SkillCasConflict` (a `SkillCasError`) |
//! | [`SkillCasError::FilesystemError`] | `SkillCasFilesystemError` |
//! | [`SkillCasError::FilesystemConflict`] | `SkillCasFilesystemConflict` (a filesystem error) |
//! | [`SkillCasError::FilesystemUnsupported`] | `SkillCasFilesystemUnsupported` (a filesystem error) |
//!
//! Causes (an OS error, a body-source error, or the skill CAS error a wrapper replaced) are kept as
//! `source()` and never appear in `Display`; none of them carries a path or skill content.

use std::error::Error as StdError;

/// A boxed cause kept for diagnostics.
pub type Cause = Box<dyn StdError + Send + Sync + 'static>;

/// Why a skill CAS operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillCasError {
    /// A caller-supplied value is malformed (the reference's `ValueError`/`TypeError` sentences,
    /// for example `host_identity_digest must be a lowercase SHA-256 digest`).
    #[error("{message}")]
    Invalid { message: String },
    /// The skill CAS refused the request (the reference's `SkillCasError`).
    #[error("{message}")]
    Error {
        message: &'static str,
        source: Option<Cause>,
    },
    /// The content address holds something the store will not write over (`SkillCasConflict`).
    #[error("{message}")]
    Conflict { message: &'static str },
    /// An operating-system operation failed, or an error was raised while the pinned directory
    /// was open (`SkillCasFilesystemError`).
    #[error("{message}")]
    FilesystemError {
        message: &'static str,
        source: Option<Cause>,
    },
    /// The filesystem holds unsafe or unexpected metadata (`SkillCasFilesystemConflict`).
    #[error("{message}")]
    FilesystemConflict { message: &'static str },
    /// The platform lacks a primitive the store requires (`SkillCasFilesystemUnsupported`).
    #[error("{message}")]
    FilesystemUnsupported { message: &'static str },
}

impl SkillCasError {
    /// True for the two conflict classes (`SkillCasConflict`, `SkillCasFilesystemConflict`),
    /// which `reconcile` reports as a `conflict` observation.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            SkillCasError::Conflict { .. } | SkillCasError::FilesystemConflict { .. }
        )
    }

    /// True for the filesystem classes (error, conflict, unsupported): the ones that pass through
    /// the pinned-directory scope unchanged.
    pub fn is_filesystem(&self) -> bool {
        matches!(
            self,
            SkillCasError::FilesystemError { .. }
                | SkillCasError::FilesystemConflict { .. }
                | SkillCasError::FilesystemUnsupported { .. }
        )
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> SkillCasError {
    SkillCasError::Invalid {
        message: message.into(),
    }
}

pub(crate) fn cas_error(message: &'static str, source: Option<Cause>) -> SkillCasError {
    SkillCasError::Error { message, source }
}

pub(crate) fn conflict(message: &'static str) -> SkillCasError {
    SkillCasError::Conflict { message }
}

pub(crate) fn fs_conflict(message: &'static str) -> SkillCasError {
    SkillCasError::FilesystemConflict { message }
}

/// A filesystem error caused by an OS error.
pub(crate) fn fs_error(message: &'static str, cause: impl Into<std::io::Error>) -> SkillCasError {
    SkillCasError::FilesystemError {
        message,
        source: Some(Box::new(cause.into())),
    }
}

/// `map_err` helper: an OS error becomes the filesystem error `message`.
pub(crate) fn os(message: &'static str) -> impl FnOnce(rustix::io::Errno) -> SkillCasError {
    move |errno| fs_error(message, errno)
}

/// `map_err` helper for std I/O errors.
pub(crate) fn io(message: &'static str) -> impl FnOnce(std::io::Error) -> SkillCasError {
    move |e| fs_error(message, e)
}
