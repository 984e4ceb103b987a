//! Activation actuators: make a consented, installed capability visible to an agent host on
//! disk, and take it away again, without ever destroying what a person wrote
//! (`spec/activation.md`; spec/activation.md §5; spec/cli.md §7.2).
//!
//! | host | skill | agent | MCP server |
//! |---|---|---|---|
//! | Claude Code | link `~/.claude/skills/<name>` → store dir | file `~/.claude/agents/ctx/<name>.md` | member `mcpServers.<name>` of `<project>/.mcp.json` |
//! | Codex | link `~/.agents/skills/<name>` → store dir | file `$CODEX_HOME/agents/<name>.toml` | table `[mcp_servers.<name>]` of `$CODEX_HOME/config.toml` |
//!
//! Every operation follows one protocol: materialize the content (skills: once, into the
//! content-addressed store) → read the target's state → compare-and-swap precondition (absent,
//! or exactly what the ledger says ctx last wrote) → journal the intent → one atomic step →
//! verify by re-reading what the host reads → journal the outcome. [`Actuator::recover`]
//! resolves intents a crash left without outcome by inspecting their targets, and
//! [`Actuator::inspect`] tells `ctx doctor` which of ctx's targets are still as ctx left them.
//!
//! One [`Actuator`] runs one operation at a time; the journal's process lock keeps other ctx
//! processes of the same data directory out, and each ledger append names the revision it
//! expects.

mod agent;
mod entry;
mod error;
mod frontmatter;
mod fsx;
mod ledger;
mod mcp;
mod names;
mod store;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use ctx_model::{CapabilityKind, is_capability_identity, sha256_hex_bytes};
use ctx_service::SkillTree;

use crate::hosts::{AgentHost, HostHome};
use crate::profile::{AgentLayout, McpLayout};
/// Claude Code's facts, kept under their old paths (they live in its profile).
pub use crate::profile::{CLAUDE_AGENTS_SUBDIR, CLAUDE_BUNDLED_SKILLS, CLAUDE_PROJECT_MCP_FILE};

pub use agent::{AGENT_TREE_DEPTH_MAX, AGENT_TREE_ENTRIES_MAX, CODEX_AGENT_HEADER};
pub use entry::STAGING_DIR_NAME;
pub use error::LedgerRecordError;
pub use error::{ActivationError, ConflictReason, LedgerError};
pub use ledger::{
    ACTIVATION_INDEX_KEY, ActivationLedger, JournalLedger, LedgerRecord, Operation, Outcome,
    OutcomeResult, Resolution, TARGET_TEXT_MAX_BYTES, TargetHistory, TargetKey,
};
pub use names::{
    AGENT_NAME_MAX_BYTES, RESERVED_SERVER_NAMES, RESERVED_SKILL_NAMES, RESERVED_SKILL_WORDS,
    SERVER_NAME_MAX_BYTES, SKILL_NAME_MAX_BYTES,
};
pub use store::SKILL_FILE;

use agent::AgentMaterial;
use entry::{EntryKind, EntryPlace, Staged, skill_link_state};
use fsx::{Dir, utf8};
use mcp::{MemberPlace, MemberValue};
use store::StoredSkill;

/// Largest material body ctx activates (a `SKILL.md`, an agent file, a server entry), in bytes.
pub const ACTIVATION_BODY_MAX_BYTES: usize = 256 * 1024;
/// Largest target file ctx reads to learn its state (an agent file, a Codex agent ctx wrote);
/// a larger file is never ctx's and is compared by its size alone.
pub const TARGET_READ_MAX_BYTES: usize = 1024 * 1024;
/// Longest skill `description` (Agent Skills specification), in characters.
pub const SKILL_DESCRIPTION_MAX_CHARS: usize = 1024;

/// Fail points (feature `failpoints`) at the protocol's crash seams.
pub mod failpoints {
    /// The intent is journaled; the atomic step has not run.
    pub const AFTER_INTENT: &str = "activation-after-intent";
    /// The atomic step ran; the outcome is not journaled.
    pub const AFTER_APPLY: &str = "activation-after-apply";
}

/// Where a capability is (de)activated: host, kind, a checked name and, for Claude Code MCP
/// servers, the absolute project directory whose `.mcp.json` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationTarget {
    host: AgentHost,
    kind: CapabilityKind,
    name: String,
    project: Option<PathBuf>,
}

