//! Concurrency: sixteen threads append at once to shared streams (with `Any`, and with `Exact`
//! retried on `WrongRevision`), to their own streams and in multi-stream batches, through clones
//! and through repeated opens of the same directory. Every acknowledged append must be there,
//! positions gap-free, revisions contiguous, the journal verified. And callers that a full group
//! leaves queued are all answered.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use ctx_journal::{
    AppendError, AppendedRecord, Digest, ExpectedRevision, Journal, NewRecord, StreamAppend,
    StreamId, Timestamp,
};

use crate::support;

const THREADS: usize = 16;
const ROUNDS: usize = 12;

fn shared_any() -> StreamId {
    support::stream("conc-shared-any")
}

fn shared_exact() -> StreamId {
    support::stream("conc-shared-exact")
}

fn own(thread: usize) -> StreamId {
    support::stream(&format!("conc-own-{thread}"))
}

fn record(event_id: String) -> NewRecord {
    let payload = format!("payload of {event_id}").into_bytes();
    NewRecord::new(event_id, "conc.kind", Timestamp(7), payload)
}

/// One acknowledged record: its stream, event id and what the journal answered.
type Acked = (StreamId, String, AppendedRecord);

fn collect(acked: &mut Vec<Acked>, stream: StreamId, ids: &[String], records: &[AppendedRecord]) {
    assert_eq!(ids.len(), records.len());
    for (id, r) in ids.iter().zip(records) {
        acked.push((stream, id.clone(), *r));
    }
}

fn worker(journal: &Journal, t: usize, barrier: &Barrier, retries: &AtomicU64) -> Vec<Acked> {
    let mut acked = Vec::new();
    let mut own_head = 0u64;
    barrier.wait();
    for i in 0..ROUNDS {
        let id = |k: usize| format!("t{t}-i{i}-k{k}");
        match i % 4 {
            0 => {
                let ids = vec![id(0)];
                let o = journal
                    .append(StreamAppend::new(
                        shared_any(),
                        ExpectedRevision::Any,
                        vec![record(ids[0].clone())],
                    ))
                    .unwrap();
                collect(&mut acked, shared_any(), &ids, &o.records);
            }
            1 => {
                let ids = vec![id(0), id(1)];
                let mut head = journal
                    .stream_head(&shared_exact())
                    .unwrap()
                    .map_or(0, |h| h.revision);
                let o = loop {
                    let expected = if head == 0 {
                        ExpectedRevision::NoStream
                    } else {
                        ExpectedRevision::Exact(head)
                    };
                    let records = ids.iter().cloned().map(record).collect();
                    match journal.append(StreamAppend::new(shared_exact(), expected, records)) {
                        Ok(o) => break o,
                        Err(AppendError::WrongRevision {
                            current,
                            expected: e,
                            stream,
                        }) => {
                            assert_eq!(stream, shared_exact());
                            assert_eq!(e, expected);
                            assert!(current > head, "the head only moves forward");
                            retries.fetch_add(1, Ordering::Relaxed);
                            head = current;
                        }
                        Err(e) => panic!("thread {t}: {e}"),
                    }
                };
                assert_eq!(
                    o.records[0].revision,
                    head + 1,
                    "appended right after the expected head"
                );
                collect(&mut acked, shared_exact(), &ids, &o.records);
            }
            2 => {
                let ids = vec![id(0)];
                let expected = if own_head == 0 {
                    ExpectedRevision::NoStream
                } else {
                    ExpectedRevision::Exact(own_head)
                };
                let o = journal
                    .append(StreamAppend::new(
                        own(t),
                        expected,
                        vec![record(ids[0].clone())],
                    ))
                    .unwrap();
                own_head += 1;
                assert_eq!(o.records[0].revision, own_head);
                collect(&mut acked, own(t), &ids, &o.records);
            }
            _ => {
                let own_ids = vec![id(0), id(1)];
                let shared_ids = vec![id(2)];
                let outcomes = journal
                    .append_batch(vec![
                        StreamAppend::new(
                            own(t),
                            ExpectedRevision::Exact(own_head),
                            own_ids.iter().cloned().map(record).collect(),
                        ),
                        StreamAppend::new(
                            shared_any(),
                            ExpectedRevision::Any,
                            vec![record(shared_ids[0].clone())],
                        ),
                    ])
                    .unwrap();
                own_head += 2;
                assert_eq!(outcomes[0].last_revision(), own_head);
                // One atomic commit: the batch's positions are consecutive.
                let positions: Vec<u64> = outcomes
                    .iter()
                    .flat_map(|o| o.records.iter().map(|r| r.position))
                    .collect();
                assert_eq!(
                    positions,
                    (positions[0]..positions[0] + 3).collect::<Vec<_>>()
                );
                collect(&mut acked, own(t), &own_ids, &outcomes[0].records);
                collect(&mut acked, shared_any(), &shared_ids, &outcomes[1].records);
            }
        }
    }
    acked
}

