//! Consent routing (spec/policy.md §6, §7, `route_install_consent_request`): bind one engine
//! `RequestConsent` action to its schema-v3 plan row, its install plan descriptor and the
//! still-current policy, and say whether a person must be asked.

use ctx_model::{
    ActionKind, CapabilityKind, HostAction, INSTALL_CONSENT_REQUEST_SCHEMA_V3, Json,
    is_capability_identity, is_safe_token, is_sha, validate_action,
    validate_install_plan_descriptor, validate_plan_row,
};

use super::error::RoutingError;
use super::model::{DecisionBasis, InstallConsentPolicy, route_install_authorization};

/// The host-neutral result of routing one consent request: what to show a person, or the
/// automatic grant the policy already gives. Values are validated at construction, so every
/// accessor returns a well-formed token or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallConsentDirective {
    consent_id: String,
    capability_id: String,
    kind: String,
    source_digest: String,
    catalog_snapshot_digest: String,
    plan_id: String,
    install_plan_digest: String,
    descriptor_digest: String,
    installer_id: String,
    provenance_digest: String,
    permission_expansion: bool,
    credential_requirement: bool,
    decision_basis: DecisionBasis,
    policy_snapshot_digest: String,
    reason_code: &'static str,
    requested_action_id: String,
    requested_action_content_digest: String,
    requested_action_precondition_revision: u64,
    result_material_identity_digest: Option<String>,
}

fn text(value: &Json, key: &str) -> String {
    value.get_str(key).unwrap_or_default().to_owned()
}

impl InstallConsentDirective {
    /// The directive's own field rules (the reference's `__post_init__`), in its order.
    fn validate(&self) -> Result<(), RoutingError> {
        let invalid = |m: String| Err(RoutingError::Invalid(m));
        if !is_capability_identity(&self.kind, &self.capability_id) {
            return invalid("kind and capability_id must form one canonical identity".into());
        }
        if !CapabilityKind::parse(&self.kind).is_some_and(CapabilityKind::is_installable) {
            return invalid("kind is not an installable capability kind".into());
        }
        for (name, value) in [
            ("consent_id", &self.consent_id),
            ("installer_id", &self.installer_id),
            ("plan_id", &self.plan_id),
            ("requested_action_id", &self.requested_action_id),
        ] {
            if !is_safe_token(value) {
                return invalid(format!("{name} must be a canonical token"));
            }
        }
        for (name, value) in [
            ("source_digest", &self.source_digest),
            ("catalog_snapshot_digest", &self.catalog_snapshot_digest),
            ("install_plan_digest", &self.install_plan_digest),
            ("descriptor_digest", &self.descriptor_digest),
            ("provenance_digest", &self.provenance_digest),
            ("policy_snapshot_digest", &self.policy_snapshot_digest),
            (
                "requested_action_content_digest",
                &self.requested_action_content_digest,
            ),
        ] {
            if !is_sha(value) {
                return invalid(format!("{name} must be a lowercase SHA-256 digest"));
            }
        }
        if self.requested_action_precondition_revision < 1 {
            return invalid("requested_action_precondition_revision must be positive".into());
        }
        if let Some(d) = &self.result_material_identity_digest
            && !is_sha(d)
        {
            return invalid(
                "result_material_identity_digest must be a lowercase SHA-256 digest".into(),
            );
        }
        Ok(())
    }

    pub fn consent_id(&self) -> &str {
        &self.consent_id
    }

    pub fn capability_id(&self) -> &str {
        &self.capability_id
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The catalog entry digest of the selection.
    pub fn source_digest(&self) -> &str {
        &self.source_digest
    }

    /// The request's `catalog_snapshot_id`.
    pub fn catalog_snapshot_digest(&self) -> &str {
        &self.catalog_snapshot_digest
    }

    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }

    pub fn install_plan_digest(&self) -> &str {
        &self.install_plan_digest
    }

    pub fn descriptor_digest(&self) -> &str {
        &self.descriptor_digest
    }

    pub fn installer_id(&self) -> &str {
        &self.installer_id
    }

    pub fn provenance_digest(&self) -> &str {
        &self.provenance_digest
    }

    pub fn permission_expansion(&self) -> bool {
        self.permission_expansion
    }

    pub fn credential_requirement(&self) -> bool {
        self.credential_requirement
    }

    pub fn decision_basis(&self) -> DecisionBasis {
        self.decision_basis
    }

    pub fn policy_snapshot_digest(&self) -> &str {
        &self.policy_snapshot_digest
    }

    pub fn reason_code(&self) -> &'static str {
        self.reason_code
    }

    pub fn requested_action_id(&self) -> &str {
        &self.requested_action_id
    }

    /// Always `InstallCapability`.
    pub fn requested_action_kind(&self) -> ActionKind {
        ActionKind::InstallCapability
    }

    pub fn requested_action_content_digest(&self) -> &str {
        &self.requested_action_content_digest
    }

    pub fn requested_action_precondition_revision(&self) -> u64 {
        self.requested_action_precondition_revision
    }

    pub fn result_material_identity_digest(&self) -> Option<&str> {
        self.result_material_identity_digest.as_deref()
    }

    /// A person must decide: the basis is `interactive`.
    pub fn requires_prompt(&self) -> bool {
        self.decision_basis == DecisionBasis::Interactive
    }

    /// The `UserDecision` payload for `decision` (`granted` or `denied`): exactly the eight keys
    /// the reducer expects (`ctx_model::USER_DECISION_KEYS`).
    pub fn decision_payload(&self, decision: &str) -> Result<Json, RoutingError> {
        if !matches!(decision, "granted" | "denied") {
            return Err(RoutingError::Decision);
        }
        Ok(Json::object([
            ("consent_id", Json::str(&self.consent_id)),
            ("decision", Json::str(decision)),
            ("decision_basis", Json::str(self.decision_basis.as_str())),
            (
                "policy_snapshot_digest",
                Json::str(&self.policy_snapshot_digest),
            ),
            ("requested_action_id", Json::str(&self.requested_action_id)),
            (
                "requested_action_kind",
                Json::str(ActionKind::InstallCapability.as_str()),
            ),
            (
                "requested_action_content_digest",
                Json::str(&self.requested_action_content_digest),
            ),
            (
                "requested_action_precondition_revision",
                Json::from(self.requested_action_precondition_revision),
            ),
        ]))
    }

    /// The `granted` payload when the policy decides (no prompt), else `None`.
    pub fn automatic_grant_payload(&self) -> Option<Json> {
        if self.requires_prompt() {
            return None;
        }
        self.decision_payload("granted").ok()
    }
}

