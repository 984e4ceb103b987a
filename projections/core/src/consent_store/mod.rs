//! The install consent broker store (spec/projections.md §8) as a projection of the
//! journal: no separate database. Specified in `spec/projections.md`, section "consent.store".
//!
//! The broker identity (its durable audience and trusted-time floor), challenges and their whole
//! decision lifecycle: `pending` → `decision-ready` → `reserved` → `settled`, with release,
//! re-authentication, reconciliation against journal evidence, recovery and sticky expiry.
//!
//! - The broker identity is revision 1 of the stream `StreamId::derive(IDENTITY_STREAM_NAMESPACE,
//!   "identity")` (kind [`IDENTITY_KIND`]), written with the first challenge (same append); each
//!   raise of the trusted-time floor is a later revision ([`TRUSTED_TIME_KIND`]), appended in the
//!   same atomic batch as the record that uses a verified decision.
//! - Each challenge has its own stream `StreamId::derive(CHALLENGE_STREAM_NAMESPACE, challenge_id)`; revision 1
//!   (kind [`CHALLENGE_KIND`], appended with `NoStream`, event id `ctx-consent-challenge:` +
//!   challenge digest) carries the challenge's canonical JSON, byte for byte the reference's
//!   `challenge_json`; its `occurred_at` is `created_at`. Every state change is a later revision
//!   (`ExpectedRevision::Exact(head)`, kinds in [`LIFECYCLE_KINDS`], `lifecycle.rs`).
//!
//! The journal authenticates every record (digest and installation-keyed MAC), which replaces the
//! reference's record and identity digests. The `consent.store` projection folds the records into
//! one index entry per challenge and enforces, inside the append transaction, what must hold: a
//! challenge only after the identity and for its audience, one challenge per digest, a challenge
//! live when created, the capacity, the transition table, one use per assertion nonce across the
//! store. Reads never trust the index alone: every challenge returned is re-read from the journal,
//! re-folded and compared with its index entry.
//!
//! Time transitions the store decides (expiry, a decision's TTL) are a view computed on every read
//! and written (sticky) by the operations that write anyway (`decision.rs`).

mod assertion;
pub use assertion::*;
mod challenge;
mod decision;
mod lifecycle;

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;

