//! The desired-set request and result (spec/service.md §1) and the status rules of
//! spec/service.md §6.1.

use ctx_model::{Json, is_sha};
use ctx_projections::query_store::{DesiredSetRecord, is_desired_set_ref, is_query_ref};

use super::error::{ServiceError, invalid};
use super::result::{ACTION_SUMMARIES_MAX, ActionSummary, ConsentChallengeProjection};

/// At most this many capabilities in one desired set.
pub const DESIRED_CAPABILITIES_MAX: usize = 5;

/// `[a-z0-9][a-z0-9._:@-]{0,127}`: the lowercase capability token of a desired request.
pub fn is_request_capability_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..].iter().all(|&c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, b'.' | b'_' | b':' | b'@' | b'-')
        })
}

/// Which capabilities of a planned query the host wants (spec/service.md §1). Immutable, not
/// `Clone`, not serializable. The order of `capability_ids` is not significant: the service
/// stores them in committed-plan order.
pub struct DesiredSetRequest {
    query_ref: String,
    logical_choice_id: String,
    capability_ids: Vec<String>,
    expected_previous_desired_set_ref: Option<String>,
}

impl std::fmt::Debug for DesiredSetRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesiredSetRequest")
            .field("query_ref", &self.query_ref)
            .field("logical_choice_id", &self.logical_choice_id)
            .finish_non_exhaustive()
    }
}

impl DesiredSetRequest {
    /// Validates in the reference's order; the first failure names the field at fault.
    pub fn new(
        query_ref: &str,
        logical_choice_id: &str,
        capability_ids: &[&str],
        expected_previous_desired_set_ref: Option<&str>,
    ) -> Result<DesiredSetRequest, ServiceError> {
        if !is_query_ref(query_ref) {
            return invalid("query_ref must be an opaque managed-query reference");
        }
        if !is_sha(logical_choice_id) {
            return invalid("logical_choice_id must be a lowercase SHA-256 digest");
        }
        if capability_ids.len() > DESIRED_CAPABILITIES_MAX {
            return invalid("capability_ids cannot contain more than five choices");
        }
        if !capability_ids.iter().all(|id| is_request_capability_id(id)) {
            return invalid("capability_ids must contain canonical capability tokens");
        }
        for (i, id) in capability_ids.iter().enumerate() {
            if capability_ids[..i].contains(id) {
                return invalid("capability_ids must be unique");
            }
        }
        if expected_previous_desired_set_ref.is_some_and(|r| !is_desired_set_ref(r)) {
            return invalid(
                "expected_previous_desired_set_ref must be an opaque desired-set reference or None",
            );
        }
        Ok(DesiredSetRequest {
            query_ref: query_ref.to_owned(),
            logical_choice_id: logical_choice_id.to_owned(),
            capability_ids: capability_ids.iter().map(|s| (*s).to_owned()).collect(),
            expected_previous_desired_set_ref: expected_previous_desired_set_ref.map(str::to_owned),
        })
    }

    /// The request in its host JSON form: `{"query_ref", "logical_choice_id",
    /// "capability_ids": [..], "expected_previous_desired_set_ref"?}`, no other keys.
    pub fn from_json(value: &Json) -> Result<DesiredSetRequest, ServiceError> {
        let Some(map) = value.as_obj() else {
            return invalid("desired-set request must be a JSON object");
        };
        const KEYS: [&str; 4] = [
            "capability_ids",
            "expected_previous_desired_set_ref",
            "logical_choice_id",
            "query_ref",
        ];
        if let Some(k) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return invalid(format!("desired-set request has an unknown field {k}"));
        }
        let text = |k: &str| value.get_str(k).unwrap_or_default();
        let Some(Json::Arr(ids)) = value.get("capability_ids") else {
            return invalid("capability_ids must be an exact array");
        };
        let mut names = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(id) = id.as_str() else {
                return invalid("capability_ids must contain canonical capability tokens");
            };
            names.push(id);
        }
        let previous = match value.get("expected_previous_desired_set_ref") {
            None | Some(Json::Null) => None,
            Some(Json::Str(s)) => Some(s.as_str()),
            Some(_) => {
                return invalid(
                    "expected_previous_desired_set_ref must be an opaque desired-set reference or None",
                );
            }
        };
        DesiredSetRequest::new(
            text("query_ref"),
            text("logical_choice_id"),
            &names,
            previous,
        )
    }

    pub fn query_ref(&self) -> &str {
        &self.query_ref
    }
    pub fn logical_choice_id(&self) -> &str {
        &self.logical_choice_id
    }
    pub fn capability_ids(&self) -> &[String] {
        &self.capability_ids
    }
    pub fn expected_previous_desired_set_ref(&self) -> Option<&str> {
        self.expected_previous_desired_set_ref.as_deref()
    }
}

