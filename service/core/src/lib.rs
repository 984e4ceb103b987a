//! ctx-service: the application layer of ctx, a library (spec/service.md).
//!
//! It holds the capability catalog (format, sample catalog, retrieval, ingest), the net-benefit
//! planner, the artifact registry, the install policy store, signed human decisions, the skill
//! content-addressed store, install execution and the managed query service (prepare, reopen,
//! desired sets with pre-approved installs, consent challenges and their resolution), and the
//! composition of all of them over one data directory (`runtime`).
//!
//! It names no agent host: the agent-host adapters live in `ctx-hosts`, the `ctx`
//! binary in `ctx-cli`. Dependencies point one way: cli → hosts → service → projections →
//! journal.
#![forbid(unsafe_code)]

mod data_dir;
mod failpoint;
mod ingest;
mod journal_store;

pub mod catalog;
pub mod decision;
pub mod managed;
pub mod planning;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod skill_cas;

pub use data_dir::Layout;
pub use failpoint::FailPointFired;
pub use ingest::{CatalogIngest, IngestError, ingest_catalog};
pub use journal_store::{
    JOURNAL_URL_ENV, JournalSource, JournalSourceError, journal_exists, journal_source,
    open_journal, route_journal,
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