impl ActivationTarget {
    /// Checks the name for its kind (spec/activation.md §2) and the project directory.
    pub fn new(
        host: AgentHost,
        kind: CapabilityKind,
        name: &str,
        project: Option<&Path>,
    ) -> Result<ActivationTarget, ActivationError> {
        names::check(host, kind, name)?;
        if let Some(p) = project
            && !p.is_absolute()
        {
            return Err(ActivationError::ProjectDirNotAbsolute {
                path: p.to_path_buf(),
            });
        }
        if kind == CapabilityKind::McpServer && host.profile().mcp_in_project() && project.is_none()
        {
            return Err(ActivationError::ProjectDirRequired {
                name: name.to_owned(),
            });
        }
        let project = project.map(Path::to_path_buf);
        Ok(ActivationTarget {
            host,
            kind,
            name: name.to_owned(),
            project,
        })
    }

    pub fn host(&self) -> AgentHost {
        self.host
    }

    pub fn kind(&self) -> CapabilityKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn project(&self) -> Option<&Path> {
        self.project.as_deref()
    }
}

/// An activation: the target, the capability id, and the material from the catalog: one body
/// (`SKILL.md`, the agent Markdown, or `{"mcpServers": {"<name>": {...}}}`), or a skill's whole
/// directory tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationRequest {
    target: ActivationTarget,
    capability_id: String,
    material: Material,
}

/// What an activation puts at the host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Material {
    /// One body: a skill's `SKILL.md`, an agent file, a server entry.
    Body(Vec<u8>),
    /// A skill's whole directory (spec/skill-tree.md), stored under the SHA-256 of its pack.
    Tree(SkillTree),
}

impl ActivationRequest {
    /// Checks the capability id (`<kind>:<name>` grammar) and the body's size.
    pub fn new(
        target: ActivationTarget,
        capability_id: &str,
        body: Vec<u8>,
    ) -> Result<ActivationRequest, ActivationError> {
        if !is_capability_identity(target.kind.as_str(), capability_id) {
            return Err(ActivationError::InvalidCapabilityId {
                kind: target.kind,
                id: capability_id.to_owned(),
            });
        }
        if body.len() > ACTIVATION_BODY_MAX_BYTES {
            return Err(ActivationError::BodyTooLarge {
                name: target.name.clone(),
                len: body.len(),
                max: ACTIVATION_BODY_MAX_BYTES,
            });
        }
        Ok(ActivationRequest {
            target,
            capability_id: capability_id.to_owned(),
            material: Material::Body(body),
        })
    }

    /// A skill activated as its whole directory `tree` (spec/activation.md §3): checks the
    /// capability id, that the target is a skill (an agent or a server is one body, never a
    /// tree), and the size of the tree's `SKILL.md`. The walk that built `tree` bounds the rest
    /// (spec/skill-tree.md §3).
    pub fn new_tree(
        target: ActivationTarget,
        capability_id: &str,
        tree: SkillTree,
    ) -> Result<ActivationRequest, ActivationError> {
        if !is_capability_identity(target.kind.as_str(), capability_id) {
            return Err(ActivationError::InvalidCapabilityId {
                kind: target.kind,
                id: capability_id.to_owned(),
            });
        }
        if target.kind != CapabilityKind::Skill {
            return Err(ActivationError::TreeNotSkill {
                kind: target.kind,
                name: target.name.clone(),
            });
        }
        let len = tree.skill_md().len();
        if len > ACTIVATION_BODY_MAX_BYTES {
            return Err(ActivationError::BodyTooLarge {
                name: target.name.clone(),
                len,
                max: ACTIVATION_BODY_MAX_BYTES,
            });
        }
        Ok(ActivationRequest {
            target,
            capability_id: capability_id.to_owned(),
            material: Material::Tree(tree),
        })
    }

    /// The skill tree this request activates, when it carries a tree rather than one body.
    pub fn tree(&self) -> Option<&SkillTree> {
        match &self.material {
            Material::Tree(tree) => Some(tree),
            Material::Body(_) => None,
        }
    }

    /// The body: the one body, or a tree's `SKILL.md`.
    fn body(&self) -> &[u8] {
        match &self.material {
            Material::Body(body) => body,
            Material::Tree(tree) => tree.skill_md(),
        }
    }

    pub fn target(&self) -> &ActivationTarget {
        &self.target
    }

