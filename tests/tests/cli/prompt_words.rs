//! A prompt's words and the registry's credential screen (spec/catalog.md §5.4, spec/registry.md
//! §3): a plain word the screen would refuse costs the prompt that word, not its plan, and a
//! secret value typed into a prompt is stored nowhere.

use std::path::Path;

use super::hook::{Machine, claude_prompt, context};
use crate::support::run_ctx;

/// Every file under `dir`, read whole.
fn every_file(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            every_file(&path, out);
        } else if path.is_file() {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

#[test]
fn a_word_the_credential_screen_refuses_costs_only_that_word_and_a_secret_is_stored_nowhere() {
    let machine = Machine::new("vault");
    let (data, home, project) = machine.paths();
    let body = "Zq7Lm2Xp9Rt4".repeat(3);
    let github = format!("ghp_{body}");
    let aws = "AKIAIOSFODNN7EXAMPLE";
    let prompt = format!(
        "did we commit the secret {github} or the credentials {aws} to git? review the \
         security of our secrets"
    );
    let answer = claude_prompt(&data, &home, &project, "s-secret", &prompt);
    let text = context(&answer, "UserPromptSubmit");
    // Planned, not refused: the plain words "secret" and "credentials" were dropped from the
    // signals, "secrets" and "security" stayed.
    assert!(text.starts_with("ctx plan plan-"), "{text}");
    assert!(text.contains("skill:security-review"), "{text}");
    assert!(!text.contains("credential-like"), "{text}");

    // Nothing the data directory holds, and no record the journal exports, holds the values.
    let mut stored = Vec::new();
    every_file(&data, &mut stored);
    let export = run_ctx(&data, &["export"], "");
    assert_eq!(export.code, 0, "{export:?}");
    for line in export.stdout.lines() {
        let payload = ctx_model::Json::parse(line)
            .ok()
            .and_then(|l| l.get_str("payload").map(str::to_owned))
            .unwrap_or_default();
        let bytes: Vec<u8> = (0..payload.len() / 2)
            .filter_map(|i| u8::from_str_radix(&payload[2 * i..2 * i + 2], 16).ok())
            .collect();
        stored.push(("export".to_owned(), bytes));
        stored.push(("export line".to_owned(), line.as_bytes().to_vec()));
    }
    assert!(stored.len() > 2, "the data directory holds the plan");
    for (name, bytes) in &stored {
        for needle in [github.as_str(), body.as_str(), aws] {
            assert!(!contains(bytes, needle), "{name} holds {needle}");
        }
    }
}
