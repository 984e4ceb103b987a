#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctx_journal::{Journal, OpenOptions};
use ctx_model::testkit::Session;
use ctx_model::{ObservationRef, SurrogateRole, testkit, validate_surrogate};
use ctx_projections::engine::{Engine, EngineOptions, ManualClock, ObservationNormalizer};
use ctx_projections::testkit::lifecycle::observed_intent;

use super::*;
use crate::catalog::{load_catalog_dir, sample_catalog_dir};
use crate::planning::benefit::{Availability, NetBenefitPolicy};
use crate::planning::plan::SinkError;
use crate::planning::ports::CatalogBenefitFacts;

const VERSION: &str = "ctx-planner-test";

/// Stores benefit results in memory and acknowledges their digest.
#[derive(Debug, Default, Clone)]
struct MemorySink(Arc<Mutex<Vec<Json>>>);

impl BenefitAuditSink for MemorySink {
    fn store(&self, result_json: &Json) -> Result<String, SinkError> {
        self.0.lock().unwrap().push(result_json.clone());
        Ok(result_json.get_str("result_digest").unwrap().to_owned())
    }
}

fn catalog() -> Arc<Catalog> {
    Arc::new(
        load_catalog_dir(&sample_catalog_dir())
            .unwrap()
            .catalog()
            .clone(),
    )
}

fn planner_with(sink: MemorySink) -> AuthenticatedNetBenefitPlanner<MemorySink> {
    let policy = NetBenefitPolicy::new(&testkit::digest("calibration"), 100_000);
    AuthenticatedNetBenefitPlanner::new(policy, sink).unwrap()
}

fn planner() -> AuthenticatedNetBenefitPlanner<MemorySink> {
    planner_with(MemorySink::default())
}

fn adapter_with(
    f: impl FnOnce(&mut AdapterPorts, &Arc<Catalog>),
) -> ReplayDecisionPlanner<MemorySink> {
    let catalog = catalog();
    let mut ports = AdapterPorts::from_catalog(catalog.clone());
    f(&mut ports, &catalog);
    ReplayDecisionPlanner::new(planner(), ports, VERSION, catalog.namespace_digest()).unwrap()
}

fn adapter() -> ReplayDecisionPlanner<MemorySink> {
    adapter_with(|_, _| {})
}

fn observation(limit: i64) -> WorkObservation {
    WorkObservation::new(&["testing"], &["python"])
        .unwrap()
        .with_requested_limit(limit)
        .unwrap()
}

fn surrogate(o: &WorkObservation) -> Surrogate {
    Surrogate::new(CURRENT_WORK_SCHEMA, 1, observation_json(o))
}

fn plan(
    a: &ReplayDecisionPlanner<MemorySink>,
    o: &WorkObservation,
) -> Result<Surrogate, AdapterError> {
    let context = PlanningContext {
        planner_version: VERSION,
        catalog_snapshot_digest: a.catalog_snapshot_digest(),
    };
    a.plan_surrogate(Some(&surrogate(o)), None, &context)
}

fn err(r: Result<Surrogate, AdapterError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn python_testing_yields_a_ready_valid_decision() {
    let sink = MemorySink::default();
    let c = catalog();
    let a = ReplayDecisionPlanner::from_catalog(planner_with(sink.clone()), c, VERSION).unwrap();
    let s = plan(&a, &observation(5)).unwrap();
    validate_surrogate(&s, SurrogateRole::Decision).unwrap();
    assert_eq!(s.value.get_str("status"), Some("ready"));
    let rows = s.value.get("capabilities").unwrap().as_arr().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().any(|r| matches!(
            r.get_str("capability_id"),
            Some("skill:pytest" | "skill:python-testing" | "skill:python")
        )),
        "{rows:?}"
    );
    // The audit sink holds the result the plan refers to.
    let stored = sink.0.lock().unwrap();
    assert_eq!(stored.len(), 1);
    let audit = s.value.get("benefit_audit").unwrap();
    assert_eq!(
        stored[0].get_str("result_digest"),
        audit.get_str("result_digest")
    );
}

