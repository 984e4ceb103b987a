//! Journals with record values of both versions (spec/journal.md §4, §11): a journal whose values
//! are all version 1 (as builds before payload compression wrote them) opens, reads, verifies,
//! takes new version-2 appends, and exports into an import whose every value is version 2 with
//! the same digests; a compressed value damaged on disk is a corruption, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::ops::ControlFlow;
use std::path::Path;

use ctx_journal::{
    Digest, ExpectedRevision, FailureKind, ImportError, ImportRecord, Journal, NewRecord,
    OpenOptions, ReadError, StreamAppend, StreamId, Timestamp, decode_record_value, files,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("journal.meta");
/// Prefix bytes 4..8: version u16 LE, then (version 2) codec and reserved byte.
const V1: [u8; 4] = [1, 0, 0, 0];
const V2_STORED: [u8; 4] = [2, 0, 0, 0];
/// Codec 2: zstd with the records dictionary, what this build writes (spec/journal.md §4).
const V2_ZSTD: [u8; 4] = [2, 0, 2, 0];
/// Payloads shorter than this are never compressed (`PAYLOAD_COMPRESS_MIN_BYTES`).
const COMPRESS_MIN_BYTES: usize = 64;

fn options() -> OpenOptions {
    OpenOptions::new().key_source(|| Ok([7; 32]))
}

/// Canonical-JSON-like text of about `len` bytes, compressible as the engine's records are.
fn json_payload(len: usize) -> Vec<u8> {
    let mut out = String::from("{\"actions\":[");
    let mut i = 0u64;
    while out.len() < len {
        out.push_str(&format!(
            "{{\"capability\":\"skill.{i}\",\"digest\":\"{:016x}{:016x}\",\"mode\":\"install\"}},",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ));
        i += 1;
    }
    out.truncate(len);
    out.into_bytes()
}

/// Bytes no codec shrinks (xorshift64*).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Records of several shapes in two streams, appended in three multi-stream batches.
fn populate(journal: &Journal) -> usize {
    let shapes = [
        json_payload(4_000),
        b"{}".to_vec(),
        noise(1_000, 5),
        json_payload(300),
        Vec::new(),
        json_payload(60_000),
    ];
    let mut count = 0;
    for batch in 0..3 {
        let mut parts = Vec::new();
        for (s, key) in [b"a", b"b"].iter().enumerate() {
            let records: Vec<NewRecord> = shapes
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    NewRecord::new(
                        format!("e-{batch}-{s}-{i}"),
                        "codec.kind",
                        Timestamp(i as i64),
                        p.clone(),
                    )
                })
                .collect();
            count += records.len();
            parts.push(StreamAppend::new(
                StreamId::derive("codec.journal", *key).unwrap(),
                ExpectedRevision::Any,
                records,
            ));
        }
        journal.append_batch(parts).unwrap();
    }
    count
}

/// Every stored value of a closed journal, in position order.
fn stored_values(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(RECORDS).unwrap();
    table
        .iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect()
}

