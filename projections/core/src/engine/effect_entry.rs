//! The value of a claims or outcomes table entry of `engine.effects` (version 3): the journal
//! position and digest of the claim or outcome record, not a copy of its payload
//! (spec/engine-store.md §4, "Claim and outcome entries").
//!
//! The journal already holds every claim and outcome record, and a record is immutable, so the
//! entry only has to say which record it is and let a reader check that it fetched that one. The
//! action content digest is kept as well because the install-lineage scan of an activation claim
//! filters every install claim of a stream by it (spec/engine-store.md §6) and must not fetch a
//! record per claim to do so.

use ctx_journal::{Digest, RecordView, StreamId};
use ctx_model::{hex, parse_sha};

use crate::archive;

use super::effects::{ClaimRecord, OutcomeRecord};

/// Length of every claims and outcomes table value (spec/engine-store.md §4).
pub const EFFECT_ENTRY_BYTES: usize = 73;
/// First byte of a claim entry (`C`).
pub const CLAIM_ENTRY_TAG: u8 = 0x43;
/// First byte of an outcome entry (`O`).
pub const OUTCOME_ENTRY_TAG: u8 = 0x4f;

/// Which record an entry points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectEntryKind {
    Claim,
    Outcome,
}

impl EffectEntryKind {
    fn tag(self) -> u8 {
        match self {
            EffectEntryKind::Claim => CLAIM_ENTRY_TAG,
            EffectEntryKind::Outcome => OUTCOME_ENTRY_TAG,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EffectEntryKind::Claim => "claim",
            EffectEntryKind::Outcome => "outcome",
        }
    }
}

/// A claims or outcomes table value, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectEntry {
    pub kind: EffectEntryKind,
    /// Global journal position of the record (≥ 1).
    pub position: u64,
    /// The record's journal digest D.
    pub record_digest: Digest,
    /// The claimed action's content digest, raw.
    pub action_content_digest: [u8; 32],
}

/// Why an entry, or the record it points at, is not what the entry says (spec/engine-store.md
/// §4, invariants 2 and 3): the projection is corrupt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EffectEntryError {
    #[error("the entry is {len} bytes, but every {kind} entry is exactly {EFFECT_ENTRY_BYTES}")]
    Length { kind: &'static str, len: usize },
    #[error("the entry starts with tag {found:#04x}, which is not the {kind} entry tag")]
    Tag { kind: &'static str, found: u8 },
    #[error("the entry names journal position 0, which no record has")]
    Position,
    #[error("the action content digest {digest:?} is not a SHA-256 digest")]
    ContentDigest { digest: String },
    #[error("the journal has no record at position {position}")]
    Missing { position: u64 },
    #[error(
        "the record at position {position} has digest {found}, but the entry names digest {expected}"
    )]
    Digest {
        position: u64,
        expected: Digest,
        found: Digest,
    },
    #[error("the record at position {position} is a {found:?} record, not a {expected} record")]
    RecordKind {
        position: u64,
        expected: &'static str,
        found: String,
    },
    #[error("the record at position {position} does not decode: {detail}")]
    Undecodable { position: u64, detail: String },
    #[error(
        "the record at position {position} is the {kind} of another action or stream than the entry's key"
    )]
    OtherAction { position: u64, kind: &'static str },
}

impl EffectEntry {
    /// The entry of `record`, whose payload holds `action_content_digest` (hex).
    pub fn of_record(
        kind: EffectEntryKind,
        record: &RecordView<'_>,
        action_content_digest: &str,
    ) -> Result<EffectEntry, EffectEntryError> {
        let action_content_digest =
            parse_sha(action_content_digest).ok_or_else(|| EffectEntryError::ContentDigest {
                digest: action_content_digest.to_owned(),
            })?;
        Ok(EffectEntry {
            kind,
            position: record.position,
            record_digest: record.digest,
            action_content_digest,
        })
    }

    /// The fixed little-endian layout of spec/engine-store.md §4.
    pub fn encode(&self) -> [u8; EFFECT_ENTRY_BYTES] {
        let mut out = [0u8; EFFECT_ENTRY_BYTES];
        out[0] = self.kind.tag();
        out[1..9].copy_from_slice(&self.position.to_le_bytes());
        out[9..41].copy_from_slice(self.record_digest.as_bytes());
        out[41..73].copy_from_slice(&self.action_content_digest);
        out
    }

    /// Decodes a value of a `kind` table; any other length or tag, or position 0, is an error.
    pub fn decode(kind: EffectEntryKind, bytes: &[u8]) -> Result<EffectEntry, EffectEntryError> {
        let Ok(bytes) = <&[u8; EFFECT_ENTRY_BYTES]>::try_from(bytes) else {
            return Err(EffectEntryError::Length {
                kind: kind.as_str(),
                len: bytes.len(),
            });
        };
        if bytes[0] != kind.tag() {
            return Err(EffectEntryError::Tag {
                kind: kind.as_str(),
                found: bytes[0],
            });
        }
        let mut position = [0u8; 8];
        position.copy_from_slice(&bytes[1..9]);
        let position = u64::from_le_bytes(position);
        if position == 0 {
            return Err(EffectEntryError::Position);
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[9..41]);
        let mut action_content_digest = [0u8; 32];
        action_content_digest.copy_from_slice(&bytes[41..73]);
        Ok(EffectEntry {
            kind,
            position,
            record_digest: Digest::from_bytes(digest),
            action_content_digest,
        })
    }

