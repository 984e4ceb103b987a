//! The registry fold against its rules (spec/decisions.md §14.2), on a real journal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_journal::{Journal, OpenOptions, Timestamp};
use ctx_model::UtcMicros;

use super::*;
use ctx_projections::consent_store::InstallConsentChallenge;

const NOW: i64 = 1_800_000_000_000_000;

fn journal() -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let journal =
        crate::journal_store::open_journal(&dir.path().join("journal"), &OpenOptions::new())
            .expect("a fresh journal");
    (dir, journal)
}

fn key(seed: u8, kind: VerifierKind) -> (Ed25519Signer, VerifierEntry) {
    let signer = Ed25519Signer::from_seed(&[seed; 32]);
    let entry = VerifierEntry::ed25519(kind, signer.verifying_key_bytes());
    (signer, entry)
}

fn signed(
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
    digest: &str,
) -> SignedHumanDecisionAssertion {
    let unsigned = unsigned_trust_assertion(entry, digest, UtcMicros(NOW)).expect("an assertion");
    sign_trust_assertion(signer, &unsigned).expect("a signature")
}

/// Appends `change` after `state`: with a proof of possession by `possessed_by` (a
/// registration), approved by `approver` (else on first use from a terminal).
fn append_change(
    journal: &Journal,
    state: &TrustState,
    change: TrustChange,
    possessed_by: Option<(&Ed25519Signer, &VerifierEntry)>,
    approver: Option<(&Ed25519Signer, &VerifierEntry)>,
) -> Result<TrustState, TrustError> {
    let digest = change_digest(&change, state.revision());
    let record = TrustRecord {
        basis: if approver.is_some() {
            TrustBasis::Approved
        } else {
            TrustBasis::FirstUseTerminal
        },
        possession: possessed_by.map(|(s, e)| signed(s, e, &digest)),
        approval: approver.map(|(s, e)| signed(s, e, &digest)),
        change,
    };
    append_trust(journal, state, &record, Timestamp(NOW + 1))
}

fn register(
    journal: &Journal,
    state: &TrustState,
    new: (&Ed25519Signer, &VerifierEntry),
    approver: Option<(&Ed25519Signer, &VerifierEntry)>,
) -> Result<TrustState, TrustError> {
    let change = TrustChange::Register(new.1.clone());
    append_change(journal, state, change, Some(new), approver)
}

#[test]
fn the_first_presence_verifier_is_trusted_on_first_use_and_later_ones_need_its_approval() {
    let (_dir, journal) = journal();
    let (person, person_entry) = key(1, VerifierKind::SealedKey);
    let state = register(
        &journal,
        &TrustState::default(),
        (&person, &person_entry),
        None,
    )
    .expect("first use");
    assert!(state.has_presence_verifier());
    // The agent's own key on "first use" again: refused, nothing written.
    let (agent, agent_entry) = key(2, VerifierKind::SealedKey);
    let refused = register(&journal, &state, (&agent, &agent_entry), None);
    assert!(
        matches!(refused, Err(TrustError::Refused(_))),
        "{refused:?}"
    );
    // Approved by itself: the agent's key is not registered.
    let self_approved = register(
        &journal,
        &state,
        (&agent, &agent_entry),
        Some((&agent, &agent_entry)),
    );
    assert!(
        matches!(self_approved, Err(TrustError::Refused(_))),
        "{self_approved:?}"
    );
    assert_eq!(read_trust(&journal).expect("the registry").revision(), 1);
    // Approved by the person: registered.
    let state = register(
        &journal,
        &state,
        (&agent, &agent_entry),
        Some((&person, &person_entry)),
    )
    .expect("approved");
    assert_eq!(state.active().count(), 2);
    assert_eq!(read_trust(&journal).expect("the registry"), state);
}

