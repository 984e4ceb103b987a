//! Schema-v3 planning values (spec/engine.md §4, §10; spec/planner.md §7):
//! the 13-key plan row, the benefit audit reference, the committed plan, and the
//! `ctx.decision.capability-plan` version 3 decision surrogate value.
//!
//! Two validators exist for a row because the reference has two: the state decoder
//! ([`validate_plan_row`], messages wrapped as "schema-v3 plan capability identity, benefit, or
//! authority is invalid: …") and the replay surrogate check ([`validate_capability_plan_value`],
//! messages naming `capabilities[i]`, failing with replay error classes). Both accept exactly the
//! same rows built by the planner.

use std::borrow::Cow;

use crate::documents::{
    INSTALL_DESCRIPTOR_SCHEMA_V2, descriptor_matches_result_material, validate_authorized_material,
    validate_catalog_identity, validate_install_plan_descriptor, validate_material_identity,
};
use crate::json::{Json, JsonMap};
use crate::protocol::{ACTIVE_CAPABILITIES_MAX, ProtocolError, exact_keys, perr};
use crate::replay_error::{
    ReplayError, r_bounded, r_digest, r_exact, r_sequence, r_token, r_token_array, vfail,
};
use crate::shape::{is_capability_name, is_safe_token, is_sha, is_trimmed};
use crate::state::CommittedPlan;
use crate::vocab::{
    BENEFIT_CANDIDATES_MAX_ITEMS, BENEFIT_POLICY_SCHEMA_ID, BENEFIT_RESULT_SCHEMA_ID,
    BENEFIT_SEARCH_MAX_EVALUATIONS, BENEFIT_SELECTION_ALGORITHM_ID, CapabilityKind,
    PRESENTATION_ACTIONABILITY,
};

pub const MATCHING_SIGNALS_MAX_ITEMS: usize = 32;
pub const REASON_CODES_MAX_ITEMS: usize = 16;
pub const SCORE_MAX_PPM: i64 = 1_000_000;
/// Abstention codes of a v3 plan.
pub const V3_ABSTENTION_CODES: [&str; 3] =
    ["below-net-benefit", "limit-zero", "no-feasible-capability"];
/// Degradation codes of any plan.
pub const DEGRADATION_CODES: [&str; 2] = ["catalog-unavailable", "planner-failed"];

/// The 13 keys of a schema-v3 plan row.
pub const PLAN_ROW_V3_KEYS: [&str; 13] = [
    "actionability",
    "authority",
    "benefit",
    "capability_id",
    "catalog_entry_digest",
    "catalog_identity",
    "install_descriptor_digest",
    "install_plan_digest",
    "kind",
    "matching_signals",
    "name",
    "normalized_score_ppm",
    "reason_codes",
];
/// The nine fields of a benefit audit reference.
pub const BENEFIT_AUDIT_KEYS: [&str; 9] = [
    "calibration_digest",
    "candidate_pool_count",
    "policy_digest",
    "policy_schema_id",
    "requested_limit",
    "result_digest",
    "result_schema_id",
    "search_evaluation_count",
    "selection_algorithm_id",
];
const BENEFIT_KEYS: [&str; 3] = ["individual_net_benefit_u", "marginal_net_benefit_u", "tier"];
const LOAD_AUTHORITY_KEYS: [&str; 2] = ["material", "type"];
const INSTALL_AUTHORITY_KEYS: [&str; 3] = ["descriptor", "result_material", "type"];
const MANUAL_AUTHORITY_KEYS: [&str; 1] = ["type"];
const COMMITTED_PLAN_KEYS: [&str; 7] = [
    "abstention_code",
    "benefit_audit",
    "capabilities",
    "catalog_snapshot_id",
    "decision_digest",
    "plan_id",
    "status",
];
const PLAN_VALUE_V3_KEYS: [&str; 4] =
    ["abstention_code", "benefit_audit", "capabilities", "status"];
/// The signed utility bound: `|u| <= 2^63 - 1`.
const MAX_UTILITY_UNITS: i64 = i64::MAX;

const ROW_INVALID: &str = "schema-v3 plan capability identity, benefit, or authority is invalid";

fn text<'a>(m: &'a JsonMap, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Json::as_str)
}

fn field<'a>(m: &'a JsonMap, key: &str) -> &'a Json {
    m.get(key).unwrap_or(&Json::Null)
}

/// The state decoder's exact key set check ("has unknown field(s): a, b").
fn exact_fields<'a>(
    value: &'a Json,
    keys: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ProtocolError> {
    exact_keys(value, keys)
        .map_err(|f| ProtocolError::new(f.sentence(name, "a JSON object", "field(s)")))
}

// ---------------------------------------------------------------------------------------------
// Row helpers used by the reducer

/// The benefit tier of a row (`executable` or `advisory`); empty for a malformed row.
pub fn row_tier(row: &Json) -> &str {
    row.get("benefit")
        .and_then(|b| b.get_str("tier"))
        .unwrap_or_default()
}

/// The canonical order of committed rows: executable tier first, then capability id, then
/// source digest.
pub fn canonical_row_order_key(row: &Json) -> (u8, &str, &str) {
    (
        u8::from(row_tier(row) != "executable"),
        row.get_str("capability_id").unwrap_or_default(),
        row.get_str("catalog_entry_digest").unwrap_or_default(),
    )
}

// ---------------------------------------------------------------------------------------------
// The state decoder's row validation

/// What makes a schema-v3 row's identity, benefit or authority invalid: the detail the state
/// decoder puts after "schema-v3 plan capability identity, benefit, or authority is invalid: ".
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RowFault(Cow<'static, str>);

impl From<&'static str> for RowFault {
    fn from(sentence: &'static str) -> RowFault {
        RowFault(Cow::Borrowed(sentence))
    }
}

impl From<String> for RowFault {
    fn from(sentence: String) -> RowFault {
        RowFault(Cow::Owned(sentence))
    }
}

