//! Filesystem primitives of the registry: owner-private directories and read-only files,
//! durable writes and bounded reads.
//!
//! The registry trusts only what it wrote itself, so every check refuses symbolic links (a link
//! could redirect a content address to a file nobody authenticated) and group/other permission
//! bits (another account could replace or read an artifact). Durability follows the usual POSIX
//! rule: a new file is fsynced before it is renamed or linked into place, and the directory that
//! gained the name is fsynced after.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use ctx_fs::{
    DIR_MODE_PRIVATE, FILE_MODE_READ_ONLY, ModeRule, PrivateError, ReadError, SyncError,
    check_file, check_private_dir,
};

use super::error::RegistryError;
use super::{ARTIFACT_ENTRIES_MAX, DIRECTORY_ENTRIES_MAX};

/// Mode of every registry directory.
pub(crate) const DIR_MODE: u32 = DIR_MODE_PRIVATE;
/// Mode of every published file.
pub(crate) const FILE_MODE: u32 = FILE_MODE_READ_ONLY;
/// Mode of a file while it is being written.
const WRITING_MODE: u32 = 0o600;
/// The mode of a published executable file of a skill tree: read and execute for the owner.
pub(crate) const FILE_MODE_EXECUTABLE: u32 = 0o500;

/// Maps a ctx-fs owner-private refusal of a registry directory to the registry's sentences.
pub(crate) fn dir_error(e: PrivateError) -> RegistryError {
    match e {
        PrivateError::Symlink { path } => {
            RegistryError::unsafe_entry(path, "is a symbolic link, which the registry refuses")
        }
        PrivateError::NotDirectory { path, .. } => {
            RegistryError::unsafe_entry(path, "is not a directory")
        }
        PrivateError::ModeNotExact { path, found, .. } => RegistryError::unsafe_entry(
            path,
            format!("has mode {found:04o}, but registry directories must be {DIR_MODE:04o}"),
        ),
        other => common_private_error(other),
    }
}

/// The refusals a directory and a file share: another owner, an operating-system failure.
fn common_private_error(e: PrivateError) -> RegistryError {
    match e {
        PrivateError::Owner {
            path,
            found,
            expected,
        } => RegistryError::unsafe_entry(
            path,
            format!("is owned by uid {found}, not by the registry's user {expected}"),
        ),
        PrivateError::Io {
            action,
            path,
            source,
        } => RegistryError::Io {
            operation: match action {
                "given mode 0700" => "set the mode of",
                "created" => "create the directory",
                "opened" | "synced" => "fsync the directory",
                _ => "inspect",
            },
            path,
            source,
        },
        other => {
            let path = other_path(&other);
            RegistryError::unsafe_entry(path, other.to_string())
        }
    }
}

fn other_path(e: &PrivateError) -> PathBuf {
    match e {
        PrivateError::Io { path, .. }
        | PrivateError::Symlink { path }
        | PrivateError::NotDirectory { path, .. }
        | PrivateError::NotRegularFile { path, .. }
        | PrivateError::ModeNotExact { path, .. }
        | PrivateError::ModeForbidden { path, .. }
        | PrivateError::Owner { path, .. } => path.clone(),
        _ => PathBuf::new(),
    }
}

impl From<SyncError> for RegistryError {
    fn from(e: SyncError) -> RegistryError {
        match e {
            SyncError::Io { path, source, .. } => RegistryError::Io {
                operation: "fsync the directory",
                path,
                source,
            },
            _ => RegistryError::Io {
                operation: "fsync the directory",
                path: PathBuf::new(),
                source: std::io::Error::other(e.to_string()),
            },
        }
    }
}

