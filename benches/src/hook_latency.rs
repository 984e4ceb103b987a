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
//! **Catalog size** (`--catalog-size 50,1000,10000`, issue 23). Without it every data directory
//! plans from the sample catalog compiled into ctx (`ctx catalog ingest`). With it, each size in
//! turn, smallest first, gets a catalog of that many entries from the `catalog-scale` generator
//! ([`crate::catalog_scale::generate`], realistic skills, skill trees, agents and MCP servers),
//! generated once and ingested with `ctx catalog ingest --catalog-dir` into fresh data directories
//! of every case; each is warmed with one hook and then measured as above. The report gives each
//! size's p50 and p90 per case and its p50 over the smallest size's, against the issue's bound
//! ([`MAX_P50_GROWTH`]: p50 at 10,000 within 1.5× of p50 at 50, on the tmpfs and on the disk).
//!
//! **System calls** (`--strace`). After a catalog's measured runs, extra hook processes — never
//! the timed ones — run under `strace -f -c` in the tmpfs and the disk data directories, and the
//! report gives per hook the durable syncs ([`DURABLE_SYNCS`]), the stat family ([`STAT_CALLS`]),
//! `openat`, `read`, `write` and `getdents64`. Four kinds of prompt ([`Scenario`]):
//!
//! - *no effect*: a follow-up prompt of a session that repeats the session's first prompt, so its
//!   plan selects what is already active or already asked for (ctx holds it again for the new
//!   prompt's query, so its reply lists it as "Activated now", but no host file changes);
//! - *nothing planned*: a follow-up prompt with no catalog tag ("yes, continue"), which plans
//!   nothing;
//! - *one activation*: the person approved exactly one of the installs that a session's first
//!   prompt asked for (and denied the others for good), and the session's next prompt activates it;
//! - *one install*: the first prompt of a new session, which chooses that install again; the hook
//!   resolves it on the person's earlier grant (spec/decisions.md §16.3) and installs it.
//!
//! The last two prompts plan what the session's first prompt planned, so besides their one
//! activation or install they hold again what is already active, as the no-effect prompt does:
//! read them against the no-effect row. The install's host file exists already (the first
//! session holds it), so the install row changes no host file; its install claim records show it.
//!
//! The person decides as in the CLI tests, at a terminal: `ctx key init` and
//! `ctx consent approve|deny --yes` run in a pseudo-terminal that `script` (util-linux) provides,
//! because ctx reads passphrases only from `/dev/tty` (spec/decisions.md §12.3); each answer is
//! typed once the terminal shows its prompt. What each traced hook did is shown next to its counts —
//! the files it changed where ctx activates on the host, the journal records it appended by kind
//! (`ctx inspect --json` before and after; install claim records mean it ran an install) and what
//! its reply says it activated, deactivated and asked for — so a prompt that did more or less than
//! its row's name says is visible as such. Without `strace` on PATH the counts are skipped with a
//! line saying so; without `script` only the two prompts that need no decision (no effect,
//! nothing planned) are traced.
//!
//! ```text
//! cargo run --release -p ctx-benches --bin ctx-bench -- hook-latency --postgres --runs 40
//! cargo run --release -p ctx-benches --bin ctx-bench -- hook-latency \
//!     --catalog-size 50,1000,10000 --runs 10 --strace
//! ```

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::BenchResult;
use crate::catalog_scale;
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
/// The issue's bound on a catalog size's p50 over the smallest size's p50, per case.
pub const MAX_P50_GROWTH: f64 = 1.5;
/// Traced runs of each prompt that needs no decision (no effect, nothing planned) per case and
/// catalog; the other prompts change the data directory, so each of them is traced once.
pub const STRACE_NO_EFFECT_RUNS: usize = 3;
/// The calls that make written data durable; their sum is a hook's "durable syncs".
pub const DURABLE_SYNCS: &[&str] = &["fdatasync", "fsync", "syncfs"];
/// The stat family: whichever of these the C library uses for a path's metadata.
pub const STAT_CALLS: &[&str] = &["statx", "newfstatat", "stat", "lstat", "fstatat64"];
/// The other calls the report shows one by one.
pub const OTHER_CALLS: &[&str] = &["openat", "read", "write", "getdents64"];
/// The program that counts a process's system calls.
pub const STRACE_BIN: &str = "strace";
/// The program that gives a command a pseudo-terminal (util-linux), for the person's decisions.
pub const SCRIPT_BIN: &str = "script";
/// The passphrase the person of the traced scenarios chooses for their device key.
const PASSPHRASE: &str = "correct horse battery staple";
/// How long a command at the person's terminal may take: a consent resolution opens the runtime,
/// which re-reads a large catalog, so this is generous.
const TERMINAL_TIMEOUT: Duration = Duration::from_secs(600);

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

/// A word that makes run `i`'s prompt an input of its own: letters, not digits, since a number
/// is a term that a generated entry's name (`<topic>-<verb>-<index>`) holds, and a prompt that
/// matched one would plan differently at each catalog size.
pub(crate) fn run_code(i: usize) -> String {
    let mut code = String::from("zq");
    let mut n = i;
    loop {
        code.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            return code;
        }
    }
}

/// A follow-up prompt without a catalog tag (the generated vocabulary and the sample catalog's
/// tags are technical words), numbered per run so that no two are the same input.
const NOTHING_PLANNED_PROMPT: &str = "yes, continue";

/// The prompt of the traced sessions on the sample catalog: it asks for the install of
/// `skill:terraform` (the CLI tests rely on the same).
const SAMPLE_TRACED_PROMPT: &str = "write terraform for the new infrastructure";

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
    /// Entries of the generated catalogs to measure with (`--catalog-size`), one after the other;
    /// empty: the sample catalog compiled into ctx.
    pub catalog_sizes: Vec<usize>,
    /// Whether to count the system calls of extra hook runs under strace (`--strace`).
    pub strace: bool,
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

    /// The sizes of `--catalog-size`: positive entry counts separated by commas (`_` may group
    /// digits), returned smallest first without repeats, since every ratio is over the smallest.
    pub fn catalog_sizes_from(text: &str) -> Result<Vec<usize>, String> {
        let mut sizes = Vec::new();
        for item in text.split(',') {
            let digits = item.trim().replace('_', "");
            match digits.parse::<usize>() {
                Ok(n) if n > 0 => sizes.push(n),
                _ => {
                    return Err(format!(
                        "--catalog-size {text}: {item:?} is not a positive number of entries \
                         (sizes are separated by commas, e.g. 50,1000,10000)"
                    ));
                }
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        Ok(sizes)
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
    /// The wall time of the `ctx catalog ingest` that gave the data directory its catalog.
    pub ingest: Duration,
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

/// A kind of traced prompt (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    NothingPlanned,
    NoEffect,
    OneActivation,
    OneInstall,
}

impl Scenario {
    /// Stable JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Scenario::NothingPlanned => "nothing_planned",
            Scenario::NoEffect => "no_effect",
            Scenario::OneActivation => "one_activation",
            Scenario::OneInstall => "one_install",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Scenario::NothingPlanned => "nothing planned",
            Scenario::NoEffect => "no effect",
            Scenario::OneActivation => "one activation",
            Scenario::OneInstall => "one install",
        }
    }
}

