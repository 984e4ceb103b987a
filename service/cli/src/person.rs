//! The person's commands, run in their own terminal rather than by a host (spec/cli.md §6):
//! `ctx key init` creates (or re-registers) their device key, and `ctx consent approve` /
//! `ctx consent deny` show exactly what a consent challenge would install and what it may do,
//! ask, sign the decision with the device key and resolve the consent.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use ctx_journal::Timestamp;
use ctx_model::{Json, UtcMicros};

use crate::commands::{HostCommand, field, run_step};
use crate::error::{CliError, EXIT_OK, EXIT_OUTCOME};
use ctx_service::{Layout, generate_device_key, read_device_key, register_device};

/// The device key's file name inside its directory.
pub const DEVICE_KEY_FILE: &str = "device.key";

/// The default device key: `$XDG_CONFIG_HOME/ctx/device.key`, else `$HOME/.config/ctx/device.key`
/// (absolute paths only; empty variables count as unset).
pub fn default_device_key(env: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, CliError> {
    let get = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(config) = get("XDG_CONFIG_HOME") {
        return Ok(config.join("ctx").join(DEVICE_KEY_FILE));
    }
    match get("HOME") {
        Some(home) => Ok(home.join(".config").join("ctx").join(DEVICE_KEY_FILE)),
        None => Err(CliError::Usage(
            "neither XDG_CONFIG_HOME nor HOME is an absolute path; name the device key with --key \
             FILE"
                .to_owned(),
        )),
    }
}

/// `ctx key init`: creates the device key at `key` (its directory 0700, the file 0600) unless it
/// exists, and registers its public key in the data directory either way.
pub(crate) fn key_init(layout: &Layout, key: &Path, out: &mut dyn Write) -> Result<u8, CliError> {
    let failure = |e: ctx_service::RuntimeError| CliError::Step {
        step: "key init",
        message: e.to_string(),
        exit: crate::error::EXIT_INTERNAL,
    };
    let identity = if key.exists() {
        let (_, identity) = read_device_key(key).map_err(failure)?;
        register_device(layout, &identity).map_err(failure)?;
        writeln!(out, "device key {} already exists", key.display())?;
        identity
    } else {
        if let Some(parent) = key.parent() {
            ctx_fs::create_private_dir_all(parent).map_err(|e| failure(e.into()))?;
        }
        let identity = generate_device_key(layout, key).map_err(failure)?;
        writeln!(
            out,
            "created the device key {} (mode 0600); keep it to yourself",
            key.display()
        )?;
        identity
    };
    writeln!(
        out,
        "registered device {} (public key {}) as a trusted verifier of {}",
        identity.authenticator_id,
        identity.public_key_hex,
        layout.root().display()
    )?;
    Ok(EXIT_OK)
}

/// `ctx consent approve|deny`: shows the challenge, asks unless `yes`, signs and resolves.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decide(
    layout: &Layout,
    now: Timestamp,
    challenge_digest: &str,
    grant: bool,
    key: &Path,
    yes: bool,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let now = UtcMicros(now.0);
    let record = run_step(
        "consent challenge",
        layout,
        now,
        HostCommand::ConsentChallenge,
        Json::object([("challenge_digest", Json::str(challenge_digest))]),
    )?;
    let challenge = record.get("challenge").cloned().unwrap_or(Json::Null);
    let install = record.get("install").cloned().unwrap_or(Json::Null);
    let yes_no = |value: Option<&Json>| match value {
        Some(Json::Bool(true)) => "YES",
        _ => "no",
    };
    writeln!(out, "consent challenge {challenge_digest}")?;
    writeln!(
        out,
        "  install:               {} ({})",
        field(&record, "capability_id"),
        field(&record, "kind")
    )?;
    writeln!(
        out,
        "  file it installs:      {}",
        field(&install, "result_path")
    )?;
    writeln!(
        out,
        "  content SHA-256:       {}",
        field(&install, "result_sha256")
    )?;
    writeln!(
        out,
        "  expands permissions:   {}",
        yes_no(install.get("permission_expansion"))
    )?;
    writeln!(
        out,
        "  needs credentials:     {}",
        yes_no(install.get("credential_requirement"))
    )?;
    writeln!(
        out,
        "  for session:           {}",
        challenge
            .get("scope")
            .map_or("?", |s| field(s, "session_id"))
    )?;
    writeln!(
        out,
        "  expires at:            {}",
        field(&challenge, "expires_at")
    )?;
    writeln!(out, "  state:                 {}", field(&record, "state"))?;
    if field(&record, "state") != "pending" {
        writeln!(
            out,
            "this challenge is not awaiting a decision; nothing was signed"
        )?;
        return Ok(EXIT_OUTCOME);
    }
    let verb = if grant { "approve" } else { "deny" };
    if !yes {
        write!(out, "{verb} this install? [y/N] ")?;
        out.flush()?;
        let mut answer = String::new();
        input.read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            writeln!(out, "not confirmed; nothing was signed")?;
            return Ok(EXIT_OUTCOME);
        }
    }
    if !key.exists() {
        return Err(CliError::Usage(format!(
            "there is no device key at {}; create it with `ctx key init`",
            key.display()
        )));
    }
    let signed = run_step(
        "key sign",
        layout,
        now,
        HostCommand::KeySign {
            key: key.to_path_buf(),
        },
        Json::object([
            ("challenge_digest", Json::str(challenge_digest)),
            (
                "decision",
                Json::str(if grant { "granted" } else { "denied" }),
            ),
        ]),
    )?;
    let resolved = run_step(
        "consent resolve",
        layout,
        now,
        HostCommand::ConsentResolve,
        Json::object([("assertion", Json::str(field(&signed, "assertion")))]),
    )?;
    writeln!(
        out,
        "signed with device {}: {} ({})",
        field(&signed, "authenticator_id"),
        field(&resolved, "outcome"),
        field(&resolved, "reason_code")
    )?;
    if let Some(next) = resolved.get("next_challenge").filter(|n| **n != Json::Null) {
        writeln!(
            out,
            "next: {} awaits consent: ctx consent approve {}",
            field(next, "capability_id"),
            field(next, "challenge_digest")
        )?;
    }
    Ok(EXIT_OK)
}

/// A challenge digest given on the command line must look like one before anything is opened.
pub(crate) fn check_digest(digest: &str) -> Result<(), CliError> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "{digest:?} is not a challenge digest (64 lowercase hex digits)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_key_follows_xdg_then_home() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let xdg = default_device_key(&env(&[("XDG_CONFIG_HOME", "/c"), ("HOME", "/h")]));
        assert_eq!(xdg.ok(), Some(PathBuf::from("/c/ctx/device.key")));
        let home = default_device_key(&env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")]));
        assert_eq!(home.ok(), Some(PathBuf::from("/h/.config/ctx/device.key")));
        assert!(default_device_key(&env(&[("HOME", "h")])).is_err());
    }

    #[test]
    fn a_challenge_digest_must_be_64_lowercase_hex() {
        assert!(check_digest(&"a".repeat(64)).is_ok());
        assert!(check_digest(&"A".repeat(64)).is_err());
        assert!(check_digest("abc").is_err());
    }
}
