//! A quick end-to-end check of the journal API; the full suites live in ctx-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_journal::*;

fn rec(id: &str, p: &[u8]) -> NewRecord {
    NewRecord::new(id, "test.kind", Timestamp(1), p.to_vec())
}

#[test]
fn append_read_verify_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
    let s = StreamId::derive("test", b"a").unwrap();
    let o = j
        .append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![rec("e1", b"x"), rec("e2", b"y")],
        ))
        .unwrap();
    assert_eq!(
        o.records.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![1, 2]
    );
    for i in 3..=40u64 {
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::Exact(i - 1),
            vec![rec(&format!("e{i}"), b"z")],
        ))
        .unwrap();
    }
    let again = j
        .append(StreamAppend::new(
            s,
            ExpectedRevision::Exact(7),
            vec![rec("e1", b"x"), rec("e2", b"y")],
        ))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.records, o.records);
    let err = j
        .append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![rec("e1", b"q")],
        ))
        .unwrap_err();
    assert!(
        matches!(err, AppendError::Conflict { revision: 1, .. }),
        "{err}"
    );
    let err = j
        .append(StreamAppend::new(
            s,
            ExpectedRevision::Exact(3),
            vec![rec("new", b"q")],
        ))
        .unwrap_err();
    assert!(
        matches!(err, AppendError::WrongRevision { current: 40, .. }),
        "{err}"
    );
    let all = j.read_stream(&s, 1, 1000).unwrap();
    assert_eq!(all.len(), 40);
    assert_eq!(j.read_stream(&s, 17, 3).unwrap()[0].revision, 17);
    let rep = j.verify().unwrap();
    assert!(rep.is_ok(), "{rep:?}");
    drop(j);
    let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
    assert_eq!(j.head_position().unwrap(), 40);
    assert!(
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![rec("e5", b"z")]
        ))
        .unwrap()
        .replayed
    );
}

#[test]
fn a_position_out_of_range_on_disk_is_refused_as_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
    let s = StreamId::derive("test", b"range").unwrap();
    j.append(StreamAppend::new(
        s,
        ExpectedRevision::NoStream,
        vec![rec("r1", b"x")],
    ))
    .unwrap();
    drop(j);
    {
        let db = redb::Database::open(dir.path().join(files::DATABASE_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("journal.records");
        txn.open_table(def)
            .unwrap()
            .insert(u64::MAX, b"junk".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let err = Journal::open(dir.path(), &OpenOptions::new()).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("18446744073709551615"), "{err}");
}
