//! [`ArtifactRegistry`]: opening the registry root, ingesting a catalog, reopening a manifest and
//! checking handles.
//!
//! Publication is stage-then-publish under an exclusive lock on `registry-publication`: the
//! artifact is written in full into a `.stage-*` directory (every file and directory fsynced),
//! then renamed to its content address, so a reader sees either no artifact or a complete one. A
//! crash leaves only a stage, which the next lock holder removes.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctx_fs::{
    DirLock, LockError, LockOptions, MODE_GROUP_OTHER_WRITE, ModeRule, check_private_dir,
    ensure_private_dir, fsync_dir, read_bounded,
};
use ctx_model::{Surrogate, is_safe_token, is_sha, sha256_hex_bytes};

use crate::catalog::{
    CATALOG_FILE_NAME, CATALOG_TEXT_MAX_BYTES, Catalog, CatalogError, LoadedCatalog,
    PROJECTION_FILE_NAME, PROJECTION_FORMAT_VERSION, ProjectionError, ProjectionProblem,
    load_catalog, load_catalog_dir, projection_format_version,
};

use super::error::RegistryError;
use super::fsutil::{
    DIR_MODE, FILE_MODE, FILE_MODE_EXECUTABLE, check_read_only_file, dir_error, list_dir,
    remove_stage, walk_artifact, write_published_file, write_read_only_file,
};
use super::handle::ArtifactHandle;
use super::manifest::Manifest;
use super::surrogate::check_observation_surrogate;
use super::{MANIFEST_MAX_BYTES, REGISTRY_LOCK_POLL_MS, REGISTRY_LOCK_WAIT_MAX_MS};

/// Directory of published artifacts, one `<graph digest>/` directory each.
pub const ARTIFACTS_DIR: &str = "artifacts";
/// Directory of published manifests, one `<manifest digest>.json` file each.
pub const MANIFESTS_DIR: &str = "manifests";
/// The file whose exclusive lock serializes publication and reconciliation.
pub const PUBLICATION_LOCK_FILE: &str = "registry-publication";

/// Prefix of every stage name; nothing else may start with it.
const STAGE_PREFIX: &str = ".stage-";
const MANIFEST_SUFFIX: &str = ".json";

/// Source of registry tokens. A token is unique per [`ArtifactRegistry::open`] call in this
/// process; other processes are told apart by process id.
static NEXT_REGISTRY_TOKEN: AtomicU64 = AtomicU64::new(1);
/// Source of stage names, unique within the process (the process id makes them unique across
/// processes).
static NEXT_STAGE: AtomicU64 = AtomicU64::new(1);

/// What an ingest binds besides the catalog. Every digest is a lowercase SHA-256 digest.
#[derive(Debug, Clone)]
pub struct IngestInputs {
    pub planning_environment_digest: String,
    /// Must equal the catalog's namespace digest.
    pub catalog_namespace_digest: String,
    /// Must equal the catalog's retrieval snapshot digest.
    pub catalog_retrieval_digest: String,
    pub benefit_facts_snapshot_digest: String,
    pub benefit_policy_snapshot_digest: String,
    /// Must equal the catalog's material snapshot digest.
    pub material_snapshot_digest: String,
    /// Must equal the catalog's installation snapshot digest.
    pub installation_snapshot_digest: String,
    /// An exact `ctx.observation.current-work` v1 surrogate.
    pub observation_surrogate: Surrogate,
    /// A lowercase bounded token (`[a-z0-9][a-z0-9._:@-]{0,127}`).
    pub planning_schema_version: String,
}

/// An owner-private, content-addressed artifact registry rooted at one directory.
///
/// Not `Clone`: every open yields a new instance with its own token, and handles issued by one
/// instance are refused by every other, even over the same directory.
#[derive(Debug)]
pub struct ArtifactRegistry {
    root: PathBuf,
    artifacts: PathBuf,
    manifests: PathBuf,
    lock_path: PathBuf,
    /// How long [`ArtifactRegistry::lock`] waits for another holder of the publication lock.
    lock_wait: Duration,
    /// `(device, inode)` of root, artifacts and manifests at open; a replaced directory is refused.
    identities: [(u64, u64); 3],
    token: u64,
    pid: u32,
}