/// What a hook's reply says it did (spec/cli.md §7: its context and its `systemMessage`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effect {
    /// "Activated now: …".
    pub activated: Vec<String>,
    /// "Deactivated: …".
    pub deactivated: Vec<String>,
    /// Selections that "is installed on the person's earlier approval": installs the hook
    /// resolved on a decision the person made before (spec/cli.md §7.3).
    pub installed: usize,
    /// Capabilities whose consent the hook asked the person for.
    pub asked: Vec<String>,
}

impl Effect {
    /// Reads a hook's reply.
    pub fn of_reply(reply: &Value) -> Effect {
        let context = reply
            .pointer("/hookSpecificOutput/additionalContext")
            .and_then(Value::as_str)
            .unwrap_or("");
        let message = reply
            .get("systemMessage")
            .and_then(Value::as_str)
            .unwrap_or("");
        Effect {
            activated: listed(context, "Activated now: "),
            deactivated: listed(context, "Deactivated: "),
            installed: context
                .matches("is installed on the person's earlier approval")
                .count(),
            asked: asked_in(message).into_iter().map(|(id, _)| id).collect(),
        }
    }

    /// A short description for the table: `activated 1, asked 2`, or `nothing`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("activated", self.activated.len()),
            ("deactivated", self.deactivated.len()),
            ("installed", self.installed),
            ("asked", self.asked.len()),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "activated": self.activated,
            "deactivated": self.deactivated,
            "installed": self.installed,
            "asked": self.asked,
        })
    }
}

/// The ids of the list that follows `head` in a hook's context ("Activated now: a, b.").
fn listed(context: &str, head: &str) -> Vec<String> {
    let Some(at) = context.find(head) else {
        return Vec::new();
    };
    let rest = &context[at + head.len()..];
    // The list ends at the sentence's full stop: the next ". " or the context's last ".".
    let end = rest
        .find(". ")
        .unwrap_or_else(|| rest.trim_end().trim_end_matches('.').len());
    rest[..end]
        .split(", ")
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The (capability id, challenge digest) pairs a hook's `systemMessage` asks the person about
/// (spec/cli.md §7): one ("ctx: ID awaits your consent. In your own terminal run `ctx consent
/// approve DIGEST` …") or several ("… run `ctx consent approve DIGEST` (ID), …").
pub(crate) fn asked_in(message: &str) -> Vec<(String, String)> {
    const RUN: &str = "ctx consent approve ";
    let single = message.matches(RUN).count() == 1;
    let mut out = Vec::new();
    for piece in message.split(RUN).skip(1) {
        let Some(digest) = piece
            .get(..64)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            continue;
        };
        let id = if single {
            message
                .strip_prefix("ctx: ")
                .and_then(|m| m.split(" awaits your consent").next())
        } else {
            piece[64..]
                .strip_prefix("` (")
                .and_then(|rest| rest.split(')').next())
        };
        out.push((id.unwrap_or("").to_owned(), digest.to_owned()));
    }
    out
}

/// One traced hook process: its system calls and what its reply says it did.
#[derive(Debug, Clone, Default)]
pub struct TracedRun {
    /// Calls per system call name, over every thread of the process (`strace -f -c`).
    pub calls: BTreeMap<String, u64>,
    /// What the reply says the hook did.
    pub effect: Effect,
    /// The files and links the hook added, changed or removed where ctx activates on the host
    /// (under HOME/.claude and the project): what the reply's "Activated now" really changed,
    /// since a prompt that re-holds what is active lists it there too.
    pub host_changes: Vec<String>,
    /// Records the hook appended to the journal (`ctx inspect --json` before and after).
    pub records_appended: u64,
    /// The same by the kind of their stream's first record: `ctx.install-claim.v1` records mean
    /// the hook ran an install, which its reply does not say once the install is active.
    pub kinds_appended: BTreeMap<String, u64>,
}

impl TracedRun {
    /// The calls of all of `names`.
    pub fn count(&self, names: &[&str]) -> u64 {
        names.iter().filter_map(|n| self.calls.get(*n)).sum()
    }

    /// Records of install claims and their outcomes the hook appended (0: it installed nothing).
    pub fn install_records(&self) -> u64 {
        self.kinds_appended
            .get(INSTALL_CLAIM_KIND)
            .copied()
            .unwrap_or(0)
    }

    /// What the hook did, for the table: host changes, records, install records, the reply.
    pub fn did(&self) -> String {
        let mut out = format!(
            "host files {}, records +{}",
            self.host_changes.len(),
            self.records_appended
        );
        if self.install_records() > 0 {
            out.push_str(&format!(", install records +{}", self.install_records()));
        }
        out.push_str(&format!("; reply: {}", self.effect.summary()));
        out
    }
}

/// The stream kind of an install's claim and outcome records (spec/service.md).
pub const INSTALL_CLAIM_KIND: &str = "ctx.install-claim.v1";

/// The traced hooks of one kind of prompt in one case.
#[derive(Debug, Clone)]
pub struct Traced {
    /// The case's key ([`Case::key`]).
    pub case_key: &'static str,
    pub scenario: Scenario,
    pub runs: Vec<TracedRun>,
    /// Why the prompt was not traced, when it was not.
    pub skipped: Option<String>,
}

impl Traced {
    /// The calls of all of `names` in each run.
    pub fn counts(&self, names: &[&str]) -> Vec<u64> {
        self.runs.iter().map(|r| r.count(names)).collect()
    }

    /// The median over the runs of the calls of all of `names` (the lower middle of an even
    /// count, so that it is always a count some run made).
    pub fn median(&self, names: &[&str]) -> Option<u64> {
        let mut counts = self.counts(names);
        counts.sort_unstable();
        counts.get(counts.len().saturating_sub(1) / 2).copied()
    }
}

/// The stat family and `openat`: the calls the issue wants independent of the catalog's size.
const STAT_AND_OPEN: &[&str] = &[
    "statx",
    "newfstatat",
    "stat",
    "lstat",
    "fstatat64",
    "openat",
];

/// Every case measured with one catalog.
#[derive(Debug, Clone)]
pub struct CatalogRun {
    /// Entries of the generated catalog; `None`: the sample catalog compiled into ctx.
    pub entries: Option<usize>,
    /// What the generator wrote (generated catalogs only).
    pub generated: Option<catalog_scale::Generated>,
    /// `ctx --version`, interleaved with this catalog's runs: the spawn floor.
    pub floor: Sample,
    pub cases: Vec<Case>,
    /// The traced hooks (empty without `--strace`).
    pub traced: Vec<Traced>,
}

impl CatalogRun {
    /// "the sample catalog" or "1000 generated entries".
    pub fn label(&self) -> String {
        match self.entries {
            None => "the sample catalog".to_owned(),
            Some(n) => format!("{n} generated entries"),
        }
    }

