//! The SQLite peer: WAL, `synchronous=FULL`, a 256 MiB page cache, the journal's record shape,
//! a per-stream SHA-256 chain digest computed by the writer (no MAC), JSON payloads.

use std::path::Path;
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ctx_journal::StreamId;
use rusqlite::{Connection, Statement, params};

use crate::compare::{Limits, Round};
use crate::measure::{Sample, Timebox};
use crate::workload::{
    BATCH_RECORDS, BenchEvent, Payloads, STREAMS, event_id, occurred_at, peer_digest, stream_ids,
};
use crate::{BenchError, BenchResult};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS records (
    position INTEGER PRIMARY KEY,
    stream BLOB NOT NULL,
    revision INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    occurred_at INTEGER NOT NULL,
    payload BLOB NOT NULL,
    prev_digest BLOB NOT NULL,
    digest BLOB NOT NULL,
    UNIQUE(stream, revision),
    UNIQUE(event_id)
)";

const INSERT: &str = "INSERT INTO records
    (stream, revision, event_id, kind, occurred_at, payload, prev_digest, digest)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Opens a connection with the peer's settings and the schema.
pub fn open(path: &Path) -> BenchResult<Connection> {
    let conn = Connection::open(path)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("SQLite refused WAL mode (got {mode})").into());
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    // 256 MiB (negative = KiB), so the peer is not held back by SQLite's 2 MiB default while
    // redb runs with its 1 GiB default cache.
    conn.pragma_update(None, "cache_size", -262_144)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// A writer of one set of streams: tracks each stream's revision and last digest in memory, as
/// the journal does.
struct PeerWriter<'p> {
    payloads: &'p Payloads,
    streams: Vec<StreamId>,
    heads: Vec<(u64, [u8; 32])>,
    tag: u64,
    seq: u64,
    next_stream: usize,
}

impl<'p> PeerWriter<'p> {
    fn new(payloads: &'p Payloads, streams: Vec<StreamId>, tag: u64) -> PeerWriter<'p> {
        let heads = vec![(0, [0; 32]); streams.len()];
        PeerWriter {
            payloads,
            streams,
            heads,
            tag,
            seq: 0,
            next_stream: 0,
        }
    }

    /// The next `n` event ids (built outside the timed section).
    fn ids(&self, n: usize) -> Vec<String> {
        (0..n as u64)
            .map(|i| event_id(self.tag, self.seq + i))
            .collect()
    }

    /// Inserts the next record (round-robin over this writer's streams) with `id`.
    fn insert(&mut self, stmt: &mut Statement<'_>, id: &str) -> rusqlite::Result<()> {
        let s = self.next_stream;
        self.next_stream = (s + 1) % self.streams.len();
        let seq = self.seq;
        self.seq += 1;
        let payload = &self.payloads.get(seq).json;
        let (revision, previous) = self.heads[s];
        let revision = revision + 1;
        let at = occurred_at(seq);
        let digest = peer_digest(&self.streams[s], revision, id, at, &previous, payload);
        stmt.execute(params![
            self.streams[s].as_bytes().as_slice(),
            revision as i64,
            id,
            crate::workload::KIND,
            at.0,
            payload,
            previous.as_slice(),
            digest.as_slice(),
        ])?;
        self.heads[s] = (revision, digest);
        Ok(())
    }

    /// Inserts `ids.len()` records in one transaction.
    fn insert_txn(&mut self, conn: &mut Connection, ids: &[String]) -> BenchResult<()> {
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(INSERT)?;
            for id in ids {
                self.insert(&mut stmt, id)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// One insert per transaction (autocommit), 1000 streams round-robin. Units: commits.
pub fn single<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let conn = open(&dir.join("peer.sqlite"))?;
    let mut writer = PeerWriter::new(payloads, stream_ids(STREAMS)?, 1);
    {
        let mut stmt = conn.prepare_cached(INSERT)?;
        for id in writer.ids(20) {
            writer.insert(&mut stmt, &id)?;
        }
    }
    Ok(Box::new(move |limits: &Limits| {
        let mut stmt = conn.prepare_cached(INSERT)?;
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let id = event_id(writer.tag, writer.seq);
            sample.time(1, || writer.insert(&mut stmt, &id))?;
        }
        Ok(sample)
    }))
}

/// 1000 inserts per transaction, 1000 streams round-robin. Units: records.
pub fn batch<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let mut conn = open(&dir.join("peer.sqlite"))?;
    let mut writer = PeerWriter::new(payloads, stream_ids(STREAMS)?, 2);
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let ids = writer.ids(BATCH_RECORDS);
            sample.time(BATCH_RECORDS as u64, || writer.insert_txn(&mut conn, &ids))?;
        }
        Ok(sample)
    }))
}

