//! The person's standing decisions (spec/cli.md §6, spec/decisions.md §16): remembering a
//! decision beyond its challenge, listing them, and revoking one. Each is a change of the signed
//! verifier registry, made only with a sealed device key opened at the person's terminal.

use std::io::Write;
use std::path::Path;

use ctx_journal::Timestamp;
use ctx_model::UtcMicros;
use ctx_service::{
    Ed25519Signer, Layout, RevokeTarget, StandingDecision, StandingScope, TrustBasis, TrustChange,
    TrustRecord, VerifierEntry, append_trust, change_digest, host_session_of, read_device_key,
    read_trust, sign_trust_assertion, unsigned_trust_assertion,
};

use crate::DecisionScope;
use crate::error::{CliError, EXIT_OK};
use crate::person::{open_key, person, trust_journal};
use crate::tty::Terminal;

/// Appends the standing decision the person just made at `challenge_digest` with `signer` (its
/// key already opened at the terminal) and returns its id.
pub(crate) fn remember(
    layout: &Layout,
    now: UtcMicros,
    challenge_digest: &str,
    grant: bool,
    scope: DecisionScope,
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
) -> Result<String, CliError> {
    let step = "remember the decision";
    let record = ctx_service::challenge_record(layout, challenge_digest, now)
        .map_err(|e| person(step)(e.into()))?;
    let challenge = record.challenge();
    let session = host_session_of(&challenge.scope().session_id).to_owned();
    let workspace = challenge.scope().workspace_id.clone();
    let scope = match scope {
        DecisionScope::Session => StandingScope::Session(session),
        DecisionScope::Workspace => StandingScope::Workspace(workspace),
        DecisionScope::Always | DecisionScope::Once => StandingScope::Always,
    };
    let decision = StandingDecision {
        granted: grant,
        capability_id: challenge.capability_id().to_owned(),
        descriptor_digest: challenge.descriptor_digest().to_owned(),
        material_identity_digest: challenge.material_identity_digest().to_owned(),
        scope,
        challenge_digest: challenge_digest.to_owned(),
    };
    let id = decision.id();
    sign_and_append(
        layout,
        now,
        TrustChange::Standing(decision),
        signer,
        entry,
        step,
    )?;
    Ok(id)
}

/// Signs `change` with the opened `signer` and appends it to the registry.
fn sign_and_append(
    layout: &Layout,
    now: UtcMicros,
    change: TrustChange,
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
    step: &'static str,
) -> Result<(), CliError> {
    let journal = trust_journal(layout)?;
    let state = read_trust(&journal).map_err(|e| person(step)(e.into()))?;
    let digest = change_digest(&change, state.revision());
    let approval = unsigned_trust_assertion(entry, &digest, now)
        .and_then(|unsigned| sign_trust_assertion(signer, &unsigned))
        .map_err(|e| person(step)(e.into()))?;
    let record = TrustRecord {
        change,
        basis: TrustBasis::Approved,
        possession: None,
        approval: Some(approval),
    };
    append_trust(&journal, &state, &record, Timestamp(now.0))
        .map_err(|e| person(step)(e.into()))?;
    Ok(())
}

/// `ctx consent list`: every standing decision, in force or revoked, and every revoked grant.
pub(crate) fn list(layout: &Layout, out: &mut dyn Write) -> Result<u8, CliError> {
    if !ctx_service::journal_exists(&layout.journal()) {
        writeln!(out, "you have made no standing decision")?;
        return Ok(EXIT_OK);
    }
    let journal = trust_journal(layout)?;
    let state = read_trust(&journal).map_err(|e| person("consent list")(e.into()))?;
    if state.standing().is_empty() {
        writeln!(out, "you have made no standing decision")?;
    }
    for entry in state.standing() {
        let status = if entry.revoked_position.is_some() {
            "revoked"
        } else {
            "in force"
        };
        writeln!(
            out,
            "{}  {status}  {}\n    decided {} by {} at challenge {}",
            entry.id,
            entry.decision.describe(),
            UtcMicros(entry.decided_at.0).render(),
            entry.decided_by,
            entry.decision.challenge_digest
        )?;
    }
    Ok(EXIT_OK)
}

/// `ctx consent revoke ID`: signs the revocation with the person's sealed key at the terminal.
/// What it granted is taken away at the agent's next prompt or session start.
pub(crate) fn revoke(
    layout: &Layout,
    now: Timestamp,
    target: &RevokeTarget,
    key: &Path,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let step = "consent revoke";
    let now = UtcMicros(now.0);
    let change = TrustChange::Revoke(target.clone());
    let mut tty = Terminal::open("`ctx consent revoke`")?;
    let file = read_device_key(key).map_err(person(step))?;
    if !file.is_sealed() {
        return Err(CliError::Step {
            step,
            message: format!(
                "{} is a plain file key; a revocation is signed only with a sealed device key",
                key.display()
            ),
            exit: crate::error::EXIT_OUTCOME,
        });
    }
    tty.say(&format!("{}\n", change.describe()))?;
    let signer = open_key(&file, key, Some(&mut tty), step)?;
    sign_and_append(layout, now, change, &signer, &file.entry(), step)?;
    writeln!(
        out,
        "revoked {}; what it granted is taken away at your agent's next prompt or session start",
        target.as_str()
    )?;
    Ok(EXIT_OK)
}
