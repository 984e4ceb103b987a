//! The protocol data model: scopes, privacy labels, engine events, host actions and transitions
//! (spec/engine.md §2). Every value has a `to_json` that yields exactly the mapping the
//! reference hashes, and a strict `from_json`.

use std::collections::BTreeSet;

use crate::digest::sha256_hex;
use crate::json::{Json, JsonMap, JsonView};
use crate::shape::{TimestampError, is_sha, is_token, is_trimmed, normalize_timestamp};

/// The only protocol version.
pub const PROTOCOL_VERSION: i64 = 1;
pub const INSTALL_ACTION_PAYLOAD_SCHEMA_V3: &str = "ctx.install-capability-payload-v3";
pub const INSTALL_CONSENT_REQUEST_SCHEMA_V3: &str = "ctx.install-consent-request-v3";
pub const MATERIAL_ACTION_PAYLOAD_SCHEMA_V3: &str = "ctx.material-action-payload-v3";
pub const INSTALL_RECEIPT_SCHEMA_V3: &str = "ctx.install-receipt-v3";
pub const MATERIAL_RECEIPT_SCHEMA_V3: &str = "ctx.material-receipt-v3";
/// At most this many active capabilities, plan rows, bundle rows and desired rows.
pub const ACTIVE_CAPABILITIES_MAX: usize = 5;

/// A protocol value was malformed; the message is the reference's sentence naming the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    message: String,
}

impl ProtocolError {
    pub fn new(message: impl Into<String>) -> ProtocolError {
        ProtocolError {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

pub(crate) fn perr<T>(message: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError::new(message))
}

/// Python-style repr of a list of names: `'a', 'b'`.
pub(crate) fn names(keys: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    keys.into_iter()
        .map(|k| format!("'{}'", k.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The keys of `m` outside `allowed`, sorted.
pub(crate) fn unknown_keys<'a>(m: &'a JsonMap, allowed: &[&str]) -> Vec<&'a str> {
    m.keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect()
}

/// What is wrong with an object's key set: unknown keys (sorted) are reported before missing
/// ones (sorted). Every document decoder uses this one check and words its own sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyFault {
    NotObject,
    Unknown(Vec<String>),
    Missing(Vec<String>),
}

impl KeyFault {
    /// `"{name} has unknown {fields}: a, b"` / `"{name} is missing {fields}: a, b"` /
    /// `"{name} must be {object}"`.
    pub(crate) fn sentence(&self, name: &str, object: &str, fields: &str) -> String {
        match self {
            KeyFault::NotObject => format!("{name} must be {object}"),
            KeyFault::Unknown(k) => format!("{name} has unknown {fields}: {}", k.join(", ")),
            KeyFault::Missing(k) => format!("{name} is missing {fields}: {}", k.join(", ")),
        }
    }
}

/// Requires `value` to be an object whose key set is exactly `keys`.
pub(crate) fn exact_keys<'a>(value: &'a Json, keys: &[&str]) -> Result<&'a JsonMap, KeyFault> {
    let Some(m) = value.as_obj() else {
        return Err(KeyFault::NotObject);
    };
    let unknown: Vec<String> = unknown_keys(m, keys)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if !unknown.is_empty() {
        return Err(KeyFault::Unknown(unknown));
    }
    let mut missing: Vec<String> = keys
        .iter()
        .filter(|k| !m.contains_key(**k))
        .map(|k| (*k).to_owned())
        .collect();
    missing.sort_unstable();
    if !missing.is_empty() {
        return Err(KeyFault::Missing(missing));
    }
    Ok(m)
}

/// True when the key set of `m` is exactly `keys`.
pub fn has_exact_keys(m: &JsonMap, keys: &[&str]) -> bool {
    m.len() == keys.len() && keys.iter().all(|k| m.contains_key(*k))
}

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[rkyv(derive(Debug, PartialEq, Eq))]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Result<$name, ProtocolError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => perr(format!(concat!("unknown ", $what, " '{}'"), other)),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

// The derives generate resolver types without Debug impls; the lint is silenced only here.
#[allow(missing_debug_implementations)]
mod enums {
    use super::{ProtocolError, perr};

    string_enum!(
        /// The 16 engine event kinds.
        EventKind, "event kind" {
            SessionStarted => "SessionStarted",
            WorkspaceObserved => "WorkspaceObserved",
            IntentObserved => "IntentObserved",
            DevelopmentObserved => "DevelopmentObserved",
            TurnStarting => "TurnStarting",
            ProviderSubmissionObserved => "ProviderSubmissionObserved",
            ToolCallObserved => "ToolCallObserved",
            ValidationObserved => "ValidationObserved",
            UserDecision => "UserDecision",
            ActionApplied => "ActionApplied",
            ActionFailed => "ActionFailed",
            ActionExpired => "ActionExpired",
            InstallConsentExpired => "InstallConsentExpired",
            ReassessmentRequested => "ReassessmentRequested",
            TurnEnded => "TurnEnded",
            SessionEnded => "SessionEnded",
        }
    );

    string_enum!(
        /// The 10 host action kinds.
        ActionKind, "action kind" {
            PresentBundle => "PresentBundle",
            RequestConsent => "RequestConsent",
            InstallCapability => "InstallCapability",
            ActivateCapability => "ActivateCapability",
            PrepareExposure => "PrepareExposure",
            PreparePromptContext => "PreparePromptContext",
            DeactivateCapability => "DeactivateCapability",
            UninstallCapability => "UninstallCapability",
            Notify => "Notify",
            NoChange => "NoChange",
        }
    );

    string_enum!(
        /// Privacy classification of an event and the actions it causes.
        Classification, "privacy classification" {
            Public => "public",
            Internal => "internal",
            Private => "private",
            Confidential => "confidential",
            Restricted => "restricted",
        }
    );

    string_enum!(
        /// Retention class of an event.
        Retention, "retention class" {
            Ephemeral => "ephemeral",
            Session => "session",
            Workspace => "workspace",
            Local => "local",
            Persistent => "persistent",
            Aggregate => "aggregate",
        }
    );
}
pub use enums::{ActionKind, Classification, EventKind, Retention};

