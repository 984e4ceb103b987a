//! The activation driver of one agent host: the engine's activation and deactivation actions
//! (`managed::ActivationDriver`) carried out by the host's [`Actuator`] (spec/activation.md §11).
//!
//! The driver finds the action's material in the ingested catalog by its content digest, so the
//! host gets exactly the bytes the person consented to (or the catalog's, for a capability loaded
//! without install). Several engine sessions may hold one host entry (every prompt of a host
//! session is its own engine session, and two host sessions share `~/.claude/skills`): the driver
//! keeps a holder record per engine session on the journal, and a deactivation removes the
//! host's entry only when no other session holds it.

use ctx_model::CapabilityKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_journal::{
    AppendError, ExpectedRevision, Journal, NewRecord, StreamAppend, StreamId, Timestamp,
};
use ctx_journal::{InputError, ReadError};
use ctx_model::{
    HostAction, InstallExecutionBinding, Json, ProtocolError, sha256_hex, sha256_hex_bytes,
};

use crate::activation::{
    ActivationError, ActivationOutcome, ActivationRequest, ActivationTarget, Actuator,
    ConflictReason, JournalLedger,
};
use crate::hosts::{AgentHost, HostHome};
use ctx_projections::streams::{HOST_ACTIVATION_HOLDER_KIND, HOST_ACTIVATION_HOLDERS_NAMESPACE};
use ctx_service::{
    ActivationDriver, ActuatorObservation, Catalog, SkillTree, load_catalog_entries,
    skill_pack_identity,
};

/// How many holder records of one entry are read at most.
const HOLDER_RECORDS_MAX: usize = 4096;

/// One host's activation driver over a data directory's journal and catalog.
#[derive(Debug)]
pub struct HostActivationDriver<'a> {
    host: AgentHost,
    home: HostHome,
    project: Option<PathBuf>,
    actuator: Actuator,
    journal: Journal,
    catalog: &'a Catalog,
    /// Where the catalog's bodies are.
    catalog_dir: PathBuf,
    now: Timestamp,
}

