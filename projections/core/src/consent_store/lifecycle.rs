//! The lifecycle records of a challenge (spec/projections.md §8.1, §8.8, §8.5) and
//! the pure fold that turns a challenge stream into its index entry. Specified in
//! `spec/projections.md`, section "consent.store".
//!
//! Every state change is one record appended to the challenge's own stream at the next revision
//! (`ExpectedRevision::Exact(head)`); its `occurred_at` is the effective time of the change. The
//! same [`fold`] runs inside the append (the projection refuses an illegal transition there) and on
//! every read (the store re-folds the authenticated stream and compares the result with the index
//! entry), so the index can never say more than the journal.

use ctx_model::{Json, JsonMap, UtcMicros, cja_digest, is_sha, is_token, parse_sha};
use sha2::{Digest as _, Sha256};

use crate::streams::{
    DECISION_READY_KIND, EXPIRED_KIND, NONCE_RECORDED_KIND, REAUTHENTICATION_REQUIRED_KIND,
    RELEASED_KIND, RESERVED_KIND, SETTLED_KIND,
};

use super::{ChallengeEntry, ChallengeState, DecisionEntry, ReservationEntry, codes, in_range};

/// Every lifecycle kind of a challenge stream (revision ≥ 2).
pub const LIFECYCLE_KINDS: [&str; 7] = [
    DECISION_READY_KIND,
    NONCE_RECORDED_KIND,
    RESERVED_KIND,
    RELEASED_KIND,
    SETTLED_KIND,
    REAUTHENTICATION_REQUIRED_KIND,
    EXPIRED_KIND,
];

pub const DECISION_READY_SCHEMA: &str = "ctx.install-consent-decision-ready-v1";
pub const NONCE_RECORDED_SCHEMA: &str = "ctx.install-consent-nonce-recorded-v1";
pub const RESERVED_SCHEMA: &str = "ctx.install-consent-reserved-v1";
pub const RELEASED_SCHEMA: &str = "ctx.install-consent-released-v1";
pub const SETTLED_SCHEMA: &str = "ctx.install-consent-settled-v1";
pub const REAUTHENTICATION_REQUIRED_SCHEMA: &str =
    "ctx.install-consent-reauthentication-required-v1";
pub const EXPIRED_SCHEMA: &str = "ctx.install-consent-expired-v1";
pub const TRUSTED_TIME_SCHEMA: &str = "ctx.install-consent-broker-trusted-time-v1";
/// Schema of one nonce history record digest (spec/projections.md §8.1, §8.8).
pub const NONCE_RECORD_SCHEMA: &str = "ctx.install-consent-assertion-nonce-v1";
/// Schema of the nonce history genesis digest (spec/projections.md §8.1, §8.8).
pub const NONCE_HISTORY_SCHEMA: &str = "ctx.install-consent-assertion-nonce-history-v1";

/// Prefix of a lifecycle record's event id: `ctx-consent-r<revision>:<challenge digest>`.
pub const LIFECYCLE_EVENT_PREFIX: &str = "ctx-consent-r";
/// Prefix of a trusted-time record's event id: `ctx-consent-broker-trusted-time:<revision>`.
pub const TRUSTED_TIME_EVENT_PREFIX: &str = "ctx-consent-broker-trusted-time:";

/// Most records one challenge stream holds (the challenge and its lifecycle): reads re-fold the
/// whole stream, so it is bounded. Reached only by hundreds of reserve/release cycles.
pub const CHALLENGE_STREAM_RECORDS_MAX: u64 = 256;
/// The reference's nonce history factor: at most capacity × 8 nonces in the store
/// (spec/projections.md §8.9).
pub const NONCE_HISTORY_FACTOR: u64 = 8;

/// The event id of the lifecycle record at `revision` of the challenge with `challenge_digest`.
pub fn lifecycle_event_id(revision: u64, challenge_digest: &str) -> String {
    format!("{LIFECYCLE_EVENT_PREFIX}{revision}:{challenge_digest}")
}

/// The event id of the trusted-time record at `revision` of the identity stream.
pub fn trusted_time_event_id(revision: u64) -> String {
    format!("{TRUSTED_TIME_EVENT_PREFIX}{revision}")
}

