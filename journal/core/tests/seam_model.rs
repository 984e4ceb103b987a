//! The storage seam against a reference model (spec/scale-out.md §2).
//!
//! `MemoryBackend` is the simplest correct implementation of the seam: ordered maps behind a
//! mutex, a write transaction that works on a copy and swaps it in on commit. A property test runs
//! the same random operations against the redb journal and a journal on `MemoryBackend`, and the
//! two must be indistinguishable through the core. Then mutants of `MemoryBackend` each break one
//! clause of the contract, and the tests show what the core detects (S6: a backend that skips,
//! repeats or alters a record is detected, never believed) and what it has to trust.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Tests panic on failure by design.
// The seam's callbacks are spelled out as the traits spell them.
#![allow(clippy::type_complexity)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctx_journal::{
    AppendError, AppendOutcome, Backend, CommitError, ExpectedRevision, FailureKind, Finish,
    HeadDecodeError, HookError, HookTxn, IndexFinding, IndexKind, Journal, NewRecord, OpenOptions,
    ProjectionHook, PutRecord, ReadError, ReadTxn, Record, RecordView, StorageError, StreamAppend,
    StreamHead, StreamId, Timestamp, WriteTxn, decode_record_value,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ----- the reference backend -----

/// Everything a memory journal holds.
#[derive(Clone, Default)]
struct State {
    records: BTreeMap<u64, Vec<u8>>,
    heads: BTreeMap<[u8; 32], StreamHead>,
    event_ids: HashMap<String, u64>,
    /// Each stream's positions, by revision − 1.
    streams: HashMap<[u8; 32], Vec<u64>>,
    /// (table, key) → value for every projection table.
    tables: BTreeMap<(String, Vec<u8>), Vec<u8>>,
}

/// The naive backend: a committed `State` behind a mutex. Readers take the current `Arc` (a
/// snapshot that never waits for a writer); a writer works on a copy and swaps it in on commit.
struct MemoryBackend {
    state: Mutex<Arc<State>>,
    /// Serializes write transactions (S1).
    writer: Mutex<()>,
    /// Whether `check_indexes` checks the event-id map and stream positions against the records.
    /// A backend without derived indexes may report nothing (S9).
    check_index: bool,
}

impl MemoryBackend {
    fn new() -> MemoryBackend {
        MemoryBackend {
            state: Mutex::new(Arc::new(State::default())),
            writer: Mutex::new(()),
            check_index: true,
        }
    }

    fn without_index_check() -> MemoryBackend {
        MemoryBackend {
            check_index: false,
            ..MemoryBackend::new()
        }
    }

    fn run_read(
        &self,
        work: &mut dyn FnMut(&mut MemTxn<'_>) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let snapshot = Arc::clone(&self.state.lock().unwrap());
        work(&mut MemTxn {
            state: Cow::Borrowed(&snapshot),
            check_index: self.check_index,
        })
    }

    fn run_write(
        &self,
        work: &mut dyn FnMut(&mut MemTxn<'_>) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError> {
        let _writer = self.writer.lock().unwrap();
        let base = Arc::clone(&self.state.lock().unwrap());
        let mut txn = MemTxn {
            state: Cow::Owned(State::clone(&base)),
            check_index: self.check_index,
        };
        match work(&mut txn) {
            Err(e) => Err(CommitError::NotCommitted(e)),
            Ok(Finish::Abort) => Ok(Finish::Abort),
            Ok(Finish::Commit) => {
                *self.state.lock().unwrap() = Arc::new(txn.state.into_owned());
                Ok(Finish::Commit)
            }
        }
    }
}

impl Backend for MemoryBackend {
    fn location(&self) -> String {
        "memory".to_owned()
    }

    fn fail_stop_on_uncertain_commit(&self) -> bool {
        false
    }

    fn read(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        self.run_read(&mut |txn| work(txn))
    }

    fn write(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError> {
        self.run_write(&mut |txn| work(txn))
    }
}

/// A transaction over a snapshot (`Borrowed`) or over the writer's copy (`Owned`).
struct MemTxn<'s> {
    state: Cow<'s, State>,
    check_index: bool,
}

impl ReadTxn for MemTxn<'_> {
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        Ok(self.state.heads.get(stream.as_bytes()).copied())
    }