#[test]
fn the_planning_environment_digest_follows_its_formula() {
    let catalog = catalog();
    let a = adapter();
    let facts = CatalogBenefitFacts::new(catalog.clone());
    let policy = a.planner().policy();
    let expected = cj_digest(&Json::object([
        (
            "benefit_facts_snapshot_digest",
            Json::str(facts.benefit_facts_snapshot_digest()),
        ),
        ("calibration_digest", Json::str(&policy.calibration_digest)),
        (
            "catalog_namespace_digest",
            Json::str(catalog.namespace_digest()),
        ),
        (
            "catalog_retrieval_snapshot_digest",
            Json::str(catalog.retrieval_snapshot_digest()),
        ),
        (
            "installation_snapshot_digest",
            Json::str(catalog.installation_snapshot_digest()),
        ),
        (
            "material_snapshot_digest",
            Json::str(catalog.material_snapshot_digest()),
        ),
        ("planner_version", Json::str(VERSION)),
        ("policy_digest", Json::str(policy.policy_digest())),
        ("schema", Json::str(PLANNING_ENVIRONMENT_SCHEMA)),
    ]));
    assert_eq!(a.catalog_snapshot_digest(), expected);
    assert_eq!(
        a.catalog_retrieval_snapshot_digest(),
        catalog.retrieval_snapshot_digest()
    );
    // Without the optional ports the digest changes (their slots become null).
    let bare = adapter_with(|p, _| {
        p.material = None;
        p.install = None;
    });
    assert_ne!(bare.catalog_snapshot_digest(), expected);
}

#[test]
fn requested_limit_zero_abstains() {
    let s = plan(&adapter(), &observation(0)).unwrap();
    assert_eq!(s.value.get_str("status"), Some("abstained"));
    assert_eq!(s.value.get_str("abstention_code"), Some("limit-zero"));
    validate_surrogate(&s, SurrogateRole::Decision).unwrap();
}

#[test]
fn same_inputs_give_the_same_decision_digest() {
    let first = plan(&adapter(), &observation(5)).unwrap();
    let a = adapter();
    let second = plan(&a, &observation(5)).unwrap();
    let third = plan(&a, &observation(5)).unwrap();
    assert_eq!(first.value_digest, second.value_digest);
    assert_eq!(second, third);
}

#[test]
fn context_and_observation_are_checked() {
    let a = adapter();
    let o = surrogate(&observation(5));
    let wrong_version = PlanningContext {
        planner_version: "other",
        catalog_snapshot_digest: a.catalog_snapshot_digest(),
    };
    assert_eq!(
        err(a.plan_surrogate(Some(&o), None, &wrong_version)),
        "planner version mismatch"
    );
    let raw = a.catalog_retrieval_snapshot_digest().to_owned();
    let wrong_catalog = PlanningContext {
        planner_version: VERSION,
        catalog_snapshot_digest: &raw,
    };
    assert_eq!(
        err(a.plan_surrogate(Some(&o), None, &wrong_catalog)),
        "catalog snapshot does not match the pinned planning environment"
    );
    let context = PlanningContext {
        planner_version: VERSION,
        catalog_snapshot_digest: a.catalog_snapshot_digest(),
    };
    assert_eq!(
        err(a.plan_surrogate(None, None, &context)),
        "planner requires a current-work observation v1"
    );
    let mut extra = observation_json(&observation(5));
    if let Json::Obj(m) = &mut extra {
        m.insert("query".into(), Json::str("x"));
    }
    let extra = Surrogate::new(CURRENT_WORK_SCHEMA, 1, extra);
    assert_eq!(
        err(a.plan_surrogate(Some(&extra), None, &context)),
        "current-work observation has missing or unknown fields"
    );
}

/// Facts whose snapshot digest changes after `after` reads.
struct DriftingFacts {
    inner: CatalogBenefitFacts,
    reads: AtomicUsize,
    after: usize,
    other: String,
}

impl BenefitFactsPort for DriftingFacts {
    fn benefit_facts_snapshot_digest(&self) -> &str {
        if self.reads.fetch_add(1, Ordering::SeqCst) < self.after {
            self.inner.benefit_facts_snapshot_digest()
        } else {
            &self.other
        }
    }

    fn benefit_candidate(
        &self,
        p: &CapabilityCandidate,
        o: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError> {
        self.inner.benefit_candidate(p, o)
    }
}

#[test]
fn a_drifting_facts_digest_fails_the_decision() {
    for after in [1, 4] {
        let a = adapter_with(|p, c| {
            p.facts = Arc::new(DriftingFacts {
                inner: CatalogBenefitFacts::new(c.clone()),
                reads: AtomicUsize::new(0),
                after,
                other: testkit::digest("other-facts"),
            });
        });
        assert_eq!(
            err(plan(&a, &observation(5))),
            "benefit facts snapshot drifted"
        );
    }
}

/// Facts rewritten by `edit` (with `flip`, every read but the first is rewritten, so the
/// first candidate answers differently at end validation).
struct EditedFacts {
    inner: CatalogBenefitFacts,
    edit: fn(&mut BenefitCandidate),
    flip: bool,
    reads: AtomicUsize,
}

impl BenefitFactsPort for EditedFacts {
    fn benefit_facts_snapshot_digest(&self) -> &str {
        self.inner.benefit_facts_snapshot_digest()
    }

