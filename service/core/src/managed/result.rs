//! Authority-free result values (spec/service.md §1) and the projection of a committed
//! plan at a journal head. Every value is service-issued: private fields, no public constructor,
//! no `Clone`, no serialization (spec/service.md §1), so a host cannot forge or persist one.

use ctx_model::{
    ACTIVE_CAPABILITIES_MAX, HostAction, Json, ScopeRef, is_capability_identity, is_sha, is_token,
};
use ctx_projections::engine::Snapshot;

use super::error::{ServiceError, projection};

/// Most action summaries any result carries.
pub const ACTION_SUMMARIES_MAX: usize = 16;

/// One committed plan row as a host may see it.
#[derive(Debug, PartialEq, Eq)]
pub struct CapabilitySelection {
    capability_id: String,
    kind: String,
    name: String,
    actionability: String,
    matching_signals: Vec<String>,
    reason_codes: Vec<String>,
    benefit_tier: String,
    individual_net_benefit_u: i64,
    marginal_net_benefit_u: i64,
    source_digest: String,
    catalog_identity_digest: String,
    install_descriptor_digest: Option<String>,
    install_plan_digest: Option<String>,
}

impl CapabilitySelection {
    pub fn capability_id(&self) -> &str {
        &self.capability_id
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `load`, `install` or `manual`, from the row's typed authority.
    pub fn actionability(&self) -> &str {
        &self.actionability
    }
    pub fn matching_signals(&self) -> &[String] {
        &self.matching_signals
    }
    pub fn reason_codes(&self) -> &[String] {
        &self.reason_codes
    }
    pub fn benefit_tier(&self) -> &str {
        &self.benefit_tier
    }
    pub fn individual_net_benefit_u(&self) -> i64 {
        self.individual_net_benefit_u
    }
    pub fn marginal_net_benefit_u(&self) -> i64 {
        self.marginal_net_benefit_u
    }
    pub fn source_digest(&self) -> &str {
        &self.source_digest
    }
    pub fn catalog_identity_digest(&self) -> &str {
        &self.catalog_identity_digest
    }
    pub fn install_descriptor_digest(&self) -> Option<&str> {
        self.install_descriptor_digest.as_deref()
    }
    pub fn install_plan_digest(&self) -> Option<&str> {
        self.install_plan_digest.as_deref()
    }
}

/// The projection of one committed schema-v3 plan at one authoritative journal head.
/// `journal_revision` is the current head, which may be later than the planning revision.
#[derive(Debug)]
pub struct PreparedQuery {
    status: String,
    abstention_code: Option<String>,
    plan_id: String,
    planning_environment_digest: String,
    decision_digest: String,
    journal_revision: u64,
    journal_record_digest: String,
    benefit_result_digest: Option<String>,
    requested_limit: Option<i64>,
    candidate_pool_count: Option<i64>,
    search_evaluation_count: Option<i64>,
    selections: Vec<CapabilitySelection>,
}

impl PreparedQuery {
    /// `ready`, `abstained` or `degraded`.
    pub fn status(&self) -> &str {
        &self.status
    }
    pub fn abstention_code(&self) -> Option<&str> {
        self.abstention_code.as_deref()
    }
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }
    pub fn planning_environment_digest(&self) -> &str {
        &self.planning_environment_digest
    }
    pub fn decision_digest(&self) -> &str {
        &self.decision_digest
    }
    pub fn journal_revision(&self) -> u64 {
        self.journal_revision
    }
    pub fn journal_record_digest(&self) -> &str {
        &self.journal_record_digest
    }
    pub fn benefit_result_digest(&self) -> Option<&str> {
        self.benefit_result_digest.as_deref()
    }
    pub fn requested_limit(&self) -> Option<i64> {
        self.requested_limit
    }
    pub fn candidate_pool_count(&self) -> Option<i64> {
        self.candidate_pool_count
    }
    pub fn search_evaluation_count(&self) -> Option<i64> {
        self.search_evaluation_count
    }
    pub fn selections(&self) -> &[CapabilitySelection] {
        &self.selections
    }
}

/// A bounded, prose-free projection of one host action. Equal by its three fields.
#[derive(Debug, PartialEq, Eq)]
pub struct ActionSummary {
    action_id: String,
    kind: String,
    entity_id: Option<String>,
}

