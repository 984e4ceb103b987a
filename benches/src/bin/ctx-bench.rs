//! `ctx-bench compare [--quick]`: the side-by-side peer comparison; `ctx-bench hook-latency`: the
//! cold-start wall time of `ctx hook claude user-prompt-submit` (on redb, and with `--postgres` on
//! PostgreSQL too); `ctx-bench seam-ab`: the redb journal before and after the storage-seam
//! refactor; `ctx-bench pg-append`: appends through the seam on PostgreSQL ÷ plain inserts;
//! `ctx-bench storage-growth`: bytes on disk per prompt, audit memory, reopen after kill -9;
//! `ctx-bench catalog-scale`: ingest, list and plan with a generated catalog of up to 100,000
//! entries; `ctx-bench plan-quality`: recall, precision and abstention of the plans of a labelled
//! prompt set. See `ctx-bench --help`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ctx_benches::compare::{self, Config};
use ctx_benches::{
    BenchResult, catalog_scale, hook_latency, pg_append, plan_quality, seam_ab, storage_growth,
    target_dir, zstd_dictionary,
};

const HELP: &str = "\
ctx-bench: side-by-side throughput of the ctx journal and its peers, measured in one run; and
the cold-start latency of the ctx hook process.

USAGE:
    ctx-bench compare [--quick] [--dir DIR] [--out FILE] [--reopen-records N]
    ctx-bench hook-latency [--ctx PATH] [--runs N] [--test] [--disk-dir DIR] [--tmpfs-dir DIR]
                           [--postgres | --journal URL] [--out FILE] [--session-prompts N]
                           [--catalog-size N[,N...]] [--strace]
    ctx-bench seam-ab [--before REV] [--worktree DIR] [--before-target DIR] [--keep-worktree]
                      [--dir DIR] [--rounds N] [--budget-ms N] [--test] [--out FILE]
    ctx-bench pg-append [--url URL] [--clients 1,8] [--rounds N] [--budget-ms N] [--test]
                        [--out FILE]
    ctx-bench storage-growth [--ctx PATH] [--prompts N] [--dir DIR] [--pad-to-mb N] [--keep]
                             [--test] [--out FILE]
    ctx-bench zstd-dictionary --train EXPORT... [--held-out EXPORT...] [--size BYTES]
                              [--out FILE] [--against DICT]
    ctx-bench catalog-scale [--entries N] [--ctx PATH] [--dir DIR] [--out FILE] [--keep]
                            [--check]
    ctx-bench plan-quality [--test] [--dir DIR] [--keep] [--out FILE]
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
  VarveDB      (crate varvedb, LMDB + rkyv) single appends, 8 appender threads, 1000-event
               batches to one stream (its batches name one stream, so the 64-stream shape is
               listed as not expressible)
  umadb-core   (the engine under UmaDB) single conditional appends, 8 appender threads through
               its grouped writer, 1000-event conditional appends in the journal's 64-stream
               shape and to one stream
  replay       journal Journal::scan (digest + MAC verified) with an rkyv payload access and with
               a no-op closure, vs SQLite SELECT ... ORDER BY position + serde_json decode, VarveDB
               and umadb-core full ordered reads with the same rkyv access
  disk         bytes on disk per record (allocated and file length) after the replay load
  reopen       journal, VarveDB, umadb-core: a child ctx-bench loads N records (--reopen-records,
               default 10,000 with --quick, 100,000 otherwise), then appends until SIGKILLed;
               the figure is the reopen + first read
Every row names its store's guarantees (durability, chain/MAC, expected revisions,
idempotency). It prints the ratios p1 (journal single / raw overwrite), p2 (journal 8 appenders /
SQLite 8 writers), p3 (journal batches / raw redb batches), p4_records_per_s (journal replay),
p4_vs_sqlite_json (journal replay / SQLite + JSON) and journal / peer for every workload a peer
expresses (journal_vs_varvedb_*, journal_vs_umadb_*).