impl<'a> HostActivationDriver<'a> {
    /// A driver for `host` writing under `home` (and, for Claude Code MCP servers, into
    /// `project`'s `.mcp.json`), keeping skill bodies under `store_root`, taking material from
    /// `catalog` whose bodies are in `catalog_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: AgentHost,
        home: HostHome,
        project: Option<&Path>,
        store_root: &Path,
        journal: Journal,
        catalog: &'a Catalog,
        catalog_dir: &Path,
        now: Timestamp,
    ) -> HostActivationDriver<'a> {
        let ledger = Arc::new(JournalLedger::new(journal.clone()));
        HostActivationDriver {
            host,
            actuator: Actuator::new(home.clone(), store_root, ledger),
            home,
            project: project.map(Path::to_path_buf),
            journal,
            catalog,
            catalog_dir: catalog_dir.to_path_buf(),
            now,
        }
    }

    pub fn actuator(&self) -> &Actuator {
        &self.actuator
    }

    /// The action's target: kind and name from its capability id.
    /// The action's capability: kind and name from its capability id.
    fn capability(
        &self,
        action: &HostAction,
    ) -> Result<(CapabilityKind, String, String), DriverError> {
        let id = action
            .entity_id
            .as_deref()
            .ok_or(DriverError::NoCapability)?;
        let (kind, name) = id
            .split_once(':')
            .ok_or_else(|| DriverError::NoKind { id: id.to_owned() })?;
        let kind = CapabilityKind::parse(kind)
            .filter(|k| k.is_installable())
            .ok_or_else(|| DriverError::Kind {
                id: id.to_owned(),
                kind: kind.to_owned(),
            })?;
        Ok((kind, name.to_owned(), id.to_owned()))
    }

    /// The project directory a target of `kind` depends on: only a Claude Code MCP server's (it
    /// lives in the project's `.mcp.json`); every other target is in the home directory.
    fn placement(&self, kind: CapabilityKind) -> Option<PathBuf> {
        (self.host.profile().mcp_in_project() && kind == CapabilityKind::McpServer)
            .then(|| self.project.clone())
            .flatten()
    }

    /// The catalog material whose content digest is the action's material identity: a skill
    /// tree whose pack has that SHA-256 (spec/skill-tree.md §7), else the body bytes with that
    /// SHA-256 (spec/activation.md §11).
    fn material(&self, action: &HostAction, id: &str) -> Result<Found, DriverError> {
        let Some(sha) = action
            .payload
            .get("material_identity")
            .and_then(|m| m.get_str("content_sha256"))
        else {
            return Err(DriverError::NoDigest { id: id.to_owned() });
        };
        // The entry's bodies are read and verified against the catalog now, not at every open
        // (spec/catalog.md §8.4); a body changed since the ingest is named here.
        let loaded = load_catalog_entries(&self.catalog_dir, self.catalog, &[id]).map_err(|e| {
            DriverError::MaterialUnreadable {
                id: id.to_owned(),
                problem: e.to_string(),
            }
        })?;
        find_material(
            sha,
            [loaded.material_tree(id), loaded.install_result_tree(id)],
            [loaded.material_text(id), loaded.install_result_text(id)],
        )
        .ok_or_else(|| DriverError::NoMaterial {
            id: id.to_owned(),
            sha: sha.to_owned(),
        })
    }

    /// The holder stream of a capability on this host (whatever the project: a record names
    /// its project, so a deactivation finds where its activation went).
    fn holders_stream(&self, kind: CapabilityKind, name: &str) -> Result<StreamId, DriverError> {
        let key = format!("{}\n{kind}\n{name}", self.host);
        Ok(StreamId::derive(
            HOST_ACTIVATION_HOLDERS_NAMESPACE,
            key.as_bytes(),
        )?)
    }

    /// Records that the engine session of `action` holds (or released) the capability's entry
    /// placed in `project`. The event id names the holder, the action and the operation, so a
    /// repeated call records once and a later activation of the same session holds again.
    fn hold(
        &self,
        kind: CapabilityKind,
        name: &str,
        project: Option<&Path>,
        action: &HostAction,
        hold: bool,
    ) -> Result<(), DriverError> {
        let stream = self.holders_stream(kind, name)?;
        let holder = holder_of(action);
        let operation = if hold { "hold" } else { "release" };
        let project = project.map(|p| p.display().to_string());
        let payload = Json::object([
            ("holder", Json::str(&holder)),
            ("operation", Json::str(operation)),
            ("project", Json::opt_str(project.as_deref())),
            ("schema", Json::str(HOST_ACTIVATION_HOLDER_KIND)),
        ])
        .to_string()
        .into_bytes();
        let event_id = format!(
            "holder-{}",
            sha256_hex(&format!(
                "{stream}\n{holder}\n{}\n{operation}",
                action.action_id
            ))
        );
        let append = StreamAppend::new(
            stream,
            ExpectedRevision::Any,
            vec![NewRecord::new(
                event_id,
                HOST_ACTIVATION_HOLDER_KIND,
                self.now,
                payload,
            )],
        );
        match self.journal.append(append) {
            Ok(_) | Err(AppendError::Conflict { .. }) => Ok(()),
            Err(e) => Err(DriverError::Hold(e)),
        }
    }

    /// The engine sessions that hold the capability's entries now, with the project of each.
    fn holders(&self, kind: CapabilityKind, name: &str) -> Result<Vec<Holder>, DriverError> {
        let stream = self.holders_stream(kind, name)?;
        let records = self
            .journal
            .read_stream(&stream, 1, HOLDER_RECORDS_MAX)
            .map_err(DriverError::ReadHolders)?;
        let mut holders: Vec<Holder> = Vec::new();
        for record in records {
            let value = std::str::from_utf8(&record.payload)
                .ok()
                .and_then(|t| Json::parse(t).ok())
                .ok_or(DriverError::HolderNotJson)?;
            let holder = Holder {
                holder: value.get_str("holder").unwrap_or_default().to_owned(),
                project: value.get_str("project").map(PathBuf::from),
            };
            holders.retain(|h| h.holder != holder.holder);
            if value.get_str("operation") == Some("hold") {
                holders.push(holder);
            }
        }
        Ok(holders)
    }
}

