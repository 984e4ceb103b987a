//! `ctx-bench hook-latency`: the cold-start wall time of `ctx hook claude user-prompt-submit`, the
//! process Claude Code starts for every prompt the person submits, on a warm journal.
//!
//! Each measured run is one fresh process, timed from spawn to exit (stdin written, stdout and
//! stderr read to the end), as the host experiences it. The same runs go to two data directories:
//! one on a tmpfs (`/dev/shm`), where fsync costs next to nothing — the figure *excluding fsync* —
//! and one on the normal disk — the figure *including fsync*. `ctx --version`, which touches no
//! data directory, is the process-spawn floor. The three are interleaved run by run, so a slow
//! spell of a shared machine hits all of them rather than one.
//!
//! Targets (the issue): p50 under 20 ms excluding fsync, under 50 ms including it.
//!
//! With a PostgreSQL journal (`--postgres`, which starts a throwaway cluster with the
//! `ctx_journal_pg` harness or uses the server at `$CTX_PG_URL`, or `--journal URL` naming an empty
//! database) a fourth case runs in the same interleaving: the same hook runs with
//! `CTX_JOURNAL_URL` set, the data directory (installation key, catalog) on the disk, the records
//! in PostgreSQL. The report then gives its p50 and p90 over those of the redb case on the disk
//! (item 7b of the PostgreSQL backend: end-to-end `prepare` latency on PostgreSQL vs redb).
//!
//! ```text
//! cargo run --release -p ctx-benches --bin ctx-bench -- hook-latency --postgres --runs 40
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::BenchResult;
use crate::measure::Sample;

/// Measured runs per case when neither `--runs` nor [`RUNS_ENV`] says otherwise.
pub const DEFAULT_RUNS: usize = 50;
/// Measured runs per case of the smoke mode (`--test`): enough to prove the harness works.
pub const SMOKE_RUNS: usize = 2;
/// Environment variable naming the number of measured runs per case.
pub const RUNS_ENV: &str = "CTX_BENCH_HOOK_RUNS";
/// Target p50 of a hook run on a tmpfs (excluding fsync), in milliseconds.
pub const TARGET_P50_EXCLUDING_FSYNC_MS: f64 = 20.0;
/// Target p50 of a hook run on the normal disk (including fsync), in milliseconds.
pub const TARGET_P50_INCLUDING_FSYNC_MS: f64 = 50.0;
/// Every this many runs a new session starts; the runs between are follow-up prompts of the
/// session (the common case: a person keeps typing in one session).
pub const PROMPTS_PER_SESSION: usize = 4;

/// Prompts of the kind a person types; each run appends its number so that no two runs send the
/// same hook input (ctx records a repeated input once, which would measure a shortcut).
pub(crate) const PROMPTS: &[&str] = &[
    "add Playwright e2e tests for checkout",
    "write terraform for the new infrastructure",
    "why does cargo clippy fail on the journal crate",
    "summarize the open pull request and its risks",
    "refactor the session store to use typed errors",
    "the pytest suite is flaky on CI, find out why",
    "commit the current work with a good message",
    "add a Kubernetes readiness probe to the api deployment",
];

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `ctx` binary.
    pub ctx: PathBuf,
    /// Measured runs per case.
    pub runs: usize,
    /// Base directory of the including-fsync case (a disk).
    pub disk_dir: PathBuf,
    /// Base directory of the excluding-fsync case (a tmpfs); `None` skips that case.
    pub tmpfs_dir: Option<PathBuf>,
    /// A PostgreSQL journal (`CTX_JOURNAL_URL`, naming an empty database) for a fourth case;
    /// its data directory is under `disk_dir`.
    pub journal_url: Option<String>,
}

impl Config {
    /// `/dev/shm` when it is a directory (Linux), the usual tmpfs.
    pub fn default_tmpfs_dir() -> Option<PathBuf> {
        let shm = PathBuf::from("/dev/shm");
        shm.is_dir().then_some(shm)
    }

    /// Runs per case: `--runs` if given, else [`RUNS_ENV`], else [`DEFAULT_RUNS`].
    pub fn runs_from(arg: Option<usize>) -> BenchResult<usize> {
        if let Some(n) = arg {
            return Ok(n);
        }
        match std::env::var(RUNS_ENV) {
            Ok(text) => text
                .parse()
                .map_err(|_| format!("{RUNS_ENV}={text:?} is not a number of runs").into()),
            Err(_) => Ok(DEFAULT_RUNS),
        }
    }
}

