//! The trusted verifier registry (spec/decisions.md §7): one verifier per exact
//! (audience, authenticator_id, principal_digest) triple, each pinned to its triple and to the
//! process that built it. No fallback, no wildcard.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use ctx_model::{is_sha, is_token};
use ctx_projections::consent_store::SignedHumanDecisionAssertion;

use super::{DecisionError, HumanDecisionVerifier, ct_eq, invalid};

/// A registration used in a process other than the one that created it.
pub const REGISTRATION_PROCESS_MISMATCH: &str =
    "human decision verifier registration cannot cross a process boundary";
/// The registry used in a process other than the one that built it.
pub const REGISTRY_PROCESS_MISMATCH: &str =
    "human decision verifier registry cannot cross a process boundary";
/// A pinned verifier used in a process other than the one that built it.
pub const PINNED_PROCESS_MISMATCH: &str = "human decision verifier cannot cross a process boundary";

/// The lookup key: (audience, authenticator_id, principal_digest).
type Triple = (String, String, String);

fn triple_of(assertion: &SignedHumanDecisionAssertion) -> (&str, &str, &str) {
    (
        assertion.audience(),
        assertion.authenticator_id(),
        assertion.principal_digest(),
    )
}

/// One trusted verifier for one exact triple, bound to the creating process. Not `Clone` and not
/// serializable (the reference refuses copies); equal when the three identity strings are equal;
/// `Debug` redacts the identity.
pub struct HumanDecisionVerifierRegistration {
    audience: String,
    authenticator_id: String,
    principal_digest: String,
    verifier: Arc<dyn HumanDecisionVerifier>,
    pid: u32,
}

impl fmt::Debug for HumanDecisionVerifierRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<human-decision-verifier-registration identity=redacted>")
    }
}

impl PartialEq for HumanDecisionVerifierRegistration {
    fn eq(&self, other: &Self) -> bool {
        self.audience == other.audience
            && self.authenticator_id == other.authenticator_id
            && self.principal_digest == other.principal_digest
    }
}

impl Eq for HumanDecisionVerifierRegistration {}

impl HumanDecisionVerifierRegistration {
    /// Validates the identity in the reference's order (audience and authenticator_id tokens,
    /// principal_digest a digest) and records the current process.
    pub fn new(
        audience: impl Into<String>,
        authenticator_id: impl Into<String>,
        principal_digest: impl Into<String>,
        verifier: Arc<dyn HumanDecisionVerifier>,
    ) -> Result<HumanDecisionVerifierRegistration, DecisionError> {
        let (audience, authenticator_id, principal_digest) = (
            audience.into(),
            authenticator_id.into(),
            principal_digest.into(),
        );
        if !is_token(&audience) {
            return Err(invalid("audience must be a bounded canonical token"));
        }
        if !is_token(&authenticator_id) {
            return Err(invalid(
                "authenticator_id must be a bounded canonical token",
            ));
        }
        if !is_sha(&principal_digest) {
            return Err(invalid(
                "principal_digest must be a lowercase SHA-256 digest",
            ));
        }
        Ok(HumanDecisionVerifierRegistration {
            audience,
            authenticator_id,
            principal_digest,
            verifier,
            pid: std::process::id(),
        })
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }
    pub fn authenticator_id(&self) -> &str {
        &self.authenticator_id
    }
    pub fn principal_digest(&self) -> &str {
        &self.principal_digest
    }

    /// Tests only: the registration as a forked child would see it (another process's id).
    #[cfg(test)]
    pub(super) fn with_pid(mut self, pid: u32) -> HumanDecisionVerifierRegistration {
        self.pid = pid;
        self
    }
}

/// The immutable set of trusted verifiers, bound to the process that built it. Not `Clone` and
/// not serializable; `Debug` shows only the count.
pub struct TrustedHumanDecisionVerifierRegistry {
    entries: BTreeMap<Triple, PinnedVerifier>,
    pid: u32,
}

impl fmt::Debug for TrustedHumanDecisionVerifierRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<trusted-human-decision-verifier-registry count={}>",
            self.entries.len()
        )
    }
}

