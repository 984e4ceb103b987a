//! `ctx --journal <PostgreSQL>` (and `$CTX_JOURNAL_URL`), run as processes: the demo, the audit,
//! an export/import round trip through PostgreSQL and back to redb, several hosts' hook processes
//! appending to one database at once, and a wrong source.
//!
//! Each test works in its own database of the shared throwaway cluster
//! (`ctx_journal_pg::shared`). Without PostgreSQL's binaries each test prints a `skipped:` line
//! and passes, unless `CTX_REQUIRE_PG=1`, which makes it fail.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Instant;

use ctx_journal::files::{DATABASE_FILE, KEY_FILE};
use ctx_journal_pg::{available, gate, shared};
use ctx_model::Json;

use crate::support::{self, CtxRun, run_ctx, run_ctx_env};

/// A connection string for the new, empty database `name` of the shared cluster, or `None` when
/// the test is skipped (its `skipped:` line printed).
fn database(test: &str, name: &str) -> Option<String> {
    if !gate(test, available()).unwrap_or_else(|e| panic!("{e}")) {
        return None;
    }
    let server = shared().unwrap_or_else(|e| panic!("{e}"));
    Some(
        server
            .create_database(name)
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// `ctx --journal SOURCE args…` on `data`.
fn ctx_on(data: &Path, source: &str, args: &[&str], stdin: &str) -> CtxRun {
    let mut all = vec!["--journal", source];
    all.extend_from_slice(args);
    run_ctx(data, &all, stdin)
}

fn json_of(run: &CtxRun) -> Json {
    Json::parse(run.stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {run:?}"))
}

/// The report of `ctx audit --json`, after checking that it passed: every record verifies and
/// every projection equals its fresh fold.
fn audit_ok(data: &Path, source: &str) -> Json {
    let run = ctx_on(data, source, &["audit", "--json"], "");
    assert_eq!(run.code, 0, "{run:?}");
    let report = json_of(&run);
    assert_eq!(report.get("ok"), Some(&Json::Bool(true)), "{run:?}");
    let projections = report.get("projections").and_then(Json::as_arr).unwrap();
    assert!(!projections.is_empty(), "{run:?}");
    for p in projections {
        assert_eq!(p.get_str("status"), Some("equal"), "{}", p.to_cj());
    }
    report
}

#[test]
fn the_demo_runs_twice_on_postgresql_and_the_audit_names_the_storage() {
    let test = "cli::postgres::the_demo_runs_twice_on_postgresql_and_the_audit_names_the_storage";
    let Some(url) = database(test, "ctx_cli_demo") else {
        return;
    };
    let started = Instant::now();
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let first = ctx_on(&data, &url, &["demo"], "");
    assert_eq!(first.code, 0, "{first:?}");
    for expected in ["a new journal", "result: OK, everything verifies"] {
        assert!(first.stdout.contains(expected), "{expected:?}: {first:?}");
    }
    // The records are in PostgreSQL; the installation key stays in the data directory.
    let journal = data.join("journal");
    assert!(journal.join(KEY_FILE).is_file(), "{}", journal.display());
    assert!(!journal.join(DATABASE_FILE).exists(), "no redb file");

    let second = ctx_on(&data, &url, &["demo"], "");
    assert_eq!(second.code, 0, "{second:?}");
    for expected in [
        "reused the existing journal",
        "already ingested, unchanged",
        "result: OK, everything verifies",
    ] {
        assert!(second.stdout.contains(expected), "{expected:?}: {second:?}");
    }

    let text = ctx_on(&data, &url, &["audit"], "");
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.contains("result: OK"), "{text:?}");
    assert!(
        text.stdout
            .contains("storage      postgresql (checked by the server)"),
        "{text:?}"
    );
    let report = audit_ok(&data, &url);
    assert_eq!(report.get_str("schema"), Some("ctx.audit-report.v1"));
    assert_eq!(
        report.get_str("storage"),
        Some("postgresql (checked by the server)")
    );
    assert!(
        report
            .get("records")
            .and_then(Json::as_i64)
            .is_some_and(|n| n > 0),
        "{}",
        report.to_cj()
    );
    // The same through the environment variable instead of the option.
    let env = run_ctx_env(
        &data,
        &["audit", "--json"],
        "",
        &[("CTX_JOURNAL_URL", Path::new(&url))],
    );
    assert_eq!(env.code, 0, "{env:?}");
    assert_eq!(json_of(&env).get("records"), report.get("records"));
    eprintln!(
        "demo twice and audit on PostgreSQL: {:?}",
        started.elapsed()
    );
}

/// `ctx export` of `data` to the file `file`, whose text it returns.
fn export_to(data: &Path, source: &str, file: &Path) -> String {
    let run = ctx_on(
        data,
        source,
        &["export", "--output", file.to_str().unwrap()],
        "",
    );
    assert_eq!(run.code, 0, "{run:?}");
    std::fs::read_to_string(file).unwrap()
}

fn import_from(data: &Path, source: &str, file: &Path) -> CtxRun {
    ctx_on(
        data,
        source,
        &["import", "--input", file.to_str().unwrap()],
        "",
    )
}

#[test]
fn an_export_moves_to_postgresql_and_back_to_redb_byte_for_byte() {
    let test = "cli::postgres::an_export_moves_to_postgresql_and_back_to_redb_byte_for_byte";
    let Some(url) = database(test, "ctx_cli_round_trip") else {
        return;
    };
    let started = Instant::now();
    let dir = support::tempdir();
    let data = |name: &str| dir.path().join(name);
    let file = |name: &str| dir.path().join(format!("{name}.jsonl"));

    // A: the demo on redb, exported.
    let demo = ctx_on(&data("a"), "redb", &["demo"], "");
    assert_eq!(demo.code, 0, "{demo:?}");
    let a_text = export_to(&data("a"), "redb", &file("a"));
    let records = a_text.lines().count() - 1;
    assert!(records > 0, "{a_text}");

    // B: imported into PostgreSQL; its export is A's, byte for byte, and it audits clean.
    let run = import_from(&data("b"), &url, &file("a"));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .starts_with(&format!("imported {records} records")),
        "{run:?}"
    );
    assert!(!data("b").join("journal").join(DATABASE_FILE).exists());
    let b_export = ctx_on(&data("b"), &url, &["export"], "");
    assert_eq!(b_export.code, 0, "{b_export:?}");
    assert!(
        b_export.stdout == a_text,
        "the PostgreSQL export differs from the redb export it was imported from"
    );
    let report = audit_ok(&data("b"), &url);
    assert_eq!(report.get("records"), Some(&Json::from(records as u64)));
    std::fs::write(file("b"), &b_export.stdout).unwrap();

    // C: B's export imported into a fresh redb directory exports A's bytes again.
    let run = import_from(&data("c"), "redb", &file("b"));
    assert_eq!(run.code, 0, "{run:?}");
    let c_export = ctx_on(&data("c"), "redb", &["export"], "");
    assert_eq!(c_export.code, 0, "{c_export:?}");
    assert!(
        c_export.stdout == a_text,
        "the redb export after PostgreSQL differs from the original"
    );
    audit_ok(&data("c"), "redb");

    // An import into the non-empty PostgreSQL journal is refused, from B's directory (same key)
    // and from a fresh one (another key), and changes nothing.
    for target in ["b", "d"] {
        let again = import_from(&data(target), &url, &file("a"));
        assert!(
            again.code == 2 || again.code == 3,
            "{target}: exit 2 or 3: {again:?}"
        );
        assert!(
            again.stderr.starts_with("ctx: error: ") && again.stderr.trim_end().len() > 20,
            "{target}: a sentence: {again:?}"
        );
        eprintln!(
            "import into a non-empty PostgreSQL journal ({target}): exit {}: {}",
            again.code,
            again.stderr.lines().next().unwrap_or_default()
        );
    }
    let after = ctx_on(&data("b"), &url, &["export"], "");
    assert_eq!(after.code, 0, "{after:?}");
    assert!(
        after.stdout == a_text,
        "a refused import changed the journal"
    );
    audit_ok(&data("b"), &url);
    eprintln!(
        "redb -> PostgreSQL -> redb round trip of {records} records: {:?}",
        started.elapsed()
    );
}

/// The hook input Claude Code sends on UserPromptSubmit (as in `cli::hook`).
fn prompt_input(session: &str, cwd: &Path, prompt: &str) -> String {
    Json::object([
        ("cwd", Json::str(cwd.display().to_string())),
        ("hook_event_name", Json::str("UserPromptSubmit")),
        ("permission_mode", Json::str("default")),
        ("prompt", Json::str(prompt)),
        ("session_id", Json::str(session)),
        (
            "transcript_path",
            Json::str(format!("/tmp/transcripts/{session}.jsonl")),
        ),
    ])
    .to_string()
}

/// The hook input Claude Code sends on PostToolUse of an MCP tool (as in `cli::hook`).
fn tool_input(session: &str, cwd: &Path, tool_use_id: &str) -> String {
    Json::object([
        ("cwd", Json::str(cwd.display().to_string())),
        ("duration_ms", Json::Int(42)),
        ("hook_event_name", Json::str("PostToolUse")),
        ("permission_mode", Json::str("default")),
        ("session_id", Json::str(session)),
        (
            "tool_input",
            Json::object([("element", Json::str("Checkout"))]),
        ),
        ("tool_name", Json::str("mcp__playwright__browser_click")),
        ("tool_response", Json::object([("ok", Json::Bool(true))])),
        ("tool_use_id", Json::str(tool_use_id)),
        (
            "transcript_path",
            Json::str(format!("/tmp/transcripts/{session}.jsonl")),
        ),
    ])
    .to_string()
}

/// One host of the installation: its own data directory (its own home beside it) and project.
struct Host {
    data: PathBuf,
    project: PathBuf,
}

/// The hosts of one installation on database `url`: the first host's first command creates the
/// installation key, and every other host holds a copy of it (as every host of one installation
/// does). Nothing else is written; each host ingests the sample catalog on its first prompt.
fn installation(root: &Path, url: &str, hosts: usize) -> Vec<Host> {
    let hosts: Vec<Host> = (0..hosts)
        .map(|i| {
            let project = root.join(format!("project-{i}"));
            std::fs::create_dir_all(&project).unwrap();
            Host {
                data: root.join(format!("host-{i}")),
                project,
            }
        })
        .collect();
    let first = ctx_on(&hosts[0].data, url, &["inspect", "--json"], "");
    assert_eq!(first.code, 0, "{first:?}");
    let key = hosts[0].data.join("journal").join(KEY_FILE);
    assert!(key.is_file(), "{first:?}");
    for host in &hosts[1..] {
        let journal = host.data.join("journal");
        std::fs::create_dir_all(&journal).unwrap();
        std::fs::copy(&key, journal.join(KEY_FILE)).unwrap();
    }
    hosts
}

/// One hook call of one host: `ctx hook claude EVENT` with `input`.
struct Call<'a> {
    host: &'a Host,
    event: &'static str,
    input: String,
}

