//! The `exactly_once` target: an arbitrary, bounded program of managed-service operations on two
//! `QueryService` handles opened on one data directory, over two sessions (two engine
//! streams: once a session's install succeeded, its activation stays pending — the service does
//! not activate — and that session refuses new choices, so a second one keeps a run going) —
//! prepare and reopen (two logical labels, a work reference, its host alias, the second session's
//! reference), desired choices over a subset of the planned capabilities (pre-approvable skills, a
//! skill whose permission expansion always needs consent, a manual agent, an id the plan does not
//! hold), exact retries, `resolve_consent` with assertions signed correctly (granted or denied) or
//! not (a bad proof, another principal, issued in the future, an old challenge, a reused nonce),
//! `recover_consent`, clock jumps past the one-hour TTLs, body-source failures, install policy
//! switches (pre-approve skills / ask each time), closes and restarts, and "crashes": a named
//! service fail point configured to return an error (or to panic, caught) for one operation,
//! after which both handles are dropped and opened again.
//!
//! Checked after every step, against what the harness counted and did:
//!
//! - the install driver ran at most once per action: the body source (which the skill CAS calls
//!   only for a claim it just made) counts its loads per action id; no id is loaded twice, and
//!   every loaded id has a durable claim;
//! - every claim has a committed grant for its action; no outcome without a claim, no settlement
//!   without an outcome (the engine's effect projection tables, keyed by action);
//! - every committed `UserDecision` was either signed with the registered verifier key by a
//!   `resolve_consent` call the harness made for a challenge of that action, with that decision
//!   (`interactive`), or granted automatically while the harness had persisted the pre-approving
//!   policy, for a capability without permission expansion (`preapproved-policy`); every broker
//!   record holding a decision holds one the harness signed;
//! - every result's journal revision and record digest are what the engine stream holds there
//!   (for prepare and reopen: its head);
//! - every refusal is a typed `ServiceError` (never `Internal`, never a fail point that was not
//!   configured, never a guard against a substituted record or transition: nothing substitutes
//!   anything here), and nothing panics except the deliberate fail-point panic;
//!
//! and at the end, with both handles closed, the journal verifies and the engine (state, effects,
//! benefit audit), query-store and consent-store projections equal a rebuild from the journal,
//! and the engine's replay audit is clean over every revision.
//!
//! The set-up mirrors the acceptance tests' fixture (`tests/tests/managed/fixture.rs`: catalog,
//! registry ingest, input authority, counting body source, HMAC verifier registry, consent
//! broker configuration), reduced to what this target needs. The catalog, registry and artifact
//! are built once per process; the data directory, policy root and skill root are fresh for each
//! run, in one directory per process (under `/dev/shm` when it exists, else the temp dir;
//! `CTX_FUZZ_TMPDIR` overrides). At most [`MAX_STEPS`] steps run. `CTX_FUZZ_TRACE` prints what
//! each step did.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::ops::ControlFlow;
use std::os::unix::fs::PermissionsExt as _;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock, PoisonError};

use arbitrary::Arbitrary;
use ctx_journal::{Journal, OpenOptions};
use ctx_model::{
    ActionKind, CURRENT_WORK_SCHEMA, EngineEvent, EventKind, HostAction, Json, ScopeRef, Surrogate,
    UtcMicros, sha256_hex, sha256_hex_bytes,
};
use ctx_projections::consent_store::{
    AssertionFields, CONSENT_STORE_PROJECTION, ConsentStore, ConsentStoreError,
    SignedHumanDecisionAssertion,
};
use ctx_projections::engine::{
    Clock, ENGINE_BENEFIT_AUDIT_PROJECTION, ENGINE_EFFECTS_PROJECTION, ENGINE_STATE_PROJECTION,
    Engine, EngineOptions, INSTALL_CLAIMS_TABLE, INSTALL_OUTCOMES_TABLE, INSTALL_SETTLEMENTS_TABLE,
    ManualClock, engine_stream,
};
use ctx_projections::query_store::{QUERY_STORE_PROJECTION, QueryStore};
use ctx_service::skill_cas::{BodySourceError, SkillBodySource, SkillCasRuntimeConfig};
use ctx_service::{
    AdapterPorts, ArtifactRegistry, AuthenticatedNetBenefitPlanner, BenefitAuditSink,
    BenefitFactsPort, CatalogBenefitFacts, ConsentBrokerConfig, ConsentResolutionResult,
    DesiredSetRequest, DesiredSetResult, HmacSha256Verifier, HumanDecisionVerifierRegistration,
    IngestInputs, InputAuthorityError, InstallConsentMode, InstallConsentPolicy,
    InstallPolicyStore, NetBenefitPolicy, QueryInput, QueryInputAuthority, QueryRequest,
    QueryService, QueryServiceConfig, QueryServiceResult, ReplayDecisionPlanner, ServiceError,
    SinkError, TrustedHumanDecisionVerifierRegistry, failpoints, hmac_sha256_proof,
    load_catalog_dir, open_query_service,
};

/// Most steps run per program; the rest of a longer program is ignored.
pub const MAX_STEPS: usize = 24;

/// The trusted clock's start.
const NOW: &str = "2026-08-03T12:00:00Z";
const PLANNER_VERSION: &str = "ctx-managed-service-planner-v3";
const AUDIENCE: &str = "ctx-managed-query";
const AUTHENTICATOR: &str = "managed-test-authenticator";
const SECRET: &[u8] = b"managed-query-consent-test-key";
/// The installer id the skill CAS runtime and the catalog's skill entries name.
const SKILL_INSTALLER: &str = "ctx-skill-installer-v1";
/// The payload of the deliberate fail-point panic (the only panic a run may survive).
const FAILPOINT_PANIC: &str = "ctx-fuzz-exactly-once-failpoint-panic";

/// The catalog: two pre-approvable skills, a skill whose install expands permissions (always
/// interactive; the skill CAS refuses to connect to it, so a granted install of it stays
/// indeterminate), a manual agent (no install plan).
const CATALOG: [(&str, Entry); 4] = [
    ("skill:alpha", Entry::Install { expands: false }),
    ("skill:beta", Entry::Install { expands: false }),
    ("skill:gamma", Entry::Install { expands: true }),
    ("agent:reviewer", Entry::Manual),
];
/// What a desired mask chooses from: the catalog, then an id no plan holds.
const CHOICES: [&str; 5] = [
    "skill:alpha",
    "skill:beta",
    "skill:gamma",
    "agent:reviewer",
    "skill:unplanned",
];
/// The work references: the first two resolve to session 1 (the second is a host alias), the
/// third to session 2, the last to nothing.
const WORK_REFS: [&str; 4] = ["work-one", "work-alias", "work-two", "work-unknown"];
/// The session a known work reference resolves to.
fn session_of(work_ref: &str) -> Option<usize> {
    match work_ref {
        "work-one" | "work-alias" => Some(0),
        "work-two" => Some(1),
        _ => None,
    }
}

/// Where an operation may "crash" (every named seam of `spec/service.md` §8 and §10 that stops an
/// operation; `consent-snapshot-plan-drift` is a substituted snapshot, not a crash, and is left
/// out).
const CRASH_POINTS: [&str; 17] = [
    failpoints::DESIRED_BEFORE_COMMIT,
    failpoints::DESIRED_BEFORE_MARK,
    failpoints::DESIRED_BEFORE_RESULT,
    failpoints::AUTO_AFTER_BINDING,
    failpoints::AUTO_BEFORE_EXECUTE,
    failpoints::AUTO_AFTER_EXECUTE,
    failpoints::AFTER_CLAIM,
    failpoints::AFTER_OUTCOME,
    failpoints::AFTER_RECEIPT,
    failpoints::CONSENT_AFTER_BINDING,
    failpoints::CONSENT_AFTER_CREATE,
    failpoints::CONSENT_AFTER_STATUS,
    failpoints::CONSENT_AFTER_AUTHENTICATE,
    failpoints::CONSENT_BEFORE_SETTLE,
    failpoints::CONSENT_BEFORE_FINISH,
    failpoints::CONSENT_BEFORE_RESULT,
    failpoints::QUERY_BEFORE_RESULT,
];

#[derive(Debug, Clone, Copy)]
enum Entry {
    Install { expands: bool },
    Manual,
}

