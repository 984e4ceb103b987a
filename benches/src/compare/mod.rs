//! `ctx-bench compare`: every peer measured in one run, on temp dirs under one base directory
//! (so on one disk), and the ratios between them.
//!
//! The peers: raw fsync limits ([`raw`]), raw redb ([`redb_raw`]), SQLite in WAL mode
//! ([`sqlite`]), and the embedded event stores people would pick instead of the journal, each
//! through its own Rust API: VarveDB on LMDB ([`varvedb`]) and umadb-core, the engine under
//! UmaDB ([`umadb`]). Each store's row carries its [`Guarantees`] (durability, chain/MAC,
//! expected revisions, event-id idempotency), since a faster figure bought with a weaker promise
//! is not the same figure. Workloads a store cannot express (VarveDB's batches name one stream)
//! are listed as such rather than measured in another shape. Beside the throughput rounds, the
//! run measures the bytes on disk per record after the replay load and the reopen time after
//! kill -9 (a child `ctx-bench` process loads N records, then appends until the parent kills
//! it; the parent times opening the store and reading its first record).

pub mod journal;
pub mod raw;
pub mod redb_raw;
pub mod sqlite;
pub mod umadb;
pub mod varvedb;

use std::fmt::Write as _;
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rkyv::util::AlignedVec;
use serde_json::{Map, Value, json};

