//! VarveDB (crate `varvedb`): an embedded append-only event store on LMDB (through heed) that
//! stores each event as an rkyv archive of the application's type, through its own Rust API.
//!
//! What it guarantees, as its source shows: every append is one LMDB write transaction, and LMDB
//! syncs on commit by default (fdatasync of the data pages, then a write of the meta page through
//! a second descriptor opened O_DSYNC, as strace shows), so a returned append is durable. It has no expected revisions (the next stream sequence is read outside the write
//! transaction), no event-id deduplication, no checksums, chain or MAC, and a batch is one
//! `StreamId` of one named stream, so the 64-stream batches the journal and UmaDB take cannot be
//! expressed. The events are `BenchEvent`s, which VarveDB serializes itself, inside the timed
//! section (about 0.1 µs each, next to a commit's syncs).

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use varvedb::config::VarveConfig;
use varvedb::stream::Stream;
use varvedb::types::{GlobalSequence, StreamId};
use varvedb::varve::Varve;

use crate::compare::{Guarantees, Limits, Round};
use crate::measure::{Sample, Timebox};
use crate::workload::{BATCH_RECORDS, BenchEvent, Payloads, STREAMS, access_payload};
use crate::{BenchError, BenchResult};

/// What VarveDB promises beside its figures.
pub const GUARANTEES: Guarantees = Guarantees {
    store: "varvedb 0.4.2 (LMDB)",
    durability: "durable commit (2 syncs: fdatasync of the pages, then the meta page through an O_DSYNC descriptor)",
    integrity: "none",
    expected_revision: "no",
    idempotency: "no",
    column: "durable, 2 syncs; none; rev no; idem no",
};

/// The one named stream every bench event goes to; the bench's streams are its `StreamId`s.
const STREAM_NAME: &str = "bench";

/// The serialization buffer VarveDB keeps per stream handle; a bench event archives to about
/// 200 bytes.
const BUFFER: usize = 1024;

type BenchStream = Stream<BenchEvent, BUFFER>;

/// Opens (or creates) the store in `dir`. LMDB's map is a fixed-size reservation (VarveDB's
/// default is 10 MB, too small for a batch round), so it is set to 64 GiB of address space; the
/// file only grows as pages are written.
pub fn open(dir: &Path) -> BenchResult<Varve> {
    std::fs::create_dir_all(dir)?;
    let config = VarveConfig {
        map_size: 64 << 30,
        ..VarveConfig::default()
    };
    Ok(Varve::with_config(dir, config)?)
}

fn stream(varve: &mut Varve) -> BenchResult<BenchStream> {
    Ok(varve.stream::<BenchEvent, BUFFER>(STREAM_NAME)?)
}

/// Single-event appends round-robin over `streams` (one commit each).
struct SingleAppender<'p> {
    stream: BenchStream,
    payloads: &'p Payloads,
    streams: Vec<u64>,
    seq: u64,
}

impl<'p> SingleAppender<'p> {
    fn round(&mut self, limits: &Limits) -> BenchResult<Sample> {
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let (id, event) = self.next();
            let stream = &mut self.stream;
            sample.time(1, || stream.append_alloc(id, event))?;
        }
        Ok(sample)
    }

    fn next(&mut self) -> (StreamId, &'p BenchEvent) {
        let id = self.streams[(self.seq % self.streams.len() as u64) as usize];
        let event = &self.payloads.get(self.seq).event;
        self.seq += 1;
        (StreamId(id), event)
    }
}

/// One event per append (one commit each), 1000 streams round-robin. Units: commits.
pub fn single<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let mut varve = open(dir)?;
    let mut appender = SingleAppender {
        stream: stream(&mut varve)?,
        payloads,
        streams: (0..STREAMS as u64).collect(),
        seq: 0,
    };
    for _ in 0..20 {
        let (id, event) = appender.next();
        appender.stream.append_alloc(id, event)?;
    }
    Ok(Box::new(move |limits: &Limits| {
        // The environment stays open for the whole run.
        let _ = &varve;
        appender.round(limits)
    }))
}

/// `threads` appender threads, each with its own stream handle on one environment and its own
/// share of the 1000 streams. LMDB serializes write transactions, so each append is its own
/// commit and its own syncs (no group commit). Units: records, over the wall time of the round.
pub fn concurrent<'p>(
    dir: &Path,
    payloads: &'p Payloads,
    threads: usize,
) -> BenchResult<Round<'p>> {
    let mut varve = open(dir)?;
    let per = STREAMS / threads;
    let mut appenders = Vec::with_capacity(threads);
    for t in 0..threads {
        appenders.push(SingleAppender {
            stream: stream(&mut varve)?,
            payloads,
            streams: ((t * per) as u64..((t + 1) * per) as u64).collect(),
            seq: 0,
        });
    }
    Ok(Box::new(move |limits: &Limits| {
        let _ = &varve;
        let barrier = Barrier::new(threads + 1);
        let (parts, wall) = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(threads);
            for appender in &mut appenders {
                let barrier = &barrier;
                handles.push(scope.spawn(move || -> BenchResult<Sample> {
                    barrier.wait();
                    appender.round(limits)
                }));
            }
            crate::measure::release_and_join(&barrier, handles, "a varvedb appender")
        });
        let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
        Ok(Sample::merge_concurrent(parts, wall))
    }))
}

