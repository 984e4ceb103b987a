//! Typed errors of the catalog: parsing, loading and observation building.
//!
//! Every message is one sentence naming the value at fault. A catalog error about one capability
//! always carries the entry's position and capability id and the field, because a catalog of
//! hundreds of entries is edited by hand and "invalid catalog" alone would send the author
//! searching.

use std::path::PathBuf;

/// How an entry is named in messages: its position in `capabilities` and, when it has a string
/// `id`, that id (quoted as written, so an invalid id is still recognisable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// Zero-based position in the `capabilities` array.
    pub index: usize,
    /// The entry's `id` as written, if it is a string.
    pub id: Option<String>,
}

impl std::fmt::Display for EntryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "catalog entry {} ({id:?})", self.index),
            None => write!(f, "catalog entry {} (without a string id)", self.index),
        }
    }
}

/// Why a catalog was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The catalog text is larger than [`super::CATALOG_TEXT_MAX_BYTES`].
    #[error("the catalog text is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The catalog file is larger than [`super::CATALOG_TEXT_MAX_BYTES`]; `size_bytes` is the
    /// file's own size, not how much of it the bounded read took.
    #[error(
        "the catalog file {path:?} is {size_bytes} bytes, more than the limit of {limit_bytes} bytes"
    )]
    FileTooLarge {
        path: PathBuf,
        size_bytes: u64,
        limit_bytes: u64,
    },
    /// The text is not strict JSON (syntax, duplicate key, nesting, number range).
    #[error("the catalog text is not accepted as JSON: {detail}")]
    Json { detail: String },
    /// A top-level field (`schema`, `namespace`, `capabilities`, or an unknown key) is wrong.
    #[error("the catalog field {field:?} {problem}")]
    TopLevel { field: String, problem: String },
    /// One capability entry is malformed; `field` is a dotted path inside the entry
    /// (e.g. `install.plan_digest`, `tags[3]`).
    #[error("{entry} field {field:?} {problem}")]
    Entry {
        entry: EntryRef,
        field: String,
        problem: String,
    },
    /// A body file named by an entry is missing, unreadable or differs from its declaration.
    #[error("{entry} field {field:?} names the body file {path:?}, which {problem}")]
    Body {
        entry: EntryRef,
        field: String,
        path: String,
        problem: String,
    },
    /// A skill tree named by an entry (`ctx.catalog-v2`) cannot be read under the walk rules or
    /// differs from its declaration (spec/catalog.md §1.4).
    #[error("{entry} field {field:?} names the skill tree {path:?}, which {problem}")]
    Tree {
        entry: EntryRef,
        field: String,
        path: String,
        problem: String,
    },
    /// A flag is `false` where the rule of spec/catalog.md §7 derives `true` from the material,
    /// or a `load` skill's material would need a flag (it reaches the host with no decision).
    #[error("{entry} field {field:?} {problem}")]
    Flags {
        entry: EntryRef,
        field: String,
        problem: String,
    },
    /// The catalog file itself could not be read.
    #[error("the catalog file {path:?} could not be read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `catalog.json` or a body breaks the file rules (spec/catalog.md §3): a symbolic link, a
    /// second hard link, not a regular file, a path leaving the catalog directory. The sentence
    /// is the file rule's own; `entry` and `field` name the entry whose body it is.
    #[error("{source}")]
    File {
        entry: Option<EntryRef>,
        field: Option<String>,
        #[source]
        source: super::open::CatalogFileError,
    },
}

impl CatalogError {
    /// The entry the error is about, if it is about one.
    pub fn entry(&self) -> Option<&EntryRef> {
        match self {
            CatalogError::Entry { entry, .. }
            | CatalogError::Body { entry, .. }
            | CatalogError::Tree { entry, .. }
            | CatalogError::Flags { entry, .. } => Some(entry),
            CatalogError::File { entry, .. } => entry.as_ref(),
            _ => None,
        }
    }

    /// The field the error is about (dotted path inside an entry, or a top-level key).
    pub fn field(&self) -> Option<&str> {
        match self {
            CatalogError::Entry { field, .. }
            | CatalogError::Body { field, .. }
            | CatalogError::Tree { field, .. }
            | CatalogError::Flags { field, .. }
            | CatalogError::TopLevel { field, .. } => Some(field),
            CatalogError::File { field, .. } => field.as_deref(),
            _ => None,
        }
    }
}

/// Why a work observation or a public-work description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObservationError {
    /// A token list has more items than its limit.
    #[error("{field} has {count} items, more than its limit of {limit} items")]
    TooMany {
        field: &'static str,
        count: usize,
        limit: usize,
    },
    /// A token list item is not a lowercase safe token.
    #[error("{field} item {value:?} is not a canonical safe token")]
    BadToken { field: &'static str, value: String },
    /// A token list holds the same value twice.
    #[error("{field} contains the value {value:?} twice")]
    Duplicate { field: &'static str, value: String },
    /// `requested_limit` is outside `0..=5`.
    #[error("requested_limit {value} is outside the range 0 through {max}")]
    RequestedLimit { value: i64, max: i64 },
    /// A public-work text input is longer than its limit.
    #[error("{field} is {size} bytes, more than its limit of {limit} bytes")]
    TextTooLong {
        field: &'static str,
        size: usize,
        limit: usize,
    },
}

/// Why a retrieval was refused (only the caller-supplied pool limit can be wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetrievalError {
    #[error("candidate limit {value} is outside the range {min} through {max} entries")]
    CandidateLimit {
        value: usize,
        min: usize,
        max: usize,
    },
}
