//! The decision lifecycle of the consent store (spec/projections.md §8.8, §8.5):
//! verifying a signed human decision, recording it, the interactive guard as explicit calls
//! (reserve → settle / release), reconciliation against journal evidence, recovery and
//! inspection. Specified in `spec/projections.md`, section "consent.store".
//!
//! Every write is one atomic journal append at the stream's exact head
//! (`ExpectedRevision::Exact`); a lost race (`WrongRevision`, or the same event id with other
//! content) re-reads and decides again, at most [`RACE_RETRIES`] times.
//!
//! **Sticky expiry.** The time transitions the store decides (spec/projections.md §8.7) are a view
//! on reads (`get`, `get_by_challenge_digest`, `create_challenge` of a stored challenge) and are
//! written by the operations that write anyway, before their own record, in the same append:
//! `verify_human_decision`, `mark_decision_ready`, `reserve` ("assert live": an expiry is written,
//! then Expired is raised, as the reference commits before raising), `reconcile_install_decision`
//! and `recover`. A written expiry is never revived (the reference revives a decision-bearing
//! expired row for a slower clock); only committed journal evidence settles it.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use ctx_journal::{AppendError, ExpectedRevision, Journal, NewRecord, StreamAppend, Timestamp};
use ctx_model::{Json, ScopeRef, UtcMicros, is_sha, is_token, parse_sha};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::streams::TRUSTED_TIME_KIND;

use super::assertion::{HumanDecision, SignedHumanDecisionAssertion};
use super::lifecycle::{
    ExpiryCause, Lifecycle, ReauthenticationCause, SettleBasis, lifecycle_event_id, sha256,
    trusted_time_event_id, trusted_time_payload,
};
use super::{
    ASSERTION_FUTURE_SKEW_MAX_MICROS, CONCURRENT_CHANGE, CONSENT_CHALLENGES_TABLE,
    CONSENT_COUNTS_TABLE, CONSENT_NONCES_MAX, CONSENT_NONCES_TABLE, COUNT_NONCES_KEY,
    COUNT_NONCES_RETIRED_KEY, ChallengeRecord, ChallengeState, ConsentStore, ConsentStoreError,
    DecisionEntry, Due, EXPIRED, IdentityEntry, InstallConsentChallenge, NONCE_CAPACITY,
    NONCE_REPLAY, NOT_FOUND_ID, NOT_PROCESS_BOUND, StoredChallenge, append_error, challenge_stream,
    corruption, ct_eq, decision_already, identity_stream, invalid, record_already, unavailable,
};

/// Lost races tolerated by one operation before it gives up with [`CONCURRENT_CHANGE`].
pub const RACE_RETRIES: usize = 8;

const INSTANCE_KEY_DOMAIN: &[u8] = b"ctx.consent.instance-key.v1";
const RESERVATION_TOKEN_DOMAIN: &[u8] = b"ctx.consent.reservation-token.v1";

fn rejected(message: &'static str) -> ConsentStoreError {
    ConsentStoreError::Rejected {
        message: Cow::Borrowed(message),
    }
}

fn expired(message: &'static str) -> ConsentStoreError {
    ConsentStoreError::Expired {
        message: Cow::Borrowed(message),
    }
}

/// The Expired refusal of `what`, which expires at `deadline`, seen at the effective time `n` by a
/// process whose clock reads `now` (spec/projections.md §8.7). When this process's clock has not
/// reached the deadline, the trusted-time floor made it expire (`n` is the floor), and the
/// sentence says so, naming both times, so that a person is not left looking at a clock that says
/// the thing is still live. Otherwise it is `fallback`, the reference's sentence.
fn expired_at(
    fallback: ConsentStoreError,
    what: &str,
    deadline: UtcMicros,
    n: UtcMicros,
    now: UtcMicros,
) -> ConsentStoreError {
    if now >= deadline {
        return fallback;
    }
    ConsentStoreError::Expired {
        message: Cow::Owned(format!(
            "{what} expired at {} by ctx's trusted time floor {} (the latest time the journal has \
             seen), not by this process's clock {}",
            deadline.render(),
            n.render(),
            now.render()
        )),
    }
}

/// The time a verification raises the trusted-time floor to (spec/projections.md §8.7, C-12):
/// this process's clock, clamped between `issued_at` and `issued_at` plus the skew. The signed
/// `issued_at` is the evidence: a clock running ahead moves the floor at most the skew past the
/// time the person's authenticator vouched for, and an `issued_at` slightly ahead of this clock
/// (the verification refused anything further ahead) lifts it to that signed time, never past
/// this clock plus the skew. Both bounds are valid instants: the result lies between `issued_at` and
/// the later of `now` and `issued_at`.
fn vouched_time(now: UtcMicros, issued_at: UtcMicros) -> UtcMicros {
    let ceiling = issued_at.0.saturating_add(ASSERTION_FUTURE_SKEW_MAX_MICROS);
    UtcMicros(now.0.min(ceiling).max(issued_at.0))
}

const UNKNOWN_DECISION_CHALLENGE: &str = "verified decision challenge is unknown";
const DECISION_NOT_BOUND: &str = "verified decision does not bind the persisted challenge";
const REVERIFY_MISMATCH: &str = "reverified assertion does not match the decision-ready record";
const OWNERSHIP_CHANGED: &str = "interactive reservation ownership changed";
const NO_LONGER_RESERVED: ConsentStoreError = ConsentStoreError::Conflict {
    message: "interactive decision is no longer reserved",
};
const EVIDENCE_MISMATCH: &str =
    "journal evidence does not match the exact broker decision and reservation";
const RESERVATION_MISMATCH: &str =
    "journal evidence does not match the persisted broker reservation";

// ------------------------------------------------------------------------------------------------
// The store instance
// ------------------------------------------------------------------------------------------------

