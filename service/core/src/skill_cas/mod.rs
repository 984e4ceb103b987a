//! The skill content-addressed store (skill CAS): the install actuator of `skill` capabilities.
//! Specified in `spec/skill-cas.md`; spec/skill-cas.md §9; spec/service.md §7.
//!
//! A skill body is published as the file `<root>/<content_sha256>` (mode 0600, one link) inside
//! an owner-private root. The runtime configuration pins the root's identity (canonical path,
//! device, inode) and yields the install execution binding; [`SkillCasRuntimeConfig::connect`]
//! is the eligibility gate that turns one journaled install authority into a
//! [`SkillCasDriver`]. The driver's [`SkillCasDriver::apply_once`] is the single physical effect
//! attempt (it loads the body only after the durable claim, authenticates it against the
//! material, stages it and lets recovery publish it), and [`SkillCasDriver::reconcile`] observes
//! — and finishes or cleans up — whatever any earlier attempt left.
//!
//! POSIX only: every operation is relative to the pinned root's descriptor and never follows a
//! symbolic link (see `fsops`).

mod error;
mod fsops;
mod recovery;
mod root;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use ctx_model::{
    ActionKind, CapabilityKind, HostAction, INSTALL_DESCRIPTOR_SCHEMA_V2, InstallExecutionBinding,
    Json, cja_digest, descriptor_matches_result_material, is_sha, is_trimmed, sha256_hex_bytes,
    validate_install_plan_descriptor, validate_material_identity,
};

pub use error::{Cause, SkillCasError};
pub use fsops::{LOCK_TIMEOUT, STAGE_LIMIT, STAGE_SUFFIX};
pub use recovery::{LOCK_SUFFIX, STAGE_PREFIX};
pub use root::TARGET_IDENTITY_SCHEMA;

use error::{cas_error, conflict, invalid};
use fsops::{create_stage, lock_content};
use recovery::{CasState, ContentAddress, Synced, recover};
use root::{RootIdentity, capture, with_pinned};

/// Schema of the observation verification document.
pub const OBSERVATION_SCHEMA: &str = "ctx.skill-cas-observation-v1";

const ROOT_UNAVAILABLE: &str = "skill CAS root is unavailable or unsupported";
const ROOT_CHANGED: &str = "skill CAS root changed after runtime configuration";
const NOT_ELIGIBLE: &str = "install authority is not eligible for the skill CAS";

/// The part of the eligibility gate (spec/skill-cas.md §4) that depends only on what is installed:
/// the skill CAS installs a `skill` whose install neither expands permissions nor requires
/// credentials. A host can ask this before choosing a capability; `connect` asks it again of the
/// descriptor (a missing flag counts as set).
pub fn installs(kind: &str, permission_expansion: bool, credential_requirement: bool) -> bool {
    CapabilityKind::parse(kind) == Some(CapabilityKind::Skill)
        && !permission_expansion
        && !credential_requirement
}

/// What a content-addressed store admits (its eligibility gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasGate {
    /// The reference's skill CAS: a `skill` without permission expansion or credentials.
    Skills,
    /// A material store (ctx's addition to the reference): an agent or an MCP server, whatever
    /// their flags, and a skill whose flags keep it out of the skill CAS. Their install publishes the consented catalog bytes only; what they may do is
    /// the person's consent to give, which the install policy demands for every flagged install,
    /// and what the host does with them is the activation's business.
    Materials,
}

impl CasGate {
    /// Whether an install of `kind` with these flags passes the gate.
    pub fn admits(
        self,
        kind: &str,
        permission_expansion: bool,
        credential_requirement: bool,
    ) -> bool {
        match self {
            CasGate::Skills => installs(kind, permission_expansion, credential_requirement),
            CasGate::Materials => match CapabilityKind::parse(kind) {
                Some(CapabilityKind::Agent | CapabilityKind::McpServer) => true,
                // A skill the skill CAS may not install on its own (spec/skill-cas.md §4): one
                // whose install expands permissions (an executable script, pre-approved tools)
                // or needs credentials is installed here, after the person's consent.
                Some(CapabilityKind::Skill) => permission_expansion || credential_requirement,
                _ => false,
            },
        }
    }
}

/// Why the trusted body resolver could not produce a skill body. The detail is kept for `Debug`
/// only: it may name private sources.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("skill body source could not load the material")]
pub struct BodySourceError {
    pub detail: String,
}

impl BodySourceError {
    pub fn new(detail: impl Into<String>) -> BodySourceError {
        BodySourceError {
            detail: detail.into(),
        }
    }
}

