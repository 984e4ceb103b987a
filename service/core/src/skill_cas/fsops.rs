//! Descriptor-relative filesystem primitives of the skill CAS (spec/skill-cas.md §7): inspection of
//! a child as exact UTF-8 material, exclusive stage creation, exclusive hard-link publication,
//! identity-checked unlink, stage enumeration, directory fsync and the per-content lock.
//!
//! Every call names a child of the pinned root through the root's descriptor (`openat`,
//! `statat(AT_SYMLINK_NOFOLLOW)`, `linkat` without `AT_SYMLINK_FOLLOW`, `unlinkat`), so a path
//! swap above the root cannot redirect an operation, and no call follows a symbolic link.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{ErrorKind, Write as _};
use std::ops::RangeInclusive;
use std::time::Duration;

use ctx_fs::{
    DirLock, FILE_MODE_PRIVATE, FileId, FileStat, LockError, LockOptions, ReadError, SyncError,
    fsync_dir_fd, read_bounded_file,
};
use ctx_model::{is_sha, sha256_hex_bytes};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::error::{SkillCasError, fs_conflict, fs_error, invalid, io, os};
use super::root::PinnedDir;

/// Mode of every stage and published file.
pub(crate) const FILE_MODE: u32 = FILE_MODE_PRIVATE;
/// Link counts tolerated while recovering: the final name plus up to 64 stage aliases.
pub(crate) const TOLERATED_LINKS: RangeInclusive<u64> = 1..=65;
/// A name that must be the only link to its file.
pub(crate) const SINGLE_LINK: RangeInclusive<u64> = 1..=1;
/// The two names of a file just hard-linked into place.
pub(crate) const PUBLISHED_PAIR: RangeInclusive<u64> = 2..=2;
/// Most recovery stages one content address may have.
pub const STAGE_LIMIT: usize = 64;
/// Suffix of every stage name.
pub const STAGE_SUFFIX: &str = ".pending";
/// Bounded wait for the per-content lock, in milliseconds.
pub const CONTENT_LOCK_WAIT_MAX_MS: u64 = 30_000;
/// Bounded wait for the per-content lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_millis(CONTENT_LOCK_WAIT_MAX_MS);
/// Poll interval of the per-content lock, in milliseconds.
const CONTENT_LOCK_POLL_MS: u64 = 10;

const CHILD_READ_FAILED: &str = "skill store child read failed";
const DIRECTORY_DURABILITY: &str = "skill store directory durability failed";
const STAGING_WRITE_FAILED: &str = "skill store staging write failed";
const SOURCE_CHANGED: &str = "skill store source changed before publication";
const PUBLICATION_FAILED: &str = "skill store publication failed";
const PUBLICATION_AMBIGUOUS: &str = "skill store publication identity is ambiguous";
const LOCK_UNAVAILABLE: &str = "skill store content lock is unavailable";
const LOCK_UNSAFE: &str = "skill store content lock is unsafe";

/// `Mode` 0600 (built from flags: the raw mode type differs between platforms).
fn owner_rw() -> Mode {
    Mode::RUSR | Mode::WUSR
}

/// "Safe regular": a regular file (not a link) owned by `euid`, mode exactly 0600, with a link
/// count in `links`.
fn safe_regular(snap: &FileStat, euid: u32, links: &RangeInclusive<u64>) -> bool {
    snap.is_regular()
        && snap.uid == euid
        && snap.permissions() == FILE_MODE
        && links.contains(&snap.nlink)
}

/// Safe regular with exactly one link: may be deleted whatever its content.
fn safely_removable(snap: &FileStat, euid: u32) -> bool {
    safe_regular(snap, euid, &SINGLE_LINK)
}

/// The content a name must hold to be exact.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'a> {
    pub(crate) sha256: &'a str,
    pub(crate) bytes: u64,
}

/// What an inspection found at a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inspection {
    /// No entry.
    Absent,
    /// A safe regular file holding exactly the expected UTF-8 bytes.
    Exact { id: FileId, nlink: u64 },
    /// Anything else. `removable` is true only for a safe regular file with one link whose
    /// snapshots stayed the same (wrong content, but safe to delete).
    Conflict {
        id: FileId,
        nlink: u64,
        removable: bool,
    },
}

