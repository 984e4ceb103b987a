//! Who may decide for the person (spec/decisions.md §12–§15): authenticator kinds and their
//! assurance, the verifier registry as one signed journal stream (`ctx.trust`), the
//! person-approved install policies, and the minimum assurance a decision needs.
//!
//! The registry is a fold of the stream, recomputed and re-verified on every open: the journal's
//! MAC key is readable by the agent this guards against, so no record is trusted for being in the
//! journal. A change counts only when a registered verifier of at least presence assurance signed
//! its digest (or, for the very first presence verifier, when it was made from a terminal), and a
//! registration also proves possession of the registered key.

mod delegated;
mod evidence;
mod sealed;
mod standing;
mod webauthn;

use std::sync::Arc;

use ctx_journal::{
    AppendError, ExpectedRevision, Journal, NewRecord, Record, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{Json, UtcMicros, hex, parse_hex, sha256_hex, sha256_hex_bytes};
use ctx_projections::consent_store::{AssertionFields, SignedHumanDecisionAssertion};
use ctx_projections::streams::{TRUST_CHANGE_KIND, TRUST_STREAM_NAMESPACE};

use crate::decision::{Ed25519Signer, Ed25519Verifier, HumanDecisionVerifier};

pub use delegated::{
    BasisRefused, DelegatedBasis, INSTALL_GRANTS_READ_MAX, INSTALLED_PROOF_PREFIX,
    STANDING_PROOF_PREFIX, challenge_scope, check_delegated, host_session_of, indexed_grants,
    record_install_grant, signed_grant,
};
pub use evidence::{
    DECISION_EVIDENCE_RECORDS_MAX, DecisionCheck, audit_decisions, capability_kind_of,
    highest_passkey_counter, record_decision_evidence, record_delegated_evidence,
};
pub use sealed::{
    PASSPHRASE_MAX_BYTES, PASSPHRASE_MIN_CHARS, SEALED_KEY_BYTES, SEALED_KEY_FORMAT_VERSION,
    SEALED_KEY_MAGIC, SealError, SealParams, check_passphrase, seal_signer, sealed_public_key,
    unseal_signer,
};
pub use standing::{
    RevokeTarget, STANDING_SCOPE_KEY_MAX_CHARS, StandingDecision, StandingEntry, StandingError,
    StandingScope,
};
pub use webauthn::{
    OriginPolicy, WEBAUTHN_ATTESTATION_MAX_BYTES, WEBAUTHN_AUTHENTICATOR_DATA_MAX_BYTES,
    WEBAUTHN_CLIENT_DATA_MAX_BYTES, WEBAUTHN_CREDENTIAL_ID_MAX_BYTES, WEBAUTHN_FORMAT_VERSION,
    WEBAUTHN_PUBLIC_KEY_BYTES, WEBAUTHN_RP_ID, WEBAUTHN_SIGNATURE_MAX_BYTES, WebAuthnCredential,
    WebAuthnError, WebAuthnProof, WebAuthnVerifier, check_sign_count, verify_webauthn_registration,
    webauthn_challenge,
};

/// The audience of the assertions that sign registry changes and policy approvals; a consent
/// decision (audience `ctx-managed-query`) can never be replayed as one.
pub const TRUST_AUDIENCE: &str = "ctx-trust";
/// Most records the registry stream may hold; a fold reads all of them on every open.
pub const TRUST_RECORDS_MAX: usize = 4_096;
/// How long a signed approval of a registry change stays usable, in seconds.
pub const TRUST_APPROVAL_TTL_SECONDS: i64 = 300;

/// How strongly a decision shows that the person took part (spec/decisions.md §12.2). Ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Assurance {
    /// Whoever can read a key file: the agent can.
    File,
    /// A secret only the person holds, given live (a passphrase typed at the controlling
    /// terminal).
    Presence,
    /// An authenticator that checked the person itself (a passkey with user verification).
    UserVerified,
}

impl Assurance {
    pub fn as_str(self) -> &'static str {
        match self {
            Assurance::File => "file",
            Assurance::Presence => "presence",
            Assurance::UserVerified => "user-verified",
        }
    }

    pub fn parse(text: &str) -> Option<Assurance> {
        [
            Assurance::File,
            Assurance::Presence,
            Assurance::UserVerified,
        ]
        .into_iter()
        .find(|a| a.as_str() == text)
    }
}

