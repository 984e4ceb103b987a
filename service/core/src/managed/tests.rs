//! Tests of the managed query service over the sample catalog, in private temporary directories.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctx_model::{
    CURRENT_WORK_SCHEMA, EngineEvent, Json, ScopeRef, Surrogate, UtcMicros, sha256_hex,
};
use ctx_projections::engine::ManualClock;
use ctx_projections::query_store::QueryStoreError;

use super::composition::EngineAuditSink;
use super::*;
use crate::catalog::{
    CapabilityCandidate, Catalog, WorkObservation, load_catalog_dir, sample_catalog_dir,
};
use crate::planning::adapter::{AdapterPorts, ReplayDecisionPlanner};
use crate::planning::benefit::{BenefitCandidate, NetBenefitPolicy};
use crate::planning::plan::AuthenticatedNetBenefitPlanner;
use crate::planning::ports::{BenefitFactsPort, CatalogBenefitFacts, PortError};
use crate::registry::{ArtifactHandle, ArtifactRegistry, IngestInputs};

const VERSION: &str = "ctx-managed-service-planner-v3";
const NOW: &str = "2026-08-03T12:00:00Z";

fn digest(label: &str) -> String {
    sha256_hex(label)
}

/// Catalog-metadata facts that count their calls, so a test can prove planning ran once.
struct CountingFacts {
    inner: CatalogBenefitFacts,
    calls: AtomicUsize,
}

impl BenefitFactsPort for CountingFacts {
    fn benefit_facts_snapshot_digest(&self) -> &str {
        self.inner.benefit_facts_snapshot_digest()
    }

    fn benefit_candidate(
        &self,
        presentation: &CapabilityCandidate,
        observation: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.benefit_candidate(presentation, observation)
    }
}

/// Resolves work references from a table the test fills.
#[derive(Default)]
struct Inputs {
    values: Mutex<HashMap<String, Box<dyn Fn() -> QueryInput + Send>>>,
}

impl QueryInputAuthority for Inputs {
    fn resolve(&self, current_work_ref: &str) -> Result<QueryInput, InputAuthorityError> {
        let values = self.values.lock().unwrap();
        values
            .get(current_work_ref)
            .map(|make| make())
            .ok_or_else(|| InputAuthorityError::new("unknown work reference"))
    }
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
            ("requested_limit", Json::Int(5)),
            (
                "signals",
                Json::Arr(vec![Json::str("lint"), Json::str("testing")]),
            ),
        ]),
    )
}

fn scope(session: &str) -> ScopeRef {
    ScopeRef::new(
        "tenant-1",
        "workspace-1",
        "repo-1",
        session,
        "exposure-codex",
        "host-codex",
        None,
    )
    .unwrap()
}

/// The session start and intent of one managed query bound to `artifact` (the seed's `_events`).
fn events(artifact: &ArtifactHandle) -> (EngineEvent, EngineEvent) {
    events_in(artifact, "session-1", "plan-initial")
}

fn events_in(artifact: &ArtifactHandle, session: &str, plan: &str) -> (EngineEvent, EngineEvent) {
    let (mut started, mut intent) = super::planning_events(
        artifact,
        &super::PlanningEventsSpec {
            scope: &scope(session),
            occurred_at: NOW,
            session_event_id: &format!("event-session-started-{session}"),
            intent_event_id: &format!("event-intent-observed-{session}"),
            correlation_id: plan,
            session_causation_id: "cause-session",
            host_descriptor_digest: &digest("host-neutral-managing"),
            work_signature: &digest("managed-service-work"),
        },
    );
    started.validate().unwrap();
    intent.validate().unwrap();
    (started, intent)
}

/// The planning environment: a function of the ports, the policy and the version alone.
fn environment(ports: &AdapterPorts, policy: &NetBenefitPolicy, catalog: &Catalog) -> String {
    let planner =
        AuthenticatedNetBenefitPlanner::new(policy.clone(), EngineAuditSink::default()).unwrap();
    ReplayDecisionPlanner::new(planner, ports.clone(), VERSION, catalog.namespace_digest())
        .unwrap()
        .catalog_snapshot_digest()
        .to_owned()
}

