//! The net-benefit model (spec/planner.md §1–§6): integer-only individual assessment
//! of authenticated candidates and the bounded, deterministic subset search that chooses at most
//! five of them.
//!
//! Every quantity is an integer: "ppm" values are parts per million (1,000,000 = 100 %), "u" values
//! are utility units. Intermediate sums are computed in `i128` so that no input, however extreme,
//! can overflow before the reference's own bound checks run; those checks then report the
//! reference's messages. Nothing here panics on any input.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use ctx_model::{
    BENEFIT_CANDIDATES_MAX_ITEMS, BENEFIT_POLICY_SCHEMA_ID, BENEFIT_RESULT_SCHEMA_ID,
    BENEFIT_SEARCH_MAX_EVALUATIONS, BENEFIT_SELECTION_ALGORITHM_ID, CapabilityKind, Json,
    cja_digest, is_capability_name, is_safe_token, is_sha,
};

/// Largest candidate pool one selection accepts: ctx-model's bound as a length.
pub const CANDIDATE_POOL_MAX_ITEMS: usize = BENEFIT_CANDIDATES_MAX_ITEMS as usize;
/// Largest canonical result text (32 MiB).
pub const BENEFIT_RESULT_JSON_MAX_BYTES: usize = 33_554_432;
/// Most capabilities one selection may choose (the global five-item bound).
pub const SELECTED_MAX_ITEMS: usize = 5;
/// One million parts per million: 100 %.
pub const PPM_SCALE: i64 = 1_000_000;
/// Largest resource quantity or evidence count.
pub const QUANTITY_MAX_UNITS: i64 = 1_000_000;
/// Most entries in one coverage, complement or conflict list.
pub const RELATION_KEYS_MAX_ITEMS: usize = 64;
/// Most candidate evaluations one search may spend before it fails closed: ctx-model's bound as a
/// counter.
pub const SEARCH_MAX_EVALUATIONS: u64 = BENEFIT_SEARCH_MAX_EVALUATIONS as u64;
/// The signed utility bound: every utility lies in `[-(2^63 - 1), 2^63 - 1]`.
pub const UTILITY_MAX_U: i64 = i64::MAX;

/// Why the net-benefit model refused a value. Display is the reference's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BenefitError {
    /// A value breaks a model rule (the reference's `BenefitValidationError` / `ValueError`).
    #[error("{0}")]
    Invalid(String),
    /// A value of the wrong kind (the reference's `TypeError`).
    #[error("{0}")]
    Type(String),
    /// The subset search spent more than [`SEARCH_MAX_EVALUATIONS`].
    #[error("search exceeded its deterministic evaluation bound")]
    SearchBound,
}

fn invalid<T>(message: impl Into<String>) -> Result<T, BenefitError> {
    Err(BenefitError::Invalid(message.into()))
}

// ---------------------------------------------------------------------------------------------
// Rounding helpers and field checks

/// Half-up product of two ppm values: `floor((a·b + 500,000) / 1,000,000)`. Defined for the
/// non-negative ppm values the model passes; computed in `i128` so that it is total.
pub fn ppm_product(a: i64, b: i64) -> i64 {
    let n = i128::from(a) * i128::from(b) + i128::from(PPM_SCALE / 2);
    saturate(n.div_euclid(i128::from(PPM_SCALE)))
}

/// Signed rounded division, symmetric around zero: for `n ≥ 0`, `floor((n + floor(d/2)) / d)`;
/// for `n < 0`, `-floor((-n + floor(d/2)) / d)`. `d` must be positive.
pub fn signed_rounded_div(n: i64, d: i64) -> Result<i64, BenefitError> {
    if d <= 0 {
        return invalid("evidence denominator must be positive");
    }
    let (n, d) = (i128::from(n), i128::from(d));
    let half = d / 2;
    // i128 holds -i64::MIN, so the negation cannot overflow.
    let q = if n >= 0 {
        (n + half) / d
    } else {
        -((-n + half) / d)
    };
    Ok(saturate(q))
}

/// A utility inside the symmetric signed bound, or `<name> exceeds the signed utility bound`.
pub fn checked_utility(name: &str, value: i128) -> Result<i64, BenefitError> {
    if value.unsigned_abs() > UTILITY_MAX_U.unsigned_abs().into() {
        return invalid(format!("{name} exceeds the signed utility bound"));
    }
    Ok(saturate(value))
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

fn check_int(field: &str, value: i64, min: i64, max: i64) -> Result<(), BenefitError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        invalid(format!(
            "{field} must be an integer from {min} through {max}"
        ))
    }
}

fn check_digest(field: &str, value: &str) -> Result<(), BenefitError> {
    if is_sha(value) {
        Ok(())
    } else {
        invalid(format!("{field} must be a lowercase SHA-256 digest"))
    }
}

/// A safe token whose prefix before the first colon is a declared kind and whose remainder is a
/// capability name.
pub fn is_declared_capability_id(value: &str) -> bool {
    is_safe_token(value)
        && value.split_once(':').is_some_and(|(kind, name)| {
            CapabilityKind::parse(kind).is_some() && is_capability_name(name)
        })
}

fn check_capability_id(field: &str, value: &str) -> Result<(), BenefitError> {
    if is_declared_capability_id(value) {
        Ok(())
    } else {
        invalid(format!(
            "{field} must be a canonical declared-kind capability identity"
        ))
    }
}

/// A canonical list: bounded, every item valid, then sorted, then free of duplicates (the
/// benefit model checks order before duplicates, unlike the planner's presentation lists).
fn check_token_list(field: &str, items: &[String], identities: bool) -> Result<(), BenefitError> {
    if items.len() > RELATION_KEYS_MAX_ITEMS {
        return invalid(format!("{field} exceeds its bounded item limit"));
    }
    for item in items {
        if identities {
            if !is_declared_capability_id(item) {
                return invalid(format!(
                    "{field} item must be a canonical declared-kind capability identity"
                ));
            }
        } else if !is_safe_token(item) {
            return invalid(format!("{field} item must be a canonical safe token"));
        }
    }
    if items.windows(2).any(|w| w[0] > w[1]) {
        return invalid(format!("{field} must use canonical sorted order"));
    }
    if items.windows(2).any(|w| w[0] == w[1]) {
        return invalid(format!("{field} contains duplicate values"));
    }
    Ok(())
}

fn contains(sorted: &[String], id: &str) -> bool {
    sorted.binary_search_by(|s| s.as_str().cmp(id)).is_ok()
}

fn strs(items: &[String]) -> Json {
    Json::Arr(items.iter().map(|s| Json::str(s.as_str())).collect())
}

// ---------------------------------------------------------------------------------------------
// Availability, tiers, abstention codes

/// What the host can do with a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Availability {
    Executable,
    Advisory,
    Unsupported,
}

impl Availability {
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Executable => "executable",
            Availability::Advisory => "advisory",
            Availability::Unsupported => "unsupported",
        }
    }

    pub fn parse(value: &str) -> Result<Availability, BenefitError> {
        match value {
            "executable" => Ok(Availability::Executable),
            "advisory" => Ok(Availability::Advisory),
            "unsupported" => Ok(Availability::Unsupported),
            _ => invalid("availability is not a declared state"),
        }
    }
}

