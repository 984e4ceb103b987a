//! The hardened on-disk policy store (spec/policy.md §3–§5; specified in `spec/policy.md`).
//!
//! Layout under an absolute root (default `~/.ctx/install-policy`):
//!
//! ```text
//! <parent>/.<root name>.policy-current   0600  lock file (exclusive flock, every read and write)
//! <root>/                                0700
//!   current.json                         0600  canonical text of the selected policy
//!   snapshots/                           0700
//!     <policy digest>.json               0600  immutable canonical text, named by its digest
//! ```
//!
//! Two approximations, because the crate forbids `unsafe` and std exposes neither `getuid` nor
//! `O_NOFOLLOW` portably:
//!
//! * "Owned by the current user" means owned by the uid a directory gets when this store creates
//!   it: once per store handle, a uniquely named probe directory is created (exclusively) next to
//!   the lock file, its owner read and the probe removed. That is the file-system uid every file
//!   this process writes receives — exactly the owner the store must insist on.
//! * A no-follow open is an `lstat` (refusing a symbolic link or non-regular file) followed by an
//!   open and an `fstat` whose `(device, inode)` must equal the `lstat`'s; a path swapped in
//!   between is refused as "changed while being read". Only the owner can swap names in the
//!   0700 directories, so the window only matters for the owner's own processes.

use std::ffi::OsString;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctx_fs::{
    DIR_MODE_PRIVATE, DirLock, FILE_MODE_PRIVATE, LockError, LockOptions, MODE_GROUP_OTHER_WRITE,
    MODE_PERMISSION_BITS, ReadError, SyncError, WriteError, fsync_dir, read_bounded_file,
    write_durable_with_temp,
};
use ctx_model::{Json, JsonError, is_sha};

use super::error::PolicyStoreError;
use super::model::InstallConsentPolicy;

/// Largest policy file, in bytes.
pub const MAX_POLICY_FILE_BYTES: u64 = 4_096;
/// The file naming the selected policy.
pub const CURRENT_FILE: &str = "current.json";
/// The directory of immutable snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// The suffix of the lock file `<parent>/.<root name>.policy-current`.
pub const LOCK_SUFFIX: &str = ".policy-current";
/// How long an operation waits for the lock by default, in milliseconds.
pub const POLICY_LOCK_WAIT_MAX_MS: u64 = 30_000;
/// How long an operation waits for the lock by default.
pub const LOCK_WAIT: Duration = Duration::from_millis(POLICY_LOCK_WAIT_MAX_MS);
/// How often a waiting operation retries the lock, in milliseconds.
pub const POLICY_LOCK_POLL_MS: u64 = 10;
/// How often a waiting operation retries the lock.
pub const LOCK_POLL: Duration = Duration::from_millis(POLICY_LOCK_POLL_MS);
/// The default root below the home directory.
pub const DEFAULT_ROOT_RELATIVE: &str = ".ctx/install-policy";

const DIR_MODE: u32 = DIR_MODE_PRIVATE;
const FILE_MODE: u32 = FILE_MODE_PRIVATE;
const PERMISSION_BITS: u32 = MODE_PERMISSION_BITS;
const GROUP_OR_WORLD_WRITABLE: u32 = MODE_GROUP_OTHER_WRITE;
const ROOT_LABEL: &str = "install policy root";
const SNAPSHOTS_LABEL: &str = "install policy snapshots directory";
const PARENT_LABEL: &str = "install policy root parent";
/// Attempts at a fresh temporary or probe name before giving up.
const FRESH_NAME_ATTEMPTS: usize = 64;

static NEXT_FRESH_NAME: AtomicU64 = AtomicU64::new(0);

type Result<T> = std::result::Result<T, PolicyStoreError>;

/// `(device, inode)`: the identity of a file-system object.
type Identity = (u64, u64);

fn identity(meta: &Metadata) -> Identity {
    (meta.dev(), meta.ino())
}

fn fresh_suffix() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NEXT_FRESH_NAME.fetch_add(1, Ordering::Relaxed)
    )
}

/// The file name for messages: the last component only, never a path.
fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `lstat`, with a missing path as `None`.
fn lstat(path: &Path) -> Result<Option<Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PolicyStoreError::io("inspect a policy store path")(e)),
    }
}

