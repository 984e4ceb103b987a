//! Install execution (spec/skill-cas.md §9; spec/service.md §7): the one-shot path from a
//! pending schema-v3 install to its settled receipt — claim → physical effect → observation →
//! outcome → receipt — over the engine's exactly-once protocol (spec/engine-store.md §6).
//!
//! The physical actuators are configured once per service ([`InstallActuators`]); today the
//! skill content-addressed store is the only one. Execution is serialized by the data
//! directory's lifecycle lock (one operation at a time per data directory in this process) and
//! by the journal's process lock (one process per data directory), so no per-action lock file is
//! needed: the engine's one-use claim is the final guard.

use std::sync::Arc;

use ctx_model::{
    CapabilityKind, EngineEvent, EventKind, HostAction, InstallExecutionBinding, Json, Transition,
    expected_install_receipt,
};
use ctx_projections::engine::{
    AuthorizeError, Engine, InstallGuard, InstallOutcome, OutcomeError, ProcessError,
};

use super::error::ServiceError;
use crate::failpoint::FailPointFired;
use crate::skill_cas::{
    CasGate, InstallDriverObservation, ObservationState, SkillCasRuntimeConfig,
};

/// How many times a receipt is retried when the stream moved between snapshot and commit.
pub const RECEIPT_ATTEMPTS_MAX: usize = 3;

/// Fail points (feature `failpoints`), named after the seam they sit on.
pub mod failpoints {
    /// Right after the durable install claim, before the driver runs.
    pub const AFTER_CLAIM: &str = "install-after-claim";
    /// Right after the durable outcome, before the receipt.
    pub const AFTER_OUTCOME: &str = "install-after-outcome";
    /// Right after the receipt settled, before the report is returned.
    pub const AFTER_RECEIPT: &str = "install-after-receipt";
}

/// The physical install actuators of a service, resolved by (installer id, capability kind).
#[derive(Debug, Clone, Default)]
pub struct InstallActuators {
    skill: Option<Arc<SkillCasRuntimeConfig>>,
    /// The material store of agents and MCP servers ([`crate::skill_cas::CasGate::Materials`]).
    material: Option<Arc<SkillCasRuntimeConfig>>,
}

impl InstallActuators {
    pub fn new(skill: Option<Arc<SkillCasRuntimeConfig>>) -> InstallActuators {
        InstallActuators {
            skill,
            material: None,
        }
    }

    /// Adds the material store that installs agents and MCP servers.
    pub fn with_material_store(
        mut self,
        material: Option<Arc<SkillCasRuntimeConfig>>,
    ) -> InstallActuators {
        self.material = material;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.skill.is_none() && self.material.is_none()
    }

    /// The store that installs what `descriptor` describes: the skill CAS for a skill it admits,
    /// the material store for agents, MCP servers and skills whose flags need the person's
    /// consent (spec/skill-cas.md §4). A missing flag counts as set, as at the gate.
    fn store_for(&self, descriptor: &Json) -> Option<&Arc<SkillCasRuntimeConfig>> {
        let kind = descriptor.get_str("kind").unwrap_or_default();
        let pe = descriptor.get("permission_expansion") != Some(&Json::Bool(false));
        let cr = descriptor.get("credential_requirement") != Some(&Json::Bool(false));
        match CapabilityKind::parse(kind)? {
            CapabilityKind::Skill if CasGate::Skills.admits(kind, pe, cr) => self.skill.as_ref(),
            // Without a material store a flagged skill meets the skill CAS, whose gate refuses it
            // after the consent the install policy demands (the reference's behaviour).
            CapabilityKind::Skill => self.material.as_ref().or(self.skill.as_ref()),
            CapabilityKind::Agent | CapabilityKind::McpServer => self.material.as_ref(),
            CapabilityKind::Harness => None,
        }
    }

