//! Model-based property test: random sequences of appends (good and bad expected revisions,
//! idempotent retries, conflicting duplicates, multi-stream batches), reads and reopens, each step
//! checked against a plain in-memory model of what the journal must hold.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use ctx_journal::{
    AppendError, AppendOutcome, AppendedRecord, Digest, ExpectedRevision, InputError, Journal,
    NewRecord, Record, StreamAppend, StreamId, Timestamp,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::support;

/// How often each kind of step happened over the whole run, to show the generator reaches them.
static COUNTS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const WRITTEN: usize = 0;
const REPLAYED: usize = 1;
const CONFLICT: usize = 2;
const WRONG_REVISION: usize = 3;
const INPUT: usize = 4;
const REOPEN: usize = 5;
const BATCH_WRITTEN: usize = 6;
const RETRY: usize = 7;
const COUNT_NAMES: [&str; 8] = [
    "written",
    "replayed",
    "conflict",
    "wrong revision",
    "input error",
    "reopen",
    "batch written",
    "retry",
];

fn count(what: usize) {
    COUNTS[what].fetch_add(1, Ordering::Relaxed);
}

const STREAMS: u8 = 4;
const EVENT_IDS: u8 = 24;

/// How an append states its expectation; resolved against the model's head when the step runs.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Any,
    NoStream,
    /// The right revision (NoStream for a stream that does not exist yet).
    Head,
    /// A wrong revision, off from the head by this much (never 0, never the head).
    Off(i8),
    /// Exact(0), which is not a revision.
    Zero,
}

/// A record by event id number and content variant: variant 0 is the id's canonical content;
/// 1, 2 and 3 differ from it in payload, kind and timestamp respectively.
#[derive(Debug, Clone, Copy)]
struct Rec {
    id: u8,
    variant: u8,
}

#[derive(Debug, Clone)]
struct Part {
    stream: u8,
    expect: Expect,
    records: Vec<Rec>,
}

#[derive(Debug, Clone)]
enum Op {
    Append(Part),
    Batch(Vec<Part>),
    ReadStream {
        stream: u8,
        from: u64,
        max: usize,
    },
    ReadAll {
        from: u64,
        max: usize,
    },
    Heads,
    Reopen,
    /// Sends an earlier append or batch again, exactly as it was sent (expected revisions too).
    Retry(prop::sample::Index),
}

fn new_record(rec: Rec) -> NewRecord {
    let id = rec.id;
    let kind = if rec.variant == 2 {
        "model.other-kind"
    } else {
        "model.kind"
    };
    let at = 1_700_000_000_000_000 + i64::from(id) * 1_000 + i64::from(rec.variant == 3);
    let mut payload = format!("payload of ev-{id};").into_bytes();
    payload.extend(std::iter::repeat_n(id, usize::from(id) * 37));
    if rec.variant == 1 {
        payload.push(b'!');
    }
    NewRecord::new(format!("ev-{id}"), kind, Timestamp(at), payload)
}

fn stream_id(index: usize) -> StreamId {
    support::stream(&format!("model-{index}"))
}

/// An append request as sent: per part, the stream index, expected revision and records.
type Request = Vec<(usize, ExpectedRevision, Vec<NewRecord>)>;

struct ModelRecord {
    stream: usize,
    revision: u64,
    position: u64,
    digest: Digest,
    record: NewRecord,
}

#[derive(Default)]
struct Model {
    /// Every record in global order: index = position - 1.
    records: Vec<ModelRecord>,
    /// Per stream, the indexes into `records` of its revisions: index = revision - 1.
    streams: Vec<Vec<usize>>,
    /// Event id -> index into `records`.
    ids: HashMap<String, usize>,
}

/// What the model says one stream part of an append must do.
enum PartPlan {
    Replay(Vec<usize>),
    Write,
}

