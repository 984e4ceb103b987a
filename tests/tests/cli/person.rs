//! The person's commands, run as processes: `ctx key init` and `ctx consent approve|deny`, at a
//! pseudo-terminal the test makes (the person) and without one (a hook, an agent's tool call).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use ctx_model::Json;

use crate::support::{self, CtxRun, Typed, run_ctx, run_ctx_env, run_ctx_tty};

pub(crate) fn result(run: &CtxRun) -> Json {
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    let value = Json::parse(run.stdout.trim_end()).expect("JSON");
    value.get("result").cloned().expect("a result")
}

/// A data directory with the sample catalog, an explicit ask-each-time policy and a pending
/// challenge for skill:terraform; returns the challenge digest.
pub(crate) fn pending_challenge(data: &Path) -> String {
    result(&run_ctx(data, &["catalog", "ingest"], ""));
    let policy = result(&run_ctx(data, &["policy", "show"], ""));
    result(&run_ctx(data, &["policy", "set"], &policy.to_string()));
    terraform_challenge(data, "s-1")
}

pub(crate) fn installed(data: &Path) -> usize {
    std::fs::read_dir(data.join("skills"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
                .count()
        })
        .unwrap_or(0)
}

/// Plans the terraform install in `session` and returns its pending challenge's digest.
pub(crate) fn terraform_challenge(data: &Path, session: &str) -> String {
    let request = Json::object([
        (
            "prompt",
            Json::str("write terraform for the new infrastructure"),
        ),
        ("session_id", Json::str(session)),
        ("workspace", Json::str("/work/project")),
    ]);
    let query = result(&run_ctx(data, &["query", "prepare"], &request.to_string()));
    let choose = Json::object([
        (
            "capability_ids",
            Json::Arr(vec![Json::str("skill:terraform")]),
        ),
        ("choice_label", Json::str(format!("c-{session}"))),
        (
            "query_ref",
            Json::str(query.get_str("query_ref").expect("a ref")),
        ),
    ]);
    let run = run_ctx(data, &["desired", "set"], &choose.to_string());
    assert_eq!(run.code, 1, "{run:?}");
    Json::parse(run.stdout.trim_end())
        .ok()
        .and_then(|v| {
            v.get("result")?
                .get("challenge")?
                .get_str("challenge_digest")
                .map(str::to_owned)
        })
        .expect("a second challenge")
}

/// The passphrase the person types in these tests.
pub(crate) const PASSPHRASE: &str = "correct horse battery";

/// `ctx key init` at a terminal: the person chooses a passphrase (typed twice).
pub(crate) fn person_key_init(data: &Path, env: &[(&str, &Path)]) -> CtxRun {
    run_ctx_tty(
        data,
        &["key", "init"],
        &[
            Typed {
                expect: "choose a passphrase",
                typed: PASSPHRASE,
            },
            Typed {
                expect: "type it again",
                typed: PASSPHRASE,
            },
        ],
        env,
    )
}

/// `ctx consent approve|deny DIGEST --yes` at a terminal: the person types the passphrase.
pub(crate) fn person_decide(
    data: &Path,
    verb: &str,
    digest: &str,
    env: &[(&str, &Path)],
) -> CtxRun {
    run_ctx_tty(
        data,
        &["consent", verb, digest, "--yes"],
        &[Typed {
            expect: "passphrase for",
            typed: PASSPHRASE,
        }],
        env,
    )
}

/// The verifier registry of a data directory, read as an auditor would.
pub(crate) fn registry(data: &Path) -> ctx_service::TrustState {
    let journal =
        ctx_service::open_journal(&data.join("journal"), &ctx_journal::OpenOptions::new())
            .expect("the journal");
    ctx_service::read_trust(&journal).expect("a verifying registry")
}