impl std::fmt::Display for Assurance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The authenticator kinds a data directory can register (spec/decisions.md §12.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerifierKind {
    /// A plain Ed25519 seed in a file: CI and the demo only.
    FileKey,
    /// An Ed25519 seed sealed under the person's passphrase (spec/decisions.md §13).
    SealedKey,
    /// A WebAuthn credential (passkey or security key) with user verification.
    Passkey,
}

impl VerifierKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VerifierKind::FileKey => "file-key",
            VerifierKind::SealedKey => "sealed-key",
            VerifierKind::Passkey => "passkey",
        }
    }

    pub fn parse(text: &str) -> Option<VerifierKind> {
        [
            VerifierKind::FileKey,
            VerifierKind::SealedKey,
            VerifierKind::Passkey,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }

    /// The assurance every decision of this kind carries.
    pub fn assurance(self) -> Assurance {
        match self {
            VerifierKind::FileKey => Assurance::File,
            VerifierKind::SealedKey => Assurance::Presence,
            VerifierKind::Passkey => Assurance::UserVerified,
        }
    }
}

/// One registered verifier: its kind, identity and public key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierEntry {
    pub kind: VerifierKind,
    pub authenticator_id: String,
    pub principal_digest: String,
    /// Ed25519: the 32-byte public key. Passkey: the credential's encoding.
    pub public_key: Vec<u8>,
}

impl VerifierEntry {
    /// The entry of an Ed25519 key (file or sealed): its authenticator id and principal are
    /// derived from the public key, so two kinds of one key are one authenticator.
    pub fn ed25519(kind: VerifierKind, public_key: [u8; 32]) -> VerifierEntry {
        let hex = hex(&public_key);
        VerifierEntry {
            kind,
            authenticator_id: format!("ctx-device-{}", &hex[..16]),
            principal_digest: sha256_hex(&format!("ctx-principal:{hex}")),
            public_key: public_key.to_vec(),
        }
    }

    /// The entry of a passkey (spec/webauthn.md §2): its authenticator id names the credential
    /// id and its principal the public key, so another key under the same id is another
    /// principal.
    pub fn passkey(credential: &WebAuthnCredential) -> VerifierEntry {
        let id_digest = sha256_hex_bytes(credential.credential_id());
        VerifierEntry {
            kind: VerifierKind::Passkey,
            authenticator_id: format!("ctx-passkey-{}", &id_digest[..16]),
            principal_digest: sha256_hex(&format!(
                "ctx-principal:passkey:{}",
                hex(&credential.public_key_bytes())
            )),
            public_key: credential.to_bytes(),
        }
    }

    pub fn assurance(&self) -> Assurance {
        self.kind.assurance()
    }

    /// The verifier that checks this entry's proofs.
    /// True when `assertion`'s proof is this verifier's valid signature over its signing bytes.
    pub fn verifies(&self, assertion: &SignedHumanDecisionAssertion) -> bool {
        self.verifier()
            .map(|v| v.verify_signed_assertion(assertion, &assertion.signing_bytes()))
            .unwrap_or(false)
    }

    pub fn verifier(&self) -> Result<Arc<dyn HumanDecisionVerifier>, TrustError> {
        match self.kind {
            VerifierKind::FileKey | VerifierKind::SealedKey => {
                let key: [u8; 32] = self.public_key.as_slice().try_into().map_err(|_| {
                    TrustError::Entry(format!(
                        "verifier {} has a public key of {} bytes, not 32",
                        self.authenticator_id,
                        self.public_key.len()
                    ))
                })?;
                let verifier = Ed25519Verifier::from_public_key_bytes(&key).map_err(|e| {
                    TrustError::Entry(format!("verifier {}: {e}", self.authenticator_id))
                })?;
                Ok(Arc::new(verifier))
            }
            VerifierKind::Passkey => {
                let credential = WebAuthnCredential::from_bytes(&self.public_key).map_err(|e| {
                    TrustError::Entry(format!("verifier {}: {e}", self.authenticator_id))
                })?;
                Ok(webauthn::passkey_verifier(credential))
            }
        }
    }

    pub fn to_json(&self) -> Json {
        Json::object([
            ("assurance", Json::str(self.assurance().as_str())),
            ("authenticator_id", Json::str(&self.authenticator_id)),
            ("kind", Json::str(self.kind.as_str())),
            ("principal_digest", Json::str(&self.principal_digest)),
            ("public_key", Json::str(hex(&self.public_key))),
        ])
    }