struct Setup {
    _dir: tempfile::TempDir,
    data_dir: PathBuf,
    registry: Arc<ArtifactRegistry>,
    catalog: Arc<Catalog>,
    facts: Arc<CountingFacts>,
    policy: NetBenefitPolicy,
    ports: AdapterPorts,
    inputs: Arc<Inputs>,
    clock: Arc<ManualClock>,
    service: QueryService,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let loaded = load_catalog_dir(&sample_catalog_dir()).unwrap();
        let catalog = Arc::new(loaded.catalog().clone());
        let facts = Arc::new(CountingFacts {
            inner: CatalogBenefitFacts::new(catalog.clone()),
            calls: AtomicUsize::new(0),
        });
        let mut ports = AdapterPorts::from_catalog(catalog.clone());
        ports.facts = facts.clone();
        let policy = NetBenefitPolicy::new(&digest("managed-service-calibration"), 100_000);
        let registry = Arc::new(ArtifactRegistry::open(&dir.path().join("registry")).unwrap());
        let inputs = Arc::new(Inputs::default());
        let setup_inputs = IngestInputs {
            planning_environment_digest: environment(&ports, &policy, &catalog),
            catalog_namespace_digest: catalog.namespace_digest().to_owned(),
            catalog_retrieval_digest: catalog.retrieval_snapshot_digest().to_owned(),
            benefit_facts_snapshot_digest: facts.benefit_facts_snapshot_digest().to_owned(),
            benefit_policy_snapshot_digest: policy.policy_digest(),
            material_snapshot_digest: catalog.material_snapshot_digest().to_owned(),
            installation_snapshot_digest: catalog.installation_snapshot_digest().to_owned(),
            observation_surrogate: surrogate(),
            planning_schema_version: VERSION.to_owned(),
        };
        let loaded = Arc::new(loaded);
        for (work, session, plan) in [
            ("work-one", "session-1", "plan-initial"),
            ("work-two", "session-2", "plan-second"),
        ] {
            let registry = registry.clone();
            let ingest = setup_inputs.clone();
            let loaded = loaded.clone();
            inputs.values.lock().unwrap().insert(
                work.into(),
                Box::new(move || {
                    let artifact = registry.ingest(&loaded, ingest.clone()).unwrap();
                    let (started, intent) = events_in(&artifact, session, plan);
                    QueryInput::new(artifact, started, intent)
                }),
            );
        }
        let clock = Arc::new(ManualClock::new(UtcMicros::parse(NOW).unwrap()));
        let data_dir = dir.path().join("data");
        let service = open_service(&data_dir, &registry, &inputs, &ports, &policy, &clock);
        Setup {
            _dir: dir,
            data_dir,
            registry,
            catalog,
            facts,
            policy,
            ports,
            inputs,
            clock,
            service,
        }
    }

    fn reopen_service(&self) -> QueryService {
        open_service(
            &self.data_dir,
            &self.registry,
            &self.inputs,
            &self.ports,
            &self.policy,
            &self.clock,
        )
    }

    fn calls(&self) -> usize {
        self.facts.calls.load(Ordering::SeqCst)
    }
}

fn open_service(
    data_dir: &std::path::Path,
    registry: &Arc<ArtifactRegistry>,
    inputs: &Arc<Inputs>,
    ports: &AdapterPorts,
    policy: &NetBenefitPolicy,
    clock: &Arc<ManualClock>,
) -> QueryService {
    open_query_service(QueryServiceConfig {
        data_dir: data_dir.to_path_buf(),
        registry: registry.clone(),
        input_authority: inputs.clone(),
        ports: ports.clone(),
        net_benefit_policy: policy.clone(),
        planner_version: VERSION.to_owned(),
        clock: clock.clone(),
        policy_store_root: None,
        skill_cas: None,
        material_store: None,
        consent: None,
        verifier_registry: None,
    })
    .unwrap()
}

