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

pub use error::PolicyStoreError;
pub use model::{
    DecisionBasis, InstallAuthorizationDecision, InstallConsentMode, InstallConsentPolicy,
    route_install_authorization,
};
pub use routing::{InstallConsentDirective, route_install_consent_request};
pub use store::InstallPolicyStore;
// Used by this module's unit tests only.
#[cfg(test)]
use store::{CURRENT_FILE, HeldInstallPolicy, SNAPSHOTS_DIR};