impl Inspection {
    pub(crate) fn exact_id(&self) -> Option<FileId> {
        match self {
            Inspection::Exact { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// The child name rule: non-empty, not `.` or `..`, no `/` or `\`.
fn check_child_name(name: &str) -> Result<(), SkillCasError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        return Err(invalid("unsafe skill store child name"));
    }
    Ok(())
}

/// Inspects `name` as exact UTF-8 material (spec/skill-cas.md §7); `durable` fsyncs the file.
/// Whether an inspection makes the file's content durable.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Durability<'a> {
    /// Read only.
    No,
    /// fsync the file, unless it is one of these files, already fsynced by this driver (a file's
    /// content is durable once synced; syncing the same inode again adds nothing).
    Unless(&'a BTreeSet<FileId>),
}

pub(crate) fn inspect(
    dir: &PinnedDir,
    name: &str,
    expected: Expected<'_>,
    links: &RangeInclusive<u64>,
    durability: Durability<'_>,
) -> Result<Inspection, SkillCasError> {
    check_child_name(name)?;
    let euid = dir.euid();
    let before = match FileStat::at(dir.fd(), name) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => return Ok(Inspection::Absent),
        Err(e) => return Err(fs_error("skill store child cannot be inspected", e)),
    };
    let conflict = |snap: &FileStat, removable: bool| Inspection::Conflict {
        id: snap.id(),
        nlink: snap.nlink,
        removable: removable && safely_removable(snap, euid),
    };
    if !safe_regular(&before, euid, links) {
        return Ok(conflict(&before, true));
    }
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(os(CHILD_READ_FAILED))?;
    let opened = FileStat::of_fd(&fd).map_err(os(CHILD_READ_FAILED))?;
    if opened != before || !safe_regular(&opened, euid, links) {
        return Ok(conflict(&before, false));
    }
    let mut file = File::from(fd);
    // A file longer than expected is read no further and is not exact (`None`).
    let content = match read_bounded_file(&mut file, &dir.path().join(name), expected.bytes) {
        Ok(content) => Some(content),
        Err(ReadError::TooLarge { .. }) => None,
        Err(ReadError::Io { source, .. }) => return Err(fs_error(CHILD_READ_FAILED, source)),
        Err(e) => return Err(fs_error(CHILD_READ_FAILED, std::io::Error::other(e))),
    };
    if let Durability::Unless(synced) = durability
        && !synced.contains(&opened.id())
    {
        file.sync_all().map_err(io(CHILD_READ_FAILED))?;
    }
    let after_handle = FileStat::of_fd(&file).map_err(os(CHILD_READ_FAILED))?;
    let after_path = match FileStat::at(dir.fd(), name) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => {
            return Err(fs_error(
                "skill store child changed while read",
                Errno::NOENT,
            ));
        }
        Err(e) => return Err(fs_error(CHILD_READ_FAILED, e)),
    };
    drop(file);
    let stable = after_handle == before && after_path == before;
    if !stable || !safe_regular(&after_path, euid, links) {
        return Ok(conflict(&after_path, false));
    }
    let exact = content.is_some_and(|content| {
        std::str::from_utf8(&content).is_ok()
            && u64::try_from(content.len()).is_ok_and(|n| n == expected.bytes)
            && sha256_hex_bytes(&content) == expected.sha256
    });
    if exact {
        Ok(Inspection::Exact {
            id: before.id(),
            nlink: before.nlink,
        })
    } else {
        Ok(conflict(&before, true))
    }
}