fn request(label: &str) -> QueryRequest {
    QueryRequest::new(&digest(label), "work-one").unwrap()
}

#[test]
fn prepare_plans_a_bounded_ready_result() {
    let s = Setup::new();
    let result = s.service.prepare(&request("query-one")).unwrap();
    assert!(result.query_ref().starts_with("mqr_"));
    let prepared = result.prepared();
    assert_eq!(prepared.status(), "ready");
    assert_eq!(prepared.plan_id(), "plan-initial");
    assert_eq!(prepared.journal_revision(), 2);
    assert!(!prepared.selections().is_empty() && prepared.selections().len() <= 5);
    assert!(prepared.benefit_result_digest().is_some());
    assert_eq!(prepared.requested_limit(), Some(5));
    for selection in prepared.selections() {
        assert!(
            s.catalog
                .entries()
                .iter()
                .any(|e| e.id == selection.capability_id())
        );
    }
    assert!(result.challenge().is_none());
    assert!(s.calls() > 0);
}

#[test]
fn an_exact_retry_and_a_reopen_plan_only_once() {
    let s = Setup::new();
    let first = s.service.prepare(&request("retry")).unwrap();
    let planned = s.calls();
    let retried = s.service.prepare(&request("retry")).unwrap();
    let reopened = s.service.reopen(first.query_ref()).unwrap();
    assert_eq!(s.calls(), planned);
    assert_eq!(first.query_ref(), retried.query_ref());
    assert_eq!(first.query_ref(), reopened.query_ref());
    assert_eq!(
        first.prepared().decision_digest(),
        retried.prepared().decision_digest()
    );
    assert_eq!(
        first.prepared().decision_digest(),
        reopened.prepared().decision_digest()
    );
    assert_eq!(first.actions(), retried.actions());
    assert_eq!(first.actions(), reopened.actions());
}

#[test]
fn reopen_converges_after_the_service_is_dropped_and_reopened() {
    let s = Setup::new();
    let first = s.service.prepare(&request("durable")).unwrap();
    s.service.close();
    let planned = s.calls();
    let service = s.reopen_service();
    let reopened = service.reopen(first.query_ref()).unwrap();
    assert_eq!(s.calls(), planned);
    assert_eq!(
        reopened.prepared().decision_digest(),
        first.prepared().decision_digest()
    );
    assert_eq!(reopened.actions(), first.actions());
    let unknown = format!("mqr_{}", digest("unknown"));
    assert!(matches!(
        service.reopen(&unknown),
        Err(ServiceError::Store(QueryStoreError::NotFound { .. }))
    ));
}

#[test]
fn a_closed_service_refuses_every_operation() {
    let s = Setup::new();
    let first = s.service.prepare(&request("closing")).unwrap();
    s.service.close();
    s.service.close();
    assert!(s.service.is_closed());
    let closed = |r: Result<QueryServiceResult, ServiceError>| {
        r.unwrap_err().to_string() == "managed query service is closed"
    };
    assert!(closed(s.service.prepare(&request("closing"))));
    assert!(closed(s.service.reopen(first.query_ref())));
}

#[test]
fn malformed_requests_and_references_are_refused() {
    let message = |r: Result<QueryRequest, ServiceError>| r.unwrap_err().to_string();
    assert_eq!(
        message(QueryRequest::new("ABC", "work-one")),
        "logical_query_id must be a lowercase SHA-256 digest"
    );
    assert_eq!(
        message(QueryRequest::new(&digest("q"), "")),
        "current_work_ref must be a bounded opaque token"
    );
    assert_eq!(
        message(QueryRequest::new(&digest("q"), &"w".repeat(129))),
        "current_work_ref must be a bounded opaque token"
    );
    let s = Setup::new();
    assert_eq!(
        s.service.reopen("mqr_nothex").unwrap_err().to_string(),
        "opaque_query_ref must be an opaque managed-query reference"
    );
}

