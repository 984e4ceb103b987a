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

mod catalog;
mod decision;
mod managed;
mod planning;
mod policy;
mod registry;
mod runtime;
mod trust;
// Public because its on-disk names (`LOCK_SUFFIX`, `STAGE_PREFIX`) would collide at the root with
// the policy store's `LOCK_SUFFIX` and the other stores' stage prefixes; the module path says
// whose files they name (spec/skill-cas.md).
pub mod skill_cas;

// The public surface: every name ctx-hosts, ctx-cli, the tests, benches and fuzz targets use, each
// at one path (spec/service.md "Code").
pub use catalog::{
    BODY_V2_MAX_BYTES, CATALOG_SCHEMA_V2, CATALOG_V2_MAX_ENTRIES, TREE_PACK_MAX_BYTES,
};
// The catalog projection the prompt hook reads (spec/catalog.md §8).
pub use catalog::{
    CATALOG_FILE_NAME, CATALOG_MAX_ENTRIES, CapabilityCandidate, Catalog, CatalogError,
    CatalogFileError, CatalogFileKind, LoadedCatalog, WorkObservation, is_body_path,
    load_catalog_dir, load_catalog_entries, sample_catalog_dir,
};
pub use catalog::{
    PROJECTION_FILE_NAME, PROJECTION_FORMAT_VERSION, ProjectionEncodeError, ProjectionError,
    ProjectionProblem,
};
// `ctx catalog build` (spec/catalog-build.md): importers of published capability formats and the
// catalog writer.
pub use catalog::{
    BUILD_MARKER_FILE, BuildError, CATALOG_BUILD_INSTALLER_ID, CATALOG_BUILD_PLAN_SCHEMA, Finding,
    FindingSeverity, Import, ImportedEntry, MANIFEST_MAX_BYTES, Provenance,
    SOURCES_MAX_DEPTH_LEVELS, SOURCES_MAX_DIRECTORIES, SOURCES_MAX_LISTED_ENTRIES, WriteReport,
    import_sources, merge, write_catalog,
};
// Real capability material (spec/capability-formats.md, spec/skill-tree.md): frontmatter, the
// hosts' name rules, and a skill's whole file tree with its digest.
pub use catalog::{
    AgentCheck, BUNDLED_SKILL_NAMES, DESCRIPTION_MAX_CHARS, DISCOURAGED_NAME_WORDS,
    FRONTMATTER_MAX_BYTES, FRONTMATTER_MAX_KEYS, FRONTMATTER_MAX_NESTING_LEVELS, FmValue,
    Frontmatter, FrontmatterError, FrontmatterWarning, NAME_MAX_CHARS, NameFinding,
    OPEN_SPEC_SKILL_KEYS, RESERVED_SKILL_DIRECTORY_NAMES, SKILL_FILE_MAX_BYTES, SKILL_MD_MAX_BYTES,
    SKILL_PACK_MAX_BYTES, SKILL_PACK_SCHEMA, SKILL_PATH_MAX_BYTES, SKILL_TREE_MAX_BYTES,
    SKILL_TREE_MAX_DEPTH, SKILL_TREE_MAX_ENTRIES, SKILL_TREE_MAX_FILES, Severity, SkillCheck,
    SkillFile, SkillTree, SkillTreeDifference, SkillTreeError, check_agent, check_skill,
    parse_frontmatter, read_skill_tree, read_skill_tree_at, skill_pack, skill_pack_identity,
    verify_skill_tree,
};
pub use data_dir::Layout;
pub use decision::{
    DecisionError, Ed25519Signer, Ed25519Verifier, HmacSha256Verifier, HumanDecisionVerifier,
    HumanDecisionVerifierRegistration, TrustedHumanDecisionVerifierRegistry, hmac_sha256_proof,
};
pub use failpoint::FailPointFired;
pub use ingest::{CatalogIngest, IngestError, ingest_catalog};
pub use journal_store::{
    JOURNAL_URL_ENV, JournalSource, JournalSourceError, journal_exists, journal_source,
    open_journal, route_journal,
};
pub use managed::{
    ActionSummary, ActivationDriver, ActivationReport, ActuatorObservation, CONSENT_REQUIRED,
    CapabilitySelection, ConsentBrokerConfig, ConsentChallengeProjection, ConsentResolutionResult,
    DesiredResultParts, DesiredSetRequest, DesiredSetResult, EngineComposition,
    InputAuthorityError, JOURNAL_LOCK_WAIT, PlanningEventsSpec, PreparedQuery, QueryInput,
    QueryInputAuthority, QueryRequest, QueryService, QueryServiceConfig, QueryServiceResult,
    ServiceError, activation_failpoints, failpoints, observation_payload, open_engine_composition,
    open_query_service, planning_events,
};
pub use planning::adapter::{AdapterPorts, ReplayDecisionPlanner};
pub use planning::benefit::{BenefitCandidate, NetBenefitPolicy};
pub use planning::plan::{AuthenticatedNetBenefitPlanner, BenefitAuditSink, SinkError};
pub use planning::ports::{BenefitFactsPort, CatalogBenefitFacts, PortError};
pub use policy::{InstallConsentMode, InstallConsentPolicy, InstallPolicyStore, PolicyStoreError};
pub use registry::{ArtifactHandle, ArtifactRegistry, IngestInputs};
pub use runtime::{
    CHALLENGES_LIST_MAX, CONSENT_AUDIENCE, ChallengeReader, DEVICE_KEY_MAX_BYTES, DeviceKeyFile,
    LEFTOVER_AGE_MAX_SECS, Runtime, RuntimeError, SweepReport, WORK_FILE_MAX_BYTES, WorkRequest,
    challenge_record, challenges, fresh_signer, grants_by_itself, logical_id, read_device_key,
    sweep_work, uninstallable, write_plain_key, write_sealed_key,
};
pub use runtime::{
    IdentityDerivation, STORE_TARGET_SCHEMA, WORKSPACE_IDENTITY_MAX_BYTES,
    WORKSPACE_IDENTITY_SCHEMA, WorkspaceIdentity, WorkspaceIdentityError,
    legacy_path_identity_digest, store_target_identity_digest, workspace_identity,
};
pub use trust::{
    Assurance, BasisRefused, DECISION_EVIDENCE_RECORDS_MAX, DecisionCheck, DelegatedBasis,
    INSTALL_GRANTS_READ_MAX, INSTALLED_PROOF_PREFIX, PASSPHRASE_MAX_BYTES, PASSPHRASE_MIN_CHARS,
    RegisteredVerifier, RevokeTarget, SEALED_KEY_BYTES, SEALED_KEY_FORMAT_VERSION,
    SEALED_KEY_MAGIC, STANDING_PROOF_PREFIX, STANDING_SCOPE_KEY_MAX_CHARS, SealError, SealParams,
    StandingDecision, StandingEntry, StandingError, StandingScope, TRUST_APPROVAL_TTL_SECONDS,
    TRUST_AUDIENCE, TRUST_RECORDS_MAX, TrustBasis, TrustChange, TrustError, TrustRecord,
    TrustState, VerifierEntry, VerifierKind, append_trust, audit_decisions, capability_kind_of,
    change_digest, check_passphrase, host_session_of, read_trust, record_decision_evidence,
    required_assurance, seal_signer, sealed_public_key, sign_trust_assertion, trust_stream,
    unseal_signer, unsigned_trust_assertion,
};
pub use trust::{
    OriginPolicy, WEBAUTHN_ATTESTATION_MAX_BYTES, WEBAUTHN_AUTHENTICATOR_DATA_MAX_BYTES,
    WEBAUTHN_CLIENT_DATA_MAX_BYTES, WEBAUTHN_CREDENTIAL_ID_MAX_BYTES, WEBAUTHN_FORMAT_VERSION,
    WEBAUTHN_PUBLIC_KEY_BYTES, WEBAUTHN_RP_ID, WEBAUTHN_SIGNATURE_MAX_BYTES, WebAuthnCredential,
    WebAuthnError, WebAuthnProof, WebAuthnVerifier, check_sign_count, verify_webauthn_registration,
    webauthn_challenge,
};

// Specified library API that no other crate of this repository calls yet (this crate's unit tests
// do): the public-work normalizer and bounded retrieval (spec/catalog.md §5), the Ed25519 sizes
// (spec/decisions.md), the availability a presentation needs (spec/planner.md §10) and the pure
// policy routing (spec/policy.md).
pub use catalog::{PublicWork, RetrievalError, normalize_public_work, retrieve_with_limit};
pub use decision::{ED25519_PUBLIC_KEY_BYTES, ED25519_SEED_BYTES, ED25519_SIGNATURE_BYTES};
pub use planning::plan::required_availability;
pub use policy::{
    DecisionBasis, InstallAuthorizationDecision, InstallConsentDirective,
    route_install_authorization, route_install_consent_request,
};
