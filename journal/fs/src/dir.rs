//! Owner-private directories and files (spec/fs.md rules 4 and 5): what may hold a secret or be
//! trusted as written by this user must be owned by the effective uid, must not be a symbolic
//! link (a link could redirect it to something nobody checked), and must not be open to other
//! users.

use std::fs::{self, File, Metadata};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use crate::durable::fsync_dir;
use crate::error::PrivateError;
use crate::mode::{DIR_MODE_PRIVATE, MODE_PERMISSION_BITS, S_IFMT};

/// The effective user id of this process: the owner every private directory and file must have.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// What the permission bits of a directory or file must satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRule {
    /// The permission bits (`mode & 0o7777`) are exactly these.
    Exactly(u32),
    /// None of these bits is set (e.g. [`crate::MODE_GROUP_OTHER`]).
    NoneOf(u32),
}

impl ModeRule {
    fn check(self, path: &Path, mode: u32) -> Result<(), PrivateError> {
        let found = mode & MODE_PERMISSION_BITS;
        match self {
            ModeRule::Exactly(required) if found != required => Err(PrivateError::ModeNotExact {
                path: path.to_path_buf(),
                found,
                required,
            }),
            ModeRule::NoneOf(forbidden) if found & forbidden != 0 => {
                Err(PrivateError::ModeForbidden {
                    path: path.to_path_buf(),
                    found,
                    forbidden,
                })
            }
            _ => Ok(()),
        }
    }
}

fn check_owner(path: &Path, meta: &Metadata) -> Result<(), PrivateError> {
    let expected = effective_uid();
    if meta.uid() != expected {
        return Err(PrivateError::Owner {
            path: path.to_path_buf(),
            found: meta.uid(),
            expected,
        });
    }
    Ok(())
}

fn lstat(path: &Path) -> Result<Metadata, PrivateError> {
    let meta = fs::symlink_metadata(path).map_err(|source| PrivateError::Io {
        action: "inspected",
        path: path.to_path_buf(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(PrivateError::Symlink {
            path: path.to_path_buf(),
        });
    }
    Ok(meta)
}

/// Checks that `path` is a directory (not a symbolic link) owned by the effective uid whose
/// permission bits satisfy `rule`. Returns its metadata.
pub fn check_dir(path: &Path, rule: ModeRule) -> Result<Metadata, PrivateError> {
    let meta = lstat(path)?;
    if !meta.is_dir() {
        return Err(PrivateError::NotDirectory {
            path: path.to_path_buf(),
            file_type: meta.mode() & S_IFMT,
        });
    }
    rule.check(path, meta.mode())?;
    check_owner(path, &meta)?;
    Ok(meta)
}

/// Checks that `path` is an owner-private directory: not a link, mode exactly 0700, owned by the
/// effective uid.
pub fn check_private_dir(path: &Path) -> Result<Metadata, PrivateError> {
    check_dir(path, ModeRule::Exactly(DIR_MODE_PRIVATE))
}

/// Creates the directory `path` with mode 0700 when it is absent (setting the mode explicitly,
/// since the umask may clear bits, and syncing its parent so the new name survives a crash), then
/// checks it with [`check_private_dir`] either way. Its parent must exist.
pub fn ensure_private_dir(path: &Path) -> Result<Metadata, PrivateError> {
    let io = |action| {
        move |source| PrivateError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    match fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match fs::DirBuilder::new().mode(DIR_MODE_PRIVATE).create(path) {
                Ok(()) => {
                    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE_PRIVATE))
                        .map_err(io("given mode 0700"))?;
                    if let Some(parent) = path.parent() {
                        fsync_dir(parent).map_err(|e| match e {
                            crate::SyncError::Io {
                                action,
                                path,
                                source,
                            } => PrivateError::Io {
                                action,
                                path,
                                source,
                            },
                        })?;
                    }
                }
                // Another process created it since the lookup; the check judges what it made.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("created")(e)),
            }
        }
        Err(e) => return Err(io("inspected")(e)),
    }
    check_private_dir(path)
}