use challenge::decode_stored;
use ctx_journal::{
    AppendError, ExpectedRevision, HookError, HookTxn, Journal, NewRecord, ReadError, Record,
    RecordView, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{Json, JsonMap, UtcMicros, is_sha, is_token, parse_sha};
use sha2::{Digest as _, Sha256};

use crate::archive;
use crate::framework::{FrameworkError, Projection, Projections};
pub use challenge::{
    CAPABILITY_ID_MAX_BYTES, CHALLENGE_DIGEST_KEYS, CHALLENGE_JSON_MAX_BYTES, CHALLENGE_KEYS,
    CHALLENGE_SCHEMA, ChallengeFields, ChallengeInputs, INSTALLATION_HOST_FEATURE,
    InstallConsentChallenge, REQUESTED_ACTION_KIND_MAX_BYTES, SELECTION_BINDING_SCHEMA,
    derive_install_consent_challenge, install_consent_selection_digest,
};
pub use decision::{
    DecisionEvidence, JournalStatus, ReconciliationOutcome, ReconciliationReport, RecoveryReport,
    Reservation, ReservationToken, VerifiedHumanDecision,
};
pub use lifecycle::{
    CHALLENGE_STREAM_RECORDS_MAX, LIFECYCLE_KINDS, NONCE_HISTORY_FACTOR, nonce_history_genesis,
    nonce_record_digest,
};

// ------------------------------------------------------------------------------------------------
// Names, formulas and limits
// ------------------------------------------------------------------------------------------------

use crate::streams::{
    CHALLENGE_KIND, CHALLENGE_STREAM_NAMESPACE, IDENTITY_KIND, IDENTITY_STREAM_NAMESPACE,
    TRUSTED_TIME_KIND,
};
pub const IDENTITY_STREAM_KEY: &[u8] = b"identity";
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
/// Counter name (bytes) → u64 LE: [`COUNT_CHALLENGES_KEY`], [`COUNT_CHALLENGES_RETIRED_KEY`],
/// [`COUNT_NONCES_KEY`], [`COUNT_NONCES_RETIRED_KEY`].
pub const CONSENT_COUNTS_TABLE: &str = "proj.consent.counts";
/// Challenges ever created.
pub const COUNT_CHALLENGES_KEY: &[u8] = b"challenges";
/// Challenges retired (spec/projections.md §8.9, R2): the live challenges, what
/// [`CONSENT_CHALLENGES_MAX`] bounds, are `challenges − challenges_retired`.
pub const COUNT_CHALLENGES_RETIRED_KEY: &[u8] = b"challenges_retired";
/// [`COUNT_NONCES_KEY`]: u64 LE, assertion nonces ever recorded.
pub const COUNT_NONCES_KEY: &[u8] = b"nonces";
/// Nonces of retired challenges (spec/projections.md §8.9, R4): the live nonces, what
/// [`CONSENT_NONCES_MAX`] bounds, are `nonces − nonces_retired`.
pub const COUNT_NONCES_RETIRED_KEY: &[u8] = b"nonces_retired";
/// [`live_key`] of every live challenge → empty value: the live challenges in expiry order, so a
/// new challenge retires those expired before it with a prefix scan (spec/projections.md §8.9).
pub const CONSENT_LIVE_TABLE: &str = "proj.consent.live";
/// Assertion nonce digest (32 bytes) → rkyv [`NonceEntry`]: one use per nonce across the store.
pub const CONSENT_NONCES_TABLE: &str = "proj.consent.nonces";

/// Most live challenges one journal holds (the reference's default capacity): neither settled,
/// expired by record, nor past their expiry when a later challenge was created
/// (spec/projections.md §8.9). Retired challenges stay in the store and do not count.
pub const CONSENT_CHALLENGES_MAX: u64 = 4_096;
/// Most assertion nonces of live challenges one journal records: capacity × 8
/// (spec/projections.md §8.9). Every nonce stays recorded, so a replay is refused forever.
pub const CONSENT_NONCES_MAX: u64 = CONSENT_CHALLENGES_MAX * lifecycle::NONCE_HISTORY_FACTOR;
/// How far a signed assertion's `issued_at` may lie ahead of the verifying process's clock, and how
/// far past that `issued_at` a verification may raise the trusted-time floor: 60 s
/// (spec/projections.md §8.7, invariant C-12). The floor is set from signed evidence, so no caller's
/// clock alone can move it more than this past the time a person's authenticator vouched for.
pub const ASSERTION_FUTURE_SKEW_MAX_MICROS: i64 = 60_000_000;

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
    /// A lifecycle record that the challenge's folded state does not allow
    /// (spec/projections.md §8.5).
    pub const CONSENT_TRANSITION: &str = "consent-transition";
    /// The challenge stream holds [`super::CHALLENGE_STREAM_RECORDS_MAX`] records.
    pub const CONSENT_LIFECYCLE_CAPACITY: &str = "consent-lifecycle-capacity";
    /// The assertion nonce is already recorded (for any challenge).
    pub const CONSENT_NONCE_REPLAY: &str = "consent-nonce-replay";
    /// The store holds [`super::CONSENT_NONCES_MAX`] nonces.
    pub const CONSENT_NONCE_CAPACITY: &str = "consent-nonce-capacity";
    /// A trusted-time record that does not raise the floor.
    pub const CONSENT_TRUSTED_TIME: &str = "consent-trusted-time";
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
    /// Reuse or concurrent reuse of an id, decision, reservation or nonce, or a record already in
    /// another state (`ConsentBrokerReplay`).
    #[error("{message}")]
    Conflict { message: &'static str },
    /// The lifetime challenge bound is reached (`ConsentBrokerCapacityExceeded`).
    #[error("{message}")]
    CapacityExceeded { message: &'static str },
    /// The challenge has expired (`ConsentBrokerExpired`). Most sentences are fixed; an expiry
    /// the trusted-time floor caused names the floor and this process's clock (spec/projections.md
    /// §8.7).
    #[error("{message}")]
    Expired { message: Cow<'static, str> },
    /// An assertion, verifier, decision or reservation failed closed, or another audience
    /// (`ConsentBrokerDecisionRejected`). A future-dated assertion names its time and the clock.
    #[error("{message}")]
    Rejected { message: Cow<'static, str> },
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
/// The sentence names the bound, what counts toward it and what frees it: it reaches the person
/// through the hooks (spec/projections.md §8.9, R6). [`CONSENT_CHALLENGES_MAX`] is spelled out (a
/// test checks that the two agree).
pub const CAPACITY: ConsentStoreError = ConsentStoreError::CapacityExceeded {
    message: "install consent broker reached its bounded capacity: 4096 open consent challenges \
              (not yet settled or expired), so ctx asks nothing new; answer the pending \
              ones (`ctx consent pending`) or wait until they expire, then send the prompt again",
};
pub const EXPIRED_AT_CREATION: ConsentStoreError = ConsentStoreError::Expired {
    message: Cow::Borrowed("install consent challenge is already expired"),
};
pub const EXPIRED: ConsentStoreError = ConsentStoreError::Expired {
    message: Cow::Borrowed("install consent challenge or decision has expired"),
};
pub const AUDIENCE_MISMATCH: ConsentStoreError = ConsentStoreError::Rejected {
    message: Cow::Borrowed("install consent challenge audience does not match this broker"),
};
pub const IDENTITY_AUDIENCE_MISMATCH: ConsentStoreError = ConsentStoreError::Rejected {
    message: Cow::Borrowed("consent broker audience does not match its durable identity"),
};

pub const NONCE_REPLAY: ConsentStoreError = ConsentStoreError::Conflict {
    message: "verified human decision nonce was already recorded",
};
pub const NONCE_CAPACITY: ConsentStoreError = ConsentStoreError::CapacityExceeded {
    message: "install consent assertion nonce history reached its bounded capacity: 32768 \
              decisions on open challenges; answer or let expire the pending challenges, then \
              decide again",
};
pub const LIFECYCLE_CAPACITY: ConsentStoreError = ConsentStoreError::CapacityExceeded {
    message: "install consent record reached its bounded lifecycle length",
};
pub const NOT_PROCESS_BOUND: ConsentStoreError = ConsentStoreError::Rejected {
    message: Cow::Borrowed("VerifiedHumanDecision is not process-bound to this broker instance"),
};
/// Lost the race for a challenge's stream too many times in a row.
pub const CONCURRENT_CHANGE: ConsentStoreError = ConsentStoreError::Conflict {
    message: "install consent record changed concurrently",
};

/// `ConsentBrokerReplay("install consent record is already <state>")`.
pub fn record_already(state: ChallengeState) -> ConsentStoreError {
    ConsentStoreError::Conflict {
        message: match state {
            ChallengeState::Pending => "install consent record is already pending",
            ChallengeState::DecisionReady => "install consent record is already decision-ready",
            ChallengeState::ReauthenticationRequired => {
                "install consent record is already reauthentication-required"
            }
            ChallengeState::Reserved => "install consent record is already reserved",
            ChallengeState::Settled => "install consent record is already settled",
            ChallengeState::Expired => "install consent record is already expired",
        },
    }
}

/// `ConsentBrokerReplay("install consent decision is already <state>")`.
pub fn decision_already(state: ChallengeState) -> ConsentStoreError {
    ConsentStoreError::Conflict {
        message: match state {
            ChallengeState::Pending => "install consent decision is already pending",
            ChallengeState::DecisionReady => "install consent decision is already decision-ready",
            ChallengeState::ReauthenticationRequired => {
                "install consent decision is already reauthentication-required"
            }
            ChallengeState::Reserved => "install consent decision is already reserved",
            ChallengeState::Settled => "install consent decision is already settled",
            ChallengeState::Expired => "install consent decision is already expired",
        },
    }
}

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
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_NONCE_REPLAY) => NONCE_REPLAY,
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_NONCE_CAPACITY) => {
            NONCE_CAPACITY
        }
        AppendError::Hook { code, .. } if code == Some(codes::CONSENT_LIFECYCLE_CAPACITY) => {
            LIFECYCLE_CAPACITY
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

/// The lifecycle state of a challenge (spec/projections.md §8.1).
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

    /// The state's code in [`LifecycleEntry::state`]: its index in [`ChallengeState::ALL`].
    pub fn code(self) -> u8 {
        match self {
            ChallengeState::Pending => 0,
            ChallengeState::DecisionReady => 1,
            ChallengeState::ReauthenticationRequired => 2,
            ChallengeState::Reserved => 3,
            ChallengeState::Settled => 4,
            ChallengeState::Expired => 5,
        }
    }

    pub fn from_code(code: u8) -> Option<ChallengeState> {
        ChallengeState::ALL.get(usize::from(code)).copied()
    }
}

impl std::fmt::Display for ChallengeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a challenge as the store reports it at one effective time (the reference's
/// `InstallConsentChallengeRecord`, spec/projections.md §8.1): privacy-safe, no authority.
/// Store-issued only. It omits the reservation token digest, the nonce history and the record
/// digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeRecord {
    challenge: InstallConsentChallenge,
    state: ChallengeState,
    created_at: String,
    decision: Option<DecisionEntry>,
    reservation: Option<ReservationEntry>,
    settled_at: Option<String>,
    expired_at: Option<String>,
    revision: u64,
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
    /// `granted` or `denied` once a decision is recorded (kept through reservation, settlement,
    /// re-authentication and expiry).
    pub fn decision(&self) -> Option<&str> {
        self.decision.as_ref().map(|d| d.decision.as_str())
    }
    pub fn principal_digest(&self) -> Option<&str> {
        self.decision.as_ref().map(|d| d.principal_digest.as_str())
    }
    pub fn authenticator_id(&self) -> Option<&str> {
        self.decision.as_ref().map(|d| d.authenticator_id.as_str())
    }
    /// The decision's audience (the reference's `audience` column; the challenge's is
    /// `challenge().audience()`).
    pub fn audience(&self) -> Option<&str> {
        self.decision.as_ref().map(|d| d.audience.as_str())
    }
    /// The digest of the nonce of the assertion that recorded the decision.
    pub fn assertion_nonce_digest(&self) -> Option<&str> {
        self.decision
            .as_ref()
            .map(|d| d.assertion_nonce_digest.as_str())
    }
    pub fn decision_issued_at(&self) -> Option<String> {
        self.decision
            .as_ref()
            .map(|d| UtcMicros(d.issued_at).render())
    }
    pub fn decision_expires_at(&self) -> Option<String> {
        self.decision
            .as_ref()
            .map(|d| UtcMicros(d.expires_at).render())
    }
    /// The effective time at which the decision was recorded (`decision-ready`).
    pub fn decision_recorded_at(&self) -> Option<String> {
        self.decision
            .as_ref()
            .map(|d| UtcMicros(d.recorded_at).render())
    }
    /// The engine event that reserved (and, once settled, committed) the decision.
    pub fn reservation_event_id(&self) -> Option<&str> {
        self.reservation.as_ref().map(|r| r.event_id.as_str())
    }
    pub fn reservation_event_content_digest(&self) -> Option<&str> {
        self.reservation
            .as_ref()
            .map(|r| r.event_content_digest.as_str())
    }
    pub fn reserved_at(&self) -> Option<String> {
        self.reservation
            .as_ref()
            .map(|r| UtcMicros(r.reserved_at).render())
    }
    pub fn settled_at(&self) -> Option<&str> {
        self.settled_at.as_deref()
    }
    /// For an expired challenge, the instant it expired: its `expires_at`, whether the expiry is
    /// written or still a view (so a record reads the same before and after the tombstone).
    pub fn expired_at(&self) -> Option<&str> {
        self.expired_at.as_deref()
    }
    /// The revision of the challenge stream this status was folded from (1 = only the challenge).
    pub fn revision(&self) -> u64 {
        self.revision
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
    /// The trusted-time floor in µs (spec/projections.md §8.7): the value of the last trusted-time
    /// record.
    pub trusted_time_high_water: Option<i64>,
    /// The identity stream's folded head: 1 + the number of trusted-time records.
    pub revision: u64,
    /// Position and payload SHA-256 of that head record.
    pub head_position: u64,
    pub head_payload_digest: [u8; 32],
}

/// The decision fields of a challenge (spec/projections.md §8.1), times in µs.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct DecisionEntry {
    pub decision: String,
    pub principal_digest: String,
    pub authenticator_id: String,
    pub audience: String,
    pub assertion_nonce_digest: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub recorded_at: i64,
}

/// The reservation fields of a challenge (spec/projections.md §8.1); the token digest only while
/// reserved.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ReservationEntry {
    pub event_id: String,
    pub event_content_digest: String,
    pub token_digest: Option<[u8; 32]>,
    pub reserved_at: i64,
}

/// The folded lifecycle of a challenge: its written state (time views are applied on read).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct LifecycleEntry {
    /// The stream's folded head revision, its position and its journal record digest (D).
    pub revision: u64,
    pub head_position: u64,
    pub head_digest: [u8; 32],
    /// [`ChallengeState::code`].
    pub state: u8,
    pub decision: Option<DecisionEntry>,
    /// The nonce history chain (spec/projections.md §8.1, §8.8): count and last record digest (the
    /// genesis digest when empty).
    pub nonce_history_count: u64,
    pub nonce_history_digest: [u8; 32],
    pub reservation: Option<ReservationEntry>,
    pub settled_at: Option<i64>,
    pub expired_at: Option<i64>,
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
    pub lifecycle: LifecycleEntry,
}

/// The index entry of one recorded assertion nonce.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct NonceEntry {
    pub challenge_id: String,
    pub sequence: u64,
    pub record_digest: [u8; 32],
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

/// The identity stream, derived once (the hook compares every record's stream with it).
fn identity_stream_id() -> Option<StreamId> {
    static ID: std::sync::OnceLock<Option<StreamId>> = std::sync::OnceLock::new();
    *ID.get_or_init(|| identity_stream().ok())
}

fn challenge_event_id(challenge_digest: &str) -> String {
    format!("{CHALLENGE_EVENT_PREFIX}{challenge_digest}")
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the contents (spec/projections.md §8.4): digests are compared without an
    // early exit that would time how many leading bytes a caller guessed.
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

fn set_count(tx: &HookTxn<'_>, key: &[u8], value: u64) -> Result<(), HookError> {
    Ok(tx.insert(CONSENT_COUNTS_TABLE, key, &value.to_le_bytes())?)
}

/// Key of [`CONSENT_LIVE_TABLE`]: `expires_at` (µs) with its sign bit flipped, u64 BE, so keys sort
/// by expiry, ‖ the challenge id's UTF-8 bytes.
pub fn live_key(expires_at: i64, challenge_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + challenge_id.len());
    key.extend_from_slice(&(expires_at.cast_unsigned() ^ (1 << 63)).to_be_bytes());
    key.extend_from_slice(challenge_id.as_bytes());
    key
}

/// The expiry a [`live_key`] starts with.
fn live_key_expiry(key: &[u8]) -> Option<i64> {
    let (head, _) = key.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head) ^ (1 << 63)).cast_signed())
}

