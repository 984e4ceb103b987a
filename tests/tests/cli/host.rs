//! The host JSON interface, run as separate `ctx` processes the way a host's hooks call it: a
//! consent-gated install across processes, exit statuses, malformed input, concurrency.

use std::path::Path;

use ctx_model::Json;

use crate::support::{self, CtxRun, run_ctx};

const PROMPT: &str = "write terraform for the new infrastructure";

fn json(run: &CtxRun) -> Json {
    let line = run.stdout.trim_end();
    assert!(
        !line.contains('\n'),
        "a host command writes exactly one JSON line: {}",
        run.stdout
    );
    Json::parse(line).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", run.stdout))
}

/// Runs a host command that must succeed with `code` and returns its `result`.
fn ok(data_dir: &Path, args: &[&str], stdin: &str, code: i32) -> Json {
    let run = run_ctx(data_dir, args, stdin);
    let value = json(&run);
    assert_eq!(
        (run.code, value.get("ok")),
        (code, Some(&Json::Bool(true))),
        "ctx {args:?}: {} {}",
        run.stdout,
        run.stderr
    );
    let words: Vec<&str> = args
        .iter()
        .take_while(|a| !a.starts_with("--"))
        .copied()
        .collect();
    assert_eq!(value.get_str("command"), Some(words.join(" ").as_str()));
    value.get("result").cloned().expect("a result")
}

/// Runs a host command that must be refused with `code` and error `error_code`; returns the
/// message.
fn refused(data_dir: &Path, args: &[&str], stdin: &str, code: i32, error_code: &str) -> String {
    let run = run_ctx(data_dir, args, stdin);
    let value = json(&run);
    assert_eq!(
        run.code, code,
        "ctx {args:?}: {} {}",
        run.stdout, run.stderr
    );
    assert_eq!(value.get("ok"), Some(&Json::Bool(false)), "{}", run.stdout);
    let error = value.get("error").expect("an error object");
    assert_eq!(error.get_str("code"), Some(error_code), "{}", run.stdout);
    let message = error.get_str("message").expect("a message").to_owned();
    assert!(
        run.stderr.contains(&message),
        "stderr repeats the sentence: {}",
        run.stderr
    );
    message
}

fn prepare_request(session: &str) -> String {
    Json::object([
        ("prompt", Json::str(PROMPT)),
        ("session_id", Json::str(session)),
        ("workspace", Json::str("/work/project")),
    ])
    .to_string()
}

fn set_up(data_dir: &Path) {
    let catalog = ok(data_dir, &["catalog", "ingest"], "", 0);
    assert_eq!(catalog.get_str("namespace"), Some("ctx.sample"));
    let policy = ok(data_dir, &["policy", "show"], "", 0);
    assert_eq!(policy.get_str("skill_mode"), Some("ask-each-time"));
    ok(data_dir, &["policy", "set"], &policy.to_string(), 0);
}