/// Genesis of a challenge's nonce history chain: `H(CJA({challenge_id, schema}))`
/// (spec/projections.md §8.1, §8.8).
pub fn nonce_history_genesis(challenge_id: &str) -> [u8; 32] {
    digest_of(&Json::object([
        ("challenge_id", Json::str(challenge_id)),
        ("schema", Json::str(NONCE_HISTORY_SCHEMA)),
    ]))
}

/// One nonce history record digest (spec/projections.md §8.1, §8.8): `H(CJA({challenge_id,
/// nonce_digest, previous_record_digest, recorded_at, schema, sequence}))`.
pub fn nonce_record_digest(
    challenge_id: &str,
    nonce_digest: &str,
    previous: &[u8; 32],
    recorded_at: UtcMicros,
    sequence: u64,
) -> [u8; 32] {
    digest_of(&Json::object([
        ("challenge_id", Json::str(challenge_id)),
        ("nonce_digest", Json::str(nonce_digest)),
        (
            "previous_record_digest",
            Json::str(ctx_model::hex(previous)),
        ),
        ("recorded_at", Json::str(recorded_at.render())),
        ("schema", Json::str(NONCE_RECORD_SCHEMA)),
        (
            "sequence",
            Json::Int(i64::try_from(sequence).unwrap_or(i64::MAX)),
        ),
    ]))
}

fn digest_of(value: &Json) -> [u8; 32] {
    parse_sha(&cja_digest(value)).unwrap_or([0; 32])
}

// ------------------------------------------------------------------------------------------------
// Payloads
// ------------------------------------------------------------------------------------------------

/// Why a record was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleBasis {
    /// The guard's clean exit: the holder of the reservation token settles it.
    Guard { token_digest: String },
    /// Reconciliation with committed journal evidence (spec/projections.md §8.8): the engine's
    /// journal holds the decision event at this head.
    CommittedEvidence {
        head_revision: u64,
        head_record_digest: String,
    },
}

/// Why a decision must be re-authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReauthenticationCause {
    /// The decision's own TTL passed while the challenge is live (spec/projections.md §8.7).
    DecisionExpired,
    /// Reconciliation found the decision event absent at the expected head
    /// (spec/projections.md §8.8).
    AbsentAtExpectedHead,
}

/// Why a challenge expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryCause {
    /// An operation that writes observed the challenge past its `expires_at`
    /// (spec/projections.md §8.7).
    ChallengeExpired,
    /// Reconciliation found the decision event absent after the challenge expired
    /// (spec/projections.md §8.8).
    AbsentAtExpectedHead,
}

impl ReauthenticationCause {
    fn as_str(self) -> &'static str {
        match self {
            ReauthenticationCause::DecisionExpired => "decision-expired",
            ReauthenticationCause::AbsentAtExpectedHead => "absent-at-expected-head",
        }
    }
}

impl ExpiryCause {
    fn as_str(self) -> &'static str {
        match self {
            ExpiryCause::ChallengeExpired => "challenge-expired",
            ExpiryCause::AbsentAtExpectedHead => "absent-at-expected-head",
        }
    }
}

/// The decoded payload of a lifecycle record (the challenge digest is checked apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    DecisionReady {
        decision: String,
        principal_digest: String,
        authenticator_id: String,
        audience: String,
        assertion_nonce_digest: String,
        issued_at: UtcMicros,
        expires_at: UtcMicros,
    },
    NonceRecorded {
        assertion_nonce_digest: String,
    },
    Reserved {
        event_id: String,
        event_content_digest: String,
        token_digest: String,
    },
    Released {
        event_id: String,
        event_content_digest: String,
        token_digest: String,
    },
    Settled {
        event_id: String,
        event_content_digest: String,
        basis: SettleBasis,
    },
    ReauthenticationRequired {
        cause: ReauthenticationCause,
    },
    Expired {
        cause: ExpiryCause,
    },
}