/// A canonical token list: a tuple of at most `max` safe tokens, unique, sorted.
fn canonical_tokens(value: &[Json], name: &str, max: usize) -> Result<usize, RowFault> {
    if value.len() > max {
        return Err(format!("{name} exceeds its bounded item limit").into());
    }
    let mut tokens = Vec::with_capacity(value.len());
    for item in value {
        match item.as_str() {
            Some(s) if is_safe_token(s) => tokens.push(s),
            _ => return Err(format!("{name} item must be a canonical safe token").into()),
        }
    }
    let mut sorted = tokens.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != tokens.len() {
        return Err(format!("{name} contains duplicate values").into());
    }
    if sorted != tokens {
        return Err(format!("{name} must use canonical sorted order").into());
    }
    Ok(tokens.len())
}

/// The presentation part of a row, validated as a retrieval candidate (spec/catalog.md §5.3).
fn validate_presentation(m: &JsonMap, signals: &[Json], reasons: &[Json]) -> Result<(), RowFault> {
    let Some(id) = text(m, "capability_id").filter(|s| is_safe_token(s)) else {
        return Err("capability_id must be a canonical safe token".into());
    };
    let Some(kind) = text(m, "kind").filter(|k| CapabilityKind::parse(k).is_some()) else {
        return Err("kind is not a recommendable capability kind".into());
    };
    let Some(name) = text(m, "name").filter(|n| is_capability_name(n)) else {
        return Err("name must be a canonical capability name".into());
    };
    if id
        .strip_prefix(kind)
        .and_then(|rest| rest.strip_prefix(':'))
        != Some(name)
    {
        return Err("capability_id must be the canonical kind:name identity".into());
    }
    if !text(m, "catalog_entry_digest").is_some_and(is_sha) {
        return Err("source_digest must be a lowercase SHA-256 digest".into());
    }
    if !matches!(m.get("normalized_score_ppm"), Some(Json::Int(i)) if (0..=SCORE_MAX_PPM).contains(i))
    {
        return Err(format!(
            "normalized_score_ppm must be an integer from 0 through {SCORE_MAX_PPM}"
        )
        .into());
    }
    canonical_tokens(signals, "matching_signals", MATCHING_SIGNALS_MAX_ITEMS)?;
    if canonical_tokens(reasons, "reason_codes", REASON_CODES_MAX_ITEMS)? == 0 {
        return Err("reason_codes must explain the candidate".into());
    }
    let actionability = text(m, "actionability").unwrap_or_default();
    if !PRESENTATION_ACTIONABILITY.contains(&actionability) {
        return Err("actionability is not a declared state".into());
    }
    let install_digests = (
        field(m, "install_descriptor_digest"),
        field(m, "install_plan_digest"),
    );
    if actionability == "install" {
        for (value, key) in [
            (install_digests.0, "install_descriptor_digest"),
            (install_digests.1, "install_plan_digest"),
        ] {
            if !value.as_str().is_some_and(is_sha) {
                return Err(format!("{key} must be a lowercase SHA-256 digest").into());
            }
        }
    } else if !install_digests.0.is_null() || !install_digests.1.is_null() {
        return Err(
            "install descriptor and plan digests are allowed only for install candidates".into(),
        );
    }
    Ok(())
}

/// The identity/authority consistency rule with the benefit tier as availability.
fn validate_identity_and_authority(
    m: &JsonMap,
    catalog: &Json,
    tier: &str,
    authority: &Json,
) -> Result<(), RowFault> {
    let id = text(m, "capability_id").unwrap_or_default();
    let kind = text(m, "kind").unwrap_or_default();
    if (Some(id), Some(kind)) != (catalog.get_str("capability_id"), catalog.get_str("kind")) {
        return Err("catalog identity must exactly match the presented capability".into());
    }
    let authority_type = authority.get_str("type").unwrap_or_default();
    match text(m, "actionability").unwrap_or_default() {
        "load" => {
            if authority_type != "load" {
                return Err("load presentation requires load authority".into());
            }
            if tier != "executable" {
                return Err("load authority requires executable benefit facts".into());
            }
            let material = authority.get("material").unwrap_or(&Json::Null);
            if (
                material.get_str("capability_id"),
                material.get_str("kind"),
                material.get_str("catalog_identity_digest"),
            ) != (Some(id), Some(kind), catalog.get_str("identity_digest"))
            {
                return Err(
                    "load authority must exactly match capability and catalog identity".into(),
                );
            }
        }
        "install" => {
            if authority_type != "install" {
                return Err("install presentation requires install authority".into());
            }
            if tier != "executable" {
                return Err("install authority requires executable benefit facts".into());
            }
            let descriptor = authority.get("descriptor").unwrap_or(&Json::Null);
            let result = authority.get("result_material").unwrap_or(&Json::Null);
            if (
                descriptor.get_str("capability_id"),
                descriptor.get_str("kind"),
                result.get_str("capability_id"),
                result.get_str("kind"),
                descriptor.get_str("descriptor_digest"),
                descriptor.get_str("plan_digest"),
            ) != (
                Some(id),
                Some(kind),
                Some(id),
                Some(kind),
                text(m, "install_descriptor_digest"),
                text(m, "install_plan_digest"),
            ) {
                return Err(
                    "install authority must exactly match capability and presentation digests"
                        .into(),
                );
            }
        }
        "manual" => {
            if authority_type != "manual" {
                return Err("manual presentation requires empty manual authority".into());
            }
            if tier != "advisory" {
                return Err("manual authority is advisory only".into());
            }
        }
        _ => {
            return Err(
                "schema-v3 planning accepts only load, install, or manual presentation".into(),
            );
        }
    }
    Ok(())
}

