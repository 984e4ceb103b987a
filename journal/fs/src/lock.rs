//! The bounded directory lock (spec/fs.md rule 8): an advisory `flock` on a lock file, taken by
//! polling for at most an explicit wait, whose exclusive holder writes a record (its pid and
//! program) into the file, so a process that gives up can say who holds the lock.
//!
//! The lock belongs to the open file description: it is released when the [`DirLock`] is dropped
//! (or the process exits), and a child forked meanwhile shares it until its exec or exit. The lock
//! file itself is never removed: removing it would race with a waiter that has it open.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

use crate::dir::{ModeRule, check_open_file};
use crate::error::{LockError, PrivateError};
use crate::mode::MODE_GROUP_OTHER;

/// First pause between two attempts; each later pause doubles, up to [`LOCK_POLL_MAX_MS`].
pub const LOCK_POLL_MIN_MS: u64 = 2;
/// Longest pause between two attempts.
pub const LOCK_POLL_MAX_MS: u64 = 50;
/// How long an acquire waits, at least, for a lock whose record names this very process.
pub const LOCK_SELF_HELD_GRACE_MS: u64 = 2_000;
/// Most bytes of a holder record read back.
const HOLDER_RECORD_MAX_BYTES: u64 = 256;

/// The process-wide deadline of every lock wait (spec/fs.md rule 8): a process that must answer
/// within a host's timeout (a hook) sets it once, and no acquire waits past it, whatever wait its
/// caller asked for. `reached` records that a wait gave up because of it.
static LOCK_DEADLINE: std::sync::Mutex<Deadline> = std::sync::Mutex::new(Deadline {
    at: None,
    reached: false,
});

struct Deadline {
    at: Option<Instant>,
    reached: bool,
}

fn deadline() -> std::sync::MutexGuard<'static, Deadline> {
    LOCK_DEADLINE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// From now on, no lock of this process waits past `at` (an earlier deadline stays).
pub fn bound_lock_waits(at: Instant) {
    let mut d = deadline();
    d.at = Some(d.at.map_or(at, |old| old.min(at)));
}

/// Whether a lock wait of this process gave up at the deadline of [`bound_lock_waits`].
pub fn lock_deadline_reached() -> bool {
    deadline().reached
}

/// How [`DirLock::acquire`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    wait: Duration,
    poll_min: Duration,
    poll_max: Duration,
    self_held_grace: Duration,
    shared: bool,
    file_rule: ModeRule,
}

impl LockOptions {
    /// An exclusive lock, waited for at most `wait` (zero: one attempt), polling from
    /// [`LOCK_POLL_MIN_MS`] doubling up to [`LOCK_POLL_MAX_MS`], with a
    /// [`LOCK_SELF_HELD_GRACE_MS`] grace for a lock that names this process.
    pub fn new(wait: Duration) -> LockOptions {
        LockOptions {
            wait,
            poll_min: Duration::from_millis(LOCK_POLL_MIN_MS),
            poll_max: Duration::from_millis(LOCK_POLL_MAX_MS),
            self_held_grace: Duration::from_millis(LOCK_SELF_HELD_GRACE_MS),
            shared: false,
            file_rule: ModeRule::NoneOf(MODE_GROUP_OTHER),
        }
    }

    /// Pauses between attempts: `min` first, doubling up to `max` (equal values poll at a fixed
    /// interval). A zero `min` is taken as one millisecond, so a wait never spins.
    pub fn poll(mut self, min: Duration, max: Duration) -> LockOptions {
        self.poll_min = min.max(Duration::from_millis(1));
        self.poll_max = max.max(self.poll_min);
        self
    }

    /// How long to wait, at least, when the holder record names this process. A process that
    /// holds no lock of its own on the file (the caller knows) sees such a lock only as a copy a
    /// child inherited between fork and exec, which goes away at the child's exec or exit.
    pub fn self_held_grace(mut self, grace: Duration) -> LockOptions {
        self.self_held_grace = grace;
        self
    }

    /// The rule an existing lock file's permission bits must satisfy (by default
    /// `NoneOf(MODE_GROUP_OTHER)`). A lock file inside a directory already private to this user
    /// may be held to a looser rule, e.g. `NoneOf(MODE_GROUP_OTHER_WRITE)`.
    pub fn file_rule(mut self, rule: ModeRule) -> LockOptions {
        self.file_rule = rule;
        self
    }

