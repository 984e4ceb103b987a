//! Engine state of one scope (spec/engine.md §4), contract 3 (`ctx.engine-state-v3`).
//!
//! Nested leaf documents (plan rows, authorized materials, material identities, benefit audits)
//! are kept as validated [`Json`] so that their canonical encodings, and so every digest over
//! them, are exactly the reference's.

use std::collections::BTreeSet;

use crate::json::{Json, JsonError, JsonMap, JsonView};
use crate::protocol::{ACTION_KEYS, HostAction, SCOPE_KEYS, ScopeRef, exact_keys};

pub const STATE_SCHEMA_V3: &str = "ctx.engine-state-v3";

/// The 18 top-level keys of a contract-3 state, sorted.
pub const STATE_KEYS_V3: [&str; 18] = [
    "blocked_capability_ids",
    "blocked_deactivation_ids",
    "blocked_install_descriptor_digests",
    "capabilities",
    "committed_plan",
    "evidence",
    "host_descriptor_digest",
    "host_level",
    "install_policy_snapshot_digest",
    "last_manual_bundle",
    "pending_consents",
    "pending_effects",
    "revision",
    "rollback_requested_capability_ids",
    "scope",
    "session_status",
    "state_schema",
    "terminal_cleanup_notified_ids",
];

/// The 13 keys of a contract-1 ("historical") state. This engine never produces or continues such
/// a stream, so the key set is recognised only to refuse it.
const STATE_KEYS_V1: [&str; 13] = [
    "blocked_capability_ids",
    "blocked_deactivation_ids",
    "capabilities",
    "evidence",
    "host_descriptor_digest",
    "host_level",
    "last_manual_bundle",
    "pending_effects",
    "revision",
    "rollback_requested_capability_ids",
    "scope",
    "session_status",
    "terminal_cleanup_notified_ids",
];

const CAPABILITY_KEYS: [&str; 11] = [
    "activation",
    "activation_lease_id",
    "catalog_snapshot_id",
    "current_authorized_material",
    "installation",
    "leases",
    "material_identity",
    "plan_id",
    "rollback_held",
    "rollback_owner_id",
    "selection",
];

const PLAN_KEYS: [&str; 7] = [
    "abstention_code",
    "benefit_audit",
    "capabilities",
    "catalog_snapshot_id",
    "decision_digest",
    "plan_id",
    "status",
];

/// A state value (decoded or built in memory) breaks the projection contract. The message is the
/// reference's sentence, so callers and tests can match it exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StateError {
    message: String,
}

impl StateError {
    pub fn new(message: impl Into<String>) -> StateError {
        StateError {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

pub(crate) fn serr<T>(message: impl Into<String>) -> Result<T, StateError> {
    Err(StateError::new(message))
}

/// The reference renders offending values with Python's `repr`; strings are what matters in
/// practice, other values fall back to their canonical JSON.
pub(crate) fn py_repr(v: &Json) -> String {
    match v {
        Json::Str(s) => format!("'{s}'"),
        Json::Null => "None".to_owned(),
        Json::Bool(true) => "True".to_owned(),
        Json::Bool(false) => "False".to_owned(),
        other => other.to_cj(),
    }
}

/// Requires `v` to be an object whose key set is exactly `fields`; unknown keys are reported before
/// missing ones, each list sorted and comma-joined as the reference does.
pub(crate) fn exact_fields<'a>(
    v: &'a Json,
    fields: &[&str],
    object: &str,
) -> Result<&'a JsonMap, StateError> {
    exact_keys(v, fields)
        .map_err(|f| StateError::new(f.sentence(object, "a JSON object", "field(s)")))
}

/// Member `key` of a mapping already checked by [`exact_fields`]; `Null` stands in for the absent
/// key, which cannot occur, so no path panics.
fn member<'a>(m: &'a JsonMap, key: &str) -> &'a Json {
    m.get(key).unwrap_or(&Json::Null)
}

fn text_member(m: &JsonMap, key: &str) -> Result<String, StateError> {
    match member(m, key) {
        Json::Str(s) => Ok(s.clone()),
        _ => serr(format!("{key} must be a non-empty trimmed string")),
    }
}

