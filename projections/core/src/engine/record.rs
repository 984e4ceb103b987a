//! Engine records: one journal record per committed engine event (spec/engine-store.md §2).
//!
//! The journal record's kind is [`ENGINE_RECORD_KIND`], its stream the engine stream of the
//! event's scope, its event id the engine event id and its `occurred_at` the reducer event's time.
//! Its payload is an rkyv archive of [`EngineRecord`]. A record is validated before it is written
//! and every time it is read; a failure is a [`RecordError`], never a panic.

use ctx_journal::{PAYLOAD_MAX_BYTES, RecordView, StreamId, Timestamp};
use ctx_model::{EventKind, Json, ReplayInput, ScopeRef, Transition, UtcMicros, is_sha, is_token};

use ctx_model::{JsonError, ProtocolError};

use crate::archive::{self, ArchiveError};
use crate::streams::{ENGINE_RECORD_KIND, ENGINE_STREAM_NAMESPACE};
/// The only [`EngineRecord::format_version`] of kind `ctx.engine.v1`.
pub const ENGINE_RECORD_FORMAT_VERSION: u32 = 1;
/// Longest replay JSON text (spec/engine.md §10).
pub const REPLAY_JSON_MAX_BYTES: usize = 64 * 1024;
/// Longest transition JSON text. Five actions of a few KiB each fit many times over; the bound
/// keeps one record well inside the journal's payload limit.
pub const TRANSITION_JSON_MAX_BYTES: usize = 512 * 1024;
/// Longest action id a guard may name (the token limit).
pub const ACTION_ID_MAX_BYTES: usize = 128;

/// The engine stream of a scope: tenant, workspace, repository and session (never the exposure),
/// so parent and child agents share one revision sequence.
pub fn engine_stream(scope: &ScopeRef) -> Result<StreamId, ctx_journal::InputError> {
    StreamId::derive(ENGINE_STREAM_NAMESPACE, scope.stream_key().as_bytes())
}

/// Which exactly-once protocol a settlement guard belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub enum GuardEffect {
    Install,
    Activation,
}

impl GuardEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardEffect::Install => "install",
            GuardEffect::Activation => "activation",
        }
    }
}

/// How a receipt settles its action: with a recorded outcome (`applied`, `failed`,
/// `indeterminate`), or by the action expiring before anyone claimed it (`expired`, which settles
/// nothing and requires that no claim exists).
///
/// The archived value is the variant's position (`Applied` 0, `Failed` 1, `Expired` 2,
/// `Indeterminate` 3): records are immutable, so a new mode is only ever appended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub enum GuardMode {
    Applied,
    Failed,
    Expired,
    /// Install only: the driver's effect could not be verified (its process died mid-effect, or
    /// the driver cannot tell). Settled by an `ActionFailed` receipt, as a failed install.
    Indeterminate,
}

impl GuardMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardMode::Applied => "applied",
            GuardMode::Failed => "failed",
            GuardMode::Expired => "expired",
            GuardMode::Indeterminate => "indeterminate",
        }
    }

    /// The receipt kind that settles (or, `Expired`, retires) an action with this mode: an
    /// indeterminate outcome settles only as failed.
    pub fn receipt_kind(self) -> EventKind {
        match self {
            GuardMode::Applied => EventKind::ActionApplied,
            GuardMode::Failed | GuardMode::Indeterminate => EventKind::ActionFailed,
            GuardMode::Expired => EventKind::ActionExpired,
        }
    }
}

/// What an engine receipt record settles, checked by the effects projection in the receipt's own
/// transaction (spec/engine-store.md §4).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct SettlementGuard {
    pub effect: GuardEffect,
    pub action_id: String,
    pub action_content_digest: String,
    pub mode: GuardMode,
    /// The durable outcome's digest; present exactly when the mode is not `expired`.
    pub execution_outcome_digest: Option<String>,
}

impl SettlementGuard {
    /// Checks the guard's shape; the reason names the offending field.
    pub fn validate(&self) -> Result<(), GuardError> {
        if !is_token(&self.action_id) {
            return Err(GuardError::ActionId {
                action_id: self.action_id.clone(),
            });
        }
        if !is_sha(&self.action_content_digest) {
            return Err(GuardError::ContentDigest);
        }
        match (self.mode, &self.execution_outcome_digest) {
            (GuardMode::Expired, None) => {}
            (GuardMode::Expired, Some(_)) => return Err(GuardError::ExpiredWithOutcome),
            (_, Some(d)) if is_sha(d) => {}
            (mode, _) => return Err(GuardError::OutcomeDigest { mode }),
        }
        if self.effect == GuardEffect::Activation
            && matches!(self.mode, GuardMode::Failed | GuardMode::Indeterminate)
        {
            return Err(GuardError::ActivationOutcome { mode: self.mode });
        }
        Ok(())
    }
}

