//! `ctx-bench compare`: every peer measured in one run, on temp dirs under one base directory
//! (so on one disk), and the ratios between them.

pub mod journal;
pub mod raw;
pub mod redb_raw;
pub mod sqlite;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::BenchResult;
use crate::compare::journal::ReplayWork;
use crate::measure::{Figure, Sample};
use crate::workload::{BATCH_RECORDS, Payloads, STREAMS, WindowedBatches};

/// Threads in the concurrent-writer measurements.
pub const WRITER_THREADS: usize = 8;

/// Interleaved rounds per measurement; each figure is the median of its rounds.
pub const ROUNDS: usize = 5;

type Meta = (&'static str, &'static str, &'static str);
const RAW_OVERWRITE: Meta = (
    "raw_overwrite_4k_fdatasync_ops_per_s",
    "raw: overwrite 4 KiB in place + fdatasync",
    "ops/s",
);
const RAW_APPEND: Meta = (
    "raw_append_4k_fdatasync_ops_per_s",
    "raw: append 4 KiB + fdatasync",
    "ops/s",
);
const SQLITE_SINGLE: Meta = (
    "sqlite_single_commits_per_s",
    "SQLite WAL FULL: single inserts, 1 txn each",
    "commits/s",
);
const SQLITE_BATCH: Meta = (
    "sqlite_batch_records_per_s",
    "SQLite WAL FULL: 1000 inserts per txn",
    "records/s",
);
const SQLITE_8: Meta = (
    "sqlite_8_writers_records_per_s",
    "SQLite WAL FULL: 8 writer threads, own connections, single inserts",
    "records/s",
);
const SQLITE_8_SHARED: Meta = (
    "sqlite_8_threads_shared_connection_records_per_s",
    "SQLite WAL FULL: 8 threads sharing one connection behind a mutex, single inserts",
    "records/s",
);
const REDB_SINGLE: Meta = (
    "redb_single_commits_per_s",
    "raw redb: 1 record per commit",
    "commits/s",
);
const REDB_BATCH: Meta = (
    "redb_batch_records_per_s",
    "raw redb: 1000 records per commit",
    "records/s",
);
const JOURNAL_SINGLE: Meta = (
    "journal_single_appends_per_s",
    "journal: single-record appends",
    "commits/s",
);
const JOURNAL_BATCH: Meta = (
    "journal_batch_records_per_s",
    "journal: 1000-record append_batch, 64 streams x 15-16 records, window rotating over 1000 \
     streams",
    "records/s",
);
const JOURNAL_BATCH_ONE: Meta = (
    "journal_batch_one_stream_records_per_s",
    "journal: 1000-record append to one stream",
    "records/s",
);
const JOURNAL_8: Meta = (
    "journal_8_appenders_records_per_s",
    "journal: 8 appender threads, single-record appends (group commit)",
    "records/s",
);
const JOURNAL_REPLAY: Meta = (
    "journal_replay_records_per_s",
    "journal replay: scan (verify digest + MAC) + rkyv access of each payload",
    "records/s",
);
const JOURNAL_REPLAY_NOOP: Meta = (
    "journal_replay_noop_records_per_s",
    "journal replay: scan (verify digest + MAC), no-op closure",
    "records/s",
);
const SQLITE_REPLAY: Meta = (
    "sqlite_replay_json_records_per_s",
    "SQLite replay: SELECT ... ORDER BY position + serde_json decode of each payload",
    "records/s",
);

/// How long and how much a measurement may run: in [`Config`] the totals over all rounds, as
/// handed to a [`Round`] the share of one round.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock budget.
    pub budget: Duration,
    /// Cap on operations of a single-op measurement (per thread in the concurrent ones).
    pub single_ops_max: u64,
    /// Cap on records of a batch measurement.
    pub batch_records_max: u64,
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Config {
    pub quick: bool,
    /// One round of a time-boxed measurement (raw disk, single commits, concurrent writers,
    /// replay): its budget and its cap on operations per thread.
    pub timed: Limits,
    /// One round of a batch measurement: a fixed number of records, so every store is written to
    /// the same size, with `budget` only as a safety stop.
    pub batch: Limits,
    /// Records loaded into the journal and SQLite for the replay comparison.
    pub replay_records: u64,
    /// Directory the temp dirs are made in.
    pub base_dir: PathBuf,
}

impl Config {
    /// The quick (`--quick`) or full settings, with temp dirs under `base_dir`.
    pub fn new(quick: bool, base_dir: PathBuf) -> Config {
        // Timed rounds: budget and per-thread op cap. Batch rounds: records written and the
        // safety stop. Replay: records loaded into each store.
        let (round_ms, ops_max, batch_records, batch_stop_s, replay_records) = if quick {
            (400, 50_000, 30_000, 20, 50_000)
        } else {
            (3_000, 500_000, 150_000, 60, 200_000)
        };
        let timed = Limits {
            budget: Duration::from_millis(round_ms),
            single_ops_max: ops_max,
            batch_records_max: 0,
        };
        let batch = Limits {
            budget: Duration::from_secs(batch_stop_s),
            single_ops_max: 0,
            batch_records_max: batch_records,
        };
        Config {
            quick,
            timed,
            batch,
            replay_records,
            base_dir,
        }
    }
}

/// A ratio between two figures of the same run.
#[derive(Debug, Clone)]
pub struct Ratio {
    pub key: &'static str,
    pub label: &'static str,
    pub value: f64,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub environment: Map<String, Value>,
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

/// One round of a measurement: runs for `limits.budget` (or to the caps) and reports.
pub type Round<'a> = Box<dyn FnMut(&Limits) -> BenchResult<Sample> + 'a>;

/// A measurement, its state (inside `round`) and its temp dir (dropped after `round`).
struct Runner<'p> {
    limits: Limits,
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    round: Round<'p>,
    samples: Vec<Sample>,
    _dir: Option<tempfile::TempDir>,
}

fn temp_dir(config: &Config, name: &str) -> BenchResult<tempfile::TempDir> {
    let prefix = format!("ctx-bench-{name}-");
    Ok(tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&config.base_dir)?)
}

