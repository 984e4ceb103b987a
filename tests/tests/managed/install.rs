//! Install policy, automatic installs, exactly-once effects: seed tests 3–5, 9–20, 22, 23, 28,
//! 29, 34, 35.

use std::sync::{Arc, Barrier};

use ctx_model::{
    ActionKind, EffectKind, EngineEvent, EventKind, HostAction, Json, UtcMicros, sha256_hex,
};
use ctx_service::{
    DesiredResultParts, DesiredSetResult, EngineComposition, InstallConsentPolicy,
    InstallPolicyStore, QueryService, ServiceError, failpoints, open_engine_composition,
    open_query_service,
};
use std::os::unix::fs::PermissionsExt as _;

use super::desired::desired;
use super::fixture::{
    self, BodySource, INSTALLABLE_SKILL_BODY, NOW, Options, PLANNER_VERSION, Setup, digest, scope,
    setup_with,
};
use crate::support::FailPoints;

const INSTALLABLE: &str = "skill:installable";

fn installable(requested_limit: i64) -> Options {
    Options {
        requested_limit,
        installable: true,
        ..Options::default()
    }
}

fn fp_setup(options: Options) -> (FailPoints, Setup) {
    let fp = FailPoints::setup();
    let setup = setup_with(Options {
        failpoints: true,
        ..options
    });
    (fp, setup)
}

fn kinds(result: &DesiredSetResult) -> Vec<&str> {
    result.actions().iter().map(|a| a.kind()).collect()
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, ServiceError>, needle: &str) -> ServiceError {
    let e = r.expect_err("the call must fail");
    assert!(
        e.to_string().contains(needle),
        "expected an error containing {needle:?}, got {e:?} ({e})"
    );
    e
}

/// Runs `set_desired` once with `point` configured to fire; the call must fail at that point.
fn crash_at(service: &QueryService, point: &str, request: &ctx_service::DesiredSetRequest) {
    fail::cfg(point, "return").unwrap();
    let e = service.set_desired(request).unwrap_err();
    fail::remove(point);
    assert!(
        matches!(&e, ServiceError::FailPoint { name, .. } if *name == point),
        "{e:?}"
    );
}

/// Prepares `label`'s query and returns its reference.
fn prepare(setup: &Setup, label: &str) -> String {
    setup
        .service
        .prepare(&setup.request(label))
        .unwrap()
        .query_ref()
        .to_owned()
}

/// `open_managed_engine_composition` on the setup's data directory.
fn composition(setup: &Setup) -> EngineComposition {
    open_engine_composition(
        &setup.data_dir,
        &setup.artifact,
        setup.ports.clone(),
        setup.policy.clone(),
        PLANNER_VERSION,
        setup.clock.clone(),
    )
    .unwrap()
}

/// The setup's decision event re-used as another event (the seed's `replace(original, ...)`).
fn event_like(
    setup: &Setup,
    event_id: &str,
    kind: EventKind,
    revision: u64,
    payload: Json,
) -> EngineEvent {
    let mut e = setup.managed_input.decision_event.clone();
    e.event_id = event_id.to_owned();
    e.kind = kind;
    e.expected_revision = revision;
    e.payload = payload;
    e
}

/// The `RequestConsent` action of the head transition (the seed's `_current_consent_request`).
fn current_consent_request(setup: &Setup) -> HostAction {
    let events = setup.engine_events();
    let head = events.last().unwrap();
    head.transition
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::RequestConsent)
        .cloned()
        .unwrap()
}

fn decision_payload(request: &HostAction, decision: &str, basis: &str) -> Json {
    let p = &request.payload;
    Json::object([
        (
            "consent_id",
            Json::str(request.consent_id.as_deref().unwrap()),
        ),
        ("decision", Json::str(decision)),
        ("decision_basis", Json::str(basis)),
        (
            "policy_snapshot_digest",
            Json::str(InstallConsentPolicy::safe_default().policy_digest()),
        ),
        (
            "requested_action_id",
            p.get("requested_action_id").cloned().unwrap(),
        ),
        (
            "requested_action_kind",
            p.get("requested_action_kind").cloned().unwrap(),
        ),
        (
            "requested_action_content_digest",
            p.get("requested_action_content_digest").cloned().unwrap(),
        ),
        (
            "requested_action_precondition_revision",
            p.get("requested_action_precondition_revision")
                .cloned()
                .unwrap(),
        ),
    ])
}

