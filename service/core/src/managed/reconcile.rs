//! `set_desired` (spec/service.md §6): durably select a subset of a committed plan as
//! one `ReassessmentRequested` event, drive pre-approved installs exactly once, publish at most
//! one consent challenge and report where the choice stands.
//!
//! Durable writes of a fresh choice without installs: the reservation (one append) and the
//! engine event together with its commit mark (one append) — two fsyncs.

use ctx_journal::StreamAppend;
use ctx_model::{
    ActionKind, CommittedPlan, EffectKind, EngineEvent, EngineState, EventKind, HostAction,
    InstallExecutionBinding, Installation, Json, Transition, UtcMicros, cja_digest, is_sha,
    sha256_hex,
};
use ctx_projections::engine::{
    AuthorizeError, Engine, InstallOutcome, JournaledEvent, ProcessError, ProcessWithError,
    Snapshot,
};
use ctx_projections::query_store::{DesiredSetRecord, QueryRecord, QueryStore, QueryStoreError};

use super::authority::{consent_requests, descriptor_of, envelope_event};
use super::composition::EngineComposition;
use super::consent::{ConsentContext, consent_request_at_head, publish_current_consent};
use super::desired::{DesiredResultParts, DesiredSetRequest, DesiredSetResult, reason, status};
use super::error::ServiceError;
use super::failpoints;
use super::install::{ExecuteError, InstallAuthority, execute_install};
use super::request::QueryInput;
use super::result::{ACTION_SUMMARIES_MAX, ActionSummary};
use super::service::{QueryService, Runtime};
use crate::failpoint::FailPointFired;
use crate::policy::InstallConsentPolicy;

/// Everything one `set_desired` works with.
pub(crate) struct Ctx<'a> {
    pub service: &'a QueryService,
    pub runtime: &'a Runtime,
    pub composition: &'a EngineComposition,
    pub parent: &'a QueryRecord,
}

impl Ctx<'_> {
    pub(crate) fn engine(&self) -> &Engine {
        self.composition.engine()
    }

    fn snapshot(&self) -> Result<Snapshot, ServiceError> {
        Ok(self
            .engine()
            .snapshot(&self.parent.decision_event().scope)?)
    }

    pub(crate) fn consent(&self) -> ConsentContext<'_> {
        ConsentContext {
            service: self.service,
            engine: self.engine(),
            consent_store: self.runtime.consent.as_ref(),
        }
    }
}

fn not_found(e: &QueryStoreError) -> bool {
    matches!(e, QueryStoreError::NotFound { .. })
}

