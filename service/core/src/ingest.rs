//! Catalog ingest (spec/cli.md §2, §4 `catalog ingest`): copies a catalog, validated by loading
//! it, into the data directory, replacing the current one only when it differs. With no source
//! directory the sample catalog compiled into this crate is ingested, so a host that embeds ctx
//! works from its first session.

use std::path::{Path, PathBuf};

use crate::catalog::{
    BODY_V2_MAX_BYTES, CATALOG_FILE_NAME, CATALOG_TEXT_MAX_BYTES, Catalog, CatalogError,
    CatalogFileError, CatalogFileKind, LoadedCatalog, PROJECTION_FILE_NAME, load_catalog_dir,
    open_catalog_file, sample_catalog_files,
};
use crate::data_dir::Layout;
use crate::registry::{ArtifactRegistry, RegistryError};
use ctx_fs::{create_private_dir_all, read_bounded_file};

use crate::runtime::{CatalogLock, RuntimeError, read_error_source};
use ctx_fs::FILE_MODE_PRIVATE;

/// Most bytes of `catalog.json` the ingest copies: the catalog's own text limit
/// ([`CATALOG_TEXT_MAX_BYTES`]), since the file was loaded under it a moment before.
pub const CATALOG_FILE_COPY_MAX_BYTES: u64 = CATALOG_TEXT_MAX_BYTES as u64;
/// Most bytes of one body file the ingest copies: the largest body any catalog version allows
/// ([`BODY_V2_MAX_BYTES`]); the file was loaded under its own version's limit a moment before.
pub const BODY_FILE_COPY_MAX_BYTES: u64 = BODY_V2_MAX_BYTES.unsigned_abs();

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogIngest {
    /// How many capabilities the catalog holds.
    pub capabilities: usize,
    /// False when the data directory already held this very catalog.
    pub changed: bool,
    pub installation_snapshot_digest: String,
    pub namespace: String,
    pub retrieval_snapshot_digest: String,
    /// The source directory as given, or `sample`.
    pub source: String,
}

/// Why an ingest failed. Nothing half-written is ever in place (see [`ingest_catalog`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The source catalog does not load: bad input.
    #[error("the catalog in {} does not load: {source}", dir.display())]
    Load {
        dir: PathBuf,
        source: Box<CatalogError>,
    },
    /// A source file broke the file rules (spec/catalog.md §3) when it was copied: replaced by
    /// a link, say, after it loaded. Bad input, as a catalog that does not load is.
    #[error(transparent)]
    File(CatalogFileError),
    /// A file or directory of the data directory could not be written or replaced.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The data directory refused (its catalog lock, a private directory, an atomic write).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The catalog is in place, but its registry artifact could not be published; the first
    /// prompt publishes it instead.
    #[error("the catalog is in place, but the artifact registry refused to publish it: {0}")]
    Publish(RegistryError),
}

