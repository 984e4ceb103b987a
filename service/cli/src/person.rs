//! The person's commands, run in their own terminal rather than by a host (spec/cli.md §6):
//! `ctx key init` creates their device key and registers it in the signed verifier registry, and
//! `ctx consent approve` / `ctx consent deny` show exactly what a consent challenge would install
//! and what it may do, ask at the terminal, sign the decision with the device key and resolve the
//! consent. Every answer and passphrase comes from the controlling terminal (spec/decisions.md
//! §13.2).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use ctx_journal::Timestamp;
use ctx_model::{Json, UtcMicros};

use crate::DecisionScope;
use crate::browser::{
    DECIDE_SCRIPT, PAGE_CEREMONY_TIMEOUT, PageServer, REGISTER_SCRIPT, Refusal, Step, b64,
    b64_field, page,
};
use crate::commands::{HostCommand, field, run_step, sign_decision, unsigned_decision};
use crate::error::{CliError, EXIT_OK, EXIT_OUTCOME};
use crate::tty::Terminal;
use ctx_projections::consent_store::SignedHumanDecisionAssertion;
use ctx_service::{
    DeviceKeyFile, Ed25519Signer, Layout, RuntimeError, TrustBasis, TrustChange, TrustRecord,
    VerifierEntry, append_trust, change_digest, check_passphrase, fresh_signer, read_device_key,
    read_trust, sign_trust_assertion, unsigned_trust_assertion, write_plain_key, write_sealed_key,
};
use ctx_service::{
    OriginPolicy, VerifierKind, WEBAUTHN_RP_ID, WebAuthnCredential, WebAuthnProof,
    WebAuthnVerifier, verify_webauthn_registration, webauthn_challenge,
};
use ctx_service::{StandingDecision, StandingScope, host_session_of};

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

/// Opens the journal of `layout` for a change of its verifier registry (creating the data
/// directory when it is new).
pub(crate) fn trust_journal(layout: &Layout) -> Result<ctx_journal::Journal, CliError> {
    ctx_fs::create_private_dir_all(layout.root()).map_err(|e| person("key init")(e.into()))?;
    Ok(ctx_service::open_journal(
        &layout.journal(),
        &ctx_journal::OpenOptions::new(),
    )?)
}

pub(crate) fn person(step: &'static str) -> impl Fn(RuntimeError) -> CliError {
    move |source| CliError::Person {
        step,
        source: Box::new(source),
    }
}

/// Registers a plain file key on the file-key first-use basis (CI and the demo).
pub(crate) fn register_file_key(
    journal: &ctx_journal::Journal,
    state: &ctx_service::TrustState,
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
    now: Timestamp,
) -> Result<(), RuntimeError> {
    let change = TrustChange::Register(entry.clone());
    let digest = change_digest(&change, state.revision());
    let possession = unsigned_trust_assertion(entry, &digest, UtcMicros(now.0))
        .and_then(|unsigned| sign_trust_assertion(signer, &unsigned))?;
    let record = TrustRecord {
        change,
        basis: TrustBasis::FirstUseFileKey,
        possession: Some(possession),
        approval: None,
    };
    append_trust(journal, state, &record, now)?;
    Ok(())
}

/// Reads a new passphrase twice from the terminal.
fn new_passphrase(tty: &mut Terminal) -> Result<zeroize::Zeroizing<String>, CliError> {
    loop {
        let first = tty.passphrase("choose a passphrase for the device key: ")?;
        if let Err(e) = check_passphrase(&first) {
            tty.say(&format!("{e}\n"))?;
            continue;
        }
        let second = tty.passphrase("type it again: ")?;
        if *first == *second {
            return Ok(first);
        }
        tty.say("the two passphrases differ; again\n")?;
    }
}