/// One measured case: hook runs against one data directory.
#[derive(Debug, Clone)]
pub struct Case {
    /// Stable JSON key (`excluding_fsync`, `including_fsync`).
    pub key: &'static str,
    pub label: &'static str,
    /// The base directory the case's data directory, HOME and project live under.
    pub dir: PathBuf,
    /// The file system type of `dir` (from /proc/mounts), or `unknown`.
    pub fs_type: String,
    pub target_p50_ms: f64,
    /// Every run.
    pub all: Sample,
    /// Runs that were the first prompt of a session.
    pub new_session: Sample,
    /// Follow-up prompts of a session.
    pub same_session: Sample,
    /// Runs whose standard output held a JSON object (the rest printed nothing).
    pub replies: usize,
    /// Each distinct `systemMessage` (64-hex digests shown as `<digest>`) with how many runs
    /// printed it, most frequent first. ctx reports its failures this way, with exit 0, so they
    /// are counted rather than hidden in a latency figure: a fast run may be a failed one.
    pub system_messages: Vec<(String, usize)>,
}

/// Everything one `hook-latency` run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub ctx: PathBuf,
    /// `ctx --version`'s output.
    pub ctx_version: String,
    pub runs: usize,
    /// `ctx --version`: the spawn floor.
    pub floor: Sample,
    pub cases: Vec<Case>,
    /// Caveats: a missing tmpfs, a "disk" that is a tmpfs.
    pub notes: Vec<String>,
}

/// Key of the PostgreSQL case.
pub const POSTGRES_CASE: &str = "postgres";
/// Key of the redb-on-disk case.
pub const DISK_CASE: &str = "including_fsync";

impl Report {
    /// The PostgreSQL case's p50 and p90 over the redb disk case's, when both ran.
    pub fn postgres_over_redb(&self) -> Option<(f64, f64)> {
        let find = |key: &str| self.cases.iter().find(|c| c.key == key);
        let (pg, redb) = (find(POSTGRES_CASE)?, find(DISK_CASE)?);
        let at = |c: &Case, p: f64| c.all.percentile_us(p);
        Some((
            at(pg, 50.0)? / at(redb, 50.0)?,
            at(pg, 90.0)? / at(redb, 90.0)?,
        ))
    }
}

