//! Event handling of the contract-3 family (spec/engine.md §3, §6, §7).

use std::collections::BTreeSet;

use super::actions::emit_material;
use super::planning::commit_plan;
use super::reconcile::reconcile;
use super::{ReduceError, Step, invalid, invalid_event};
use crate::action_contract::{expected_install_receipt, expected_material_receipt};
use crate::documents::{authorized_material_from_lineage, build_installed_lineage};
use crate::json::Json;
use crate::protocol::{
    ActionKind, CONSENT_EXPIRED_KEYS, EventKind, ReceiptIdentity, USER_DECISION_KEYS,
    has_exact_keys,
};
use crate::replay::Surrogate;
use crate::shape::{UtcMicros, is_sha, is_token};
use crate::state::{
    Activation, EffectKind, EngineState, Evidence, Exposure, Installation, Invocation, Lease,
    PendingEffect, SessionStatus,
};

/// Dispatches the event to its handler; `prev` is the state before the event.
pub(crate) fn handle(
    step: &mut Step<'_>,
    prev: &EngineState,
    decision: Option<&Surrogate>,
) -> Result<(), ReduceError> {
    let had_consent = !prev.pending_consents.is_empty();
    let kind = step.event.kind;
    match kind {
        EventKind::UserDecision => return user_decision(step),
        EventKind::InstallConsentExpired => return consent_expired(step),
        EventKind::IntentObserved | EventKind::DevelopmentObserved => {
            // Planning events do not retire consents: a ready or abstained plan refuses them.
            let Some(decision) = decision else {
                return invalid("planning event is missing its durable decision");
            };
            return commit_plan(step, prev, decision);
        }
        _ => {}
    }
    // Every other event consumes the revision a pending consent was bound to.
    step.state.pending_consents.clear();
    match kind {
        EventKind::ReassessmentRequested => {
            if step.state.session_status == SessionStatus::Active {
                desired_set(step)?;
                reconcile(step)
            } else {
                terminal_cleanup_retry(step)
            }
        }
        EventKind::ActionApplied | EventKind::ActionFailed | EventKind::ActionExpired => {
            receipt(step)
        }
        EventKind::ProviderSubmissionObserved => {
            provider_submission(step)?;
            refresh_stale_consent(step, had_consent)
        }
        EventKind::ToolCallObserved => {
            tool_call(step)?;
            refresh_stale_consent(step, had_consent)
        }
        EventKind::TurnStarting => {
            turn_starting(step)?;
            refresh_stale_consent(step, had_consent)
        }
        EventKind::SessionEnded => {
            session_ended(step);
            reconcile(step)
        }
        _ => refresh_stale_consent(step, had_consent),
    }
}

/// Re-offers consent on an otherwise actionless revision that retired one (spec/engine.md §3).
fn refresh_stale_consent(step: &mut Step<'_>, had_consent: bool) -> Result<(), ReduceError> {
    if had_consent
        && step.state.session_status == SessionStatus::Active
        && step.state.pending_consents.is_empty()
    {
        reconcile(step)?;
    }
    Ok(())
}

fn payload_str<'a>(step: &'a Step<'_>, key: &str) -> &'a str {
    step.event.payload.get_str(key).unwrap_or_default()
}

