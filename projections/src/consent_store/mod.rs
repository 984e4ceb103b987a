//! The install consent broker store (reference consent-and-skill-cas §1) as a projection of the
//! journal: no separate database. Specified in `spec/projections.md`, section "consent.store".
//!
//! First slice: the broker identity (its durable audience), challenges and their `pending` state,
//! idempotent creation, lookups by id and by digest, and the time-based expiry view. Decisions,
//! nonces, reservations and settlement are later records on the same streams.
//!
//! - The broker identity is revision 1 of the stream `StreamId::derive("ctx.consent-broker",
//!   "identity")` (kind [`IDENTITY_KIND`]), written with the first challenge (same append).
//! - Each challenge has its own stream `StreamId::derive("ctx.consent", challenge_id)`; revision 1
//!   (kind [`CHALLENGE_KIND`], appended with `NoStream`, event id `ctx-consent-challenge:` +
//!   challenge digest) carries the challenge's canonical JSON, byte for byte the reference's
//!   `challenge_json`; its `occurred_at` is `created_at`.
//!
//! The journal authenticates every record (digest and installation-keyed MAC), which replaces the
//! reference's record and identity digests. The `consent.store` projection indexes the records
//! and enforces, inside the append transaction, what must hold across streams: a challenge only
//! after the identity and for its audience, one challenge per digest, a challenge live when
//! created, the capacity. Reads never trust the index alone: every challenge returned is re-read
//! from the journal, re-decoded and compared with its index entry.
//!
//! Expiry is a view, not a record: the state of a pending challenge is `expired` for an effective
//! time at or after its `expires_at` (reference §1.9), computed on every read; nothing is written.

mod assertion;
pub use assertion::*;
mod challenge;

use std::ops::ControlFlow;
use std::sync::Arc;

use ctx_journal::{
    AppendError, ExpectedRevision, HookError, HookTxn, Journal, NewRecord, ReadError, Record,
    RecordView, StreamAppend, StreamId, Timestamp,
};
use sha2::{Digest as _, Sha256};

use crate::archive;
use crate::check::{UtcMicros, is_sha, is_token, parse_sha};
use crate::framework::{FrameworkError, Projection, Projections};
use crate::json::{Json, JsonMap};

use challenge::decode_stored;
pub use challenge::{
    CAPABILITY_ID_MAX_BYTES, CHALLENGE_DIGEST_KEYS, CHALLENGE_JSON_MAX_BYTES, CHALLENGE_KEYS,
    CHALLENGE_SCHEMA, ChallengeFields, ChallengeInputs, INSTALLATION_HOST_FEATURE,
    InstallConsentChallenge, REQUESTED_ACTION_KIND, REQUESTED_ACTION_KIND_MAX_BYTES,
    SELECTION_BINDING_SCHEMA, derive_install_consent_challenge, install_consent_selection_digest,
};

// ------------------------------------------------------------------------------------------------
// Names, formulas and limits
// ------------------------------------------------------------------------------------------------

/// Journal record kind of the broker identity (revision 1 of the identity stream).
pub const IDENTITY_KIND: &str = "ctx.consent-broker-identity.v1";
/// Journal record kind of a challenge (revision 1 of a challenge stream).
pub const CHALLENGE_KIND: &str = "ctx.consent-challenge.v1";
/// Stream namespace of the broker identity; its key is [`IDENTITY_STREAM_KEY`].
pub const IDENTITY_STREAM_NAMESPACE: &str = "ctx.consent-broker";
pub const IDENTITY_STREAM_KEY: &[u8] = b"identity";
/// Stream namespace of challenges; the key is the challenge id (UTF-8).
pub const CHALLENGE_STREAM_NAMESPACE: &str = "ctx.consent";
/// Event id of the identity record.
pub const IDENTITY_EVENT_ID: &str = "ctx-consent-broker-identity";
/// Prefix of a challenge record's event id; the challenge digest (64 hex) follows.
pub const CHALLENGE_EVENT_PREFIX: &str = "ctx-consent-challenge:";
/// Schema of the identity record's payload.
pub const IDENTITY_SCHEMA: &str = "ctx.install-consent-broker-identity-v1";
/// `occurred_at` of the identity record: the identity is not an event in time, and a fixed value
/// makes every writer's identity record byte-identical.
pub const IDENTITY_OCCURRED_AT: Timestamp = Timestamp(0);

/// Name of the projection (its journal hook and meta entry).
pub const CONSENT_STORE_PROJECTION: &str = "consent.store";
/// [`IDENTITY_ENTRY_KEY`] → rkyv [`IdentityEntry`].
pub const CONSENT_IDENTITY_TABLE: &str = "proj.consent.identity";
pub const IDENTITY_ENTRY_KEY: &[u8] = b"identity";
/// Challenge id (UTF-8 bytes, 1–128) → rkyv [`ChallengeEntry`].
pub const CONSENT_CHALLENGES_TABLE: &str = "proj.consent.challenges";
/// [`digest_key`] of a challenge digest (32 bytes) → challenge id (UTF-8 bytes).
pub const CONSENT_BY_DIGEST_TABLE: &str = "proj.consent.by_digest";
/// Counter name (bytes) → u64 LE: [`COUNT_CHALLENGES_KEY`].
pub const CONSENT_COUNTS_TABLE: &str = "proj.consent.counts";
pub const COUNT_CHALLENGES_KEY: &[u8] = b"challenges";