impl Lifecycle {
    pub fn kind(&self) -> &'static str {
        match self {
            Lifecycle::DecisionReady { .. } => DECISION_READY_KIND,
            Lifecycle::NonceRecorded { .. } => NONCE_RECORDED_KIND,
            Lifecycle::Reserved { .. } => RESERVED_KIND,
            Lifecycle::Released { .. } => RELEASED_KIND,
            Lifecycle::Settled { .. } => SETTLED_KIND,
            Lifecycle::ReauthenticationRequired { .. } => REAUTHENTICATION_REQUIRED_KIND,
            Lifecycle::Expired { .. } => EXPIRED_KIND,
        }
    }

    /// The canonical ASCII JSON payload, bound to `challenge_digest`.
    pub fn to_payload(&self, challenge_digest: &str) -> Vec<u8> {
        let d = ("challenge_digest", Json::str(challenge_digest));
        let value = match self {
            Lifecycle::DecisionReady {
                decision,
                principal_digest,
                authenticator_id,
                audience,
                assertion_nonce_digest,
                issued_at,
                expires_at,
            } => Json::object([
                ("assertion_nonce_digest", Json::str(assertion_nonce_digest)),
                ("audience", Json::str(audience)),
                ("authenticator_id", Json::str(authenticator_id)),
                d,
                ("decision", Json::str(decision)),
                ("decision_expires_at", Json::str(expires_at.render())),
                ("decision_issued_at", Json::str(issued_at.render())),
                ("principal_digest", Json::str(principal_digest)),
                ("schema", Json::str(DECISION_READY_SCHEMA)),
            ]),
            Lifecycle::NonceRecorded {
                assertion_nonce_digest,
            } => Json::object([
                ("assertion_nonce_digest", Json::str(assertion_nonce_digest)),
                d,
                ("schema", Json::str(NONCE_RECORDED_SCHEMA)),
            ]),
            Lifecycle::Reserved {
                event_id,
                event_content_digest,
                token_digest,
            }
            | Lifecycle::Released {
                event_id,
                event_content_digest,
                token_digest,
            } => Json::object([
                d,
                (
                    "reservation_event_content_digest",
                    Json::str(event_content_digest),
                ),
                ("reservation_event_id", Json::str(event_id)),
                ("reservation_token_digest", Json::str(token_digest)),
                (
                    "schema",
                    Json::str(if matches!(self, Lifecycle::Reserved { .. }) {
                        RESERVED_SCHEMA
                    } else {
                        RELEASED_SCHEMA
                    }),
                ),
            ]),
            Lifecycle::Settled {
                event_id,
                event_content_digest,
                basis,
            } => {
                let (name, token, revision, head) = match basis {
                    SettleBasis::Guard { token_digest } => {
                        ("guard", Json::str(token_digest), Json::Null, Json::Null)
                    }
                    SettleBasis::CommittedEvidence {
                        head_revision,
                        head_record_digest,
                    } => (
                        "committed-evidence",
                        Json::Null,
                        Json::Int(i64::try_from(*head_revision).unwrap_or(i64::MAX)),
                        Json::str(head_record_digest),
                    ),
                };
                Json::object([
                    ("basis", Json::str(name)),
                    d,
                    ("journal_head_record_digest", head),
                    ("journal_head_revision", revision),
                    (
                        "reservation_event_content_digest",
                        Json::str(event_content_digest),
                    ),
                    ("reservation_event_id", Json::str(event_id)),
                    ("reservation_token_digest", token),
                    ("schema", Json::str(SETTLED_SCHEMA)),
                ])
            }
            Lifecycle::ReauthenticationRequired { cause } => Json::object([
                ("cause", Json::str(cause.as_str())),
                d,
                ("schema", Json::str(REAUTHENTICATION_REQUIRED_SCHEMA)),
            ]),
            Lifecycle::Expired { cause } => Json::object([
                ("cause", Json::str(cause.as_str())),
                d,
                ("schema", Json::str(EXPIRED_SCHEMA)),
            ]),
        };
        value.to_cja().into_bytes()
    }

    /// Decodes a lifecycle payload of `kind`: canonical ASCII JSON of exactly the kind's keys,
    /// every field valid. Returns the record and the challenge digest it names.
    pub fn decode(kind: &str, payload: &[u8]) -> Result<(Lifecycle, String), &'static str> {
        const BAD: &str = "persisted consent lifecycle fields are invalid";
        let text = std::str::from_utf8(payload).map_err(|_| BAD)?;
        let value = Json::parse(text).map_err(|_| BAD)?;
        let m: &JsonMap = value.as_obj().ok_or(BAD)?;
        let s = |k: &str| m.get(k).and_then(Json::as_str).ok_or(BAD);
        let sha = |k: &str| {
            s(k).and_then(|v| {
                if is_sha(v) {
                    Ok(v.to_owned())
                } else {
                    Err(BAD)
                }
            })
        };
        let token = |k: &str| {
            s(k).and_then(|v| {
                if is_token(v) {
                    Ok(v.to_owned())
                } else {
                    Err(BAD)
                }
            })
        };
        let time = |k: &str| {
            s(k).and_then(|v| {
                UtcMicros::parse(v)
                    .ok()
                    .filter(|t| t.render() == v)
                    .ok_or(BAD)
            })
        };
        let challenge_digest = sha("challenge_digest")?;
        let (record, schema) = match kind {
            DECISION_READY_KIND => {
                let decision = s("decision")?;
                if !matches!(decision, "granted" | "denied") {
                    return Err("persisted decision is invalid");
                }
                (
                    Lifecycle::DecisionReady {
                        decision: decision.to_owned(),
                        principal_digest: sha("principal_digest")?,
                        authenticator_id: token("authenticator_id")?,
                        audience: token("audience")?,
                        assertion_nonce_digest: sha("assertion_nonce_digest")?,
                        issued_at: time("decision_issued_at")?,
                        expires_at: time("decision_expires_at")?,
                    },
                    DECISION_READY_SCHEMA,
                )
            }
            NONCE_RECORDED_KIND => (
                Lifecycle::NonceRecorded {
                    assertion_nonce_digest: sha("assertion_nonce_digest")?,
                },
                NONCE_RECORDED_SCHEMA,
            ),
            RESERVED_KIND | RELEASED_KIND => {
                let event_id = token("reservation_event_id")?;
                let event_content_digest = sha("reservation_event_content_digest")?;
                let token_digest = sha("reservation_token_digest")?;
                if kind == RESERVED_KIND {
                    (
                        Lifecycle::Reserved {
                            event_id,
                            event_content_digest,
                            token_digest,
                        },
                        RESERVED_SCHEMA,
                    )
                } else {
                    (
                        Lifecycle::Released {
                            event_id,
                            event_content_digest,
                            token_digest,
                        },
                        RELEASED_SCHEMA,
                    )
                }
            }
            SETTLED_KIND => {
                let basis = match s("basis")? {
                    "guard" => SettleBasis::Guard {
                        token_digest: sha("reservation_token_digest")?,
                    },
                    "committed-evidence" => SettleBasis::CommittedEvidence {
                        head_revision: m
                            .get("journal_head_revision")
                            .and_then(Json::as_i64)
                            .and_then(|r| u64::try_from(r).ok())
                            .filter(|r| *r >= 1)
                            .ok_or(BAD)?,
                        head_record_digest: sha("journal_head_record_digest")?,
                    },
                    _ => return Err(BAD),
                };
                (
                    Lifecycle::Settled {
                        event_id: token("reservation_event_id")?,
                        event_content_digest: sha("reservation_event_content_digest")?,
                        basis,
                    },
                    SETTLED_SCHEMA,
                )
            }
            REAUTHENTICATION_REQUIRED_KIND => {
                let cause = match s("cause")? {
                    "decision-expired" => ReauthenticationCause::DecisionExpired,
                    "absent-at-expected-head" => ReauthenticationCause::AbsentAtExpectedHead,
                    _ => return Err(BAD),
                };
                (
                    Lifecycle::ReauthenticationRequired { cause },
                    REAUTHENTICATION_REQUIRED_SCHEMA,
                )
            }
            EXPIRED_KIND => {
                let cause = match s("cause")? {
                    "challenge-expired" => ExpiryCause::ChallengeExpired,
                    "absent-at-expected-head" => ExpiryCause::AbsentAtExpectedHead,
                    _ => return Err(BAD),
                };
                (Lifecycle::Expired { cause }, EXPIRED_SCHEMA)
            }
            _ => return Err(BAD),
        };
        if s("schema")? != schema {
            return Err(BAD);
        }
        // The exact key set and canonical bytes: re-encoding must reproduce the payload.
        if record.to_payload(&challenge_digest) != payload {
            return Err(BAD);
        }
        Ok((record, challenge_digest))
    }
}

