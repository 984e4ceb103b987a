//! ctx-service: the managed query service and the `ctx` command-line binary.
//!
//! Today it holds the command line and the journal demo, the capability catalog (format, sample
//! catalog, retrieval), the net-benefit planner, the artifact registry and the managed query
//! service (prepare and reopen); the consent broker and install actuator arrive next.
//! Dependencies point one way: service → projections → journal.
#![forbid(unsafe_code)]

pub mod catalog;
mod cli;
mod data_dir;
mod demo;
mod error;
pub mod managed;
pub mod planning;
pub mod registry;

pub use cli::{Command, USAGE, parse_args, run};
pub use data_dir::{DATA_DIR_ENV, DataDir, DataDirSource, demo_data_dir};
pub use demo::{DemoSummary, run_demo};
pub use error::{CliError, EXIT_FAILURE, EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE};
pub use managed::{
    EngineComposition, InputAuthorityError, ManagedActionSummary, ManagedCapabilitySelection,
    ManagedConsentChallengeProjection, ManagedQueryInput, ManagedQueryInputAuthority,
    ManagedQueryRequest, ManagedQueryService, ManagedQueryServiceConfig, ManagedQueryServiceResult,
    PreparedManagedQuery, ServiceError, open_engine_composition, open_managed_query_service,
};
