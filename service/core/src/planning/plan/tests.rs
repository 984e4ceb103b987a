#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;

use super::*;
use crate::planning::benefit::{EvidenceSummary, ResourceCosts};
use ctx_model::testkit::{RowKind, Session};
use ctx_model::{testkit, validate_capability_plan_value, validate_plan_row};

/// Stores results in memory and acknowledges a digest chosen by `mode`.
#[derive(Debug, Default)]
struct MemorySink {
    stored: RefCell<Vec<Json>>,
    mode: SinkMode,
}

#[derive(Debug, Default, Clone, Copy)]
enum SinkMode {
    #[default]
    Honest,
    Unavailable,
    Failed,
    WrongDigest,
}

impl BenefitAuditSink for MemorySink {
    fn store(&self, result_json: &Json) -> Result<String, SinkError> {
        match self.mode {
            SinkMode::Unavailable => Err(SinkError::Unavailable(
                "benefit audit store is unavailable: memory".into(),
            )),
            SinkMode::Failed => Err(SinkError::Failed(
                "benefit audit database operation is invalid".into(),
            )),
            SinkMode::WrongDigest => Ok(testkit::digest("other")),
            SinkMode::Honest => {
                self.stored.borrow_mut().push(result_json.clone());
                Ok(result_json.get_str("result_digest").unwrap().to_owned())
            }
        }
    }
}

fn policy() -> NetBenefitPolicy {
    NetBenefitPolicy::new(&testkit::digest("calibration"), 100_000)
}

/// The benefit facts of a testkit row, relevance taken from its score.
fn facts(row: &Json, relevance: i64) -> BenefitCandidate {
    let id = row.get_str("capability_id").unwrap();
    let source = row.get_str("catalog_entry_digest").unwrap();
    BenefitCandidate {
        capability_id: id.into(),
        source_digest: source.into(),
        resource_profile_digest: testkit::digest("profile"),
        availability: required_availability(row.get_str("actionability").unwrap()),
        expected_task_benefit_ppm: 600_000,
        relevance_ppm: relevance,
        trust_ppm: 1_000_000,
        costs: Some(ResourceCosts::default()),
        evidence: EvidenceSummary::empty(id, source, &testkit::digest("window")),
        source_trusted: true,
        security_approved: true,
        permissions_allowed: true,
        credentials_available: true,
        coverage_keys: vec![],
        equivalence_key: None,
        complements: vec![],
        conflicts: vec![],
    }
}

fn authenticated(row: &Json, relevance: i64) -> AuthenticatedCapabilityCandidate {
    AuthenticatedCapabilityCandidate::new(
        CapabilityPresentation::from_row(row).unwrap(),
        row.get("catalog_identity").unwrap().clone(),
        facts(row, relevance),
        PlanningAuthority::from_json(row.get("authority").unwrap()).unwrap(),
    )
    .unwrap()
}

fn pool() -> Vec<AuthenticatedCapabilityCandidate> {
    vec![
        authenticated(&testkit::row(RowKind::Manual, "agent", "gamma"), 900_000),
        authenticated(&testkit::row(RowKind::Install, "skill", "beta"), 700_000),
        authenticated(&testkit::row(RowKind::Load, "skill", "alpha"), 800_000),
    ]
}

