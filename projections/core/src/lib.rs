//! ctx-projections: the journal-backed half of the engine. The projections framework that keeps
//! derived tables current inside the journal's commits, the engine coordinator with its
//! exactly-once install and activation protocols, the query and consent stores, and the one table
//! of journal streams. The pure domain kernel it runs lives in `ctx-model`. Specified in
//! `spec/projections.md` and `spec/engine-store.md`.
//!
//! Architecture (spec/projections.md "Code"): `framework` and `archive` know only the journal;
//! `engine`, `query_store` and `consent_store` build on them and on ctx-model; `all` lists every
//! domain projection. The three subsystems stay public modules, each with one curated `pub use`
//! list, because together they hold about 200 names (two with their own `codes`) that a flat root
//! would mix; `streams` is public as the one table of stream names the service imports too;
//! everything else is private and listed below once.
#![forbid(unsafe_code)]

mod all;
mod archive;
mod framework;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub mod consent_store;
pub mod engine;
pub mod query_store;
pub mod streams;

pub use all::domain_projections;
pub use archive::ArchiveError;
pub use framework::{
    AttachReport, CheckReport, DIGEST_DOMAIN, DetachedCheck, DetachedStatus, FrameworkError,
    META_BYTES, META_FORMAT, META_MAGIC, META_TABLE, MetaError, Projection, ProjectionMeta,
    ProjectionSummary, Projections, RebuildCause, RebuildReport, TableDifference,
};

// Compatibility re-exports for downstream crates until their imports move to ctx_model (issue 18,
// step 2); removed then. Each old `ctx_projections::…` path below names the one item defined in
// ctx-model (or ctx-journal) and adds no item of its own (spec/projections.md "Code").
pub use ctx_journal as journal;
pub use ctx_model::{
    ACTIVE_CAPABILITIES_MAX, ActionKind, Activation, COLLECTION_MAX_ITEMS, CONSENT_EXPIRED_KEYS,
    CURRENT_WORK_SCHEMA, CapabilityState, Classification, CommittedPlan, EVENT_DIGEST_METADATA,
    EVENT_TEXT_METADATA, EffectKind, EngineEvent, EngineState, EventKind, Evidence, Exposure,
    HostAction, HostLevel, INGRESS_MAX_BYTES, INGRESS_STRING_MAX_BYTES, INGRESS_TOTAL_MAX_ITEMS,
    INSTALL_ACTION_PAYLOAD_SCHEMA_V3, INSTALL_CONSENT_REQUEST_SCHEMA_V3, INSTALL_RECEIPT_SCHEMA_V3,
    INSTALLER_DIGEST, INSTALLER_ID, Installation, Invocation, JSON_MAX_DEPTH, JSON_PARSE_DEPTH_MAX,
    Json, JsonError, JsonMap, JsonView, Lease, MATERIAL_ACTION_PAYLOAD_SCHEMA_V3,
    MATERIAL_RECEIPT_SCHEMA_V3, NORMALIZER_VERSION_DEFAULT, OPAQUE_REF_SCHEMA, ObservationRef,
    PROTOCOL_VERSION, PendingConsent, PendingEffect, Preflight, PrivacyLabel, ProtocolError,
    RECEIPT_IDENTITY_KEYS, REDACTED_HOST_FAILURE, REDUCER_V3, REPLAY_FIELDS, REPLAY_MAX_BYTES,
    REPLAY_SCHEMA, REPLAY_SCHEMA_VERSION, RandomSeed, ReceiptIdentity, ReduceError, ReplayError,
    ReplayInput, Retention, STATE_KEYS_V3, STATE_SCHEMA_V3, SURROGATE_MAX_BYTES, ScopeRef,
    SessionStatus, StateError, Surrogate, SurrogateRole, Transition, USER_DECISION_KEYS, action_id,
    consent_id, normalize_protocol_timestamp, preflight, reduce, validate_surrogate,
};
/// Compatibility path of the shape checks and digests (now at the root of ctx-model).
pub mod check {
    pub use ctx_model::{
        CAPABILITY_KINDS, INSTALLABLE_KINDS, ONE_HOUR_MICROS, TOKEN_MAX_CHARS, TimestampError,
        UtcMicros, cj_digest, cja_digest, hex, is_canonical_timestamp, is_capability_identity,
        is_capability_name, is_safe_token, is_sha, is_token, is_trimmed, kind_of,
        normalize_timestamp, parse_sha, sha256_hex, sha256_hex_bytes,
    };
}
/// Compatibility path of the action contract (now at the root of ctx-model).
pub mod contract {
    pub use ctx_model::{
        PROMPT_CONTEXT_RECEIPT_SCHEMA_V1, consent_request_payload_v3, expected_install_receipt,
        expected_material_receipt, install_payload_v3, install_rollback, install_verification,
        material_payload_v3, material_rollback, material_verification, validate_action,
        validate_receipt_verification_v3,
    };
}
/// Compatibility path of the identity documents (now at the root of ctx-model).
pub mod identity {
    pub use ctx_model::{
        ACTIVATION_AUTHORIZATION_SCHEMA, AUTHORIZED_MATERIAL_SCHEMA, CATALOG_IDENTITY_SCHEMA,
        EXECUTION_BINDING_SCHEMA, INSTALL_AUTHORIZATION_SCHEMA, INSTALL_DESCRIPTOR_SCHEMA_V1,
        INSTALL_DESCRIPTOR_SCHEMA_V2, INSTALLED_LINEAGE_SCHEMA, InstallDescriptorInput,
        InstallExecutionBinding, MATERIAL_DESCRIPTOR_SCHEMA_V1, MATERIAL_DESCRIPTOR_SCHEMA_V2,
        MATERIAL_IDENTITY_SCHEMA, MAX_CONTENT_BYTES, MAX_CONTENT_TOKENS, MaterialDescriptorInput,
        ROLLBACK_ATOMIC_RESTORE, TARGET_SCOPE_USER, activation_authorization_digest,
        authorized_material_from_catalog, authorized_material_from_lineage,
        build_installed_lineage, build_material_identity, catalog_capability_identity,
        classify_lineage_promotion, descriptor_matches_result_material,
        install_authorization_digest, install_plan_descriptor, material_descriptor,
        material_identity, origin_proof_digest, validate_authorized_material,
        validate_catalog_identity, validate_execution_binding, validate_install_plan_descriptor,
        validate_installed_lineage, validate_material_descriptor, validate_material_identity,
    };
}
/// Compatibility path of the plan values (now at the root of ctx-model).
pub mod plan {
    pub use ctx_model::{
        BENEFIT_AUDIT_KEYS, BENEFIT_CANDIDATES_MAX_ITEMS as MAX_BENEFIT_CANDIDATES,
        BENEFIT_POLICY_SCHEMA_ID, BENEFIT_RESULT_SCHEMA_ID, BENEFIT_SEARCH_MAX_EVALUATIONS,
        BENEFIT_SELECTION_ALGORITHM_ID, CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3,
        DEGRADATION_CODES, MATCHING_SIGNALS_MAX_ITEMS, PLAN_ROW_V3_KEYS, REASON_CODES_MAX_ITEMS,
        SCORE_MAX_PPM, V3_ABSTENTION_CODES, canonical_row_order_key, committed_plan_from_json,
        row_tier, validate_benefit_audit, validate_capability_plan_v3_value,
        validate_committed_plan, validate_plan_row_v3,
    };
}
