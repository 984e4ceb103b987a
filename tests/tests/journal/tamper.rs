//! Tamper test: a record value edited directly in the redb file (payload or header bytes) is
//! detected as "authentication failed" for exactly that stream and revision, by reads, scans,
//! idempotent retries and the verification pass, instead of being believed.

use std::ops::ControlFlow;
use std::path::Path;

use ctx_journal::{
    AppendError, AppendedRecord, ExpectedRevision, FailureKind, Journal, NewRecord, ReadError,
    StreamAppend, StreamId, Timestamp, files,
};
use redb::{ReadableDatabase, TableDefinition};

use crate::support;

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");

/// The target record's distinctive field values, so their bytes can be found in the stored value.
const TARGET_EVENT: &str = "tamper-target-event-id";
const TARGET_AT: i64 = 0x1122_3344_5566_7788;
const TARGET_PAYLOAD: &[u8] = b"the target payload: forty-two bytes long!!";
const TARGET_REVISION: u64 = 3;

fn stream_id(index: usize) -> StreamId {
    support::stream(&format!("tamper-{index}"))
}

fn record(event_id: &str) -> NewRecord {
    if event_id == TARGET_EVENT {
        NewRecord::new(
            event_id,
            "tamper.kind",
            Timestamp(TARGET_AT),
            TARGET_PAYLOAD,
        )
    } else {
        let payload = format!("payload of {event_id}").into_bytes();
        NewRecord::new(event_id, "tamper.kind", Timestamp(1), payload)
    }
}

/// Three streams of five records each, interleaved; stream 1 revision 3 is the target.
fn populate(dir: &Path) -> AppendedRecord {
    let journal = support::open(dir);
    let mut target = None;
    for revision in 1..=5u64 {
        for s in 0..3 {
            let event_id = if s == 1 && revision == TARGET_REVISION {
                TARGET_EVENT.to_owned()
            } else {
                format!("tamper-{s}-{revision}")
            };
            let expected = if revision == 1 {
                ExpectedRevision::NoStream
            } else {
                ExpectedRevision::Exact(revision - 1)
            };
            let outcome = journal
                .append(StreamAppend::new(
                    stream_id(s),
                    expected,
                    vec![record(&event_id)],
                ))
                .unwrap();
            if event_id == TARGET_EVENT {
                target = Some(outcome.records[0]);
            }
        }
    }
    assert!(journal.verify().unwrap().is_ok());
    target.unwrap()
}

/// Finds `needle` exactly once in `value` and returns its offset.
fn find_once(value: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = value
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "expected the bytes exactly once in the stored value"
    );
    hits[0]
}

