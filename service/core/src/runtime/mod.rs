//! The runtime of one data directory: the managed query service composed from the files a
//! [`Layout`] names — the ingested catalog, the artifact registry, the install policy store, the
//! skill content-addressed store, the registered human device keys and the work observations —
//! for a process that lives as long as one `ctx` command (spec/cli.md §2 and §4).
//!
//! Everything here is deterministic given the files and the clock the process passes in: two
//! processes that observe the same work get the same work reference, artifact and events, so a
//! retried command is an idempotent retry of the service call.
//!
//! This module holds the composition itself ([`Runtime`], the consent broker identity, the skill
//! store's body source), [`RuntimeError`] and the file helpers its parts share; the parts are
//! `device` (device keys and the verifier registry, spec/cli.md §4, spec/decisions.md §6–§7),
//! `work` (stored work observations, spec/cli.md §4) and `catalog_lock` (spec/cli.md §2).

mod catalog_lock;
mod delegated;
mod device;
mod identity;
mod leftovers;
mod work;

pub(crate) use catalog_lock::CatalogLock;
use device::verifier_registry;
pub use device::{
    DEVICE_KEY_MAX_BYTES, DeviceKeyFile, fresh_signer, read_device_key, write_plain_key,
    write_sealed_key,
};
pub use identity::{
    IdentityDerivation, STORE_TARGET_SCHEMA, WORKSPACE_IDENTITY_MAX_BYTES,
    WORKSPACE_IDENTITY_SCHEMA, WorkspaceIdentity, WorkspaceIdentityError,
    legacy_path_identity_digest, store_target_identity_digest, workspace_identity,
};
pub use leftovers::{LEFTOVER_AGE_MAX_SECS, SweepReport, sweep_work};
use work::{StoredWork, WorkDirAuthority};
pub use work::{WORK_FILE_MAX_BYTES, WORK_PROMPT_MAX_BYTES, WorkRequest};

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_fs::{PrivateError, ReadError, create_private_dir_all, read_bounded_file};

use ctx_journal::OpenOptions;
use ctx_model::{
    HostAction, INSTALLER_ID, Json, UtcMicros, is_token, sha256_hex, sha256_hex_bytes,
};
use ctx_projections::consent_store::{ChallengeRecord, ConsentStore, SignedHumanDecisionAssertion};
use ctx_projections::engine::{Clock, ManualClock};

use crate::catalog::{
    Catalog, SIGNALS_MAX_TOKENS, Spellings, TokenRule, language, load_catalog_dir,
    load_catalog_entries, tokenize, truncate,
};
use crate::data_dir::Layout;
use crate::managed::{
    ConsentBrokerConfig, ConsentResolutionResult, QueryService, QueryServiceConfig, ServiceError,
    open_query_service,
};
use crate::planning::adapter::{AdapterPorts, ReplayDecisionPlanner};
use crate::planning::benefit::NetBenefitPolicy;
use crate::planning::plan::{AuthenticatedNetBenefitPlanner, BenefitAuditSink, SinkError};
use crate::planning::ports::{BenefitFactsPort, CatalogBenefitFacts};
use crate::policy::InstallPolicyStore;
use crate::registry::{ArtifactRegistry, IngestInputs};
use crate::skill_cas::{BodySourceError, CasGate, SkillBodySource, SkillCasRuntimeConfig};
use crate::trust::{
    Assurance, TrustError, TrustState, VerifierKind, WebAuthnCredential, WebAuthnProof,
    check_sign_count, read_trust, required_assurance,
};

