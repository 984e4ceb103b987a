//! The public request, the trusted intake value and the input authority (spec/service.md §1).

use ctx_model::{EngineEvent, is_sha, is_token};

use super::error::{InputAuthorityError, ServiceError, invalid};
use crate::registry::ArtifactHandle;

/// Maps an opaque work reference to registry-issued planning inputs. Implemented by the trusted
/// host adapter; callers of the service never pass paths, planners or handles themselves.
pub trait QueryInputAuthority: Send + Sync {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError>;
}

/// The trusted planning inputs of one work reference: an artifact handle and the two events.
/// Not `Clone`: the handle it carries is unique to its registry instance.
pub struct QueryInput {
    artifact: ArtifactHandle,
    session_started: EngineEvent,
    decision_event: EngineEvent,
}

impl std::fmt::Debug for QueryInput {
    // Only the manifest digest: the events may carry private work identity.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryInput")
            .field("manifest_digest", &self.artifact.manifest_digest())
            .finish_non_exhaustive()
    }
}

impl QueryInput {
    pub fn new(
        artifact: ArtifactHandle,
        session_started: EngineEvent,
        decision_event: EngineEvent,
    ) -> QueryInput {
        QueryInput {
            artifact,
            session_started,
            decision_event,
        }
    }

    pub fn artifact(&self) -> &ArtifactHandle {
        &self.artifact
    }

    pub fn session_started(&self) -> &EngineEvent {
        &self.session_started
    }

    pub fn decision_event(&self) -> &EngineEvent {
        &self.decision_event
    }
}

/// An untrusted public request: a logical query id and an opaque work reference. Immutable;
/// copying is allowed (spec/service.md §1 exception).
#[derive(Clone, PartialEq, Eq)]
pub struct QueryRequest {
    logical_query_id: String,
    current_work_ref: String,
}

impl std::fmt::Debug for QueryRequest {
    // The work reference stays out of logs (spec/service.md §1 text form).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryRequest")
            .field("logical_query_id", &self.logical_query_id)
            .finish_non_exhaustive()
    }
}

impl QueryRequest {
    pub fn new(
        logical_query_id: &str,
        current_work_ref: &str,
    ) -> Result<QueryRequest, ServiceError> {
        if !is_sha(logical_query_id) {
            return invalid("logical_query_id must be a lowercase SHA-256 digest");
        }
        if !is_token(current_work_ref) {
            return invalid("current_work_ref must be a bounded opaque token");
        }
        Ok(QueryRequest {
            logical_query_id: logical_query_id.to_owned(),
            current_work_ref: current_work_ref.to_owned(),
        })
    }

    pub fn logical_query_id(&self) -> &str {
        &self.logical_query_id
    }

    pub fn current_work_ref(&self) -> &str {
        &self.current_work_ref
    }
}
