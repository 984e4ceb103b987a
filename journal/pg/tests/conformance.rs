//! The seam's conformance suite (spec/scale-out.md, "The seam"): one body per contract, run
//! against every backend through `Journal`, so the same core code is checked on each.
//!
//! - redb: a temporary data directory; threads share one handle (one process, one committer).
//! - PostgreSQL: a fresh database per test on the shared throwaway cluster (or `$CTX_PG_URL`),
//!   with a temporary directory for the installation key. Every `Fixture::open` is a separate
//!   handle with its own connections, as a separate process would be.
//!
//! PostgreSQL tests follow the harness's skip rule (`gate`): without the binaries they print a
//! `skipped:` line and pass, unless `CTX_REQUIRE_PG=1`. `CTX_CONFORMANCE_SCALE` (default 1)
//! multiplies the sizes of the concurrent tests.
//!
//! Fail points are process-global: the tests using them hold `FAILPOINTS` exclusively, every
//! other test holds it shared, so no injected failure ever reaches another test's append.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use ctx_journal::{
    AppendError, AppendOutcome, BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX,
    ConflictKind, Digest, EVENT_ID_MAX_BYTES, ExpectedRevision, HookError, HookTxn, InputError,
    Journal, KIND_MAX_BYTES, NewRecord, OpenOptions, PAYLOAD_MAX_BYTES, ProjectionHook, Record,
    RecordView, StreamAppend, StreamHead, StreamId, Timestamp,
};
use ctx_journal_pg::{PgBackend, available, gate, shared};

use ExpectedRevision::{Any, Exact, NoStream};

// ----- fixtures -----

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Redb,
    Postgres,
}

static FAILPOINTS: RwLock<()> = RwLock::new(());

enum Guard {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

/// One test's journal: where it lives and how to open a handle on it.
struct Fixture {
    kind: Kind,
    /// The redb data directory, or the PostgreSQL journal's key directory.
    dir: tempfile::TempDir,
    url: String,
    dbname: String,
    // Dropped in this order: fail points cleared, then the lock released.
    scenario: Option<fail::FailScenario<'static>>,
    _guard: Guard,
}

impl Fixture {
    /// The fixture of `test`, or `None` when it is a PostgreSQL test and the skip rule skips it.
    fn new(kind: Kind, test: &'static str, exclusive: bool) -> Option<Fixture> {
        let guard = if exclusive {
            Guard::Exclusive(FAILPOINTS.write().unwrap_or_else(PoisonError::into_inner))
        } else {
            Guard::Shared(FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner))
        };
        let (url, dbname) = match kind {
            Kind::Redb => (String::new(), String::new()),
            Kind::Postgres => {
                if !gate(test, available()).unwrap_or_else(|e| panic!("{test}: {e}")) {
                    return None;
                }
                let dbname = format!("ctx_conf_{}", test.trim_start_matches("postgres_"));
                assert!(dbname.len() <= 63, "database name {dbname} is too long");
                let server = shared().unwrap_or_else(|e| panic!("{test}: no PostgreSQL: {e}"));
                let url = server
                    .create_database(&dbname)
                    .unwrap_or_else(|e| panic!("{test}: {e}"));
                (url, dbname)
            }
        };
        Some(Fixture {
            kind,
            dir: tempfile::tempdir().unwrap(),
            url,
            dbname,
            scenario: exclusive.then(fail::FailScenario::setup),
            _guard: guard,
        })
    }

    /// A handle: redb shares one journal per directory in a process; PostgreSQL gives a new
    /// handle with its own connections, like another process.
    fn open(&self) -> Journal {
        let options = OpenOptions::new().lock_wait(Duration::from_secs(10));
        match self.kind {
            Kind::Redb => Journal::open(self.dir.path(), &options)
                .unwrap_or_else(|e| panic!("open redb journal: {e}")),
            Kind::Postgres => {
                let backend = PgBackend::connect(&self.url)
                    .unwrap_or_else(|e| panic!("connect PgBackend: {e}"));
                Journal::open_with_backend(self.dir.path(), &options, Arc::new(backend))
                    .unwrap_or_else(|e| panic!("open PostgreSQL journal: {e}"))
            }
        }
    }

    /// The handle a concurrent writer or reader uses: redb threads share `main`, PostgreSQL
    /// threads each get their own (separate connections, as separate processes would have).
    fn worker(&self, main: &Journal) -> Journal {
        match self.kind {
            Kind::Redb => main.clone(),
            Kind::Postgres => self.open(),
        }
    }

    /// Whether an uncertain commit stops the handle until it is reopened.
    fn fail_stops(&self) -> bool {
        self.kind == Kind::Redb
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(scenario) = self.scenario.take() {
            scenario.teardown();
        }
    }
}

/// `CTX_CONFORMANCE_SCALE`: a multiplier of the concurrent tests' sizes (default 1).
fn scale() -> usize {
    match std::env::var("CTX_CONFORMANCE_SCALE") {
        Ok(v) if !v.is_empty() => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .unwrap_or_else(|| panic!("CTX_CONFORMANCE_SCALE={v:?} is not a positive integer")),
        _ => 1,
    }
}

/// Runs `body` on a fixture of `kind` and reports its time; a skipped test returns at once.
fn run(kind: Kind, test: &'static str, exclusive: bool, body: fn(&Fixture)) {
    let Some(fx) = Fixture::new(kind, test, exclusive) else {
        return;
    };
    let started = Instant::now();
    body(&fx);
    eprintln!("{test}: {:?}", started.elapsed());
}

/// One `#[test]` per backend for each body: `body: redb_name, postgres_name;`.
macro_rules! conformance {
    ($exclusive:literal; $($body:ident: $redb:ident, $pg:ident;)*) => {$(
        #[test]
        fn $redb() {
            run(Kind::Redb, stringify!($redb), $exclusive, $body);
        }

        #[test]
        fn $pg() {
            run(Kind::Postgres, stringify!($pg), $exclusive, $body);
        }
    )*};
}

