//! Standing decisions (spec/decisions.md §16): a person's grant or denial of one capability's exact
//! install, remembered for a host session, a workspace or always, as a signed change of the
//! verifier registry; and revocations of them (or of a grant a challenge recorded).
//!
//! A standing decision binds the capability id, its install descriptor digest and its material
//! identity digest, so a changed body or a changed install plan is asked for again.

use ctx_model::{Json, is_sha, is_token, sha256_hex};

use super::Reason;

/// Most characters of a scope's key (a host session id or a workspace id).
pub const STANDING_SCOPE_KEY_MAX_CHARS: usize = 160;

/// Why a scope or a revocation target is not accepted; the sentence names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StandingError {
    #[error(
        "the {kind} scope's key {key:?} must be a token of at most {STANDING_SCOPE_KEY_MAX_CHARS} \
         characters"
    )]
    ScopeKey { kind: String, key: String },
    #[error("the always scope takes no key, not {key:?}")]
    AlwaysKey { key: String },
    #[error("scope {scope:?} is not one of session, workspace, always")]
    Scope { scope: String },
    #[error(
        "{text:?} is neither a standing decision id (sd- and 16 hex digits) nor a challenge \
         digest (64 hex digits)"
    )]
    RevokeTarget { text: String },
}

impl From<StandingError> for Reason {
    fn from(e: StandingError) -> Reason {
        Reason(e.to_string())
    }
}

/// Where a standing decision applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StandingScope {
    /// One host session: `<host>:<session id>` as the hooks name it, or the session id the JSON
    /// interface was given.
    Session(String),
    /// Every session whose workspace has this id (`ws-` and 16 hex digits of its digest).
    Workspace(String),
    /// Everywhere this data directory plans.
    Always,
}

impl StandingScope {
    /// `session`, `workspace` or `always`.
    pub fn kind(&self) -> &'static str {
        match self {
            StandingScope::Session(_) => "session",
            StandingScope::Workspace(_) => "workspace",
            StandingScope::Always => "always",
        }
    }

    /// The session or workspace id; empty for `always`.
    pub fn key(&self) -> &str {
        match self {
            StandingScope::Session(k) | StandingScope::Workspace(k) => k,
            StandingScope::Always => "",
        }
    }

    /// True when a request of host session `session` in workspace `workspace` is inside.
    pub fn covers(&self, session: &str, workspace: &str) -> bool {
        match self {
            StandingScope::Session(s) => s == session,
            StandingScope::Workspace(w) => w == workspace,
            StandingScope::Always => true,
        }
    }

    /// Builds a scope from its kind and key, checking both (`once` is not a standing scope).
    pub fn parse(kind: &str, key: &str) -> Result<StandingScope, StandingError> {
        let checked = |key: &str| {
            if is_token(key) && key.chars().count() <= STANDING_SCOPE_KEY_MAX_CHARS {
                Ok(key.to_owned())
            } else {
                Err(StandingError::ScopeKey {
                    kind: kind.to_owned(),
                    key: key.to_owned(),
                })
            }
        };
        match kind {
            "session" => Ok(StandingScope::Session(checked(key)?)),
            "workspace" => Ok(StandingScope::Workspace(checked(key)?)),
            "always" if key.is_empty() => Ok(StandingScope::Always),
            "always" => Err(StandingError::AlwaysKey {
                key: key.to_owned(),
            }),
            other => Err(StandingError::Scope {
                scope: other.to_owned(),
            }),
        }
    }
}

/// A grant or denial that stands beyond the challenge it was decided at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StandingDecision {
    pub granted: bool,
    pub capability_id: String,
    pub descriptor_digest: String,
    pub material_identity_digest: String,
    pub scope: StandingScope,
    /// The challenge the person was shown when they decided.
    pub challenge_digest: String,
}

impl StandingDecision {
    /// The decision's id: `sd-` and 16 hex digits of the digest of its content, so the same
    /// decision made twice has one id.
    pub fn id(&self) -> String {
        format!("sd-{}", &sha256_hex(&self.to_json().to_cja())[..16])
    }

    pub(super) fn to_json(&self) -> Json {
        Json::object([
            ("capability_id", Json::str(&self.capability_id)),
            ("challenge_digest", Json::str(&self.challenge_digest)),
            (
                "decision",
                Json::str(if self.granted { "granted" } else { "denied" }),
            ),
            ("descriptor_digest", Json::str(&self.descriptor_digest)),
            (
                "material_identity_digest",
                Json::str(&self.material_identity_digest),
            ),
            ("scope", Json::str(self.scope.kind())),
            ("scope_key", Json::str(self.scope.key())),
        ])
    }

    pub(super) fn from_json(value: &Json) -> Result<StandingDecision, Reason> {
        let text = |key: &str| {
            value
                .get_str(key)
                .ok_or_else(|| Reason(format!("a standing decision has no {key}")))
        };
        let granted = match text("decision")? {
            "granted" => true,
            "denied" => false,
            other => {
                return Err(
                    format!("a standing decision's decision {other:?} is not known").into(),
                );
            }
        };
        let decision = StandingDecision {
            granted,
            capability_id: text("capability_id")?.to_owned(),
            descriptor_digest: text("descriptor_digest")?.to_owned(),
            material_identity_digest: text("material_identity_digest")?.to_owned(),
            scope: StandingScope::parse(text("scope")?, text("scope_key")?)?,
            challenge_digest: text("challenge_digest")?.to_owned(),
        };
        decision.check()?;
        Ok(decision)
    }