/// The trusted resolver of skill bodies. Its output is never trusted: the driver authenticates it
/// against the material identity before anything is written.
pub trait SkillBodySource: Send + Sync + fmt::Debug {
    /// The skill body text for `material` (called only after the durable claim, at most once per
    /// `apply_once`).
    fn load(&self, action: &HostAction, material: &Json) -> Result<String, BodySourceError>;
}

/// The immutable runtime configuration of the skill CAS: the pinned root, the body source, the
/// installer id and the host identity (spec/skill-cas.md §4).
pub struct SkillCasRuntimeConfig {
    root: RootIdentity,
    target_identity_digest: String,
    body_source: Arc<dyn SkillBodySource>,
    installer_id: String,
    host_identity_digest: String,
    gate: CasGate,
}

impl fmt::Debug for SkillCasRuntimeConfig {
    /// Identity digests only: no path and nothing of the body source.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillCasRuntimeConfig")
            .field("installer_id", &self.installer_id)
            .field("host_identity_digest", &self.host_identity_digest)
            .field("target_identity_digest", &self.target_identity_digest)
            .finish_non_exhaustive()
    }
}

impl SkillCasRuntimeConfig {
    /// Validates the scalars and captures the root identity now. A root that cannot be captured
    /// (missing, not owner-private, unsafe ancestry, ...) is `Error("skill CAS root is unavailable
    /// or unsupported")` with the filesystem error as its source.
    pub fn new(
        skill_store_root: &Path,
        body_source: Arc<dyn SkillBodySource>,
        installer_id: &str,
        host_identity_digest: &str,
    ) -> Result<SkillCasRuntimeConfig, SkillCasError> {
        if !is_trimmed(installer_id) {
            return Err(invalid("installer_id must be non-empty trimmed text"));
        }
        if !is_sha(host_identity_digest) {
            return Err(invalid(
                "host_identity_digest must be a lowercase SHA-256 digest",
            ));
        }
        let (root, target_identity_digest) = capture_with_digest(skill_store_root)
            .map_err(|e| cas_error(ROOT_UNAVAILABLE, Some(Box::new(e))))?;
        Ok(SkillCasRuntimeConfig {
            root,
            target_identity_digest,
            body_source,
            installer_id: installer_id.to_owned(),
            host_identity_digest: host_identity_digest.to_owned(),
            gate: CasGate::Skills,
        })
    }

    /// The same store with another eligibility gate: [`CasGate::Materials`] makes it the material
    /// store of agents and MCP servers (keep it in its own root).
    pub fn with_gate(mut self, gate: CasGate) -> SkillCasRuntimeConfig {
        self.gate = gate;
        self
    }

    pub fn gate(&self) -> CasGate {
        self.gate
    }

    /// The same store, its execution bindings naming `target_identity_digest` instead of the
    /// digest of its captured root (spec/skill-cas.md §3, "Named target"): for a store inside a
    /// data directory, named by the directory's stored identity, so a consent bound to it stays
    /// answerable when the directory is copied or moved (spec/cli.md §2). The root is still
    /// captured, pinned and re-captured as before; only the persisted name changes.
    pub fn with_target_identity(
        mut self,
        target_identity_digest: &str,
    ) -> Result<SkillCasRuntimeConfig, SkillCasError> {
        if !is_sha(target_identity_digest) {
            return Err(invalid(
                "target_identity_digest must be a lowercase SHA-256 digest",
            ));
        }
        target_identity_digest.clone_into(&mut self.target_identity_digest);
        Ok(self)
    }

    pub fn installer_id(&self) -> &str {
        &self.installer_id
    }

    pub fn host_identity_digest(&self) -> &str {
        &self.host_identity_digest
    }

    /// The captured root identity digest (spec/skill-cas.md §3).
    pub fn target_identity_digest(&self) -> &str {
        &self.target_identity_digest
    }

    /// The canonical root captured at configuration.
    pub fn root(&self) -> &Path {
        self.root.canonical_root()
    }

    /// The execution binding of this driver (the reference's `registration(driver_digest)`):
    /// `driver_id = installer_id`, the supplied driver digest, the host identity and the captured
    /// target identity. The root is re-captured first; any difference (or a failure to capture)
    /// is `Error("skill CAS root changed after runtime configuration")`.
    pub fn binding(&self, driver_digest: &str) -> Result<InstallExecutionBinding, SkillCasError> {
        if !is_sha(driver_digest) {
            return Err(invalid("driver_digest must be a lowercase SHA-256 digest"));
        }
        self.recapture(ROOT_CHANGED)?;
        InstallExecutionBinding::new(
            &self.installer_id,
            driver_digest,
            &self.host_identity_digest,
            &self.target_identity_digest,
        )
        .map_err(|e| invalid(e.to_string()))
    }

