//! The `journal_model` target: an arbitrary program of appends (single and multi-stream, with
//! expected revisions, duplicate and conflicting event ids from a tiny pool), retries, reads,
//! verifications, reopens and injected storage failures against a real journal in a temporary
//! directory, checked after every step against an in-memory model of the last durable state.
//!
//! Failures are injected below redb: an open may be armed ([`Program::create`] for the first
//! open, which creates the database, and [`Op::Reopen`] for later ones), and then every database
//! file it opens goes through a [`CountdownFile`], which forwards everything to the plain file
//! backend until `n` (0..=40) mutating calls (`write`, `set_len`, `sync_data`) have passed, and
//! from then on fails every mutating call and every read. Locks, `len` and `close` always pass,
//! so a failed journal can still be closed and reopened. The checks:
//!
//! - with no failure injected, every append returns exactly what the model predicts: the typed
//!   refusal (input, wrong revision, conflict) or the outcome, with contiguous revisions, gap-free
//!   positions, and retries returning the original result marked as replayed; reads, heads and
//!   `verify()` agree with the model and nothing is fail-stopped;
//! - a request that writes nothing (a refusal, only replays, or any request to a fail-stopped
//!   journal) makes no mutating storage call (counted by the countdown of an armed open);
//! - an append that returned `Ok` is acknowledged and must survive every later reopen;
//! - an append that fails while the countdown has fired must return `MaybeCommitted`, and the
//!   journal is then fail-stopped: every later valid request is refused with `FailStopped` (input
//!   errors stay input errors) and writes nothing; reads and `verify()` either fail with a typed
//!   storage error or agree with the model, with or without the maybe-committed append;
//! - a failing open returns a typed `OpenError` (storage or I/O), never a panic, and the directory
//!   then opens without the countdown; a failure while creating the database leaves a directory
//!   that opens as an empty journal;
//! - after every reopen (and once more at the end of the program) `verify()` is clean (chains,
//!   MACs, gap-free positions, indexes), and the journal holds the acknowledged records and, after
//!   a maybe-committed append, either none or all of its records (multi-stream batches
//!   all-or-nothing) — exactly one of the two, which the model adopts; every stream reads back as
//!   the model's (payloads, event ids, kinds, times, revisions, digests), the global scan is the
//!   model's order, and appending every acknowledged record again returns its original result.
//!
//! Iterations are kept cheap: at most [`MAX_OPS`] steps, small payloads (but for a few of
//! [`BIG_PAYLOAD`] bytes, which grow the file), one directory per process (under `/dev/shm` when
//! it exists, else the temp dir; `CTX_FUZZ_TMPDIR` overrides) emptied before and after each run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use arbitrary::Arbitrary;
use ctx_journal::{
    AppendError, AppendOutcome, BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX,
    Digest, EVENT_ID_MAX_BYTES, ExpectedRevision, FileBackend, InputError, Journal, KIND_MAX_BYTES,
    NewRecord, OpenError, OpenOptions, PAYLOAD_MAX_BYTES, ReadError, Record, StorageBackend as _,
    StorageInterceptor, StorageWrapper, StreamAppend, StreamHead, StreamId, Timestamp, VerifyError,
};

/// Most steps run per program; the rest of a longer program is ignored.
pub const MAX_OPS: usize = 40;
/// Most stream parts in one append (more than [`STREAMS`], so duplicate streams happen).
pub const MAX_PARTS: usize = 4;
/// Most records in one stream part.
pub const MAX_RECORDS: usize = 3;
/// Longest payload, in bytes, except the big ones.
pub const MAX_PAYLOAD: usize = 8;
/// The size of a big payload: a few of them make redb grow the file (`set_len`).
pub const BIG_PAYLOAD: usize = 16 * 1024;
/// Streams in play.
pub const STREAMS: usize = 3;
/// Largest countdown: an armed open fails after `n % (MAX_COUNTDOWN + 1)` mutating calls.
pub const MAX_COUNTDOWN: u8 = 40;
/// The shared event-id pool; other picks are fresh ids or invalid ones.
const POOL: [&str; 6] = ["e0", "e1", "e2", "e3", "e4", "e5"];

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Arms the countdown for the first open, which creates the database.
    pub create: Option<u8>,
    pub ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
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
    /// Drops the handle and opens the directory again; `Some(n)` arms the countdown of the new
    /// open (its storage fails after `n % 41` mutating calls).
    Reopen {
        arm: Option<u8>,
    },
}

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct PartSpec {
    pub stream: u8,
    /// The expected revision, mostly the model's head so that appends often succeed: low 4 bits
    /// 0..=7 the head (`NoStream` when empty), 8..=9 `Any`, 10 `NoStream`, 11 one behind, 12 one
    /// ahead, 13..=15 `Exact(high 4 bits)` (0 is refused as input).
    pub expected: u8,
    pub first: RecordSpec,
    pub more: Vec<RecordSpec>,
}

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct RecordSpec {
    /// Modulo 32: 0..=11 the shared pool of six ids, 12..=28 a fresh id, 29 too long, 30 empty,
    /// 31 has a space.
    pub event: u8,
    /// Modulo 32: "k.a" or "k.b"; 30 has a space, 31 is empty.
    pub kind: u8,
    pub at: u8,
    /// Modulo 8: 7 makes the payload [`BIG_PAYLOAD`] incompressible bytes seeded by the payload,
    /// so that the database file grows; otherwise the payload is at most [`MAX_PAYLOAD`] bytes.
    pub size: u8,
    pub payload: Vec<u8>,
}

