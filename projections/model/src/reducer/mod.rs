//! The engine reducer (spec/engine.md §3), contract-3 family (`ctx-reducer-v3`).
//!
//! `reduce` is pure: no clock, no I/O, no randomness. Time comes only from the reducer event's
//! `occurred_at`, and every id it derives uses the reducer event's content digest, so replaying
//! the stored [`ReplayInput`] reproduces the same transition and state byte for byte.

mod actions;
mod events;
mod planning;
mod reconcile;

use crate::json::Json;
use crate::protocol::{EngineEvent, EventKind, HostAction, ProtocolError, Transition};
use crate::replay::{REDUCER_V3, ReplayInput};
use crate::shape::{ONE_HOUR_MICROS, UtcMicros, is_sha};
use crate::state::{EngineState, HostLevel};
use crate::vocab::CAPABILITY_PLAN_SCHEMA;

/// Why an event cannot be reduced. Nothing is committed for a refused event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReduceError {
    /// The event is well formed but not valid for this state.
    #[error("{0}")]
    InvalidEvent(String),
    /// The event was derived from another head revision.
    #[error("expected revision {expected}, received {received}")]
    RevisionConflict { expected: u64, received: u64 },
    /// The replay input or a value it carries violates the contract.
    #[error("{0}")]
    Invalid(String),
    /// The replay input names a reducer this engine does not have.
    #[error("no exact reducer is registered for the requested version '{0}'")]
    UnsupportedReducerVersion(String),
}

impl From<ProtocolError> for ReduceError {
    fn from(e: ProtocolError) -> Self {
        ReduceError::Invalid(e.message().to_owned())
    }
}

pub(crate) fn invalid_event<T>(message: impl Into<String>) -> Result<T, ReduceError> {
    Err(ReduceError::InvalidEvent(message.into()))
}

pub(crate) fn invalid<T>(message: impl Into<String>) -> Result<T, ReduceError> {
    Err(ReduceError::Invalid(message.into()))
}

/// One reduction in progress: the next state, the event, and the transition being built.
pub(crate) struct Step<'a> {
    pub state: EngineState,
    pub event: &'a EngineEvent,
    /// Content digest of the reducer event (`E` in every id formula).
    pub event_digest: String,
    /// The revision this step produces.
    pub revision: u64,
    /// `occurred_at + 1 h`, the expiry of every action with a TTL.
    pub expires_at: String,
    pub actions: Vec<HostAction>,
    pub diagnostics: Vec<Json>,
}

impl Step<'_> {
    pub fn diagnostic(&mut self, pairs: Vec<(&str, Json)>) {
        self.diagnostics.push(Json::object(pairs));
    }
}

/// Reduces one replay input over the previous state of its stream.
pub fn reduce(
    prev: Option<&EngineState>,
    input: &ReplayInput,
) -> Result<(EngineState, Transition), ReduceError> {
    if input.reducer_version != REDUCER_V3 {
        return Err(ReduceError::UnsupportedReducerVersion(
            input.reducer_version.clone(),
        ));
    }
    let event = &input.reducer_event;
    check_decision(event, input)?;
    let Some(prev) = prev else {
        return start(event);
    };
    if event.expected_revision != prev.revision {
        return Err(ReduceError::RevisionConflict {
            expected: prev.revision,
            received: event.expected_revision,
        });
    }
    if !event.scope.same_session(&prev.scope) {
        return invalid_event("event scope does not match the current-work session scope");
    }
    if let Some(d) = &event.host_descriptor_digest
        && *d != prev.host_descriptor_digest
    {
        return invalid_event("host descriptor changed within a current-work session");
    }
    if event.kind == EventKind::SessionStarted {
        return invalid_event("session is already started");
    }
    if prev.session_status == crate::state::SessionStatus::Ended
        && !(event.kind.is_receipt() || event.kind == EventKind::ReassessmentRequested)
    {
        return invalid_event(
            "session has ended; only pending receipts or explicit cleanup recovery are accepted",
        );
    }
    let Some(revision) = prev.revision.checked_add(1) else {
        return invalid("engine revision overflowed");
    };
    let expires_at = UtcMicros::parse(&event.occurred_at)
        .ok()
        .and_then(|t| t.checked_add(ONE_HOUR_MICROS))
        .map(UtcMicros::render)
        .ok_or_else(|| ReduceError::Invalid("occurred_at must be an RFC 3339 timestamp".into()))?;
    let mut state = prev.clone();
    state.revision = revision;
    let mut step = Step {
        state,
        event,
        event_digest: event.content_digest(),
        revision,
        expires_at,
        actions: Vec::new(),
        diagnostics: Vec::new(),
    };
    events::handle(&mut step, prev, input.decision_surrogate.as_ref())?;
    finish(step, prev.revision)
}

fn check_decision(event: &EngineEvent, input: &ReplayInput) -> Result<(), ReduceError> {
    match (&input.decision_surrogate, event.kind.is_planning()) {
        (Some(_), false) => invalid("decision is not valid for this event kind"),
        (None, true) => invalid("planning event is missing its durable decision"),
        (Some(d), true) => {
            if d.schema_id != CAPABILITY_PLAN_SCHEMA {
                return invalid("decision does not use the capability plan schema");
            }
            if d.schema_version != 3 {
                return invalid("v3 reducer requires capability plan schema version 3");
            }
            Ok(())
        }
        (None, false) => Ok(()),
    }
}

fn start(event: &EngineEvent) -> Result<(EngineState, Transition), ReduceError> {
    if event.kind != EventKind::SessionStarted {
        return invalid_event("SessionStarted must be the first event");
    }
    if event.expected_revision != 0 {
        return Err(ReduceError::RevisionConflict {
            expected: 0,
            received: event.expected_revision,
        });
    }
    let Some(host_descriptor_digest) = event.host_descriptor_digest.clone() else {
        return invalid_event("SessionStarted requires host_descriptor_digest");
    };
    if !is_sha(&host_descriptor_digest) {
        return invalid("schema-v3 host_descriptor_digest must be a SHA-256 digest");
    }
    let level = match event.payload.get("host_level") {
        None => HostLevel::QueryOnly,
        Some(v) => {
            let s = v.as_str().unwrap_or_default();
            HostLevel::parse(s)
                .ok_or_else(|| ReduceError::InvalidEvent(format!("unknown host_level '{s}'")))?
        }
    };
    let state = EngineState::started(event.scope.clone(), level, host_descriptor_digest);
    let transition = Transition {
        event_id: event.event_id.clone(),
        scope: event.scope.clone(),
        from_revision: 0,
        to_revision: 1,
        actions: Vec::new(),
        diagnostics: Vec::new(),
    };
    transition.validate()?;
    Ok((state, transition))
}

fn finish(step: Step<'_>, from: u64) -> Result<(EngineState, Transition), ReduceError> {
    let Step {
        mut state,
        event,
        revision,
        actions,
        diagnostics,
        ..
    } = step;
    state.sort_canonical();
    // `validate` refuses more than five active capabilities (E1) with a typed error; a panic
    // here would fail-stop the journal when the reducer runs inside a projection hook.
    // `validate_persisted` runs every construction invariant first, then the persisted ones.
    state
        .validate_persisted()
        .map_err(|e| ReduceError::Invalid(e.to_string()))?;
    let transition = Transition {
        event_id: event.event_id.clone(),
        scope: event.scope.clone(),
        from_revision: from,
        to_revision: revision,
        actions,
        diagnostics,
    };
    transition.validate()?;
    Ok((state, transition))
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
