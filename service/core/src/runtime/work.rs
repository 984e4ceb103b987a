//! Stored work observations of a data directory (journal records, and `work/<work ref>.json`
//! files of earlier versions; spec/cli.md §4): what a host observed, its work reference, the
//! planning events it stands for, and the current-work authority that resolves a reference to
//! them (`QueryInputAuthority`, spec/service.md §1 and §3).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_journal::{
    AppendError, ExpectedRevision, Journal, NewRecord, StreamAppend, StreamId, Timestamp,
};
use ctx_projections::streams::{WORK_OBSERVATION_KIND, WORK_STREAM_NAMESPACE};

use ctx_model::{
    CURRENT_WORK_SCHEMA, EngineEvent, Json, ScopeRef, Surrogate, UtcMicros, is_token, sha256_hex,
};

use super::{read_limited, utf8};
use crate::managed::{
    InputAuthorityError, PlanningEventsSpec, QueryInput, QueryInputAuthority, planning_events,
};
use crate::registry::{ArtifactHandle, ArtifactRegistry};

/// The largest prompt a work observation reads, in bytes; the rest is ignored.
pub const WORK_PROMPT_MAX_BYTES: usize = 16 * 1024;
/// Schema of a stored work observation.
const WORK_SCHEMA: &str = "ctx.work-v1";
/// Largest stored work observation (`work/<work ref>.json`) read, in bytes: the file holds at most
/// [`crate::catalog::SIGNALS_MAX_TOKENS`] signals and a few digests, well under a kilobyte per
/// signal.
pub const WORK_FILE_MAX_BYTES: u64 = 64 * 1024;

// ------------------------------------------------------------------------------------------------
// Work observations
// ------------------------------------------------------------------------------------------------

/// What a host observed about the current work: the input of `ctx query prepare`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkRequest {
    /// The host's session id (a token).
    pub session_id: String,
    /// The working directory (absolute); only its digest is kept.
    pub workspace: String,
    /// The person's prompt; only the words that are catalog tags are kept, as signals.
    pub prompt: String,
    /// Extra signals the host names (tokens).
    pub signals: Vec<String>,
    /// Languages; when empty, the prompt's words that name a known language.
    pub languages: Vec<String>,
    /// How many capabilities to plan at most (1 to 5).
    pub requested_limit: u8,
}

/// A work observation as stored under `work/<work ref>.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredWork {
    pub(super) session_id: String,
    pub(super) workspace_digest: String,
    pub(super) signals: Vec<String>,
    pub(super) languages: Vec<String>,
    pub(super) requested_limit: u8,
    pub(super) observed_at: UtcMicros,
    pub(super) manifest_digest: String,
    pub(super) planning_environment_digest: String,
}

