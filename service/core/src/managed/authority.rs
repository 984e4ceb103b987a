//! The journal authority of one published consent challenge (spec/service.md §10): who owns it, the
//! historical consent head it was issued at, the exact install action and request, and the events
//! the service builds from durable facts only — so that recovery rebuilds them byte for byte and
//! never mints a decision.

use ctx_model::{
    ActionKind, EngineEvent, EventKind, HostAction, InstallExecutionBinding, Installation, Json,
    cja_digest,
};
use ctx_projections::consent_store::{
    ChallengeInputs, InstallConsentChallenge, derive_install_consent_challenge,
};
use ctx_projections::engine::{Engine, JournaledEvent, ProcessError, Snapshot};
use ctx_projections::query_store::{DesiredSetRecord, QueryRecord, QueryStore, QueryStoreError};

use super::error::ServiceError;
use super::install::InstallActuators;
use super::reconcile::{exact_parent_plan, head_action_summaries};
use super::resolution::{ConsentResolutionResult, ResolvedChallenge, outcome};
use super::result::ConsentChallengeProjection;
use crate::policy::{InstallConsentPolicy, route_install_consent_request};

/// spec/service.md §10: the planned query and the committed desired choice that own a challenge.
pub(crate) fn consent_owner(
    store: &QueryStore,
    challenge: &InstallConsentChallenge,
) -> Result<(QueryRecord, DesiredSetRecord), ServiceError> {
    let no_owner = || ServiceError::Identity("install consent has no exact managed query owner");
    let parent = match store.planned_for_scope_plan(challenge.scope(), challenge.plan_id()) {
        Ok(p) => p,
        Err(QueryStoreError::NotFound { .. }) => return Err(no_owner()),
        Err(e) => return Err(e.into()),
    };
    let desired = match store.load_latest_desired_set(parent.query_ref()) {
        Ok(d) => d,
        Err(QueryStoreError::NotFound { .. }) => return Err(no_owner()),
        Err(e) => return Err(e.into()),
    };
    if !parent.is_planned() || parent.plan_id() != Some(challenge.plan_id()) {
        return Err(ServiceError::Identity(
            "install consent managed query owner is not exactly planned",
        ));
    }
    if !desired.is_committed()
        || desired.query_ref() != parent.query_ref()
        || desired.plan_id() != challenge.plan_id()
    {
        return Err(ServiceError::DesiredSuperseded(
            "install consent no longer belongs to the current desired plan",
        ));
    }
    Ok((parent, desired))
}

/// The authority of one challenge at the current head (spec/service.md §10).
#[derive(Debug)]
pub(crate) struct ConsentAuthority {
    pub desired: DesiredSetRecord,
    pub consent_head: JournaledEvent,
    pub current: Snapshot,
    pub request: HostAction,
    pub install_action: HostAction,
    pub row: Json,
    pub binding: Option<InstallExecutionBinding>,
}

impl PartialEq for ConsentAuthority {
    fn eq(&self, other: &ConsentAuthority) -> bool {
        self.desired.desired_set_ref() == other.desired.desired_set_ref()
            && self.consent_head == other.consent_head
            && self.current.revision() == other.current.revision()
            && self.current.head_record_digest() == other.current.head_record_digest()
            && self.request == other.request
            && self.install_action == other.install_action
            && self.row == other.row
            && self.binding == other.binding
    }
}

fn drift(message: &'static str) -> ServiceError {
    ServiceError::HeadDrift(message)
}

pub(crate) fn descriptor_of(row: &Json) -> &Json {
    row.get("authority")
        .and_then(|a| a.get("descriptor"))
        .unwrap_or(&Json::Null)
}

/// What [`consent_authority`] checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuthorityChecks<'a> {
    pub require_pending_head: bool,
    /// The current policy, when it must still produce the challenge's directive.
    pub policy: Option<&'a InstallConsentPolicy>,
    pub require_current_policy: bool,
    /// Resolve (and compare) the current execution binding through these actuators.
    pub actuators: Option<&'a InstallActuators>,
}

