//! Schema-v3 planning values (spec/planner.md §7): planning authorities,
//! the identity/authority consistency rule, the 13-key plan row, the benefit audit reference,
//! the plan with its ready / abstained / degraded rules, the `ctx.decision.capability-plan`
//! version 3 decision surrogate, and the [`AuthenticatedNetBenefitPlanner`].
//!
//! The emitted JSON is exactly what ctx-model's plan validators check: the reducer re-checks the
//! decision value with `validate_capability_plan_value` before it commits a plan, so a value
//! built here is also run through that validator before it is handed out.

use std::collections::BTreeSet;

use ctx_model::{
    BENEFIT_POLICY_SCHEMA_ID, BENEFIT_RESULT_SCHEMA_ID, BENEFIT_SELECTION_ALGORITHM_ID,
    CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3, CapabilityKind, DEGRADATION_CODES,
    INSTALL_DESCRIPTOR_SCHEMA_V2, Json, MATCHING_SIGNALS_MAX_ITEMS, PRESENTATION_ACTIONABILITY,
    REASON_CODES_MAX_ITEMS, ReplayError, SCORE_MAX_PPM, Surrogate, SurrogateRole, cj_digest,
    descriptor_matches_result_material, is_capability_name, is_safe_token, is_sha,
    validate_authorized_material, validate_catalog_identity, validate_install_plan_descriptor,
    validate_material_identity, validate_surrogate,
};

use super::benefit::{
    Availability, BenefitCandidate, BenefitError, BenefitSelection, BenefitSelectionResult,
    CANDIDATE_POOL_MAX_ITEMS, NetBenefitPolicy, SEARCH_MAX_EVALUATIONS, SELECTED_MAX_ITEMS, Tier,
};

/// Why a planning value was refused. Display is the reference's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanningError {
    /// A value breaks a planning rule (the reference's `ValueError`).
    #[error("{0}")]
    Invalid(String),
    /// The net-benefit model refused the pool or its own result.
    #[error("net-benefit policy rejected the authenticated candidate pool")]
    PolicyRejected {
        #[source]
        source: BenefitError,
    },
    /// The audit sink acknowledged a digest other than the result's.
    #[error("audit store acknowledged a different benefit result digest")]
    AuditDigestMismatch,
    /// The audit sink failed closed (anything but unavailability).
    #[error(transparent)]
    Sink(SinkError),
    /// The decision surrogate failed the replay boundary's own checks.
    #[error(transparent)]
    Surrogate(ReplayError),
}

fn invalid<T>(message: impl Into<String>) -> Result<T, PlanningError> {
    Err(PlanningError::Invalid(message.into()))
}

/// Why an audit sink did not store a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// Fail-soft: storage is unavailable; the planner degrades with `planner-failed`.
    #[error("{0}")]
    Unavailable(String),
    /// Fail-closed: corruption, a digest collision, or a programming fault.
    #[error("{0}")]
    Failed(String),
}

/// Durable storage of full benefit results, keyed by result digest (spec/engine-store.md §5).
pub trait BenefitAuditSink {
    /// Stores the result object (with its `result_digest`) and returns the acknowledged digest.
    fn store(&self, result_json: &Json) -> Result<String, SinkError>;
}

// ---------------------------------------------------------------------------------------------
// Presentation (the retrieval candidate of spec/catalog.md §5.3)

/// How a capability is presented to the planner: the v2 selection fields plus an optional
/// equivalence key (which is never persisted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapabilityPresentation {
    pub capability_id: String,
    pub kind: String,
    pub name: String,
    pub source_digest: String,
    pub normalized_score_ppm: i64,
    pub matching_signals: Vec<String>,
    pub reason_codes: Vec<String>,
    pub actionability: String,
    pub install_descriptor_digest: Option<String>,
    pub install_plan_digest: Option<String>,
    pub equivalence_key: Option<String>,
}

