//! Fail points around the commit: a failure before it writes nothing, a failure after it leaves
//! the records durable; either way the caller is told "maybe committed" and the journal
//! fail-stops until reopened, after which a retry with the same event ids gives the right answer.
//! A request that only replays stored records never reaches the commit.

use ctx_journal::{
    AppendError, AppendOutcome, DATABASE_FILE, ExpectedRevision, Journal, NewRecord, StreamAppend,
    Timestamp,
};

use crate::support::{self, FailPoints};

const BEFORE: &str = "journal-before-commit";
const AFTER: &str = "journal-after-commit";

fn record(event_id: &str) -> NewRecord {
    NewRecord::new(
        event_id,
        "fp.kind",
        Timestamp(5),
        format!("payload of {event_id}"),
    )
}

fn expect_fail_stopped(journal: &Journal) {
    assert!(journal.is_fail_stopped());
    let s = support::stream("fp-other");
    match journal.append(StreamAppend::new(
        s,
        ExpectedRevision::Any,
        vec![record("after-stop")],
    )) {
        Err(AppendError::FailStopped) => {}
        other => panic!("expected FailStopped, got {other:?}"),
    }
}

#[test]
fn failure_before_commit_writes_nothing_and_fail_stops() {
    let _fp = FailPoints::setup();
    let dir = support::tempdir();
    let (a, b) = (support::stream("fp-a"), support::stream("fp-b"));
    let journal = support::open(dir.path());
    journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1")],
        ))
        .unwrap();
    assert!(!journal.is_fail_stopped());

    fail::cfg(BEFORE, "return(disk on fire)").unwrap();
    let batch = vec![
        StreamAppend::new(
            a,
            ExpectedRevision::Exact(1),
            vec![record("a2"), record("a3")],
        ),
        StreamAppend::new(b, ExpectedRevision::NoStream, vec![record("b1")]),
    ];
    match journal.append_batch(batch.clone()) {
        Err(AppendError::MaybeCommitted { reason }) => {
            assert!(reason.contains("disk on fire"), "{reason}")
        }
        other => panic!("expected MaybeCommitted, got {other:?}"),
    }
    fail::remove(BEFORE);
    // Stopped, through this handle and any other handle of the same journal, until reopened.
    expect_fail_stopped(&journal);
    let other = support::open(dir.path());
    expect_fail_stopped(&other);
    // Reads still work, and show nothing of the failed batch.
    assert_eq!(journal.head_position().unwrap(), 1);
    assert_eq!(journal.stream_head(&b).unwrap(), None);
    drop((journal, other));

    let journal = support::open(dir.path());
    assert!(!journal.is_fail_stopped());
    assert_eq!(journal.head_position().unwrap(), 1);
    assert_eq!(journal.read_stream(&a, 1, 10).unwrap().len(), 1);
    assert_eq!(journal.stream_head(&b).unwrap(), None);
    assert!(journal.verify().unwrap().is_ok());
    // The retry is a first write: nothing of it was there.
    let outcomes = journal.append_batch(batch).unwrap();
    assert!(outcomes.iter().all(|o| !o.replayed));
    let positions: Vec<u64> = outcomes
        .iter()
        .flat_map(|o| o.records.iter().map(|r| r.position))
        .collect();
    assert_eq!(positions, vec![2, 3, 4]);
    assert!(journal.verify().unwrap().is_ok());
}

