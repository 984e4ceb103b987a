//! The install consent challenge value (spec/projections.md §8.2) and its derivation
//! from a pending install action (spec/projections.md §8.3).

use ctx_model::{
    ActionKind, CapabilityKind, HostAction, INSTALL_ACTION_PAYLOAD_SCHEMA_V3,
    InstallExecutionBinding, Json, JsonError, JsonMap, SCOPE_KEYS, ScopeRef, UtcMicros, cja_digest,
    has_exact_keys, is_canonical_timestamp, is_capability_identity, is_sha, is_token,
    validate_plan_row,
};

use super::{ConsentStoreError, binding_error, invalid};

/// Schema of the challenge (its `schema` field).
pub const CHALLENGE_SCHEMA: &str = "ctx.install-consent-challenge-v2";
/// Schema of the selection binding digest's object.
pub const SELECTION_BINDING_SCHEMA: &str = "ctx.install-consent-selection-binding-v1";
/// Longest canonical JSON of a challenge (its 25-key dictionary), in bytes.
pub const CHALLENGE_JSON_MAX_BYTES: usize = 16_384;
/// Longest `capability_id`, in UTF-8 bytes.
pub const CAPABILITY_ID_MAX_BYTES: usize = 256;
/// Longest `requested_action_kind`, in UTF-8 bytes.
pub const REQUESTED_ACTION_KIND_MAX_BYTES: usize = 128;
/// The host feature an install action must require.
pub const INSTALLATION_HOST_FEATURE: &str = "installation";

/// The 24 keys of the digest mapping.
pub const CHALLENGE_DIGEST_KEYS: [&str; 24] = [
    "audience",
    "capability_id",
    "catalog_snapshot_digest",
    "challenge_id",
    "credential_requirement",
    "descriptor_digest",
    "execution_binding_digest",
    "expires_at",
    "install_plan_digest",
    "kind",
    "material_identity_digest",
    "permission_expansion",
    "plan_id",
    "policy_snapshot_digest",
    "release_root_digest",
    "requested_action_content_digest",
    "requested_action_id",
    "requested_action_kind",
    "requested_action_precondition_revision",
    "schema",
    "scope",
    "selection_digest",
    "source_digest",
    "workspace_identity_digest",
];

/// The 25 keys of the full dictionary (the digest mapping plus `challenge_digest`).
pub const CHALLENGE_KEYS: [&str; 25] = [
    "audience",
    "capability_id",
    "catalog_snapshot_digest",
    "challenge_digest",
    "challenge_id",
    "credential_requirement",
    "descriptor_digest",
    "execution_binding_digest",
    "expires_at",
    "install_plan_digest",
    "kind",
    "material_identity_digest",
    "permission_expansion",
    "plan_id",
    "policy_snapshot_digest",
    "release_root_digest",
    "requested_action_content_digest",
    "requested_action_id",
    "requested_action_kind",
    "requested_action_precondition_revision",
    "schema",
    "scope",
    "selection_digest",
    "source_digest",
    "workspace_identity_digest",
];

/// The fields of a challenge, everything but the schema (a constant) and the digest (computed).
/// Build a challenge from them with [`InstallConsentChallenge::new`], which validates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeFields {
    pub challenge_id: String,
    pub audience: String,
    pub workspace_identity_digest: String,
    pub scope: ScopeRef,
    pub capability_id: String,
    pub kind: String,
    pub source_digest: String,
    pub catalog_snapshot_digest: String,
    pub install_plan_digest: String,
    pub descriptor_digest: String,
    pub execution_binding_digest: String,
    pub selection_digest: String,
    pub material_identity_digest: String,
    pub requested_action_content_digest: String,
    pub policy_snapshot_digest: String,
    pub release_root_digest: String,
    pub plan_id: String,
    pub requested_action_id: String,
    pub requested_action_kind: String,
    pub requested_action_precondition_revision: u64,
    pub permission_expansion: bool,
    pub credential_requirement: bool,
    /// Canonical UTC timestamp (spec/engine.md §1).
    pub expires_at: String,
}