/// Most challenges one journal holds, whatever their state: a lifetime bound, since challenges are
/// never deleted (the reference's default capacity, §1.1).
pub const CONSENT_CHALLENGES_MAX: u64 = 4_096;

const DIGEST_KEY_DOMAIN: &[u8] = b"ctx.consent.digest-key.v1\0";
const IDENTITY_KEYS: [&str; 2] = ["audience", "schema"];

/// Refusal codes of the projection (carried by `AppendError::Hook`).
pub mod codes {
    /// The store holds [`super::CONSENT_CHALLENGES_MAX`] challenges.
    pub const CONSENT_CAPACITY: &str = "consent-capacity";
    /// The challenge's audience is not the broker identity's.
    pub const CONSENT_AUDIENCE: &str = "consent-audience";
    /// The challenge was already expired when created.
    pub const CONSENT_EXPIRED: &str = "consent-expired";
    /// Another challenge already holds this digest.
    pub const CONSENT_DIGEST_BOUND: &str = "consent-digest-bound";
    /// A consent record that does not validate or is out of place.
    pub const CONSENT_RECORD_INVALID: &str = "consent-record-invalid";
}

// ------------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------------

/// Why a consent store operation failed. `Display` is the reference's message; `detail` (in
/// `Debug` only) says more for operators and never carries a key or a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsentStoreError {
    /// The journal could not be read or written (`ConsentBrokerUnavailable`).
    #[error("{message}")]
    Unavailable {
        message: &'static str,
        detail: String,
    },
    /// Something read back does not validate (`ConsentBrokerCorruption`).
    #[error("{message}")]
    Corruption {
        message: &'static str,
        detail: String,
    },
    /// No such challenge (`KeyError` for an id, `ConsentBrokerChallengeNotFound` for a digest).
    #[error("{message}")]
    NotFound { message: &'static str },
    /// A different challenge already holds this public id (`ConsentBrokerReplay`).
    #[error("{message}")]
    Conflict { message: &'static str },
    /// The lifetime challenge bound is reached (`ConsentBrokerCapacityExceeded`).
    #[error("{message}")]
    CapacityExceeded { message: &'static str },
    /// The challenge has expired (`ConsentBrokerExpired`).
    #[error("{message}")]
    Expired { message: &'static str },
    /// Refused for this broker: another audience (`ConsentBrokerDecisionRejected`).
    #[error("{message}")]
    Rejected { message: &'static str },
    /// Derivation inputs that do not bind one exact install (`InstallConsentBrokerBindingError`).
    #[error("{message}")]
    Binding { message: &'static str },
    /// A malformed argument (`ValueError` / `TypeError`).
    #[error("{message}")]
    Invalid { message: String },
}

pub(crate) fn invalid(message: impl Into<String>) -> ConsentStoreError {
    ConsentStoreError::Invalid {
        message: message.into(),
    }
}

pub(crate) fn binding_error(message: &'static str) -> ConsentStoreError {
    ConsentStoreError::Binding { message }
}

fn corruption(message: &'static str, detail: impl Into<String>) -> ConsentStoreError {
    ConsentStoreError::Corruption {
        message,
        detail: detail.into(),
    }
}

fn unavailable(detail: impl std::fmt::Display) -> ConsentStoreError {
    ConsentStoreError::Unavailable {
        message: "consent broker store is unavailable",
        detail: detail.to_string(),
    }
}

/// A challenge id that names no challenge (the reference raises `KeyError(challenge_id)`).
pub const NOT_FOUND_ID: ConsentStoreError = ConsentStoreError::NotFound {
    message: "install consent challenge ID was not found",
};
/// A digest that names no challenge in this workspace and release root.
pub const NOT_FOUND_DIGEST: ConsentStoreError = ConsentStoreError::NotFound {
    message: "install consent challenge digest was not found",
};
pub const CONFLICT_ID: ConsentStoreError = ConsentStoreError::Conflict {
    message: "public challenge ID is already bound to a different challenge",
};
pub const CAPACITY: ConsentStoreError = ConsentStoreError::CapacityExceeded {
    message: "install consent broker reached its bounded capacity",
};
pub const EXPIRED_AT_CREATION: ConsentStoreError = ConsentStoreError::Expired {
    message: "install consent challenge is already expired",
};
pub const EXPIRED: ConsentStoreError = ConsentStoreError::Expired {
    message: "install consent challenge or decision has expired",
};
pub const AUDIENCE_MISMATCH: ConsentStoreError = ConsentStoreError::Rejected {
    message: "install consent challenge audience does not match this broker",
};
pub const IDENTITY_AUDIENCE_MISMATCH: ConsentStoreError = ConsentStoreError::Rejected {
    message: "consent broker audience does not match its durable identity",
};

fn read_error(e: ReadError) -> ConsentStoreError {
    match e {
        ReadError::AuthenticationFailed { .. } => {
            corruption("consent broker record authentication failed", e.to_string())
        }
        ReadError::Corrupt { .. } => {
            corruption("consent broker record is unreadable", e.to_string())
        }
        other => unavailable(other),
    }
}

fn framework_error(e: FrameworkError) -> ConsentStoreError {
    corruption("consent broker projection is unavailable", e.to_string())
}

fn append_error(e: AppendError) -> ConsentStoreError {
    match e {
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_CAPACITY) => CAPACITY,
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_EXPIRED) => {
            EXPIRED_AT_CREATION
        }
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_AUDIENCE) => {
            AUDIENCE_MISMATCH
        }
        AppendError::Hook { .. } => corruption("consent broker record was refused", e.to_string()),
        AppendError::Input(i) => invalid(i.to_string()),
        AppendError::Read(r) => read_error(r),
        other => unavailable(other),
    }
}

// ------------------------------------------------------------------------------------------------
// States and records
// ------------------------------------------------------------------------------------------------

/// The lifecycle state of a challenge (reference §1.7). This slice produces only `Pending` and
/// `Expired`; the others come with decisions, reservations and settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChallengeState {
    Pending,
    DecisionReady,
    ReauthenticationRequired,
    Reserved,
    Settled,
    Expired,
}

impl ChallengeState {
    pub const ALL: [ChallengeState; 6] = [
        ChallengeState::Pending,
        ChallengeState::DecisionReady,
        ChallengeState::ReauthenticationRequired,
        ChallengeState::Reserved,
        ChallengeState::Settled,
        ChallengeState::Expired,
    ];

    /// The reference's state name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeState::Pending => "pending",
            ChallengeState::DecisionReady => "decision-ready",
            ChallengeState::ReauthenticationRequired => "reauthentication-required",
            ChallengeState::Reserved => "reserved",
            ChallengeState::Settled => "settled",
            ChallengeState::Expired => "expired",
        }
    }

    pub fn parse(name: &str) -> Option<ChallengeState> {
        ChallengeState::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for ChallengeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a challenge as the store reports it at one effective time (the reference's
/// `InstallConsentChallengeRecord`, §1.7): privacy-safe, no authority. Store-issued only.
/// Decision and reservation fields join it with their records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeRecord {
    challenge: InstallConsentChallenge,
    state: ChallengeState,
    created_at: String,
    expired_at: Option<String>,
}

impl ChallengeRecord {
    pub fn challenge(&self) -> &InstallConsentChallenge {
        &self.challenge
    }
    pub fn state(&self) -> ChallengeState {
        self.state
    }
    /// Canonical UTC text: the effective time of the creation (the record's `occurred_at`).
    pub fn created_at(&self) -> &str {
        &self.created_at
    }
    /// For an expired challenge, the instant it expired: its `expires_at` (the view is derived,
    /// so it names when the state changed, not when a reader noticed).
    pub fn expired_at(&self) -> Option<&str> {
        self.expired_at.as_deref()
    }
}

// ------------------------------------------------------------------------------------------------
// Projection entries
// ------------------------------------------------------------------------------------------------

/// The index entry of the broker identity.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct IdentityEntry {
    pub audience: String,
    /// SHA-256 of the identity payload.
    pub payload_digest: [u8; 32],
    pub position: u64,
    /// The trusted-time floor in µs (reference §1.8). Always `None` in version 1: only a verified
    /// human decision raises it, with a record of a later version.
    pub trusted_time_high_water: Option<i64>,
}

