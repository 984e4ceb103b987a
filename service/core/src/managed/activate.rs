//! Activation and deactivation of a query's capabilities through a host's actuator
//! (spec/service.md §12): the engine's pending `ActivateCapability` / `DeactivateCapability`
//! actions of one query are carried out on the host's files and settled with their receipts.
//!
//! An activation follows the engine's exactly-once protocol (spec/engine-store.md §6): a durable
//! claim bound to the actuator, the physical step (only with a claim this call made, or to recover
//! one whose outcome is missing), the observed outcome, and the `ActionApplied` receipt carrying
//! the outcome's observation time. An activation the actuator cannot verify records nothing: its
//! claim lapses at the action's expiry and the engine retires it. A deactivation has no claim: its
//! receipt is the record, `ActionApplied` when the host no longer reads the capability,
//! `ActionFailed` when the actuator refused (a person's edit is never destroyed).

use ctx_model::{
    ActionKind, EffectKind, EngineEvent, EventKind, HostAction, InstallExecutionBinding,
    ProtocolError, SessionStatus, expected_material_receipt,
};
use ctx_projections::engine::{ActivationGuard, AuthorizeError, Engine, ProcessError};

use super::error::ServiceError;
use super::install::{RECEIPT_ATTEMPTS_MAX, action_receipt};
use super::service::QueryService;

/// How many receipts one call commits at most: every receipt may emit the next action (an
/// activation frees capacity, a deactivation makes room), and at most five capabilities are active.
pub const ACTIVATION_STEPS_MAX: usize = 16;

/// What a host actuator found after it acted on an action's capability.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActuatorObservation {
    /// The host reads exactly the authorized material (activation) or no longer reads it
    /// (deactivation); the digest names what was read.
    Applied { verification_digest: String },
    /// The actuator verifiably did nothing (for example a person's own file is at the target).
    Refused { reason: String },
    /// The actuator cannot say what the host reads.
    Indeterminate { reason: String },
}

/// One host's activation actuator as the service drives it. Implementations touch only the host
/// files of their host; the service owns the journal protocol around them.
pub trait ActivationDriver: std::fmt::Debug {
    /// The execution binding of this actuator (driver identity, host identity, target identity);
    /// the durable claim names it, so a claim made by another host's actuator is never resumed
    /// here.
    fn binding(&self) -> Result<InstallExecutionBinding, ProtocolError>;
    /// Makes the action's capability visible to the host, or, when `apply` is false (recovering
    /// a claim made earlier), only observes whether it is.
    fn activate(&self, action: &HostAction, apply: bool) -> ActuatorObservation;
    /// Removes the action's capability from the host when the host still reads exactly what
    /// ctx activated.
    fn deactivate(&self, action: &HostAction) -> ActuatorObservation;
    /// True when the driver appends an intent of its own to this service's journal and makes
    /// it durable before it changes the host (the host actuator's ledger, spec/activation.md
    /// §4): the engine's claim, committed before that intent, becomes durable with it, so the
    /// engine does not sync the claim separately (spec/journal.md §14, U2). The default is
    /// false: the claim is made durable before the driver is called.
    fn makes_its_intent_durable(&self) -> bool {
        false
    }
}

/// What one [`QueryService::advance_activations`] did, by capability id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ActivationReport {
    pub activated: Vec<String>,
    pub deactivated: Vec<String>,
    /// Capability id and the actuator's sentence.
    pub refused: Vec<(String, String)>,
    /// Claimed, but what the host reads is unknown: the claim lapses at its expiry.
    pub indeterminate: Vec<(String, String)>,
}

impl ActivationReport {
    pub fn is_empty(&self) -> bool {
        self.activated.is_empty()
            && self.deactivated.is_empty()
            && self.refused.is_empty()
            && self.indeterminate.is_empty()
    }
}