#[test]
fn failure_after_commit_is_durable_and_a_retry_replays_it() {
    let _fp = FailPoints::setup();
    let dir = support::tempdir();
    let (a, b) = (support::stream("fp-a"), support::stream("fp-b"));
    let journal = support::open(dir.path());
    journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1")],
        ))
        .unwrap();

    fail::cfg(AFTER, "return").unwrap();
    let batch = vec![
        StreamAppend::new(
            a,
            ExpectedRevision::Exact(1),
            vec![record("a2"), record("a3")],
        ),
        StreamAppend::new(b, ExpectedRevision::NoStream, vec![record("b1")]),
    ];
    match journal.append_batch(batch.clone()) {
        Err(AppendError::MaybeCommitted { .. }) => {}
        other => panic!("expected MaybeCommitted, got {other:?}"),
    }
    fail::remove(AFTER);
    expect_fail_stopped(&journal);
    drop(journal);

    let journal = support::open(dir.path());
    assert!(!journal.is_fail_stopped());
    assert_eq!(journal.head_position().unwrap(), 4, "the commit landed");
    let stream_a = journal.read_stream(&a, 1, 10).unwrap();
    let stream_b = journal.read_stream(&b, 1, 10).unwrap();
    let ids: Vec<&str> = stream_a
        .iter()
        .chain(&stream_b)
        .map(|r| r.event_id.as_str())
        .collect();
    assert_eq!(ids, ["a1", "a2", "a3", "b1"]);
    assert_eq!(stream_b[0].payload, b"payload of b1");

    // The retry replays the original result: revisions, positions and digests as stored.
    let outcomes = journal.append_batch(batch).unwrap();
    assert!(outcomes.iter().all(|o| o.replayed));
    let got: Vec<(u64, u64)> = outcomes
        .iter()
        .flat_map(|o| o.records.iter().map(|r| (r.revision, r.position)))
        .collect();
    assert_eq!(got, vec![(2, 2), (3, 3), (1, 4)]);
    assert_eq!(outcomes[0].records[1].digest, stream_a[2].digest);
    assert_eq!(outcomes[1].records[0].digest, stream_b[0].digest);
    assert_eq!(
        journal.head_position().unwrap(),
        4,
        "the replay wrote nothing"
    );
    // And the journal goes on from there.
    let next = journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::Exact(3),
            vec![record("a4")],
        ))
        .unwrap();
    assert_eq!((next.records[0].revision, next.records[0].position), (4, 5));
    assert!(journal.verify().unwrap().is_ok());
}

/// A request that only replays stored records writes nothing, so it does not commit: with the
/// commit failing it still gets the original result, the journal keeps accepting writes, and the
/// database file is unchanged byte for byte. (Found by the `journal_model` fuzz target: a group of
/// replays committed an empty redb transaction, two writes and an fsync, and a storage failure
/// there answered a settled retry `MaybeCommitted` and fail-stopped the journal.)
#[test]
fn a_replay_never_reaches_the_commit() {
    let _fp = FailPoints::setup();
    let dir = support::tempdir();
    let (a, b) = (support::stream("fp-a"), support::stream("fp-b"));
    let journal = support::open(dir.path());
    let batch = vec![
        StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1"), record("a2")],
        ),
        StreamAppend::new(b, ExpectedRevision::NoStream, vec![record("b1")]),
    ];
    let first = journal.append_batch(batch.clone()).unwrap();
    let db = dir.path().join(DATABASE_FILE);
    let before = std::fs::read(&db).unwrap();

    fail::cfg(BEFORE, "return(disk on fire)").unwrap();
    let again = journal.append_batch(batch);
    let single = journal.append(StreamAppend::new(
        b,
        ExpectedRevision::NoStream,
        vec![record("b1")],
    ));
    fail::remove(BEFORE);
    let again = again.unwrap();
    assert!(again.iter().all(|o| o.replayed));
    let records = |o: &[AppendOutcome]| o.iter().map(|o| o.records.clone()).collect::<Vec<_>>();
    assert_eq!(records(&again), records(&first));
    let single = single.unwrap();
    assert!(single.replayed);
    assert_eq!(single.records, first[1].records);
    assert!(!journal.is_fail_stopped());
    assert!(
        std::fs::read(&db).unwrap() == before,
        "the replays wrote to the database file"
    );

    // The journal goes on from there.
    let next = journal
        .append(StreamAppend::new(
            b,
            ExpectedRevision::Exact(1),
            vec![record("b2")],
        ))
        .unwrap();
    assert_eq!((next.records[0].revision, next.records[0].position), (2, 4));
    assert!(journal.verify().unwrap().is_ok());
}
