//! Desired sets without installs: seed tests 2, 6, 7, 8, 21, 24–27, 30–33, 36.

use std::sync::Barrier;

use ctx_model::{EventKind, Json};
use ctx_projections::query_store::QueryStoreError;
use ctx_service::{
    DesiredResultParts, DesiredSetRequest, DesiredSetResult, QueryService, ServiceError,
    failpoints, open_engine_composition,
};

use super::assert_not_impl;
use super::fixture::{Options, Setup, digest, request, scope, setup_limit, setup_with};
use crate::support::FailPoints;

assert_not_impl!(DesiredSetResult, Clone);
assert_not_impl!(DesiredSetResult, serde::Serialize);
assert_not_impl!(DesiredSetRequest, Clone);
assert_not_impl!(DesiredSetRequest, serde::Serialize);

/// `DesiredSetRequest(query_ref=…, logical_choice_id=_digest(label), capability_ids=…)`.
pub fn desired(
    query_ref: &str,
    label: &str,
    ids: &[&str],
    previous: Option<&str>,
) -> DesiredSetRequest {
    DesiredSetRequest::new(query_ref, &digest(label), ids, previous).unwrap()
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, ServiceError>, needle: &str) -> ServiceError {
    let e = r.expect_err("the call must fail");
    assert!(
        e.to_string().contains(needle),
        "expected an error containing {needle:?}, got {e:?} ({e})"
    );
    e
}

fn failpoint_setup(requested_limit: i64) -> (FailPoints, Setup) {
    let fp = FailPoints::setup();
    let setup = setup_with(Options {
        requested_limit,
        failpoints: true,
        ..Options::default()
    });
    (fp, setup)
}

// 2
#[test]
fn test_service_sets_an_empty_desired_subset_without_replanning() {
    let setup = setup_limit(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-empty-query"))
        .unwrap();
    let calls_before = setup.calls();
    let request = desired(prepared.query_ref(), "desired-empty-choice", &[], None);

    let result = setup.service.set_desired(&request).unwrap();

    assert_eq!(result.query_ref(), prepared.query_ref());
    assert_eq!(result.logical_choice_id(), request.logical_choice_id());
    assert!(result.capability_ids().is_empty());
    assert!(result.deferred_capability_ids().is_empty());
    assert_eq!(result.status(), "reconciled");
    assert_eq!(result.reason_code(), None);
    assert_eq!(result.plan_id(), prepared.prepared().plan_id());
    assert_eq!(
        result.decision_digest(),
        prepared.prepared().decision_digest()
    );
    assert_eq!(result.journal_revision(), 3);
    assert_eq!(result.journal_record_digest().len(), 64);
    assert!(result.actions().is_empty());
    assert!(result.challenge().is_none());
    assert_eq!(setup.calls(), calls_before);
    let stored = setup
        .store()
        .load_latest_desired_set(prepared.query_ref())
        .unwrap();
    assert!(stored.is_committed());
    assert_eq!(stored.desired_set_ref(), result.desired_set_ref());
    // copy / deepcopy / pickle: the static assertions at the top of this module.
}

// 6
#[test]
fn test_desired_request_canonicalizes_committed_plan_order_and_manual_deferral() {
    let setup = setup_limit(3);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-manual-query"))
        .unwrap();
    let plan_order: Vec<&str> = prepared
        .prepared()
        .selections()
        .iter()
        .map(|s| s.capability_id())
        .collect();
    let requested = [plan_order[1], plan_order[0]];

    let result = setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            "desired-manual-choice",
            &requested,
            None,
        ))
        .unwrap();

    assert_eq!(result.capability_ids(), &plan_order[..2]);
    assert_eq!(result.deferred_capability_ids(), &plan_order[..2]);
    assert_eq!(result.status(), "manual-deferred");
    assert_eq!(
        result.reason_code(),
        Some("manual-capability-requires-user-action")
    );
    assert!(result.challenge().is_none());
}

// 7 (x3). The seed's first case passes a list where an exact tuple is required, which Rust's
// types rule out; the nearest runtime check is the host's JSON form of the request, whose
// `capability_ids` must be an array.
#[test]
fn test_desired_request_rejects_unsafe_subsets_exact_tuple() {
    let json = Json::object([
        ("query_ref", Json::str(format!("mqr_{}", "a".repeat(64)))),
        (
            "logical_choice_id",
            Json::str(digest("unsafe-desired-request")),
        ),
        ("capability_ids", Json::str("skill:test")),
    ]);
    let e = DesiredSetRequest::from_json(&json).unwrap_err();
    assert!(e.to_string().contains("exact array"), "{e}");
}