/// The index entry of one challenge.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ChallengeEntry {
    pub challenge_id: String,
    pub stream: [u8; 32],
    pub challenge_digest: [u8; 32],
    /// SHA-256 of the challenge payload (its canonical bytes).
    pub payload_digest: [u8; 32],
    /// `occurred_at` of the challenge record, µs.
    pub created_at: i64,
    /// The challenge's `expires_at`, µs.
    pub expires_at: i64,
    pub position: u64,
}

/// SHA-256("ctx.consent.digest-key.v1\0" ‖ digest bytes): the digest index is keyed by a hash of
/// the public digest, so the index's key comparisons never run on the digest a caller guesses.
pub fn digest_key(challenge_digest: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DIGEST_KEY_DOMAIN);
    h.update(challenge_digest);
    h.finalize().into()
}

/// The journal stream of a challenge id.
pub fn challenge_stream(challenge_id: &str) -> Result<StreamId, ConsentStoreError> {
    StreamId::derive(CHALLENGE_STREAM_NAMESPACE, challenge_id.as_bytes())
        .map_err(|e| invalid(e.to_string()))
}

/// The journal stream of the broker identity.
pub fn identity_stream() -> Result<StreamId, ConsentStoreError> {
    StreamId::derive(IDENTITY_STREAM_NAMESPACE, IDENTITY_STREAM_KEY)
        .map_err(|e| invalid(e.to_string()))
}

