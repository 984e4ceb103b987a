//! Seed test 90: a task shift (a second planning event whose plan drops the active capability)
//! is summarized as a `DeactivateCapability` action that exposes no authority.

use std::sync::Arc;

use ctx_model::{
    ActionKind, CapabilityKind, EngineEvent, EventKind, INSTALL_RECEIPT_SCHEMA_V3,
    InstallExecutionBinding, Json, MATERIAL_RECEIPT_SCHEMA_V3, UtcMicros,
};
use ctx_projections::engine::{InstallOutcome, ManualClock};
use ctx_service::{ActionSummary, IngestInputs, QueryRequest, open_engine_composition};

use super::fixture::{self, Options, digest, observation_payload, setup_with, surrogate};

/// The composition's trusted clock: the seed's `trusted_utc_now` of 2026-08-03 12:01 UTC, one
/// minute after the service's own clock ([`fixture::NOW`]).
const COMPOSITION_NOW: &str = "2026-08-03T12:01:00Z";

/// The seed's `InstallConsentPolicy.safe_default().policy_digest`. The Rust port has no install
/// consent policy type yet (it arrives with the consent broker); the engine only requires one
/// exact SHA-256 digest that the desired set, the decision and the install claim agree on, so a
/// fixed digest stands in for it.
fn safe_default_policy_digest() -> String {
    digest("install-consent-policy-safe-default")
}

/// `replace(original, event_id=..., kind=..., expected_revision=..., payload=...)`.
fn derived(
    original: &EngineEvent,
    event_id: &str,
    kind: EventKind,
    expected_revision: u64,
    payload: Json,
) -> EngineEvent {
    let mut event = original.clone();
    event.event_id = event_id.to_owned();
    event.kind = kind;
    event.expected_revision = expected_revision;
    event.payload = payload;
    event
}

fn field(value: &Json, key: &str) -> Json {
    value
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("{key} is present"))
}

/// The receipt identity fields every `ActionApplied` carries, plus its verification.
fn receipt_payload(action: &ctx_model::HostAction, verification: Json) -> Json {
    Json::object([
        ("action_id", Json::str(&action.action_id)),
        ("action_kind", Json::str(action.kind.as_str())),
        ("action_content_digest", Json::str(action.content_digest())),
        (
            "action_precondition_revision",
            Json::from(action.precondition_revision),
        ),
        ("verification", verification),
    ])
}

