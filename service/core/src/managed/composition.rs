//! The engine composition (spec/service.md §4): one engine on a data directory's journal, with
//! the artifact's observation normalizer and the replay decision planner over the host's ports,
//! whose benefit results land in the same journal.

use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ctx_journal::{AppendError, Journal, OpenOptions, StreamAppend};
use ctx_model::{EngineEvent, EventKind, Json, NORMALIZER_VERSION_DEFAULT, ScopeRef, Transition};
use ctx_projections::engine::{
    BenefitAuditError, Clock, Engine, EngineOptions, ProcessWithError, StoreError,
};

use super::error::{ServiceError, invalid, projection};
use super::result::{PreparedQuery, project};
use crate::planning::adapter::{AdapterPorts, ReplayDecisionPlanner};
use crate::planning::benefit::NetBenefitPolicy;
use crate::planning::plan::{AuthenticatedNetBenefitPlanner, BenefitAuditSink, SinkError};
use crate::registry::{ArtifactHandle, CapturedAuthority, RegistryError};

/// How long an open waits for another process to release the data directory (the reference's
/// store file-lock timeout).
pub const JOURNAL_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Opens (creating on first use) the journal of `data_dir`. Within one process every open of one
/// directory shares a single journal, so the query store and the engine see one commit order.
pub(crate) fn open_journal(data_dir: &Path) -> Result<Arc<Journal>, ServiceError> {
    let options = OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT);
    Ok(Arc::new(crate::journal_store::open_journal(
        data_dir, &options,
    )?))
}

/// The benefit audit sink of a composition: results are stored through the engine, so they are
/// journal records beside the plans that cite them. The engine owns the planner that owns this
/// sink, hence the weak back-reference, set once the engine exists.
#[derive(Debug, Clone, Default)]
pub(crate) struct EngineAuditSink {
    engine: Arc<OnceLock<Weak<Engine>>>,
}

impl BenefitAuditSink for EngineAuditSink {
    fn store(&self, result_json: &Json) -> Result<String, SinkError> {
        let Some(engine) = self.engine.get().and_then(Weak::upgrade) else {
            return Err(SinkError::Unavailable(
                "benefit audit engine is not available".into(),
            ));
        };
        engine
            .store_benefit_result(result_json)
            .map_err(|e| match e {
                // Fail-soft only when storage itself is unavailable; the planner then degrades.
                BenefitAuditError::Store(
                    StoreError::Read(_) | StoreError::Append(_) | StoreError::Projection(_),
                )
                | BenefitAuditError::Clock(_) => SinkError::Unavailable(e.to_string()),
                other => SinkError::Failed(other.to_string()),
            })
    }
}

/// One engine over a data directory, pinned to one artifact's planning environment.
pub struct EngineComposition {
    engine: Arc<Engine>,
    planning_environment_digest: String,
    planner_version: String,
    pid: u32,
}

impl std::fmt::Debug for EngineComposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineComposition")
            .field(
                "planning_environment_digest",
                &self.planning_environment_digest,
            )
            .field("planner_version", &self.planner_version)
            .finish_non_exhaustive()
    }
}

/// Opens an engine composition on `data_dir` for `artifact` (issue item 6: hosts and tests that
/// drive the engine directly). The ports and policy must be the ones the artifact captured.
pub fn open_engine_composition(
    data_dir: &Path,
    artifact: &ArtifactHandle,
    ports: AdapterPorts,
    policy: NetBenefitPolicy,
    planner_version: &str,
    clock: Arc<dyn Clock>,
) -> Result<EngineComposition, ServiceError> {
    if !data_dir.is_absolute() {
        return invalid("data_dir must be an absolute Path");
    }
    // Everything that can be refused without the journal is checked first, so an invalid
    // configuration leaves no authoritative state (spec/service.md §4).
    let planner = build_planner(artifact, ports, policy, planner_version)?;
    EngineComposition::assemble(open_journal(data_dir)?, artifact, planner, clock)
}