// ------------------------------------------------------------------------------------------------
// The program
// ------------------------------------------------------------------------------------------------

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub steps: Vec<Step>,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An operation on handle A (`false`) or B (`true`).
    Call(bool, Op),
    /// The operation with fail point `CRASH_POINTS[point % 17]` configured to return an error
    /// (`panic`: to panic); then both handles are dropped and opened again, the point cleared.
    Crash {
        point: u8,
        panic: bool,
        handle: bool,
        op: Op,
    },
    /// The trusted clock moves forward: `n % 4` → 3 min, 20 min, 61 min, 5 h.
    Advance(u8),
    /// The body source fails its next `n % 4` loads (0 clears).
    FailLoads(u8),
    /// Persists the install policy: skills pre-approved (`true`) or the safe default.
    Policy(bool),
    /// Drops both handles and opens them again.
    Restart,
    /// Closes handle A (`false`) or B (`true`): it refuses until the next restart.
    Close(bool),
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `prepare` of label `label % 2` for work reference `work % 4` (work-one and its alias in
    /// session 1, work-two in session 2, one the authority does not know).
    Prepare { label: u8, work: u8 },
    /// `reopen` of known query `n` (a well-formed unknown reference when none is known; a
    /// malformed one for `n == 255`).
    Reopen(u8),
    /// `set_desired` on known query `query` under logical choice `choice % 4` of the capabilities
    /// `mask` selects from [`CHOICES`]; `previous % 3`: the latest known choice of the query, none,
    /// the first known choice.
    Desired {
        query: u8,
        choice: u8,
        mask: u8,
        previous: u8,
    },
    /// The last desired request again, exactly (its recovery path).
    Retry,
    /// `resolve_consent` with an assertion on the latest challenge seen.
    Resolve(Sign),
    /// `recover_consent`: `n % 8` in 0..=5 the challenge `n` back from the latest seen, 6 an
    /// unknown digest, 7 a malformed one.
    Recover(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    /// Granted, correctly signed, fresh nonce.
    Grant,
    /// Denied, correctly signed, fresh nonce.
    Deny,
    /// Granted, with a proof the verifier refuses.
    BadProof,
    /// Granted, signed with the right key but for a principal no verifier is registered for.
    OtherPrincipal,
    /// Granted, correctly signed, issued ten minutes in the future.
    Early,
    /// Correctly signed for challenge `n` back from the latest (granted when `true`).
    Old(u8, bool),
    /// Granted, correctly signed, with the nonce of the first correctly signed assertion of the
    /// run.
    ReusedNonce,
}

/// Runs one program against fresh directories and panics on any broken invariant.
pub fn run(program: &Program) {
    run_stats(program);
}

/// [`run`], returning what the run did.
pub fn run_stats(program: &Program) -> Stats {
    let _turn = turn();
    install_panic_hook();
    let mut h = Harness::new();
    for step in program.steps.iter().take(MAX_STEPS) {
        h.step(*step);
    }
    h.finish()
}

/// One run at a time per process: fail points and the run directory are process-wide.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

// ------------------------------------------------------------------------------------------------
// The deliberate panic
// ------------------------------------------------------------------------------------------------

thread_local! {
    /// Set while an operation runs with a fail point configured to panic.
    static EXPECTING_PANIC: Cell<bool> = const { Cell::new(false) };
}

fn is_failpoint_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    payload
        .downcast_ref::<String>()
        .is_some_and(|s| s == FAILPOINT_PANIC)
        || payload
            .downcast_ref::<&str>()
            .is_some_and(|s| *s == FAILPOINT_PANIC)
}

/// libFuzzer's hook aborts on any panic before unwinding; the deliberate fail-point panic, while
/// expected on this thread, is let through to `catch_unwind` silently. Every other panic goes to
/// the previous hook.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if EXPECTING_PANIC.with(Cell::get) && is_failpoint_panic(info.payload()) {
                return;
            }
            previous(info);
        }));
    });
}

// ------------------------------------------------------------------------------------------------
// The fixture (built once per process)
// ------------------------------------------------------------------------------------------------

fn digest(value: &str) -> String {
    sha256_hex(value)
}

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("exactly_once harness: {what}: {e:?}"),
    }
}

fn at(text: &str) -> UtcMicros {
    ok(UtcMicros::parse(text), "timestamp")
}

fn skill_body(capability_id: &str) -> String {
    let name = capability_id
        .strip_prefix("skill:")
        .unwrap_or(capability_id);
    format!("---\nname: {name}\ndescription: exactly-once fuzz fixture\n---\nUse {name}.\n")
}

/// The engine scope of session `i` (0 or 1): two sessions, two engine streams.
fn scope(i: usize) -> ScopeRef {
    ScopeRef {
        tenant_id: "tenant-1".to_owned(),
        workspace_id: "workspace-1".to_owned(),
        repository_id: "repository-1".to_owned(),
        session_id: format!("session-{}", i + 1),
        exposure_id: "exposure-1".to_owned(),
        host_context_id: "host-neutral".to_owned(),
        parent_exposure_id: None,
    }
}

fn preapproving_policy() -> InstallConsentPolicy {
    let mut policy = InstallConsentPolicy::safe_default();
    policy.skill_mode = InstallConsentMode::PreapprovedAuto;
    policy
}

/// What the process-wide part of the set-up holds.
struct Fixture {
    /// Everything a run writes lives under here (removed before and after each run).
    run_dir: PathBuf,
    registry: Arc<ArtifactRegistry>,
    ports: AdapterPorts,
    policy: NetBenefitPolicy,
    inputs: Arc<Inputs>,
    verifiers: Arc<TrustedHumanDecisionVerifierRegistry>,
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

/// The input authority: a known work reference resolves to the artifact and its session's two
/// events.
#[derive(Debug)]
struct Inputs {
    registry: Arc<ArtifactRegistry>,
    manifest_digest: String,
    planning_environment_digest: String,
    /// (SessionStarted, IntentObserved) of each session.
    events: [(EngineEvent, EngineEvent); 2],
}

impl QueryInputAuthority for Inputs {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError> {
        let Some(session) = session_of(current_work_ref) else {
            return Err(InputAuthorityError::new(
                "current-work reference is unavailable",
            ));
        };
        let (session_started, decision_event) = &self.events[session];
        let handle = self
            .registry
            .reopen(&self.manifest_digest, &self.planning_environment_digest)
            .map_err(|e| InputAuthorityError::new(e.to_string()))?;
        Ok(QueryInput::new(
            handle,
            session_started.clone(),
            decision_event.clone(),
        ))
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = work_dir();
        crate::remove_dir(root);
        ok(fs::create_dir_all(root), "work directory");
        ok(
            fs::set_permissions(root, fs::Permissions::from_mode(0o700)),
            "work directory mode",
        );
        let root = ok(root.canonicalize(), "canonical work directory");
        let catalog_dir = root.join("catalog");
        write_catalog(&catalog_dir);
        let loaded = ok(load_catalog_dir(&catalog_dir), "catalog");
        let catalog = Arc::new(loaded.catalog().clone());
        let facts = Arc::new(CatalogBenefitFacts::new(catalog.clone()));
        let mut ports = AdapterPorts::from_catalog(catalog.clone());
        ports.facts = facts.clone();
        let policy = NetBenefitPolicy::new(&digest("managed-service-calibration"), 1);
        let identity = ok(
            ReplayDecisionPlanner::new(
                ok(
                    AuthenticatedNetBenefitPlanner::new(policy.clone(), AckSink),
                    "planner",
                ),
                ports.clone(),
                PLANNER_VERSION,
                catalog.namespace_digest(),
            ),
            "planner identity",
        );
        let planning_environment_digest = identity.catalog_snapshot_digest().to_owned();
        drop(identity);
        let registry = Arc::new(ok(
            ArtifactRegistry::open(&root.join("registry")),
            "registry",
        ));
        let artifact = ok(
            registry.ingest(
                &loaded,
                IngestInputs {
                    planning_environment_digest: planning_environment_digest.clone(),
                    catalog_namespace_digest: catalog.namespace_digest().to_owned(),
                    catalog_retrieval_digest: catalog.retrieval_snapshot_digest().to_owned(),
                    benefit_facts_snapshot_digest: facts.benefit_facts_snapshot_digest().to_owned(),
                    benefit_policy_snapshot_digest: policy.policy_digest(),
                    material_snapshot_digest: catalog.material_snapshot_digest().to_owned(),
                    installation_snapshot_digest: catalog.installation_snapshot_digest().to_owned(),
                    observation_surrogate: surrogate(),
                    planning_schema_version: PLANNER_VERSION.to_owned(),
                },
            ),
            "registry ingest",
        );
        let inputs = Arc::new(Inputs {
            registry: registry.clone(),
            manifest_digest: artifact.manifest_digest().to_owned(),
            planning_environment_digest,
            events: [events(&artifact, 0), events(&artifact, 1)],
        });
        let verifier = Arc::new(ok(HmacSha256Verifier::new(SECRET), "verifier"));
        let registration = ok(
            HumanDecisionVerifierRegistration::new(
                AUDIENCE,
                AUTHENTICATOR,
                digest("managed-test-principal"),
                verifier,
            ),
            "verifier registration",
        );
        let verifiers = Arc::new(ok(
            TrustedHumanDecisionVerifierRegistry::new(vec![registration]),
            "verifier registry",
        ));
        Fixture {
            run_dir: root.join("run"),
            registry,
            ports,
            policy,
            inputs,
            verifiers,
        }
    })
}

fn surrogate() -> Surrogate {
    Surrogate::new(
        CURRENT_WORK_SCHEMA,
        1,
        Json::object([
            ("active_capability_ids", Json::Arr(vec![])),
            ("baseline_capability_ids", Json::Arr(vec![])),
            ("languages", Json::Arr(vec![Json::str("python")])),
            ("rejected_capability_ids", Json::Arr(vec![])),
            ("requested_limit", Json::Int(4)),
            ("signals", Json::Arr(vec![Json::str("python")])),
        ]),
    )
}