// 3
#[test]
fn test_service_sets_an_install_desired_subset_and_requires_consent() {
    let setup = setup_with(installable(1));
    setup.ask_each_time();
    let query_ref = prepare(&setup, "desired-install-query");
    let calls_before = setup.calls();
    let request = desired(&query_ref, "desired-install-choice", &[INSTALLABLE], None);

    let first = setup.service.set_desired(&request).unwrap();
    let repeated = setup.service.set_desired(&request).unwrap();

    assert_eq!(first.status(), "consent-required");
    assert_eq!(repeated.status(), "consent-required");
    assert_eq!(first.reason_code(), None);
    assert_eq!(repeated.reason_code(), None);
    assert_eq!(first.capability_ids(), [INSTALLABLE]);
    assert_eq!(repeated.capability_ids(), [INSTALLABLE]);
    assert!(first.deferred_capability_ids().is_empty());
    assert!(repeated.deferred_capability_ids().is_empty());
    assert_eq!(first.desired_set_ref(), repeated.desired_set_ref());
    assert_eq!(first.journal_revision(), 3);
    assert_eq!(repeated.journal_revision(), 3);
    assert_eq!(
        first.journal_record_digest(),
        repeated.journal_record_digest()
    );
    assert_eq!(kinds(&first), ["RequestConsent"]);
    assert_eq!(first.actions(), repeated.actions());
    assert!(first.challenge().is_some());
    assert_eq!(first.challenge(), repeated.challenge());
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.desired_count(), 1);
    assert_eq!(setup.engine_records(), 3);
}

// 4
#[test]
fn test_desired_retry_refuses_interactive_effect_without_signed_execution_path() {
    let setup = setup_with(installable(1));
    setup.ask_each_time();
    let query_ref = prepare(&setup, "desired-pending-effect-query");
    let request = desired(
        &query_ref,
        "desired-pending-effect-choice",
        &[INSTALLABLE],
        None,
    );
    let result = setup.service.set_desired(&request).unwrap();
    assert_eq!(result.status(), "consent-required");
    let composition = composition(&setup);
    let revision = composition.engine().snapshot(&scope()).unwrap().revision();
    let consent_request = current_consent_request(&setup);

    let granted = composition
        .process(&event_like(
            &setup,
            "event-desired-pending-effect-granted",
            EventKind::UserDecision,
            revision,
            decision_payload(&consent_request, "granted", "interactive"),
        ))
        .unwrap();
    assert_eq!(
        granted.actions.iter().map(|a| a.kind).collect::<Vec<_>>(),
        [ActionKind::InstallCapability]
    );
    let observed = composition
        .process(&event_like(
            &setup,
            "event-desired-pending-effect-observed",
            EventKind::ProviderSubmissionObserved,
            granted.to_revision,
            Json::object([("capabilities", Json::Arr(vec![]))]),
        ))
        .unwrap();
    assert!(observed.actions.is_empty());
    let state = composition
        .engine()
        .snapshot(&scope())
        .unwrap()
        .into_state()
        .unwrap();
    assert_eq!(
        state
            .pending_effects
            .iter()
            .map(|e| (e.effect, e.action.kind))
            .collect::<Vec<_>>(),
        [(EffectKind::Install, ActionKind::InstallCapability)]
    );

    expect_err(
        setup.service.set_desired(&request),
        "interactive install decision",
    );

    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
}