/// Bounded reads of published files (ctx-fs): a longer file is corrupt, not read whole.
impl From<ReadError> for RegistryError {
    fn from(e: ReadError) -> RegistryError {
        match e {
            ReadError::TooLarge {
                path, limit_bytes, ..
            } => RegistryError::corrupt(
                path,
                format!("it is larger than its limit of {limit_bytes} bytes"),
            ),
            ReadError::Symlink { path } => RegistryError::corrupt(
                path,
                "it is a symbolic link, which the registry never writes",
            ),
            ReadError::NotRegularFile { path, .. } => {
                RegistryError::corrupt(path, "it is not a regular file")
            }
            ReadError::Io {
                action,
                path,
                source,
            } => RegistryError::Io {
                operation: if action == "opened" {
                    "open"
                } else {
                    action_verb(action)
                },
                path,
                source,
            },
            other => RegistryError::Io {
                operation: "read",
                path: PathBuf::new(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}

fn action_verb(action: &'static str) -> &'static str {
    match action {
        "inspected" => "inspect",
        _ => "read",
    }
}

/// Writes `bytes` to the new file `path` (refusing an existing name), fsyncs it and makes it
/// read-only (0400) before the caller publishes it.
pub(crate) fn write_read_only_file(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    write_published_file(path, bytes, FILE_MODE)
}

/// As [`write_read_only_file`], with the mode `mode`: [`FILE_MODE`], or [`FILE_MODE_EXECUTABLE`]
/// for an executable file of a skill tree, whose executable bit its digest pins.
pub(crate) fn write_published_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), RegistryError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(WRITING_MODE)
        .open(path)
        .map_err(RegistryError::io("create the file", path))?;
    file.write_all(bytes)
        .map_err(RegistryError::io("write", path))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(RegistryError::io("set the mode of", path))?;
    file.sync_all().map_err(RegistryError::io("fsync", path))
}

/// Checks that `path` is a published file: regular, not a link, mode 0400, owned by this user
/// (ctx-fs), and one link. Returns its metadata.
pub(crate) fn check_read_only_file(path: &Path) -> Result<fs::Metadata, RegistryError> {
    // A skill tree's executable file is published 0500; every other file 0400.
    let rule = match fs::symlink_metadata(path) {
        Ok(m) if m.mode() & 0o7777 == FILE_MODE_EXECUTABLE => {
            ModeRule::Exactly(FILE_MODE_EXECUTABLE)
        }
        _ => ModeRule::Exactly(FILE_MODE),
    };
    let meta = check_file(path, rule).map_err(|e| match e {
        PrivateError::Symlink { path } => RegistryError::corrupt(
            path,
            "it is a symbolic link, which the registry never writes",
        ),
        PrivateError::NotRegularFile { path, .. } => {
            RegistryError::corrupt(path, "it is not a regular file")
        }
        PrivateError::ModeNotExact { path, found, .. } => RegistryError::corrupt(
            path,
            format!(
                "it has mode {found:04o}, but published files are {FILE_MODE:04o} \
                 ({FILE_MODE_EXECUTABLE:04o} for a skill tree's executable file)"
            ),
        ),
        other => common_private_error(other),
    })?;
    if meta.nlink() != 1 {
        return Err(RegistryError::corrupt(
            path,
            format!(
                "it has {} links, but a published file has exactly one",
                meta.nlink()
            ),
        ));
    }
    Ok(meta)
}

/// The names in directory `path`, refusing more than [`DIRECTORY_ENTRIES_MAX`] entries so a
/// flooded directory cannot make a scan unbounded.
pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>, RegistryError> {
    list_dir_bounded(path, DIRECTORY_ENTRIES_MAX)
}

/// The names in directory `path`, refusing more than `max_entries`.
fn list_dir_bounded(path: &Path, max_entries: usize) -> Result<Vec<String>, RegistryError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(path).map_err(RegistryError::io("list", path))? {
        let entry = entry.map_err(RegistryError::io("list", path))?;
        if names.len() >= max_entries {
            return Err(RegistryError::unsafe_entry(
                path,
                format!("holds more than {max_entries} entries"),
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
pub(crate) fn walk_artifact(root: &Path) -> Result<BTreeMap<String, u64>, RegistryError> {
    let mut files = BTreeMap::new();
    let mut pending: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    let mut seen = 0usize;
    while let Some((dir, prefix)) = pending.pop() {
        check_private_dir(&dir)
            .map_err(dir_error)
            .map_err(|e| match e {
                RegistryError::UnsafeEntry { path, problem } => {
                    RegistryError::Corrupt { path, problem }
                }
                other => other,
            })?;
        for name in list_dir_bounded(&dir, ARTIFACT_ENTRIES_MAX)? {
            seen += 1;
            if seen > ARTIFACT_ENTRIES_MAX {
                return Err(RegistryError::corrupt(
                    root,
                    format!("it holds more than {ARTIFACT_ENTRIES_MAX} entries"),
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
                let meta = check_read_only_file(&path)?;
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
