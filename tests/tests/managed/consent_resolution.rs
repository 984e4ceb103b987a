//! Consent recovery and resolution: seed tests 40–62 and 70 (a decision-ready broker record is
//! never projected as a challenge), plus a grant signed by an Ed25519 device key.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use ctx_model::{ActionKind, EventKind, HostAction, Json, UtcMicros};
use ctx_projections::consent_store::{
    ChallengeState, ConsentStoreError, SignedHumanDecisionAssertion,
};
use ctx_service::{
    ConsentResolutionResult, DecisionError, DesiredSetResult, Ed25519Signer, Ed25519Verifier,
    HumanDecisionVerifierRegistration, QueryService, ServiceError,
    TrustedHumanDecisionVerifierRegistry, failpoints, open_query_service,
};

use super::assert_not_impl;
use super::consent_publication::{
    commit_pending_consent, expect_err, fp_setup, grant_payload, installable,
};
use super::desired::desired;
use super::fixture::{
    AssertionSpec, CONSENT_AUDIENCE, Options, Setup, assertion_payload, assertion_payload_signed,
    digest, scope, setup_with, verifier_registry,
};
use crate::support::FailPoints;

assert_not_impl!(ConsentResolutionResult, Clone);
assert_not_impl!(ConsentResolutionResult, serde::Serialize);

/// `_prepare_public_consent`: the safe default policy persisted, a prepared query and a desired
/// choice of its first selection, which requires consent.
fn prepare_public_consent(setup: &Setup, label: &str) -> (String, DesiredSetResult) {
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

// ------------------------------------------------------------------------------------------------
// Seeds 42–52, 57–62, 70 and the Ed25519 device key.
//
// The seed's monkeypatches map to the service's named fail points
// (`ctx_service::failpoints`): a patch that raises is `fail::cfg(point, "return")`, a
// patch that does extra work and continues is `fail::cfg_callback(point, ..)`. Each test says
// which seam it uses and why.
// ------------------------------------------------------------------------------------------------

/// Runs `resolve_consent(payload)` once with `point` configured to crash (`return`); the call
/// must fail at that point.
fn resolve_crashing_at(setup: &Setup, point: &'static str, payload: &[u8]) {
    fail::cfg(point, "return").unwrap();
    let e = setup.service.resolve_consent(payload).unwrap_err();
    fail::remove(point);
    assert!(
        matches!(&e, ServiceError::FailPoint { name, .. } if *name == point),
        "{e:?}"
    );
}

/// `skill_root.rename(displaced); skill_root.mkdir(mode=0o700)`: the physical target replaced
/// by an empty directory of the same name.
fn displace(skill_root: &Path, displaced: &Path) {
    std::fs::rename(skill_root, displaced).unwrap();
    std::fs::create_dir(skill_root).unwrap();
    std::fs::set_permissions(skill_root, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// `skill_root.rmdir(); displaced.rename(skill_root)`.
fn restore(skill_root: &Path, displaced: &Path) {
    std::fs::remove_dir(skill_root).unwrap();
    std::fs::rename(displaced, skill_root).unwrap();
}

fn count_kind(setup: &Setup, kind: EventKind) -> usize {
    setup
        .engine_events()
        .iter()
        .filter(|e| e.reducer_event.kind == kind)
        .count()
}

fn interactive_decisions(setup: &Setup) -> usize {
    setup
        .engine_events()
        .iter()
        .filter(|e| {
            e.reducer_event
                .event_id
                .starts_with("ctx-interactive-install:")
        })
        .count()
}

// 42
/// The seed's `execute_install` raises before the claim, after the decision and the broker
/// settlement committed. The Rust service has no seam between the settled decision and
/// `execute_install` (see the report: a `CONSENT_BEFORE_EXECUTE` point in
/// `finish_settled_consent` would be exact); the nearest crash that leaves a committed grant and
/// no claim is `CONSENT_BEFORE_SETTLE` (the decision commits, the broker settlement and the
/// install do not). Recovery reconciles the committed decision, then retires the unclaimed grant.
#[test]
fn test_signed_grant_expired_before_claim_is_retired_once_and_can_be_chosen_again() {
    let (_fp, setup) = fp_setup();
    let (query_ref, desired_result) = prepare_public_consent(&setup, "signed-expired-before-claim");
    let challenge = desired_result.challenge().unwrap();
    // The seed crashes on entry to the install execution: the decision is committed and settled,
    // nothing is claimed.
    resolve_crashing_at(
        &setup,
        failpoints::CONSENT_BEFORE_FINISH,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    setup.clock.set(at("2026-08-03T14:00:00Z"));
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
    assert_eq!(
        expired.reason_code(),
        "install-approval-expired-before-claim"
    );
    assert_eq!(
        expired.journal_revision(),
        desired_result.journal_revision() + 2
    );
    assert_eq!(repeated.journal_revision(), expired.journal_revision());
    assert_eq!(
        expired.journal_record_digest(),
        repeated.journal_record_digest()
    );
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);
    assert_eq!(count_kind(&setup, EventKind::ActionExpired), 1);

    let next_choice = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "signed-expired-before-claim-next-choice",
            &[challenge.capability_id()],
            Some(desired_result.desired_set_ref()),
        ))
        .unwrap();
    assert_eq!(next_choice.status(), "consent-required");
    let next = next_choice.challenge().unwrap();
    assert_ne!(next.challenge_digest(), challenge.challenge_digest());
}

// 43
/// The seed's `authorize_install` claims, then raises: `AFTER_CLAIM` (right after the durable
/// claim, before the driver).
#[test]
fn test_signed_grant_claimed_before_ttl_reconciles_after_ttl_without_reapply_or_expiry() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "signed-claimed-before-expiry");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::AFTER_CLAIM,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    setup.clock.set(at("2026-08-03T14:00:00Z"));
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "install-failed");
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(count_kind(&setup, EventKind::ActionExpired), 0);
}

