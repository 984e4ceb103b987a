//! Decisions ctx records for the person from one they already signed (spec/decisions.md §16.3):
//! a challenge covered by a standing decision, or a challenge for material the person already
//! granted at an earlier challenge. The assertion ctx records names the signer of that earlier
//! decision and carries, instead of a signature, a reference to it; the reference is checked
//! against the signed registry (and the earlier signed assertion) when the decision is made and
//! again by `ctx audit`, so the journal alone never authorizes anything.

use ctx_journal::{ExpectedRevision, Journal, NewRecord, StreamAppend, StreamId, Timestamp};
use ctx_model::{Json, is_sha, sha256_hex};
use ctx_projections::consent_store::{InstallConsentChallenge, SignedHumanDecisionAssertion};
use ctx_projections::streams::{INSTALL_GRANT_KIND, INSTALL_GRANTS_NAMESPACE};

use super::evidence::read_evidence;
use super::{Assurance, TrustError, TrustState, VerifierEntry};

/// The proof bytes of a decision covered by a standing decision: this prefix and its id.
pub const STANDING_PROOF_PREFIX: &str = "ctx-standing:";
/// The proof bytes of a decision for material granted before: this prefix and the digest of the
/// challenge where the person signed the grant.
pub const INSTALLED_PROOF_PREFIX: &str = "ctx-installed:";
/// Most grants of one exact install the index keeps reading, newest first.
pub const INSTALL_GRANTS_READ_MAX: usize = 64;

/// What a decision recorded for the person rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelegatedBasis {
    /// A standing decision in force, by id.
    Standing(String),
    /// A grant the person signed at an earlier challenge for the same exact install.
    Installed(String),
}

impl DelegatedBasis {
    pub fn proof(&self) -> Vec<u8> {
        match self {
            DelegatedBasis::Standing(id) => format!("{STANDING_PROOF_PREFIX}{id}"),
            DelegatedBasis::Installed(digest) => format!("{INSTALLED_PROOF_PREFIX}{digest}"),
        }
        .into_bytes()
    }

    /// The basis a proof names, or `None` for a signature.
    pub fn of_proof(proof: &[u8]) -> Option<DelegatedBasis> {
        let text = std::str::from_utf8(proof).ok()?;
        if let Some(id) = text.strip_prefix(STANDING_PROOF_PREFIX) {
            return Some(DelegatedBasis::Standing(id.to_owned()));
        }
        text.strip_prefix(INSTALLED_PROOF_PREFIX)
            .filter(|d| is_sha(d))
            .map(|d| DelegatedBasis::Installed(d.to_owned()))
    }

    /// The standing decision id or the earlier challenge's digest.
    pub fn reference(&self) -> &str {
        match self {
            DelegatedBasis::Standing(r) | DelegatedBasis::Installed(r) => r,
        }
    }

    /// `standing` or `installed`.
    pub fn kind(&self) -> &'static str {
        match self {
            DelegatedBasis::Standing(_) => "standing",
            DelegatedBasis::Installed(_) => "installed",
        }
    }
}

/// The host session an engine session of a hook or of `query prepare` belongs to: each prompt is
/// planned as `<host session>:<16 hex>` (`query prepare`: host session `api:<session_id>`) and
/// each install a hook chooses as `<host session>:<16 hex>:i` (earlier versions: `…:load`),
/// spec/cli.md §3 and §7.3; any other session id is its own.
pub fn host_session_of(engine_session_id: &str) -> &str {
    let base = engine_session_id
        .strip_suffix(":i")
        .or_else(|| engine_session_id.strip_suffix(":load"))
        .unwrap_or(engine_session_id);
    match base.rsplit_once(':') {
        Some((head, tail))
            if tail.len() == 16
                && tail.bytes().all(|b| b.is_ascii_hexdigit())
                && head.contains(':') =>
        {
            head
        }
        _ => engine_session_id,
    }
}

/// Where a challenge stands for scopes: (host session, workspace id).
pub fn challenge_scope(challenge: &InstallConsentChallenge) -> (&str, &str) {
    let scope = challenge.scope();
    (host_session_of(&scope.session_id), &scope.workspace_id)
}

fn binds(a: &InstallConsentChallenge, b: &InstallConsentChallenge) -> bool {
    a.capability_id() == b.capability_id()
        && a.descriptor_digest() == b.descriptor_digest()
        && a.material_identity_digest() == b.material_identity_digest()
}

