//! `ctx init --host` and `ctx doctor`, run as a person would, on a temporary HOME and CODEX_HOME
//! (never the real ones). The expected hook entries are written out here from the documented
//! shape (spec/cli.md §8, spec/cli.md §7.2, §7; spec/activation.md §6, §7), not computed by ctx's
//! code.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ctx_model::Json;

use crate::support::{self, CtxRun, ctx_binary, run_ctx_env};

/// Claude Code's registrations: host event, ctx's event word, matcher, async, timeout (s).
const CLAUDE: [(&str, &str, Option<&str>, bool, i64); 7] = [
    (
        "SessionStart",
        "session-start",
        Some("startup|resume|clear|compact"),
        false,
        10,
    ),
    ("UserPromptSubmit", "user-prompt-submit", None, false, 10),
    (
        "PostToolUse",
        "tool-outcome",
        Some("Skill|Agent|mcp__.*"),
        true,
        10,
    ),
    (
        "PostToolUseFailure",
        "tool-outcome",
        Some("Skill|Agent|mcp__.*"),
        true,
        10,
    ),
    ("SubagentStart", "subagent", None, true, 10),
    ("SubagentStop", "subagent", None, true, 10),
    ("SessionEnd", "session-end", None, false, 5),
];

/// Codex's: the same without PostToolUseFailure, and tool outcomes unfiltered.
const CODEX: [(&str, &str, Option<&str>, bool, i64); 6] = [
    (
        "SessionStart",
        "session-start",
        Some("startup|resume|clear|compact"),
        false,
        10,
    ),
    ("UserPromptSubmit", "user-prompt-submit", None, false, 10),
    ("PostToolUse", "tool-outcome", None, true, 10),
    ("SubagentStart", "subagent", None, true, 10),
    ("SubagentStop", "subagent", None, true, 10),
    ("SessionEnd", "session-end", None, false, 5),
];

/// A person's machine: HOME, a separate CODEX_HOME, a data directory.
struct Machine {
    _root: tempfile::TempDir,
    home: PathBuf,
    codex_home: PathBuf,
    data: PathBuf,
}

impl Machine {
    fn new() -> Machine {
        Machine::with_data_dir_name("data")
    }

    fn with_data_dir_name(name: &str) -> Machine {
        let root = support::tempdir();
        let home = root.path().join("home");
        let codex_home = root.path().join("codex home");
        let data = root.path().join(name);
        fs::create_dir_all(&home).unwrap();
        Machine {
            home,
            codex_home,
            data,
            _root: root,
        }
    }

