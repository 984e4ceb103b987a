//! Desired sets of managed queries (spec/projections.md §7.6, §7.1): the
//! reservation and commit records on the query's own stream, their validation, their fold into the
//! `query.store` projection and the store's operations on them. Specified in
//! `spec/projections.md`, section "query.store".
//!
//! After the planned mark (revision 2), a query stream holds a strict chain of pairs: reservation
//! (revision 3, 5, …; appended with `Exact(head)`), then its commit (the next revision). A
//! reservation can therefore only follow a committed one, and the per-query causation chain is the
//! stream order. What spans streams is decided by the projection inside the append transaction,
//! keyed by the **engine stream** of the event's scope (tenant, workspace, repository, session:
//! host- and exposure-neutral): at most one pending reservation per engine stream, one desired set
//! per (engine stream, expected revision), expected revisions above the stream's latest committed
//! one, and the capacity bound.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use ctx_journal::{
    AppendError, ExpectedRevision, HookError, HookTxn, Journal, NewRecord, ReadError, Record,
    RecordView, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{
    CapabilityKind, EngineEvent, EventKind, Json, ScopeRef, UtcMicros, has_exact_keys, hex,
    is_capability_identity, is_sha, is_token, parse_sha,
};
use sha2::{Digest as _, Sha256};

use crate::archive;
use crate::engine::engine_stream;
use crate::streams::{DESIRED_COMMITTED_KIND, DESIRED_RESERVATION_KIND};

use super::{
    COUNT_DESIRED_COMMITTED_KEY, COUNT_DESIRED_SETS_KEY, DESIRED_BY_CHOICE_TABLE,
    DESIRED_BY_REF_TABLE, DESIRED_BY_STREAM_REVISION_TABLE, DESIRED_CAPABILITIES_MAX,
    DESIRED_CAPABILITY_IDS_JSON_MAX_BYTES, DESIRED_COMMITTED_EVENT_SUFFIX,
    DESIRED_COMMITTED_SCHEMA, DESIRED_EVENT_JSON_MAX_BYTES, DESIRED_LATEST_TABLE,
    DESIRED_REGISTRATION_SCHEMA, DESIRED_SET_REF_DOMAIN, DESIRED_SET_REF_PREFIX, DESIRED_SETS_MAX,
    DESIRED_STREAMS_TABLE, DesiredCommit, DesiredSetRecord, QUERY_BY_REF_TABLE, QUERY_COUNTS_TABLE,
    QUERY_REF_PREFIX, QueryEntry, QueryRecord, QueryStore, QueryStoreError, REVISION_BOUND,
    append_error, check_digest, check_event_tokens, check_query_ref, check_scope, codes,
    corruption, ct_eq, entry_in, envelope_digest, invalid, parse_canonical, query_stream, refuse,
    scope_plan_key, unavailable,
};

/// Largest reservation payload: the event, the ids and the fixed fields with room to spare.
const RESERVATION_MAX_BYTES: usize =
    DESIRED_EVENT_JSON_MAX_BYTES + DESIRED_CAPABILITY_IDS_JSON_MAX_BYTES + 2048;
/// How often a reservation that lost a race for its query stream's head is re-decided.
const RESERVE_ATTEMPTS: usize = 3;

const DESIRED_NOT_FOUND: QueryStoreError = QueryStoreError::NotFound {
    message: "managed desired-set record is unavailable",
};
const PENDING_NOT_FOUND: QueryStoreError = QueryStoreError::NotFound {
    message: "managed desired-set pending record is unavailable",
};
const PARENT_NOT_FOUND: QueryStoreError = QueryStoreError::NotFound {
    message: "desired-set parent query is unavailable",
};
const PARENT_NOT_PLANNED: QueryStoreError = QueryStoreError::Conflict {
    message: "desired-set parent query is not planned",
};
const CONFLICT_CHOICE: QueryStoreError = QueryStoreError::Conflict {
    message: "desired-set choice identity is already bound to different content",
};
const CONFLICT_COMMIT: QueryStoreError = QueryStoreError::Conflict {
    message: "desired-set commit is already bound differently",
};
const CONFLICT_PENDING: QueryStoreError = QueryStoreError::Conflict {
    message: "desired-set stream has a pending reservation",
};
const INDEX_AUTHENTICATION: &str = "managed desired-set index authentication failed";

/// The sentence of the desired-set capacity refusal: it names the bound, what counts toward it
/// and what frees it, since it reaches the person through the hooks (spec/projections.md §7.5);
/// [`DESIRED_SETS_MAX`] is spelled out (a test checks that the two agree).
pub const DESIRED_CAPACITY_MESSAGE: &str = "managed desired-set store reached its bounded \
     capacity: 16384 desired sets reserved and not committed, so ctx changes no skills; an \
     interrupted prompt finishes its reservation when it is sent again in its session, then send \
     this prompt again";

/// The message of a desired-set refusal code of the projection.
fn refusal_message(code: &str) -> Option<&'static str> {
    Some(match code {
        codes::DESIRED_CHOICE_BOUND => {
            "desired-set choice identity is already bound to different content"
        }
        codes::DESIRED_REVISION_RESERVED => "desired-set stream revision is already reserved",
        codes::DESIRED_STREAM_PENDING => "desired-set stream has a pending reservation",
        codes::DESIRED_CAUSATION => {
            "desired-set event causation does not follow the committed stream"
        }
        codes::DESIRED_REVISION_STALE => {
            "desired-set revision does not follow the latest committed reservation"
        }
        codes::DESIRED_CAPACITY => DESIRED_CAPACITY_MESSAGE,
        _ => return None,
    })
}

/// The typed error of a desired-set refusal code (`AppendError::Hook`), `None` for other codes.
pub(super) fn refusal(code: &str) -> Option<QueryStoreError> {
    let message = refusal_message(code)?;
    Some(if code == codes::DESIRED_CAPACITY {
        QueryStoreError::CapacityExceeded { message }
    } else {
        QueryStoreError::Conflict { message }
    })
}

// ------------------------------------------------------------------------------------------------
// Names and index entries
// ------------------------------------------------------------------------------------------------

/// `mds_` + 64 lowercase hex.
pub fn is_desired_set_ref(s: &str) -> bool {
    s.strip_prefix(DESIRED_SET_REF_PREFIX).is_some_and(is_sha)
}

fn parse_desired_ref(s: &str) -> Option<[u8; 32]> {
    s.strip_prefix(DESIRED_SET_REF_PREFIX).and_then(parse_sha)
}

fn parse_query_ref(s: &str) -> Option<[u8; 32]> {
    s.strip_prefix(QUERY_REF_PREFIX).and_then(parse_sha)
}

fn committed_event_id(desired_set_ref: &str) -> String {
    format!("{desired_set_ref}{DESIRED_COMMITTED_EVENT_SUFFIX}")
}

/// Key of [`DESIRED_BY_CHOICE_TABLE`]: the 32 bytes of `query_ref` ‖ the 32 bytes of the logical
/// choice id.
pub fn desired_choice_key(query_ref: &[u8; 32], logical_choice_id: &[u8; 32]) -> [u8; 64] {
    let mut key = [0u8; 64];
    key[..32].copy_from_slice(query_ref);
    key[32..].copy_from_slice(logical_choice_id);
    key
}

/// Key of [`DESIRED_BY_STREAM_REVISION_TABLE`]: engine stream id ‖ expected revision (u64 BE, so
/// a stream's entries are in revision order).
pub fn desired_stream_revision_key(engine_stream: &[u8; 32], expected_revision: u64) -> [u8; 40] {
    let mut key = [0u8; 40];
    key[..32].copy_from_slice(engine_stream);
    key[32..].copy_from_slice(&expected_revision.to_be_bytes());
    key
}

/// The index entry of one desired set.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct DesiredEntry {
    /// The 32 bytes behind `desired_set_ref` (the reservation's event id).
    pub desired_set_ref: [u8; 32],
    /// The 32 bytes behind the parent's `query_ref`.
    pub query_ref: [u8; 32],
    pub logical_choice_id: [u8; 32],
    /// The query stream both records are on.
    pub stream: [u8; 32],
    /// The engine stream of the event's scope: the stream identity digest.
    pub engine_stream: [u8; 32],
    pub expected_revision: u64,
    pub event_id: String,
    /// The event's `occurred_at` (µs since the epoch), which both records carry.
    pub occurred_at: i64,
    /// SHA-256 of the reservation payload (its canonical bytes).
    pub payload_digest: [u8; 32],
    /// Query-stream revision of the reservation (odd, at least 3); the commit is the next one.
    pub revision: u64,
    pub position: u64,
    pub committed: Option<DesiredCommitEntry>,
}

/// The commit binding as indexed.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct DesiredCommitEntry {
    pub journal_revision: u64,
    pub journal_record_digest: [u8; 32],
    pub transition_digest: [u8; 32],
    pub position: u64,
}

/// The desired-set state of one engine stream.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct DesiredStreamEntry {
    /// The reservation not yet committed, if any (at most one per stream).
    pub pending: Option<[u8; 32]>,
    /// The highest expected revision of a committed desired set on the stream.
    pub highest_committed: Option<u64>,
}

// ------------------------------------------------------------------------------------------------
// Validation (spec/projections.md §7.6 desired registration)
// ------------------------------------------------------------------------------------------------

/// What a desired set must agree with in its planned parent query, from the authenticated record
/// (store) or from its index entry (projection).
struct DesiredParent {
    query_ref: String,
    plan_id: String,
    decision_digest: String,
    /// The planned decision's engine revision: the lowest expected revision a desired event may
    /// carry.
    planned_revision: u64,
    /// [`scope_plan_key`] of the decision scope and plan id.
    scope_plan: [u8; 32],
    /// [`envelope_digest`] of the decision event.
    envelope: [u8; 32],
    decision_event_id: String,
}

impl DesiredParent {
    fn of_record(r: &QueryRecord) -> Option<DesiredParent> {
        let planned = r.planned.as_ref()?;
        Some(DesiredParent {
            query_ref: r.query_ref.clone(),
            plan_id: planned.plan_id.clone(),
            decision_digest: planned.decision_digest.clone(),
            planned_revision: planned.journal_revision,
            scope_plan: scope_plan_key(&r.decision_event.scope, &planned.plan_id),
            envelope: envelope_digest(&r.decision_event),
            decision_event_id: r.decision_event.event_id.clone(),
        })
    }

    fn of_entry(e: &QueryEntry) -> Option<DesiredParent> {
        let planned = e.planned.as_ref()?;
        Some(DesiredParent {
            query_ref: format!("{QUERY_REF_PREFIX}{}", hex(&e.query_ref)),
            plan_id: planned.plan_id.clone(),
            decision_digest: hex(&planned.decision_digest),
            planned_revision: planned.journal_revision,
            // The planned mark's plan id is the decision's (the projection refuses others), so
            // this is the key of (decision scope, plan id).
            scope_plan: e.scope_plan,
            envelope: e.decision_envelope,
            decision_event_id: e.decision_event_id.clone(),
        })
    }
}

