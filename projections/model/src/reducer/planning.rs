//! Committing a schema-v3 planning decision (spec/engine.md §5).

use super::actions::present_bundle;
use super::reconcile::reconcile;
use super::{ReduceError, Step, invalid, invalid_event};
use crate::documents::{classify_lineage_promotion, material_identity};
use crate::json::Json;
use crate::plan::validate_capability_plan_value;
use crate::replay::Surrogate;
use crate::shape::is_sha;
use crate::state::{Activation, CapabilityState, CommittedPlan, EngineState, Installation};

pub(crate) fn commit_plan(
    step: &mut Step<'_>,
    prev: &EngineState,
    decision: &Surrogate,
) -> Result<(), ReduceError> {
    let value = &decision.value;
    validate_capability_plan_value(value).map_err(|e| ReduceError::Invalid(e.to_string()))?;
    let Some(plan_id) = step.event.correlation_id.clone() else {
        return invalid_event("planning event requires its plan_id as correlation_id");
    };
    let Some(catalog) = step
        .event
        .catalog_snapshot_digest
        .clone()
        .filter(|c| is_sha(c))
    else {
        return invalid_event("planning event requires a catalog_snapshot_digest");
    };
    let status = value.get_str("status").unwrap_or_default().to_owned();
    let abstention_code = value.get_str("abstention_code").map(str::to_owned);
    let rows: Vec<Json> = value
        .get("capabilities")
        .and_then(Json::as_arr)
        .map(<[Json]>::to_vec)
        .unwrap_or_default();
    let retained_active: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let id = row.get_str("capability_id")?;
            prev.capability(id)
                .filter(|c| c.is_active() && &c.selection == row)
                .map(|_| id.to_owned())
        })
        .collect();
    let plan = CommittedPlan {
        abstention_code: abstention_code.clone(),
        benefit_audit: value.get("benefit_audit").cloned().unwrap_or(Json::Null),
        capabilities: rows.clone(),
        catalog_snapshot_id: catalog.clone(),
        decision_digest: decision.value_digest.clone(),
        plan_id: plan_id.clone(),
        status: status.clone(),
    };

    if status == "degraded" {
        // A degraded plan is recorded but never touches runtime authority.
        step.state.committed_plan = Some(plan);
        step.state.last_manual_bundle.clear();
        step.diagnostic(vec![("code", Json::opt_str(abstention_code.as_deref()))]);
        return Ok(());
    }
    if !step.state.pending_effects.is_empty() || !step.state.pending_consents.is_empty() {
        return invalid_event(
            "a ready or abstained plan cannot replace pending schema-v3 authority",
        );
    }

    let mut capabilities: Vec<CapabilityState> = Vec::new();
    for row in &rows {
        if row.get_str("actionability") == Some("manual") {
            continue;
        }
        let id = row.get_str("capability_id").unwrap_or_default();
        let next = match prev.capability(id) {
            Some(existing) if &existing.selection == row => existing.clone(),
            Some(existing) => match promote(existing, row)? {
                Some(promoted) => promoted,
                None => {
                    let replaceable = existing.installation == Installation::Absent
                        && !existing.is_active()
                        && existing.leases.is_empty()
                        && !existing.rollback_held;
                    if !replaceable {
                        return invalid_event(
                            "schema-v3 selection changed while prior same-ID runtime authority exists",
                        );
                    }
                    fresh(row, &plan_id, &catalog)?
                }
            },
            None => fresh(row, &plan_id, &catalog)?,
        };
        capabilities.push(CapabilityState {
            plan_id: plan_id.clone(),
            catalog_snapshot_id: catalog.clone(),
            ..next
        });
    }
    // Active capabilities the new plan drops stay, without leases, until they are deactivated.
    for cap in &prev.capabilities {
        let id = cap.capability_id();
        if cap.is_active() && !capabilities.iter().any(|c| c.capability_id() == id) {
            let mut kept = cap.clone();
            kept.leases.clear();
            capabilities.push(kept);
        }
    }
    capabilities.sort_by(|a, b| a.capability_id().cmp(b.capability_id()));

    let state = &mut step.state;
    let kept: Vec<String> = capabilities
        .iter()
        .map(|c| c.capability_id().to_owned())
        .collect();
    state.capabilities = capabilities;
    state.evidence.retain(|e| kept.contains(&e.capability_id));
    for list in [
        &mut state.blocked_capability_ids,
        &mut state.blocked_deactivation_ids,
        &mut state.rollback_requested_capability_ids,
        &mut state.terminal_cleanup_notified_ids,
    ] {
        list.retain(|id| kept.contains(id));
    }
    let descriptors: Vec<&str> = rows
        .iter()
        .filter(|r| r.get_str("actionability") == Some("install"))
        .filter_map(|r| r.get_str("install_descriptor_digest"))
        .collect();
    state
        .blocked_install_descriptor_digests
        .retain(|d| descriptors.contains(&d.as_str()));
    state.last_manual_bundle = rows
        .iter()
        .filter(|r| r.get_str("actionability") == Some("manual"))
        .filter_map(|r| r.get_str("capability_id").map(str::to_owned))
        .collect();
    if status != "ready" {
        state.last_manual_bundle.clear();
    }
    state.committed_plan = Some(plan);

    reconcile(step)?;
    if status == "ready" {
        let presented: Vec<Json> = rows
            .iter()
            .filter(|r| {
                r.get_str("capability_id")
                    .is_none_or(|id| !retained_active.iter().any(|k| k == id))
            })
            .cloned()
            .collect();
        if !presented.is_empty() {
            let ordinal = step.actions.len();
            let action = present_bundle(
                step,
                &decision.value_digest,
                &plan_id,
                &catalog,
                presented,
                ordinal,
            );
            step.actions.push(action);
        }
    } else {
        step.diagnostic(vec![("code", Json::opt_str(abstention_code.as_deref()))]);
    }
    Ok(())
}