fn err<T: std::fmt::Debug>(r: Result<T, PlanningError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn planned_decision_is_accepted_and_committed_by_the_reducer() {
    let planner = AuthenticatedNetBenefitPlanner::new(policy(), MemorySink::default()).unwrap();
    let plan = planner.plan(&pool(), 5).unwrap();
    assert_eq!(plan.status(), PlanStatus::Ready);
    assert_eq!(plan.abstention_code(), None);
    let ids: Vec<_> = plan
        .selections()
        .iter()
        .map(|s| s.selected_identity().0.to_owned())
        .collect();
    assert_eq!(ids, vec!["skill:alpha", "skill:beta", "agent:gamma"]);
    let value = plan.to_json();
    validate_capability_plan_value(&value).unwrap();
    for row in value.get("capabilities").unwrap().as_arr().unwrap() {
        validate_plan_row(row).unwrap();
        assert_eq!(row.as_obj().unwrap().len(), 13);
    }
    // The audit sink holds exactly the result the audit reference names.
    let stored = planner.sink.stored.borrow();
    assert_eq!(stored.len(), 1);
    let audit = plan.benefit_audit().unwrap();
    assert_eq!(
        stored[0].get_str("result_digest"),
        Some(audit.result_digest.as_str())
    );
    assert_eq!(audit.policy_digest, planner.policy().policy_digest());

    let surrogate = plan.decision_surrogate().unwrap();
    assert_eq!(surrogate.value_digest, plan.decision_digest());
    let mut s = Session::new("s1");
    let started = s.started("managing");
    let (state, _) = ctx_model::reduce(None, &testkit::input(&started, None)).unwrap();
    s.revision = state.revision;
    let intent = s.intent();
    let (state, transition) =
        ctx_model::reduce(Some(&state), &testkit::input(&intent, Some(surrogate))).unwrap();
    let committed = state.committed_plan.as_ref().unwrap();
    assert_eq!(committed.status, "ready");
    assert_eq!(committed.decision_digest, plan.decision_digest());
    assert_eq!(committed.capabilities.len(), 3);
    assert_eq!(committed.benefit_audit, audit.to_json());
    assert_eq!(
        transition.actions[0].payload.get_str("plan_digest"),
        Some(plan.decision_digest().as_str())
    );
}

#[test]
fn planning_twice_gives_the_same_decision_digest() {
    let a = AuthenticatedNetBenefitPlanner::new(policy(), MemorySink::default())
        .unwrap()
        .plan(&pool(), 5)
        .unwrap();
    let mut reversed = pool();
    reversed.reverse();
    let b = AuthenticatedNetBenefitPlanner::new(policy(), MemorySink::default())
        .unwrap()
        .plan(&reversed, 5)
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.decision_digest(), b.decision_digest());
}

#[test]
fn abstained_plans_carry_the_benefit_code_and_commit() {
    let planner = AuthenticatedNetBenefitPlanner::new(policy(), MemorySink::default()).unwrap();
    for (pool, limit, code) in [
        (pool(), 0, "limit-zero"),
        (Vec::new(), 5, "no-feasible-capability"),
    ] {
        let plan = planner.plan(&pool, limit).unwrap();
        assert_eq!(plan.status(), PlanStatus::Abstained);
        assert_eq!(plan.abstention_code(), Some(code));
        assert!(plan.selections().is_empty());
        validate_capability_plan_value(&plan.to_json()).unwrap();
        let mut s = Session::new("s2");
        let started = s.started("managing");
        let (state, _) = ctx_model::reduce(None, &testkit::input(&started, None)).unwrap();
        s.revision = state.revision;
        let intent = s.intent();
        let surrogate = plan.decision_surrogate().unwrap();
        let (state, _) =
            ctx_model::reduce(Some(&state), &testkit::input(&intent, Some(surrogate))).unwrap();
        let committed = state.committed_plan.unwrap();
        assert_eq!(committed.status, "abstained");
        assert_eq!(committed.abstention_code.as_deref(), Some(code));
    }
    // An empty pool still stores exactly one result per run.
    assert_eq!(planner.sink.stored.borrow().len(), 2);
}

#[test]
fn sink_failures_degrade_or_fail_closed() {
    let unavailable = AuthenticatedNetBenefitPlanner::new(
        policy(),
        MemorySink {
            mode: SinkMode::Unavailable,
            ..MemorySink::default()
        },
    )
    .unwrap();
    let plan = unavailable.plan(&pool(), 5).unwrap();
    assert_eq!(plan.status(), PlanStatus::Degraded);
    assert_eq!(plan.abstention_code(), Some("planner-failed"));
    assert!(plan.benefit_audit().is_none() && plan.selections().is_empty());
    validate_capability_plan_value(&plan.to_json()).unwrap();
    plan.decision_surrogate().unwrap();

    let wrong = AuthenticatedNetBenefitPlanner::new(
        policy(),
        MemorySink {
            mode: SinkMode::WrongDigest,
            ..MemorySink::default()
        },
    )
    .unwrap();
    assert_eq!(
        err(wrong.plan(&pool(), 5)),
        "audit store acknowledged a different benefit result digest"
    );
    let failed = AuthenticatedNetBenefitPlanner::new(
        policy(),
        MemorySink {
            mode: SinkMode::Failed,
            ..MemorySink::default()
        },
    )
    .unwrap();
    assert_eq!(
        err(failed.plan(&pool(), 5)),
        "benefit audit database operation is invalid"
    );
}