static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// What binds a verified decision and a reservation token to one store instance
/// (spec/projections.md §8.8): a process-unique id and a 32-byte key that never leaves memory.
///
/// The key is the journal's installation-keyed digest (`Journal::keyed_digest`, an HMAC under a
/// sub-key of the secret installation key) of a value unique to this instance (process id,
/// instance counter, wall-clock nanoseconds). This crate has no random number generator; a keyed
/// PRF over distinct inputs gives keys that nobody without the installation key can predict, and
/// someone holding the installation key can forge journal records anyway. Uniqueness, which is
/// what "process-bound" needs, comes from the counter; unpredictability from the key.
pub(super) struct Instance {
    id: u64,
    key: [u8; 32],
    tokens: AtomicU64,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Instance {
    pub(super) fn new(journal: &Journal) -> Instance {
        let id = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut body = Vec::with_capacity(28);
        body.extend_from_slice(&std::process::id().to_le_bytes());
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&nanos.to_le_bytes());
        Instance {
            id,
            key: journal.keyed_digest(INSTANCE_KEY_DOMAIN, &body),
            tokens: AtomicU64::new(0),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        #[allow(clippy::expect_used)]
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC accepts a 32-byte key");
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    /// A fresh reservation token (spec/projections.md §8.1, §8.8: 32 unpredictable bytes per guard
    /// entry).
    fn token(&self) -> [u8; 32] {
        let n = self.tokens.fetch_add(1, Ordering::Relaxed);
        self.mac(&[RESERVATION_TOKEN_DOMAIN, &[0], &n.to_le_bytes()])
    }
}

// ------------------------------------------------------------------------------------------------
// Values
// ------------------------------------------------------------------------------------------------

/// A signed human decision verified by this store instance (spec/projections.md §8.8):
/// process-bound authority. Only [`ConsentStore::verify_human_decision`] makes one; it cannot be
/// cloned, serialized or used with another store instance (even on the same journal), and a
/// decision whose claims or seal do not verify is refused with Rejected "VerifiedHumanDecision is
/// not process-bound to this broker instance". Equality compares the nine claims only.
pub struct VerifiedHumanDecision {
    challenge_id: String,
    challenge_digest: String,
    decision: HumanDecision,
    principal_digest: String,
    authenticator_id: String,
    audience: String,
    assertion_nonce_digest: String,
    issued_at: UtcMicros,
    expires_at: UtcMicros,
    /// The time the verification vouches for ([`vouched_time`]: this process's clock bounded by
    /// the signed `issued_at` and the skew): the trusted-time floor is raised to it when the
    /// decision is recorded.
    verified_at: UtcMicros,
    instance: u64,
    seal: [u8; 32],
}

impl std::fmt::Debug for VerifiedHumanDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedHumanDecision")
            .field("challenge_id", &self.challenge_id)
            .field("decision", &self.decision)
            .field("expires_at", &self.expires_at.render())
            .finish_non_exhaustive()
    }
}

impl PartialEq for VerifiedHumanDecision {
    fn eq(&self, other: &Self) -> bool {
        self.claims_json() == other.claims_json()
    }
}

impl Eq for VerifiedHumanDecision {}

impl VerifiedHumanDecision {
    pub fn challenge_id(&self) -> &str {
        &self.challenge_id
    }
    pub fn challenge_digest(&self) -> &str {
        &self.challenge_digest
    }
    pub fn decision(&self) -> HumanDecision {
        self.decision
    }
    pub fn principal_digest(&self) -> &str {
        &self.principal_digest
    }
    pub fn authenticator_id(&self) -> &str {
        &self.authenticator_id
    }
    pub fn audience(&self) -> &str {
        &self.audience
    }
    pub fn assertion_nonce_digest(&self) -> &str {
        &self.assertion_nonce_digest
    }
    pub fn issued_at(&self) -> String {
        self.issued_at.render()
    }
    pub fn expires_at(&self) -> String {
        self.expires_at.render()
    }
    pub fn issued_at_micros(&self) -> UtcMicros {
        self.issued_at
    }
    pub fn expires_at_micros(&self) -> UtcMicros {
        self.expires_at
    }

    /// The canonical bytes of the nine claims (spec/projections.md §8.8).
    fn claims_json(&self) -> String {
        Json::object([
            (
                "assertion_nonce_digest",
                Json::str(&self.assertion_nonce_digest),
            ),
            ("audience", Json::str(&self.audience)),
            ("authenticator_id", Json::str(&self.authenticator_id)),
            ("challenge_digest", Json::str(&self.challenge_digest)),
            ("challenge_id", Json::str(&self.challenge_id)),
            ("decision", Json::str(self.decision.as_str())),
            ("expires_at", Json::str(self.expires_at.render())),
            ("issued_at", Json::str(self.issued_at.render())),
            ("principal_digest", Json::str(&self.principal_digest)),
        ])
        .to_cja()
    }

    /// The decision seal (spec/projections.md §8.1, §8.8): HMAC-SHA256 under the instance key of
    /// the claims' canonical bytes, then 0x00 and the verification time (i64 LE).
    fn seal_with(&self, instance: &Instance) -> [u8; 32] {
        instance.mac(&[
            self.claims_json().as_bytes(),
            &[0],
            &self.verified_at.0.to_le_bytes(),
        ])
    }

    fn same_identity(&self, d: &DecisionEntry) -> bool {
        d.decision == self.decision.as_str()
            && d.principal_digest == self.principal_digest
            && d.authenticator_id == self.authenticator_id
            && d.audience == self.audience
    }

    /// The seven decision claims a `decision-ready` record holds (spec/projections.md §8.8).
    fn matches_record(&self, d: &DecisionEntry) -> bool {
        self.same_identity(d)
            && d.assertion_nonce_digest == self.assertion_nonce_digest
            && d.issued_at == self.issued_at.0
            && d.expires_at == self.expires_at.0
    }
}

/// The engine's interactive decision, as the guard reserves it (the reference's
/// `InteractiveInstallDecisionReservation`): the decision event (id and content digest) and the
/// exact install it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub scope: ScopeRef,
    /// The engine event's id (a bounded canonical token) and content digest.
    pub event_id: String,
    pub event_content_digest: String,
    pub consent_id: String,
    pub decision: HumanDecision,
    pub policy_snapshot_digest: String,
    pub requested_action_id: String,
    pub requested_action_kind: String,
    pub requested_action_content_digest: String,
    pub requested_action_precondition_revision: u64,
    /// The pending install action's `expires_at` (canonical UTC text).
    pub install_expires_at: String,
}

impl Reservation {
    fn validate(&self) -> Result<(), ConsentStoreError> {
        if !is_token(&self.event_id) {
            return Err(invalid("event_id must be a bounded canonical token"));
        }
        if !is_sha(&self.event_content_digest) {
            return Err(invalid(
                "event_content_digest must be a lowercase SHA-256 digest",
            ));
        }
        if !is_token(&self.consent_id) {
            return Err(invalid("consent_id must be a bounded canonical token"));
        }
        Ok(())
    }

