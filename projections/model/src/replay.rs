//! Replay inputs (spec/engine.md §10): the privacy-safe, frozen input from which a reducer
//! output is recomputed bit for bit.

use crate::digest::{cj_digest, sha256_hex};
use crate::json::{Json, JsonError, JsonMap, JsonView};
use crate::protocol::{
    ActionKind, EVENT_DIGEST_METADATA, EVENT_TEXT_METADATA, EngineEvent, EventKind, RandomSeed,
    ScopeRef, has_exact_keys,
};
use crate::replay_error::ReplayError;
use crate::replay_error::{
    pfail, r_allowed, r_bounded, r_digest, r_exact, r_nonnegative, r_sequence, r_token,
    r_token_array, r_token_str, vfail,
};
use crate::shape::is_sha;
use crate::vocab::{CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3, CapabilityKind};

pub const REPLAY_SCHEMA: &str = "ctx.engine.replay-input";
pub const REPLAY_SCHEMA_VERSION: i64 = 1;
pub const REDUCER_V3: &str = "ctx-reducer-v3";
pub const NORMALIZER_VERSION_DEFAULT: &str = "ctx-normalizer-structured-v1";

/// `{schema_id, schema_version, value, value_digest}` with `value_digest = H(CJ(value))`.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Surrogate {
    pub schema_id: String,
    pub schema_version: i64,
    pub value: Json,
    pub value_digest: String,
}

impl Surrogate {
    /// A surrogate over `value` with its digest computed.
    pub fn new(schema_id: &str, schema_version: i64, value: Json) -> Surrogate {
        let value_digest = cj_digest(&value);
        Surrogate {
            schema_id: schema_id.to_owned(),
            schema_version,
            value,
            value_digest,
        }
    }

    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("schema_id", JsonView::Str(&self.schema_id)),
            ("schema_version", JsonView::Int(self.schema_version)),
            ("value", JsonView::Json(&self.value)),
            ("value_digest", JsonView::Str(&self.value_digest)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }
}

/// The input of one reduction as stored in the journal.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ReplayInput {
    pub decision_surrogate: Option<Surrogate>,
    pub normalizer_version: String,
    pub observation_surrogate: Option<Surrogate>,
    /// The sanitized event the reducer sees; every derived id uses its content digest.
    pub reducer_event: EngineEvent,
    pub reducer_version: String,
    /// Content digest of the host's source event.
    pub source_event_content_digest: String,
}

impl ReplayInput {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            (
                "decision_surrogate",
                self.decision_surrogate
                    .as_ref()
                    .map_or(JsonView::Null, Surrogate::view),
            ),
            (
                "normalizer_version",
                JsonView::Str(&self.normalizer_version),
            ),
            (
                "observation_surrogate",
                self.observation_surrogate
                    .as_ref()
                    .map_or(JsonView::Null, Surrogate::view),
            ),
            ("reducer_event", self.reducer_event.view()),
            ("reducer_version", JsonView::Str(&self.reducer_version)),
            ("schema", JsonView::Str(REPLAY_SCHEMA)),
            ("schema_version", JsonView::Int(REPLAY_SCHEMA_VERSION)),
            (
                "source_event_content_digest",
                JsonView::Str(&self.source_event_content_digest),
            ),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    /// The canonical replay JSON text stored in the engine record.
    pub fn to_cj(&self) -> String {
        self.view().to_cj()
    }
}

// =============================================================================================
// Replay validation (spec/engine.md §10), reducer v3 only.

/// Deepest nesting a surrogate or ingress payload may have.
pub const JSON_MAX_DEPTH: usize = 8;
/// Largest serialized surrogate.
pub const SURROGATE_MAX_BYTES: usize = 16 * 1024;
/// Largest replay input JSON.
pub const REPLAY_MAX_BYTES: usize = 64 * 1024;
/// Largest ingress event (source JSON, and the payload size estimate).
pub const INGRESS_MAX_BYTES: usize = 256 * 1024;
/// Largest single ingress string or key.
pub const INGRESS_STRING_MAX_BYTES: usize = 64 * 1024;
/// Most items in one object or array.
pub const COLLECTION_MAX_ITEMS: usize = 100;
/// Most container items in one ingress payload.
pub const INGRESS_TOTAL_MAX_ITEMS: usize = 500;
pub const OPAQUE_REF_SCHEMA: &str = "ctx.observation.opaque-ref";
pub const CURRENT_WORK_SCHEMA: &str = "ctx.observation.current-work";
/// The code every host failure is redacted to before it enters the journal.
pub const REDACTED_HOST_FAILURE: &str = "redacted-host-failure";

fn field<'a>(m: &'a JsonMap, key: &str) -> &'a Json {
    m.get(key).unwrap_or(&Json::Null)
}

fn from_protocol(e: crate::protocol::ProtocolError) -> ReplayError {
    ReplayError::Validation(e.message().to_owned())
}

// ---------------------------------------------------------------------------------------------
// Structured surrogates (spec/engine.md §10)

/// Which slot of a replay input a surrogate fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurrogateRole {
    Observation,
    Decision,
}

const SURROGATE_KEYS: [&str; 4] = ["schema_id", "schema_version", "value", "value_digest"];
const CURRENT_WORK_KEYS: [&str; 6] = [
    "active_capability_ids",
    "baseline_capability_ids",
    "languages",
    "rejected_capability_ids",
    "requested_limit",
    "signals",
];

/// The surrogate freeze rules: depth ≤ 8, ≤ 100 items per container, every string value and
/// every key an opaque token — so free text cannot enter the journal through a surrogate.
fn check_frozen(value: &Json, depth: usize) -> Result<(), ReplayError> {
    if depth > JSON_MAX_DEPTH {
        return vfail("structured surrogate exceeds the maximum depth");
    }
    match value {
        Json::Null | Json::Bool(_) | Json::Int(_) | Json::Float(_) => Ok(()),
        Json::Str(s) => r_token_str(s, "structured surrogate string").map(|_| ()),
        Json::Obj(m) => {
            if m.len() > COLLECTION_MAX_ITEMS {
                return vfail("structured surrogate object exceeds its item limit");
            }
            for (k, v) in m {
                r_token_str(k, "structured surrogate field name")?;
                check_frozen(v, depth + 1)?;
            }
            Ok(())
        }
        Json::Arr(a) => {
            if a.len() > COLLECTION_MAX_ITEMS {
                return vfail("structured surrogate array exceeds its item limit");
            }
            a.iter().try_for_each(|v| check_frozen(v, depth + 1))
        }
    }
}