/// What the model says a whole append must do.
enum Expected {
    /// Any of these input errors (several may apply at once); nothing is written.
    Input(Vec<InputError>),
    /// Any of these refusals (one per failing part); nothing is written.
    Refused(Vec<Refusal>),
    Ok(Vec<PartPlan>),
}

#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    WrongRevision {
        stream: StreamId,
        expected: ExpectedRevision,
        current: u64,
    },
    Conflict {
        event_id: String,
        stream: StreamId,
        revision: u64,
    },
}

impl Model {
    fn new() -> Model {
        Model {
            streams: vec![Vec::new(); usize::from(STREAMS)],
            ..Model::default()
        }
    }

    fn head(&self, stream: usize) -> u64 {
        self.streams[stream].len() as u64
    }

    fn resolve(&self, stream: usize, expect: Expect) -> ExpectedRevision {
        let head = self.head(stream);
        match expect {
            Expect::Any => ExpectedRevision::Any,
            Expect::NoStream => ExpectedRevision::NoStream,
            Expect::Head if head == 0 => ExpectedRevision::NoStream,
            Expect::Head => ExpectedRevision::Exact(head),
            Expect::Off(d) => {
                let off = head as i64 + i64::from(d);
                if off >= 1 && off as u64 != head {
                    ExpectedRevision::Exact(off as u64)
                } else {
                    ExpectedRevision::Exact(head + 1 + u64::from(d.unsigned_abs()))
                }
            }
            Expect::Zero => ExpectedRevision::Exact(0),
        }
    }

    fn expect(&self, parts: &Request) -> Expected {
        let mut input = Vec::new();
        let mut seen_streams = Vec::new();
        let mut seen_ids: Vec<&str> = Vec::new();
        for (stream, expected, records) in parts {
            let id = stream_id(*stream);
            if seen_streams.contains(stream) {
                input.push(InputError::DuplicateStream { stream: id });
            }
            seen_streams.push(*stream);
            if *expected == ExpectedRevision::Exact(0) {
                input.push(InputError::ExactZero { stream: id });
            }
            for r in records {
                if seen_ids.contains(&r.event_id.as_str()) {
                    input.push(InputError::DuplicateEventId {
                        event_id: r.event_id.clone(),
                    });
                }
                seen_ids.push(&r.event_id);
            }
        }
        if !input.is_empty() {
            return Expected::Input(input);
        }
        let mut refusals = Vec::new();
        let mut plans = Vec::new();
        for (stream, expected, records) in parts {
            let known: Vec<Option<usize>> = records
                .iter()
                .map(|r| self.ids.get(&r.event_id).copied())
                .collect();
            if known.iter().any(Option::is_some) {
                // A part that names stored event ids is a retry only when every one of its records
                // is stored, in this stream, with identical content. Otherwise the conflict may
                // name any stored record that breaks the retry: one with other content, or (when
                // some records are new) any stored one.
                let partial = known.iter().any(Option::is_none);
                let conflicts: Vec<Refusal> = records
                    .iter()
                    .zip(&known)
                    .filter_map(|(r, k)| k.map(|k| (r, &self.records[k])))
                    .filter(|(r, stored)| {
                        partial || stored.stream != *stream || stored.record != **r
                    })
                    .map(|(_, stored)| Refusal::Conflict {
                        event_id: stored.record.event_id.clone(),
                        stream: stream_id(stored.stream),
                        revision: stored.revision,
                    })
                    .collect();
                if conflicts.is_empty() {
                    plans.push(PartPlan::Replay(known.into_iter().flatten().collect()));
                } else {
                    refusals.extend(conflicts);
                }
                continue;
            }
            let current = self.head(*stream);
            let ok = match expected {
                ExpectedRevision::Any => true,
                ExpectedRevision::NoStream => current == 0,
                ExpectedRevision::Exact(n) => current == *n,
            };
            if ok {
                plans.push(PartPlan::Write);
            } else {
                refusals.push(Refusal::WrongRevision {
                    stream: stream_id(*stream),
                    expected: *expected,
                    current,
                });
            }
        }
        if refusals.is_empty() {
            Expected::Ok(plans)
        } else {
            Expected::Refused(refusals)
        }
    }

