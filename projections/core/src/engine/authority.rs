//! Install and activation authority (spec/engine-store.md §6): claims,
//! outcomes, execution status and the receipts that settle them.
//!
//! A claim is checked against the engine head and appended while the engine stream's lock is
//! held, so the head it names is the head it was checked against; the per-action effect stream
//! (`NoStream` for the claim, `Exact(1)` for the outcome) and the effects projection are the
//! final arbiters.

use std::ops::ControlFlow;

use ctx_journal::{
    AppendError, Digest, ExpectedRevision, NewRecord, RecordView, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{
    ActionKind, Activation, CapabilityKind, EffectKind, EngineEvent, EventKind, HostAction,
    INSTALL_ACTION_PAYLOAD_SCHEMA_V3, INSTALL_RECEIPT_SCHEMA_V3, InstallExecutionBinding,
    Installation, Json, MATERIAL_ACTION_PAYLOAD_SCHEMA_V3, MATERIAL_RECEIPT_SCHEMA_V3, Transition,
    UtcMicros, activation_authorization_digest, descriptor_matches_result_material, hex,
    install_authorization_digest, is_sha, parse_sha, validate_install_plan_descriptor,
};

use crate::archive;

use super::api::{Engine, ProcessWithError, is_v3_activation, is_v3_install};
use super::codes::EffectRefusal;
use super::effect_entry::{EffectEntry, EffectEntryError, EffectEntryKind, split_key};
use super::effects::{
    ClaimRecord, EFFECT_FORMAT_VERSION, OutcomeRecord, SettlementEntry, activation_material_digest,
    claim_event_id, effect_key, effect_stream, install_result_material_digest, outcome_event_id,
    tables_of,
};
use super::error::{AuthorizeError, OutcomeError, ProcessError, StatusError, StoreError};
use super::heads::EngineHead;
use super::record::{GuardEffect, GuardMode, SettlementGuard, engine_stream};

/// The outcome a driver observed for an install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallOutcome {
    /// The authorized material is installed (observed material required).
    Applied,
    /// The install did not happen (verified material absence: no observed material).
    Failed,
    /// The effect cannot be verified: the claiming process died mid-effect, or the driver
    /// reports it cannot tell. No observed material. It is reported as indeterminate until an
    /// `ActionFailed` receipt settles it as a failed install.
    Indeterminate,
}

impl InstallOutcome {
    fn mode(self) -> GuardMode {
        match self {
            InstallOutcome::Applied => GuardMode::Applied,
            InstallOutcome::Failed => GuardMode::Failed,
            InstallOutcome::Indeterminate => GuardMode::Indeterminate,
        }
    }

    /// The outcome a recorded mode stands for; `None` for `expired`, which is no outcome.
    fn of_mode(mode: GuardMode) -> Option<InstallOutcome> {
        match mode {
            GuardMode::Applied => Some(InstallOutcome::Applied),
            GuardMode::Failed => Some(InstallOutcome::Failed),
            GuardMode::Indeterminate => Some(InstallOutcome::Indeterminate),
            GuardMode::Expired => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.mode().as_str()
    }
}

/// The settlement guard of a recorded install outcome: what [`Engine::process_install_receipt`]
/// needs to settle the claim. A plain value checked against the durable outcome; deliberately
/// neither `Clone` nor serializable.
#[derive(Debug)]
pub struct InstallGuard(SettlementGuard);

impl InstallGuard {
    pub fn action_id(&self) -> &str {
        &self.0.action_id
    }

    pub fn action_content_digest(&self) -> &str {
        &self.0.action_content_digest
    }

    /// The recorded outcome this guard settles. A guard is only made from a recorded outcome,
    /// whose validation refuses the mode `expired`; were it ever one, `failed` is the
    /// conservative answer (nothing is claimed installed).
    pub fn outcome(&self) -> InstallOutcome {
        InstallOutcome::of_mode(self.0.mode).unwrap_or(InstallOutcome::Failed)
    }

    pub fn execution_outcome_digest(&self) -> &str {
        self.0
            .execution_outcome_digest
            .as_deref()
            .unwrap_or_default()
    }
}

/// The settlement guard of a recorded activation outcome (always applied).
#[derive(Debug)]
pub struct ActivationGuard(SettlementGuard);

impl ActivationGuard {
    pub fn action_id(&self) -> &str {
        &self.0.action_id
    }

    pub fn action_content_digest(&self) -> &str {
        &self.0.action_content_digest
    }

