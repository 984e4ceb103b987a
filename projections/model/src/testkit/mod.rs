//! Builders of well-formed domain values for tests, property tests, fuzzing and benchmarks:
//! schema-v3 plan rows with real identities and digests, plan decisions, and events of one
//! session. Compiled for this crate's tests and behind the `testkit` feature; never part of a
//! production build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod ops;

use crate::digest::sha256_hex;
use crate::documents::{
    InstallDescriptorInput, MaterialDescriptorInput, authorized_material_from_catalog,
    catalog_capability_identity, install_plan_descriptor, material_descriptor, material_identity,
};
use crate::json::Json;
use crate::plan::canonical_row_order_key;
use crate::protocol::{EngineEvent, EventKind, HostAction, RandomSeed, ScopeRef};
use crate::replay::{NORMALIZER_VERSION_DEFAULT, REDUCER_V3, ReplayInput, Surrogate};
use crate::shape::{ONE_HOUR_MICROS, UtcMicros};
use crate::vocab::{
    BENEFIT_POLICY_SCHEMA_ID, BENEFIT_RESULT_SCHEMA_ID, BENEFIT_SELECTION_ALGORITHM_ID,
    CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3, INSTALLER_ID,
};

/// A digest derived from a label, so fixtures are stable and readable.
pub fn digest(label: &str) -> String {
    sha256_hex(&format!("ctx-testkit:{label}"))
}

/// The catalog namespace every fixture row belongs to.
pub fn namespace() -> String {
    digest("namespace")
}

/// What a fixture row may later do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Load,
    Install,
    /// An install that needs a human even under a pre-approving policy.
    InstallSensitive,
    Manual,
}

fn row_base(
    kind: &str,
    name: &str,
    actionability: &str,
    tier: &str,
    authority: Json,
    install: Option<(&str, &str)>,
) -> Json {
    let id = format!("{kind}:{name}");
    let identity = catalog_capability_identity(&id, kind, &namespace()).unwrap();
    Json::object([
        ("actionability", Json::str(actionability)),
        ("authority", authority),
        (
            "benefit",
            Json::object([
                ("individual_net_benefit_u", Json::Int(1_000)),
                ("marginal_net_benefit_u", Json::Int(900)),
                ("tier", Json::str(tier)),
            ]),
        ),
        ("capability_id", Json::str(&id)),
        (
            "catalog_entry_digest",
            Json::str(digest(&format!("entry:{id}"))),
        ),
        ("catalog_identity", identity),
        (
            "install_descriptor_digest",
            install.map_or(Json::Null, |(d, _)| Json::str(d)),
        ),
        (
            "install_plan_digest",
            install.map_or(Json::Null, |(_, p)| Json::str(p)),
        ),
        ("kind", Json::str(kind)),
        ("matching_signals", Json::Arr(vec![Json::str("python")])),
        ("name", Json::str(name)),
        ("normalized_score_ppm", Json::Int(800_000)),
        ("reason_codes", Json::Arr(vec![Json::str("matched-signal")])),
    ])
}

/// The skill body a fixture row names.
pub fn body(name: &str) -> String {
    format!("# {name}\nA fixture skill body.\n")
}

/// A schema-v3 plan row of `row_kind` for `kind:name`.
pub fn row(row_kind: RowKind, kind: &str, name: &str) -> Json {
    let id = format!("{kind}:{name}");
    let content = body(name);
    let content_sha = sha256_hex(&content);
    let bytes = i64::try_from(content.len()).unwrap();
    match row_kind {
        RowKind::Load => {
            let material = material_identity(&id, kind, &content_sha, bytes).unwrap();
            let descriptor = material_descriptor(&MaterialDescriptorInput {
                capability_id: &id,
                kind,
                actionability: "load",
                content_sha256: Some(&content_sha),
                content_bytes: bytes,
                estimated_tokens: bytes / 4,
                provenance_digest: &digest("material-snapshot"),
                material_identity_digest: material.get_str("identity_digest"),
            })
            .unwrap();
            let identity = catalog_capability_identity(&id, kind, &namespace()).unwrap();
            let authorized = authorized_material_from_catalog(
                identity.get_str("identity_digest").unwrap(),
                &descriptor,
            )
            .unwrap();
            let authority = Json::object([("type", Json::str("load")), ("material", authorized)]);
            row_base(kind, name, "load", "executable", authority, None)
        }
        RowKind::Install | RowKind::InstallSensitive => {
            let material = material_identity(&id, kind, &content_sha, bytes).unwrap();
            let plan_digest = digest(&format!("install-plan:{id}"));
            let descriptor = install_plan_descriptor(&InstallDescriptorInput {
                capability_id: &id,
                kind,
                installer_id: INSTALLER_ID,
                plan_digest: &plan_digest,
                provenance_digest: &digest("installation-snapshot"),
                permission_expansion: row_kind == RowKind::InstallSensitive,
                credential_requirement: false,
                result_material_identity_digest: material.get_str("identity_digest"),
            })
            .unwrap();
            let descriptor_digest = descriptor.get_str("descriptor_digest").unwrap().to_owned();
            let authority = Json::object([
                ("type", Json::str("install")),
                ("descriptor", descriptor),
                ("result_material", material),
            ]);
            row_base(
                kind,
                name,
                "install",
                "executable",
                authority,
                Some((&descriptor_digest, &plan_digest)),
            )
        }
        RowKind::Manual => row_base(
            kind,
            name,
            "manual",
            "advisory",
            Json::object([("type", Json::str("manual"))]),
            None,
        ),
    }
}