    /// A shared lock (several readers at once). Shared holders write no holder record, since
    /// they would overwrite each other's.
    pub fn shared(mut self) -> LockOptions {
        self.shared = true;
        self
    }
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    /// Held for its `flock`: closing the descriptor releases the lock.
    _file: File,
    path: PathBuf,
}

fn own_holder_prefix() -> String {
    format!("pid {} ", std::process::id())
}

impl DirLock {
    /// Takes the lock on the file `path`, creating it (mode 0600) when absent. The file must be a
    /// regular file (a symbolic link at the name is refused, never followed) owned by this user
    /// and closed to other users. Gives up after the wait of `options` with
    /// [`LockError::Held`], naming the holder the file records.
    pub fn acquire(path: &Path, options: &LockOptions) -> Result<DirLock, LockError> {
        DirLock::acquire_at(CWD, path, path, options)
    }

    /// [`DirLock::acquire`] on the lock file `name` relative to the open directory `dir` (an
    /// `openat`), so a path swapped above `dir` cannot redirect the lock; `path` names the lock
    /// file in errors.
    pub fn acquire_at(
        dir: impl AsFd,
        name: impl rustix::path::Arg,
        path: &Path,
        options: &LockOptions,
    ) -> Result<DirLock, LockError> {
        let io = |action| {
            move |source| LockError::Io {
                action,
                path: path.to_path_buf(),
                source,
            }
        };
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| {
            if e == Errno::LOOP {
                LockError::Unsafe {
                    path: path.to_path_buf(),
                    source: PrivateError::Symlink {
                        path: path.to_path_buf(),
                    },
                }
            } else {
                io("opened")(e.into())
            }
        })?;
        let mut file = File::from(fd);
        check_open_file(&file, path, options.file_rule).map_err(|source| LockError::Unsafe {
            path: path.to_path_buf(),
            source,
        })?;
        let started = Instant::now();
        let mut pause = options.poll_min;
        loop {
            let attempt = if options.shared {
                file.try_lock_shared()
            } else {
                file.try_lock()
            };
            match attempt {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let waited = started.elapsed();
                    let holder = read_holder(&mut file);
                    let asked = if holder.starts_with(&own_holder_prefix()) {
                        options.wait.max(options.self_held_grace)
                    } else {
                        options.wait
                    };
                    let bound = deadline()
                        .at
                        .map(|at| at.saturating_duration_since(started));
                    let limit = bound.map_or(asked, |b| asked.min(b));
                    if waited >= limit {
                        if bound.is_some_and(|b| b < asked) {
                            deadline().reached = true;
                        }
                        return Err(LockError::Held {
                            path: path.to_path_buf(),
                            holder: true_holder(&file).unwrap_or(holder),
                            waited,
                        });
                    }
                    std::thread::sleep(pause.min(limit - waited));
                    pause = (pause * 2).min(options.poll_max);
                }
                Err(TryLockError::Error(e)) => return Err(io("locked")(e)),
            }
        }
        if !options.shared {
            // The record is informational: it lets a waiting process say who holds the lock.
            let holder = format!(
                "{}({})\n",
                own_holder_prefix(),
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "unknown program".to_owned())
            );
            file.set_len(0).map_err(io("truncated"))?;
            file.seek(SeekFrom::Start(0)).map_err(io("written"))?;
            file.write_all(holder.as_bytes()).map_err(io("written"))?;
        }
        Ok(DirLock {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open lock file, for a caller's own checks of the file it locked (for example that its
    /// name still denotes this file, by comparing `fstat` and `lstat` identities).
    pub fn file(&self) -> &File {
        &self._file
    }
}

/// Who really holds the lock on `file`, from the kernel's table of locks (`/proc/locks`, Linux):
/// the pid of each `FLOCK` on the file's device and inode and, when it can be read, its program.
/// A holder record can be stale (a process killed before it wrote its record, or a shared holder,
/// which writes none), the kernel's table cannot. `None` where the table is unavailable.
fn true_holder(file: &File) -> Option<String> {
    let stat = rustix::fs::fstat(file).ok()?;
    let device = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(stat.st_dev),
        rustix::fs::minor(stat.st_dev),
        stat.st_ino
    );
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    let pids: Vec<u32> = table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`; a blocked waiter's line
            // has `->` after the number.
            let fields = match fields.get(1) {
                Some(&"->") => fields.get(1..)?.to_vec(),
                _ => fields,
            };
            if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&device.as_str()) {
                return None;
            }
            if line.contains("->") {
                return None;
            }
            fields.get(4)?.parse().ok()
        })
        .filter(|pid| *pid != std::process::id())
        .collect();
    let first = *pids.first()?;
    let program = std::fs::read_to_string(format!("/proc/{first}/comm"))
        .map(|c| c.trim().to_owned())
        .unwrap_or_else(|_| "unknown program".to_owned());
    Some(format!("pid {first} ({program})"))
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let read = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(HOLDER_RECORD_MAX_BYTES).read_to_string(&mut text));
    match read {
        Ok(_) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => "an unknown holder".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;
    use crate::stat::FileStat;

    fn quick(wait: Duration) -> LockOptions {
        LockOptions::new(wait).self_held_grace(Duration::ZERO)
    }

    #[test]
    fn a_lock_held_by_another_handle_times_out_naming_the_holder_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.lock");
        let held = DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap();
        assert_eq!(held.path(), path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().mode() & 0o7777,
            0o600,
            "lock file mode"
        );
        let wait = Duration::from_millis(60);
        let started = Instant::now();
        let err = DirLock::acquire(&path, &quick(wait)).unwrap_err();
        match &err {
            LockError::Held {
                holder,
                waited,
                path: p,
            } => {
                assert!(
                    holder.starts_with(&format!("pid {} (", std::process::id())),
                    "{holder}"
                );
                assert!(*waited >= wait, "{waited:?}");
                assert_eq!(p, &path);
            }
            other => panic!("expected Held, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap();
    }

    #[test]
    fn a_lock_naming_this_process_is_waited_for_its_grace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.lock");
        let _held = DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap();
        let grace = Duration::from_millis(120);
        let options = LockOptions::new(Duration::ZERO).self_held_grace(grace);
        match DirLock::acquire(&path, &options) {
            Err(LockError::Held { waited, .. }) => assert!(waited >= grace, "{waited:?}"),
            other => panic!("expected Held after the grace, got {other:?}"),
        }
    }

    #[test]
    fn a_waiter_gets_the_lock_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.lock");
        let held = DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap();
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        let options =
            quick(Duration::from_secs(10)).poll(Duration::from_millis(5), Duration::from_millis(5));
        DirLock::acquire(&path, &options).unwrap();
        released.join().unwrap();
    }

    #[test]
    fn a_lock_taken_relative_to_an_open_directory_excludes_one_taken_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let fd = rustix::fs::openat(
            CWD,
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let path = dir.path().join("content.lock");
        let held = DirLock::acquire_at(&fd, "content.lock", &path, &quick(Duration::ZERO)).unwrap();
        let named = FileStat::at(CWD, &path).unwrap();
        assert_eq!(FileStat::of_fd(held.file()).unwrap().id(), named.id());
        let err = DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap_err();
        assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    }

    #[test]
    fn shared_locks_coexist_and_exclude_an_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.lock");
        let shared = quick(Duration::ZERO).shared();
        let a = DirLock::acquire(&path, &shared).unwrap();
        let _b = DirLock::acquire(&path, &shared).unwrap();
        let err = DirLock::acquire(&path, &quick(Duration::ZERO)).unwrap_err();
        assert!(matches!(err, LockError::Held { .. }), "{err:?}");
        drop(a);
    }

    #[test]
    fn a_symlinked_or_open_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("ctx.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = DirLock::acquire(&link, &quick(Duration::ZERO)).unwrap_err();
        assert!(
            matches!(
                &err,
                LockError::Unsafe {
                    source: PrivateError::Symlink { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        let open = dir.path().join("open.lock");
        std::fs::write(&open, b"").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = DirLock::acquire(&open, &quick(Duration::ZERO)).unwrap_err();
        assert!(
            matches!(
                &err,
                LockError::Unsafe {
                    source: PrivateError::ModeForbidden { found: 0o666, .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("open.lock"), "{err}");
        // A looser rule admits a file others may read, still not one they may write.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let readable = quick(Duration::ZERO).file_rule(ModeRule::NoneOf(0o022));
        DirLock::acquire(&open, &readable).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o664)).unwrap();
        let err = DirLock::acquire(&open, &readable).unwrap_err();
        assert!(matches!(err, LockError::Unsafe { .. }), "{err:?}");
    }
}