    pub fn execution_outcome_digest(&self) -> &str {
        self.0
            .execution_outcome_digest
            .as_deref()
            .unwrap_or_default()
    }
}

/// Where an install stands (spec/engine-store.md §6): unclaimed ⇒ everything empty;
/// `outcome_recorded` ⇔ `outcome`, `outcome_digest` and `observed_at` present; settled ⇒
/// outcome recorded.
#[derive(Debug, PartialEq, Eq)]
pub struct InstallExecutionStatus {
    pub claimed: bool,
    pub outcome_recorded: bool,
    pub settled: bool,
    pub execution_binding_digest: Option<String>,
    pub outcome: Option<InstallOutcome>,
    pub outcome_digest: Option<String>,
    pub observed_at: Option<String>,
}

/// Where an activation stands (spec/engine-store.md §6).
#[derive(Debug, PartialEq, Eq)]
pub struct ActivationExecutionStatus {
    pub claimed: bool,
    pub outcome_recorded: bool,
    pub settled: bool,
    pub execution_binding_digest: Option<String>,
    pub outcome_digest: Option<String>,
    pub observed_at: Option<String>,
}

/// The durable state of one action's effect, read in one snapshot.
pub(super) struct EffectState {
    claim: Option<ClaimRecord>,
    outcome: Option<OutcomeRecord>,
    settlement: Option<SettlementEntry>,
    expired: bool,
}

/// An outcome checked against its claim: already stored, or ready to append.
enum BuiltOutcome {
    Existing(SettlementGuard),
    New {
        append: StreamAppend,
        guard: SettlementGuard,
        observed_at: String,
        identical: Box<OutcomeRecord>,
    },
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn is_v3_row(row: &Json) -> bool {
    row.as_obj().is_some_and(|m| {
        m.len() == ctx_model::PLAN_ROW_V3_KEYS.len()
            && ctx_model::PLAN_ROW_V3_KEYS
                .iter()
                .all(|k| m.contains_key(*k))
    })
}

fn object(pairs: Vec<(&str, Json)>) -> Json {
    Json::object(pairs)
}

impl Engine {
    /// Reads the claim, outcome, settlement and expiry of one action's effect. The claims and
    /// outcomes tables hold only the position and digest of their record (spec/engine-store.md
    /// §4); the record is read from the journal and must be the one the entry names, else
    /// [`StoreError::EffectEntry`].
    pub(super) fn effect_state(
        &self,
        effect: GuardEffect,
        key: &[u8],
    ) -> Result<EffectState, StoreError> {
        let t = tables_of(effect);
        let Some((engine, action_id)) = split_key(key) else {
            return Err(StoreError::Corrupt(format!(
                "the {} effects key {} is not an engine stream id followed by an action id",
                effect.as_str(),
                hex(key)
            )));
        };
        let entry_error =
            |kind: EffectEntryKind, source: EffectEntryError| StoreError::EffectEntry {
                effect,
                kind,
                stream: engine,
                action_id: action_id.to_owned(),
                source: Box::new(source),
            };
        let decode = |kind: EffectEntryKind, v: Option<&[u8]>| {
            v.map(|v| EffectEntry::decode(kind, v))
                .transpose()
                .map_err(|e| entry_error(kind, e))
        };
        let (claim, outcome, settlement, expired) = self
            .journal
            .projection_read(|r| -> Result<_, StoreError> {
                let claim = r.get(t.claims, key, |v| decode(EffectEntryKind::Claim, v))??;
                let outcome = r.get(t.outcomes, key, |v| decode(EffectEntryKind::Outcome, v))??;
                let settlement = r
                    .get(t.settlements, key, |v| {
                        v.map(archive::from_bytes::<SettlementEntry>).transpose()
                    })?
                    .map_err(corrupt)?;
                let expired = r.get(t.expiries, key, |v| v.is_some())?;
                Ok((claim, outcome, settlement, expired))
            })
            .map_err(StoreError::from)??;
        // Records are immutable, so reading them after the snapshot reads what the entries name.
        let claim = match claim {
            None => None,
            Some(entry) => Some(self.effect_record(&entry, |view| {
                entry.claim_from(view, claim_kind_of(effect), &engine, action_id)
            })?),
        };
        let outcome = match outcome {
            None => None,
            Some(entry) => Some(self.effect_record(&entry, |view| {
                entry.outcome_from(view, outcome_kind_of(effect), &engine, action_id)
            })?),
        };
        Ok(EffectState {
            claim: claim
                .transpose()
                .map_err(|e| entry_error(EffectEntryKind::Claim, e))?,
            outcome: outcome
                .transpose()
                .map_err(|e| entry_error(EffectEntryKind::Outcome, e))?,
            settlement,
            expired,
        })
    }