/// [`BIG_PAYLOAD`] bytes that zstd cannot shrink (xorshift64* seeded by `seed`), so that they
/// grow the file even though the journal compresses payloads (spec/journal.md §4).
fn big_payload(seed: &[u8]) -> Vec<u8> {
    let mut x = seed.iter().fold(0x9e37_79b9_7f4a_7c15u64, |x, &b| {
        (x ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    (0..BIG_PAYLOAD)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Runs one program against a fresh journal and panics on any disagreement with the model.
pub fn run(program: &Program) {
    run_counted(program);
}

/// [`run`], returning what the injected failures did.
pub fn run_counted(program: &Program) -> Stats {
    // One directory per process: runs on several threads (unit tests) take turns.
    let _turn = turn();
    let dir = work_dir();
    crate::remove_dir(dir);
    let mut h = Harness::new(dir.clone(), program.create);
    for (step, op) in program.ops.iter().take(MAX_OPS).enumerate() {
        h.step(step, op);
        h.check_heads();
    }
    h.verify_clean();
    // The last durable state: acknowledged appends survive, a maybe-committed one is resolved.
    h.reopen(None);
    let stats = std::mem::take(&mut h.stats);
    drop(h);
    crate::remove_dir(dir);
    stats
}

fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's journal directory, chosen once; stale directories of dead fuzz processes are
/// removed the first time.
fn work_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::process_dir("ctx-fuzz-journal-model-"))
}

fn options() -> OpenOptions {
    // A fixed key keeps runs reproducible and skips the OS random source.
    OpenOptions::new().key_source(|| Ok([7u8; 32]))
}

// ------------------------------------------------------------------------------------------------
// Failure injection: a countdown in front of redb's file backend
// ------------------------------------------------------------------------------------------------

/// A mutating call of a storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    Write,
    SetLen,
    SyncData,
}

/// The first failed call of a [`Countdown`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub call: Call,
    /// The name of the database file it was made on.
    pub file: String,
}

/// A [`StorageWrapper`] whose backends share one countdown: the first `n` mutating calls (over
/// every file of the open) pass, the next one and every later mutating call or read fail.
#[derive(Debug, Clone)]
pub struct Countdown {
    state: Arc<Mutex<CountdownState>>,
}

#[derive(Debug)]
struct CountdownState {
    left: u32,
    /// Mutating calls made so far, the failed ones included.
    calls: u32,
    fired: Option<Fired>,
}

