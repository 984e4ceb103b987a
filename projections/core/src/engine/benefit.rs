//! The benefit audit (spec/engine-store.md §5): one immutable entry per planning run,
//! keyed by the result digest, holding the full benefit selection result. The journal keeps only
//! the compact reference in the engine state; this projection keeps the full result.
//!
//! Each result is one journal record of kind [`BENEFIT_RESULT_KIND`] on the stream
//! `StreamId::derive(BENEFIT_AUDIT_NAMESPACE, result_digest)`, appended with `NoStream`, event id
//! `benefit-result:` + digest; its payload is the result's canonical ASCII JSON text.

use ctx_journal::{HookError, HookTxn, PAYLOAD_MAX_BYTES, RecordView, StreamId};
use ctx_model::{BENEFIT_RESULT_SCHEMA_ID, Json, JsonError, cja_digest, is_sha, parse_sha};
use sha2::{Digest as _, Sha256};

use crate::archive;
use crate::framework::Projection;
use crate::streams::{BENEFIT_AUDIT_NAMESPACE, BENEFIT_RESULT_KIND};

use super::codes;
/// Event id prefix; the event id is this prefix and the result digest.
pub const BENEFIT_EVENT_PREFIX: &str = "benefit-result:";
/// Longest stored result. The reference allows 32 MiB; one journal record holds at most
/// [`PAYLOAD_MAX_BYTES`] (1 MiB), which bounds the result here.
pub const BENEFIT_RESULT_MAX_BYTES: usize = PAYLOAD_MAX_BYTES;

/// Name of the projection.
pub const ENGINE_BENEFIT_AUDIT_PROJECTION: &str = "engine.benefit_audit";
/// Result digest (32 raw bytes) → rkyv [`BenefitResultEntry`].
pub const BENEFIT_RESULTS_TABLE: &str = "proj.engine.benefit_results";

/// One stored benefit result.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct BenefitResultEntry {
    /// The canonical ASCII JSON text, exactly as submitted.
    pub bytes: Vec<u8>,
    pub byte_length: u64,
    /// SHA-256 of `bytes`.
    pub content_digest: [u8; 32],
}

/// The stream of a result digest.
pub fn benefit_stream(result_digest: &str) -> Result<StreamId, ctx_journal::InputError> {
    StreamId::derive(BENEFIT_AUDIT_NAMESPACE, result_digest.as_bytes())
}

/// The event id of a result digest.
pub fn benefit_event_id(result_digest: &str) -> String {
    format!("{BENEFIT_EVENT_PREFIX}{result_digest}")
}

/// Checks a result text and returns its `result_digest`: bounded, ASCII, valid JSON without
/// duplicate keys, the result schema, byte-equal to its own canonical ASCII encoding, and a
/// `result_digest` equal to H(CJA(the other fields)) (spec/planner.md §6). The
/// semantic checks of the result (selections, assessments, policy) belong to the benefit model.
pub fn validate_result_text(text: &str) -> Result<String, BenefitResultError> {
    if text.len() > BENEFIT_RESULT_MAX_BYTES {
        return Err(BenefitResultError::TooLarge { len: text.len() });
    }
    if !text.is_ascii() {
        return Err(BenefitResultError::NotAscii);
    }
    let value = Json::parse(text).map_err(|e| match e {
        JsonError::DuplicateKey { .. } => BenefitResultError::DuplicateField,
        _ => BenefitResultError::NotJson,
    })?;
    let Json::Obj(mut fields) = value else {
        return Err(BenefitResultError::NotObject);
    };
    if fields.get("schema").and_then(Json::as_str) != Some(BENEFIT_RESULT_SCHEMA_ID) {
        return Err(BenefitResultError::Schema);
    }
    if Json::Obj(fields.clone()).to_cja() != text {
        return Err(BenefitResultError::NotCanonical);
    }
    let digest = match fields.remove("result_digest") {
        Some(Json::Str(d)) if is_sha(&d) => d,
        _ => return Err(BenefitResultError::DigestShape),
    };
    if cja_digest(&Json::Obj(fields)) != digest {
        return Err(BenefitResultError::DigestMismatch);
    }
    Ok(digest)
}

/// Why a benefit result text is refused by [`validate_result_text`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BenefitResultError {
    #[error("benefit result JSON is {len} bytes; the limit is {max} bytes", max = BENEFIT_RESULT_MAX_BYTES)]
    TooLarge { len: usize },
    #[error("benefit result JSON must use canonical ASCII encoding")]
    NotAscii,
    #[error("benefit result JSON contains a duplicate field")]
    DuplicateField,
    #[error("benefit result must be valid JSON")]
    NotJson,
    #[error("benefit result must be a JSON object")]
    NotObject,
    #[error("benefit result schema is unsupported")]
    Schema,
    #[error("benefit result JSON must use canonical encoding")]
    NotCanonical,
    #[error("result_digest must be a lowercase SHA-256 digest")]
    DigestShape,
    #[error("result_digest does not match canonical result fields")]
    DigestMismatch,
}

/// The `engine.benefit_audit` projection.
#[derive(Debug)]
pub(crate) struct BenefitAuditProjection;

fn invalid(event_id: &str, message: impl std::fmt::Display) -> HookError {
    HookError::with_code(
        codes::BENEFIT_RESULT_INVALID,
        format!("benefit result record {event_id} is invalid: {message}"),
    )
}

impl Projection for BenefitAuditProjection {
    fn name(&self) -> &'static str {
        ENGINE_BENEFIT_AUDIT_PROJECTION
    }

    fn version(&self) -> u32 {
        1
    }

    fn tables(&self) -> &'static [&'static str] {
        &[BENEFIT_RESULTS_TABLE]
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        if record.kind != BENEFIT_RESULT_KIND {
            return Ok(());
        }
        let text = std::str::from_utf8(record.payload)
            .map_err(|_| invalid(record.event_id, "benefit result JSON must be UTF-8"))?;
        let digest = validate_result_text(text).map_err(|e| invalid(record.event_id, e))?;
        let placed = benefit_stream(&digest).ok() == Some(record.stream)
            && record.revision == 1
            && record.event_id == benefit_event_id(&digest);
        if !placed {
            return Err(invalid(
                record.event_id,
                format!("the record is not the first of the stream of result digest {digest}"),
            ));
        }
        let Some(key) = parse_sha(&digest) else {
            return Err(invalid(record.event_id, "result_digest is not a digest"));
        };
        let entry = BenefitResultEntry {
            bytes: record.payload.to_vec(),
            byte_length: record.payload.len() as u64,
            content_digest: Sha256::digest(record.payload).into(),
        };
        let bytes = archive::to_bytes(&entry)?;
        let stored = tx.get(BENEFIT_RESULTS_TABLE, &key, |v| v.map(<[u8]>::to_vec))?;
        match stored {
            Some(existing) if existing == bytes => Ok(()),
            Some(_) => Err(HookError::with_code(
                codes::BENEFIT_DIGEST_COLLISION,
                "benefit result digest is already bound to different bytes",
            )),
            None => {
                tx.insert(BENEFIT_RESULTS_TABLE, &key, &bytes)?;
                Ok(())
            }
        }
    }
}