// 44
/// The seed's `EngineComposition.process` raises before the decision commits, after the broker
/// authenticated it: `CONSENT_AFTER_AUTHENTICATE` (the broker recorded the decision, the journal
/// has nothing).
#[test]
fn test_service_recovery_never_mints_decision_after_precommit_crash() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "precommit-crash");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::CONSENT_AFTER_AUTHENTICATE,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "reauthentication-required");
    assert_eq!(recovered.next_challenge(), Some(challenge));
    assert_eq!(setup.body_source.load_calls(), 0);
    let resolved = setup
        .service
        .resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec {
                nonce: "managed-consent-fresh-after-crash".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap();
    assert_eq!(resolved.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 45
/// The seed's broker `_settle` raises ("guard settlement failed") after the decision committed:
/// `CONSENT_BEFORE_SETTLE` (the decision event commits without the broker settlement).
#[test]
fn test_service_recovers_commit_before_broker_settle_without_reauthentication() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "postcommit-crash");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::CONSENT_BEFORE_SETTLE,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 46
/// The seed's broker `_settle` raises: `CONSENT_BEFORE_SETTLE`, as in 45.
#[test]
fn test_decision_ready_grant_recovery_after_challenge_ttl_needs_no_live_target() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "decision-ready-expired-grant");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::CONSENT_BEFORE_SETTLE,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    setup.clock.set(at("2026-08-03T14:00:00Z"));
    let displaced = setup.root.join("skills-decision-ready-expired-displaced");
    displace(&setup.skill_root, &displaced);
    setup.preapprove_skills();

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "expired");
    assert_eq!(
        recovered.reason_code(),
        "install-approval-expired-before-claim"
    );
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);
    restore(&setup.skill_root, &displaced);
}

// 47
/// The seed forbids the broker lookup (`status_by_challenge_digest` raises): the verifier is
/// selected from the registry before the service reads any broker or journal state, so nothing
/// is written and the broker record stays pending.
#[test]
fn test_service_rejects_unknown_human_identity_before_state_or_driver_access() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "wrong-human");
    let challenge = desired_result.challenge().unwrap();
    let head_before = setup.head_position();

    let e = setup
        .service
        .resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec {
                principal_digest: digest("unregistered-principal"),
                ..AssertionSpec::default()
            },
        ))
        .unwrap_err();

    assert!(
        matches!(e, ServiceError::Decision(DecisionError::UnknownVerifier)),
        "{e:?}"
    );
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.head_position(), head_before);
    assert_eq!(
        setup.consent_record(challenge.challenge_digest()).state(),
        ChallengeState::Pending
    );
}

