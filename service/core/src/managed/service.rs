//! `QueryService` (spec/service.md §2, §3): prepare and reopen over the query store and
//! the engine of one data directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ctx_journal::Journal;
use ctx_model::{EngineEvent, EventKind, Json, Transition};
use ctx_projections::consent_store::ConsentStore;
use ctx_projections::engine::Clock;
use ctx_projections::query_store::{QueryRecord, QueryStore, QueryStoreError, is_query_ref};

use super::composition::{EngineComposition, build_planner, check_captured, open_journal};
use super::consent::{ConsentContext, publish_current_consent};
use super::error::{ServiceError, invalid};
use super::install::InstallActuators;
use super::request::{QueryInput, QueryInputAuthority, QueryRequest};
use super::result::{ACTION_SUMMARIES_MAX, ActionSummary, PreparedQuery, QueryServiceResult};
use crate::decision::TrustedHumanDecisionVerifierRegistry;
use crate::planning::adapter::AdapterPorts;
use crate::planning::benefit::NetBenefitPolicy;
use crate::policy::InstallPolicyStore;
use crate::registry::ArtifactRegistry;
use crate::skill_cas::SkillCasRuntimeConfig;

/// What a service is opened with. Every authority is captured for the service's lifetime.
pub struct QueryServiceConfig {
    /// Absolute directory of the journal that holds the query store and the engine streams.
    pub data_dir: PathBuf,
    pub registry: Arc<ArtifactRegistry>,
    pub input_authority: Arc<dyn QueryInputAuthority>,
    /// Candidate source, benefit facts, material and install bundle ports.
    pub ports: AdapterPorts,
    pub net_benefit_policy: NetBenefitPolicy,
    pub planner_version: String,
    /// The trusted UTC clock.
    pub clock: Arc<dyn Clock>,
    /// Absolute root of the install policy store; `None` means nothing is persisted and the
    /// safe default (ask each time) applies.
    pub policy_store_root: Option<PathBuf>,
    /// The skill content-addressed store actuator; `None` refuses physical installs ("no
    /// physical installation actuator").
    pub skill_cas: Option<Arc<SkillCasRuntimeConfig>>,
    /// The material store that installs agents and MCP servers (a store with
    /// `CasGate::Materials`); `None` installs none.
    pub material_store: Option<Arc<SkillCasRuntimeConfig>>,
    /// The consent broker's identity; `None` refuses interactive consent publication.
    pub consent: Option<ConsentBrokerConfig>,
    /// The trusted verifiers of signed human decisions; `None` refuses `resolve_consent`.
    pub verifier_registry: Option<Arc<TrustedHumanDecisionVerifierRegistry>>,
}

/// The identity a consent broker binds its challenges to (spec/service.md §1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsentBrokerConfig {
    /// The audience signed assertions must target (a token).
    pub audience: String,
    pub workspace_identity_digest: String,
    pub release_root_digest: String,
}

impl std::fmt::Debug for QueryServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryServiceConfig")
            .field("data_dir", &self.data_dir)
            .field("ports", &self.ports)
            .field("planner_version", &self.planner_version)
            .finish_non_exhaustive()
    }
}

/// The journal and stores a service opened at its first operation.
pub(crate) struct Runtime {
    pub(crate) journal: Arc<Journal>,
    pub(crate) store: QueryStore,
    pub(crate) consent: Option<ConsentStore>,
}

pub(crate) struct State {
    closed: bool,
    runtime: Option<Runtime>,
}

/// The managed query service. `Send + Sync`: many threads may call one handle; operations run
/// one at a time under an in-process mutex, and the journal's process lock excludes other
/// processes.
pub struct QueryService {
    pub(crate) config: QueryServiceConfig,
    pub(crate) actuators: InstallActuators,
    pub(crate) policy_store: Option<InstallPolicyStore>,
    lifecycle: Arc<Mutex<()>>,
    pid: u32,
    state: Mutex<State>,
}

