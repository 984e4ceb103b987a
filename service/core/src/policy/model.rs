//! The install consent policy value (spec/policy.md §2) and install authorization routing
//! (spec/policy.md §6, §7, `route_install_authorization`).

use ctx_model::{CapabilityKind, Json, cja_digest, is_sha, validate_install_plan_descriptor};

use super::error::PolicyError;

/// The `schema` of a policy document and of its digest preimage.
pub const POLICY_SCHEMA: &str = "ctx.install-consent-policy-v1";
/// The five keys of a policy document, sorted.
pub const POLICY_KEYS: [&str; 5] = [
    "agent_mode",
    "mcp_server_mode",
    "policy_digest",
    "schema",
    "skill_mode",
];

/// Reason code of routing row 1.
pub const REASON_PERMISSION_EXPANSION: &str = "permission-expansion-requires-consent";
/// Reason code of routing row 2.
pub const REASON_CREDENTIALS: &str = "credentials-require-consent";
/// Reason code of routing row 3.
pub const REASON_PREAPPROVED: &str = "matching-preapproved-policy";
/// Reason code of routing row 4.
pub const REASON_PER_INSTALL: &str = "per-install-consent-required";

/// How installs of one capability kind are consented to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InstallConsentMode {
    /// Every install asks the user (`ask-each-time`, the default).
    #[default]
    AskEachTime,
    /// Installs that need no extra permission or credential are granted by the policy itself
    /// (`preapproved-auto`).
    PreapprovedAuto,
}

impl InstallConsentMode {
    pub const ALL: [InstallConsentMode; 2] = [
        InstallConsentMode::AskEachTime,
        InstallConsentMode::PreapprovedAuto,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstallConsentMode::AskEachTime => "ask-each-time",
            InstallConsentMode::PreapprovedAuto => "preapproved-auto",
        }
    }

    /// The mode named by `text`; `None` for anything else (no trimming, no case folding).
    pub fn parse(text: &str) -> Option<InstallConsentMode> {
        InstallConsentMode::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
    }
}

impl std::fmt::Display for InstallConsentMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One consent mode per installable capability kind. Every value of this type is valid; the
/// digest is derived, never stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InstallConsentPolicy {
    pub skill_mode: InstallConsentMode,
    pub agent_mode: InstallConsentMode,
    pub mcp_server_mode: InstallConsentMode,
}

impl InstallConsentPolicy {
    /// Every kind `ask-each-time`.
    pub fn safe_default() -> InstallConsentPolicy {
        InstallConsentPolicy::default()
    }

    /// The four-key preimage of the digest: the three modes and the schema.
    fn digest_fields(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("agent_mode", Json::str(self.agent_mode.as_str())),
            ("mcp_server_mode", Json::str(self.mcp_server_mode.as_str())),
            ("schema", Json::str(POLICY_SCHEMA)),
            ("skill_mode", Json::str(self.skill_mode.as_str())),
        ]
    }

    /// `H(CJA({agent_mode, mcp_server_mode, schema, skill_mode}))`.
    pub fn policy_digest(&self) -> String {
        cja_digest(&Json::object(self.digest_fields()))
    }

    /// The mode governing installs of `kind` (`skill`, `agent`, `mcp-server`).
    pub fn mode_for(&self, kind: &str) -> Result<InstallConsentMode, PolicyError> {
        match CapabilityKind::parse(kind) {
            Some(CapabilityKind::Skill) => Ok(self.skill_mode),
            Some(CapabilityKind::Agent) => Ok(self.agent_mode),
            Some(CapabilityKind::McpServer) => Ok(self.mcp_server_mode),
            Some(CapabilityKind::Harness) | None => Err(PolicyError::NotInstallableKind),
        }
    }

    /// The policy document: the digest preimage plus `policy_digest`.
    pub fn to_json(&self) -> Json {
        let mut fields = self.digest_fields();
        fields.push(("policy_digest", Json::str(self.policy_digest())));
        Json::object(fields)
    }

    /// The canonical policy text: CJA of [`InstallConsentPolicy::to_json`] and one `\n`. These
    /// are exactly the bytes of every policy file.
    pub fn canonical_text(&self) -> String {
        let mut text = self.to_json().to_cja();
        text.push('\n');
        text
    }

    /// Decodes a policy document: exactly the five keys, the schema, three declared modes, a
    /// well-formed digest that equals the recomputed one. Checked in the reference's order.
    pub fn from_json(value: &Json) -> Result<InstallConsentPolicy, PolicyError> {
        let Some(m) = value.as_obj() else {
            return Err(PolicyError::NotAnObject);
        };
        let unknown: Vec<&str> = m
            .keys()
            .map(String::as_str)
            .filter(|k| !POLICY_KEYS.contains(k))
            .collect();
        if !unknown.is_empty() {
            return Err(PolicyError::UnknownFields(unknown.join(", ")));
        }
        let missing: Vec<&str> = POLICY_KEYS
            .into_iter()
            .filter(|k| !m.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(PolicyError::MissingFields(missing.join(", ")));
        }
        if value.get_str("schema") != Some(POLICY_SCHEMA) {
            return Err(PolicyError::SchemaUnsupported);
        }
        let mode = |field: &'static str| {
            value
                .get_str(field)
                .and_then(InstallConsentMode::parse)
                .ok_or(PolicyError::UndeclaredMode { field })
        };
        let policy = InstallConsentPolicy {
            skill_mode: mode("skill_mode")?,
            agent_mode: mode("agent_mode")?,
            mcp_server_mode: mode("mcp_server_mode")?,
        };
        let Some(supplied) = value.get_str("policy_digest").filter(|d| is_sha(d)) else {
            return Err(PolicyError::DigestFormat);
        };
        if supplied != policy.policy_digest() {
            return Err(PolicyError::DigestMismatch);
        }
        Ok(policy)
    }
}