/// A benefit audit reference consistent with `rows` rows.
pub fn audit(rows: usize) -> Json {
    let rows = i64::try_from(rows).unwrap();
    Json::object([
        ("calibration_digest", Json::str(digest("calibration"))),
        ("candidate_pool_count", Json::Int(rows.max(1) + 2)),
        ("policy_digest", Json::str(digest("policy"))),
        ("policy_schema_id", Json::str(BENEFIT_POLICY_SCHEMA_ID)),
        ("requested_limit", Json::Int(5)),
        (
            "result_digest",
            Json::str(digest(&format!("result:{rows}"))),
        ),
        ("result_schema_id", Json::str(BENEFIT_RESULT_SCHEMA_ID)),
        ("search_evaluation_count", Json::Int(rows.max(1) * 10)),
        (
            "selection_algorithm_id",
            Json::str(BENEFIT_SELECTION_ALGORITHM_ID),
        ),
    ])
}

/// A ready decision over `rows` (sorted into canonical order), or `below-net-benefit` when empty.
pub fn decision(mut rows: Vec<Json>) -> Surrogate {
    rows.sort_by(|a, b| canonical_row_order_key(a).cmp(&canonical_row_order_key(b)));
    let (status, code) = if rows.is_empty() {
        ("abstained", Json::str("below-net-benefit"))
    } else {
        ("ready", Json::Null)
    };
    let value = Json::object([
        ("abstention_code", code),
        ("benefit_audit", audit(rows.len())),
        ("capabilities", Json::Arr(rows)),
        ("status", Json::str(status)),
    ]);
    Surrogate::new(CAPABILITY_PLAN_SCHEMA, CAPABILITY_PLAN_VERSION_V3, value)
}

/// A scope whose ids are all replay tokens.
pub fn scope(session: &str) -> ScopeRef {
    ScopeRef::new(
        "tenant-1",
        "workspace-1",
        "repo-1",
        session,
        "exposure-1",
        "host-1",
        None,
    )
    .unwrap()
}

/// Events of one session, numbered and timed in order.
#[derive(Debug, Clone)]
pub struct Session {
    pub scope: ScopeRef,
    pub host_descriptor: String,
    /// The head revision the next event is derived from.
    pub revision: u64,
    pub now: UtcMicros,
    pub plan_id: String,
    pub catalog: String,
    pub policy: String,
    seq: u64,
}

impl Session {
    pub fn new(session: &str) -> Session {
        Session {
            scope: scope(session),
            host_descriptor: digest("host-descriptor"),
            revision: 0,
            now: UtcMicros::parse("2026-12-01T10:00:00Z").unwrap(),
            plan_id: format!("ctx-query-host-1-{session}-1"),
            catalog: digest("planning-environment"),
            policy: digest("install-policy"),
            seq: 0,
        }
    }

    /// Moves the session clock forward.
    pub fn advance(&mut self, micros: i64) {
        self.now = self.now.checked_add(micros).unwrap();
    }

    /// One hour, the action TTL.
    pub const HOUR: i64 = ONE_HOUR_MICROS;

    /// An event at the current head with full replay metadata.
    pub fn event(&mut self, kind: EventKind, payload: Json) -> EngineEvent {
        self.seq += 1;
        let mut e = EngineEvent::bare(
            &format!("ev-{}-{}", self.scope.session_id, self.seq),
            kind,
            self.scope.clone(),
            self.revision,
            &self.now.render(),
        );
        e.payload = payload;
        e.host_descriptor_digest = Some(self.host_descriptor.clone());
        if kind.is_decision_causing() {
            e.engine_version = Some("ctx-engine-test".into());
            e.planner_version = Some("ctx-planner-test".into());
            e.policy_version = Some("ctx-policy-test".into());
            e.catalog_snapshot_digest = Some(self.catalog.clone());
            e.semantic_model_digest = Some(digest("semantic-model"));
            e.semantic_index_digest = Some(digest("semantic-index"));
            e.work_signature = Some(digest(&format!("work:{}", self.seq)));
            e.random_seed = RandomSeed::Int(0);
            e.correlation_id = Some(self.plan_id.clone());
        }
        e.validate().unwrap();
        e
    }