fn user_decision(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let payload = step.event.payload.as_obj().cloned().unwrap_or_default();
    if !has_exact_keys(&payload, &USER_DECISION_KEYS) {
        return invalid_event(
            "v3 UserDecision requires exact decision provenance and action identity",
        );
    }
    let consent_id = payload_str(step, "consent_id").to_owned();
    let Some(index) = step
        .state
        .pending_consents
        .iter()
        .position(|c| c.consent_id == consent_id)
    else {
        return invalid_event("UserDecision references unknown or completed consent");
    };
    let install = step.state.pending_consents[index].install_action.clone();
    if step.event.scope != install.scope {
        return invalid_event("UserDecision scope does not match pending consent");
    }
    if !requested_matches(step, &install) {
        return invalid_event("UserDecision does not match the exact requested install");
    }
    if payload.get("policy_snapshot_digest") != install.payload.get("policy_snapshot_digest") {
        return invalid_event("UserDecision policy snapshot does not match pending install");
    }
    if install.precondition_revision != step.revision {
        return invalid_event("UserDecision was not the immediate next committed revision");
    }
    step.state.pending_consents.remove(index);
    let expired = match (
        UtcMicros::parse(&step.event.occurred_at),
        install.expires_at.as_deref().map(UtcMicros::parse),
    ) {
        (Ok(at), Some(Ok(expires))) => at >= expires,
        _ => return invalid("pending install has no valid expiry"),
    };
    let capability_id = install.entity_id.clone().unwrap_or_default();
    let granted = payload_str(step, "decision") == "granted";
    if !granted || expired {
        if let Some(d) = install
            .payload
            .get("install_plan_descriptor")
            .and_then(|d| d.get_str("descriptor_digest"))
        {
            insert_sorted(&mut step.state.blocked_install_descriptor_digests, d);
        }
        let code = if expired {
            "install_consent_expired"
        } else {
            "install_consent_denied"
        };
        step.diagnostic(vec![
            ("code", Json::str(code)),
            ("capability_id", Json::str(capability_id)),
        ]);
        return reconcile(step);
    }
    step.actions.push(install.clone());
    step.state.pending_effects.push(PendingEffect {
        action: install,
        effect: EffectKind::Install,
        rollback_capability_id: None,
    });
    Ok(())
}

fn requested_matches(step: &Step<'_>, install: &crate::protocol::HostAction) -> bool {
    let p = &step.event.payload;
    p.get_str("requested_action_id") == Some(install.action_id.as_str())
        && p.get_str("requested_action_kind") == Some(install.kind.as_str())
        && p.get_str("requested_action_content_digest") == Some(install.content_digest().as_str())
        && p.get("requested_action_precondition_revision")
            .and_then(Json::as_i64)
            == i64::try_from(install.precondition_revision).ok()
}

fn consent_expired(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let consent_id = payload_str(step, "consent_id").to_owned();
    let Some(index) = step
        .state
        .pending_consents
        .iter()
        .position(|c| c.consent_id == consent_id)
    else {
        return invalid_event("InstallConsentExpired references unknown or completed consent");
    };
    let install = step.state.pending_consents[index].install_action.clone();
    let p = &step.event.payload;
    let exact = p
        .as_obj()
        .is_some_and(|m| has_exact_keys(m, &CONSENT_EXPIRED_KEYS))
        && step.event.scope == install.scope
        && p.get("policy_snapshot_digest") == install.payload.get("policy_snapshot_digest")
        && requested_matches(step, &install)
        && p.get_str("install_expires_at") == install.expires_at.as_deref();
    if !exact {
        return invalid_event("InstallConsentExpired does not match the exact pending consent");
    }
    if install.precondition_revision != step.revision {
        return invalid_event(
            "InstallConsentExpired does not match the exact pending consent revision",
        );
    }
    step.state.pending_consents.remove(index);
    let capability_id = install.entity_id.clone().unwrap_or_default();
    step.diagnostic(vec![
        ("code", Json::str("install_consent_expired")),
        ("capability_id", Json::str(capability_id)),
        ("consent_id", Json::str(consent_id)),
    ]);
    Ok(())
}

const DESIRED_ROW_KEYS: [&str; 7] = [
    "actionability",
    "capability_id",
    "install_descriptor_digest",
    "install_plan_digest",
    "kind",
    "lease_id",
    "source_digest",
];