/// Why a [`SettlementGuard`] is malformed; the sentence names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    #[error("guard action_id \"{}\" is not an opaque token", .action_id.escape_debug())]
    ActionId { action_id: String },
    #[error("guard action_content_digest is not a SHA-256 digest")]
    ContentDigest,
    #[error("an expired guard cannot carry an execution outcome")]
    ExpiredWithOutcome,
    #[error("a {} guard requires a SHA-256 execution outcome digest", .mode.as_str())]
    OutcomeDigest { mode: GuardMode },
    #[error("an activation guard cannot settle a {} outcome", .mode.as_str())]
    ActivationOutcome { mode: GuardMode },
}

/// The payload of a `ctx.engine.v1` record.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EngineRecord {
    /// [`ENGINE_RECORD_FORMAT_VERSION`].
    pub format_version: u32,
    /// The reducer that produced the transition (equal to the replay input's).
    pub reducer_version: String,
    /// H(CJ(source event)): the host's event, before sanitisation. Duplicate detection compares it.
    pub source_event_content_digest: String,
    /// CJ of the [`ReplayInput`]: everything the reducer saw.
    pub replay_json: String,
    /// CJ of the [`Transition`] the reducer produced.
    pub transition_json: String,
    /// H(CJ(state after the event)).
    pub result_state_digest: String,
    /// Present on a receipt that settles (or expires) an install or activation claim.
    pub settlement_guard: Option<SettlementGuard>,
}

/// Where a record sits (or will sit) in the journal: what its content must agree with.
#[derive(Debug, Clone, Copy)]
pub struct RecordPlace<'a> {
    pub stream: StreamId,
    pub revision: u64,
    pub event_id: &'a str,
    pub occurred_at: Timestamp,
}

impl<'a> RecordPlace<'a> {
    pub fn of(view: &RecordView<'a>) -> RecordPlace<'a> {
        RecordPlace {
            stream: view.stream,
            revision: view.revision,
            event_id: view.event_id,
            occurred_at: view.occurred_at,
        }
    }
}

/// An engine record with its replay input and transition decoded and bound to its place.
#[derive(Debug, Clone)]
pub struct DecodedRecord {
    pub record: EngineRecord,
    pub replay: ReplayInput,
    pub transition: Transition,
}

/// Why an engine record is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("record kind \"{kind}\" is not the engine record kind ctx.engine.v1")]
    Kind { kind: String },
    #[error("the engine record payload is {len} bytes; the limit is {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("the engine record payload does not decode: {0}")]
    Archive(ArchiveError),
    #[error("engine record format version {found} is not supported; this build reads version 1")]
    FormatVersion { found: u32 },
    #[error("engine record field {field} is invalid: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("the replay input of the engine record is invalid: {0}")]
    Replay(String),
    #[error("the transition of the engine record is invalid: {0}")]
    Transition(String),
    #[error("the engine record at revision {revision} does not match its replay input: {detail}")]
    Binding { revision: u64, detail: &'static str },
}

fn field(field: &'static str, reason: impl Into<String>) -> RecordError {
    RecordError::Field {
        field,
        reason: reason.into(),
    }
}

impl EngineRecord {
    /// Checks every field's shape (not the binding to a place; see [`EngineRecord::open`]).
    pub fn validate_fields(&self) -> Result<(), RecordError> {
        if self.format_version != ENGINE_RECORD_FORMAT_VERSION {
            return Err(RecordError::FormatVersion {
                found: self.format_version,
            });
        }
        if !is_token(&self.reducer_version) {
            return Err(field("reducer_version", "it is not an opaque token"));
        }
        if !is_sha(&self.source_event_content_digest) {
            return Err(field(
                "source_event_content_digest",
                "it is not a SHA-256 digest",
            ));
        }
        if !is_sha(&self.result_state_digest) {
            return Err(field("result_state_digest", "it is not a SHA-256 digest"));
        }
        if self.replay_json.len() > REPLAY_JSON_MAX_BYTES {
            return Err(field(
                "replay_json",
                format!(
                    "it is {} bytes; the limit is {REPLAY_JSON_MAX_BYTES} bytes",
                    self.replay_json.len()
                ),
            ));
        }
        if self.transition_json.len() > TRANSITION_JSON_MAX_BYTES {
            return Err(field(
                "transition_json",
                format!(
                    "it is {} bytes; the limit is {TRANSITION_JSON_MAX_BYTES} bytes",
                    self.transition_json.len()
                ),
            ));
        }
        if let Some(guard) = &self.settlement_guard {
            guard
                .validate()
                .map_err(|r| field("settlement_guard", r.to_string()))?;
        }
        Ok(())
    }

