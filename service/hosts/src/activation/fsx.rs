//! Directory-relative filesystem steps of the actuators: every operation names a child of an
//! open directory (`openat`, `symlinkat`, `renameat2`, `unlinkat`, `fstatat` without following
//! a final symbolic link), so the check and the step see the same directory even if a path
//! above it is swapped meanwhile.

use std::fs::File;
use std::io::{ErrorKind, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use ctx_fs::{
    DIR_MODE_PRIVATE, FILE_MODE_PRIVATE, FileStat, ReadError, read_bounded_at, read_bounded_file,
};
use rustix::fs::{AtFlags, CWD, Mode, OFlags};
use rustix::io::Errno;

pub(crate) use ctx_fs::EntryType;

use super::error::ActivationError;

/// Mode of the directories ctx creates (staging, store, missing host directories).
pub(crate) const DIR_MODE: u32 = DIR_MODE_PRIVATE;
/// Mode of the files ctx creates.
pub(crate) const FILE_MODE: u32 = FILE_MODE_PRIVATE;

/// What a bounded read of a regular file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Content {
    Bytes(Vec<u8>),
    /// Longer than the limit: the size only.
    TooLarge(u64),
}

/// An open directory and the path it was opened by (for messages and for building paths the
/// host will read).
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn errno_io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

