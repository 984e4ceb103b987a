//! ctx-service: the managed query service and the `ctx` command-line binary.
//!
//! It holds the command line and the journal demo, the capability catalog (format, sample
//! catalog, retrieval), the net-benefit planner, the artifact registry, the install policy store,
//! the skill content-addressed store, install execution and the managed query service (prepare,
//! reopen, desired sets with pre-approved installs and consent challenge publication); signed
//! human decisions arrive next.
//! Dependencies point one way: service → projections → journal.
#![forbid(unsafe_code)]

/// True when the fail point `name` is configured to fire (feature `failpoints`; always false
/// otherwise). Used to simulate a crash at a named seam.
#[cfg(feature = "failpoints")]
pub(crate) fn failpoint_fired(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}

#[cfg(not(feature = "failpoints"))]
pub(crate) fn failpoint_fired(_name: &str) -> bool {
    false
}

/// Returns `Err(ServiceError::FailPoint)` (converted with `Into`) when the fail point fires.
macro_rules! fail_point {
    ($name:expr) => {
        if $crate::failpoint_fired($name) {
            return Err($crate::managed::ServiceError::FailPoint {
                name: $name,
                detail: String::from("simulated crash"),
            }
            .into());
        }
    };
}
pub(crate) use fail_point;

pub mod activation;
pub mod catalog;
mod cli;
mod data_dir;
pub mod decision;
mod demo;
mod error;
pub mod host_actuator;
pub mod host_files;
pub mod hosts;
pub mod install;
mod journal_store;
pub mod managed;
pub mod planning;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod skill_cas;

pub use cli::{
    Command, HOST_INPUT_MAX_BYTES, HostCommand, Invocation, Streams, USAGE, parse_args, run,
};
pub use data_dir::{DATA_DIR_ENV, DataDir, DataDirSource, Layout, choose_data_dir};
pub use demo::{DemoSummary, run_demo};
pub use error::{CliError, EXIT_INTEGRITY, EXIT_INTERNAL, EXIT_OK, EXIT_OUTCOME, EXIT_USAGE};
pub use journal_store::{
    JOURNAL_URL_ENV, JournalSource, JournalSourceError, journal_source, open_journal, route_journal,
};
pub use managed::{
    ConsentBrokerConfig, DesiredResultParts, EngineComposition, InputAuthorityError,
    ManagedActionSummary, ManagedCapabilitySelection, ManagedConsentChallengeProjection,
    ManagedConsentResolutionResult, ManagedDesiredSetRequest, ManagedDesiredSetResult,
    ManagedQueryInput, ManagedQueryInputAuthority, ManagedQueryRequest, ManagedQueryService,
    ManagedQueryServiceConfig, ManagedQueryServiceResult, PlanningEventsSpec, PreparedManagedQuery,
    ServiceError, observation_payload, open_engine_composition, open_managed_query_service,
    planning_events,
};
