//! ctx-projections: the journal-backed half of the engine. The projections framework that keeps
//! derived tables current inside the journal's commits, the engine coordinator with its
//! exactly-once install and activation protocols, the query and consent stores, and the one table
//! of journal streams. The pure domain kernel it runs lives in `ctx-model`. Specified in
//! `spec/projections.md` and `spec/engine-store.md`.
//!
//! Architecture (spec/projections.md "Code"): `framework` and `archive` know only the journal;
//! `engine`, `query_store` and `consent_store` build on them and on ctx-model; `all` lists every
//! domain projection. The three subsystems stay public modules, each with one curated `pub use`
//! list, because together they hold about 200 names (two with their own `codes`) that a flat root
//! would mix; `streams` is public as the one table of stream names the service imports too;
//! everything else is private and listed below once.
#![forbid(unsafe_code)]

mod all;
mod archive;
mod framework;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub mod consent_store;
pub mod engine;
pub mod query_store;
pub mod streams;

pub use all::domain_projections;
pub use archive::ArchiveError;
pub use framework::{
    AttachReport, CheckReport, DIGEST_DOMAIN, DetachedCheck, DetachedStatus, FrameworkError,
    META_BYTES, META_FORMAT, META_MAGIC, META_TABLE, MetaError, Projection, ProjectionMeta,
    ProjectionSummary, Projections, RebuildCause, RebuildReport, TableDifference,
};