/// The part of row decoding the reference wraps in "schema-v3 plan capability identity, benefit,
/// or authority is invalid: <detail>".
fn validate_row_content(
    m: &JsonMap,
    benefit: &JsonMap,
    authority: &Json,
    signals: &[Json],
    reasons: &[Json],
) -> Result<(), RowFault> {
    let detail = |e: ProtocolError| RowFault::from(e.message().to_owned());
    validate_presentation(m, signals, reasons)?;
    let catalog = field(m, "catalog_identity");
    validate_catalog_identity(catalog).map_err(detail)?;
    let tier = text(benefit, "tier").unwrap_or_default();
    if !matches!(tier, "executable" | "advisory") {
        return Err("benefit tier must be executable or advisory".into());
    }
    if !matches!(benefit.get("individual_net_benefit_u"), Some(Json::Int(_))) {
        return Err("individual net benefit must be an integer".into());
    }
    if !matches!(benefit.get("marginal_net_benefit_u"), Some(Json::Int(i)) if *i >= 1) {
        return Err("marginal net benefit must be positive".into());
    }
    match authority.get_str("type") {
        Some("load") => {
            validate_authorized_material(authority.get("material").unwrap_or(&Json::Null))
                .map_err(detail)?;
        }
        Some("install") => {
            let descriptor = authority.get("descriptor").unwrap_or(&Json::Null);
            let result = authority.get("result_material").unwrap_or(&Json::Null);
            validate_install_plan_descriptor(descriptor).map_err(detail)?;
            validate_material_identity(result).map_err(detail)?;
            if descriptor.get_str("schema") != Some(INSTALL_DESCRIPTOR_SCHEMA_V2) {
                return Err("install authority requires InstallPlanDescriptor schema v2".into());
            }
            if !descriptor_matches_result_material(descriptor, result) {
                return Err(
                    "install descriptor does not match the exact result material identity".into(),
                );
            }
        }
        _ => {}
    }
    validate_identity_and_authority(m, catalog, tier, authority)
}

/// Validates one schema-v3 plan row as the state decoder does: exactly 13 keys, the benefit
/// projection and authority shapes, then the wrapped identity/benefit/authority rules.
pub fn validate_plan_row(row: &Json) -> Result<(), ProtocolError> {
    let m = exact_fields(row, &PLAN_ROW_V3_KEYS, "schema-v3 plan capability")?;
    let benefit = exact_fields(
        field(m, "benefit"),
        &BENEFIT_KEYS,
        "schema-v3 benefit projection",
    )?;
    let authority = field(m, "authority");
    if authority.as_obj().is_none() {
        return perr("schema-v3 planning authority must be a JSON object");
    }
    match authority.get_str("type") {
        Some("load") => exact_fields(authority, &LOAD_AUTHORITY_KEYS, "schema-v3 load authority")?,
        Some("install") => exact_fields(
            authority,
            &INSTALL_AUTHORITY_KEYS,
            "schema-v3 install authority",
        )?,
        Some("manual") => exact_fields(
            authority,
            &MANUAL_AUTHORITY_KEYS,
            "schema-v3 manual authority",
        )?,
        _ => return perr("schema-v3 planning authority type is unsupported"),
    };
    let Some(signals) = field(m, "matching_signals").as_arr() else {
        return perr("schema-v3 matching_signals must be a JSON array");
    };
    let Some(reasons) = field(m, "reason_codes").as_arr() else {
        return perr("schema-v3 reason_codes must be a JSON array");
    };
    validate_row_content(m, benefit, authority, signals, reasons)
        .map_err(|detail| ProtocolError::new(format!("{ROW_INVALID}: {detail}")))
}

// ---------------------------------------------------------------------------------------------
// Benefit audit

/// Why an audit field failed: replay token/digest faults are privacy errors there.
enum AuditFault {
    Privacy(String),
    Validation(String),
}

/// The nine-field checks after the key set: exact schema ids, digests and bounds.
fn check_audit_fields(m: &JsonMap) -> Result<(), AuditFault> {
    let fault = |s: &str| AuditFault::Validation(s.to_owned());
    if text(m, "result_schema_id") != Some(BENEFIT_RESULT_SCHEMA_ID) {
        return Err(fault("benefit audit result schema is unsupported"));
    }
    if text(m, "policy_schema_id") != Some(BENEFIT_POLICY_SCHEMA_ID) {
        return Err(fault("benefit audit policy schema is unsupported"));
    }
    if text(m, "selection_algorithm_id") != Some(BENEFIT_SELECTION_ALGORITHM_ID) {
        return Err(fault("benefit audit selection algorithm is unsupported"));
    }
    for key in ["result_digest", "policy_digest", "calibration_digest"] {
        if !text(m, key).is_some_and(is_sha) {
            return Err(AuditFault::Privacy(format!(
                "benefit audit {key} must be a lowercase SHA-256 digest"
            )));
        }
    }
    for (key, max) in [
        ("requested_limit", ACTIVE_CAPABILITIES_MAX as i64),
        ("candidate_pool_count", BENEFIT_CANDIDATES_MAX_ITEMS),
        ("search_evaluation_count", BENEFIT_SEARCH_MAX_EVALUATIONS),
    ] {
        match m.get(key) {
            Some(Json::Int(i)) if *i < 0 => {
                return Err(AuditFault::Validation(format!(
                    "benefit audit {key} must be a non-negative integer"
                )));
            }
            Some(Json::Int(i)) if *i > max => {
                return Err(AuditFault::Validation(format!(
                    "benefit audit {key} exceeds its maximum"
                )));
            }
            Some(Json::Int(_)) => {}
            _ => {
                return Err(AuditFault::Validation(format!(
                    "benefit audit {key} must be a non-negative integer"
                )));
            }
        }
    }
    Ok(())
}

/// Validates a BenefitAuditReference: the nine fields, the declared result, policy and
/// algorithm schema ids, lowercase digests, limit ≤ 5, pool ≤ 512, evaluations ≤ 1 000 000.
pub fn validate_benefit_audit(audit: &Json) -> Result<(), ProtocolError> {
    let m = exact_fields(audit, &BENEFIT_AUDIT_KEYS, "schema-v3 benefit audit")?;
    check_audit_fields(m).map_err(|f| match f {
        AuditFault::Privacy(s) | AuditFault::Validation(s) => ProtocolError::new(s),
    })
}

