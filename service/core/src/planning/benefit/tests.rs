#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use ctx_model::sha256_hex;

fn d(label: &str) -> String {
    sha256_hex(label)
}

fn policy() -> NetBenefitPolicy {
    NetBenefitPolicy::new(&d("calibration"), 100_000)
}

/// An eligible executable candidate with empty evidence and zero costs.
fn cand(id: &str, relevance: i64) -> BenefitCandidate {
    let source = d(&format!("source:{id}"));
    BenefitCandidate {
        capability_id: id.into(),
        source_digest: source.clone(),
        resource_profile_digest: d("profile"),
        availability: Availability::Executable,
        expected_task_benefit_ppm: 500_000,
        relevance_ppm: relevance,
        trust_ppm: 1_000_000,
        costs: Some(ResourceCosts::default()),
        evidence: EvidenceSummary::empty(id, &source, &d("window")),
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

fn ids(r: &BenefitSelectionResult) -> Vec<&str> {
    r.selections
        .iter()
        .map(|s| s.capability_id.as_str())
        .collect()
}

fn err(r: Result<impl std::fmt::Debug, BenefitError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn rounding_helpers_round_half_away_from_zero() {
    assert_eq!(ppm_product(800_000, 500_000), 400_000);
    assert_eq!(ppm_product(1, 500_000), 1); // 0.5 rounds up
    assert_eq!(ppm_product(1, 499_999), 0);
    assert_eq!(ppm_product(1_000_000, 1_000_000), 1_000_000);
    assert_eq!(signed_rounded_div(7, 2).unwrap(), 4);
    assert_eq!(signed_rounded_div(-7, 2).unwrap(), -4);
    assert_eq!(signed_rounded_div(-250_000, 6).unwrap(), -41_667);
    assert_eq!(signed_rounded_div(-5, 3).unwrap(), -2);
    assert_eq!(signed_rounded_div(-4, 3).unwrap(), -1);
    assert_eq!(signed_rounded_div(0, 9).unwrap(), 0);
    assert_eq!(signed_rounded_div(i64::MIN, 1).unwrap(), i64::MIN);
    assert_eq!(
        err(signed_rounded_div(1, 0)),
        "evidence denominator must be positive"
    );
    assert_eq!(
        checked_utility("x", i128::from(i64::MAX)).unwrap(),
        i64::MAX
    );
    assert_eq!(
        err(checked_utility("set_utility_u", i128::from(i64::MIN))),
        "set_utility_u exceeds the signed utility bound"
    );
}

#[test]
fn worked_examples_of_the_reference() {
    let mut p = policy();
    p.context_token_cost_u = 10;
    let mut c = cand("skill:a", 800_000);
    c.trust_ppm = 900_000;
    c.costs = Some(ResourceCosts {
        context_tokens: 1_000,
        ..ResourceCosts::default()
    });
    let a = p.assess(&c).unwrap();
    assert_eq!(
        (
            a.expected_benefit_u,
            a.expected_cost_u,
            a.individual_net_benefit_u
        ),
        (360_000, 10_000, 350_000)
    );
    assert_eq!(a.tier, Tier::Executable);
    assert_eq!(a.reason_codes, vec!["net-benefit-assessed"]);

    c.evidence.opportunity_observable = true;
    c.evidence.opportunities_observed = 5;
    c.evidence.successful_invocations = 2;
    c.evidence.failed_invocations = 1;
    assert_eq!(p.evidence_adjustment_ppm(&c.evidence).unwrap(), -41_667);
    let a = p.assess(&c).unwrap();
    assert_eq!(a.evidence_adjustment_ppm, -41_667);
    assert_eq!(
        a.reason_codes,
        vec!["negative-outcome-evidence", "net-benefit-assessed"]
    );
}

#[test]
fn assess_gates_collect_every_reason_sorted() {
    let p = policy();
    let mut c = cand("skill:a", 50_000);
    c.availability = Availability::Unsupported;
    c.source_trusted = false;
    c.security_approved = false;
    c.permissions_allowed = false;
    c.credentials_available = false;
    c.costs = None;
    let mut p2 = p.clone();
    p2.minimum_trust_ppm = 1_000_000;
    c.trust_ppm = 10;
    let a = p2.assess(&c).unwrap();
    assert_eq!(a.tier, Tier::Ineligible);
    assert_eq!(
        a.reason_codes,
        vec![
            "credential-unavailable",
            "host-unsupported",
            "permission-blocked",
            "relevance-below-threshold",
            "resource-cost-unknown",
            "security-blocked",
            "source-untrusted",
            "trust-below-threshold",
        ]
    );
    assert_eq!(
        (
            a.evidence_adjustment_ppm,
            a.expected_benefit_u,
            a.expected_cost_u,
            a.individual_net_benefit_u
        ),
        (0, 0, 0, 0)
    );
    let mut only_cost = cand("skill:b", 500_000);
    only_cost.costs = None;
    assert_eq!(
        p.assess(&only_cost).unwrap().reason_codes,
        vec!["resource-cost-unknown"]
    );
}

#[test]
fn assess_advisory_and_positive_evidence() {
    let p = policy();
    let mut c = cand("agent:helper", 500_000);
    c.availability = Availability::Advisory;
    c.evidence.opportunities_observed = 2;
    c.evidence.successful_invocations = 2;
    c.evidence.effective_outcomes = 1;
    let a = p.assess(&c).unwrap();
    assert_eq!(a.tier, Tier::Advisory);
    // weighted = 2·100,000 + 1·500,000 = 700,000 over 1 + 3 observations → 175,000.
    assert_eq!(a.evidence_adjustment_ppm, 175_000);
    assert_eq!(
        a.reason_codes,
        vec![
            "advisory-only",
            "net-benefit-assessed",
            "positive-outcome-evidence"
        ]
    );
    // effect 675,000 × relevance 500,000 × trust 1,000,000 → 337,500.
    assert_eq!(a.expected_benefit_u, 337_500);
}

#[test]
fn evidence_rules_and_messages() {
    let base = cand("skill:a", 500_000).evidence;
    type Mutation = Box<dyn Fn(&mut EvidenceSummary)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|e| e.kind = "agent".into()),
            "evidence kind does not match capability_id",
        ),
        (
            Box::new(|e| e.exposed_count = 1),
            "observed evidence requires at least one opportunity in its window",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.exposed_count = 2;
            }),
            "exposures cannot exceed observed opportunities",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.successful_invocations = 1;
                e.failed_invocations = 1;
            }),
            "invocation attempts cannot exceed observed opportunities",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.validated_outcomes = 1;
            }),
            "validated outcomes cannot exceed effective outcomes",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.effective_outcomes = 1;
            }),
            "skill effective outcomes cannot exceed exposures",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.harmful_outcomes = 1;
            }),
            "harmful outcomes cannot exceed attributable exposure or invocation observations",
        ),
        (
            Box::new(|e| {
                e.opportunities_observed = 1;
                e.exposed_count = 1;
                e.effective_outcomes = 1;
                e.harmful_outcomes = 1;
            }),
            "effective and harmful outcomes cannot exceed the evidence window",
        ),
        (
            Box::new(|e| e.opportunities_observed = 1_000_001),
            "opportunities_observed must be an integer from 0 through 1000000",
        ),
        (
            Box::new(|e| e.evidence_window_digest = "x".into()),
            "evidence_window_digest must be a lowercase SHA-256 digest",
        ),
    ];
    for (mutate, message) in cases {
        let mut e = base.clone();
        mutate(&mut e);
        assert_eq!(err(e.validate()), message);
    }
    let mut agent = cand("agent:a", 1).evidence;
    agent.opportunities_observed = 1;
    agent.exposed_count = 1;
    agent.effective_outcomes = 1;
    assert_eq!(
        err(agent.validate()),
        "agent, MCP, and harness effective outcomes cannot exceed successful invocations"
    );
}