// 48
#[test]
fn test_service_target_drift_does_not_burn_signed_assertion() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "target-drift");
    let challenge = desired_result.challenge().unwrap();
    let payload = assertion_payload(challenge.challenge_digest(), &AssertionSpec::default());
    let displaced = setup.root.join("skills-displaced");
    displace(&setup.skill_root, &displaced);

    expect_err(setup.service.resolve_consent(&payload), "root changed");

    restore(&setup.skill_root, &displaced);
    let result = setup.service.resolve_consent(&payload).unwrap();

    assert_eq!(result.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

/// A fail-point callback that replaces the physical target once (the seed's `replaced` flag).
fn replace_target_once(
    point: &'static str,
    skill_root: PathBuf,
    displaced: PathBuf,
) -> Arc<AtomicBool> {
    let replaced = Arc::new(AtomicBool::new(false));
    let flag = replaced.clone();
    fail::cfg_callback(point, move || {
        if !flag.swap(true, Ordering::SeqCst) {
            displace(&skill_root, &displaced);
        }
    })
    .unwrap();
    replaced
}

// 49
/// The seed's broker `authenticate` returns, then the target is replaced: a callback at
/// `CONSENT_AFTER_AUTHENTICATE` (the broker recorded the decision, nothing is committed), so the
/// service's post-authentication authority check is the first to see the replaced target.
#[test]
fn test_target_replacement_after_authentication_never_reaches_broker_guard_or_driver() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "post-auth-target-drift");
    let challenge = desired_result.challenge().unwrap();
    let displaced = setup.root.join("skills-post-auth-displaced");
    let replaced = replace_target_once(
        failpoints::CONSENT_AFTER_AUTHENTICATE,
        setup.skill_root.clone(),
        displaced.clone(),
    );

    let r = setup.service.resolve_consent(&assertion_payload(
        challenge.challenge_digest(),
        &AssertionSpec::default(),
    ));
    fail::remove(failpoints::CONSENT_AFTER_AUTHENTICATE);

    expect_err(r, "root changed");
    assert!(replaced.load(Ordering::SeqCst));
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(interactive_decisions(&setup), 0);

    restore(&setup.skill_root, &displaced);
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "reauthentication-required");
    assert_eq!(recovered.next_challenge(), Some(challenge));
}

// 50
/// The seed replaces the target on entry to `_finish_settled_consent`, after the decision and the
/// broker settlement committed: a callback at `CONSENT_BEFORE_FINISH`, the same seam.
#[test]
fn test_target_replacement_after_decision_commit_never_reaches_claim_or_driver() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "post-commit-target-drift");
    let challenge = desired_result.challenge().unwrap();
    let displaced = setup.root.join("skills-post-commit-displaced");
    let replaced = replace_target_once(
        failpoints::CONSENT_BEFORE_FINISH,
        setup.skill_root.clone(),
        displaced.clone(),
    );

    let r = setup.service.resolve_consent(&assertion_payload(
        challenge.challenge_digest(),
        &AssertionSpec::default(),
    ));
    fail::remove(failpoints::CONSENT_BEFORE_FINISH);

    expect_err(r, "root changed");
    assert!(replaced.load(Ordering::SeqCst));
    assert_eq!(interactive_decisions(&setup), 1);
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);

    restore(&setup.skill_root, &displaced);
    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 51