/// `threads` writers, each with its own connection (busy_timeout 30 s) and its own share of the
/// 1000 streams, each doing single autocommit inserts. Units: commits (= records), over the wall
/// time of the round.
pub fn concurrent<'p>(
    dir: &Path,
    payloads: &'p Payloads,
    threads: usize,
) -> BenchResult<Round<'p>> {
    let path = dir.join("peer.sqlite");
    let all = stream_ids(STREAMS)?;
    let per = STREAMS / threads;
    let mut writers = Vec::with_capacity(threads);
    for t in 0..threads {
        let streams = all[t * per..(t + 1) * per].to_vec();
        writers.push((
            open(&path)?,
            PeerWriter::new(payloads, streams, 100 + t as u64),
        ));
    }
    Ok(Box::new(move |limits: &Limits| {
        let barrier = Barrier::new(threads + 1);
        let (parts, wall) = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(threads);
            for (conn, writer) in &mut writers {
                let barrier = &barrier;
                handles.push(scope.spawn(move || -> BenchResult<Sample> {
                    let stmt = conn.prepare_cached(INSERT);
                    barrier.wait();
                    let mut stmt = stmt?;
                    let tb = Timebox::start(limits.budget, limits.single_ops_max);
                    let mut sample = Sample::default();
                    while tb.running(sample.units) {
                        let id = event_id(writer.tag, writer.seq);
                        sample.time(1, || writer.insert(&mut stmt, &id))?;
                    }
                    Ok(sample)
                }));
            }
            crate::measure::release_and_join(&barrier, handles, "a writer")
        });
        let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
        Ok(Sample::merge_concurrent(parts, wall))
    }))
}

/// `threads` writers sharing one connection behind a mutex (the application serializes its
/// writers instead of SQLite's busy handler), each with its own share of the 1000 streams,
/// single autocommit inserts. Units: records, over the wall time of the round.
pub fn shared_connection<'p>(
    dir: &Path,
    payloads: &'p Payloads,
    threads: usize,
) -> BenchResult<Round<'p>> {
    let conn = Mutex::new(open(&dir.join("peer.sqlite"))?);
    let all = stream_ids(STREAMS)?;
    let per = STREAMS / threads;
    let mut writers: Vec<PeerWriter<'p>> = (0..threads)
        .map(|t| {
            PeerWriter::new(
                payloads,
                all[t * per..(t + 1) * per].to_vec(),
                300 + t as u64,
            )
        })
        .collect();
    Ok(Box::new(move |limits: &Limits| {
        let barrier = Barrier::new(threads + 1);
        let (parts, wall) = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(threads);
            for writer in &mut writers {
                let (barrier, conn) = (&barrier, &conn);
                handles.push(scope.spawn(move || -> BenchResult<Sample> {
                    barrier.wait();
                    let tb = Timebox::start(limits.budget, limits.single_ops_max);
                    let mut sample = Sample::default();
                    while tb.running(sample.units) {
                        let id = event_id(writer.tag, writer.seq);
                        sample.time(1, || -> BenchResult<()> {
                            let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                            let mut stmt = conn.prepare_cached(INSERT)?;
                            writer.insert(&mut stmt, &id)?;
                            Ok(())
                        })?;
                    }
                    Ok(sample)
                }));
            }
            crate::measure::release_and_join(&barrier, handles, "a writer")
        });
        let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
        Ok(Sample::merge_concurrent(parts, wall))
    }))
}

/// A loaded peer database for the replay comparison.
#[derive(Debug)]
pub struct Loaded {
    conn: Connection,
    records: u64,
}

/// Loads `records` records in 1000-record transactions (not measured).
pub fn load(dir: &Path, payloads: &Payloads, records: u64) -> BenchResult<Loaded> {
    let mut conn = open(&dir.join("replay.sqlite"))?;
    let mut writer = PeerWriter::new(payloads, stream_ids(STREAMS)?, 3);
    let mut done = 0;
    while done < records {
        let n = (records - done).min(BATCH_RECORDS as u64) as usize;
        let ids = writer.ids(n);
        writer.insert_txn(&mut conn, &ids)?;
        done += n as u64;
    }
    Ok(Loaded { conn, records })
}

/// One ordered scan of every row, decoding each JSON payload into a [`BenchEvent`]. Returns
/// the rows visited and a checksum of the decoded events.
fn replay_once(conn: &Connection) -> BenchResult<(u64, u64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT position, stream, revision, event_id, kind, occurred_at, payload, prev_digest, digest
         FROM records ORDER BY position",
    )?;
    let mut rows = stmt.query([])?;
    let (mut count, mut check) = (0u64, 0u64);
    while let Some(row) = rows.next()? {
        let position: i64 = row.get(0)?;
        let stream = row.get_ref(1)?.as_blob()?;
        let revision: i64 = row.get(2)?;
        let event_id = row.get_ref(3)?.as_str()?;
        let kind = row.get_ref(4)?.as_str()?;
        let occurred: i64 = row.get(5)?;
        let payload = row.get_ref(6)?.as_blob()?;
        let prev = row.get_ref(7)?.as_blob()?;
        let digest = row.get_ref(8)?.as_blob()?;
        let event: BenchEvent = serde_json::from_slice(payload)?;
        if stream.len() != 32 || prev.len() != 32 || digest.len() != 32 || kind.is_empty() {
            return Err(BenchError::from(format!(
                "row {position} has a malformed shape"
            )));
        }
        check = check
            .wrapping_add(event.sequence + u64::from(event.decision))
            .wrapping_add((position ^ revision ^ occurred) as u64)
            .wrapping_add(event_id.len() as u64);
        count += 1;
    }
    Ok((count, check))
}

/// Replays the loaded table repeatedly for each round's budget (at least once per round).
/// Units: records.
pub fn replay(loaded: Loaded) -> Round<'static> {
    Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, u64::MAX);
        let mut sample = Sample::default();
        let mut passes = 0u64;
        while passes == 0 || tb.running(0) {
            let start = Instant::now();
            let (count, check) = replay_once(&loaded.conn)?;
            sample.timed += start.elapsed();
            std::hint::black_box(check);
            if count != loaded.records {
                return Err(format!("SQLite replay saw {count} of {} rows", loaded.records).into());
            }
            sample.units += count;
            passes += 1;
        }
        Ok(sample)
    })
}
