//! Verified replay on several threads (spec/journal.md §7, "Parallel verification"): a scan or a
//! maintenance replay on N threads shows the same records in the same order as on one thread,
//! reports the same first failure, shows nothing at or after it, and stops where the caller stops.

use std::ops::ControlFlow;
use std::path::Path;

use ctx_journal::{
    ExpectedRevision, Journal, NewRecord, ProjectionError, ReadError, StreamAppend, Timestamp,
    files,
};
use redb::{ReadableDatabase, TableDefinition};

use crate::support;

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");

/// Enough records for several full pages (SCAN_PARALLEL_PAGE_RECORDS) after the growing first
/// pages, so pipelining, chunk claiming and page reuse all run.
const TOTAL: u64 = 4_100;

/// Thread counts compared with the sequential path.
const THREADS: [usize; 3] = [2, 3, 8];

/// What a closure saw of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    position: u64,
    digest: [u8; 32],
    event_id: String,
    payload_fnv: u64,
}

/// Payloads of three shapes: short (stored as is), mid-sized (compressed) and a few large ones.
fn payload(i: u64) -> Vec<u8> {
    match i % 7 {
        0 => format!("short {i}").into_bytes(),
        3 if i % 140 == 3 => (0..20_000u64).map(|b| (b * 31 + i) as u8).collect(),
        _ => format!("{{\"scope\":\"scope-{:04}\",\"decision\":{},\"reason\":\"operator approved after consent; policy allows install\"}}", i % 97, i % 3).into_bytes(),
    }
}

/// A journal of [`TOTAL`] records over 9 streams, appended in batches. Event ids are merged at
/// every commit, so a record corrupted below the last few hundred is not in the tail every open
/// authenticates, and the journal still takes maintenance.
fn populate(dir: &Path) {
    let journal = Journal::open(dir, &support::options().event_index_merge_records(1)).unwrap();
    let mut i = 0u64;
    while i < TOTAL {
        let mut batch = Vec::new();
        for s in 0..9u64 {
            let records: Vec<NewRecord> = (0..20)
                .map(|k| i + s * 20 + k)
                .filter(|n| *n < TOTAL)
                .map(|n| {
                    NewRecord::new(
                        format!("parallel-{n}"),
                        "parallel.kind",
                        Timestamp(n as i64),
                        payload(n),
                    )
                })
                .collect();
            if !records.is_empty() {
                batch.push(StreamAppend::new(
                    support::stream(&format!("parallel-{s}")),
                    ExpectedRevision::Any,
                    records,
                ));
            }
        }
        journal.append_batch(batch).unwrap();
        i += 180;
    }
    assert_eq!(journal.head_position().unwrap(), TOTAL);
}

/// Opens `dir` alone in this process with `threads` scan threads. The options of the first open
/// of a directory hold while any handle is alive, so callers drop the journal before the next.
fn open_with(dir: &Path, threads: usize) -> Journal {
    Journal::open(dir, &support::options().scan_threads(threads)).unwrap()
}