/// A planner token list: bounded, safe tokens, unique, sorted (projections' order of checks).
fn check_tokens(field: &str, items: &[String], max: usize) -> Result<(), PlanningError> {
    if items.len() > max {
        return invalid(format!("{field} exceeds its bounded item limit"));
    }
    if !items.iter().all(|s| is_safe_token(s)) {
        return invalid(format!("{field} item must be a canonical safe token"));
    }
    let unique: BTreeSet<&String> = items.iter().collect();
    if unique.len() != items.len() {
        return invalid(format!("{field} contains duplicate values"));
    }
    if items.windows(2).any(|w| w[0] > w[1]) {
        return invalid(format!("{field} must use canonical sorted order"));
    }
    Ok(())
}

fn strs(items: &[String]) -> Json {
    Json::Arr(items.iter().map(|s| Json::str(s.as_str())).collect())
}

fn str_list(value: Option<&Json>, field: &str) -> Result<Vec<String>, PlanningError> {
    let Some(items) = value.and_then(Json::as_arr) else {
        return invalid(format!("{field} must be a JSON array"));
    };
    items
        .iter()
        .map(|i| {
            i.as_str().map(str::to_owned).ok_or_else(|| {
                PlanningError::Invalid(format!("{field} item must be a canonical safe token"))
            })
        })
        .collect()
}

impl CapabilityPresentation {
    /// The reference's validation order: id token, kind, name, id = kind:name, source digest,
    /// score, signals, reason codes, actionability, install digests, equivalence key.
    pub fn validate(&self) -> Result<(), PlanningError> {
        if !is_safe_token(&self.capability_id) {
            return invalid("capability_id must be a canonical safe token");
        }
        if CapabilityKind::parse(&self.kind).is_none() {
            return invalid("kind is not a recommendable capability kind");
        }
        if !is_capability_name(&self.name) {
            return invalid("name must be a canonical capability name");
        }
        if self.capability_id != format!("{}:{}", self.kind, self.name) {
            return invalid("capability_id must be the canonical kind:name identity");
        }
        if !is_sha(&self.source_digest) {
            return invalid("source_digest must be a lowercase SHA-256 digest");
        }
        if !(0..=SCORE_MAX_PPM).contains(&self.normalized_score_ppm) {
            return invalid(format!(
                "normalized_score_ppm must be an integer from 0 through {SCORE_MAX_PPM}"
            ));
        }
        check_tokens(
            "matching_signals",
            &self.matching_signals,
            MATCHING_SIGNALS_MAX_ITEMS,
        )?;
        check_tokens("reason_codes", &self.reason_codes, REASON_CODES_MAX_ITEMS)?;
        if self.reason_codes.is_empty() {
            return invalid("reason_codes must explain the candidate");
        }
        if !PRESENTATION_ACTIONABILITY.contains(&self.actionability.as_str()) {
            return invalid("actionability is not a declared state");
        }
        if self.actionability == "install" {
            for (value, field) in [
                (&self.install_descriptor_digest, "install_descriptor_digest"),
                (&self.install_plan_digest, "install_plan_digest"),
            ] {
                if !value.as_deref().is_some_and(is_sha) {
                    return invalid(format!("{field} must be a lowercase SHA-256 digest"));
                }
            }
        } else if self.install_descriptor_digest.is_some() || self.install_plan_digest.is_some() {
            return invalid(
                "install descriptor and plan digests are allowed only for install candidates",
            );
        }
        if let Some(key) = &self.equivalence_key
            && !is_safe_token(key)
        {
            return invalid("equivalence_key must be a canonical safe token");
        }
        Ok(())
    }

