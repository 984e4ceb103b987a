//! The one vocabulary of ctx (spec/engine.md §13): the capability kinds, and every
//! schema, provider, installer and presentation string that more than one module or crate names.
//! Each value is defined here once; the strings are on-disk and wire formats, so a value never
//! changes, only new ones are added.

use std::fmt;
use std::str::FromStr;

/// What a capability is. The catalog, plans, install descriptors and host activation all name
/// one of these four kinds by its string (spec/engine.md §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapabilityKind {
    Skill,
    Agent,
    McpServer,
    Harness,
}

impl CapabilityKind {
    /// Every kind, in the catalog's order.
    pub const ALL: [CapabilityKind; 4] = [
        CapabilityKind::Skill,
        CapabilityKind::Agent,
        CapabilityKind::McpServer,
        CapabilityKind::Harness,
    ];

    /// The kind's string, the prefix of a capability id (`kind:name`).
    pub const fn as_str(self) -> &'static str {
        match self {
            CapabilityKind::Skill => "skill",
            CapabilityKind::Agent => "agent",
            CapabilityKind::McpServer => "mcp-server",
            CapabilityKind::Harness => "harness",
        }
    }

    /// The kind named exactly by `s` (lowercase, no trimming).
    pub fn parse(s: &str) -> Option<CapabilityKind> {
        CapabilityKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether an install plan may target this kind; a harness is loaded, never installed.
    pub const fn is_installable(self) -> bool {
        !matches!(self, CapabilityKind::Harness)
    }
}

impl fmt::Display for CapabilityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The refusal of a string that names no capability kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability kind")]
pub struct UnknownCapabilityKind;

impl FromStr for CapabilityKind {
    type Err = UnknownCapabilityKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CapabilityKind::parse(s).ok_or(UnknownCapabilityKind)
    }
}

/// The strings of [`CapabilityKind::ALL`], for callers that compare strings.
pub const CAPABILITY_KINDS: [&str; 4] = kind_strings::<4>(false);
/// The strings of the installable kinds ([`CapabilityKind::is_installable`]).
pub const INSTALLABLE_KINDS: [&str; 3] = kind_strings::<3>(true);

/// The first `N` kind strings of [`CapabilityKind::ALL`], only installable ones if asked; a
/// wrong `N` fails the build, so the tables cannot drift from the enum.
const fn kind_strings<const N: usize>(installable_only: bool) -> [&'static str; N] {
    let mut out = [""; N];
    let mut filled = 0;
    let mut i = 0;
    while i < CapabilityKind::ALL.len() {
        let kind = CapabilityKind::ALL[i];
        if !installable_only || kind.is_installable() {
            out[filled] = kind.as_str();
            filled += 1;
        }
        i += 1;
    }
    assert!(filled == N, "kind table length differs from the enum");
    out
}

/// The decision surrogate schema of a capability plan (spec/engine.md §3, §8).
pub const CAPABILITY_PLAN_SCHEMA: &str = "ctx.decision.capability-plan";
/// The capability plan version the v3 reducer accepts.
pub const CAPABILITY_PLAN_VERSION_V3: i64 = 3;

/// The benefit selection result a plan's benefit audit binds.
pub const BENEFIT_RESULT_SCHEMA_ID: &str = "ctx.benefit-selection-result-v1";
/// The net-benefit policy a plan's benefit audit binds.
pub const BENEFIT_POLICY_SCHEMA_ID: &str = "ctx.net-benefit-policy-v3";
/// The selection algorithm a plan's benefit audit names.
pub const BENEFIT_SELECTION_ALGORITHM_ID: &str = "ctx.greedy-bounded-subset-exchange-v1";
/// Largest candidate pool a benefit audit may report.
pub const BENEFIT_CANDIDATES_MAX_ITEMS: i64 = 512;
/// Largest number of search evaluations a benefit audit may report.
pub const BENEFIT_SEARCH_MAX_EVALUATIONS: i64 = 1_000_000;

/// Every actionability a capability presentation may declare; schema v3 plan rows accept only
/// the first three.
pub const PRESENTATION_ACTIONABILITY: [&str; 6] = [
    "load",
    "install",
    "manual",
    "unavailable",
    "blocked",
    "none",
];

/// The one installer: executes typed install plans, never a raw command.
pub const INSTALLER_ID: &str = "ctx-install-plan-executor-v1";
/// `H("ctx-install-plan-executor-v1:typed-plan-only:no-raw-command")`.
pub const INSTALLER_DIGEST: &str =
    "fab2f863fbd4c876f182349749c97317de919e94bfbfa7e5f621b66b9eb98efc";

/// The observation provider of managed artifacts (desired sets bind it).
pub const ARTIFACT_OBSERVATION_PROVIDER: &str = "ctx-managed-artifact-observation-v1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_derive_the_string_tables() {
        for kind in CapabilityKind::ALL {
            assert_eq!(CapabilityKind::parse(kind.as_str()), Some(kind));
            assert_eq!(kind.as_str().parse::<CapabilityKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(
            CAPABILITY_KINDS,
            ["skill", "agent", "mcp-server", "harness"]
        );
        assert_eq!(INSTALLABLE_KINDS, ["skill", "agent", "mcp-server"]);
        assert_eq!(CapabilityKind::parse("Skill"), None);
        assert_eq!(CapabilityKind::parse(" skill"), None);
        assert_eq!("tool".parse::<CapabilityKind>(), Err(UnknownCapabilityKind));
    }

    #[test]
    fn installer_digest_is_the_hash_of_its_statement() {
        assert_eq!(
            crate::digest::sha256_hex(&format!("{INSTALLER_ID}:typed-plan-only:no-raw-command")),
            INSTALLER_DIGEST
        );
    }
}
