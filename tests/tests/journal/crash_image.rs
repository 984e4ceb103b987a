//! Crash images: the file a power cut would leave, at every sync point of a real workload.
//!
//! A [`StorageWrapper`] records every write, length change and sync redb makes to
//! `journal.redb` (the file's content when it is opened is the durable base: a new journal is
//! created under another name, synced and renamed into place). After the workload, for every
//! sync point `k` the test materializes several images of the file:
//!
//! - `synced`: the base plus every operation up to and including the `k`-th sync — what survives
//!   when everything after it is lost;
//! - `flushed`: plus every operation before the next sync — what a crash of the process alone
//!   leaves (the page cache reaches the disk);
//! - `torn`: plus a random subset of the operations before the next sync, each write possibly
//!   torn into a random subset of its 512-byte sectors (two seeds per sync point);
//! - `extension lost`: plus the writes before the next sync that fall inside the synced length,
//!   with the file extension (and whatever was written past the old end) lost.
//!
//! Each image is reopened as a journal (with the same installation key) and must hold:
//! - every append acknowledged at or before sync `k` (an append is acknowledged at the number of
//!   syncs done when it returned), and nothing beyond the appends acknowledged by the next sync;
//! - a prefix of the workload's records in position order, byte for byte, ending at a batch
//!   boundary (a multi-stream batch is all there or not at all);
//! - a clean `verify` (digests, MACs, chains, gap-free positions, head and event-id indexes);
//! - a projection (maintained by a hook in each append's transaction) that agrees with its
//!   records: a record count and last digest per stream, and a total;
//! - idempotency: re-appending the last present batch returns its original positions and writes
//!   nothing, and a new append lands right after it.
//!
//! The recorder itself is checked: replaying every recorded operation reproduces the file on
//! disk byte for byte. `CTX_CRASH_IMAGE_APPENDS` sets the workload's size (default 40 batches).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use ctx_journal::files::{DATABASE_FILE, KEY_FILE};
use ctx_journal::{
    Digest, ExpectedRevision, FileBackend, HookError, HookTxn, Journal, NewRecord, ProjectionHook,
    Record, RecordView, StorageBackend as _, StorageInterceptor, StorageWrapper, StreamAppend,
    StreamId, Timestamp,
};

use crate::support::{self, Rng};

const KIND: &str = "crash-image.kind";
const STREAMS: usize = 4;
const SECTOR_BYTES: usize = 512;
const COUNTS_TABLE: &str = "proj.crash_image.counts";
const TOTAL_KEY: &[u8] = b"total";

fn appends() -> usize {
    std::env::var("CTX_CRASH_IMAGE_APPENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

fn stream_id(index: usize) -> StreamId {
    support::stream(&format!("crash-image-{index}"))
}

// ----- the recording backend -----

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
    Sync,
}

#[derive(Debug, Default)]
struct Log {
    /// The database file's content when it was opened.
    base: Option<Vec<u8>>,
    ops: Vec<Op>,
    syncs: usize,
}

fn lock(log: &Mutex<Log>) -> std::sync::MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone, Default)]
struct Recorder {
    log: Arc<Mutex<Log>>,
}

impl Recorder {
    fn syncs(&self) -> usize {
        lock(&self.log).syncs
    }
}

impl StorageWrapper for Recorder {
    fn wrap(&self, path: &Path, file: &FileBackend) -> Option<Arc<dyn StorageInterceptor>> {
        // Only the journal's own file is recorded; the creating file is renamed into place
        // after a sync, so its content is the base read here.
        if path.file_name().and_then(|n| n.to_str()) != Some(DATABASE_FILE) {
            return None;
        }
        let len = file.len().expect("the database file's length");
        let mut base = vec![0; usize::try_from(len).expect("a small file")];
        file.read(0, &mut base)
            .expect("the database file's content");
        let mut log = lock(&self.log);
        assert!(log.base.is_none(), "the recorder wraps one open only");
        log.base = Some(base);
        drop(log);
        Some(Arc::new(Recording {
            log: self.log.clone(),
        }))
    }
}

/// Records every length change, sync and write after it reached the file.
struct Recording {
    log: Arc<Mutex<Log>>,
}

impl StorageInterceptor for Recording {
    fn set_len(&self, file: &FileBackend, len: u64) -> Result<(), std::io::Error> {
        file.set_len(len)?;
        lock(&self.log).ops.push(Op::SetLen(len));
        Ok(())
    }
    fn sync_data(&self, file: &FileBackend) -> Result<(), std::io::Error> {
        file.sync_data()?;
        let mut log = lock(&self.log);
        log.ops.push(Op::Sync);
        log.syncs += 1;
        Ok(())
    }
    fn write(&self, file: &FileBackend, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        file.write(offset, data)?;
        lock(&self.log).ops.push(Op::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }
}

// ----- images -----

fn apply_write(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = usize::try_from(offset).expect("a small file");
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, data } => apply_write(image, *offset, data),
        Op::SetLen(len) => image.resize(usize::try_from(*len).expect("a small file"), 0),
        Op::Sync => {}
    }
}

