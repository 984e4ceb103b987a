//! The managed artifact registry (spec/registry.md, specified in
//! `spec/registry.md`): an owner-private, content-addressed store of immutable catalog artifacts
//! and the manifests binding each artifact to the snapshot digests and observation surrogate that
//! planning replays against.
//!
//! The reference stores a SQLite graph; our graph artifact is the catalog of `spec/catalog.md` in
//! its canonical bytes plus the body files it declares, so an artifact can be audited with a text
//! editor and its digest is the catalog content digest. Callers never see paths: they hold an
//! [`ArtifactHandle`], which only the issuing registry instance in the issuing process honours.

mod error;
mod fsutil;
mod handle;
mod manifest;
mod store;
mod surrogate;
#[cfg(test)]
mod tests;

pub use error::RegistryError;
pub use handle::{ArtifactHandle, CapturedAuthority};
pub use store::{ArtifactRegistry, IngestInputs};
// Used by this module's unit tests only.
#[cfg(test)]
use store::{ARTIFACTS_DIR, MANIFESTS_DIR, PUBLICATION_LOCK_FILE};

/// Largest manifest body accepted or written.
pub const MANIFEST_MAX_BYTES: usize = 32 * 1024;
/// Longest wait for the publication lock (held by another registry handle or process) before an
/// open, ingest or reopen gives up with [`RegistryError::LockTimeout`]; the same bound as the
/// skill store's and the policy store's locks.
pub const REGISTRY_LOCK_WAIT_MAX_MS: u64 = 30_000;
/// Pause between two attempts at the publication lock.
pub const REGISTRY_LOCK_POLL_MS: u64 = 10;
/// Most entries one registry directory scan visits.
pub const DIRECTORY_ENTRIES_MAX: usize = 8_192;
/// Most entries one artifact walk visits, in all of its directories: a `ctx.catalog-v2` catalog of
/// 100,000 entries, each a body or a small skill tree, with room to spare (spec/registry.md).
pub const ARTIFACT_ENTRIES_MAX: usize = 2_000_000;