    fn from_json(value: &Json) -> Result<VerifierEntry, Reason> {
        let text = |key: &str| {
            value
                .get_str(key)
                .ok_or_else(|| format!("the verifier has no {key}"))
        };
        let kind = VerifierKind::parse(text("kind")?)
            .ok_or_else(|| format!("verifier kind {:?} is not known", value.get_str("kind")))?;
        if text("assurance")? != kind.assurance().as_str() {
            return Err(format!(
                "verifier kind {} has assurance {}, not {:?}",
                kind.as_str(),
                kind.assurance(),
                value.get_str("assurance")
            )
            .into());
        }
        let public_key = parse_hex(text("public_key")?)
            .ok_or_else(|| "the verifier's public key is not hex".to_owned())?;
        let entry = VerifierEntry {
            kind,
            authenticator_id: text("authenticator_id")?.to_owned(),
            principal_digest: text("principal_digest")?.to_owned(),
            public_key,
        };
        if matches!(kind, VerifierKind::FileKey | VerifierKind::SealedKey) {
            let key: [u8; 32] = entry
                .public_key
                .as_slice()
                .try_into()
                .map_err(|_| "an Ed25519 public key is 32 bytes".to_owned())?;
            let derived = VerifierEntry::ed25519(kind, key);
            if derived != entry {
                return Err(format!(
                    "verifier {} does not name the identity of its own key",
                    entry.authenticator_id
                )
                .into());
            }
        }
        if kind == VerifierKind::Passkey {
            let credential = WebAuthnCredential::from_bytes(&entry.public_key)
                .map_err(|e| format!("passkey {}: {e}", entry.authenticator_id))?;
            if VerifierEntry::passkey(&credential) != entry {
                return Err(format!(
                    "verifier {} does not name the identity of its own credential",
                    entry.authenticator_id
                )
                .into());
            }
        }
        Ok(entry)
    }
}

/// One change to the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustChange {
    Register(VerifierEntry),
    Remove {
        authenticator_id: String,
    },
    /// The person approved an install policy that grants installs by itself.
    ApprovePolicy {
        policy_digest: String,
    },
    /// The person's grant or denial that stands beyond one challenge (spec/decisions.md §16).
    Standing(StandingDecision),
    /// The person takes back a standing decision, or the grant one challenge recorded.
    Revoke(RevokeTarget),
}

impl TrustChange {
    pub fn to_json(&self) -> Json {
        match self {
            TrustChange::Register(entry) => {
                Json::object([("op", Json::str("register")), ("verifier", entry.to_json())])
            }
            TrustChange::Remove { authenticator_id } => Json::object([
                ("authenticator_id", Json::str(authenticator_id)),
                ("op", Json::str("remove")),
            ]),
            TrustChange::ApprovePolicy { policy_digest } => Json::object([
                ("op", Json::str("approve-policy")),
                ("policy_digest", Json::str(policy_digest)),
            ]),
            TrustChange::Standing(decision) => Json::object([
                ("decision", decision.to_json()),
                ("op", Json::str("standing")),
            ]),
            TrustChange::Revoke(target) => Json::object([
                ("op", Json::str("revoke")),
                ("target", Json::str(target.as_str())),
            ]),
        }
    }

    fn from_json(value: &Json) -> Result<TrustChange, Reason> {
        match value.get_str("op") {
            Some("register") => Ok(TrustChange::Register(VerifierEntry::from_json(
                value.get("verifier").unwrap_or(&Json::Null),
            )?)),
            Some("remove") => Ok(TrustChange::Remove {
                authenticator_id: value
                    .get_str("authenticator_id")
                    .ok_or("a removal names no authenticator")?
                    .to_owned(),
            }),
            Some("approve-policy") => Ok(TrustChange::ApprovePolicy {
                policy_digest: value
                    .get_str("policy_digest")
                    .ok_or("a policy approval names no policy digest")?
                    .to_owned(),
            }),
            Some("standing") => Ok(TrustChange::Standing(StandingDecision::from_json(
                value.get("decision").unwrap_or(&Json::Null),
            )?)),
            Some("revoke") => Ok(TrustChange::Revoke(RevokeTarget::parse(
                value.get_str("target").unwrap_or_default(),
            )?)),
            other => Err(format!("trust change op {other:?} is not known").into()),
        }
    }