    fn env(&self) -> [(&'static str, &Path); 2] {
        [("HOME", &self.home), ("CODEX_HOME", &self.codex_home)]
    }

    fn ctx(&self, args: &[&str]) -> CtxRun {
        run_ctx_env(&self.data, args, "", &self.env())
    }

    /// Runs the ctx binary at `exe` (a copy somewhere else) the same way.
    fn ctx_at(&self, exe: &Path, args: &[&str]) -> CtxRun {
        let output = Command::new(exe)
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .env_remove("CTX_DATA_DIR")
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        CtxRun {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn settings(&self) -> PathBuf {
        self.home.join(".claude").join("settings.json")
    }

    fn codex_hooks(&self) -> PathBuf {
        self.codex_home.join("hooks.json")
    }

    fn data_str(&self) -> &str {
        self.data.to_str().unwrap()
    }
}

/// The path the hosts will run: the binary as the kernel names it.
fn exe() -> String {
    fs::canonicalize(ctx_binary())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

fn ok(run: &CtxRun, what: &str) {
    assert_eq!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
}

fn read_json(path: &Path) -> Json {
    let text = fs::read_to_string(path).unwrap();
    Json::parse(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}): {text}", path.display()))
}

fn claude_group(exe: &str, data: &str, entry: (&str, &str, Option<&str>, bool, i64)) -> Json {
    let (_, word, matcher, background, timeout) = entry;
    let args = ["--data-dir", data, "hook", "claude", word]
        .into_iter()
        .map(Json::str)
        .collect();
    let mut handler = vec![
        ("type", Json::str("command")),
        ("command", Json::str(exe)),
        ("args", Json::Arr(args)),
        ("timeout", Json::Int(timeout)),
    ];
    if background {
        handler.push(("async", Json::Bool(true)));
    }
    Json::object([
        ("matcher", Json::str(matcher.unwrap_or(""))),
        ("hooks", Json::Arr(vec![Json::object(handler)])),
    ])
}

/// POSIX single quotes, written out independently of ctx's own quoting.
fn sh_quote(word: &str) -> String {
    let mut out = String::from("'");
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

fn codex_group(exe: &str, data: &str, entry: (&str, &str, Option<&str>, bool, i64)) -> Json {
    let (_, word, matcher, background, timeout) = entry;
    let command = format!(
        "{} --data-dir {} hook codex {word}",
        sh_quote(exe),
        sh_quote(data)
    );
    let mut handler = vec![
        ("type", Json::str("command")),
        ("command", Json::str(command)),
        ("timeout", Json::Int(timeout)),
    ];
    if background {
        handler.push(("async", Json::Bool(true)));
    }
    let mut group = vec![("hooks", Json::Arr(vec![Json::object(handler)]))];
    if let Some(matcher) = matcher {
        group.push(("matcher", Json::str(matcher)));
    }
    Json::object(group)
}

/// The permission rules init adds for Claude Code (spec/decisions.md §15.2): the person's
/// commands for the Bash tool, by name and by the binary's path, and the device key's directory
/// for the file tools.
fn expected_deny(exe: &str, home: &Path) -> Json {
    let keys = home.join(".config/ctx");
    let keys = keys.to_str().unwrap().trim_start_matches('/');
    let mut rules = Vec::new();
    for program in ["ctx", exe] {
        rules.push(format!("Bash({program} consent approve *)"));
        rules.push(format!("Bash({program} consent deny *)"));
        rules.push(format!("Bash({program} key *)"));
    }
    rules.push(format!("Read(//{keys}/**)"));
    rules.push(format!("Edit(//{keys}/**)"));
    Json::Arr(rules.into_iter().map(Json::Str).collect())
}

fn expected_claude(exe: &str, data: &str, home: &Path) -> Json {
    Json::object([
        (
            "hooks",
            Json::object(CLAUDE.map(|e| (e.0, Json::Arr(vec![claude_group(exe, data, e)])))),
        ),
        (
            "permissions",
            Json::object([("deny", expected_deny(exe, home))]),
        ),
    ])
}

fn expected_codex(exe: &str, data: &str) -> Json {
    Json::object([(
        "hooks",
        Json::object(CODEX.map(|e| (e.0, Json::Arr(vec![codex_group(exe, data, e)])))),
    )])
}

/// `(mtime in ns, inode, bytes)`: a file not rewritten keeps all three.
fn fingerprint(path: &Path) -> (i64, u64, Vec<u8>) {
    let meta = fs::metadata(path).unwrap();
    (
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        meta.ino(),
        fs::read(path).unwrap(),
    )
}

/// `ctx doctor --json`: exit status and report.
fn doctor(machine: &Machine) -> (i32, Json) {
    let run = machine.ctx(&["doctor", "--json"]);
    let report = Json::parse(run.stdout.trim_end())
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {}", run.stdout));
    assert_eq!(report.get_str("schema"), Some("ctx.doctor.v1"));
    assert_eq!(report.get("ok"), Some(&Json::Bool(run.code == 0)));
    (run.code, report)
}

fn host_of<'a>(report: &'a Json, name: &str) -> &'a Json {
    report
        .get("hosts")
        .and_then(Json::as_arr)
        .and_then(|hosts| hosts.iter().find(|h| h.get_str("host") == Some(name)))
        .unwrap_or_else(|| panic!("no host {name} in {report}"))
}

/// `event → status` of one host in a doctor report.
fn statuses(report: &Json, name: &str) -> Vec<(String, String)> {
    host_of(report, name)
        .get("hooks")
        .and_then(Json::as_arr)
        .unwrap()
        .iter()
        .map(|h| {
            (
                h.get_str("event").unwrap().to_owned(),
                h.get_str("status").unwrap().to_owned(),
            )
        })
        .collect()
}

fn all(events: &[(&str, &str, Option<&str>, bool, i64)], status: &str) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.0.to_owned(), status.to_owned()))
        .collect()
}