fn skill_files(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir.join("skills"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_consent_gated_install_runs_across_separate_processes() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    set_up(&data);
    // Ingesting the same catalog again changes nothing.
    let again = ok(&data, &["catalog", "ingest"], "", 0);
    assert_eq!(again.get("changed"), Some(&Json::Bool(false)));

    let query = ok(&data, &["query", "prepare"], &prepare_request("s-1"), 0);
    let query_ref = query.get_str("query_ref").expect("a query ref").to_owned();
    let Some(Json::Arr(selections)) = query.get("selections") else {
        panic!("no selections: {query}");
    };
    assert!(
        selections
            .iter()
            .any(|s| s.get_str("capability_id") == Some("skill:terraform")),
        "{query}"
    );
    // The same observation again is the same query.
    let reopened = ok(&data, &["query", "prepare"], &prepare_request("s-1"), 0);
    assert_eq!(reopened.get_str("query_ref"), Some(query_ref.as_str()));
    let reopened = ok(
        &data,
        &["query", "reopen"],
        &Json::object([("query_ref", Json::str(&query_ref))]).to_string(),
        0,
    );
    assert_eq!(reopened.get_str("plan_id"), query.get_str("plan_id"));

    let desired_request = Json::object([
        (
            "capability_ids",
            Json::Arr(vec![Json::str("skill:terraform")]),
        ),
        ("choice_label", Json::str("choice-1")),
        ("query_ref", Json::str(&query_ref)),
    ])
    .to_string();
    // Consent is a domain outcome the host must act on: status 1.
    let desired = ok(&data, &["desired", "set"], &desired_request, 1);
    assert_eq!(desired.get_str("status"), Some("consent-required"));
    let challenge = desired.get("challenge").expect("a challenge");
    let digest = challenge.get_str("challenge_digest").expect("a digest");
    assert_eq!(skill_files(&data), Vec::<String>::new());

    let record = ok(
        &data,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(digest))]).to_string(),
        0,
    );
    assert_eq!(record.get_str("state"), Some("pending"));
    // Another spelling of the same data directory binds the same challenges.
    let link = dir.path().join("ctx-link");
    std::os::unix::fs::symlink(&data, &link).expect("a symlink to the data directory");
    let through_link = ok(
        &link,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(digest))]).to_string(),
        0,
    );
    assert_eq!(through_link.get_str("state"), Some("pending"));
    let install = record.get("install").expect("install flags");
    assert_eq!(
        install.get("permission_expansion"),
        Some(&Json::Bool(false))
    );

    let key = dir.path().join("human.key");
    let key_arg = key.to_str().expect("a UTF-8 path");
    let device = ok(&data, &["key", "generate", "--out", key_arg], "", 0);
    assert!(device.get_str("authenticator_id").is_some());
    // A generated key is registered nowhere: signing with it is refused until the registry
    // holds it (spec/decisions.md §14).
    assert_eq!(device.get("registered"), Some(&Json::Bool(false)));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&key)
        .expect("the key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the device key file is private");
    // A second key never overwrites the first.
    refused(
        &data,
        &["key", "generate", "--out", key_arg],
        "",
        3,
        "internal",
    );

    // A CI key registered as a plain file key (file assurance) may approve this plain skill,
    // asked for through the JSON interface.
    let ci_key = dir.path().join("ci.key");
    let ci_arg = ci_key.to_str().expect("utf-8");
    let registered = run_ctx(&data, &["key", "init", "--file-key", "--key", ci_arg], "");
    assert_eq!(
        registered.code, 0,
        "{} {}",
        registered.stdout, registered.stderr
    );

    // A denial signed by another, unregistered key is refused and changes nothing.
    let stranger = dir.path().join("stranger.key");
    let other_dir = dir.path().join("other");
    ok(
        &other_dir,
        &[
            "key",
            "generate",
            "--out",
            stranger.to_str().expect("utf-8"),
        ],
        "",
        0,
    );
    let sign_request = |decision: &str| {
        Json::object([
            ("challenge_digest", Json::str(digest)),
            ("decision", Json::str(decision)),
        ])
        .to_string()
    };
    let forged = ok(
        &data,
        &["key", "sign", "--key", stranger.to_str().expect("utf-8")],
        &sign_request("granted"),
        0,
    );
    let resolve = |signed: &Json| {
        Json::object([(
            "assertion",
            Json::str(signed.get_str("assertion").expect("an assertion")),
        )])
        .to_string()
    };
    refused(
        &data,
        &["consent", "resolve"],
        &resolve(&forged),
        1,
        "unverifiable",
    );
    assert_eq!(skill_files(&data), Vec::<String>::new());
    // The generated key, unregistered, is refused the same way.
    let unregistered = ok(
        &data,
        &["key", "sign", "--key", key_arg],
        &sign_request("granted"),
        0,
    );
    refused(
        &data,
        &["consent", "resolve"],
        &resolve(&unregistered),
        1,
        "unverifiable",
    );
    assert_eq!(skill_files(&data), Vec::<String>::new());

    // The CI key, registered as a plain file key (file assurance), may approve this plain
    // skill, asked for through the JSON interface.
    let signed = ok(
        &data,
        &["key", "sign", "--key", ci_arg],
        &sign_request("granted"),
        0,
    );
    let resolved = ok(&data, &["consent", "resolve"], &resolve(&signed), 0);
    assert_eq!(resolved.get_str("outcome"), Some("installed-inactive"));
    assert_eq!(
        resolved.get_str("reason_code"),
        Some("physical-install-applied")
    );
    let sha = install.get_str("result_sha256").expect("the body digest");
    assert_eq!(skill_files(&data), vec![sha.to_owned()]);
    let body = std::fs::read(data.join("skills").join(sha)).expect("the installed skill");
    let expected =
        std::fs::read(ctx_service::sample_catalog_dir().join("skills/terraform/SKILL.md"))
            .expect("the sample body");
    assert_eq!(body, expected, "the installed skill is the catalog's body");

    // Replaying the same signed assertion installs nothing again.
    let run = run_ctx(&data, &["consent", "resolve"], &resolve(&signed));
    assert_ne!(run.code, 0, "{}", run.stdout);
    // The retried desired set reports the installed state, with no challenge.
    let retried = ok(&data, &["desired", "set"], &desired_request, 0);
    assert_eq!(retried.get("challenge"), Some(&Json::Null));
    let record = ok(
        &data,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(digest))]).to_string(),
        0,
    );
    assert_eq!(record.get_str("state"), Some("settled"));
    assert_eq!(record.get_str("decision"), Some("granted"));
    assert_eq!(skill_files(&data), vec![sha.to_owned()]);
}