/// The exact, immutable identity of one install shown to a human (spec/projections.md §8.2). Only
/// built validated ([`InstallConsentChallenge::new`], [`InstallConsentChallenge::from_json`],
/// [`derive_install_consent_challenge`]); equal when every field, the digest included, is equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallConsentChallenge {
    fields: ChallengeFields,
    /// `H(CJA(digest mapping))`.
    challenge_digest: String,
    /// `expires_at` parsed.
    expires: UtcMicros,
}

fn digest_message(name: &str) -> ConsentStoreError {
    invalid(format!("{name} must be a lowercase SHA-256 digest"))
}

fn token_message(name: &str) -> ConsentStoreError {
    invalid(format!("{name} must be a bounded canonical token"))
}

/// The construction checks of spec/projections.md §8.2, in its order. `bool_fault` names a boolean
/// field whose decoded value was not a boolean (rule 10); the size rule (13) is checked by the
/// caller, which has the canonical bytes.
fn check_fields(
    f: &ChallengeFields,
    bool_fault: Option<&str>,
) -> Result<UtcMicros, ConsentStoreError> {
    if !is_token(&f.challenge_id) {
        return Err(token_message("challenge_id"));
    }
    if !is_token(&f.audience) {
        return Err(token_message("audience"));
    }
    if !is_sha(&f.workspace_identity_digest) {
        return Err(digest_message("workspace_identity_digest"));
    }
    let s = &f.scope;
    for (name, value) in [
        ("tenant_id", &s.tenant_id),
        ("workspace_id", &s.workspace_id),
        ("repository_id", &s.repository_id),
        ("session_id", &s.session_id),
        ("exposure_id", &s.exposure_id),
        ("host_context_id", &s.host_context_id),
    ] {
        if !is_token(value) {
            return Err(token_message(&format!("scope.{name}")));
        }
    }
    if s.parent_exposure_id
        .as_deref()
        .is_some_and(|p| !is_token(p))
    {
        return Err(token_message("scope.parent_exposure_id"));
    }
    if !is_capability_identity(&f.kind, &f.capability_id) {
        return Err(invalid(
            "kind and capability_id must form one canonical identity",
        ));
    }
    if !CapabilityKind::parse(&f.kind).is_some_and(CapabilityKind::is_installable) {
        return Err(invalid("kind is not an installable capability kind"));
    }
    if f.capability_id.len() > CAPABILITY_ID_MAX_BYTES {
        return Err(invalid("capability_id exceeds its bounded size"));
    }
    for (name, value) in [
        ("source_digest", &f.source_digest),
        ("catalog_snapshot_digest", &f.catalog_snapshot_digest),
        ("install_plan_digest", &f.install_plan_digest),
        ("descriptor_digest", &f.descriptor_digest),
        ("execution_binding_digest", &f.execution_binding_digest),
        ("selection_digest", &f.selection_digest),
        ("material_identity_digest", &f.material_identity_digest),
        (
            "requested_action_content_digest",
            &f.requested_action_content_digest,
        ),
        ("policy_snapshot_digest", &f.policy_snapshot_digest),
        ("release_root_digest", &f.release_root_digest),
    ] {
        if !is_sha(value) {
            return Err(digest_message(name));
        }
    }
    for (name, value) in [
        ("plan_id", &f.plan_id),
        ("requested_action_id", &f.requested_action_id),
    ] {
        if !is_token(value) {
            return Err(token_message(name));
        }
    }
    let kind = &f.requested_action_kind;
    if kind.is_empty() || kind.len() > REQUESTED_ACTION_KIND_MAX_BYTES {
        return Err(invalid(format!(
            "requested_action_kind must be non-empty text of at most {REQUESTED_ACTION_KIND_MAX_BYTES} bytes"
        )));
    }
    if kind.chars().any(|c| c < ' ' || c == '\u{7f}') {
        return Err(invalid(
            "requested_action_kind must not contain control characters",
        ));
    }
    // The only action kind a challenge may request (spec/projections.md "consent.store").
    if kind != ActionKind::InstallCapability.as_str() {
        return Err(invalid("requested_action_kind must be InstallCapability"));
    }
    // Stored as a JSON integer (i64): a revision above 2^63 - 1 has no canonical form.
    if f.requested_action_precondition_revision < 1
        || i64::try_from(f.requested_action_precondition_revision).is_err()
    {
        return Err(invalid(
            "requested_action_precondition_revision must be positive",
        ));
    }
    if let Some(name) = bool_fault {
        return Err(invalid(format!("{name} must be a boolean")));
    }
    match UtcMicros::parse(&f.expires_at) {
        Ok(t) if is_canonical_timestamp(&f.expires_at) => Ok(t),
        _ => Err(invalid("expires_at must be a canonical UTC timestamp")),
    }
}