impl EventKind {
    pub fn is_receipt(self) -> bool {
        matches!(
            self,
            EventKind::ActionApplied | EventKind::ActionFailed | EventKind::ActionExpired
        )
    }

    /// Kinds that must carry all nine replay metadata fields.
    pub fn is_decision_causing(self) -> bool {
        matches!(
            self,
            EventKind::WorkspaceObserved
                | EventKind::IntentObserved
                | EventKind::DevelopmentObserved
                | EventKind::TurnStarting
                | EventKind::ValidationObserved
                | EventKind::ReassessmentRequested
        )
    }

    /// Kinds that carry a decision surrogate.
    pub fn is_planning(self) -> bool {
        matches!(
            self,
            EventKind::IntentObserved | EventKind::DevelopmentObserved
        )
    }

    /// Kinds whose payload is an opaque observation reference.
    pub fn is_observation(self) -> bool {
        matches!(
            self,
            EventKind::WorkspaceObserved
                | EventKind::IntentObserved
                | EventKind::DevelopmentObserved
                | EventKind::ValidationObserved
        )
    }

    pub fn has_empty_payload(self) -> bool {
        matches!(
            self,
            EventKind::TurnStarting | EventKind::TurnEnded | EventKind::SessionEnded
        )
    }
}

impl ActionKind {
    pub fn is_physical(self) -> bool {
        matches!(
            self,
            ActionKind::InstallCapability
                | ActionKind::ActivateCapability
                | ActionKind::PrepareExposure
                | ActionKind::PreparePromptContext
                | ActionKind::DeactivateCapability
                | ActionKind::UninstallCapability
        )
    }

    pub fn is_lease_bounded(self) -> bool {
        matches!(
            self,
            ActionKind::ActivateCapability
                | ActionKind::PrepareExposure
                | ActionKind::DeactivateCapability
        )
    }

    pub fn is_persistent(self) -> bool {
        matches!(
            self,
            ActionKind::InstallCapability | ActionKind::UninstallCapability
        )
    }

    /// The physical state a material action's receipt must report.
    pub fn expected_material_state(self) -> Option<&'static str> {
        match self {
            ActionKind::ActivateCapability => Some("active"),
            ActionKind::PrepareExposure => Some("prepared"),
            ActionKind::DeactivateCapability => Some("inactive"),
            _ => None,
        }
    }
}

/// Who a scope belongs to. The engine stream is derived from the first four fields only, so
/// parent and child agents share one revision sequence and one budget of five active capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ScopeRef {
    pub tenant_id: String,
    pub workspace_id: String,
    pub repository_id: String,
    pub session_id: String,
    pub exposure_id: String,
    pub host_context_id: String,
    pub parent_exposure_id: Option<String>,
}

pub const SCOPE_KEYS: [&str; 7] = [
    "exposure_id",
    "host_context_id",
    "parent_exposure_id",
    "repository_id",
    "session_id",
    "tenant_id",
    "workspace_id",
];

impl ScopeRef {
    /// Builds and validates a scope: every id trimmed text.
    pub fn new(
        tenant_id: &str,
        workspace_id: &str,
        repository_id: &str,
        session_id: &str,
        exposure_id: &str,
        host_context_id: &str,
        parent_exposure_id: Option<&str>,
    ) -> Result<ScopeRef, ProtocolError> {
        let scope = ScopeRef {
            tenant_id: tenant_id.to_owned(),
            workspace_id: workspace_id.to_owned(),
            repository_id: repository_id.to_owned(),
            session_id: session_id.to_owned(),
            exposure_id: exposure_id.to_owned(),
            host_context_id: host_context_id.to_owned(),
            parent_exposure_id: parent_exposure_id.map(str::to_owned),
        };
        scope.validate()?;
        Ok(scope)
    }

    pub fn validate(&self) -> Result<(), ProtocolError> {
        for (name, value) in self.fields() {
            if !is_trimmed(value) {
                return perr(format!("{name} must be non-empty trimmed text"));
            }
        }
        if let Some(p) = &self.parent_exposure_id
            && !is_trimmed(p)
        {
            return perr("parent_exposure_id must be non-empty trimmed text");
        }
        Ok(())
    }

    fn fields(&self) -> [(&'static str, &str); 6] {
        [
            ("tenant_id", &self.tenant_id),
            ("workspace_id", &self.workspace_id),
            ("repository_id", &self.repository_id),
            ("session_id", &self.session_id),
            ("exposure_id", &self.exposure_id),
            ("host_context_id", &self.host_context_id),
        ]
    }

    /// True when every id (and a present parent) is a replay token.
    pub fn is_replay_safe(&self) -> bool {
        self.fields().iter().all(|(_, v)| is_token(v))
            && self.parent_exposure_id.as_deref().is_none_or(is_token)
    }

    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            ("tenant_id", JsonView::Str(&self.tenant_id)),
            ("workspace_id", JsonView::Str(&self.workspace_id)),
            ("repository_id", JsonView::Str(&self.repository_id)),
            ("session_id", JsonView::Str(&self.session_id)),
            ("exposure_id", JsonView::Str(&self.exposure_id)),
            ("host_context_id", JsonView::Str(&self.host_context_id)),
            (
                "parent_exposure_id",
                JsonView::opt_str(self.parent_exposure_id.as_deref()),
            ),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    pub fn from_json(v: &Json) -> Result<ScopeRef, ProtocolError> {
        let Some(m) = v.as_obj() else {
            return perr("scope must be an object");
        };
        let unknown = unknown_keys(m, &SCOPE_KEYS);
        if !unknown.is_empty() {
            return perr(format!("scope has unknown field(s): {}", names(unknown)));
        }
        let field = |name: &str| -> Result<String, ProtocolError> {
            match m.get(name) {
                None => perr(format!("scope is missing {name}")),
                Some(Json::Str(s)) => Ok(s.clone()),
                Some(_) => perr(format!("{name} must be non-empty trimmed text")),
            }
        };
        let parent = match m.get("parent_exposure_id") {
            None | Some(Json::Null) => None,
            Some(Json::Str(s)) => Some(s.clone()),
            Some(_) => return perr("parent_exposure_id must be non-empty trimmed text"),
        };
        let scope = ScopeRef {
            tenant_id: field("tenant_id")?,
            workspace_id: field("workspace_id")?,
            repository_id: field("repository_id")?,
            session_id: field("session_id")?,
            exposure_id: field("exposure_id")?,
            host_context_id: field("host_context_id")?,
            parent_exposure_id: parent,
        };
        scope.validate()?;
        Ok(scope)
    }

    /// The stream key: CJ of the four session fields.
    pub fn stream_key(&self) -> String {
        Json::object([
            ("repository_id", Json::str(&self.repository_id)),
            ("session_id", Json::str(&self.session_id)),
            ("tenant_id", Json::str(&self.tenant_id)),
            ("workspace_id", Json::str(&self.workspace_id)),
        ])
        .to_cj()
    }

    /// True when both scopes name the same session (tenant, workspace, repository, session).
    pub fn same_session(&self, other: &ScopeRef) -> bool {
        self.tenant_id == other.tenant_id
            && self.workspace_id == other.workspace_id
            && self.repository_id == other.repository_id
            && self.session_id == other.session_id
    }
}

/// `{classification, retention}`; defaults `private` / `local`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct PrivacyLabel {
    pub classification: Classification,
    pub retention: Retention,
}