/// Opens a device key: a sealed key with its passphrase typed at `tty`.
pub(crate) fn open_key(
    file: &DeviceKeyFile,
    key: &Path,
    tty: Option<&mut Terminal>,
    step: &'static str,
) -> Result<Ed25519Signer, CliError> {
    if !file.is_sealed() {
        return file.open(None).map_err(person(step));
    }
    let Some(tty) = tty else {
        return Err(CliError::NoTerminal(format!(
            "{step}: the sealed device key {} opens only with its passphrase, typed at the \
             person's own terminal, and this process has no controlling terminal",
            key.display()
        )));
    };
    let passphrase = tty.passphrase(&format!("passphrase for {}: ", key.display()))?;
    file.open(Some(&passphrase)).map_err(person(step))
}

/// `ctx key init`: creates the person's device key at `key` unless it exists — sealed under a
/// passphrase, or a plain file key with `file_key` (CI and the demo) — and registers it as a
/// verifier of the data directory: on first use from this terminal, or approved with the
/// registered key `approver` (spec/decisions.md §14).
pub(crate) fn key_init(
    layout: &Layout,
    now: Timestamp,
    key: &Path,
    file_key: bool,
    approver: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let step = "key init";
    let journal = trust_journal(layout)?;
    let state = read_trust(&journal).map_err(|e| person(step)(e.into()))?;
    if file_key && !key.exists() && !state.has_presence_verifier() {
        // A file key proves nothing about the person, so CI may register one without a
        // terminal while no presence verifier exists (spec/decisions.md §14.2).
        let signer = fresh_signer().map_err(person(step))?;
        let entry = write_plain_key(key, &signer).map_err(person(step))?;
        register_file_key(&journal, &state, &signer, &entry, now).map_err(person(step))?;
        writeln!(
            out,
            "created the plain file key {} (mode 0600) and registered it as {} (file assurance: \
             never enough for a hook's consent, an agent, an MCP server or a permission-expanding \
             install)",
            key.display(),
            entry.authenticator_id
        )?;
        return Ok(EXIT_OK);
    }
    let mut tty = Terminal::open("registering a device key (`ctx key init`)")?;
    let (file, signer) = if key.exists() {
        let file = read_device_key(key).map_err(person(step))?;
        if !file.is_sealed()
            && !file_key
            && tty.confirm(&format!(
                "{} is a plain device key: any program of your account can read it and decide \
                 for you. Replace it with a new key sealed under a passphrase? [y/N] ",
                key.display()
            ))?
        {
            let signer = fresh_signer().map_err(person(step))?;
            let passphrase = new_passphrase(&mut tty)?;
            let fresh = key.with_extension("key.sealing");
            let _ = std::fs::remove_file(&fresh);
            write_sealed_key(&fresh, &signer, &passphrase).map_err(person(step))?;
            std::fs::rename(&fresh, key)?;
            writeln!(
                out,
                "sealed a new device key in {} (the plain key is gone)",
                key.display()
            )?;
            (read_device_key(key).map_err(person(step))?, signer)
        } else {
            let signer = open_key(&file, key, Some(&mut tty), step)?;
            writeln!(out, "device key {} already exists", key.display())?;
            (file, signer)
        }
    } else {
        if let Some(parent) = key.parent() {
            ctx_fs::create_private_dir_all(parent).map_err(|e| person(step)(e.into()))?;
        }
        let signer = fresh_signer().map_err(person(step))?;
        if file_key {
            write_plain_key(key, &signer).map_err(person(step))?;
            writeln!(
                out,
                "created the plain file key {} (mode 0600): low assurance, for CI and demos",
                key.display()
            )?;
        } else {
            let passphrase = new_passphrase(&mut tty)?;
            write_sealed_key(key, &signer, &passphrase).map_err(person(step))?;
            writeln!(
                out,
                "created the device key {}, sealed under your passphrase",
                key.display()
            )?;
        }
        (read_device_key(key).map_err(person(step))?, signer)
    };
    let entry = file.entry();
    if state.find(&entry.authenticator_id).is_some() {
        writeln!(
            out,
            "device {} ({}, {} assurance) is already a verifier of {}",
            entry.authenticator_id,
            entry.kind.as_str(),
            entry.assurance(),
            layout.root().display()
        )?;
        return Ok(EXIT_OK);
    }
    let digest = change_digest(&TrustChange::Register(entry.clone()), state.revision());
    let possession = unsigned_trust_assertion(&entry, &digest, UtcMicros(now.0))
        .and_then(|unsigned| sign_trust_assertion(&signer, &unsigned))
        .map_err(|e| person(step)(e.into()))?;
    append_registration(
        layout, &journal, &state, &mut tty, &entry, possession, approver, now, step,
    )?;
    writeln!(
        out,
        "registered device {} ({}, {} assurance; public key {}) as a verifier of {}",
        entry.authenticator_id,
        entry.kind.as_str(),
        entry.assurance(),
        entry
            .public_key
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        layout.root().display()
    )?;
    Ok(EXIT_OK)
}

