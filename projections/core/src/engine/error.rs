//! The engine's errors: one narrow enum per operation. Messages are sentences naming the
//! offending value; where the reference has a sentence, it is the reference's.

use std::fmt;

use ctx_journal::{AppendError, ProjectionError, ReadError, StreamId};
use ctx_model::ReduceError;

use crate::framework::FrameworkError;

use super::codes::EffectRefusal;
use super::record::GuardEffect;

/// A failure of the journal or of the engine's projection tables underneath an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error(transparent)]
    Append(#[from] AppendError),
    /// A stored engine value does not decode or contradicts the journal.
    #[error("the engine store is corrupt: {0}")]
    Corrupt(String),
    /// A summary head does not match the state replayed from its stream's records
    /// (spec/engine-store.md §3, invariant 3): the projection is corrupt.
    #[error(
        "the summary head of engine stream {stream} at revision {revision} does not match the state replayed from its records: {detail}"
    )]
    HeadSummary {
        stream: StreamId,
        revision: u64,
        detail: String,
    },
    /// A claims or outcomes entry of `engine.effects` does not decode, or the journal record it
    /// names is not there with its digest (spec/engine-store.md §4, invariants 2 and 3): the
    /// projection is corrupt.
    #[error(
        "the {effect} {kind} entry of action '{action_id}' on engine stream {stream} is corrupt: {source}",
        effect = effect.as_str(),
        kind = kind.as_str()
    )]
    EffectEntry {
        effect: GuardEffect,
        kind: super::effect_entry::EffectEntryKind,
        stream: StreamId,
        action_id: String,
        /// Boxed: the digests it names would make every engine error this large.
        source: Box<super::effect_entry::EffectEntryError>,
    },
}

/// Why [`super::Engine::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenEngineError {
    #[error("engine option {option} is invalid: {reason}")]
    Option {
        option: &'static str,
        reason: String,
    },
    /// Attaching (catching up or rebuilding) the engine projections failed; a record the engine
    /// projections refuse makes the journal unusable by the engine until it is audited.
    #[error("the engine projections could not be attached: {0}")]
    Attach(#[from] FrameworkError),
}

/// The part of a replay that diverged (spec/engine.md §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuditComponent {
    /// The record does not decode or does not bind to its replay input and place.
    RecordBinding,
    /// The reducer refused the stored replay input.
    Reducer,
    /// The reducer's output names another revision, event or scope.
    ReducerOutput,
    /// The recomputed transition differs from the stored one.
    Transition,
    /// The recomputed state digest differs from the stored one.
    State,
    /// The projected head differs from the replayed one.
    Head,
    /// A projected head exists for a stream without records.
    Projection,
    /// The engine's own commit was refused by its projection (a reducer that is not
    /// deterministic between the engine and the projection).
    CommitResult,
}

impl AuditComponent {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditComponent::RecordBinding => "record-binding",
            AuditComponent::Reducer => "reducer",
            AuditComponent::ReducerOutput => "reducer-output",
            AuditComponent::Transition => "transition",
            AuditComponent::State => "state",
            AuditComponent::Head => "head",
            AuditComponent::Projection => "projection",
            AuditComponent::CommitResult => "commit-result",
        }
    }
}

impl fmt::Display for AuditComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first divergence a replay found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("deterministic replay diverged at revision {revision}: {component} ({detail})")]
pub struct Divergence {
    pub stream: StreamId,
    pub revision: u64,
    pub component: AuditComponent,
    pub detail: String,
}

