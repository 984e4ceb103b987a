//! Root identity (spec/skill-cas.md §3): capture of the owner-private store root, ancestry
//! protection, the target identity digest, and the pinned directory every operation works through.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use ctx_model::{Json, cj_digest};
use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

use super::error::{Cause, SkillCasError, fs_conflict, fs_error, os};
use ctx_fs::{DIR_MODE_PRIVATE, FileStat, MODE_GROUP_OTHER_WRITE, S_IFDIR, S_ISVTX, effective_uid};

/// Schema of the target identity document.
pub const TARGET_IDENTITY_SCHEMA: &str = "ctx.skill-cas-target-v2";

const ROOT_NOT_PRIVATE: &str = "skill store root must be owner-private";
const ROOT_UNAUTHENTICATED: &str = "skill store root cannot be authenticated";
const ROOT_CHANGED_WHILE_OPENED: &str = "skill store changed while it was opened";
const ANCESTOR_NOT_DIRECTORY: &str = "skill store ancestor is not a real directory";
const ANCESTOR_UNTRUSTED_OWNER: &str = "skill store ancestor has an untrusted owner";
const ANCESTOR_UNSAFE_RENAME: &str = "skill store ancestor permits unsafe rename";
const TARGET_CHANGED: &str = "skill store target identity changed";
const DIRECTORY_OPERATION_FAILED: &str = "skill store directory operation failed";
const ROOT_ENCODING: &str = "skill store root identity cannot be encoded";

/// The identity of the store root: its canonical path and `(device, inode)`. Equality compares
/// all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootIdentity {
    canonical_root: PathBuf,
    /// The canonical path as text (the target identity document needs a string).
    canonical_text: String,
    device: u64,
    inode: u64,
}

impl RootIdentity {
    pub(crate) fn canonical_root(&self) -> &Path {
        &self.canonical_root
    }

    /// `H(CJ({canonical_root, device, inode, schema}))`: UTF-8 canonical JSON, non-ASCII raw
    /// (the reference's `ensure_ascii=False`).
    pub(crate) fn target_identity_digest(&self) -> Result<String, SkillCasError> {
        let (Ok(device), Ok(inode)) = (i64::try_from(self.device), i64::try_from(self.inode))
        else {
            return Err(SkillCasError::FilesystemUnsupported {
                message: ROOT_ENCODING,
            });
        };
        Ok(cj_digest(&Json::object([
            ("canonical_root", Json::str(&self.canonical_text)),
            ("device", Json::Int(device)),
            ("inode", Json::Int(inode)),
            ("schema", Json::str(TARGET_IDENTITY_SCHEMA)),
        ])))
    }
}

/// Captures the root identity of `root` (spec/skill-cas.md §3). Errors are the filesystem
/// classes; callers wrap them in their own sentence.
pub(crate) fn capture(root: &Path) -> Result<RootIdentity, SkillCasError> {
    let canonical = std::fs::canonicalize(root).map_err(|e| fs_error(ROOT_UNAUTHENTICATED, e))?;
    let (identity, _fd) = open_root(&canonical)?;
    Ok(identity)
}

/// Opens the canonical root, checks it is owner-private with protected ancestry and that the
/// path still names the opened directory; returns its identity and the open descriptor.
fn open_root(canonical: &Path) -> Result<(RootIdentity, OwnedFd), SkillCasError> {
    let Some(text) = canonical.to_str() else {
        return Err(SkillCasError::FilesystemUnsupported {
            message: ROOT_ENCODING,
        });
    };
    if !canonical.is_absolute() {
        return Err(SkillCasError::FilesystemError {
            message: ROOT_UNAUTHENTICATED,
            source: None,
        });
    }
    let fd = open_directory(canonical).map_err(os(ROOT_UNAUTHENTICATED))?;
    let opened = FileStat::of_fd(&fd).map_err(os(ROOT_UNAUTHENTICATED))?;
    let euid = effective_uid();
    check_owner_private(&opened, euid)?;
    check_ancestry(canonical, euid)?;
    let by_path = FileStat::at(CWD, canonical).map_err(os(ROOT_UNAUTHENTICATED))?;
    if !by_path.is_dir() || by_path.id() != opened.id() {
        return Err(fs_conflict(ROOT_CHANGED_WHILE_OPENED));
    }
    let identity = RootIdentity {
        canonical_root: canonical.to_path_buf(),
        canonical_text: text.to_owned(),
        device: opened.dev,
        inode: opened.ino,
    };
    identity.target_identity_digest()?;
    Ok((identity, fd))
}

