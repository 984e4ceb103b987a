//! Planning, query store, references (prepare / reopen): seed tests 1, 37, 38, 74–90.

use std::collections::BTreeSet;
use std::sync::Barrier;

use ctx_model::{EventKind, RandomSeed};
use ctx_projections::query_store::QueryStoreError;
use ctx_service::{
    ActionSummary, ConsentChallengeProjection, IngestInputs, PreparedQuery, QueryRequest,
    QueryService, QueryServiceResult, ServiceError, open_engine_composition, open_query_service,
};

use super::assert_not_impl;
use super::fixture::{
    self, NOW, PYTHON_CAPABILITIES, Setup, digest, observation_payload, request, setup,
    setup_limit, surrogate,
};

// The seed's `copy.copy`, `copy.deepcopy` and `pickle.dumps` raise `TypeError` on every result:
// in Rust the result types implement neither `Clone` nor `serde::Serialize`.
assert_not_impl!(QueryServiceResult, Clone);
assert_not_impl!(QueryServiceResult, serde::Serialize);
assert_not_impl!(PreparedQuery, Clone);
assert_not_impl!(PreparedQuery, serde::Serialize);
assert_not_impl!(ActionSummary, Clone);
assert_not_impl!(ActionSummary, serde::Serialize);
assert_not_impl!(ConsentChallengeProjection, Clone);
assert_not_impl!(ConsentChallengeProjection, serde::Serialize);
assert_not_impl!(QueryService, Clone);
assert_not_impl!(QueryService, serde::Serialize);

/// A handle may be shared by many threads (the seed's concurrency tests call one service).
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<QueryService>();
};

/// `set(summary.__slots__) == {"action_id", "entity_id", "kind"}`: the summary exposes exactly
/// these three accessors (checked by naming each; the type has no public fields and no other
/// accessor, see `service/src/managed/result.rs`).
fn summary_fields(summary: &ActionSummary) -> (&str, &str, Option<&str>) {
    (summary.action_id(), summary.kind(), summary.entity_id())
}

fn kinds(result: &QueryServiceResult) -> Vec<&str> {
    result.actions().iter().map(ActionSummary::kind).collect()
}

fn error_text(e: &ServiceError) -> String {
    e.to_string()
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, ServiceError>, needle: &str) -> ServiceError {
    let e = r.expect_err("the call must fail");
    assert!(
        error_text(&e).contains(needle),
        "expected an error containing {needle:?}, got {e:?} ({e})"
    );
    e
}

fn is_store_conflict(e: &ServiceError) -> bool {
    matches!(e, ServiceError::Store(QueryStoreError::Conflict { .. }))
}

// ------------------------------------------------------------------------------------------------
// 37 test_service_prepares_one_bounded_ready_or_abstained_result (x3)
// ------------------------------------------------------------------------------------------------

fn prepares_one_bounded_ready_or_abstained_result(requested_limit: i64) {
    let setup = setup_limit(requested_limit);
    let request = setup.request("logical-query");

    let result = setup.service.prepare(&request).unwrap();
    let record = setup.store().load(result.query_ref()).unwrap();

    assert!(record.is_planned());
    assert_eq!(result.prepared().plan_id(), record.plan_id().unwrap());
    assert_eq!(result.prepared().plan_id(), "plan-initial");
    let limit = usize::try_from(requested_limit).unwrap();
    assert_eq!(result.prepared().selections().len(), limit);
    assert!(result.prepared().selections().len() <= 5);
    assert_eq!(
        result.prepared().status(),
        if requested_limit == 0 {
            "abstained"
        } else {
            "ready"
        }
    );
    for summary in result.actions() {
        let _ = summary_fields(summary);
    }
    if requested_limit != 0 {
        assert_eq!(kinds(&result), ["PresentBundle"]);
    } else {
        assert!(result.actions().is_empty());
    }
    // copy / deepcopy / pickle: see the static assertions at the top of this module.
}

#[test]
fn test_service_prepares_one_bounded_ready_or_abstained_result_requested_limit_0() {
    prepares_one_bounded_ready_or_abstained_result(0);
}

#[test]
fn test_service_prepares_one_bounded_ready_or_abstained_result_requested_limit_1() {
    prepares_one_bounded_ready_or_abstained_result(1);
}

#[test]
fn test_service_prepares_one_bounded_ready_or_abstained_result_requested_limit_5() {
    prepares_one_bounded_ready_or_abstained_result(5);
}

