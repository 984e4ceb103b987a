//! The construction and persisted-projection invariants of a contract-3 engine state
//! (spec/engine.md §4). Messages are the reference's sentences.
//!
//! Leaf documents (plan rows, authorized materials, material identities, descriptors) are read
//! through `Json::get` only: their own field rules belong to the leaf validators, while this module
//! checks how the state's parts refer to each other.

use std::collections::BTreeSet;

use crate::json::Json;
use crate::protocol::{
    ACTIVE_CAPABILITIES_MAX, ActionKind, HostAction, INSTALL_ACTION_PAYLOAD_SCHEMA_V3,
    MATERIAL_ACTION_PAYLOAD_SCHEMA_V3,
};
use crate::shape::{is_sha, is_trimmed};
use crate::state::{
    Activation, CapabilityState, CommittedPlan, EffectKind, EngineState, Evidence, HostLevel,
    Installation, Lease, PendingConsent, PendingEffect, SessionStatus, StateError, exact_fields,
    serr,
};

const ABSTENTION_CODES: [&str; 3] = ["below-net-benefit", "limit-zero", "no-feasible-capability"];
const DEGRADATION_CODES: [&str; 2] = ["catalog-unavailable", "planner-failed"];

fn required_text(value: &str, field: &str) -> Result<(), StateError> {
    if is_trimmed(value) {
        Ok(())
    } else {
        serr(format!("{field} must be a non-empty trimmed string"))
    }
}

fn optional_text(value: Option<&str>, field: &str) -> Result<(), StateError> {
    value.map_or(Ok(()), |v| required_text(v, field))
}

fn sha256(value: &str, field: &str) -> Result<(), StateError> {
    required_text(value, field)?;
    if is_sha(value) {
        Ok(())
    } else {
        serr(format!("{field} must be a lowercase SHA-256 digest"))
    }
}

/// `a == b` where a missing left side never matches: a rule that compares two documents'
/// members must not pass because both lack the member.
fn same(a: Option<&Json>, b: Option<&Json>) -> bool {
    a.is_some() && a == b
}

/// A nullable string member compared to an optional value: absent and `null` both read as none,
/// as the reference's `payload.get(key)` does.
fn same_opt_str(v: Option<&Json>, want: Option<&str>) -> bool {
    match v {
        None | Some(Json::Null) => want.is_none(),
        Some(Json::Str(s)) => want == Some(s.as_str()),
        Some(_) => false,
    }
}

fn authority(row: &Json) -> &Json {
    row.get("authority").unwrap_or(&Json::Null)
}

fn authority_type(row: &Json) -> Option<&str> {
    authority(row).get_str("type")
}

/// The structural shape of a schema-v3 plan row: exact row, benefit and authority key sets. The
/// values inside are the plan leaf validator's business.
fn check_plan_row(row: &Json) -> Result<(), StateError> {
    let m = exact_fields(
        row,
        &crate::plan::PLAN_ROW_V3_KEYS,
        "schema-v3 plan capability",
    )?;
    exact_fields(
        m.get("benefit").unwrap_or(&Json::Null),
        &["individual_net_benefit_u", "marginal_net_benefit_u", "tier"],
        "schema-v3 benefit projection",
    )?;
    let authority = m.get("authority").unwrap_or(&Json::Null);
    if authority.as_obj().is_none() {
        return serr("schema-v3 planning authority must be a JSON object");
    }
    match authority.get_str("type") {
        Some("load") => exact_fields(authority, &["material", "type"], "schema-v3 load authority"),
        Some("install") => exact_fields(
            authority,
            &["descriptor", "result_material", "type"],
            "schema-v3 install authority",
        ),
        Some("manual") => exact_fields(authority, &["type"], "schema-v3 manual authority"),
        _ => return serr("schema-v3 planning authority type is unsupported"),
    }?;
    Ok(())
}

/// The plan's canonical row order: executable tier first, then capability id, then source digest.
fn plan_row_order(row: &Json) -> (bool, Option<&str>, Option<&str>) {
    let advisory = row.get("benefit").and_then(|b| b.get_str("tier")) != Some("executable");
    (
        advisory,
        row.get_str("capability_id"),
        row.get_str("catalog_entry_digest"),
    )
}

/// The plan rules the state contract leans on (spec/planner.md §7): identity
/// fields, row shape, bound, uniqueness, order, and the status/rows/code/audit agreement. The
/// audit's numeric consistency is left to the plan leaf validator.
fn check_plan(plan: &CommittedPlan) -> Result<(), StateError> {
    required_text(&plan.plan_id, "plan_id")?;
    sha256(&plan.catalog_snapshot_id, "catalog_snapshot_id")?;
    sha256(&plan.decision_digest, "decision_digest")?;
    for row in &plan.capabilities {
        check_plan_row(row)?;
    }
    if plan.capabilities.len() > ACTIVE_CAPABILITIES_MAX {
        return serr("schema-v3 committed plan cannot contain more than five capabilities");
    }
    let ids: BTreeSet<Option<&str>> = plan
        .capabilities
        .iter()
        .map(|r| r.get_str("capability_id"))
        .collect();
    if ids.len() != plan.capabilities.len() {
        return serr("schema-v3 committed plan contains duplicate capability IDs");
    }
    if !plan
        .capabilities
        .windows(2)
        .all(|w| plan_row_order(&w[0]) <= plan_row_order(&w[1]))
    {
        return serr("schema-v3 committed plan capabilities are not in canonical order");
    }
    let rows = !plan.capabilities.is_empty();
    let code = plan.abstention_code.as_deref();
    let audit = !plan.benefit_audit.is_null();
    match plan.status.as_str() {
        "ready" => {
            if !rows || code.is_some() {
                return serr("ready schema-v3 plan requires rows and no abstention code");
            }
            if !audit {
                return serr("ready schema-v3 plan requires the exact benefit audit");
            }
        }
        "abstained" => {
            if rows || !code.is_some_and(|c| ABSTENTION_CODES.contains(&c)) {
                return serr("abstained schema-v3 plan requires no rows and a declared code");
            }
            if !audit {
                return serr("abstained schema-v3 plan requires the exact benefit audit");
            }
        }
        "degraded" => {
            if rows || !code.is_some_and(|c| DEGRADATION_CODES.contains(&c)) || audit {
                return serr("degraded schema-v3 plan requires no rows or benefit audit");
            }
        }
        _ => return serr("schema-v3 committed plan status is unsupported"),
    }
    if audit {
        exact_fields(
            &plan.benefit_audit,
            &crate::plan::BENEFIT_AUDIT_KEYS,
            "schema-v3 benefit audit",
        )?;
    }
    Ok(())
}

fn check_lease(lease: &Lease) -> Result<(), StateError> {
    required_text(&lease.lease_id, "lease_id")?;
    required_text(&lease.owner_id, "owner_id")?;
    required_text(&lease.exposure_id, "exposure_id")
}

/// One runtime capability on its own (spec/engine.md §4.
fn check_capability(c: &CapabilityState) -> Result<(), StateError> {
    check_plan_row(&c.selection)?;
    if authority_type(&c.selection) == Some("manual") {
        return serr("manual schema-v3 selections cannot create lifecycle state");
    }
    if c.material_identity.as_obj().is_none() {
        return serr("schema-v3 capability requires exact material_identity");
    }
    required_text(&c.plan_id, "plan_id")?;
    sha256(&c.catalog_snapshot_id, "catalog_snapshot_id")?;
    for lease in &c.leases {
        check_lease(lease)?;
    }
    let lease_ids: BTreeSet<&str> = c.leases.iter().map(|l| l.lease_id.as_str()).collect();
    if lease_ids.len() != c.leases.len() {
        return serr("schema-v3 capability has duplicate lease IDs");
    }
    if !c.leases.windows(2).all(|w| w[0].lease_id <= w[1].lease_id) {
        return serr("schema-v3 capability leases must be sorted by lease_id");
    }
    optional_text(c.activation_lease_id.as_deref(), "activation_lease_id")?;
    let active = c.activation == Activation::Active;
    if active && c.activation_lease_id.is_none() {
        return serr("active capability requires activation_lease_id");
    }
    if !active && c.activation_lease_id.is_some() {
        return serr("inactive capability cannot have activation_lease_id");
    }
    if active && c.installation != Installation::Installed {
        return serr("active capability must be installed");
    }
    optional_text(c.rollback_owner_id.as_deref(), "rollback_owner_id")?;
    if c.rollback_held != c.rollback_owner_id.is_some() {
        return serr("rollback_held and rollback_owner_id must be set together");
    }
    let sel = &c.selection;
    let mat = &c.material_identity;
    if !same(sel.get("capability_id"), mat.get("capability_id"))
        || !same(sel.get("kind"), mat.get("kind"))
    {
        return serr("material_identity does not match schema-v3 selection");
    }
    let auth = authority(sel);
    let current = &c.current_authorized_material;
    match auth.get_str("type") {
        Some("load") => {
            if c.installation != Installation::Installed {
                return serr("load selection must have installed lifecycle material");
            }
            if auth.get("material") != Some(current) {
                return serr("current_authorized_material does not match load authority");
            }
        }
        Some("install") => {
            if auth.get("result_material") != Some(mat) {
                return serr("material_identity does not match install result authority");
            }
            if c.installation == Installation::Absent {
                if !current.is_null() {
                    return serr("absent install selection cannot have authorized material");
                }
                if active {
                    return serr("absent install selection must be inactive");
                }
                return Ok(());
            }
            if current.get_str("origin") != Some("installed") {
                return serr("promoted install requires installed current_authorized_material");
            }
            let lineage_origin = current
                .get("installed_material_lineage")
                .and_then(|l| l.get("origin_install_descriptor_digest"));
            let descriptor = auth
                .get("descriptor")
                .and_then(|d| d.get("descriptor_digest"));
            if !same(descriptor, lineage_origin) {
                return serr("install promotion lineage does not match selected descriptor");
            }
        }
        _ => return serr("schema-v3 selection authority is unsupported"),
    }
    if current.is_null() {
        return serr("installed capability requires current_authorized_material");
    }
    let catalog_digest = sel
        .get("catalog_identity")
        .and_then(|i| i.get("identity_digest"));
    if !same(sel.get("capability_id"), current.get("capability_id"))
        || !same(sel.get("kind"), current.get("kind"))
        || !same(catalog_digest, current.get("catalog_identity_digest"))
        || !same(
            mat.get("identity_digest"),
            current.get("material_identity_digest"),
        )
    {
        return serr("current_authorized_material identity does not match selection");
    }
    Ok(())
}