    pub fn capability_id(&self) -> &str {
        &self.capability_id
    }
}

/// What an activation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationOutcome {
    /// The target was absent and now holds the capability.
    Activated,
    /// The target held ctx's earlier version and now holds this one.
    Replaced,
    /// The target already held exactly this, written by ctx: nothing was recorded.
    AlreadyActive,
    /// The target already held exactly this, but ctx did not write it: nothing was written or
    /// recorded, and ctx will not remove it (spec/activation.md invariant 5).
    PresentNotOwned,
}

/// The result of [`Actuator::activate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationReport {
    pub target: TargetKey,
    pub outcome: ActivationOutcome,
    /// The target's state digest now.
    pub state: String,
}

/// What a deactivation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeactivationOutcome {
    /// ctx's entry was removed.
    Removed,
    /// A person had already removed it; the ledger now says so too.
    AlreadyAbsent,
}

/// The result of [`Actuator::deactivate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeactivationReport {
    pub target: TargetKey,
    pub outcome: DeactivationOutcome,
}

/// One intent [`Actuator::recover`] resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub target: TargetKey,
    pub name: String,
    pub operation: Operation,
    pub intent_revision: u64,
    pub result: OutcomeResult,
}

/// How a target ctx answers for looks now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetStatus {
    /// Exactly what ctx last wrote.
    Active,
    /// Something else: a person (or another tool) changed it.
    Drifted,
    /// Nothing: a person removed it.
    Missing,
    /// An intent has no outcome yet: recovery resolves it.
    Pending { operation: Operation, revision: u64 },
    /// The target could not be read (for example, its config file is not valid).
    Unreadable { detail: String },
}

/// One line of [`Actuator::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInspection {
    pub target: TargetKey,
    pub name: String,
    pub capability_id: String,
    pub status: TargetStatus,
}

/// Where an operation works.
#[derive(Debug, Clone)]
enum Place {
    Entry(EntryPlace),
    Member(MemberPlace),
}

impl Place {
    fn observe(&self) -> Result<Option<String>, ActivationError> {
        match self {
            Place::Entry(p) => p.observe(),
            Place::Member(p) => p.observe(),
        }
    }

    fn path(&self) -> PathBuf {
        match self {
            Place::Entry(p) => p.path(),
            Place::Member(p) => p.file.clone(),
        }
    }

    fn entry(&self) -> Option<String> {
        match self {
            Place::Entry(_) => None,
            Place::Member(p) => Some(p.entry()),
        }
    }
}

/// What an activation writes, with where. A link to a tree's store directory keeps the tree, so
/// the verification reads the whole tree back through the link.
#[derive(Debug)]
enum Plan<'r> {
    Link(EntryPlace, StoredSkill, Option<&'r SkillTree>),
    File(EntryPlace, Vec<u8>),
    Member(MemberPlace, MemberValue),
}

impl Plan<'_> {
    fn place(&self) -> Place {
        match self {
            Plan::Link(p, ..) | Plan::File(p, _) => Place::Entry(p.clone()),
            Plan::Member(p, _) => Place::Member(p.clone()),
        }
    }

    /// The state the target holds once the plan is applied.
    fn new_state(&self) -> String {
        match self {
            Plan::Link(_, stored, _) => skill_link_state(&stored.dir, &stored.sha256),
            Plan::File(_, bytes) => sha256_hex_bytes(bytes),
            Plan::Member(_, value) => value.state(),
        }
    }

    fn apply(&self, prior: Option<&str>, tag: &str) -> Result<(), ActivationError> {
        match self {
            Plan::Link(p, stored, _) => p.install(Staged::Link(&stored.dir), prior, tag),
            Plan::File(p, bytes) => p.install(Staged::File(bytes), prior, tag),
            Plan::Member(p, value) => p.install(value, prior),
        }
    }

    /// Beyond the state digest: a skill link resolves to its store directory, and for a tree
    /// the whole tree read through the link verifies against it (an error names the first
    /// differing file); an agent file declares the agent's name.
    /// `toml`: the agent file is a TOML agent ([`AgentLayout::TomlFile`]), not Markdown.
    fn verify(&self, name: &str, toml: bool) -> Result<bool, ActivationError> {
        match self {
            Plan::Link(p, stored, tree) => {
                let link = p.path();
                let resolved =
                    std::fs::canonicalize(&link).is_ok_and(|resolved| resolved == stored.dir);
                match tree {
                    Some(tree) if resolved => {
                        store::verify_tree_through(&link, &stored.dir, tree).map(|()| true)
                    }
                    _ => Ok(resolved),
                }
            }
            Plan::File(p, _) => Ok(std::fs::read(p.path())
                .ok()
                .and_then(|bytes| agent::declared_name(&bytes, toml))
                .is_some_and(|declared| declared == name)),
            Plan::Member(..) => Ok(true),
        }
    }
}