/// Holds the publication lock (a ctx-fs [`DirLock`]) until dropped.
#[derive(Debug)]
struct PublicationLock {
    _lock: DirLock,
}

impl ArtifactRegistry {
    /// The registry's root directory (absolute), so that owners of other persistence roots can
    /// refuse aliases of it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens (creating if needed) the registry at the absolute path `root`. The root and its
    /// `artifacts/` and `manifests/` directories must be real directories of mode 0700 owned by
    /// this user; stages left by an interrupted publication are removed.
    ///
    /// Opening, ingesting and reopening take the publication lock, waiting at most
    /// [`REGISTRY_LOCK_WAIT_MAX_MS`] for another holder ([`RegistryError::LockTimeout`]).
    pub fn open(root: &Path) -> Result<ArtifactRegistry, RegistryError> {
        ArtifactRegistry::open_with_lock_wait(
            root,
            Duration::from_millis(REGISTRY_LOCK_WAIT_MAX_MS),
        )
    }

    /// [`ArtifactRegistry::open`] with another bound on the wait for the publication lock (tests
    /// use a short one).
    pub(crate) fn open_with_lock_wait(
        root: &Path,
        lock_wait: Duration,
    ) -> Result<ArtifactRegistry, RegistryError> {
        let unsafe_root = |problem: &str| RegistryError::UnsafeRoot {
            path: root.to_path_buf(),
            problem: problem.to_owned(),
        };
        if !root.is_absolute() {
            return Err(unsafe_root("is not an absolute path"));
        }
        if root.parent().is_none() {
            return Err(unsafe_root(
                "is a filesystem root, which the registry cannot use",
            ));
        }
        if let Err(e) = fs::symlink_metadata(root) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(RegistryError::io("inspect", root)(e));
            }
            if let Some(parent) = root.parent() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .create(parent)
                    .map_err(RegistryError::io("create the directory", parent))?;
            }
        }
        let root_meta = ensure_private_dir(root)
            .map_err(dir_error)
            .map_err(|e| match e {
                RegistryError::UnsafeEntry { problem, .. } => RegistryError::UnsafeRoot {
                    path: root.to_path_buf(),
                    problem,
                },
                other => other,
            })?;
        let artifacts = root.join(ARTIFACTS_DIR);
        let manifests = root.join(MANIFESTS_DIR);
        // The root is synced only when it gains a directory: a sync at every open was a durable
        // sync per prompt hook for nothing (spec/service.md §13).
        let creates =
            fs::symlink_metadata(&artifacts).is_err() || fs::symlink_metadata(&manifests).is_err();
        let artifacts_meta = ensure_private_dir(&artifacts).map_err(dir_error)?;
        let manifests_meta = ensure_private_dir(&manifests).map_err(dir_error)?;
        let lock_path = root.join(PUBLICATION_LOCK_FILE);
        let registry = ArtifactRegistry {
            root: root.to_path_buf(),
            artifacts,
            manifests,
            lock_path,
            lock_wait,
            identities: [
                (root_meta.dev(), root_meta.ino()),
                (artifacts_meta.dev(), artifacts_meta.ino()),
                (manifests_meta.dev(), manifests_meta.ino()),
            ],
            token: NEXT_REGISTRY_TOKEN.fetch_add(1, Ordering::Relaxed),
            pid: std::process::id(),
        };
        let _lock = registry.lock()?;
        registry.assert_current()?;
        registry.reconcile()?;
        if creates {
            fsync_dir(&registry.root)?;
        }
        Ok(registry)
    }

    /// Ingests `loaded` as an immutable artifact with its manifest and returns a handle issued by
    /// this registry. Re-ingesting identical content returns a handle with the same digests.
    pub fn ingest(
        &self,
        loaded: &LoadedCatalog,
        inputs: IngestInputs,
    ) -> Result<ArtifactHandle, RegistryError> {
        self.ingest_with(loaded.catalog(), &|| Ok(loaded.clone()), inputs)
    }

    /// [`ArtifactRegistry::ingest`] of a catalog whose bodies are in the catalog directory `dir`:
    /// they are read and verified only when the artifact is not published yet, so binding a new
    /// observation to a published artifact reads no body (spec/registry.md §4).
    pub fn ingest_from_dir(
        &self,
        catalog: &Catalog,
        dir: &Path,
        inputs: IngestInputs,
    ) -> Result<ArtifactHandle, RegistryError> {
        self.ingest_with(catalog, &|| load_catalog_dir(dir), inputs)
    }

    fn ingest_with(
        &self,
        catalog: &Catalog,
        load: &dyn Fn() -> Result<LoadedCatalog, CatalogError>,
        inputs: IngestInputs,
    ) -> Result<ArtifactHandle, RegistryError> {
        self.assert_current()?;
        let manifest = manifest_for(catalog, inputs)?;
        let manifest_bytes = manifest.to_bytes();
        if manifest_bytes.len() > MANIFEST_MAX_BYTES {
            return Err(RegistryError::ManifestTooLarge {
                size: manifest_bytes.len(),
                limit: MANIFEST_MAX_BYTES,
            });
        }
        let manifest_digest = Manifest::digest_of(&manifest_bytes);
        let _lock = self.lock()?;
        self.assert_current()?;
        self.reconcile()?;
        self.publish_artifact(load, &manifest.graph_artifact_digest)?;
        self.publish_manifest(&manifest_digest, &manifest_bytes)?;
        let handle = self.authenticate(&manifest_digest, &manifest.planning_environment_digest)?;
        self.assert_current()?;
        Ok(handle)
    }

    /// Publishes the artifact of `loaded` alone (spec/registry.md §4.2): what `ctx catalog
    /// ingest` does once a catalog is in place, so that the first prompt on a new catalog binds
    /// its work to a published artifact instead of copying and verifying every body while the
    /// person waits. An artifact already published is opened by its projection (and an older
    /// projection rewritten), as by [`ArtifactRegistry::ingest`].
    pub fn publish(&self, loaded: &LoadedCatalog) -> Result<(), RegistryError> {
        self.assert_current()?;
        let _lock = self.lock()?;
        self.assert_current()?;
        self.reconcile()?;
        self.publish_artifact(&|| Ok(loaded.clone()), loaded.catalog().content_digest())
    }

    /// Re-authenticates the manifest `manifest_digest` and every file of its artifact (digests,
    /// sizes, modes) and returns a fresh handle issued by this registry.
    pub fn reopen(
        &self,
        manifest_digest: &str,
        planning_environment_digest: &str,
    ) -> Result<ArtifactHandle, RegistryError> {
        self.assert_current()?;
        for (field, value) in [
            ("manifest_digest", manifest_digest),
            ("planning_environment_digest", planning_environment_digest),
        ] {
            check_digest(field, value)?;
        }
        let _lock = self.lock()?;
        self.assert_current()?;
        self.reconcile()?;
        let handle = self.authenticate(manifest_digest, planning_environment_digest)?;
        self.assert_current()?;
        Ok(handle)
    }

    /// Verifies every file of the published artifact `graph_digest` as its publication did:
    /// private modes, no undeclared file, the catalog hashing to the address, every body
    /// matching its declaration, the projection derived from the catalog byte for byte. What an
    /// audit runs; a prompt reads the projection only (spec/registry.md §4).
    pub fn verify_artifact_files(&self, graph_digest: &str) -> Result<(), RegistryError> {
        self.assert_current()?;
        check_digest("graph_artifact_digest", graph_digest)?;
        let _lock = self.lock()?;
        self.verify_artifact(graph_digest).map(|_| ())
    }

    /// Succeeds only for a handle this registry instance issued in this process.
    pub fn verify_handle(&self, handle: &ArtifactHandle) -> Result<(), RegistryError> {
        self.assert_process()?;
        if handle.registry_token != self.token {
            return Err(RegistryError::ForeignHandle);
        }
        let current_pid = std::process::id();
        if handle.issuing_pid != current_pid {
            return Err(RegistryError::HandleOutsideProcess {
                issuing_pid: handle.issuing_pid,
                current_pid,
            });
        }
        Ok(())
    }

    fn assert_process(&self) -> Result<(), RegistryError> {
        let current_pid = std::process::id();
        if current_pid != self.pid {
            return Err(RegistryError::RegistryOutsideProcess {
                issuing_pid: self.pid,
                current_pid,
            });
        }
        Ok(())
    }

    /// The currency check: same process, and the three directories are still private and the
    /// very directories opened (a swapped directory would redirect every content address).
    fn assert_current(&self) -> Result<(), RegistryError> {
        self.assert_process()?;
        for (path, identity) in [&self.root, &self.artifacts, &self.manifests]
            .into_iter()
            .zip(self.identities)
        {
            let meta = check_private_dir(path).map_err(dir_error)?;
            if (meta.dev(), meta.ino()) != identity {
                return Err(RegistryError::unsafe_entry(
                    path,
                    "was replaced by another directory after the registry opened it",
                ));
            }
        }
        Ok(())
    }

    /// Takes the exclusive publication lock, polling every [`REGISTRY_LOCK_POLL_MS`] for at most
    /// the registry's wait. The lock file (created 0600 when absent) must be a regular file of
    /// this user that other users cannot write; the root around it is already owner-private.
    fn lock(&self) -> Result<PublicationLock, RegistryError> {
        let path = &self.lock_path;
        if let Ok(meta) = fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(RegistryError::unsafe_entry(path, "is not a regular file"));
        }
        let poll = Duration::from_millis(REGISTRY_LOCK_POLL_MS);
        // No grace for a record naming this process: the registry never takes its own lock
        // re-entrantly, so such a record is another handle of this process (or a child's inherited
        // copy), which the ordinary wait covers.
        let options = LockOptions::new(self.lock_wait)
            .poll(poll, poll)
            .self_held_grace(Duration::ZERO)
            .file_rule(ModeRule::NoneOf(MODE_GROUP_OTHER_WRITE));
        DirLock::acquire(path, &options)
            .map(|lock| PublicationLock { _lock: lock })
            .map_err(lock_error)
    }

    /// Removes stages of interrupted publications and refuses names the layout does not allow.
    /// Called with the publication lock held, so no stage is in use.
    fn reconcile(&self) -> Result<(), RegistryError> {
        let mut removed = false;
        for (dir, suffix) in [(&self.artifacts, ""), (&self.manifests, MANIFEST_SUFFIX)] {
            for name in list_dir(dir)? {
                let path = dir.join(&name);
                if name.starts_with(STAGE_PREFIX) {
                    remove_stage(&path)?;
                    removed = true;
                } else if !name.strip_suffix(suffix).is_some_and(is_sha) {
                    return Err(RegistryError::unsafe_entry(
                        path,
                        "is neither a published content address nor a publication stage",
                    ));
                }
            }
            if removed {
                fsync_dir(dir)?;
            }
        }
        Ok(())
    }

    fn stage_path(&self, dir: &Path) -> PathBuf {
        dir.join(format!(
            "{STAGE_PREFIX}{}-{}",
            std::process::id(),
            NEXT_STAGE.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Publishes the artifact directory `artifacts/<graph digest>/` from the catalog `load`
    /// yields, verifying every file once; an artifact already published is opened by its
    /// projection instead (content addressing makes re-ingest idempotent).
    fn publish_artifact(
        &self,
        load: &dyn Fn() -> Result<LoadedCatalog, CatalogError>,
        graph_digest: &str,
    ) -> Result<(), RegistryError> {
        let target = self.artifacts.join(graph_digest);
        if fs::symlink_metadata(&target).is_ok() {
            self.artifact_catalog(graph_digest)?;
            return Ok(());
        }
        let loaded = load().map_err(|e| {
            RegistryError::corrupt(&target, format!("its catalog does not load: {e}"))
        })?;
        if loaded.catalog().content_digest() != graph_digest {
            return Err(RegistryError::corrupt(
                &target,
                format!(
                    "the catalog to publish has the content digest {}, not {graph_digest}",
                    loaded.catalog().content_digest()
                ),
            ));
        }
        let stage = self.stage_path(&self.artifacts);
        let written = write_artifact_tree(&stage, &loaded);
        if let Err(e) = written {
            // Best effort: a stage left behind is removed by the next reconciliation anyway.
            let _ = remove_stage(&stage);
            return Err(e);
        }
        fs::rename(&stage, &target).map_err(RegistryError::io("publish the artifact", &target))?;
        fsync_dir(&self.artifacts)?;
        self.verify_artifact(graph_digest)?;
        Ok(())
    }

    /// Publishes `manifests/<digest>.json` by hard link from a stage (a link never replaces an
    /// existing name), or checks the bytes already there are identical.
    fn publish_manifest(&self, digest: &str, bytes: &[u8]) -> Result<(), RegistryError> {
        let target = self.manifests.join(format!("{digest}{MANIFEST_SUFFIX}"));
        if fs::symlink_metadata(&target).is_ok() {
            check_read_only_file(&target)?;
            let existing = read_bounded(&target, bound(MANIFEST_MAX_BYTES))?;
            if existing != bytes {
                return Err(RegistryError::Occupied { path: target });
            }
            return Ok(());
        }
        let stage = self.stage_path(&self.manifests);
        let published = write_read_only_file(&stage, bytes).and_then(|()| {
            fs::hard_link(&stage, &target)
                .map_err(RegistryError::io("publish the manifest", &target))
        });
        let removed = remove_stage(&stage);
        published?;
        removed?;
        Ok(fsync_dir(&self.manifests)?)
    }

    /// Reads and checks a manifest and its artifact. Called with the publication lock held.
    fn authenticate(
        &self,
        manifest_digest: &str,
        planning_environment_digest: &str,
    ) -> Result<ArtifactHandle, RegistryError> {
        let path = self
            .manifests
            .join(format!("{manifest_digest}{MANIFEST_SUFFIX}"));
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RegistryError::NotFound {
                    manifest_digest: manifest_digest.to_owned(),
                });
            }
            Err(e) => return Err(RegistryError::io("inspect", &path)(e)),
            Ok(_) => {}
        }
        check_read_only_file(&path)?;
        let bytes = read_bounded(&path, bound(MANIFEST_MAX_BYTES))?;
        let actual = Manifest::digest_of(&bytes);
        if actual != manifest_digest {
            return Err(RegistryError::corrupt(
                &path,
                format!("its SHA-256 is {actual}, not its address {manifest_digest}"),
            ));
        }
        let manifest = Manifest::decode(&bytes)
            .map_err(|problem| RegistryError::corrupt(&path, problem.to_string()))?;
        if manifest.planning_environment_digest != planning_environment_digest {
            return Err(RegistryError::EnvironmentMismatch {
                manifest_digest: manifest_digest.to_owned(),
                bound: manifest.planning_environment_digest,
                expected: planning_environment_digest.to_owned(),
            });
        }
        let catalog = self.artifact_catalog(&manifest.graph_artifact_digest)?;
        for (field, bound, derived) in catalog_digests(&manifest, &catalog) {
            if bound != derived {
                return Err(RegistryError::corrupt(
                    &path,
                    format!("its {field} {bound} differs from the artifact's {derived}"),
                ));
            }
        }
        Ok(ArtifactHandle::new(
            manifest_digest.to_owned(),
            manifest,
            Arc::new(catalog),
            self.token,
        ))
    }

    /// The catalog of the published artifact `artifacts/<graph digest>/`, from its projection
    /// (spec/registry.md §4): a read-only file whose header digest and content checks pass and
    /// whose content digest is the address. Its bodies were verified when it was published and
    /// are verified again by whatever installs one. An artifact published before projections
    /// existed is verified whole, as then.
    fn artifact_catalog(&self, graph_digest: &str) -> Result<Catalog, RegistryError> {
        let dir = self.artifacts.join(graph_digest);
        let path = dir.join(PROJECTION_FILE_NAME);
        if fs::symlink_metadata(&path).is_err() {
            return Ok(self.verify_artifact(graph_digest)?.catalog().clone());
        }
        check_read_only_file(&path)?;
        check_read_only_file(&dir.join(CATALOG_FILE_NAME))?;
        let catalog = match Catalog::open_projection(&dir) {
            Ok(catalog) => catalog,
            // A projection of another format version is derived data this build does not
            // read: the artifact is verified whole and its projection rewritten in this
            // build's format, once (spec/registry.md §4).
            Err(ProjectionError::Invalid {
                problem: ProjectionProblem::Version { .. },
                ..
            }) => return self.upgrade_projection(graph_digest),
            Err(e) => return Err(RegistryError::corrupt(&path, e.to_string())),
        };
        if catalog.content_digest() != graph_digest {
            return Err(RegistryError::corrupt(
                &path,
                format!(
                    "its content digest is {}, not its artifact's address {graph_digest}",
                    catalog.content_digest()
                ),
            ));
        }
        Ok(catalog)
    }

    /// Verifies the artifact whole and replaces its projection of another format version with
    /// this build's: written read-only as a stage beside the artifacts, then renamed over the
    /// old one (a crash leaves a stage the next reconciliation removes, or the old file).
    fn upgrade_projection(&self, graph_digest: &str) -> Result<Catalog, RegistryError> {
        let loaded = self.verify_artifact(graph_digest)?;
        let dir = self.artifacts.join(graph_digest);
        let path = dir.join(PROJECTION_FILE_NAME);
        let bytes = loaded
            .catalog()
            .projection_bytes()
            .map_err(|e| RegistryError::corrupt(&path, e.to_string()))?;
        let stage = self.stage_path(&self.artifacts);
        let written = write_read_only_file(&stage, &bytes)
            .and_then(|()| fs::rename(&stage, &path).map_err(RegistryError::io("replace", &path)));
        if let Err(e) = written {
            // Best effort: a stage left behind is removed by the next reconciliation anyway.
            let _ = remove_stage(&stage);
            return Err(e);
        }
        fsync_dir(&dir)?;
        Ok(loaded.catalog().clone())
    }

    /// Re-authenticates every file of `artifacts/<graph digest>/`: private modes, no extra files,
    /// `catalog.json` hashing to the address, every body matching its declared size and SHA-256.
    fn verify_artifact(&self, graph_digest: &str) -> Result<LoadedCatalog, RegistryError> {
        let dir = self.artifacts.join(graph_digest);
        if fs::symlink_metadata(&dir).is_err() {
            return Err(RegistryError::corrupt(
                &dir,
                "the artifact directory is missing",
            ));
        }
        let files = walk_artifact(&dir)?;
        let catalog_path = dir.join(CATALOG_FILE_NAME);
        if !files.contains_key(CATALOG_FILE_NAME) {
            return Err(RegistryError::corrupt(&catalog_path, "the file is missing"));
        }
        let bytes = read_bounded(&catalog_path, bound(CATALOG_TEXT_MAX_BYTES))?;
        let actual = sha256_hex_bytes(&bytes);
        if actual != graph_digest {
            return Err(RegistryError::corrupt(
                &catalog_path,
                format!("its SHA-256 is {actual}, not its address {graph_digest}"),
            ));
        }
        let loaded = load_catalog(&catalog_path, &dir)
            .map_err(|e| RegistryError::corrupt(&catalog_path, e.to_string()))?;
        // The loader read the file again; its content digest must still be the address.
        if loaded.catalog().content_digest() != graph_digest {
            return Err(RegistryError::corrupt(
                &catalog_path,
                "it changed while the artifact was being verified",
            ));
        }
        let expected = body_paths(&loaded);
        // A file is declared when it is a body, or lies inside a declared skill tree.
        let declared = |relative: &str| {
            expected.contains(relative)
                || std::iter::successors(relative.rsplit_once('/').map(|(d, _)| d), |d| {
                    d.rsplit_once('/').map(|(p, _)| p)
                })
                .any(|dir| loaded.tree_at(dir).is_some())
        };
        for relative in files.keys() {
            if relative != CATALOG_FILE_NAME
                && relative != PROJECTION_FILE_NAME
                && !declared(relative)
            {
                return Err(RegistryError::corrupt(
                    dir.join(relative),
                    "the file is not declared by the artifact's catalog",
                ));
            }
        }
        // The projection is derived from the catalog, byte for byte (spec/catalog.md §8.1); one
        // of another format version is replaced by `upgrade_projection`, not compared.
        if files.contains_key(PROJECTION_FILE_NAME)
            && projection_format_version(&dir.join(PROJECTION_FILE_NAME))
                == Some(PROJECTION_FORMAT_VERSION)
        {
            let path = dir.join(PROJECTION_FILE_NAME);
            let expected = loaded
                .catalog()
                .projection_bytes()
                .map_err(|e| RegistryError::corrupt(&path, e.to_string()))?;
            let bytes = read_bounded(&path, bound(expected.len()))?;
            if bytes != expected {
                return Err(RegistryError::corrupt(
                    &path,
                    "it is not the projection of the artifact's catalog",
                ));
            }
        }
        Ok(loaded)
    }
}