/// Scans from `from` with `threads` threads, stopping after `stop_after` records when given.
/// Returns what the closure saw and the outcome (the error as its text and its debug form).
fn scan(
    dir: &Path,
    threads: usize,
    from: u64,
    stop_after: Option<usize>,
) -> (Vec<Seen>, Result<u64, String>) {
    let journal = open_with(dir, threads);
    let mut seen = Vec::new();
    let outcome = journal.scan(from, |view| {
        seen.push(Seen {
            position: view.position,
            digest: *view.digest.as_bytes(),
            event_id: view.event_id.to_owned(),
            payload_fnv: support::fnv(view.payload),
        });
        if stop_after.is_some_and(|n| seen.len() >= n) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    drop(journal);
    (seen, outcome.map_err(|e| describe(&e)))
}

fn describe(e: &ReadError) -> String {
    format!("{e} / {e:?}")
}

/// Rewrites the stored value at `position` with the journal closed.
fn rewrite(dir: &Path, position: u64, edit: impl FnOnce(Vec<u8>) -> Option<Vec<u8>>) {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let before = {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        table.get(position).unwrap().unwrap().value().to_vec()
    };
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(RECORDS).unwrap();
        match edit(before) {
            Some(value) => {
                table.insert(position, value.as_slice()).unwrap();
            }
            None => {
                table.remove(position).unwrap();
            }
        }
    }
    txn.commit().unwrap();
}

/// The payload's last byte flipped: the digest no longer matches (AuthenticationFailed).
fn flip_payload(dir: &Path, position: u64) {
    rewrite(dir, position, |value| {
        let mut value = support::record_value_stored_as_is(&value);
        let last = value.len() - 1;
        value[last] ^= 0x40;
        Some(value)
    });
}

/// The record magic broken: the value does not decode (Corrupt).
fn break_magic(dir: &Path, position: u64) {
    rewrite(dir, position, |mut value| {
        value[0] ^= 0xff;
        Some(value)
    });
}

/// Asserts that every thread count sees what one thread sees and gets the same outcome; returns
/// the sequential result.
fn assert_same(
    dir: &Path,
    from: u64,
    stop_after: Option<usize>,
) -> (Vec<Seen>, Result<u64, String>) {
    let sequential = scan(dir, 1, from, stop_after);
    for threads in THREADS {
        let parallel = scan(dir, threads, from, stop_after);
        assert_eq!(
            parallel.1, sequential.1,
            "{threads} threads from {from}: the outcome differs"
        );
        assert_eq!(
            parallel.0.len(),
            sequential.0.len(),
            "{threads} threads from {from}: a different number of records was shown"
        );
        assert!(
            parallel.0 == sequential.0,
            "{threads} threads from {from}: the records shown differ"
        );
    }
    sequential
}

fn positions(seen: &[Seen]) -> Vec<u64> {
    seen.iter().map(|s| s.position).collect()
}

#[test]
fn every_thread_count_shows_the_same_records_in_order() {
    let _shared = support::shared();
    let dir = support::tempdir();
    populate(dir.path());
    for from in [
        0,
        1,
        2,
        17,
        250,
        1_000,
        2_031,
        2_032,
        2_033,
        TOTAL - 5,
        TOTAL,
        TOTAL + 1,
    ] {
        let (seen, outcome) = assert_same(dir.path(), from, None);
        let first = from.max(1);
        let expected: Vec<u64> = (first..=TOTAL).collect();
        assert_eq!(positions(&seen), expected, "from {from}");
        assert_eq!(outcome, Ok(expected.len() as u64), "from {from}");
    }
}

#[test]
fn a_corrupt_record_is_reported_first_and_nothing_after_it_is_shown() {
    let _shared = support::shared();
    let dir = support::tempdir();
    populate(dir.path());
    // A record in the middle of a full page, past the first pages.
    let bad = 2_777;
    flip_payload(dir.path(), bad);
    let (seen, outcome) = assert_same(dir.path(), 1, None);
    assert_eq!(positions(&seen), (1..bad).collect::<Vec<_>>());
    let error = outcome.unwrap_err();
    assert!(
        error.contains("AuthenticationFailed") && error.contains(&format!("position: {bad}")),
        "{error}"
    );
    // From just before it, and from it.
    for from in [bad - 1, bad] {
        let (seen, outcome) = assert_same(dir.path(), from, None);
        assert_eq!(positions(&seen), (from..bad).collect::<Vec<_>>());
        assert_eq!(outcome.unwrap_err(), error);
    }
}

#[test]
fn the_lowest_of_several_corrupt_records_wins() {
    let _shared = support::shared();
    // Pairs (first, second) of bad positions: near the end of a page with the next one in the
    // following page; two in one chunk; the first at a page's last record; a later failure in an
    // earlier-verified page; and a structural failure after a digest failure and before one.
    let cases: [(u64, u64, bool); 6] = [
        (2_030, 2_040, false),
        (3_100, 3_101, true),
        (1_008, 1_009, false),
        (500, 3_900, true),
        (4_090, 4_099, false),
        (5, 4_000, true),
    ];
    for (first, second, magic_first) in cases {
        let dir = support::tempdir();
        populate(dir.path());
        if magic_first {
            break_magic(dir.path(), first);
            flip_payload(dir.path(), second);
        } else {
            flip_payload(dir.path(), first);
            break_magic(dir.path(), second);
        }
        let (seen, outcome) = assert_same(dir.path(), 1, None);
        assert_eq!(
            positions(&seen),
            (1..first).collect::<Vec<_>>(),
            "bad records at {first} and {second}"
        );
        let error = outcome.unwrap_err();
        let kind = if magic_first {
            "Corrupt"
        } else {
            "AuthenticationFailed"
        };
        assert!(
            error.contains(kind) && error.contains(&format!("position: {first}")),
            "bad records at {first} and {second}: {error}"
        );
    }
}

#[test]
fn a_gap_in_the_positions_is_reported_after_the_records_before_it() {
    let _shared = support::shared();
    let dir = support::tempdir();
    populate(dir.path());
    let missing = 2_500;
    rewrite(dir.path(), missing, |_| None);
    let (seen, outcome) = assert_same(dir.path(), 1, None);
    assert_eq!(positions(&seen), (1..missing).collect::<Vec<_>>());
    let error = outcome.unwrap_err();
    assert!(
        error.contains("positions jump") && error.contains(&format!("position: {missing}")),
        "{error}"
    );
}

#[test]
fn break_stops_the_scan_where_the_closure_stops() {
    let _shared = support::shared();
    let dir = support::tempdir();
    populate(dir.path());
    // A corrupt record after the stop is never reached, on any thread count.
    flip_payload(dir.path(), 3_500);
    for stop in [1, 15, 16, 17, 300, 1_024, 3_000, 3_499] {
        let (seen, outcome) = assert_same(dir.path(), 1, Some(stop));
        assert_eq!(
            positions(&seen),
            (1..=stop as u64).collect::<Vec<_>>(),
            "stop after {stop}"
        );
        assert_eq!(outcome, Ok(stop as u64), "stop after {stop}");
    }
    // read_all stops at its maximum the same way.
    for threads in [1, 4] {
        let journal = open_with(dir.path(), threads);
        let records = journal.read_all(100, 40).unwrap();
        assert_eq!(
            records.iter().map(|r| r.position).collect::<Vec<_>>(),
            (100..140).collect::<Vec<_>>()
        );
    }
}

/// A maintenance replay (projection rebuild) on one thread and on several.
fn replay(dir: &Path, threads: usize, from: u64, fail_at: Option<u64>) -> (Vec<Seen>, String) {
    let journal = Journal::open(
        dir,
        &support::options()
            .scan_threads(threads)
            .ignore_integrity_verdict(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let outcome = journal.maintain(|txn| {
        let visited = txn.replay(from, |hook, view| {
            // The closure may use the transaction between records.
            hook.insert("proj.parallel", &view.position.to_be_bytes(), view.payload)?;
            seen.push(Seen {
                position: view.position,
                digest: *view.digest.as_bytes(),
                event_id: view.event_id.to_owned(),
                payload_fnv: support::fnv(view.payload),
            });
            if fail_at == Some(view.position) {
                return Err(ctx_journal::HookError::with_code("stop", "refused"));
            }
            Ok(())
        })?;
        Ok((visited, false))
    });
    drop(journal);
    let outcome = match outcome {
        Ok(n) => format!("ok {n}"),
        Err(e @ ProjectionError::Apply { .. }) => format!("apply {e} / {e:?}"),
        Err(e) => format!("error {e} / {e:?}"),
    };
    (seen, outcome)
}

#[test]
fn maintenance_replay_is_the_same_on_every_thread_count() {
    let _shared = support::shared();
    let dir = support::tempdir();
    populate(dir.path());
    for (from, fail_at) in [(1, None), (1_500, None), (1, Some(2_222)), (TOTAL, None)] {
        let sequential = replay(dir.path(), 1, from, fail_at);
        for threads in THREADS {
            let parallel = replay(dir.path(), threads, from, fail_at);
            assert_eq!(parallel.1, sequential.1, "{threads} threads from {from}");
            assert!(
                parallel.0 == sequential.0,
                "{threads} threads from {from}: the records shown differ"
            );
        }
        let last = fail_at.unwrap_or(TOTAL);
        assert_eq!(
            positions(&sequential.0),
            (from..=last).collect::<Vec<_>>(),
            "from {from}"
        );
    }
    // A corrupt record: the same error, and nothing from it on is shown.
    let bad = 3_333;
    flip_payload(dir.path(), bad);
    let sequential = replay(dir.path(), 1, 1, None);
    assert_eq!(positions(&sequential.0), (1..bad).collect::<Vec<_>>());
    assert!(
        sequential.1.contains(&format!("position: {bad}")),
        "{}",
        sequential.1
    );
    for threads in THREADS {
        let parallel = replay(dir.path(), threads, 1, None);
        assert_eq!(parallel.1, sequential.1, "{threads} threads");
        assert!(parallel.0 == sequential.0, "{threads} threads");
    }
}