/// The host activation actuator: one per host home, store root and ledger.
#[derive(Debug)]
pub struct Actuator {
    home: HostHome,
    store_root: PathBuf,
    ledger: Arc<dyn ActivationLedger>,
    /// One operation at a time: an operation's check, intent, step and outcome must not
    /// interleave with another's on the same target.
    serial: Mutex<()>,
}

impl Actuator {
    /// An actuator writing into `home`'s host directories, keeping skill bodies under
    /// `store_root` (created owner-only when missing) and recording in `ledger`.
    pub fn new(home: HostHome, store_root: &Path, ledger: Arc<dyn ActivationLedger>) -> Actuator {
        Actuator {
            home,
            store_root: store_root.to_path_buf(),
            ledger,
            serial: Mutex::new(()),
        }
    }

    /// Activates `request` (spec/activation.md §5.1). A conflict leaves the target untouched
    /// and records nothing; an error after the intent is recorded leaves an outcome (or, after a
    /// crash, an intent for [`Actuator::recover`]).
    pub fn activate(
        &self,
        request: &ActivationRequest,
    ) -> Result<ActivationReport, ActivationError> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        let target = &request.target;
        let plan = self.plan(request)?;
        let place = plan.place();
        let key = target_key(target, &place)?;
        let new_state = plan.new_state();
        let history = self.history(&key, &place)?;
        let current = place.observe()?;
        if current.as_deref() == Some(new_state.as_str()) {
            let outcome = if history.written.as_deref() == Some(new_state.as_str()) {
                ActivationOutcome::AlreadyActive
            } else {
                ActivationOutcome::PresentNotOwned
            };
            return Ok(ActivationReport {
                target: key,
                outcome,
                state: new_state,
            });
        }
        if let Some(found) = &current
            && history.written.as_ref() != Some(found)
        {
            return Err(ActivationError::Conflict {
                path: place.path(),
                entry: place.entry(),
                reason: if history.written.is_some() {
                    ConflictReason::EditedSinceActivation
                } else {
                    ConflictReason::Foreign
                },
            });
        }
        self.check_duplicate_agent(target, &place)?;
        let intent = LedgerRecord {
            operation: Operation::Activate,
            target: key.clone(),
            name: target.name.clone(),
            capability_id: request.capability_id.clone(),
            prior_state: current.clone(),
            new_state: Some(new_state.clone()),
            outcome: None,
        };
        let revision = self
            .ledger
            .append(&key, history.revision, std::slice::from_ref(&intent))?;
        fail_point(failpoints::AFTER_INTENT)?;
        let applied = plan.apply(current.as_deref(), &key.tag(revision));
        if applied.is_ok() {
            fail_point(failpoints::AFTER_APPLY)?;
        }
        let observed = place.observe()?;
        let verified = if observed.as_deref() == Some(new_state.as_str()) {
            plan.verify(
                &target.name,
                matches!(target.host.profile().agent_layout, AgentLayout::TomlFile),
            )
        } else {
            Ok(false)
        };
        let result = if matches!(verified, Ok(true)) {
            OutcomeResult::Applied
        } else {
            unsettled(&observed, &intent, &applied)
        };
        self.record_outcome(&key, revision, &intent, result, observed, Resolution::Apply)?;
        // What the host reads through the new link is not the tree: never reported applied.
        verified?;
        match result {
            OutcomeResult::Applied => Ok(ActivationReport {
                target: key,
                outcome: if current.is_some() {
                    ActivationOutcome::Replaced
                } else {
                    ActivationOutcome::Activated
                },
                state: new_state,
            }),
            _ => Err(applied.err().unwrap_or(ActivationError::Indeterminate {
                path: place.path(),
                entry: place.entry(),
            })),
        }
    }

    /// Deactivates `target` (spec/activation.md §5.2): removes ctx's entry if it is still
    /// exactly what ctx activated; a changed entry is a conflict and stays.
    pub fn deactivate(
        &self,
        target: &ActivationTarget,
    ) -> Result<DeactivationReport, ActivationError> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        let place = self.place(target)?;
        let key = target_key(target, &place)?;
        let history = self.history(&key, &place)?;
        let (Some(written), Some(by)) = (history.written.clone(), history.written_by.clone())
        else {
            return Err(ActivationError::NotActive {
                path: place.path(),
                entry: place.entry(),
            });
        };
        let current = place.observe()?;
        let mut intent = LedgerRecord {
            operation: Operation::Deactivate,
            target: key.clone(),
            name: target.name.clone(),
            capability_id: by.capability_id,
            prior_state: current.clone(),
            new_state: None,
            outcome: None,
        };
        let Some(found) = current else {
            // A person removed it already: settle the ledger in one append, touching nothing.
            let outcome = LedgerRecord {
                outcome: Some(Outcome {
                    result: OutcomeResult::Applied,
                    observed_state: None,
                    resolved_by: Resolution::Apply,
                    intent_revision: history.revision + 1,
                }),
                ..intent.clone()
            };
            self.ledger
                .append(&key, history.revision, &[intent, outcome])?;
            return Ok(DeactivationReport {
                target: key,
                outcome: DeactivationOutcome::AlreadyAbsent,
            });
        };
        if found != written {
            return Err(ActivationError::Conflict {
                path: place.path(),
                entry: place.entry(),
                reason: ConflictReason::EditedSinceActivation,
            });
        }
        intent.prior_state = Some(found.clone());
        let revision = self
            .ledger
            .append(&key, history.revision, std::slice::from_ref(&intent))?;
        fail_point(failpoints::AFTER_INTENT)?;
        let applied = match &place {
            Place::Entry(p) => p.remove(&found, &key.tag(revision)),
            Place::Member(p) => p.remove(&found),
        };
        if applied.is_ok() {
            fail_point(failpoints::AFTER_APPLY)?;
        }
        let observed = place.observe()?;
        let result = if observed.is_none() {
            OutcomeResult::Applied
        } else {
            unsettled(&observed, &intent, &applied)
        };
        self.record_outcome(&key, revision, &intent, result, observed, Resolution::Apply)?;
        match result {
            OutcomeResult::Applied => Ok(DeactivationReport {
                target: key,
                outcome: DeactivationOutcome::Removed,
            }),
            _ => Err(applied.err().unwrap_or(ActivationError::Indeterminate {
                path: place.path(),
                entry: place.entry(),
            })),
        }
    }

    /// Resolves every intent without outcome by inspecting its target (spec/activation.md §5.3):
    /// the intent's new state there → applied; its prior state → not applied (a retry may run);
    /// anything else → indeterminate. Staging leftovers of the intent that hold ctx's own
    /// states are removed first.
    pub fn recover(&self) -> Result<Vec<Recovered>, ActivationError> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        let mut resolved = Vec::new();
        for key in self.ledger.targets()? {
            let history = TargetHistory::fold(&self.ledger.read(&key)?)?;
            let Some((revision, intent)) = history.pending else {
                continue;
            };
            let place = place_of(&key, &intent.name)?;
            let clean = match &place {
                Place::Entry(p) => p.clean_leftovers(
                    intent.prior_state.as_deref(),
                    intent.new_state.as_deref(),
                    &key.tag(revision),
                )?,
                Place::Member(_) => true,
            };
            let observed = place.observe()?;
            let result = if !clean {
                OutcomeResult::Indeterminate
            } else if observed == intent.new_state {
                OutcomeResult::Applied
            } else if observed == intent.prior_state {
                OutcomeResult::NotApplied
            } else {
                OutcomeResult::Indeterminate
            };
            self.record_outcome(
                &key,
                revision,
                &intent,
                result,
                observed,
                Resolution::Recovery,
            )?;
            resolved.push(Recovered {
                target: key,
                name: intent.name,
                operation: intent.operation,
                intent_revision: revision,
                result,
            });
        }
        Ok(resolved)
    }

    /// Every target ctx answers for (its last applied activation was not undone) or has an
    /// unresolved intent at, with how it looks now. Reads only.
    pub fn inspect(&self) -> Result<Vec<TargetInspection>, ActivationError> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        let mut lines = Vec::new();
        for key in self.ledger.targets()? {
            let history = TargetHistory::fold(&self.ledger.read(&key)?)?;
            let (record, status) = match (history.pending, history.written_by) {
                (Some((revision, intent)), _) => {
                    let status = TargetStatus::Pending {
                        operation: intent.operation,
                        revision,
                    };
                    (intent, status)
                }
                (None, Some(by)) => {
                    let status = match place_of(&key, &by.name).and_then(|p| p.observe()) {
                        Ok(None) => TargetStatus::Missing,
                        Ok(Some(state)) if Some(&state) == history.written.as_ref() => {
                            TargetStatus::Active
                        }
                        Ok(Some(_)) => TargetStatus::Drifted,
                        Err(e) => TargetStatus::Unreadable {
                            detail: e.to_string(),
                        },
                    };
                    (by, status)
                }
                (None, None) => continue,
            };
            lines.push(TargetInspection {
                target: key,
                name: record.name,
                capability_id: record.capability_id,
                status,
            });
        }
        Ok(lines)
    }

    /// The target's folded history; an unresolved intent refuses the operation.
    fn history(&self, key: &TargetKey, place: &Place) -> Result<TargetHistory, ActivationError> {
        let history = TargetHistory::fold(&self.ledger.read(key)?)?;
        if let Some((revision, _)) = history.pending {
            return Err(ActivationError::PendingIntent {
                path: place.path(),
                entry: place.entry(),
                revision,
            });
        }
        Ok(history)
    }

    fn record_outcome(
        &self,
        key: &TargetKey,
        revision: u64,
        intent: &LedgerRecord,
        result: OutcomeResult,
        observed: Option<String>,
        resolved_by: Resolution,
    ) -> Result<(), ActivationError> {
        let outcome = LedgerRecord {
            outcome: Some(Outcome {
                result,
                observed_state: observed,
                resolved_by,
                intent_revision: revision,
            }),
            ..intent.clone()
        };
        self.ledger.append(key, revision, &[outcome])?;
        Ok(())
    }

    /// Checks the material and builds what the activation writes; skills are materialized into
    /// the store here (write-once, so an activation that stops later leaves nothing wrong).
    fn plan<'r>(&self, request: &'r ActivationRequest) -> Result<Plan<'r>, ActivationError> {
        let target = &request.target;
        let name = target.name.as_str();
        let body = request.body();
        if request.tree().is_some() && target.kind != CapabilityKind::Skill {
            return Err(ActivationError::TreeNotSkill {
                kind: target.kind,
                name: name.to_owned(),
            });
        }
        let place = self.place(target)?;
        let profile = target.host.profile();
        match (target.kind, profile.agent_layout, profile.mcp_layout, place) {
            (CapabilityKind::Skill, _, _, Place::Entry(p)) => {
                check_skill(name, body)?;
                let stored = match &request.material {
                    Material::Body(body) => store::materialize(&self.store_root, body)?,
                    Material::Tree(tree) => store::materialize_tree(&self.store_root, tree)?,
                };
                Ok(Plan::Link(p, stored, request.tree()))
            }
            (CapabilityKind::Agent, AgentLayout::MarkdownInSubdir { .. }, _, Place::Entry(p)) => {
                agent::parse(name, body)?;
                Ok(Plan::File(p, body.to_vec()))
            }
            (CapabilityKind::Agent, AgentLayout::TomlFile, _, Place::Entry(p)) => {
                let material: AgentMaterial = agent::parse(name, body)?;
                if !material.claude_only.is_empty() {
                    return Err(ActivationError::UnsupportedForHost {
                        host: target.host,
                        name: name.to_owned(),
                        reason: format!(
                            "its {} cannot be carried over to a Codex agent, and the agent must \
                             not run without them",
                            material.claude_only.join(", ")
                        ),
                    });
                }
                let toml = agent::codex_toml(&material);
                agent::check_codex_toml(&material, &toml).map_err(|reason| {
                    ActivationError::InvalidMaterial {
                        name: name.to_owned(),
                        reason: reason.to_string(),
                    }
                })?;
                if toml.len() > TARGET_READ_MAX_BYTES {
                    return Err(ActivationError::BodyTooLarge {
                        name: name.to_owned(),
                        len: toml.len(),
                        max: TARGET_READ_MAX_BYTES,
                    });
                }
                Ok(Plan::File(p, toml.into_bytes()))
            }
            (CapabilityKind::McpServer, _, McpLayout::ProjectJson { .. }, Place::Member(p)) => Ok(
                Plan::Member(p, MemberValue::Claude(mcp::parse(name, body)?)),
            ),
            (CapabilityKind::McpServer, _, McpLayout::HomeToml { .. }, Place::Member(p)) => {
                let server = mcp::parse(name, body)?;
                Ok(Plan::Member(
                    p,
                    MemberValue::Codex(mcp::codex_table(name, &server)?),
                ))
            }
            (_, _, _, place) => Err(ActivationError::Config {
                path: place.path(),
                reason: "the target does not fit the capability kind".to_owned(),
            }),
        }
    }

    /// Where `target` lives under this actuator's home (spec/activation.md §3). The host
    /// directories are created when missing and resolved to canonical paths, so the ledger
    /// names each target one way.
    fn place(&self, target: &ActivationTarget) -> Result<Place, ActivationError> {
        let name = target.name.clone();
        let profile = target.host.profile();
        let place = match (target.kind, profile.agent_layout, profile.mcp_layout) {
            (CapabilityKind::Skill, _, _) => {
                let dir = canonical_dir(&(profile.skills_dir)(&self.home))?;
                Place::Entry(EntryPlace {
                    staging: staging_beside(&dir),
                    dir,
                    entry: name,
                    kind: EntryKind::SkillLink,
                })
            }
            (CapabilityKind::Agent, AgentLayout::MarkdownInSubdir { subdir }, _) => {
                let agents = canonical_dir(&(profile.agents_dir)(&self.home))?;
                Place::Entry(EntryPlace {
                    dir: agents.join(subdir),
                    staging: staging_beside(&agents),
                    entry: format!("{name}.md"),
                    kind: EntryKind::AgentFile,
                })
            }
            (CapabilityKind::Agent, AgentLayout::TomlFile, _) => {
                let dir = canonical_dir(&(profile.agents_dir)(&self.home))?;
                Place::Entry(EntryPlace {
                    staging: staging_beside(&dir),
                    dir,
                    entry: format!("{name}.toml"),
                    kind: EntryKind::AgentFile,
                })
            }
            (CapabilityKind::McpServer, _, McpLayout::ProjectJson { file }) => {
                let project = target
                    .project
                    .as_deref()
                    .ok_or_else(|| ActivationError::ProjectDirRequired { name: name.clone() })?;
                let project = std::fs::canonicalize(project).map_err(ActivationError::io(
                    "resolve the project directory",
                    project,
                ))?;
                Place::Member(MemberPlace {
                    file: project.join(file),
                    host: target.host,
                    name,
                })
            }
            (CapabilityKind::McpServer, _, McpLayout::HomeToml { dir, file }) => {
                let dir = canonical_dir(dir(&self.home))?;
                Place::Member(MemberPlace {
                    file: dir.join(file),
                    host: target.host,
                    name,
                })
            }
            // Unreachable: `ActivationTarget::new` refuses a kind that is not installable.
            (CapabilityKind::Harness, _, _) => {
                return Err(names::not_activatable(target.kind, &name));
            }
        };
        Ok(place)
    }

    /// Claude Code and Codex load one of two agents with the same name in an undefined order:
    /// another file declaring this agent's name is a conflict.
    fn check_duplicate_agent(
        &self,
        target: &ActivationTarget,
        place: &Place,
    ) -> Result<(), ActivationError> {
        let Place::Entry(p) = place else {
            return Ok(());
        };
        let duplicate = match (target.kind, target.host.profile().agent_layout) {
            (CapabilityKind::Agent, AgentLayout::MarkdownInSubdir { .. }) => {
                let root = p.dir.parent().unwrap_or(&p.dir);
                agent::claude_duplicate(root, &p.path(), &target.name)?
            }
            (CapabilityKind::Agent, AgentLayout::TomlFile) => {
                agent::codex_duplicate(&p.dir, &p.path(), &target.name)?
            }
            _ => None,
        };
        match duplicate {
            Some(other) => Err(ActivationError::Conflict {
                path: p.path(),
                entry: None,
                reason: ConflictReason::DuplicateAgentName { other },
            }),
            None => Ok(()),
        }
    }
}

