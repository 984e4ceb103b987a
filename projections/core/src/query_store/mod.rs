//! The managed query store (spec/projections.md §7) as a projection of the journal: no
//! separate database. Specified in `spec/projections.md`, section "query.store".
//!
//! Each managed query has its own journal stream `StreamId::derive(QUERY_STREAM_NAMESPACE, logical_query_id)`:
//! revision 1 is the registration (kind [`QUERY_REGISTRATION_KIND`], appended with `NoStream`,
//! event id = the `query_ref`), revision 2 the planned mark (kind [`QUERY_PLANNED_KIND`], appended
//! with `Exact(1)`), and from revision 3 on its desired sets, as a strict chain of pairs: a
//! reservation (kind [`DESIRED_RESERVATION_KIND`], event id = the `desired_set_ref`) and its
//! commit (kind [`DESIRED_COMMITTED_KIND`], event id = the `desired_set_ref` + `:committed`), each
//! appended with `Exact(head)` (module `desired`). Payloads are canonical ASCII JSON. The journal
//! authenticates every record (digest and installation-keyed MAC), so a record altered on disk is
//! refused when read back ("authentication failed"); the `query_ref` and `desired_set_ref` are
//! installation-keyed digests of the canonical registrations ([`Journal::keyed_digest`]),
//! re-derived and compared on every read.
//!
//! The `query.store` projection indexes those records (by logical id, by reference, by decision
//! scope and plan; desired sets by reference, by choice, by engine stream and revision) and
//! enforces, inside the append transaction, what must hold across streams: one managed query per
//! (decision scope, plan id), at most one pending desired set per engine stream, desired revisions
//! that follow the stream's committed ones, per-query causation chains, and the capacity bounds.
//! Reads never trust the index alone: every record returned is re-read from the journal,
//! re-validated and compared with its index entry.

use std::ops::ControlFlow;
use std::sync::Arc;

use ctx_journal::{
    AppendError, ExpectedRevision, HookError, HookTxn, Journal, NewRecord, ReadError, Record,
    RecordView, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{
    ARTIFACT_OBSERVATION_PROVIDER, EngineEvent, EventKind, Json, JsonError, JsonMap, RandomSeed,
    ScopeRef, UtcMicros, hex, is_sha, is_token, parse_sha,
};
use sha2::{Digest as _, Sha256};

use crate::archive;
use crate::framework::{FrameworkError, Projection, Projections};

mod desired;

pub use desired::{
    DESIRED_CAPACITY_MESSAGE, DesiredCommitEntry, DesiredEntry, DesiredStreamEntry,
    desired_choice_key, desired_stream_revision_key, is_desired_set_ref,
};

// ------------------------------------------------------------------------------------------------
// Names, formulas and limits
// ------------------------------------------------------------------------------------------------

use crate::engine::{decode_view, engine_stream};
use crate::streams::{
    DESIRED_COMMITTED_KIND, DESIRED_RESERVATION_KIND, ENGINE_RECORD_KIND, QUERY_PLANNED_KIND,
    QUERY_REGISTRATION_KIND, QUERY_STREAM_NAMESPACE,
};
/// Schema of the registration object (the registration record's payload).
pub const QUERY_REGISTRATION_SCHEMA: &str = "ctx.managed-query-registration-v1";
/// Schema of the planned binding (the planned record's payload).
pub const QUERY_PLANNED_SCHEMA: &str = "ctx.managed-query-planned-v1";
/// Keyed-digest domain of `query_ref` (spec/projections.md §7.2).
pub const QUERY_REF_DOMAIN: &[u8] = b"ctx.managed-query-ref-v1";
/// Prefix of an opaque managed query reference; 64 lowercase hex characters follow.
pub const QUERY_REF_PREFIX: &str = "mqr_";
/// Suffix of the planned record's event id (`query_ref` + this).
pub const QUERY_PLANNED_EVENT_SUFFIX: &str = ":planned";
/// Schema of the desired registration (the reservation record's payload).
pub const DESIRED_REGISTRATION_SCHEMA: &str = "ctx.managed-desired-set-registration-v1";
/// Schema of the desired commit binding (the commit record's payload).
pub const DESIRED_COMMITTED_SCHEMA: &str = "ctx.managed-desired-set-committed-v1";
/// Keyed-digest domain of `desired_set_ref` (spec/projections.md §7.2).
pub const DESIRED_SET_REF_DOMAIN: &[u8] = b"ctx.managed-desired-set-ref-v1";
/// Prefix of an opaque desired-set reference; 64 lowercase hex characters follow.
pub const DESIRED_SET_REF_PREFIX: &str = "mds_";
/// Suffix of the commit record's event id (`desired_set_ref` + this).
pub const DESIRED_COMMITTED_EVENT_SUFFIX: &str = ":committed";
/// The session payload a managed query must start with.
pub const MANAGED_HOST_LEVEL: &str = "managing";

/// Name of the projection (its journal hook and meta entry).
pub const QUERY_STORE_PROJECTION: &str = "query.store";
/// Logical query id (32 bytes) → rkyv [`QueryEntry`].
pub const QUERY_BY_LOGICAL_ID_TABLE: &str = "proj.query.by_logical_id";
/// `query_ref` digest (32 bytes) → logical query id (32 bytes).
pub const QUERY_BY_REF_TABLE: &str = "proj.query.by_ref";
/// Scope-plan key (32 bytes, [`scope_plan_key`]) → logical query id (32 bytes).
pub const QUERY_BY_SCOPE_PLAN_TABLE: &str = "proj.query.by_scope_plan";
/// `desired_set_ref` digest (32 bytes) → rkyv [`DesiredEntry`].
pub const DESIRED_BY_REF_TABLE: &str = "proj.query.desired_by_ref";
/// `query_ref` digest ‖ logical choice id (64 bytes) → `desired_set_ref` digest (32 bytes).
pub const DESIRED_BY_CHOICE_TABLE: &str = "proj.query.desired_by_choice";
/// Engine stream id ‖ expected revision u64 BE (40 bytes) → `desired_set_ref` digest (32 bytes).
pub const DESIRED_BY_STREAM_REVISION_TABLE: &str = "proj.query.desired_by_stream_revision";
/// `query_ref` digest (32 bytes) → the query's latest `desired_set_ref` digest (32 bytes).
pub const DESIRED_LATEST_TABLE: &str = "proj.query.desired_latest";
/// Engine stream id (32 bytes) → rkyv [`DesiredStreamEntry`].
pub const DESIRED_STREAMS_TABLE: &str = "proj.query.desired_streams";
/// Engine stream id (32 bytes) → [`EngineStreamEntry`] (16 bytes): how many live queries decide
/// on the stream and where its session ended (spec/projections.md §7.3, §7.5).
pub const QUERY_ENGINE_STREAMS_TABLE: &str = "proj.query.engine_streams";
/// Counter name (bytes) → u64 LE: [`COUNT_QUERIES_KEY`], [`COUNT_QUERIES_RETIRED_KEY`],
/// [`COUNT_DESIRED_SETS_KEY`], [`COUNT_DESIRED_COMMITTED_KEY`].
pub const QUERY_COUNTS_TABLE: &str = "proj.query.counts";
/// Queries registered (live or retired).
pub const COUNT_QUERIES_KEY: &[u8] = b"queries";
/// Queries retired: their engine session ended (spec/projections.md §7.5, Q2). The live queries,
/// what [`MANAGED_QUERIES_MAX`] bounds, are `queries − queries_retired`.
pub const COUNT_QUERIES_RETIRED_KEY: &[u8] = b"queries_retired";
/// Desired sets reserved (committed or not).
pub const COUNT_DESIRED_SETS_KEY: &[u8] = b"desired_sets";
/// Desired sets committed. The pending desired sets, what [`DESIRED_SETS_MAX`] bounds, are
/// `desired_sets − desired_sets_committed` (spec/projections.md §7.5, Q5).
pub const COUNT_DESIRED_COMMITTED_KEY: &[u8] = b"desired_sets_committed";

/// Most live managed queries one journal holds: registered queries whose engine session has not
/// ended (spec/projections.md §7.5). Retired queries stay in the store and do not count.
pub const MANAGED_QUERIES_MAX: u64 = 4_096;
/// Most pending desired sets one journal holds: reserved and not yet committed
/// (spec/projections.md §7.5). Committed desired sets stay in the store and do not count.
pub const DESIRED_SETS_MAX: u64 = 16_384;
/// Longest canonical JSON of one registration event (spec/projections.md §7.5).
pub const QUERY_EVENT_JSON_MAX_BYTES: usize = 16 * 1024;
/// Longest canonical registration (spec/projections.md §7.5).
pub const QUERY_REGISTRATION_MAX_BYTES: usize = 36 * 1024;
/// Most capability ids in one desired set (spec/projections.md §7.5).
pub const DESIRED_CAPABILITIES_MAX: usize = 5;
/// Longest canonical JSON of one desired-set event (spec/projections.md §7.5).
pub const DESIRED_EVENT_JSON_MAX_BYTES: usize = 24 * 1024;
/// Longest JSON of one desired set's capability ids (spec/projections.md §7.5).
pub const DESIRED_CAPABILITY_IDS_JSON_MAX_BYTES: usize = 1024;
/// Largest revision the store accepts: below SQLite's and the journal's integer bound (2^63 − 1).
const REVISION_BOUND: u64 = (1 << 63) - 1;

const SCOPE_PLAN_DOMAIN: &[u8] = b"ctx.query.scope-plan.v1\0";
const ENVELOPE_DOMAIN: &[u8] = b"ctx.query.decision-envelope.v1\0";

/// Refusal codes of the projection (carried by `AppendError::Hook`).
pub mod codes {
    /// Another managed query already holds this (decision scope, plan id).
    pub const QUERY_SCOPE_PLAN_BOUND: &str = "query-scope-plan-bound";
    /// The store holds [`super::MANAGED_QUERIES_MAX`] live queries.
    pub const QUERY_CAPACITY: &str = "query-capacity";
    /// The store holds [`super::DESIRED_SETS_MAX`] pending desired sets.
    pub const DESIRED_CAPACITY: &str = "desired-capacity";
    /// The query already binds this logical choice id to another desired set.
    pub const DESIRED_CHOICE_BOUND: &str = "desired-choice-bound";
    /// A desired set on this engine stream already reserved this expected revision.
    pub const DESIRED_REVISION_RESERVED: &str = "desired-revision-reserved";
    /// A desired set on this engine stream is reserved and not committed.
    pub const DESIRED_STREAM_PENDING: &str = "desired-stream-pending";
    /// The event's causation is not the query's previous desired event (or its decision event).
    pub const DESIRED_CAUSATION: &str = "desired-causation";
    /// The expected revision is not above the stream's latest committed desired set.
    pub const DESIRED_REVISION_STALE: &str = "desired-revision-stale";
    /// A query record that does not validate or is out of place.
    pub const QUERY_RECORD_INVALID: &str = "query-record-invalid";
}

// ------------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------------

/// Why a query store operation failed. `Display` is the reference's message; `detail` (in
/// `Debug` only) says more for operators and never carries a key or a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryStoreError {
    #[error("{message}")]
    Unavailable {
        message: &'static str,
        detail: String,
    },
    #[error("{message}")]
    Corruption {
        message: &'static str,
        detail: String,
    },
    #[error("{message}")]
    Conflict { message: &'static str },
    #[error("{message}")]
    CapacityExceeded { message: &'static str },
    #[error("{message}")]
    NotFound { message: &'static str },
    #[error("{message}")]
    Invalid { message: String },
}

fn invalid(message: impl Into<String>) -> QueryStoreError {
    QueryStoreError::Invalid {
        message: message.into(),
    }
}

fn corruption(message: &'static str, detail: impl Into<String>) -> QueryStoreError {
    QueryStoreError::Corruption {
        message,
        detail: detail.into(),
    }
}

fn unavailable(detail: impl std::fmt::Display) -> QueryStoreError {
    QueryStoreError::Unavailable {
        message: "managed query store is unavailable",
        detail: detail.to_string(),
    }
}

const NOT_FOUND: QueryStoreError = QueryStoreError::NotFound {
    message: "managed query record is unavailable",
};
const CONFLICT_CONTENT: QueryStoreError = QueryStoreError::Conflict {
    message: "logical query identity is already bound to different content",
};
const CONFLICT_SCOPE_PLAN: QueryStoreError = QueryStoreError::Conflict {
    message: "scope and plan identity already bind another managed query",
};
const CONFLICT_COMPLETION: QueryStoreError = QueryStoreError::Conflict {
    message: "managed query completion is already bound differently",
};
const CAPACITY: QueryStoreError = QueryStoreError::CapacityExceeded {
    message: QUERY_CAPACITY_MESSAGE,
};
/// The sentence of the query capacity refusal. It reaches the person verbatim through the hooks,
/// so it names the bound, what counts toward it and what frees it (spec/projections.md §7.5);
/// [`MANAGED_QUERIES_MAX`] is spelled out because a constant `&str` cannot format it (a test
/// checks that the two agree).
pub const QUERY_CAPACITY_MESSAGE: &str = "managed query store reached its bounded capacity: \
     4096 live queries (a query is live until its agent session ends), so ctx plans nothing new; \
     close the agent sessions you no longer use, then send the prompt again";

fn read_error(e: ReadError) -> QueryStoreError {
    match e {
        ReadError::AuthenticationFailed { .. } => {
            corruption("managed query record authentication failed", e.to_string())
        }
        ReadError::Corrupt { .. } => {
            corruption("managed query record is unreadable", e.to_string())
        }
        other => unavailable(other),
    }
}

fn framework_error(e: FrameworkError) -> QueryStoreError {
    corruption("managed query projection is unavailable", e.to_string())
}

// ------------------------------------------------------------------------------------------------
// Records
// ------------------------------------------------------------------------------------------------

/// A managed query as the store holds it (spec/projections.md §7.1). Store-issued only: no public
/// constructor, no `Clone`, no serialization; equal when every field is equal.
#[derive(PartialEq)]
pub struct QueryRecord {
    query_ref: String,
    logical_query_id: String,
    session_started: EngineEvent,
    decision_event: EngineEvent,
    artifact_manifest_digest: String,
    planning_environment_digest: String,
    planned: Option<PlannedBinding>,
}

/// The completion binding of a planned query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedBinding {
    plan_id: String,
    decision_digest: String,
    journal_revision: u64,
    journal_record_digest: String,
}

impl std::fmt::Debug for QueryRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.is_planned() {
            "planned"
        } else {
            "registered"
        };
        f.debug_struct("QueryRecord")
            .field("query_ref", &self.query_ref)
            .field("state", &state)
            .finish()
    }
}