/// The captured-authority check of spec/service.md §3; spec/registry.md §6 over `ports` and
/// `policy`.
pub(crate) fn check_captured(
    artifact: &ArtifactHandle,
    ports: &AdapterPorts,
    policy: &NetBenefitPolicy,
) -> Result<(), ServiceError> {
    let policy_digest = policy.policy_digest();
    let captured = CapturedAuthority {
        benefit_facts_snapshot_digest: ports.facts.benefit_facts_snapshot_digest(),
        benefit_policy_snapshot_digest: &policy_digest,
        material_snapshot_digest: ports
            .material
            .as_ref()
            .map_or("", |m| m.material_snapshot_digest()),
        installation_snapshot_digest: ports
            .install
            .as_ref()
            .map_or("", |i| i.installation_snapshot_digest()),
    };
    artifact
        .check_captured_authority(&captured)
        .map_err(|e| match e {
            RegistryError::AuthorityDrift { field, .. } => ServiceError::AuthorityDrift { field },
            other => ServiceError::Registry(other),
        })
}

type Planner = ReplayDecisionPlanner<EngineAuditSink>;

/// The replay planner over `ports`, checked against everything the artifact pins.
pub(crate) fn build_planner(
    artifact: &ArtifactHandle,
    ports: AdapterPorts,
    policy: NetBenefitPolicy,
    planner_version: &str,
) -> Result<(Planner, EngineAuditSink), ServiceError> {
    if planner_version != artifact.planning_schema_version() {
        return invalid("planner_version does not match the artifact's planning schema version");
    }
    check_captured(artifact, &ports, &policy)?;
    if ports.source.catalog_snapshot_digest() != artifact.catalog_retrieval_digest() {
        return invalid("composition source and planner catalog snapshots do not match");
    }
    let sink = EngineAuditSink::default();
    let net_benefit = AuthenticatedNetBenefitPlanner::new(policy, sink.clone())
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let planner = ReplayDecisionPlanner::new(
        net_benefit,
        ports,
        planner_version,
        artifact.catalog_namespace_digest(),
    )
    .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    if planner.catalog_snapshot_digest() != artifact.planning_environment_digest() {
        return invalid("managed planning environment does not match the handle");
    }
    Ok((planner, sink))
}

impl EngineComposition {
    pub(crate) fn assemble(
        journal: Arc<Journal>,
        artifact: &ArtifactHandle,
        (planner, sink): (Planner, EngineAuditSink),
        clock: Arc<dyn Clock>,
    ) -> Result<EngineComposition, ServiceError> {
        let planning_environment_digest = planner.catalog_snapshot_digest().to_owned();
        let planner_version = planner.planner_version().to_owned();
        let options = EngineOptions::new(clock)
            .normalizer(
                Arc::new(artifact.observation_normalizer()),
                NORMALIZER_VERSION_DEFAULT,
            )
            .planner(Arc::new(planner));
        let engine = Arc::new(Engine::open(journal, options)?);
        // Set exactly once, on a sink nobody else holds yet.
        let _ = sink.engine.set(Arc::downgrade(&engine));
        Ok(EngineComposition {
            engine,
            planning_environment_digest,
            planner_version,
            pid: std::process::id(),
        })
    }