/// The tier an assessment places a candidate in; executables fill slots first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Executable,
    Advisory,
    Ineligible,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Executable => "executable",
            Tier::Advisory => "advisory",
            Tier::Ineligible => "ineligible",
        }
    }
}

/// Why a selection chose nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AbstentionCode {
    BelowNetBenefit,
    LimitZero,
    NoFeasibleCapability,
}

impl AbstentionCode {
    pub fn as_str(self) -> &'static str {
        match self {
            AbstentionCode::BelowNetBenefit => "below-net-benefit",
            AbstentionCode::LimitZero => "limit-zero",
            AbstentionCode::NoFeasibleCapability => "no-feasible-capability",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ResourceCosts

/// Resource quantities a capability consumes, each 0…1,000,000. Field order is also the
/// serialization and weighting order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ResourceCosts {
    pub context_tokens: i64,
    pub tool_schema_tokens: i64,
    pub runtime_millis: i64,
    pub permission_burden_units: i64,
    pub credential_burden_units: i64,
    pub approval_prompts: i64,
    pub process_units: i64,
    pub child_agent_units: i64,
}

impl ResourceCosts {
    /// `(field name, quantity)` in the reference's order.
    pub fn fields(&self) -> [(&'static str, i64); 8] {
        [
            ("context_tokens", self.context_tokens),
            ("tool_schema_tokens", self.tool_schema_tokens),
            ("runtime_millis", self.runtime_millis),
            ("permission_burden_units", self.permission_burden_units),
            ("credential_burden_units", self.credential_burden_units),
            ("approval_prompts", self.approval_prompts),
            ("process_units", self.process_units),
            ("child_agent_units", self.child_agent_units),
        ]
    }

    pub fn validate(&self) -> Result<(), BenefitError> {
        for (field, value) in self.fields() {
            check_int(field, value, 0, QUANTITY_MAX_UNITS)?;
        }
        Ok(())
    }

    pub fn to_json(self) -> Json {
        Json::object(self.fields().map(|(k, v)| (k, Json::Int(v))))
    }
}

// ---------------------------------------------------------------------------------------------
// EvidenceSummary

/// Outcome evidence observed for one capability in one evidence window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EvidenceSummary {
    pub capability_id: String,
    pub kind: String,
    pub source_digest: String,
    pub evidence_window_digest: String,
    pub opportunity_observable: bool,
    pub opportunities_observed: i64,
    pub exposed_count: i64,
    pub successful_invocations: i64,
    pub failed_invocations: i64,
    pub effective_outcomes: i64,
    pub validated_outcomes: i64,
    pub harmful_outcomes: i64,
}

impl EvidenceSummary {
    /// An empty window for `capability_id` (kind taken from its prefix).
    pub fn empty(capability_id: &str, source_digest: &str, evidence_window_digest: &str) -> Self {
        EvidenceSummary {
            capability_id: capability_id.to_owned(),
            kind: capability_id
                .split_once(':')
                .map_or("", |(k, _)| k)
                .to_owned(),
            source_digest: source_digest.to_owned(),
            evidence_window_digest: evidence_window_digest.to_owned(),
            opportunity_observable: false,
            opportunities_observed: 0,
            exposed_count: 0,
            successful_invocations: 0,
            failed_invocations: 0,
            effective_outcomes: 0,
            validated_outcomes: 0,
            harmful_outcomes: 0,
        }
    }

    fn counts(&self) -> [(&'static str, i64); 7] {
        [
            ("opportunities_observed", self.opportunities_observed),
            ("exposed_count", self.exposed_count),
            ("successful_invocations", self.successful_invocations),
            ("failed_invocations", self.failed_invocations),
            ("effective_outcomes", self.effective_outcomes),
            ("validated_outcomes", self.validated_outcomes),
            ("harmful_outcomes", self.harmful_outcomes),
        ]
    }

    pub fn validate(&self) -> Result<(), BenefitError> {
        check_capability_id("capability_id", &self.capability_id)?;
        check_digest("source_digest", &self.source_digest)?;
        check_digest("evidence_window_digest", &self.evidence_window_digest)?;
        for (field, value) in self.counts() {
            check_int(field, value, 0, QUANTITY_MAX_UNITS)?;
        }
        // Counts are bounded by 1,000,000 above, so these sums cannot overflow.
        let opportunities = self.opportunities_observed;
        let exposed = self.exposed_count;
        let attempts = self.successful_invocations + self.failed_invocations;
        let effective = self.effective_outcomes;
        let validated = self.validated_outcomes;
        let harmful = self.harmful_outcomes;
        if self.capability_id.split_once(':').map(|(k, _)| k) != Some(self.kind.as_str()) {
            return invalid("evidence kind does not match capability_id");
        }
        if exposed + attempts + effective + validated + harmful > 0 && opportunities == 0 {
            return invalid("observed evidence requires at least one opportunity in its window");
        }
        if exposed > opportunities {
            return invalid("exposures cannot exceed observed opportunities");
        }
        if attempts > opportunities {
            return invalid("invocation attempts cannot exceed observed opportunities");
        }
        if validated > effective {
            return invalid("validated outcomes cannot exceed effective outcomes");
        }
        if self.kind == CapabilityKind::Skill.as_str() {
            if effective > exposed {
                return invalid("skill effective outcomes cannot exceed exposures");
            }
        } else if effective > self.successful_invocations {
            return invalid(
                "agent, MCP, and harness effective outcomes cannot exceed successful invocations",
            );
        }
        if harmful > exposed + attempts {
            return invalid(
                "harmful outcomes cannot exceed attributable exposure or invocation observations",
            );
        }
        if harmful > opportunities {
            return invalid("harmful outcomes cannot exceed observed opportunities");
        }
        if effective + harmful > opportunities {
            return invalid("effective and harmful outcomes cannot exceed the evidence window");
        }
        Ok(())
    }

    pub fn to_json(&self) -> Json {
        let mut pairs: Vec<(&str, Json)> = vec![
            ("capability_id", Json::str(self.capability_id.as_str())),
            (
                "evidence_window_digest",
                Json::str(self.evidence_window_digest.as_str()),
            ),
            ("kind", Json::str(self.kind.as_str())),
            (
                "opportunity_observable",
                Json::Bool(self.opportunity_observable),
            ),
            ("source_digest", Json::str(self.source_digest.as_str())),
        ];
        pairs.extend(self.counts().map(|(k, v)| (k, Json::Int(v))));
        Json::object(pairs)
    }
}

// ---------------------------------------------------------------------------------------------
// BenefitCandidate

/// The authenticated facts the model assesses for one capability.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BenefitCandidate {
    pub capability_id: String,
    pub source_digest: String,
    pub resource_profile_digest: String,
    pub availability: Availability,
    pub expected_task_benefit_ppm: i64,
    pub relevance_ppm: i64,
    pub trust_ppm: i64,
    /// `None` means the cost is unknown, which makes the candidate ineligible.
    pub costs: Option<ResourceCosts>,
    pub evidence: EvidenceSummary,
    pub source_trusted: bool,
    pub security_approved: bool,
    pub permissions_allowed: bool,
    pub credentials_available: bool,
    pub coverage_keys: Vec<String>,
    pub equivalence_key: Option<String>,
    pub complements: Vec<String>,
    pub conflicts: Vec<String>,
}

impl BenefitCandidate {
    /// Checks every field rule of spec/planner.md §3 in its table order.
    pub fn validate(&self) -> Result<(), BenefitError> {
        check_capability_id("capability_id", &self.capability_id)?;
        check_digest("source_digest", &self.source_digest)?;
        check_digest("resource_profile_digest", &self.resource_profile_digest)?;
        for (field, value) in [
            ("expected_task_benefit_ppm", self.expected_task_benefit_ppm),
            ("relevance_ppm", self.relevance_ppm),
            ("trust_ppm", self.trust_ppm),
        ] {
            check_int(field, value, 0, PPM_SCALE)?;
        }
        if let Some(costs) = &self.costs {
            costs.validate()?;
        }
        self.evidence.validate()?;
        if (
            self.evidence.capability_id.as_str(),
            Some(self.evidence.kind.as_str()),
            self.evidence.source_digest.as_str(),
        ) != (
            self.capability_id.as_str(),
            self.capability_id.split_once(':').map(|(k, _)| k),
            self.source_digest.as_str(),
        ) {
            return invalid("evidence must exactly match candidate capability, kind, and source");
        }
        check_token_list("coverage_keys", &self.coverage_keys, false)?;
        if let Some(key) = &self.equivalence_key
            && !is_safe_token(key)
        {
            return invalid("equivalence_key must be a canonical safe token");
        }
        check_token_list("complements", &self.complements, true)?;
        check_token_list("conflicts", &self.conflicts, true)?;
        if contains(&self.conflicts, &self.capability_id) {
            return invalid("a capability cannot conflict with itself");
        }
        if contains(&self.complements, &self.capability_id) {
            return invalid("a capability cannot complement itself");
        }
        if self
            .complements
            .iter()
            .any(|c| contains(&self.conflicts, c))
        {
            return invalid("a peer cannot be both a complement and a conflict");
        }
        Ok(())
    }