/// Retires the live challenge `entry` (spec/projections.md §8.9, R2–R4): removes its live key and
/// moves it and its nonces to the retired counters. A challenge that is not live is left alone, so
/// none is retired twice.
fn retire(tx: &HookTxn<'_>, entry: &ChallengeEntry) -> Result<(), HookError> {
    if !tx.remove(
        CONSENT_LIVE_TABLE,
        &live_key(entry.expires_at, &entry.challenge_id),
    )? {
        return Ok(());
    }
    let bump = |key: &[u8], by: u64, of: &[u8]| -> Result<(), HookError> {
        let total = count_in(tx, of)?;
        let next = count_in(tx, key)?
            .checked_add(by)
            .filter(|n| *n <= total)
            .ok_or_else(|| {
                refuse(
                    codes::CONSENT_RECORD_INVALID,
                    "the consent store would retire more than it recorded",
                )
            })?;
        set_count(tx, key, next)
    };
    bump(COUNT_CHALLENGES_RETIRED_KEY, 1, COUNT_CHALLENGES_KEY)?;
    bump(
        COUNT_NONCES_RETIRED_KEY,
        entry.lifecycle.nonce_history_count,
        COUNT_NONCES_KEY,
    )
}

/// Retires every live challenge whose expiry is at or before `t`, the creation time of the
/// challenge being folded (R3): nothing can be decided on it any more at `t` or later.
fn retire_expired(tx: &HookTxn<'_>, t: i64) -> Result<(), HookError> {
    let mut due: Vec<Vec<u8>> = Vec::new();
    tx.scan(CONSENT_LIVE_TABLE, |key, _| match live_key_expiry(key) {
        Some(expiry) if expiry <= t => {
            due.push(key.get(8..).unwrap_or_default().to_vec());
            ControlFlow::Continue(())
        }
        _ => ControlFlow::Break(()),
    })?;
    for id in due {
        let entry = tx
            .get(CONSENT_CHALLENGES_TABLE, &id, |v| {
                v.map(archive::from_bytes::<ChallengeEntry>).transpose()
            })??
            .ok_or_else(|| {
                refuse(
                    codes::CONSENT_RECORD_INVALID,
                    "a live consent key names a challenge without an entry",
                )
            })?;
        retire(tx, &entry)?;
    }
    Ok(())
}