Measurements are interleaved: every measurement is set up first (its own temp dir, database
and counters, kept for the whole run), then all of them run in 5 rounds, one after another
within each round, so a slow spell of a shared disk hits every peer rather than one. A figure is
the median of its 5 round rates (each round's rate is in the JSON).
  timed rounds (raw disk, single commits, concurrent writers, replay) last a fixed wall-clock
    budget: 0.4 s with --quick, 3 s otherwise (or stop at 50k / 500k ops per thread);
  batch rounds (1000 records per commit) write a fixed count: 30k records with --quick, 150k
    otherwise, so every store grows to the same size (safety stop 20 s / 60 s).
Replay loads 50k (--quick) or 200k records into each store before the rounds and repeats whole
scans for each round's budget (at least one scan). On a 2-core machine --quick takes about 80 s
(the two event-store peers add about 10 s each) and the full run about eight minutes.

OPTIONS:
    --quick       short rounds (0.4 s timed, 30k records per batch round, 50k replay records)
    --dir DIR     base directory for the temp dirs (default: the system temp dir)
    --out FILE    where to write the JSON (default: <workspace>/target/ctx-bench/compare.json)
    --reopen-records N
                  records the killed child loads before the reopen measurement
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

With --catalog-size, each size in turn (smallest first) gets a catalog of that many entries from
the catalog-scale generator, generated once and ingested (`ctx catalog ingest --catalog-dir`)
into fresh data directories of every case, each warmed with one hook, then measured as above.
Reported per size: p50 and p90 per case and p50 over the smallest size's p50 (issue 23: at most
1.5x from 50 to 10,000 entries, on tmpfs and on disk). Without it: the sample catalog.

With --strace, after each catalog's measured runs, extra hook processes (not the timed ones) run
under `strace -f -c` on the tmpfs and the disk, and the report gives per hook the durable syncs
(fdatasync + fsync + syncfs), the stat family (statx, newfstatat, stat, lstat), openat, read,
write and getdents64, for four prompts:
  no effect        a follow-up prompt repeating the session's first: nothing new to do
  nothing planned  a follow-up prompt without a catalog tag ('yes, continue')
  one activation   the person approved one install the session asked for (the others denied
                   for good); the session's next prompt activates it
  one install      a new session's first prompt chooses that install again, and the hook
                   installs it on the person's earlier grant
The person decides at a terminal (`ctx key init`, `ctx consent approve|deny --yes` in a pty that
`script`, util-linux, provides). Shown with each traced hook's counts: the files it changed
where ctx activates on the host, the journal records it appended (`ctx inspect --json` before
and after; install claim records: it ran an install) and what its reply says it did. Without
strace on PATH a `skipped: strace not found` line is printed; without `script` only the
no-effect and nothing-planned prompts are traced.

OPTIONS (hook-latency):
    --ctx PATH        the ctx binary (default: cargo build --release --bin ctx, with $CARGO or
                      cargo, then <workspace>/target/release/ctx, so the current source is measured)
    --runs N          measured runs per case (default: $CTX_BENCH_HOOK_RUNS, else 50)
    --session-prompts N
                      also run 5 sessions of N prompts on one data directory (the first case's
                      file system) and report prompt 1's p50 against prompt N's
    --catalog-size N[,N...]
                      measure with generated catalogs of these many entries (e.g. 50,1000,10000)
                      instead of the sample catalog; a hook's time grows with the catalog, so keep
                      --runs low for large sizes
    --strace          also count the system calls of traced extra hooks (see above)
    --test            smoke mode: 2 runs per case, no JSON written
    --disk-dir DIR    base directory of the including-fsync case (default: the system temp dir)
    --tmpfs-dir DIR   base directory of the excluding-fsync case (default: /dev/shm if it exists;
                      without one that case is skipped and the report says so)
    --postgres        add a case with the journal on PostgreSQL (CTX_JOURNAL_URL set, data dir on
                      the disk): a throwaway cluster (ctx_journal_pg harness), or the server at
                      $CTX_PG_URL, with a fresh database ctx_bench_hook; the report gives its p50
                      and p90 over the redb disk case's (with at most one --catalog-size)
    --journal URL     as --postgres, with the journal in the database URL names (must be empty)
    --out FILE        where to write the JSON (default: <workspace>/target/ctx-bench/hook-latency.json)

seam-ab measures the redb journal before and after the storage-seam refactor: the same workload
(benches/src/seam_ab/workload.rs: single-record appends from 1 thread and from 8 threads with
group commit, 40-record appends, read_stream and scan of 10k records; each figure a fresh journal
and a timed loop) is built at HEAD and, in a git worktree with its own target dir, at REV, and the
two binaries run alternately (before, HEAD, before, HEAD, ...), one process each. Reported per
figure: both medians, HEAD/before of the medians, and the median of the per-round ratios.