#[test]
fn malformed_input_exits_2_with_a_sentence() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    set_up(&data);
    let message = refused(
        &data,
        &["query", "prepare"],
        "{\"session_id\": ",
        2,
        "invalid",
    );
    assert!(
        message
            .contains("the request: the JSON is not valid at byte 14: an unexpected end of input where a value was expected"),
        "{message}"
    );
    let message = refused(&data, &["query", "prepare"], "[1, 2]", 2, "invalid");
    assert!(message.contains("JSON object"), "{message}");
    let message = refused(
        &data,
        &["query", "prepare"],
        "{\"session_id\": \"s\", \"workspace\": \"/w\", \"colour\": 1}",
        2,
        "invalid",
    );
    assert!(message.contains("\"colour\""), "{message}");
    let message = refused(
        &data,
        &["query", "prepare"],
        "{\"session_id\": \"s\", \"workspace\": \"relative/dir\"}",
        2,
        "invalid",
    );
    assert!(message.contains("relative/dir"), "{message}");
    let message = refused(
        &data,
        &["query", "reopen"],
        "{\"query_ref\": \"mqr_nope\"}",
        2,
        "invalid",
    );
    assert!(!message.is_empty());
    let big = format!("{{\"prompt\": \"{}\"}}", "x".repeat(70 * 1024));
    let message = refused(&data, &["query", "prepare"], &big, 2, "invalid");
    assert!(message.contains("larger than"), "{message}");
    let message = refused(&data, &["query", "prepare"], "\u{0}\u{ff}", 2, "invalid");
    assert!(!message.is_empty());

    // Bad command lines are bad input too, with the usage text on stderr and nothing on stdout.
    for args in [
        &["query"][..],
        &["query", "frobnicate"],
        &["frobnicate"],
        &["audit", "--colour"],
        &["key", "sign"],
        &["demo", "extra"],
    ] {
        let run = run_ctx(&data, args, "");
        assert_eq!(run.code, 2, "ctx {args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "ctx {args:?}: {}", run.stdout);
        assert!(run.stderr.contains("ctx: error: "), "{}", run.stderr);
        assert!(run.stderr.contains("Usage:"), "{}", run.stderr);
    }
}

#[test]
fn a_data_directory_without_a_catalog_is_an_outcome_the_host_acts_on() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let message = refused(
        &data,
        &["query", "prepare"],
        &prepare_request("s-1"),
        1,
        "no-catalog",
    );
    assert!(message.contains("ctx catalog ingest"), "{message}");
}

#[test]
fn concurrent_processes_on_one_data_directory_wait_for_each_other() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    set_up(&data);
    // Eight processes prepare queries for eight sessions at once; each waits for the journal's
    // process lock and succeeds.
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let data = data.clone();
            std::thread::spawn(move || {
                run_ctx(
                    &data,
                    &["query", "prepare"],
                    &prepare_request(&format!("s-{i}")),
                )
            })
        })
        .collect();
    let mut refs = std::collections::BTreeSet::new();
    for handle in handles {
        let run = handle.join().expect("a thread");
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
        let value = json(&run);
        let result = value.get("result").expect("a result");
        refs.insert(result.get_str("query_ref").expect("a ref").to_owned());
    }
    assert_eq!(refs.len(), 8, "eight sessions, eight queries");
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{} {}", audit.stdout, audit.stderr);
}