/// The planner version every artifact of this runtime binds.
pub const PLANNER_VERSION: &str = "ctx-planner-v3";
/// The audience human decisions are signed for.
pub const CONSENT_AUDIENCE: &str = "ctx-managed-query";

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
    /// The verifier registry does not verify, or refused a change.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The decision was made on an authenticator weaker than the install needs
    /// (spec/decisions.md §12.4).
    #[error(
        "{capability_id} needs a decision of at least {required} assurance, and {authenticator_id} \
         is a {kind} of {has} assurance; decide with a sealed device key or a passkey"
    )]
    AssuranceTooLow {
        capability_id: String,
        authenticator_id: String,
        kind: &'static str,
        has: Assurance,
        required: Assurance,
    },
    /// A passkey decision whose signature counter does not grow (spec/webauthn.md §6).
    #[error("passkey {authenticator_id} is refused: {source}")]
    PasskeyCounter {
        authenticator_id: String,
        source: crate::trust::WebAuthnError,
    },
    /// The install policy grants installs by itself and the person never approved it.
    #[error(
        "the install policy {policy_digest} grants installs without asking, and no registered \
         verifier approved it; the person sets such a policy with `ctx policy set` in their own \
         terminal"
    )]
    UnapprovedPolicy { policy_digest: String },
    /// The data directory's workspace identity could not be read or created (spec/cli.md §2).
    #[error(transparent)]
    WorkspaceIdentity(#[from] WorkspaceIdentityError),
    /// The work observation could not be recorded in the journal (spec/cli.md §4).
    #[error("the work observation {work_ref} could not be recorded in the journal: {source}")]
    WorkRecord {
        work_ref: String,
        source: Box<ctx_journal::AppendError>,
    },
}

impl RuntimeError {
    /// The stable wire code (spec/cli.md §4): a service refusal keeps its own code
    /// ([`crate::ServiceError::code`]); a data directory without a catalog is `no-catalog`.
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::Service(e) => e.code(),
            RuntimeError::NoCatalog { .. } => "no-catalog",
            RuntimeError::Invalid(_) => "invalid",
            RuntimeError::Trust(TrustError::Invalid { .. }) => "integrity",
            RuntimeError::Trust(TrustError::Raced { .. }) => "conflict",
            RuntimeError::Trust(_) => "refused",
            RuntimeError::AssuranceTooLow { .. }
            | RuntimeError::UnapprovedPolicy { .. }
            | RuntimeError::PasskeyCounter { .. } => "refused",
            RuntimeError::WorkspaceIdentity(e) => e.code(),
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

// ------------------------------------------------------------------------------------------------
// The body source of the skill store: the ingested catalog's install results
// ------------------------------------------------------------------------------------------------

#[derive(Debug)]
struct CatalogBodies {
    catalog: Arc<Catalog>,
    dir: PathBuf,
}

impl SkillBodySource for CatalogBodies {
    fn load(&self, action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        // The one body an install needs is read and verified against the catalog now
        // (spec/catalog.md §8.4); the skill store then authenticates the text against the
        // material identity the consent names.
        let capability_id = action.entity_id.as_deref().unwrap_or_default();
        let loaded =
            load_catalog_entries(&self.dir, &self.catalog, &[capability_id]).map_err(|e| {
                BodySourceError::new(format!(
                    "the install result of {capability_id:?} does not verify: {e}"
                ))
            })?;
        loaded
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
// Files
// ------------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------------
// The runtime
// ------------------------------------------------------------------------------------------------

/// The managed query service of one data directory, and what it was composed from.
pub struct Runtime {
    layout: Layout,
    catalog: Arc<Catalog>,
    registry: Arc<ArtifactRegistry>,
    facts: Arc<CatalogBenefitFacts>,
    policy: NetBenefitPolicy,
    planning_environment_digest: String,
    clock: Arc<ManualClock>,
    policy_store: InstallPolicyStore,
    trust: TrustState,
    service: QueryService,
    /// The delegated decisions this process checked (spec/decisions.md §16.3).
    admissions: delegated::Admissions,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("root", &self.layout.root())
            .finish_non_exhaustive()
    }
}

/// The consent broker identity of a data directory: its workspace identity is the one stored in
/// the directory ([`workspace_identity`], spec/cli.md §2), created at its first open, so every
/// spelling of the directory (a symlink, `..`) and every copy or move of it binds the same
/// challenges. `journal` is the directory's journal, asked only at the first open whether an
/// earlier version already bound challenges to the directory's path.
pub fn consent_config(
    layout: &Layout,
    journal: &ctx_journal::Journal,
) -> Result<ConsentBrokerConfig, WorkspaceIdentityError> {
    Ok(broker_config(&workspace_identity(layout, journal)?))
}

/// The consent broker identity of a data directory whose workspace identity is `identity`.
fn broker_config(identity: &WorkspaceIdentity) -> ConsentBrokerConfig {
    ConsentBrokerConfig {
        audience: CONSENT_AUDIENCE.to_owned(),
        workspace_identity_digest: identity.digest.clone(),
        release_root_digest: sha256_hex("ctx-release-root-v1"),
    }
}

/// `store`, its execution bindings naming it by the data directory's identity (`name`, the
/// store's name in [`store_target_identity_digest`]) unless the directory is of an earlier
/// version.
fn named_store(
    store: SkillCasRuntimeConfig,
    identity: &WorkspaceIdentity,
    name: &str,
) -> Result<SkillCasRuntimeConfig, crate::skill_cas::SkillCasError> {
    match store_target_identity_digest(identity, name) {
        Some(digest) => store.with_target_identity(&digest),
        None => Ok(store),
    }
}

impl Runtime {
    /// Composes the service of `layout`'s data directory at the trusted time `now`. Refuses a
    /// current install policy that grants installs by itself unless the person approved it
    /// (spec/decisions.md §14.4).
    pub fn open(layout: &Layout, now: UtcMicros) -> Result<Runtime, RuntimeError> {
        Runtime::compose(layout, now, true)
    }

