//! The workload `ctx-bench seam-ab` runs against two revisions of the journal: single-record
//! appends from 1 thread and from 8 threads (group commit), 40-record appends, and verified reads
//! of a 10k-record journal (`read_stream` of one stream, `scan` of everything).
//!
//! This file is compiled twice: as `ctx_benches::seam_ab::workload` (for the smoke test) and, via
//! `#[path]`, into the `ctx-seam-workload` binary, which `ctx-bench seam-ab` also builds in a
//! worktree of the older revision (copying this file and the binary's file there). So it uses
//! nothing but `std` and the part of the `ctx_journal` API that is the same at both revisions
//! (`Journal::open`, `append`, `read_stream`, `scan`): the same code measures both.
//!
//! One process run measures every figure once (or those of the `--only` groups), each in a fresh
//! journal under `--dir`, and prints one JSON object on stdout: `{"figures": [{"key", "unit", "value", "count", "seconds", "p50_us",
//! "p99_us"}, ...]}`.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ctx_journal::{
    ExpectedRevision, Journal, NewRecord, OpenOptions, StreamAppend, StreamId, Timestamp,
};

/// The error type of the workload: anything that can cross a thread boundary.
pub type WorkloadError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Bytes of every record's payload.
pub const PAYLOAD_BYTES: usize = 200;
/// Appender threads of the group-commit figure.
pub const THREADS: usize = 8;
/// Records per commit of the batch figure.
pub const BATCH: usize = 40;
/// Streams the single and batch appends go round-robin over (split between the threads).
pub const STREAMS: usize = 400;
/// Records of the read figures' journal, all in one stream.
pub const READ_RECORDS: u64 = 10_000;
/// Records per append while loading the read figures' journal.
const LOAD_BATCH: u64 = 1000;
/// Appends before each timed append loop (files created, caches warm).
const WARM_UP: u64 = 20;
/// Cap on operations of one timed loop (per thread), so a fast disk cannot fill it.
const OPS_MAX: u64 = 200_000;
const KIND: &str = "bench.seam_ab";
/// 2026-01-01T00:00:00Z in microseconds.
const EPOCH_MICROS: i64 = 1_767_225_600_000_000;

/// What one run measures.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base directory of the journals (a disk: fsync dominates the append figures).
    pub dir: PathBuf,
    /// Wall-clock budget of each figure's timed loop.
    pub budget: Duration,
    /// Records of the read figures' journal.
    pub read_records: u64,
    /// The groups of figures to measure ([`GROUPS`]); empty for all.
    pub only: Vec<String>,
}

/// The groups of figures one run can be limited to: `single` (single_1_thread), `group`
/// (single_8_threads), `batch` (batch_40), `reads` (read_stream_10k and scan_10k, one journal).
pub const GROUPS: [&str; 4] = ["single", "group", "batch", "reads"];

/// One measured figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub key: &'static str,
    pub unit: &'static str,
    /// `count / seconds`.
    pub value: f64,
    pub count: u64,
    pub seconds: f64,
    /// Latency percentiles of the timed operations (appends, commits or whole reads).
    pub p50_us: f64,
    pub p99_us: f64,
}

