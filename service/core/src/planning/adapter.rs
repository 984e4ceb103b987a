//! The runtime replay adapter (spec/planner.md §10,
//! `AuthenticatedReplayDecisionPlanner`): turns a current-work observation surrogate into a
//! `ctx.decision.capability-plan` v3 decision surrogate, reading presentations, benefit facts and
//! authorities only through pinned host ports.
//!
//! Replay safety rests on three mechanisms, each specified in `spec/planner.md` ("Planning
//! adapter"): the planning-environment digest (what the journal records as the plan's catalog
//! snapshot id), the pins re-checked around every port read, and the snapshot-read memo that
//! refuses a port whose answer changes while its digest does not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ctx_model::{
    CURRENT_WORK_SCHEMA, EngineState, Json, Surrogate, authorized_material_from_catalog,
    catalog_capability_identity, cj_digest, is_safe_token, is_sha,
};
use ctx_projections::engine::{DecisionPlanner, PlanningContext, SeamError};

use super::benefit::{BenefitCandidate, CANDIDATE_POOL_MAX_ITEMS};
use super::plan::{
    AuthenticatedCapabilityCandidate, AuthenticatedNetBenefitPlanner, BenefitAuditSink,
    CapabilityPlan, CapabilityPresentation, PlanningAuthority, PlanningError,
};
use super::ports::{
    BenefitFactsPort, CandidateSourcePort, CatalogBenefitFacts, CatalogCandidateSource,
    CatalogInstallPort, CatalogLoadPlanningBundle, CatalogMaterialPort, InstallBundlePort,
    InstallPlanningBundle, MaterialPort, PortError,
};
use crate::catalog::{Actionability, CapabilityCandidate, Catalog, WorkObservation};

/// Schema of the planning-environment document.
pub const PLANNING_ENVIRONMENT_SCHEMA: &str = "ctx.planning-environment-v1";
/// Most distinct port reads one adapter remembers, in keys. Past it the adapter can no longer
/// prove that a port answers consistently, so it refuses to plan.
pub const SNAPSHOT_MEMO_MAX_KEYS: usize = 65_536;
/// The only observation schema version the adapter plans from.
pub const CURRENT_WORK_SCHEMA_VERSION: i64 = 1;

const CURRENT_WORK_FIELDS: [&str; 6] = [
    "active_capability_ids",
    "baseline_capability_ids",
    "languages",
    "rejected_capability_ids",
    "requested_limit",
    "signals",
];

/// Why the adapter refused to build or to decide. Display is the reference's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// A construction argument is invalid.
    #[error("{0}")]
    Construction(String),
    /// The planning context does not match this adapter.
    #[error("{0}")]
    Context(String),
    /// The observation surrogate is not a usable current-work observation.
    #[error("{0}")]
    Observation(String),
    /// A pinned snapshot or a remembered port output changed.
    #[error("{0}")]
    Drift(String),
    /// The snapshot-read memo is full.
    #[error("pinned snapshot output bound is exhausted; a fresh adapter is required")]
    MemoExhausted,
    /// A port answer breaks a planning rule (the reference's `PlannerValidationError`).
    #[error("{0}")]
    Validation(String),
    /// A port failed with something other than a soft unavailability.
    #[error(transparent)]
    Port(PortError),
    /// The net-benefit planner or a planning value refused.
    #[error(transparent)]
    Planning(PlanningError),
}

impl From<PlanningError> for AdapterError {
    fn from(e: PlanningError) -> Self {
        AdapterError::Planning(e)
    }
}

/// The ports an adapter reads. `material` and `install` are optional: without them, `load` or
/// `install` presentations are skipped as authority-unavailable.
#[derive(Clone)]
pub struct AdapterPorts {
    pub source: Arc<dyn CandidateSourcePort>,
    pub facts: Arc<dyn BenefitFactsPort>,
    pub material: Option<Arc<dyn MaterialPort>>,
    pub install: Option<Arc<dyn InstallBundlePort>>,
}