#[test]
fn test_service_policy_drift_does_not_burn_signed_assertion() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "signed-policy-drift");
    let challenge = desired_result.challenge().unwrap();
    let payload = assertion_payload(challenge.challenge_digest(), &AssertionSpec::default());
    setup.preapprove_skills();

    let e = expect_err(setup.service.resolve_consent(&payload), "policy changed");
    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");

    setup.ask_each_time();
    let result = setup.service.resolve_consent(&payload).unwrap();

    assert_eq!(result.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 52
/// The seed counts any `ManagedQueryServiceError` (the base of the head-drift error) as
/// "already-consumed"; the Rust equivalents are `Identity` and `HeadDrift`. Any other error
/// fails the test.
#[test]
fn test_concurrent_signed_resolution_executes_install_at_most_once() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "signed-concurrency");
    let challenge = desired_result.challenge().unwrap();
    let payload = assertion_payload(challenge.challenge_digest(), &AssertionSpec::default());
    let peer = setup.peer();
    let barrier = Barrier::new(2);
    let services: [&QueryService; 2] = [&setup.service, &peer];

    let mut outcomes: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = services
            .iter()
            .map(|service| {
                let (barrier, payload) = (&barrier, &payload);
                s.spawn(move || {
                    barrier.wait();
                    match service.resolve_consent(payload) {
                        Ok(r) => r.outcome().to_owned(),
                        Err(ServiceError::Identity(_) | ServiceError::HeadDrift(_)) => {
                            "already-consumed".to_owned()
                        }
                        Err(e) => panic!("unexpected error: {e:?} ({e})"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    outcomes.sort();

    assert_eq!(outcomes, ["already-consumed", "installed-inactive"]);
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(
        setup
            .service
            .recover_consent(challenge.challenge_digest())
            .unwrap()
            .outcome(),
        "installed-inactive"
    );
}

// 57
/// The seed forbids the broker lookup: the audience is checked on the decoded assertion before
/// any broker or journal read, so nothing is written and the broker record stays pending.
#[test]
fn test_wrong_assertion_audience_is_rejected_before_broker_lookup() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "wrong-audience");
    let challenge = desired_result.challenge().unwrap();
    let head_before = setup.head_position();

    let e = expect_err(
        setup.service.resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec {
                audience: "wrong-managed-audience".to_owned(),
                ..AssertionSpec::default()
            },
        )),
        "audience",
    );

    assert!(matches!(e, ServiceError::Identity(_)), "{e:?}");
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.head_position(), head_before);
    assert_eq!(
        setup.consent_record(challenge.challenge_digest()).state(),
        ChallengeState::Pending
    );
}

// 58
fn invalid_signed_assertion_does_not_mutate_consent_or_journal(failure: &str) {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, &format!("invalid-{failure}"));
    let challenge = desired_result.challenge().unwrap();
    let journal_before = setup.engine_events();
    let expired = failure == "expired";
    let payload = assertion_payload(
        challenge.challenge_digest(),
        &AssertionSpec {
            nonce: format!("invalid-{failure}-nonce"),
            valid_proof: failure != "signature",
            issued_at: if expired {
                "2026-08-03T11:00:00Z"
            } else {
                super::fixture::NOW
            }
            .to_owned(),
            expires_at: if expired {
                "2026-08-03T11:30:00Z"
            } else {
                "2026-08-03T12:30:00Z"
            }
            .to_owned(),
            ..AssertionSpec::default()
        },
    );

    let e = setup.service.resolve_consent(&payload).unwrap_err();

    // `ConsentBrokerDecisionRejected` / `ConsentBrokerExpired`.
    if expired {
        assert!(
            matches!(e, ServiceError::Consent(ConsentStoreError::Expired { .. })),
            "{e:?}"
        );
    } else {
        assert!(
            matches!(e, ServiceError::Consent(ConsentStoreError::Rejected { .. })),
            "{e:?}"
        );
    }
    assert_eq!(
        setup.consent_record(challenge.challenge_digest()).state(),
        ChallengeState::Pending
    );
    assert_eq!(setup.engine_events(), journal_before);
    assert_eq!(setup.body_source.load_calls(), 0);
}

#[test]
fn test_invalid_signed_assertion_does_not_mutate_consent_or_journal_failure_signature() {
    invalid_signed_assertion_does_not_mutate_consent_or_journal("signature");
}

#[test]
fn test_invalid_signed_assertion_does_not_mutate_consent_or_journal_failure_expired() {
    invalid_signed_assertion_does_not_mutate_consent_or_journal("expired");
}

/// `_commit_consent_decision`: an interactive grant of `request` committed at revision 3 through
/// a composition, without the broker.
fn commit_consent_decision(setup: &Setup, request: &HostAction) {
    let mut event = setup.event_like(
        "event-managed-consent-race-decision",
        EventKind::UserDecision,
        3,
        grant_payload(request),
    );
    event.occurred_at = "2026-08-03T12:01:00Z".to_owned();
    let transition = setup.composition().process(&event).unwrap();
    assert_eq!(transition.to_revision, 4);
}