OPTIONS (seam-ab):
    --before REV          the older revision (default e880d54: the core still drives redb)
    --worktree DIR        its worktree (default /tmp/ctx-before; created when missing and then
                          removed at the end unless --keep-worktree; an existing one must be at REV)
    --before-target DIR   its target dir (default /tmp/ctx-before-target; removed with the worktree)
    --keep-worktree       keep a worktree this run created, and its build, for the next run
    --dir DIR             base directory of the journals (default: <workspace>/target/ctx-bench/tmp,
                          a real disk; fsync dominates the append figures)
    --rounds N            runs per side (default 5)
    --budget-ms N         timed loop per figure per run (default 2000)
    --test                smoke mode: HEAD's binary on both sides, 1 round, 100 ms, no worktree
    --out FILE            default <workspace>/target/ctx-bench/seam-ab.json

pg-append measures item 7a: appends through the seam (a Journal on a PgBackend) ÷ plain
PostgreSQL inserts of the same sealed record rows, with 1 and 8 clients: N handles each on its own
backend (like N processes), N plain clients doing BEGIN; INSERT; COMMIT into a table of
ctx_records' shape without the position lock, and (N > 1) N threads sharing one handle, whose
group commit batches them. Rounds interleave the cases; each round's lock share (backends waiting
on a lock in pg_stat_activity, sampled every 2 ms, ÷ clients) shows the position lock's wait.

OPTIONS (pg-append):
    --url URL         a server to create (and drop) ctx_bench_* databases on (default: $CTX_PG_URL,
                      else a throwaway cluster started with the ctx_journal_pg harness)
    --clients LIST    client counts (default 1,8)
    --rounds N        rounds (default 5)
    --budget-ms N     per case per round (default 2000)
    --test            smoke mode: clients 1,2, 1 round, 100 ms; without PostgreSQL it prints a
                      skipped line (a failure with CTX_REQUIRE_PG=1)
    --out FILE        default <workspace>/target/ctx-bench/pg-append.json

storage-growth lives one data directory through N prompts (default 2000, or
$CTX_BENCH_STORAGE_PROMPTS) in sessions of 20 (session-start, each prompt followed by a Bash
tool-outcome, session-end), each a fresh `ctx hook claude ...` process, nobody answering consents;
then reports the journal file, redb's allocated pages and every table's stored bytes per prompt,
`ctx audit`'s wall time and peak RSS (VmHWM sampled every 5 ms), the in-process reopen and the
next prompt hook after a prompt hook is killed with SIGKILL at 15-90 ms, and the file after
`ctx compact`.

zstd-dictionary trains a zstd dictionary on the record payloads of `ctx export` files (--train)
and reports what each payload compressed alone (level 3, payloads under 128 bytes as is) takes
without a dictionary, with the new one and with --against DICT (e.g. the committed
journal/core/src/records-v1.zdict), on the training payloads and on --held-out exports. The
committed dictionary is part of the record format and is never replaced in place
(spec/journal.md §4).

OPTIONS (zstd-dictionary):
    --train FILE      a `ctx export` file to train on (repeatable, at least one)
    --held-out FILE   a `ctx export` file to measure on, not trained on (repeatable)
    --size BYTES      the dictionary's size (default 32768)
    --against FILE    a dictionary to compare with
    --out FILE        where to write the new dictionary (default: not written)

OPTIONS (storage-growth):
    --ctx PATH        the ctx binary (default: build the release binary)
    --prompts N       prompts (default 2000)
    --dir DIR         where the data directory lives (default: the system temp dir)
    --pad-to-mb N     after the prompts, append incompressible records (a kind no projection
                      reads) until the journal file is N MB, so that the audit's memory and the
                      reopen after kill -9 are measured at that size (per-prompt figures are
                      taken before)
    --keep            keep the run's home, project and data directory (printed) for inspection
    --test            smoke mode: 12 prompts; the figures are printed, not written
    --out FILE        default <workspace>/target/ctx-bench/storage-growth.json

