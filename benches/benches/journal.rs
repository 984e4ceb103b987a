//! Criterion benches of the journal: single appends, 1000-record appends, group commit with 1, 2,
//! 4 and 8 appender threads, replay (a verified scan of 100k records), and the verified scan of
//! 50k records on 1 and 2 threads (OpenOptions::scan_threads).
//!
//! Sample sizes and times are small on purpose: CI runs `cargo bench -p ctx-benches -- --test`
//! (each bench once) only to keep them compiling and running.

// A bench has no caller to hand an error to, and criterion's closures return `()`: failing
// loudly with a message is the right behaviour here, so `expect` is allowed in this file.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::ops::ControlFlow;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ctx_benches::workload::{Payloads, WindowedBatches, new_record};
use ctx_journal::{ExpectedRevision, Journal, OpenOptions, StreamAppend, StreamId};
use tempfile::TempDir;

const REPLAY_RECORDS: u64 = 100_000;
const GROUP_THREADS: [usize; 4] = [1, 2, 4, 8];
const SCAN_RECORDS: u64 = 50_000;
const SCAN_THREADS: [usize; 2] = [1, 2];

fn fresh_journal(name: &str) -> (TempDir, Journal) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("ctx-bench-{name}-"))
        .tempdir()
        .expect("create a temp dir");
    let journal =
        Journal::open(dir.path().join("journal"), &OpenOptions::new()).expect("open the journal");
    (dir, journal)
}

fn stream(key: &str) -> StreamId {
    StreamId::derive("bench", key.as_bytes()).expect("a valid stream id")
}

fn payloads() -> Payloads {
    Payloads::new().expect("build the payload pool")
}

/// One record per append: one commit and one fsync each.
fn append_single(c: &mut Criterion) {
    let p = payloads();
    let (_dir, journal) = fresh_journal("single");
    let s = stream("single");
    let mut seq = 0;
    let mut group = c.benchmark_group("journal");
    group.throughput(Throughput::Elements(1));
    group.bench_function("append_single", |b| {
        b.iter(|| {
            let record = new_record(&p, 1, seq);
            seq += 1;
            let append = StreamAppend::new(s, ExpectedRevision::Any, vec![record]);
            black_box(journal.append(append).expect("append"))
        })
    });
    group.finish();
}

/// 1000 records in one append (one stream), and 1000 records in one append_batch over 64
/// streams (the window rotating over 1000 streams). Building the records is not timed.
fn append_batch(c: &mut Criterion) {
    let p = payloads();
    let mut group = c.benchmark_group("journal");
    group.throughput(Throughput::Elements(1000));

    let (_dir1, journal) = fresh_journal("batch");
    let s = stream("batch");
    let mut seq = 0;
    group.bench_function("append_batch_1000", |b| {
        b.iter_batched(
            || {
                let records = (0..1000).map(|i| new_record(&p, 2, seq + i)).collect();
                seq += 1000;
                StreamAppend::new(s, ExpectedRevision::Any, records)
            },
            |append| black_box(journal.append(append).expect("append")),
            BatchSize::PerIteration,
        )
    });

    let (_dir2, journal) = fresh_journal("batch-64");
    let mut windows = WindowedBatches::new(3).expect("stream ids");
    group.bench_function("append_batch_1000_over_64_streams", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let (batch, touched) = windows.next_batch(&p);
                let start = Instant::now();
                let outcomes = journal.append_batch(batch).expect("append_batch");
                timed += start.elapsed();
                windows.accepted(&touched, outcomes.iter().map(|o| o.last_revision()));
            }
            timed
        })
    });
    group.finish();
}