// 59
/// The seed forbids broker authentication: the stale head is refused before it, so the broker
/// record stays pending (authentication would have recorded a decision).
#[test]
fn test_head_drift_is_rejected_before_broker_authentication() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "signed-head-drift");
    let challenge = desired_result.challenge().unwrap();
    let head = setup.engine_events().pop().unwrap();
    let request = head
        .transition
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::RequestConsent)
        .unwrap()
        .clone();
    commit_consent_decision(&setup, &request);

    let e = expect_err(
        setup.service.resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec::default(),
        )),
        "current pending",
    );

    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");
    assert_eq!(
        setup.consent_record(challenge.challenge_digest()).state(),
        ChallengeState::Pending
    );
}

// 60
#[test]
fn test_signed_install_indeterminate_then_recovers_failed() {
    let setup = setup_with(installable());
    setup.body_source.fail_next_loads(1);
    let (_, desired_result) = prepare_public_consent(&setup, "signed-indeterminate");
    let challenge = desired_result.challenge().unwrap();

    let indeterminate = setup
        .service
        .resolve_consent(&assertion_payload(
            challenge.challenge_digest(),
            &AssertionSpec::default(),
        ))
        .unwrap();
    let failed = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(indeterminate.outcome(), "install-indeterminate");
    assert_eq!(
        indeterminate.reason_code(),
        "physical-install-outcome-indeterminate"
    );
    assert_eq!(failed.outcome(), "install-failed");
    assert_eq!(failed.reason_code(), "physical-install-failed");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 61
/// The seed's precommit crash (`EngineComposition.process` raises): `CONSENT_AFTER_AUTHENTICATE`,
/// as in 44. The journal head then advances past the consent head.
#[test]
fn test_recovery_quarantines_decision_when_journal_head_advanced() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "signed-quarantine");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::CONSENT_AFTER_AUTHENTICATE,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );
    setup
        .composition()
        .process(&setup.event_like(
            "event-signed-consent-head-advanced",
            EventKind::ProviderSubmissionObserved,
            desired_result.journal_revision(),
            Json::object([("capabilities", Json::Arr(vec![]))]),
        ))
        .unwrap();

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "quarantined");
    assert_eq!(recovered.reason_code(), "journal-head-advanced");
    assert!(recovered.next_challenge().is_none());
    assert_eq!(setup.body_source.load_calls(), 0);
}