    /// The ten keys of the schema-v2 selection mapping (`equivalence_key` is not persisted).
    pub fn v2_fields(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("actionability", Json::str(self.actionability.as_str())),
            ("capability_id", Json::str(self.capability_id.as_str())),
            (
                "catalog_entry_digest",
                Json::str(self.source_digest.as_str()),
            ),
            (
                "install_descriptor_digest",
                Json::opt_str(self.install_descriptor_digest.as_deref()),
            ),
            (
                "install_plan_digest",
                Json::opt_str(self.install_plan_digest.as_deref()),
            ),
            ("kind", Json::str(self.kind.as_str())),
            ("matching_signals", strs(&self.matching_signals)),
            ("name", Json::str(self.name.as_str())),
            ("normalized_score_ppm", Json::Int(self.normalized_score_ppm)),
            ("reason_codes", strs(&self.reason_codes)),
        ]
    }

    /// Reads the presentation part of a v2 or v3 row mapping, then validates it.
    pub fn from_row(row: &Json) -> Result<CapabilityPresentation, PlanningError> {
        let text = |key: &str| row.get_str(key).unwrap_or_default().to_owned();
        let opt = |key: &str| row.get_str(key).map(str::to_owned);
        let presentation = CapabilityPresentation {
            capability_id: text("capability_id"),
            kind: text("kind"),
            name: text("name"),
            source_digest: text("catalog_entry_digest"),
            normalized_score_ppm: row
                .get("normalized_score_ppm")
                .and_then(Json::as_i64)
                .unwrap_or(-1),
            matching_signals: str_list(row.get("matching_signals"), "matching_signals")?,
            reason_codes: str_list(row.get("reason_codes"), "reason_codes")?,
            actionability: text("actionability"),
            install_descriptor_digest: opt("install_descriptor_digest"),
            install_plan_digest: opt("install_plan_digest"),
            equivalence_key: None,
        };
        presentation.validate()?;
        Ok(presentation)
    }
}

// ---------------------------------------------------------------------------------------------
// Planning authorities

/// What a selected row may later do. Construct through [`PlanningAuthority::load`],
/// [`PlanningAuthority::install`] or [`PlanningAuthority::Manual`].
#[derive(Debug, Clone, PartialEq)]
pub enum PlanningAuthority {
    /// Expose catalog or installed material: an authorized material document.
    Load { material: Json },
    /// Install by a typed plan: a v2 descriptor and the exact material it produces.
    Install {
        descriptor: Json,
        result_material: Json,
    },
    /// Recommend only; no effect authority.
    Manual,
}

impl PlanningAuthority {
    pub fn load(material: Json) -> Result<PlanningAuthority, PlanningError> {
        if validate_authorized_material(&material).is_err() {
            return invalid("load authority requires AuthorizedMaterial");
        }
        Ok(PlanningAuthority::Load { material })
    }

    pub fn install(
        descriptor: Json,
        result_material: Json,
    ) -> Result<PlanningAuthority, PlanningError> {
        if validate_install_plan_descriptor(&descriptor).is_err() {
            return invalid("install authority requires an InstallPlanDescriptor");
        }
        if descriptor.get_str("schema") != Some(INSTALL_DESCRIPTOR_SCHEMA_V2) {
            return invalid("install authority requires InstallPlanDescriptor schema v2");
        }
        if validate_material_identity(&result_material).is_err() {
            return invalid("install authority requires an exact result material identity");
        }
        if !descriptor_matches_result_material(&descriptor, &result_material) {
            return invalid("install descriptor does not match the exact result material identity");
        }
        Ok(PlanningAuthority::Install {
            descriptor,
            result_material,
        })
    }

    /// Reads an authority mapping (`{"type": …}`) and validates it as its constructor does.
    pub fn from_json(value: &Json) -> Result<PlanningAuthority, PlanningError> {
        let exact = |n: usize| value.as_obj().is_some_and(|m| m.len() == n);
        match value.get_str("type") {
            Some("load") if exact(2) => {
                PlanningAuthority::load(value.get("material").cloned().unwrap_or(Json::Null))
            }
            Some("install") if exact(3) => PlanningAuthority::install(
                value.get("descriptor").cloned().unwrap_or(Json::Null),
                value.get("result_material").cloned().unwrap_or(Json::Null),
            ),
            Some("manual") if exact(1) => Ok(PlanningAuthority::Manual),
            _ => invalid("authority is not a declared planning authority"),
        }
    }