/// The payload of a trusted-time record: `{"schema", "trusted_time_high_water"}`.
pub fn trusted_time_payload(high_water: UtcMicros) -> Vec<u8> {
    Json::object([
        ("schema", Json::str(TRUSTED_TIME_SCHEMA)),
        ("trusted_time_high_water", Json::str(high_water.render())),
    ])
    .to_cja()
    .into_bytes()
}

/// Decodes a trusted-time payload (canonical bytes only).
pub fn decode_trusted_time(payload: &[u8]) -> Result<UtcMicros, &'static str> {
    const BAD: &str = "consent broker trusted-time high-water is invalid";
    let text = std::str::from_utf8(payload).map_err(|_| BAD)?;
    let value = Json::parse(text).map_err(|_| BAD)?;
    let t = value
        .get("trusted_time_high_water")
        .and_then(Json::as_str)
        .and_then(|v| UtcMicros::parse(v).ok())
        .ok_or(BAD)?;
    if trusted_time_payload(t) != payload {
        return Err(BAD);
    }
    Ok(t)
}

// ------------------------------------------------------------------------------------------------
// The fold
// ------------------------------------------------------------------------------------------------

/// A lifecycle record as the fold sees it (from a hook's view or a read record).
#[derive(Debug, Clone, Copy)]
pub struct LifecycleRecord<'a> {
    pub kind: &'a str,
    pub revision: u64,
    pub position: u64,
    pub digest: [u8; 32],
    pub event_id: &'a str,
    pub occurred_at: i64,
    pub payload: &'a [u8],
}