#[test]
fn a_file_key_cannot_approve_changes_and_possession_must_be_proven() {
    let (_dir, journal) = journal();
    let (file, file_entry) = key(3, VerifierKind::FileKey);
    let state = register(&journal, &TrustState::default(), (&file, &file_entry), None)
        .expect("a file key on first use");
    assert!(!state.has_presence_verifier());
    let (other, other_entry) = key(4, VerifierKind::FileKey);
    let by_file = register(
        &journal,
        &state,
        (&other, &other_entry),
        Some((&file, &file_entry)),
    );
    assert!(matches!(by_file, Err(TrustError::Refused(m)) if m.contains("presence")));
    // A registration whose possession proof is by another key is refused.
    let (sealed, sealed_entry) = key(5, VerifierKind::SealedKey);
    let change = TrustChange::Register(sealed_entry.clone());
    let digest = change_digest(&change, state.revision());
    let record = TrustRecord {
        change,
        basis: TrustBasis::FirstUseTerminal,
        possession: Some(signed(&file, &file_entry, &digest)),
        approval: None,
    };
    assert!(append_trust(&journal, &state, &record, Timestamp(NOW + 1)).is_err());
    let _ = sealed;
}

#[test]
fn a_signature_for_one_revision_does_not_approve_the_same_change_at_another() {
    let (_dir, journal) = journal();
    let (person, person_entry, state) = person_registered(&journal);
    let change = TrustChange::ApprovePolicy {
        policy_digest: "ab".repeat(32),
    };
    let stale = change_digest(&change, 0);
    let record = TrustRecord {
        change,
        basis: TrustBasis::Approved,
        possession: None,
        approval: Some(signed(&person, &person_entry, &stale)),
    };
    let replayed = append_trust(&journal, &state, &record, Timestamp(NOW + 1));
    assert!(matches!(replayed, Err(TrustError::Refused(m)) if m.contains("another change")));
}

#[test]
fn the_last_presence_verifier_cannot_be_removed() {
    let (_dir, journal) = journal();
    let (person, person_entry, state) = person_registered(&journal);
    let change = TrustChange::Remove {
        authenticator_id: person_entry.authenticator_id.clone(),
    };
    let digest = change_digest(&change, state.revision());
    let record = TrustRecord {
        change,
        basis: TrustBasis::Approved,
        possession: None,
        approval: Some(signed(&person, &person_entry, &digest)),
    };
    let removed = append_trust(&journal, &state, &record, Timestamp(NOW + 1));
    assert!(matches!(removed, Err(TrustError::Refused(m)) if m.contains("no presence verifier")));
}

#[test]
fn the_minimum_assurance_is_presence_except_for_plain_skills_through_the_json_interface() {
    use ctx_model::CapabilityKind::{Agent, McpServer, Skill};
    assert_eq!(
        required_assurance(Skill, false, false, false),
        Assurance::File
    );
    assert_eq!(
        required_assurance(Skill, false, false, true),
        Assurance::Presence
    );
    assert_eq!(
        required_assurance(Skill, true, false, false),
        Assurance::Presence
    );
    assert_eq!(
        required_assurance(Skill, false, true, false),
        Assurance::Presence
    );
    assert_eq!(
        required_assurance(Agent, false, false, false),
        Assurance::Presence
    );
    assert_eq!(
        required_assurance(McpServer, false, false, false),
        Assurance::Presence
    );
    assert!(Assurance::File < Assurance::Presence && Assurance::Presence < Assurance::UserVerified);
}

/// A standing decision about skill:terraform's exact install.
fn standing(granted: bool, scope: StandingScope) -> StandingDecision {
    StandingDecision {
        granted,
        capability_id: "skill:terraform".to_owned(),
        descriptor_digest: sha256_hex("descriptor"),
        material_identity_digest: sha256_hex("material"),
        scope,
        challenge_digest: sha256_hex("challenge"),
    }
}