/// A `ctx.catalog-v1` catalog of [`CATALOG`], every entry tagged `python`; installable skills
/// carry a typed install plan whose result is [`skill_body`].
fn write_catalog(dir: &Path) {
    ok(fs::create_dir_all(dir), "catalog directory");
    let mut entries = Vec::new();
    for (id, entry) in CATALOG {
        let (kind, name) = id.split_once(':').unwrap_or(("skill", id));
        let mut fields = vec![
            ("id", Json::str(id)),
            ("kind", Json::str(kind)),
            ("label", Json::str(name)),
            ("tags", Json::Arr(vec![Json::str("python")])),
        ];
        if let Entry::Install { expands } = entry {
            let body = skill_body(id);
            let path = format!("skills/{name}/SKILL.md");
            let file = dir.join(&path);
            ok(
                fs::create_dir_all(dir.join(format!("skills/{name}"))),
                "skill dir",
            );
            ok(fs::write(&file, body.as_bytes()), "skill body");
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
                    ("permission_expansion", Json::Bool(expands)),
                    ("credential_requirement", Json::Bool(false)),
                    (
                        "result",
                        Json::object([
                            ("path", Json::str(path)),
                            ("sha256", Json::str(sha256_hex_bytes(body.as_bytes()))),
                            ("size_bytes", Json::Int(body.len() as i64)),
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
    ok(
        fs::write(dir.join("catalog.json"), document.to_string()),
        "catalog.json",
    );
}

/// SessionStarted at revision 0 and IntentObserved at 1 of session `i`, bound to the artifact
/// (the fixture's `events`; event ids are unique across sessions).
fn events(artifact: &ctx_service::ArtifactHandle, i: usize) -> (EngineEvent, EngineEvent) {
    let id = |base: &str| {
        if i == 0 {
            base.to_owned()
        } else {
            format!("{base}-{}", i + 1)
        }
    };
    ctx_service::planning_events(
        artifact,
        &ctx_service::PlanningEventsSpec {
            scope: &scope(i),
            occurred_at: NOW,
            session_event_id: &id("event-session-started"),
            intent_event_id: &id("event-intent-observed"),
            correlation_id: "plan-initial",
            session_causation_id: "cause-session",
            host_descriptor_digest: &digest("host-neutral-managing"),
            work_signature: &digest("managed-service-work"),
        },
    )
}

/// This process's directory, chosen once; stale directories of dead fuzz processes are removed
/// the first time.
fn work_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::process_dir("ctx-fuzz-exactly-once-"))
}

/// Prints what each step did when `CTX_FUZZ_TRACE` is set (for reading a finding).
fn trace(line: impl FnOnce() -> String) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("CTX_FUZZ_TRACE").is_some()) {
        eprintln!("{}", line());
    }
}

// ------------------------------------------------------------------------------------------------
// The body source
// ------------------------------------------------------------------------------------------------

/// Serves each skill's body, counts loads per action id and can fail the next `n` loads.
#[derive(Debug, Default)]
struct Body {
    loads: Mutex<BTreeMap<String, u64>>,
    failing: AtomicU64,
}

impl Body {
    fn loads(&self) -> BTreeMap<String, u64> {
        self.loads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl SkillBodySource for Body {
    fn load(&self, action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        *self
            .loads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(action.action_id.clone())
            .or_default() += 1;
        let failing = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(BodySourceError::new("simulated body source failure"));
        }
        Ok(skill_body(action.entity_id.as_deref().unwrap_or_default()))
    }
}

// ------------------------------------------------------------------------------------------------
// The harness
// ------------------------------------------------------------------------------------------------

/// A challenge the service returned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Challenge {
    digest: String,
    expires_at: UtcMicros,
}

/// A desired request the harness sent (requests are not `Clone`).
#[derive(Debug, Clone)]
struct DesiredSpec {
    query_ref: String,
    choice: String,
    ids: Vec<&'static str>,
    previous: Option<String>,
}

impl DesiredSpec {
    fn request(&self) -> Result<DesiredSetRequest, ServiceError> {
        DesiredSetRequest::new(
            &self.query_ref,
            &self.choice,
            &self.ids,
            self.previous.as_deref(),
        )
    }
}

/// What an operation returned.
enum Done {
    /// A prepare or reopen result, with the session of its request (when the harness knows it).
    Query(QueryServiceResult, Option<usize>),
    Desired(DesiredSetResult),
    Consent(ConsentResolutionResult),
    /// Nothing to send (no request known yet).
    Skipped,
}

/// Counts of what a run did (for the trace and the tests).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub ok: u32,
    pub refused: u32,
    pub crashes_fired: u32,
    pub panics_caught: u32,
    pub interactive_decisions: u32,
    pub automatic_grants: u32,
    pub loads: u64,
    pub claims: u64,
    pub settlements: u64,
    pub challenges: u32,
}

/// A service handle with the full configuration: policy store, skill CAS, consent broker and
/// verifier registry (the fixture's `full_config`).
fn open_service(
    fx: &Fixture,
    data_dir: &Path,
    policy_root: &Path,
    clock: &Arc<ManualClock>,
    skill_cas: &Arc<SkillCasRuntimeConfig>,
) -> QueryService {
    let clock: Arc<dyn Clock> = clock.clone();
    let config = QueryServiceConfig {
        data_dir: data_dir.to_path_buf(),
        registry: fx.registry.clone(),
        input_authority: fx.inputs.clone(),
        ports: fx.ports.clone(),
        net_benefit_policy: fx.policy.clone(),
        planner_version: PLANNER_VERSION.to_owned(),
        clock,
        policy_store_root: Some(policy_root.to_path_buf()),
        skill_cas: Some(skill_cas.clone()),
        material_store: None,
        consent: Some(ConsentBrokerConfig {
            audience: AUDIENCE.to_owned(),
            workspace_identity_digest: digest("managed-service-workspace"),
            release_root_digest: digest("managed-service-release-root"),
        }),
        verifier_registry: Some(fx.verifiers.clone()),
    };
    ok(open_query_service(config), "open a service handle")
}

struct Harness {
    fx: &'static Fixture,
    data_dir: PathBuf,
    policy_root: PathBuf,
    clock: Arc<ManualClock>,
    body: Arc<Body>,
    skill_cas: Arc<SkillCasRuntimeConfig>,
    policy_store: InstallPolicyStore,
    handles: [QueryService; 2],
    /// The persisted policy pre-approves skills.
    preapproving: bool,
    queries: Vec<String>,
    /// The session of each known query reference.
    query_sessions: HashMap<String, usize>,
    /// Desired-set references returned, by query reference, in order.
    desired_refs: BTreeMap<String, Vec<String>>,
    last_desired: Option<DesiredSpec>,
    /// Challenges returned, in the order first seen.
    challenges: Vec<Challenge>,
    nonces: u64,
    /// The nonce of the first correctly signed assertion (what [`Sign::ReusedNonce`] reuses).
    first_nonce: Option<String>,
    /// (challenge digest, decision) of every correctly signed assertion sent.
    signed: Vec<(String, &'static str)>,
    /// The requested action id of a challenge digest (read from the broker store).
    challenge_actions: HashMap<String, String>,
    /// Engine revisions already checked, per session.
    checked: [u64; 2],
    /// The journal head position and the number of body loads at the last full check.
    checked_position: u64,
    checked_loads: u64,
    /// Capability of each consent request's requested action id.
    requested: HashMap<String, String>,
    /// Requested action ids with a committed grant.
    granted: BTreeSet<String>,
    stats: Stats,
}

impl Harness {
    fn new() -> Harness {
        let fx = fixture();
        crate::remove_dir(&fx.run_dir);
        ok(fs::create_dir_all(&fx.run_dir), "run directory");
        ok(
            fs::set_permissions(&fx.run_dir, fs::Permissions::from_mode(0o700)),
            "run directory mode",
        );
        let data_dir = fx.run_dir.join("data");
        let policy_root = fx.run_dir.join("install-policy");
        let skill_root = fx.run_dir.join("skills");
        ok(fs::create_dir_all(&skill_root), "skill root");
        ok(
            fs::set_permissions(&skill_root, fs::Permissions::from_mode(0o700)),
            "skill root mode",
        );
        let policy_store = ok(InstallPolicyStore::new(&policy_root), "policy store");
        let body = Arc::new(Body::default());
        let source: Arc<dyn SkillBodySource> = body.clone();
        let skill_cas = Arc::new(ok(
            SkillCasRuntimeConfig::new(
                &skill_root,
                source,
                SKILL_INSTALLER,
                &digest("managed-service-host"),
            ),
            "skill CAS runtime",
        ));
        let clock = Arc::new(ManualClock::new(at(NOW)));
        Harness {
            handles: [
                open_service(fx, &data_dir, &policy_root, &clock, &skill_cas),
                open_service(fx, &data_dir, &policy_root, &clock, &skill_cas),
            ],
            preapproving: false,
            queries: Vec::new(),
            query_sessions: HashMap::new(),
            desired_refs: BTreeMap::new(),
            last_desired: None,
            challenges: Vec::new(),
            nonces: 0,
            first_nonce: None,
            signed: Vec::new(),
            challenge_actions: HashMap::new(),
            checked: [0; 2],
            checked_position: 0,
            checked_loads: 0,
            requested: HashMap::new(),
            granted: BTreeSet::new(),
            stats: Stats::default(),
            fx,
            data_dir,
            policy_root,
            clock,
            body,
            skill_cas,
            policy_store,
        }
    }