conformance! { false;
    wrong_revision_writes_nothing:
        redb_wrong_revision_writes_nothing, postgres_wrong_revision_writes_nothing;
    contended_exact_appends_are_gap_free:
        redb_contended_exact_appends_are_gap_free, postgres_contended_exact_appends_are_gap_free;
    stale_multi_stream_batch_writes_nothing:
        redb_stale_multi_stream_batch_writes_nothing,
        postgres_stale_multi_stream_batch_writes_nothing;
    replay_returns_original_and_conflicts_are_refused:
        redb_replay_returns_original_and_conflicts_are_refused,
        postgres_replay_returns_original_and_conflicts_are_refused;
    tailing_reader_sees_every_record_once_in_order:
        redb_tailing_reader_sees_every_record_once_in_order,
        postgres_tailing_reader_sees_every_record_once_in_order;
    over_limit_batches_write_nothing:
        redb_over_limit_batches_write_nothing, postgres_over_limit_batches_write_nothing;
    bytes_round_trip_bit_identical_and_verified:
        redb_bytes_round_trip_bit_identical_and_verified,
        postgres_bytes_round_trip_bit_identical_and_verified;
    projection_hook_is_co_transactional:
        redb_projection_hook_is_co_transactional, postgres_projection_hook_is_co_transactional;
    multi_stream_batch_is_visible_all_or_nothing:
        redb_multi_stream_batch_is_visible_all_or_nothing,
        postgres_multi_stream_batch_is_visible_all_or_nothing;
    two_handles_append_concurrently_and_agree:
        redb_two_handles_append_concurrently_and_agree,
        postgres_two_handles_append_concurrently_and_agree;
}

conformance! { true;
    lost_response_after_core_commit_resolves_to_one_copy:
        redb_lost_response_after_core_commit_resolves_to_one_copy,
        postgres_lost_response_after_core_commit_resolves_to_one_copy;
    failure_before_core_commit_writes_nothing:
        redb_failure_before_core_commit_writes_nothing,
        postgres_failure_before_core_commit_writes_nothing;
}

#[test]
fn postgres_lost_response_after_pg_commit_resolves_to_one_copy() {
    run(
        Kind::Postgres,
        "postgres_lost_response_after_pg_commit_resolves_to_one_copy",
        true,
        |fx| lost_response_resolves_to_one_copy(fx, "pg-after-commit"),
    );
}

#[test]
fn postgres_failure_before_pg_commit_writes_nothing() {
    run(
        Kind::Postgres,
        "postgres_failure_before_pg_commit_writes_nothing",
        true,
        |fx| failure_before_commit_writes_nothing(fx, "pg-before-commit"),
    );
}

// ----- helpers -----

fn stream(key: &str) -> StreamId {
    StreamId::derive("conf", key.as_bytes()).unwrap()
}

fn rec(event_id: &str) -> NewRecord {
    NewRecord::new(
        event_id,
        "conf.event",
        Timestamp(1_700_000_000_000_000),
        format!("payload of {event_id}").into_bytes(),
    )
}

fn recs<S: AsRef<str>>(event_ids: &[S]) -> Vec<NewRecord> {
    event_ids.iter().map(|id| rec(id.as_ref())).collect()
}

fn append(j: &Journal, s: StreamId, expected: ExpectedRevision, ids: &[&str]) -> AppendOutcome {
    j.append(StreamAppend::new(s, expected, recs(ids)))
        .unwrap_or_else(|e| panic!("append {ids:?} ({expected}): {e}"))
}

/// (revision, position) of each record of an outcome.
fn places(outcome: &AppendOutcome) -> Vec<(u64, u64)> {
    outcome
        .records
        .iter()
        .map(|r| (r.revision, r.position))
        .collect()
}

fn head_revision(j: &Journal, s: &StreamId) -> u64 {
    j.stream_head(s).unwrap().map_or(0, |h| h.revision)
}

