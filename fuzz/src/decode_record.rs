//! The `decode_record` target's check. Each input is used twice:
//!
//! 1. as raw bytes: `decode_record_value` must never panic, and anything it accepts must be within
//!    the journal's limits;
//! 2. as edits to a real stored record value (read once per process from a journal the harness
//!    writes, through redb, from the documented `journal.records` table): the first byte picks the
//!    seed record and may ask for a truncation, each following 3 bytes XOR one byte at an offset.
//!    Whatever the edits, an accepted value must decode to the seed's content: the digest covers
//!    everything but the position (which only the MAC, checked elsewhere, covers).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ctx_journal::{
    EVENT_ID_MAX_BYTES, ExpectedRevision, Journal, KIND_MAX_BYTES, NewRecord, OpenOptions,
    PAYLOAD_MAX_BYTES, Record, StreamAppend, StreamId, Timestamp, decode_record_value,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");

pub fn check(data: &[u8]) {
    check_raw(data);
    check_edited(data);
}

pub(crate) fn check_raw(data: &[u8]) {
    let Ok(record) = decode_record_value(data) else {
        return;
    };
    assert!(!record.event_id.is_empty() && record.event_id.len() <= EVENT_ID_MAX_BYTES);
    assert!(!record.kind.is_empty() && record.kind.len() <= KIND_MAX_BYTES);
    assert!(record.payload.len() <= PAYLOAD_MAX_BYTES);
    // Version 2, codec 1 or 2 (spec/journal.md §4): the value holds a zstd frame shorter than
    // the payload. Otherwise the payload is the end of the value.
    if data[4..7] == [2, 0, 1] || data[4..7] == [2, 0, 2] {
        assert!(!record.payload.is_empty());
    } else {
        assert!(
            data.ends_with(&record.payload) && record.payload.len() < data.len(),
            "the payload is part of the value"
        );
    }
    // Decoding is a pure function of the bytes.
    assert_eq!(decode_record_value(data).ok().as_ref(), Some(&record));
}

fn check_edited(data: &[u8]) {
    let seeds = seeds();
    let Some((&select, mut edits)) = data.split_first() else {
        return;
    };
    let (seed, original) = &seeds[usize::from(select & 0x7f) % seeds.len()];
    let mut value = seed.clone();
    if select & 0x80 != 0
        && let [hi, lo, rest @ ..] = edits
    {
        value.truncate(usize::from(u16::from_be_bytes([*hi, *lo])) % (seed.len() + 1));
        edits = rest;
    }
    for edit in edits.chunks_exact(3) {
        if value.is_empty() {
            break;
        }
        let at = usize::from(u16::from_be_bytes([edit[0], edit[1]])) % value.len();
        value[at] ^= edit[2];
    }
    check_raw(&value);
    if let Ok(decoded) = decode_record_value(&value) {
        let same_content = Record {
            position: original.position,
            ..decoded.clone()
        };
        assert_eq!(
            &same_content, original,
            "an edited record value decoded to other content than its digest covers"
        );
    }
}

/// Stored values of a few real records (with their decoded form), written once per process.
fn seeds() -> &'static [(Vec<u8>, Record)] {
    static SEEDS: OnceLock<Vec<(Vec<u8>, Record)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ctx-fuzz-decode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_seed_journal(&dir);
        let values = read_values(&dir.join(ctx_journal::DATABASE_FILE));
        let _ = std::fs::remove_dir_all(&dir);
        let seeds: Vec<(Vec<u8>, Record)> = values
            .into_iter()
            .map(|v| match decode_record_value(&v) {
                Ok(r) => (v, r),
                Err(e) => panic!("a stored record value does not decode: {e}"),
            })
            .collect();
        assert!(!seeds.is_empty());
        seeds
    })
}