use crate::BenchResult;
use crate::compare::journal::ReplayWork;
use crate::measure::{Figure, Sample, Timebox};
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
const JOURNAL_REPLAY_ONE_THREAD: Meta = (
    "journal_replay_one_thread_records_per_s",
    "journal replay on one thread (scan_threads 1, its own copy of the same records): scan \
     (verify digest + MAC) + rkyv access of each payload",
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

const VARVEDB_SINGLE: Meta = (
    "varvedb_single_commits_per_s",
    "VarveDB: single appends, 1 txn each",
    "commits/s",
);
const VARVEDB_8: Meta = (
    "varvedb_8_appenders_records_per_s",
    "VarveDB: 8 appender threads, own stream handles, single appends",
    "records/s",
);
const VARVEDB_BATCH_ONE: Meta = (
    "varvedb_batch_one_stream_records_per_s",
    "VarveDB: 1000-event append_batch to one stream",
    "records/s",
);
const VARVEDB_REPLAY: Meta = (
    "varvedb_replay_records_per_s",
    "VarveDB replay: global iterator (owned copies) + rkyv access of each payload",
    "records/s",
);
const UMADB_SINGLE: Meta = (
    "umadb_single_commits_per_s",
    "umadb-core: single conditional appends, 1 commit each",
    "commits/s",
);
const UMADB_8: Meta = (
    "umadb_8_appenders_records_per_s",
    "umadb-core: 8 appender threads, grouped writer, single conditional appends",
    "records/s",
);
const UMADB_BATCH: Meta = (
    "umadb_batch_records_per_s",
    "umadb-core: 1000-event conditional append, 64 streams x 15-16 events, window rotating over \
     1000 streams",
    "records/s",
);
const UMADB_BATCH_ONE: Meta = (
    "umadb_batch_one_stream_records_per_s",
    "umadb-core: 1000-event conditional append to one stream",
    "records/s",
);
const UMADB_REPLAY: Meta = (
    "umadb_replay_records_per_s",
    "umadb-core replay: read (no query) + rkyv access of each payload",
    "records/s",
);

/// What a store promises beside its figures: a figure bought with a weaker promise is not the
/// same figure.
#[derive(Debug, Clone, Copy)]
pub struct Guarantees {
    /// The store and its version.
    pub store: &'static str,
    /// When an append or commit returns, what has reached the disk.
    pub durability: &'static str,
    /// Tamper evidence of the stored records: a hash chain, a MAC, or none.
    pub integrity: &'static str,
    /// Optimistic concurrency: whether an append can state the revision it expects.
    pub expected_revision: &'static str,
    /// Whether appending an event id again is recognized (event-id deduplication).
    pub idempotency: &'static str,
    /// The same in a few words, for the table's guarantees column.
    pub column: &'static str,
}

impl Guarantees {
    fn to_json(self) -> Value {
        json!({
            "store": self.store,
            "durability": self.durability,
            "integrity": self.integrity,
            "expected_revision": self.expected_revision,
            "idempotency": self.idempotency,
        })
    }
}

const RAW_GUARANTEES: Guarantees = Guarantees {
    store: "raw file",
    durability: "fdatasync per op",
    integrity: "none",
    expected_revision: "n/a",
    idempotency: "n/a",
    column: "fdatasync/op; no chain; rev n/a; idem n/a",
};
const SQLITE_GUARANTEES: Guarantees = Guarantees {
    store: "SQLite",
    durability: "durable commit (WAL, synchronous=FULL)",
    integrity: "SHA-256 chain by the writer, no MAC",
    expected_revision: "yes (UNIQUE(stream, revision))",
    idempotency: "duplicates refused (UNIQUE(event_id)), no replay",
    column: "durable; SHA-256 chain; rev yes; dup refused",
};
const REDB_GUARANTEES: Guarantees = Guarantees {
    store: "redb 4.6.0",
    durability: "durable commit (Durability::Immediate)",
    integrity: "none",
    expected_revision: "no",
    idempotency: "no",
    column: "durable; none; rev no; idem no",
};
/// The journal's promises (spec/journal.md J8 and §4-§5: one fdatasync per group commit,
/// per-stream digest chain with a keyed MAC, exact expected revisions, permanent event-id
/// idempotency).
const JOURNAL_GUARANTEES: Guarantees = Guarantees {
    store: "ctx journal (redb 4.6.0)",
    durability: "durable commit (redb Immediate, group commit)",
    integrity: "per-stream digest chain + MAC",
    expected_revision: "yes (exact)",
    idempotency: "yes (event-id index, permanent)",
    column: "durable, group commit; chain+MAC; rev yes; idem yes",
};

/// Every store's guarantees, in the order of the table.
const ALL_GUARANTEES: [&Guarantees; 6] = [
    &RAW_GUARANTEES,
    &SQLITE_GUARANTEES,
    &REDB_GUARANTEES,
    &JOURNAL_GUARANTEES,
    &varvedb::GUARANTEES,
    &umadb::GUARANTEES,
];

/// The guarantees of the store a figure key belongs to (keys start with the store's name).
pub fn guarantees_of(key: &str) -> Option<&'static Guarantees> {
    let table: [(&str, &'static Guarantees); 6] = [
        ("raw_", &RAW_GUARANTEES),
        ("sqlite_", &SQLITE_GUARANTEES),
        ("redb_", &REDB_GUARANTEES),
        ("journal_", &JOURNAL_GUARANTEES),
        ("varvedb_", &varvedb::GUARANTEES),
        ("umadb_", &umadb::GUARANTEES),
    ];
    table
        .into_iter()
        .find(|(prefix, _)| key.starts_with(prefix))
        .map(|(_, g)| g)
}

/// A workload a store cannot express, listed in place of a figure.
#[derive(Debug, Clone)]
pub struct Unsupported {
    pub key: &'static str,
    pub label: &'static str,
    pub reason: &'static str,
}

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
    /// Records a killed child has loaded before the reopen-after-kill measurement.
    pub reopen_records: u64,
    /// The `ctx-bench` binary the reopen-after-kill child runs (its hidden `compare-child`
    /// subcommand); without it that measurement is skipped.
    pub child_exe: Option<PathBuf>,
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
            reopen_records: if quick { 10_000 } else { 100_000 },
            child_exe: None,
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
    pub unsupported: Vec<Unsupported>,
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
    // The same records again for the one-thread replay, interleaved with the default's rounds so
    // that their ratio (parallel verification, spec/journal.md §7) is measured under one load.
    let one_thread_dir = temp_dir(config, "journal-replay-1")?;
    let loaded_one_thread = Arc::new(journal::load_with(
        one_thread_dir.path(),
        p,
        config.replay_records,
        &ctx_journal::OpenOptions::new().scan_threads(1),
    )?);
    let load_figure = Figure::from_rounds(
        "journal_replay_load_records_per_s",
        "journal: replay data load (same windowed 1000-record batches, one run)",
        "records/s",
        std::slice::from_ref(&loaded_journal.load),
    );
    let sqlite_dir = temp_dir(config, "sqlite-replay")?;
    let loaded_sqlite = sqlite::load(sqlite_dir.path(), p, config.replay_records)?;
    let varvedb_dir = temp_dir(config, "varvedb-replay")?;
    let loaded_varvedb = varvedb::load(varvedb_dir.path(), p, config.replay_records)?;
    let umadb_dir = temp_dir(config, "umadb-replay")?;
    let loaded_umadb = umadb::load(umadb_dir.path(), p, config.replay_records)?;
    // Bytes on disk right after the same load into each store (durable, nothing compacted).
    let mut disk_figs = Vec::new();
    for (store, dir) in [
        (Store::Journal, &journal_dir),
        (Store::Sqlite, &sqlite_dir),
        (Store::Varvedb, &varvedb_dir),
        (Store::Umadb, &umadb_dir),
    ] {
        let (allocated, length) = disk_usage(dir.path())?;
        let records = config.replay_records.max(1) as f64;
        let (alloc_meta, length_meta) = store.disk_metas();
        disk_figs.push(one_figure(
            alloc_meta,
            allocated as f64 / records,
            config.replay_records,
        ));
        disk_figs.push(one_figure(
            length_meta,
            length as f64 / records,
            config.replay_records,
        ));
    }

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
        runner(config, timed, VARVEDB_SINGLE, |d| varvedb::single(d, p))?,
        runner(config, timed, VARVEDB_8, |d| {
            varvedb::concurrent(d, p, WRITER_THREADS)
        })?,
        runner(config, batch, VARVEDB_BATCH_ONE, |d| {
            varvedb::batch_one_stream(d, p)
        })?,
        runner(config, timed, UMADB_SINGLE, |d| umadb::single(d, p))?,
        runner(config, timed, UMADB_8, |d| {
            umadb::concurrent(d, p, WRITER_THREADS)
        })?,
        runner(config, batch, UMADB_BATCH, |d| umadb::batch_windowed(d, p))?,
        runner(config, batch, UMADB_BATCH_ONE, |d| {
            umadb::batch_one_stream(d, p)
        })?,
    ];
    let replays = [
        (
            JOURNAL_REPLAY,
            journal::replay(loaded_journal.clone(), ReplayWork::AccessPayload),
        ),
        (
            JOURNAL_REPLAY_ONE_THREAD,
            journal::replay(loaded_one_thread, ReplayWork::AccessPayload),
        ),
        (
            JOURNAL_REPLAY_NOOP,
            journal::replay(loaded_journal, ReplayWork::Noop),
        ),
        (SQLITE_REPLAY, sqlite::replay(loaded_sqlite)),
        (VARVEDB_REPLAY, varvedb::replay(loaded_varvedb)),
        (UMADB_REPLAY, umadb::replay(loaded_umadb)),
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
    drop((
        journal_dir,
        one_thread_dir,
        sqlite_dir,
        varvedb_dir,
        umadb_dir,
    ));
    figs.extend(disk_figs);

    let mut env = environment(config);
    let mut notes = Vec::new();
    match &config.child_exe {
        Some(exe) => {
            let mut heads = Map::new();
            for store in [Store::Journal, Store::Varvedb, Store::Umadb] {
                eprintln!(
                    "reopen after kill -9: {} child loads {} records ...",
                    store.name(),
                    config.reopen_records
                );
                let (took, clean, head) = reopen_after_kill(config, exe, store)?;
                eprintln!(
                    "  {} reopened + first read in {:.1} ms ({head} records), clean reopen {:.1} \
                     ms",
                    store.name(),
                    took.as_secs_f64() * 1e3,
                    clean.as_secs_f64() * 1e3
                );
                heads.insert(store.name().into(), json!(head));
                let (killed_meta, clean_meta) = store.reopen_metas();
                figs.push(one_figure(killed_meta, took.as_secs_f64() * 1e3, head));
                figs.push(one_figure(clean_meta, clean.as_secs_f64() * 1e3, head));
            }
            env.insert("reopen_records_at_reopen".into(), Value::Object(heads));
        }
        None => notes.push(
            "Reopen after kill -9 skipped: no ctx-bench binary to run as the child.".to_owned(),
        ),
    }
    let unsupported = vec![Unsupported {
        key: "varvedb_batch_records_per_s",
        label: "VarveDB: 1000-event batch over 64 streams (the journal's windowed shape)",
        reason: "not expressible: append_batch takes one StreamId of one named stream, and \
                 separate commits would not be one atomic batch",
    }];
    let v = |key: (&str, &str, &str)| value_of(&figs, key.0);
    let (raw_overwrite, sqlite_8, redb_batch) = (v(RAW_OVERWRITE), v(SQLITE_8), v(REDB_BATCH));
    let (journal_single, journal_batch, journal_8) =
        (v(JOURNAL_SINGLE), v(JOURNAL_BATCH), v(JOURNAL_8));
    let (journal_replay, sqlite_replay) = (v(JOURNAL_REPLAY), v(SQLITE_REPLAY));
    let journal_replay_one = v(JOURNAL_REPLAY_ONE_THREAD);

    let mut ratios = vec![
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
        Ratio {
            key: "p4_scan_threads_vs_one",
            label: "journal replay on the default scan threads (one per core) / on one thread",
            value: ratio(journal_replay, journal_replay_one),
        },
    ];
    ratios.extend(journal_over_peers(&figs));

    let (rkyv_bytes, json_bytes) = payloads.average_sizes();
    env.insert("payload_rkyv_bytes_avg".into(), json!(rkyv_bytes));
    env.insert("payload_json_bytes_avg".into(), json!(json_bytes));
    notes.extend([
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
        format!(
            "VarveDB and umadb-core get the same payload bytes (VarveDB serializes the same \
             BenchEvent itself, inside the timed section). VarveDB stores no event id, kind or \
             time; umadb-core stores the kind, one tag per stream and the event id as a UUID. \
             umadb-core's single and batch appends are conditional (no event of the named streams \
             after the last position seen), which is its form of an exact expected revision; its \
             batch row has the journal's windowed shape, so it compares with the journal's batch \
             row. Its 8 appenders go through its grouped writer thread (one commit per drained \
             group, at most {} events); VarveDB's 8 appenders each commit alone (LMDB serializes \
             write transactions).",
            umadb::GROUP_EVENTS_MAX
        ),
        format!(
            "Bytes on disk: allocated (st_blocks x 512) and file length over every file in the \
             store's directory, right after the replay load of {} records, divided by the \
             records. Reopen after kill -9: a child ctx-bench process loads {} records in \
             1000-record commits, says ready, then appends single durable records until the \
             parent SIGKILLs it about 50 ms later; the figure is one in-process open plus the \
             read of the first record, and the clean reopen is the same again right after.",
            config.replay_records, config.reopen_records
        ),
    ]);
    Ok(Report {
        figures: figs,
        unsupported,
        ratios,
        environment: env,
        notes,
        elapsed: started.elapsed(),
    })
}