    /// The candidate object `C` of the result digest (spec/planner.md §6).
    pub fn to_json(&self) -> Json {
        Json::object([
            ("availability", Json::str(self.availability.as_str())),
            ("capability_id", Json::str(self.capability_id.as_str())),
            ("complements", strs(&self.complements)),
            ("conflicts", strs(&self.conflicts)),
            (
                "costs",
                self.costs.map_or(Json::Null, ResourceCosts::to_json),
            ),
            ("coverage_keys", strs(&self.coverage_keys)),
            (
                "credentials_available",
                Json::Bool(self.credentials_available),
            ),
            (
                "equivalence_key",
                Json::opt_str(self.equivalence_key.as_deref()),
            ),
            ("evidence", self.evidence.to_json()),
            (
                "expected_task_benefit_ppm",
                Json::Int(self.expected_task_benefit_ppm),
            ),
            ("permissions_allowed", Json::Bool(self.permissions_allowed)),
            ("relevance_ppm", Json::Int(self.relevance_ppm)),
            (
                "resource_profile_digest",
                Json::str(self.resource_profile_digest.as_str()),
            ),
            ("security_approved", Json::Bool(self.security_approved)),
            ("source_digest", Json::str(self.source_digest.as_str())),
            ("source_trusted", Json::Bool(self.source_trusted)),
            ("trust_ppm", Json::Int(self.trust_ppm)),
        ])
    }

    fn identity(&self) -> (&str, &str) {
        (&self.capability_id, &self.source_digest)
    }
}

// ---------------------------------------------------------------------------------------------
// NetBenefitPolicy

/// Thresholds, cost weights, bonuses and evidence weights of the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetBenefitPolicy {
    pub calibration_digest: String,
    pub minimum_relevance_ppm: i64,
    pub minimum_trust_ppm: i64,
    pub minimum_marginal_net_benefit_u: i64,
    pub context_token_cost_u: i64,
    pub tool_schema_token_cost_u: i64,
    pub runtime_millisecond_cost_u: i64,
    pub permission_burden_cost_u: i64,
    pub credential_burden_cost_u: i64,
    pub approval_prompt_cost_u: i64,
    pub process_unit_cost_u: i64,
    pub child_agent_unit_cost_u: i64,
    pub new_coverage_bonus_u_per_key: i64,
    pub overlap_penalty_u_per_key: i64,
    pub complementarity_bonus_u: i64,
    pub successful_invocation_evidence_ppm: i64,
    pub effective_outcome_evidence_ppm: i64,
    pub validated_outcome_evidence_ppm: i64,
    pub failed_invocation_evidence_ppm: i64,
    pub harmful_outcome_evidence_ppm: i64,
    pub idle_opportunity_evidence_ppm: i64,
    pub evidence_prior_observations: i64,
}

impl NetBenefitPolicy {
    /// A policy with the two required fields and every other field at its default.
    pub fn new(calibration_digest: &str, minimum_relevance_ppm: i64) -> NetBenefitPolicy {
        NetBenefitPolicy {
            calibration_digest: calibration_digest.to_owned(),
            minimum_relevance_ppm,
            minimum_trust_ppm: 0,
            minimum_marginal_net_benefit_u: 1,
            context_token_cost_u: 0,
            tool_schema_token_cost_u: 0,
            runtime_millisecond_cost_u: 0,
            permission_burden_cost_u: 0,
            credential_burden_cost_u: 0,
            approval_prompt_cost_u: 0,
            process_unit_cost_u: 0,
            child_agent_unit_cost_u: 0,
            new_coverage_bonus_u_per_key: 0,
            overlap_penalty_u_per_key: 0,
            complementarity_bonus_u: 0,
            successful_invocation_evidence_ppm: 100_000,
            effective_outcome_evidence_ppm: 500_000,
            validated_outcome_evidence_ppm: 1_000_000,
            failed_invocation_evidence_ppm: -250_000,
            harmful_outcome_evidence_ppm: -1_000_000,
            idle_opportunity_evidence_ppm: -100_000,
            evidence_prior_observations: 1,
        }
    }

