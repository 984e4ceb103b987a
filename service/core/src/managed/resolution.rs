//! The consent resolution result (spec/service.md §1): what resolving or recovering
//! a consent challenge reports. The operations that produce it (`resolve_consent`,
//! `recover_consent`) arrive with the signed-decision slice; the value and its invariants are
//! part of the public contract now.

use ctx_model::{is_sha, is_token};

use super::error::ServiceError;
use super::result::{ACTION_SUMMARIES_MAX, ActionSummary, ConsentChallengeProjection};

/// The nine outcomes of a consent resolution.
pub mod outcome {
    pub const CONSENT_REQUIRED: &str = "consent-required";
    pub const REAUTHENTICATION_REQUIRED: &str = "reauthentication-required";
    pub const DENIED: &str = "denied";
    pub const INSTALLED_INACTIVE: &str = "installed-inactive";
    pub const INSTALL_FAILED: &str = "install-failed";
    pub const INSTALL_INDETERMINATE: &str = "install-indeterminate";
    pub const EXPIRED: &str = "expired";
    pub const QUARANTINED: &str = "quarantined";
    pub const SUPERSEDED: &str = "superseded";
    pub const ALL: [&str; 9] = [
        CONSENT_REQUIRED,
        REAUTHENTICATION_REQUIRED,
        DENIED,
        INSTALLED_INACTIVE,
        INSTALL_FAILED,
        INSTALL_INDETERMINATE,
        EXPIRED,
        QUARANTINED,
        SUPERSEDED,
    ];
}

/// The identity of the challenge being resolved.
#[derive(Debug)]
pub struct ResolvedChallenge<'a> {
    pub challenge_digest: &'a str,
    pub capability_id: &'a str,
    pub kind: &'a str,
}

/// What resolving or recovering one consent challenge reports. Not `Clone`, not serializable;
/// built only by the service, through [`ConsentResolutionResult::new`].
#[derive(Debug)]
pub struct ConsentResolutionResult {
    challenge_digest: String,
    capability_id: String,
    kind: String,
    outcome: &'static str,
    reason_code: String,
    next_challenge: Option<ConsentChallengeProjection>,
    actions: Vec<ActionSummary>,
    journal_revision: u64,
    journal_record_digest: String,
}

impl ConsentResolutionResult {
    /// Builds a result under the creation checks of spec/service.md §1.
    pub(crate) fn new(
        resolved: &ResolvedChallenge<'_>,
        outcome: &'static str,
        reason_code: &str,
        next_challenge: Option<ConsentChallengeProjection>,
        actions: Vec<ActionSummary>,
        journal_revision: u64,
        journal_record_digest: &str,
    ) -> Result<ConsentResolutionResult, ServiceError> {
        crate::failpoint::fail_point!(super::failpoints::CONSENT_BEFORE_RESULT);
        if !outcome::ALL.contains(&outcome) {
            return Err(ServiceError::Identity(
                "managed consent resolution outcome is invalid",
            ));
        }
        if !is_token(reason_code) || actions.len() > ACTION_SUMMARIES_MAX {
            return Err(ServiceError::Identity(
                "managed consent resolution projection is invalid",
            ));
        }
        let needs_next =
            outcome == outcome::CONSENT_REQUIRED || outcome == outcome::REAUTHENTICATION_REQUIRED;
        if needs_next != next_challenge.is_some() {
            return Err(ServiceError::Identity(
                "managed consent resolution next challenge is inconsistent",
            ));
        }
        if let Some(next) = &next_challenge {
            if outcome == outcome::REAUTHENTICATION_REQUIRED
                && next.challenge_digest() != resolved.challenge_digest
            {
                return Err(ServiceError::Identity(
                    "managed consent reauthentication changed challenge identity",
                ));
            }
            if next.capability_id() != resolved.capability_id || next.kind() != resolved.kind {
                return Err(ServiceError::Identity(
                    "managed consent next challenge changed capability identity",
                ));
            }
        }
        if journal_revision < 1 {
            return Err(ServiceError::Identity(
                "managed consent journal revision is invalid",
            ));
        }
        if !is_sha(journal_record_digest) {
            return Err(ServiceError::Identity(
                "managed consent journal digest is invalid",
            ));
        }
        Ok(ConsentResolutionResult {
            challenge_digest: resolved.challenge_digest.to_owned(),
            capability_id: resolved.capability_id.to_owned(),
            kind: resolved.kind.to_owned(),
            outcome,
            reason_code: reason_code.to_owned(),
            next_challenge,
            actions,
            journal_revision,
            journal_record_digest: journal_record_digest.to_owned(),
        })
    }

    pub fn challenge_digest(&self) -> &str {
        &self.challenge_digest
    }
    pub fn capability_id(&self) -> &str {
        &self.capability_id
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn outcome(&self) -> &'static str {
        self.outcome
    }
    pub fn reason_code(&self) -> &str {
        &self.reason_code
    }
    pub fn next_challenge(&self) -> Option<&ConsentChallengeProjection> {
        self.next_challenge.as_ref()
    }
    pub fn actions(&self) -> &[ActionSummary] {
        &self.actions
    }
    pub fn journal_revision(&self) -> u64 {
        self.journal_revision
    }
    pub fn journal_record_digest(&self) -> &str {
        &self.journal_record_digest
    }
}
