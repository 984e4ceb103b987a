//! The `journal_ops` target: an arbitrary program of appends (single and multi-stream, with
//! expected revisions, duplicate and conflicting event ids from a tiny pool), retries, reads,
//! verifications and reopens against a real journal in a temporary directory. After every step
//! the journal is compared with a tiny in-memory model: revisions are contiguous, positions are
//! gap-free, replays return the original result, refusals are typed and match the model exactly,
//! and `verify()` is clean.
//!
//! Iterations are kept cheap: at most [`MAX_OPS`] steps, small payloads, one directory per process
//! (under `/dev/shm` when it exists, else the temp dir; `CTX_FUZZ_TMPDIR` overrides) emptied before
//! and after each run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use arbitrary::Arbitrary;
use ctx_journal::{
    AppendError, AppendOutcome, BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX,
    Digest, EVENT_ID_MAX_BYTES, ExpectedRevision, InputError, Journal, KIND_MAX_BYTES, NewRecord,
    OpenOptions, PAYLOAD_MAX_BYTES, Record, StreamAppend, StreamId, Timestamp,
};

/// Most steps run per program; the rest of a longer program is ignored.
pub const MAX_OPS: usize = 12;
/// Most stream parts in one append (more than [`STREAMS`], so duplicate streams happen).
pub const MAX_PARTS: usize = 4;
/// Most records in one stream part.
pub const MAX_RECORDS: usize = 3;
/// Longest payload, in bytes.
pub const MAX_PAYLOAD: usize = 8;
/// Streams in play.
pub const STREAMS: usize = 3;
/// The shared event-id pool; other picks are fresh ids or invalid ones.
const POOL: [&str; 6] = ["e0", "e1", "e2", "e3", "e4", "e5"];

#[derive(Arbitrary, Debug, Clone)]
pub struct Program {
    pub ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    /// One atomic append; more parts make a multi-stream batch.
    Append {
        first: PartSpec,
        more: Vec<PartSpec>,
    },
    /// A request with no records at all (`empty_stream` false) or a part without records.
    AppendEmpty {
        empty_stream: bool,
        stream: u8,
    },
    /// Sends an earlier request again, unchanged.
    Retry {
        nth: u8,
    },
    /// Sends an earlier request again with one record changed (payload, kind, time or stream).
    RetryAltered {
        nth: u8,
        part: u8,
        record: u8,
        how: u8,
    },
    ReadStream {
        stream: u8,
        from: u8,
        max: u8,
    },
    ReadAll {
        from: u8,
        max: u8,
    },
    Head {
        stream: u8,
    },
    Verify,
    /// Drops the handle and opens the directory again.
    Reopen,
}

#[derive(Arbitrary, Debug, Clone)]
pub struct PartSpec {
    pub stream: u8,
    /// The expected revision, mostly the model's head so that appends often succeed: low 4 bits
    /// 0..=7 the head (`NoStream` when empty), 8..=9 `Any`, 10 `NoStream`, 11 one behind, 12 one
    /// ahead, 13..=15 `Exact(high 4 bits)` (0 is refused as input).
    pub expected: u8,
    pub first: RecordSpec,
    pub more: Vec<RecordSpec>,
}

#[derive(Arbitrary, Debug, Clone)]
pub struct RecordSpec {
    /// Modulo 32: 0..=11 the shared pool of six ids, 12..=28 a fresh id, 29 too long, 30 empty,
    /// 31 has a space.
    pub event: u8,
    /// Modulo 32: "k.a" or "k.b"; 30 has a space, 31 is empty.
    pub kind: u8,
    pub at: u8,
    pub payload: Vec<u8>,
}

/// Runs one program against a fresh journal and panics on any disagreement with the model.
pub fn run(program: &Program) {
    // One directory per process: runs on several threads (unit tests) take turns.
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = work_dir();
    remove_dir(dir);
    let mut h = Harness::new(dir.clone());
    for (step, op) in program.ops.iter().take(MAX_OPS).enumerate() {
        h.step(step, op);
        h.check_heads();
    }
    h.verify_clean();
    drop(h);
    remove_dir(dir);
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot empty the fuzz directory {}: {e}", dir.display()),
    }
}