/// `Err(FailPoint)` when the fail point `name` fires (feature `failpoints`, tests only).
#[cfg(feature = "failpoints")]
fn fail_point(name: &'static str) -> Result<(), ActivationError> {
    if crate::failpoint_fired(name) {
        return Err(ActivationError::FailPoint { name });
    }
    Ok(())
}

/// Without the `failpoints` feature no fail point exists, so a production build's error type has
/// no simulated-crash case (spec/architecture.md §3, rule 4).
#[cfg(not(feature = "failpoints"))]
fn fail_point(_name: &'static str) -> Result<(), ActivationError> {
    Ok(())
}

/// The result of an operation whose target does not hold its new state: still the prior state
/// → refused (the step found a conflict) or not applied; anything else → indeterminate.
fn unsettled(
    observed: &Option<String>,
    intent: &LedgerRecord,
    applied: &Result<(), ActivationError>,
) -> OutcomeResult {
    if *observed != intent.prior_state {
        OutcomeResult::Indeterminate
    } else if matches!(applied, Err(e) if e.is_conflict()) {
        OutcomeResult::Refused
    } else {
        OutcomeResult::NotApplied
    }
}

/// Creates `path` when missing and returns its canonical form.
fn canonical_dir(path: &Path) -> Result<PathBuf, ActivationError> {
    Dir::ensure(path)?;
    std::fs::canonicalize(path).map_err(ActivationError::io("resolve", path))
}