/// Why the host activation driver cannot act on an action or keep its holder records; the
/// sentence names the action, capability or record at fault and becomes the observation's reason.
#[derive(Debug, thiserror::Error)]
enum DriverError {
    #[error("the action names no capability")]
    NoCapability,
    #[error("capability id {id:?} has no kind")]
    NoKind { id: String },
    #[error("{id}: ctx activates no {kind} on an agent host")]
    Kind { id: String, kind: String },
    #[error("the {id} action names no material content digest")]
    NoDigest { id: String },
    #[error("the catalog holds no material of {id} with SHA-256 {sha}; ingest it again")]
    NoMaterial { id: String, sha: String },
    #[error("the catalog material of {id} does not verify: {problem}")]
    MaterialUnreadable { id: String, problem: String },
    /// The holder stream's id cannot be derived.
    #[error("{0}")]
    Stream(#[from] InputError),
    #[error("could not record the holder: {0}")]
    Hold(AppendError),
    #[error("could not read the holders: {0}")]
    ReadHolders(ReadError),
    #[error("a holder record is not JSON")]
    HolderNotJson,
}

/// The material of an action, as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// One body (a `SKILL.md`, an agent file, a server entry).
    Body(Vec<u8>),
    /// A skill's whole directory.
    Tree(SkillTree),
}

/// The material pinned by `sha`: first a tree whose pack's SHA-256 is `sha` (its pack text is
/// also among `texts`, and must not be taken for a `SKILL.md`), then a text whose SHA-256 is
/// `sha`.
fn find_material<'c>(
    sha: &str,
    trees: impl IntoIterator<Item = Option<&'c SkillTree>>,
    texts: impl IntoIterator<Item = Option<&'c str>>,
) -> Option<Found> {
    if let Some(tree) = trees
        .into_iter()
        .flatten()
        .find(|tree| skill_pack_identity(tree).0 == sha)
    {
        return Some(Found::Tree(tree.clone()));
    }
    texts
        .into_iter()
        .flatten()
        .find(|text| sha256_hex_bytes(text.as_bytes()) == sha)
        .map(|text| Found::Body(text.as_bytes().to_vec()))
}

/// An engine session holding a host entry, and the project the entry was placed in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    holder: String,
    project: Option<PathBuf>,
}

/// The engine session an action belongs to.
fn holder_of(action: &HostAction) -> String {
    sha256_hex(&action.scope.stream_key())
}