catalog-scale generates a ctx.catalog-v2 catalog directory of N entries (spec/catalog.md §1.4;
deterministic, seeded by each entry's index): 55% skills with a SKILL.md as material, 10% skill
trees (SKILL.md, references/guide.md, an executable scripts/run.sh) installed as a tree, 20%
agents and 15% MCP servers, each an install; 2-6 tags each from a vocabulary of a few hundred.
Then, each a fresh ctx process on one new data directory, timed from spawn to exit with its peak
RSS (/usr/bin/time -f %M, from wait4): `ctx catalog ingest --catalog-dir` of the generated
directory; the same ingest again (unchanged: the data directory's files are compared before and
after, it must write nothing); `ctx catalog list` and `ctx catalog list --json`;
`ctx query prepare` twice (the first also creates the journal); one
`ctx hook claude user-prompt-submit`. Reported: catalog.json bytes, body files and bytes, the
data directory's size and each step's exit, wall time, peak RSS and output. A failing step is
reported with its error; the others still run, and the command then exits non-zero.

OPTIONS (catalog-scale):
    --entries N       entries (default 100000, the ctx.catalog-v2 limit)
    --ctx PATH        the ctx binary (default: build the release binary)
    --dir DIR         where the run's directory (catalog + data directory) is made (default: the
                      system temp dir)
    --keep            keep the run's directory (printed)
    --check           load the generated directory in this process before measuring (always done
                      up to 2000 entries), so a generator mistake fails with the loader's sentence
    --out FILE        default <workspace>/target/ctx-bench/catalog-scale.json

plan-quality measures how well ctx picks capabilities for a prompt. A catalog of about 270
realistic skills, subagents, MCP servers and harnesses (load, install and manual ones; written
for this bench, benches/src/plan_quality/catalog.rs) is generated as a ctx.catalog-v2 directory,
ingested into a fresh data directory, and every labelled prompt (benches/src/plan_quality/
prompts.rs: each with the set of entries that are a correct pick, empty when none fits) is
planned in-process as the prompt hook plans it (observe_work, prepare), each its own session.
Reported: recall@5 (prompts with a fitting entry that got at least one), precision (selections
that fit their prompt), abstention accuracy (prompts with no fitting entry that got nothing),
mean selections per prompt, each per kind of prompt, every miss and the entries most often
selected where they do not fit. Low figures are a result, not a failure, and so is a prompt the
product refuses to plan (listed in the report); the command fails only when the harness does (the
catalog does not ingest, the runtime does not open, a file or the journal fails).

OPTIONS (plan-quality):
    --test            smoke mode: 20 prompts spread over the set; the report is printed, not written
    --dir DIR         where the run's directory (catalog + data directory) is made (default: the
                      system temp dir)
    --keep            keep the run's directory (printed)
    --out FILE        default <workspace>/target/ctx-bench/plan-quality.json; the markdown report
                      goes next to it with the extension .md";

struct CatalogScaleArgs {
    entries: usize,
    ctx: Option<PathBuf>,
    dir: Option<PathBuf>,
    keep: bool,
    check: bool,
    out: Option<PathBuf>,
}

struct StorageArgs {
    ctx: Option<PathBuf>,
    prompts: Option<usize>,
    dir: Option<PathBuf>,
    keep: bool,
    pad_to_mb: Option<u64>,
    smoke: bool,
    out: Option<PathBuf>,
}

struct CompareArgs {
    quick: bool,
    dir: Option<PathBuf>,
    out: Option<PathBuf>,
    reopen_records: Option<u64>,
}

/// The hidden `compare-child STORE DIR RECORDS`: the process `compare` kills for its reopen
/// measurement.
struct CompareChildArgs {
    store: String,
    dir: PathBuf,
    records: u64,
    then: compare::After,
}

struct HookArgs {
    ctx: Option<PathBuf>,
    runs: Option<usize>,
    /// `--session-prompts N`: also measure the first and the N-th prompt of long sessions.
    session_prompts: Option<usize>,
    smoke: bool,
    disk_dir: Option<PathBuf>,
    tmpfs_dir: Option<PathBuf>,
    postgres: bool,
    journal: Option<String>,
    /// `--catalog-size N[,N...]`: generated catalogs instead of the sample catalog.
    catalog_sizes: Vec<usize>,
    /// `--strace`: count the system calls of traced extra hooks.
    strace: bool,
    out: Option<PathBuf>,
}

struct SeamArgs {
    before: String,
    worktree: PathBuf,
    before_target: PathBuf,
    keep: bool,
    dir: Option<PathBuf>,
    rounds: usize,
    budget: Duration,
    smoke: bool,
    out: Option<PathBuf>,
}

