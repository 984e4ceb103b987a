//! umadb-core: the embedded storage engine under UmaDB (a copy-on-write B+ tree of its own with
//! a tag index), through its Rust API (`Mvcc`, `UmaDb`, and for concurrent appenders its grouped
//! writer thread, `writer_thread_blocking`, which the UmaDB server runs).
//!
//! What it guarantees, as its source shows: a commit writes the dirty pages, fdatasyncs, writes
//! the header page and fdatasyncs again (two syncs per commit), so a returned append is durable.
//! An append may carry a condition (fail if any event with the given tags exists after a
//! position), which is how the bench expresses exact expected revisions: each stream is a tag and
//! the condition names the streams of the append after the position the bench last saw of them.
//! Event UUIDs are stored; an append is deduplicated by them only when its condition fails and
//! every event of the retried append carries the same UUIDs as the events already there (a
//! conditional retry), not in general. No chain, checksum or MAC.
//!
//! `Mvcc::new` prints a few lines about its settings to stdout on every open; [`open`] sends them
//! to stderr.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use umadb_core::db::UmaDb;
use umadb_core::mvcc::{Mvcc, StorageOptions};
use umadb_core::writer_thread_request::WriterThreadRequest;
use umadb_dcb::{
    DcbAppendCondition, DcbEvent, DcbEventStoreSync, DcbQuery, DcbQueryItem, DcbResult,
};
use uuid::Uuid;

use crate::BenchResult;
use crate::compare::{Guarantees, Limits, Round};
use crate::measure::{Sample, Timebox};
use crate::workload::{
    BATCH_RECORDS, KIND, Payloads, STREAMS, WindowedBatches, access_payload, event_id_parts,
};

/// What umadb-core promises beside its figures.
pub const GUARANTEES: Guarantees = Guarantees {
    store: "umadb-core 0.7.8",
    durability: "durable commit (2 fdatasyncs: pages, then header)",
    integrity: "none",
    expected_revision: "yes (append condition)",
    idempotency: "conditional retries only (event UUIDs)",
    column: "durable, 2 syncs; none; rev yes (condition); idem cond. retry",
};

/// Requests the grouped writer folds into one commit at most (events).
pub const GROUP_EVENTS_MAX: usize = 10_000;

/// Opens (or creates) the store file `uma.db` in `dir`.
pub fn open(dir: &Path) -> BenchResult<UmaDb> {
    std::fs::create_dir_all(dir)?;
    let options = StorageOptions::default().db_path(dir.join("uma.db"));
    // `Mvcc::new` prints its settings to stdout on every open; they go to stderr for the call,
    // so that stdout stays the table (and the reopen child's `ready`).
    std::io::stdout().flush()?;
    let saved = rustix::io::dup(std::io::stdout())?;
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    let opened = Mvcc::new(false, options);
    let flushed = std::io::stdout().flush();
    rustix::stdio::dup2_stdout(&saved)?;
    flushed?;
    Ok(UmaDb::from_arc(Arc::new(opened?)))
}

/// The tag that names stream `s`.
fn tag(s: usize) -> String {
    format!("stream-{s}")
}

fn event(payloads: &Payloads, tag_seed: u64, seq: u64, stream_tag: &str) -> DcbEvent {
    let (hi, lo) = event_id_parts(tag_seed, seq);
    DcbEvent {
        event_type: KIND.to_owned(),
        tags: vec![stream_tag.to_owned()],
        data: payloads.get(seq).rkyv.clone(),
        uuid: Some(Uuid::from_u64_pair(hi, lo)),
        metadata: Vec::new(),
    }
}

/// The condition that stands for exact expected revisions of `streams`: no event of any of
/// them after `after`, the last position the bench saw of them (none: the streams are new).
fn condition<'a>(streams: impl Iterator<Item = &'a str>, after: u64) -> DcbAppendCondition {
    let items = streams.map(|t| DcbQueryItem::new().tags([t]));
    DcbAppendCondition::new(DcbQuery::with_items(items)).after((after > 0).then_some(after))
}

/// Single-event conditional appends round-robin over `streams`, through `commit`.
struct SingleAppender<'p> {
    payloads: &'p Payloads,
    tags: Vec<String>,
    heads: Vec<u64>,
    tag_seed: u64,
    seq: u64,
}