    /// [`Runtime::open`] without the policy check: only to show or replace the policy.
    pub fn open_for_policy(layout: &Layout, now: UtcMicros) -> Result<Runtime, RuntimeError> {
        Runtime::compose(layout, now, false)
    }

    fn compose(
        layout: &Layout,
        now: UtcMicros,
        gate_policy: bool,
    ) -> Result<Runtime, RuntimeError> {
        let catalog_dir = layout.catalog();
        // A missing data directory has no catalog; the lock below would create the directory.
        if !layout.root().is_dir() {
            return Err(RuntimeError::NoCatalog { path: catalog_dir });
        }
        let catalog = {
            let _catalog = CatalogLock::acquire(layout, false)?;
            if !catalog_dir.join("catalog.json").is_file() {
                return Err(RuntimeError::NoCatalog { path: catalog_dir });
            }
            // The projection ingest wrote beside the catalog (spec/catalog.md §8.4); a data
            // directory ingested before projections existed, or one whose projection this build
            // refuses, is served from the catalog JSON until the next ingest rewrites it.
            match Catalog::open_projection(&catalog_dir) {
                Ok(catalog) => Arc::new(catalog),
                Err(_) => Arc::new(
                    load_catalog_dir(&catalog_dir)
                        .map_err(|e| {
                            component("the ingested catalog does not load")(e.to_string())
                        })?
                        .catalog()
                        .clone(),
                ),
            }
        };
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
        // What interrupted ingests and writes left behind goes before anything new is written
        // (spec/cli.md §2).
        leftovers::sweep_root(layout, now);
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
        // The registry is re-verified on every open (spec/decisions.md §14): a forged or altered
        // change refuses the whole data directory rather than trusting part of it.
        let (trust, identity) = {
            let journal = crate::managed::open_service_journal(&layout.journal())?;
            (read_trust(&journal)?, workspace_identity(layout, &journal)?)
        };
        // A policy store this process cannot read grants nothing either: the service refuses
        // every use of it, so only a readable granting policy needs the person's approval here.
        if gate_policy
            && policy_store.has_persisted().unwrap_or(false)
            && let Ok(current) = policy_store.load_current()
            && grants_by_itself(&current)
            && !trust.policy_approved(&current.policy_digest())
        {
            return Err(RuntimeError::UnapprovedPolicy {
                policy_digest: current.policy_digest(),
            });
        }
        let bodies: Arc<dyn SkillBodySource> = Arc::new(CatalogBodies {
            catalog: catalog.clone(),
            dir: catalog_dir.clone(),
        });
        let skill_cas = SkillCasRuntimeConfig::new(
            &layout.skills(),
            bodies.clone(),
            INSTALLER_ID,
            &sha256_hex("ctx-host:cli"),
        )
        .and_then(|store| named_store(store, &identity, "skills"))
        .map_err(|e| component("the skill store refused")(e.to_string()))?;
        let material_store = SkillCasRuntimeConfig::new(
            &layout.materials(),
            bodies,
            INSTALLER_ID,
            &sha256_hex("ctx-host:cli"),
        )
        .and_then(|store| named_store(store, &identity, "materials"))
        .map_err(|e| component("the material store refused")(e.to_string()))?
        .with_gate(CasGate::Materials);
        let clock = Arc::new(ManualClock::new(now));
        let admissions = delegated::Admissions::default();
        let service_clock: Arc<dyn Clock> = clock.clone();
        let service = open_query_service(QueryServiceConfig {
            data_dir: layout.journal(),
            registry: registry.clone(),
            input_authority: Arc::new(WorkDirAuthority {
                dir: layout.work(),
                journal_dir: layout.journal(),
                registry: registry.clone(),
            }),
            ports,
            net_benefit_policy: policy.clone(),
            planner_version: PLANNER_VERSION.to_owned(),
            clock: service_clock,
            policy_store_root: Some(layout.install_policy()),
            skill_cas: Some(Arc::new(skill_cas)),
            material_store: Some(Arc::new(material_store)),
            consent: Some(broker_config(&identity)),
            verifier_registry: verifier_registry(&trust, &admissions)?,
        })?;
        Ok(Runtime {
            layout: layout.clone(),
            catalog,
            registry,
            facts,
            policy,
            planning_environment_digest,
            clock,
            policy_store,
            trust,
            service,
            admissions,
        })
    }