/// A write torn into a random subset of its sectors (sectors are aligned to the file, as a
/// disk's are).
fn apply_torn(image: &mut Vec<u8>, offset: u64, data: &[u8], rng: &mut Rng) {
    let mut at = 0usize;
    while at < data.len() {
        let absolute = offset as usize + at;
        let sector_end = (absolute / SECTOR_BYTES + 1) * SECTOR_BYTES;
        let end = data.len().min(at + (sector_end - absolute));
        if rng.below(2) == 0 {
            apply_write(image, (offset as usize + at) as u64, &data[at..end]);
        }
        at = end;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Synced,
    Flushed,
    Torn(u64),
    ExtensionLost,
}

/// The images a power cut would leave at each sync point, built incrementally: the synced image
/// of sync point `k` (1-based: after the `k`-th sync; 0: the base) is kept and advanced.
struct Images<'a> {
    log: &'a Log,
    synced: Vec<u8>,
    /// Index in `log.ops` of the first operation after sync point `k`.
    next_op: usize,
}

impl<'a> Images<'a> {
    fn new(log: &'a Log) -> Images<'a> {
        Images {
            log,
            synced: log.base.clone().expect("the recorder saw the open"),
            next_op: 0,
        }
    }

    /// The operations between the current sync point and the next.
    fn pending(&self) -> &'a [Op] {
        let ops = &self.log.ops[self.next_op..];
        let end = ops
            .iter()
            .position(|op| matches!(op, Op::Sync))
            .unwrap_or(ops.len());
        &ops[..end]
    }

    /// Moves to the next sync point; false when there is none.
    fn advance(&mut self) -> bool {
        let pending = self.pending();
        let next = self.next_op + pending.len();
        if next >= self.log.ops.len() {
            return false;
        }
        for op in pending {
            apply(&mut self.synced, op);
        }
        self.next_op = next + 1;
        true
    }

    fn image(&self, variant: Variant) -> Vec<u8> {
        let mut image = self.synced.clone();
        let pending = self.pending();
        match variant {
            Variant::Synced => {}
            Variant::Flushed => pending.iter().for_each(|op| apply(&mut image, op)),
            Variant::Torn(seed) => {
                let mut rng = Rng::new(seed);
                for op in pending {
                    match (op, rng.below(3)) {
                        (_, 0) => {}
                        (Op::Write { offset, data }, 1) => {
                            apply_torn(&mut image, *offset, data, &mut rng)
                        }
                        (op, _) => apply(&mut image, op),
                    }
                }
            }
            Variant::ExtensionLost => {
                let len = image.len();
                for op in pending {
                    if let Op::Write { offset, data } = op {
                        let start = usize::try_from(*offset).expect("a small file");
                        if start < len {
                            let keep = data.len().min(len - start);
                            apply_write(&mut image, *offset, &data[..keep]);
                        }
                    }
                }
            }
        }
        image
    }
}

// ----- the projection -----

/// Per stream: its record count and last digest; under [`TOTAL_KEY`], every record's count.
struct Counts;

impl ProjectionHook for Counts {
    fn name(&self) -> &str {
        "crash-image-counts"
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let key = record.stream.as_bytes();
        let count = tx.get(COUNTS_TABLE, key.as_slice(), |v| {
            v.map_or(0, |v| {
                u64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]))
            })
        })?;
        let mut value = (count + 1).to_le_bytes().to_vec();
        value.extend_from_slice(record.digest.as_bytes());
        tx.insert(COUNTS_TABLE, key.as_slice(), &value)?;
        let total = tx.get(COUNTS_TABLE, TOTAL_KEY, |v| {
            v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or([0; 8])))
        })?;
        tx.insert(COUNTS_TABLE, TOTAL_KEY, &(total + 1).to_le_bytes())?;
        Ok(())
    }
}

// ----- the workload -----

/// One acknowledged batch: what was appended, and the sync count when it returned.
struct Acked {
    batch: Vec<StreamAppend>,
    /// The global position of the batch's last record.
    last_position: u64,
    syncs: usize,
}