/// `open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`: never creates, never follows a
/// final symbolic link (intermediate components are covered by the ancestry check).
fn open_directory(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// A directory owned by the effective user with mode exactly 0700.
fn check_owner_private(snap: &FileStat, euid: u32) -> Result<(), SkillCasError> {
    if snap.is_dir() && snap.uid == euid && snap.permissions() == DIR_MODE_PRIVATE {
        Ok(())
    } else {
        Err(fs_conflict(ROOT_NOT_PRIVATE))
    }
}

/// Walks from the root's parent to `/`: each ancestor must be a real directory owned by root or
/// the effective user, and a group/other-writable ancestor must be sticky and the protected child
/// entry owned by root or the effective user — so no other user can rename the path away.
fn check_ancestry(canonical: &Path, euid: u32) -> Result<(), SkillCasError> {
    let trusted = |uid: u32| uid == 0 || uid == euid;
    let mut child = canonical;
    while let Some(parent) = child.parent() {
        let snap = FileStat::at(CWD, parent).map_err(os(ROOT_UNAUTHENTICATED))?;
        if snap.file_type() != S_IFDIR {
            return Err(fs_conflict(ANCESTOR_NOT_DIRECTORY));
        }
        if !trusted(snap.uid) {
            return Err(fs_conflict(ANCESTOR_UNTRUSTED_OWNER));
        }
        if snap.mode & MODE_GROUP_OTHER_WRITE != 0 {
            let child_snap = FileStat::at(CWD, child).map_err(os(ROOT_UNAUTHENTICATED))?;
            if snap.mode & S_ISVTX == 0 || !trusted(child_snap.uid) {
                return Err(fs_conflict(ANCESTOR_UNSAFE_RENAME));
            }
        }
        child = parent;
    }
    Ok(())
}

/// The store root opened for one operation: names-only access relative to its descriptor.
#[derive(Debug)]
pub(crate) struct PinnedDir {
    fd: OwnedFd,
    identity: RootIdentity,
    euid: u32,
}

impl PinnedDir {
    pub(crate) fn fd(&self) -> impl AsFd + '_ {
        self.fd.as_fd()
    }

    /// The pinned root's canonical path (names files in errors).
    pub(crate) fn path(&self) -> &Path {
        &self.identity.canonical_root
    }

    pub(crate) fn euid(&self) -> u32 {
        self.euid
    }

    /// Re-captures the root from its canonical path and requires the pinned identity.
    pub(crate) fn revalidate(&self) -> Result<(), SkillCasError> {
        if capture(&self.identity.canonical_root)? == self.identity {
            Ok(())
        } else {
            Err(fs_conflict(
                "skill store path no longer names the pinned root",
            ))
        }
    }
}

/// Opens the pinned directory (spec/skill-cas.md §3): owner-private,
/// the expected device and inode, protected ancestry.
fn open_pinned(expected: &RootIdentity) -> Result<PinnedDir, SkillCasError> {
    let fd = open_directory(&expected.canonical_root).map_err(os(DIRECTORY_OPERATION_FAILED))?;
    let snap = FileStat::of_fd(&fd).map_err(os(DIRECTORY_OPERATION_FAILED))?;
    let euid = effective_uid();
    check_owner_private(&snap, euid)?;
    if snap.dev != expected.device || snap.ino != expected.inode {
        return Err(fs_conflict(TARGET_CHANGED));
    }
    check_ancestry(&expected.canonical_root, euid)?;
    Ok(PinnedDir {
        fd,
        identity: expected.clone(),
        euid,
    })
}

/// Runs `body` with the pinned directory open. As in the reference, any error that is not one of
/// the filesystem classes — including the driver's own `SkillCasError`/`SkillCasConflict` raised
/// inside the scope — surfaces as `FilesystemError("skill store directory operation failed")`
/// with the original as its source; filesystem errors pass through unchanged.
pub(crate) fn with_pinned<T>(
    expected: &RootIdentity,
    body: impl FnOnce(&PinnedDir) -> Result<T, SkillCasError>,
) -> Result<T, SkillCasError> {
    let dir = open_pinned(expected)?;
    body(&dir).map_err(|e| {
        if e.is_filesystem() {
            e
        } else {
            SkillCasError::FilesystemError {
                message: DIRECTORY_OPERATION_FAILED,
                source: Some(Box::new(e) as Cause),
            }
        }
    })
}