fn opt_text_member(m: &JsonMap, key: &str) -> Result<Option<String>, StateError> {
    match member(m, key) {
        Json::Null => Ok(None),
        Json::Str(s) => Ok(Some(s.clone())),
        _ => serr(format!("{key} must be a non-empty trimmed string")),
    }
}

fn array<'a>(v: &'a Json, name: &str) -> Result<&'a [Json], StateError> {
    v.as_arr()
        .ok_or_else(|| StateError::new(format!("{name} must be a JSON array")))
}

fn string_list(v: &Json, name: &str) -> Result<Vec<String>, StateError> {
    array(v, name)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Json::Str(s) => Ok(s.clone()),
            _ => serr(format!("{name}[{i}] must be a non-empty trimmed string")),
        })
        .collect()
}

/// Parses a state enumeration, reporting an unknown value the reference's way.
fn state_enum<T>(v: &Json, parse: fn(&str) -> Option<T>, what: &str) -> Result<T, StateError> {
    v.as_str()
        .and_then(parse)
        .ok_or_else(|| StateError::new(format!("unknown {what} {}", py_repr(v))))
}

macro_rules! state_enum {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[rkyv(derive(Debug, PartialEq, Eq))]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

// The derives generate resolver types without Debug impls; the lint is silenced only here.
#[allow(missing_debug_implementations)]
mod enums {
    state_enum!(HostLevel {
        QueryOnly => "query-only",
        Observing => "observing",
        Activating => "activating",
        Managing => "managing",
        PromptContextActivate => "prompt-context-activate",
        PromptContextExperiment => "prompt-context-experiment",
    });
    state_enum!(SessionStatus { Active => "active", Ended => "ended" });
    state_enum!(Activation { Inactive => "inactive", Active => "active" });
    state_enum!(Installation { Absent => "absent", Installed => "installed" });
    state_enum!(Exposure { Unexposed => "unexposed", Prepared => "prepared", Submitted => "submitted" });
    state_enum!(Invocation {
        NotInvoked => "not-invoked",
        InvokedFailed => "invoked-failed",
        InvokedSucceeded => "invoked-succeeded",
    });
    state_enum!(EffectKind {
        Install => "install",
        Activate => "activate",
        RollbackActivate => "rollback-activate",
        Deactivate => "deactivate",
        Prepare => "prepare",
        PromptContext => "prompt-context",
    });
}
pub use enums::{
    Activation, EffectKind, Exposure, HostLevel, Installation, Invocation, SessionStatus,
};

impl HostLevel {
    /// Levels at which the reducer emits lifecycle actions.
    pub fn is_lifecycle(self) -> bool {
        matches!(self, HostLevel::Activating | HostLevel::Managing)
    }
}

/// One task's claim on an activation.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Lease {
    pub exposure_id: String,
    pub lease_id: String,
    pub owner_id: String,
}

impl Lease {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("exposure_id", JsonView::Str(&self.exposure_id)),
            ("lease_id", JsonView::Str(&self.lease_id)),
            ("owner_id", JsonView::Str(&self.owner_id)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }
}

/// Runtime state of one selected, non-manual capability.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct CapabilityState {
    pub activation: Activation,
    pub activation_lease_id: Option<String>,
    pub catalog_snapshot_id: String,
    /// An AuthorizedMaterial mapping, or `Json::Null`.
    pub current_authorized_material: Json,
    pub installation: Installation,
    /// Sorted by lease id.
    pub leases: Vec<Lease>,
    /// A MaterialIdentity mapping.
    pub material_identity: Json,
    pub plan_id: String,
    pub rollback_held: bool,
    pub rollback_owner_id: Option<String>,
    /// The schema-v3 plan row (13 keys) this runtime state was created from.
    pub selection: Json,
}

impl CapabilityState {
    pub fn capability_id(&self) -> &str {
        self.selection.get_str("capability_id").unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.selection.get_str("kind").unwrap_or_default()
    }

    /// The catalog entry digest of the selection (the capability's `source_digest`).
    pub fn source_digest(&self) -> &str {
        self.selection
            .get_str("catalog_entry_digest")
            .unwrap_or_default()
    }

    pub fn actionability(&self) -> &str {
        self.selection.get_str("actionability").unwrap_or_default()
    }