/// Sets up one measurement in a fresh temp dir.
fn runner<'p>(
    config: &Config,
    limits: Limits,
    (key, label, unit): (&'static str, &'static str, &'static str),
    setup: impl FnOnce(&Path) -> BenchResult<Round<'p>>,
) -> BenchResult<Runner<'p>> {
    let dir = temp_dir(config, key)?;
    let round = setup(dir.path())?;
    Ok(Runner {
        limits,
        key,
        label,
        unit,
        round,
        samples: Vec::new(),
        _dir: Some(dir),
    })
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn value_of(figures: &[Figure], key: &str) -> f64 {
    figures
        .iter()
        .find(|f| f.key == key)
        .map_or(0.0, |f| f.value)
}

/// Sets up every measurement, runs them in [`ROUNDS`] interleaved rounds (so a slow spell of a
/// shared disk hits every peer rather than one), and computes the ratios from the medians.
pub fn run(config: &Config) -> BenchResult<Report> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.base_dir)?;
    let payloads = Payloads::new()?;
    let p = &payloads;
    let (timed, batch) = (config.timed, config.batch);
    eprintln!(
        "ctx-bench compare ({}): {} rounds x {} ms per timed measurement, {} records per batch \
         round, temp dirs in {}",
        if config.quick { "quick" } else { "full" },
        ROUNDS,
        timed.budget.as_millis(),
        batch.batch_records_max,
        config.base_dir.display()
    );

    eprintln!(
        "setting up (replay data: {} records per store) ...",
        config.replay_records
    );
    let journal_dir = temp_dir(config, "journal-replay")?;
    let loaded_journal = Arc::new(journal::load(journal_dir.path(), p, config.replay_records)?);
    let load_figure = Figure::from_rounds(
        "journal_replay_load_records_per_s",
        "journal: replay data load (same windowed 1000-record batches, one run)",
        "records/s",
        std::slice::from_ref(&loaded_journal.load),
    );
    let sqlite_dir = temp_dir(config, "sqlite-replay")?;
    let loaded_sqlite = sqlite::load(sqlite_dir.path(), p, config.replay_records)?;

    let mut runners = vec![
        runner(config, timed, RAW_OVERWRITE, raw::overwrite_4k)?,
        runner(config, timed, RAW_APPEND, raw::append_4k)?,
        runner(config, timed, SQLITE_SINGLE, |d| sqlite::single(d, p))?,
        runner(config, batch, SQLITE_BATCH, |d| sqlite::batch(d, p))?,
        runner(config, timed, SQLITE_8, |d| {
            sqlite::concurrent(d, p, WRITER_THREADS)
        })?,
        runner(config, timed, SQLITE_8_SHARED, |d| {
            sqlite::shared_connection(d, p, WRITER_THREADS)
        })?,
        runner(config, timed, REDB_SINGLE, |d| redb_raw::single(d, p))?,
        runner(config, batch, REDB_BATCH, |d| redb_raw::batch(d, p))?,
        runner(config, timed, JOURNAL_SINGLE, |d| journal::single(d, p))?,
        runner(config, batch, JOURNAL_BATCH, |d| {
            journal::batch_windowed(d, p)
        })?,
        runner(config, batch, JOURNAL_BATCH_ONE, |d| {
            journal::batch_one_stream(d, p)
        })?,
        runner(config, timed, JOURNAL_8, |d| {
            journal::concurrent(d, p, WRITER_THREADS)
        })?,
    ];
    let replays = [
        (
            JOURNAL_REPLAY,
            journal::replay(loaded_journal.clone(), ReplayWork::AccessPayload),
        ),
        (
            JOURNAL_REPLAY_NOOP,
            journal::replay(loaded_journal, ReplayWork::Noop),
        ),
        (SQLITE_REPLAY, sqlite::replay(loaded_sqlite)),
    ];
    for ((key, label, unit), round) in replays {
        runners.push(Runner {
            limits: timed,
            key,
            label,
            unit,
            round,
            samples: Vec::new(),
            _dir: None,
        });
    }

    for r in 1..=ROUNDS {
        for runner in &mut runners {
            let sample = (runner.round)(&runner.limits)?;
            eprintln!(
                "  round {r}/{ROUNDS}: {} ... {:.0} {}",
                runner.label,
                sample.rate(),
                runner.unit
            );
            runner.samples.push(sample);
        }
    }
    let mut figs: Vec<Figure> = runners
        .iter()
        .map(|r| {
            let mut f = Figure::from_rounds(r.key, r.label, r.unit, &r.samples);
            if r.unit == "records/s" && r.samples.iter().all(|s| s.latencies.is_empty()) {
                (f.p50_us, f.p99_us) = (None, None);
            }
            f
        })
        .collect();
    figs.push(load_figure);
    drop(runners);
    drop((journal_dir, sqlite_dir));
    let v = |key: (&str, &str, &str)| value_of(&figs, key.0);
    let (raw_overwrite, sqlite_8, redb_batch) = (v(RAW_OVERWRITE), v(SQLITE_8), v(REDB_BATCH));
    let (journal_single, journal_batch, journal_8) =
        (v(JOURNAL_SINGLE), v(JOURNAL_BATCH), v(JOURNAL_8));
    let (journal_replay, sqlite_replay) = (v(JOURNAL_REPLAY), v(SQLITE_REPLAY));

    let ratios = vec![
        Ratio {
            key: "p1",
            label: "P1 journal single appends / raw overwrite+fdatasync limit",
            value: ratio(journal_single, raw_overwrite),
        },
        Ratio {
            key: "p2",
            label: "P2 journal 8 concurrent appenders / SQLite 8 writer threads",
            value: ratio(journal_8, sqlite_8),
        },
        Ratio {
            key: "p3",
            label: "P3 journal 1000-record batches / raw redb 1000-record batches",
            value: ratio(journal_batch, redb_batch),
        },
        Ratio {
            key: "p4_records_per_s",
            label: "P4 journal replay records/s (scan + verify + rkyv access)",
            value: journal_replay,
        },
        Ratio {
            key: "p4_vs_sqlite_json",
            label: "P4 journal replay / SQLite ordered scan + JSON decode",
            value: ratio(journal_replay, sqlite_replay),
        },
    ];

    let (rkyv_bytes, json_bytes) = payloads.average_sizes();
    let mut env = environment(config);
    env.insert("payload_rkyv_bytes_avg".into(), json!(rkyv_bytes));
    env.insert("payload_json_bytes_avg".into(), json!(json_bytes));
    let notes = vec![
        format!(
            "Each measurement has its own temp dir under {} and state that persists across {} \
             interleaved rounds; a figure is the median of its rounds' rates (all rounds are in \
             the JSON). Timed rounds last {} ms (or {} ops per thread); batch rounds write {} \
             records each, so every store grows to the same size. Single-op figures time each \
             commit, batch figures time each commit and exclude building its inputs, concurrent \
             figures divide by the wall time of the round.",
            config.base_dir.display(),
            ROUNDS,
            timed.budget.as_millis(),
            timed.single_ops_max,
            batch.batch_records_max
        ),
        format!(
            "Journal batch shape: append_batch allows at most {} streams per atomic append, so each \
             1000-record commit names {} consecutive streams with 15-16 records each and the window \
             advances by {} streams per commit, cycling through {} streams every {} commits. Raw \
             redb batches use sequential u64 keys and the same ~{:.0} B payload bytes.",
            ctx_journal::BATCH_STREAMS_MAX,
            WindowedBatches::streams_per_commit(),
            WindowedBatches::streams_per_commit(),
            STREAMS,
            STREAMS.div_ceil(WindowedBatches::streams_per_commit()),
            rkyv_bytes
        ),
        format!(
            "Single appends and single inserts go round-robin over {STREAMS} streams; journal \
             appends use exact expected revisions. The 8-thread runs give each thread its own \
             {} streams. Batches are {BATCH_RECORDS} records per commit.",
            STREAMS / WRITER_THREADS
        ),
        "SQLite peer: WAL, synchronous=FULL, cache_size 256 MiB (redb's default cache is 1 GiB), \
         the journal's record shape with UNIQUE(stream, revision) and UNIQUE(event_id), a \
         per-stream SHA-256 chain digest computed by the writer (no MAC), JSON payloads. Event \
         ids are 36-char random-looking (UUID-like) strings, so SQLite's event-id index takes \
         random inserts (the journal defers its event-id index and merges it in sorted runs). The \
         8 SQLite writers with their own connections contend through SQLite's own busy handler \
         (busy_timeout 30 s), which sleeps between retries (1 to 100 ms); P2 uses that figure, \
         as specified. The shared-connection figure shows SQLite with the application \
         serializing its writers instead."
            .to_owned(),
        format!(
            "Replay: {} records loaded into each store, then whole ordered scans repeated for the \
             round's budget with a warm page cache.",
            config.replay_records
        ),
    ];
    Ok(Report {
        figures: figs,
        ratios,
        environment: env,
        notes,
        elapsed: started.elapsed(),
    })
}

