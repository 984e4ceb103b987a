//! The evidence of every consent decision (spec/decisions.md §12.5): the signed assertion itself,
//! with the verifier kind, its assurance and the assurance the decision needed, journaled before
//! the decision is recorded so that `ctx audit` can verify every decision again offline.
//!
//! The consent store's decision record keeps only the assertion's nonce digest (its format is
//! the reference's, spec/projections.md §8.1), which proves nothing about who signed. The evidence
//! stream keeps the signature. It is written before the decision so that a crash between the two
//! leaves evidence without a decision (harmless: an attempt that did not count), never a decision
//! without evidence.

use ctx_journal::{
    ExpectedRevision, Journal, NewRecord, Record, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{CapabilityKind, Json, sha256_hex};
use ctx_projections::consent_store::{
    CHALLENGE_STREAM_RECORDS_MAX, InstallConsentChallenge, SignedHumanDecisionAssertion,
};
use ctx_projections::streams::{
    CHALLENGE_KIND, DECISION_EVIDENCE_KIND, DECISION_EVIDENCE_NAMESPACE, DECISION_READY_KIND,
};

use super::delegated::{DelegatedBasis, check_delegated};
use super::webauthn::WebAuthnProof;

use super::{Assurance, TrustError, TrustState, VerifierEntry, required_assurance};

/// Most evidence records one challenge may collect (each a verified attempt; a decision is
/// recorded once, so more than a few means someone is replaying): reads stop there.
pub const DECISION_EVIDENCE_RECORDS_MAX: usize = 64;

/// The evidence stream of the challenge with `challenge_digest`.
fn evidence_stream(challenge_digest: &str) -> Result<StreamId, TrustError> {
    StreamId::derive(DECISION_EVIDENCE_NAMESPACE, challenge_digest.as_bytes())
        .map_err(|e| TrustError::Entry(format!("challenge digest {challenge_digest:?}: {e}")))
}

/// The evidence records of the challenge `challenge_digest` whose assertion decodes, oldest first.
pub(super) fn read_evidence(
    journal: &Journal,
    challenge_digest: &str,
) -> Result<Vec<(Record, SignedHumanDecisionAssertion)>, TrustError> {
    Ok(journal
        .read_stream(
            &evidence_stream(challenge_digest)?,
            1,
            DECISION_EVIDENCE_RECORDS_MAX,
        )?
        .into_iter()
        .filter_map(|record| {
            let value = Json::parse(std::str::from_utf8(&record.payload).ok()?).ok()?;
            let assertion =
                SignedHumanDecisionAssertion::decode(value.get_str("assertion")?.as_bytes())
                    .ok()?;
            Some((record, assertion))
        })
        .collect())
}

/// The capability kind a capability id names by its prefix (`skill:`, `agent:`, `mcp:`).
pub fn capability_kind_of(capability_id: &str) -> CapabilityKind {
    match capability_id.split_once(':').map(|(kind, _)| kind) {
        Some("skill") => CapabilityKind::Skill,
        Some("mcp") => CapabilityKind::McpServer,
        _ => CapabilityKind::Agent,
    }
}

/// Journals the evidence of a decision the caller verified against `entry` (spec/decisions.md
/// §12.5). Writing the same assertion twice writes one record.
pub fn record_decision_evidence(
    journal: &Journal,
    assertion: &SignedHumanDecisionAssertion,
    entry: &VerifierEntry,
    required: Assurance,
    now: Timestamp,
) -> Result<(), TrustError> {
    record_evidence(journal, assertion, entry, required, None, now)
}

/// Journals the evidence of a decision ctx records for the person on `basis` (spec/decisions.md
/// §16.3), checked by the caller; `entry` is the verifier the basis rests on.
pub fn record_delegated_evidence(
    journal: &Journal,
    assertion: &SignedHumanDecisionAssertion,
    entry: &VerifierEntry,
    required: Assurance,
    basis: &DelegatedBasis,
    now: Timestamp,
) -> Result<(), TrustError> {
    record_evidence(journal, assertion, entry, required, Some(basis), now)
}

fn record_evidence(
    journal: &Journal,
    assertion: &SignedHumanDecisionAssertion,
    entry: &VerifierEntry,
    required: Assurance,
    basis: Option<&DelegatedBasis>,
    now: Timestamp,
) -> Result<(), TrustError> {
    let encoded = assertion
        .encode()
        .map_err(|e| TrustError::Entry(format!("the decision's assertion: {e}")))?;
    let encoded = String::from_utf8(encoded)
        .map_err(|_| TrustError::Entry("the decision's assertion is not UTF-8".to_owned()))?;
    let mut fields = vec![
        ("assertion", Json::str(encoded)),
        ("assurance", Json::str(entry.assurance().as_str())),
        ("challenge_digest", Json::str(assertion.challenge_digest())),
        ("required_assurance", Json::str(required.as_str())),
        ("verifier_kind", Json::str(entry.kind.as_str())),
    ];
    if let Some(basis) = basis {
        fields.push(("basis", Json::str(basis.kind())));
    }
    let payload = Json::object(fields).to_cja();
    let event_id = format!("decision-evidence-{}", &sha256_hex(&payload)[..48]);
    let stream = evidence_stream(assertion.challenge_digest())?;
    // A replayed assertion is already in evidence (its record carries the first attempt's time,
    // so appending it again would be a different record under the same event id).
    if journal
        .read_stream(&stream, 1, DECISION_EVIDENCE_RECORDS_MAX)?
        .iter()
        .any(|r| r.event_id == event_id)
    {
        return Ok(());
    }
    let append = StreamAppend::new(
        stream,
        ExpectedRevision::Any,
        vec![NewRecord::new(
            event_id,
            DECISION_EVIDENCE_KIND,
            now,
            payload.into_bytes(),
        )],
    );
    journal
        .append(append)
        .map_err(|e| TrustError::Evidence(Box::new(e)))?;
    Ok(())
}

/// One decision `ctx audit` checked, and what it found wrong (nothing when `problem` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionCheck {
    pub challenge_digest: String,
    pub capability_id: String,
    pub decision: String,
    pub authenticator_id: String,
    /// The verifier kind and assurance the evidence shows, when there is evidence.
    pub verifier_kind: Option<String>,
    pub assurance: Option<Assurance>,
    pub required: Assurance,
    pub problem: Option<String>,
}