    /// Reads the record at `entry`'s position (verified by the journal's scan: D, M, gap-free
    /// positions) and hands it to `decode`, which checks it is the record the entry names.
    fn effect_record<T>(
        &self,
        entry: &EffectEntry,
        decode: impl Fn(&RecordView<'_>) -> Result<T, EffectEntryError>,
    ) -> Result<Result<T, EffectEntryError>, StoreError> {
        let mut found = None;
        self.journal.scan(entry.position, |view| {
            found = Some(decode(view));
            ControlFlow::Break(())
        })?;
        Ok(found.unwrap_or(Err(EffectEntryError::Missing {
            position: entry.position,
        })))
    }

    fn now_for_claim(&self) -> Result<UtcMicros, AuthorizeError> {
        self.clock
            .now()
            .map_err(|e| AuthorizeError::Clock(format!("trusted UTC clock failed: {e}")))
    }

    // ------------------------------------------------------------------------------------------
    // Install
    // ------------------------------------------------------------------------------------------

    /// Claims a pending schema-v3 install for execution (spec/engine-store.md §6
    /// step 1). On success the durable claim exists.
    ///
    /// **The caller's contract (physical at-most-once).** Run the physical driver only right
    /// after *this* call returned `Ok`, in the process that made it, and at most once. Never run
    /// it for a claim that already exists (`AlreadyClaimed`): that claim's driver may have run,
    /// or may be running, in a process that since died. Such a claim is recovered by recording
    /// an outcome without driving anything: the outcome a verifier observed on the host, or
    /// [`InstallOutcome::Indeterminate`], which then settles as failed. The engine cannot enforce
    /// this itself, because after a crash the claim's outcome must be recordable by any handle of
    /// any process (spec/engine-store.md §6, crash matrix "after claim").
    pub fn authorize_install(
        &self,
        action: &HostAction,
        selection_row: &Json,
        descriptor: &Json,
        expected_catalog_snapshot_digest: &str,
        expected_policy_digest: &str,
        execution_binding: &InstallExecutionBinding,
    ) -> Result<(), AuthorizeError> {
        let invalid = |m: &str| Err(AuthorizeError::Invalid(m.to_owned()));
        if !is_sha(expected_catalog_snapshot_digest) || !is_sha(expected_policy_digest) {
            return invalid("install authorization requires exact snapshot digests");
        }
        if let Err(e) = execution_binding.validate() {
            return Err(AuthorizeError::Invalid(format!(
                "install authorization requires a typed execution binding: {e}"
            )));
        }
        if !is_v3_row(selection_row) {
            return invalid("legacy selections cannot authorize physical installation");
        }
        let authority = selection_row.get("authority").unwrap_or(&Json::Null);
        let result_material = authority.get("result_material").unwrap_or(&Json::Null);
        let has_authority = selection_row
            .get_str("kind")
            .and_then(CapabilityKind::parse)
            .is_some_and(CapabilityKind::is_installable)
            && selection_row.get_str("actionability") == Some("install")
            && authority.get_str("type") == Some("install")
            && authority.get("descriptor") == Some(descriptor)
            && validate_install_plan_descriptor(descriptor).is_ok()
            && descriptor_matches_result_material(descriptor, result_material)
            && descriptor.get_str("capability_id") == selection_row.get_str("capability_id")
            && descriptor.get_str("kind") == selection_row.get_str("kind")
            && descriptor.get_str("installer_id") == Some(execution_binding.driver_id.as_str())
            && is_v3_install(action)
            && action.payload.get_str("installer_digest")
                == Some(execution_binding.driver_digest.as_str());
        if !has_authority {
            return invalid("selection has no schema-v3 physical install authority");
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| AuthorizeError::Invalid(e.to_string()))?;
        let stream_lock = self.stream_lock(&stream);
        let _held = stream_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(head) = self.head(&stream)? else {
            return Err(AuthorizeError::NoSession {
                effect: GuardEffect::Install,
            });
        };
        if !install_is_pending_authority(
            &head,
            action,
            selection_row,
            descriptor,
            expected_catalog_snapshot_digest,
            expected_policy_digest,
        ) {
            return Err(AuthorizeError::NotPending(
                "install action is not the exact pending journal authority".into(),
            ));
        }
        let authorization_digest = install_authorization_digest(
            action,
            selection_row,
            descriptor,
            expected_catalog_snapshot_digest,
            expected_policy_digest,
        );
        self.claim(
            GuardEffect::Install,
            &stream,
            &head,
            action,
            &authorization_digest,
            execution_binding,
            None,
        )
    }

    /// Records what the driver (or, after a crash, a verifier) observed for a claimed install
    /// (spec/engine-store.md §6 `_record_install_outcome`). Idempotent for an
    /// identical outcome; a different outcome is a `Conflict`.
    ///
    /// Any handle of any process may record the outcome while none exists: this is the
    /// reference's re-issuable permit, and the journal's `Exact(1)` append on the action's effect
    /// stream keeps it to one outcome per claim. [`InstallOutcome::Indeterminate`] is the outcome
    /// of a claim whose effect cannot be verified.
    pub fn record_install_outcome(
        &self,
        action: &HostAction,
        execution_binding: &InstallExecutionBinding,
        outcome: InstallOutcome,
        observed_material_identity_digest: Option<&str>,
        verification_digest: &str,
    ) -> Result<InstallGuard, OutcomeError> {
        let effect = GuardEffect::Install;
        let stream =
            engine_stream(&action.scope).map_err(|e| OutcomeError::Invalid(e.to_string()))?;
        let key = effect_key(&stream, &action.action_id);
        self.check_install_outcome(
            action,
            outcome,
            observed_material_identity_digest,
            verification_digest,
        )?;
        let stream_lock = self.stream_lock(&stream);
        let _held = stream_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let guard = self.record_outcome(
            effect,
            &key,
            action,
            execution_binding,
            outcome.mode(),
            observed_material_identity_digest,
            verification_digest,
        )?;
        Ok(InstallGuard(guard))
    }

    /// Where a schema-v3 install stands.
    pub fn install_execution_status(
        &self,
        action: &HostAction,
    ) -> Result<InstallExecutionStatus, StatusError> {
        if !is_v3_install(action) {
            return Err(StatusError::Invalid(
                "execution status requires an exact schema-v3 install action".into(),
            ));
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| StatusError::Invalid(e.to_string()))?;
        let s = self.effect_state(
            GuardEffect::Install,
            &effect_key(&stream, &action.action_id),
        )?;
        let outcome = s.outcome.as_ref();
        Ok(InstallExecutionStatus {
            claimed: s.claim.is_some(),
            outcome_recorded: outcome.is_some(),
            settled: s.settlement.is_some(),
            execution_binding_digest: s.claim.map(|c| c.execution_binding_digest),
            outcome: outcome.and_then(|o| InstallOutcome::of_mode(o.outcome)),
            outcome_digest: outcome.map(|o| o.outcome_digest.clone()),
            observed_at: outcome.map(|o| o.observed_at.clone()),
        })
    }

    /// The settlement guard of an install's recorded outcome, when one is recorded: what a
    /// process that recovers after a crash between outcome and receipt settles with
    /// (spec/service.md §7). `None` while no outcome exists.
    pub fn recorded_install_guard(
        &self,
        action: &HostAction,
    ) -> Result<Option<InstallGuard>, StatusError> {
        if !is_v3_install(action) {
            return Err(StatusError::Invalid(
                "execution status requires an exact schema-v3 install action".into(),
            ));
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| StatusError::Invalid(e.to_string()))?;
        let s = self.effect_state(
            GuardEffect::Install,
            &effect_key(&stream, &action.action_id),
        )?;
        Ok(s.outcome
            .map(|o| InstallGuard(o.guard(GuardEffect::Install))))
    }

    /// Commits the host's receipt for a claimed install with the guard of its recorded outcome;
    /// the settlement is written in the receipt's transaction (spec/engine-store.md §6). An
    /// applied outcome settles by `ActionApplied`; a failed or indeterminate one by
    /// `ActionFailed` (an indeterminate outcome settles as failed).
    pub fn process_install_receipt(
        &self,
        event: &EngineEvent,
        guard: &InstallGuard,
    ) -> Result<Transition, ProcessError> {
        let g = &guard.0;
        if g.effect != GuardEffect::Install
            || g.mode == GuardMode::Expired
            || g.execution_outcome_digest.is_none()
        {
            return Err(ProcessError::Authority(
                "install receipt requires a verified execution outcome".into(),
            ));
        }
        if g.mode == GuardMode::Indeterminate && event.kind == EventKind::ActionApplied {
            return Err(ProcessError::Authority(format!(
                "install action '{}' has an indeterminate outcome and settles only as failed",
                g.action_id
            )));
        }
        if event.kind != g.mode.receipt_kind()
            || event.payload.get_str("action_id") != Some(g.action_id.as_str())
            || event.payload.get_str("action_content_digest")
                != Some(g.action_content_digest.as_str())
        {
            return Err(ProcessError::Authority(
                "install receipt does not match its execution outcome".into(),
            ));
        }
        self.process_guarded(event, None, Some(g))
    }

    /// Records a driver's applied or failed observation and commits the receipt that settles it
    /// in **one** atomic append (outcome record first, then the engine record with its
    /// settlement), so a verified install costs one commit instead of two. `receipt` builds the
    /// receipt event from the outcome's guard and observation time; it must name the current
    /// head revision. When an identical outcome is already recorded (a crash between outcome
    /// and receipt under the two-step path) nothing is appended and `Ok((guard, None))` tells
    /// the caller to settle with [`Engine::process_install_receipt`].
    pub fn record_install_outcome_and_receipt(
        &self,
        action: &HostAction,
        execution_binding: &InstallExecutionBinding,
        outcome: InstallOutcome,
        observed_material_identity_digest: Option<&str>,
        verification_digest: &str,
        receipt: impl FnOnce(&InstallGuard, &str) -> EngineEvent,
    ) -> Result<(InstallGuard, Option<Transition>), OutcomeError> {
        if outcome == InstallOutcome::Indeterminate {
            return Err(OutcomeError::Invalid(
                "an indeterminate outcome has no receipt to commit with".into(),
            ));
        }
        let effect = GuardEffect::Install;
        let stream =
            engine_stream(&action.scope).map_err(|e| OutcomeError::Invalid(e.to_string()))?;
        let key = effect_key(&stream, &action.action_id);
        self.check_install_outcome(
            action,
            outcome,
            observed_material_identity_digest,
            verification_digest,
        )?;
        let built = {
            let stream_lock = self.stream_lock(&stream);
            let _held = stream_lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.build_outcome(
                effect,
                &key,
                action,
                execution_binding,
                outcome.mode(),
                observed_material_identity_digest,
                verification_digest,
            )?
        };
        let (append, guard, observed_at, identical) = match built {
            BuiltOutcome::Existing(guard) => return Ok((InstallGuard(guard), None)),
            BuiltOutcome::New {
                append,
                guard,
                observed_at,
                identical,
            } => (append, InstallGuard(guard), observed_at, identical),
        };
        let event = receipt(&guard, &observed_at);
        if event.kind != guard.0.mode.receipt_kind()
            || event.payload.get_str("action_id") != Some(guard.0.action_id.as_str())
        {
            return Err(OutcomeError::Invalid(
                "install receipt does not match its execution outcome".into(),
            ));
        }
        match self.process_inner::<std::convert::Infallible>(
            &event,
            None,
            Some(&guard.0),
            vec![append],
            None,
        ) {
            Ok(t) => Ok((guard, Some(t))),
            Err(ProcessWithError::Process(e)) => Err(OutcomeError::Receipt(Box::new(e))),
            Err(ProcessWithError::Extras(never)) => match never {},
            Err(ProcessWithError::ExtrasAppend(refusal)) => {
                // The outcome part was refused: an identical outcome recorded meanwhile is this
                // one (settle it separately); anything else is the outcome's refusal.
                let guard = self.outcome_refusal(effect, &key, action, refusal, &identical)?;
                Ok((InstallGuard(guard), None))
            }
        }
    }

    /// The argument checks of an install outcome, before any read.
    fn check_install_outcome(
        &self,
        action: &HostAction,
        outcome: InstallOutcome,
        observed_material_identity_digest: Option<&str>,
        verification_digest: &str,
    ) -> Result<(), OutcomeError> {
        let invalid = |m: &str| Err(OutcomeError::Invalid(m.to_owned()));
        if !is_sha(verification_digest) {
            return invalid("verification digest must be an exact SHA-256 digest");
        }
        if observed_material_identity_digest.is_some_and(|d| !is_sha(d)) {
            return invalid("observed material identity must be an exact SHA-256 digest");
        }
        if !is_v3_install(action) {
            return invalid("execution outcome requires an exact schema-v3 install action");
        }
        match (outcome, observed_material_identity_digest) {
            (InstallOutcome::Applied, None) => {
                invalid("applied outcome requires an observed material identity")
            }
            (InstallOutcome::Applied, Some(d))
                if Some(d) != install_result_material_digest(action) =>
            {
                invalid("applied outcome does not match authorized result material")
            }
            (InstallOutcome::Failed, Some(_)) => {
                invalid("failed outcome requires verified material absence")
            }
            (InstallOutcome::Indeterminate, Some(_)) => {
                invalid("indeterminate outcome cannot carry an observed material identity")
            }
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------------------------------------
    // Activation
    // ------------------------------------------------------------------------------------------

    /// Claims a pending schema-v3 activation (spec/engine-store.md §6): the
    /// capability's current material must come from a settled, applied install.
    pub fn authorize_activation(
        &self,
        action: &HostAction,
        execution_binding: &InstallExecutionBinding,
        expected_host_descriptor_digest: &str,
    ) -> Result<(), AuthorizeError> {
        if !is_sha(expected_host_descriptor_digest) {
            return Err(AuthorizeError::Invalid(
                "activation requires an exact host descriptor digest".into(),
            ));
        }
        if let Err(e) = execution_binding.validate() {
            return Err(AuthorizeError::Invalid(format!(
                "activation authorization requires a typed execution binding: {e}"
            )));
        }
        if !is_v3_activation(action) {
            return Err(AuthorizeError::Invalid(
                "activation claim requires an exact schema-v3 action".into(),
            ));
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| AuthorizeError::Invalid(e.to_string()))?;
        let stream_lock = self.stream_lock(&stream);
        let _held = stream_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(head) = self.head(&stream)? else {
            return Err(AuthorizeError::NoSession {
                effect: GuardEffect::Activation,
            });
        };
        let Some(lineage) =
            activation_pending_lineage(&head, action, expected_host_descriptor_digest)
        else {
            return Err(AuthorizeError::NotPending(
                "activation action is not exact pending journal authority".into(),
            ));
        };
        // Material installed by ctx must come from one settled install (spec/engine-store.md §6).
        // Material loaded straight from the catalog has no install to wait for; the reference
        // refuses it (its caveat 3), which would make every load capability impossible to activate.
        let installed_at = match &lineage {
            Some(lineage) => Some(self.install_lower_bound(&stream, lineage)?),
            None => None,
        };
        let authorization_digest = activation_authorization_digest(
            &action.content_digest(),
            &action.to_cj(),
            &execution_binding.binding_digest(),
            expected_host_descriptor_digest,
        );
        self.claim(
            GuardEffect::Activation,
            &stream,
            &head,
            action,
            &authorization_digest,
            execution_binding,
            installed_at,
        )
    }

    /// Records the verifier's observation of a claimed activation (spec/engine-store.md §6). Only
    /// an applied outcome exists. Any handle of any process may record it while none exists and
    /// before the claim's expiry (the effect stream's `Exact(1)` keeps it to one). The host must
    /// then submit its `ActionApplied` with `occurred_at` equal to the returned status's
    /// `observed_at`.
    pub fn record_activation_outcome(
        &self,
        action: &HostAction,
        execution_binding: &InstallExecutionBinding,
        observed_material_identity_digest: &str,
        verification_digest: &str,
    ) -> Result<ActivationGuard, OutcomeError> {
        let effect = GuardEffect::Activation;
        if !is_v3_activation(action) {
            return Err(OutcomeError::Invalid(
                "activation outcome requires exact schema-v3 authority".into(),
            ));
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| OutcomeError::Invalid(e.to_string()))?;
        let key = effect_key(&stream, &action.action_id);
        for (name, value) in [
            ("verification_digest", verification_digest),
            (
                "observed_material_identity_digest",
                observed_material_identity_digest,
            ),
        ] {
            if !is_sha(value) {
                return Err(OutcomeError::Invalid(format!(
                    "{name} must be an exact SHA-256 digest"
                )));
            }
        }
        if Some(observed_material_identity_digest) != activation_material_digest(action) {
            return Err(OutcomeError::Invalid(
                "activation outcome does not match authorized material".into(),
            ));
        }
        let stream_lock = self.stream_lock(&stream);
        let _held = stream_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let guard = self.record_outcome(
            effect,
            &key,
            action,
            execution_binding,
            GuardMode::Applied,
            Some(observed_material_identity_digest),
            verification_digest,
        )?;
        Ok(ActivationGuard(guard))
    }

    /// Where a schema-v3 activation stands.
    pub fn activation_execution_status(
        &self,
        action: &HostAction,
    ) -> Result<ActivationExecutionStatus, StatusError> {
        if !is_v3_activation(action) {
            return Err(StatusError::Invalid(
                "execution status requires an exact schema-v3 activation action".into(),
            ));
        }
        let stream =
            engine_stream(&action.scope).map_err(|e| StatusError::Invalid(e.to_string()))?;
        let s = self.effect_state(
            GuardEffect::Activation,
            &effect_key(&stream, &action.action_id),
        )?;
        let outcome = s.outcome.as_ref();
        Ok(ActivationExecutionStatus {
            claimed: s.claim.is_some(),
            outcome_recorded: outcome.is_some(),
            settled: s.settlement.is_some(),
            execution_binding_digest: s.claim.map(|c| c.execution_binding_digest),
            outcome_digest: outcome.map(|o| o.outcome_digest.clone()),
            observed_at: outcome.map(|o| o.observed_at.clone()),
        })
    }

    /// Commits the host's `ActionApplied` for a claimed activation with its outcome's guard.
    pub fn process_activation_receipt(
        &self,
        event: &EngineEvent,
        guard: &ActivationGuard,
    ) -> Result<Transition, ProcessError> {
        let g = &guard.0;
        if g.effect != GuardEffect::Activation
            || g.mode != GuardMode::Applied
            || g.execution_outcome_digest.is_none()
        {
            return Err(ProcessError::Authority(
                "activation receipt requires a verified execution outcome".into(),
            ));
        }
        if event.kind != EventKind::ActionApplied
            || event.payload.get_str("action_kind") != Some(ActionKind::ActivateCapability.as_str())
            || event.payload.get_str("action_id") != Some(g.action_id.as_str())
            || event.payload.get_str("action_content_digest")
                != Some(g.action_content_digest.as_str())
        {
            return Err(ProcessError::Authority(
                "activation receipt does not match its execution outcome".into(),
            ));
        }
        self.process_guarded(event, None, Some(g))
    }

    // ------------------------------------------------------------------------------------------
    // Shared store steps
    // ------------------------------------------------------------------------------------------

    /// The store side of a claim (spec/engine-store.md §6): called with the
    /// engine stream's lock held and `head` read under it.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &self,
        effect: GuardEffect,
        stream: &StreamId,
        head: &EngineHead,
        action: &HostAction,
        authorization_digest: &str,
        binding: &InstallExecutionBinding,
        not_before: Option<UtcMicros>,
    ) -> Result<(), AuthorizeError> {
        let key = effect_key(stream, &action.action_id);
        let action_json = action.to_cj();
        let binding_json = binding.to_json_text();
        let existing = self.effect_state(effect, &key)?;
        if let Some(c) = &existing.claim {
            let same = c.action_json == action_json
                && c.authorization_digest == authorization_digest
                && c.execution_binding_json == binding_json;
            if !same {
                return Err(AuthorizeError::AuthorityCorrupt(match effect {
                    GuardEffect::Install => {
                        "install action id is bound to different persisted claim authority".into()
                    }
                    GuardEffect::Activation => {
                        "activation action is claimed by different verifier authority".into()
                    }
                }));
            }
            return Err(AuthorizeError::AlreadyClaimed {
                effect,
                action_id: action.action_id.clone(),
            });
        }
        if existing.expired {
            return Err(AuthorizeError::ClaimExpired {
                effect,
                action_id: action.action_id.clone(),
            });
        }
        // The action must be exactly what its issuing record emitted.
        let issuing = self.stored_record(stream, action.precondition_revision)?;
        let Some((issuing, issuing_digest)) = issuing else {
            return Err(AuthorizeError::AuthorityCorrupt(format!(
                "{} action issuing revision is absent",
                effect.as_str()
            )));
        };
        let mut emitted = issuing
            .transition
            .actions
            .iter()
            .filter(|a| a.action_id == action.action_id);
        let exact =
            matches!((emitted.next(), emitted.next()), (Some(a), None) if a.to_cj() == action_json);
        if !exact {
            return Err(AuthorizeError::AuthorityCorrupt(match effect {
                GuardEffect::Install => {
                    "install action is not byte-equal to one action emitted by its issuing record"
                        .into()
                }
                GuardEffect::Activation => {
                    "activation action is not exactly journal-emitted".into()
                }
            }));
        }
        let now = self.now_for_claim()?;
        if not_before.is_some_and(|t| now < t) {
            return Err(AuthorizeError::Clock(
                "trusted UTC clock moved before installation".into(),
            ));
        }
        let Some(expires_at) = action.expires_at.as_deref() else {
            return Err(AuthorizeError::AuthorityCorrupt(format!(
                "persisted {} action has no expiry",
                effect.as_str()
            )));
        };
        let expires = UtcMicros::parse(expires_at).map_err(|_| {
            AuthorizeError::AuthorityCorrupt(format!(
                "persisted {} action has no valid expiry",
                effect.as_str()
            ))
        })?;
        if now >= expires {
            return Err(AuthorizeError::ClaimExpired {
                effect,
                action_id: action.action_id.clone(),
            });
        }
        let mut claim = ClaimRecord {
            format_version: EFFECT_FORMAT_VERSION,
            stream_key: action.scope.stream_key(),
            action_id: action.action_id.clone(),
            action_kind: action.kind.as_str().to_owned(),
            action_content_digest: action.content_digest(),
            precondition_revision: action.precondition_revision,
            action_json,
            issuing_record_digest: issuing_digest.to_hex(),
            claimed_head_revision: head.revision,
            claimed_head_record_digest: Digest::from_bytes(head.head_record_digest).to_hex(),
            claimed_head_state_digest: hex(&head.state_digest),
            action_expires_at: expires_at.to_owned(),
            claimed_at: now.render(),
            authorization_digest: authorization_digest.to_owned(),
            execution_binding_json: binding_json,
            execution_binding_digest: binding.binding_digest(),
            claim_digest: String::new(),
        };
        claim.claim_digest = claim.compute_digest(effect);
        // The projection checks the same; failing here keeps a malformed claim out of the journal.
        claim
            .validate(effect)
            .map_err(|e| AuthorizeError::AuthorityCorrupt(e.to_string()))?;
        let effect_stream = effect_stream(effect, &claim.stream_key, &claim.action_id)
            .map_err(|e| AuthorizeError::Invalid(e.to_string()))?;
        let payload = archive::to_bytes(&claim).map_err(corrupt)?;
        let append = StreamAppend::new(
            effect_stream,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                claim_event_id(effect, &effect_stream),
                claim_kind_of(effect),
                Timestamp(now.0),
                payload,
            )],
        );
        let already = || AuthorizeError::AlreadyClaimed {
            effect,
            action_id: action.action_id.clone(),
        };
        match self.journal.append(append) {
            Ok(outcome) if !outcome.replayed => Ok(()),
            // The journal already holds a claim for this action: the claim was made before.
            Ok(_) | Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                Err(already())
            }
            Err(AppendError::Hook {
                code: Some(code),
                message,
                ..
            }) => Err(match EffectRefusal::from_code(code) {
                Some((_, EffectRefusal::AlreadyClaimed | EffectRefusal::ClaimSettled)) => already(),
                Some((_, EffectRefusal::ClaimExpired)) => AuthorizeError::ClaimExpired {
                    effect,
                    action_id: action.action_id.clone(),
                },
                _ => AuthorizeError::AuthorityCorrupt(message),
            }),
            Err(e) => Err(StoreError::from(e).into()),
        }
    }