#[test]
fn init_claude_on_an_empty_home_writes_the_documented_entries_and_directories() {
    let m = Machine::new();
    let run = m.ctx(&["init", "--host", "claude"]);
    ok(&run, "init");
    assert_eq!(
        read_json(&m.settings()),
        expected_claude(&exe(), m.data_str(), &m.home)
    );
    assert!(m.home.join(".claude/skills").is_dir());
    assert!(m.home.join(".claude/agents").is_dir());
    for (event, ..) in CLAUDE {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.contains("added") && l.contains(event)),
            "{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains("created"), "{}", run.stdout);
    assert!(run.stdout.contains("sha256"), "{}", run.stdout);
    // Nothing of Codex's was touched.
    assert!(!m.codex_home.exists());
}

#[test]
fn a_second_init_leaves_the_file_byte_identical_and_unwritten() {
    let m = Machine::new();
    for (host, file) in [("claude", m.settings()), ("codex", m.codex_hooks())] {
        ok(&m.ctx(&["init", "--host", host]), "first init");
        let before = fingerprint(&file);
        let run = m.ctx(&["init", "--host", host]);
        ok(&run, "second init");
        assert_eq!(fingerprint(&file), before, "{host}: the file was rewritten");
        assert!(!run.stdout.contains("added"), "{}", run.stdout);
        assert!(run.stdout.contains("unchanged"), "{}", run.stdout);
        assert!(run.stdout.contains("present"), "{}", run.stdout);
    }
}

/// The person's settings, laid out oddly: tabs, CRLF, spaces before colons, unknown keys, a
/// hook of their own on an event ctx uses and one on an event it does not.
const PERSON_HEAD: &str = "{\r\n\t\"$schema\" : \"https://json.schemastore.org/claude-code-settings.json\",\r\n\t\"permissions\":{\"allow\":[ \"Bash(npm run lint)\" ]},\r\n\t\"hooks\" : {\r\n\t\t\"PreToolUse\":[{\"matcher\":\"Bash\",\"hooks\":[{\"type\":\"command\",\"command\":\"~/bin/guard.sh\"}]}],\r\n\t\t\"SessionStart\" : [ {\"hooks\":[{\"type\":\"command\",\"command\":\"echo hello\"}]}";
const PERSON_MID: &str = " ]";
const PERSON_TAIL: &str = "\r\n\t},\r\n\t\"zeta\" :[ 1,2 ,3],\r\n\t\"model\":\"opus\"\r\n}\r\n";

#[test]
fn init_keeps_the_persons_hooks_unknown_keys_and_formatting() {
    let m = Machine::new();
    fs::create_dir_all(m.settings().parent().unwrap()).unwrap();
    let original = format!("{PERSON_HEAD}{PERSON_MID}{PERSON_TAIL}");
    fs::write(m.settings(), &original).unwrap();
    let before = Json::parse(&original).unwrap();
    ok(&m.ctx(&["init", "--host", "claude"]), "init");
    let text = fs::read_to_string(m.settings()).unwrap();
    // ctx inserted after the person's SessionStart group and after the hooks' last member;
    // every other byte is as it was.
    // The deny rules went after the person's last permissions member, the same way.
    let allow = "\"permissions\":{\"allow\":[ \"Bash(npm run lint)\" ]";
    let (head_before, head_after) = PERSON_HEAD.split_once(allow).unwrap();
    assert!(
        text.starts_with(&format!("{head_before}{allow},\"deny\":[")),
        "{text}"
    );
    let rest = &text[text.find(head_after).expect("the rest of the head")..];
    assert!(rest.starts_with(head_after), "{text}");
    assert!(text.ends_with(PERSON_TAIL), "{text}");
    assert!(rest.contains(PERSON_MID), "{text}");
    let after = Json::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    for key in ["$schema", "zeta", "model"] {
        assert_eq!(after.get(key), before.get(key), "{key}");
    }
    let permissions = after.get("permissions").unwrap();
    assert_eq!(
        permissions.get("allow"),
        before.get("permissions").unwrap().get("allow")
    );
    assert_eq!(
        permissions.get("deny"),
        Some(&expected_deny(&exe(), &m.home))
    );
    let hooks = after.get("hooks").unwrap();
    let old_hooks = before.get("hooks").unwrap();
    assert_eq!(hooks.get("PreToolUse"), old_hooks.get("PreToolUse"));
    let session_start = hooks.get("SessionStart").and_then(Json::as_arr).unwrap();
    let exe = exe();
    assert_eq!(
        session_start,
        &[
            old_hooks
                .get("SessionStart")
                .and_then(Json::as_arr)
                .unwrap()[0]
                .clone(),
            claude_group(&exe, m.data_str(), CLAUDE[0]),
        ]
    );
    for entry in &CLAUDE[1..] {
        assert_eq!(
            hooks.get(entry.0),
            Some(&Json::Arr(vec![claude_group(&exe, m.data_str(), *entry)]))
        );
    }
    // And a second run changes nothing.
    let fixed = fingerprint(&m.settings());
    ok(&m.ctx(&["init", "--host", "claude"]), "second init");
    assert_eq!(fingerprint(&m.settings()), fixed);
}