impl QueryRecord {
    pub fn query_ref(&self) -> &str {
        &self.query_ref
    }
    pub fn logical_query_id(&self) -> &str {
        &self.logical_query_id
    }
    pub fn session_started(&self) -> &EngineEvent {
        &self.session_started
    }
    pub fn decision_event(&self) -> &EngineEvent {
        &self.decision_event
    }
    pub fn artifact_manifest_digest(&self) -> &str {
        &self.artifact_manifest_digest
    }
    pub fn planning_environment_digest(&self) -> &str {
        &self.planning_environment_digest
    }
    /// True once the planned mark is recorded (`plan_id` present).
    pub fn is_planned(&self) -> bool {
        self.planned.is_some()
    }
    pub fn plan_id(&self) -> Option<&str> {
        self.planned.as_ref().map(|p| p.plan_id.as_str())
    }
    pub fn decision_digest(&self) -> Option<&str> {
        self.planned.as_ref().map(|p| p.decision_digest.as_str())
    }
    /// Engine revision of the committed decision (≥ 2).
    pub fn journal_revision(&self) -> Option<u64> {
        self.planned.as_ref().map(|p| p.journal_revision)
    }
    pub fn journal_record_digest(&self) -> Option<&str> {
        self.planned
            .as_ref()
            .map(|p| p.journal_record_digest.as_str())
    }
}

/// A desired-set record (spec/projections.md §7.1): a reservation and, once committed, its commit
/// binding. Store-issued only: no public constructor, no `Clone`, no serialization; equal when
/// every field is equal.
#[derive(PartialEq)]
pub struct DesiredSetRecord {
    query_ref: String,
    logical_choice_id: String,
    desired_set_ref: String,
    plan_id: String,
    decision_digest: String,
    stream_identity_digest: String,
    capability_ids: Vec<String>,
    event: EngineEvent,
    committed: Option<DesiredCommit>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DesiredCommit {
    journal_revision: u64,
    journal_record_digest: String,
    transition_digest: String,
}

impl std::fmt::Debug for DesiredSetRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.committed.is_some() {
            "committed"
        } else {
            "reserved"
        };
        f.debug_struct("DesiredSetRecord")
            .field("desired_set_ref", &self.desired_set_ref)
            .field("state", &state)
            .finish()
    }
}

impl DesiredSetRecord {
    pub fn query_ref(&self) -> &str {
        &self.query_ref
    }
    pub fn logical_choice_id(&self) -> &str {
        &self.logical_choice_id
    }
    pub fn desired_set_ref(&self) -> &str {
        &self.desired_set_ref
    }
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }
    pub fn decision_digest(&self) -> &str {
        &self.decision_digest
    }
    pub fn stream_identity_digest(&self) -> &str {
        &self.stream_identity_digest
    }
    pub fn capability_ids(&self) -> &[String] {
        &self.capability_ids
    }
    /// The reserved `ReassessmentRequested` event.
    pub fn event(&self) -> &EngineEvent {
        &self.event
    }
    pub fn is_committed(&self) -> bool {
        self.committed.is_some()
    }
    /// Event expected revision + 1, once committed.
    pub fn journal_revision(&self) -> Option<u64> {
        self.committed.as_ref().map(|c| c.journal_revision)
    }
    pub fn journal_record_digest(&self) -> Option<&str> {
        self.committed
            .as_ref()
            .map(|c| c.journal_record_digest.as_str())
    }
    pub fn transition_digest(&self) -> Option<&str> {
        self.committed
            .as_ref()
            .map(|c| c.transition_digest.as_str())
    }
}

// ------------------------------------------------------------------------------------------------
// Projection entries
// ------------------------------------------------------------------------------------------------

/// The index entry of one managed query.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct QueryEntry {
    pub logical_query_id: [u8; 32],
    /// The 32 bytes behind `query_ref` (the event id of the registration record).
    pub query_ref: [u8; 32],
    pub stream: [u8; 32],
    /// SHA-256 of the registration payload (its canonical bytes).
    pub registration_digest: [u8; 32],
    pub registration_position: u64,
    /// [`scope_plan_key`] of the decision scope and correlation id.
    pub scope_plan: [u8; 32],
    /// The decision event's `correlation_id`: the only plan id a planned mark may carry.
    pub decision_plan_id: String,
    pub decision_expected_revision: u64,
    /// The decision event's id: the causation of the query's first desired set.
    pub decision_event_id: String,
    /// [`envelope_digest`] of the decision event: what every desired-set event must repeat.
    pub decision_envelope: [u8; 32],
    pub planned: Option<PlannedEntry>,
}

/// The planned binding as indexed.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PlannedEntry {
    pub plan_id: String,
    pub decision_digest: [u8; 32],
    pub journal_revision: u64,
    pub journal_record_digest: [u8; 32],
    pub position: u64,
}

/// What the store knows of one engine stream its queries decide on ([`QUERY_ENGINE_STREAMS_TABLE`],
/// spec/projections.md §7.3): 16 bytes, `live_queries` u64 LE ‖ `ended_position` u64 LE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStreamEntry {
    /// Queries registered with a decision on this stream and not retired.
    pub live_queries: u64,
    /// Journal position of the stream's `SessionEnded` record; 0 while the session has not ended
    /// (no record has position 0).
    pub ended_position: u64,
}

/// Length of an encoded [`EngineStreamEntry`].
pub const ENGINE_STREAM_ENTRY_BYTES: usize = 16;

impl EngineStreamEntry {
    pub fn encode(&self) -> [u8; ENGINE_STREAM_ENTRY_BYTES] {
        let mut bytes = [0u8; ENGINE_STREAM_ENTRY_BYTES];
        bytes[..8].copy_from_slice(&self.live_queries.to_le_bytes());
        bytes[8..].copy_from_slice(&self.ended_position.to_le_bytes());
        bytes
    }

    /// `None` for a value that is not 16 bytes, or that counts live queries on an ended stream
    /// (invariant Q3: an ended stream has none).
    pub fn decode(bytes: &[u8]) -> Option<EngineStreamEntry> {
        let (live, ended) = bytes.split_first_chunk::<8>()?;
        let ended = <[u8; 8]>::try_from(ended).ok()?;
        let entry = EngineStreamEntry {
            live_queries: u64::from_le_bytes(*live),
            ended_position: u64::from_le_bytes(ended),
        };
        (entry.ended_position == 0 || entry.live_queries == 0).then_some(entry)
    }

    pub fn is_ended(&self) -> bool {
        self.ended_position != 0
    }
}

/// SHA-256("ctx.query.scope-plan.v1\0" ‖ CJA(scope) ‖ 0x00 ‖ plan_id): one key per (full decision
/// scope, plan id). Scope fields and plan ids are tokens, so neither part contains a NUL.
pub fn scope_plan_key(scope: &ScopeRef, plan_id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(SCOPE_PLAN_DOMAIN);
    h.update(scope.to_json().to_cja().as_bytes());
    h.update([0u8]);
    h.update(plan_id.as_bytes());
    h.finalize().into()
}

/// SHA-256("ctx.query.decision-envelope.v1\0" ‖ CJA({catalog_snapshot_digest, engine_version,
/// host_descriptor_digest, planner_version, policy_version, privacy, random_seed,
/// semantic_index_digest, semantic_model_digest, work_signature})): the replay envelope a
/// desired-set event must copy from its parent's decision event (spec/projections.md §7.6).
pub fn envelope_digest(event: &EngineEvent) -> [u8; 32] {
    let opt = |v: &Option<String>| Json::opt_str(v.as_deref());
    let envelope = Json::object([
        (
            "catalog_snapshot_digest",
            opt(&event.catalog_snapshot_digest),
        ),
        ("engine_version", opt(&event.engine_version)),
        ("host_descriptor_digest", opt(&event.host_descriptor_digest)),
        ("planner_version", opt(&event.planner_version)),
        ("policy_version", opt(&event.policy_version)),
        ("privacy", event.privacy.to_json()),
        ("random_seed", event.random_seed.to_json()),
        ("semantic_index_digest", opt(&event.semantic_index_digest)),
        ("semantic_model_digest", opt(&event.semantic_model_digest)),
        ("work_signature", opt(&event.work_signature)),
    ]);
    let mut h = Sha256::new();
    h.update(ENVELOPE_DOMAIN);
    h.update(envelope.to_cja().as_bytes());
    h.finalize().into()
}

/// The journal stream of a logical query id.
pub fn query_stream(logical_query_id: &str) -> Result<StreamId, QueryStoreError> {
    StreamId::derive(QUERY_STREAM_NAMESPACE, logical_query_id.as_bytes())
        .map_err(|e| invalid(e.to_string()))
}

fn planned_event_id(query_ref: &str) -> String {
    format!("{query_ref}{QUERY_PLANNED_EVENT_SUFFIX}")
}

/// `mqr_` + 64 lowercase hex.
pub fn is_query_ref(s: &str) -> bool {
    s.strip_prefix(QUERY_REF_PREFIX).is_some_and(is_sha)
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the contents (spec/projections.md §7.2): references are compared without an
    // early exit that would time how many leading bytes an attacker guessed.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ------------------------------------------------------------------------------------------------
// Registration validation (spec/projections.md §7.4)
// ------------------------------------------------------------------------------------------------

/// A validated registration and its canonical bytes.
struct Registration {
    logical_query_id: String,
    session_started: EngineEvent,
    decision_event: EngineEvent,
    artifact_manifest_digest: String,
    planning_environment_digest: String,
    /// Canonical ASCII JSON of the registration object.
    bytes: Vec<u8>,
}

impl Registration {
    fn plan_id(&self) -> &str {
        self.decision_event.correlation_id.as_deref().unwrap_or("")
    }

    fn occurred_at(&self) -> Result<Timestamp, QueryStoreError> {
        UtcMicros::parse(&self.decision_event.occurred_at)
            .map(|t| Timestamp(t.0))
            .map_err(|_| invalid("decision_event.occurred_at must be a UTC timestamp"))
    }
}

fn check_digest(name: &str, value: &str) -> Result<(), QueryStoreError> {
    if is_sha(value) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{name} must be a lowercase SHA-256 digest"
        )))
    }
}