    /// What the person is shown before they sign (one line).
    pub fn describe(&self) -> String {
        match self {
            TrustChange::Register(e) => format!(
                "register {} {} ({} assurance) as a verifier of your decisions",
                e.kind.as_str(),
                e.authenticator_id,
                e.assurance()
            ),
            TrustChange::Remove { authenticator_id } => {
                format!("remove verifier {authenticator_id}")
            }
            TrustChange::ApprovePolicy { policy_digest } => {
                format!("approve install policy {policy_digest}, which grants installs by itself")
            }
            TrustChange::Standing(decision) => decision.describe(),
            TrustChange::Revoke(RevokeTarget::Standing(id)) => {
                format!("revoke standing decision {id}")
            }
            TrustChange::Revoke(RevokeTarget::Challenge(digest)) => {
                format!("revoke the grant given at challenge {digest}")
            }
        }
    }
}

/// Why a change may be made (spec/decisions.md §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustBasis {
    /// The first presence verifier of a data directory, registered from a terminal.
    FirstUseTerminal,
    /// A plain file key registered while no presence verifier exists (CI and the demo): it
    /// proves nothing about the person, so it needs no terminal and can never meet presence.
    FirstUseFileKey,
    /// Signed by a registered verifier of at least presence assurance.
    Approved,
}

impl TrustBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            TrustBasis::FirstUseTerminal => "first-use-terminal",
            TrustBasis::FirstUseFileKey => "first-use-file-key",
            TrustBasis::Approved => "approved",
        }
    }
}

/// A change as journaled: the change, its basis, the proof of possession of a registered key
/// and the approving assertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRecord {
    pub change: TrustChange,
    pub basis: TrustBasis,
    pub possession: Option<SignedHumanDecisionAssertion>,
    pub approval: Option<SignedHumanDecisionAssertion>,
}

/// The digest a change's possession proof and approval sign: the change bound to the revision
/// it follows, so no signature can be replayed at another point of the history.
pub fn change_digest(change: &TrustChange, previous_revision: u64) -> String {
    sha256_hex(
        &Json::object([
            ("change", change.to_json()),
            ("previous_revision", Json::from(previous_revision)),
            ("schema", Json::str(TRUST_CHANGE_KIND)),
        ])
        .to_cja(),
    )
}

/// An unsigned assertion (placeholder proof) over `digest` for `entry`'s authenticator, valid
/// from `now` for [`TRUST_APPROVAL_TTL_SECONDS`].
pub fn unsigned_trust_assertion(
    entry: &VerifierEntry,
    digest: &str,
    now: UtcMicros,
) -> Result<SignedHumanDecisionAssertion, TrustError> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)
        .map_err(|e| TrustError::Entry(format!("no randomness for a nonce: {e}")))?;
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: digest.to_owned(),
        decision: "granted".to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: TRUST_AUDIENCE.to_owned(),
        nonce: format!("ctx-trust-{}", hex(&nonce)),
        issued_at: now.render(),
        expires_at: UtcMicros(now.0.saturating_add(TRUST_APPROVAL_TTL_SECONDS * 1_000_000))
            .render(),
        proof: b"unsigned".to_vec(),
    })
    .map_err(|e| TrustError::Entry(e.to_string()))
}

/// Signs a trust assertion with an Ed25519 key (file or sealed, once opened).
pub fn sign_trust_assertion(
    signer: &Ed25519Signer,
    unsigned: &SignedHumanDecisionAssertion,
) -> Result<SignedHumanDecisionAssertion, TrustError> {
    signer
        .sign_assertion(unsigned)
        .map_err(|e| TrustError::Entry(e.to_string()))
}

/// Why the registry could not be read or a change could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// A journaled change does not hold: the registry is not trusted at all.
    #[error("the verifier registry's record at revision {revision} is refused: {reason}")]
    Invalid { revision: u64, reason: String },
    /// A change the caller asked for is refused.
    #[error("{0}")]
    Refused(String),
    /// A verifier entry or assertion could not be built.
    #[error("{0}")]
    Entry(String),
    /// Another process changed the registry first.
    #[error(
        "the verifier registry changed while this change was being signed (now at revision \
         {current}); run the command again"
    )]
    Raced { current: u64 },
    #[error("the verifier registry holds more than {TRUST_RECORDS_MAX} records")]
    TooManyRecords,
    #[error("the verifier registry could not be read: {0}")]
    Read(#[from] ctx_journal::ReadError),
    #[error("the verifier registry could not be written: {0}")]
    Append(Box<AppendError>),
    /// A decision's evidence could not be journaled (spec/decisions.md §12.5).
    #[error("the decision's evidence could not be journaled: {0}")]
    Evidence(Box<AppendError>),
}

