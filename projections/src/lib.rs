//! ctx-projections: the domain events and actions, the engine reducer and the projections of the
//! journal.
#![forbid(unsafe_code)]

pub mod check;
mod json;

pub use ctx_journal as journal;
pub use json::{JSON_PARSE_DEPTH_MAX, Json, JsonError, JsonMap};
mod model;
pub use model::*;
mod replay;
mod state;
mod state_check;
pub use replay::*;
pub use state::*;
pub mod archive;
mod framework;
pub use archive::ArchiveError;
pub use framework::{
    AttachReport, CheckReport, DIGEST_DOMAIN, FrameworkError, META_BYTES, META_FORMAT, META_MAGIC,
    META_TABLE, MetaError, Projection, ProjectionMeta, Projections, RebuildCause, RebuildReport,
};
pub mod contract;
pub mod engine;
pub mod identity;
pub mod plan;
mod reducer;
pub use reducer::{ReduceError, reduce};
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
