//! Consent challenge publication (spec/service.md §7): the one pending consent at the
//! head, routed through the current install policy, published as a durable broker challenge
//! when a human must decide, with the head re-checked around every durable step.

use ctx_model::{HostAction, Json};
use ctx_projections::consent_store::{
    ChallengeInputs, ChallengeState, ConsentStore, derive_install_consent_challenge,
};
use ctx_projections::engine::{Engine, Snapshot};

use super::authority::consent_requests;
use super::error::ServiceError;
use super::failpoints;
use super::reconcile::{authoritative_head, require_consent_head_unchanged};
use super::result::ConsentChallengeProjection;
use super::service::QueryService;
use crate::policy::{InstallConsentPolicy, route_install_consent_request};

/// What publication works with.
pub(crate) struct ConsentContext<'a> {
    pub service: &'a QueryService,
    pub engine: &'a Engine,
    pub consent_store: Option<&'a ConsentStore>,
}

/// spec/service.md §7: the `RequestConsent` action of the head transition that asks for
/// `install_action`. A pending consent is publishable (or decidable) only while the head is the
/// event that issued it.
pub(crate) fn consent_request_at_head(
    engine: &Engine,
    snapshot: &Snapshot,
    consent_id: &str,
    install_action: &HostAction,
) -> Result<HostAction, ServiceError> {
    if install_action.consent_id.as_deref() != Some(consent_id) {
        return Err(ServiceError::Identity(
            "pending consent install identity is inconsistent",
        ));
    }
    let head = authoritative_head(engine, snapshot, &install_action.scope).map_err(|_| {
        ServiceError::Identity("managed consent request is not the authoritative head transition")
    })?;
    // The install action names `consent_id` (checked above), so matching it matches the consent.
    match consent_requests(&head.transition.actions, install_action).as_slice() {
        [request] => Ok((*request).clone()),
        _ => Err(ServiceError::Identity(
            "managed consent request is missing from the authoritative head transition",
        )),
    }
}

/// spec/service.md §7: the projection of the current pending consent's challenge, or `None` when
/// nothing awaits a human (no pending consent, an automatic route, or a non-pending broker
/// record).
pub(crate) fn publish_current_consent(
    ctx: &ConsentContext<'_>,
    snapshot: &Snapshot,
    expected_plan_id: &str,
) -> Result<Option<ConsentChallengeProjection>, ServiceError> {
    let (Some(state), Some(_)) = (snapshot.state(), snapshot.head_record_digest()) else {
        return Err(ServiceError::Identity(
            "managed consent requires an exact current snapshot",
        ));
    };
    if state.committed_plan.as_ref().map(|p| p.plan_id.as_str()) != Some(expected_plan_id) {
        return Err(ServiceError::HeadDrift(
            "managed plan changed before consent publication",
        ));
    }
    let consent = match state.pending_consents.as_slice() {
        [] => return Ok(None),
        [consent] => consent,
        _ => {
            return Err(ServiceError::Identity(
                "managed consent must remain globally serialized",
            ));
        }
    };
    let install_action = &consent.install_action;
    let request =
        consent_request_at_head(ctx.engine, snapshot, &consent.consent_id, install_action)?;
    let Some(capability) = install_action
        .entity_id
        .as_deref()
        .and_then(|id| state.capability(id))
    else {
        return Err(ServiceError::Identity(
            "managed consent is not bound to an exact schema-v3 capability",
        ));
    };
    let row = &capability.selection;
    if capability.authority_type() != "install" {
        return Err(ServiceError::Identity(
            "managed consent has no install planning authority",
        ));
    }
    let policy = ctx.service.current_policy()?;
    let policy_digest = policy.policy_digest();
    if request.payload.get_str("policy_snapshot_digest") != Some(policy_digest.as_str()) {
        return Err(ServiceError::Identity(
            "managed consent policy snapshot is no longer exact",
        ));
    }
    let persisted = match &ctx.service.policy_store {
        Some(store) if store.has_persisted()? => Some(store),
        _ => None,
    };
    match persisted {
        Some(store) => {
            let held = store.hold(&policy_digest)?;
            let challenge =
                prepare_challenge(ctx, snapshot, &request, install_action, row, held.policy())?;
            held.assert_current()?;
            Ok(challenge)
        }
        None => prepare_challenge(ctx, snapshot, &request, install_action, row, &policy),
    }
}

/// spec/service.md §7.
fn prepare_challenge(
    ctx: &ConsentContext<'_>,
    snapshot: &Snapshot,
    request: &HostAction,
    install_action: &HostAction,
    row: &Json,
    policy: &InstallConsentPolicy,
) -> Result<Option<ConsentChallengeProjection>, ServiceError> {
    let authority = row.get("authority").unwrap_or(&Json::Null);
    if authority.get_str("type") != Some("install") {
        return Err(ServiceError::Identity(
            "managed consent lost its install authority",
        ));
    }
    let descriptor = authority.get("descriptor").unwrap_or(&Json::Null);
    let directive = route_install_consent_request(request, row, descriptor, policy)
        .map_err(|e| ServiceError::Routing(e.to_string()))?;
    if !directive.requires_prompt() {
        return Ok(None);
    }
    let (Some(store), Some(broker)) = (ctx.consent_store, ctx.service.config.consent.as_ref())
    else {
        return Err(ServiceError::Identity(
            "interactive managed consent requires captured publication authorities",
        ));
    };
    let binding = ctx
        .service
        .actuators
        .resolve_binding(install_action, descriptor)?;
    if descriptor.get_str("installer_id") != Some(binding.driver_id.as_str())
        || install_action.payload.get_str("installer_digest")
            != Some(binding.driver_digest.as_str())
    {
        return Err(ServiceError::Identity(
            "managed consent execution binding does not match its install action",
        ));
    }
    crate::failpoint::fail_point!(failpoints::CONSENT_AFTER_BINDING);
    require_consent_head_unchanged(ctx.engine, snapshot, install_action)?;
    let challenge = derive_install_consent_challenge(&ChallengeInputs {
        consent_id: directive.consent_id(),
        plan_id: directive.plan_id(),
        catalog_snapshot_digest: directive.catalog_snapshot_digest(),
        policy_snapshot_digest: directive.policy_snapshot_digest(),
        selection_row: row,
        install_action,
        execution_binding: &binding,
        workspace_identity_digest: &broker.workspace_identity_digest,
        release_root_digest: &broker.release_root_digest,
        audience: store.audience(),
    })?;
    let now = ctx
        .service
        .config
        .clock
        .now()
        .map_err(|_| ServiceError::Identity("trusted consent clock is unavailable"))?;
    store.create_challenge(&challenge, now)?;
    crate::failpoint::fail_point!(failpoints::CONSENT_AFTER_CREATE);
    require_consent_head_unchanged(ctx.engine, snapshot, install_action)?;
    let status = store.get(challenge.challenge_id(), now)?;
    crate::failpoint::fail_point!(failpoints::CONSENT_AFTER_STATUS);
    if *status.challenge() != challenge {
        return Err(ServiceError::Identity(
            "managed consent broker substituted its challenge",
        ));
    }
    require_consent_head_unchanged(ctx.engine, snapshot, install_action)?;
    if status.state() != ChallengeState::Pending {
        return Ok(None);
    }
    Ok(Some(ConsentChallengeProjection::of(&challenge)))
}