impl Default for PrivacyLabel {
    fn default() -> Self {
        PrivacyLabel {
            classification: Classification::Private,
            retention: Retention::Local,
        }
    }
}

impl PrivacyLabel {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            (
                "classification",
                JsonView::Str(self.classification.as_str()),
            ),
            ("retention", JsonView::Str(self.retention.as_str())),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    /// Missing keys take the defaults; unknown keys are refused.
    pub fn from_json(v: &Json) -> Result<PrivacyLabel, ProtocolError> {
        let Some(m) = v.as_obj() else {
            return perr("privacy must be an object");
        };
        let unknown = unknown_keys(m, &["classification", "retention"]);
        if !unknown.is_empty() {
            return perr(format!("privacy has unknown field(s): {}", names(unknown)));
        }
        let mut label = PrivacyLabel::default();
        if let Some(c) = m.get("classification") {
            let s = c.as_str().unwrap_or_default();
            label.classification = Classification::parse(s)
                .map_err(|_| ProtocolError::new(format!("unknown privacy classification '{s}'")))?;
        }
        if let Some(r) = m.get("retention") {
            let s = r.as_str().unwrap_or_default();
            label.retention = Retention::parse(s)
                .map_err(|_| ProtocolError::new(format!("unknown retention class '{s}'")))?;
        }
        Ok(label)
    }

    /// Retention classes replay refuses.
    pub fn is_replay_safe(&self) -> bool {
        !matches!(self.retention, Retention::Ephemeral | Retention::Aggregate)
    }
}

/// `random_seed`: an integer, a string or null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum RandomSeed {
    None,
    Int(i64),
    Str(String),
}

impl RandomSeed {
    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        match self {
            RandomSeed::None => JsonView::Null,
            RandomSeed::Int(i) => JsonView::Int(*i),
            RandomSeed::Str(s) => JsonView::Str(s),
        }
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    pub fn is_none(&self) -> bool {
        matches!(self, RandomSeed::None)
    }
}

/// The optional trimmed-string metadata fields of an event, in the reference's order.
pub const EVENT_TEXT_METADATA: [&str; 5] = [
    "correlation_id",
    "causation_id",
    "engine_version",
    "planner_version",
    "policy_version",
];
/// The optional digest metadata fields of an event.
pub const EVENT_DIGEST_METADATA: [&str; 5] = [
    "host_descriptor_digest",
    "catalog_snapshot_digest",
    "semantic_model_digest",
    "semantic_index_digest",
    "work_signature",
];
/// The nine fields every decision-causing event must carry.
pub const REPLAY_FIELDS: [&str; 9] = [
    "engine_version",
    "planner_version",
    "policy_version",
    "host_descriptor_digest",
    "catalog_snapshot_digest",
    "semantic_model_digest",
    "semantic_index_digest",
    "work_signature",
    "random_seed",
];

const EVENT_KEYS: [&str; 19] = [
    "catalog_snapshot_digest",
    "causation_id",
    "correlation_id",
    "engine_version",
    "event_id",
    "expected_revision",
    "host_descriptor_digest",
    "kind",
    "occurred_at",
    "payload",
    "planner_version",
    "policy_version",
    "privacy",
    "protocol_version",
    "random_seed",
    "scope",
    "semantic_index_digest",
    "semantic_model_digest",
    "work_signature",
];

/// An engine event (wire name EventEnvelope). Construct through [`EngineEvent::validate`] or
/// [`EngineEvent::from_json`]; `occurred_at` is kept in its normalized UTC form.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct EngineEvent {
    pub event_id: String,
    pub kind: EventKind,
    pub scope: ScopeRef,
    pub expected_revision: u64,
    pub occurred_at: String,
    pub payload: Json,
    pub privacy: PrivacyLabel,
    pub correlation_id: Option<String>,
    pub causation_id: Option<String>,
    pub engine_version: Option<String>,
    pub planner_version: Option<String>,
    pub policy_version: Option<String>,
    pub host_descriptor_digest: Option<String>,
    pub catalog_snapshot_digest: Option<String>,
    pub semantic_model_digest: Option<String>,
    pub semantic_index_digest: Option<String>,
    pub work_signature: Option<String>,
    pub random_seed: RandomSeed,
}