/// A validated desired registration and its canonical bytes (the reservation payload).
struct DesiredRegistration {
    query_ref: String,
    logical_choice_id: String,
    capability_ids: Vec<String>,
    plan_id: String,
    decision_digest: String,
    /// The engine stream of the event's scope.
    engine_stream: StreamId,
    event: EngineEvent,
    bytes: Vec<u8>,
}

impl DesiredRegistration {
    fn stream_identity_digest(&self) -> String {
        hex(self.engine_stream.as_bytes())
    }

    fn occurred_at(&self) -> Result<Timestamp, QueryStoreError> {
        UtcMicros::parse(&self.event.occurred_at)
            .map(|t| Timestamp(t.0))
            .map_err(|_| invalid("desired-set event occurred_at must be a UTC timestamp"))
    }
}

/// spec/projections.md §7.6 of the choice and the ids.
fn check_choice_and_ids(logical_choice_id: &str, ids: &[String]) -> Result<(), QueryStoreError> {
    check_digest("logical_choice_id", logical_choice_id)?;
    if ids.len() > DESIRED_CAPABILITIES_MAX {
        return Err(invalid(
            "capability_ids cannot contain more than five choices",
        ));
    }
    if !ids.iter().all(|id| is_token(id)) {
        return Err(invalid(
            "capability_ids must contain canonical capability tokens",
        ));
    }
    if ids.iter().collect::<BTreeSet<_>>().len() != ids.len() {
        return Err(invalid("capability_ids must be unique"));
    }
    Ok(())
}

const DESIRED_PAYLOAD_KEYS: [&str; 3] =
    ["desired_capabilities", "owner_id", "policy_snapshot_digest"];
const DESIRED_ROW_KEYS: [&str; 7] = [
    "actionability",
    "capability_id",
    "install_descriptor_digest",
    "install_plan_digest",
    "kind",
    "lease_id",
    "source_digest",
];

/// The desired event's payload (spec/projections.md §7.6): exact fields, exact rows, and row ids
/// equal to the choice's ids in order.
fn check_desired_payload(event: &EngineEvent, ids: &[String]) -> Result<(), QueryStoreError> {
    const FIELDS: &str = "desired-set event payload fields are invalid";
    let Some(m) = event
        .payload
        .as_obj()
        .filter(|m| has_exact_keys(m, &DESIRED_PAYLOAD_KEYS))
    else {
        return Err(invalid(FIELDS));
    };
    let owner = m.get("owner_id").and_then(Json::as_str);
    let policy = m.get("policy_snapshot_digest").and_then(Json::as_str);
    if !owner.is_some_and(is_token) || !policy.is_some_and(is_sha) {
        return Err(invalid(FIELDS));
    }
    let Some(rows) = m.get("desired_capabilities").and_then(Json::as_arr) else {
        return Err(invalid("desired-set event capabilities must be an array"));
    };
    let mut row_ids = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let row_error = |what: &str| invalid(format!("desired-set capability row {i} {what}"));
        let Some(r) = row
            .as_obj()
            .filter(|r| has_exact_keys(r, &DESIRED_ROW_KEYS))
        else {
            return Err(row_error("fields are invalid"));
        };
        let text = |k: &str| r.get(k).and_then(Json::as_str);
        let Some(kind) = text("kind").filter(|k| is_token(k) && CapabilityKind::parse(k).is_some())
        else {
            return Err(row_error("kind is invalid"));
        };
        let Some(capability_id) = text("capability_id").filter(|c| is_capability_identity(kind, c))
        else {
            return Err(row_error("typed identity is invalid"));
        };
        if !text("lease_id").is_some_and(is_token) {
            return Err(row_error("lease is invalid"));
        }
        if !text("source_digest").is_some_and(is_sha) {
            return Err(row_error("source digest is invalid"));
        }
        let actionability = text("actionability").unwrap_or_default();
        if !matches!(actionability, "load" | "install" | "manual") {
            return Err(row_error("actionability is invalid"));
        }
        let digests = ["install_descriptor_digest", "install_plan_digest"];
        let identity_ok = if actionability == "install" {
            digests.iter().all(|k| text(k).is_some_and(is_sha))
        } else {
            digests.iter().all(|k| r.get(*k).is_some_and(Json::is_null))
        };
        if !identity_ok {
            return Err(row_error("has unexpected install identity"));
        }
        row_ids.push(capability_id);
    }
    if row_ids.len() != ids.len() || row_ids.iter().zip(ids).any(|(a, b)| *a != b.as_str()) {
        return Err(QueryStoreError::Conflict {
            message: "desired-set capability IDs do not match the exact event choice",
        });
    }
    Ok(())
}

/// The desired registration validation of spec/projections.md §7.6, in its order, against a planned
/// parent; builds the canonical registration (the reservation payload).
fn validate_desired(
    parent: &DesiredParent,
    logical_choice_id: &str,
    ids: &[String],
    event: &EngineEvent,
) -> Result<DesiredRegistration, QueryStoreError> {
    check_choice_and_ids(logical_choice_id, ids)?;
    // The event must be what the journal will give back: an exact, validated mapping.
    if EngineEvent::from_json(&event.to_json()).ok().as_ref() != Some(event) {
        return Err(invalid("desired-set event must be an exact EngineEvent"));
    }
    check_scope(&event.scope)?;
    check_event_tokens("desired_set_event", event)?;
    if event.kind != EventKind::ReassessmentRequested {
        return Err(invalid("desired-set event must be ReassessmentRequested"));
    }
    if event.expected_revision < parent.planned_revision
        || event.expected_revision >= REVISION_BOUND
    {
        return Err(invalid(
            "desired-set event revision cannot precede its planned parent",
        ));
    }
    // The parent's key is over (decision scope, plan id): equal keys for the parent's plan id
    // mean equal scopes.
    if scope_plan_key(&event.scope, &parent.plan_id) != parent.scope_plan {
        return Err(QueryStoreError::Conflict {
            message: "desired-set scope does not match its parent query",
        });
    }
    if event.correlation_id.as_deref() != Some(parent.plan_id.as_str()) {
        return Err(QueryStoreError::Conflict {
            message: "desired-set plan does not match its parent query",
        });
    }
    if envelope_digest(event) != parent.envelope {
        return Err(QueryStoreError::Conflict {
            message: "desired-set replay envelope does not match its parent query",
        });
    }
    check_desired_payload(event, ids)?;
    let event_json = event.to_json();
    let event_len = event_json.to_cja().len();
    if event_len == 0 || event_len > DESIRED_EVENT_JSON_MAX_BYTES {
        return Err(invalid(
            "desired-set event exceeds its persistent byte bound",
        ));
    }
    let ids_json = Json::Arr(ids.iter().map(Json::str).collect());
    if ids_json.to_cja().len() > DESIRED_CAPABILITY_IDS_JSON_MAX_BYTES {
        return Err(invalid("capability_ids exceed their persistent byte bound"));
    }
    if !is_sha(&parent.decision_digest) || !is_token(&parent.plan_id) {
        return Err(corruption(
            "planned parent query lacks its decision binding",
            "",
        ));
    }
    let stream = engine_stream(&event.scope).map_err(|e| invalid(e.to_string()))?;
    let bytes = Json::object([
        ("capability_ids", ids_json),
        ("decision_digest", Json::str(&parent.decision_digest)),
        ("event", event_json),
        ("logical_choice_id", Json::str(logical_choice_id)),
        ("plan_id", Json::str(&parent.plan_id)),
        ("query_ref", Json::str(&parent.query_ref)),
        ("schema", Json::str(DESIRED_REGISTRATION_SCHEMA)),
        ("stream_identity_digest", Json::str(hex(stream.as_bytes()))),
    ])
    .to_cja()
    .into_bytes();
    Ok(DesiredRegistration {
        query_ref: parent.query_ref.clone(),
        logical_choice_id: logical_choice_id.to_owned(),
        capability_ids: ids.to_vec(),
        plan_id: parent.plan_id.clone(),
        decision_digest: parent.decision_digest.clone(),
        engine_stream: stream,
        event: event.clone(),
        bytes,
    })
}

const RESERVATION_KEYS: [&str; 8] = [
    "capability_ids",
    "decision_digest",
    "event",
    "logical_choice_id",
    "plan_id",
    "query_ref",
    "schema",
    "stream_identity_digest",
];

/// A reservation payload as stored, decoded but not yet checked against its parent.
struct StoredReservation {
    query_ref: String,
    logical_choice_id: String,
    capability_ids: Vec<String>,
    plan_id: String,
    decision_digest: String,
    stream_identity_digest: String,
    event: EngineEvent,
}

/// Decodes a stored reservation payload (spec/projections.md §7.6 desired-row shape checks).
fn decode_reservation(payload: &[u8]) -> Result<StoredReservation, &'static str> {
    if payload.is_empty() || payload.len() > RESERVATION_MAX_BYTES {
        return Err("desired-set persisted byte lengths are invalid");
    }
    let m = parse_canonical(payload).map_err(|_| "desired-set persisted bytes are invalid")?;
    let exact = has_exact_keys(&m, &RESERVATION_KEYS)
        && m.get("schema").and_then(Json::as_str) == Some(DESIRED_REGISTRATION_SCHEMA);
    if !exact {
        return Err("desired-set persisted registration is invalid");
    }
    let Some(ids) = m.get("capability_ids").and_then(Json::as_arr) else {
        return Err("desired-set capability IDs must be an array");
    };
    let capability_ids = ids
        .iter()
        .map(|id| id.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .ok_or("desired-set capability IDs are invalid")?;
    let event = m
        .get("event")
        .filter(|e| e.as_obj().is_some())
        .and_then(|e| EngineEvent::from_json(e).ok())
        .ok_or("desired-set persisted event is invalid")?;
    let text = |k: &str| m.get(k).and_then(Json::as_str).map(str::to_owned);
    let (
        Some(query_ref),
        Some(logical_choice_id),
        Some(plan_id),
        Some(decision_digest),
        Some(stream_identity_digest),
    ) = (
        text("query_ref"),
        text("logical_choice_id"),
        text("plan_id"),
        text("decision_digest"),
        text("stream_identity_digest"),
    )
    else {
        return Err("desired-set persisted registration is invalid");
    };
    Ok(StoredReservation {
        query_ref,
        logical_choice_id,
        capability_ids,
        plan_id,
        decision_digest,
        stream_identity_digest,
        event,
    })
}