/// One lifecycle lock per data directory in this process: every service handle on the same
/// directory runs its operations one at a time (spec/service.md §6, the lifecycle file lock;
/// other processes are excluded by the journal's process lock).
fn lifecycle_lock(data_dir: &std::path::Path) -> Arc<Mutex<()>> {
    static LOCKS: Mutex<BTreeMap<PathBuf, Arc<Mutex<()>>>> = Mutex::new(BTreeMap::new());
    let key = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    LOCKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key)
        .or_default()
        .clone()
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Opens a service. Nothing is opened or written here: the journal is opened by the first
/// operation that passes input validation, so a refused input never creates state.
pub fn open_query_service(config: QueryServiceConfig) -> Result<QueryService, ServiceError> {
    if !config.data_dir.is_absolute() {
        return invalid("data_dir must be an absolute Path");
    }
    if config.data_dir.parent().is_none() {
        return invalid("data_dir must not be a filesystem root");
    }
    // The journal and the registry must never share or nest their directories: a registry
    // artifact written into the journal's directory (or the reverse) would alias persistence.
    let root = config.registry.root();
    if config.data_dir.starts_with(root) || root.starts_with(&config.data_dir) {
        return invalid("data_dir and the registry root: persistence paths must be distinct");
    }
    if !ctx_model::is_safe_token(&config.planner_version) {
        return invalid("planner_version must be a canonical safe token");
    }
    if config.ports.material.is_none() {
        return invalid("material_port must implement the capability material contract");
    }
    if config.ports.install.is_none() {
        return invalid("install_bundle_port must implement the installation bundle contract");
    }
    config
        .net_benefit_policy
        .validate()
        .map_err(|e| ServiceError::Invalid(format!("net_benefit_policy is invalid: {e}")))?;
    let policy_store = match &config.policy_store_root {
        None => None,
        Some(policy_root) => {
            if !policy_root.is_absolute() {
                return invalid("policy_store_root must be an absolute Path or None");
            }
            if policy_root.starts_with(&config.data_dir)
                || config.data_dir.starts_with(policy_root)
                || policy_root.starts_with(root)
                || root.starts_with(policy_root)
            {
                return invalid(
                    "data_dir, the registry root and the policy root: persistence paths must be \
                     distinct",
                );
            }
            Some(InstallPolicyStore::new(policy_root)?)
        }
    };
    if config.consent.as_ref().is_some_and(|c| {
        !ctx_model::is_token(&c.audience)
            || !ctx_model::is_sha(&c.workspace_identity_digest)
            || !ctx_model::is_sha(&c.release_root_digest)
    }) {
        return invalid("consent_broker must name a token audience and two SHA-256 digests");
    }
    let lifecycle = lifecycle_lock(&config.data_dir);
    Ok(QueryService {
        actuators: InstallActuators::new(config.skill_cas.clone())
            .with_material_store(config.material_store.clone()),
        policy_store,
        lifecycle,
        config,
        pid: std::process::id(),
        state: Mutex::new(State {
            closed: false,
            runtime: None,
        }),
    })
}

