//! The managed query service (spec/service.md §1, §2, §3, §4; specified in
//! `spec/service.md`): given an opaque reference to the current work, plan a bounded set of
//! capabilities once, durably, and hand back an opaque `query_ref` that every retry, reopen and
//! equivalent host alias converges on.
//!
//! Everything durable is a journal record: the query store's registration and planned mark, the
//! engine's session start and planning event, and the benefit result the plan cites. Planning
//! runs once because a retry re-submits the identical committed events, which the engine answers
//! from its duplicate index without calling the planner.

mod activate;
mod authority;
mod composition;
mod consent;
mod desired;
mod error;
mod events;
pub mod install;
mod reconcile;
mod request;
mod resolution;
mod resolve;
mod result;
mod service;
#[cfg(test)]
mod tests;

pub use activate::{
    ActivationDriver, ActivationReport, ActuatorObservation, failpoints as activation_failpoints,
};
pub(crate) use composition::open_journal as open_service_journal;
pub use composition::{EngineComposition, JOURNAL_LOCK_WAIT, open_engine_composition};
pub use desired::{DesiredResultParts, DesiredSetRequest, DesiredSetResult};
pub use error::{InputAuthorityError, ServiceError};
pub use events::{PlanningEventsSpec, observation_payload, planning_events};
pub use request::{QueryInput, QueryInputAuthority, QueryRequest};
pub use resolution::ConsentResolutionResult;
pub use resolution::outcome::CONSENT_REQUIRED;
pub use result::{
    ActionSummary, CapabilitySelection, ConsentChallengeProjection, PreparedQuery,
    QueryServiceResult,
};
pub use service::{ConsentBrokerConfig, QueryService, QueryServiceConfig, open_query_service};

/// Fail points of the managed service (feature `failpoints`), named after the seam they sit on.
/// Configure them with the `fail` crate: `return` simulates a crash at that point.
pub mod failpoints {
    /// After the desired reservation, before the engine commits its event.
    pub const DESIRED_BEFORE_COMMIT: &str = "desired-before-commit";
    /// The engine commits the desired event but the store mark is skipped (a crash between).
    pub const DESIRED_BEFORE_MARK: &str = "desired-before-mark";
    /// After the store mark, before the result is built.
    pub const DESIRED_BEFORE_RESULT: &str = "desired-before-result";
    /// After the automatic install's execution binding is resolved, before its grant.
    pub const AUTO_AFTER_BINDING: &str = "auto-after-binding";
    /// After the automatic grant (or on resuming a pending install), before execution.
    pub const AUTO_BEFORE_EXECUTE: &str = "auto-before-execute";
    /// After execution returned (the receipt is committed), before the result.
    pub const AUTO_AFTER_EXECUTE: &str = "auto-after-execute";
    /// Consent publication: after the execution binding is resolved, before the challenge.
    pub const CONSENT_AFTER_BINDING: &str = "consent-after-binding";
    /// Consent publication: after the challenge is created, before its status is read.
    pub const CONSENT_AFTER_CREATE: &str = "consent-after-create";
    /// Consent publication: after the status is read, before the last head check.
    pub const CONSENT_AFTER_STATUS: &str = "consent-after-status";
    /// Consent head checks see another committed plan id in the fresh snapshot (the seed's
    /// substituted snapshot of "never mixes plan A result with plan B consent").
    pub const CONSENT_SNAPSHOT_PLAN_DRIFT: &str = "consent-snapshot-plan-drift";
    /// `resolve_consent`: after the broker recorded the authenticated decision, before the
    /// journal commit (a crash there leaves a decision the journal never saw).
    pub const CONSENT_AFTER_AUTHENTICATE: &str = "consent-after-authenticate";
    /// `resolve_consent`: the decision commits without the broker's settlement (a crash between).
    pub const CONSENT_BEFORE_SETTLE: &str = "consent-before-settle";
    /// `resolve_consent`: the decision and its settlement are committed, before the install is
    /// finished (a crash before the claim).
    pub const CONSENT_BEFORE_FINISH: &str = "consent-before-finish";
    /// `recover_consent` / `resolve_consent`: after the durable work, before the result.
    pub const CONSENT_BEFORE_RESULT: &str = "consent-before-result";
    /// `prepare` / `reopen`: after the planned mark, before the result is built.
    pub const QUERY_BEFORE_RESULT: &str = "query-before-result";
    pub use super::install::failpoints::{AFTER_CLAIM, AFTER_OUTCOME, AFTER_RECEIPT};
}