    fn benefit_candidate(
        &self,
        p: &CapabilityCandidate,
        o: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError> {
        let mut facts = self.inner.benefit_candidate(p, o)?;
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        if !self.flip || n >= 1 {
            (self.edit)(&mut facts);
        }
        Ok(facts)
    }
}

fn edited(edit: fn(&mut BenefitCandidate), flip: bool) -> ReplayDecisionPlanner<MemorySink> {
    adapter_with(|p, c| {
        p.facts = Arc::new(EditedFacts {
            inner: CatalogBenefitFacts::new(c.clone()),
            edit,
            flip,
            reads: AtomicUsize::new(0),
        });
    })
}

#[test]
fn mismatched_benefit_facts_fail_the_decision() {
    let a = edited(|f| f.source_digest = testkit::digest("elsewhere"), false);
    assert_eq!(
        err(plan(&a, &observation(5))),
        "benefit facts do not exactly match candidate identity"
    );
    // Availability that contradicts the presentation fails the authenticated constructor.
    let a = edited(|f| f.availability = Availability::Unsupported, false);
    assert!(matches!(
        plan(&a, &observation(5)),
        Err(AdapterError::Planning(_))
    ));
}

#[test]
fn changed_output_under_an_unchanged_digest_is_drift() {
    let a = edited(|f| f.relevance_ppm = 1, true);
    assert_eq!(
        err(plan(&a, &observation(5))),
        "benefit facts output drifted without a snapshot digest change"
    );
}

/// A source that is unavailable.
struct Unavailable(String);

impl CandidateSourcePort for Unavailable {
    fn catalog_snapshot_digest(&self) -> &str {
        &self.0
    }