impl Dir {
    /// Opens the directory at `path` (following symbolic links above and at it: the host does).
    pub(crate) fn open(path: &Path) -> Result<Dir, ActivationError> {
        let fd = rustix::fs::openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ActivationError::io("open the directory", path)(errno_io(e)))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates `path` and its missing parents (mode 0700), then opens it.
    pub(crate) fn ensure(path: &Path) -> Result<Dir, ActivationError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)
            .map_err(ActivationError::io("create the directory", path))?;
        Dir::open(path)
    }

    /// Another handle on the same open directory, with the same path.
    pub(crate) fn duplicate(&self) -> Result<Dir, ActivationError> {
        let fd = self
            .fd
            .try_clone()
            .map_err(ActivationError::io("open the directory", &self.path))?;
        Ok(Dir {
            fd,
            path: self.path.clone(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn child(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The type of `name`, or `None` when there is no such entry.
    pub(crate) fn entry_type(&self, name: &str) -> Result<Option<EntryType>, ActivationError> {
        match FileStat::at(&self.fd, name) {
            Ok(stat) => Ok(Some(stat.entry_type())),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(ActivationError::io("inspect", self.child(name))(errno_io(
                e,
            ))),
        }
    }

    /// The text of the symbolic link `name`.
    pub(crate) fn read_link(&self, name: &str) -> Result<PathBuf, ActivationError> {
        let text = rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .map_err(|e| ActivationError::io("read the link", self.child(name))(errno_io(e)))?;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(text.as_bytes())))
    }

    /// Reads the regular file `name` (not through a link), at most `max` bytes.
    pub(crate) fn read_file(&self, name: &str, max: usize) -> Result<Content, ActivationError> {
        let path = self.child(name);
        content(read_bounded_at(&self.fd, name, &path, bound(max)), &path)
    }

    /// Creates the symbolic link `name` → `target`; an existing `name` is an error.
    pub(crate) fn symlink(&self, target: &Path, name: &str) -> Result<(), ActivationError> {
        rustix::fs::symlinkat(target, &self.fd, name)
            .map_err(|e| ActivationError::io("create the link", self.child(name))(errno_io(e)))
    }

    /// Creates the file `name` exclusively (mode 0600) with `bytes` and fsyncs it.
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<(), ActivationError> {
        self.write_new_mode(name, bytes, FILE_MODE)
    }

    /// Creates the file `name` exclusively with `bytes` and exactly the permission bits `mode`
    /// (set on the open file, so the umask cannot take the executable bit away), and fsyncs it.
    pub(crate) fn write_new_mode(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), ActivationError> {
        let path = self.child(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_bits_truncate(FILE_MODE as _),
        )
        .map_err(|e| ActivationError::io("create", &path)(errno_io(e)))?;
        rustix::fs::fchmod(&fd, Mode::from_bits_truncate(mode as _))
            .map_err(|e| ActivationError::io("set the mode of", &path)(errno_io(e)))?;
        let mut file = File::from(fd);
        file.write_all(bytes)
            .map_err(ActivationError::io("write", &path))?;
        file.sync_all().map_err(ActivationError::io("fsync", &path))
    }

    /// Sets the permission bits of the directory itself to exactly `mode`.
    pub(crate) fn chmod(&self, mode: u32) -> Result<(), ActivationError> {
        rustix::fs::fchmod(&self.fd, Mode::from_bits_truncate(mode as _))
            .map_err(|e| ActivationError::io("set the mode of", &self.path)(errno_io(e)))
    }

    /// `fstatat` of the entry `name` without following a link at it; `None` when it is absent.
    pub(crate) fn stat_child(&self, name: &str) -> Result<Option<FileStat>, ActivationError> {
        match FileStat::at(&self.fd, name) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(ActivationError::io("inspect", self.child(name))(errno_io(
                e,
            ))),
        }
    }

    /// Removes the directory `name` and everything below it, without following links, at most
    /// `depth` levels deep. Best effort, for a staging directory this process created: whatever
    /// cannot be removed stays under its inert staging name.
    pub(crate) fn remove_tree(&self, name: &str, depth: usize) {
        let Ok(dir) = self.open_child(name) else {
            let _ = self.unlink(name);
            return;
        };
        for child in dir.names().unwrap_or_default() {
            match dir.entry_type(&child) {
                Ok(Some(EntryType::Directory)) if depth > 0 => dir.remove_tree(&child, depth - 1),
                _ => {
                    let _ = dir.unlink(&child);
                }
            }
        }
        let _ = self.rmdir(name);
    }

    /// Creates the directory `name` (mode 0700).
    pub(crate) fn mkdir(&self, name: &str) -> Result<(), ActivationError> {
        rustix::fs::mkdirat(&self.fd, name, Mode::from_bits_truncate(DIR_MODE as _))
            .map_err(|e| ActivationError::io("create the directory", self.child(name))(errno_io(e)))
    }

    /// Opens the child directory `name` without following a link at it.
    pub(crate) fn open_child(&self, name: &str) -> Result<Dir, ActivationError> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ActivationError::io("open the directory", self.child(name))(errno_io(e)))?;
        Ok(Dir {
            fd,
            path: self.child(name),
        })
    }

    /// Renames `name` to `to/to_name`, failing with `AlreadyExists` when `to_name` exists
    /// (`RENAME_NOREPLACE` on Linux; elsewhere a check right before a plain rename).
    pub(crate) fn rename_noreplace(
        &self,
        name: &str,
        to: &Dir,
        to_name: &str,
    ) -> Result<(), std::io::Error> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            rustix::fs::renameat_with(
                &self.fd,
                name,
                &to.fd,
                to_name,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(errno_io)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            match rustix::fs::statat(&to.fd, to_name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => return Err(std::io::Error::from(ErrorKind::AlreadyExists)),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(errno_io(e)),
            }
            rustix::fs::renameat(&self.fd, name, &to.fd, to_name).map_err(errno_io)
        }
    }

    /// Swaps `name` and `to/to_name`, both of which must exist (`RENAME_EXCHANGE` on Linux).
    /// Elsewhere a plain rename replaces `to_name`, and the replaced entry is gone: `Ok(false)`
    /// says no swap happened.
    pub(crate) fn exchange(
        &self,
        name: &str,
        to: &Dir,
        to_name: &str,
    ) -> Result<bool, std::io::Error> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            rustix::fs::renameat_with(
                &self.fd,
                name,
                &to.fd,
                to_name,
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .map_err(errno_io)
            .map(|()| true)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            rustix::fs::renameat(&self.fd, name, &to.fd, to_name)
                .map_err(errno_io)
                .map(|()| false)
        }
    }

    /// Removes the non-directory entry `name`.
    pub(crate) fn unlink(&self, name: &str) -> Result<(), ActivationError> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|e| ActivationError::io("remove", self.child(name))(errno_io(e)))
    }

    /// Removes the empty directory `name`.
    pub(crate) fn rmdir(&self, name: &str) -> Result<(), ActivationError> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(|e| ActivationError::io("remove the directory", self.child(name))(errno_io(e)))
    }

    /// fsyncs the directory, making entry creations, renames and removals durable.
    pub(crate) fn sync(&self) -> Result<(), ActivationError> {
        rustix::fs::fsync(&self.fd)
            .map_err(|e| ActivationError::io("fsync the directory", &self.path)(errno_io(e)))
    }

    /// The names in the directory (without `.` and `..`), UTF-8 names only: ctx never creates
    /// others, and the host's own names that are not UTF-8 cannot collide with ctx's.
    pub(crate) fn names(&self) -> Result<Vec<String>, ActivationError> {
        let list = |e: Errno| ActivationError::io("list", &self.path)(errno_io(e));
        let dup = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(list)?;
        let entries = rustix::fs::Dir::read_from(dup.as_fd()).map_err(list)?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(list)?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name != "." && name != ".." {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The owner and permission bits of the directory itself.
    pub(crate) fn owner_and_mode(&self) -> Result<(u32, u32), ActivationError> {
        let stat = FileStat::of_fd(&self.fd)
            .map_err(|e| ActivationError::io("inspect", &self.path)(errno_io(e)))?;
        Ok((stat.uid, stat.permissions()))
    }
}

fn bound(max: usize) -> u64 {
    u64::try_from(max).unwrap_or(u64::MAX)
}

/// A ctx-fs bounded read as [`Content`]: a longer file is its size, not an error.
fn content(read: Result<Vec<u8>, ReadError>, path: &Path) -> Result<Content, ActivationError> {
    match read {
        Ok(bytes) => Ok(Content::Bytes(bytes)),
        Err(ReadError::TooLarge { size_bytes, .. }) => Ok(Content::TooLarge(size_bytes)),
        Err(ReadError::NotRegularFile { .. }) => Err(ActivationError::Io {
            action: "read",
            path: path.to_path_buf(),
            source: std::io::Error::new(ErrorKind::InvalidInput, "not a regular file"),
        }),
        Err(ReadError::Symlink { .. }) => {
            Err(ActivationError::io("open", path)(errno_io(Errno::LOOP)))
        }
        Err(ReadError::Io { action, source, .. }) => Err(ActivationError::Io {
            action: match action {
                "opened" => "open",
                "inspected" => "inspect",
                _ => "read",
            },
            path: path.to_path_buf(),
            source,
        }),
        Err(other) => Err(ActivationError::io("read", path)(std::io::Error::other(
            other,
        ))),
    }
}

/// Reads the file at `path` following links (as the host does), at most `max` bytes; `None`
/// when there is nothing readable there.
pub(crate) fn read_followed(path: &Path, max: usize) -> Option<Content> {
    let mut file = File::open(path).ok()?;
    content(read_bounded_file(&mut file, path, bound(max)), path).ok()
}

/// `path` as UTF-8 text, as the ledger stores it.
pub(crate) fn utf8(path: &Path) -> Result<&str, ActivationError> {
    path.to_str().ok_or_else(|| ActivationError::NonUtf8Path {
        path: path.to_path_buf(),
    })
}