fn batch(rng: &mut Rng, seq: usize) -> Vec<StreamAppend> {
    let streams = if rng.below(4) == 0 {
        2 + rng.below(2)
    } else {
        1
    } as usize;
    let first = rng.below(STREAMS as u64) as usize;
    (0..streams)
        .map(|i| {
            let stream = stream_id((first + i) % STREAMS);
            let records = (0..1 + rng.below(3))
                .map(|r| {
                    let event_id = format!("image-{seq}-{i}-{r}");
                    // Some large payloads, so that redb grows its file during the workload.
                    let payload = if rng.below(8) == 0 {
                        let mut big = support::payload_for(&event_id);
                        big.resize(24 * 1024 + rng.below(16 * 1024) as usize, 0x5a);
                        big
                    } else {
                        support::payload_for(&event_id)
                    };
                    NewRecord::new(event_id, KIND, Timestamp(seq as i64), payload)
                })
                .collect();
            StreamAppend::new(stream, ExpectedRevision::Any, records)
        })
        .collect()
}

fn all_records(journal: &Journal) -> Vec<Record> {
    journal.read_all(1, usize::MAX).expect("read every record")
}

fn read_image_file(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(DATABASE_FILE)).expect("read the database file")
}

#[test]
fn every_power_cut_image_reopens_with_every_acknowledged_append() {
    let _shared = support::shared();
    let source = support::tempdir();
    let recorder = Recorder::default();
    let mut rng = Rng::from_time();
    let seed = rng.next_u64();
    let mut rng = Rng::new(seed);
    let mut acked = Vec::new();
    let truth = {
        let options = support::options().storage_wrapper(Arc::new(recorder.clone()));
        let journal = Journal::open(source.path(), &options).expect("open the recorded journal");
        journal.register_hook(Arc::new(Counts));
        for seq in 0..appends() {
            let batch = batch(&mut rng, seq);
            let outcomes = journal
                .append_batch(batch.clone())
                .unwrap_or_else(|e| panic!("append {seq} (seed {seed}): {e}"));
            let last_position = outcomes
                .iter()
                .flat_map(|o| o.records.iter().map(|r| r.position))
                .max()
                .expect("a batch has records");
            acked.push(Acked {
                batch,
                last_position,
                syncs: recorder.syncs(),
            });
        }
        all_records(&journal)
    };
    let log = lock(&recorder.log);
    assert!(
        log.syncs >= acked.len(),
        "{} syncs for {} acknowledged appends",
        log.syncs,
        acked.len()
    );
    let target = support::tempdir();
    std::fs::copy(source.path().join(KEY_FILE), target.path().join(KEY_FILE))
        .expect("copy the installation key");
    let mut images = Images::new(&log);
    // Per variant: images checked, and images holding a batch not yet acknowledged.
    let mut stats: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut k = 0;
    loop {
        let torn = seed ^ ((k as u64) << 1);
        let variants = [
            ("synced", Variant::Synced),
            ("flushed", Variant::Flushed),
            ("torn", Variant::Torn(torn)),
            ("torn", Variant::Torn(torn | 1)),
            ("extension lost", Variant::ExtensionLost),
        ];
        for (name, variant) in variants {
            let context = format!("sync point {k}, {variant:?} (seed {seed})");
            let ahead = check_image(
                target.path(),
                &images.image(variant),
                k,
                &acked,
                &truth,
                &context,
            );
            let entry = stats.entry(name).or_default();
            entry.0 += 1;
            entry.1 += usize::from(ahead);
        }
        if !images.advance() {
            break;
        }
        k += 1;
    }
    assert_eq!(k, log.syncs, "sync points visited");
    // The journal is closed: the recorded operations must reproduce the file exactly.
    assert!(
        images.image(Variant::Flushed) == read_image_file(source.path()),
        "replaying the recorded operations does not reproduce the file (seed {seed})"
    );
    eprintln!(
        "crash images: {} batches, {} syncs, {} operations ({} length changes); per variant (images, holding an \
         unacknowledged batch): {stats:?}",
        acked.len(),
        log.syncs,
        log.ops.len(),
        log.ops
            .iter()
            .filter(|op| matches!(op, Op::SetLen(_)))
            .count()
    );
}