#[test]
fn a_drifted_ctx_entry_is_reported_and_never_rewritten() {
    let m = Machine::new();
    fs::create_dir_all(m.settings().parent().unwrap()).unwrap();
    // An older installation's entry, in shell form.
    let old = r#"{"hooks":{"UserPromptSubmit":[{"matcher":"","hooks":[{"type":"command","command":"/usr/local/bin/ctx hook claude user-prompt-submit","timeout":30}]}]}}"#;
    fs::write(m.settings(), old).unwrap();
    let run = m.ctx(&["init", "--host", "claude"]);
    ok(&run, "init");
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("drifted") && l.contains("UserPromptSubmit")),
        "{}",
        run.stdout
    );
    let settings = read_json(&m.settings());
    let hooks = settings.get("hooks").unwrap();
    assert_eq!(
        hooks.get("UserPromptSubmit"),
        Json::parse(old)
            .unwrap()
            .get("hooks")
            .unwrap()
            .get("UserPromptSubmit")
    );
    assert_eq!(
        hooks.get("SessionEnd"),
        Some(&Json::Arr(vec![claude_group(
            &exe(),
            m.data_str(),
            CLAUDE[6]
        )]))
    );
    let (code, report) = doctor(&m);
    assert_eq!(code, 1);
    let claude = statuses(&report, "claude");
    assert!(claude.contains(&("UserPromptSubmit".into(), "drifted".into())));
    assert!(claude.contains(&("SessionStart".into(), "installed".into())));
}

