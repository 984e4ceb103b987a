//! The two planning events of one managed exposure — `SessionStarted` at revision 0 and
//! `IntentObserved` at revision 1, bound to an artifact — as every composition of the service
//! builds them (the `ctx` runtime, the tests' fixture, the fuzz harness).

use ctx_model::{EngineEvent, EventKind, Json, PrivacyLabel, RandomSeed, ScopeRef, sha256_hex};

use crate::registry::ArtifactHandle;

/// What distinguishes one exposure's planning events; everything else follows from the artifact.
#[derive(Debug, Clone, Copy)]
pub struct PlanningEventsSpec<'a> {
    pub scope: &'a ScopeRef,
    /// Canonical UTC text of both events' time.
    pub occurred_at: &'a str,
    pub session_event_id: &'a str,
    pub intent_event_id: &'a str,
    pub correlation_id: &'a str,
    /// The session start's cause (the intent's cause is the session start).
    pub session_causation_id: &'a str,
    /// Digest of the host descriptor.
    pub host_descriptor_digest: &'a str,
    /// Digest of the work.
    pub work_signature: &'a str,
}

/// `{"observation_ref": {content_digest, opaque_id, provider_id}}` of an artifact: the intent's
/// payload.
pub fn observation_payload(artifact: &ArtifactHandle) -> Json {
    let reference = artifact.observation_reference();
    Json::object([(
        "observation_ref",
        Json::object([
            (
                "content_digest",
                Json::str(reference.content_digest.as_str()),
            ),
            ("opaque_id", Json::str(reference.opaque_id.as_str())),
            ("provider_id", Json::str(reference.provider_id.as_str())),
        ]),
    )])
}

/// The session start (host level `managing`) and the intent observed of `spec`, with the engine,
/// planner, policy, catalog and (disabled) semantic versions of `artifact`.
pub fn planning_events(
    artifact: &ArtifactHandle,
    spec: &PlanningEventsSpec<'_>,
) -> (EngineEvent, EngineEvent) {
    let common = |event_id: &str, kind: EventKind, expected_revision: u64| EngineEvent {
        event_id: event_id.to_owned(),
        kind,
        scope: spec.scope.clone(),
        expected_revision,
        occurred_at: spec.occurred_at.to_owned(),
        payload: Json::object::<&str>([]),
        privacy: PrivacyLabel::default(),
        correlation_id: Some(spec.correlation_id.to_owned()),
        causation_id: None,
        engine_version: Some("ctx-engine-v1".to_owned()),
        planner_version: Some(artifact.planning_schema_version().to_owned()),
        policy_version: Some("policy-v1".to_owned()),
        host_descriptor_digest: Some(spec.host_descriptor_digest.to_owned()),
        catalog_snapshot_digest: Some(artifact.planning_environment_digest().to_owned()),
        semantic_model_digest: Some(sha256_hex("semantic-model-disabled")),
        semantic_index_digest: Some(sha256_hex("semantic-index-disabled")),
        work_signature: Some(spec.work_signature.to_owned()),
        random_seed: RandomSeed::Int(0),
    };
    let mut started = common(spec.session_event_id, EventKind::SessionStarted, 0);
    started.payload = Json::object([("host_level", Json::str("managing"))]);
    started.causation_id = Some(spec.session_causation_id.to_owned());
    let mut intent = common(spec.intent_event_id, EventKind::IntentObserved, 1);
    intent.payload = observation_payload(artifact);
    intent.causation_id = Some(started.event_id.clone());
    (started, intent)
}