fn optional<T>(r: Result<T, QueryStoreError>) -> Result<Option<T>, ServiceError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl QueryService {
    /// Records which capabilities of a planned query the host wants and reconciles them
    /// (spec/service.md §6). An exact retry of the latest choice is its recovery path: it never
    /// mints a new event, and resumes installs and publication from the durable state.
    pub fn set_desired(
        &self,
        request: &DesiredSetRequest,
    ) -> Result<DesiredSetResult, ServiceError> {
        let mut state = self.begin()?;
        let _lifecycle = self.lifecycle();
        let runtime = self.runtime(&mut state)?;
        self.set_desired_locked(runtime, request)
    }

    fn set_desired_locked(
        &self,
        runtime: &Runtime,
        request: &DesiredSetRequest,
    ) -> Result<DesiredSetResult, ServiceError> {
        let store = &runtime.store;
        // 1. The parent must be exactly planned.
        let parent = store.load(request.query_ref())?;
        let (Some(_), Some(_)) = (parent.plan_id(), parent.decision_digest()) else {
            return Err(ServiceError::DesiredConflict(
                "managed desired set requires an exactly planned parent query",
            ));
        };
        // 2. Its artifact, re-authenticated.
        let artifact = self.config.registry.reopen(
            parent.artifact_manifest_digest(),
            parent.planning_environment_digest(),
        )?;
        // 3–4. The latest choice of this query and the predecessor rules.
        let latest = optional(store.load_latest_desired_set(parent.query_ref()))?;
        let retry = match &latest {
            None => {
                if request.expected_previous_desired_set_ref().is_some() {
                    return Err(ServiceError::DesiredSuperseded(
                        "desired choice expected a previous record that is unavailable",
                    ));
                }
                false
            }
            Some(latest) if latest.logical_choice_id() == request.logical_choice_id() => {
                check_retry_predecessor(store, &parent, latest, request)?;
                true
            }
            Some(latest) => {
                if !latest.is_committed() {
                    return Err(ServiceError::Busy(
                        "another managed desired choice is pending on this stream",
                    ));
                }
                if request.expected_previous_desired_set_ref() != Some(latest.desired_set_ref()) {
                    return Err(ServiceError::DesiredSuperseded(
                        "desired choice does not name the exact latest committed predecessor",
                    ));
                }
                false
            }
        };
        // 5. Stream-wide: at most one pending reservation, and only this very choice may pass.
        let scope = &parent.decision_event().scope;
        if let Some(pending) = optional(store.load_pending_desired_set(scope))? {
            let ours = latest.as_ref().is_some_and(|l| {
                l.desired_set_ref() == pending.desired_set_ref()
                    && pending.logical_choice_id() == request.logical_choice_id()
            });
            if !ours {
                return Err(ServiceError::Busy(
                    "another managed desired choice is pending on this stream",
                ));
            }
        }
        // 6–7. The composition and the exact parent plan.
        let input = QueryInput::new(
            artifact,
            parent.session_started().clone(),
            parent.decision_event().clone(),
        );
        let composition = self.composition(runtime, &input)?;
        let ctx = Ctx {
            service: self,
            runtime,
            composition: &composition,
            parent: &parent,
        };
        let snapshot = ctx.snapshot()?;
        let canonical = {
            let committed = exact_parent_plan(&snapshot, &parent)?;
            canonical_subset(committed, request.capability_ids())?
        };
        // 9. The reservation: the stored one on a retry, a new one otherwise.
        let reserved = match (retry, latest) {
            (true, Some(latest)) => {
                if latest.capability_ids() != canonical.as_slice() {
                    return Err(ServiceError::DesiredConflict(
                        "logical desired choice is already bound to another subset",
                    ));
                }
                latest
            }
            (_, previous) => {
                let Some(state) = snapshot.state() else {
                    return Err(ServiceError::Busy(
                        "managed stream has an unresolved lifecycle effect",
                    ));
                };
                let policy = self.current_policy()?;
                let drift = pending_policy_drift(state, &policy.policy_digest())?;
                if !state.pending_effects.is_empty()
                    || (!state.pending_consents.is_empty() && !drift)
                {
                    return Err(ServiceError::Busy(
                        "managed stream has an unresolved lifecycle effect",
                    ));
                }
                let committed = exact_parent_plan(&snapshot, &parent)?;
                let event = self.desired_event(
                    &parent,
                    &snapshot,
                    committed,
                    request.logical_choice_id(),
                    &canonical,
                    previous.as_ref(),
                    &policy,
                )?;
                reserve(
                    store,
                    &parent,
                    request.logical_choice_id(),
                    &canonical,
                    &event,
                    previous.as_ref(),
                )?
            }
        };
        // 10–11. Commit the event (or recognise it committed) with its mark.
        let marked = commit_desired(&ctx, &reserved)?;
        // 12–14. Automatic installs, unless the policy drifted since the choice.
        let mut current = ctx.snapshot()?;
        exact_parent_plan(&current, &parent)?;
        let policy = self.current_policy()?;
        let mut drift = current
            .state()
            .map(|s| pending_policy_drift(s, &policy.policy_digest()))
            .transpose()?
            .unwrap_or(false);
        let mut indeterminate = Vec::new();
        if !drift {
            let (after, ids) = advance_automatic_installs(&ctx, current, &marked)?;
            current = after;
            indeterminate = ids;
            exact_parent_plan(&current, &parent)?;
            let policy = self.current_policy()?;
            drift = current
                .state()
                .map(|s| pending_policy_drift(s, &policy.policy_digest()))
                .transpose()?
                .unwrap_or(false);
        }
        // 15. The one challenge a human must answer, if any.
        let challenge = if drift || !indeterminate.is_empty() {
            None
        } else {
            let plan_id = parent.plan_id().unwrap_or_default();
            publish_current_consent(&ctx.consent(), &current, plan_id)?
        };
        // 16–18. Actions of the head, failures, status.
        let actions = head_action_summaries(ctx.engine(), &current)?;
        let committed = exact_parent_plan(&current, &parent)?;
        let failed = failed_desired_install_ids(&current, committed, marked.capability_ids());
        let parts = desired_status(
            &current,
            committed,
            &marked,
            &indeterminate,
            drift,
            failed,
            actions,
            challenge,
        )?;
        DesiredSetResult::new(&marked, parts)
    }

    /// The install policy in force now: the persisted one, or the safe default.
    pub(crate) fn current_policy(&self) -> Result<InstallConsentPolicy, ServiceError> {
        match &self.policy_store {
            Some(store) => Ok(store.load_current()?),
            None => Ok(InstallConsentPolicy::safe_default()),
        }
    }

    /// The `ReassessmentRequested` event of a new choice (spec/service.md §6).
    #[allow(clippy::too_many_arguments)]
    fn desired_event(
        &self,
        parent: &QueryRecord,
        snapshot: &Snapshot,
        committed: &CommittedPlan,
        logical_choice_id: &str,
        canonical: &[String],
        previous: Option<&DesiredSetRecord>,
        policy: &InstallConsentPolicy,
    ) -> Result<EngineEvent, ServiceError> {
        let decision = parent.decision_event();
        let plan_id = parent.plan_id().unwrap_or_default();
        let policy_digest = policy.policy_digest();
        let owner_id = owner_id(&decision.scope);
        let mut rows = Vec::with_capacity(canonical.len());
        for id in canonical {
            let Some(row) = committed.row(id) else {
                return Err(ServiceError::DesiredConflict(
                    "desired capability subset is not contained in the committed plan",
                ));
            };
            let kind = row.get_str("kind").unwrap_or_default();
            let source_digest = row.get_str("catalog_entry_digest").unwrap_or_default();
            rows.push(Json::object([
                (
                    "actionability",
                    row.get("actionability").cloned().unwrap_or(Json::Null),
                ),
                ("capability_id", Json::str(id)),
                (
                    "install_descriptor_digest",
                    row.get("install_descriptor_digest")
                        .cloned()
                        .unwrap_or(Json::Null),
                ),
                (
                    "install_plan_digest",
                    row.get("install_plan_digest")
                        .cloned()
                        .unwrap_or(Json::Null),
                ),
                ("kind", Json::str(kind)),
                (
                    "lease_id",
                    Json::str(lease_id(id, kind, &owner_id, source_digest)),
                ),
                ("source_digest", Json::str(source_digest)),
            ]));
        }
        let ids = Json::Arr(canonical.iter().map(Json::str).collect());
        let event_id = format!(
            "ctx-desired:{}",
            cja_digest(&Json::object([
                ("capability_ids", ids),
                ("logical_choice_id", Json::str(logical_choice_id)),
                ("plan_id", Json::str(plan_id)),
                ("policy_snapshot_digest", Json::str(&policy_digest)),
                ("query_ref", Json::str(parent.query_ref())),
                ("revision", Json::from(snapshot.revision())),
                ("schema", Json::str("ctx.managed-desired-event.v1")),
            ]))
        );
        let now = self.config.clock.now().map_err(|_| {
            ServiceError::Identity("trusted desired-set clock must return aware datetime")
        })?;
        let mut event = EngineEvent::bare(
            &event_id,
            EventKind::ReassessmentRequested,
            decision.scope.clone(),
            snapshot.revision(),
            &now.render(),
        );
        event.payload = Json::object([
            ("desired_capabilities", Json::Arr(rows)),
            ("owner_id", Json::str(&owner_id)),
            ("policy_snapshot_digest", Json::str(&policy_digest)),
        ]);
        event.privacy = decision.privacy;
        event.correlation_id = Some(plan_id.to_owned());
        event.causation_id = Some(match previous {
            Some(p) => p.event().event_id.clone(),
            None => decision.event_id.clone(),
        });
        event.engine_version = decision.engine_version.clone();
        event.planner_version = decision.planner_version.clone();
        event.policy_version = decision.policy_version.clone();
        event.host_descriptor_digest = decision.host_descriptor_digest.clone();
        event.catalog_snapshot_digest = decision.catalog_snapshot_digest.clone();
        event.semantic_model_digest = decision.semantic_model_digest.clone();
        event.semantic_index_digest = decision.semantic_index_digest.clone();
        event.work_signature = decision.work_signature.clone();
        event.random_seed = decision.random_seed.clone();
        event
            .validate()
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        Ok(event)
    }
}