/// Appends the registration of `entry`, with its proof of possession, to the verifier registry
/// read as `state` (spec/decisions.md §14.2): approved by the registered key `approver` (opened
/// at the terminal) when the directory already has a presence verifier, else trusted on first
/// use from this terminal.
#[allow(clippy::too_many_arguments)] // One call per authenticator kind; a struct would only rename them.
fn append_registration(
    layout: &Layout,
    journal: &ctx_journal::Journal,
    state: &ctx_service::TrustState,
    tty: &mut Terminal,
    entry: &VerifierEntry,
    possession: SignedHumanDecisionAssertion,
    approver: Option<&Path>,
    now: Timestamp,
    step: &'static str,
) -> Result<(), CliError> {
    let change = TrustChange::Register(entry.clone());
    let (basis, approval) = if state.has_presence_verifier() {
        let Some(approver) = approver else {
            return Err(CliError::Usage(format!(
                "{} already has a verifier; a new one must be approved by it: name its key \
                 with --approver FILE",
                layout.root().display()
            )));
        };
        let digest = change_digest(&change, state.revision());
        let approver_file = read_device_key(approver).map_err(person(step))?;
        tty.say(&format!("approve: {}\n", change.describe()))?;
        let approver_signer = open_key(&approver_file, approver, Some(tty), step)?;
        let approval = unsigned_trust_assertion(&approver_file.entry(), &digest, UtcMicros(now.0))
            .and_then(|unsigned| sign_trust_assertion(&approver_signer, &unsigned))
            .map_err(|e| person(step)(e.into()))?;
        (TrustBasis::Approved, Some(approval))
    } else {
        tty.say(&format!(
            "{} has no verifier yet: {} is trusted on first use, from this terminal\n",
            layout.root().display(),
            entry.authenticator_id
        ))?;
        (TrustBasis::FirstUseTerminal, None)
    };
    let record = TrustRecord {
        change,
        basis,
        possession: Some(possession),
        approval,
    };
    append_trust(journal, state, &record, now).map_err(|e| person(step)(e.into()))?;
    Ok(())
}

/// The digests of the challenges that await the person now, oldest first.
fn pending_digests(layout: &Layout, now: Timestamp) -> Result<Vec<String>, CliError> {
    let records =
        ctx_service::challenges(layout, UtcMicros(now.0)).map_err(|e| CliError::Person {
            step: "consent pending",
            source: Box::new(RuntimeError::Service(e)),
        })?;
    Ok(records
        .iter()
        .filter(|r| r.state() == ctx_projections::consent_store::ChallengeState::Pending)
        .map(|r| r.challenge().challenge_digest().to_owned())
        .collect())
}