/// One verifier as the registry knows it: its entry and where it was registered and removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredVerifier {
    pub entry: VerifierEntry,
    pub basis: TrustBasis,
    pub registered_at: Timestamp,
    /// The journal positions at which it was registered and (if) removed.
    pub registered_position: u64,
    pub removed_position: Option<u64>,
}

/// The registry: the fold of the `ctx.trust` stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustState {
    revision: u64,
    verifiers: Vec<RegisteredVerifier>,
    approved_policies: Vec<String>,
    standing: Vec<StandingEntry>,
    /// Challenges whose grant the person revoked, with the journal position of the revocation.
    revoked_challenges: Vec<(String, u64)>,
}

impl TrustState {
    /// The stream's revision (0 when nothing was ever registered).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every verifier ever registered, removed ones included, oldest first.
    pub fn history(&self) -> &[RegisteredVerifier] {
        &self.verifiers
    }

    /// The verifiers registered now.
    pub fn active(&self) -> impl Iterator<Item = &RegisteredVerifier> {
        self.verifiers
            .iter()
            .filter(|v| v.removed_position.is_none())
    }

    /// The active verifier of an authenticator id.
    pub fn find(&self, authenticator_id: &str) -> Option<&RegisteredVerifier> {
        self.active()
            .find(|v| v.entry.authenticator_id == authenticator_id)
    }

    /// The verifier that was registered at journal position `position` for `authenticator_id`
    /// (for an audit of a decision recorded there).
    pub fn at_position(
        &self,
        authenticator_id: &str,
        position: u64,
    ) -> Option<&RegisteredVerifier> {
        self.verifiers.iter().find(|v| {
            v.entry.authenticator_id == authenticator_id
                && v.registered_position < position
                && v.removed_position.is_none_or(|r| r > position)
        })
    }

    /// True when the policy `digest` was approved by the person.
    pub fn policy_approved(&self, digest: &str) -> bool {
        self.approved_policies.iter().any(|d| d == digest)
    }

    /// Every standing decision ever made, revoked ones included, oldest first.
    pub fn standing(&self) -> &[StandingEntry] {
        &self.standing
    }

    /// The standing decision that applies to the exact install `capability_id` (descriptor and
    /// material digests) in host session `session` of workspace `workspace`, at the registry's
    /// head: a denial wins over a grant, and otherwise the newest applies.
    pub fn standing_for(
        &self,
        capability_id: &str,
        descriptor_digest: &str,
        material_identity_digest: &str,
        session: &str,
        workspace: &str,
    ) -> Option<&StandingEntry> {
        let mut applying = self.standing.iter().filter(|e| {
            e.revoked_position.is_none()
                && e.decision
                    .binds(capability_id, descriptor_digest, material_identity_digest)
                && e.decision.scope.covers(session, workspace)
        });
        let mut found: Option<&StandingEntry> = None;
        for entry in applying.by_ref() {
            if !entry.decision.granted {
                return Some(entry);
            }
            found = Some(entry);
        }
        found
    }

    /// The standing denial of `capability_id` with install descriptor `descriptor_digest` (which
    /// covers the material's identity) in `session` / `workspace`, if the person made one: a
    /// hook leaves such a capability out of its choice before any challenge exists.
    pub fn denial_for(
        &self,
        capability_id: &str,
        descriptor_digest: &str,
        session: &str,
        workspace: &str,
    ) -> Option<&StandingEntry> {
        self.standing.iter().find(|e| {
            e.revoked_position.is_none()
                && !e.decision.granted
                && e.decision.capability_id == capability_id
                && e.decision.descriptor_digest == descriptor_digest
                && e.decision.scope.covers(session, workspace)
        })
    }

    /// True when the grant recorded at `challenge_digest` was revoked before journal position
    /// `position` (`u64::MAX`: at all).
    /// Revoking a standing decision also revokes the grant signed at the challenge where it was
    /// made, so that grant's material is not reused either (spec/decisions.md §16.4).
    pub fn challenge_revoked(&self, challenge_digest: &str, position: u64) -> bool {
        self.revoked_challenges
            .iter()
            .any(|(d, at)| d == challenge_digest && *at < position)
            || self.standing.iter().any(|e| {
                e.decision.granted
                    && e.decision.challenge_digest == challenge_digest
                    && e.revoked_position.is_some_and(|at| at < position)
            })
    }

