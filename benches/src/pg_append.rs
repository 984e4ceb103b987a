//! `ctx-bench pg-append`: item 7a of the PostgreSQL backend — appends through the storage seam
//! (`Journal` on `PgBackend`) ÷ plain PostgreSQL inserts of the same rows, with 1 and 8 clients
//! (target ≥ 0.8).
//!
//! Cases, each in its own database of one server (a throwaway [`ctx_journal_pg::Cluster`] with
//! `fsync=on`, `synchronous_commit=on`, unless `--url` or `$CTX_PG_URL` names one):
//! - **seam, N handles**: N client threads, each with its own `Journal` on its own `PgBackend`
//!   (as N processes would have; they share the data directory holding the installation key),
//!   single-record appends with exact expected revisions to the client's own 50 streams, unique
//!   event ids, 200-byte payloads. Write transactions of all handles serialize on the position
//!   row lock (`ctx_meta … FOR UPDATE`), since the record MAC binds a dense global position; since
//!   schema 4 they release it before their WAL flush (asynchronous commit + a durability step,
//!   spec/scale-out.md §3.9), as the "locked, early release" case does in plain SQL.
//! - **plain inserts, N clients**: N `postgres::Client`s, each append `BEGIN; INSERT …; COMMIT`
//!   of a sealed record row (bytes written by the seam in a setup database) into a table of
//!   `ctx_records`' shape (position from a bigserial, stream, revision, event_id, record, txid;
//!   the same unique constraints), without the position lock or the stream-head row.
//! - **seam, N threads on one handle** (N > 1): the N threads share one `Journal`, whose group
//!   commit batches queued appends into one transaction: the lock is taken once per group.
//! - **locked, N clients** (N > 1): the plain insert under the seam's position scheme, without
//!   the journal, in two round trips like the seam's: `BEGIN; SELECT … FOR UPDATE` of a one-row
//!   position table, then the insert at the next position, the position update and `COMMIT` as
//!   one multi-statement query (values as hex literals) — what serializing positions across the
//!   WAL flush costs by itself.
//! - **locked, early release, N clients** (N > 1): the same, but the transaction commits with
//!   `synchronous_commit = off` (the lock is released once the commit record is written, before
//!   the flush), and the same query then runs a second, synchronous transaction that upserts the
//!   client's row of a small table with the last position (its commit record comes later in the
//!   WAL, so its flush covers the first; concurrent flushes are shared by PostgreSQL's group
//!   commit): still two round trips. The measurement behind spec/scale-out.md §3.8.
//!
//! Every case runs once per round, rounds interleaved (seam, plain, shared for 1 client, then for
//! N), so a slow spell of the shared machine hits each. A figure is the median of the rounds'
//! appends/s; latency percentiles are over all rounds' appends. During every case a sampler polls
//! `pg_stat_activity` of the case's database every 2 ms and counts the clients' backends by what
//! they wait for: a heavyweight lock (`wait_event_type = 'Lock'`: for the seam, the position row
//! lock), the WAL flush (`IO` `WALSync`/`WALWrite`, or `LWLock` `WALWrite` while another backend
//! flushes), the client inside a transaction (`Client` while `idle in transaction`: a round trip
//! or the client's own work, with the transaction's locks held) or nothing (running).
//! Each share is the mean number of backends in that state ÷ N, the share of the clients' time.
//!
//! ```text
//! cargo run --release -p ctx-benches --bin ctx-bench -- pg-append [--clients 1,8]
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ctx_journal::{
    ExpectedRevision, Journal, NewRecord, OpenOptions, StreamAppend, StreamId, Timestamp,
};
use ctx_journal_pg::{Cluster, ClusterOptions, PgBackend, TestServer};
use postgres::{NoTls, Statement};
use serde_json::{Value, json};

use crate::BenchResult;
use crate::measure::{Sample, median};

