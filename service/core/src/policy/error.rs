//! The typed errors of the install consent policy, its store and consent routing. `Display` is
//! the reference's sentence (spec/policy.md §2, §3–§5, §6, §7) wherever the reference has
//! one, so hosts can match on it; the few sentences the reference leaves unspecified (the lock,
//! the root shape, I/O) are listed in `spec/policy.md` §7.

use std::io;
use std::path::PathBuf;

/// A policy value, a routing decision or an install plan descriptor is malformed (the
/// reference's plain `ValueError` sentences of `installation.py`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    #[error("install consent policy must be an object")]
    NotAnObject,
    /// The names are sorted and joined with `", "`.
    #[error("install consent policy has unknown fields: {0}")]
    UnknownFields(String),
    /// The names are sorted and joined with `", "`.
    #[error("install consent policy is missing fields: {0}")]
    MissingFields(String),
    #[error("install consent policy schema is unsupported")]
    SchemaUnsupported,
    /// `field` is `skill_mode`, `agent_mode` or `mcp_server_mode`.
    #[error("{field} is not a declared install consent mode")]
    UndeclaredMode { field: &'static str },
    #[error("policy_digest must be a lowercase SHA-256 digest")]
    DigestFormat,
    #[error("policy_digest does not match policy fields")]
    DigestMismatch,
    #[error("kind is not an installable capability kind")]
    NotInstallableKind,
    #[error("decision_basis is not a declared installation decision basis")]
    UndeclaredDecisionBasis,
    /// The install plan descriptor failed its own validation; the sentence is the descriptor's
    /// (for example "descriptor_digest does not match descriptor fields").
    #[error("{0}")]
    Descriptor(String),
}

/// The on-disk policy store violates its integrity contract, or the file system failed (the
/// reference's `InstallPolicyStoreError`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyStoreError {
    #[error("install policy root cannot be a filesystem root")]
    FilesystemRoot,
    /// Our addition: the root must be given absolute and without `..` (the reference resolves
    /// it against the working directory instead).
    #[error("install policy root must be an absolute normalized path")]
    RootNotAbsolute,
    /// The path or one of its existing ancestors is a symbolic link.
    #[error("refusing to use symlinked path: {}", .0.display())]
    SymlinkedPath(PathBuf),
    /// `label` is `install policy root`, `install policy snapshots directory` or
    /// `install policy root parent`.
    #[error("{label} must be a real directory")]
    NotADirectory { label: &'static str },
    #[error("{label} must not be group or world writable")]
    DirectoryWritable { label: &'static str },
    #[error("{label} must use mode 0700")]
    DirectoryMode { label: &'static str },
    #[error("{label} must be owned by the current user")]
    DirectoryOwner { label: &'static str },
    /// `name` is the file name only (`current.json`, `<digest>.json`), never a path.
    #[error("policy file is missing: {name}")]
    FileMissing { name: String },
    #[error("policy file must not be a symlink: {name}")]
    FileSymlink { name: String },
    #[error("policy file must be a regular file: {name}")]
    FileNotRegular { name: String },
    #[error("policy file must not be group or world writable: {name}")]
    FileWritable { name: String },
    #[error("policy file must use mode 0600: {name}")]
    FileMode { name: String },
    #[error("policy file must not be hard linked: {name}")]
    FileHardLinked { name: String },
    #[error("policy file {name} must be owned by the current user")]
    FileOwner { name: String },
    #[error("policy file exceeds the size limit")]
    FileTooLarge,
    #[error("policy file changed while being read")]
    FileChanged,
    #[error("policy file must be strict UTF-8: {name}")]
    NotUtf8 { name: String },
    #[error("duplicate JSON key: {key}")]
    DuplicateKey { key: String },
    #[error("policy file is invalid JSON: {name}")]
    InvalidJson { name: String },
    #[error("policy JSON must be an object")]
    NotAnObject,
    /// The file decoded as JSON but not as a policy; the sentence is the policy's own.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("policy file must use exact canonical JSON")]
    NotCanonical,
    #[error("policy snapshot digest does not match its filename")]
    SnapshotNameMismatch,
    #[error("immutable policy snapshot content changed")]
    SnapshotContentChanged,
    #[error("current policy exists without a snapshots directory")]
    MissingSnapshotsDirectory,
    #[error("current policy has no matching immutable snapshot")]
    MissingSnapshot,
    #[error("current policy does not match its immutable snapshot")]
    SnapshotMismatch,
    #[error("expected policy digest must be lowercase SHA-256")]
    ExpectedDigest,
    #[error("no persisted install policy is available")]
    NothingPersisted,
    #[error("current install policy snapshot changed")]
    PolicyChanged,
    #[error("install policy store identity changed")]
    StoreIdentityChanged,
    /// The lock file is not a private regular file of ours with one link.
    #[error("install policy lock file violates its integrity contract")]
    LockIntegrity,
    /// The lock file was replaced between opening and locking it.
    #[error("install policy lock file changed while acquiring the lock")]
    LockChanged,
    /// Another holder (another handle, thread or process) kept the lock for the whole wait.
    #[error("install policy lock was not acquired within {millis} ms")]
    LockTimeout { millis: u128 },
    /// The file system refused an operation no input explains.
    #[error("install policy store could not {action}: {source}")]
    Io {
        action: &'static str,
        #[source]
        source: io::Error,
    },
}

impl PolicyStoreError {
    pub(crate) fn io(action: &'static str) -> impl FnOnce(io::Error) -> PolicyStoreError {
        move |source| PolicyStoreError::Io { action, source }
    }
}

/// Consent routing refused a request (the reference's `InstallConsentRoutingError`, its
/// `TypeError` and the directive's `ValueError` sentences).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RoutingError {
    /// The selection is not a valid schema-v3 plan row, the descriptor not a valid install plan
    /// descriptor, or the request not a valid host action. `detail` names the fault for `Debug`
    /// only.
    #[error("consent routing requires typed request, selection, plan, and policy")]
    Untyped { detail: String },
    /// One of the binding rules of spec/policy.md §6, §7 failed.
    #[error("consent request does not match current policy and install identity")]
    Mismatch,
    #[error("decision must be granted or denied")]
    Decision,
    /// A directive field is malformed (`<field> must be a canonical token`, `<field> must be a
    /// lowercase SHA-256 digest`, `requested_action_precondition_revision must be positive`, …).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Policy(#[from] PolicyError),
}