/// The stores measured for bytes on disk and reopen after kill -9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Journal,
    Sqlite,
    Varvedb,
    Umadb,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Journal => "journal",
            Store::Sqlite => "sqlite",
            Store::Varvedb => "varvedb",
            Store::Umadb => "umadb",
        }
    }

    /// The figures of allocated bytes and file length per record.
    fn disk_metas(self) -> (Meta, Meta) {
        match self {
            Store::Journal => (
                (
                    "journal_disk_allocated_bytes_per_record",
                    "journal: bytes on disk per record, allocated",
                    "B/record",
                ),
                (
                    "journal_disk_file_bytes_per_record",
                    "journal: bytes on disk per record, file length",
                    "B/record",
                ),
            ),
            Store::Sqlite => (
                (
                    "sqlite_disk_allocated_bytes_per_record",
                    "SQLite: bytes on disk per record, allocated",
                    "B/record",
                ),
                (
                    "sqlite_disk_file_bytes_per_record",
                    "SQLite: bytes on disk per record, file length (db + WAL)",
                    "B/record",
                ),
            ),
            Store::Varvedb => (
                (
                    "varvedb_disk_allocated_bytes_per_record",
                    "VarveDB: bytes on disk per record, allocated",
                    "B/record",
                ),
                (
                    "varvedb_disk_file_bytes_per_record",
                    "VarveDB: bytes on disk per record, file length",
                    "B/record",
                ),
            ),
            Store::Umadb => (
                (
                    "umadb_disk_allocated_bytes_per_record",
                    "umadb-core: bytes on disk per record, allocated",
                    "B/record",
                ),
                (
                    "umadb_disk_file_bytes_per_record",
                    "umadb-core: bytes on disk per record, file length",
                    "B/record",
                ),
            ),
        }
    }

    /// The figures of the reopen after kill -9 and of the clean reopen right after it.
    fn reopen_metas(self) -> (Meta, Meta) {
        match self {
            Store::Journal | Store::Sqlite => (
                (
                    "journal_reopen_after_kill_ms",
                    "journal: reopen after kill -9 + first read",
                    "ms",
                ),
                (
                    "journal_reopen_clean_ms",
                    "journal: clean reopen + first read (right after)",
                    "ms",
                ),
            ),
            Store::Varvedb => (
                (
                    "varvedb_reopen_after_kill_ms",
                    "VarveDB: reopen after kill -9 + first read",
                    "ms",
                ),
                (
                    "varvedb_reopen_clean_ms",
                    "VarveDB: clean reopen + first read (right after)",
                    "ms",
                ),
            ),
            Store::Umadb => (
                (
                    "umadb_reopen_after_kill_ms",
                    "umadb-core: reopen after kill -9 + first read",
                    "ms",
                ),
                (
                    "umadb_reopen_clean_ms",
                    "umadb-core: clean reopen + first read (right after)",
                    "ms",
                ),
            ),
        }
    }
}