/// Rounds when not told otherwise.
pub const DEFAULT_ROUNDS: usize = 5;
/// Budget of one case in one round.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(2000);
/// Client counts when not told otherwise.
pub const DEFAULT_CLIENTS: [usize; 2] = [1, 8];
/// Bytes of every record's payload.
pub const PAYLOAD_BYTES: usize = 200;
/// Streams of each client.
const STREAMS_PER_CLIENT: usize = 50;
/// Appends each client makes before its first round.
const WARM_UP: u64 = 10;
/// Sealed record rows the plain inserts cycle through.
const POOL: u64 = 64;
/// How often the lock sampler polls `pg_stat_activity`.
const SAMPLE_EVERY: Duration = Duration::from_millis(2);
const KIND: &str = "bench.pg_append";
/// 2026-01-01T00:00:00Z in microseconds.
const EPOCH_MICROS: i64 = 1_767_225_600_000_000;

/// What a run measures.
#[derive(Debug, Clone)]
pub struct Config {
    /// A server (libpq string or URL) the bench may create and drop `ctx_bench_*` databases on;
    /// `None` starts a throwaway cluster.
    pub url: Option<String>,
    pub clients: Vec<usize>,
    pub rounds: usize,
    pub budget: Duration,
}

/// splitmix64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 36-character random-looking event id, unique per (tag, seq).
fn event_id(tag: u64, seq: u64) -> String {
    format!(
        "evt-{:016x}{:016x}",
        mix(seq ^ tag.rotate_left(40)),
        mix(seq).wrapping_add(tag)
    )
}

fn payload(seq: u64) -> Vec<u8> {
    let mut p = format!(
        "{{\"scope\":\"scope-{:04}\",\"capability\":\"skill:repo-search\",\"sequence\":{seq},\
         \"reason\":\"operator approved after consent challenge; policy allows install\"",
        seq % 1000
    )
    .into_bytes();
    p.resize(PAYLOAD_BYTES - 1, b' ');
    p.push(b'}');
    p
}

fn new_record(tag: u64, seq: u64) -> NewRecord {
    NewRecord::new(
        event_id(tag, seq),
        KIND,
        Timestamp(EPOCH_MICROS + seq as i64 * 1000),
        payload(seq),
    )
}

/// One client's streams, their heads and its next sequence number.
#[derive(Debug)]
struct Appender {
    streams: Vec<StreamId>,
    heads: Vec<u64>,
    tag: u64,
    seq: u64,
}

impl Appender {
    fn new(tag: u64) -> BenchResult<Appender> {
        let streams = (0..STREAMS_PER_CLIENT)
            .map(|i| StreamId::derive("bench", format!("pg-{tag}-{i}").as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Appender {
            heads: vec![0; streams.len()],
            streams,
            tag,
            seq: 0,
        })
    }

    /// The next append's stream index and sequence number.
    fn next(&mut self) -> (usize, u64) {
        let seq = self.seq;
        self.seq += 1;
        ((seq % self.streams.len() as u64) as usize, seq)
    }
}

/// How a client writes.
enum Writer {
    Journal(Journal),
    Plain {
        client: Box<postgres::Client>,
        insert: Statement,
        pool: Arc<Vec<Vec<u8>>>,
    },
    /// The plain insert at a position taken from a locked row, in two round trips like the
    /// seam's; `early`: the lock is released before the flush.
    Locked {
        client: Box<postgres::Client>,
        early: bool,
        slot: usize,
        pool: Arc<Vec<Vec<u8>>>,
    },
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Writer::Journal(_) => "Writer::Journal",
            Writer::Plain { .. } => "Writer::Plain",
            Writer::Locked { .. } => "Writer::Locked",
        })
    }
}

#[derive(Debug)]
struct Client {
    writer: Writer,
    app: Appender,
}

