//! Filesystem primitives of the registry: owner-private directories and read-only files,
//! durable writes and bounded reads.
//!
//! The registry trusts only what it wrote itself, so every check refuses symbolic links (a link
//! could redirect a content address to a file nobody authenticated) and group/other permission
//! bits (another account could replace or read an artifact). Durability follows the usual POSIX
//! rule: a new file is fsynced before it is renamed or linked into place, and the directory that
//! gained the name is fsynced after.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

use super::DIRECTORY_ENTRIES_MAX;
use super::error::RegistryError;

/// Mode of every registry directory.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every published file.
pub(crate) const FILE_MODE: u32 = 0o400;
/// Mode of a file while it is being written.
const WRITING_MODE: u32 = 0o600;

/// The effective user id, read from the owner of `/proc/self` (std exposes no `geteuid`, and this
/// crate forbids `unsafe`). `None` where procfs is absent; the owner check is then skipped and
/// the mode checks remain.
pub(crate) fn effective_uid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Checks that `path` is a real directory (not a link) with exactly mode 0700, owned by `uid`.
pub(crate) fn check_private_dir(
    path: &Path,
    uid: Option<u32>,
) -> Result<fs::Metadata, RegistryError> {
    let meta = fs::symlink_metadata(path).map_err(RegistryError::io("inspect", path))?;
    if meta.file_type().is_symlink() {
        return Err(RegistryError::unsafe_entry(
            path,
            "is a symbolic link, which the registry refuses",
        ));
    }
    if !meta.is_dir() {
        return Err(RegistryError::unsafe_entry(path, "is not a directory"));
    }
    let mode = meta.mode() & 0o7777;
    if mode != DIR_MODE {
        return Err(RegistryError::unsafe_entry(
            path,
            format!("has mode {mode:04o}, but registry directories must be {DIR_MODE:04o}"),
        ));
    }
    check_owner(path, &meta, uid)?;
    Ok(meta)
}

fn check_owner(path: &Path, meta: &fs::Metadata, uid: Option<u32>) -> Result<(), RegistryError> {
    match uid {
        Some(uid) if meta.uid() != uid => Err(RegistryError::unsafe_entry(
            path,
            format!(
                "is owned by uid {}, not by the registry's user {uid}",
                meta.uid()
            ),
        )),
        _ => Ok(()),
    }
}

/// Creates the directory `path` with mode 0700 if it is absent (then fsyncs its parent so the
/// new name survives a crash), and checks it is private either way.
pub(crate) fn ensure_private_dir(
    path: &Path,
    uid: Option<u32>,
) -> Result<fs::Metadata, RegistryError> {
    match fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match fs::DirBuilder::new().mode(DIR_MODE).create(path) {
                Ok(()) => {
                    // The umask may have cleared bits of 0700; set the mode explicitly.
                    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
                        .map_err(RegistryError::io("set the mode of", path))?;
                    if let Some(parent) = path.parent() {
                        fsync_dir(parent)?;
                    }
                }
                // Another process created it since the lookup; the check below judges what it made.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(RegistryError::io("create the directory", path)(e)),
            }
        }
        Err(e) => return Err(RegistryError::io("inspect", path)(e)),
    }
    check_private_dir(path, uid)
}

pub(crate) fn fsync_dir(path: &Path) -> Result<(), RegistryError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(RegistryError::io("fsync the directory", path))
}

/// Writes `bytes` to the new file `path` (refusing an existing name), fsyncs it and makes it
/// read-only (0400) before the caller publishes it.
pub(crate) fn write_read_only_file(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(WRITING_MODE)
        .open(path)
        .map_err(RegistryError::io("create the file", path))?;
    file.write_all(bytes)
        .map_err(RegistryError::io("write", path))?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(RegistryError::io("set the mode of", path))?;
    file.sync_all().map_err(RegistryError::io("fsync", path))
}