#[test]
fn planner_pool_checks() {
    let planner = AuthenticatedNetBenefitPlanner::new(policy(), MemorySink::default()).unwrap();
    assert_eq!(
        err(planner.plan(&pool(), 6)),
        "requested_limit must be an integer from zero through five"
    );
    let mut dup = pool();
    dup.push(dup[0].clone());
    assert_eq!(
        err(planner.plan(&dup, 5)),
        "candidate pool contains duplicate identities"
    );
    let many: Vec<_> = (0..513)
        .map(|i| {
            authenticated(
                &testkit::row(RowKind::Manual, "agent", &format!("a{i}")),
                500_000,
            )
        })
        .collect();
    assert_eq!(
        err(planner.plan(&many, 5)),
        "candidate pool exceeds its bounded limit"
    );
}

#[test]
fn consistency_rule_messages() {
    let load = testkit::row(RowKind::Load, "skill", "alpha");
    let manual = testkit::row(RowKind::Manual, "agent", "gamma");
    let install = testkit::row(RowKind::Install, "skill", "beta");
    let build = |row: &Json, availability: Availability, authority: PlanningAuthority| {
        let mut f = facts(row, 500_000);
        f.availability = availability;
        AuthenticatedCapabilityCandidate::new(
            CapabilityPresentation::from_row(row).unwrap(),
            row.get("catalog_identity").unwrap().clone(),
            f,
            authority,
        )
    };
    let load_authority = PlanningAuthority::from_json(load.get("authority").unwrap()).unwrap();
    let install_authority =
        PlanningAuthority::from_json(install.get("authority").unwrap()).unwrap();
    assert_eq!(
        err(build(
            &load,
            Availability::Executable,
            PlanningAuthority::Manual
        )),
        "load presentation requires load authority"
    );
    assert_eq!(
        err(build(&load, Availability::Advisory, load_authority.clone())),
        "load authority requires executable benefit facts"
    );
    assert_eq!(
        err(build(
            &manual,
            Availability::Executable,
            PlanningAuthority::Manual
        )),
        "manual authority is advisory only"
    );
    assert_eq!(
        err(build(
            &manual,
            Availability::Advisory,
            load_authority.clone()
        )),
        "manual presentation requires empty manual authority"
    );
    assert_eq!(
        err(build(
            &install,
            Availability::Executable,
            load_authority.clone()
        )),
        "install presentation requires install authority"
    );
    assert_eq!(
        err(build(&install, Availability::Advisory, install_authority)),
        "install authority requires executable benefit facts"
    );
    // The beta install authority on the alpha load row: wrong type first.
    let other_load = PlanningAuthority::from_json(
        testkit::row(RowKind::Load, "skill", "omega")
            .get("authority")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        err(build(&load, Availability::Executable, other_load)),
        "load authority must exactly match capability and catalog identity"
    );
    let mut f = facts(&load, 500_000);
    f.source_digest = testkit::digest("elsewhere");
    f.evidence.source_digest = f.source_digest.clone();
    assert_eq!(
        err(AuthenticatedCapabilityCandidate::new(
            CapabilityPresentation::from_row(&load).unwrap(),
            load.get("catalog_identity").unwrap().clone(),
            f,
            load_authority.clone(),
        )),
        "benefit candidate must exactly match presented capability and source"
    );
    let mut unavailable = CapabilityPresentation::from_row(&manual).unwrap();
    unavailable.actionability = "blocked".into();
    assert_eq!(
        err(check_identity_and_authority(
            &unavailable,
            manual.get("catalog_identity").unwrap(),
            "advisory",
            &PlanningAuthority::Manual
        )),
        "schema-v3 planning accepts only load, install, or manual presentation"
    );
    assert_eq!(
        err(check_identity_and_authority(
            &unavailable,
            load.get("catalog_identity").unwrap(),
            "advisory",
            &PlanningAuthority::Manual
        )),
        "catalog identity must exactly match the presented capability"
    );
}