impl Client {
    fn append(&mut self) -> BenchResult<()> {
        let (s, seq) = self.app.next();
        let stream = self.app.streams[s];
        let head = self.app.heads[s];
        match &mut self.writer {
            Writer::Journal(journal) => {
                let expected = if head == 0 {
                    ExpectedRevision::NoStream
                } else {
                    ExpectedRevision::Exact(head)
                };
                let append =
                    StreamAppend::new(stream, expected, vec![new_record(self.app.tag, seq)]);
                self.app.heads[s] = journal.append(append)?.last_revision();
            }
            Writer::Plain {
                client,
                insert,
                pool,
            } => {
                let revision = i64::try_from(head + 1)?;
                let id = event_id(self.app.tag, seq);
                let record = &pool[(seq % pool.len() as u64) as usize];
                let key: &[u8] = stream.as_bytes();
                let mut tx = client.transaction()?;
                tx.execute(insert, &[&key, &revision, &id, record])?;
                tx.commit()?;
                self.app.heads[s] = head + 1;
            }
            Writer::Locked {
                client,
                early,
                slot,
                pool,
            } => {
                let id = event_id(self.app.tag, seq);
                let record = &pool[(seq % pool.len() as u64) as usize];
                // Round trip 1: begin and take the position lock.
                let messages = client.simple_query(
                    "BEGIN; SELECT last_position FROM bench_meta WHERE id = 1 FOR UPDATE",
                )?;
                let last: i64 = messages
                    .iter()
                    .find_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(row) => row.get(0),
                        _ => None,
                    })
                    .ok_or("bench_meta has no row")?
                    .parse()?;
                let position = last + 1;
                // Round trip 2: the insert, the position, the commit (and, released early, the
                // durability transaction behind it), as one simple query. The values are
                // hex literals: the pipelining the seam gets from the extended protocol.
                let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
                let mut sql = format!(
                    "INSERT INTO bench_records (position, stream, revision, event_id, record) \
                     VALUES ({position}, '\\x{}', {}, '{id}', '\\x{}'); \
                     UPDATE bench_meta SET last_position = {position} WHERE id = 1; ",
                    hex(stream.as_bytes()),
                    head + 1,
                    hex(record)
                );
                if *early {
                    sql.push_str(&format!(
                        "SET LOCAL synchronous_commit = off; COMMIT; \
                         INSERT INTO bench_ack (slot, position) \
                         SELECT {slot}, last_position FROM bench_meta WHERE id = 1 \
                         ON CONFLICT (slot) DO UPDATE SET position = excluded.position"
                    ));
                } else {
                    sql.push_str("COMMIT");
                }
                client.batch_execute(&sql)?;
                self.app.heads[s] = head + 1;
            }
        }
        Ok(())
    }
}

/// The kinds of case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// N handles, each on its own backend.
    Seam,
    /// N plain clients.
    Plain,
    /// N threads on one handle.
    SeamShared,
    /// N plain clients under a position row lock held across the flush.
    Locked,
    /// N plain clients under a position row lock released before the flush.
    LockedEarly,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Seam => "seam",
            Kind::Plain => "plain",
            Kind::SeamShared => "seam_shared",
            Kind::Locked => "locked",
            Kind::LockedEarly => "locked_early",
        }
    }

    fn label(self, n: usize) -> String {
        match self {
            Kind::Seam if n == 1 => "seam: 1 Journal on its own PgBackend".to_owned(),
            Kind::Seam => format!("seam: {n} Journals, each on its own PgBackend"),
            Kind::Plain => format!("plain: {n} client(s), BEGIN; INSERT; COMMIT"),
            Kind::SeamShared => format!("seam: {n} threads sharing 1 Journal (group commit)"),
            Kind::Locked => format!("locked: {n} client(s), position row lock across the flush"),
            Kind::LockedEarly => format!(
                "locked, early release: {n} client(s), async commit + durability transaction"
            ),
        }
    }
}

/// One case's measurements over the rounds.
#[derive(Debug)]
pub struct CaseResult {
    pub kind: Kind,
    pub clients: usize,
    pub database: String,
    /// Each round's appends over its wall time.
    pub rounds: Vec<Sample>,
    /// Each round's lock share (mean backends waiting on a lock ÷ clients).
    pub lock_share: Vec<f64>,
    /// Each round's shares of the clients' time: waiting on a lock, on the WAL flush, on the
    /// client, running.
    pub waits: Vec<Waits>,
}

