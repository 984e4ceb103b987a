//! The runtime of one data directory: the managed query service composed from the files a
//! [`Layout`] names — the ingested catalog, the artifact registry, the install policy store, the
//! skill content-addressed store, the registered human device keys and the work observations —
//! for a process that lives as long as one `ctx` command (spec/cli.md §2 and §4).
//!
//! Everything here is deterministic given the files and the clock the process passes in: two
//! processes that observe the same work get the same work reference, artifact and events, so a
//! retried command is an idempotent retry of the service call.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctx_fs::{
    DirLock, FILE_MODE_PRIVATE, LockError, LockOptions, PrivateError, ReadError, WriteError,
    create_private_dir_all, read_bounded_file, write_durable_with_temp,
};

use ctx_journal::OpenOptions;
use ctx_model::{
    CURRENT_WORK_SCHEMA, EngineEvent, HostAction, INSTALLER_ID, Json, ScopeRef, Surrogate,
    UtcMicros, is_token, sha256_hex, sha256_hex_bytes,
};
use ctx_projections::consent_store::{ChallengeRecord, ConsentStore};
use ctx_projections::engine::{Clock, ManualClock};

use crate::catalog::{
    LoadedCatalog, SIGNALS_MAX_TOKENS, Spellings, TokenRule, language, load_catalog_dir, tokenize,
    truncate,
};
use crate::data_dir::Layout;
use crate::decision::{
    Ed25519Signer, Ed25519Verifier, HumanDecisionVerifierRegistration,
    TrustedHumanDecisionVerifierRegistry,
};
use crate::managed::{
    ConsentBrokerConfig, InputAuthorityError, PlanningEventsSpec, QueryInput, QueryInputAuthority,
    QueryService, QueryServiceConfig, ServiceError, open_query_service, planning_events,
};
use crate::planning::adapter::{AdapterPorts, ReplayDecisionPlanner};
use crate::planning::benefit::NetBenefitPolicy;
use crate::planning::plan::{AuthenticatedNetBenefitPlanner, BenefitAuditSink, SinkError};
use crate::planning::ports::{BenefitFactsPort, CatalogBenefitFacts};
use crate::policy::InstallPolicyStore;
use crate::registry::{ArtifactHandle, ArtifactRegistry, IngestInputs};
use crate::skill_cas::{BodySourceError, CasGate, SkillBodySource, SkillCasRuntimeConfig};

/// The planner version every artifact of this runtime binds.
pub const PLANNER_VERSION: &str = "ctx-planner-v3";
/// The audience human decisions are signed for.
pub const CONSENT_AUDIENCE: &str = "ctx-managed-query";
/// The largest prompt a work observation reads, in bytes; the rest is ignored.
pub const WORK_PROMPT_MAX_BYTES: usize = 16 * 1024;
/// Schema of a stored work observation.
const WORK_SCHEMA: &str = "ctx.work-v1";
/// Schema of a registered device key (public part) and of a device key file (private part).
const VERIFIER_SCHEMA: &str = "ctx.verifier-v1";
const DEVICE_KEY_SCHEMA: &str = "ctx.device-key-v1";
/// Largest device key file read, in bytes: the file holds a schema, a 64-digit seed and an
/// authenticator id (a few hundred bytes), so anything near the bound is not a key.
pub const DEVICE_KEY_MAX_BYTES: u64 = 4 * 1024;
/// Largest verifier registration (`verifiers/<authenticator id>.json`) read, in bytes: the file
/// holds a schema, an audience, an authenticator id, a principal digest and a public key.
pub const VERIFIER_REGISTRATION_MAX_BYTES: u64 = 4 * 1024;
/// Largest stored work observation (`work/<work ref>.json`) read, in bytes: the file holds at most
/// [`SIGNALS_MAX_TOKENS`] signals and a few digests, well under a kilobyte per signal.
pub const WORK_FILE_MAX_BYTES: u64 = 64 * 1024;