    /// The journal payload: the validated record archived.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        self.validate_fields()?;
        let bytes = archive::to_bytes(self).map_err(RecordError::Archive)?;
        if bytes.len() > PAYLOAD_MAX_BYTES {
            return Err(RecordError::TooLarge {
                len: bytes.len(),
                max: PAYLOAD_MAX_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Decodes and validates a payload (any alignment).
    pub fn decode(payload: &[u8]) -> Result<EngineRecord, RecordError> {
        if payload.len() > PAYLOAD_MAX_BYTES {
            return Err(RecordError::TooLarge {
                len: payload.len(),
                max: PAYLOAD_MAX_BYTES,
            });
        }
        let record = archive::from_bytes::<EngineRecord>(payload).map_err(RecordError::Archive)?;
        record.validate_fields()?;
        Ok(record)
    }

    /// Decodes the replay input and the transition and checks that both agree with this record
    /// and with its place in the journal (spec/engine.md §10; spec/engine-store.md §2).
    pub fn open(&self, place: &RecordPlace<'_>) -> Result<(ReplayInput, Transition), RecordError> {
        let replay = ReplayInput::from_canonical_text(&self.replay_json)
            .map_err(|e| RecordError::Replay(e.to_string()))?;
        let transition = transition_from_canonical_text(&self.transition_json)
            .map_err(|e| RecordError::Transition(e.to_string()))?;
        let bind = |ok: bool, detail: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(RecordError::Binding {
                    revision: place.revision,
                    detail,
                })
            }
        };
        let event = &replay.reducer_event;
        bind(
            replay.source_event_content_digest == self.source_event_content_digest,
            "the source event content digest differs",
        )?;
        bind(
            replay.reducer_version == self.reducer_version,
            "the reducer version differs",
        )?;
        bind(
            event.event_id == place.event_id,
            "the reducer event id is not the journal event id",
        )?;
        bind(
            engine_stream(&event.scope).ok() == Some(place.stream),
            "the reducer event scope does not belong to the journal stream",
        )?;
        bind(
            event.expected_revision.checked_add(1) == Some(place.revision),
            "the reducer event's expected revision is not the previous revision",
        )?;
        bind(
            UtcMicros::parse(&event.occurred_at).ok().map(|t| t.0) == Some(place.occurred_at.0),
            "the journal timestamp is not the reducer event's occurred_at",
        )?;
        bind(
            transition.event_id == place.event_id
                && transition.to_revision == place.revision
                && transition.from_revision.checked_add(1) == Some(place.revision),
            "the transition does not match the record event id and revision",
        )?;
        bind(
            transition.scope == event.scope,
            "the transition scope is not the reducer event scope",
        )?;
        Ok((replay, transition))
    }
}

/// Decodes the engine record a journal record carries and binds it to its place.
pub fn decode_view(view: &RecordView<'_>) -> Result<DecodedRecord, RecordError> {
    if view.kind != ENGINE_RECORD_KIND {
        return Err(RecordError::Kind {
            kind: view.kind.to_owned(),
        });
    }
    let record = EngineRecord::decode(view.payload)?;
    let (replay, transition) = record.open(&RecordPlace::of(view))?;
    Ok(DecodedRecord {
        record,
        replay,
        transition,
    })
}

/// Parses transition JSON text and requires it to be the transition's exact canonical encoding.
pub fn transition_from_canonical_text(text: &str) -> Result<Transition, TransitionTextError> {
    let v = Json::parse(text)?;
    let t = Transition::from_json(&v)?;
    if t.view().to_cj() != text {
        return Err(TransitionTextError::NotCanonical);
    }
    Ok(t)
}

/// Why a transition's JSON text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionTextError {
    /// The text is not JSON.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// The JSON is not a transition.
    #[error(transparent)]
    Shape(#[from] ProtocolError),
    #[error("transition JSON must use canonical encoding")]
    NotCanonical,
}