// 5 (x3)
fn actionless_revision_reoffers_consent(event_kind: EventKind, label: &str) {
    let setup = setup_with(installable(1));
    setup.ask_each_time();
    let prepared = setup
        .service
        .prepare(&setup.request(&format!("stale-consent-{label}-query")))
        .unwrap();
    let request = desired(
        prepared.query_ref(),
        &format!("stale-consent-{label}-choice"),
        &[INSTALLABLE],
        None,
    );
    let initial = setup.service.set_desired(&request).unwrap();
    assert_eq!(initial.status(), "consent-required");
    let payload = match event_kind {
        EventKind::ProviderSubmissionObserved => {
            Json::object([("capabilities", Json::Arr(vec![]))])
        }
        EventKind::ToolCallObserved => Json::object([
            ("capability_id", Json::str(INSTALLABLE)),
            (
                "source_digest",
                Json::str(prepared.prepared().selections()[0].source_digest()),
            ),
            ("outcome", Json::str("failed")),
        ]),
        _ => Json::object::<&str>([]),
    };
    let composition = composition(&setup);
    let consumed = composition
        .process(&event_like(
            &setup,
            &format!("event-stale-consent-{label}"),
            event_kind,
            3,
            payload,
        ))
        .unwrap();
    let state = composition
        .engine()
        .snapshot(&scope())
        .unwrap()
        .into_state()
        .unwrap();
    assert_eq!(
        consumed.actions.iter().map(|a| a.kind).collect::<Vec<_>>(),
        [ActionKind::RequestConsent]
    );
    assert_eq!(state.pending_consents.len(), 1);

    let retried = setup.service.set_desired(&request).unwrap();

    assert_eq!(retried.status(), "consent-required");
    assert_eq!(retried.reason_code(), None);
    assert!(retried.deferred_capability_ids().is_empty());
    assert!(retried.failed_capability_ids().is_empty());
    assert!(retried.challenge().is_some());
    assert_eq!(kinds(&retried), ["RequestConsent"]);
}

#[test]
fn test_actionless_revision_reoffers_consent_and_retry_never_reports_reconciled_event_kind_provider_submission_observed()
 {
    actionless_revision_reoffers_consent(
        EventKind::ProviderSubmissionObserved,
        "ProviderSubmissionObserved",
    );
}

#[test]
fn test_actionless_revision_reoffers_consent_and_retry_never_reports_reconciled_event_kind_tool_call_observed()
 {
    actionless_revision_reoffers_consent(EventKind::ToolCallObserved, "ToolCallObserved");
}

#[test]
fn test_actionless_revision_reoffers_consent_and_retry_never_reports_reconciled_event_kind_turn_starting()
 {
    actionless_revision_reoffers_consent(EventKind::TurnStarting, "TurnStarting");
}