#[test]
fn a_hooks_file_that_is_not_json_exits_2_and_is_left_untouched() {
    for host in ["claude", "codex"] {
        let m = Machine::new();
        let (file, dirs) = match host {
            "claude" => (
                m.settings(),
                [m.home.join(".claude/skills"), m.home.join(".claude/agents")],
            ),
            _ => (
                m.codex_hooks(),
                [m.home.join(".agents/skills"), m.codex_home.join("agents")],
            ),
        };
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        let broken = "{\n  \"hooks\": {,}\n}\n";
        fs::write(&file, broken).unwrap();
        let before = fingerprint(&file);
        let run = m.ctx(&["init", "--host", host]);
        assert_eq!(run.code, 2, "{host}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains(&file.display().to_string()),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("byte 14"), "{}", run.stderr);
        assert!(!run.stderr.contains("Usage:"), "{}", run.stderr);
        assert_eq!(fingerprint(&file), before);
        for dir in dirs {
            assert!(!dir.exists(), "{} was created", dir.display());
        }
        // Valid JSON of the wrong shape is refused the same way.
        fs::write(&file, "{\"hooks\": []}").unwrap();
        let run = m.ctx(&["init", "--host", host]);
        assert_eq!(run.code, 2, "{host}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains("`hooks` is an array"), "{}", run.stderr);
        assert_eq!(fs::read(&file).unwrap(), b"{\"hooks\": []}");
        // doctor reports the file and exits 1.
        let (code, report) = doctor(&m);
        assert_eq!(code, 1);
        let state = host_of(&report, host)
            .get("hooks_file")
            .unwrap()
            .get_str("state");
        assert_eq!(state, Some("invalid"));
    }
}

#[test]
fn init_codex_writes_shell_quoted_commands_that_run_from_a_path_with_spaces() {
    let m = Machine::with_data_dir_name("it's data");
    // A copy of the binary under a directory with a space (and the data directory's quote).
    let tools = m.home.join("my tools");
    fs::create_dir_all(&tools).unwrap();
    let copy = tools.join("ctx");
    // A hard link when the temporary directory shares the target's filesystem, else a copy.
    if fs::hard_link(ctx_binary(), &copy).is_err() {
        fs::copy(ctx_binary(), &copy).unwrap();
    }
    let run = m.ctx_at(&copy, &["init", "--host", "codex"]);
    ok(&run, "init");
    let canonical = fs::canonicalize(&copy).unwrap();
    let exe = canonical.to_str().unwrap();
    assert_eq!(
        read_json(&m.codex_hooks()),
        expected_codex(exe, m.data_str())
    );
    assert!(m.home.join(".agents/skills").is_dir());
    assert!(m.codex_home.join("agents").is_dir());
    assert!(run.stdout.contains("/hooks"), "{}", run.stdout);
    assert!(!m.settings().exists());

    // The registered command line runs through a shell as Codex runs it.
    let hooks = read_json(&m.codex_hooks());
    let command = hooks
        .get("hooks")
        .and_then(|h| h.get("SessionEnd"))
        .and_then(Json::as_arr)
        .and_then(|groups| groups[0].get("hooks"))
        .and_then(Json::as_arr)
        .and_then(|handlers| handlers[0].get_str("command"))
        .unwrap()
        .to_owned();
    let input = r#"{"session_id":"s-1","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","hook_event_name":"SessionEnd","reason":"other","model":"m","turn_id":"t","permission_mode":"default"}"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .envs(m.env())
        .env_remove("CTX_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        m.data.is_dir(),
        "the hook did not use the quoted data directory"
    );

    // Doctor (run by the same binary) sees them installed; trust is not recorded yet.
    let output = Command::new(&copy)
        .arg("--data-dir")
        .arg(&m.data)
        .args(["doctor", "--json"])
        .env_remove("CTX_DATA_DIR")
        .envs(m.env())
        .output()
        .unwrap();
    let report = Json::parse(String::from_utf8_lossy(&output.stdout).trim_end()).unwrap();
    assert_eq!(statuses(&report, "codex"), all(&CODEX, "installed"));
    let trust = host_of(&report, "codex").get("trust").unwrap();
    assert_eq!(trust.get_str("state"), Some("untrusted"));
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn doctor_reports_missing_then_installed_then_drifted_and_conflicting() {
    let m = Machine::new();
    let (code, report) = doctor(&m);
    assert_eq!(code, 1);
    assert_eq!(statuses(&report, "claude"), all(&CLAUDE, "missing"));
    assert_eq!(statuses(&report, "codex"), all(&CODEX, "missing"));
    assert_eq!(
        host_of(&report, "claude").get("registered"),
        Some(&Json::Bool(false))
    );
    let human = m.ctx(&["doctor"]);
    assert_eq!(human.code, 1);
    assert!(human.stdout.contains("ctx init --host"), "{}", human.stdout);

    ok(&m.ctx(&["init", "--host", "claude"]), "init");
    let (code, report) = doctor(&m);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report, "claude"), all(&CLAUDE, "installed"));
    let claude = host_of(&report, "claude");
    assert_eq!(claude.get("activations"), Some(&Json::Null));
    let directories = claude.get("directories").and_then(Json::as_arr).unwrap();
    assert!(
        directories
            .iter()
            .all(|d| d.get("exists") == Some(&Json::Bool(true)))
    );
    let human = m.ctx(&["doctor"]);
    assert_eq!(human.code, 0, "{}", human.stdout);
    assert!(human.stdout.contains("installed"), "{}", human.stdout);

    // The person edits ctx's SessionEnd timeout by hand: drifted.
    let text = fs::read_to_string(m.settings()).unwrap();
    let edited = text.replacen("\"timeout\": 5", "\"timeout\": 6", 1);
    assert_ne!(edited, text, "{text}");
    fs::write(m.settings(), &edited).unwrap();
    let (code, report) = doctor(&m);
    assert_eq!(code, 1);
    let claude = statuses(&report, "claude");
    assert!(
        claude.contains(&("SessionEnd".into(), "drifted".into())),
        "{claude:?}"
    );
    assert!(claude.contains(&("SessionStart".into(), "installed".into())));
    // init leaves the drifted entry alone.
    ok(&m.ctx(&["init", "--host", "claude"]), "init over drift");
    assert_eq!(fs::read_to_string(m.settings()).unwrap(), edited);

    // Another ctx binary claims SessionStart as well: conflicting.
    let settings = read_json(&m.settings());
    let mut start = settings
        .get("hooks")
        .and_then(|h| h.get("SessionStart"))
        .and_then(Json::as_arr)
        .unwrap()
        .to_vec();
    start.push(claude_group("/other/ctx", m.data_str(), CLAUDE[0]));
    let Json::Obj(mut root) = settings.clone() else {
        panic!()
    };
    let Some(Json::Obj(hooks)) = root.get_mut("hooks") else {
        panic!()
    };
    hooks.insert("SessionStart".into(), Json::Arr(start));
    fs::write(m.settings(), Json::Obj(root).to_cj()).unwrap();
    let (code, report) = doctor(&m);
    assert_eq!(code, 1);
    let claude = statuses(&report, "claude");
    assert!(
        claude.contains(&("SessionStart".into(), "conflicting".into())),
        "{claude:?}"
    );
}

#[test]
fn doctor_reads_codex_trust_records_only_as_far_as_they_are_documented() {
    let m = Machine::new();
    ok(&m.ctx(&["init", "--host", "codex"]), "init");
    let (code, report) = doctor(&m);
    assert_eq!(code, 1, "no trust record: untrusted");
    let codex = host_of(&report, "codex");
    assert_eq!(
        codex.get("trust").unwrap().get_str("state"),
        Some("untrusted")
    );
    // Claude is not registered, so it does not count against the result.
    assert_eq!(
        host_of(&report, "claude").get("registered"),
        Some(&Json::Bool(false))
    );
    fs::write(
        m.codex_home.join("config.toml"),
        "model = \"gpt-5\"\n[hooks.state.\"some-key\"]\ntrusted_hash = \"abc\"\n",
    )
    .unwrap();
    let (code, report) = doctor(&m);
    assert_eq!(code, 0, "{report}");
    let trust = host_of(&report, "codex").get("trust").unwrap();
    assert_eq!(trust.get_str("state"), Some("unknown"));
    assert!(trust.get_str("detail").unwrap().contains("/hooks"));
}

#[test]
fn concurrent_inits_register_each_hook_exactly_once() {
    let m = Machine::new();
    ctx_binary();
    let runs: Vec<CtxRun> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..6)
            .map(|i| {
                let host = if i % 2 == 0 { "claude" } else { "codex" };
                let m = &m;
                scope.spawn(move || m.ctx(&["init", "--host", host]))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for run in &runs {
        ok(run, "concurrent init");
    }
    let exe = exe();
    assert_eq!(
        read_json(&m.settings()),
        expected_claude(&exe, m.data_str(), &m.home)
    );
    assert_eq!(
        read_json(&m.codex_hooks()),
        expected_codex(&exe, m.data_str())
    );
    // Exactly one run per host wrote; the others found everything present.
    let writers = runs.iter().filter(|r| r.stdout.contains("wrote")).count();
    assert_eq!(writers, 2);
}

/// The warnings of a doctor report.
fn warnings(report: &Json) -> Vec<String> {
    report
        .get("warnings")
        .and_then(Json::as_arr)
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn doctor_warns_about_file_keys_and_a_missing_presence_verifier() {
    let m = Machine::new();
    ok(&m.ctx(&["init", "--host", "claude"]), "init");
    let (_, report) = doctor(&m);
    let found = warnings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("run `ctx key init`"), "{found:?}");

    // CI's plain file key: trusted, and named as readable by the agent.
    let key = m.home.join("ci.key");
    ok(
        &m.ctx(&["key", "init", "--file-key", "--key", key.to_str().unwrap()]),
        "file key",
    );
    let (_, report) = doctor(&m);
    let found = warnings(&report);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|w| w.contains("plain file key")),
        "{found:?}"
    );

    // The person's sealed key at their terminal: presence is there, the file key is still named.
    let init = super::person::person_key_init(&m.data, &m.env());
    assert_eq!(init.code, 0, "{init:?}");
    let (_, report) = doctor(&m);
    let found = warnings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("plain file key"), "{found:?}");
    let kinds: Vec<&str> = report
        .get("verifiers")
        .and_then(Json::as_arr)
        .unwrap()
        .iter()
        .filter_map(|v| v.get_str("kind"))
        .collect();
    assert_eq!(kinds, ["file-key", "sealed-key"]);
}