    /// The reservation is the challenge's exact install with `decision` (spec/projections.md §8.8;
    /// the expiry compared as text, as the reference does).
    fn matches(&self, c: &InstallConsentChallenge, decision: Option<&str>) -> bool {
        self.scope == *c.scope()
            && self.consent_id == c.challenge_id()
            && Some(self.decision.as_str()) == decision
            && self.policy_snapshot_digest == c.policy_snapshot_digest()
            && self.requested_action_id == c.requested_action_id()
            && self.requested_action_kind == c.requested_action_kind()
            && self.requested_action_content_digest == c.requested_action_content_digest()
            && self.requested_action_precondition_revision
                == c.requested_action_precondition_revision()
            && self.install_expires_at == c.expires_at()
    }
}

/// A held reservation (the guard's context, spec/projections.md §8.8): proof that this store
/// instance reserved the decision for one engine event. Not cloneable; `settle` and `release`
/// consume it. It carries the raw token, whose SHA-256 only is journaled.
pub struct ReservationToken {
    instance: u64,
    challenge_id: String,
    challenge_digest: String,
    event_id: String,
    event_content_digest: String,
    token: [u8; 32],
}

impl std::fmt::Debug for ReservationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationToken")
            .field("challenge_id", &self.challenge_id)
            .field("event_id", &self.event_id)
            .finish_non_exhaustive()
    }
}

impl ReservationToken {
    pub fn challenge_id(&self) -> &str {
        &self.challenge_id
    }
    pub fn event_id(&self) -> &str {
        &self.event_id
    }
    pub fn event_content_digest(&self) -> &str {
        &self.event_content_digest
    }
    fn token_digest(&self) -> [u8; 32] {
        sha256(&self.token)
    }
}

/// What the service read from the engine journal about the reserved decision event
/// (spec/projections.md §8.8, the evidence provider's lookup). The service revalidates committed
/// evidence with its provider before it calls the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionEvidence {
    /// The decision event is committed: its id and content digest, and the engine stream's head
    /// (revision and record digest) the service observed it at.
    Committed {
        event_id: String,
        event_content_digest: String,
        head_revision: u64,
        head_record_digest: String,
    },
    /// The engine stream is at the expected head and the event is not in it: it never committed.
    AbsentAtExpectedHead,
    /// The engine stream moved past the expected head without the event.
    HeadAdvanced,
    /// Another event holds the event id.
    EventCollision,
    /// The engine journal does not validate.
    Corrupt,
    /// The engine journal could not be read.
    Unavailable,
}

/// The journal status a reconciliation reports (spec/projections.md §8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JournalStatus {
    Committed,
    AbsentAtExpectedHead,
    HeadAdvanced,
    EventCollision,
    Corrupt,
    Unavailable,
}

impl JournalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JournalStatus::Committed => "committed",
            JournalStatus::AbsentAtExpectedHead => "absent-at-expected-head",
            JournalStatus::HeadAdvanced => "head-advanced",
            JournalStatus::EventCollision => "event-collision",
            JournalStatus::Corrupt => "corrupt",
            JournalStatus::Unavailable => "unavailable",
        }
    }
}

impl DecisionEvidence {
    pub fn status(&self) -> JournalStatus {
        match self {
            DecisionEvidence::Committed { .. } => JournalStatus::Committed,
            DecisionEvidence::AbsentAtExpectedHead => JournalStatus::AbsentAtExpectedHead,
            DecisionEvidence::HeadAdvanced => JournalStatus::HeadAdvanced,
            DecisionEvidence::EventCollision => JournalStatus::EventCollision,
            DecisionEvidence::Corrupt => JournalStatus::Corrupt,
            DecisionEvidence::Unavailable => JournalStatus::Unavailable,
        }
    }
}

/// The outcome of a reconciliation (spec/projections.md §8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconciliationOutcome {
    Settled,
    ReauthenticationRequired,
    Expired,
    Quarantined,
}

impl ReconciliationOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReconciliationOutcome::Settled => "settled",
            ReconciliationOutcome::ReauthenticationRequired => "reauthentication-required",
            ReconciliationOutcome::Expired => "expired",
            ReconciliationOutcome::Quarantined => "quarantined",
        }
    }
}

/// The reference's `ConsentBrokerReconciliationReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconciliationReport {
    pub outcome: ReconciliationOutcome,
    pub journal_status: JournalStatus,
    pub record: ChallengeRecord,
}

/// The reference's `ConsentBrokerRecoveryReport`, plus the decisions moved to re-authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecoveryReport {
    /// Challenges whose expiry this sweep wrote.
    pub expired: u64,
    /// Decisions whose TTL had passed, written `reauthentication-required` by this sweep.
    pub reauthentication_required: u64,
    /// `reserved` challenges left alone (only reconciliation may reopen them).
    pub retained_reserved: u64,
}

// ------------------------------------------------------------------------------------------------
// Operations
// ------------------------------------------------------------------------------------------------

impl ConsentStore {
    /// Runs `attempt` until it decides: `Ok(None)` is a lost race (the stream moved under it).
    fn retrying<T>(
        &self,
        mut attempt: impl FnMut() -> Result<Option<T>, ConsentStoreError>,
    ) -> Result<T, ConsentStoreError> {
        for _ in 0..RACE_RETRIES {
            if let Some(done) = attempt()? {
                return Ok(done);
            }
        }
        Err(CONCURRENT_CHANGE)
    }

    /// Appends `batch` atomically: `Ok(false)` when another writer moved a stream first.
    fn commit(&self, batch: Vec<StreamAppend>) -> Result<bool, ConsentStoreError> {
        if batch.is_empty() {
            return Ok(true);
        }
        match self.journal.append_batch(batch) {
            Ok(_) => Ok(true),
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => Ok(false),
            Err(e) => Err(append_error(e)),
        }
    }

    /// The lifecycle records `records` as the next revisions of `stored`'s stream, at time `n`.
    pub(super) fn lifecycle_append(
        stored: &StoredChallenge,
        records: &[Lifecycle],
        n: UtcMicros,
    ) -> Result<StreamAppend, ConsentStoreError> {
        let digest = stored.challenge.challenge_digest();
        let head = stored.entry.lifecycle.revision;
        let news = records
            .iter()
            .zip(head + 1..)
            .map(|(r, revision)| {
                NewRecord::new(
                    lifecycle_event_id(revision, digest),
                    r.kind(),
                    Timestamp(n.0),
                    r.to_payload(digest),
                )
            })
            .collect();
        Ok(StreamAppend::new(
            challenge_stream(stored.challenge.challenge_id())?,
            ExpectedRevision::Exact(head),
            news,
        ))
    }