fn challenge_event_id(challenge_digest: &str) -> String {
    format!("{CHALLENGE_EVENT_PREFIX}{challenge_digest}")
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the contents (reference §8.1): digests are compared without an early exit
    // that would time how many leading bytes a caller guessed.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A valid instant: inside the years 1–9999 that canonical timestamps cover.
fn in_range(t: UtcMicros) -> bool {
    t.checked_add(0).is_some()
}

fn identity_payload(audience: &str) -> Vec<u8> {
    Json::object([
        ("audience", Json::str(audience)),
        ("schema", Json::str(IDENTITY_SCHEMA)),
    ])
    .to_cja()
    .into_bytes()
}

/// Decodes an identity payload: canonical ASCII JSON of exactly `audience` (a token) and the
/// schema. Returns the audience.
fn decode_identity(payload: &[u8]) -> Result<String, &'static str> {
    const BAD: &str = "consent broker identity record is invalid";
    let text = std::str::from_utf8(payload).map_err(|_| BAD)?;
    let value = Json::parse(text).map_err(|_| BAD)?;
    let m: &JsonMap = value.as_obj().ok_or(BAD)?;
    let exact = m.len() == IDENTITY_KEYS.len()
        && IDENTITY_KEYS.iter().all(|k| m.contains_key(*k))
        && m.get("schema").and_then(Json::as_str) == Some(IDENTITY_SCHEMA);
    let audience = m.get("audience").and_then(Json::as_str).unwrap_or_default();
    if !exact || !is_token(audience) || identity_payload(audience) != payload {
        return Err(BAD);
    }
    Ok(audience.to_owned())
}

// ------------------------------------------------------------------------------------------------
// The projection
// ------------------------------------------------------------------------------------------------

/// The `consent.store` projection.
#[derive(Debug)]
pub(crate) struct ConsentStoreProjection;

fn refuse(code: &'static str, message: impl Into<String>) -> HookError {
    HookError::with_code(code, message)
}

fn count_in(tx: &HookTxn<'_>, key: &[u8]) -> Result<u64, HookError> {
    let stored = tx.get(CONSENT_COUNTS_TABLE, key, |v| v.map(<[u8]>::to_vec))?;
    match stored {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| {
                refuse(
                    codes::CONSENT_RECORD_INVALID,
                    "a consent store counter is corrupt",
                )
            }),
    }
}

fn identity_in(tx: &HookTxn<'_>) -> Result<Option<IdentityEntry>, HookError> {
    Ok(tx.get(CONSENT_IDENTITY_TABLE, IDENTITY_ENTRY_KEY, |v| {
        v.map(archive::from_bytes::<IdentityEntry>).transpose()
    })??)
}

/// The index entry a challenge record produces.
fn challenge_entry(
    challenge: &InstallConsentChallenge,
    record_stream: &StreamId,
    payload: &[u8],
    created_at: Timestamp,
    position: u64,
) -> Option<ChallengeEntry> {
    Some(ChallengeEntry {
        challenge_id: challenge.challenge_id().to_owned(),
        stream: *record_stream.as_bytes(),
        challenge_digest: parse_sha(challenge.challenge_digest())?,
        payload_digest: Sha256::digest(payload).into(),
        created_at: created_at.0,
        expires_at: challenge.expires_at_micros().0,
        position,
    })
}

impl ConsentStoreProjection {
    fn apply_identity(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let bad = |m: &str| {
            refuse(
                codes::CONSENT_RECORD_INVALID,
                format!("consent broker identity record is invalid: {m}"),
            )
        };
        let audience = decode_identity(record.payload).map_err(bad)?;
        let placed = record.revision == 1
            && identity_stream().ok() == Some(record.stream)
            && record.event_id == IDENTITY_EVENT_ID
            && record.occurred_at == IDENTITY_OCCURRED_AT;
        if !placed {
            return Err(bad("it is not the first record of the identity stream"));
        }
        if identity_in(tx)?.is_some() {
            return Err(bad("the broker identity is already recorded"));
        }
        let entry = IdentityEntry {
            audience,
            payload_digest: Sha256::digest(record.payload).into(),
            position: record.position,
            trusted_time_high_water: None,
        };
        tx.insert(
            CONSENT_IDENTITY_TABLE,
            IDENTITY_ENTRY_KEY,
            &archive::to_bytes(&entry)?,
        )?;
        Ok(())
    }