    fn open(&self) -> QueryService {
        open_service(
            self.fx,
            &self.data_dir,
            &self.policy_root,
            &self.clock,
            &self.skill_cas,
        )
    }

    /// Drops both handles (closing them first, so the journal is really closed) and opens two
    /// new ones.
    fn restart(&mut self) {
        for handle in &self.handles {
            handle.close();
        }
        self.handles = [self.open(), self.open()];
    }

    fn now(&self) -> UtcMicros {
        ok(self.clock.now(), "clock")
    }

    // --------------------------------------------------------------------------------------------
    // Steps
    // --------------------------------------------------------------------------------------------

    fn step(&mut self, step: Step) {
        trace(|| format!("step {step:?}"));
        match step {
            Step::Call(handle, op) => {
                let r = self.call(usize::from(handle), op);
                self.settle(r, None);
            }
            Step::Crash {
                point,
                panic,
                handle,
                op,
            } => self.crash(point, panic, usize::from(handle), op),
            Step::Advance(n) => {
                let minutes: i64 = [3, 20, 61, 300][usize::from(n % 4)];
                self.clock.advance(minutes * 60 * 1_000_000);
            }
            Step::FailLoads(n) => self.body.failing.store(u64::from(n % 4), Ordering::SeqCst),
            Step::Policy(preapprove) => {
                let policy = if preapprove {
                    preapproving_policy()
                } else {
                    InstallConsentPolicy::safe_default()
                };
                ok(self.policy_store.persist(&policy), "persist policy");
                self.preapproving = preapprove;
            }
            Step::Restart => self.restart(),
            Step::Close(handle) => self.handles[usize::from(handle)].close(),
        }
        self.check();
    }

    fn crash(&mut self, point: u8, panic: bool, handle: usize, op: Op) {
        let name = CRASH_POINTS[usize::from(point) % CRASH_POINTS.len()];
        let action = if panic {
            format!("panic({FAILPOINT_PANIC})")
        } else {
            "return".to_owned()
        };
        ok(fail::cfg(name, &action), "configure fail point");
        EXPECTING_PANIC.with(|e| e.set(panic));
        let r = catch_unwind(AssertUnwindSafe(|| self.call(handle, op)));
        EXPECTING_PANIC.with(|e| e.set(false));
        fail::remove(name);
        match r {
            Ok(r) => self.settle(r, Some(name)),
            Err(payload) if panic && is_failpoint_panic(payload.as_ref()) => {
                trace(|| format!("  panicked at {name}"));
                self.stats.panics_caught += 1;
            }
            Err(payload) => resume_unwind(payload),
        }
        // The "crash": both handles go, and the next operations are the recovery path.
        self.restart();
    }

    /// What an operation returned: a result is absorbed and checked, a refusal classified.
    fn settle(&mut self, r: Result<Done, ServiceError>, configured: Option<&'static str>) {
        match r {
            Ok(done) => {
                self.stats.ok += 1;
                self.absorb(done);
            }
            Err(ServiceError::FailPoint { name, detail }) => {
                assert_eq!(
                    Some(name),
                    configured,
                    "fail point {name} fired ({detail}) though {configured:?} was configured"
                );
                trace(|| format!("  crashed at {name}: {detail}"));
                self.stats.crashes_fired += 1;
            }
            Err(e) => {
                trace(|| format!("  refused: {e:?} ({e})"));
                self.refused(&e);
                self.stats.refused += 1;
            }
        }
    }

    /// A refusal must be one the service's contract explains: never `Internal` ("a fault that no
    /// input explains"), and never one of the guards against a substituted component, record or
    /// transition (nothing here substitutes anything, so such a guard firing means the service
    /// disagrees with its own engine).
    fn refused(&self, e: &ServiceError) {
        if let ServiceError::Internal(message) = e {
            panic!("an operation failed with ServiceError::Internal: {message}");
        }
        let message = e.to_string();
        assert!(
            !message.contains("substituted"),
            "a substitution guard fired though nothing was substituted: {e:?} ({message})"
        );
    }

