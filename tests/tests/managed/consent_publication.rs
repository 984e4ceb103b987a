//! Consent challenge publication: seed tests 39, 63–69, 71–73. A pending consent committed at
//! the head is published as one durable broker challenge by `prepare` / `reopen`, idempotently,
//! without replanning, and never when the head moved during publication or when an authority
//! (broker, actuator, actuator target) is missing or drifted.
//!
//! The seed's monkeypatches map to the service's named fail points
//! (`ctx_service::failpoints`): a patch that does extra work and continues is a
//! `fail::cfg_callback` at that seam, a patch that raises is `fail::cfg(point, "return")`.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use ctx_model::{ActionKind, EngineEvent, EventKind, HostAction, Json};
use ctx_projections::engine::ManualClock;
use ctx_service::{
    AdapterPorts, EngineComposition, InstallConsentPolicy, NetBenefitPolicy, QueryServiceResult,
    ServiceError, failpoints, open_engine_composition, open_query_service,
};

use super::fixture::{
    CONSENT_AUDIENCE, InputSpec, Options, PLANNER_VERSION, Setup, consent_config, scope, setup_with,
};
use crate::support::FailPoints;

pub(super) fn installable() -> Options {
    Options {
        requested_limit: 1,
        installable: true,
        ..Options::default()
    }
}

/// A setup whose test configures fail points (the exclusive side of the fail-point lock).
pub(super) fn fp_setup() -> (FailPoints, Setup) {
    let fp = FailPoints::setup();
    let setup = setup_with(Options {
        failpoints: true,
        ..installable()
    });
    (fp, setup)
}

pub(super) fn expect_err<T: std::fmt::Debug>(
    r: Result<T, ServiceError>,
    needle: &str,
) -> ServiceError {
    let e = r.expect_err("the call must fail");
    assert!(
        e.to_string().contains(needle),
        "expected an error containing {needle:?}, got {e:?} ({e})"
    );
    e
}

/// What a test needs to open `open_managed_engine_composition` on the setup's files from any
/// thread (a fail-point callback runs inside the service's call).
#[derive(Clone)]
struct CompositionAuthority {
    data_dir: PathBuf,
    input: InputSpec,
    ports: AdapterPorts,
    policy: NetBenefitPolicy,
    clock: Arc<ManualClock>,
}

impl CompositionAuthority {
    fn of(setup: &Setup) -> CompositionAuthority {
        CompositionAuthority {
            data_dir: setup.data_dir.clone(),
            input: setup.managed_input.clone(),
            ports: setup.ports.clone(),
            policy: setup.policy.clone(),
            clock: setup.clock.clone(),
        }
    }

    fn open(&self) -> EngineComposition {
        open_engine_composition(
            &self.data_dir,
            &self.input.handle(),
            self.ports.clone(),
            self.policy.clone(),
            PLANNER_VERSION,
            self.clock.clone(),
        )
        .unwrap()
    }

    /// The setup's decision event re-used as another event (the seed's `replace(original, ...)`).
    fn event_like(
        &self,
        event_id: &str,
        kind: EventKind,
        revision: u64,
        payload: Json,
    ) -> EngineEvent {
        let mut e = self.input.decision_event.clone();
        e.event_id = event_id.to_owned();
        e.kind = kind;
        e.expected_revision = revision;
        e.payload = payload;
        e
    }

    /// `_commit_consent_decision`: an interactive grant of `request` committed at revision 3.
    fn commit_consent_decision(&self, request: &HostAction) {
        let composition = self.open();
        let mut event = self.event_like(
            "event-managed-consent-race-decision",
            EventKind::UserDecision,
            3,
            grant_payload(request),
        );
        event.occurred_at = "2026-08-03T12:01:00Z".to_owned();
        let transition = composition.process(&event).unwrap();
        assert_eq!(transition.to_revision, 4);
    }
}

/// The interactive grant payload of a `RequestConsent` action.
pub(super) fn grant_payload(request: &HostAction) -> Json {
    let field = |name: &str| request.payload.get(name).cloned().unwrap();
    Json::object([
        (
            "consent_id",
            Json::str(request.consent_id.as_deref().unwrap()),
        ),
        ("decision", Json::str("granted")),
        ("decision_basis", Json::str("interactive")),
        (
            "policy_snapshot_digest",
            Json::str(InstallConsentPolicy::safe_default().policy_digest()),
        ),
        ("requested_action_id", field("requested_action_id")),
        ("requested_action_kind", field("requested_action_kind")),
        (
            "requested_action_content_digest",
            field("requested_action_content_digest"),
        ),
        (
            "requested_action_precondition_revision",
            field("requested_action_precondition_revision"),
        ),
    ])
}