// 62
/// The seed's `execute_install` completes, then raises: `AFTER_RECEIPT` (the receipt settled,
/// before the report is returned).
#[test]
fn test_signed_recovery_after_receipt_crash_does_not_reinvoke_driver() {
    let (_fp, setup) = fp_setup();
    let (_, desired_result) = prepare_public_consent(&setup, "signed-receipt-crash");
    let challenge = desired_result.challenge().unwrap();
    resolve_crashing_at(
        &setup,
        failpoints::AFTER_RECEIPT,
        &assertion_payload(challenge.challenge_digest(), &AssertionSpec::default()),
    );

    let recovered = setup
        .service
        .recover_consent(challenge.challenge_digest())
        .unwrap();

    assert_eq!(recovered.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 70
/// The seed substitutes the broker `status` with a decision-ready copy. Here the broker record
/// is made genuinely decision-ready: the challenge is published (a first reopen), then a signed
/// assertion is authenticated through the broker store itself (`verify_human_decision` +
/// `mark_decision_ready`, what `resolve_consent` does before its commit). Reopening then
/// projects no challenge, without replanning or touching the driver.
#[test]
fn test_service_projects_only_a_pending_broker_record() {
    let setup = setup_with(installable());
    setup.ask_each_time();
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let calls_before = setup.calls();
    let published = setup.service.reopen(initial.query_ref()).unwrap();
    let challenge_digest = published
        .challenge()
        .expect("a pending consent is published")
        .challenge_digest()
        .to_owned();
    let store = setup.consent_store();
    let record = setup.consent_record(&challenge_digest);
    let assertion = SignedHumanDecisionAssertion::decode(&assertion_payload(
        &challenge_digest,
        &AssertionSpec::default(),
    ))
    .unwrap();
    let registry = verifier_registry();
    let verifier = registry.resolve(&assertion).unwrap();
    let verify = |a: &SignedHumanDecisionAssertion, bytes: &[u8]| {
        verifier.try_verify_signed_assertion(a, bytes).unwrap()
    };
    let now = at(super::fixture::NOW);
    let decision = store
        .verify_human_decision(record.challenge().challenge_id(), &assertion, &verify, now)
        .unwrap();
    let ready = store.mark_decision_ready(&decision, now).unwrap();
    assert_eq!(ready.state(), ChallengeState::DecisionReady);

    let result = setup.service.reopen(initial.query_ref()).unwrap();

    assert!(result.challenge().is_none());
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.body_source.load_calls(), 0);
}

// New: a person's device key.
const DEVICE_AUTHENTICATOR: &str = "managed-device-key";

/// The service's configuration with a registry of one Ed25519 verifier for `signer`'s key.
fn ed25519_service(setup: &Setup, signer: &Ed25519Signer) -> QueryService {
    let verifier =
        Arc::new(Ed25519Verifier::from_public_key_bytes(&signer.verifying_key_bytes()).unwrap());
    let registration = HumanDecisionVerifierRegistration::new(
        CONSENT_AUDIENCE,
        DEVICE_AUTHENTICATOR,
        digest("managed-test-principal"),
        verifier,
    )
    .unwrap();
    let mut config = setup.full_config();
    config.verifier_registry = Some(Arc::new(
        TrustedHumanDecisionVerifierRegistry::new(vec![registration]).unwrap(),
    ));
    open_query_service(config).unwrap()
}

/// As 40, with the grant signed by an Ed25519 device key the service's registry pins; a
/// signature by another key is refused first, with nothing written and nothing burned.
#[test]
fn test_service_resolves_a_grant_signed_with_an_ed25519_device_key() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "ed25519-consent");
    let challenge = desired_result.challenge().unwrap();
    let device = Ed25519Signer::from_seed(&[7u8; 32]);
    let service = ed25519_service(&setup, &device);
    let spec = AssertionSpec {
        authenticator_id: DEVICE_AUTHENTICATOR.to_owned(),
        ..AssertionSpec::default()
    };

    let other = Ed25519Signer::from_seed(&[8u8; 32]);
    let forged = assertion_payload_signed(
        challenge.challenge_digest(),
        &AssertionSpec {
            nonce: "managed-consent-forged".to_owned(),
            ..spec.clone()
        },
        &|bytes: &[u8]| other.sign(bytes),
    );
    let head_before = setup.head_position();
    let e = service.resolve_consent(&forged).unwrap_err();
    assert!(
        matches!(e, ServiceError::Consent(ConsentStoreError::Rejected { .. })),
        "{e:?}"
    );
    assert_eq!(setup.head_position(), head_before);
    assert_eq!(
        setup.consent_record(challenge.challenge_digest()).state(),
        ChallengeState::Pending
    );
    assert_eq!(setup.body_source.load_calls(), 0);

    let signed =
        assertion_payload_signed(challenge.challenge_digest(), &spec, &|bytes: &[u8]| {
            device.sign(bytes)
        });
    let result = service.resolve_consent(&signed).unwrap();

    assert_eq!(result.outcome(), "installed-inactive");
    assert_eq!(result.reason_code(), "physical-install-applied");
    assert!(result.next_challenge().is_none());
    assert_eq!(result.challenge_digest(), challenge.challenge_digest());
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.body_source.load_calls(), 1);
}

// ------------------------------------------------------------------------------------------------
// Found by the `exactly_once` fuzz target.