// ------------------------------------------------------------------------------------------------
// 38 test_service_returns_no_challenge_without_current_pending_consent
// ------------------------------------------------------------------------------------------------

/// The seed also counts `consent_challenges` rows (0) and the trusted body source's loads (0):
/// this slice has no consent projection and no body source, so neither can be observed yet.
#[test]
fn test_service_returns_no_challenge_without_current_pending_consent() {
    let setup = setup_limit(0);

    let result = setup
        .service
        .prepare(&setup.request("no-consent-query"))
        .unwrap();

    assert!(result.challenge().is_none());
}

// ------------------------------------------------------------------------------------------------
// 74 test_service_exact_prepare_retry_and_reopen_plan_only_once
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_exact_prepare_retry_and_reopen_plan_only_once() {
    let setup = setup();
    let request = setup.request("retry-query");

    let first = setup.service.prepare(&request).unwrap();
    let planned_calls = setup.calls();
    let retried = setup.service.prepare(&request).unwrap();
    let reopened = setup.service.reopen(first.query_ref()).unwrap();

    assert_eq!(setup.calls(), planned_calls);
    assert_eq!(first.query_ref(), retried.query_ref());
    assert_eq!(first.query_ref(), reopened.query_ref());
    assert_eq!(
        first.prepared().decision_digest(),
        retried.prepared().decision_digest()
    );
    assert_eq!(
        first.prepared().decision_digest(),
        reopened.prepared().decision_digest()
    );
    assert_eq!(first.actions(), retried.actions());
    assert_eq!(first.actions(), reopened.actions());
}

// ------------------------------------------------------------------------------------------------
// 75 test_service_reopen_converges_after_each_pre_mark_crash (x3)
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrashPoint {
    Registered,
    RevisionOne,
    Committed,
}

fn reopen_converges_after_pre_mark_crash(crash_point: CrashPoint) {
    let setup = setup();
    let logical_query_id = digest(&format!(
        "crash:{}",
        match crash_point {
            CrashPoint::Registered => "registered",
            CrashPoint::RevisionOne => "revision-one",
            CrashPoint::Committed => "committed",
        }
    ));
    let record = setup.register(&logical_query_id);
    let value = &setup.managed_input;
    if crash_point != CrashPoint::Registered {
        let artifact = value.handle();
        let composition = open_engine_composition(
            &setup.data_dir,
            &artifact,
            setup.ports.clone(),
            setup.policy.clone(),
            fixture::PLANNER_VERSION,
            setup.clock.clone(),
        )
        .unwrap();
        if crash_point == CrashPoint::RevisionOne {
            composition
                .engine()
                .process(&value.session_started, None)
                .unwrap();
        } else {
            composition
                .advance_managed_query(&value.session_started, &value.decision_event)
                .unwrap();
        }
    }
    let calls_before_reopen = setup.calls();

    let result = setup.service.reopen(record.query_ref()).unwrap();
    let planned = setup.store().load(record.query_ref()).unwrap();

    assert!(planned.is_planned());
    assert_eq!(result.prepared().plan_id(), planned.plan_id().unwrap());
    if crash_point == CrashPoint::Committed {
        assert_eq!(setup.calls(), calls_before_reopen);
    } else {
        assert!(setup.calls().len() > calls_before_reopen.len());
    }
}

#[test]
fn test_service_reopen_converges_after_each_pre_mark_crash_crash_point_registered() {
    reopen_converges_after_pre_mark_crash(CrashPoint::Registered);
}

#[test]
fn test_service_reopen_converges_after_each_pre_mark_crash_crash_point_revision_one() {
    reopen_converges_after_pre_mark_crash(CrashPoint::RevisionOne);
}

#[test]
fn test_service_reopen_converges_after_each_pre_mark_crash_crash_point_committed() {
    reopen_converges_after_pre_mark_crash(CrashPoint::Committed);
}