/// Every record, in position order, read in pages.
fn all(j: &Journal) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    loop {
        let page = j.read_all(out.len() as u64 + 1, 1000).unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

fn copies(records: &[Record], event_id: &str) -> usize {
    records.iter().filter(|r| r.event_id == event_id).count()
}

/// What a refused append must leave untouched.
#[derive(PartialEq, Eq, Debug)]
struct State {
    head_position: u64,
    heads: Vec<Option<StreamHead>>,
    records: Vec<Record>,
}

fn state(j: &Journal, streams: &[StreamId]) -> State {
    State {
        head_position: j.head_position().unwrap(),
        heads: streams.iter().map(|s| j.stream_head(s).unwrap()).collect(),
        records: all(j),
    }
}

fn assert_verified(j: &Journal, records: u64) {
    let report = j.verify().unwrap();
    assert!(report.is_ok(), "verify: {report:?}");
    assert_eq!(report.records, records, "verify counted {report:?}");
}

#[track_caller]
fn expect_wrong_revision(
    result: Result<impl std::fmt::Debug, AppendError>,
) -> (StreamId, ExpectedRevision, u64) {
    match result {
        Err(AppendError::WrongRevision {
            stream,
            expected,
            current,
        }) => (stream, expected, current),
        other => panic!("expected WrongRevision, got {other:?}"),
    }
}

#[track_caller]
fn expect_conflict(
    result: Result<impl std::fmt::Debug, AppendError>,
) -> (String, StreamId, u64, ConflictKind) {
    match result {
        Err(AppendError::Conflict {
            event_id,
            stream,
            revision,
            kind,
        }) => (event_id, stream, revision, kind),
        other => panic!("expected Conflict, got {other:?}"),
    }
}

#[track_caller]
fn expect_input(result: Result<impl std::fmt::Debug, AppendError>) -> InputError {
    match result {
        Err(AppendError::Input(e)) => e,
        other => panic!("expected Input, got {other:?}"),
    }
}

// ----- 1. expected revisions -----

fn wrong_revision_writes_nothing(fx: &Fixture) {
    let j = fx.open();
    let (s, t, u) = (stream("s"), stream("t"), stream("u"));
    append(&j, s, NoStream, &["s1", "s2"]);
    append(&j, t, NoStream, &["t1"]);
    append(&j, s, Exact(2), &["s3"]);
    let streams = [s, t, u];
    let before = state(&j, &streams);
    assert_eq!(before.head_position, 4);
    let other = fx.open();
    let cases = [
        (s, NoStream, 3),
        (s, Exact(1), 3),
        (s, Exact(2), 3),
        (s, Exact(4), 3),
        (s, Exact(5), 3),
        (s, Exact(1_000_000), 3),
        (u, Exact(1), 0),
        (u, Exact(3), 0),
    ];
    for handle in [&j, &other] {
        for (target, expected, current) in cases {
            let result = handle.append(StreamAppend::new(target, expected, recs(&["x1", "x2"])));
            assert_eq!(
                expect_wrong_revision(result),
                (target, expected, current),
                "{expected} on a stream at {current}"
            );
            assert_eq!(
                state(handle, &streams),
                before,
                "{expected} on a stream at {current} wrote something"
            );
        }
    }
    // A too-high expectation left no gap: the next good append takes the next revision and
    // position, with the event ids the refused appends carried.
    let next = append(&other, s, Exact(3), &["x1", "x2"]);
    assert_eq!(places(&next), [(4, 5), (5, 6)]);
    let created = append(&j, u, NoStream, &["u1"]);
    assert_eq!(places(&created), [(1, 7)]);
    let revisions: Vec<(u64, u64)> = j
        .read_stream(&s, 1, 100)
        .unwrap()
        .iter()
        .map(|r| (r.revision, r.position))
        .collect();
    assert_eq!(revisions, [(1, 1), (2, 2), (3, 4), (4, 5), (5, 6)]);
    assert_verified(&j, 7);
}

// ----- 2. contended optimistic appends -----

/// An acknowledged append: event id, revision, position.
type Ack = (String, u64, u64);

fn contended_exact_appends_are_gap_free(fx: &Fixture) {
    let writers = 4;
    let per_writer = 25 * scale();
    let total = (writers * per_writer) as u64;
    let s = stream("contended");
    let main = fx.open();
    let handles: Vec<Journal> = (0..writers).map(|_| fx.worker(&main)).collect();
    let barrier = Barrier::new(writers);
    let results: Vec<(Vec<Ack>, u64)> = thread::scope(|scope| {
        let spawned: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(w, j)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut acks = Vec::new();
                    let mut retries = 0u64;
                    for m in 0..per_writer {
                        let id = format!("w{w}-{m}");
                        loop {
                            let head = head_revision(j, &s);
                            let expected = if head == 0 { NoStream } else { Exact(head) };
                            match j.append(StreamAppend::new(s, expected, vec![rec(&id)])) {
                                Ok(o) => {
                                    assert!(!o.replayed, "{id} replayed");
                                    assert_eq!(o.records.len(), 1);
                                    assert_eq!(o.records[0].revision, head + 1, "{id}");
                                    acks.push((id, o.records[0].revision, o.records[0].position));
                                    break;
                                }
                                Err(AppendError::WrongRevision {
                                    stream,
                                    expected: e,
                                    current,
                                }) => {
                                    assert_eq!((stream, e), (s, expected));
                                    assert!(
                                        current > head,
                                        "{id}: refused {expected} with current {current}"
                                    );
                                    retries += 1;
                                }
                                Err(e) => panic!("{id}: {e}"),
                            }
                        }
                    }
                    (acks, retries)
                })
            })
            .collect();
        spawned.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut acked: HashMap<String, (u64, u64)> = HashMap::new();
    let mut retries = 0;
    for (acks, r) in &results {
        retries += r;
        // Each writer's own appends land in its program order.
        assert!(acks.windows(2).all(|w| w[0].1 < w[1].1));
        for (id, revision, position) in acks {
            assert!(
                acked.insert(id.clone(), (*revision, *position)).is_none(),
                "{id} acknowledged twice"
            );
        }
    }
    let mut revisions: Vec<u64> = acked.values().map(|(r, _)| *r).collect();
    revisions.sort_unstable();
    assert_eq!(revisions, (1..=total).collect::<Vec<_>>());
    let stored = main.read_stream(&s, 1, total as usize + 10).unwrap();
    assert_eq!(stored.len() as u64, total);
    for r in &stored {
        assert_eq!(acked.get(&r.event_id), Some(&(r.revision, r.position)));
    }
    assert_eq!(main.head_position().unwrap(), total);
    assert_eq!(head_revision(&main, &s), total);
    assert_verified(&main, total);
    eprintln!(
        "{:?}: {writers}x{per_writer} appends, {retries} retries",
        fx.kind
    );
}

// ----- 3. a stale expectation refuses the whole batch -----

fn stale_multi_stream_batch_writes_nothing(fx: &Fixture) {
    let j = fx.open();
    let (a, b, c) = (stream("a"), stream("b"), stream("c"));
    append(&j, a, NoStream, &["a1"]);
    append(&j, b, NoStream, &["b1"]);
    append(&j, b, Exact(1), &["b2"]);
    let streams = [a, b, c];
    let before = state(&j, &streams);
    let batch = |b_expected| {
        vec![
            StreamAppend::new(a, Exact(1), recs(&["a2", "a3"])),
            StreamAppend::new(c, NoStream, recs(&["c1"])),
            StreamAppend::new(b, b_expected, recs(&["b3"])),
        ]
    };
    // The stale part last, then first: the parts before it must not have been written.
    let stale_last = batch(Exact(1));
    let mut stale_first = batch(Exact(1));
    stale_first.rotate_right(1);
    for (order, attempt) in [("last", stale_last), ("first", stale_first)] {
        assert_eq!(
            expect_wrong_revision(j.append_batch(attempt)),
            (b, Exact(1), 2),
            "stale part {order}"
        );
        assert_eq!(state(&j, &streams), before, "stale part {order} wrote");
    }
    // A NoStream expectation on an existing stream refuses the batch the same way.
    let mut exists = batch(Exact(2));
    exists[1].stream = a;
    exists[0].stream = c;
    exists[0].expected = NoStream;
    exists[1].expected = NoStream;
    assert_eq!(
        expect_wrong_revision(j.append_batch(exists)),
        (a, NoStream, 1)
    );
    assert_eq!(state(&j, &streams), before);
    // None of the batch's event ids was taken: the corrected batch writes all of it.
    let outcomes = j.append_batch(batch(Exact(2))).unwrap();
    assert!(outcomes.iter().all(|o| !o.replayed));
    let got: Vec<(StreamId, Vec<(u64, u64)>)> =
        outcomes.iter().map(|o| (o.stream, places(o))).collect();
    assert_eq!(
        got,
        [
            (a, vec![(2, 4), (3, 5)]),
            (c, vec![(1, 6)]),
            (b, vec![(3, 7)])
        ]
    );
    assert_verified(&j, 7);
}