    /// True when a delegated decision's basis reference (a standing decision id or a challenge
    /// digest) is revoked now.
    pub fn basis_revoked(&self, reference: &str) -> bool {
        self.challenge_revoked(reference, u64::MAX)
            || self
                .standing
                .iter()
                .any(|e| e.id == reference && e.revoked_position.is_some())
    }

    /// True when some active verifier has at least presence assurance.
    pub fn has_presence_verifier(&self) -> bool {
        self.active()
            .any(|v| v.entry.assurance() >= Assurance::Presence)
    }

    /// Checks `record` as the next change and applies it (spec/decisions.md §14.2).
    fn apply(
        &mut self,
        record: &TrustRecord,
        revision: u64,
        position: u64,
        at: Timestamp,
    ) -> Result<(), Reason> {
        let digest = change_digest(&record.change, revision - 1);
        match record.basis {
            TrustBasis::FirstUseTerminal | TrustBasis::FirstUseFileKey => {
                let TrustChange::Register(entry) = &record.change else {
                    return Err("only a registration can be made on first use".into());
                };
                if record.basis == TrustBasis::FirstUseFileKey
                    && entry.kind != VerifierKind::FileKey
                {
                    return Err(format!(
                        "only a file key is registered on the file-key first-use basis, not a {}",
                        entry.kind.as_str()
                    )
                    .into());
                }
                if self.has_presence_verifier() {
                    return Err(
                        "a registration on first use was made while a presence verifier was \
                         already registered"
                            .into(),
                    );
                }
                if record.approval.is_some() {
                    return Err("a first-use registration carries no approval".into());
                }
            }
            TrustBasis::Approved => {
                let approval = record
                    .approval
                    .as_ref()
                    .ok_or("an approved change carries no approval")?;
                let approver = self.find(approval.authenticator_id()).ok_or_else(|| {
                    format!(
                        "the approval was signed by {}, which is not a registered verifier",
                        approval.authenticator_id()
                    )
                })?;
                if approver.entry.assurance() < Assurance::Presence {
                    return Err(format!(
                        "the approval was signed by {} of {} assurance; changes need presence",
                        approver.entry.authenticator_id,
                        approver.entry.assurance()
                    )
                    .into());
                }
                check_signed(approval, &approver.entry, &digest, at)?;
            }
        }
        match &record.change {
            TrustChange::Register(entry) => {
                if self.find(&entry.authenticator_id).is_some() {
                    return Err(format!(
                        "verifier {} is already registered",
                        entry.authenticator_id
                    )
                    .into());
                }
                let possession = record
                    .possession
                    .as_ref()
                    .ok_or("a registration carries no proof of possession")?;
                check_signed(possession, entry, &digest, at)?;
                self.verifiers.push(RegisteredVerifier {
                    entry: entry.clone(),
                    basis: record.basis,
                    registered_at: at,
                    registered_position: position,
                    removed_position: None,
                });
            }
            TrustChange::Remove { authenticator_id } => {
                let remaining_presence = self
                    .active()
                    .filter(|v| {
                        v.entry.authenticator_id != *authenticator_id
                            && v.entry.assurance() >= Assurance::Presence
                    })
                    .count();
                if remaining_presence == 0 {
                    return Err(format!(
                        "removing {authenticator_id} would leave no presence verifier"
                    )
                    .into());
                }
                let target = self
                    .verifiers
                    .iter_mut()
                    .find(|v| {
                        v.removed_position.is_none()
                            && v.entry.authenticator_id == *authenticator_id
                    })
                    .ok_or_else(|| format!("verifier {authenticator_id} is not registered"))?;
                target.removed_position = Some(position);
            }
            TrustChange::ApprovePolicy { policy_digest } => {
                if record.basis != TrustBasis::Approved {
                    return Err("a policy approval must be signed".into());
                }
                if !self.policy_approved(policy_digest) {
                    self.approved_policies.push(policy_digest.clone());
                }
            }
            TrustChange::Standing(decision) => {
                let approval = match (&record.approval, record.basis) {
                    (Some(a), TrustBasis::Approved) => a,
                    _ => return Err("a standing decision must be signed".into()),
                };
                decision.check()?;
                let id = decision.id();
                if self
                    .standing
                    .iter()
                    .any(|e| e.id == id && e.revoked_position.is_none())
                {
                    return Err(format!("standing decision {id} is already in force").into());
                }
                self.standing.push(StandingEntry {
                    id,
                    decision: decision.clone(),
                    decided_by: approval.authenticator_id().to_owned(),
                    decided_at: at,
                    position,
                    revoked_position: None,
                });
            }
            TrustChange::Revoke(target) => {
                if record.basis != TrustBasis::Approved {
                    return Err("a revocation must be signed".into());
                }
                match target {
                    RevokeTarget::Standing(id) => {
                        let entry = self
                            .standing
                            .iter_mut()
                            .find(|e| e.id == *id && e.revoked_position.is_none())
                            .ok_or_else(|| format!("standing decision {id} is not in force"))?;
                        entry.revoked_position = Some(position);
                    }
                    RevokeTarget::Challenge(digest) => {
                        if self.challenge_revoked(digest, u64::MAX) {
                            return Err(format!(
                                "the grant of challenge {digest} is already revoked"
                            )
                            .into());
                        }
                        self.revoked_challenges.push((digest.clone(), position));
                    }
                }
            }
        }
        self.revision = revision;
        Ok(())
    }
}