/// The verifier of the grant the person signed at `earlier` (a challenge for the same exact
/// install as `challenge`), if its evidence holds a granted assertion whose signature verifies
/// with a verifier registered when it was journaled, and the grant was not revoked before
/// `position`.
pub fn signed_grant(
    journal: &Journal,
    trust: &TrustState,
    earlier: &InstallConsentChallenge,
    challenge: &InstallConsentChallenge,
    position: u64,
) -> Result<Option<VerifierEntry>, TrustError> {
    if !binds(earlier, challenge)
        || earlier.challenge_digest() == challenge.challenge_digest()
        || trust.challenge_revoked(earlier.challenge_digest(), position)
    {
        return Ok(None);
    }
    for (record, assertion) in read_evidence(journal, earlier.challenge_digest())? {
        if assertion.decision().as_str() != "granted"
            || DelegatedBasis::of_proof(assertion.proof()).is_some()
        {
            continue;
        }
        let Some(registered) = trust.at_position(assertion.authenticator_id(), record.position)
        else {
            continue;
        };
        if registered.entry.verifies(&assertion) {
            return Ok(Some(registered.entry.clone()));
        }
    }
    Ok(None)
}

/// Why a decision recorded for the person does not hold on its basis (spec/decisions.md §16.3).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BasisRefused {
    #[error("standing decision {id} does not exist")]
    UnknownStanding { id: String },
    #[error("standing decision {id} was not in force")]
    NotInForce { id: String },
    #[error("standing decision {id} is about another install than {capability_id}'s")]
    OtherInstall { id: String, capability_id: String },
    #[error("standing decision {id} does not cover session {session} in {workspace}")]
    OutOfScope {
        id: String,
        session: String,
        workspace: String,
    },
    #[error("the recorded decision is not standing decision {id}'s ({decided} by {by})")]
    NotItsDecision {
        id: String,
        decided: &'static str,
        by: String,
    },
    #[error("{authenticator_id} is not a registered verifier")]
    Unregistered { authenticator_id: String },
    #[error("material granted before can only be granted again, not denied")]
    OnlyGranted,
    #[error("the earlier challenge {digest} does not exist")]
    UnknownChallenge { digest: String },
    #[error("challenge {digest} holds no signed grant of the same install that still stands")]
    NoSignedGrant { digest: String },
    #[error("the recorded decision names {named}, but {signer} signed the grant at {digest}")]
    OtherSigner {
        named: String,
        signer: String,
        digest: String,
    },
    #[error("{authenticator_id} has {has} assurance; this consent needs {required}")]
    Assurance {
        authenticator_id: String,
        has: Assurance,
        required: Assurance,
    },
    #[error("the earlier grant's evidence could not be read: {0}")]
    Evidence(#[from] TrustError),
}

/// Checks a recorded decision's basis (spec/decisions.md §16.3) at journal position `position`
/// (`u64::MAX`: now) and returns the verifier it rests on. `earlier` finds a challenge by digest.
#[allow(clippy::too_many_arguments)]
pub fn check_delegated(
    journal: &Journal,
    trust: &TrustState,
    challenge: &InstallConsentChallenge,
    assertion: &SignedHumanDecisionAssertion,
    basis: &DelegatedBasis,
    position: u64,
    required: Assurance,
    earlier: &dyn Fn(&str) -> Option<InstallConsentChallenge>,
) -> Result<VerifierEntry, BasisRefused> {
    let (session, workspace) = challenge_scope(challenge);
    let entry =
        match basis {
            DelegatedBasis::Standing(id) => {
                let standing = trust
                    .standing()
                    .iter()
                    .find(|e| e.id == *id)
                    .ok_or_else(|| BasisRefused::UnknownStanding { id: id.clone() })?;
                if !standing.stands_at(position) {
                    return Err(BasisRefused::NotInForce { id: id.clone() });
                }
                let d = &standing.decision;
                if !d.binds(
                    challenge.capability_id(),
                    challenge.descriptor_digest(),
                    challenge.material_identity_digest(),
                ) {
                    return Err(BasisRefused::OtherInstall {
                        id: id.clone(),
                        capability_id: challenge.capability_id().to_owned(),
                    });
                }
                if !d.scope.covers(session, workspace) {
                    return Err(BasisRefused::OutOfScope {
                        id: id.clone(),
                        session: session.to_owned(),
                        workspace: workspace.to_owned(),
                    });
                }
                let decided = if d.granted { "granted" } else { "denied" };
                if assertion.decision().as_str() != decided
                    || assertion.authenticator_id() != standing.decided_by
                {
                    return Err(BasisRefused::NotItsDecision {
                        id: id.clone(),
                        decided,
                        by: standing.decided_by.clone(),
                    });
                }
                trust
                    .at_position(&standing.decided_by, position)
                    .map(|v| v.entry.clone())
                    .ok_or_else(|| BasisRefused::Unregistered {
                        authenticator_id: standing.decided_by.clone(),
                    })?
            }
            DelegatedBasis::Installed(digest) => {
                if assertion.decision().as_str() != "granted" {
                    return Err(BasisRefused::OnlyGranted);
                }
                let before = earlier(digest).ok_or_else(|| BasisRefused::UnknownChallenge {
                    digest: digest.clone(),
                })?;
                let entry = signed_grant(journal, trust, &before, challenge, position)?
                    .ok_or_else(|| BasisRefused::NoSignedGrant {
                        digest: digest.clone(),
                    })?;
                if entry.authenticator_id != assertion.authenticator_id() {
                    return Err(BasisRefused::OtherSigner {
                        named: assertion.authenticator_id().to_owned(),
                        signer: entry.authenticator_id,
                        digest: digest.clone(),
                    });
                }
                entry
            }
        };
    if entry.assurance() < required {
        return Err(BasisRefused::Assurance {
            authenticator_id: entry.authenticator_id.clone(),
            has: entry.assurance(),
            required,
        });
    }
    Ok(entry)
}