/// A desired set (spec/engine.md §6): replaces this owner's leases with the listed ones.
fn desired_set(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let Some(plan) = step.state.committed_plan.clone() else {
        return invalid_event("v3 reassessment requires a committed capability plan");
    };
    if !plan.is_ready() {
        return invalid_event("v3 reassessment requires a ready committed capability plan");
    }
    if step.event.correlation_id.as_deref() != Some(plan.plan_id.as_str()) {
        return invalid_event("reassessment plan_id does not match the committed plan");
    }
    if step.event.catalog_snapshot_digest.as_deref() != Some(plan.catalog_snapshot_id.as_str()) {
        return invalid_event("reassessment catalog snapshot does not match the committed plan");
    }
    let payload = step.event.payload.as_obj().cloned().unwrap_or_default();
    if !has_exact_keys(
        &payload,
        &["owner_id", "desired_capabilities", "policy_snapshot_digest"],
    ) {
        return invalid_event("v3 reassessment requires exact desired and policy fields");
    }
    let policy = payload_str(step, "policy_snapshot_digest").to_owned();
    let owner = payload_str(step, "owner_id").to_owned();
    if !is_sha(&policy) || !is_token(&owner) {
        return invalid_event("v3 reassessment requires exact desired and policy fields");
    }
    let Some(rows) = payload.get("desired_capabilities").and_then(Json::as_arr) else {
        return invalid_event("v3 reassessment requires exact desired and policy fields");
    };

    // Policy: an install in flight keeps the policy it was authorized under.
    let install_pending = step
        .state
        .pending_effects
        .iter()
        .any(|p| p.effect == EffectKind::Install);
    if !install_pending
        && step.state.install_policy_snapshot_digest.as_deref() != Some(policy.as_str())
    {
        step.state.install_policy_snapshot_digest = Some(policy);
        step.state.pending_consents.clear();
    }

    // Rows: each names a committed plan row exactly.
    let mut desired: Vec<(String, String)> = Vec::new();
    let mut lease_ids = BTreeSet::new();
    for row in rows {
        let (Some(lease_id), Some(capability_id)) =
            (row.get_str("lease_id"), row.get_str("capability_id"))
        else {
            return invalid_event("desired capability requires lease_id and capability_id");
        };
        if !lease_ids.insert(lease_id.to_owned()) {
            return invalid_event(format!("duplicate lease_id '{lease_id}'"));
        }
        let Some(plan_row) = plan.row(capability_id) else {
            return invalid_event(format!(
                "capability '{capability_id}' was not in the committed plan"
            ));
        };
        let exact = row
            .as_obj()
            .is_some_and(|m| has_exact_keys(m, &DESIRED_ROW_KEYS))
            && [
                "actionability",
                "capability_id",
                "install_descriptor_digest",
                "install_plan_digest",
                "kind",
            ]
            .iter()
            .all(|k| row.get(k) == plan_row.get(k))
            && row.get("source_digest") == plan_row.get("catalog_entry_digest");
        if !exact {
            return invalid_event(format!(
                "desired capability '{capability_id}' does not match committed identity"
            ));
        }
        desired.push((capability_id.to_owned(), lease_id.to_owned()));
    }

    // Lease continuity: an owner cannot release an active capability by omitting it.
    for cap in &step.state.capabilities {
        let id = cap.capability_id();
        if cap.is_active()
            && !desired.iter().any(|(d, _)| d == id)
            && plan.row(id) == Some(&cap.selection)
        {
            for lease in cap.leases.iter().filter(|l| l.owner_id == owner) {
                if lease_ids.insert(lease.lease_id.clone()) {
                    desired.push((id.to_owned(), lease.lease_id.clone()));
                }
            }
        }
    }

    // Ownership: a lease id held by another owner stays theirs.
    for (_, lease_id) in &desired {
        for cap in &step.state.capabilities {
            if cap
                .leases
                .iter()
                .any(|l| &l.lease_id == lease_id && l.owner_id != owner)
            {
                return invalid_event(format!(
                    "lease_id '{lease_id}' already belongs to '{}'",
                    cap.capability_id()
                ));
            }
        }
    }
    for cap in &mut step.state.capabilities {
        cap.leases.retain(|l| l.owner_id != owner);
    }
    let exposure_id = step.event.scope.exposure_id.clone();
    for (capability_id, lease_id) in &desired {
        let Some(plan_row) = plan.row(capability_id) else {
            continue;
        };
        if plan_row.get_str("actionability") == Some("manual") {
            continue;
        }
        let Some(cap) = step
            .state
            .capability_mut(capability_id)
            .filter(|c| &c.selection == plan_row)
        else {
            return invalid_event(
                "desired executable capability lacks exact committed runtime authority",
            );
        };
        cap.leases.push(Lease {
            exposure_id: exposure_id.clone(),
            lease_id: lease_id.clone(),
            owner_id: owner.clone(),
        });
        cap.leases.sort_by(|a, b| a.lease_id.cmp(&b.lease_id));
    }

    let state = &mut step.state;
    let still_desired: Vec<String> = state
        .desired_capability_ids()
        .into_iter()
        .map(str::to_owned)
        .collect();
    state
        .blocked_capability_ids
        .retain(|id| still_desired.contains(id));
    state.blocked_deactivation_ids.clear();
    let desired_descriptors: Vec<String> = state
        .capabilities
        .iter()
        .filter(|c| c.is_desired() && c.authority_type() == "install")
        .filter_map(|c| c.install_descriptor_digest().map(str::to_owned))
        .collect();
    state
        .blocked_install_descriptor_digests
        .retain(|d| desired_descriptors.contains(d));
    Ok(())
}