impl SingleAppender<'_> {
    fn new(
        payloads: &Payloads,
        streams: std::ops::Range<usize>,
        tag_seed: u64,
    ) -> SingleAppender<'_> {
        let tags: Vec<String> = streams.map(tag).collect();
        let heads = vec![0; tags.len()];
        SingleAppender {
            payloads,
            tags,
            heads,
            tag_seed,
            seq: 0,
        }
    }

    fn next(&mut self) -> (usize, Vec<DcbEvent>, DcbAppendCondition) {
        let s = (self.seq % self.tags.len() as u64) as usize;
        let t = self.tags[s].as_str();
        let events = vec![event(self.payloads, self.tag_seed, self.seq, t)];
        self.seq += 1;
        (s, events, condition(std::iter::once(t), self.heads[s]))
    }

    fn round(
        &mut self,
        limits: &Limits,
        mut commit: impl FnMut(Vec<DcbEvent>, DcbAppendCondition) -> BenchResult<u64>,
    ) -> BenchResult<Sample> {
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let (s, events, cond) = self.next();
            self.heads[s] = sample.time(1, || commit(events, cond))?;
        }
        Ok(sample)
    }
}

fn append(db: &UmaDb, events: Vec<DcbEvent>, cond: DcbAppendCondition) -> BenchResult<u64> {
    Ok(db.append(events, Some(cond), None)?)
}

/// One event per append (one commit each), 1000 streams round-robin, each append conditional on
/// its stream's last position. Units: commits.
pub fn single<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let db = open(dir)?;
    let mut appender = SingleAppender::new(payloads, 0..STREAMS, 11);
    for _ in 0..20 {
        let (s, events, cond) = appender.next();
        appender.heads[s] = append(&db, events, cond)?;
    }
    Ok(Box::new(move |limits: &Limits| {
        appender.round(limits, |events, cond| append(&db, events, cond))
    }))
}

/// UmaDB's grouped writer: one thread that takes append requests from a channel, folds those
/// already waiting into one commit and answers each; its thread ends when the sender is dropped.
struct GroupedWriter {
    requests: Option<mpsc::Sender<WriterThreadRequest>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _head: watch::Receiver<Option<u64>>,
}

impl GroupedWriter {
    fn start(db: &UmaDb) -> GroupedWriter {
        let (requests, rx) = mpsc::channel(1024);
        let (head_tx, head_rx) = watch::channel(None);
        let mvcc = db.mvcc.clone();
        let thread = std::thread::spawn(move || {
            umadb_core::writer_thread_blocking::writer_thread_blocking(
                mvcc,
                rx,
                head_tx,
                GROUP_EVENTS_MAX,
            );
        });
        GroupedWriter {
            requests: Some(requests),
            thread: Some(thread),
            _head: head_rx,
        }
    }

    /// Sends one append and waits for its answer (the position of its last event).
    fn append(&self, events: Vec<DcbEvent>, cond: DcbAppendCondition) -> BenchResult<u64> {
        let requests = self
            .requests
            .as_ref()
            .ok_or("umadb grouped writer already stopped")?;
        let (response_tx, response) = oneshot::channel::<DcbResult<u64>>();
        requests
            .blocking_send(WriterThreadRequest::Append {
                events,
                condition: Some(cond),
                tracking_info: None,
                response_tx,
                cancel: None,
            })
            .map_err(|_| "umadb grouped writer thread ended")?;
        let answer = response
            .blocking_recv()
            .map_err(|_| "umadb grouped writer dropped a request")?;
        Ok(answer?)
    }
}

impl Drop for GroupedWriter {
    fn drop(&mut self) {
        // Closing the channel ends the writer thread's loop; joining it closes its writer before
        // the temp dir goes.
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `threads` appender threads sending single-event conditional appends to UmaDB's grouped
/// writer, each on its own share of the 1000 streams. Units: records, over the wall time of the
/// round.
pub fn concurrent<'p>(
    dir: &Path,
    payloads: &'p Payloads,
    threads: usize,
) -> BenchResult<Round<'p>> {
    let db = open(dir)?;
    let writer = GroupedWriter::start(&db);
    let per = STREAMS / threads;
    let mut appenders: Vec<SingleAppender<'p>> = (0..threads)
        .map(|t| SingleAppender::new(payloads, t * per..(t + 1) * per, 200 + t as u64))
        .collect();
    Ok(Box::new(move |limits: &Limits| {
        let _ = &db;
        let barrier = Barrier::new(threads + 1);
        let writer = &writer;
        let (parts, wall) = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(threads);
            for appender in &mut appenders {
                let barrier = &barrier;
                handles.push(scope.spawn(move || -> BenchResult<Sample> {
                    barrier.wait();
                    appender.round(limits, |events, cond| writer.append(events, cond))
                }));
            }
            crate::measure::release_and_join(&barrier, handles, "an umadb appender")
        });
        let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
        Ok(Sample::merge_concurrent(parts, wall))
    }))
}

/// The journal's multi-stream batch shape (see [`WindowedBatches`]): 64 consecutive streams of
/// the 1000, 15-16 events each, the window advancing by 64 streams per commit. One append per
/// commit, conditional on all 64 streams after the last committed position.
struct Windowed {
    tags: Vec<String>,
    commit: usize,
    seq: u64,
    tag_seed: u64,
    last: u64,
}

