//! Descriptor-relative filesystem primitives of the skill CAS (spec/skill-cas.md §7): inspection of
//! a child as exact UTF-8 material, exclusive stage creation, exclusive hard-link publication,
//! identity-checked unlink, stage enumeration, directory fsync and the per-content lock.
//!
//! Every call names a child of the pinned root through the root's descriptor (`openat`,
//! `statat(AT_SYMLINK_NOFOLLOW)`, `linkat` without `AT_SYMLINK_FOLLOW`, `unlinkat`), so a path
//! swap above the root cannot redirect an operation, and no call follows a symbolic link.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{ErrorKind, Read as _, Write as _};
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use ctx_model::{is_sha, sha256_hex_bytes};
use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::error::{SkillCasError, fs_conflict, fs_error, invalid, io, os};
use super::root::PinnedDir;

pub(crate) const S_IFMT: u32 = 0o170_000;
pub(crate) const S_IFREG: u32 = 0o100_000;
pub(crate) const S_IFDIR: u32 = 0o040_000;
pub(crate) const S_ISVTX: u32 = 0o1_000;

/// Mode of every stage and published file.
pub(crate) const FILE_MODE: u32 = 0o600;
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
/// Read chunk of an inspection.
const READ_CHUNK: usize = 64 * 1024;
/// Bounded wait for the per-content lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval of the per-content lock.
const LOCK_POLL: Duration = Duration::from_millis(10);

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

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `(device, inode)`: which file a name denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

/// The fields of one `stat` the store compares: identity, type and permissions, owner, link
/// count, size and the modification and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snap {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) nlink: u64,
    pub(crate) size: i64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
}

impl Snap {
    /// The `stat` field types differ between platforms; every conversion here widens.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from_stat(st: &Stat) -> Snap {
        Snap {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            nlink: st.st_nlink as u64,
            size: st.st_size as i64,
            mtime_ns: i128::from(st.st_mtime as i64) * 1_000_000_000
                + i128::from(st.st_mtime_nsec as i64),
            ctime_ns: i128::from(st.st_ctime as i64) * 1_000_000_000
                + i128::from(st.st_ctime_nsec as i64),
        }
    }

    pub(crate) fn fstat(fd: impl AsFd) -> Result<Snap, Errno> {
        rustix::fs::fstat(fd).map(|st| Snap::from_stat(&st))
    }

    /// `fstatat(dirfd, path, AT_SYMLINK_NOFOLLOW)`.
    pub(crate) fn lstat(dirfd: impl AsFd, path: impl rustix::path::Arg) -> Result<Snap, Errno> {
        rustix::fs::statat(dirfd, path, AtFlags::SYMLINK_NOFOLLOW).map(|st| Snap::from_stat(&st))
    }

    pub(crate) fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }

    pub(crate) fn permissions(&self) -> u32 {
        self.mode & 0o7_777
    }

    pub(crate) fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }

    pub(crate) fn same_identity(&self, other: &Snap) -> bool {
        self.id() == other.id()
    }

    /// "Safe regular": a regular file (not a link) owned by `euid`, mode exactly 0600, with a
    /// link count in `links`.
    fn safe_regular(&self, euid: u32, links: &RangeInclusive<u64>) -> bool {
        self.file_type() == S_IFREG
            && self.uid == euid
            && self.permissions() == FILE_MODE
            && links.contains(&self.nlink)
    }

    /// Safe regular with exactly one link: may be deleted whatever its content.
    fn safely_removable(&self, euid: u32) -> bool {
        self.safe_regular(euid, &SINGLE_LINK)
    }
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
    let before = match Snap::lstat(dir.fd(), name) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => return Ok(Inspection::Absent),
        Err(e) => return Err(fs_error("skill store child cannot be inspected", e)),
    };
    let conflict = |snap: &Snap, removable: bool| Inspection::Conflict {
        id: snap.id(),
        nlink: snap.nlink,
        removable: removable && snap.safely_removable(euid),
    };
    if !before.safe_regular(euid, links) {
        return Ok(conflict(&before, true));
    }
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(os(CHILD_READ_FAILED))?;
    let opened = Snap::fstat(&fd).map_err(os(CHILD_READ_FAILED))?;
    if opened != before || !opened.safe_regular(euid, links) {
        return Ok(conflict(&before, false));
    }
    let mut file = File::from(fd);
    let content = read_bounded(&mut file, expected.bytes)?;
    if let Durability::Unless(synced) = durability
        && !synced.contains(&opened.id())
    {
        file.sync_all().map_err(io(CHILD_READ_FAILED))?;
    }
    let after_handle = Snap::fstat(&file).map_err(os(CHILD_READ_FAILED))?;
    let after_path = match Snap::lstat(dir.fd(), name) {
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
    if !stable || !after_path.safe_regular(euid, links) {
        return Ok(conflict(&after_path, false));
    }
    let exact = std::str::from_utf8(&content).is_ok()
        && u64::try_from(content.len()).is_ok_and(|n| n == expected.bytes)
        && sha256_hex_bytes(&content) == expected.sha256;
    if exact {
        Ok(Inspection::Exact {
            id: before.id(),
            nlink: before.nlink,
        })
    } else {
        Ok(conflict(&before, true))
    }
}