/// A ctx-fs lock refusal as a registry error: a lock held past the wait is
/// [`RegistryError::LockTimeout`], naming the lock file and its holder.
fn lock_error(e: LockError) -> RegistryError {
    match e {
        LockError::Held {
            path,
            holder,
            waited,
        } => RegistryError::LockTimeout {
            path,
            holder,
            waited_ms: waited.as_millis(),
        },
        LockError::Unsafe { path, source } => {
            RegistryError::unsafe_entry(path, format!("is not a safe lock file: {source}"))
        }
        LockError::Io {
            action: "opened",
            path,
            source,
        } => RegistryError::io("open the lock file", path)(source),
        LockError::Io {
            action: "locked",
            path,
            source,
        } => RegistryError::io("lock the lock file", path)(source),
        LockError::Io { path, source, .. } => {
            RegistryError::io("record the holder in the lock file", path)(source)
        }
        other => RegistryError::Io {
            operation: "lock the lock file",
            path: PathBuf::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

fn bound(limit: usize) -> u64 {
    u64::try_from(limit).unwrap_or(u64::MAX)
}

fn check_digest(field: &'static str, value: &str) -> Result<(), RegistryError> {
    if is_sha(value) {
        Ok(())
    } else {
        Err(RegistryError::InvalidInput {
            field,
            value: value.to_owned(),
            problem: "must be a lowercase SHA-256 digest".to_owned(),
        })
    }
}

/// The catalog-derived digests a manifest binds, paired with what the catalog yields.
fn catalog_digests<'a>(
    manifest: &'a Manifest,
    catalog: &'a Catalog,
) -> [(&'static str, &'a str, &'a str); 4] {
    [
        (
            "catalog_namespace_digest",
            &manifest.catalog_namespace_digest,
            catalog.namespace_digest(),
        ),
        (
            "catalog_retrieval_digest",
            &manifest.catalog_retrieval_digest,
            catalog.retrieval_snapshot_digest(),
        ),
        (
            "material_snapshot_digest",
            &manifest.material_snapshot_digest,
            catalog.material_snapshot_digest(),
        ),
        (
            "installation_snapshot_digest",
            &manifest.installation_snapshot_digest,
            catalog.installation_snapshot_digest(),
        ),
    ]
}

/// Validates the inputs and builds the manifest of `catalog`.
fn manifest_for(catalog: &Catalog, inputs: IngestInputs) -> Result<Manifest, RegistryError> {
    for (field, value) in [
        (
            "planning_environment_digest",
            &inputs.planning_environment_digest,
        ),
        ("catalog_namespace_digest", &inputs.catalog_namespace_digest),
        ("catalog_retrieval_digest", &inputs.catalog_retrieval_digest),
        (
            "benefit_facts_snapshot_digest",
            &inputs.benefit_facts_snapshot_digest,
        ),
        (
            "benefit_policy_snapshot_digest",
            &inputs.benefit_policy_snapshot_digest,
        ),
        ("material_snapshot_digest", &inputs.material_snapshot_digest),
        (
            "installation_snapshot_digest",
            &inputs.installation_snapshot_digest,
        ),
    ] {
        check_digest(field, value)?;
    }
    if !is_safe_token(&inputs.planning_schema_version) {
        return Err(RegistryError::InvalidInput {
            field: "planning_schema_version",
            value: inputs.planning_schema_version,
            problem: "must be a canonical bounded token ([a-z0-9][a-z0-9._:@-]{0,127})".to_owned(),
        });
    }
    check_observation_surrogate(&inputs.observation_surrogate).map_err(|problem| {
        RegistryError::InvalidSurrogate {
            problem: problem.to_string(),
        }
    })?;
    let manifest = Manifest {
        graph_artifact_digest: catalog.content_digest().to_owned(),
        planning_environment_digest: inputs.planning_environment_digest,
        catalog_namespace_digest: inputs.catalog_namespace_digest,
        catalog_retrieval_digest: inputs.catalog_retrieval_digest,
        benefit_facts_snapshot_digest: inputs.benefit_facts_snapshot_digest,
        benefit_policy_snapshot_digest: inputs.benefit_policy_snapshot_digest,
        material_snapshot_digest: inputs.material_snapshot_digest,
        installation_snapshot_digest: inputs.installation_snapshot_digest,
        observation_surrogate: inputs.observation_surrogate,
        planning_schema_version: inputs.planning_schema_version,
    };
    for (field, supplied, derived) in catalog_digests(&manifest, catalog) {
        if supplied != derived {
            return Err(RegistryError::CatalogMismatch {
                field,
                supplied: supplied.to_owned(),
                catalog: derived.to_owned(),
            });
        }
    }
    Ok(manifest)
}

fn body_paths(loaded: &LoadedCatalog) -> BTreeSet<&str> {
    loaded
        .catalog()
        .entries()
        .iter()
        .flat_map(|e| e.bodies().map(|(_, body)| body.path.as_str()))
        .collect()
}

/// Writes the canonical catalog and every body under the new directory `stage`, fsyncing every
/// file and then every directory (deepest first) so the tree is durable before it is renamed.
fn write_artifact_tree(stage: &Path, loaded: &LoadedCatalog) -> Result<(), RegistryError> {
    ensure_private_dir(stage).map_err(dir_error)?;
    let catalog_bytes = loaded.catalog().to_json().to_cja().into_bytes();
    if sha256_hex_bytes(&catalog_bytes) != loaded.catalog().content_digest() {
        // The canonical text and the content digest are computed from the same document; a
        // difference means the catalog module changed one without the other.
        return Err(RegistryError::corrupt(
            stage.join(CATALOG_FILE_NAME),
            "the canonical catalog bytes do not hash to the catalog content digest",
        ));
    }
    write_read_only_file(&stage.join(CATALOG_FILE_NAME), &catalog_bytes)?;
    let projection = loaded
        .catalog()
        .projection_bytes()
        .map_err(|e| RegistryError::corrupt(stage.join(PROJECTION_FILE_NAME), e.to_string()))?;
    write_read_only_file(&stage.join(PROJECTION_FILE_NAME), &projection)?;
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::from([stage.to_path_buf()]);
    let mut make_parents = |relative: &str| -> Result<(), RegistryError> {
        let mut dir = stage.to_path_buf();
        let segments: Vec<&str> = relative.split('/').collect();
        if let Some((_, parents)) = segments.split_last() {
            for segment in parents {
                dir.push(segment);
                if dirs.insert(dir.clone()) {
                    fs::DirBuilder::new()
                        .mode(DIR_MODE)
                        .create(&dir)
                        .map_err(RegistryError::io("create the directory", &dir))?;
                    fs::set_permissions(&dir, fs::Permissions::from_mode(DIR_MODE))
                        .map_err(RegistryError::io("set the mode of", &dir))?;
                }
            }
        }
        Ok(())
    };
    for relative in body_paths(loaded) {
        // A skill tree is written file by file from the verified tree, keeping each file's
        // executable bit (spec/registry.md).
        if let Some(tree) = loaded.tree_at(relative) {
            for file in tree.files() {
                let path = format!("{relative}/{}", file.path());
                make_parents(&path)?;
                let mode = if file.executable() {
                    FILE_MODE_EXECUTABLE
                } else {
                    FILE_MODE
                };
                write_published_file(&stage.join(&path), file.bytes(), mode)?;
            }
            continue;
        }
        let text = loaded.body_at(relative).ok_or_else(|| {
            RegistryError::corrupt(
                stage.join(relative),
                "the loaded catalog lacks this body's text",
            )
        })?;
        make_parents(relative)?;
        write_read_only_file(&stage.join(relative), text.as_bytes())?;
    }
    for dir in dirs.iter().rev() {
        fsync_dir(dir)?;
    }
    Ok(())
}