/// The index of grants a person signed for one exact install (capability id and descriptor
/// digest): the challenges a later challenge for the same install may rest on.
fn grants_stream(capability_id: &str, descriptor_digest: &str) -> Result<StreamId, TrustError> {
    StreamId::derive(
        INSTALL_GRANTS_NAMESPACE,
        format!("{capability_id}\n{descriptor_digest}").as_bytes(),
    )
    .map_err(|e| TrustError::Entry(format!("capability id {capability_id:?}: {e}")))
}

/// Adds the signed grant at `challenge` to the index (once).
pub fn record_install_grant(
    journal: &Journal,
    challenge: &InstallConsentChallenge,
    now: Timestamp,
) -> Result<(), TrustError> {
    let payload = Json::object([
        ("capability_id", Json::str(challenge.capability_id())),
        ("challenge_digest", Json::str(challenge.challenge_digest())),
        (
            "descriptor_digest",
            Json::str(challenge.descriptor_digest()),
        ),
    ])
    .to_cja();
    let event_id = format!("install-grant-{}", &sha256_hex(&payload)[..48]);
    let stream = grants_stream(challenge.capability_id(), challenge.descriptor_digest())?;
    let append = StreamAppend::new(
        stream,
        ExpectedRevision::Any,
        vec![NewRecord::new(
            event_id,
            INSTALL_GRANT_KIND,
            now,
            payload.into_bytes(),
        )],
    );
    match journal.append(append) {
        Ok(_) | Err(ctx_journal::AppendError::Conflict { .. }) => Ok(()),
        Err(e) => Err(TrustError::Evidence(Box::new(e))),
    }
}

/// The challenges the index names for `challenge`'s exact install, newest first. An index entry
/// proves nothing by itself: [`signed_grant`] checks each.
pub fn indexed_grants(
    journal: &Journal,
    challenge: &InstallConsentChallenge,
) -> Result<Vec<String>, TrustError> {
    let stream = grants_stream(challenge.capability_id(), challenge.descriptor_digest())?;
    let head = journal.stream_head(&stream)?.map_or(0, |h| h.revision);
    let from = head
        .saturating_sub(INSTALL_GRANTS_READ_MAX as u64 - 1)
        .max(1);
    let mut digests: Vec<String> = journal
        .read_stream(&stream, from, INSTALL_GRANTS_READ_MAX)?
        .iter()
        .filter_map(|r| std::str::from_utf8(&r.payload).ok())
        .filter_map(|t| Json::parse(t).ok())
        .filter_map(|v| v.get_str("challenge_digest").map(str::to_owned))
        .filter(|d| is_sha(d))
        .collect();
    digests.reverse();
    Ok(digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_prompt_session_maps_to_its_host_session() {
        assert_eq!(host_session_of("claude:abc:0123456789abcdef"), "claude:abc");
        assert_eq!(
            host_session_of("claude:abc:0123456789abcdef:load"),
            "claude:abc"
        );
        assert_eq!(host_session_of("codex:abc:0123456789abcdef:i"), "codex:abc");
        assert_eq!(host_session_of("claude:abc:i"), "claude:abc:i");
        // A JSON-interface session is its own, also when it happens to end like a digest.
        assert_eq!(host_session_of("s-1"), "s-1");
        assert_eq!(host_session_of("a:0123456789abcdef"), "a:0123456789abcdef");
        assert_eq!(host_session_of("claude:abc:0123"), "claude:abc:0123");
    }

    #[test]
    fn proofs_name_their_basis_and_a_signature_names_none() {
        let digest = sha256_hex("c");
        for basis in [
            DelegatedBasis::Standing("sd-0123456789abcdef".to_owned()),
            DelegatedBasis::Installed(digest.clone()),
        ] {
            assert_eq!(DelegatedBasis::of_proof(&basis.proof()), Some(basis));
        }
        assert_eq!(DelegatedBasis::of_proof(&[0u8; 64]), None);
        assert_eq!(DelegatedBasis::of_proof(b"ctx-installed:nope"), None);
    }
}