/// The action kind each pending effect must carry (spec/engine.md §4).
fn effect_action_kind(effect: EffectKind) -> ActionKind {
    match effect {
        EffectKind::Install => ActionKind::InstallCapability,
        EffectKind::Activate | EffectKind::RollbackActivate => ActionKind::ActivateCapability,
        EffectKind::Deactivate => ActionKind::DeactivateCapability,
        EffectKind::Prepare => ActionKind::PrepareExposure,
        EffectKind::PromptContext => ActionKind::PreparePromptContext,
    }
}

fn check_pending_effect(p: &PendingEffect) -> Result<(), StateError> {
    if p.action.kind != effect_action_kind(p.effect) {
        return serr(format!(
            "pending effect '{}' cannot use action '{}'",
            p.effect.as_str(),
            p.action.kind.as_str()
        ));
    }
    optional_text(
        p.rollback_capability_id.as_deref(),
        "rollback_capability_id",
    )?;
    if p.rollback_capability_id.is_some() && p.effect != EffectKind::Activate {
        return serr("rollback_capability_id is valid only for activate effects");
    }
    Ok(())
}

fn check_pending_consent(c: &PendingConsent) -> Result<(), StateError> {
    required_text(&c.consent_id, "consent_id")?;
    if c.install_action.kind != ActionKind::InstallCapability {
        return serr("pending consent must bind InstallCapability");
    }
    if c.install_action.consent_id.as_deref() != Some(c.consent_id.as_str()) {
        return serr("pending consent ID does not match install action");
    }
    Ok(())
}

fn check_evidence(e: &Evidence) -> Result<(), StateError> {
    required_text(&e.exposure_id, "exposure_id")?;
    required_text(&e.capability_id, "capability_id")?;
    required_text(&e.source_digest, "source_digest")
}

/// Each list sorted and unique, every entry trimmed text (digests: SHA-256).
fn check_id_list(name: &str, values: &[String], digests: bool) -> Result<(), StateError> {
    for (i, v) in values.iter().enumerate() {
        let field = format!("{name}[{i}]");
        if digests {
            sha256(v, &field)?;
        } else {
            required_text(v, &field)?;
        }
    }
    let unique: BTreeSet<&String> = values.iter().collect();
    if unique.len() != values.len() {
        return serr(format!("{name} contains duplicate IDs"));
    }
    if !values.windows(2).all(|w| w[0] <= w[1]) {
        return serr(format!("{name} must be sorted"));
    }
    Ok(())
}

/// True when some id occurs twice in `ids`.
fn has_duplicates<T: Ord>(ids: impl IntoIterator<Item = T>) -> bool {
    let mut seen = BTreeSet::new();
    ids.into_iter().any(|id| !seen.insert(id))
}

impl EngineState {
    /// Checks the construction invariants of a contract-3 state (spec/engine.md §4,
    /// with the ordering and uniqueness rules of spec/engine.md §4). The reducer calls this on
    /// every state it builds; [`EngineState::validate_persisted`] adds the stricter persisted
    /// rules.
    pub fn validate(&self) -> Result<(), StateError> {
        if self.revision < 1 {
            return serr("revision must be an integer >= 1");
        }
        self.scope
            .validate()
            .map_err(|_| StateError::new("engine state contains an invalid scope"))?;
        sha256(&self.host_descriptor_digest, "host_descriptor_digest")?;
        if let Some(policy) = &self.install_policy_snapshot_digest {
            sha256(policy, "install_policy_snapshot_digest")?;
        }
        self.check_nested_values()?;
        self.check_cross_references()
    }

    /// [`EngineState::validate`] plus the persisted-projection invariants (spec/engine.md §4),
    /// checked when a state is serialized for the journal and when it is decoded from it.
    pub fn validate_persisted(&self) -> Result<(), StateError> {
        self.validate()?;
        for p in &self.pending_effects {
            if p.action.precondition_revision > self.revision {
                return serr("persisted pending action exceeds state revision");
            }
        }
        for c in &self.pending_consents {
            if c.install_action.precondition_revision > self.revision.saturating_add(1) {
                return serr("persisted pending consent exceeds next revision");
            }
        }
        for id in &self.rollback_requested_capability_ids {
            let held_inactive = self
                .capability(id)
                .is_some_and(|c| !c.is_active() && c.rollback_held);
            if !held_inactive {
                return serr("rollback request must target inactive rollback-held capability");
            }
        }
        // Deviation from the reference (spec/engine.md §4, E4): the reference also demands that
        // every unleased active capability be pending deactivation, rollback-held or blocked.
        // Reconcile deactivates one such capability per pass, and only after consents and
        // rollbacks, so a plan (or session end) that releases two of them would be refused. They
        // wait their turn instead; reconcile step 7 (or the ended branch) reaches each in order.
        let plan = self.committed_plan.as_ref();
        if plan.is_some_and(|p| p.status == "degraded") {
            // A degraded plan leaves runtime state untouched, so nothing is retired under it.
            return Ok(());
        }
        let selected: BTreeSet<&str> = plan
            .filter(|p| p.is_ready())
            .map(|p| {
                p.capabilities
                    .iter()
                    .filter_map(|r| r.get_str("capability_id"))
                    .collect()
            })
            .unwrap_or_default();
        let referenced: BTreeSet<&str> = self
            .pending_effects
            .iter()
            .flat_map(|p| {
                p.entity()
                    .into_iter()
                    .chain(p.rollback_capability_id.as_deref())
            })
            .collect();
        for c in &self.capabilities {
            let id = c.capability_id();
            if !selected.contains(id)
                && !c.is_active()
                && !c.rollback_held
                && !self
                    .rollback_requested_capability_ids
                    .iter()
                    .any(|r| r == id)
                && !referenced.contains(id)
            {
                return serr("inactive unselected capability cannot survive persisted state");
            }
        }
        Ok(())
    }

    /// Every nested value on its own, then the ordering, uniqueness and budget rules.
    fn check_nested_values(&self) -> Result<(), StateError> {
        if let Some(plan) = &self.committed_plan {
            check_plan(plan)?;
        }
        for c in &self.capabilities {
            check_capability(c)?;
        }
        for p in &self.pending_effects {
            check_pending_effect(p)?;
        }
        for c in &self.pending_consents {
            check_pending_consent(c)?;
        }
        for e in &self.evidence {
            check_evidence(e)?;
        }

        let ids: Vec<&str> = self
            .capabilities
            .iter()
            .map(CapabilityState::capability_id)
            .collect();
        if has_duplicates(ids.iter()) {
            return serr("duplicate capability ID in projection");
        }
        if !ids.windows(2).all(|w| w[0] <= w[1]) {
            return serr("capabilities must be sorted by capability_id");
        }
        let lease_ids = self
            .capabilities
            .iter()
            .flat_map(|c| c.leases.iter().map(|l| l.lease_id.as_str()));
        if has_duplicates(lease_ids) {
            return serr("duplicate lease ID across capabilities");
        }
        let evidence_keys: Vec<(&str, &str)> = self
            .evidence
            .iter()
            .map(|e| (e.exposure_id.as_str(), e.capability_id.as_str()))
            .collect();
        if has_duplicates(evidence_keys.iter()) {
            return serr("duplicate evidence identity in projection");
        }
        if !evidence_keys.windows(2).all(|w| w[0] <= w[1]) {
            return serr("evidence must be sorted by exposure and capability");
        }

        let action_ids: BTreeSet<&str> = self
            .pending_effects
            .iter()
            .map(|p| p.action.action_id.as_str())
            .collect();
        if action_ids.len() != self.pending_effects.len() {
            return serr("duplicate pending action ID in projection");
        }
        if has_duplicates(self.pending_consents.iter().map(|c| c.consent_id.as_str())) {
            return serr("duplicate pending consent ID in projection");
        }
        let consent_action_ids: BTreeSet<&str> = self
            .pending_consents
            .iter()
            .map(|c| c.install_action.action_id.as_str())
            .collect();
        if consent_action_ids.len() != self.pending_consents.len() {
            return serr("duplicate pending consent action ID in projection");
        }
        if !action_ids.is_disjoint(&consent_action_ids) {
            return serr("install action cannot await consent and receipt simultaneously");
        }
        // Entities are compared as options, as the reference does: an action without an entity
        // (a prompt-context bundle) counts as one shared "no capability" slot, so at most one
        // such effect can be pending.
        let effect_entities: Vec<Option<&str>> = self
            .pending_effects
            .iter()
            .map(PendingEffect::entity)
            .collect();
        if has_duplicates(effect_entities.iter()) {
            return serr("capability cannot have multiple pending lifecycle operations");
        }
        let consent_entities: Vec<Option<&str>> = self
            .pending_consents
            .iter()
            .map(|c| c.install_action.entity_id.as_deref())
            .collect();
        if has_duplicates(consent_entities.iter()) {
            return serr("capability cannot have multiple pending install consents");
        }
        if consent_entities.iter().any(|e| effect_entities.contains(e)) {
            return serr(
                "install cannot await consent and a pending effect for the same capability",
            );
        }

        if self.capabilities.iter().filter(|c| c.is_active()).count() > ACTIVE_CAPABILITIES_MAX {
            return serr("projection cannot contain more than five active capabilities");
        }
        for (name, values, digests) in [
            ("last_manual_bundle", &self.last_manual_bundle, false),
            (
                "blocked_capability_ids",
                &self.blocked_capability_ids,
                false,
            ),
            (
                "blocked_deactivation_ids",
                &self.blocked_deactivation_ids,
                false,
            ),
            (
                "blocked_install_descriptor_digests",
                &self.blocked_install_descriptor_digests,
                true,
            ),
            (
                "rollback_requested_capability_ids",
                &self.rollback_requested_capability_ids,
                false,
            ),
            (
                "terminal_cleanup_notified_ids",
                &self.terminal_cleanup_notified_ids,
                false,
            ),
        ] {
            check_id_list(name, values, digests)?;
        }
        if self.last_manual_bundle.len() > ACTIVE_CAPABILITIES_MAX {
            return serr("last_manual_bundle cannot contain more than five capabilities");
        }
        Ok(())
    }

