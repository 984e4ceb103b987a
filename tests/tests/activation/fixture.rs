//! A temporary person's home (with `$CODEX_HOME` at `<home>/.codex`), a project directory, a
//! content store and a journal, all inside one temporary directory — never the real home.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_hosts::activation::{
    ACTIVATION_INDEX_KEY, ActivationError, ActivationRequest, ActivationTarget, Actuator,
    JournalLedger,
};
use ctx_hosts::{AgentHost, HostHome};
use ctx_journal::{Journal, StreamId};
use ctx_model::{CapabilityKind, sha256_hex_bytes};
// The ledger names its streams with ctx_projections::streams (one table); the tests keep
// their short names.
use ctx_projections::streams::HOST_ACTIVATION_INDEX_NAMESPACE as ACTIVATION_INDEX_NAMESPACE;

use crate::support;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub journal: Journal,
    pub actuator: Actuator,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = support::tempdir();
        for sub in ["home", "project"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let (journal, actuator) = open(dir.path());
        Fixture {
            dir,
            journal,
            actuator,
        }
    }

    /// Drops the actuator and the journal and opens both again from disk.
    pub fn reopen(self) -> Fixture {
        let Fixture {
            dir,
            journal,
            actuator,
        } = self;
        drop(actuator);
        drop(journal);
        let (journal, actuator) = open(dir.path());
        Fixture {
            dir,
            journal,
            actuator,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn codex_home(&self) -> PathBuf {
        self.home().join(".codex")
    }

    pub fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn target(&self, host: AgentHost, kind: CapabilityKind, name: &str) -> ActivationTarget {
        let project = self.project();
        ActivationTarget::new(host, kind, name, Some(&project)).unwrap()
    }

    pub fn request(
        &self,
        host: AgentHost,
        kind: CapabilityKind,
        name: &str,
        body: &[u8],
    ) -> ActivationRequest {
        let id = format!("{}:{name}", kind.as_str());
        ActivationRequest::new(self.target(host, kind, name), &id, body.to_vec()).unwrap()
    }

    pub fn activate(
        &self,
        host: AgentHost,
        kind: CapabilityKind,
        name: &str,
        body: &[u8],
    ) -> Result<ctx_hosts::activation::ActivationReport, ActivationError> {
        self.actuator
            .activate(&self.request(host, kind, name, body))
    }

    pub fn deactivate(
        &self,
        host: AgentHost,
        kind: CapabilityKind,
        name: &str,
    ) -> Result<ctx_hosts::activation::DeactivationReport, ActivationError> {
        self.actuator.deactivate(&self.target(host, kind, name))
    }

    /// The journal's head position: unchanged means nothing was recorded.
    pub fn head(&self) -> u64 {
        self.journal.head_position().unwrap()
    }

    /// How many targets the ledger's index lists.
    pub fn ledger_targets(&self) -> u64 {
        let index = StreamId::derive(ACTIVATION_INDEX_NAMESPACE, ACTIVATION_INDEX_KEY).unwrap();
        self.journal
            .stream_head(&index)
            .unwrap()
            .map_or(0, |h| h.revision)
    }

    /// The store directory of a skill body (canonical path).
    pub fn store_dir(&self, body: &[u8]) -> PathBuf {
        fs::canonicalize(self.store())
            .unwrap()
            .join(sha256_hex_bytes(body))
    }
}

fn open(root: &Path) -> (Journal, Actuator) {
    let journal = support::open(&root.join("data").join("journal"));
    let home = HostHome::new(&root.join("home"));
    let actuator = Actuator::new(
        home,
        &root.join("store"),
        Arc::new(JournalLedger::new(journal.clone())),
    );
    (journal, actuator)
}

/// A file of the sample catalog (`service/catalog/<rel>`).
pub fn catalog(rel: &str) -> Vec<u8> {
    crate::support::catalog_file(rel)
}

/// The names in a directory, sorted (empty when it does not exist).
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

pub fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A skill body named `name`.
pub fn skill_body(name: &str, text: &str) -> Vec<u8> {
    format!("---\nname: {name}\ndescription: {text}\n---\n\n# {name}\n\n{text}\n").into_bytes()
}
