//! The capability catalog: the `ctx.catalog-v1` JSON format (spec/catalog.md), its strict parser
//! and body-verifying loader, the digests a planning environment pins, and retrieval of
//! [`CapabilityCandidate`]s for a [`WorkObservation`] (spec/catalog.md §5.2, §5.3, §4,
//! spec/catalog.md §5.1, §5.3).
//!
//! The catalog is our own JSON document rather than the reference's SQLite graph: a reviewed
//! text file with digests of every body it ships is simpler to audit, and the same digests are
//! computed whatever tool wrote it. Material and install descriptors are built with
//! ctx-model's identity documents, so the engine and the catalog agree on every digest formula.

mod common_words;
mod error;
#[cfg(test)]
mod flag_tests;
mod flags;
mod format;
mod frontmatter;
mod import;
mod load;
mod names;
mod observation;
mod open;
mod pack;
mod projection;
mod retrieval;
mod snapshot;
#[cfg(test)]
mod tests;
mod tree;
#[cfg(test)]
mod v2_tests;
mod work;

pub use error::{CatalogError, ObservationError, RetrievalError};
pub use format::{
    BODY_V2_MAX_BYTES, CATALOG_MAX_ENTRIES, CATALOG_SCHEMA_V2, CATALOG_TEXT_MAX_BYTES,
    CATALOG_V2_MAX_ENTRIES, TREE_PACK_MAX_BYTES, is_body_path,
};
pub use frontmatter::{
    FRONTMATTER_MAX_BYTES, FRONTMATTER_MAX_KEYS, FRONTMATTER_MAX_NESTING_LEVELS, FmValue,
    Frontmatter, FrontmatterError, FrontmatterWarning, parse_frontmatter,
};
pub use import::{
    BUILD_MARKER_FILE, BuildError, CATALOG_BUILD_INSTALLER_ID, CATALOG_BUILD_PLAN_SCHEMA, Finding,
    FindingSeverity, Import, ImportedEntry, MANIFEST_MAX_BYTES, Provenance,
    SOURCES_MAX_DEPTH_LEVELS, SOURCES_MAX_DIRECTORIES, SOURCES_MAX_LISTED_ENTRIES, WriteReport,
    import_sources, merge, write_catalog,
};
pub use load::{
    CATALOG_FILE_NAME, LoadedCatalog, load_catalog, load_catalog_dir, load_catalog_entries,
};
pub use names::{
    AgentCheck, BUNDLED_SKILL_NAMES, DESCRIPTION_MAX_CHARS, DISCOURAGED_NAME_WORDS, NAME_MAX_CHARS,
    NameFinding, OPEN_SPEC_SKILL_KEYS, RESERVED_SKILL_DIRECTORY_NAMES, Severity, SkillCheck,
    check_agent, check_skill,
};
/// Most signals of a work observation; the runtime keeps no more (spec/catalog.md §5.1).
pub(crate) use observation::SIGNALS_MAX_TOKENS;
pub use observation::{PublicWork, WorkObservation, normalize_public_work};
pub use open::{CatalogFileError, CatalogFileKind, open_catalog_file};
pub use pack::{SKILL_PACK_MAX_BYTES, SKILL_PACK_SCHEMA, skill_pack, skill_pack_identity};
pub use projection::{
    PROJECTION_FILE_NAME, PROJECTION_FORMAT_VERSION, ProjectionEncodeError, ProjectionError,
    ProjectionProblem, projection_format_version,
};
pub use retrieval::{Actionability, CapabilityCandidate, retrieve, retrieve_with_limit};
pub use snapshot::Catalog;
pub use tree::{
    SKILL_FILE_MAX_BYTES, SKILL_MD_MAX_BYTES, SKILL_PATH_MAX_BYTES, SKILL_TREE_MAX_BYTES,
    SKILL_TREE_MAX_DEPTH, SKILL_TREE_MAX_ENTRIES, SKILL_TREE_MAX_FILES, SkillFile, SkillTree,
    SkillTreeDifference, SkillTreeError, read_skill_tree, read_skill_tree_at, verify_skill_tree,
};
pub(crate) use work::is_credential_like;
pub(crate) use work::{Spellings, TokenRule, language, tokenize, truncate};
// Used by this module's unit tests only.
#[cfg(test)]
use format::{InstallSpec, LABEL_MAX_BYTES, TAGS_MAX_PER_ENTRY};
#[cfg(test)]
use observation::{ACTIVE_MAX_IDS, REPO_FACTS_MAX_STRINGS};
#[cfg(test)]
use retrieval::{CANDIDATE_POOL_DEFAULT_ENTRIES, SCORE_MAX_PPM, remove_ambiguous};
#[cfg(test)]
use work::canonical_language;

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