/// Routes one engine consent request. The selection must be a valid schema-v3 plan row, the
/// descriptor a valid install plan descriptor and the request a valid host action (else
/// [`RoutingError::Untyped`]); then every binding rule of spec/policy.md §6, §7 must hold (else
/// [`RoutingError::Mismatch`]): install authority; a `RequestConsent` with consent id, catalog
/// snapshot id and plan id; entity id and source digest of the row; `install` actionability; the
/// row's descriptor and plan digests, id and kind equal the descriptor's; the descriptor equals
/// the authority's; and the payload is the v3 consent request naming this kind, catalog identity,
/// result material, descriptor, the current policy digest and an `InstallCapability`.
///
/// Legacy (pre-v3) selections are not accepted: this codebase commits only schema-v3 rows.
pub fn route_install_consent_request(
    request: &HostAction,
    selection_row: &Json,
    descriptor: &Json,
    policy: &InstallConsentPolicy,
) -> Result<InstallConsentDirective, RoutingError> {
    let untyped = |detail: String| RoutingError::Untyped { detail };
    validate_plan_row(selection_row).map_err(|e| untyped(e.message().to_owned()))?;
    validate_install_plan_descriptor(descriptor).map_err(|e| untyped(e.message().to_owned()))?;

    let row = selection_row;
    let authority = row.get("authority").unwrap_or(&Json::Null);
    let payload = &request.payload;
    let null = Json::Null;
    let payload_field = |key: &str| payload.get(key).unwrap_or(&null);
    let row_field = |key: &str| row.get(key).unwrap_or(&null);
    let descriptor_field = |key: &str| descriptor.get(key).unwrap_or(&null);
    let bound = authority.get_str("type") == Some("install")
        && request.kind == ActionKind::RequestConsent
        && request.consent_id.is_some()
        && request.entity_id.as_deref() == row.get_str("capability_id")
        && request.source_digest.as_deref() == row.get_str("catalog_entry_digest")
        && request.catalog_snapshot_id.is_some()
        && request.plan_id.is_some()
        && row.get_str("actionability") == Some("install")
        && row_field("install_descriptor_digest") == descriptor_field("descriptor_digest")
        && row_field("install_plan_digest") == descriptor_field("plan_digest")
        && row_field("capability_id") == descriptor_field("capability_id")
        && row_field("kind") == descriptor_field("kind")
        && authority.get("descriptor") == Some(descriptor)
        && payload.get_str("schema") == Some(INSTALL_CONSENT_REQUEST_SCHEMA_V3)
        && payload_field("capability_kind") == row_field("kind")
        && payload_field("catalog_identity") == row_field("catalog_identity")
        && payload.get("result_material") == authority.get("result_material")
        && payload.get("install_plan_descriptor") == Some(descriptor)
        && payload.get_str("policy_snapshot_digest") == Some(policy.policy_digest().as_str())
        && payload.get_str("requested_action_kind") == Some(ActionKind::InstallCapability.as_str());
    if !bound {
        return Err(RoutingError::Mismatch);
    }
    // The reference's HostAction is validated when it is built; ours is plain data.
    validate_action(request).map_err(|e| untyped(e.message().to_owned()))?;

    let decision = route_install_authorization(policy, descriptor)?;
    let revision = match payload.get("requested_action_precondition_revision") {
        Some(Json::Int(r)) if *r >= 1 => u64::try_from(*r).unwrap_or(0),
        _ => 0,
    };
    let flag = |key: &str| descriptor.get(key).and_then(Json::as_bool) == Some(true);
    let directive = InstallConsentDirective {
        consent_id: request.consent_id.clone().unwrap_or_default(),
        capability_id: text(row, "capability_id"),
        kind: text(row, "kind"),
        source_digest: text(row, "catalog_entry_digest"),
        catalog_snapshot_digest: request.catalog_snapshot_id.clone().unwrap_or_default(),
        plan_id: request.plan_id.clone().unwrap_or_default(),
        install_plan_digest: text(descriptor, "plan_digest"),
        descriptor_digest: text(descriptor, "descriptor_digest"),
        installer_id: text(descriptor, "installer_id"),
        provenance_digest: text(descriptor, "provenance_digest"),
        permission_expansion: flag("permission_expansion"),
        credential_requirement: flag("credential_requirement"),
        decision_basis: decision.decision_basis,
        policy_snapshot_digest: decision.policy_snapshot_digest,
        reason_code: decision.reason_code,
        requested_action_id: text(payload, "requested_action_id"),
        requested_action_content_digest: text(payload, "requested_action_content_digest"),
        requested_action_precondition_revision: revision,
        result_material_identity_digest: authority
            .get("result_material")
            .and_then(|m| m.get_str("identity_digest"))
            .map(str::to_owned),
    };
    directive.validate()?;
    Ok(directive)
}