// ----- 4. idempotency -----

fn replay_returns_original_and_conflicts_are_refused(fx: &Fixture) {
    let j = fx.open();
    let (s, t, u) = (stream("s"), stream("t"), stream("u"));
    let batch = vec![
        StreamAppend::new(s, NoStream, recs(&["e1", "e2"])),
        StreamAppend::new(t, NoStream, recs(&["f1"])),
    ];
    let original = j.append_batch(batch.clone()).unwrap();
    assert!(original.iter().all(|o| !o.replayed));
    let replayed = |outcomes: &[AppendOutcome]| -> Vec<AppendOutcome> {
        outcomes
            .iter()
            .map(|o| AppendOutcome {
                replayed: true,
                ..o.clone()
            })
            .collect()
    };
    let expected = replayed(&original);
    // At once, on the same handle.
    assert_eq!(j.append_batch(batch.clone()).unwrap(), expected);
    assert_eq!(j.head_position().unwrap(), 3);
    // After other appends made both expectations stale.
    append(&j, s, Exact(2), &["e3"]);
    append(&j, t, Exact(1), &["f2"]);
    append(&j, u, NoStream, &["g1"]);
    let streams = [s, t, u];
    let before = state(&j, &streams);
    assert_eq!(j.append_batch(batch.clone()).unwrap(), expected);
    // From another handle, and after every handle was dropped and the journal reopened.
    let other = fx.open();
    assert_eq!(other.append_batch(batch.clone()).unwrap(), expected);
    drop(other);
    drop(j);
    let j = fx.open();
    assert_eq!(j.append_batch(batch.clone()).unwrap(), expected);
    // One stream's part alone replays too.
    assert_eq!(
        j.append(StreamAppend::new(t, Any, recs(&["f1"]))).unwrap(),
        expected[1]
    );
    assert_eq!(state(&j, &streams), before, "a replay wrote");

    // The same id with other content, in any field.
    let e1 = rec("e1");
    let variants = [
        NewRecord {
            payload: b"other payload".to_vec(),
            ..e1.clone()
        },
        NewRecord {
            kind: "conf.other".to_owned(),
            ..e1.clone()
        },
        NewRecord {
            occurred_at: Timestamp(e1.occurred_at.0 + 1),
            ..e1.clone()
        },
    ];
    for variant in variants {
        let result = j.append(StreamAppend::new(s, Any, vec![variant.clone()]));
        assert_eq!(
            expect_conflict(result),
            ("e1".to_owned(), s, 1, ConflictKind::OtherContent),
            "{variant:?}"
        );
    }
    // The same id and content on another stream: the sentence names the stream that holds it.
    let result = j.append(StreamAppend::new(u, Any, vec![e1.clone()]));
    let sentence = format!(
        "event id e1 is already used in stream {s} (at revision 1); an event id names one event \
         in one stream"
    );
    assert_eq!(result.as_ref().unwrap_err().to_string(), sentence);
    assert_eq!(
        expect_conflict(result),
        ("e1".to_owned(), s, 1, ConflictKind::OtherStream)
    );
    // A part that is partly new, partly old.
    let result = j.append(StreamAppend::new(s, Exact(3), recs(&["n1", "e2"])));
    assert_eq!(
        expect_conflict(result),
        ("e2".to_owned(), s, 2, ConflictKind::PartialRetry)
    );
    let result = j.append(StreamAppend::new(s, Exact(3), recs(&["e3", "n1"])));
    assert_eq!(
        expect_conflict(result),
        ("e3".to_owned(), s, 3, ConflictKind::PartialRetry)
    );
    // A conflict in one part refuses the other, valid part too.
    let result = j.append_batch(vec![
        StreamAppend::new(stream("v"), NoStream, recs(&["n2"])),
        StreamAppend::new(
            t,
            Any,
            vec![NewRecord::new("f1", "conf.event", Timestamp(0), "x")],
        ),
    ]);
    assert_eq!(
        expect_conflict(result),
        ("f1".to_owned(), t, 1, ConflictKind::OtherContent)
    );
    assert_eq!(state(&j, &streams), before, "a conflict wrote");
    assert_eq!(j.stream_head(&stream("v")).unwrap(), None);
    // The refused new ids stay free.
    let fresh = append(&j, s, Exact(3), &["n1", "n2"]);
    assert_eq!(places(&fresh), [(4, 7), (5, 8)]);
    let records = all(&j);
    for id in ["e1", "e2", "e3", "f1", "f2", "g1", "n1", "n2"] {
        assert_eq!(copies(&records, id), 1, "{id}");
    }
    assert_verified(&j, 8);
}

// ----- 5. global order under a tailing reader -----