/// Why a stored work file is refused; the sentence names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum WorkFileError {
    #[error("field {field} is missing or not a string")]
    NotString { field: &'static str },
    #[error("field {field} holds a non-string")]
    NonString { field: &'static str },
    #[error("field {field} is missing or not an array")]
    NotArray { field: &'static str },
    #[error("schema is not {WORK_SCHEMA}")]
    Schema,
    #[error("requested_limit is out of range")]
    LimitRange,
    #[error("requested_limit is missing")]
    LimitMissing,
    #[error("observed_at is not an RFC 3339 UTC time")]
    ObservedAt,
    #[error("session_id or workspace_digest is malformed")]
    Identity,
}

impl StoredWork {
    pub(super) fn to_json(&self) -> Json {
        let strs = |v: &[String]| Json::Arr(v.iter().map(Json::str).collect());
        Json::object([
            ("schema", Json::str(WORK_SCHEMA)),
            ("session_id", Json::str(&self.session_id)),
            ("workspace_digest", Json::str(&self.workspace_digest)),
            ("signals", strs(&self.signals)),
            ("languages", strs(&self.languages)),
            (
                "requested_limit",
                Json::Int(i64::from(self.requested_limit)),
            ),
            ("observed_at", Json::str(self.observed_at.to_string())),
            ("manifest_digest", Json::str(&self.manifest_digest)),
            (
                "planning_environment_digest",
                Json::str(&self.planning_environment_digest),
            ),
        ])
    }

    fn from_json(value: &Json) -> Result<StoredWork, WorkFileError> {
        let text = |k: &'static str| {
            value
                .get_str(k)
                .map(str::to_owned)
                .ok_or(WorkFileError::NotString { field: k })
        };
        let list = |k: &'static str| -> Result<Vec<String>, WorkFileError> {
            match value.get(k) {
                Some(Json::Arr(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or(WorkFileError::NonString { field: k })
                    })
                    .collect(),
                _ => Err(WorkFileError::NotArray { field: k }),
            }
        };
        if value.get_str("schema") != Some(WORK_SCHEMA) {
            return Err(WorkFileError::Schema);
        }
        let limit = match value.get("requested_limit") {
            Some(Json::Int(n)) => u8::try_from(*n).map_err(|_| WorkFileError::LimitRange)?,
            _ => return Err(WorkFileError::LimitMissing),
        };
        let observed_at =
            UtcMicros::parse(&text("observed_at")?).map_err(|_| WorkFileError::ObservedAt)?;
        let session_id = text("session_id")?;
        let workspace_digest = text("workspace_digest")?;
        // Validated again after reading: the scope slices the digest and the engine checks tokens.
        if !is_token(&session_id) || !ctx_model::is_sha(&workspace_digest) {
            return Err(WorkFileError::Identity);
        }
        Ok(StoredWork {
            session_id,
            workspace_digest,
            signals: list("signals")?,
            languages: list("languages")?,
            requested_limit: limit,
            observed_at,
            manifest_digest: text("manifest_digest")?,
            planning_environment_digest: text("planning_environment_digest")?,
        })
    }

    /// The work reference: a digest of what was observed (not of when), so observing the same
    /// work again in a session reuses its reference.
    pub(super) fn work_ref(&self) -> String {
        let identity = Json::object([
            ("session_id", Json::str(&self.session_id)),
            ("workspace_digest", Json::str(&self.workspace_digest)),
            (
                "signals",
                Json::Arr(self.signals.iter().map(Json::str).collect()),
            ),
            (
                "languages",
                Json::Arr(self.languages.iter().map(Json::str).collect()),
            ),
            (
                "requested_limit",
                Json::Int(i64::from(self.requested_limit)),
            ),
            ("manifest_digest", Json::str(&self.manifest_digest)),
        ]);
        format!("work-{}", &sha256_hex(&identity.to_string())[..40])
    }

    fn scope(&self, work_ref: &str) -> ScopeRef {
        let workspace = format!("ws-{}", &self.workspace_digest[..16]);
        ScopeRef {
            tenant_id: "local".to_owned(),
            workspace_id: workspace.clone(),
            repository_id: workspace,
            session_id: self.session_id.clone(),
            // One planning exposure per observed work: its engine stream starts at revision 0.
            exposure_id: work_ref.to_owned(),
            host_context_id: "ctx-cli".to_owned(),
            parent_exposure_id: None,
        }
    }

    pub(super) fn surrogate(&self) -> Surrogate {
        let strs = |v: &[String]| Json::Arr(v.iter().map(Json::str).collect());
        Surrogate::new(
            CURRENT_WORK_SCHEMA,
            1,
            Json::object([
                ("active_capability_ids", Json::Arr(vec![])),
                ("baseline_capability_ids", Json::Arr(vec![])),
                ("languages", strs(&self.languages)),
                ("rejected_capability_ids", Json::Arr(vec![])),
                (
                    "requested_limit",
                    Json::Int(i64::from(self.requested_limit)),
                ),
                ("signals", strs(&self.signals)),
            ]),
        )
    }

    /// The two planning events: SessionStarted at revision 0 and IntentObserved at 1.
    fn events(&self, work_ref: &str, artifact: &ArtifactHandle) -> (EngineEvent, EngineEvent) {
        planning_events(
            artifact,
            &PlanningEventsSpec {
                scope: &self.scope(work_ref),
                occurred_at: &self.observed_at.to_string(),
                session_event_id: &format!("ctx-session-started:{work_ref}"),
                intent_event_id: &format!("ctx-intent-observed:{work_ref}"),
                correlation_id: &format!("plan-{work_ref}"),
                session_causation_id: &format!("ctx-cause:{work_ref}"),
                host_descriptor_digest: &sha256_hex("ctx-host:cli-managing"),
                work_signature: &sha256_hex(&format!("ctx-work:{work_ref}")),
            },
        )
    }
}