    fn apply_challenge(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let bad = |m: &str| {
            refuse(
                codes::CONSENT_RECORD_INVALID,
                format!(
                    "consent challenge record {} is invalid: {m}",
                    record.event_id
                ),
            )
        };
        let challenge = decode_stored(record.payload).map_err(bad)?;
        let placed = record.revision == 1
            && challenge_stream(challenge.challenge_id()).ok() == Some(record.stream)
            && record.event_id == challenge_event_id(challenge.challenge_digest());
        if !placed {
            return Err(bad("it is not the first record of its challenge stream"));
        }
        let created_at = UtcMicros(record.occurred_at.0);
        if !in_range(created_at) {
            return Err(bad("its creation time is not a canonical UTC instant"));
        }
        let Some(identity) = identity_in(tx)? else {
            return Err(bad("the broker identity is not recorded"));
        };
        if identity.audience != challenge.audience() {
            return Err(refuse(
                codes::CONSENT_AUDIENCE,
                "install consent challenge audience does not match this broker",
            ));
        }
        if created_at >= challenge.expires_at_micros() {
            return Err(refuse(
                codes::CONSENT_EXPIRED,
                "install consent challenge is already expired",
            ));
        }
        let Some(entry) = challenge_entry(
            &challenge,
            &record.stream,
            record.payload,
            record.occurred_at,
            record.position,
        ) else {
            return Err(bad("its digest is malformed"));
        };
        let key = digest_key(&entry.challenge_digest);
        if tx.get(CONSENT_BY_DIGEST_TABLE, &key, |v| v.is_some())? {
            return Err(refuse(
                codes::CONSENT_DIGEST_BOUND,
                "challenge digest matches multiple authenticated challenges",
            ));
        }
        // The stream holds one challenge record (revision 1), so the id is new here; the check
        // keeps the table a function of the records even if a stream id ever collided.
        let id = challenge.challenge_id().as_bytes();
        if tx.get(CONSENT_CHALLENGES_TABLE, id, |v| v.is_some())? {
            return Err(bad("its challenge id is already recorded"));
        }
        let count = count_in(tx, COUNT_CHALLENGES_KEY)?;
        if count >= CONSENT_CHALLENGES_MAX {
            return Err(refuse(
                codes::CONSENT_CAPACITY,
                "install consent broker reached its bounded capacity",
            ));
        }
        tx.insert(CONSENT_CHALLENGES_TABLE, id, &archive::to_bytes(&entry)?)?;
        tx.insert(CONSENT_BY_DIGEST_TABLE, &key, id)?;
        tx.insert(
            CONSENT_COUNTS_TABLE,
            COUNT_CHALLENGES_KEY,
            &(count + 1).to_le_bytes(),
        )?;
        Ok(())
    }
}

