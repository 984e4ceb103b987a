//! Engine state of one scope (reference engine-core §4), contract 3 (`ctx.engine-state-v3`).
//!
//! Nested leaf documents (plan rows, authorized materials, material identities, benefit audits)
//! are kept as validated [`Json`] so that their canonical encodings, and so every digest over
//! them, are exactly the reference's.

use crate::json::{Json, JsonMap};
use crate::model::{HostAction, ScopeRef};

pub const STATE_SCHEMA_V3: &str = "ctx.engine-state-v3";

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
pub use enums::{Activation, EffectKind, Exposure, HostLevel, Installation, Invocation, SessionStatus};

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
    pub fn to_json(&self) -> Json {
        Json::object([
            ("exposure_id", Json::str(&self.exposure_id)),
            ("lease_id", Json::str(&self.lease_id)),
            ("owner_id", Json::str(&self.owner_id)),
        ])
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
        self.selection.get_str("catalog_entry_digest").unwrap_or_default()
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

    pub fn to_json(&self) -> Json {
        Json::object([
            ("activation", Json::str(self.activation.as_str())),
            ("activation_lease_id", Json::opt_str(self.activation_lease_id.as_deref())),
            ("catalog_snapshot_id", Json::str(&self.catalog_snapshot_id)),
            ("current_authorized_material", self.current_authorized_material.clone()),
            ("installation", Json::str(self.installation.as_str())),
            ("leases", Json::Arr(self.leases.iter().map(Lease::to_json).collect())),
            ("material_identity", self.material_identity.clone()),
            ("plan_id", Json::str(&self.plan_id)),
            ("rollback_held", Json::Bool(self.rollback_held)),
            ("rollback_owner_id", Json::opt_str(self.rollback_owner_id.as_deref())),
            ("selection", self.selection.clone()),
        ])
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
    pub fn to_json(&self) -> Json {
        Json::object([
            ("capability_id", Json::str(&self.capability_id)),
            ("exposure", Json::str(self.exposure.as_str())),
            ("exposure_id", Json::str(&self.exposure_id)),
            ("invocation", Json::str(self.invocation.as_str())),
            ("source_digest", Json::str(&self.source_digest)),
        ])
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
    pub fn to_json(&self) -> Json {
        Json::object([
            ("action", self.action.to_json()),
            ("effect", Json::str(self.effect.as_str())),
            ("rollback_capability_id", Json::opt_str(self.rollback_capability_id.as_deref())),
        ])
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
    pub fn to_json(&self) -> Json {
        Json::object([
            ("consent_id", Json::str(&self.consent_id)),
            ("install_action", self.install_action.to_json()),
        ])
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
    pub fn to_json(&self) -> Json {
        Json::object([
            ("abstention_code", Json::opt_str(self.abstention_code.as_deref())),
            ("benefit_audit", self.benefit_audit.clone()),
            ("capabilities", Json::Arr(self.capabilities.clone())),
            ("catalog_snapshot_id", Json::str(&self.catalog_snapshot_id)),
            ("decision_digest", Json::str(&self.decision_digest)),
            ("plan_id", Json::str(&self.plan_id)),
            ("status", Json::str(&self.status)),
        ])
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

fn strings(v: &[String]) -> Json {
    Json::Arr(v.iter().map(Json::str).collect())
}

impl EngineState {
    /// The state after `SessionStarted`: revision 1, nothing else.
    pub fn started(scope: ScopeRef, host_level: HostLevel, host_descriptor_digest: String) -> EngineState {
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
    pub fn to_json(&self) -> Json {
        let mut m = JsonMap::new();
        m.insert("revision".into(), Json::from(self.revision));
        m.insert("scope".into(), self.scope.to_json());
        m.insert("host_level".into(), Json::str(self.host_level.as_str()));
        m.insert("host_descriptor_digest".into(), Json::str(&self.host_descriptor_digest));
        m.insert("session_status".into(), Json::str(self.session_status.as_str()));
        m.insert(
            "capabilities".into(),
            Json::Arr(self.capabilities.iter().map(CapabilityState::to_json).collect()),
        );
        m.insert(
            "pending_effects".into(),
            Json::Arr(self.pending_effects.iter().map(PendingEffect::to_json).collect()),
        );
        m.insert("evidence".into(), Json::Arr(self.evidence.iter().map(Evidence::to_json).collect()));
        m.insert("last_manual_bundle".into(), strings(&self.last_manual_bundle));
        m.insert("blocked_capability_ids".into(), strings(&self.blocked_capability_ids));
        m.insert("blocked_deactivation_ids".into(), strings(&self.blocked_deactivation_ids));
        m.insert(
            "rollback_requested_capability_ids".into(),
            strings(&self.rollback_requested_capability_ids),
        );
        m.insert("terminal_cleanup_notified_ids".into(), strings(&self.terminal_cleanup_notified_ids));
        m.insert("state_schema".into(), Json::str(STATE_SCHEMA_V3));
        m.insert(
            "committed_plan".into(),
            self.committed_plan.as_ref().map_or(Json::Null, CommittedPlan::to_json),
        );
        m.insert(
            "pending_consents".into(),
            Json::Arr(self.pending_consents.iter().map(PendingConsent::to_json).collect()),
        );
        m.insert(
            "blocked_install_descriptor_digests".into(),
            strings(&self.blocked_install_descriptor_digests),
        );
        m.insert(
            "install_policy_snapshot_digest".into(),
            Json::opt_str(self.install_policy_snapshot_digest.as_deref()),
        );
        Json::Obj(m)
    }

    /// `H(CJ(state))`.
    pub fn digest(&self) -> String {
        crate::check::cj_digest(&self.to_json())
    }

    pub fn capability(&self, id: &str) -> Option<&CapabilityState> {
        self.capabilities.iter().find(|c| c.capability_id() == id)
    }

    pub fn capability_mut(&mut self, id: &str) -> Option<&mut CapabilityState> {
        self.capabilities.iter_mut().find(|c| c.capability_id() == id)
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
        self.pending_effects.iter().find(|p| p.action.action_id == action_id)
    }
}