    fn call(&mut self, handle: usize, op: Op) -> Result<Done, ServiceError> {
        match op {
            Op::Prepare { label, work } => {
                let work_ref = WORK_REFS[usize::from(work % 4)];
                let request =
                    QueryRequest::new(&digest(&format!("query-{}", label % 2)), work_ref)?;
                let session = session_of(work_ref);
                self.handles[handle]
                    .prepare(&request)
                    .map(|r| Done::Query(r, session))
            }
            Op::Reopen(n) => {
                let query_ref = if n == 255 {
                    "mqr_not-a-reference".to_owned()
                } else {
                    self.query(n)
                };
                let session = self.query_sessions.get(&query_ref).copied();
                self.handles[handle]
                    .reopen(&query_ref)
                    .map(|r| Done::Query(r, session))
            }
            Op::Desired {
                query,
                choice,
                mask,
                previous,
            } => {
                let query_ref = self.query(query);
                let known = self.desired_refs.get(&query_ref);
                let previous = match previous % 3 {
                    0 => known.and_then(|v| v.last()).cloned(),
                    1 => None,
                    _ => known.and_then(|v| v.first()).cloned(),
                };
                let spec = DesiredSpec {
                    query_ref,
                    choice: digest(&format!("choice-{}", choice % 4)),
                    ids: CHOICES
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, id)| *id)
                        .collect(),
                    previous,
                };
                let request = spec.request()?;
                self.last_desired = Some(spec);
                self.handles[handle]
                    .set_desired(&request)
                    .map(Done::Desired)
            }
            Op::Retry => {
                let Some(spec) = &self.last_desired else {
                    return Ok(Done::Skipped);
                };
                let request = spec.request()?;
                self.handles[handle]
                    .set_desired(&request)
                    .map(Done::Desired)
            }
            Op::Resolve(sign) => {
                let payload = self.assertion(sign);
                self.handles[handle]
                    .resolve_consent(&payload)
                    .map(Done::Consent)
            }
            Op::Recover(n) => {
                let digest_text = match n % 8 {
                    6 => digest("no-such-challenge"),
                    7 => "not-a-challenge-digest".to_owned(),
                    k => self
                        .challenge_back(k)
                        .map_or_else(|| digest("no-challenge-seen"), |c| c.digest.clone()),
                };
                self.handles[handle]
                    .recover_consent(&digest_text)
                    .map(Done::Consent)
            }
        }
    }

    /// Known query `n`, or a well-formed reference nobody registered.
    fn query(&self, n: u8) -> String {
        if self.queries.is_empty() {
            format!("mqr_{}", "0".repeat(64))
        } else {
            self.queries[usize::from(n) % self.queries.len()].clone()
        }
    }

    /// The challenge `k` back from the latest seen.
    fn challenge_back(&self, k: u8) -> Option<&Challenge> {
        let len = self.challenges.len();
        (len > 0).then(|| &self.challenges[len - 1 - usize::from(k) % len])
    }

    /// The wire bytes of the assertion `sign` describes. A correctly signed one is recorded.
    fn assertion(&mut self, sign: Sign) -> Vec<u8> {
        let now = self.now();
        let (challenge, decision) = match sign {
            Sign::Old(k, granted) => (
                self.challenge_back(k).cloned(),
                if granted { "granted" } else { "denied" },
            ),
            Sign::Deny => (self.challenge_back(0).cloned(), "denied"),
            _ => (self.challenge_back(0).cloned(), "granted"),
        };
        let challenge = challenge.unwrap_or(Challenge {
            digest: digest("no-challenge-seen"),
            expires_at: UtcMicros(now.0 + 30 * 60 * 1_000_000),
        });
        let issued_at = match sign {
            Sign::Early => UtcMicros(now.0 + 10 * 60 * 1_000_000),
            _ => now,
        };
        // The assertion may not outlive the challenge; one that expired already gets a minute.
        let expires_at = if challenge.expires_at.0 > issued_at.0 {
            challenge.expires_at
        } else {
            UtcMicros(issued_at.0 + 60 * 1_000_000)
        };
        self.nonces += 1;
        let nonce = match (sign, &self.first_nonce) {
            (Sign::ReusedNonce, Some(first)) => first.clone(),
            _ => format!("exactly-once-nonce-{}", self.nonces),
        };
        let principal = match sign {
            Sign::OtherPrincipal => digest("someone-else"),
            _ => digest("managed-test-principal"),
        };
        let unsigned = ok(
            SignedHumanDecisionAssertion::new(AssertionFields {
                challenge_digest: challenge.digest.clone(),
                decision: decision.to_owned(),
                principal_digest: principal,
                authenticator_id: AUTHENTICATOR.to_owned(),
                audience: AUDIENCE.to_owned(),
                nonce: nonce.clone(),
                issued_at: issued_at.render(),
                expires_at: expires_at.render(),
                proof: b"unsigned".to_vec(),
            }),
            "assertion",
        );
        let proof = match sign {
            Sign::BadProof => b"invalid-proof".to_vec(),
            _ => hmac_sha256_proof(SECRET, &unsigned.signing_bytes()),
        };
        if !matches!(sign, Sign::BadProof | Sign::OtherPrincipal) {
            self.signed.push((challenge.digest, decision));
            if self.first_nonce.is_none() {
                self.first_nonce = Some(nonce.clone());
            }
        }
        let signed = ok(unsigned.with_proof(proof), "assertion proof");
        ok(signed.encode(), "assertion encoding")
    }

    fn see_challenge(&mut self, digest: &str, expires_at: &str) {
        if self.challenges.iter().any(|c| c.digest == digest) {
            // Seen again: it becomes the latest.
            self.challenges.retain(|c| c.digest != digest);
        } else {
            self.stats.challenges += 1;
        }
        self.challenges.push(Challenge {
            digest: digest.to_owned(),
            expires_at: at(expires_at),
        });
    }

    /// Records what a result says and checks its journal coordinates against the journal.
    fn absorb(&mut self, done: Done) {
        match done {
            Done::Skipped => {}
            Done::Query(r, session) => {
                let Some(session) = session else {
                    panic!("a prepare or reopen of an unknown session succeeded");
                };
                let prepared = r.prepared();
                trace(|| {
                    format!(
                        "  query {} at {} ({} selections)",
                        r.query_ref(),
                        prepared.journal_revision(),
                        prepared.selections().len()
                    )
                });
                let head = self.engine_head(session);
                assert_eq!(
                    prepared.journal_revision(),
                    head,
                    "a prepare/reopen result's journal revision is not the engine stream's head"
                );
                self.assert_record(
                    session,
                    prepared.journal_revision(),
                    prepared.journal_record_digest(),
                    "prepare/reopen",
                );
                if let Some(known) = self.query_sessions.get(r.query_ref()) {
                    assert_eq!(
                        *known,
                        session,
                        "query {} answered for another session",
                        r.query_ref()
                    );
                } else {
                    self.queries.push(r.query_ref().to_owned());
                    self.query_sessions
                        .insert(r.query_ref().to_owned(), session);
                }
                if let Some(c) = r.challenge() {
                    self.see_challenge(c.challenge_digest(), c.expires_at());
                }
            }
            Done::Desired(r) => {
                trace(|| {
                    format!(
                        "  desired {} {} {:?} at {} failed={:?} deferred={:?} challenge={}",
                        r.status(),
                        r.reason_code().unwrap_or("-"),
                        r.capability_ids(),
                        r.journal_revision(),
                        r.failed_capability_ids(),
                        r.deferred_capability_ids(),
                        r.challenge().is_some()
                    )
                });
                let Some(&session) = self.query_sessions.get(r.query_ref()) else {
                    panic!(
                        "a desired result for query {}, never prepared",
                        r.query_ref()
                    );
                };
                self.assert_record(
                    session,
                    r.journal_revision(),
                    r.journal_record_digest(),
                    "set_desired",
                );
                let event = self.engine_event(session, r.journal_revision());
                assert!(
                    event.reducer_event.kind == EventKind::ReassessmentRequested
                        && event.reducer_event.event_id.starts_with("ctx-desired:"),
                    "a desired result names revision {}, which holds {} {}",
                    r.journal_revision(),
                    event.reducer_event.kind.as_str(),
                    event.reducer_event.event_id
                );
                let refs = self
                    .desired_refs
                    .entry(r.query_ref().to_owned())
                    .or_default();
                if !refs.iter().any(|d| d == r.desired_set_ref()) {
                    refs.push(r.desired_set_ref().to_owned());
                }
                if let Some(c) = r.challenge() {
                    self.see_challenge(c.challenge_digest(), c.expires_at());
                }
            }
            Done::Consent(r) => {
                trace(|| {
                    format!(
                        "  consent {} {} at {} next={}",
                        r.outcome(),
                        r.reason_code(),
                        r.journal_revision(),
                        r.next_challenge().is_some()
                    )
                });
                let session = self.challenge_session(r.challenge_digest());
                self.assert_record(
                    session,
                    r.journal_revision(),
                    r.journal_record_digest(),
                    "resolve/recover consent",
                );
                if let Some(c) = r.next_challenge() {
                    self.see_challenge(c.challenge_digest(), c.expires_at());
                }
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // Reading the journal
    // --------------------------------------------------------------------------------------------

    /// The service's journal (a second open of one directory shares the open journal), when the
    /// service created it.
    fn journal(&self) -> Option<Arc<Journal>> {
        if !self.data_dir.exists() {
            return None;
        }
        Some(Arc::new(ok(
            Journal::open(&self.data_dir, &OpenOptions::new()),
            "open the journal",
        )))
    }

    fn engine(&self) -> Option<Engine> {
        let journal = self.journal()?;
        let clock: Arc<dyn Clock> = self.clock.clone();
        Some(ok(
            Engine::open(journal, EngineOptions::new(clock)),
            "open an engine",
        ))
    }

    fn engine_head(&self, session: usize) -> u64 {
        let Some(journal) = self.journal() else {
            return 0;
        };
        let stream = ok(engine_stream(&scope(session)), "engine stream");
        ok(journal.stream_head(&stream), "stream head").map_or(0, |h| h.revision)
    }

    fn engine_event(
        &self,
        session: usize,
        revision: u64,
    ) -> ctx_projections::engine::JournaledEvent {
        let Some(engine) = self.engine() else {
            panic!("a result names engine revision {revision} but there is no journal");
        };
        match engine.journaled_event(&scope(session), revision) {
            Ok(Some(event)) => event,
            Ok(None) => panic!("a result names engine revision {revision}, which is not there"),
            Err(e) => panic!("engine revision {revision}: {e:?}"),
        }
    }

    fn assert_record(&self, session: usize, revision: u64, record_digest: &str, what: &str) {
        let event = self.engine_event(session, revision);
        assert_eq!(
            event.record_digest, record_digest,
            "a {what} result's journal record digest at revision {revision} is not the journal's"
        );
    }

    /// The action ids of an engine effects table.
    fn effect_ids(journal: &Journal, table: &'static str) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        ok(
            journal.projection_scan(table, |key, _| {
                // Engine stream id (32 bytes) ‖ action id.
                let id = key.get(32..).unwrap_or_default();
                ids.insert(String::from_utf8_lossy(id).into_owned());
                ControlFlow::Continue(())
            }),
            "scan an effects table",
        );
        ids
    }

    // --------------------------------------------------------------------------------------------
    // Invariants
    // --------------------------------------------------------------------------------------------

    /// Every invariant that holds after any step.
    fn check(&mut self) {
        let loads = self.body.loads();
        for (action_id, n) in &loads {
            assert!(
                *n <= 1,
                "the install driver ran {n} times for action {action_id} (body loads {loads:?})"
            );
        }
        self.stats.loads = loads.values().sum();
        let Some(journal) = self.journal() else {
            assert!(loads.is_empty(), "body loads without a journal: {loads:?}");
            return;
        };
        // Nothing below can change without an append or a body load.
        let position = ok(journal.head_position(), "journal head");
        if position == self.checked_position && self.stats.loads == self.checked_loads {
            return;
        }
        self.checked_position = position;
        self.checked_loads = self.stats.loads;
        self.check_decisions();
        let claims = Self::effect_ids(&journal, INSTALL_CLAIMS_TABLE);
        let outcomes = Self::effect_ids(&journal, INSTALL_OUTCOMES_TABLE);
        let settlements = Self::effect_ids(&journal, INSTALL_SETTLEMENTS_TABLE);
        drop(journal);
        self.check_effects(&loads, &claims, &outcomes, &settlements);
        self.stats.claims = claims.len() as u64;
        self.stats.settlements = settlements.len() as u64;
        self.check_broker_decisions();
    }

    fn check_effects(
        &self,
        loads: &BTreeMap<String, u64>,
        claims: &BTreeSet<String>,
        outcomes: &BTreeSet<String>,
        settlements: &BTreeSet<String>,
    ) {
        for id in loads.keys() {
            assert!(
                claims.contains(id),
                "the install driver ran for action {id}, which has no durable claim"
            );
        }
        for id in claims {
            assert!(
                self.granted.contains(id),
                "action {id} is claimed without a committed grant"
            );
        }
        for id in outcomes {
            assert!(
                claims.contains(id),
                "action {id} has an install outcome without a claim"
            );
        }
        for id in settlements {
            assert!(
                outcomes.contains(id),
                "action {id} is settled without an install outcome"
            );
        }
    }

    /// Every `UserDecision` committed since the last check is one the harness signed, or an
    /// automatic grant under the pre-approving policy it had persisted.
    fn check_decisions(&mut self) {
        for session in 0..2 {
            self.check_session_decisions(session);
        }
    }

    fn check_session_decisions(&mut self, session: usize) {
        let head = self.engine_head(session);
        if head <= self.checked[session] {
            return;
        }
        let Some(engine) = self.engine() else {
            return;
        };
        for revision in self.checked[session] + 1..=head {
            let event = match engine.journaled_event(&scope(session), revision) {
                Ok(Some(event)) => event,
                other => panic!("engine revision {revision} below the head: {other:?}"),
            };
            for action in &event.transition.actions {
                if action.kind == ActionKind::RequestConsent
                    && let (Some(requested), Some(capability)) = (
                        action.payload.get_str("requested_action_id"),
                        action.entity_id.as_deref(),
                    )
                {
                    self.requested
                        .insert(requested.to_owned(), capability.to_owned());
                }
            }
            let e = &event.reducer_event;
            trace(|| {
                let actions: Vec<String> = event
                    .transition
                    .actions
                    .iter()
                    .map(|a| {
                        format!(
                            "{} {}",
                            a.kind.as_str(),
                            a.entity_id.as_deref().unwrap_or("-")
                        )
                    })
                    .collect();
                format!(
                    "  session {} revision {revision}: {} {} -> {actions:?}",
                    session + 1,
                    e.kind.as_str(),
                    e.event_id
                )
            });
            if e.kind == EventKind::UserDecision {
                self.check_decision(e);
            }
        }
        drop(engine);
        self.checked[session] = head;
    }

    fn check_decision(&mut self, e: &EngineEvent) {
        let field = |name: &str| e.payload.get_str(name).unwrap_or_default().to_owned();
        let decision = field("decision");
        let action = field("requested_action_id");
        match field("decision_basis").as_str() {
            "interactive" => {
                assert!(
                    e.event_id.starts_with("ctx-interactive-install:"),
                    "an interactive decision with event id {}",
                    e.event_id
                );
                let signed = self.signed_for(&action, &decision);
                assert!(
                    signed,
                    "an interactive {decision} decision for action {action} was committed that \
                     no correctly signed assertion the harness sent carries (signed: {:?})",
                    self.signed
                );
                self.stats.interactive_decisions += 1;
            }
            "preapproved-policy" => {
                assert!(
                    e.event_id.starts_with("ctx-auto-install:"),
                    "an automatic decision with event id {}",
                    e.event_id
                );
                assert_eq!(
                    decision, "granted",
                    "an automatic decision that is not a grant"
                );
                assert!(
                    self.preapproving,
                    "an automatic grant for action {action} was committed while the persisted \
                     policy asked each time"
                );
                assert_eq!(
                    field("policy_snapshot_digest"),
                    preapproving_policy().policy_digest(),
                    "an automatic grant cites another policy"
                );
                let capability = self.requested.get(&action).cloned().unwrap_or_default();
                let expands = CATALOG.iter().any(|(id, entry)| {
                    *id == capability && matches!(entry, Entry::Install { expands: true })
                });
                assert!(
                    !expands && !capability.is_empty(),
                    "an automatic grant for action {action} of {capability:?}, which needs consent"
                );
                self.stats.automatic_grants += 1;
            }
            other => panic!("a UserDecision with basis {other:?}: {}", e.event_id),
        }
        if decision == "granted" {
            self.granted.insert(action);
        }
    }

    /// Whether the harness sent a correctly signed `decision` for a challenge of `action`.
    fn signed_for(&mut self, action: &str, decision: &str) -> bool {
        let candidates: Vec<String> = self
            .signed
            .iter()
            .filter(|(_, d)| *d == decision)
            .map(|(c, _)| c.clone())
            .collect();
        candidates
            .iter()
            .any(|digest| self.challenge_action(digest).as_deref() == Some(action))
    }

    /// The requested action id of the challenge `digest`, from the broker store.
    fn challenge_action(&mut self, challenge_digest: &str) -> Option<String> {
        if let Some(a) = self.challenge_actions.get(challenge_digest) {
            return Some(a.clone());
        }
        let record = self.broker_record(challenge_digest)?;
        let action = record.challenge().requested_action_id().to_owned();
        self.challenge_actions
            .insert(challenge_digest.to_owned(), action.clone());
        Some(action)
    }

    /// The session of a challenge (its scope, from the broker store).
    fn challenge_session(&self, challenge_digest: &str) -> usize {
        let Some(record) = self.broker_record(challenge_digest) else {
            panic!("a consent result names challenge {challenge_digest}, which the broker lacks");
        };
        let scope = record.challenge().scope();
        match (0..2).find(|i| *scope == self::scope(*i)) {
            Some(i) => i,
            None => panic!("challenge {challenge_digest} belongs to no session: {scope:?}"),
        }
    }

    fn consent_store(&self) -> Option<ConsentStore> {
        let journal = self.journal()?;
        Some(ok(ConsentStore::open(journal, AUDIENCE), "consent store"))
    }

    fn broker_record(
        &self,
        challenge_digest: &str,
    ) -> Option<ctx_projections::consent_store::ChallengeRecord> {
        let store = self.consent_store()?;
        self.record_in(&store, challenge_digest)
    }

    /// The broker record of `challenge_digest` (`None` when the broker has none).
    fn record_in(
        &self,
        store: &ConsentStore,
        challenge_digest: &str,
    ) -> Option<ctx_projections::consent_store::ChallengeRecord> {
        match store.get_by_challenge_digest(
            challenge_digest,
            &digest("managed-service-workspace"),
            &digest("managed-service-release-root"),
            self.now(),
        ) {
            Ok(record) => Some(record),
            Err(ConsentStoreError::NotFound { .. }) => None,
            Err(e) => panic!("the broker record of challenge {challenge_digest}: {e:?}"),
        }
    }

    /// Every broker record of a challenge the service returned that holds a decision holds one
    /// the harness signed.
    fn check_broker_decisions(&mut self) {
        if self.challenges.is_empty() {
            return;
        }
        let Some(store) = self.consent_store() else {
            return;
        };
        for challenge in &self.challenges {
            let challenge_digest = &challenge.digest;
            let Some(record) = self.record_in(&store, challenge_digest) else {
                continue;
            };
            if let Some(decision) = record.decision() {
                assert!(
                    self.signed
                        .iter()
                        .any(|(c, d)| c == challenge_digest && *d == decision),
                    "the broker holds a {decision} decision for challenge {challenge_digest} that \
                     the harness never signed"
                );
            }
        }
    }

    /// The end: both handles closed, the journal verified, the projections equal to a rebuild,
    /// the replay audit clean.
    fn finish(mut self) -> Stats {
        for handle in &self.handles {
            handle.close();
        }
        self.check();
        if let Some(journal) = self.journal() {
            let report = ok(journal.verify(), "journal verify");
            assert!(report.is_ok(), "journal verify: {report:?}");
            let clock: Arc<dyn Clock> = self.clock.clone();
            let engine = ok(
                Engine::open(journal.clone(), EngineOptions::new(clock)),
                "open an engine",
            );
            for name in [
                ENGINE_STATE_PROJECTION,
                ENGINE_EFFECTS_PROJECTION,
                ENGINE_BENEFIT_AUDIT_PROJECTION,
            ] {
                let check = ok(engine.projections().check(name), "projection check");
                assert!(check.is_equal(), "{name} differs from a rebuild: {check:?}");
            }
            for session in 0..2 {
                let audit = ok(engine.replay_audit(&scope(session)), "replay audit");
                assert!(
                    audit.is_clean(),
                    "replay audit of session {session}: {:?}",
                    audit.divergence()
                );
                assert_eq!(
                    audit.revisions_checked(),
                    self.engine_head(session),
                    "the replay audit did not check every revision of session {session}"
                );
            }
            drop(engine);
            let store = ok(QueryStore::open(journal.clone()), "query store");
            let check = ok(
                store.projections().check(QUERY_STORE_PROJECTION),
                "query store check",
            );
            assert!(
                check.is_equal(),
                "query store differs from a rebuild: {check:?}"
            );
            drop(store);
            let consent = ok(ConsentStore::open(journal, AUDIENCE), "consent store");
            let check = ok(
                consent.projections().check(CONSENT_STORE_PROJECTION),
                "consent store check",
            );
            assert!(
                check.is_equal(),
                "consent store differs from a rebuild: {check:?}"
            );
        }
        trace(|| format!("  stats {:?}", self.stats));
        let fx = self.fx;
        let stats = self.stats.clone();
        drop(self);
        crate::remove_dir(&fx.run_dir);
        stats
    }
}

// ------------------------------------------------------------------------------------------------
// Encoding: the bytes `arbitrary` decodes back into a program (for seeds and tests)
// ------------------------------------------------------------------------------------------------

/// The four bytes of a derived enum's variant choice: `arbitrary` takes a `u32` `x` and picks
/// variant `(x * count) >> 32`.
fn variant(out: &mut Vec<u8>, index: u64, count: u64) {
    let x = u32::try_from((index << 32).div_ceil(count)).unwrap_or(u32::MAX);
    out.extend_from_slice(&x.to_le_bytes());
}

impl Program {
    /// The bytes `Program::arbitrary_take_rest` (what libFuzzer's `fuzz_target!` calls) decodes
    /// back into this program: seeds for the corpus.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for step in &self.steps {
            // A collection taking the rest of the input continues while a `bool` says so.
            out.push(1);
            step.encode(&mut out);
        }
        out.push(0);
        out
    }
}