/// Ported with the nearest public equivalents of the seed's internal seams:
///
/// - `open_managed_engine_composition(...)` with the setup's ports is
///   [`open_engine_composition`] on the service's data directory with the setup's ports, policy
///   and planner version, and its own trusted clock at 12:01 (the seed's `trusted_utc_now`); the
///   seed's `interactive_install_decision_guard` has no Rust counterpart (no consent broker yet).
/// - `composition._engine` is the public [`ctx_service::EngineComposition::engine`].
/// - `engine._record_install_outcome(..., execution_authority=<_issue_install_outcome_permit>)`
///   and its activation twin are the public `Engine::record_install_outcome` /
///   `record_activation_outcome`: the Rust engine issues the re-issuable outcome permit itself
///   (one outcome per claim is kept by the effect stream's exact append).
/// - `setup.installs.bundles["skill:installable"]` is the setup's install bundle port asked for
///   that capability (`describe_bundle`).
/// - `isinstance(committed, CommittedPlanV3)` holds by type: the engine state only carries
///   schema-v3 committed plans.
/// - `not hasattr(shifted.actions[0], "payload")`: `ActionSummary` has no public fields
///   and exactly the accessors `action_id`, `kind`, `entity_id` (named below); at run time its
///   debug form names no payload and carries none of the deactivation's authority digests.
#[test]
fn test_service_summarizes_task_shift_deactivation_without_exposing_authority() {
    let setup = setup_with(Options {
        requested_limit: 1,
        installable: true,
        ..Options::default()
    });
    let initial = setup
        .service
        .prepare(&fixture::request("lifecycle-initial", "work-one"))
        .unwrap();
    let original = setup.managed_input.decision_event.clone();
    let bundle = setup
        .ports
        .install
        .as_ref()
        .expect("the setup has an install bundle port")
        .describe_bundle("skill:installable", CapabilityKind::Skill)
        .unwrap()
        .expect("the install port describes skill:installable");
    let policy_digest = safe_default_policy_digest();

    let deactivation_authority: Vec<String>;
    {
        let artifact = setup.managed_input.handle();
        let composition_clock =
            Arc::new(ManualClock::new(UtcMicros::parse(COMPOSITION_NOW).unwrap()));
        let composition = open_engine_composition(
            &setup.data_dir,
            &artifact,
            setup.ports.clone(),
            setup.policy.clone(),
            fixture::PLANNER_VERSION,
            composition_clock,
        )
        .unwrap();
        let snapshot = composition.engine().snapshot(&original.scope).unwrap();
        let state = snapshot.state().expect("the session exists");
        let committed = state
            .committed_plan
            .as_ref()
            .expect("a schema-v3 plan is committed");
        let capability = committed.capabilities[0].clone();

        let desired = composition
            .process(&derived(
                &original,
                "event-lifecycle-desired",
                EventKind::ReassessmentRequested,
                2,
                Json::object([
                    ("owner_id", Json::str("owner-lifecycle")),
                    ("policy_snapshot_digest", Json::str(&policy_digest)),
                    (
                        "desired_capabilities",
                        Json::Arr(vec![Json::object([
                            ("capability_id", field(&capability, "capability_id")),
                            ("source_digest", field(&capability, "catalog_entry_digest")),
                            ("kind", field(&capability, "kind")),
                            ("actionability", field(&capability, "actionability")),
                            (
                                "install_descriptor_digest",
                                field(&capability, "install_descriptor_digest"),
                            ),
                            (
                                "install_plan_digest",
                                field(&capability, "install_plan_digest"),
                            ),
                            ("lease_id", Json::str("lease-lifecycle")),
                        ])]),
                    ),
                ]),
            ))
            .unwrap();
        let request = &desired.actions[0];
        assert_eq!(request.kind, ActionKind::RequestConsent);

        let granted = composition
            .process(&derived(
                &original,
                "event-lifecycle-consent-granted",
                EventKind::UserDecision,
                3,
                Json::object([
                    ("consent_id", Json::opt_str(request.consent_id.as_deref())),
                    ("decision", Json::str("granted")),
                    ("decision_basis", Json::str("interactive")),
                    ("policy_snapshot_digest", Json::str(&policy_digest)),
                    (
                        "requested_action_id",
                        field(&request.payload, "requested_action_id"),
                    ),
                    (
                        "requested_action_kind",
                        field(&request.payload, "requested_action_kind"),
                    ),
                    (
                        "requested_action_content_digest",
                        field(&request.payload, "requested_action_content_digest"),
                    ),
                    (
                        "requested_action_precondition_revision",
                        field(&request.payload, "requested_action_precondition_revision"),
                    ),
                ]),
            ))
            .unwrap();
        let install = granted.actions[0].clone();
        assert_eq!(install.kind, ActionKind::InstallCapability);

        let binding = InstallExecutionBinding::new(
            bundle.descriptor().get_str("installer_id").unwrap(),
            install.payload.get_str("installer_digest").unwrap(),
            &digest("managed-service-host"),
            &digest("managed-service-target"),
        )
        .unwrap();
        let engine = composition.engine();
        engine
            .authorize_install(
                &install,
                &capability,
                bundle.descriptor(),
                composition.catalog_snapshot_digest(),
                &policy_digest,
                &binding,
            )
            .unwrap();
        let install_guard = engine
            .record_install_outcome(
                &install,
                &binding,
                InstallOutcome::Applied,
                bundle.result_material().get_str("identity_digest"),
                &digest("managed-service-install-observation"),
            )
            .unwrap();
        let install_status = engine.install_execution_status(&install).unwrap();
        let install_observed_at = install_status
            .observed_at
            .expect("the install outcome has an observation time");
        let mut install_receipt = derived(
            &original,
            "event-lifecycle-install-applied",
            EventKind::ActionApplied,
            4,
            receipt_payload(
                &install,
                Json::object([
                    ("schema", Json::str(INSTALL_RECEIPT_SCHEMA_V3)),
                    ("host_state", Json::str("installed")),
                    ("capability_id", Json::opt_str(install.entity_id.as_deref())),
                    (
                        "capability_kind",
                        field(&install.payload, "capability_kind"),
                    ),
                    (
                        "catalog_identity",
                        field(&install.payload, "catalog_identity"),
                    ),
                    (
                        "material_identity",
                        field(&install.payload, "result_material"),
                    ),
                    (
                        "install_plan_descriptor",
                        field(&install.payload, "install_plan_descriptor"),
                    ),
                    (
                        "installer_digest",
                        field(&install.payload, "installer_digest"),
                    ),
                    (
                        "policy_snapshot_digest",
                        field(&install.payload, "policy_snapshot_digest"),
                    ),
                ]),
            ),
        );
        install_receipt.occurred_at = install_observed_at;
        let installed = engine
            .process_install_receipt(&install_receipt, &install_guard)
            .unwrap();
        let activation = installed.actions[0].clone();
        assert_eq!(activation.kind, ActionKind::ActivateCapability);

        engine
            .authorize_activation(
                &activation,
                &binding,
                setup
                    .managed_input
                    .session_started
                    .host_descriptor_digest
                    .as_deref()
                    .unwrap_or(""),
            )
            .unwrap();
        let material_identity = field(&activation.payload, "material_identity");
        let activation_guard = engine
            .record_activation_outcome(
                &activation,
                &binding,
                material_identity.get_str("identity_digest").unwrap(),
                &digest("managed-service-activation-observation"),
            )
            .unwrap();
        let activation_status = engine.activation_execution_status(&activation).unwrap();
        let activation_observed_at = activation_status
            .observed_at
            .expect("the activation outcome has an observation time");
        let mut activation_receipt = derived(
            &original,
            "event-lifecycle-activation-applied",
            EventKind::ActionApplied,
            5,
            receipt_payload(
                &activation,
                Json::object([
                    ("schema", Json::str(MATERIAL_RECEIPT_SCHEMA_V3)),
                    (
                        "host_state",
                        field(&activation.verification, "expected_state"),
                    ),
                    (
                        "capability_id",
                        Json::opt_str(activation.entity_id.as_deref()),
                    ),
                    (
                        "capability_kind",
                        field(&activation.payload, "capability_kind"),
                    ),
                    (
                        "catalog_identity",
                        field(&activation.payload, "catalog_identity"),
                    ),
                    ("material_identity", material_identity.clone()),
                    (
                        "authorized_material",
                        field(&activation.payload, "authorized_material"),
                    ),
                ]),
            ),
        );
        activation_receipt.occurred_at = activation_observed_at;
        engine
            .process_activation_receipt(&activation_receipt, &activation_guard)
            .unwrap();

        // The lifecycle's authority digests (material, installer, install descriptor): the
        // deactivation summary must expose none of them.
        deactivation_authority = [
            material_identity.get_str("identity_digest"),
            install.payload.get_str("installer_digest"),
            bundle.descriptor().get_str("descriptor_digest"),
        ]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
    }

    let artifact = &setup.artifact;
    let replacement_artifact = setup
        .registry
        .ingest(
            &setup.loaded,
            IngestInputs {
                planning_environment_digest: artifact.planning_environment_digest().to_owned(),
                catalog_namespace_digest: artifact.catalog_namespace_digest().to_owned(),
                catalog_retrieval_digest: artifact.catalog_retrieval_digest().to_owned(),
                benefit_facts_snapshot_digest: artifact.benefit_facts_snapshot_digest().to_owned(),
                benefit_policy_snapshot_digest: artifact
                    .benefit_policy_snapshot_digest()
                    .to_owned(),
                material_snapshot_digest: artifact.material_snapshot_digest().to_owned(),
                installation_snapshot_digest: artifact.installation_snapshot_digest().to_owned(),
                observation_surrogate: surrogate(0),
                planning_schema_version: artifact.planning_schema_version().to_owned(),
            },
        )
        .unwrap();
    let mut development = derived(
        &original,
        "event-lifecycle-development",
        EventKind::DevelopmentObserved,
        6,
        observation_payload(&replacement_artifact),
    );
    development.correlation_id = Some("plan-lifecycle-development".to_owned());
    development.causation_id = Some("event-lifecycle-activation-applied".to_owned());
    development.work_signature = Some(digest("lifecycle-development-work"));
    let mut spec = setup
        .managed_input
        .with_events(setup.managed_input.session_started.clone(), development);
    spec.manifest_digest = replacement_artifact.manifest_digest().to_owned();
    setup.inputs.insert("work-lifecycle-development", spec);

    let shifted = setup
        .service
        .prepare(
            &QueryRequest::new(
                &digest("lifecycle-development"),
                "work-lifecycle-development",
            )
            .unwrap(),
        )
        .unwrap();
    let calls_after_shift = setup.calls();
    let reopened = setup.service.reopen(shifted.query_ref()).unwrap();

    assert_eq!(initial.prepared().status(), "ready");
    assert_eq!(shifted.prepared().status(), "abstained");
    let summarized: Vec<(&str, Option<&str>)> = shifted
        .actions()
        .iter()
        .map(|action| (action.kind(), action.entity_id()))
        .collect();
    assert_eq!(
        summarized,
        [("DeactivateCapability", Some("skill:installable"))]
    );
    assert_eq!(shifted.actions(), reopened.actions());
    assert_eq!(setup.calls(), calls_after_shift);
    // `not hasattr(shifted.actions[0], "payload")`.
    let summary: &ActionSummary = &shifted.actions()[0];
    let (_action_id, _kind, _entity_id): (&str, &str, Option<&str>) =
        (summary.action_id(), summary.kind(), summary.entity_id());
    let repr = format!("{summary:?}");
    assert!(!repr.contains("payload"), "{repr}");
    assert!(!deactivation_authority.is_empty());
    for authority in &deactivation_authority {
        assert!(!repr.contains(authority.as_str()), "{repr}");
    }
}