/// A settled or expired challenge can no longer change (R2).
fn is_final(entry: &ChallengeEntry) -> bool {
    matches!(
        ChallengeState::from_code(entry.lifecycle.state),
        Some(ChallengeState::Settled | ChallengeState::Expired)
    )
}

fn identity_in(tx: &HookTxn<'_>) -> Result<Option<IdentityEntry>, HookError> {
    Ok(tx.get(CONSENT_IDENTITY_TABLE, IDENTITY_ENTRY_KEY, |v| {
        v.map(archive::from_bytes::<IdentityEntry>).transpose()
    })??)
}

/// The index entry a challenge record produces.
/// The index entry a challenge record (revision 1) produces: `pending`, empty nonce history.
fn challenge_entry(
    challenge: &InstallConsentChallenge,
    record_stream: &StreamId,
    payload: &[u8],
    created_at: Timestamp,
    position: u64,
    record_digest: [u8; 32],
) -> Option<ChallengeEntry> {
    Some(ChallengeEntry {
        challenge_id: challenge.challenge_id().to_owned(),
        stream: *record_stream.as_bytes(),
        challenge_digest: parse_sha(challenge.challenge_digest())?,
        payload_digest: Sha256::digest(payload).into(),
        created_at: created_at.0,
        expires_at: challenge.expires_at_micros().0,
        position,
        lifecycle: LifecycleEntry {
            revision: 1,
            head_position: position,
            head_digest: record_digest,
            state: ChallengeState::Pending.code(),
            decision: None,
            nonce_history_count: 0,
            nonce_history_digest: lifecycle::nonce_history_genesis(challenge.challenge_id()),
            reservation: None,
            settled_at: None,
            expired_at: None,
        },
    })
}