/// Why an install was (or must be) authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionBasis {
    /// A person decides (`interactive`).
    Interactive,
    /// The persisted policy decides (`preapproved-policy`).
    PreapprovedPolicy,
}

impl DecisionBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionBasis::Interactive => "interactive",
            DecisionBasis::PreapprovedPolicy => "preapproved-policy",
        }
    }

    pub fn parse(text: &str) -> Result<DecisionBasis, PolicyError> {
        match text {
            "interactive" => Ok(DecisionBasis::Interactive),
            "preapproved-policy" => Ok(DecisionBasis::PreapprovedPolicy),
            _ => Err(PolicyError::UndeclaredDecisionBasis),
        }
    }
}

impl std::fmt::Display for DecisionBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pure routing result for one descriptor under one policy. It grants nothing by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallAuthorizationDecision {
    pub decision_basis: DecisionBasis,
    /// The digest of the policy that routed (the policy snapshot a grant must cite).
    pub policy_snapshot_digest: String,
    /// One of the four `REASON_*` codes.
    pub reason_code: &'static str,
}

impl InstallAuthorizationDecision {
    /// Routing only ever produces eligible decisions (the reference's `authorization_eligible`
    /// is always true here).
    pub fn authorization_eligible(&self) -> bool {
        true
    }

    /// Eligible and decided by the policy rather than a person.
    pub fn is_preapproved(&self) -> bool {
        self.authorization_eligible() && self.decision_basis == DecisionBasis::PreapprovedPolicy
    }

    /// `{authorization_eligible, decision_basis, policy_snapshot_digest, reason_code}`.
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "authorization_eligible",
                Json::Bool(self.authorization_eligible()),
            ),
            ("decision_basis", Json::str(self.decision_basis.as_str())),
            (
                "policy_snapshot_digest",
                Json::str(&self.policy_snapshot_digest),
            ),
            ("reason_code", Json::str(self.reason_code)),
        ])
    }
}

/// Routes an install plan descriptor (`ctx.install-plan-descriptor-v1`/`-v2` JSON, validated
/// first) under `policy`, in the reference's order: permission expansion, then credentials
/// (both always interactive, whatever the policy says), then the kind's mode.
pub fn route_install_authorization(
    policy: &InstallConsentPolicy,
    descriptor: &Json,
) -> Result<InstallAuthorizationDecision, PolicyError> {
    validate_install_plan_descriptor(descriptor)
        .map_err(|e| PolicyError::Descriptor(e.message().to_owned()))?;
    let flag = |key: &str| descriptor.get(key).and_then(Json::as_bool) == Some(true);
    let (decision_basis, reason_code) = if flag("permission_expansion") {
        (DecisionBasis::Interactive, REASON_PERMISSION_EXPANSION)
    } else if flag("credential_requirement") {
        (DecisionBasis::Interactive, REASON_CREDENTIALS)
    } else if policy.mode_for(descriptor.get_str("kind").unwrap_or_default())?
        == InstallConsentMode::PreapprovedAuto
    {
        (DecisionBasis::PreapprovedPolicy, REASON_PREAPPROVED)
    } else {
        (DecisionBasis::Interactive, REASON_PER_INSTALL)
    };
    Ok(InstallAuthorizationDecision {
        decision_basis,
        policy_snapshot_digest: policy.policy_digest(),
        reason_code,
    })
}