    /// The identity-stream record raising the trusted-time floor to `t`.
    fn trusted_time_append(
        identity: &IdentityEntry,
        t: UtcMicros,
    ) -> Result<StreamAppend, ConsentStoreError> {
        let revision = identity.revision + 1;
        Ok(StreamAppend::new(
            identity_stream()?,
            ExpectedRevision::Exact(identity.revision),
            vec![NewRecord::new(
                trusted_time_event_id(revision),
                TRUSTED_TIME_KIND,
                Timestamp(t.0),
                trusted_time_payload(t),
            )],
        ))
    }

    /// True when `t` raises the floor (spec/projections.md §8.7: strictly later than the persisted
    /// value).
    fn raises(identity: &IdentityEntry, t: UtcMicros) -> bool {
        identity.trusted_time_high_water.is_none_or(|f| t.0 > f)
    }

    /// "Assert live" (spec/projections.md §8.7) for an operation that writes: an expiry that is due
    /// at the effective time `n` is written (and Expired raised after the commit, as the reference
    /// commits first; when this process's clock `now` has not reached the challenge's expiry, the
    /// sentence names the floor that made it due); a written expiry is Expired. `Ok(false)` is a
    /// lost race.
    fn assert_live(
        &self,
        stored: &StoredChallenge,
        n: UtcMicros,
        now: UtcMicros,
    ) -> Result<bool, ConsentStoreError> {
        if stored.due(n) == Some(Due::Expiry) {
            let append = Self::lifecycle_append(
                stored,
                &[Lifecycle::Expired {
                    cause: ExpiryCause::ChallengeExpired,
                }],
                n,
            )?;
            if !self.commit(vec![append])? {
                return Ok(false);
            }
            return Err(expired_at(
                EXPIRED,
                "install consent challenge",
                stored.challenge.expires_at_micros(),
                n,
                now,
            ));
        }
        if stored.written_state() == ChallengeState::Expired {
            return Err(EXPIRED);
        }
        Ok(true)
    }

    fn nonce_recorded(&self, nonce_digest: &str) -> Result<bool, ConsentStoreError> {
        let key = parse_sha(nonce_digest)
            .ok_or_else(|| invalid("assertion nonce digest must be a lowercase SHA-256 digest"))?;
        self.journal
            .projection_get(CONSENT_NONCES_TABLE, &key, |v| v.is_some())
            .map_err(unavailable)
    }

    /// Nonces of live challenges: recorded minus retired (spec/projections.md §8.9, R4), what
    /// [`CONSENT_NONCES_MAX`] bounds.
    fn nonce_count(&self) -> Result<u64, ConsentStoreError> {
        let read = |key: &[u8]| -> Result<u64, ConsentStoreError> {
            let bytes = self
                .journal
                .projection_get(CONSENT_COUNTS_TABLE, key, |v| v.map(<[u8]>::to_vec))
                .map_err(unavailable)?;
            match bytes {
                None => Ok(0),
                Some(b) => <[u8; 8]>::try_from(b.as_slice())
                    .map(u64::from_le_bytes)
                    .map_err(|_| {
                        corruption(
                            "assertion nonce history count is invalid",
                            "a counter is not 8 bytes",
                        )
                    }),
            }
        };
        Ok(read(COUNT_NONCES_KEY)?.saturating_sub(read(COUNT_NONCES_RETIRED_KEY)?))
    }

    fn recorded_identity(
        identity: Option<IdentityEntry>,
    ) -> Result<IdentityEntry, ConsentStoreError> {
        identity.ok_or_else(|| {
            corruption(
                "consent broker identity record is missing",
                "a challenge without the broker identity",
            )
        })
    }

    /// Refuses a decision this instance did not issue or whose seal does not verify
    /// (spec/projections.md §8.8).
    fn check_bound(&self, decision: &VerifiedHumanDecision) -> Result<(), ConsentStoreError> {
        let sealed = decision.instance == self.instance.id
            && ct_eq(&decision.seal, &decision.seal_with(&self.instance));
        if sealed {
            Ok(())
        } else {
            Err(NOT_PROCESS_BOUND)
        }
    }

