//! Construction of the actions the reducer emits (spec/engine.md §1, §7).

use super::{ReduceError, Step, invalid};
use crate::action_contract::{
    consent_request_payload, install_payload, install_rollback, install_verification,
    material_payload, material_rollback, material_verification,
};
use crate::json::{Json, JsonMap};
use crate::protocol::{ActionKind, HostAction, action_id, consent_id};
use crate::state::{CapabilityState, EffectKind, Installation, PendingConsent, PendingEffect};

fn empty() -> Json {
    Json::Obj(JsonMap::new())
}

/// A schema-v3 material action (`ActivateCapability`, `PrepareExposure`, `DeactivateCapability`)
/// for `cap`, expiring one hour after the event.
pub(crate) fn material_action(
    step: &Step<'_>,
    kind: ActionKind,
    cap: &CapabilityState,
    lease_id: String,
    ordinal: usize,
) -> Result<HostAction, ReduceError> {
    let Some(expected_state) = kind.expected_material_state() else {
        return invalid("schema-v3 material action kind is unsupported");
    };
    if cap.installation != Installation::Installed || cap.current_authorized_material.is_null() {
        return invalid("schema-v3 material action requires installed authorized material");
    }
    let id = cap.capability_id();
    let catalog_identity = cap
        .selection
        .get("catalog_identity")
        .cloned()
        .unwrap_or(Json::Null);
    let payload = material_payload(
        cap.kind(),
        &catalog_identity,
        &cap.material_identity,
        &cap.current_authorized_material,
    );
    let source_digest = cap.source_digest().to_owned();
    let rollback = material_rollback(kind, &step.event.scope.exposure_id, &source_digest);
    Ok(HostAction {
        action_id: action_id(&step.event_digest, kind, Some(id), ordinal),
        kind,
        scope: step.event.scope.clone(),
        precondition_revision: step.revision,
        payload,
        privacy: step.event.privacy,
        entity_id: Some(id.to_owned()),
        source_digest: Some(source_digest),
        plan_id: Some(cap.plan_id.clone()),
        catalog_snapshot_id: Some(cap.catalog_snapshot_id.clone()),
        consent_id: None,
        lease_id: Some(lease_id),
        required_host_feature: Some("activation".to_owned()),
        expires_at: Some(step.expires_at.clone()),
        verification: material_verification(expected_state),
        rollback,
    })
}

/// Emits a material action and records its pending effect.
pub(crate) fn emit_material(
    step: &mut Step<'_>,
    kind: ActionKind,
    effect: EffectKind,
    capability_id: &str,
    lease_id: String,
    ordinal: usize,
    rollback_capability_id: Option<String>,
) -> Result<(), ReduceError> {
    let Some(cap) = step.state.capability(capability_id) else {
        return invalid("schema-v3 physical action lacks capability identity");
    };
    let action = material_action(step, kind, cap, lease_id, ordinal)?;
    step.actions.push(action.clone());
    step.state.pending_effects.push(PendingEffect {
        action,
        effect,
        rollback_capability_id,
    });
    Ok(())
}

/// Builds the consent for installing `cap` (spec/engine.md §1, §7): the install action is
/// precomputed and kept in state; only the `RequestConsent` action is emitted.
pub(crate) fn request_consent(step: &mut Step<'_>, capability_id: &str) -> Result<(), ReduceError> {
    let Some(policy) = step.state.install_policy_snapshot_digest.clone() else {
        return invalid("install consent requires a committed policy snapshot");
    };
    let Some(cap) = step.state.capability(capability_id) else {
        return invalid("schema-v3 physical action lacks capability identity");
    };
    let authority = cap.authority();
    let (Some(descriptor), Some(result_material)) = (
        authority.get("descriptor"),
        authority.get("result_material"),
    ) else {
        return invalid("install consent requires committed install authority");
    };
    let installer_id = descriptor
        .get_str("installer_id")
        .unwrap_or_default()
        .to_owned();
    let catalog_identity = cap
        .selection
        .get("catalog_identity")
        .cloned()
        .unwrap_or(Json::Null);
    let consent = consent_id(&step.event_digest, capability_id);
    let payload = install_payload(
        cap.kind(),
        &catalog_identity,
        result_material,
        descriptor,
        &policy,
    );
    let Some(install_revision) = step.revision.checked_add(1) else {
        return invalid("engine revision overflowed");
    };
    let install = HostAction {
        action_id: action_id(
            &step.event_digest,
            ActionKind::InstallCapability,
            Some(capability_id),
            0,
        ),
        kind: ActionKind::InstallCapability,
        scope: step.event.scope.clone(),
        precondition_revision: install_revision,
        payload: payload.clone(),
        privacy: step.event.privacy,
        entity_id: Some(capability_id.to_owned()),
        source_digest: Some(cap.source_digest().to_owned()),
        plan_id: Some(cap.plan_id.clone()),
        catalog_snapshot_id: Some(cap.catalog_snapshot_id.clone()),
        consent_id: Some(consent.clone()),
        lease_id: None,
        required_host_feature: Some("installation".to_owned()),
        expires_at: Some(step.expires_at.clone()),
        verification: install_verification(),
        rollback: install_rollback(&installer_id),
    };
    let request_payload = consent_request_payload(
        &payload,
        &install.action_id,
        &install.content_digest(),
        install_revision,
    );
    let request = HostAction {
        action_id: action_id(
            &step.event_digest,
            ActionKind::RequestConsent,
            Some(capability_id),
            0,
        ),
        kind: ActionKind::RequestConsent,
        precondition_revision: step.revision,
        payload: request_payload,
        expires_at: None,
        required_host_feature: Some("installation-consent".to_owned()),
        verification: empty(),
        rollback: empty(),
        ..install.clone()
    };
    step.actions.push(request);
    step.state.pending_consents.push(PendingConsent {
        consent_id: consent,
        install_action: install,
    });
    Ok(())
}

/// The `PresentBundle` of a ready plan.
pub(crate) fn present_bundle(
    step: &Step<'_>,
    plan_digest: &str,
    plan_id: &str,
    catalog_snapshot_id: &str,
    rows: Vec<Json>,
    ordinal: usize,
) -> HostAction {
    HostAction {
        action_id: action_id(&step.event_digest, ActionKind::PresentBundle, None, ordinal),
        kind: ActionKind::PresentBundle,
        scope: step.event.scope.clone(),
        precondition_revision: step.revision,
        payload: Json::object([
            ("plan_digest", Json::str(plan_digest)),
            ("capabilities", Json::Arr(rows)),
        ]),
        privacy: step.event.privacy,
        entity_id: None,
        source_digest: None,
        plan_id: Some(plan_id.to_owned()),
        catalog_snapshot_id: Some(catalog_snapshot_id.to_owned()),
        consent_id: None,
        lease_id: None,
        required_host_feature: None,
        expires_at: None,
        verification: empty(),
        rollback: empty(),
    }
}