/// This process's journal directory, chosen once; stale directories of dead fuzz processes are
/// removed the first time.
fn work_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("CTX_FUZZ_TMPDIR")
            .map(PathBuf::from)
            .or_else(|| {
                Path::new("/dev/shm")
                    .is_dir()
                    .then(|| PathBuf::from("/dev/shm"))
            })
            .unwrap_or_else(std::env::temp_dir);
        let prefix = "ctx-fuzz-journal-ops-";
        if let Ok(entries) = std::fs::read_dir(&base) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
                    continue;
                };
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        base.join(format!("{prefix}{}", std::process::id()))
    })
}

fn options() -> OpenOptions {
    // A fixed key keeps runs reproducible and skips the OS random source.
    OpenOptions::new().key_source(|| Ok([7u8; 32]))
}

#[derive(Debug, Clone)]
struct MRecord {
    event_id: String,
    kind: String,
    at: Timestamp,
    payload: Vec<u8>,
    position: u64,
    digest: Digest,
}

/// What the model says an append must return.
#[derive(Debug)]
enum Expect {
    Ok(Vec<PartExpect>),
    Input(InputKind),
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

#[derive(Debug)]
enum PartExpect {
    Write,
    Replay(Vec<(u64, u64, Digest)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum InputKind {
    Empty,
    TooManyStreams,
    DuplicateStream(StreamId),
    EmptyStream(StreamId),
    ExactZero(StreamId),
    TooManyRecords,
    EventId,
    Kind,
    PayloadTooLarge,
    DuplicateEventId(String),
    BatchTooLarge,
}

fn input_kind(e: &InputError) -> InputKind {
    match e {
        InputError::Empty => InputKind::Empty,
        InputError::TooManyStreams { .. } => InputKind::TooManyStreams,
        InputError::DuplicateStream { stream } => InputKind::DuplicateStream(*stream),
        InputError::EmptyStream { stream } => InputKind::EmptyStream(*stream),
        InputError::ExactZero { stream } => InputKind::ExactZero(*stream),
        InputError::TooManyRecords { .. } => InputKind::TooManyRecords,
        InputError::EventId { .. } => InputKind::EventId,
        InputError::Kind { .. } => InputKind::Kind,
        InputError::PayloadTooLarge { .. } => InputKind::PayloadTooLarge,
        InputError::DuplicateEventId { event_id } => InputKind::DuplicateEventId(event_id.clone()),
        InputError::BatchTooLarge { .. } => InputKind::BatchTooLarge,
        other => panic!("an input error the model does not know: {other:?}"),
    }
}

fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

struct Harness {
    dir: PathBuf,
    journal: Option<Journal>,
    ids: Vec<StreamId>,
    streams: Vec<Vec<MRecord>>,
    events: HashMap<String, (usize, usize)>,
    /// (stream slot, index in that stream) by position - 1.
    order: Vec<(usize, usize)>,
    history: Vec<Vec<StreamAppend>>,
}

impl Harness {
    fn new(dir: PathBuf) -> Harness {
        let journal = match Journal::open(&dir, &options()) {
            Ok(j) => j,
            Err(e) => panic!("open {}: {e}", dir.display()),
        };
        let ids = (0..STREAMS as u8)
            .map(|slot| match StreamId::derive("fuzz.stream", &[slot]) {
                Ok(id) => id,
                Err(e) => panic!("stream id: {e}"),
            })
            .collect();
        Harness {
            dir,
            journal: Some(journal),
            ids,
            streams: vec![Vec::new(); STREAMS],
            events: HashMap::new(),
            order: Vec::new(),
            history: Vec::new(),
        }
    }

    fn journal(&self) -> &Journal {
        match &self.journal {
            Some(j) => j,
            None => panic!("the journal is open between steps"),
        }
    }

    fn slot(&self, stream: &StreamId) -> usize {
        match self.ids.iter().position(|id| id == stream) {
            Some(s) => s,
            None => panic!("a stream outside the harness: {stream}"),
        }
    }

    fn step(&mut self, step: usize, op: &Op) {
        match op {
            Op::Append { first, more } => {
                let parts: Vec<&PartSpec> = std::iter::once(first).chain(more).collect();
                let batch = self.build(step, &parts);
                self.append(batch);
            }
            Op::AppendEmpty {
                empty_stream,
                stream,
            } => {
                let batch = if *empty_stream {
                    let stream = self.ids[usize::from(*stream) % STREAMS];
                    vec![StreamAppend::new(stream, ExpectedRevision::Any, Vec::new())]
                } else {
                    Vec::new()
                };
                self.append(batch);
            }
            Op::Retry { nth } => {
                if let Some(batch) = self.pick(*nth) {
                    self.append(batch);
                }
            }
            Op::RetryAltered {
                nth,
                part,
                record,
                how,
            } => {
                let Some(mut batch) = self.pick(*nth) else {
                    return;
                };
                if batch.is_empty() {
                    return;
                }
                let p = usize::from(*part) % batch.len();
                if batch[p].records.is_empty() {
                    return;
                }
                let r = usize::from(*record) % batch[p].records.len();
                match how % 4 {
                    0 => batch[p].records[r].payload.push(0xA5),
                    1 => {
                        let kind = &mut batch[p].records[r].kind;
                        *kind = if kind == "k.a" {
                            "k.b".into()
                        } else {
                            "k.a".into()
                        };
                    }
                    2 => {
                        let at = &mut batch[p].records[r].occurred_at;
                        at.0 = at.0.wrapping_add(1);
                    }
                    _ => {
                        let slot = (self.slot(&batch[p].stream) + 1) % STREAMS;
                        batch[p].stream = self.ids[slot];
                    }
                }
                self.append(batch);
            }
            Op::ReadStream { stream, from, max } => {
                let slot = usize::from(*stream) % STREAMS;
                let len = self.streams[slot].len() as u64;
                let from = u64::from(*from) % (len + 3);
                let max = usize::from(*max % 6);
                self.check_read_stream(slot, from, max);
            }
            Op::ReadAll { from, max } => {
                let from = u64::from(*from) % (self.order.len() as u64 + 3);
                let max = usize::from(*max % 8);
                self.check_read_all(from, max);
            }
            Op::Head { stream } => {
                let slot = usize::from(*stream) % STREAMS;
                self.check_read_stream(slot, 1, usize::MAX);
            }
            Op::Verify => self.verify_clean(),
            Op::Reopen => {
                self.journal = None;
                self.journal = match Journal::open(&self.dir, &options()) {
                    Ok(j) => Some(j),
                    Err(e) => panic!("reopen: {e}"),
                };
                self.verify_clean();
                self.check_read_all(1, usize::MAX);
            }
        }
    }

    fn pick(&self, nth: u8) -> Option<Vec<StreamAppend>> {
        if self.history.is_empty() {
            return None;
        }
        Some(self.history[usize::from(nth) % self.history.len()].clone())
    }

    fn build(&self, step: usize, parts: &[&PartSpec]) -> Vec<StreamAppend> {
        parts
            .iter()
            .take(MAX_PARTS)
            .enumerate()
            .map(|(p, part)| {
                let slot = usize::from(part.stream) % STREAMS;
                let head = self.streams[slot].len() as u64;
                let expected = match part.expected & 0x0f {
                    0..=7 if head == 0 => ExpectedRevision::NoStream,
                    0..=7 => ExpectedRevision::Exact(head),
                    8 | 9 => ExpectedRevision::Any,
                    10 => ExpectedRevision::NoStream,
                    11 => ExpectedRevision::Exact(head.saturating_sub(1)),
                    12 => ExpectedRevision::Exact(head + 1),
                    _ => ExpectedRevision::Exact(u64::from(part.expected >> 4)),
                };
                let records = std::iter::once(&part.first)
                    .chain(&part.more)
                    .take(MAX_RECORDS)
                    .enumerate()
                    .map(|(i, r)| {
                        let event_id = match r.event % 32 {
                            n @ 0..=11 => POOL[usize::from(n) % POOL.len()].to_owned(),
                            12..=28 => format!("n{step}.{p}.{i}"),
                            29 => "x".repeat(EVENT_ID_MAX_BYTES + 1),
                            30 => String::new(),
                            _ => "bad id".to_owned(),
                        };
                        let kind = match r.kind % 32 {
                            30 => "bad kind",
                            31 => "",
                            n if n % 2 == 0 => "k.a",
                            _ => "k.b",
                        };
                        let payload: Vec<u8> =
                            r.payload.iter().take(MAX_PAYLOAD).copied().collect();
                        NewRecord::new(event_id, kind, Timestamp(i64::from(r.at) - 128), payload)
                    })
                    .collect();
                StreamAppend::new(self.ids[slot], expected, records)
            })
            .collect()
    }

    /// The journal's input validation, in its order (spec/journal.md §6 step 1).
    fn validate(batch: &[StreamAppend]) -> Result<(), InputKind> {
        if batch.is_empty() {
            return Err(InputKind::Empty);
        }
        if batch.len() > BATCH_STREAMS_MAX {
            return Err(InputKind::TooManyStreams);
        }
        let mut streams = Vec::new();
        let mut event_ids = Vec::new();
        let (mut records, mut bytes) = (0usize, 0usize);
        for part in batch {
            if streams.contains(&part.stream) {
                return Err(InputKind::DuplicateStream(part.stream));
            }
            streams.push(part.stream);
            if part.records.is_empty() {
                return Err(InputKind::EmptyStream(part.stream));
            }
            if part.expected == ExpectedRevision::Exact(0) {
                return Err(InputKind::ExactZero(part.stream));
            }
            records += part.records.len();
            if records > BATCH_RECORDS_MAX {
                return Err(InputKind::TooManyRecords);
            }
            for r in &part.records {
                if !is_token(&r.event_id, EVENT_ID_MAX_BYTES) {
                    return Err(InputKind::EventId);
                }
                if !is_token(&r.kind, KIND_MAX_BYTES) {
                    return Err(InputKind::Kind);
                }
                if r.payload.len() > PAYLOAD_MAX_BYTES {
                    return Err(InputKind::PayloadTooLarge);
                }
                bytes += r.payload.len();
                if event_ids.contains(&r.event_id) {
                    return Err(InputKind::DuplicateEventId(r.event_id.clone()));
                }
                event_ids.push(r.event_id.clone());
            }
        }
        if bytes > BATCH_PAYLOAD_MAX_BYTES {
            return Err(InputKind::BatchTooLarge);
        }
        Ok(())
    }

    /// What the model says `batch` must do (spec/journal.md §6 steps 2 and 3).
    fn predict(&self, batch: &[StreamAppend]) -> Expect {
        if let Err(kind) = Self::validate(batch) {
            return Expect::Input(kind);
        }
        let mut plans = Vec::new();
        for part in batch {
            let slot = self.slot(&part.stream);
            let found: Vec<Option<(usize, usize)>> = part
                .records
                .iter()
                .map(|r| self.events.get(&r.event_id).copied())
                .collect();
            let first_found = found
                .iter()
                .zip(&part.records)
                .find_map(|(f, r)| f.map(|f| (f, r)));
            if let Some(((fs, fi), first)) = first_found {
                let mut replay = Vec::new();
                for (r, f) in part.records.iter().zip(&found) {
                    let Some((s, i)) = *f else {
                        return Expect::Conflict {
                            event_id: first.event_id.clone(),
                            stream: self.ids[fs],
                            revision: fi as u64 + 1,
                        };
                    };
                    let m = &self.streams[s][i];
                    if s != slot
                        || m.kind != r.kind
                        || m.at != r.occurred_at
                        || m.payload != r.payload
                    {
                        return Expect::Conflict {
                            event_id: r.event_id.clone(),
                            stream: self.ids[s],
                            revision: i as u64 + 1,
                        };
                    }
                    replay.push((i as u64 + 1, m.position, m.digest));
                }
                plans.push(PartExpect::Replay(replay));
                continue;
            }
            let current = self.streams[slot].len() as u64;
            let ok = match part.expected {
                ExpectedRevision::Any => true,
                ExpectedRevision::NoStream => current == 0,
                ExpectedRevision::Exact(n) => n == current,
            };
            if !ok {
                return Expect::WrongRevision {
                    stream: part.stream,
                    expected: part.expected,
                    current,
                };
            }
            plans.push(PartExpect::Write);
        }
        Expect::Ok(plans)
    }

    fn append(&mut self, batch: Vec<StreamAppend>) {
        let expect = self.predict(&batch);
        self.history.push(batch.clone());
        let result = if batch.len() == 1 {
            self.journal().append(batch[0].clone()).map(|o| vec![o])
        } else {
            self.journal().append_batch(batch.clone())
        };
        match (expect, result) {
            (Expect::Ok(plans), Ok(outcomes)) => self.apply(&batch, plans, outcomes),
            (Expect::Input(kind), Err(AppendError::Input(e))) => {
                assert_eq!(input_kind(&e), kind, "input refusal of {batch:?}");
            }
            (
                Expect::WrongRevision {
                    stream,
                    expected,
                    current,
                },
                Err(AppendError::WrongRevision {
                    stream: s,
                    expected: x,
                    current: c,
                }),
            ) => assert_eq!(
                (s, x, c),
                (stream, expected, current),
                "wrong revision of {batch:?}"
            ),
            (
                Expect::Conflict {
                    event_id,
                    stream,
                    revision,
                },
                Err(AppendError::Conflict {
                    event_id: e,
                    stream: s,
                    revision: r,
                }),
            ) => assert_eq!(
                (e, s, r),
                (event_id, stream, revision),
                "conflict of {batch:?}"
            ),
            (expect, result) => {
                panic!(
                    "append {batch:?}\n  model expects {expect:?}\n  journal returned {result:?}"
                )
            }
        }
    }

    /// Records an accepted append in the model, checking each outcome on the way.
    fn apply(
        &mut self,
        batch: &[StreamAppend],
        plans: Vec<PartExpect>,
        outcomes: Vec<AppendOutcome>,
    ) {
        assert_eq!(outcomes.len(), batch.len(), "one outcome per stream part");
        for ((part, plan), outcome) in batch.iter().zip(plans).zip(outcomes) {
            assert_eq!(outcome.stream, part.stream);
            assert_eq!(outcome.records.len(), part.records.len());
            match plan {
                PartExpect::Replay(original) => {
                    assert!(
                        outcome.replayed,
                        "a retry must be marked replayed: {outcome:?}"
                    );
                    let got: Vec<_> = outcome
                        .records
                        .iter()
                        .map(|r| (r.revision, r.position, r.digest))
                        .collect();
                    assert_eq!(got, original, "a retry must return the original result");
                }
                PartExpect::Write => {
                    assert!(
                        !outcome.replayed,
                        "a new append is not a replay: {outcome:?}"
                    );
                    let slot = self.slot(&part.stream);
                    for (r, a) in part.records.iter().zip(&outcome.records) {
                        let index = self.streams[slot].len();
                        let position = self.order.len() as u64 + 1;
                        assert_eq!(a.revision, index as u64 + 1, "revisions are contiguous");
                        assert_eq!(a.position, position, "positions are gap-free, in order");
                        assert_ne!(a.digest, Digest::ZERO);
                        self.streams[slot].push(MRecord {
                            event_id: r.event_id.clone(),
                            kind: r.kind.clone(),
                            at: r.occurred_at,
                            payload: r.payload.clone(),
                            position,
                            digest: a.digest,
                        });
                        self.events.insert(r.event_id.clone(), (slot, index));
                        self.order.push((slot, index));
                    }
                }
            }
        }
    }

    fn check_record(&self, slot: usize, index: usize, got: &Record) {
        let m = &self.streams[slot][index];
        let previous = if index == 0 {
            Digest::ZERO
        } else {
            self.streams[slot][index - 1].digest
        };
        let want = Record {
            stream: self.ids[slot],
            revision: index as u64 + 1,
            position: m.position,
            event_id: m.event_id.clone(),
            kind: m.kind.clone(),
            occurred_at: m.at,
            payload: m.payload.clone(),
            previous_digest: previous,
            digest: m.digest,
        };
        assert_eq!(*got, want, "record read back");
    }

    fn check_read_stream(&self, slot: usize, from: u64, max: usize) {
        let got = match self.journal().read_stream(&self.ids[slot], from, max) {
            Ok(records) => records,
            Err(e) => panic!("read_stream({slot}, {from}, {max}): {e}"),
        };
        let len = self.streams[slot].len();
        let start = from.max(1) as usize - 1;
        let want = if start >= len {
            0
        } else {
            (len - start).min(max)
        };
        assert_eq!(got.len(), want, "read_stream({slot}, {from}, {max}) length");
        for (k, record) in got.iter().enumerate() {
            self.check_record(slot, start + k, record);
        }
    }

    fn check_read_all(&self, from: u64, max: usize) {
        let got = match self.journal().read_all(from, max) {
            Ok(records) => records,
            Err(e) => panic!("read_all({from}, {max}): {e}"),
        };
        let start = from.max(1) as usize - 1;
        let want = if start >= self.order.len() {
            0
        } else {
            (self.order.len() - start).min(max)
        };
        assert_eq!(got.len(), want, "read_all({from}, {max}) length");
        for (k, record) in got.iter().enumerate() {
            let (slot, index) = self.order[start + k];
            self.check_record(slot, index, record);
        }
    }

    fn check_heads(&self) {
        let journal = self.journal();
        let head = match journal.head_position() {
            Ok(p) => p,
            Err(e) => panic!("head_position: {e}"),
        };
        assert_eq!(head, self.order.len() as u64, "head position");
        for slot in 0..STREAMS {
            let got = match journal.stream_head(&self.ids[slot]) {
                Ok(h) => h.map(|h| (h.revision, h.position, h.digest)),
                Err(e) => panic!("stream_head: {e}"),
            };
            let want = self.streams[slot]
                .last()
                .map(|m| (self.streams[slot].len() as u64, m.position, m.digest));
            assert_eq!(got, want, "head of stream {slot}");
        }
    }

    fn verify_clean(&self) {
        let report = match self.journal().verify() {
            Ok(r) => r,
            Err(e) => panic!("verify: {e}"),
        };
        assert!(report.is_ok(), "verify found failures: {report:?}");
        assert_eq!(report.records, self.order.len() as u64);
        let streams = self.streams.iter().filter(|s| !s.is_empty()).count() as u64;
        assert_eq!(report.streams, streams);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(event: u8, payload: &[u8]) -> RecordSpec {
        RecordSpec {
            event,
            kind: 0,
            at: 1,
            payload: payload.to_vec(),
        }
    }

    fn append(parts: Vec<(u8, u8, Vec<RecordSpec>)>) -> Op {
        let mut parts = parts.into_iter().map(|(stream, expected, mut records)| {
            let first = records.remove(0);
            PartSpec {
                stream,
                expected,
                first,
                more: records,
            }
        });
        let first = parts.next().expect("at least one part");
        Op::Append {
            first,
            more: parts.collect(),
        }
    }

    #[test]
    fn a_hand_written_program_passes() {
        const HEAD: u8 = 0;
        const ANY: u8 = 8;
        const NO_STREAM: u8 = 10;
        let program = Program {
            ops: vec![
                append(vec![(0, HEAD, vec![rec(0, b"a"), rec(1, b"b")])]),
                append(vec![
                    (0, HEAD, vec![rec(12, b"c")]),
                    (1, NO_STREAM, vec![rec(2, b"d")]),
                ]),
                Op::Retry { nth: 0 },
                Op::RetryAltered {
                    nth: 0,
                    part: 0,
                    record: 1,
                    how: 0,
                },
                Op::RetryAltered {
                    nth: 1,
                    part: 1,
                    record: 0,
                    how: 3,
                },
                append(vec![(2, 11, vec![rec(3, b"")])]),
                append(vec![(2, 12, vec![rec(3, b"")])]),
                append(vec![(1, 13, vec![rec(4, b"")])]),
                append(vec![(1, ANY, vec![rec(0, b"a"), rec(5, b"")])]),
                append(vec![(1, ANY, vec![rec(31, b"")])]),
                append(vec![
                    (1, ANY, vec![rec(3, b"")]),
                    (1, ANY, vec![rec(4, b"")]),
                ]),
                Op::AppendEmpty {
                    empty_stream: true,
                    stream: 2,
                },
                Op::AppendEmpty {
                    empty_stream: false,
                    stream: 0,
                },
                Op::Reopen,
                Op::ReadStream {
                    stream: 0,
                    from: 2,
                    max: 5,
                },
                Op::ReadAll { from: 0, max: 7 },
                Op::Head { stream: 1 },
                Op::Verify,
            ],
        };
        run(&program);
        // Longer programs are cut at MAX_OPS; run the tail too.
        run(&Program {
            ops: program.ops[MAX_OPS..].to_vec(),
        });
    }

    #[test]
    fn arbitrary_programs_pass() {
        // Deterministic pseudo-random inputs through the same decoding libFuzzer uses.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..256)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if let Ok(program) = Program::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes))
            {
                run(&program);
            }
        }
    }
}