#[test]
fn authority_constructor_messages() {
    let install = testkit::row(RowKind::Install, "skill", "beta");
    let authority = install.get("authority").unwrap();
    let descriptor = authority.get("descriptor").unwrap().clone();
    let material = authority.get("result_material").unwrap().clone();
    assert_eq!(
        err(PlanningAuthority::load(Json::Null)),
        "load authority requires AuthorizedMaterial"
    );
    assert_eq!(
        err(PlanningAuthority::install(Json::Null, material.clone())),
        "install authority requires an InstallPlanDescriptor"
    );
    assert_eq!(
        err(PlanningAuthority::install(descriptor.clone(), Json::Null)),
        "install authority requires an exact result material identity"
    );
    let other = testkit::row(RowKind::Install, "skill", "delta");
    let other_material = other
        .get("authority")
        .unwrap()
        .get("result_material")
        .unwrap()
        .clone();
    assert_eq!(
        err(PlanningAuthority::install(
            descriptor.clone(),
            other_material
        )),
        "install descriptor does not match the exact result material identity"
    );
    let built = PlanningAuthority::install(descriptor, material).unwrap();
    assert_eq!(&built.to_json(), authority);
    assert_eq!(
        PlanningAuthority::Manual.to_json(),
        Json::object([("type", Json::str("manual"))])
    );
}

#[test]
fn audit_reference_rules() {
    let p = policy();
    let facts: Vec<_> = pool()
        .iter()
        .map(|c| c.benefit_candidate().clone())
        .collect();
    let result = p.select(&facts, 5).unwrap();
    let audit = BenefitAuditReference::new(&p, &result);
    audit.validate().unwrap();
    assert!(audit.matches(&p, &result));
    assert_eq!(audit.to_json().as_obj().unwrap().len(), 9);
    let mut other = policy();
    other.minimum_trust_ppm = 1;
    assert!(!audit.matches(&other, &result));
    let mut bad = audit.clone();
    bad.result_schema_id = "benefit".into();
    assert_eq!(
        err(bad.validate()),
        "result_schema_id must be a declared schema token"
    );
    let mut bad = audit.clone();
    bad.requested_limit = 6;
    assert_eq!(
        err(bad.validate()),
        "requested_limit is outside its bounded range"
    );
    let mut bad = audit.clone();
    bad.calibration_digest = "x".into();
    assert_eq!(
        err(bad.validate()),
        "calibration_digest must be a lowercase SHA-256 digest"
    );
    // A plan must carry the audit of its own result.
    let mut wrong = audit.clone();
    wrong.search_evaluation_count += 1;
    assert_eq!(
        err(CapabilityPlan::from_result(&p, &result, wrong, vec![])),
        "benefit audit does not match validated result"
    );
    assert_eq!(
        err(CapabilityPlan::from_result(&p, &result, audit, vec![])),
        "capability rows do not exactly project the validated benefit result"
    );
    assert_eq!(
        err(CapabilityPlan::degraded("limit-zero")),
        "degraded schema-v3 plan requires no audit, result, or capabilities"
    );
}

#[test]
fn presentation_messages() {
    let row = testkit::row(RowKind::Load, "skill", "alpha");
    let base = CapabilityPresentation::from_row(&row).unwrap();
    let check = |mutate: &dyn Fn(&mut CapabilityPresentation), message: &str| {
        let mut p = base.clone();
        mutate(&mut p);
        assert_eq!(err(p.validate()), message);
    };
    check(
        &|p| p.kind = "tool".into(),
        "kind is not a recommendable capability kind",
    );
    check(
        &|p| p.name = "beta".into(),
        "capability_id must be the canonical kind:name identity",
    );
    check(
        &|p| p.reason_codes.clear(),
        "reason_codes must explain the candidate",
    );
    check(
        &|p| p.install_plan_digest = Some(testkit::digest("x")),
        "install descriptor and plan digests are allowed only for install candidates",
    );
    check(
        &|p| p.actionability = "maybe".into(),
        "actionability is not a declared state",
    );
    check(
        &|p| p.normalized_score_ppm = 1_000_001,
        "normalized_score_ppm must be an integer from 0 through 1000000",
    );
}