    fn last_position(&mut self) -> Result<u64, ReadError> {
        Ok(self.state.records.keys().next_back().copied().unwrap_or(0))
    }

    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let Some(head) = self.state.heads.get(stream.as_bytes()) else {
            return Ok(());
        };
        let positions = self
            .state
            .streams
            .get(stream.as_bytes())
            .map_or(&[][..], Vec::as_slice);
        for revision in from.max(1)..=to.min(head.revision) {
            let position = *positions
                .get(usize::try_from(revision - 1).unwrap())
                .ok_or_else(|| ReadError::Corrupt {
                    position: 0,
                    reason: format!("stream {stream} has no position for revision {revision}"),
                })?;
            let bytes = self
                .state
                .records
                .get(&position)
                .ok_or_else(|| ReadError::Corrupt {
                    position,
                    reason: format!("stream {stream} revision {revision}: the record is missing"),
                })?;
            if f(revision, position, bytes).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError> {
        f(self.state.records.get(&position).map(Vec::as_slice));
        Ok(())
    }

    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        for (position, bytes) in self.state.records.range(from..) {
            if f(*position, bytes).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError> {
        for (stream, head) in &self.state.heads {
            f(stream, Ok(*head));
        }
        Ok(())
    }

    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError> {
        if !self.check_index {
            return Ok(());
        }
        let state = &self.state;
        for (&position, bytes) in &state.records {
            // A record that does not decode is the core's structure finding.
            let Ok(record) = decode_record_value(bytes) else {
                continue;
            };
            let at = |kind, detail: String| IndexFinding {
                kind,
                stream: Some(record.stream),
                revision: Some(record.revision),
                position: Some(position),
                detail,
            };
            let indexed = state.event_ids.get(&record.event_id).copied();
            if indexed != Some(position) {
                finding(at(
                    IndexKind::Event,
                    format!(
                        "event id {} is indexed at {indexed:?}",
                        record.event_id.escape_debug()
                    ),
                ));
            }
            let listed = state
                .streams
                .get(record.stream.as_bytes())
                .and_then(|p| p.get(usize::try_from(record.revision.wrapping_sub(1)).ok()?))
                .copied();
            if listed != Some(position) {
                finding(at(
                    IndexKind::Position,
                    format!("the stream index says {listed:?}"),
                ));
            }
        }
        let listed: usize = state.streams.values().map(Vec::len).sum();
        if state.event_ids.len() != state.records.len() || listed != state.records.len() {
            finding(IndexFinding {
                kind: IndexKind::Event,
                stream: None,
                revision: None,
                position: None,
                detail: format!(
                    "{} event ids and {listed} stream positions for {} records",
                    state.event_ids.len(),
                    state.records.len()
                ),
            });
        }
        Ok(())
    }

    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError> {
        let value = self.state.tables.get(&(table.to_owned(), key.to_vec()));
        f(value.map(Vec::as_slice));
        Ok(())
    }

    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let start = match after {
            Some(after) => Bound::Excluded((table.to_owned(), after.to_vec())),
            None => Bound::Included((table.to_owned(), Vec::new())),
        };
        for ((t, key), value) in self
            .state
            .tables
            .range::<(String, Vec<u8>), _>((start, Bound::Unbounded))
        {
            if t != table || f(key, value).is_break() {
                break;
            }
        }
        Ok(())
    }
}

impl WriteTxn for MemTxn<'_> {
    fn next_position(&mut self) -> Result<u64, ReadError> {
        Ok(self.last_position()? + 1)
    }

    fn find_event(&mut self, event_id: &str) -> Result<Option<u64>, ReadError> {
        Ok(self.state.event_ids.get(event_id).copied())
    }

    fn put_record(&mut self, record: &PutRecord<'_>) -> Result<(), StorageError> {
        let next = self.last_position().map_err(StorageError::new)? + 1;
        let state = self.state.to_mut();
        let key = *record.stream.as_bytes();
        let revision = state.heads.get(&key).map_or(0, |h| h.revision) + 1;
        if record.position != next || record.revision != revision {
            return Err(StorageError::message(format!(
                "put at position {} revision {}, due {next} and {revision}",
                record.position, record.revision
            )));
        }
        state.records.insert(record.position, record.bytes.to_vec());
        state.heads.insert(
            key,
            StreamHead {
                revision: record.revision,
                position: record.position,
                digest: record.digest,
            },
        );
        // Like redb, the map is not a unique constraint: the core decides idempotency.
        state
            .event_ids
            .insert(record.event_id.to_owned(), record.position);
        state.streams.entry(key).or_default().push(record.position);
        Ok(())
    }

    fn kv_put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let tables = &mut self.state.to_mut().tables;
        tables.insert((table.to_owned(), key.to_vec()), value.to_vec());
        Ok(())
    }

    fn kv_remove(&mut self, table: &str, key: &[u8]) -> Result<bool, StorageError> {
        let tables = &mut self.state.to_mut().tables;
        Ok(tables.remove(&(table.to_owned(), key.to_vec())).is_some())
    }

    fn kv_clear(&mut self, table: &str) -> Result<(), StorageError> {
        self.state.to_mut().tables.retain(|(t, _), _| t != table);
        Ok(())
    }
}

// ----- the journals -----

fn options() -> OpenOptions {
    OpenOptions::new().key_source(|| Ok([7; 32]))
}

fn open_memory(dir: &Path, backend: Arc<dyn Backend>) -> Journal {
    Journal::open_with_backend(dir, &options(), backend).unwrap()
}

const TABLE: &str = "proj.model";
const LOG: &str = "proj.model.log";
const REPLAY: &str = "proj.model.replay";

/// A hook that uses every projection operation and refuses payloads starting with "bad" (after
/// writing, so the refusal must roll its writes back).
struct ModelHook;