/// Shares of the clients' time by what their backends wait for (sampled).
#[derive(Debug, Clone, Copy, Default)]
pub struct Waits {
    pub lock: f64,
    pub wal: f64,
    pub client: f64,
    pub running: f64,
}

impl Waits {
    fn to_json(self) -> Value {
        json!({
            "lock": self.lock,
            "wal_flush": self.wal,
            "client": self.client,
            "running": self.running,
        })
    }

    /// The median of each share over `rounds`.
    fn median_of(rounds: &[Waits]) -> Waits {
        let of = |f: fn(&Waits) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
        Waits {
            lock: of(|w| w.lock),
            wal: of(|w| w.wal),
            client: of(|w| w.client),
            running: of(|w| w.running),
        }
    }
}

impl CaseResult {
    pub fn key(&self) -> String {
        format!("{}_{}", self.kind.key(), self.clients)
    }

    pub fn rates(&self) -> Vec<f64> {
        self.rounds.iter().map(Sample::rate).collect()
    }

    pub fn median_rate(&self) -> f64 {
        median(&self.rates())
    }

    fn all(&self) -> Sample {
        let mut all = Sample::default();
        for r in &self.rounds {
            all.units += r.units;
            all.timed += r.timed;
            all.latencies.extend_from_slice(&r.latencies);
        }
        all
    }

    pub fn p50_us(&self) -> Option<f64> {
        self.all().percentile_us(50.0)
    }

    pub fn p99_us(&self) -> Option<f64> {
        self.all().percentile_us(99.0)
    }
}

struct Case {
    result: CaseResult,
    clients: Vec<Client>,
    /// The data directory of the seam cases (the installation key).
    _dir: Option<tempfile::TempDir>,
}