    fn appended(&self, index: usize) -> AppendedRecord {
        let r = &self.records[index];
        AppendedRecord {
            revision: r.revision,
            position: r.position,
            digest: r.digest,
        }
    }
}

struct Harness {
    dir: tempfile::TempDir,
    journal: Option<Journal>,
    model: Model,
    /// Every append and batch sent so far (whatever its result), for `Op::Retry`.
    sent: Vec<(Request, bool)>,
}

impl Harness {
    fn journal(&self) -> &Journal {
        self.journal.as_ref().unwrap()
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Append(part) => self.send(vec![part.clone()], false),
            Op::Batch(parts) => self.send(parts.clone(), true),
            Op::Retry(index) => {
                if !self.sent.is_empty() {
                    let (request, batch) = self.sent[index.index(self.sent.len())].clone();
                    count(RETRY);
                    self.append(&request, batch);
                }
            }
            Op::ReadStream { stream, from, max } => {
                let s = usize::from(*stream);
                let got = self
                    .journal()
                    .read_stream(&stream_id(s), *from, *max)
                    .unwrap();
                let first = (*from).max(1);
                let want: Vec<usize> = self.model.streams[s]
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| {
                        let revision = *i as u64 + 1;
                        revision >= first && revision < first.saturating_add(*max as u64)
                    })
                    .map(|(_, index)| *index)
                    .collect();
                self.check_records(&got, &want);
            }
            Op::ReadAll { from, max } => {
                let got = self.journal().read_all(*from, *max).unwrap();
                let first = (*from).max(1) as usize;
                let want: Vec<usize> = (first - 1..self.model.records.len()).take(*max).collect();
                self.check_records(&got, &want);
            }
            Op::Heads => {} // the full check after every step reads every head
            Op::Reopen => {
                count(REOPEN);
                self.reopen();
            }
        }
        self.check_all();
    }

    fn send(&mut self, parts: Vec<Part>, batch: bool) {
        let resolved: Request = parts
            .iter()
            .map(|p| {
                let s = usize::from(p.stream);
                (
                    s,
                    self.model.resolve(s, p.expect),
                    p.records.iter().map(|r| new_record(*r)).collect(),
                )
            })
            .collect();
        self.append(&resolved, batch);
        self.sent.push((resolved, batch));
    }

    fn append(&mut self, resolved: &Request, batch: bool) {
        let expected = self.model.expect(resolved);
        let request: Vec<StreamAppend> = resolved
            .iter()
            .map(|(s, e, r)| StreamAppend::new(stream_id(*s), *e, r.clone()))
            .collect();
        let before = self.model.records.len();
        let result = if batch {
            self.journal().append_batch(request)
        } else {
            self.journal()
                .append(request.into_iter().next().unwrap())
                .map(|o| vec![o])
        };
        match (expected, result) {
            (Expected::Input(options), Err(AppendError::Input(e))) => {
                count(INPUT);
                assert!(
                    options.contains(&e),
                    "input error {e:?}, expected one of {options:?}"
                );
            }
            (Expected::Refused(options), Err(e)) => {
                let got = match e {
                    AppendError::WrongRevision {
                        stream,
                        expected,
                        current,
                    } => {
                        count(WRONG_REVISION);
                        Refusal::WrongRevision {
                            stream,
                            expected,
                            current,
                        }
                    }
                    AppendError::Conflict {
                        event_id,
                        stream,
                        revision,
                        ..
                    } => {
                        count(CONFLICT);
                        Refusal::Conflict {
                            event_id,
                            stream,
                            revision,
                        }
                    }
                    other => panic!("append failed with {other:?}, expected one of {options:?}"),
                };
                assert!(
                    options.contains(&got),
                    "refusal {got:?}, expected one of {options:?}"
                );
            }
            (Expected::Ok(plans), Ok(outcomes)) => {
                assert_eq!(outcomes.len(), plans.len(), "one outcome per stream part");
                let mut next_position = before as u64 + 1;
                for ((plan, outcome), (s, _, records)) in plans.iter().zip(&outcomes).zip(resolved)
                {
                    assert_eq!(outcome.stream, stream_id(*s));
                    match plan {
                        PartPlan::Replay(indexes) => {
                            count(REPLAYED);
                            let want: Vec<AppendedRecord> =
                                indexes.iter().map(|i| self.model.appended(*i)).collect();
                            assert!(outcome.replayed, "a retry of stored records is a replay");
                            assert_eq!(
                                outcome.records, want,
                                "a replay returns the original result"
                            );
                        }
                        PartPlan::Write => {
                            count(if batch { BATCH_WRITTEN } else { WRITTEN });
                            self.apply_write(*s, records, outcome, &mut next_position);
                        }
                    }
                }
            }
            (Expected::Input(options), other) => {
                panic!("append returned {other:?}, expected an input error, one of {options:?}")
            }
            (Expected::Refused(options), Ok(o)) => {
                panic!("append succeeded with {o:?}, expected one of {options:?}")
            }
            (Expected::Ok(_), Err(e)) => panic!("append failed with {e:?}, expected success"),
        }
    }

    fn apply_write(
        &mut self,
        stream: usize,
        records: &[NewRecord],
        outcome: &AppendOutcome,
        next_position: &mut u64,
    ) {
        assert!(!outcome.replayed, "new records are not a replay");
        assert_eq!(outcome.records.len(), records.len());
        for (record, appended) in records.iter().zip(&outcome.records) {
            let revision = self.model.head(stream) + 1;
            assert_eq!(appended.revision, revision, "revisions are contiguous");
            assert_eq!(appended.position, *next_position, "positions are gap-free");
            assert_ne!(appended.digest, Digest::ZERO);
            assert!(
                self.model
                    .records
                    .iter()
                    .all(|r| r.digest != appended.digest),
                "two records share digest {}",
                appended.digest
            );
            let index = self.model.records.len();
            self.model.records.push(ModelRecord {
                stream,
                revision,
                position: *next_position,
                digest: appended.digest,
                record: record.clone(),
            });
            self.model.streams[stream].push(index);
            self.model.ids.insert(record.event_id.clone(), index);
            *next_position += 1;
        }
    }

    /// Compares records read back with the model's records at `indexes`, in order.
    fn check_records(&self, got: &[Record], indexes: &[usize]) {
        assert_eq!(got.len(), indexes.len(), "number of records read");
        for (record, index) in got.iter().zip(indexes) {
            let m = &self.model.records[*index];
            let previous = if m.revision == 1 {
                Digest::ZERO
            } else {
                self.model.records[self.model.streams[m.stream][m.revision as usize - 2]].digest
            };
            let want = Record {
                stream: stream_id(m.stream),
                revision: m.revision,
                position: m.position,
                event_id: m.record.event_id.clone(),
                kind: m.record.kind.clone(),
                occurred_at: m.record.occurred_at,
                payload: m.record.payload.clone(),
                previous_digest: previous,
                digest: m.digest,
            };
            assert_eq!(*record, want);
        }
    }

    fn check_all(&self) {
        let j = self.journal();
        assert_eq!(j.head_position().unwrap(), self.model.records.len() as u64);
        for s in 0..usize::from(STREAMS) {
            let head = j.stream_head(&stream_id(s)).unwrap();
            match self.model.streams[s].last() {
                None => assert_eq!(head, None, "stream {s} has no records"),
                Some(index) => {
                    let m = &self.model.records[*index];
                    let head = head.unwrap();
                    assert_eq!(
                        (head.revision, head.position, head.digest),
                        (m.revision, m.position, m.digest),
                        "head of stream {s}"
                    );
                }
            }
        }
        let all = j.read_all(0, usize::MAX).unwrap();
        let indexes: Vec<usize> = (0..self.model.records.len()).collect();
        self.check_records(&all, &indexes);
    }

    fn check_verify(&self) {
        let report = self.journal().verify().unwrap();
        assert!(report.is_ok(), "verify: {report:?}");
        assert_eq!(report.records, self.model.records.len() as u64);
        let streams = self.model.streams.iter().filter(|s| !s.is_empty()).count();
        assert_eq!(report.streams, streams as u64);
    }

    fn reopen(&mut self) {
        drop(self.journal.take());
        self.journal = Some(support::open(self.dir.path()));
        self.check_verify();
    }
}