impl Countdown {
    pub fn new(n: u32) -> Countdown {
        Countdown {
            state: Arc::new(Mutex::new(CountdownState {
                left: n,
                calls: 0,
                fired: None,
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, CountdownState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first failed call, once the countdown has run out.
    pub fn fired(&self) -> Option<Fired> {
        self.state().fired.clone()
    }

    /// Mutating calls made so far, the failed ones included.
    pub fn calls(&self) -> u32 {
        self.state().calls
    }

    fn mutating(&self, call: Call, file: &str) -> std::io::Result<()> {
        let mut state = self.state();
        state.calls += 1;
        if state.fired.is_some() {
            return Err(injected());
        }
        if state.left == 0 {
            state.fired = Some(Fired {
                call,
                file: file.to_owned(),
            });
            return Err(injected());
        }
        state.left -= 1;
        Ok(())
    }

    fn reading(&self) -> std::io::Result<()> {
        match self.state().fired {
            Some(_) => Err(injected()),
            None => Ok(()),
        }
    }
}

fn injected() -> std::io::Error {
    std::io::Error::other("injected storage failure (countdown ran out)")
}

impl StorageWrapper for Countdown {
    fn wrap(&self, path: &Path, _file: &FileBackend) -> Option<Arc<dyn StorageInterceptor>> {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Some(Arc::new(CountdownFile {
            countdown: self.clone(),
            file: name,
        }))
    }
}

/// A database file behind a [`Countdown`]: once the countdown has run out, `write`, `set_len`,
/// `sync_data` and `read` fail without reaching the file. `len` passes; the journal forwards the
/// range locks and `close` itself, so closing releases the locks.
#[derive(Debug)]
pub struct CountdownFile {
    countdown: Countdown,
    file: String,
}

impl StorageInterceptor for CountdownFile {
    fn read(&self, file: &FileBackend, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.countdown.reading()?;
        file.read(offset, out)
    }
    fn set_len(&self, file: &FileBackend, len: u64) -> std::io::Result<()> {
        self.countdown.mutating(Call::SetLen, &self.file)?;
        file.set_len(len)
    }
    fn sync_data(&self, file: &FileBackend) -> std::io::Result<()> {
        self.countdown.mutating(Call::SyncData, &self.file)?;
        file.sync_data()
    }
    fn write(&self, file: &FileBackend, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.countdown.mutating(Call::Write, &self.file)?;
        file.write(offset, data)
    }
}

// ------------------------------------------------------------------------------------------------
// The model
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct MRecord {
    event_id: String,
    kind: String,
    at: Timestamp,
    payload: Vec<u8>,
    position: u64,
    /// Unknown only for the records of a maybe-committed append, until a reopen finds them.
    digest: Option<Digest>,
}

/// The journal's content: records by stream, event ids, and the global order.
#[derive(Debug, Clone)]
struct Model {
    streams: Vec<Vec<MRecord>>,
    events: HashMap<String, (usize, usize)>,
    /// (stream slot, index in that stream) by position - 1.
    order: Vec<(usize, usize)>,
}

impl Model {
    fn new() -> Model {
        Model {
            streams: vec![Vec::new(); STREAMS],
            events: HashMap::new(),
            order: Vec::new(),
        }
    }

    /// Appends one record at the next revision and position; returns both.
    fn push(&mut self, slot: usize, r: &NewRecord, digest: Option<Digest>) -> (u64, u64) {
        let index = self.streams[slot].len();
        let position = self.order.len() as u64 + 1;
        self.streams[slot].push(MRecord {
            event_id: r.event_id.clone(),
            kind: r.kind.clone(),
            at: r.occurred_at,
            payload: r.payload.clone(),
            position,
            digest,
        });
        self.events.insert(r.event_id.clone(), (slot, index));
        self.order.push((slot, index));
        (index as u64 + 1, position)
    }

    fn streams_in_use(&self) -> u64 {
        self.streams.iter().filter(|s| !s.is_empty()).count() as u64
    }

    fn check_record(
        &self,
        ids: &[StreamId],
        slot: usize,
        index: usize,
        got: &Record,
    ) -> Result<(), String> {
        let m = &self.streams[slot][index];
        let want = (
            ids[slot],
            index as u64 + 1,
            m.position,
            m.event_id.as_str(),
            m.kind.as_str(),
            m.at,
            m.payload.as_slice(),
        );
        let have = (
            got.stream,
            got.revision,
            got.position,
            got.event_id.as_str(),
            got.kind.as_str(),
            got.occurred_at,
            got.payload.as_slice(),
        );
        if want != have {
            return Err(format!("expected {want:?}, read {have:?}"));
        }
        let previous = match index {
            0 => Some(Digest::ZERO),
            _ => self.streams[slot][index - 1].digest,
        };
        if previous.is_some_and(|p| p != got.previous_digest) {
            return Err(format!(
                "{have:?}: previous digest {previous:?}, read {got:?}"
            ));
        }
        if m.digest.is_some_and(|d| d != got.digest) || got.digest == Digest::ZERO {
            return Err(format!("{have:?}: digest {:?}, read {got:?}", m.digest));
        }
        Ok(())
    }

    fn check_stream(
        &self,
        ids: &[StreamId],
        slot: usize,
        from: u64,
        max: usize,
        got: &[Record],
    ) -> Result<(), String> {
        let len = self.streams[slot].len();
        let start = from.max(1) as usize - 1;
        let want = if start >= len {
            0
        } else {
            (len - start).min(max)
        };
        if got.len() != want {
            return Err(format!(
                "read_stream({slot}, {from}, {max}) gave {} records, the model has {want}",
                got.len()
            ));
        }
        for (k, record) in got.iter().enumerate() {
            self.check_record(ids, slot, start + k, record)
                .map_err(|e| format!("read_stream({slot}, {from}, {max}): {e}"))?;
        }
        Ok(())
    }

    fn check_all(
        &self,
        ids: &[StreamId],
        from: u64,
        max: usize,
        got: &[Record],
    ) -> Result<(), String> {
        let start = from.max(1) as usize - 1;
        let want = if start >= self.order.len() {
            0
        } else {
            (self.order.len() - start).min(max)
        };
        if got.len() != want {
            return Err(format!(
                "read_all({from}, {max}) gave {} records, the model has {want}",
                got.len()
            ));
        }
        for (k, record) in got.iter().enumerate() {
            let (slot, index) = self.order[start + k];
            self.check_record(ids, slot, index, record)
                .map_err(|e| format!("read_all({from}, {max}): {e}"))?;
        }
        Ok(())
    }

    fn check_heads(&self, head: u64, heads: &[Option<StreamHead>]) -> Result<(), String> {
        if head != self.order.len() as u64 {
            return Err(format!(
                "head position {head}, the model has {}",
                self.order.len()
            ));
        }
        for (slot, got) in heads.iter().enumerate() {
            let want = self.streams[slot]
                .last()
                .map(|m| (self.streams[slot].len() as u64, m.position, m.digest));
            let agrees = match (got, want) {
                (None, None) => true,
                (Some(h), Some((revision, position, digest))) => {
                    h.revision == revision
                        && h.position == position
                        && digest.is_none_or(|d| d == h.digest)
                }
                _ => false,
            };
            if !agrees {
                return Err(format!(
                    "head of stream {slot}: {got:?}, the model has {want:?}"
                ));
            }
        }
        Ok(())
    }
}

/// An append answered `MaybeCommitted`: the model as it is if the append reached the disk.
#[derive(Debug)]
struct Maybe {
    batch: Vec<StreamAppend>,
    with: Model,
}

/// What the injected failures did in one run.
#[derive(Debug, Default)]
pub struct Stats {
    /// Where and at which call each armed open's countdown ran out.
    pub fired: Vec<(Phase, Call)>,
    /// Armed opens that failed.
    pub open_failures: usize,
    /// Appends answered `MaybeCommitted`, and how the reopen resolved them.
    pub maybe: usize,
    pub landed: usize,
    pub lost: usize,
    /// Valid requests refused with `FailStopped`.
    pub refused_stopped: usize,
}

/// Where a countdown ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The open that created the database.
    Create,
    /// An open of an existing database.
    Open,
    Append,
    /// Dropping the journal (redb's shutdown writes).
    Close,
}

// ------------------------------------------------------------------------------------------------
// Predictions
// ------------------------------------------------------------------------------------------------

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
    Replay(Vec<(u64, u64, Option<Digest>)>),
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

// ------------------------------------------------------------------------------------------------
// The harness
// ------------------------------------------------------------------------------------------------

struct Harness {
    dir: PathBuf,
    journal: Option<Journal>,
    /// The countdown of the open in use, when it was armed.
    countdown: Option<Countdown>,
    ids: Vec<StreamId>,
    /// The last durable state: every acknowledged append.
    model: Model,
    /// The append answered `MaybeCommitted` since the last reopen, if any.
    maybe: Option<Maybe>,
    history: Vec<Vec<StreamAppend>>,
    stats: Stats,
}

impl Harness {
    /// Creates the journal, through a countdown of `arm` calls when it is `Some`.
    fn new(dir: PathBuf, arm: Option<u8>) -> Harness {
        let ids = (0..STREAMS as u8)
            .map(|slot| match StreamId::derive("fuzz.stream", &[slot]) {
                Ok(id) => id,
                Err(e) => panic!("stream id: {e}"),
            })
            .collect();
        let mut h = Harness {
            dir,
            journal: None,
            countdown: None,
            ids,
            model: Model::new(),
            maybe: None,
            history: Vec::new(),
            stats: Stats::default(),
        };
        h.open(arm);
        h
    }

    fn journal(&self) -> &Journal {
        match &self.journal {
            Some(j) => j,
            None => panic!("the journal is open between steps"),
        }
    }

    /// True once the countdown of the open in use has run out: storage calls may fail from then
    /// on, until the next reopen.
    fn fired(&self) -> bool {
        self.countdown.as_ref().is_some_and(|c| c.fired().is_some())
    }

    fn fired_call(&self) -> Option<Call> {
        self.countdown
            .as_ref()
            .and_then(Countdown::fired)
            .map(|f| f.call)
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
                let len = self.model.streams[slot].len() as u64;
                let from = u64::from(*from) % (len + 3);
                let max = usize::from(*max % 6);
                self.check_read_stream(slot, from, max);
            }
            Op::ReadAll { from, max } => {
                let from = u64::from(*from) % (self.model.order.len() as u64 + 3);
                let max = usize::from(*max % 8);
                self.check_read_all(from, max);
            }
            Op::Head { stream } => {
                let slot = usize::from(*stream) % STREAMS;
                self.check_read_stream(slot, 1, usize::MAX);
            }
            Op::Verify => self.verify_clean(),
            Op::Reopen { arm } => self.reopen(*arm),
        }
    }

    // ----- opening -----

    /// Drops the handle (the only one: the journal closes) and opens the directory again.
    fn reopen(&mut self, arm: Option<u8>) {
        let before = self.fired();
        self.journal = None;
        if !before && let Some(call) = self.fired_call() {
            self.stats.fired.push((Phase::Close, call));
        }
        self.countdown = None;
        self.open(arm);
    }

    /// Opens the directory (through a countdown of `arm` calls when it is `Some`) and checks the
    /// journal against the model, resolving a maybe-committed append.
    fn open(&mut self, arm: Option<u8>) {
        let phase = if self.dir.join(ctx_journal::DATABASE_FILE).exists() {
            Phase::Open
        } else {
            Phase::Create
        };
        let countdown = arm.map(|n| Countdown::new(u32::from(n % (MAX_COUNTDOWN + 1))));
        let mut options = options();
        if let Some(c) = &countdown {
            options = options.storage_wrapper(Arc::new(c.clone()));
        }
        let opened = Journal::open(&self.dir, &options);
        let fired = countdown.as_ref().and_then(Countdown::fired);
        if let Some(f) = &fired {
            self.stats.fired.push((phase, f.call));
        }
        match opened {
            Ok(journal) => {
                self.journal = Some(journal);
                self.countdown = countdown;
            }
            Err(e) => {
                let Some(fired) = fired else {
                    panic!("open failed with no injected failure: {e:?}");
                };
                assert!(
                    matches!(e, OpenError::Storage(_) | OpenError::Io { .. }),
                    "a storage failure ({fired:?}) during {phase:?} must fail the open with a \
                     storage or I/O error, got {e:?}"
                );
                self.stats.open_failures += 1;
                self.open_plain("after a failed open");
            }
        }
        if let Err(e) = self.settle() {
            // Only an armed open whose storage has already failed gets here: its reads may fail.
            // Without the countdown the directory must open and settle.
            self.journal = None;
            self.countdown = None;
            self.open_plain(&format!("after a failed read ({e})"));
            if let Err(e) = self.settle() {
                panic!("a plain open cannot read the journal: {e}");
            }
        }
    }

    fn open_plain(&mut self, context: &str) {
        match Journal::open(&self.dir, &options()) {
            Ok(journal) => self.journal = Some(journal),
            Err(e) => panic!("the directory does not open {context}: {e:?}"),
        }
        self.countdown = None;
    }

    /// Checks a freshly opened journal: `verify()` is clean, the journal holds the model or, after
    /// a maybe-committed append, exactly one of the model and the model with that append (which
    /// the model then adopts), every stream and the heads read back as the model's, and every
    /// acknowledged record appended again is a replay of the original. `Err` only when a storage
    /// call failed after the countdown ran out.
    fn settle(&mut self) -> Result<(), String> {
        let report = match self.journal().verify() {
            Ok(report) => report,
            Err(e) if self.fired() => return Err(format!("verify: {e}")),
            Err(e) => panic!("verify after opening: {e}"),
        };
        assert!(
            report.is_ok(),
            "verify after opening found failures: {report:?}"
        );
        let all = match self.journal().read_all(1, usize::MAX) {
            Ok(all) => all,
            Err(e) if self.fired() => return Err(format!("read_all: {e}")),
            Err(e) => panic!("read_all after opening: {e}"),
        };
        let without = self.model.check_all(&self.ids, 1, usize::MAX, &all);
        let with = self
            .maybe
            .as_ref()
            .map(|m| m.with.check_all(&self.ids, 1, usize::MAX, &all));
        match (without, with) {
            (Ok(()), None) => {}
            (Ok(()), Some(Err(_))) => {
                self.stats.lost += 1;
                self.maybe = None;
            }
            (Err(_), Some(Ok(()))) => {
                self.stats.landed += 1;
                if let Some(maybe) = self.maybe.take() {
                    self.model = maybe.with;
                }
            }
            (Ok(()), Some(Ok(()))) => panic!("a maybe-committed append that writes nothing"),
            (Err(e), None) => panic!("the reopened journal is not the model: {e}"),
            (Err(without), Some(Err(with))) => panic!(
                "the reopened journal holds neither the model nor the model with the \
                 maybe-committed append {:?}:\n  without it: {without}\n  with it: {with}",
                self.maybe.as_ref().map(|m| &m.batch)
            ),
        }
        // The digests of a maybe-committed append are known now; the chains are checked with
        // them.
        for (record, &(slot, index)) in all.iter().zip(&self.model.order) {
            self.model.streams[slot][index]
                .digest
                .get_or_insert(record.digest);
        }
        if let Err(e) = self.model.check_all(&self.ids, 1, usize::MAX, &all) {
            panic!("the reopened journal's chains: {e}");
        }
        assert_eq!(
            (report.records, report.streams),
            (self.model.order.len() as u64, self.model.streams_in_use()),
            "verify's counts"
        );
        for slot in 0..STREAMS {
            if !self.check_read_stream(slot, 1, usize::MAX) {
                return Err(format!("read_stream({slot})"));
            }
        }
        self.check_heads();
        self.check_replays();
        Ok(())
    }

    /// Appends every acknowledged record again, one part per stream: a replay of the original.
    fn check_replays(&mut self) {
        let batch: Vec<StreamAppend> = (0..STREAMS)
            .filter(|&slot| !self.model.streams[slot].is_empty())
            .map(|slot| {
                let records = self.model.streams[slot]
                    .iter()
                    .map(|m| {
                        NewRecord::new(m.event_id.clone(), m.kind.clone(), m.at, m.payload.clone())
                    })
                    .collect();
                StreamAppend::new(self.ids[slot], ExpectedRevision::Any, records)
            })
            .collect();
        if !batch.is_empty() {
            self.append(batch);
        }
    }

    // ----- appends -----

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
                let head = self.model.streams[slot].len() as u64;
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
                        let mut payload: Vec<u8> =
                            r.payload.iter().take(MAX_PAYLOAD).copied().collect();
                        if r.size % 8 == 7 {
                            payload = big_payload(&payload);
                        }
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
        let model = &self.model;
        let mut plans = Vec::new();
        for part in batch {
            let slot = self.slot(&part.stream);
            let found: Vec<Option<(usize, usize)>> = part
                .records
                .iter()
                .map(|r| model.events.get(&r.event_id).copied())
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
                    let m = &model.streams[s][i];
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
            let current = model.streams[slot].len() as u64;
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
        let stopped = self.journal().is_fail_stopped();
        let fired_before = self.fired();
        let calls_before = self.countdown.as_ref().map(Countdown::calls);
        let result = if batch.len() == 1 {
            self.journal().append(batch[0].clone()).map(|o| vec![o])
        } else {
            self.journal().append_batch(batch.clone())
        };
        if !fired_before && let Some(call) = self.fired_call() {
            self.stats.fired.push((Phase::Append, call));
        }
        if stopped {
            // A fail-stopped journal checks the input, then refuses before deciding anything.
            match (expect, result) {
                (Expect::Input(kind), Err(AppendError::Input(e))) => {
                    assert_eq!(input_kind(&e), kind, "input refusal of {batch:?}");
                }
                (Expect::Input(kind), other) => {
                    panic!("append {batch:?}\n  expected the input error {kind:?}, got {other:?}")
                }
                (_, Err(AppendError::FailStopped)) => self.stats.refused_stopped += 1,
                (_, other) => panic!(
                    "a fail-stopped journal must refuse {batch:?} with FailStopped, got {other:?}"
                ),
            }
            let calls = self.countdown.as_ref().map(Countdown::calls);
            assert_eq!(
                calls, calls_before,
                "a fail-stopped journal touched the storage"
            );
            return;
        }
        match (expect, result) {
            (expect, Err(AppendError::MaybeCommitted { reason })) if self.fired() => {
                // The commit (or the reads deciding it) failed: the journal fail-stops, and the
                // append is in doubt until a reopen shows whether it reached the disk.
                assert!(
                    !matches!(expect, Expect::Input(_)),
                    "an invalid request reached storage: {batch:?} ({reason})"
                );
                assert!(
                    self.journal().is_fail_stopped(),
                    "MaybeCommitted ({reason}) without a fail-stop"
                );
                assert!(self.maybe.is_none(), "two appends in doubt");
                self.stats.maybe += 1;
                if let Expect::Ok(plans) = expect
                    && plans.iter().any(|p| matches!(p, PartExpect::Write))
                {
                    let mut with = self.model.clone();
                    for (part, plan) in batch.iter().zip(&plans) {
                        if matches!(plan, PartExpect::Write) {
                            let slot = self.slot(&part.stream);
                            for r in &part.records {
                                with.push(slot, r, None);
                            }
                        }
                    }
                    self.maybe = Some(Maybe { batch, with });
                }
            }
            (expect, result) => {
                let writes = matches!(&expect, Expect::Ok(plans)
                    if plans.iter().any(|p| matches!(p, PartExpect::Write)));
                self.check_result(&batch, expect, result);
                // A request that writes nothing (refused, or only replays) does not commit.
                let calls = self.countdown.as_ref().map(Countdown::calls);
                assert!(
                    writes || calls == calls_before,
                    "{batch:?} writes nothing, yet the storage calls went from {calls_before:?} \
                     to {calls:?}"
                );
                assert!(
                    self.fired() || !self.journal().is_fail_stopped(),
                    "fail-stopped with no injected failure, after {batch:?}"
                );
            }
        }
    }

    /// Checks an append's result against the model's prediction, and records an accepted one.
    fn check_result(
        &mut self,
        batch: &[StreamAppend],
        expect: Expect,
        result: Result<Vec<AppendOutcome>, AppendError>,
    ) {
        match (expect, result) {
            (Expect::Ok(plans), Ok(outcomes)) => self.apply(batch, plans, outcomes),
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
                    ..
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
                        .map(|r| (r.revision, r.position, Some(r.digest)))
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
                        assert_ne!(a.digest, Digest::ZERO);
                        let (revision, position) = self.model.push(slot, r, Some(a.digest));
                        assert_eq!(a.revision, revision, "revisions are contiguous");
                        assert_eq!(a.position, position, "positions are gap-free, in order");
                    }
                }
            }
        }
    }

    // ----- reads -----

    /// The models the journal may hold now: the model and, while an append is in doubt, the model
    /// with it.
    fn candidates(&self) -> impl Iterator<Item = &Model> {
        std::iter::once(&self.model).chain(self.maybe.as_ref().map(|m| &m.with))
    }

    /// Panics unless `check` accepts one of the [`Self::candidates`].
    fn matches_one(&self, check: impl Fn(&Model) -> Result<(), String>) {
        let mut errors = Vec::new();
        for model in self.candidates() {
            match check(model) {
                Ok(()) => return,
                Err(e) => errors.push(e),
            }
        }
        panic!(
            "the journal disagrees with the model: {}",
            errors.join("\n  or: ")
        );
    }

    /// A read's records, or `None` when it failed after the countdown ran out (a typed storage
    /// error; any other failure panics).
    fn read<T>(&self, what: &str, result: Result<T, ReadError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(ReadError::Storage(_)) if self.fired() => None,
            Err(e) => panic!("{what}: {e:?}"),
        }
    }

    /// False when the read failed after the countdown ran out.
    fn check_read_stream(&self, slot: usize, from: u64, max: usize) -> bool {
        let got = self.journal().read_stream(&self.ids[slot], from, max);
        let Some(got) = self.read("read_stream", got) else {
            return false;
        };
        self.matches_one(|m| m.check_stream(&self.ids, slot, from, max, &got));
        true
    }

    fn check_read_all(&self, from: u64, max: usize) {
        let got = self.journal().read_all(from, max);
        if let Some(got) = self.read("read_all", got) {
            self.matches_one(|m| m.check_all(&self.ids, from, max, &got));
        }
    }

    fn check_heads(&self) {
        let journal = self.journal();
        let Some(head) = self.read("head_position", journal.head_position()) else {
            return;
        };
        let mut heads = Vec::new();
        for id in &self.ids {
            let Some(h) = self.read("stream_head", journal.stream_head(id)) else {
                return;
            };
            heads.push(h);
        }
        self.matches_one(|m| m.check_heads(head, &heads));
    }

    fn verify_clean(&self) {
        let report = match self.journal().verify() {
            Ok(r) => r,
            Err(VerifyError::Storage(_)) if self.fired() => return,
            Err(e) => panic!("verify: {e:?}"),
        };
        assert!(report.is_ok(), "verify found failures: {report:?}");
        self.matches_one(|m| {
            let want = (m.order.len() as u64, m.streams_in_use());
            if (report.records, report.streams) == want {
                Ok(())
            } else {
                Err(format!("verify counted {report:?}, the model has {want:?}"))
            }
        });
    }
}