/// Why the runtime could not be composed or could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The data directory has no catalog yet.
    #[error(
        "no catalog has been ingested into {}; run `ctx catalog ingest` first",
        .path.display()
    )]
    NoCatalog { path: PathBuf },
    /// A value the caller gave is refused.
    #[error("{0}")]
    Invalid(String),
    /// A file of the data directory could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file of the data directory holds something this runtime refuses.
    #[error("{} is not a valid {what}: {reason}", .path.display())]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    /// The catalog, registry, policy store, skill store, verifier or service refused.
    #[error("{context}: {message}")]
    Component {
        context: &'static str,
        message: String,
    },
    #[error(transparent)]
    Service(#[from] crate::managed::ServiceError),
}

impl RuntimeError {
    /// The stable wire code (spec/cli.md §4): a service refusal keeps its own code
    /// ([`crate::ServiceError::code`]); a data directory without a catalog is `no-catalog`.
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::Service(e) => e.code(),
            RuntimeError::NoCatalog { .. } => "no-catalog",
            RuntimeError::Invalid(_) => "invalid",
            _ => "internal",
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the file `path` (following a link, as `File::open` does) for at most `limit_bytes`
/// bytes. A longer file is refused as [`RuntimeError::Io`] naming the path, its size and the
/// limit; the open and read failures keep their operating-system error.
fn read_limited(path: &Path, limit_bytes: u64) -> Result<Vec<u8>, RuntimeError> {
    let mut file = fs::File::open(path).map_err(io(path))?;
    read_limited_file(&mut file, path, limit_bytes)
}

/// [`read_limited`] of a file already open.
fn read_limited_file(
    file: &mut fs::File,
    path: &Path,
    limit_bytes: u64,
) -> Result<Vec<u8>, RuntimeError> {
    read_bounded_file(file, path, limit_bytes).map_err(|e| io(path)(read_error_source(e)))
}

/// The operating-system error a ctx-fs bounded-read refusal is reported as, beside the path: an
/// open or read failure keeps its own, a file over its limit names its size and the limit.
pub(crate) fn read_error_source(e: ReadError) -> std::io::Error {
    match e {
        ReadError::Io { source, .. } => source,
        ReadError::TooLarge {
            size_bytes,
            limit_bytes,
            ..
        } => std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the file is {size_bytes} bytes or more, over the limit of {limit_bytes} bytes"
            ),
        ),
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    }
}