fn ms(us: Option<f64>) -> Option<f64> {
    us.map(|v| v / 1000.0)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn percentiles(s: &Sample) -> [Option<f64>; 4] {
    [
        ms(s.percentile_us(50.0)),
        ms(s.percentile_us(90.0)),
        ms(s.percentile_us(99.0)),
        ms(s.percentile_us(100.0)),
    ]
}

fn sample_json(s: &Sample) -> Value {
    let [p50, p90, p99, max] = percentiles(s);
    json!({
        "runs": s.latencies.len(),
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": max,
        "min_ms": ms(s.percentile_us(0.0)),
        "wall_us": s.latencies.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
    })
}

impl Report {
    /// The table for people.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "hook latency: `{}` ({}), {} runs per case, wall time spawn -> exit\n\n\
             | measurement | directory | runs | p50 ms | p90 ms | p99 ms | max ms | target |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |\n",
            self.ctx.display(),
            self.ctx_version,
            self.runs
        );
        let row = |out: &mut String, label: &str, dir: &str, s: &Sample, target: &str| {
            let [p50, p90, p99, max] = percentiles(s);
            out.push_str(&format!(
                "| {label} | {dir} | {} | {} | {} | {} | {} | {target} |\n",
                s.latencies.len(),
                fmt_ms(p50),
                fmt_ms(p90),
                fmt_ms(p99),
                fmt_ms(max)
            ));
        };
        row(
            &mut out,
            "`ctx --version` (spawn floor)",
            "-",
            &self.floor,
            "-",
        );
        for case in &self.cases {
            let dir = format!("{} ({})", case.dir.display(), case.fs_type);
            let target = match ms(case.all.percentile_us(50.0)) {
                Some(p50) if p50 < case.target_p50_ms => {
                    format!("p50 < {} ms: met", case.target_p50_ms)
                }
                Some(_) => format!("p50 < {} ms: MISSED", case.target_p50_ms),
                None => "-".to_owned(),
            };
            row(&mut out, case.label, &dir, &case.all, &target);
            row(
                &mut out,
                "  first prompt of a session",
                "",
                &case.new_session,
                "",
            );
            row(&mut out, "  follow-up prompt", "", &case.same_session, "");
        }
        let floor = ms(self.floor.percentile_us(50.0));
        for case in &self.cases {
            if let (Some(p50), Some(floor)) = (ms(case.all.percentile_us(50.0)), floor) {
                out.push_str(&format!(
                    "\n{}: p50 {:.2} ms above the spawn floor; {} of {} runs replied with JSON",
                    case.label,
                    p50 - floor,
                    case.replies,
                    case.all.latencies.len()
                ));
            }
            for (message, count) in &case.system_messages {
                out.push_str(&format!("\n  {count} x systemMessage: {message}"));
            }
        }
        if let Some((p50, p90)) = self.postgres_over_redb() {
            out.push_str(&format!(
                "\nPostgreSQL journal ÷ redb journal (both data dirs on the disk, same runs \
                 interleaved): p50 {p50:.2}x, p90 {p90:.2}x"
            ));
        }
        for note in &self.notes {
            out.push_str(&format!("\nnote: {note}"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "schema": "ctx.bench-hook-latency-v1",
            "ctx": self.ctx.display().to_string(),
            "ctx_version": self.ctx_version,
            "runs": self.runs,
            "prompts_per_session": PROMPTS_PER_SESSION,
            "floor_version": sample_json(&self.floor),
            "cases": self.cases.iter().map(|c| json!({
                "key": c.key,
                "label": c.label,
                "dir": c.dir.display().to_string(),
                "fs_type": c.fs_type,
                "target_p50_ms": c.target_p50_ms,
                "all": sample_json(&c.all),
                "new_session": sample_json(&c.new_session),
                "same_session": sample_json(&c.same_session),
                "replies": c.replies,
                "system_messages": c.system_messages.iter()
                    .map(|(m, n)| json!({"message": m, "runs": n})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "postgres_over_redb": self.postgres_over_redb()
                .map(|(p50, p90)| json!({"p50": p50, "p90": p90})),
            "notes": self.notes,
        })
    }
}

/// The file system type of the mount holding `path`: the longest mount point of /proc/mounts that
/// is a prefix of the canonical path (the last such line wins, as the kernel stacks mounts).
pub fn fs_type(path: &Path) -> String {
    let Ok(path) = std::fs::canonicalize(path) else {
        return "unknown".to_owned();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".to_owned();
    };
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (Some(_), Some(point), Some(kind)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // /proc/mounts escapes space, tab, newline and backslash as octal.
        let point = point
            .replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(len, _)| point.len() >= *len) {
            best = Some((point.len(), kind.to_owned()));
        }
    }
    best.map_or_else(|| "unknown".to_owned(), |(_, kind)| kind)
}

fn is_tmpfs(fs_type: &str) -> bool {
    matches!(fs_type, "tmpfs" | "ramfs")
}

/// `message` with every run of 64 hex digits replaced by `<digest>`, so that messages differing
/// only in a challenge digest count as one.
pub(crate) fn without_digests(message: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in message.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        out.push_str(if run.len() == 64 { "<digest>" } else { &run });
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// Runs `command` with `stdin`, timed from spawn to exit.
pub(crate) fn timed(command: &mut Command, stdin: &[u8]) -> BenchResult<(Duration, Output)> {
    let start = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        // The input fits the pipe buffer, so this never waits for the child; a child that exits
        // without reading (a stub) closes the pipe, which is not a failure of the run.
        match input.write_all(stdin) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
            _ => {}
        }
    }
    let output = child.wait_with_output()?;
    Ok((start.elapsed(), output))
}

pub(crate) fn check_exit(what: &str, output: &Output) -> BenchResult<()> {
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )
    .into())
}

/// One case's private world: a data directory, a HOME and a project directory the hook's `cwd`
/// names, all under one temp dir (removed on drop).
pub(crate) struct World {
    _dir: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) project: PathBuf,
    pub(crate) data: PathBuf,
    /// `CTX_JOURNAL_URL` of every command, if any.
    journal_url: Option<String>,
}