impl EngineEvent {
    /// A minimal event with empty payload, default privacy and no metadata; call
    /// [`EngineEvent::validate`] after filling it in.
    pub fn bare(
        event_id: &str,
        kind: EventKind,
        scope: ScopeRef,
        expected_revision: u64,
        occurred_at: &str,
    ) -> EngineEvent {
        EngineEvent {
            event_id: event_id.to_owned(),
            kind,
            scope,
            expected_revision,
            occurred_at: occurred_at.to_owned(),
            payload: Json::Obj(JsonMap::new()),
            privacy: PrivacyLabel::default(),
            correlation_id: None,
            causation_id: None,
            engine_version: None,
            planner_version: None,
            policy_version: None,
            host_descriptor_digest: None,
            catalog_snapshot_digest: None,
            semantic_model_digest: None,
            semantic_index_digest: None,
            work_signature: None,
            random_seed: RandomSeed::None,
        }
    }

    pub fn text_metadata(&self, name: &str) -> Option<&str> {
        match name {
            "correlation_id" => self.correlation_id.as_deref(),
            "causation_id" => self.causation_id.as_deref(),
            "engine_version" => self.engine_version.as_deref(),
            "planner_version" => self.planner_version.as_deref(),
            "policy_version" => self.policy_version.as_deref(),
            "host_descriptor_digest" => self.host_descriptor_digest.as_deref(),
            "catalog_snapshot_digest" => self.catalog_snapshot_digest.as_deref(),
            "semantic_model_digest" => self.semantic_model_digest.as_deref(),
            "semantic_index_digest" => self.semantic_index_digest.as_deref(),
            "work_signature" => self.work_signature.as_deref(),
            _ => None,
        }
    }

    /// Validates in the reference's order and normalizes `occurred_at`. Payload rules that depend
    /// on the reducer version live in the replay sanitizer.
    pub fn validate(&mut self) -> Result<(), ProtocolError> {
        if !is_trimmed(&self.event_id) {
            return perr("event_id must be non-empty trimmed text");
        }
        self.scope.validate()?;
        self.occurred_at = normalize_protocol_timestamp("occurred_at", &self.occurred_at)?;
        if self.payload.as_obj().is_none() {
            return perr("payload must be a JSON object");
        }
        if self.kind.is_receipt() {
            validate_receipt_payload(self.kind, &self.payload)?;
        }
        if self.kind == EventKind::UserDecision {
            validate_user_decision_payload(&self.payload, self.expected_revision)?;
        }
        if self.kind == EventKind::InstallConsentExpired {
            validate_consent_expired_payload(&self.payload)?;
        }
        for name in EVENT_TEXT_METADATA
            .iter()
            .chain(EVENT_DIGEST_METADATA.iter())
        {
            if let Some(v) = self.text_metadata(name)
                && !is_trimmed(v)
            {
                return perr(format!("{name} must be non-empty trimmed text"));
            }
        }
        if let RandomSeed::Str(s) = &self.random_seed
            && !is_trimmed(s)
        {
            return perr("random_seed must be an integer, string, or null");
        }
        if self.kind.is_decision_causing() {
            for name in REPLAY_FIELDS {
                let missing = if name == "random_seed" {
                    self.random_seed.is_none()
                } else {
                    self.text_metadata(name).is_none()
                };
                if missing {
                    return perr(format!(
                        "{name} is required for decision-causing event {}",
                        self.kind
                    ));
                }
            }
        }
        Ok(())
    }

