//! The Rust `_setup` of the seed's managed query service tests: a private temp dir, a small
//! catalog written for the test, a counting benefit-facts port, the registry ingest bound to the
//! planning-environment digest, the two planning events, an input authority and the service.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ctx_journal::Journal;
use ctx_model::{
    CURRENT_WORK_SCHEMA, EngineEvent, EventKind, HostAction, Json, ScopeRef, Surrogate, UtcMicros,
    sha256_hex, sha256_hex_bytes,
};
use ctx_projections::consent_store::ConsentStore;
use ctx_projections::engine::{Clock, ManualClock, engine_stream};
use ctx_projections::query_store::QueryStore;
use ctx_service::skill_cas::{BodySourceError, SkillBodySource, SkillCasRuntimeConfig};
use ctx_service::{
    AdapterPorts, ArtifactHandle, ArtifactRegistry, AuthenticatedNetBenefitPlanner,
    BenefitAuditSink, BenefitCandidate, BenefitFactsPort, CapabilityCandidate, CatalogBenefitFacts,
    ConsentBrokerConfig, IngestInputs, InputAuthorityError, InstallConsentMode,
    InstallConsentPolicy, InstallPolicyStore, LoadedCatalog, NetBenefitPolicy, PortError,
    QueryInput, QueryInputAuthority, QueryRequest, QueryService, QueryServiceConfig,
    ReplayDecisionPlanner, SinkError, WorkObservation, load_catalog_dir, open_query_service,
};

use crate::support;

pub const NOW: &str = "2026-08-03T12:00:00Z";
pub const PLANNER_VERSION: &str = "ctx-managed-service-planner-v3";
pub const INSTALLABLE_SKILL_BODY: &str = "---\nname: installable\ndescription: managed service install fixture\n---\nUse the managed service.\n";

/// The seed's six python capabilities.
pub const PYTHON_CAPABILITIES: [&str; 6] = [
    "agent:reviewer",
    "harness:python-runner",
    "mcp-server:docs",
    "skill:lint",
    "skill:test",
    "skill:types",
];

/// `_digest`: lowercase hex SHA-256 of the UTF-8 text.
pub fn digest(value: &str) -> String {
    sha256_hex(value)
}

pub fn scope() -> ScopeRef {
    ScopeRef {
        tenant_id: "tenant-1".to_owned(),
        workspace_id: "workspace-1".to_owned(),
        repository_id: "repository-1".to_owned(),
        session_id: "session-1".to_owned(),
        exposure_id: "exposure-1".to_owned(),
        host_context_id: "host-neutral".to_owned(),
        parent_exposure_id: None,
    }
}

/// `_surrogate`: the current-work surrogate the artifact binds.
pub fn surrogate(requested_limit: i64) -> Surrogate {
    Surrogate::new(
        CURRENT_WORK_SCHEMA,
        1,
        Json::object([
            ("active_capability_ids", Json::Arr(vec![])),
            ("baseline_capability_ids", Json::Arr(vec![])),
            ("languages", Json::Arr(vec![Json::str("python")])),
            ("rejected_capability_ids", Json::Arr(vec![])),
            ("requested_limit", Json::Int(requested_limit)),
            ("signals", Json::Arr(vec![Json::str("python")])),
        ]),
    )
}

// ------------------------------------------------------------------------------------------------
// Ports
// ------------------------------------------------------------------------------------------------

/// The default catalog facts port, counting every `benefit_candidate` call (the seed's
/// `facts.calls`) and able to report a drifted snapshot digest.
#[derive(Debug)]
pub struct CountingFacts {
    inner: CatalogBenefitFacts,
    drifted_digest: String,
    drifted: AtomicBool,
    calls: Mutex<Vec<String>>,
}