    pub fn type_str(&self) -> &'static str {
        match self {
            PlanningAuthority::Load { .. } => "load",
            PlanningAuthority::Install { .. } => "install",
            PlanningAuthority::Manual => "manual",
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            PlanningAuthority::Load { material } => {
                Json::object([("material", material.clone()), ("type", Json::str("load"))])
            }
            PlanningAuthority::Install {
                descriptor,
                result_material,
            } => Json::object([
                ("descriptor", descriptor.clone()),
                ("result_material", result_material.clone()),
                ("type", Json::str("install")),
            ]),
            PlanningAuthority::Manual => Json::object([("type", Json::str("manual"))]),
        }
    }
}

/// The identity/authority consistency rule; `availability` is the benefit availability (for a
/// candidate) or the selected tier (for a row), as text.
pub fn check_identity_and_authority(
    presentation: &CapabilityPresentation,
    catalog_identity: &Json,
    availability: &str,
    authority: &PlanningAuthority,
) -> Result<(), PlanningError> {
    let id = presentation.capability_id.as_str();
    let kind = presentation.kind.as_str();
    if (
        catalog_identity.get_str("capability_id"),
        catalog_identity.get_str("kind"),
    ) != (Some(id), Some(kind))
    {
        return invalid("catalog identity must exactly match the presented capability");
    }
    match (presentation.actionability.as_str(), authority) {
        ("load", PlanningAuthority::Load { material }) => {
            if availability != "executable" {
                return invalid("load authority requires executable benefit facts");
            }
            if (
                material.get_str("capability_id"),
                material.get_str("kind"),
                material.get_str("catalog_identity_digest"),
            ) != (
                Some(id),
                Some(kind),
                catalog_identity.get_str("identity_digest"),
            ) {
                return invalid(
                    "load authority must exactly match capability and catalog identity",
                );
            }
        }
        ("load", _) => return invalid("load presentation requires load authority"),
        (
            "install",
            PlanningAuthority::Install {
                descriptor,
                result_material,
            },
        ) => {
            if availability != "executable" {
                return invalid("install authority requires executable benefit facts");
            }
            if (
                descriptor.get_str("capability_id"),
                descriptor.get_str("kind"),
                result_material.get_str("capability_id"),
                result_material.get_str("kind"),
                descriptor.get_str("descriptor_digest"),
                descriptor.get_str("plan_digest"),
            ) != (
                Some(id),
                Some(kind),
                Some(id),
                Some(kind),
                presentation.install_descriptor_digest.as_deref(),
                presentation.install_plan_digest.as_deref(),
            ) {
                return invalid(
                    "install authority must exactly match capability and presentation digests",
                );
            }
        }
        ("install", _) => return invalid("install presentation requires install authority"),
        ("manual", PlanningAuthority::Manual) => {
            if availability != "advisory" {
                return invalid("manual authority is advisory only");
            }
        }
        ("manual", _) => return invalid("manual presentation requires empty manual authority"),
        _ => {
            return invalid(
                "schema-v3 planning accepts only load, install, or manual presentation",
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Authenticated candidates and rows

/// A presentation bound to its catalog identity, benefit facts and authority. Only
/// constructible through [`AuthenticatedCapabilityCandidate::new`], so every value is consistent.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthenticatedCapabilityCandidate {
    presentation: CapabilityPresentation,
    catalog_identity: Json,
    benefit_candidate: BenefitCandidate,
    authority: PlanningAuthority,
}

impl AuthenticatedCapabilityCandidate {
    pub fn new(
        presentation: CapabilityPresentation,
        catalog_identity: Json,
        benefit_candidate: BenefitCandidate,
        authority: PlanningAuthority,
    ) -> Result<AuthenticatedCapabilityCandidate, PlanningError> {
        presentation.validate()?;
        validate_catalog_identity(&catalog_identity)
            .map_err(|e| PlanningError::Invalid(e.message().to_owned()))?;
        benefit_candidate
            .validate()
            .map_err(|e| PlanningError::Invalid(e.to_string()))?;
        if (
            benefit_candidate.capability_id.as_str(),
            benefit_candidate.source_digest.as_str(),
        ) != (
            presentation.capability_id.as_str(),
            presentation.source_digest.as_str(),
        ) {
            return invalid("benefit candidate must exactly match presented capability and source");
        }
        check_identity_and_authority(
            &presentation,
            &catalog_identity,
            benefit_candidate.availability.as_str(),
            &authority,
        )?;
        Ok(AuthenticatedCapabilityCandidate {
            presentation,
            catalog_identity,
            benefit_candidate,
            authority,
        })
    }

    pub fn presentation(&self) -> &CapabilityPresentation {
        &self.presentation
    }

    pub fn catalog_identity(&self) -> &Json {
        &self.catalog_identity
    }

    pub fn benefit_candidate(&self) -> &BenefitCandidate {
        &self.benefit_candidate
    }

    pub fn authority(&self) -> &PlanningAuthority {
        &self.authority
    }
}

/// The benefit part of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapabilityBenefitProjection {
    pub tier: Tier,
    pub individual_net_benefit_u: i64,
    pub marginal_net_benefit_u: i64,
}

impl CapabilityBenefitProjection {
    pub fn validate(&self) -> Result<(), PlanningError> {
        if !matches!(self.tier, Tier::Executable | Tier::Advisory) {
            return invalid("benefit tier must be executable or advisory");
        }
        if self.marginal_net_benefit_u < 1 {
            return invalid("marginal net benefit must be positive");
        }
        Ok(())
    }

    pub fn to_json(self) -> Json {
        Json::object([
            (
                "individual_net_benefit_u",
                Json::Int(self.individual_net_benefit_u),
            ),
            (
                "marginal_net_benefit_u",
                Json::Int(self.marginal_net_benefit_u),
            ),
            ("tier", Json::str(self.tier.as_str())),
        ])
    }
}

/// One schema-v3 plan row.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityPlanSelection {
    presentation: CapabilityPresentation,
    catalog_identity: Json,
    benefit: CapabilityBenefitProjection,
    authority: PlanningAuthority,
}

impl CapabilityPlanSelection {
    /// The row of `candidate` as chosen by `selection`.
    pub fn from_selection(
        candidate: &AuthenticatedCapabilityCandidate,
        selection: &BenefitSelection,
    ) -> Result<CapabilityPlanSelection, PlanningError> {
        if (
            selection.capability_id.as_str(),
            selection.source_digest.as_str(),
        ) != (
            candidate.presentation.capability_id.as_str(),
            candidate.presentation.source_digest.as_str(),
        ) {
            return invalid("selected benefit identity does not match authenticated candidate");
        }
        let benefit = CapabilityBenefitProjection {
            tier: selection.tier,
            individual_net_benefit_u: selection.individual_net_benefit_u,
            marginal_net_benefit_u: selection.marginal_net_benefit_u,
        };
        benefit.validate()?;
        check_identity_and_authority(
            &candidate.presentation,
            &candidate.catalog_identity,
            benefit.tier.as_str(),
            &candidate.authority,
        )?;
        Ok(CapabilityPlanSelection {
            presentation: candidate.presentation.clone(),
            catalog_identity: candidate.catalog_identity.clone(),
            benefit,
            authority: candidate.authority.clone(),
        })
    }

    /// `(capability_id, source_digest, tier, individual, marginal)`.
    pub fn selected_identity(&self) -> (&str, &str, Tier, i64, i64) {
        (
            &self.presentation.capability_id,
            &self.presentation.source_digest,
            self.benefit.tier,
            self.benefit.individual_net_benefit_u,
            self.benefit.marginal_net_benefit_u,
        )
    }

    pub fn benefit(&self) -> CapabilityBenefitProjection {
        self.benefit
    }

    /// The 13-key row mapping: the ten v2 keys plus `catalog_identity`, `benefit`, `authority`.
    pub fn to_json(&self) -> Json {
        let mut fields = self.presentation.v2_fields();
        fields.push(("catalog_identity", self.catalog_identity.clone()));
        fields.push(("benefit", self.benefit.to_json()));
        fields.push(("authority", self.authority.to_json()));
        Json::object(fields)
    }
}

fn selection_identity(s: &BenefitSelection) -> (&str, &str, Tier, i64, i64) {
    (
        &s.capability_id,
        &s.source_digest,
        s.tier,
        s.individual_net_benefit_u,
        s.marginal_net_benefit_u,
    )
}

// ---------------------------------------------------------------------------------------------
// Benefit audit reference

/// The compact reference the journal keeps to a stored benefit result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BenefitAuditReference {
    pub result_schema_id: String,
    pub result_digest: String,
    pub policy_schema_id: String,
    pub policy_digest: String,
    pub selection_algorithm_id: String,
    pub calibration_digest: String,
    pub requested_limit: i64,
    pub candidate_pool_count: i64,
    pub search_evaluation_count: i64,
}