/// Creates the stage `name` exclusively with `body`, fsyncs it and authenticates it
/// (spec/skill-cas.md §7). The directory is not fsynced here: recovery does that before publishing.
pub(crate) fn create_stage(
    dir: &PinnedDir,
    name: &str,
    body: &[u8],
    expected: Expected<'_>,
) -> Result<FileId, SkillCasError> {
    check_child_name(name)?;
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        owner_rw(),
    )
    .map_err(|e| {
        if e == Errno::EXIST {
            fs_conflict("skill store staging address is occupied")
        } else {
            fs_error(STAGING_WRITE_FAILED, e)
        }
    })?;
    rustix::fs::fchmod(&fd, owner_rw()).map_err(os(STAGING_WRITE_FAILED))?;
    let mut file = File::from(fd);
    write_all(&mut file, body)?;
    file.sync_all().map_err(io(STAGING_WRITE_FAILED))?;
    let snap = FileStat::of_fd(&file).map_err(os(STAGING_WRITE_FAILED))?;
    drop(file);
    let size_matches = u64::try_from(snap.size).ok() == u64::try_from(body.len()).ok();
    if !safe_regular(&snap, dir.euid(), &SINGLE_LINK) || !size_matches {
        return Err(fs_conflict("skill store stage metadata is invalid"));
    }
    match inspect(dir, name, expected, &SINGLE_LINK, Durability::No)? {
        Inspection::Exact { id, .. } if id == snap.id() => Ok(id),
        _ => Err(fs_conflict("skill store stage could not be authenticated")),
    }
}

/// Writes all of `bytes`; a write that makes no progress is an OS error.
fn write_all(file: &mut File, mut bytes: &[u8]) -> Result<(), SkillCasError> {
    while !bytes.is_empty() {
        match file.write(bytes) {
            Ok(0) => {
                return Err(fs_error(
                    STAGING_WRITE_FAILED,
                    std::io::Error::new(
                        ErrorKind::WriteZero,
                        "skill store staging write made no progress",
                    ),
                ));
            }
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(fs_error(STAGING_WRITE_FAILED, e)),
        }
    }
    Ok(())
}

/// Whether an exclusive publication created the destination name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    Created,
    /// The destination already existed (a collision, or a link an earlier attempt completed).
    NotCreated,
}

/// Hard-links `source` to `destination` without ever replacing it (spec/skill-cas.md §7).
pub(crate) fn publish(
    dir: &PinnedDir,
    source: &str,
    destination: &str,
    expected: FileId,
) -> Result<Published, SkillCasError> {
    check_child_name(source)?;
    check_child_name(destination)?;
    let euid = dir.euid();
    let src = match FileStat::at(dir.fd(), source) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => return Err(fs_conflict(SOURCE_CHANGED)),
        Err(e) => return Err(fs_error(PUBLICATION_FAILED, e)),
    };
    if src.id() != expected {
        return Err(fs_conflict(SOURCE_CHANGED));
    }
    if !safe_regular(&src, euid, &SINGLE_LINK) {
        let dst = match FileStat::at(dir.fd(), destination) {
            Ok(snap) => snap,
            Err(Errno::NOENT) => return Err(fs_conflict(SOURCE_CHANGED)),
            Err(e) => {
                return Err(fs_error(
                    "skill store publication collision cannot be inspected",
                    e,
                ));
            }
        };
        if dst.id() == expected
            && safe_regular(&src, euid, &TOLERATED_LINKS)
            && safe_regular(&dst, euid, &TOLERATED_LINKS)
        {
            return Ok(Published::NotCreated);
        }
        return Err(fs_conflict(SOURCE_CHANGED));
    }
    match rustix::fs::linkat(dir.fd(), source, dir.fd(), destination, AtFlags::empty()) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(Published::NotCreated),
        Err(e) => return Err(fs_error(PUBLICATION_FAILED, e)),
    }
    for name in [source, destination] {
        let snap = match FileStat::at(dir.fd(), name) {
            Ok(snap) => snap,
            Err(Errno::NOENT) => return Err(fs_conflict(PUBLICATION_AMBIGUOUS)),
            Err(e) => return Err(fs_error(PUBLICATION_FAILED, e)),
        };
        if snap.id() != expected || !safe_regular(&snap, euid, &PUBLISHED_PAIR) {
            return Err(fs_conflict(PUBLICATION_AMBIGUOUS));
        }
    }
    fsync_dir_fd(dir.fd(), dir.path()).map_err(durability_error)?;
    Ok(Published::Created)
}