    fn retrieve(&self, _: &WorkObservation) -> Result<Vec<CapabilityCandidate>, PortError> {
        Err(PortError::SourceUnavailable("catalog is offline".into()))
    }
}

#[test]
fn an_unavailable_source_degrades() {
    let a = adapter_with(|p, c| {
        p.source = Arc::new(Unavailable(c.retrieval_snapshot_digest().to_owned()));
    });
    let s = plan(&a, &observation(5)).unwrap();
    assert_eq!(s.value.get_str("status"), Some("degraded"));
    assert_eq!(
        s.value.get_str("abstention_code"),
        Some("catalog-unavailable")
    );
}

#[test]
fn the_pool_excludes_baseline_and_rejected_and_omits_differing_rows() {
    let c = catalog();
    // Several entries carry comparable evidence for pull requests, so several survive the
    // retrieval cut (spec/catalog.md §5.2).
    let o = WorkObservation::new(&["pull-requests"], &[])
        .unwrap()
        .with_requested_limit(5)
        .unwrap();
    let rows = crate::catalog::retrieve(&c, &o);
    assert!(rows.len() >= 2);
    let (first, second) = (rows[0].capability_id.clone(), rows[1].capability_id.clone());
    let o2 = o
        .clone()
        .with_baseline(&[first.as_str()])
        .unwrap()
        .with_rejected(&[second.as_str()])
        .unwrap();
    let pool = normalize_candidate_pool(rows.clone(), &o2).unwrap();
    assert!(
        pool.iter()
            .all(|r| r.capability_id != first && r.capability_id != second)
    );
    // A duplicated identical row is kept once; a differing duplicate omits the identity.
    let mut doubled = rows.clone();
    doubled.push(rows[0].clone());
    let mut differing = rows[1].clone();
    differing.normalized_score_ppm = differing.normalized_score_ppm.saturating_sub(1);
    doubled.push(differing);
    let pool = normalize_candidate_pool(doubled, &o).unwrap();
    assert_eq!(pool.iter().filter(|r| r.capability_id == first).count(), 1);
    assert!(pool.iter().all(|r| r.capability_id != second));
    assert!(
        pool.windows(2)
            .all(|w| w[0].capability_id < w[1].capability_id)
    );
    let too_many = vec![rows[0].clone(); CANDIDATE_POOL_MAX_ITEMS + 1];
    assert_eq!(
        normalize_candidate_pool(too_many, &o)
            .unwrap_err()
            .to_string(),
        "candidate source exceeded its candidate pool limit"
    );
}

/// Resolves every reference into one current-work surrogate.
struct FixedNormalizer(Surrogate);

impl ObservationNormalizer for FixedNormalizer {
    fn normalize(&self, _: &ObservationRef) -> Result<Surrogate, SeamError> {
        Ok(self.0.clone())
    }
}

#[test]
fn the_engine_commits_the_adapter_plan_end_to_end() {
    let a = Arc::new(adapter());
    let environment = a.catalog_snapshot_digest().to_owned();
    let expected = plan(&a, &observation(5)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::open(dir.path(), &OpenOptions::new()).unwrap());
    let mut s = Session::new("s1");
    s.catalog = environment.clone();
    let clock = Arc::new(ManualClock::new(s.now));
    let options = EngineOptions::new(clock)
        .normalizer(
            Arc::new(FixedNormalizer(surrogate(&observation(5)))),
            "ctx-normalizer-structured-v1",
        )
        .planner(a.clone());
    let engine = Engine::open(journal, options).unwrap();
    let started = s.started("managing");
    s.revision = engine.process(&started, None).unwrap().to_revision;
    let intent = observed_intent(&mut s);
    let t = engine.process(&intent, None).unwrap();
    s.revision = t.to_revision;

    let snapshot = engine.snapshot(&s.scope).unwrap();
    let committed = snapshot.state().unwrap().committed_plan.as_ref().unwrap();
    assert_eq!(committed.status, "ready");
    assert_eq!(committed.catalog_snapshot_id, environment);
    assert_eq!(committed.decision_digest, expected.value_digest);
    assert_eq!(
        t.actions[0].payload.get_str("plan_digest"),
        Some(expected.value_digest.as_str())
    );
    assert!(engine.replay_audit(&s.scope).unwrap().is_clean());
}

#[test]
fn the_memo_is_bounded_and_detects_changed_outputs() {
    let mut memo = Memo::default();
    memo.remember(Read::Load, Json::Int(0), Some("a".into()))
        .unwrap();
    memo.remember(Read::Load, Json::Int(0), Some("a".into()))
        .unwrap();
    assert_eq!(
        memo.remember(Read::Load, Json::Int(0), None)
            .unwrap_err()
            .to_string(),
        "load authority output drifted without a snapshot digest change"
    );
    for i in 1..SNAPSHOT_MEMO_MAX_KEYS {
        memo.remember(Read::Install, Json::Int(i64::try_from(i).unwrap()), None)
            .unwrap();
    }
    assert_eq!(
        memo.remember(Read::Install, Json::Int(-1), None),
        Err(AdapterError::MemoExhausted)
    );
    assert_eq!(
        AdapterError::MemoExhausted.to_string(),
        "pinned snapshot output bound is exhausted; a fresh adapter is required"
    );
}

#[test]
fn a_manual_entry_that_is_the_only_strong_match_is_planned_over_weak_executables() {
    // In the sample catalog `skill:xlsx` is manual; `python` is a tag of many loadable and
    // installable entries. Before the cut, executables filled the plan's five places first.
    let loaded = load_catalog_dir(&sample_catalog_dir()).unwrap();
    let catalog = Arc::new(loaded.catalog().clone());
    let observation = WorkObservation::new(&["excel", "spreadsheets"], &["python"]).unwrap();
    let found = crate::catalog::retrieve(&catalog, &observation);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].capability_id, "skill:xlsx");
    assert_eq!(found[0].actionability, Actionability::Manual);

    let policy = NetBenefitPolicy::new(&ctx_model::testkit::digest("calibration"), 1);
    let planner = AuthenticatedNetBenefitPlanner::new(policy, MemorySink::default()).unwrap();
    let adapter =
        ReplayDecisionPlanner::from_catalog(planner, catalog.clone(), "ctx-retrieval-test")
            .unwrap();
    let context = PlanningContext {
        planner_version: "ctx-retrieval-test",
        catalog_snapshot_digest: adapter.catalog_snapshot_digest(),
    };
    let surrogate = Surrogate::new(CURRENT_WORK_SCHEMA, 1, observation_json(&observation));
    let decision = adapter
        .plan_surrogate(Some(&surrogate), None, &context)
        .unwrap();
    let planned: Vec<&str> = decision
        .value
        .get("capabilities")
        .and_then(Json::as_arr)
        .unwrap()
        .iter()
        .filter_map(|r| r.get_str("capability_id"))
        .collect();
    assert_eq!(planned, ["skill:xlsx"]);
}