/// The person's sealed key, registered on first use.
fn person_registered(journal: &Journal) -> (Ed25519Signer, VerifierEntry, TrustState) {
    let (person, person_entry) = key(1, VerifierKind::SealedKey);
    let state = register(
        journal,
        &TrustState::default(),
        (&person, &person_entry),
        None,
    )
    .expect("first use");
    (person, person_entry, state)
}

fn change_by(
    journal: &Journal,
    state: &TrustState,
    change: TrustChange,
    by: Option<(&Ed25519Signer, &VerifierEntry)>,
) -> Result<TrustState, TrustError> {
    append_change(journal, state, change, None, by)
}

#[test]
fn only_the_persons_presence_key_makes_or_revokes_a_standing_decision() {
    let (_dir, journal) = journal();
    let (person, person_entry, state) = person_registered(&journal);
    let grant = TrustChange::Standing(standing(true, StandingScope::Always));
    // The agent's attempts: unsigned, signed by an unregistered key, signed by a file key.
    let unsigned = change_by(&journal, &state, grant.clone(), None);
    assert!(
        matches!(unsigned, Err(TrustError::Refused(_))),
        "{unsigned:?}"
    );
    let (agent, agent_entry) = key(2, VerifierKind::SealedKey);
    let foreign = change_by(
        &journal,
        &state,
        grant.clone(),
        Some((&agent, &agent_entry)),
    );
    assert!(
        matches!(foreign, Err(TrustError::Refused(_))),
        "{foreign:?}"
    );
    // A signature over another change does not carry over.
    let other = TrustChange::Standing(standing(false, StandingScope::Always));
    let digest = change_digest(&other, state.revision());
    let swapped = TrustRecord {
        change: grant.clone(),
        basis: TrustBasis::Approved,
        possession: None,
        approval: Some(signed(&person, &person_entry, &digest)),
    };
    let swapped = append_trust(&journal, &state, &swapped, Timestamp(NOW + 1));
    assert!(
        matches!(swapped, Err(TrustError::Refused(_))),
        "{swapped:?}"
    );
    assert!(
        read_trust(&journal)
            .expect("a registry")
            .standing()
            .is_empty()
    );

    // The person's: in force, then revoked.
    let state = change_by(&journal, &state, grant, Some((&person, &person_entry)))
        .expect("the person's grant");
    let [entry] = state.standing() else {
        panic!("one standing decision: {:?}", state.standing());
    };
    assert_eq!(entry.decided_by, person_entry.authenticator_id);
    let id = entry.id.clone();
    let applies = |s: &TrustState| {
        s.standing_for(
            "skill:terraform",
            &sha256_hex("descriptor"),
            &sha256_hex("material"),
            "claude:s-1",
            "ws-1",
        )
        .map(|e| e.id.clone())
    };
    assert_eq!(applies(&state), Some(id.clone()));
    // Another body is another install: nothing applies.
    assert!(
        state
            .standing_for(
                "skill:terraform",
                &sha256_hex("descriptor"),
                &sha256_hex("changed material"),
                "claude:s-1",
                "ws-1",
            )
            .is_none()
    );
    let revoke = TrustChange::Revoke(RevokeTarget::Standing(id.clone()));
    let by_agent = change_by(
        &journal,
        &state,
        revoke.clone(),
        Some((&agent, &agent_entry)),
    );
    assert!(
        matches!(by_agent, Err(TrustError::Refused(_))),
        "{by_agent:?}"
    );
    let state = change_by(
        &journal,
        &state,
        revoke.clone(),
        Some((&person, &person_entry)),
    )
    .expect("the person's revocation");
    assert_eq!(applies(&state), None);
    // Revoking the standing grant also revokes the grant signed at its challenge.
    assert!(state.challenge_revoked(&sha256_hex("challenge"), u64::MAX));
    assert!(state.basis_revoked(&id));
    let again = change_by(&journal, &state, revoke, Some((&person, &person_entry)));
    assert!(matches!(again, Err(TrustError::Refused(_))), "{again:?}");
    // A reader re-verifies all of it.
    assert_eq!(read_trust(&journal).expect("a registry"), state);
}