/// `ctx.` then `[a-z0-9]` then up to 126 of `[a-z0-9.-]`.
fn is_schema_token(s: &str) -> bool {
    s.strip_prefix("ctx.").is_some_and(|rest| {
        let b = rest.as_bytes();
        !b.is_empty()
            && b.len() <= 127
            && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
    })
}

impl BenefitAuditReference {
    pub fn new(
        policy: &NetBenefitPolicy,
        result: &BenefitSelectionResult,
    ) -> BenefitAuditReference {
        BenefitAuditReference {
            result_schema_id: BENEFIT_RESULT_SCHEMA_ID.to_owned(),
            result_digest: result.result_digest.clone(),
            policy_schema_id: BENEFIT_POLICY_SCHEMA_ID.to_owned(),
            policy_digest: policy.policy_digest(),
            selection_algorithm_id: BENEFIT_SELECTION_ALGORITHM_ID.to_owned(),
            calibration_digest: policy.calibration_digest.clone(),
            requested_limit: result.requested_limit,
            candidate_pool_count: result.candidate_pool_count,
            search_evaluation_count: result.search_evaluation_count,
        }
    }

    pub fn validate(&self) -> Result<(), PlanningError> {
        for (field, value) in [
            ("result_schema_id", &self.result_schema_id),
            ("policy_schema_id", &self.policy_schema_id),
            ("selection_algorithm_id", &self.selection_algorithm_id),
        ] {
            if !is_schema_token(value) {
                return invalid(format!("{field} must be a declared schema token"));
            }
        }
        for (field, value) in [
            ("result_digest", &self.result_digest),
            ("policy_digest", &self.policy_digest),
            ("calibration_digest", &self.calibration_digest),
        ] {
            if !is_sha(value) {
                return invalid(format!("{field} must be a lowercase SHA-256 digest"));
            }
        }
        let bound = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (field, value, max) in [
            (
                "requested_limit",
                self.requested_limit,
                bound(SELECTED_MAX_ITEMS),
            ),
            (
                "candidate_pool_count",
                self.candidate_pool_count,
                bound(CANDIDATE_POOL_MAX_ITEMS),
            ),
            (
                "search_evaluation_count",
                self.search_evaluation_count,
                i64::try_from(SEARCH_MAX_EVALUATIONS).unwrap_or(i64::MAX),
            ),
        ] {
            if !(0..=max).contains(&value) {
                return invalid(format!("{field} is outside its bounded range"));
            }
        }
        Ok(())
    }