#[test]
fn a_foreign_handle_is_refused_before_any_journal_write() {
    let s = Setup::new();
    let foreign = Arc::new(ArtifactRegistry::open(&s._dir.path().join("foreign")).unwrap());
    let loaded = load_catalog_dir(&sample_catalog_dir()).unwrap();
    let ingest = IngestInputs {
        planning_environment_digest: environment(&s.ports, &s.policy, &s.catalog),
        catalog_namespace_digest: s.catalog.namespace_digest().to_owned(),
        catalog_retrieval_digest: s.catalog.retrieval_snapshot_digest().to_owned(),
        benefit_facts_snapshot_digest: s.facts.benefit_facts_snapshot_digest().to_owned(),
        benefit_policy_snapshot_digest: s.policy.policy_digest(),
        material_snapshot_digest: s.catalog.material_snapshot_digest().to_owned(),
        installation_snapshot_digest: s.catalog.installation_snapshot_digest().to_owned(),
        observation_surrogate: surrogate(),
        planning_schema_version: VERSION.to_owned(),
    };
    s.inputs.values.lock().unwrap().insert(
        "foreign-work".into(),
        Box::new(move || {
            let artifact = foreign.ingest(&loaded, ingest.clone()).unwrap();
            let (started, intent) = events(&artifact);
            QueryInput::new(artifact, started, intent)
        }),
    );
    let request = QueryRequest::new(&digest("foreign"), "foreign-work").unwrap();
    let error = s.service.prepare(&request).unwrap_err();
    assert_eq!(
        error.to_string(),
        "managed query artifact was not issued by this service registry"
    );
    assert!(!s.data_dir.exists(), "no journal may be created");
    assert_eq!(s.calls(), 0);
}

/// Journal records of one prepare of a fresh query on a warm service (the journal and query
/// store already open): four records in two appends (registration + session start; planning
/// event + planned mark), so two group commits. The fsync count is measured with
/// `fresh_prepares_between_markers` (spec/service.md §5).
#[test]
fn one_fresh_prepare_appends_four_records() {
    let s = Setup::new();
    s.service.prepare(&request("warm-up")).unwrap();
    let journal =
        ctx_journal::Journal::open(&s.data_dir, &ctx_journal::OpenOptions::new()).unwrap();
    let before = journal.head_position().unwrap();
    eprintln!("CTX-FSYNC-PROBE-BEGIN");
    let second = QueryRequest::new(&digest("fresh"), "work-two").unwrap();
    s.service.prepare(&second).unwrap();
    eprintln!("CTX-FSYNC-PROBE-END");
    let after = journal.head_position().unwrap();
    // Registration, session start, planning event, planned mark. A new observation's benefit
    // result is a fifth record of the planning append; this one plans the warm-up's observation
    // again, whose result (keyed by its digest) is already stored.
    assert_eq!(after - before, 4);
}