#[test]
fn a_denial_wins_over_a_grant_and_scopes_cover_only_their_own() {
    let (_dir, journal) = journal();
    let (person, person_entry, mut state) = person_registered(&journal);
    let by = Some((&person, &person_entry));
    for change in [
        TrustChange::Standing(standing(true, StandingScope::Always)),
        TrustChange::Standing(standing(false, StandingScope::Workspace("ws-2".to_owned()))),
        TrustChange::Standing(standing(
            false,
            StandingScope::Session("claude:s-9".to_owned()),
        )),
    ] {
        state = change_by(&journal, &state, change, by).expect("the person's decision");
    }
    let decided = |session: &str, workspace: &str| {
        state
            .standing_for(
                "skill:terraform",
                &sha256_hex("descriptor"),
                &sha256_hex("material"),
                session,
                workspace,
            )
            .map(|e| e.decision.granted)
    };
    assert_eq!(decided("claude:s-1", "ws-1"), Some(true));
    assert_eq!(decided("claude:s-1", "ws-2"), Some(false));
    assert_eq!(decided("claude:s-9", "ws-1"), Some(false));
    let denial = |session: &str, workspace: &str| {
        state
            .denial_for(
                "skill:terraform",
                &sha256_hex("descriptor"),
                session,
                workspace,
            )
            .is_some()
    };
    assert!(denial("claude:s-2", "ws-2"));
    assert!(!denial("claude:s-2", "ws-3"));
    assert!(
        state
            .denial_for(
                "skill:terraform",
                &sha256_hex("other"),
                "claude:s-9",
                "ws-2"
            )
            .is_none()
    );
}

/// A challenge for terraform's exact install (`material`) in host session `claude:s-1`.
fn challenge_for(id: &str, material: &str) -> InstallConsentChallenge {
    use ctx_projections::consent_store::ChallengeFields;
    InstallConsentChallenge::new(ChallengeFields {
        challenge_id: id.to_owned(),
        audience: "ctx-managed-query".to_owned(),
        workspace_identity_digest: sha256_hex("workspace"),
        scope: ctx_model::ScopeRef {
            tenant_id: "local".to_owned(),
            workspace_id: "ws-1".to_owned(),
            repository_id: "ws-1".to_owned(),
            session_id: "claude:s-1:0123456789abcdef".to_owned(),
            exposure_id: "work-1".to_owned(),
            host_context_id: "ctx-cli".to_owned(),
            parent_exposure_id: None,
        },
        capability_id: "skill:terraform".to_owned(),
        kind: "skill".to_owned(),
        source_digest: sha256_hex("source"),
        catalog_snapshot_digest: sha256_hex("catalog"),
        install_plan_digest: sha256_hex("plan"),
        descriptor_digest: sha256_hex("descriptor"),
        execution_binding_digest: sha256_hex("binding"),
        selection_digest: sha256_hex("selection"),
        material_identity_digest: sha256_hex(material),
        requested_action_content_digest: sha256_hex(id),
        policy_snapshot_digest: sha256_hex("policy"),
        release_root_digest: sha256_hex("release"),
        plan_id: "plan-1".to_owned(),
        requested_action_id: format!("action-{id}"),
        requested_action_kind: "InstallCapability".to_owned(),
        requested_action_precondition_revision: 3,
        permission_expansion: false,
        credential_requirement: false,
        expires_at: "2027-01-01T00:00:00Z".to_owned(),
    })
    .expect("a valid challenge")
}

/// A consent assertion about `challenge` by `entry` carrying `proof`.
fn consent_assertion(
    entry: &VerifierEntry,
    challenge: &InstallConsentChallenge,
    proof: Vec<u8>,
) -> SignedHumanDecisionAssertion {
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge.challenge_digest().to_owned(),
        decision: "granted".to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: "ctx-managed-query".to_owned(),
        nonce: "ctx-nonce-00112233445566778899aabbccddeeff".to_owned(),
        issued_at: UtcMicros(NOW).render(),
        expires_at: UtcMicros(NOW + 60_000_000).render(),
        proof,
    })
    .expect("an assertion")
}