/// Reads at most `expected + 1` bytes in chunks of 64 KiB.
fn read_bounded(file: &mut File, expected: u64) -> Result<Vec<u8>, SkillCasError> {
    let limit = usize::try_from(expected.saturating_add(1)).unwrap_or(usize::MAX);
    let mut content = Vec::with_capacity(limit.min(READ_CHUNK));
    let mut chunk = vec![0u8; READ_CHUNK];
    while content.len() < limit {
        let want = (limit - content.len()).min(READ_CHUNK);
        match file.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => content.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(fs_error(CHILD_READ_FAILED, e)),
        }
    }
    Ok(content)
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
    let snap = Snap::fstat(&file).map_err(os(STAGING_WRITE_FAILED))?;
    drop(file);
    let size_matches = u64::try_from(snap.size).ok() == u64::try_from(body.len()).ok();
    if !snap.safe_regular(dir.euid(), &SINGLE_LINK) || !size_matches {
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
    let src = match Snap::lstat(dir.fd(), source) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => return Err(fs_conflict(SOURCE_CHANGED)),
        Err(e) => return Err(fs_error(PUBLICATION_FAILED, e)),
    };
    if src.id() != expected {
        return Err(fs_conflict(SOURCE_CHANGED));
    }
    if !src.safe_regular(euid, &SINGLE_LINK) {
        let dst = match Snap::lstat(dir.fd(), destination) {
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
            && src.safe_regular(euid, &TOLERATED_LINKS)
            && dst.safe_regular(euid, &TOLERATED_LINKS)
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
        let snap = match Snap::lstat(dir.fd(), name) {
            Ok(snap) => snap,
            Err(Errno::NOENT) => return Err(fs_conflict(PUBLICATION_AMBIGUOUS)),
            Err(e) => return Err(fs_error(PUBLICATION_FAILED, e)),
        };
        if snap.id() != expected || !snap.safe_regular(euid, &PUBLISHED_PAIR) {
            return Err(fs_conflict(PUBLICATION_AMBIGUOUS));
        }
    }
    fsync_dir(dir)?;
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
    let snap = match Snap::lstat(dir.fd(), name) {
        Ok(snap) => snap,
        Err(Errno::NOENT) => {
            return Err(fs_conflict("skill store child disappeared before cleanup"));
        }
        Err(e) => return Err(fs_error("skill store child cleanup check failed", e)),
    };
    if snap.id() != expected || !snap.safe_regular(dir.euid(), links) {
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

/// fsyncs the pinned directory, making name creations and removals durable.
pub(crate) fn fsync_dir(dir: &PinnedDir) -> Result<(), SkillCasError> {
    rustix::fs::fsync(dir.fd()).map_err(os(DIRECTORY_DURABILITY))
}

/// The exclusive per-content lock; released when dropped (closing the descriptor releases the
/// `flock`). The lock file itself is never removed: removing a lock file races with a waiter that
/// has it open.
#[derive(Debug)]
pub(crate) struct ContentLock {
    _file: File,
}

/// Takes the exclusive `flock` on `<root>/<name>`, polling every 10 ms for at most
/// [`LOCK_TIMEOUT`]. The lock file is opened relative to the pinned root, never through a link.
pub(crate) fn lock_content(dir: &PinnedDir, name: &str) -> Result<ContentLock, SkillCasError> {
    check_child_name(name)?;
    let fd: OwnedFd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        owner_rw(),
    )
    .map_err(|e| {
        // O_NOFOLLOW refuses a symbolic link at the lock name with ELOOP.
        if e == Errno::LOOP {
            fs_conflict(LOCK_UNSAFE)
        } else {
            fs_error(LOCK_UNAVAILABLE, e)
        }
    })?;
    let snap = Snap::fstat(&fd).map_err(os(LOCK_UNAVAILABLE))?;
    if snap.file_type() != S_IFREG || snap.uid != dir.euid() || snap.permissions() & 0o077 != 0 {
        return Err(fs_conflict(LOCK_UNSAFE));
    }
    let file = File::from(fd);
    let deadline = Instant::now() + LOCK_TIMEOUT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(ContentLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return Err(SkillCasError::FilesystemError {
                        message: "skill store content lock timed out",
                        source: None,
                    });
                }
                std::thread::sleep(LOCK_POLL);
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(fs_error(LOCK_UNAVAILABLE, e)),
        }
    }
}