/// spec/service.md §10: rebuilds the challenge's authority from the journal and checks that it
/// still binds the parent's plan, the desired subset, the historical consent head and (when asked)
/// the current policy and physical target.
pub(crate) fn consent_authority(
    engine: &Engine,
    challenge: &InstallConsentChallenge,
    parent: &QueryRecord,
    desired: DesiredSetRecord,
    checks: AuthorityChecks<'_>,
) -> Result<ConsentAuthority, ServiceError> {
    let scope = challenge.scope();
    let current = engine.snapshot(scope)?;
    exact_parent_plan(&current, parent)?;
    if !desired
        .capability_ids()
        .iter()
        .any(|id| id == challenge.capability_id())
    {
        return Err(ServiceError::DesiredSuperseded(
            "install consent capability is no longer in the desired subset",
        ));
    }
    let head_revision = challenge
        .requested_action_precondition_revision()
        .checked_sub(1)
        .filter(|r| *r >= 1)
        .ok_or(ServiceError::Identity(
            "managed install journal revision is invalid",
        ))?;
    let Some(consent_head) = engine.journaled_event(scope, head_revision)? else {
        return Err(ServiceError::Identity(
            "managed install journal authority is unavailable",
        ));
    };
    let historical_binds =
        drift("install consent historical head no longer binds the managed plan");
    let Some(historical) = engine.state_at(scope, head_revision)? else {
        return Err(historical_binds);
    };
    let current_plan = current
        .state()
        .and_then(|s| s.committed_plan.as_ref())
        .map(|p| p.plan_id.as_str());
    let [pending] = historical.pending_consents.as_slice() else {
        return Err(historical_binds);
    };
    if historical.scope != *scope
        || historical
            .committed_plan
            .as_ref()
            .map(|p| p.plan_id.as_str())
            != Some(challenge.plan_id())
        || current_plan != Some(challenge.plan_id())
    {
        return Err(historical_binds);
    }
    let install_action = pending.install_action.clone();
    if pending.consent_id != challenge.challenge_id()
        || install_action.consent_id.as_deref() != Some(challenge.challenge_id())
        || install_action.action_id != challenge.requested_action_id()
        || install_action.content_digest() != challenge.requested_action_content_digest()
        || install_action.precondition_revision
            != challenge.requested_action_precondition_revision()
    {
        return Err(drift(
            "install consent historical action identity was substituted",
        ));
    }
    let Some(capability) = install_action
        .entity_id
        .as_deref()
        .and_then(|id| historical.capability(id))
    else {
        return Err(ServiceError::Identity(
            "install consent historical capability authority is unavailable",
        ));
    };
    if capability.authority_type() != "install" {
        return Err(ServiceError::Identity(
            "install consent historical selection has no install authority",
        ));
    }
    let row = capability.selection.clone();
    let request = consent_request(&consent_head, &install_action)?;
    if checks.require_current_policy {
        let Some(policy) = checks.policy else {
            return Err(ServiceError::Identity(
                "current install policy authority is unavailable",
            ));
        };
        if policy.policy_digest() != challenge.policy_snapshot_digest() {
            return Err(drift(
                "install policy changed after consent challenge publication",
            ));
        }
        let directive = route_install_consent_request(&request, &row, descriptor_of(&row), policy)
            .map_err(|e| ServiceError::Routing(e.to_string()))?;
        if !directive.requires_prompt()
            || directive.consent_id() != challenge.challenge_id()
            || directive.policy_snapshot_digest() != challenge.policy_snapshot_digest()
        {
            return Err(drift(
                "current install policy no longer produces the exact consent directive",
            ));
        }
    }
    check_historical_challenge(challenge, &install_action, &row)?;
    let binding = match checks.actuators {
        None => None,
        Some(actuators) => {
            let binding = actuators.resolve_binding(&install_action, descriptor_of(&row))?;
            let rederived = derive_install_consent_challenge(&ChallengeInputs {
                consent_id: challenge.challenge_id(),
                plan_id: challenge.plan_id(),
                catalog_snapshot_digest: challenge.catalog_snapshot_digest(),
                policy_snapshot_digest: challenge.policy_snapshot_digest(),
                selection_row: &row,
                install_action: &install_action,
                execution_binding: &binding,
                workspace_identity_digest: challenge.workspace_identity_digest(),
                release_root_digest: challenge.release_root_digest(),
                audience: challenge.audience(),
            })
            .ok();
            if rederived.as_ref() != Some(challenge) {
                return Err(drift(
                    "current install target or historical authority no longer matches consent",
                ));
            }
            Some(binding)
        }
    };
    let authority = ConsentAuthority {
        desired,
        consent_head,
        current,
        request,
        install_action,
        row,
        binding,
    };
    if checks.require_pending_head {
        require_pending_consent_head(&authority)?;
    }
    Ok(authority)
}