    /// Verifies a signed human decision for `challenge_id` (spec/projections.md §8.8), in the
    /// reference's order: Invalid for a malformed id; NotFound for an unknown one; Conflict
    /// "install consent decision is already reserved|settled"; assert live (an expiry is written,
    /// then Expired); Rejected "signed assertion does not bind the exact challenge digest", "signed
    /// assertion audience does not match this broker", "signed assertion is dated in the future:
    /// issued at <issued_at>, more than 60 seconds after this process's clock <now>" (an
    /// `issued_at` more than [`ASSERTION_FUTURE_SKEW_MAX_MICROS`] after `now`, the process clock,
    /// whatever the floor), "signed assertion outlives the exact install challenge"; by state:
    /// `decision-ready` (a re-verification: the same decision identity, "reverified assertion does
    /// not match the decision-ready record"; the decision issued carries the record's nonce and
    /// times),
    /// `reauthentication-required` (a fresh nonce, "reconciliation requires a fresh nonce in the
    /// signed assertion", and the retained identity); Conflict "verified human decision nonce was
    /// already recorded"; then `verify(assertion, signing_bytes)`: `false` is Rejected "signed
    /// human decision signature was not verified", a panic Rejected "signed human decision
    /// verifier rejected the assertion". After the verifier accepts, the effective time at or past
    /// the assertion's `expires_at` is Expired "signed assertion has expired" (the raised floor is
    /// written first), or, when only the floor is past it, "signed assertion expired at <E> by
    /// ctx's trusted time floor <F> (the latest time the journal has seen), not by this process's
    /// clock <now>".
    ///
    /// The floor is raised to the vouched time ([`vouched_time`]), never to the raw `now`. Writes:
    /// for a re-verification, the new nonce (`nonce-recorded`) with the floor raise in one
    /// append. For `pending` and `reauthentication-required` nothing: the nonce and the floor
    /// raise are written by [`ConsentStore::mark_decision_ready`] with the decision, in one
    /// append, so the floor moves with the durable use of the verification.
    pub fn verify_human_decision(
        &self,
        challenge_id: &str,
        assertion: &SignedHumanDecisionAssertion,
        verify: &dyn Fn(&SignedHumanDecisionAssertion, &[u8]) -> bool,
        now: UtcMicros,
    ) -> Result<VerifiedHumanDecision, ConsentStoreError> {
        if !is_token(challenge_id) {
            return Err(invalid("challenge_id must be a bounded canonical token"));
        }
        let mut verified = false;
        self.retrying(|| {
            let (current, identity) = self.clock(now)?;
            let stored = self.stored(challenge_id)?.ok_or(NOT_FOUND_ID)?;
            let written = stored.written_state();
            if matches!(written, ChallengeState::Reserved | ChallengeState::Settled) {
                return Err(decision_already(written));
            }
            if !self.assert_live(&stored, current, now)? {
                return Ok(None);
            }
            let identity = Self::recorded_identity(identity)?;
            let state = stored.state_at(current);
            let c = &stored.challenge;
            if !ct_eq(
                assertion.challenge_digest().as_bytes(),
                c.challenge_digest().as_bytes(),
            ) {
                return Err(rejected(
                    "signed assertion does not bind the exact challenge digest",
                ));
            }
            if assertion.audience() != self.audience {
                return Err(rejected(
                    "signed assertion audience does not match this broker",
                ));
            }
            let (issued_at, expires_at) =
                (assertion.issued_at_micros(), assertion.expires_at_micros());
            // Against this process's clock, not the effective time (spec/projections.md §8.7,
            // C-12): the floor may lie ahead of this clock, and a signed time ahead of the clock
            // raises the floor to itself, so this check is what keeps every raise within the skew
            // of the clock of the process that verifies.
            if issued_at.0 > now.0.saturating_add(ASSERTION_FUTURE_SKEW_MAX_MICROS) {
                return Err(ConsentStoreError::Rejected {
                    message: Cow::Owned(format!(
                        "signed assertion is dated in the future: issued at {}, more than {} \
                         seconds after this process's clock {}",
                        issued_at.render(),
                        ASSERTION_FUTURE_SKEW_MAX_MICROS / 1_000_000,
                        now.render()
                    )),
                });
            }
            if expires_at > c.expires_at_micros() {
                return Err(rejected(
                    "signed assertion outlives the exact install challenge",
                ));
            }
            let submitted = assertion.nonce_digest();
            let same_identity = |d: &DecisionEntry| {
                d.decision == assertion.decision().as_str()
                    && d.principal_digest == assertion.principal_digest()
                    && d.authenticator_id == assertion.authenticator_id()
                    && d.audience == assertion.audience()
            };
            let kept = stored.decision();
            let (nonce, issued, expires) = match (state, kept) {
                (ChallengeState::DecisionReady, Some(d)) => {
                    if !same_identity(d) {
                        return Err(rejected(REVERIFY_MISMATCH));
                    }
                    (
                        d.assertion_nonce_digest.clone(),
                        UtcMicros(d.issued_at),
                        UtcMicros(d.expires_at),
                    )
                }
                (ChallengeState::Pending, None) => (submitted.clone(), issued_at, expires_at),
                (ChallengeState::ReauthenticationRequired, Some(d)) => {
                    if d.assertion_nonce_digest == submitted {
                        return Err(rejected(
                            "reconciliation requires a fresh nonce in the signed assertion",
                        ));
                    }
                    if !same_identity(d) {
                        return Err(rejected(REVERIFY_MISMATCH));
                    }
                    (submitted.clone(), issued_at, expires_at)
                }
                (other, _) => return Err(decision_already(other)),
            };
            if self.nonce_recorded(&submitted)? {
                return Err(NONCE_REPLAY);
            }
            if !verified {
                let bytes = assertion.signing_bytes();
                match catch_unwind(AssertUnwindSafe(|| verify(assertion, &bytes))) {
                    Ok(true) => verified = true,
                    Ok(false) => {
                        return Err(rejected("signed human decision signature was not verified"));
                    }
                    Err(_) => {
                        return Err(rejected(
                            "signed human decision verifier rejected the assertion",
                        ));
                    }
                }
            }
            // The verifier accepted a signature over `issued_at`: the floor rises to this process's
            // clock bounded by that signed time and the skew (spec/projections.md §8.7, C-12), never
            // to the raw clock of whoever runs the verification. The expiry below is unchanged by
            // it: the vouched time is before `expires_at` whenever `now` is.
            let vouched = vouched_time(now, issued_at);
            let raise = Self::raises(&identity, vouched);
            let mut batch = Vec::with_capacity(2);
            if current >= expires_at {
                if raise {
                    batch.push(Self::trusted_time_append(&identity, vouched)?);
                }
                if !self.commit(batch)? {
                    return Ok(None);
                }
                return Err(expired_at(
                    expired("signed assertion has expired"),
                    "signed assertion",
                    expires_at,
                    current,
                    now,
                ));
            }
            if state == ChallengeState::DecisionReady {
                if self.nonce_count()? >= CONSENT_NONCES_MAX {
                    return Err(NONCE_CAPACITY);
                }
                if raise {
                    batch.push(Self::trusted_time_append(&identity, vouched)?);
                }
                batch.push(Self::lifecycle_append(
                    &stored,
                    &[Lifecycle::NonceRecorded {
                        assertion_nonce_digest: submitted.clone(),
                    }],
                    current,
                )?);
                if !self.commit(batch)? {
                    return Ok(None);
                }
            }
            let mut decision = VerifiedHumanDecision {
                challenge_id: c.challenge_id().to_owned(),
                challenge_digest: c.challenge_digest().to_owned(),
                decision: assertion.decision(),
                principal_digest: assertion.principal_digest().to_owned(),
                authenticator_id: assertion.authenticator_id().to_owned(),
                audience: assertion.audience().to_owned(),
                assertion_nonce_digest: nonce,
                issued_at: issued,
                expires_at: expires,
                verified_at: vouched,
                instance: self.instance.id,
                seal: [0; 32],
            };
            decision.seal = decision.seal_with(&self.instance);
            Ok(Some(decision))
        })
    }