fn write_seed_journal(dir: &Path) {
    let journal = match Journal::open(dir, &OpenOptions::new().key_source(|| Ok([3u8; 32]))) {
        Ok(j) => j,
        Err(e) => panic!("open seed journal: {e}"),
    };
    let stream = |key: &[u8]| match StreamId::derive("fuzz.seed", key) {
        Ok(id) => id,
        Err(e) => panic!("{e}"),
    };
    let long_id = "i".repeat(EVENT_ID_MAX_BYTES);
    let long_kind = "k".repeat(KIND_MAX_BYTES);
    let batches = vec![
        vec![StreamAppend::new(
            stream(b"a"),
            ExpectedRevision::NoStream,
            vec![
                NewRecord::new("s1", "k", Timestamp(0), Vec::new()),
                NewRecord::new("s2", "kind.two", Timestamp(-5), b"hello".to_vec()),
            ],
        )],
        vec![
            StreamAppend::new(
                stream(b"a"),
                ExpectedRevision::Exact(2),
                vec![NewRecord::new(
                    long_id,
                    long_kind,
                    Timestamp(i64::MAX),
                    vec![0xA5; 300],
                )],
            ),
            StreamAppend::new(
                stream(b""),
                ExpectedRevision::Any,
                vec![
                    NewRecord::new("s4", "x", Timestamp(i64::MIN), b"{}".to_vec()),
                    // Stored compressed (record value version 2, zstd).
                    NewRecord::new("s5", "ctx.engine.v1", Timestamp(1), json_payload()),
                ],
            ),
        ],
    ];
    for batch in batches {
        if let Err(e) = journal.append_batch(batch) {
            panic!("seed append: {e}");
        }
    }
}

/// Canonical-JSON-like text of the kind the engine records: repeated keys, hex digests.
fn json_payload() -> Vec<u8> {
    let mut out = String::from("{\"actions\":[");
    for i in 0..24u64 {
        out.push_str(&format!(
            "{{\"capability\":\"skill.{i}\",\"digest\":\"{:016x}{:016x}\",\"mode\":\"install\"}},",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f),
        ));
    }
    out.push_str("{}]}");
    out.into_bytes()
}

fn read_values(db_path: &PathBuf) -> Vec<Vec<u8>> {
    let read = || -> Result<Vec<Vec<u8>>, redb::Error> {
        let db = redb::Database::open(db_path)?;
        let txn = db.begin_read()?;
        let table = txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, value) = entry?;
            out.push(value.value().to_vec());
        }
        Ok(out)
    };
    match read() {
        Ok(values) => values,
        Err(e) => panic!("reading the seed journal with redb: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode_and_edits_hold() {
        assert_eq!(seeds().len(), 5);
        // Version 2: the short payloads are stored as they are, the long ones compressed.
        let codecs: Vec<u8> = seeds().iter().map(|(v, _)| v[6]).collect();
        assert_eq!(codecs, [0, 0, 2, 0, 2]);
        assert!(seeds().iter().all(|(v, _)| v[4..6] == [2, 0]));
        check(&[]);
        check(&[0]);
        check(&[1, 0, 20, 0xff]);
        check(&[0x82, 0, 10]);
        for i in 0..=255u8 {
            check(&[i, 0, i, 1, 0, i / 2, 0x80]);
        }
    }

    /// The committed raw seeds (`corpus/decode_record/seed-*`): the same record as a version-1
    /// value (written by the last version-1 build) and as version-2 values compressed without
    /// (codec 1) and with the records dictionary (codec 2).
    #[test]
    fn committed_seeds_decode() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/decode_record");
        let read = |name: &str| match std::fs::read(dir.join(name)) {
            Ok(bytes) => bytes,
            Err(e) => panic!("{name}: {e}"),
        };
        let v1 = read("seed-v1-host-session");
        let v2 = read("seed-v2-host-session");
        let v2_dict = read("seed-v2-dict-host-session");
        assert_eq!(
            (&v1[4..8], &v2[4..8], &v2_dict[4..8]),
            (&[1, 0, 0, 0][..], &[2, 0, 1, 0][..], &[2, 0, 2, 0][..])
        );
        assert_eq!(decode_record_value(&v1).ok(), decode_record_value(&v2).ok());
        assert_eq!(
            decode_record_value(&v1).ok(),
            decode_record_value(&v2_dict).ok()
        );
        assert!(decode_record_value(&v2).is_ok());
        check(&v1);
        check(&v2);
        check(&v2_dict);
    }
}