/// Rewrites the stored value at `position` through redb directly, with the journal closed.
fn tamper(dir: &Path, position: u64, edit: impl FnOnce(&mut Vec<u8>)) {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let before = {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        table.get(position).unwrap().unwrap().value().to_vec()
    };
    let mut value = before.clone();
    edit(&mut value);
    assert_ne!(value, before, "the edit changed nothing");
    assert_eq!(value.len(), before.len(), "the edit keeps the length");
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(RECORDS).unwrap();
        table.insert(position, value.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

fn assert_target(e: &ReadError, target: &AppendedRecord, what: &str) {
    match e {
        ReadError::AuthenticationFailed {
            stream,
            revision,
            position,
            ..
        } => {
            assert_eq!(*stream, stream_id(1), "{what}: stream");
            assert_eq!(*revision, target.revision, "{what}: revision");
            assert_eq!(*position, target.position, "{what}: position");
        }
        other => panic!("{what}: expected AuthenticationFailed, got {other:?}"),
    }
}

fn check_detected(dir: &Path, target: &AppendedRecord) {
    let journal = Journal::open(dir, &support::options())
        .unwrap_or_else(|e| panic!("reopening a journal with one tampered record failed: {e}"));
    assert_eq!(target.revision, TARGET_REVISION);

    // Reading the stream through the record fails, naming it.
    let e = journal
        .read_stream(&stream_id(1), 1, usize::MAX)
        .unwrap_err();
    assert_target(&e, target, "read_stream from 1");
    let e = journal
        .read_stream(&stream_id(1), TARGET_REVISION, 1)
        .unwrap_err();
    assert_target(&e, target, "read_stream of the record");
    // Reading after it needs its digest to check the chain, so that fails too.
    let e = journal
        .read_stream(&stream_id(1), TARGET_REVISION + 1, usize::MAX)
        .unwrap_err();
    assert_target(&e, target, "read_stream after the record");
    // What comes before it, and the other streams, still read.
    let before = journal
        .read_stream(&stream_id(1), 1, TARGET_REVISION as usize - 1)
        .unwrap();
    assert_eq!(before.len() as u64, TARGET_REVISION - 1);
    for s in [0, 2] {
        assert_eq!(
            journal
                .read_stream(&stream_id(s), 1, usize::MAX)
                .unwrap()
                .len(),
            5
        );
    }

    // Scans in global order fail at it.
    let mut visited = 0;
    let e = journal
        .scan(1, |_| {
            visited += 1;
            ControlFlow::Continue(())
        })
        .unwrap_err();
    assert_target(&e, target, "scan");
    assert_eq!(
        visited,
        target.position - 1,
        "the scan visits every record before it"
    );
    let e = journal.read_all(1, usize::MAX).unwrap_err();
    assert_target(&e, target, "read_all");
    let after = journal.read_all(target.position + 1, usize::MAX).unwrap();
    assert_eq!(after.len() as u64, 15 - target.position);

    // Writes are refused (an unreadable event id could let a duplicate in), naming the record;
    // neither an idempotent retry of the tampered record nor a new record gets through.
    let retry = StreamAppend::new(
        stream_id(1),
        ExpectedRevision::Any,
        vec![record(TARGET_EVENT)],
    );
    let fresh = StreamAppend::new(stream_id(0), ExpectedRevision::Any, vec![record("fresh")]);
    for (what, append) in [("retry", retry), ("new record", fresh)] {
        match journal.append(append).unwrap_err() {
            AppendError::Integrity { detail } => {
                assert!(detail.contains(&stream_id(1).to_hex()), "{what}: {detail}");
                assert!(
                    detail.contains(&format!("revision {TARGET_REVISION}")),
                    "{what}: {detail}"
                );
            }
            other => panic!("{what} after tampering: expected Integrity, got {other:?}"),
        }
    }
    assert_eq!(journal.head_position().unwrap(), 15, "nothing was written");

    // The verification pass reports it.
    let report = journal.verify().unwrap();
    assert!(!report.is_ok());
    let failure = report
        .first(FailureKind::Authentication)
        .unwrap_or_else(|| panic!("no authentication failure in {report:?}"));
    assert_eq!(failure.stream, Some(stream_id(1)));
    assert_eq!(failure.revision, Some(TARGET_REVISION));
    assert_eq!(failure.position, Some(target.position));
    assert_eq!(failure.count, 1, "exactly one record fails authentication");
    assert_eq!(report.records, 15);
}

fn run(edit: impl FnOnce(&mut Vec<u8>, &AppendedRecord)) {
    let _shared = support::shared();
    let dir = support::tempdir();
    let target = populate(dir.path());
    tamper(dir.path(), target.position, |value| edit(value, &target));
    check_detected(dir.path(), &target);
}

#[test]
fn tampered_payload_fails_authentication() {
    run(|value, _| {
        assert!(
            value.ends_with(TARGET_PAYLOAD),
            "the payload is stored as given, at the end"
        );
        let at = value.len() - TARGET_PAYLOAD.len() + 10;
        value[at] ^= 0x20;
    });
}

#[test]
fn tampered_timestamp_in_header_fails_authentication() {
    run(|value, _| {
        let at = find_once(value, &TARGET_AT.to_le_bytes());
        value[at] ^= 0x01;
    });
}

#[test]
fn tampered_event_id_in_header_fails_authentication() {
    run(|value, _| {
        let at = find_once(value, TARGET_EVENT.as_bytes());
        value[at] = b'T';
    });
}

#[test]
fn tampered_digest_in_header_fails_authentication() {
    run(|value, target| {
        let at = find_once(value, target.digest.as_bytes());
        value[at + 7] ^= 0xff;
    });
}

#[test]
fn record_from_another_installation_fails_authentication() {
    // The same records written under another installation key have the same digests but other
    // MACs; a value copied in from there is well-formed and digest-correct, and still refused.
    run_with_source(|dir, target| {
        let other = support::tempdir();
        let copied_target = populate(other.path());
        assert_eq!(
            copied_target, *target,
            "same content, same digest, same place"
        );
        let db = redb::Database::open(other.path().join(files::DATABASE_FILE)).unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        let foreign = table
            .get(target.position)
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        tamper(dir, target.position, |value| {
            assert_eq!(value.len(), foreign.len());
            value.copy_from_slice(&foreign);
        });
    });
}

fn run_with_source(replace: impl FnOnce(&Path, &AppendedRecord)) {
    let _shared = support::shared();
    let dir = support::tempdir();
    let target = populate(dir.path());
    replace(dir.path(), &target);
    check_detected(dir.path(), &target);
}