    /// The store side of an outcome (spec/engine-store.md §6): called with the
    /// engine stream's lock held.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn record_outcome(
        &self,
        effect: GuardEffect,
        key: &[u8],
        action: &HostAction,
        binding: &InstallExecutionBinding,
        mode: GuardMode,
        observed: Option<&str>,
        verification_digest: &str,
    ) -> Result<SettlementGuard, OutcomeError> {
        match self.build_outcome(
            effect,
            key,
            action,
            binding,
            mode,
            observed,
            verification_digest,
        )? {
            BuiltOutcome::Existing(guard) => Ok(guard),
            BuiltOutcome::New {
                append,
                guard,
                identical,
                ..
            } => match self.journal.append(append) {
                Ok(_) => Ok(guard),
                Err(e) => self.outcome_refusal(effect, key, action, e, &identical),
            },
        }
    }

    /// Maps a refused outcome append: an identical outcome stored meanwhile is this one.
    fn outcome_refusal(
        &self,
        effect: GuardEffect,
        key: &[u8],
        action: &HostAction,
        refusal: AppendError,
        identical: &OutcomeRecord,
    ) -> Result<SettlementGuard, OutcomeError> {
        let id = action.action_id.clone();
        let same = |o: &OutcomeRecord| {
            o.action_content_digest == identical.action_content_digest
                && o.execution_binding_digest == identical.execution_binding_digest
                && o.outcome == identical.outcome
                && o.observed_material_identity_digest
                    == identical.observed_material_identity_digest
                && o.verification_digest == identical.verification_digest
        };
        let conflict = || {
            OutcomeError::Conflict(match effect {
                GuardEffect::Install => {
                    format!("install action '{id}' already has a different outcome")
                }
                GuardEffect::Activation => {
                    "activation action already has a different verified outcome".to_owned()
                }
            })
        };
        match refusal {
            AppendError::WrongRevision { .. } | AppendError::Conflict { .. } => {
                match self.effect_state(effect, key)?.outcome {
                    Some(o) if same(&o) => Ok(o.guard(effect)),
                    _ => Err(conflict()),
                }
            }
            AppendError::Hook {
                code: Some(code),
                message,
                ..
            } => Err(match EffectRefusal::from_code(code) {
                Some((_, EffectRefusal::OutcomeRequired)) => OutcomeError::ClaimRequired {
                    effect,
                    action_id: id,
                },
                Some((_, EffectRefusal::ClaimSettled)) => OutcomeError::Settled {
                    effect,
                    action_id: id,
                },
                Some((_, EffectRefusal::ClaimExpired)) => OutcomeError::Expired { action_id: id },
                Some((_, EffectRefusal::OutcomeConflict)) => OutcomeError::Conflict(message),
                _ => OutcomeError::AuthorityCorrupt(message),
            }),
            e => Err(StoreError::from(e).into()),
        }
    }