/// Reopens `bytes` as the journal of `dir` and checks it (see the module documentation).
fn check_image(
    dir: &Path,
    bytes: &[u8],
    k: usize,
    acked: &[Acked],
    truth: &[Record],
    context: &str,
) -> bool {
    std::fs::write(dir.join(DATABASE_FILE), bytes).expect("write the image");
    let journal = Journal::open(dir, &support::options())
        .unwrap_or_else(|e| panic!("{context}: the image does not open: {e}"));
    journal.register_hook(Arc::new(Counts));
    let report = journal
        .verify()
        .unwrap_or_else(|e| panic!("{context}: verify failed: {e}"));
    assert!(report.is_ok(), "{context}: verify: {report:?}");

    let present = all_records(&journal);
    let durable = acked.iter().filter(|a| a.syncs <= k).count();
    let possible = acked.iter().filter(|a| a.syncs <= k + 1).count();
    let boundary = acked
        .iter()
        .position(|a| a.last_position == present.len() as u64)
        .map(|i| i + 1)
        .or((present.is_empty()).then_some(0))
        .unwrap_or_else(|| {
            panic!(
                "{context}: {} records present, which is not a batch boundary",
                present.len()
            )
        });
    assert!(
        (durable..=possible).contains(&boundary),
        "{context}: {boundary} batches present; acknowledged by this sync point: {durable}, by \
         the next: {possible}"
    );
    assert_eq!(
        present.as_slice(),
        &truth[..present.len()],
        "{context}: the present records are not the workload's prefix"
    );

    // The projection agrees with the records it was maintained from.
    let mut expected: BTreeMap<[u8; 32], (u64, Digest)> = BTreeMap::new();
    for record in &present {
        let entry = expected
            .entry(*record.stream.as_bytes())
            .or_insert((0, Digest::ZERO));
        *entry = (entry.0 + 1, record.digest);
    }
    for index in 0..STREAMS {
        let stream = stream_id(index);
        let stored = journal
            .projection_get(COUNTS_TABLE, stream.as_bytes().as_slice(), |v| {
                v.map(<[u8]>::to_vec)
            })
            .unwrap_or_else(|e| panic!("{context}: projection read: {e}"));
        let want = expected.get(stream.as_bytes()).map(|(count, digest)| {
            let mut v = count.to_le_bytes().to_vec();
            v.extend_from_slice(digest.as_bytes());
            v
        });
        assert_eq!(stored, want, "{context}: projection of stream {index}");
    }
    let total = journal
        .projection_get(COUNTS_TABLE, TOTAL_KEY, |v| v.map(<[u8]>::to_vec))
        .unwrap_or_else(|e| panic!("{context}: projection read: {e}"));
    let want_total = (!present.is_empty()).then(|| (present.len() as u64).to_le_bytes().to_vec());
    assert_eq!(total, want_total, "{context}: projection total");

    // Idempotency survives the cut, and the journal takes a new append right after the prefix.
    if boundary > 0 {
        let last = &acked[boundary - 1];
        let outcomes = journal
            .append_batch(last.batch.clone())
            .unwrap_or_else(|e| panic!("{context}: retry of the last present batch: {e}"));
        assert!(
            outcomes.iter().all(|o| o.replayed),
            "{context}: the retried batch was not replayed"
        );
        let last_position = outcomes
            .iter()
            .flat_map(|o| o.records.iter().map(|r| r.position))
            .max();
        assert_eq!(last_position, Some(last.last_position), "{context}");
    }
    let fresh = StreamAppend::new(
        stream_id(0),
        ExpectedRevision::Any,
        vec![NewRecord::new("after-the-cut", KIND, Timestamp(0), vec![1])],
    );
    let outcome = journal
        .append(fresh)
        .unwrap_or_else(|e| panic!("{context}: a new append after the cut: {e}"));
    assert_eq!(
        outcome.records[0].position,
        present.len() as u64 + 1,
        "{context}: the new append's position"
    );
    drop(journal);
    boundary > durable
}

#[test]
fn a_lost_synced_write_is_detected_by_the_image_checks() {
    // The checker must not be vacuous: an image that loses acknowledged data fails it. The
    // earliest image (before any append) cannot hold the first acknowledged append.
    let _shared = support::shared();
    let source = support::tempdir();
    let recorder = Recorder::default();
    let mut rng = Rng::new(7);
    let mut acked = Vec::new();
    let truth = {
        let options = support::options().storage_wrapper(Arc::new(recorder.clone()));
        let journal = Journal::open(source.path(), &options).expect("open");
        journal.register_hook(Arc::new(Counts));
        for seq in 0..3 {
            let batch = batch(&mut rng, seq);
            let outcomes = journal.append_batch(batch.clone()).expect("append");
            let last_position = outcomes
                .iter()
                .flat_map(|o| o.records.iter().map(|r| r.position))
                .max()
                .expect("records");
            acked.push(Acked {
                batch,
                last_position,
                syncs: recorder.syncs(),
            });
        }
        all_records(&journal)
    };
    let log = lock(&recorder.log);
    let target = support::tempdir();
    std::fs::copy(source.path().join(KEY_FILE), target.path().join(KEY_FILE)).expect("key");
    let base = Images::new(&log).image(Variant::Synced);
    // Claim the base image is the state after the last sync: every append should be there.
    let last = log.syncs;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_image(target.path(), &base, last, &acked, &truth, "doctored");
    }));
    let message = result.expect_err("an image without the acknowledged appends passed");
    let text = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(text.contains("batches present"), "{text}");
}
