//! The manifest: one canonical JSON document binding a graph artifact to the snapshot digests
//! and the observation surrogate planning replays against.
//!
//! The manifest is addressed by the SHA-256 of its bytes, and those bytes must be the ASCII
//! canonical JSON of its 13 fields; decoding therefore re-encodes and compares byte for byte, so
//! there is exactly one accepted spelling of every manifest and its digest cannot be steered by
//! whitespace, key order or escapes.

use ctx_model::{Json, JsonError, ReplayError, Surrogate, is_safe_token, is_sha, sha256_hex_bytes};

use super::MANIFEST_MAX_BYTES;
use super::surrogate::SurrogateError;
use super::surrogate::check_observation_surrogate;

/// `schema` of every manifest.
pub const MANIFEST_SCHEMA: &str = "ctx.managed-query-artifact-manifest";
/// `registry_version` of every manifest this registry writes and accepts.
pub const REGISTRY_VERSION: i64 = 1;

/// The decoded manifest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Manifest {
    pub graph_artifact_digest: String,
    pub planning_environment_digest: String,
    pub catalog_namespace_digest: String,
    pub catalog_retrieval_digest: String,
    pub benefit_facts_snapshot_digest: String,
    pub benefit_policy_snapshot_digest: String,
    pub material_snapshot_digest: String,
    pub installation_snapshot_digest: String,
    pub observation_surrogate: Surrogate,
    pub planning_schema_version: String,
}

/// The digest fields, in manifest key order, with their accessors.
type DigestField = (&'static str, fn(&Manifest) -> &str);
const DIGEST_FIELDS: [DigestField; 8] = [
    ("benefit_facts_snapshot_digest", |m| {
        &m.benefit_facts_snapshot_digest
    }),
    ("benefit_policy_snapshot_digest", |m| {
        &m.benefit_policy_snapshot_digest
    }),
    ("catalog_namespace_digest", |m| &m.catalog_namespace_digest),
    ("catalog_retrieval_digest", |m| &m.catalog_retrieval_digest),
    ("graph_artifact_digest", |m| &m.graph_artifact_digest),
    ("installation_snapshot_digest", |m| {
        &m.installation_snapshot_digest
    }),
    ("material_snapshot_digest", |m| &m.material_snapshot_digest),
    ("planning_environment_digest", |m| {
        &m.planning_environment_digest
    }),
];

const KEY_COUNT: usize = 13;

impl Manifest {
    pub fn to_json(&self) -> Json {
        let mut pairs: Vec<(&str, Json)> = DIGEST_FIELDS
            .iter()
            .map(|(name, get)| (*name, Json::str(get(self))))
            .collect();
        pairs.push((
            "observation_surrogate",
            self.observation_surrogate.to_json(),
        ));
        pairs.push((
            "observation_surrogate_digest",
            Json::str(&self.observation_surrogate.value_digest),
        ));
        pairs.push((
            "planning_schema_version",
            Json::str(&self.planning_schema_version),
        ));
        pairs.push(("registry_version", Json::Int(REGISTRY_VERSION)));
        pairs.push(("schema", Json::str(MANIFEST_SCHEMA)));
        Json::object(pairs)
    }

    /// The canonical body: ASCII canonical JSON (spec/registry.md).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().to_cja().into_bytes()
    }

    /// The manifest digest: SHA-256 of [`Manifest::to_bytes`].
    pub fn digest_of(bytes: &[u8]) -> String {
        sha256_hex_bytes(bytes)
    }

    /// Decodes stored manifest bytes strictly. `Err` carries the sentence fragment the caller
    /// reports as corruption of the manifest file.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() > MANIFEST_MAX_BYTES {
            return Err(ManifestError::TooLarge { len: bytes.len() });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| ManifestError::NotUtf8)?;
        let json = Json::parse(text).map_err(ManifestError::Json)?;
        let map = json.as_obj().ok_or(ManifestError::NotObject)?;
        if map.len() != KEY_COUNT {
            return Err(ManifestError::FieldCount { count: map.len() });
        }
        if json.get_str("schema") != Some(MANIFEST_SCHEMA)
            || json.get("registry_version").and_then(Json::as_i64) != Some(REGISTRY_VERSION)
        {
            return Err(ManifestError::Schema);
        }
        let digest = |name: &'static str| -> Result<String, ManifestError> {
            match json.get_str(name) {
                Some(d) if is_sha(d) => Ok(d.to_owned()),
                _ => Err(ManifestError::Digest { field: name }),
            }
        };
        let surrogate_json = json
            .get("observation_surrogate")
            .ok_or(ManifestError::NoSurrogate)?;
        let observation_surrogate =
            Surrogate::from_json(surrogate_json).map_err(ManifestError::SurrogateShape)?;
        check_observation_surrogate(&observation_surrogate).map_err(ManifestError::Surrogate)?;
        if json.get_str("observation_surrogate_digest")
            != Some(observation_surrogate.value_digest.as_str())
        {
            return Err(ManifestError::SurrogateDigest);
        }
        let planning_schema_version = match json.get_str("planning_schema_version") {
            Some(v) if is_safe_token(v) => v.to_owned(),
            _ => {
                return Err(ManifestError::PlanningSchema);
            }
        };
        let manifest = Manifest {
            graph_artifact_digest: digest("graph_artifact_digest")?,
            planning_environment_digest: digest("planning_environment_digest")?,
            catalog_namespace_digest: digest("catalog_namespace_digest")?,
            catalog_retrieval_digest: digest("catalog_retrieval_digest")?,
            benefit_facts_snapshot_digest: digest("benefit_facts_snapshot_digest")?,
            benefit_policy_snapshot_digest: digest("benefit_policy_snapshot_digest")?,
            material_snapshot_digest: digest("material_snapshot_digest")?,
            installation_snapshot_digest: digest("installation_snapshot_digest")?,
            observation_surrogate,
            planning_schema_version,
        };
        // Unknown keys, a different spelling of the same values, or stray whitespace all show up
        // here: only the exact canonical re-encoding is accepted.
        if manifest.to_bytes() != bytes {
            return Err(ManifestError::NotCanonical);
        }
        Ok(manifest)
    }
}

/// Why stored manifest bytes are refused; the sentence fragment (which the caller reports as
/// corruption of the manifest file) names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ManifestError {
    #[error("it is {len} bytes, more than the limit of {MANIFEST_MAX_BYTES} bytes")]
    TooLarge { len: usize },
    #[error("it is not UTF-8 text")]
    NotUtf8,
    #[error("it is not strict JSON ({0})")]
    Json(JsonError),
    #[error("it is not a JSON object")]
    NotObject,
    #[error("it has {count} fields, but a manifest has exactly {KEY_COUNT}")]
    FieldCount { count: usize },
    #[error("its schema or registry version is not {MANIFEST_SCHEMA:?} version {REGISTRY_VERSION}")]
    Schema,
    #[error("its field {field} is not a lowercase SHA-256 digest")]
    Digest { field: &'static str },
    #[error("it lacks the field observation_surrogate")]
    NoSurrogate,
    #[error("its observation surrogate is invalid ({0})")]
    SurrogateShape(ReplayError),
    #[error("its observation surrogate is invalid ({0})")]
    Surrogate(SurrogateError),
    #[error("its observation_surrogate_digest does not match the surrogate it binds")]
    SurrogateDigest,
    #[error("its planning_schema_version is not a canonical bounded token")]
    PlanningSchema,
    #[error("it is not the exact canonical JSON of its fields")]
    NotCanonical,
}