/// N threads each append single records to their own stream; the journal group-commits them.
/// One iteration is one append per thread, so throughput is N records per iteration.
fn group_commit(c: &mut Criterion) {
    let p = payloads();
    let (_dir, journal) = fresh_journal("group");
    let mut group = c.benchmark_group("journal/group_commit");
    let mut tag = 100;
    for threads in GROUP_THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    tag += 1;
                    let barrier = Barrier::new(threads + 1);
                    std::thread::scope(|scope| {
                        for t in 0..threads {
                            let (journal, barrier, p) = (&journal, &barrier, &p);
                            let s = stream(&format!("group-{t}"));
                            let tag = tag * 16 + t as u64;
                            scope.spawn(move || {
                                barrier.wait();
                                for i in 0..iters {
                                    let record = new_record(p, tag, i);
                                    let append =
                                        StreamAppend::new(s, ExpectedRevision::Any, vec![record]);
                                    journal.append(append).expect("append");
                                }
                            });
                        }
                        barrier.wait();
                        let start = Instant::now();
                        // Leaving the scope joins every appender.
                        start
                    })
                    .elapsed()
                })
            },
        );
    }
    group.finish();
}

/// A verified scan of 100k records (digest + MAC of each), with a no-op closure.
fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal");
    group.throughput(Throughput::Elements(REPLAY_RECORDS));
    let mut fixture: Option<(TempDir, Journal)> = None;
    group.bench_function("replay_scan_100k", |b| {
        // Loaded on first use, so filtering this bench out skips the load.
        let (_, journal) = fixture.get_or_insert_with(|| {
            let p = payloads();
            let (dir, journal) = fresh_journal("replay");
            let mut windows = WindowedBatches::new(4).expect("stream ids");
            for _ in 0..REPLAY_RECORDS / 1000 {
                let (batch, touched) = windows.next_batch(&p);
                let outcomes = journal.append_batch(batch).expect("append_batch");
                windows.accepted(&touched, outcomes.iter().map(|o| o.last_revision()));
            }
            (dir, journal)
        });
        b.iter(|| {
            let n = journal.scan(1, |view| {
                black_box(view.payload);
                ControlFlow::Continue(())
            });
            assert_eq!(n.expect("scan"), REPLAY_RECORDS);
        })
    });
    group.finish();
}

/// A full verified scan of 50k records whose closure reads every payload byte (as a projection
/// rebuild reads its records), on 1 and 2 threads. Each thread count has its own journal (a data
/// directory open in a process is shared, with the options of its first open); both hold the
/// same records. Criterion runs the one-thread case and then the two-thread case, so a change in
/// the host's load between them moves their ratio; `ctx-bench compare` measures the same ratio
/// with the two interleaved round by round (`p4_scan_threads_vs_one`, spec/journal.md §15).
fn scan_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("scan threads");
    group.throughput(Throughput::Elements(SCAN_RECORDS));
    let mut fixtures: Vec<(usize, TempDir, Journal)> = Vec::new();
    for threads in SCAN_THREADS {
        group.bench_with_input(
            BenchmarkId::from_parameter(threads),
            &threads,
            |b, &threads| {
                // Loaded on first use, so filtering this bench out skips the load.
                if !fixtures.iter().any(|(t, _, _)| *t == threads) {
                    let p = payloads();
                    let dir = tempfile::Builder::new()
                        .prefix(&format!("ctx-bench-scan-{threads}-"))
                        .tempdir()
                        .expect("create a temp dir");
                    let journal = Journal::open(
                        dir.path().join("journal"),
                        &OpenOptions::new().scan_threads(threads),
                    )
                    .expect("open the journal");
                    let mut windows = WindowedBatches::new(5).expect("stream ids");
                    for _ in 0..SCAN_RECORDS / 1000 {
                        let (batch, touched) = windows.next_batch(&p);
                        let outcomes = journal.append_batch(batch).expect("append_batch");
                        windows.accepted(&touched, outcomes.iter().map(|o| o.last_revision()));
                    }
                    fixtures.push((threads, dir, journal));
                }
                let Some((_, _, journal)) = fixtures.iter().find(|(t, _, _)| *t == threads) else {
                    unreachable!("the fixture was just loaded")
                };
                b.iter(|| {
                    let mut sum = 0u64;
                    let n = journal.scan(1, |view| {
                        sum = view
                            .payload
                            .iter()
                            .fold(sum, |s, &byte| s.wrapping_add(u64::from(byte)));
                        ControlFlow::Continue(())
                    });
                    assert_eq!(n.expect("scan"), SCAN_RECORDS);
                    black_box(sum)
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = append_single, append_batch, group_commit, replay, scan_threads
}
criterion_main!(benches);