    /// Records a verified decision (spec/projections.md §8.8): `pending` or
    /// `reauthentication-required` → `decision-ready`. Rejected "VerifiedHumanDecision is not
    /// process-bound to this broker instance"; Rejected "verified decision challenge is unknown";
    /// Conflict "install consent record is already <state>" (checked before expiry, as the
    /// reference; a `decision-ready` whose decision TTL passed counts as
    /// `reauthentication-required`); assert live; Rejected "verified decision does not bind the
    /// persisted challenge"; Expired "verified human decision has expired" (nothing written; when
    /// only the floor is past it, the sentence names the floor, as in `verify_human_decision`);
    /// Conflict "verified human decision nonce was already recorded"; CapacityExceeded "install
    /// consent assertion nonce history reached its bounded capacity".
    ///
    /// One atomic append: the trusted-time record raising the floor to the verification's vouched
    /// time (identity stream, when it raises it), a due `reauthentication-required` (decision
    /// expired), then `decision-ready` with `decision_recorded_at` = the effective time, which
    /// counts the raised floor.
    pub fn mark_decision_ready(
        &self,
        decision: &VerifiedHumanDecision,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        self.check_bound(decision)?;
        self.retrying(|| {
            let (n, identity) = self.clock(now)?;
            let stored = self
                .stored(&decision.challenge_id)?
                .ok_or(rejected(UNKNOWN_DECISION_CHALLENGE))?;
            let state = match stored.due(n) {
                Some(Due::DecisionExpiry) => ChallengeState::ReauthenticationRequired,
                _ => stored.written_state(),
            };
            if !matches!(
                state,
                ChallengeState::Pending | ChallengeState::ReauthenticationRequired
            ) {
                return Err(record_already(state));
            }
            if !self.assert_live(&stored, n, now)? {
                return Ok(None);
            }
            let identity = Self::recorded_identity(identity)?;
            if !ct_eq(
                decision.challenge_digest.as_bytes(),
                stored.challenge.challenge_digest().as_bytes(),
            ) {
                return Err(rejected(DECISION_NOT_BOUND));
            }
            // The floor rises to the verification's vouched time in this append.
            let n = n.max(decision.verified_at);
            if n >= decision.expires_at {
                return Err(expired_at(
                    expired("verified human decision has expired"),
                    "verified human decision",
                    decision.expires_at,
                    n,
                    now,
                ));
            }
            if state == ChallengeState::ReauthenticationRequired {
                let fresh = stored.decision().is_some_and(|d| {
                    decision.same_identity(d)
                        && d.assertion_nonce_digest != decision.assertion_nonce_digest
                });
                if !fresh {
                    return Err(rejected(REVERIFY_MISMATCH));
                }
            }
            if self.nonce_recorded(&decision.assertion_nonce_digest)? {
                return Err(NONCE_REPLAY);
            }
            if self.nonce_count()? >= CONSENT_NONCES_MAX {
                return Err(NONCE_CAPACITY);
            }
            let mut records = Vec::with_capacity(2);
            if stored.due(n) == Some(Due::DecisionExpiry) {
                records.push(Lifecycle::ReauthenticationRequired {
                    cause: ReauthenticationCause::DecisionExpired,
                });
            }
            records.push(Lifecycle::DecisionReady {
                decision: decision.decision.as_str().to_owned(),
                principal_digest: decision.principal_digest.clone(),
                authenticator_id: decision.authenticator_id.clone(),
                audience: decision.audience.clone(),
                assertion_nonce_digest: decision.assertion_nonce_digest.clone(),
                issued_at: decision.issued_at,
                expires_at: decision.expires_at,
            });
            let mut batch = Vec::with_capacity(2);
            if Self::raises(&identity, decision.verified_at) {
                batch.push(Self::trusted_time_append(&identity, decision.verified_at)?);
            }
            batch.push(Self::lifecycle_append(&stored, &records, n)?);
            if !self.commit(batch)? {
                return Ok(None);
            }
            self.view(&decision.challenge_id, n).map(Some)
        })
    }

    /// Enters the interactive guard (spec/projections.md §8.8): `decision-ready` → `reserved`
    /// for the engine event of `reservation`. Rejected "VerifiedHumanDecision is not process-bound
    /// to this broker instance"; Invalid for a malformed reservation; Rejected "verified decision
    /// challenge is unknown" / "verified decision does not bind the persisted challenge"; Conflict
    /// "install consent decision is already <state>" for any state but `decision-ready`; Rejected
    /// "process-bound decision does not match the decision-ready record" (the seven claims);
    /// Rejected "interactive reservation does not match the exact install challenge"; assert live.
    ///
    /// Unlike the reference (its "reserve quirk", spec/projections.md §8.10), a decision whose own
    /// TTL has passed is not reserved: its `reauthentication-required` is written and Expired
    /// "install consent challenge or decision has expired" raised.
    pub fn reserve(
        &self,
        decision: &VerifiedHumanDecision,
        reservation: &Reservation,
        now: UtcMicros,
    ) -> Result<ReservationToken, ConsentStoreError> {
        self.check_bound(decision)?;
        reservation.validate()?;
        self.retrying(|| {
            let n = self.effective_now(now)?;
            let stored = self
                .stored(&decision.challenge_id)?
                .ok_or(rejected(UNKNOWN_DECISION_CHALLENGE))?;
            let c = &stored.challenge;
            if !ct_eq(
                decision.challenge_digest.as_bytes(),
                c.challenge_digest().as_bytes(),
            ) {
                return Err(rejected(DECISION_NOT_BOUND));
            }
            let written = stored.written_state();
            if written != ChallengeState::DecisionReady {
                return Err(decision_already(written));
            }
            if !stored
                .decision()
                .is_some_and(|d| decision.matches_record(d))
            {
                return Err(rejected(
                    "process-bound decision does not match the decision-ready record",
                ));
            }
            if !reservation.matches(c, Some(decision.decision.as_str())) {
                return Err(rejected(
                    "interactive reservation does not match the exact install challenge",
                ));
            }
            if !self.assert_live(&stored, n, now)? {
                return Ok(None);
            }
            if stored.due(n) == Some(Due::DecisionExpiry) {
                let append = Self::lifecycle_append(
                    &stored,
                    &[Lifecycle::ReauthenticationRequired {
                        cause: ReauthenticationCause::DecisionExpired,
                    }],
                    n,
                )?;
                if !self.commit(vec![append])? {
                    return Ok(None);
                }
                return Err(expired_at(
                    EXPIRED,
                    "install consent decision",
                    decision.expires_at,
                    n,
                    now,
                ));
            }
            let token = self.instance.token();
            let append = Self::lifecycle_append(
                &stored,
                &[Lifecycle::Reserved {
                    event_id: reservation.event_id.clone(),
                    event_content_digest: reservation.event_content_digest.clone(),
                    token_digest: ctx_model::hex(&sha256(&token)),
                }],
                n,
            )?;
            if !self.commit(vec![append])? {
                return Ok(None);
            }
            Ok(Some(ReservationToken {
                instance: self.instance.id,
                challenge_id: c.challenge_id().to_owned(),
                challenge_digest: c.challenge_digest().to_owned(),
                event_id: reservation.event_id.clone(),
                event_content_digest: reservation.event_content_digest.clone(),
                token,
            }))
        })
    }