impl std::fmt::Debug for AdapterPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterPorts")
            .field("source", &self.source.catalog_snapshot_digest())
            .field("facts", &self.facts.benefit_facts_snapshot_digest())
            .field("material", &self.material.is_some())
            .field("install", &self.install.is_some())
            .finish()
    }
}

impl AdapterPorts {
    /// The default ports over one catalog: retrieval, catalog-metadata facts, catalog material
    /// bundles and catalog install bundles.
    pub fn from_catalog(catalog: Arc<Catalog>) -> AdapterPorts {
        AdapterPorts {
            source: Arc::new(CatalogCandidateSource::new(catalog.clone())),
            facts: Arc::new(CatalogBenefitFacts::new(catalog.clone())),
            material: Some(Arc::new(CatalogMaterialPort::new(catalog.clone()))),
            install: Some(Arc::new(CatalogInstallPort::new(catalog))),
        }
    }
}

/// The digests pinned at construction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pins {
    policy_digest: String,
    calibration_digest: String,
    source: String,
    facts: String,
    material: Option<String>,
    install: Option<String>,
}

/// Which port a memo entry remembers: `(key label, message field)`.
#[derive(Debug, Clone, Copy)]
enum Read {
    Retrieval,
    Facts,
    Load,
    Install,
}

impl Read {
    fn key(self) -> &'static str {
        match self {
            Read::Retrieval => "catalog-retrieval",
            Read::Facts => "benefit-facts",
            Read::Load => "load-authority",
            Read::Install => "install-authority",
        }
    }

    fn field(self) -> &'static str {
        match self {
            Read::Retrieval => "catalog retrieval",
            Read::Facts => "benefit facts",
            Read::Load => "load authority",
            Read::Install => "install authority",
        }
    }
}

/// Remembered port outputs: key digest → output digest, `None` for a soft unavailability.
#[derive(Debug, Default)]
struct Memo {
    outputs: BTreeMap<String, Option<String>>,
}

impl Memo {
    fn remember(
        &mut self,
        read: Read,
        key: Json,
        output: Option<String>,
    ) -> Result<(), AdapterError> {
        let key = cj_digest(&Json::object([
            ("key", key),
            ("read", Json::str(read.key())),
        ]));
        match self.outputs.get(&key) {
            Some(previous) if *previous != output => Err(AdapterError::Drift(format!(
                "{} output drifted without a snapshot digest change",
                read.field()
            ))),
            Some(_) => Ok(()),
            None if self.outputs.len() >= SNAPSHOT_MEMO_MAX_KEYS => {
                Err(AdapterError::MemoExhausted)
            }
            None => {
                self.outputs.insert(key, output);
                Ok(())
            }
        }
    }
}

/// `ReplayDecisionPlanner`: an [`AuthenticatedNetBenefitPlanner`] behind pinned ports, usable
/// as the engine's [`DecisionPlanner`].
pub struct ReplayDecisionPlanner<S> {
    planner: AuthenticatedNetBenefitPlanner<S>,
    ports: AdapterPorts,
    planner_version: String,
    namespace_digest: String,
    pins: Pins,
    environment_digest: String,
    /// Serializes decisions: the memo is only consistent if reads do not interleave.
    memo: Mutex<Memo>,
}

impl<S> std::fmt::Debug for ReplayDecisionPlanner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayDecisionPlanner")
            .field("planner_version", &self.planner_version)
            .field("environment_digest", &self.environment_digest)
            .finish_non_exhaustive()
    }
}

fn digest_arg(name: &str, value: &str) -> Result<String, AdapterError> {
    if is_sha(value) {
        Ok(value.to_owned())
    } else {
        Err(AdapterError::Construction(format!(
            "{name} must be a lowercase SHA-256 digest"
        )))
    }
}

fn skip<T>() -> Result<Option<T>, AdapterError> {
    Ok(None)
}