    /// The action content digest as hex, as the records carry it.
    pub fn action_content_digest_hex(&self) -> String {
        hex(&self.action_content_digest)
    }

    /// Checks that `record` (read at this entry's position) is the record this entry names:
    /// its digest, its kind `record_kind`, and, once decoded, the key's engine stream and action
    /// id and the entry's content digest (invariant 3). A record of another action with its
    /// true digest, copied into this key, is caught by the last check.
    fn check_record(
        &self,
        record: &RecordView<'_>,
        record_kind: &'static str,
    ) -> Result<(), EffectEntryError> {
        if record.position != self.position {
            return Err(EffectEntryError::Missing {
                position: self.position,
            });
        }
        if record.digest != self.record_digest {
            return Err(EffectEntryError::Digest {
                position: self.position,
                expected: self.record_digest,
                found: record.digest,
            });
        }
        if record.kind != record_kind {
            return Err(EffectEntryError::RecordKind {
                position: self.position,
                expected: record_kind,
                found: record.kind.to_owned(),
            });
        }
        Ok(())
    }

    fn check_owner(
        &self,
        engine: &StreamId,
        action_id: &str,
        stream_key: &str,
        record_action_id: &str,
        record_content_digest: &str,
    ) -> Result<(), EffectEntryError> {
        let same_stream = StreamId::derive(
            crate::streams::ENGINE_STREAM_NAMESPACE,
            stream_key.as_bytes(),
        )
        .is_ok_and(|s| s == *engine);
        if !same_stream
            || record_action_id != action_id
            || parse_sha(record_content_digest) != Some(self.action_content_digest)
        {
            return Err(EffectEntryError::OtherAction {
                position: self.position,
                kind: self.kind.as_str(),
            });
        }
        Ok(())
    }

    /// The claim this entry names, decoded from `record` after the checks of [`Self::check_record`].
    pub(crate) fn claim_from(
        &self,
        record: &RecordView<'_>,
        record_kind: &'static str,
        engine: &StreamId,
        action_id: &str,
    ) -> Result<ClaimRecord, EffectEntryError> {
        self.check_record(record, record_kind)?;
        let claim = archive::from_bytes::<ClaimRecord>(record.payload).map_err(|e| {
            EffectEntryError::Undecodable {
                position: self.position,
                detail: e.to_string(),
            }
        })?;
        self.check_owner(
            engine,
            action_id,
            &claim.stream_key,
            &claim.action_id,
            &claim.action_content_digest,
        )?;
        Ok(claim)
    }

    /// The outcome this entry names, decoded from `record` after the checks of
    /// [`Self::check_record`].
    pub(crate) fn outcome_from(
        &self,
        record: &RecordView<'_>,
        record_kind: &'static str,
        engine: &StreamId,
        action_id: &str,
    ) -> Result<OutcomeRecord, EffectEntryError> {
        self.check_record(record, record_kind)?;
        let outcome = archive::from_bytes::<OutcomeRecord>(record.payload).map_err(|e| {
            EffectEntryError::Undecodable {
                position: self.position,
                detail: e.to_string(),
            }
        })?;
        self.check_owner(
            engine,
            action_id,
            &outcome.stream_key,
            &outcome.action_id,
            &outcome.action_content_digest,
        )?;
        Ok(outcome)
    }
}

/// Splits an effects table key into its engine stream id and action id.
pub(crate) fn split_key(key: &[u8]) -> Option<(StreamId, &str)> {
    let (stream, action_id) = key.split_at_checked(32)?;
    let stream = <[u8; 32]>::try_from(stream).ok()?;
    Some((
        StreamId::from_bytes(stream),
        std::str::from_utf8(action_id).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sample() -> EffectEntry {
        EffectEntry {
            kind: EffectEntryKind::Outcome,
            position: 0x0102_0304_0506_0708,
            record_digest: Digest::from_bytes([0xaa; 32]),
            action_content_digest: [0x55; 32],
        }
    }

    #[test]
    fn entries_have_the_documented_fixed_little_endian_layout() {
        let bytes = sample().encode();
        assert_eq!(bytes.len(), EFFECT_ENTRY_BYTES);
        assert_eq!(bytes[0], b'O');
        assert_eq!(bytes[1..9], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(bytes[9..41], [0xaa; 32]);
        assert_eq!(bytes[41..73], [0x55; 32]);
        assert_eq!(
            EffectEntry::decode(EffectEntryKind::Outcome, &bytes).unwrap(),
            sample()
        );
    }

    #[test]
    fn a_wrong_length_tag_or_position_is_a_typed_error() {
        let bytes = sample().encode();
        assert!(matches!(
            EffectEntry::decode(EffectEntryKind::Outcome, &bytes[..72]),
            Err(EffectEntryError::Length { len: 72, .. })
        ));
        assert!(matches!(
            EffectEntry::decode(EffectEntryKind::Claim, &bytes),
            Err(EffectEntryError::Tag { found: b'O', .. })
        ));
        let mut zero = bytes;
        zero[1..9].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            EffectEntry::decode(EffectEntryKind::Outcome, &zero),
            Err(EffectEntryError::Position)
        );
    }

    #[test]
    fn keys_split_into_stream_and_action_id() {
        let mut key = vec![7u8; 32];
        key.extend_from_slice(b"act-1");
        let (stream, id) = split_key(&key).unwrap();
        assert_eq!(stream.as_bytes(), &[7u8; 32]);
        assert_eq!(id, "act-1");
        assert!(split_key(&key[..31]).is_none());
    }
}
