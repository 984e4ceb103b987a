//! One `stat` snapshot for descriptor-relative (`*at`) code: read with `fstat` or with
//! `fstatat(AT_SYMLINK_NOFOLLOW)`, so a check never follows a final symbolic link and a caller
//! can compare two snapshots to see whether a name still denotes the same file (spec/fs.md
//! rule 7).

use std::os::fd::AsFd;

use rustix::fs::{AtFlags, Stat};
use rustix::io::Errno;

use crate::mode::{MODE_PERMISSION_BITS, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// `(device, inode)`: which file a name denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// The type of a directory entry, not following a final symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    File,
    Directory,
    Symlink,
    Other,
}

/// The fields of one `stat` that ctx compares: identity, type and permissions, owner, link
/// count, size and the modification and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub nlink: u64,
    pub size: i64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileStat {
    /// The `stat` field types differ between platforms; every conversion here widens.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from_stat(st: &Stat) -> FileStat {
        FileStat {
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

    /// `fstat(fd)`.
    pub fn of_fd(fd: impl AsFd) -> Result<FileStat, Errno> {
        rustix::fs::fstat(fd).map(|st| FileStat::from_stat(&st))
    }

    /// `fstatat(dirfd, path, AT_SYMLINK_NOFOLLOW)`: the entry itself, never a link's target.
    pub fn at(dirfd: impl AsFd, path: impl rustix::path::Arg) -> Result<FileStat, Errno> {
        rustix::fs::statat(dirfd, path, AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| FileStat::from_stat(&st))
    }

    /// The file-type bits (`mode & S_IFMT`).
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }

    pub fn entry_type(&self) -> EntryType {
        match self.file_type() {
            S_IFREG => EntryType::File,
            S_IFDIR => EntryType::Directory,
            S_IFLNK => EntryType::Symlink,
            _ => EntryType::Other,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }

    pub fn is_regular(&self) -> bool {
        self.file_type() == S_IFREG
    }

    /// The permission bits (`mode & 0o7777`).
    pub fn permissions(&self) -> u32 {
        self.mode & MODE_PERMISSION_BITS
    }

    pub fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_link_is_seen_as_a_link_and_an_fd_as_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("l")).unwrap();
        let cwd = rustix::fs::CWD;
        let linked = FileStat::at(cwd, dir.path().join("l")).unwrap();
        assert_eq!(linked.entry_type(), EntryType::Symlink);
        let plain = FileStat::at(cwd, &file).unwrap();
        assert_eq!(plain.entry_type(), EntryType::File);
        assert_eq!(plain.size, 3);
        let opened = FileStat::of_fd(std::fs::File::open(&file).unwrap()).unwrap();
        assert_eq!(opened.id(), plain.id());
        assert_ne!(linked.id(), plain.id());
        assert_eq!(
            FileStat::at(cwd, dir.path().join("nothing")),
            Err(Errno::NOENT)
        );
        assert!(FileStat::at(cwd, dir.path()).unwrap().is_dir());
    }
}