/// A figure measured once (no rounds, no latencies); `units` is what it was measured over.
fn one_figure((key, label, unit): Meta, value: f64, units: u64) -> Figure {
    Figure {
        key,
        label,
        value,
        unit,
        rounds: vec![value],
        units,
        seconds: 0.0,
        p50_us: None,
        p99_us: None,
    }
}

/// Allocated bytes (st_blocks x 512) and file lengths of every file under `dir`.
fn disk_usage(dir: &Path) -> BenchResult<(u64, u64)> {
    let (mut allocated, mut length) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let (a, l) = disk_usage(&entry.path())?;
            allocated += a;
            length += l;
        } else {
            allocated += meta.blocks() * 512;
            length += meta.len();
        }
    }
    Ok((allocated, length))
}

/// The child's word to the parent that its load is durable and the kill may come.
/// Whole ordered replays of `store`, repeated for each round's budget (at least once per round).
/// `pass` replays once with the given scratch buffer and returns the records it visited and a
/// checksum of what it read; a pass that saw fewer than the `records` loaded is an error (a store
/// that stopped early would otherwise look fast). Units: records.
fn replay_rounds<'a>(
    store: &'static str,
    records: u64,
    mut pass: impl FnMut(&mut AlignedVec<16>) -> BenchResult<(u64, u64)> + 'a,
) -> Round<'a> {
    let mut scratch = AlignedVec::<16>::new();
    Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, u64::MAX);
        let mut sample = Sample::default();
        let mut passes = 0u64;
        while passes == 0 || tb.running(0) {
            let start = Instant::now();
            let (visited, check) = pass(&mut scratch)?;
            sample.timed += start.elapsed();
            std::hint::black_box(check);
            if visited != records {
                return Err(format!("{store} replay saw {visited} of {records} records").into());
            }
            sample.units += visited;
            passes += 1;
        }
        Ok(sample)
    })
}