fn open_fresh(dir: &Path) -> Journal {
    support::open(dir)
}

fn rec() -> impl Strategy<Value = Rec> {
    (0..EVENT_IDS, prop_oneof![10 => Just(0u8), 1 => 1..4u8])
        .prop_map(|(id, variant)| Rec { id, variant })
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        4 => Just(Expect::Any),
        2 => Just(Expect::NoStream),
        6 => Just(Expect::Head),
        2 => prop::sample::select(vec![-2i8, -1, 1, 2, 7]).prop_map(Expect::Off),
        1 => Just(Expect::Zero),
    ]
}

fn part() -> impl Strategy<Value = Part> {
    (0..STREAMS, expect(), prop::collection::vec(rec(), 1..=2)).prop_map(
        |(stream, expect, records)| Part {
            stream,
            expect,
            records,
        },
    )
}

/// Two or three parts, mostly for distinct streams (sometimes one stream twice: an input error).
fn batch() -> impl Strategy<Value = Vec<Part>> {
    let streams: Vec<u8> = (0..STREAMS).collect();
    prop_oneof![
        6 => (
            prop::sample::subsequence(streams, 2..=3).prop_shuffle(),
            prop::collection::vec(part(), 3),
        )
            .prop_map(|(streams, parts)| {
                streams
                    .into_iter()
                    .zip(parts)
                    .map(|(stream, part)| Part { stream, ..part })
                    .collect()
            }),
        1 => prop::collection::vec(part(), 2..=3),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => part().prop_map(Op::Append),
        4 => batch().prop_map(Op::Batch),
        3 => any::<prop::sample::Index>().prop_map(Op::Retry),
        2 => (0..STREAMS, 0..8u64, 0..8usize)
            .prop_map(|(stream, from, max)| Op::ReadStream { stream, from, max }),
        2 => (0..24u64, 0..24usize).prop_map(|(from, max)| Op::ReadAll { from, max }),
        1 => Just(Op::Heads),
        1 => Just(Op::Reopen),
    ]
}

fn cases() -> u32 {
    std::env::var("CTX_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

#[test]
fn journal_matches_model() {
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(op(), 1..64);
    let started = std::time::Instant::now();
    runner
        .run(&strategy, |ops| {
            // Taken per case, so a fail-point test waiting for the lock gets in between cases.
            let _shared = support::shared();
            let dir = support::tempdir();
            let journal = open_fresh(dir.path());
            let mut h = Harness {
                dir,
                journal: Some(journal),
                model: Model::new(),
                sent: Vec::new(),
            };
            h.check_all();
            for op in &ops {
                h.run(op);
            }
            h.check_verify();
            h.reopen();
            h.check_all();
            Ok(())
        })
        .unwrap();
    let counts: Vec<u64> = COUNTS.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    eprintln!(
        "journal_matches_model: {} cases in {:?}; steps: {:?}",
        cases(),
        started.elapsed(),
        COUNT_NAMES.iter().zip(&counts).collect::<Vec<_>>()
    );
    if cases() >= 32 {
        for (name, n) in COUNT_NAMES.iter().zip(&counts) {
            assert!(*n > 0, "no step of kind \"{name}\" in {} cases", cases());
        }
    }
}