fn batch_events(payloads: &Payloads, seq: u64) -> Vec<BenchEvent> {
    (0..BATCH_RECORDS as u64)
        .map(|i| payloads.get(seq + i).event.clone())
        .collect()
}

/// 1000-event commits to one stream (`append_batch_alloc`). Units: records.
pub fn batch_one_stream<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let mut varve = open(dir)?;
    let mut stream = stream(&mut varve)?;
    let mut seq = 0;
    Ok(Box::new(move |limits: &Limits| {
        let _ = &varve;
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let events = batch_events(payloads, seq);
            seq += BATCH_RECORDS as u64;
            sample.time(BATCH_RECORDS as u64, || {
                stream.append_batch_alloc(StreamId(7), &events)
            })?;
        }
        Ok(sample)
    }))
}

/// Appends `records` events in 1000-event commits, each commit to the next of the 1000 streams
/// in turn (a batch names one stream). Returns the load's sample.
fn load_into(stream: &mut BenchStream, payloads: &Payloads, records: u64) -> BenchResult<Sample> {
    let mut load = Sample::default();
    let mut commit = 0u64;
    while load.units < records {
        let n = (records - load.units).min(BATCH_RECORDS as u64);
        let mut events = batch_events(payloads, load.units);
        events.truncate(n as usize);
        let id = StreamId(commit % STREAMS as u64);
        load.time(n, || stream.append_batch_alloc(id, &events))?;
        commit += 1;
    }
    Ok(load)
}

/// A loaded store for the replay comparison.
pub struct Loaded {
    varve: Varve,
    records: u64,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("varvedb::Loaded")
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

/// Loads `records` events (1000 per commit).
pub fn load(dir: &Path, payloads: &Payloads, records: u64) -> BenchResult<Loaded> {
    let mut varve = open(dir)?;
    let mut stream = stream(&mut varve)?;
    load_into(&mut stream, payloads, records)?;
    Ok(Loaded { varve, records })
}

/// Replays the whole store in global order (`GlobalReader::iter_from(0).for_each`, which hands
/// each event over as an owned copy) with the same rkyv access of each payload as the journal's
/// replay, repeatedly for each round's budget. Units: records.
pub fn replay(loaded: Loaded) -> Round<'static> {
    let records = loaded.records;
    super::replay_rounds("varvedb", records, move |scratch| {
        let mut check = 0u64;
        let mut visited = 0u64;
        let mut failed: Option<BenchError> = None;
        let reader = loaded.varve.global_reader();
        reader.iter_from(GlobalSequence(0))?.for_each(|event| {
            visited += 1;
            if failed.is_none() {
                match access_payload(scratch, &event.payload) {
                    Ok(v) => check = check.wrapping_add(v),
                    Err(e) => failed = Some(e),
                }
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok((visited, check)),
        }
    })
}

/// The child of the reopen-after-kill measurement: loads `records` events, says `ready` on
/// stdout, then does what `then` says (by default: appends single events until it is killed).
pub fn fill_until_killed(
    dir: &Path,
    payloads: &Payloads,
    records: u64,
    then: super::After,
) -> BenchResult<()> {
    let mut varve = open(dir)?;
    let mut stream = stream(&mut varve)?;
    load_into(&mut stream, payloads, records)?;
    super::say_ready(records, then)?;
    match then {
        super::After::Exit | super::After::Reopen(_) => return Ok(()),
        super::After::Replay(budget) => {
            return super::child_replay(replay(Loaded { varve, records }), budget);
        }
        super::After::AppendUntilKilled => {}
    }
    let mut seq = records;
    loop {
        let id = StreamId(seq % STREAMS as u64);
        stream.append_alloc(id, &payloads.get(seq).event)?;
        seq += 1;
    }
}

/// Opens the store a killed child left and reads its first event: the time both took and the
/// number of events the store holds.
pub fn reopen(dir: &Path) -> BenchResult<(Duration, u64)> {
    let start = Instant::now();
    let varve = open(dir)?;
    let mut reader = varve.global_reader();
    let first = reader.get_bytes(GlobalSequence(0))?.map(<[u8]>::len);
    let took = start.elapsed();
    if first.is_none() {
        return Err("varvedb reopen: the first event is missing".into());
    }
    Ok((took, varve.next_global_seq().0))
}