impl QueryService {
    /// Carries out the pending activations and deactivations of the query `query_ref` with
    /// `driver` until none is left that it can act on (at most [`ACTIVATION_STEPS_MAX`]).
    pub fn advance_activations(
        &self,
        query_ref: &str,
        driver: &dyn ActivationDriver,
    ) -> Result<ActivationReport, ServiceError> {
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let runtime = self.runtime(&mut state)?;
        let record = runtime.store.load(query_ref)?;
        let composition = self.record_composition(runtime, &record)?;
        let engine = composition.engine();
        let Some(host_descriptor) = record.session_started().host_descriptor_digest.clone() else {
            return Err(ServiceError::Execution(
                "the query's session names no host descriptor".into(),
            ));
        };
        let binding = driver
            .binding()
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        let scope = &record.decision_event().scope;
        let mut report = ActivationReport::default();
        // Actions this call already acted on without settling them (indeterminate or refused):
        // they are not retried within the call.
        let mut done: Vec<String> = Vec::new();
        for _ in 0..ACTIVATION_STEPS_MAX {
            let snapshot = engine.snapshot(scope)?;
            let Some(state) = snapshot.state() else {
                return Ok(report);
            };
            let next = state.pending_effects.iter().find(|p| {
                !done.contains(&p.action.action_id)
                    && matches!(
                        p.effect,
                        EffectKind::Activate
                            | EffectKind::RollbackActivate
                            | EffectKind::Deactivate
                    )
            });
            let Some(pending) = next else {
                return Ok(report);
            };
            let action = pending.action.clone();
            let id = action.entity_id.clone().unwrap_or_default();
            done.push(action.action_id.clone());
            match action.kind {
                ActionKind::ActivateCapability => {
                    match activate(engine, driver, &action, &binding, &host_descriptor)? {
                        Step::Settled => report.activated.push(id),
                        Step::Refused(why) => report.refused.push((id, why)),
                        Step::Indeterminate(why) => report.indeterminate.push((id, why)),
                        Step::Skipped => {}
                    }
                }
                ActionKind::DeactivateCapability => {
                    let now = self.now()?;
                    match deactivate(engine, driver, &action, &now.to_string())? {
                        Step::Settled => report.deactivated.push(id),
                        Step::Refused(why) => report.refused.push((id, why)),
                        Step::Indeterminate(why) => report.indeterminate.push((id, why)),
                        Step::Skipped => {}
                    }
                }
                _ => {}
            }
        }
        Ok(report)
    }
}

impl QueryService {
    /// Ends the engine session of the query `query_ref` (`SessionEnded`, event id
    /// `ctx-session-ended:<query ref>`), after which reconcile deactivates its active
    /// capabilities one per revision; [`QueryService::advance_activations`] carries them
    /// out. Returns false when the session had ended already.
    pub fn end_session(&self, query_ref: &str) -> Result<bool, ServiceError> {
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let runtime = self.runtime(&mut state)?;
        let record = runtime.store.load(query_ref)?;
        let composition = self.record_composition(runtime, &record)?;
        let engine = composition.engine();
        let scope = &record.decision_event().scope;
        let event_id = format!("ctx-session-ended:{query_ref}");
        for _ in 0..RECEIPT_ATTEMPTS_MAX {
            let snapshot = engine.snapshot(scope)?;
            match snapshot.state() {
                None => return Ok(false),
                Some(s) if s.session_status == SessionStatus::Ended => return Ok(false),
                Some(_) => {}
            }
            let now = self.now()?;
            let mut event = EngineEvent::bare(
                &event_id,
                EventKind::SessionEnded,
                scope.clone(),
                snapshot.revision(),
                &now.to_string(),
            );
            event.privacy = record.decision_event().privacy;
            match engine.process(&event, None) {
                Ok(_) => return Ok(true),
                Err(ProcessError::RevisionConflict { .. }) => {}
                Err(e) => return Err(ServiceError::Engine(e)),
            }
        }
        Err(execution("the session end remained contended"))
    }
}

enum Step {
    Settled,
    Refused(String),
    Indeterminate(String),
    /// Not this driver's, expired, or settled by someone else meanwhile.
    Skipped,
}