    /// A borrowed view of the mapping the reference hashes: all 19 fields, nulls included.
    pub fn view(&self) -> JsonView<'_> {
        fn opt(v: &Option<String>) -> JsonView<'_> {
            JsonView::opt_str(v.as_deref())
        }
        JsonView::obj(vec![
            ("event_id", JsonView::Str(&self.event_id)),
            ("kind", JsonView::Str(self.kind.as_str())),
            ("scope", self.scope.view()),
            ("expected_revision", JsonView::uint(self.expected_revision)),
            ("occurred_at", JsonView::Str(&self.occurred_at)),
            ("payload", JsonView::Json(&self.payload)),
            ("privacy", self.privacy.view()),
            ("protocol_version", JsonView::Int(PROTOCOL_VERSION)),
            ("correlation_id", opt(&self.correlation_id)),
            ("causation_id", opt(&self.causation_id)),
            ("engine_version", opt(&self.engine_version)),
            ("planner_version", opt(&self.planner_version)),
            ("policy_version", opt(&self.policy_version)),
            ("host_descriptor_digest", opt(&self.host_descriptor_digest)),
            (
                "catalog_snapshot_digest",
                opt(&self.catalog_snapshot_digest),
            ),
            ("semantic_model_digest", opt(&self.semantic_model_digest)),
            ("semantic_index_digest", opt(&self.semantic_index_digest)),
            ("work_signature", opt(&self.work_signature)),
            ("random_seed", self.random_seed.view()),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    /// `H(CJ(event))`.
    pub fn content_digest(&self) -> String {
        sha256_hex(&self.view().to_cj())
    }

    /// `H("ctx-engine-event:1:" + event_id)`.
    pub fn identity_digest(&self) -> String {
        sha256_hex(&format!(
            "ctx-engine-event:{PROTOCOL_VERSION}:{}",
            self.event_id
        ))
    }

    /// Decodes and validates an event mapping.
    pub fn from_json(v: &Json) -> Result<EngineEvent, ProtocolError> {
        let Some(m) = v.as_obj() else {
            return perr("protocol message must be a JSON object");
        };
        let unknown = unknown_keys(m, &EVENT_KEYS);
        if !unknown.is_empty() {
            return perr(format!("event has unknown field(s): {}", names(unknown)));
        }
        match m.get("protocol_version") {
            None => return perr("event is missing protocol_version"),
            Some(Json::Int(PROTOCOL_VERSION)) => {}
            Some(other) => {
                return perr(format!(
                    "unsupported protocol version {}; expected {PROTOCOL_VERSION}",
                    other.to_cj()
                ));
            }
        }
        for key in [
            "scope",
            "privacy",
            "event_id",
            "kind",
            "expected_revision",
            "occurred_at",
        ] {
            if !m.contains_key(key) {
                return perr(format!("event is missing {key}"));
            }
        }
        let text = |key: &str| -> Result<String, ProtocolError> {
            m.get(key)
                .and_then(Json::as_str)
                .map(str::to_owned)
                .ok_or_else(|| ProtocolError::new(format!("{key} must be non-empty trimmed text")))
        };
        let opt_text = |key: &str| -> Result<Option<String>, ProtocolError> {
            match m.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Str(s)) => Ok(Some(s.clone())),
                Some(_) => perr(format!("{key} must be non-empty trimmed text")),
            }
        };
        let event_id = text("event_id")?;
        let kind = EventKind::parse(m.get("kind").and_then(Json::as_str).unwrap_or_default())
            .map_err(|_| {
                ProtocolError::new(format!(
                    "unknown event kind '{}'",
                    m.get("kind")
                        .map(|k| k.as_str().unwrap_or_default())
                        .unwrap_or_default()
                ))
            })?;
        let Some(scope_json) = m.get("scope").filter(|s| s.as_obj().is_some()) else {
            return perr("scope must be an object");
        };
        let scope = ScopeRef::from_json(scope_json)?;
        let expected_revision = match m.get("expected_revision") {
            Some(Json::Int(i)) if *i >= 0 => u64::try_from(*i).unwrap_or(0),
            _ => return perr("expected_revision must be a non-negative integer"),
        };
        let occurred_at = text("occurred_at")
            .map_err(|_| ProtocolError::new("occurred_at must be an RFC 3339 timestamp"))?;
        let payload = m
            .get("payload")
            .cloned()
            .unwrap_or(Json::Obj(JsonMap::new()));
        let Some(privacy_json) = m.get("privacy").filter(|p| p.as_obj().is_some()) else {
            return perr("privacy must be an object");
        };
        let privacy = PrivacyLabel::from_json(privacy_json)?;
        let random_seed = match m.get("random_seed") {
            None | Some(Json::Null) => RandomSeed::None,
            Some(Json::Int(i)) => RandomSeed::Int(*i),
            Some(Json::Str(s)) => RandomSeed::Str(s.clone()),
            Some(_) => return perr("random_seed must be an integer, string, or null"),
        };
        let mut event = EngineEvent {
            event_id,
            kind,
            scope,
            expected_revision,
            occurred_at,
            payload,
            privacy,
            correlation_id: opt_text("correlation_id")?,
            causation_id: opt_text("causation_id")?,
            engine_version: opt_text("engine_version")?,
            planner_version: opt_text("planner_version")?,
            policy_version: opt_text("policy_version")?,
            host_descriptor_digest: opt_text("host_descriptor_digest")?,
            catalog_snapshot_digest: opt_text("catalog_snapshot_digest")?,
            semantic_model_digest: opt_text("semantic_model_digest")?,
            semantic_index_digest: opt_text("semantic_index_digest")?,
            work_signature: opt_text("work_signature")?,
            random_seed,
        };
        event.validate()?;
        Ok(event)
    }
}

/// Normalizes a protocol timestamp field with the reference's two messages.
pub fn normalize_protocol_timestamp(field: &str, value: &str) -> Result<String, ProtocolError> {
    normalize_timestamp(value).map_err(|e| match e {
        TimestampError::Syntax => {
            ProtocolError::new(format!("{field} must use strict RFC 3339 date-time syntax"))
        }
        TimestampError::Value => {
            ProtocolError::new(format!("{field} must be an RFC 3339 timestamp"))
        }
    })
}

/// The four identity keys every receipt payload carries.
pub const RECEIPT_IDENTITY_KEYS: [&str; 4] = [
    "action_id",
    "action_kind",
    "action_content_digest",
    "action_precondition_revision",
];

/// The identity a receipt names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptIdentity {
    pub action_id: String,
    pub action_kind: ActionKind,
    pub action_content_digest: String,
    pub action_precondition_revision: u64,
}

impl ReceiptIdentity {
    pub fn from_payload(payload: &Json) -> Result<ReceiptIdentity, ProtocolError> {
        let action_id = match payload.get_str("action_id") {
            Some(s) if is_trimmed(s) => s.to_owned(),
            _ => return perr("receipt action_id must be non-empty trimmed text"),
        };
        let action_kind = ActionKind::parse(payload.get_str("action_kind").unwrap_or_default())?;
        let action_content_digest = match payload.get_str("action_content_digest") {
            Some(s) if is_sha(s) => s.to_owned(),
            _ => return perr("receipt action_content_digest must be a SHA-256 digest"),
        };
        let action_precondition_revision = match payload.get("action_precondition_revision") {
            Some(Json::Int(i)) if *i >= 0 => u64::try_from(*i).unwrap_or(0),
            _ => {
                return perr("receipt action_precondition_revision must be a non-negative integer");
            }
        };
        Ok(ReceiptIdentity {
            action_id,
            action_kind,
            action_content_digest,
            action_precondition_revision,
        })
    }
}

fn validate_receipt_payload(kind: EventKind, payload: &Json) -> Result<(), ProtocolError> {
    let Some(m) = payload.as_obj() else {
        return perr("payload must be a JSON object");
    };
    let extra: &[&str] = match kind {
        EventKind::ActionApplied => &["verification"],
        EventKind::ActionFailed => &["error"],
        _ => &["reason"],
    };
    let allowed: Vec<&str> = RECEIPT_IDENTITY_KEYS.iter().chain(extra).copied().collect();
    let unknown = unknown_keys(m, &allowed);
    if !unknown.is_empty() {
        return perr(format!(
            "{kind} payload has unknown field(s): {}",
            names(unknown)
        ));
    }
    for key in &allowed {
        if !m.contains_key(*key) {
            return perr(format!("{kind} payload is missing {key}"));
        }
    }
    ReceiptIdentity::from_payload(payload)?;
    match kind {
        EventKind::ActionApplied => {
            let Some(v) = m.get("verification").and_then(Json::as_obj) else {
                return perr("ActionApplied verification must be an object");
            };
            if !v.contains_key("schema") {
                match v.get("host_state").and_then(Json::as_str) {
                    None => return perr("ActionApplied verification is missing host_state"),
                    Some("active" | "inactive" | "prepared" | "installed") => {}
                    Some(_) => return perr("ActionApplied host_state is unsupported"),
                }
            }
        }
        EventKind::ActionFailed => {
            let code = m
                .get("error")
                .and_then(Json::as_obj)
                .filter(|e| e.len() == 1)
                .and_then(|e| e.get("code"))
                .and_then(Json::as_str);
            if !code.is_some_and(is_token) {
                return perr("ActionFailed error code must be a machine token");
            }
        }
        _ => {
            if m.get("reason").and_then(Json::as_str) != Some("expired") {
                return perr("ActionExpired reason must be expired");
            }
        }
    }
    Ok(())
}