/// `ReassessmentRequested` after the session ended: retry failed deactivations (spec/engine.md §3).
fn terminal_cleanup_retry(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let payload = step.event.payload.as_obj().cloned().unwrap_or_default();
    if !has_exact_keys(&payload, &["retry_failed_deactivations"]) {
        return invalid_event(
            "ended-session ReassessmentRequested must contain only retry_failed_deactivations",
        );
    }
    let ids: Vec<String> = payload
        .get("retry_failed_deactivations")
        .and_then(Json::as_arr)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let unique: BTreeSet<&String> = ids.iter().collect();
    let listed = payload
        .get("retry_failed_deactivations")
        .and_then(Json::as_arr)
        .map_or(0, <[Json]>::len);
    if ids.is_empty() || ids.len() > 5 || unique.len() != ids.len() || listed != ids.len() {
        return invalid_event("retry_failed_deactivations must contain one to five unique IDs");
    }
    for id in &ids {
        let blocked = step.state.blocked_deactivation_ids.contains(id);
        let active = step.state.capability(id).is_some_and(|c| c.is_active());
        if !(blocked && active) {
            return invalid_event("terminal cleanup retry must target blocked active capabilities");
        }
    }
    step.state
        .blocked_deactivation_ids
        .retain(|b| !ids.contains(b));
    step.state
        .terminal_cleanup_notified_ids
        .retain(|b| !ids.contains(b));
    reconcile(step)?;
    step.diagnostic(vec![
        ("code", Json::str("terminal_cleanup_retry_requested")),
        (
            "capability_ids",
            Json::Arr(ids.into_iter().map(Json::Str).collect()),
        ),
    ]);
    Ok(())
}