#[test]
fn a_skill_whose_install_expands_permissions_waits_for_the_persons_consent() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    set_up(&data);
    let request = Json::object([
        (
            "prompt",
            Json::str("fix the clippy lints in the rust crate and test the webapp with playwright"),
        ),
        ("session_id", Json::str("s-1")),
        ("workspace", Json::str("/work/project")),
    ])
    .to_string();
    let query = ok(&data, &["query", "prepare"], &request, 0);
    let query_ref = query.get_str("query_ref").expect("a query ref");
    let Some(Json::Arr(selections)) = query.get("selections") else {
        panic!("no selections: {query}");
    };
    let planned = |id: &str| {
        selections
            .iter()
            .any(|s| s.get_str("capability_id") == Some(id))
    };
    let choose = |id: &str| {
        Json::object([
            ("capability_ids", Json::Arr(vec![Json::str(id)])),
            ("choice_label", Json::str(format!("choice-{id}"))),
            ("query_ref", Json::str(query_ref)),
        ])
        .to_string()
    };
    let head = |data: &Path| {
        let run = run_ctx(data, &["inspect", "--json"], "");
        assert_eq!(run.code, 0, "{}", run.stderr);
        Json::parse(run.stdout.trim_end())
            .expect("inspect JSON")
            .get("records")
            .cloned()
    };
    let before = head(&data);
    assert!(matches!(before, Some(Json::Int(n)) if n > 0), "{before:?}");
    // A skill whose install expands permissions: the skill store does not install it on its
    // own, the material store does after the person's consent (spec/skill-cas.md §4), so the
    // desired set asks and claims nothing yet.
    let id = "skill:cargo-clippy-fix";
    assert!(planned(id), "{id} is not planned: {query}");
    let run = run_ctx(&data, &["desired", "set"], &choose(id));
    assert_eq!(run.code, 1, "consent required: {run:?}");
    assert!(
        run.stdout.contains("\"status\":\"consent-required\"")
            && run
                .stdout
                .contains("\"capability_id\":\"skill:cargo-clippy-fix\""),
        "{run:?}"
    );
    assert!(
        matches!(head(&data), Some(Json::Int(n)) if Some(Json::Int(n)) != before),
        "the challenge is journaled"
    );
}

#[test]
fn a_host_session_prepares_one_query_per_prompt_and_the_same_prompt_again_is_the_same_query() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    set_up(&data);
    let first = ok(&data, &["query", "prepare"], &prepare_request("s-1"), 0);
    let other = Json::object([
        ("prompt", Json::str("debug the kubernetes rollout")),
        ("session_id", Json::str("s-1")),
        ("workspace", Json::str("/work/project")),
    ])
    .to_string();
    let second = ok(&data, &["query", "prepare"], &other, 0);
    assert_ne!(
        second.get_str("query_ref"),
        first.get_str("query_ref"),
        "{second}"
    );
    let Some(Json::Arr(selections)) = second.get("selections") else {
        panic!("no selections: {second}");
    };
    assert!(
        selections
            .iter()
            .any(|s| s.get_str("capability_id") == Some("skill:kubernetes")),
        "the second prompt is planned for itself: {second}"
    );
    // Either prompt again is a retry of its own query, not a third one.
    let again = ok(&data, &["query", "prepare"], &prepare_request("s-1"), 0);
    assert_eq!(again.get_str("query_ref"), first.get_str("query_ref"));
    let again = ok(&data, &["query", "prepare"], &other, 0);
    assert_eq!(again.get_str("query_ref"), second.get_str("query_ref"));
    // A session id too long to carry the prompt key is refused by name.
    let long = "s".repeat(97);
    let request = Json::object([
        ("session_id", Json::str(&long)),
        ("workspace", Json::str("/work/project")),
    ])
    .to_string();
    let message = refused(&data, &["query", "prepare"], &request, 2, "invalid");
    assert!(
        message.contains(&long) && message.contains("96 bytes"),
        "{message}"
    );
}