/// The identity entry of an identity record (revision 1).
fn identity_entry_of(audience: String, payload: &[u8], position: u64) -> IdentityEntry {
    let payload_digest: [u8; 32] = Sha256::digest(payload).into();
    IdentityEntry {
        audience,
        payload_digest,
        position,
        trusted_time_high_water: None,
        revision: 1,
        head_position: position,
        head_payload_digest: payload_digest,
    }
}

/// The identity entry after a trusted-time record: the floor raised to its `occurred_at`, which
/// must be later than the floor (spec/projections.md §8.7: the high-water only moves forward).
fn raise_floor(
    entry: &IdentityEntry,
    revision: u64,
    event_id: &str,
    occurred_at: Timestamp,
    payload: &[u8],
    position: u64,
) -> Result<IdentityEntry, lifecycle::Refusal> {
    let value = lifecycle::decode_trusted_time(payload).map_err(|m| lifecycle::Refusal {
        code: codes::CONSENT_RECORD_INVALID,
        message: m.to_owned(),
    })?;
    if revision != entry.revision + 1
        || event_id != lifecycle::trusted_time_event_id(revision)
        || value.0 != occurred_at.0
    {
        return Err(lifecycle::Refusal {
            code: codes::CONSENT_RECORD_INVALID,
            message: "a trusted-time record is not the next record of the identity stream".into(),
        });
    }
    if entry
        .trusted_time_high_water
        .is_some_and(|floor| floor >= value.0)
    {
        return Err(lifecycle::Refusal {
            code: codes::CONSENT_TRUSTED_TIME,
            message: "a trusted-time record does not raise the floor".into(),
        });
    }
    Ok(IdentityEntry {
        trusted_time_high_water: Some(value.0),
        revision,
        head_position: position,
        head_payload_digest: Sha256::digest(payload).into(),
        ..entry.clone()
    })
}

fn refusal_hook(r: lifecycle::Refusal) -> HookError {
    HookError::with_code(r.code, r.message)
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
        let entry = identity_entry_of(audience, record.payload, record.position);
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
            *record.digest.as_bytes(),
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
        // Only live challenges count (R1): those expired by this challenge's creation time are
        // retired first.
        retire_expired(tx, entry.created_at)?;
        let count = count_in(tx, COUNT_CHALLENGES_KEY)?;
        let live = count
            .checked_sub(count_in(tx, COUNT_CHALLENGES_RETIRED_KEY)?)
            .ok_or_else(|| bad("the store counts more retired challenges than created ones"))?;
        if live >= CONSENT_CHALLENGES_MAX {
            return Err(refuse(codes::CONSENT_CAPACITY, CAPACITY.to_string()));
        }
        tx.insert(CONSENT_CHALLENGES_TABLE, id, &archive::to_bytes(&entry)?)?;
        tx.insert(CONSENT_BY_DIGEST_TABLE, &key, id)?;
        tx.insert(
            CONSENT_LIVE_TABLE,
            &live_key(entry.expires_at, &entry.challenge_id),
            &[],
        )?;
        set_count(tx, COUNT_CHALLENGES_KEY, count + 1)?;
        Ok(())
    }
}

impl ConsentStoreProjection {
    fn apply_trusted_time(
        &self,
        tx: &HookTxn<'_>,
        record: &RecordView<'_>,
    ) -> Result<(), HookError> {
        let Some(identity) = identity_in(tx)? else {
            return Err(refuse(
                codes::CONSENT_RECORD_INVALID,
                "a trusted-time record precedes the broker identity",
            ));
        };
        if identity_stream().ok() != Some(record.stream) {
            return Err(refuse(
                codes::CONSENT_RECORD_INVALID,
                "a trusted-time record is not on the identity stream",
            ));
        }
        let entry = raise_floor(
            &identity,
            record.revision,
            record.event_id,
            record.occurred_at,
            record.payload,
            record.position,
        )
        .map_err(refusal_hook)?;
        tx.insert(
            CONSENT_IDENTITY_TABLE,
            IDENTITY_ENTRY_KEY,
            &archive::to_bytes(&entry)?,
        )?;
        Ok(())
    }