#[test]
fn test_desired_request_rejects_unsafe_subsets_unique() {
    let e = DesiredSetRequest::new(
        &format!("mqr_{}", "a".repeat(64)),
        &digest("unsafe-desired-request"),
        &["skill:test", "skill:test"],
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ServiceError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("unique"), "{e}");
}

#[test]
fn test_desired_request_rejects_unsafe_subsets_more_than_five() {
    let ids: Vec<String> = (0..6).map(|i| format!("skill:test-{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let e = DesiredSetRequest::new(
        &format!("mqr_{}", "a".repeat(64)),
        &digest("unsafe-desired-request"),
        &ids,
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ServiceError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("more than five"), "{e}");
}

// 8
#[test]
fn test_service_rejects_unknown_desired_capability_before_durable_mutation() {
    let setup = setup_limit(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-unknown-query"))
        .unwrap();

    let e = expect_err(
        setup.service.set_desired(&desired(
            prepared.query_ref(),
            "desired-unknown-choice",
            &["skill:not-in-plan"],
            None,
        )),
        "not contained",
    );

    assert!(matches!(e, ServiceError::DesiredConflict(_)), "{e:?}");
    assert_eq!(setup.desired_count(), 0);
    assert_eq!(setup.engine_records(), 2);
}

// 21
#[test]
fn test_desired_result_factory_enforces_canonical_bounded_outcome_subsets() {
    let setup = setup_limit(2);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-result-invariant-query"))
        .unwrap();
    let ids: Vec<&str> = prepared
        .prepared()
        .selections()
        .iter()
        .map(|s| s.capability_id())
        .collect();
    let owned = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            "desired-result-invariant-choice",
            &ids,
            None,
        ))
        .unwrap();
    let record = setup
        .store()
        .load_latest_desired_set(prepared.query_ref())
        .unwrap();
    let check = |deferred: Vec<String>,
                 failed: Vec<String>,
                 status: &'static str,
                 reason_code: Option<&'static str>| {
        DesiredSetResult::validate_parts(
            &record,
            &DesiredResultParts {
                deferred_capability_ids: deferred,
                failed_capability_ids: failed,
                status,
                reason_code,
                actions: Vec::new(),
                challenge: None,
            },
        )
    };
    let reversed: Vec<&str> = ids.iter().rev().copied().collect();

    let e = check(
        owned(&reversed),
        vec![],
        "manual-deferred",
        Some("manual-capability-requires-user-action"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("deferred subset"), "{e}");
    let e = check(vec![], owned(&ids[..1]), "reconciled", None).unwrap_err();
    assert!(e.to_string().contains("failed subset"), "{e}");
    let e = check(
        owned(&ids),
        owned(&[ids[0], ids[0]]),
        "manual-deferred",
        Some("manual-capability-requires-user-action"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("failed subset"), "{e}");
    let e = check(owned(&ids), vec![], "effect-pending", None).unwrap_err();
    assert!(e.to_string().contains("deferred subset"), "{e}");
    // The canonical parts themselves are accepted.
    check(
        owned(&ids),
        vec![],
        "manual-deferred",
        Some("manual-capability-requires-user-action"),
    )
    .unwrap();
}

// 24
#[test]
fn test_service_accepts_sequential_choices_with_exact_predecessors() {
    let setup = setup_limit(2);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-sequence-query"))
        .unwrap();
    let capability_id = prepared.prepared().selections()[0].capability_id();
    let first_request = desired(prepared.query_ref(), "desired-sequence-first", &[], None);
    let first = setup.service.set_desired(&first_request).unwrap();
    let second = setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            "desired-sequence-second",
            &[capability_id],
            Some(first.desired_set_ref()),
        ))
        .unwrap();
    let unloaded = setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            "desired-sequence-third",
            &[],
            Some(second.desired_set_ref()),
        ))
        .unwrap();

    assert_eq!(first.status(), "reconciled");
    assert_eq!(unloaded.status(), "reconciled");
    assert_eq!(second.status(), "manual-deferred");
    assert_eq!(first.journal_revision(), 3);
    assert_eq!(second.journal_revision(), 4);
    assert_eq!(unloaded.journal_revision(), 5);
    let e = setup.service.set_desired(&first_request).unwrap_err();
    assert!(matches!(e, ServiceError::DesiredSuperseded(_)), "{e:?}");
    let e = setup
        .service
        .set_desired(&desired(
            prepared.query_ref(),
            "desired-sequence-stale-fourth",
            &[capability_id],
            Some(first.desired_set_ref()),
        ))
        .unwrap_err();
    assert!(matches!(e, ServiceError::DesiredSuperseded(_)), "{e:?}");
}