    /// Every integer field with its name and inclusive range, in the reference's table order.
    fn integer_fields(&self) -> [(&'static str, i64, i64, i64); 21] {
        [
            (
                "minimum_relevance_ppm",
                self.minimum_relevance_ppm,
                0,
                PPM_SCALE,
            ),
            ("minimum_trust_ppm", self.minimum_trust_ppm, 0, PPM_SCALE),
            (
                "minimum_marginal_net_benefit_u",
                self.minimum_marginal_net_benefit_u,
                1,
                UTILITY_MAX_U,
            ),
            (
                "context_token_cost_u",
                self.context_token_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "tool_schema_token_cost_u",
                self.tool_schema_token_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "runtime_millisecond_cost_u",
                self.runtime_millisecond_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "permission_burden_cost_u",
                self.permission_burden_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "credential_burden_cost_u",
                self.credential_burden_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "approval_prompt_cost_u",
                self.approval_prompt_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "process_unit_cost_u",
                self.process_unit_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "child_agent_unit_cost_u",
                self.child_agent_unit_cost_u,
                0,
                PPM_SCALE,
            ),
            (
                "new_coverage_bonus_u_per_key",
                self.new_coverage_bonus_u_per_key,
                0,
                PPM_SCALE,
            ),
            (
                "overlap_penalty_u_per_key",
                self.overlap_penalty_u_per_key,
                0,
                PPM_SCALE,
            ),
            (
                "complementarity_bonus_u",
                self.complementarity_bonus_u,
                0,
                PPM_SCALE,
            ),
            (
                "successful_invocation_evidence_ppm",
                self.successful_invocation_evidence_ppm,
                0,
                PPM_SCALE,
            ),
            (
                "effective_outcome_evidence_ppm",
                self.effective_outcome_evidence_ppm,
                0,
                PPM_SCALE,
            ),
            (
                "validated_outcome_evidence_ppm",
                self.validated_outcome_evidence_ppm,
                0,
                PPM_SCALE,
            ),
            (
                "failed_invocation_evidence_ppm",
                self.failed_invocation_evidence_ppm,
                -PPM_SCALE,
                0,
            ),
            (
                "harmful_outcome_evidence_ppm",
                self.harmful_outcome_evidence_ppm,
                -PPM_SCALE,
                0,
            ),
            (
                "idle_opportunity_evidence_ppm",
                self.idle_opportunity_evidence_ppm,
                -PPM_SCALE,
                0,
            ),
            (
                "evidence_prior_observations",
                self.evidence_prior_observations,
                1,
                QUANTITY_MAX_UNITS,
            ),
        ]
    }

    pub fn validate(&self) -> Result<(), BenefitError> {
        check_digest("calibration_digest", &self.calibration_digest)?;
        for (field, value, min, max) in self.integer_fields() {
            check_int(field, value, min, max)?;
        }
        if !(self.successful_invocation_evidence_ppm < self.effective_outcome_evidence_ppm
            && self.effective_outcome_evidence_ppm < self.validated_outcome_evidence_ppm)
        {
            return invalid(
                "positive evidence weights must order success below effect below validation",
            );
        }
        if !(self.harmful_outcome_evidence_ppm < self.failed_invocation_evidence_ppm
            && self.failed_invocation_evidence_ppm <= 0)
        {
            return invalid("negative evidence weights must order harm below invocation failure");
        }
        Ok(())
    }

    /// The object the policy digest covers: every field by name plus the two schema ids.
    pub fn to_json(&self) -> Json {
        let mut pairs: Vec<(&str, Json)> = self
            .integer_fields()
            .iter()
            .map(|(k, v, _, _)| (*k, Json::Int(*v)))
            .collect();
        pairs.push((
            "calibration_digest",
            Json::str(self.calibration_digest.as_str()),
        ));
        pairs.push(("policy_schema_id", Json::str(BENEFIT_POLICY_SCHEMA_ID)));
        pairs.push((
            "selection_algorithm_id",
            Json::str(BENEFIT_SELECTION_ALGORITHM_ID),
        ));
        Json::object(pairs)
    }

    /// `H(CJA(policy object))`.
    pub fn policy_digest(&self) -> String {
        cja_digest(&self.to_json())
    }

    /// Individual assessment of one candidate (spec/planner.md §4).
    pub fn assess(
        &self,
        candidate: &BenefitCandidate,
    ) -> Result<CandidateAssessment, BenefitError> {
        self.validate()?;
        candidate.validate()?;
        self.assess_valid(candidate)
    }

    fn assess_valid(&self, c: &BenefitCandidate) -> Result<CandidateAssessment, BenefitError> {
        let mut reasons: Vec<&'static str> = Vec::new();
        if c.availability == Availability::Unsupported {
            reasons.push("host-unsupported");
        }
        if !c.source_trusted {
            reasons.push("source-untrusted");
        }
        if !c.security_approved {
            reasons.push("security-blocked");
        }
        if !c.permissions_allowed {
            reasons.push("permission-blocked");
        }
        if !c.credentials_available {
            reasons.push("credential-unavailable");
        }
        if c.relevance_ppm < self.minimum_relevance_ppm {
            reasons.push("relevance-below-threshold");
        }
        if c.trust_ppm < self.minimum_trust_ppm {
            reasons.push("trust-below-threshold");
        }
        let Some(costs) = c.costs.filter(|_| reasons.is_empty()) else {
            if c.costs.is_none() {
                reasons.push("resource-cost-unknown");
            }
            reasons.sort_unstable();
            return Ok(CandidateAssessment {
                candidate: c.clone(),
                tier: Tier::Ineligible,
                reason_codes: reasons.into_iter().map(str::to_owned).collect(),
                evidence_adjustment_ppm: 0,
                expected_benefit_u: 0,
                expected_cost_u: 0,
                individual_net_benefit_u: 0,
            });
        };
        let adjustment = self.evidence_adjustment_ppm(&c.evidence)?;
        let effect = (c.expected_task_benefit_ppm + adjustment).clamp(0, PPM_SCALE);
        let benefit = ppm_product(ppm_product(c.relevance_ppm, effect), c.trust_ppm);
        let cost = self.expected_cost_u(&costs)?;
        let net = checked_utility(
            "individual_net_benefit_u",
            i128::from(benefit) - i128::from(cost),
        )?;
        reasons.push("net-benefit-assessed");
        if c.availability == Availability::Advisory {
            reasons.push("advisory-only");
        }
        if adjustment > 0 {
            reasons.push("positive-outcome-evidence");
        } else if adjustment < 0 {
            reasons.push("negative-outcome-evidence");
        }
        reasons.sort_unstable();
        Ok(CandidateAssessment {
            candidate: c.clone(),
            tier: match c.availability {
                Availability::Executable => Tier::Executable,
                Availability::Advisory => Tier::Advisory,
                Availability::Unsupported => Tier::Ineligible,
            },
            reason_codes: reasons.into_iter().map(str::to_owned).collect(),
            evidence_adjustment_ppm: adjustment,
            expected_benefit_u: benefit,
            expected_cost_u: cost,
            individual_net_benefit_u: net,
        })
    }

    /// Evidence adjustment: weighted outcomes over (prior + observations), rounded symmetrically
    /// and clamped to ±1,000,000 ppm.
    pub fn evidence_adjustment_ppm(&self, e: &EvidenceSummary) -> Result<i64, BenefitError> {
        let attempts = i128::from(e.successful_invocations) + i128::from(e.failed_invocations);
        let idle = if e.opportunity_observable {
            (i128::from(e.opportunities_observed) - attempts).max(0)
        } else {
            0
        };
        let weighted = i128::from(e.successful_invocations)
            * i128::from(self.successful_invocation_evidence_ppm)
            + i128::from(e.failed_invocations) * i128::from(self.failed_invocation_evidence_ppm)
            + i128::from(e.effective_outcomes) * i128::from(self.effective_outcome_evidence_ppm)
            + i128::from(e.validated_outcomes) * i128::from(self.validated_outcome_evidence_ppm)
            + i128::from(e.harmful_outcomes) * i128::from(self.harmful_outcome_evidence_ppm)
            + idle * i128::from(self.idle_opportunity_evidence_ppm);
        // Exposures carry no weight and are not observations.
        let observations = attempts
            + i128::from(e.effective_outcomes)
            + i128::from(e.validated_outcomes)
            + i128::from(e.harmful_outcomes)
            + idle;
        let denominator = i128::from(self.evidence_prior_observations) + observations;
        let adjustment = signed_rounded_div(saturate(weighted), saturate(denominator))?;
        Ok(adjustment.clamp(-PPM_SCALE, PPM_SCALE))
    }

    /// `Σ quantity × weight`, at most 2^63 − 1.
    pub fn expected_cost_u(&self, costs: &ResourceCosts) -> Result<i64, BenefitError> {
        let weights = [
            self.context_token_cost_u,
            self.tool_schema_token_cost_u,
            self.runtime_millisecond_cost_u,
            self.permission_burden_cost_u,
            self.credential_burden_cost_u,
            self.approval_prompt_cost_u,
            self.process_unit_cost_u,
            self.child_agent_unit_cost_u,
        ];
        let total: i128 = costs
            .fields()
            .iter()
            .zip(weights)
            .map(|((_, q), w)| i128::from(*q) * i128::from(w))
            .sum();
        if !(0..=i128::from(UTILITY_MAX_U)).contains(&total) {
            return invalid(format!(
                "expected_cost_u must be an integer from 0 through {UTILITY_MAX_U}"
            ));
        }
        Ok(saturate(total))
    }

    /// Chooses at most `requested_limit` (0…5) candidates (spec/planner.md §5).
    pub fn select(
        &self,
        candidates: &[BenefitCandidate],
        requested_limit: usize,
    ) -> Result<BenefitSelectionResult, BenefitError> {
        self.validate()?;
        if candidates.len() > CANDIDATE_POOL_MAX_ITEMS {
            return invalid("candidate pool exceeds its bounded limit");
        }
        if requested_limit > SELECTED_MAX_ITEMS {
            return invalid(format!(
                "requested_limit must be an integer from 0 through {SELECTED_MAX_ITEMS}"
            ));
        }
        for c in candidates {
            c.validate()?;
        }
        let mut ids: Vec<&str> = candidates
            .iter()
            .map(|c| c.capability_id.as_str())
            .collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return invalid("candidate pool contains duplicate capability identities");
        }
        let by_id: BTreeMap<&str, &BenefitCandidate> = candidates
            .iter()
            .map(|c| (c.capability_id.as_str(), c))
            .collect();
        for c in candidates {
            for peer_id in &c.complements {
                if let Some(peer) = by_id.get(peer_id.as_str())
                    && (contains(&c.conflicts, peer_id)
                        || contains(&peer.conflicts, &c.capability_id))
                {
                    return invalid(
                        "candidate pool contains a cross-record complement/conflict contradiction",
                    );
                }
            }
        }
        let mut assessments = candidates
            .iter()
            .map(|c| self.assess_valid(c))
            .collect::<Result<Vec<_>, _>>()?;
        assessments.sort_by(|a, b| a.candidate.identity().cmp(&b.candidate.identity()));
        let policy_digest = self.policy_digest();
        let finish = |selections, code, evaluations| {
            BenefitSelectionResult::seal(
                selections,
                assessments.clone(),
                code,
                policy_digest.clone(),
                requested_limit,
                evaluations,
            )
        };
        if requested_limit == 0 {
            return Ok(finish(Vec::new(), Some(AbstentionCode::LimitZero), 0));
        }
        if assessments.iter().all(|a| a.tier == Tier::Ineligible) {
            return Ok(finish(
                Vec::new(),
                Some(AbstentionCode::NoFeasibleCapability),
                0,
            ));
        }
        let search = Search::new(self, &assessments);
        let pool = |tier| -> Vec<usize> {
            (0..assessments.len())
                .filter(|&i| assessments[i].tier == tier)
                .collect()
        };
        let (executables, exec_evaluations) =
            search.tier_search(&pool(Tier::Executable), &[], requested_limit)?;
        let (chosen, advisory_evaluations) =
            search.tier_search(&pool(Tier::Advisory), &executables, requested_limit)?;
        let evaluations = exec_evaluations.saturating_add(advisory_evaluations);
        // Each tier is bounded on its own; the result's field is bounded too, so the sum is
        // held to the same limit rather than producing a result that fails validation.
        if evaluations > SEARCH_MAX_EVALUATIONS {
            return Err(BenefitError::SearchBound);
        }
        let mut ordered = chosen.clone();
        ordered.sort_by_key(|&i| (assessments[i].tier, i));
        let mut selections = Vec::with_capacity(ordered.len());
        for &i in &ordered {
            let a = &assessments[i];
            let marginal = search.leave_one_out(i, &chosen)?;
            check_int("marginal_net_benefit_u", marginal, 1, UTILITY_MAX_U)?;
            selections.push(BenefitSelection {
                capability_id: a.candidate.capability_id.clone(),
                source_digest: a.candidate.source_digest.clone(),
                tier: a.tier,
                individual_net_benefit_u: a.individual_net_benefit_u,
                marginal_net_benefit_u: marginal,
            });
        }
        let code = selections
            .is_empty()
            .then_some(AbstentionCode::BelowNetBenefit);
        Ok(finish(selections, code, evaluations))
    }