/// Checks that `assertion` is `entry`'s signed grant of `digest` for the registry, valid at `at`.
fn check_signed(
    assertion: &SignedHumanDecisionAssertion,
    entry: &VerifierEntry,
    digest: &str,
    at: Timestamp,
) -> Result<(), Reason> {
    if assertion.audience() != TRUST_AUDIENCE {
        return Err(format!(
            "the assertion's audience is {:?}, not {TRUST_AUDIENCE}",
            assertion.audience()
        )
        .into());
    }
    if assertion.challenge_digest() != digest {
        return Err("the assertion signs another change".into());
    }
    if assertion.authenticator_id() != entry.authenticator_id
        || assertion.principal_digest() != entry.principal_digest
    {
        return Err(format!(
            "the assertion is by {}, not {}",
            assertion.authenticator_id(),
            entry.authenticator_id
        )
        .into());
    }
    if assertion.decision().as_str() != "granted" {
        return Err("the assertion does not grant the change".into());
    }
    if at.0 < assertion.issued_at_micros().0 || at.0 > assertion.expires_at_micros().0 {
        return Err(format!(
            "the assertion is valid from {} to {}, not at the change's time",
            assertion.issued_at(),
            assertion.expires_at()
        )
        .into());
    }
    let verifier = entry.verifier().map_err(|e| e.to_string())?;
    if !verifier.verify_signed_assertion(assertion, &assertion.signing_bytes()) {
        return Err(format!(
            "the signature of {} does not verify",
            entry.authenticator_id
        )
        .into());
    }
    Ok(())
}

/// Why one journaled change does not hold: a sentence for [`TrustError::Invalid`].
#[derive(Debug)]
struct Reason(String);

impl From<String> for Reason {
    fn from(text: String) -> Reason {
        Reason(text)
    }
}

impl From<&str> for Reason {
    fn from(text: &str) -> Reason {
        Reason(text.to_owned())
    }
}

/// The registry stream of every data directory.
pub fn trust_stream() -> StreamId {
    // The namespace is a valid constant token and the key is fixed: derivation cannot fail.
    StreamId::derive(TRUST_STREAM_NAMESPACE, b"verifiers")
        .unwrap_or_else(|e| panic!("the trust stream id is invalid: {e}"))
}

fn encode(record: &TrustRecord, previous_revision: u64) -> Result<Vec<u8>, TrustError> {
    let wire = |a: &Option<SignedHumanDecisionAssertion>| -> Result<Json, TrustError> {
        match a {
            None => Ok(Json::Null),
            Some(a) => {
                let bytes = a.encode().map_err(|e| TrustError::Entry(e.to_string()))?;
                Ok(Json::str(String::from_utf8_lossy(&bytes).into_owned()))
            }
        }
    };
    Ok(Json::object([
        ("approval", wire(&record.approval)?),
        ("basis", Json::str(record.basis.as_str())),
        ("change", record.change.to_json()),
        ("possession", wire(&record.possession)?),
        ("previous_revision", Json::from(previous_revision)),
        ("schema", Json::str(TRUST_CHANGE_KIND)),
    ])
    .to_cja()
    .into_bytes())
}