/// spec/service.md §10: the challenge names exactly the historical authority.
fn check_historical_challenge(
    challenge: &InstallConsentChallenge,
    install_action: &HostAction,
    row: &Json,
) -> Result<(), ServiceError> {
    let descriptor = descriptor_of(row);
    let material = row
        .get("authority")
        .and_then(|a| a.get("result_material"))
        .and_then(|m| m.get_str("identity_digest"));
    let same = row.get_str("capability_id") == Some(challenge.capability_id())
        && row.get_str("kind") == Some(challenge.kind())
        && row.get_str("catalog_entry_digest") == Some(challenge.source_digest())
        && install_action.catalog_snapshot_id.as_deref()
            == Some(challenge.catalog_snapshot_digest())
        && install_action.plan_id.as_deref() == Some(challenge.plan_id())
        && descriptor.get_str("plan_digest") == Some(challenge.install_plan_digest())
        && descriptor.get_str("descriptor_digest") == Some(challenge.descriptor_digest())
        && install_action.payload.get_str("policy_snapshot_digest")
            == Some(challenge.policy_snapshot_digest())
        && install_action.action_id == challenge.requested_action_id()
        && install_action.kind.as_str() == challenge.requested_action_kind()
        && install_action.content_digest() == challenge.requested_action_content_digest()
        && install_action.precondition_revision
            == challenge.requested_action_precondition_revision()
        && material == Some(challenge.material_identity_digest())
        && ctx_projections::consent_store::install_consent_selection_digest(row)
            == challenge.selection_digest()
        && install_action.expires_at.as_deref() == Some(challenge.expires_at());
    if !same {
        return Err(drift(
            "historical consent challenge no longer matches its exact journal authority",
        ));
    }
    Ok(())
}

/// True when `a` is the `RequestConsent` that asks for exactly `install_action` (same consent,
/// capability and requested action id, content digest and precondition revision).
pub(crate) fn requests_install(a: &HostAction, install_action: &HostAction) -> bool {
    a.kind == ActionKind::RequestConsent
        && a.consent_id == install_action.consent_id
        && a.entity_id == install_action.entity_id
        && a.payload.get_str("requested_action_id") == Some(install_action.action_id.as_str())
        && a.payload.get_str("requested_action_content_digest")
            == Some(install_action.content_digest().as_str())
        && a.payload.get("requested_action_precondition_revision")
            == Some(&Json::from(install_action.precondition_revision))
}

/// The `RequestConsent` actions of `actions` that ask for `install_action`.
pub(crate) fn consent_requests<'a>(
    actions: &'a [HostAction],
    install_action: &HostAction,
) -> Vec<&'a HostAction> {
    actions
        .iter()
        .filter(|a| requests_install(a, install_action))
        .collect()
}

/// The unique `RequestConsent` of the consent head's transition that asks for `install_action`.
fn consent_request(
    consent_head: &JournaledEvent,
    install_action: &HostAction,
) -> Result<HostAction, ServiceError> {
    match consent_requests(&consent_head.transition.actions, install_action).as_slice() {
        [request] if install_action.precondition_revision == consent_head.revision + 1 => {
            Ok((*request).clone())
        }
        _ => Err(ServiceError::Identity(
            "committed automatic install has no exact consent request",
        )),
    }
}

