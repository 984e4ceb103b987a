//! `ctx hook claude|codex EVENT`, run as the hosts run it: the hosts' documented hook JSON on
//! standard input, at most one JSON object on standard output, exit status 0 whatever happens.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ctx_model::Json;

use super::person::{person_decide, person_key_init};
use crate::support::{self, CtxRun, ctx_binary, run_ctx, run_ctx_env};

/// The hook input a host sends for `host_event`, with the field names of the hosts' docs
/// (spec/cli.md §7.2; spec/activation.md §6, §7): the common fields plus the event's own.
pub(crate) fn hook_input(host: &str, host_event: &str, session: &str, cwd: &Path) -> Json {
    let mut fields = vec![
        ("cwd", Json::str(cwd.display().to_string())),
        ("hook_event_name", Json::str(host_event)),
        ("permission_mode", Json::str("default")),
        ("session_id", Json::str(session)),
        (
            "transcript_path",
            Json::str(format!("/tmp/transcripts/{session}.jsonl")),
        ),
    ];
    if host == "codex" {
        fields.push(("model", Json::str("gpt-5-codex")));
        fields.push(("turn_id", Json::str("turn-1")));
    }
    match host_event {
        "SessionStart" => fields.push(("source", Json::str("startup"))),
        "UserPromptSubmit" => fields.push((
            "prompt",
            Json::str("add Playwright e2e tests for the checkout page"),
        )),
        "PostToolUse" | "PostToolUseFailure" => {
            fields.push(("tool_name", Json::str("mcp__playwright__browser_click")));
            fields.push((
                "tool_input",
                Json::object([("element", Json::str("Checkout"))]),
            ));
            fields.push(("tool_use_id", Json::str("toolu_01")));
            fields.push(("tool_response", Json::object([("ok", Json::Bool(true))])));
            fields.push(("duration_ms", Json::Int(42)));
        }
        "SubagentStart" => {
            fields.push(("agent_id", Json::str("agent-1")));
            fields.push(("agent_type", Json::str("code-reviewer")));
        }
        "SubagentStop" => {
            fields.push(("agent_id", Json::str("agent-1")));
            fields.push(("agent_type", Json::str("code-reviewer")));
            fields.push(("stop_hook_active", Json::Bool(false)));
            fields.push(("last_assistant_message", Json::str("Two findings.")));
        }
        "SessionEnd" => fields.push(("reason", Json::str("prompt_input_exit"))),
        other => panic!("no sample input for {other}"),
    }
    Json::object(fields)
}

/// The hosts' registrations, written out from spec/cli.md §7.2 (not from ctx's table): host, host
/// event, ctx's event word, whether the event answers with context.
const REGISTRATIONS: [(&str, &str, &str, bool); 13] = [
    ("claude", "SessionStart", "session-start", true),
    ("claude", "UserPromptSubmit", "user-prompt-submit", true),
    ("claude", "PostToolUse", "tool-outcome", false),
    ("claude", "PostToolUseFailure", "tool-outcome", false),
    ("claude", "SubagentStart", "subagent", false),
    ("claude", "SubagentStop", "subagent", false),
    ("claude", "SessionEnd", "session-end", false),
    ("codex", "SessionStart", "session-start", true),
    ("codex", "UserPromptSubmit", "user-prompt-submit", true),
    ("codex", "PostToolUse", "tool-outcome", false),
    ("codex", "SubagentStart", "subagent", false),
    ("codex", "SubagentStop", "subagent", false),
    ("codex", "SessionEnd", "session-end", false),
];

/// A temporary data directory, home and project directory.
pub(crate) struct Machine {
    pub(crate) dir: tempfile::TempDir,
    project: String,
}

impl Machine {
    pub(crate) fn new(project: &str) -> Machine {
        let dir = support::tempdir();
        std::fs::create_dir_all(dir.path().join(project)).unwrap();
        Machine {
            dir,
            project: project.to_owned(),
        }
    }

    /// The data directory, the home directory and the project directory.
    pub(crate) fn paths(&self) -> (PathBuf, PathBuf, PathBuf) {
        let root = self.dir.path();
        (
            root.join("ctx"),
            root.join("home"),
            root.join(&self.project),
        )
    }
}

fn hook(data: &Path, host: &str, event: &str, input: &Json) -> CtxRun {
    run_ctx(data, &["hook", host, event], &input.to_string())
}

/// The one JSON object a hook printed, after checking the exit status and that standard output
/// holds nothing else.
pub(crate) fn reply(run: &CtxRun) -> Option<Json> {
    assert_eq!(run.code, 0, "a hook always exits 0: {run:?}");
    if run.stdout.is_empty() {
        return None;
    }
    assert!(run.stdout.ends_with('\n'), "{run:?}");
    let line = run.stdout.trim_end_matches('\n');
    assert!(!line.contains('\n'), "one line only: {run:?}");
    Some(Json::parse(line).unwrap_or_else(|e| panic!("not JSON ({e}): {run:?}")))
}