// ------------------------------------------------------------------------------------------------
// 76 test_service_concurrent_same_request_converges_to_one_plan
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_concurrent_same_request_converges_to_one_plan() {
    let setup = setup();
    let request = setup.request("concurrent-query");

    // Eight identical requests on four workers, as the seed's `ThreadPoolExecutor(4).map`.
    let barrier = Barrier::new(4);
    let results: Vec<QueryServiceResult> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    (0..2)
                        .map(|_| setup.service.prepare(&request).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });

    assert_eq!(results.len(), 8);
    let refs: BTreeSet<&str> = results.iter().map(|r| r.query_ref()).collect();
    assert_eq!(refs, BTreeSet::from([results[0].query_ref()]));
    let decisions: BTreeSet<&str> = results
        .iter()
        .map(|r| r.prepared().decision_digest())
        .collect();
    assert_eq!(
        decisions,
        BTreeSet::from([results[0].prepared().decision_digest()])
    );
    let planning_calls = setup.calls();
    setup.service.reopen(results[0].query_ref()).unwrap();
    assert_eq!(setup.calls(), planning_calls);
    let called: BTreeSet<&str> = planning_calls.iter().map(String::as_str).collect();
    assert_eq!(called, BTreeSet::from(PYTHON_CAPABILITIES));
}