impl Step {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 7;
        match *self {
            Step::Call(handle, op) => {
                variant(out, 0, N);
                out.push(u8::from(handle));
                op.encode(out);
            }
            Step::Crash {
                point,
                panic,
                handle,
                op,
            } => {
                variant(out, 1, N);
                out.extend([point, u8::from(panic), u8::from(handle)]);
                op.encode(out);
            }
            Step::Advance(n) => {
                variant(out, 2, N);
                out.push(n);
            }
            Step::FailLoads(n) => {
                variant(out, 3, N);
                out.push(n);
            }
            Step::Policy(preapprove) => {
                variant(out, 4, N);
                out.push(u8::from(preapprove));
            }
            Step::Restart => variant(out, 5, N),
            Step::Close(handle) => {
                variant(out, 6, N);
                out.push(u8::from(handle));
            }
        }
    }
}

impl Op {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 6;
        match *self {
            Op::Prepare { label, work } => {
                variant(out, 0, N);
                out.extend([label, work]);
            }
            Op::Reopen(n) => {
                variant(out, 1, N);
                out.push(n);
            }
            Op::Desired {
                query,
                choice,
                mask,
                previous,
            } => {
                variant(out, 2, N);
                out.extend([query, choice, mask, previous]);
            }
            Op::Retry => variant(out, 3, N),
            Op::Resolve(sign) => {
                variant(out, 4, N);
                sign.encode(out);
            }
            Op::Recover(n) => {
                variant(out, 5, N);
                out.push(n);
            }
        }
    }
}