    /// A lifecycle record: found through the challenge digest its payload names, folded into the
    /// entry (the transition table), its nonce, if any, recorded once across the store.
    fn apply_lifecycle(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let bad = |m: &str| refuse(codes::CONSENT_RECORD_INVALID, m.to_owned());
        let (_, named) = lifecycle::Lifecycle::decode(record.kind, record.payload)
            .map_err(|m| bad(&format!("lifecycle record {}: {m}", record.event_id)))?;
        let digest = parse_sha(&named).ok_or_else(|| bad("a lifecycle digest is malformed"))?;
        let id = tx
            .get(CONSENT_BY_DIGEST_TABLE, &digest_key(&digest), |v| {
                v.map(<[u8]>::to_vec)
            })?
            .ok_or_else(|| bad("a lifecycle record names no recorded challenge"))?;
        let entry = tx
            .get(CONSENT_CHALLENGES_TABLE, &id, |v| {
                v.map(archive::from_bytes::<ChallengeEntry>).transpose()
            })??
            .ok_or_else(|| bad("a digest entry names a challenge id without an entry"))?;
        if entry.stream != *record.stream.as_bytes() {
            return Err(bad("a lifecycle record is not on its challenge's stream"));
        }
        let Some(identity) = identity_in(tx)? else {
            return Err(bad("the broker identity is not recorded"));
        };
        let (next, nonce) = lifecycle::fold(
            &entry,
            &named,
            &identity.audience,
            &lifecycle::LifecycleRecord {
                kind: record.kind,
                revision: record.revision,
                position: record.position,
                digest: *record.digest.as_bytes(),
                event_id: record.event_id,
                occurred_at: record.occurred_at.0,
                payload: record.payload,
            },
        )
        .map_err(refusal_hook)?;
        if let Some(step) = nonce {
            if tx.get(CONSENT_NONCES_TABLE, &step.nonce_digest, |v| v.is_some())? {
                return Err(refuse(
                    codes::CONSENT_NONCE_REPLAY,
                    "verified human decision nonce was already recorded",
                ));
            }
            let count = count_in(tx, COUNT_NONCES_KEY)?;
            let retired = count_in(tx, COUNT_NONCES_RETIRED_KEY)?;
            if count.saturating_sub(retired) >= CONSENT_NONCES_MAX {
                return Err(refuse(
                    codes::CONSENT_NONCE_CAPACITY,
                    NONCE_CAPACITY.to_string(),
                ));
            }
            let live = tx.get(
                CONSENT_LIVE_TABLE,
                &live_key(entry.expires_at, &entry.challenge_id),
                |v| v.is_some(),
            )?;
            if !live {
                // A nonce on a retired challenge is retired with it at once (R4).
                set_count(tx, COUNT_NONCES_RETIRED_KEY, retired + 1)?;
            }
            let nonce_entry = NonceEntry {
                challenge_id: entry.challenge_id.clone(),
                sequence: step.sequence,
                record_digest: step.record_digest,
            };
            tx.insert(
                CONSENT_NONCES_TABLE,
                &step.nonce_digest,
                &archive::to_bytes(&nonce_entry)?,
            )?;
            tx.insert(
                CONSENT_COUNTS_TABLE,
                COUNT_NONCES_KEY,
                &(count + 1).to_le_bytes(),
            )?;
        }
        tx.insert(CONSENT_CHALLENGES_TABLE, &id, &archive::to_bytes(&next)?)?;
        if is_final(&next) {
            retire(tx, &next)?;
        }
        Ok(())
    }
}