    fn case(&self, key: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.key == key)
    }

    /// The PostgreSQL case's p50 and p90 over the redb disk case's, when both ran.
    pub fn postgres_over_redb(&self) -> Option<(f64, f64)> {
        let (pg, redb) = (self.case(POSTGRES_CASE)?, self.case(DISK_CASE)?);
        let at = |c: &Case, p: f64| c.all.percentile_us(p);
        Some((
            at(pg, 50.0)? / at(redb, 50.0)?,
            at(pg, 90.0)? / at(redb, 90.0)?,
        ))
    }

    fn traced(&self, case_key: &str, scenario: Scenario) -> Option<&Traced> {
        self.traced
            .iter()
            .find(|t| t.case_key == case_key && t.scenario == scenario)
    }
}

/// Everything one `hook-latency` run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub ctx: PathBuf,
    /// `ctx --version`'s output.
    pub ctx_version: String,
    pub runs: usize,
    /// One entry per catalog, smallest first: the sample catalog alone, or each `--catalog-size`.
    pub catalogs: Vec<CatalogRun>,
    /// Whether system calls were to be counted (`--strace`).
    pub strace: bool,
    /// Why they were not, when asked for and impossible here.
    pub strace_skipped: Option<String>,
    /// Caveats: a missing tmpfs, a "disk" that is a tmpfs.
    pub notes: Vec<String>,
}

/// Key of the PostgreSQL case.
pub const POSTGRES_CASE: &str = "postgres";
/// Key of the redb-on-disk case.
pub const DISK_CASE: &str = "including_fsync";
/// Key of the redb-on-tmpfs case.
pub const TMPFS_CASE: &str = "excluding_fsync";

impl Report {
    /// The case `key`'s p50 with catalog `index` over its p50 with the smallest catalog (the
    /// first), when both ran.
    pub fn p50_over_smallest(&self, index: usize, key: &str) -> Option<f64> {
        let p50 = |i: usize| self.catalogs.get(i)?.case(key)?.all.percentile_us(50.0);
        Some(p50(index)? / p50(0)?)
    }

    /// The stat family and `openat` calls of `scenario`'s prompt with catalog `index` over those
    /// with the smallest catalog, in case `key` (medians): the issue wants them independent of the
    /// catalog's size (within ±10 % from 50 to 10,000 entries).
    pub fn stat_open_over_smallest(
        &self,
        index: usize,
        key: &str,
        scenario: Scenario,
    ) -> Option<f64> {
        let median = |i: usize| {
            self.catalogs
                .get(i)?
                .traced(key, scenario)?
                .median(STAT_AND_OPEN)
        };
        let (now, first) = (median(index)?, median(0)?);
        (first > 0).then(|| now as f64 / first as f64)
    }

    /// The case of the first catalog with `key`, if it ran.
    pub fn first_case(&self, key: &str) -> Option<&Case> {
        self.catalogs.first()?.case(key)
    }
}