impl<S: BenefitAuditSink> ReplayDecisionPlanner<S> {
    /// Pins every snapshot digest and computes the planning-environment digest.
    pub fn new(
        planner: AuthenticatedNetBenefitPlanner<S>,
        ports: AdapterPorts,
        planner_version: &str,
        catalog_namespace_digest: &str,
    ) -> Result<Self, AdapterError> {
        if !is_safe_token(planner_version) {
            return Err(AdapterError::Construction(
                "planner_version must be a canonical safe token".into(),
            ));
        }
        let pins = Pins {
            policy_digest: planner.policy().policy_digest(),
            calibration_digest: planner.policy().calibration_digest.clone(),
            source: digest_arg(
                "candidate source catalog_snapshot_digest",
                ports.source.catalog_snapshot_digest(),
            )?,
            facts: digest_arg(
                "benefit facts snapshot digest",
                ports.facts.benefit_facts_snapshot_digest(),
            )?,
            material: ports
                .material
                .as_ref()
                .map(|m| digest_arg("material snapshot digest", m.material_snapshot_digest()))
                .transpose()?,
            install: ports
                .install
                .as_ref()
                .map(|i| {
                    digest_arg(
                        "installation snapshot digest",
                        i.installation_snapshot_digest(),
                    )
                })
                .transpose()?,
        };
        let namespace_digest = digest_arg("catalog_namespace_digest", catalog_namespace_digest)?;
        let environment_digest = cj_digest(&Json::object([
            ("benefit_facts_snapshot_digest", Json::str(&pins.facts)),
            ("calibration_digest", Json::str(&pins.calibration_digest)),
            ("catalog_namespace_digest", Json::str(&namespace_digest)),
            ("catalog_retrieval_snapshot_digest", Json::str(&pins.source)),
            (
                "installation_snapshot_digest",
                Json::opt_str(pins.install.as_deref()),
            ),
            (
                "material_snapshot_digest",
                Json::opt_str(pins.material.as_deref()),
            ),
            ("planner_version", Json::str(planner_version)),
            ("policy_digest", Json::str(&pins.policy_digest)),
            ("schema", Json::str(PLANNING_ENVIRONMENT_SCHEMA)),
        ]));
        Ok(ReplayDecisionPlanner {
            planner,
            ports,
            planner_version: planner_version.to_owned(),
            namespace_digest,
            pins,
            environment_digest,
            memo: Mutex::new(Memo::default()),
        })
    }

    /// The default ports over `catalog`, in its own namespace.
    pub fn from_catalog(
        planner: AuthenticatedNetBenefitPlanner<S>,
        catalog: Arc<Catalog>,
        planner_version: &str,
    ) -> Result<Self, AdapterError> {
        let namespace = catalog.namespace_digest().to_owned();
        ReplayDecisionPlanner::new(
            planner,
            AdapterPorts::from_catalog(catalog),
            planner_version,
            &namespace,
        )
    }

    /// The planning-environment digest: what a planning event must carry as its catalog
    /// snapshot digest (and what the journal stores as the plan's `catalog_snapshot_id`).
    pub fn catalog_snapshot_digest(&self) -> &str {
        &self.environment_digest
    }

    /// The source's raw retrieval snapshot digest.
    pub fn catalog_retrieval_snapshot_digest(&self) -> &str {
        &self.pins.source
    }

    pub fn planner_version(&self) -> &str {
        &self.planner_version
    }

    pub fn planner(&self) -> &AuthenticatedNetBenefitPlanner<S> {
        &self.planner
    }

    /// The decision call of spec/planner.md §10 with a typed error: context checks, observation
    /// decoding, the pinned decision, and the decision surrogate.
    pub fn plan_surrogate(
        &self,
        observation: Option<&Surrogate>,
        state: Option<&EngineState>,
        context: &PlanningContext<'_>,
    ) -> Result<Surrogate, AdapterError> {
        if context.planner_version != self.planner_version {
            return Err(AdapterError::Context("planner version mismatch".into()));
        }
        if context.catalog_snapshot_digest != self.environment_digest {
            return Err(AdapterError::Context(
                "catalog snapshot does not match the pinned planning environment".into(),
            ));
        }
        let observation = decode_observation(observation, state)?;
        Ok(self.decide(&observation)?.decision_surrogate()?)
    }