/// `ctx consent pending`: every challenge of the data directory that awaits the person, each with
/// what it installs and may do (spec/cli.md §6). Reading needs no terminal: deciding does.
pub(crate) fn pending(
    layout: &Layout,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    if !ctx_service::journal_exists(&layout.journal()) {
        writeln!(out, "no consent waits for you")?;
        return Ok(EXIT_OK);
    }
    let digests = pending_digests(layout, now)?;
    if digests.is_empty() {
        writeln!(out, "no consent waits for you")?;
        return Ok(EXIT_OK);
    }
    writeln!(out, "{} consent(s) wait for you:", digests.len())?;
    for digest in &digests {
        let record = run_step(
            "consent challenge",
            layout,
            UtcMicros(now.0),
            HostCommand::ConsentChallenge,
            Json::object([("challenge_digest", Json::str(digest))]),
        )?;
        writeln!(out)?;
        for line in challenge_summary(&record, digest) {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(
        out,
        "\ndecide each in this terminal: ctx consent approve <challenge> (or deny)"
    )?;
    Ok(EXIT_OK)
}

/// `ctx consent approve|deny`: decides one challenge ([`decide_one`]); then, at a terminal and
/// without `--yes`, offers every other pending challenge in turn, so one sitting settles all
/// of them (spec/cli.md §6).
pub(crate) fn decide(
    layout: &Layout,
    now: Timestamp,
    challenge_digest: &str,
    decision: Decision,
    key: &Path,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let status = decide_one(layout, now, challenge_digest, decision, key, out)?;
    if status != EXIT_OK || decision.yes {
        return Ok(status);
    }
    let mut skipped: Vec<String> = vec![challenge_digest.to_owned()];
    loop {
        let next = pending_digests(layout, now)?
            .into_iter()
            .find(|d| !skipped.contains(d));
        let Some(next) = next else {
            return Ok(status);
        };
        let Ok(mut tty) = Terminal::open("offering the next consent") else {
            return Ok(status);
        };
        let record = run_step(
            "consent challenge",
            layout,
            UtcMicros(now.0),
            HostCommand::ConsentChallenge,
            Json::object([("challenge_digest", Json::str(&next))]),
        )?;
        writeln!(out, "\nanother consent waits for you:")?;
        for line in challenge_summary(&record, &next) {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        let answer = tty.ask("[a]pprove, [d]eny, or [s]kip the rest? ")?;
        let grant = match answer.trim() {
            "a" | "approve" => true,
            "d" | "deny" => false,
            _ => {
                writeln!(out, "skipped; `ctx consent pending` lists what still waits")?;
                return Ok(status);
            }
        };
        drop(tty);
        skipped.push(next.clone());
        // Shown and answered above: only the passphrase is asked now. A sitting's later
        // answers are for their own challenge only.
        let next_decision = Decision {
            grant,
            scope: DecisionScope::Once,
            yes: true,
        };
        decide_one(layout, now, &next, next_decision, key, out)?;
    }
}

/// `ctx consent approve|deny` of one challenge: shows it, asks at the terminal unless `yes`,
/// signs with the device key (a sealed key's passphrase typed at the terminal) and resolves.
fn decide_one(
    layout: &Layout,
    now: Timestamp,
    challenge_digest: &str,
    decision: Decision,
    key: &Path,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let Decision { grant, scope, yes } = decision;
    let now = UtcMicros(now.0);
    let record = run_step(
        "consent challenge",
        layout,
        now,
        HostCommand::ConsentChallenge,
        Json::object([("challenge_digest", Json::str(challenge_digest))]),
    )?;
    for line in challenge_summary(&record, challenge_digest) {
        writeln!(out, "{line}")?;
    }
    if field(&record, "state") != "pending" {
        writeln!(
            out,
            "this challenge is not awaiting a decision; nothing was signed"
        )?;
        return Ok(EXIT_OUTCOME);
    }
    if !key.exists() {
        // Not a mistake in the command line: the help text would only bury the sentence.
        return Err(CliError::Step {
            step: "consent",
            message: format!(
                "there is no device key at {}; create it once with `ctx key init` in this \
                 terminal, or name another with --key FILE",
                key.display()
            ),
            exit: crate::error::EXIT_USAGE,
        });
    }
    let file = read_device_key(key).map_err(person("consent"))?;
    let verb = if grant { "approve" } else { "deny" };
    // A standing decision is a change of the signed registry, which only a sealed key (at
    // presence) may make: refused before anything is asked or signed (spec/decisions.md §16).
    if scope != DecisionScope::Once && !file.is_sealed() {
        return Err(CliError::Step {
            step: "consent",
            message: format!(
                "{} is a plain file key; a decision --scope {} is made only with a sealed \
                 device key",
                key.display(),
                scope.as_str()
            ),
            exit: EXIT_OUTCOME,
        });
    }
    // The question and a sealed key's passphrase are read from the controlling terminal only;
    // a plain file key with --yes needs none (and is refused where presence is required).
    let mut tty = if yes && !file.is_sealed() {
        None
    } else {
        Some(Terminal::open(&format!("`ctx consent {verb}`"))?)
    };
    let question = match scope {
        DecisionScope::Once => format!("{verb} this install? [y/N] "),
        DecisionScope::Session => {
            format!("{verb} this install for the rest of its session? [y/N] ")
        }
        DecisionScope::Workspace => {
            format!("{verb} this install in its workspace from now on? [y/N] ")
        }
        DecisionScope::Always => format!("{verb} this install always, anywhere? [y/N] "),
    };
    if !yes
        && let Some(tty) = tty.as_mut()
        && !tty.confirm(&question)?
    {
        writeln!(out, "not confirmed; nothing was signed")?;
        return Ok(EXIT_OUTCOME);
    }
    let signer = open_key(&file, key, tty.as_mut(), "consent")?;
    let entry = file.entry();
    let assertion = sign_decision(
        &signer,
        &entry,
        challenge_digest,
        if grant { "granted" } else { "denied" },
        now,
    )
    .map_err(|f| CliError::Step {
        step: "sign",
        message: f.message,
        exit: f.exit,
    })?;
    let resolved = run_step(
        "consent resolve",
        layout,
        now,
        HostCommand::ConsentResolve,
        Json::object([("assertion", Json::str(assertion))]),
    )?;
    let status = report_resolution(out, "device", &entry, &resolved, "")?;
    if scope != DecisionScope::Once {
        let id = remember(layout, now, challenge_digest, grant, scope, &signer, &entry)?;
        writeln!(
            out,
            "remembered as standing decision {id} ({} this exact install {}); `ctx consent \
             revoke {id}` takes it back",
            if grant { "grants" } else { "denies" },
            match scope {
                DecisionScope::Session => "for the rest of its session",
                DecisionScope::Workspace => "in its workspace",
                _ => "everywhere",
            }
        )?;
    }
    Ok(status)
}

/// What the person decides about one challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) grant: bool,
    pub(crate) scope: DecisionScope,
    /// Skip the question (never the passphrase).
    pub(crate) yes: bool,
}

/// What a resolved decision did, and the next challenge of its plan if one was published.
fn report_resolution(
    out: &mut dyn Write,
    signed_with: &str,
    entry: &VerifierEntry,
    resolved: &Json,
    approve_suffix: &str,
) -> Result<u8, CliError> {
    writeln!(
        out,
        "signed with {signed_with} {} ({}): {} ({})",
        entry.authenticator_id,
        entry.kind.as_str(),
        field(resolved, "outcome"),
        field(resolved, "reason_code")
    )?;
    // The outcome in plain words: the codes above are the engine's (spec/service.md).
    let plainly = match field(resolved, "outcome") {
        "installed-inactive" => "installed; your agent gets it at its next prompt or session start",
        "denied" => "denied; ctx will not install it for this request",
        "install-failed" => "the install failed; nothing was activated",
        "install-indeterminate" => {
            "the install's outcome is not known yet; the next prompt or `ctx consent recover` settles it"
        }
        "expired" => {
            "the consent expired before it was resolved; the agent's next prompt asks anew"
        }
        _ => "",
    };
    if !plainly.is_empty() {
        writeln!(out, "  {plainly}")?;
    }
    if let Some(next) = resolved.get("next_challenge").filter(|n| **n != Json::Null) {
        writeln!(
            out,
            "next: {} awaits consent: ctx consent approve {}{approve_suffix}",
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

/// What a consent challenge installs and may do, one line each: what `ctx consent approve`
/// prints and the passkey page shows (spec/cli.md §6).
fn challenge_summary(record: &Json, challenge_digest: &str) -> Vec<String> {
    let challenge = record.get("challenge").cloned().unwrap_or(Json::Null);
    let install = record.get("install").cloned().unwrap_or(Json::Null);
    let yes_no = |value: Option<&Json>| match value {
        Some(Json::Bool(true)) => "YES",
        _ => "no",
    };
    vec![
        format!("consent challenge {challenge_digest}"),
        format!(
            "  install:               {} ({})",
            field(record, "capability_id"),
            field(record, "kind")
        ),
        format!(
            "  file it installs:      {}",
            field(&install, "result_path")
        ),
        format!(
            "  content SHA-256:       {}",
            field(&install, "result_sha256")
        ),
        format!(
            "  expands permissions:   {}",
            yes_no(install.get("permission_expansion"))
        ),
        format!(
            "  needs credentials:     {}",
            yes_no(install.get("credential_requirement"))
        ),
        format!(
            "  for session:           {}",
            challenge
                .get("scope")
                .map_or("?", |s| field(s, "session_id"))
        ),
        format!(
            "  expires at:            {}",
            field(&challenge, "expires_at")
        ),
        format!("  state:                 {}", field(record, "state")),
    ]
    .into_iter()
    .chain(
        install
            .get("what_it_does")
            .and_then(Json::as_arr)
            .unwrap_or_default()
            .iter()
            .filter_map(Json::as_str)
            .map(|line| format!("  {line}")),
    )
    .collect()
}

/// The assertion fields of a passkey's `get` response posted by the page.
fn posted_proof(body: &Json) -> Result<WebAuthnProof, Refusal> {
    Ok(WebAuthnProof {
        credential_id: b64_field(body, "credentialId")?,
        authenticator_data: b64_field(body, "authenticatorData")?,
        client_data_json: b64_field(body, "clientDataJSON")?,
        signature: b64_field(body, "signature")?,
    })
}

/// Tells the person where the page is: on stdout, which is their terminal.
fn show_url(out: &mut dyn Write, what: &str, url: &str) -> Result<(), CliError> {
    writeln!(
        out,
        "open {url} in your browser to {what} (the page waits {} s)",
        PAGE_CEREMONY_TIMEOUT.as_secs()
    )?;
    out.flush()?;
    Ok(())
}

/// `ctx key init --passkey`: registers a passkey or security key as a verifier of the data
/// directory (spec/webauthn.md §7). The page creates the credential and then signs the
/// registration's digest with it (the proof of possession); the first presence verifier is
/// trusted on first use from this terminal, a later one needs the approval of a registered
/// device key `approver`, opened at this terminal (spec/decisions.md §14.2).
pub(crate) fn key_init_passkey(
    layout: &Layout,
    now: Timestamp,
    approver: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let step = "key init --passkey";
    let mut tty = Terminal::open("registering a passkey (`ctx key init --passkey`)")?;
    let journal = trust_journal(layout)?;
    let state = read_trust(&journal).map_err(|e| person(step)(e.into()))?;
    if state.has_presence_verifier() && approver.is_none() {
        return Err(CliError::Usage(format!(
            "{} already has a verifier; a new one must be approved by it: name its key with \
             --approver FILE",
            layout.root().display()
        )));
    }
    let mut random = [0u8; 48];
    getrandom::fill(&mut random)
        .map_err(|e| CliError::Unexpected(format!("no randomness for a challenge: {e}")))?;
    let (challenge, user_id) = random.split_at(32);
    let options = Json::object([
        ("challenge", Json::str(b64(challenge))),
        ("rpId", Json::str(WEBAUTHN_RP_ID)),
        ("userId", Json::str(b64(user_id))),
        (
            "userName",
            Json::str(format!("ctx {}", layout.root().display())),
        ),
    ]);
    let summary = vec![
        format!(
            "register a passkey as a verifier of your decisions for {}",
            layout.root().display()
        ),
        "it will be asked to verify you (PIN or biometric) on every decision".to_owned(),
    ];
    let server = PageServer::bind(page(
        "ctx: register a passkey",
        &summary,
        "Register a passkey",
        &options,
        REGISTER_SCRIPT,
    ))?;
    let origin = OriginPolicy::Exact(server.origin());
    show_url(out, "register your passkey", &server.url())?;
    let at = UtcMicros(now.0);
    // The registration half fixes the credential; the possession half proves the person's
    // authenticator holds its key by signing the change's digest.
    let mut pending: Option<(WebAuthnCredential, SignedHumanDecisionAssertion)> = None;
    let (credential, possession) = server.serve(PAGE_CEREMONY_TIMEOUT, |path, body| {
        match (path, pending.take()) {
            ("/register", None) => {
                let credential = verify_webauthn_registration(
                    &b64_field(body, "attestationObject")?,
                    &b64_field(body, "clientDataJSON")?,
                    challenge,
                    &origin,
                )
                .map_err(|e| e.to_string())?;
                let entry = VerifierEntry::passkey(&credential);
                if state.find(&entry.authenticator_id).is_some() {
                    return Err(Refusal(format!(
                        "passkey {} is already a verifier",
                        entry.authenticator_id
                    )));
                }
                let digest = change_digest(&TrustChange::Register(entry.clone()), state.revision());
                let unsigned =
                    unsigned_trust_assertion(&entry, &digest, at).map_err(|e| e.to_string())?;
                let answer = Json::object([
                    (
                        "challenge",
                        Json::str(b64(&webauthn_challenge(&unsigned.signing_bytes()))),
                    ),
                    ("credentialId", Json::str(b64(credential.credential_id()))),
                ]);
                pending = Some((credential, unsigned));
                Ok(Step::Continue(answer))
            }
            ("/possess", Some((credential, unsigned))) => {
                let proof = posted_proof(body)?;
                WebAuthnVerifier::new(credential.clone(), origin.clone())
                    .verify_proof(&proof, &unsigned.signing_bytes())
                    .map_err(|e| e.to_string())?;
                let signed = proof
                    .encode()
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| unsigned.with_proof(bytes).map_err(|e| e.to_string()))?;
                let answer =
                    Json::object([("message", Json::str("verified: finish at your terminal"))]);
                Ok(Step::Done(answer, (credential, signed)))
            }
            (path, _) => Err(Refusal(format!(
                "{path} is not the next step of this registration"
            ))),
        }
    })?;
    let entry = VerifierEntry::passkey(&credential);
    append_registration(
        layout, &journal, &state, &mut tty, &entry, possession, approver, now, step,
    )?;
    writeln!(
        out,
        "registered passkey {} ({}, {} assurance; sign count {}) as a verifier of {}",
        entry.authenticator_id,
        entry.kind.as_str(),
        entry.assurance(),
        credential.sign_count,
        layout.root().display()
    )?;
    Ok(EXIT_OK)
}

/// `ctx consent approve|deny DIGEST --browser`: shows the challenge, then serves a page that
/// shows the same and has the person's registered passkey sign the decision; the signature is
/// checked here and again when the decision is resolved (spec/webauthn.md §5). No terminal is
/// needed: the passkey's user verification is the person's presence.
pub(crate) fn decide_browser(
    layout: &Layout,
    now: Timestamp,
    challenge_digest: &str,
    grant: bool,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let step = "consent --browser";
    let now = UtcMicros(now.0);
    let record = run_step(
        "consent challenge",
        layout,
        now,
        HostCommand::ConsentChallenge,
        Json::object([("challenge_digest", Json::str(challenge_digest))]),
    )?;
    let mut summary = challenge_summary(&record, challenge_digest);
    for line in &summary {
        writeln!(out, "{line}")?;
    }
    if field(&record, "state") != "pending" {
        writeln!(
            out,
            "this challenge is not awaiting a decision; nothing was signed"
        )?;
        return Ok(EXIT_OUTCOME);
    }
    let journal = ctx_service::open_journal(&layout.journal(), &ctx_journal::OpenOptions::new())?;
    let trust = read_trust(&journal).map_err(|e| person(step)(e.into()))?;
    drop(journal);
    // The most recently registered passkey signs: the assertion names its authenticator, so the
    // credential is chosen before the challenge is made (spec/webauthn.md §4).
    let Some(entry) = trust
        .active()
        .filter(|v| v.entry.kind == VerifierKind::Passkey)
        .max_by_key(|v| v.registered_position)
        .map(|v| v.entry.clone())
    else {
        return Err(CliError::Usage(format!(
            "{} has no passkey; register one with `ctx key init --passkey`",
            layout.root().display()
        )));
    };
    let credential = WebAuthnCredential::from_bytes(&entry.public_key)
        .map_err(|e| CliError::Integrity(format!("passkey {}: {e}", entry.authenticator_id)))?;
    let decision = if grant { "granted" } else { "denied" };
    let unsigned =
        unsigned_decision(&entry, challenge_digest, decision, now).map_err(|f| CliError::Step {
            step: "sign",
            message: f.message,
            exit: f.exit,
        })?;
    let signing_bytes = unsigned.signing_bytes();
    let verb = if grant { "APPROVE" } else { "DENY" };
    summary.push(String::new());
    summary.push(format!(
        "your decision: {verb} this install ({decision}), signed by passkey {}",
        entry.authenticator_id
    ));
    let options = Json::object([
        (
            "challenge",
            Json::str(b64(&webauthn_challenge(&signing_bytes))),
        ),
        ("credentialId", Json::str(b64(credential.credential_id()))),
        ("rpId", Json::str(WEBAUTHN_RP_ID)),
    ]);
    let title = format!("ctx: {} this install?", verb.to_lowercase());
    let button = format!("{} with my passkey", if grant { "Approve" } else { "Deny" });
    let server = PageServer::bind(page(&title, &summary, &button, &options, DECIDE_SCRIPT))?;
    let origin = OriginPolicy::Exact(server.origin());
    show_url(
        out,
        &format!("{} this install", verb.to_lowercase()),
        &server.url(),
    )?;
    let verifier = WebAuthnVerifier::new(credential, origin);
    let resolved = server.serve(PAGE_CEREMONY_TIMEOUT, |path, body| {
        if path != "/decide" {
            return Err(Refusal(format!("{path} is not this page's decision")));
        }
        let proof = posted_proof(body)?;
        verifier
            .verify_proof(&proof, &signing_bytes)
            .map_err(|e| e.to_string())?;
        let wire = proof
            .encode()
            .map_err(|e| e.to_string())
            .and_then(|bytes| unsigned.with_proof(bytes).map_err(|e| e.to_string()))
            .and_then(|signed| signed.encode().map_err(|e| e.to_string()))
            .and_then(|bytes| String::from_utf8(bytes).map_err(|e| e.to_string()))?;
        let resolved = run_step(
            "consent resolve",
            layout,
            now,
            HostCommand::ConsentResolve,
            Json::object([("assertion", Json::str(wire))]),
        )
        .map_err(|e| e.to_string())?;
        let message = format!(
            "{} ({})",
            field(&resolved, "outcome"),
            field(&resolved, "reason_code")
        );
        Ok(Step::Done(
            Json::object([("message", Json::str(format!("done: {message}")))]),
            resolved,
        ))
    })?;
    report_resolution(out, "passkey", &entry, &resolved, " --browser")
}

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
pub(crate) fn sign_and_append(
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