    pub fn started(&mut self, host_level: &str) -> EngineEvent {
        self.event(
            EventKind::SessionStarted,
            Json::object([("host_level", Json::str(host_level))]),
        )
    }

    /// A planning event (its sanitized payload is `{}`).
    pub fn intent(&mut self) -> EngineEvent {
        self.event(EventKind::IntentObserved, Json::object::<&str>([]))
    }

    /// A desired set naming `ids` of the plan `rows`.
    pub fn desired(&mut self, owner: &str, rows: &[Json], ids: &[&str]) -> EngineEvent {
        let desired: Vec<Json> = rows
            .iter()
            .filter(|r| ids.contains(&r.get_str("capability_id").unwrap_or_default()))
            .map(|r| {
                let id = r.get_str("capability_id").unwrap_or_default();
                Json::object([
                    ("actionability", r.get("actionability").cloned().unwrap()),
                    ("capability_id", Json::str(id)),
                    (
                        "install_descriptor_digest",
                        r.get("install_descriptor_digest").cloned().unwrap(),
                    ),
                    (
                        "install_plan_digest",
                        r.get("install_plan_digest").cloned().unwrap(),
                    ),
                    ("kind", r.get("kind").cloned().unwrap()),
                    ("lease_id", Json::str(format!("lease-{owner}-{id}"))),
                    (
                        "source_digest",
                        r.get("catalog_entry_digest").cloned().unwrap(),
                    ),
                ])
            })
            .collect();
        let policy = self.policy.clone();
        self.event(
            EventKind::ReassessmentRequested,
            Json::object([
                ("owner_id", Json::str(owner)),
                ("desired_capabilities", Json::Arr(desired)),
                ("policy_snapshot_digest", Json::str(policy)),
            ]),
        )
    }

    /// A decision on the consent whose install action is `install`.
    pub fn decide(&mut self, install: &HostAction, granted: bool, basis: &str) -> EngineEvent {
        let policy = install
            .payload
            .get("policy_snapshot_digest")
            .cloned()
            .unwrap();
        self.event(
            EventKind::UserDecision,
            Json::object([
                ("consent_id", Json::opt_str(install.consent_id.as_deref())),
                (
                    "decision",
                    Json::str(if granted { "granted" } else { "denied" }),
                ),
                ("decision_basis", Json::str(basis)),
                ("policy_snapshot_digest", policy),
                (
                    "requested_action_content_digest",
                    Json::str(install.content_digest()),
                ),
                ("requested_action_id", Json::str(&install.action_id)),
                ("requested_action_kind", Json::str("InstallCapability")),
                (
                    "requested_action_precondition_revision",
                    Json::from(install.precondition_revision),
                ),
            ]),
        )
    }

    fn receipt_identity(action: &HostAction) -> Vec<(&'static str, Json)> {
        vec![
            ("action_content_digest", Json::str(action.content_digest())),
            ("action_id", Json::str(&action.action_id)),
            ("action_kind", Json::str(action.kind.as_str())),
            (
                "action_precondition_revision",
                Json::from(action.precondition_revision),
            ),
        ]
    }

    /// `ActionApplied` with the exact verification the action authorizes.
    pub fn applied(&mut self, action: &HostAction) -> EngineEvent {
        let verification = match action.kind {
            crate::protocol::ActionKind::InstallCapability => {
                crate::action_contract::expected_install_receipt(action)
            }
            _ => crate::action_contract::expected_material_receipt(action),
        };
        let mut fields = Self::receipt_identity(action);
        fields.push(("verification", verification));
        self.event(EventKind::ActionApplied, Json::object(fields))
    }

    /// `ActionFailed` in its sanitized form.
    pub fn failed(&mut self, action: &HostAction) -> EngineEvent {
        let mut fields = Self::receipt_identity(action);
        fields.push((
            "error",
            Json::object([("code", Json::str("redacted-host-failure"))]),
        ));
        self.event(EventKind::ActionFailed, Json::object(fields))
    }

    pub fn expired(&mut self, action: &HostAction) -> EngineEvent {
        let mut fields = Self::receipt_identity(action);
        fields.push(("reason", Json::str("expired")));
        self.event(EventKind::ActionExpired, Json::object(fields))
    }

    pub fn empty(&mut self, kind: EventKind) -> EngineEvent {
        self.event(kind, Json::object::<&str>([]))
    }
}

/// A replay input for an event already in sanitized form (what the reducer sees).
pub fn input(event: &EngineEvent, decision: Option<Surrogate>) -> ReplayInput {
    ReplayInput {
        decision_surrogate: decision,
        normalizer_version: NORMALIZER_VERSION_DEFAULT.to_owned(),
        observation_surrogate: None,
        reducer_event: event.clone(),
        reducer_version: REDUCER_V3.to_owned(),
        source_event_content_digest: event.content_digest(),
    }
}
