//! Decisions the runtime records for the person from one they already signed (spec/decisions.md
//! §16.3): the consent verifiers accept a delegated assertion only when this process checked its
//! basis against the signed registry a moment before, for that exact challenge.

use std::sync::{Arc, Mutex};

use ctx_model::{UtcMicros, sha256_hex};
use ctx_projections::consent_store::{
    AssertionFields, ChallengeState, SignedHumanDecisionAssertion,
};

use super::{CONSENT_AUDIENCE, ChallengeReader, Runtime, RuntimeError};
use crate::decision::HumanDecisionVerifier;
use crate::managed::ConsentResolutionResult;
use crate::trust::{
    DelegatedBasis, VerifierEntry, capability_kind_of, challenge_scope, check_delegated,
    indexed_grants, record_delegated_evidence, required_assurance, signed_grant,
};

/// How long a delegated assertion is valid, in seconds: it is resolved at once.
const DELEGATED_ASSERTION_TTL_SECONDS: i64 = 60;

/// One delegated assertion this process checked: (authenticator id, challenge digest, proof).
type Admitted = (String, String, Vec<u8>);

/// The delegated assertions this process checked.
#[derive(Debug, Default, Clone)]
pub(super) struct Admissions(Arc<Mutex<Vec<Admitted>>>);

impl Admissions {
    fn admit(&self, authenticator_id: &str, challenge_digest: &str, proof: &[u8]) {
        if let Ok(mut admitted) = self.0.lock() {
            admitted.push((
                authenticator_id.to_owned(),
                challenge_digest.to_owned(),
                proof.to_vec(),
            ));
        }
    }

    fn admits(&self, authenticator_id: &str, challenge_digest: &str, proof: &[u8]) -> bool {
        self.0.lock().is_ok_and(|admitted| {
            admitted
                .iter()
                .any(|(a, c, p)| a == authenticator_id && c == challenge_digest && p == proof)
        })
    }
}

/// A registered verifier that also accepts the delegated assertions its process admitted. A
/// delegated proof is never a signature, so nothing else can pass for one.
#[derive(Debug)]
pub(super) struct AdmittingVerifier {
    pub(super) inner: Arc<dyn HumanDecisionVerifier>,
    pub(super) authenticator_id: String,
    pub(super) admissions: Admissions,
}

impl HumanDecisionVerifier for AdmittingVerifier {
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        if DelegatedBasis::of_proof(assertion.proof()).is_some() {
            return self.admissions.admits(
                &self.authenticator_id,
                assertion.challenge_digest(),
                assertion.proof(),
            );
        }
        self.inner.verify_signed_assertion(assertion, signing_bytes)
    }
}

impl Runtime {
    /// Resolves the pending challenge `challenge_digest` without asking when the person already
    /// decided it (spec/decisions.md §16.3): a standing decision in force that covers it (a grant
    /// or a denial), or else a grant they signed at an earlier challenge for the same exact
    /// install. `None` when nothing covers it, so the person must be asked; otherwise the basis
    /// it rested on and the resolution.
    pub fn resolve_delegated(
        &self,
        challenge_digest: &str,
        hook_published: &dyn Fn(&str) -> bool,
    ) -> Result<Option<(DelegatedBasis, ConsentResolutionResult)>, RuntimeError> {
        let now = self.now();
        let reader = ChallengeReader::open(&self.layout)?;
        let record = reader.get(challenge_digest, now)?;
        if record.state() != ChallengeState::Pending {
            return Ok(None);
        }
        let challenge = record.challenge();
        let (session, workspace) = challenge_scope(challenge);
        let required = required_assurance(
            capability_kind_of(challenge.capability_id()),
            challenge.permission_expansion(),
            challenge.credential_requirement(),
            hook_published(&challenge.scope().session_id),
        );
        let journal = crate::managed::open_service_journal(&self.layout.journal())?;
        let earlier = |d: &str| reader.get(d, now).ok().map(|r| r.challenge().clone());
        // The candidates in order: the standing decision, then the signed grants, newest first.
        let mut candidates: Vec<(DelegatedBasis, bool, VerifierEntry)> = Vec::new();
        if let Some(standing) = self.trust.standing_for(
            challenge.capability_id(),
            challenge.descriptor_digest(),
            challenge.material_identity_digest(),
            session,
            workspace,
        ) && let Some(signer) = self.trust.find(&standing.decided_by)
        {
            candidates.push((
                DelegatedBasis::Standing(standing.id.clone()),
                standing.decision.granted,
                signer.entry.clone(),
            ));
        }
        if candidates.is_empty() {
            for digest in indexed_grants(&journal, challenge)? {
                let Some(before) = earlier(&digest) else {
                    continue;
                };
                if let Some(entry) =
                    signed_grant(&journal, &self.trust, &before, challenge, u64::MAX)?
                {
                    candidates.push((DelegatedBasis::Installed(digest), true, entry));
                    break;
                }
            }
        }
        for (basis, granted, entry) in candidates {
            let assertion = delegated_assertion(&entry, challenge_digest, granted, &basis, now)?;
            if check_delegated(
                &journal,
                &self.trust,
                challenge,
                &assertion,
                &basis,
                u64::MAX,
                required,
                &earlier,
            )
            .is_err()
            {
                continue;
            }
            self.admissions
                .admit(&entry.authenticator_id, challenge_digest, assertion.proof());
            record_delegated_evidence(
                &journal,
                &assertion,
                &entry,
                required,
                &basis,
                ctx_journal::Timestamp(now.0),
            )?;
            let payload = assertion
                .encode()
                .map_err(|e| RuntimeError::Invalid(e.to_string()))?;
            let result = self.service.resolve_consent(&payload)?;
            return Ok(Some((basis, result)));
        }
        Ok(None)
    }
}

/// The assertion ctx records for the person: the signer of the basis, the basis as its proof.
fn delegated_assertion(
    entry: &VerifierEntry,
    challenge_digest: &str,
    granted: bool,
    basis: &DelegatedBasis,
    now: UtcMicros,
) -> Result<SignedHumanDecisionAssertion, RuntimeError> {
    let proof = basis.proof();
    let nonce = format!(
        "ctx-delegated-{}",
        &sha256_hex(&format!(
            "{}\n{challenge_digest}\n{}",
            String::from_utf8_lossy(&proof),
            now.0
        ))[..32]
    );
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge_digest.to_owned(),
        decision: if granted { "granted" } else { "denied" }.to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: CONSENT_AUDIENCE.to_owned(),
        nonce,
        issued_at: now.render(),
        expires_at: UtcMicros(
            now.0
                .saturating_add(DELEGATED_ASSERTION_TTL_SECONDS * 1_000_000),
        )
        .render(),
        proof,
    })
    .map_err(|e| RuntimeError::Invalid(e.to_string()))
}
