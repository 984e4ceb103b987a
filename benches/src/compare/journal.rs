//! The ctx journal: single appends, 1000-record commits, concurrent appenders (group commit) and
//! replay through `Journal::scan`.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ctx_journal::{Journal, OpenOptions, StreamAppend, StreamId};

use crate::compare::{Limits, Round};
use crate::measure::{Sample, Timebox};
use crate::workload::{
    BATCH_RECORDS, Payloads, STREAMS, WindowedBatches, access_payload, expected, new_record,
    stream_ids,
};
use crate::{BenchError, BenchResult};

fn open(dir: &Path, name: &str) -> BenchResult<Journal> {
    Ok(Journal::open(dir.join(name), &OpenOptions::new())?)
}

/// Single-record appends to `streams` round-robin with exact expected revisions.
struct SingleAppender<'p> {
    journal: Journal,
    payloads: &'p Payloads,
    streams: Vec<StreamId>,
    heads: Vec<u64>,
    tag: u64,
    seq: u64,
}

impl<'p> SingleAppender<'p> {
    fn new(journal: Journal, payloads: &'p Payloads, streams: Vec<StreamId>, tag: u64) -> Self {
        let heads = vec![0; streams.len()];
        SingleAppender {
            journal,
            payloads,
            streams,
            heads,
            tag,
            seq: 0,
        }
    }

    fn round(&mut self, limits: &Limits) -> BenchResult<Sample> {
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let (s, append) = self.next();
            let journal = &self.journal;
            let outcome = sample.time(1, || journal.append(append))?;
            self.heads[s] = outcome.last_revision();
        }
        Ok(sample)
    }

    fn warm_up(&mut self, appends: u64) -> BenchResult<()> {
        for _ in 0..appends {
            let (s, append) = self.next();
            self.heads[s] = self.journal.append(append)?.last_revision();
        }
        Ok(())
    }

    fn next(&mut self) -> (usize, StreamAppend) {
        let s = (self.seq % self.streams.len() as u64) as usize;
        let record = new_record(self.payloads, self.tag, self.seq);
        self.seq += 1;
        (
            s,
            StreamAppend::new(self.streams[s], expected(self.heads[s]), vec![record]),
        )
    }
}

/// One record per append (one commit, one fsync each), 1000 streams round-robin. Units: commits.
pub fn single<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let journal = open(dir, "journal-single")?;
    let mut appender = SingleAppender::new(journal, payloads, stream_ids(STREAMS)?, 11);
    appender.warm_up(20)?;
    Ok(Box::new(move |limits: &Limits| appender.round(limits)))
}

/// 1000-record commits: one `append_batch` of 64 streams x 15-16 records, the 64-stream window
/// rotating over 1000 streams (see [`WindowedBatches`]). Units: records.
pub fn batch_windowed<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let journal = open(dir, "journal-batch")?;
    let mut batches = WindowedBatches::new(12)?;
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let (batch, touched) = batches.next_batch(payloads);
            let n = batch.iter().map(|b| b.records.len() as u64).sum();
            let outcomes = sample.time(n, || journal.append_batch(batch))?;
            batches.accepted(&touched, outcomes.iter().map(|o| o.last_revision()));
        }
        Ok(sample)
    }))
}

/// 1000-record commits to a single stream (one `append` of 1000 records). Units: records.
pub fn batch_one_stream<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let journal = open(dir, "journal-batch-1")?;
    let stream = StreamId::derive("bench", b"one-stream")?;
    let mut head = 0;
    let mut seq = 0;
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            let records = (0..BATCH_RECORDS as u64)
                .map(|i| new_record(payloads, 13, seq + i))
                .collect();
            seq += BATCH_RECORDS as u64;
            let append = StreamAppend::new(stream, expected(head), records);
            let outcome = sample.time(BATCH_RECORDS as u64, || journal.append(append))?;
            head = outcome.last_revision();
        }
        Ok(sample)
    }))
}

/// `threads` appenders sharing one journal, each doing single-record appends round-robin over
/// its own share of the 1000 streams; the journal's group commit batches them. Units: records,
/// over the wall time of the round.
pub fn concurrent<'p>(
    dir: &Path,
    payloads: &'p Payloads,
    threads: usize,
) -> BenchResult<Round<'p>> {
    let journal = open(dir, "journal-concurrent")?;
    let all = stream_ids(STREAMS)?;
    let per = STREAMS / threads;
    let mut appenders: Vec<SingleAppender<'p>> = (0..threads)
        .map(|t| {
            let streams = all[t * per..(t + 1) * per].to_vec();
            SingleAppender::new(journal.clone(), payloads, streams, 200 + t as u64)
        })
        .collect();
    Ok(Box::new(move |limits: &Limits| {
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
            crate::measure::release_and_join(&barrier, handles, "an appender")
        });
        let parts = parts.into_iter().collect::<BenchResult<Vec<Sample>>>()?;
        Ok(Sample::merge_concurrent(parts, wall))
    }))
}