/// Re-verifies every recorded consent decision of `journal` against the registry `trust` as it
/// stood when the decision was recorded (spec/decisions.md §12.5): the evidence exists, its
/// assertion is the one the decision names, its signature verifies with the verifier registered
/// then, and that verifier's assurance meets what the challenge needed.
pub fn audit_decisions(
    journal: &Journal,
    trust: &TrustState,
    hook_published: &dyn Fn(&str) -> bool,
) -> Result<Vec<DecisionCheck>, TrustError> {
    let mut challenge_streams = Vec::new();
    journal
        .visit_streams(|info| {
            if info.first_kind.as_deref() == Some(CHALLENGE_KIND) {
                challenge_streams.push(info.stream);
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| TrustError::Entry(format!("the journal's streams: {e}")))?;
    let mut challenges = Vec::new();
    for stream in challenge_streams {
        let records = journal.read_stream(
            &stream,
            1,
            usize::try_from(CHALLENGE_STREAM_RECORDS_MAX).unwrap_or(usize::MAX),
        )?;
        let Some(first) = records.first() else {
            continue;
        };
        // A challenge that does not decode is the consent store's to report (the projection
        // check of the audit); it has no decision this check could judge.
        let Some(challenge) = std::str::from_utf8(&first.payload)
            .ok()
            .and_then(|text| InstallConsentChallenge::from_json_text(text).ok())
        else {
            continue;
        };
        challenges.push((challenge, records));
    }
    let earlier = |digest: &str| {
        challenges
            .iter()
            .find(|(c, _)| c.challenge_digest() == digest)
            .map(|(c, _)| c.clone())
    };
    let mut checks = Vec::new();
    for (challenge, records) in &challenges {
        for record in records.iter().filter(|r| r.kind == DECISION_READY_KIND) {
            checks.push(check_decision(
                journal,
                trust,
                challenge,
                record,
                hook_published,
                &earlier,
            )?);
        }
    }
    Ok(checks)
}

fn check_decision(
    journal: &Journal,
    trust: &TrustState,
    challenge: &InstallConsentChallenge,
    record: &Record,
    hook_published: &dyn Fn(&str) -> bool,
    earlier: &dyn Fn(&str) -> Option<InstallConsentChallenge>,
) -> Result<DecisionCheck, TrustError> {
    let required = required_assurance(
        capability_kind_of(challenge.capability_id()),
        challenge.permission_expansion(),
        challenge.credential_requirement(),
        hook_published(&challenge.scope().session_id),
    );
    let fields = std::str::from_utf8(&record.payload)
        .ok()
        .and_then(|text| Json::parse(text).ok())
        .unwrap_or(Json::Null);
    let field = |key: &str| fields.get_str(key).unwrap_or_default().to_owned();
    let mut check = DecisionCheck {
        challenge_digest: challenge.challenge_digest().to_owned(),
        capability_id: challenge.capability_id().to_owned(),
        decision: field("decision"),
        authenticator_id: field("authenticator_id"),
        verifier_kind: None,
        assurance: None,
        required,
        problem: None,
    };
    let nonce_digest = field("assertion_nonce_digest");
    let principal = field("principal_digest");
    let evidence = journal.read_stream(
        &evidence_stream(challenge.challenge_digest())?,
        1,
        DECISION_EVIDENCE_RECORDS_MAX,
    )?;
    let found = evidence.iter().find_map(|e| {
        let value = Json::parse(std::str::from_utf8(&e.payload).ok()?).ok()?;
        let assertion =
            SignedHumanDecisionAssertion::decode(value.get_str("assertion")?.as_bytes()).ok()?;
        (assertion.nonce_digest() == nonce_digest).then_some((value, assertion))
    });
    let Some((value, assertion)) = found else {
        check.problem = Some("no signed assertion was journaled for this decision".to_owned());
        return Ok(check);
    };
    check.verifier_kind = value.get_str("verifier_kind").map(str::to_owned);
    check.assurance = value.get_str("assurance").and_then(Assurance::parse);
    if assertion.decision().as_str() != check.decision
        || assertion.authenticator_id() != check.authenticator_id
        || assertion.principal_digest() != principal
        || assertion.challenge_digest() != challenge.challenge_digest()
    {
        check.problem = Some("the journaled assertion is not the one the decision names".into());
        return Ok(check);
    }
    // A decision ctx recorded for the person rests on one they signed before (§16.3).
    if let Some(basis) = DelegatedBasis::of_proof(assertion.proof()) {
        match check_delegated(
            journal,
            trust,
            challenge,
            &assertion,
            &basis,
            record.position,
            required,
            earlier,
        ) {
            Ok(entry) => {
                check.verifier_kind = Some(entry.kind.as_str().to_owned());
                check.assurance = Some(entry.assurance());
            }
            Err(problem) => check.problem = Some(format!("its {} basis: {problem}", basis.kind())),
        }
        return Ok(check);
    }
    let Some(registered) = trust.at_position(assertion.authenticator_id(), record.position) else {
        check.problem = Some(format!(
            "{} was not a registered verifier when the decision was recorded",
            assertion.authenticator_id()
        ));
        return Ok(check);
    };
    let entry = &registered.entry;
    if check.verifier_kind.as_deref() != Some(entry.kind.as_str())
        || check.assurance != Some(entry.assurance())
    {
        check.problem = Some(format!(
            "the evidence names a {} verifier of {} assurance, but {} is a {} of {}",
            check.verifier_kind.as_deref().unwrap_or("missing"),
            check.assurance.map_or("missing", Assurance::as_str),
            entry.authenticator_id,
            entry.kind.as_str(),
            entry.assurance()
        ));
        return Ok(check);
    }
    if !entry.verifies(&assertion) {
        check.problem = Some(format!(
            "the assertion's signature does not verify with {}",
            entry.authenticator_id
        ));
        return Ok(check);
    }
    if entry.assurance() < required {
        check.problem = Some(format!(
            "{} has {} assurance; this consent needed {required}",
            entry.authenticator_id,
            entry.assurance()
        ));
    }
    Ok(check)
}

/// The highest passkey signature counter any journaled decision of `authenticator_id` showed
/// (spec/webauthn.md §6): evidence is written only for verified decisions, so every counter here
/// was signed by the credential. `None` when it decided nothing yet. Reads every evidence stream:
/// a person's decision is rare enough that the scan is not on any hook's path.
pub fn highest_passkey_counter(
    journal: &Journal,
    authenticator_id: &str,
) -> Result<Option<u32>, TrustError> {
    let mut streams = Vec::new();
    journal
        .visit_streams(|info| {
            if info.first_kind.as_deref() == Some(DECISION_EVIDENCE_KIND) {
                streams.push(info.stream);
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| TrustError::Entry(format!("the journal's streams: {e}")))?;
    let mut highest = None;
    for stream in streams {
        for record in journal.read_stream(&stream, 1, DECISION_EVIDENCE_RECORDS_MAX)? {
            let counter = std::str::from_utf8(&record.payload)
                .ok()
                .and_then(|text| Json::parse(text).ok())
                .and_then(|value| {
                    SignedHumanDecisionAssertion::decode(value.get_str("assertion")?.as_bytes())
                        .ok()
                })
                .filter(|assertion| assertion.authenticator_id() == authenticator_id)
                .and_then(|assertion| WebAuthnProof::decode(assertion.proof()).ok())
                .and_then(|proof| proof.sign_count());
            highest = highest.max(counter);
        }
    }
    Ok(highest)
}