#[test]
fn candidate_rules_and_messages() {
    let p = policy();
    let check = |mutate: &dyn Fn(&mut BenefitCandidate), message: &str| {
        let mut c = cand("skill:a", 500_000);
        mutate(&mut c);
        assert_eq!(err(p.assess(&c)), message);
    };
    check(
        &|c| c.capability_id = "tool:a".into(),
        "capability_id must be a canonical declared-kind capability identity",
    );
    check(
        &|c| c.relevance_ppm = -1,
        "relevance_ppm must be an integer from 0 through 1000000",
    );
    check(
        &|c| c.source_digest = d("other"),
        "evidence must exactly match candidate capability, kind, and source",
    );
    check(
        &|c| c.coverage_keys = vec!["b".into(), "a".into()],
        "coverage_keys must use canonical sorted order",
    );
    check(
        &|c| c.coverage_keys = vec!["a".into(), "a".into()],
        "coverage_keys contains duplicate values",
    );
    check(
        &|c| c.coverage_keys = vec!["A".into()],
        "coverage_keys item must be a canonical safe token",
    );
    check(
        &|c| c.coverage_keys = (0..65).map(|i| format!("k{i:03}")).collect(),
        "coverage_keys exceeds its bounded item limit",
    );
    check(
        &|c| c.conflicts = vec!["skill:a".into()],
        "a capability cannot conflict with itself",
    );
    check(
        &|c| c.complements = vec!["skill:a".into()],
        "a capability cannot complement itself",
    );
    check(
        &|c| {
            c.complements = vec!["skill:b".into()];
            c.conflicts = vec!["skill:b".into()];
        },
        "a peer cannot be both a complement and a conflict",
    );
    check(
        &|c| {
            c.costs = Some(ResourceCosts {
                runtime_millis: 1_000_001,
                ..ResourceCosts::default()
            })
        },
        "runtime_millis must be an integer from 0 through 1000000",
    );
    assert_eq!(
        err(Availability::parse("maybe")),
        "availability is not a declared state"
    );
}

