//! Replay inputs (reference engine-core §6): the privacy-safe, frozen input from which a reducer
//! output is recomputed bit for bit.

use crate::check::cj_digest;
use crate::json::Json;
use crate::model::EngineEvent;

pub const REPLAY_SCHEMA: &str = "ctx.engine.replay-input";
pub const REPLAY_SCHEMA_VERSION: i64 = 1;
pub const REDUCER_V3: &str = "ctx-reducer-v3";
pub const NORMALIZER_VERSION_DEFAULT: &str = "ctx-normalizer-structured-v1";

/// `{schema_id, schema_version, value, value_digest}` with `value_digest = H(CJ(value))`.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Surrogate {
    pub schema_id: String,
    pub schema_version: i64,
    pub value: Json,
    pub value_digest: String,
}

impl Surrogate {
    /// A surrogate over `value` with its digest computed.
    pub fn new(schema_id: &str, schema_version: i64, value: Json) -> Surrogate {
        let value_digest = cj_digest(&value);
        Surrogate {
            schema_id: schema_id.to_owned(),
            schema_version,
            value,
            value_digest,
        }
    }

    pub fn to_json(&self) -> Json {
        Json::object([
            ("schema_id", Json::str(&self.schema_id)),
            ("schema_version", Json::Int(self.schema_version)),
            ("value", self.value.clone()),
            ("value_digest", Json::str(&self.value_digest)),
        ])
    }
}

/// The input of one reduction as stored in the journal.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ReplayInput {
    pub decision_surrogate: Option<Surrogate>,
    pub normalizer_version: String,
    pub observation_surrogate: Option<Surrogate>,
    /// The sanitized event the reducer sees; every derived id uses its content digest.
    pub reducer_event: EngineEvent,
    pub reducer_version: String,
    /// Content digest of the host's source event.
    pub source_event_content_digest: String,
}

impl ReplayInput {
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "decision_surrogate",
                self.decision_surrogate.as_ref().map_or(Json::Null, Surrogate::to_json),
            ),
            ("normalizer_version", Json::str(&self.normalizer_version)),
            (
                "observation_surrogate",
                self.observation_surrogate.as_ref().map_or(Json::Null, Surrogate::to_json),
            ),
            ("reducer_event", self.reducer_event.to_json()),
            ("reducer_version", Json::str(&self.reducer_version)),
            ("schema", Json::str(REPLAY_SCHEMA)),
            ("schema_version", Json::Int(REPLAY_SCHEMA_VERSION)),
            ("source_event_content_digest", Json::str(&self.source_event_content_digest)),
        ])
    }

    /// The canonical replay JSON text stored in the engine record.
    pub fn to_cj(&self) -> String {
        self.to_json().to_cj()
    }
}