// 9
#[test]
fn test_preapproved_desired_install_executes_once_and_retries_from_receipt() {
    let setup = setup_with(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-query");
    let request = desired(&query_ref, "desired-auto-choice", &[INSTALLABLE], None);

    let first = setup.service.set_desired(&request).unwrap();
    let repeated = setup.service.set_desired(&request).unwrap();

    for r in [&first, &repeated] {
        assert_eq!(r.status(), "effect-pending");
        assert_eq!(r.reason_code(), None);
        assert!(r.deferred_capability_ids().is_empty());
        assert!(r.failed_capability_ids().is_empty());
        assert!(r.challenge().is_none());
    }
    assert_eq!(first.desired_set_ref(), repeated.desired_set_ref());
    assert_eq!(kinds(&first), ["ActivateCapability"]);
    assert_eq!(repeated.actions(), first.actions());
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(
        std::fs::read_to_string(setup.installed_skill_path()).unwrap(),
        INSTALLABLE_SKILL_BODY
    );
    assert_eq!(setup.consent_challenges(), 0);
    let events = setup.engine_events();
    assert_eq!(events.len(), 5);
    assert!(
        events[3]
            .reducer_event
            .event_id
            .starts_with("ctx-auto-install:")
    );
    assert_eq!(events[3].reducer_event.kind, EventKind::UserDecision);
    assert_eq!(events[4].reducer_event.kind, EventKind::ActionApplied);
}

// 10
#[test]
fn test_two_services_converge_on_one_preapproved_install_and_receipt() {
    let setup = setup_with(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-concurrent-query");
    let peer = setup.peer();
    let request = desired(
        &query_ref,
        "desired-auto-concurrent-choice",
        &[INSTALLABLE],
        None,
    );
    let barrier = Barrier::new(2);
    let services: [&QueryService; 2] = [&setup.service, &peer];

    let results: Vec<DesiredSetResult> = std::thread::scope(|s| {
        let handles: Vec<_> = services
            .iter()
            .map(|service| {
                let (barrier, request) = (&barrier, &request);
                s.spawn(move || {
                    barrier.wait();
                    service.set_desired(request).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    assert_eq!(results[0].desired_set_ref(), results[1].desired_set_ref());
    assert_eq!(results[0].status(), "effect-pending");
    assert_eq!(results[1].status(), "effect-pending");
    assert_eq!(results[0].actions(), results[1].actions());
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.engine_records(), 5);
    assert_eq!(setup.install_settlements(), 1);

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.status(), "effect-pending");
    assert!(recovered.failed_capability_ids().is_empty());
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.engine_records(), 5);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(setup.install_outcomes(), 1);
    assert_eq!(setup.install_settlements(), 1);
}

// 11
#[test]
fn test_preapproved_install_requires_captured_actuator_before_grant() {
    let setup = setup_with(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-no-actuator-query");
    let mut config = setup.full_config();
    config.skill_cas = None;
    let without_actuator = open_query_service(config).unwrap();

    let e = expect_err(
        without_actuator.set_desired(&desired(
            &query_ref,
            "desired-auto-no-actuator-choice",
            &[INSTALLABLE],
            None,
        )),
        "no physical installation actuator",
    );

    assert!(matches!(e, ServiceError::NoActuator), "{e:?}");
    assert_eq!(setup.body_source.load_calls(), 0);
    let kinds: Vec<EventKind> = setup
        .engine_events()
        .iter()
        .map(|e| e.reducer_event.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::SessionStarted,
            EventKind::IntentObserved,
            EventKind::ReassessmentRequested
        ]
    );
}

// 12
#[test]
fn test_preapproved_policy_race_fails_before_grant_and_execution() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-policy-race-query");
    let policy_root = setup.policy_root.clone();
    let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = changed.clone();
    // The seed patches `resolve_install_execution_binding` to persist the safe default once the
    // binding is resolved: a callback at the fail point right after binding resolution.
    fail::cfg_callback(failpoints::AUTO_AFTER_BINDING, move || {
        if !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            InstallPolicyStore::new(&policy_root)
                .unwrap()
                .persist(&InstallConsentPolicy::safe_default())
                .unwrap();
        }
    })
    .unwrap();
    let request = desired(
        &query_ref,
        "desired-auto-policy-race-choice",
        &[INSTALLABLE],
        None,
    );

    let e = setup.service.set_desired(&request).unwrap_err();
    fail::remove(failpoints::AUTO_AFTER_BINDING);

    assert!(e.to_string().contains("policy"), "{e:?} ({e})");
    assert!(changed.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.engine_records(), 3);
}

// 13
#[test]
fn test_indeterminate_preapproved_install_is_explicit_then_settles_failed_once() {
    let setup = setup_with(installable(1));
    setup.body_source.fail_next_loads(1);
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-indeterminate-query");
    let request = desired(
        &query_ref,
        "desired-auto-indeterminate-choice",
        &[INSTALLABLE],
        None,
    );

    let indeterminate = setup.service.set_desired(&request).unwrap();
    let failed = setup.service.set_desired(&request).unwrap();
    let repeated = setup.service.set_desired(&request).unwrap();

    assert_eq!(indeterminate.status(), "lifecycle-deferred");
    assert_eq!(
        indeterminate.reason_code(),
        Some("automatic-install-indeterminate")
    );
    assert_eq!(indeterminate.deferred_capability_ids(), [INSTALLABLE]);
    assert!(indeterminate.failed_capability_ids().is_empty());
    for r in [&failed, &repeated] {
        assert_eq!(r.status(), "lifecycle-deferred");
        assert_eq!(r.reason_code(), Some("automatic-install-failed"));
        assert_eq!(r.deferred_capability_ids(), [INSTALLABLE]);
        assert_eq!(r.failed_capability_ids(), [INSTALLABLE]);
    }
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(setup.install_outcomes(), 1);
    assert_eq!(setup.install_settlements(), 1);
}

// 14
#[test]
fn test_failed_auto_install_progresses_to_next_capability_without_losing_failure() {
    let setup = setup_with(Options {
        installable_count: 2,
        ..installable(2)
    });
    setup.body_source.fail_next_loads(1);
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-mixed-query");
    let request = desired(
        &query_ref,
        "desired-auto-mixed-choice",
        &[INSTALLABLE, "skill:installable-2"],
        None,
    );

    let first = setup.service.set_desired(&request).unwrap();
    let progressed = setup.service.set_desired(&request).unwrap();
    let repeated = setup.service.set_desired(&request).unwrap();

    assert_eq!(first.reason_code(), Some("automatic-install-indeterminate"));
    for r in [&progressed, &repeated] {
        assert_eq!(r.status(), "effect-pending");
        assert!(r.deferred_capability_ids().is_empty());
        assert_eq!(r.failed_capability_ids(), [INSTALLABLE]);
    }
    assert_eq!(kinds(&progressed), ["ActivateCapability"]);
    assert_eq!(setup.body_source.load_calls(), 2);
    assert_eq!(setup.install_claims(), 2);
    assert_eq!(setup.install_outcomes(), 2);
    assert_eq!(setup.install_settlements(), 2);
}

// 15
#[test]
fn test_preapproved_install_recovers_after_crash_following_decision() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-crash-after-decision-query");
    let request = desired(
        &query_ref,
        "auto-crash-after-decision-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::AUTO_BEFORE_EXECUTE, &request);
    assert_eq!(setup.engine_records(), 4);
    assert_eq!(setup.install_claims(), 0);
    // The exact grant is already journaled: a later policy change cannot revoke its pending
    // physical action or force a second consent decision.
    setup.ask_each_time();

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.status(), "effect-pending");
    assert!(recovered.failed_capability_ids().is_empty());
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 16
#[test]
fn test_preapproved_install_rejects_changed_target_after_committed_decision() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-changed-target-query");
    let request = desired(
        &query_ref,
        "auto-changed-target-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::AUTO_BEFORE_EXECUTE, &request);
    let changed_root = setup.root.join("changed-skills");
    std::fs::create_dir(&changed_root).unwrap();
    std::fs::set_permissions(&changed_root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let changed_source = Arc::new(BodySource::default());
    let mut config = setup.full_config();
    config.skill_cas = Some(Arc::new(fixture::skill_runtime(
        &changed_root,
        &changed_source,
    )));
    let reopened = open_query_service(config).unwrap();

    expect_err(reopened.set_desired(&request), "captured actuator");

    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(changed_source.load_calls(), 0);
    assert_eq!(std::fs::read_dir(&setup.skill_root).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&changed_root).unwrap().count(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);
}

// 17
#[test]
fn test_preapproved_install_never_reapplies_after_crash_following_claim() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-crash-after-claim-query");
    let request = desired(
        &query_ref,
        "auto-crash-after-claim-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::AFTER_CLAIM, &request);
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(setup.install_outcomes(), 0);

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.status(), "lifecycle-deferred");
    assert_eq!(recovered.reason_code(), Some("automatic-install-failed"));
    assert_eq!(recovered.failed_capability_ids(), [INSTALLABLE]);
    assert_eq!(setup.body_source.load_calls(), 0);
}

// 18
#[test]
fn test_preapproved_install_expired_before_claim_retires_once_and_next_choice_progresses() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-expired-before-claim-query");
    let request = desired(
        &query_ref,
        "auto-expired-before-claim-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::AUTO_BEFORE_EXECUTE, &request);
    setup
        .clock
        .set(UtcMicros::parse("2026-08-03T14:00:00Z").unwrap());

    let retired = setup.service.set_desired(&request).unwrap();
    let repeated = setup.service.set_desired(&request).unwrap();

    assert_eq!(retired.journal_revision(), repeated.journal_revision());
    assert_eq!(
        retired.journal_record_digest(),
        repeated.journal_record_digest()
    );
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.install_claims(), 0);
    assert_eq!(setup.install_outcomes(), 0);
    let expiries = setup
        .engine_events()
        .iter()
        .filter(|e| e.reducer_event.kind == EventKind::ActionExpired)
        .count();
    assert_eq!(expiries, 1);

    let progressed = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "auto-expired-before-claim-next-choice",
            &[INSTALLABLE],
            Some(retired.desired_set_ref()),
        ))
        .unwrap();

    assert_ne!(progressed.reason_code(), Some("automatic-install-failed"));
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.install_claims(), 1);
}