/// Why [`super::Engine::process`] (and the receipt variants) refused an event or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The event or its replay input is invalid (protocol or replay validation).
    #[error("{0}")]
    Invalid(String),
    /// The event needs a seam the engine was not given (normalizer, planner).
    #[error("{0}")]
    Unsupported(String),
    /// The event id is already committed with other content or in another stream.
    #[error("event id '{event_id}' is already bound to different content")]
    EventIdCollision { event_id: String },
    /// The event was derived from another head revision than the stream's.
    #[error("expected revision {expected}, found {actual}")]
    RevisionConflict { expected: u64, actual: u64 },
    /// The event does not match the exact pending authority it names (decision, consent expiry,
    /// action expiry, receipt guard).
    #[error("{0}")]
    Authority(String),
    /// A trusted-clock assertion failed, or the clock is unavailable.
    #[error("{0}")]
    Clock(String),
    /// A receipt for a claimed action came without the verified outcome it must carry.
    #[error("{} action '{action_id}' has no verified execution outcome", effect.as_str())]
    OutcomeRequired {
        effect: GuardEffect,
        action_id: String,
    },
    /// The effects projection refused the receipt's settlement.
    #[error("{message}")]
    Effect {
        effect: GuardEffect,
        refusal: EffectRefusal,
        message: String,
    },
    /// The reducer refused the event.
    #[error(transparent)]
    Reducer(#[from] ReduceError),
    #[error(transparent)]
    Divergence(#[from] Divergence),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why [`super::Engine::snapshot`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    #[error("the scope has no engine stream: {0}")]
    Scope(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why [`super::Engine::replay_audit`] could not run. Divergences are findings, reported in the
/// [`super::AuditReport`], not errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    #[error("the scope has no engine stream: {0}")]
    Scope(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a claim (`authorize_install`, `authorize_activation`) was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthorizeError {
    /// An argument is malformed or carries no physical authority.
    #[error("{0}")]
    Invalid(String),
    /// The scope has no committed engine state.
    #[error("{} authorization has no authoritative session", effect.as_str())]
    NoSession { effect: GuardEffect },
    /// The action is not the exact pending journal authority at the head.
    #[error("{0}")]
    NotPending(String),
    #[error("expected revision {expected}, found {actual}")]
    RevisionConflict { expected: u64, actual: u64 },
    #[error("{}", already_claimed(*effect, action_id))]
    AlreadyClaimed {
        effect: GuardEffect,
        action_id: String,
    },
    #[error("{}", claim_expired(*effect, action_id))]
    ClaimExpired {
        effect: GuardEffect,
        action_id: String,
    },
    /// Durable authority contradicts the request or itself.
    #[error("{0}")]
    AuthorityCorrupt(String),
    #[error("{0}")]
    Clock(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn already_claimed(effect: GuardEffect, action_id: &str) -> String {
    match effect {
        GuardEffect::Install => format!("install action '{action_id}' has already been claimed"),
        GuardEffect::Activation => format!("activation action '{action_id}' is already claimed"),
    }
}

fn claim_expired(effect: GuardEffect, action_id: &str) -> String {
    match effect {
        GuardEffect::Install => {
            format!("install action '{action_id}' expired before it was claimed")
        }
        GuardEffect::Activation => format!("activation action '{action_id}' expired before claim"),
    }
}

/// Why an outcome (`record_install_outcome`, `record_activation_outcome`) was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutcomeError {
    #[error("{0}")]
    Invalid(String),
    /// No durable claim exists for the action.
    #[error("{}", claim_required(*effect, action_id))]
    ClaimRequired {
        effect: GuardEffect,
        action_id: String,
    },
    /// A different outcome exists, or the outcome disagrees with the claim.
    #[error("{0}")]
    Conflict(String),
    #[error("{}", settled(*effect, action_id))]
    Settled {
        effect: GuardEffect,
        action_id: String,
    },
    /// Activation only: observed at or after the action's expiry.
    #[error("activation action '{action_id}' expired before observation")]
    Expired { action_id: String },
    #[error("{0}")]
    AuthorityCorrupt(String),
    #[error("{0}")]
    Clock(String),
    /// The receipt committed with the outcome was refused (nothing was written).
    #[error(transparent)]
    Receipt(Box<ProcessError>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn claim_required(effect: GuardEffect, action_id: &str) -> String {
    match effect {
        GuardEffect::Install => {
            format!("install action '{action_id}' has no durable execution claim")
        }
        GuardEffect::Activation => format!("activation action '{action_id}' has no durable claim"),
    }
}

fn settled(effect: GuardEffect, action_id: &str) -> String {
    match effect {
        GuardEffect::Install => {
            format!("install action '{action_id}' already has a terminal settlement")
        }
        GuardEffect::Activation => format!("activation action '{action_id}' is already settled"),
    }
}

/// Why an execution status could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why storing or loading a benefit result failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenefitAuditError {
    /// The result (or the digest asked for) is malformed.
    #[error("{0}")]
    Invalid(String),
    #[error("benefit result digest is already bound to different bytes")]
    DigestCollision { result_digest: String },
    #[error("no benefit result is stored under digest {result_digest}")]
    NotFound { result_digest: String },
    /// A stored result fails its integrity checks.
    #[error("persisted benefit result {result_digest} is invalid: {reason}")]
    Corrupt {
        result_digest: String,
        reason: String,
    },
    #[error("the trusted clock failed: {0}")]
    Clock(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