/// Creates `path` and its missing parents, each new one with mode 0700 (less the umask). An
/// existing directory is left as it is and not checked: this is for a directory whose contents
/// carry their own checks (a journal's data directory, the service's data root).
pub fn create_private_dir_all(path: &Path) -> Result<(), PrivateError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE_PRIVATE)
        .create(path)
        .map_err(|source| PrivateError::Io {
            action: "created",
            path: path.to_path_buf(),
            source,
        })
}

fn check_file_meta(path: &Path, meta: &Metadata, rule: ModeRule) -> Result<(), PrivateError> {
    if !meta.is_file() {
        return Err(PrivateError::NotRegularFile {
            path: path.to_path_buf(),
            file_type: meta.mode() & S_IFMT,
        });
    }
    rule.check(path, meta.mode())?;
    check_owner(path, meta)
}

/// Checks that `path` is a regular file (not a symbolic link) owned by the effective uid whose
/// permission bits satisfy `rule`. Returns its metadata (for a caller's own link-count or
/// identity checks).
pub fn check_file(path: &Path, rule: ModeRule) -> Result<Metadata, PrivateError> {
    let meta = lstat(path)?;
    check_file_meta(path, &meta, rule)?;
    Ok(meta)
}

/// [`check_file`] on a file already open (by `path`, named in errors): the check then judges
/// exactly the file that will be read, whatever happens to the name meanwhile.
pub fn check_open_file(file: &File, path: &Path, rule: ModeRule) -> Result<Metadata, PrivateError> {
    let meta = file.metadata().map_err(|source| PrivateError::Io {
        action: "inspected",
        path: path.to_path_buf(),
        source,
    })?;
    check_file_meta(path, &meta, rule)?;
    Ok(meta)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::mode::{FILE_MODE_PRIVATE, MODE_GROUP_OTHER, MODE_GROUP_OTHER_WRITE};

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_private_directory_is_created_with_mode_0700_and_passes_its_check() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("private");
        let meta = ensure_private_dir(&dir).unwrap();
        assert_eq!(meta.mode() & MODE_PERMISSION_BITS, 0o700);
        // A second call checks what is there.
        ensure_private_dir(&dir).unwrap();
        check_private_dir(&dir).unwrap();
    }

    #[test]
    fn a_group_writable_directory_is_refused_naming_its_mode() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o770);
        let err = check_private_dir(&dir).unwrap_err();
        assert!(
            matches!(
                err,
                PrivateError::ModeNotExact {
                    found: 0o770,
                    required: 0o700,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("0770"), "{err}");
        assert!(err.to_string().contains(dir.to_str().unwrap()), "{err}");
        let err = ensure_private_dir(&dir).unwrap_err();
        assert!(matches!(err, PrivateError::ModeNotExact { .. }), "{err:?}");
        // The looser rule of a directory others may read but not write.
        let err = check_dir(&dir, ModeRule::NoneOf(MODE_GROUP_OTHER_WRITE)).unwrap_err();
        assert!(
            matches!(
                err,
                PrivateError::ModeForbidden {
                    found: 0o770,
                    forbidden: 0o022,
                    ..
                }
            ),
            "{err:?}"
        );
        chmod(&dir, 0o755);
        check_dir(&dir, ModeRule::NoneOf(MODE_GROUP_OTHER_WRITE)).unwrap();
    }

    #[test]
    fn a_symlink_is_refused_even_to_a_private_directory() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("target");
        ensure_private_dir(&target).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = check_private_dir(&link).unwrap_err();
        assert!(matches!(err, PrivateError::Symlink { .. }), "{err:?}");
        let err = ensure_private_dir(&link).unwrap_err();
        assert!(matches!(err, PrivateError::Symlink { .. }), "{err:?}");
        let file = target.join("f");
        fs::write(&file, b"x").unwrap();
        chmod(&file, 0o600);
        let file_link = root.path().join("file-link");
        std::os::unix::fs::symlink(&file, &file_link).unwrap();
        let err = check_file(&file_link, ModeRule::Exactly(FILE_MODE_PRIVATE)).unwrap_err();
        assert!(matches!(err, PrivateError::Symlink { .. }), "{err:?}");
    }

    #[test]
    fn a_file_is_not_a_directory_and_a_directory_is_not_a_file() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f");
        fs::write(&file, b"x").unwrap();
        let err = check_private_dir(&file).unwrap_err();
        assert!(matches!(err, PrivateError::NotDirectory { .. }), "{err:?}");
        let err = check_file(root.path(), ModeRule::NoneOf(MODE_GROUP_OTHER)).unwrap_err();
        assert!(
            matches!(err, PrivateError::NotRegularFile { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_file_readable_by_others_is_refused_and_a_private_one_passes() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("key");
        fs::write(&file, b"x").unwrap();
        chmod(&file, 0o644);
        let err = check_file(&file, ModeRule::NoneOf(MODE_GROUP_OTHER)).unwrap_err();
        assert!(
            matches!(
                err,
                PrivateError::ModeForbidden {
                    found: 0o644,
                    forbidden: 0o077,
                    ..
                }
            ),
            "{err:?}"
        );
        let open = File::open(&file).unwrap();
        let err = check_open_file(&open, &file, ModeRule::NoneOf(MODE_GROUP_OTHER)).unwrap_err();
        assert!(matches!(err, PrivateError::ModeForbidden { .. }), "{err:?}");
        chmod(&file, 0o600);
        check_open_file(&open, &file, ModeRule::Exactly(FILE_MODE_PRIVATE)).unwrap();
        assert_eq!(
            check_file(&file, ModeRule::NoneOf(MODE_GROUP_OTHER))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn create_all_makes_missing_parents_private_and_leaves_existing_ones_alone() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a").join("b");
        create_private_dir_all(&deep).unwrap();
        check_private_dir(&deep).ok();
        let mode = fs::metadata(&deep).unwrap().mode() & MODE_PERMISSION_BITS;
        // New directories get 0700 less the umask: never more than 0700.
        assert_eq!(mode & !DIR_MODE_PRIVATE, 0, "mode {mode:o}");
        chmod(root.path(), 0o755);
        create_private_dir_all(root.path()).unwrap();
        assert_eq!(
            fs::metadata(root.path()).unwrap().mode() & MODE_PERMISSION_BITS,
            0o755
        );
        let file = root.path().join("f");
        fs::write(&file, b"x").unwrap();
        let err = create_private_dir_all(&file).unwrap_err();
        assert!(matches!(err, PrivateError::Io { .. }), "{err:?}");
    }

    #[test]
    fn a_directory_or_file_of_another_owner_is_refused_naming_both_uids() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        ensure_private_dir(&dir).unwrap();
        let file = dir.join("f");
        fs::write(&file, b"x").unwrap();
        chmod(&file, 0o600);
        assert_eq!(fs::metadata(&dir).unwrap().uid(), effective_uid());
        // Only root can give a file away; other users check the message alone.
        if effective_uid() != 0 {
            let err = PrivateError::Owner {
                path: dir.clone(),
                found: 1000,
                expected: 1001,
            };
            assert!(err.to_string().contains("uid 1000"), "{err}");
            eprintln!("skipped: giving a file to another owner needs root");
            return;
        }
        let other = 65_534;
        std::os::unix::fs::chown(&dir, Some(other), None).unwrap();
        std::os::unix::fs::chown(&file, Some(other), None).unwrap();
        let err = check_private_dir(&dir).unwrap_err();
        assert!(
            matches!(
                err,
                PrivateError::Owner {
                    found: 65_534,
                    expected: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("uid 65534"), "{err}");
        let err = check_file(&file, ModeRule::Exactly(FILE_MODE_PRIVATE)).unwrap_err();
        assert!(matches!(err, PrivateError::Owner { .. }), "{err:?}");
    }
}