/// `"ctx-desired:" + H(CJA({schema, stream}))`: one owner per engine stream, whatever the query,
/// host or exposure (spec/service.md §6).
pub fn owner_id(scope: &ctx_model::ScopeRef) -> String {
    format!(
        "ctx-desired:{}",
        cja_digest(&Json::object([
            ("schema", Json::str("ctx.managed-desired-owner.v1")),
            ("stream", Json::str(scope.stream_key())),
        ]))
    )
}

/// `"ctx-lease:" + H(CJA({capability_id, kind, owner_id, schema, source_digest}))`: a capability
/// keeps its lease across choices while its kind and source are unchanged (spec/service.md §6).
pub fn lease_id(capability_id: &str, kind: &str, owner_id: &str, source_digest: &str) -> String {
    format!(
        "ctx-lease:{}",
        cja_digest(&Json::object([
            ("capability_id", Json::str(capability_id)),
            ("kind", Json::str(kind)),
            ("owner_id", Json::str(owner_id)),
            ("schema", Json::str("ctx.managed-desired-lease.v1")),
            ("source_digest", Json::str(source_digest)),
        ]))
    )
}

/// spec/service.md §6.
fn check_retry_predecessor(
    store: &QueryStore,
    parent: &QueryRecord,
    latest: &DesiredSetRecord,
    request: &DesiredSetRequest,
) -> Result<(), ServiceError> {
    let causation = latest.event().causation_id.as_deref();
    if causation == Some(parent.decision_event().event_id.as_str()) {
        if request.expected_previous_desired_set_ref().is_some() {
            return Err(ServiceError::DesiredSuperseded(
                "first desired choice cannot name a predecessor",
            ));
        }
        return Ok(());
    }
    let Some(expected) = request.expected_previous_desired_set_ref() else {
        return Err(ServiceError::DesiredSuperseded(
            "later desired choice must name its exact predecessor",
        ));
    };
    let Some(previous) = optional(store.load_desired_set(expected))? else {
        return Err(ServiceError::DesiredSuperseded(
            "desired choice predecessor is unavailable",
        ));
    };
    if !previous.is_committed()
        || previous.query_ref() != parent.query_ref()
        || Some(previous.event().event_id.as_str()) != causation
    {
        return Err(ServiceError::DesiredSuperseded(
            "desired choice predecessor no longer matches its durable causation",
        ));
    }
    Ok(())
}

/// spec/service.md §6: the head's committed plan must still be the parent's.
pub(crate) fn exact_parent_plan<'s>(
    snapshot: &'s Snapshot,
    parent: &QueryRecord,
) -> Result<&'s CommittedPlan, ServiceError> {
    let plan = snapshot.state().and_then(|s| s.committed_plan.as_ref());
    match plan {
        Some(p)
            if Some(p.plan_id.as_str()) == parent.plan_id()
                && Some(p.decision_digest.as_str()) == parent.decision_digest()
                && p.catalog_snapshot_id == parent.planning_environment_digest() =>
        {
            Ok(p)
        }
        _ => Err(ServiceError::DesiredSuperseded(
            "managed desired set parent plan is no longer authoritative",
        )),
    }
}

/// spec/service.md §6: the requested ids in committed-plan order.
fn canonical_subset(
    committed: &CommittedPlan,
    requested: &[String],
) -> Result<Vec<String>, ServiceError> {
    let planned: Vec<&str> = committed
        .capabilities
        .iter()
        .filter_map(|r| r.get_str("capability_id"))
        .collect();
    if requested.iter().any(|id| !planned.contains(&id.as_str())) {
        return Err(ServiceError::DesiredConflict(
            "desired capability subset is not contained in the committed plan",
        ));
    }
    Ok(planned
        .into_iter()
        .filter(|id| requested.iter().any(|r| r == id))
        .map(str::to_owned)
        .collect())
}

/// spec/service.md §6: does the one pending consent name another policy than the current one?
pub(crate) fn pending_policy_drift(
    state: &EngineState,
    current_policy_digest: &str,
) -> Result<bool, ServiceError> {
    match state.pending_consents.as_slice() {
        [] => Ok(false),
        [consent] => Ok(consent
            .install_action
            .payload
            .get_str("policy_snapshot_digest")
            != Some(current_policy_digest)),
        _ => Err(ServiceError::Identity(
            "managed desired-set consent is not serialized",
        )),
    }
}

