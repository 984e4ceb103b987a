//! Prompts killed at random points (spec/cli.md §7.1, §7.4): a `user-prompt-submit` killed
//! anywhere between its first write and its reply leaves work that the next call needing it
//! finishes or retires. Replayed once afterwards, every prompt answers (none stays busy), every
//! prompt has its record, and `ctx audit` finds the journal intact.
//!
//! Size: `CTX_KILLED_PROMPT_ROUNDS` rounds (default 24, the CI size); the acceptance run uses 200.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ctx_model::Json;

use super::hook::{Machine, hook_env, hook_input, reply, with_prompt};
use crate::support::{Rng, ctx_binary, exported_payloads, run_ctx};

/// Prompts that plan catalog loads, installs that ask, both, or nothing.
const PROMPTS: [&str; 6] = [
    "write rust unit tests",
    "write terraform for the new infrastructure",
    "add Playwright e2e tests for the checkout page",
    "review this pull request for security issues",
    "write a kubernetes helm chart",
    "thanks, that is all",
];

fn rounds() -> usize {
    std::env::var("CTX_KILLED_PROMPT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Starts the prompt hook for `input` as a host would and kills it with SIGKILL after `after`
/// (or lets it finish when it is faster). Returns whether it was killed.
fn killed_prompt(data: &Path, home: &Path, input: &Json, after: Duration) -> bool {
    use std::io::Write as _;
    let mut child = Command::new(ctx_binary())
        .arg("--data-dir")
        .arg(data)
        .args(["hook", "claude", "user-prompt-submit"])
        .env_remove("CTX_DATA_DIR")
        .env("HOME", home)
        .env("CODEX_HOME", home.join(".codex"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ctx");
    let mut stdin = child.stdin.take().expect("ctx's stdin");
    // The hook reads all of its input before it writes anything; a kill that lands first is a
    // round that killed nothing, which the replay covers as well.
    let _ = stdin.write_all(input.to_string().as_bytes());
    drop(stdin);
    let start = Instant::now();
    while start.elapsed() < after {
        if child.try_wait().expect("poll ctx").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = child.kill().is_ok();
    let _ = child.wait();
    killed
}

#[test]
fn prompts_killed_at_random_points_never_stay_busy_and_replay_once_to_an_intact_journal() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    let session = "killed-session";
    let input_for = |text: &str| {
        with_prompt(
            hook_input("claude", "UserPromptSubmit", session, &project),
            text,
        )
    };
    // One undisturbed prompt sets the data directory up and measures how long a prompt takes,
    // so that the kills land inside the hook's work.
    let start = Instant::now();
    let first = reply(&hook_env(
        &data,
        &home,
        "claude",
        "user-prompt-submit",
        &input_for("set up the project"),
    ))
    .expect("a reply");
    let span = start.elapsed().max(Duration::from_millis(20)) * 2;
    assert!(first.get("hookSpecificOutput").is_some(), "{first}");

    let mut rng = Rng::from_time();
    let seed = rng.next_u64();
    let mut rng = Rng::new(seed);
    let mut sent: Vec<String> = Vec::new();
    let mut killed = 0;
    for round in 0..rounds() {
        let text = format!("{} (round {round})", PROMPTS[round % PROMPTS.len()]);
        let after = Duration::from_micros(rng.below(span.as_micros() as u64 + 1));
        if killed_prompt(&data, &home, &input_for(&text), after) {
            killed += 1;
        }
        sent.push(text);
        // Half of the rounds deliver the killed prompt again at once, killed again.
        if rng.below(2) == 0 {
            let after = Duration::from_micros(rng.below(span.as_micros() as u64 + 1));
            if killed_prompt(&data, &home, &input_for(sent.last().unwrap()), after) {
                killed += 1;
            }
        }
    }
    assert!(killed > 0, "no round killed a prompt (seed {seed})");

    // A new session start recovers, then every prompt is delivered once more.
    let start = hook_env(
        &data,
        &home,
        "claude",
        "session-start",
        &hook_input("claude", "SessionStart", session, &project),
    );
    assert_eq!(start.code, 0, "{start:?}");
    for text in &sent {
        let run = hook_env(
            &data,
            &home,
            "claude",
            "user-prompt-submit",
            &input_for(text),
        );
        let answer = reply(&run).expect("a reply");
        assert!(
            answer.get("hookSpecificOutput").is_some(),
            "the replayed prompt {text:?} did not answer (seed {seed}): {answer}"
        );
        let message = answer.get_str("systemMessage").unwrap_or_default();
        assert!(
            !message.contains("busy") && !message.contains("must be recovered"),
            "the replayed prompt {text:?} stayed busy (seed {seed}): {message}"
        );
    }

    // No prompt lost: each has its record in the session stream.
    let prompts: Vec<String> = exported_payloads(&data, "ctx.host-session.v1")
        .into_iter()
        .filter(|r| r.get_str("event") == Some("prompt"))
        .filter_map(|r| r.get_str("host_input_digest").map(str::to_owned))
        .collect();
    for text in &sent {
        let digest = ctx_model::sha256_hex(&input_for(text).to_string());
        assert!(
            prompts.contains(&digest),
            "the prompt {text:?} has no record (seed {seed})"
        );
    }
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(
        audit.code, 0,
        "the audit after the kills (seed {seed}): {audit:?}"
    );
}