/// The eight keys of a v3 UserDecision payload.
pub const USER_DECISION_KEYS: [&str; 8] = [
    "consent_id",
    "decision",
    "decision_basis",
    "policy_snapshot_digest",
    "requested_action_content_digest",
    "requested_action_id",
    "requested_action_kind",
    "requested_action_precondition_revision",
];

fn validate_user_decision_payload(
    payload: &Json,
    expected_revision: u64,
) -> Result<(), ProtocolError> {
    let Some(m) = payload.as_obj() else {
        return perr("payload must be a JSON object");
    };
    let unknown = unknown_keys(m, &USER_DECISION_KEYS);
    if !unknown.is_empty() {
        return perr(format!(
            "UserDecision payload has unknown field(s): {}",
            names(unknown)
        ));
    }
    for key in [
        "consent_id",
        "decision",
        "requested_action_id",
        "requested_action_kind",
        "requested_action_content_digest",
        "requested_action_precondition_revision",
    ] {
        if !m.contains_key(key) {
            return perr(format!("UserDecision payload is missing {key}"));
        }
    }
    if !m
        .get("consent_id")
        .and_then(Json::as_str)
        .is_some_and(is_trimmed)
    {
        return perr("UserDecision consent_id must be non-empty trimmed text");
    }
    if !matches!(
        m.get("decision").and_then(Json::as_str),
        Some("granted" | "denied")
    ) {
        return perr("UserDecision decision must be granted or denied");
    }
    if !m
        .get("requested_action_id")
        .and_then(Json::as_str)
        .is_some_and(is_trimmed)
    {
        return perr("requested_action_id must be non-empty trimmed text");
    }
    if !matches!(
        m.get("requested_action_kind")
            .and_then(Json::as_str)
            .map(ActionKind::parse),
        Some(Ok(
            ActionKind::InstallCapability | ActionKind::UninstallCapability
        ))
    ) {
        return perr("requested_action_kind must be InstallCapability or UninstallCapability");
    }
    if !m
        .get("requested_action_content_digest")
        .and_then(Json::as_str)
        .is_some_and(is_sha)
    {
        return perr("requested_action_content_digest must be a SHA-256 digest");
    }
    match m.get("requested_action_precondition_revision") {
        Some(Json::Int(i)) if *i >= 0 => {
            if u64::try_from(*i).ok() != expected_revision.checked_add(1) {
                return perr(
                    "requested_action_precondition_revision must target the next committed revision",
                );
            }
        }
        _ => return perr("requested_action_precondition_revision must be a non-negative integer"),
    }
    match (m.get("decision_basis"), m.get("policy_snapshot_digest")) {
        (None, None) => {}
        (Some(basis), Some(policy)) => {
            if !matches!(basis.as_str(), Some("interactive" | "preapproved-policy")) {
                return perr("UserDecision decision_basis is unsupported");
            }
            if !policy.as_str().is_some_and(is_sha) {
                return perr("UserDecision policy_snapshot_digest must be a SHA-256 digest");
            }
        }
        _ => {
            return perr(
                "UserDecision decision provenance requires decision_basis and policy_snapshot_digest",
            );
        }
    }
    Ok(())
}

/// The seven keys of an InstallConsentExpired payload.
pub const CONSENT_EXPIRED_KEYS: [&str; 7] = [
    "consent_id",
    "install_expires_at",
    "policy_snapshot_digest",
    "requested_action_content_digest",
    "requested_action_id",
    "requested_action_kind",
    "requested_action_precondition_revision",
];

fn validate_consent_expired_payload(payload: &Json) -> Result<(), ProtocolError> {
    let Some(m) = payload.as_obj() else {
        return perr("payload must be a JSON object");
    };
    if !has_exact_keys(m, &CONSENT_EXPIRED_KEYS) {
        return perr(
            "InstallConsentExpired payload must contain exactly the pending consent identity",
        );
    }
    if m.get("requested_action_kind").and_then(Json::as_str)
        != Some(ActionKind::InstallCapability.as_str())
    {
        return perr("InstallConsentExpired requested_action_kind must be InstallCapability");
    }
    if !m
        .get("install_expires_at")
        .and_then(Json::as_str)
        .is_some_and(crate::shape::is_canonical_timestamp)
    {
        return perr("install_expires_at must use canonical UTC RFC 3339");
    }
    for key in ["policy_snapshot_digest", "requested_action_content_digest"] {
        if !m.get(key).and_then(Json::as_str).is_some_and(is_sha) {
            return perr(format!("{key} must be a SHA-256 digest"));
        }
    }
    if !matches!(m.get("requested_action_precondition_revision"), Some(Json::Int(i)) if *i >= 0) {
        return perr("requested_action_precondition_revision must be a non-negative integer");
    }
    Ok(())
}

/// A host action emitted by the reducer.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct HostAction {
    pub action_id: String,
    pub kind: ActionKind,
    pub scope: ScopeRef,
    pub precondition_revision: u64,
    pub payload: Json,
    pub privacy: PrivacyLabel,
    pub entity_id: Option<String>,
    pub source_digest: Option<String>,
    pub plan_id: Option<String>,
    pub catalog_snapshot_id: Option<String>,
    pub consent_id: Option<String>,
    pub lease_id: Option<String>,
    pub required_host_feature: Option<String>,
    pub expires_at: Option<String>,
    pub verification: Json,
    pub rollback: Json,
}