fn rewrite_values(dir: &Path, values: &[(u64, Vec<u8>)]) {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(RECORDS).unwrap();
        for (position, value) in values {
            table.insert(*position, value.as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
}

/// The journal format version in `journal.meta` of a closed journal.
fn meta_format(dir: &Path) -> u32 {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(META).unwrap();
    let value = table.get("format_version").unwrap().unwrap();
    u32::from_le_bytes(value.value().try_into().unwrap())
}

fn set_meta_format(dir: &Path, version: u32) {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(META).unwrap();
        table
            .insert("format_version", version.to_le_bytes().as_slice())
            .unwrap();
    }
    txn.commit().unwrap();
}

/// Where a value's stored payload starts: after the 12-byte prefix and the header.
fn body_offset(value: &[u8]) -> usize {
    12 + u32::from_le_bytes(value[8..12].try_into().unwrap()) as usize
}

/// The version-1 value of the same record: the header archive is the same in both versions
/// (its payload length is the uncompressed one), so version 1 is the prefix with bytes 4..8 =
/// 1, 0, 0, 0 and the payload after the header (`codec::tests` checks this against values the
/// last version-1 build wrote).
fn as_version_1(value: &[u8]) -> Vec<u8> {
    let record = decode_record_value(value).unwrap();
    let mut out = value[..body_offset(value)].to_vec();
    out[4..8].copy_from_slice(&V1);
    out.extend_from_slice(&record.payload);
    out
}

#[test]
fn a_version_1_journal_reads_verifies_and_imports_as_version_2_with_the_same_digests() {
    // A journal whose every value is version 1: written now, then each value rewritten as the
    // last version-1 build would have written it (same header, so the same D and MAC).
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), &options()).unwrap();
    let count = populate(&journal);
    let records = journal.read_all(1, usize::MAX).unwrap();
    assert_eq!(records.len(), count);
    drop(journal);
    let v2 = stored_values(dir.path());
    assert!(v2.iter().any(|(_, v)| v[4..8] == V2_ZSTD));
    assert!(v2.iter().any(|(_, v)| v[4..8] == V2_STORED));
    let v1: Vec<(u64, Vec<u8>)> = v2.iter().map(|(p, v)| (*p, as_version_1(v))).collect();
    rewrite_values(dir.path(), &v1);
    assert!(stored_values(dir.path()).iter().all(|(_, v)| v[4..8] == V1));
    // A version-1 build's journal says format version 1 in its meta.
    assert_eq!(meta_format(dir.path()), 2);
    set_meta_format(dir.path(), 1);

    // It opens (authenticating its tail with the MACs), reads and verifies; the open upgrades
    // the meta to format version 2 (spec/journal.md §11) and leaves every value as it was.
    drop(Journal::open(dir.path(), &options()).unwrap());
    assert_eq!(meta_format(dir.path()), 2);
    assert!(stored_values(dir.path()).iter().all(|(_, v)| v[4..8] == V1));
    let journal = Journal::open(dir.path(), &options()).unwrap();
    assert_eq!(journal.write_refusal(), None);
    assert_eq!(journal.read_all(1, usize::MAX).unwrap(), records);
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    let mut exported = Vec::new();
    journal
        .scan(1, |v| {
            exported.push(ImportRecord {
                stream: v.stream,
                revision: v.revision,
                position: v.position,
                record: NewRecord::new(v.event_id, v.kind, v.occurred_at, v.payload),
                previous_digest: v.previous_digest,
                digest: v.digest,
            });
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(exported.len(), count);

    // Imported into another installation, every value is version 2, with the same D.
    let target = tempfile::tempdir().unwrap();
    let imported = Journal::open(target.path(), &OpenOptions::new()).unwrap();
    imported
        .import(|imp| {
            for r in &exported {
                imp.push(r)?;
            }
            Ok::<_, ImportError>(())
        })
        .unwrap();
    assert_eq!(imported.read_all(1, usize::MAX).unwrap(), records);
    assert!(imported.verify().unwrap().is_ok());
    drop(imported);
    let values = stored_values(target.path());
    assert_eq!(values.len(), count);
    for ((_, value), record) in values.iter().zip(&records) {
        assert_eq!(decode_record_value(value).unwrap().digest, record.digest);
        // JSON is compressed from the threshold on, the noise and short payloads are not.
        let compressible =
            record.payload.len() >= COMPRESS_MIN_BYTES && record.payload.first() == Some(&b'{');
        let expected = if compressible { V2_ZSTD } else { V2_STORED };
        assert_eq!(value[4..8], expected, "{}", record.event_id);
    }

    // The version-1 journal keeps its values and appends version-2 ones after them.
    let stream = StreamId::derive("codec.journal", b"c").unwrap();
    let appended = journal
        .append(StreamAppend::new(
            stream,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                "after",
                "codec.kind",
                Timestamp(0),
                json_payload(500),
            )],
        ))
        .unwrap();
    assert_ne!(appended.records[0].digest, Digest::ZERO);
    assert!(journal.verify().unwrap().is_ok());
    drop(journal);
    let mixed = stored_values(dir.path());
    let (last, old) = mixed.split_last().unwrap();
    assert!(old.iter().all(|(_, v)| v[4..8] == V1));
    assert_eq!(last.1[4..8], V2_ZSTD);
    let journal = Journal::open(dir.path(), &options()).unwrap();
    assert_eq!(journal.read_all(1, usize::MAX).unwrap().len(), count + 1);
}

#[test]
fn a_damaged_compressed_record_in_a_journal_is_reported_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), &options()).unwrap();
    populate(&journal);
    drop(journal);
    let (position, mut value) = stored_values(dir.path())
        .into_iter()
        .find(|(_, v)| v[4..8] == V2_ZSTD)
        .unwrap();
    // The first byte of the zstd frame's magic number.
    let body = body_offset(&value);
    value[body] ^= 0xff;
    rewrite_values(dir.path(), &[(position, value)]);

    // The journal opens; the open's tail check refuses writes, naming the record.
    let journal = Journal::open(dir.path(), &options()).unwrap();
    let refusal = journal.write_refusal().unwrap();
    assert!(
        refusal.contains(&format!("position {position}")),
        "{refusal}"
    );
    match journal.scan(1, |_| ControlFlow::Continue(())).unwrap_err() {
        ReadError::Corrupt {
            position: at,
            reason,
        } => {
            assert_eq!(at, position);
            assert_eq!(reason, "compressed payload is not exactly one zstd frame");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let report = journal.verify().unwrap();
    let failure = report.first(FailureKind::Structure).unwrap();
    assert_eq!(failure.position, Some(position));
    assert_eq!(failure.count, 1);
}

#[test]
fn a_journal_of_a_newer_format_version_is_refused_at_open_with_the_versions_named() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), &options()).unwrap();
    populate(&journal);
    drop(journal);
    set_meta_format(dir.path(), 3);
    let error = Journal::open(dir.path(), &options()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "journal {:?} has format version 3; this build reads version 2",
            dir.path().join(files::DATABASE_FILE)
        )
    );
    // Nothing was changed by the refusal.
    assert_eq!(meta_format(dir.path()), 3);
}