fn ms(us: Option<f64>) -> Option<f64> {
    us.map(|v| v / 1000.0)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// `a` when every value is `a`, else `min-max`; `-` for none.
fn fmt_range(values: &[u64]) -> String {
    match (values.iter().min(), values.iter().max()) {
        (Some(min), Some(max)) if min == max => min.to_string(),
        (Some(min), Some(max)) => format!("{min}-{max}"),
        _ => "-".to_owned(),
    }
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
    /// The tables for people: one per catalog, then, with generated catalogs, the sizes side by
    /// side, and the traced hooks' system calls.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "hook latency: `{}` ({}), {} runs per case, wall time spawn -> exit\n",
            self.ctx.display(),
            self.ctx_version,
            self.runs
        );
        for catalog in &self.catalogs {
            out.push('\n');
            out.push_str(&catalog_markdown(catalog));
        }
        if self.catalogs.iter().any(|c| c.entries.is_some()) {
            out.push_str("\n\n");
            out.push_str(&self.sizes_markdown());
        }
        if self.strace {
            out.push_str("\n\n");
            out.push_str(&self.strace_markdown());
        }
        for note in &self.notes {
            out.push_str(&format!("\nnote: {note}"));
        }
        out
    }

    /// Each size's p50 and p90 per case and its p50 over the smallest size's.
    fn sizes_markdown(&self) -> String {
        let smallest = self
            .catalogs
            .first()
            .map_or_else(|| "-".to_owned(), CatalogRun::label);
        let mut out = format!(
            "catalog size: p50 over the p50 with the smallest catalog ({smallest}), same case; \
             the issue's bound is {MAX_P50_GROWTH}x\n\n\
             | catalog | case | runs | ingest ms | p50 ms | p90 ms | p50 / smallest | within \
             {MAX_P50_GROWTH}x |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        );
        for (index, catalog) in self.catalogs.iter().enumerate() {
            for case in &catalog.cases {
                let ratio = self.p50_over_smallest(index, case.key);
                let verdict = match ratio {
                    _ if index == 0 => "-",
                    Some(r) if r <= MAX_P50_GROWTH => "met",
                    Some(_) => "MISSED",
                    None => "-",
                };
                out.push_str(&format!(
                    "| {} | {} | {} | {:.1} | {} | {} | {} | {verdict} |\n",
                    catalog.label(),
                    case.key,
                    case.all.latencies.len(),
                    case.ingest.as_secs_f64() * 1e3,
                    fmt_ms(ms(case.all.percentile_us(50.0))),
                    fmt_ms(ms(case.all.percentile_us(90.0))),
                    ratio.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
                ));
            }
        }
        out
    }

    /// The traced hooks' calls, per catalog, case and prompt.
    fn strace_markdown(&self) -> String {
        if let Some(why) = &self.strace_skipped {
            return format!("system calls per hook: skipped: {why}");
        }
        let mut out = format!(
            "system calls per hook (strace -f -c of extra hook processes, not the timed ones; \
             a-b: the range over the traced runs; durable syncs = {}; stat family = {}; \
             \"did\": the files it changed where ctx activates on the host, the journal records it \
             appended (install records: it ran an install), and what its reply says)\n\n\
             | catalog | case | prompt | runs | did | durable syncs | fdatasync | fsync | \
             syncfs | stat family | openat | read | write | getdents64 | stat+openat / smallest |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- \
             | --- |\n",
            DURABLE_SYNCS.join(" + "),
            STAT_CALLS.join(" + ")
        );
        for (index, catalog) in self.catalogs.iter().enumerate() {
            for traced in &catalog.traced {
                let head = format!(
                    "| {} | {} | {} | {} |",
                    catalog.label(),
                    traced.case_key,
                    traced.scenario.label(),
                    traced.runs.len()
                );
                if let Some(why) = &traced.skipped {
                    out.push_str(&format!("{head} skipped: {why} | | | | | | | | | | |\n"));
                    continue;
                }
                let mut did: Vec<String> = traced.runs.iter().map(TracedRun::did).collect();
                did.dedup();
                let one = |names: &[&str]| fmt_range(&traced.counts(names));
                let growth = match index {
                    0 => None,
                    _ => self.stat_open_over_smallest(index, traced.case_key, traced.scenario),
                }
                .map_or_else(
                    || "-".to_owned(),
                    |r| format!("{:+.1} %", (r - 1.0) * 100.0),
                );
                out.push_str(&format!(
                    "{head} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {growth} |\n",
                    did.join("; "),
                    one(DURABLE_SYNCS),
                    one(&["fdatasync"]),
                    one(&["fsync"]),
                    one(&["syncfs"]),
                    one(STAT_CALLS),
                    one(&["openat"]),
                    one(&["read"]),
                    one(&["write"]),
                    one(&["getdents64"]),
                ));
            }
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let sizes: Vec<usize> = self.catalogs.iter().filter_map(|c| c.entries).collect();
        json!({
            "schema": "ctx.bench-hook-latency-v2",
            "ctx": self.ctx.display().to_string(),
            "ctx_version": self.ctx_version,
            "runs": self.runs,
            "prompts_per_session": PROMPTS_PER_SESSION,
            "catalog_sizes": sizes,
            "max_p50_growth": MAX_P50_GROWTH,
            "catalogs": self.catalogs.iter().enumerate()
                .map(|(index, c)| self.catalog_json(index, c)).collect::<Vec<_>>(),
            "strace": {
                "requested": self.strace,
                "skipped": self.strace_skipped,
                "durable_syncs": DURABLE_SYNCS,
                "stat_family": STAT_CALLS,
            },
            "notes": self.notes,
        })
    }

    fn catalog_json(&self, index: usize, catalog: &CatalogRun) -> Value {
        json!({
            "catalog": if catalog.entries.is_some() { "generated" } else { "sample" },
            "entries": catalog.entries,
            "generated": catalog.generated.as_ref().map(|g| json!({
                "wall_ms": g.wall.as_secs_f64() * 1e3,
                "catalog_bytes": g.catalog_bytes,
                "body_files": g.body_files,
                "body_bytes": g.body_bytes,
                "skill_material": g.skill_material,
                "skill_tree": g.skill_tree,
                "agents": g.agents,
                "mcp_servers": g.mcp_servers,
            })),
            "floor_version": sample_json(&catalog.floor),
            "cases": catalog.cases.iter().map(|c| json!({
                "key": c.key,
                "label": c.label,
                "dir": c.dir.display().to_string(),
                "fs_type": c.fs_type,
                "target_p50_ms": c.target_p50_ms,
                "ingest_ms": c.ingest.as_secs_f64() * 1e3,
                "all": sample_json(&c.all),
                "new_session": sample_json(&c.new_session),
                "same_session": sample_json(&c.same_session),
                "p50_over_smallest": self.p50_over_smallest(index, c.key),
                "replies": c.replies,
                "system_messages": c.system_messages.iter()
                    .map(|(m, n)| json!({"message": m, "runs": n})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "postgres_over_redb": catalog.postgres_over_redb()
                .map(|(p50, p90)| json!({"p50": p50, "p90": p90})),
            "strace": catalog.traced.iter().map(|t| json!({
                "case": t.case_key,
                "prompt": t.scenario.key(),
                "skipped": t.skipped,
                "median": {
                    "durable_syncs": t.median(DURABLE_SYNCS),
                    "stat_family": t.median(STAT_CALLS),
                    "openat": t.median(&["openat"]),
                    "read": t.median(&["read"]),
                    "write": t.median(&["write"]),
                    "getdents64": t.median(&["getdents64"]),
                },
                "stat_openat_over_smallest":
                    self.stat_open_over_smallest(index, t.case_key, t.scenario),
                "runs": t.runs.iter().map(|r| json!({
                    "durable_syncs": r.count(DURABLE_SYNCS),
                    "stat_family": r.count(STAT_CALLS),
                    "effect": r.effect.to_json(),
                    "host_changes": r.host_changes,
                    "records_appended": r.records_appended,
                    "kinds_appended": r.kinds_appended,
                    "calls": r.calls,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// One catalog's table: the spawn floor and every case, split by new session / follow-up.
fn catalog_markdown(catalog: &CatalogRun) -> String {
    let mut out = format!("catalog: {}", catalog.label());
    if let Some(g) = &catalog.generated {
        out.push_str(&format!(
            " (generated in {:.1} s: catalog.json {} bytes, {} body files of {} bytes)",
            g.wall.as_secs_f64(),
            g.catalog_bytes,
            g.body_files,
            g.body_bytes
        ));
    }
    out.push_str(
        "\n\n| measurement | directory | runs | p50 ms | p90 ms | p99 ms | max ms | target |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
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
        &catalog.floor,
        "-",
    );
    for case in &catalog.cases {
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
    let floor = ms(catalog.floor.percentile_us(50.0));
    for case in &catalog.cases {
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
    if let Some((p50, p90)) = catalog.postgres_over_redb() {
        out.push_str(&format!(
            "\nPostgreSQL journal ÷ redb journal (both data dirs on the disk, same runs \
             interleaved): p50 {p50:.2}x, p90 {p90:.2}x"
        ));
    }
    out
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
        self.ctx_under(&[], ctx, args)
    }

    /// As [`World::ctx`], run by the program and arguments of `wrapper` when it is not empty
    /// (`strace -f -c -o FILE --`), so the wrapped process gets exactly the environment a plain
    /// run gets.
    pub(crate) fn ctx_under(&self, wrapper: &[&OsStr], ctx: &Path, args: &[&str]) -> Command {
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(ctx);
                command
            }
            None => Command::new(ctx),
        };
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
    hook_run_under(&[], ctx, world, session, prompt)
}

/// As [`hook_run`], the process run by `wrapper` ([`World::ctx_under`]).
fn hook_run_under(
    wrapper: &[&OsStr],
    ctx: &Path,
    world: &World,
    session: &str,
    prompt: &str,
) -> BenchResult<(Duration, Option<Value>)> {
    let input = world.hook_input(session, prompt)?;
    let (wall, output) = timed(&mut world.ctx_under(wrapper, ctx, HOOK_ARGS), &input)?;
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

/// A case before its data directory exists: where it lives and what it is measured against.
struct Medium {
    key: &'static str,
    label: &'static str,
    dir: PathBuf,
    target_p50_ms: f64,
    journal_url: Option<String>,
}

/// `ctx --version`, timed: the same binary, no data directory, no input.
fn version_run(ctx: &Path) -> BenchResult<(Duration, Output)> {
    let mut command = Command::new(ctx);
    command.env_clear().arg("--version");
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let (wall, output) = timed(&mut command, b"")?;
    check_exit("ctx --version", &output)?;
    Ok((wall, output))
}

/// Measures as `config` says.
pub fn run(config: &Config) -> BenchResult<Report> {
    if config.runs == 0 {
        return Err("at least one run per case is needed".into());
    }
    if config.catalog_sizes.contains(&0) {
        return Err("a generated catalog needs at least one entry".into());
    }
    if config.journal_url.is_some() && config.catalog_sizes.len() > 1 {
        return Err(
            "a PostgreSQL journal (--postgres, --journal) is one empty database, and \
                    every catalog size needs a fresh journal: give one --catalog-size with it"
                .into(),
        );
    }
    let ctx = std::fs::canonicalize(&config.ctx)
        .map_err(|e| format!("the ctx binary {}: {e}", config.ctx.display()))?;
    let mut notes = Vec::new();

    let mut media = Vec::new();
    match &config.tmpfs_dir {
        Some(dir) => {
            let kind = fs_type(dir);
            if !is_tmpfs(&kind) {
                notes.push(format!(
                    "{} is on {kind}, not a tmpfs: the \"excluding fsync\" figures include it",
                    dir.display()
                ));
            }
            media.push(Medium {
                key: TMPFS_CASE,
                label: "hook, excluding fsync (tmpfs)",
                dir: dir.clone(),
                target_p50_ms: TARGET_P50_EXCLUDING_FSYNC_MS,
                journal_url: None,
            });
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
    media.push(Medium {
        key: DISK_CASE,
        label: "hook, including fsync (disk)",
        dir: config.disk_dir.clone(),
        target_p50_ms: TARGET_P50_INCLUDING_FSYNC_MS,
        journal_url: None,
    });
    if let Some(url) = &config.journal_url {
        media.push(Medium {
            key: POSTGRES_CASE,
            label: "hook, PostgreSQL journal (data dir on disk)",
            dir: config.disk_dir.clone(),
            target_p50_ms: TARGET_P50_INCLUDING_FSYNC_MS,
            journal_url: Some(url.clone()),
        });
    }

    // A first spawn also pulls the binary into the page cache.
    let (_, first) = version_run(&ctx)?;
    let ctx_version = String::from_utf8_lossy(&first.stdout).trim().to_owned();

    let mut strace_skipped = None;
    let tools = if config.strace {
        match Tools::find(&ctx) {
            Ok(tools) => Some(tools),
            Err(why) => {
                eprintln!("skipped: {why}");
                strace_skipped = Some(why);
                None
            }
        }
    } else {
        None
    };
    if tools.as_ref().is_some_and(|t| t.script.is_none()) {
        notes.push(format!(
            "`{SCRIPT_BIN}` (util-linux) is not on PATH: the person's decisions need a terminal, \
             so only the prompts that need no decision were traced"
        ));
    }

    let mut sizes = config.catalog_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let entries: Vec<Option<usize>> = if sizes.is_empty() {
        vec![None]
    } else {
        sizes.into_iter().map(Some).collect()
    };
    let mut catalogs = Vec::new();
    for entries in entries {
        catalogs.push(measure_catalog(
            config,
            &ctx,
            &media,
            entries,
            tools.as_ref(),
            &mut notes,
        )?);
    }
    Ok(Report {
        ctx,
        ctx_version,
        runs: config.runs,
        catalogs,
        strace: config.strace,
        strace_skipped,
        notes,
    })
}

/// One catalog: generated (for a size) once, ingested into fresh data directories of every
/// medium, each warmed with one hook; then the interleaved measured runs, then, with `tools`, the
/// traced hooks. The data directories and the generated catalog are removed before the next size.
fn measure_catalog(
    config: &Config,
    ctx: &Path,
    media: &[Medium],
    entries: Option<usize>,
    tools: Option<&Tools>,
    notes: &mut Vec<String>,
) -> BenchResult<CatalogRun> {
    // The catalog directory only has to outlive the ingests, which copy it into each data
    // directory, so the medium it is generated on does not matter to the figures.
    let source = match entries {
        Some(n) => {
            let dir = tempfile::Builder::new()
                .prefix("ctx-bench-hook-catalog-")
                .tempdir_in(&config.disk_dir)?;
            eprintln!("generating a catalog of {n} entries ...");
            // The same anchors at every size, so every size runs the same plans (their
            // prompts share no word with the generated entries).
            let generated = catalog_scale::generate_with(
                &dir.path().join("catalog"),
                n,
                catalog_scale::ANCHORS,
            )?;
            Some((dir, generated))
        }
        None => None,
    };
    let label = match entries {
        None => "the sample catalog".to_owned(),
        Some(n) => format!("{n} generated entries"),
    };
    let mut ingest_args = vec!["catalog".to_owned(), "ingest".to_owned()];
    if let Some((_, generated)) = &source {
        let dir = generated.dir.to_str().ok_or_else(|| {
            format!(
                "the generated catalog's path {} is not UTF-8",
                generated.dir.display()
            )
        })?;
        ingest_args.extend(["--catalog-dir".to_owned(), dir.to_owned()]);
    }
    let ingest_args: Vec<&str> = ingest_args.iter().map(String::as_str).collect();

    let mut worlds = Vec::new();
    let mut cases = Vec::new();
    for medium in media {
        worlds.push(World::new(&medium.dir, medium.journal_url.clone())?);
        cases.push(Case {
            key: medium.key,
            label: medium.label,
            dir: medium.dir.clone(),
            fs_type: fs_type(&medium.dir),
            target_p50_ms: medium.target_p50_ms,
            ingest: Duration::ZERO,
            all: Sample::default(),
            new_session: Sample::default(),
            same_session: Sample::default(),
            replies: 0,
            system_messages: Vec::new(),
        });
    }

    // Warm each journal: the catalog ingested, then one hook call (the journal file exists, its
    // tables are created, the catalog is cached by the OS).
    for (world, case) in worlds.iter().zip(cases.iter_mut()) {
        eprintln!("{}: ingesting {label} and warming ...", case.key);
        let (wall, output) = timed(&mut world.ctx(ctx, &ingest_args), b"")?;
        check_exit("ctx catalog ingest", &output)?;
        case.ingest = wall;
        hook_run(ctx, world, "warm-up", "warm the journal")?;
    }

    // What the PostgreSQL case's runs cost the server, from pg_stat_database: sessions
    // (connections), commits and rollbacks, records.
    let pg_before = match &config.journal_url {
        Some(url) => Some(pg_counters(url)?),
        None => None,
    };
    let mut floor = Sample::default();
    let started = Instant::now();
    for i in 0..config.runs {
        // A large catalog makes each round slow, so the rounds show their progress.
        if started.elapsed() > Duration::from_secs(10) && i % 5 == 0 {
            eprintln!("{label}: round {} of {} ...", i + 1, config.runs);
        }
        let (wall, _) = version_run(ctx)?;
        floor.latencies.push(wall);
        let session = format!("bench-session-{}", i / PROMPTS_PER_SESSION);
        let prompts = match entries {
            Some(_) => catalog_scale::ANCHOR_PROMPTS,
            None => PROMPTS,
        };
        let prompt = format!("{} (run {})", prompts[i % prompts.len()], run_code(i));
        for (world, case) in worlds.iter().zip(cases.iter_mut()) {
            let (wall, reply) = hook_run(ctx, world, &session, &prompt)?;
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
            .zip(&cases)
            .filter(|(_, case)| case.key == POSTGRES_CASE)
            .filter(|(world, _)| world.data.join(ctx_journal::DATABASE_FILE).exists())
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

    // The traced hooks come after the measured runs, so their sessions and the person's
    // decisions cannot change what was timed.
    let mut traced = Vec::new();
    if let Some(tools) = tools {
        let prompt = match entries {
            Some(_) => catalog_scale::ANCHOR_TRACED_PROMPT,
            None => SAMPLE_TRACED_PROMPT,
        };
        for (world, case) in worlds.iter().zip(&cases) {
            if case.key == POSTGRES_CASE {
                continue;
            }
            eprintln!("{}: tracing hooks with {label} ...", case.key);
            traced.extend(trace_case(tools, ctx, world, case.key, prompt)?);
        }
    }
    drop(worlds);
    Ok(CatalogRun {
        entries,
        generated: source.map(|(_, generated)| generated),
        floor,
        cases,
        traced,
    })
}

/// Where the program `name` is on PATH, if it is.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|file| file.is_file())
}

/// The programs the traced hooks need, and where strace writes its tables.
struct Tools {
    strace: PathBuf,
    /// `script`, the person's terminal; without it only the prompts that need no decision are
    /// traced.
    script: Option<PathBuf>,
    tables: tempfile::TempDir,
}

impl Tools {
    /// Finds strace and checks that it can trace here: a container may forbid ptrace, and then
    /// strace fails on every process. The error is the sentence the report shows.
    fn find(ctx: &Path) -> Result<Tools, String> {
        let strace = on_path(STRACE_BIN).ok_or_else(|| format!("{STRACE_BIN} not found"))?;
        let tables =
            tempfile::tempdir().map_err(|e| format!("no temp dir for strace's tables: {e}"))?;
        let probe = Command::new(&strace)
            .args(["-f", "-c", "-o"])
            .arg(tables.path().join("probe"))
            .arg("--")
            .arg(ctx)
            .arg("--version")
            .output()
            .map_err(|e| format!("{} could not be started: {e}", strace.display()))?;
        if !probe.status.success() {
            return Err(format!(
                "{} cannot trace here ({}): {}",
                strace.display(),
                probe.status,
                String::from_utf8_lossy(&probe.stderr).trim()
            ));
        }
        Ok(Tools {
            strace,
            script: on_path(SCRIPT_BIN),
            tables,
        })
    }
}

/// The call counts of a `strace -c` table: each row's `calls` (the fourth column) by its
/// `syscall` (the last). A row is `% time, seconds, usecs/call, calls, [errors], syscall`; the
/// header, the rules and the `total` row are not counted.
pub(crate) fn strace_calls(table: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !(5..=6).contains(&fields.len()) || fields[0].parse::<f64>().is_err() {
            continue;
        }
        let (Some(name), Ok(calls)) = (fields.last(), fields[3].parse::<u64>()) else {
            continue;
        };
        if *name != "total" {
            *out.entry((*name).to_owned()).or_insert(0) += calls;
        }
    }
    out
}

/// One hook run under `strace -f -c` (every thread of the process counted); its reply read back.
fn traced_hook(
    tools: &Tools,
    ctx: &Path,
    world: &World,
    session: &str,
    prompt: &str,
) -> BenchResult<TracedRun> {
    let table = tools.tables.path().join("calls");
    // A stale table must never stand in for this run's.
    match std::fs::remove_file(&table) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let wrapper = [
        tools.strace.as_os_str(),
        OsStr::new("-f"),
        OsStr::new("-c"),
        OsStr::new("-o"),
        table.as_os_str(),
        OsStr::new("--"),
    ];
    let (records_before, kinds_before) = journal_records(ctx, world)?;
    let host_before = host_files(world)?;
    let (_, reply) = hook_run_under(&wrapper, ctx, world, session, prompt)?;
    let host_changes = catalog_scale::touched(&host_before, &host_files(world)?);
    let (records_after, kinds_after) = journal_records(ctx, world)?;
    let text = std::fs::read_to_string(&table)?;
    let calls = strace_calls(&text);
    if calls.is_empty() {
        return Err(format!("strace's table names no calls: {text:?}").into());
    }
    let kinds_appended = kinds_after
        .into_iter()
        .filter_map(|(kind, after)| {
            let grew = after.saturating_sub(kinds_before.get(&kind).copied().unwrap_or(0));
            (grew > 0).then_some((kind, grew))
        })
        .collect();
    Ok(TracedRun {
        calls,
        effect: reply.as_ref().map(Effect::of_reply).unwrap_or_default(),
        host_changes,
        records_appended: records_after.saturating_sub(records_before),
        kinds_appended,
    })
}

/// The journal's record count and its records by the kind of their stream's first record, as
/// `ctx inspect --json` (which only reads) reports them (spec/cli.md §5.2).
fn journal_records(ctx: &Path, world: &World) -> BenchResult<(u64, BTreeMap<String, u64>)> {
    let (_, output) = timed(&mut world.ctx(ctx, &["inspect", "--json"]), b"")?;
    check_exit("ctx inspect --json", &output)?;
    let inspect: Value = serde_json::from_slice(output.stdout.trim_ascii())?;
    let records = inspect
        .get("records")
        .and_then(Value::as_u64)
        .ok_or("ctx inspect --json named no record count")?;
    let mut kinds = BTreeMap::new();
    for kind in inspect
        .get("kinds")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        if let (Some(name), Some(count)) = (
            kind.get("kind").and_then(Value::as_str),
            kind.get("records").and_then(Value::as_u64),
        ) {
            kinds.insert(name.to_owned(), count);
        }
    }
    Ok((records, kinds))
}

/// Every file and link where ctx activates on the host (spec/cli.md §7: `~/.claude/skills`,
/// `~/.claude/agents/ctx`, the project's `.mcp.json`), by full path; directories are left out,
/// since adding an entry changes its directory's time.
fn host_files(world: &World) -> BenchResult<catalog_scale::Snapshot> {
    let mut out = catalog_scale::Snapshot::new();
    for root in [world.home.join(".claude"), world.project.clone()] {
        if !root.is_dir() {
            continue;
        }
        for (path, meta) in catalog_scale::snapshot(&root)? {
            if !meta.2 {
                out.insert(root.join(path), meta);
            }
        }
    }
    Ok(out)
}

/// The traced hooks of one case's warm data directory, in sessions of their own (the prompts of
/// the module documentation).
fn trace_case(
    tools: &Tools,
    ctx: &Path,
    world: &World,
    key: &'static str,
    prompt: &str,
) -> BenchResult<Vec<Traced>> {
    let traced = |scenario, runs, skipped: Option<&str>| Traced {
        case_key: key,
        scenario,
        runs,
        skipped: skipped.map(str::to_owned),
    };
    let mut out = Vec::new();

    // No effect: the session's first prompt activates what it loads and asks for what it
    // installs; the same prompt again selects the same, all of it active or asked for already.
    hook_run(ctx, world, "strace-same", prompt)?;
    let mut runs = Vec::new();
    for _ in 0..STRACE_NO_EFFECT_RUNS {
        runs.push(traced_hook(tools, ctx, world, "strace-same", prompt)?);
    }
    out.push(traced(Scenario::NoEffect, runs, None));
    // Nothing planned: a follow-up prompt of the same session that names no catalog tag, as a
    // person's "yes, continue" does; it plans nothing and so shifts nothing (spec/cli.md §7.3).
    let mut runs = Vec::new();
    for i in 0..STRACE_NO_EFFECT_RUNS {
        let prompt = format!("{NOTHING_PLANNED_PROMPT} ({i})");
        runs.push(traced_hook(tools, ctx, world, "strace-same", &prompt)?);
    }
    out.push(traced(Scenario::NothingPlanned, runs, None));

    let Some(script) = &tools.script else {
        let why = "`script` (util-linux) not found: the person decides at a terminal";
        out.push(traced(Scenario::OneActivation, Vec::new(), Some(why)));
        out.push(traced(Scenario::OneInstall, Vec::new(), Some(why)));
        return Ok(out);
    };
    let (_, reply) = hook_run(ctx, world, "strace-person", prompt)?;
    let asked = reply
        .as_ref()
        .and_then(|r| r.get("systemMessage"))
        .and_then(Value::as_str)
        .map(asked_in)
        .unwrap_or_default();
    let Some(((_, approved), others)) = asked.split_first() else {
        let why = "the session's first prompt asked for no install";
        out.push(traced(Scenario::OneActivation, Vec::new(), Some(why)));
        out.push(traced(Scenario::OneInstall, Vec::new(), Some(why)));
        return Ok(out);
    };
    // The person: a sealed device key, one install approved, the others denied for good, so
    // that a later session's prompt chooses the approved install alone.
    let person = Terminal { script, ctx, world };
    person.run(&["key", "init"], &["choose a passphrase", "type it again"])?;
    person.run(
        &["consent", "approve", approved.as_str(), "--yes"],
        &["passphrase for"],
    )?;
    for (_, other) in others {
        person.run(
            &[
                "consent",
                "deny",
                other.as_str(),
                "--yes",
                "--scope",
                "always",
            ],
            &["passphrase for"],
        )?;
    }
    // One activation: the approved install is no longer waiting, so the session's next prompt
    // activates it; everything else that prompt selects is active or decided already.
    let activation = traced_hook(tools, ctx, world, "strace-person", prompt)?;
    out.push(traced(Scenario::OneActivation, vec![activation], None));
    // One install: a new session chooses the approved install again (a capability is asked for
    // once per host session), and the hook resolves its new challenge on the person's grant at
    // the earlier one and installs it (spec/decisions.md §16.3).
    let install = traced_hook(tools, ctx, world, "strace-second", prompt)?;
    out.push(traced(Scenario::OneInstall, vec![install], None));
    Ok(out)
}

/// The person at their own terminal: `ctx` run in a pseudo-terminal that `script` provides,
/// because ctx reads answers and passphrases only from `/dev/tty` (spec/decisions.md §12.3).
struct Terminal<'a> {
    script: &'a Path,
    ctx: &'a Path,
    world: &'a World,
}

/// `text` as one word of a POSIX shell command line.
fn shell_word(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

impl Terminal<'_> {
    /// Runs `ctx --data-dir DATA args…` in the world's environment and, for each of `prompts` in
    /// turn, types [`PASSPHRASE`] once the terminal shows it. ctx turns echo off and discards
    /// what was typed ahead before it shows a passphrase prompt, so typing only after the prompt
    /// is shown is what makes the answer arrive. Fails unless ctx exits 0.
    fn run(&self, args: &[&str], prompts: &[&str]) -> BenchResult<String> {
        let path = |p: &Path| {
            p.to_str()
                .map(shell_word)
                .ok_or_else(|| format!("the path {} is not UTF-8", p.display()))
        };
        let mut line = format!(
            "exec {} --data-dir {}",
            path(self.ctx)?,
            path(&self.world.data)?
        );
        for arg in args {
            line.push(' ');
            line.push_str(&shell_word(arg));
        }
        let mut command = Command::new(self.script);
        command
            .env_clear()
            .env("HOME", &self.world.home)
            .env("CLAUDE_PROJECT_DIR", &self.world.project)
            .current_dir(&self.world.project)
            // Quiet, the child's exit status as its own, no typescript file.
            .args(["-q", "-e", "-c"])
            .arg(&line)
            .arg("/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        if let Some(url) = &self.world.journal_url {
            command.env(JOURNAL_URL_ENV, url);
        }
        let what = format!("ctx {} at the person's terminal", args.join(" "));
        let mut child = command.spawn()?;
        let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{what}: {SCRIPT_BIN}'s pipes were not opened").into());
        };
        // The terminal's output is read as it comes, so each prompt can be seen while ctx waits.
        let shown = Arc::new(Mutex::new(String::new()));
        let reader = {
            let shown = Arc::clone(&shown);
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stdout.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut text) = shown.lock() {
                        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
                    }
                }
            })
        };
        let snapshot = || shown.lock().map(|t| t.clone()).unwrap_or_default();
        let deadline = Instant::now() + TERMINAL_TIMEOUT;
        let mut seen = 0;
        let mut status: Option<ExitStatus> = None;
        for prompt in prompts {
            loop {
                let text = snapshot();
                if let Some(at) = text.get(seen..).and_then(|rest| rest.find(prompt)) {
                    seen += at + prompt.len();
                    break;
                }
                if let Some(exit) = child.try_wait()? {
                    status = Some(exit);
                    break;
                }
                if Instant::now() > deadline {
                    child.kill()?;
                    return Err(
                        format!("{what}: never asked {prompt:?}; it showed {text:?}").into(),
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if status.is_some() {
                break;
            }
            stdin.write_all(format!("{PASSPHRASE}\r").as_bytes())?;
            stdin.flush()?;
        }
        let status = loop {
            if let Some(exit) = status {
                break exit;
            }
            status = child.try_wait()?;
            if let Some(exit) = status {
                break exit;
            }
            if Instant::now() > deadline {
                child.kill()?;
                return Err(format!("{what}: did not exit; it showed {:?}", snapshot()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(stdin);
        // The reader ends at the terminal's end of file, which the exit brings.
        if reader.join().is_err() {
            return Err(format!("{what}: reading the terminal failed").into());
        }
        let text = snapshot();
        if !status.success() {
            return Err(format!("{what} failed ({status}): {}", text.trim()).into());
        }
        Ok(text)
    }
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

    /// The `ctx` binary of this test's profile, built if needed, as the acceptance tests do.
    fn test_ctx() -> PathBuf {
        // The test binary is <target>/<profile>/deps/ctx_benches-<hash>.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        build_ctx(profile_dir.parent().unwrap(), release).unwrap()
    }

    /// The smoke mode, run by `cargo test` and by the benches' self-test
    /// (`cargo bench -p ctx-benches -- --test`): a couple of runs of every case against the `ctx`
    /// binary of this test's profile, proving the harness works end to end. The figures are
    /// printed, not judged: a debug build or a busy CI machine says nothing about the targets.
    #[test]
    fn smoke_measures_every_case() {
        let ctx = test_ctx();
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
            catalog_sizes: Vec::new(),
            strace: false,
        })
        .unwrap();
        println!("{}", report.markdown());
        assert_eq!(report.catalogs.len(), 1);
        let catalog = &report.catalogs[0];
        assert_eq!(catalog.entries, None);
        assert_eq!(catalog.floor.latencies.len(), SMOKE_RUNS);
        assert_eq!(
            catalog.cases.len(),
            1 + usize::from(Config::default_tmpfs_dir().is_some())
                + usize::from(postgres.is_some())
        );
        assert_eq!(catalog.postgres_over_redb().is_some(), postgres.is_some());
        assert!(catalog.traced.is_empty());
        for case in &catalog.cases {
            assert_eq!(case.all.latencies.len(), SMOKE_RUNS);
            assert_eq!(
                case.new_session.latencies.len() + case.same_session.latencies.len(),
                SMOKE_RUNS
            );
        }
        let json = report.to_json();
        assert_eq!(json["catalogs"][0]["cases"][0]["all"]["runs"], SMOKE_RUNS);
        assert_eq!(json["catalogs"][0]["catalog"], "sample");
        assert!(report.markdown().contains("spawn floor"));
    }

    /// `--catalog-size 50 --strace` at the smoke size: the generated catalog ingested into every
    /// case, its ratio row, and (when strace can trace here) the four traced prompts, each doing
    /// what its name says. Counts are printed, not judged.
    #[test]
    fn smoke_measures_a_generated_catalog_with_strace() {
        let ctx = test_ctx();
        let disk = tempfile::tempdir().unwrap();
        let report = run(&Config {
            ctx,
            runs: 1,
            disk_dir: disk.path().to_owned(),
            tmpfs_dir: Config::default_tmpfs_dir(),
            journal_url: None,
            catalog_sizes: vec![50],
            strace: true,
        })
        .unwrap();
        println!("{}", report.markdown());
        let catalog = &report.catalogs[0];
        assert_eq!(catalog.entries, Some(50));
        assert_eq!(catalog.generated.as_ref().map(|g| g.entries), Some(50));
        for case in &catalog.cases {
            assert_eq!(case.all.latencies.len(), 1);
            assert!(case.ingest > Duration::ZERO);
            assert_eq!(report.p50_over_smallest(0, case.key), Some(1.0));
        }
        assert!(report.markdown().contains("p50 / smallest"));
        if let Some(why) = &report.strace_skipped {
            println!("the traced part skipped: {why}");
            assert!(catalog.traced.is_empty());
            return;
        }
        assert_eq!(catalog.traced.len(), 4 * catalog.cases.len());
        for traced in &catalog.traced {
            if traced.skipped.is_some() {
                continue;
            }
            for run in &traced.runs {
                assert!(run.count(&["openat"]) > 0);
                assert!(run.records_appended > 0, "{run:?}");
            }
            let run = &traced.runs[0];
            match traced.scenario {
                Scenario::NothingPlanned | Scenario::NoEffect => {
                    assert_eq!(traced.runs.len(), STRACE_NO_EFFECT_RUNS);
                    assert!(run.host_changes.is_empty(), "{run:?}");
                    assert_eq!(run.install_records(), 0, "{run:?}");
                }
                Scenario::OneActivation => {
                    assert_eq!(run.host_changes.len(), 1, "{run:?}");
                    assert_eq!(run.install_records(), 0, "{run:?}");
                }
                Scenario::OneInstall => {
                    assert!(run.install_records() > 0, "{run:?}");
                }
            }
        }
        let json = report.to_json();
        assert!(
            json["catalogs"][0]["strace"][0]["median"]["durable_syncs"].is_u64(),
            "{json}"
        );
    }

    /// The session-growth mode end to end with a tiny size (the figures are printed, not judged).
    #[test]
    fn smoke_measures_session_growth() {
        let ctx = test_ctx();
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

    #[test]
    fn catalog_sizes_are_parsed_sorted_and_deduplicated() {
        assert_eq!(
            Config::catalog_sizes_from("10000, 50,1_000,50").unwrap(),
            vec![50, 1000, 10000]
        );
        assert!(Config::catalog_sizes_from("50,0").is_err());
        assert!(Config::catalog_sizes_from("50,,1000").is_err());
        assert!(Config::catalog_sizes_from("many").is_err());
    }

    #[test]
    fn strace_tables_are_counted_per_call() {
        let table = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.000400          10        40           statx
 30.00    0.000300           3       100         7 openat
 20.00    0.000200         100         2           fdatasync
  0.00    0.000000           0         1           getdents64
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000           6       143         7 total
";
        let calls = strace_calls(table);
        assert_eq!(calls.len(), 4, "{calls:?}");
        assert_eq!(calls["statx"], 40);
        assert_eq!(calls["openat"], 100);
        let run = TracedRun {
            calls,
            kinds_appended: BTreeMap::from([(INSTALL_CLAIM_KIND.to_owned(), 2)]),
            records_appended: 9,
            ..TracedRun::default()
        };
        assert_eq!(run.install_records(), 2);
        assert_eq!(
            run.did(),
            "host files 0, records +9, install records +2; reply: nothing"
        );
        assert_eq!(run.count(DURABLE_SYNCS), 2);
        assert_eq!(run.count(STAT_CALLS), 40);
        assert_eq!(run.count(STAT_AND_OPEN), 140);
        assert_eq!(fmt_range(&[3, 1, 2]), "1-3");
        assert_eq!(fmt_range(&[2, 2]), "2");
        assert_eq!(fmt_range(&[]), "-");
    }

    #[test]
    fn replies_are_read_for_what_the_hook_did() {
        let (d1, d2) = ("ab".repeat(32), "cd".repeat(32));
        let one = json!({
            "hookSpecificOutput": {"additionalContext":
                "ctx plan p: skill:a (A) is active. Activated now: skill:a, agent:b. \
                 Deactivated: skill:c."},
            "systemMessage": format!("ctx: agent:x awaits your consent. In your own terminal run \
                `ctx consent approve {d1}` (or `ctx consent deny {d1}`).")
        });
        let effect = Effect::of_reply(&one);
        assert_eq!(effect.activated, ["skill:a", "agent:b"]);
        assert_eq!(effect.deactivated, ["skill:c"]);
        assert_eq!(effect.asked, ["agent:x"]);
        assert_eq!(effect.summary(), "activated 2, deactivated 1, asked 1");
        let several = format!(
            "ctx: agent:x, mcp-server:y await your consent. In your own terminal run \
             `ctx consent approve {d1}` (agent:x), `ctx consent approve {d2}` (mcp-server:y); or \
             `ctx consent pending` to see them all."
        );
        assert_eq!(
            asked_in(&several),
            [
                ("agent:x".to_owned(), d1.clone()),
                ("mcp-server:y".to_owned(), d2.clone())
            ]
        );
        let installed = json!({"hookSpecificOutput": {"additionalContext":
            "ctx plan p: agent:x (X) is installed on the person's earlier approval."}});
        assert_eq!(Effect::of_reply(&installed).summary(), "installed 1");
        assert_eq!(Effect::of_reply(&json!({})).summary(), "nothing");
    }
}