// 19
#[test]
fn test_preapproved_install_recovers_after_crash_following_outcome() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-crash-after-outcome-query");
    let request = desired(
        &query_ref,
        "auto-crash-after-outcome-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::AFTER_OUTCOME, &request);
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.install_claims(), 1);
    assert_eq!(setup.install_outcomes(), 1);
    assert_eq!(setup.install_settlements(), 0);

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.status(), "effect-pending");
    assert!(recovered.failed_capability_ids().is_empty());
    assert_eq!(setup.body_source.load_calls(), 1);
}

// 20
#[test]
fn test_preapproved_install_recovers_after_crash_following_receipt() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "auto-crash-after-receipt-query");
    let request = desired(
        &query_ref,
        "auto-crash-after-receipt-choice",
        &[INSTALLABLE],
        None,
    );

    crash_at(&setup.service, failpoints::AUTO_AFTER_EXECUTE, &request);

    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.engine_records(), 5);
    // The retry converges without touching the target again.
    let recovered = setup.service.set_desired(&request).unwrap();
    assert_eq!(recovered.status(), "effect-pending");
    assert_eq!(setup.body_source.load_calls(), 1);
    assert_eq!(setup.engine_records(), 5);
}

// 22
#[test]
fn test_desired_result_factory_requires_challenge_action_correspondence() {
    let setup = setup_with(installable(1));
    setup.ask_each_time();
    let query_ref = prepare(&setup, "desired-result-challenge-query");
    let result = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "desired-result-challenge-choice",
            &[INSTALLABLE],
            None,
        ))
        .unwrap();
    assert!(result.challenge().is_some());
    let record = setup.store().load_latest_desired_set(&query_ref).unwrap();

    let e = DesiredSetResult::validate_parts(
        &record,
        &DesiredResultParts {
            deferred_capability_ids: vec![],
            failed_capability_ids: vec![],
            status: "consent-required",
            reason_code: None,
            actions: vec![],
            challenge: result.into_challenge(),
        },
    )
    .unwrap_err();

    assert!(e.to_string().contains("action summary"), "{e}");
}