    /// How the parts refer to each other (spec/engine.md §4).
    fn check_cross_references(&self) -> Result<(), StateError> {
        let plan = self.committed_plan.as_ref();
        if plan.is_none()
            && (!self.capabilities.is_empty()
                || !self.last_manual_bundle.is_empty()
                || !self.blocked_install_descriptor_digests.is_empty())
        {
            return serr("schema-v3 runtime references require a committed plan");
        }
        if let Some(plan) = plan {
            for c in &self.capabilities {
                match plan.row(c.capability_id()) {
                    Some(row) => {
                        if &c.selection != row {
                            return serr(
                                "schema-v3 runtime capability is not the exact committed plan row",
                            );
                        }
                        if c.plan_id != plan.plan_id
                            || c.catalog_snapshot_id != plan.catalog_snapshot_id
                        {
                            return serr(
                                "schema-v3 capability plan identity does not match committed plan",
                            );
                        }
                    }
                    None => {
                        if c.plan_id == plan.plan_id {
                            return serr("omitted runtime cannot mint current-plan authority");
                        }
                        if matches!(plan.status.as_str(), "ready" | "abstained")
                            && !c.leases.is_empty()
                        {
                            return serr(
                                "unselected runtime capability cannot retain current leases",
                            );
                        }
                    }
                }
            }
        }

        let expected_manual: Vec<&str> = plan
            .filter(|p| p.is_ready())
            .map(|p| {
                p.capabilities
                    .iter()
                    .filter(|r| authority_type(r) == Some("manual"))
                    .filter_map(|r| r.get_str("capability_id"))
                    .collect()
            })
            .unwrap_or_default();
        if !self
            .last_manual_bundle
            .iter()
            .map(String::as_str)
            .eq(expected_manual)
        {
            return serr("last_manual_bundle does not exactly match committed manual rows");
        }

        for e in &self.evidence {
            let Some(c) = self.capability(&e.capability_id) else {
                return serr("evidence references unknown capability");
            };
            if Some(e.source_digest.as_str()) != c.selection.get_str("catalog_entry_digest") {
                return serr("evidence source_digest does not match capability");
            }
        }

        for p in &self.pending_effects {
            self.check_pending_effect_refs(p)?;
        }

        for consent in &self.pending_consents {
            let action = &consent.install_action;
            let Some(c) = action
                .entity_id
                .as_deref()
                .and_then(|id| self.capability(id))
            else {
                return serr("pending consent references unknown capability");
            };
            if c.installation != Installation::Absent || c.is_active() {
                return serr("pending consent must target an absent inactive capability");
            }
            check_action_identity(action, c)?;
            self.check_install_action(action, c)?;
            // The install precomputed at consent time targets the decision's revision, N + 2.
            if action.precondition_revision > self.revision.saturating_add(2) {
                return serr("pending consent action exceeds decision target revision");
            }
            if !action.scope.same_session(&self.scope) {
                return serr("pending consent belongs to another session");
            }
        }

        for (name, values) in [
            ("blocked_capability_ids", &self.blocked_capability_ids),
            ("blocked_deactivation_ids", &self.blocked_deactivation_ids),
            (
                "rollback_requested_capability_ids",
                &self.rollback_requested_capability_ids,
            ),
            (
                "terminal_cleanup_notified_ids",
                &self.terminal_cleanup_notified_ids,
            ),
        ] {
            if values.iter().any(|id| self.capability(id).is_none()) {
                return serr(format!("{name} references unknown capability"));
            }
        }

        let authorities: BTreeSet<&str> = self
            .capabilities
            .iter()
            .map(|c| &c.selection)
            .chain(plan.into_iter().flat_map(|p| p.capabilities.iter()))
            .filter_map(|row| {
                authority(row)
                    .get("descriptor")
                    .and_then(|d| d.get_str("descriptor_digest"))
                    .filter(|_| authority_type(row) == Some("install"))
            })
            .collect();
        if self
            .blocked_install_descriptor_digests
            .iter()
            .any(|d| !authorities.contains(d.as_str()))
        {
            return serr("blocked install descriptor lacks retained or current authority");
        }
        if self
            .terminal_cleanup_notified_ids
            .iter()
            .any(|id| !self.blocked_deactivation_ids.contains(id))
        {
            return serr("terminal cleanup notification must reference blocked deactivation");
        }
        Ok(())
    }

    fn check_pending_effect_refs(&self, p: &PendingEffect) -> Result<(), StateError> {
        let action = &p.action;
        if p.effect == EffectKind::PromptContext {
            return self.check_prompt_context(action);
        }
        let Some(c) = action
            .entity_id
            .as_deref()
            .and_then(|id| self.capability(id))
        else {
            return serr("pending action references unknown capability");
        };
        check_action_identity(action, c)?;
        // The reducer checks its intermediate state before the revision advances to N + 1.
        if action.precondition_revision > self.revision.saturating_add(1) {
            return serr("pending action precondition_revision exceeds next state revision");
        }
        if !action.scope.same_session(&self.scope) {
            return serr("pending action scope belongs to another session");
        }
        if p.effect == EffectKind::Install {
            if c.installation != Installation::Absent || c.is_active() {
                return serr("pending install must target an absent inactive capability");
            }
            self.check_install_action(action, c)?;
        } else {
            check_material_action(action, c)?;
            if matches!(
                p.effect,
                EffectKind::Activate | EffectKind::RollbackActivate
            ) {
                if c.is_active() {
                    return serr("pending activation targets an already active capability");
                }
            } else if !c.is_active() {
                return serr(format!(
                    "pending {} targets an inactive capability",
                    p.effect.as_str()
                ));
            }
            self.check_pending_lease(p, c)?;
        }
        if let Some(partner_id) = p.rollback_capability_id.as_deref() {
            let valid = self.capability(partner_id).is_some_and(|partner| {
                partner.rollback_held && !partner.is_active() && partner_id != c.capability_id()
            });
            if !valid {
                return serr("pending activation has invalid rollback capability");
            }
        }
        Ok(())
    }

    /// A pending install (effect or consent) must carry exactly the v3 payload the capability's
    /// install authority and the state's consent policy produce.
    fn check_install_action(
        &self,
        action: &HostAction,
        c: &CapabilityState,
    ) -> Result<(), StateError> {
        let auth = authority(&c.selection);
        if auth.get_str("type") != Some("install") {
            return serr("pending install lacks committed install authority");
        }
        let payload = &action.payload;
        if payload.get_str("schema") != Some(INSTALL_ACTION_PAYLOAD_SCHEMA_V3) {
            return serr("pending install does not use schema-v3 payload");
        }
        if !same(payload.get("capability_kind"), c.selection.get("kind"))
            || !same(
                payload.get("catalog_identity"),
                c.selection.get("catalog_identity"),
            )
            || payload.get("result_material") != Some(&c.material_identity)
            || !same(
                payload.get("install_plan_descriptor"),
                auth.get("descriptor"),
            )
        {
            return serr("pending install typed authority does not match runtime capability");
        }
        if !same_opt_str(
            payload.get("policy_snapshot_digest"),
            self.install_policy_snapshot_digest.as_deref(),
        ) {
            return serr("pending install policy snapshot does not match current policy");
        }
        Ok(())
    }

    /// Lease authority of a pending lifecycle effect.
    fn check_pending_lease(
        &self,
        p: &PendingEffect,
        c: &CapabilityState,
    ) -> Result<(), StateError> {
        let action = &p.action;
        let exposure = action.scope.exposure_id.as_str();
        // Deviation from the reference (spec/engine.md §4, E6): a session end or a new plan
        // removes leases while effects are in flight. Their receipts still have to land, so an
        // activation in an ended session and a preparation of a released capability stay valid.
        let ended = self.session_status == SessionStatus::Ended;
        match p.effect {
            EffectKind::Activate | EffectKind::RollbackActivate if ended => {}
            EffectKind::Activate => {
                let authorized = c.leases.iter().any(|l| {
                    Some(l.lease_id.as_str()) == action.lease_id.as_deref()
                        && l.exposure_id == exposure
                });
                if !authorized {
                    return serr("pending activation is not authorized by the exact current lease");
                }
            }
            EffectKind::RollbackActivate => {
                let id = c.capability_id();
                let expected_lease = format!("rollback:{id}");
                if !c.rollback_held
                    || !self
                        .rollback_requested_capability_ids
                        .iter()
                        .any(|r| r == id)
                    || action.lease_id.as_deref() != Some(expected_lease.as_str())
                {
                    return serr("pending rollback activation lacks exact held rollback authority");
                }
            }
            EffectKind::Prepare => {
                if action.lease_id != c.activation_lease_id
                    || (!c.leases.is_empty() && !c.leases.iter().any(|l| l.exposure_id == exposure))
                {
                    return serr(
                        "pending exposure preparation lacks a lease for the exact exposure",
                    );
                }
            }
            EffectKind::Deactivate => {
                if action.lease_id != c.activation_lease_id {
                    return serr("pending deactivation lease does not match activation_lease_id");
                }
            }
            EffectKind::Install | EffectKind::PromptContext => {}
        }
        Ok(())
    }

    /// A pending prompt-context bundle must belong to the ready plan and the host's intent, and
    /// its rows must be the current load materials of installed capabilities.
    fn check_prompt_context(&self, action: &HostAction) -> Result<(), StateError> {
        let intent = match self.host_level {
            HostLevel::PromptContextActivate => Some("activate"),
            HostLevel::PromptContextExperiment => Some("experiment"),
            _ => None,
        };
        let payload = &action.payload;
        let bundle_ok = self.committed_plan.as_ref().is_some_and(|plan| {
            plan.is_ready()
                && intent.is_some()
                && action.kind == ActionKind::PreparePromptContext
                && action.entity_id.is_none()
                && action.required_host_feature.as_deref() == Some("prompt-context")
                && action.plan_id.as_deref() == Some(plan.plan_id.as_str())
                && action.catalog_snapshot_id.as_deref() == Some(plan.catalog_snapshot_id.as_str())
                && payload.get_str("plan_digest") == Some(plan.decision_digest.as_str())
                && payload.get_str("execution_intent") == intent
                && action.precondition_revision <= self.revision.saturating_add(1)
                && action.scope.same_session(&self.scope)
        });
        if !bundle_ok {
            return serr("pending prompt context action has invalid bundle identity");
        }
        let rows = payload
            .get("capabilities")
            .and_then(Json::as_arr)
            .unwrap_or_default();
        if rows.is_empty() || rows.len() > ACTIVE_CAPABILITIES_MAX {
            return serr("pending prompt context action has invalid capability rows");
        }
        let mut seen = BTreeSet::new();
        for row in rows {
            if row.as_obj().is_none() {
                return serr("pending prompt context row must be an object");
            }
            let Some(id) = row.get_str("capability_id").filter(|id| seen.insert(*id)) else {
                return serr("pending prompt context has invalid capability identity");
            };
            let Some(c) = self
                .capability(id)
                .filter(|c| authority_type(&c.selection) == Some("load"))
            else {
                return serr("pending prompt context is not an exact committed load selection");
            };
            let expected = Json::object([
                ("authorized_material", c.current_authorized_material.clone()),
                ("capability_id", Json::str(c.capability_id())),
                ("capability_kind", Json::str(c.kind())),
                (
                    "catalog_identity",
                    c.selection
                        .get("catalog_identity")
                        .cloned()
                        .unwrap_or(Json::Null),
                ),
                ("material_identity", c.material_identity.clone()),
                ("source_digest", Json::str(c.source_digest())),
            ]);
            if row != &expected || c.installation != Installation::Installed {
                return serr(
                    "pending prompt context row does not match current material authority",
                );
            }
        }
        Ok(())
    }
}