    /// The verifier registry as verified when this runtime opened.
    pub fn trust(&self) -> &TrustState {
        &self.trust
    }

    /// Resolves a signed consent decision after checking that its authenticator is strong
    /// enough for what the challenge installs (spec/decisions.md §12.4). `hook_published` tells
    /// whether a challenge's session is one an agent host's hook opened (the caller knows the
    /// hosts; this layer names none).
    pub fn resolve_consent(
        &self,
        assertion_payload: &[u8],
        hook_published: &dyn Fn(&str) -> bool,
    ) -> Result<ConsentResolutionResult, RuntimeError> {
        let assertion = SignedHumanDecisionAssertion::decode(assertion_payload)
            .map_err(|e| RuntimeError::Service(e.into()))?;
        if let Some(registered) = self.trust.find(assertion.authenticator_id()) {
            let record = challenge_record(&self.layout, assertion.challenge_digest(), self.now())?;
            let challenge = record.challenge();
            let required = required_assurance(
                crate::trust::capability_kind_of(challenge.capability_id()),
                challenge.permission_expansion(),
                challenge.credential_requirement(),
                hook_published(&challenge.scope().session_id),
            );
            let has = registered.entry.assurance();
            if has < required {
                return Err(RuntimeError::AssuranceTooLow {
                    capability_id: challenge.capability_id().to_owned(),
                    authenticator_id: registered.entry.authenticator_id.clone(),
                    kind: registered.entry.kind.as_str(),
                    has,
                    required,
                });
            }
            // The evidence goes in before the decision (spec/decisions.md §12.5), and only for a
            // signature that verifies: an attempt with a forged one is refused below without
            // leaving anything behind. A passkey's counter is judged only on a verified proof.
            if registered.entry.verifies(&assertion) {
                let journal = crate::managed::open_service_journal(&self.layout.journal())?;
                if registered.entry.kind == VerifierKind::Passkey {
                    let last = crate::trust::highest_passkey_counter(
                        &journal,
                        &registered.entry.authenticator_id,
                    )?;
                    check_passkey_counter(&registered.entry, &assertion, last)?;
                }
                crate::trust::record_decision_evidence(
                    &journal,
                    &assertion,
                    &registered.entry,
                    required,
                    ctx_journal::Timestamp(self.now().0),
                )?;
            }
        }
        // An unknown authenticator or a forged signature is the service's to refuse
        // (`unverifiable`).
        let result = self.service.resolve_consent(assertion_payload)?;
        // A signed grant whose material was installed may stand for later challenges of the same
        // exact install (spec/decisions.md §16.3); the index only points at it.
        if assertion.decision().as_str() == "granted"
            && result.outcome() == "installed-inactive"
            && crate::trust::DelegatedBasis::of_proof(assertion.proof()).is_none()
            && let Ok(record) =
                challenge_record(&self.layout, assertion.challenge_digest(), self.now())
        {
            let journal = crate::managed::open_service_journal(&self.layout.journal())?;
            crate::trust::record_install_grant(
                &journal,
                record.challenge(),
                ctx_journal::Timestamp(self.now().0),
            )?;
        }
        Ok(result)
    }