impl TrustedHumanDecisionVerifierRegistry {
    /// Builds the registry in the reference's order: for each registration, the process check
    /// ([`REGISTRATION_PROCESS_MISMATCH`]) then the duplicate check
    /// ([`DecisionError::DuplicateRegistration`]); then at least one registration
    /// ([`DecisionError::NoRegistrations`]). Each entry is pinned to its triple and this process.
    pub fn new(
        registrations: Vec<HumanDecisionVerifierRegistration>,
    ) -> Result<TrustedHumanDecisionVerifierRegistry, DecisionError> {
        let pid = std::process::id();
        let mut entries = BTreeMap::new();
        for registration in registrations {
            if registration.pid != pid {
                return Err(DecisionError::ProcessMismatch {
                    message: REGISTRATION_PROCESS_MISMATCH,
                });
            }
            let HumanDecisionVerifierRegistration {
                audience,
                authenticator_id,
                principal_digest,
                verifier,
                pid: _,
            } = registration;
            let key = (audience, authenticator_id, principal_digest);
            if entries.contains_key(&key) {
                return Err(DecisionError::DuplicateRegistration);
            }
            let pinned = PinnedVerifier {
                key: key.clone(),
                verifier,
                pid,
            };
            entries.insert(key, pinned);
        }
        if entries.is_empty() {
            return Err(DecisionError::NoRegistrations);
        }
        Ok(TrustedHumanDecisionVerifierRegistry { entries, pid })
    }

    /// The pinned verifier for the assertion's exact (audience, authenticator_id,
    /// principal_digest): [`REGISTRY_PROCESS_MISMATCH`] in another process,
    /// [`DecisionError::UnknownVerifier`] when no registration has that triple.
    pub fn resolve(
        &self,
        assertion: &SignedHumanDecisionAssertion,
    ) -> Result<&PinnedVerifier, DecisionError> {
        if self.pid != std::process::id() {
            return Err(DecisionError::ProcessMismatch {
                message: REGISTRY_PROCESS_MISMATCH,
            });
        }
        let (audience, authenticator_id, principal_digest) = triple_of(assertion);
        let key = (
            audience.to_owned(),
            authenticator_id.to_owned(),
            principal_digest.to_owned(),
        );
        self.entries.get(&key).ok_or(DecisionError::UnknownVerifier)
    }

    /// The number of registrations (at least one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a registry has at least one registration.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tests only: the registry as a forked child would see it.
    #[cfg(test)]
    pub(super) fn with_pid(mut self, pid: u32) -> TrustedHumanDecisionVerifierRegistry {
        self.pid = pid;
        for pinned in self.entries.values_mut() {
            pinned.pid = pid;
        }
        self
    }

    /// Tests only: a pinned verifier without the registry's process check.
    #[cfg(test)]
    pub(super) fn any_pinned(&self) -> Option<&PinnedVerifier> {
        self.entries.values().next()
    }
}

/// A registered verifier pinned to its triple and to the process (spec/decisions.md §7 "pinned
/// verifier"). Only the registry makes one. `Debug` is `<pinned-human-decision-verifier>`.
pub struct PinnedVerifier {
    key: Triple,
    verifier: Arc<dyn HumanDecisionVerifier>,
    pid: u32,
}

impl fmt::Debug for PinnedVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<pinned-human-decision-verifier>")
    }
}

impl PinnedVerifier {
    /// The reference's pinned `verify_signed_assertion`, with its raising branch kept apart:
    /// `Err(ProcessMismatch)` ([`PINNED_PROCESS_MISMATCH`]) in another process; `Ok(false)` when
    /// the assertion's triple is not the pinned one or `signing_bytes` differ (constant time)
    /// from the assertion's recomputed signing bytes; otherwise the inner verifier's answer over
    /// the recomputed bytes.
    pub fn try_verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> Result<bool, DecisionError> {
        if self.pid != std::process::id() {
            return Err(DecisionError::ProcessMismatch {
                message: PINNED_PROCESS_MISMATCH,
            });
        }
        let (audience, authenticator_id, principal_digest) = triple_of(assertion);
        let same_triple = ct_eq(audience.as_bytes(), self.key.0.as_bytes())
            & ct_eq(authenticator_id.as_bytes(), self.key.1.as_bytes())
            & ct_eq(principal_digest.as_bytes(), self.key.2.as_bytes());
        if !same_triple {
            return Ok(false);
        }
        let recomputed = assertion.signing_bytes();
        if !ct_eq(signing_bytes, &recomputed) {
            return Ok(false);
        }
        Ok(self
            .verifier
            .verify_signed_assertion(assertion, &recomputed))
    }
}

impl HumanDecisionVerifier for PinnedVerifier {
    /// [`PinnedVerifier::try_verify_signed_assertion`], a process mismatch counting as `false`.
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        self.try_verify_signed_assertion(assertion, signing_bytes)
            .unwrap_or(false)
    }
}