pub(crate) fn context(reply: &Json, host_event: &str) -> String {
    let specific = reply
        .get("hookSpecificOutput")
        .unwrap_or_else(|| panic!("no hookSpecificOutput in {reply:?}"));
    assert_eq!(specific.get_str("hookEventName"), Some(host_event));
    let text = specific
        .get_str("additionalContext")
        .expect("additionalContext")
        .to_owned();
    assert!(text.chars().count() <= 10_000);
    text
}

/// The payloads of the host-session records of a data directory, through `ctx export`.
fn session_records(data: &Path) -> Vec<Json> {
    support::exported_payloads(data, "ctx.host-session.v1")
}

#[test]
fn every_registered_event_round_trips_for_both_hosts() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let project = dir.path().join("shop-api");
    std::fs::create_dir_all(&project).unwrap();
    for (host, host_event, word, answers) in REGISTRATIONS {
        let session = format!("{host}-session-1");
        let run = hook(
            &data,
            host,
            word,
            &hook_input(host, host_event, &session, &project),
        );
        assert!(run.stderr.is_empty(), "{host} {host_event}: {run:?}");
        let reply = reply(&run);
        if answers {
            let reply = reply.unwrap_or_else(|| panic!("{host} {host_event} answers: {run:?}"));
            let text = context(&reply, host_event);
            assert!(text.starts_with("ctx "), "{text}");
            if let Some(message) = reply.get_str("systemMessage") {
                assert!(message.contains("ctx consent approve"), "{message}");
            }
        } else {
            assert!(
                reply.is_none(),
                "{host} {host_event} prints nothing: {run:?}"
            );
        }
    }
    // Every call is on its session's stream, with the host's event name.
    let records = session_records(&data);
    for (host, host_event, _, _) in REGISTRATIONS {
        let session = format!("{host}:{host}-session-1");
        assert_eq!(
            records
                .iter()
                .filter(|r| r.get_str("session_id") == Some(session.as_str())
                    && r.get_str("hook_event_name") == Some(host_event))
                .count(),
            1,
            "{host} {host_event}"
        );
    }
    let failure = records
        .iter()
        .find(|r| r.get_str("hook_event_name") == Some("PostToolUseFailure"))
        .unwrap();
    assert_eq!(failure.get("succeeded"), Some(&Json::Bool(false)));
    assert_eq!(
        failure.get_str("tool_name"),
        Some("mcp__playwright__browser_click")
    );
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