    pub fn service(&self) -> &QueryService {
        &self.service
    }

    pub fn policy_store(&self) -> &InstallPolicyStore {
        &self.policy_store
    }

    /// The ingested catalog (spec/catalog.md §8.4: entries are read as they are asked for).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The directory of the ingested catalog, where its bodies are.
    pub fn catalog_dir(&self) -> PathBuf {
        self.layout.catalog()
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
        let prompt = truncate(&request.prompt, WORK_PROMPT_MAX_BYTES);
        let words: BTreeSet<String> = tokenize(prompt, TokenRule::Words).into_iter().collect();
        let mut signals: BTreeSet<String> = words
            .iter()
            .filter(|w| self.catalog.knows_word(w))
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
            .ingest_from_dir(
                &self.catalog,
                &self.layout.catalog(),
                IngestInputs {
                    planning_environment_digest: self.planning_environment_digest.clone(),
                    catalog_namespace_digest: self.catalog.namespace_digest().to_owned(),
                    catalog_retrieval_digest: self.catalog.retrieval_snapshot_digest().to_owned(),
                    benefit_facts_snapshot_digest: self
                        .facts
                        .benefit_facts_snapshot_digest()
                        .to_owned(),
                    benefit_policy_snapshot_digest: self.policy.policy_digest(),
                    material_snapshot_digest: self.catalog.material_snapshot_digest().to_owned(),
                    installation_snapshot_digest: self
                        .catalog
                        .installation_snapshot_digest()
                        .to_owned(),
                    observation_surrogate: work.surrogate(),
                    planning_schema_version: PLANNER_VERSION.to_owned(),
                },
            )
            .map_err(|e| component("the artifact registry refused the work")(e.to_string()))?;
        work.manifest_digest = artifact.manifest_digest().to_owned();
        let work_ref = work.work_ref();
        // An observation already stored keeps its first time, so its events never change: one
        // an earlier version filed stands, and the journal keeps a recorded one's first record.
        if !work::is_filed(&self.layout.work(), &work_ref) {
            let journal = crate::managed::open_service_journal(&self.layout.journal())?;
            work::record_work(&journal, &work_ref, &work).map_err(|source| {
                RuntimeError::WorkRecord {
                    work_ref: work_ref.clone(),
                    source: Box::new(source),
                }
            })?;
        }
        Ok(work_ref)
    }
}

/// spec/webauthn.md §6: the counter a passkey decision claims must be above the one recorded at
/// registration and every counter an earlier decision of the credential showed (`decided`, read
/// from the decision evidence, spec/decisions.md §12.5). It runs only on a verified proof.
fn check_passkey_counter(
    entry: &crate::trust::VerifierEntry,
    assertion: &SignedHumanDecisionAssertion,
    decided: Option<u32>,
) -> Result<(), RuntimeError> {
    let refused = |source| RuntimeError::PasskeyCounter {
        authenticator_id: entry.authenticator_id.clone(),
        source,
    };
    let credential = WebAuthnCredential::from_bytes(&entry.public_key).map_err(refused)?;
    if let Some(seen) = WebAuthnProof::decode(assertion.proof())
        .ok()
        .and_then(|proof| proof.sign_count())
    {
        let last = credential.sign_count.max(decided.unwrap_or(0));
        check_sign_count(last, seen).map_err(refused)?;
    }
    Ok(())
}

/// True when `policy` grants some install without asking the person.
pub fn grants_by_itself(policy: &crate::policy::InstallConsentPolicy) -> bool {
    [policy.skill_mode, policy.agent_mode, policy.mcp_server_mode]
        .contains(&crate::policy::InstallConsentMode::PreapprovedAuto)
}

/// The consent challenge `challenge_digest` of this data directory's broker as it stands at
/// `now` (pending, decided or expired).
pub fn challenge_record(
    layout: &Layout,
    challenge_digest: &str,
    now: UtcMicros,
) -> Result<ChallengeRecord, ServiceError> {
    ChallengeReader::open(layout)?.get(challenge_digest, now)
}

/// Reads many challenges of one data directory through one open consent store.
#[derive(Debug)]
pub struct ChallengeReader {
    store: ConsentStore,
    config: ConsentBrokerConfig,
}

impl ChallengeReader {
    pub fn open(layout: &Layout) -> Result<ChallengeReader, ServiceError> {
        // Another process (a second approval, a hook) may hold the directory for a moment:
        // wait for it as every other open does.
        let journal = crate::journal_store::open_journal(
            &layout.journal(),
            &OpenOptions::new().lock_wait(crate::managed::JOURNAL_LOCK_WAIT),
        )?;
        // The reader's callers report a service error; the identity's sentence is kept whole.
        let config =
            consent_config(layout, &journal).map_err(|e| ServiceError::Internal(e.to_string()))?;
        Ok(ChallengeReader {
            store: ConsentStore::open(Arc::new(journal), CONSENT_AUDIENCE)?,
            config,
        })
    }

