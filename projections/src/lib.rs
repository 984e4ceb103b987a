//! ctx-projections: the domain model (events, actions, state), the engine reducer, the projections
//! framework and the engine's projections of the journal. Specified in `spec/engine.md`,
//! `spec/projections.md` and `spec/engine-store.md`.
#![forbid(unsafe_code)]

pub mod archive;
pub mod check;
pub mod contract;
mod domain;
pub mod engine;
mod framework;
pub mod identity;
mod json;
mod model;
pub mod plan;
mod reducer;
mod replay;
mod state;
mod state_check;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use archive::ArchiveError;
pub use ctx_journal as journal;
pub use domain::domain_projections;
pub use framework::{
    AttachReport, CheckReport, DIGEST_DOMAIN, DetachedCheck, DetachedStatus, FrameworkError,
    META_BYTES, META_FORMAT, META_MAGIC, META_TABLE, MetaError, Projection, ProjectionMeta,
    ProjectionSummary, Projections, RebuildCause, RebuildReport, TableDifference,
};
pub use json::{JSON_PARSE_DEPTH_MAX, Json, JsonError, JsonMap, JsonView};
pub use model::{
    ACTIVE_CAPABILITIES_MAX, ActionKind, CONSENT_EXPIRED_KEYS, Classification,
    EVENT_DIGEST_METADATA, EVENT_TEXT_METADATA, EngineEvent, EventKind, HostAction,
    INSTALL_ACTION_PAYLOAD_SCHEMA_V3, INSTALL_CONSENT_REQUEST_SCHEMA_V3, INSTALL_RECEIPT_SCHEMA_V3,
    INSTALLER_DIGEST, INSTALLER_ID, MATERIAL_ACTION_PAYLOAD_SCHEMA_V3, MATERIAL_RECEIPT_SCHEMA_V3,
    PROTOCOL_VERSION, PrivacyLabel, ProtocolError, RECEIPT_IDENTITY_KEYS, REPLAY_FIELDS,
    RandomSeed, ReceiptIdentity, Retention, ScopeRef, Transition, USER_DECISION_KEYS, action_id,
    consent_id, normalize_protocol_timestamp,
};
pub use reducer::{DECISION_PLAN_SCHEMA, ReduceError, reduce};
pub use replay::{
    COLLECTION_MAX_ITEMS, CURRENT_WORK_SCHEMA, INGRESS_MAX_BYTES, INGRESS_STRING_MAX_BYTES,
    INGRESS_TOTAL_MAX_ITEMS, JSON_MAX_DEPTH, NORMALIZER_VERSION_DEFAULT, OPAQUE_REF_SCHEMA,
    ObservationRef, Preflight, REDACTED_HOST_FAILURE, REDUCER_V3, REPLAY_MAX_BYTES, REPLAY_SCHEMA,
    REPLAY_SCHEMA_VERSION, ReplayError, ReplayInput, SURROGATE_MAX_BYTES, Surrogate, SurrogateRole,
    preflight, validate_surrogate,
};
pub use state::{
    Activation, CapabilityState, CommittedPlan, EffectKind, EngineState, Evidence, Exposure,
    HostLevel, Installation, Invocation, Lease, PendingConsent, PendingEffect, STATE_KEYS_V3,
    STATE_SCHEMA_V3, SessionStatus, StateError,
};
pub mod consent_store;
pub mod query_store;