/// Re-validates a decoded reservation against its parent and checks that its redundant fields
/// and its bytes are exactly what the validation derives.
fn check_stored(
    parent: &DesiredParent,
    stored: &StoredReservation,
    payload: &[u8],
) -> Result<DesiredRegistration, &'static str> {
    let registration = validate_desired(
        parent,
        &stored.logical_choice_id,
        &stored.capability_ids,
        &stored.event,
    )
    .map_err(|_| "desired-set persisted registration is invalid")?;
    let redundant = stored.query_ref == registration.query_ref
        && stored.plan_id == registration.plan_id
        && stored.decision_digest == registration.decision_digest
        && stored.stream_identity_digest == registration.stream_identity_digest();
    if !redundant {
        return Err("desired-set redundant binding is invalid");
    }
    if registration.bytes != payload {
        return Err("desired-set persisted bytes are not exact");
    }
    Ok(registration)
}

const COMMIT_KEYS: [&str; 5] = [
    "desired_set_ref",
    "journal_record_digest",
    "journal_revision",
    "schema",
    "transition_digest",
];

/// Shape of a commit binding (spec/projections.md §7.6 `mark_desired_set_committed` input checks).
fn check_commit(c: &DesiredCommit) -> Result<(), QueryStoreError> {
    if c.journal_revision < 1 || c.journal_revision >= REVISION_BOUND {
        return Err(invalid(
            "journal_revision must be a bounded positive integer",
        ));
    }
    check_digest("journal_record_digest", &c.journal_record_digest)?;
    check_digest("transition_digest", &c.transition_digest)
}

fn commit_payload(desired_set_ref: &str, c: &DesiredCommit) -> Vec<u8> {
    let revision = i64::try_from(c.journal_revision).unwrap_or(i64::MAX);
    Json::object([
        ("desired_set_ref", Json::str(desired_set_ref)),
        ("journal_record_digest", Json::str(&c.journal_record_digest)),
        ("journal_revision", Json::Int(revision)),
        ("schema", Json::str(DESIRED_COMMITTED_SCHEMA)),
        ("transition_digest", Json::str(&c.transition_digest)),
    ])
    .to_cja()
    .into_bytes()
}

/// Decodes a commit payload: the binding and the `desired_set_ref` it names.
fn decode_commit(payload: &[u8]) -> Result<(String, DesiredCommit), &'static str> {
    const BAD: &str = "desired-set commit digest is invalid";
    let m = parse_canonical(payload).map_err(|_| BAD)?;
    let exact = has_exact_keys(&m, &COMMIT_KEYS)
        && m.get("schema").and_then(Json::as_str) == Some(DESIRED_COMMITTED_SCHEMA);
    if !exact {
        return Err("desired-set commit is partial");
    }
    let text = |k: &str| m.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
    let commit = DesiredCommit {
        journal_revision: m
            .get("journal_revision")
            .and_then(Json::as_i64)
            .and_then(|r| u64::try_from(r).ok())
            .unwrap_or(0),
        journal_record_digest: text("journal_record_digest"),
        transition_digest: text("transition_digest"),
    };
    let named = text("desired_set_ref");
    if check_commit(&commit).is_err() || !is_desired_set_ref(&named) {
        return Err(BAD);
    }
    if commit_payload(&named, &commit) != payload {
        return Err(BAD);
    }
    Ok((named, commit))
}

// ------------------------------------------------------------------------------------------------
// Admission: the cross-stream rules, read from the index by the hook and (early) by the store
// ------------------------------------------------------------------------------------------------

/// Read access to the projection's tables: the append transaction (hook) or a read snapshot
/// (store).
trait IndexRead {
    type Error;
    fn read(&self, table: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error>;
}

impl IndexRead for HookTxn<'_> {
    type Error = HookError;
    fn read(&self, table: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, HookError> {
        Ok(self.get(table, key, |v| v.map(<[u8]>::to_vec))?)
    }
}

struct JournalIndex<'a>(&'a Journal);

impl IndexRead for JournalIndex<'_> {
    type Error = QueryStoreError;
    fn read(&self, table: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, QueryStoreError> {
        self.0
            .projection_get(table, key, |v| v.map(<[u8]>::to_vec))
            .map_err(unavailable)
    }
}