    /// Plans `observation` under the pins (spec/planner.md §10).
    pub fn decide(&self, observation: &WorkObservation) -> Result<CapabilityPlan, AdapterError> {
        let mut memo = self.lock();
        self.assert_pins()?;
        let Some(pool) = self.pool(&mut memo, observation)? else {
            let plan = CapabilityPlan::degraded("catalog-unavailable")?;
            // End validation: a second "unavailable" is expected; an answer trips the memo.
            if self.pool(&mut memo, observation)?.is_some() {
                return Err(AdapterError::Drift(
                    "planning inputs drifted during end validation".into(),
                ));
            }
            return Ok(plan);
        };
        let candidates = self.authenticate_pool(&mut memo, &pool, observation)?;
        self.assert_pins()?;
        let plan = self
            .planner
            .plan(&candidates, usize::from(observation.requested_limit()))?;
        self.assert_pins()?;
        let again = match self.pool(&mut memo, observation)? {
            Some(p) if p == pool => self.authenticate_pool(&mut memo, &p, observation)?,
            _ => Vec::new(),
        };
        if again != candidates {
            return Err(AdapterError::Drift(
                "planning inputs drifted during end validation".into(),
            ));
        }
        self.assert_pins()?;
        Ok(plan)
    }

    fn lock(&self) -> MutexGuard<'_, Memo> {
        // A panic mid-decision leaves only remembered outputs behind, which stay true.
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn assert_pins(&self) -> Result<(), AdapterError> {
        let policy = self.planner.policy();
        let drift = |m: &str| Err(AdapterError::Drift(m.to_owned()));
        if policy.policy_digest() != self.pins.policy_digest
            || policy.calibration_digest != self.pins.calibration_digest
        {
            return drift("net-benefit policy or calibration drifted");
        }
        if self.ports.source.catalog_snapshot_digest() != self.pins.source {
            return drift("candidate source catalog snapshot drifted");
        }
        if self.ports.facts.benefit_facts_snapshot_digest() != self.pins.facts {
            return drift("benefit facts snapshot drifted");
        }
        let material = self
            .ports
            .material
            .as_ref()
            .map(|m| m.material_snapshot_digest());
        if material != self.pins.material.as_deref() {
            return drift("material snapshot drifted");
        }
        let install = self
            .ports
            .install
            .as_ref()
            .map(|i| i.installation_snapshot_digest());
        if install != self.pins.install.as_deref() {
            return drift("installation snapshot drifted");
        }
        Ok(())
    }

    /// One port read: pins before and after, then the memo. Soft unavailability is remembered
    /// and returned as `Ok(Err(..))`; any other port error fails the decision.
    fn pinned_read<T>(
        &self,
        memo: &mut Memo,
        read: Read,
        key: Json,
        call: impl FnOnce() -> Result<T, PortError>,
        render: impl Fn(&T) -> Json,
    ) -> Result<Result<T, PortError>, AdapterError> {
        self.assert_pins()?;
        let result = call();
        self.assert_pins()?;
        let output = match &result {
            Ok(value) => Some(cj_digest(&render(value))),
            Err(PortError::SourceUnavailable(_) | PortError::CandidateAuthorityUnavailable(_)) => {
                None
            }
            Err(e) => return Err(AdapterError::Port(e.clone())),
        };
        memo.remember(read, key, output)?;
        Ok(result)
    }

    /// The canonical candidate pool, or `None` when the source is unavailable.
    fn pool(
        &self,
        memo: &mut Memo,
        observation: &WorkObservation,
    ) -> Result<Option<Vec<CapabilityCandidate>>, AdapterError> {
        let rows = match self.pinned_read(
            memo,
            Read::Retrieval,
            observation_json(observation),
            || self.ports.source.retrieve(observation),
            |rows| Json::Arr(rows.iter().map(CapabilityCandidate::to_json).collect()),
        )? {
            Ok(rows) => rows,
            Err(PortError::SourceUnavailable(_)) => return Ok(None),
            Err(e) => return Err(AdapterError::Port(e)),
        };
        normalize_candidate_pool(rows, observation).map(Some)
    }