impl Surrogate {
    /// Decodes a surrogate mapping (exactly its four keys) and checks the construction rules.
    pub fn from_json(v: &Json) -> Result<Surrogate, ReplayError> {
        let m = r_exact(v, &SURROGATE_KEYS, "structured surrogate")?;
        let value = field(m, "value");
        if value.as_obj().is_none() {
            return vfail("structured surrogate value must be an object");
        }
        let surrogate = Surrogate {
            schema_id: r_token(field(m, "schema_id"), "schema_id")?.to_owned(),
            schema_version: match field(m, "schema_version") {
                Json::Int(i) => *i,
                _ => return vfail("schema_version must be a positive integer"),
            },
            value: value.clone(),
            value_digest: r_digest(field(m, "value_digest"), "value_digest")?.to_owned(),
        };
        surrogate.validate()?;
        Ok(surrogate)
    }

    /// The construction rules every surrogate meets, whatever its schema: token schema id,
    /// positive version, an object value under the freeze rules, `value_digest = H(CJ(value))`,
    /// and at most 16 KiB serialized.
    pub fn validate(&self) -> Result<(), ReplayError> {
        r_token_str(&self.schema_id, "schema_id")?;
        if self.schema_version < 1 {
            return vfail("schema_version must be a positive integer");
        }
        check_frozen(&self.value, 0)?;
        if self.value.as_obj().is_none() {
            return vfail("structured surrogate value must be an object");
        }
        if !is_sha(&self.value_digest) {
            return pfail("value_digest must be a lowercase SHA-256 digest");
        }
        if self.value_digest != cj_digest(&self.value) {
            return Err(ReplayError::Binding(
                "value_digest does not match the structured value".into(),
            ));
        }
        if self.view().to_cj().len() > SURROGATE_MAX_BYTES {
            return vfail("structured surrogate exceeds its size limit");
        }
        Ok(())
    }
}

fn validate_current_work(value: &Json) -> Result<(), ReplayError> {
    let m = r_exact(value, &CURRENT_WORK_KEYS, "current-work observation")?;
    r_token_array(field(m, "signals"), "signals", 32)?;
    r_token_array(field(m, "languages"), "languages", 10)?;
    r_token_array(
        field(m, "baseline_capability_ids"),
        "baseline_capability_ids",
        100,
    )?;
    r_token_array(
        field(m, "active_capability_ids"),
        "active_capability_ids",
        crate::protocol::ACTIVE_CAPABILITIES_MAX,
    )?;
    r_token_array(
        field(m, "rejected_capability_ids"),
        "rejected_capability_ids",
        100,
    )?;
    r_bounded(field(m, "requested_limit"), "requested_limit", 5)?;
    Ok(())
}

/// Checks a surrogate against the schemas approved for `role` under contract 3: observation
/// `ctx.observation.opaque-ref` v1 and `ctx.observation.current-work` v1, decision
/// `ctx.decision.capability-plan` v3. Anything else is refused as a privacy fault.
pub fn validate_surrogate(s: &Surrogate, role: SurrogateRole) -> Result<(), ReplayError> {
    s.validate()?;
    match (role, s.schema_id.as_str(), s.schema_version) {
        (SurrogateRole::Observation, OPAQUE_REF_SCHEMA, 1) => {
            let m = r_exact(
                &s.value,
                &["content_digest", "provider_id"],
                "opaque observation surrogate",
            )?;
            r_token(field(m, "provider_id"), "observation provider_id")?;
            r_digest(field(m, "content_digest"), "observation content_digest")?;
            Ok(())
        }
        (SurrogateRole::Observation, CURRENT_WORK_SCHEMA, 1) => validate_current_work(&s.value),
        (SurrogateRole::Decision, CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3) => {
            crate::plan::validate_capability_plan_value(&s.value)
        }
        _ => pfail("surrogate schema is not approved for authoritative replay"),
    }
}

// ---------------------------------------------------------------------------------------------
// Event checks shared by preflight and persisted-event validation

/// Every scope id must be a token: scope ids are journaled in clear.
fn check_scope(scope: &ScopeRef) -> Result<(), ReplayError> {
    for (name, value) in [
        ("tenant_id", &scope.tenant_id),
        ("workspace_id", &scope.workspace_id),
        ("repository_id", &scope.repository_id),
        ("session_id", &scope.session_id),
        ("exposure_id", &scope.exposure_id),
        ("host_context_id", &scope.host_context_id),
    ] {
        r_token_str(value, name)?;
    }
    if let Some(parent) = &scope.parent_exposure_id {
        r_token_str(parent, "parent_exposure_id")?;
    }
    Ok(())
}

/// Text metadata must be tokens and digest metadata digests; a string seed must be a token.
fn check_metadata(event: &EngineEvent) -> Result<(), ReplayError> {
    for name in EVENT_TEXT_METADATA {
        if let Some(v) = event.text_metadata(name) {
            r_token_str(v, name)?;
        }
    }
    for name in EVENT_DIGEST_METADATA {
        if let Some(v) = event.text_metadata(name)
            && !is_sha(v)
        {
            return pfail(format!("{name} must be a lowercase SHA-256 digest"));
        }
    }
    if let RandomSeed::Str(s) = &event.random_seed {
        r_token_str(s, "random_seed")?;
    }
    Ok(())
}

fn check_retention(event: &EngineEvent) -> Result<(), ReplayError> {
    if event.privacy.is_replay_safe() {
        Ok(())
    } else {
        pfail("event retention is not safe for authoritative replay")
    }
}