    /// Checks an outcome against the durable claim and builds its append (not appended): the
    /// stored outcome when an identical one exists.
    #[allow(clippy::too_many_arguments)]
    fn build_outcome(
        &self,
        effect: GuardEffect,
        key: &[u8],
        action: &HostAction,
        binding: &InstallExecutionBinding,
        mode: GuardMode,
        observed: Option<&str>,
        verification_digest: &str,
    ) -> Result<BuiltOutcome, OutcomeError> {
        let id = action.action_id.clone();
        let state = self.effect_state(effect, key)?;
        let Some(claim) = state.claim else {
            return Err(OutcomeError::ClaimRequired {
                effect,
                action_id: id,
            });
        };
        if claim.action_json != action.to_cj()
            || claim.action_content_digest != action.content_digest()
        {
            return Err(match effect {
                GuardEffect::Install => OutcomeError::AuthorityCorrupt(
                    "execution outcome does not match claimed action".into(),
                ),
                GuardEffect::Activation => OutcomeError::Conflict(
                    "activation outcome does not match its durable claim".into(),
                ),
            });
        }
        let binding_digest = binding.binding_digest();
        if claim.execution_binding_digest != binding_digest {
            return Err(OutcomeError::Conflict(match effect {
                GuardEffect::Install => {
                    "execution outcome binding does not match the claimed driver and target".into()
                }
                GuardEffect::Activation => {
                    "activation outcome does not match its durable claim".into()
                }
            }));
        }
        if state.settlement.is_some() {
            return Err(OutcomeError::Settled {
                effect,
                action_id: id,
            });
        }
        let identical = |o: &OutcomeRecord| {
            o.action_content_digest == claim.action_content_digest
                && o.execution_binding_digest == binding_digest
                && o.outcome == mode
                && o.observed_material_identity_digest.as_deref() == observed
                && o.verification_digest == verification_digest
        };
        let conflict = || {
            OutcomeError::Conflict(match effect {
                GuardEffect::Install => {
                    format!("install action '{id}' already has a different outcome")
                }
                GuardEffect::Activation => {
                    "activation action already has a different verified outcome".to_owned()
                }
            })
        };
        if let Some(existing) = &state.outcome {
            return if identical(existing) {
                Ok(BuiltOutcome::Existing(existing.guard(effect)))
            } else {
                Err(conflict())
            };
        }
        let now = self
            .clock
            .now()
            .map_err(|e| OutcomeError::Clock(format!("trusted UTC clock failed: {e}")))?;
        let claimed_at = UtcMicros::parse(&claim.claimed_at).map_err(|_| {
            OutcomeError::AuthorityCorrupt("the durable claim time does not parse".into())
        })?;
        if now < claimed_at {
            return Err(OutcomeError::Clock(match effect {
                GuardEffect::Install => "trusted UTC clock moved before the install claim".into(),
                GuardEffect::Activation => "trusted UTC clock moved before activation claim".into(),
            }));
        }
        if effect == GuardEffect::Activation {
            let expires = UtcMicros::parse(&claim.action_expires_at).map_err(|_| {
                OutcomeError::AuthorityCorrupt("the durable claim expiry does not parse".into())
            })?;
            if now >= expires {
                return Err(OutcomeError::Expired { action_id: id });
            }
        }
        let mut outcome = OutcomeRecord {
            format_version: EFFECT_FORMAT_VERSION,
            stream_key: claim.stream_key.clone(),
            action_id: claim.action_id.clone(),
            action_content_digest: claim.action_content_digest.clone(),
            claim_digest: claim.claim_digest.clone(),
            execution_binding_digest: binding_digest.clone(),
            outcome: mode,
            observed_material_identity_digest: observed.map(str::to_owned),
            verification_digest: verification_digest.to_owned(),
            observed_at: now.render(),
            outcome_digest: String::new(),
        };
        outcome.outcome_digest = outcome.compute_digest(effect);
        outcome
            .validate(effect)
            .map_err(|e| OutcomeError::Invalid(e.to_string()))?;
        let stream = effect_stream(effect, &claim.stream_key, &claim.action_id)
            .map_err(|e| OutcomeError::Invalid(e.to_string()))?;
        let payload = archive::to_bytes(&outcome).map_err(corrupt)?;
        let append = StreamAppend::new(
            stream,
            ExpectedRevision::Exact(1),
            vec![NewRecord::new(
                outcome_event_id(effect, &stream),
                outcome_kind_of(effect),
                Timestamp(now.0),
                payload,
            )],
        );
        Ok(BuiltOutcome::New {
            append,
            guard: outcome.guard(effect),
            observed_at: outcome.observed_at.clone(),
            identical: Box::new(outcome),
        })
    }

