//! Reconciliation (spec/engine.md §7): decides the next lifecycle actions from the
//! desired leases, installations and activations. Each pass emits at most one consent, one
//! deactivation or one rollback, or a bounded batch of activations, so replacement is
//! sequential and a sixth activation never starts.

use super::actions::{emit_material, request_consent};
use super::{ReduceError, Step};
use crate::json::Json;
use crate::protocol::{ACTIVE_CAPABILITIES_MAX, ActionKind};
use crate::state::{CapabilityState, EffectKind, EngineState, Installation, SessionStatus};

fn has_pending(state: &EngineState, id: &str, effects: &[EffectKind]) -> bool {
    state
        .pending_effects
        .iter()
        .any(|p| p.entity() == Some(id) && effects.contains(&p.effect))
}

const ACTIVATING: [EffectKind; 2] = [EffectKind::Activate, EffectKind::RollbackActivate];

/// Runs one reconcile pass, appending its actions and diagnostics to `step`.
pub(crate) fn reconcile(step: &mut Step<'_>) -> Result<(), ReduceError> {
    let first_action = step.actions.len();
    let ordinal = |step: &Step<'_>| step.actions.len() - first_action;

    // 1. An ended session deactivates one capability per revision.
    if step.state.session_status == SessionStatus::Ended {
        let target = step
            .state
            .capabilities
            .iter()
            .find(|c| {
                let id = c.capability_id();
                c.is_active()
                    && !step.state.blocked_deactivation_ids.iter().any(|b| b == id)
                    && !has_pending(
                        &step.state,
                        id,
                        &[EffectKind::Deactivate, EffectKind::Prepare],
                    )
            })
            .map(|c| {
                let id = c.capability_id().to_owned();
                let lease = c
                    .activation_lease_id
                    .clone()
                    .unwrap_or_else(|| format!("session-end:{id}"));
                (id, lease)
            });
        if let Some((id, lease)) = target {
            emit_material(
                step,
                ActionKind::DeactivateCapability,
                EffectKind::Deactivate,
                &id,
                lease,
                0,
                None,
            )?;
        }
        return Ok(());
    }

    // 2. Hosts that cannot activate get no lifecycle actions.
    if !step.state.host_level.is_lifecycle() {
        let level = step.state.host_level.as_str();
        step.diagnostic(vec![
            ("code", Json::str("host_activation_unsupported")),
            ("host_level", Json::str(level)),
        ]);
        return Ok(());
    }

    // 3. Consents are strictly serialized.
    if !step.state.pending_consents.is_empty() {
        return Ok(());
    }

    // 4. The first desired, absent, installable capability asks for consent.
    let install_target = step
        .state
        .capabilities
        .iter()
        .find(|c| {
            c.is_desired()
                && c.installation == Installation::Absent
                && c.authority_type() == "install"
                && c.install_descriptor_digest().is_some_and(|d| {
                    !step
                        .state
                        .blocked_install_descriptor_digests
                        .iter()
                        .any(|b| b == d)
                })
                && !has_pending(&step.state, c.capability_id(), &[EffectKind::Install])
        })
        .map(|c| c.capability_id().to_owned());
    if let Some(id) = install_target {
        return request_consent(step, &id);
    }

    // 5. Rollback precedes any new activation work.
    let rollback = step
        .state
        .rollback_requested_capability_ids
        .iter()
        .find(|id| {
            step.state.capability(id).is_some_and(|c| !c.is_active())
                && !has_pending(&step.state, id, &ACTIVATING)
        })
        .cloned();
    if let Some(id) = rollback {
        emit_material(
            step,
            ActionKind::ActivateCapability,
            EffectKind::RollbackActivate,
            &id,
            format!("rollback:{id}"),
            0,
            None,
        )?;
    }
    if !step.state.rollback_requested_capability_ids.is_empty()
        || step
            .state
            .pending_effects
            .iter()
            .any(|p| p.effect == EffectKind::RollbackActivate)
    {
        return Ok(());
    }

    // 6. Classify.
    let state = &step.state;
    let inactive_desired: Vec<String> = state
        .capabilities
        .iter()
        .filter(|c| {
            let id = c.capability_id();
            c.is_desired()
                && c.installation == Installation::Installed
                && !c.is_active()
                && !state.blocked_capability_ids.iter().any(|b| b == id)
                && !has_pending(state, id, &ACTIVATING)
        })
        .map(|c| c.capability_id().to_owned())
        .collect();
    let active_undesired: Vec<(String, String)> = state
        .capabilities
        .iter()
        .filter(|c| {
            let id = c.capability_id();
            c.is_active()
                && !c.is_desired()
                && !c.rollback_held
                && !state.blocked_deactivation_ids.iter().any(|b| b == id)
                && !has_pending(state, id, &[EffectKind::Deactivate, EffectKind::Prepare])
        })
        .map(|c| {
            let id = c.capability_id().to_owned();
            let lease = c
                .activation_lease_id
                .clone()
                .unwrap_or_else(|| format!("release:{id}"));
            (id, lease)
        })
        .collect();
    let replacement_in_progress = state
        .capabilities
        .iter()
        .any(|c| c.rollback_held && !c.is_active());

    // 7. Sequential replacement: one deactivation, holding the old capability for rollback.
    if let Some((id, lease)) = active_undesired.first().cloned()
        && !replacement_in_progress
    {
        if let Some(waiting) = inactive_desired.first() {
            let owner = step
                .state
                .capability(waiting)
                .and_then(|c| c.leases.first())
                .map(|l| l.owner_id.clone());
            if let Some(cap) = step.state.capability_mut(&id) {
                cap.rollback_held = true;
                cap.rollback_owner_id = owner;
            }
        }
        return emit_material(
            step,
            ActionKind::DeactivateCapability,
            EffectKind::Deactivate,
            &id,
            lease,
            0,
            None,
        );
    }

    // 8. Activate within the budget of five.
    let active = step
        .state
        .capabilities
        .iter()
        .filter(|c| c.is_active())
        .count();
    let activating = step
        .state
        .pending_effects
        .iter()
        .filter(|p| ACTIVATING.contains(&p.effect))
        .count();
    let capacity = ACTIVE_CAPABILITIES_MAX.saturating_sub(active + activating);
    for id in inactive_desired.iter().take(capacity) {
        let partner = step
            .state
            .capabilities
            .iter()
            .filter(|c| c.rollback_held && !c.is_active())
            .map(CapabilityState::capability_id)
            .find(|p| {
                !step
                    .state
                    .pending_effects
                    .iter()
                    .any(|e| e.rollback_capability_id.as_deref() == Some(p))
            })
            .map(str::to_owned);
        let lease = step
            .state
            .capability(id)
            .and_then(|c| c.leases.first())
            .map(|l| l.lease_id.clone())
            .unwrap_or_default();
        let n = ordinal(step);
        emit_material(
            step,
            ActionKind::ActivateCapability,
            EffectKind::Activate,
            id,
            lease,
            n,
            partner,
        )?;
    }

    // 9. Say what waits.
    if inactive_desired.len() > capacity {
        let deferred = inactive_desired.len() - capacity;
        step.diagnostic(vec![
            ("code", Json::str("active_capability_budget_exhausted")),
            ("limit", Json::from(ACTIVE_CAPABILITIES_MAX as u64)),
            ("deferred", Json::from(deferred as u64)),
        ]);
    }
    Ok(())
}