#[test]
fn key_init_needs_a_terminal_seals_the_key_and_registers_it_once() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let key = home.join(".config/ctx/device.key");

    // Without a terminal (a hook, an agent's tool call) nothing is created or registered.
    let headless = run_ctx_env(&data, &["key", "init"], "correct horse battery\n", &env);
    assert_eq!(headless.code, 1, "{} {}", headless.stdout, headless.stderr);
    assert!(
        headless.stderr.contains("no controlling terminal"),
        "{}",
        headless.stderr
    );
    assert!(!key.exists());

    let first = person_key_init(&data, &env);
    assert_eq!(first.code, 0, "{}", first.stdout);
    assert!(
        first.stdout.contains("sealed under your passphrase"),
        "{}",
        first.stdout
    );
    assert!(
        first.stdout.contains("trusted on first use"),
        "{}",
        first.stdout
    );
    assert!(
        !first.stdout.contains(PASSPHRASE),
        "the passphrase is never echoed"
    );
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(key.parent().expect("a directory")), 0o700);
    let bytes = std::fs::read(&key).expect("the key");
    assert_eq!(bytes.len(), ctx_service::SEALED_KEY_BYTES);
    assert!(bytes.starts_with(&ctx_service::SEALED_KEY_MAGIC));
    let trust = registry(&data);
    let active: Vec<_> = trust.active().collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].entry.kind, ctx_service::VerifierKind::SealedKey);
    assert_eq!(active[0].basis, ctx_service::TrustBasis::FirstUseTerminal);

    let again = run_ctx_tty(
        &data,
        &["key", "init"],
        &[Typed {
            expect: "passphrase for",
            typed: PASSPHRASE,
        }],
        &env,
    );
    assert_eq!(again.code, 0, "{}", again.stdout);
    assert!(
        again.stdout.contains("already a verifier"),
        "{}",
        again.stdout
    );
    assert_eq!(
        std::fs::read(&key).expect("the key"),
        bytes,
        "never rewritten"
    );
    assert_eq!(registry(&data).revision(), 1, "registered once");

    // A key others can read is refused, naming the file and the fix.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let loose = run_ctx_tty(&data, &["key", "init"], &[], &env);
    assert_ne!(loose.code, 0, "{}", loose.stdout);
    assert!(loose.stdout.contains("chmod 600"), "{}", loose.stdout);
}

#[test]
fn approve_shows_the_install_asks_at_the_terminal_signs_and_installs_once() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let digest = pending_challenge(&data);
    assert_eq!(person_key_init(&data, &env).code, 0);

    // The answer comes from the terminal, never from stdin.
    let piped = run_ctx_env(&data, &["consent", "approve", &digest], "y\n", &env);
    assert_eq!(piped.code, 1, "{}", piped.stdout);
    assert!(
        piped.stderr.contains("no controlling terminal"),
        "{}",
        piped.stderr
    );
    assert_eq!(installed(&data), 0);

    let declined = run_ctx_tty(
        &data,
        &["consent", "approve", &digest],
        &[Typed {
            expect: "approve this install? [y/N]",
            typed: "n",
        }],
        &env,
    );
    assert_eq!(declined.code, 1, "{}", declined.stdout);
    for expected in [
        "install:               skill:terraform (skill)",
        "skills/terraform/SKILL.md",
        "expands permissions:   no",
        "needs credentials:     no",
        "state:                 pending",
        "nothing was signed",
    ] {
        assert!(
            declined.stdout.contains(expected),
            "{expected}: {}",
            declined.stdout
        );
    }
    assert_eq!(installed(&data), 0);

    let wrong = run_ctx_tty(
        &data,
        &["consent", "approve", &digest],
        &[
            Typed {
                expect: "[y/N]",
                typed: "y",
            },
            Typed {
                expect: "passphrase for",
                typed: "not the passphrase",
            },
        ],
        &env,
    );
    assert_ne!(wrong.code, 0, "{}", wrong.stdout);
    assert!(
        wrong.stdout.contains("does not open this device key"),
        "{}",
        wrong.stdout
    );
    assert_eq!(installed(&data), 0);

    let approved = run_ctx_tty(
        &data,
        &["consent", "approve", &digest],
        &[
            Typed {
                expect: "[y/N]",
                typed: "y",
            },
            Typed {
                expect: "passphrase for",
                typed: PASSPHRASE,
            },
        ],
        &env,
    );
    assert_eq!(approved.code, 0, "{}", approved.stdout);
    assert!(
        approved
            .stdout
            .contains("installed-inactive (physical-install-applied)"),
        "{}",
        approved.stdout
    );
    assert!(
        approved.stdout.contains("(sealed-key)"),
        "{}",
        approved.stdout
    );
    assert!(
        approved
            .stdout
            .contains("installed; your agent gets it at its next prompt or session start"),
        "the outcome in plain words: {}",
        approved.stdout
    );
    assert_eq!(installed(&data), 1);

    let again = run_ctx_tty(&data, &["consent", "approve", &digest, "--yes"], &[], &env);
    assert_eq!(again.code, 1, "{}", again.stdout);
    assert!(
        again.stdout.contains("state:                 settled"),
        "{}",
        again.stdout
    );
    assert_eq!(installed(&data), 1, "nothing installed twice");

    // The decision is re-verified offline: its signed assertion was journaled with its assurance.
    let audit = run_ctx(&data, &["audit", "--json"], "");
    assert_eq!(audit.code, 0, "{} {}", audit.stdout, audit.stderr);
    let report = Json::parse(audit.stdout.trim_end()).expect("JSON");
    assert_eq!(
        report.get("decisions").and_then(Json::as_i64),
        Some(1),
        "{report}"
    );
    assert_eq!(
        report
            .get("decisions_by_assurance")
            .and_then(|d| d.get("presence"))
            .and_then(Json::as_i64),
        Some(1),
        "{report}"
    );
    assert_eq!(
        report.get("verifiers_active").and_then(Json::as_i64),
        Some(1)
    );
}