    fn check_process(&self) -> Result<(), ServiceError> {
        if std::process::id() == self.pid {
            Ok(())
        } else {
            Err(ServiceError::CompositionForkedProcess)
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The planning-environment digest planning events must carry.
    pub fn catalog_snapshot_digest(&self) -> &str {
        &self.planning_environment_digest
    }

    pub fn planner_version(&self) -> &str {
        &self.planner_version
    }

    /// Processes one event (an identical committed event returns its stored transition).
    pub fn process(&self, event: &EngineEvent) -> Result<Transition, ServiceError> {
        self.check_process()?;
        Ok(self.engine.process(event, None)?)
    }

    /// The committed plan at the current head of `scope`, without planning.
    pub fn reopen_managed_query(
        &self,
        scope: &ScopeRef,
        expected_plan_id: Option<&str>,
    ) -> Result<PreparedQuery, ServiceError> {
        self.check_process()?;
        let snapshot = self.engine.snapshot(scope)?;
        project(&snapshot, scope, expected_plan_id)
    }

    /// Commits the session start and the planning event (each an idempotent replay when already
    /// committed) and projects the head (spec/service.md §4).
    pub fn advance_managed_query(
        &self,
        session_started: &EngineEvent,
        decision_event: &EngineEvent,
    ) -> Result<(PreparedQuery, Transition), ServiceError> {
        self.advance_managed_query_with(session_started, decision_event, |_, _| Ok(Vec::new()))?
            // Without extra records the journal has no extra part to refuse.
            .map_err(|e| ServiceError::Internal(e.to_string()))
    }

    /// The checks of spec/service.md §4 that precede any write of an advance.
    pub(crate) fn check_managed_events(
        &self,
        session_started: &EngineEvent,
        decision_event: &EngineEvent,
    ) -> Result<(), ServiceError> {
        self.check_process()?;
        self.check_advance(session_started, decision_event)?;
        let initial = self.engine.snapshot(&decision_event.scope)?;
        if initial.revision() <= 1 && decision_event.expected_revision != 1 {
            return projection("an unplanned managed session requires IntentObserved revision one");
        }
        Ok(())
    }

    /// Commits the session start together with `extras` (the managed service's query
    /// registration) in one journal append. When the session start is committed already, the
    /// extras are appended alone (identical ones are a no-op). The inner `Err` is the journal's
    /// refusal of an extra record, for its owner to settle.
    pub(crate) fn start_managed_query(
        &self,
        session_started: &EngineEvent,
        extras: Vec<StreamAppend>,
    ) -> Result<Result<(), AppendError>, ServiceError> {
        self.check_process()?;
        let started = match self.engine.process_with(session_started, None, |_| {
            Ok::<_, ServiceError>(extras.clone())
        }) {
            Ok(t) => t,
            Err(ProcessWithError::Process(e)) => return Err(e.into()),
            Err(ProcessWithError::Extras(e)) => return Err(e),
            Err(ProcessWithError::ExtrasAppend(e)) => return Ok(Err(e)),
        };
        check_started(&started, session_started)?;
        Ok(Ok(()))
    }

    /// [`EngineComposition::advance_managed_query`] that commits the records `planned` returns
    /// (the managed service's completion binding) in the planning event's own append. `planned`
    /// sees the projected plan and the transition before anything is written, and a refusal there
    /// writes nothing. The inner `Err` is the journal's refusal of an extra record.
    pub(crate) fn advance_managed_query_with(
        &self,
        session_started: &EngineEvent,
        decision_event: &EngineEvent,
        mut planned: impl FnMut(&PreparedQuery, &Transition) -> Result<Vec<StreamAppend>, ServiceError>,
    ) -> Result<Result<(PreparedQuery, Transition), AppendError>, ServiceError> {
        self.check_managed_events(session_started, decision_event)?;
        let scope = &decision_event.scope;
        let started = self.engine.process(session_started, None)?;
        check_started(&started, session_started)?;
        let current = self.engine.snapshot(scope)?;
        let Some(state) = current.state().filter(|_| current.revision() >= 1) else {
            return projection("managed query session start is not authoritative");
        };
        if current.revision() >= 2 && decision_event.expected_revision == current.revision() {
            // A replacement plan: only over a settled, live session with another plan committed.
            let Some(plan) = &state.committed_plan else {
                return projection(
                    "managed replacement requires an exact committed schema-v3 plan",
                );
            };
            if decision_event.correlation_id.as_deref() == Some(plan.plan_id.as_str()) {
                return projection(
                    "managed replacement plan identity is already committed; an exact retry must \
                     reuse its original revision",
                );
            }
            if state.session_status != ctx_model::SessionStatus::Active {
                return projection("managed query session has ended");
            }
            if !state.pending_effects.is_empty() || !state.pending_consents.is_empty() {
                return projection(
                    "managed query must settle pending authority before replacement",
                );
            }
        }
        let plan_id = decision_event.correlation_id.as_deref();
        let outcome = self.engine.process_with(decision_event, None, |pending| {
            // The same checks as after the commit, made before it, so a refused plan is not
            // committed with (or without) its completion binding.
            let checked = check_planning(pending.transition(), decision_event).and_then(|()| {
                let Some(snapshot) = pending.snapshot() else {
                    return Err(ServiceError::Identity(
                        "managed planning head is not the committed decision",
                    ));
                };
                let prepared = project(&snapshot, scope, plan_id)?;
                if prepared.planning_environment_digest() != self.planning_environment_digest {
                    return projection(
                        "committed managed plan does not match this planning environment",
                    );
                }
                Ok(prepared)
            });
            match checked {
                Ok(prepared) => planned(&prepared, pending.transition()),
                // A committed event that is no longer the head (or no longer projects) gets no
                // extra records; the checks after the replay decide, as for a plain process.
                Err(_) if pending.is_replayed() => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        });
        let transition = match outcome {
            Ok(t) => t,
            Err(ProcessWithError::Process(e)) => return Err(e.into()),
            Err(ProcessWithError::Extras(e)) => return Err(e),
            Err(ProcessWithError::ExtrasAppend(e)) => return Ok(Err(e)),
        };
        check_planning(&transition, decision_event)?;
        let snapshot = self.engine.snapshot(scope)?;
        let prepared = project(&snapshot, scope, plan_id)?;
        if prepared.planning_environment_digest() != self.planning_environment_digest {
            return projection("committed managed plan does not match this planning environment");
        }
        Ok(Ok((prepared, transition)))
    }

    /// The event checks of spec/service.md §4, before anything is processed.
    fn check_advance(
        &self,
        started: &EngineEvent,
        decision: &EngineEvent,
    ) -> Result<(), ServiceError> {
        if started.kind != EventKind::SessionStarted || started.expected_revision != 0 {
            return projection("managed advance requires SessionStarted revision zero");
        }
        let planning_kind = match decision.expected_revision {
            0 => None,
            1 => Some(EventKind::IntentObserved),
            _ => Some(EventKind::DevelopmentObserved),
        };
        if planning_kind != Some(decision.kind) {
            return projection(
                "managed planning must use IntentObserved at revision one and \
                 DevelopmentObserved afterward",
            );
        }
        if started.scope.stream_key() != decision.scope.stream_key() {
            return projection("managed planning events must share one stable stream");
        }
        for event in [started, decision] {
            if event.catalog_snapshot_digest.as_deref()
                != Some(self.planning_environment_digest.as_str())
            {
                return projection(
                    "managed planning event does not match the planning environment",
                );
            }
            if event.planner_version.as_deref() != Some(self.planner_version.as_str()) {
                return projection("managed planning event does not match the planner");
            }
        }
        for (field, a, b) in [
            (
                "host_descriptor_digest",
                &started.host_descriptor_digest,
                &decision.host_descriptor_digest,
            ),
            (
                "semantic_model_digest",
                &started.semantic_model_digest,
                &decision.semantic_model_digest,
            ),
            (
                "semantic_index_digest",
                &started.semantic_index_digest,
                &decision.semantic_index_digest,
            ),
        ] {
            if a != b {
                return projection(format!("managed planning events disagree on {field}"));
            }
        }
        if decision.expected_revision == 1
            && (started.correlation_id != decision.correlation_id
                || started.work_signature != decision.work_signature)
        {
            return projection("initial managed planning must preserve its plan and work identity");
        }
        Ok(())
    }
}

/// The session start must keep its exact identity: revision 0 to 1 of its own scope.
fn check_started(started: &Transition, session_started: &EngineEvent) -> Result<(), ServiceError> {
    if started.event_id != session_started.event_id
        || started.scope != session_started.scope
        || (started.from_revision, started.to_revision) != (0, 1)
    {
        return projection("managed query lost its exact session-start identity");
    }
    Ok(())
}

/// The planning transition must be exactly the decision event's, one revision on.
fn check_planning(
    transition: &Transition,
    decision_event: &EngineEvent,
) -> Result<(), ServiceError> {
    if transition.event_id != decision_event.event_id
        || transition.scope != decision_event.scope
        || transition.from_revision != decision_event.expected_revision
        || Some(transition.to_revision) != decision_event.expected_revision.checked_add(1)
    {
        return projection("managed query lost its exact planning-event identity");
    }
    Ok(())
}