// ------------------------------------------------------------------------------------------------
// 77 test_service_concurrent_distinct_logical_ids_reject_one_before_new_planning
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_concurrent_distinct_logical_ids_reject_one_before_new_planning() {
    let setup = setup();
    let requests = [
        setup.request("concurrent-left"),
        setup.request("concurrent-right"),
    ];

    let barrier = Barrier::new(2);
    let outcomes: Vec<Result<QueryServiceResult, ServiceError>> = std::thread::scope(|s| {
        let workers: Vec<_> = requests
            .iter()
            .map(|request| {
                let (barrier, service) = (&barrier, &setup.service);
                s.spawn(move || {
                    barrier.wait();
                    service.prepare(request)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.as_ref().is_err_and(is_store_conflict))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(setup.query_count(), 1);
}

// ------------------------------------------------------------------------------------------------
// 78 test_service_rejects_distinct_event_reusing_scope_and_plan_before_mutation
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_rejects_distinct_event_reusing_scope_and_plan_before_mutation() {
    let setup = setup();
    setup
        .service
        .prepare(&setup.request("scope-plan-owner"))
        .unwrap();
    let mut distinct_event = setup.managed_input.decision_event.clone();
    distinct_event.event_id = "event-distinct-same-plan".to_owned();
    distinct_event.causation_id = Some("cause-distinct-same-plan".to_owned());
    setup.inputs.insert(
        "same-plan-distinct-event",
        setup
            .managed_input
            .with_events(setup.managed_input.session_started.clone(), distinct_event),
    );
    let calls_before = setup.calls();
    let journal_before = setup.head_position();

    let e = expect_err(
        setup.service.prepare(&request(
            "scope-plan-substitute",
            "same-plan-distinct-event",
        )),
        "another logical identity",
    );

    assert!(is_store_conflict(&e), "{e:?}");
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.head_position(), journal_before);
    assert_eq!(setup.query_count(), 1);
}

// ------------------------------------------------------------------------------------------------
// 79 test_service_rejects_scope_and_plan_reserved_by_unplanned_registration
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_rejects_scope_and_plan_reserved_by_unplanned_registration() {
    let setup = setup();
    let owner = setup.register(&digest("unplanned-scope-plan-owner"));
    let mut distinct_started = setup.managed_input.session_started.clone();
    distinct_started.event_id = "event-unplanned-substitute-started".to_owned();
    distinct_started.causation_id = Some("cause-unplanned-substitute-started".to_owned());
    let mut distinct_event = setup.managed_input.decision_event.clone();
    distinct_event.event_id = "event-unplanned-substitute-decision".to_owned();
    distinct_event.causation_id = Some(distinct_started.event_id.clone());
    setup.inputs.insert(
        "unplanned-same-plan-distinct-event",
        setup
            .managed_input
            .with_events(distinct_started, distinct_event),
    );
    let journal_before = setup.head_position();

    let e = expect_err(
        setup.service.prepare(&request(
            "unplanned-scope-plan-substitute",
            "unplanned-same-plan-distinct-event",
        )),
        "scope and plan",
    );

    assert!(is_store_conflict(&e), "{e:?}");
    assert!(!owner.is_planned());
    assert!(!setup.store().load(owner.query_ref()).unwrap().is_planned());
    assert!(setup.calls().is_empty());
    // `journal_path` / `audit_path` do not exist: no engine record and no benefit result was
    // appended (the global head is where the owner's registration left it).
    assert_eq!(setup.engine_records(), 0);
    assert_eq!(setup.head_position(), journal_before);
    assert_eq!(setup.query_count(), 1);
}

// ------------------------------------------------------------------------------------------------
// 80 test_service_is_host_neutral_for_equivalent_codex_and_claude_refs
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_is_host_neutral_for_equivalent_codex_and_claude_refs() {
    let setup = setup();
    setup
        .inputs
        .insert("codex-turn", setup.managed_input.clone());
    setup
        .inputs
        .insert("claude-hook", setup.managed_input.clone());
    let logical_id = digest("host-neutral-query");

    let codex = setup
        .service
        .prepare(&QueryRequest::new(&logical_id, "codex-turn").unwrap())
        .unwrap();
    let claude = setup
        .service
        .prepare(&QueryRequest::new(&logical_id, "claude-hook").unwrap())
        .unwrap();

    assert_eq!(codex.query_ref(), claude.query_ref());
    assert_eq!(
        codex.prepared().decision_digest(),
        claude.prepared().decision_digest()
    );
    assert_eq!(codex.actions(), claude.actions());
    let calls = setup.calls();
    let distinct: BTreeSet<&String> = calls.iter().collect();
    assert!(!distinct.is_empty());
    for capability_id in distinct {
        assert_eq!(
            calls.iter().filter(|c| *c == capability_id).count(),
            2,
            "{capability_id}: {calls:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// 81 test_service_rejects_foreign_registry_handle_before_persistence
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_rejects_foreign_registry_handle_before_persistence() {
    let owned = setup();
    let foreign = setup();
    owned
        .inputs
        .insert("foreign-work", foreign.managed_input.clone());

    expect_err(
        owned
            .service
            .prepare(&request("foreign-query", "foreign-work")),
        "not issued",
    );

    assert_eq!(owned.query_count(), 0);
}

// ------------------------------------------------------------------------------------------------
// 82 test_service_fails_closed_when_captured_authority_drifts
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_fails_closed_when_captured_authority_drifts() {
    let setup = setup();
    let journal_before = setup.head_position();
    setup.facts.drift();

    expect_err(
        setup.service.prepare(&setup.request("drift-query")),
        "snapshot does not match",
    );

    // Nothing was written: no journal (engine records, benefit results) was even created.
    assert!(!setup.data_dir.exists());
    assert_eq!(setup.engine_records(), 0);
    assert_eq!(setup.head_position(), journal_before);
    assert_eq!(setup.query_count(), 0);
}

// ------------------------------------------------------------------------------------------------
// 83 test_service_factory_rejects_output_path_aliases_before_use
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_factory_rejects_output_path_aliases_before_use() {
    let setup = setup();
    // The seed passes the query store's path as the journal path. Here the persistence roots are
    // the data directory and the registry root: the data directory may not be the registry root.
    let mut config = setup.config();
    config.data_dir = setup.root.join("registry");

    expect_err(open_query_service(config), "must be distinct");
}

// ------------------------------------------------------------------------------------------------
// 84 test_service_factory_with_consent_recovery_authority_does_not_create_journal
// ------------------------------------------------------------------------------------------------

/// Ported: opening the service creates no journal, and a relative persistence path is refused
/// with "absolute Path". Not ported yet: the consent broker whose store collides with the journal
/// ("persistence paths must be distinct") — the consent broker arrives with a later slice.
#[test]
fn test_service_factory_with_consent_recovery_authority_does_not_create_journal() {
    let setup = setup();

    // `journal_path.exists()` / `audit_path.exists()` are false: opening the service created
    // nothing (the journal holds the engine streams and the benefit results).
    assert!(!setup.data_dir.exists());

    let mut config = setup.config();
    config.data_dir = "relative-journal".into();
    expect_err(open_query_service(config), "absolute Path");
}

// ------------------------------------------------------------------------------------------------
// 85 test_service_rejects_malformed_or_corrupt_references
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_rejects_malformed_or_corrupt_references() {
    let Setup {
        dir: _dir,
        data_dir,
        registry,
        inputs,
        ports,
        policy,
        clock,
        service,
        ..
    } = setup();
    let result = service
        .prepare(&request("corrupt-query", "work-one"))
        .unwrap();
    expect_err(
        service.reopen("../../private/queries.sqlite3"),
        "opaque managed-query reference",
    );
    let decision_digest = result.prepared().decision_digest().to_owned();
    let query_ref = result.query_ref().to_owned();

    // The seed rewrites the stored decision digest of the row in SQLite. Here the planned mark
    // (which carries the decision digest) is rewritten in the journal file, with every journal
    // handle closed, as an attacker with the owner's rights could.
    let position = {
        let journal = std::sync::Arc::new(crate::support::open_routed(&data_dir));
        let stream = ctx_projections::query_store::query_stream(&digest("corrupt-query")).unwrap();
        let records = journal.read_stream(&stream, 1, 10).unwrap();
        assert_eq!(records.len(), 2, "registration and planned mark");
        records[1].position
    };
    drop(service);
    tamper(
        &data_dir,
        position,
        &decision_digest,
        &digest("substituted"),
    );

    let service = open_query_service(fixture::config(
        &data_dir, &registry, &inputs, &ports, &policy, &clock,
    ));
    let e = match service {
        Ok(service) => service.reopen(&query_ref).unwrap_err(),
        Err(e) => e,
    };
    assert!(e.to_string().contains("authentication failed"), "{e:?}");
}

/// Rewrites `old` to `new` (same length) in the stored value at `position`, through redb directly.
fn tamper(data_dir: &std::path::Path, position: u64, old: &str, new: &str) {
    if let Some((url, schema)) = crate::support::seed_postgres_target(data_dir) {
        // The same attack on a PostgreSQL journal: a raw UPDATE of the stored bytes.
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let sql = format!("SELECT record FROM {schema}.ctx_records WHERE position = $1");
        let row = client.query_one(&sql, &[&(position as i64)]).unwrap();
        // Decompressed first, as such an attacker would (spec/journal.md §4, R7).
        let mut value = crate::support::record_value_stored_as_is(row.get(0));
        let at = value
            .windows(old.len())
            .position(|w| w == old.as_bytes())
            .unwrap();
        value[at..at + new.len()].copy_from_slice(new.as_bytes());
        let sql = format!("UPDATE {schema}.ctx_records SET record = $1 WHERE position = $2");
        assert_eq!(
            client.execute(&sql, &[&value, &(position as i64)]).unwrap(),
            1
        );
        return;
    }
    use redb::{ReadableDatabase as _, TableDefinition};
    const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");
    let db = redb::Database::open(data_dir.join(ctx_journal::files::DATABASE_FILE)).unwrap();
    let mut value = {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        crate::support::record_value_stored_as_is(table.get(position).unwrap().unwrap().value())
    };
    let hits: Vec<usize> = value
        .windows(old.len())
        .enumerate()
        .filter(|(_, w)| *w == old.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "the decision digest is stored once");
    value[hits[0]..hits[0] + new.len()].copy_from_slice(new.as_bytes());
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(RECORDS).unwrap();
        table.insert(position, value.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

// ------------------------------------------------------------------------------------------------
// 86 test_service_public_surface_and_result_do_not_leak_authority_or_content
// ------------------------------------------------------------------------------------------------

/// The seed's `TypeError` for an unknown `raw_prompt` keyword is impossible by type
/// (`QueryRequest::new` takes exactly two arguments); `hasattr(result, "transition")` /
/// `"artifact"` are absent by type (the result's accessors are `query_ref`, `prepared`, `actions`
/// and `challenge`).
#[test]
fn test_service_public_surface_and_result_do_not_leak_authority_or_content() {
    let setup = setup();
    let raw = setup.root.join("raw prompt and secret");
    expect_err(
        QueryRequest::new(&digest("privacy-query"), &raw.to_string_lossy()),
        "opaque token",
    );

    let result = setup
        .service
        .prepare(&setup.request("privacy-query"))
        .unwrap();

    let repr = format!("{result:?}");
    assert!(!repr.contains(&*setup.root.to_string_lossy()), "{repr}");
    assert!(!repr.contains(&*setup.root.to_string_lossy()), "{repr}");
    assert!(!repr.contains("work-one"), "{repr}");
    for action in result.actions() {
        let _ = summary_fields(action);
    }
}

// ------------------------------------------------------------------------------------------------
// 87 test_service_close_is_idempotent_and_fails_closed
// ------------------------------------------------------------------------------------------------

#[test]
fn test_service_close_is_idempotent_and_fails_closed() {
    let setup = setup();

    setup.service.close();
    setup.service.close();

    assert!(setup.service.is_closed());
    let e = expect_err(
        setup.service.prepare(&setup.request("closed-query")),
        "closed",
    );
    assert!(matches!(e, ServiceError::Closed), "{e:?}");
    let e = expect_err(
        setup.service.reopen(&format!("mqr_{}", "0".repeat(64))),
        "closed",
    );
    assert!(matches!(e, ServiceError::Closed), "{e:?}");
}

// ------------------------------------------------------------------------------------------------
// 89 test_service_reports_old_plan_as_superseded_without_reranking
// ------------------------------------------------------------------------------------------------

/// The seed also counts `consent_challenges` rows (0); this slice has no consent projection.
#[test]
fn test_service_reports_old_plan_as_superseded_without_reranking() {
    let setup = setup();
    let first = setup.service.prepare(&setup.request("first-plan")).unwrap();
    let artifact = &setup.artifact;
    let replacement_artifact = setup
        .registry
        .ingest(
            &setup.loaded,
            IngestInputs {
                planning_environment_digest: artifact.planning_environment_digest().to_owned(),
                catalog_namespace_digest: artifact.catalog_namespace_digest().to_owned(),
                catalog_retrieval_digest: artifact.catalog_retrieval_digest().to_owned(),
                benefit_facts_snapshot_digest: artifact.benefit_facts_snapshot_digest().to_owned(),
                benefit_policy_snapshot_digest: artifact
                    .benefit_policy_snapshot_digest()
                    .to_owned(),
                material_snapshot_digest: artifact.material_snapshot_digest().to_owned(),
                installation_snapshot_digest: artifact.installation_snapshot_digest().to_owned(),
                observation_surrogate: surrogate(0),
                planning_schema_version: artifact.planning_schema_version().to_owned(),
            },
        )
        .unwrap();
    let original = &setup.managed_input.decision_event;
    let mut development = original.clone();
    development.event_id = "event-development-observed".to_owned();
    development.kind = EventKind::DevelopmentObserved;
    development.expected_revision = 2;
    development.occurred_at = NOW.to_owned();
    development.payload = observation_payload(&replacement_artifact);
    development.correlation_id = Some("plan-replacement".to_owned());
    development.causation_id = Some(original.event_id.clone());
    development.work_signature = Some(digest("replacement-work"));
    development.random_seed = RandomSeed::Int(1);
    let mut spec = setup
        .managed_input
        .with_events(setup.managed_input.session_started.clone(), development);
    spec.manifest_digest = replacement_artifact.manifest_digest().to_owned();
    setup.inputs.insert("work-replacement", spec);
    let replacement = setup
        .service
        .prepare(&request("replacement-plan", "work-replacement"))
        .unwrap();
    let calls_after_replacement = setup.calls();

    let e = expect_err(setup.service.reopen(first.query_ref()), "superseded");
    assert!(matches!(e, ServiceError::Superseded), "{e:?}");

    assert_eq!(replacement.prepared().plan_id(), "plan-replacement");
    assert_eq!(replacement.prepared().status(), "abstained");
    assert!(replacement.challenge().is_none());
    assert_eq!(setup.calls(), calls_after_replacement);
}

// ------------------------------------------------------------------------------------------------
// 1 test_runtime_package_exports_managed_desired_set_contract
// ------------------------------------------------------------------------------------------------

/// The crate root re-exports the desired-set contract from the service module: the same types
/// (a type mismatch would not compile), and the busy, conflict and superseded errors as typed
/// variants of the one service error.
#[test]
fn test_runtime_package_exports_managed_desired_set_contract() {
    use std::marker::PhantomData;
    fn same<T>(_: PhantomData<T>, _: PhantomData<T>) -> bool {
        true
    }
    assert!(same(
        PhantomData::<ctx_service::DesiredSetRequest>,
        PhantomData::<ctx_service::DesiredSetRequest>
    ));
    assert!(same(
        PhantomData::<ctx_service::DesiredSetResult>,
        PhantomData::<ctx_service::DesiredSetResult>
    ));
    assert!(same(
        PhantomData::<ctx_service::ConsentResolutionResult>,
        PhantomData::<ctx_service::ConsentResolutionResult>
    ));
    assert!(same(
        PhantomData::<ctx_service::ServiceError>,
        PhantomData::<ctx_service::ServiceError>
    ));
    let busy = ServiceError::Busy("another managed desired choice is pending on this stream");
    let conflict =
        ServiceError::DesiredConflict("logical desired choice is already bound to another subset");
    let superseded = ServiceError::DesiredSuperseded("desired choice predecessor is unavailable");
    assert!(matches!(busy, ServiceError::Busy(_)));
    assert!(matches!(conflict, ServiceError::DesiredConflict(_)));
    assert!(matches!(superseded, ServiceError::DesiredSuperseded(_)));
    assert_eq!(
        superseded.to_string(),
        "desired choice predecessor is unavailable"
    );
}
