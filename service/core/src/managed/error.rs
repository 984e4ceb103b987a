//! The service's typed errors. `Display` is the reference's sentence (spec/service.md §1, §2, §3),
//! so hosts and the seed ports can match on it; store and registry errors pass through unchanged
//! because the reference lets them propagate with their own types (spec/service.md §1).

use ctx_journal::OpenError;
use ctx_projections::consent_store::{AssertionCodecError, ConsentStoreError};
use ctx_projections::engine::{
    AuthorizeError, OpenEngineError, ProcessError, SnapshotError, StoreError,
};
use ctx_projections::query_store::QueryStoreError;

use crate::decision::DecisionError;
use crate::failpoint::FailPointFired;
use crate::policy::PolicyStoreError;
use crate::registry::RegistryError;

/// Why the input authority could not resolve a work reference. The host's reason is kept for
/// `Debug` only: it may name private work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("managed query input authority could not resolve the current work reference")]
pub struct InputAuthorityError {
    pub detail: String,
}

impl InputAuthorityError {
    pub fn new(detail: impl Into<String>) -> InputAuthorityError {
        InputAuthorityError {
            detail: detail.into(),
        }
    }
}

/// Why a managed query service operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A request, configuration or input value is malformed (the reference's `ValueError` and
    /// `TypeError` sentences).
    #[error("{0}")]
    Invalid(String),
    /// A second query for a session that another query already planned (spec/service.md §3):
    /// an engine session plans once in this version.
    #[error(
        "session {session_id:?} was already planned by another query (another prompt or \
         workspace); each session_id plans once: send this prompt with a new session_id"
    )]
    SessionPlanned { session_id: String },
    /// The service was closed.
    #[error("managed query service is closed")]
    Closed,
    /// The service (or a composition) is used from a process other than the one that opened it.
    #[error("managed query service cannot be used from a forked process")]
    ForkedProcess,
    /// The composition is used from a process other than the one that opened it.
    #[error("engine composition cannot be used from a forked process")]
    CompositionForkedProcess,
    /// A later committed plan replaced the projection of this query.
    #[error("managed query was superseded by a later committed plan")]
    Superseded,
    /// Another desired choice owns the stream's one reservation, or the stream has an
    /// unresolved lifecycle effect (the reference's `ManagedDesiredSetBusyError`).
    #[error("{0}")]
    Busy(&'static str),
    /// A logical desired choice is bound to different exact content, or its reserved revision
    /// was taken by another event (the reference's `ManagedDesiredSetConflictError`).
    #[error("{0}")]
    DesiredConflict(&'static str),
    /// Another durable desired choice superseded this one (the reference's
    /// `ManagedDesiredSetSupersededError`, a kind of superseded error).
    #[error("{0}")]
    DesiredSuperseded(&'static str),
    /// The plan or the pending consent changed during publication or an automatic decision
    /// (the reference's `ManagedQueryHeadDriftError`).
    #[error("{0}")]
    HeadDrift(&'static str),
    /// The service was configured without a physical install actuator.
    #[error("composition has no physical installation actuator")]
    NoActuator,
    /// Install execution refused or failed (the install-execution module's sentences).
    #[error("{0}")]
    Execution(String),
    /// The journal could not make the records of a unit of work durable before an effect they
    /// describe (spec/journal.md §14, invariant U2); the effect was not started.
    #[error(
        "the journal could not make the claim durable before its effect, so the effect was not started: {0}"
    )]
    Durability(#[source] ctx_journal::AppendError),
    /// The engine refused an install or activation claim.
    #[error(transparent)]
    Authorize(#[from] AuthorizeError),
    /// Consent routing refused a request (the policy module's sentence).
    #[error("{0}")]
    Routing(String),
    /// The install policy store refused or failed.
    #[error(transparent)]
    Policy(#[from] PolicyStoreError),
    /// The consent broker store refused or failed.
    #[error(transparent)]
    Consent(#[from] ConsentStoreError),
    /// A signed assertion's bytes are not a canonical assertion.
    #[error(transparent)]
    Assertion(#[from] AssertionCodecError),
    /// The verifier registry refused (no exact verifier for the assertion, another process).
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// A named fail point fired. The variant exists only with feature `failpoints` (tests), so
    /// the production type has no test-only case; without the feature a [`FailPointFired`]
    /// (which never fires there) would convert to [`ServiceError::Internal`].
    #[cfg(feature = "failpoints")]
    #[error("fail point {name} fired: {detail}")]
    FailPoint { name: &'static str, detail: String },
    /// A planning authority now reports a snapshot other than the artifact's (spec/service.md §3;
    /// spec/registry.md §6).
    #[error("managed planning authority snapshot does not match its artifact")]
    AuthorityDrift { field: &'static str },
    /// Durable identity could not be preserved: the store, the journal or the composition
    /// disagrees with the registered query (the reference's `ManagedQueryServiceError`).
    #[error("{0}")]
    Identity(&'static str),
    /// The committed head cannot be projected as a managed query (the reference's
    /// `ManagedQueryError`).
    #[error("{0}")]
    Projection(String),
    #[error(transparent)]
    InputAuthority(#[from] InputAuthorityError),
    #[error(transparent)]
    Store(#[from] QueryStoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Journal(#[from] OpenError),
    #[error(transparent)]
    EngineOpen(#[from] OpenEngineError),
    #[error(transparent)]
    Engine(#[from] ProcessError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    EngineStore(#[from] StoreError),
    /// A fault that no input explains.
    #[error("{0}")]
    Internal(String),
}

impl From<FailPointFired> for ServiceError {
    fn from(fired: FailPointFired) -> ServiceError {
        #[cfg(feature = "failpoints")]
        {
            ServiceError::FailPoint {
                name: fired.name,
                detail: fired.detail.to_owned(),
            }
        }
        #[cfg(not(feature = "failpoints"))]
        {
            ServiceError::Internal(fired.to_string())
        }
    }
}

impl ServiceError {
    /// The stable wire code of this failure (spec/cli.md §4): what a host matches on, whatever
    /// the sentence says. `invalid` is bad input, `internal` a fault no input explains; every
    /// other code is a domain outcome the host acts on (busy, conflict, head-drift, …).
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::Invalid(_)
            | ServiceError::Assertion(_)
            | ServiceError::InputAuthority(_) => "invalid",
            ServiceError::Busy(_) => "busy",
            ServiceError::DesiredConflict(_) | ServiceError::SessionPlanned { .. } => "conflict",
            ServiceError::DesiredSuperseded(_) | ServiceError::Superseded => "superseded",
            ServiceError::HeadDrift(_) => "head-drift",
            ServiceError::NoActuator => "no-actuator",
            ServiceError::Routing(_) | ServiceError::Authorize(_) | ServiceError::Identity(_) => {
                "refused"
            }
            ServiceError::Decision(_) => "unverifiable",
            // A full store is a bound the person can free, not a fault (spec/projections.md
            // §7.5 Q7); the sentence says how.
            ServiceError::Store(QueryStoreError::CapacityExceeded { .. }) => "capacity",
            ServiceError::Consent(c) => match c {
                ConsentStoreError::NotFound { .. } => "not-found",
                ConsentStoreError::Conflict { .. } => "conflict",
                ConsentStoreError::Expired { .. } => "expired",
                ConsentStoreError::Rejected { .. } => "rejected",
                ConsentStoreError::Binding { .. } => "binding",
                ConsentStoreError::CapacityExceeded { .. } => "capacity",
                ConsentStoreError::Invalid { .. } => "invalid",
                _ => "internal",
            },
            _ => "internal",
        }
    }
}

pub(crate) fn invalid<T>(message: impl Into<String>) -> Result<T, ServiceError> {
    Err(ServiceError::Invalid(message.into()))
}

pub(crate) fn projection<T>(message: impl Into<String>) -> Result<T, ServiceError> {
    Err(ServiceError::Projection(message.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_query_store_is_a_capacity_refusal_not_an_internal_fault() {
        let full = ServiceError::Store(QueryStoreError::CapacityExceeded {
            message: ctx_projections::query_store::QUERY_CAPACITY_MESSAGE,
        });
        assert_eq!(full.code(), "capacity");
        assert!(full.to_string().contains("send the prompt again"), "{full}");
        let other = ServiceError::Store(QueryStoreError::NotFound { message: "gone" });
        assert_eq!(other.code(), "internal");
    }
}