    /// The `authority` mapping of the selection.
    pub fn authority(&self) -> &Json {
        self.selection.get("authority").unwrap_or(&Json::Null)
    }

    pub fn authority_type(&self) -> &str {
        self.authority().get_str("type").unwrap_or_default()
    }

    /// The install descriptor digest of an install selection.
    pub fn install_descriptor_digest(&self) -> Option<&str> {
        self.selection.get_str("install_descriptor_digest")
    }

    pub fn is_active(&self) -> bool {
        self.activation == Activation::Active
    }

    pub fn is_desired(&self) -> bool {
        !self.leases.is_empty()
    }

    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("activation", JsonView::Str(self.activation.as_str())),
            (
                "activation_lease_id",
                JsonView::opt_str(self.activation_lease_id.as_deref()),
            ),
            (
                "catalog_snapshot_id",
                JsonView::Str(&self.catalog_snapshot_id),
            ),
            (
                "current_authorized_material",
                JsonView::Json(&self.current_authorized_material),
            ),
            ("installation", JsonView::Str(self.installation.as_str())),
            (
                "leases",
                JsonView::Arr(self.leases.iter().map(Lease::view).collect()),
            ),
            ("material_identity", JsonView::Json(&self.material_identity)),
            ("plan_id", JsonView::Str(&self.plan_id)),
            ("rollback_held", JsonView::Bool(self.rollback_held)),
            (
                "rollback_owner_id",
                JsonView::opt_str(self.rollback_owner_id.as_deref()),
            ),
            ("selection", JsonView::Json(&self.selection)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }
}

/// Exposure and invocation evidence per (exposure, capability).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Evidence {
    pub capability_id: String,
    pub exposure: Exposure,
    pub exposure_id: String,
    pub invocation: Invocation,
    pub source_digest: String,
}

impl Evidence {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("capability_id", JsonView::Str(&self.capability_id)),
            ("exposure", JsonView::Str(self.exposure.as_str())),
            ("exposure_id", JsonView::Str(&self.exposure_id)),
            ("invocation", JsonView::Str(self.invocation.as_str())),
            ("source_digest", JsonView::Str(&self.source_digest)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }
}

/// An emitted physical action awaiting its receipt.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PendingEffect {
    pub action: HostAction,
    pub effect: EffectKind,
    /// Only for `activate`: the displaced capability that must come back if this one fails.
    pub rollback_capability_id: Option<String>,
}

impl PendingEffect {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("action", self.action.view()),
            ("effect", JsonView::Str(self.effect.as_str())),
            (
                "rollback_capability_id",
                JsonView::opt_str(self.rollback_capability_id.as_deref()),
            ),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    pub fn entity(&self) -> Option<&str> {
        self.action.entity_id.as_deref()
    }
}

/// A consent request awaiting the decision that may only come as the very next event.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PendingConsent {
    pub consent_id: String,
    pub install_action: HostAction,
}

impl PendingConsent {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("consent_id", JsonView::Str(&self.consent_id)),
            ("install_action", self.install_action.view()),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }
}

/// The last committed schema-v3 plan.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct CommittedPlan {
    pub abstention_code: Option<String>,
    /// A BenefitAuditReference mapping, or `Json::Null` for degraded plans.
    pub benefit_audit: Json,
    /// Schema-v3 plan rows in canonical order.
    pub capabilities: Vec<Json>,
    pub catalog_snapshot_id: String,
    pub decision_digest: String,
    pub plan_id: String,
    /// `ready`, `abstained` or `degraded`.
    pub status: String,
}