    /// The shape rules, checked before writing and again after reading.
    pub(super) fn check(&self) -> Result<(), Reason> {
        if !is_token(&self.capability_id) || !self.capability_id.contains(':') {
            return Err(format!(
                "a standing decision's capability id {:?} is not a capability id",
                self.capability_id
            )
            .into());
        }
        for (name, digest) in [
            ("descriptor_digest", &self.descriptor_digest),
            ("material_identity_digest", &self.material_identity_digest),
            ("challenge_digest", &self.challenge_digest),
        ] {
            if !is_sha(digest) {
                return Err(format!(
                    "a standing decision's {name} {digest:?} is not a SHA-256 digest"
                )
                .into());
            }
        }
        Ok(())
    }

    /// True when this decision is about the exact install `capability_id` with these digests.
    pub fn binds(
        &self,
        capability_id: &str,
        descriptor_digest: &str,
        material_identity_digest: &str,
    ) -> bool {
        self.capability_id == capability_id
            && self.descriptor_digest == descriptor_digest
            && self.material_identity_digest == material_identity_digest
    }

    /// One line for the person.
    pub fn describe(&self) -> String {
        let scope = match &self.scope {
            StandingScope::Session(s) => format!("for session {s}"),
            StandingScope::Workspace(w) => format!("for workspace {w}"),
            StandingScope::Always => "always".to_owned(),
        };
        format!(
            "{} {} {scope} (this exact install: descriptor {}…, material {}…)",
            if self.granted { "grant" } else { "deny" },
            self.capability_id,
            &self.descriptor_digest[..12],
            &self.material_identity_digest[..12],
        )
    }
}

/// What a revocation takes back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RevokeTarget {
    /// A standing decision, by id.
    Standing(String),
    /// The grant recorded at one challenge, so its installed material is not reused again.
    Challenge(String),
}

impl RevokeTarget {
    /// Reads what the person typed: an `sd-` id or a 64-hex challenge digest.
    pub fn parse(text: &str) -> Result<RevokeTarget, StandingError> {
        if is_sha(text) {
            Ok(RevokeTarget::Challenge(text.to_owned()))
        } else if text.len() == 19
            && text.starts_with("sd-")
            && text[3..]
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            Ok(RevokeTarget::Standing(text.to_owned()))
        } else {
            Err(StandingError::RevokeTarget {
                text: text.to_owned(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            RevokeTarget::Standing(s) | RevokeTarget::Challenge(s) => s,
        }
    }
}

/// A standing decision as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandingEntry {
    pub id: String,
    pub decision: StandingDecision,
    /// The verifier whose approval made it, and that verifier's kind.
    pub decided_by: String,
    pub decided_at: ctx_journal::Timestamp,
    /// The journal positions where it was made and (if) revoked.
    pub position: u64,
    pub revoked_position: Option<u64>,
}

impl StandingEntry {
    /// True when the entry stands at journal position `position`.
    pub fn stands_at(&self, position: u64) -> bool {
        self.position < position && self.revoked_position.is_none_or(|r| r > position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(scope: StandingScope) -> StandingDecision {
        StandingDecision {
            granted: true,
            capability_id: "skill:terraform".to_owned(),
            descriptor_digest: sha256_hex("d"),
            material_identity_digest: sha256_hex("m"),
            scope,
            challenge_digest: sha256_hex("c"),
        }
    }

    #[test]
    fn a_standing_decision_round_trips_and_its_id_follows_its_content() {
        for scope in [
            StandingScope::Session("claude:s-1".to_owned()),
            StandingScope::Workspace("ws-0123456789abcdef".to_owned()),
            StandingScope::Always,
        ] {
            let d = decision(scope);
            let back = StandingDecision::from_json(&d.to_json()).map_err(|r| r.0);
            assert_eq!(back.as_ref(), Ok(&d));
            assert!(d.id().starts_with("sd-") && d.id().len() == 19);
            let denied = StandingDecision {
                granted: false,
                ..d.clone()
            };
            assert_ne!(denied.id(), d.id());
        }
    }

    #[test]
    fn scopes_cover_only_their_session_or_workspace() {
        let s = StandingScope::Session("claude:a".to_owned());
        assert!(s.covers("claude:a", "ws-1"));
        assert!(!s.covers("claude:b", "ws-1"));
        let w = StandingScope::Workspace("ws-1".to_owned());
        assert!(w.covers("claude:b", "ws-1"));
        assert!(!w.covers("claude:b", "ws-2"));
        assert!(StandingScope::Always.covers("x", "y"));
        assert!(StandingScope::parse("once", "").is_err());
        assert!(StandingScope::parse("always", "x").is_err());
        assert!(StandingScope::parse("session", "has space").is_err());
    }

    #[test]
    fn a_malformed_standing_decision_is_refused_with_the_field_named() {
        let mut value = decision(StandingScope::Always).to_json();
        if let Json::Obj(map) = &mut value {
            map.insert("descriptor_digest".to_owned(), Json::str("nope"));
        }
        let refused = StandingDecision::from_json(&value).map_err(|r| r.0);
        assert!(
            refused
                .as_ref()
                .is_err_and(|m| m.contains("descriptor_digest")),
            "{refused:?}"
        );
    }

    #[test]
    fn revoke_targets_are_standing_ids_or_challenge_digests() {
        let digest = sha256_hex("c");
        assert_eq!(
            RevokeTarget::parse(&digest),
            Ok(RevokeTarget::Challenge(digest.clone()))
        );
        assert_eq!(
            RevokeTarget::parse("sd-0123456789abcdef"),
            Ok(RevokeTarget::Standing("sd-0123456789abcdef".to_owned()))
        );
        assert!(RevokeTarget::parse("sd-0123").is_err());
        assert!(RevokeTarget::parse("sd-0123456789ABCDEF").is_err());
    }
}
