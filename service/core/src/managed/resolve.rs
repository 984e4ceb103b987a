//! `recover_consent` and `resolve_consent` (spec/service.md §10): reconcile a
//! published consent challenge without a human, or commit a fresh signed human decision.

use ctx_journal::StreamAppend;
use ctx_model::{EngineEvent, EventKind, Json, Transition, cja_digest, is_sha};
use ctx_projections::consent_store::{
    ChallengeRecord, ChallengeState, ConsentStore, DecisionEvidence, HumanDecision,
    InstallConsentChallenge, ReconciliationOutcome, Reservation, SignedHumanDecisionAssertion,
};
use ctx_projections::engine::{Engine, ProcessError, ProcessWithError};

use super::authority::{
    AuthorityChecks, ConsentAuthority, DecisionIdentity, classify_settled_install,
    consent_authority, consent_owner, descriptor_of, envelope_event, interactive_decision_event,
    is_collision, require_pending_consent_head, resolution,
};
use super::error::ServiceError;
use super::failpoints;
use super::install::{ExecuteError, InstallAuthority, execute_install};
use super::reconcile::{check_install_result, exact_parent_plan};
use super::request::QueryInput;
use super::resolution::{ConsentResolutionResult, outcome};
use super::service::{QueryService, Runtime};
use crate::failpoint::FailPointFired;

fn broker_missing() -> ServiceError {
    ServiceError::Identity("managed consent continuation requires captured broker authorities")
}

impl QueryService {
    /// Reconciles a published consent challenge without a human (spec/service.md §10): a pending
    /// challenge still needs a fresh decision; an expired one is retired durably; a decided one
    /// is reconciled against the journal and finished. Never mints a decision the human did not
    /// sign.
    pub fn recover_consent(
        &self,
        challenge_digest: &str,
    ) -> Result<ConsentResolutionResult, ServiceError> {
        if !is_sha(challenge_digest) {
            return Err(ServiceError::Invalid(
                "challenge_digest must be a lowercase SHA-256 digest".into(),
            ));
        }
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let runtime = self.runtime(&mut state)?;
        let (Some(store), Some(broker)) = (runtime.consent.as_ref(), self.config.consent.as_ref())
        else {
            return Err(broker_missing());
        };
        let now = self.now()?;
        let record = store.get_by_challenge_digest(
            challenge_digest,
            &broker.workspace_identity_digest,
            &broker.release_root_digest,
            now,
        )?;
        let challenge = record.challenge();
        let (parent, desired) = consent_owner(&runtime.store, challenge)?;
        let composition = self.record_composition(runtime, &parent)?;
        let engine = composition.engine();
        let pending = record.state() == ChallengeState::Pending;
        let policy = if pending {
            Some(self.current_policy()?)
        } else {
            None
        };
        let checks = AuthorityChecks {
            require_pending_head: false,
            policy: policy.as_ref(),
            require_current_policy: pending,
            // Authority-free unless pending: a decided challenge is recovered without touching
            // the physical target until an exact pending install needs it (below).
            actuators: pending.then_some(&self.actuators),
        };
        let authority = match consent_authority(engine, challenge, &parent, desired, checks) {
            Ok(a) => a,
            Err(ServiceError::DesiredSuperseded(_)) => {
                let current = engine.snapshot(challenge.scope())?;
                return resolution(
                    engine,
                    challenge,
                    &current,
                    outcome::SUPERSEDED,
                    "desired-install-authority-was-replaced",
                    false,
                );
            }
            Err(e) => return Err(e),
        };
        match record.state() {
            ChallengeState::Pending => {
                require_pending_consent_head(&authority)?;
                resolution(
                    engine,
                    challenge,
                    &authority.current,
                    outcome::CONSENT_REQUIRED,
                    "fresh-human-decision-required",
                    true,
                )
            }
            ChallengeState::Expired if record.decision().is_none() => {
                consent_expiry(engine, store, challenge, &authority)
            }
            _ => self.recover_decided(runtime, engine, store, &record, &parent, authority, now),
        }
    }