/// Why a reservation is not admitted.
enum Refusal<E> {
    /// A domain refusal: one of the desired-set codes.
    Code(&'static str),
    /// The index does not decode or is inconsistent.
    Corrupt(&'static str),
    Read(E),
}

fn read_ref<R: IndexRead>(
    r: &R,
    table: &'static str,
    key: &[u8],
) -> Result<Option<[u8; 32]>, Refusal<R::Error>> {
    match r.read(table, key).map_err(Refusal::Read)? {
        None => Ok(None),
        Some(bytes) => <[u8; 32]>::try_from(bytes.as_slice())
            .map(Some)
            .map_err(|_| Refusal::Corrupt("a desired-set index value is not 32 bytes")),
    }
}

fn read_entry<R: IndexRead>(
    r: &R,
    reference: &[u8; 32],
) -> Result<Option<DesiredEntry>, Refusal<R::Error>> {
    match r
        .read(DESIRED_BY_REF_TABLE, reference)
        .map_err(Refusal::Read)?
    {
        None => Ok(None),
        Some(bytes) => archive::from_bytes::<DesiredEntry>(&bytes)
            .map(Some)
            .map_err(|_| Refusal::Corrupt("a desired-set index entry does not decode")),
    }
}

fn read_stream_entry<R: IndexRead>(
    r: &R,
    stream: &[u8; 32],
) -> Result<DesiredStreamEntry, Refusal<R::Error>> {
    match r
        .read(DESIRED_STREAMS_TABLE, stream)
        .map_err(Refusal::Read)?
    {
        None => Ok(DesiredStreamEntry::default()),
        Some(bytes) => archive::from_bytes::<DesiredStreamEntry>(&bytes)
            .map_err(|_| Refusal::Corrupt("a desired-set stream entry does not decode")),
    }
}

fn read_counter<R: IndexRead>(r: &R, key: &[u8]) -> Result<u64, Refusal<R::Error>> {
    match r.read(QUERY_COUNTS_TABLE, key).map_err(Refusal::Read)? {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| Refusal::Corrupt("a query store counter is corrupt")),
    }
}

/// An admitted reservation: where it goes and the state it changes.
struct Admission {
    /// The query stream's head the reservation follows (`Exact`): the planned mark (2) or the
    /// commit of the query's latest desired set.
    query_head: u64,
    stream_entry: DesiredStreamEntry,
    count: u64,
}

/// spec/projections.md §7.6 over the index: the choice is free for this query, the stream
/// revision is free, no reservation is pending on the engine stream, the causation follows the
/// query's chain, the revision is above the stream's committed ones, and there is room.
fn admit<R: IndexRead>(
    r: &R,
    parent: &DesiredParent,
    registration: &DesiredRegistration,
) -> Result<Admission, Refusal<R::Error>> {
    let (Some(query_ref), Some(choice)) = (
        parse_query_ref(&registration.query_ref),
        parse_sha(&registration.logical_choice_id),
    ) else {
        return Err(Refusal::Corrupt(
            "the registration names malformed identities",
        ));
    };
    let stream = registration.engine_stream.as_bytes();
    let expected = registration.event.expected_revision;
    if r.read(
        DESIRED_BY_CHOICE_TABLE,
        &desired_choice_key(&query_ref, &choice),
    )
    .map_err(Refusal::Read)?
    .is_some()
    {
        return Err(Refusal::Code(codes::DESIRED_CHOICE_BOUND));
    }
    if r.read(
        DESIRED_BY_STREAM_REVISION_TABLE,
        &desired_stream_revision_key(stream, expected),
    )
    .map_err(Refusal::Read)?
    .is_some()
    {
        return Err(Refusal::Code(codes::DESIRED_REVISION_RESERVED));
    }
    let stream_entry = read_stream_entry(r, stream)?;
    if stream_entry.pending.is_some() {
        return Err(Refusal::Code(codes::DESIRED_STREAM_PENDING));
    }
    let (predecessor, query_head) = match read_ref(r, DESIRED_LATEST_TABLE, &query_ref)? {
        None => (parent.decision_event_id.clone(), 2),
        Some(latest) => {
            let entry = read_entry(r, &latest)?
                .ok_or(Refusal::Corrupt("a latest desired set has no index entry"))?;
            if entry.committed.is_none() {
                // Its stream is this one (same scope as the parent decision), so it would be
                // the stream's pending reservation.
                return Err(Refusal::Code(codes::DESIRED_STREAM_PENDING));
            }
            (entry.event_id, entry.revision + 1)
        }
    };
    if registration.event.causation_id.as_deref() != Some(predecessor.as_str()) {
        return Err(Refusal::Code(codes::DESIRED_CAUSATION));
    }
    if stream_entry
        .highest_committed
        .is_some_and(|h| expected <= h)
    {
        return Err(Refusal::Code(codes::DESIRED_REVISION_STALE));
    }
    // Only pending desired sets count (spec/projections.md §7.5, Q5): a committed one can no
    // longer change, and its rows stay for the choice, revision and causation rules above.
    let count = read_counter(r, COUNT_DESIRED_SETS_KEY)?;
    let committed = read_counter(r, COUNT_DESIRED_COMMITTED_KEY)?;
    let pending = count.checked_sub(committed).ok_or(Refusal::Corrupt(
        "more desired sets are committed than reserved",
    ))?;
    if pending >= DESIRED_SETS_MAX {
        return Err(Refusal::Code(codes::DESIRED_CAPACITY));
    }
    Ok(Admission {
        query_head,
        stream_entry,
        count,
    })
}

// ------------------------------------------------------------------------------------------------
// The fold (inside the append transaction)
// ------------------------------------------------------------------------------------------------

/// Folds a reservation record: validates it against its parent's index entry, admits it and
/// indexes it.
pub(super) fn apply_reservation(
    tx: &HookTxn<'_>,
    record: &RecordView<'_>,
) -> Result<(), HookError> {
    let bad = |m: &str| {
        refuse(
            codes::QUERY_RECORD_INVALID,
            format!(
                "desired-set reservation record {} is invalid: {m}",
                record.event_id
            ),
        )
    };
    let stored = decode_reservation(record.payload).map_err(bad)?;
    let Some(reference) = parse_desired_ref(record.event_id) else {
        return Err(bad("its event id is not a desired-set reference"));
    };
    let Some(query_ref) = parse_query_ref(&stored.query_ref) else {
        return Err(bad("it names no managed query reference"));
    };
    let logical = tx.get(QUERY_BY_REF_TABLE, &query_ref, |v| {
        v.and_then(|b| <[u8; 32]>::try_from(b).ok())
    })?;
    let entry = match logical {
        Some(l) => entry_in(tx, &l)?,
        None => None,
    };
    let Some(entry) = entry else {
        return Err(bad("its managed query is not registered"));
    };
    let Some(parent) = DesiredParent::of_entry(&entry) else {
        return Err(bad("its managed query is not planned"));
    };
    // The key is not visible here; the store re-derives the reference on every read.
    let registration = check_stored(&parent, &stored, record.payload).map_err(bad)?;
    let on_stream = entry.stream == *record.stream.as_bytes()
        && registration.occurred_at().ok() == Some(record.occurred_at);
    if !on_stream {
        return Err(bad(
            "it is not on its managed query stream at its event's time",
        ));
    }
    let admission = admit(tx, &parent, &registration).map_err(|r| match r {
        Refusal::Code(code) => refuse(code, refusal_message(code).unwrap_or(code)),
        Refusal::Corrupt(m) => bad(m),
        Refusal::Read(e) => e,
    })?;
    if record.revision != admission.query_head + 1 {
        return Err(bad("it is not the next record of its managed query stream"));
    }
    let choice = parse_sha(&registration.logical_choice_id).unwrap_or([0; 32]);
    let stream = *registration.engine_stream.as_bytes();
    let expected = registration.event.expected_revision;
    let desired = DesiredEntry {
        desired_set_ref: reference,
        query_ref,
        logical_choice_id: choice,
        stream: entry.stream,
        engine_stream: stream,
        expected_revision: expected,
        event_id: registration.event.event_id.clone(),
        occurred_at: record.occurred_at.0,
        payload_digest: Sha256::digest(record.payload).into(),
        revision: record.revision,
        position: record.position,
        committed: None,
    };
    let stream_entry = DesiredStreamEntry {
        pending: Some(reference),
        ..admission.stream_entry
    };
    tx.insert(
        DESIRED_BY_REF_TABLE,
        &reference,
        &archive::to_bytes(&desired)?,
    )?;
    tx.insert(
        DESIRED_BY_CHOICE_TABLE,
        &desired_choice_key(&query_ref, &choice),
        &reference,
    )?;
    tx.insert(
        DESIRED_BY_STREAM_REVISION_TABLE,
        &desired_stream_revision_key(&stream, expected),
        &reference,
    )?;
    tx.insert(DESIRED_LATEST_TABLE, &query_ref, &reference)?;
    tx.insert(
        DESIRED_STREAMS_TABLE,
        &stream,
        &archive::to_bytes(&stream_entry)?,
    )?;
    tx.insert(
        QUERY_COUNTS_TABLE,
        COUNT_DESIRED_SETS_KEY,
        &(admission.count + 1).to_le_bytes(),
    )?;
    Ok(())
}

/// Folds a commit record: it must directly follow its pending reservation and name the revision
/// right after the event's.
pub(super) fn apply_commit(tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
    let bad = |m: &str| {
        refuse(
            codes::QUERY_RECORD_INVALID,
            format!(
                "desired-set commit record {} is invalid: {m}",
                record.event_id
            ),
        )
    };
    let (named, commit) = decode_commit(record.payload).map_err(bad)?;
    let reference = parse_desired_ref(&named).unwrap_or([0; 32]);
    let corrupt = |r: Refusal<HookError>| match r {
        Refusal::Code(code) => refuse(code, refusal_message(code).unwrap_or(code)),
        Refusal::Corrupt(m) => bad(m),
        Refusal::Read(e) => e,
    };
    let Some(mut entry) = read_entry(tx, &reference).map_err(corrupt)? else {
        return Err(bad("its desired set is not reserved"));
    };
    let placed = entry.stream == *record.stream.as_bytes()
        && entry.revision.checked_add(1) == Some(record.revision)
        && record.event_id == committed_event_id(&named)
        && record.occurred_at.0 == entry.occurred_at
        && entry.committed.is_none();
    if !placed {
        return Err(bad(
            "it does not directly follow its desired-set reservation",
        ));
    }
    if entry.expected_revision.checked_add(1) != Some(commit.journal_revision) {
        return Err(bad("its journal revision does not follow its exact event"));
    }
    let mut stream_entry = read_stream_entry(tx, &entry.engine_stream).map_err(corrupt)?;
    if stream_entry.pending != Some(reference) {
        return Err(bad(
            "its desired set is not its stream's pending reservation",
        ));
    }
    let (Some(journal_record_digest), Some(transition_digest)) = (
        parse_sha(&commit.journal_record_digest),
        parse_sha(&commit.transition_digest),
    ) else {
        return Err(bad("its digests are malformed"));
    };
    entry.committed = Some(DesiredCommitEntry {
        journal_revision: commit.journal_revision,
        journal_record_digest,
        transition_digest,
        position: record.position,
    });
    stream_entry.pending = None;
    stream_entry.highest_committed = Some(
        stream_entry
            .highest_committed
            .map_or(entry.expected_revision, |h| h.max(entry.expected_revision)),
    );
    let committed = read_counter(tx, COUNT_DESIRED_COMMITTED_KEY).map_err(corrupt)?;
    tx.insert(
        DESIRED_BY_REF_TABLE,
        &reference,
        &archive::to_bytes(&entry)?,
    )?;
    tx.insert(
        DESIRED_STREAMS_TABLE,
        &entry.engine_stream,
        &archive::to_bytes(&stream_entry)?,
    )?;
    tx.insert(
        QUERY_COUNTS_TABLE,
        COUNT_DESIRED_COMMITTED_KEY,
        &(committed + 1).to_le_bytes(),
    )?;
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// The store's operations
// ------------------------------------------------------------------------------------------------

fn desired_read_error(e: ReadError) -> QueryStoreError {
    match e {
        ReadError::AuthenticationFailed { .. } => {
            corruption("desired-set row authentication failed", e.to_string())
        }
        ReadError::Corrupt { .. } => corruption("desired-set row is unreadable", e.to_string()),
        other => unavailable(other),
    }
}

fn store_refusal(r: Refusal<QueryStoreError>) -> QueryStoreError {
    match r {
        Refusal::Code(code) => refusal(code).unwrap_or_else(|| unavailable(code)),
        Refusal::Corrupt(m) => corruption("managed desired-set index is unreadable", m),
        Refusal::Read(e) => e,
    }
}

/// A reservation request, decided before any write.
enum Reservation {
    /// The same content is already reserved (committed or not).
    Stored(Box<DesiredSetRecord>),
    /// A new reservation to append.
    New(StreamAppend),
}

impl QueryStore {
    /// `desired_set_ref` of canonical desired-registration bytes on this installation.
    fn desired_set_ref_of(&self, registration: &[u8]) -> String {
        let digest = self
            .journal
            .keyed_digest(DESIRED_SET_REF_DOMAIN, registration);
        format!("{DESIRED_SET_REF_PREFIX}{}", hex(&digest))
    }

    /// Reserves a desired set of a planned query (spec/projections.md §7.6): input checks and the
    /// desired registration validation (spec/projections.md §7.6) before any write; the same
    /// content already reserved is returned unchanged (committed or not); the same choice with
    /// other content is Conflict "desired-set choice identity is already bound to different
    /// content"; otherwise the stream rules (revision already reserved, pending reservation,
    /// causation, stale revision) and the capacity are checked and the reservation is appended
    /// after the query stream's head. The projection decides those rules again inside the append.
    pub fn reserve_desired_set(
        &self,
        query_ref: &str,
        logical_choice_id: &str,
        capability_ids: &[String],
        event: &EngineEvent,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        for _ in 0..RESERVE_ATTEMPTS {
            let append =
                match self.reservation(query_ref, logical_choice_id, capability_ids, event)? {
                    Reservation::Stored(record) => return Ok(*record),
                    Reservation::New(append) => append,
                };
            let reference = append
                .records
                .first()
                .map(|r| r.event_id.clone())
                .unwrap_or_default();
            match self.journal.append(append) {
                Ok(_) => return self.load_desired_set(&reference),
                // The query stream moved under us (a concurrent reservation or commit): decide
                // again against what it holds now.
                Err(AppendError::WrongRevision { .. }) => continue,
                Err(AppendError::Conflict { .. }) => {
                    return Err(QueryStoreError::Conflict {
                        message: "derived desired-set reference collided",
                    });
                }
                Err(e) => return Err(append_error(e)),
            }
        }
        Err(CONFLICT_PENDING)
    }

    fn reservation(
        &self,
        query_ref: &str,
        logical_choice_id: &str,
        capability_ids: &[String],
        event: &EngineEvent,
    ) -> Result<Reservation, QueryStoreError> {
        check_query_ref(query_ref)?;
        check_choice_and_ids(logical_choice_id, capability_ids)?;
        let parent_record = self.load(query_ref).map_err(|e| match e {
            QueryStoreError::NotFound { .. } => PARENT_NOT_FOUND,
            other => other,
        })?;
        let parent = DesiredParent::of_record(&parent_record).ok_or(PARENT_NOT_PLANNED)?;
        let registration = validate_desired(&parent, logical_choice_id, capability_ids, event)?;
        let reference = self.desired_set_ref_of(&registration.bytes);
        let index = JournalIndex(&self.journal);
        let (Some(query), Some(choice)) =
            (parse_query_ref(query_ref), parse_sha(logical_choice_id))
        else {
            return Err(invalid("desired-set identities are malformed"));
        };
        let bound = read_ref(
            &index,
            DESIRED_BY_CHOICE_TABLE,
            &desired_choice_key(&query, &choice),
        )
        .map_err(store_refusal)?;
        if let Some(existing) = bound {
            let stored = self.load_desired_key(&existing)?;
            return if ct_eq(stored.desired_set_ref.as_bytes(), reference.as_bytes()) {
                Ok(Reservation::Stored(Box::new(stored)))
            } else {
                Err(CONFLICT_CHOICE)
            };
        }
        let admission = admit(&index, &parent, &registration).map_err(store_refusal)?;
        let occurred_at = registration.occurred_at()?;
        Ok(Reservation::New(StreamAppend::new(
            query_stream(&parent_record.logical_query_id)?,
            ExpectedRevision::Exact(admission.query_head),
            vec![NewRecord::new(
                reference,
                DESIRED_RESERVATION_KIND,
                occurred_at,
                registration.bytes,
            )],
        )))
    }

    /// The commit of a reserved desired set as a journal append (`Exact` the reservation's
    /// revision on its query stream, event id `desired_set_ref` + `:committed`), validated exactly
    /// as [`QueryStore::mark_desired_set_committed`] does, without appending: for a caller that
    /// commits it atomically with the desired event's engine record (`Engine::process_with`
    /// extras), whose revision and record digest it names. The same binding already stored yields
    /// the identical append (the journal replays it as a no-op). Settle the commit with
    /// [`QueryStore::desired_commit_outcome`].
    pub fn desired_commit_append(
        &self,
        desired_set_ref: &str,
        journal_revision: u64,
        journal_record_digest: &str,
        transition_digest: &str,
    ) -> Result<StreamAppend, QueryStoreError> {
        self.commit_plan(
            desired_set_ref,
            journal_revision,
            journal_record_digest,
            transition_digest,
        )
        .map(|(append, _)| append)
    }

    /// Validates a commit binding against the stored desired set: the append and the record.
    fn commit_plan(
        &self,
        desired_set_ref: &str,
        journal_revision: u64,
        journal_record_digest: &str,
        transition_digest: &str,
    ) -> Result<(StreamAppend, DesiredSetRecord), QueryStoreError> {
        let reference = check_desired_ref(desired_set_ref)?;
        let commit = DesiredCommit {
            journal_revision,
            journal_record_digest: journal_record_digest.to_owned(),
            transition_digest: transition_digest.to_owned(),
        };
        check_commit(&commit)?;
        let entry = self.desired_entry(&reference)?.ok_or(DESIRED_NOT_FOUND)?;
        let record = self.load_desired_entry(&reference, &entry)?;
        if record.event.expected_revision.checked_add(1) != Some(journal_revision) {
            return Err(QueryStoreError::Conflict {
                message: "desired-set journal revision does not match its exact event",
            });
        }
        if record.committed.as_ref().is_some_and(|c| *c != commit) {
            return Err(CONFLICT_COMMIT);
        }
        let append = StreamAppend::new(
            StreamId::from_bytes(entry.stream),
            ExpectedRevision::Exact(entry.revision),
            vec![NewRecord::new(
                committed_event_id(desired_set_ref),
                DESIRED_COMMITTED_KIND,
                Timestamp(entry.occurred_at),
                commit_payload(desired_set_ref, &commit),
            )],
        );
        Ok((append, record))
    }

    /// Records that the reserved event is committed in the engine journal
    /// (spec/projections.md §7.6): input checks (Invalid), the desired set (NotFound), revision =
    /// event expected revision + 1 (Conflict "desired-set journal revision does not match its exact
    /// event"); the same binding already stored is returned unchanged, another is Conflict
    /// "desired-set commit is already bound differently"; otherwise the commit record is appended.
    pub fn mark_desired_set_committed(
        &self,
        desired_set_ref: &str,
        journal_revision: u64,
        journal_record_digest: &str,
        transition_digest: &str,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        let (append, record) = self.commit_plan(
            desired_set_ref,
            journal_revision,
            journal_record_digest,
            transition_digest,
        )?;
        if record.is_committed() {
            return Ok(record);
        }
        let result = self.journal.append(append.clone()).map(drop);
        self.desired_commit_outcome(desired_set_ref, &append, result)
    }

    /// Settles the commit of a desired commit append (alone or in a larger batch): the stored
    /// record on success or when the same binding was stored concurrently, the typed refusal
    /// otherwise.
    pub fn desired_commit_outcome(
        &self,
        desired_set_ref: &str,
        append: &StreamAppend,
        result: Result<(), AppendError>,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        let commit = match append.records.as_slice() {
            [record] if record.kind == DESIRED_COMMITTED_KIND => {
                match decode_commit(&record.payload) {
                    Ok((named, commit)) if named == desired_set_ref => commit,
                    _ => return Err(invalid("the append is not this desired set's commit")),
                }
            }
            _ => return Err(invalid("the append is not a managed desired-set commit")),
        };
        match result {
            Ok(()) => self.load_desired_set(desired_set_ref),
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                let now = self.load_desired_set(desired_set_ref)?;
                if now.committed.as_ref() == Some(&commit) {
                    Ok(now)
                } else {
                    Err(CONFLICT_COMMIT)
                }
            }
            Err(e) => Err(append_error(e)),
        }
    }

    /// The authenticated desired set of `desired_set_ref` (spec/projections.md §7.6).
    pub fn load_desired_set(
        &self,
        desired_set_ref: &str,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        let reference = check_desired_ref(desired_set_ref)?;
        self.load_desired_key(&reference)
    }

    /// The latest desired set of a query: the one with the highest expected revision, which the
    /// chain makes the last one reserved. Parent NotFound "desired-set parent query is
    /// unavailable"; none NotFound "managed desired-set record is unavailable".
    pub fn load_latest_desired_set(
        &self,
        query_ref: &str,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        check_query_ref(query_ref)?;
        self.load(query_ref).map_err(|e| match e {
            QueryStoreError::NotFound { .. } => PARENT_NOT_FOUND,
            other => other,
        })?;
        let query = parse_query_ref(query_ref).unwrap_or([0; 32]);
        let latest = read_ref(&JournalIndex(&self.journal), DESIRED_LATEST_TABLE, &query)
            .map_err(store_refusal)?
            .ok_or(DESIRED_NOT_FOUND)?;
        let record = self.load_desired_key(&latest)?;
        if record.query_ref != query_ref {
            return Err(corruption(
                INDEX_AUTHENTICATION,
                "a query's latest desired set belongs to another query",
            ));
        }
        Ok(record)
    }

    /// The desired set reserved and not committed on the engine stream of `scope` (stream-level:
    /// any query, any exposure or host context of the session). NotFound "managed desired-set
    /// pending record is unavailable".
    pub fn load_pending_desired_set(
        &self,
        scope: &ScopeRef,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        check_scope(scope)?;
        let stream = engine_stream(scope).map_err(|e| invalid(e.to_string()))?;
        let entry = read_stream_entry(&JournalIndex(&self.journal), stream.as_bytes())
            .map_err(store_refusal)?;
        let pending = entry.pending.ok_or(PENDING_NOT_FOUND)?;
        let record = self.load_desired_key(&pending)?;
        if record.is_committed() || record.stream_identity_digest != hex(stream.as_bytes()) {
            return Err(corruption(
                INDEX_AUTHENTICATION,
                "a stream's pending desired set is committed or on another stream",
            ));
        }
        Ok(record)
    }

    /// Number of desired sets reserved (committed or not).
    pub fn desired_set_count(&self) -> Result<u64, QueryStoreError> {
        self.count(COUNT_DESIRED_SETS_KEY)
    }

    /// Number of desired sets reserved and not committed: the count [`DESIRED_SETS_MAX`] bounds
    /// (spec/projections.md §7.5).
    pub fn pending_desired_set_count(&self) -> Result<u64, QueryStoreError> {
        self.count(COUNT_DESIRED_SETS_KEY)?
            .checked_sub(self.count(COUNT_DESIRED_COMMITTED_KEY)?)
            .ok_or_else(|| {
                corruption(
                    "managed desired-set row count is invalid",
                    "more desired sets are committed than reserved",
                )
            })
    }

    /// Number of desired sets committed.
    pub fn committed_desired_set_count(&self) -> Result<u64, QueryStoreError> {
        self.count(COUNT_DESIRED_COMMITTED_KEY)
    }

    // ----- reads -----

    fn desired_entry(&self, reference: &[u8; 32]) -> Result<Option<DesiredEntry>, QueryStoreError> {
        read_entry(&JournalIndex(&self.journal), reference).map_err(store_refusal)
    }

    fn load_desired_key(&self, reference: &[u8; 32]) -> Result<DesiredSetRecord, QueryStoreError> {
        let entry = self.desired_entry(reference)?.ok_or(DESIRED_NOT_FOUND)?;
        self.load_desired_entry(reference, &entry)
    }

    /// Reads the desired set's records from the journal (authenticated there: digest, MAC,
    /// chain) together with its predecessor pair, re-validates them against the authenticated
    /// parent, re-derives the reference, checks the causation chain and the commit, and compares
    /// the index entry with what these records produce.
    fn load_desired_entry(
        &self,
        reference: &[u8; 32],
        entry: &DesiredEntry,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        if !ct_eq(&entry.desired_set_ref, reference) {
            return Err(corruption(
                INDEX_AUTHENTICATION,
                "the index entry names another reference",
            ));
        }
        let query_ref = format!("{QUERY_REF_PREFIX}{}", hex(&entry.query_ref));
        let parent_record = self.load(&query_ref).map_err(|e| match e {
            QueryStoreError::NotFound { .. } => corruption(
                "desired-set persisted parent query is unavailable",
                "a desired set names an unregistered query",
            ),
            other => other,
        })?;
        let parent = DesiredParent::of_record(&parent_record).ok_or_else(|| {
            corruption(
                "desired-set persisted registration is invalid",
                "the parent query is not planned",
            )
        })?;
        let revision = entry.revision;
        if revision < 3 || revision.is_multiple_of(2) || revision >= REVISION_BOUND {
            return Err(corruption(
                INDEX_AUTHENTICATION,
                "the index entry names an impossible revision",
            ));
        }
        // The predecessor pair (or the planned mark's successor) up to the commit.
        let from = if revision >= 5 { revision - 2 } else { 3 };
        let stream = StreamId::from_bytes(entry.stream);
        let mut records: Vec<Record> = Vec::with_capacity(4);
        let count = usize::try_from(revision + 2 - from).unwrap_or(4);
        self.journal
            .visit_stream(&stream, from, count, |view| {
                records.push(view.to_record());
                ControlFlow::Continue(())
            })
            .map_err(desired_read_error)?;
        let at = |r: u64| records.iter().find(|x| x.revision == r);
        let Some(reservation) = at(revision).filter(|r| r.kind == DESIRED_RESERVATION_KIND) else {
            return Err(corruption(
                "managed desired-set record is unavailable in the journal",
                format!("query stream {stream} has no reservation at revision {revision}"),
            ));
        };
        let stored = decode_reservation(&reservation.payload)
            .map_err(|m| corruption(m, "stored reservation"))?;
        let registration = check_stored(&parent, &stored, &reservation.payload)
            .map_err(|m| corruption(m, "stored reservation"))?;
        let derived = self.desired_set_ref_of(&registration.bytes);
        if !ct_eq(derived.as_bytes(), reservation.event_id.as_bytes()) {
            return Err(corruption(
                "desired-set reference authentication failed",
                "the stored reference is not this installation's digest of the registration",
            ));
        }
        if registration.occurred_at().ok() != Some(reservation.occurred_at) {
            return Err(corruption(
                "desired-set redundant binding is invalid",
                "the reservation's time is not its event's",
            ));
        }
        let predecessor = if revision == 3 {
            parent.decision_event_id.clone()
        } else {
            self.predecessor_event(&records, revision, &registration)?
        };
        if registration.event.causation_id.as_deref() != Some(predecessor.as_str()) {
            return Err(corruption(
                "desired-set persisted causation chain is invalid",
                "the event's causation is not its predecessor's event",
            ));
        }
        let committed = match at(revision + 1) {
            None => None,
            Some(c) => {
                if c.kind != DESIRED_COMMITTED_KIND {
                    return Err(corruption(
                        "desired-set persisted sequence follows an uncommitted choice",
                        "the record after a reservation is not its commit",
                    ));
                }
                let (named, commit) =
                    decode_commit(&c.payload).map_err(|m| corruption(m, "stored commit"))?;
                let bound = ct_eq(named.as_bytes(), derived.as_bytes())
                    && c.event_id == committed_event_id(&derived)
                    && c.occurred_at == reservation.occurred_at;
                if !bound {
                    return Err(corruption(
                        "desired-set redundant binding is invalid",
                        "the commit names another desired set",
                    ));
                }
                if registration.event.expected_revision.checked_add(1)
                    != Some(commit.journal_revision)
                {
                    return Err(corruption("desired-set committed revision is invalid", ""));
                }
                Some((commit, c.position))
            }
        };
        let expected = DesiredEntry {
            desired_set_ref: *reference,
            query_ref: entry.query_ref,
            logical_choice_id: parse_sha(&registration.logical_choice_id).unwrap_or([0; 32]),
            stream: *stream.as_bytes(),
            engine_stream: *registration.engine_stream.as_bytes(),
            expected_revision: registration.event.expected_revision,
            event_id: registration.event.event_id.clone(),
            occurred_at: reservation.occurred_at.0,
            payload_digest: Sha256::digest(&reservation.payload).into(),
            revision: reservation.revision,
            position: reservation.position,
            committed: committed.as_ref().map(|(c, position)| DesiredCommitEntry {
                journal_revision: c.journal_revision,
                journal_record_digest: parse_sha(&c.journal_record_digest).unwrap_or([0; 32]),
                transition_digest: parse_sha(&c.transition_digest).unwrap_or([0; 32]),
                position: *position,
            }),
        };
        if expected != *entry
            || *stream.as_bytes() != *query_stream(&parent_record.logical_query_id)?.as_bytes()
        {
            return Err(corruption(
                INDEX_AUTHENTICATION,
                "the index entry disagrees with its authenticated journal records",
            ));
        }
        Ok(DesiredSetRecord {
            stream_identity_digest: registration.stream_identity_digest(),
            query_ref: registration.query_ref,
            logical_choice_id: registration.logical_choice_id,
            desired_set_ref: derived,
            plan_id: registration.plan_id,
            decision_digest: registration.decision_digest,
            capability_ids: registration.capability_ids,
            event: registration.event,
            committed: committed.map(|(c, _)| c),
        })
    }

    /// The event id of the desired set before the one at `revision` (≥ 5): its reservation at
    /// `revision − 2` must be committed at `revision − 1` and carry a lower expected revision.
    fn predecessor_event(
        &self,
        records: &[Record],
        revision: u64,
        registration: &DesiredRegistration,
    ) -> Result<String, QueryStoreError> {
        const CHAIN: &str = "desired-set persisted causation chain is invalid";
        let at = |r: u64| records.iter().find(|x| x.revision == r);
        let previous = at(revision - 2)
            .filter(|r| r.kind == DESIRED_RESERVATION_KIND)
            .ok_or_else(|| corruption(CHAIN, "the previous record pair is not a reservation"))?;
        let stored = decode_reservation(&previous.payload)
            .map_err(|m| corruption(m, "previous reservation"))?;
        let commit = at(revision - 1)
            .filter(|r| r.kind == DESIRED_COMMITTED_KIND)
            .and_then(|r| decode_commit(&r.payload).ok())
            .filter(|(named, _)| *named == previous.event_id);
        if commit.is_none() {
            return Err(corruption(
                "desired-set persisted sequence follows an uncommitted choice",
                "the previous reservation is not committed",
            ));
        }
        if stored.query_ref != registration.query_ref
            || stored.event.expected_revision >= registration.event.expected_revision
        {
            return Err(corruption(
                CHAIN,
                "the previous desired set does not precede this one",
            ));
        }
        Ok(stored.event.event_id)
    }
}

fn check_desired_ref(desired_set_ref: &str) -> Result<[u8; 32], QueryStoreError> {
    parse_desired_ref(desired_set_ref)
        .ok_or_else(|| invalid("desired_set_ref must be an opaque managed desired-set reference"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use ctx_journal::files;

    use super::super::tests::{Fixture, d, fixture, open, open_journal, register, tamper_file};
    use super::*;
    use ctx_model::RandomSeed;
    use std::sync::Arc;

    use crate::query_store::QUERY_STORE_PROJECTION;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A valid desired event of `parent` naming `capabilities` (load rows).
    fn desired_event(
        parent: &QueryRecord,
        event_id: &str,
        expected_revision: u64,
        causation: &str,
        capabilities: &[&str],
    ) -> EngineEvent {
        let decision = parent.decision_event();
        let mut e = EngineEvent::bare(
            event_id,
            EventKind::ReassessmentRequested,
            decision.scope.clone(),
            expected_revision,
            "2026-12-01T10:05:00Z",
        );
        e.correlation_id = decision.correlation_id.clone();
        e.causation_id = Some(causation.to_owned());
        e.engine_version = decision.engine_version.clone();
        e.planner_version = decision.planner_version.clone();
        e.policy_version = decision.policy_version.clone();
        e.host_descriptor_digest = decision.host_descriptor_digest.clone();
        e.catalog_snapshot_digest = decision.catalog_snapshot_digest.clone();
        e.semantic_model_digest = decision.semantic_model_digest.clone();
        e.semantic_index_digest = decision.semantic_index_digest.clone();
        e.work_signature = decision.work_signature.clone();
        e.random_seed = decision.random_seed.clone();
        e.privacy = decision.privacy;
        let rows = capabilities
            .iter()
            .map(|id| {
                Json::object([
                    ("actionability", Json::str("load")),
                    ("capability_id", Json::str(*id)),
                    ("install_descriptor_digest", Json::Null),
                    ("install_plan_digest", Json::Null),
                    ("kind", Json::str("skill")),
                    ("lease_id", Json::str(format!("ctx-lease:{id}"))),
                    ("source_digest", Json::str(d(id))),
                ])
            })
            .collect();
        e.payload = Json::object([
            ("desired_capabilities", Json::Arr(rows)),
            ("owner_id", Json::str("ctx-desired:owner")),
            ("policy_snapshot_digest", Json::str(d("policy"))),
        ]);
        e.validate().unwrap();
        e
    }

    /// A registered and planned query.
    fn planned(store: &QueryStore, f: &Fixture) -> QueryRecord {
        let r = register(store, f).unwrap();
        let plan = f.decision.correlation_id.clone().unwrap();
        store
            .mark_planned(r.query_ref(), &plan, &d("decision"), 2, &d("record"))
            .unwrap()
    }

    /// `fixture` with another exposure and host context in both scopes (same engine stream).
    fn other_host(logical: &str, session: &str, plan: &str) -> Fixture {
        let mut f = fixture(logical, session, plan);
        for scope in [&mut f.started.scope, &mut f.decision.scope] {
            scope.exposure_id = "exposure-2".into();
            scope.host_context_id = "host-2".into();
        }
        f
    }

    fn reserve(
        store: &QueryStore,
        parent: &QueryRecord,
        choice: &str,
        event: &EngineEvent,
        capabilities: &[&str],
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        store.reserve_desired_set(parent.query_ref(), &d(choice), &ids(capabilities), event)
    }

    fn commit(
        store: &QueryStore,
        r: &DesiredSetRecord,
        revision: u64,
    ) -> Result<DesiredSetRecord, QueryStoreError> {
        store.mark_desired_set_committed(
            r.desired_set_ref(),
            revision,
            &d("engine-record"),
            &d("transition"),
        )
    }

    #[test]
    fn reserve_then_look_up_by_ref_query_and_stream() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let event = desired_event(
            &parent,
            "ev-desired-1",
            2,
            &f.decision.event_id,
            &["skill:alpha"],
        );
        let r = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        assert!(is_desired_set_ref(r.desired_set_ref()), "{r:?}");
        assert!(!r.is_committed());
        assert!(format!("{r:?}").contains("reserved"));
        assert_eq!(r.query_ref(), parent.query_ref());
        assert_eq!(r.logical_choice_id(), d("c1"));
        assert_eq!(r.plan_id(), "plan-1");
        assert_eq!(r.decision_digest(), d("decision"));
        assert_eq!(
            r.stream_identity_digest(),
            hex(engine_stream(&f.decision.scope).unwrap().as_bytes())
        );
        assert_eq!(r.capability_ids(), ids(&["skill:alpha"]).as_slice());
        assert_eq!(r.event(), &event);
        assert_eq!(r.journal_revision(), None);
        assert_eq!(r.journal_record_digest(), None);
        assert_eq!(r.transition_digest(), None);

        assert_eq!(store.load_desired_set(r.desired_set_ref()).unwrap(), r);
        assert_eq!(
            store.load_latest_desired_set(parent.query_ref()).unwrap(),
            r
        );
        assert_eq!(
            store.load_pending_desired_set(&f.decision.scope).unwrap(),
            r
        );
        // Stream-level: another exposure and host context of the same session finds it too.
        let alias = other_host("q9", "s1", "plan-9").decision.scope;
        assert_ne!(alias, f.decision.scope);
        assert_eq!(store.load_pending_desired_set(&alias).unwrap(), r);
        assert_eq!(store.desired_set_count().unwrap(), 1);
        assert_eq!(store.committed_desired_set_count().unwrap(), 0);

        // An exact retry returns the stored record and writes nothing.
        let head = store.journal().head_position().unwrap();
        assert_eq!(
            reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap(),
            r
        );
        assert_eq!(store.journal().head_position().unwrap(), head);
        // The parent still loads (its stream now continues after the planned mark).
        assert_eq!(store.load(parent.query_ref()).unwrap(), parent);
        assert_eq!(register(&store, &f).unwrap(), parent);
    }

    #[test]
    fn the_same_choice_with_other_content_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let cause = f.decision.event_id.as_str();
        let event = desired_event(&parent, "ev-desired-1", 2, cause, &["skill:alpha"]);
        reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        let other = desired_event(&parent, "ev-desired-1", 2, cause, &["skill:beta"]);
        let e = reserve(&store, &parent, "c1", &other, &["skill:beta"]).unwrap_err();
        assert_eq!(e, CONFLICT_CHOICE);
        assert_eq!(
            e.to_string(),
            "desired-set choice identity is already bound to different content"
        );
        assert_eq!(store.desired_set_count().unwrap(), 1);
    }

    #[test]
    fn one_pending_reservation_per_engine_stream() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f1 = fixture("q1", "s1", "plan-1");
        let p1 = planned(&store, &f1);
        // Another query on the same session, from another host and exposure.
        let f2 = other_host("q2", "s1", "plan-2");
        let p2 = planned(&store, &f2);
        // A query of another session is unaffected.
        let f3 = fixture("q3", "s3", "plan-1");
        let p3 = planned(&store, &f3);

        let e1 = desired_event(&p1, "ev-d1", 2, &f1.decision.event_id, &["skill:alpha"]);
        reserve(&store, &p1, "c1", &e1, &["skill:alpha"]).unwrap();

        let e2 = desired_event(&p2, "ev-d2", 3, &f2.decision.event_id, &["skill:alpha"]);
        let e = reserve(&store, &p2, "c2", &e2, &["skill:alpha"]).unwrap_err();
        assert_eq!(e, CONFLICT_PENDING);
        assert_eq!(
            e.to_string(),
            "desired-set stream has a pending reservation"
        );
        // A new choice on the same query is refused the same way.
        let e1b = desired_event(&p1, "ev-d1b", 3, "ev-d1", &["skill:beta"]);
        assert_eq!(
            reserve(&store, &p1, "c1b", &e1b, &["skill:beta"]).unwrap_err(),
            CONFLICT_PENDING
        );
        let e3 = desired_event(&p3, "ev-d3", 2, &f3.decision.event_id, &["skill:alpha"]);
        reserve(&store, &p3, "c3", &e3, &["skill:alpha"]).unwrap();

        // Bypassing the store's early check, the projection refuses inside the append.
        let parent = DesiredParent::of_record(&p2).unwrap();
        let registration =
            validate_desired(&parent, &d("c2"), &ids(&["skill:alpha"]), &e2).unwrap();
        let err = store
            .journal()
            .append(StreamAppend::new(
                query_stream(&f2.logical).unwrap(),
                ExpectedRevision::Exact(2),
                vec![NewRecord::new(
                    store.desired_set_ref_of(&registration.bytes),
                    DESIRED_RESERVATION_KIND,
                    registration.occurred_at().unwrap(),
                    registration.bytes.clone(),
                )],
            ))
            .unwrap_err();
        assert!(
            matches!(&err, AppendError::Hook { code: Some(c), .. } if *c == codes::DESIRED_STREAM_PENDING),
            "{err:?}"
        );
        assert_eq!(append_error(err), CONFLICT_PENDING);
        assert_eq!(store.desired_set_count().unwrap(), 2);
    }