#[test]
fn policy_rules_defaults_and_digest() {
    let p = policy();
    p.validate().unwrap();
    assert_eq!(p.minimum_marginal_net_benefit_u, 1);
    assert_eq!(p.evidence_prior_observations, 1);
    let v = p.to_json();
    assert_eq!(
        v.get_str("policy_schema_id"),
        Some("ctx.net-benefit-policy-v3")
    );
    assert_eq!(
        v.get_str("selection_algorithm_id"),
        Some("ctx.greedy-bounded-subset-exchange-v1")
    );
    assert_eq!(v.as_obj().unwrap().len(), 24);
    assert_eq!(p.policy_digest(), cja_digest(&v));
    assert_eq!(p.policy_digest(), policy().policy_digest());
    let mut other = policy();
    other.complementarity_bonus_u = 1;
    assert_ne!(other.policy_digest(), p.policy_digest());

    let mut bad = policy();
    bad.effective_outcome_evidence_ppm = 100_000;
    assert_eq!(
        err(bad.validate()),
        "positive evidence weights must order success below effect below validation"
    );
    let mut bad = policy();
    bad.harmful_outcome_evidence_ppm = -250_000;
    assert_eq!(
        err(bad.validate()),
        "negative evidence weights must order harm below invocation failure"
    );
    let mut bad = policy();
    bad.minimum_marginal_net_benefit_u = 0;
    assert_eq!(
        err(bad.validate()),
        "minimum_marginal_net_benefit_u must be an integer from 1 through 9223372036854775807"
    );
    let mut bad = policy();
    bad.failed_invocation_evidence_ppm = 1;
    assert_eq!(
        err(bad.validate()),
        "failed_invocation_evidence_ppm must be an integer from -1000000 through 0"
    );
    let mut bad = policy();
    bad.calibration_digest = "X".into();
    assert_eq!(
        err(bad.validate()),
        "calibration_digest must be a lowercase SHA-256 digest"
    );
}

