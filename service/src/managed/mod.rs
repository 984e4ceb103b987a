//! The managed query service (reference managed-service §1–§3, §12; specified in
//! `spec/service.md`): given an opaque reference to the current work, plan a bounded set of
//! capabilities once, durably, and hand back an opaque `query_ref` that every retry, reopen and
//! equivalent host alias converges on.
//!
//! Everything durable is a journal record: the query store's registration and planned mark, the
//! engine's session start and planning event, and the benefit result the plan cites. Planning
//! runs once because a retry re-submits the identical committed events, which the engine answers
//! from its duplicate index without calling the planner.

mod composition;
mod error;
mod request;
mod result;
mod service;
#[cfg(test)]
mod tests;

pub use composition::{EngineComposition, JOURNAL_LOCK_WAIT, open_engine_composition};
pub use error::{InputAuthorityError, ServiceError};
pub use request::{ManagedQueryInput, ManagedQueryInputAuthority, ManagedQueryRequest};
pub use result::{
    ACTION_SUMMARIES_MAX, ManagedActionSummary, ManagedCapabilitySelection,
    ManagedConsentChallengeProjection, ManagedQueryServiceResult, PreparedManagedQuery,
};
pub use service::{ManagedQueryService, ManagedQueryServiceConfig, open_managed_query_service};