fn execution(e: impl std::fmt::Display) -> ServiceError {
    ServiceError::Execution(e.to_string())
}

/// Makes what the engine recorded durable before `driver` changes the host (spec/journal.md §14,
/// U2), unless the driver's own intent sync covers it.
fn durable_before_host_change(
    engine: &Engine,
    driver: &dyn ActivationDriver,
) -> Result<(), ServiceError> {
    if driver.makes_its_intent_durable() {
        return Ok(());
    }
    engine
        .journal()
        .make_durable()
        .map_err(ServiceError::Durability)
}

/// One activation: claim → actuator → outcome → receipt.
fn activate(
    engine: &Engine,
    driver: &dyn ActivationDriver,
    action: &HostAction,
    binding: &InstallExecutionBinding,
    host_descriptor: &str,
) -> Result<Step, ServiceError> {
    let status = engine
        .activation_execution_status(action)
        .map_err(execution)?;
    if status.settled {
        return Ok(Step::Skipped);
    }
    if status
        .execution_binding_digest
        .as_deref()
        .is_some_and(|d| d != binding.binding_digest())
    {
        // Another host's actuator claimed it; only that actuator may finish it.
        return Ok(Step::Skipped);
    }
    let claim_was_new = if status.claimed {
        false
    } else {
        match engine.authorize_activation(action, binding, host_descriptor) {
            Ok(()) => true,
            Err(AuthorizeError::AlreadyClaimed { .. }) => false,
            Err(AuthorizeError::ClaimExpired { .. }) => return Ok(Step::Skipped),
            Err(e) => return Err(ServiceError::Authorize(e)),
        }
    };
    crate::failpoint::fail_point!(failpoints::AFTER_CLAIM);
    let Some(material) = action
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
    else {
        return Err(execution("activation action names no material identity"));
    };
    durable_before_host_change(engine, driver)?;
    let verification = match driver.activate(action, claim_was_new) {
        ActuatorObservation::Applied {
            verification_digest,
        } => verification_digest,
        ActuatorObservation::Refused { reason } => return Ok(Step::Refused(reason)),
        ActuatorObservation::Indeterminate { reason } => return Ok(Step::Indeterminate(reason)),
    };
    let guard = engine
        .record_activation_outcome(action, binding, material, &verification)
        .map_err(execution)?;
    crate::failpoint::fail_point!(failpoints::AFTER_OUTCOME);
    settle_activation(engine, action, &guard)
}

/// Commits the activation's receipt at its outcome's observation time, against a moving head.
fn settle_activation(
    engine: &Engine,
    action: &HostAction,
    guard: &ActivationGuard,
) -> Result<Step, ServiceError> {
    let status = engine
        .activation_execution_status(action)
        .map_err(execution)?;
    let Some(observed_at) = status.observed_at else {
        return Err(execution("activation outcome has no observation time"));
    };
    for _ in 0..RECEIPT_ATTEMPTS_MAX {
        if engine
            .activation_execution_status(action)
            .map_err(execution)?
            .settled
        {
            return Ok(Step::Settled);
        }
        let revision = engine.snapshot(&action.scope)?.revision();
        let receipt = material_receipt(
            action,
            &format!(
                "ctx-activation-receipt-{}",
                guard.execution_outcome_digest()
            ),
            EventKind::ActionApplied,
            revision,
            &observed_at,
        );
        match engine.process_activation_receipt(&receipt, guard) {
            Ok(_) => return Ok(Step::Settled),
            Err(ProcessError::RevisionConflict { .. }) => {}
            Err(e) => return Err(ServiceError::Engine(e)),
        }
    }
    Err(execution(
        "activation receipt settlement remained contended",
    ))
}