// ------------------------------------------------------------------------------------------------
// Encoding: the bytes `arbitrary` decodes back into a program (for seeds and tests)
// ------------------------------------------------------------------------------------------------

/// The four bytes of a derived enum's variant choice: `arbitrary` takes a `u32` `x` and picks
/// variant `(x * count) >> 32`.
fn variant(out: &mut Vec<u8>, index: u64, count: u64) {
    let x = u32::try_from((index << 32).div_ceil(count)).unwrap_or(u32::MAX);
    out.extend_from_slice(&x.to_le_bytes());
}

fn option(out: &mut Vec<u8>, value: Option<u8>) {
    match value {
        Some(n) => out.extend([1, n]),
        None => out.push(0),
    }
}

/// A collection continues while a `bool` says so.
fn list<T>(out: &mut Vec<u8>, items: &[T], encode: impl Fn(&T, &mut Vec<u8>)) {
    for item in items {
        out.push(1);
        encode(item, out);
    }
    out.push(0);
}

impl Program {
    /// The bytes `Program::arbitrary_take_rest` (what libFuzzer's `fuzz_target!` calls) decodes
    /// back into this program: seeds for the corpus.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        option(&mut out, self.create);
        list(&mut out, &self.ops, Op::encode);
        out
    }
}

impl Op {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 9;
        match self {
            Op::Append { first, more } => {
                variant(out, 0, N);
                first.encode(out);
                list(out, more, PartSpec::encode);
            }
            Op::AppendEmpty {
                empty_stream,
                stream,
            } => {
                variant(out, 1, N);
                out.extend([u8::from(*empty_stream), *stream]);
            }
            Op::Retry { nth } => {
                variant(out, 2, N);
                out.push(*nth);
            }
            Op::RetryAltered {
                nth,
                part,
                record,
                how,
            } => {
                variant(out, 3, N);
                out.extend([*nth, *part, *record, *how]);
            }
            Op::ReadStream { stream, from, max } => {
                variant(out, 4, N);
                out.extend([*stream, *from, *max]);
            }
            Op::ReadAll { from, max } => {
                variant(out, 5, N);
                out.extend([*from, *max]);
            }
            Op::Head { stream } => {
                variant(out, 6, N);
                out.push(*stream);
            }
            Op::Verify => variant(out, 7, N),
            Op::Reopen { arm } => {
                variant(out, 8, N);
                option(out, *arm);
            }
        }
    }
}