impl IngestError {
    /// The stable wire code (spec/cli.md §4): a catalog that does not load is `invalid`, every
    /// other failure is the machine's (`internal`).
    pub fn code(&self) -> &'static str {
        match self {
            IngestError::Load { .. } | IngestError::File(_) => "invalid",
            IngestError::Io { .. } | IngestError::Runtime(_) | IngestError::Publish(_) => {
                "internal"
            }
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IngestError + '_ {
    move |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Copies the catalog in `source` (the compiled-in sample when `None`) into the data directory,
/// replacing the current one only when it differs.
pub fn ingest_catalog(
    layout: &Layout,
    source: Option<&Path>,
) -> Result<CatalogIngest, IngestError> {
    // The sample is written out for this ingest only, and removed when `_sample` drops.
    let _sample;
    let (source_dir, source_name) = match source {
        Some(dir) => (dir.to_path_buf(), dir.display().to_string()),
        None => {
            let sample = EmbeddedSample::write(layout)?;
            let dir = sample.dir.clone();
            _sample = sample;
            (dir, "sample".to_owned())
        }
    };
    let loaded = load_catalog_dir(&source_dir).map_err(|source| IngestError::Load {
        dir: source_dir.clone(),
        source: Box::new(source),
    })?;
    let target = layout.catalog();
    let identity = |c: &Catalog| {
        (
            c.namespace_digest().to_owned(),
            c.retrieval_snapshot_digest().to_owned(),
            c.material_snapshot_digest().to_owned(),
            c.installation_snapshot_digest().to_owned(),
        )
    };
    let unchanged = {
        // Held across the comparison and the swap: concurrent first ingests then write once, and
        // no open sees the catalog between the swap's two renames.
        let _catalog = CatalogLock::acquire(layout, true)?;
        // The projection answers the comparison without reading a body (spec/catalog.md §8.4);
        // a data directory without one, or with one this build refuses, is rewritten, which
        // writes it.
        let unchanged = target.join(CATALOG_FILE_NAME).is_file()
            && Catalog::open_projection(&target)
                .is_ok_and(|current| identity(&current) == identity(loaded.catalog()));
        if !unchanged {
            write_catalog(layout, &source_dir, &loaded)?;
        }
        unchanged
    };
    // Published after the catalog lock is released (the registry has its own lock); an
    // unchanged catalog whose artifact is published costs one projection open.
    create_private_dir_all(&layout.registry()).map_err(RuntimeError::from)?;
    ArtifactRegistry::open(&layout.registry())
        .and_then(|registry| registry.publish(&loaded))
        .map_err(IngestError::Publish)?;
    let catalog = loaded.catalog();
    Ok(CatalogIngest {
        capabilities: catalog.entries().len(),
        changed: !unchanged,
        installation_snapshot_digest: catalog.installation_snapshot_digest().to_owned(),
        namespace: catalog.namespace().to_owned(),
        retrieval_snapshot_digest: catalog.retrieval_snapshot_digest().to_owned(),
        source: source_name,
    })
}

/// The sample catalog compiled into the binary, written out to a private directory of the data
/// directory for one ingest (the loader reads directories) and removed afterwards.
struct EmbeddedSample {
    dir: PathBuf,
}

impl EmbeddedSample {
    fn write(layout: &Layout) -> Result<EmbeddedSample, IngestError> {
        let dir = layout
            .root()
            .join(format!(".catalog.sample-{}", std::process::id()));
        let sample = EmbeddedSample { dir };
        if sample.dir.exists() {
            std::fs::remove_dir_all(&sample.dir).map_err(io(&sample.dir))?;
        }
        create_private_dir_all(&sample.dir).map_err(RuntimeError::from)?;
        for (relative, bytes) in sample_catalog_files() {
            let path = sample.dir.join(relative);
            if let Some(parent) = path.parent() {
                create_private_dir_all(parent).map_err(RuntimeError::from)?;
            }
            std::fs::write(&path, bytes).map_err(io(&path))?;
        }
        Ok(sample)
    }
}

impl Drop for EmbeddedSample {
    fn drop(&mut self) {
        // Best effort: a leftover is replaced by the next ingest of this process id.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The most bytes the ingest copies of the catalog file `relative` (relative to the catalog
/// directory): `catalog.json` is held to [`CATALOG_FILE_COPY_MAX_BYTES`], a body to
/// [`BODY_FILE_COPY_MAX_BYTES`].
fn copy_limit_bytes(relative: &str) -> u64 {
    if relative == CATALOG_FILE_NAME {
        CATALOG_FILE_COPY_MAX_BYTES
    } else {
        BODY_FILE_COPY_MAX_BYTES
    }
}

/// Reads the source file `relative` of the catalog directory `source` for the copy, at most
/// `limit_bytes` bytes, under the same file rules as the loader (spec/catalog.md §3): opened
/// below `source` without following a link, a regular file with one link, so a file replaced by a
/// link since it loaded is refused as [`IngestError::File`]. A longer file, say one replaced
/// since it was loaded, is refused as [`IngestError::Io`] naming the file, its size and the
/// limit.
fn read_source_file(
    source: &Path,
    relative: &str,
    limit_bytes: u64,
) -> Result<Vec<u8>, IngestError> {
    let from = source.join(relative);
    let kind = if relative == CATALOG_FILE_NAME {
        CatalogFileKind::Catalog
    } else {
        CatalogFileKind::Body
    };
    let mut file = open_catalog_file(source, relative, kind).map_err(|e| match e {
        CatalogFileError::Io { source, .. } => io(&from)(source),
        other => IngestError::File(other),
    })?;
    read_bounded_file(&mut file, &from, limit_bytes).map_err(|e| io(&from)(read_error_source(e)))
}

/// Writes the catalog into a fresh directory beside the target and swaps it in with renames.
/// A crash leaves either the old catalog, the new one, or (between the two renames) none, which
/// the next ingest repairs; a half-written catalog is never in place.
fn write_catalog(
    layout: &Layout,
    source: &Path,
    loaded: &LoadedCatalog,
) -> Result<(), IngestError> {
    create_private_dir_all(layout.root()).map_err(RuntimeError::from)?;
    let pid = std::process::id();
    let staging = layout.root().join(format!(".catalog.new-{pid}"));
    let retired = layout.root().join(format!(".catalog.old-{pid}"));
    for dir in [&staging, &retired] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io(dir))?;
        }
    }
    create_private_dir_all(&staging).map_err(RuntimeError::from)?;
    let mut files = vec![CATALOG_FILE_NAME.to_owned()];
    let mut trees = Vec::new();
    for entry in loaded.catalog().entries() {
        for (_, body) in entry.bodies() {
            match loaded.tree_at(&body.path) {
                Some(tree) => trees.push((body.path.as_str(), tree)),
                None => files.push(body.path.clone()),
            }
        }
    }
    // Every file is written plainly into the fresh private staging directory and the whole
    // filesystem is synced once before the swap: a catalog of 100,000 entries would otherwise
    // cost 100,000 fsyncs and renames, and nothing reads the staging directory before the swap.
    for relative in files {
        let bytes = read_source_file(source, &relative, copy_limit_bytes(&relative))?;
        write_new_file(&staging, &relative, &bytes, FILE_MODE_PRIVATE)?;
    }
    // A skill tree is written from the tree the loader verified (spec/skill-tree.md §2), file by
    // file, keeping the executable bit its digest pins.
    for (relative, tree) in trees {
        for file in tree.files() {
            let mode = if file.executable() {
                EXECUTABLE_MODE_PRIVATE
            } else {
                FILE_MODE_PRIVATE
            };
            let path = format!("{relative}/{}", file.path());
            write_new_file(&staging, &path, file.bytes(), mode)?;
        }
    }
    // The projection the prompt hook reads (spec/catalog.md §8), built from the catalog whose
    // every body was just verified, and swapped in with it.
    let projection = loaded
        .catalog()
        .projection_bytes()
        .map_err(|e| IngestError::Io {
            path: staging.join(PROJECTION_FILE_NAME),
            source: std::io::Error::other(e.to_string()),
        })?;
    write_new_file(
        &staging,
        PROJECTION_FILE_NAME,
        &projection,
        FILE_MODE_PRIVATE,
    )?;
    let staged = std::fs::File::open(&staging).map_err(io(&staging))?;
    rustix::fs::syncfs(&staged).map_err(|e| io(&staging)(e.into()))?;
    let target = layout.catalog();
    if target.exists() {
        std::fs::rename(&target, &retired).map_err(io(&target))?;
    }
    std::fs::rename(&staging, &target).map_err(io(&target))?;
    if retired.exists() {
        std::fs::remove_dir_all(&retired).map_err(io(&retired))?;
    }
    std::fs::File::open(layout.root())
        .and_then(|d| d.sync_all())
        .map_err(io(layout.root()))
}

/// Mode of a copied executable file of a skill tree: owner read, write and execute.
const EXECUTABLE_MODE_PRIVATE: u32 = 0o700;

/// Creates the new file `relative` under `root` (and its missing private parent directories) with
/// `bytes` and `mode`; the caller syncs.
fn write_new_file(root: &Path, relative: &str, bytes: &[u8], mode: u32) -> Result<(), IngestError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let to = root.join(relative);
    if let Some(parent) = to.parent() {
        create_private_dir_all(parent).map_err(RuntimeError::from)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&to)
        .map_err(io(&to))?;
    file.write_all(bytes).map_err(io(&to))?;
    // The umask may have cleared bits of `mode`; the executable bit is content here.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io(&to))
}

#[cfg(test)]
mod tests;