/// Runs `set_desired` once with `point` configured to fire; the call must fail at that point.
fn crash_at(setup: &Setup, point: &str, request: &DesiredSetRequest) {
    fail::cfg(point, "return").unwrap();
    let e = setup.service.set_desired(request).unwrap_err();
    fail::remove(point);
    assert!(
        matches!(e, ServiceError::FailPoint { name, .. } if name == point),
        "{e:?}"
    );
}

// 25
#[test]
fn test_set_desired_recovers_a_reservation_after_process_crash() {
    let (_fp, setup) = failpoint_setup(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-reserve-crash-query"))
        .unwrap();
    let request = desired(
        prepared.query_ref(),
        "desired-reserve-crash-choice",
        &[],
        None,
    );
    crash_at(&setup, failpoints::DESIRED_BEFORE_COMMIT, &request);
    let pending = setup.store().load_pending_desired_set(&scope()).unwrap();

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.desired_set_ref(), pending.desired_set_ref());
    assert_eq!(recovered.status(), "reconciled");
    assert!(
        setup
            .store()
            .load_desired_set(pending.desired_set_ref())
            .unwrap()
            .is_committed()
    );
}

// 26
#[test]
fn test_set_desired_recovers_engine_commit_before_store_mark() {
    let (_fp, setup) = failpoint_setup(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-mark-crash-query"))
        .unwrap();
    let request = desired(prepared.query_ref(), "desired-mark-crash-choice", &[], None);
    crash_at(&setup, failpoints::DESIRED_BEFORE_MARK, &request);
    let pending = setup.store().load_pending_desired_set(&scope()).unwrap();
    assert_eq!(setup.engine_records(), 3);

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.desired_set_ref(), pending.desired_set_ref());
    assert_eq!(recovered.journal_revision(), 3);
    assert_eq!(setup.engine_records(), 3);
}

// 27
#[test]
fn test_set_desired_recovers_after_store_mark_before_result() {
    let (_fp, setup) = failpoint_setup(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-result-crash-query"))
        .unwrap();
    let request = desired(
        prepared.query_ref(),
        "desired-result-crash-choice",
        &[],
        None,
    );
    crash_at(&setup, failpoints::DESIRED_BEFORE_RESULT, &request);
    let committed = setup
        .store()
        .load_latest_desired_set(prepared.query_ref())
        .unwrap();
    assert!(committed.is_committed());

    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.desired_set_ref(), committed.desired_set_ref());
    assert_eq!(recovered.status(), "reconciled");
}

/// A `DevelopmentObserved` replacement plan for `work_ref`, decided at revision 2.
fn replacement_input(setup: &Setup, work_ref: &str, event_id: &str, plan_id: &str) {
    let original = &setup.managed_input.decision_event;
    let mut development = original.clone();
    development.event_id = event_id.to_owned();
    development.kind = EventKind::DevelopmentObserved;
    development.expected_revision = 2;
    development.correlation_id = Some(plan_id.to_owned());
    development.causation_id = Some(original.event_id.clone());
    setup.inputs.insert(
        work_ref,
        setup
            .managed_input
            .with_events(setup.managed_input.session_started.clone(), development),
    );
}

