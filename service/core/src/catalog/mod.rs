//! The capability catalog: the `ctx.catalog-v1` JSON format (spec/catalog.md), its strict parser
//! and body-verifying loader, the digests a planning environment pins, and retrieval of
//! [`CapabilityCandidate`]s for a [`WorkObservation`] (spec/catalog.md §5.2, §5.3, §4,
//! spec/catalog.md §5.1, §5.3).
//!
//! The catalog is our own JSON document rather than the reference's SQLite graph: a reviewed
//! text file with digests of every body it ships is simpler to audit, and the same digests are
//! computed whatever tool wrote it. Material and install descriptors are built with
//! ctx-model's identity documents, so the engine and the catalog agree on every digest formula.

mod error;
#[cfg(test)]
mod flag_tests;
mod format;
mod load;
mod observation;
mod retrieval;
mod snapshot;
#[cfg(test)]
mod tests;

pub use error::{CatalogError, EntryRef, ObservationError, RetrievalError};
pub use format::{
    BODY_MAX_BYTES, BODY_MAX_TOKENS, BODY_PATH_MAX_BYTES, BodyRef, CATALOG_MAX_ENTRIES,
    CATALOG_SCHEMA, CATALOG_TEXT_MAX_BYTES, CapabilityKind, CatalogEntry, InstallSpec,
    LABEL_MAX_BYTES, MaterialSpec, RELATED_MAX_PER_ENTRY, TAGS_MAX_PER_ENTRY, estimated_tokens,
    is_body_path,
};
pub use load::{CATALOG_FILE_NAME, LoadedCatalog, load_catalog, load_catalog_dir};
pub use observation::{
    ACTIVE_MAX_IDS, BASELINE_MAX_IDS, LANGUAGES_MAX_TOKENS, PUBLIC_TEXT_MAX_BYTES,
    PUBLIC_WORK_SIGNALS_TARGET, PublicWork, REJECTED_MAX_IDS, REPO_FACTS_MAX_STRINGS,
    REQUESTED_LIMIT_MAX, SIGNALS_MAX_TOKENS, WorkObservation, canonical_language,
    normalize_public_work,
};
pub use retrieval::{
    Actionability, CANDIDATE_POOL_DEFAULT_ENTRIES, CANDIDATE_POOL_MAX_ENTRIES,
    CANDIDATE_POOL_MIN_ENTRIES, CapabilityCandidate, MATCHING_SIGNALS_MAX_TOKENS, SCORE_MAX_PPM,
    remove_ambiguous, retrieve, retrieve_with_limit,
};
pub use snapshot::{
    CATALOG_ENTRY_PROJECTION, Catalog, INSTALLATION_MANIFEST_SCHEMA, MATERIAL_MANIFEST_SCHEMA,
    NAMESPACE_SCHEMA, RETRIEVAL_ADAPTER_VERSION,
};

/// The sample catalog directory shipped with this crate (`service/catalog`), in the source tree.
pub fn sample_catalog_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog")
}

include!(concat!(env!("OUT_DIR"), "/sample_catalog.rs"));

/// The sample catalog as compiled into this crate: every file (`catalog.json` and the bodies it
/// pins) with its path relative to the catalog directory, sorted by path. An installed binary
/// ingests this, not the source tree.
pub fn sample_catalog_files() -> &'static [(&'static str, &'static [u8])] {
    SAMPLE_CATALOG_FILES
}