/// Bounds hostile raw payloads before they are serialized and hashed; returns the size estimate
/// (scalars 16, strings their UTF-8 length, containers 2 plus contents).
fn ingress_size(value: &Json, depth: usize, budget: &mut usize) -> Result<usize, ReplayError> {
    if depth > JSON_MAX_DEPTH {
        return vfail("ingress event exceeds the maximum depth");
    }
    match value {
        Json::Null | Json::Bool(_) | Json::Int(_) | Json::Float(_) => Ok(16),
        Json::Str(s) => {
            if s.len() > INGRESS_STRING_MAX_BYTES {
                return vfail("ingress event exceeds its size limit");
            }
            Ok(s.len())
        }
        Json::Obj(m) => {
            if m.len() > COLLECTION_MAX_ITEMS {
                return vfail("ingress object exceeds its item limit");
            }
            *budget += m.len();
            if *budget > INGRESS_TOTAL_MAX_ITEMS {
                return vfail("ingress event exceeds its total item limit");
            }
            let mut total = 2usize;
            for (k, v) in m {
                if k.len() > INGRESS_STRING_MAX_BYTES {
                    return vfail("ingress event exceeds its per-string size limit");
                }
                total = total.saturating_add(k.len()).saturating_add(ingress_size(
                    v,
                    depth + 1,
                    budget,
                )?);
                if total > INGRESS_MAX_BYTES {
                    return vfail("ingress event exceeds its size limit");
                }
            }
            Ok(total)
        }
        Json::Arr(a) => {
            if a.len() > COLLECTION_MAX_ITEMS {
                return vfail("ingress array exceeds its item limit");
            }
            *budget += a.len();
            if *budget > INGRESS_TOTAL_MAX_ITEMS {
                return vfail("ingress event exceeds its total item limit");
            }
            let mut total = 2usize;
            for v in a {
                total = total.saturating_add(ingress_size(v, depth + 1, budget)?);
                if total > INGRESS_MAX_BYTES {
                    return vfail("ingress event exceeds its size limit");
                }
            }
            Ok(total)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payload sanitization (spec/engine.md §3, reducer v3)

/// The opaque observation reference of an observation event. Kept in memory only and handed to
/// the observation normalizer; it never enters replay JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationRef {
    pub provider_id: String,
    pub opaque_id: String,
    pub content_digest: String,
}

const RECEIPT_IDENTITY: [&str; 4] = [
    "action_content_digest",
    "action_id",
    "action_kind",
    "action_precondition_revision",
];
const V3_DESIRED_KEYS: [&str; 3] = ["desired_capabilities", "owner_id", "policy_snapshot_digest"];
const V3_REFERENCE_KEYS: [&str; 7] = [
    "actionability",
    "capability_id",
    "install_descriptor_digest",
    "install_plan_digest",
    "kind",
    "lease_id",
    "source_digest",
];

fn receipt_identity(m: &JsonMap) -> Result<JsonMap, ReplayError> {
    let mut out = JsonMap::new();
    out.insert(
        "action_id".into(),
        Json::str(r_token(field(m, "action_id"), "action_id")?),
    );
    out.insert(
        "action_kind".into(),
        Json::str(r_token(field(m, "action_kind"), "action_kind")?),
    );
    out.insert(
        "action_content_digest".into(),
        Json::str(r_digest(
            field(m, "action_content_digest"),
            "action_content_digest",
        )?),
    );
    out.insert(
        "action_precondition_revision".into(),
        Json::Int(r_nonnegative(
            field(m, "action_precondition_revision"),
            "action_precondition_revision",
        )?),
    );
    Ok(out)
}

/// `{capability_id, source_digest}` (the submission and tool-call references).
fn capability_reference(value: &Json) -> Result<Json, ReplayError> {
    let m = r_exact(
        value,
        &["capability_id", "source_digest"],
        "capability reference",
    )?;
    Ok(Json::object([
        (
            "capability_id",
            Json::str(r_token(field(m, "capability_id"), "capability_id")?),
        ),
        (
            "source_digest",
            Json::str(r_digest(field(m, "source_digest"), "source_digest")?),
        ),
    ]))
}

/// One v3 desired-set row: the plan row identity plus a lease.
fn desired_reference(value: &Json) -> Result<Json, ReplayError> {
    let m = r_exact(value, &V3_REFERENCE_KEYS, "v3 capability reference")?;
    let id = r_token(field(m, "capability_id"), "capability_id")?;
    let kind = r_token(field(m, "kind"), "kind")?;
    if CapabilityKind::parse(kind).is_none() || id.to_ascii_lowercase() != id {
        return vfail("v3 capability reference kind is unsupported");
    }
    let actionability = r_token(field(m, "actionability"), "actionability")?;
    if !matches!(actionability, "load" | "install" | "manual") {
        return vfail("v3 capability reference actionability is unsupported");
    }
    let descriptor = field(m, "install_descriptor_digest");
    let plan = field(m, "install_plan_digest");
    if actionability == "install" {
        r_digest(descriptor, "install_descriptor_digest")?;
        r_digest(plan, "install_plan_digest")?;
    } else if !descriptor.is_null() || !plan.is_null() {
        return vfail("install digests are allowed only for install actionability");
    }
    Ok(Json::object([
        ("actionability", Json::str(actionability)),
        ("capability_id", Json::str(id)),
        ("install_descriptor_digest", descriptor.clone()),
        ("install_plan_digest", plan.clone()),
        ("kind", Json::str(kind)),
        (
            "lease_id",
            Json::str(r_token(field(m, "lease_id"), "lease_id")?),
        ),
        (
            "source_digest",
            Json::str(r_digest(field(m, "source_digest"), "source_digest")?),
        ),
    ]))
}

/// The payload the v3 reducer sees for `event`, and the observation reference of an observation
/// event. Host free text never survives: observations become `{}`, failure codes are redacted.
fn sanitize_payload(event: &EngineEvent) -> Result<(Json, Option<ObservationRef>), ReplayError> {
    let payload = &event.payload;
    let empty = Json::Obj(JsonMap::new());
    match event.kind {
        EventKind::SessionStarted => {
            let m = r_allowed(payload, &["host_level"], "SessionStarted payload")?;
            let level = match m.get("host_level") {
                None => "query-only",
                Some(v) => match v.as_str() {
                    Some(s) if crate::state::HostLevel::parse(s).is_some() => s,
                    _ => return vfail("SessionStarted host_level is unsupported"),
                },
            };
            Ok((Json::object([("host_level", Json::str(level))]), None))
        }
        EventKind::ReassessmentRequested => {
            let Some(m) = payload.as_obj() else {
                return vfail("ReassessmentRequested payload has an unsupported schema");
            };
            if has_exact_keys(m, &V3_DESIRED_KEYS) {
                let rows = r_sequence(field(m, "desired_capabilities"), "desired_capabilities", 5)?
                    .iter()
                    .map(desired_reference)
                    .collect::<Result<Vec<_>, _>>()?;
                let owner = r_token(field(m, "owner_id"), "owner_id")?;
                let policy =
                    r_digest(field(m, "policy_snapshot_digest"), "policy_snapshot_digest")?;
                return Ok((
                    Json::object([
                        ("desired_capabilities", Json::Arr(rows)),
                        ("owner_id", Json::str(owner)),
                        ("policy_snapshot_digest", Json::str(policy)),
                    ]),
                    None,
                ));
            }
            if has_exact_keys(m, &["retry_failed_deactivations"]) {
                let ids = r_sequence(
                    field(m, "retry_failed_deactivations"),
                    "retry_failed_deactivations",
                    5,
                )?
                .iter()
                .map(|v| r_token(v, "retry capability_id").map(Json::str))
                .collect::<Result<Vec<_>, _>>()?;
                return Ok((
                    Json::object([("retry_failed_deactivations", Json::Arr(ids))]),
                    None,
                ));
            }
            vfail("ReassessmentRequested payload has an unsupported schema")
        }
        EventKind::ProviderSubmissionObserved => {
            let m = r_exact(
                payload,
                &["capabilities"],
                "ProviderSubmissionObserved payload",
            )?;
            let rows = r_sequence(field(m, "capabilities"), "capabilities", 5)?
                .iter()
                .map(capability_reference)
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Json::object([("capabilities", Json::Arr(rows))]), None))
        }
        EventKind::ToolCallObserved => {
            let m = r_exact(
                payload,
                &["capability_id", "outcome", "source_digest"],
                "ToolCallObserved payload",
            )?;
            let outcome = match field(m, "outcome").as_str() {
                Some(o @ ("failed" | "succeeded")) => o,
                _ => return vfail("ToolCallObserved outcome is unsupported"),
            };
            Ok((
                Json::object([
                    (
                        "capability_id",
                        Json::str(r_token(field(m, "capability_id"), "capability_id")?),
                    ),
                    ("outcome", Json::str(outcome)),
                    (
                        "source_digest",
                        Json::str(r_digest(field(m, "source_digest"), "source_digest")?),
                    ),
                ]),
                None,
            ))
        }
        EventKind::TurnStarting | EventKind::TurnEnded | EventKind::SessionEnded => {
            r_exact(payload, &[], &format!("{} payload", event.kind))?;
            Ok((empty, None))
        }
        EventKind::UserDecision => {
            let m = r_exact(
                payload,
                &crate::protocol::USER_DECISION_KEYS,
                "UserDecision payload",
            )?;
            let basis = match field(m, "decision_basis").as_str() {
                Some(b @ ("interactive" | "preapproved-policy")) => b,
                _ => return vfail("UserDecision decision_basis is unsupported"),
            };
            let out = Json::object([
                (
                    "consent_id",
                    Json::str(r_token(field(m, "consent_id"), "consent_id")?),
                ),
                ("decision", field(m, "decision").clone()),
                (
                    "requested_action_id",
                    Json::str(r_token(
                        field(m, "requested_action_id"),
                        "requested_action_id",
                    )?),
                ),
                (
                    "requested_action_kind",
                    field(m, "requested_action_kind").clone(),
                ),
                (
                    "requested_action_content_digest",
                    Json::str(r_digest(
                        field(m, "requested_action_content_digest"),
                        "requested_action_content_digest",
                    )?),
                ),
                (
                    "requested_action_precondition_revision",
                    Json::Int(r_nonnegative(
                        field(m, "requested_action_precondition_revision"),
                        "requested_action_precondition_revision",
                    )?),
                ),
                ("decision_basis", Json::str(basis)),
                (
                    "policy_snapshot_digest",
                    Json::str(r_digest(
                        field(m, "policy_snapshot_digest"),
                        "policy_snapshot_digest",
                    )?),
                ),
            ]);
            Ok((out, None))
        }
        EventKind::InstallConsentExpired => {
            let m = r_exact(
                payload,
                &crate::protocol::CONSENT_EXPIRED_KEYS,
                "InstallConsentExpired payload",
            )?;
            let out = Json::object([
                (
                    "consent_id",
                    Json::str(r_token(field(m, "consent_id"), "consent_id")?),
                ),
                (
                    "install_expires_at",
                    Json::str(r_token(
                        field(m, "install_expires_at"),
                        "install_expires_at",
                    )?),
                ),
                (
                    "policy_snapshot_digest",
                    Json::str(r_digest(
                        field(m, "policy_snapshot_digest"),
                        "policy_snapshot_digest",
                    )?),
                ),
                (
                    "requested_action_id",
                    Json::str(r_token(
                        field(m, "requested_action_id"),
                        "requested_action_id",
                    )?),
                ),
                (
                    "requested_action_kind",
                    field(m, "requested_action_kind").clone(),
                ),
                (
                    "requested_action_content_digest",
                    Json::str(r_digest(
                        field(m, "requested_action_content_digest"),
                        "requested_action_content_digest",
                    )?),
                ),
                (
                    "requested_action_precondition_revision",
                    Json::Int(r_nonnegative(
                        field(m, "requested_action_precondition_revision"),
                        "requested_action_precondition_revision",
                    )?),
                ),
            ]);
            Ok((out, None))
        }
        EventKind::ActionApplied => {
            let mut keys = RECEIPT_IDENTITY.to_vec();
            keys.push("verification");
            let m = r_allowed(payload, &keys, "ActionApplied payload")?;
            let verification = field(m, "verification");
            if verification.as_obj().is_none() {
                return vfail("ActionApplied verification must be an object");
            }
            // The typed receipt rules (legacy `{host_state}` receipts are refused here), then
            // the surrogate freeze rules: the verification is journaled verbatim.
            let kind = ActionKind::parse(field(m, "action_kind").as_str().unwrap_or_default())
                .map_err(from_protocol)?;
            crate::action_contract::validate_receipt_verification(kind, verification)
                .map_err(from_protocol)?;
            check_frozen(verification, 0)?;
            let mut out = receipt_identity(m)?;
            out.insert("verification".into(), verification.clone());
            Ok((Json::Obj(out), None))
        }
        EventKind::ActionFailed => {
            let mut keys = RECEIPT_IDENTITY.to_vec();
            keys.extend(["error", "rollback"]);
            let m = r_allowed(payload, &keys, "ActionFailed payload")?;
            let mut out = receipt_identity(m)?;
            out.insert(
                "error".into(),
                Json::object([("code", Json::str(REDACTED_HOST_FAILURE))]),
            );
            Ok((Json::Obj(out), None))
        }
        EventKind::ActionExpired => {
            let mut keys = RECEIPT_IDENTITY.to_vec();
            keys.push("reason");
            let m = r_allowed(payload, &keys, "ActionExpired payload")?;
            let mut out = receipt_identity(m)?;
            out.insert("reason".into(), Json::str("expired"));
            Ok((Json::Obj(out), None))
        }
        EventKind::WorkspaceObserved
        | EventKind::IntentObserved
        | EventKind::DevelopmentObserved
        | EventKind::ValidationObserved => {
            let Some(m) = payload
                .as_obj()
                .filter(|m| has_exact_keys(m, &["observation_ref"]))
            else {
                return pfail(
                    "observation payload must contain only an opaque observation reference",
                );
            };
            let Some(r) = field(m, "observation_ref")
                .as_obj()
                .filter(|r| has_exact_keys(r, &["content_digest", "opaque_id", "provider_id"]))
            else {
                return pfail("observation reference has an unsafe schema");
            };
            let reference = ObservationRef {
                provider_id: r_token(field(r, "provider_id"), "provider_id")?.to_owned(),
                opaque_id: r_token(field(r, "opaque_id"), "opaque_id")?.to_owned(),
                content_digest: r_digest(field(r, "content_digest"), "observation content_digest")?
                    .to_owned(),
            };
            Ok((empty, Some(reference)))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Preflight (spec/engine.md §10)

/// The pure result of validating an ingress event: its content digest, the sanitized event the
/// reducer will see, and the observation reference (in memory only).
#[derive(Debug, Clone, PartialEq)]
pub struct Preflight {
    pub source_event_content_digest: String,
    pub reducer_event: EngineEvent,
    pub observation_ref: Option<ObservationRef>,
}

/// Validates an ingress event for reducer v3 before any store access: ingress bounds, retention,
/// tokens, the SessionStarted host descriptor, then per-kind sanitization.
pub fn preflight(event: &EngineEvent) -> Result<Preflight, ReplayError> {
    // The event may have been built field by field; hash exactly its validated, normalized form.
    let mut source = event.clone();
    source.validate().map_err(from_protocol)?;
    ingress_size(&source.payload, 0, &mut 0)?;
    check_retention(&source)?;
    r_token_str(&source.event_id, "event_id")?;
    check_scope(&source.scope)?;
    check_metadata(&source)?;
    if source.kind == EventKind::SessionStarted && source.host_descriptor_digest.is_none() {
        return vfail("SessionStarted requires a host descriptor digest");
    }
    let (payload, observation_ref) = sanitize_payload(&source)?;
    let mut reducer_event = source.clone();
    reducer_event.payload = payload;
    if reducer_event.validate().is_err() {
        return vfail("sanitized reducer event violates the protocol");
    }
    let source_json = source.view().to_cj();
    if source_json.len() > INGRESS_MAX_BYTES {
        return vfail("ingress event exceeds its size limit");
    }
    Ok(Preflight {
        source_event_content_digest: sha256_hex(&source_json),
        reducer_event,
        observation_ref,
    })
}

// ---------------------------------------------------------------------------------------------
// ReplayInput decoding and validation (spec/engine.md §10)

const REPLAY_KEYS: [&str; 8] = [
    "decision_surrogate",
    "normalizer_version",
    "observation_surrogate",
    "reducer_event",
    "reducer_version",
    "schema",
    "schema_version",
    "source_event_content_digest",
];

/// The reducer event as persisted: protocol-valid in its normalized form, tokens and digests,
/// safe retention, and a payload already in canonical sanitized form for reducer v3.
fn validate_persisted_event(event: &EngineEvent) -> Result<(), ReplayError> {
    let mut normalized = event.clone();
    if normalized.validate().is_err() {
        return vfail("reducer_event violates the protocol");
    }
    if normalized != *event {
        return vfail("nested replay values must use their exact canonical shape");
    }
    r_token_str(&event.event_id, "event_id")?;
    check_scope(&event.scope)?;
    check_metadata(event)?;
    check_retention(event)?;
    if event.kind.is_observation() {
        r_exact(&event.payload, &[], "reducer observation payload")?;
        return Ok(());
    }
    let (sanitized, reference) = sanitize_payload(event)?;
    if reference.is_some() || sanitized.to_cj() != event.payload.to_cj() {
        return Err(ReplayError::Binding(
            "reducer event payload is not in canonical sanitized form".into(),
        ));
    }
    Ok(())
}

impl ReplayInput {
    /// Decodes a replay input mapping: exactly its eight keys, a nested event that re-encodes to
    /// exactly the stored object, surrogates that are objects or null; then [`Self::validate`].
    pub fn from_json(v: &Json) -> Result<ReplayInput, ReplayError> {
        let m = r_exact(v, &REPLAY_KEYS, "replay input")?;
        let raw_event = field(m, "reducer_event");
        if raw_event.as_obj().is_none() {
            return vfail("reducer_event must be an object");
        }
        let reducer_event = EngineEvent::from_json(raw_event)
            .map_err(|_| ReplayError::Validation("reducer_event violates the protocol".into()))?;
        if reducer_event.to_json() != *raw_event {
            return vfail("nested replay values must use their exact canonical shape");
        }
        let surrogate = |key: &str| match field(m, key) {
            Json::Null => Ok(None),
            s @ Json::Obj(_) => Surrogate::from_json(s).map(Some),
            _ => vfail(format!("{key} must be an object or null")),
        };
        let observation_surrogate = surrogate("observation_surrogate")?;
        let decision_surrogate = surrogate("decision_surrogate")?;
        if field(m, "schema").as_str() != Some(REPLAY_SCHEMA) {
            return vfail("unsupported replay schema");
        }
        if field(m, "schema_version") != &Json::Int(REPLAY_SCHEMA_VERSION) {
            return vfail("unsupported replay schema version");
        }
        let input = ReplayInput {
            decision_surrogate,
            normalizer_version: r_token(field(m, "normalizer_version"), "normalizer_version")?
                .to_owned(),
            observation_surrogate,
            reducer_event,
            reducer_version: r_token(field(m, "reducer_version"), "reducer_version")?.to_owned(),
            source_event_content_digest: r_digest(
                field(m, "source_event_content_digest"),
                "source_event_content_digest",
            )?
            .to_owned(),
        };
        input.validate()?;
        Ok(input)
    }

    /// Decodes the replay JSON text of an engine record, which must be byte-identical to its
    /// canonical encoding.
    pub fn from_canonical_text(text: &str) -> Result<ReplayInput, ReplayError> {
        if text.len() > REPLAY_MAX_BYTES {
            return vfail("replay JSON exceeds its size limit");
        }
        let decoded = match Json::parse(text) {
            Ok(v) => v,
            Err(JsonError::DuplicateKey { .. }) => {
                return vfail("replay JSON contains a duplicate object key");
            }
            Err(_) => return vfail("replay JSON is invalid"),
        };
        if decoded.as_obj().is_none() {
            return vfail("replay JSON must contain an object");
        }
        if decoded.to_cj() != text {
            return vfail("replay JSON must use the canonical encoding");
        }
        let input = ReplayInput::from_json(&decoded)?;
        if input.to_cj() != text {
            return vfail("nested replay values must use their exact canonical shape");
        }
        Ok(input)
    }

    /// The replay input rules for reducer v3: digest and version tokens, the reducer version
    /// itself, the persisted reducer event, approved surrogates for their roles, decision/reducer
    /// compatibility and the 64 KiB bound.
    pub fn validate(&self) -> Result<(), ReplayError> {
        if !is_sha(&self.source_event_content_digest) {
            return pfail("source_event_content_digest must be a lowercase SHA-256 digest");
        }
        r_token_str(&self.normalizer_version, "normalizer_version")?;
        r_token_str(&self.reducer_version, "reducer_version")?;
        // Only the installation-contract reducer exists here; a record naming any other version
        // has no exact reducer to replay it.
        if self.reducer_version != REDUCER_V3 {
            return Err(ReplayError::Unsupported(
                "no exact reducer is registered for the requested version".into(),
            ));
        }
        validate_persisted_event(&self.reducer_event)?;
        if let Some(s) = &self.observation_surrogate {
            validate_surrogate(s, SurrogateRole::Observation)?;
        }
        if let Some(s) = &self.decision_surrogate {
            validate_surrogate(s, SurrogateRole::Decision)?;
            let compatible = s.schema_id == CAPABILITY_PLAN_SCHEMA
                && s.schema_version == CAPABILITY_PLAN_VERSION_V3
                && self.reducer_version == REDUCER_V3;
            if !compatible {
                return vfail("decision schema and reducer version are not compatible");
            }
        }
        if self.to_cj().len() > REPLAY_MAX_BYTES {
            return vfail("replay input exceeds its size limit");
        }
        Ok(())
    }

    /// Assembles the reducer-v3 replay input of a preflighted event from the surrogates the
    /// injected normalizer and planner produced: an observation reference needs an observation
    /// surrogate, a planning event needs a decision and no other event may carry one.
    pub fn assemble(
        preflight: Preflight,
        observation_surrogate: Option<Surrogate>,
        decision_surrogate: Option<Surrogate>,
        normalizer_version: &str,
    ) -> Result<ReplayInput, ReplayError> {
        match (&preflight.observation_ref, &observation_surrogate) {
            (Some(_), None) => {
                return Err(ReplayError::Unsupported(
                    "event requires a typed observation normalizer".into(),
                ));
            }
            // Only an observation reference is ever normalized; a surrogate without one would be
            // journaled without anything it describes.
            (None, Some(_)) => {
                return vfail("observation surrogate requires an observation reference");
            }
            _ => {}
        }
        if let Some(s) = &observation_surrogate {
            validate_surrogate(s, SurrogateRole::Observation)?;
        }
        let planning = preflight.reducer_event.kind.is_planning();
        if planning && decision_surrogate.is_none() {
            return vfail("planning event is missing its durable decision");
        }
        if !planning && decision_surrogate.is_some() {
            return vfail("decision is not valid for this event kind");
        }
        let input = ReplayInput {
            decision_surrogate,
            normalizer_version: r_token_str(normalizer_version, "normalizer_version")?.to_owned(),
            observation_surrogate,
            reducer_event: preflight.reducer_event,
            reducer_version: REDUCER_V3.to_owned(),
            source_event_content_digest: preflight.source_event_content_digest,
        };
        input.validate()?;
        Ok(input)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::action_contract::expected_install_receipt;
    use crate::action_contract::tests::{install_action, scope};
    use crate::documents::tests::d;
    use crate::plan::tests::ready_value;
    use crate::protocol::{PrivacyLabel, Retention};

    fn event(kind: EventKind, expected_revision: u64, payload: Json) -> EngineEvent {
        let mut e = EngineEvent::bare(
            "event-1",
            kind,
            scope(),
            expected_revision,
            "2026-01-01T10:00:00+02:00",
        );
        e.payload = payload;
        if kind.is_decision_causing() {
            e.engine_version = Some("engine-1".into());
            e.planner_version = Some("planner-1".into());
            e.policy_version = Some("policy-1".into());
            e.host_descriptor_digest = Some(d('a'));
            e.catalog_snapshot_digest = Some(d('b'));
            e.semantic_model_digest = Some(d('c'));
            e.semantic_index_digest = Some(d('d'));
            e.work_signature = Some(d('e'));
            e.random_seed = RandomSeed::Int(7);
            e.correlation_id = Some("plan-1".into());
        }
        e
    }

    fn observation_payload() -> Json {
        Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(d('1'))),
                ("opaque_id", Json::str("obs-1")),
                ("provider_id", Json::str("provider-a")),
            ]),
        )])
    }

    fn identity_payload(extra: (&str, Json)) -> Json {
        let action = install_action();
        Json::object([
            ("action_content_digest", Json::str(action.content_digest())),
            ("action_id", Json::str(action.action_id.clone())),
            ("action_kind", Json::str("InstallCapability")),
            ("action_precondition_revision", Json::Int(3)),
            extra,
        ])
    }

    fn current_work() -> Surrogate {
        Surrogate::new(
            CURRENT_WORK_SCHEMA,
            1,
            Json::object([
                ("active_capability_ids", Json::Arr(vec![])),
                ("baseline_capability_ids", Json::Arr(vec![])),
                ("languages", Json::Arr(vec![Json::str("python")])),
                ("rejected_capability_ids", Json::Arr(vec![])),
                ("requested_limit", Json::Int(5)),
                ("signals", Json::Arr(vec![Json::str("python")])),
            ]),
        )
    }

    fn decision() -> Surrogate {
        Surrogate::new(CAPABILITY_PLAN_SCHEMA, 3, ready_value())
    }

    fn planning_input() -> ReplayInput {
        let pre = preflight(&event(EventKind::IntentObserved, 1, observation_payload())).unwrap();
        ReplayInput::assemble(
            pre,
            Some(current_work()),
            Some(decision()),
            NORMALIZER_VERSION_DEFAULT,
        )
        .unwrap()
    }

    #[test]
    fn observation_payloads_become_empty_and_keep_the_reference() {
        let source = event(EventKind::IntentObserved, 1, observation_payload());
        let pre = preflight(&source).unwrap();
        assert_eq!(pre.reducer_event.payload, Json::Obj(JsonMap::new()));
        assert_eq!(
            pre.observation_ref,
            Some(ObservationRef {
                provider_id: "provider-a".into(),
                opaque_id: "obs-1".into(),
                content_digest: d('1'),
            })
        );
        // The digest is over the normalized source event, not the sanitized one.
        let mut normalized = source.clone();
        normalized.validate().unwrap();
        assert_eq!(pre.source_event_content_digest, normalized.content_digest());
        assert_eq!(pre.reducer_event.occurred_at, "2026-01-01T08:00:00Z");

        let free_text = event(
            EventKind::WorkspaceObserved,
            1,
            Json::object([
                (
                    "observation_ref",
                    observation_payload()
                        .get("observation_ref")
                        .unwrap()
                        .clone(),
                ),
                ("note", Json::str("x")),
            ]),
        );
        assert_eq!(
            preflight(&free_text).unwrap_err(),
            ReplayError::Privacy(
                "observation payload must contain only an opaque observation reference".into()
            )
        );
    }

    #[test]
    fn host_failure_codes_are_redacted() {
        let failed = event(
            EventKind::ActionFailed,
            3,
            identity_payload((
                "error",
                Json::object([("code", Json::str("disk-full-on-host"))]),
            )),
        );
        let pre = preflight(&failed).unwrap();
        assert_eq!(
            pre.reducer_event.payload.get("error"),
            Some(&Json::object([("code", Json::str(REDACTED_HOST_FAILURE))]))
        );
        assert!(pre.observation_ref.is_none());
    }

    #[test]
    fn unsafe_retention_and_legacy_receipts_are_refused() {
        let mut e = event(EventKind::TurnEnded, 1, Json::Obj(JsonMap::new()));
        e.privacy = PrivacyLabel {
            retention: Retention::Ephemeral,
            ..PrivacyLabel::default()
        };
        let err = preflight(&e).unwrap_err();
        assert_eq!(
            err,
            ReplayError::Privacy("event retention is not safe for authoritative replay".into())
        );
        assert_eq!(
            err.to_string(),
            "event retention is not safe for authoritative replay"
        );

        let legacy = event(
            EventKind::ActionApplied,
            3,
            identity_payload((
                "verification",
                Json::object([("host_state", Json::str("installed"))]),
            )),
        );
        assert_eq!(
            preflight(&legacy).unwrap_err().message(),
            "schema-v3 ActionApplied requires a typed receipt verification"
        );
        let typed = event(
            EventKind::ActionApplied,
            3,
            identity_payload(("verification", expected_install_receipt(&install_action()))),
        );
        let pre = preflight(&typed).unwrap();
        assert_eq!(pre.reducer_event.payload, typed.payload);
    }

    #[test]
    fn other_kinds_sanitize_to_their_exact_shapes() {
        let mut started = event(EventKind::SessionStarted, 0, Json::Obj(JsonMap::new()));
        assert_eq!(
            preflight(&started).unwrap_err().message(),
            "SessionStarted requires a host descriptor digest"
        );
        started.host_descriptor_digest = Some(d('a'));
        assert_eq!(
            preflight(&started).unwrap().reducer_event.payload,
            Json::object([("host_level", Json::str("query-only"))])
        );
        let desired = event(
            EventKind::ReassessmentRequested,
            1,
            Json::object([
                ("owner_id", Json::str("owner-1")),
                ("policy_snapshot_digest", Json::str(d('4'))),
                (
                    "desired_capabilities",
                    Json::Arr(vec![Json::object([
                        ("actionability", Json::str("load")),
                        ("capability_id", Json::str("skill:demo")),
                        ("install_descriptor_digest", Json::Null),
                        ("install_plan_digest", Json::Null),
                        ("kind", Json::str("skill")),
                        ("lease_id", Json::str("lease-1")),
                        ("source_digest", Json::str(d('5'))),
                    ])]),
                ),
            ]),
        );
        assert_eq!(
            preflight(&desired).unwrap().reducer_event.payload,
            desired.payload
        );
        let bad = event(
            EventKind::ReassessmentRequested,
            1,
            Json::object([("owner_id", Json::str("o"))]),
        );
        assert_eq!(
            preflight(&bad).unwrap_err().message(),
            "ReassessmentRequested payload has an unsupported schema"
        );
        let tool = event(
            EventKind::ToolCallObserved,
            1,
            Json::object([
                ("capability_id", Json::str("skill:demo")),
                ("outcome", Json::str("crashed")),
                ("source_digest", Json::str(d('5'))),
            ]),
        );
        assert_eq!(
            preflight(&tool).unwrap_err().message(),
            "ToolCallObserved outcome is unsupported"
        );
        let turn = event(EventKind::TurnEnded, 1, Json::object([("x", Json::Int(1))]));
        assert_eq!(
            preflight(&turn).unwrap_err().message(),
            "TurnEnded payload has missing or unknown fields"
        );
    }

    #[test]
    fn replay_json_round_trips_byte_exact() {
        let input = planning_input();
        let text = input.to_cj();
        let back = ReplayInput::from_canonical_text(&text).unwrap();
        assert_eq!(back, input);
        assert_eq!(back.to_cj(), text);
        let spaced = text.replacen(",", ", ", 1);
        assert_eq!(
            ReplayInput::from_canonical_text(&spaced).unwrap_err(),
            ReplayError::Validation("replay JSON must use the canonical encoding".into())
        );
        assert_eq!(
            ReplayInput::from_canonical_text("{\"a\":1,\"a\":1}")
                .unwrap_err()
                .message(),
            "replay JSON contains a duplicate object key"
        );
    }

    #[test]
    fn replay_input_rules() {
        let mut input = planning_input();
        input.reducer_version = "ctx-reducer-v2".into();
        assert!(matches!(input.validate(), Err(ReplayError::Unsupported(_))));

        let mut input = planning_input();
        input.reducer_event.payload = observation_payload();
        assert_eq!(
            input.validate().unwrap_err().message(),
            "reducer observation payload has missing or unknown fields"
        );

        let pre = preflight(&event(
            EventKind::ActionFailed,
            3,
            identity_payload(("error", Json::object([("code", Json::str("x"))]))),
        ))
        .unwrap();
        let mut input = ReplayInput::assemble(pre, None, None, NORMALIZER_VERSION_DEFAULT).unwrap();
        input.reducer_event.payload =
            identity_payload(("error", Json::object([("code", Json::str("raw"))])));
        assert_eq!(
            input.validate().unwrap_err(),
            ReplayError::Binding("reducer event payload is not in canonical sanitized form".into())
        );

        let pre = preflight(&event(EventKind::IntentObserved, 1, observation_payload())).unwrap();
        assert_eq!(
            ReplayInput::assemble(pre.clone(), Some(current_work()), None, "n")
                .unwrap_err()
                .message(),
            "planning event is missing its durable decision"
        );
        assert!(matches!(
            ReplayInput::assemble(pre, None, Some(decision()), "n"),
            Err(ReplayError::Unsupported(_))
        ));
        let turn = preflight(&event(EventKind::TurnEnded, 1, Json::Obj(JsonMap::new()))).unwrap();
        assert_eq!(
            ReplayInput::assemble(turn, None, Some(decision()), "n")
                .unwrap_err()
                .message(),
            "decision is not valid for this event kind"
        );
    }

    #[test]
    fn surrogate_rules() {
        let s = decision();
        assert_eq!(Surrogate::from_json(&s.to_json()).unwrap(), s);
        let mut m = s.to_json().as_obj().unwrap().clone();
        m.insert("extra".into(), Json::Null);
        assert_eq!(
            Surrogate::from_json(&Json::Obj(m)).unwrap_err().message(),
            "structured surrogate has missing or unknown fields"
        );
        let mut tampered = s.clone();
        tampered.value_digest = d('f');
        assert_eq!(
            validate_surrogate(&tampered, SurrogateRole::Decision).unwrap_err(),
            ReplayError::Binding("value_digest does not match the structured value".into())
        );
        let v2 = Surrogate::new(CAPABILITY_PLAN_SCHEMA, 2, ready_value());
        assert_eq!(
            validate_surrogate(&v2, SurrogateRole::Decision).unwrap_err(),
            ReplayError::Privacy(
                "surrogate schema is not approved for authoritative replay".into()
            )
        );
        assert!(validate_surrogate(&current_work(), SurrogateRole::Decision).is_err());
        validate_surrogate(&current_work(), SurrogateRole::Observation).unwrap();
        let free_text = Surrogate::new(
            OPAQUE_REF_SCHEMA,
            1,
            Json::object([("provider_id", Json::str("two words"))]),
        );
        assert_eq!(
            validate_surrogate(&free_text, SurrogateRole::Observation).unwrap_err(),
            ReplayError::Privacy("structured surrogate string must be an opaque safe token".into())
        );
        let mut deep = Json::Int(1);
        for _ in 0..9 {
            deep = Json::object([("k", deep)]);
        }
        let deep = Surrogate::new(OPAQUE_REF_SCHEMA, 1, deep);
        assert_eq!(
            deep.validate().unwrap_err().message(),
            "structured surrogate exceeds the maximum depth"
        );
    }
}