    /// The execution binding of the actuator that installs `action`
    /// (spec/service.md §7 `resolve_install_execution_binding`): resolved twice, from the
    /// configuration and from a fresh capture of the target, which must agree. Never runs a driver.
    pub fn resolve_binding(
        &self,
        action: &HostAction,
        descriptor: &Json,
    ) -> Result<InstallExecutionBinding, ServiceError> {
        if self.is_empty() {
            return Err(ServiceError::NoActuator);
        }
        let kind = descriptor.get_str("kind").unwrap_or_default();
        if action.payload.get_str("capability_kind") != Some(kind) {
            return Err(ServiceError::Execution(
                "install action and descriptor capability kinds differ".into(),
            ));
        }
        let Some(skill) = self.store_for(descriptor) else {
            return Err(ServiceError::Execution(
                "no trusted driver matches the install descriptor kind".into(),
            ));
        };
        if descriptor.get_str("installer_id") != Some(skill.installer_id()) {
            return Err(ServiceError::Execution(
                "no trusted driver matches the install descriptor kind".into(),
            ));
        }
        let Some(driver_digest) = action.payload.get_str("installer_digest") else {
            return Err(ServiceError::Execution(
                "trusted driver identity does not match the journal".into(),
            ));
        };
        let first = skill
            .binding(driver_digest)
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        let again = skill
            .binding(driver_digest)
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        if first != again {
            return Err(ServiceError::Execution(
                "composition physical installation actuator identity changed".into(),
            ));
        }
        Ok(first)
    }

    fn store(&self, descriptor: &Json) -> Result<&SkillCasRuntimeConfig, ServiceError> {
        self.store_for(descriptor)
            .map(Arc::as_ref)
            .ok_or(ServiceError::NoActuator)
    }
}

/// What one execution did. Carries no path, command, content, credential or token.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "the whole report is kept for callers; the crate's own callers read only the outcome, \
              settlement and binding digest since `managed` stopped being a public module"
)]
pub struct InstallExecutionReport {
    pub outcome: InstallOutcome,
    pub claim_was_new: bool,
    pub settled: bool,
    pub execution_binding_digest: String,
    pub verification_digest: Option<String>,
    pub transition: Option<Transition>,
}

/// The selection, descriptor and digests an install is authorized against.
#[derive(Debug)]
pub struct InstallAuthority<'a> {
    pub action: &'a HostAction,
    pub selection_row: &'a Json,
    pub descriptor: &'a Json,
    pub catalog_snapshot_digest: &'a str,
    pub policy_digest: &'a str,
}

/// Why an execution stopped before a report.
#[derive(Debug)]
pub enum ExecuteError {
    /// The install expired before anyone claimed it: retire it instead.
    ClaimExpired,
    Service(ServiceError),
}

impl From<ServiceError> for ExecuteError {
    fn from(e: ServiceError) -> ExecuteError {
        ExecuteError::Service(e)
    }
}

impl From<FailPointFired> for ExecuteError {
    fn from(e: FailPointFired) -> ExecuteError {
        ExecuteError::Service(e.into())
    }
}

fn execution(message: &str) -> ExecuteError {
    ExecuteError::Service(ServiceError::Execution(message.to_owned()))
}