    /// Re-validates a result against this policy: structure, policy digest, and an exact
    /// re-run of [`NetBenefitPolicy::select`] over its assessed candidates.
    pub fn validate_result(&self, result: &BenefitSelectionResult) -> Result<(), BenefitError> {
        result.validate()?;
        if result.policy_digest != self.policy_digest() {
            return invalid("result policy digest does not match this policy");
        }
        let candidates: Vec<BenefitCandidate> = result
            .assessments
            .iter()
            .map(|a| a.candidate.clone())
            .collect();
        let limit = usize::try_from(result.requested_limit).unwrap_or(usize::MAX);
        match self.select(&candidates, limit) {
            Ok(again) if again == *result => Ok(()),
            _ => invalid("result does not match exact policy revalidation"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Assessments and selections

/// The individual assessment of one candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CandidateAssessment {
    pub candidate: BenefitCandidate,
    pub tier: Tier,
    pub reason_codes: Vec<String>,
    pub evidence_adjustment_ppm: i64,
    pub expected_benefit_u: i64,
    pub expected_cost_u: i64,
    pub individual_net_benefit_u: i64,
}

impl CandidateAssessment {
    pub fn to_json(&self) -> Json {
        Json::object([
            ("candidate", self.candidate.to_json()),
            (
                "evidence_adjustment_ppm",
                Json::Int(self.evidence_adjustment_ppm),
            ),
            ("expected_benefit_u", Json::Int(self.expected_benefit_u)),
            ("expected_cost_u", Json::Int(self.expected_cost_u)),
            (
                "individual_net_benefit_u",
                Json::Int(self.individual_net_benefit_u),
            ),
            ("reason_codes", strs(&self.reason_codes)),
            ("tier", Json::str(self.tier.as_str())),
        ])
    }

    fn validate(&self) -> Result<(), BenefitError> {
        self.candidate.validate()?;
        check_int(
            "evidence_adjustment_ppm",
            self.evidence_adjustment_ppm,
            -PPM_SCALE,
            PPM_SCALE,
        )?;
        check_int(
            "expected_benefit_u",
            self.expected_benefit_u,
            0,
            UTILITY_MAX_U,
        )?;
        check_int("expected_cost_u", self.expected_cost_u, 0, UTILITY_MAX_U)?;
        checked_utility(
            "individual_net_benefit_u",
            i128::from(self.individual_net_benefit_u),
        )?;
        Ok(())
    }
}

/// One chosen capability with its tier and utilities.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BenefitSelection {
    pub capability_id: String,
    pub source_digest: String,
    /// Executable or advisory, never ineligible.
    pub tier: Tier,
    pub individual_net_benefit_u: i64,
    /// The capability's leave-one-out utility within the final set, 1…2^63 − 1.
    pub marginal_net_benefit_u: i64,
}

impl BenefitSelection {
    pub fn to_json(&self) -> Json {
        Json::object([
            ("capability_id", Json::str(self.capability_id.as_str())),
            (
                "individual_net_benefit_u",
                Json::Int(self.individual_net_benefit_u),
            ),
            (
                "marginal_net_benefit_u",
                Json::Int(self.marginal_net_benefit_u),
            ),
            ("source_digest", Json::str(self.source_digest.as_str())),
            ("tier", Json::str(self.tier.as_str())),
        ])
    }

    fn validate(&self) -> Result<(), BenefitError> {
        check_capability_id("capability_id", &self.capability_id)?;
        check_digest("source_digest", &self.source_digest)?;
        if self.tier == Tier::Ineligible {
            return invalid("selection tier must be executable or advisory");
        }
        checked_utility(
            "individual_net_benefit_u",
            i128::from(self.individual_net_benefit_u),
        )?;
        check_int(
            "marginal_net_benefit_u",
            self.marginal_net_benefit_u,
            1,
            UTILITY_MAX_U,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// BenefitSelectionResult

/// The full, auditable outcome of one selection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BenefitSelectionResult {
    pub selections: Vec<BenefitSelection>,
    /// Every candidate's assessment in canonical `(capability_id, source_digest)` order.
    pub assessments: Vec<CandidateAssessment>,
    pub abstention_code: Option<AbstentionCode>,
    pub policy_digest: String,
    pub requested_limit: i64,
    pub candidate_pool_count: i64,
    pub search_evaluation_count: i64,
    pub result_digest: String,
}

impl BenefitSelectionResult {
    fn seal(
        selections: Vec<BenefitSelection>,
        assessments: Vec<CandidateAssessment>,
        abstention_code: Option<AbstentionCode>,
        policy_digest: String,
        requested_limit: usize,
        evaluations: u64,
    ) -> BenefitSelectionResult {
        let mut result = BenefitSelectionResult {
            candidate_pool_count: i64::try_from(assessments.len()).unwrap_or(i64::MAX),
            selections,
            assessments,
            abstention_code,
            policy_digest,
            requested_limit: i64::try_from(requested_limit).unwrap_or(i64::MAX),
            search_evaluation_count: i64::try_from(evaluations).unwrap_or(i64::MAX),
            result_digest: String::new(),
        };
        result.result_digest = result.compute_digest();
        result
    }

    /// The object the result digest covers (every field but `result_digest`, plus `schema`).
    pub fn digest_json(&self) -> Json {
        Json::object([
            (
                "abstention_code",
                Json::opt_str(self.abstention_code.map(AbstentionCode::as_str)),
            ),
            (
                "assessments",
                Json::Arr(
                    self.assessments
                        .iter()
                        .map(CandidateAssessment::to_json)
                        .collect(),
                ),
            ),
            ("candidate_pool_count", Json::Int(self.candidate_pool_count)),
            ("policy_digest", Json::str(self.policy_digest.as_str())),
            ("requested_limit", Json::Int(self.requested_limit)),
            ("schema", Json::str(BENEFIT_RESULT_SCHEMA_ID)),
            (
                "search_evaluation_count",
                Json::Int(self.search_evaluation_count),
            ),
            (
                "selections",
                Json::Arr(
                    self.selections
                        .iter()
                        .map(BenefitSelection::to_json)
                        .collect(),
                ),
            ),
        ])
    }

    /// `H(CJA(digest_json))`.
    pub fn compute_digest(&self) -> String {
        cja_digest(&self.digest_json())
    }

    /// The result object with its `result_digest`: what the audit sink stores.
    pub fn to_json(&self) -> Json {
        let mut value = self.digest_json();
        if let Json::Obj(m) = &mut value {
            m.insert(
                "result_digest".into(),
                Json::str(self.result_digest.as_str()),
            );
        }
        value
    }

    /// The canonical ASCII text of [`BenefitSelectionResult::to_json`], bounded to 32 MiB.
    pub fn to_json_text(&self) -> Result<String, BenefitError> {
        let text = self.to_json().to_cja();
        if text.len() > BENEFIT_RESULT_JSON_MAX_BYTES {
            return invalid("benefit result JSON exceeds its bounded byte limit");
        }
        Ok(text)
    }

    /// The structural rules of spec/planner.md §6, in its order.
    pub fn validate(&self) -> Result<(), BenefitError> {
        if self.selections.len() > SELECTED_MAX_ITEMS {
            return invalid("selection cannot contain more than five capabilities");
        }
        for s in &self.selections {
            s.validate()?;
        }
        let key = |s: &BenefitSelection| (s.tier, s.capability_id.clone(), s.source_digest.clone());
        if self.selections.windows(2).any(|w| key(&w[0]) > key(&w[1])) {
            return invalid("selections must use canonical tier and identity order");
        }
        let mut ids: Vec<&str> = self
            .selections
            .iter()
            .map(|s| s.capability_id.as_str())
            .collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return invalid("selection contains duplicate capability identities");
        }
        for a in &self.assessments {
            a.validate()?;
        }
        if self
            .assessments
            .windows(2)
            .any(|w| w[0].candidate.identity() > w[1].candidate.identity())
        {
            return invalid("assessments must use canonical identity order");
        }
        let mut ids: Vec<&str> = self
            .assessments
            .iter()
            .map(|a| a.candidate.capability_id.as_str())
            .collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return invalid("assessments contain duplicate candidate identities");
        }
        for s in &self.selections {
            let matched = self.assessments.iter().any(|a| {
                a.candidate.identity() == (s.capability_id.as_str(), s.source_digest.as_str())
                    && a.tier == s.tier
                    && a.individual_net_benefit_u == s.individual_net_benefit_u
            });
            if !matched {
                return invalid("selection does not exactly project a matching assessment");
            }
        }
        let max_limit = i64::try_from(SELECTED_MAX_ITEMS).unwrap_or(i64::MAX);
        check_int("requested_limit", self.requested_limit, 0, max_limit)?;
        let selected = i64::try_from(self.selections.len()).unwrap_or(i64::MAX);
        if selected > self.requested_limit {
            return invalid("selection count cannot exceed requested_limit");
        }
        let max_pool = i64::try_from(CANDIDATE_POOL_MAX_ITEMS).unwrap_or(i64::MAX);
        check_int(
            "candidate_pool_count",
            self.candidate_pool_count,
            0,
            max_pool,
        )?;
        if usize::try_from(self.candidate_pool_count).ok() != Some(self.assessments.len()) {
            return invalid("candidate_pool_count must equal the canonical assessment count");
        }
        let max_evaluations = i64::try_from(SEARCH_MAX_EVALUATIONS).unwrap_or(i64::MAX);
        check_int(
            "search_evaluation_count",
            self.search_evaluation_count,
            0,
            max_evaluations,
        )?;
        let expected = if !self.selections.is_empty() {
            None
        } else if self.requested_limit == 0 {
            Some(AbstentionCode::LimitZero)
        } else if self.assessments.iter().all(|a| a.tier == Tier::Ineligible) {
            Some(AbstentionCode::NoFeasibleCapability)
        } else {
            Some(AbstentionCode::BelowNetBenefit)
        };
        if self.abstention_code != expected {
            return invalid("abstention_code does not match selection and feasibility semantics");
        }
        if self.requested_limit == 0 && !self.selections.is_empty() {
            return invalid("limit-zero result cannot contain selections");
        }
        if matches!(
            self.abstention_code,
            Some(AbstentionCode::LimitZero | AbstentionCode::NoFeasibleCapability)
        ) && self.search_evaluation_count != 0
        {
            return invalid("non-search abstention must have zero search evaluations");
        }
        check_digest("policy_digest", &self.policy_digest)?;
        if self.result_digest != self.compute_digest() {
            return invalid("result_digest does not match canonical result fields");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The bounded subset search

/// Ranking of an admissible candidate: higher marginal, then higher individual net, then higher
/// relevance (identity order is the pool's order).
type AdmissionRank = (Reverse<i64>, Reverse<i64>, Reverse<i64>);
/// Choice of a prune removal: highest resulting utility, then the smallest resulting id list.
type PruneKey<'k> = (Reverse<i64>, Vec<&'k str>);

/// Set utilities over the canonically sorted assessments. A set is a sorted list of indices into
/// the assessments, so index order is canonical `(capability_id, source_digest)` order.
struct Search<'a> {
    policy: &'a NetBenefitPolicy,
    items: &'a [CandidateAssessment],
}

impl<'a> Search<'a> {
    fn new(policy: &'a NetBenefitPolicy, items: &'a [CandidateAssessment]) -> Search<'a> {
        Search { policy, items }
    }

    fn candidate(&self, i: usize) -> Option<&'a BenefitCandidate> {
        self.items.get(i).map(|a| &a.candidate)
    }

    fn net(&self, i: usize) -> i128 {
        self.items
            .get(i)
            .map_or(0, |a| i128::from(a.individual_net_benefit_u))
    }

    /// Mutual: each lists the other in `complements`.
    fn complementary(&self, a: usize, b: usize) -> bool {
        match (self.candidate(a), self.candidate(b)) {
            (Some(x), Some(y)) => {
                contains(&x.complements, &y.capability_id)
                    && contains(&y.complements, &x.capability_id)
            }
            _ => false,
        }
    }

    /// Either lists the other in `conflicts`.
    fn conflict(&self, a: usize, b: usize) -> bool {
        match (self.candidate(a), self.candidate(b)) {
            (Some(x), Some(y)) => {
                contains(&x.conflicts, &y.capability_id) || contains(&y.conflicts, &x.capability_id)
            }
            _ => false,
        }
    }

    fn can_add(&self, x: usize, set: &[usize]) -> bool {
        let key = self.candidate(x).and_then(|c| c.equivalence_key.as_deref());
        set.iter().all(|&m| {
            !self.conflict(x, m)
                && (key.is_none()
                    || self.candidate(m).and_then(|c| c.equivalence_key.as_deref()) != key
                    || self.complementary(x, m))
        })
    }

    /// How many members of `set` cover each coverage key.
    fn coverage(&self, set: &[usize]) -> BTreeMap<&'a str, i128> {
        let mut counts = BTreeMap::new();
        for &m in set {
            for key in self.candidate(m).map_or(&[][..], |c| &c.coverage_keys[..]) {
                *counts.entry(key.as_str()).or_insert(0) += 1;
            }
        }
        counts
    }