    /// The eligibility gate (spec/skill-cas.md §4), run after the durable claim exists: the root is
    /// still the captured one and the binding names it; the descriptor is a valid schema-v2
    /// `skill` descriptor without permission expansion or credential requirement; the action is
    /// an install of a `skill` whose typed result material the descriptor names.
    pub fn connect(
        &self,
        action: &HostAction,
        descriptor: &Json,
        binding: &InstallExecutionBinding,
    ) -> Result<SkillCasDriver, SkillCasError> {
        self.recapture(NOT_ELIGIBLE)?;
        let payload = &action.payload;
        let kind = descriptor.get_str("kind").unwrap_or_default();
        let eligible = binding.validate().is_ok()
            && binding.target_identity_digest == self.target_identity_digest
            // Rust-side additions (the reference's registry checks these before connecting):
            // the binding is this configuration's, and the journal names this driver.
            && binding.driver_id == self.installer_id
            && binding.host_identity_digest == self.host_identity_digest
            && payload.get_str("installer_digest") == Some(binding.driver_digest.as_str())
            && descriptor.get_str("installer_id") == Some(self.installer_id.as_str())
            && action.kind == ActionKind::InstallCapability
            // The reference's own conditions.
            && validate_install_plan_descriptor(descriptor).is_ok()
            && descriptor.get_str("schema") == Some(INSTALL_DESCRIPTOR_SCHEMA_V2)
            && self.gate.admits(
                kind,
                descriptor.get("permission_expansion") != Some(&Json::Bool(false)),
                descriptor.get("credential_requirement") != Some(&Json::Bool(false)),
            )
            && payload.get_str("capability_kind") == Some(kind);
        if !eligible {
            return Err(cas_error(NOT_ELIGIBLE, None));
        }
        let material = match payload.get("result_material") {
            Some(m @ Json::Obj(_)) => m,
            _ => {
                return Err(cas_error(
                    "install action has no typed result material",
                    None,
                ));
            }
        };
        validate_material_identity(material)
            .map_err(|e| cas_error("install result material is invalid", Some(Box::new(e))))?;
        let matches = descriptor_matches_result_material(descriptor, material)
            && material.get_str("kind") == Some(kind)
            && payload
                .get("install_plan_descriptor")
                .is_none_or(|journaled| journaled == descriptor);
        if !matches {
            return Err(cas_error(
                "skill CAS material does not match the install descriptor",
                None,
            ));
        }
        // The validator guarantees both fields; a failure here is still refused, never a panic.
        let (Some(content_sha256), Some(Ok(content_bytes)), Some(identity_digest)) = (
            material.get_str("content_sha256"),
            material
                .get("content_bytes")
                .and_then(Json::as_i64)
                .map(u64::try_from),
            material.get_str("identity_digest"),
        ) else {
            return Err(cas_error("install result material is invalid", None));
        };
        Ok(SkillCasDriver {
            root: self.root.clone(),
            address: ContentAddress::new(content_sha256, content_bytes),
            action: action.clone(),
            action_content_digest: action.content_digest(),
            binding_digest: binding.binding_digest(),
            material: material.clone(),
            material_identity_digest: identity_digest.to_owned(),
            body_source: Arc::clone(&self.body_source),
            apply_failed: false,
            synced: Synced::default(),
        })
    }

    /// Re-captures the root and requires the configured identity; `message` is the caller's
    /// sentence.
    fn recapture(&self, message: &'static str) -> Result<(), SkillCasError> {
        match capture(self.root.canonical_root()) {
            Ok(now) if now == self.root => Ok(()),
            Ok(_) => Err(cas_error(message, None)),
            Err(e) => Err(cas_error(message, Some(Box::new(e)))),
        }
    }
}

/// The root identity digest of `root` (spec/skill-cas.md §4 `skill_cas_target_identity_digest`), or
/// `Error("skill CAS root is unavailable or unsupported")`.
pub fn skill_cas_target_identity_digest(root: &Path) -> Result<String, SkillCasError> {
    capture_with_digest(root)
        .map(|(_, digest)| digest)
        .map_err(|e| cas_error(ROOT_UNAVAILABLE, Some(Box::new(e))))
}