    fn authenticate_pool(
        &self,
        memo: &mut Memo,
        pool: &[CapabilityCandidate],
        observation: &WorkObservation,
    ) -> Result<Vec<AuthenticatedCapabilityCandidate>, AdapterError> {
        let mut out = Vec::with_capacity(pool.len());
        for presentation in pool {
            if let Some(c) = self.authenticate(memo, presentation, observation)? {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// Authenticates one presentation; `None` skips it as authority-unavailable.
    fn authenticate(
        &self,
        memo: &mut Memo,
        presentation: &CapabilityCandidate,
        observation: &WorkObservation,
    ) -> Result<Option<AuthenticatedCapabilityCandidate>, AdapterError> {
        let key = Json::object([
            ("observation", observation_json(observation)),
            ("presentation", presentation.to_json()),
        ]);
        let facts = match self.pinned_read(
            memo,
            Read::Facts,
            key,
            || {
                self.ports
                    .facts
                    .benefit_candidate(presentation, observation)
            },
            BenefitCandidate::to_json,
        )? {
            Ok(facts) => facts,
            Err(PortError::CandidateAuthorityUnavailable(_)) => return skip(),
            Err(e) => return Err(AdapterError::Port(e)),
        };
        if (facts.capability_id.as_str(), facts.source_digest.as_str())
            != (
                presentation.capability_id.as_str(),
                presentation.source_digest.as_str(),
            )
        {
            return Err(AdapterError::Validation(
                "benefit facts do not exactly match candidate identity".into(),
            ));
        }
        let authority = match presentation.actionability {
            Actionability::Load => self.load_authority(memo, presentation)?,
            Actionability::Install => self.install_authority(memo, presentation)?,
            Actionability::Manual => Some((
                self.catalog_identity(presentation)?,
                PlanningAuthority::Manual,
            )),
        };
        let Some((identity, authority)) = authority else {
            return skip();
        };
        Ok(Some(AuthenticatedCapabilityCandidate::new(
            to_presentation(presentation),
            identity,
            facts,
            authority,
        )?))
    }

    fn catalog_identity(&self, presentation: &CapabilityCandidate) -> Result<Json, AdapterError> {
        catalog_capability_identity(
            &presentation.capability_id,
            presentation.kind.as_str(),
            &self.namespace_digest,
        )
        .map_err(|_| AdapterError::Validation("catalog capability identity is invalid".into()))
    }

    fn load_authority(
        &self,
        memo: &mut Memo,
        presentation: &CapabilityCandidate,
    ) -> Result<Option<(Json, PlanningAuthority)>, AdapterError> {
        // "load candidate has no authenticated material port"
        let Some(port) = &self.ports.material else {
            return skip();
        };
        let bundle = match self.pinned_read(
            memo,
            Read::Load,
            presentation.to_json(),
            || port.load_bundle(presentation),
            CatalogLoadPlanningBundle::to_json,
        )? {
            Ok(bundle) => bundle,
            Err(PortError::CandidateAuthorityUnavailable(_)) => return skip(),
            Err(e) => return Err(AdapterError::Port(e)),
        };
        let identity = bundle.catalog_identity();
        // "load bundle does not match the exact retrieval presentation or pinned snapshots"
        if bundle.presentation() != presentation
            || identity.get_str("capability_id") != Some(presentation.capability_id.as_str())
            || identity.get_str("kind") != Some(presentation.kind.as_str())
            || identity.get_str("catalog_namespace_digest") != Some(self.namespace_digest.as_str())
            || bundle.catalog_snapshot_digest() != self.pins.source
            || Some(bundle.material_snapshot_digest()) != self.pins.material.as_deref()
        {
            return skip();
        }
        // "load material authority is invalid"
        let Some(identity_digest) = identity.get_str("identity_digest") else {
            return skip();
        };
        let Ok(material) = authorized_material_from_catalog(identity_digest, bundle.descriptor())
        else {
            return skip();
        };
        let Ok(authority) = PlanningAuthority::load(material) else {
            return skip();
        };
        Ok(Some((identity.clone(), authority)))
    }

    fn install_authority(
        &self,
        memo: &mut Memo,
        presentation: &CapabilityCandidate,
    ) -> Result<Option<(Json, PlanningAuthority)>, AdapterError> {
        let identity = self.catalog_identity(presentation)?;
        // "install candidate has no authenticated install port"
        let (Some(port), Some(pinned)) = (&self.ports.install, self.pins.install.as_deref()) else {
            return skip();
        };
        let bundle = match self.pinned_read(
            memo,
            Read::Install,
            presentation.to_json(),
            || port.describe_bundle(&presentation.capability_id, presentation.kind),
            |b: &Option<InstallPlanningBundle>| {
                b.as_ref()
                    .map_or(Json::Null, InstallPlanningBundle::to_json)
            },
        )? {
            Ok(Some(bundle)) => bundle,
            // "install candidate is missing an exact install bundle"
            Ok(None) | Err(PortError::CandidateAuthorityUnavailable(_)) => return skip(),
            Err(e) => return Err(AdapterError::Port(e)),
        };
        let expected_provenance = match bundle.authority() {
            // "install bundle does not match the aggregate installation snapshot"
            Some(b) if b.installation_snapshot_digest != pinned => return skip(),
            Some(b) => b.authority_installation_snapshot_digest.as_str(),
            None => pinned,
        };
        let (d, m) = (bundle.descriptor(), bundle.result_material());
        let id = Some(presentation.capability_id.as_str());
        let kind = Some(presentation.kind.as_str());
        // "install bundle does not match presentation or installation snapshot"
        if d.get_str("schema") != Some(ctx_model::INSTALL_DESCRIPTOR_SCHEMA_V2)
            || d.get_str("capability_id") != id
            || d.get_str("kind") != kind
            || d.get_str("descriptor_digest") != presentation.install_descriptor_digest.as_deref()
            || d.get_str("plan_digest") != presentation.install_plan_digest.as_deref()
            || d.get_str("provenance_digest") != Some(expected_provenance)
            || m.get_str("capability_id") != id
            || m.get_str("kind") != kind
        {
            return skip();
        }
        // "install bundle authority is invalid"
        let Ok(authority) = PlanningAuthority::install(d.clone(), m.clone()) else {
            return skip();
        };
        Ok(Some((identity, authority)))
    }
}

impl<S: BenefitAuditSink + Send + Sync + 'static> DecisionPlanner for ReplayDecisionPlanner<S> {
    fn plan(
        &self,
        observation: Option<&Surrogate>,
        state: Option<&EngineState>,
        context: &PlanningContext<'_>,
    ) -> Result<Surrogate, SeamError> {
        self.plan_surrogate(observation, state, context)
            .map_err(|e| SeamError(e.to_string()))
    }
}

// ---------------------------------------------------------------------------------------------
// Observation and pool

/// The six current-work fields of an observation, as the memo keys it.
pub fn observation_json(o: &WorkObservation) -> Json {
    let list = |items: &[String]| Json::Arr(items.iter().map(Json::str).collect());
    Json::object([
        ("active_capability_ids", list(o.active_capability_ids())),
        ("baseline_capability_ids", list(o.baseline_capability_ids())),
        ("languages", list(o.languages())),
        ("rejected_capability_ids", list(o.rejected_capability_ids())),
        ("requested_limit", Json::Int(i64::from(o.requested_limit()))),
        ("signals", list(o.signals())),
    ])
}

/// Decodes a `ctx.observation.current-work` v1 surrogate; active ids come from `state` when a
/// state exists (the committed state is the authority on what is active, not the host).
pub fn decode_observation(
    observation: Option<&Surrogate>,
    state: Option<&EngineState>,
) -> Result<WorkObservation, AdapterError> {
    let fail = |m: &str| AdapterError::Observation(m.to_owned());
    let Some(s) = observation.filter(|s| {
        s.schema_id == CURRENT_WORK_SCHEMA && s.schema_version == CURRENT_WORK_SCHEMA_VERSION
    }) else {
        return Err(fail("planner requires a current-work observation v1"));
    };
    let exact = s.value.as_obj().is_some_and(|m| {
        m.len() == CURRENT_WORK_FIELDS.len()
            && CURRENT_WORK_FIELDS.iter().all(|k| m.contains_key(*k))
    });
    if !exact {
        return Err(fail(
            "current-work observation has missing or unknown fields",
        ));
    }
    let Some(limit) = s.value.get("requested_limit").and_then(Json::as_i64) else {
        return Err(fail("current-work requested_limit must be an integer"));
    };
    let tokens = |field: &str| -> Result<Vec<String>, AdapterError> {
        s.value
            .get(field)
            .and_then(Json::as_arr)
            .and_then(|items| {
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                AdapterError::Observation(format!("current-work {field} must be a token array"))
            })
    };
    let active = match state {
        Some(state) => state
            .active_capability_ids()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        None => tokens("active_capability_ids")?,
    };
    let invalid = |e: crate::catalog::ObservationError| AdapterError::Observation(e.to_string());
    let (signals, languages) = (tokens("signals")?, tokens("languages")?);
    let (baseline, rejected) = (
        tokens("baseline_capability_ids")?,
        tokens("rejected_capability_ids")?,
    );
    WorkObservation::new(&signals, &languages)
        .and_then(|o| o.with_baseline(&baseline))
        .and_then(|o| o.with_active(&active))
        .and_then(|o| o.with_rejected(&rejected))
        .and_then(|o| o.with_requested_limit(limit))
        .map_err(invalid)
}

/// `normalize_candidate_pool` (spec/planner.md §10): bound the pool, drop baseline and rejected
/// ids, omit any id whose rows differ in any field, and sort canonically.
pub fn normalize_candidate_pool(
    rows: Vec<CapabilityCandidate>,
    observation: &WorkObservation,
) -> Result<Vec<CapabilityCandidate>, AdapterError> {
    if rows.len() > CANDIDATE_POOL_MAX_ITEMS {
        return Err(AdapterError::Validation(
            "candidate source exceeded its candidate pool limit".into(),
        ));
    }
    // Active ids stay: an active capability may be re-planned with an identical row.
    let excluded = |id: &String| {
        observation.baseline_capability_ids().contains(id)
            || observation.rejected_capability_ids().contains(id)
    };
    let mut groups: BTreeMap<String, Vec<CapabilityCandidate>> = BTreeMap::new();
    for row in rows.into_iter().filter(|r| !excluded(&r.capability_id)) {
        groups
            .entry(row.capability_id.clone())
            .or_default()
            .push(row);
    }
    let mut pool: Vec<CapabilityCandidate> = groups
        .into_values()
        .filter_map(|group| {
            let mut rows = group.into_iter();
            let first = rows.next()?;
            rows.all(|r| r == first).then_some(first)
        })
        .collect();
    pool.sort_by(|a, b| {
        let key = |c: &CapabilityCandidate| {
            (
                c.capability_id.clone(),
                c.source_digest.clone(),
                c.actionability.as_str(),
                std::cmp::Reverse(c.normalized_score_ppm),
                c.equivalence_key.clone().unwrap_or_default(),
                c.matching_signals.clone(),
                c.reason_codes.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    Ok(pool)
}

fn to_presentation(c: &CapabilityCandidate) -> CapabilityPresentation {
    CapabilityPresentation {
        capability_id: c.capability_id.clone(),
        kind: c.kind.as_str().to_owned(),
        name: c.name.clone(),
        source_digest: c.source_digest.clone(),
        normalized_score_ppm: i64::from(c.normalized_score_ppm),
        matching_signals: c.matching_signals.clone(),
        reason_codes: c.reason_codes.clone(),
        actionability: c.actionability.as_str().to_owned(),
        install_descriptor_digest: c.install_descriptor_digest.clone(),
        install_plan_digest: c.install_plan_digest.clone(),
        equivalence_key: c.equivalence_key.clone(),
    }
}

#[cfg(test)]
mod tests;