// 23
/// `set(result.__slots__)` is the 14 accessors below (the type has no public fields and no other
/// accessor, see `service/src/managed/desired.rs`); `hasattr` of the forbidden names and `repr`
/// are checked on the Debug text, which names every field.
#[test]
fn test_automatic_desired_result_exposes_no_execution_or_content_authority() {
    let setup = setup_with(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-auto-privacy-query");

    let result = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "desired-auto-privacy-choice",
            &[INSTALLABLE],
            None,
        ))
        .unwrap();

    let _slots = (
        result.actions(),
        result.capability_ids(),
        result.challenge(),
        result.decision_digest(),
        result.deferred_capability_ids(),
        result.desired_set_ref(),
        result.failed_capability_ids(),
        result.journal_record_digest(),
        result.journal_revision(),
        result.logical_choice_id(),
        result.plan_id(),
        result.query_ref(),
        result.reason_code(),
        result.status(),
    );
    let repr = format!("{result:?}");
    assert!(!repr.contains(&*setup.root.to_string_lossy()), "{repr}");
    for forbidden in [
        "artifact",
        "body",
        "command",
        "driver",
        "execution_binding",
        "install_action",
        "path",
        "receipt",
        "selection",
        "transition",
    ] {
        assert!(!repr.contains(forbidden), "{forbidden} in {repr}");
    }
}