impl QueryService {
    pub(crate) fn check_process(&self) -> Result<(), ServiceError> {
        if std::process::id() == self.pid {
            Ok(())
        } else {
            Err(ServiceError::ForkedProcess)
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a flag and an optional cache of open handles; an operation that panicked
        // left both valid (the journal fail-stops itself on a failed commit).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The data directory's lifecycle lock, taken after the service's own operation lock.
    pub(crate) fn lifecycle(&self) -> MutexGuard<'_, ()> {
        self.lifecycle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the operation lock of an open service.
    pub(crate) fn begin(&self) -> Result<MutexGuard<'_, State>, ServiceError> {
        self.check_process()?;
        let state = self.lock();
        if state.closed {
            return Err(ServiceError::Closed);
        }
        Ok(state)
    }

    /// Closes the service; idempotent. Drops the journal handles, so another process may open
    /// the data directory once no other owner in this process holds it.
    pub fn close(&self) {
        if self.check_process().is_err() {
            return;
        }
        let mut state = self.lock();
        state.closed = true;
        state.runtime = None;
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Plans the request's current work once, durably, and returns its opaque reference
    /// (spec/service.md §3). A retry with the same request returns the same reference and plan
    /// without planning again.
    pub fn prepare(&self, request: &QueryRequest) -> Result<QueryServiceResult, ServiceError> {
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let supplied = self
            .config
            .input_authority
            .resolve(request.current_work_ref())?;
        self.validate_input(&supplied)?;
        let decision = supplied.decision_event();
        let runtime = self.runtime(&mut state)?;
        let Some(plan_id) = decision.correlation_id.as_deref() else {
            return Err(ServiceError::Identity(
                "managed decision has no plan identity",
            ));
        };
        let registration = || {
            runtime.store.registration_append(
                request.logical_query_id(),
                supplied.session_started(),
                decision,
                supplied.artifact().manifest_digest(),
                supplied.artifact().planning_environment_digest(),
            )
        };
        // A pending desired choice on this stream (any query, any host alias) must be recovered
        // before a replacement plan may register; the very query that reserved it is prepared
        // again, so a prompt killed after its reservation resumes on its next delivery and its
        // own choice recovers the reservation (spec/service.md §3).
        match runtime.store.load_pending_desired_set(&decision.scope) {
            Ok(pending) => {
                let own = registration().is_ok_and(|append| {
                    matches!(
                        runtime.store.registered(&append),
                        Ok(Some(record)) if record.query_ref() == pending.query_ref()
                    )
                });
                if !own {
                    return Err(ServiceError::Busy(
                        "a pending desired choice must be recovered before managed planning",
                    ));
                }
            }
            Err(QueryStoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        match runtime
            .store
            .planned_for_scope_plan(&decision.scope, plan_id)
        {
            Ok(planned) if planned.logical_query_id() != request.logical_query_id() => {
                return Err(ServiceError::Store(QueryStoreError::Conflict {
                    message: "managed query scope and plan already bind another logical identity",
                }));
            }
            Ok(_) | Err(QueryStoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let registration = registration()?;
        let composition = self.composition(runtime, &supplied)?;
        let record = match runtime.store.registered(&registration)? {
            Some(record) => record,
            None => {
                // A decision behind a session another query has planned (past its start,
                // revision 1) is refused by name, before the engine's revision check would
                // refuse it as an internal error; one at the head re-plans the session.
                let head = composition.engine().snapshot(&decision.scope)?.revision();
                if head > 1 && decision.expected_revision < head {
                    return Err(ServiceError::SessionPlanned {
                        session_id: decision.scope.session_id.clone(),
                    });
                }
                // A fresh query: the registration commits with the session start (one append;
                // the second is the planning event with its completion binding). A crash after
                // this append leaves a registered, started, unplanned query that a retry or a
                // reopen plans.
                composition.check_managed_events(supplied.session_started(), decision)?;
                let result = composition
                    .start_managed_query(supplied.session_started(), vec![registration.clone()])?;
                runtime.store.registration_outcome(&registration, result)?
            }
        };
        check_record(&record, &supplied)?;
        self.advance(runtime, &composition, &record, &supplied)
    }

    /// Converges on the stored query `query_ref` (spec/service.md §3): re-authenticates its
    /// artifact and replays its committed events; plans only if planning never committed.
    pub fn reopen(&self, query_ref: &str) -> Result<QueryServiceResult, ServiceError> {
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        if !is_query_ref(query_ref) {
            return invalid("opaque_query_ref must be an opaque managed-query reference");
        }
        let runtime = self.runtime(&mut state)?;
        let record = runtime.store.load(query_ref)?;
        let artifact = self.config.registry.reopen(
            record.artifact_manifest_digest(),
            record.planning_environment_digest(),
        )?;
        let input = QueryInput::new(
            artifact,
            record.session_started().clone(),
            record.decision_event().clone(),
        );
        self.validate_input(&input)?;
        check_record(&record, &input)?;
        let composition = self.composition(runtime, &input)?;
        self.advance(runtime, &composition, &record, &input)
    }

    /// The journal and store, opened at the first operation that needs them.
    pub(crate) fn runtime<'a>(&self, state: &'a mut State) -> Result<&'a Runtime, ServiceError> {
        if state.runtime.is_none() {
            let journal = open_journal(&self.config.data_dir)?;
            let store = QueryStore::open(journal.clone())?;
            let consent = match &self.config.consent {
                Some(c) => Some(ConsentStore::open(journal.clone(), &c.audience)?),
                None => None,
            };
            state.runtime = Some(Runtime {
                journal,
                store,
                consent,
            });
        }
        state
            .runtime
            .as_ref()
            .ok_or_else(|| ServiceError::Internal("managed query runtime is unavailable".into()))
    }

    /// Input validation shared by prepare and reopen (spec/service.md §3). Runs before anything is
    /// opened or written.
    pub(crate) fn validate_input(&self, input: &QueryInput) -> Result<(), ServiceError> {
        let artifact = input.artifact();
        self.config.registry.verify_handle(artifact)?;
        check_captured(
            artifact,
            &self.config.ports,
            &self.config.net_benefit_policy,
        )?;
        let started = input.session_started();
        if started.kind != EventKind::SessionStarted || started.expected_revision != 0 {
            return Err(ServiceError::Identity(
                "managed query input must start at revision zero",
            ));
        }
        let decision = input.decision_event();
        let decision_kind_ok = match decision.expected_revision {
            0 => false,
            1 => decision.kind == EventKind::IntentObserved,
            _ => decision.kind == EventKind::DevelopmentObserved,
        };
        if !decision_kind_ok {
            return Err(ServiceError::Identity(
                "managed query input has an invalid decision revision",
            ));
        }
        let environment = Some(artifact.planning_environment_digest());
        let version = Some(artifact.planning_schema_version());
        if [started, decision].iter().any(|e| {
            e.catalog_snapshot_digest.as_deref() != environment
                || e.planner_version.as_deref() != version
        }) {
            return Err(ServiceError::Identity(
                "managed query input does not match its artifact",
            ));
        }
        let reference = artifact.observation_reference();
        let bound = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(&reference.content_digest)),
                ("opaque_id", Json::str(&reference.opaque_id)),
                ("provider_id", Json::str(&reference.provider_id)),
            ]),
        )]);
        if decision.payload != bound {
            return Err(ServiceError::Identity(
                "managed query input observation is not artifact-bound",
            ));
        }
        Ok(())
    }

    /// The engine composition of `input`'s artifact on the service's journal. Opening it writes
    /// nothing: its projections are attached at the head already after the first open.
    pub(crate) fn composition(
        &self,
        runtime: &Runtime,
        input: &QueryInput,
    ) -> Result<EngineComposition, ServiceError> {
        let config = &self.config;
        let planner = build_planner(
            input.artifact(),
            config.ports.clone(),
            config.net_benefit_policy.clone(),
            &config.planner_version,
        )?;
        EngineComposition::assemble(
            runtime.journal.clone(),
            input.artifact(),
            planner,
            config.clock.clone(),
        )
    }

    /// The shared tail of prepare and reopen (spec/service.md §3). An unplanned query's planning
    /// event, its benefit result and its completion binding (the planned mark) commit in one
    /// journal append: the mark names the engine record's revision and journal digest, which
    /// the engine knows before its append.
    fn advance(
        &self,
        runtime: &Runtime,
        composition: &EngineComposition,
        record: &QueryRecord,
        input: &QueryInput,
    ) -> Result<QueryServiceResult, ServiceError> {
        let decision = input.decision_event();
        if let Some(plan_id) = record.plan_id() {
            let head = composition.reopen_managed_query(&decision.scope, None)?;
            if head.plan_id() != plan_id {
                return Err(ServiceError::Superseded);
            }
        }
        let store = &runtime.store;
        let mut mark = None;
        let advanced = composition.advance_managed_query_with(
            input.session_started(),
            decision,
            |prepared, transition| {
                if record.is_planned() {
                    return Ok(Vec::new());
                }
                check_advance(record, decision, prepared, transition)?;
                let append = store.planned_append(
                    record.query_ref(),
                    prepared.plan_id(),
                    prepared.decision_digest(),
                    prepared.journal_revision(),
                    prepared.journal_record_digest(),
                )?;
                mark = Some(append.clone());
                Ok(vec![append])
            },
        )?;
        let (prepared, transition) = match (advanced, mark) {
            (Ok(advanced), _) => advanced,
            (Err(refusal), Some(append)) => {
                // The planning event did not commit either (one append): a refusal is the
                // store's, and even a concurrent identical mark cannot stand without its event.
                store.planned_outcome(record.query_ref(), &append, Err(refusal))?;
                return Err(ServiceError::Identity(
                    "managed query completion binding was substituted",
                ));
            }
            (Err(refusal), None) => return Err(ServiceError::Internal(refusal.to_string())),
        };
        check_advance(record, decision, &prepared, &transition)?;
        // The current consent challenge is published before the mark (spec/service.md §3).
        let snapshot = composition.engine().snapshot(&decision.scope)?;
        let challenge = publish_current_consent(
            &ConsentContext {
                service: self,
                engine: composition.engine(),
                consent_store: runtime.consent.as_ref(),
            },
            &snapshot,
            prepared.plan_id(),
        )?;
        let (plan_id, decision_digest, revision, record_digest) = if record.is_planned() {
            match (
                record.plan_id(),
                record.decision_digest(),
                record.journal_revision(),
                record.journal_record_digest(),
            ) {
                (Some(p), Some(d), Some(r), Some(h)) => (p, d, r, h),
                _ => {
                    return Err(ServiceError::Identity(
                        "planned managed query is only partially bound",
                    ));
                }
            }
        } else {
            if prepared.journal_revision() != transition.to_revision {
                return Err(ServiceError::Identity(
                    "managed planning head is not the committed decision",
                ));
            }
            (
                prepared.plan_id(),
                prepared.decision_digest(),
                prepared.journal_revision(),
                prepared.journal_record_digest(),
            )
        };
        let marked = runtime.store.mark_planned(
            record.query_ref(),
            plan_id,
            decision_digest,
            revision,
            record_digest,
        )?;
        if !marked.is_planned()
            || marked.plan_id() != Some(prepared.plan_id())
            || marked.decision_digest() != Some(prepared.decision_digest())
        {
            return Err(ServiceError::Identity(
                "managed query completion binding was substituted",
            ));
        }
        let actions = transition.actions.iter().map(ActionSummary::of).collect();
        QueryServiceResult::new(record.query_ref().to_owned(), prepared, actions, challenge)
    }
}