fn digest_mapping(f: &ChallengeFields) -> JsonMap {
    let text = |s: &str| Json::str(s);
    let pairs: [(&str, Json); 24] = [
        ("audience", text(&f.audience)),
        ("capability_id", text(&f.capability_id)),
        ("catalog_snapshot_digest", text(&f.catalog_snapshot_digest)),
        ("challenge_id", text(&f.challenge_id)),
        (
            "credential_requirement",
            Json::Bool(f.credential_requirement),
        ),
        ("descriptor_digest", text(&f.descriptor_digest)),
        (
            "execution_binding_digest",
            text(&f.execution_binding_digest),
        ),
        ("expires_at", text(&f.expires_at)),
        ("install_plan_digest", text(&f.install_plan_digest)),
        ("kind", text(&f.kind)),
        (
            "material_identity_digest",
            text(&f.material_identity_digest),
        ),
        ("permission_expansion", Json::Bool(f.permission_expansion)),
        ("plan_id", text(&f.plan_id)),
        ("policy_snapshot_digest", text(&f.policy_snapshot_digest)),
        ("release_root_digest", text(&f.release_root_digest)),
        (
            "requested_action_content_digest",
            text(&f.requested_action_content_digest),
        ),
        ("requested_action_id", text(&f.requested_action_id)),
        ("requested_action_kind", text(&f.requested_action_kind)),
        (
            "requested_action_precondition_revision",
            Json::from(f.requested_action_precondition_revision),
        ),
        ("schema", text(CHALLENGE_SCHEMA)),
        ("scope", f.scope.to_json()),
        ("selection_digest", text(&f.selection_digest)),
        ("source_digest", text(&f.source_digest)),
        (
            "workspace_identity_digest",
            text(&f.workspace_identity_digest),
        ),
    ];
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

impl InstallConsentChallenge {
    /// Validates `fields` (spec/projections.md §8.2, in order) and computes the digest.
    /// Errors are `Invalid` with the reference's sentence.
    pub fn new(fields: ChallengeFields) -> Result<InstallConsentChallenge, ConsentStoreError> {
        InstallConsentChallenge::build(fields, None)
    }

    fn build(
        fields: ChallengeFields,
        bool_fault: Option<&str>,
    ) -> Result<InstallConsentChallenge, ConsentStoreError> {
        let expires = check_fields(&fields, bool_fault)?;
        let challenge_digest = cja_digest(&Json::Obj(digest_mapping(&fields)));
        let challenge = InstallConsentChallenge {
            fields,
            challenge_digest,
            expires,
        };
        if challenge.to_json_text().len() > CHALLENGE_JSON_MAX_BYTES {
            return Err(invalid(
                "install consent challenge exceeds its bounded size",
            ));
        }
        Ok(challenge)
    }

    /// The 25-key dictionary: the digest mapping plus `challenge_digest`.
    pub fn to_json(&self) -> Json {
        let mut m = digest_mapping(&self.fields);
        m.insert("challenge_digest".into(), Json::str(&self.challenge_digest));
        Json::Obj(m)
    }

    /// The canonical ASCII JSON of [`InstallConsentChallenge::to_json`]: the bytes the journal
    /// stores (the reference's `challenge_json`).
    pub fn to_json_text(&self) -> String {
        self.to_json().to_cja()
    }

    /// Decodes the 25-key dictionary strictly (spec/projections.md §8.2): the
    /// exact key set, the schema, a scope mapping of exactly the seven scope keys, the field
    /// rules, and the supplied digest equal to the recomputed one.
    pub fn from_json(value: &Json) -> Result<InstallConsentChallenge, ConsentStoreError> {
        decode_map(value)
    }

    /// Decodes the canonical JSON text of a challenge: at most [`CHALLENGE_JSON_MAX_BYTES`],
    /// strict JSON (duplicate keys refused), [`InstallConsentChallenge::from_json`], and the text
    /// must be the value's canonical ASCII encoding byte for byte.
    pub fn from_json_text(text: &str) -> Result<InstallConsentChallenge, ConsentStoreError> {
        if text.len() > CHALLENGE_JSON_MAX_BYTES {
            return Err(invalid(
                "install consent challenge exceeds its bounded size",
            ));
        }
        let value = Json::parse(text).map_err(|e| match e {
            JsonError::DuplicateKey { .. } => {
                invalid("install consent challenge JSON contains duplicate fields")
            }
            _ => invalid("install consent challenge JSON is invalid"),
        })?;
        let challenge = InstallConsentChallenge::from_json(&value)?;
        if challenge.to_json_text() != text {
            return Err(invalid("install consent challenge JSON is not canonical"));
        }
        Ok(challenge)
    }

    /// The fields the challenge was built from.
    pub fn fields(&self) -> &ChallengeFields {
        &self.fields
    }
    pub fn challenge_id(&self) -> &str {
        &self.fields.challenge_id
    }
    pub fn challenge_digest(&self) -> &str {
        &self.challenge_digest
    }
    pub fn audience(&self) -> &str {
        &self.fields.audience
    }
    pub fn workspace_identity_digest(&self) -> &str {
        &self.fields.workspace_identity_digest
    }
    pub fn release_root_digest(&self) -> &str {
        &self.fields.release_root_digest
    }
    pub fn scope(&self) -> &ScopeRef {
        &self.fields.scope
    }
    pub fn capability_id(&self) -> &str {
        &self.fields.capability_id
    }
    pub fn kind(&self) -> &str {
        &self.fields.kind
    }
    pub fn source_digest(&self) -> &str {
        &self.fields.source_digest
    }
    pub fn catalog_snapshot_digest(&self) -> &str {
        &self.fields.catalog_snapshot_digest
    }
    pub fn install_plan_digest(&self) -> &str {
        &self.fields.install_plan_digest
    }
    pub fn descriptor_digest(&self) -> &str {
        &self.fields.descriptor_digest
    }
    pub fn execution_binding_digest(&self) -> &str {
        &self.fields.execution_binding_digest
    }
    pub fn selection_digest(&self) -> &str {
        &self.fields.selection_digest
    }
    pub fn material_identity_digest(&self) -> &str {
        &self.fields.material_identity_digest
    }
    pub fn policy_snapshot_digest(&self) -> &str {
        &self.fields.policy_snapshot_digest
    }
    pub fn plan_id(&self) -> &str {
        &self.fields.plan_id
    }
    pub fn requested_action_id(&self) -> &str {
        &self.fields.requested_action_id
    }
    pub fn requested_action_kind(&self) -> &str {
        &self.fields.requested_action_kind
    }
    pub fn requested_action_content_digest(&self) -> &str {
        &self.fields.requested_action_content_digest
    }
    pub fn requested_action_precondition_revision(&self) -> u64 {
        self.fields.requested_action_precondition_revision
    }
    pub fn permission_expansion(&self) -> bool {
        self.fields.permission_expansion
    }
    pub fn credential_requirement(&self) -> bool {
        self.fields.credential_requirement
    }
    /// Canonical UTC text; the pending install action's `expires_at`.
    pub fn expires_at(&self) -> &str {
        &self.fields.expires_at
    }
    /// `expires_at` as an instant.
    pub fn expires_at_micros(&self) -> UtcMicros {
        self.expires
    }
}

/// The scope object of a decoded challenge: exactly the seven scope keys, six strings and a
/// string or null parent. Token rules come later, with the other fields (rule 4).
fn decode_scope(value: &Json) -> Option<ScopeRef> {
    let m = value.as_obj().filter(|m| has_exact_keys(m, &SCOPE_KEYS))?;
    let text = |k: &str| m.get(k).and_then(Json::as_str).map(str::to_owned);
    let parent = match m.get("parent_exposure_id") {
        Some(Json::Null) => None,
        Some(Json::Str(s)) => Some(s.clone()),
        _ => return None,
    };
    Some(ScopeRef {
        tenant_id: text("tenant_id")?,
        workspace_id: text("workspace_id")?,
        repository_id: text("repository_id")?,
        session_id: text("session_id")?,
        exposure_id: text("exposure_id")?,
        host_context_id: text("host_context_id")?,
        parent_exposure_id: parent,
    })
}

fn decode_map(value: &Json) -> Result<InstallConsentChallenge, ConsentStoreError> {
    let Some(m) = value
        .as_obj()
        .filter(|m| has_exact_keys(m, &CHALLENGE_KEYS))
    else {
        return Err(invalid("install consent challenge fields are not exact"));
    };
    if m.get("schema").and_then(Json::as_str) != Some(CHALLENGE_SCHEMA) {
        return Err(invalid("install consent challenge schema is unsupported"));
    }
    let Some(scope) = m.get("scope").and_then(decode_scope) else {
        return Err(invalid("install consent challenge scope is invalid"));
    };
    // A value of the wrong type becomes a value its rule refuses, so the first failing rule in
    // the reference's order names it: "" fails every text rule, 0 the revision rule.
    let text = |k: &str| {
        m.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let revision = m
        .get("requested_action_precondition_revision")
        .and_then(Json::as_i64)
        .and_then(|i| u64::try_from(i).ok())
        .unwrap_or(0);
    let flag = |k: &str| m.get(k).and_then(Json::as_bool);
    let (permission, credential) = (flag("permission_expansion"), flag("credential_requirement"));
    let bool_fault = match (permission, credential) {
        (None, _) => Some("permission_expansion"),
        (_, None) => Some("credential_requirement"),
        _ => None,
    };
    let fields = ChallengeFields {
        challenge_id: text("challenge_id"),
        audience: text("audience"),
        workspace_identity_digest: text("workspace_identity_digest"),
        scope,
        capability_id: text("capability_id"),
        kind: text("kind"),
        source_digest: text("source_digest"),
        catalog_snapshot_digest: text("catalog_snapshot_digest"),
        install_plan_digest: text("install_plan_digest"),
        descriptor_digest: text("descriptor_digest"),
        execution_binding_digest: text("execution_binding_digest"),
        selection_digest: text("selection_digest"),
        material_identity_digest: text("material_identity_digest"),
        requested_action_content_digest: text("requested_action_content_digest"),
        policy_snapshot_digest: text("policy_snapshot_digest"),
        release_root_digest: text("release_root_digest"),
        plan_id: text("plan_id"),
        requested_action_id: text("requested_action_id"),
        requested_action_kind: text("requested_action_kind"),
        requested_action_precondition_revision: revision,
        permission_expansion: permission.unwrap_or(false),
        credential_requirement: credential.unwrap_or(false),
        expires_at: text("expires_at"),
    };
    let challenge = InstallConsentChallenge::build(fields, bool_fault)?;
    if m.get("challenge_digest").and_then(Json::as_str) != Some(challenge.challenge_digest()) {
        return Err(invalid(
            "install consent challenge digest does not match its fields",
        ));
    }
    Ok(challenge)
}

/// Decodes a stored challenge payload (spec/projections.md §8.2, §8.1 row
/// validation step 1); `Err` is the reference's Corruption sentence.
pub(crate) fn decode_stored(payload: &[u8]) -> Result<InstallConsentChallenge, &'static str> {
    if payload.is_empty() || payload.len() > CHALLENGE_JSON_MAX_BYTES {
        return Err("persisted challenge byte length is invalid");
    }
    const INVALID: &str = "persisted install consent challenge is invalid";
    let text = std::str::from_utf8(payload).map_err(|_| INVALID)?;
    let value = Json::parse(text).map_err(|_| INVALID)?;
    let challenge = decode_map(&value).map_err(|_| INVALID)?;
    if challenge.to_json_text().as_bytes() != payload {
        return Err("persisted install consent challenge is not canonical");
    }
    Ok(challenge)
}

// ------------------------------------------------------------------------------------------------
// Derivation (spec/projections.md §8.3)
// ------------------------------------------------------------------------------------------------

/// What a challenge is derived from. `consent_id`, `plan_id`, `catalog_snapshot_digest` and
/// `policy_snapshot_digest` stand for the interactive directive's identity fields (the directive
/// object itself, its prompt flag and reason code are the caller's: the managed service routes
/// the consent request before it derives).
#[derive(Debug, Clone, Copy)]
pub struct ChallengeInputs<'a> {
    pub consent_id: &'a str,
    pub plan_id: &'a str,
    pub catalog_snapshot_digest: &'a str,
    pub policy_snapshot_digest: &'a str,
    /// The schema-v3 plan row ([`ctx_model::PLAN_ROW_V3_KEYS`]) with install authority.
    pub selection_row: &'a Json,
    /// The engine's pending `InstallCapability` action.
    pub install_action: &'a HostAction,
    pub execution_binding: &'a InstallExecutionBinding,
    pub workspace_identity_digest: &'a str,
    pub release_root_digest: &'a str,
    /// The broker audience (the service passes its store's).
    pub audience: &'a str,
}