/// `_commit_pending_consent`: prepares `label`'s query, then commits (through a composition) a
/// desired set of the plan's first row at revision 2, which asks for consent. Returns the
/// prepare result and the transition's single `RequestConsent` action.
pub(super) fn commit_pending_consent(
    setup: &Setup,
    label: &str,
) -> (QueryServiceResult, HostAction) {
    let initial = setup.service.prepare(&setup.request(label)).unwrap();
    let authority = CompositionAuthority::of(setup);
    let composition = authority.open();
    let snapshot = composition.engine().snapshot(&scope()).unwrap();
    let committed = snapshot
        .state()
        .expect("the session exists")
        .committed_plan
        .as_ref()
        .expect("a schema-v3 plan is committed");
    let capability = &committed.capabilities[0];
    let field = |name: &str| capability.get(name).cloned().unwrap();
    let desired = composition
        .process(&authority.event_like(
            "event-managed-consent-desired",
            EventKind::ReassessmentRequested,
            2,
            Json::object([
                ("owner_id", Json::str("owner-managed-consent")),
                (
                    "policy_snapshot_digest",
                    Json::str(InstallConsentPolicy::safe_default().policy_digest()),
                ),
                (
                    "desired_capabilities",
                    Json::Arr(vec![Json::object([
                        ("capability_id", field("capability_id")),
                        ("source_digest", field("catalog_entry_digest")),
                        ("kind", field("kind")),
                        ("actionability", field("actionability")),
                        (
                            "install_descriptor_digest",
                            field("install_descriptor_digest"),
                        ),
                        ("install_plan_digest", field("install_plan_digest")),
                        ("lease_id", Json::str("lease-managed-consent")),
                    ])]),
                ),
            ]),
        ))
        .unwrap();
    let requests: Vec<&HostAction> = desired
        .actions
        .iter()
        .filter(|a| a.kind == ActionKind::RequestConsent)
        .collect();
    assert_eq!(requests.len(), 1);
    (initial, requests[0].clone())
}

/// Configures `point` to commit the seed's consent decision once, then let the service continue
/// (the seed's "call the original, then `_commit_consent_decision`"). The returned flag tells
/// whether the decision was committed.
fn decide_at(point: &'static str, setup: &Setup, request: &HostAction) -> Arc<AtomicBool> {
    let decided = Arc::new(AtomicBool::new(false));
    let flag = decided.clone();
    let authority = CompositionAuthority::of(setup);
    let request = request.clone();
    fail::cfg_callback(point, move || {
        if !flag.swap(true, Ordering::SeqCst) {
            authority.commit_consent_decision(&request);
        }
    })
    .unwrap();
    decided
}

// 39
/// `set(challenge.__slots__)` is the five accessors below (the type has no public fields and no
/// other accessor, see `service/src/managed/result.rs`); `repr` and `hasattr` of the forbidden
/// names are checked on the Debug text, which names every field. Copy / pickle: the type
/// implements neither `Clone` nor `serde::Serialize` (asserted statically in `planning.rs`).
#[test]
fn test_service_publishes_one_safe_current_consent_challenge_without_reranking() {
    let setup = setup_with(installable());
    setup.ask_each_time();
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let calls_before = setup.calls();

    let result = setup.service.reopen(initial.query_ref()).unwrap();

    let challenge = result.challenge().expect("a pending consent is published");
    let _slots: (&str, &str, &str, &str, &str) = (
        challenge.audience(),
        challenge.capability_id(),
        challenge.challenge_digest(),
        challenge.expires_at(),
        challenge.kind(),
    );
    assert_eq!(challenge.capability_id(), "skill:installable");
    assert_eq!(challenge.kind(), "skill");
    assert_eq!(challenge.audience(), CONSENT_AUDIENCE);
    assert_eq!(challenge.expires_at(), "2026-08-03T13:00:00Z");
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.body_source.load_calls(), 0);
    let repr = format!("{challenge:?}");
    assert!(!repr.contains(&*setup.root.to_string_lossy()), "{repr}");
    for forbidden in [
        "execution_binding",
        "challenge_id",
        "selection",
        "proof",
        "scope",
    ] {
        assert!(!repr.contains(forbidden), "{forbidden} in {repr}");
    }
}