// 28
#[test]
fn test_committed_desired_recovery_marks_before_deferring_policy_drift() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.ask_each_time();
    let query_ref = prepare(&setup, "desired-policy-drift-query");
    let request = desired(
        &query_ref,
        "desired-policy-drift-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::DESIRED_BEFORE_MARK, &request);
    setup.preapprove_skills();

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.status(), "lifecycle-deferred");
    assert_eq!(
        recovered.reason_code(),
        Some("install-policy-changed-after-desired-commit")
    );
    assert_eq!(recovered.deferred_capability_ids(), [INSTALLABLE]);
    assert!(recovered.challenge().is_none());
    assert!(
        setup
            .store()
            .load_latest_desired_set(&query_ref)
            .unwrap()
            .is_committed()
    );
    assert_eq!(setup.consent_challenges(), 0);
}

// 29
#[test]
fn test_reserved_desired_policy_drift_commits_and_allows_exact_reassessment() {
    let (_fp, setup) = fp_setup(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "desired-reserved-policy-drift-query");
    let request = desired(
        &query_ref,
        "desired-reserved-policy-drift-choice",
        &[INSTALLABLE],
        None,
    );
    crash_at(&setup.service, failpoints::DESIRED_BEFORE_COMMIT, &request);
    let pending = setup.store().load_pending_desired_set(&scope()).unwrap();
    setup.ask_each_time();

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.desired_set_ref(), pending.desired_set_ref());
    assert_eq!(recovered.status(), "lifecycle-deferred");
    assert_eq!(
        recovered.reason_code(),
        Some("install-policy-changed-after-desired-commit")
    );
    assert_eq!(recovered.deferred_capability_ids(), [INSTALLABLE]);
    assert!(
        setup
            .store()
            .load_latest_desired_set(&query_ref)
            .unwrap()
            .is_committed()
    );

    let reassessed = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "desired-current-policy-choice",
            &[INSTALLABLE],
            Some(recovered.desired_set_ref()),
        ))
        .unwrap();

    assert_eq!(reassessed.status(), "consent-required");
    assert!(reassessed.challenge().is_some());
    assert_eq!(
        reassessed.journal_revision(),
        recovered.journal_revision() + 1
    );
    assert_eq!(setup.body_source.load_calls(), 0);
    assert_eq!(setup.committed_desired_count(), 2);
    assert_eq!(setup.engine_records(), 4);
}

// 34
#[test]
fn test_desired_install_uses_fresh_trusted_time_and_full_digest_identities() {
    let setup = setup_with(Options {
        trusted_now: UtcMicros::parse("2026-08-03T15:30:00Z").unwrap(),
        ..installable(1)
    });
    setup.ask_each_time();
    let query_ref = prepare(&setup, "desired-fresh-time-query");

    let result = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "desired-fresh-time-choice",
            &[INSTALLABLE],
            None,
        ))
        .unwrap();

    let stored = setup.store().load_latest_desired_set(&query_ref).unwrap();
    let event = stored.event();
    let row = &event
        .payload
        .get("desired_capabilities")
        .and_then(|r| r.as_arr())
        .unwrap()[0];
    assert_eq!(event.occurred_at, "2026-08-03T15:30:00Z");
    assert_ne!(
        event.occurred_at,
        setup.managed_input.decision_event.occurred_at
    );
    assert_ne!(event.occurred_at, NOW);
    let hex_tail = |s: &str, prefix: &str| {
        let tail = s.strip_prefix(prefix).unwrap();
        assert_eq!(tail.len(), 64, "{s}");
        assert!(tail.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
    };
    hex_tail(&event.event_id, "ctx-desired:");
    let owner = event.payload.get_str("owner_id").unwrap();
    hex_tail(owner, "ctx-desired:");
    let lease = row.get_str("lease_id").unwrap();
    hex_tail(lease, "ctx-lease:");
    // The lease formula, written out by hand (sorted keys, compact, ASCII).
    let mapping = |source_digest: &str| {
        format!(
            "{{\"capability_id\":\"{}\",\"kind\":\"{}\",\"owner_id\":\"{}\",\"schema\":\"ctx.managed-desired-lease.v1\",\"source_digest\":\"{}\"}}",
            row.get_str("capability_id").unwrap(),
            row.get_str("kind").unwrap(),
            owner,
            source_digest
        )
    };
    let expected_lease = sha256_hex(&mapping(row.get_str("source_digest").unwrap()));
    let changed_source_lease = sha256_hex(&mapping(&digest("changed-catalog-source")));
    assert_eq!(lease, format!("ctx-lease:{expected_lease}"));
    assert_ne!(changed_source_lease, expected_lease);
    let challenge = result.challenge().unwrap();
    assert_eq!(challenge.expires_at(), "2026-08-03T16:30:00Z");
}