impl CommittedPlan {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            (
                "abstention_code",
                JsonView::opt_str(self.abstention_code.as_deref()),
            ),
            ("benefit_audit", JsonView::Json(&self.benefit_audit)),
            (
                "capabilities",
                JsonView::Arr(self.capabilities.iter().map(JsonView::Json).collect()),
            ),
            (
                "catalog_snapshot_id",
                JsonView::Str(&self.catalog_snapshot_id),
            ),
            ("decision_digest", JsonView::Str(&self.decision_digest)),
            ("plan_id", JsonView::Str(&self.plan_id)),
            ("status", JsonView::Str(&self.status)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    pub fn row(&self, capability_id: &str) -> Option<&Json> {
        self.capabilities
            .iter()
            .find(|r| r.get_str("capability_id") == Some(capability_id))
    }

    pub fn is_ready(&self) -> bool {
        self.status == "ready"
    }
}

/// The engine state after a revision of one stream.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EngineState {
    pub revision: u64,
    pub scope: ScopeRef,
    pub host_level: HostLevel,
    pub host_descriptor_digest: String,
    pub session_status: SessionStatus,
    /// Sorted by capability id, unique.
    pub capabilities: Vec<CapabilityState>,
    /// In insertion order.
    pub pending_effects: Vec<PendingEffect>,
    /// Sorted by (exposure_id, capability_id), unique.
    pub evidence: Vec<Evidence>,
    pub last_manual_bundle: Vec<String>,
    pub blocked_capability_ids: Vec<String>,
    pub blocked_deactivation_ids: Vec<String>,
    pub rollback_requested_capability_ids: Vec<String>,
    pub terminal_cleanup_notified_ids: Vec<String>,
    pub committed_plan: Option<CommittedPlan>,
    pub pending_consents: Vec<PendingConsent>,
    pub blocked_install_descriptor_digests: Vec<String>,
    pub install_policy_snapshot_digest: Option<String>,
}

impl EngineState {
    /// The state after `SessionStarted`: revision 1, nothing else.
    pub fn started(
        scope: ScopeRef,
        host_level: HostLevel,
        host_descriptor_digest: String,
    ) -> EngineState {
        EngineState {
            revision: 1,
            scope,
            host_level,
            host_descriptor_digest,
            session_status: SessionStatus::Active,
            capabilities: Vec::new(),
            pending_effects: Vec::new(),
            evidence: Vec::new(),
            last_manual_bundle: Vec::new(),
            blocked_capability_ids: Vec::new(),
            blocked_deactivation_ids: Vec::new(),
            rollback_requested_capability_ids: Vec::new(),
            terminal_cleanup_notified_ids: Vec::new(),
            committed_plan: None,
            pending_consents: Vec::new(),
            blocked_install_descriptor_digests: Vec::new(),
            install_policy_snapshot_digest: None,
        }
    }

    /// The state mapping with all 18 contract-3 keys.
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("revision", JsonView::uint(self.revision)),
            ("scope", self.scope.view()),
            ("host_level", JsonView::Str(self.host_level.as_str())),
            (
                "host_descriptor_digest",
                JsonView::Str(&self.host_descriptor_digest),
            ),
            (
                "session_status",
                JsonView::Str(self.session_status.as_str()),
            ),
            (
                "capabilities",
                JsonView::Arr(
                    self.capabilities
                        .iter()
                        .map(CapabilityState::view)
                        .collect(),
                ),
            ),
            (
                "pending_effects",
                JsonView::Arr(
                    self.pending_effects
                        .iter()
                        .map(PendingEffect::view)
                        .collect(),
                ),
            ),
            (
                "evidence",
                JsonView::Arr(self.evidence.iter().map(Evidence::view).collect()),
            ),
            (
                "last_manual_bundle",
                JsonView::strs(&self.last_manual_bundle),
            ),
            (
                "blocked_capability_ids",
                JsonView::strs(&self.blocked_capability_ids),
            ),
            (
                "blocked_deactivation_ids",
                JsonView::strs(&self.blocked_deactivation_ids),
            ),
            (
                "rollback_requested_capability_ids",
                JsonView::strs(&self.rollback_requested_capability_ids),
            ),
            (
                "terminal_cleanup_notified_ids",
                JsonView::strs(&self.terminal_cleanup_notified_ids),
            ),
            ("state_schema", JsonView::Str(STATE_SCHEMA_V3)),
            (
                "committed_plan",
                self.committed_plan
                    .as_ref()
                    .map_or(JsonView::Null, CommittedPlan::view),
            ),
            (
                "pending_consents",
                JsonView::Arr(
                    self.pending_consents
                        .iter()
                        .map(PendingConsent::view)
                        .collect(),
                ),
            ),
            (
                "blocked_install_descriptor_digests",
                JsonView::strs(&self.blocked_install_descriptor_digests),
            ),
            (
                "install_policy_snapshot_digest",
                JsonView::opt_str(self.install_policy_snapshot_digest.as_deref()),
            ),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    /// `H(CJ(state))`.
    pub fn digest(&self) -> String {
        crate::digest::sha256_hex(&self.view().to_cj())
    }