/// One deactivation: the actuator, then the receipt (applied, or failed when it refused).
fn deactivate(
    engine: &Engine,
    driver: &dyn ActivationDriver,
    action: &HostAction,
    now: &str,
) -> Result<Step, ServiceError> {
    durable_before_host_change(engine, driver)?;
    let (kind, step) = match driver.deactivate(action) {
        ActuatorObservation::Applied { .. } => (EventKind::ActionApplied, Step::Settled),
        ActuatorObservation::Refused { reason } => (EventKind::ActionFailed, Step::Refused(reason)),
        // Nothing is recorded: a later call looks again.
        ActuatorObservation::Indeterminate { reason } => return Ok(Step::Indeterminate(reason)),
    };
    let event_id = format!(
        "ctx-deactivation-receipt-{}",
        ctx_model::sha256_hex(&action.action_id)
    );
    for _ in 0..RECEIPT_ATTEMPTS_MAX {
        let revision = engine.snapshot(&action.scope)?.revision();
        let receipt = material_receipt(action, &event_id, kind, revision, now);
        match engine.process(&receipt, None) {
            Ok(_) => return Ok(step),
            Err(ProcessError::RevisionConflict { .. }) => {}
            Err(e) => return Err(ServiceError::Engine(e)),
        }
    }
    Err(execution("deactivation receipt remained contended"))
}

/// The receipt of a material action: `ActionApplied` with the exact verification the reducer
/// demands, or `ActionFailed` with the refusal's code.
fn material_receipt(
    action: &HostAction,
    event_id: &str,
    kind: EventKind,
    revision: u64,
    occurred_at: &str,
) -> EngineEvent {
    let result = if kind == EventKind::ActionApplied {
        Ok(expected_material_receipt(action))
    } else {
        Err("host-target-conflict")
    };
    action_receipt(action, event_id, revision, occurred_at, result)
}

/// Fail points (feature `failpoints`) of the activation seams.
pub mod failpoints {
    /// Right after the durable activation claim, before the actuator runs.
    pub const AFTER_CLAIM: &str = "activation-after-claim";
    /// Right after the durable activation outcome, before the receipt.
    pub const AFTER_OUTCOME: &str = "activation-after-outcome";
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::cell::RefCell;

    use super::*;
    use crate::data_dir::Layout;
    use crate::managed::{DesiredSetRequest, QueryRequest};
    use crate::policy::InstallConsentPolicy;
    use crate::runtime::{Runtime, WorkRequest, logical_id};
    use ctx_model::{UtcMicros, sha256_hex};

    /// An actuator that records what it was asked and answers as told.
    #[derive(Debug, Default)]
    struct Recorder {
        calls: RefCell<Vec<(String, bool)>>,
        refuse: bool,
        refuse_deactivation: bool,
    }

    impl ActivationDriver for Recorder {
        fn binding(&self) -> Result<InstallExecutionBinding, ProtocolError> {
            InstallExecutionBinding::new(
                "ctx-test-actuator",
                &sha256_hex("driver"),
                &sha256_hex("host"),
                &sha256_hex("target"),
            )
        }
        fn activate(&self, action: &HostAction, apply: bool) -> ActuatorObservation {
            let id = action.entity_id.clone().unwrap_or_default();
            self.calls.borrow_mut().push((id.clone(), apply));
            if self.refuse {
                return ActuatorObservation::Refused {
                    reason: format!("{id} is a person's own"),
                };
            }
            ActuatorObservation::Applied {
                verification_digest: sha256_hex(&format!("seen {id}")),
            }
        }
        fn deactivate(&self, _: &HostAction) -> ActuatorObservation {
            if self.refuse_deactivation {
                return ActuatorObservation::Refused {
                    reason: "the person edited it".into(),
                };
            }
            ActuatorObservation::Applied {
                verification_digest: sha256_hex("gone"),
            }
        }
    }