impl World {
    pub(crate) fn new(base: &Path, journal_url: Option<String>) -> BenchResult<World> {
        let dir = tempfile::Builder::new()
            .prefix("ctx-bench-hook-")
            .tempdir_in(base)?;
        let root = std::fs::canonicalize(dir.path())?;
        let (home, project, data) = (root.join("home"), root.join("project"), root.join("data"));
        std::fs::create_dir_all(&home)?;
        std::fs::create_dir_all(project.join(".claude"))?;
        std::fs::write(project.join("README.md"), "# checkout service\n")?;
        Ok(World {
            _dir: dir,
            home,
            project,
            data,
            journal_url,
        })
    }

    /// Persists the world's directory instead of removing it on drop; returns its path.
    pub(crate) fn keep(self) -> PathBuf {
        self._dir.keep()
    }

    /// `ctx --data-dir <data> <args>` with only PATH from this process's environment (and
    /// `CTX_JOURNAL_URL` when the world has one): the user's own CTX_DATA_DIR, XDG dirs or Claude
    /// settings must not leak into the measurement.
    pub(crate) fn ctx(&self, ctx: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(ctx);
        command
            .env_clear()
            .env("HOME", &self.home)
            .env("CLAUDE_PROJECT_DIR", &self.project)
            .current_dir(&self.project)
            .arg("--data-dir")
            .arg(&self.data)
            .args(args);
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        if let Some(url) = &self.journal_url {
            command.env(JOURNAL_URL_ENV, url);
        }
        command
    }

    /// Claude Code's UserPromptSubmit input for a session and prompt; the transcript file exists,
    /// as it does under the host.
    pub(crate) fn hook_input(&self, session: &str, prompt: &str) -> BenchResult<Vec<u8>> {
        let transcript = self.home.join(format!("{session}.jsonl"));
        if !transcript.exists() {
            std::fs::write(&transcript, "")?;
        }
        Ok(json!({
            "session_id": session,
            "transcript_path": transcript.display().to_string(),
            "cwd": self.project.display().to_string(),
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        })
        .to_string()
        .into_bytes())
    }
}

const HOOK_ARGS: &[&str] = &["hook", "claude", "user-prompt-submit"];
/// The variable `ctx` reads its journal backend from.
pub const JOURNAL_URL_ENV: &str = "CTX_JOURNAL_URL";

/// One hook run; checks exit 0 and that standard output is empty or one JSON object.
pub(crate) fn hook_run(
    ctx: &Path,
    world: &World,
    session: &str,
    prompt: &str,
) -> BenchResult<(Duration, Option<Value>)> {
    let input = world.hook_input(session, prompt)?;
    let (wall, output) = timed(&mut world.ctx(ctx, HOOK_ARGS), &input)?;
    check_exit("ctx hook claude user-prompt-submit", &output)?;
    let stdout = String::from_utf8(output.stdout)?;
    let reply = match stdout.trim() {
        "" => None,
        text => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => Some(value),
            _ => {
                return Err(format!(
                    "the hook printed something other than one JSON object: {text:?}"
                )
                .into());
            }
        },
    };
    Ok((wall, reply))
}

/// What [`session_growth`] measured: the wall time of the first and of the last prompt of each
/// of several long sessions of one data directory.
#[derive(Debug, Clone)]
pub struct SessionGrowth {
    pub prompts_per_session: usize,
    pub first: Sample,
    pub last: Sample,
}

impl SessionGrowth {
    /// The last prompt's p50 over the first's (the issue's goal: at most 1.2).
    pub fn ratio(&self) -> Option<f64> {
        Some(self.last.percentile_us(50.0)? / self.first.percentile_us(50.0)?)
    }

    pub fn markdown(&self) -> String {
        format!(
            "session growth: {} sessions of {} prompts; prompt 1 p50 {} ms, prompt {} p50 {} ms, \
             ratio {}\n",
            self.first.latencies.len(),
            self.prompts_per_session,
            fmt_ms(ms(self.first.percentile_us(50.0))),
            self.prompts_per_session,
            fmt_ms(ms(self.last.percentile_us(50.0))),
            self.ratio()
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
        )
    }
}