fn environment(config: &Config) -> Map<String, Value> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map_or_else(|| "unknown".to_owned(), |(_, m)| m.trim().to_owned());
    let sha_ni = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "sha_ni"));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    let unix_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut env = Map::new();
    env.insert("cpu_model".into(), json!(cpu_model));
    env.insert("nproc".into(), json!(nproc));
    env.insert("sha_ni".into(), json!(sha_ni));
    env.insert("kernel".into(), json!(kernel));
    env.insert("quick".into(), json!(config.quick));
    env.insert("rounds".into(), json!(ROUNDS));
    env.insert(
        "timed_round_ms".into(),
        json!(config.timed.budget.as_millis() as u64),
    );
    env.insert(
        "single_ops_max_per_round".into(),
        json!(config.timed.single_ops_max),
    );
    env.insert(
        "batch_records_per_round".into(),
        json!(config.batch.batch_records_max),
    );
    env.insert("replay_records".into(), json!(config.replay_records));
    env.insert(
        "temp_base_dir".into(),
        json!(config.base_dir.display().to_string()),
    );
    env.insert("sqlite_version".into(), json!(rusqlite::version()));
    env.insert("redb_version".into(), json!("4.6.0"));
    env.insert("writer_threads".into(), json!(WRITER_THREADS));
    env.insert("streams".into(), json!(STREAMS));
    env.insert("batch_records".into(), json!(BATCH_RECORDS));
    env.insert("debug_assertions".into(), json!(cfg!(debug_assertions)));
    env.insert("unix_time".into(), json!(unix_time));
    env
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        let s = format!("{v:.0}");
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{v:.3}")
    }
}