impl PartSpec {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend([self.stream, self.expected]);
        self.first.encode(out);
        list(out, &self.more, RecordSpec::encode);
    }
}

impl RecordSpec {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend([self.event, self.kind, self.at, self.size]);
        list(out, &self.payload, |b, out| out.push(*b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Expected-revision picks of [`PartSpec::expected`].
    const HEAD: u8 = 0;
    const ANY: u8 = 8;
    const NO_STREAM: u8 = 10;

    fn rec(event: u8, payload: &[u8]) -> RecordSpec {
        RecordSpec {
            event,
            kind: 0,
            at: 1,
            size: 0,
            payload: payload.to_vec(),
        }
    }

    /// A record with a [`BIG_PAYLOAD`].
    fn big(event: u8, payload: &[u8]) -> RecordSpec {
        RecordSpec {
            size: 7,
            ..rec(event, payload)
        }
    }

    /// An append of `(stream, expected, records)` parts.
    fn append(parts: Vec<(u8, u8, Vec<RecordSpec>)>) -> Op {
        let mut parts = parts.into_iter().map(|(stream, expected, mut records)| {
            let first = if records.is_empty() {
                rec(12, b"")
            } else {
                records.remove(0)
            };
            PartSpec {
                stream,
                expected,
                first,
                more: records,
            }
        });
        let first = parts.next().unwrap_or_else(|| PartSpec {
            stream: 0,
            expected: ANY,
            first: rec(12, b""),
            more: Vec::new(),
        });
        Op::Append {
            first,
            more: parts.collect(),
        }
    }

    /// Appends, retries, refusals and reads with one plain reopen (no failure injected).
    fn basic() -> Program {
        Program {
            create: None,
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
                Op::Reopen { arm: None },
                Op::ReadStream {
                    stream: 0,
                    from: 2,
                    max: 5,
                },
                Op::ReadAll { from: 0, max: 7 },
                Op::Head { stream: 1 },
                Op::Verify,
            ],
        }
    }

    /// Two appends, a reopen armed with `n`, then a multi-stream batch, a single-stream append
    /// and a retry through the armed journal, reads, and a plain reopen and retries of both.
    fn armed(n: u8) -> Program {
        Program {
            create: None,
            ops: vec![
                append(vec![(0, HEAD, vec![rec(0, b"a"), rec(1, b"b")])]),
                append(vec![(1, HEAD, vec![rec(12, b"c")])]),
                Op::Reopen { arm: Some(n) },
                append(vec![
                    (0, HEAD, vec![rec(2, b"d"), big(12, b"e")]),
                    (1, HEAD, vec![rec(3, b"f")]),
                    (2, NO_STREAM, vec![rec(12, b"g")]),
                ]),
                append(vec![(2, ANY, vec![big(4, b"h")])]),
                Op::Retry { nth: 3 },
                append(vec![(0, ANY, vec![rec(31, b"")])]),
                Op::ReadAll { from: 0, max: 7 },
                Op::ReadStream {
                    stream: 0,
                    from: 1,
                    max: 5,
                },
                Op::Verify,
                Op::Reopen { arm: None },
                Op::Retry { nth: 3 },
                Op::Retry { nth: 4 },
                append(vec![(1, ANY, vec![rec(5, b"i")])]),
            ],
        }
    }

    /// The first open, which creates the database, armed with `n`; then appends and a plain reopen.
    fn create_armed(n: u8) -> Program {
        Program {
            create: Some(n),
            ops: vec![
                append(vec![(0, HEAD, vec![rec(0, b"a")])]),
                append(vec![
                    (1, ANY, vec![rec(1, b"b")]),
                    (2, ANY, vec![rec(2, b"c")]),
                ]),
                Op::ReadAll { from: 1, max: 7 },
                Op::Reopen { arm: None },
                Op::Retry { nth: 1 },
            ],
        }
    }

    /// The hand-written programs committed as seeds. Where each countdown runs out (see
    /// `a_failure_at_each_kind_of_mutating_call`): `armed(1)` at the open's sync, `armed(2)`
    /// growing the file for the batch, `armed(8)` at a write of the batch, `armed(13)` at the
    /// batch's last sync (the batch lands), `armed(30)` at the close; `create_armed(3)` while
    /// creating the database, `create_armed(32)` at the last sync of the second append.
    fn programs() -> Vec<(&'static str, Program)> {
        vec![
            ("seed-basic", basic()),
            ("seed-armed-open", armed(1)),
            ("seed-armed-grow", armed(2)),
            ("seed-armed-write", armed(8)),
            ("seed-armed-landed", armed(13)),
            ("seed-armed-close", armed(30)),
            ("seed-create-armed", create_armed(3)),
            ("seed-create-landed", create_armed(32)),
        ]
    }

    fn decode(bytes: &[u8]) -> arbitrary::Result<Program> {
        Program::arbitrary_take_rest(arbitrary::Unstructured::new(bytes))
    }

    #[test]
    fn programs_encode_to_the_bytes_that_decode_to_them() {
        for (name, program) in programs() {
            match decode(&program.to_bytes()) {
                Ok(decoded) => assert_eq!(decoded, program, "{name}"),
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }

    /// The files `corpus/journal_model/seed-*` are the programs built here (rewrite them with
    /// `CTX_FUZZ_WRITE_SEEDS=1 cargo test --release journal_model`).
    #[test]
    fn committed_seeds_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/journal_model");
        let write = std::env::var_os("CTX_FUZZ_WRITE_SEEDS").is_some();
        for (name, program) in programs() {
            let path = dir.join(name);
            let bytes = program.to_bytes();
            if write
                && let Err(e) =
                    std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &bytes))
            {
                panic!("writing {}: {e}", path.display());
            }
            match std::fs::read(&path) {
                Ok(on_disk) => assert!(on_disk == bytes, "{} is stale", path.display()),
                Err(e) => panic!("{}: {e} (CTX_FUZZ_WRITE_SEEDS=1 writes it)", path.display()),
            }
        }
    }