#[test]
fn a_prompt_names_the_challenge_and_session_start_lists_it_until_approved() {
    let machine = Machine::new("infra");
    let (data, home, project) = machine.paths();
    let mut input = hook_input("claude", "UserPromptSubmit", "s-7", &project);
    if let Json::Obj(map) = &mut input {
        map.insert(
            "prompt".into(),
            Json::str("write terraform for the new infrastructure"),
        );
    }
    let run = hook(&data, "claude", "user-prompt-submit", &input);
    let first = reply(&run).expect("a reply");
    let text = context(&first, "UserPromptSubmit");
    assert!(text.contains("skill:terraform"), "{text}");
    let message = first
        .get_str("systemMessage")
        .expect("a message")
        .to_owned();
    let digest = approve_digest(&message);
    // The model is told that the person has not decided, never the challenge or a command.
    assert!(
        !text.contains(&digest) && !text.contains("ctx consent"),
        "{text}"
    );
    assert!(text.contains("awaits the person's decision"), "{text}");
    assert!(text.contains("skill:terraform"), "{text}");

    // The same prompt typed again once it was answered is the session's next prompt: the
    // person is not asked again, and the model hears that the decision is awaited.
    let again = hook(&data, "claude", "user-prompt-submit", &input);
    assert_eq!(reply_message(&again), None);
    let text = context(&reply(&again).expect("a reply"), "UserPromptSubmit");
    assert!(text.contains("awaits the person's decision"), "{text}");
    let prompts = session_records(&data)
        .into_iter()
        .filter(|r| r.get_str("event") == Some("prompt"))
        .count();
    assert_eq!(prompts, 2);

    let start = hook_input("claude", "SessionStart", "s-7", &project);
    let resumed = reply(&hook(&data, "claude", "session-start", &start)).expect("a reply");
    let text = context(&resumed, "SessionStart");
    assert!(
        text.contains("Not decided by the person yet: skill:terraform") && !text.contains(&digest),
        "the model learns that the person has not decided, never the challenge: {text}"
    );
    let to_person = resumed.get_str("systemMessage").unwrap_or_default();
    assert!(
        to_person.contains(&format!("skill:terraform (challenge {digest})")),
        "{to_person}"
    );

    let env = [("HOME", home.as_path())];
    let key = person_key_init(&data, &env);
    assert_eq!(key.code, 0, "{key:?}");
    let approved = person_decide(&data, "approve", &digest, &env);
    assert_eq!(approved.code, 0, "{approved:?}");

    let mut later = start.clone();
    if let Json::Obj(map) = &mut later {
        map.insert("source".into(), Json::str("resume"));
    }
    let resumed = reply(&hook(&data, "claude", "session-start", &later)).expect("a reply");
    let text = context(&resumed, "SessionStart");
    assert!(!text.contains("challenge"), "{text}");
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

/// The challenge digest of the `ctx consent approve <digest>` command a message names.
pub(crate) fn approve_digest(message: &str) -> String {
    message
        .split("ctx consent approve ")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .unwrap_or_else(|| panic!("no approve command in {message:?}"))
        .to_owned()
}

fn reply_message(run: &CtxRun) -> Option<String> {
    reply(run).and_then(|r| r.get_str("systemMessage").map(str::to_owned))
}

#[test]
fn bad_input_never_blocks_the_host() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let project = dir.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    let valid = hook_input("claude", "UserPromptSubmit", "s-1", &project);
    let mut relative = valid.clone();
    let mut wrong_event = valid.clone();
    let mut no_session = valid.clone();
    let mut bad_session = valid.clone();
    if let (Json::Obj(r), Json::Obj(w), Json::Obj(n), Json::Obj(b)) = (
        &mut relative,
        &mut wrong_event,
        &mut no_session,
        &mut bad_session,
    ) {
        r.insert("cwd".into(), Json::str("relative/dir"));
        w.insert("hook_event_name".into(), Json::str("Stop"));
        n.remove("session_id");
        b.insert("session_id".into(), Json::str("has space"));
    }
    let cases: [(&str, String, &str); 7] = [
        ("not JSON", "{not json".into(), "not JSON"),
        ("not an object", "[1,2]".into(), "not a JSON object"),
        ("relative cwd", relative.to_string(), "relative/dir"),
        ("another event", wrong_event.to_string(), "\"Stop\""),
        ("no session", no_session.to_string(), "session_id"),
        ("bad session", bad_session.to_string(), "has space"),
        ("empty", String::new(), "not JSON"),
    ];
    for (what, input, named) in cases {
        let run = run_ctx(&data, &["hook", "claude", "user-prompt-submit"], &input);
        let message = reply_message(&run).unwrap_or_else(|| panic!("{what}: {run:?}"));
        assert!(message.starts_with("ctx: "), "{what}: {message}");
        assert!(message.contains(named), "{what}: {message}");
        assert!(run.stderr.contains(named), "{what}: {run:?}");
    }
    // A hook command line ctx does not know is a message too, never exit 2.
    for args in [
        &["hook", "claude", "pre-compact"][..],
        &["hook", "cursor", "session-start"][..],
        &["hook"][..],
    ] {
        let run = run_ctx(&data, args, &valid.to_string());
        let message = reply_message(&run).unwrap_or_else(|| panic!("{args:?}: {run:?}"));
        assert!(message.starts_with("ctx: "), "{args:?}: {message}");
    }
    // A data directory that cannot be used.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let run = run_ctx(
        &file,
        &["hook", "codex", "user-prompt-submit"],
        &valid.to_string(),
    );
    assert!(reply_message(&run).is_some(), "{run:?}");
    // More than the limit: read no further, answer with a message.
    let mut child = Command::new(ctx_binary())
        .arg("--data-dir")
        .arg(&data)
        .args(["hook", "claude", "tool-outcome"])
        .env("HOME", dir.path().join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // ctx stops reading after the limit, so this write may end with a broken pipe.
    let _ = stdin.write_all(&vec![b' '; 2 * 1024 * 1024]);
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let run = CtxRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    let message = reply_message(&run).expect("a message");
    assert!(message.contains("larger than 1048576 bytes"), "{message}");
}

#[test]
fn a_repeated_delivery_is_recorded_once_and_other_tools_not_at_all() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let project = dir.path().join("p");
    let input = hook_input("claude", "PostToolUse", "s-1", &project);
    for _ in 0..2 {
        assert!(reply(&hook(&data, "claude", "tool-outcome", &input)).is_none());
    }
    let mut bash = input.clone();
    if let Json::Obj(map) = &mut bash {
        map.insert("tool_name".into(), Json::str("Bash"));
    }
    assert!(reply(&hook(&data, "codex", "tool-outcome", &bash)).is_none());
    let records = session_records(&data);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].get_str("event"), Some("tool-outcome"));
    assert_eq!(records[0].get("duration_ms"), Some(&Json::Int(42)));
}

