//! Consent recovery and resolution: seed tests 40–62 (those that exist so far: the recovery of a
//! pending challenge and the expiry paths, 53–56).

use ctx_projections::check::UtcMicros;
use ctx_projections::{EventKind, Json};
use ctx_service::managed::failpoints;
use ctx_service::{ManagedConsentResolutionResult, ManagedDesiredSetResult, ServiceError};

use super::assert_not_impl;
use super::desired::desired;
use super::fixture::{AssertionSpec, Options, Setup, assertion_payload, scope, setup_with};
use crate::support::FailPoints;

assert_not_impl!(ManagedConsentResolutionResult, Clone);
assert_not_impl!(ManagedConsentResolutionResult, serde::Serialize);

fn installable() -> Options {
    Options {
        requested_limit: 1,
        installable: true,
        ..Options::default()
    }
}

/// `_prepare_public_consent`: the safe default policy persisted, a prepared query and a desired
/// choice of its first selection, which requires consent.
fn prepare_public_consent(setup: &Setup, label: &str) -> (String, ManagedDesiredSetResult) {
    setup.ask_each_time();
    let prepared = setup
        .service
        .prepare(&setup.request(&format!("{label}:query")))
        .unwrap();
    let capability_id = prepared.prepared().selections()[0]
        .capability_id()
        .to_owned();
    let result = setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            &format!("{label}:desired"),
            &[&capability_id],
            None,
        ))
        .unwrap();
    assert_eq!(result.status(), "consent-required");
    assert!(result.challenge().is_some());
    (prepared.query_ref().to_owned(), result)
}

fn at(time: &str) -> UtcMicros {
    UtcMicros::parse(time).unwrap()
}

// 53
#[test]
fn test_pending_consent_recovery_requires_no_verifier_or_authentication() {
    let setup = setup_with(installable());
    let (_, result) = prepare_public_consent(&setup, "pending-recovery");
    let challenge = result.challenge().unwrap();

    // Recovery of a pending challenge authenticates nothing: no assertion, no verifier.
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "consent-required");
    assert_eq!(recovered.reason_code(), "fresh-human-decision-required");
    assert_eq!(recovered.next_challenge(), Some(challenge));
    assert_eq!(setup.body_source.load_calls(), 0);
}

// 54
#[test]
fn test_terminal_broker_expiry_durably_retires_pending_consent_and_allows_next_choice() {
    let setup = setup_with(installable());
    let (query_ref, result) = prepare_public_consent(&setup, "terminal-expiry");
    let challenge = result.challenge().unwrap();
    setup.clock.set(at("2026-08-03T14:00:00Z"));
    let displaced = setup.root.join("skills-expiry-displaced");
    std::fs::rename(&setup.skill_root, &displaced).unwrap();
    std::fs::create_dir(&setup.skill_root).unwrap();
    std::fs::set_permissions(
        &setup.skill_root,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    setup.preapprove_skills();

    let expired = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();
    let repeated = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(expired.outcome(), "expired");
    assert_eq!(repeated.outcome(), "expired");
    assert_eq!(expired.journal_revision(), result.journal_revision() + 1);
    assert_eq!(repeated.journal_revision(), expired.journal_revision());
    assert_eq!(
        expired.journal_record_digest(),
        repeated.journal_record_digest()
    );
    let last = setup.engine_events().pop().unwrap();
    assert_eq!(last.reducer_event.kind, EventKind::InstallConsentExpired);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);

    std::fs::remove_dir(&setup.skill_root).unwrap();
    std::fs::rename(&displaced, &setup.skill_root).unwrap();
    setup.ask_each_time();
    let next_choice = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "terminal-expiry-next-choice",
            &[challenge.capability_id()],
            Some(result.desired_set_ref()),
        ))
        .unwrap();
    assert_eq!(next_choice.status(), "consent-required");
    let next = next_choice.challenge().unwrap();
    assert_ne!(next.challenge_digest(), challenge.challenge_digest());
}

// 55
#[test]
fn test_consent_expiry_recovers_after_journal_commit_before_result() {
    let _fp = FailPoints::setup();
    let setup = setup_with(Options {
        failpoints: true,
        ..installable()
    });
    let (_, result) = prepare_public_consent(&setup, "expiry-result-crash");
    let challenge = result.challenge().unwrap();
    setup.clock.set(at("2026-08-03T14:00:00Z"));
    fail::cfg(failpoints::CONSENT_BEFORE_RESULT, "return").unwrap();
    let e = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap_err();
    fail::remove(failpoints::CONSENT_BEFORE_RESULT);
    assert!(matches!(e, ServiceError::FailPoint { .. }), "{e:?}");

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "expired");
    assert_eq!(recovered.journal_revision(), result.journal_revision() + 1);
    let expiries = setup
        .engine_events()
        .iter()
        .filter(|e| e.reducer_event.kind == EventKind::InstallConsentExpired)
        .count();
    assert_eq!(expiries, 1);
}