/// Text of a bounded read, refusing bytes that are not UTF-8 as `read_to_string` did.
fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, RuntimeError> {
    String::from_utf8(bytes).map_err(|_| {
        io(path)(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

fn component(context: &'static str) -> impl FnOnce(String) -> RuntimeError {
    move |message| RuntimeError::Component { context, message }
}

/// How long an open or an ingest waits for another process's catalog ingest before giving up,
/// so that a stuck process can never hang a host's hook.
const CATALOG_LOCK_WAIT_MAX_MS: u64 = 10_000;
/// Pause between two attempts at the catalog lock.
const CATALOG_LOCK_POLL_MS: u64 = 5;

/// A ctx-fs refusal of a data-directory path, as the runtime reports a failed file operation.
impl From<PrivateError> for RuntimeError {
    fn from(e: PrivateError) -> RuntimeError {
        match e {
            PrivateError::Io { path, source, .. } => RuntimeError::Io { path, source },
            other => RuntimeError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other(other),
            },
        }
    }
}

/// A held lock on the data directory's catalog: shared while a runtime loads it, exclusive while
/// an ingest replaces it. An ingest swaps the catalog directory with two renames; without the
/// lock a concurrent open could look between them and find no catalog, or two first ingests
/// could both rename into place and one fail.
pub(crate) struct CatalogLock {
    _lock: DirLock,
}

impl CatalogLock {
    /// Takes the lock (`exclusive` for an ingest), creating the data directory and its lock file
    /// when absent.
    pub(crate) fn acquire(layout: &Layout, exclusive: bool) -> Result<CatalogLock, RuntimeError> {
        create_private_dir_all(layout.root())?;
        let path = layout.root().join(".catalog.lock");
        let poll = Duration::from_millis(CATALOG_LOCK_POLL_MS);
        let mut options = LockOptions::new(Duration::from_millis(CATALOG_LOCK_WAIT_MAX_MS))
            .poll(poll, poll)
            .self_held_grace(Duration::ZERO);
        if !exclusive {
            options = options.shared();
        }
        match DirLock::acquire(&path, &options) {
            Ok(lock) => Ok(CatalogLock { _lock: lock }),
            Err(LockError::Held { .. }) => Err(RuntimeError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "another process held the catalog lock for more than {} s",
                        CATALOG_LOCK_WAIT_MAX_MS / 1_000
                    ),
                ),
            }),
            Err(LockError::Io { source, .. }) => Err(RuntimeError::Io { path, source }),
            Err(other) => Err(RuntimeError::Io {
                path,
                source: std::io::Error::other(other),
            }),
        }
    }
}

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
struct StoredWork {
    session_id: String,
    workspace_digest: String,
    signals: Vec<String>,
    languages: Vec<String>,
    requested_limit: u8,
    observed_at: UtcMicros,
    manifest_digest: String,
    planning_environment_digest: String,
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
    fn to_json(&self) -> Json {
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
    fn work_ref(&self) -> String {
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

    fn surrogate(&self) -> Surrogate {
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
#[derive(Debug)]
struct WorkDirAuthority {
    dir: PathBuf,
    registry: Arc<ArtifactRegistry>,
}

impl QueryInputAuthority for WorkDirAuthority {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError> {
        let unavailable = || InputAuthorityError::new("current-work reference is unavailable");
        if !is_token(current_work_ref) || !current_work_ref.starts_with("work-") {
            return Err(unavailable());
        }
        let path = self.dir.join(format!("{current_work_ref}.json"));
        let text = read_limited(&path, WORK_FILE_MAX_BYTES)
            .and_then(|bytes| utf8(&path, bytes))
            .map_err(|_| unavailable())?;
        let work = Json::parse(&text)
            .ok()
            .and_then(|v| StoredWork::from_json(&v).ok())
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

// ------------------------------------------------------------------------------------------------
// The body source of the skill store: the ingested catalog's install results
// ------------------------------------------------------------------------------------------------

#[derive(Debug)]
struct CatalogBodies {
    loaded: Arc<LoadedCatalog>,
}

impl SkillBodySource for CatalogBodies {
    fn load(&self, action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        // The skill store authenticates the text against the material identity, so the source
        // only has to find it.
        let capability_id = action.entity_id.as_deref().unwrap_or_default();
        self.loaded
            .install_result_text(capability_id)
            .map(str::to_owned)
            .ok_or_else(|| {
                BodySourceError::new(format!(
                    "the catalog has no install result for {capability_id:?}"
                ))
            })
    }
}

/// A benefit audit sink that acknowledges without storing; used only to compute the planning
/// environment digest of a planner identity.
#[derive(Debug)]
struct IdentitySink;

impl BenefitAuditSink for IdentitySink {
    fn store(&self, _result_json: &Json) -> Result<String, SinkError> {
        Err(SinkError::Unavailable("identity only".into()))
    }
}

// ------------------------------------------------------------------------------------------------
// Device keys
// ------------------------------------------------------------------------------------------------

/// A registered human device key: its identity and public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub authenticator_id: String,
    pub principal_digest: String,
    pub public_key_hex: String,
}

impl DeviceIdentity {
    fn of(signer: &Ed25519Signer) -> DeviceIdentity {
        let public_key_hex = hex(&signer.verifying_key_bytes());
        DeviceIdentity {
            authenticator_id: format!("ctx-device-{}", &public_key_hex[..16]),
            principal_digest: sha256_hex(&format!("ctx-principal:{public_key_hex}")),
            public_key_hex,
        }
    }

    pub fn to_json(&self) -> Json {
        Json::object([
            ("audience", Json::str(CONSENT_AUDIENCE)),
            ("authenticator_id", Json::str(&self.authenticator_id)),
            ("principal_digest", Json::str(&self.principal_digest)),
            ("public_key", Json::str(&self.public_key_hex)),
            ("schema", Json::str(VERIFIER_SCHEMA)),
        ])
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Generates a device key, writes its private file at `out` (mode 0600, never over an existing
/// file) and registers its public key in the data directory.
pub fn generate_device_key(layout: &Layout, out: &Path) -> Result<DeviceIdentity, RuntimeError> {
    let signer = Ed25519Signer::generate_from_os()
        .map_err(|e| RuntimeError::Invalid(format!("no randomness for a device key: {e}")))?;
    write_device_key(layout, out, &signer)
}

/// [`generate_device_key`] with a given signer (tests and the demo use fresh ones too).
pub(crate) fn write_device_key(
    layout: &Layout,
    out: &Path,
    signer: &Ed25519Signer,
) -> Result<DeviceIdentity, RuntimeError> {
    let identity = DeviceIdentity::of(signer);
    let private = Json::object([
        ("authenticator_id", Json::str(&identity.authenticator_id)),
        ("principal_digest", Json::str(&identity.principal_digest)),
        ("schema", Json::str(DEVICE_KEY_SCHEMA)),
        ("seed", Json::str(hex(&signer.seed_bytes()))),
    ]);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(io(out))?;
    file.write_all(private.to_string().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(out))?;
    register_device(layout, &identity)?;
    Ok(identity)
}

/// Registers a device's public key as a trusted verifier of the data directory (idempotent).
pub fn register_device(layout: &Layout, identity: &DeviceIdentity) -> Result<(), RuntimeError> {
    let dir = layout.verifiers();
    create_private_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", identity.authenticator_id));
    write_atomically(&path, identity.to_json().to_string().as_bytes())
}

/// Reads a device key file written by [`generate_device_key`].
pub fn read_device_key(path: &Path) -> Result<(Ed25519Signer, DeviceIdentity), RuntimeError> {
    let corrupt = |reason: &str| RuntimeError::Corrupt {
        path: path.to_path_buf(),
        what: "device key file",
        reason: reason.to_owned(),
    };
    let mut file = fs::File::open(path).map_err(io(path))?;
    let mode = file.metadata().map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(corrupt(&format!(
            "its mode is {:o}; a device key must be readable by its owner only (chmod 600)",
            mode & 0o777
        )));
    }
    let text = utf8(
        path,
        read_limited_file(&mut file, path, DEVICE_KEY_MAX_BYTES)?,
    )?;
    let value = Json::parse(&text).map_err(|e| corrupt(&e.to_string()))?;
    if value.get_str("schema") != Some(DEVICE_KEY_SCHEMA) {
        return Err(corrupt(&format!("its schema is not {DEVICE_KEY_SCHEMA}")));
    }
    let seed: [u8; 32] = value
        .get_str("seed")
        .and_then(unhex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| corrupt("its seed is not 64 hex digits"))?;
    let signer = Ed25519Signer::from_seed(&seed);
    let identity = DeviceIdentity::of(&signer);
    if value.get_str("authenticator_id") != Some(identity.authenticator_id.as_str()) {
        return Err(corrupt("its authenticator id does not belong to its key"));
    }
    Ok((signer, identity))
}

/// The verifier registry of every device key registered in the data directory, or `None` when
/// there is none.
fn verifier_registry(
    layout: &Layout,
) -> Result<Option<Arc<TrustedHumanDecisionVerifierRegistry>>, RuntimeError> {
    let dir = layout.verifiers();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut registrations = Vec::new();
    for path in paths {
        let corrupt = |reason: &str| RuntimeError::Corrupt {
            path: path.clone(),
            what: "verifier registration",
            reason: reason.to_owned(),
        };
        let text = utf8(&path, read_limited(&path, VERIFIER_REGISTRATION_MAX_BYTES)?)?;
        let value = Json::parse(&text).map_err(|e| corrupt(&e.to_string()))?;
        if value.get_str("schema") != Some(VERIFIER_SCHEMA) {
            return Err(corrupt(&format!("its schema is not {VERIFIER_SCHEMA}")));
        }
        let key: [u8; 32] = value
            .get_str("public_key")
            .and_then(unhex)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| corrupt("its public key is not 64 hex digits"))?;
        let verifier =
            Ed25519Verifier::from_public_key_bytes(&key).map_err(|e| corrupt(&e.to_string()))?;
        let registration = HumanDecisionVerifierRegistration::new(
            value.get_str("audience").unwrap_or_default(),
            value.get_str("authenticator_id").unwrap_or_default(),
            value.get_str("principal_digest").unwrap_or_default(),
            Arc::new(verifier),
        )
        .map_err(|e| corrupt(&e.to_string()))?;
        registrations.push(registration);
    }
    if registrations.is_empty() {
        return Ok(None);
    }
    let registry = TrustedHumanDecisionVerifierRegistry::new(registrations)
        .map_err(|e| component("the verifier registry refused")(e.to_string()))?;
    Ok(Some(Arc::new(registry)))
}

// ------------------------------------------------------------------------------------------------
// Files
// ------------------------------------------------------------------------------------------------

/// Writes `bytes` to `path` through a synced temporary file and a rename, then syncs the
/// directory: a reader sees the old file or the new one, never a part.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let dir = path.parent().ok_or_else(|| {
        RuntimeError::Invalid(format!("{} has no parent directory", path.display()))
    })?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    write_durable_with_temp(path, &tmp, bytes, FILE_MODE_PRIVATE).map_err(|e| match e {
        WriteError::Io { path, source, .. } => RuntimeError::Io { path, source },
        WriteError::NoParent { path } => {
            RuntimeError::Invalid(format!("{} has no parent directory", path.display()))
        }
        other => RuntimeError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(other),
        },
    })
}

// ------------------------------------------------------------------------------------------------
// The runtime
// ------------------------------------------------------------------------------------------------

/// The managed query service of one data directory, and what it was composed from.
pub struct Runtime {
    layout: Layout,
    loaded: Arc<LoadedCatalog>,
    registry: Arc<ArtifactRegistry>,
    facts: Arc<CatalogBenefitFacts>,
    policy: NetBenefitPolicy,
    planning_environment_digest: String,
    clock: Arc<ManualClock>,
    policy_store: InstallPolicyStore,
    service: QueryService,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("root", &self.layout.root())
            .finish_non_exhaustive()
    }
}

/// The consent broker identity of a data directory. The directory is named by its canonical path
/// (when it exists), so two spellings of one directory (a symlink, `..`) bind the same challenges.
pub fn consent_config(layout: &Layout) -> ConsentBrokerConfig {
    let root = layout
        .root()
        .canonicalize()
        .unwrap_or_else(|_| layout.root().to_path_buf());
    ConsentBrokerConfig {
        audience: CONSENT_AUDIENCE.to_owned(),
        workspace_identity_digest: sha256_hex(&format!("ctx-data-dir:{}", root.display())),
        release_root_digest: sha256_hex("ctx-release-root-v1"),
    }
}

impl Runtime {
    /// Composes the service of `layout`'s data directory at the trusted time `now`.
    pub fn open(layout: &Layout, now: UtcMicros) -> Result<Runtime, RuntimeError> {
        let catalog_dir = layout.catalog();
        // A missing data directory has no catalog; the lock below would create the directory.
        if !layout.root().is_dir() {
            return Err(RuntimeError::NoCatalog { path: catalog_dir });
        }
        let loaded = {
            let _catalog = CatalogLock::acquire(layout, false)?;
            if !catalog_dir.join("catalog.json").is_file() {
                return Err(RuntimeError::NoCatalog { path: catalog_dir });
            }
            Arc::new(
                load_catalog_dir(&catalog_dir)
                    .map_err(|e| component("the ingested catalog does not load")(e.to_string()))?,
            )
        };
        let catalog = Arc::new(loaded.catalog().clone());
        let facts = Arc::new(CatalogBenefitFacts::new(catalog.clone()));
        let ports = AdapterPorts::from_catalog(catalog.clone());
        let policy = NetBenefitPolicy::new(&sha256_hex("ctx-default-calibration-v1"), 1);
        let planning_environment_digest = ReplayDecisionPlanner::new(
            AuthenticatedNetBenefitPlanner::new(policy.clone(), IdentitySink)
                .map_err(|e| component("the planner refused")(e.to_string()))?,
            ports.clone(),
            PLANNER_VERSION,
            catalog.namespace_digest(),
        )
        .map_err(|e| component("the planner refused")(e.to_string()))?
        .catalog_snapshot_digest()
        .to_owned();
        for dir in [
            layout.root().to_path_buf(),
            layout.registry(),
            layout.work(),
            layout.skills(),
            layout.materials(),
        ] {
            create_private_dir_all(&dir)?;
        }
        let registry = Arc::new(
            ArtifactRegistry::open(&layout.registry())
                .map_err(|e| component("the artifact registry refused")(e.to_string()))?,
        );
        let policy_store = InstallPolicyStore::new(&layout.install_policy())
            .map_err(|e| component("the install policy store refused")(e.to_string()))?;
        let bodies: Arc<dyn SkillBodySource> = Arc::new(CatalogBodies {
            loaded: loaded.clone(),
        });
        let skill_cas = SkillCasRuntimeConfig::new(
            &layout.skills(),
            bodies.clone(),
            INSTALLER_ID,
            &sha256_hex("ctx-host:cli"),
        )
        .map_err(|e| component("the skill store refused")(e.to_string()))?;
        let material_store = SkillCasRuntimeConfig::new(
            &layout.materials(),
            bodies,
            INSTALLER_ID,
            &sha256_hex("ctx-host:cli"),
        )
        .map_err(|e| component("the material store refused")(e.to_string()))?
        .with_gate(CasGate::Materials);
        let clock = Arc::new(ManualClock::new(now));
        let service_clock: Arc<dyn Clock> = clock.clone();
        let service = open_query_service(QueryServiceConfig {
            data_dir: layout.journal(),
            registry: registry.clone(),
            input_authority: Arc::new(WorkDirAuthority {
                dir: layout.work(),
                registry: registry.clone(),
            }),
            ports,
            net_benefit_policy: policy.clone(),
            planner_version: PLANNER_VERSION.to_owned(),
            clock: service_clock,
            policy_store_root: Some(layout.install_policy()),
            skill_cas: Some(Arc::new(skill_cas)),
            material_store: Some(Arc::new(material_store)),
            consent: Some(consent_config(layout)),
            verifier_registry: verifier_registry(layout)?,
        })?;
        Ok(Runtime {
            layout: layout.clone(),
            loaded,
            registry,
            facts,
            policy,
            planning_environment_digest,
            clock,
            policy_store,
            service,
        })
    }