/// Runs `sessions` sessions of `prompts` prompts each, one after the other, against one warm
/// data directory under `base`, nobody deciding the consents they ask for, and keeps the wall time
/// of each session's first and last prompt: whether a prompt's cost grows with the session's
/// earlier prompts (spec/cli.md §7.3). The prompts cycle through [`PROMPTS`], numbered.
pub fn session_growth(
    ctx: &Path,
    base: &Path,
    prompts: usize,
    sessions: usize,
) -> BenchResult<SessionGrowth> {
    if prompts < 2 || sessions == 0 {
        return Err("session growth needs at least 2 prompts and 1 session".into());
    }
    let ctx = std::fs::canonicalize(ctx)?;
    let world = World::new(base, None)?;
    // The data directory's first use (catalog ingest, policy) is not a session's first prompt.
    hook_run(&ctx, &world, "warm-up", PROMPTS[0])?;
    let mut growth = SessionGrowth {
        prompts_per_session: prompts,
        first: Sample::default(),
        last: Sample::default(),
    };
    for s in 0..sessions {
        let session = format!("long-{s}");
        for i in 0..prompts {
            let prompt = format!("{} {s}-{i}", PROMPTS[i % PROMPTS.len()]);
            let (wall, _) = hook_run(&ctx, &world, &session, &prompt)?;
            if i == 0 {
                growth.first.latencies.push(wall);
            } else if i + 1 == prompts {
                growth.last.latencies.push(wall);
            }
        }
    }
    Ok(growth)
}