/// Tells the parent on stdout that the load is done, when something follows it that a parent
/// times or kills; a child that only exits (the in-process test, strace runs of the load) keeps
/// stdout clean.
fn say_ready(records: u64, then: After) -> BenchResult<()> {
    if matches!(then, After::Exit | After::Reopen(_)) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {records}")?;
    out.flush()?;
    Ok(())
}

/// What the child does once its records are loaded and it has said `ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Appends single durable records until it is killed (the reopen measurement).
    AppendUntilKilled,
    /// Exits, after printing to stderr what the load wrote (`/proc/self/io` write_bytes): for
    /// strace and perf runs of the load alone.
    Exit,
    /// Replays the store for this long and prints the rate to stderr: for perf runs of replay.
    Replay(Duration),
    /// Closes the store and reopens it (open + first read) this many times, printing the median
    /// to stderr: for perf runs of the open.
    Reopen(usize),
}

impl After {
    /// `append` (the default), `exit` or `replay`.
    pub fn parse(word: &str) -> Result<After, String> {
        match word {
            "append" => Ok(After::AppendUntilKilled),
            "exit" => Ok(After::Exit),
            "replay" => Ok(After::Replay(Duration::from_secs(10))),
            "reopen" => Ok(After::Reopen(50)),
            other => Err(format!(
                "compare-child: unknown mode {other:?} (append, exit, replay, reopen)"
            )),
        }
    }
}

/// Runs a replay round for `budget` in the child and prints its rate.
fn child_replay(mut round: Round<'_>, budget: Duration) -> BenchResult<()> {
    let limits = Limits {
        budget,
        single_ops_max: 0,
        batch_records_max: 0,
    };
    let sample = round(&limits)?;
    eprintln!(
        "compare-child: replayed {} records in {:.2} s, {:.0} records/s",
        sample.units,
        sample.timed.as_secs_f64(),
        sample.rate()
    );
    Ok(())
}

/// This process's `write_bytes` from /proc/self/io: bytes it caused to be sent to storage.
fn write_bytes() -> BenchResult<u64> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no write_bytes in /proc/self/io".into())
}