    pub fn service(&self) -> &QueryService {
        &self.service
    }

    pub fn policy_store(&self) -> &InstallPolicyStore {
        &self.policy_store
    }

    pub fn loaded(&self) -> &LoadedCatalog {
        &self.loaded
    }

    pub fn now(&self) -> UtcMicros {
        self.clock.now().unwrap_or(UtcMicros(0))
    }

    /// Records a work observation (binding it to an artifact of the current catalog) and returns
    /// its current-work reference.
    pub fn observe_work(&self, request: &WorkRequest) -> Result<String, RuntimeError> {
        if !is_token(&request.session_id) {
            return Err(RuntimeError::Invalid(format!(
                "session_id {:?} must be a token of letters, digits and . _ : @ - (at most 128)",
                request.session_id
            )));
        }
        if !Path::new(&request.workspace).is_absolute() {
            return Err(RuntimeError::Invalid(format!(
                "workspace {:?} must be an absolute path",
                request.workspace
            )));
        }
        if !(1..=5).contains(&request.requested_limit) {
            return Err(RuntimeError::Invalid(format!(
                "requested_limit {} must be between 1 and 5",
                request.requested_limit
            )));
        }
        let tags: BTreeSet<&str> = self
            .loaded
            .catalog()
            .entries()
            .iter()
            .flat_map(|e| e.tags.iter().map(String::as_str))
            .collect();
        let prompt = truncate(&request.prompt, WORK_PROMPT_MAX_BYTES);
        let words: BTreeSet<String> = tokenize(prompt, TokenRule::Words).into_iter().collect();
        let mut signals: BTreeSet<String> = words
            .iter()
            .filter(|w| tags.contains(w.as_str()))
            .cloned()
            .collect();
        for signal in &request.signals {
            if !ctx_model::is_safe_token(signal) {
                return Err(RuntimeError::Invalid(format!(
                    "signal {signal:?} must be a lowercase token"
                )));
            }
            signals.insert(signal.clone());
        }
        let signals: Vec<String> = signals.into_iter().take(SIGNALS_MAX_TOKENS).collect();
        let languages: Vec<String> = if request.languages.is_empty() {
            words
                .iter()
                .filter_map(|w| language(w, Spellings::Canonical))
                .map(str::to_owned)
                .collect()
        } else {
            let set: BTreeSet<String> = request.languages.iter().cloned().collect();
            set.into_iter().collect()
        };
        if let Some(bad) = languages.iter().find(|l| !ctx_model::is_safe_token(l)) {
            return Err(RuntimeError::Invalid(format!(
                "language {bad:?} must be a lowercase token"
            )));
        }
        let mut work = StoredWork {
            session_id: request.session_id.clone(),
            workspace_digest: sha256_hex(&format!("ctx-workspace:{}", request.workspace)),
            signals,
            languages,
            requested_limit: request.requested_limit,
            observed_at: self.now(),
            manifest_digest: String::new(),
            planning_environment_digest: self.planning_environment_digest.clone(),
        };
        let artifact = self
            .registry
            .ingest(
                &self.loaded,
                IngestInputs {
                    planning_environment_digest: self.planning_environment_digest.clone(),
                    catalog_namespace_digest: self.loaded.catalog().namespace_digest().to_owned(),
                    catalog_retrieval_digest: self
                        .loaded
                        .catalog()
                        .retrieval_snapshot_digest()
                        .to_owned(),
                    benefit_facts_snapshot_digest: self
                        .facts
                        .benefit_facts_snapshot_digest()
                        .to_owned(),
                    benefit_policy_snapshot_digest: self.policy.policy_digest(),
                    material_snapshot_digest: self
                        .loaded
                        .catalog()
                        .material_snapshot_digest()
                        .to_owned(),
                    installation_snapshot_digest: self
                        .loaded
                        .catalog()
                        .installation_snapshot_digest()
                        .to_owned(),
                    observation_surrogate: work.surrogate(),
                    planning_schema_version: PLANNER_VERSION.to_owned(),
                },
            )
            .map_err(|e| component("the artifact registry refused the work")(e.to_string()))?;
        work.manifest_digest = artifact.manifest_digest().to_owned();
        let work_ref = work.work_ref();
        let path = self.layout.work().join(format!("{work_ref}.json"));
        // An observation already stored keeps its first time, so its events never change.
        if !path.exists() {
            write_atomically(&path, work.to_json().to_string().as_bytes())?;
        }
        Ok(work_ref)
    }
}

/// The consent challenge `challenge_digest` of this data directory's broker as it stands at
/// `now` (pending, decided or expired).
pub fn challenge_record(
    layout: &Layout,
    challenge_digest: &str,
    now: UtcMicros,
) -> Result<ChallengeRecord, ServiceError> {
    // The runtime has opened the journal in this process; this open shares it.
    let journal = crate::journal_store::open_journal(&layout.journal(), &OpenOptions::new())?;
    let store = ConsentStore::open(Arc::new(journal), CONSENT_AUDIENCE)?;
    let config = consent_config(layout);
    Ok(store.get_by_challenge_digest(
        challenge_digest,
        &config.workspace_identity_digest,
        &config.release_root_digest,
        now,
    )?)
}

/// Why no installer of a data directory — the skill store, and the material store of agents and
/// MCP servers — could ever install the catalog entry `capability_id`, or `None` when one can (or
/// the entry needs no install). Checked before a desired set: the service would publish a consent
/// challenge and claim the install, and the store's eligibility gate would then refuse it on every
/// attempt, leaving the claim indeterminate and the session busy.
pub fn uninstallable(loaded: &LoadedCatalog, capability_id: &str) -> Option<String> {
    use ctx_model::CapabilityKind;
    let entry = loaded
        .catalog()
        .entries()
        .iter()
        .find(|e| e.id == capability_id)?;
    let install = entry.install.as_ref()?;
    let kind = entry.kind.as_str();
    let (pe, cr) = (install.permission_expansion, install.credential_requirement);
    if CasGate::Skills.admits(kind, pe, cr) || CasGate::Materials.admits(kind, pe, cr) {
        return None;
    }
    Some(if kind == CapabilityKind::Skill.as_str() {
        "the skill store installs no skill that expands permissions or needs credentials".to_owned()
    } else {
        format!(
            "no {kind} installer is configured (skills, agents and MCP servers are installed here)"
        )
    })
}

/// A logical id (a lowercase SHA-256 digest) for a host's label of a query or a choice.
pub fn logical_id(kind: &str, label: &str) -> String {
    sha256_hex_bytes(format!("ctx-{kind}:{label}").as_bytes())
}

#[cfg(test)]
mod tests {
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