/// A loaded journal for the replay comparison.
#[derive(Debug)]
pub struct Loaded {
    journal: Journal,
    records: u64,
    /// Time the load took (windowed 1000-record batches), for the record.
    pub load: Sample,
}

/// Loads `records` records with the windowed batch shape.
pub fn load(dir: &Path, payloads: &Payloads, records: u64) -> BenchResult<Loaded> {
    load_with(dir, payloads, records, &OpenOptions::new())
}

/// [`load`] into a journal opened with `options` (the one-thread replay's copy: a data directory
/// open in a process keeps the options of its first open).
pub fn load_with(
    dir: &Path,
    payloads: &Payloads,
    records: u64,
    options: &OpenOptions,
) -> BenchResult<Loaded> {
    let journal = Journal::open(dir.join("journal-replay"), options)?;
    let mut batches = WindowedBatches::new(14)?;
    let mut load = Sample::default();
    while load.units < records {
        let (mut batch, mut touched) = batches.next_batch(payloads);
        // Trim the last batch so the journal holds exactly `records` records.
        let mut left = records - load.units;
        let mut keep = 0;
        for part in &mut batch {
            let take = (part.records.len() as u64).min(left);
            part.records.truncate(take as usize);
            left -= take;
            if take > 0 {
                keep += 1;
            }
        }
        batch.truncate(keep);
        touched.truncate(keep);
        let n = batch.iter().map(|b| b.records.len() as u64).sum();
        let outcomes = load.time(n, || journal.append_batch(batch))?;
        batches.accepted(&touched, outcomes.iter().map(|o| o.last_revision()));
    }
    Ok(Loaded {
        journal,
        records,
        load,
    })
}

/// Which closure the replay hands to `Journal::scan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayWork {
    /// Does nothing: the figure is read + decode header + verify digest and MAC.
    Noop,
    /// Also validates the payload's rkyv archive (copied to an aligned buffer) and reads fields.
    AccessPayload,
}

/// Scans the whole journal repeatedly for each round's budget (at least once per round), with
/// the closure `work` selects. Units: records.
pub fn replay(loaded: Arc<Loaded>, work: ReplayWork) -> Round<'static> {
    let records = loaded.records;
    super::replay_rounds("journal", records, move |scratch| {
        let mut check = 0u64;
        let mut failed: Option<BenchError> = None;
        let visited = loaded.journal.scan(1, |view| match work {
            ReplayWork::Noop => ControlFlow::Continue(()),
            ReplayWork::AccessPayload => match access_payload(scratch, view.payload) {
                Ok(v) => {
                    check = check.wrapping_add(v);
                    ControlFlow::Continue(())
                }
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            },
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok((visited, check)),
        }
    })
}

/// The child of the reopen-after-kill measurement: loads `records` records with the windowed
/// batch shape, says `ready` on stdout, then does what `then` says; by default it appends single
/// records (exact expected revisions) until it is killed, so the kill lands in or between
/// durable commits.
pub fn fill_until_killed(
    dir: &Path,
    payloads: &Payloads,
    records: u64,
    then: super::After,
) -> BenchResult<()> {
    let loaded = load(dir, payloads, records)?;
    super::say_ready(records, then)?;
    match then {
        super::After::Exit | super::After::Reopen(_) => return Ok(()),
        super::After::Replay(budget) => {
            return super::child_replay(
                replay(Arc::new(loaded), ReplayWork::AccessPayload),
                budget,
            );
        }
        super::After::AppendUntilKilled => {}
    }
    // Streams of their own, so the tracked heads start at zero.
    let streams = (0..STREAMS)
        .map(|i| {
            Ok(StreamId::derive(
                "bench-killed",
                format!("stream-{i}").as_bytes(),
            )?)
        })
        .collect::<BenchResult<Vec<StreamId>>>()?;
    let mut appender = SingleAppender::new(loaded.journal, payloads, streams, 15);
    loop {
        appender.warm_up(1_000)?;
    }
}

/// Opens the journal a killed child left (`journal-replay` in `dir`) and reads its first record:
/// the time both took and the number of records the journal holds.
pub fn reopen(dir: &Path) -> BenchResult<(Duration, u64)> {
    let start = Instant::now();
    let journal = open(dir, "journal-replay")?;
    let mut first = 0;
    journal.scan(1, |view| {
        first = view.payload.len();
        ControlFlow::Break(())
    })?;
    let took = start.elapsed();
    std::hint::black_box(first);
    Ok((took, journal.head_position()?))
}