    #[test]
    fn a_hand_written_program_passes() {
        let stats = run_counted(&basic());
        assert!(stats.fired.is_empty(), "{stats:?}");
        for (_, program) in programs() {
            run(&program);
        }
    }

    /// Every countdown from 0 to 40 through the armed reopen of [`armed`]: the failure lands on
    /// each kind of mutating call, in the open, the appends and the close; some appends in doubt
    /// reached the disk and some did not, and the fail-stopped journal refused the rest.
    #[test]
    fn a_failure_at_each_kind_of_mutating_call() {
        let mut fired = HashSet::new();
        let mut total = Stats::default();
        for n in 0..=MAX_COUNTDOWN {
            let stats = run_counted(&armed(n));
            assert!(stats.fired.len() <= 1, "n = {n}: {stats:?}");
            fired.extend(stats.fired.iter().copied());
            total.open_failures += stats.open_failures;
            total.maybe += stats.maybe;
            total.landed += stats.landed;
            total.lost += stats.lost;
            total.refused_stopped += stats.refused_stopped;
        }
        for call in [Call::Write, Call::SetLen, Call::SyncData] {
            assert!(fired.contains(&(Phase::Append, call)), "{fired:?}");
        }
        for phase in [Phase::Open, Phase::Close] {
            assert!(fired.contains(&(phase, Call::Write)), "{fired:?}");
            assert!(fired.contains(&(phase, Call::SyncData)), "{fired:?}");
        }
        assert!(total.maybe > 0 && total.refused_stopped > 0, "{total:?}");
        assert!(total.landed > 0 && total.lost > 0, "{total:?}");
    }