    /// spec/service.md §10: reconciles a recorded decision with the journal (rebuilding the
    /// decision event from durable facts only) and finishes a settled one.
    #[allow(clippy::too_many_arguments)]
    fn recover_decided(
        &self,
        runtime: &Runtime,
        engine: &Engine,
        store: &ConsentStore,
        record: &ChallengeRecord,
        parent: &ctx_projections::query_store::QueryRecord,
        authority: ConsentAuthority,
        now: ctx_model::UtcMicros,
    ) -> Result<ConsentResolutionResult, ServiceError> {
        let challenge = record.challenge();
        let Ok(identity) = decision_identity(record) else {
            return Err(ServiceError::Identity(
                "recoverable consent state has no authenticated decision identity",
            ));
        };
        let event = interactive_decision_event(challenge, &authority, &identity)?;
        let reservation = reservation_of(challenge, &authority, &event, &identity)?;
        let evidence = decision_evidence(engine, &authority, &event)?;
        let report = store.reconcile_install_decision(&reservation, &evidence, now)?;
        match report.outcome {
            ReconciliationOutcome::Quarantined => {
                let reason = format!("journal-{}", report.journal_status.as_str());
                resolution(
                    engine,
                    challenge,
                    &engine.snapshot(challenge.scope())?,
                    outcome::QUARANTINED,
                    &reason,
                    false,
                )
            }
            ReconciliationOutcome::Expired => consent_expiry(engine, store, challenge, &authority),
            ReconciliationOutcome::ReauthenticationRequired => {
                require_pending_consent_head(&authority)?;
                resolution(
                    engine,
                    challenge,
                    &authority.current,
                    outcome::REAUTHENTICATION_REQUIRED,
                    "fresh-human-reauthentication-required",
                    true,
                )
            }
            ReconciliationOutcome::Settled => {
                let settled = &report.record;
                let install_action = &authority.install_action;
                let granted = identity.decision == "granted";
                let pending_install =
                    engine
                        .snapshot(challenge.scope())?
                        .state()
                        .is_some_and(|s| {
                            s.pending_effects
                                .iter()
                                .any(|e| e.action == *install_action)
                        });
                if authority.binding.is_none() && granted {
                    // spec/service.md §10: an expired, never-claimed grant is retired (or found
                    // retired) first, whether or not its install is still pending.
                    if let Some(retired) =
                        retire_interactive_grant(engine, challenge, &authority, self)?
                    {
                        return Ok(retired);
                    }
                }
                if authority.binding.is_none() && granted && pending_install {
                    // The exact pending install is executed through a live authority with the
                    // actuators, rebuilt without a policy (the decision is already committed).
                    let (_, desired) = consent_owner(&runtime.store, challenge)?;
                    let live = consent_authority(
                        engine,
                        challenge,
                        parent,
                        desired,
                        AuthorityChecks {
                            require_pending_head: false,
                            policy: None,
                            require_current_policy: false,
                            actuators: Some(&self.actuators),
                        },
                    )?;
                    return self
                        .finish_settled_consent(engine, challenge, parent, &live, settled, &event);
                }
                self.finish_settled_consent(engine, challenge, parent, &authority, settled, &event)
            }
        }
    }

    /// The trusted clock, as the engine reads it.
    pub(crate) fn now(&self) -> Result<ctx_model::UtcMicros, ServiceError> {
        self.config
            .clock
            .now()
            .map_err(|_| ServiceError::Identity("trusted consent clock is unavailable"))
    }

    /// The composition of a stored query's artifact (re-authenticated from the registry): the
    /// engine of a consent owner, or of a query whose activations run.
    pub(crate) fn record_composition(
        &self,
        runtime: &Runtime,
        parent: &ctx_projections::query_store::QueryRecord,
    ) -> Result<super::composition::EngineComposition, ServiceError> {
        let artifact = self.config.registry.reopen(
            parent.artifact_manifest_digest(),
            parent.planning_environment_digest(),
        )?;
        let input = QueryInput::new(
            artifact,
            parent.session_started().clone(),
            parent.decision_event().clone(),
        );
        self.composition(runtime, &input)
    }
}

