//! ctx-model: the pure domain kernel of ctx. Values and their canonical JSON, digests and shape
//! checks, the one vocabulary, the event/action protocol, engine state and its invariants, the
//! identity and action-contract documents, plan values, replay inputs and the reducer. Specified
//! in `spec/engine.md`.
//!
//! Architecture invariant (spec/engine.md, "Code:"): this crate depends on no other ctx crate and
//! does no I/O and reads no clock; time and randomness enter only as values of events. Every
//! module is private and the list below is the whole API, one path per item.
#![forbid(unsafe_code)]

mod action_contract;
mod digest;
mod documents;
mod json;
mod plan;
mod protocol;
mod reducer;
mod replay;
mod replay_error;
mod shape;
mod state;
mod state_check;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod vocab;

pub use action_contract::{
    PROMPT_CONTEXT_RECEIPT_SCHEMA_V1, consent_request_payload, expected_install_receipt,
    expected_material_receipt, install_payload, install_rollback, install_verification,
    material_payload, material_rollback, material_verification, validate_action,
    validate_receipt_verification,
};
pub use digest::{cj_digest, cja_digest, hex, parse_hex, parse_sha, sha256_hex, sha256_hex_bytes};
pub use documents::{
    ACTIVATION_AUTHORIZATION_SCHEMA, AUTHORIZED_MATERIAL_SCHEMA, CATALOG_IDENTITY_SCHEMA,
    EXECUTION_BINDING_SCHEMA, INSTALL_AUTHORIZATION_SCHEMA, INSTALL_DESCRIPTOR_SCHEMA_V1,
    INSTALL_DESCRIPTOR_SCHEMA_V2, INSTALLED_LINEAGE_SCHEMA, InstallDescriptorInput,
    InstallExecutionBinding, MATERIAL_DESCRIPTOR_SCHEMA_V1, MATERIAL_DESCRIPTOR_SCHEMA_V2,
    MATERIAL_IDENTITY_SCHEMA, MAX_CONTENT_BYTES, MAX_CONTENT_TOKENS, MaterialDescriptorInput,
    ROLLBACK_ATOMIC_RESTORE, TARGET_SCOPE_USER, activation_authorization_digest,
    authorized_material_from_catalog, authorized_material_from_lineage, build_installed_lineage,
    build_material_identity, catalog_capability_identity, classify_lineage_promotion,
    descriptor_matches_result_material, install_authorization_digest, install_plan_descriptor,
    material_descriptor, material_identity, origin_proof_digest, validate_authorized_material,
    validate_catalog_identity, validate_execution_binding, validate_install_plan_descriptor,
    validate_installed_lineage, validate_material_descriptor, validate_material_identity,
};
pub use json::{
    JSON_FAULT_EXCERPT_MAX_BYTES, JSON_PARSE_DEPTH_MAX, Json, JsonError, JsonFault, JsonMap,
    JsonView,
};
pub use plan::{
    BENEFIT_AUDIT_KEYS, DEGRADATION_CODES, MATCHING_SIGNALS_MAX_ITEMS, PLAN_ROW_V3_KEYS,
    REASON_CODES_MAX_ITEMS, SCORE_MAX_PPM, V3_ABSTENTION_CODES, canonical_row_order_key,
    committed_plan_from_json, row_tier, validate_benefit_audit, validate_capability_plan_value,
    validate_committed_plan, validate_plan_row,
};
pub use protocol::{
    ACTIVE_CAPABILITIES_MAX, ActionKind, CONSENT_EXPIRED_KEYS, Classification,
    EVENT_DIGEST_METADATA, EVENT_TEXT_METADATA, EngineEvent, EventKind, HostAction,
    INSTALL_ACTION_PAYLOAD_SCHEMA_V3, INSTALL_CONSENT_REQUEST_SCHEMA_V3, INSTALL_RECEIPT_SCHEMA_V3,
    MATERIAL_ACTION_PAYLOAD_SCHEMA_V3, MATERIAL_RECEIPT_SCHEMA_V3, PROTOCOL_VERSION, PrivacyLabel,
    ProtocolError, RECEIPT_IDENTITY_KEYS, REPLAY_FIELDS, RandomSeed, ReceiptIdentity, Retention,
    SCOPE_KEYS, ScopeRef, Transition, USER_DECISION_KEYS, action_id, consent_id, has_exact_keys,
    normalize_protocol_timestamp,
};
pub use reducer::{ReduceError, reduce};
pub use replay::{
    COLLECTION_MAX_ITEMS, CURRENT_WORK_SCHEMA, INGRESS_MAX_BYTES, INGRESS_STRING_MAX_BYTES,
    INGRESS_TOTAL_MAX_ITEMS, JSON_MAX_DEPTH, NORMALIZER_VERSION_DEFAULT, OPAQUE_REF_SCHEMA,
    ObservationRef, Preflight, REDACTED_HOST_FAILURE, REDUCER_V3, REPLAY_MAX_BYTES, REPLAY_SCHEMA,
    REPLAY_SCHEMA_VERSION, ReplayInput, SURROGATE_MAX_BYTES, Surrogate, SurrogateRole, preflight,
    validate_surrogate,
};
pub use replay_error::ReplayError;
pub use shape::{
    ONE_HOUR_MICROS, TOKEN_MAX_CHARS, TimestampError, UtcMicros, is_canonical_timestamp,
    is_capability_identity, is_capability_name, is_safe_token, is_sha, is_token, is_trimmed,
    kind_of, normalize_timestamp,
};
pub use state::{
    Activation, CapabilityState, CommittedPlan, EffectKind, EngineState, Evidence, Exposure,
    HostLevel, Installation, Invocation, Lease, PendingConsent, PendingEffect, STATE_KEYS_V3,
    STATE_SCHEMA_V3, SessionStatus, StateError,
};
pub use vocab::{
    ARTIFACT_OBSERVATION_PROVIDER, BENEFIT_CANDIDATES_MAX_ITEMS, BENEFIT_POLICY_SCHEMA_ID,
    BENEFIT_RESULT_SCHEMA_ID, BENEFIT_SEARCH_MAX_EVALUATIONS, BENEFIT_SELECTION_ALGORITHM_ID,
    CAPABILITY_KINDS, CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3, CapabilityKind,
    INSTALLABLE_KINDS, INSTALLER_DIGEST, INSTALLER_ID, PRESENTATION_ACTIONABILITY,
    UnknownCapabilityKind,
};