/// `H(CJA({"schema": "ctx.install-consent-selection-binding-v1", "selection": row}))`: the
/// selection binding digest of a schema-v3 plan row (its own 13-key mapping).
pub fn install_consent_selection_digest(selection_row: &Json) -> String {
    cja_digest(&Json::object([
        ("schema", Json::str(SELECTION_BINDING_SCHEMA)),
        ("selection", selection_row.clone()),
    ]))
}

/// Derives the challenge of a pending install (spec/projections.md §8.3): the checks that need no
/// directive object, in the reference's order, then the field mapping. Mismatches are `Binding`
/// errors with the reference's sentences; malformed values are `Invalid`.
pub fn derive_install_consent_challenge(
    inputs: &ChallengeInputs<'_>,
) -> Result<InstallConsentChallenge, ConsentStoreError> {
    // 1. Types and digests.
    if validate_plan_row(inputs.selection_row).is_err() {
        return Err(invalid("selection must be a CapabilityPlanSelection"));
    }
    if inputs.execution_binding.validate().is_err() {
        return Err(invalid(
            "execution_binding must be an InstallExecutionBinding",
        ));
    }
    for (name, value) in [
        (
            "workspace_identity_digest",
            inputs.workspace_identity_digest,
        ),
        ("release_root_digest", inputs.release_root_digest),
    ] {
        if !is_sha(value) {
            return Err(digest_message(name));
        }
    }
    let row = inputs.selection_row;
    let action = inputs.install_action;
    let binding = inputs.execution_binding;
    // 3. Install planning authority: descriptor and result material.
    let authority = row.get("authority").unwrap_or(&Json::Null);
    if authority.get_str("type") != Some("install") {
        return Err(binding_error(
            "interactive install consent requires exact install planning authority",
        ));
    }
    let descriptor = authority.get("descriptor").unwrap_or(&Json::Null);
    let material = authority.get("result_material").unwrap_or(&Json::Null);
    let row_text = |k: &str| row.get_str(k).unwrap_or_default();
    // The presentation: capability_id, kind and source digest (the row's catalog entry digest).
    let (capability_id, kind, source_digest) = (
        row_text("capability_id"),
        row_text("kind"),
        row_text("catalog_entry_digest"),
    );
    // 6. The pending install action is the directive's: kind, entity, source, catalog snapshot,
    //    plan and consent (its action id, content digest and revision are taken from it), and it
    //    must expire.
    let action_matches = action.kind == ActionKind::InstallCapability
        && action.entity_id.as_deref() == Some(capability_id)
        && action.source_digest.as_deref() == Some(source_digest)
        && action.catalog_snapshot_id.as_deref() == Some(inputs.catalog_snapshot_digest)
        && action.plan_id.as_deref() == Some(inputs.plan_id)
        && action.consent_id.as_deref() == Some(inputs.consent_id);
    let Some(expires_at) = action.expires_at.as_deref().filter(|_| action_matches) else {
        return Err(binding_error(
            "directive does not match the exact pending install action",
        ));
    };
    // 7. An installation host effect.
    if action.required_host_feature.as_deref() != Some(INSTALLATION_HOST_FEATURE) {
        return Err(binding_error(
            "pending action is not an exact installation host effect",
        ));
    }
    // 8. The execution driver is the descriptor's installer and the action's installer digest.
    let installer_digest = action.payload.get_str("installer_digest");
    if descriptor.get_str("installer_id") != Some(binding.driver_id.as_str())
        || installer_digest != Some(binding.driver_digest.as_str())
    {
        return Err(binding_error(
            "execution driver does not match the exact install descriptor and action",
        ));
    }
    // 9. The action payload is exactly the install authority.
    let payload = Json::object([
        ("capability_kind", Json::str(kind)),
        (
            "catalog_identity",
            row.get("catalog_identity").cloned().unwrap_or(Json::Null),
        ),
        ("install_plan_descriptor", descriptor.clone()),
        ("installer_digest", Json::str(&binding.driver_digest)),
        (
            "policy_snapshot_digest",
            Json::str(inputs.policy_snapshot_digest),
        ),
        ("result_material", material.clone()),
        ("schema", Json::str(INSTALL_ACTION_PAYLOAD_SCHEMA_V3)),
    ]);
    if action.payload != payload {
        return Err(binding_error(
            "pending action payload does not match the exact install authority",
        ));
    }
    // 10. The challenge.
    let descriptor_text = |k: &str| descriptor.get_str(k).unwrap_or_default().to_owned();
    let descriptor_flag = |k: &str| descriptor.get(k).and_then(Json::as_bool).unwrap_or(true);
    InstallConsentChallenge::new(ChallengeFields {
        challenge_id: inputs.consent_id.to_owned(),
        audience: inputs.audience.to_owned(),
        workspace_identity_digest: inputs.workspace_identity_digest.to_owned(),
        scope: action.scope.clone(),
        capability_id: capability_id.to_owned(),
        kind: kind.to_owned(),
        source_digest: source_digest.to_owned(),
        catalog_snapshot_digest: inputs.catalog_snapshot_digest.to_owned(),
        install_plan_digest: descriptor_text("plan_digest"),
        descriptor_digest: descriptor_text("descriptor_digest"),
        execution_binding_digest: binding.binding_digest(),
        selection_digest: install_consent_selection_digest(row),
        material_identity_digest: material
            .get_str("identity_digest")
            .unwrap_or_default()
            .to_owned(),
        requested_action_content_digest: action.content_digest(),
        policy_snapshot_digest: inputs.policy_snapshot_digest.to_owned(),
        release_root_digest: inputs.release_root_digest.to_owned(),
        plan_id: inputs.plan_id.to_owned(),
        requested_action_id: action.action_id.clone(),
        requested_action_kind: action.kind.as_str().to_owned(),
        requested_action_precondition_revision: action.precondition_revision,
        permission_expansion: descriptor_flag("permission_expansion"),
        credential_requirement: descriptor_flag("credential_requirement"),
        expires_at: expires_at.to_owned(),
    })
}
