//! Offline inspection of a journal: a listing of every stream with its head (spec/journal.md §13).
//! redb's own integrity check of the database file is in `redb/audit.rs`.

use std::ops::ControlFlow;

use rkyv::util::AlignedVec;

use crate::codec::decode_record;
use crate::error::ReadError;
use crate::journal::Journal;
use crate::types::{StreamHead, StreamId};

/// One stream as [`Journal::visit_streams`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub stream: StreamId,
    /// The stored head; `None` when it does not decode (the verification pass reports it).
    pub head: Option<StreamHead>,
    /// The kind of the stream's first record, read **without** authenticating it: good for
    /// telling streams apart (engine streams, query streams, …), not for trusting anything.
    /// `None` when the record cannot be found or does not decode.
    pub first_kind: Option<String>,
}

impl Journal {
    /// Calls `f` with every stream of the journal in stream-id order, in one read snapshot, until
    /// it returns `Break`. Returns the number of streams visited.
    pub fn visit_streams(
        &self,
        mut f: impl FnMut(&StreamInfo) -> ControlFlow<()>,
    ) -> Result<u64, ReadError> {
        if !self.check_process() {
            return Err(ReadError::ForkedProcess);
        }
        self.read(|txn| {
            let mut heads = Vec::new();
            txn.heads(&mut |key, head| {
                // Keys are written as 32-byte stream ids; anything else is reported by `verify`.
                if let Ok(bytes) = <[u8; 32]>::try_from(key) {
                    heads.push((StreamId::from_bytes(bytes), head.ok()));
                }
            })?;
            let mut scratch = AlignedVec::<16>::new();
            let mut visited = 0;
            for (stream, head) in heads {
                let mut first_kind = None;
                if head.is_some() {
                    // An index that cannot name the first record leaves the kind unknown.
                    let _ = txn.stream_records(&stream, 1, 1, &mut |_, _, value| {
                        first_kind = decode_record(value, &mut scratch)
                            .ok()
                            .map(|v| v.kind.to_owned());
                        ControlFlow::Break(())
                    });
                }
                visited += 1;
                if f(&StreamInfo {
                    stream,
                    head,
                    first_kind,
                })
                .is_break()
                {
                    break;
                }
            }
            Ok(visited)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::journal::OpenOptions;
    use crate::types::{ExpectedRevision, NewRecord, StreamAppend, Timestamp};

    #[test]
    fn streams_are_listed_with_their_heads_and_first_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), &OpenOptions::new()).unwrap();
        let a = StreamId::derive("unit", b"a").unwrap();
        let b = StreamId::derive("unit", b"b").unwrap();
        let records = |prefix: &str, kind: &str, n: usize| {
            (0..n)
                .map(|i| NewRecord::new(format!("{prefix}{i}"), kind, Timestamp(1), vec![]))
                .collect::<Vec<_>>()
        };
        // 17 revisions: the first one's position is in a sealed chunk.
        j.append(StreamAppend::new(
            a,
            ExpectedRevision::Any,
            records("a", "first.a", 17),
        ))
        .unwrap();
        j.append(StreamAppend::new(
            b,
            ExpectedRevision::Any,
            records("b", "first.b", 2),
        ))
        .unwrap();
        let mut seen = Vec::new();
        let n = j
            .visit_streams(|info| {
                seen.push(info.clone());
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(n, 2);
        seen.sort_by_key(|i| i.head.map(|h| h.revision));
        assert_eq!(seen[0].stream, b);
        assert_eq!(seen[0].first_kind.as_deref(), Some("first.b"));
        assert_eq!(seen[0].head.unwrap().position, 19);
        assert_eq!(seen[1].stream, a);
        assert_eq!(seen[1].first_kind.as_deref(), Some("first.a"));
        assert_eq!(seen[1].head.unwrap().revision, 17);
        assert_eq!(seen[1].head, j.stream_head(&a).unwrap());
    }
}