fn check_scope(scope: &ScopeRef) -> Result<(), QueryStoreError> {
    let fields = [
        ("tenant_id", Some(scope.tenant_id.as_str())),
        ("workspace_id", Some(scope.workspace_id.as_str())),
        ("repository_id", Some(scope.repository_id.as_str())),
        ("session_id", Some(scope.session_id.as_str())),
        ("exposure_id", Some(scope.exposure_id.as_str())),
        ("host_context_id", Some(scope.host_context_id.as_str())),
        ("parent_exposure_id", scope.parent_exposure_id.as_deref()),
    ];
    for (name, value) in fields {
        if let Some(v) = value
            && !is_token(v)
        {
            return Err(invalid(format!(
                "scope.{name} must be a bounded canonical token"
            )));
        }
    }
    Ok(())
}

fn check_event_tokens(label: &str, e: &EngineEvent) -> Result<(), QueryStoreError> {
    check_scope(&e.scope)?;
    let tokens = [
        ("event_id", Some(e.event_id.as_str())),
        ("correlation_id", e.correlation_id.as_deref()),
        ("causation_id", e.causation_id.as_deref()),
        ("engine_version", e.engine_version.as_deref()),
        ("planner_version", e.planner_version.as_deref()),
        ("policy_version", e.policy_version.as_deref()),
    ];
    for (name, value) in tokens {
        if !value.is_some_and(is_token) {
            return Err(invalid(format!(
                "{label}.{name} must be a bounded canonical token"
            )));
        }
    }
    let digests = [
        (
            "host_descriptor_digest",
            e.host_descriptor_digest.as_deref(),
        ),
        (
            "catalog_snapshot_digest",
            e.catalog_snapshot_digest.as_deref(),
        ),
        ("semantic_model_digest", e.semantic_model_digest.as_deref()),
        ("semantic_index_digest", e.semantic_index_digest.as_deref()),
        ("work_signature", e.work_signature.as_deref()),
    ];
    for (name, value) in digests {
        if !value.is_some_and(is_sha) {
            return Err(invalid(format!(
                "{label}.{name} must be a lowercase SHA-256 digest"
            )));
        }
    }
    if !matches!(e.random_seed, RandomSeed::Int(_)) {
        return Err(invalid(format!("{label}.random_seed must be an integer")));
    }
    Ok(())
}

/// spec/projections.md §7.4 rules, in order; `Err` is the reference's message.
fn validate_registration(
    logical_query_id: &str,
    session: &EngineEvent,
    decision: &EngineEvent,
    artifact_manifest_digest: &str,
    planning_environment_digest: &str,
) -> Result<Registration, QueryStoreError> {
    check_digest("logical_query_id", logical_query_id)?;
    check_digest("artifact_manifest_digest", artifact_manifest_digest)?;
    check_digest("planning_environment_digest", planning_environment_digest)?;
    check_event_tokens("session_started", session)?;
    check_event_tokens("decision_event", decision)?;
    if session.kind != EventKind::SessionStarted || session.expected_revision != 0 {
        return Err(invalid(
            "managed query must begin with SessionStarted revision zero",
        ));
    }
    if !matches!(
        decision.kind,
        EventKind::IntentObserved | EventKind::DevelopmentObserved
    ) {
        return Err(invalid("managed query decision event kind is unsupported"));
    }
    if decision.expected_revision < 1 || decision.expected_revision >= REVISION_BOUND {
        return Err(invalid(
            "managed query decision revision must follow session start",
        ));
    }
    if (decision.kind == EventKind::IntentObserved) != (decision.expected_revision == 1) {
        return Err(invalid(
            "managed query decision kind does not match its stream revision",
        ));
    }
    let managing = Json::object([("host_level", Json::str(MANAGED_HOST_LEVEL))]);
    if session.payload != managing {
        return Err(invalid(
            "managed query session payload is not the exact managing envelope",
        ));
    }
    let payload = decision.payload.as_obj();
    let Some(observation) = payload
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get("observation_ref"))
    else {
        return Err(invalid(
            "managed query planning payload must contain only observation_ref",
        ));
    };
    let reference = observation.as_obj().filter(|m| {
        m.len() == 3
            && ["provider_id", "opaque_id", "content_digest"]
                .iter()
                .all(|k| m.get(*k).and_then(Json::as_str).is_some())
    });
    let Some(reference) = reference else {
        return Err(invalid("managed query observation reference is invalid"));
    };
    let field = |k: &str| reference.get(k).and_then(Json::as_str).unwrap_or("");
    if field("provider_id") != ARTIFACT_OBSERVATION_PROVIDER
        || field("opaque_id") != format!("manifest-{artifact_manifest_digest}")
    {
        return Err(invalid(
            "managed query observation reference is not artifact-bound",
        ));
    }
    if !is_sha(field("content_digest")) {
        return Err(invalid("managed query observation reference is invalid"));
    }
    if session.event_id == decision.event_id {
        return Err(invalid(
            "managed query event identity relationships are invalid",
        ));
    }
    for name in [
        "planner_version",
        "host_descriptor_digest",
        "catalog_snapshot_digest",
        "semantic_model_digest",
        "semantic_index_digest",
    ] {
        if session.text_metadata(name) != decision.text_metadata(name) {
            return Err(invalid(format!("managed query events disagree on {name}")));
        }
    }
    if decision.kind == EventKind::IntentObserved {
        if session.scope != decision.scope
            || session.correlation_id != decision.correlation_id
            || decision.causation_id.as_deref() != Some(session.event_id.as_str())
        {
            return Err(invalid(
                "managed query initial event identity relationships are invalid",
            ));
        }
        for name in ["engine_version", "policy_version", "work_signature"] {
            if session.text_metadata(name) != decision.text_metadata(name) {
                return Err(invalid(format!(
                    "managed query initial events disagree on {name}"
                )));
            }
        }
        if session.random_seed != decision.random_seed {
            return Err(invalid(
                "managed query initial events disagree on random_seed",
            ));
        }
    } else if session.scope.stream_key() != decision.scope.stream_key() {
        return Err(invalid(
            "managed query development events must share one stable stream",
        ));
    }
    if session.catalog_snapshot_digest.as_deref() != Some(planning_environment_digest) {
        return Err(invalid(
            "managed query planning environment binding is invalid",
        ));
    }
    let session_json = session.to_json();
    let decision_json = decision.to_json();
    if session_json.to_cja().len() > QUERY_EVENT_JSON_MAX_BYTES
        || decision_json.to_cja().len() > QUERY_EVENT_JSON_MAX_BYTES
    {
        return Err(invalid(
            "managed query event exceeds its persistent byte bound",
        ));
    }
    let object = Json::object([
        (
            "artifact_manifest_digest",
            Json::str(artifact_manifest_digest),
        ),
        ("decision_event", decision_json),
        ("logical_query_id", Json::str(logical_query_id)),
        (
            "planning_environment_digest",
            Json::str(planning_environment_digest),
        ),
        ("schema", Json::str(QUERY_REGISTRATION_SCHEMA)),
        ("session_started", session_json),
    ]);
    let bytes = object.to_cja().into_bytes();
    if bytes.len() > QUERY_REGISTRATION_MAX_BYTES {
        return Err(invalid(
            "managed query registration exceeds its persistent byte bound",
        ));
    }
    Ok(Registration {
        logical_query_id: logical_query_id.to_owned(),
        session_started: session.clone(),
        decision_event: decision.clone(),
        artifact_manifest_digest: artifact_manifest_digest.to_owned(),
        planning_environment_digest: planning_environment_digest.to_owned(),
        bytes,
    })
}

const REGISTRATION_KEYS: [&str; 6] = [
    "artifact_manifest_digest",
    "decision_event",
    "logical_query_id",
    "planning_environment_digest",
    "schema",
    "session_started",
];

/// Parses a strict, canonical JSON object payload (shared by both record kinds).
fn parse_canonical(payload: &[u8]) -> Result<JsonMap, &'static str> {
    let text = std::str::from_utf8(payload)
        .ok()
        .filter(|t| t.is_ascii())
        .ok_or("managed query registration JSON is invalid")?;
    let value = Json::parse(text).map_err(|e| match e {
        JsonError::DuplicateKey { .. } => "managed query JSON contains duplicate fields",
        _ => "managed query registration JSON is invalid",
    })?;
    if value.to_cja() != text {
        return Err("managed query registration JSON is noncanonical");
    }
    match value {
        Json::Obj(m) => Ok(m),
        _ => Err("managed query registration JSON is invalid"),
    }
}

/// Decodes and re-validates a stored registration payload (spec/projections.md §7.6, query rows).
fn decode_registration(payload: &[u8]) -> Result<Registration, &'static str> {
    if payload.is_empty() || payload.len() > QUERY_REGISTRATION_MAX_BYTES {
        return Err("managed query registration size is invalid");
    }
    let m = parse_canonical(payload)?;
    let exact = m.len() == REGISTRATION_KEYS.len()
        && REGISTRATION_KEYS.iter().all(|k| m.contains_key(*k))
        && m.get("schema").and_then(Json::as_str) == Some(QUERY_REGISTRATION_SCHEMA);
    if !exact {
        return Err("managed query registration fields are invalid");
    }
    let text = |k: &str| m.get(k).and_then(Json::as_str).unwrap_or("");
    let (Some(session), Some(decision)) = (
        m.get("session_started").filter(|v| v.as_obj().is_some()),
        m.get("decision_event").filter(|v| v.as_obj().is_some()),
    ) else {
        return Err("managed query persisted events are invalid");
    };
    const PERSISTED: &str = "managed query persisted registration is invalid";
    let session = EngineEvent::from_json(session).map_err(|_| PERSISTED)?;
    let decision = EngineEvent::from_json(decision).map_err(|_| PERSISTED)?;
    let registration = validate_registration(
        text("logical_query_id"),
        &session,
        &decision,
        text("artifact_manifest_digest"),
        text("planning_environment_digest"),
    )
    .map_err(|_| PERSISTED)?;
    if registration.bytes != payload {
        return Err("managed query persisted registration is not exact");
    }
    Ok(registration)
}

const PLANNED_KEYS: [&str; 6] = [
    "decision_digest",
    "journal_record_digest",
    "journal_revision",
    "plan_id",
    "query_ref",
    "schema",
];

fn planned_payload(query_ref: &str, binding: &PlannedBinding) -> Vec<u8> {
    let revision = i64::try_from(binding.journal_revision).unwrap_or(i64::MAX);
    Json::object([
        ("decision_digest", Json::str(&binding.decision_digest)),
        (
            "journal_record_digest",
            Json::str(&binding.journal_record_digest),
        ),
        ("journal_revision", Json::Int(revision)),
        ("plan_id", Json::str(&binding.plan_id)),
        ("query_ref", Json::str(query_ref)),
        ("schema", Json::str(QUERY_PLANNED_SCHEMA)),
    ])
    .to_cja()
    .into_bytes()
}

/// Decodes a planned payload: the binding and the `query_ref` it names.
fn decode_planned(payload: &[u8]) -> Result<(String, PlannedBinding), &'static str> {
    const BAD: &str = "managed query completion binding is invalid";
    let m = parse_canonical(payload).map_err(|_| BAD)?;
    let exact = m.len() == PLANNED_KEYS.len()
        && PLANNED_KEYS.iter().all(|k| m.contains_key(*k))
        && m.get("schema").and_then(Json::as_str) == Some(QUERY_PLANNED_SCHEMA);
    if !exact {
        return Err(BAD);
    }
    let text = |k: &str| m.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
    let binding = PlannedBinding {
        plan_id: text("plan_id"),
        decision_digest: text("decision_digest"),
        journal_revision: m
            .get("journal_revision")
            .and_then(Json::as_i64)
            .and_then(|r| u64::try_from(r).ok())
            .unwrap_or(0),
        journal_record_digest: text("journal_record_digest"),
    };
    let query_ref = text("query_ref");
    check_binding(&binding).map_err(|_| BAD)?;
    if !is_query_ref(&query_ref) {
        return Err(BAD);
    }
    Ok((query_ref, binding))
}