/// Resolves current-work references to the stored observations of `work/`.
/// The journal stream of the work observation `work_ref`.
fn work_stream(work_ref: &str) -> Option<StreamId> {
    StreamId::derive(WORK_STREAM_NAMESPACE, work_ref.as_bytes()).ok()
}

/// Records `work` as the observation `work_ref` in `journal`, unless one is recorded already: an
/// observation keeps its first time, so its events never change. Inside a prompt's unit of work
/// the record shares the unit's sync (spec/service.md §13), where a file needed two of its own.
pub(super) fn record_work(
    journal: &Journal,
    work_ref: &str,
    work: &StoredWork,
) -> Result<(), AppendError> {
    let Some(stream) = work_stream(work_ref) else {
        return Err(AppendError::NotCommitted {
            reason: format!("work reference {work_ref:?} names no stream"),
        });
    };
    let record = NewRecord::new(
        format!("ctx-work:{work_ref}"),
        WORK_OBSERVATION_KIND,
        Timestamp(work.observed_at.0),
        work.to_json().to_string().into_bytes(),
    );
    match journal.append(StreamAppend::new(
        stream,
        ExpectedRevision::NoStream,
        vec![record],
    )) {
        Ok(_) | Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The observation `work_ref` as recorded in `journal`, if it is there and well formed.
fn recorded_work(journal: &Journal, work_ref: &str) -> Option<StoredWork> {
    let records = journal.read_stream(&work_stream(work_ref)?, 1, 1).ok()?;
    let record = records.first()?;
    if record.kind != WORK_OBSERVATION_KIND || record.payload.len() as u64 > WORK_FILE_MAX_BYTES {
        return None;
    }
    let value = Json::parse(std::str::from_utf8(&record.payload).ok()?).ok()?;
    StoredWork::from_json(&value).ok()
}

/// Where an earlier version filed the observation `work_ref`.
fn filed_path(dir: &Path, work_ref: &str) -> PathBuf {
    dir.join(format!("{work_ref}.json"))
}

/// The observation `work_ref` as an earlier version stored it, in `dir/<work ref>.json`.
fn filed_work(dir: &Path, work_ref: &str) -> Option<StoredWork> {
    let path = filed_path(dir, work_ref);
    let text = read_limited(&path, WORK_FILE_MAX_BYTES)
        .and_then(|bytes| utf8(&path, bytes))
        .ok()?;
    StoredWork::from_json(&Json::parse(&text).ok()?).ok()
}

/// True when `work_ref` is stored as a file of an earlier version (its first time stands).
pub(super) fn is_filed(dir: &Path, work_ref: &str) -> bool {
    filed_path(dir, work_ref).exists()
}

#[derive(Debug)]
pub(super) struct WorkDirAuthority {
    pub(super) dir: PathBuf,
    pub(super) journal_dir: PathBuf,
    pub(super) registry: Arc<ArtifactRegistry>,
}

impl QueryInputAuthority for WorkDirAuthority {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError> {
        let unavailable = || InputAuthorityError::new("current-work reference is unavailable");
        if !is_token(current_work_ref) || !current_work_ref.starts_with("work-") {
            return Err(unavailable());
        }
        // The journal first (this version records observations there); a file for what an
        // earlier version observed.
        let recorded = crate::managed::open_service_journal(&self.journal_dir)
            .ok()
            .and_then(|journal| recorded_work(&journal, current_work_ref));
        let work = recorded
            .or_else(|| filed_work(&self.dir, current_work_ref))
            .ok_or_else(unavailable)?;
        if work.work_ref() != current_work_ref {
            return Err(unavailable());
        }
        let artifact = self
            .registry
            .reopen(&work.manifest_digest, &work.planning_environment_digest)
            .map_err(|_| unavailable())?;
        let (started, intent) = work.events(current_work_ref, &artifact);
        Ok(QueryInput::new(artifact, started, intent))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn work() -> StoredWork {
        StoredWork {
            session_id: "s-1".to_owned(),
            workspace_digest: sha256_hex("ctx-workspace:/w"),
            signals: vec!["rust".to_owned()],
            languages: vec!["rust".to_owned()],
            requested_limit: 5,
            observed_at: UtcMicros(1_000_000),
            manifest_digest: sha256_hex("manifest"),
            planning_environment_digest: sha256_hex("environment"),
        }
    }

    #[test]
    fn a_stored_work_round_trips_and_its_reference_ignores_the_time() {
        let original = work();
        let parsed = StoredWork::from_json(&original.to_json());
        assert_eq!(parsed.as_ref(), Ok(&original));
        let later = StoredWork {
            observed_at: UtcMicros(9_000_000),
            ..original.clone()
        };
        assert_eq!(later.work_ref(), original.work_ref());
        let other = StoredWork {
            signals: vec!["go".to_owned()],
            ..original.clone()
        };
        assert_ne!(other.work_ref(), original.work_ref());
    }

    #[test]
    fn a_recorded_observation_keeps_its_first_time_and_a_filed_one_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path().join("journal"), &Default::default()).unwrap();
        let first = work();
        let work_ref = first.work_ref();
        assert_eq!(recorded_work(&journal, &work_ref), None);
        record_work(&journal, &work_ref, &first).unwrap();
        let later = StoredWork {
            observed_at: UtcMicros(9_000_000),
            ..first.clone()
        };
        record_work(&journal, &work_ref, &later).unwrap();
        assert_eq!(recorded_work(&journal, &work_ref), Some(first.clone()));
        let stream = work_stream(&work_ref).unwrap();
        assert_eq!(journal.read_stream(&stream, 1, 10).unwrap().len(), 1);

        // What an earlier version filed is read from its file.
        let other = StoredWork {
            signals: vec!["go".to_owned()],
            ..first.clone()
        };
        let files = dir.path().join("work");
        std::fs::create_dir_all(&files).unwrap();
        assert!(!is_filed(&files, &other.work_ref()));
        std::fs::write(
            files.join(format!("{}.json", other.work_ref())),
            other.to_json().to_string(),
        )
        .unwrap();
        assert!(is_filed(&files, &other.work_ref()));
        assert_eq!(filed_work(&files, &other.work_ref()), Some(other));
    }

    #[test]
    fn a_doctored_work_file_is_refused_not_sliced() {
        for (field, value) in [
            ("workspace_digest", Json::str("abc")),
            ("session_id", Json::str("not a token")),
            ("requested_limit", Json::Int(300)),
            ("observed_at", Json::str("yesterday")),
            ("schema", Json::str("ctx.work-v0")),
        ] {
            let mut value_json = work().to_json();
            if let Json::Obj(map) = &mut value_json {
                map.insert(field.to_owned(), value);
            }
            assert!(
                StoredWork::from_json(&value_json).is_err(),
                "{field} was accepted"
            );
        }
    }
}