    /// The held-reservation checks of settle and release (spec/projections.md §8.8).
    fn held(&self, token: &ReservationToken) -> Result<StoredChallenge, ConsentStoreError> {
        if token.instance != self.instance.id {
            return Err(rejected(OWNERSHIP_CHANGED));
        }
        let stored = self
            .stored(&token.challenge_id)?
            .ok_or(rejected(UNKNOWN_DECISION_CHALLENGE))?;
        if stored.challenge.challenge_digest() != token.challenge_digest {
            return Err(rejected(DECISION_NOT_BOUND));
        }
        if stored.written_state() != ChallengeState::Reserved {
            return Err(NO_LONGER_RESERVED);
        }
        let owned = stored
            .entry
            .lifecycle
            .reservation
            .as_ref()
            .is_some_and(|r| {
                r.event_id == token.event_id
                    && r.event_content_digest == token.event_content_digest
                    && r.token_digest
                        .is_some_and(|d| ct_eq(&d, &token.token_digest()))
            });
        if !owned {
            return Err(rejected(OWNERSHIP_CHANGED));
        }
        Ok(stored)
    }

    fn settle_record(token: &ReservationToken) -> Lifecycle {
        Lifecycle::Settled {
            event_id: token.event_id.clone(),
            event_content_digest: token.event_content_digest.clone(),
            basis: SettleBasis::Guard {
                token_digest: ctx_model::hex(&token.token_digest()),
            },
        }
    }

    /// The guard's clean exit (spec/projections.md §8.8): `reserved` → `settled`, after the engine
    /// committed its decision event. Conflict "interactive decision is no longer reserved";
    /// Rejected "interactive reservation ownership changed".
    pub fn settle(
        &self,
        token: ReservationToken,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        self.retrying(|| {
            let append = self.settle_append(&token, now)?;
            if !self.commit(vec![append])? {
                return Ok(None);
            }
            self.inspect_record(&token.challenge_id).map(Some)
        })
    }

    /// The settlement as a journal append (`Exact(head)` on the challenge stream), checked as
    /// [`ConsentStore::settle`] checks it, without appending: for a service that commits it in
    /// the same atomic append as the engine's decision event, so the event commits if and only if
    /// the reservation settles (no "guard settlement failed" window, spec/service.md §10). The
    /// event id is deterministic, so a retry of the same batch is replayed by the journal. Settle
    /// the result with [`ConsentStore::settle_outcome`]; after a failed batch the reservation is
    /// still held and should be released.
    pub fn settle_append(
        &self,
        token: &ReservationToken,
        now: UtcMicros,
    ) -> Result<StreamAppend, ConsentStoreError> {
        let n = self.effective_now(now)?;
        let stored = self.held(token)?;
        Self::lifecycle_append(&stored, &[Self::settle_record(token)], n)
    }