/// The staging directory for entries of the host directory `dir`: `.ctx-staging` next to it
/// (same filesystem, and not inside a directory the host watches).
fn staging_beside(dir: &Path) -> PathBuf {
    dir.parent().unwrap_or(dir).join(STAGING_DIR_NAME)
}

/// The ledger key of `place`, with the length check.
fn target_key(target: &ActivationTarget, place: &Place) -> Result<TargetKey, ActivationError> {
    let path = place.path();
    let key = TargetKey {
        host: target.host,
        kind: target.kind,
        path: utf8(&path)?.to_owned(),
        entry: place.entry(),
    };
    if key.path.len() + key.entry.as_ref().map_or(0, String::len) > TARGET_TEXT_MAX_BYTES {
        return Err(ActivationError::TargetTooLong {
            path,
            max: TARGET_TEXT_MAX_BYTES,
        });
    }
    Ok(key)
}

/// The place a ledger key names, for recovery and inspection: derived from the recorded path
/// alone, the way [`Actuator::place`] built it.
fn place_of(key: &TargetKey, name: &str) -> Result<Place, ActivationError> {
    let path = Path::new(&key.path);
    let unusable = || ActivationError::Config {
        path: path.to_path_buf(),
        reason: "the ledger names a target ctx cannot have written".to_owned(),
    };
    if key.kind == CapabilityKind::McpServer {
        return Ok(Place::Member(MemberPlace {
            file: path.to_path_buf(),
            host: key.host,
            name: name.to_owned(),
        }));
    }
    let dir = path.parent().ok_or_else(unusable)?.to_path_buf();
    let entry = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(unusable)?
        .to_owned();
    let (staging, kind) = match (key.kind, key.host.profile().agent_layout) {
        // ctx's own subdirectory: the staging directory sits beside the agents directory.
        (CapabilityKind::Agent, AgentLayout::MarkdownInSubdir { .. }) => (
            staging_beside(dir.parent().ok_or_else(unusable)?),
            EntryKind::AgentFile,
        ),
        (CapabilityKind::Agent, AgentLayout::TomlFile) => {
            (staging_beside(&dir), EntryKind::AgentFile)
        }
        _ => (staging_beside(&dir), EntryKind::SkillLink),
    };
    Ok(Place::Entry(EntryPlace {
        dir,
        entry,
        staging,
        kind,
    }))
}

/// A `SKILL.md` must name its skill as the directory ctx links it under (Agent Skills
/// specification; Codex reads `name` and `description`) and describe it.
fn check_skill(name: &str, body: &[u8]) -> Result<(), ActivationError> {
    let invalid = |reason: String| ActivationError::InvalidMaterial {
        name: name.to_owned(),
        reason,
    };
    let fm = frontmatter::parse_named(name, body)?;
    let description = fm
        .scalar("description")
        .map_err(|e| invalid(e.to_string()))?
        .unwrap_or("");
    let chars = description.chars().count();
    if description.trim().is_empty() || chars > SKILL_DESCRIPTION_MAX_CHARS {
        return Err(invalid(format!(
            "its description has {chars} characters, not 1 to {SKILL_DESCRIPTION_MAX_CHARS}"
        )));
    }
    Ok(())
}