/// Install→load promotion: kept only with exact receipt-proven lineage and unchanged source.
fn promote(existing: &CapabilityState, row: &Json) -> Result<Option<CapabilityState>, ReduceError> {
    let classified = classify_lineage_promotion(
        &existing.selection,
        &existing.current_authorized_material,
        row,
        false,
    );
    if classified != Ok("install-to-load")
        || row.get_str("catalog_entry_digest") != Some(existing.source_digest())
    {
        return Ok(None);
    }
    let Some(material) = row.get("authority").and_then(|a| a.get("material")) else {
        return invalid("load authority is missing exact catalog material identity");
    };
    let mut promoted = existing.clone();
    promoted.selection = row.clone();
    promoted.current_authorized_material = material.clone();
    Ok(Some(promoted))
}

/// Runtime state for a newly selected row: load rows are installed with the catalog material,
/// install rows start absent.
fn fresh(row: &Json, plan_id: &str, catalog: &str) -> Result<CapabilityState, ReduceError> {
    let id = row.get_str("capability_id").unwrap_or_default();
    let kind = row.get_str("kind").unwrap_or_default();
    let authority = row.get("authority").cloned().unwrap_or(Json::Null);
    let (installation, current, material_identity) = match authority.get_str("type") {
        Some("load") => {
            let Some(material) = authority.get("material") else {
                return invalid("load authority is missing exact catalog material identity");
            };
            let Some(descriptor) = material.get("catalog_material_descriptor").filter(|d| {
                d.get("material_identity_digest")
                    .is_some_and(|m| !m.is_null())
            }) else {
                return invalid("load authority is missing exact catalog material identity");
            };
            let identity = material_identity(
                id,
                kind,
                descriptor.get_str("content_sha256").unwrap_or_default(),
                descriptor
                    .get("content_bytes")
                    .and_then(Json::as_i64)
                    .unwrap_or(0),
            )?;
            let digest = identity.get_str("identity_digest");
            if digest != material.get_str("material_identity_digest")
                || digest != descriptor.get_str("material_identity_digest")
            {
                return invalid(
                    "load authority material digest does not match exact catalog content",
                );
            }
            (Installation::Installed, material.clone(), identity)
        }
        Some("install") => {
            let Some(result) = authority.get("result_material") else {
                return invalid("install authority requires an exact result material identity");
            };
            (Installation::Absent, Json::Null, result.clone())
        }
        _ => {
            return invalid(
                "schema-v3 planning accepts only load, install, or manual presentation",
            );
        }
    };
    Ok(CapabilityState {
        activation: Activation::Inactive,
        activation_lease_id: None,
        catalog_snapshot_id: catalog.to_owned(),
        current_authorized_material: current,
        installation,
        leases: Vec::new(),
        material_identity,
        plan_id: plan_id.to_owned(),
        rollback_held: false,
        rollback_owner_id: None,
        selection: row.clone(),
    })
}
