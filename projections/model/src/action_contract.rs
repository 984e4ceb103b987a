//! The host action contract (spec/engine.md §9) and the typed receipt
//! verifications (spec/engine.md §9) of the installation contract (contract 3), plus the pure
//! builders the reducer uses for the exact payloads, verifications and rollbacks this contract
//! demands.
//!
//! Contract 3 only: historical payload forms (the legacy five-digest install descriptor, legacy
//! consent requests, schema-less material payloads, `{host_state}` receipts) and prompt-context
//! actions are refused as unsupported schemas.

use crate::documents::{
    INSTALL_DESCRIPTOR_SCHEMA_V2, descriptor_matches_result_material, validate_authorized_material,
    validate_catalog_identity, validate_install_plan_descriptor, validate_material_identity,
};
use crate::json::{Json, JsonMap};
use crate::protocol::{
    ACTIVE_CAPABILITIES_MAX, ActionKind, HostAction, INSTALL_ACTION_PAYLOAD_SCHEMA_V3,
    INSTALL_CONSENT_REQUEST_SCHEMA_V3, INSTALL_RECEIPT_SCHEMA_V3,
    MATERIAL_ACTION_PAYLOAD_SCHEMA_V3, MATERIAL_RECEIPT_SCHEMA_V3, ProtocolError, names, perr,
    unknown_keys,
};
use crate::shape::{is_capability_identity, is_sha, is_trimmed};
use crate::vocab::{CapabilityKind, INSTALLER_DIGEST};

/// The prompt-context receipt schema: valid protocol, but not accepted by reducer v3.
pub const PROMPT_CONTEXT_RECEIPT_SCHEMA_V1: &str = "ctx.prompt-context-receipt-v1";

const INSTALL_V3_KEYS: [&str; 7] = [
    "capability_kind",
    "catalog_identity",
    "install_plan_descriptor",
    "installer_digest",
    "policy_snapshot_digest",
    "result_material",
    "schema",
];
const REQUESTED_IDENTITY_KEYS: [&str; 4] = [
    "requested_action_content_digest",
    "requested_action_id",
    "requested_action_kind",
    "requested_action_precondition_revision",
];
const MATERIAL_V3_KEYS: [&str; 5] = [
    "authorized_material",
    "capability_kind",
    "catalog_identity",
    "material_identity",
    "schema",
];
const VERIFICATION_KEYS: [&str; 3] = ["expected_state", "receipt_required", "receipt_schema"];
const INSTALL_RECEIPT_KEYS: [&str; 9] = [
    "capability_id",
    "capability_kind",
    "catalog_identity",
    "host_state",
    "install_plan_descriptor",
    "installer_digest",
    "material_identity",
    "policy_snapshot_digest",
    "schema",
];
const MATERIAL_RECEIPT_KEYS: [&str; 7] = [
    "authorized_material",
    "capability_id",
    "capability_kind",
    "catalog_identity",
    "host_state",
    "material_identity",
    "schema",
];

// ---------------------------------------------------------------------------------------------
// Field helpers with the protocol's messages

/// An object whose keys are a subset of `allowed` ("has unknown field(s): 'a', 'b'").
fn reject_unknown<'a>(
    value: &'a Json,
    allowed: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ProtocolError> {
    let Some(m) = value.as_obj() else {
        return perr(format!("{name} must be a JSON object"));
    };
    let unknown = unknown_keys(m, allowed);
    if !unknown.is_empty() {
        return perr(format!("{name} has unknown field(s): {}", names(unknown)));
    }
    Ok(m)
}

/// Every key of `keys` present; names the first missing one in sorted order.
fn require_all(m: &JsonMap, keys: &[&str], name: &str) -> Result<(), ProtocolError> {
    let mut missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !m.contains_key(*k))
        .collect();
    missing.sort_unstable();
    match missing.first() {
        Some(first) => perr(format!("{name} is missing {first}")),
        None => Ok(()),
    }
}

fn required_string<'a>(value: Option<&'a Json>, name: &str) -> Result<&'a str, ProtocolError> {
    match value.and_then(Json::as_str) {
        Some(s) if is_trimmed(s) => Ok(s),
        _ => perr(format!("{name} must be a non-empty trimmed string")),
    }
}

fn required_sha<'a>(value: Option<&'a str>, name: &str) -> Result<&'a str, ProtocolError> {
    match value {
        Some(s) if !is_trimmed(s) => perr(format!("{name} must be a non-empty trimmed string")),
        Some(s) if is_sha(s) => Ok(s),
        Some(_) => perr(format!("{name} must be a lowercase SHA-256 digest")),
        None => perr(format!("{name} must be a non-empty trimmed string")),
    }
}

fn field<'a>(m: &'a JsonMap, key: &str) -> &'a Json {
    m.get(key).unwrap_or(&Json::Null)
}