    /// The install lower bound of an activation claim (spec/engine-store.md §6): exactly one
    /// install claim of this stream for the lineage's install action, with an applied outcome
    /// and an applied settlement by the lineage's receipt. Returns the install's observation
    /// time, before which the activation cannot be claimed.
    fn install_lower_bound(
        &self,
        stream: &StreamId,
        lineage: &Json,
    ) -> Result<UtcMicros, AuthorizeError> {
        let corrupt_authority = |m: &str| AuthorizeError::AuthorityCorrupt(m.to_owned());
        let (Some(install_digest), Some(receipt_digest)) = (
            lineage.get_str("install_action_content_digest"),
            lineage.get_str("install_receipt_content_digest"),
        ) else {
            return Err(corrupt_authority(
                "activation action has no installed material lineage",
            ));
        };
        let t = tables_of(GuardEffect::Install);
        let prefix = stream.as_bytes();
        let wanted = parse_sha(install_digest);
        let mut keys = Vec::new();
        let mut undecodable = None;
        // The projection read offers no range scan, so the claims table is scanned and filtered
        // by the stream prefix (spec/engine-store.md, "Known limits"). Each entry carries the
        // claimed action's content digest, so the filter fetches no record (§4).
        self.journal
            .projection_scan(t.claims, |k, v| {
                if k.starts_with(prefix) {
                    match EffectEntry::decode(EffectEntryKind::Claim, v) {
                        Ok(e) if Some(e.action_content_digest) == wanted => keys.push(k.to_vec()),
                        Ok(_) => {}
                        Err(e) => {
                            undecodable = Some((k.to_vec(), e));
                            return ControlFlow::Break(());
                        }
                    }
                }
                ControlFlow::Continue(())
            })
            .map_err(StoreError::from)?;
        if let Some((key, source)) = undecodable {
            let action_id = String::from_utf8_lossy(key.get(32..).unwrap_or_default());
            return Err(StoreError::EffectEntry {
                effect: GuardEffect::Install,
                kind: EffectEntryKind::Claim,
                stream: *stream,
                action_id: action_id.into_owned(),
                source: Box::new(source),
            }
            .into());
        }
        let [key] = keys.as_slice() else {
            return Err(corrupt_authority(
                "activation action has no one exact install claim",
            ));
        };
        let install = self.effect_state(GuardEffect::Install, key)?;
        let observed = match (&install.outcome, &install.settlement) {
            (Some(o), Some(s))
                if o.outcome == GuardMode::Applied
                    && s.outcome == GuardMode::Applied
                    && s.receipt_event_content_digest == receipt_digest =>
            {
                UtcMicros::parse(&o.observed_at).ok()
            }
            _ => None,
        };
        observed.ok_or_else(|| {
            corrupt_authority("activation action lacks a settled install observation")
        })
    }
}

