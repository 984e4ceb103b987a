//! A data directory copied (`cp -a`) or moved (`mv`) keeps its pending consent challenges
//! answerable: the consent broker's workspace identity is stored in the directory
//! (`workspace-identity`, spec/cli.md §2), not derived from where it lies.

use std::path::Path;

use ctx_model::Json;

use crate::support::{self, run_ctx};

const PROMPT: &str = "write terraform for the new infrastructure";

/// Runs a host command that must succeed with `code`; returns its `result`.
fn ok(data_dir: &Path, args: &[&str], stdin: &str, code: i32) -> Json {
    let run = run_ctx(data_dir, args, stdin);
    let value = Json::parse(run.stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {} {}", run.stdout, run.stderr));
    assert_eq!(
        (run.code, value.get("ok")),
        (code, Some(&Json::Bool(true))),
        "ctx {args:?}: {} {}",
        run.stdout,
        run.stderr
    );
    value.get("result").cloned().expect("a result")
}

fn challenge_state(data_dir: &Path, digest: &str) -> Option<String> {
    let record = ok(
        data_dir,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(digest))]).to_string(),
        0,
    );
    record.get_str("state").map(str::to_owned)
}

#[test]
fn a_pending_challenge_is_answered_after_the_data_directory_is_copied_and_moved() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    ok(&data, &["catalog", "ingest"], "", 0);
    let policy = ok(&data, &["policy", "show"], "", 0);
    ok(&data, &["policy", "set"], &policy.to_string(), 0);
    // A CI key registered as a plain file key (file assurance) may approve a plain skill.
    let key = dir.path().join("ci.key");
    let key_arg = key.to_str().expect("a UTF-8 path");
    let registered = run_ctx(&data, &["key", "init", "--file-key", "--key", key_arg], "");
    assert_eq!(
        registered.code, 0,
        "{} {}",
        registered.stdout, registered.stderr
    );

    let request = Json::object([
        ("prompt", Json::str(PROMPT)),
        ("session_id", Json::str("s-moved")),
        ("workspace", Json::str("/work/project")),
    ])
    .to_string();
    let query = ok(&data, &["query", "prepare"], &request, 0);
    let query_ref = query.get_str("query_ref").expect("a query ref").to_owned();
    let desired = ok(
        &data,
        &["desired", "set"],
        &Json::object([
            (
                "capability_ids",
                Json::Arr(vec![Json::str("skill:terraform")]),
            ),
            ("choice_label", Json::str("choice-1")),
            ("query_ref", Json::str(&query_ref)),
        ])
        .to_string(),
        1,
    );
    assert_eq!(desired.get_str("status"), Some("consent-required"));
    let challenge = desired.get("challenge").expect("a challenge");
    let digest = challenge
        .get_str("challenge_digest")
        .expect("a digest")
        .to_owned();
    assert_eq!(challenge_state(&data, &digest).as_deref(), Some("pending"));
    let identity = std::fs::read(data.join("workspace-identity")).expect("the stored identity");

    // A copy made with `cp -a` serves the same pending challenge.
    let copy = dir.path().join("copy");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&copy)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a failed: {status}");
    assert_eq!(challenge_state(&copy, &digest).as_deref(), Some("pending"));

    // Moved elsewhere (another parent, another name), the directory answers it.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("a new parent");
    let moved = elsewhere.join("ctx-moved");
    std::fs::rename(&data, &moved).expect("mv");
    assert_eq!(challenge_state(&moved, &digest).as_deref(), Some("pending"));
    let signed = ok(
        &moved,
        &["key", "sign", "--key", key_arg],
        &Json::object([
            ("challenge_digest", Json::str(&digest)),
            ("decision", Json::str("granted")),
        ])
        .to_string(),
        0,
    );
    let resolved = ok(
        &moved,
        &["consent", "resolve"],
        &Json::object([(
            "assertion",
            Json::str(signed.get_str("assertion").expect("an assertion")),
        )])
        .to_string(),
        0,
    );
    assert_eq!(resolved.get_str("outcome"), Some("installed-inactive"));
    assert_eq!(challenge_state(&moved, &digest).as_deref(), Some("settled"));
    assert_eq!(
        std::fs::read(moved.join("workspace-identity")).expect("the stored identity"),
        identity,
        "the identity moved with the directory"
    );
}