#[test]
fn concurrent_hook_processes_share_one_data_directory() {
    const SESSIONS: usize = 8;
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let project = dir.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    // The first prompt ingests the catalog; then eight sessions at once, each a prompt, a tool
    // outcome and a session end. Every hook holds the data directory's lock for its whole run and
    // gives up after its share of the host's timeout (spec/cli.md §7.4) with the sentence below,
    // having done nothing; on a loaded machine some do. What must hold whatever the timing: each
    // hook either did its whole work or said it did nothing, every hook that worked left exactly
    // its record, and the journal audits clean.
    assert!(
        reply(&hook(
            &data,
            "claude",
            "user-prompt-submit",
            &hook_input("claude", "UserPromptSubmit", "warm", &project),
        ))
        .is_some()
    );
    let handles: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let data = data.clone();
            let project = project.clone();
            std::thread::spawn(move || {
                let host = if i % 2 == 0 { "claude" } else { "codex" };
                let session = format!("par-{i}");
                let mut runs = Vec::new();
                for (event, word) in [
                    ("UserPromptSubmit", "user-prompt-submit"),
                    ("PostToolUse", "tool-outcome"),
                    ("SessionEnd", "session-end"),
                ] {
                    runs.push((
                        event,
                        hook(
                            &data,
                            host,
                            word,
                            &hook_input(host, event, &session, &project),
                        ),
                    ));
                }
                runs
            })
        })
        .collect();
    let mut worked = 0;
    for handle in handles {
        for (event, run) in handle.join().unwrap() {
            let reply = reply(&run);
            if let Some(message) = reply.as_ref().and_then(|r| r.get_str("systemMessage"))
                && message.starts_with(
                    "ctx: another ctx process kept the data directory busy for longer than this \
                     hook may wait",
                )
            {
                assert!(message.contains("so ctx did nothing for this"), "{message}");
                continue;
            }
            worked += 1;
            if event == "UserPromptSubmit" {
                let reply = reply.expect("a reply");
                context(&reply, event);
                if let Some(message) = reply.get_str("systemMessage") {
                    assert!(message.contains("ctx consent approve"), "{message}");
                }
            } else {
                assert!(reply.is_none(), "{run:?}");
            }
        }
    }
    assert!(worked > 0, "no hook got the data directory");
    assert_eq!(session_records(&data).len(), 1 + worked);
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

#[test]
fn every_prompt_of_one_session_is_planned() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let project = dir.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    for prompt in [
        "write rust tests with cargo",
        "add Playwright e2e tests for checkout",
        "write terraform for the new infrastructure",
    ] {
        let mut input = hook_input("codex", "UserPromptSubmit", "one-session", &project);
        if let Json::Obj(map) = &mut input {
            map.insert("prompt".into(), Json::str(prompt));
        }
        let run = hook(&data, "codex", "user-prompt-submit", &input);
        let reply = reply(&run).expect("a reply");
        let text = context(&reply, "UserPromptSubmit");
        assert!(text.starts_with("ctx plan plan-"), "{prompt}: {text}");
        if let Some(message) = reply.get_str("systemMessage") {
            assert!(
                message.contains("ctx consent approve"),
                "{prompt}: {message}"
            );
        }
    }
    let prompts = session_records(&data)
        .into_iter()
        .filter(|r| r.get_str("event") == Some("prompt"))
        .count();
    assert_eq!(prompts, 3);
}

pub(crate) fn hook_env(data: &Path, home: &Path, host: &str, event: &str, input: &Json) -> CtxRun {
    run_ctx_env(
        data,
        &["hook", host, event],
        &input.to_string(),
        &[("HOME", home), ("CODEX_HOME", &home.join(".codex"))],
    )
}

/// Claude Code's UserPromptSubmit hook for `text` in `session`, run with the test's HOME; its reply.
pub(crate) fn claude_prompt(
    data: &Path,
    home: &Path,
    project: &Path,
    session: &str,
    text: &str,
) -> Json {
    let input = with_prompt(
        hook_input("claude", "UserPromptSubmit", session, project),
        text,
    );
    reply(&hook_env(
        data,
        home,
        "claude",
        "user-prompt-submit",
        &input,
    ))
    .expect("a reply")
}

pub(crate) fn with_prompt(mut input: Json, prompt: &str) -> Json {
    if let Json::Obj(map) = &mut input {
        map.insert("prompt".into(), Json::str(prompt));
    }
    input
}