impl ProjectionHook for ModelHook {
    fn name(&self) -> &str {
        "model"
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let key = record.stream.as_bytes();
        let n = tx.get(TABLE, key, |v| {
            v.and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes)
        })?;
        tx.insert(TABLE, key, &(n + 1).to_le_bytes())?;
        tx.insert(LOG, &record.position.to_be_bytes(), record.payload)?;
        let payload = record.payload;
        if payload.starts_with(b"del") {
            tx.remove(LOG, &(record.position - 1).to_be_bytes())?;
        } else if payload.starts_with(b"scan") {
            let mut entries = 0u64;
            let mut bytes = 0u64;
            tx.scan(LOG, |_, v| {
                entries += 1;
                bytes += v.len() as u64;
                ControlFlow::Continue(())
            })?;
            let mut summary = entries.to_le_bytes().to_vec();
            summary.extend(bytes.to_le_bytes());
            tx.insert(
                TABLE,
                format!("scan{}", record.position).as_bytes(),
                &summary,
            )?;
        } else if payload.starts_with(b"clear") {
            tx.clear(LOG)?;
        } else if payload.starts_with(b"bad") {
            return Err(HookError::with_code(
                "model.bad",
                "the payload starts with bad",
            ));
        }
        Ok(())
    }
}

fn table(journal: &Journal, table: &'static str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    journal
        .projection_scan(table, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

// ----- the reference-model property -----

const STREAMS: usize = 4;
const EVENT_POOL: usize = 400;
const HOT_EVENTS: usize = 8;
const VARIANTS: [&str; 7] = ["ok", "ok", "ok", "bad", "del", "scan", "clear"];

fn stream(i: usize) -> StreamId {
    StreamId::derive("model", &[u8::try_from(i).unwrap()]).unwrap()
}

#[derive(Clone, Debug)]
struct Part {
    stream: usize,
    expected: Expect,
    /// (event id index, payload variant, salt)
    records: Vec<(usize, usize, u8)>,
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Part>),
    /// Resubmits an earlier append, optionally with another payload for its first record (a
    /// conflict) or another expected revision for its first stream (ignored by a replay).
    Repeat {
        back: usize,
        alter: bool,
        expected: Option<Expect>,
    },
    RegisterHook,
    /// A maintenance transaction replaying from `from` into a table, committed or aborted.
    Maintain {
        from: u64,
        commit: bool,
    },
}

/// An expected revision, possibly relative to the stream's head when the operation runs (so
/// that `Exact` appends succeed often enough to build long streams).
#[derive(Clone, Copy, Debug)]
enum Expect {
    Fixed(ExpectedRevision),
    /// `Exact(head + offset)` (`NoStream` when that is 0 or less).
    HeadPlus(i8),
}

fn expected() -> impl Strategy<Value = Expect> {
    prop_oneof![
        4 => Just(Expect::Fixed(ExpectedRevision::Any)),
        1 => Just(Expect::Fixed(ExpectedRevision::NoStream)),
        1 => (1u64..=6).prop_map(|n| Expect::Fixed(ExpectedRevision::Exact(n))),
        3 => prop_oneof![4 => Just(0i8), 1 => Just(-1i8), 1 => Just(1i8)].prop_map(Expect::HeadPlus),
    ]
}

/// Resolves `expected` against `journal`'s current head of `stream`.
fn resolve(journal: &Journal, stream: &StreamId, expected: Expect) -> ExpectedRevision {
    match expected {
        Expect::Fixed(e) => e,
        Expect::HeadPlus(offset) => {
            let head = journal
                .stream_head(stream)
                .unwrap()
                .map_or(0, |h| h.revision);
            match head.checked_add_signed(i64::from(offset)) {
                Some(0) | None => ExpectedRevision::NoStream,
                Some(n) => ExpectedRevision::Exact(n),
            }
        }
    }
}

/// Mostly fresh event ids, some from a small pool that collides across appends.
fn event() -> impl Strategy<Value = usize> {
    prop_oneof![9 => HOT_EVENTS..EVENT_POOL, 1 => 0..HOT_EVENTS]
}

fn op() -> impl Strategy<Value = Op> {
    let body = (
        expected(),
        prop::collection::vec((event(), 0..VARIANTS.len(), 0..2u8), 1..=3),
    );
    let append = (
        prop::sample::subsequence((0..STREAMS).collect::<Vec<_>>(), 1..=3),
        prop::collection::vec(body, 3),
    )
        .prop_map(|(streams, bodies)| {
            Op::Append(
                streams
                    .into_iter()
                    .zip(bodies)
                    .map(|(stream, (expected, records))| Part {
                        stream,
                        expected,
                        records,
                    })
                    .collect(),
            )
        });
    prop_oneof![
        12 => append,
        5 => (any::<usize>(), any::<bool>(), prop::option::of(expected())).prop_map(
            |(back, alter, expected)| Op::Repeat { back, alter, expected }
        ),
        1 => Just(Op::RegisterHook),
        1 => (0u64..12, any::<bool>()).prop_map(|(from, commit)| Op::Maintain { from, commit }),
    ]
}

fn build(journal: &Journal, parts: &[Part]) -> Vec<StreamAppend> {
    parts
        .iter()
        .map(|part| {
            let records = part
                .records
                .iter()
                .map(|&(event, variant, salt)| {
                    NewRecord::new(
                        format!("ev{event}"),
                        "model",
                        Timestamp(i64::try_from(event).unwrap()),
                        format!("{}:{event}:{salt}", VARIANTS[variant]),
                    )
                })
                .collect();
            let s = stream(part.stream);
            StreamAppend::new(s, resolve(journal, &s, part.expected), records)
        })
        .collect()
}

/// How often each outcome happened over the whole run, so the property is not vacuous.
#[derive(Default)]
struct Stats {
    written: AtomicUsize,
    replayed: AtomicUsize,
    conflict: AtomicUsize,
    wrong_revision: AtomicUsize,
    hook: AtomicUsize,
    input: AtomicUsize,
    read: AtomicUsize,
}

impl Stats {
    fn note(&self, result: &Result<Vec<AppendOutcome>, AppendError>) {
        let counter = match result {
            Ok(outcomes) if outcomes.iter().all(|o| o.replayed) => &self.replayed,
            Ok(_) => &self.written,
            Err(AppendError::Conflict { .. }) => &self.conflict,
            Err(AppendError::WrongRevision { .. }) => &self.wrong_revision,
            Err(AppendError::Hook { .. }) => &self.hook,
            Err(AppendError::Input(_)) => &self.input,
            Err(_) => &self.read,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> [(&'static str, usize); 7] {
        let get = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        [
            ("written", get(&self.written)),
            ("replayed", get(&self.replayed)),
            ("conflict", get(&self.conflict)),
            ("wrong revision", get(&self.wrong_revision)),
            ("hook refusal", get(&self.hook)),
            ("input refusal", get(&self.input)),
            ("other error", get(&self.read)),
        ]
    }
}

/// An append's result with errors compared by variant and fields.
fn comparable(
    result: Result<Vec<AppendOutcome>, AppendError>,
) -> Result<Vec<AppendOutcome>, String> {
    result.map_err(|e| format!("{e:?}"))
}

fn maintain(journal: &Journal, from: u64, commit: bool) -> Result<u64, String> {
    journal
        .maintain(|txn| {
            let visited = txn.replay(from, |tx, record| {
                tx.insert(
                    REPLAY,
                    &record.position.to_be_bytes(),
                    record.event_id.as_bytes(),
                )?;
                Ok(())
            })?;
            Ok((visited, commit))
        })
        .map_err(|e| format!("{e:?}"))
}

fn run_case(ops: &[Op], stats: &Stats) -> Result<(), TestCaseError> {
    let redb_dir = tempfile::tempdir().unwrap();
    let memory_dir = tempfile::tempdir().unwrap();
    let redb = Journal::open(redb_dir.path(), &options()).unwrap();
    let memory = open_memory(memory_dir.path(), Arc::new(MemoryBackend::new()));
    let mut history: Vec<Vec<StreamAppend>> = Vec::new();
    for op in ops {
        let batch = match op {
            Op::Append(parts) => build(&redb, parts),
            Op::Repeat {
                back,
                alter,
                expected,
            } => {
                if history.is_empty() {
                    continue;
                }
                let mut batch = history[back % history.len()].clone();
                if *alter {
                    batch[0].records[0].payload.push(b'!');
                }
                if let Some(expected) = expected {
                    batch[0].expected = resolve(&redb, &batch[0].stream, *expected);
                }
                batch
            }
            Op::RegisterHook => {
                prop_assert_eq!(
                    redb.register_hook(Arc::new(ModelHook)),
                    memory.register_hook(Arc::new(ModelHook))
                );
                continue;
            }
            Op::Maintain { from, commit } => {
                prop_assert_eq!(
                    maintain(&redb, *from, *commit),
                    maintain(&memory, *from, *commit)
                );
                continue;
            }
        };
        history.push(batch.clone());
        let on_redb = redb.append_batch(batch.clone());
        let on_memory = memory.append_batch(batch);
        stats.note(&on_redb);
        if let Err(e) = &on_redb {
            prop_assert!(
                matches!(
                    e,
                    AppendError::Conflict { .. }
                        | AppendError::WrongRevision { .. }
                        | AppendError::Hook { .. }
                        | AppendError::Input(_)
                ),
                "unexpected failure: {e}"
            );
        }
        prop_assert_eq!(comparable(on_redb), comparable(on_memory));
        prop_assert_eq!(
            redb.head_position().unwrap(),
            memory.head_position().unwrap()
        );
    }
    let all = redb.read_all(1, usize::MAX).unwrap();
    prop_assert_eq!(&all, &memory.read_all(1, usize::MAX).unwrap());
    prop_assert_eq!(all.len() as u64, redb.head_position().unwrap());
    prop_assert_eq!(
        redb.head_position().unwrap(),
        memory.head_position().unwrap()
    );
    for s in (0..STREAMS).map(stream) {
        prop_assert_eq!(
            redb.stream_head(&s).unwrap(),
            memory.stream_head(&s).unwrap()
        );
        prop_assert_eq!(
            redb.read_stream(&s, 1, usize::MAX).unwrap(),
            memory.read_stream(&s, 1, usize::MAX).unwrap()
        );
        // A read from the middle checks the chain against the record before it.
        prop_assert_eq!(
            redb.read_stream(&s, 2, 2).unwrap(),
            memory.read_stream(&s, 2, 2).unwrap()
        );
    }
    let (on_redb, on_memory) = (redb.verify().unwrap(), memory.verify().unwrap());
    prop_assert!(on_redb.is_ok(), "redb: {:?}", on_redb);
    prop_assert!(on_memory.is_ok(), "memory: {:?}", on_memory);
    prop_assert_eq!(on_redb, on_memory);
    for t in [TABLE, LOG, REPLAY] {
        prop_assert_eq!(table(&redb, t), table(&memory, t));
    }
    Ok(())
}

#[test]
fn redb_and_memory_backends_are_indistinguishable_through_the_core() {
    let cases = std::env::var("CTX_SEAM_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let stats = Stats::default();
    runner
        .run(&prop::collection::vec(op(), 1..60), |ops| {
            run_case(&ops, &stats)
        })
        .unwrap();
    let counts = stats.counts();
    eprintln!("append outcomes over {cases} cases: {counts:?}");
    if cases >= 32 {
        // Every decision of the core was exercised, not just the happy path.
        for (what, n) in &counts[..6] {
            assert!(*n > 0, "no {what} in {cases} cases: {counts:?}");
        }
    }
}

// ----- mutants: one broken clause each -----

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing is broken.
    Honest,
    /// `records()` leaves out this position.
    SkipPosition(u64),
    /// `records()` yields this position twice.
    RepeatPosition(u64),
    /// `record()`, `records()` and `stream_records()` flip the last (payload) byte at this
    /// position.
    FlipPayloadByte(u64),
    /// `stream_records()` hands out another stream's record of the same revision.
    ForeignStreamRecord,
    /// `heads()` reports each stream's previous head (self-consistent, just stale).
    StaleHeads,
    /// `head()` in read transactions reports each stream's previous head.
    StaleHeadOnRead,
    /// `find_event()` always answers `None`.
    ForgetEvents,
}

struct Mutant {
    inner: Arc<MemoryBackend>,
    fault: Fault,
}

impl Backend for Mutant {
    fn location(&self) -> String {
        format!("mutant {:?}", self.fault)
    }

    fn fail_stop_on_uncertain_commit(&self) -> bool {
        false
    }

    fn read(
        &self,
        work: &mut dyn FnMut(&mut dyn ReadTxn) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        self.inner.run_read(&mut |txn| {
            work(&mut FaultyTxn {
                txn,
                fault: self.fault,
                writing: false,
            })
        })
    }

    fn write(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Finish, StorageError>,
    ) -> Result<Finish, CommitError> {
        self.inner.run_write(&mut |txn| {
            work(&mut FaultyTxn {
                txn,
                fault: self.fault,
                writing: true,
            })
        })
    }
}

struct FaultyTxn<'t, 's> {
    txn: &'t mut MemTxn<'s>,
    fault: Fault,
    writing: bool,
}

fn flipped(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    *out.last_mut().unwrap() ^= 0x01;
    out
}

/// The head `stream` had one record earlier, complete with that record's digest.
fn stale(state: &State, stream: &[u8; 32], head: &StreamHead) -> Option<StreamHead> {
    let revision = head.revision.checked_sub(1).filter(|r| *r > 0)?;
    let position = state.streams[stream][usize::try_from(revision - 1).unwrap()];
    let record = decode_record_value(&state.records[&position]).unwrap();
    Some(StreamHead {
        revision,
        position,
        digest: record.digest,
    })
}

impl ReadTxn for FaultyTxn<'_, '_> {
    fn head(&mut self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        let head = self.txn.head(stream)?;
        if let (Fault::StaleHeadOnRead, false, Some(h)) = (self.fault, self.writing, &head) {
            return Ok(stale(&self.txn.state, stream.as_bytes(), h));
        }
        Ok(head)
    }

    fn last_position(&mut self) -> Result<u64, ReadError> {
        self.txn.last_position()
    }

    fn stream_records(
        &mut self,
        stream: &StreamId,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        match self.fault {
            Fault::FlipPayloadByte(bad) => {
                self.txn
                    .stream_records(stream, from, to, &mut |revision, position, bytes| {
                        if position == bad {
                            f(revision, position, &flipped(bytes))
                        } else {
                            f(revision, position, bytes)
                        }
                    })
            }
            Fault::ForeignStreamRecord => {
                let state: &State = &self.txn.state;
                let Some(head) = state.heads.get(stream.as_bytes()) else {
                    return Ok(());
                };
                for revision in from.max(1)..=to.min(head.revision) {
                    let index = usize::try_from(revision - 1).unwrap();
                    let position = state
                        .streams
                        .iter()
                        .filter(|(s, _)| *s != stream.as_bytes())
                        .find_map(|(_, positions)| positions.get(index))
                        .copied()
                        .unwrap_or(state.streams[stream.as_bytes()][index]);
                    if f(revision, position, &state.records[&position]).is_break() {
                        break;
                    }
                }
                Ok(())
            }
            _ => self.txn.stream_records(stream, from, to, f),
        }
    }

    fn record(&mut self, position: u64, f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError> {
        match self.fault {
            Fault::FlipPayloadByte(bad) if bad == position => self
                .txn
                .record(position, &mut |bytes| f(bytes.map(flipped).as_deref())),
            _ => self.txn.record(position, f),
        }
    }

    fn records(
        &mut self,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        let fault = self.fault;
        self.txn.records(from, &mut |position, bytes| match fault {
            Fault::SkipPosition(skip) if skip == position => ControlFlow::Continue(()),
            Fault::RepeatPosition(twice) if twice == position => {
                f(position, bytes)?;
                f(position, bytes)
            }
            Fault::FlipPayloadByte(bad) if bad == position => f(position, &flipped(bytes)),
            _ => f(position, bytes),
        })
    }

    fn heads(
        &mut self,
        f: &mut dyn FnMut(&[u8], Result<StreamHead, HeadDecodeError>),
    ) -> Result<(), ReadError> {
        if !matches!(self.fault, Fault::StaleHeads) {
            return self.txn.heads(f);
        }
        let state: &State = &self.txn.state;
        for (stream, head) in &state.heads {
            f(stream, Ok(stale(state, stream, head).unwrap_or(*head)));
        }
        Ok(())
    }

    fn check_indexes(&mut self, finding: &mut dyn FnMut(IndexFinding)) -> Result<(), ReadError> {
        self.txn.check_indexes(finding)
    }

    fn kv_get(
        &mut self,
        table: &str,
        key: &[u8],
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), ReadError> {
        self.txn.kv_get(table, key, f)
    }

    fn kv_scan(
        &mut self,
        table: &str,
        after: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        self.txn.kv_scan(table, after, f)
    }
}

impl WriteTxn for FaultyTxn<'_, '_> {
    fn next_position(&mut self) -> Result<u64, ReadError> {
        self.txn.next_position()
    }

    fn find_event(&mut self, event_id: &str) -> Result<Option<u64>, ReadError> {
        match self.fault {
            Fault::ForgetEvents => Ok(None),
            _ => self.txn.find_event(event_id),
        }
    }

    fn put_record(&mut self, record: &PutRecord<'_>) -> Result<(), StorageError> {
        self.txn.put_record(record)
    }

    fn kv_put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        self.txn.kv_put(table, key, value)
    }

    fn kv_remove(&mut self, table: &str, key: &[u8]) -> Result<bool, StorageError> {
        self.txn.kv_remove(table, key)
    }

    fn kv_clear(&mut self, table: &str) -> Result<(), StorageError> {
        self.txn.kv_clear(table)
    }
}

/// A memory journal holding stream a (revisions 1–3 at positions 1–3, revision 4 at position 7)
/// and stream b (revisions 1–3 at positions 4–6), verified clean, and a way to open the same
/// records through a mutant.
struct Seeded {
    dir: tempfile::TempDir,
    inner: Arc<MemoryBackend>,
    honest: Journal,
    a: StreamId,
    b: StreamId,
}

fn rec(id: &str) -> NewRecord {
    NewRecord::new(id, "model", Timestamp(1), format!("payload of {id}"))
}

fn seeded(inner: MemoryBackend) -> Seeded {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(inner);
    let honest = open_memory(dir.path(), inner.clone());
    let (a, b) = (stream(0), stream(1));
    honest
        .append_batch(vec![
            StreamAppend::new(
                a,
                ExpectedRevision::NoStream,
                vec![rec("a1"), rec("a2"), rec("a3")],
            ),
            StreamAppend::new(
                b,
                ExpectedRevision::NoStream,
                vec![rec("b1"), rec("b2"), rec("b3")],
            ),
        ])
        .unwrap();
    honest
        .append(StreamAppend::new(
            a,
            ExpectedRevision::Exact(3),
            vec![rec("a4")],
        ))
        .unwrap();
    let report = honest.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(honest.head_position().unwrap(), 7);
    Seeded {
        dir,
        inner,
        honest,
        a,
        b,
    }
}

impl Seeded {
    fn through(&self, fault: Fault) -> Journal {
        open_memory(
            self.dir.path(),
            Arc::new(Mutant {
                inner: self.inner.clone(),
                fault,
            }),
        )
    }
}

fn kinds(journal: &Journal) -> Vec<FailureKind> {
    journal
        .verify()
        .unwrap()
        .failures
        .iter()
        .map(|f| f.kind)
        .collect()
}

fn event_ids(records: &[Record]) -> Vec<&str> {
    records.iter().map(|r| r.event_id.as_str()).collect()
}

#[test]
fn the_memory_backend_passes_the_journal_basics() {
    let s = seeded(MemoryBackend::new());
    let replay = s
        .honest
        .append(StreamAppend::new(
            s.b,
            ExpectedRevision::Exact(1),
            vec![rec("b1"), rec("b2")],
        ))
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(
        replay
            .records
            .iter()
            .map(|r| r.position)
            .collect::<Vec<_>>(),
        [4, 5]
    );
    let all = s.honest.read_all(1, usize::MAX).unwrap();
    assert_eq!(event_ids(&all), ["a1", "a2", "a3", "b1", "b2", "b3", "a4"]);
    // A second handle on the same backend and directory sees the same journal.
    let other = s.through(Fault::Honest);
    assert_eq!(other.read_all(1, usize::MAX).unwrap(), all);
}

/// S6, (a): a record left out of `records()` is a gap, in reads and in verify.
#[test]
fn a_backend_that_skips_a_record_is_detected() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::SkipPosition(4));
    let err = j.read_all(1, usize::MAX).unwrap_err();
    assert!(
        matches!(&err, ReadError::Corrupt { position: 4, reason } if reason == "positions jump from 3 to 5"),
        "{err:?}"
    );
    let err = j.scan(1, |_| ControlFlow::Continue(())).unwrap_err();
    assert!(
        matches!(err, ReadError::Corrupt { position: 4, .. }),
        "{err:?}"
    );
    let report = j.verify().unwrap();
    let gap = report
        .first(FailureKind::PositionGap)
        .expect("a position gap");
    assert_eq!(gap.position, Some(4));
    assert_eq!(gap.detail, "expected position 4, found 5");
    // Stream b's chain now starts at revision 2, which verify also names.
    assert!(
        report.first(FailureKind::RevisionGap).is_some(),
        "{report:?}"
    );
    // Reads by stream go through `stream_records`, which this mutant leaves alone.
    assert_eq!(j.read_stream(&s.b, 1, 10).unwrap().len(), 3);
}

/// S6, (a'): a record left out at the END of `records()` would look like a journal one record
/// shorter; `scan`/`read_all` compare against `last_position()` of the same snapshot, and verify
/// notices through the stream head that names the missing record.
#[test]
fn a_backend_that_skips_the_last_record_is_detected() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::SkipPosition(7));
    assert_eq!(j.head_position().unwrap(), 7);
    let err = j.read_all(1, usize::MAX).unwrap_err();
    assert!(
        matches!(&err, ReadError::Corrupt { position: 7, reason }
            if reason == "the records end at position 6, but the journal's last position is 7"),
        "{err:?}"
    );
    assert!(j.scan(1, |_| ControlFlow::Continue(())).is_err());
    // A reader that stops early never reaches the missing tail and is not refused.
    assert_eq!(j.read_all(1, 3).unwrap().len(), 3);
    assert_eq!(kinds(&j), [FailureKind::HeadMismatch]);
}