/// The five statuses of a desired-set result.
pub mod status {
    pub const RECONCILED: &str = "reconciled";
    /// The same status as the consent resolution's (one definition).
    pub use crate::managed::resolution::outcome::CONSENT_REQUIRED;
    pub const EFFECT_PENDING: &str = "effect-pending";
    pub const MANUAL_DEFERRED: &str = "manual-deferred";
    pub const LIFECYCLE_DEFERRED: &str = "lifecycle-deferred";
    pub const ALL: [&str; 5] = [
        RECONCILED,
        CONSENT_REQUIRED,
        EFFECT_PENDING,
        MANUAL_DEFERRED,
        LIFECYCLE_DEFERRED,
    ];
}

/// The reason codes of deferred desired-set results (spec/service.md §6.1).
pub mod reason {
    pub const AUTOMATIC_INSTALL_INDETERMINATE: &str = "automatic-install-indeterminate";
    pub const POLICY_CHANGED: &str = "install-policy-changed-after-desired-commit";
    pub const MANUAL: &str = "manual-capability-requires-user-action";
    pub const AUTOMATIC_INSTALL_FAILED: &str = "automatic-install-failed";
    pub const LIFECYCLE_AUTHORITY_MISSING: &str = "install-lifecycle-authority-missing";
}

/// What `set_desired` returns (spec/service.md §1): the durable choice and where it stands. No
/// paths, payloads, execution bindings or transitions; not `Clone`, not serializable.
#[derive(Debug)]
pub struct DesiredSetResult {
    query_ref: String,
    desired_set_ref: String,
    logical_choice_id: String,
    capability_ids: Vec<String>,
    deferred_capability_ids: Vec<String>,
    failed_capability_ids: Vec<String>,
    status: &'static str,
    reason_code: Option<&'static str>,
    plan_id: String,
    decision_digest: String,
    journal_revision: u64,
    journal_record_digest: String,
    actions: Vec<ActionSummary>,
    challenge: Option<ConsentChallengeProjection>,
}

/// The parts a desired-set result is built from.
#[derive(Debug)]
pub struct DesiredResultParts {
    pub deferred_capability_ids: Vec<String>,
    pub failed_capability_ids: Vec<String>,
    pub status: &'static str,
    pub reason_code: Option<&'static str>,
    pub actions: Vec<ActionSummary>,
    pub challenge: Option<ConsentChallengeProjection>,
}

fn identity(message: &'static str) -> Result<(), ServiceError> {
    Err(ServiceError::Identity(message))
}

/// Canonical (record-ordered) and unique.
fn is_canonical_subset(ids: &[String], record_ids: &[String]) -> bool {
    let mut last = None;
    for id in ids {
        let Some(at) = record_ids.iter().position(|r| r == id) else {
            return false;
        };
        if last.is_some_and(|l| at <= l) {
            return false;
        }
        last = Some(at);
    }
    true
}