fn tailing_reader_sees_every_record_once_in_order(fx: &Fixture) {
    let writers = 4;
    let per_writer = 25 * scale();
    let main = fx.open();
    let handles: Vec<Journal> = (0..writers).map(|_| fx.worker(&main)).collect();
    let reader = fx.worker(&main);
    let done = AtomicBool::new(false);
    let shared_stream = stream("tail-shared");
    let (acked, (seen, polls)) = thread::scope(|scope| {
        let done = &done;
        let reader = &reader;
        let tail = scope.spawn(move || {
            let mut next = 1u64;
            let mut seen: HashMap<String, u64> = HashMap::new();
            let mut polls = 0u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                let page = reader.read_all(next, 100).unwrap();
                polls += 1;
                for r in &page {
                    assert_eq!(
                        r.position,
                        next,
                        "reader at checkpoint {} got position {}",
                        next - 1,
                        r.position
                    );
                    assert!(
                        seen.insert(r.event_id.clone(), r.position).is_none(),
                        "{} seen twice",
                        r.event_id
                    );
                    next += 1;
                }
                if page.is_empty() {
                    if finished {
                        return (seen, polls);
                    }
                    thread::sleep(Duration::from_micros(200));
                }
            }
        });
        let spawned: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(w, j)| {
                scope.spawn(move || {
                    let own = stream(&format!("tail-{w}"));
                    let mut acks = Vec::new();
                    for m in 0..per_writer {
                        let ids: Vec<String> =
                            (0..m % 3 + 1).map(|i| format!("k{w}-{m}-{i}")).collect();
                        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                        let target = if m % 5 == 4 { shared_stream } else { own };
                        let o = append(j, target, Any, &ids);
                        for (id, r) in ids.iter().zip(&o.records) {
                            acks.push((id.to_string(), r.position));
                        }
                    }
                    acks
                })
            })
            .collect();
        let acked: Vec<(String, u64)> = spawned
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        done.store(true, Ordering::Release);
        (acked, tail.join().unwrap())
    });
    let acked: HashMap<String, u64> = acked.into_iter().collect();
    assert_eq!(
        seen.len(),
        acked.len(),
        "the reader missed or invented records"
    );
    assert_eq!(
        seen, acked,
        "the reader saw other positions than were acknowledged"
    );
    assert_eq!(main.head_position().unwrap(), acked.len() as u64);
    assert_verified(&main, acked.len() as u64);
    eprintln!(
        "{:?}: {} records by {writers} writers, reader polled {polls} times",
        fx.kind,
        acked.len()
    );
}

// ----- 6. uncertain commits -----

fn lost_response_after_core_commit_resolves_to_one_copy(fx: &Fixture) {
    lost_response_resolves_to_one_copy(fx, "journal-after-commit");
}

fn failure_before_core_commit_writes_nothing(fx: &Fixture) {
    failure_before_commit_writes_nothing(fx, "journal-before-commit");
}

/// The batch the fail-point tests append after `p1`.
fn fail_point_batch() -> Vec<StreamAppend> {
    vec![
        StreamAppend::new(stream("fp-s"), Exact(1), recs(&["p2", "p3"])),
        StreamAppend::new(stream("fp-t"), NoStream, recs(&["q1"])),
    ]
}

/// The configuration of `point`: the pg points take the database they fire for.
fn arm(fx: &Fixture, point: &str) {
    let action = if point.starts_with("pg-") {
        format!("return({})", fx.dbname)
    } else {
        "return(lost answer)".to_owned()
    };
    fail::cfg(point, &action).unwrap();
}

fn lost_response_resolves_to_one_copy(fx: &Fixture, point: &str) {
    let (s, t) = (stream("fp-s"), stream("fp-t"));
    let j = fx.open();
    append(&j, s, NoStream, &["p1"]);
    arm(fx, point);
    let result = j.append_batch(fail_point_batch());
    fail::remove(point);
    match &result {
        Err(AppendError::MaybeCommitted { .. }) => {}
        other => panic!("{point}: expected MaybeCommitted, got {other:?}"),
    }
    assert_eq!(j.is_fail_stopped(), fx.fail_stops(), "{point}");
    let j = if fx.fail_stops() {
        let refused = j.append(StreamAppend::new(stream("fp-u"), Any, recs(&["r1"])));
        assert!(
            matches!(refused, Err(AppendError::FailStopped)),
            "{refused:?}"
        );
        drop(j);
        fx.open()
    } else {
        j
    };
    // The commit landed; the retry with the same ids finds it (the expectation Exact(1) of s is
    // stale by now) and returns its result.
    assert_eq!(j.head_position().unwrap(), 4);
    let retry = j.append_batch(fail_point_batch()).unwrap();
    assert!(retry.iter().all(|o| o.replayed), "{retry:?}");
    let got: Vec<(StreamId, Vec<(u64, u64)>)> =
        retry.iter().map(|o| (o.stream, places(o))).collect();
    assert_eq!(got, [(s, vec![(2, 2), (3, 3)]), (t, vec![(1, 4)])]);
    let records = all(&j);
    assert_eq!(records.len(), 4);
    for id in ["p1", "p2", "p3", "q1"] {
        assert_eq!(copies(&records, id), 1, "{point}: copies of {id}");
    }
    // The handle goes on writing.
    assert_eq!(places(&append(&j, s, Exact(3), &["p4"])), [(4, 5)]);
    assert_verified(&j, 5);
}

fn failure_before_commit_writes_nothing(fx: &Fixture, point: &str) {
    let (s, t) = (stream("fp-s"), stream("fp-t"));
    let j = fx.open();
    append(&j, s, NoStream, &["p1"]);
    let before = state(&j, &[s, t]);
    arm(fx, point);
    let result = j.append_batch(fail_point_batch());
    fail::remove(point);
    // A fail-stop backend (redb) answers every failure "maybe committed" and stops; a backend
    // without cached state knows its transaction was aborted and answers "not committed".
    match &result {
        Err(AppendError::NotCommitted { .. }) if !fx.fail_stops() => {}
        Err(AppendError::MaybeCommitted { .. }) if fx.fail_stops() => {}
        other => panic!("{point}: unexpected {other:?}"),
    }
    assert_eq!(j.is_fail_stopped(), fx.fail_stops(), "{point}");
    assert_eq!(state(&j, &[s, t]), before, "{point}: something was written");
    let j = if fx.fail_stops() {
        drop(j);
        fx.open()
    } else {
        j
    };
    assert_eq!(state(&j, &[s, t]), before, "{point}: something was written");
    let retry = j.append_batch(fail_point_batch()).unwrap();
    assert!(retry.iter().all(|o| !o.replayed), "{retry:?}");
    let got: Vec<(StreamId, Vec<(u64, u64)>)> =
        retry.iter().map(|o| (o.stream, places(o))).collect();
    assert_eq!(got, [(s, vec![(2, 2), (3, 3)]), (t, vec![(1, 4)])]);
    let again = j.append_batch(fail_point_batch()).unwrap();
    assert!(again.iter().all(|o| o.replayed));
    let records = all(&j);
    assert_eq!(records.len(), 4);
    for id in ["p1", "p2", "p3", "q1"] {
        assert_eq!(copies(&records, id), 1, "{point}: copies of {id}");
    }
    assert_verified(&j, 4);
}