    /// A data directory with the sample catalog and a plan for `prompt` whose catalog-loaded
    /// selections are chosen; returns the runtime and the query ref.
    fn chosen_loads(dir: &std::path::Path, prompt: &str) -> (Runtime, String, Vec<String>) {
        let layout = Layout::new(dir);
        crate::ingest_catalog(&layout, None).unwrap();
        let runtime = Runtime::open(&layout, UtcMicros(1_800_000_000_000_000)).unwrap();
        runtime
            .policy_store()
            .persist(&InstallConsentPolicy::safe_default())
            .unwrap();
        let work = WorkRequest {
            session_id: "claude:s-1".into(),
            workspace: "/work/p".into(),
            prompt: prompt.into(),
            signals: vec![],
            languages: vec![],
            requested_limit: 5,
        };
        let work_ref = runtime.observe_work(&work).unwrap();
        let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref).unwrap();
        let prepared = runtime.service().prepare(&query).unwrap();
        let loads: Vec<String> = prepared
            .prepared()
            .selections()
            .iter()
            .filter(|s| s.actionability() == "load")
            .map(|s| s.capability_id().to_owned())
            .collect();
        assert!(
            !loads.is_empty(),
            "the prompt plans catalog-loaded capabilities"
        );
        let ids: Vec<&str> = loads.iter().map(String::as_str).collect();
        let request =
            DesiredSetRequest::new(prepared.query_ref(), &logical_id("choice", "c"), &ids, None)
                .unwrap();
        runtime.service().set_desired(&request).unwrap();
        let query_ref = prepared.query_ref().to_owned();
        (runtime, query_ref, loads)
    }

    #[test]
    fn chosen_catalog_capabilities_are_activated_once_and_settled() {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, query_ref, loads) = chosen_loads(dir.path(), "rust tests with cargo");
        let driver = Recorder::default();
        let report = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        let mut activated = report.activated.clone();
        activated.sort();
        let mut expected = loads.clone();
        expected.sort();
        assert_eq!(activated, expected, "{report:?}");
        assert!(driver.calls.borrow().iter().all(|(_, apply)| *apply));
        // Settled: a second pass acts on nothing.
        let again = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(driver.calls.borrow().len(), loads.len());
    }

    #[test]
    fn ending_the_session_deactivates_what_was_activated() {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, query_ref, loads) = chosen_loads(dir.path(), "rust tests with cargo");
        let driver = Recorder::default();
        let report = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert_eq!(report.activated.len(), loads.len());
        assert!(runtime.service().end_session(&query_ref).unwrap());
        assert!(!runtime.service().end_session(&query_ref).unwrap(), "once");
        let report = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        let mut deactivated = report.deactivated.clone();
        deactivated.sort();
        let mut expected = loads.clone();
        expected.sort();
        assert_eq!(deactivated, expected, "{report:?}");
        let again = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn a_refused_deactivation_is_a_failed_receipt_and_is_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, query_ref, loads) = chosen_loads(dir.path(), "rust tests with cargo");
        let driver = Recorder {
            refuse_deactivation: true,
            ..Recorder::default()
        };
        runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert!(runtime.service().end_session(&query_ref).unwrap());
        let report = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert!(report.deactivated.is_empty(), "{report:?}");
        assert_eq!(report.refused.len(), loads.len(), "{report:?}");
        // The failures are recorded: the engine blocks those deactivations.
        let again = runtime
            .service()
            .advance_activations(&query_ref, &Recorder::default())
            .unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn a_refused_activation_records_nothing_and_is_not_retried_in_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let (runtime, query_ref, loads) = chosen_loads(dir.path(), "rust tests with cargo");
        let driver = Recorder {
            refuse: true,
            ..Recorder::default()
        };
        let report = runtime
            .service()
            .advance_activations(&query_ref, &driver)
            .unwrap();
        assert!(report.activated.is_empty());
        assert_eq!(report.refused.len(), loads.len().min(5), "{report:?}");
        // The claims stand (the actuator may have run); a later call only observes.
        let later = Recorder::default();
        let report = runtime
            .service()
            .advance_activations(&query_ref, &later)
            .unwrap();
        assert_eq!(report.activated.len(), loads.len().min(5), "{report:?}");
        assert!(later.calls.borrow().iter().all(|(_, apply)| !*apply));
    }
}