#[test]
fn select_ranks_by_marginal_then_net_then_relevance_then_identity() {
    let p = policy();
    // Equal utilities: the identity order breaks the tie.
    let pool: Vec<_> = [
        "skill:f", "skill:b", "skill:d", "skill:a", "skill:c", "skill:e",
    ]
    .iter()
    .map(|id| cand(id, 500_000))
    .collect();
    let r = p.select(&pool, 5).unwrap();
    // With no bonuses every candidate adds its net; all six are admissible, five fit.
    assert_eq!(
        ids(&r),
        vec!["skill:a", "skill:b", "skill:c", "skill:d", "skill:e"]
    );
    assert_eq!(r.abstention_code, None);
    assert_eq!(r.candidate_pool_count, 6);
    assert!(r.search_evaluation_count > 0);
    p.validate_result(&r).unwrap();
    // Higher relevance wins over identity order.
    let mut pool = pool;
    pool[0].relevance_ppm = 900_000; // skill:f
    let r = p.select(&pool, 1).unwrap();
    assert_eq!(ids(&r), vec!["skill:f"]);
    assert_eq!(r.selections[0].marginal_net_benefit_u, 450_000);
}

#[test]
fn executables_fill_first_and_advisories_take_leftover_slots() {
    let p = policy();
    let mut advisory = cand("agent:zeta", 1_000_000);
    advisory.availability = Availability::Advisory;
    let pool = vec![advisory, cand("skill:b", 200_000), cand("skill:a", 300_000)];
    let r = p.select(&pool, 5).unwrap();
    assert_eq!(ids(&r), vec!["skill:a", "skill:b", "agent:zeta"]);
    assert_eq!(r.selections[2].tier, Tier::Advisory);
    let r = p.select(&pool, 2).unwrap();
    assert_eq!(ids(&r), vec!["skill:a", "skill:b"]);
    p.validate_result(&r).unwrap();
}

#[test]
fn conflicts_and_equivalence_keys_exclude_peers() {
    let p = policy();
    let mut a = cand("skill:a", 900_000);
    a.conflicts = vec!["skill:b".into()];
    let b = cand("skill:b", 800_000);
    let mut c = cand("skill:c", 700_000);
    c.equivalence_key = Some("same".into());
    let mut e = cand("skill:e", 600_000);
    e.equivalence_key = Some("same".into());
    let r = p.select(&[a, b, c, e], 5).unwrap();
    assert_eq!(ids(&r), vec!["skill:a", "skill:c"]);
    p.validate_result(&r).unwrap();
}

#[test]
fn complementary_equivalents_may_coexist_and_earn_the_bonus() {
    let mut p = policy();
    p.complementarity_bonus_u = 1_000;
    let mut c = cand("skill:c", 700_000);
    c.equivalence_key = Some("same".into());
    c.complements = vec!["skill:e".into()];
    let mut e = cand("skill:e", 600_000);
    e.equivalence_key = Some("same".into());
    e.complements = vec!["skill:c".into()];
    let r = p.select(&[c, e], 5).unwrap();
    assert_eq!(ids(&r), vec!["skill:c", "skill:e"]);
    // LOO of skill:c = its net 350,000 + the pair bonus.
    assert_eq!(r.selections[0].marginal_net_benefit_u, 351_000);
}

