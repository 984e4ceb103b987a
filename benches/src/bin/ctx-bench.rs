//! `ctx-bench compare [--quick]`: the side-by-side peer comparison; `ctx-bench hook-latency`: the
//! cold-start wall time of `ctx hook claude user-prompt-submit`. See `ctx-bench --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use ctx_benches::compare::{self, Config};
use ctx_benches::{BenchResult, hook_latency, target_dir};

const HELP: &str = "\
ctx-bench: side-by-side throughput of the ctx journal and its peers, measured in one run; and
the cold-start latency of the ctx hook process.

USAGE:
    ctx-bench compare [--quick] [--dir DIR] [--out FILE]
    ctx-bench hook-latency [--ctx PATH] [--runs N] [--test] [--disk-dir DIR] [--tmpfs-dir DIR]
                           [--out FILE]
    ctx-bench --help

compare measures, each in a fresh temp dir under one base directory (so on one disk):
  raw disk     4 KiB overwrite in place + fdatasync per op; 4 KiB append + fdatasync per op
  SQLite       WAL, synchronous=FULL, the journal's record shape: single inserts (one txn each),
               1000 inserts per txn, 8 writer threads (own connections, busy_timeout, single
               inserts), and for context 8 threads sharing one connection behind a mutex
  raw redb     u64 keys to the journal's ~200 B payloads, Durability::Immediate: one record per
               commit, 1000 records per commit
  journal      single-record appends; 1000-record append_batch commits (64 streams x 15-16
               records, the 64-stream window rotating over 1000 streams, because one atomic
               append may name at most 64 streams); 1000-record appends to one stream; 8 appender
               threads doing single-record appends (group commit)
  replay       journal Journal::scan (digest + MAC verified) with an rkyv payload access and with
               a no-op closure, vs SQLite SELECT ... ORDER BY position + serde_json decode
and prints the ratios p1 (journal single / raw overwrite), p2 (journal 8 appenders / SQLite 8
writers), p3 (journal batches / raw redb batches), p4_records_per_s (journal replay) and
p4_vs_sqlite_json (journal replay / SQLite + JSON).