/// Receipts (spec/engine.md §7): match the pending action exactly, then apply, fail or retire it.
fn receipt(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let identity = ReceiptIdentity::from_payload(&step.event.payload)?;
    let Some(index) = step
        .state
        .pending_effects
        .iter()
        .position(|p| p.action.action_id == identity.action_id)
    else {
        return invalid_event(format!(
            "receipt references unknown or completed action '{}'",
            identity.action_id
        ));
    };
    let pending = step.state.pending_effects[index].clone();
    let action = &pending.action;
    if step.event.scope != action.scope {
        return invalid_event("receipt scope does not match pending action scope");
    }
    if identity.action_kind != action.kind {
        return invalid_event("receipt action_kind does not match pending action");
    }
    if identity.action_content_digest != action.content_digest() {
        return invalid_event("receipt action_content_digest does not match pending action");
    }
    if identity.action_precondition_revision != action.precondition_revision {
        return invalid_event("receipt action_precondition_revision does not match pending action");
    }
    let kind = step.event.kind;
    if kind == EventKind::ActionApplied {
        let verification = step
            .event
            .payload
            .get("verification")
            .cloned()
            .unwrap_or(Json::Null);
        let expected_state = action.verification.get_str("expected_state");
        if verification.get_str("host_state") != expected_state {
            return invalid_event("receipt verification contradicts the requested physical state");
        }
        let expected = match action.kind {
            ActionKind::InstallCapability => expected_install_receipt(action),
            ActionKind::ActivateCapability
            | ActionKind::PrepareExposure
            | ActionKind::DeactivateCapability => expected_material_receipt(action),
            _ => return invalid_event("schema-v3 receipt action kind is unsupported"),
        };
        if verification != expected {
            return invalid_event(
                "schema-v3 receipt does not byte-match the exact pending action authority",
            );
        }
    }
    step.state.pending_effects.remove(index);
    let session_active = step.state.session_status == SessionStatus::Active;
    match kind {
        EventKind::ActionApplied => apply_receipt(step, &pending)?,
        EventKind::ActionExpired
            if pending.effect == EffectKind::Install
                || (pending.effect == EffectKind::Activate
                    && action.payload.get("schema").is_some()) =>
        {
            // An unclaimed effect that timed out is retired without blame: nothing happened.
            if let Some(partner) = &pending.rollback_capability_id
                && session_active
            {
                insert_sorted(&mut step.state.rollback_requested_capability_ids, partner);
            }
            return Ok(());
        }
        _ => fail_receipt(step, &pending, session_active),
    }
    reconcile(step)
}

fn apply_receipt(step: &mut Step<'_>, pending: &PendingEffect) -> Result<(), ReduceError> {
    let action = &pending.action;
    let Some(id) = action.entity_id.clone() else {
        return invalid("schema-v3 physical action lacks capability identity");
    };
    let receipt_digest = step.event.content_digest();
    let action_digest = action.content_digest();
    match pending.effect {
        EffectKind::Install => {
            let Some(cap) = step.state.capability_mut(&id) else {
                return invalid("schema-v3 receipt references missing runtime capability");
            };
            if cap.authority_type() != "install" {
                return invalid("schema-v3 install receipt lacks committed install authority");
            }
            let descriptor_digest = cap
                .authority()
                .get("descriptor")
                .and_then(|d| d.get_str("descriptor_digest"))
                .unwrap_or_default()
                .to_owned();
            let catalog_identity_digest = cap
                .selection
                .get("catalog_identity")
                .and_then(|c| c.get_str("identity_digest"))
                .unwrap_or_default()
                .to_owned();
            let material_digest = cap
                .material_identity
                .get_str("identity_digest")
                .unwrap_or_default()
                .to_owned();
            let kind = cap.kind().to_owned();
            let lineage = build_installed_lineage(
                &id,
                &kind,
                &catalog_identity_digest,
                &material_digest,
                &descriptor_digest,
                &action_digest,
                &receipt_digest,
            );
            cap.current_authorized_material = authorized_material_from_lineage(&lineage)?;
            cap.installation = Installation::Installed;
        }
        EffectKind::Activate | EffectKind::RollbackActivate => {
            let Some(cap) = step.state.capability_mut(&id) else {
                return invalid("schema-v3 receipt references missing runtime capability");
            };
            cap.activation = Activation::Active;
            cap.activation_lease_id = action.lease_id.clone();
            if let Some(partner) = &pending.rollback_capability_id {
                release_partner(&mut step.state, partner);
            }
            if pending.effect == EffectKind::RollbackActivate {
                step.state
                    .rollback_requested_capability_ids
                    .retain(|r| r != &id);
            }
        }
        EffectKind::Deactivate => {
            let Some(cap) = step.state.capability_mut(&id) else {
                return invalid("schema-v3 receipt references missing runtime capability");
            };
            cap.activation = Activation::Inactive;
            cap.activation_lease_id = None;
            if step.state.is_prunable(&id) {
                step.state.prune(&id);
            }
        }
        EffectKind::Prepare => {
            let exposure_id = action.scope.exposure_id.clone();
            let source = step
                .state
                .capability(&id)
                .map(|c| c.source_digest().to_owned())
                .unwrap_or_default();
            set_evidence(&mut step.state, &exposure_id, &id, &source, |e| {
                if e.exposure == Exposure::Unexposed {
                    e.exposure = Exposure::Prepared;
                }
            });
        }
        EffectKind::PromptContext => return invalid("schema-v3 pending effect is unsupported"),
    }
    Ok(())
}