/// S6: a record yielded twice by `records()` is detected.
#[test]
fn a_backend_that_repeats_a_record_is_detected() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::RepeatPosition(3));
    let err = j.read_all(1, usize::MAX).unwrap_err();
    assert!(
        matches!(&err, ReadError::Corrupt { position: 4, reason } if reason == "positions jump from 3 to 3"),
        "{err:?}"
    );
    let report = j.verify().unwrap();
    assert_eq!(
        report.first(FailureKind::PositionGap).unwrap().position,
        Some(4)
    );
}

/// S6, (b): altered bytes fail authentication on every read path, in verify, and when an append
/// needs the record to decide idempotency (the append is refused, never replayed or written).
#[test]
fn a_backend_that_alters_a_record_is_detected() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::FlipPayloadByte(2));
    let digest = "the record digest does not match its content";
    let err = j.read_stream(&s.a, 1, 10).unwrap_err();
    assert!(
        matches!(err, ReadError::AuthenticationFailed { revision: 2, position: 2, reason, .. } if reason == digest),
        "{err:?}"
    );
    let err = j.read_all(1, usize::MAX).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::AuthenticationFailed {
                revision: 2,
                position: 2,
                ..
            }
        ),
        "{err:?}"
    );
    // A read from revision 3 still checks its chain link to revision 2, so it fails too.
    assert!(j.read_stream(&s.a, 3, 10).is_err());
    let report = j.verify().unwrap();
    let auth = report.first(FailureKind::Authentication).unwrap();
    assert_eq!((auth.position, auth.detail.as_str()), (Some(2), digest));
    // The same event id again: the core reads position 2 to compare contents, and refuses.
    let err = j
        .append(StreamAppend::new(
            s.a,
            ExpectedRevision::Any,
            vec![rec("a2")],
        ))
        .unwrap_err();
    assert!(
        matches!(
            err,
            AppendError::Read(ReadError::AuthenticationFailed { position: 2, .. })
        ),
        "{err:?}"
    );
    // Nothing was written, and the honest view of the records is unchanged.
    assert_eq!(s.honest.head_position().unwrap(), 7);
    assert!(s.honest.verify().unwrap().is_ok());
}