    #[test]
    fn commit_releases_the_stream_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let event = desired_event(&parent, "ev-d1", 2, &f.decision.event_id, &["skill:alpha"]);
        let r = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();

        assert_eq!(
            commit(&store, &r, 4).unwrap_err().to_string(),
            "desired-set journal revision does not match its exact event"
        );
        assert_eq!(
            commit(&store, &r, 0).unwrap_err().to_string(),
            "journal_revision must be a bounded positive integer"
        );
        assert_eq!(
            store
                .mark_desired_set_committed(r.desired_set_ref(), 3, "nope", &d("transition"))
                .unwrap_err()
                .to_string(),
            "journal_record_digest must be a lowercase SHA-256 digest"
        );
        let committed = commit(&store, &r, 3).unwrap();
        assert!(committed.is_committed());
        assert!(format!("{committed:?}").contains("committed"));
        assert_eq!(committed.journal_revision(), Some(3));
        assert_eq!(
            committed.journal_record_digest(),
            Some(d("engine-record").as_str())
        );
        assert_eq!(
            committed.transition_digest(),
            Some(d("transition").as_str())
        );
        assert_eq!(committed.desired_set_ref(), r.desired_set_ref());
        assert_eq!(committed.event(), r.event());

        let e = store
            .load_pending_desired_set(&f.decision.scope)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "managed desired-set pending record is unavailable"
        );
        assert!(matches!(e, QueryStoreError::NotFound { .. }));
        assert_eq!(store.committed_desired_set_count().unwrap(), 1);
        assert_eq!(store.desired_set_count().unwrap(), 1);

        let head = store.journal().head_position().unwrap();
        assert_eq!(commit(&store, &r, 3).unwrap(), committed);
        assert_eq!(store.journal().head_position().unwrap(), head);
        let e = store
            .mark_desired_set_committed(r.desired_set_ref(), 3, &d("other"), &d("transition"))
            .unwrap_err();
        assert_eq!(e, CONFLICT_COMMIT);
        assert_eq!(
            e.to_string(),
            "desired-set commit is already bound differently"
        );
        assert_eq!(
            store.load_desired_set(r.desired_set_ref()).unwrap(),
            committed
        );
        assert_eq!(
            store.load_latest_desired_set(parent.query_ref()).unwrap(),
            committed
        );
        // A committed record is still returned unchanged by an exact reservation retry.
        assert_eq!(
            reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap(),
            committed
        );
    }

    #[test]
    fn the_commit_append_goes_into_a_caller_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let event = desired_event(&parent, "ev-d1", 2, &f.decision.event_id, &["skill:alpha"]);
        let r = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        let append = store
            .desired_commit_append(
                r.desired_set_ref(),
                3,
                &d("engine-record"),
                &d("transition"),
            )
            .unwrap();
        let result = store.journal().append_batch(vec![append.clone()]).map(drop);
        let committed = store
            .desired_commit_outcome(r.desired_set_ref(), &append, result)
            .unwrap();
        assert_eq!(committed.journal_revision(), Some(3));
        // The same binding again is the identical append: the journal replays it.
        let again = store
            .desired_commit_append(
                r.desired_set_ref(),
                3,
                &d("engine-record"),
                &d("transition"),
            )
            .unwrap();
        assert_eq!(again, append);
        let result = store.journal().append(again.clone()).map(drop);
        assert_eq!(
            store
                .desired_commit_outcome(r.desired_set_ref(), &again, result)
                .unwrap(),
            committed
        );
        // An append of another desired set is not this one's commit.
        assert!(matches!(
            store.desired_commit_outcome(&format!("mds_{}", "0".repeat(64)), &append, Ok(())),
            Err(QueryStoreError::Invalid { .. })
        ));
    }

    #[test]
    fn the_stream_chain_rules() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f1 = fixture("q1", "s1", "plan-1");
        let p1 = planned(&store, &f1);
        let f2 = other_host("q2", "s1", "plan-2");
        let p2 = planned(&store, &f2);
        let a = ["skill:alpha"];

        let e1 = desired_event(&p1, "ev-d1", 2, &f1.decision.event_id, &a);
        let r1 = reserve(&store, &p1, "c1", &e1, &a).unwrap();
        commit(&store, &r1, 3).unwrap();

        // The second choice of q1 must be caused by the first one's event.
        let wrong_cause = desired_event(&p1, "ev-d2", 5, &f1.decision.event_id, &a);
        assert_eq!(
            reserve(&store, &p1, "c2", &wrong_cause, &a)
                .unwrap_err()
                .to_string(),
            "desired-set event causation does not follow the committed stream"
        );
        let same_revision = desired_event(&p1, "ev-d2", 2, "ev-d1", &a);
        assert_eq!(
            reserve(&store, &p1, "c2", &same_revision, &a)
                .unwrap_err()
                .to_string(),
            "desired-set stream revision is already reserved"
        );
        let e2 = desired_event(&p1, "ev-d2", 5, "ev-d1", &a);
        let r2 = reserve(&store, &p1, "c2", &e2, &a).unwrap();
        assert_eq!(store.load_latest_desired_set(p1.query_ref()).unwrap(), r2);
        commit(&store, &r2, 6).unwrap();

        // q2 (same engine stream) starts its own chain at its decision event, above revision 5.
        let stale = desired_event(&p2, "ev-q2-d1", 4, &f2.decision.event_id, &a);
        assert_eq!(
            reserve(&store, &p2, "c1", &stale, &a)
                .unwrap_err()
                .to_string(),
            "desired-set revision does not follow the latest committed reservation"
        );
        let taken = desired_event(&p2, "ev-q2-d1", 5, &f2.decision.event_id, &a);
        assert_eq!(
            reserve(&store, &p2, "c1", &taken, &a)
                .unwrap_err()
                .to_string(),
            "desired-set stream revision is already reserved"
        );
        let chained_elsewhere = desired_event(&p2, "ev-q2-d1", 7, "ev-d2", &a);
        assert_eq!(
            reserve(&store, &p2, "c1", &chained_elsewhere, &a)
                .unwrap_err()
                .to_string(),
            "desired-set event causation does not follow the committed stream"
        );
        let q2 = desired_event(&p2, "ev-q2-d1", 7, &f2.decision.event_id, &a);
        let r3 = reserve(&store, &p2, "c1", &q2, &a).unwrap();
        assert_eq!(
            store.load_pending_desired_set(&f1.decision.scope).unwrap(),
            r3
        );

        // Every record still reads back through its chain.
        let c1 = store.load_desired_set(r1.desired_set_ref()).unwrap();
        assert_eq!(c1.journal_revision(), Some(3));
        let c2 = store.load_desired_set(r2.desired_set_ref()).unwrap();
        assert_eq!(c2.event().causation_id.as_deref(), Some("ev-d1"));
        assert_eq!(c2.journal_revision(), Some(6));
        assert_eq!(store.load_latest_desired_set(p1.query_ref()).unwrap(), c2);
        assert_eq!(store.desired_set_count().unwrap(), 3);
        assert_eq!(store.committed_desired_set_count().unwrap(), 2);
    }

    #[test]
    fn reservations_are_validated_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let unplanned = register(&store, &fixture("q2", "s2", "plan-1")).unwrap();
        let parent = planned(&store, &f);
        let cause = f.decision.event_id.clone();
        let a = ["skill:alpha"];
        let good = desired_event(&parent, "ev-d1", 2, &cause, &a);
        let head = store.journal().head_position().unwrap();
        let message = |r: Result<DesiredSetRecord, QueryStoreError>| r.unwrap_err().to_string();

        let stray = desired_event(&unplanned, "ev-d1", 2, &cause, &a);
        assert_eq!(
            message(reserve(&store, &unplanned, "c1", &stray, &a)),
            "desired-set parent query is not planned"
        );
        assert_eq!(
            message(store.reserve_desired_set(
                &format!("mqr_{}", "1".repeat(64)),
                &d("c1"),
                &ids(&a),
                &good
            )),
            "desired-set parent query is unavailable"
        );
        assert_eq!(
            message(store.reserve_desired_set("mqr_x", &d("c1"), &ids(&a), &good)),
            "query_ref must be an opaque managed-query reference"
        );
        assert_eq!(
            message(store.reserve_desired_set(parent.query_ref(), "c1", &ids(&a), &good)),
            "logical_choice_id must be a lowercase SHA-256 digest"
        );
        let six = [
            "skill:a", "skill:b", "skill:c", "skill:d", "skill:e", "skill:f",
        ];
        assert_eq!(
            message(reserve(&store, &parent, "c1", &good, &six)),
            "capability_ids cannot contain more than five choices"
        );
        assert_eq!(
            message(reserve(
                &store,
                &parent,
                "c1",
                &good,
                &["skill:alpha", "skill:alpha"]
            )),
            "capability_ids must be unique"
        );
        assert_eq!(
            message(reserve(&store, &parent, "c1", &good, &["not a token"])),
            "capability_ids must contain canonical capability tokens"
        );
        assert_eq!(
            message(reserve(&store, &parent, "c1", &good, &["skill:beta"])),
            "desired-set capability IDs do not match the exact event choice"
        );

        let mut e = good.clone();
        e.kind = EventKind::DevelopmentObserved;
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set event must be ReassessmentRequested"
        );
        let early = desired_event(&parent, "ev-d1", 1, &cause, &a);
        assert_eq!(
            message(reserve(&store, &parent, "c1", &early, &a)),
            "desired-set event revision cannot precede its planned parent"
        );
        let mut e = good.clone();
        e.scope.exposure_id = "exposure-2".into();
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set scope does not match its parent query"
        );
        let mut e = good.clone();
        e.correlation_id = Some("plan-2".into());
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set plan does not match its parent query"
        );
        let mut e = good.clone();
        e.random_seed = RandomSeed::Int(8);
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set replay envelope does not match its parent query"
        );
        let mut e = good.clone();
        e.payload = Json::object([("owner_id", Json::str("ctx-desired:owner"))]);
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set event payload fields are invalid"
        );
        let mut e = good.clone();
        if let Json::Obj(m) = &mut e.payload
            && let Some(Json::Arr(rows)) = m.get_mut("desired_capabilities")
            && let Json::Obj(row) = &mut rows[0]
        {
            row.insert("actionability".into(), Json::str("install"));
        }
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set capability row 0 has unexpected install identity"
        );
        let mut e = good.clone();
        e.occurred_at = "2026-12-01 10:05:00".into();
        assert_eq!(
            message(reserve(&store, &parent, "c1", &e, &a)),
            "desired-set event must be an exact EngineEvent"
        );
        assert_eq!(store.journal().head_position().unwrap(), head);
        assert_eq!(store.desired_set_count().unwrap(), 0);
        // The empty choice is a valid desired set.
        let empty = desired_event(&parent, "ev-d0", 2, &cause, &[]);
        assert!(
            reserve(&store, &parent, "c0", &empty, &[])
                .unwrap()
                .capability_ids()
                .is_empty()
        );
    }

    #[test]
    fn lookups_of_unknown_or_malformed_references() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        for bad in ["mds_ABC", "../desired", &format!("mqr_{}", "0".repeat(64))] {
            assert_eq!(
                store.load_desired_set(bad).unwrap_err().to_string(),
                "desired_set_ref must be an opaque managed desired-set reference"
            );
        }
        let e = store
            .load_desired_set(&format!("mds_{}", "0".repeat(64)))
            .unwrap_err();
        assert_eq!(e, DESIRED_NOT_FOUND);
        assert_eq!(e.to_string(), "managed desired-set record is unavailable");
        assert_eq!(
            store
                .load_latest_desired_set(parent.query_ref())
                .unwrap_err(),
            DESIRED_NOT_FOUND
        );
        assert_eq!(
            store
                .load_latest_desired_set(&format!("mqr_{}", "0".repeat(64)))
                .unwrap_err()
                .to_string(),
            "desired-set parent query is unavailable"
        );
        assert_eq!(
            store
                .load_pending_desired_set(&f.decision.scope)
                .unwrap_err(),
            PENDING_NOT_FOUND
        );
        assert!(matches!(
            store.desired_commit_append(&format!("mds_{}", "0".repeat(64)), 3, &d("r"), &d("t")),
            Err(QueryStoreError::NotFound { .. })
        ));
    }

    #[test]
    fn capacity_is_enforced_with_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        store
            .journal()
            .maintain(|tx| {
                tx.insert(
                    QUERY_COUNTS_TABLE,
                    COUNT_DESIRED_SETS_KEY,
                    &DESIRED_SETS_MAX.to_le_bytes(),
                )
                .map(|()| ((), true))
                .map_err(HookError::from)
            })
            .unwrap();
        let event = desired_event(&parent, "ev-d1", 2, &f.decision.event_id, &["skill:alpha"]);
        let e = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap_err();
        assert!(
            matches!(e, QueryStoreError::CapacityExceeded { .. }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), DESIRED_CAPACITY_MESSAGE);
        assert!(DESIRED_CAPACITY_MESSAGE.contains(&format!(" {DESIRED_SETS_MAX} desired sets")));
        assert_eq!(refusal(codes::DESIRED_CAPACITY), Some(e));
        // Committed desired sets do not count: with one of the reserved ones committed there is
        // room for one more pending reservation.
        let set_committed = |n: u64| {
            store
                .journal()
                .maintain(|tx| {
                    tx.insert(
                        QUERY_COUNTS_TABLE,
                        COUNT_DESIRED_COMMITTED_KEY,
                        &n.to_le_bytes(),
                    )
                    .map(|()| ((), true))
                    .map_err(HookError::from)
                })
                .unwrap()
        };
        set_committed(1);
        assert_eq!(
            store.pending_desired_set_count().unwrap(),
            DESIRED_SETS_MAX - 1
        );
        let r = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        assert!(!r.is_committed());
        assert_eq!(store.pending_desired_set_count().unwrap(), DESIRED_SETS_MAX);
        // A count that says more were committed than reserved is corruption, never room.
        set_committed(DESIRED_SETS_MAX + 2);
        assert!(matches!(
            store.pending_desired_set_count(),
            Err(QueryStoreError::Corruption { .. })
        ));
    }

    #[test]
    fn committed_desired_sets_leave_the_capacity_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let a = ["skill:alpha"];
        let mut causation = f.decision.event_id.clone();
        for i in 0..5u64 {
            let id = format!("ev-d{i}");
            let e = desired_event(&parent, &id, 2 + i, &causation, &a);
            let r = reserve(&store, &parent, &format!("c{i}"), &e, &a).unwrap();
            assert_eq!(store.pending_desired_set_count().unwrap(), 1);
            commit(&store, &r, 3 + i).unwrap();
            assert_eq!(store.pending_desired_set_count().unwrap(), 0);
            causation = id;
        }
        assert_eq!(store.desired_set_count().unwrap(), 5);
        assert_eq!(store.committed_desired_set_count().unwrap(), 5);
    }

    #[test]
    fn rebuild_gives_the_same_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        for i in 0..4 {
            let f = fixture(&format!("q{i}"), &format!("s{i}"), "plan-1");
            let parent = planned(&store, &f);
            let a = ["skill:alpha"];
            let e1 = desired_event(&parent, &format!("ev-{i}-1"), 2, &f.decision.event_id, &a);
            let r1 = reserve(&store, &parent, "c1", &e1, &a).unwrap();
            if i % 2 == 0 {
                commit(&store, &r1, 3).unwrap();
                let e2 = desired_event(&parent, &format!("ev-{i}-2"), 3, &format!("ev-{i}-1"), &a);
                reserve(&store, &parent, "c2", &e2, &a).unwrap();
            }
        }
        assert_eq!(store.desired_set_count().unwrap(), 6);
        assert_eq!(store.committed_desired_set_count().unwrap(), 2);
        let projections = store.projections();
        let report = projections.check(QUERY_STORE_PROJECTION).unwrap();
        assert!(report.is_equal(), "{report:?}");
        let before = projections.digest(QUERY_STORE_PROJECTION).unwrap();
        projections.rebuild(QUERY_STORE_PROJECTION).unwrap();
        assert_eq!(projections.digest(QUERY_STORE_PROJECTION).unwrap(), before);
        drop(store);
        let store = open(dir.path(), 1);
        assert_eq!(
            store.projections().digest(QUERY_STORE_PROJECTION).unwrap(),
            before
        );
        assert_eq!(store.desired_set_count().unwrap(), 6);
    }

    #[test]
    fn an_altered_desired_index_entry_is_refused_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), 1);
        let f = fixture("q1", "s1", "plan-1");
        let parent = planned(&store, &f);
        let event = desired_event(&parent, "ev-d1", 2, &f.decision.event_id, &["skill:alpha"]);
        let r = reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        let reference = parse_desired_ref(r.desired_set_ref()).unwrap();
        let mut entry = store.desired_entry(&reference).unwrap().unwrap();
        entry.expected_revision = 9;
        let bytes = archive::to_bytes(&entry).unwrap();
        store
            .journal()
            .maintain(|tx| {
                tx.insert(DESIRED_BY_REF_TABLE, &reference, &bytes)
                    .map(|()| ((), true))
                    .map_err(HookError::from)
            })
            .unwrap();
        let e = store.load_desired_set(r.desired_set_ref()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "managed desired-set index authentication failed"
        );
        assert!(
            !store
                .projections()
                .check(QUERY_STORE_PROJECTION)
                .unwrap()
                .is_equal()
        );
        store.projections().rebuild(QUERY_STORE_PROJECTION).unwrap();
        assert_eq!(store.load_desired_set(r.desired_set_ref()).unwrap(), r);
    }

    #[test]
    fn a_desired_record_altered_on_disk_is_refused() {
        // Payloads stored as is, so the edit below finds its text (spec/journal.md §4, R7).
        let _as_is = ctx_journal::StorePayloadsAsIs::new();
        let dir = tempfile::tempdir().unwrap();
        let f = fixture("q1", "s1", "plan-1");
        {
            let store = open(dir.path(), 1);
            let parent = planned(&store, &f);
            let event = desired_event(&parent, "ev-d1", 2, &f.decision.event_id, &["skill:alpha"]);
            reserve(&store, &parent, "c1", &event, &["skill:alpha"]).unwrap();
        }
        // The policy digest is only in the reservation's payload.
        let hits = tamper_file(dir.path(), d("policy").as_bytes(), d("altered").as_bytes());
        assert!(hits >= 1);
        assert!(dir.path().join(files::DATABASE_FILE).exists());
        let journal = open_journal(dir.path(), 1);
        let e = QueryStore::open(Arc::clone(&journal)).unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
        let stream = query_stream(&f.logical).unwrap();
        let err = journal.read_stream(&stream, 3, 1).unwrap_err();
        assert_eq!(
            desired_read_error(err).to_string(),
            "desired-set row authentication failed"
        );
        // The query's own records are intact.
        assert_eq!(journal.read_stream(&stream, 1, 2).unwrap().len(), 2);
    }
}