fn decode(record: &Record) -> Result<TrustRecord, Reason> {
    if record.kind != TRUST_CHANGE_KIND {
        return Err(format!("its kind is {:?}", record.kind).into());
    }
    let text = std::str::from_utf8(&record.payload).map_err(|_| "its payload is not UTF-8")?;
    let value = Json::parse(text).map_err(|e| e.to_string())?;
    if value.to_cja() != text {
        return Err("its payload is not canonical JSON".into());
    }
    if value.get_str("schema") != Some(TRUST_CHANGE_KIND) {
        return Err("its schema is not ctx.trust-change.v1".into());
    }
    if value.get("previous_revision").and_then(Json::as_i64)
        != i64::try_from(record.revision - 1).ok()
    {
        return Err("it names another previous revision".into());
    }
    let basis = match value.get_str("basis") {
        Some("first-use-terminal") => TrustBasis::FirstUseTerminal,
        Some("first-use-file-key") => TrustBasis::FirstUseFileKey,
        Some("approved") => TrustBasis::Approved,
        other => return Err(format!("basis {other:?} is not known").into()),
    };
    let assertion = |key: &str| -> Result<Option<SignedHumanDecisionAssertion>, Reason> {
        match value.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Str(text)) => SignedHumanDecisionAssertion::decode(text.as_bytes())
                .map(Some)
                .map_err(|e| Reason(format!("its {key}: {e}"))),
            Some(_) => Err(format!("its {key} is not an assertion").into()),
        }
    };
    Ok(TrustRecord {
        change: TrustChange::from_json(value.get("change").unwrap_or(&Json::Null))?,
        basis,
        possession: assertion("possession")?,
        approval: assertion("approval")?,
    })
}

/// Reads and verifies the registry of `journal`: every change re-checked in order.
pub fn read_trust(journal: &Journal) -> Result<TrustState, TrustError> {
    let records = journal.read_stream(&trust_stream(), 1, TRUST_RECORDS_MAX + 1)?;
    if records.len() > TRUST_RECORDS_MAX {
        return Err(TrustError::TooManyRecords);
    }
    let mut state = TrustState::default();
    for record in &records {
        let invalid = |reason: Reason| TrustError::Invalid {
            revision: record.revision,
            reason: reason.0,
        };
        let change = decode(record).map_err(invalid)?;
        state
            .apply(
                &change,
                record.revision,
                record.position,
                record.occurred_at,
            )
            .map_err(invalid)?;
    }
    Ok(state)
}

/// Appends `record` as the change after `state` (which must be the registry as just read), after
/// checking it exactly as a later read will.
pub fn append_trust(
    journal: &Journal,
    state: &TrustState,
    record: &TrustRecord,
    now: Timestamp,
) -> Result<TrustState, TrustError> {
    let revision = state.revision + 1;
    let mut next = state.clone();
    // The position is not known before the append; a registration's position only orders it
    // against later decisions, which come after the append either way.
    next.apply(record, revision, u64::MAX, now)
        .map_err(|reason| TrustError::Refused(reason.0))?;
    let payload = encode(record, state.revision)?;
    let event_id = format!(
        "trust-{}",
        &sha256_hex(&String::from_utf8_lossy(&payload))[..32]
    );
    let expected = if state.revision == 0 {
        ExpectedRevision::NoStream
    } else {
        ExpectedRevision::Exact(state.revision)
    };
    let append = StreamAppend::new(
        trust_stream(),
        expected,
        vec![NewRecord::new(event_id, TRUST_CHANGE_KIND, now, payload)],
    );
    match journal.append(append) {
        Ok(_) => read_trust(journal),
        Err(AppendError::WrongRevision { current, .. }) => Err(TrustError::Raced { current }),
        Err(e) => Err(TrustError::Append(Box::new(e))),
    }
}

/// The minimum assurance a consent decision needs (spec/decisions.md §12.4): presence for every
/// consent a host hook published, for every agent or MCP server, and for every install that
/// expands permissions or needs credentials; a file key suffices only for a plain skill asked
/// for through the JSON interface.
pub fn required_assurance(
    kind: ctx_model::CapabilityKind,
    permission_expansion: bool,
    credential_requirement: bool,
    hook_published: bool,
) -> Assurance {
    if hook_published
        || permission_expansion
        || credential_requirement
        || kind != ctx_model::CapabilityKind::Skill
    {
        Assurance::Presence
    } else {
        Assurance::File
    }
}

#[cfg(test)]
mod tests;