/// Eight fresh prepares on a warm service, each between stderr markers, for counting fsyncs:
/// `strace -f -e trace=fdatasync,write -o /tmp/trace <test binary> fresh_prepares_between_markers
/// --nocapture` and count the `fdatasync` lines between each `CTX-FSYNC-PREPARE-BEGIN` /
/// `-END` pair (spec/service.md §5). Each prepare is two journal commits.
#[test]
fn fresh_prepares_between_markers() {
    let s = Setup::new();
    s.service.prepare(&request("warm-up")).unwrap();
    let loaded = Arc::new(load_catalog_dir(&sample_catalog_dir()).unwrap());
    let ingest = IngestInputs {
        planning_environment_digest: environment(&s.ports, &s.policy, &s.catalog),
        catalog_namespace_digest: s.catalog.namespace_digest().to_owned(),
        catalog_retrieval_digest: s.catalog.retrieval_snapshot_digest().to_owned(),
        benefit_facts_snapshot_digest: s.facts.benefit_facts_snapshot_digest().to_owned(),
        benefit_policy_snapshot_digest: s.policy.policy_digest(),
        material_snapshot_digest: s.catalog.material_snapshot_digest().to_owned(),
        installation_snapshot_digest: s.catalog.installation_snapshot_digest().to_owned(),
        observation_surrogate: surrogate(),
        planning_schema_version: VERSION.to_owned(),
    };
    for i in 0..8 {
        let registry = s.registry.clone();
        let ingest = ingest.clone();
        let loaded = loaded.clone();
        s.inputs.values.lock().unwrap().insert(
            format!("work-m{i}"),
            Box::new(move || {
                let artifact = registry.ingest(&loaded, ingest.clone()).unwrap();
                let (started, intent) =
                    events_in(&artifact, &format!("session-m{i}"), &format!("plan-m{i}"));
                QueryInput::new(artifact, started, intent)
            }),
        );
    }
    let journal =
        ctx_journal::Journal::open(&s.data_dir, &ctx_journal::OpenOptions::new()).unwrap();
    for i in 0..8 {
        let request =
            QueryRequest::new(&digest(&format!("measured-{i}")), &format!("work-m{i}")).unwrap();
        let before = journal.head_position().unwrap();
        eprintln!("CTX-FSYNC-PREPARE-BEGIN {i}");
        let result = s.service.prepare(&request).unwrap();
        eprintln!("CTX-FSYNC-PREPARE-END {i}");
        assert_eq!(journal.head_position().unwrap() - before, 4);
        assert_eq!(result.prepared().journal_revision(), 2);
    }
}

/// spec/projections.md §8.10 crash points with two commits per prepare: a crash after the first
/// append (registration and session start) leaves a registered, started, unplanned query that a
/// reopen plans and an exact retry then returns without planning again.
#[test]
fn a_crash_after_the_registration_append_is_completed_by_reopen_and_retry() {
    let s = Setup::new();
    let input = s.inputs.resolve("work-one").unwrap();
    let composition = super::composition::open_engine_composition(
        &s.data_dir,
        input.artifact(),
        s.ports.clone(),
        s.policy.clone(),
        VERSION,
        s.clock.clone(),
    )
    .unwrap();
    let store =
        ctx_projections::query_store::QueryStore::open(composition.engine().journal().clone())
            .unwrap();
    let registration = store
        .registration_append(
            &digest("crash"),
            input.session_started(),
            input.decision_event(),
            input.artifact().manifest_digest(),
            input.artifact().planning_environment_digest(),
        )
        .unwrap();
    assert!(store.registered(&registration).unwrap().is_none());
    let position = store.journal().head_position().unwrap();
    composition
        .check_managed_events(input.session_started(), input.decision_event())
        .unwrap();
    composition
        .start_managed_query(input.session_started(), vec![registration.clone()])
        .unwrap()
        .unwrap();
    assert_eq!(store.journal().head_position().unwrap(), position + 2);
    let record = store.registration_outcome(&registration, Ok(())).unwrap();
    assert!(!record.is_planned());
    assert_eq!(s.calls(), 0);
    drop((composition, store));

    let reopened = s.service.reopen(record.query_ref()).unwrap();
    assert_eq!(reopened.prepared().journal_revision(), 2);
    let planned = s.calls();
    assert!(planned > 0);
    let retried = s
        .service
        .prepare(&QueryRequest::new(&digest("crash"), "work-one").unwrap())
        .unwrap();
    assert_eq!(s.calls(), planned);
    assert_eq!(retried.query_ref(), record.query_ref());
    assert_eq!(
        retried.prepared().decision_digest(),
        reopened.prepared().decision_digest()
    );
    assert_eq!(retried.actions(), reopened.actions());
}
