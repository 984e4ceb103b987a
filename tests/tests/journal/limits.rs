//! Input limits: every refused request is a typed `InputError` and writes nothing; values at
//! the limits are accepted.

use ctx_journal::{
    AppendError, BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, EVENT_ID_MAX_BYTES,
    ExpectedRevision, InputError, Journal, KIND_MAX_BYTES, NAMESPACE_MAX_BYTES, NewRecord,
    PAYLOAD_MAX_BYTES, STREAM_KEY_MAX_BYTES, StreamAppend, StreamId, Timestamp,
};

use crate::support;

fn record(event_id: &str) -> NewRecord {
    NewRecord::new(event_id, "limits.kind", Timestamp(9), b"small".to_vec())
}

fn with_payload(event_id: &str, len: usize) -> NewRecord {
    NewRecord::new(event_id, "limits.kind", Timestamp(9), vec![0x5a; len])
}

fn one(stream: StreamId, records: Vec<NewRecord>) -> Vec<StreamAppend> {
    vec![StreamAppend::new(stream, ExpectedRevision::Any, records)]
}

/// Sends `batch`, expects exactly `want`, and checks that nothing was written.
fn refused(journal: &Journal, what: &str, batch: Vec<StreamAppend>, want: &InputError) {
    let before = journal.head_position().unwrap();
    match journal.append_batch(batch) {
        Err(AppendError::Input(e)) => assert_eq!(e, *want, "{what}"),
        Err(e) => panic!("{what}: expected {want:?}, got {e:?}"),
        Ok(o) => panic!("{what}: expected {want:?}, got {o:?}"),
    }
    assert_eq!(
        journal.head_position().unwrap(),
        before,
        "{what}: nothing is written"
    );
}

#[test]
fn oversized_or_malformed_requests_are_typed_input_errors_and_write_nothing() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let journal = support::open(dir.path());
    let s = support::stream("limits");
    let t = support::stream("limits-other");
    journal
        .append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![record("first")],
        ))
        .unwrap();

    let long_id = "e".repeat(EVENT_ID_MAX_BYTES + 1);
    refused(
        &journal,
        "event id too long",
        one(s, vec![record(&long_id)]),
        &InputError::EventId {
            event_id: long_id.clone(),
        },
    );
    for bad in ["", "has space", "tab\tbed", "caf\u{e9}"] {
        match journal.append_batch(one(s, vec![record(bad)])) {
            Err(AppendError::Input(InputError::EventId { .. })) => {}
            other => panic!("event id {bad:?}: expected InputError::EventId, got {other:?}"),
        }
    }
    for bad in [
        String::new(),
        "two words".to_owned(),
        "k".repeat(KIND_MAX_BYTES + 1),
    ] {
        let r = NewRecord::new("kind-test", bad.clone(), Timestamp(0), b"x".to_vec());
        match journal.append_batch(one(s, vec![r])) {
            Err(AppendError::Input(InputError::Kind { event_id, .. })) => {
                assert_eq!(event_id, "kind-test");
            }
            other => panic!("kind {bad:?}: expected InputError::Kind, got {other:?}"),
        }
    }
    refused(
        &journal,
        "payload over the limit",
        one(s, vec![with_payload("big", PAYLOAD_MAX_BYTES + 1)]),
        &InputError::PayloadTooLarge {
            event_id: "big".to_owned(),
            len: PAYLOAD_MAX_BYTES + 1,
            max: PAYLOAD_MAX_BYTES,
        },
    );
    let many: Vec<NewRecord> = (0..=BATCH_RECORDS_MAX)
        .map(|i| record(&format!("m{i}")))
        .collect();
    refused(
        &journal,
        "too many records",
        one(s, many),
        &InputError::TooManyRecords {
            count: BATCH_RECORDS_MAX + 1,
            max: BATCH_RECORDS_MAX,
        },
    );
    // The record limit counts all streams of the request together.
    let half = BATCH_RECORDS_MAX / 2 + 1;
    refused(
        &journal,
        "too many records across streams",
        vec![
            StreamAppend::new(
                s,
                ExpectedRevision::Any,
                (0..half).map(|i| record(&format!("x{i}"))).collect(),
            ),
            StreamAppend::new(
                t,
                ExpectedRevision::Any,
                (0..half).map(|i| record(&format!("y{i}"))).collect(),
            ),
        ],
        &InputError::TooManyRecords {
            count: 2 * half,
            max: BATCH_RECORDS_MAX,
        },
    );
    let records = BATCH_PAYLOAD_MAX_BYTES / PAYLOAD_MAX_BYTES + 1;
    let big: Vec<NewRecord> = (0..records)
        .map(|i| with_payload(&format!("p{i}"), PAYLOAD_MAX_BYTES))
        .collect();
    refused(
        &journal,
        "batch payload over the limit",
        one(s, big),
        &InputError::BatchTooLarge {
            bytes: records * PAYLOAD_MAX_BYTES,
            max: BATCH_PAYLOAD_MAX_BYTES,
        },
    );
    let streams: Vec<StreamAppend> = (0..=BATCH_STREAMS_MAX)
        .map(|i| {
            let stream = support::stream(&format!("limits-{i}"));
            StreamAppend::new(
                stream,
                ExpectedRevision::Any,
                vec![record(&format!("s{i}"))],
            )
        })
        .collect();
    refused(
        &journal,
        "too many streams",
        streams,
        &InputError::TooManyStreams {
            count: BATCH_STREAMS_MAX + 1,
            max: BATCH_STREAMS_MAX,
        },
    );
    refused(
        &journal,
        "duplicate event id in one stream",
        one(s, vec![record("dup"), record("dup")]),
        &InputError::DuplicateEventId {
            event_id: "dup".to_owned(),
        },
    );
    refused(
        &journal,
        "duplicate event id across streams",
        vec![
            StreamAppend::new(s, ExpectedRevision::Any, vec![record("dup")]),
            StreamAppend::new(t, ExpectedRevision::Any, vec![record("dup")]),
        ],
        &InputError::DuplicateEventId {
            event_id: "dup".to_owned(),
        },
    );
    refused(
        &journal,
        "duplicate stream",
        vec![
            StreamAppend::new(t, ExpectedRevision::Any, vec![record("d1")]),
            StreamAppend::new(t, ExpectedRevision::Any, vec![record("d2")]),
        ],
        &InputError::DuplicateStream { stream: t },
    );
    refused(&journal, "empty request", Vec::new(), &InputError::Empty);
    refused(
        &journal,
        "stream part without records",
        vec![StreamAppend::new(t, ExpectedRevision::Any, Vec::new())],
        &InputError::EmptyStream { stream: t },
    );
    refused(
        &journal,
        "Exact(0)",
        vec![StreamAppend::new(
            t,
            ExpectedRevision::Exact(0),
            vec![record("z")],
        )],
        &InputError::ExactZero { stream: t },
    );
    match journal.append(StreamAppend::new(t, ExpectedRevision::Any, Vec::new())) {
        Err(AppendError::Input(InputError::EmptyStream { stream })) => assert_eq!(stream, t),
        other => panic!("single append without records: {other:?}"),
    }

    // Nothing of the refused requests was kept: their valid records are new when sent alone.
    assert_eq!(journal.head_position().unwrap(), 1);
    assert_eq!(journal.stream_head(&t).unwrap(), None);
    let o = journal
        .append(StreamAppend::new(
            t,
            ExpectedRevision::NoStream,
            vec![record("d1")],
        ))
        .unwrap();
    assert!(!o.replayed);
    assert_eq!((o.records[0].revision, o.records[0].position), (1, 2));
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 2);
}