/// The stored registration must be exactly the supplied input (spec/service.md §3).
fn check_record(record: &QueryRecord, input: &QueryInput) -> Result<(), ServiceError> {
    if record.session_started() != input.session_started()
        || record.decision_event() != input.decision_event()
        || record.artifact_manifest_digest() != input.artifact().manifest_digest()
        || record.planning_environment_digest() != input.artifact().planning_environment_digest()
    {
        return Err(ServiceError::Identity(
            "managed query store returned a substituted registration",
        ));
    }
    Ok(())
}

/// Advance validation (spec/service.md §3).
fn check_advance(
    record: &QueryRecord,
    decision: &EngineEvent,
    prepared: &PreparedQuery,
    transition: &Transition,
) -> Result<(), ServiceError> {
    if transition.event_id != decision.event_id
        || transition.scope != decision.scope
        || transition.from_revision != decision.expected_revision
        || Some(transition.to_revision) != decision.expected_revision.checked_add(1)
        || decision.correlation_id.as_deref() != Some(prepared.plan_id())
        || prepared.planning_environment_digest() != record.planning_environment_digest()
    {
        return Err(ServiceError::Identity(
            "managed composition lost the registered decision identity",
        ));
    }
    if transition.actions.len() > ACTION_SUMMARIES_MAX {
        return Err(ServiceError::Identity(
            "managed transition exceeds the action summary bound",
        ));
    }
    if transition
        .actions
        .iter()
        .any(|a| a.scope != transition.scope || a.precondition_revision != transition.to_revision)
    {
        return Err(ServiceError::Identity(
            "managed transition contains a substituted action",
        ));
    }
    if record.is_planned()
        && (record.plan_id() != Some(prepared.plan_id())
            || record.decision_digest() != Some(prepared.decision_digest()))
    {
        return Err(ServiceError::Identity(
            "managed replay disagrees with its durable completion",
        ));
    }
    Ok(())
}
