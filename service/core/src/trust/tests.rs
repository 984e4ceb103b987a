//! The registry fold against its rules (spec/decisions.md §14.2), on a real journal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_journal::{Journal, OpenOptions, Timestamp};
use ctx_model::UtcMicros;

use super::*;

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

fn register(
    journal: &Journal,
    state: &TrustState,
    new: (&Ed25519Signer, &VerifierEntry),
    approver: Option<(&Ed25519Signer, &VerifierEntry)>,
) -> Result<TrustState, TrustError> {
    let change = TrustChange::Register(new.1.clone());
    let digest = change_digest(&change, state.revision());
    let record = TrustRecord {
        basis: if approver.is_some() {
            TrustBasis::Approved
        } else {
            TrustBasis::FirstUseTerminal
        },
        possession: Some(signed(new.0, new.1, &digest)),
        approval: approver.map(|(s, e)| signed(s, e, &digest)),
        change,
    };
    append_trust(journal, state, &record, Timestamp(NOW + 1))
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
    let (person, person_entry) = key(1, VerifierKind::SealedKey);
    let state = register(
        &journal,
        &TrustState::default(),
        (&person, &person_entry),
        None,
    )
    .expect("first use");
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
    let (person, person_entry) = key(1, VerifierKind::SealedKey);
    let state = register(
        &journal,
        &TrustState::default(),
        (&person, &person_entry),
        None,
    )
    .expect("first use");
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
