//! Screening of the observation surrogate an artifact binds (spec/registry.md §3).
//!
//! The surrogate is persisted in the manifest and replayed into the journal, so it must be the
//! exact current-work schema, carry facts the catalog's [`WorkObservation`] accepts, and contain
//! nothing that looks like a credential: a token pasted into a signal would otherwise be stored
//! in clear in two durable places.

use ctx_model::{
    CURRENT_WORK_SCHEMA, Json, ReplayError, Surrogate, SurrogateRole, validate_surrogate,
};

use crate::catalog::WorkObservation;
use crate::catalog::{ObservationError, is_credential_like};

const LIST_FIELDS: [&str; 5] = [
    "active_capability_ids",
    "baseline_capability_ids",
    "languages",
    "rejected_capability_ids",
    "signals",
];

/// Why a surrogate is not an exact, credential-free current-work observation surrogate; the
/// sentence fragment names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SurrogateError {
    #[error(
        "schema {schema_id:?} version {version} is not the exact current-work schema \
         {CURRENT_WORK_SCHEMA:?} version 1"
    )]
    Schema { schema_id: String, version: i64 },
    /// The surrogate's own shape rules.
    #[error(transparent)]
    Shape(#[from] ReplayError),
    #[error("{field} must be a token array")]
    NotTokenArray { field: &'static str },
    #[error("{field} contains credential-like material")]
    Credential { field: &'static str },
    #[error("the current-work fields are incomplete")]
    Incomplete,
    #[error("it holds invalid current-work facts: {0}")]
    Facts(ObservationError),
}

/// Checks `s` is an exact, credential-free current-work observation surrogate; `Err` is a
/// sentence fragment naming the fault.
pub(crate) fn check_observation_surrogate(s: &Surrogate) -> Result<(), SurrogateError> {
    if s.schema_id != CURRENT_WORK_SCHEMA || s.schema_version != 1 {
        return Err(SurrogateError::Schema {
            schema_id: s.schema_id.clone(),
            version: s.schema_version,
        });
    }
    validate_surrogate(s, SurrogateRole::Observation)?;
    let mut lists: Vec<Vec<&str>> = Vec::with_capacity(LIST_FIELDS.len());
    for field in LIST_FIELDS {
        let items = s.value.get(field).and_then(Json::as_arr).unwrap_or(&[]);
        let mut tokens = Vec::with_capacity(items.len());
        for item in items {
            let token = item
                .as_str()
                .ok_or(SurrogateError::NotTokenArray { field })?;
            let free = matches!(field, "signals" | "languages");
            if is_credential_like(token, free) {
                return Err(SurrogateError::Credential { field });
            }
            tokens.push(token);
        }
        lists.push(tokens);
    }
    let limit = s
        .value
        .get("requested_limit")
        .and_then(Json::as_i64)
        .unwrap_or(-1);
    let [active, baseline, languages, rejected, signals] = lists.as_slice() else {
        return Err(SurrogateError::Incomplete);
    };
    WorkObservation::new(signals, languages)
        .and_then(|o| o.with_baseline(baseline))
        .and_then(|o| o.with_active(active))
        .and_then(|o| o.with_rejected(rejected))
        .and_then(|o| o.with_requested_limit(limit))
        .map_err(SurrogateError::Facts)?;
    Ok(())
}
