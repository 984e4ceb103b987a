//! The `engine.state` projection: the head of every engine stream and the index of engine event
//! ids (spec/engine-store.md §3).
//!
//! `apply` re-runs the reducer on the stored replay input over the stored previous head and
//! refuses a record whose transition or state digest differs from what the reducer produces. The
//! projection is therefore a true fold of the journal: a rebuild reproduces it byte for byte, and
//! a record the reducer would not have produced cannot enter the journal while it is attached.
//!
//! A stream whose state is terminal (ended, no pending effect) keeps a fixed-size summary head
//! instead of its whole state (spec/engine-store.md §3, "Summary heads"): every prompt opens an
//! engine stream of its own, so whole states of finished streams were most of the projection's
//! bytes (spec/storage-growth.md §3.1). Whoever needs such a stream's state replays its records
//! ([`StreamFold`]) and checks the result against the summary's state digest.

use ctx_journal::{Digest, HookError, HookTxn, RecordView, StreamId};
use ctx_model::{EngineState, ReduceError, ReplayInput, SessionStatus, Transition, parse_sha};

use crate::archive::{self, ArchiveError};
use crate::framework::Projection;
use crate::streams::ENGINE_RECORD_KIND;

use super::codes;
use super::record::decode_view;

/// Name of the projection (its journal hook and meta entry).
pub const ENGINE_STATE_PROJECTION: &str = "engine.state";
/// Version of the projection: 2 stores summary heads for terminal streams (spec/engine-store.md
/// §3); a table built by version 1 is rebuilt on attach.
pub const ENGINE_STATE_PROJECTION_VERSION: u32 = 2;
/// Engine stream id (32 bytes) → a head value ([`StoredHead`]).
pub const HEADS_TABLE: &str = "proj.engine.heads";
/// Engine event id (its bytes) → rkyv [`EventEntry`].
pub const EVENTS_TABLE: &str = "proj.engine.events";

/// First four bytes of a full head value; the rkyv archive of [`EngineHead`] follows.
pub const HEAD_FULL_TAG: [u8; 4] = *b"EHF1";
/// First four bytes of a summary head value; the fixed fields of [`HeadSummary`] follow.
pub const HEAD_SUMMARY_TAG: [u8; 4] = *b"EHS1";
/// Length of a summary head value: tag, revision u64, head record digest [32], head position
/// u64, first position u64, state digest [32].
pub const HEAD_SUMMARY_BYTES: usize = 92;

/// Refusal code of a summary head that does not match the state replayed from its stream.
pub const ENGINE_HEAD_CORRUPT: &str = "engine-head-corrupt";

/// The reducer the projection (and the engine) runs. A plain function: the projection must be a
/// pure fold, so nothing may be captured.
pub(crate) type ReduceFn =
    fn(Option<&EngineState>, &ReplayInput) -> Result<(EngineState, Transition), ReduceError>;

/// The head of one engine stream with its whole state: what a full head value stores, and what
/// [`super::Engine`] reads for any stream (a summary's state is replayed).
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EngineHead {
    /// The stream's last revision (≥ 1; a stream without records has no head entry).
    pub revision: u64,
    /// Journal digest (formula D) of the record at `revision`.
    pub head_record_digest: [u8; 32],
    /// Global journal position of that record.
    pub head_position: u64,
    /// Global journal position of the stream's revision 1: where a replay of the stream starts
    /// looking inside a journal transaction, which has no per-stream index.
    pub first_position: u64,
    /// SHA-256 of CJ(state).
    pub state_digest: [u8; 32],
    pub state: EngineState,
}

/// The head of a terminal engine stream without its state (spec/engine-store.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSummary {
    pub revision: u64,
    pub head_record_digest: [u8; 32],
    pub head_position: u64,
    pub first_position: u64,
    /// SHA-256 of CJ(state): the state replayed from the stream must have this digest.
    pub state_digest: [u8; 32],
}

/// Why a head value does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadValueError {
    #[error("a head value of {len} bytes is too short to carry its 4-byte tag")]
    Short { len: usize },
    #[error(
        "a head value starts with tag {found:02x?}, which is neither a full nor a summary head"
    )]
    Tag { found: [u8; 4] },
    #[error("a summary head value is {len} bytes long; the layout has {HEAD_SUMMARY_BYTES}")]
    SummaryLength { len: usize },
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