/// Shape of a completion binding (spec/projections.md §7.6).
fn check_binding(b: &PlannedBinding) -> Result<(), QueryStoreError> {
    if !is_token(&b.plan_id) {
        return Err(invalid("plan_id must be a bounded canonical token"));
    }
    check_digest("decision_digest", &b.decision_digest)?;
    check_digest("journal_record_digest", &b.journal_record_digest)?;
    if b.journal_revision < 2 || b.journal_revision >= REVISION_BOUND {
        return Err(invalid(
            "journal_revision must be a bounded integer at least two",
        ));
    }
    Ok(())
}

/// The completion must name the decision's plan and the revision right after it.
fn binding_matches_decision(decision: &EngineEvent, b: &PlannedBinding) -> bool {
    decision.correlation_id.as_deref() == Some(b.plan_id.as_str())
        && decision.expected_revision.checked_add(1) == Some(b.journal_revision)
}

// ------------------------------------------------------------------------------------------------
// The projection
// ------------------------------------------------------------------------------------------------

/// The `query.store` projection.
#[derive(Debug)]
pub(crate) struct QueryStoreProjection;

/// The fold of `query.store` with its live-query bound: [`MANAGED_QUERIES_MAX`] in production;
/// tests fold with a small bound to cross it cheaply ([`QueryStore::open_bounded`]).
#[derive(Debug, Clone, Copy)]
struct QueryFold {
    queries_max: u64,
}

fn refuse(code: &'static str, message: impl Into<String>) -> HookError {
    HookError::with_code(code, message)
}

fn count_in(tx: &HookTxn<'_>, key: &[u8]) -> Result<u64, HookError> {
    let stored = tx.get(QUERY_COUNTS_TABLE, key, |v| v.map(<[u8]>::to_vec))?;
    match stored {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| {
                refuse(
                    codes::QUERY_RECORD_INVALID,
                    "a query store counter is corrupt",
                )
            }),
    }
}

fn set_count(tx: &HookTxn<'_>, key: &[u8], value: u64) -> Result<(), HookError> {
    Ok(tx.insert(QUERY_COUNTS_TABLE, key, &value.to_le_bytes())?)
}

/// Registered minus retired queries: what [`MANAGED_QUERIES_MAX`] bounds.
fn live_queries_in(tx: &HookTxn<'_>) -> Result<(u64, u64), HookError> {
    let registered = count_in(tx, COUNT_QUERIES_KEY)?;
    let retired = count_in(tx, COUNT_QUERIES_RETIRED_KEY)?;
    if retired > registered {
        return Err(refuse(
            codes::QUERY_RECORD_INVALID,
            "the query store counts more retired queries than registered ones",
        ));
    }
    Ok((registered, retired))
}

fn engine_stream_in(
    tx: &HookTxn<'_>,
    stream: &[u8; 32],
) -> Result<Option<EngineStreamEntry>, HookError> {
    match tx.get(QUERY_ENGINE_STREAMS_TABLE, stream, |v| {
        v.map(<[u8]>::to_vec)
    })? {
        None => Ok(None),
        Some(bytes) => EngineStreamEntry::decode(&bytes).map(Some).ok_or_else(|| {
            refuse(
                codes::QUERY_RECORD_INVALID,
                "a query store engine stream entry is corrupt",
            )
        }),
    }
}

fn entry_in(tx: &HookTxn<'_>, logical: &[u8; 32]) -> Result<Option<QueryEntry>, HookError> {
    Ok(tx.get(QUERY_BY_LOGICAL_ID_TABLE, logical, |v| {
        v.map(archive::from_bytes::<QueryEntry>).transpose()
    })??)
}

impl QueryFold {
    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        match record.kind {
            QUERY_REGISTRATION_KIND => self.apply_registration(tx, record),
            QUERY_PLANNED_KIND => self.apply_planned(tx, record),
            DESIRED_RESERVATION_KIND => desired::apply_reservation(tx, record),
            DESIRED_COMMITTED_KIND => desired::apply_commit(tx, record),
            ENGINE_RECORD_KIND => self.apply_engine(tx, record),
            _ => Ok(()),
        }
    }

    fn apply_registration(
        &self,
        tx: &HookTxn<'_>,
        record: &RecordView<'_>,
    ) -> Result<(), HookError> {
        let bad = |m: &str| {
            refuse(
                codes::QUERY_RECORD_INVALID,
                format!(
                    "query registration record {} is invalid: {m}",
                    record.event_id
                ),
            )
        };
        let registration = decode_registration(record.payload).map_err(bad)?;
        let (Some(logical), Some(reference)) = (
            parse_sha(&registration.logical_query_id),
            record
                .event_id
                .strip_prefix(QUERY_REF_PREFIX)
                .and_then(parse_sha),
        ) else {
            return Err(bad("its event id is not a managed query reference"));
        };
        let placed = record.revision == 1
            && query_stream(&registration.logical_query_id).ok() == Some(record.stream)
            && registration.occurred_at().ok() == Some(record.occurred_at);
        if !placed {
            return Err(bad(
                "it is not the first record of its logical query stream",
            ));
        }
        // The key cannot be checked here (a projection sees no key); the store re-derives the
        // reference from the authenticated record on every read.
        let scope_plan = scope_plan_key(&registration.decision_event.scope, registration.plan_id());
        let bound = tx.get(QUERY_BY_SCOPE_PLAN_TABLE, &scope_plan, |v| v.is_some())?;
        if bound {
            return Err(refuse(
                codes::QUERY_SCOPE_PLAN_BOUND,
                "scope and plan identity already bind another managed query",
            ));
        }
        // Only live queries count (spec/projections.md §7.5, Q1): the bound refuses a
        // registration while MANAGED_QUERIES_MAX queries are live, whatever the new one's stream.
        let (registered, retired) = live_queries_in(tx)?;
        if registered - retired >= self.queries_max {
            return Err(refuse(codes::QUERY_CAPACITY, QUERY_CAPACITY_MESSAGE));
        }
        let Ok(engine) = engine_stream(&registration.decision_event.scope) else {
            return Err(bad("its decision scope names no engine stream"));
        };
        let engine = *engine.as_bytes();
        let mut stream_entry = engine_stream_in(tx, &engine)?.unwrap_or_default();
        let entry = QueryEntry {
            logical_query_id: logical,
            query_ref: reference,
            stream: *record.stream.as_bytes(),
            registration_digest: Sha256::digest(record.payload).into(),
            registration_position: record.position,
            scope_plan,
            decision_plan_id: registration.plan_id().to_owned(),
            decision_expected_revision: registration.decision_event.expected_revision,
            decision_event_id: registration.decision_event.event_id.clone(),
            decision_envelope: envelope_digest(&registration.decision_event),
            planned: None,
        };
        tx.insert(
            QUERY_BY_LOGICAL_ID_TABLE,
            &logical,
            &archive::to_bytes(&entry)?,
        )?;
        tx.insert(QUERY_BY_REF_TABLE, &reference, &logical)?;
        tx.insert(QUERY_BY_SCOPE_PLAN_TABLE, &scope_plan, &logical)?;
        set_count(tx, COUNT_QUERIES_KEY, registered + 1)?;
        if stream_entry.is_ended() {
            // Its session ended before it registered: it can never be planned (the reducer takes
            // no decision after SessionEnded), so it is retired at once (Q2).
            set_count(tx, COUNT_QUERIES_RETIRED_KEY, retired + 1)?;
        } else {
            stream_entry.live_queries += 1;
            tx.insert(QUERY_ENGINE_STREAMS_TABLE, &engine, &stream_entry.encode())?;
        }
        Ok(())
    }

    /// An engine record on a stream with live queries: its `SessionEnded` retires them all
    /// (spec/projections.md §7.5, Q2). Records of other streams are not decoded.
    fn apply_engine(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let stream = *record.stream.as_bytes();
        let Some(entry) = engine_stream_in(tx, &stream)? else {
            return Ok(());
        };
        if entry.is_ended() {
            return Ok(());
        }
        // `engine.state` refuses an engine record that does not decode or replay; this store may be
        // attached without it, and a record it cannot read is not a session end to it.
        let ended = decode_view(record)
            .is_ok_and(|d| d.replay.reducer_event.kind == EventKind::SessionEnded);
        if !ended {
            return Ok(());
        }
        let (registered, retired) = live_queries_in(tx)?;
        let retired_now = retired
            .checked_add(entry.live_queries)
            .filter(|r| *r <= registered)
            .ok_or_else(|| {
                refuse(
                    codes::QUERY_RECORD_INVALID,
                    "an engine stream counts more live queries than the store registered",
                )
            })?;
        set_count(tx, COUNT_QUERIES_RETIRED_KEY, retired_now)?;
        let ended = EngineStreamEntry {
            live_queries: 0,
            ended_position: record.position,
        };
        tx.insert(QUERY_ENGINE_STREAMS_TABLE, &stream, &ended.encode())?;
        Ok(())
    }

    fn apply_planned(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let bad = |m: &str| {
            refuse(
                codes::QUERY_RECORD_INVALID,
                format!("query planned record {} is invalid: {m}", record.event_id),
            )
        };
        let (query_ref, binding) = decode_planned(record.payload).map_err(bad)?;
        let Some(reference) = query_ref.strip_prefix(QUERY_REF_PREFIX).and_then(parse_sha) else {
            return Err(bad("it names no managed query reference"));
        };
        let logical = tx.get(QUERY_BY_REF_TABLE, &reference, |v| {
            v.and_then(|b| <[u8; 32]>::try_from(b).ok())
        })?;
        let entry = match logical {
            Some(l) => entry_in(tx, &l)?,
            None => None,
        };
        let Some(mut entry) = entry else {
            return Err(bad("its managed query is not registered"));
        };
        let placed = record.revision == 2
            && entry.stream == *record.stream.as_bytes()
            && record.event_id == planned_event_id(&query_ref)
            && entry.planned.is_none();
        if !placed {
            return Err(bad(
                "it is not the second record of its managed query stream",
            ));
        }
        let matches = entry.decision_plan_id == binding.plan_id
            && entry.decision_expected_revision.checked_add(1) == Some(binding.journal_revision);
        let (Some(decision_digest), Some(journal_record_digest)) = (
            parse_sha(&binding.decision_digest),
            parse_sha(&binding.journal_record_digest),
        ) else {
            return Err(bad("its digests are malformed"));
        };
        if !matches {
            return Err(bad("it does not match the managed decision event"));
        }
        entry.planned = Some(PlannedEntry {
            plan_id: binding.plan_id,
            decision_digest,
            journal_revision: binding.journal_revision,
            journal_record_digest,
            position: record.position,
        });
        tx.insert(
            QUERY_BY_LOGICAL_ID_TABLE,
            &entry.logical_query_id,
            &archive::to_bytes(&entry)?,
        )?;
        Ok(())
    }
}

/// Name, version and tables of `query.store`, whatever the fold's bound.
const QUERY_STORE_VERSION: u32 = 3;
const QUERY_STORE_TABLES: &[&str] = &[
    QUERY_BY_LOGICAL_ID_TABLE,
    QUERY_BY_REF_TABLE,
    QUERY_BY_SCOPE_PLAN_TABLE,
    QUERY_COUNTS_TABLE,
    DESIRED_BY_REF_TABLE,
    DESIRED_BY_CHOICE_TABLE,
    DESIRED_BY_STREAM_REVISION_TABLE,
    DESIRED_LATEST_TABLE,
    DESIRED_STREAMS_TABLE,
    QUERY_ENGINE_STREAMS_TABLE,
];

impl Projection for QueryFold {
    fn name(&self) -> &'static str {
        QUERY_STORE_PROJECTION
    }
    fn version(&self) -> u32 {
        QUERY_STORE_VERSION
    }
    fn tables(&self) -> &'static [&'static str] {
        QUERY_STORE_TABLES
    }
    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        QueryFold::apply(self, tx, record)
    }
}

impl Projection for QueryStoreProjection {
    fn name(&self) -> &'static str {
        QUERY_STORE_PROJECTION
    }

    fn version(&self) -> u32 {
        // 2: desired-set reservations and commits are validated and indexed; query entries carry
        // the decision event id and envelope.
        // 3: the engine streams table and the retired-query counter; the capacities count live
        // queries and pending desired sets (spec/projections.md §7.5).
        QUERY_STORE_VERSION
    }

    fn tables(&self) -> &'static [&'static str] {
        QUERY_STORE_TABLES
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        QueryFold {
            queries_max: MANAGED_QUERIES_MAX,
        }
        .apply(tx, record)
    }
}