fn fmt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "".to_owned(), |v| format!("{v:.0}"))
}

impl Report {
    /// The markdown tables printed to stdout.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let env = &self.environment;
        let get = |k: &str| env.get(k).map_or_else(String::new, |v| v.to_string());
        let _ = writeln!(
            s,
            "## ctx-bench compare ({})\n\nCPU {} x {}, sha_ni {}, kernel {}, SQLite {}, redb {}; \
             payload ~{:.0} B rkyv / ~{:.0} B JSON; run took {:.1} s.\n",
            if get("quick") == "true" {
                "quick"
            } else {
                "full"
            },
            get("cpu_model"),
            get("nproc"),
            get("sha_ni"),
            get("kernel"),
            get("sqlite_version"),
            get("redb_version"),
            env.get("payload_rkyv_bytes_avg")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            env.get("payload_json_bytes_avg")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "| measurement | value | unit | count | seconds | p50 µs | p99 µs |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|");
        for f in &self.figures {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {} | {} |",
                f.label,
                fmt_num(f.value),
                f.unit,
                f.units,
                f.seconds,
                fmt_us(f.p50_us),
                fmt_us(f.p99_us)
            );
        }
        let _ = writeln!(s, "\n| ratio | key | value |\n|---|---|---:|");
        for r in &self.ratios {
            let _ = writeln!(s, "| {} | `{}` | {} |", r.label, r.key, fmt_num(r.value));
        }
        let _ = writeln!(s);
        for n in &self.notes {
            let _ = writeln!(s, "- {n}");
        }
        s
    }

    /// The JSON document: ratios and raw figures as top-level numbers, details per figure, the
    /// environment and the notes.
    pub fn to_json(&self) -> Value {
        let mut top = Map::new();
        for r in &self.ratios {
            top.insert(r.key.into(), json!(r.value));
        }
        let mut details = Map::new();
        for f in &self.figures {
            top.insert(f.key.into(), json!(f.value));
            details.insert(
                f.key.into(),
                json!({
                    "label": f.label,
                    "value": f.value,
                    "unit": f.unit,
                    "rounds": f.rounds,
                    "count": f.units,
                    "seconds": f.seconds,
                    "p50_us": f.p50_us,
                    "p99_us": f.p99_us,
                }),
            );
        }
        top.insert("figures".into(), Value::Object(details));
        top.insert(
            "environment".into(),
            Value::Object(self.environment.clone()),
        );
        top.insert("notes".into(), json!(self.notes));
        top.insert("elapsed_s".into(), json!(self.elapsed.as_secs_f64()));
        Value::Object(top)
    }
}
