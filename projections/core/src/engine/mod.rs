//! The engine: engine records in the journal, the engine projections (`engine.state`,
//! `engine.effects`, `engine.benefit_audit`) and the [`Engine`] coordinator that processes
//! events, answers snapshots and replay audits, and runs the exactly-once install and activation
//! protocols (spec/engine-store.md §6; spec/engine-store.md).

mod api;
mod authority;
mod benefit;
mod codes;
mod effect_entry;
mod effects;
mod error;
mod heads;
mod record;

#[cfg(test)]
mod tests;

pub use api::{
    AuditReport, Clock, ClockError, DecisionPlanner, Engine, EngineOptions, JournaledEvent,
    ManualClock, ObservationNormalizer, PendingCommit, PlanningContext, ProcessWithError,
    SeamError, Snapshot, engine_projections, replay_audit_journal, replay_audit_stream,
};
pub use authority::{
    ActivationExecutionStatus, ActivationGuard, InstallExecutionStatus, InstallGuard,
    InstallOutcome,
};
pub use benefit::BenefitResultError;
pub use benefit::{
    BENEFIT_EVENT_PREFIX, BENEFIT_RESULT_MAX_BYTES, BENEFIT_RESULTS_TABLE, BenefitResultEntry,
    ENGINE_BENEFIT_AUDIT_PROJECTION, benefit_event_id, benefit_stream, validate_result_text,
};
pub use codes::EffectRefusal;
pub use effect_entry::{
    CLAIM_ENTRY_TAG, EFFECT_ENTRY_BYTES, EffectEntry, EffectEntryError, EffectEntryKind,
    OUTCOME_ENTRY_TAG,
};
pub use effects::{
    ACTIVATION_CLAIMS_TABLE, ACTIVATION_EXPIRIES_TABLE, ACTIVATION_OUTCOMES_TABLE,
    ACTIVATION_SETTLEMENTS_TABLE, ClaimRecord, EFFECT_FORMAT_VERSION, ENGINE_EFFECTS_PROJECTION,
    ENGINE_EFFECTS_PROJECTION_VERSION, ExpiryEntry, INSTALL_CLAIMS_TABLE, INSTALL_EXPIRIES_TABLE,
    INSTALL_OUTCOMES_TABLE, INSTALL_SETTLEMENTS_TABLE, OutcomeRecord, SettlementEntry,
    claim_event_id, effect_key, effect_stream, outcome_event_id,
};
pub use error::{
    AuditComponent, AuditError, AuthorizeError, BenefitAuditError, Divergence, OpenEngineError,
    OutcomeError, ProcessError, SnapshotError, StatusError, StoreError,
};
pub use heads::{
    ENGINE_HEAD_CORRUPT, ENGINE_STATE_PROJECTION, ENGINE_STATE_PROJECTION_VERSION, EVENTS_TABLE,
    EngineHead, EventEntry, HEAD_FULL_TAG, HEAD_SUMMARY_BYTES, HEAD_SUMMARY_TAG, HEADS_TABLE,
    HeadSummary, HeadValueError, StoredHead, SummaryReplayError, is_terminal,
};
pub use record::{
    ACTION_ID_MAX_BYTES, DecodedRecord, ENGINE_RECORD_FORMAT_VERSION, EngineRecord, GuardEffect,
    GuardMode, REPLAY_JSON_MAX_BYTES, RecordError, RecordPlace, SettlementGuard,
    TRANSITION_JSON_MAX_BYTES, decode_view, engine_stream, transition_from_canonical_text,
};
pub use record::{GuardError, TransitionTextError};