/// A pending action must carry the capability's source digest, plan id and catalog snapshot.
fn check_action_identity(action: &HostAction, c: &CapabilityState) -> Result<(), StateError> {
    if action.source_digest.as_deref() != c.selection.get_str("catalog_entry_digest") {
        return serr("pending action source_digest does not match capability");
    }
    if action.plan_id.as_deref() != Some(c.plan_id.as_str()) {
        return serr("pending action plan_id does not match capability");
    }
    if action.catalog_snapshot_id.as_deref() != Some(c.catalog_snapshot_id.as_str()) {
        return serr("pending action catalog snapshot does not match capability");
    }
    Ok(())
}

/// A pending material action must carry exactly the v3 payload of the capability's current
/// authorized material.
fn check_material_action(action: &HostAction, c: &CapabilityState) -> Result<(), StateError> {
    let current = &c.current_authorized_material;
    if current.is_null() || c.installation != Installation::Installed {
        return serr("pending material action requires installed authorized material");
    }
    let payload = &action.payload;
    if payload.get_str("schema") != Some(MATERIAL_ACTION_PAYLOAD_SCHEMA_V3) {
        return serr("pending material action does not use schema-v3 payload");
    }
    if !same(payload.get("capability_kind"), c.selection.get("kind"))
        || !same(
            payload.get("catalog_identity"),
            c.selection.get("catalog_identity"),
        )
        || payload.get("material_identity") != Some(&c.material_identity)
        || payload.get("authorized_material") != Some(current)
    {
        return serr("pending action authorized material does not match runtime capability");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::digest::{cj_digest, sha256_hex};
    use crate::protocol::{PrivacyLabel, ScopeRef};
    use crate::state::{Exposure, Invocation, SessionStatus};
    use crate::vocab::{INSTALLER_DIGEST, INSTALLER_ID};

    const REVISION: u64 = 7;
    const PLAN_ID: &str = "plan-1";
    const ALPHA: &str = "skill:alpha";
    const BETA: &str = "skill:beta";
    const GAMMA: &str = "skill:gamma";

    fn h(label: &str) -> String {
        sha256_hex(label)
    }

    fn namespace() -> String {
        "0".repeat(64)
    }

    /// A JSON object with its `digest_key` set to the CJ digest of the other members, the way
    /// every typed identity of the reference carries its own digest.
    fn digested<'a>(mut members: Vec<(&'a str, Json)>, digest_key: &'a str) -> Json {
        let digest = cj_digest(&Json::object(members.clone()));
        members.push((digest_key, Json::str(digest)));
        Json::object(members)
    }

    fn scope() -> ScopeRef {
        ScopeRef::new("t", "w", "r", "s", "e", "h", None).unwrap()
    }

    fn name_of(id: &str) -> &str {
        id.split_once(':').map_or(id, |(_, n)| n)
    }

    fn catalog_identity(id: &str) -> Json {
        digested(
            vec![
                ("capability_id", Json::str(id)),
                ("catalog_namespace_digest", Json::str(namespace())),
                ("kind", Json::str("skill")),
                ("schema", Json::str("ctx.catalog-capability-identity-v1")),
            ],
            "identity_digest",
        )
    }

    fn material_identity(id: &str) -> Json {
        let content = format!("content of {id}");
        digested(
            vec![
                ("capability_id", Json::str(id)),
                ("content_bytes", Json::from(content.len() as i64)),
                ("content_sha256", Json::str(h(&content))),
                ("kind", Json::str("skill")),
                ("schema", Json::str("ctx.material-identity-v2")),
            ],
            "identity_digest",
        )
    }

    fn digest_of(doc: &Json, key: &str) -> Json {
        doc.get(key).cloned().unwrap()
    }

    /// A catalog-origin AuthorizedMaterial with its v2 material descriptor.
    fn catalog_material(id: &str) -> Json {
        let material = material_identity(id);
        let content = format!("content of {id}");
        let descriptor = digested(
            vec![
                ("actionability", Json::str("load")),
                ("capability_id", Json::str(id)),
                ("content_bytes", Json::from(content.len() as i64)),
                ("content_sha256", Json::str(h(&content))),
                ("estimated_tokens", Json::Int(4)),
                ("kind", Json::str("skill")),
                (
                    "material_identity_digest",
                    digest_of(&material, "identity_digest"),
                ),
                ("material_snapshot_digest", Json::str(h("materials"))),
                ("schema", Json::str("ctx.material-descriptor-v2")),
            ],
            "descriptor_digest",
        );
        Json::object([
            ("capability_id", Json::str(id)),
            (
                "catalog_identity_digest",
                digest_of(&catalog_identity(id), "identity_digest"),
            ),
            ("catalog_material_descriptor", descriptor),
            ("installed_material_lineage", Json::Null),
            ("kind", Json::str("skill")),
            (
                "material_identity_digest",
                digest_of(&material, "identity_digest"),
            ),
            ("origin", Json::str("catalog")),
            ("schema", Json::str("ctx.authorized-material-v1")),
        ])
    }

    fn install_descriptor(id: &str) -> Json {
        digested(
            vec![
                ("capability_id", Json::str(id)),
                ("credential_requirement", Json::Bool(false)),
                ("installer_id", Json::str(INSTALLER_ID)),
                ("kind", Json::str("skill")),
                ("permission_expansion", Json::Bool(false)),
                ("plan_digest", Json::str(h(&format!("install plan {id}")))),
                ("provenance_digest", Json::str(h("installations"))),
                (
                    "result_material_identity_digest",
                    digest_of(&material_identity(id), "identity_digest"),
                ),
                ("rollback_strategy", Json::str("atomic-restore")),
                ("schema", Json::str("ctx.install-plan-descriptor-v2")),
                ("target_scope", Json::str("user")),
            ],
            "descriptor_digest",
        )
    }

    /// An installed-origin AuthorizedMaterial whose lineage names `origin_descriptor_digest`.
    fn installed_material(id: &str, origin_descriptor_digest: &str) -> Json {
        let material = material_identity(id);
        let catalog_digest = digest_of(&catalog_identity(id), "identity_digest");
        let lineage = digested(
            vec![
                ("capability_id", Json::str(id)),
                ("catalog_identity_digest", catalog_digest.clone()),
                (
                    "install_action_content_digest",
                    Json::str(h("install action")),
                ),
                (
                    "install_receipt_content_digest",
                    Json::str(h("install receipt")),
                ),
                ("kind", Json::str("skill")),
                (
                    "material_identity_digest",
                    digest_of(&material, "identity_digest"),
                ),
                (
                    "origin_install_descriptor_digest",
                    Json::str(origin_descriptor_digest),
                ),
                ("schema", Json::str("ctx.installed-material-lineage-v1")),
            ],
            "lineage_digest",
        );
        Json::object([
            ("capability_id", Json::str(id)),
            ("catalog_identity_digest", catalog_digest),
            ("catalog_material_descriptor", Json::Null),
            ("installed_material_lineage", lineage),
            ("kind", Json::str("skill")),
            (
                "material_identity_digest",
                digest_of(&material, "identity_digest"),
            ),
            ("origin", Json::str("installed")),
            ("schema", Json::str("ctx.authorized-material-v1")),
        ])
    }

    /// A schema-v3 plan row (13 keys) for `actionability` load, install or manual.
    fn row(id: &str, actionability: &str) -> Json {
        let (authority, tier, descriptor_digest, plan_digest) = match actionability {
            "load" => (
                Json::object([
                    ("material", catalog_material(id)),
                    ("type", Json::str("load")),
                ]),
                "executable",
                Json::Null,
                Json::Null,
            ),
            "install" => {
                let descriptor = install_descriptor(id);
                let digests = (
                    digest_of(&descriptor, "descriptor_digest"),
                    digest_of(&descriptor, "plan_digest"),
                );
                (
                    Json::object([
                        ("descriptor", descriptor),
                        ("result_material", material_identity(id)),
                        ("type", Json::str("install")),
                    ]),
                    "executable",
                    digests.0,
                    digests.1,
                )
            }
            _ => (
                Json::object([("type", Json::str("manual"))]),
                "advisory",
                Json::Null,
                Json::Null,
            ),
        };
        Json::object([
            ("actionability", Json::str(actionability)),
            ("authority", authority),
            (
                "benefit",
                Json::object([
                    ("individual_net_benefit_u", Json::Int(40)),
                    ("marginal_net_benefit_u", Json::Int(30)),
                    ("tier", Json::str(tier)),
                ]),
            ),
            ("capability_id", Json::str(id)),
            ("catalog_entry_digest", Json::str(h(&format!("entry {id}")))),
            ("catalog_identity", catalog_identity(id)),
            ("install_descriptor_digest", descriptor_digest),
            ("install_plan_digest", plan_digest),
            ("kind", Json::str("skill")),
            ("matching_signals", Json::Arr(vec![Json::str("rust")])),
            ("name", Json::str(name_of(id))),
            ("normalized_score_ppm", Json::Int(900_000)),
            ("reason_codes", Json::Arr(vec![Json::str("signal-match")])),
        ])
    }

    fn audit() -> Json {
        Json::object([
            ("calibration_digest", Json::str(h("calibration"))),
            ("candidate_pool_count", Json::Int(3)),
            ("policy_digest", Json::str(h("benefit policy"))),
            ("policy_schema_id", Json::str("ctx.net-benefit-policy-v1")),
            ("requested_limit", Json::Int(5)),
            ("result_digest", Json::str(h("benefit result"))),
            ("result_schema_id", Json::str("ctx.net-benefit-result-v1")),
            ("search_evaluation_count", Json::Int(12)),
            ("selection_algorithm_id", Json::str("ctx.exact-subset-v1")),
        ])
    }

    fn lease(lease_id: &str, exposure_id: &str) -> Lease {
        Lease {
            exposure_id: exposure_id.into(),
            lease_id: lease_id.into(),
            owner_id: "owner-1".into(),
        }
    }

    /// Runtime state for a load row: installed with its catalog material, inactive.
    fn load_capability(id: &str, plan_id: &str) -> CapabilityState {
        let selection = row(id, "load");
        CapabilityState {
            activation: Activation::Inactive,
            activation_lease_id: None,
            catalog_snapshot_id: h("catalog"),
            current_authorized_material: catalog_material(id),
            installation: Installation::Installed,
            leases: Vec::new(),
            material_identity: material_identity(id),
            plan_id: plan_id.into(),
            rollback_held: false,
            rollback_owner_id: None,
            selection,
        }
    }

    /// Runtime state for an install row: absent, inactive.
    fn install_capability(id: &str, plan_id: &str) -> CapabilityState {
        CapabilityState {
            current_authorized_material: Json::Null,
            installation: Installation::Absent,
            selection: row(id, "install"),
            ..load_capability(id, plan_id)
        }
    }

    fn activate(c: &mut CapabilityState, lease_id: &str) {
        c.activation = Activation::Active;
        c.activation_lease_id = Some(lease_id.into());
    }

    fn action(kind: ActionKind, id: &str, capability: &CapabilityState) -> HostAction {
        HostAction {
            action_id: id.into(),
            kind,
            scope: scope(),
            precondition_revision: REVISION,
            payload: Json::object([] as [(&str, Json); 0]),
            privacy: PrivacyLabel::default(),
            entity_id: Some(capability.capability_id().into()),
            source_digest: Some(capability.source_digest().into()),
            plan_id: Some(capability.plan_id.clone()),
            catalog_snapshot_id: Some(capability.catalog_snapshot_id.clone()),
            consent_id: None,
            lease_id: None,
            required_host_feature: Some("activation".into()),
            expires_at: Some("2026-01-01T01:00:00Z".into()),
            verification: Json::object([("receipt_required", Json::Bool(true))]),
            rollback: Json::object([("kind", Json::str("DeactivateCapability"))]),
        }
    }

    /// A v3 material action for `capability` carrying its current material.
    fn material_action(kind: ActionKind, id: &str, c: &CapabilityState) -> HostAction {
        HostAction {
            payload: Json::object([
                ("authorized_material", c.current_authorized_material.clone()),
                ("capability_kind", Json::str("skill")),
                (
                    "catalog_identity",
                    c.selection.get("catalog_identity").cloned().unwrap(),
                ),
                ("material_identity", c.material_identity.clone()),
                ("schema", Json::str(MATERIAL_ACTION_PAYLOAD_SCHEMA_V3)),
            ]),
            lease_id: c.activation_lease_id.clone(),
            ..action(kind, id, c)
        }
    }

    fn install_action(c: &CapabilityState, consent_id: &str) -> HostAction {
        let authority = c.selection.get("authority").unwrap();
        HostAction {
            precondition_revision: REVISION + 1,
            consent_id: Some(consent_id.into()),
            required_host_feature: Some("installation".into()),
            payload: Json::object([
                ("capability_kind", Json::str("skill")),
                (
                    "catalog_identity",
                    c.selection.get("catalog_identity").cloned().unwrap(),
                ),
                (
                    "install_plan_descriptor",
                    authority.get("descriptor").cloned().unwrap(),
                ),
                ("installer_digest", Json::str(INSTALLER_DIGEST)),
                ("policy_snapshot_digest", Json::str(h("policy"))),
                ("result_material", c.material_identity.clone()),
                ("schema", Json::str(INSTALL_ACTION_PAYLOAD_SCHEMA_V3)),
            ]),
            ..action(ActionKind::InstallCapability, "action-install", c)
        }
    }

    fn plan(rows: Vec<Json>) -> CommittedPlan {
        CommittedPlan {
            abstention_code: None,
            benefit_audit: audit(),
            capabilities: rows,
            catalog_snapshot_id: h("catalog"),
            decision_digest: h("decision"),
            plan_id: PLAN_ID.into(),
            status: "ready".into(),
        }
    }

    /// A ready plan with one load row (active, leased, with a pending exposure preparation) and
    /// one install row (absent, leased, awaiting consent).
    fn valid_state() -> EngineState {
        let mut alpha = load_capability(ALPHA, PLAN_ID);
        alpha.leases = vec![lease("lease-a", "e")];
        activate(&mut alpha, "lease-a");
        let mut beta = install_capability(BETA, PLAN_ID);
        beta.leases = vec![lease("lease-b", "e")];
        let prepare = PendingEffect {
            action: material_action(ActionKind::PrepareExposure, "action-prepare", &alpha),
            effect: EffectKind::Prepare,
            rollback_capability_id: None,
        };
        let consent = PendingConsent {
            consent_id: "consent-1".into(),
            install_action: install_action(&beta, "consent-1"),
        };
        let evidence = Evidence {
            capability_id: ALPHA.into(),
            exposure: Exposure::Submitted,
            exposure_id: "e0".into(),
            invocation: Invocation::InvokedSucceeded,
            source_digest: alpha.source_digest().into(),
        };
        let mut state = EngineState::started(scope(), HostLevel::Managing, h("host descriptor"));
        state.revision = REVISION;
        state.committed_plan = Some(plan(vec![row(ALPHA, "load"), row(BETA, "install")]));
        state.capabilities = vec![alpha, beta];
        state.pending_effects = vec![prepare];
        state.pending_consents = vec![consent];
        state.evidence = vec![evidence];
        state.install_policy_snapshot_digest = Some(h("policy"));
        state
    }

    fn cap<'a>(s: &'a mut EngineState, id: &str) -> &'a mut CapabilityState {
        s.capability_mut(id).unwrap()
    }

    fn prepare_action(s: &mut EngineState) -> &mut HostAction {
        &mut s.pending_effects[0].action
    }

    fn consent_action(s: &mut EngineState) -> &mut HostAction {
        &mut s.pending_consents[0].install_action
    }

    /// Adds an unselected capability `gamma` (not in the plan, older plan id, no leases).
    fn add_gamma(s: &mut EngineState, c: CapabilityState) {
        s.capabilities.push(c);
        s.sort_canonical();
    }

    #[test]
    fn valid_state_passes_and_round_trips_through_canonical_text() {
        let s = valid_state();
        s.validate().unwrap();
        s.validate_persisted().unwrap();
        let text = s.to_canonical_text();
        let back = EngineState::from_canonical_text(&text).unwrap();
        assert_eq!(back, s);
        assert_eq!(EngineState::from_json(&s.to_json()).unwrap(), s);
        assert_eq!(back.digest(), s.digest());
    }

    #[test]
    fn started_state_is_valid() {
        let s = EngineState::started(scope(), HostLevel::QueryOnly, h("host descriptor"));
        s.validate_persisted().unwrap();
        assert_eq!(
            EngineState::from_canonical_text(&s.to_canonical_text()).unwrap(),
            s
        );
    }

    fn decode_err(text: &str) -> String {
        EngineState::from_canonical_text(text)
            .unwrap_err()
            .message()
            .to_owned()
    }

    fn with_key(key: &str, value: Option<Json>) -> String {
        let mut v = valid_state().to_json();
        let Json::Obj(m) = &mut v else { unreachable!() };
        match value {
            Some(value) => m.insert(key.into(), value),
            None => m.remove(key),
        };
        v.to_cj()
    }

    #[test]
    fn non_canonical_text_is_refused() {
        let text = valid_state().to_canonical_text();
        assert_eq!(
            decode_err(&format!(" {text}")),
            "state JSON must use canonical encoding"
        );
        let spaced = text.replacen(
            "\"blocked_capability_ids\":[]",
            "\"blocked_capability_ids\": []",
            1,
        );
        assert_eq!(
            decode_err(&spaced),
            "state JSON must use canonical encoding"
        );
        let escaped = text.replacen("\"t\"", "\"\\u0074\"", 1);
        assert_eq!(
            decode_err(&escaped),
            "state JSON must use canonical encoding"
        );
    }

    #[test]
    fn malformed_text_is_refused() {
        assert_eq!(decode_err("{"), "state must be valid JSON");
        assert_eq!(decode_err("[]"), "state JSON root must be an object");
        assert_eq!(
            decode_err("{\"revision\":1,\"revision\":2}"),
            "duplicate JSON key 'revision'"
        );
    }

    #[test]
    fn unknown_key_is_refused() {
        assert_eq!(
            decode_err(&with_key("zeta", Some(Json::Null))),
            "engine state has unknown field(s): zeta"
        );
    }

    #[test]
    fn incomplete_key_set_is_refused() {
        assert_eq!(
            decode_err(&with_key("pending_consents", None)),
            "engine state does not match a complete supported schema"
        );
    }

    #[test]
    fn contract_one_key_set_is_refused_as_unsupported() {
        let mut v = EngineState::started(scope(), HostLevel::Managing, h("d")).to_json();
        let Json::Obj(m) = &mut v else { unreachable!() };
        for key in [
            "state_schema",
            "committed_plan",
            "pending_consents",
            "blocked_install_descriptor_digests",
            "install_policy_snapshot_digest",
        ] {
            m.remove(key);
        }
        assert_eq!(
            decode_err(&v.to_cj()),
            "engine state does not match a complete supported schema"
        );
    }

    #[test]
    fn wrong_discriminator_is_refused() {
        assert_eq!(
            decode_err(&with_key(
                "state_schema",
                Some(Json::str("ctx.engine-state-v2"))
            )),
            "schema-v3 engine state discriminator is unsupported"
        );
    }

    #[test]
    fn nested_decoding_faults_use_reference_messages() {
        let mut v = valid_state().to_json();
        let Json::Obj(m) = &mut v else { unreachable!() };
        let Some(Json::Arr(caps)) = m.get_mut("capabilities") else {
            unreachable!()
        };
        let Json::Obj(alpha) = &mut caps[0] else {
            unreachable!()
        };
        alpha.insert("activation".into(), Json::str("paused"));
        assert_eq!(decode_err(&v.to_cj()), "unknown activation state 'paused'");

        let Json::Obj(m) = &mut v else { unreachable!() };
        let Some(Json::Arr(caps)) = m.get_mut("capabilities") else {
            unreachable!()
        };
        let Json::Obj(alpha) = &mut caps[0] else {
            unreachable!()
        };
        alpha.insert("extra".into(), Json::Null);
        assert_eq!(
            decode_err(&v.to_cj()),
            "schema-v3 capability state has unknown field(s): extra"
        );

        let mut v = valid_state().to_json();
        let Json::Obj(m) = &mut v else { unreachable!() };
        let Some(Json::Arr(effects)) = m.get_mut("pending_effects") else {
            unreachable!()
        };
        let Json::Obj(effect) = &mut effects[0] else {
            unreachable!()
        };
        let Some(Json::Obj(action)) = effect.get_mut("action") else {
            unreachable!()
        };
        let Some(Json::Obj(privacy)) = action.get_mut("privacy") else {
            unreachable!()
        };
        privacy.remove("retention");
        assert_eq!(
            decode_err(&v.to_cj()),
            "pending action privacy is missing field(s): retention"
        );

        let mut v = valid_state().to_json();
        let Json::Obj(m) = &mut v else { unreachable!() };
        let Some(Json::Arr(consents)) = m.get_mut("pending_consents") else {
            unreachable!()
        };
        let Json::Obj(consent) = &mut consents[0] else {
            unreachable!()
        };
        let Some(Json::Obj(action)) = consent.get_mut("install_action") else {
            unreachable!()
        };
        action.insert("protocol_version".into(), Json::Int(2));
        assert_eq!(
            decode_err(&v.to_cj()),
            "pending consent contains an invalid action"
        );

        assert_eq!(
            decode_err(&with_key("revision", Some(Json::Int(0)))),
            "revision must be an integer >= 1"
        );
        assert_eq!(
            decode_err(&with_key("evidence", Some(Json::Null))),
            "evidence must be a JSON array"
        );
    }

    /// A construction-invariant violation: `validate` refuses it with `$msg`, and so does decoding
    /// its JSON (which runs the same checks).
    macro_rules! violation {
        ($name:ident, $msg:expr, |$s:ident| $body:block) => {
            violation!($name, $msg, valid_state(), |$s| $body);
        };
        ($name:ident, $msg:expr, $base:expr, |$s:ident| $body:block) => {
            #[test]
            fn $name() {
                let mut $s = $base;
                $body
                assert_eq!($s.validate().unwrap_err().message(), $msg);
                assert_eq!(EngineState::from_json(&$s.to_json()).unwrap_err().message(), $msg);
            }
        };
    }

    /// A persisted-only violation: `validate` accepts, `validate_persisted` and decoding refuse.
    macro_rules! persisted_violation {
        ($name:ident, $msg:expr, |$s:ident| $body:block) => {
            #[test]
            fn $name() {
                let mut $s = valid_state();
                $body
                $s.validate().unwrap();
                assert_eq!($s.validate_persisted().unwrap_err().message(), $msg);
                assert_eq!(EngineState::from_json(&$s.to_json()).unwrap_err().message(), $msg);
            }
        };
    }

    // --- top-level values -------------------------------------------------------------------

    violation!(revision_zero, "revision must be an integer >= 1", |s| {
        s.revision = 0;
    });
    violation!(
        host_descriptor_not_sha,
        "host_descriptor_digest must be a lowercase SHA-256 digest",
        |s| {
            s.host_descriptor_digest = "ABC".into();
        }
    );
    violation!(
        policy_not_sha,
        "install_policy_snapshot_digest must be a lowercase SHA-256 digest",
        |s| {
            s.install_policy_snapshot_digest = Some("x".into());
        }
    );
    violation!(
        scope_untrimmed,
        "engine state contains an invalid scope",
        |s| {
            s.scope.session_id = " s".into();
        }
    );

    // --- item 1: at most five active --------------------------------------------------------

    violation!(
        six_active_capabilities,
        "projection cannot contain more than five active capabilities",
        |s| {
            s.pending_effects.clear();
            s.pending_consents.clear();
            s.evidence.clear();
            s.capabilities = (0..6)
                .map(|i| {
                    let mut c = load_capability(&format!("skill:c{i}"), PLAN_ID);
                    c.leases = vec![lease(&format!("lease-{i}"), "e")];
                    activate(&mut c, &format!("lease-{i}"));
                    c
                })
                .collect();
        }
    );

    // --- item 2: pending uniqueness ---------------------------------------------------------

    violation!(
        duplicate_pending_action_id,
        "duplicate pending action ID in projection",
        |s| {
            let again = s.pending_effects[0].clone();
            s.pending_effects.push(again);
        }
    );
    violation!(
        duplicate_consent_id,
        "duplicate pending consent ID in projection",
        |s| {
            let again = s.pending_consents[0].clone();
            s.pending_consents.push(again);
        }
    );
    violation!(
        duplicate_consent_action_id,
        "duplicate pending consent action ID in projection",
        |s| {
            let mut again = s.pending_consents[0].clone();
            again.consent_id = "consent-2".into();
            again.install_action.consent_id = Some("consent-2".into());
            s.pending_consents.push(again);
        }
    );
    violation!(
        action_awaits_consent_and_receipt,
        "install action cannot await consent and receipt simultaneously",
        |s| {
            prepare_action(&mut s).action_id = "action-install".into();
        }
    );
    violation!(
        two_effects_for_one_capability,
        "capability cannot have multiple pending lifecycle operations",
        |s| {
            let mut again = s.pending_effects[0].clone();
            again.action.action_id = "action-prepare-2".into();
            s.pending_effects.push(again);
        }
    );
    violation!(
        two_consents_for_one_capability,
        "capability cannot have multiple pending install consents",
        |s| {
            let mut again = s.pending_consents[0].clone();
            again.consent_id = "consent-2".into();
            again.install_action.consent_id = Some("consent-2".into());
            again.install_action.action_id = "action-install-2".into();
            s.pending_consents.push(again);
        }
    );
    violation!(
        consent_and_effect_for_one_capability,
        "install cannot await consent and a pending effect for the same capability",
        |s| {
            let mut install = s.pending_consents[0].install_action.clone();
            install.action_id = "action-install-2".into();
            s.pending_effects.push(PendingEffect {
                action: install,
                effect: EffectKind::Install,
                rollback_capability_id: None,
            });
        }
    );

    // --- nested value rules -----------------------------------------------------------------

    violation!(
        effect_kind_mismatch,
        "pending effect 'deactivate' cannot use action 'PrepareExposure'",
        |s| {
            s.pending_effects[0].effect = EffectKind::Deactivate;
        }
    );
    violation!(
        rollback_partner_on_prepare,
        "rollback_capability_id is valid only for activate effects",
        |s| {
            s.pending_effects[0].rollback_capability_id = Some(BETA.into());
        }
    );
    violation!(
        consent_binds_other_kind,
        "pending consent must bind InstallCapability",
        |s| {
            consent_action(&mut s).kind = ActionKind::ActivateCapability;
        }
    );
    violation!(
        consent_id_mismatch,
        "pending consent ID does not match install action",
        |s| {
            consent_action(&mut s).consent_id = Some("consent-9".into());
        }
    );
    violation!(
        lease_owner_empty,
        "owner_id must be a non-empty trimmed string",
        |s| {
            cap(&mut s, ALPHA).leases[0].owner_id = String::new();
        }
    );
    violation!(
        active_without_lease_id,
        "active capability requires activation_lease_id",
        |s| {
            cap(&mut s, ALPHA).activation_lease_id = None;
        }
    );
    violation!(
        inactive_with_lease_id,
        "inactive capability cannot have activation_lease_id",
        |s| {
            cap(&mut s, BETA).activation_lease_id = Some("lease-b".into());
        }
    );
    violation!(active_absent, "active capability must be installed", |s| {
        activate(cap(&mut s, BETA), "lease-b");
    });
    violation!(
        rollback_held_without_owner,
        "rollback_held and rollback_owner_id must be set together",
        |s| {
            cap(&mut s, BETA).rollback_held = true;
        }
    );
    violation!(
        rollback_owner_without_hold,
        "rollback_held and rollback_owner_id must be set together",
        |s| {
            cap(&mut s, BETA).rollback_owner_id = Some("owner-1".into());
        }
    );
    violation!(
        material_identity_names_other_capability,
        "material_identity does not match schema-v3 selection",
        |s| {
            cap(&mut s, ALPHA).material_identity = material_identity(GAMMA);
        }
    );
    #[test]
    fn material_identity_not_object() {
        let mut s = valid_state();
        cap(&mut s, ALPHA).material_identity = Json::Null;
        assert_eq!(
            s.validate().unwrap_err().message(),
            "schema-v3 capability requires exact material_identity"
        );
        // Decoding refuses the container type before any value rule runs.
        assert_eq!(
            EngineState::from_json(&s.to_json()).unwrap_err().message(),
            "schema-v3 material_identity or authorized lineage is invalid: \
             material identity must be a JSON object"
        );
    }
    violation!(
        manual_selection_has_runtime,
        "manual schema-v3 selections cannot create lifecycle state",
        |s| {
            let c = cap(&mut s, BETA);
            c.selection = row(BETA, "manual");
        }
    );
    violation!(
        load_capability_absent,
        "load selection must have installed lifecycle material",
        |s| {
            s.pending_effects.clear();
            let c = cap(&mut s, ALPHA);
            c.activation = Activation::Inactive;
            c.activation_lease_id = None;
            c.installation = Installation::Absent;
        }
    );
    violation!(
        load_material_differs,
        "current_authorized_material does not match load authority",
        |s| {
            cap(&mut s, ALPHA).current_authorized_material = catalog_material(GAMMA);
        }
    );
    violation!(
        install_result_material_differs,
        "material_identity does not match install result authority",
        |s| {
            let Json::Obj(m) = &mut cap(&mut s, BETA).material_identity else {
                unreachable!()
            };
            m.insert("content_bytes".into(), Json::Int(1));
        }
    );
    violation!(
        absent_install_with_material,
        "absent install selection cannot have authorized material",
        |s| {
            cap(&mut s, BETA).current_authorized_material = installed_material(BETA, &h("x"));
        }
    );
    violation!(
        installed_install_with_catalog_material,
        "promoted install requires installed current_authorized_material",
        |s| {
            let c = cap(&mut s, BETA);
            c.installation = Installation::Installed;
            c.current_authorized_material = catalog_material(BETA);
        }
    );
    violation!(
        installed_install_lineage_differs,
        "install promotion lineage does not match selected descriptor",
        |s| {
            let c = cap(&mut s, BETA);
            c.installation = Installation::Installed;
            c.current_authorized_material = installed_material(BETA, &h("other descriptor"));
        }
    );
    violation!(
        current_material_identity_differs,
        "current_authorized_material identity does not match selection",
        |s| {
            s.pending_consents.clear();
            let descriptor = install_descriptor(BETA)
                .get_str("descriptor_digest")
                .unwrap()
                .to_owned();
            let c = cap(&mut s, BETA);
            c.installation = Installation::Installed;
            let mut material = installed_material(BETA, &descriptor);
            let Json::Obj(m) = &mut material else {
                unreachable!()
            };
            m.insert(
                "catalog_identity_digest".into(),
                Json::str(h("other catalog")),
            );
            c.current_authorized_material = material;
        }
    );
    violation!(
        selection_row_unknown_key,
        "schema-v3 plan capability has unknown field(s): extra",
        |s| {
            let Json::Obj(m) = &mut cap(&mut s, ALPHA).selection else {
                unreachable!()
            };
            m.insert("extra".into(), Json::Null);
        }
    );
    violation!(
        selection_authority_unsupported,
        "schema-v3 planning authority type is unsupported",
        |s| {
            let Json::Obj(m) = &mut cap(&mut s, ALPHA).selection else {
                unreachable!()
            };
            m.insert(
                "authority".into(),
                Json::object([("type", Json::str("fetch"))]),
            );
        }
    );

    // --- ordering and uniqueness -------------------------------------------------------------

    violation!(
        duplicate_capability,
        "duplicate capability ID in projection",
        |s| {
            let again = s.capabilities[0].clone();
            s.capabilities.insert(1, again);
        }
    );
    violation!(
        capabilities_unsorted,
        "capabilities must be sorted by capability_id",
        |s| {
            s.capabilities.swap(0, 1);
        }
    );
    violation!(
        lease_id_shared_across_capabilities,
        "duplicate lease ID across capabilities",
        |s| {
            cap(&mut s, BETA).leases[0].lease_id = "lease-a".into();
        }
    );
    violation!(
        leases_unsorted,
        "schema-v3 capability leases must be sorted by lease_id",
        |s| {
            cap(&mut s, BETA).leases.push(lease("lease-0", "e"));
        }
    );
    violation!(
        lease_duplicated_in_capability,
        "schema-v3 capability has duplicate lease IDs",
        |s| {
            cap(&mut s, BETA).leases.push(lease("lease-b", "e2"));
        }
    );
    violation!(
        evidence_unsorted,
        "evidence must be sorted by exposure and capability",
        |s| {
            let mut more = s.evidence[0].clone();
            more.exposure_id = "d".into();
            s.evidence.push(more);
        }
    );
    violation!(
        evidence_duplicated,
        "duplicate evidence identity in projection",
        |s| {
            let mut again = s.evidence[0].clone();
            again.exposure = Exposure::Prepared;
            s.evidence.push(again);
        }
    );
    violation!(
        evidence_unknown_capability,
        "evidence references unknown capability",
        |s| {
            s.evidence[0].capability_id = GAMMA.into();
        }
    );
    violation!(
        evidence_source_digest_differs,
        "evidence source_digest does not match capability",
        |s| {
            s.evidence[0].source_digest = h("other");
        }
    );
    violation!(
        id_list_unsorted,
        "blocked_capability_ids must be sorted",
        |s| {
            s.blocked_capability_ids = vec![BETA.into(), ALPHA.into()];
        }
    );
    violation!(
        id_list_duplicated,
        "blocked_capability_ids contains duplicate IDs",
        |s| {
            s.blocked_capability_ids = vec![ALPHA.into(), ALPHA.into()];
        }
    );
    violation!(
        id_list_untrimmed,
        "rollback_requested_capability_ids[0] must be a non-empty trimmed string",
        |s| {
            s.rollback_requested_capability_ids = vec![" skill:alpha".into()];
        }
    );
    violation!(
        digest_list_not_sha,
        "blocked_install_descriptor_digests[0] must be a lowercase SHA-256 digest",
        |s| {
            s.blocked_install_descriptor_digests = vec!["descriptor".into()];
        }
    );
    violation!(
        id_list_unknown_capability,
        "blocked_deactivation_ids references unknown capability",
        |s| {
            s.blocked_deactivation_ids = vec![GAMMA.into()];
        }
    );
    violation!(
        notified_not_blocked,
        "terminal cleanup notification must reference blocked deactivation",
        |s| {
            s.terminal_cleanup_notified_ids = vec![ALPHA.into()];
        }
    );

    // --- item 4: plan cross-references -------------------------------------------------------

    violation!(
        capabilities_without_plan,
        "schema-v3 runtime references require a committed plan",
        |s| {
            s.committed_plan = None;
        }
    );
    violation!(
        selection_is_not_the_plan_row,
        "schema-v3 runtime capability is not the exact committed plan row",
        |s| {
            let Json::Obj(m) = &mut cap(&mut s, ALPHA).selection else {
                unreachable!()
            };
            m.insert("normalized_score_ppm".into(), Json::Int(1));
        }
    );
    violation!(
        plan_identity_differs,
        "schema-v3 capability plan identity does not match committed plan",
        |s| {
            cap(&mut s, BETA).catalog_snapshot_id = h("other catalog");
        }
    );
    violation!(
        omitted_runtime_with_current_plan_id,
        "omitted runtime cannot mint current-plan authority",
        |s| {
            add_gamma(&mut s, load_capability(GAMMA, PLAN_ID));
        }
    );
    violation!(
        omitted_runtime_with_leases,
        "unselected runtime capability cannot retain current leases",
        |s| {
            let mut gamma = load_capability(GAMMA, "plan-0");
            gamma.leases = vec![lease("lease-g", "e")];
            add_gamma(&mut s, gamma);
        }
    );
    violation!(
        manual_bundle_not_plan_manual_rows,
        "last_manual_bundle does not exactly match committed manual rows",
        |s| {
            s.last_manual_bundle = vec![GAMMA.into()];
        }
    );
    violation!(
        manual_row_missing_from_bundle,
        "last_manual_bundle does not exactly match committed manual rows",
        |s| {
            s.committed_plan
                .as_mut()
                .unwrap()
                .capabilities
                .push(row("skill:manual", "manual"));
        }
    );
    violation!(
        blocked_descriptor_without_authority,
        "blocked install descriptor lacks retained or current authority",
        |s| {
            s.blocked_install_descriptor_digests = vec![h("unknown descriptor")];
        }
    );

    #[test]
    fn manual_rows_and_blocked_descriptors_of_the_plan_are_accepted() {
        let mut s = valid_state();
        s.committed_plan
            .as_mut()
            .unwrap()
            .capabilities
            .push(row("skill:manual", "manual"));
        s.last_manual_bundle = vec!["skill:manual".into()];
        let descriptor = install_descriptor(BETA)
            .get_str("descriptor_digest")
            .unwrap()
            .to_owned();
        s.blocked_install_descriptor_digests = vec![descriptor];
        s.validate_persisted().unwrap();
        assert_eq!(
            EngineState::from_canonical_text(&s.to_canonical_text()).unwrap(),
            s
        );
    }

    #[test]
    fn installed_install_capability_with_exact_lineage_is_valid() {
        let mut s = valid_state();
        s.pending_consents.clear();
        let descriptor = install_descriptor(BETA)
            .get_str("descriptor_digest")
            .unwrap()
            .to_owned();
        let c = cap(&mut s, BETA);
        c.installation = Installation::Installed;
        c.current_authorized_material = installed_material(BETA, &descriptor);
        s.validate_persisted().unwrap();
    }

    // --- plan values -------------------------------------------------------------------------

    violation!(
        plan_rows_out_of_order,
        "schema-v3 committed plan capabilities are not in canonical order",
        |s| {
            s.committed_plan.as_mut().unwrap().capabilities.reverse();
        }
    );
    violation!(
        plan_rows_duplicated,
        "schema-v3 committed plan contains duplicate capability IDs",
        |s| {
            s.committed_plan
                .as_mut()
                .unwrap()
                .capabilities
                .push(row(BETA, "install"));
        }
    );
    violation!(
        plan_too_many_rows,
        "schema-v3 committed plan cannot contain more than five capabilities",
        |s| {
            let plan = s.committed_plan.as_mut().unwrap();
            for i in 0..4 {
                plan.capabilities
                    .push(row(&format!("skill:m{i}"), "manual"));
            }
        }
    );
    violation!(
        ready_plan_without_audit,
        "ready schema-v3 plan requires the exact benefit audit",
        |s| {
            s.committed_plan.as_mut().unwrap().benefit_audit = Json::Null;
        }
    );
    violation!(
        plan_status_unknown,
        "schema-v3 committed plan status is unsupported",
        |s| {
            s.committed_plan.as_mut().unwrap().status = "pending".into();
        }
    );
    violation!(
        abstained_plan_with_rows,
        "abstained schema-v3 plan requires no rows and a declared code",
        |s| {
            let plan = s.committed_plan.as_mut().unwrap();
            plan.status = "abstained".into();
            plan.abstention_code = Some("limit-zero".into());
        }
    );

    // --- item 4: pending effects and consents -----------------------------------------------

    violation!(
        pending_unknown_capability,
        "pending action references unknown capability",
        |s| {
            prepare_action(&mut s).entity_id = Some(GAMMA.into());
        }
    );
    violation!(
        pending_source_digest_differs,
        "pending action source_digest does not match capability",
        |s| {
            prepare_action(&mut s).source_digest = Some(h("other"));
        }
    );
    violation!(
        pending_plan_id_differs,
        "pending action plan_id does not match capability",
        |s| {
            prepare_action(&mut s).plan_id = Some("plan-0".into());
        }
    );
    violation!(
        pending_catalog_differs,
        "pending action catalog snapshot does not match capability",
        |s| {
            prepare_action(&mut s).catalog_snapshot_id = Some(h("other"));
        }
    );
    violation!(
        pending_beyond_next_revision,
        "pending action precondition_revision exceeds next state revision",
        |s| {
            prepare_action(&mut s).precondition_revision = REVISION + 2;
        }
    );
    violation!(
        pending_other_session,
        "pending action scope belongs to another session",
        |s| {
            prepare_action(&mut s).scope.session_id = "s2".into();
        }
    );
    violation!(
        pending_material_payload_schema,
        "pending material action does not use schema-v3 payload",
        |s| {
            prepare_action(&mut s).payload = Json::object([] as [(&str, Json); 0]);
        }
    );
    violation!(
        pending_material_payload_differs,
        "pending action authorized material does not match runtime capability",
        |s| {
            let Json::Obj(m) = &mut prepare_action(&mut s).payload else {
                unreachable!()
            };
            m.insert("authorized_material".into(), catalog_material(GAMMA));
        }
    );
    violation!(
        prepare_targets_inactive,
        "pending prepare targets an inactive capability",
        |s| {
            let c = cap(&mut s, ALPHA);
            c.activation = Activation::Inactive;
            c.activation_lease_id = None;
            prepare_action(&mut s).lease_id = None;
        }
    );
    violation!(
        prepare_lease_differs,
        "pending exposure preparation lacks a lease for the exact exposure",
        |s| {
            prepare_action(&mut s).lease_id = Some("lease-x".into());
        }
    );
    violation!(
        prepare_exposure_without_lease,
        "pending exposure preparation lacks a lease for the exact exposure",
        |s| {
            prepare_action(&mut s).scope.exposure_id = "e9".into();
        }
    );
    violation!(
        deactivate_lease_differs,
        "pending deactivation lease does not match activation_lease_id",
        |s| {
            s.pending_effects[0].effect = EffectKind::Deactivate;
            let a = prepare_action(&mut s);
            a.kind = ActionKind::DeactivateCapability;
            a.lease_id = Some("release:skill:alpha".into());
        }
    );
    violation!(
        activation_targets_active,
        "pending activation targets an already active capability",
        |s| {
            s.pending_effects[0].effect = EffectKind::Activate;
            prepare_action(&mut s).kind = ActionKind::ActivateCapability;
        }
    );

    /// `valid_state` with alpha inactive and a pending activation under `lease_id`.
    fn activation_state(lease_id: &str) -> EngineState {
        let mut s = valid_state();
        let c = cap(&mut s, ALPHA);
        c.activation = Activation::Inactive;
        c.activation_lease_id = None;
        s.pending_effects[0].effect = EffectKind::Activate;
        let a = prepare_action(&mut s);
        a.kind = ActionKind::ActivateCapability;
        a.lease_id = Some(lease_id.into());
        s
    }

    #[test]
    fn activation_under_the_exact_lease_is_valid() {
        activation_state("lease-a").validate_persisted().unwrap();
    }

    violation!(
        activation_without_lease,
        "pending activation is not authorized by the exact current lease",
        activation_state("lease-x"),
        |s| {
            s.host_level = HostLevel::Managing;
        }
    );
    violation!(
        activation_rollback_partner_not_held,
        "pending activation has invalid rollback capability",
        activation_state("lease-a"),
        |s| {
            s.pending_effects[0].rollback_capability_id = Some(BETA.into());
        }
    );
    violation!(
        rollback_activation_without_hold,
        "pending rollback activation lacks exact held rollback authority",
        activation_state("rollback:skill:alpha"),
        |s| {
            s.pending_effects[0].effect = EffectKind::RollbackActivate;
        }
    );

    #[test]
    fn rollback_activation_with_held_authority_is_valid() {
        let mut s = activation_state("rollback:skill:alpha");
        s.pending_effects[0].effect = EffectKind::RollbackActivate;
        let c = cap(&mut s, ALPHA);
        c.rollback_held = true;
        c.rollback_owner_id = Some("owner-1".into());
        s.rollback_requested_capability_ids = vec![ALPHA.into()];
        s.validate_persisted().unwrap();
    }

    violation!(
        consent_unknown_capability,
        "pending consent references unknown capability",
        |s| {
            consent_action(&mut s).entity_id = Some(GAMMA.into());
        }
    );
    violation!(
        consent_targets_installed,
        "pending consent must target an absent inactive capability",
        |s| {
            consent_action(&mut s).entity_id = Some(ALPHA.into());
            s.pending_effects.clear();
        }
    );
    violation!(
        consent_policy_differs,
        "pending install policy snapshot does not match current policy",
        |s| {
            s.install_policy_snapshot_digest = Some(h("other policy"));
        }
    );
    violation!(
        consent_payload_differs,
        "pending install typed authority does not match runtime capability",
        |s| {
            let Json::Obj(m) = &mut consent_action(&mut s).payload else {
                unreachable!()
            };
            m.insert("result_material".into(), material_identity(GAMMA));
        }
    );
    violation!(
        consent_payload_schema,
        "pending install does not use schema-v3 payload",
        |s| {
            let Json::Obj(m) = &mut consent_action(&mut s).payload else {
                unreachable!()
            };
            m.remove("schema");
        }
    );
    violation!(
        consent_beyond_decision_revision,
        "pending consent action exceeds decision target revision",
        |s| {
            consent_action(&mut s).precondition_revision = REVISION + 3;
        }
    );
    violation!(
        consent_other_session,
        "pending consent belongs to another session",
        |s| {
            consent_action(&mut s).scope.tenant_id = "t2".into();
        }
    );

    // --- item 5: persisted projection --------------------------------------------------------

    persisted_violation!(
        persisted_pending_beyond_revision,
        "persisted pending action exceeds state revision",
        |s| {
            prepare_action(&mut s).precondition_revision = REVISION + 1;
        }
    );
    persisted_violation!(
        persisted_consent_beyond_next_revision,
        "persisted pending consent exceeds next revision",
        |s| {
            consent_action(&mut s).precondition_revision = REVISION + 2;
        }
    );
    persisted_violation!(
        rollback_request_not_held,
        "rollback request must target inactive rollback-held capability",
        |s| {
            s.rollback_requested_capability_ids = vec![BETA.into()];
        }
    );
    persisted_violation!(
        inactive_unselected_survives,
        "inactive unselected capability cannot survive persisted state",
        |s| {
            add_gamma(&mut s, load_capability(GAMMA, "plan-0"));
        }
    );

    #[test]
    fn unleased_active_with_blocked_deactivation_is_persistable() {
        let mut s = valid_state();
        s.pending_effects.clear();
        cap(&mut s, ALPHA).leases.clear();
        s.blocked_deactivation_ids = vec![ALPHA.into()];
        s.validate_persisted().unwrap();
    }

    #[test]
    fn inactive_unselected_capability_survives_a_degraded_plan_or_a_hold() {
        let mut s = valid_state();
        add_gamma(&mut s, load_capability(GAMMA, "plan-0"));
        let c = cap(&mut s, GAMMA);
        c.rollback_held = true;
        c.rollback_owner_id = Some("owner-1".into());
        s.validate_persisted().unwrap();

        let mut s = valid_state();
        add_gamma(&mut s, load_capability(GAMMA, "plan-0"));
        let plan = s.committed_plan.as_mut().unwrap();
        plan.plan_id = "plan-2".into();
        plan.status = "degraded".into();
        plan.abstention_code = Some("catalog-unavailable".into());
        plan.benefit_audit = Json::Null;
        plan.capabilities.clear();
        s.validate_persisted().unwrap();
        assert_eq!(
            EngineState::from_canonical_text(&s.to_canonical_text()).unwrap(),
            s
        );
    }

    // --- helpers -----------------------------------------------------------------------------

    #[test]
    fn prunes_a_retired_capability_with_everything_it_names() {
        let mut s = valid_state();
        let gamma = install_capability(GAMMA, "plan-0");
        let descriptor = install_descriptor(GAMMA)
            .get_str("descriptor_digest")
            .unwrap()
            .to_owned();
        add_gamma(&mut s, gamma);
        s.blocked_install_descriptor_digests = vec![descriptor];
        s.blocked_capability_ids = vec![GAMMA.into()];
        s.evidence.push(Evidence {
            capability_id: GAMMA.into(),
            exposure: Exposure::Prepared,
            exposure_id: "e1".into(),
            invocation: Invocation::NotInvoked,
            source_digest: h("entry skill:gamma"),
        });
        s.validate().unwrap();
        assert!(!s.is_prunable(ALPHA), "a plan row is never pruned");
        assert!(!s.is_prunable("skill:missing"));
        assert!(s.is_prunable(GAMMA));

        let mut held = s.clone();
        let c = cap(&mut held, GAMMA);
        c.rollback_held = true;
        c.rollback_owner_id = Some("owner-1".into());
        assert!(!held.is_prunable(GAMMA));
        let mut degraded = s.clone();
        degraded.committed_plan.as_mut().unwrap().status = "degraded".into();
        assert!(!degraded.is_prunable(GAMMA));

        assert!(s.prune(GAMMA));
        assert!(!s.prune(GAMMA));
        assert!(s.capability(GAMMA).is_none());
        assert!(s.evidence.iter().all(|e| e.capability_id != GAMMA));
        assert!(s.blocked_capability_ids.is_empty());
        assert!(s.blocked_install_descriptor_digests.is_empty());
        assert_eq!(s, valid_state());
    }

    #[test]
    fn sort_canonical_restores_every_ordering() {
        let mut s = valid_state();
        cap(&mut s, BETA).leases.push(lease("lease-0", "e"));
        s.blocked_capability_ids = vec![BETA.into(), ALPHA.into(), BETA.into()];
        s.evidence.push(Evidence {
            capability_id: BETA.into(),
            exposure: Exposure::Unexposed,
            exposure_id: "d".into(),
            invocation: Invocation::NotInvoked,
            source_digest: h("entry skill:beta"),
        });
        s.capabilities.reverse();
        assert!(s.validate().is_err());
        s.sort_canonical();
        s.validate_persisted().unwrap();
        assert_eq!(
            s.blocked_capability_ids,
            vec![ALPHA.to_owned(), BETA.to_owned()]
        );
        assert_eq!(s.evidence[0].exposure_id, "d");
        let leases: Vec<&str> = s
            .capability(BETA)
            .unwrap()
            .leases
            .iter()
            .map(|l| l.lease_id.as_str())
            .collect();
        assert_eq!(leases, ["lease-0", "lease-b"]);
    }

    #[test]
    fn finds_pending_consents() {
        let s = valid_state();
        assert_eq!(s.pending_consent_for(BETA).unwrap().consent_id, "consent-1");
        assert!(s.pending_consent_for(ALPHA).is_none());
        assert_eq!(
            s.pending_consent_by_id("consent-1")
                .unwrap()
                .install_action
                .entity_id
                .as_deref(),
            Some(BETA)
        );
        assert!(s.pending_consent_by_id("consent-2").is_none());
        assert_eq!(s.session_status, SessionStatus::Active);
    }
}