/// Reserves a new choice; a concurrent identical winner is adopted (spec/service.md §6).
fn reserve(
    store: &QueryStore,
    parent: &QueryRecord,
    logical_choice_id: &str,
    canonical: &[String],
    event: &EngineEvent,
    previous: Option<&DesiredSetRecord>,
) -> Result<DesiredSetRecord, ServiceError> {
    match store.reserve_desired_set(parent.query_ref(), logical_choice_id, canonical, event) {
        Ok(record) => Ok(record),
        Err(QueryStoreError::Conflict { .. }) => {
            let lost =
                ServiceError::Busy("managed desired-set reservation lost a concurrent stream race");
            let Some(winner) = optional(store.load_latest_desired_set(parent.query_ref()))? else {
                return Err(lost);
            };
            let expected_causation = match previous {
                Some(p) => p.event().event_id.as_str(),
                None => parent.decision_event().event_id.as_str(),
            };
            if winner.logical_choice_id() == logical_choice_id
                && winner.capability_ids() == canonical
                && winner.event().causation_id.as_deref() == Some(expected_causation)
            {
                Ok(winner)
            } else {
                Err(lost)
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The desired event's transition must be exactly its own (spec/service.md §6).
fn check_desired_transition(t: &Transition, event: &EngineEvent) -> Result<(), ServiceError> {
    if t.event_id != event.event_id
        || t.scope != event.scope
        || t.from_revision != event.expected_revision
        || Some(t.to_revision) != event.expected_revision.checked_add(1)
        || t.actions.len() > ACTION_SUMMARIES_MAX
    {
        return Err(ServiceError::Identity(
            "managed desired-set transition was substituted",
        ));
    }
    Ok(())
}

fn check_desired_record(rec: &JournaledEvent, event: &EngineEvent) -> Result<(), ServiceError> {
    if rec.reducer_event.event_id != event.event_id
        || rec.source_event_content_digest != event.content_digest()
        || rec.transition_json != rec.transition.to_json().to_cj()
    {
        return Err(ServiceError::Identity(
            "managed desired-set journal record was substituted",
        ));
    }
    Ok(())
}

/// spec/service.md §6: commits the reserved event and its mark in one append, or
/// recognises the event committed (after a crash) and marks it.
fn commit_desired(
    ctx: &Ctx<'_>,
    reserved: &DesiredSetRecord,
) -> Result<DesiredSetRecord, ServiceError> {
    let event = reserved.event();
    let engine = ctx.engine();
    let target = event.expected_revision + 1;
    if let Some(rec) = engine.journaled_event(&event.scope, target)? {
        if rec.reducer_event.event_id != event.event_id
            || rec.source_event_content_digest != event.content_digest()
        {
            return Err(ServiceError::DesiredConflict(
                "managed desired-set journal revision was committed by another event",
            ));
        }
        check_desired_transition(&rec.transition, event)?;
        check_desired_record(&rec, event)?;
        if reserved.is_committed() {
            return Ok(ctx
                .runtime
                .store
                .load_desired_set(reserved.desired_set_ref())?);
        }
        return Ok(ctx.runtime.store.mark_desired_set_committed(
            reserved.desired_set_ref(),
            target,
            &rec.record_digest,
            &sha256_hex(&rec.transition_json),
        )?);
    }
    if engine.snapshot(&event.scope)?.revision() != event.expected_revision {
        return Err(ServiceError::DesiredConflict(
            "managed desired-set journal head advanced before its reserved event",
        ));
    }
    crate::failpoint::fail_point!(failpoints::DESIRED_BEFORE_COMMIT);
    let mut mark_skipped = false;
    let outcome = engine.process_with(event, None, |pending| {
        check_desired_transition(pending.transition(), event)?;
        if crate::failpoint::failpoint_fired(failpoints::DESIRED_BEFORE_MARK) {
            // Simulates a crash between the engine commit and the store mark.
            mark_skipped = true;
            return Ok::<Vec<StreamAppend>, ServiceError>(Vec::new());
        }
        let transition_json = pending.transition().to_json().to_cj();
        Ok(vec![ctx.runtime.store.desired_commit_append(
            reserved.desired_set_ref(),
            pending.revision(),
            &pending.record_digest().to_hex(),
            &sha256_hex(&transition_json),
        )?])
    });
    match outcome {
        Ok(transition) => check_desired_transition(&transition, event)?,
        Err(ProcessWithError::Process(e)) => return Err(e.into()),
        Err(ProcessWithError::Extras(e)) => return Err(e),
        Err(ProcessWithError::ExtrasAppend(e)) => {
            return Err(ServiceError::Internal(format!(
                "the desired-set commit mark was refused: {e}"
            )));
        }
    }
    if mark_skipped {
        return Err(FailPointFired::after(
            failpoints::DESIRED_BEFORE_MARK,
            "engine committed, store mark skipped",
        )
        .into());
    }
    let marked = ctx
        .runtime
        .store
        .load_desired_set(reserved.desired_set_ref())?;
    if !marked.is_committed() || marked.journal_revision() != Some(target) {
        return Err(ServiceError::Identity(
            "managed desired-set journal record is unavailable",
        ));
    }
    Ok(marked)
}

// ------------------------------------------------------------------------------------------------
// Heads and summaries (spec/service.md §6)
// ------------------------------------------------------------------------------------------------

/// The journal record at the snapshot's head, checked against the snapshot.
pub(crate) fn authoritative_head(
    engine: &Engine,
    snapshot: &Snapshot,
    scope: &ctx_model::ScopeRef,
) -> Result<JournaledEvent, ServiceError> {
    let Some(rec) = engine.journaled_event(scope, snapshot.revision())? else {
        return Err(ServiceError::Identity(
            "managed desired-set current head is unavailable",
        ));
    };
    if snapshot.head_record_digest().map(|d| d.to_hex()) != Some(rec.record_digest.clone()) {
        return Err(ServiceError::Identity(
            "managed desired-set current head digest does not match its snapshot",
        ));
    }
    Ok(rec)
}

pub(crate) fn head_action_summaries(
    engine: &Engine,
    snapshot: &Snapshot,
) -> Result<Vec<ActionSummary>, ServiceError> {
    let Some(state) = snapshot.state() else {
        return Err(ServiceError::Identity(
            "managed desired-set current state is unavailable",
        ));
    };
    let head = authoritative_head(engine, snapshot, &state.scope)?;
    let t = &head.transition;
    if !t.scope.same_session(&state.scope)
        || t.to_revision != snapshot.revision()
        || t.actions.len() > ACTION_SUMMARIES_MAX
    {
        return Err(ServiceError::Identity(
            "managed desired-set current actions exceed their bound",
        ));
    }
    Ok(t.actions.iter().map(ActionSummary::of).collect())
}

// ------------------------------------------------------------------------------------------------
// Automatic installs (spec/service.md §6)
// ------------------------------------------------------------------------------------------------

fn is_install_authority(row: &Json) -> bool {
    row.get("authority").and_then(|a| a.get_str("type")) == Some("install")
}

/// spec/service.md §6: the install must be an exact member of the desired plan.
fn desired_install_selection(
    state: &EngineState,
    desired: &DesiredSetRecord,
    action: &HostAction,
) -> Result<Json, ServiceError> {
    let not_member = ServiceError::Identity(
        "managed physical install is not an exact member of the desired plan",
    );
    let Some(id) = action.entity_id.as_deref() else {
        return Err(not_member);
    };
    let Some(capability) = state.capability(id) else {
        return Err(not_member);
    };
    if !desired.capability_ids().iter().any(|d| d == id)
        || capability.plan_id != desired.plan_id()
        || action.kind != ActionKind::InstallCapability
        || action.scope != desired.event().scope
        || action.source_digest.as_deref() != Some(capability.source_digest())
    {
        return Err(not_member);
    }
    if capability.selection.as_obj().is_none() {
        return Err(ServiceError::Identity(
            "managed physical install selection was substituted",
        ));
    }
    Ok(capability.selection.clone())
}

/// spec/service.md §6.
fn check_binding(
    binding: &InstallExecutionBinding,
    row: &Json,
    action: &HostAction,
) -> Result<(), ServiceError> {
    let descriptor = descriptor_of(row);
    if !is_install_authority(row)
        || descriptor.get_str("installer_id") != Some(binding.driver_id.as_str())
        || action.payload.get_str("installer_digest") != Some(binding.driver_digest.as_str())
    {
        return Err(ServiceError::Identity(
            "managed install execution binding does not match its journal authority",
        ));
    }
    Ok(())
}

/// spec/service.md §7: the consent head must not have moved.
pub(crate) fn require_consent_head_unchanged(
    engine: &Engine,
    expected: &Snapshot,
    install_action: &HostAction,
) -> Result<(), ServiceError> {
    let drift = ServiceError::HeadDrift(
        "managed consent head changed during challenge publication; any published broker row is \
         stale and cannot authorize current state",
    );
    let now = engine.snapshot(&install_action.scope)?;
    let (Some(a), Some(b)) = (expected.state(), now.state()) else {
        return Err(drift);
    };
    let mut fresh_plan = b.committed_plan.clone();
    if crate::failpoint::failpoint_fired(failpoints::CONSENT_SNAPSHOT_PLAN_DRIFT)
        && let Some(plan) = fresh_plan.as_mut()
    {
        plan.plan_id = "plan-race-b".to_owned();
    }
    if now.revision() != expected.revision()
        || now.head_record_digest() != expected.head_record_digest()
        || a.committed_plan != fresh_plan
        || a.pending_consents != b.pending_consents
        || b.pending_consents.len() != 1
        || b.pending_consents[0].install_action != *install_action
    {
        return Err(drift);
    }
    Ok(())
}

/// The `ctx-auto-install:` decision event (spec/service.md §6).
fn automatic_decision_event(
    desired: &DesiredSetRecord,
    head: &JournaledEvent,
    request: &HostAction,
    install_action: &HostAction,
    binding: &InstallExecutionBinding,
    payload: &Json,
) -> Result<EngineEvent, ServiceError> {
    let lacks = ServiceError::Identity("automatic install lacks durable desired authority");
    let desired_event = desired.event();
    let (Some(revision), Some(record_digest)) =
        (desired.journal_revision(), desired.journal_record_digest())
    else {
        return Err(lacks);
    };
    if request.scope != desired_event.scope || install_action.scope != desired_event.scope {
        return Err(lacks);
    }
    let event_id = format!(
        "ctx-auto-install:{}",
        cja_digest(&Json::object([
            ("binding_digest", Json::str(binding.binding_digest())),
            (
                "desired_event_content_digest",
                Json::str(desired_event.content_digest()),
            ),
            ("desired_event_id", Json::str(&desired_event.event_id)),
            ("desired_journal_record_digest", Json::str(record_digest)),
            ("desired_journal_revision", Json::from(revision)),
            ("desired_set_ref", Json::str(desired.desired_set_ref())),
            ("head_event_id", Json::str(&head.reducer_event.event_id)),
            ("head_record_digest", Json::str(&head.record_digest)),
            ("head_revision", Json::from(head.revision)),
            (
                "install_action_content_digest",
                Json::str(install_action.content_digest()),
            ),
            ("install_action_id", Json::str(&install_action.action_id)),
            (
                "install_action_precondition_revision",
                Json::from(install_action.precondition_revision),
            ),
            ("payload", payload.clone()),
            (
                "request_action_content_digest",
                Json::str(request.content_digest()),
            ),
            ("request_action_id", Json::str(&request.action_id)),
            ("schema", Json::str("ctx.managed-auto-install-decision.v1")),
        ]))
    );
    let mut event = envelope_event(
        desired_event,
        &event_id,
        EventKind::UserDecision,
        head.revision,
        &desired_event.occurred_at,
    );
    event.payload = payload.clone();
    event.causation_id = Some(request.action_id.clone());
    event
        .validate()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    Ok(event)
}

/// spec/service.md §6: the committed grant must be exactly reproducible with the current
/// actuator binding ("captured actuator").
fn check_committed_automatic_binding(
    engine: &Engine,
    desired: &DesiredSetRecord,
    install_action: &HostAction,
    binding: &InstallExecutionBinding,
) -> Result<(), ServiceError> {
    let scope = &install_action.scope;
    let grant_revision = install_action.precondition_revision;
    let Some(grant) = engine.journaled_event(scope, grant_revision)? else {
        return Err(ServiceError::Identity(
            "managed pending install has no exact committed decision",
        ));
    };
    if grant.reducer_event.kind != EventKind::UserDecision {
        return Err(ServiceError::Identity(
            "managed pending install has no exact committed decision",
        ));
    }
    if grant.reducer_event.payload.get_str("decision_basis") != Some("preapproved-policy") {
        return Err(ServiceError::Identity(
            "managed automatic execution cannot consume an interactive install decision",
        ));
    }
    let no_request =
        ServiceError::Identity("committed automatic install has no exact consent request");
    let Some(consent_head) = grant_revision
        .checked_sub(1)
        .map(|r| engine.journaled_event(scope, r))
        .transpose()?
        .flatten()
    else {
        return Err(no_request);
    };
    let requests = consent_requests(&consent_head.transition.actions, install_action);
    let [request] = requests.as_slice() else {
        return Err(no_request);
    };
    if consent_head.transition.to_revision != consent_head.revision
        || install_action.precondition_revision != consent_head.revision + 1
    {
        return Err(no_request);
    }
    let rebuilt = automatic_decision_event(
        desired,
        &consent_head,
        request,
        install_action,
        binding,
        &grant.reducer_event.payload,
    )?;
    if rebuilt.event_id != grant.reducer_event.event_id
        || rebuilt.content_digest() != grant.source_event_content_digest
    {
        return Err(ServiceError::Identity(
            "committed automatic install binding no longer matches the captured actuator",
        ));
    }
    Ok(())
}

/// spec/service.md §6: retires an expired, never-claimed automatic install exactly once. `None`
/// when it is claimed or not expired.
fn retire_expired_install(
    ctx: &Ctx<'_>,
    desired: &DesiredSetRecord,
    install_action: &HostAction,
) -> Result<Option<Snapshot>, ServiceError> {
    let engine = ctx.engine();
    let Some(expires_at) = install_action.expires_at.as_deref() else {
        return Err(ServiceError::Identity(
            "automatic install action has no exact expiry",
        ));
    };
    let identity = Json::object([
        (
            "action_content_digest",
            Json::str(install_action.content_digest()),
        ),
        ("action_id", Json::str(&install_action.action_id)),
        ("action_kind", Json::str(install_action.kind.as_str())),
        (
            "action_precondition_revision",
            Json::from(install_action.precondition_revision),
        ),
        ("reason", Json::str("expired")),
    ]);
    let event_id = format!(
        "ctx-automatic-install-action-expired:{}",
        cja_digest(&Json::object([
            ("desired_set_ref", Json::str(desired.desired_set_ref())),
            (
                "install_action_content_digest",
                Json::str(install_action.content_digest()),
            ),
            ("payload", identity.clone()),
            (
                "schema",
                Json::str("ctx.managed-automatic-install-action-expiry.v1"),
            ),
        ]))
    );
    let mut event = envelope_event(
        desired.event(),
        &event_id,
        EventKind::ActionExpired,
        install_action.precondition_revision,
        expires_at,
    );
    event.payload = identity;
    event.causation_id = Some(install_action.action_id.clone());
    let expiry_revision = install_action.precondition_revision + 1;
    for _ in 0..3 {
        let current = ctx.snapshot()?;
        let committed = if current.revision() >= expiry_revision {
            engine.journaled_event(&event.scope, expiry_revision)?
        } else {
            None
        };
        if let Some(rec) = committed.filter(|rec| {
            rec.reducer_event.event_id == event.event_id
                && rec.source_event_content_digest == event.content_digest()
        }) {
            check_expiry_transition(&rec.transition, &event, install_action)?;
            let fresh = ctx.snapshot()?;
            if fresh.state().is_some_and(|s| {
                s.pending_effect_by_action(&install_action.action_id)
                    .is_some()
            }) {
                return Err(ServiceError::Identity(
                    "committed automatic install expiry retained physical authority",
                ));
            }
            return Ok(Some(fresh));
        }
        let status = engine
            .install_execution_status(install_action)
            .map_err(|e| ServiceError::Execution(e.to_string()))?;
        let now =
            ctx.service.config.clock.now().map_err(|_| {
                ServiceError::Identity("trusted install action clock is unavailable")
            })?;
        let Ok(expiry) = UtcMicros::parse(expires_at) else {
            return Err(ServiceError::Identity(
                "managed install action has no valid expiry",
            ));
        };
        if status.claimed || now < expiry {
            return Ok(None);
        }
        if current.revision() != install_action.precondition_revision {
            return Err(ServiceError::HeadDrift(
                "expired automatic install no longer owns the exact journal head",
            ));
        }
        match engine.process(&event, None) {
            Ok(t) => check_expiry_transition(&t, &event, install_action)?,
            Err(ProcessError::RevisionConflict { .. }) => {}
            Err(ProcessError::Effect { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(ServiceError::HeadDrift(
        "expired automatic install no longer owns the exact journal head",
    ))
}

fn check_expiry_transition(
    t: &Transition,
    event: &EngineEvent,
    install_action: &HostAction,
) -> Result<(), ServiceError> {
    if t.event_id != event.event_id
        || t.scope != event.scope
        || t.from_revision != event.expected_revision
        || Some(t.to_revision) != event.expected_revision.checked_add(1)
        || t.actions
            .iter()
            .any(|a| a.action_id == install_action.action_id)
    {
        return Err(ServiceError::Identity(
            "install action expiry transition was substituted",
        ));
    }
    Ok(())
}

/// spec/service.md §6: drives pre-approved installs of the committed choice, at most one install
/// per desired capability per call. Returns the current snapshot and the ids whose install is
/// indeterminate.
fn advance_automatic_installs(
    ctx: &Ctx<'_>,
    snapshot: Snapshot,
    desired: &DesiredSetRecord,
) -> Result<(Snapshot, Vec<String>), ServiceError> {
    if !desired.is_committed() {
        return Err(ServiceError::Identity(
            "automatic installation requires a committed choice",
        ));
    }
    let service = ctx.service;
    let engine = ctx.engine();
    let mut current = snapshot;
    for _ in 0..desired.capability_ids().len() {
        let Some(state) = current.state() else {
            return Err(ServiceError::Identity(
                "automatic installation state is unavailable",
            ));
        };
        let (install_action, row, binding) = if !state.pending_effects.is_empty() {
            let installs: Vec<_> = state
                .pending_effects
                .iter()
                .filter(|e| e.effect == EffectKind::Install)
                .collect();
            if installs.is_empty() {
                break;
            }
            if state.pending_effects.len() != 1 || installs.len() != 1 {
                return Err(ServiceError::Identity(
                    "managed physical installation must remain globally serialized",
                ));
            }
            let install_action = installs[0].action.clone();
            let row = desired_install_selection(state, desired, &install_action)?;
            if let Some(retired) = retire_expired_install(ctx, desired, &install_action)? {
                current = retired;
                break;
            }
            let binding = service
                .actuators
                .resolve_binding(&install_action, descriptor_of(&row))?;
            (install_action, row, binding)
        } else if !state.pending_consents.is_empty() {
            let [consent] = state.pending_consents.as_slice() else {
                return Err(ServiceError::Identity(
                    "managed automatic consent must remain globally serialized",
                ));
            };
            let install_action = consent.install_action.clone();
            let row = desired_install_selection(state, desired, &install_action)?;
            let request =
                consent_request_at_head(engine, &current, &consent.consent_id, &install_action)?;
            if !is_install_authority(&row) {
                return Err(ServiceError::Identity(
                    "managed automatic consent has no install planning authority",
                ));
            }
            let policy = service.current_policy()?;
            let policy_digest = policy.policy_digest();
            if request.payload.get_str("policy_snapshot_digest") != Some(policy_digest.as_str()) {
                break;
            }
            let directive = crate::policy::route_install_consent_request(
                &request,
                &row,
                descriptor_of(&row),
                &policy,
            )
            .map_err(|e| ServiceError::Routing(e.to_string()))?;
            let Some(grant_payload) = directive.automatic_grant_payload() else {
                break;
            };
            let persisted = match &service.policy_store {
                Some(store) if store.has_persisted()? => Some(store),
                _ => None,
            };
            let Some(policy_store) = persisted else {
                return Err(ServiceError::Identity(
                    "automatic installation requires an explicitly persisted policy",
                ));
            };
            let binding = service
                .actuators
                .resolve_binding(&install_action, descriptor_of(&row))?;
            crate::failpoint::fail_point!(failpoints::AUTO_AFTER_BINDING);
            check_binding(&binding, &row, &install_action)?;
            require_consent_head_unchanged(engine, &current, &install_action)?;
            let head = authoritative_head(engine, &current, &install_action.scope)?;
            let decision = automatic_decision_event(
                desired,
                &head,
                &request,
                &install_action,
                &binding,
                &grant_payload,
            )?;
            // The policy is held across the commit: a policy changed since routing refuses the
            // grant before anything is written.
            let held = policy_store.hold(&policy_digest)?;
            let granted = match engine.process_with(&decision, None, |_| {
                held.assert_current()?;
                Ok::<Vec<StreamAppend>, ServiceError>(Vec::new())
            }) {
                Ok(t) => t,
                Err(ProcessWithError::Process(e)) => return Err(e.into()),
                Err(ProcessWithError::Extras(e)) => return Err(e),
                Err(ProcessWithError::ExtrasAppend(e)) => {
                    return Err(ServiceError::Internal(e.to_string()));
                }
            };
            drop(held);
            if granted.event_id != decision.event_id
                || granted.scope != decision.scope
                || granted.from_revision != decision.expected_revision
                || granted.to_revision != decision.expected_revision + 1
                || granted.actions.as_slice() != std::slice::from_ref(&install_action)
            {
                return Err(ServiceError::Identity(
                    "managed automatic grant was substituted",
                ));
            }
            current = ctx.snapshot()?;
            if current.revision() != granted.to_revision
                || current.head_record_digest().is_none()
                || current.state().is_none()
            {
                return Err(ServiceError::HeadDrift(
                    "managed automatic grant is not the authoritative current head",
                ));
            }
            (install_action, row, binding)
        } else {
            break;
        };
        // The shared execution tail.
        check_binding(&binding, &row, &install_action)?;
        check_committed_automatic_binding(engine, desired, &install_action, &binding)?;
        let Some(policy_digest) = install_action
            .payload
            .get_str("policy_snapshot_digest")
            .filter(|d| is_sha(d))
            .map(str::to_owned)
        else {
            return Err(ServiceError::Identity(
                "managed install action has no exact policy digest",
            ));
        };
        crate::failpoint::fail_point!(failpoints::AUTO_BEFORE_EXECUTE);
        let authority = InstallAuthority {
            action: &install_action,
            selection_row: &row,
            descriptor: descriptor_of(&row),
            catalog_snapshot_digest: ctx.composition.catalog_snapshot_digest(),
            policy_digest: &policy_digest,
        };
        let report = match execute_install(engine, &service.actuators, &authority, &binding) {
            Ok(report) => report,
            Err(ExecuteError::ClaimExpired) => {
                match retire_expired_install(ctx, desired, &install_action)? {
                    Some(retired) => {
                        current = retired;
                        break;
                    }
                    None => {
                        return Err(ServiceError::Authorize(AuthorizeError::ClaimExpired {
                            effect: ctx_projections::engine::GuardEffect::Install,
                            action_id: install_action.action_id.clone(),
                        }));
                    }
                }
            }
            Err(ExecuteError::Service(e)) => return Err(e),
        };
        crate::failpoint::fail_point!(failpoints::AUTO_AFTER_EXECUTE);
        if report.execution_binding_digest != binding.binding_digest() {
            return Err(ServiceError::Identity(
                "managed install execution report substituted its physical binding",
            ));
        }
        current = ctx.snapshot()?;
        check_install_result(
            &current,
            &install_action,
            &row,
            report.outcome,
            report.settled,
        )?;
        if report.outcome == InstallOutcome::Indeterminate {
            let Some(id) = install_action.entity_id.clone() else {
                return Err(ServiceError::Identity(
                    "indeterminate managed install lost its capability identity",
                ));
            };
            return Ok((current, vec![id]));
        }
    }
    Ok((current, Vec::new()))
}

/// spec/service.md §6, the checks that read the state (receipt anchoring is the engine's).
pub(crate) fn check_install_result(
    current: &Snapshot,
    action: &HostAction,
    row: &Json,
    outcome: InstallOutcome,
    settled: bool,
) -> Result<(), ServiceError> {
    let lost = ServiceError::Identity("managed install result lost its planned capability");
    let Some(state) = current.state() else {
        return Err(lost);
    };
    let Some(capability) = action
        .entity_id
        .as_deref()
        .and_then(|id| state.capability(id))
    else {
        return Err(lost);
    };
    if !is_install_authority(row) {
        return Err(lost);
    }
    let pending = state
        .pending_effects
        .iter()
        .filter(|e| e.action == *action)
        .count();
    match outcome {
        InstallOutcome::Indeterminate => {
            if settled || pending != 1 {
                return Err(ServiceError::Identity(
                    "indeterminate managed install is not durably pending",
                ));
            }
        }
        InstallOutcome::Applied => {
            if !settled || capability.installation != Installation::Installed || pending != 0 {
                return Err(ServiceError::Identity(
                    "applied managed install has no exact receipt-backed state",
                ));
            }
        }
        InstallOutcome::Failed => {
            let descriptor_digest = descriptor_of(row)
                .get_str("descriptor_digest")
                .unwrap_or_default();
            if !settled
                || capability.installation != Installation::Absent
                || !state
                    .blocked_install_descriptor_digests
                    .iter()
                    .any(|d| d == descriptor_digest)
                || pending != 0
            {
                return Err(ServiceError::Identity(
                    "failed managed install has no exact durable state",
                ));
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Status (spec/service.md §6.1)
// ------------------------------------------------------------------------------------------------

fn row_blocked(state: &EngineState, row: &Json) -> bool {
    row.get_str("install_descriptor_digest").is_some_and(|d| {
        state
            .blocked_install_descriptor_digests
            .iter()
            .any(|b| b == d)
    })
}

/// spec/service.md §6.1.
fn failed_desired_install_ids(
    current: &Snapshot,
    committed: &CommittedPlan,
    desired_ids: &[String],
) -> Vec<String> {
    let Some(state) = current.state() else {
        return Vec::new();
    };
    committed
        .capabilities
        .iter()
        .filter_map(|row| {
            let id = row.get_str("capability_id")?;
            let failed = desired_ids.iter().any(|d| d == id)
                && is_install_authority(row)
                && state
                    .capability(id)
                    .is_some_and(|c| c.installation == Installation::Absent)
                && row_blocked(state, row);
            failed.then(|| id.to_owned())
        })
        .collect()
}

/// spec/service.md §6.1: the first matching rule wins.
#[allow(clippy::too_many_arguments)]
fn desired_status(
    current: &Snapshot,
    committed: &CommittedPlan,
    desired: &DesiredSetRecord,
    indeterminate: &[String],
    drift: bool,
    failed: Vec<String>,
    actions: Vec<ActionSummary>,
    challenge: Option<super::result::ConsentChallengeProjection>,
) -> Result<DesiredResultParts, ServiceError> {
    let in_order = |ids: &dyn Fn(&str) -> bool| -> Vec<String> {
        desired
            .capability_ids()
            .iter()
            .filter(|id| ids(id))
            .cloned()
            .collect()
    };
    let parts = |deferred, status, reason_code, actions, challenge, failed| DesiredResultParts {
        deferred_capability_ids: deferred,
        failed_capability_ids: failed,
        status,
        reason_code,
        actions,
        challenge,
    };
    if !indeterminate.is_empty() {
        let deferred = in_order(&|id| indeterminate.iter().any(|i| i == id));
        return Ok(parts(
            deferred,
            status::LIFECYCLE_DEFERRED,
            Some(reason::AUTOMATIC_INSTALL_INDETERMINATE),
            actions,
            None,
            failed,
        ));
    }
    if challenge.is_some() {
        return Ok(parts(
            Vec::new(),
            status::CONSENT_REQUIRED,
            None,
            actions,
            challenge,
            failed,
        ));
    }
    let Some(state) = current.state() else {
        return Err(ServiceError::Identity(
            "managed desired-set state is unavailable",
        ));
    };
    if drift {
        let pending: Vec<&str> = state
            .pending_consents
            .iter()
            .filter_map(|c| c.install_action.entity_id.as_deref())
            .collect();
        let deferred = in_order(&|id| pending.contains(&id));
        return Ok(parts(
            deferred,
            status::LIFECYCLE_DEFERRED,
            Some(reason::POLICY_CHANGED),
            actions,
            None,
            failed,
        ));
    }
    let manual = in_order(&|id| {
        committed
            .row(id)
            .is_some_and(|r| r.get_str("actionability") == Some("manual"))
    });
    if !manual.is_empty() {
        return Ok(parts(
            manual,
            status::MANUAL_DEFERRED,
            Some(reason::MANUAL),
            actions,
            None,
            failed,
        ));
    }
    if !state.pending_effects.is_empty() || !actions.is_empty() {
        return Ok(parts(
            Vec::new(),
            status::EFFECT_PENDING,
            None,
            actions,
            None,
            failed,
        ));
    }
    if !failed.is_empty() {
        let deferred = failed.clone();
        return Ok(parts(
            deferred,
            status::LIFECYCLE_DEFERRED,
            Some(reason::AUTOMATIC_INSTALL_FAILED),
            actions,
            None,
            failed,
        ));
    }
    if !state.pending_consents.is_empty() {
        return Err(ServiceError::Identity(
            "managed desired-set pending consent has no prompt or automatic route",
        ));
    }
    let missing: Vec<String> = committed
        .capabilities
        .iter()
        .filter_map(|row| {
            let id = row.get_str("capability_id")?;
            let missing = desired.capability_ids().iter().any(|d| d == id)
                && is_install_authority(row)
                && !row_blocked(state, row)
                && state
                    .capability(id)
                    .is_some_and(|c| c.is_desired() && c.installation == Installation::Absent);
            missing.then(|| id.to_owned())
        })
        .collect();
    if !missing.is_empty() {
        return Ok(parts(
            missing,
            status::LIFECYCLE_DEFERRED,
            Some(reason::LIFECYCLE_AUTHORITY_MISSING),
            actions,
            None,
            failed,
        ));
    }
    Ok(parts(
        Vec::new(),
        status::RECONCILED,
        None,
        actions,
        None,
        failed,
    ))
}