/// spec/service.md §10.
pub(crate) fn require_pending_consent_head(a: &ConsentAuthority) -> Result<(), ServiceError> {
    let ok = a.current.state().is_some_and(|s| {
        s.pending_consents.len() == 1 && s.pending_consents[0].install_action == a.install_action
    }) && a.current.revision() == a.consent_head.revision
        && a.current.head_record_digest().map(|d| d.to_hex())
            == Some(a.consent_head.record_digest.clone());
    if !ok {
        return Err(drift(
            "install consent is not the exact current pending journal head",
        ));
    }
    Ok(())
}

/// The eight-key `UserDecision` payload of an interactive decision on `install_action`.
pub(crate) fn interactive_payload(
    challenge: &InstallConsentChallenge,
    install_action: &HostAction,
    decision: &str,
) -> Json {
    Json::object([
        ("consent_id", Json::str(challenge.challenge_id())),
        ("decision", Json::str(decision)),
        ("decision_basis", Json::str("interactive")),
        (
            "policy_snapshot_digest",
            Json::str(challenge.policy_snapshot_digest()),
        ),
        ("requested_action_id", Json::str(&install_action.action_id)),
        (
            "requested_action_kind",
            Json::str(install_action.kind.as_str()),
        ),
        (
            "requested_action_content_digest",
            Json::str(install_action.content_digest()),
        ),
        (
            "requested_action_precondition_revision",
            Json::from(install_action.precondition_revision),
        ),
    ])
}

/// The durable decision identity a broker record carries (spec/service.md §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecisionIdentity {
    pub decision: String,
    pub principal_digest: String,
    pub authenticator_id: String,
    pub audience: String,
    pub assertion_nonce_digest: String,
    pub decision_issued_at: String,
    pub decision_expires_at: String,
}

/// A service-built event with the desired event's envelope.
pub(crate) fn envelope_event(
    desired: &EngineEvent,
    event_id: &str,
    kind: EventKind,
    expected_revision: u64,
    occurred_at: &str,
) -> EngineEvent {
    let mut event = EngineEvent::bare(
        event_id,
        kind,
        desired.scope.clone(),
        expected_revision,
        occurred_at,
    );
    event.privacy = desired.privacy;
    event.correlation_id = desired.correlation_id.clone();
    event.engine_version = desired.engine_version.clone();
    event.planner_version = desired.planner_version.clone();
    event.policy_version = desired.policy_version.clone();
    event.host_descriptor_digest = desired.host_descriptor_digest.clone();
    event.catalog_snapshot_digest = desired.catalog_snapshot_digest.clone();
    event.semantic_model_digest = desired.semantic_model_digest.clone();
    event.semantic_index_digest = desired.semantic_index_digest.clone();
    event.work_signature = desired.work_signature.clone();
    event.random_seed = desired.random_seed.clone();
    event
}

/// The `ctx-interactive-install:` decision event (spec/service.md §10), built from durable facts
/// only: recovery rebuilds it byte for byte.
pub(crate) fn interactive_decision_event(
    challenge: &InstallConsentChallenge,
    authority: &ConsentAuthority,
    identity: &DecisionIdentity,
) -> Result<EngineEvent, ServiceError> {
    let lacks = ServiceError::Identity(
        "authenticated consent record lacks its exact durable decision identity",
    );
    if identity.decision != "granted" && identity.decision != "denied" {
        return Err(lacks);
    }
    let desired = &authority.desired;
    let (Some(revision), Some(record_digest)) =
        (desired.journal_revision(), desired.journal_record_digest())
    else {
        return Err(lacks);
    };
    let payload = interactive_payload(challenge, &authority.install_action, &identity.decision);
    let head = &authority.consent_head;
    let event_id = format!(
        "ctx-interactive-install:{}",
        cja_digest(&Json::object([
            (
                "assertion_nonce_digest",
                Json::str(&identity.assertion_nonce_digest),
            ),
            ("audience", Json::str(&identity.audience)),
            ("authenticator_id", Json::str(&identity.authenticator_id)),
            (
                "binding_digest",
                Json::str(challenge.execution_binding_digest())
            ),
            ("challenge_digest", Json::str(challenge.challenge_digest())),
            (
                "decision_expires_at",
                Json::str(&identity.decision_expires_at),
            ),
            (
                "decision_issued_at",
                Json::str(&identity.decision_issued_at)
            ),
            (
                "desired_event_content_digest",
                Json::str(desired.event().content_digest()),
            ),
            ("desired_event_id", Json::str(&desired.event().event_id)),
            ("desired_journal_record_digest", Json::str(record_digest)),
            ("desired_journal_revision", Json::from(revision)),
            ("desired_set_ref", Json::str(desired.desired_set_ref())),
            ("head_event_id", Json::str(&head.reducer_event.event_id)),
            ("head_record_digest", Json::str(&head.record_digest)),
            ("head_revision", Json::from(head.revision)),
            (
                "install_action_content_digest",
                Json::str(authority.install_action.content_digest()),
            ),
            (
                "install_action_id",
                Json::str(&authority.install_action.action_id),
            ),
            ("payload", payload.clone()),
            ("principal_digest", Json::str(&identity.principal_digest)),
            (
                "request_action_content_digest",
                Json::str(authority.request.content_digest()),
            ),
            ("request_action_id", Json::str(&authority.request.action_id)),
            (
                "schema",
                Json::str("ctx.managed-interactive-install-decision.v1"),
            ),
        ]))
    );
    let mut event = envelope_event(
        desired.event(),
        &event_id,
        EventKind::UserDecision,
        head.revision,
        &identity.decision_issued_at,
    );
    event.payload = payload;
    event.causation_id = Some(authority.request.action_id.clone());
    event
        .validate()
        .map_err(|e| ServiceError::Invalid(e.to_string()))?;
    Ok(event)
}

