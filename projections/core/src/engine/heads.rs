//! The `engine.state` projection: the head of every engine stream and the index of engine event
//! ids (spec/engine-store.md §3).
//!
//! `apply` re-runs the reducer on the stored replay input over the stored previous head and
//! refuses a record whose transition or state digest differs from what the reducer produces. The
//! projection is therefore a true fold of the journal: a rebuild reproduces it byte for byte, and
//! a record the reducer would not have produced cannot enter the journal while it is attached.

use ctx_journal::{Digest, HookError, HookTxn, RecordView, StreamId};
use ctx_model::{EngineState, ReduceError, ReplayInput, Transition, parse_sha};

use crate::archive;
use crate::framework::Projection;
use crate::streams::ENGINE_RECORD_KIND;

use super::codes;
use super::record::decode_view;

/// Name of the projection (its journal hook and meta entry).
pub const ENGINE_STATE_PROJECTION: &str = "engine.state";
/// Engine stream id (32 bytes) → rkyv [`EngineHead`].
pub const HEADS_TABLE: &str = "proj.engine.heads";
/// Engine event id (its bytes) → rkyv [`EventEntry`].
pub const EVENTS_TABLE: &str = "proj.engine.events";

/// The reducer the projection (and the engine) runs. A plain function: the projection must be a
/// pure fold, so nothing may be captured.
pub(crate) type ReduceFn =
    fn(Option<&EngineState>, &ReplayInput) -> Result<(EngineState, Transition), ReduceError>;

/// The projected head of one engine stream.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EngineHead {
    /// The stream's last revision (≥ 1; a stream without records has no head entry).
    pub revision: u64,
    /// Journal digest (formula D) of the record at `revision`.
    pub head_record_digest: [u8; 32],
    /// Global journal position of that record.
    pub head_position: u64,
    /// SHA-256 of CJ(state).
    pub state_digest: [u8; 32],
    pub state: EngineState,
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

/// Reads the projected head of `stream` inside a hook transaction.
pub(crate) fn head_in(
    tx: &HookTxn<'_>,
    stream: &StreamId,
) -> Result<Option<EngineHead>, HookError> {
    Ok(tx.get(HEADS_TABLE, stream.as_bytes(), |v| {
        v.map(archive::from_bytes::<EngineHead>).transpose()
    })??)
}

fn refuse(code: &'static str, message: String) -> HookError {
    HookError::with_code(code, message)
}

impl Projection for EngineStateProjection {
    fn name(&self) -> &'static str {
        ENGINE_STATE_PROJECTION
    }

    fn version(&self) -> u32 {
        1
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
                h.revision.checked_add(1) == Some(record.revision)
                    && Digest::from_bytes(h.head_record_digest) == record.previous_digest
            }
        };
        if !continues {
            return Err(refuse(
                codes::ENGINE_CHAIN_BROKEN,
                format!(
                    "engine record {} at revision {} does not continue the projected head at revision {}",
                    record.event_id,
                    record.revision,
                    prev.as_ref().map_or(0, |h| h.revision)
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
        let (state, transition) = (self.reduce)(prev.as_ref().map(|h| &h.state), &decoded.replay)
            .map_err(|e| {
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
        let head = EngineHead {
            revision: record.revision,
            head_record_digest: *record.digest.as_bytes(),
            head_position: record.position,
            state_digest,
            state,
        };
        let entry = EventEntry {
            stream: *record.stream.as_bytes(),
            revision: record.revision,
            position: record.position,
            event_content_digest: event_digest,
        };
        tx.insert(
            HEADS_TABLE,
            record.stream.as_bytes(),
            &archive::to_bytes(&head)?,
        )?;
        tx.insert(
            EVENTS_TABLE,
            record.event_id.as_bytes(),
            &archive::to_bytes(&entry)?,
        )?;
        Ok(())
    }
}