    /// All nine values equal the ones built from `(policy, result)`, and the result was
    /// produced under this policy.
    pub fn matches(&self, policy: &NetBenefitPolicy, result: &BenefitSelectionResult) -> bool {
        *self == BenefitAuditReference::new(policy, result)
            && result.policy_digest == policy.policy_digest()
    }

    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "calibration_digest",
                Json::str(self.calibration_digest.as_str()),
            ),
            ("candidate_pool_count", Json::Int(self.candidate_pool_count)),
            ("policy_digest", Json::str(self.policy_digest.as_str())),
            (
                "policy_schema_id",
                Json::str(self.policy_schema_id.as_str()),
            ),
            ("requested_limit", Json::Int(self.requested_limit)),
            ("result_digest", Json::str(self.result_digest.as_str())),
            (
                "result_schema_id",
                Json::str(self.result_schema_id.as_str()),
            ),
            (
                "search_evaluation_count",
                Json::Int(self.search_evaluation_count),
            ),
            (
                "selection_algorithm_id",
                Json::str(self.selection_algorithm_id.as_str()),
            ),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// The plan and its decision surrogate

/// The outcome of one planning run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanStatus {
    Ready,
    Abstained,
    Degraded,
}

impl PlanStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Ready => "ready",
            PlanStatus::Abstained => "abstained",
            PlanStatus::Degraded => "degraded",
        }
    }
}