/// A consent resolution result built from the current head (spec/service.md §1, §6).
pub(crate) fn resolution(
    engine: &Engine,
    challenge: &InstallConsentChallenge,
    current: &Snapshot,
    result: &'static str,
    reason_code: &str,
    next: bool,
) -> Result<ConsentResolutionResult, ServiceError> {
    let actions = head_action_summaries(engine, current)?;
    let digest = current
        .head_record_digest()
        .map(|d| d.to_hex())
        .unwrap_or_default();
    ConsentResolutionResult::new(
        &ResolvedChallenge {
            challenge_digest: challenge.challenge_digest(),
            capability_id: challenge.capability_id(),
            kind: challenge.kind(),
        },
        result,
        reason_code,
        next.then(|| ConsentChallengeProjection::of(challenge)),
        actions,
        current.revision(),
        &digest,
    )
}

/// spec/service.md §10: where a settled grant's capability stands.
pub(crate) fn classify_settled_install(
    engine: &Engine,
    challenge: &InstallConsentChallenge,
    current: &Snapshot,
    row: &Json,
    reported: bool,
) -> Result<ConsentResolutionResult, ServiceError> {
    let unavailable = ServiceError::Identity("settled install capability state is unavailable");
    let Some(state) = current.state() else {
        return Err(unavailable);
    };
    let Some(capability) = state.capability(challenge.capability_id()) else {
        return Err(unavailable);
    };
    if capability.authority_type() != "install" {
        return Err(unavailable);
    }
    let blocked = descriptor_of(row)
        .get_str("descriptor_digest")
        .is_some_and(|d| {
            state
                .blocked_install_descriptor_digests
                .iter()
                .any(|b| b == d)
        });
    if capability.installation == Installation::Installed {
        if capability.is_active() {
            return resolution(
                engine,
                challenge,
                current,
                outcome::QUARANTINED,
                "installed-capability-is-already-active",
                false,
            );
        }
        return resolution(
            engine,
            challenge,
            current,
            outcome::INSTALLED_INACTIVE,
            "physical-install-applied",
            false,
        );
    }
    if blocked && capability.installation == Installation::Absent {
        return resolution(
            engine,
            challenge,
            current,
            outcome::INSTALL_FAILED,
            "physical-install-failed",
            false,
        );
    }
    if !reported {
        return Err(ServiceError::Identity(
            "settled grant has neither pending nor terminal install evidence",
        ));
    }
    Err(ServiceError::Identity(
        "interactive install outcome is not terminal",
    ))
}

/// Whether a process error is the engine's "already claimed" or event-id collision.
pub(crate) fn is_collision(e: &ProcessError) -> bool {
    matches!(e, ProcessError::EventIdCollision { .. })
}