// 35 (x2)
fn preapproved_install_still_requires_consent(permission: bool, risk: &str) {
    let setup = setup_with(Options {
        permission_expansion: permission,
        credential_requirement: !permission,
        ..installable(1)
    });
    setup.preapprove_skills();
    let query_ref = prepare(&setup, &format!("desired-sensitive-{risk}-query"));

    let result = setup
        .service
        .set_desired(&desired(
            &query_ref,
            &format!("desired-sensitive-{risk}-choice"),
            &[INSTALLABLE],
            None,
        ))
        .unwrap();

    assert_eq!(result.status(), "consent-required");
    assert_eq!(result.reason_code(), None);
    assert!(result.deferred_capability_ids().is_empty());
    assert!(result.challenge().is_some());
}

#[test]
fn test_preapproved_install_still_requires_consent_for_sensitive_risk_risk_permission() {
    preapproved_install_still_requires_consent(true, "permission");
}

#[test]
fn test_preapproved_install_still_requires_consent_for_sensitive_risk_risk_credential() {
    preapproved_install_still_requires_consent(false, "credential");
}

// ------------------------------------------------------------------------------------------------
// Durability cost (spec/service.md §6): markers for counting fsyncs under strace
// ------------------------------------------------------------------------------------------------

/// One `set_desired` without installs and one pre-approved install, each between stderr
/// markers: `strace -f -e trace=fsync,fdatasync,write -o /tmp/trace <acceptance binary>
/// managed::install::desired_and_install_fsyncs_between_markers --exact --nocapture` and count
/// the sync calls between `CTX-FSYNC-<NAME>-BEGIN` and `-END`. The journal records appended are
/// asserted here; the sync counts are reported in the spec.
#[test]
fn desired_and_install_fsyncs_between_markers() {
    // A choice without installs: the reservation, then the engine event with its mark.
    let plain = super::fixture::setup_limit(1);
    let query_ref = prepare(&plain, "fsync-desired-query");
    let journal = plain.journal();
    let before = journal.head_position().unwrap();
    eprintln!("CTX-FSYNC-DESIRED-BEGIN");
    let result = plain
        .service
        .set_desired(&desired(&query_ref, "fsync-desired-choice", &[], None))
        .unwrap();
    eprintln!("CTX-FSYNC-DESIRED-END");
    assert_eq!(result.status(), "reconciled");
    assert_eq!(journal.head_position().unwrap() - before, 3);

    // A pre-approved install: reservation, desired event + mark, grant, claim, outcome, receipt.
    let setup = setup_with(installable(1));
    setup.preapprove_skills();
    let query_ref = prepare(&setup, "fsync-install-query");
    let journal = setup.journal();
    let before = journal.head_position().unwrap();
    eprintln!("CTX-FSYNC-INSTALL-BEGIN");
    let result = setup
        .service
        .set_desired(&desired(
            &query_ref,
            "fsync-install-choice",
            &[INSTALLABLE],
            None,
        ))
        .unwrap();
    eprintln!("CTX-FSYNC-INSTALL-END");
    assert_eq!(result.status(), "effect-pending");
    assert_eq!(journal.head_position().unwrap() - before, 7);
}