fn audit_int(audit: &Json, key: &str) -> i64 {
    audit.get(key).and_then(Json::as_i64).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Committed plan

/// The message a status gives for an inconsistent abstention code (also used when the code is
/// not text at all, which no status accepts).
fn status_message(status: &str) -> &'static str {
    match status {
        "ready" => "ready schema-v3 plan requires rows and no abstention code",
        "abstained" => "abstained schema-v3 plan requires no rows and a declared code",
        "degraded" => "degraded schema-v3 plan requires no rows or benefit audit",
        _ => "schema-v3 committed plan status is unsupported",
    }
}

/// Validates a committed schema-v3 plan (spec/planner.md §7).
pub fn validate_committed_plan(plan: &CommittedPlan) -> Result<(), ProtocolError> {
    if !is_trimmed(&plan.plan_id) {
        return perr("plan_id must be a non-empty trimmed string");
    }
    if !is_sha(&plan.catalog_snapshot_id) {
        return perr("catalog_snapshot_id must be a lowercase SHA-256 digest");
    }
    if !is_sha(&plan.decision_digest) {
        return perr("decision_digest must be a lowercase SHA-256 digest");
    }
    if !plan.benefit_audit.is_null() {
        validate_benefit_audit(&plan.benefit_audit)?;
    }
    for row in &plan.capabilities {
        validate_plan_row(row)?;
    }
    let rows = &plan.capabilities;
    if rows.len() > ACTIVE_CAPABILITIES_MAX {
        return perr("schema-v3 committed plan cannot contain more than five capabilities");
    }
    let mut ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.get_str("capability_id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != rows.len() {
        return perr("schema-v3 committed plan contains duplicate capability IDs");
    }
    if rows
        .windows(2)
        .any(|w| canonical_row_order_key(&w[0]) > canonical_row_order_key(&w[1]))
    {
        return perr("schema-v3 committed plan capabilities are not in canonical order");
    }
    let code = plan.abstention_code.as_deref();
    let has_audit = !plan.benefit_audit.is_null();
    match plan.status.as_str() {
        "ready" => {
            if rows.is_empty() || code.is_some() {
                return perr(status_message("ready"));
            }
            if !has_audit {
                return perr("ready schema-v3 plan requires the exact benefit audit");
            }
        }
        "abstained" => {
            if !rows.is_empty() || !code.is_some_and(|c| V3_ABSTENTION_CODES.contains(&c)) {
                return perr(status_message("abstained"));
            }
            if !has_audit {
                return perr("abstained schema-v3 plan requires the exact benefit audit");
            }
        }
        "degraded" => {
            if !rows.is_empty()
                || !code.is_some_and(|c| DEGRADATION_CODES.contains(&c))
                || has_audit
            {
                return perr(status_message("degraded"));
            }
        }
        _ => return perr(status_message("")),
    }
    if has_audit {
        let audit = &plan.benefit_audit;
        let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        let limit = audit_int(audit, "requested_limit");
        let pool = audit_int(audit, "candidate_pool_count");
        let evaluations = audit_int(audit, "search_evaluation_count");
        if limit < count {
            return perr("benefit audit requested_limit is smaller than persisted rows");
        }
        if pool < count {
            return perr("benefit audit candidate_pool_count is smaller than persisted rows");
        }
        if plan.status == "ready" && evaluations == 0 {
            return perr("ready benefit audit requires positive search evaluations");
        }
        match code {
            Some("limit-zero") if limit != 0 || evaluations != 0 => {
                return perr("limit-zero benefit audit requires a zero limit and zero search");
            }
            Some("below-net-benefit") if limit == 0 || pool == 0 || evaluations == 0 => {
                return perr(
                    "below-net-benefit audit requires candidates, a positive limit, and search",
                );
            }
            Some("no-feasible-capability") if limit == 0 || evaluations != 0 => {
                return perr(
                    "no-feasible-capability audit requires a positive limit and zero search",
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// Decodes and validates a committed schema-v3 plan mapping.
pub fn committed_plan_from_json(value: &Json) -> Result<CommittedPlan, ProtocolError> {
    let m = exact_fields(value, &COMMITTED_PLAN_KEYS, "schema-v3 committed plan")?;
    let status = text(m, "status").unwrap_or_default().to_owned();
    let abstention_code = match field(m, "abstention_code") {
        Json::Null => None,
        Json::Str(s) => Some(s.clone()),
        _ => return perr(status_message(&status)),
    };
    let benefit_audit = field(m, "benefit_audit").clone();
    if !benefit_audit.is_null() {
        exact_fields(
            &benefit_audit,
            &BENEFIT_AUDIT_KEYS,
            "schema-v3 benefit audit",
        )?;
    }
    let Some(capabilities) = field(m, "capabilities").as_arr() else {
        return perr("schema-v3 committed plan capabilities must be a JSON array");
    };
    let plan_id = match text(m, "plan_id") {
        Some(s) => s.to_owned(),
        None => return perr("plan_id must be a non-empty trimmed string"),
    };
    let digest = |key: &str| match text(m, key) {
        Some(s) => Ok(s.to_owned()),
        None => perr(format!("{key} must be a non-empty trimmed string")),
    };
    let plan = CommittedPlan {
        abstention_code,
        benefit_audit,
        capabilities: capabilities.to_vec(),
        catalog_snapshot_id: digest("catalog_snapshot_id")?,
        decision_digest: digest("decision_digest")?,
        plan_id,
        status,
    };
    validate_committed_plan(&plan)?;
    Ok(plan)
}

// ---------------------------------------------------------------------------------------------
// The decision surrogate value (`ctx.decision.capability-plan` version 3), replay flavour

/// The v2 presentation fields of a planned row (the surrogate check of versions 1/2, version 2).
fn r_presentation(m: &JsonMap, index: usize) -> Result<(), ReplayError> {
    let name = format!("capabilities[{index}]");
    let id = r_token(field(m, "capability_id"), &format!("{name}.capability_id"))?;
    let kind = r_token(field(m, "kind"), &format!("{name}.kind"))?;
    if id.to_ascii_lowercase() != id || kind.to_ascii_lowercase() != kind {
        return vfail(format!(
            "{name} identity must use lowercase canonical tokens"
        ));
    }
    if CapabilityKind::parse(kind).is_none() {
        return vfail(format!(
            "{name}.kind is not a recommendable capability kind"
        ));
    }
    let cap_name = r_token(field(m, "name"), &format!("{name}.name"))?;
    if !is_capability_name(cap_name) {
        return vfail(format!("{name}.name is not canonical"));
    }
    if id != format!("{kind}:{cap_name}") {
        return vfail(format!("{name}.capability_id must match its kind and name"));
    }
    r_digest(
        field(m, "catalog_entry_digest"),
        &format!("{name}.catalog_entry_digest"),
    )?;
    r_bounded(
        field(m, "normalized_score_ppm"),
        &format!("{name}.normalized_score_ppm"),
        SCORE_MAX_PPM,
    )?;
    r_token_array(
        field(m, "matching_signals"),
        &format!("{name}.matching_signals"),
        MATCHING_SIGNALS_MAX_ITEMS,
    )?;
    if r_token_array(
        field(m, "reason_codes"),
        &format!("{name}.reason_codes"),
        REASON_CODES_MAX_ITEMS,
    )? == 0
    {
        return vfail(format!("{name}.reason_codes must not be empty"));
    }
    let actionability = r_token(field(m, "actionability"), &format!("{name}.actionability"))?;
    if actionability.to_ascii_lowercase() != actionability {
        return vfail(format!("{name}.actionability must use lowercase"));
    }
    if !matches!(actionability, "load" | "install" | "manual") {
        return vfail(format!("{name}.actionability is not supported"));
    }
    let descriptor = field(m, "install_descriptor_digest");
    let plan = field(m, "install_plan_digest");
    if actionability == "install" {
        r_digest(descriptor, &format!("{name}.install_descriptor_digest"))?;
        r_digest(plan, &format!("{name}.install_plan_digest"))?;
    } else if !descriptor.is_null() || !plan.is_null() {
        return vfail(format!(
            "{name} install digests are allowed only for install actionability"
        ));
    }
    Ok(())
}

fn r_signed_utility(value: &Json, name: &str) -> Result<i64, ReplayError> {
    match value {
        // i64::MIN is one below the reference's symmetric bound −(2^63 − 1).
        Json::Int(i) if *i >= -MAX_UTILITY_UNITS => Ok(*i),
        _ => vfail(format!("{name} exceeds the signed utility bound")),
    }
}

/// One 13-key row of a version-3 plan surrogate; returns its canonical order key.
fn r_row(value: &Json, index: usize) -> Result<(u8, String, String), ReplayError> {
    let name = format!("capabilities[{index}]");
    let m = r_exact(value, &PLAN_ROW_V3_KEYS, "planned capability v3")?;
    r_presentation(m, index)?;
    let id = text(m, "capability_id").unwrap_or_default();
    let kind = text(m, "kind").unwrap_or_default();
    let source = text(m, "catalog_entry_digest").unwrap_or_default();

    let catalog = field(m, "catalog_identity");
    if catalog.as_obj().is_none() {
        return vfail(format!("{name}.catalog_identity must be an object"));
    }
    if validate_catalog_identity(catalog).is_err() {
        return vfail(format!("{name}.catalog_identity is invalid"));
    }
    if (catalog.get_str("capability_id"), catalog.get_str("kind")) != (Some(id), Some(kind)) {
        return vfail(format!(
            "{name} catalog identity does not match planned capability"
        ));
    }

    let benefit = r_exact(
        field(m, "benefit"),
        &BENEFIT_KEYS,
        &format!("{name} benefit projection"),
    )?;
    let tier = text(benefit, "tier").unwrap_or_default();
    if !matches!(tier, "executable" | "advisory") {
        return vfail(format!("{name} benefit tier is unsupported"));
    }
    r_signed_utility(
        field(benefit, "individual_net_benefit_u"),
        &format!("{name}.individual_net_benefit_u"),
    )?;
    let marginal = r_signed_utility(
        field(benefit, "marginal_net_benefit_u"),
        &format!("{name}.marginal_net_benefit_u"),
    )?;
    if marginal < 1 {
        return vfail(format!("{name} marginal net benefit must be positive"));
    }

    let authority = field(m, "authority");
    if authority.as_obj().is_none() {
        return vfail(format!("{name}.authority must be an object"));
    }
    let authority_type = authority.get("type");
    if authority_type != m.get("actionability") {
        return vfail(format!("{name} authority type must match actionability"));
    }
    match authority_type.and_then(Json::as_str) {
        Some("load") => {
            if tier != "executable" {
                return vfail(format!("{name} load authority must be executable"));
            }
            let a = r_exact(
                authority,
                &LOAD_AUTHORITY_KEYS,
                &format!("{name} load authority"),
            )?;
            let material = field(a, "material");
            if material.as_obj().is_none() {
                return vfail(format!("{name}.material must be an object"));
            }
            if validate_authorized_material(material).is_err() {
                return vfail(format!("{name}.material is invalid"));
            }
            if (
                material.get_str("capability_id"),
                material.get_str("kind"),
                material.get_str("catalog_identity_digest"),
            ) != (Some(id), Some(kind), catalog.get_str("identity_digest"))
            {
                return vfail(format!(
                    "{name} load material does not match catalog capability identity"
                ));
            }
        }
        Some("install") => {
            if tier != "executable" {
                return vfail(format!("{name} install authority must be executable"));
            }
            let a = r_exact(
                authority,
                &INSTALL_AUTHORITY_KEYS,
                &format!("{name} install authority"),
            )?;
            let descriptor = field(a, "descriptor");
            let result = field(a, "result_material");
            if descriptor.as_obj().is_none() || result.as_obj().is_none() {
                return vfail(format!(
                    "{name} install descriptor and result material must be objects"
                ));
            }
            if validate_install_plan_descriptor(descriptor).is_err()
                || validate_material_identity(result).is_err()
            {
                return vfail(format!("{name} install authority is invalid"));
            }
            if descriptor.get_str("schema") != Some(INSTALL_DESCRIPTOR_SCHEMA_V2) {
                return vfail(format!(
                    "{name} install authority requires descriptor schema v2"
                ));
            }
            if !descriptor_matches_result_material(descriptor, result) {
                return vfail(format!(
                    "{name} install descriptor does not match result material"
                ));
            }
            if (
                descriptor.get_str("capability_id"),
                descriptor.get_str("kind"),
                result.get_str("capability_id"),
                result.get_str("kind"),
                descriptor.get_str("descriptor_digest"),
                descriptor.get_str("plan_digest"),
            ) != (
                Some(id),
                Some(kind),
                Some(id),
                Some(kind),
                text(m, "install_descriptor_digest"),
                text(m, "install_plan_digest"),
            ) {
                return vfail(format!(
                    "{name} install authority does not match the planned capability"
                ));
            }
        }
        Some("manual") => {
            r_exact(
                authority,
                &MANUAL_AUTHORITY_KEYS,
                &format!("{name} manual authority"),
            )?;
            if tier != "advisory" {
                return vfail(format!("{name} manual authority must be advisory"));
            }
        }
        _ => return vfail(format!("{name} authority type is unsupported")),
    }
    Ok((
        u8::from(tier != "executable"),
        id.to_owned(),
        source.to_owned(),
    ))
}

/// Validates the value of a `ctx.decision.capability-plan` version 3 decision surrogate
/// (spec/engine.md §10, last table row).
pub fn validate_capability_plan_value(value: &Json) -> Result<(), ReplayError> {
    let m = r_exact(value, &PLAN_VALUE_V3_KEYS, "capability plan v3")?;
    let status = text(m, "status").unwrap_or_default();
    if !matches!(status, "ready" | "abstained" | "degraded") {
        return vfail("capability plan v3 status is not supported");
    }
    let rows = r_sequence(
        field(m, "capabilities"),
        "capability plan v3 capabilities",
        ACTIVE_CAPABILITIES_MAX,
    )?;
    let keys = rows
        .iter()
        .enumerate()
        .map(|(i, row)| r_row(row, i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ids: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != keys.len() {
        return vfail("capability plan v3 contains duplicate capability IDs");
    }
    if keys.windows(2).any(|w| w[0] > w[1]) {
        return vfail("capability plan v3 capabilities must use canonical order");
    }
    let code = match field(m, "abstention_code") {
        Json::Null => None,
        other => Some(r_token(other, "capability plan v3 abstention_code")?),
    };
    let audit = field(m, "benefit_audit");
    if status == "degraded" {
        if !rows.is_empty()
            || !code.is_some_and(|c| DEGRADATION_CODES.contains(&c))
            || !audit.is_null()
        {
            return vfail("degraded capability plan v3 requires no capabilities or benefit audit");
        }
        return Ok(());
    }
    let am = r_exact(audit, &BENEFIT_AUDIT_KEYS, "benefit audit")?;
    check_audit_fields(am).map_err(|f| match f {
        AuditFault::Privacy(s) => ReplayError::Privacy(s),
        AuditFault::Validation(s) => ReplayError::Validation(s),
    })?;
    let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let limit = audit_int(audit, "requested_limit");
    let pool = audit_int(audit, "candidate_pool_count");
    let evaluations = audit_int(audit, "search_evaluation_count");
    if status == "ready" {
        if rows.is_empty()
            || code.is_some()
            || limit == 0
            || pool == 0
            || evaluations == 0
            || count > limit
            || count > pool
        {
            return vfail("ready capability plan v3 is inconsistent with its benefit audit");
        }
        return Ok(());
    }
    let Some(code) = code.filter(|c| rows.is_empty() && V3_ABSTENTION_CODES.contains(c)) else {
        return vfail("abstained capability plan v3 requires a declared benefit abstention");
    };
    match code {
        "limit-zero" if limit != 0 || evaluations != 0 => {
            vfail("limit-zero benefit abstention is inconsistent")
        }
        "no-feasible-capability" if limit == 0 || evaluations != 0 => {
            vfail("no-feasible benefit abstention is inconsistent")
        }
        "below-net-benefit" if limit == 0 || pool == 0 || evaluations == 0 => {
            vfail("below-net-benefit abstention is inconsistent")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::tests::{
        d, demo_catalog, demo_descriptor_v2, demo_install_descriptor, demo_material,
    };
    use crate::documents::{authorized_material_from_catalog, catalog_capability_identity};

    fn presentation(id: &str, actionability: &str, install: Option<(&str, &str)>) -> JsonMap {
        let (kind, name) = id.split_once(':').unwrap();
        let mut m = JsonMap::new();
        m.insert("actionability".into(), Json::str(actionability));
        m.insert("capability_id".into(), Json::str(id));
        m.insert("catalog_entry_digest".into(), Json::str(d('5')));
        m.insert("kind".into(), Json::str(kind));
        m.insert(
            "matching_signals".into(),
            Json::Arr(vec![Json::str("python")]),
        );
        m.insert("name".into(), Json::str(name));
        m.insert("normalized_score_ppm".into(), Json::Int(500_000));
        m.insert(
            "reason_codes".into(),
            Json::Arr(vec![Json::str("signal-match")]),
        );
        m.insert(
            "install_descriptor_digest".into(),
            Json::opt_str(install.map(|i| i.0)),
        );
        m.insert(
            "install_plan_digest".into(),
            Json::opt_str(install.map(|i| i.1)),
        );
        m
    }

    fn benefit(tier: &str) -> Json {
        Json::object([
            ("individual_net_benefit_u", Json::Int(10)),
            ("marginal_net_benefit_u", Json::Int(7)),
            ("tier", Json::str(tier)),
        ])
    }

    pub(crate) fn load_row() -> Json {
        let catalog = demo_catalog();
        let material = authorized_material_from_catalog(
            catalog.get_str("identity_digest").unwrap(),
            &demo_descriptor_v2(),
        )
        .unwrap();
        let mut m = presentation("skill:demo", "load", None);
        m.insert("catalog_identity".into(), catalog);
        m.insert("benefit".into(), benefit("executable"));
        m.insert(
            "authority".into(),
            Json::object([("type", Json::str("load")), ("material", material)]),
        );
        Json::Obj(m)
    }

    pub(crate) fn install_row() -> Json {
        let descriptor = demo_install_descriptor();
        let digests = (
            descriptor.get_str("descriptor_digest").unwrap().to_owned(),
            descriptor.get_str("plan_digest").unwrap().to_owned(),
        );
        let mut m = presentation("skill:demo", "install", Some((&digests.0, &digests.1)));
        m.insert("catalog_identity".into(), demo_catalog());
        m.insert("benefit".into(), benefit("executable"));
        m.insert(
            "authority".into(),
            Json::object([
                ("type", Json::str("install")),
                ("descriptor", descriptor.clone()),
                ("result_material", demo_material()),
            ]),
        );
        Json::Obj(m)
    }

    pub(crate) fn manual_row(id: &str) -> Json {
        let (kind, _) = id.split_once(':').unwrap();
        let mut m = presentation(id, "manual", None);
        m.insert(
            "catalog_identity".into(),
            catalog_capability_identity(id, kind, &"0".repeat(64)).unwrap(),
        );
        m.insert("benefit".into(), benefit("advisory"));
        m.insert(
            "authority".into(),
            Json::object([("type", Json::str("manual"))]),
        );
        Json::Obj(m)
    }

    pub(crate) fn audit(limit: i64, pool: i64, evaluations: i64) -> Json {
        Json::object([
            ("calibration_digest", Json::str(d('1'))),
            ("candidate_pool_count", Json::Int(pool)),
            ("policy_digest", Json::str(d('2'))),
            ("policy_schema_id", Json::str(BENEFIT_POLICY_SCHEMA_ID)),
            ("requested_limit", Json::Int(limit)),
            ("result_digest", Json::str(d('3'))),
            ("result_schema_id", Json::str(BENEFIT_RESULT_SCHEMA_ID)),
            ("search_evaluation_count", Json::Int(evaluations)),
            (
                "selection_algorithm_id",
                Json::str(BENEFIT_SELECTION_ALGORITHM_ID),
            ),
        ])
    }

    pub(crate) fn ready_value() -> Json {
        Json::object([
            ("abstention_code", Json::Null),
            ("benefit_audit", audit(5, 3, 9)),
            (
                "capabilities",
                Json::Arr(vec![load_row(), manual_row("agent:helper")]),
            ),
            ("status", Json::str("ready")),
        ])
    }

    fn with(doc: &Json, key: &str, value: Json) -> Json {
        let mut m = doc.as_obj().unwrap().clone();
        m.insert(key.into(), value);
        Json::Obj(m)
    }

    fn msg(r: Result<(), ProtocolError>) -> String {
        r.unwrap_err().message().to_owned()
    }

    #[test]
    fn rows_of_each_authority_validate() {
        validate_plan_row(&load_row()).unwrap();
        validate_plan_row(&install_row()).unwrap();
        validate_plan_row(&manual_row("agent:helper")).unwrap();
        assert_eq!(row_tier(&manual_row("agent:helper")), "advisory");
        assert!(
            canonical_row_order_key(&load_row()) < canonical_row_order_key(&manual_row("agent:a"))
        );
    }

    #[test]
    fn row_rejections() {
        let row = load_row();
        assert_eq!(
            msg(validate_plan_row(&with(&row, "extra", Json::Null))),
            "schema-v3 plan capability has unknown field(s): extra"
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "benefit",
                benefit("advisory")
            ))),
            format!("{ROW_INVALID}: load authority requires executable benefit facts")
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "actionability",
                Json::str("manual")
            ))),
            format!("{ROW_INVALID}: manual presentation requires empty manual authority")
        );
        let mut catalog = demo_catalog().as_obj().unwrap().clone();
        catalog.insert("identity_digest".into(), Json::str(d('f')));
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "catalog_identity",
                Json::Obj(catalog)
            ))),
            format!("{ROW_INVALID}: identity_digest does not match catalog identity fields")
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "normalized_score_ppm",
                Json::Int(1_000_001)
            ))),
            format!(
                "{ROW_INVALID}: normalized_score_ppm must be an integer from 0 through 1000000"
            )
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "reason_codes",
                Json::Arr(vec![])
            ))),
            format!("{ROW_INVALID}: reason_codes must explain the candidate")
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "install_plan_digest",
                Json::str(d('1'))
            ))),
            format!(
                "{ROW_INVALID}: install descriptor and plan digests are allowed only for install candidates"
            )
        );
        let install = install_row();
        assert_eq!(
            msg(validate_plan_row(&with(
                &install,
                "install_plan_digest",
                Json::str(d('1'))
            ))),
            format!(
                "{ROW_INVALID}: install authority must exactly match capability and presentation digests"
            )
        );
        assert_eq!(
            msg(validate_plan_row(&with(
                &row,
                "authority",
                Json::object([("type", Json::str("other"))])
            ))),
            "schema-v3 planning authority type is unsupported"
        );
    }

    #[test]
    fn benefit_audit_rules() {
        validate_benefit_audit(&audit(5, 3, 9)).unwrap();
        assert_eq!(
            msg(validate_benefit_audit(&with(
                &audit(5, 3, 9),
                "result_schema_id",
                Json::str("ctx.x")
            ))),
            "benefit audit result schema is unsupported"
        );
        assert_eq!(
            msg(validate_benefit_audit(&with(
                &audit(5, 3, 9),
                "requested_limit",
                Json::Int(6)
            ))),
            "benefit audit requested_limit exceeds its maximum"
        );
        assert_eq!(
            msg(validate_benefit_audit(&with(
                &audit(5, 3, 9),
                "policy_digest",
                Json::str("x")
            ))),
            "benefit audit policy_digest must be a lowercase SHA-256 digest"
        );
        let mut m = audit(5, 3, 9).as_obj().unwrap().clone();
        m.remove("policy_digest");
        assert_eq!(
            msg(validate_benefit_audit(&Json::Obj(m))),
            "schema-v3 benefit audit is missing field(s): policy_digest"
        );
    }

    fn plan(status: &str, code: Option<&str>, audit_value: Json, rows: Vec<Json>) -> CommittedPlan {
        CommittedPlan {
            abstention_code: code.map(str::to_owned),
            benefit_audit: audit_value,
            capabilities: rows,
            catalog_snapshot_id: d('8'),
            decision_digest: d('9'),
            plan_id: "plan-1".into(),
            status: status.into(),
        }
    }

    #[test]
    fn committed_plan_rules() {
        let ready = plan(
            "ready",
            None,
            audit(5, 3, 9),
            vec![load_row(), manual_row("agent:helper")],
        );
        validate_committed_plan(&ready).unwrap();
        assert_eq!(committed_plan_from_json(&ready.to_json()).unwrap(), ready);
        let reversed = plan(
            "ready",
            None,
            audit(5, 3, 9),
            vec![manual_row("agent:helper"), load_row()],
        );
        assert_eq!(
            msg(validate_committed_plan(&reversed)),
            "schema-v3 committed plan capabilities are not in canonical order"
        );
        let dup = plan("ready", None, audit(5, 3, 9), vec![load_row(), load_row()]);
        assert_eq!(
            msg(validate_committed_plan(&dup)),
            "schema-v3 committed plan contains duplicate capability IDs"
        );
        let no_audit = plan("ready", None, Json::Null, vec![load_row()]);
        assert_eq!(
            msg(validate_committed_plan(&no_audit)),
            "ready schema-v3 plan requires the exact benefit audit"
        );
        let abstained = plan("abstained", Some("limit-zero"), audit(0, 0, 0), vec![]);
        validate_committed_plan(&abstained).unwrap();
        let bad_limit_zero = plan("abstained", Some("limit-zero"), audit(1, 0, 0), vec![]);
        assert_eq!(
            msg(validate_committed_plan(&bad_limit_zero)),
            "limit-zero benefit audit requires a zero limit and zero search"
        );
        let degraded = plan("degraded", Some("planner-failed"), Json::Null, vec![]);
        validate_committed_plan(&degraded).unwrap();
        let degraded_audit = plan("degraded", Some("planner-failed"), audit(0, 0, 0), vec![]);
        assert_eq!(
            msg(validate_committed_plan(&degraded_audit)),
            "degraded schema-v3 plan requires no rows or benefit audit"
        );
        let other = plan("paused", None, Json::Null, vec![]);
        assert_eq!(
            msg(validate_committed_plan(&other)),
            "schema-v3 committed plan status is unsupported"
        );
        let small_limit = plan(
            "ready",
            None,
            audit(1, 3, 9),
            vec![load_row(), manual_row("agent:helper")],
        );
        assert_eq!(
            msg(validate_committed_plan(&small_limit)),
            "benefit audit requested_limit is smaller than persisted rows"
        );
        assert_eq!(
            committed_plan_from_json(&with(&ready.to_json(), "x", Json::Null))
                .unwrap_err()
                .message(),
            "schema-v3 committed plan has unknown field(s): x"
        );
    }

    fn vmsg(r: Result<(), ReplayError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn decision_value_rules() {
        validate_capability_plan_value(&ready_value()).unwrap();
        let install_value = with(
            &ready_value(),
            "capabilities",
            Json::Arr(vec![install_row()]),
        );
        validate_capability_plan_value(&install_value).unwrap();
        assert_eq!(
            vmsg(validate_capability_plan_value(&with(
                &ready_value(),
                "extra",
                Json::Null
            ))),
            "capability plan v3 has missing or unknown fields"
        );
        let reversed = with(
            &ready_value(),
            "capabilities",
            Json::Arr(vec![manual_row("agent:helper"), load_row()]),
        );
        assert_eq!(
            vmsg(validate_capability_plan_value(&reversed)),
            "capability plan v3 capabilities must use canonical order"
        );
        let bad_row = with(&load_row(), "benefit", benefit("advisory"));
        assert_eq!(
            vmsg(validate_capability_plan_value(&with(
                &ready_value(),
                "capabilities",
                Json::Arr(vec![bad_row])
            ))),
            "capabilities[0] load authority must be executable"
        );
        let bad_digest = with(&load_row(), "catalog_entry_digest", Json::str("nope"));
        let err = validate_capability_plan_value(&with(
            &ready_value(),
            "capabilities",
            Json::Arr(vec![bad_digest]),
        ))
        .unwrap_err();
        assert!(matches!(err, ReplayError::Privacy(_)));
        assert_eq!(
            err.to_string(),
            "capabilities[0].catalog_entry_digest must be a lowercase SHA-256 digest"
        );
        let abstained = Json::object([
            ("abstention_code", Json::str("below-net-benefit")),
            ("benefit_audit", audit(5, 0, 0)),
            ("capabilities", Json::Arr(vec![])),
            ("status", Json::str("abstained")),
        ]);
        assert_eq!(
            vmsg(validate_capability_plan_value(&abstained)),
            "below-net-benefit abstention is inconsistent"
        );
        let degraded = Json::object([
            ("abstention_code", Json::str("catalog-unavailable")),
            ("benefit_audit", Json::Null),
            ("capabilities", Json::Arr(vec![])),
            ("status", Json::str("degraded")),
        ]);
        validate_capability_plan_value(&degraded).unwrap();
    }
}