pub(crate) const ACTION_KEYS: [&str; 17] = [
    "action_id",
    "catalog_snapshot_id",
    "consent_id",
    "entity_id",
    "expires_at",
    "kind",
    "lease_id",
    "payload",
    "plan_id",
    "precondition_revision",
    "privacy",
    "protocol_version",
    "required_host_feature",
    "rollback",
    "scope",
    "source_digest",
    "verification",
];

impl HostAction {
    /// A borrowed view of the mapping the reference hashes: all 17 fields, nulls included.
    pub fn view(&self) -> JsonView<'_> {
        fn opt(v: &Option<String>) -> JsonView<'_> {
            JsonView::opt_str(v.as_deref())
        }
        JsonView::obj(vec![
            ("action_id", JsonView::Str(&self.action_id)),
            ("kind", JsonView::Str(self.kind.as_str())),
            ("scope", self.scope.view()),
            (
                "precondition_revision",
                JsonView::uint(self.precondition_revision),
            ),
            ("payload", JsonView::Json(&self.payload)),
            ("privacy", self.privacy.view()),
            ("protocol_version", JsonView::Int(PROTOCOL_VERSION)),
            ("entity_id", opt(&self.entity_id)),
            ("source_digest", opt(&self.source_digest)),
            ("plan_id", opt(&self.plan_id)),
            ("catalog_snapshot_id", opt(&self.catalog_snapshot_id)),
            ("consent_id", opt(&self.consent_id)),
            ("lease_id", opt(&self.lease_id)),
            ("required_host_feature", opt(&self.required_host_feature)),
            ("expires_at", opt(&self.expires_at)),
            ("verification", JsonView::Json(&self.verification)),
            ("rollback", JsonView::Json(&self.rollback)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    /// `H(CJ(action))`.
    pub fn content_digest(&self) -> String {
        sha256_hex(&self.view().to_cj())
    }

    /// The canonical JSON text of the action.
    pub fn to_cj(&self) -> String {
        self.view().to_cj()
    }

    /// Decodes an action mapping: exact key set and field types. The contract rules of the kinds
    /// are checked by [`crate::action_contract::validate_action`].
    pub fn from_json(v: &Json) -> Result<HostAction, ProtocolError> {
        let Some(m) = v.as_obj() else {
            return perr("action must be a JSON object");
        };
        let unknown = unknown_keys(m, &ACTION_KEYS);
        if !unknown.is_empty() {
            return perr(format!("action has unknown field(s): {}", names(unknown)));
        }
        for key in ACTION_KEYS {
            if !m.contains_key(key) {
                return perr(format!("action is missing {key}"));
            }
        }
        if m.get("protocol_version") != Some(&Json::Int(PROTOCOL_VERSION)) {
            return perr("unsupported protocol version; expected 1");
        }
        let opt_text = |key: &str| -> Result<Option<String>, ProtocolError> {
            match m.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Str(s)) if is_trimmed(s) => Ok(Some(s.clone())),
                Some(_) => perr(format!("{key} must be non-empty trimmed text")),
            }
        };
        let action_id = match m.get("action_id").and_then(Json::as_str) {
            Some(s) if is_trimmed(s) => s.to_owned(),
            _ => return perr("action_id must be non-empty trimmed text"),
        };
        let kind = ActionKind::parse(m.get("kind").and_then(Json::as_str).unwrap_or_default())?;
        let scope = ScopeRef::from_json(m.get("scope").unwrap_or(&Json::Null))?;
        let precondition_revision = match m.get("precondition_revision") {
            Some(Json::Int(i)) if *i >= 0 => u64::try_from(*i).unwrap_or(0),
            _ => return perr("precondition_revision must be a non-negative integer"),
        };
        let object = |key: &str| -> Result<Json, ProtocolError> {
            match m.get(key) {
                Some(v @ Json::Obj(_)) => Ok(v.clone()),
                _ => perr(format!("{key} must be a JSON object")),
            }
        };
        let expires_at = match opt_text("expires_at")? {
            Some(t) => {
                let n = normalize_protocol_timestamp("expires_at", &t)?;
                if n != t {
                    return perr("expires_at must use canonical UTC RFC 3339");
                }
                Some(n)
            }
            None => None,
        };
        Ok(HostAction {
            action_id,
            kind,
            scope,
            precondition_revision,
            payload: object("payload")?,
            privacy: PrivacyLabel::from_json(m.get("privacy").unwrap_or(&Json::Null))?,
            entity_id: opt_text("entity_id")?,
            source_digest: opt_text("source_digest")?,
            plan_id: opt_text("plan_id")?,
            catalog_snapshot_id: opt_text("catalog_snapshot_id")?,
            consent_id: opt_text("consent_id")?,
            lease_id: opt_text("lease_id")?,
            required_host_feature: opt_text("required_host_feature")?,
            expires_at,
            verification: object("verification")?,
            rollback: object("rollback")?,
        })
    }

    /// Parses canonical action JSON text and requires it to re-encode byte for byte.
    pub fn from_canonical_text(text: &str) -> Result<HostAction, ProtocolError> {
        let v = Json::parse(text).map_err(|e| ProtocolError::new(e.to_string()))?;
        let action = HostAction::from_json(&v)?;
        if action.to_cj() != text {
            return perr("action_json must use canonical encoding");
        }
        Ok(action)
    }
}

/// `action-` + `H("ctx-engine-action-v1:" + E + ":" + kind + ":" + (capability or "session") + ":" + ordinal)`.
pub fn action_id(
    event_digest: &str,
    kind: ActionKind,
    capability_id: Option<&str>,
    ordinal: usize,
) -> String {
    format!(
        "action-{}",
        sha256_hex(&format!(
            "ctx-engine-action-v1:{event_digest}:{}:{}:{ordinal}",
            kind.as_str(),
            capability_id.unwrap_or("session")
        ))
    )
}