/// The macOS system links (`/etc`, `/tmp`, `/var` → `/private/…`) the reference tolerates as
/// ancestors; nothing elsewhere.
fn is_allowed_system_symlink(path: &Path) -> bool {
    if !cfg!(target_os = "macos") {
        return false;
    }
    let expected = match path.to_str() {
        Some("/etc") => "/private/etc",
        Some("/tmp") => "/private/tmp",
        Some("/var") => "/private/var",
        _ => return false,
    };
    fs::canonicalize(path).is_ok_and(|p| p == Path::new(expected))
}

/// Refuses `path` if it or any existing ancestor is a symbolic link.
fn reject_symlink_path(path: &Path) -> Result<()> {
    let mut current = PathBuf::new();
    for component in path.components() {
        current.push(component);
        if matches!(component, Component::RootDir | Component::Prefix(_)) {
            continue;
        }
        match lstat(&current)? {
            None => return Ok(()),
            Some(meta) if meta.file_type().is_symlink() && !is_allowed_system_symlink(&current) => {
                return Err(PolicyStoreError::SymlinkedPath(current));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A real directory (not a link), not group/world writable, mode exactly 0700, owned by `uid`.
fn validate_directory(path: &Path, label: &'static str, uid: u32) -> Result<Metadata> {
    let Some(meta) = lstat(path)?.filter(|m| m.file_type().is_dir()) else {
        return Err(PolicyStoreError::NotADirectory { label });
    };
    let mode = meta.mode();
    if mode & GROUP_OR_WORLD_WRITABLE != 0 {
        return Err(PolicyStoreError::DirectoryWritable { label });
    }
    if mode & PERMISSION_BITS != DIR_MODE {
        return Err(PolicyStoreError::DirectoryMode { label });
    }
    if meta.uid() != uid {
        return Err(PolicyStoreError::DirectoryOwner { label });
    }
    Ok(meta)
}

/// A failed ctx-fs `fsync_dir`, in this module's words.
fn sync_error(e: SyncError) -> PolicyStoreError {
    match e {
        SyncError::Io { source, .. } => {
            PolicyStoreError::io("fsync a policy store directory")(source)
        }
        other => PolicyStoreError::io("fsync a policy store directory")(io::Error::other(other)),
    }
}

/// Creates `path` (mode 0700, parent fsynced) when absent, then validates it.
fn ensure_directory(path: &Path, label: &'static str, uid: u32) -> Result<Metadata> {
    if lstat(path)?.is_none() {
        match fs::DirBuilder::new().mode(DIR_MODE).create(path) {
            Ok(()) => {
                // The umask may have cleared bits of 0700; set the mode explicitly.
                fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE)).map_err(
                    PolicyStoreError::io("set the mode of a policy store directory"),
                )?;
                if let Some(parent) = path.parent() {
                    fsync_dir(parent).map_err(sync_error)?;
                }
            }
            // Another process created it since the lookup; validation judges what it made.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(PolicyStoreError::io("create a policy store directory")(e)),
        }
    }
    validate_directory(path, label, uid)
}

/// The private-file rules on metadata already known to describe a non-link.
fn check_file_metadata(meta: &Metadata, name: &str, uid: u32) -> Result<()> {
    let name = || name.to_owned();
    if !meta.file_type().is_file() {
        return Err(PolicyStoreError::FileNotRegular { name: name() });
    }
    let mode = meta.mode();
    if mode & GROUP_OR_WORLD_WRITABLE != 0 {
        return Err(PolicyStoreError::FileWritable { name: name() });
    }
    if mode & PERMISSION_BITS != FILE_MODE {
        return Err(PolicyStoreError::FileMode { name: name() });
    }
    if meta.nlink() != 1 {
        return Err(PolicyStoreError::FileHardLinked { name: name() });
    }
    if meta.uid() != uid {
        return Err(PolicyStoreError::FileOwner { name: name() });
    }
    Ok(())
}

/// The private-file rules by `lstat` (after a write).
fn validate_private_file(path: &Path, uid: u32) -> Result<()> {
    let name = file_label(path);
    let Some(meta) = lstat(path)? else {
        return Err(PolicyStoreError::FileMissing { name });
    };
    if meta.file_type().is_symlink() {
        return Err(PolicyStoreError::FileNotRegular { name });
    }
    check_file_metadata(&meta, &name, uid)
}

/// Reads a private policy file of at most [`MAX_POLICY_FILE_BYTES`], refusing links, loose
/// permissions, other owners, extra links and a file that changes while it is read.
fn read_policy_file(path: &Path, uid: u32) -> Result<Vec<u8>> {
    let name = file_label(path);
    let Some(linked) = lstat(path)? else {
        return Err(PolicyStoreError::FileMissing { name });
    };
    if linked.file_type().is_symlink() {
        return Err(PolicyStoreError::FileSymlink { name });
    }
    // A FIFO or device would block or stream on open; refuse it before opening.
    check_file_metadata(&linked, &name, uid)?;
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PolicyStoreError::FileMissing { name });
        }
        Err(e) => return Err(PolicyStoreError::io("open a policy file")(e)),
    };
    let before = file
        .metadata()
        .map_err(PolicyStoreError::io("inspect an open policy file"))?;
    if identity(&before) != identity(&linked) {
        return Err(PolicyStoreError::FileChanged);
    }
    check_file_metadata(&before, &name, uid)?;
    if before.len() > MAX_POLICY_FILE_BYTES {
        return Err(PolicyStoreError::FileTooLarge);
    }
    let bytes = match read_bounded_file(&mut file, path, MAX_POLICY_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge { .. }) => return Err(PolicyStoreError::FileTooLarge),
        Err(ReadError::NotRegularFile { .. }) => {
            return Err(PolicyStoreError::FileNotRegular { name });
        }
        Err(ReadError::Io { source, .. }) => {
            return Err(PolicyStoreError::io("read a policy file")(source));
        }
        Err(other) => {
            return Err(PolicyStoreError::io("read a policy file")(
                io::Error::other(other),
            ));
        }
    };
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let after = file
        .metadata()
        .map_err(PolicyStoreError::io("inspect an open policy file"))?;
    if before.len() != after.len()
        || (before.mtime(), before.mtime_nsec()) != (after.mtime(), after.mtime_nsec())
        || read != after.len()
    {
        return Err(PolicyStoreError::FileChanged);
    }
    Ok(bytes)
}