/// Executes one install (spec/service.md §7).
///
/// The driver's `apply_once` runs only when this call made the claim; after a crash between
/// claim and outcome a later call only reconciles (observes) the target, so the physical effect
/// happens at most once per action whatever fails.
pub fn execute_install(
    engine: &Engine,
    actuators: &InstallActuators,
    authority: &InstallAuthority<'_>,
    binding: &InstallExecutionBinding,
) -> Result<InstallExecutionReport, ExecuteError> {
    let action = authority.action;
    let binding_digest = binding.binding_digest();
    let status = engine
        .install_execution_status(action)
        .map_err(|e| ServiceError::Execution(e.to_string()))?;
    if status
        .execution_binding_digest
        .as_deref()
        .is_some_and(|d| d != binding_digest)
    {
        return Err(execution(
            "durable claim names a different driver or target",
        ));
    }
    if status.settled {
        return settled_report(status.outcome, binding_digest);
    }
    let claim_was_new = if status.claimed {
        false
    } else {
        match engine.authorize_install(
            action,
            authority.selection_row,
            authority.descriptor,
            authority.catalog_snapshot_digest,
            authority.policy_digest,
            binding,
        ) {
            Ok(()) => true,
            Err(AuthorizeError::AlreadyClaimed { .. }) => false,
            Err(AuthorizeError::ClaimExpired { .. }) => return Err(ExecuteError::ClaimExpired),
            Err(e) => return Err(ExecuteError::Service(ServiceError::Authorize(e))),
        }
    };
    crate::failpoint::fail_point!(failpoints::AFTER_CLAIM);
    let status = engine
        .install_execution_status(action)
        .map_err(|e| ServiceError::Execution(e.to_string()))?;
    if !status.claimed || status.execution_binding_digest.as_deref() != Some(&binding_digest) {
        return Err(execution("install claim was not durably bound"));
    }
    let guard = match engine
        .recorded_install_guard(action)
        .map_err(|e| ServiceError::Execution(e.to_string()))?
    {
        Some(guard) => guard,
        None => {
            // The claim is durable before the install runs (spec/journal.md §14, U2).
            engine
                .journal()
                .make_durable()
                .map_err(ServiceError::Durability)?;
            let observation = observe(actuators, authority, binding, claim_was_new)?;
            let outcome = match observation.as_ref().map(|o| o.state) {
                Some(ObservationState::InstalledExact) => InstallOutcome::Applied,
                Some(ObservationState::Absent) => InstallOutcome::Failed,
                _ => {
                    // Nothing is recorded: the claim stays burned and a later call reconciles.
                    return Ok(InstallExecutionReport {
                        outcome: InstallOutcome::Indeterminate,
                        claim_was_new,
                        settled: false,
                        execution_binding_digest: binding_digest,
                        verification_digest: observation.map(|o| o.verification_digest),
                        transition: None,
                    });
                }
            };
            let observation =
                observation.ok_or_else(|| execution("install observation vanished"))?;
            let observed = observation.observed_material_identity_digest.as_deref();
            let verification = observation.verification_digest.as_str();
            if crate::failpoint::failpoint_fired(failpoints::AFTER_OUTCOME) {
                // The two-step path, stopped between its steps (a crash after the outcome).
                engine
                    .record_install_outcome(action, binding, outcome, observed, verification)
                    .map_err(|e| ServiceError::Execution(e.to_string()))?;
                return Err(ExecuteError::Service(
                    FailPointFired::after(
                        failpoints::AFTER_OUTCOME,
                        "outcome recorded, receipt not committed",
                    )
                    .into(),
                ));
            }
            // The outcome and its receipt commit in one append (one fsync).
            for _ in 0..RECEIPT_ATTEMPTS_MAX {
                let revision = engine
                    .snapshot(&action.scope)
                    .map_err(ServiceError::from)?
                    .revision();
                match engine.record_install_outcome_and_receipt(
                    action,
                    binding,
                    outcome,
                    observed,
                    verification,
                    |guard, observed_at| install_receipt(action, guard, revision, observed_at),
                ) {
                    Ok((_, Some(transition))) => {
                        crate::failpoint::fail_point!(failpoints::AFTER_RECEIPT);
                        return Ok(InstallExecutionReport {
                            outcome,
                            claim_was_new,
                            settled: true,
                            execution_binding_digest: binding_digest,
                            verification_digest: Some(observation.verification_digest.clone()),
                            transition: Some(transition),
                        });
                    }
                    // An identical outcome was recorded before: settle it.
                    Ok((guard, None)) => {
                        return settle(engine, action, &guard, binding_digest, claim_was_new);
                    }
                    Err(OutcomeError::Receipt(e))
                        if matches!(*e, ProcessError::RevisionConflict { .. }) => {}
                    Err(e) => return Err(execution_owned(e.to_string())),
                }
            }
            return Err(execution("install receipt settlement remained contended"));
        }
    };
    settle(engine, action, &guard, binding_digest, claim_was_new)
}

fn execution_owned(message: String) -> ExecuteError {
    ExecuteError::Service(ServiceError::Execution(message))
}

/// Connects the driver and observes the target; applies first only for a new claim. Any driver
/// failure is an indeterminate observation (`None`), never an error: the claim is burned.
fn observe(
    actuators: &InstallActuators,
    authority: &InstallAuthority<'_>,
    binding: &InstallExecutionBinding,
    claim_was_new: bool,
) -> Result<Option<InstallDriverObservation>, ExecuteError> {
    let skill = actuators.store(authority.descriptor)?;
    let Ok(mut driver) = skill.connect(authority.action, authority.descriptor, binding) else {
        return Ok(None);
    };
    if claim_was_new {
        // A failed apply is observed by reconcile (as indeterminate in this process).
        let _ = driver.apply_once();
    }
    Ok(Some(driver.reconcile()))
}