impl Windowed {
    fn new(tag_seed: u64) -> Windowed {
        Windowed {
            tags: (0..STREAMS).map(tag).collect(),
            commit: 0,
            seq: 0,
            tag_seed,
            last: 0,
        }
    }

    /// The next commit's events (at most `max`) and condition.
    fn next(&mut self, payloads: &Payloads, max: u64) -> (Vec<DcbEvent>, DcbAppendCondition) {
        let width = WindowedBatches::streams_per_commit().min(STREAMS);
        let start = (self.commit * width) % STREAMS;
        let mut events = Vec::with_capacity(BATCH_RECORDS);
        let mut named = Vec::with_capacity(width);
        for k in 0..width {
            let t = self.tags[(start + k) % STREAMS].as_str();
            let n = BATCH_RECORDS / width + usize::from(k < BATCH_RECORDS % width);
            for _ in 0..n {
                if events.len() as u64 >= max {
                    break;
                }
                events.push(event(payloads, self.tag_seed, self.seq, t));
                self.seq += 1;
            }
            named.push(t);
        }
        self.commit += 1;
        let cond = condition(named.into_iter(), self.last);
        (events, cond)
    }
}

/// 1000-event commits in the journal's windowed shape (64 streams x 15-16 events over 1000
/// streams). Units: records.
pub fn batch_windowed<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let db = open(dir)?;
    let mut windows = Windowed::new(12);
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let (events, cond) = windows.next(payloads, u64::MAX);
            let n = events.len() as u64;
            windows.last = sample.time(n, || append(&db, events, cond))?;
        }
        Ok(sample)
    }))
}

/// 1000-event commits to one stream, each conditional on the stream's last position. Units:
/// records.
pub fn batch_one_stream<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let db = open(dir)?;
    let t = tag(7);
    let mut head = 0;
    let mut seq = 0;
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let events = (0..BATCH_RECORDS as u64)
                .map(|i| event(payloads, 13, seq + i, &t))
                .collect();
            seq += BATCH_RECORDS as u64;
            let cond = condition(std::iter::once(t.as_str()), head);
            head = sample.time(BATCH_RECORDS as u64, || append(&db, events, cond))?;
        }
        Ok(sample)
    }))
}

fn load_into(db: &UmaDb, payloads: &Payloads, records: u64) -> BenchResult<Sample> {
    let mut windows = Windowed::new(14);
    let mut load = Sample::default();
    while load.units < records {
        let (events, cond) = windows.next(payloads, records - load.units);
        let n = events.len() as u64;
        windows.last = load.time(n, || append(db, events, cond))?;
    }
    Ok(load)
}

/// A loaded store for the replay comparison.
pub struct Loaded {
    db: UmaDb,
    records: u64,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("umadb::Loaded")
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

/// Loads `records` events in the windowed 1000-event commits.
pub fn load(dir: &Path, payloads: &Payloads, records: u64) -> BenchResult<Loaded> {
    let db = open(dir)?;
    load_into(&db, payloads, records)?;
    Ok(Loaded { db, records })
}

/// Replays the whole store in order (`read` without a query, which collects the events it
/// returns) with the same rkyv access of each payload as the journal's replay, repeatedly for
/// each round's budget. Units: records.
pub fn replay(loaded: Loaded) -> Round<'static> {
    let records = loaded.records;
    super::replay_rounds("umadb", records, move |scratch| {
        let mut check = 0u64;
        let mut visited = 0u64;
        for event in loaded.db.read(None, None, false, None)? {
            let event = event?;
            check = check.wrapping_add(access_payload(scratch, &event.event.data)?);
            visited += 1;
        }
        Ok((visited, check))
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
    let db = open(dir)?;
    load_into(&db, payloads, records)?;
    super::say_ready(records, then)?;
    match then {
        super::After::Exit | super::After::Reopen(_) => return Ok(()),
        super::After::Replay(budget) => {
            return super::child_replay(replay(Loaded { db, records }), budget);
        }
        super::After::AppendUntilKilled => {}
    }
    let mut appender = SingleAppender::new(payloads, 0..STREAMS, 15);
    // The load used other tags' positions; these appends only need to follow their own.
    let last = db.head()?.unwrap_or(0);
    appender.heads.iter_mut().for_each(|h| *h = last);
    loop {
        let (s, events, cond) = appender.next();
        appender.heads[s] = append(&db, events, cond)?;
    }
}

/// Opens the store a killed child left and reads its first event: the time both took and the
/// number of events the store holds.
pub fn reopen(dir: &Path) -> BenchResult<(Duration, u64)> {
    let start = Instant::now();
    let db = open(dir)?;
    let first = db.read(None, None, false, Some(1))?.next();
    let took = start.elapsed();
    match first {
        Some(event) => {
            event?;
        }
        None => return Err("umadb reopen: the first event is missing".into()),
    }
    Ok((took, db.head()?.unwrap_or(0)))
}
