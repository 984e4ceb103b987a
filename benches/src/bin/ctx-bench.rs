//! `ctx-bench compare [--quick]`: the side-by-side peer comparison. See `ctx-bench --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use ctx_benches::BenchResult;
use ctx_benches::compare::{self, Config};

const HELP: &str = "\
ctx-bench: side-by-side throughput of the ctx journal and its peers, measured in one run.

USAGE:
    ctx-bench compare [--quick] [--dir DIR] [--out FILE]
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

The markdown table goes to stdout, progress to stderr.";

/// The workspace's target directory: `CARGO_TARGET_DIR` if set, else `<workspace>/target` found
/// from this crate's manifest dir, else `./target`.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match manifest.parent() {
        Some(root) if root.join("Cargo.toml").is_file() => root.join("target"),
        _ => PathBuf::from("target"),
    }
}

struct Args {
    quick: bool,
    dir: Option<PathBuf>,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("compare") => {}
        Some("-h" | "--help" | "help") | None => return Ok(None),
        Some(other) => return Err(format!("unknown subcommand {other:?}")),
    }
    let mut parsed = Args {
        quick: false,
        dir: None,
        out: None,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--dir" => parsed.dir = Some(it.next().ok_or("--dir needs a value")?.into()),
            "--out" => parsed.out = Some(it.next().ok_or("--out needs a value")?.into()),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(parsed))
}

fn run(args: Args) -> BenchResult<()> {
    let base = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let out = args
        .out
        .unwrap_or_else(|| target_dir().join("ctx-bench").join("compare.json"));
    let report = compare::run(&Config::new(args.quick, base))?;
    println!("{}", report.markdown());
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&report.to_json())? + "\n",
    )?;
    eprintln!("wrote {}", out.display());
    Ok(())
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