// 30
#[test]
fn test_pending_desired_blocks_a_replacement_plan_before_registration() {
    let (_fp, setup) = failpoint_setup(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-block-plan-query"))
        .unwrap();
    let choice = desired(prepared.query_ref(), "desired-block-plan-choice", &[], None);
    crash_at(&setup, failpoints::DESIRED_BEFORE_COMMIT, &choice);
    replacement_input(
        &setup,
        "work-after-pending-desired",
        "event-development-blocked-by-desired",
        "plan-after-pending-desired",
    );

    let e = setup
        .service
        .prepare(&request(
            "plan-blocked-by-pending-desired",
            "work-after-pending-desired",
        ))
        .unwrap_err();

    assert!(matches!(e, ServiceError::Busy(_)), "{e:?}");
    assert_eq!(setup.query_count(), 1);
    assert_eq!(setup.engine_records(), 2);
}

// 31
#[test]
fn test_two_services_serialize_competing_first_desired_choices() {
    let setup = setup_limit(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-two-service-query"))
        .unwrap();
    let peer = setup.peer();
    let barrier = Barrier::new(2);
    let requests = [
        desired(prepared.query_ref(), "desired-two-service-a", &[], None),
        desired(prepared.query_ref(), "desired-two-service-b", &[], None),
    ];
    let services: [&QueryService; 2] = [&setup.service, &peer];

    let outcomes: Vec<Result<DesiredSetResult, ServiceError>> = std::thread::scope(|s| {
        let handles: Vec<_> = services
            .iter()
            .zip(&requests)
            .map(|(service, request)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    service.set_desired(request)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, Err(ServiceError::DesiredSuperseded(_))))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(setup.desired_count(), 1);
    assert_eq!(setup.committed_desired_count(), 1);
}

// 32
#[test]
fn test_two_services_converge_on_the_same_logical_desired_choice() {
    let setup = setup_limit(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-two-service-same-query"))
        .unwrap();
    let peer = setup.peer();
    let request = desired(
        prepared.query_ref(),
        "desired-two-service-same-choice",
        &[],
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
    assert_eq!(
        results[0].journal_record_digest(),
        results[1].journal_record_digest()
    );
    assert_eq!(results[0].actions(), results[1].actions());
    assert_eq!(setup.desired_count(), 1);
    assert_eq!(setup.engine_records(), 3);
}

// 33
#[test]
fn test_two_services_serialize_replacement_planning_against_desired_choice() {
    let setup = setup_limit(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-plan-race-query"))
        .unwrap();
    replacement_input(
        &setup,
        "work-racing-desired",
        "event-development-racing-desired",
        "plan-racing-desired",
    );
    let peer = setup.peer();
    let barrier = Barrier::new(2);
    let desired_request = desired(prepared.query_ref(), "desired-plan-race-choice", &[], None);
    let planning_request = request("replacement-plan-racing-desired", "work-racing-desired");

    let (desired_ok, planning_ok) = std::thread::scope(|s| {
        let d = s.spawn(|| {
            barrier.wait();
            setup.service.set_desired(&desired_request).is_ok()
        });
        let p = s.spawn(|| {
            barrier.wait();
            peer.prepare(&planning_request).is_ok()
        });
        (d.join().unwrap(), p.join().unwrap())
    });

    assert_eq!(u8::from(desired_ok) + u8::from(planning_ok), 1);
    let rows = (setup.desired_count(), setup.committed_desired_count());
    assert!(rows == (0, 0) || rows == (1, 1), "{rows:?}");
}

// 36
#[test]
fn test_set_desired_fails_typed_when_a_nonservice_writer_steals_reserved_revision() {
    let (_fp, setup) = failpoint_setup(1);
    let prepared = setup
        .service
        .prepare(&setup.request("desired-stolen-head-query"))
        .unwrap();
    let request = desired(
        prepared.query_ref(),
        "desired-stolen-head-choice",
        &[],
        None,
    );
    crash_at(&setup, failpoints::DESIRED_BEFORE_COMMIT, &request);
    let pending = setup.store().load_pending_desired_set(&scope()).unwrap();
    let composition = open_engine_composition(
        &setup.data_dir,
        &setup.artifact,
        setup.ports.clone(),
        setup.policy.clone(),
        super::fixture::PLANNER_VERSION,
        setup.clock.clone(),
    )
    .unwrap();
    let mut stolen = pending.event().clone();
    stolen.event_id = "event-nonservice-stolen-desired-revision".to_owned();
    composition.process(&stolen).unwrap();

    let e = expect_err(setup.service.set_desired(&request), "another event");

    assert!(matches!(e, ServiceError::DesiredConflict(_)), "{e:?}");
    let still_pending = setup.store().load_pending_desired_set(&scope()).unwrap();
    assert_eq!(still_pending.desired_set_ref(), pending.desired_set_ref());
    assert!(!still_pending.is_committed());
}

/// The prompt that was killed after its reservation is delivered again (spec/service.md §3): its
/// own query is prepared again, not refused as busy, and its own choice then recovers the
/// reservation. Only a replacement plan stays blocked (seed case 30).
#[test]
fn the_query_whose_choice_is_pending_prepares_again_and_its_choice_recovers() {
    let (_fp, setup) = failpoint_setup(1);
    let query = setup.request("desired-killed-prompt-query");
    let prepared = setup.service.prepare(&query).unwrap();
    let request = desired(
        prepared.query_ref(),
        "desired-killed-prompt-choice",
        &[],
        None,
    );
    crash_at(&setup, failpoints::DESIRED_BEFORE_COMMIT, &request);
    let pending = setup.store().load_pending_desired_set(&scope()).unwrap();

    let again = setup.service.prepare(&query).unwrap();
    assert_eq!(again.query_ref(), prepared.query_ref());
    assert_eq!(again.prepared().plan_id(), prepared.prepared().plan_id());
    let recovered = setup.service.set_desired(&request).unwrap();

    assert_eq!(recovered.desired_set_ref(), pending.desired_set_ref());
    assert_eq!(recovered.status(), "reconciled");
    assert!(matches!(
        setup.store().load_pending_desired_set(&scope()),
        Err(QueryStoreError::NotFound { .. })
    ));
}