impl Projection for ConsentStoreProjection {
    fn name(&self) -> &'static str {
        CONSENT_STORE_PROJECTION
    }

    fn version(&self) -> u32 {
        1
    }

    fn tables(&self) -> &'static [&'static str] {
        &[
            CONSENT_IDENTITY_TABLE,
            CONSENT_CHALLENGES_TABLE,
            CONSENT_BY_DIGEST_TABLE,
            CONSENT_COUNTS_TABLE,
        ]
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        match record.kind {
            IDENTITY_KIND => self.apply_identity(tx, record),
            CHALLENGE_KIND => self.apply_challenge(tx, record),
            _ => Ok(()),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The store
// ------------------------------------------------------------------------------------------------

/// The consent broker store over a journal, bound to one audience. Cheap to share; every
/// operation is at most one append and a few reads, so concurrent callers serialize in the
/// journal's group commit.
#[derive(Debug)]
pub struct ConsentStore {
    journal: Arc<Journal>,
    projections: Projections,
    audience: String,
}

impl ConsentStore {
    /// Attaches the `consent.store` projection (rebuilding or catching it up as needed) and binds
    /// the store to `audience`; writes nothing (the identity is recorded with the first
    /// challenge). A journal whose
    /// identity names another audience is refused with Rejected "consent broker audience does not
    /// match its durable identity".
    pub fn open(journal: Arc<Journal>, audience: &str) -> Result<ConsentStore, ConsentStoreError> {
        if !is_token(audience) {
            return Err(invalid("audience must be a bounded canonical token"));
        }
        // The journal refuses writes only when a record failed authentication at open; the store
        // must not serve (or index) anything on top of it.
        if let Some(refusal) = journal.write_refusal() {
            return Err(corruption(
                "consent broker journal authentication failed",
                refusal,
            ));
        }
        let list: Vec<Arc<dyn Projection>> = vec![Arc::new(ConsentStoreProjection)];
        let projections = Projections::attach(&journal, list).map_err(|e| match e {
            FrameworkError::Journal(j) => ConsentStoreError::Unavailable {
                message: "consent broker store could not be opened",
                detail: j.to_string(),
            },
            other => framework_error(other),
        })?;
        let store = ConsentStore {
            journal,
            projections,
            audience: audience.to_owned(),
        };
        store.check_identity()?;
        Ok(store)
    }

    /// Compares a recorded identity with this store's audience. Opening writes nothing: the
    /// identity is recorded with the first challenge, in the same atomic append, so a broker that
    /// never publishes leaves no trace in the journal.
    fn check_identity(&self) -> Result<bool, ConsentStoreError> {
        match self.identity()? {
            None => Ok(false),
            Some(audience) if audience == self.audience => Ok(true),
            Some(_) => Err(IDENTITY_AUDIENCE_MISMATCH),
        }
    }

    /// Records the broker identity alone (tests that append raw challenge records need it).
    #[cfg(test)]
    pub(crate) fn record_identity(&self) -> Result<(), ConsentStoreError> {
        if !self.check_identity()? {
            self.journal
                .append(self.identity_append()?)
                .map_err(append_error)?;
        }
        Ok(())
    }

    /// The append that records the broker identity.
    fn identity_append(&self) -> Result<StreamAppend, ConsentStoreError> {
        Ok(StreamAppend::new(
            identity_stream()?,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                IDENTITY_EVENT_ID,
                IDENTITY_KIND,
                IDENTITY_OCCURRED_AT,
                identity_payload(&self.audience),
            )],
        ))
    }

    /// The authenticated audience of the broker identity, `None` before it is recorded.
    fn identity(&self) -> Result<Option<String>, ConsentStoreError> {
        let Some(entry) = self.identity_entry()? else {
            return Ok(None);
        };
        let stream = identity_stream()?;
        let mut records: Vec<Record> = Vec::with_capacity(1);
        self.journal
            .visit_stream(&stream, 1, 1, |view| {
                records.push(view.to_record());
                ControlFlow::Continue(())
            })
            .map_err(read_error)?;
        let [record] = records.as_slice() else {
            return Err(corruption(
                "consent broker identity record is missing",
                "an identity entry without its journal record",
            ));
        };
        let audience = decode_identity(&record.payload)
            .ok()
            .filter(|_| {
                record.kind == IDENTITY_KIND
                    && record.event_id == IDENTITY_EVENT_ID
                    && record.occurred_at == IDENTITY_OCCURRED_AT
            })
            .ok_or_else(|| corruption("consent broker identity fields are invalid", ""))?;
        let expected = IdentityEntry {
            audience: audience.clone(),
            payload_digest: Sha256::digest(&record.payload).into(),
            position: record.position,
            trusted_time_high_water: None,
        };
        if expected != entry {
            return Err(corruption(
                "consent broker identity digest is invalid",
                "the identity entry disagrees with its authenticated journal record",
            ));
        }
        Ok(Some(audience))
    }

    fn identity_entry(&self) -> Result<Option<IdentityEntry>, ConsentStoreError> {
        self.journal
            .projection_get(CONSENT_IDENTITY_TABLE, IDENTITY_ENTRY_KEY, |v| {
                v.map(archive::from_bytes::<IdentityEntry>).transpose()
            })
            .map_err(unavailable)?
            .map_err(|e| corruption("consent broker identity record is invalid", e.to_string()))
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The attached projection, for `digest`, `check` and `rebuild` by
    /// [`CONSENT_STORE_PROJECTION`].
    pub fn projections(&self) -> &Projections {
        &self.projections
    }

    /// The later of `now` and the persisted trusted-time floor (reference §1.8). No operation of
    /// this slice raises the floor.
    fn effective_now(&self, now: UtcMicros) -> Result<UtcMicros, ConsentStoreError> {
        if !in_range(now) {
            return Err(invalid("trusted time must be a canonical UTC instant"));
        }
        // Before the first challenge no identity (and so no floor) is recorded.
        let Some(entry) = self.identity_entry()? else {
            return Ok(now);
        };
        Ok(match entry.trusted_time_high_water {
            Some(floor) if floor > now.0 => UtcMicros(floor),
            _ => now,
        })
    }

    /// Publishes a challenge (reference §1.11.1), idempotent by exact digest: a challenge already
    /// stored under this id with the same digest is returned (nothing is written, even when the
    /// caller's time differs), another is Conflict "public challenge ID is already bound to a
    /// different challenge"; an existing one past its expiry is Expired "install consent challenge
    /// or decision has expired". A new one must be live at the effective time (Expired "install
    /// consent challenge is already expired") and fit the capacity; it is appended `pending` with
    /// `created_at` = the effective time.
    pub fn create_challenge(
        &self,
        challenge: &InstallConsentChallenge,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        if challenge.audience() != self.audience {
            return Err(AUDIENCE_MISMATCH);
        }
        let bytes = challenge.to_json_text().into_bytes();
        if bytes.len() > CHALLENGE_JSON_MAX_BYTES {
            return Err(invalid(
                "install consent challenge exceeds its bounded size",
            ));
        }
        let n = self.effective_now(now)?;
        if let Some(existing) = self.existing(challenge)? {
            return live(existing, n);
        }
        if n >= challenge.expires_at_micros() {
            return Err(EXPIRED_AT_CREATION);
        }
        if self.challenge_count()? >= CONSENT_CHALLENGES_MAX {
            return Err(CAPACITY);
        }
        let append = StreamAppend::new(
            challenge_stream(challenge.challenge_id())?,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                challenge_event_id(challenge.challenge_digest()),
                CHALLENGE_KIND,
                Timestamp(n.0),
                bytes,
            )],
        );
        let mut batch = Vec::with_capacity(2);
        if !self.check_identity()? {
            batch.push(self.identity_append()?);
        }
        batch.push(append);
        match self.journal.append_batch(batch) {
            Ok(_) => self.view(challenge.challenge_id(), n),
            // Another writer recorded the identity first: compare it, then try once more.
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. })
                if self.existing(challenge)?.is_none() && self.check_identity()? =>
            {
                let retry = StreamAppend::new(
                    challenge_stream(challenge.challenge_id())?,
                    ExpectedRevision::NoStream,
                    vec![NewRecord::new(
                        challenge_event_id(challenge.challenge_digest()),
                        CHALLENGE_KIND,
                        Timestamp(n.0),
                        challenge.to_json_text().into_bytes(),
                    )],
                );
                match self.journal.append(retry) {
                    Ok(_) => self.view(challenge.challenge_id(), n),
                    Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                        match self.existing(challenge)? {
                            Some(existing) => live(existing, n),
                            None => Err(ConsentStoreError::Conflict {
                                message: "derived consent challenge event id collided",
                            }),
                        }
                    }
                    Err(e) => Err(append_error(e)),
                }
            }
            // A concurrent create of this id won: decide against what it stored.
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                match self.existing(challenge)? {
                    Some(existing) => live(existing, n),
                    None => Err(ConsentStoreError::Conflict {
                        message: "derived consent challenge event id collided",
                    }),
                }
            }
            Err(e) => Err(append_error(e)),
        }
    }

    /// The stored record of `challenge`'s id, if any: `Conflict` when it holds another digest.
    fn existing(
        &self,
        challenge: &InstallConsentChallenge,
    ) -> Result<Option<StoredChallenge>, ConsentStoreError> {
        let Some(stored) = self.stored(challenge.challenge_id())? else {
            return Ok(None);
        };
        if !ct_eq(
            stored.challenge.challenge_digest().as_bytes(),
            challenge.challenge_digest().as_bytes(),
        ) {
            return Err(CONFLICT_ID);
        }
        Ok(Some(stored))
    }

    /// The status of a challenge at `now` (reference §1.11.2): NotFound "install consent
    /// challenge ID was not found" for an unknown id. The state is `expired` once the effective
    /// time reaches `expires_at`; reading writes nothing.
    pub fn get(
        &self,
        challenge_id: &str,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        if !is_token(challenge_id) {
            return Err(invalid("challenge_id must be a bounded canonical token"));
        }
        let n = self.effective_now(now)?;
        self.view(challenge_id, n)
    }

    /// The status of the challenge with this digest at `now` (reference §1.11.3), only when it
    /// belongs to the expected workspace and release root: otherwise, as for an unknown digest,
    /// NotFound "install consent challenge digest was not found", so other domains' challenges
    /// are not revealed. Digests and domain digests are compared in constant time.
    pub fn get_by_challenge_digest(
        &self,
        challenge_digest: &str,
        expected_workspace_identity_digest: &str,
        expected_release_root_digest: &str,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        for (name, value) in [
            ("challenge_digest", challenge_digest),
            (
                "expected_workspace_identity_digest",
                expected_workspace_identity_digest,
            ),
            ("expected_release_root_digest", expected_release_root_digest),
        ] {
            if !is_sha(value) {
                return Err(invalid(format!(
                    "{name} must be a lowercase SHA-256 digest"
                )));
            }
        }
        let n = self.effective_now(now)?;
        let digest = parse_sha(challenge_digest)
            .ok_or_else(|| invalid("challenge_digest must be a lowercase SHA-256 digest"))?;
        let id = self
            .journal
            .projection_get(CONSENT_BY_DIGEST_TABLE, &digest_key(&digest), |v| {
                v.map(|b| std::str::from_utf8(b).map(str::to_owned))
            })
            .map_err(unavailable)?
            .transpose()
            .map_err(|_| {
                corruption(
                    "consent broker index is unreadable",
                    "a digest entry names a challenge id that is not UTF-8",
                )
            })?
            .ok_or(NOT_FOUND_DIGEST)?;
        let stored = self.stored(&id)?.ok_or_else(|| {
            corruption(
                "consent broker index is inconsistent",
                "a digest entry names a challenge id without an entry",
            )
        })?;
        let c = &stored.challenge;
        if !ct_eq(c.challenge_digest().as_bytes(), challenge_digest.as_bytes()) {
            return Err(corruption(
                "consent broker index authentication failed",
                "a digest entry names a challenge of another digest",
            ));
        }
        // Both domain comparisons run whatever the first one found.
        let same_workspace = ct_eq(
            c.workspace_identity_digest().as_bytes(),
            expected_workspace_identity_digest.as_bytes(),
        );
        let same_release = ct_eq(
            c.release_root_digest().as_bytes(),
            expected_release_root_digest.as_bytes(),
        );
        if !(same_workspace & same_release) {
            return Err(NOT_FOUND_DIGEST);
        }
        Ok(stored.at(n))
    }

    /// Number of challenges ever created (every state counts; the reference's row count).
    pub fn challenge_count(&self) -> Result<u64, ConsentStoreError> {
        let bytes = self
            .journal
            .projection_get(CONSENT_COUNTS_TABLE, COUNT_CHALLENGES_KEY, |v| {
                v.map(<[u8]>::to_vec)
            })
            .map_err(unavailable)?;
        match bytes {
            None => Ok(0),
            Some(b) => <[u8; 8]>::try_from(b.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| corruption("challenge count is invalid", "a counter is not 8 bytes")),
        }
    }

    // ----- reads -----

    fn view(&self, challenge_id: &str, n: UtcMicros) -> Result<ChallengeRecord, ConsentStoreError> {
        Ok(self.stored(challenge_id)?.ok_or(NOT_FOUND_ID)?.at(n))
    }

    fn entry(&self, challenge_id: &str) -> Result<Option<ChallengeEntry>, ConsentStoreError> {
        self.journal
            .projection_get(CONSENT_CHALLENGES_TABLE, challenge_id.as_bytes(), |v| {
                v.map(archive::from_bytes::<ChallengeEntry>).transpose()
            })
            .map_err(unavailable)?
            .map_err(|e| corruption("consent broker index is unreadable", e.to_string()))
    }

    /// Reads the challenge's stream from the journal (authenticated there: digest, MAC, chain),
    /// re-decodes and re-binds the challenge (reference §1.7 row validation) and compares the index
    /// entry with it. `None` when the id has no entry.
    fn stored(&self, challenge_id: &str) -> Result<Option<StoredChallenge>, ConsentStoreError> {
        let Some(entry) = self.entry(challenge_id)? else {
            return Ok(None);
        };
        let stream = challenge_stream(challenge_id)?;
        let mut records: Vec<Record> = Vec::with_capacity(1);
        // Two at most: a second record is one this version does not fold, so it is refused
        // rather than ignored (its state would be unknown).
        self.journal
            .visit_stream(&stream, 1, 2, |view| {
                records.push(view.to_record());
                ControlFlow::Continue(())
            })
            .map_err(read_error)?;
        let [record] = records.as_slice() else {
            return Err(corruption(
                "persisted consent lifecycle fields are invalid",
                format!(
                    "challenge stream {stream} holds {} records; this version folds one",
                    records.len()
                ),
            ));
        };
        if record.kind != CHALLENGE_KIND {
            return Err(corruption(
                "persisted consent lifecycle fields are invalid",
                "revision 1 is not a challenge",
            ));
        }
        let challenge =
            decode_stored(&record.payload).map_err(|m| corruption(m, "stored challenge"))?;
        if challenge.challenge_id() != challenge_id || record.stream != stream {
            return Err(corruption("persisted challenge ID binding is invalid", ""));
        }
        if !ct_eq(
            record.event_id.as_bytes(),
            challenge_event_id(challenge.challenge_digest()).as_bytes(),
        ) {
            return Err(corruption(
                "persisted challenge digest binding is invalid",
                "",
            ));
        }
        let created_at = UtcMicros(record.occurred_at.0);
        if !in_range(created_at) || created_at >= challenge.expires_at_micros() {
            return Err(corruption(
                "persisted consent lifecycle fields are invalid",
                "the creation time is not a live canonical instant",
            ));
        }
        if challenge.audience() != self.audience {
            return Err(corruption(
                "persisted challenge audience binding is invalid",
                "",
            ));
        }
        let expected = challenge_entry(
            &challenge,
            &record.stream,
            &record.payload,
            record.occurred_at,
            record.position,
        );
        if expected.as_ref() != Some(&entry) {
            return Err(corruption(
                "consent broker index authentication failed",
                "the index entry disagrees with its authenticated journal record",
            ));
        }
        Ok(Some(StoredChallenge {
            challenge,
            created_at,
        }))
    }
}

/// An authenticated challenge record.
struct StoredChallenge {
    challenge: InstallConsentChallenge,
    created_at: UtcMicros,
}

impl StoredChallenge {
    /// The status at effective time `n`: the expire-if-due view (reference §1.9) of a pending
    /// challenge.
    fn at(self, n: UtcMicros) -> ChallengeRecord {
        let expired = n >= self.challenge.expires_at_micros();
        ChallengeRecord {
            state: if expired {
                ChallengeState::Expired
            } else {
                ChallengeState::Pending
            },
            created_at: self.created_at.render(),
            expired_at: expired.then(|| self.challenge.expires_at().to_owned()),
            challenge: self.challenge,
        }
    }
}

/// "Assert live" (reference §1.9): the status at `n`, or Expired when it is expired.
fn live(stored: StoredChallenge, n: UtcMicros) -> Result<ChallengeRecord, ConsentStoreError> {
    let record = stored.at(n);
    if record.state == ChallengeState::Expired {
        return Err(EXPIRED);
    }
    Ok(record)
}

#[cfg(test)]
mod tests;