/// A nested typed document: an object that passes its validator, or "{name} is invalid: …".
fn typed<'a>(
    value: &'a Json,
    name: &str,
    validate: fn(&Json) -> Result<(), ProtocolError>,
) -> Result<&'a Json, ProtocolError> {
    if value.as_obj().is_none() {
        return perr(format!("{name} must be a JSON object"));
    }
    validate(value)
        .map_err(|e| ProtocolError::new(format!("{name} is invalid: {}", e.message())))?;
    Ok(value)
}

fn doc_str<'a>(doc: &'a Json, key: &str) -> &'a str {
    doc.get_str(key).unwrap_or_default()
}

/// A v2 install plan descriptor that names `result_material` exactly.
fn typed_descriptor_v2<'a>(
    value: &'a Json,
    result_material: &Json,
    name: &str,
) -> Result<&'a Json, ProtocolError> {
    let descriptor = typed(value, name, validate_install_plan_descriptor)?;
    if descriptor.get_str("schema") != Some(INSTALL_DESCRIPTOR_SCHEMA_V2) {
        return perr(format!("{name} must use the exact v2 descriptor schema"));
    }
    if !descriptor_matches_result_material(descriptor, result_material) {
        return perr(format!(
            "{name} does not match the exact result_material identity"
        ));
    }
    Ok(descriptor)
}

fn declared_kind(m: &JsonMap) -> Result<&str, ProtocolError> {
    let kind = required_string(m.get("capability_kind"), "capability_kind")?;
    if CapabilityKind::parse(kind).is_none() {
        return perr("capability_kind is not a declared capability kind");
    }
    Ok(kind)
}

/// The typed install identities of a v3 install payload (or consent request): returns the
/// capability id, kind and installer id they all agree on.
fn v3_install_binding<'a>(
    m: &'a JsonMap,
    name: &str,
) -> Result<(&'a str, &'a str, &'a str), ProtocolError> {
    let kind = declared_kind(m)?;
    let catalog = typed(
        field(m, "catalog_identity"),
        &format!("{name} catalog_identity"),
        validate_catalog_identity,
    )?;
    let result = typed(
        field(m, "result_material"),
        &format!("{name} result_material"),
        validate_material_identity,
    )?;
    let descriptor = typed_descriptor_v2(
        field(m, "install_plan_descriptor"),
        result,
        &format!("{name} install_plan_descriptor"),
    )?;
    let id = doc_str(catalog, "capability_id");
    if (
        doc_str(catalog, "kind"),
        doc_str(result, "capability_id"),
        doc_str(result, "kind"),
        doc_str(descriptor, "capability_id"),
        doc_str(descriptor, "kind"),
    ) != (kind, id, kind, id, kind)
    {
        return perr(format!(
            "{name} typed identities must match capability_kind and one capability"
        ));
    }
    for key in ["installer_digest", "policy_snapshot_digest"] {
        required_sha(field(m, key).as_str(), key)?;
    }
    Ok((id, kind, doc_str(descriptor, "installer_id")))
}

/// The typed material identities of a v3 material payload (or receipt): catalog identity and
/// material identity must be exactly those inside the authorized material.
fn v3_material_binding<'a>(
    m: &'a JsonMap,
    name: &str,
) -> Result<(&'a str, &'a str), ProtocolError> {
    let kind = declared_kind(m)?;
    let catalog = typed(
        field(m, "catalog_identity"),
        &format!("{name} catalog_identity"),
        validate_catalog_identity,
    )?;
    let material = typed(
        field(m, "material_identity"),
        &format!("{name} material_identity"),
        validate_material_identity,
    )?;
    let authorized = typed(
        field(m, "authorized_material"),
        &format!("{name} authorized_material"),
        validate_authorized_material,
    )?;
    let id = doc_str(authorized, "capability_id");
    if (
        doc_str(catalog, "capability_id"),
        doc_str(catalog, "kind"),
        doc_str(catalog, "identity_digest"),
        doc_str(material, "capability_id"),
        doc_str(material, "kind"),
        doc_str(material, "identity_digest"),
    ) != (
        id,
        kind,
        doc_str(authorized, "catalog_identity_digest"),
        id,
        kind,
        doc_str(authorized, "material_identity_digest"),
    ) {
        return perr(format!(
            "{name} typed identities do not match exact authorized_material"
        ));
    }
    Ok((id, kind))
}