/// S6, (c): a record of another stream handed out by `stream_records` names another place.
#[test]
fn a_backend_that_hands_out_another_streams_record_is_detected() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::ForeignStreamRecord);
    for stream in [s.a, s.b] {
        let err = j.read_stream(&stream, 1, 10).unwrap_err();
        assert!(
            matches!(err, ReadError::AuthenticationFailed { revision: 1, reason, .. }
                if reason == "the record's header names another place in the journal"),
            "{err:?}"
        );
    }
    // Stream a's revision 4 has no counterpart in b, so a read from there gets its own record,
    // but its chain link to revision 3 is read (and refused) first.
    assert!(j.read_stream(&s.a, 4, 10).is_err());
    // Verify walks `records()` and never `stream_records()`: a lying stream index is caught on
    // read, and by verify only through the backend's own `check_indexes` (which this mutant, whose
    // stored maps are right, passes).
    assert!(j.verify().unwrap().is_ok());
}

/// (d): a stale head from `heads()` is a head mismatch in verify.
#[test]
fn a_backend_with_stale_heads_is_detected_by_verify() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::StaleHeads);
    let report = j.verify().unwrap();
    let mismatch = report.first(FailureKind::HeadMismatch).unwrap();
    assert_eq!(mismatch.count, 2, "{report:?}");
    assert_eq!(report.failures.len(), 1, "{report:?}");
}