impl ActionSummary {
    pub(crate) fn of(action: &HostAction) -> ActionSummary {
        ActionSummary {
            action_id: action.action_id.clone(),
            kind: action.kind.as_str().to_owned(),
            entity_id: action.entity_id.clone(),
        }
    }

    pub fn action_id(&self) -> &str {
        &self.action_id
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn entity_id(&self) -> Option<&str> {
        self.entity_id.as_deref()
    }
}

/// The authority-free identity of one pending human decision, copied from the broker's challenge
/// (spec/service.md §1). Equal when all five fields are equal.
#[derive(Debug, PartialEq, Eq)]
pub struct ConsentChallengeProjection {
    audience: String,
    capability_id: String,
    challenge_digest: String,
    expires_at: String,
    kind: String,
}

impl ConsentChallengeProjection {
    /// The five identity fields of a broker challenge, verbatim.
    pub(crate) fn of(
        challenge: &ctx_projections::consent_store::InstallConsentChallenge,
    ) -> ConsentChallengeProjection {
        ConsentChallengeProjection {
            audience: challenge.audience().to_owned(),
            capability_id: challenge.capability_id().to_owned(),
            challenge_digest: challenge.challenge_digest().to_owned(),
            expires_at: challenge.expires_at().to_owned(),
            kind: challenge.kind().to_owned(),
        }
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }
    pub fn capability_id(&self) -> &str {
        &self.capability_id
    }
    pub fn challenge_digest(&self) -> &str {
        &self.challenge_digest
    }
    pub fn expires_at(&self) -> &str {
        &self.expires_at
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

/// What `prepare` and `reopen` return: the opaque reference, the projection at the head, the
/// planning transition's action summaries and the current consent challenge (if any).
#[derive(Debug)]
pub struct QueryServiceResult {
    query_ref: String,
    prepared: PreparedQuery,
    actions: Vec<ActionSummary>,
    challenge: Option<ConsentChallengeProjection>,
}

impl QueryServiceResult {
    pub(crate) fn new(
        query_ref: String,
        prepared: PreparedQuery,
        actions: Vec<ActionSummary>,
        challenge: Option<ConsentChallengeProjection>,
    ) -> Result<QueryServiceResult, ServiceError> {
        crate::failpoint::fail_point!(super::failpoints::QUERY_BEFORE_RESULT);
        if !ctx_projections::query_store::is_query_ref(&query_ref) {
            return Err(ServiceError::Identity("query result reference is invalid"));
        }
        if actions.len() > ACTION_SUMMARIES_MAX {
            return Err(ServiceError::Identity(
                "query result action summary set is invalid",
            ));
        }
        Ok(QueryServiceResult {
            query_ref,
            prepared,
            actions,
            challenge,
        })
    }

    pub fn query_ref(&self) -> &str {
        &self.query_ref
    }
    pub fn prepared(&self) -> &PreparedQuery {
        &self.prepared
    }
    pub fn actions(&self) -> &[ActionSummary] {
        &self.actions
    }
    pub fn challenge(&self) -> Option<&ConsentChallengeProjection> {
        self.challenge.as_ref()
    }
}

// ------------------------------------------------------------------------------------------------
// Projection (spec/service.md §1)
// ------------------------------------------------------------------------------------------------

/// Projects the committed plan of `snapshot` (the snapshot of `scope`).
pub(crate) fn project(
    snapshot: &Snapshot,
    scope: &ScopeRef,
    expected_plan_id: Option<&str>,
) -> Result<PreparedQuery, ServiceError> {
    if let Some(expected) = expected_plan_id
        && !is_token(expected)
    {
        return projection("expected_plan_id must be a canonical token");
    }
    if snapshot.revision() < 2 {
        return projection("managed query snapshot revision must be at least two");
    }
    let Some(state) = snapshot
        .state()
        .filter(|s| s.revision == snapshot.revision())
    else {
        return projection("managed query snapshot must contain its exact state head");
    };
    if state.scope.stream_key() != scope.stream_key() {
        return projection("managed query snapshot stream does not match its state");
    }
    let Some(plan) = &state.committed_plan else {
        return projection("managed query snapshot has no exact committed schema-v3 plan");
    };
    if !is_token(&plan.plan_id) {
        return projection("committed managed plan identity is not canonical");
    }
    if expected_plan_id.is_some_and(|e| e != plan.plan_id) {
        return projection("managed query snapshot does not match the expected plan identity");
    }
    if !is_sha(&plan.catalog_snapshot_id) || !is_sha(&plan.decision_digest) {
        return projection("managed query snapshot has no exact committed schema-v3 plan");
    }
    let Some(head) = snapshot.head_record_digest().map(|d| d.to_hex()) else {
        return projection("managed query snapshot must contain its exact state head");
    };
    if !is_sha(&head) {
        return projection("managed query head record digest is invalid");
    }
    if plan.capabilities.len() > ACTIVE_CAPABILITIES_MAX {
        return projection("committed plan exceeds the global capability bound");
    }
    let selections = plan
        .capabilities
        .iter()
        .map(selection)
        .collect::<Result<Vec<_>, _>>()?;
    let audit = match &plan.benefit_audit {
        Json::Null => None,
        audit => Some(audit),
    };
    let audit_int = |key: &str| audit.and_then(|a| a.get(key)).and_then(Json::as_i64);
    Ok(PreparedQuery {
        status: plan.status.clone(),
        abstention_code: plan.abstention_code.clone(),
        plan_id: plan.plan_id.clone(),
        planning_environment_digest: plan.catalog_snapshot_id.clone(),
        decision_digest: plan.decision_digest.clone(),
        journal_revision: snapshot.revision(),
        journal_record_digest: head,
        benefit_result_digest: audit
            .and_then(|a| a.get_str("result_digest"))
            .map(str::to_owned),
        requested_limit: audit_int("requested_limit"),
        candidate_pool_count: audit_int("candidate_pool_count"),
        search_evaluation_count: audit_int("search_evaluation_count"),
        selections,
    })
}

fn strings(row: &Json, key: &str) -> Result<Vec<String>, ServiceError> {
    row.get(key)
        .and_then(Json::as_arr)
        .and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| ServiceError::Projection(format!("committed capability {key} is invalid")))
}

fn selection(row: &Json) -> Result<CapabilitySelection, ServiceError> {
    let text = |key: &str| row.get_str(key).map(str::to_owned);
    let (Some(capability_id), Some(kind)) = (text("capability_id"), text("kind")) else {
        return projection("committed capability identity is invalid");
    };
    if !is_capability_identity(&kind, &capability_id) {
        return projection("committed capability identity is invalid");
    }
    let actionability = match row.get("authority").and_then(|a| a.get_str("type")) {
        Some(t @ ("load" | "install" | "manual")) => t.to_owned(),
        _ => return projection("committed capability has unsupported planning authority"),
    };
    if row.get_str("actionability") != Some(actionability.as_str()) {
        return projection("committed capability actionability does not match its typed authority");
    }
    let benefit = row.get("benefit");
    let benefit_int = |key: &str| benefit.and_then(|b| b.get(key)).and_then(Json::as_i64);
    let (Some(benefit_tier), Some(individual), Some(marginal)) = (
        benefit.and_then(|b| b.get_str("tier")).map(str::to_owned),
        benefit_int("individual_net_benefit_u"),
        benefit_int("marginal_net_benefit_u"),
    ) else {
        return projection("committed capability benefit is invalid");
    };
    let digest = |value: Option<&str>| value.filter(|d| is_sha(d)).map(str::to_owned);
    let (Some(source_digest), Some(catalog_identity_digest)) = (
        digest(row.get_str("catalog_entry_digest")),
        digest(
            row.get("catalog_identity")
                .and_then(|c| c.get_str("identity_digest")),
        ),
    ) else {
        return projection("committed capability digests are invalid");
    };
    let optional_digest = |key: &str| -> Result<Option<String>, ServiceError> {
        match row.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(value) => digest(value.as_str()).map(Some).ok_or_else(|| {
                ServiceError::Projection(format!("committed capability {key} is invalid"))
            }),
        }
    };
    Ok(CapabilitySelection {
        name: text("name").unwrap_or_default(),
        matching_signals: strings(row, "matching_signals")?,
        reason_codes: strings(row, "reason_codes")?,
        install_descriptor_digest: optional_digest("install_descriptor_digest")?,
        install_plan_digest: optional_digest("install_plan_digest")?,
        capability_id,
        kind,
        actionability,
        benefit_tier,
        individual_net_benefit_u: individual,
        marginal_net_benefit_u: marginal,
        source_digest,
        catalog_identity_digest,
    })
}