// ----- 7. limits -----

fn over_limit_batches_write_nothing(fx: &Fixture) {
    let j = fx.open();
    let (s, t) = (stream("big-s"), stream("big-t"));
    append(&j, s, NoStream, &["first"]);
    let streams = [s, t];
    let before = state(&j, &streams);
    let small = |prefix: &str, n: usize| -> Vec<NewRecord> {
        (0..n)
            .map(|i| NewRecord::new(format!("{prefix}{i}"), "conf.small", Timestamp(1), "x"))
            .collect()
    };
    let too_many = j.append(StreamAppend::new(s, Any, small("r", BATCH_RECORDS_MAX + 1)));
    assert_eq!(
        expect_input(too_many),
        InputError::TooManyRecords {
            count: BATCH_RECORDS_MAX + 1,
            max: BATCH_RECORDS_MAX
        }
    );
    let half = BATCH_RECORDS_MAX / 2;
    let split = j.append_batch(vec![
        StreamAppend::new(s, Any, small("a", half)),
        StreamAppend::new(t, Any, small("b", half + 1)),
    ]);
    assert!(matches!(
        expect_input(split),
        InputError::TooManyRecords { .. }
    ));
    let big = |prefix: &str, n: usize| -> Vec<NewRecord> {
        (0..n)
            .map(|i| {
                NewRecord::new(
                    format!("{prefix}{i}"),
                    "conf.big",
                    Timestamp(1),
                    vec![i as u8; PAYLOAD_MAX_BYTES],
                )
            })
            .collect()
    };
    let per_batch = BATCH_PAYLOAD_MAX_BYTES / PAYLOAD_MAX_BYTES;
    let too_large = j.append(StreamAppend::new(s, Any, big("m", per_batch + 1)));
    assert_eq!(
        expect_input(too_large),
        InputError::BatchTooLarge {
            bytes: (per_batch + 1) * PAYLOAD_MAX_BYTES,
            max: BATCH_PAYLOAD_MAX_BYTES
        }
    );
    let one_too_large = NewRecord::new(
        "huge",
        "conf.big",
        Timestamp(1),
        vec![0; PAYLOAD_MAX_BYTES + 1],
    );
    assert!(matches!(
        expect_input(j.append(StreamAppend::new(s, Any, vec![one_too_large]))),
        InputError::PayloadTooLarge { .. }
    ));
    let streams_over: Vec<StreamAppend> = (0..=BATCH_STREAMS_MAX)
        .map(|i| {
            StreamAppend::new(
                stream(&format!("many-{i}")),
                NoStream,
                small(&format!("z{i}-"), 1),
            )
        })
        .collect();
    assert!(matches!(
        expect_input(j.append_batch(streams_over)),
        InputError::TooManyStreams { .. }
    ));
    assert_eq!(state(&j, &streams), before, "an over-limit batch wrote");
    // Exactly at each limit the backend must take the whole batch in one transaction.
    let at_records = j
        .append(StreamAppend::new(
            s,
            Exact(1),
            small("r", BATCH_RECORDS_MAX),
        ))
        .unwrap();
    assert_eq!(at_records.last_revision(), BATCH_RECORDS_MAX as u64 + 1);
    let at_bytes = j
        .append(StreamAppend::new(t, NoStream, big("m", per_batch)))
        .unwrap();
    assert_eq!(at_bytes.last_revision(), per_batch as u64);
    let total = 1 + BATCH_RECORDS_MAX + per_batch;
    assert_eq!(j.head_position().unwrap(), total as u64);
    let stored = j.read_stream(&t, 1, per_batch).unwrap();
    assert!(
        stored
            .iter()
            .enumerate()
            .all(|(i, r)| r.payload == vec![i as u8; PAYLOAD_MAX_BYTES])
    );
    assert_verified(&j, total as u64);
}

// ----- 8. bytes read back bit-identical; projection hooks -----

/// Records chosen to trip encodings: empty and all-byte payloads, quotes, backslashes and
/// percent signs, extreme timestamps, maximal ids and kinds.
fn awkward_records(tag: &str) -> Vec<NewRecord> {
    let all_bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let mut noise = Vec::with_capacity(200_000);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < 200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    let long_id = format!("{tag}{}", "~".repeat(EVENT_ID_MAX_BYTES - tag.len()));
    vec![
        NewRecord::new(format!("{tag}-empty"), "k", Timestamp(0), Vec::new()),
        NewRecord::new(
            format!("{tag}-bytes"),
            "conf.bytes",
            Timestamp(-1),
            all_bytes,
        ),
        NewRecord::new(
            format!("{tag}-'\"\\%_;--$1"),
            "kind'\"\\%",
            Timestamp(i64::MIN),
            b"\0\0nul\\x00'\"".to_vec(),
        ),
        NewRecord::new(
            long_id,
            "K".repeat(KIND_MAX_BYTES),
            Timestamp(i64::MAX),
            noise,
        ),
        NewRecord::new(
            format!("{tag}-max"),
            "conf.max",
            Timestamp(42),
            vec![0xa5; PAYLOAD_MAX_BYTES],
        ),
    ]
}