#[test]
fn a_prompt_activates_catalog_skills_and_the_session_end_takes_them_away() {
    for (host, skills_dir) in [("claude", ".claude/skills"), ("codex", ".agents/skills")] {
        let machine = Machine::new("crate");
        let (data, home, project) = machine.paths();
        let input = with_prompt(
            hook_input(host, "UserPromptSubmit", "s-1", &project),
            "write go tests",
        );
        let answer =
            reply(&hook_env(&data, &home, host, "user-prompt-submit", &input)).expect("a reply");
        let text = context(&answer, "UserPromptSubmit");
        assert!(
            text.contains("skill:go (") && text.contains(") is active."),
            "{text}"
        );
        assert!(text.contains("Activated now: "), "{text}");
        for name in ["go", "go-testing"] {
            let link = home.join(skills_dir).join(name);
            let meta = std::fs::symlink_metadata(&link).unwrap();
            assert!(meta.file_type().is_symlink(), "{host}: {}", link.display());
            assert_eq!(
                std::fs::read(link.join("SKILL.md")).unwrap(),
                support::catalog_skill(name),
                "{host} {name}"
            );
        }
        // ctx doctor lists what ctx activated, and notices a person's change.
        let doctor = |data: &Path| {
            let run = run_ctx_env(
                data,
                &["doctor", "--json"],
                "",
                &[("HOME", &home), ("CODEX_HOME", &home.join(".codex"))],
            );
            let report = Json::parse(run.stdout.trim_end()).expect("doctor JSON");
            let hosts = report.get("hosts").and_then(Json::as_arr).unwrap();
            let mine = hosts
                .iter()
                .find(|h| h.get_str("host") == Some(host))
                .unwrap();
            let listed: Vec<Json> = mine
                .get("activations")
                .and_then(Json::as_arr)
                .unwrap()
                .to_vec();
            listed
        };
        let listed = doctor(&data);
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(
            listed.iter().all(|a| a.get_str("status") == Some("active")),
            "{listed:?}"
        );
        let link = home.join(skills_dir).join("go-testing");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&project, &link).unwrap();
        let drifted = doctor(&data)
            .into_iter()
            .find(|a| a.get_str("capability_id") == Some("skill:go-testing"))
            .unwrap();
        assert_eq!(drifted.get_str("status"), Some("drifted"), "{drifted:?}");
        std::fs::remove_file(&link).unwrap();
        assert_eq!(
            doctor(&data)
                .into_iter()
                .find(|a| a.get_str("capability_id") == Some("skill:go-testing"))
                .and_then(|a| a.get_str("status").map(str::to_owned))
                .as_deref(),
            Some("missing")
        );
        // A second prompt of the same session that plans go again holds it too; the session
        // end takes both away once.
        let again = with_prompt(
            hook_input(host, "UserPromptSubmit", "s-1", &project),
            "write go tests for the parser",
        );
        reply(&hook_env(&data, &home, host, "user-prompt-submit", &again)).expect("a reply");
        let end = hook_input(host, "SessionEnd", "s-1", &project);
        assert!(reply(&hook_env(&data, &home, host, "session-end", &end)).is_none());
        // go-testing was removed by hand above; go goes with the session.
        let link = home.join(skills_dir).join("go");
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "{host}: {} is gone",
            link.display()
        );
        let audit = run_ctx(&data, &["audit"], "");
        assert_eq!(audit.code, 0, "{audit:?}");
    }
}

#[test]
fn a_persons_own_skill_is_never_replaced_and_the_model_is_told() {
    let machine = Machine::new("crate");
    let (data, home, project) = machine.paths();
    let own = home.join(".claude/skills/go");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("SKILL.md"), b"---\nname: go\n---\nmine\n").unwrap();
    let input = with_prompt(
        hook_input("claude", "UserPromptSubmit", "s-1", &project),
        "write go tests",
    );
    let reply = reply(&hook_env(
        &data,
        &home,
        "claude",
        "user-prompt-submit",
        &input,
    ))
    .expect("a reply");
    let text = context(&reply, "UserPromptSubmit");
    assert!(text.contains("skill:go was not activated: "), "{text}");
    assert_eq!(
        std::fs::read(own.join("SKILL.md")).unwrap(),
        b"---\nname: go\n---\nmine\n"
    );
    assert!(
        !std::fs::symlink_metadata(&own)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The session end leaves the person's skill alone.
    let end = hook_input("claude", "SessionEnd", "s-1", &project);
    reply_none(&hook_env(&data, &home, "claude", "session-end", &end));
    assert_eq!(
        std::fs::read(own.join("SKILL.md")).unwrap(),
        b"---\nname: go\n---\nmine\n"
    );
}

pub(crate) fn reply_none(run: &CtxRun) {
    assert!(reply(run).is_none(), "{run:?}");
}

