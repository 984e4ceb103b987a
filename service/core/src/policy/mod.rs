//! The install consent policy (spec/policy.md §2, §3–§5, §6, §7; specified in
//! `spec/policy.md`): one consent mode per installable kind, its hardened on-disk store, and the
//! routing that decides whether an install needs a person or is granted by the policy.
//!
//! * [`InstallConsentPolicy`] — `ask-each-time` or `preapproved-auto` for skills, agents and MCP
//!   servers; its digest is what consents and install actions cite.
//! * [`InstallPolicyStore`] — `current.json` plus immutable `snapshots/<digest>.json`, owner
//!   private, canonical bytes only, every access under one exclusive lock;
//!   [`InstallPolicyStore::hold`] pins the current policy across an automatic consent commit.
//! * [`route_install_authorization`] and [`route_install_consent_request`] — permission expansion
//!   and credential requirements always need a person; otherwise the kind's mode decides.

mod error;
mod model;
mod routing;
mod store;
#[cfg(test)]
mod tests;

pub use error::{PolicyError, PolicyStoreError, RoutingError};
pub use model::{
    DecisionBasis, InstallAuthorizationDecision, InstallConsentMode, InstallConsentPolicy,
    POLICY_KEYS, POLICY_SCHEMA, REASON_CREDENTIALS, REASON_PER_INSTALL,
    REASON_PERMISSION_EXPANSION, REASON_PREAPPROVED, route_install_authorization,
};
pub use routing::{InstallConsentDirective, route_install_consent_request};
pub use store::{
    CURRENT_FILE, DEFAULT_ROOT_RELATIVE, HeldInstallPolicy, InstallPolicyStore, LOCK_POLL,
    LOCK_SUFFIX, LOCK_WAIT, MAX_POLICY_FILE_BYTES, SNAPSHOTS_DIR,
};