fn bytes_round_trip_bit_identical_and_verified(fx: &Fixture) {
    let j = fx.open();
    let a = StreamId::derive("conf.bytes", b"\0\xff/key with \"quotes\"").unwrap();
    let b = stream("bytes-b");
    let mut first = awkward_records("a");
    let second_a = first.split_off(3);
    let batches = vec![
        vec![
            StreamAppend::new(a, NoStream, first),
            StreamAppend::new(b, NoStream, awkward_records("b")),
        ],
        vec![StreamAppend::new(a, Exact(3), second_a)],
    ];
    let mut expected: Vec<Record> = Vec::new();
    let mut heads: HashMap<StreamId, Digest> = HashMap::new();
    for batch in batches {
        let outcomes = j.append_batch(batch.clone()).unwrap();
        for (part, outcome) in batch.iter().zip(&outcomes) {
            assert_eq!(outcome.stream, part.stream);
            assert!(!outcome.replayed);
            for (new, stored) in part.records.iter().zip(&outcome.records) {
                let previous = heads.get(&part.stream).copied().unwrap_or(Digest::ZERO);
                let digest = new.digest_at(&part.stream, stored.revision, &previous);
                assert_eq!(stored.digest, digest, "{}", new.event_id);
                expected.push(Record {
                    stream: part.stream,
                    revision: stored.revision,
                    position: stored.position,
                    event_id: new.event_id.clone(),
                    kind: new.kind.clone(),
                    occurred_at: new.occurred_at,
                    payload: new.payload.clone(),
                    previous_digest: previous,
                    digest,
                });
                heads.insert(part.stream, digest);
            }
        }
    }
    expected.sort_by_key(|r| r.position);
    let positions: Vec<u64> = expected.iter().map(|r| r.position).collect();
    assert_eq!(positions, (1..=10).collect::<Vec<_>>());
    // From another handle too (for PostgreSQL, other connections).
    for handle in [&j, &fx.open()] {
        assert!(
            all(handle) == expected,
            "read_all differs from what was appended"
        );
        for s in [a, b] {
            let of_stream: Vec<Record> =
                expected.iter().filter(|r| r.stream == s).cloned().collect();
            let read = handle.read_stream(&s, 1, 100).unwrap();
            assert!(
                read == of_stream,
                "read_stream differs from what was appended"
            );
            // From the middle: the first record still chains to its predecessor.
            assert!(handle.read_stream(&s, 2, 2).unwrap() == of_stream[1..3]);
            let last = of_stream.last().unwrap();
            let head = handle.stream_head(&s).unwrap().unwrap();
            assert_eq!(
                (head.revision, head.position, head.digest),
                (last.revision, last.position, last.digest)
            );
        }
        let report = handle.verify().unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!((report.records, report.streams), (10, 2));
    }
}

const ENTRIES: &str = "proj.conf.entries";
const COUNT: &str = "proj.conf.count";

/// Writes each record's position under its event id and counts records; refuses a record whose
/// payload starts with "refuse", after writing.
struct Tally;

impl ProjectionHook for Tally {
    fn name(&self) -> &str {
        "conf.tally"
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        tx.insert(
            ENTRIES,
            record.event_id.as_bytes(),
            &record.position.to_be_bytes(),
        )?;
        let n = tx.get(COUNT, b"records", decode_count)?;
        tx.insert(COUNT, b"records", &(n + 1).to_be_bytes())?;
        if record.payload.starts_with(b"refuse") {
            return Err(HookError::with_code(
                "conf.refused",
                "the payload says refuse",
            ));
        }
        Ok(())
    }
}

fn decode_count(value: Option<&[u8]>) -> u64 {
    value.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()))
}