    pub fn capability(&self, id: &str) -> Option<&CapabilityState> {
        self.capabilities.iter().find(|c| c.capability_id() == id)
    }

    pub fn capability_mut(&mut self, id: &str) -> Option<&mut CapabilityState> {
        self.capabilities
            .iter_mut()
            .find(|c| c.capability_id() == id)
    }

    pub fn active_capability_ids(&self) -> Vec<&str> {
        self.capabilities
            .iter()
            .filter(|c| c.is_active())
            .map(CapabilityState::capability_id)
            .collect()
    }

    pub fn desired_capability_ids(&self) -> Vec<&str> {
        self.capabilities
            .iter()
            .filter(|c| c.is_desired())
            .map(CapabilityState::capability_id)
            .collect()
    }

    /// Evidence for (exposure, capability); a missing entry reads as unexposed / not invoked.
    pub fn evidence_for(&self, exposure_id: &str, capability_id: &str) -> Option<&Evidence> {
        self.evidence
            .iter()
            .find(|e| e.exposure_id == exposure_id && e.capability_id == capability_id)
    }

    pub fn pending_effect_for(&self, capability_id: &str) -> Option<&PendingEffect> {
        self.pending_effects
            .iter()
            .find(|p| p.entity() == Some(capability_id))
    }

    pub fn pending_effect_by_action(&self, action_id: &str) -> Option<&PendingEffect> {
        self.pending_effects
            .iter()
            .find(|p| p.action.action_id == action_id)
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding. Decoders check key sets and JSON types only; every value rule lives in
// `EngineState::validate` (state_check.rs) so that states built in memory by the reducer and
// states decoded from the journal are held to one and the same contract.
// ---------------------------------------------------------------------------------------------

impl Lease {
    pub fn from_json(v: &Json) -> Result<Lease, StateError> {
        let m = exact_fields(v, &["exposure_id", "lease_id", "owner_id"], "lease")?;
        Ok(Lease {
            exposure_id: text_member(m, "exposure_id")?,
            lease_id: text_member(m, "lease_id")?,
            owner_id: text_member(m, "owner_id")?,
        })
    }
}

impl CapabilityState {
    /// Decodes the v3 JSON keys. The selection, material identity and authorized material stay
    /// JSON documents; here they only need the right container type.
    pub fn from_json(v: &Json) -> Result<CapabilityState, StateError> {
        let m = exact_fields(v, &CAPABILITY_KEYS, "schema-v3 capability state")?;
        let material_identity = member(m, "material_identity");
        if material_identity.as_obj().is_none() {
            return serr(
                "schema-v3 material_identity or authorized lineage is invalid: \
                 material identity must be a JSON object",
            );
        }
        let current = member(m, "current_authorized_material");
        if !current.is_null() && current.as_obj().is_none() {
            return serr(
                "schema-v3 material_identity or authorized lineage is invalid: \
                 authorized material must be a JSON object",
            );
        }
        let leases = array(member(m, "leases"), "schema-v3 capability leases")?
            .iter()
            .map(Lease::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        let rollback_held = member(m, "rollback_held")
            .as_bool()
            .ok_or_else(|| StateError::new("rollback_held must be a boolean"))?;
        Ok(CapabilityState {
            activation: state_enum(
                member(m, "activation"),
                Activation::parse,
                "activation state",
            )?,
            activation_lease_id: opt_text_member(m, "activation_lease_id")?,
            catalog_snapshot_id: text_member(m, "catalog_snapshot_id")?,
            current_authorized_material: current.clone(),
            installation: state_enum(
                member(m, "installation"),
                Installation::parse,
                "installation state",
            )?,
            leases,
            material_identity: material_identity.clone(),
            plan_id: text_member(m, "plan_id")?,
            rollback_held,
            rollback_owner_id: opt_text_member(m, "rollback_owner_id")?,
            selection: member(m, "selection").clone(),
        })
    }
}

impl Evidence {
    pub fn from_json(v: &Json) -> Result<Evidence, StateError> {
        let m = exact_fields(
            v,
            &[
                "capability_id",
                "exposure",
                "exposure_id",
                "invocation",
                "source_digest",
            ],
            "capability evidence",
        )?;
        Ok(Evidence {
            capability_id: text_member(m, "capability_id")?,
            exposure: state_enum(member(m, "exposure"), Exposure::parse, "exposure state")?,
            exposure_id: text_member(m, "exposure_id")?,
            invocation: state_enum(
                member(m, "invocation"),
                Invocation::parse,
                "invocation state",
            )?,
            source_digest: text_member(m, "source_digest")?,
        })
    }
}

/// Decodes a stored action: the state contract requires the exact 17 keys and exact scope and
/// privacy mappings (the action decoder alone would default missing privacy members), then any
/// action decoding fault collapses into `invalid`.
fn decode_action(v: &Json, object: &str, invalid: &str) -> Result<HostAction, StateError> {
    let m = exact_fields(v, &ACTION_KEYS, object)?;
    exact_fields(member(m, "scope"), &SCOPE_KEYS, &format!("{object} scope"))?;
    exact_fields(
        member(m, "privacy"),
        &["classification", "retention"],
        &format!("{object} privacy"),
    )?;
    HostAction::from_json(v).map_err(|_| StateError::new(invalid))
}

impl PendingEffect {
    pub fn from_json(v: &Json) -> Result<PendingEffect, StateError> {
        let m = exact_fields(
            v,
            &["action", "effect", "rollback_capability_id"],
            "pending effect",
        )?;
        let action = decode_action(
            member(m, "action"),
            "pending action",
            "pending effect contains an invalid action",
        )?;
        Ok(PendingEffect {
            action,
            effect: state_enum(member(m, "effect"), EffectKind::parse, "pending effect")?,
            rollback_capability_id: opt_text_member(m, "rollback_capability_id")?,
        })
    }
}

impl PendingConsent {
    pub fn from_json(v: &Json) -> Result<PendingConsent, StateError> {
        let m = exact_fields(v, &["consent_id", "install_action"], "pending consent")?;
        let install_action = decode_action(
            member(m, "install_action"),
            "install action",
            "pending consent contains an invalid action",
        )?;
        Ok(PendingConsent {
            consent_id: text_member(m, "consent_id")?,
            install_action,
        })
    }
}

impl CommittedPlan {
    /// Decodes the seven plan keys. Rows and the audit stay JSON documents (their shape is part
    /// of validation).
    pub fn from_json(v: &Json) -> Result<CommittedPlan, StateError> {
        let m = exact_fields(v, &PLAN_KEYS, "schema-v3 committed plan")?;
        let status = match member(m, "status") {
            Json::Str(s) => s.clone(),
            _ => return serr("schema-v3 committed plan status is unsupported"),
        };
        Ok(CommittedPlan {
            abstention_code: opt_text_member(m, "abstention_code")?,
            benefit_audit: member(m, "benefit_audit").clone(),
            capabilities: array(
                member(m, "capabilities"),
                "schema-v3 committed plan capabilities",
            )?
            .to_vec(),
            catalog_snapshot_id: text_member(m, "catalog_snapshot_id")?,
            decision_digest: text_member(m, "decision_digest")?,
            plan_id: text_member(m, "plan_id")?,
            status,
        })
    }
}

impl EngineState {
    /// Decodes a persisted contract-3 state mapping and checks every construction and persisted
    /// invariant ([`EngineState::validate_persisted`]). A contract-1 key set is refused: this
    /// engine cannot continue a historical stream.
    pub fn from_json(v: &Json) -> Result<EngineState, StateError> {
        let Some(m) = v.as_obj() else {
            return serr("engine state must be a JSON object");
        };
        let keys: BTreeSet<&str> = m.keys().map(String::as_str).collect();
        if keys == BTreeSet::from(STATE_KEYS_V3) {
            if member(m, "state_schema").as_str() != Some(STATE_SCHEMA_V3) {
                return serr("schema-v3 engine state discriminator is unsupported");
            }
        } else if keys == BTreeSet::from(STATE_KEYS_V1) {
            // The historical contract is complete in itself but not supported here.
            return serr("engine state does not match a complete supported schema");
        } else {
            // The contract-1 keys are a subset of the contract-3 keys, so the union is the latter.
            let unknown: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|k| !STATE_KEYS_V3.contains(k))
                .collect();
            if !unknown.is_empty() {
                return serr(format!(
                    "engine state has unknown field(s): {}",
                    unknown.join(", ")
                ));
            }
            return serr("engine state does not match a complete supported schema");
        }
        let scope_value = member(m, "scope");
        exact_fields(scope_value, &SCOPE_KEYS, "engine state scope")?;
        let scope = ScopeRef::from_json(scope_value)
            .map_err(|_| StateError::new("engine state contains an invalid scope"))?;
        let revision = match member(m, "revision") {
            Json::Int(i) if *i >= 1 => u64::try_from(*i).unwrap_or(0),
            _ => return serr("revision must be an integer >= 1"),
        };
        let committed_plan = match member(m, "committed_plan") {
            Json::Null => None,
            plan => Some(CommittedPlan::from_json(plan)?),
        };
        let state = EngineState {
            revision,
            scope,
            host_level: state_enum(member(m, "host_level"), HostLevel::parse, "host_level")?,
            host_descriptor_digest: text_member(m, "host_descriptor_digest")?,
            session_status: state_enum(
                member(m, "session_status"),
                SessionStatus::parse,
                "session_status",
            )?,
            capabilities: array(member(m, "capabilities"), "capabilities")?
                .iter()
                .map(CapabilityState::from_json)
                .collect::<Result<_, _>>()?,
            pending_effects: array(member(m, "pending_effects"), "pending_effects")?
                .iter()
                .map(PendingEffect::from_json)
                .collect::<Result<_, _>>()?,
            evidence: array(member(m, "evidence"), "evidence")?
                .iter()
                .map(Evidence::from_json)
                .collect::<Result<_, _>>()?,
            last_manual_bundle: string_list(member(m, "last_manual_bundle"), "last_manual_bundle")?,
            blocked_capability_ids: string_list(
                member(m, "blocked_capability_ids"),
                "blocked_capability_ids",
            )?,
            blocked_deactivation_ids: string_list(
                member(m, "blocked_deactivation_ids"),
                "blocked_deactivation_ids",
            )?,
            rollback_requested_capability_ids: string_list(
                member(m, "rollback_requested_capability_ids"),
                "rollback_requested_capability_ids",
            )?,
            terminal_cleanup_notified_ids: string_list(
                member(m, "terminal_cleanup_notified_ids"),
                "terminal_cleanup_notified_ids",
            )?,
            committed_plan,
            pending_consents: array(member(m, "pending_consents"), "pending_consents")?
                .iter()
                .map(PendingConsent::from_json)
                .collect::<Result<_, _>>()?,
            blocked_install_descriptor_digests: string_list(
                member(m, "blocked_install_descriptor_digests"),
                "blocked_install_descriptor_digests",
            )?,
            install_policy_snapshot_digest: opt_text_member(m, "install_policy_snapshot_digest")?,
        };
        state.validate_persisted()?;
        Ok(state)
    }

    /// Decodes state JSON text that must be byte-identical to its own canonical re-encoding.
    pub fn from_canonical_text(text: &str) -> Result<EngineState, StateError> {
        let v = Json::parse(text).map_err(|e| match e {
            JsonError::DuplicateKey { .. } => StateError::new(e.to_string()),
            _ => StateError::new("state must be valid JSON"),
        })?;
        if v.as_obj().is_none() {
            return serr("state JSON root must be an object");
        }
        if v.to_cj() != text {
            return serr("state JSON must use canonical encoding");
        }
        let state = EngineState::from_json(&v)?;
        // Decoding keeps every value verbatim, so this holds; checked anyway because the stored
        // text is what the state digest is taken over.
        if state.view().to_cj() != text {
            return serr("state JSON must use canonical encoding");
        }
        Ok(state)
    }

    /// The canonical JSON text of the state (`CJ(state)`).
    pub fn to_canonical_text(&self) -> String {
        self.view().to_cj()
    }
}

// ---------------------------------------------------------------------------------------------
// Pure read and maintenance helpers for the reducer and the service.
// ---------------------------------------------------------------------------------------------

/// The descriptor digests an install selection answers for: the authority descriptor's digest
/// (what consent denial and install failure block) and the presentation's copy of it.
pub(crate) fn install_descriptor_digests(selection: &Json) -> Vec<&str> {
    let authority = selection.get("authority").unwrap_or(&Json::Null);
    if authority.get_str("type") != Some("install") {
        return Vec::new();
    }
    let mut out: Vec<&str> = authority
        .get("descriptor")
        .and_then(|d| d.get_str("descriptor_digest"))
        .into_iter()
        .chain(selection.get_str("install_descriptor_digest"))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn sort_dedup(v: &mut Vec<String>) {
    v.sort();
    v.dedup();
}

impl EngineState {
    /// The pending consent whose install action targets `capability_id`.
    pub fn pending_consent_for(&self, capability_id: &str) -> Option<&PendingConsent> {
        self.pending_consents
            .iter()
            .find(|c| c.install_action.entity_id.as_deref() == Some(capability_id))
    }

    pub fn pending_consent_by_id(&self, consent_id: &str) -> Option<&PendingConsent> {
        self.pending_consents
            .iter()
            .find(|c| c.consent_id == consent_id)
    }

    /// Whether `capability_id` is a retired capability the reducer removes (spec/engine.md §11):
    /// the committed plan is ready or abstained and does not list it, and nothing holds it — no
    /// activation, lease, rollback hold or request, pending effect or consent.
    pub fn is_prunable(&self, capability_id: &str) -> bool {
        let Some(plan) = &self.committed_plan else {
            return false;
        };
        if !matches!(plan.status.as_str(), "ready" | "abstained")
            || plan.row(capability_id).is_some()
        {
            return false;
        }
        let Some(c) = self.capability(capability_id) else {
            return false;
        };
        let named_by_effect = self.pending_effects.iter().any(|p| {
            p.entity() == Some(capability_id)
                || p.rollback_capability_id.as_deref() == Some(capability_id)
        });
        !c.is_active()
            && c.leases.is_empty()
            && !c.rollback_held
            && !self
                .rollback_requested_capability_ids
                .iter()
                .any(|i| i == capability_id)
            && !named_by_effect
            && self.pending_consent_for(capability_id).is_none()
    }

    /// Removes `capability_id` with its evidence, its id in every id list and its install
    /// descriptor digest in `blocked_install_descriptor_digests`. Callers check
    /// [`EngineState::is_prunable`] first; returns whether a capability was removed.
    pub fn prune(&mut self, capability_id: &str) -> bool {
        let Some(index) = self
            .capabilities
            .iter()
            .position(|c| c.capability_id() == capability_id)
        else {
            return false;
        };
        let removed = self.capabilities.remove(index);
        let digests = install_descriptor_digests(&removed.selection);
        self.blocked_install_descriptor_digests
            .retain(|d| !digests.contains(&d.as_str()));
        self.evidence.retain(|e| e.capability_id != capability_id);
        // `last_manual_bundle` is left alone: it lists manual plan rows, and a prunable capability
        // is by definition not a plan row.
        for list in [
            &mut self.blocked_capability_ids,
            &mut self.blocked_deactivation_ids,
            &mut self.rollback_requested_capability_ids,
            &mut self.terminal_cleanup_notified_ids,
        ] {
            list.retain(|i| i != capability_id);
        }
        true
    }

    /// Re-establishes every ordering rule after a mutation: capabilities by id, each capability's
    /// leases by lease id, evidence by (exposure, capability), id and digest lists sorted and
    /// unique. Pending effects keep insertion order, which is meaningful.
    pub fn sort_canonical(&mut self) {
        self.capabilities
            .sort_by(|a, b| a.capability_id().cmp(b.capability_id()));
        for c in &mut self.capabilities {
            c.leases.sort_by(|a, b| a.lease_id.cmp(&b.lease_id));
        }
        self.evidence.sort_by(|a, b| {
            (a.exposure_id.as_str(), a.capability_id.as_str())
                .cmp(&(b.exposure_id.as_str(), b.capability_id.as_str()))
        });
        for list in [
            &mut self.last_manual_bundle,
            &mut self.blocked_capability_ids,
            &mut self.blocked_deactivation_ids,
            &mut self.rollback_requested_capability_ids,
            &mut self.terminal_cleanup_notified_ids,
            &mut self.blocked_install_descriptor_digests,
        ] {
            sort_dedup(list);
        }
    }
}