/// The hidden `ctx-bench compare-child STORE DIR RECORDS [append|exit|replay]`: loads `records`
/// records into a new store of kind `store` in `dir` in 1000-record commits, prints `ready`,
/// then does what `then` says.
pub fn child(store: &str, dir: &Path, records: u64, then: After) -> BenchResult<()> {
    let payloads = Payloads::new()?;
    let p = &payloads;
    let (before, started) = (write_bytes()?, Instant::now());
    let fill_then = match then {
        After::Reopen(_) => After::Exit,
        other => other,
    };
    match store {
        "journal" => journal::fill_until_killed(dir, p, records, fill_then),
        "varvedb" => varvedb::fill_until_killed(&dir.join("varvedb"), p, records, fill_then),
        "umadb" => umadb::fill_until_killed(dir, p, records, fill_then),
        other => Err(format!("compare-child: unknown store {other:?}").into()),
    }?;
    if let After::Reopen(times) = then {
        let mut took = Vec::with_capacity(times);
        for _ in 0..times {
            let (t, _) = match store {
                "journal" => journal::reopen(dir)?,
                "varvedb" => varvedb::reopen(&dir.join("varvedb"))?,
                _ => umadb::reopen(dir)?,
            };
            took.push(t.as_secs_f64() * 1e3);
        }
        eprintln!(
            "compare-child: {store} clean reopen + first read, median of {times}: {:.3} ms",
            crate::measure::median(&took)
        );
    }
    if then == After::Exit {
        let written = write_bytes()?.saturating_sub(before);
        let commits = records.div_ceil(BATCH_RECORDS as u64).max(1);
        eprintln!(
            "compare-child: {store} loaded {records} records in {commits} commits in {:.2} s: \
             write_bytes {written} ({} per commit, {} per record)",
            started.elapsed().as_secs_f64(),
            written / commits,
            written / records.max(1)
        );
    }
    Ok(())
}