impl Projection for ConsentStoreProjection {
    fn name(&self) -> &'static str {
        CONSENT_STORE_PROJECTION
    }

    fn version(&self) -> u32 {
        // 2: lifecycle records, trusted-time records, the nonce index.
        // 3: the live table and the retired counters; the capacities count live challenges and
        // their nonces (spec/projections.md §8.9).
        3
    }

    fn tables(&self) -> &'static [&'static str] {
        &[
            CONSENT_IDENTITY_TABLE,
            CONSENT_CHALLENGES_TABLE,
            CONSENT_BY_DIGEST_TABLE,
            CONSENT_COUNTS_TABLE,
            CONSENT_NONCES_TABLE,
            CONSENT_LIVE_TABLE,
        ]
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        match record.kind {
            IDENTITY_KIND => self.apply_identity(tx, record),
            CHALLENGE_KIND => self.apply_challenge(tx, record),
            TRUSTED_TIME_KIND => self.apply_trusted_time(tx, record),
            kind if LIFECYCLE_KINDS.contains(&kind) => self.apply_lifecycle(tx, record),
            // Nothing else may be written on the identity stream.
            _ if identity_stream_id() == Some(record.stream) => Err(refuse(
                codes::CONSENT_RECORD_INVALID,
                "the identity stream holds only identity and trusted-time records",
            )),
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
    /// What binds verified decisions and reservation tokens to this instance
    /// (spec/projections.md §8.8).
    instance: decision::Instance,
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
            instance: decision::Instance::new(&journal),
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
        Ok(self.identity_validated()?.map(|e| e.audience))
    }

    /// The identity entry, re-validated against its journal records: revision 1 (the identity)
    /// and, when the floor was raised, the head trusted-time record that holds its value.
    fn identity_validated(&self) -> Result<Option<IdentityEntry>, ConsentStoreError> {
        let Some(entry) = self.identity_entry()? else {
            return Ok(None);
        };
        let stream = identity_stream()?;
        let read = |revision: u64| -> Result<Option<Record>, ConsentStoreError> {
            let mut records: Vec<Record> = Vec::with_capacity(1);
            self.journal
                .visit_stream(&stream, revision, 1, |view| {
                    records.push(view.to_record());
                    ControlFlow::Continue(())
                })
                .map_err(read_error)?;
            Ok(records.pop())
        };
        let Some(record) = read(1)? else {
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
        let mut expected = identity_entry_of(audience, &record.payload, record.position);
        if entry.revision > 1 {
            let head = read(entry.revision)?
                .filter(|r| r.kind == TRUSTED_TIME_KIND)
                .ok_or_else(|| {
                    corruption(
                        "consent broker trusted-time high-water is invalid",
                        "the identity entry names a head that is not a trusted-time record",
                    )
                })?;
            let previous = IdentityEntry {
                trusted_time_high_water: None,
                revision: entry.revision - 1,
                ..expected
            };
            expected = raise_floor(
                &previous,
                head.revision,
                &head.event_id,
                head.occurred_at,
                &head.payload,
                head.position,
            )
            .map_err(|r| {
                corruption(
                    "consent broker trusted-time high-water is invalid",
                    r.message,
                )
            })?;
        }
        if expected != entry {
            return Err(corruption(
                "consent broker identity digest is invalid",
                "the identity entry disagrees with its authenticated journal records",
            ));
        }
        Ok(Some(entry))
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

    /// The later of `now` and the persisted trusted-time floor (spec/projections.md §8.7). Only a
    /// verified human decision raises the floor (`decision.rs`).
    fn effective_now(&self, now: UtcMicros) -> Result<UtcMicros, ConsentStoreError> {
        Ok(self.clock(now)?.0)
    }

    /// The effective time at `now` and the (re-validated) identity entry holding the floor.
    fn clock(
        &self,
        now: UtcMicros,
    ) -> Result<(UtcMicros, Option<IdentityEntry>), ConsentStoreError> {
        if !in_range(now) {
            return Err(invalid("trusted time must be a canonical UTC instant"));
        }
        // Before the first challenge no identity (and so no floor) is recorded.
        let Some(entry) = self.identity_validated()? else {
            return Ok((now, None));
        };
        let n = match entry.trusted_time_high_water {
            Some(floor) if floor > now.0 => UtcMicros(floor),
            _ => now,
        };
        Ok((n, Some(entry)))
    }

    /// Publishes a challenge (spec/projections.md §8.8), idempotent by exact digest: a challenge
    /// already stored under this id with the same digest is returned (nothing is written, even when
    /// the caller's time differs), another is Conflict "public challenge ID is already bound to a
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
            return live(&existing, n);
        }
        if n >= challenge.expires_at_micros() {
            return Err(EXPIRED_AT_CREATION);
        }
        if self.live_challenge_count_at(n)? >= CONSENT_CHALLENGES_MAX {
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
                            Some(existing) => live(&existing, n),
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
                    Some(existing) => live(&existing, n),
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

    /// The status of a challenge at `now` (spec/projections.md §8.8): NotFound "install consent
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

    /// The status of the challenge with this digest at `now` (spec/projections.md §8.8), only when
    /// it belongs to the expected workspace and release root: otherwise, as for an unknown digest,
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
        self.counter(COUNT_CHALLENGES_KEY)
    }

    /// Number of live challenges: created and not retired (spec/projections.md §8.9).
    pub fn live_challenge_count(&self) -> Result<u64, ConsentStoreError> {
        self.challenge_count()?
            .checked_sub(self.counter(COUNT_CHALLENGES_RETIRED_KEY)?)
            .ok_or_else(|| {
                corruption(
                    "challenge count is invalid",
                    "more challenges are retired than created",
                )
            })
    }

    /// The live challenges a challenge created at `n` would find once the fold retired those
    /// expired by then (R3): what the capacity check inside the append compares.
    fn live_challenge_count_at(&self, n: UtcMicros) -> Result<u64, ConsentStoreError> {
        let mut expired = 0u64;
        self.journal
            .projection_scan(CONSENT_LIVE_TABLE, |key, _| match live_key_expiry(key) {
                Some(expiry) if expiry <= n.0 => {
                    expired += 1;
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Break(()),
            })
            .map_err(unavailable)?;
        Ok(self.live_challenge_count()?.saturating_sub(expired))
    }

    fn counter(&self, key: &[u8]) -> Result<u64, ConsentStoreError> {
        let bytes = self
            .journal
            .projection_get(CONSENT_COUNTS_TABLE, key, |v| v.map(<[u8]>::to_vec))
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
    /// re-decodes and re-binds the challenge (spec/projections.md §8.1 row validation), re-folds
    /// every lifecycle record with the projection's own fold and compares the index entry with the
    /// result. `None` when the id has no entry.
    ///
    /// The entry is read first, then exactly its revisions plus one: a stream is append-only, so
    /// it holds at least the entry's records; a record past them is either a concurrent append
    /// (the entry moved: read again) or one the projection did not fold (refused, C-7).
    fn stored(&self, challenge_id: &str) -> Result<Option<StoredChallenge>, ConsentStoreError> {
        for _ in 0..READ_RETRIES {
            let Some(entry) = self.entry(challenge_id)? else {
                return Ok(None);
            };
            let stream = challenge_stream(challenge_id)?;
            let revision = entry.lifecycle.revision;
            if revision == 0 || revision > lifecycle::CHALLENGE_STREAM_RECORDS_MAX {
                return Err(corruption(
                    "persisted consent lifecycle fields are invalid",
                    "the entry's revision is out of bounds",
                ));
            }
            let mut records: Vec<Record> = Vec::new();
            self.journal
                .visit_stream(
                    &stream,
                    1,
                    usize::try_from(revision + 1).unwrap_or(usize::MAX),
                    |view| {
                        records.push(view.to_record());
                        ControlFlow::Continue(())
                    },
                )
                .map_err(read_error)?;
            if records.len() as u64 > revision {
                if self.entry(challenge_id)?.map(|e| e.lifecycle.revision) != Some(revision) {
                    continue;
                }
                return Err(corruption(
                    "persisted consent lifecycle fields are invalid",
                    format!("challenge stream {stream} holds a record its entry does not fold"),
                ));
            }
            return self
                .refold(challenge_id, &stream, &records, &entry)
                .map(Some);
        }
        Err(ConsentStoreError::Unavailable {
            message: "consent broker store is unavailable",
            detail: "the challenge kept changing while it was read".into(),
        })
    }

    fn refold(
        &self,
        challenge_id: &str,
        stream: &StreamId,
        records: &[Record],
        entry: &ChallengeEntry,
    ) -> Result<StoredChallenge, ConsentStoreError> {
        let Some((record, rest)) = records.split_first() else {
            return Err(corruption(
                "persisted consent lifecycle fields are invalid",
                "an entry without its challenge record",
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
        if challenge.challenge_id() != challenge_id || record.stream != *stream {
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
        let mut folded = challenge_entry(
            &challenge,
            &record.stream,
            &record.payload,
            record.occurred_at,
            record.position,
            *record.digest.as_bytes(),
        )
        .ok_or_else(|| corruption("persisted challenge digest binding is invalid", ""))?;
        for r in rest {
            let (next, _) = lifecycle::fold(
                &folded,
                challenge.challenge_digest(),
                &self.audience,
                &lifecycle::LifecycleRecord {
                    kind: &r.kind,
                    revision: r.revision,
                    position: r.position,
                    digest: *r.digest.as_bytes(),
                    event_id: &r.event_id,
                    occurred_at: r.occurred_at.0,
                    payload: &r.payload,
                },
            )
            .map_err(|refusal| {
                corruption(
                    "persisted consent lifecycle fields are invalid",
                    refusal.message,
                )
            })?;
            folded = next;
        }
        if folded != *entry {
            return Err(corruption(
                "consent broker index authentication failed",
                "the index entry disagrees with its authenticated journal records",
            ));
        }
        Ok(StoredChallenge {
            challenge,
            created_at,
            entry: folded,
        })
    }
}

/// Reads of one challenge retried when its stream moves between the entry and the records.
const READ_RETRIES: usize = 8;

/// An authenticated challenge: its value and its folded (written) lifecycle.
struct StoredChallenge {
    challenge: InstallConsentChallenge,
    created_at: UtcMicros,
    entry: ChallengeEntry,
}

/// A time transition the store decides and has not written yet (spec/projections.md §8.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// `pending`, `decision-ready` or `reauthentication-required` at or past the challenge's
    /// `expires_at`: `expired`.
    Expiry,
    /// `decision-ready` at or past the decision's `expires_at` (challenge live):
    /// `reauthentication-required`.
    DecisionExpiry,
}

impl StoredChallenge {
    fn written_state(&self) -> ChallengeState {
        ChallengeState::from_code(self.entry.lifecycle.state).unwrap_or(ChallengeState::Expired)
    }

    fn decision(&self) -> Option<&DecisionEntry> {
        self.entry.lifecycle.decision.as_ref()
    }

    /// The time transition due at effective time `n`, if any. `reserved`, `settled` and `expired`
    /// are never moved by time (an expiry once written is sticky: no revival).
    fn due(&self, n: UtcMicros) -> Option<Due> {
        let state = self.written_state();
        let live_state = matches!(
            state,
            ChallengeState::Pending
                | ChallengeState::DecisionReady
                | ChallengeState::ReauthenticationRequired
        );
        if live_state && n >= self.challenge.expires_at_micros() {
            return Some(Due::Expiry);
        }
        if state == ChallengeState::DecisionReady
            && self.decision().is_some_and(|d| n.0 >= d.expires_at)
        {
            return Some(Due::DecisionExpiry);
        }
        None
    }

    /// The state at `n`: the written state with the due time transition applied.
    fn state_at(&self, n: UtcMicros) -> ChallengeState {
        match self.due(n) {
            Some(Due::Expiry) => ChallengeState::Expired,
            Some(Due::DecisionExpiry) => ChallengeState::ReauthenticationRequired,
            None => self.written_state(),
        }
    }

    /// The status at effective time `n` (the expire-if-due view, spec/projections.md §8.7).
    fn at(&self, n: UtcMicros) -> ChallengeRecord {
        self.record(self.state_at(n))
    }

    /// The status with no time transition (spec/projections.md §8.8).
    fn written(&self) -> ChallengeRecord {
        self.record(self.written_state())
    }

    fn record(&self, state: ChallengeState) -> ChallengeRecord {
        let l = &self.entry.lifecycle;
        let reservation = match state {
            // A view moves only live states, which hold no reservation.
            ChallengeState::Reserved | ChallengeState::Settled | ChallengeState::Expired => {
                l.reservation.clone()
            }
            _ => None,
        };
        ChallengeRecord {
            challenge: self.challenge.clone(),
            state,
            created_at: self.created_at.render(),
            decision: l.decision.clone(),
            reservation,
            settled_at: l.settled_at.map(|t| UtcMicros(t).render()),
            expired_at: (state == ChallengeState::Expired)
                .then(|| self.challenge.expires_at().to_owned()),
            revision: l.revision,
        }
    }
}

/// "Assert live" without writing (spec/projections.md §8.7): the status at `n`, or Expired when it
/// is expired. Used where the reference's transition would be the only write (`create_challenge`
/// of a stored challenge); the operations that write materialize it first (`decision.rs`).
fn live(stored: &StoredChallenge, n: UtcMicros) -> Result<ChallengeRecord, ConsentStoreError> {
    let record = stored.at(n);
    if record.state == ChallengeState::Expired {
        return Err(EXPIRED);
    }
    Ok(record)
}

#[cfg(test)]
mod tests;