#[test]
fn deny_records_the_denial_and_installs_nothing() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let digest = pending_challenge(&data);
    assert_eq!(person_key_init(&data, &env).code, 0);
    let denied = person_decide(&data, "deny", &digest, &env);
    assert_eq!(denied.code, 0, "{}", denied.stdout);
    let record = result(&run_ctx(
        &data,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(&digest))]).to_string(),
    ));
    assert_eq!(record.get_str("decision"), Some("denied"), "{record}");
    assert_eq!(installed(&data), 0);

    let bad = run_ctx(&data, &["consent", "approve", "not-a-digest"], "");
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("\"not-a-digest\""), "{}", bad.stderr);
}

#[test]
fn a_plain_file_key_registers_without_a_terminal_and_approves_only_a_plain_json_skill() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let key = dir.path().join("ci.key");
    let key_arg = key.to_str().expect("utf-8");
    let digest = pending_challenge(&data);
    let init = run_ctx(&data, &["key", "init", "--file-key", "--key", key_arg], "");
    assert_eq!(init.code, 0, "{} {}", init.stdout, init.stderr);
    assert!(init.stdout.contains("file assurance"), "{}", init.stdout);
    let trust = registry(&data);
    assert_eq!(trust.active().count(), 1);
    assert!(!trust.has_presence_verifier());
    // The challenge came through the JSON interface for a skill that expands nothing: a file
    // key is enough (spec/decisions.md §12.4).
    let approved = run_ctx(
        &data,
        &["consent", "approve", &digest, "--key", key_arg, "--yes"],
        "",
    );
    assert_eq!(approved.code, 0, "{} {}", approved.stdout, approved.stderr);
    assert_eq!(installed(&data), 1);
}

#[test]
fn an_oversized_device_key_is_refused_naming_the_file_and_the_limit() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    assert_eq!(run_ctx(&data, &["catalog", "ingest"], "").code, 0);

    // A device key file one byte over the bound is refused before it is parsed.
    let huge_key = dir.path().join("huge.key");
    let over = usize::try_from(ctx_service::DEVICE_KEY_MAX_BYTES).expect("small") + 1;
    std::fs::write(&huge_key, vec![b' '; over]).expect("write");
    std::fs::set_permissions(&huge_key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key_arg = huge_key.to_str().expect("UTF-8 path");
    let refused = run_ctx_tty(&data, &["key", "init", "--key", key_arg], &[], &env);
    assert_eq!(refused.code, 3, "{}", refused.stdout);
    let limit = format!(
        "over the limit of {} bytes",
        ctx_service::DEVICE_KEY_MAX_BYTES
    );
    assert!(
        refused.stdout.contains(key_arg) && refused.stdout.contains(&limit),
        "{}",
        refused.stdout
    );
}

#[test]
fn pending_lists_every_waiting_consent_and_approve_offers_the_next() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let first = pending_challenge(&data);
    let second = terraform_challenge(&data, "s-2");
    assert_eq!(person_key_init(&data, &env).code, 0);

    // Listing needs no terminal; it shows what each would install.
    let listed = run_ctx(&data, &["consent", "pending"], "");
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(
        listed.stdout.starts_with("2 consent(s) wait for you:"),
        "{}",
        listed.stdout
    );
    for digest in [&first, &second] {
        assert!(
            listed
                .stdout
                .contains(&format!("consent challenge {digest}")),
            "{}",
            listed.stdout
        );
    }
    assert_eq!(
        listed.stdout.matches("skills/terraform/SKILL.md").count(),
        2
    );

    // One sitting: approve the first, then deny the one offered next.
    let sitting = run_ctx_tty(
        &data,
        &["consent", "approve", &first],
        &[
            Typed {
                expect: "approve this install? [y/N]",
                typed: "y",
            },
            Typed {
                expect: "passphrase for",
                typed: PASSPHRASE,
            },
            Typed {
                expect: "[a]pprove, [d]eny, or [s]kip the rest?",
                typed: "d",
            },
            Typed {
                expect: "passphrase for",
                typed: PASSPHRASE,
            },
        ],
        &env,
    );
    assert_eq!(sitting.code, 0, "{sitting:?}");
    assert!(
        sitting
            .stdout
            .contains(&format!("consent challenge {second}")),
        "the next one was shown before the question: {}",
        sitting.stdout
    );
    assert_eq!(installed(&data), 1);
    let decided = result(&run_ctx(
        &data,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(&second))]).to_string(),
    ));
    assert_eq!(decided.get_str("decision"), Some("denied"), "{decided}");
    let listed = run_ctx(&data, &["consent", "pending"], "");
    assert_eq!(listed.stdout.trim_end(), "no consent waits for you");
}