impl<'a> Call<'a> {
    fn prompt(host: &'a Host, session: &str, prompt: &str) -> Call<'a> {
        let input = prompt_input(session, &host.project, prompt);
        Call {
            host,
            event: "user-prompt-submit",
            input,
        }
    }

    fn tool(host: &'a Host, session: &str, tool_use_id: &str) -> Call<'a> {
        let input = tool_input(session, &host.project, tool_use_id);
        Call {
            host,
            event: "tool-outcome",
            input,
        }
    }
}

impl Call<'_> {
    /// `ctx hook claude EVENT` on the call's host, with `$CTX_JOURNAL_URL`.
    fn run(&self, url: &str) -> CtxRun {
        run_ctx_env(
            &self.host.data,
            &["hook", "claude", self.event],
            &self.input,
            &[("CTX_JOURNAL_URL", Path::new(url))],
        )
    }

    /// `None` when `run` of this call succeeded: exit 0, nothing on standard error, context for
    /// a prompt and no reply for a tool outcome; else the process's output.
    fn failure(&self, run: &CtxRun) -> Option<String> {
        let answered = match self.event {
            "user-prompt-submit" => Json::parse(run.stdout.trim_end())
                .is_ok_and(|reply| reply.get("hookSpecificOutput").is_some()),
            _ => run.stdout.is_empty(),
        };
        if run.code == 0 && run.stderr.is_empty() && answered {
            return None;
        }
        let session = Json::parse(&self.input)
            .ok()
            .and_then(|i| i.get_str("session_id").map(str::to_owned));
        Some(format!(
            "{} on {} (session {session:?}): exit {}\nstdout: {}\nstderr: {}",
            self.event,
            self.host.data.display(),
            run.code,
            run.stdout.trim_end(),
            run.stderr.trim_end()
        ))
    }
}

fn assert_no_failures(failed: &[String], total: usize) {
    assert!(
        failed.is_empty(),
        "{} of {total} concurrent hook processes failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Runs each sequence of `calls` in its own thread, all sequences at once, and checks that every
/// call succeeded ([`Call::failure`]).
fn hooks_at_once(url: &str, calls: &[Vec<Call<'_>>]) {
    let failed: Vec<String> = thread::scope(|scope| {
        let handles: Vec<_> = calls
            .iter()
            .map(|sequence| {
                scope.spawn(move || {
                    sequence
                        .iter()
                        .filter_map(|call| call.failure(&call.run(url)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_no_failures(&failed, calls.iter().map(Vec::len).sum());
}

/// The `(event, session id)` of every hook record (`ctx.host-session.v1`) of an export, sorted.
fn session_events(export: &str) -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = export
        .lines()
        .filter_map(|line| Json::parse(line).ok())
        .filter(|line| line.get_str("kind") == Some("ctx.host-session.v1"))
        .filter_map(|line| {
            let hex = line.get_str("payload")?.to_owned();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            let payload = Json::parse(std::str::from_utf8(&bytes).ok()?).ok()?;
            Some((
                payload.get_str("event")?.to_owned(),
                payload.get_str("session_id")?.to_owned(),
            ))
        })
        .collect();
    events.sort();
    events
}

/// Audits the installation from `auditor` (records verify, projections equal a fresh fold),
/// exports it from `exporter`, and returns the export's hook records and record count.
fn audited_events(url: &str, auditor: &Host, exporter: &Host) -> (Vec<(String, String)>, usize) {
    let report = audit_ok(&auditor.data, url);
    let export = ctx_on(&exporter.data, url, &["export"], "");
    assert_eq!(export.code, 0, "{export:?}");
    let records = export.stdout.lines().count() - 1;
    assert_eq!(report.get("records"), Some(&Json::from(records as u64)));
    (session_events(&export.stdout), records)
}

fn expected_events(events: &[(&str, String)]) -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = events
        .iter()
        .map(|(event, session)| ((*event).to_owned(), format!("claude:{session}")))
        .collect();
    events.sort();
    events
}

#[test]
fn hook_processes_of_several_hosts_append_to_one_database_at_once() {
    const HOSTS: usize = 6;
    let test = "cli::postgres::hook_processes_of_several_hosts_append_to_one_database_at_once";
    let Some(url) = database(test, "ctx_cli_hosts") else {
        return;
    };
    support::ctx_binary();
    let started = Instant::now();
    let dir = support::tempdir();
    let hosts = installation(dir.path(), &url, HOSTS);

    // One session per host, all at once.
    let own: Vec<Vec<Call<'_>>> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            vec![Call::prompt(
                host,
                &format!("own-{i}"),
                "add Playwright e2e tests for the checkout page",
            )]
        })
        .collect();
    hooks_at_once(&url, &own);
    let phase_one = started.elapsed();

    // Then one session, a prompt from every host at once.
    let prompts = [
        "write rust tests with cargo",
        "add Playwright e2e tests for checkout",
        "write terraform for the new infrastructure",
        "write go tests",
        "review the pull request",
        "add a GitHub Actions workflow",
    ];
    let same: Vec<Vec<Call<'_>>> = hosts
        .iter()
        .zip(prompts)
        .map(|(host, prompt)| vec![Call::prompt(host, "shared", prompt)])
        .collect();
    hooks_at_once(&url, &same);
    let phase_two = started.elapsed();

    // Any host audits the whole installation clean, and every prompt is recorded once.
    let (events, records) = audited_events(&url, &hosts[HOSTS / 2], &hosts[HOSTS - 1]);
    let mut expected: Vec<(&str, String)> =
        (0..HOSTS).map(|i| ("prompt", format!("own-{i}"))).collect();
    expected.extend((0..HOSTS).map(|_| ("prompt", "shared".to_owned())));
    assert_eq!(events, expected_events(&expected));
    eprintln!(
        "{HOSTS} hosts on one database: own sessions {phase_one:?}, one session {:?}, audit and \
         export {:?}; {records} records",
        phase_two - phase_one,
        started.elapsed() - phase_two
    );
}

#[test]
fn tool_outcomes_of_one_host_are_recorded_while_other_hosts_plan_prompts() {
    const HOSTS: usize = 3;
    /// A bound on each host's tool outcomes, should the prompts hang.
    const TOOLS_MAX: usize = 60;
    let test =
        "cli::postgres::tool_outcomes_of_one_host_are_recorded_while_other_hosts_plan_prompts";
    let Some(url) = database(test, "ctx_cli_mixed") else {
        return;
    };
    support::ctx_binary();
    let started = Instant::now();
    let dir = support::tempdir();
    let hosts = installation(dir.path(), &url, HOSTS);
    // Each host plans two prompts of its session while it records tool outcomes of another,
    // one after another until every prompt is done: a PostToolUse hook appends without the
    // projections a prompt's process has attached, in the middle of that process's appends.
    let prompting = AtomicUsize::new(HOSTS);
    let (failed, tools): (Vec<String>, Vec<usize>) = thread::scope(|scope| {
        let prompting = &prompting;
        let url = url.as_str();
        let prompts: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                scope.spawn(move || {
                    let session = format!("plan-{i}");
                    let failed: Vec<String> = ["write rust tests with cargo", "write go tests"]
                        .iter()
                        .filter_map(|prompt| {
                            let call = Call::prompt(host, &session, prompt);
                            call.failure(&call.run(url))
                        })
                        .collect();
                    prompting.fetch_sub(1, Ordering::SeqCst);
                    failed
                })
            })
            .collect();
        let tools: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                scope.spawn(move || {
                    let session = format!("tools-{i}");
                    let mut failed = Vec::new();
                    let mut calls = 0;
                    while prompting.load(Ordering::SeqCst) > 0 && calls < TOOLS_MAX {
                        let call = Call::tool(host, &session, &format!("toolu_{calls}"));
                        failed.extend(call.failure(&call.run(url)));
                        calls += 1;
                    }
                    (failed, calls)
                })
            })
            .collect();
        let mut failed: Vec<String> = prompts
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let mut counts = Vec::new();
        for handle in tools {
            let (f, calls) = handle.join().unwrap();
            failed.extend(f);
            counts.push(calls);
        }
        (failed, counts)
    });
    assert_no_failures(&failed, HOSTS * 2 + tools.iter().sum::<usize>());
    let hooks = started.elapsed();
    let (events, records) = audited_events(&url, &hosts[0], &hosts[HOSTS - 1]);
    let mut expected: Vec<(&str, String)> = Vec::new();
    for (i, calls) in tools.iter().enumerate() {
        expected.extend((0..2).map(|_| ("prompt", format!("plan-{i}"))));
        expected.extend((0..*calls).map(|_| ("tool-outcome", format!("tools-{i}"))));
    }
    assert_eq!(events, expected_events(&expected));
    eprintln!(
        "{HOSTS} hosts, prompts and {tools:?} tool outcomes at once: {hooks:?}, then audit and \
         export {:?}; {records} records",
        started.elapsed() - hooks
    );
}

#[test]
fn a_wrong_journal_source_is_a_usage_error_that_keeps_the_password() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let password = "hunter2";
    let source = format!("mysql://ctx:{password}@db.example/ctx");
    let option = ctx_on(&data, &source, &["audit"], "");
    let env = run_ctx_env(
        &data,
        &["audit"],
        "",
        &[("CTX_JOURNAL_URL", Path::new(&source))],
    );
    for (how, run) in [("--journal", &option), ("CTX_JOURNAL_URL", &env)] {
        assert_eq!(run.code, 2, "{how}: {run:?}");
        assert!(
            run.stderr.starts_with("ctx: error: journal source"),
            "{how}: {run:?}"
        );
        assert!(
            !run.stderr.contains(password) && !run.stdout.contains(password),
            "{how}: the message shows the password: {run:?}"
        );
    }
    assert!(!data.exists(), "nothing was created");
}