#[test]
fn values_at_the_limits_are_accepted() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let journal = support::open(dir.path());
    let s = support::stream("limits-edge");
    let id = "i".repeat(EVENT_ID_MAX_BYTES);
    let kind = "k".repeat(KIND_MAX_BYTES);
    let printable: String = (0x21u8..=0x7e).map(char::from).collect();
    let records = vec![
        NewRecord::new(
            id.clone(),
            kind.clone(),
            Timestamp(i64::MIN),
            vec![7u8; PAYLOAD_MAX_BYTES],
        ),
        NewRecord::new(printable.clone(), "k", Timestamp(i64::MAX), Vec::new()),
    ];
    let o = journal
        .append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            records.clone(),
        ))
        .unwrap();
    assert_eq!(o.last_revision(), 2);
    let back = journal.read_stream(&s, 1, 10).unwrap();
    assert_eq!(back[0].event_id, id);
    assert_eq!(back[0].kind, kind);
    assert_eq!(back[0].occurred_at, Timestamp(i64::MIN));
    assert_eq!(back[0].payload, vec![7u8; PAYLOAD_MAX_BYTES]);
    assert_eq!(back[1].event_id, printable);
    assert_eq!(back[1].occurred_at, Timestamp(i64::MAX));
    assert!(back[1].payload.is_empty());
    // A full batch of records in one request is accepted too.
    let full: Vec<NewRecord> = (0..BATCH_RECORDS_MAX)
        .map(|i| record(&format!("f{i}")))
        .collect();
    let o = journal
        .append(StreamAppend::new(s, ExpectedRevision::Exact(2), full))
        .unwrap();
    assert_eq!(o.last_revision(), 2 + BATCH_RECORDS_MAX as u64);
    assert!(journal.verify().unwrap().is_ok());
}

#[test]
fn stream_ids_refuse_bad_namespaces_and_long_keys() {
    for bad in [
        String::new(),
        "with space".to_owned(),
        "n".repeat(NAMESPACE_MAX_BYTES + 1),
    ] {
        match StreamId::derive(&bad, b"key") {
            Err(InputError::Namespace { .. }) => {}
            other => panic!("namespace {bad:?}: {other:?}"),
        }
    }
    match StreamId::derive("ns", &vec![0u8; STREAM_KEY_MAX_BYTES + 1]) {
        Err(InputError::StreamKeyTooLong { len, max }) => {
            assert_eq!((len, max), (STREAM_KEY_MAX_BYTES + 1, STREAM_KEY_MAX_BYTES));
        }
        other => panic!("long key: {other:?}"),
    }
    let at_limit = StreamId::derive(
        &"n".repeat(NAMESPACE_MAX_BYTES),
        &vec![0u8; STREAM_KEY_MAX_BYTES],
    );
    assert!(at_limit.is_ok());
    // Namespace and key are length-prefixed: moving bytes between them gives another stream.
    assert_ne!(
        StreamId::derive("ab", b"c").unwrap(),
        StreamId::derive("a", b"bc").unwrap()
    );
    assert_eq!(
        StreamId::derive("ab", b"c").unwrap(),
        StreamId::derive("ab", b"c").unwrap()
    );
}