    /// The challenge `challenge_digest` as it stands at `now`.
    pub fn get(
        &self,
        challenge_digest: &str,
        now: UtcMicros,
    ) -> Result<ChallengeRecord, ServiceError> {
        Ok(self.store.get_by_challenge_digest(
            challenge_digest,
            &self.config.workspace_identity_digest,
            &self.config.release_root_digest,
            now,
        )?)
    }
}

/// Why no installer of a data directory — the skill store, and the material store of agents and
/// MCP servers — could ever install the catalog entry `capability_id`, or `None` when one can (or
/// the entry needs no install). Checked before a desired set: the service would publish a consent
/// challenge and claim the install, and the store's eligibility gate would then refuse it on every
/// attempt, leaving the claim indeterminate and the session busy.
pub fn uninstallable(catalog: &Catalog, capability_id: &str) -> Option<String> {
    let entry = catalog.entry(capability_id)?;
    let install = entry.install.as_ref()?;
    let kind = entry.kind.as_str();
    let (pe, cr) = (install.permission_expansion, install.credential_requirement);
    if CasGate::Skills.admits(kind, pe, cr) || CasGate::Materials.admits(kind, pe, cr) {
        return None;
    }
    Some(format!(
        "no {kind} installer is configured (skills, agents and MCP servers are installed here)"
    ))
}

/// A logical id (a lowercase SHA-256 digest) for a host's label of a query or a choice.
pub fn logical_id(kind: &str, label: &str) -> String {
    sha256_hex_bytes(format!("ctx-{kind}:{label}").as_bytes())
}

/// Most challenges [`challenges`] returns: a listing for a person, bounded so that a directory
/// with a long history cannot make it unbounded.
pub const CHALLENGES_LIST_MAX: usize = 1_024;

/// Every consent challenge of this data directory's journal as it stands at `now`, oldest first
/// (at most [`CHALLENGES_LIST_MAX`], the newest kept): what `ctx consent pending` lists
/// (spec/cli.md §6). A challenge stream whose first record does not decode is skipped here; the
/// audit reports it.
pub fn challenges(layout: &Layout, now: UtcMicros) -> Result<Vec<ChallengeRecord>, ServiceError> {
    let journal = crate::journal_store::open_journal(
        &layout.journal(),
        &OpenOptions::new().lock_wait(crate::managed::JOURNAL_LOCK_WAIT),
    )?;
    let mut streams = Vec::new();
    journal
        .visit_streams(|info| {
            if info.first_kind.as_deref() == Some(ctx_projections::streams::CHALLENGE_KIND) {
                streams.push(info.stream);
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    let mut found = Vec::new();
    for stream in streams {
        let first = journal
            .read_stream(&stream, 1, 1)
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        let Some(challenge) = first
            .first()
            .and_then(|r| std::str::from_utf8(&r.payload).ok())
            .and_then(|text| {
                ctx_projections::consent_store::InstallConsentChallenge::from_json_text(text).ok()
            })
        else {
            continue;
        };
        let position = first.first().map_or(0, |r| r.position);
        found.push((position, challenge.challenge_digest().to_owned()));
    }
    drop(journal);
    found.sort();
    let skip = found.len().saturating_sub(CHALLENGES_LIST_MAX);
    let reader = ChallengeReader::open(layout)?;
    found
        .into_iter()
        .skip(skip)
        .map(|(_, digest)| reader.get(&digest, now))
        .collect()
}