fn release_partner(state: &mut EngineState, partner: &str) {
    if let Some(p) = state.capability_mut(partner) {
        p.rollback_held = false;
        p.rollback_owner_id = None;
    }
    if state.is_prunable(partner) {
        state.prune(partner);
    }
}

fn fail_receipt(step: &mut Step<'_>, pending: &PendingEffect, session_active: bool) {
    let id = pending.entity().unwrap_or_default().to_owned();
    let state = &mut step.state;
    match pending.effect {
        EffectKind::Install => {
            if let Some(d) = pending
                .action
                .payload
                .get("install_plan_descriptor")
                .and_then(|d| d.get_str("descriptor_digest"))
            {
                insert_sorted(&mut state.blocked_install_descriptor_digests, d);
            }
        }
        EffectKind::Activate => {
            insert_sorted(&mut state.blocked_capability_ids, &id);
            if let Some(partner) = &pending.rollback_capability_id
                && session_active
            {
                insert_sorted(&mut state.rollback_requested_capability_ids, partner);
            }
        }
        EffectKind::Deactivate => {
            if let Some(cap) = state.capability_mut(&id) {
                cap.rollback_held = false;
                cap.rollback_owner_id = None;
            }
            insert_sorted(&mut state.blocked_deactivation_ids, &id);
        }
        EffectKind::RollbackActivate => {
            state.rollback_requested_capability_ids.retain(|r| r != &id);
            // Deviation from the reference (spec/engine.md §7): a rollback that cannot happen
            // releases the hold. Kept, it would mark a replacement as in progress forever and no
            // later deactivation could start.
            if let Some(cap) = state.capability_mut(&id) {
                cap.rollback_held = false;
                cap.rollback_owner_id = None;
            }
            if state.is_prunable(&id) {
                state.prune(&id);
            }
        }
        EffectKind::Prepare | EffectKind::PromptContext => {}
    }
}

fn set_evidence(
    state: &mut EngineState,
    exposure_id: &str,
    capability_id: &str,
    source_digest: &str,
    f: impl FnOnce(&mut Evidence),
) {
    let index = match state
        .evidence
        .iter()
        .position(|e| e.exposure_id == exposure_id && e.capability_id == capability_id)
    {
        Some(i) => i,
        None => {
            state.evidence.push(Evidence {
                capability_id: capability_id.to_owned(),
                exposure: Exposure::Unexposed,
                exposure_id: exposure_id.to_owned(),
                invocation: Invocation::NotInvoked,
                source_digest: source_digest.to_owned(),
            });
            state.evidence.len() - 1
        }
    };
    let e = &mut state.evidence[index];
    e.source_digest = source_digest.to_owned();
    f(e);
}

fn matching_capability(state: &EngineState, capability_id: &str, source_digest: &str) -> bool {
    state
        .capability(capability_id)
        .is_some_and(|c| c.source_digest() == source_digest)
}