/// (d'): a stale head from `head()` is trusted. Reads by stream stop at the head, so the newest
/// record is silently missing, and verify (which reads `heads()`) sees nothing wrong.
#[test]
fn a_backend_with_a_stale_head_on_read_is_trusted() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::StaleHeadOnRead);
    assert_eq!(j.stream_head(&s.a).unwrap().unwrap().revision, 3);
    let records = j.read_stream(&s.a, 1, 10).unwrap();
    assert_eq!(
        event_ids(&records),
        ["a1", "a2", "a3"],
        "a4 is silently missing"
    );
    assert!(j.verify().unwrap().is_ok());
}

/// (e): `find_event` that forgets ids. The core trusts this clause (S5): idempotency is decided
/// from `find_event` alone, so a retry is written a second time, and a reused id with other
/// content is written instead of refused as a conflict. Reads authenticate each copy (each is a
/// correctly sealed record); the core's verification pass finds the duplicates (event ids are
/// unique), and so does the backend's own `check_indexes`.
#[test]
fn a_backend_that_forgets_event_ids_writes_duplicates() {
    let s = seeded(MemoryBackend::new());
    let j = s.through(Fault::ForgetEvents);
    let retry = j
        .append(StreamAppend::new(
            s.a,
            ExpectedRevision::Any,
            vec![rec("a1")],
        ))
        .unwrap();
    assert!(!retry.replayed, "a retry is written, not replayed");
    assert_eq!(
        (retry.records[0].revision, retry.records[0].position),
        (5, 8)
    );
    let other = NewRecord::new("b2", "model", Timestamp(1), "other content");
    let reuse = j
        .append(StreamAppend::new(s.b, ExpectedRevision::Any, vec![other]))
        .unwrap();
    assert_eq!(reuse.records[0].position, 9, "no conflict: written");
    let all = j.read_all(1, usize::MAX).unwrap();
    assert_eq!(
        event_ids(&all),
        ["a1", "a2", "a3", "b1", "b2", "b3", "a4", "a1", "b2"]
    );
    assert_eq!(s.honest.read_all(1, usize::MAX).unwrap(), all);
    // The core's pass names the first duplicate (a1 again at position 8); with the backend's
    // event-index findings (two records whose ids the map sends elsewhere, and 7 ids for 9
    // records) there are five.
    let report = j.verify().unwrap();
    assert_eq!(kinds(&j), [FailureKind::EventIndex], "{report:?}");
    let event = report.first(FailureKind::EventIndex).unwrap();
    assert_eq!((event.position, event.count), (Some(8), 5), "{report:?}");
    assert_eq!(
        event.detail, "event id a1 is stored twice, at positions 1 and 8",
        "{report:?}"
    );
}