/// spec/service.md §10: retires a pending consent whose challenge expired before any decision, with
/// the deterministic `ctx-install-consent-expired:` event.
fn consent_expiry(
    engine: &Engine,
    _store: &ConsentStore,
    challenge: &InstallConsentChallenge,
    authority: &ConsentAuthority,
) -> Result<ConsentResolutionResult, ServiceError> {
    let install_action = &authority.install_action;
    if install_action.expires_at.as_deref() != Some(challenge.expires_at()) {
        return Err(ServiceError::Identity(
            "broker expiry does not match the exact pending install expiry",
        ));
    }
    let payload = Json::object([
        ("consent_id", Json::str(challenge.challenge_id())),
        ("install_expires_at", Json::str(challenge.expires_at())),
        (
            "policy_snapshot_digest",
            Json::str(challenge.policy_snapshot_digest()),
        ),
        ("requested_action_id", Json::str(&install_action.action_id)),
        (
            "requested_action_kind",
            Json::str(install_action.kind.as_str()),
        ),
        (
            "requested_action_content_digest",
            Json::str(install_action.content_digest()),
        ),
        (
            "requested_action_precondition_revision",
            Json::from(install_action.precondition_revision),
        ),
    ]);
    let head = &authority.consent_head;
    let event_id = format!(
        "ctx-install-consent-expired:{}",
        cja_digest(&Json::object([
            ("challenge_digest", Json::str(challenge.challenge_digest())),
            (
                "consent_head_event_id",
                Json::str(&head.reducer_event.event_id),
            ),
            ("consent_head_record_digest", Json::str(&head.record_digest)),
            ("consent_head_revision", Json::from(head.revision)),
            ("payload", payload.clone()),
            ("schema", Json::str("ctx.managed-install-consent-expiry.v1")),
        ]))
    );
    let mut event = envelope_event(
        authority.desired.event(),
        &event_id,
        EventKind::InstallConsentExpired,
        head.revision,
        challenge.expires_at(),
    );
    event.payload = payload;
    event.causation_id = Some(authority.request.action_id.clone());
    event
        .validate()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let scope = challenge.scope();
    let mut current = engine.snapshot(scope)?;
    let at_head = current.revision() == head.revision
        && current.head_record_digest().map(|d| d.to_hex()) == Some(head.record_digest.clone());
    if at_head {
        require_pending_consent_head(authority)?;
        match engine.process(&event, None) {
            Ok(t) => {
                check_expiry_transition(&t, &event, challenge, install_action)?;
                current = engine.snapshot(scope)?;
            }
            Err(e) if is_collision(&e) => {
                return resolution(
                    engine,
                    challenge,
                    &current,
                    outcome::QUARANTINED,
                    "journal-event-collision",
                    false,
                );
            }
            Err(ProcessError::RevisionConflict { .. }) => current = engine.snapshot(scope)?,
            Err(e) => return Err(e.into()),
        }
    }
    let expiry_revision = head.revision + 1;
    if current.revision() >= expiry_revision {
        let Some(rec) = engine.journaled_event(scope, expiry_revision)? else {
            return Err(ServiceError::Identity(
                "managed consent expiry did not reach a durable outcome",
            ));
        };
        let still_pending = current.state().is_some_and(|s| {
            s.pending_consents.iter().any(|c| {
                c.consent_id == challenge.challenge_id() && c.install_action == *install_action
            })
        });
        if rec.reducer_event.event_id == event.event_id
            && rec.source_event_content_digest == event.content_digest()
        {
            check_expiry_transition(&rec.transition, &event, challenge, install_action)?;
            if still_pending {
                return Err(ServiceError::Identity(
                    "committed consent expiry retained its exact pending authority",
                ));
            }
            return resolution(
                engine,
                challenge,
                &current,
                outcome::EXPIRED,
                "install-consent-challenge-expired",
                false,
            );
        }
        let (result, reason) = if still_pending {
            (outcome::QUARANTINED, "expired-consent-head-is-ambiguous")
        } else {
            (
                outcome::SUPERSEDED,
                "expired-consent-authority-was-refreshed",
            )
        };
        return resolution(engine, challenge, &current, result, reason, false);
    }
    if current.revision() == head.revision {
        return resolution(
            engine,
            challenge,
            &current,
            outcome::QUARANTINED,
            "expired-consent-head-is-ambiguous",
            false,
        );
    }
    Err(ServiceError::Identity(
        "managed consent expiry did not reach a durable outcome",
    ))
}