/// A schema-v3 capability plan. Built only by [`CapabilityPlan::degraded`] and
/// [`CapabilityPlan::from_result`], which enforce the status rules.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityPlan {
    status: PlanStatus,
    abstention_code: Option<String>,
    benefit_audit: Option<BenefitAuditReference>,
    selections: Vec<CapabilityPlanSelection>,
}

impl CapabilityPlan {
    /// A plan that never reached a validated benefit result: no audit, no rows.
    pub fn degraded(code: &str) -> Result<CapabilityPlan, PlanningError> {
        if !DEGRADATION_CODES.contains(&code) {
            return invalid("degraded schema-v3 plan requires no audit, result, or capabilities");
        }
        Ok(CapabilityPlan {
            status: PlanStatus::Degraded,
            abstention_code: Some(code.to_owned()),
            benefit_audit: None,
            selections: Vec::new(),
        })
    }

    /// A ready plan (rows) or an abstained plan (no rows, the result's code) over a validated
    /// result, its policy and the audit reference to the stored result.
    pub fn from_result(
        policy: &NetBenefitPolicy,
        result: &BenefitSelectionResult,
        audit: BenefitAuditReference,
        selections: Vec<CapabilityPlanSelection>,
    ) -> Result<CapabilityPlan, PlanningError> {
        if selections.len() > SELECTED_MAX_ITEMS {
            return invalid("schema-v3 plan exceeds the global five-item bound");
        }
        audit.validate()?;
        if !audit.matches(policy, result) {
            return invalid("benefit audit does not match validated result");
        }
        let rows: Vec<_> = selections.iter().map(|s| s.selected_identity()).collect();
        let chosen: Vec<_> = result.selections.iter().map(selection_identity).collect();
        if rows != chosen {
            return invalid("capability rows do not exactly project the validated benefit result");
        }
        let (status, code) = if selections.is_empty() {
            let Some(code) = result.abstention_code else {
                return invalid("empty schema-v3 plan must preserve the benefit abstention code");
            };
            (PlanStatus::Abstained, Some(code.as_str().to_owned()))
        } else {
            if result.abstention_code.is_some() {
                return invalid("selected schema-v3 plan must be ready without abstention");
            }
            (PlanStatus::Ready, None)
        };
        Ok(CapabilityPlan {
            status,
            abstention_code: code,
            benefit_audit: Some(audit),
            selections,
        })
    }

    pub fn status(&self) -> PlanStatus {
        self.status
    }

    pub fn abstention_code(&self) -> Option<&str> {
        self.abstention_code.as_deref()
    }

    pub fn benefit_audit(&self) -> Option<&BenefitAuditReference> {
        self.benefit_audit.as_ref()
    }

    pub fn selections(&self) -> &[CapabilityPlanSelection] {
        &self.selections
    }

    /// `{status, abstention_code, benefit_audit: mapping|null, capabilities: [rows]}`: the
    /// decision surrogate's value.
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "abstention_code",
                Json::opt_str(self.abstention_code.as_deref()),
            ),
            (
                "benefit_audit",
                self.benefit_audit
                    .as_ref()
                    .map_or(Json::Null, BenefitAuditReference::to_json),
            ),
            (
                "capabilities",
                Json::Arr(
                    self.selections
                        .iter()
                        .map(CapabilityPlanSelection::to_json)
                        .collect(),
                ),
            ),
            ("status", Json::str(self.status.as_str())),
        ])
    }

    /// The decision digest: `H(CJ(value))`.
    pub fn decision_digest(&self) -> String {
        cj_digest(&self.to_json())
    }

    /// The `ctx.decision.capability-plan` version 3 surrogate, checked exactly as the replay
    /// boundary will check it (token strings, depth, the 16 KiB `SURROGATE_MAX_BYTES` bound, the
    /// v3 value rules).
    pub fn decision_surrogate(&self) -> Result<Surrogate, PlanningError> {
        let surrogate = Surrogate::new(
            CAPABILITY_PLAN_SCHEMA,
            CAPABILITY_PLAN_VERSION_V3,
            self.to_json(),
        );
        validate_surrogate(&surrogate, SurrogateRole::Decision)
            .map_err(PlanningError::Surrogate)?;
        Ok(surrogate)
    }
}