/// `consent-` + `H("ctx-engine-consent-v1:" + E + ":" + capability_id)`.
pub fn consent_id(event_digest: &str, capability_id: &str) -> String {
    format!(
        "consent-{}",
        sha256_hex(&format!(
            "ctx-engine-consent-v1:{event_digest}:{capability_id}"
        ))
    )
}

/// The actions one event causes: revision `from` → `to = from + 1`.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Transition {
    pub event_id: String,
    pub scope: ScopeRef,
    pub from_revision: u64,
    pub to_revision: u64,
    pub actions: Vec<HostAction>,
    pub diagnostics: Vec<Json>,
}

impl Transition {
    /// Checks the reference's transition invariants.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        if self.from_revision.checked_add(1) != Some(self.to_revision) {
            return perr("to_revision must advance exactly one revision from from_revision");
        }
        let mut ids = BTreeSet::new();
        for a in &self.actions {
            if a.precondition_revision != self.to_revision {
                return perr("transition action precondition_revision must equal to_revision");
            }
            if a.scope != self.scope {
                return perr("transition action scope must equal the transition scope");
            }
            if !ids.insert(a.action_id.as_str()) {
                return perr("transition action ids must be unique");
            }
        }
        if self.diagnostics.iter().any(|d| d.as_obj().is_none()) {
            return perr("transition diagnostics must be JSON objects");
        }
        Ok(())
    }

    /// A borrowed view of the mapping the reference hashes.
    pub fn view(&self) -> JsonView<'_> {
        JsonView::obj(vec![
            (
                "actions",
                JsonView::Arr(self.actions.iter().map(HostAction::view).collect()),
            ),
            (
                "diagnostics",
                JsonView::Arr(self.diagnostics.iter().map(JsonView::Json).collect()),
            ),
            ("event_id", JsonView::Str(&self.event_id)),
            ("from_revision", JsonView::uint(self.from_revision)),
            ("protocol_version", JsonView::Int(PROTOCOL_VERSION)),
            ("scope", self.scope.view()),
            ("to_revision", JsonView::uint(self.to_revision)),
        ])
    }

    pub fn to_json(&self) -> Json {
        self.view().to_json()
    }

    pub fn from_json(v: &Json) -> Result<Transition, ProtocolError> {
        let Some(m) = v.as_obj() else {
            return perr("transition must be a JSON object");
        };
        if !has_exact_keys(
            m,
            &[
                "actions",
                "diagnostics",
                "event_id",
                "from_revision",
                "protocol_version",
                "scope",
                "to_revision",
            ],
        ) {
            return perr("transition does not have the exact transition fields");
        }
        if m.get("protocol_version") != Some(&Json::Int(PROTOCOL_VERSION)) {
            return perr("unsupported protocol version; expected 1");
        }
        let rev = |key: &str| -> Result<u64, ProtocolError> {
            match m.get(key) {
                Some(Json::Int(i)) if *i >= 0 => Ok(u64::try_from(*i).unwrap_or(0)),
                _ => perr(format!("{key} must be a non-negative integer")),
            }
        };
        let actions = m
            .get("actions")
            .and_then(Json::as_arr)
            .ok_or_else(|| ProtocolError::new("transition actions must be an array"))?
            .iter()
            .map(HostAction::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        let diagnostics = m
            .get("diagnostics")
            .and_then(Json::as_arr)
            .ok_or_else(|| ProtocolError::new("transition diagnostics must be an array"))?
            .to_vec();
        let t = Transition {
            event_id: m
                .get("event_id")
                .and_then(Json::as_str)
                .filter(|s| is_trimmed(s))
                .ok_or_else(|| ProtocolError::new("event_id must be non-empty trimmed text"))?
                .to_owned(),
            scope: ScopeRef::from_json(m.get("scope").unwrap_or(&Json::Null))?,
            from_revision: rev("from_revision")?,
            to_revision: rev("to_revision")?,
            actions,
            diagnostics,
        };
        t.validate()?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scope() -> ScopeRef {
        ScopeRef::new("t", "w", "r", "s", "e", "h", None).unwrap()
    }

    #[test]
    fn event_round_trips_and_normalizes_time() {
        let mut e = EngineEvent::bare(
            "ev-1",
            EventKind::SessionStarted,
            scope(),
            0,
            "2026-01-01T10:00:00.500+02:00",
        );
        e.host_descriptor_digest = Some("a".repeat(64));
        e.validate().unwrap();
        assert_eq!(e.occurred_at, "2026-01-01T08:00:00.5Z");
        let j = e.to_json();
        assert_eq!(j.as_obj().unwrap().len(), 19);
        assert_eq!(EngineEvent::from_json(&j).unwrap(), e);
    }

    #[test]
    fn decision_causing_events_need_replay_fields() {
        let mut e = EngineEvent::bare(
            "ev-1",
            EventKind::TurnStarting,
            scope(),
            1,
            "2026-01-01T10:00:00Z",
        );
        assert_eq!(
            e.validate().unwrap_err().message(),
            "engine_version is required for decision-causing event TurnStarting"
        );
    }

    #[test]
    fn user_decision_must_target_next_revision() {
        let mut e = EngineEvent::bare(
            "ev-1",
            EventKind::UserDecision,
            scope(),
            3,
            "2026-01-01T10:00:00Z",
        );
        e.payload = Json::object([
            ("consent_id", Json::str("c")),
            ("decision", Json::str("granted")),
            ("requested_action_id", Json::str("a")),
            ("requested_action_kind", Json::str("InstallCapability")),
            ("requested_action_content_digest", Json::str("0".repeat(64))),
            ("requested_action_precondition_revision", Json::Int(3)),
        ]);
        assert_eq!(
            e.validate().unwrap_err().message(),
            "requested_action_precondition_revision must target the next committed revision"
        );
    }

    #[test]
    fn scope_key_is_canonical_json_of_four_fields() {
        assert_eq!(
            scope().stream_key(),
            "{\"repository_id\":\"r\",\"session_id\":\"s\",\"tenant_id\":\"t\",\"workspace_id\":\"w\"}"
        );
    }
}
