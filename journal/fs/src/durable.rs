//! Durability (spec/fs.md rules 1 and 2): a new or renamed name survives a crash only once its
//! directory is synced, and a file replaced in place is written whole under a temporary name,
//! synced, and renamed over the old one, so a crash leaves the old file or the new one, never a
//! torn mix.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::error::{SyncError, WriteError};

/// fsyncs the directory `path`, making the creation, rename or removal of its entries durable.
pub fn fsync_dir(path: &Path) -> Result<(), SyncError> {
    let io = |action| {
        move |source| SyncError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    File::open(path)
        .map_err(io("opened"))?
        .sync_all()
        .map_err(io("synced"))
}

/// [`fsync_dir`] of a directory already open (`path` names it in errors): for descriptor-relative
/// code that pinned the directory, so a path swapped meanwhile cannot redirect the sync.
pub fn fsync_dir_fd(dir: impl AsFd, path: &Path) -> Result<(), SyncError> {
    rustix::fs::fsync(dir).map_err(|e| SyncError::Io {
        action: "synced",
        path: path.to_path_buf(),
        source: e.into(),
    })
}

/// Writes `bytes` to `path` durably with the permission bits `mode`, through the temporary name
/// `<file name>.tmp` beside it: see [`write_durable_with_temp`]. Writers of one `path` must be
/// serialized (for example by a [`crate::DirLock`]), since they share the temporary name.
pub fn write_durable(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let Some(name) = path.file_name() else {
        return Err(WriteError::NoParent {
            path: path.to_path_buf(),
        });
    };
    let mut temp = OsString::from(name);
    temp.push(".tmp");
    write_durable_with_temp(path, &path.with_file_name(temp), bytes, mode)
}

/// Writes `bytes` to `path` durably with the permission bits `mode`: removes a leftover `temp`,
/// creates `temp` exclusively (never through a link), writes and fsyncs it, sets `mode` (the
/// umask may have cleared bits), renames it to `path` and fsyncs the directory. `temp` must be in
/// the directory of `path` (a rename is atomic only within one file system). On failure the
/// temporary file is removed and `path` is unchanged.
pub fn write_durable_with_temp(
    path: &Path,
    temp: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), WriteError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => {
            return Err(WriteError::NoParent {
                path: path.to_path_buf(),
            });
        }
    };
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError::Io {
            action,
            path,
            source,
        }
    };
    match fs::remove_file(temp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removed (a leftover temporary file)", temp)(e)),
    }
    let written = (|| -> std::io::Result<()> {
        // create_new is O_CREAT|O_EXCL: a link planted at the temporary name is never followed.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(temp)?;
        file.write_all(bytes)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(temp);
        return Err(io("written (as a temporary file)", temp)(e));
    }
    if let Err(e) = fs::rename(temp, path) {
        let _ = fs::remove_file(temp);
        return Err(io("renamed into place", path)(e));
    }
    fsync_dir(&dir).map_err(|e| match e {
        SyncError::Io {
            action,
            path,
            source,
        } => WriteError::Io {
            action,
            path,
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_durable_write_replaces_the_file_with_its_mode_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_durable(&path, b"first", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        write_durable(&path, b"second", 0o400).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o400);
        assert_eq!(names(dir.path()), ["key"]);
    }

    #[test]
    fn a_leftover_temporary_file_is_replaced_and_a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(dir.path().join("f.tmp"), b"crashed half-write").unwrap();
        write_durable(&path, b"whole", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"whole");
        assert_eq!(names(dir.path()), ["f"]);

        let victim = dir.path().join("victim");
        fs::write(&victim, b"untouched").unwrap();
        let temp = dir.path().join(".g.tmp");
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        write_durable_with_temp(&dir.path().join("g"), &temp, b"g", 0o600).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"untouched");
        assert_eq!(fs::read(dir.path().join("g")).unwrap(), b"g");
        assert_eq!(names(dir.path()), ["f", "g", "victim"]);
    }

    #[test]
    fn a_failed_rename_leaves_neither_the_target_changed_nor_a_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory at the target name: rename(2) refuses to replace it.
        let path = dir.path().join("occupied");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"x").unwrap();
        let err = write_durable(&path, b"data", 0o600).unwrap_err();
        assert!(
            matches!(&err, WriteError::Io { action, path: p, .. }
                if *action == "renamed into place" && *p == path),
            "{err:?}"
        );
        assert!(err.to_string().contains("occupied"), "{err}");
        assert_eq!(names(dir.path()), ["occupied"]);
    }

    #[test]
    fn fsync_dir_fd_syncs_an_open_directory() {
        let dir = tempfile::tempdir().unwrap();
        let open = File::open(dir.path()).unwrap();
        fsync_dir_fd(&open, dir.path()).unwrap();
    }

    #[test]
    fn fsync_dir_names_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        fsync_dir(dir.path()).unwrap();
        let missing = dir.path().join("missing");
        let err = fsync_dir(&missing).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        assert!(
            matches!(&err, SyncError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
    }
}
