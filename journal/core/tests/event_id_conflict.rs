//! The sentences of a refused reuse of an event id (spec/journal.md §6): each names its own
//! fault, so a person is not told "other content" when the content is not the issue.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_journal::*;

fn rec(id: &str, payload: &[u8]) -> NewRecord {
    NewRecord::new(id, "test.kind", Timestamp(1), payload.to_vec())
}

#[test]
fn a_reused_event_id_is_refused_with_a_sentence_naming_its_fault() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
    let a = StreamId::derive("test", b"a").unwrap();
    let b = StreamId::derive("test", b"b").unwrap();
    j.append(StreamAppend::new(
        a,
        ExpectedRevision::NoStream,
        vec![rec("e1", b"x"), rec("e2", b"y")],
    ))
    .unwrap();

    // The same id and content in another stream: the stream is the fault, not the content.
    let err = j
        .append(StreamAppend::new(
            b,
            ExpectedRevision::Any,
            vec![rec("e2", b"y")],
        ))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            AppendError::Conflict {
                stream,
                revision: 2,
                kind: ConflictKind::OtherStream,
                ..
            } if *stream == a
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "event id e2 is already used in stream {a} (at revision 2); an event id names one \
             event in one stream"
        )
    );
    // With other content too, the other stream is still what is named.
    let err = j
        .append(StreamAppend::new(
            b,
            ExpectedRevision::Any,
            vec![rec("e1", b"other")],
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "event id e1 is already used in stream {a} (at revision 1); an event id names one \
             event in one stream"
        )
    );
    // Next to a new id in another stream's append.
    let err = j
        .append(StreamAppend::new(
            b,
            ExpectedRevision::Any,
            vec![rec("n1", b"z"), rec("e1", b"x")],
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "event id e1 is already used in stream {a} (at revision 1); an event id names one \
             event in one stream"
        )
    );

    // The same stream with other content.
    let err = j
        .append(StreamAppend::new(
            a,
            ExpectedRevision::Any,
            vec![rec("e1", b"other")],
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("event id e1 is already in stream {a} at revision 1 with other content")
    );

    // The same stream and content, but beside a new record: not a retry of the original append.
    let err = j
        .append(StreamAppend::new(
            a,
            ExpectedRevision::Any,
            vec![rec("e1", b"x"), rec("n1", b"z")],
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "event id e1 is already in stream {a} at revision 1, but other records of the append \
             are new; a retry repeats the original append exactly"
        )
    );

    // Nothing was written by the refusals, and the ids of stream b stay free.
    assert_eq!(j.stream_head(&b).unwrap(), None);
    let again = j
        .append(StreamAppend::new(
            a,
            ExpectedRevision::Any,
            vec![rec("e1", b"x"), rec("e2", b"y")],
        ))
        .unwrap();
    assert!(again.replayed);
}