impl ActivationDriver for HostActivationDriver<'_> {
    /// The actuator appends its ledger intent before every host change, and the ledger makes
    /// it durable (spec/activation.md §4; spec/journal.md §14, U2).
    fn makes_its_intent_durable(&self) -> bool {
        true
    }

    fn binding(&self) -> Result<InstallExecutionBinding, ProtocolError> {
        let home = self.home.home().display().to_string();
        let project = self
            .project
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        InstallExecutionBinding::new(
            &format!("ctx-host-activation-{}", self.host),
            &sha256_hex(&format!("ctx-activation-actuator-v1:{}", self.host)),
            &sha256_hex(&format!("ctx-host:{}:{home}", self.host)),
            &sha256_hex(&format!("ctx-target:{}:{home}:{project}", self.host)),
        )
    }

    fn activate(&self, action: &HostAction, apply: bool) -> ActuatorObservation {
        let indeterminate = |reason: String| ActuatorObservation::Indeterminate { reason };
        let (kind, name, id) = match self.capability(action) {
            Ok(c) => c,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        let target = match ActivationTarget::new(self.host, kind, &name, self.project.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        let placement = self.placement(kind);
        let material = match self.material(action, &id) {
            Ok(m) => m,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        if !apply {
            // A claim made earlier: settle what a crash left first, then the activation below
            // finds the target as it is (an applied one is "already active").
            if let Err(e) = self.actuator.recover() {
                return indeterminate(e.to_string());
            }
        }
        let request = match material {
            Found::Body(body) => ActivationRequest::new(target.clone(), &id, body),
            Found::Tree(tree) => ActivationRequest::new_tree(target.clone(), &id, tree),
        };
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        // The holder first: a crash after the step leaves a holder whose entry is active, never
        // an active entry nobody holds.
        if let Err(e) = self.hold(kind, &name, placement.as_deref(), action, true) {
            return indeterminate(e.to_string());
        }
        match self.actuator.activate(&request) {
            Ok(report) => {
                let verification = sha256_hex(&format!(
                    "ctx-activation-verification-v1\n{}\n{}\n{}",
                    report.target.display(),
                    report.state,
                    matches!(report.outcome, ActivationOutcome::PresentNotOwned)
                ));
                ActuatorObservation::Applied {
                    verification_digest: verification,
                }
            }
            Err(
                e @ (ActivationError::Conflict { .. }
                | ActivationError::UnsupportedForHost { .. }
                | ActivationError::LiteralSecret { .. }
                | ActivationError::InvalidMaterial { .. }
                | ActivationError::InvalidName { .. }),
            ) => {
                let _ = self.hold(kind, &name, placement.as_deref(), action, false);
                ActuatorObservation::Refused {
                    reason: e.to_string(),
                }
            }
            Err(e) => indeterminate(e.to_string()),
        }
    }

    fn deactivate(&self, action: &HostAction) -> ActuatorObservation {
        let (kind, name, _) = match self.capability(action) {
            Ok(c) => c,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        let holders = match self.holders(kind, &name) {
            Ok(h) => h,
            Err(e) => {
                return ActuatorObservation::Indeterminate {
                    reason: e.to_string(),
                };
            }
        };
        // Where this session's activation put the entry (the session may end in another
        // directory than the one it activated from).
        let me = holder_of(action);
        let placement = holders
            .iter()
            .find(|h| h.holder == me)
            .map_or_else(|| self.placement(kind), |h| h.project.clone());
        if let Err(e) = self.hold(kind, &name, placement.as_deref(), action, false) {
            return ActuatorObservation::Indeterminate {
                reason: e.to_string(),
            };
        }
        let released = |why: &str| ActuatorObservation::Applied {
            verification_digest: sha256_hex(&format!(
                "ctx-deactivation-verification-v1\n{}\n{name}\n{why}",
                self.host
            )),
        };
        if holders
            .iter()
            .any(|h| h.holder != me && h.project == placement)
        {
            // Another engine session still holds the entry: this one no longer does.
            return released("held-elsewhere");
        }
        let target = match ActivationTarget::new(self.host, kind, &name, placement.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                return ActuatorObservation::Refused {
                    reason: e.to_string(),
                };
            }
        };
        let mut result = self.actuator.deactivate(&target);
        if matches!(result, Err(ActivationError::PendingIntent { .. })) {
            if let Err(e) = self.actuator.recover() {
                return ActuatorObservation::Indeterminate {
                    reason: e.to_string(),
                };
            }
            result = self.actuator.deactivate(&target);
        }
        match result {
            Ok(_) => released("removed"),
            // Nothing of ctx's is there: the entry is the person's own, or gone.
            Err(ActivationError::NotActive { .. })
            | Err(ActivationError::Conflict {
                reason: ConflictReason::Foreign,
                ..
            }) => released("not-ctxs"),
            Err(e @ ActivationError::Conflict { .. }) => ActuatorObservation::Refused {
                reason: e.to_string(),
            },
            Err(e) => ActuatorObservation::Indeterminate {
                reason: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn tree(dir: &Path) -> SkillTree {
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            b"---\nname: t\ndescription: d\n---\nBody\n",
        )
        .unwrap();
        let run = dir.join("scripts/run.sh");
        std::fs::write(&run, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        ctx_service::read_skill_tree_at(dir).unwrap()
    }

    #[test]
    fn a_tree_is_found_by_its_pack_digest_before_its_pack_text_is_taken_for_a_body() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tree(tmp.path());
        let pack = ctx_service::skill_pack(&tree);
        let (pack_sha, _) = skill_pack_identity(&tree);
        // The catalog serves a tree's pack as its text too: the tree wins.
        assert_eq!(
            find_material(&pack_sha, [Some(&tree), None], [Some(pack.as_str()), None]),
            Some(Found::Tree(tree.clone()))
        );
        // A single body is found by its own SHA-256, as before.
        let body = "---\nname: t\ndescription: d\n---\nBody\n";
        let body_sha = sha256_hex_bytes(body.as_bytes());
        assert_eq!(
            find_material(&body_sha, [None, Some(&tree)], [None, Some(body)]),
            Some(Found::Body(body.as_bytes().to_vec()))
        );
        // The tree's digest (BLAKE3) or its SKILL.md's SHA-256 is not the consented pack.
        for other in [tree.digest_hex(), sha256_hex_bytes(tree.skill_md())] {
            assert_eq!(
                find_material(&other, [Some(&tree)], [Some(pack.as_str())]),
                None
            );
        }
    }
}