fn settled_report(
    outcome: Option<InstallOutcome>,
    binding_digest: String,
) -> Result<InstallExecutionReport, ExecuteError> {
    let outcome = match outcome {
        Some(InstallOutcome::Applied) => InstallOutcome::Applied,
        // An indeterminate outcome settles as failed.
        Some(InstallOutcome::Failed | InstallOutcome::Indeterminate) => InstallOutcome::Failed,
        None => return Err(execution("settled install has no valid execution outcome")),
    };
    Ok(InstallExecutionReport {
        outcome,
        claim_was_new: false,
        settled: true,
        execution_binding_digest: binding_digest,
        verification_digest: None,
        transition: None,
    })
}

/// The receipt (spec/service.md §7): up to [`RECEIPT_ATTEMPTS_MAX`] attempts against a
/// moving head; the receipt's event id derives from the outcome digest, so a receipt committed
/// by another process is this one's idempotent replay.
fn settle(
    engine: &Engine,
    action: &HostAction,
    guard: &InstallGuard,
    binding_digest: String,
    claim_was_new: bool,
) -> Result<InstallExecutionReport, ExecuteError> {
    let status = engine
        .install_execution_status(action)
        .map_err(|e| ServiceError::Execution(e.to_string()))?;
    let Some(observed_at) = status.observed_at.clone() else {
        return Err(execution(
            "durable execution outcome has no observation time",
        ));
    };
    for _ in 0..RECEIPT_ATTEMPTS_MAX {
        let status = engine
            .install_execution_status(action)
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        if status.settled {
            return settled_report(status.outcome, binding_digest);
        }
        let snapshot = engine.snapshot(&action.scope).map_err(ServiceError::from)?;
        let receipt = install_receipt(action, guard, snapshot.revision(), &observed_at);
        match engine.process_install_receipt(&receipt, guard) {
            Ok(transition) => {
                crate::failpoint::fail_point!(failpoints::AFTER_RECEIPT);
                return Ok(InstallExecutionReport {
                    outcome: match guard.outcome() {
                        InstallOutcome::Applied => InstallOutcome::Applied,
                        _ => InstallOutcome::Failed,
                    },
                    claim_was_new,
                    settled: true,
                    execution_binding_digest: binding_digest,
                    verification_digest: None,
                    transition: Some(transition),
                });
            }
            Err(ProcessError::RevisionConflict { .. }) => {}
            Err(e) => return Err(ExecuteError::Service(ServiceError::Engine(e))),
        }
    }
    Err(execution("install receipt settlement remained contended"))
}

/// The install receipt event (spec/service.md §7).
pub fn install_receipt(
    action: &HostAction,
    guard: &InstallGuard,
    revision: u64,
    observed_at: &str,
) -> EngineEvent {
    let event_id = format!("ctx-install-receipt-{}", guard.execution_outcome_digest());
    if guard.outcome() == InstallOutcome::Applied {
        action_receipt(
            action,
            &event_id,
            revision,
            observed_at,
            Ok(expected_install_receipt(action)),
        )
    } else {
        action_receipt(
            action,
            &event_id,
            revision,
            observed_at,
            Err("install-driver-verified-absent"),
        )
    }
}

/// The receipt event of a host action at `revision`: `ActionApplied` with the exact
/// `verification` the reducer demands (`Ok`), or `ActionFailed` with an error code (`Err`). It
/// names the action (id, kind, content digest, precondition revision) and inherits its privacy,
/// plan (correlation) and id (causation).
pub(crate) fn action_receipt(
    action: &HostAction,
    event_id: &str,
    revision: u64,
    occurred_at: &str,
    result: Result<Json, &str>,
) -> EngineEvent {
    let mut fields = vec![
        ("action_id", Json::str(&action.action_id)),
        ("action_kind", Json::str(action.kind.as_str())),
        ("action_content_digest", Json::str(action.content_digest())),
        (
            "action_precondition_revision",
            Json::from(action.precondition_revision),
        ),
    ];
    let kind = match result {
        Ok(verification) => {
            fields.push(("verification", verification));
            EventKind::ActionApplied
        }
        Err(code) => {
            fields.push(("error", Json::object([("code", Json::str(code))])));
            EventKind::ActionFailed
        }
    };
    let mut event = EngineEvent::bare(event_id, kind, action.scope.clone(), revision, occurred_at);
    event.payload = Json::object(fields);
    event.privacy = action.privacy;
    event.correlation_id = action.plan_id.clone();
    event.causation_id = Some(action.action_id.clone());
    event
}