fn capture_with_digest(root: &Path) -> Result<(RootIdentity, String), SkillCasError> {
    let identity = capture(root)?;
    let digest = identity.target_identity_digest()?;
    Ok((identity, digest))
}

/// The state an install driver observed (spec/skill-cas.md §9; spec/service.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObservationState {
    /// The final name holds exactly the material.
    InstalledExact,
    /// Nothing is installed and nothing is left over.
    Absent,
    /// Something unsafe or unexpected occupies the address; it is never written over.
    Conflict,
    /// The state could not be established (or this driver's apply failed).
    Indeterminate,
}

impl ObservationState {
    pub const ALL: [ObservationState; 4] = [
        ObservationState::InstalledExact,
        ObservationState::Absent,
        ObservationState::Conflict,
        ObservationState::Indeterminate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ObservationState::InstalledExact => "installed-exact",
            ObservationState::Absent => "absent",
            ObservationState::Conflict => "conflict",
            ObservationState::Indeterminate => "indeterminate",
        }
    }

    /// Parses a state string (`unsupported install observation state` otherwise).
    pub fn parse(s: &str) -> Result<ObservationState, SkillCasError> {
        ObservationState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| invalid("unsupported install observation state"))
    }
}

impl fmt::Display for ObservationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a driver's `reconcile` observed. Only `installed-exact` carries (and requires) the
/// observed material identity digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallDriverObservation {
    pub state: ObservationState,
    pub verification_digest: String,
    pub observed_material_identity_digest: Option<String>,
}

impl InstallDriverObservation {
    /// A validated observation (the reference's constructor checks).
    pub fn new(
        state: ObservationState,
        verification_digest: &str,
        observed_material_identity_digest: Option<&str>,
    ) -> Result<InstallDriverObservation, SkillCasError> {
        let observation = InstallDriverObservation {
            state,
            verification_digest: verification_digest.to_owned(),
            observed_material_identity_digest: observed_material_identity_digest.map(str::to_owned),
        };
        observation.validate()?;
        Ok(observation)
    }

    /// Checks the digests and the state/material pairing.
    pub fn validate(&self) -> Result<(), SkillCasError> {
        if !is_sha(&self.verification_digest) {
            return Err(invalid(
                "verification_digest must be a lowercase SHA-256 digest",
            ));
        }
        match (&self.observed_material_identity_digest, self.state) {
            (Some(d), _) if !is_sha(d) => Err(invalid(
                "observed_material_identity_digest must be a lowercase SHA-256 digest",
            )),
            (None, ObservationState::InstalledExact) => Err(invalid(
                "installed-exact observation requires a material identity",
            )),
            (Some(_), state) if state != ObservationState::InstalledExact => Err(invalid(
                "non-installed observations cannot authorize material",
            )),
            _ => Ok(()),
        }
    }
}

/// `H(CJA({binding_digest, material_identity_digest, schema, state}))` (spec/skill-cas.md §9).
pub fn observation_verification_digest(
    binding_digest: &str,
    material_identity_digest: &str,
    state: ObservationState,
) -> String {
    cja_digest(&Json::object([
        ("binding_digest", Json::str(binding_digest)),
        (
            "material_identity_digest",
            Json::str(material_identity_digest),
        ),
        ("schema", Json::str(OBSERVATION_SCHEMA)),
        ("state", Json::str(state.as_str())),
    ]))
}

/// One connected install of one skill material (spec/skill-cas.md §4, §2, §5, §6, §7, §9). Not
/// `Clone`: it is the process-local handle of one claimed install.
pub struct SkillCasDriver {
    root: RootIdentity,
    address: ContentAddress,
    action: HostAction,
    action_content_digest: String,
    binding_digest: String,
    material: Json,
    material_identity_digest: String,
    body_source: Arc<dyn SkillBodySource>,
    apply_failed: bool,
    /// What this driver already made durable (recovery skips syncing it again).
    synced: Synced,
}

impl fmt::Debug for SkillCasDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillCasDriver")
            .field("content_sha256", &self.address.content_sha256())
            .field("action_content_digest", &self.action_content_digest)
            .field("binding_digest", &self.binding_digest)
            .field("material_identity_digest", &self.material_identity_digest)
            .field("apply_failed", &self.apply_failed)
            .finish_non_exhaustive()
    }
}