    /// Every countdown through the open that creates the database: some opens fail (with a typed
    /// error, at each kind of call), and the directory then opens as an empty journal.
    #[test]
    fn a_failure_while_creating_leaves_an_empty_journal() {
        let mut fired = HashSet::new();
        let mut failures = 0;
        for n in 0..=MAX_COUNTDOWN {
            let stats = run_counted(&create_armed(n));
            fired.extend(stats.fired.iter().copied());
            failures += stats.open_failures;
        }
        for call in [Call::Write, Call::SetLen, Call::SyncData] {
            assert!(fired.contains(&(Phase::Create, call)), "{fired:?}");
        }
        assert!(failures > 0, "{fired:?}");
    }

    /// Runs `ops` on a fresh journal, lets `doctor` change the harness, then reopens: the reopen's
    /// checks must panic with a message containing `expected`.
    fn doctored(ops: &[Op], doctor: impl FnOnce(&mut Harness), expected: &str) {
        let _turn = turn();
        let dir = work_dir();
        crate::remove_dir(dir);
        let mut h = Harness::new(dir.clone(), None);
        for (step, op) in ops.iter().enumerate() {
            h.step(step, op);
        }
        doctor(&mut h);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.reopen(None)));
        drop(h);
        crate::remove_dir(dir);
        let Err(panic) = caught else {
            panic!("the doctored model passed the checks");
        };
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        assert!(message.contains(expected), "{message}");
    }

    #[test]
    fn the_checker_is_not_vacuous() {
        let ops = [
            append(vec![(0, HEAD, vec![rec(0, b"a"), rec(1, b"b")])]),
            append(vec![
                (1, HEAD, vec![rec(2, b"c")]),
                (2, HEAD, vec![rec(3, b"d"), rec(4, b"e")]),
            ]),
        ];
        // An acknowledged payload the journal does not hold.
        doctored(
            &ops,
            |h| h.model.streams[0][1].payload.push(b'!'),
            "is not the model",
        );
        // An acknowledged record the journal does not hold.
        doctored(
            &ops,
            |h| {
                let mut extra = h.model.clone();
                extra.push(1, &NewRecord::new("e5", "k.a", Timestamp(0), "z"), None);
                h.model = extra;
            },
            "is not the model",
        );
        // The batch in doubt, with a candidate holding only its first part: the journal, which
        // holds all of it, matches neither.
        doctored(
            &ops,
            |h| {
                let mut without = Model::new();
                for (k, &(slot, index)) in h.model.order.iter().enumerate().take(2) {
                    let m = &h.model.streams[slot][index];
                    let r =
                        NewRecord::new(m.event_id.clone(), m.kind.clone(), m.at, m.payload.clone());
                    let (_, position) = without.push(slot, &r, m.digest);
                    assert_eq!(position, k as u64 + 1);
                }
                let mut half = without.clone();
                let m = &h.model.streams[1][0];
                half.push(
                    1,
                    &NewRecord::new(m.event_id.clone(), m.kind.clone(), m.at, m.payload.clone()),
                    None,
                );
                h.model = without;
                h.maybe = Some(Maybe {
                    batch: h.history[1].clone(),
                    with: half,
                });
            },
            "holds neither",
        );
        // A stale replay prediction: the digest of an acknowledged record is wrong.
        doctored(
            &ops,
            |h| h.model.streams[2][1].digest = Some(Digest::ZERO),
            "is not the model",
        );
    }

    #[test]
    fn arbitrary_programs_pass() {
        // Deterministic pseudo-random inputs through the same decoding libFuzzer uses.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..120 {
            let bytes: Vec<u8> = (0..256)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if let Ok(program) = decode(&bytes) {
                run(&program);
            }
        }
    }
}