// ------------------------------------------------------------------------------------------------
// The store
// ------------------------------------------------------------------------------------------------

/// The managed query store over a journal. Cheap to share; every operation is one append or one
/// read, so concurrent callers serialize in the journal's group commit.
#[derive(Debug)]
pub struct QueryStore {
    journal: Arc<Journal>,
    projections: Projections,
    /// The live-query bound the early check applies: the fold's.
    queries_max: u64,
}

impl QueryStore {
    /// Attaches the `query.store` projection (rebuilding or catching it up as needed) and returns
    /// the store.
    pub fn open(journal: Arc<Journal>) -> Result<QueryStore, QueryStoreError> {
        Self::attach(journal, Arc::new(QueryStoreProjection), MANAGED_QUERIES_MAX)
    }

    /// [`QueryStore::open`] with a live-query bound of `queries_max` in place of
    /// [`MANAGED_QUERIES_MAX`], so a test crosses the bound with a few queries.
    #[cfg(test)]
    fn open_bounded(
        journal: Arc<Journal>,
        queries_max: u64,
    ) -> Result<QueryStore, QueryStoreError> {
        Self::attach(journal, Arc::new(QueryFold { queries_max }), queries_max)
    }

    fn attach(
        journal: Arc<Journal>,
        projection: Arc<dyn Projection>,
        queries_max: u64,
    ) -> Result<QueryStore, QueryStoreError> {
        // The journal refuses writes only when a record failed authentication at open; the store
        // must not serve (or index) anything on top of it.
        if let Some(refusal) = journal.write_refusal() {
            return Err(corruption(
                "managed query journal authentication failed",
                refusal,
            ));
        }
        let list: Vec<Arc<dyn Projection>> = vec![projection];
        let projections = Projections::attach(&journal, list).map_err(|e| match e {
            FrameworkError::Journal(j) => QueryStoreError::Unavailable {
                message: "managed query store could not be opened",
                detail: j.to_string(),
            },
            other => framework_error(other),
        })?;
        Ok(QueryStore {
            journal,
            projections,
            queries_max,
        })
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The attached projection, for `digest`, `check` and `rebuild` by [`QUERY_STORE_PROJECTION`].
    pub fn projections(&self) -> &Projections {
        &self.projections
    }

    /// `query_ref` of canonical registration bytes on this installation.
    fn query_ref_of(&self, registration: &[u8]) -> String {
        let digest = self.journal.keyed_digest(QUERY_REF_DOMAIN, registration);
        format!("{QUERY_REF_PREFIX}{}", hex(&digest))
    }

    /// Registers a logical query (spec/projections.md §7.6). Validation happens before any write. A
    /// new logical id gets an unplanned record; an exact retry returns the stored record unchanged.
    pub fn register(
        &self,
        logical_query_id: &str,
        session_started: &EngineEvent,
        decision_event: &EngineEvent,
        artifact_manifest_digest: &str,
        planning_environment_digest: &str,
    ) -> Result<QueryRecord, QueryStoreError> {
        let append = self.registration_append(
            logical_query_id,
            session_started,
            decision_event,
            artifact_manifest_digest,
            planning_environment_digest,
        )?;
        if let Some(existing) = self.registered(&append)? {
            return Ok(existing);
        }
        let result = self.journal.append(append.clone()).map(drop);
        self.registration_outcome(&append, result)
    }

    /// The registration record of a logical query as a journal append (`NoStream` on the query
    /// stream, event id = the `query_ref`), validated exactly as [`QueryStore::register`] does,
    /// without appending: for a caller that commits it atomically with other records (the managed
    /// service's session start). Settle the commit with [`QueryStore::registration_outcome`].
    pub fn registration_append(
        &self,
        logical_query_id: &str,
        session_started: &EngineEvent,
        decision_event: &EngineEvent,
        artifact_manifest_digest: &str,
        planning_environment_digest: &str,
    ) -> Result<StreamAppend, QueryStoreError> {
        let registration = validate_registration(
            logical_query_id,
            session_started,
            decision_event,
            artifact_manifest_digest,
            planning_environment_digest,
        )?;
        let occurred_at = registration.occurred_at()?;
        let query_ref = self.query_ref_of(&registration.bytes);
        Ok(StreamAppend::new(
            query_stream(logical_query_id)?,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                query_ref,
                QUERY_REGISTRATION_KIND,
                occurred_at,
                registration.bytes,
            )],
        ))
    }

    /// Decodes a registration append built by [`QueryStore::registration_append`].
    fn registration_of(
        &self,
        append: &StreamAppend,
    ) -> Result<(Registration, [u8; 32]), QueryStoreError> {
        let registration = match append.records.as_slice() {
            [record] if record.kind == QUERY_REGISTRATION_KIND => {
                decode_registration(&record.payload).map_err(invalid)?
            }
            _ => return Err(invalid("the append is not a managed query registration")),
        };
        let logical = parse_sha(&registration.logical_query_id)
            .ok_or_else(|| invalid("logical_query_id must be a lowercase SHA-256 digest"))?;
        Ok((registration, logical))
    }

    /// Where a registration append stands before it is committed: the stored record when this
    /// exact registration is committed, `None` when its logical id is free (after the early
    /// scope-plan and capacity refusals; the projection enforces both again inside the append),
    /// `Conflict` when the logical id is registered with other content.
    pub fn registered(
        &self,
        append: &StreamAppend,
    ) -> Result<Option<QueryRecord>, QueryStoreError> {
        let (registration, logical) = self.registration_of(append)?;
        if let Some(existing) = self.entry(&logical)? {
            return self.existing_for(&existing, &registration).map(Some);
        }
        let scope_plan = scope_plan_key(&registration.decision_event.scope, registration.plan_id());
        if self
            .lookup_logical(QUERY_BY_SCOPE_PLAN_TABLE, &scope_plan)?
            .is_some()
        {
            return Err(CONFLICT_SCOPE_PLAN);
        }
        if self.live_query_count()? >= self.queries_max {
            return Err(CAPACITY);
        }
        Ok(None)
    }

    /// Settles the commit of a registration append (alone or in a larger batch): the stored
    /// record on success, the typed refusal otherwise.
    pub fn registration_outcome(
        &self,
        append: &StreamAppend,
        result: Result<(), AppendError>,
    ) -> Result<QueryRecord, QueryStoreError> {
        let (registration, logical) = self.registration_of(append)?;
        match result {
            Ok(()) => self.load(&self.query_ref_of(&registration.bytes)),
            // Another registration of this logical id won the race: decide against it.
            Err(AppendError::WrongRevision { .. }) => match self.entry(&logical)? {
                Some(existing) => self.existing_for(&existing, &registration),
                None => Err(corruption(
                    "managed query index is inconsistent",
                    "a registered query stream has no index entry",
                )),
            },
            Err(AppendError::Conflict { .. }) => Err(QueryStoreError::Conflict {
                message: "derived managed query reference collided",
            }),
            Err(e) => Err(append_error(e)),
        }
    }

    /// The stored record of `existing` if its registration is byte-identical to `registration`.
    fn existing_for(
        &self,
        existing: &QueryEntry,
        registration: &Registration,
    ) -> Result<QueryRecord, QueryStoreError> {
        let stored = self.load_entry(existing)?;
        let same = stored.query_ref == self.query_ref_of(&registration.bytes)
            && Sha256::digest(&registration.bytes).as_slice() == existing.registration_digest;
        if same {
            Ok(stored)
        } else {
            Err(CONFLICT_CONTENT)
        }
    }

    /// Records the completion binding of a registered query (spec/projections.md §7.6). Idempotent
    /// for the same binding; a different binding is a conflict.
    pub fn mark_planned(
        &self,
        query_ref: &str,
        plan_id: &str,
        decision_digest: &str,
        journal_revision: u64,
        journal_record_digest: &str,
    ) -> Result<QueryRecord, QueryStoreError> {
        let append = self.planned_append(
            query_ref,
            plan_id,
            decision_digest,
            journal_revision,
            journal_record_digest,
        )?;
        // The same binding already stored: nothing to write (not even an idempotent replay).
        let record = self.load(query_ref)?;
        if record.planned.is_some() {
            return Ok(record);
        }
        let result = self.journal.append(append.clone()).map(drop);
        self.planned_outcome(query_ref, &append, result)
    }

    /// The completion binding of a registered query as a journal append (`Exact(1)` on its query
    /// stream, event id `query_ref` + `:planned`), validated exactly as
    /// [`QueryStore::mark_planned`] does, without appending: for a caller that commits it
    /// atomically with the planning event it binds. The revision and record digest are those the
    /// planning event's engine record has (the engine knows both before its append,
    /// `Engine::process_with`). The same binding already stored yields the identical append (the
    /// journal replays it as a no-op); another binding is `Conflict`. Settle the commit with
    /// [`QueryStore::planned_outcome`].
    pub fn planned_append(
        &self,
        query_ref: &str,
        plan_id: &str,
        decision_digest: &str,
        journal_revision: u64,
        journal_record_digest: &str,
    ) -> Result<StreamAppend, QueryStoreError> {
        check_query_ref(query_ref)?;
        let binding = PlannedBinding {
            plan_id: plan_id.to_owned(),
            decision_digest: decision_digest.to_owned(),
            journal_revision,
            journal_record_digest: journal_record_digest.to_owned(),
        };
        check_binding(&binding)?;
        let record = self.load(query_ref)?;
        if record.decision_event.correlation_id.as_deref() != Some(plan_id) {
            return Err(QueryStoreError::Conflict {
                message: "plan identity does not match the managed decision event",
            });
        }
        if !binding_matches_decision(&record.decision_event, &binding) {
            return Err(QueryStoreError::Conflict {
                message: "journal revision does not match the managed decision event",
            });
        }
        if record.planned.as_ref().is_some_and(|b| *b != binding) {
            return Err(CONFLICT_COMPLETION);
        }
        let occurred_at = UtcMicros::parse(&record.decision_event.occurred_at)
            .map(|t| Timestamp(t.0))
            .map_err(|_| corruption("managed query persisted registration is invalid", ""))?;
        Ok(StreamAppend::new(
            query_stream(&record.logical_query_id)?,
            ExpectedRevision::Exact(1),
            vec![NewRecord::new(
                planned_event_id(query_ref),
                QUERY_PLANNED_KIND,
                occurred_at,
                planned_payload(query_ref, &binding),
            )],
        ))
    }

    /// Settles the commit of a planned append of `query_ref` (alone or in a larger batch): the
    /// stored record on success or when the same binding was stored concurrently, the typed
    /// refusal otherwise.
    pub fn planned_outcome(
        &self,
        query_ref: &str,
        append: &StreamAppend,
        result: Result<(), AppendError>,
    ) -> Result<QueryRecord, QueryStoreError> {
        let binding = match append.records.as_slice() {
            [record] if record.kind == QUERY_PLANNED_KIND => {
                match decode_planned(&record.payload) {
                    Ok((named, binding)) if named == query_ref => binding,
                    _ => return Err(invalid("the append is not this query's planned mark")),
                }
            }
            _ => return Err(invalid("the append is not a managed query planned mark")),
        };
        match result {
            Ok(()) => self.load(query_ref),
            // A concurrent mark won: the same binding is an idempotent success.
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                let now = self.load(query_ref)?;
                if now.planned.as_ref() == Some(&binding) {
                    Ok(now)
                } else {
                    Err(CONFLICT_COMPLETION)
                }
            }
            Err(e) => Err(append_error(e)),
        }
    }

    /// The authenticated record of `query_ref` (spec/projections.md §7.6).
    pub fn load(&self, query_ref: &str) -> Result<QueryRecord, QueryStoreError> {
        check_query_ref(query_ref)?;
        let reference = query_ref
            .strip_prefix(QUERY_REF_PREFIX)
            .and_then(parse_sha)
            .ok_or_else(|| invalid("query_ref must be an opaque managed-query reference"))?;
        let logical = self
            .lookup_logical(QUERY_BY_REF_TABLE, &reference)?
            .ok_or(NOT_FOUND)?;
        let entry = self.entry(&logical)?.ok_or_else(|| {
            corruption(
                "managed query index is inconsistent",
                "a reference names a logical id without an entry",
            )
        })?;
        if !ct_eq(&entry.query_ref, &reference) {
            return Err(corruption(
                "managed query index authentication failed",
                "the index entry names another reference",
            ));
        }
        self.load_entry(&entry)
    }

    /// The planned record whose decision scope equals `scope` exactly and whose plan id is
    /// `plan_id` (spec/projections.md §7.6 `load_by_scope_and_plan`). Unplanned records are not
    /// found.
    pub fn planned_for_scope_plan(
        &self,
        scope: &ScopeRef,
        plan_id: &str,
    ) -> Result<QueryRecord, QueryStoreError> {
        check_scope(scope)?;
        if !is_token(plan_id) {
            return Err(invalid("plan_id must be a bounded canonical token"));
        }
        const NO_PLAN: QueryStoreError = QueryStoreError::NotFound {
            message: "managed query plan record is unavailable",
        };
        let key = scope_plan_key(scope, plan_id);
        let logical = self
            .lookup_logical(QUERY_BY_SCOPE_PLAN_TABLE, &key)?
            .ok_or(NO_PLAN)?;
        let entry = self.entry(&logical)?.ok_or_else(|| {
            corruption(
                "managed query index is inconsistent",
                "a scope-plan key names a logical id without an entry",
            )
        })?;
        let record = self.load_entry(&entry)?;
        if record.decision_event.scope != *scope
            || record.decision_event.correlation_id.as_deref() != Some(plan_id)
        {
            return Err(corruption(
                "managed query index authentication failed",
                "a scope-plan key names a query of another scope or plan",
            ));
        }
        if !record.is_planned() {
            return Err(NO_PLAN);
        }
        Ok(record)
    }

    /// Number of registered managed queries, live or retired.
    pub fn query_count(&self) -> Result<u64, QueryStoreError> {
        self.count(COUNT_QUERIES_KEY)
    }

    /// Number of live managed queries (registered, engine session not ended): the count
    /// [`MANAGED_QUERIES_MAX`] bounds (spec/projections.md §7.5).
    pub fn live_query_count(&self) -> Result<u64, QueryStoreError> {
        let registered = self.count(COUNT_QUERIES_KEY)?;
        registered
            .checked_sub(self.count(COUNT_QUERIES_RETIRED_KEY)?)
            .ok_or_else(|| {
                corruption(
                    "managed query row count is invalid",
                    "more queries are retired than registered",
                )
            })
    }

    // ----- reads -----

    fn entry(&self, logical: &[u8; 32]) -> Result<Option<QueryEntry>, QueryStoreError> {
        self.journal
            .projection_get(QUERY_BY_LOGICAL_ID_TABLE, logical, |v| {
                v.map(archive::from_bytes::<QueryEntry>).transpose()
            })
            .map_err(unavailable)?
            .map_err(|e| corruption("managed query index is unreadable", e.to_string()))
    }

    fn lookup_logical(
        &self,
        table: &'static str,
        key: &[u8; 32],
    ) -> Result<Option<[u8; 32]>, QueryStoreError> {
        self.journal
            .projection_get(table, key, |v| v.map(<[u8; 32]>::try_from))
            .map_err(unavailable)?
            .transpose()
            .map_err(|_| {
                corruption(
                    "managed query index is unreadable",
                    format!("{table} holds a value that is not 32 bytes"),
                )
            })
    }

    fn count(&self, key: &[u8]) -> Result<u64, QueryStoreError> {
        let bytes = self
            .journal
            .projection_get(QUERY_COUNTS_TABLE, key, |v| v.map(<[u8]>::to_vec))
            .map_err(unavailable)?;
        match bytes {
            None => Ok(0),
            Some(b) => <[u8; 8]>::try_from(b.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    corruption(
                        "managed query row count is invalid",
                        "a counter is not 8 bytes",
                    )
                }),
        }
    }

    /// Reads the query's records from the journal (authenticated there: digest, MAC, chain),
    /// re-validates them, re-derives the reference and compares the index entry with them.
    /// Revisions 1 and 2 only: the desired sets that follow are read by their own lookups.
    fn load_entry(&self, entry: &QueryEntry) -> Result<QueryRecord, QueryStoreError> {
        let stream = StreamId::from_bytes(entry.stream);
        let mut records: Vec<Record> = Vec::with_capacity(2);
        self.journal
            .visit_stream(&stream, 1, 2, |view| {
                records.push(view.to_record());
                ControlFlow::Continue(())
            })
            .map_err(read_error)?;
        let (registration_record, planned_record) = match records.as_slice() {
            [r] => (r, None),
            [r, p] => (r, Some(p)),
            _ => {
                return Err(corruption(
                    "managed query record is unavailable in the journal",
                    format!("query stream {stream} holds {} records", records.len()),
                ));
            }
        };
        if registration_record.kind != QUERY_REGISTRATION_KIND {
            return Err(corruption(
                "managed query registration storage is invalid",
                "revision 1 is not a registration",
            ));
        }
        let registration = decode_registration(&registration_record.payload)
            .map_err(|m| corruption(m, "stored registration"))?;
        let query_ref = self.query_ref_of(&registration.bytes);
        if !ct_eq(
            query_ref.as_bytes(),
            registration_record.event_id.as_bytes(),
        ) {
            return Err(corruption(
                "managed query reference authentication failed",
                "the stored reference is not this installation's digest of the registration",
            ));
        }
        let planned = match planned_record {
            None => None,
            Some(p) => {
                let (named, binding) = decode_planned(&p.payload)
                    .ok()
                    .filter(|(named, _)| {
                        p.kind == QUERY_PLANNED_KIND && p.event_id == planned_event_id(named)
                    })
                    .ok_or_else(|| corruption("managed query completion binding is invalid", ""))?;
                if !ct_eq(named.as_bytes(), query_ref.as_bytes())
                    || !binding_matches_decision(&registration.decision_event, &binding)
                {
                    return Err(corruption(
                        "managed query completion relationship is invalid",
                        "",
                    ));
                }
                Some((binding, p.position))
            }
        };
        let expected_entry = QueryEntry {
            logical_query_id: parse_sha(&registration.logical_query_id).unwrap_or([0; 32]),
            query_ref: query_ref
                .strip_prefix(QUERY_REF_PREFIX)
                .and_then(parse_sha)
                .unwrap_or([0; 32]),
            stream: *query_stream(&registration.logical_query_id)?.as_bytes(),
            registration_digest: Sha256::digest(&registration.bytes).into(),
            registration_position: registration_record.position,
            scope_plan: scope_plan_key(&registration.decision_event.scope, registration.plan_id()),
            decision_plan_id: registration.plan_id().to_owned(),
            decision_expected_revision: registration.decision_event.expected_revision,
            decision_event_id: registration.decision_event.event_id.clone(),
            decision_envelope: envelope_digest(&registration.decision_event),
            planned: planned.as_ref().map(|(b, position)| PlannedEntry {
                plan_id: b.plan_id.clone(),
                decision_digest: parse_sha(&b.decision_digest).unwrap_or([0; 32]),
                journal_revision: b.journal_revision,
                journal_record_digest: parse_sha(&b.journal_record_digest).unwrap_or([0; 32]),
                position: *position,
            }),
        };
        if expected_entry != *entry {
            return Err(corruption(
                "managed query index authentication failed",
                "the index entry disagrees with its authenticated journal records",
            ));
        }
        Ok(QueryRecord {
            query_ref,
            logical_query_id: registration.logical_query_id,
            session_started: registration.session_started,
            decision_event: registration.decision_event,
            artifact_manifest_digest: registration.artifact_manifest_digest,
            planning_environment_digest: registration.planning_environment_digest,
            planned: planned.map(|(b, _)| b),
        })
    }
}