#[test]
fn sixteen_threads_append_without_losing_or_reordering() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let journal = support::open(dir.path());
    let barrier = Barrier::new(THREADS);
    let retries = AtomicU64::new(0);
    let acked: Vec<Acked> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, retries) = (&barrier, &retries);
                // Half the threads use a clone, half open the directory again.
                let handle = if t % 2 == 0 {
                    journal.clone()
                } else {
                    support::open(dir.path())
                };
                scope.spawn(move || worker(&handle, t, barrier, retries))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    // Every append was acknowledged once per record: 1 + 2 + 1 + 3 records per 4 rounds.
    let per_thread = (ROUNDS / 4) * 7;
    assert_eq!(acked.len(), THREADS * per_thread);
    let n = acked.len() as u64;

    // Positions: each acknowledged once, together exactly 1..=N.
    let by_position: BTreeMap<u64, &Acked> = acked.iter().map(|a| (a.2.position, a)).collect();
    assert_eq!(
        by_position.len(),
        acked.len(),
        "two appends were given one position"
    );
    assert_eq!(
        by_position.keys().copied().collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );
    assert_eq!(journal.head_position().unwrap(), n);

    // Every acknowledged record is there, as acknowledged.
    let all = journal.read_all(1, usize::MAX).unwrap();
    assert_eq!(all.len() as u64, n);
    for record in &all {
        let (stream, event_id, appended) = by_position[&record.position];
        assert_eq!(record.stream, *stream);
        assert_eq!(record.event_id, *event_id);
        assert_eq!(record.revision, appended.revision);
        assert_eq!(record.digest, appended.digest);
        assert_eq!(
            record.payload,
            format!("payload of {event_id}").into_bytes()
        );
    }

    // Per stream: revisions contiguous from 1, chained, in position order.
    let mut streams: HashMap<StreamId, u64> = HashMap::new();
    for (stream, _, _) in &acked {
        *streams.entry(*stream).or_default() += 1;
    }
    assert_eq!(streams.len(), THREADS + 2);
    assert_eq!(
        streams[&shared_exact()],
        (THREADS * (ROUNDS / 4) * 2) as u64
    );
    for (stream, count) in &streams {
        let records = journal.read_stream(stream, 1, usize::MAX).unwrap();
        assert_eq!(records.len() as u64, *count);
        let mut previous = Digest::ZERO;
        let mut last_position = 0;
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.revision, i as u64 + 1);
            assert_eq!(r.previous_digest, previous);
            assert!(
                r.position > last_position,
                "revision order is position order"
            );
            previous = r.digest;
            last_position = r.position;
        }
        let head = journal.stream_head(stream).unwrap().unwrap();
        assert_eq!(
            (head.revision, head.position, head.digest),
            (*count, last_position, previous)
        );
    }

    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, n);
    assert_eq!(report.streams, streams.len() as u64);
    eprintln!(
        "concurrency: {n} records from {THREADS} threads, {} WrongRevision retries",
        retries.load(Ordering::Relaxed)
    );
}

/// Records per request in the capped-group test: two fit in one group, three do not.
const CAPPED_REQUEST_RECORDS: usize = ctx_journal::GROUP_RECORDS_MAX / 3 + 1;
const CAPPED_THREADS: usize = 5;

/// Holds the first commit for a while, so that the other callers queue behind it.
struct SlowFirstCommit(AtomicBool);

impl ctx_journal::ProjectionHook for SlowFirstCommit {
    fn name(&self) -> &str {
        "slow-first-commit"
    }

    fn apply(
        &self,
        _tx: &ctx_journal::HookTxn<'_>,
        _record: &ctx_journal::RecordView<'_>,
    ) -> Result<(), ctx_journal::HookError> {
        if !self.0.swap(true, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }
}

/// Requests too large to share one group (spec/journal.md §6): while the first commit is held,
/// the other callers queue, more than the next group can take; every one of them must be
/// answered, though the callers the first group answered leave and no one new arrives. A caller
/// left asleep would hang the test, so the test waits with a deadline and fails instead.
#[test]
fn callers_left_queued_by_a_full_group_are_all_answered() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let journal = support::open(dir.path());
    assert!(journal.register_hook(Arc::new(SlowFirstCommit(AtomicBool::new(false)))));
    let barrier = Arc::new(Barrier::new(CAPPED_THREADS));
    let (done, finished) = mpsc::channel();
    for t in 0..CAPPED_THREADS {
        let (journal, barrier, done) = (journal.clone(), barrier.clone(), done.clone());
        let records = (0..CAPPED_REQUEST_RECORDS)
            .map(|k| record(format!("cap-t{t}-k{k}")))
            .collect();
        let request = StreamAppend::new(own(t), ExpectedRevision::Any, records);
        std::thread::spawn(move || {
            barrier.wait();
            let outcome = journal.append(request);
            let _ = done.send((t, outcome));
        });
    }
    drop(done);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut positions: Vec<u64> = Vec::new();
    for _ in 0..CAPPED_THREADS {
        let left = deadline.saturating_duration_since(Instant::now());
        let (t, outcome) = finished
            .recv_timeout(left)
            .expect("a caller was never answered: it slept on while others were queued");
        let outcome = outcome.unwrap_or_else(|e| panic!("thread {t}: {e}"));
        assert_eq!(outcome.records.len(), CAPPED_REQUEST_RECORDS);
        positions.extend(outcome.records.iter().map(|r| r.position));
    }
    positions.sort_unstable();
    let n = (CAPPED_THREADS * CAPPED_REQUEST_RECORDS) as u64;
    assert_eq!(positions, (1..=n).collect::<Vec<_>>());
    assert_eq!(journal.head_position().unwrap(), n);
}