/// Runs the child for `store`, SIGKILLs it once it has loaded its records and is appending, and
/// times the reopen and first read of what it left, then a clean reopen and first read (which
/// separates the crash's repair from what every open costs): (after kill, clean, records found).
fn reopen_after_kill(
    config: &Config,
    exe: &Path,
    store: Store,
) -> BenchResult<(Duration, Duration, u64)> {
    let dir = temp_dir(config, &format!("{}-killed", store.name()))?;
    let mut child = Command::new(exe)
        .arg("compare-child")
        .arg(store.name())
        .arg(dir.path())
        .arg(config.reopen_records.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("compare-child: no stdout pipe")?;
    // umadb-core prints its settings to stdout on open; the word that counts is `ready`.
    let mut ready = false;
    for line in std::io::BufReader::new(stdout).lines() {
        if line?.starts_with("ready ") {
            ready = true;
            break;
        }
    }
    if !ready {
        let status = child.wait()?;
        return Err(format!(
            "the {} child ended before it was ready ({status})",
            store.name()
        )
        .into());
    }
    // Let it get into its single durable appends, so the kill lands in or between commits.
    std::thread::sleep(Duration::from_millis(50));
    child.kill()?;
    child.wait()?;
    let reopen = || match store {
        Store::Journal | Store::Sqlite => journal::reopen(dir.path()),
        Store::Varvedb => varvedb::reopen(&dir.path().join("varvedb")),
        Store::Umadb => umadb::reopen(dir.path()),
    };
    let (took, head) = reopen()?;
    let (clean, _) = reopen()?;
    if head < config.reopen_records {
        return Err(format!(
            "{} after kill -9 holds {head} records, fewer than the {} its child made durable",
            store.name(),
            config.reopen_records
        )
        .into());
    }
    Ok((took, clean, head))
}

/// journal / peer for every workload both express (the same figure key after the store's name).
fn journal_over_peers(figs: &[Figure]) -> Vec<Ratio> {
    const PAIRS: [(&str, &str, &str, &str); 13] = [
        (
            "journal_vs_varvedb_single",
            "journal single appends / VarveDB single appends",
            JOURNAL_SINGLE.0,
            VARVEDB_SINGLE.0,
        ),
        (
            "journal_vs_umadb_single",
            "journal single appends / umadb-core single conditional appends",
            JOURNAL_SINGLE.0,
            UMADB_SINGLE.0,
        ),
        (
            "journal_vs_varvedb_8",
            "journal 8 appenders / VarveDB 8 appenders",
            JOURNAL_8.0,
            VARVEDB_8.0,
        ),
        (
            "journal_vs_umadb_8",
            "journal 8 appenders / umadb-core 8 appenders (grouped writer)",
            JOURNAL_8.0,
            UMADB_8.0,
        ),
        (
            "journal_vs_umadb_batch",
            "journal windowed 1000-record batches / umadb-core same shape",
            JOURNAL_BATCH.0,
            UMADB_BATCH.0,
        ),
        (
            "journal_vs_varvedb_batch_one_stream",
            "journal 1000 records to one stream / VarveDB same",
            JOURNAL_BATCH_ONE.0,
            VARVEDB_BATCH_ONE.0,
        ),
        (
            "journal_vs_umadb_batch_one_stream",
            "journal 1000 records to one stream / umadb-core same",
            JOURNAL_BATCH_ONE.0,
            UMADB_BATCH_ONE.0,
        ),
        (
            "journal_vs_varvedb_replay",
            "journal replay / VarveDB replay (both with rkyv access)",
            JOURNAL_REPLAY.0,
            VARVEDB_REPLAY.0,
        ),
        (
            "journal_vs_umadb_replay",
            "journal replay / umadb-core replay (both with rkyv access)",
            JOURNAL_REPLAY.0,
            UMADB_REPLAY.0,
        ),
        (
            "journal_vs_varvedb_disk",
            "journal allocated bytes per record / VarveDB (below 1: journal smaller)",
            "journal_disk_allocated_bytes_per_record",
            "varvedb_disk_allocated_bytes_per_record",
        ),
        (
            "journal_vs_umadb_disk",
            "journal allocated bytes per record / umadb-core (below 1: journal smaller)",
            "journal_disk_allocated_bytes_per_record",
            "umadb_disk_allocated_bytes_per_record",
        ),
        (
            "journal_vs_varvedb_reopen",
            "journal reopen after kill -9 / VarveDB (below 1: journal faster)",
            "journal_reopen_after_kill_ms",
            "varvedb_reopen_after_kill_ms",
        ),
        (
            "journal_vs_umadb_reopen",
            "journal reopen after kill -9 / umadb-core (below 1: journal faster)",
            "journal_reopen_after_kill_ms",
            "umadb_reopen_after_kill_ms",
        ),
    ];
    PAIRS
        .iter()
        .filter(|(_, _, j, p)| figs.iter().any(|f| f.key == *j) && figs.iter().any(|f| f.key == *p))
        .map(|&(key, label, j, p)| Ratio {
            key,
            label,
            value: ratio(value_of(figs, j), value_of(figs, p)),
        })
        .collect()
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
    env.insert("varvedb_version".into(), json!("0.4.2"));
    env.insert("umadb_core_version".into(), json!("0.7.8"));
    env.insert("reopen_records".into(), json!(config.reopen_records));
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
            "| measurement | value | unit | count | seconds | p50 µs | p99 µs | guarantees |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|---|");
        let column = |key: &str| guarantees_of(key).map_or("", |g| g.column);
        for f in &self.figures {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {} | {} | {} |",
                f.label,
                fmt_num(f.value),
                f.unit,
                f.units,
                f.seconds,
                fmt_us(f.p50_us),
                fmt_us(f.p99_us),
                column(f.key)
            );
        }
        for u in &self.unsupported {
            let _ = writeln!(
                s,
                "| {} | n/a ({}) | | | | | | {} |",
                u.label,
                u.reason,
                column(u.key)
            );
        }
        let _ = writeln!(
            s,
            "\n| store | durability | integrity | expected revision | idempotency |\n\
             |---|---|---|---|---|"
        );
        for g in ALL_GUARANTEES {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                g.store, g.durability, g.integrity, g.expected_revision, g.idempotency
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
        let guarantees = |key: &str| guarantees_of(key).map_or(Value::Null, |g| g.to_json());
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
                    "guarantees": guarantees(f.key),
                }),
            );
        }
        for u in &self.unsupported {
            top.insert(u.key.into(), Value::Null);
            details.insert(
                u.key.into(),
                json!({
                    "label": u.label,
                    "value": null,
                    "unsupported": u.reason,
                    "guarantees": guarantees(u.key),
                }),
            );
        }
        top.insert("figures".into(), Value::Object(details));
        top.insert(
            "guarantees".into(),
            Value::Array(ALL_GUARANTEES.iter().map(|g| g.to_json()).collect()),
        );
        top.insert(
            "environment".into(),
            Value::Object(self.environment.clone()),
        );
        top.insert("notes".into(), json!(self.notes));
        top.insert("elapsed_s".into(), json!(self.elapsed.as_secs_f64()));
        Value::Object(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(key: &'static str, value: f64) -> Figure {
        one_figure((key, key, "records/s"), value, 1)
    }

    #[test]
    fn every_figure_names_its_store_guarantees() {
        let keys = [
            RAW_OVERWRITE.0,
            RAW_APPEND.0,
            SQLITE_SINGLE.0,
            SQLITE_8_SHARED.0,
            REDB_BATCH.0,
            JOURNAL_SINGLE.0,
            JOURNAL_REPLAY_NOOP.0,
            JOURNAL_REPLAY_ONE_THREAD.0,
            VARVEDB_8.0,
            VARVEDB_REPLAY.0,
            UMADB_BATCH.0,
            UMADB_REPLAY.0,
            "journal_replay_load_records_per_s",
        ];
        for key in keys {
            assert!(guarantees_of(key).is_some(), "{key}");
        }
        for store in [Store::Journal, Store::Sqlite, Store::Varvedb, Store::Umadb] {
            let ((a, ..), (b, ..)) = store.disk_metas();
            let ((c, ..), (d, ..)) = store.reopen_metas();
            for key in [a, b, c, d] {
                assert!(guarantees_of(key).is_some(), "{key}");
            }
        }
    }

    #[test]
    fn peer_rows_get_ratios_guarantees_and_unsupported_entries() {
        let figs = vec![
            figure(JOURNAL_SINGLE.0, 300.0),
            figure(VARVEDB_SINGLE.0, 150.0),
            figure(UMADB_SINGLE.0, 100.0),
            figure(JOURNAL_BATCH.0, 30_000.0),
            figure(UMADB_BATCH.0, 60_000.0),
        ];
        let ratios = journal_over_peers(&figs);
        let get = |key: &str| ratios.iter().find(|r| r.key == key).map(|r| r.value);
        assert_eq!(get("journal_vs_varvedb_single"), Some(2.0));
        assert_eq!(get("journal_vs_umadb_single"), Some(3.0));
        assert_eq!(get("journal_vs_umadb_batch"), Some(0.5));
        // A workload without both figures gets no ratio.
        assert_eq!(get("journal_vs_varvedb_replay"), None);
        let report = Report {
            figures: figs,
            unsupported: vec![Unsupported {
                key: "varvedb_batch_records_per_s",
                label: "VarveDB: windowed batch",
                reason: "not expressible",
            }],
            ratios,
            environment: Map::new(),
            notes: Vec::new(),
            elapsed: Duration::ZERO,
        };
        let md = report.markdown();
        assert!(md.contains("| guarantees |"), "{md}");
        assert!(md.contains(varvedb::GUARANTEES.column), "{md}");
        assert!(md.contains(umadb::GUARANTEES.column), "{md}");
        assert!(md.contains("| n/a (not expressible) |"), "{md}");
        let json = report.to_json();
        assert_eq!(
            json["figures"][UMADB_SINGLE.0]["guarantees"]["expected_revision"],
            "yes (append condition)"
        );
        assert_eq!(
            json["figures"][JOURNAL_SINGLE.0]["guarantees"]["integrity"],
            "per-stream digest chain + MAC"
        );
        assert!(json["varvedb_batch_records_per_s"].is_null());
        assert_eq!(
            json["figures"]["varvedb_batch_records_per_s"]["unsupported"],
            "not expressible"
        );
        assert_eq!(json["journal_vs_umadb_batch"], 0.5);
        assert_eq!(json["guarantees"].as_array().map(Vec::len), Some(6));
    }

    /// The reopen child's load and each store's reopen, in process and without the kill: what
    /// the child made durable is what the reopen finds.
    #[test]
    fn child_loads_and_reopen_finds_every_record() -> BenchResult<()> {
        for store in ["journal", "varvedb", "umadb"] {
            let dir = tempfile::tempdir()?;
            child(store, dir.path(), 2_500, After::Exit)?;
            let (_, head) = match store {
                "journal" => journal::reopen(dir.path())?,
                "varvedb" => varvedb::reopen(&dir.path().join("varvedb"))?,
                _ => umadb::reopen(dir.path())?,
            };
            assert_eq!(head, 2_500, "{store}");
        }
        Ok(())
    }
}