// 63
#[test]
fn test_service_challenge_retry_reopen_and_host_aliases_are_idempotent() {
    let setup = setup_with(installable());
    setup
        .inputs
        .insert("codex-turn", setup.managed_input.clone());
    setup
        .inputs
        .insert("claude-hook", setup.managed_input.clone());
    let (initial, _request) = commit_pending_consent(&setup, "host-consent-query");
    let calls_before = setup.calls();

    let codex = setup
        .service
        .prepare(&super::fixture::request("host-consent-query", "codex-turn"))
        .unwrap();
    let claude = setup
        .service
        .prepare(&super::fixture::request(
            "host-consent-query",
            "claude-hook",
        ))
        .unwrap();
    let reopened = setup.service.reopen(initial.query_ref()).unwrap();

    assert_eq!(codex.challenge(), claude.challenge());
    assert_eq!(claude.challenge(), reopened.challenge());
    assert!(codex.challenge().is_some());
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.consent_challenges(), 1);
}

// 64
#[test]
fn test_service_concurrent_challenge_publication_converges_without_replanning() {
    let setup = setup_with(installable());
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let calls_before = setup.calls();
    // The seed's pool: 4 workers over 8 reopens of the same reference.
    let barrier = Barrier::new(4);

    let digests: Vec<Option<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (barrier, service, query_ref) = (&barrier, &setup.service, initial.query_ref());
                s.spawn(move || {
                    barrier.wait();
                    (0..2)
                        .map(|_| {
                            service
                                .reopen(query_ref)
                                .unwrap()
                                .challenge()
                                .map(|c| c.challenge_digest().to_owned())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    assert_eq!(digests.len(), 8);
    let mut distinct: Vec<&String> = digests.iter().flatten().collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 1, "{digests:?}");
    assert_eq!(setup.calls(), calls_before);
    assert_eq!(setup.consent_challenges(), 1);
}

// 65
/// The seed's crash in `QueryServiceResult._create` is the fail point after the planned
/// mark, before the result is built.
#[test]
fn test_service_reopen_recovers_after_challenge_publish_before_result() {
    let (_fp, setup) = fp_setup();
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");

    fail::cfg(failpoints::QUERY_BEFORE_RESULT, "return").unwrap();
    let e = setup.service.reopen(initial.query_ref()).unwrap_err();
    fail::remove(failpoints::QUERY_BEFORE_RESULT);
    assert!(
        matches!(&e, ServiceError::FailPoint { name, .. } if *name == failpoints::QUERY_BEFORE_RESULT),
        "{e:?}"
    );
    assert!(e.to_string().contains("simulated crash"), "{e}");
    assert_eq!(setup.consent_challenges(), 1);

    let calls_before = setup.calls();
    let recovered = setup.service.reopen(initial.query_ref()).unwrap();

    assert!(recovered.challenge().is_some());
    assert_eq!(setup.calls(), calls_before);
}

// 66
/// The seed resolves the execution binding, then commits a decision: a callback at the fail point
/// right after binding resolution, before the challenge is derived and created.
#[test]
fn test_service_rejects_decision_committed_during_registry_binding() {
    let (_fp, setup) = fp_setup();
    let (initial, request) = commit_pending_consent(&setup, "pending-consent-query");
    let decided = decide_at(failpoints::CONSENT_AFTER_BINDING, &setup, &request);

    let r = setup.service.reopen(initial.query_ref());
    fail::remove(failpoints::CONSENT_AFTER_BINDING);

    let e = expect_err(r, "changed");
    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");
    assert!(decided.load(Ordering::SeqCst));
    assert_eq!(setup.consent_challenges(), 0);
}

// 67
/// The seed substitutes the composition's snapshot with plan "plan-race-b" once the binding is
/// resolved: at the fail point after binding resolution, the snapshot-drift fail point is armed,
/// so every later fresh snapshot of the head checks reports that plan id.
#[test]
fn test_service_never_mixes_plan_a_result_with_plan_b_consent() {
    let (_fp, setup) = fp_setup();
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let drifted = Arc::new(AtomicBool::new(false));
    let flag = drifted.clone();
    fail::cfg_callback(failpoints::CONSENT_AFTER_BINDING, move || {
        if !flag.swap(true, Ordering::SeqCst) {
            fail::cfg(failpoints::CONSENT_SNAPSHOT_PLAN_DRIFT, "return").unwrap();
        }
    })
    .unwrap();

    let r = setup.service.reopen(initial.query_ref());
    fail::remove(failpoints::CONSENT_AFTER_BINDING);
    fail::remove(failpoints::CONSENT_SNAPSHOT_PLAN_DRIFT);

    let e = expect_err(r, "changed");
    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");
    assert!(drifted.load(Ordering::SeqCst));
    assert_eq!(setup.consent_challenges(), 0);
}

// 68
/// The seed's broker `prepare` publishes, then a decision commits: a callback at the fail point
/// right after the broker challenge is created.
#[test]
fn test_service_rejects_decision_committed_during_broker_publication() {
    let (_fp, setup) = fp_setup();
    let (initial, request) = commit_pending_consent(&setup, "pending-consent-query");
    let decided = decide_at(failpoints::CONSENT_AFTER_CREATE, &setup, &request);

    let r = setup.service.reopen(initial.query_ref());
    fail::remove(failpoints::CONSENT_AFTER_CREATE);

    let e = expect_err(r, "stale");
    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");
    assert!(decided.load(Ordering::SeqCst));
    assert_eq!(setup.consent_challenges(), 1);
}

// 69
/// The seed commits a decision inside the broker `status` call: a callback at the fail point
/// around the status read (after it, before the last head check), so only the final head check
/// can see the decision.
#[test]
fn test_service_rejects_decision_committed_during_broker_status() {
    let (_fp, setup) = fp_setup();
    let (initial, request) = commit_pending_consent(&setup, "pending-consent-query");
    let decided = decide_at(failpoints::CONSENT_AFTER_STATUS, &setup, &request);

    let r = setup.service.reopen(initial.query_ref());
    fail::remove(failpoints::CONSENT_AFTER_STATUS);

    let e = expect_err(r, "stale");
    assert!(matches!(e, ServiceError::HeadDrift(_)), "{e:?}");
    assert!(decided.load(Ordering::SeqCst));
    assert_eq!(setup.consent_challenges(), 1);
}

// 71
#[test]
fn test_service_fails_closed_when_pending_consent_has_no_publication_authority() {
    let setup = setup_with(installable());
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let mut config = setup.config();
    config.policy_store_root = Some(setup.policy_root.clone());
    let without_broker = open_query_service(config).unwrap();

    let e = expect_err(
        without_broker.reopen(initial.query_ref()),
        "publication authorities",
    );

    assert!(matches!(e, ServiceError::Identity(_)), "{e:?}");
    assert_eq!(setup.consent_challenges(), 0);
}

// 72
#[test]
fn test_service_rejects_pending_consent_without_a_physical_actuator() {
    let setup = setup_with(installable());
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let mut config = setup.config();
    config.policy_store_root = Some(setup.policy_root.clone());
    config.consent = Some(consent_config());
    let no_actuator = open_query_service(config).unwrap();

    let e = expect_err(
        no_actuator.reopen(initial.query_ref()),
        "no physical installation actuator",
    );

    assert!(matches!(e, ServiceError::NoActuator), "{e:?}");
    assert_eq!(setup.consent_challenges(), 0);
}

// 73
#[test]
fn test_service_rejects_actuator_target_drift_before_broker_publication() {
    let setup = setup_with(installable());
    let (initial, _request) = commit_pending_consent(&setup, "pending-consent-query");
    let skill_root = &setup.skill_root;
    fs::rename(skill_root, skill_root.with_file_name("skills-old")).unwrap();
    fs::create_dir(skill_root).unwrap();
    fs::set_permissions(skill_root, fs::Permissions::from_mode(0o700)).unwrap();

    let e = expect_err(setup.service.reopen(initial.query_ref()), "root changed");

    assert!(matches!(e, ServiceError::Execution(_)), "{e:?}");
    assert_eq!(setup.consent_challenges(), 0);
}