/// Polls `pg_stat_activity` for the backends of `database` until `stop`. Returns the number of
/// samples and the sums of backends waiting on a lock, on the WAL flush, on the client, and
/// running.
fn sample_locks(
    sampler: &mut postgres::Client,
    database: &str,
    stop: &AtomicBool,
) -> BenchResult<(u64, [u64; 4])> {
    let query = sampler.prepare(
        "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), \
           count(*) FILTER (WHERE (wait_event_type = 'IO' AND wait_event IN ('WALSync', 'WALWrite')) \
             OR (wait_event_type = 'LWLock' AND wait_event = 'WALWrite')), \
           count(*) FILTER (WHERE wait_event_type = 'Client' AND state = 'idle in transaction'), \
           count(*) FILTER (WHERE state = 'active' AND wait_event_type IS NULL) \
         FROM pg_stat_activity WHERE datname = $1::text AND backend_type = 'client backend'",
    )?;
    let (mut samples, mut sums) = (0u64, [0u64; 4]);
    while !stop.load(Ordering::Relaxed) {
        let row = sampler.query_one(&query, &[&database])?;
        samples += 1;
        for (i, sum) in sums.iter_mut().enumerate() {
            let n: i64 = row.try_get(i)?;
            *sum += u64::try_from(n).unwrap_or(0);
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    Ok((samples, sums))
}

/// One round of a case: every client appends for the budget, all starting together.
fn round(case: &mut Case, budget: Duration, sampler: &mut postgres::Client) -> BenchResult<()> {
    let n = case.clients.len();
    let barrier = Barrier::new(n + 1);
    let stop = AtomicBool::new(false);
    let database = case.result.database.clone();
    let (parts, wall, locks) = std::thread::scope(|scope| {
        let handles: Vec<_> = case
            .clients
            .iter_mut()
            .map(|client| {
                let barrier = &barrier;
                scope.spawn(move || -> BenchResult<Sample> {
                    barrier.wait();
                    let start = Instant::now();
                    let mut sample = Sample::default();
                    while start.elapsed() < budget {
                        sample.time(1, || client.append())?;
                    }
                    Ok(sample)
                })
            })
            .collect();
        let (stop, database) = (&stop, &database);
        let sampler = scope.spawn(move || sample_locks(sampler, database, stop));
        let (parts, wall) = crate::measure::release_and_join(&barrier, handles, "a client");
        stop.store(true, Ordering::Relaxed);
        let locks = sampler
            .join()
            .unwrap_or_else(|_| Err("the lock sampler panicked".into()));
        (parts, wall, locks)
    });
    let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
    let (samples, sums) = locks?;
    case.result
        .rounds
        .push(Sample::merge_concurrent(parts, wall));
    let share = |sum: u64| {
        if samples == 0 {
            0.0
        } else {
            sum as f64 / samples as f64 / n as f64
        }
    };
    case.result.lock_share.push(share(sums[0]));
    case.result.waits.push(Waits {
        lock: share(sums[0]),
        wal: share(sums[1]),
        client: share(sums[2]),
        running: share(sums[3]),
    });
    Ok(())
}

/// The server: a throwaway cluster or the one named by `--url` / `$CTX_PG_URL`.
fn server(config: &Config) -> BenchResult<TestServer> {
    let url = config
        .url
        .clone()
        .or_else(|| std::env::var("CTX_PG_URL").ok().filter(|u| !u.is_empty()));
    Ok(match url {
        Some(url) => TestServer::External { url },
        None => {
            eprintln!("starting a throwaway PostgreSQL cluster ...");
            TestServer::Local(Cluster::start(ClusterOptions::new())?)
        }
    })
}

fn journal_on(url: &str, dir: &std::path::Path) -> BenchResult<Journal> {
    let backend = PgBackend::connect(url)?;
    Ok(Journal::open_with_backend(
        dir,
        &OpenOptions::new(),
        Arc::new(backend),
    )?)
}

/// Sealed record bytes as the seam stores them: [`POOL`] appends through a journal in database
/// `ctx_bench_pool`, read back from `ctx_records`.
fn sealed_pool(server: &TestServer) -> BenchResult<Vec<Vec<u8>>> {
    let url = server.create_database("ctx_bench_pool")?;
    let dir = tempfile::tempdir()?;
    let mut client = Client {
        writer: Writer::Journal(journal_on(&url, dir.path())?),
        app: Appender::new(9_999)?,
    };
    for _ in 0..POOL {
        client.append()?;
    }
    let mut pg = postgres::Client::connect(&url, NoTls)?;
    let rows = pg.query("SELECT record FROM ctx_records ORDER BY position", &[])?;
    rows.iter()
        .map(|row| Ok(row.try_get::<_, Vec<u8>>(0)?))
        .collect()
}

const PLAIN_TABLE: &str = "CREATE TABLE bench_records (
    position bigserial PRIMARY KEY,
    stream bytea NOT NULL CHECK (octet_length(stream) = 32),
    revision bigint NOT NULL CHECK (revision >= 1),
    event_id text NOT NULL UNIQUE,
    record bytea NOT NULL,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (stream, revision)
)";
const LOCKED_TABLES: &str =
    "CREATE TABLE bench_meta (id int PRIMARY KEY, last_position bigint NOT NULL);
INSERT INTO bench_meta VALUES (1, 0);
CREATE TABLE bench_ack (slot int PRIMARY KEY, position bigint NOT NULL);
CREATE TABLE bench_records (
    position bigint PRIMARY KEY,
    stream bytea NOT NULL CHECK (octet_length(stream) = 32),
    revision bigint NOT NULL CHECK (revision >= 1),
    event_id text NOT NULL UNIQUE,
    record bytea NOT NULL,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (stream, revision)
)";
const PLAIN_INSERT: &str = "INSERT INTO bench_records (stream, revision, event_id, record) \
                            VALUES ($1::bytea, $2::bigint, $3::text, $4::bytea)";

fn setup_case(
    server: &TestServer,
    kind: Kind,
    n: usize,
    pool: &Arc<Vec<Vec<u8>>>,
) -> BenchResult<Case> {
    let database = format!("ctx_bench_{}_{n}", kind.key());
    let url = server.create_database(&database)?;
    let tag = |t: usize| 1_000 * (kind as u64 + 1) + 100 * n as u64 + t as u64;
    let mut clients = Vec::with_capacity(n);
    let mut dir = None;
    match kind {
        Kind::Plain => {
            let mut setup = postgres::Client::connect(&url, NoTls)?;
            setup.batch_execute(PLAIN_TABLE)?;
            for t in 0..n {
                let mut config: postgres::Config = url.parse()?;
                config.application_name("ctx-bench-plain");
                let mut client = config.connect(NoTls)?;
                let insert = client.prepare(PLAIN_INSERT)?;
                clients.push(Client {
                    writer: Writer::Plain {
                        client: Box::new(client),
                        insert,
                        pool: pool.clone(),
                    },
                    app: Appender::new(tag(t))?,
                });
            }
        }
        Kind::Locked | Kind::LockedEarly => {
            let mut setup = postgres::Client::connect(&url, NoTls)?;
            setup.batch_execute(LOCKED_TABLES)?;
            for t in 0..n {
                let mut config: postgres::Config = url.parse()?;
                config.application_name("ctx-bench-locked");
                let client = config.connect(NoTls)?;
                clients.push(Client {
                    writer: Writer::Locked {
                        client: Box::new(client),
                        early: kind == Kind::LockedEarly,
                        slot: t,
                        pool: pool.clone(),
                    },
                    app: Appender::new(tag(t))?,
                });
            }
        }
        Kind::Seam => {
            let d = tempfile::tempdir()?;
            for t in 0..n {
                clients.push(Client {
                    writer: Writer::Journal(journal_on(&url, d.path())?),
                    app: Appender::new(tag(t))?,
                });
            }
            dir = Some(d);
        }
        Kind::SeamShared => {
            let d = tempfile::tempdir()?;
            let journal = journal_on(&url, d.path())?;
            for t in 0..n {
                clients.push(Client {
                    writer: Writer::Journal(journal.clone()),
                    app: Appender::new(tag(t))?,
                });
            }
            dir = Some(d);
        }
    }
    for client in &mut clients {
        for _ in 0..WARM_UP {
            client.append()?;
        }
    }
    Ok(Case {
        result: CaseResult {
            kind,
            clients: n,
            database,
            rounds: Vec::new(),
            lock_share: Vec::new(),
            waits: Vec::new(),
        },
        clients,
        _dir: dir,
    })
}

/// A ratio of two cases of the same run.
#[derive(Debug, Clone)]
pub struct Ratio {
    pub key: String,
    pub label: String,
    /// Of the medians.
    pub value: f64,
    /// The median of the rounds' ratios.
    pub median_round_ratio: f64,
}

/// What a `pg-append` run measured.
#[derive(Debug)]
pub struct Report {
    pub server: String,
    pub server_version: String,
    pub settings: String,
    pub data_fs: String,
    pub record_bytes: f64,
    pub rounds: usize,
    pub budget: Duration,
    pub cases: Vec<CaseResult>,
    pub ratios: Vec<Ratio>,
}

fn ratio(a: &CaseResult, b: &CaseResult, label: String) -> Ratio {
    let per_round: Vec<f64> = a
        .rates()
        .iter()
        .zip(b.rates())
        .filter(|(_, b)| *b > 0.0)
        .map(|(a, b)| a / b)
        .collect();
    let mb = b.median_rate();
    Ratio {
        key: format!("{}_over_{}", a.key(), b.key()),
        label,
        value: if mb > 0.0 { a.median_rate() / mb } else { 0.0 },
        median_round_ratio: median(&per_round),
    }
}

/// Sets up every case, runs the interleaved rounds and computes the ratios.
pub fn run(config: &Config) -> BenchResult<Report> {
    let server = server(config)?;
    let mut admin = postgres::Client::connect(&server.url(), NoTls)?;
    let show = |admin: &mut postgres::Client, name: &str| -> BenchResult<String> {
        Ok(admin
            .query_one(&format!("SHOW {name}"), &[])?
            .try_get::<_, String>(0)?)
    };
    let server_version = show(&mut admin, "server_version")?;
    let settings = format!(
        "fsync={} synchronous_commit={} wal_sync_method={} commit_delay={}",
        show(&mut admin, "fsync")?,
        show(&mut admin, "synchronous_commit")?,
        show(&mut admin, "wal_sync_method")?,
        show(&mut admin, "commit_delay")?
    );
    let data_fs = server.cluster().map_or_else(
        || "unknown (external server)".to_owned(),
        |c| crate::hook_latency::fs_type(c.data_dir()),
    );
    eprintln!("setting up (PostgreSQL {server_version}, {settings}) ...");
    let pool = Arc::new(sealed_pool(&server)?);
    let record_bytes = pool.iter().map(Vec::len).sum::<usize>() as f64 / pool.len().max(1) as f64;

    let mut cases = Vec::new();
    for &n in &config.clients {
        cases.push(setup_case(&server, Kind::Seam, n, &pool)?);
        cases.push(setup_case(&server, Kind::Plain, n, &pool)?);
        if n > 1 {
            cases.push(setup_case(&server, Kind::SeamShared, n, &pool)?);
            cases.push(setup_case(&server, Kind::Locked, n, &pool)?);
            cases.push(setup_case(&server, Kind::LockedEarly, n, &pool)?);
        }
    }
    for r in 1..=config.rounds {
        for case in &mut cases {
            round(case, config.budget, &mut admin)?;
            let (last, share) = (
                case.result.rounds.last().map_or(0.0, Sample::rate),
                case.result.lock_share.last().copied().unwrap_or(0.0),
            );
            eprintln!(
                "  round {r}/{}: {} ... {last:.0} appends/s, lock share {:.2}",
                config.rounds,
                case.result.kind.label(case.result.clients),
                share
            );
        }
    }
    let results: Vec<CaseResult> = cases.into_iter().map(|c| c.result).collect();
    let find = |kind: Kind, n: usize| results.iter().find(|c| c.kind == kind && c.clients == n);
    let mut ratios = Vec::new();
    for &n in &config.clients {
        if let (Some(seam), Some(plain)) = (find(Kind::Seam, n), find(Kind::Plain, n)) {
            ratios.push(ratio(
                seam,
                plain,
                format!("7a: seam ÷ plain inserts, {n} client(s), own handles (target ≥ 0.8)"),
            ));
        }
        if let (Some(shared), Some(plain)) = (find(Kind::SeamShared, n), find(Kind::Plain, n)) {
            ratios.push(ratio(
                shared,
                plain,
                format!("seam with {n} threads on one handle ÷ plain inserts, {n} clients"),
            ));
        }
        for (kind, what) in [
            (Kind::Locked, "position lock across the flush"),
            (Kind::LockedEarly, "position lock released before the flush"),
        ] {
            if let (Some(locked), Some(plain)) = (find(kind, n), find(Kind::Plain, n)) {
                ratios.push(ratio(
                    locked,
                    plain,
                    format!("plain inserts under a {what} ÷ plain inserts, {n} clients"),
                ));
            }
        }
    }
    Ok(Report {
        server: match &server {
            TestServer::Local(c) => format!("throwaway cluster on port {}", c.port()),
            _ => "external server".to_owned(),
        },
        server_version,
        settings,
        data_fs,
        record_bytes,
        rounds: config.rounds,
        budget: config.budget,
        cases: results,
        ratios,
    })
}

fn fmt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "## ctx-bench pg-append: seam ÷ plain inserts on PostgreSQL\n\nPostgreSQL {} ({}; \
             {}; data dir on {}), {} interleaved rounds x {} ms per case, {}-byte payloads, \
             sealed records ~{:.0} bytes.\n\n\
             | case | appends/s (median) | rounds | p50 µs | p99 µs | lock | WAL flush | client | running |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|\n",
            self.server_version,
            self.server,
            self.settings,
            self.data_fs,
            self.rounds,
            self.budget.as_millis(),
            PAYLOAD_BYTES,
            self.record_bytes
        );
        for c in &self.cases {
            let rounds: Vec<String> = c.rates().iter().map(|r| format!("{r:.0}")).collect();
            let waits = Waits::median_of(&c.waits);
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                c.kind.label(c.clients),
                c.median_rate(),
                rounds.join(" "),
                fmt_us(c.p50_us()),
                fmt_us(c.p99_us()),
                waits.lock,
                waits.wal,
                waits.client,
                waits.running
            );
        }
        let _ = writeln!(
            s,
            "\n| ratio | of medians | median of round ratios |\n|---|---:|---:|"
        );
        for r in &self.ratios {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {:.3} |",
                r.label, r.value, r.median_round_ratio
            );
        }
        s.push_str(
            "\nShares of the clients' time (pg_stat_activity of the case's backends, sampled every \
             2 ms; mean number in the state ÷ clients, median over rounds): lock = waiting on a \
             heavyweight lock (the position row), WAL flush = IO WALSync/WALWrite or LWLock \
             WALWrite, client = waiting for the client inside a transaction (round trips, client \
             work), running = \
             active without a wait event.\n",
        );
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "schema": "ctx.bench-pg-append-v1",
            "server": self.server,
            "server_version": self.server_version,
            "settings": self.settings,
            "data_fs": self.data_fs,
            "payload_bytes": PAYLOAD_BYTES,
            "record_bytes_avg": self.record_bytes,
            "rounds": self.rounds,
            "budget_ms": self.budget.as_millis() as u64,
            "cases": self.cases.iter().map(|c| json!({
                "key": c.key(),
                "label": c.kind.label(c.clients),
                "clients": c.clients,
                "appends_per_s": c.median_rate(),
                "rounds": c.rates(),
                "appends": c.rounds.iter().map(|r| r.units).sum::<u64>(),
                "p50_us": c.p50_us(),
                "p99_us": c.p99_us(),
                "lock_share_rounds": c.lock_share,
                "wait_shares": Waits::median_of(&c.waits).to_json(),
            })).collect::<Vec<_>>(),
            "ratios": self.ratios.iter().map(|r| json!({
                "key": r.key, "label": r.label, "value": r.value,
                "median_round_ratio": r.median_round_ratio,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Where `ctx-bench pg-append` writes its JSON by default.
pub fn default_out() -> PathBuf {
    crate::target_dir().join("ctx-bench").join("pg-append.json")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    /// The smoke mode (run by `cargo test` and the benches' self-test): one short round of 1 and
    /// 2 clients on a throwaway cluster; skipped with a printed line when PostgreSQL is absent
    /// and `$CTX_REQUIRE_PG` is unset (`ctx_journal_pg::gate`).
    #[test]
    fn pg_append_smoke() {
        if !ctx_journal_pg::gate("pg_append_smoke", ctx_journal_pg::available()).unwrap() {
            return;
        }
        let report = run(&Config {
            url: None,
            clients: vec![1, 2],
            rounds: 1,
            budget: Duration::from_millis(100),
        })
        .unwrap();
        println!("{}", report.markdown());
        assert_eq!(report.cases.len(), 7);
        assert!(report.cases.iter().all(|c| c.rounds[0].units > 0));
        assert_eq!(report.ratios.len(), 5);
        assert!(report.record_bytes > PAYLOAD_BYTES as f64);
        assert_eq!(report.to_json()["cases"].as_array().unwrap().len(), 7);
    }

    #[test]
    fn payloads_and_ids() {
        assert_eq!(payload(7).len(), PAYLOAD_BYTES);
        assert_eq!(event_id(1, 2).len(), 36);
        assert_ne!(event_id(1, 2), event_id(2, 1));
    }
}
