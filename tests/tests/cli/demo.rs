//! `ctx demo`, run as a process on a temporary data directory, twice.

use crate::support::{self, run_ctx};

#[test]
fn the_demo_runs_end_to_end_and_a_second_run_reuses_the_directory() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let first = run_ctx(&data, &["demo"], "");
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    for expected in [
        "a new journal",
        "53 capabilities in namespace ctx.sample (ingested)",
        "the planned bundle",
        "skill:terraform",
        "consent-required",
        "expands permissions: no",
        "stands in for the person",
        "installed-inactive (physical-install-applied)",
        "installed exactly once",
        "result: OK, everything verifies",
    ] {
        assert!(
            first.stdout.contains(expected),
            "first run lacks {expected:?}:\n{}",
            first.stdout
        );
    }
    let skills: Vec<_> = std::fs::read_dir(data.join("skills"))
        .expect("the skill store")
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
        .collect();
    assert_eq!(skills.len(), 1, "one skill installed");

    let second = run_ctx(&data, &["demo"], "");
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    for expected in [
        "reused the existing journal",
        "already ingested, unchanged",
        "nothing is installed twice",
        "result: OK, everything verifies",
    ] {
        assert!(
            second.stdout.contains(expected),
            "second run lacks {expected:?}:\n{}",
            second.stdout
        );
    }
    assert!(
        !second.stdout.contains("installed exactly once into"),
        "{}",
        second.stdout
    );
    let after: usize = std::fs::read_dir(data.join("skills"))
        .expect("the skill store")
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
        .count();
    assert_eq!(after, 1, "the second run installed nothing");
}

#[test]
fn the_demo_refuses_a_relative_data_directory() {
    let dir = support::tempdir();
    let run = std::process::Command::new(support::ctx_binary())
        .args(["demo"])
        .env("CTX_DATA_DIR", "relative/dir")
        .current_dir(dir.path())
        .output()
        .expect("run ctx");
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("relative/dir"), "{stderr}");
    assert!(!dir.path().join("relative").exists(), "nothing was created");
}