    fn utility(&self, set: &[usize]) -> Result<i64, BenefitError> {
        let p = self.policy;
        let coverage = self.coverage(set);
        let distinct = i128::try_from(coverage.len()).unwrap_or(i128::MAX);
        let overlaps: i128 = coverage.values().map(|n| n - 1).sum();
        let mut pairs: i128 = 0;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                if self.complementary(a, b) {
                    pairs += 1;
                }
            }
        }
        let total = set.iter().map(|&m| self.net(m)).sum::<i128>()
            + distinct * i128::from(p.new_coverage_bonus_u_per_key)
            - overlaps * i128::from(p.overlap_penalty_u_per_key)
            + pairs * i128::from(p.complementarity_bonus_u);
        checked_utility("set_utility_u", total)
    }

    fn without(set: &[usize], x: usize) -> Vec<usize> {
        set.iter().copied().filter(|&m| m != x).collect()
    }

    fn with(set: &[usize], x: usize) -> Vec<usize> {
        let mut out = set.to_vec();
        if let Err(pos) = out.binary_search(&x) {
            out.insert(pos, x);
        }
        out
    }

    /// `U(S) − U(S without x)`.
    fn leave_one_out(&self, x: usize, set: &[usize]) -> Result<i64, BenefitError> {
        let whole = self.utility(set)?;
        let rest = self.utility(&Self::without(set, x))?;
        checked_utility(
            "marginal_net_benefit_u",
            i128::from(whole) - i128::from(rest),
        )
    }

    fn meets_threshold(&self, set: &[usize]) -> Result<bool, BenefitError> {
        for &m in set {
            if self.leave_one_out(m, set)? < self.policy.minimum_marginal_net_benefit_u {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The marginal utility of adding `x` to `set`, or `None` when `x` cannot be added.
    fn marginal(
        &self,
        x: usize,
        set: &[usize],
        coverage: &BTreeMap<&str, i128>,
    ) -> Result<Option<i64>, BenefitError> {
        if !self.can_add(x, set) {
            return Ok(None);
        }
        let p = self.policy;
        let keys = self.candidate(x).map_or(&[][..], |c| &c.coverage_keys[..]);
        let covered = keys
            .iter()
            .filter(|k| coverage.contains_key(k.as_str()))
            .count();
        let fresh = keys.len() - covered;
        let comps = set.iter().filter(|&&m| self.complementary(x, m)).count();
        let count = |n: usize| i128::try_from(n).unwrap_or(i128::MAX);
        let total = self.net(x) + count(fresh) * i128::from(p.new_coverage_bonus_u_per_key)
            - count(covered) * i128::from(p.overlap_penalty_u_per_key)
            + count(comps) * i128::from(p.complementarity_bonus_u);
        checked_utility("marginal_net_benefit_u", total).map(Some)
    }

    /// The best admissible candidate of `pool` for `set`, and how many candidates were
    /// evaluated (every pool member outside the set and the exclusions counts once).
    fn best_direct_admission(
        &self,
        set: &[usize],
        pool: &[usize],
        excluded: &[usize],
    ) -> Result<(Option<usize>, u64), BenefitError> {
        let p = self.policy;
        let minimum = i128::from(p.minimum_marginal_net_benefit_u);
        let coverage = self.coverage(set);
        // Members' current leave-one-out values do not depend on the candidate: compute once.
        let member_loo = set
            .iter()
            .map(|&m| self.leave_one_out(m, set).map(|v| (m, i128::from(v))))
            .collect::<Result<Vec<_>, _>>()?;
        let shared_penalty =
            i128::from(p.new_coverage_bonus_u_per_key) + i128::from(p.overlap_penalty_u_per_key);
        let mut evaluations = 0u64;
        let mut best: Option<(AdmissionRank, usize)> = None;
        for &x in pool {
            if set.contains(&x) || excluded.contains(&x) {
                continue;
            }
            evaluations += 1;
            let Some(m) = self.marginal(x, set, &coverage)? else {
                continue;
            };
            if i128::from(m) < minimum {
                continue;
            }
            let x_keys = self.candidate(x).map_or(&[][..], |c| &c.coverage_keys[..]);
            let keeps_members = member_loo.iter().all(|&(member, loo)| {
                let member_keys = self
                    .candidate(member)
                    .map_or(&[][..], |c| &c.coverage_keys[..]);
                let shared_once = x_keys
                    .iter()
                    .filter(|k| {
                        contains(member_keys, k) && coverage.get(k.as_str()).copied() == Some(1)
                    })
                    .count();
                let bonus = if self.complementary(x, member) {
                    i128::from(p.complementarity_bonus_u)
                } else {
                    0
                };
                loo + bonus - i128::try_from(shared_once).unwrap_or(i128::MAX) * shared_penalty
                    >= minimum
            });
            if !keeps_members {
                continue;
            }
            let relevance = self.candidate(x).map_or(0, |c| c.relevance_ppm);
            let net = self.items.get(x).map_or(0, |a| a.individual_net_benefit_u);
            let rank = (Reverse(m), Reverse(net), Reverse(relevance));
            // Pool order is canonical identity order, so a strict improvement keeps the
            // (capability_id, source_digest) tie-break.
            if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                best = Some((rank, x));
            }
        }
        Ok((best.map(|(_, x)| x), evaluations))
    }

    fn greedy_fill(
        &self,
        base: &[usize],
        pool: &[usize],
        limit: usize,
        excluded: &[usize],
    ) -> Result<(Vec<usize>, u64), BenefitError> {
        let mut set = base.to_vec();
        set.sort_unstable();
        let mut evaluations = 0u64;
        while set.len() < limit {
            let (best, n) = self.best_direct_admission(&set, pool, excluded)?;
            evaluations = evaluations.saturating_add(n);
            match best {
                Some(x) => set = Self::with(&set, x),
                None => break,
            }
        }
        Ok((set, evaluations))
    }

    fn id_list(&self, set: &[usize]) -> Vec<&'a str> {
        set.iter()
            .filter_map(|&i| self.candidate(i).map(|c| c.capability_id.as_str()))
            .collect()
    }

    fn source_list(&self, set: &[usize]) -> Vec<&'a str> {
        set.iter()
            .filter_map(|&i| self.candidate(i).map(|c| c.source_digest.as_str()))
            .collect()
    }

    /// Removes non-frozen members until every member meets the marginal threshold.
    fn prune(&self, set: &[usize], frozen: &[usize]) -> Result<Vec<usize>, BenefitError> {
        let mut current = set.to_vec();
        while !self.meets_threshold(&current)? {
            if current.iter().all(|m| frozen.contains(m)) {
                let mut f = frozen.to_vec();
                f.sort_unstable();
                return Ok(f);
            }
            let mut best: Option<(PruneKey<'a>, Vec<usize>)> = None;
            for &m in current.iter().filter(|m| !frozen.contains(m)) {
                let rest = Self::without(&current, m);
                let key = (Reverse(self.utility(&rest)?), self.id_list(&rest));
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, rest));
                }
            }
            match best {
                Some((_, rest)) => current = rest,
                None => break,
            }
        }
        Ok(current)
    }

    /// Greedy fill from `frozen`, then exchange steps while a neighbour strictly improves U.
    fn tier_search(
        &self,
        pool: &[usize],
        frozen: &[usize],
        limit: usize,
    ) -> Result<(Vec<usize>, u64), BenefitError> {
        let mut frozen = frozen.to_vec();
        frozen.sort_unstable();
        if frozen.len() >= limit {
            return Ok((frozen, 0));
        }
        let (mut current, mut total) = self.greedy_fill(&frozen, pool, limit, &[])?;
        loop {
            let movable: Vec<usize> = current
                .iter()
                .copied()
                .filter(|m| !frozen.contains(m))
                .collect();
            let current_u = self.utility(&current)?;
            type Key<'k> = (Reverse<i64>, usize, Vec<&'k str>, Vec<&'k str>);
            let mut best: Option<(Key<'a>, Vec<usize>)> = None;
            for size in 1..=movable.len() {
                for removed in combinations(&movable, size) {
                    let base: Vec<usize> = current
                        .iter()
                        .copied()
                        .filter(|m| !removed.contains(m))
                        .collect();
                    let base = self.prune(&base, &frozen)?;
                    let (neighbour, n) = self.greedy_fill(&base, pool, limit, &removed)?;
                    total = total.saturating_add(n);
                    if total > SEARCH_MAX_EVALUATIONS {
                        return Err(BenefitError::SearchBound);
                    }
                    let u = self.utility(&neighbour)?;
                    if u > current_u && self.meets_threshold(&neighbour)? {
                        let key = (
                            Reverse(u),
                            neighbour.len(),
                            self.id_list(&neighbour),
                            self.source_list(&neighbour),
                        );
                        if best.as_ref().is_none_or(|(k, _)| key < *k) {
                            best = Some((key, neighbour));
                        }
                    }
                }
            }
            match best {
                Some((_, next)) => current = next,
                None => break,
            }
        }
        if !self.meets_threshold(&current)? {
            return invalid("search terminated with a below-threshold retained capability");
        }
        Ok((current, total))
    }
}

/// Every `size`-element combination of `items`, in positional (lexicographic index) order.
fn combinations(items: &[usize], size: usize) -> Vec<Vec<usize>> {
    let n = items.len();
    if size == 0 || size > n {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..size).collect();
    loop {
        out.push(idx.iter().filter_map(|&i| items.get(i).copied()).collect());
        // Find the rightmost index that can still advance.
        let mut i = size;
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            if idx[i] != i + n - size {
                break;
            }
        }
        idx[i] += 1;
        for j in i + 1..size {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests;