impl HeadSummary {
    /// The fixed little-endian layout of spec/engine-store.md §3.
    pub fn encode(&self) -> [u8; HEAD_SUMMARY_BYTES] {
        let mut out = [0u8; HEAD_SUMMARY_BYTES];
        out[0..4].copy_from_slice(&HEAD_SUMMARY_TAG);
        out[4..12].copy_from_slice(&self.revision.to_le_bytes());
        out[12..44].copy_from_slice(&self.head_record_digest);
        out[44..52].copy_from_slice(&self.head_position.to_le_bytes());
        out[52..60].copy_from_slice(&self.first_position.to_le_bytes());
        out[60..92].copy_from_slice(&self.state_digest);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<HeadSummary, HeadValueError> {
        let bytes: &[u8; HEAD_SUMMARY_BYTES] = bytes
            .try_into()
            .map_err(|_| HeadValueError::SummaryLength { len: bytes.len() })?;
        let (tag, rest) = bytes.split_at(4);
        if tag != HEAD_SUMMARY_TAG {
            let mut found = [0u8; 4];
            found.copy_from_slice(tag);
            return Err(HeadValueError::Tag { found });
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rest[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let digest_at = |at: usize| {
            let mut d = [0u8; 32];
            d.copy_from_slice(&rest[at..at + 32]);
            d
        };
        Ok(HeadSummary {
            revision: u64_at(0),
            head_record_digest: digest_at(8),
            head_position: u64_at(40),
            first_position: u64_at(48),
            state_digest: digest_at(56),
        })
    }

    fn of(head: &EngineHead) -> HeadSummary {
        HeadSummary {
            revision: head.revision,
            head_record_digest: head.head_record_digest,
            head_position: head.head_position,
            first_position: head.first_position,
            state_digest: head.state_digest,
        }
    }
}

/// A value of [`HEADS_TABLE`]: a full head, or the summary of a terminal stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredHead {
    /// Boxed: a state is hundreds of bytes inline, a summary 88.
    Full(Box<EngineHead>),
    Summary(HeadSummary),
}

impl StoredHead {
    /// The value stored for `head`: its summary when the state is terminal
    /// ([`is_terminal`]), else the whole head.
    pub fn for_head(head: EngineHead) -> StoredHead {
        if is_terminal(&head.state) {
            StoredHead::Summary(HeadSummary::of(&head))
        } else {
            StoredHead::Full(Box::new(head))
        }
    }

    pub fn summary(&self) -> HeadSummary {
        match self {
            StoredHead::Full(h) => HeadSummary::of(h),
            StoredHead::Summary(s) => *s,
        }
    }

    pub fn revision(&self) -> u64 {
        self.summary().revision
    }

    pub fn head_record_digest(&self) -> Digest {
        Digest::from_bytes(self.summary().head_record_digest)
    }

    pub fn encode(&self) -> Result<Vec<u8>, ArchiveError> {
        match self {
            StoredHead::Summary(s) => Ok(s.encode().to_vec()),
            StoredHead::Full(h) => {
                let archived = archive::to_bytes(h.as_ref())?;
                let mut out = Vec::with_capacity(4 + archived.len());
                out.extend_from_slice(&HEAD_FULL_TAG);
                out.extend_from_slice(&archived);
                Ok(out)
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<StoredHead, HeadValueError> {
        let Some((tag, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(HeadValueError::Short { len: bytes.len() });
        };
        match *tag {
            HEAD_FULL_TAG => Ok(StoredHead::Full(Box::new(
                archive::from_bytes::<EngineHead>(rest)?,
            ))),
            HEAD_SUMMARY_TAG => Ok(StoredHead::Summary(HeadSummary::decode(bytes)?)),
            found => Err(HeadValueError::Tag { found }),
        }
    }
}

/// True when no record can change the stream's state any more except by the recovery the
/// reducer still allows after `SessionEnded` (receipts, `ReassessmentRequested`;
/// spec/engine-store.md §3): the session ended and no effect is pending. Such a stream keeps a
/// summary head.
pub fn is_terminal(state: &EngineState) -> bool {
    state.session_status == SessionStatus::Ended && state.pending_effects.is_empty()
}

/// Folds one engine stream's records, in revision order from revision 1, into its state with the
/// reducer: how a summary head's state is recomputed (spec/engine-store.md §3, invariant 3).
/// Every record was checked against its stored transition and state digest when the projection
/// applied it; the fold checks the chain and, at the end, the summary.
pub(crate) struct StreamFold {
    reduce: ReduceFn,
    state: Option<EngineState>,
    revision: u64,
    digest: Digest,
    first_position: u64,
    head_position: u64,
}

impl StreamFold {
    pub(crate) fn new(reduce: ReduceFn) -> StreamFold {
        StreamFold {
            reduce,
            state: None,
            revision: 0,
            digest: Digest::ZERO,
            first_position: 0,
            head_position: 0,
        }
    }

    /// Folds the stream's next record.
    pub(crate) fn push(&mut self, view: &RecordView<'_>) -> Result<(), SummaryReplayError> {
        if self.revision.checked_add(1) != Some(view.revision)
            || view.previous_digest != self.digest
        {
            return Err(SummaryReplayError::Chain {
                previous: self.revision,
                found: view.revision,
            });
        }
        let decoded = decode_view(view).map_err(|e| SummaryReplayError::Record {
            revision: view.revision,
            reason: e.to_string(),
        })?;
        let (next, _) = (self.reduce)(self.state.as_ref(), &decoded.replay).map_err(|e| {
            SummaryReplayError::Reducer {
                revision: view.revision,
                reason: e.to_string(),
            }
        })?;
        if view.revision == 1 {
            self.first_position = view.position;
        }
        self.state = Some(next);
        self.revision = view.revision;
        self.digest = view.digest;
        self.head_position = view.position;
        Ok(())
    }

    /// The replayed state, when it is exactly the one `summary` names (revision, head record,
    /// positions, state digest).
    pub(crate) fn finish(self, summary: &HeadSummary) -> Result<EngineState, SummaryReplayError> {
        let Some(state) = self.state else {
            return Err(SummaryReplayError::Empty {
                revision: summary.revision,
            });
        };
        if self.revision != summary.revision
            || *self.digest.as_bytes() != summary.head_record_digest
            || self.head_position != summary.head_position
            || self.first_position != summary.first_position
        {
            return Err(SummaryReplayError::Head {
                replayed: self.revision,
                replayed_position: self.head_position,
                summary: summary.revision,
                summary_position: summary.head_position,
            });
        }
        let digest = state.digest();
        if parse_sha(&digest) != Some(summary.state_digest) {
            return Err(SummaryReplayError::StateDigest {
                replayed: digest,
                summary: Digest::from_bytes(summary.state_digest).to_hex(),
            });
        }
        Ok(state)
    }
}

/// Why the state replayed from a summarized stream is not the one its summary names
/// (spec/engine-store.md §3, invariant 3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryReplayError {
    #[error("revision {found} does not continue revision {previous}")]
    Chain { previous: u64, found: u64 },
    #[error("the record at revision {revision} is invalid: {reason}")]
    Record { revision: u64, reason: String },
    #[error("the reducer refused the record at revision {revision}: {reason}")]
    Reducer { revision: u64, reason: String },
    #[error("the stream has no records, the summary names revision {revision}")]
    Empty { revision: u64 },
    #[error(
        "the replayed head is revision {replayed} at position {replayed_position}, the summary names revision {summary} at position {summary_position}"
    )]
    Head {
        replayed: u64,
        replayed_position: u64,
        summary: u64,
        summary_position: u64,
    },
    #[error("the replayed state digest {replayed} differs from the summary's {summary}")]
    StateDigest { replayed: String, summary: String },
}

/// Where an engine event was committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EventEntry {
    pub stream: [u8; 32],
    pub revision: u64,
    pub position: u64,
    /// SHA-256 of CJ(source event): duplicate submissions are compared against it.
    pub event_content_digest: [u8; 32],
}

/// The `engine.state` projection.
#[derive(Debug)]
pub(crate) struct EngineStateProjection {
    reduce: ReduceFn,
}

impl EngineStateProjection {
    pub(crate) fn new(reduce: ReduceFn) -> EngineStateProjection {
        EngineStateProjection { reduce }
    }
}

/// Reads the stored head value of `stream` inside a hook transaction.
pub(crate) fn head_in(
    tx: &HookTxn<'_>,
    stream: &StreamId,
) -> Result<Option<StoredHead>, HookError> {
    tx.get(HEADS_TABLE, stream.as_bytes(), |v| {
        v.map(StoredHead::decode).transpose()
    })?
    .map_err(|e| {
        refuse(
            ENGINE_HEAD_CORRUPT,
            format!("the head of engine stream {stream} does not decode: {e}"),
        )
    })
}

/// The state of a summarized stream, replayed inside a hook transaction from the journal's
/// records between the stream's first and head positions (spec/engine-store.md §3).
fn replay_summary_in(
    tx: &HookTxn<'_>,
    stream: &StreamId,
    summary: &HeadSummary,
    reduce: ReduceFn,
) -> Result<EngineState, HookError> {
    let corrupt = |detail: SummaryReplayError| {
        refuse(
            ENGINE_HEAD_CORRUPT,
            format!(
                "the summary head of engine stream {stream} at revision {} does not match its records: {detail}",
                summary.revision
            ),
        )
    };
    let Some(end) = summary.head_position.checked_add(1) else {
        return Err(corrupt(SummaryReplayError::Head {
            replayed: 0,
            replayed_position: 0,
            summary: summary.revision,
            summary_position: summary.head_position,
        }));
    };
    let mut fold = StreamFold::new(reduce);
    let mut failure = None;
    let replayed = tx.replay(summary.first_position, end, |_, view| {
        if view.stream != *stream {
            return Ok(());
        }
        fold.push(view).map_err(|detail| {
            failure = Some(detail);
            HookError::new("the summary replay stopped")
        })
    });
    if let Some(detail) = failure {
        return Err(corrupt(detail));
    }
    replayed?;
    fold.finish(summary).map_err(corrupt)
}

fn refuse(code: &'static str, message: String) -> HookError {
    HookError::with_code(code, message)
}

impl Projection for EngineStateProjection {
    fn name(&self) -> &'static str {
        ENGINE_STATE_PROJECTION
    }

    fn version(&self) -> u32 {
        ENGINE_STATE_PROJECTION_VERSION
    }

    fn tables(&self) -> &'static [&'static str] {
        &[HEADS_TABLE, EVENTS_TABLE]
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        if record.kind != ENGINE_RECORD_KIND {
            return Ok(());
        }
        let decoded = decode_view(record).map_err(|e| {
            refuse(
                codes::ENGINE_RECORD_INVALID,
                format!("engine record {} is invalid: {e}", record.event_id),
            )
        })?;
        let prev = head_in(tx, &record.stream)?;
        let continues = match &prev {
            None => record.revision == 1,
            Some(h) => {
                h.revision().checked_add(1) == Some(record.revision)
                    && h.head_record_digest() == record.previous_digest
            }
        };
        if !continues {
            return Err(refuse(
                codes::ENGINE_CHAIN_BROKEN,
                format!(
                    "engine record {} at revision {} does not continue the projected head at revision {}",
                    record.event_id,
                    record.revision,
                    prev.as_ref().map_or(0, StoredHead::revision)
                ),
            ));
        }
        let known = tx.get(EVENTS_TABLE, record.event_id.as_bytes(), |v| v.is_some())?;
        if known {
            return Err(refuse(
                codes::ENGINE_EVENT_DUPLICATE,
                format!("engine event {} is already projected", record.event_id),
            ));
        }
        // A summarized stream gets its state back from its records (invariant 3 of §3).
        let (first_position, prev_state) = match prev {
            None => (record.position, None),
            Some(StoredHead::Full(h)) => (h.first_position, Some(h.state)),
            Some(StoredHead::Summary(s)) => (
                s.first_position,
                Some(replay_summary_in(tx, &record.stream, &s, self.reduce)?),
            ),
        };
        let (state, transition) =
            (self.reduce)(prev_state.as_ref(), &decoded.replay).map_err(|e| {
                refuse(
                    codes::ENGINE_REDUCER_REFUSED,
                    format!(
                        "the reducer refused engine record {} at revision {}: {e}",
                        record.event_id, record.revision
                    ),
                )
            })?;
        if transition.view().to_cj() != decoded.record.transition_json {
            return Err(refuse(
                codes::ENGINE_REPLAY_DIVERGED,
                format!(
                    "engine record {} at revision {} stores a transition the reducer does not produce",
                    record.event_id, record.revision
                ),
            ));
        }
        let state_digest = state.digest();
        if state_digest != decoded.record.result_state_digest || state.revision != record.revision {
            return Err(refuse(
                codes::ENGINE_REPLAY_DIVERGED,
                format!(
                    "engine record {} at revision {} stores state digest {}, the reducer produces {state_digest}",
                    record.event_id, record.revision, decoded.record.result_state_digest
                ),
            ));
        }
        // Both digests are SHA-256 hex by construction (validated record, H(CJ(state))).
        let (Some(state_digest), Some(event_digest)) = (
            parse_sha(&state_digest),
            parse_sha(&decoded.record.source_event_content_digest),
        ) else {
            return Err(refuse(
                codes::ENGINE_RECORD_INVALID,
                format!(
                    "engine record {} carries a malformed digest",
                    record.event_id
                ),
            ));
        };
        let head = StoredHead::for_head(EngineHead {
            revision: record.revision,
            head_record_digest: *record.digest.as_bytes(),
            head_position: record.position,
            first_position,
            state_digest,
            state,
        });
        let entry = EventEntry {
            stream: *record.stream.as_bytes(),
            revision: record.revision,
            position: record.position,
            event_content_digest: event_digest,
        };
        if matches!(head, StoredHead::Summary(_)) {
            // A full head of up to tens of KB shrinks to a summary of 92 bytes. Replaced in place,
            // the small value would keep the whole leaf page the large one needed (measured: 4.4
            // KB of empty page per terminal stream); removed first, the leaf is merged with a
            // neighbour and the summary packs with the others (spec/storage-growth.md §7).
            tx.remove(HEADS_TABLE, record.stream.as_bytes())?;
        }
        tx.insert(HEADS_TABLE, record.stream.as_bytes(), &head.encode()?)?;
        tx.insert(
            EVENTS_TABLE,
            record.event_id.as_bytes(),
            &archive::to_bytes(&entry)?,
        )?;
        Ok(())
    }
}
