//! What lives where inside a data directory (spec/cli.md §2). Which directory that is, is the
//! caller's choice: the `ctx` binary chooses it from its option and environment (`ctx-cli`).

use std::path::{Path, PathBuf};

/// What lives where inside a data directory (spec/cli.md §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_path_buf(),
        }
    }

    /// The data directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The journal's directory: every record, and every projection (engine, query store,
    /// consent store) inside the journal's database.
    pub fn journal(&self) -> PathBuf {
        self.root.join("journal")
    }

    /// The ingested catalog: `catalog.json` and the body files it pins.
    pub fn catalog(&self) -> PathBuf {
        self.root.join("catalog")
    }

    /// The artifact registry (planning artifacts bound to the catalog).
    pub fn registry(&self) -> PathBuf {
        self.root.join("registry")
    }

    /// The install policy store.
    pub fn install_policy(&self) -> PathBuf {
        self.root.join("install-policy")
    }

    /// The skill content-addressed store and its published skills.
    pub fn skills(&self) -> PathBuf {
        self.root.join("skills")
    }

    /// The material store: the installed agents and MCP servers (their consented catalog bytes).
    pub fn materials(&self) -> PathBuf {
        self.root.join("materials")
    }

    /// The registered human device keys (public keys only).
    pub fn verifiers(&self) -> PathBuf {
        self.root.join("verifiers")
    }

    /// The work observations that current-work references resolve to.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// The data directory's workspace identity: the digest its consent challenges are bound to,
    /// stored so that a copied or moved directory keeps them answerable (spec/cli.md §2).
    pub fn workspace_identity(&self) -> PathBuf {
        self.root.join("workspace-identity")
    }

    /// The activation store: one directory per skill body, the target of the hosts' skill links.
    pub fn activation_store(&self) -> PathBuf {
        self.root.join("activation-store")
    }
}