struct PgArgs {
    url: Option<String>,
    clients: Vec<usize>,
    rounds: usize,
    budget: Duration,
    smoke: bool,
    out: Option<PathBuf>,
}

enum Args {
    Compare(CompareArgs),
    CompareChild(CompareChildArgs),
    HookLatency(HookArgs),
    SeamAb(SeamArgs),
    PgAppend(PgArgs),
    StorageGrowth(StorageArgs),
    ZstdDictionary(DictionaryArgs),
    CatalogScale(CatalogScaleArgs),
    PlanQuality(PlanQualityArgs),
}

struct PlanQualityArgs {
    smoke: bool,
    dir: Option<PathBuf>,
    keep: bool,
    out: Option<PathBuf>,
}

struct DictionaryArgs {
    train: Vec<PathBuf>,
    held_out: Vec<PathBuf>,
    size: usize,
    against: Option<PathBuf>,
    out: Option<PathBuf>,
}

fn positive(arg: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|&n: &usize| n > 0)
        .ok_or_else(|| format!("{arg} {text} is not a positive number"))
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut it = args.iter();
    let mut parsed = match it.next().map(String::as_str) {
        Some("compare") => Args::Compare(CompareArgs {
            quick: false,
            dir: None,
            out: None,
            reopen_records: None,
        }),
        Some("compare-child") => {
            let mut next = |what: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("compare-child needs {what}"))
            };
            let store = next("a store")?;
            let dir = next("a directory")?.into();
            let records = positive("compare-child", &next("a record count")?)? as u64;
            let then = match it.next() {
                Some(word) => compare::After::parse(word)?,
                None => compare::After::AppendUntilKilled,
            };
            return Ok(Some(Args::CompareChild(CompareChildArgs {
                store,
                dir,
                records,
                then,
            })));
        }
        Some("hook-latency") => Args::HookLatency(HookArgs {
            ctx: None,
            runs: None,
            session_prompts: None,
            smoke: false,
            disk_dir: None,
            tmpfs_dir: None,
            postgres: false,
            journal: None,
            catalog_sizes: Vec::new(),
            strace: false,
            out: None,
        }),
        Some("seam-ab") => Args::SeamAb(SeamArgs {
            before: seam_ab::DEFAULT_BEFORE.to_owned(),
            worktree: PathBuf::from("/tmp/ctx-before"),
            before_target: PathBuf::from("/tmp/ctx-before-target"),
            keep: false,
            dir: None,
            rounds: seam_ab::DEFAULT_ROUNDS,
            budget: seam_ab::DEFAULT_BUDGET,
            smoke: false,
            out: None,
        }),
        Some("pg-append") => Args::PgAppend(PgArgs {
            url: None,
            clients: pg_append::DEFAULT_CLIENTS.to_vec(),
            rounds: pg_append::DEFAULT_ROUNDS,
            budget: pg_append::DEFAULT_BUDGET,
            smoke: false,
            out: None,
        }),
        Some("storage-growth") => Args::StorageGrowth(StorageArgs {
            ctx: None,
            prompts: None,
            dir: None,
            keep: false,
            pad_to_mb: None,
            smoke: false,
            out: None,
        }),
        Some("zstd-dictionary") => Args::ZstdDictionary(DictionaryArgs {
            train: Vec::new(),
            held_out: Vec::new(),
            size: zstd_dictionary::DEFAULT_DICTIONARY_BYTES,
            against: None,
            out: None,
        }),
        Some("catalog-scale") => Args::CatalogScale(CatalogScaleArgs {
            entries: catalog_scale::DEFAULT_ENTRIES,
            ctx: None,
            dir: None,
            keep: false,
            check: false,
            out: None,
        }),
        Some("plan-quality") => Args::PlanQuality(PlanQualityArgs {
            smoke: false,
            dir: None,
            keep: false,
            out: None,
        }),
        Some("-h" | "--help" | "help") | None => return Ok(None),
        Some(other) => return Err(format!("unknown subcommand {other:?}")),
    };
    while let Some(arg) = it.next() {
        if matches!(arg.as_str(), "-h" | "--help") {
            return Ok(None);
        }
        let mut text = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        let a = arg.as_str();
        match &mut parsed {
            Args::Compare(c) => match a {
                "--quick" => c.quick = true,
                "--dir" => c.dir = Some(text()?.into()),
                "--out" => c.out = Some(text()?.into()),
                "--reopen-records" => c.reopen_records = Some(positive(a, &text()?)? as u64),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::CompareChild(_) => return Err(format!("unknown argument {arg:?}")),
            Args::HookLatency(h) => match a {
                "--ctx" => h.ctx = Some(text()?.into()),
                "--runs" => h.runs = Some(positive(a, &text()?)?),
                "--session-prompts" => h.session_prompts = Some(positive(a, &text()?)?),
                "--test" | "--smoke" => h.smoke = true,
                "--disk-dir" => h.disk_dir = Some(text()?.into()),
                "--tmpfs-dir" => h.tmpfs_dir = Some(text()?.into()),
                "--postgres" => h.postgres = true,
                "--journal" => h.journal = Some(text()?),
                "--catalog-size" => {
                    h.catalog_sizes = hook_latency::Config::catalog_sizes_from(&text()?)?;
                }
                "--strace" => h.strace = true,
                "--out" => h.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::SeamAb(s) => match a {
                "--before" => s.before = text()?,
                "--worktree" => s.worktree = text()?.into(),
                "--before-target" => s.before_target = text()?.into(),
                "--keep-worktree" => s.keep = true,
                "--dir" => s.dir = Some(text()?.into()),
                "--rounds" => s.rounds = positive(a, &text()?)?,
                "--budget-ms" => s.budget = Duration::from_millis(positive(a, &text()?)? as u64),
                "--test" | "--smoke" => s.smoke = true,
                "--out" => s.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::PgAppend(p) => match a {
                "--url" => p.url = Some(text()?),
                "--clients" => {
                    p.clients = text()?
                        .split(',')
                        .map(|n| positive(a, n.trim()))
                        .collect::<Result<_, _>>()?;
                }
                "--rounds" => p.rounds = positive(a, &text()?)?,
                "--budget-ms" => p.budget = Duration::from_millis(positive(a, &text()?)? as u64),
                "--test" | "--smoke" => p.smoke = true,
                "--out" => p.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::StorageGrowth(g) => match a {
                "--ctx" => g.ctx = Some(text()?.into()),
                "--prompts" => g.prompts = Some(positive(a, &text()?)?),
                "--dir" => g.dir = Some(text()?.into()),
                "--keep" => g.keep = true,
                "--pad-to-mb" => g.pad_to_mb = Some(positive(a, &text()?)? as u64),
                "--test" | "--smoke" => g.smoke = true,
                "--out" => g.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::ZstdDictionary(d) => match a {
                "--train" => d.train.push(text()?.into()),
                "--held-out" => d.held_out.push(text()?.into()),
                "--size" => d.size = positive(a, &text()?)?,
                "--against" => d.against = Some(text()?.into()),
                "--out" => d.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::CatalogScale(c) => match a {
                "--entries" => c.entries = positive(a, &text()?)?,
                "--ctx" => c.ctx = Some(text()?.into()),
                "--dir" => c.dir = Some(text()?.into()),
                "--keep" => c.keep = true,
                "--check" => c.check = true,
                "--out" => c.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
            Args::PlanQuality(q) => match a {
                "--test" | "--smoke" => q.smoke = true,
                "--dir" => q.dir = Some(text()?.into()),
                "--keep" => q.keep = true,
                "--out" => q.out = Some(text()?.into()),
                _ => return Err(format!("unknown argument {arg:?}")),
            },
        }
    }
    if let Args::ZstdDictionary(d) = &parsed
        && d.train.is_empty()
    {
        return Err("zstd-dictionary needs at least one --train export".to_owned());
    }
    if let Args::HookLatency(h) = &parsed
        && h.postgres
        && h.journal.is_some()
    {
        return Err("--postgres and --journal exclude each other".to_owned());
    }
    if let Args::HookLatency(h) = &parsed
        && (h.postgres || h.journal.is_some())
        && h.catalog_sizes.len() > 1
    {
        return Err(
            "a PostgreSQL journal is one empty database and every catalog size needs a fresh \
             journal: give one --catalog-size with --postgres or --journal"
                .to_owned(),
        );
    }
    Ok(Some(parsed))
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
    let mut config = Config::new(args.quick, base);
    if let Some(records) = args.reopen_records {
        config.reopen_records = records;
    }
    // The reopen-after-kill child is this binary again (its hidden compare-child subcommand).
    config.child_exe = Some(std::env::current_exe()?);
    let report = compare::run(&config)?;
    println!("{}", report.markdown());
    write_json(&out, &report.to_json())
}

/// Sessions of `--session-prompts`: each gives one first-prompt and one last-prompt run.
const SESSION_GROWTH_SESSIONS: usize = 5;

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
    // The server lives until the end of the run (a throwaway cluster stops when dropped).
    let (_server, journal_url) = if args.postgres {
        let (server, url) = hook_latency::postgres_journal()?;
        (Some(server), Some(url))
    } else {
        (None, args.journal)
    };
    let report = hook_latency::run(&hook_latency::Config {
        ctx,
        runs,
        disk_dir,
        tmpfs_dir,
        journal_url,
        catalog_sizes: args.catalog_sizes,
        strace: args.strace,
    })?;
    println!("{}", report.markdown());
    if let Some(prompts) = args.session_prompts {
        let base = report
            .catalogs
            .first()
            .and_then(|c| {
                c.cases
                    .iter()
                    .find(|c| c.key != hook_latency::POSTGRES_CASE)
            })
            .map_or_else(std::env::temp_dir, |c| c.dir.clone());
        let growth =
            hook_latency::session_growth(&report.ctx, &base, prompts, SESSION_GROWTH_SESSIONS)?;
        println!("{}", growth.markdown());
    }
    // A smoke run's figures mean nothing; it leaves the last real report in place.
    if !args.smoke {
        let out = args
            .out
            .unwrap_or_else(|| target_dir().join("ctx-bench").join("hook-latency.json"));
        write_json(&out, &report.to_json())?;
    }
    Ok(())
}

fn run_seam_ab(args: SeamArgs) -> BenchResult<()> {
    let dir = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => target_dir().join("ctx-bench").join("tmp"),
    };
    eprintln!("building {} at HEAD ...", seam_ab::WORKLOAD_BIN);
    let head_bin = seam_ab::build_workload(&seam_ab::workspace_root(), &target_dir())?;
    let (before, rounds, budget) = if args.smoke {
        let before = seam_ab::Side::Binary {
            bin: head_bin.clone(),
            label: "HEAD (smoke: both sides)".to_owned(),
        };
        (before, 1, Duration::from_millis(100))
    } else {
        let before = seam_ab::Side::Revision {
            rev: args.before,
            worktree: std::path::absolute(args.worktree)?,
            target_dir: std::path::absolute(args.before_target)?,
            keep: args.keep,
        };
        (before, args.rounds, args.budget)
    };
    let report = seam_ab::run(&seam_ab::Config {
        before,
        head_bin,
        dir,
        rounds,
        budget,
        read_records: seam_ab::workload::READ_RECORDS,
    })?;
    println!("{}", report.markdown());
    if !args.smoke {
        let out = args
            .out
            .unwrap_or_else(|| target_dir().join("ctx-bench").join("seam-ab.json"));
        write_json(&out, &report.to_json())?;
    }
    Ok(())
}

fn run_pg_append(args: PgArgs) -> BenchResult<()> {
    let config = if args.smoke {
        let availability = match &args.url {
            Some(_) => Ok(()),
            None => ctx_journal_pg::available(),
        };
        if !ctx_journal_pg::gate("ctx-bench pg-append --test", availability)? {
            return Ok(());
        }
        pg_append::Config {
            url: args.url,
            clients: vec![1, 2],
            rounds: 1,
            budget: Duration::from_millis(100),
        }
    } else {
        pg_append::Config {
            url: args.url,
            clients: args.clients,
            rounds: args.rounds,
            budget: args.budget,
        }
    };
    let report = pg_append::run(&config)?;
    println!("{}", report.markdown());
    if !args.smoke {
        let out = args.out.unwrap_or_else(pg_append::default_out);
        write_json(&out, &report.to_json())?;
    }
    Ok(())
}

fn run_storage_growth(args: StorageArgs) -> BenchResult<()> {
    let ctx = match args.ctx {
        Some(ctx) => ctx,
        None => {
            eprintln!("building the release ctx binary (cargo build --release --bin ctx)");
            hook_latency::build_ctx(&target_dir(), true)?
        }
    };
    let prompts = if args.smoke {
        storage_growth::SMOKE_PROMPTS
    } else {
        storage_growth::prompts_from(args.prompts)?
    };
    let dir = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let report = storage_growth::run(&storage_growth::Config {
        ctx,
        prompts,
        dir,
        keep: args.keep,
        pad_to_bytes: args.pad_to_mb.map(|mb| mb * 1000 * 1000),
    })?;
    println!("{}", report.markdown());
    if !args.smoke {
        let out = args
            .out
            .unwrap_or_else(|| target_dir().join("ctx-bench").join("storage-growth.json"));
        write_json(&out, &report.to_json())?;
    }
    Ok(())
}

fn run(args: Args) -> BenchResult<()> {
    match args {
        Args::Compare(args) => run_compare(args),
        Args::CompareChild(args) => compare::child(&args.store, &args.dir, args.records, args.then),
        Args::HookLatency(args) => run_hook_latency(args),
        Args::SeamAb(args) => run_seam_ab(args),
        Args::PgAppend(args) => run_pg_append(args),
        Args::StorageGrowth(args) => run_storage_growth(args),
        Args::ZstdDictionary(args) => run_zstd_dictionary(args),
        Args::CatalogScale(args) => run_catalog_scale(args),
        Args::PlanQuality(args) => run_plan_quality(args),
    }
}

fn run_plan_quality(args: PlanQualityArgs) -> BenchResult<()> {
    let dir = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let report = plan_quality::run(&plan_quality::Config {
        smoke: args.smoke,
        dir,
        keep: args.keep,
    })?;
    println!("{}", report.markdown());
    println!("{}", report.summary());
    // A smoke run's figures cover a sample only; it leaves the last full report in place.
    if !args.smoke {
        let out = args
            .out
            .unwrap_or_else(|| target_dir().join("ctx-bench").join("plan-quality.json"));
        write_json(&out, &report.to_json())?;
        let md = out.with_extension("md");
        std::fs::write(&md, report.markdown())?;
        eprintln!("wrote {}", md.display());
    }
    Ok(())
}

fn run_catalog_scale(args: CatalogScaleArgs) -> BenchResult<()> {
    let ctx = match args.ctx {
        Some(ctx) => ctx,
        None => {
            eprintln!("building the release ctx binary (cargo build --release --bin ctx)");
            hook_latency::build_ctx(&target_dir(), true)?
        }
    };
    let dir = match args.dir {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::temp_dir(),
    };
    let report = catalog_scale::run(&catalog_scale::Config {
        ctx,
        entries: args.entries,
        dir,
        keep: args.keep,
        check: args.check,
    })?;
    println!("{}", report.markdown());
    let out = args
        .out
        .unwrap_or_else(|| target_dir().join("ctx-bench").join("catalog-scale.json"));
    write_json(&out, &report.to_json())?;
    let failed = report.failed();
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|s| s.label).collect();
        return Err(format!("{} failed (see the report)", names.join(", ")).into());
    }
    Ok(())
}

fn run_zstd_dictionary(args: DictionaryArgs) -> BenchResult<()> {
    let load = |files: &[PathBuf]| -> BenchResult<Vec<Vec<u8>>> {
        let mut all = Vec::new();
        for file in files {
            all.extend(zstd_dictionary::export_payloads(file)?);
        }
        Ok(all)
    };
    let train = load(&args.train)?;
    let held_out = load(&args.held_out)?;
    let dictionary = zstd_dictionary::train(&train, args.size)?;
    let against = args.against.as_ref().map(std::fs::read).transpose()?;
    println!(
        "| payloads | records | raw bytes | no dictionary | new ({} B) | --against |",
        dictionary.len()
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, set) in [("training", &train), ("held out", &held_out)] {
        if set.is_empty() {
            continue;
        }
        let raw: u64 = set.iter().map(|p| p.len() as u64).sum();
        let min = zstd_dictionary::COMPRESS_MIN_BYTES;
        let none = zstd_dictionary::compressed_bytes(set, None, min)?;
        let new = zstd_dictionary::compressed_bytes(set, Some(&dictionary), min)?;
        let old = match &against {
            Some(d) => zstd_dictionary::compressed_bytes(set, Some(d), min)?.to_string(),
            None => "-".to_owned(),
        };
        println!(
            "| {name} | {} | {raw} | {none} | {new} | {old} |",
            set.len()
        );
    }
    if let Some(out) = args.out {
        std::fs::write(&out, &dictionary)?;
        println!("wrote {} ({} bytes)", out.display(), dictionary.len());
    }
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
