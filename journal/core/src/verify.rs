//! The full verification pass behind [`crate::Journal::verify`] (spec/journal.md, "Verification").

use std::collections::HashMap;

use std::ops::ControlFlow;

use rkyv::util::AlignedVec;

use crate::backend::{IndexKind, ReadTxn};
use crate::codec::{Integrity, MacKey, authenticate, decode_record};
use crate::error::ReadError;
use crate::types::{Digest, StreamId};

/// The kinds of integrity failure the verification pass reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// A record value that does not decode.
    Structure,
    /// A record whose digest or MAC does not match ("authentication failed").
    Authentication,
    /// A missing or unexpected global position.
    PositionGap,
    /// A stream revision that does not follow its predecessor.
    RevisionGap,
    /// A record whose previous digest is not its predecessor's digest.
    ChainBreak,
    /// A stream head that disagrees with the stream's last record.
    HeadMismatch,
    /// The per-stream position index names another position.
    PositionIndex,
    /// The event-id index disagrees with the records.
    EventIndex,
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureKind::Structure => "undecodable record",
            FailureKind::Authentication => "authentication failed",
            FailureKind::PositionGap => "position gap",
            FailureKind::RevisionGap => "revision gap",
            FailureKind::ChainBreak => "chain break",
            FailureKind::HeadMismatch => "stream head mismatch",
            FailureKind::PositionIndex => "position index mismatch",
            FailureKind::EventIndex => "event index mismatch",
        })
    }
}

/// The first failure of one kind, with how many of that kind were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFailure {
    pub kind: FailureKind,
    pub stream: Option<StreamId>,
    pub revision: Option<u64>,
    pub position: Option<u64>,
    pub detail: String,
    pub count: u64,
}

/// What the verification pass found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyReport {
    pub records: u64,
    pub streams: u64,
    /// At most one entry per kind: the first failure found, in position order.
    pub failures: Vec<VerifyFailure>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn first(&self, kind: FailureKind) -> Option<&VerifyFailure> {
        self.failures.iter().find(|f| f.kind == kind)
    }

    fn record(
        &mut self,
        kind: FailureKind,
        stream: Option<StreamId>,
        revision: Option<u64>,
        position: Option<u64>,
        detail: impl FnOnce() -> String,
    ) {
        match self.failures.iter_mut().find(|f| f.kind == kind) {
            Some(f) => f.count += 1,
            None => self.failures.push(VerifyFailure {
                kind,
                stream,
                revision,
                position,
                detail: detail(),
                count: 1,
            }),
        }
    }
}

struct Seen {
    revision: u64,
    position: u64,
    digest: Digest,
}

pub(crate) fn run(txn: &mut dyn ReadTxn, mac: &MacKey) -> Result<VerifyReport, ReadError> {
    let mut report = VerifyReport::default();
    let mut seen: HashMap<StreamId, Seen> = HashMap::new();
    let mut scratch = AlignedVec::<16>::new();
    let mut expected_position = 1u64;
    // Event ids are unique (J7): a 128-bit digest of each id stands in for the id, so the pass
    // holds 16 bytes per record whatever the ids' length.
    let mut event_ids: HashMap<[u8; 16], u64> = HashMap::new();
    txn.records(1, &mut |position, value| {
        report.records += 1;
        if position != expected_position {
            report.record(
                FailureKind::PositionGap,
                None,
                None,
                Some(expected_position),
                || format!("expected position {expected_position}, found {position}"),
            );
        }
        expected_position = position.saturating_add(1);
        let view = match decode_record(value, &mut scratch) {
            Ok(view) => view,
            Err(reason) => {
                report.record(FailureKind::Structure, None, None, Some(position), || {
                    reason.to_owned()
                });
                return ControlFlow::Continue(());
            }
        };
        let (stream, revision) = (view.stream, view.revision);
        let at = (Some(stream), Some(revision), Some(position));
        if let Some(first) = event_ids.insert(event_id_digest(view.event_id), position) {
            report.record(FailureKind::EventIndex, at.0, at.1, at.2, || {
                format!(
                    "event id {} is stored twice, at positions {first} and {position}",
                    view.event_id
                )
            });
        }
        if view.position != position {
            report.record(FailureKind::Authentication, at.0, at.1, at.2, || {
                format!("the header says position {}", view.position)
            });
        } else if let Err(kind) = authenticate(&view, mac) {
            report.record(FailureKind::Authentication, at.0, at.1, at.2, || {
                match kind {
                    Integrity::Digest => "the record digest does not match its content",
                    Integrity::Mac => "the record MAC does not match the installation key",
                }
                .to_owned()
            });
        }
        let (prev_revision, prev_digest) = seen
            .get(&stream)
            .map_or((0, Digest::ZERO), |s| (s.revision, s.digest));
        if revision != prev_revision.saturating_add(1) {
            report.record(FailureKind::RevisionGap, at.0, at.1, at.2, || {
                format!("revision {revision} follows revision {prev_revision}")
            });
        } else if view.previous_digest != prev_digest {
            report.record(FailureKind::ChainBreak, at.0, at.1, at.2, || {
                "the previous digest is not the predecessor's digest".to_owned()
            });
        }
        seen.insert(
            stream,
            Seen {
                revision,
                position,
                digest: view.digest,
            },
        );
        ControlFlow::Continue(())
    })?;
    txn.check_indexes(&mut |finding| {
        let kind = match finding.kind {
            IndexKind::Position => FailureKind::PositionIndex,
            IndexKind::Event => FailureKind::EventIndex,
        };
        report.record(
            kind,
            finding.stream,
            finding.revision,
            finding.position,
            || finding.detail.clone(),
        );
    })?;
    report.streams = seen.len() as u64;
    let mut head_count = 0u64;
    txn.heads(&mut |key, head| {
        head_count += 1;
        let Ok(bytes) = <[u8; 32]>::try_from(key) else {
            report.record(FailureKind::HeadMismatch, None, None, None, || {
                "a stream head key is not 32 bytes".to_owned()
            });
            return;
        };
        let stream = StreamId::from_bytes(bytes);
        let last = seen.get(&stream);
        let agrees = match (&head, last) {
            (Ok(h), Some(s)) => {
                h.revision == s.revision && h.position == s.position && h.digest == s.digest
            }
            _ => false,
        };
        if !agrees {
            report.record(
                FailureKind::HeadMismatch,
                Some(stream),
                head.as_ref().ok().map(|h| h.revision),
                head.as_ref().ok().map(|h| h.position),
                || match last {
                    Some(s) => format!("the last record is revision {}", s.revision),
                    None => "the stream has no records".to_owned(),
                },
            );
        }
    })?;
    if head_count != seen.len() as u64 {
        report.record(FailureKind::HeadMismatch, None, None, None, || {
            format!(
                "{head_count} stream heads for {} streams with records",
                seen.len()
            )
        });
    }
    Ok(report)
}

/// The first 16 bytes of SHA-256 of an event id: distinct ids collide with probability about
/// n² / 2^129, far below any storage failure's.
fn event_id_digest(event_id: &str) -> [u8; 16] {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(event_id.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}