fn claim_kind_of(effect: GuardEffect) -> &'static str {
    match effect {
        GuardEffect::Install => crate::streams::INSTALL_CLAIM_KIND,
        GuardEffect::Activation => crate::streams::ACTIVATION_CLAIM_KIND,
    }
}

fn outcome_kind_of(effect: GuardEffect) -> &'static str {
    match effect {
        GuardEffect::Install => crate::streams::INSTALL_OUTCOME_KIND,
        GuardEffect::Activation => crate::streams::ACTIVATION_OUTCOME_KIND,
    }
}

/// The checks of spec/engine-store.md §6 against the head state: the action is the exact
/// pending install of a schema-v3 capability that is absent, inactive and without material, under
/// the committed plan and the expected catalog and policy.
fn install_is_pending_authority(
    head: &EngineHead,
    action: &HostAction,
    row: &Json,
    descriptor: &Json,
    catalog: &str,
    policy: &str,
) -> bool {
    let state = &head.state;
    let action_json = action.to_cj();
    let mut pending = state
        .pending_effects
        .iter()
        .filter(|p| p.action.action_id == action.action_id);
    let exact_pending = matches!(
        (pending.next(), pending.next()),
        (Some(p), None) if p.effect == EffectKind::Install && p.action.to_cj() == action_json
    );
    let Some(capability_id) = row.get_str("capability_id") else {
        return false;
    };
    let authority = row.get("authority").unwrap_or(&Json::Null);
    let result_material = authority.get("result_material").unwrap_or(&Json::Null);
    let capability_ok = state.capability(capability_id).is_some_and(|c| {
        c.selection == *row
            && c.installation == Installation::Absent
            && c.activation == Activation::Inactive
            && c.current_authorized_material.is_null()
            && c.material_identity == *result_material
            && Some(c.plan_id.as_str()) == action.plan_id.as_deref()
            && c.catalog_snapshot_id == catalog
    });
    let plan_ok = state.committed_plan.as_ref().is_some_and(|p| {
        Some(p.plan_id.as_str()) == action.plan_id.as_deref()
            && p.catalog_snapshot_id == catalog
            && p.capabilities.iter().any(|r| r == row)
    });
    let policy_ok = state.install_policy_snapshot_digest.as_deref() == Some(policy);
    let installer_digest = action
        .payload
        .get_str("installer_digest")
        .unwrap_or_default();
    let payload = object(vec![
        (
            "capability_kind",
            row.get("kind").cloned().unwrap_or(Json::Null),
        ),
        (
            "catalog_identity",
            row.get("catalog_identity").cloned().unwrap_or(Json::Null),
        ),
        ("install_plan_descriptor", descriptor.clone()),
        ("installer_digest", Json::str(installer_digest)),
        ("policy_snapshot_digest", Json::str(policy)),
        ("result_material", result_material.clone()),
        ("schema", Json::str(INSTALL_ACTION_PAYLOAD_SCHEMA_V3)),
    ]);
    let verification = object(vec![
        ("expected_state", Json::str("installed")),
        ("receipt_required", Json::Bool(true)),
        ("receipt_schema", Json::str(INSTALL_RECEIPT_SCHEMA_V3)),
    ]);
    let rollback = object(vec![
        (
            "installer_id",
            descriptor
                .get("installer_id")
                .cloned()
                .unwrap_or(Json::Null),
        ),
        ("kind", Json::str("UninstallCapability")),
    ]);
    let action_ok = action.kind == ActionKind::InstallCapability
        && action.entity_id.as_deref() == Some(capability_id)
        && action.source_digest.as_deref() == row.get_str("catalog_entry_digest")
        && action.catalog_snapshot_id.as_deref() == Some(catalog)
        && action.consent_id.is_some()
        && action.expires_at.is_some()
        && action.required_host_feature.as_deref() == Some("installation")
        && is_sha(installer_digest)
        && action.payload == payload
        && action.verification == verification
        && action.rollback == rollback;
    exact_pending && capability_ok && plan_ok && policy_ok && action_ok
}