/// Loads and authenticates one policy file: strict UTF-8, strict JSON without duplicate keys,
/// an object, a valid policy, exactly its canonical bytes, and (for a snapshot) the digest its
/// name announces.
fn load_policy_file(
    path: &Path,
    expected_digest: Option<&str>,
    uid: u32,
) -> Result<(InstallConsentPolicy, Vec<u8>)> {
    let encoded = read_policy_file(path, uid)?;
    let name = file_label(path);
    let Ok(text) = std::str::from_utf8(&encoded) else {
        return Err(PolicyStoreError::NotUtf8 { name });
    };
    let decoded = match Json::parse(text) {
        Ok(value) => value,
        Err(JsonError::DuplicateKey { key }) => return Err(PolicyStoreError::DuplicateKey { key }),
        Err(_) => return Err(PolicyStoreError::InvalidJson { name }),
    };
    if decoded.as_obj().is_none() {
        return Err(PolicyStoreError::NotAnObject);
    }
    let policy = InstallConsentPolicy::from_json(&decoded)?;
    if encoded != policy.canonical_text().as_bytes() {
        return Err(PolicyStoreError::NotCanonical);
    }
    if expected_digest.is_some_and(|d| d != policy.policy_digest()) {
        return Err(PolicyStoreError::SnapshotNameMismatch);
    }
    Ok((policy, encoded))
}

/// Atomically replaces `path` with `bytes` (ctx-fs `write_durable_with_temp`): a fresh 0600
/// temporary in the same directory, written and fsynced, renamed over `path`, then the
/// directory fsynced. A failed attempt removes its temporary.
fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let Some(dir) = path.parent() else {
        return Err(PolicyStoreError::FilesystemRoot);
    };
    let temp = dir.join(format!(".{}.tmp-{}", file_label(path), fresh_suffix()));
    write_durable_with_temp(path, &temp, bytes, FILE_MODE).map_err(|e| match e {
        WriteError::Io { action, source, .. } => PolicyStoreError::io(match action {
            "removed (a leftover temporary file)" => "create a temporary policy file",
            "opened" | "synced" => "fsync a policy store directory",
            _ => "write a policy file",
        })(source),
        WriteError::NoParent { .. } => PolicyStoreError::FilesystemRoot,
        other => PolicyStoreError::io("write a policy file")(io::Error::other(other)),
    })
}

