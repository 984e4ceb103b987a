//! The person's standing decisions (spec/cli.md §6, spec/decisions.md §16): listing them and
//! revoking one (a decision is remembered by `ctx consent approve|deny --scope`, in `person`).
//! Each is a change of the signed verifier registry, made only with a sealed device key opened
//! at the person's terminal.

use std::io::Write;
use std::path::Path;

use ctx_journal::Timestamp;
use ctx_model::UtcMicros;
use ctx_service::{Layout, RevokeTarget, TrustChange, read_device_key, read_trust};

use crate::error::{CliError, EXIT_OK};
use crate::person::{open_key, person, sign_and_append, trust_journal};
use crate::tty::Terminal;

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
