//! `recover_consent` and `resolve_consent` (reference managed-service §6, §7): reconcile a
//! published consent challenge without a human, or commit a fresh signed human decision.

use ctx_projections::check::{cja_digest, is_sha};
use ctx_projections::consent_store::{ChallengeState, ConsentStore, InstallConsentChallenge};
use ctx_projections::engine::{Engine, ProcessError};
use ctx_projections::{EventKind, Json, Transition};

use super::authority::{
    AuthorityChecks, ConsentAuthority, consent_authority, consent_owner, envelope_event,
    is_collision, require_pending_consent_head, resolution,
};
use super::error::ServiceError;
use super::request::ManagedQueryInput;
use super::resolution::{ManagedConsentResolutionResult, outcome};
use super::service::{ManagedQueryService, Runtime};

fn broker_missing() -> ServiceError {
    ServiceError::Identity("managed consent continuation requires captured broker authorities")
}

impl ManagedQueryService {
    /// Reconciles a published consent challenge without a human (reference §7): a pending
    /// challenge still needs a fresh decision; an expired one is retired durably; a decided one
    /// is reconciled against the journal and finished. Never mints a decision the human did not
    /// sign.
    pub fn recover_consent(
        &self,
        challenge_digest: &str,
    ) -> Result<ManagedConsentResolutionResult, ServiceError> {
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
        let composition = self.consent_composition(runtime, &parent)?;
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
            actuators: (!matches!(
                record.state(),
                ChallengeState::Expired | ChallengeState::Settled
            ))
            .then_some(&self.actuators),
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
            ChallengeState::Expired => consent_expiry(engine, store, challenge, &authority),
            _ => Err(ServiceError::Identity(
                "recoverable consent state has no authenticated decision identity",
            )),
        }
    }

    /// The trusted clock, as the engine reads it.
    pub(crate) fn now(&self) -> Result<ctx_projections::check::UtcMicros, ServiceError> {
        self.config
            .clock
            .now()
            .map_err(|_| ServiceError::Identity("trusted consent clock is unavailable"))
    }

    /// The composition of a consent owner's artifact (re-authenticated from the registry).
    fn consent_composition(
        &self,
        runtime: &Runtime,
        parent: &ctx_projections::query_store::QueryRecord,
    ) -> Result<super::composition::EngineComposition, ServiceError> {
        let artifact = self.config.registry.reopen(
            parent.artifact_manifest_digest(),
            parent.planning_environment_digest(),
        )?;
        let input = ManagedQueryInput::new(
            artifact,
            parent.session_started().clone(),
            parent.decision_event().clone(),
        );
        self.composition(runtime, &input)
    }
}

/// Reference §7.1: retires a pending consent whose challenge expired before any decision, with
/// the deterministic `ctx-install-consent-expired:` event.
fn consent_expiry(
    engine: &Engine,
    _store: &ConsentStore,
    challenge: &InstallConsentChallenge,
    authority: &ConsentAuthority,
) -> Result<ManagedConsentResolutionResult, ServiceError> {
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
    event: &ctx_projections::EngineEvent,
    challenge: &InstallConsentChallenge,
    install_action: &ctx_projections::HostAction,
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