/// Unlinks `name` only if it is still the file `expected` (safe regular, link count in `links`)
/// (spec/skill-cas.md §7). The directory is not fsynced here: a lost unlink of a
/// stage leaves a stage alias or a removable stage, which the next recovery removes again;
/// [`verify_absent`](super::recovery) syncs the directory when a pass removed anything.
pub(crate) fn unlink_if_identity(
    dir: &PinnedDir,
    name: &str,
    expected: FileId,
    links: &RangeInclusive<u64>,
) -> Result<(), SkillCasError> {
    check_child_name(name)?;
    let snap = match FileStat::at(dir.fd(), name) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => {
            return Err(fs_conflict("skill store child disappeared before cleanup"));
        }
        Err(e) => return Err(fs_error("skill store child cleanup check failed", e)),
    };
    if snap.id() != expected || !safe_regular(&snap, dir.euid(), links) {
        return Err(fs_conflict("skill store child changed before cleanup"));
    }
    rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty())
        .map_err(os("skill store child cleanup failed"))
}

/// The names `prefix` + 64 lowercase hex + `suffix` in the directory, sorted. More than `limit`
/// is a conflict (spec/skill-cas.md §2: "skill store has too many recovery stages").
pub(crate) fn list_stages(
    dir: &PinnedDir,
    prefix: &str,
    suffix: &str,
    limit: usize,
) -> Result<Vec<String>, SkillCasError> {
    if prefix.is_empty() || suffix.is_empty() || limit == 0 {
        return Err(invalid("invalid stage enumeration contract"));
    }
    const ENUMERATE: &str = "skill store cannot enumerate recovery stages";
    let entries = rustix::fs::Dir::read_from(dir.fd()).map_err(os(ENUMERATE))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(os(ENUMERATE))?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        let is_stage = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .is_some_and(is_sha);
        if is_stage {
            if names.len() >= limit {
                return Err(fs_conflict("skill store has too many recovery stages"));
            }
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// `map_err` helper: a failed sync of the pinned directory (ctx-fs `fsync_dir_fd`).
pub(crate) fn durability_error(e: SyncError) -> SkillCasError {
    match e {
        SyncError::Io { source, .. } => fs_error(DIRECTORY_DURABILITY, source),
        other => fs_error(DIRECTORY_DURABILITY, std::io::Error::other(other)),
    }
}

/// The exclusive per-content lock (a ctx-fs [`DirLock`]); released when dropped. The lock file
/// itself is never removed: removing a lock file races with a waiter that has it open.
#[derive(Debug)]
pub(crate) struct ContentLock {
    _lock: DirLock,
}

/// Takes the exclusive `flock` on `<root>/<name>`, polling every 10 ms for at most
/// [`LOCK_TIMEOUT`]. The lock file is opened relative to the pinned root, never through a link,
/// and must be a regular file of this user closed to others.
pub(crate) fn lock_content(dir: &PinnedDir, name: &str) -> Result<ContentLock, SkillCasError> {
    check_child_name(name)?;
    let poll = Duration::from_millis(CONTENT_LOCK_POLL_MS);
    let options = LockOptions::new(LOCK_TIMEOUT)
        .poll(poll, poll)
        .self_held_grace(Duration::ZERO);
    match DirLock::acquire_at(dir.fd(), name, &dir.path().join(name), &options) {
        Ok(lock) => Ok(ContentLock { _lock: lock }),
        Err(LockError::Unsafe { .. }) => Err(fs_conflict(LOCK_UNSAFE)),
        Err(LockError::Held { .. }) => Err(SkillCasError::FilesystemError {
            message: "skill store content lock timed out",
            source: None,
        }),
        Err(LockError::Io { source, .. }) => Err(fs_error(LOCK_UNAVAILABLE, source)),
        Err(e) => Err(fs_error(LOCK_UNAVAILABLE, std::io::Error::other(e))),
    }
}