/// The action must target exactly the typed capability, with digest-shaped provenance.
fn v3_action_target(
    action: &HostAction,
    id: &str,
    kind: &str,
    name: &str,
) -> Result<(), ProtocolError> {
    let entity = action.entity_id.as_deref();
    if !entity.is_some_and(|e| is_capability_identity(kind, e)) {
        return perr(format!(
            "{name} capability_kind must exactly match capability_id or entity_id"
        ));
    }
    if entity != Some(id) {
        return perr(format!(
            "{name} entity_id does not match the exact typed capability identity"
        ));
    }
    required_sha(
        action.source_digest.as_deref(),
        &format!("{name} source_digest"),
    )?;
    required_sha(
        action.catalog_snapshot_id.as_deref(),
        &format!("{name} catalog_snapshot_id"),
    )?;
    Ok(())
}

fn v3_verification(
    value: &Json,
    expected_state: &str,
    receipt_schema: &str,
) -> Result<(), ProtocolError> {
    let m = reject_unknown(value, &VERIFICATION_KEYS, "v3 action verification")?;
    require_all(m, &VERIFICATION_KEYS, "v3 action verification")?;
    if field(m, "receipt_required") != &Json::Bool(true) {
        return perr("v3 action receipt_required must be true");
    }
    if field(m, "expected_state").as_str() != Some(expected_state) {
        return perr(format!("v3 action expected_state must be {expected_state}"));
    }
    if field(m, "receipt_schema").as_str() != Some(receipt_schema) {
        return perr(format!("v3 action receipt_schema must be {receipt_schema}"));
    }
    Ok(())
}

fn exact_rollback<'a>(
    action: &'a HostAction,
    keys: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ProtocolError> {
    let m = reject_unknown(&action.rollback, keys, name)?;
    require_all(m, keys, name)?;
    Ok(m)
}

fn v3_rollback(action: &HostAction, installer_id: Option<&str>) -> Result<(), ProtocolError> {
    match action.kind {
        ActionKind::InstallCapability => {
            let m = exact_rollback(action, &["installer_id", "kind"], "v3 install rollback")?;
            if field(m, "kind").as_str() != Some("UninstallCapability") {
                return perr("v3 install rollback kind must be UninstallCapability");
            }
            if field(m, "installer_id").as_str() != installer_id {
                return perr("v3 install rollback installer_id must match install_plan_descriptor");
            }
        }
        ActionKind::PrepareExposure => {
            let m = exact_rollback(action, &["exposure_id", "kind"], "v3 material rollback")?;
            if field(m, "kind").as_str() != Some("cleanup-prepared-exposure")
                || field(m, "exposure_id").as_str() != Some(action.scope.exposure_id.as_str())
            {
                return perr("v3 PrepareExposure rollback must clean the exact exposure");
            }
        }
        ActionKind::DeactivateCapability => {
            let m = exact_rollback(action, &["kind", "source_digest"], "v3 material rollback")?;
            if field(m, "kind").as_str() != Some("ActivateCapability")
                || field(m, "source_digest").as_str() != action.source_digest.as_deref()
            {
                return perr("v3 DeactivateCapability rollback must restore the exact source");
            }
        }
        _ => {
            let m = reject_unknown(&action.rollback, &["kind"], "v3 material rollback")?;
            if field(m, "kind").as_str() != Some("DeactivateCapability") {
                return perr("v3 ActivateCapability rollback must be exact DeactivateCapability");
            }
        }
    }
    Ok(())
}

fn requested_identity(m: &JsonMap, name: &str) -> Result<(), ProtocolError> {
    for key in REQUESTED_IDENTITY_KEYS {
        if !m.contains_key(key) {
            return perr(format!("{name} is missing {key}"));
        }
    }
    required_string(m.get("requested_action_id"), "requested_action_id")?;
    let kind = required_string(m.get("requested_action_kind"), "requested_action_kind")?;
    if !matches!(kind, "InstallCapability" | "UninstallCapability") {
        return perr("requested_action_kind must be InstallCapability or UninstallCapability");
    }
    required_sha(
        field(m, "requested_action_content_digest").as_str(),
        "requested_action_content_digest",
    )?;
    if !matches!(field(m, "requested_action_precondition_revision"), Json::Int(i) if *i >= 0) {
        return perr("requested_action_precondition_revision must be a non-negative integer");
    }
    Ok(())
}

fn non_empty_object(value: &Json, name: &str) -> Result<(), ProtocolError> {
    match value.as_obj() {
        Some(m) if !m.is_empty() => Ok(()),
        _ => perr(format!("{name} must be a non-empty JSON object")),
    }
}

// ---------------------------------------------------------------------------------------------
// The action contract