// ---------------------------------------------------------------------------------------------
// The planner

/// Plans a bounded set from authenticated candidates with a net-benefit policy, storing the full
/// result in an audit sink before the plan refers to it.
#[derive(Debug, Clone)]
pub struct AuthenticatedNetBenefitPlanner<S> {
    policy: NetBenefitPolicy,
    sink: S,
}

impl<S: BenefitAuditSink> AuthenticatedNetBenefitPlanner<S> {
    pub fn new(policy: NetBenefitPolicy, sink: S) -> Result<Self, PlanningError> {
        policy
            .validate()
            .map_err(|e| PlanningError::Invalid(e.to_string()))?;
        Ok(AuthenticatedNetBenefitPlanner { policy, sink })
    }

    pub fn policy(&self) -> &NetBenefitPolicy {
        &self.policy
    }

    /// Checks the pool, selects, builds rows in result order, stores the result, and returns a
    /// ready or abstained plan, or `degraded / planner-failed` when the sink is unavailable.
    pub fn plan(
        &self,
        candidates: &[AuthenticatedCapabilityCandidate],
        requested_limit: usize,
    ) -> Result<CapabilityPlan, PlanningError> {
        if candidates.len() > CANDIDATE_POOL_MAX_ITEMS {
            return invalid("candidate pool exceeds its bounded limit");
        }
        if requested_limit > SELECTED_MAX_ITEMS {
            return invalid("requested_limit must be an integer from zero through five");
        }
        let ids: BTreeSet<&str> = candidates
            .iter()
            .map(|c| c.presentation.capability_id.as_str())
            .collect();
        if ids.len() != candidates.len() {
            return invalid("candidate pool contains duplicate identities");
        }
        let facts: Vec<BenefitCandidate> = candidates
            .iter()
            .map(|c| c.benefit_candidate.clone())
            .collect();
        let result = self
            .policy
            .select(&facts, requested_limit)
            .and_then(|r| self.policy.validate_result(&r).map(|()| r))
            .map_err(|source| PlanningError::PolicyRejected { source })?;
        let mut rows = Vec::with_capacity(result.selections.len());
        for selection in &result.selections {
            let Some(candidate) = candidates
                .iter()
                .find(|c| c.presentation.capability_id == selection.capability_id)
            else {
                return invalid("selected benefit identity does not match authenticated candidate");
            };
            rows.push(CapabilityPlanSelection::from_selection(
                candidate, selection,
            )?);
        }
        let acknowledged = match self.sink.store(&result.to_json()) {
            Ok(digest) => digest,
            Err(SinkError::Unavailable(_)) => return CapabilityPlan::degraded("planner-failed"),
            Err(e) => return Err(PlanningError::Sink(e)),
        };
        if acknowledged != result.result_digest {
            return Err(PlanningError::AuditDigestMismatch);
        }
        let audit = BenefitAuditReference::new(&self.policy, &result);
        CapabilityPlan::from_result(&self.policy, &result, audit, rows)
    }
}

/// The availability a presentation's actionability requires in the authenticated-facts runtime
/// (spec/planner.md §10): advisory for manual, executable otherwise.
pub fn required_availability(actionability: &str) -> Availability {
    if actionability == "manual" {
        Availability::Advisory
    } else {
        Availability::Executable
    }
}

#[cfg(test)]
mod tests;