#[test]
fn an_approved_install_is_activated_at_the_next_prompt() {
    let machine = Machine::new("infra");
    let (data, home, project) = machine.paths();
    let prompt = |text: &str| claude_prompt(&data, &home, &project, "s-3", text);
    let first = prompt("write terraform for the new infrastructure");
    let message = first.get_str("systemMessage").expect("a consent message");
    let digest = approve_digest(message);
    let env = [("HOME", home.as_path())];
    assert_eq!(person_key_init(&data, &env).code, 0);
    let approved = person_decide(&data, "approve", &digest, &env);
    assert_eq!(approved.code, 0, "{approved:?}");
    // A prompt about something else: the earlier prompt's approved install becomes active.
    let next = prompt("write go tests");
    let text = context(&next, "UserPromptSubmit");
    assert!(text.contains("skill:terraform"), "{text}");
    assert_eq!(
        std::fs::read(home.join(".claude/skills/terraform/SKILL.md")).unwrap(),
        support::catalog_skill("terraform")
    );
}

#[test]
fn an_approved_install_is_activated_at_the_next_session_start() {
    let machine = Machine::new("infra");
    let (data, home, project) = machine.paths();
    let input = with_prompt(
        hook_input("claude", "UserPromptSubmit", "s-9", &project),
        "write terraform for the new infrastructure",
    );
    let first = reply(&hook_env(
        &data,
        &home,
        "claude",
        "user-prompt-submit",
        &input,
    ))
    .expect("a reply");
    let message = first.get_str("systemMessage").expect("a consent message");
    let digest = approve_digest(message);
    assert!(
        std::fs::symlink_metadata(home.join(".claude/skills/terraform")).is_err(),
        "nothing before consent"
    );
    let env = [("HOME", home.as_path())];
    assert_eq!(person_key_init(&data, &env).code, 0);
    let approved = person_decide(&data, "approve", &digest, &env);
    assert_eq!(approved.code, 0, "{approved:?}");
    let mut resume = hook_input("claude", "SessionStart", "s-9", &project);
    if let Json::Obj(map) = &mut resume {
        map.insert("source".into(), Json::str("resume"));
    }
    let reply =
        reply(&hook_env(&data, &home, "claude", "session-start", &resume)).expect("a reply");
    let text = context(&reply, "SessionStart");
    assert!(text.contains("Activated now: skill:terraform"), "{text}");
    assert_eq!(
        reply
            .get("hookSpecificOutput")
            .and_then(|s| s.get("reloadSkills")),
        Some(&Json::Bool(true))
    );
    assert_eq!(
        std::fs::read(home.join(".claude/skills/terraform/SKILL.md")).unwrap(),
        support::catalog_skill("terraform")
    );
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

/// The challenges a session start lists as awaiting consent: (capability id, digest).
fn awaiting(text: &str) -> Vec<(String, String)> {
    let Some(list) = text.split("Awaiting the person's consent: ").nth(1) else {
        return Vec::new();
    };
    list.split(". ")
        .next()
        .unwrap_or_default()
        .trim_end_matches('.')
        .split(", ")
        .filter_map(|item| {
            let (id, rest) = item.split_once(" (challenge ")?;
            Some((id.to_owned(), rest.trim_end_matches(')').to_owned()))
        })
        .collect()
}

#[test]
fn approved_agents_and_mcp_servers_are_activated_for_each_host_and_removed_at_the_end() {
    for host in ["claude", "codex"] {
        let machine = Machine::new("app");
        let (data, home, project) = machine.paths();
        let env = [("HOME", home.as_path())];
        assert_eq!(person_key_init(&data, &env).code, 0);
        let decide = |digest: &str, verb: &str| {
            let run = person_decide(&data, verb, digest, &env);
            assert_eq!(run.code, 0, "{host} {verb}: {run:?}");
        };
        let start = |source: &str| {
            let mut input = hook_input(host, "SessionStart", "s-1", &project);
            if let Json::Obj(map) = &mut input {
                map.insert("source".into(), Json::str(source));
            }
            let answer =
                reply(&hook_env(&data, &home, host, "session-start", &input)).expect("a reply");
            let text = context(&answer, "SessionStart");
            assert!(
                !text.contains("(challenge "),
                "the model is never told a challenge: {text}"
            );
            // The challenges go to the person, in the host's message for them.
            format!(
                "{text}\n{}",
                answer.get_str("systemMessage").unwrap_or_default()
            )
        };
        for prompt in [
            "what time is it in another timezone",
            "review the code quality and find bugs",
        ] {
            let input = with_prompt(
                hook_input(host, "UserPromptSubmit", "s-1", &project),
                prompt,
            );
            reply(&hook_env(&data, &home, host, "user-prompt-submit", &input)).expect("a reply");
        }
        // Approve the time server and the code reviewer; deny everything else, one challenge
        // after the other as the session start lists them.
        let mut activated = String::new();
        for _ in 0..8 {
            let text = start("resume");
            activated.push_str(&text);
            let Some((id, digest)) = awaiting(&text).into_iter().next() else {
                break;
            };
            let verb = if id == "mcp-server:time" || id == "agent:code-reviewer" {
                "approve"
            } else {
                "deny"
            };
            decide(&digest, verb);
        }
        let text = start("resume");
        activated.push_str(&text);
        assert!(awaiting(&text).is_empty(), "{host}: {text}");
        assert!(activated.contains("mcp-server:time"), "{host}: {activated}");
        assert!(
            activated.contains("agent:code-reviewer"),
            "{host}: {activated}"
        );
        let agent = support::catalog_file("agents/code-reviewer.md");
        let server = support::catalog_file("mcp-servers/time.json");
        let server = Json::parse(std::str::from_utf8(&server).unwrap()).unwrap();
        let server = server
            .get("mcpServers")
            .and_then(|m| m.get("time"))
            .unwrap();
        let (agent_file, config) = match host {
            "claude" => (
                home.join(".claude/agents/ctx/code-reviewer.md"),
                project.join(".mcp.json"),
            ),
            _ => (
                home.join(".codex/agents/code-reviewer.toml"),
                home.join(".codex/config.toml"),
            ),
        };
        let text = std::fs::read_to_string(&config).unwrap();
        if host == "claude" {
            assert_eq!(std::fs::read(&agent_file).unwrap(), agent, "byte for byte");
            let written = Json::parse(&text).unwrap();
            assert_eq!(
                written.get("mcpServers").and_then(|m| m.get("time")),
                Some(server),
                "{text}"
            );
        } else {
            let toml = std::fs::read_to_string(&agent_file).unwrap();
            assert!(toml.contains("name = \"code-reviewer\""), "{toml}");
            assert!(toml.contains("developer_instructions"), "{toml}");
            assert!(text.contains("[mcp_servers.time]"), "{text}");
            let command = server.get_str("command").unwrap();
            assert!(text.contains(&format!("command = \"{command}\"")), "{text}");
        }

        // The session ends in another directory than it activated from: what it activated in
        // the project is still found and taken away.
        let elsewhere = project.with_file_name("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let end = hook_input(host, "SessionEnd", "s-1", &elsewhere);
        reply_none(&hook_env(&data, &home, host, "session-end", &end));
        assert!(!elsewhere.join(".mcp.json").exists(), "{host}");
        assert!(!agent_file.exists(), "{host}: the agent is gone");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(!text.contains("time"), "{host}: the server is gone: {text}");
        let audit = run_ctx(&data, &["audit"], "");
        assert_eq!(audit.code, 0, "{audit:?}");
    }
}

#[test]
fn concurrent_sessions_share_an_activated_skill_until_the_last_one_ends() {
    let machine = Machine::new("p");
    let (data, home, project) = machine.paths();
    let link = home.join(".claude/skills/go");
    let sessions: Vec<String> = (0..6).map(|i| format!("shared-{i}")).collect();
    // Six sessions prompt at once; every one plans and holds skill:go.
    let handles: Vec<_> = sessions
        .iter()
        .map(|session| {
            let (data, home, project, session) =
                (data.clone(), home.clone(), project.clone(), session.clone());
            std::thread::spawn(move || {
                let input = with_prompt(
                    hook_input("claude", "UserPromptSubmit", &session, &project),
                    "write go tests",
                );
                hook_env(&data, &home, "claude", "user-prompt-submit", &input)
            })
        })
        .collect();
    for handle in handles {
        let run = handle.join().unwrap();
        let answer = reply(&run).expect("a reply");
        let text = context(&answer, "UserPromptSubmit");
        assert!(text.contains("skill:go ("), "{text}");
        // A message, if any, is about an install that waits for the person, never skill:go.
        assert!(
            answer
                .get_str("systemMessage")
                .is_none_or(|m| !m.contains("skill:go ")),
            "{run:?}"
        );
    }
    assert_eq!(
        std::fs::read(link.join("SKILL.md")).unwrap(),
        support::catalog_skill("go")
    );
    // All but one end, concurrently: the shared skill stays for the last.
    let (last, others) = sessions.split_last().unwrap();
    let handles: Vec<_> = others
        .iter()
        .map(|session| {
            let (data, home, project, session) =
                (data.clone(), home.clone(), project.clone(), session.clone());
            std::thread::spawn(move || {
                let end = hook_input("claude", "SessionEnd", &session, &project);
                hook_env(&data, &home, "claude", "session-end", &end)
            })
        })
        .collect();
    for handle in handles {
        reply_none(&handle.join().unwrap());
    }
    assert_eq!(
        std::fs::read(link.join("SKILL.md")).unwrap(),
        support::catalog_skill("go"),
        "still held by {last}"
    );
    let end = hook_input("claude", "SessionEnd", last, &project);
    reply_none(&hook_env(&data, &home, "claude", "session-end", &end));
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "gone with the last"
    );
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

#[test]
fn within_a_session_each_capability_is_asked_once_and_a_denial_is_told_once() {
    let machine = Machine::new("infra");
    let (data, home, project) = machine.paths();
    let prompt = |text: &str| claude_prompt(&data, &home, &project, "s-4", text);
    let message = |reply: &Json| {
        reply
            .get_str("systemMessage")
            .unwrap_or_default()
            .to_owned()
    };
    let first = prompt("write terraform for the new infrastructure");
    let terraform = approve_digest(&message(&first));
    // Another prompt planning the same skill while the person has not decided: no new challenge.
    let second = prompt("terraform plan fails on the vpc module");
    assert!(!message(&second).contains("skill:terraform"), "{second}");
    let text = context(&second, "UserPromptSubmit");
    assert!(
        text.contains("skill:terraform") && text.contains("awaits the person's decision"),
        "{text}"
    );
    let review = prompt("ask the code reviewer to review this pull request for security issues");
    assert!(message(&review).contains("agent:code-reviewer"), "{review}");
    let reviewer = approve_digest(&message(&review));
    // No head-of-line blocking: the skills loaded from the catalog are active while the agent
    // waits for the person.
    let text = context(&review, "UserPromptSubmit");
    assert!(
        text.contains("Activated now: skill:review-diff, skill:security-review"),
        "{text}"
    );
    assert!(home.join(".claude/skills/review-diff/SKILL.md").is_file());

    let env = [("HOME", home.as_path())];
    assert_eq!(person_key_init(&data, &env).code, 0);
    assert_eq!(person_decide(&data, "approve", &terraform, &env).code, 0);
    assert_eq!(person_decide(&data, "deny", &reviewer, &env).code, 0);

    // Approved: never asked again in this session, and active.
    let third = prompt("terraform state drift on the vpc module again");
    assert!(!message(&third).contains("skill:terraform"), "{third}");
    let text = context(&third, "UserPromptSubmit");
    assert!(text.contains("skill:terraform"), "{text}");
    assert!(home.join(".claude/skills/terraform/SKILL.md").is_file());

    // Denied: not offered again; the model is told once.
    let fourth = prompt(
        "ask the code reviewer to review this pull request for security issues, second pass",
    );
    assert!(
        !message(&fourth).contains("agent:code-reviewer"),
        "{fourth}"
    );
    let text = context(&fourth, "UserPromptSubmit");
    assert!(
        text.contains("agent:code-reviewer") && text.contains("was declined by the person"),
        "{text}"
    );
    let fifth =
        prompt("ask the code reviewer to review this pull request for security issues, third pass");
    assert!(!message(&fifth).contains("agent:code-reviewer"), "{fifth}");
    let text = context(&fifth, "UserPromptSubmit");
    assert!(!text.contains("agent:code-reviewer"), "told once: {text}");

    // Nothing the person decided waits again.
    let pending = run_ctx(&data, &["consent", "pending"], "");
    assert!(
        !pending.stdout.contains("skill:terraform")
            && !pending.stdout.contains("agent:code-reviewer"),
        "{}",
        pending.stdout
    );
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

#[test]
fn a_new_task_replaces_the_skills_of_the_last_one_and_a_prompt_that_plans_nothing_keeps_them() {
    let machine = Machine::new("infra");
    let (data, home, project) = machine.paths();
    let prompt = |text: &str| {
        context(
            &claude_prompt(&data, &home, &project, "s-6", text),
            "UserPromptSubmit",
        )
    };
    let skill = |name: &str| home.join(format!(".claude/skills/{name}/SKILL.md"));
    prompt("write a kubernetes helm chart");
    assert!(skill("kubernetes").is_file());
    let nothing = prompt("fix the react component");
    assert!(nothing.contains("no capability"), "{nothing}");
    assert!(
        skill("kubernetes").is_file(),
        "a prompt that plans nothing shifts nothing"
    );
    let shifted = prompt("write rust unit tests");
    assert!(skill("rust-testing").is_file(), "{shifted}");
    assert!(!skill("kubernetes").exists(), "{shifted}");
    assert!(
        shifted.contains("Deactivated: skill:kubernetes"),
        "{shifted}"
    );
    // Back to the first task, typed again word for word: a new prompt of the session.
    let back = prompt("write a kubernetes helm chart");
    assert!(skill("kubernetes").is_file(), "{back}");
    assert!(!skill("rust-testing").exists(), "{back}");
    assert!(!back.contains("Deactivated: skill:kubernetes"), "{back}");
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}