/// A denial reconciles: its transition holds the next desired capability's consent request. The
/// service required a denial's transition to be empty, so every signed denial of the first of
/// two consent-gated installs was refused ("interactive consent decision transition was
/// substituted") after the broker had recorded it, and the consent could only expire. The
/// denial commits; the retry publishes the second challenge, whose grant installs once.
#[test]
fn test_denial_of_the_first_of_two_consent_gated_installs_commits() {
    let setup = setup_with(Options {
        requested_limit: 2,
        installable: true,
        installable_count: 2,
        ..Options::default()
    });
    setup.ask_each_time();
    let prepared = setup
        .service
        .prepare(&setup.request("two-consents:query"))
        .unwrap();
    let ids: Vec<&str> = prepared
        .prepared()
        .selections()
        .iter()
        .map(|s| s.capability_id())
        .collect();
    assert_eq!(ids.len(), 2);
    let request = desired(prepared.query_ref(), "two-consents:desired", &ids, None);
    let result = setup.service.set_desired(&request).unwrap();
    assert_eq!(result.status(), "consent-required");
    let first = result.challenge().unwrap();

    let denied = setup
        .service
        .resolve_consent(&assertion_payload(
            first.challenge_digest(),
            &AssertionSpec {
                decision: "denied",
                nonce: "two-consents-denial".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap();

    assert_eq!(denied.outcome(), "denied");
    assert_eq!(denied.reason_code(), "human-denied-install");
    let decision = setup.engine_events().pop().unwrap();
    assert_eq!(decision.reducer_event.kind, EventKind::UserDecision);
    assert_eq!(decision.revision, denied.journal_revision());
    assert_eq!(decision.record_digest, denied.journal_record_digest());
    let second_id = *ids.iter().find(|id| **id != first.capability_id()).unwrap();
    assert!(
        decision.transition.actions.iter().any(|a| {
            a.kind == ActionKind::RequestConsent && a.entity_id.as_deref() == Some(second_id)
        }),
        "{:?}",
        decision.transition.actions
    );
    assert_eq!(
        setup.consent_record(first.challenge_digest()).state(),
        ChallengeState::Settled
    );

    let retried = setup.service.set_desired(&request).unwrap();
    assert_eq!(retried.status(), "consent-required");
    let second = retried.challenge().unwrap();
    assert_eq!(second.capability_id(), second_id);
    let granted = setup
        .service
        .resolve_consent(&assertion_payload(
            second.challenge_digest(),
            &AssertionSpec {
                nonce: "two-consents-grant".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap();
    assert_eq!(granted.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(setup.install_settlements(), 1);
}

// ------------------------------------------------------------------------------------------------
// Trusted time (spec/projections.md §8.7, invariant C-12).

/// The testers' scenario: one resolution by a process whose clock runs 400 s ahead used to write
/// a trusted-time floor at +400 s, after which every correctly dated assertion was refused as
/// expired and one dated 200 s ahead was accepted. The floor now stops at the signed issue time
/// plus the skew: the person's next assertion resolves, and the early one is refused as dated in
/// the future.
#[test]
fn test_a_resolution_with_a_clock_ahead_does_not_expire_later_assertions() {
    let setup = setup_with(installable());
    let (_, desired_result) = prepare_public_consent(&setup, "clock-ahead");
    let challenge = desired_result.challenge().unwrap();
    let digest = challenge.challenge_digest();

    // Signed at the real time 12:00 for 300 s (as `ctx key sign` does), resolved with the
    // process clock 400 s ahead: refused by that clock.
    setup.clock.set(at("2026-08-03T12:06:40Z"));
    let e = setup
        .service
        .resolve_consent(&assertion_payload(
            digest,
            &AssertionSpec {
                nonce: "clock-ahead-1".to_owned(),
                issued_at: "2026-08-03T12:00:00Z".to_owned(),
                expires_at: "2026-08-03T12:05:00Z".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap_err();
    assert_eq!(e.to_string(), "signed assertion has expired");

    // Back at the real time: an assertion dated 200 s ahead is refused and changes nothing.
    setup.clock.set(at("2026-08-03T12:00:30Z"));
    let events = setup.engine_events();
    let e = setup
        .service
        .resolve_consent(&assertion_payload(
            digest,
            &AssertionSpec {
                nonce: "clock-ahead-2".to_owned(),
                issued_at: "2026-08-03T12:03:50Z".to_owned(),
                expires_at: "2026-08-03T12:08:50Z".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "signed assertion is dated in the future: issued at 2026-08-03T12:03:50Z, more than 60 \
         seconds after this process's clock 2026-08-03T12:00:30Z"
    );
    assert_eq!(e.code(), "rejected");
    assert_eq!(
        setup.consent_record(digest).state(),
        ChallengeState::Pending
    );
    assert_eq!(setup.engine_events(), events);

    // The person's fresh, correctly dated assertion resolves (it expires at 12:05:20, before the
    // +400 s clock's 12:06:40).
    let result = setup
        .service
        .resolve_consent(&assertion_payload(
            digest,
            &AssertionSpec {
                nonce: "clock-ahead-3".to_owned(),
                issued_at: "2026-08-03T12:00:20Z".to_owned(),
                expires_at: "2026-08-03T12:05:20Z".to_owned(),
                ..AssertionSpec::default()
            },
        ))
        .unwrap();
    assert_eq!(result.outcome(), "installed-inactive");
    assert_eq!(setup.body_source.load_calls(), 1);
}