impl SkillCasDriver {
    /// The single physical effect attempt (spec/skill-cas.md §5). Under the content lock in the
    /// pinned root: recover; if the address is already exact, return without loading or writing
    /// anything; if it is not absent, `Conflict("skill CAS address is not safely writable")`.
    /// Otherwise load the body, authenticate it, stage it exclusively and recover again, which
    /// publishes it; the result must be exact (`Conflict("skill CAS publication could not be
    /// verified")`).
    ///
    /// Errors raised inside the pinned scope that are not filesystem errors (the conflicts above,
    /// the body checks, a body-source failure) surface as `FilesystemError("skill store directory
    /// operation failed")` with the original as `source()`, as in the reference. Any failure —
    /// or a panic unwinding out of the body source — marks the driver failed, and its
    /// [`reconcile`](SkillCasDriver::reconcile) then reports `indeterminate`.
    pub fn apply_once(&mut self) -> Result<(), SkillCasError> {
        // Set first and cleared only on success, so an unwinding panic also leaves it set.
        self.apply_failed = true;
        let synced = &mut self.synced;
        let result = with_pinned(&self.root, |dir| {
            let _lock = lock_content(dir, &self.address.lock_name())?;
            match recover(dir, &self.address, synced)? {
                CasState::Exact => return Ok(()),
                CasState::Absent => {}
                CasState::Conflict => {
                    return Err(conflict("skill CAS address is not safely writable"));
                }
            }
            let body = self
                .body_source
                .load(&self.action, &self.material)
                .map_err(|e| SkillCasError::FilesystemError {
                    message: "skill store directory operation failed",
                    source: Some(Box::new(e)),
                })?;
            authenticate_body(&body, &self.address)?;
            let stage = self.address.stage_name(&self.action_content_digest);
            let staged = create_stage(dir, &stage, body.as_bytes(), self.address.expected())?;
            // `create_stage` fsynced the stage's content.
            synced.files.insert(staged);
            match recover(dir, &self.address, synced)? {
                CasState::Exact => Ok(()),
                _ => Err(conflict("skill CAS publication could not be verified")),
            }
        });
        if result.is_ok() {
            self.apply_failed = false;
        }
        result
    }

    /// Observes the content address (spec/skill-cas.md §9). After a failed `apply_once` this
    /// returns `indeterminate` without touching the filesystem; otherwise it runs recovery under
    /// the content lock — which may publish a leftover exact stage or remove leftover stages — and
    /// maps conflicts to `conflict` and every other error to `indeterminate`.
    pub fn reconcile(&mut self) -> InstallDriverObservation {
        let state = if self.apply_failed {
            ObservationState::Indeterminate
        } else {
            let synced = &mut self.synced;
            let recovered = with_pinned(&self.root, |dir| {
                let _lock = lock_content(dir, &self.address.lock_name())?;
                recover(dir, &self.address, synced)
            });
            match recovered {
                Ok(CasState::Exact) => ObservationState::InstalledExact,
                Ok(CasState::Absent) => ObservationState::Absent,
                Ok(CasState::Conflict) => ObservationState::Conflict,
                Err(e) if e.is_conflict() => ObservationState::Conflict,
                Err(_) => ObservationState::Indeterminate,
            }
        };
        InstallDriverObservation {
            state,
            verification_digest: observation_verification_digest(
                &self.binding_digest,
                &self.material_identity_digest,
                state,
            ),
            observed_material_identity_digest: (state == ObservationState::InstalledExact)
                .then(|| self.material_identity_digest.clone()),
        }
    }

    /// True after a failed `apply_once`.
    pub fn apply_failed(&self) -> bool {
        self.apply_failed
    }

    /// The execution binding digest this driver reports under.
    pub fn binding_digest(&self) -> &str {
        &self.binding_digest
    }
}

/// The body must be non-empty NUL-free strict UTF-8 (a Rust `String` is always strict UTF-8, so
/// the reference's lone-surrogate case cannot arise) whose size and SHA-256 are the material's.
fn authenticate_body(body: &str, address: &ContentAddress) -> Result<(), SkillCasError> {
    if body.is_empty() || body.contains('\0') {
        return Err(cas_error(
            "skill body must be non-empty NUL-free UTF-8 text",
            None,
        ));
    }
    let bytes = body.as_bytes();
    let size_matches = u64::try_from(bytes.len()).is_ok_and(|n| n == address.content_bytes());
    if !size_matches || sha256_hex_bytes(bytes) != address.content_sha256() {
        return Err(cas_error(
            "skill body does not match authenticated material",
            None,
        ));
    }
    Ok(())
}