impl CountingFacts {
    pub fn new(inner: CatalogBenefitFacts) -> CountingFacts {
        CountingFacts {
            inner,
            drifted_digest: digest("drifted-facts"),
            drifted: AtomicBool::new(false),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The capability ids asked for so far, in call order.
    pub fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// From now on the port reports another snapshot digest.
    pub fn drift(&self) {
        self.drifted.store(true, Ordering::SeqCst);
    }
}

impl BenefitFactsPort for CountingFacts {
    fn benefit_facts_snapshot_digest(&self) -> &str {
        if self.drifted.load(Ordering::SeqCst) {
            &self.drifted_digest
        } else {
            self.inner.benefit_facts_snapshot_digest()
        }
    }

    fn benefit_candidate(
        &self,
        presentation: &CapabilityCandidate,
        observation: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(presentation.capability_id.clone());
        self.inner.benefit_candidate(presentation, observation)
    }
}

/// A sink that acknowledges every result: only used to compute the planning-environment digest.
#[derive(Debug)]
struct AckSink;

impl BenefitAuditSink for AckSink {
    fn store(&self, result_json: &Json) -> Result<String, SinkError> {
        result_json
            .get_str("result_digest")
            .map(str::to_owned)
            .ok_or_else(|| SinkError::Failed("no result digest".to_owned()))
    }
}

// ------------------------------------------------------------------------------------------------
// Input authority
// ------------------------------------------------------------------------------------------------

/// What a work reference resolves to: the artifact (re-issued per resolve through its registry,
/// since handles are not `Clone`) and the two events.
#[derive(Debug, Clone)]
pub struct InputSpec {
    pub registry: Arc<ArtifactRegistry>,
    pub manifest_digest: String,
    pub planning_environment_digest: String,
    pub session_started: EngineEvent,
    pub decision_event: EngineEvent,
}

impl InputSpec {
    pub fn handle(&self) -> ArtifactHandle {
        self.registry
            .reopen(&self.manifest_digest, &self.planning_environment_digest)
            .unwrap()
    }

    pub fn input(&self) -> QueryInput {
        QueryInput::new(
            self.handle(),
            self.session_started.clone(),
            self.decision_event.clone(),
        )
    }

    /// The same artifact with other events.
    pub fn with_events(&self, session_started: EngineEvent, decision_event: EngineEvent) -> Self {
        InputSpec {
            session_started,
            decision_event,
            ..self.clone()
        }
    }
}

/// `_InputAuthority`: a map from opaque work references to inputs, extendable by a test.
#[derive(Debug, Default)]
pub struct InputAuthority {
    values: Mutex<HashMap<String, InputSpec>>,
}

impl InputAuthority {
    pub fn insert(&self, work_ref: &str, spec: InputSpec) {
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(work_ref.to_owned(), spec);
    }
}

impl QueryInputAuthority for InputAuthority {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError> {
        let spec = self
            .values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(current_work_ref)
            .cloned();
        match spec {
            Some(spec) => Ok(spec.input()),
            None => Err(InputAuthorityError::new(
                "current-work reference is unavailable",
            )),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Catalog
// ------------------------------------------------------------------------------------------------

/// Writes a `ctx.catalog-v1` catalog of `capabilities` (all tagged `python`) into `dir`. With
/// `installable`, every capability carries a typed install plan whose result body is
/// [`INSTALLABLE_SKILL_BODY`]; otherwise every capability is manual, as the seed's material port
/// describes them.
fn write_catalog(
    dir: &Path,
    capabilities: &[String],
    installable: bool,
    permission_expansion: bool,
    credential_requirement: bool,
) {
    fs::create_dir_all(dir).unwrap();
    let body = INSTALLABLE_SKILL_BODY.as_bytes();
    let mut entries = Vec::new();
    for id in capabilities {
        let (kind, name) = id.split_once(':').unwrap();
        let mut fields = vec![
            ("id", Json::str(id.as_str())),
            ("kind", Json::str(kind)),
            ("label", Json::str(name)),
            ("tags", Json::Arr(vec![Json::str("python")])),
        ];
        if installable {
            let path = format!("skills/{name}/SKILL.md");
            let file = dir.join(&path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(&file, body).unwrap();
            fields.push((
                "install",
                Json::object([
                    (
                        "installer_id",
                        Json::str(format!("ctx-{kind}-installer-v1")),
                    ),
                    (
                        "plan_digest",
                        Json::str(digest(&format!("install-plan:{id}"))),
                    ),
                    ("permission_expansion", Json::Bool(permission_expansion)),
                    ("credential_requirement", Json::Bool(credential_requirement)),
                    (
                        "result",
                        Json::object([
                            ("path", Json::str(path)),
                            ("sha256", Json::str(sha256_hex_bytes(body))),
                            ("size_bytes", Json::Int(i64::try_from(body.len()).unwrap())),
                        ]),
                    ),
                ]),
            ));
        }
        entries.push(Json::object(fields));
    }
    let document = Json::object([
        ("schema", Json::str("ctx.catalog-v1")),
        ("namespace", Json::str("ctx.managed-service-test")),
        ("capabilities", Json::Arr(entries)),
    ]);
    fs::write(dir.join("catalog.json"), document.to_string()).unwrap();
}

// ------------------------------------------------------------------------------------------------
// Setup
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Options {
    pub requested_limit: i64,
    pub installable: bool,
    pub installable_count: usize,
    pub permission_expansion: bool,
    pub credential_requirement: bool,
    /// The trusted clock's start (the seed's `trusted_now`).
    pub trusted_now: UtcMicros,
    /// The test holds [`support::FailPoints`] (the exclusive side of the fail-point lock), so the
    /// setup must not take the shared side.
    pub failpoints: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            requested_limit: 5,
            installable: false,
            installable_count: 1,
            permission_expansion: false,
            credential_requirement: false,
            trusted_now: trusted_now(),
            failpoints: false,
        }
    }
}

/// The seed's `_BodySource`: serves [`INSTALLABLE_SKILL_BODY`], counts loads and can fail the
/// next `n` loads.
#[derive(Debug, Default)]
pub struct BodySource {
    load_calls: AtomicU64,
    fail_loads_remaining: AtomicU64,
}

impl BodySource {
    pub fn load_calls(&self) -> u64 {
        self.load_calls.load(Ordering::SeqCst)
    }

    pub fn fail_next_loads(&self, n: u64) {
        self.fail_loads_remaining.store(n, Ordering::SeqCst);
    }
}

impl SkillBodySource for BodySource {
    fn load(&self, _action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        self.load_calls.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .fail_loads_remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(BodySourceError::new("simulated body source failure"));
        }
        Ok(INSTALLABLE_SKILL_BODY.to_owned())
    }
}

pub const CONSENT_AUDIENCE: &str = "ctx-managed-query";

pub fn consent_config() -> ConsentBrokerConfig {
    ConsentBrokerConfig {
        audience: CONSENT_AUDIENCE.to_owned(),
        workspace_identity_digest: digest("managed-service-workspace"),
        release_root_digest: digest("managed-service-release-root"),
    }
}

/// `_Setup`.
pub struct Setup {
    /// Fail points are process-global: every service test holds the shared side of the lock
    /// unless it configures fail points itself.
    _shared: Option<std::sync::RwLockReadGuard<'static, ()>>,
    /// The temp dir that owns `root` (none when the caller owns the root: [`setup_at`]).
    pub dir: Option<tempfile::TempDir>,
    /// The canonical temp root (0700).
    pub root: PathBuf,
    /// The service's data directory (journal, query store, engine).
    pub data_dir: PathBuf,
    pub loaded: LoadedCatalog,
    pub registry: Arc<ArtifactRegistry>,
    pub artifact: ArtifactHandle,
    pub facts: Arc<CountingFacts>,
    pub ports: AdapterPorts,
    pub policy: NetBenefitPolicy,
    pub inputs: Arc<InputAuthority>,
    pub managed_input: InputSpec,
    pub clock: Arc<ManualClock>,
    /// The install policy root (the seed's `policy_root`) and a store handle on it.
    pub policy_root: PathBuf,
    pub policy_store: InstallPolicyStore,
    pub body_source: Arc<BodySource>,
    pub skill_root: PathBuf,
    pub skill_runtime: Arc<SkillCasRuntimeConfig>,
    pub service: QueryService,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

pub fn trusted_now() -> UtcMicros {
    UtcMicros::parse(NOW).unwrap()
}

/// `_events`: SessionStarted at revision 0 and IntentObserved at 1, bound to the artifact.
pub fn events(artifact: &ArtifactHandle) -> (EngineEvent, EngineEvent) {
    ctx_service::planning_events(
        artifact,
        &ctx_service::PlanningEventsSpec {
            scope: &scope(),
            occurred_at: NOW,
            session_event_id: "event-session-started",
            intent_event_id: "event-intent-observed",
            correlation_id: "plan-initial",
            session_causation_id: "cause-session",
            host_descriptor_digest: &digest("host-neutral-managing"),
            work_signature: &digest("managed-service-work"),
        },
    )
}

pub use ctx_service::observation_payload;

pub fn setup() -> Setup {
    setup_with(Options::default())
}

pub fn setup_limit(requested_limit: i64) -> Setup {
    setup_with(Options {
        requested_limit,
        ..Options::default()
    })
}

pub fn setup_with(options: Options) -> Setup {
    let dir = support::tempdir();
    let mut setup = setup_at(dir.path(), options);
    setup.dir = Some(dir);
    setup
}

/// [`setup_with`] on a root the caller owns. Deterministic: setting up twice on one root (as a
/// crash test's child and its parent do) yields the same catalog, artifact and configuration.
pub fn setup_at(root: &Path, options: Options) -> Setup {
    let shared = (!options.failpoints).then(support::shared);
    fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
    let root = root.canonicalize().unwrap();
    let capabilities: Vec<String> = if options.installable {
        (0..options.installable_count)
            .map(|i| {
                if i == 0 {
                    "skill:installable".to_owned()
                } else {
                    format!("skill:installable-{}", i + 1)
                }
            })
            .collect()
    } else {
        PYTHON_CAPABILITIES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    };
    let catalog_dir = root.join("catalog");
    write_catalog(
        &catalog_dir,
        &capabilities,
        options.installable,
        options.permission_expansion,
        options.credential_requirement,
    );
    let loaded = load_catalog_dir(&catalog_dir).unwrap();
    let catalog = Arc::new(loaded.catalog().clone());
    let facts = Arc::new(CountingFacts::new(CatalogBenefitFacts::new(
        catalog.clone(),
    )));
    let mut ports = AdapterPorts::from_catalog(catalog.clone());
    ports.facts = facts.clone();
    let policy = NetBenefitPolicy::new(&digest("managed-service-calibration"), 1);
    let identity = ReplayDecisionPlanner::new(
        AuthenticatedNetBenefitPlanner::new(policy.clone(), AckSink).unwrap(),
        ports.clone(),
        PLANNER_VERSION,
        catalog.namespace_digest(),
    )
    .unwrap();
    let planning_environment_digest = identity.catalog_snapshot_digest().to_owned();
    drop(identity);

    let registry = Arc::new(ArtifactRegistry::open(&root.join("registry")).unwrap());
    let artifact = registry
        .ingest(
            &loaded,
            IngestInputs {
                planning_environment_digest: planning_environment_digest.clone(),
                catalog_namespace_digest: catalog.namespace_digest().to_owned(),
                catalog_retrieval_digest: catalog.retrieval_snapshot_digest().to_owned(),
                benefit_facts_snapshot_digest: facts.benefit_facts_snapshot_digest().to_owned(),
                benefit_policy_snapshot_digest: policy.policy_digest(),
                material_snapshot_digest: catalog.material_snapshot_digest().to_owned(),
                installation_snapshot_digest: catalog.installation_snapshot_digest().to_owned(),
                observation_surrogate: surrogate(options.requested_limit),
                planning_schema_version: PLANNER_VERSION.to_owned(),
            },
        )
        .unwrap();
    let (started, intent) = events(&artifact);
    let managed_input = InputSpec {
        registry: registry.clone(),
        manifest_digest: artifact.manifest_digest().to_owned(),
        planning_environment_digest,
        session_started: started,
        decision_event: intent,
    };
    let inputs = Arc::new(InputAuthority::default());
    inputs.insert("work-one", managed_input.clone());
    let clock = Arc::new(ManualClock::new(options.trusted_now));
    let data_dir = root.join("private");
    support::route_seed_journal(&data_dir);
    let policy_root = root.join("install-policy");
    let policy_store = InstallPolicyStore::new(&policy_root).unwrap();
    let skill_root = root.join("skills");
    fs::create_dir_all(&skill_root).unwrap();
    fs::set_permissions(&skill_root, fs::Permissions::from_mode(0o700)).unwrap();
    let body_source = Arc::new(BodySource::default());
    let skill_runtime = Arc::new(skill_runtime(&skill_root, &body_source));
    let mut service_config = config(&data_dir, &registry, &inputs, &ports, &policy, &clock);
    service_config.policy_store_root = Some(policy_root.clone());
    service_config.skill_cas = Some(skill_runtime.clone());
    service_config.consent = Some(consent_config());
    service_config.verifier_registry = Some(verifier_registry());
    let service = open_query_service(service_config).unwrap();
    Setup {
        _shared: shared,
        dir: None,
        root,
        data_dir,
        loaded,
        registry,
        artifact,
        facts,
        ports,
        policy,
        inputs,
        managed_input,
        clock,
        policy_root,
        policy_store,
        body_source,
        skill_root,
        skill_runtime,
        service,
    }
}

/// The seed's `SkillCasRuntimeConfig` of a skill root.
pub fn skill_runtime(root: &Path, body_source: &Arc<BodySource>) -> SkillCasRuntimeConfig {
    let source: Arc<dyn SkillBodySource> = body_source.clone();
    SkillCasRuntimeConfig::new(
        root,
        source,
        "ctx-skill-installer-v1",
        &digest("managed-service-host"),
    )
    .unwrap()
}

pub fn config(
    data_dir: &Path,
    registry: &Arc<ArtifactRegistry>,
    inputs: &Arc<InputAuthority>,
    ports: &AdapterPorts,
    policy: &NetBenefitPolicy,
    clock: &Arc<ManualClock>,
) -> QueryServiceConfig {
    let clock: Arc<dyn Clock> = clock.clone();
    QueryServiceConfig {
        data_dir: data_dir.to_path_buf(),
        registry: registry.clone(),
        input_authority: inputs.clone(),
        ports: ports.clone(),
        net_benefit_policy: policy.clone(),
        planner_version: PLANNER_VERSION.to_owned(),
        clock,
        policy_store_root: None,
        skill_cas: None,
        material_store: None,
        consent: None,
        verifier_registry: None,
    }
}

impl Setup {
    /// The service's configuration without policy, actuator or broker (the seed's bare
    /// `open_query_service` of the planning tests).
    pub fn config(&self) -> QueryServiceConfig {
        config(
            &self.data_dir,
            &self.registry,
            &self.inputs,
            &self.ports,
            &self.policy,
            &self.clock,
        )
    }

    /// The full configuration of the setup's service (`_open_peer_service`).
    pub fn full_config(&self) -> QueryServiceConfig {
        let mut c = self.config();
        c.policy_store_root = Some(self.policy_root.clone());
        c.skill_cas = Some(self.skill_runtime.clone());
        c.consent = Some(consent_config());
        c.verifier_registry = Some(verifier_registry());
        c
    }

    /// `_open_peer_service`: a second service handle on the same files.
    pub fn peer(&self) -> QueryService {
        open_query_service(self.full_config()).unwrap()
    }

    /// `persist_install_policy(policy, setup.policy_root)`.
    pub fn persist_policy(&self, policy: &InstallConsentPolicy) {
        self.policy_store.persist(policy).unwrap();
    }

    /// `persist_install_policy(InstallConsentPolicy(skill_mode="preapproved-auto"), ...)`.
    pub fn preapprove_skills(&self) {
        let mut policy = InstallConsentPolicy::safe_default();
        policy.skill_mode = InstallConsentMode::PreapprovedAuto;
        self.persist_policy(&policy);
    }

    /// `persist_install_policy(InstallConsentPolicy.safe_default(), ...)`.
    pub fn ask_each_time(&self) {
        self.persist_policy(&InstallConsentPolicy::safe_default());
    }

    /// Number of desired sets (the seed's `managed_desired_sets` rows).
    pub fn desired_count(&self) -> u64 {
        self.store().desired_set_count().unwrap()
    }

    /// Number of committed desired sets (`journal_revision IS NOT NULL`).
    pub fn committed_desired_count(&self) -> u64 {
        self.store().committed_desired_set_count().unwrap()
    }

    /// Entries of an effects projection table (install claims, outcomes, settlements).
    pub fn effect_entries(&self, table: &'static str) -> u64 {
        if !self.data_dir.exists() {
            return 0;
        }
        let mut n = 0;
        self.journal()
            .projection_scan(table, |_, _| {
                n += 1;
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        n
    }

    pub fn install_claims(&self) -> u64 {
        self.effect_entries(ctx_projections::engine::INSTALL_CLAIMS_TABLE)
    }

    pub fn install_outcomes(&self) -> u64 {
        self.effect_entries(ctx_projections::engine::INSTALL_OUTCOMES_TABLE)
    }

    pub fn install_settlements(&self) -> u64 {
        self.effect_entries(ctx_projections::engine::INSTALL_SETTLEMENTS_TABLE)
    }

    /// Number of consent challenges (the seed's `consent_challenges` rows).
    pub fn consent_challenges(&self) -> u64 {
        if !self.data_dir.exists() {
            return 0;
        }
        ConsentStore::open(self.journal(), CONSENT_AUDIENCE)
            .unwrap()
            .challenge_count()
            .unwrap()
    }

    /// The engine records of the setup scope's stream, in revision order, decoded.
    pub fn engine_events(&self) -> Vec<ctx_projections::engine::JournaledEvent> {
        let stream = engine_stream(&scope()).unwrap();
        let journal = self.journal();
        let head = journal
            .stream_head(&stream)
            .unwrap()
            .map_or(0, |h| h.revision);
        let composition_free = ctx_projections::engine::Engine::open(
            journal,
            ctx_projections::engine::EngineOptions::new(self.clock.clone()),
        )
        .unwrap();
        (1..=head)
            .map(|r| {
                composition_free
                    .journaled_event(&scope(), r)
                    .unwrap()
                    .unwrap()
            })
            .collect()
    }

    /// The file the skill CAS publishes for the installable body.
    pub fn installed_skill_path(&self) -> PathBuf {
        self.skill_root
            .join(sha256_hex_bytes(INSTALLABLE_SKILL_BODY.as_bytes()))
    }

    pub fn calls(&self) -> Vec<String> {
        self.facts.calls()
    }

    /// A request for `work-one` under the logical id `_digest(label)`.
    pub fn request(&self, label: &str) -> QueryRequest {
        request(label, "work-one")
    }

    /// The service's journal (a second open of one directory shares the open journal).
    pub fn journal(&self) -> Arc<Journal> {
        Arc::new(support::open_routed(&self.data_dir))
    }

    /// The query store over the service's journal (the seed's `setup.store`).
    pub fn store(&self) -> QueryStore {
        QueryStore::open(self.journal()).unwrap()
    }

    /// `_register`: registers `logical_query_id` for the setup's input directly in the store.
    pub fn register(&self, logical_query_id: &str) -> ctx_projections::query_store::QueryRecord {
        self.store()
            .register(
                logical_query_id,
                &self.managed_input.session_started,
                &self.managed_input.decision_event,
                self.artifact.manifest_digest(),
                self.artifact.planning_environment_digest(),
            )
            .unwrap()
    }

    /// Number of engine records in the setup scope's stream (the seed's `engine_journal` rows).
    pub fn engine_records(&self) -> u64 {
        if !self.data_dir.exists() {
            return 0;
        }
        let stream = engine_stream(&scope()).unwrap();
        self.journal()
            .stream_head(&stream)
            .unwrap()
            .map_or(0, |h| h.revision)
    }

    /// The journal's global head position (0 when the data directory was never created).
    pub fn head_position(&self) -> u64 {
        if !self.data_dir.exists() {
            return 0;
        }
        self.journal().head_position().unwrap()
    }

    /// Number of registered managed queries (the seed's `managed_queries` rows).
    pub fn query_count(&self) -> u64 {
        if !self.data_dir.exists() {
            return 0;
        }
        self.store().query_count().unwrap()
    }
}

/// A request for `work_ref` under the logical id `_digest(label)`.
pub fn request(label: &str, work_ref: &str) -> QueryRequest {
    QueryRequest::new(&digest(label), work_ref).unwrap()
}

// ------------------------------------------------------------------------------------------------
// Signed human decisions (the seed's `_ConsentTestVerifier` and `_consent_assertion_payload`)
// ------------------------------------------------------------------------------------------------

pub const CONSENT_TEST_SECRET: &[u8] = b"managed-query-consent-test-key";
pub const CONSENT_AUTHENTICATOR: &str = "managed-test-authenticator";

/// The registry of the seed: one HMAC-SHA256 verifier for the test principal.
pub fn verifier_registry() -> Arc<ctx_service::TrustedHumanDecisionVerifierRegistry> {
    use ctx_service::{
        HmacSha256Verifier, HumanDecisionVerifierRegistration, TrustedHumanDecisionVerifierRegistry,
    };
    let verifier = Arc::new(HmacSha256Verifier::new(CONSENT_TEST_SECRET).unwrap());
    let registration = HumanDecisionVerifierRegistration::new(
        CONSENT_AUDIENCE,
        CONSENT_AUTHENTICATOR,
        digest("managed-test-principal"),
        verifier,
    )
    .unwrap();
    Arc::new(TrustedHumanDecisionVerifierRegistry::new(vec![registration]).unwrap())
}

/// What `_consent_assertion_payload` varies.
#[derive(Debug, Clone)]
pub struct AssertionSpec {
    pub decision: &'static str,
    pub nonce: String,
    pub principal_digest: String,
    pub authenticator_id: String,
    pub audience: String,
    pub issued_at: String,
    pub expires_at: String,
    pub valid_proof: bool,
}

impl Default for AssertionSpec {
    fn default() -> Self {
        AssertionSpec {
            decision: "granted",
            nonce: "managed-consent-nonce-1".to_owned(),
            principal_digest: digest("managed-test-principal"),
            authenticator_id: CONSENT_AUTHENTICATOR.to_owned(),
            audience: CONSENT_AUDIENCE.to_owned(),
            issued_at: "2026-08-03T12:00:00Z".to_owned(),
            expires_at: "2026-08-03T12:30:00Z".to_owned(),
            valid_proof: true,
        }
    }
}

/// `_consent_assertion_payload`: the wire bytes of an assertion on `challenge_digest`, signed
/// with the test secret (or with an invalid proof).
pub fn assertion_payload(challenge_digest: &str, spec: &AssertionSpec) -> Vec<u8> {
    use ctx_projections::consent_store::{AssertionFields, SignedHumanDecisionAssertion};
    let unsigned = SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge_digest.to_owned(),
        decision: spec.decision.to_owned(),
        principal_digest: spec.principal_digest.clone(),
        authenticator_id: spec.authenticator_id.clone(),
        audience: spec.audience.clone(),
        nonce: spec.nonce.clone(),
        issued_at: spec.issued_at.clone(),
        expires_at: spec.expires_at.clone(),
        proof: b"unsigned".to_vec(),
    })
    .unwrap();
    let proof = if spec.valid_proof {
        ctx_service::hmac_sha256_proof(CONSENT_TEST_SECRET, &unsigned.signing_bytes())
    } else {
        b"invalid-proof".to_vec()
    };
    unsigned.with_proof(proof).unwrap().encode().unwrap()
}

// ------------------------------------------------------------------------------------------------
// Consent resolution helpers (direct engine commits, the broker store, other signers)
// ------------------------------------------------------------------------------------------------

impl Setup {
    /// `open_managed_engine_composition` on the setup's files.
    pub fn composition(&self) -> ctx_service::EngineComposition {
        ctx_service::open_engine_composition(
            &self.data_dir,
            &self.artifact,
            self.ports.clone(),
            self.policy.clone(),
            PLANNER_VERSION,
            self.clock.clone(),
        )
        .unwrap()
    }

    /// The setup's decision event re-used as another event (the seed's `replace(original, ...)`).
    pub fn event_like(
        &self,
        event_id: &str,
        kind: EventKind,
        expected_revision: u64,
        payload: Json,
    ) -> EngineEvent {
        let mut event = self.managed_input.decision_event.clone();
        event.event_id = event_id.to_owned();
        event.kind = kind;
        event.expected_revision = expected_revision;
        event.payload = payload;
        event
    }

    /// The broker store over the service's journal (the seed's `setup.consent_broker`).
    pub fn consent_store(&self) -> ConsentStore {
        ConsentStore::open(self.journal(), CONSENT_AUDIENCE).unwrap()
    }

    /// The broker record of a challenge digest, read at the trusted clock's time.
    pub fn consent_record(
        &self,
        challenge_digest: &str,
    ) -> ctx_projections::consent_store::ChallengeRecord {
        let config = consent_config();
        self.consent_store()
            .get_by_challenge_digest(
                challenge_digest,
                &config.workspace_identity_digest,
                &config.release_root_digest,
                self.clock.now().unwrap(),
            )
            .unwrap()
    }
}

/// `_consent_assertion_payload` with the proof made by `sign` over the signing bytes (another
/// authenticator than the test secret, e.g. an Ed25519 device key).
pub fn assertion_payload_signed(
    challenge_digest: &str,
    spec: &AssertionSpec,
    sign: &dyn Fn(&[u8]) -> Vec<u8>,
) -> Vec<u8> {
    use ctx_projections::consent_store::{AssertionFields, SignedHumanDecisionAssertion};
    let unsigned = SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge_digest.to_owned(),
        decision: spec.decision.to_owned(),
        principal_digest: spec.principal_digest.clone(),
        authenticator_id: spec.authenticator_id.clone(),
        audience: spec.audience.clone(),
        nonce: spec.nonce.clone(),
        issued_at: spec.issued_at.clone(),
        expires_at: spec.expires_at.clone(),
        proof: b"unsigned".to_vec(),
    })
    .unwrap();
    let proof = sign(&unsigned.signing_bytes());
    unsigned.with_proof(proof).unwrap().encode().unwrap()
}