    /// The status after a batch holding `append` (from [`ConsentStore::settle_append`]) was
    /// committed or refused: the settled record on success, or when the same settlement is
    /// already stored; otherwise the typed refusal.
    pub fn settle_outcome(
        &self,
        token: &ReservationToken,
        append: &StreamAppend,
        result: Result<(), AppendError>,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        let ours = challenge_stream(&token.challenge_id)? == append.stream
            && matches!(append.records.as_slice(), [r] if r.kind == crate::streams::SETTLED_KIND
                && r.payload == Self::settle_record(token).to_payload(&token.challenge_digest));
        if !ours {
            return Err(invalid("the append is not this reservation's settlement"));
        }
        match result {
            Ok(()) => self.inspect_record(&token.challenge_id),
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                let record = self.inspect_record(&token.challenge_id)?;
                let same = record.state() == ChallengeState::Settled
                    && record.reservation_event_id() == Some(token.event_id.as_str())
                    && record.reservation_event_content_digest()
                        == Some(token.event_content_digest.as_str());
                if same {
                    Ok(record)
                } else if record.state() == ChallengeState::Reserved {
                    Err(rejected(OWNERSHIP_CHANGED))
                } else {
                    Err(NO_LONGER_RESERVED)
                }
            }
            Err(e) => Err(append_error(e)),
        }
    }

    /// The guard's failure exit (spec/projections.md §8.8): `reserved` → `decision-ready`, the
    /// reservation cleared. Conflict "interactive decision is no longer reserved"; Rejected
    /// "interactive reservation ownership changed".
    pub fn release(
        &self,
        token: ReservationToken,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ConsentStoreError> {
        self.retrying(|| {
            let n = self.effective_now(now)?;
            let stored = self.held(&token)?;
            let append = Self::lifecycle_append(
                &stored,
                &[Lifecycle::Released {
                    event_id: token.event_id.clone(),
                    event_content_digest: token.event_content_digest.clone(),
                    token_digest: ctx_model::hex(&token.token_digest()),
                }],
                n,
            )?;
            if !self.commit(vec![append])? {
                return Ok(None);
            }
            self.view(&token.challenge_id, n).map(Some)
        })
    }

    /// Crash recovery against the engine journal (spec/projections.md §8.8). `reservation` is the
    /// engine's interactive decision (the reference's query and reservation, which carry the same
    /// fields), `evidence` what the service read from the journal for it (committed evidence
    /// already revalidated by its provider). The exact check first (Rejected "journal evidence
    /// does not match the exact broker decision and reservation", which also refuses a challenge
    /// without a decision), then:
    ///
    /// - `Committed`: its event must be the reservation's (same Rejected); `pending` is Rejected
    ///   "committed decision cannot settle unauthenticated install consent"; a `reserved` or
    ///   `settled` record must hold this reservation ("journal evidence does not match the
    ///   persisted broker reservation"); otherwise settled (idempotent for a settled record),
    ///   with the evidence's head recorded.
    /// - `AbsentAtExpectedHead`: `settled` is Rejected "absence cannot reopen a settled install
    ///   decision", `pending` "absence cannot reconcile unauthenticated install consent", a
    ///   `reserved` record must hold this reservation; then `expired` if the challenge has expired
    ///   (a written expiry stays), else `reauthentication-required`.
    /// - anything else: `quarantined`, nothing written.
    pub fn reconcile_install_decision(
        &self,
        reservation: &Reservation,
        evidence: &DecisionEvidence,
        now: UtcMicros,
    ) -> Result<ReconciliationReport, ConsentStoreError> {
        reservation.validate()?;
        if !is_token(&reservation.consent_id) {
            return Err(invalid("challenge_id must be a bounded canonical token"));
        }
        if let DecisionEvidence::Committed {
            head_revision,
            head_record_digest,
            ..
        } = evidence
            && (*head_revision == 0 || !is_sha(head_record_digest))
        {
            return Err(invalid("committed install decision evidence is malformed"));
        }
        let journal_status = evidence.status();
        self.retrying(|| {
            let n = self.effective_now(now)?;
            let stored = self.stored(&reservation.consent_id)?.ok_or(NOT_FOUND_ID)?;
            let state = stored.state_at(n);
            let decision = stored.decision().map(|d| d.decision.as_str());
            if !reservation.matches(&stored.challenge, decision) {
                return Err(rejected(EVIDENCE_MISMATCH));
            }
            let holds = stored
                .entry
                .lifecycle
                .reservation
                .as_ref()
                .is_some_and(|r| {
                    r.event_id == reservation.event_id
                        && r.event_content_digest == reservation.event_content_digest
                });
            let report = |outcome, record| ReconciliationReport {
                outcome,
                journal_status,
                record,
            };
            let (outcome, records) = match evidence {
                DecisionEvidence::Committed {
                    event_id,
                    event_content_digest,
                    head_revision,
                    head_record_digest,
                } => {
                    if *event_id != reservation.event_id
                        || *event_content_digest != reservation.event_content_digest
                    {
                        return Err(rejected(EVIDENCE_MISMATCH));
                    }
                    match state {
                        ChallengeState::Pending => {
                            return Err(rejected(
                                "committed decision cannot settle unauthenticated install consent",
                            ));
                        }
                        ChallengeState::Reserved | ChallengeState::Settled if !holds => {
                            return Err(rejected(RESERVATION_MISMATCH));
                        }
                        ChallengeState::Settled => {
                            return Ok(Some(report(ReconciliationOutcome::Settled, stored.at(n))));
                        }
                        _ => {}
                    }
                    (
                        ReconciliationOutcome::Settled,
                        vec![Lifecycle::Settled {
                            event_id: reservation.event_id.clone(),
                            event_content_digest: reservation.event_content_digest.clone(),
                            basis: SettleBasis::CommittedEvidence {
                                head_revision: *head_revision,
                                head_record_digest: head_record_digest.clone(),
                            },
                        }],
                    )
                }
                DecisionEvidence::AbsentAtExpectedHead => {
                    match state {
                        ChallengeState::Settled => {
                            return Err(rejected(
                                "absence cannot reopen a settled install decision",
                            ));
                        }
                        ChallengeState::Pending => {
                            return Err(rejected(
                                "absence cannot reconcile unauthenticated install consent",
                            ));
                        }
                        ChallengeState::Reserved if !holds => {
                            return Err(rejected(RESERVATION_MISMATCH));
                        }
                        _ => {}
                    }
                    let written = stored.written_state();
                    if n >= stored.challenge.expires_at_micros() {
                        let records = if written == ChallengeState::Expired {
                            Vec::new()
                        } else {
                            vec![Lifecycle::Expired {
                                cause: ExpiryCause::AbsentAtExpectedHead,
                            }]
                        };
                        (ReconciliationOutcome::Expired, records)
                    } else if written == ChallengeState::Expired {
                        // Sticky: a written expiry is not revived (see the module docs).
                        (ReconciliationOutcome::Expired, Vec::new())
                    } else {
                        let records = if written == ChallengeState::ReauthenticationRequired {
                            Vec::new()
                        } else {
                            vec![Lifecycle::ReauthenticationRequired {
                                cause: ReauthenticationCause::AbsentAtExpectedHead,
                            }]
                        };
                        (ReconciliationOutcome::ReauthenticationRequired, records)
                    }
                }
                _ => {
                    return Ok(Some(report(
                        ReconciliationOutcome::Quarantined,
                        stored.at(n),
                    )));
                }
            };
            if !records.is_empty() {
                let append = Self::lifecycle_append(&stored, &records, n)?;
                if !self.commit(vec![append])? {
                    return Ok(None);
                }
            }
            Ok(Some(report(
                outcome,
                self.view(&reservation.consent_id, n)?,
            )))
        })
    }

    /// A sweep over every challenge (spec/projections.md §8.8), each transition its own append:
    /// `reserved` is counted and left alone (only reconciliation reopens it); `settled` and a
    /// written `expired` are final here (no revival); a due expiry is written; a decision whose
    /// TTL passed is written `reauthentication-required`.
    pub fn recover(&self, now: UtcMicros) -> Result<RecoveryReport, ConsentStoreError> {
        let mut ids: Vec<String> = Vec::new();
        let mut bad = false;
        self.journal
            .projection_scan(CONSENT_CHALLENGES_TABLE, |key, _| {
                match std::str::from_utf8(key) {
                    Ok(id) => ids.push(id.to_owned()),
                    Err(_) => bad = true,
                }
                std::ops::ControlFlow::Continue(())
            })
            .map_err(unavailable)?;
        if bad {
            return Err(corruption(
                "consent broker index is unreadable",
                "a challenge key is not UTF-8",
            ));
        }
        let mut report = RecoveryReport::default();
        for id in ids {
            self.retrying(|| {
                let n = self.effective_now(now)?;
                let stored = self.stored(&id)?.ok_or(NOT_FOUND_ID)?;
                if stored.written_state() == ChallengeState::Reserved {
                    report.retained_reserved += 1;
                    return Ok(Some(()));
                }
                let record = match stored.due(n) {
                    None => return Ok(Some(())),
                    Some(Due::Expiry) => Lifecycle::Expired {
                        cause: ExpiryCause::ChallengeExpired,
                    },
                    Some(Due::DecisionExpiry) => Lifecycle::ReauthenticationRequired {
                        cause: ReauthenticationCause::DecisionExpired,
                    },
                };
                let expiry = matches!(record, Lifecycle::Expired { .. });
                let append = Self::lifecycle_append(&stored, &[record], n)?;
                if !self.commit(vec![append])? {
                    return Ok(None);
                }
                if expiry {
                    report.expired += 1;
                } else {
                    report.reauthentication_required += 1;
                }
                Ok(Some(()))
            })?;
        }
        Ok(report)
    }

    /// The written status of a challenge, with no time transition (spec/projections.md §8.8):
    /// Invalid "challenge_id must be a bounded canonical token", NotFound "install consent
    /// challenge ID was not found".
    pub fn inspect_record(&self, challenge_id: &str) -> Result<ChallengeRecord, ConsentStoreError> {
        if !is_token(challenge_id) {
            return Err(invalid("challenge_id must be a bounded canonical token"));
        }
        Ok(self.stored(challenge_id)?.ok_or(NOT_FOUND_ID)?.written())
    }
}