fn check_expiry_transition(
    t: &Transition,
    event: &ctx_model::EngineEvent,
    challenge: &InstallConsentChallenge,
    install_action: &ctx_model::HostAction,
) -> Result<(), ServiceError> {
    let diagnosed = t.diagnostics.iter().any(|d| {
        d.get_str("code") == Some("install_consent_expired")
            && d.get_str("consent_id") == Some(challenge.challenge_id())
            && d.get_str("capability_id") == install_action.entity_id.as_deref()
    });
    if t.event_id != event.event_id
        || t.scope != event.scope
        || t.from_revision != event.expected_revision
        || Some(t.to_revision) != event.expected_revision.checked_add(1)
        || !t.actions.is_empty()
        || !diagnosed
    {
        return Err(ServiceError::Identity(
            "managed install consent expiry transition was substituted",
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// resolve_consent (spec/service.md §10)
// ------------------------------------------------------------------------------------------------

impl QueryService {
    /// Commits a fresh, correctly signed human decision on a published challenge
    /// (spec/service.md §10): decodes and pins the verifier before any lock, authenticates the
    /// assertion against the broker record (a durable decision-ready record), commits the
    /// `ctx-interactive-install:` decision with the broker's settlement in one journal append, and
    /// finishes the install. A drifted policy or target refuses before the assertion is consumed.
    pub fn resolve_consent(
        &self,
        assertion_payload: &[u8],
    ) -> Result<ConsentResolutionResult, ServiceError> {
        self.check_process()?;
        let assertion = SignedHumanDecisionAssertion::decode(assertion_payload)?;
        let Some(broker) = self.config.consent.as_ref() else {
            return Err(broker_missing());
        };
        if assertion.audience() != broker.audience {
            return Err(ServiceError::Identity(
                "signed assertion audience does not match managed consent",
            ));
        }
        let Some(registry) = self.config.verifier_registry.as_ref() else {
            return Err(ServiceError::Identity(
                "signed managed consent requires a captured trusted verifier registry",
            ));
        };
        let verifier = registry.resolve(&assertion)?;
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let runtime = self.runtime(&mut state)?;
        let Some(store) = runtime.consent.as_ref() else {
            return Err(broker_missing());
        };
        let now = self.now()?;
        let record = store.get_by_challenge_digest(
            assertion.challenge_digest(),
            &broker.workspace_identity_digest,
            &broker.release_root_digest,
            now,
        )?;
        if !matches!(
            record.state(),
            ChallengeState::Pending | ChallengeState::ReauthenticationRequired
        ) {
            return Err(ServiceError::Identity(
                "signed consent is not awaiting fresh authentication; recover it first",
            ));
        }
        let challenge = record.challenge().clone();
        let (parent, desired) = consent_owner(&runtime.store, &challenge)?;
        let persisted = match &self.policy_store {
            Some(s) if s.has_persisted()? => Some(s),
            _ => None,
        };
        let Some(policy_store) = persisted else {
            return Err(ServiceError::Identity(
                "signed managed consent requires an explicitly persisted install policy",
            ));
        };
        if policy_store.load_current()?.policy_digest() != challenge.policy_snapshot_digest() {
            return Err(ServiceError::HeadDrift(
                "install policy changed after the consent challenge was published",
            ));
        }
        let held = policy_store.hold(challenge.policy_snapshot_digest())?;
        let composition = self.record_composition(runtime, &parent)?;
        let engine = composition.engine();
        let checks = AuthorityChecks {
            require_pending_head: true,
            policy: Some(held.policy()),
            require_current_policy: true,
            actuators: Some(&self.actuators),
        };
        let authority = consent_authority(engine, &challenge, &parent, desired, checks)?;
        held.assert_current()?;
        // The durable broker write: the nonce is consumed and the decision recorded.
        let verify = |a: &SignedHumanDecisionAssertion, bytes: &[u8]| {
            verifier
                .try_verify_signed_assertion(a, bytes)
                .unwrap_or(false)
        };
        let decision =
            store.verify_human_decision(challenge.challenge_id(), &assertion, &verify, now)?;
        let ready = store.mark_decision_ready(&decision, now)?;
        crate::failpoint::fail_point!(failpoints::CONSENT_AFTER_AUTHENTICATE);
        let (_, desired_again) = consent_owner(&runtime.store, &challenge)?;
        let again = consent_authority(engine, &challenge, &parent, desired_again, checks)?;
        if again != authority {
            return Err(ServiceError::HeadDrift(
                "managed consent authority changed after human authentication",
            ));
        }
        held.assert_current()?;
        let Some(binding) = authority.binding.clone() else {
            return Err(ServiceError::Identity(
                "managed consent operation requires a current execution binding",
            ));
        };
        if binding.binding_digest() != challenge.execution_binding_digest() {
            return Err(ServiceError::Identity(
                "post-consent execution binding does not match the exact challenge",
            ));
        }
        let identity = decision_identity(&ready)?;
        let event = interactive_decision_event(&challenge, &authority, &identity)?;
        let reservation = reservation_of(&challenge, &authority, &event, &identity)?;
        let token = store.reserve(&decision, &reservation, now)?;
        // The decision and the broker's settlement commit in one append.
        let mut settle_skipped = false;
        let committed = engine.process_with(&event, None, |pending| {
            check_decision_transition(pending.transition(), &event, &authority, &identity)?;
            if crate::failpoint::failpoint_fired(failpoints::CONSENT_BEFORE_SETTLE) {
                settle_skipped = true;
                return Ok::<Vec<StreamAppend>, ServiceError>(Vec::new());
            }
            Ok(vec![store.settle_append(&token, now)?])
        });
        let transition = match committed {
            Ok(t) => t,
            Err(e) => {
                // Nothing committed: the reservation goes back to decision-ready.
                let _ = store.release(token, now);
                return Err(match e {
                    ProcessWithError::Process(e) => e.into(),
                    ProcessWithError::Extras(e) => e,
                    ProcessWithError::ExtrasAppend(e) => ServiceError::Internal(format!(
                        "the broker settlement was refused with the decision: {e}"
                    )),
                });
            }
        };
        check_decision_transition(&transition, &event, &authority, &identity)?;
        if settle_skipped {
            return Err(FailPointFired::after(
                failpoints::CONSENT_BEFORE_SETTLE,
                "decision committed, broker settlement skipped",
            )
            .into());
        }
        held.assert_current()?;
        drop(held);
        let settled = store.get(challenge.challenge_id(), now)?;
        if settled.state() != ChallengeState::Settled {
            return Err(ServiceError::Identity(
                "interactive consent commit did not settle its one-shot broker authority",
            ));
        }
        crate::failpoint::fail_point!(failpoints::CONSENT_BEFORE_FINISH);
        self.finish_settled_consent(engine, &challenge, &parent, &authority, &settled, &event)
    }

    /// spec/service.md §10: after the decision is committed and settled, executes a granted install
    /// (once) and classifies where the capability stands.
    pub(crate) fn finish_settled_consent(
        &self,
        engine: &Engine,
        challenge: &InstallConsentChallenge,
        parent: &ctx_projections::query_store::QueryRecord,
        authority: &ConsentAuthority,
        settled: &ChallengeRecord,
        event: &EngineEvent,
    ) -> Result<ConsentResolutionResult, ServiceError> {
        let decision = event.payload.get_str("decision").unwrap_or_default();
        if settled.state() != ChallengeState::Settled
            || settled.decision() != Some(decision)
            || settled.reservation_event_id() != Some(event.event_id.as_str())
            || settled.reservation_event_content_digest() != Some(event.content_digest().as_str())
        {
            return Err(ServiceError::Identity(
                "settled broker consent does not match the committed decision",
            ));
        }
        let install_action = &authority.install_action;
        let scope = challenge.scope();
        let exact = engine
            .journaled_event(scope, install_action.precondition_revision)?
            .is_some_and(|rec| {
                rec.reducer_event.event_id == event.event_id
                    && rec.source_event_content_digest == event.content_digest()
            });
        if !exact {
            return Err(ServiceError::Identity(
                "settled broker consent has no exact committed journal event",
            ));
        }
        let mut current = engine.snapshot(scope)?;
        exact_parent_plan(&current, parent)?;
        if decision == "denied" {
            let retained = current.state().is_none_or(|s| {
                s.pending_effects
                    .iter()
                    .any(|e| e.action == *install_action)
            });
            if retained {
                return Err(ServiceError::Identity(
                    "denied install consent retained physical execution authority",
                ));
            }
            return resolution(
                engine,
                challenge,
                &current,
                outcome::DENIED,
                "human-denied-install",
                false,
            );
        }
        let Some(state) = current.state() else {
            return Err(ServiceError::Identity(
                "settled install state is unavailable",
            ));
        };
        let pending = state
            .pending_effects
            .iter()
            .filter(|e| e.action == *install_action)
            .count();
        let mut reported = false;
        if pending > 0 {
            if pending != 1 || state.pending_effects.len() != 1 {
                return Err(ServiceError::Identity(
                    "interactive physical installation is not globally serialized",
                ));
            }
            if let Some(retired) = retire_interactive_grant(engine, challenge, authority, self)? {
                return Ok(retired);
            }
            let Some(binding) = authority.binding.as_ref() else {
                return Err(ServiceError::Identity(
                    "managed consent operation requires a current execution binding",
                ));
            };
            let row = &authority.row;
            let fresh = self
                .actuators
                .resolve_binding(install_action, descriptor_of(row))?;
            if fresh != *binding || fresh.binding_digest() != challenge.execution_binding_digest() {
                return Err(ServiceError::HeadDrift(
                    "interactive install target changed after decision commit",
                ));
            }
            let install = InstallAuthority {
                action: install_action,
                selection_row: row,
                descriptor: descriptor_of(row),
                catalog_snapshot_digest: challenge.catalog_snapshot_digest(),
                policy_digest: challenge.policy_snapshot_digest(),
            };
            let report = match execute_install(engine, &self.actuators, &install, binding) {
                Ok(report) => report,
                Err(ExecuteError::ClaimExpired) => {
                    return match retire_interactive_grant(engine, challenge, authority, self)? {
                        Some(retired) => Ok(retired),
                        None => Err(ServiceError::Execution(format!(
                            "install action '{}' expired before it was claimed",
                            install_action.action_id
                        ))),
                    };
                }
                Err(ExecuteError::Service(e)) => return Err(e),
            };
            if report.execution_binding_digest != binding.binding_digest() {
                return Err(ServiceError::Identity(
                    "interactive install execution substituted its captured binding",
                ));
            }
            current = engine.snapshot(scope)?;
            check_install_result(
                &current,
                install_action,
                row,
                report.outcome,
                report.settled,
            )?;
            if report.outcome == ctx_projections::engine::InstallOutcome::Indeterminate {
                return resolution(
                    engine,
                    challenge,
                    &current,
                    outcome::INSTALL_INDETERMINATE,
                    "physical-install-outcome-indeterminate",
                    false,
                );
            }
            reported = true;
        }
        classify_settled_install(engine, challenge, &current, &authority.row, reported)
    }
}

/// The decision identity a broker record carries (spec/service.md §10).
fn decision_identity(record: &ChallengeRecord) -> Result<DecisionIdentity, ServiceError> {
    let lacks = || {
        ServiceError::Identity(
            "authenticated consent record lacks its exact durable decision identity",
        )
    };
    Ok(DecisionIdentity {
        decision: record.decision().ok_or_else(lacks)?.to_owned(),
        principal_digest: record.principal_digest().ok_or_else(lacks)?.to_owned(),
        authenticator_id: record.authenticator_id().ok_or_else(lacks)?.to_owned(),
        audience: record.audience().ok_or_else(lacks)?.to_owned(),
        assertion_nonce_digest: record
            .assertion_nonce_digest()
            .ok_or_else(lacks)?
            .to_owned(),
        decision_issued_at: record.decision_issued_at().ok_or_else(lacks)?,
        decision_expires_at: record.decision_expires_at().ok_or_else(lacks)?,
    })
}

/// spec/service.md §10: the reservation of the decision event.
fn reservation_of(
    challenge: &InstallConsentChallenge,
    authority: &ConsentAuthority,
    event: &EngineEvent,
    identity: &DecisionIdentity,
) -> Result<Reservation, ServiceError> {
    let lost =
        ServiceError::Identity("interactive decision lost its exact broker reservation binding");
    let install_action = &authority.install_action;
    let (Some(decision), Some(expires_at)) = (
        HumanDecision::parse(&identity.decision),
        install_action.expires_at.clone(),
    ) else {
        return Err(lost);
    };
    if event.expected_revision + 1 != install_action.precondition_revision {
        return Err(lost);
    }
    Ok(Reservation {
        scope: challenge.scope().clone(),
        event_id: event.event_id.clone(),
        event_content_digest: event.content_digest(),
        consent_id: challenge.challenge_id().to_owned(),
        decision,
        policy_snapshot_digest: challenge.policy_snapshot_digest().to_owned(),
        requested_action_id: install_action.action_id.clone(),
        requested_action_kind: install_action.kind.as_str().to_owned(),
        requested_action_content_digest: install_action.content_digest(),
        requested_action_precondition_revision: install_action.precondition_revision,
        install_expires_at: expires_at,
    })
}

/// spec/service.md §10, except for a denial: a granted decision's transition holds exactly the
/// install action; a denied one never holds it, but the reducer reconciles after a denial, so its
/// transition holds whatever comes next (another desired capability's consent request, an
/// activation) — the reference's "empty" would refuse every denial of one of several desired
/// installs, forever (the install-expiry rule of spec/service.md §6 is the same "must not appear").
fn check_decision_transition(
    t: &Transition,
    event: &EngineEvent,
    authority: &ConsentAuthority,
    identity: &DecisionIdentity,
) -> Result<(), ServiceError> {
    let actions_exact = if identity.decision == "granted" {
        t.actions.as_slice() == std::slice::from_ref(&authority.install_action)
    } else {
        !t.actions.contains(&authority.install_action)
    };
    if t.event_id != event.event_id
        || t.scope != event.scope
        || t.from_revision != event.expected_revision
        || Some(t.to_revision) != event.expected_revision.checked_add(1)
        || !actions_exact
    {
        return Err(ServiceError::Identity(
            "interactive consent decision transition was substituted",
        ));
    }
    Ok(())
}

/// What the journal says about a rebuilt decision event (the evidence of spec/service.md §10).
fn decision_evidence(
    engine: &Engine,
    authority: &ConsentAuthority,
    event: &EngineEvent,
) -> Result<DecisionEvidence, ServiceError> {
    let head = &authority.consent_head;
    let scope = &event.scope;
    let current = engine.snapshot(scope)?;
    if let Some(rec) = engine.journaled_event(scope, head.revision + 1)? {
        if rec.reducer_event.event_id == event.event_id
            && rec.source_event_content_digest == event.content_digest()
        {
            return Ok(DecisionEvidence::Committed {
                event_id: event.event_id.clone(),
                event_content_digest: event.content_digest(),
                head_revision: current.revision(),
                head_record_digest: current
                    .head_record_digest()
                    .map(|d| d.to_hex())
                    .unwrap_or_default(),
            });
        }
        return Ok(DecisionEvidence::HeadAdvanced);
    }
    let at_head = current.revision() == head.revision
        && current.head_record_digest().map(|d| d.to_hex()) == Some(head.record_digest.clone());
    Ok(if at_head {
        DecisionEvidence::AbsentAtExpectedHead
    } else {
        DecisionEvidence::HeadAdvanced
    })
}

/// spec/service.md §10: retires an expired, never-claimed interactive grant exactly once.
fn retire_interactive_grant(
    engine: &Engine,
    challenge: &InstallConsentChallenge,
    authority: &ConsentAuthority,
    service: &QueryService,
) -> Result<Option<ConsentResolutionResult>, ServiceError> {
    let install_action = &authority.install_action;
    if install_action.expires_at.as_deref() != Some(challenge.expires_at()) {
        return Err(ServiceError::Identity(
            "settled install expiry lost its exact challenge binding",
        ));
    }
    let payload = Json::object([
        (
            "action_content_digest",
            Json::str(install_action.content_digest()),
        ),
        ("action_id", Json::str(&install_action.action_id)),
        ("action_kind", Json::str(install_action.kind.as_str())),
        (
            "action_precondition_revision",
            Json::from(install_action.precondition_revision),
        ),
        ("reason", Json::str("expired")),
    ]);
    let desired_event = authority.desired.event();
    let event_id = format!(
        "ctx-install-action-expired:{}",
        cja_digest(&Json::object([
            ("challenge_digest", Json::str(challenge.challenge_digest())),
            ("decision_event_id", Json::str(&desired_event.event_id)),
            (
                "install_action_content_digest",
                Json::str(install_action.content_digest()),
            ),
            ("payload", payload.clone()),
            ("schema", Json::str("ctx.managed-install-action-expiry.v1")),
        ]))
    );
    let mut event = envelope_event(
        desired_event,
        &event_id,
        EventKind::ActionExpired,
        install_action.precondition_revision,
        challenge.expires_at(),
    );
    event.payload = payload;
    event.causation_id = Some(install_action.action_id.clone());
    let scope = challenge.scope();
    let expiry_revision = install_action.precondition_revision + 1;
    let pending_remains = |engine: &Engine| -> Result<bool, ServiceError> {
        Ok(engine.snapshot(scope)?.state().is_some_and(|s| {
            s.pending_effects
                .iter()
                .any(|e| e.action == *install_action)
        }))
    };
    for _ in 0..3 {
        let current = engine.snapshot(scope)?;
        if current.revision() >= expiry_revision
            && let Some(rec) = engine.journaled_event(scope, expiry_revision)?
            && rec.reducer_event.event_id == event.event_id
            && rec.source_event_content_digest == event.content_digest()
        {
            if pending_remains(engine)? {
                return Err(ServiceError::Identity(
                    "committed install action expiry retained physical authority",
                ));
            }
            let fresh = engine.snapshot(scope)?;
            return resolution(
                engine,
                challenge,
                &fresh,
                outcome::EXPIRED,
                "install-approval-expired-before-claim",
                false,
            )
            .map(Some);
        }
        let status = engine
            .install_execution_status(install_action)
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        if status.claimed || service.now()? < challenge.expires_at_micros() {
            return Ok(None);
        }
        let at_grant = current.revision() == install_action.precondition_revision;
        if !at_grant {
            if pending_remains(engine)? {
                return resolution(
                    engine,
                    challenge,
                    &current,
                    outcome::QUARANTINED,
                    "expired-install-head-is-ambiguous",
                    false,
                )
                .map(Some);
            }
            return Ok(None);
        }
        match engine.process(&event, None) {
            Ok(_) => {}
            Err(e) if is_collision(&e) => {
                return resolution(
                    engine,
                    challenge,
                    &current,
                    outcome::QUARANTINED,
                    "journal-event-collision",
                    false,
                )
                .map(Some);
            }
            Err(ProcessError::RevisionConflict { .. }) => {}
            Err(ProcessError::Effect { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}
