//! The person's commands, run as processes: `ctx key init` and `ctx consent approve|deny`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use ctx_model::Json;

use crate::support::{self, CtxRun, run_ctx, run_ctx_env};

fn result(run: &CtxRun) -> Json {
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    let value = Json::parse(run.stdout.trim_end()).expect("JSON");
    value.get("result").cloned().expect("a result")
}

/// A data directory with the sample catalog, an explicit ask-each-time policy and a pending
/// challenge for skill:terraform; returns the challenge digest.
fn pending_challenge(data: &Path) -> String {
    result(&run_ctx(data, &["catalog", "ingest"], ""));
    let policy = result(&run_ctx(data, &["policy", "show"], ""));
    result(&run_ctx(data, &["policy", "set"], &policy.to_string()));
    let request = Json::object([
        (
            "prompt",
            Json::str("write terraform for the new infrastructure"),
        ),
        ("session_id", Json::str("s-1")),
        ("workspace", Json::str("/work/project")),
    ]);
    let query = result(&run_ctx(data, &["query", "prepare"], &request.to_string()));
    let choose = Json::object([
        (
            "capability_ids",
            Json::Arr(vec![Json::str("skill:terraform")]),
        ),
        ("choice_label", Json::str("c-1")),
        (
            "query_ref",
            Json::str(query.get_str("query_ref").expect("a query ref")),
        ),
    ]);
    let run = run_ctx(data, &["desired", "set"], &choose.to_string());
    assert_eq!(run.code, 1, "consent required: {}", run.stdout);
    let value = Json::parse(run.stdout.trim_end()).expect("JSON");
    value
        .get("result")
        .and_then(|r| r.get("challenge"))
        .and_then(|c| c.get_str("challenge_digest"))
        .expect("a challenge digest")
        .to_owned()
}

fn installed(data: &Path) -> usize {
    std::fs::read_dir(data.join("skills"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn key_init_creates_a_private_key_once_and_registers_it() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let first = run_ctx_env(&data, &["key", "init"], "", &env);
    assert_eq!(first.code, 0, "{} {}", first.stdout, first.stderr);
    assert!(
        first.stdout.contains("created the device key"),
        "{}",
        first.stdout
    );
    let key = home.join(".config/ctx/device.key");
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(key.parent().expect("a directory")), 0o700);
    let bytes = std::fs::read(&key).expect("the key");
    let registered = std::fs::read_dir(data.join("verifiers"))
        .expect("verifiers")
        .count();
    assert_eq!(registered, 1);

    let again = run_ctx_env(&data, &["key", "init"], "", &env);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("already exists"), "{}", again.stdout);
    assert_eq!(
        std::fs::read(&key).expect("the key"),
        bytes,
        "never rewritten"
    );

    // A key others can read is refused, naming the file and the fix.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let loose = run_ctx_env(&data, &["key", "init"], "", &env);
    assert_eq!(loose.code, 3, "{}", loose.stdout);
    assert!(loose.stderr.contains("chmod 600"), "{}", loose.stderr);
}

#[test]
fn approve_shows_the_install_asks_signs_and_installs_once() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let digest = pending_challenge(&data);
    assert_eq!(run_ctx_env(&data, &["key", "init"], "", &env).code, 0);

    let declined = run_ctx_env(&data, &["consent", "approve", &digest], "n\n", &env);
    assert_eq!(declined.code, 1, "{}", declined.stderr);
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

    let approved = run_ctx_env(&data, &["consent", "approve", &digest], "y\n", &env);
    assert_eq!(approved.code, 0, "{} {}", approved.stdout, approved.stderr);
    assert!(
        approved
            .stdout
            .contains("installed-inactive (physical-install-applied)"),
        "{}",
        approved.stdout
    );
    assert_eq!(installed(&data), 1);

    let again = run_ctx_env(&data, &["consent", "approve", &digest, "--yes"], "", &env);
    assert_eq!(again.code, 1, "{}", again.stdout);
    assert!(
        again.stdout.contains("state:                 settled"),
        "{}",
        again.stdout
    );
    assert_eq!(installed(&data), 1, "nothing installed twice");
}

#[test]
fn deny_records_the_denial_and_installs_nothing() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let key = dir.path().join("person.key");
    let key_arg = key.to_str().expect("utf-8");
    let digest = pending_challenge(&data);
    assert_eq!(
        run_ctx(&data, &["key", "init", "--key", key_arg], "").code,
        0
    );
    let denied = run_ctx(
        &data,
        &["consent", "deny", &digest, "--key", key_arg, "--yes"],
        "",
    );
    assert_eq!(denied.code, 0, "{} {}", denied.stdout, denied.stderr);
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
fn an_oversized_device_key_or_verifier_registration_is_refused_naming_the_file_and_the_limit() {
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
    let refused = run_ctx_env(&data, &["key", "init", "--key", key_arg], "", &env);
    assert_eq!(refused.code, 3, "{} {}", refused.stdout, refused.stderr);
    let limit = format!(
        "over the limit of {} bytes",
        ctx_service::DEVICE_KEY_MAX_BYTES
    );
    assert!(
        refused.stderr.contains(key_arg) && refused.stderr.contains(&limit),
        "{}",
        refused.stderr
    );

    // A registration one byte over its bound makes every runtime command refuse, naming it.
    let key = home.join("device.key");
    let key_arg = key.to_str().expect("UTF-8 path");
    let init = run_ctx_env(&data, &["key", "init", "--key", key_arg], "", &env);
    assert_eq!(init.code, 0, "{} {}", init.stdout, init.stderr);
    let registration = std::fs::read_dir(data.join("verifiers"))
        .expect("verifiers")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .next()
        .expect("a registration");
    let over = usize::try_from(ctx_service::VERIFIER_REGISTRATION_MAX_BYTES).expect("small") + 1;
    std::fs::write(&registration, vec![b' '; over]).expect("write");
    let run = run_ctx(&data, &["policy", "show"], "");
    assert_ne!(run.code, 0, "{}", run.stdout);
    let output = format!("{}{}", run.stdout, run.stderr);
    let limit = format!(
        "over the limit of {} bytes",
        ctx_service::VERIFIER_REGISTRATION_MAX_BYTES
    );
    assert!(
        output.contains(registration.to_str().expect("UTF-8 path")) && output.contains(&limit),
        "{output}"
    );
}