impl Sign {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 7;
        match *self {
            Sign::Grant => variant(out, 0, N),
            Sign::Deny => variant(out, 1, N),
            Sign::BadProof => variant(out, 2, N),
            Sign::OtherPrincipal => variant(out, 3, N),
            Sign::Early => variant(out, 4, N),
            Sign::Old(k, granted) => {
                variant(out, 5, N);
                out.extend([k, u8::from(granted)]);
            }
            Sign::ReusedNonce => variant(out, 6, N),
        }
    }
}

/// The committed seeds (`corpus/exactly_once/seed-*`), by name.
pub fn seeds() -> Vec<(&'static str, Program)> {
    use Op::*;
    use Step::{Advance, Call, Close, Crash, FailLoads, Policy, Restart};
    let a = false;
    let b = true;
    vec![
        // A consent-gated install granted by a signed assertion, a pre-approved install, a
        // consent for the permission-expanding skill, and a crash after the install claim that
        // the retry recovers.
        (
            "seed-1",
            Program {
                steps: vec![
                    Policy(false),
                    Call(a, Prepare { label: 0, work: 0 }),
                    Call(
                        a,
                        Desired {
                            query: 0,
                            choice: 0,
                            mask: 0b0001,
                            previous: 0,
                        },
                    ),
                    Call(b, Resolve(Sign::Grant)),
                    Policy(true),
                    Call(b, Prepare { label: 1, work: 2 }),
                    Crash {
                        point: 6, // install-after-claim
                        panic: false,
                        handle: b,
                        op: Desired {
                            query: 1,
                            choice: 1,
                            mask: 0b0111,
                            previous: 1,
                        },
                    },
                    Call(a, Retry),
                    Call(b, Resolve(Sign::Grant)),
                    Call(a, Retry),
                ],
            },
        ),
        // A pre-approved install whose body load fails (indeterminate, retired after its TTL), a
        // panic between the desired commit and its mark, a forged assertion, a denial that
        // commits without its broker settlement and is recovered, a reused nonce, a closed
        // handle, then in session 2 an interactive grant whose broker record is written before
        // a panic, recovered as re-authentication and granted afresh.
        (
            "seed-2",
            Program {
                steps: vec![
                    FailLoads(1),
                    Policy(true),
                    Call(b, Prepare { label: 1, work: 1 }),
                    Crash {
                        point: 1, // desired-before-mark
                        panic: true,
                        handle: a,
                        op: Desired {
                            query: 0,
                            choice: 0,
                            mask: 0b0110,
                            previous: 1,
                        },
                    },
                    Call(b, Retry),
                    Advance(2),
                    Call(a, Retry),
                    Call(a, Resolve(Sign::BadProof)),
                    Crash {
                        point: 13, // consent-before-settle
                        panic: false,
                        handle: a,
                        op: Resolve(Sign::Deny),
                    },
                    Call(b, Recover(0)),
                    Call(a, Resolve(Sign::ReusedNonce)),
                    Close(a),
                    Call(a, Retry),
                    Restart,
                    Call(a, Reopen(0)),
                    Policy(false),
                    Call(b, Prepare { label: 0, work: 2 }),
                    Call(
                        b,
                        Desired {
                            query: 1,
                            choice: 0,
                            mask: 0b0001,
                            previous: 1,
                        },
                    ),
                    Crash {
                        point: 12, // consent-after-authenticate
                        panic: true,
                        handle: b,
                        op: Resolve(Sign::Grant),
                    },
                    Call(a, Recover(0)),
                    Call(a, Resolve(Sign::Grant)),
                ],
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use Op::*;
    use Step::{Advance, Close, Crash, FailLoads, Policy, Restart};

    const A: bool = false;
    const B: bool = true;

    fn desired(choice: u8, mask: u8, previous: u8) -> Op {
        Desired {
            query: 0,
            choice,
            mask,
            previous,
        }
    }

    fn prepare() -> Step {
        Step::Call(A, Prepare { label: 0, work: 0 })
    }

    /// Pre-approved installs of alpha and beta (and the manual agent), retried from the other
    /// handle, across a restart.
    fn preapproved() -> Program {
        Program {
            steps: vec![
                Policy(true),
                prepare(),
                Step::Call(A, desired(0, 0b1011, 1)),
                Step::Call(B, Retry),
                Restart,
                Step::Call(B, Retry),
                Step::Call(A, Reopen(0)),
            ],
        }
    }

    /// Interactive consent in session 1: forged, foreign and early assertions refused, a denial,
    /// a new choice granted and a second (stale) grant; then in session 2, under the
    /// pre-approving policy, a choice of alpha (automatic) and gamma (always interactive; the skill
    /// CAS refuses a permission-expanding install, so its grant ends indeterminate); recovery, a
    /// reused nonce, an old challenge, unknown and malformed digests.
    fn consents() -> Program {
        Program {
            steps: vec![
                Policy(false),
                prepare(),
                Step::Call(A, desired(0, 0b0001, 1)),
                Step::Call(B, Resolve(Sign::BadProof)),
                Step::Call(B, Resolve(Sign::OtherPrincipal)),
                Step::Call(B, Resolve(Sign::Early)),
                Step::Call(A, Recover(0)),
                Step::Call(B, Resolve(Sign::Deny)),
                Step::Call(A, desired(1, 0b0010, 0)),
                Step::Call(B, Resolve(Sign::Grant)),
                Step::Call(A, Resolve(Sign::Grant)),
                Policy(true),
                Step::Call(B, Prepare { label: 1, work: 2 }),
                Step::Call(
                    A,
                    Desired {
                        query: 1,
                        choice: 1,
                        mask: 0b0101,
                        previous: 1,
                    },
                ),
                Step::Call(A, Recover(0)),
                Step::Call(A, Resolve(Sign::ReusedNonce)),
                Step::Call(B, Resolve(Sign::Old(2, true))),
                Step::Call(B, Resolve(Sign::Grant)),
                Step::Call(A, Recover(6)),
                Step::Call(A, Recover(7)),
                Step::Call(A, Retry),
            ],
        }
    }

    /// Expiry: a challenge left past its TTL and recovered, a late grant, a new choice; a body
    /// source failure under pre-approval; closed handles, unknown and aliased work references,
    /// another label on the same plan, malformed and unknown references.
    fn time_and_failures() -> Program {
        Program {
            steps: vec![
                Step::Call(A, Reopen(0)),
                Step::Call(A, Reopen(255)),
                Step::Call(A, desired(0, 1, 1)),
                Step::Call(A, Retry),
                Step::Call(B, Resolve(Sign::Grant)),
                Policy(false),
                Step::Call(A, Prepare { label: 0, work: 3 }),
                prepare(),
                Step::Call(B, Prepare { label: 0, work: 1 }),
                Step::Call(B, Prepare { label: 1, work: 0 }),
                Step::Call(A, desired(0, 0b0001, 1)),
                Advance(2),
                Step::Call(B, Resolve(Sign::Grant)),
                Step::Call(A, Recover(0)),
                Step::Call(A, Recover(0)),
                Step::Call(A, desired(1, 0b0001, 0)),
                FailLoads(1),
                Policy(true),
                Step::Call(A, desired(2, 0b0011, 0)),
                Step::Call(A, Retry),
                Advance(3),
                Step::Call(B, Retry),
                Close(B),
                Step::Call(B, Retry),
            ],
        }
    }

    /// Every crash point, both ways, while prepares, automatic installs, consent publication,
    /// resolution, recovery and interactive installs run in both sessions.
    fn crash_program(point: u8, panic: bool) -> Program {
        let crash = |handle, op| Crash {
            point,
            panic,
            handle,
            op,
        };
        let second = |choice, mask| Desired {
            query: 1,
            choice,
            mask,
            previous: 0,
        };
        Program {
            steps: vec![
                Policy(true),
                crash(A, Prepare { label: 0, work: 0 }),
                prepare(),
                crash(B, desired(0, 0b0101, 1)),
                Step::Call(A, Retry),
                Step::Call(A, Retry),
                crash(B, Resolve(Sign::Grant)),
                Step::Call(A, Recover(0)),
                Step::Call(A, Retry),
                Step::Call(B, Resolve(Sign::Grant)),
                Step::Call(A, Retry),
                Policy(false),
                Step::Call(A, Prepare { label: 1, work: 2 }),
                crash(A, second(0, 0b0001)),
                Step::Call(B, Retry),
                crash(B, Recover(0)),
                crash(A, Resolve(Sign::Deny)),
                Step::Call(B, Recover(0)),
                Step::Call(B, Resolve(Sign::Grant)),
                Step::Call(A, second(1, 0b0010)),
                Step::Call(A, Resolve(Sign::Grant)),
                Step::Call(A, Retry),
            ],
        }
    }

    fn programs() -> Vec<(String, Program)> {
        let mut all = vec![
            ("preapproved".to_owned(), preapproved()),
            ("consents".to_owned(), consents()),
            ("time-and-failures".to_owned(), time_and_failures()),
            ("crash-3-panic".to_owned(), crash_program(3, true)),
        ];
        all.extend(seeds().into_iter().map(|(n, p)| (n.to_owned(), p)));
        all
    }

    fn decode(bytes: &[u8]) -> arbitrary::Result<Program> {
        Program::arbitrary_take_rest(arbitrary::Unstructured::new(bytes))
    }

    #[test]
    fn programs_encode_to_the_bytes_that_decode_to_them() {
        for (name, program) in programs() {
            match decode(&program.to_bytes()) {
                Ok(decoded) => assert_eq!(decoded, program, "{name}"),
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }

    #[test]
    fn preapproved_installs_run_once() {
        let stats = run_stats(&preapproved());
        assert_eq!(stats.automatic_grants, 2, "{stats:?}");
        assert_eq!(stats.loads, 2, "{stats:?}");
        assert_eq!((stats.claims, stats.settlements), (2, 2), "{stats:?}");
        assert_eq!(stats.interactive_decisions, 0, "{stats:?}");
    }

    #[test]
    fn signed_consents_and_refusals() {
        let stats = run_stats(&consents());
        assert_eq!(stats.interactive_decisions, 3, "{stats:?}");
        assert_eq!(stats.automatic_grants, 1, "{stats:?}");
        assert_eq!(stats.loads, 2, "{stats:?}");
        assert_eq!((stats.claims, stats.settlements), (3, 2), "{stats:?}");
        assert_eq!(stats.challenges, 3, "{stats:?}");
        assert!(stats.refused >= 7, "{stats:?}");
    }

    /// Found by this target: a signed denial of the first of two consent-gated installs was
    /// refused as "interactive consent decision transition was substituted" (the denial's
    /// transition carries the next consent request), so it could never commit.
    #[test]
    fn a_denial_beside_another_desired_install_commits() {
        let stats = run_stats(&Program {
            steps: vec![
                Policy(false),
                prepare(),
                Step::Call(A, desired(0, 0b0011, 1)),
                Step::Call(B, Resolve(Sign::Deny)),
                Step::Call(A, Retry),
                Step::Call(B, Resolve(Sign::Grant)),
            ],
        });
        assert_eq!(stats.interactive_decisions, 2, "{stats:?}");
        assert_eq!((stats.loads, stats.settlements), (1, 1), "{stats:?}");
    }

    #[test]
    fn time_failures_and_refusals() {
        let stats = run_stats(&time_and_failures());
        assert!(stats.refused >= 6, "{stats:?}");
    }

    #[test]
    fn crashes_at_every_fail_point() {
        let mut fired = 0;
        let mut panics = 0;
        for point in 0..CRASH_POINTS.len() as u8 {
            for panic in [false, true] {
                let stats = run_stats(&crash_program(point, panic));
                fired += stats.crashes_fired;
                panics += stats.panics_caught;
                assert!(
                    stats.crashes_fired + stats.panics_caught > 0,
                    "{} (panic {panic}) never fired: {stats:?}",
                    CRASH_POINTS[usize::from(point)]
                );
            }
        }
        assert!(fired > 0 && panics > 0, "{fired} {panics}");
    }

    #[test]
    fn seeds_pass() {
        for (name, program) in seeds() {
            let stats = run_stats(&program);
            assert!(
                stats.crashes_fired + stats.panics_caught > 0,
                "{name}: {stats:?}"
            );
        }
    }

    #[test]
    fn arbitrary_programs_pass() {
        // Deterministic pseudo-random inputs through the same decoding libFuzzer uses.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..16 {
            let bytes: Vec<u8> = (0..160)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if let Ok(program) = decode(&bytes) {
                run(&program);
            }
        }
    }

    /// Runs `steps`, then `doctor` on the harness, and returns the panic message of the next
    /// check (`None` when it passes).
    fn doctored(steps: &[Step], doctor: impl FnOnce(&mut Harness)) -> Option<String> {
        let _turn = turn();
        install_panic_hook();
        let mut h = Harness::new();
        for step in steps {
            h.step(*step);
        }
        h.check();
        doctor(&mut h);
        // The doctored state must be checked in full, as after an append.
        h.checked_position = u64::MAX;
        let r = catch_unwind(AssertUnwindSafe(|| h.check()));
        drop(h);
        crate::remove_dir(&fixture().run_dir);
        r.err().map(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        })
    }

    #[test]
    fn the_checks_detect_violations() {
        let auto = [
            Policy(true),
            prepare(),
            Step::Call(A, desired(0, 0b0001, 1)),
        ];
        let signed = [
            Policy(false),
            prepare(),
            Step::Call(A, desired(0, 0b0001, 1)),
            Step::Call(A, Resolve(Sign::Grant)),
        ];
        // Untouched, the checks pass.
        assert_eq!(doctored(&auto, |_| {}), None);
        assert_eq!(doctored(&signed, |_| {}), None);
        // A second driver run for the installed action.
        let message = doctored(&auto, |h| {
            let mut loads = h.body.loads.lock().unwrap_or_else(PoisonError::into_inner);
            for n in loads.values_mut() {
                *n += 1;
            }
        });
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("the install driver ran 2 times")),
            "{message:?}"
        );
        // A driver run for an action nobody claimed.
        let message = doctored(&auto, |h| {
            h.body
                .loads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert("ctx-action-nobody-claimed".to_owned(), 1);
        });
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("has no durable claim")),
            "{message:?}"
        );
        // An automatic grant while the harness believes the policy asked each time.
        let message = doctored(&auto, |h| {
            h.preapproving = false;
            h.checked = [0; 2];
        });
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("policy asked each time")),
            "{message:?}"
        );
        // An interactive grant the harness did not sign.
        let message = doctored(&signed, |h| {
            h.signed.clear();
            h.checked = [0; 2];
        });
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("no correctly signed assertion")),
            "{message:?}"
        );
        // A claim without a grant.
        let message = doctored(&signed, |h| h.granted.clear());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("claimed without a committed grant")),
            "{message:?}"
        );
        // A broker decision the harness did not sign.
        let message = doctored(&signed, |h| {
            h.signed.clear();
        });
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("the harness never signed")),
            "{message:?}"
        );
    }

    #[test]
    fn a_wrong_result_digest_is_detected() {
        let _turn = turn();
        let mut h = Harness::new();
        h.step(prepare());
        let good = h.engine_event(0, 2).record_digest;
        let right = catch_unwind(AssertUnwindSafe(|| h.assert_record(0, 2, &good, "real")));
        let wrong = catch_unwind(AssertUnwindSafe(|| {
            h.assert_record(0, 2, &digest("not-the-record"), "doctored")
        }));
        let missing = catch_unwind(AssertUnwindSafe(|| h.assert_record(0, 9, &good, "later")));
        drop(h);
        crate::remove_dir(&fixture().run_dir);
        assert!(right.is_ok(), "the real record digest must pass");
        assert!(wrong.is_err(), "another record digest must fail");
        assert!(missing.is_err(), "a revision the journal lacks must fail");
    }

    /// The committed seeds are the bytes of [`seeds`]; `CTX_FUZZ_WRITE_SEEDS=1 cargo test
    /// --release exactly_once` rewrites them.
    #[test]
    fn committed_seeds_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/exactly_once");
        let write = std::env::var_os("CTX_FUZZ_WRITE_SEEDS").is_some();
        if write {
            ok(fs::create_dir_all(&dir), "corpus directory");
        }
        for (name, program) in seeds() {
            let path = dir.join(name);
            if write {
                ok(fs::write(&path, program.to_bytes()), "seed");
            }
            match fs::read(&path) {
                Ok(bytes) => assert_eq!(bytes, program.to_bytes(), "{}", path.display()),
                Err(e) => panic!("{}: {e} (CTX_FUZZ_WRITE_SEEDS=1 writes it)", path.display()),
            }
        }
    }
}