// 56
#[test]
fn test_expired_old_challenge_cannot_cancel_refreshed_current_consent() {
    let setup = setup_with(installable());
    let (_, result) = prepare_public_consent(&setup, "old-expired-refreshed");
    let challenge = result.challenge().unwrap();
    let composition = ctx_service::open_engine_composition(
        &setup.data_dir,
        &setup.artifact,
        setup.ports.clone(),
        setup.policy.clone(),
        super::fixture::PLANNER_VERSION,
        setup.clock.clone(),
    )
    .unwrap();
    let engine = composition.engine();
    let old_consent = engine
        .snapshot(&scope())
        .unwrap()
        .into_state()
        .unwrap()
        .pending_consents[0]
        .consent_id
        .clone();
    let mut refresh = setup.managed_input.decision_event.clone();
    refresh.event_id = "event-refresh-before-old-consent-expiry".to_owned();
    refresh.kind = EventKind::ProviderSubmissionObserved;
    refresh.expected_revision = result.journal_revision();
    refresh.payload = Json::object([("capabilities", Json::Arr(vec![]))]);
    composition.process(&refresh).unwrap();
    let before = engine.snapshot(&scope()).unwrap();
    let replacement = before.state().unwrap().pending_consents.clone();
    assert_eq!(replacement.len(), 1);
    assert_ne!(replacement[0].consent_id, old_consent);
    setup.clock.set(at("2026-08-03T14:00:00Z"));

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "superseded");
    let after = engine.snapshot(&scope()).unwrap();
    assert_eq!(after.revision(), before.revision());
    assert_eq!(after.head_record_digest(), before.head_record_digest());
    assert_eq!(after.state().unwrap().pending_consents, replacement);
}

// 40
#[test]
fn test_service_resolves_signed_grant_and_recovers_installed_inactive() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "signed-consent");
    let challenge = desired_result.challenge().unwrap();

    let result = setup
        .service
        .resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec::default(),
        ))
        .unwrap();
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    for r in [&result, &recovered] {
        assert_eq!(r.outcome(), "installed-inactive");
        assert_eq!(r.reason_code(), "physical-install-applied");
        assert!(r.next_challenge().is_none());
    }
    assert_eq!(result.capability_id(), challenge.capability_id());
    assert_eq!(result.kind(), challenge.kind());
    assert_eq!(result.challenge_digest(), challenge.challenge_digest());
    assert!(result.journal_revision() >= desired_result.journal_revision() + 2);
    assert_eq!(result.journal_record_digest().len(), 64);
    assert_eq!(setup.body_source.load_calls(), 1);
    // `__slots__`: exactly these nine accessors (no public fields, no other accessor).
    let _slots = (
        result.actions(),
        result.capability_id(),
        result.challenge_digest(),
        result.journal_record_digest(),
        result.journal_revision(),
        result.kind(),
        result.next_challenge(),
        result.outcome(),
        result.reason_code(),
    );
    let repr = format!("{result:?}");
    assert!(!repr.contains(&*setup.root.to_string_lossy()), "{repr}");
    for forbidden in [
        "scope",
        "challenge_id",
        "driver",
        "binding",
        "verifier",
        "proof",
        "principal_digest",
    ] {
        assert!(!repr.contains(forbidden), "{forbidden} in {repr}");
    }
}

// 41
#[test]
fn test_service_signed_denial_never_invokes_install_driver() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "signed-denial");
    let challenge = desired_result.challenge().unwrap();

    let result = setup
        .service
        .resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec {
                decision: "denied",
                nonce: "managed-consent-denial".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap();
    let displaced = setup.root.join("skills-denial-recovery-displaced");
    std::fs::rename(&setup.skill_root, &displaced).unwrap();
    std::fs::create_dir(&setup.skill_root).unwrap();
    std::fs::set_permissions(
        &setup.skill_root,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(result.outcome(), "denied");
    assert_eq!(recovered.outcome(), "denied");
    assert_eq!(result.reason_code(), "human-denied-install");
    assert_eq!(setup.body_source.load_calls(), 0);
}