/// Measures as `config` says.
pub fn run(config: &Config) -> BenchResult<Report> {
    if config.runs == 0 {
        return Err("at least one run per case is needed".into());
    }
    let ctx = std::fs::canonicalize(&config.ctx)
        .map_err(|e| format!("the ctx binary {}: {e}", config.ctx.display()))?;
    let mut notes = Vec::new();

    // The floor: the same binary, no data directory, no input.
    let version = || -> BenchResult<(Duration, Output)> {
        let mut command = Command::new(&ctx);
        command.env_clear().arg("--version");
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        let (wall, output) = timed(&mut command, b"")?;
        check_exit("ctx --version", &output)?;
        Ok((wall, output))
    };

    let mut worlds: Vec<(&'static str, &'static str, PathBuf, f64, World)> = Vec::new();
    match &config.tmpfs_dir {
        Some(dir) => {
            let kind = fs_type(dir);
            if !is_tmpfs(&kind) {
                notes.push(format!(
                    "{} is on {kind}, not a tmpfs: the \"excluding fsync\" figures include it",
                    dir.display()
                ));
            }
            worlds.push((
                "excluding_fsync",
                "hook, excluding fsync (tmpfs)",
                dir.clone(),
                TARGET_P50_EXCLUDING_FSYNC_MS,
                World::new(dir, None)?,
            ));
        }
        None => notes.push(
            "no tmpfs (/dev/shm does not exist here): the excluding-fsync case was not measured; \
             name one with --tmpfs-dir"
                .to_owned(),
        ),
    }
    let disk_kind = fs_type(&config.disk_dir);
    if is_tmpfs(&disk_kind) {
        notes.push(format!(
            "{} is a {disk_kind}: the \"including fsync\" figures exclude it; name a disk with \
             --disk-dir",
            config.disk_dir.display()
        ));
    }
    worlds.push((
        DISK_CASE,
        "hook, including fsync (disk)",
        config.disk_dir.clone(),
        TARGET_P50_INCLUDING_FSYNC_MS,
        World::new(&config.disk_dir, None)?,
    ));
    if let Some(url) = &config.journal_url {
        worlds.push((
            POSTGRES_CASE,
            "hook, PostgreSQL journal (data dir on disk)",
            config.disk_dir.clone(),
            TARGET_P50_INCLUDING_FSYNC_MS,
            World::new(&config.disk_dir, Some(url.clone()))?,
        ));
    }

    // A first spawn also pulls the binary into the page cache.
    let (_, first) = version()?;
    let ctx_version = String::from_utf8_lossy(&first.stdout).trim().to_owned();

    // Warm each journal: the catalog ingested, then one hook call (the journal file exists, its
    // tables are created, the catalog is cached by the OS).
    for (_, _, _, _, world) in &worlds {
        let (_, output) = timed(&mut world.ctx(&ctx, &["catalog", "ingest"]), b"")?;
        check_exit("ctx catalog ingest", &output)?;
        hook_run(&ctx, world, "warm-up", "warm the journal")?;
    }

    // What the PostgreSQL case's runs cost the server, from pg_stat_database: sessions
    // (connections), commits and rollbacks, records.
    let pg_before = match &config.journal_url {
        Some(url) => Some(pg_counters(url)?),
        None => None,
    };
    let mut floor = Sample::default();
    let mut cases: Vec<Case> = worlds
        .iter()
        .map(|(key, label, dir, target, _)| Case {
            key,
            label,
            dir: dir.clone(),
            fs_type: fs_type(dir),
            target_p50_ms: *target,
            all: Sample::default(),
            new_session: Sample::default(),
            same_session: Sample::default(),
            replies: 0,
            system_messages: Vec::new(),
        })
        .collect();
    for i in 0..config.runs {
        let (wall, _) = version()?;
        floor.latencies.push(wall);
        let session = format!("bench-session-{}", i / PROMPTS_PER_SESSION);
        let prompt = format!("{} (run {i})", PROMPTS[i % PROMPTS.len()]);
        for ((_, _, _, _, world), case) in worlds.iter().zip(cases.iter_mut()) {
            let (wall, reply) = hook_run(&ctx, world, &session, &prompt)?;
            case.all.latencies.push(wall);
            if i % PROMPTS_PER_SESSION == 0 {
                case.new_session.latencies.push(wall);
            } else {
                case.same_session.latencies.push(wall);
            }
            if let Some(reply) = reply {
                case.replies += 1;
                if let Some(message) = reply.get("systemMessage").and_then(Value::as_str) {
                    let message = without_digests(message);
                    match case.system_messages.iter_mut().find(|(m, _)| *m == message) {
                        Some((_, count)) => *count += 1,
                        None => case.system_messages.push((message, 1)),
                    }
                }
            }
        }
    }
    for case in &mut cases {
        case.system_messages
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    // The PostgreSQL case must really have used PostgreSQL: records there, no redb file.
    if let Some(url) = &config.journal_url {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let records: i64 = client
            .query_one("SELECT count(*) FROM ctx_records", &[])?
            .try_get(0)?;
        let redb_files = worlds
            .iter()
            .filter(|(key, ..)| *key == POSTGRES_CASE)
            .filter(|(.., world)| world.data.join(ctx_journal::DATABASE_FILE).exists())
            .count();
        if records == 0 || redb_files > 0 {
            return Err(format!(
                "the PostgreSQL case did not use PostgreSQL ({records} records in ctx_records, \
                 {redb_files} redb files in its data directory)"
            )
            .into());
        }
        notes.push(format!(
            "the PostgreSQL journal holds {records} records after the runs (its data directory \
             has no redb file)"
        ));
        if let Some(before) = pg_before {
            let after = pg_counters(url)?;
            let per_run = |i: usize| (after[i] - before[i]) as f64 / config.runs as f64;
            notes.push(format!(
                "per PostgreSQL hook run: {:.1} connections, {:.1} commits, {:.1} rollbacks, \
                 {:.1} records appended (pg_stat_database deltas over the measured runs)",
                per_run(0),
                per_run(1),
                per_run(2),
                per_run(3)
            ));
        }
    }
    Ok(Report {
        ctx,
        ctx_version,
        runs: config.runs,
        floor,
        cases,
        notes,
    })
}

/// Sessions, commits and rollbacks of the database `url` names (pg_stat_database, minus this
/// query's own session and transaction) and its records.
fn pg_counters(url: &str) -> BenchResult<[i64; 4]> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    // The statistics of ended sessions reach pg_stat_database soon after they end; a short
    // pause lets the last hook process's arrive.
    std::thread::sleep(Duration::from_millis(1200));
    let row = client.query_one(
        "SELECT sessions, xact_commit, xact_rollback, \
         (SELECT count(*) FROM ctx_records) FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )?;
    Ok([
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
    ])
}

/// A PostgreSQL server for the PostgreSQL case and the URL of a fresh database on it
/// (`ctx_bench_hook`, dropped first if it exists): the server at `$CTX_PG_URL` if set, else a
/// throwaway cluster (the `ctx_journal_pg` harness), which lives as long as the returned server.
pub fn postgres_journal() -> BenchResult<(ctx_journal_pg::TestServer, String)> {
    use ctx_journal_pg::{Cluster, ClusterOptions, TestServer};
    let server = match std::env::var("CTX_PG_URL") {
        Ok(url) if !url.is_empty() => TestServer::External { url },
        _ => TestServer::Local(Cluster::start(ClusterOptions::new())?),
    };
    let url = server.create_database("ctx_bench_hook")?;
    Ok((server, url))
}

/// Builds the `ctx` binary with the cargo that runs this process (`$CARGO`, else `cargo`) and
/// returns its path: `<target>/release/ctx` with `release`, else `<target>/debug/ctx`. Cargo does
/// nothing when the binary is up to date, so measuring always measures the current source.
pub fn build_ctx(target_dir: &Path, release: bool) -> BenchResult<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(["build", "--quiet", "-p", "ctx-cli", "--bin", "ctx"]);
    if release {
        command.arg("--release");
    }
    let status = command.current_dir(env!("CARGO_MANIFEST_DIR")).status()?;
    if !status.success() {
        return Err(format!("building the ctx binary failed: {status}").into());
    }
    let binary = target_dir
        .join(if release { "release" } else { "debug" })
        .join("ctx");
    if !binary.is_file() {
        return Err(format!("no ctx binary at {}", binary.display()).into());
    }
    Ok(binary)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    /// The smoke mode, run by `cargo test` and by the benches' self-test
    /// (`cargo bench -p ctx-benches -- --test`): a couple of runs of every case against the `ctx`
    /// binary of this test's profile (built if needed, as the acceptance tests do), proving the
    /// harness works end to end. The figures are printed, not judged: a debug build or a busy CI
    /// machine says nothing about the targets.
    #[test]
    fn smoke_measures_every_case() {
        // The test binary is <target>/<profile>/deps/ctx_benches-<hash>.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let ctx = build_ctx(profile_dir.parent().unwrap(), release).unwrap();
        let disk = tempfile::tempdir().unwrap();
        // The PostgreSQL case runs when a server can be had (ctx_journal_pg::gate's rule).
        let postgres = ctx_journal_pg::gate(
            "hook-latency smoke, PostgreSQL case",
            ctx_journal_pg::available(),
        )
        .unwrap()
        .then(|| postgres_journal().unwrap());
        let report = run(&Config {
            ctx,
            runs: SMOKE_RUNS,
            disk_dir: disk.path().to_owned(),
            tmpfs_dir: Config::default_tmpfs_dir(),
            journal_url: postgres.as_ref().map(|(_, url)| url.clone()),
        })
        .unwrap();
        println!("{}", report.markdown());
        assert_eq!(report.floor.latencies.len(), SMOKE_RUNS);
        assert_eq!(
            report.cases.len(),
            1 + usize::from(Config::default_tmpfs_dir().is_some())
                + usize::from(postgres.is_some())
        );
        assert_eq!(report.postgres_over_redb().is_some(), postgres.is_some());
        for case in &report.cases {
            assert_eq!(case.all.latencies.len(), SMOKE_RUNS);
            assert_eq!(
                case.new_session.latencies.len() + case.same_session.latencies.len(),
                SMOKE_RUNS
            );
        }
        let json = report.to_json();
        assert_eq!(json["cases"][0]["all"]["runs"], SMOKE_RUNS);
        assert!(report.markdown().contains("spawn floor"));
    }

    /// The session-growth mode end to end with a tiny size (the figures are printed, not judged).
    #[test]
    fn smoke_measures_session_growth() {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let ctx = build_ctx(profile_dir.parent().unwrap(), release).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let growth = session_growth(&ctx, dir.path(), 3, 1).unwrap();
        println!("{}", growth.markdown());
        assert_eq!(growth.first.latencies.len(), 1);
        assert_eq!(growth.last.latencies.len(), 1);
        assert!(growth.ratio().is_some());
        assert!(session_growth(&ctx, dir.path(), 1, 1).is_err());
    }

    #[test]
    fn digests_are_folded_out_of_messages() {
        let d = "ab".repeat(32);
        assert_eq!(
            without_digests(&format!("run `ctx consent approve {d}` (or deny {d}).")),
            "run `ctx consent approve <digest>` (or deny <digest>)."
        );
        assert_eq!(
            without_digests("revision 0, found 3 cafe"),
            "revision 0, found 3 cafe"
        );
    }

    #[test]
    fn fs_type_of_the_root_is_known_on_linux() {
        if Path::new("/proc/mounts").is_file() {
            assert_ne!(fs_type(Path::new("/")), "unknown");
            if Path::new("/dev/shm").is_dir() {
                assert!(is_tmpfs(&fs_type(Path::new("/dev/shm"))));
            }
        }
        assert_eq!(fs_type(Path::new("/no/such/path")), "unknown");
    }
}
