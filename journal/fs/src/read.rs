//! Bounded reads (spec/fs.md rule 3): a file on disk may be any size, so every read of one is
//! bounded, and a file over its bound is refused with its size, without being read whole.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

use crate::error::ReadError;
use crate::mode::S_IFMT;

/// Reads the regular file `path`, at most `limit_bytes` bytes. A final symbolic link is refused
/// (`O_NOFOLLOW`), and the file is opened non-blocking, so a FIFO or device at the name is refused
/// by the type check instead of hanging the read.
pub fn read_bounded(path: &Path, limit_bytes: u64) -> Result<Vec<u8>, ReadError> {
    read_bounded_at(CWD, path, path, limit_bytes)
}

/// [`read_bounded`] of the entry `name` of the open directory `dir` (an `openat`, never following
/// a final link); `path` names the file in errors.
pub fn read_bounded_at(
    dir: impl AsFd,
    name: impl rustix::path::Arg,
    path: &Path,
    limit_bytes: u64,
) -> Result<Vec<u8>, ReadError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == Errno::LOOP {
            ReadError::Symlink {
                path: path.to_path_buf(),
            }
        } else {
            ReadError::Io {
                action: "opened",
                path: path.to_path_buf(),
                source: e.into(),
            }
        }
    })?;
    read_bounded_file(&mut File::from(fd), path, limit_bytes)
}

/// Reads the open regular file `file` (named `path` in errors), at most `limit_bytes` bytes:
/// it reads one byte past the limit to tell a longer file, and refuses it naming its size.
pub fn read_bounded_file(
    file: &mut File,
    path: &Path,
    limit_bytes: u64,
) -> Result<Vec<u8>, ReadError> {
    let io = |action| {
        move |source| ReadError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let meta = file.metadata().map_err(io("inspected"))?;
    if !meta.is_file() {
        use std::os::unix::fs::MetadataExt as _;
        return Err(ReadError::NotRegularFile {
            path: path.to_path_buf(),
            file_type: meta.mode() & S_IFMT,
        });
    }
    let capacity = meta.len().min(limit_bytes).saturating_add(1);
    let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    file.take(limit_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io("read"))?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit_bytes {
        // The size from the same descriptor; a file still growing is at least what was read.
        let size_bytes = file.metadata().map_or(read, |m| m.len().max(read));
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size_bytes,
            limit_bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_file_at_the_bound_is_read_and_one_over_it_is_refused_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        assert_eq!(read_bounded(&path, 100).unwrap(), vec![7u8; 100]);
        assert_eq!(read_bounded(&path, 1000).unwrap().len(), 100);
        let err = read_bounded(&path, 99).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::TooLarge {
                    size_bytes: 100,
                    limit_bytes: 99,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("100 bytes") && text.contains("99 bytes"),
            "{text}"
        );
        assert!(text.contains(path.to_str().unwrap()), "{text}");
        let err = read_bounded(&path, 0).unwrap_err();
        assert!(
            matches!(err, ReadError::TooLarge { limit_bytes: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_link_a_directory_and_a_missing_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = read_bounded(&link, 10).unwrap_err();
        assert!(matches!(err, ReadError::Symlink { .. }), "{err:?}");
        // Following is the caller's choice: open it, then bound the read.
        let mut followed = File::open(&link).unwrap();
        assert_eq!(read_bounded_file(&mut followed, &link, 10).unwrap(), b"x");
        let err = read_bounded(dir.path(), 10).unwrap_err();
        assert!(matches!(err, ReadError::NotRegularFile { .. }), "{err:?}");
        let err = read_bounded(&dir.path().join("missing"), 10).unwrap_err();
        assert!(
            matches!(&err, ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
    }

    #[test]
    fn a_read_relative_to_an_open_directory_applies_the_same_rules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let named = dir.path().join("f");
        assert_eq!(read_bounded_at(&fd, "f", &named, 5).unwrap(), b"12345");
        let err = read_bounded_at(&fd, "f", &named, 4).unwrap_err();
        assert!(
            matches!(err, ReadError::TooLarge { size_bytes: 5, .. }),
            "{err:?}"
        );
        let err = read_bounded_at(&fd, "l", &dir.path().join("l"), 5).unwrap_err();
        assert!(matches!(err, ReadError::Symlink { .. }), "{err:?}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let err = read_bounded(&fifo, 10).unwrap_err();
        assert!(matches!(err, ReadError::NotRegularFile { .. }), "{err:?}");
    }
}
