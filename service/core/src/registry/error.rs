//! Typed errors of the artifact registry.
//!
//! Every message is one sentence naming the value or file at fault. The three identity messages
//! (foreign handle, foreign process for a handle, foreign process for the registry) are the
//! reference's exact sentences, because the service and its seed tests match on them.

use std::path::PathBuf;

/// Why a registry operation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry root path is not acceptable (relative, a filesystem root, a symbolic link, not
    /// a directory, not owner-private, owned by someone else).
    #[error("managed artifact registry root {path} {problem}")]
    UnsafeRoot { path: PathBuf, problem: String },
    /// A directory or file inside the registry is not what the layout requires (a symbolic link,
    /// the wrong type or mode, an unexpected entry).
    #[error("managed artifact registry path {path} {problem}")]
    UnsafeEntry { path: PathBuf, problem: String },
    /// An operating-system call failed.
    #[error("managed artifact registry could not {operation} {path}: {source}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An ingest or reopen argument is malformed.
    #[error("managed artifact input {field} {value:?} {problem}")]
    InvalidInput {
        field: &'static str,
        value: String,
        problem: String,
    },
    /// The observation surrogate is not an exact, credential-free current-work surrogate.
    #[error("managed artifact observation surrogate is invalid: {problem}")]
    InvalidSurrogate { problem: String },
    /// A catalog-derived digest supplied to ingest differs from the one the catalog yields.
    #[error(
        "managed artifact input {field} {supplied:?} does not match the ingested catalog, which \
         yields {catalog:?}"
    )]
    CatalogMismatch {
        field: &'static str,
        supplied: String,
        catalog: String,
    },
    /// The manifest would exceed [`super::MANIFEST_MAX_BYTES`].
    #[error("managed artifact manifest is {size} bytes, more than the limit of {limit} bytes")]
    ManifestTooLarge { size: usize, limit: usize },
    /// No manifest with this digest exists in the registry.
    #[error("managed artifact manifest {manifest_digest} does not exist in this registry")]
    NotFound { manifest_digest: String },
    /// A content address is already taken by different bytes.
    #[error("managed artifact content address {path} is occupied by different content")]
    Occupied { path: PathBuf },
    /// A stored file no longer matches what the registry wrote.
    #[error("managed artifact file {path} is corrupt: {problem}")]
    Corrupt { path: PathBuf, problem: String },
    /// The manifest binds another planning environment than the caller expects.
    #[error(
        "managed artifact planning environment does not match: manifest {manifest_digest} binds \
         {bound}, the caller expects {expected}"
    )]
    EnvironmentMismatch {
        manifest_digest: String,
        bound: String,
        expected: String,
    },
    /// A planning authority (benefit facts, policy, material or install port) now reports a
    /// snapshot other than the one the artifact was ingested with.
    #[error(
        "managed planning authority snapshot does not match its artifact: {field} is {captured}, \
         but the artifact binds {bound}"
    )]
    AuthorityDrift {
        field: &'static str,
        captured: String,
        bound: String,
    },
    /// The handle was issued by another registry instance (even one over the same directory).
    #[error("managed query artifact was not issued by this service registry")]
    ForeignHandle,
    /// The handle was issued in another process.
    #[error("managed artifact handle is unavailable outside its issuing process")]
    HandleOutsideProcess { issuing_pid: u32, current_pid: u32 },
    /// Another registry handle or process held the publication lock for the whole bounded wait
    /// ([`super::REGISTRY_LOCK_WAIT_MAX_MS`] unless the registry was opened with another); the
    /// holder is the record the lock file holds (`pid <n> (<program>)`) or "an unknown holder".
    #[error(
        "managed artifact registry publication lock {path} is held by {holder}; the registry gave \
         up after waiting {waited_ms} ms"
    )]
    LockTimeout {
        path: PathBuf,
        holder: String,
        waited_ms: u128,
    },
    /// The registry was opened in another process.
    #[error("managed artifact registry is unavailable outside its issuing process")]
    RegistryOutsideProcess { issuing_pid: u32, current_pid: u32 },
}

impl RegistryError {
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> RegistryError {
        let path = path.into();
        move |source| RegistryError::Io {
            operation,
            path,
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, problem: impl Into<String>) -> RegistryError {
        RegistryError::Corrupt {
            path: path.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn unsafe_entry(
        path: impl Into<PathBuf>,
        problem: impl Into<String>,
    ) -> RegistryError {
        RegistryError::UnsafeEntry {
            path: path.into(),
            problem: problem.into(),
        }
    }
}