/// Why the fold refused a record: the projection's refusal code and an operator message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

fn refusal(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

fn invalid_record(message: impl Into<String>) -> Refusal {
    refusal(codes::CONSENT_RECORD_INVALID, message)
}

fn transition(from: ChallengeState, kind: &str, why: &str) -> Refusal {
    refusal(
        codes::CONSENT_TRANSITION,
        format!("{kind} cannot follow a {from} consent record: {why}"),
    )
}

/// A nonce appended to a challenge's history by a record: what the projection indexes globally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceStep {
    pub nonce_digest: [u8; 32],
    pub sequence: u64,
    pub record_digest: [u8; 32],
}

/// Folds one lifecycle record into `entry` (the challenge's entry before it): checks the record's
/// placement (next revision, its event id, its challenge digest, a valid instant), decodes it and
/// applies the transition table, refusing anything illegal. `audience` is the broker's. Returns
/// the new entry and the nonce the record appends to the history, if any. Global rules (a nonce
/// recorded for another challenge, the nonce capacity) are the projection's, not the fold's.
pub fn fold(
    entry: &ChallengeEntry,
    challenge_digest_hex: &str,
    audience: &str,
    record: &LifecycleRecord<'_>,
) -> Result<(ChallengeEntry, Option<NonceStep>), Refusal> {
    let (lifecycle, named) = Lifecycle::decode(record.kind, record.payload)
        .map_err(|m| invalid_record(format!("lifecycle record {}: {m}", record.event_id)))?;
    let l = &entry.lifecycle;
    if record.revision != l.revision + 1
        || named != challenge_digest_hex
        || record.event_id != lifecycle_event_id(record.revision, challenge_digest_hex)
    {
        return Err(invalid_record(format!(
            "lifecycle record {} is not the next record of its challenge stream",
            record.event_id
        )));
    }
    if record.revision > CHALLENGE_STREAM_RECORDS_MAX {
        return Err(refusal(
            codes::CONSENT_LIFECYCLE_CAPACITY,
            "install consent record reached its bounded lifecycle length",
        ));
    }
    let n = UtcMicros(record.occurred_at);
    if !in_range(n) {
        return Err(invalid_record(format!(
            "lifecycle record {}: its time is not a canonical UTC instant",
            record.event_id
        )));
    }
    let from = ChallengeState::from_code(l.state)
        .ok_or_else(|| invalid_record("the folded consent state is invalid".to_owned()))?;
    let challenge_live = n.0 < entry.expires_at;
    let decision_live = l.decision.as_ref().is_some_and(|d| n.0 < d.expires_at);
    let kind = record.kind;
    let mut next = entry.clone();
    let mut nonce = None;
    {
        let nl = &mut next.lifecycle;
        match lifecycle {
            Lifecycle::DecisionReady {
                decision,
                principal_digest,
                authenticator_id,
                audience: decision_audience,
                assertion_nonce_digest,
                issued_at,
                expires_at,
            } => {
                if !matches!(
                    from,
                    ChallengeState::Pending | ChallengeState::ReauthenticationRequired
                ) {
                    return Err(transition(from, kind, "a decision is recorded once"));
                }
                if decision_audience != audience {
                    return Err(refusal(
                        codes::CONSENT_AUDIENCE,
                        "signed assertion audience does not match this broker",
                    ));
                }
                if !(challenge_live
                    && issued_at < expires_at
                    && issued_at <= n
                    && n < expires_at
                    && expires_at.0 <= entry.expires_at)
                {
                    return Err(refusal(
                        codes::CONSENT_EXPIRED,
                        "verified human decision is not live at its recording",
                    ));
                }
                if from == ChallengeState::ReauthenticationRequired {
                    let Some(kept) = l.decision.as_ref() else {
                        return Err(invalid_record(
                            "consent record is missing decision authority",
                        ));
                    };
                    if kept.decision != decision
                        || kept.principal_digest != principal_digest
                        || kept.authenticator_id != authenticator_id
                        || kept.audience != decision_audience
                        || kept.assertion_nonce_digest == assertion_nonce_digest
                    {
                        return Err(transition(
                            from,
                            kind,
                            "a re-authentication keeps the decision identity with a fresh nonce",
                        ));
                    }
                }
                nonce = Some(push_nonce(
                    nl,
                    &entry.challenge_id,
                    &assertion_nonce_digest,
                    n,
                )?);
                nl.state = ChallengeState::DecisionReady.code();
                nl.decision = Some(DecisionEntry {
                    decision,
                    principal_digest,
                    authenticator_id,
                    audience: decision_audience,
                    assertion_nonce_digest,
                    issued_at: issued_at.0,
                    expires_at: expires_at.0,
                    recorded_at: n.0,
                });
                nl.reservation = None;
            }
            Lifecycle::NonceRecorded {
                assertion_nonce_digest,
            } => {
                if from != ChallengeState::DecisionReady || !challenge_live || !decision_live {
                    return Err(transition(
                        from,
                        kind,
                        "re-verification needs a live decision",
                    ));
                }
                nonce = Some(push_nonce(
                    nl,
                    &entry.challenge_id,
                    &assertion_nonce_digest,
                    n,
                )?);
            }
            Lifecycle::Reserved {
                event_id,
                event_content_digest,
                token_digest,
            } => {
                if from != ChallengeState::DecisionReady || !challenge_live || !decision_live {
                    return Err(transition(from, kind, "only a live decision is reserved"));
                }
                nl.state = ChallengeState::Reserved.code();
                nl.reservation = Some(ReservationEntry {
                    event_id,
                    event_content_digest,
                    token_digest: parse_sha(&token_digest),
                    reserved_at: n.0,
                });
            }
            Lifecycle::Released {
                event_id,
                event_content_digest,
                token_digest,
            } => {
                if from != ChallengeState::Reserved
                    || !holds(l.reservation.as_ref(), &event_id, &event_content_digest)
                    || l.reservation.as_ref().and_then(|r| r.token_digest)
                        != parse_sha(&token_digest)
                {
                    return Err(transition(
                        from,
                        kind,
                        "only the holder releases a reservation",
                    ));
                }
                nl.state = ChallengeState::DecisionReady.code();
                nl.reservation = None;
            }
            Lifecycle::Settled {
                event_id,
                event_content_digest,
                basis,
            } => {
                let reserved_at = match (&basis, from) {
                    (SettleBasis::Guard { token_digest }, ChallengeState::Reserved)
                        if holds(l.reservation.as_ref(), &event_id, &event_content_digest)
                            && l.reservation.as_ref().and_then(|r| r.token_digest)
                                == parse_sha(token_digest) =>
                    {
                        l.reservation.as_ref().map_or(n.0, |r| r.reserved_at)
                    }
                    (SettleBasis::CommittedEvidence { .. }, ChallengeState::Reserved)
                        if holds(l.reservation.as_ref(), &event_id, &event_content_digest) =>
                    {
                        l.reservation.as_ref().map_or(n.0, |r| r.reserved_at)
                    }
                    (
                        SettleBasis::CommittedEvidence { .. },
                        ChallengeState::DecisionReady
                        | ChallengeState::ReauthenticationRequired
                        | ChallengeState::Expired,
                    ) if l.decision.is_some() => {
                        l.reservation.as_ref().map_or(n.0, |r| r.reserved_at)
                    }
                    _ => {
                        return Err(transition(
                            from,
                            kind,
                            "settlement needs the held reservation or committed evidence of a decision",
                        ));
                    }
                };
                nl.state = ChallengeState::Settled.code();
                nl.reservation = Some(ReservationEntry {
                    event_id,
                    event_content_digest,
                    token_digest: None,
                    reserved_at,
                });
                nl.settled_at = Some(n.0);
                nl.expired_at = None;
            }
            Lifecycle::ReauthenticationRequired { cause } => {
                let legal = match cause {
                    ReauthenticationCause::DecisionExpired => {
                        from == ChallengeState::DecisionReady && challenge_live && !decision_live
                    }
                    ReauthenticationCause::AbsentAtExpectedHead => {
                        matches!(
                            from,
                            ChallengeState::DecisionReady | ChallengeState::Reserved
                        ) && challenge_live
                    }
                };
                if !legal {
                    return Err(transition(from, kind, cause.as_str()));
                }
                nl.state = ChallengeState::ReauthenticationRequired.code();
                nl.reservation = None;
            }
            Lifecycle::Expired { cause } => {
                let legal = match cause {
                    ExpiryCause::ChallengeExpired => matches!(
                        from,
                        ChallengeState::Pending
                            | ChallengeState::DecisionReady
                            | ChallengeState::ReauthenticationRequired
                    ),
                    ExpiryCause::AbsentAtExpectedHead => matches!(
                        from,
                        ChallengeState::DecisionReady
                            | ChallengeState::ReauthenticationRequired
                            | ChallengeState::Reserved
                    ),
                };
                if !legal || challenge_live {
                    return Err(transition(from, kind, "expiry needs an expired challenge"));
                }
                nl.state = ChallengeState::Expired.code();
                // The reservation identity is kept (spec/projections.md §8.8), its authority is
                // not.
                if let Some(r) = nl.reservation.as_mut() {
                    r.token_digest = None;
                }
                nl.expired_at = Some(entry.expires_at);
            }
        }
        nl.revision = record.revision;
        nl.head_position = record.position;
        nl.head_digest = record.digest;
    }
    Ok((next, nonce))
}

fn holds(reservation: Option<&ReservationEntry>, event_id: &str, content_digest: &str) -> bool {
    reservation.is_some_and(|r| r.event_id == event_id && r.event_content_digest == content_digest)
}

/// Appends `nonce_digest` to the history chain of `l` (spec/projections.md §8.1).
fn push_nonce(
    l: &mut super::LifecycleEntry,
    challenge_id: &str,
    nonce_digest: &str,
    recorded_at: UtcMicros,
) -> Result<NonceStep, Refusal> {
    let sequence = l.nonce_history_count + 1;
    let record_digest = nonce_record_digest(
        challenge_id,
        nonce_digest,
        &l.nonce_history_digest,
        recorded_at,
        sequence,
    );
    l.nonce_history_count = sequence;
    l.nonce_history_digest = record_digest;
    Ok(NonceStep {
        nonce_digest: parse_sha(nonce_digest)
            .ok_or_else(|| invalid_record("an assertion nonce digest is malformed"))?,
        sequence,
        record_digest,
    })
}

/// SHA-256 of `bytes`, as an array.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}