impl DesiredSetResult {
    /// The invariants of every desired-set result (spec/service.md §1). The
    /// service builds results only through [`DesiredSetResult::new`], which runs them;
    /// this function lets hosts and tests check a candidate without building one.
    pub fn validate_parts(
        record: &DesiredSetRecord,
        parts: &DesiredResultParts,
    ) -> Result<(), ServiceError> {
        if !record.is_committed() {
            return identity("managed desired-set result requires an exact committed record");
        }
        if !status::ALL.contains(&parts.status) {
            return identity("managed desired-set result status is invalid");
        }
        let deferred =
            parts.status == status::MANUAL_DEFERRED || parts.status == status::LIFECYCLE_DEFERRED;
        if deferred != parts.reason_code.is_some() {
            return identity("managed desired-set deferral reason is invalid");
        }
        if (parts.status == status::CONSENT_REQUIRED) != parts.challenge.is_some() {
            return identity("managed desired-set consent status and challenge are inconsistent");
        }
        if deferred && parts.challenge.is_some() {
            return identity(
                "managed desired-set deferred result cannot carry a consent challenge",
            );
        }
        let ids = record.capability_ids();
        if !is_canonical_subset(&parts.deferred_capability_ids, ids)
            || parts.deferred_capability_ids.is_empty() == deferred
        {
            return identity("managed desired-set deferred subset is invalid");
        }
        if !is_canonical_subset(&parts.failed_capability_ids, ids)
            || parts.failed_capability_ids.len() > DESIRED_CAPABILITIES_MAX
            || (parts.status == status::RECONCILED && !parts.failed_capability_ids.is_empty())
        {
            return identity("managed desired-set failed subset is invalid");
        }
        if parts.actions.len() > ACTION_SUMMARIES_MAX {
            return identity("managed desired-set actions are invalid");
        }
        if let Some(challenge) = &parts.challenge {
            let matching = parts
                .actions
                .iter()
                .filter(|a| {
                    a.kind() == "RequestConsent" && a.entity_id() == Some(challenge.capability_id())
                })
                .count();
            if matching != 1 {
                return identity("managed desired-set challenge has no exact action summary");
            }
        }
        if record.journal_revision().is_none()
            || record.journal_record_digest().is_none()
            || !is_desired_set_ref(record.desired_set_ref())
        {
            return identity("managed desired-set durable binding is incomplete");
        }
        Ok(())
    }

    pub(crate) fn new(
        record: &DesiredSetRecord,
        parts: DesiredResultParts,
    ) -> Result<DesiredSetResult, ServiceError> {
        crate::failpoint::fail_point!(super::failpoints::DESIRED_BEFORE_RESULT);
        Self::validate_parts(record, &parts)?;
        let (Some(journal_revision), Some(journal_record_digest)) =
            (record.journal_revision(), record.journal_record_digest())
        else {
            return Err(ServiceError::Identity(
                "managed desired-set durable binding is incomplete",
            ));
        };
        Ok(DesiredSetResult {
            query_ref: record.query_ref().to_owned(),
            desired_set_ref: record.desired_set_ref().to_owned(),
            logical_choice_id: record.logical_choice_id().to_owned(),
            capability_ids: record.capability_ids().to_vec(),
            deferred_capability_ids: parts.deferred_capability_ids,
            failed_capability_ids: parts.failed_capability_ids,
            status: parts.status,
            reason_code: parts.reason_code,
            plan_id: record.plan_id().to_owned(),
            decision_digest: record.decision_digest().to_owned(),
            journal_revision,
            journal_record_digest: journal_record_digest.to_owned(),
            actions: parts.actions,
            challenge: parts.challenge,
        })
    }

    pub fn query_ref(&self) -> &str {
        &self.query_ref
    }
    pub fn desired_set_ref(&self) -> &str {
        &self.desired_set_ref
    }
    pub fn logical_choice_id(&self) -> &str {
        &self.logical_choice_id
    }
    pub fn capability_ids(&self) -> &[String] {
        &self.capability_ids
    }
    pub fn deferred_capability_ids(&self) -> &[String] {
        &self.deferred_capability_ids
    }
    pub fn failed_capability_ids(&self) -> &[String] {
        &self.failed_capability_ids
    }
    pub fn status(&self) -> &'static str {
        self.status
    }
    pub fn reason_code(&self) -> Option<&'static str> {
        self.reason_code
    }
    pub fn plan_id(&self) -> &str {
        &self.plan_id
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
    pub fn actions(&self) -> &[ActionSummary] {
        &self.actions
    }
    pub fn challenge(&self) -> Option<&ConsentChallengeProjection> {
        self.challenge.as_ref()
    }
    /// Moves the challenge out (the projection is not `Clone`).
    pub fn into_challenge(self) -> Option<ConsentChallengeProjection> {
        self.challenge
    }
}