/// Applies the kind-specific contract rules of spec/engine.md §9 for contract 3.
pub fn validate_action(action: &HostAction) -> Result<(), ProtocolError> {
    let kind = action.kind;
    if kind == ActionKind::PreparePromptContext {
        // Prompt context (reducer v4) is outside contract 3.
        return perr("PreparePromptContext payload schema is unsupported");
    }
    if kind.is_physical() {
        for (name, value) in [
            ("entity_id", &action.entity_id),
            ("source_digest", &action.source_digest),
            ("plan_id", &action.plan_id),
            ("catalog_snapshot_id", &action.catalog_snapshot_id),
            ("required_host_feature", &action.required_host_feature),
        ] {
            if value.is_none() {
                return perr(format!("{name} is required for physical action {kind}"));
            }
        }
        non_empty_object(&action.verification, "verification")?;
        if kind.is_lease_bounded() {
            if action.lease_id.is_none() {
                return perr(format!("lease_id is required for {kind}"));
            }
            if action.expires_at.is_none() {
                return perr(format!("expires_at is required for {kind}"));
            }
        }
        if kind.is_persistent() && action.consent_id.is_none() {
            return perr(format!("consent_id is required for {kind}"));
        }
        non_empty_object(&action.rollback, "rollback")?;
        if kind == ActionKind::InstallCapability {
            if action.payload.get_str("schema") != Some(INSTALL_ACTION_PAYLOAD_SCHEMA_V3) {
                return perr("InstallCapability payload schema is unsupported");
            }
            let name = "v3 InstallCapability payload";
            let m = reject_unknown(&action.payload, &INSTALL_V3_KEYS, name)?;
            require_all(m, &INSTALL_V3_KEYS, name)?;
            let (id, cap_kind, installer_id) = v3_install_binding(m, name)?;
            v3_action_target(action, id, cap_kind, name)?;
            v3_verification(&action.verification, "installed", INSTALL_RECEIPT_SCHEMA_V3)?;
            v3_rollback(action, Some(installer_id))?;
        } else if let Some(expected_state) = kind.expected_material_state() {
            if action.payload.get_str("schema") != Some(MATERIAL_ACTION_PAYLOAD_SCHEMA_V3) {
                return perr(format!("{kind} payload schema is unsupported"));
            }
            let name = format!("v3 {kind} payload");
            let m = reject_unknown(&action.payload, &MATERIAL_V3_KEYS, &name)?;
            require_all(m, &MATERIAL_V3_KEYS, &name)?;
            let (id, cap_kind) = v3_material_binding(m, &name)?;
            v3_action_target(action, id, cap_kind, &name)?;
            v3_verification(
                &action.verification,
                expected_state,
                MATERIAL_RECEIPT_SCHEMA_V3,
            )?;
            v3_rollback(action, None)?;
        }
        return Ok(());
    }
    match kind {
        ActionKind::RequestConsent => {
            for (name, value) in [
                ("consent_id", &action.consent_id),
                ("entity_id", &action.entity_id),
                ("source_digest", &action.source_digest),
                ("plan_id", &action.plan_id),
                ("catalog_snapshot_id", &action.catalog_snapshot_id),
                ("required_host_feature", &action.required_host_feature),
            ] {
                if value.is_none() {
                    return perr(format!("{name} is required for RequestConsent"));
                }
            }
            if action.payload.get_str("schema") != Some(INSTALL_CONSENT_REQUEST_SCHEMA_V3) {
                return perr("RequestConsent payload schema is unsupported");
            }
            let name = "v3 RequestConsent payload";
            let keys: Vec<&str> = INSTALL_V3_KEYS
                .iter()
                .chain(&REQUESTED_IDENTITY_KEYS)
                .copied()
                .collect();
            let m = reject_unknown(&action.payload, &keys, name)?;
            require_all(m, &keys, name)?;
            requested_identity(m, name)?;
            if field(m, "requested_action_kind").as_str() != Some("InstallCapability") {
                return perr("v3 RequestConsent requested_action_kind must be InstallCapability");
            }
            let (id, cap_kind, _) = v3_install_binding(m, name)?;
            v3_action_target(action, id, cap_kind, name)?;
            let next = i64::try_from(action.precondition_revision)
                .ok()
                .and_then(|r| r.checked_add(1));
            if field(m, "requested_action_precondition_revision").as_i64() != next {
                return perr(
                    "requested_action_precondition_revision must target the next committed revision",
                );
            }
        }
        ActionKind::PresentBundle => {
            let Some(rows) = action.payload.get("capabilities").and_then(Json::as_arr) else {
                return perr("PresentBundle payload.capabilities must be an array");
            };
            if rows.len() > ACTIVE_CAPABILITIES_MAX {
                return perr("PresentBundle cannot contain more than five capabilities");
            }
        }
        ActionKind::Notify => {
            required_string(action.payload.get("message"), "Notify payload.message")?;
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Builders (pure) for the exact values contract 3 demands

/// The v3 InstallCapability payload.
pub fn install_payload(
    kind: &str,
    catalog_identity: &Json,
    result_material: &Json,
    descriptor: &Json,
    policy_snapshot_digest: &str,
) -> Json {
    Json::object([
        ("schema", Json::str(INSTALL_ACTION_PAYLOAD_SCHEMA_V3)),
        ("capability_kind", Json::str(kind)),
        ("catalog_identity", catalog_identity.clone()),
        ("result_material", result_material.clone()),
        ("install_plan_descriptor", descriptor.clone()),
        ("installer_digest", Json::str(INSTALLER_DIGEST)),
        ("policy_snapshot_digest", Json::str(policy_snapshot_digest)),
    ])
}

/// The v3 RequestConsent payload: the install payload with the consent-request schema plus the
/// identity of the precomputed install action it asks about.
pub fn consent_request_payload(
    install_payload: &Json,
    requested_action_id: &str,
    requested_action_content_digest: &str,
    requested_action_precondition_revision: u64,
) -> Json {
    let mut m = install_payload.as_obj().cloned().unwrap_or_default();
    m.insert(
        "schema".into(),
        Json::str(INSTALL_CONSENT_REQUEST_SCHEMA_V3),
    );
    m.insert("requested_action_id".into(), Json::str(requested_action_id));
    m.insert(
        "requested_action_kind".into(),
        Json::str("InstallCapability"),
    );
    m.insert(
        "requested_action_content_digest".into(),
        Json::str(requested_action_content_digest),
    );
    m.insert(
        "requested_action_precondition_revision".into(),
        Json::from(requested_action_precondition_revision),
    );
    Json::Obj(m)
}

/// The v3 material action payload (Activate, PrepareExposure, Deactivate).
pub fn material_payload(
    kind: &str,
    catalog_identity: &Json,
    material_identity: &Json,
    authorized_material: &Json,
) -> Json {
    Json::object([
        ("schema", Json::str(MATERIAL_ACTION_PAYLOAD_SCHEMA_V3)),
        ("capability_kind", Json::str(kind)),
        ("catalog_identity", catalog_identity.clone()),
        ("material_identity", material_identity.clone()),
        ("authorized_material", authorized_material.clone()),
    ])
}

/// The verification of a v3 install action.
pub fn install_verification() -> Json {
    Json::object([
        ("expected_state", Json::str("installed")),
        ("receipt_required", Json::Bool(true)),
        ("receipt_schema", Json::str(INSTALL_RECEIPT_SCHEMA_V3)),
    ])
}

/// The verification of a v3 material action expecting `expected_state`.
pub fn material_verification(expected_state: &str) -> Json {
    Json::object([
        ("expected_state", Json::str(expected_state)),
        ("receipt_required", Json::Bool(true)),
        ("receipt_schema", Json::str(MATERIAL_RECEIPT_SCHEMA_V3)),
    ])
}

/// The rollback of a v3 install action.
pub fn install_rollback(installer_id: &str) -> Json {
    Json::object([
        ("installer_id", Json::str(installer_id)),
        ("kind", Json::str("UninstallCapability")),
    ])
}

/// The rollback of a v3 material action of `kind`; `{}` for other kinds.
pub fn material_rollback(kind: ActionKind, exposure_id: &str, source_digest: &str) -> Json {
    match kind {
        ActionKind::ActivateCapability => {
            Json::object([("kind", Json::str("DeactivateCapability"))])
        }
        ActionKind::PrepareExposure => Json::object([
            ("exposure_id", Json::str(exposure_id)),
            ("kind", Json::str("cleanup-prepared-exposure")),
        ]),
        ActionKind::DeactivateCapability => Json::object([
            ("kind", Json::str("ActivateCapability")),
            ("source_digest", Json::str(source_digest)),
        ]),
        _ => Json::Obj(JsonMap::new()),
    }
}

// ---------------------------------------------------------------------------------------------
// Receipt verification (spec/engine.md §9)

/// Validates an `ActionApplied.verification` for reducer v3: an install or material receipt of
/// the matching action kind, with exact fields and typed identities naming one capability.
pub fn validate_receipt_verification(
    action_kind: ActionKind,
    verification: &Json,
) -> Result<(), ProtocolError> {
    let Some(m) = verification.as_obj() else {
        return perr("ActionApplied verification must be a JSON object");
    };
    match field(m, "schema") {
        Json::Null => perr("schema-v3 ActionApplied requires a typed receipt verification"),
        Json::Str(s) if s == INSTALL_RECEIPT_SCHEMA_V3 => {
            validate_install_receipt(action_kind, verification, m)
        }
        Json::Str(s) if s == MATERIAL_RECEIPT_SCHEMA_V3 => {
            validate_material_receipt(action_kind, verification, m)
        }
        Json::Str(s) if s == PROMPT_CONTEXT_RECEIPT_SCHEMA_V1 => {
            perr("schema-v3 ActionApplied requires a typed receipt verification")
        }
        _ => perr("ActionApplied verification schema is unsupported"),
    }
}

fn validate_install_receipt(
    action_kind: ActionKind,
    value: &Json,
    m: &JsonMap,
) -> Result<(), ProtocolError> {
    if action_kind != ActionKind::InstallCapability {
        return perr("install receipt schema does not match action_kind");
    }
    let name = "v3 install receipt verification";
    reject_unknown(value, &INSTALL_RECEIPT_KEYS, name)?;
    require_all(m, &INSTALL_RECEIPT_KEYS, name)?;
    if field(m, "host_state").as_str() != Some("installed") {
        return perr("v3 install receipt host_state must be installed");
    }
    let id = field(m, "capability_id").as_str().unwrap_or_default();
    let kind = field(m, "capability_kind").as_str().unwrap_or_default();
    if !is_capability_identity(kind, id) {
        return perr(
            "v3 install receipt capability_kind must exactly match capability_id or entity_id",
        );
    }
    let catalog = typed(
        field(m, "catalog_identity"),
        "v3 install receipt catalog_identity",
        validate_catalog_identity,
    )?;
    let material = typed(
        field(m, "material_identity"),
        "v3 install receipt material_identity",
        validate_material_identity,
    )?;
    let descriptor = typed_descriptor_v2(
        field(m, "install_plan_descriptor"),
        material,
        "v3 install receipt install_plan_descriptor",
    )?;
    for key in ["installer_digest", "policy_snapshot_digest"] {
        required_sha(field(m, key).as_str(), key)?;
    }
    let cat_id = doc_str(catalog, "capability_id");
    let cat_kind = doc_str(catalog, "kind");
    if (
        id,
        kind,
        doc_str(material, "capability_id"),
        doc_str(material, "kind"),
        doc_str(descriptor, "capability_id"),
        doc_str(descriptor, "kind"),
    ) != (cat_id, cat_kind, cat_id, cat_kind, cat_id, cat_kind)
    {
        return perr("v3 install receipt typed identities do not match one capability");
    }
    Ok(())
}

fn validate_material_receipt(
    action_kind: ActionKind,
    value: &Json,
    m: &JsonMap,
) -> Result<(), ProtocolError> {
    let Some(expected_state) = action_kind.expected_material_state() else {
        return perr("material receipt schema does not match action_kind");
    };
    let name = "v3 material receipt verification";
    reject_unknown(value, &MATERIAL_RECEIPT_KEYS, name)?;
    require_all(m, &MATERIAL_RECEIPT_KEYS, name)?;
    if field(m, "host_state").as_str() != Some(expected_state) {
        return perr(format!(
            "v3 material receipt host_state must be {expected_state}"
        ));
    }
    let id = field(m, "capability_id").as_str().unwrap_or_default();
    let kind = field(m, "capability_kind").as_str().unwrap_or_default();
    if !is_capability_identity(kind, id) {
        return perr(
            "v3 material receipt capability_kind must exactly match capability_id or entity_id",
        );
    }
    let (bound_id, bound_kind) = v3_material_binding(m, name)?;
    if (id, kind) != (bound_id, bound_kind) {
        return perr("v3 material receipt capability_id does not match typed identities");
    }
    Ok(())
}

/// The exact install receipt verification the reducer demands for a pending install action:
/// every field copied from the action (`material_identity` is its `result_material`). A payload
/// field the action lacks reads as null, which no valid receipt carries, so it cannot match.
/// The caller dispatches on the action kind.
pub fn expected_install_receipt(action: &HostAction) -> Json {
    let p = |k: &str| action.payload.get(k).cloned().unwrap_or(Json::Null);
    Json::object([
        ("schema", Json::str(INSTALL_RECEIPT_SCHEMA_V3)),
        ("host_state", Json::str("installed")),
        ("capability_id", Json::opt_str(action.entity_id.as_deref())),
        ("capability_kind", p("capability_kind")),
        ("catalog_identity", p("catalog_identity")),
        ("material_identity", p("result_material")),
        ("install_plan_descriptor", p("install_plan_descriptor")),
        ("installer_digest", p("installer_digest")),
        ("policy_snapshot_digest", p("policy_snapshot_digest")),
    ])
}

/// The exact material receipt verification the reducer demands for a pending material action:
/// the action's expected state and its payload's typed identities.
pub fn expected_material_receipt(action: &HostAction) -> Json {
    let p = |k: &str| action.payload.get(k).cloned().unwrap_or(Json::Null);
    Json::object([
        ("schema", Json::str(MATERIAL_RECEIPT_SCHEMA_V3)),
        (
            "host_state",
            action
                .verification
                .get("expected_state")
                .cloned()
                .unwrap_or(Json::Null),
        ),
        ("capability_id", Json::opt_str(action.entity_id.as_deref())),
        ("capability_kind", p("capability_kind")),
        ("catalog_identity", p("catalog_identity")),
        ("material_identity", p("material_identity")),
        ("authorized_material", p("authorized_material")),
    ])
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::tests::{
        d, demo_catalog, demo_descriptor_v2, demo_install_descriptor, demo_lineage, demo_material,
    };
    use crate::documents::{authorized_material_from_catalog, authorized_material_from_lineage};
    use crate::protocol::{PrivacyLabel, ScopeRef};

    pub(crate) fn scope() -> ScopeRef {
        ScopeRef::new(
            "tenant-a",
            "workspace-a",
            "repo-a",
            "session-a",
            "exposure-a",
            "host-a",
            None,
        )
        .unwrap()
    }

    fn base(kind: ActionKind) -> HostAction {
        HostAction {
            action_id: "action-1".into(),
            kind,
            scope: scope(),
            precondition_revision: 3,
            payload: Json::Obj(JsonMap::new()),
            privacy: PrivacyLabel::default(),
            entity_id: Some("skill:demo".into()),
            source_digest: Some(d('5')),
            plan_id: Some("plan-1".into()),
            catalog_snapshot_id: Some(d('8')),
            consent_id: None,
            lease_id: None,
            required_host_feature: None,
            expires_at: None,
            verification: Json::Obj(JsonMap::new()),
            rollback: Json::Obj(JsonMap::new()),
        }
    }

    pub(crate) fn install_action() -> HostAction {
        let descriptor = demo_install_descriptor();
        let mut a = base(ActionKind::InstallCapability);
        a.payload = install_payload(
            "skill",
            &demo_catalog(),
            &demo_material(),
            &descriptor,
            &d('4'),
        );
        a.consent_id = Some("consent-1".into());
        a.required_host_feature = Some("installation".into());
        a.expires_at = Some("2026-01-01T01:00:00Z".into());
        a.verification = install_verification();
        a.rollback = install_rollback(descriptor.get_str("installer_id").unwrap());
        a
    }

    pub(crate) fn material_action(kind: ActionKind, installed: bool) -> HostAction {
        let catalog = demo_catalog();
        let authorized = if installed {
            authorized_material_from_lineage(&demo_lineage()).unwrap()
        } else {
            authorized_material_from_catalog(
                catalog.get_str("identity_digest").unwrap(),
                &demo_descriptor_v2(),
            )
            .unwrap()
        };
        let mut a = base(kind);
        a.payload = material_payload("skill", &catalog, &demo_material(), &authorized);
        a.lease_id = Some("lease-1".into());
        a.required_host_feature = Some("activation".into());
        a.expires_at = Some("2026-01-01T01:00:00Z".into());
        a.verification = material_verification(kind.expected_material_state().unwrap());
        a.rollback = material_rollback(kind, "exposure-a", &d('5'));
        a
    }

    fn msg(r: Result<(), ProtocolError>) -> String {
        r.unwrap_err().message().to_owned()
    }

    fn set_payload(a: &mut HostAction, key: &str, value: Json) {
        if let Json::Obj(m) = &mut a.payload {
            m.insert(key.into(), value);
        }
    }

    #[test]
    fn built_actions_satisfy_the_contract() {
        validate_action(&install_action()).unwrap();
        for kind in [
            ActionKind::ActivateCapability,
            ActionKind::PrepareExposure,
            ActionKind::DeactivateCapability,
        ] {
            validate_action(&material_action(kind, true)).unwrap();
            validate_action(&material_action(kind, false)).unwrap();
        }
        let install = install_action();
        let mut consent = base(ActionKind::RequestConsent);
        consent.consent_id = Some("consent-1".into());
        consent.required_host_feature = Some("installation-consent".into());
        consent.precondition_revision = 2;
        consent.payload = consent_request_payload(
            &install.payload,
            &install.action_id,
            &install.content_digest(),
            3,
        );
        validate_action(&consent).unwrap();
        consent.precondition_revision = 3;
        assert_eq!(
            msg(validate_action(&consent)),
            "requested_action_precondition_revision must target the next committed revision"
        );
    }

    #[test]
    fn install_action_rejections() {
        let mut a = install_action();
        set_payload(&mut a, "extra", Json::Null);
        assert_eq!(
            msg(validate_action(&a)),
            "v3 InstallCapability payload has unknown field(s): 'extra'"
        );
        let mut a = install_action();
        set_payload(&mut a, "schema", Json::str("ctx.other"));
        assert_eq!(
            msg(validate_action(&a)),
            "InstallCapability payload schema is unsupported"
        );
        let mut a = install_action();
        let mut descriptor = demo_install_descriptor().as_obj().unwrap().clone();
        descriptor.insert("descriptor_digest".into(), Json::str(d('f')));
        set_payload(&mut a, "install_plan_descriptor", Json::Obj(descriptor));
        assert_eq!(
            msg(validate_action(&a)),
            "v3 InstallCapability payload install_plan_descriptor is invalid: descriptor_digest does not match descriptor fields"
        );
        let mut a = install_action();
        a.entity_id = Some("skill:other".into());
        assert_eq!(
            msg(validate_action(&a)),
            "v3 InstallCapability payload entity_id does not match the exact typed capability identity"
        );
        let mut a = install_action();
        a.consent_id = None;
        assert_eq!(
            msg(validate_action(&a)),
            "consent_id is required for InstallCapability"
        );
        let mut a = install_action();
        a.rollback = install_rollback("someone-else");
        assert_eq!(
            msg(validate_action(&a)),
            "v3 install rollback installer_id must match install_plan_descriptor"
        );
        let mut a = install_action();
        a.verification = material_verification("installed");
        assert_eq!(
            msg(validate_action(&a)),
            "v3 action receipt_schema must be ctx.install-receipt-v3"
        );
    }

    #[test]
    fn material_action_rejections() {
        let mut a = material_action(ActionKind::ActivateCapability, true);
        a.lease_id = None;
        assert_eq!(
            msg(validate_action(&a)),
            "lease_id is required for ActivateCapability"
        );
        let mut a = material_action(ActionKind::ActivateCapability, true);
        a.payload = Json::Obj(JsonMap::new());
        assert_eq!(
            msg(validate_action(&a)),
            "ActivateCapability payload schema is unsupported"
        );
        let mut a = material_action(ActionKind::PrepareExposure, true);
        a.rollback = material_rollback(ActionKind::PrepareExposure, "other", &d('5'));
        assert_eq!(
            msg(validate_action(&a)),
            "v3 PrepareExposure rollback must clean the exact exposure"
        );
        let mut a = material_action(ActionKind::DeactivateCapability, true);
        set_payload(&mut a, "material_identity", material_identity_other());
        assert_eq!(
            msg(validate_action(&a)),
            "v3 DeactivateCapability payload typed identities do not match exact authorized_material"
        );
        let mut a = base(ActionKind::PreparePromptContext);
        a.entity_id = None;
        assert_eq!(
            msg(validate_action(&a)),
            "PreparePromptContext payload schema is unsupported"
        );
    }

    fn material_identity_other() -> Json {
        crate::documents::material_identity("skill:demo", "skill", &d('9'), 9).unwrap()
    }

    #[test]
    fn bundle_and_notify_rules() {
        let mut a = base(ActionKind::PresentBundle);
        a.payload = Json::object([("capabilities", Json::Arr(vec![Json::Null; 6]))]);
        assert_eq!(
            msg(validate_action(&a)),
            "PresentBundle cannot contain more than five capabilities"
        );
        a.payload = Json::Obj(JsonMap::new());
        assert_eq!(
            msg(validate_action(&a)),
            "PresentBundle payload.capabilities must be an array"
        );
        let mut n = base(ActionKind::Notify);
        n.payload = Json::object([("message", Json::str(" x"))]);
        assert_eq!(
            msg(validate_action(&n)),
            "Notify payload.message must be a non-empty trimmed string"
        );
    }

    #[test]
    fn receipts_match_their_actions() {
        let install = install_action();
        let receipt = expected_install_receipt(&install);
        validate_receipt_verification(ActionKind::InstallCapability, &receipt).unwrap();
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::ActivateCapability,
                &receipt
            )),
            "install receipt schema does not match action_kind"
        );
        let activate = material_action(ActionKind::ActivateCapability, true);
        let material_receipt = expected_material_receipt(&activate);
        validate_receipt_verification(ActionKind::ActivateCapability, &material_receipt).unwrap();
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::InstallCapability,
                &material_receipt
            )),
            "material receipt schema does not match action_kind"
        );
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::PrepareExposure,
                &material_receipt
            )),
            "v3 material receipt host_state must be prepared"
        );
        let legacy = Json::object([("host_state", Json::str("installed"))]);
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::InstallCapability,
                &legacy
            )),
            "schema-v3 ActionApplied requires a typed receipt verification"
        );
        let other = Json::object([("schema", Json::str("ctx.other"))]);
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::InstallCapability,
                &other
            )),
            "ActionApplied verification schema is unsupported"
        );
        let mut extra = receipt.as_obj().unwrap().clone();
        extra.insert("zzz".into(), Json::Null);
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::InstallCapability,
                &Json::Obj(extra)
            )),
            "v3 install receipt verification has unknown field(s): 'zzz'"
        );
        let mut missing = receipt.as_obj().unwrap().clone();
        missing.remove("installer_digest");
        assert_eq!(
            msg(validate_receipt_verification(
                ActionKind::InstallCapability,
                &Json::Obj(missing)
            )),
            "v3 install receipt verification is missing installer_digest"
        );
    }
}