/// (e'): the same mutant on a backend whose `check_indexes` reports nothing, which S9 allows for
/// a backend without derived indexes: the core's verification pass still finds the duplicate
/// event id.
#[test]
fn a_duplicate_event_id_is_found_by_the_cores_verify() {
    let s = seeded(MemoryBackend::without_index_check());
    let j = s.through(Fault::ForgetEvents);
    let retry = j
        .append(StreamAppend::new(
            s.a,
            ExpectedRevision::Any,
            vec![rec("a1")],
        ))
        .unwrap();
    assert!(!retry.replayed);
    let all = s.honest.read_all(1, usize::MAX).unwrap();
    let copies = all.iter().filter(|r| r.event_id == "a1").count();
    assert_eq!(copies, 2, "the event id is stored twice");
    let report = s.honest.verify().unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    let event = report.first(FailureKind::EventIndex).unwrap();
    assert_eq!(
        (event.position, event.detail.as_str()),
        (Some(8), "event id a1 is stored twice, at positions 1 and 8"),
        "{report:?}"
    );
    // And the honest handle now answers a retry of a1 from the later copy (the map was
    // overwritten): the original result is no longer what the caller gets.
    let again = s
        .honest
        .append(StreamAppend::new(
            s.a,
            ExpectedRevision::Any,
            vec![rec("a1")],
        ))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.records[0].position, 8, "not the original position 1");
}