fn check_query_ref(query_ref: &str) -> Result<(), QueryStoreError> {
    if is_query_ref(query_ref) {
        Ok(())
    } else {
        Err(invalid(
            "query_ref must be an opaque managed-query reference",
        ))
    }
}

fn append_error(e: AppendError) -> QueryStoreError {
    match e {
        AppendError::Hook { code, .. } => match code.and_then(hook_refusal) {
            Some(refusal) => refusal,
            None => corruption("managed query record was refused", e.to_string()),
        },
        AppendError::Input(i) => invalid(i.to_string()),
        AppendError::Read(r) => read_error(r),
        other => unavailable(other),
    }
}

/// The typed error of a projection refusal code, `None` for a code that only says "invalid".
fn hook_refusal(code: &str) -> Option<QueryStoreError> {
    match code {
        codes::QUERY_SCOPE_PLAN_BOUND => Some(CONFLICT_SCOPE_PLAN),
        codes::QUERY_CAPACITY => Some(CAPACITY),
        other => desired::refusal(other),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use ctx_journal::{OpenOptions, files};

    use super::*;
    use ctx_model::sha256_hex;

    pub(super) fn d(label: &str) -> String {
        sha256_hex(&format!("query-store-test:{label}"))
    }

    pub(super) fn open_journal(dir: &Path, key: u8) -> Arc<Journal> {
        Arc::new(Journal::open(dir, &OpenOptions::new().key_source(move || Ok([key; 32]))).unwrap())
    }

    pub(super) fn open(dir: &Path, key: u8) -> QueryStore {
        QueryStore::open(open_journal(dir, key)).unwrap()
    }

    /// A valid registration: session start and initial intent of `session`, bound to `manifest`.
    pub(super) struct Fixture {
        pub(super) logical: String,
        pub(super) started: EngineEvent,
        pub(super) decision: EngineEvent,
        pub(super) manifest: String,
        pub(super) environment: String,
    }

    pub(super) fn fixture(logical: &str, session: &str, plan: &str) -> Fixture {
        let manifest = d("manifest");
        let environment = d("environment");
        let scope = ScopeRef::new(
            "tenant-1",
            "workspace-1",
            "repo-1",
            session,
            "exposure-1",
            "host-1",
            None,
        )
        .unwrap();
        let fill = |e: &mut EngineEvent| {
            e.correlation_id = Some(plan.to_owned());
            e.engine_version = Some("ctx-engine-test".into());
            e.planner_version = Some("ctx-planner-test".into());
            e.policy_version = Some("ctx-policy-test".into());
            e.host_descriptor_digest = Some(d("host"));
            e.catalog_snapshot_digest = Some(environment.clone());
            e.semantic_model_digest = Some(d("model"));
            e.semantic_index_digest = Some(d("index"));
            e.work_signature = Some(d("work"));
            e.random_seed = RandomSeed::Int(7);
        };
        let mut started = EngineEvent::bare(
            &format!("ev-start-{session}"),
            EventKind::SessionStarted,
            scope.clone(),
            0,
            "2026-12-01T10:00:00Z",
        );
        fill(&mut started);
        started.causation_id = Some("host-cause-1".into());
        started.payload = Json::object([("host_level", Json::str(MANAGED_HOST_LEVEL))]);
        started.validate().unwrap();
        let mut decision = EngineEvent::bare(
            &format!("ev-intent-{session}"),
            EventKind::IntentObserved,
            scope,
            1,
            "2026-12-01T10:00:01Z",
        );
        fill(&mut decision);
        decision.causation_id = Some(started.event_id.clone());
        decision.payload = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(d("surrogate"))),
                ("opaque_id", Json::str(format!("manifest-{manifest}"))),
                ("provider_id", Json::str(ARTIFACT_OBSERVATION_PROVIDER)),
            ]),
        )]);
        decision.validate().unwrap();
        Fixture {
            logical: d(logical),
            started,
            decision,
            manifest,
            environment,
        }
    }

    pub(super) fn register(
        store: &QueryStore,
        f: &Fixture,
    ) -> Result<QueryRecord, QueryStoreError> {
        store.register(
            &f.logical,
            &f.started,
            &f.decision,
            &f.manifest,
            &f.environment,
        )
    }

    pub(super) fn mark(
        store: &QueryStore,
        r: &QueryRecord,
        decision: &str,
    ) -> Result<QueryRecord, QueryStoreError> {
        store.mark_planned(r.query_ref(), "plan-1", &d(decision), 2, &d("record"))
    }

    #[test]
    fn register_new_then_exact_retry_returns_the_stored_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let first = register(&store, &f).unwrap();
        assert!(is_query_ref(first.query_ref()), "{first:?}");
        assert!(!first.is_planned());
        assert_eq!(first.logical_query_id(), f.logical);
        assert_eq!(first.decision_event(), &f.decision);
        assert_eq!(first.session_started(), &f.started);
        assert!(format!("{first:?}").contains("registered"));
        let again = register(&store, &f).unwrap();
        assert_eq!(again, first);
        assert_eq!(store.query_count().unwrap(), 1);
        assert_eq!(store.load(first.query_ref()).unwrap(), first);
        // A planned record is returned unchanged by an exact retry as well.
        let planned = mark(&store, &first, "decision").unwrap();
        assert_eq!(register(&store, &f).unwrap(), planned);
    }

    #[test]
    fn register_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        register(&store, &f).unwrap();

        // Same logical id, other content.
        let mut other = fixture("q1", "s1", "plan-1");
        other.decision.payload = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(d("other-surrogate"))),
                (
                    "opaque_id",
                    Json::str(format!("manifest-{}", other.manifest)),
                ),
                ("provider_id", Json::str(ARTIFACT_OBSERVATION_PROVIDER)),
            ]),
        )]);
        let e = register(&store, &other).unwrap_err();
        assert_eq!(e, CONFLICT_CONTENT);
        assert_eq!(
            e.to_string(),
            "logical query identity is already bound to different content"
        );

        // Another logical id claiming the same decision scope and plan.
        let twin = fixture("q2", "s1", "plan-1");
        let e = register(&store, &twin).unwrap_err();
        assert_eq!(
            e.to_string(),
            "scope and plan identity already bind another managed query"
        );
        // Another plan in the same scope, or another scope, is free.
        register(&store, &fixture("q3", "s1", "plan-2")).unwrap();
        register(&store, &fixture("q4", "s2", "plan-1")).unwrap();
        assert_eq!(store.query_count().unwrap(), 3);
        // Nothing was written for the refused registrations.
        assert_eq!(store.journal().head_position().unwrap(), 3);
    }

    #[test]
    fn the_projection_refuses_a_second_scope_plan_inside_the_append() {
        // The early check is bypassed by appending directly: the hook still refuses.
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        register(&store, &fixture("q1", "s1", "plan-1")).unwrap();
        let twin = fixture("q2", "s1", "plan-1");
        let reg = validate_registration(
            &twin.logical,
            &twin.started,
            &twin.decision,
            &twin.manifest,
            &twin.environment,
        )
        .unwrap();
        let err = store
            .journal()
            .append(StreamAppend::new(
                query_stream(&twin.logical).unwrap(),
                ExpectedRevision::NoStream,
                vec![NewRecord::new(
                    store.query_ref_of(&reg.bytes),
                    QUERY_REGISTRATION_KIND,
                    reg.occurred_at().unwrap(),
                    reg.bytes.clone(),
                )],
            ))
            .unwrap_err();
        assert_eq!(append_error(err), CONFLICT_SCOPE_PLAN);
    }

    #[test]
    fn registration_is_validated_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let mut f = fixture("q1", "s1", "plan-1");
        f.started.payload = Json::object([("host_level", Json::str("observing"))]);
        let e = register(&store, &f).unwrap_err();
        assert_eq!(
            e.to_string(),
            "managed query session payload is not the exact managing envelope"
        );
        let mut f = fixture("q1", "s1", "plan-1");
        f.logical = "not-a-digest".into();
        assert_eq!(
            register(&store, &f).unwrap_err().to_string(),
            "logical_query_id must be a lowercase SHA-256 digest"
        );
        let mut f = fixture("q1", "s1", "plan-1");
        f.manifest = d("another-manifest");
        assert_eq!(
            register(&store, &f).unwrap_err().to_string(),
            "managed query observation reference is not artifact-bound"
        );
        let mut f = fixture("q1", "s1", "plan-1");
        f.decision.expected_revision = 2;
        assert_eq!(
            register(&store, &f).unwrap_err().to_string(),
            "managed query decision kind does not match its stream revision"
        );
        let mut f = fixture("q1", "s1", "plan-1");
        f.environment = d("another-environment");
        assert_eq!(
            register(&store, &f).unwrap_err().to_string(),
            "managed query planning environment binding is invalid"
        );
        assert_eq!(store.journal().head_position().unwrap(), 0);
    }

    #[test]
    fn mark_planned_is_idempotent_and_refuses_another_binding() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let r = register(&store, &f).unwrap();
        let scope = &f.decision.scope;
        assert_eq!(
            store
                .planned_for_scope_plan(scope, "plan-1")
                .unwrap_err()
                .to_string(),
            "managed query plan record is unavailable"
        );

        let planned = mark(&store, &r, "decision").unwrap();
        assert!(planned.is_planned());
        assert_eq!(planned.plan_id(), Some("plan-1"));
        assert_eq!(planned.decision_digest(), Some(d("decision").as_str()));
        assert_eq!(planned.journal_revision(), Some(2));
        assert_eq!(planned.journal_record_digest(), Some(d("record").as_str()));
        assert!(format!("{planned:?}").contains("planned"));
        assert_eq!(mark(&store, &r, "decision").unwrap(), planned);
        assert_eq!(store.journal().head_position().unwrap(), 2);

        assert_eq!(
            mark(&store, &r, "other-decision").unwrap_err(),
            CONFLICT_COMPLETION
        );
        assert_eq!(
            store
                .mark_planned(r.query_ref(), "plan-2", &d("decision"), 2, &d("record"))
                .unwrap_err()
                .to_string(),
            "plan identity does not match the managed decision event"
        );
        assert_eq!(
            store
                .mark_planned(r.query_ref(), "plan-1", &d("decision"), 3, &d("record"))
                .unwrap_err()
                .to_string(),
            "journal revision does not match the managed decision event"
        );
        assert_eq!(
            store
                .mark_planned(r.query_ref(), "plan-1", &d("decision"), 1, &d("record"))
                .unwrap_err()
                .to_string(),
            "journal revision must be a bounded integer at least two"
                .replace("journal revision", "journal_revision")
        );
        assert_eq!(store.load(r.query_ref()).unwrap(), planned);
        assert_eq!(
            store.planned_for_scope_plan(scope, "plan-1").unwrap(),
            planned
        );
        let other_scope = fixture("q9", "s9", "plan-1").decision.scope;
        assert!(matches!(
            store.planned_for_scope_plan(&other_scope, "plan-1"),
            Err(QueryStoreError::NotFound { .. })
        ));
    }

    #[test]
    fn query_ref_is_stable_per_installation_and_differs_across_keys() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let c = tempfile::tempdir().unwrap();
        let f = fixture("q1", "s1", "plan-1");
        let ref_a = {
            let store = open(a.path(), 1);
            register(&store, &f).unwrap().query_ref().to_owned()
        };
        // Reopened (the journal is closed in between): the same reference.
        let store_a = open(a.path(), 99);
        assert_eq!(register(&store_a, &f).unwrap().query_ref(), ref_a);
        assert_eq!(store_a.load(&ref_a).unwrap().query_ref(), ref_a);
        // Another installation key: another, unlinkable reference.
        let store_b = open(b.path(), 2);
        let ref_b = register(&store_b, &f).unwrap().query_ref().to_owned();
        assert_ne!(ref_a, ref_b);
        assert_eq!(store_b.load(&ref_a).unwrap_err(), NOT_FOUND);
        // The reference is a function of key and content only.
        let store_c = open(c.path(), 1);
        assert_eq!(register(&store_c, &f).unwrap().query_ref(), ref_a);
    }

    #[test]
    fn load_unknown_or_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let e = store.load(&format!("mqr_{}", "0".repeat(64))).unwrap_err();
        assert_eq!(e.to_string(), "managed query record is unavailable");
        assert!(matches!(e, QueryStoreError::NotFound { .. }));
        for bad in [
            "../../private/queries",
            "mqr_ABC",
            &format!("mqr_{}x", "0".repeat(63)),
        ] {
            assert_eq!(
                store.load(bad).unwrap_err().to_string(),
                "query_ref must be an opaque managed-query reference"
            );
        }
    }

    #[test]
    fn rebuild_gives_the_same_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        for i in 0..5 {
            let r = register(
                &store,
                &fixture(&format!("q{i}"), &format!("s{i}"), "plan-1"),
            )
            .unwrap();
            if i % 2 == 0 {
                mark(&store, &r, "decision").unwrap();
            }
        }
        let projections = store.projections();
        let report = projections.check(QUERY_STORE_PROJECTION).unwrap();
        assert!(report.is_equal(), "{report:?}");
        let before = projections.digest(QUERY_STORE_PROJECTION).unwrap();
        projections.rebuild(QUERY_STORE_PROJECTION).unwrap();
        assert_eq!(projections.digest(QUERY_STORE_PROJECTION).unwrap(), before);
        assert_eq!(store.query_count().unwrap(), 5);
        // A reopen that finds no meta entry rebuilds to the same tables too.
        drop(store);
        let store = open(dir.path(), 1);
        assert_eq!(
            store.projections().digest(QUERY_STORE_PROJECTION).unwrap(),
            before
        );
    }

    #[test]
    fn capacity_is_enforced_with_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        // Pretend the store is full: the counter is what both the early check and the hook read.
        store
            .journal()
            .maintain(|tx| {
                tx.insert(
                    QUERY_COUNTS_TABLE,
                    COUNT_QUERIES_KEY,
                    &MANAGED_QUERIES_MAX.to_le_bytes(),
                )
                .map(|()| ((), true))
                .map_err(HookError::from)
            })
            .unwrap();
        let e = register(&store, &fixture("q1", "s1", "plan-1")).unwrap_err();
        assert_eq!(e, CAPACITY);
        assert_eq!(e.to_string(), QUERY_CAPACITY_MESSAGE);
        // The sentence names the bound it enforces.
        assert!(QUERY_CAPACITY_MESSAGE.contains(&format!(" {MANAGED_QUERIES_MAX} live queries")));
        // Retired queries do not count: with one of them retired there is room again.
        store
            .journal()
            .maintain(|tx| {
                tx.insert(
                    QUERY_COUNTS_TABLE,
                    COUNT_QUERIES_RETIRED_KEY,
                    &1u64.to_le_bytes(),
                )
                .map(|()| ((), true))
                .map_err(HookError::from)
            })
            .unwrap();
        register(&store, &fixture("q1", "s1", "plan-1")).unwrap();
        assert_eq!(store.live_query_count().unwrap(), MANAGED_QUERIES_MAX);
    }

    /// An engine over `journal` that starts and ends the engine sessions of the fixture's
    /// scopes (`ctx_model::testkit::Session` uses the same scope fields).
    struct Sessions {
        engine: crate::engine::Engine,
        open: std::cell::RefCell<std::collections::BTreeMap<String, ctx_model::testkit::Session>>,
    }

    impl Sessions {
        fn new(journal: &Arc<Journal>) -> Sessions {
            let start = ctx_model::testkit::Session::new("clock").now;
            let clock = Arc::new(crate::engine::ManualClock::new(start));
            let engine = crate::engine::Engine::open(
                Arc::clone(journal),
                crate::engine::EngineOptions::new(clock),
            )
            .unwrap();
            Sessions {
                engine,
                open: Default::default(),
            }
        }

        /// Starts the engine session of `session` unless it started already.
        fn start(&self, session: &str) {
            let mut open = self.open.borrow_mut();
            if !open.contains_key(session) {
                let mut s = ctx_model::testkit::Session::new(session);
                let e = s.started(MANAGED_HOST_LEVEL);
                s.revision = self.engine.process(&e, None).unwrap().to_revision;
                open.insert(session.to_owned(), s);
            }
        }

        /// Records `SessionEnded` on the engine stream of `session` (starting it first).
        fn end(&self, session: &str) {
            self.start(session);
            let mut open = self.open.borrow_mut();
            let s = open.get_mut(session).unwrap();
            let e = s.empty(EventKind::SessionEnded);
            s.revision = self.engine.process(&e, None).unwrap().to_revision;
        }
    }

    fn digest_of(store: &QueryStore) -> [u8; 32] {
        store.projections().digest(QUERY_STORE_PROJECTION).unwrap()
    }

    /// Rebuilds the projection from the journal: the tables are byte-equal to the incremental
    /// ones, and the check finds nothing.
    fn assert_rebuild_is_equal(store: &QueryStore) {
        let projections = store.projections();
        let report = projections.check(QUERY_STORE_PROJECTION).unwrap();
        assert!(report.is_equal(), "{report:?}");
        let before = digest_of(store);
        projections.rebuild(QUERY_STORE_PROJECTION).unwrap();
        assert_eq!(digest_of(store), before);
    }

    #[test]
    fn ended_sessions_retire_their_queries_so_registration_keeps_working() {
        const BOUND: u64 = 3;
        let dir = tempfile::tempdir().unwrap();
        let journal = open_journal(dir.path(), 1);
        let store = QueryStore::open_bounded(Arc::clone(&journal), BOUND).unwrap();
        let sessions = Sessions::new(&journal);
        let mut first: Option<(Fixture, QueryRecord)> = None;
        // Four bounds' worth of queries, one bound per round, each round's sessions ended.
        for round in 0..4 {
            let names: Vec<String> = (0..BOUND).map(|i| format!("s{round}-{i}")).collect();
            for (i, session) in names.iter().enumerate() {
                sessions.start(session);
                let f = fixture(&format!("q{round}-{i}"), session, "plan-1");
                let r = register(&store, &f).unwrap();
                if first.is_none() {
                    first = Some((f, r));
                }
            }
            assert_eq!(store.live_query_count().unwrap(), BOUND);
            // The bound holds for live queries: one more is refused, inside the append as well.
            let extra = fixture(&format!("q{round}-extra"), &format!("s{round}-x"), "plan-1");
            assert_eq!(register(&store, &extra).unwrap_err(), CAPACITY);
            let head = journal.head_position().unwrap();
            let append = registration_append_of(&store, &extra);
            assert_eq!(append_error(journal.append(append).unwrap_err()), CAPACITY);
            assert_eq!(journal.head_position().unwrap(), head);
            for session in &names {
                sessions.end(session);
            }
            assert_eq!(store.live_query_count().unwrap(), 0);
            assert_eq!(store.query_count().unwrap(), BOUND * (round + 1));
        }
        // Fill the bound again, then retry a retired registration: it is the stored record,
        // unchanged, even at capacity; other content under its logical id, or another query on
        // its scope and plan, still conflicts.
        for i in 0..BOUND {
            let session = format!("s9-{i}");
            sessions.start(&session);
            register(&store, &fixture(&format!("q9-{i}"), &session, "plan-1")).unwrap();
        }
        let (f, stored) = first.unwrap();
        let head = journal.head_position().unwrap();
        assert_eq!(register(&store, &f).unwrap(), stored);
        assert_eq!(store.load(stored.query_ref()).unwrap(), stored);
        let mut other = fixture("q0-0", "s0-0", "plan-1");
        other.decision.random_seed = RandomSeed::Int(8);
        other.started.random_seed = RandomSeed::Int(8);
        assert_eq!(register(&store, &other).unwrap_err(), CONFLICT_CONTENT);
        let twin = fixture("q-twin", "s0-0", "plan-1");
        assert_eq!(register(&store, &twin).unwrap_err(), CONFLICT_SCOPE_PLAN);
        assert_eq!(journal.head_position().unwrap(), head);
        assert_rebuild_is_equal(&store);
        assert_eq!(store.live_query_count().unwrap(), BOUND);
        // A reopen with the same fold finds the same tables.
        let before = digest_of(&store);
        drop(store);
        let store = QueryStore::open_bounded(Arc::clone(&journal), BOUND).unwrap();
        assert_eq!(digest_of(&store), before);
    }

    /// The registration append of a fixture, built as the store builds it, for a direct append
    /// that skips the store's early checks.
    fn registration_append_of(store: &QueryStore, f: &Fixture) -> StreamAppend {
        store
            .registration_append(
                &f.logical,
                &f.started,
                &f.decision,
                &f.manifest,
                &f.environment,
            )
            .unwrap()
    }

    #[test]
    fn one_session_end_retires_every_query_of_its_stream_once() {
        let dir = tempfile::tempdir().unwrap();
        let journal = open_journal(dir.path(), 1);
        let store = QueryStore::open(Arc::clone(&journal)).unwrap();
        let sessions = Sessions::new(&journal);
        sessions.start("s1");
        // Two plans on one engine stream, and one query on another stream.
        register(&store, &fixture("q1", "s1", "plan-1")).unwrap();
        register(&store, &fixture("q2", "s1", "plan-2")).unwrap();
        register(&store, &fixture("q3", "s2", "plan-1")).unwrap();
        assert_eq!(store.live_query_count().unwrap(), 3);
        let stream = *crate::engine::engine_stream(&fixture("q1", "s1", "p").decision.scope)
            .unwrap()
            .as_bytes();
        let entry = |store: &QueryStore| {
            store
                .journal()
                .projection_get(QUERY_ENGINE_STREAMS_TABLE, &stream, |v| {
                    v.and_then(EngineStreamEntry::decode)
                })
                .unwrap()
        };
        assert_eq!(
            entry(&store),
            Some(EngineStreamEntry {
                live_queries: 2,
                ended_position: 0
            })
        );
        sessions.end("s1");
        assert_eq!(store.live_query_count().unwrap(), 1);
        let ended = entry(&store).unwrap();
        assert_eq!(ended.live_queries, 0);
        assert!(ended.is_ended());
        // Nothing is retired twice: a query registered on the ended stream is retired at once
        // and leaves the entry as it was (Q3).
        register(&store, &fixture("q4", "s1", "plan-3")).unwrap();
        assert_eq!(store.query_count().unwrap(), 4);
        assert_eq!(store.live_query_count().unwrap(), 1);
        assert_eq!(entry(&store), Some(ended));
        sessions.end("s2");
        assert_eq!(store.live_query_count().unwrap(), 0);
        // An engine stream without queries gets no entry.
        sessions.end("s-unrelated");
        let unrelated =
            *crate::engine::engine_stream(&fixture("q", "s-unrelated", "p").decision.scope)
                .unwrap()
                .as_bytes();
        assert!(
            !store
                .journal()
                .projection_get(QUERY_ENGINE_STREAMS_TABLE, &unrelated, |v| v.is_some())
                .unwrap()
        );
        assert_rebuild_is_equal(&store);
        assert_eq!(store.live_query_count().unwrap(), 0);
        assert_eq!(store.query_count().unwrap(), 4);
    }

    /// A deterministic walk of registrations and session ends over a few engine streams, checked
    /// after every step against a model of spec/projections.md §7.5: an end retires every live
    /// query of its stream once, a query registered after its stream's end (as the store saw it)
    /// is retired at once, the bound refuses exactly when the model is full, and a rebuild
    /// reproduces the tables.
    #[test]
    fn live_count_follows_a_model_through_random_registrations_and_ends() {
        const BOUND: u64 = 4;
        let dir = tempfile::tempdir().unwrap();
        let journal = open_journal(dir.path(), 1);
        let store = QueryStore::open_bounded(Arc::clone(&journal), BOUND).unwrap();
        let sessions = Sessions::new(&journal);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        // Per session with a query: its live queries and whether the store saw its end. Sessions
        // are used a few at a time, so some end with several queries, some register after their
        // end, and some end before any query (Q4: the store does not track those).
        let mut live: std::collections::BTreeMap<u64, (u64, bool)> = Default::default();
        let mut ended = std::collections::BTreeSet::new();
        let (mut registered, mut refused) = (0u64, 0u64);
        for step in 0..160u64 {
            // Registrations go to a moving window of sessions, ends to any session so far.
            let ending = next(3) == 0;
            let session = if ending {
                next(step / 8 + 5)
            } else {
                next(5) + step / 8
            };
            let name = format!("w{session}");
            if ending {
                if ended.insert(session) {
                    sessions.end(&name);
                    if let Some(state) = live.get_mut(&session) {
                        *state = (0, true);
                    }
                }
            } else {
                sessions.start(&name);
                let f = fixture(&format!("r{step}"), &name, &format!("plan-{step}"));
                let total: u64 = live.values().map(|(n, _)| n).sum();
                match register(&store, &f) {
                    Ok(_) => {
                        assert!(total < BOUND, "step {step}: admitted beyond the bound");
                        registered += 1;
                        let state = live.entry(session).or_default();
                        if !state.1 {
                            state.0 += 1;
                        }
                    }
                    Err(e) => {
                        assert_eq!(e, CAPACITY, "step {step}");
                        assert_eq!(total, BOUND, "step {step}: refused below the bound");
                        refused += 1;
                    }
                }
            }
            let total: u64 = live.values().map(|(n, _)| n).sum();
            assert_eq!(store.live_query_count().unwrap(), total, "step {step}");
            assert_eq!(store.query_count().unwrap(), registered, "step {step}");
        }
        assert!(
            registered >= 3 * BOUND,
            "the walk crossed the bound: {registered}"
        );
        assert!(refused > 0, "the walk reached the bound");
        assert_rebuild_is_equal(&store);
    }

    /// Flips one byte of every copy of `needle` in the closed journal's redb file: a raw edit of
    /// the stored record, as an attacker with file access would make.
    pub(super) fn tamper_file(dir: &Path, needle: &[u8], replacement: &[u8]) -> usize {
        let path = dir.join(files::DATABASE_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let mut hits = 0;
        let mut i = 0;
        while i + needle.len() <= bytes.len() {
            if &bytes[i..i + needle.len()] == needle {
                bytes[i..i + needle.len()].copy_from_slice(replacement);
                hits += 1;
                i += needle.len();
            } else {
                i += 1;
            }
        }
        std::fs::write(&path, bytes).unwrap();
        hits
    }

    #[test]
    fn a_record_altered_on_disk_is_refused() {
        // Payloads stored as is, so the edit below finds its text (spec/journal.md §4, R7).
        let _as_is = ctx_journal::StorePayloadsAsIs::new();
        let dir = tempfile::tempdir().unwrap();
        let query_ref = {
            let store = open(dir.path(), 1);
            let r = register(&store, &fixture("q1", "s1", "plan-1")).unwrap();
            mark(&store, &r, "decision").unwrap();
            r.query_ref().to_owned()
        };
        // Substitute the stored decision digest of the planned mark (same length).
        let hits = tamper_file(
            dir.path(),
            d("decision").as_bytes(),
            d("substituted").as_bytes(),
        );
        assert!(hits >= 1);
        // The journal finds the altered record when it opens (it is in the unmerged tail it
        // re-reads) and refuses writes; the store refuses to open on top of it.
        let journal = open_journal(dir.path(), 1);
        let e = QueryStore::open(Arc::clone(&journal)).unwrap_err();
        assert!(matches!(e, QueryStoreError::Corruption { .. }), "{e:?}");
        assert!(e.to_string().contains("authentication failed"), "{e}");
        // Reading the query's stream is refused too: the altered record is never believed.
        let stream = query_stream(&d("q1")).unwrap();
        let e = read_error(journal.read_stream(&stream, 1, 2).unwrap_err());
        assert_eq!(e.to_string(), "managed query record authentication failed");
        assert!(is_query_ref(&query_ref));
    }

    #[test]
    fn an_altered_index_entry_is_refused_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let r = register(&store, &f).unwrap();
        mark(&store, &r, "decision").unwrap();
        let logical = parse_sha(&f.logical).unwrap();
        let mut entry = store.entry(&logical).unwrap().unwrap();
        entry.planned.as_mut().unwrap().decision_digest = [9; 32];
        let bytes = archive::to_bytes(&entry).unwrap();
        store
            .journal()
            .maintain(|tx| {
                tx.insert(QUERY_BY_LOGICAL_ID_TABLE, &logical, &bytes)
                    .map(|()| ((), true))
                    .map_err(HookError::from)
            })
            .unwrap();
        let e = store.load(r.query_ref()).unwrap_err();
        assert_eq!(e.to_string(), "managed query index authentication failed");
        // The check notices that the stored tables are not the fold of the journal.
        assert!(
            !store
                .projections()
                .check(QUERY_STORE_PROJECTION)
                .unwrap()
                .is_equal()
        );
        store.projections().rebuild(QUERY_STORE_PROJECTION).unwrap();
        assert_eq!(
            store.load(r.query_ref()).unwrap().decision_digest(),
            Some(d("decision").as_str())
        );
    }
}