fn entries(j: &Journal) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    j.projection_scan(ENTRIES, |k, v| {
        out.push((
            String::from_utf8(k.to_vec()).unwrap(),
            u64::from_be_bytes(v.try_into().unwrap()),
        ));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn count(j: &Journal) -> u64 {
    j.projection_get(COUNT, b"records", decode_count).unwrap()
}

fn projection_hook_is_co_transactional(fx: &Fixture) {
    let main = fx.open();
    let threads = 8;
    let handles: Vec<Journal> = (0..threads).map(|_| fx.worker(&main)).collect();
    for h in handles.iter().chain([&main]) {
        h.register_hook(Arc::new(Tally));
    }
    let s = stream("hooked");
    let ok = |id: &str| NewRecord::new(id, "conf.event", Timestamp(3), b"fine".to_vec());
    let refuse = |id: &str| NewRecord::new(id, "conf.event", Timestamp(3), b"refuse".to_vec());
    let first = main
        .append(StreamAppend::new(s, NoStream, vec![ok("h1"), ok("h2")]))
        .unwrap();
    assert_eq!(places(&first), [(1, 1), (2, 2)]);
    assert_eq!(entries(&main), [("h1".to_owned(), 1), ("h2".to_owned(), 2)]);
    assert_eq!(count(&main), 2);
    let before = state(&main, &[s]);
    // The hook wrote for h3 before refusing h4: neither record nor entry stays.
    let refused = main.append(StreamAppend::new(s, Exact(2), vec![ok("h3"), refuse("h4")]));
    match refused {
        Err(AppendError::Hook {
            hook,
            event_id,
            code,
            ..
        }) => assert_eq!(
            (hook.as_str(), event_id.as_str(), code),
            ("conf.tally", "h4", Some("conf.refused"))
        ),
        other => panic!("expected Hook, got {other:?}"),
    }
    assert_eq!(state(&main, &[s]), before);
    assert_eq!(entries(&main).len(), 2);
    assert_eq!(count(&main), 2);
    // Concurrent appends, every other one refused: each refusal aborts only its own append.
    let results: Vec<Result<AppendOutcome, AppendError>> = thread::scope(|scope| {
        let spawned: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(i, h)| {
                scope.spawn(move || {
                    let id = format!("c{i}");
                    let record = if i % 2 == 1 { refuse(&id) } else { ok(&id) };
                    h.append(StreamAppend::new(
                        stream(&format!("hooked-{i}")),
                        NoStream,
                        vec![record],
                    ))
                })
            })
            .collect();
        spawned.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut expected_entries = vec![("h1".to_owned(), 1), ("h2".to_owned(), 2)];
    for (i, result) in results.iter().enumerate() {
        let target = stream(&format!("hooked-{i}"));
        if i % 2 == 1 {
            assert!(
                matches!(result, Err(AppendError::Hook { event_id, .. }) if *event_id == format!("c{i}")),
                "c{i}: {result:?}"
            );
            assert_eq!(main.stream_head(&target).unwrap(), None, "c{i} was written");
        } else {
            let o = result.as_ref().unwrap_or_else(|e| panic!("c{i}: {e}"));
            assert_eq!(o.records[0].revision, 1);
            expected_entries.push((format!("c{i}"), o.records[0].position));
        }
    }
    expected_entries.sort();
    assert_eq!(entries(&main), expected_entries);
    assert_eq!(count(&main), expected_entries.len() as u64);
    assert_eq!(main.head_position().unwrap(), expected_entries.len() as u64);
    // The refused ids stay free, and their records get entries once written.
    let retried = main
        .append(StreamAppend::new(s, Exact(2), vec![ok("h3"), ok("h4")]))
        .unwrap();
    let h4 = retried.records[1].position;
    assert!(entries(&main).contains(&("h4".to_owned(), h4)));
    assert_eq!(count(&main), expected_entries.len() as u64 + 2);
    // A replay is not shown to the hook again.
    main.append(StreamAppend::new(s, Exact(2), vec![ok("h3"), ok("h4")]))
        .unwrap();
    assert_eq!(count(&main), expected_entries.len() as u64 + 2);
    assert_verified(&main, expected_entries.len() as u64 + 2);
}

// ----- 9. atomic visibility of a multi-stream batch -----

fn multi_stream_batch_is_visible_all_or_nothing(fx: &Fixture) {
    let batches = 100 * scale() as u64;
    let (a, b) = (stream("atomic-a"), stream("atomic-b"));
    let writer = fx.open();
    let reader = fx.worker(&writer);
    let done = AtomicBool::new(false);
    let observations = thread::scope(|scope| {
        let (done, reader) = (&done, &reader);
        let watch = scope.spawn(move || {
            let mut observations = 0u64;
            let mut next = 1u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                // Alternate head reads: each must show its stream at least as far as the
                // other stream was at the read before (a batch moves a by 1 and b by 2).
                let ra = head_revision(reader, &a);
                let rb = head_revision(reader, &b);
                let ra2 = head_revision(reader, &a);
                assert_eq!(rb % 2, 0, "b at {rb}: half of a batch's part is visible");
                assert!(rb >= 2 * ra, "a at {ra} visible, then b only at {rb}");
                assert!(2 * ra2 >= rb, "b at {rb} visible, then a only at {ra2}");
                // One snapshot: whole batches of three records (a_i, b_2i-1, b_2i).
                let page = reader.read_all(next, 99).unwrap();
                assert_eq!(
                    page.len() % 3,
                    0,
                    "read_all from {next} returned part of a batch"
                );
                for (k, r) in page.iter().enumerate() {
                    assert_eq!(r.position, next + k as u64);
                    let want = if k % 3 == 0 { a } else { b };
                    assert_eq!(r.stream, want, "position {}", r.position);
                }
                next += page.len() as u64;
                observations += 1;
                if finished && page.is_empty() {
                    return observations;
                }
            }
        });
        for i in 1..=batches {
            let (ea, eb) = if i == 1 {
                (NoStream, NoStream)
            } else {
                (Exact(i - 1), Exact(2 * (i - 1)))
            };
            let (ia, ib1, ib2) = (format!("a{i}"), format!("b{i}.1"), format!("b{i}.2"));
            writer
                .append_batch(vec![
                    StreamAppend::new(a, ea, recs(&[&ia])),
                    StreamAppend::new(b, eb, recs(&[&ib1, &ib2])),
                ])
                .unwrap();
        }
        done.store(true, Ordering::Release);
        watch.join().unwrap()
    });
    assert_eq!(head_revision(&writer, &a), batches);
    assert_eq!(head_revision(&writer, &b), 2 * batches);
    assert_verified(&writer, 3 * batches);
    eprintln!(
        "{:?}: {batches} batches, {observations} observations",
        fx.kind
    );
}

// ----- two handles of one journal -----

fn two_handles_append_concurrently_and_agree(fx: &Fixture) {
    let per_handle = 50 * scale();
    let handles = [fx.open(), fx.open()];
    let both = stream("both");
    let acked: Vec<(Vec<StreamAppend>, Vec<AppendOutcome>)> = thread::scope(|scope| {
        let spawned: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(h, j)| {
                scope.spawn(move || {
                    let own = stream(&format!("handle-{h}"));
                    (0..per_handle)
                        .map(|m| {
                            let ids = [format!("h{h}-{m}-0"), format!("h{h}-{m}-1")];
                            let mut batch =
                                vec![StreamAppend::new(own, Any, recs(&ids[..m % 2 + 1]))];
                            if m % 3 == 0 {
                                let shared = [format!("h{h}-{m}-b")];
                                batch.push(StreamAppend::new(both, Any, recs(&shared)));
                            }
                            let outcomes = j.append_batch(batch.clone()).unwrap();
                            (batch, outcomes)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        spawned
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut positions: HashMap<String, u64> = HashMap::new();
    for (batch, outcomes) in &acked {
        for (part, outcome) in batch.iter().zip(outcomes) {
            for (r, stored) in part.records.iter().zip(&outcome.records) {
                assert!(
                    positions
                        .insert(r.event_id.clone(), stored.position)
                        .is_none()
                );
            }
        }
    }
    let total = positions.len() as u64;
    let [first, second] = &handles;
    let records = all(first);
    assert!(
        all(second) == records,
        "the handles read different journals"
    );
    assert_eq!(records.len() as u64, total);
    let read: HashMap<String, u64> = records
        .iter()
        .map(|r| (r.event_id.clone(), r.position))
        .collect();
    assert_eq!(read, positions);
    let distinct: HashSet<u64> = positions.values().copied().collect();
    assert_eq!(distinct.len() as u64, total);
    for h in &handles {
        assert_eq!(h.head_position().unwrap(), total);
        assert_verified(h, total);
    }
    // Batches of either handle replay through either handle with the original outcome.
    for (i, (batch, outcomes)) in acked.iter().enumerate().step_by(7) {
        let replay = handles[i % 2].append_batch(batch.clone()).unwrap();
        let expected: Vec<AppendOutcome> = outcomes
            .iter()
            .map(|o| AppendOutcome {
                replayed: true,
                ..o.clone()
            })
            .collect();
        assert_eq!(replay, expected);
    }
    drop(handles);
    assert_verified(&fx.open(), total);
}