#[test]
fn the_exchange_step_replaces_a_greedy_pick_by_a_better_pair() {
    // Greedy first takes `big` (largest marginal); `big` overlaps both `left` and `right`, so
    // with an overlap penalty greedy stops at {big}. Exchanging big for the disjoint pair
    // {left, right} yields a strictly higher set utility.
    let mut p = policy();
    p.new_coverage_bonus_u_per_key = 100_000;
    p.overlap_penalty_u_per_key = 1_000_000;
    let mut big = cand("skill:big", 1_000_000);
    big.coverage_keys = vec!["x".into(), "y".into()];
    let mut left = cand("skill:left", 600_000);
    left.coverage_keys = vec!["x".into()];
    let mut right = cand("skill:right", 600_000);
    right.coverage_keys = vec!["y".into()];
    let r = p.select(&[big, left, right], 5).unwrap();
    // U{big} = 500,000 + 200,000 = 700,000; U{left,right} = 2·(300,000 + 100,000) = 800,000.
    assert_eq!(ids(&r), vec!["skill:left", "skill:right"]);
    assert_eq!(r.selections[0].marginal_net_benefit_u, 400_000);
    assert!(r.search_evaluation_count > 3);
    p.validate_result(&r).unwrap();
}

#[test]
fn abstentions_limit_zero_no_feasible_and_below_net_benefit() {
    let p = policy();
    let r = p.select(&[cand("skill:a", 500_000)], 0).unwrap();
    assert_eq!(r.abstention_code, Some(AbstentionCode::LimitZero));
    assert_eq!(r.search_evaluation_count, 0);
    assert_eq!(r.assessments.len(), 1);
    p.validate_result(&r).unwrap();

    let r = p.select(&[], 5).unwrap();
    assert_eq!(
        r.abstention_code,
        Some(AbstentionCode::NoFeasibleCapability)
    );
    assert_eq!((r.candidate_pool_count, r.search_evaluation_count), (0, 0));
    p.validate_result(&r).unwrap();

    let mut costly = cand("skill:a", 500_000);
    costly.costs = Some(ResourceCosts {
        context_tokens: 1_000_000,
        ..ResourceCosts::default()
    });
    let mut p2 = policy();
    p2.context_token_cost_u = 1;
    let r = p2.select(&[costly], 5).unwrap();
    assert_eq!(r.abstention_code, Some(AbstentionCode::BelowNetBenefit));
    assert!(r.selections.is_empty());
    assert_eq!(r.search_evaluation_count, 1);
    assert_eq!(
        r.to_json().get_str("abstention_code"),
        Some("below-net-benefit")
    );
    p2.validate_result(&r).unwrap();
}

#[test]
fn pool_checks() {
    let p = policy();
    assert_eq!(
        err(p.select(&[], 6)),
        "requested_limit must be an integer from 0 through 5"
    );
    assert_eq!(
        err(p.select(&[cand("skill:a", 1), cand("skill:a", 2)], 5)),
        "candidate pool contains duplicate capability identities"
    );
    let mut a = cand("skill:a", 1);
    a.complements = vec!["skill:b".into()];
    let mut b = cand("skill:b", 1);
    b.conflicts = vec!["skill:a".into()];
    assert_eq!(
        err(p.select(&[a, b], 5)),
        "candidate pool contains a cross-record complement/conflict contradiction"
    );
    let big: Vec<_> = (0..513).map(|i| cand(&format!("skill:c{i}"), 1)).collect();
    assert_eq!(
        err(p.select(&big, 5)),
        "candidate pool exceeds its bounded limit"
    );
}

#[test]
fn the_512_candidate_pool_is_searched_within_its_bound() {
    let p = policy();
    let pool: Vec<_> = (0..512)
        .map(|i| cand(&format!("skill:c{i:03}"), 100_000 + i64::from(i) * 1_000))
        .collect();
    let r = p.select(&pool, 5).unwrap();
    assert_eq!(
        ids(&r),
        vec![
            "skill:c507",
            "skill:c508",
            "skill:c509",
            "skill:c510",
            "skill:c511"
        ]
    );
    assert_eq!(r.candidate_pool_count, 512);
    let evaluations = u64::try_from(r.search_evaluation_count).unwrap();
    assert!(evaluations > 0 && evaluations <= SEARCH_MAX_EVALUATIONS);
    p.validate_result(&r).unwrap();
}