/// The uid this process gives the directories it creates (module docs): a fresh probe
/// directory is created in `dir`, inspected and removed.
fn probe_uid(dir: &Path, stem: &std::ffi::OsStr) -> Result<u32> {
    for _ in 0..FRESH_NAME_ATTEMPTS {
        let mut name = OsString::from(".");
        name.push(stem);
        name.push(format!(".owner-probe-{}", fresh_suffix()));
        let probe = dir.join(name);
        match fs::DirBuilder::new().mode(DIR_MODE).create(&probe) {
            Ok(()) => {
                let meta = fs::symlink_metadata(&probe);
                let removed = fs::remove_dir(&probe);
                let meta = meta.map_err(PolicyStoreError::io("inspect the owner probe"))?;
                removed.map_err(PolicyStoreError::io("remove the owner probe"))?;
                if !meta.file_type().is_dir() {
                    return Err(PolicyStoreError::io("inspect the owner probe")(
                        io::Error::other("the owner probe was replaced"),
                    ));
                }
                return Ok(meta.uid());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(PolicyStoreError::io("create the owner probe")(e)),
        }
    }
    Err(PolicyStoreError::io("create the owner probe")(
        io::ErrorKind::AlreadyExists.into(),
    ))
}

/// The held lock (a ctx-fs [`DirLock`]): released (and its descriptor closed) on drop.
#[derive(Debug)]
struct PolicyLock {
    _lock: DirLock,
}

/// Where the store's files are and whose they must be; what a held policy re-reads with.
#[derive(Debug, Clone)]
struct Layout {
    root: PathBuf,
    uid: u32,
}

impl Layout {
    fn snapshots(&self) -> PathBuf {
        self.root.join(SNAPSHOTS_DIR)
    }

    fn current(&self) -> PathBuf {
        self.root.join(CURRENT_FILE)
    }

    fn snapshot(&self, digest: &str) -> PathBuf {
        self.snapshots().join(format!("{digest}.json"))
    }

    /// The root's identity; a vanished root is a changed store.
    fn root_identity(&self) -> Result<Identity> {
        if lstat(&self.root)?.is_none() {
            return Err(PolicyStoreError::StoreIdentityChanged);
        }
        validate_directory(&self.root, ROOT_LABEL, self.uid).map(|m| identity(&m))
    }

    /// Creates or validates the root and `snapshots/` for a write.
    fn prepare_for_write(&self) -> Result<()> {
        reject_symlink_path(&self.root)?;
        ensure_directory(&self.root, ROOT_LABEL, self.uid)?;
        ensure_directory(&self.snapshots(), SNAPSHOTS_LABEL, self.uid)?;
        Ok(())
    }

    /// Validates an existing store: a private root, and a private `snapshots/` unless nothing
    /// was ever selected.
    fn validate_existing(&self) -> Result<()> {
        reject_symlink_path(&self.root)?;
        validate_directory(&self.root, ROOT_LABEL, self.uid)?;
        let snapshots = self.snapshots();
        if lstat(&snapshots)?.is_none() {
            if lstat(&self.current())?.is_none() {
                return Ok(());
            }
            return Err(PolicyStoreError::MissingSnapshotsDirectory);
        }
        validate_directory(&snapshots, SNAPSHOTS_LABEL, self.uid)?;
        Ok(())
    }

    /// The selected policy (the safe default when none is selected), authenticated against its
    /// snapshot. The caller holds the lock.
    fn load_current_unlocked(&self) -> Result<InstallConsentPolicy> {
        self.validate_existing()?;
        let current = self.current();
        if lstat(&current)?.is_none() {
            return Ok(InstallConsentPolicy::safe_default());
        }
        let (policy, encoded) = load_policy_file(&current, None, self.uid)?;
        let digest = policy.policy_digest();
        let snapshot = self.snapshot(&digest);
        if lstat(&snapshot)?.is_none() {
            return Err(PolicyStoreError::MissingSnapshot);
        }
        let (snapshot_policy, snapshot_encoded) =
            load_policy_file(&snapshot, Some(&digest), self.uid)?;
        if snapshot_policy != policy || snapshot_encoded != encoded {
            return Err(PolicyStoreError::SnapshotMismatch);
        }
        Ok(policy)
    }
}

/// A handle on one policy store root. Every read and write takes the store's exclusive lock
/// (waiting up to [`LOCK_WAIT`]), so handles in one process, threads and other processes all
/// exclude one another. The handle itself holds no open file.
#[derive(Debug)]
pub struct InstallPolicyStore {
    root: PathBuf,
    parent: PathBuf,
    root_name: OsString,
    lock_path: PathBuf,
    lock_wait: Duration,
    uid: OnceLock<u32>,
}

impl InstallPolicyStore {
    /// A handle on `root`, which must be absolute, free of `..` and not a filesystem root.
    /// Nothing is touched on disk.
    pub fn new(root: &Path) -> Result<InstallPolicyStore> {
        if !root.is_absolute() || root.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(PolicyStoreError::RootNotAbsolute);
        }
        let root: PathBuf = root.components().collect();
        let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
            return Err(PolicyStoreError::FilesystemRoot);
        };
        let mut lock_name = OsString::from(".");
        lock_name.push(name);
        lock_name.push(LOCK_SUFFIX);
        Ok(InstallPolicyStore {
            parent: parent.to_path_buf(),
            root_name: name.to_os_string(),
            lock_path: parent.join(lock_name),
            root,
            lock_wait: LOCK_WAIT,
            uid: OnceLock::new(),
        })
    }

    /// `$HOME/.ctx/install-policy`, when `HOME` names an absolute directory.
    pub fn default_root() -> Option<PathBuf> {
        let home = PathBuf::from(std::env::var_os("HOME")?);
        home.is_absolute().then(|| home.join(DEFAULT_ROOT_RELATIVE))
    }

    /// The same handle with another lock wait (tests; hosts that prefer failing fast).
    pub fn with_lock_wait(mut self, wait: Duration) -> InstallPolicyStore {
        self.lock_wait = wait;
        self
    }

    /// The normalized root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lock file `<parent of root>/.<root name>.policy-current`.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    fn current_uid(&self) -> Result<u32> {
        if let Some(uid) = self.uid.get() {
            return Ok(*uid);
        }
        let uid = probe_uid(&self.parent, &self.root_name)?;
        Ok(*self.uid.get_or_init(|| uid))
    }

    fn layout(&self) -> Result<Layout> {
        Ok(Layout {
            root: self.root.clone(),
            uid: self.current_uid()?,
        })
    }

    /// Makes sure the lock's directory exists (created 0700 when absent) and is no link.
    fn prepare_lock_parent(&self) -> Result<()> {
        reject_symlink_path(&self.parent)?;
        if lstat(&self.parent)?.is_none() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(&self.parent)
                .map_err(PolicyStoreError::io("create the policy root parent"))?;
            fs::set_permissions(&self.parent, fs::Permissions::from_mode(DIR_MODE)).map_err(
                PolicyStoreError::io("set the mode of the policy root parent"),
            )?;
        }
        if !lstat(&self.parent)?.is_some_and(|m| m.file_type().is_dir()) {
            return Err(PolicyStoreError::NotADirectory {
                label: PARENT_LABEL,
            });
        }
        Ok(())
    }

    /// Takes the exclusive lock, polling every [`LOCK_POLL`] up to the handle's wait. The lock
    /// file (created 0600 when absent, never through a link) must be a regular file with one
    /// link, mode 0600, owned by this user, and still named by its path once locked.
    fn acquire(&self) -> Result<PolicyLock> {
        let uid = self.current_uid()?;
        let path = &self.lock_path;
        if lstat(path)?.is_some_and(|meta| !meta.file_type().is_file()) {
            return Err(PolicyStoreError::LockIntegrity);
        }
        let options = LockOptions::new(self.lock_wait)
            .poll(LOCK_POLL, LOCK_POLL)
            .self_held_grace(Duration::ZERO);
        let lock = match DirLock::acquire(path, &options) {
            Ok(lock) => lock,
            Err(LockError::Held { .. }) => {
                return Err(PolicyStoreError::LockTimeout {
                    millis: self.lock_wait.as_millis(),
                });
            }
            Err(LockError::Unsafe { .. }) => return Err(PolicyStoreError::LockIntegrity),
            Err(LockError::Io {
                action: "locked",
                source,
                ..
            }) => return Err(PolicyStoreError::io("lock the policy lock file")(source)),
            Err(LockError::Io { source, .. }) => {
                return Err(PolicyStoreError::io("open the policy lock file")(source));
            }
            Err(other) => {
                return Err(PolicyStoreError::io("lock the policy lock file")(
                    io::Error::other(other),
                ));
            }
        };
        let opened = lock
            .file()
            .metadata()
            .map_err(PolicyStoreError::io("inspect the policy lock file"))?;
        if !opened.file_type().is_file()
            || opened.nlink() != 1
            || opened.mode() & PERMISSION_BITS != FILE_MODE
            || opened.uid() != uid
        {
            return Err(PolicyStoreError::LockIntegrity);
        }
        match fs::symlink_metadata(path) {
            Ok(named) if identity(&named) == identity(&opened) => Ok(PolicyLock { _lock: lock }),
            _ => Err(PolicyStoreError::LockChanged),
        }
    }

    /// Writes the policy's immutable snapshot (or verifies the one present) and atomically
    /// selects it as current. Returns the policy digest.
    pub fn persist(&self, policy: &InstallConsentPolicy) -> Result<String> {
        self.prepare_lock_parent()?;
        let _lock = self.acquire()?;
        let layout = self.layout()?;
        layout.prepare_for_write()?;
        let encoded = policy.canonical_text();
        let digest = policy.policy_digest();
        let snapshot = layout.snapshot(&digest);
        if lstat(&snapshot)?.is_none() {
            atomic_write(&snapshot, encoded.as_bytes())?;
        } else {
            let (existing, existing_encoded) =
                load_policy_file(&snapshot, Some(&digest), layout.uid)?;
            if existing != *policy || existing_encoded != encoded.as_bytes() {
                return Err(PolicyStoreError::SnapshotContentChanged);
            }
        }
        validate_private_file(&snapshot, layout.uid)?;
        let current = layout.current();
        atomic_write(&current, encoded.as_bytes())?;
        validate_private_file(&current, layout.uid)?;
        Ok(digest)
    }

    /// The selected policy, authenticated against its snapshot; the safe default when the root
    /// or `current.json` is absent (an absent root is not created and not locked).
    pub fn load_current(&self) -> Result<InstallConsentPolicy> {
        if lstat(&self.root)?.is_none() {
            return Ok(InstallConsentPolicy::safe_default());
        }
        reject_symlink_path(&self.root)?;
        let _lock = self.acquire()?;
        self.layout()?.load_current_unlocked()
    }

    /// Whether a valid, snapshot-backed current policy exists. A store that exists but fails
    /// validation is an error, not `false`.
    pub fn has_persisted(&self) -> Result<bool> {
        if lstat(&self.root)?.is_none() {
            return Ok(false);
        }
        reject_symlink_path(&self.root)?;
        let _lock = self.acquire()?;
        let layout = self.layout()?;
        layout.validate_existing()?;
        if lstat(&layout.current())?.is_none() {
            return Ok(false);
        }
        layout.load_current_unlocked()?;
        Ok(true)
    }

    /// Pins the current policy, which must have `expected_digest`, and keeps the lock until the
    /// returned value is dropped, so no write through any handle can land meanwhile. While it is
    /// held, every other operation on this root (through this handle too) waits for it.
    pub fn hold(&self, expected_digest: &str) -> Result<HeldInstallPolicy> {
        if !is_sha(expected_digest) {
            return Err(PolicyStoreError::ExpectedDigest);
        }
        if lstat(&self.root)?.is_none() {
            return Err(PolicyStoreError::NothingPersisted);
        }
        reject_symlink_path(&self.root)?;
        let lock = self.acquire()?;
        let layout = self.layout()?;
        let root_identity = layout.root_identity()?;
        let policy = layout.load_current_unlocked()?;
        if policy.policy_digest() != expected_digest {
            return Err(PolicyStoreError::PolicyChanged);
        }
        let held = HeldInstallPolicy {
            policy,
            layout,
            root_identity,
            _lock: lock,
        };
        held.assert_current()?;
        Ok(held)
    }
}

/// A policy pinned under the store lock (reference `HeldInstallConsentPolicy`). The lock is
/// released when this value is dropped.
#[derive(Debug)]
pub struct HeldInstallPolicy {
    policy: InstallConsentPolicy,
    layout: Layout,
    root_identity: Identity,
    _lock: PolicyLock,
}

impl HeldInstallPolicy {
    pub fn policy(&self) -> &InstallConsentPolicy {
        &self.policy
    }

    pub fn policy_digest(&self) -> String {
        self.policy.policy_digest()
    }

    /// Re-reads the store: the root must still be the directory held (else "install policy
    /// store identity changed") and the selected policy the one held (else "current install
    /// policy snapshot changed"). Call it immediately before committing what the policy allowed.
    pub fn assert_current(&self) -> Result<()> {
        let before = self.layout.root_identity()?;
        if before != self.root_identity {
            return Err(PolicyStoreError::StoreIdentityChanged);
        }
        let current = self.layout.load_current_unlocked()?;
        let after = self.layout.root_identity()?;
        if before != after || after != self.root_identity || current != self.policy {
            return Err(PolicyStoreError::PolicyChanged);
        }
        Ok(())
    }
}