fn provider_submission(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let rows = step
        .event
        .payload
        .get("capabilities")
        .and_then(Json::as_arr)
        .map(<[Json]>::to_vec)
        .unwrap_or_default();
    let exposure_id = step.event.scope.exposure_id.clone();
    for row in rows {
        let id = row.get_str("capability_id").unwrap_or_default().to_owned();
        let source = row.get_str("source_digest").unwrap_or_default().to_owned();
        if matching_capability(&step.state, &id, &source) {
            set_evidence(&mut step.state, &exposure_id, &id, &source, |e| {
                e.exposure = Exposure::Submitted;
            });
        } else {
            step.diagnostic(vec![
                ("code", Json::str("source_digest_mismatch")),
                ("capability_id", Json::str(id)),
            ]);
        }
    }
    Ok(())
}

fn tool_call(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let invocation = match step.event.payload.get_str("outcome") {
        Some("failed") => Invocation::InvokedFailed,
        Some("succeeded") => Invocation::InvokedSucceeded,
        _ => return invalid_event("outcome must be 'failed' or 'succeeded'"),
    };
    let id = payload_str(step, "capability_id").to_owned();
    let source = payload_str(step, "source_digest").to_owned();
    let exposure_id = step.event.scope.exposure_id.clone();
    if matching_capability(&step.state, &id, &source) {
        set_evidence(&mut step.state, &exposure_id, &id, &source, |e| {
            e.invocation = invocation;
        });
    } else {
        step.diagnostic(vec![
            ("code", Json::str("source_digest_mismatch")),
            ("capability_id", Json::str(id)),
        ]);
    }
    Ok(())
}

fn turn_starting(step: &mut Step<'_>) -> Result<(), ReduceError> {
    if !step.state.host_level.is_lifecycle() {
        let level = step.state.host_level.as_str();
        step.diagnostic(vec![
            ("code", Json::str("host_activation_unsupported")),
            ("host_level", Json::str(level)),
        ]);
        return Ok(());
    }
    let exposure_id = step.event.scope.exposure_id.clone();
    let targets: Vec<(String, String)> = step
        .state
        .capabilities
        .iter()
        .filter(|c| {
            let id = c.capability_id();
            c.is_active()
                && c.leases.iter().any(|l| l.exposure_id == exposure_id)
                && step
                    .state
                    .evidence_for(&exposure_id, id)
                    .is_none_or(|e| e.exposure == Exposure::Unexposed)
                && step.state.pending_effect_for(id).is_none()
        })
        .map(|c| {
            let id = c.capability_id().to_owned();
            let lease = c
                .activation_lease_id
                .clone()
                .unwrap_or_else(|| format!("exposure:{exposure_id}:{id}"));
            (id, lease)
        })
        .collect();
    for (ordinal, (id, lease)) in targets.into_iter().enumerate() {
        emit_material(
            step,
            ActionKind::PrepareExposure,
            EffectKind::Prepare,
            &id,
            lease,
            ordinal,
            None,
        )?;
    }
    Ok(())
}

fn session_ended(step: &mut Step<'_>) {
    let partners: Vec<String> = step
        .state
        .pending_effects
        .iter()
        .filter(|p| p.effect == EffectKind::Activate)
        .filter_map(|p| p.rollback_capability_id.clone())
        .collect();
    let state = &mut step.state;
    state.session_status = SessionStatus::Ended;
    for cap in &mut state.capabilities {
        cap.leases.clear();
        if !partners.iter().any(|p| p == cap.capability_id()) {
            cap.rollback_held = false;
            cap.rollback_owner_id = None;
        }
    }
    state.blocked_deactivation_ids.clear();
    state.rollback_requested_capability_ids.clear();
    // Deviation from the reference (spec/engine.md §7): capabilities whose only reason to stay
    // was a rollback hold are retired now, as a deactivation receipt would retire them.
    let ids: Vec<String> = state
        .capabilities
        .iter()
        .map(|c| c.capability_id().to_owned())
        .collect();
    for id in ids {
        if state.is_prunable(&id) {
            state.prune(&id);
        }
    }
}

pub(crate) fn insert_sorted(list: &mut Vec<String>, value: &str) {
    if let Err(i) = list.binary_search_by(|v| v.as_str().cmp(value)) {
        list.insert(i, value.to_owned());
    }
}