#[test]
fn result_digest_is_stable_and_covers_every_field() {
    let p = policy();
    let pool = vec![cand("skill:a", 500_000), cand("skill:b", 400_000)];
    let r1 = p.select(&pool, 5).unwrap();
    let reversed: Vec<_> = pool.iter().rev().cloned().collect();
    let r2 = p.select(&reversed, 5).unwrap();
    assert_eq!(r1, r2);
    assert_eq!(r1.result_digest, r2.result_digest);
    assert_eq!(r1.result_digest, cja_digest(&r1.digest_json()));
    let text = r1.to_json_text().unwrap();
    assert!(text.is_ascii());
    assert_eq!(Json::parse(&text).unwrap(), r1.to_json());
    assert_eq!(
        r1.to_json().get_str("schema"),
        Some("ctx.benefit-selection-result-v1")
    );
    let r3 = p.select(&pool, 4).unwrap();
    assert_ne!(r3.result_digest, r1.result_digest);
}

#[test]
fn result_validation_messages() {
    let p = policy();
    let r = p
        .select(&[cand("skill:a", 500_000), cand("skill:b", 400_000)], 5)
        .unwrap();
    let check = |mutate: &dyn Fn(&mut BenefitSelectionResult), message: &str| {
        let mut bad = r.clone();
        mutate(&mut bad);
        assert_eq!(err(p.validate_result(&bad)), message);
    };
    check(
        &|x| x.result_digest = d("x"),
        "result_digest does not match canonical result fields",
    );
    check(
        &|x| x.selections.reverse(),
        "selections must use canonical tier and identity order",
    );
    check(
        &|x| x.assessments.reverse(),
        "assessments must use canonical identity order",
    );
    check(
        &|x| x.selections[0].individual_net_benefit_u += 1,
        "selection does not exactly project a matching assessment",
    );
    check(
        &|x| x.requested_limit = 1,
        "selection count cannot exceed requested_limit",
    );
    check(
        &|x| x.candidate_pool_count = 3,
        "candidate_pool_count must equal the canonical assessment count",
    );
    check(
        &|x| x.abstention_code = Some(AbstentionCode::BelowNetBenefit),
        "abstention_code does not match selection and feasibility semantics",
    );
    check(
        &|x| x.selections[0].tier = Tier::Ineligible,
        "selection tier must be executable or advisory",
    );
    check(
        &|x| x.selections[0].marginal_net_benefit_u = 0,
        "marginal_net_benefit_u must be an integer from 1 through 9223372036854775807",
    );
    // A consistent result under another policy.
    let mut other = policy();
    other.minimum_relevance_ppm = 0;
    assert_eq!(
        err(other.validate_result(&r)),
        "result policy digest does not match this policy"
    );
    // A sealed result that the policy would not produce.
    let mut forged = r.clone();
    forged.selections[1].marginal_net_benefit_u = 1;
    forged.result_digest = forged.compute_digest();
    assert_eq!(
        err(p.validate_result(&forged)),
        "result does not match exact policy revalidation"
    );
    let mut zero = p.select(&[cand("skill:a", 500_000)], 0).unwrap();
    zero.search_evaluation_count = 1;
    zero.result_digest = zero.compute_digest();
    assert_eq!(
        err(zero.validate()),
        "non-search abstention must have zero search evaluations"
    );
}

#[test]
fn combinations_are_positional() {
    assert_eq!(
        combinations(&[1, 2, 3], 2),
        vec![vec![1, 2], vec![1, 3], vec![2, 3]]
    );
    assert_eq!(combinations(&[1, 2, 3], 3), vec![vec![1, 2, 3]]);
    assert!(combinations(&[1], 2).is_empty());
    assert!(combinations(&[1], 0).is_empty());
}