Measurements are interleaved: every measurement is set up first (its own temp dir, database
and counters, kept for the whole run), then all of them run in 5 rounds, one after another
within each round, so a slow spell of a shared disk hits every peer rather than one. A figure is
the median of its 5 round rates (each round's rate is in the JSON).
  timed rounds (raw disk, single commits, concurrent writers, replay) last a fixed wall-clock
    budget: 0.4 s with --quick, 3 s otherwise (or stop at 50k / 500k ops per thread);
  batch rounds (1000 records per commit) write a fixed count: 30k records with --quick, 150k
    otherwise, so SQLite, raw redb and the journal grow to the same size (safety stop 20 s / 60 s).
Replay loads 50k (--quick) or 200k records into each store before the rounds and repeats whole
scans for each round's budget (at least one scan). On a 2-core machine --quick takes under a
minute and the full run about five minutes.

OPTIONS:
    --quick       short rounds (0.4 s timed, 30k records per batch round, 50k replay records)
    --dir DIR     base directory for the temp dirs (default: the system temp dir)
    --out FILE    where to write the JSON (default: <workspace>/target/ctx-bench/compare.json)
    -h, --help    print this help

The markdown table goes to stdout, progress to stderr.

hook-latency measures the wall time (spawn -> exit, as the host sees it) of cold
`ctx hook claude user-prompt-submit` processes on a warm journal. Each case gets its own temp
dir with a data directory, a HOME and a project directory (the hook input's cwd); the journal is
warmed with `ctx catalog ingest` and one hook call. Then N rounds each run, interleaved:
  ctx --version                   the process-spawn floor (opens nothing)
  hook, excluding fsync           data dir on a tmpfs (/dev/shm), where fsync is nearly free
  hook, including fsync           data dir on the disk (the system temp dir or --disk-dir)
Every 4th run starts a new session; the others are follow-up prompts of the session; every
prompt is new. Each run must exit 0 and print nothing or one JSON object. Reported: p50, p90,
p99 and max per case, split by new session / follow-up, against the targets p50 < 20 ms
(excluding fsync) and < 50 ms (including). The table goes to stdout; the JSON (with every run's
wall time) to target/ctx-bench/hook-latency.json.

OPTIONS (hook-latency):
    --ctx PATH        the ctx binary (default: cargo build --release --bin ctx, with $CARGO or
                      cargo, then <workspace>/target/release/ctx, so the current source is measured)
    --runs N          measured runs per case (default: $CTX_BENCH_HOOK_RUNS, else 50)
    --test            smoke mode: 2 runs per case, no JSON written
    --disk-dir DIR    base directory of the including-fsync case (default: the system temp dir)
    --tmpfs-dir DIR   base directory of the excluding-fsync case (default: /dev/shm if it exists;
                      without one that case is skipped and the report says so)
    --out FILE        where to write the JSON (default: <workspace>/target/ctx-bench/hook-latency.json)";

struct CompareArgs {
    quick: bool,
    dir: Option<PathBuf>,
    out: Option<PathBuf>,
}

struct HookArgs {
    ctx: Option<PathBuf>,
    runs: Option<usize>,
    smoke: bool,
    disk_dir: Option<PathBuf>,
    tmpfs_dir: Option<PathBuf>,
    out: Option<PathBuf>,
}

enum Args {
    Compare(CompareArgs),
    HookLatency(HookArgs),
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut it = args.iter();
    let hook = match it.next().map(String::as_str) {
        Some("compare") => false,
        Some("hook-latency") => true,
        Some("-h" | "--help" | "help") | None => return Ok(None),
        Some(other) => return Err(format!("unknown subcommand {other:?}")),
    };
    let mut compare = CompareArgs {
        quick: false,
        dir: None,
        out: None,
    };
    let mut hook_args = HookArgs {
        ctx: None,
        runs: None,
        smoke: false,
        disk_dir: None,
        tmpfs_dir: None,
        out: None,
    };
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match (hook, arg.as_str()) {
            (false, "--quick") => compare.quick = true,
            (false, "--dir") => compare.dir = Some(value()?),
            (false, "--out") => compare.out = Some(value()?),
            (true, "--ctx") => hook_args.ctx = Some(value()?),
            (true, "--runs") => {
                let text = value()?;
                let runs = text
                    .to_str()
                    .and_then(|t| t.parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .ok_or_else(|| format!("--runs {} is not a positive number", text.display()))?;
                hook_args.runs = Some(runs);
            }
            (true, "--test" | "--smoke") => hook_args.smoke = true,
            (true, "--disk-dir") => hook_args.disk_dir = Some(value()?),
            (true, "--tmpfs-dir") => hook_args.tmpfs_dir = Some(value()?),
            (true, "--out") => hook_args.out = Some(value()?),
            (_, "-h" | "--help") => return Ok(None),
            (_, other) => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(if hook {
        Args::HookLatency(hook_args)
    } else {
        Args::Compare(compare)
    }))
}

fn write_json(out: &std::path::Path, json: &serde_json::Value) -> BenchResult<()> {
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(json)? + "\n")?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn run_compare(args: CompareArgs) -> BenchResult<()> {
    let base = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let out = args
        .out
        .unwrap_or_else(|| target_dir().join("ctx-bench").join("compare.json"));
    let report = compare::run(&Config::new(args.quick, base))?;
    println!("{}", report.markdown());
    write_json(&out, &report.to_json())
}

fn run_hook_latency(args: HookArgs) -> BenchResult<()> {
    let ctx = match args.ctx {
        Some(ctx) => ctx,
        None => {
            eprintln!("building the release ctx binary (cargo build --release --bin ctx)");
            hook_latency::build_ctx(&target_dir(), true)?
        }
    };
    let runs = if args.smoke {
        hook_latency::SMOKE_RUNS
    } else {
        hook_latency::Config::runs_from(args.runs)?
    };
    let disk_dir = match args.disk_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let tmpfs_dir = match args.tmpfs_dir {
        Some(dir) => Some(std::path::absolute(dir)?),
        None => hook_latency::Config::default_tmpfs_dir(),
    };
    let report = hook_latency::run(&hook_latency::Config {
        ctx,
        runs,
        disk_dir,
        tmpfs_dir,
    })?;
    println!("{}", report.markdown());
    // A smoke run's figures mean nothing; it leaves the last real report in place.
    if !args.smoke {
        let out = args
            .out
            .unwrap_or_else(|| target_dir().join("ctx-bench").join("hook-latency.json"));
        write_json(&out, &report.to_json())?;
    }
    Ok(())
}

fn run(args: Args) -> BenchResult<()> {
    match args {
        Args::Compare(args) => run_compare(args),
        Args::HookLatency(args) => run_hook_latency(args),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok(None) => {
            println!("{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Some(parsed)) => match run(parsed) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ctx-bench: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("ctx-bench: {e}\n\n{HELP}");
            ExitCode::from(2)
        }
    }
}