#[test]
fn a_delegated_decision_holds_only_on_a_basis_that_stood_and_covers_it() {
    let (_dir, journal) = journal();
    let (person, person_entry, state) = person_registered(&journal);
    let by = Some((&person, &person_entry));
    let earlier = challenge_for("c-1", "material");
    let later = challenge_for("c-2", "material");
    let changed = challenge_for("c-3", "other material");
    let decision = StandingDecision {
        granted: true,
        capability_id: "skill:terraform".to_owned(),
        descriptor_digest: sha256_hex("descriptor"),
        material_identity_digest: sha256_hex("material"),
        scope: StandingScope::Session("claude:s-1".to_owned()),
        challenge_digest: earlier.challenge_digest().to_owned(),
    };
    let id = decision.id();
    let state = change_by(&journal, &state, TrustChange::Standing(decision), by)
        .expect("the person's grant");
    let made_at = state.standing()[0].position;
    let lookup = |d: &str| {
        [&earlier, &later, &changed]
            .into_iter()
            .find(|c| c.challenge_digest() == d)
            .cloned()
    };
    let check = |state: &TrustState, c: &InstallConsentChallenge, basis: &DelegatedBasis, at| {
        let assertion = consent_assertion(&person_entry, c, basis.proof());
        check_delegated(
            &journal,
            state,
            c,
            &assertion,
            basis,
            at,
            Assurance::Presence,
            &lookup,
        )
    };
    let standing = DelegatedBasis::Standing(id.clone());
    assert!(check(&state, &later, &standing, u64::MAX).is_ok());
    // Another body, or a decision before the grant was made: refused.
    assert!(check(&state, &changed, &standing, u64::MAX).is_err());
    assert!(check(&state, &later, &standing, made_at).is_err());
    // Another signer named in the decision: refused.
    let (_, other_entry) = key(3, VerifierKind::SealedKey);
    let by_other = consent_assertion(&other_entry, &later, standing.proof());
    assert!(
        check_delegated(
            &journal,
            &state,
            &later,
            &by_other,
            &standing,
            u64::MAX,
            Assurance::Presence,
            &lookup
        )
        .is_err()
    );

    // A grant signed at an earlier challenge: only with its signed evidence.
    let installed = DelegatedBasis::Installed(earlier.challenge_digest().to_owned());
    let refused = check(&state, &later, &installed, u64::MAX);
    assert!(
        refused
            .as_ref()
            .is_err_and(|m| m.to_string().contains("no signed grant")),
        "{refused:?}"
    );
    let unsigned = consent_assertion(&person_entry, &earlier, b"unsigned".to_vec());
    let signed = person.sign_assertion(&unsigned).expect("signed");
    record_decision_evidence(
        &journal,
        &signed,
        &person_entry,
        Assurance::Presence,
        Timestamp(NOW + 2),
    )
    .expect("evidence");
    assert!(check(&state, &later, &installed, u64::MAX).is_ok());
    assert!(check(&state, &changed, &installed, u64::MAX).is_err());

    // Revoking the standing decision revokes it and the grant at its challenge, from then on.
    let revoked = change_by(
        &journal,
        &state,
        TrustChange::Revoke(RevokeTarget::Standing(id)),
        by,
    )
    .expect("the person's revocation");
    let revoked_at = revoked.standing()[0].revoked_position.expect("revoked");
    assert!(check(&revoked, &later, &standing, u64::MAX).is_err());
    assert!(check(&revoked, &later, &installed, u64::MAX).is_err());
    assert!(check(&revoked, &later, &standing, revoked_at - 1).is_ok());
}
