//! Group-commit check: N threads doing single-record appends through `Journal::append`, then
//! the same load through a minimal reference front (followers sleep on a condvar, one leader
//! hands everything queued to a single `Journal::append_batch`). The two should be close; if
//! `Journal::append` falls far behind, the journal's own grouping has regressed.
//!
//! `cargo run --release -p ctx-benches --example group_commit_probe -- [THREADS] [SECONDS]`
//!
//! History: before commit 9df7f9b a caller could read its reply only while holding the writer
//! lock, so an answered caller waited behind the next leader's whole commit (fsync included).
//! Groups stayed near one record (strace: 4,469 appends took 2,750 fdatasyncs with 8 threads,
//! 1,577 took 1,562 with 2) and 8 threads got about the throughput of one (e.g. 826/s against
//! 779/s for one thread, while this front reached 6,104/s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ctx_benches::BenchResult;
use ctx_benches::compare::{Limits, journal};
use ctx_benches::measure::{Sample, Timebox};
use ctx_benches::workload::{Payloads, expected, new_record, stream_ids};
use ctx_journal::{AppendOutcome, Journal, OpenOptions, StreamAppend};

type Reply = Result<AppendOutcome, String>;
type Slot = Arc<Mutex<Option<Reply>>>;

/// Queued appends and whether a leader is committing.
#[derive(Default)]
struct State {
    queue: Vec<(StreamAppend, Slot)>,
    leader: bool,
}

/// A group-commit front over a journal. Each request must name a stream no other queued request
/// names (true here: every thread owns its streams).
struct Front {
    journal: Journal,
    state: Mutex<State>,
    done: Condvar,
    commits: AtomicU64,
}

impl Front {
    fn append(&self, append: StreamAppend) -> Reply {
        let slot: Slot = Arc::new(Mutex::new(None));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.queue.push((append, slot.clone()));
        loop {
            if let Some(reply) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                return reply;
            }
            if state.leader {
                state = self
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state.leader = true;
            let group = std::mem::take(&mut state.queue);
            drop(state);
            let (batch, slots): (Vec<_>, Vec<_>) = group.into_iter().unzip();
            let replies: Vec<Reply> = match self.journal.append_batch(batch) {
                Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
                Err(e) => slots.iter().map(|_| Err(e.to_string())).collect(),
            };
            self.commits.fetch_add(1, Ordering::Relaxed);
            for (s, r) in slots.iter().zip(replies) {
                *s.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
            }
            state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.leader = false;
            self.done.notify_all();
        }
    }
}

fn through_front(threads: usize, budget: Duration, p: &Payloads) -> BenchResult<(Sample, u64)> {
    let dir = tempfile::tempdir()?;
    let front = Front {
        journal: Journal::open(dir.path().join("journal"), &OpenOptions::new())?,
        state: Mutex::new(State::default()),
        done: Condvar::new(),
        commits: AtomicU64::new(0),
    };
    let all = stream_ids(1000)?;
    let per = all.len() / threads;
    let barrier = Barrier::new(threads + 1);
    let (parts, wall) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (front, barrier, streams) = (&front, &barrier, &all[t * per..(t + 1) * per]);
                scope.spawn(move || -> BenchResult<Sample> {
                    let mut heads = vec![0; per];
                    barrier.wait();
                    let tb = Timebox::start(budget, u64::MAX);
                    let mut sample = Sample::default();
                    while tb.running(sample.units) {
                        let i = (sample.units % per as u64) as usize;
                        let record = new_record(p, 500 + t as u64, sample.units);
                        let append =
                            StreamAppend::new(streams[i], expected(heads[i]), vec![record]);
                        heads[i] = sample.time(1, || front.append(append))?.last_revision();
                    }
                    Ok(sample)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let parts: Vec<BenchResult<Sample>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect();
        (parts, start.elapsed())
    });
    let parts = parts.into_iter().collect::<BenchResult<Vec<_>>>()?;
    Ok((
        Sample::merge_concurrent(parts, wall),
        front.commits.load(Ordering::Relaxed),
    ))
}

fn main() -> BenchResult<()> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(8)
        .max(1);
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3.0);
    let budget = Duration::from_secs_f64(seconds);
    let p = Payloads::new()?;
    let limits = Limits {
        budget,
        single_ops_max: u64::MAX,
        batch_records_max: 0,
    };
    let dir = tempfile::tempdir()?;
    let direct = journal::concurrent(dir.path(), &p, threads)?(&limits)?;
    println!(
        "Journal::append, {threads} threads:      {:>7.0} records/s, p50 {:>6.0} us",
        direct.rate(),
        direct.percentile_us(50.0).unwrap_or(0.0)
    );
    let (front, commits) = through_front(threads, budget, &p)?;
    println!(
        "condvar front, {threads} threads:        {:>7.0} records/s, p50 {:>6.0} us, {:.2} records per commit",
        front.rate(),
        front.percentile_us(50.0).unwrap_or(0.0),
        front.units as f64 / commits.max(1) as f64
    );
    Ok(())
}