/// The checks of spec/engine-store.md §6 against the head state. When the action is the
/// exact pending activation, returns the installed material lineage of the capability, or
/// `Some(None)` for material of origin `catalog`.
fn activation_pending_lineage(
    head: &EngineHead,
    action: &HostAction,
    host_descriptor_digest: &str,
) -> Option<Option<Json>> {
    let state = &head.state;
    let action_json = action.to_cj();
    let mut pending = state
        .pending_effects
        .iter()
        .filter(|p| p.action.action_id == action.action_id);
    let exact_pending = matches!(
        (pending.next(), pending.next()),
        (Some(p), None)
            if matches!(p.effect, EffectKind::Activate | EffectKind::RollbackActivate)
                && p.action.to_cj() == action_json
    );
    let capability = state.capability(action.entity_id.as_deref()?)?;
    let payload = object(vec![
        (
            "authorized_material",
            capability.current_authorized_material.clone(),
        ),
        ("capability_kind", Json::str(capability.kind())),
        (
            "catalog_identity",
            capability
                .selection
                .get("catalog_identity")
                .cloned()
                .unwrap_or(Json::Null),
        ),
        ("material_identity", capability.material_identity.clone()),
        ("schema", Json::str(MATERIAL_ACTION_PAYLOAD_SCHEMA_V3)),
    ]);
    let verification = object(vec![
        ("expected_state", Json::str("active")),
        ("receipt_required", Json::Bool(true)),
        ("receipt_schema", Json::str(MATERIAL_RECEIPT_SCHEMA_V3)),
    ]);
    let ok = exact_pending
        && capability.installation == Installation::Installed
        && capability.activation == Activation::Inactive
        && !capability.current_authorized_material.is_null()
        && state.host_descriptor_digest == host_descriptor_digest
        && action.payload == payload
        && action.verification == verification
        && action.required_host_feature.as_deref() == Some("activation")
        && action.expires_at.is_some();
    if !ok {
        return None;
    }
    let material = &capability.current_authorized_material;
    match material.get_str("origin") {
        Some("catalog") => Some(None),
        _ => material
            .get("installed_material_lineage")
            .filter(|l| l.as_obj().is_some())
            .cloned()
            .map(Some),
    }
}