/// What a timed loop saw.
#[derive(Debug, Default)]
struct Timed {
    count: u64,
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Timed {
    fn figure(mut self, key: &'static str, unit: &'static str) -> Figure {
        self.latencies.sort_unstable();
        let pct = |p: f64| {
            if self.latencies.is_empty() {
                return 0.0;
            }
            let rank = ((p / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
            self.latencies[rank.min(self.latencies.len() - 1)].as_secs_f64() * 1e6
        };
        let seconds = self.wall.as_secs_f64();
        Figure {
            key,
            unit,
            value: if seconds > 0.0 {
                self.count as f64 / seconds
            } else {
                0.0
            },
            count: self.count,
            seconds,
            p50_us: pct(50.0),
            p99_us: pct(99.0),
        }
    }
}

/// splitmix64: ids look random but never repeat.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Record `seq` of appender `tag`: a 36-character random-looking event id unique per (tag, seq)
/// and a 200-byte payload.
fn record(tag: u64, seq: u64) -> NewRecord {
    let event_id = format!(
        "evt-{:016x}{:016x}",
        mix(seq ^ tag.rotate_left(40)),
        mix(seq).wrapping_add(tag)
    );
    let mut payload = format!(
        "{{\"scope\":\"scope-{:04}\",\"capability\":\"skill:repo-search\",\"sequence\":{seq},\
         \"reason\":\"operator approved after consent challenge; policy allows install\"",
        seq % 1000
    )
    .into_bytes();
    payload.resize(PAYLOAD_BYTES - 1, b' ');
    payload.push(b'}');
    NewRecord::new(
        event_id,
        KIND,
        Timestamp(EPOCH_MICROS + seq as i64 * 1000),
        payload,
    )
}

fn stream(i: usize) -> Result<StreamId, WorkloadError> {
    Ok(StreamId::derive(
        "bench",
        format!("seam-ab-{i}").as_bytes(),
    )?)
}

fn expected(head: u64) -> ExpectedRevision {
    if head == 0 {
        ExpectedRevision::NoStream
    } else {
        ExpectedRevision::Exact(head)
    }
}

fn open(dir: &Path) -> Result<Journal, WorkloadError> {
    Ok(Journal::open(dir, &OpenOptions::new())?)
}

/// Appends of `per_append` records to `streams` round-robin, exact expected revisions.
struct Appender {
    streams: Vec<StreamId>,
    heads: Vec<u64>,
    tag: u64,
    seq: u64,
    per_append: usize,
}

impl Appender {
    fn new(streams: Vec<StreamId>, tag: u64, per_append: usize) -> Appender {
        let heads = vec![0; streams.len()];
        Appender {
            streams,
            heads,
            tag,
            seq: 0,
            per_append,
        }
    }

    fn append(
        &mut self,
        journal: &Journal,
        timed: Option<&mut Timed>,
    ) -> Result<(), WorkloadError> {
        let s = (self.seq as usize / self.per_append) % self.streams.len();
        let records = (0..self.per_append as u64)
            .map(|i| record(self.tag, self.seq + i))
            .collect();
        self.seq += self.per_append as u64;
        let append = StreamAppend::new(self.streams[s], expected(self.heads[s]), records);
        let start = Instant::now();
        let outcome = journal.append(append)?;
        if let Some(timed) = timed {
            timed.latencies.push(start.elapsed());
            timed.count += self.per_append as u64;
        }
        self.heads[s] = outcome.last_revision();
        Ok(())
    }

    /// Appends until the budget is spent (or [`OPS_MAX`] appends); `wall` is the loop's time.
    fn run(&mut self, journal: &Journal, budget: Duration) -> Result<Timed, WorkloadError> {
        for _ in 0..WARM_UP {
            self.append(journal, None)?;
        }
        let mut timed = Timed::default();
        let start = Instant::now();
        let mut ops = 0;
        while ops < OPS_MAX && start.elapsed() < budget {
            self.append(journal, Some(&mut timed))?;
            ops += 1;
        }
        timed.wall = start.elapsed();
        Ok(timed)
    }
}

/// Single-record appends from one thread: one commit (one fsync) each. Units: commits.
fn single(dir: &Path, budget: Duration) -> Result<Figure, WorkloadError> {
    let journal = open(dir)?;
    let streams = (0..STREAMS).map(stream).collect::<Result<_, _>>()?;
    let timed = Appender::new(streams, 1, 1).run(&journal, budget)?;
    Ok(timed.figure("single_1_thread", "appends/s"))
}

/// Single-record appends from [`THREADS`] threads sharing one handle, each over its own streams;
/// the journal's group commit batches them. Units: appends over the wall time.
fn group(dir: &Path, budget: Duration) -> Result<Figure, WorkloadError> {
    let journal = open(dir)?;
    let per = STREAMS / THREADS;
    let mut appenders = Vec::with_capacity(THREADS);
    for t in 0..THREADS {
        let streams = (t * per..(t + 1) * per)
            .map(stream)
            .collect::<Result<_, _>>()?;
        appenders.push(Appender::new(streams, 100 + t as u64, 1));
    }
    let barrier = Barrier::new(THREADS);
    let parts: Vec<Result<Timed, WorkloadError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = appenders
            .iter_mut()
            .map(|appender| {
                let (journal, barrier) = (&journal, &barrier);
                scope.spawn(move || {
                    // Every thread warms up first, then all start timing together.
                    for _ in 0..WARM_UP {
                        appender.append(journal, None)?;
                    }
                    barrier.wait();
                    let mut timed = Timed::default();
                    let start = Instant::now();
                    let mut ops = 0;
                    while ops < OPS_MAX && start.elapsed() < budget {
                        appender.append(journal, Some(&mut timed))?;
                        ops += 1;
                    }
                    timed.wall = start.elapsed();
                    Ok(timed)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("an appender thread panicked".into()))
            })
            .collect()
    });
    let mut all = Timed::default();
    for part in parts {
        let part = part?;
        all.count += part.count;
        all.wall = all.wall.max(part.wall);
        all.latencies.extend(part.latencies);
    }
    Ok(all.figure("single_8_threads", "appends/s"))
}

/// [`BATCH`]-record appends to one stream per commit, round-robin over the streams. Units:
/// records.
fn batch(dir: &Path, budget: Duration) -> Result<Figure, WorkloadError> {
    let journal = open(dir)?;
    let streams = (0..STREAMS / 4).map(stream).collect::<Result<_, _>>()?;
    let timed = Appender::new(streams, 2, BATCH).run(&journal, budget)?;
    Ok(timed.figure("batch_40", "records/s"))
}

/// A journal of `records` records in one stream; `read_stream` of all of them and `scan` of all
/// of them, each repeated for the budget (at least once). Units: records.
fn reads(dir: &Path, budget: Duration, records: u64) -> Result<[Figure; 2], WorkloadError> {
    let journal = open(dir)?;
    let s = stream(0)?;
    let mut head = 0;
    let mut seq = 0;
    while seq < records {
        let n = LOAD_BATCH.min(records - seq);
        let batch = (seq..seq + n).map(|i| record(3, i)).collect();
        head = journal
            .append(StreamAppend::new(s, expected(head), batch))?
            .last_revision();
        seq += n;
    }
    let passes = |f: &mut dyn FnMut() -> Result<u64, WorkloadError>| {
        let mut timed = Timed::default();
        let start = Instant::now();
        while timed.latencies.is_empty() || start.elapsed() < budget {
            let t = Instant::now();
            let n = f()?;
            timed.latencies.push(t.elapsed());
            if n != records {
                return Err(format!("a read saw {n} of {records} records").into());
            }
            timed.count += n;
        }
        timed.wall = start.elapsed();
        Ok::<Timed, WorkloadError>(timed)
    };
    let read_stream = passes(&mut || {
        let got = journal.read_stream(&s, 1, records as usize)?;
        let bytes: usize = got.iter().map(|r| r.payload.len()).sum();
        std::hint::black_box(bytes);
        Ok(got.len() as u64)
    })?;
    let scan = passes(&mut || {
        let mut bytes = 0usize;
        let n = journal.scan(1, |view| {
            bytes += view.payload.len();
            ControlFlow::Continue(())
        })?;
        std::hint::black_box(bytes);
        Ok(n)
    })?;
    Ok([
        read_stream.figure("read_stream_10k", "records/s"),
        scan.figure("scan_10k", "records/s"),
    ])
}

/// Runs every figure, each in a fresh journal in its own directory under `config.dir` (removed
/// afterwards).
pub fn run(config: &Config) -> Result<Vec<Figure>, WorkloadError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let base = config
        .dir
        .join(format!("ctx-seam-ab-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let wanted = |g: &str| config.only.is_empty() || config.only.iter().any(|o| o == g);
    let result = (|| {
        let mut figures = Vec::new();
        if wanted("single") {
            figures.push(single(&base.join("single"), config.budget)?);
        }
        if wanted("group") {
            figures.push(group(&base.join("group"), config.budget)?);
        }
        if wanted("batch") {
            figures.push(batch(&base.join("batch"), config.budget)?);
        }
        if wanted("reads") {
            figures.extend(reads(
                &base.join("reads"),
                config.budget,
                config.read_records,
            )?);
        }
        Ok(figures)
    })();
    let _ = std::fs::remove_dir_all(&base);
    result
}

/// The JSON line the binary prints.
pub fn to_json(figures: &[Figure]) -> String {
    let items: Vec<String> = figures
        .iter()
        .map(|f| {
            format!(
                "{{\"key\":\"{}\",\"unit\":\"{}\",\"value\":{},\"count\":{},\"seconds\":{},\
                 \"p50_us\":{},\"p99_us\":{}}}",
                f.key, f.unit, f.value, f.count, f.seconds, f.p50_us, f.p99_us
            )
        })
        .collect();
    format!("{{\"figures\":[{}]}}", items.join(","))
}

/// `ctx-seam-workload --dir DIR [--budget-ms N] [--read-records N] [--only GROUP]...`: runs
/// [`run`] and prints [`to_json`].
pub fn main_with_args(args: &[String]) -> Result<(), WorkloadError> {
    let mut config = Config {
        dir: std::env::temp_dir(),
        budget: Duration::from_millis(2000),
        read_records: READ_RECORDS,
        only: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--dir" => config.dir = std::path::absolute(value()?)?,
            "--budget-ms" => config.budget = Duration::from_millis(value()?.parse()?),
            "--read-records" => config.read_records = value()?.parse()?,
            "--only" => {
                let group = value()?;
                if !GROUPS.contains(&group.as_str()) {
                    return Err(format!("--only {group}: not one of {GROUPS:?}").into());
                }
                config.only.push(group.clone());
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let figures = run(&config)?;
    println!("{}", to_json(&figures));
    Ok(())
}