/// Checks that `path` is a published file: regular, not a link, mode 0400, one link, owned by
/// `uid`. Returns its metadata.
pub(crate) fn check_read_only_file(
    path: &Path,
    uid: Option<u32>,
) -> Result<fs::Metadata, RegistryError> {
    let meta = fs::symlink_metadata(path).map_err(RegistryError::io("inspect", path))?;
    if meta.file_type().is_symlink() {
        return Err(RegistryError::corrupt(
            path,
            "it is a symbolic link, which the registry never writes",
        ));
    }
    if !meta.is_file() {
        return Err(RegistryError::corrupt(path, "it is not a regular file"));
    }
    let mode = meta.mode() & 0o7777;
    if mode != FILE_MODE {
        return Err(RegistryError::corrupt(
            path,
            format!("it has mode {mode:04o}, but published files are {FILE_MODE:04o}"),
        ));
    }
    if meta.nlink() != 1 {
        return Err(RegistryError::corrupt(
            path,
            format!(
                "it has {} links, but a published file has exactly one",
                meta.nlink()
            ),
        ));
    }
    check_owner(path, &meta, uid)?;
    Ok(meta)
}

/// Reads at most `limit_bytes` from a published file; a longer file is reported as corrupt
/// without being read whole.
pub(crate) fn read_bounded(path: &Path, limit_bytes: u64) -> Result<Vec<u8>, RegistryError> {
    let mut bytes = Vec::new();
    File::open(path)
        .map_err(RegistryError::io("open", path))?
        .take(limit_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(RegistryError::io("read", path))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit_bytes {
        return Err(RegistryError::corrupt(
            path,
            format!("it is larger than its limit of {limit_bytes} bytes"),
        ));
    }
    Ok(bytes)
}

/// The names in directory `path`, refusing more than [`DIRECTORY_ENTRIES_MAX`] entries so a
/// flooded directory cannot make a scan unbounded.
pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>, RegistryError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(path).map_err(RegistryError::io("list", path))? {
        let entry = entry.map_err(RegistryError::io("list", path))?;
        if names.len() >= DIRECTORY_ENTRIES_MAX {
            return Err(RegistryError::unsafe_entry(
                path,
                format!("holds more than {DIRECTORY_ENTRIES_MAX} entries"),
            ));
        }
        match entry.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(name) => {
                return Err(RegistryError::unsafe_entry(
                    path.join(name),
                    "has a name that is not UTF-8",
                ));
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Walks an artifact directory and returns every file as `relative path → size in bytes`,
/// checking that each directory is private (0700) and each file published (0400, one link).
/// Links and other file types are corruption: the registry writes neither.
pub(crate) fn walk_artifact(
    root: &Path,
    uid: Option<u32>,
) -> Result<BTreeMap<String, u64>, RegistryError> {
    let mut files = BTreeMap::new();
    let mut pending: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    let mut seen = 0usize;
    while let Some((dir, prefix)) = pending.pop() {
        check_private_dir(&dir, uid).map_err(|e| match e {
            RegistryError::UnsafeEntry { path, problem } => {
                RegistryError::Corrupt { path, problem }
            }
            other => other,
        })?;
        for name in list_dir(&dir)? {
            seen += 1;
            if seen > DIRECTORY_ENTRIES_MAX {
                return Err(RegistryError::corrupt(
                    root,
                    format!("it holds more than {DIRECTORY_ENTRIES_MAX} entries"),
                ));
            }
            let path = dir.join(&name);
            let relative = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let meta = fs::symlink_metadata(&path).map_err(RegistryError::io("inspect", &path))?;
            if meta.is_dir() {
                pending.push((path, relative));
            } else {
                let meta = check_read_only_file(&path, uid)?;
                files.insert(relative, meta.len());
            }
        }
    }
    Ok(files)
}

/// Removes a stage left by an interrupted publication. Stages are owner-private, so making the
/// directories writable again is safe and needed to unlink their read-only contents' names.
pub(crate) fn remove_stage(path: &Path) -> Result<(), RegistryError> {
    let meta = fs::symlink_metadata(path).map_err(RegistryError::io("inspect", path))?;
    if meta.is_dir() && !meta.file_type().is_symlink() {
        fs::remove_dir_all(path).map_err(RegistryError::io("remove the stage", path))
    } else {
        fs::remove_file(path).map_err(RegistryError::io("remove the stage", path))
    }
}
