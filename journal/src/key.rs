//! The installation key: 32 random bytes created with the journal, kept in a 0600 file, used only
//! as the HMAC key of record MACs. It never appears in `Debug`, `Display` or an error.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

use crate::error::OpenError;

pub const KEY_FILE: &str = "installation.key";
const KEY_FILE_BYTES: usize = 32;

/// The source of the installation key's randomness; an injected seam so tests are repeatable.
pub type KeySource = dyn Fn() -> Result<[u8; 32], String> + Send + Sync;

pub(crate) fn os_random_key() -> Result<[u8; 32], String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| e.to_string())?;
    Ok(key)
}

pub(crate) struct InstallationKey([u8; 32]);

impl std::fmt::Debug for InstallationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InstallationKey(<redacted>)")
    }
}

impl InstallationKey {
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// Loads the key, or creates it when `may_create` (a brand-new journal). Creation writes a
/// temporary 0600 file, syncs it, renames it into place and syncs the directory, so a crash leaves
/// either no key or a whole one.
pub(crate) fn load_or_create(
    dir: &Path,
    may_create: bool,
    source: &KeySource,
) -> Result<InstallationKey, OpenError> {
    let path = dir.join(KEY_FILE);
    match File::open(&path) {
        Ok(mut file) => {
            check_private(&file, &path)?;
            let mut bytes = Vec::with_capacity(KEY_FILE_BYTES);
            Read::by_ref(&mut file)
                .take(KEY_FILE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|source| OpenError::Io {
                    path: path.clone(),
                    source,
                })?;
            let key: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| OpenError::KeyInvalid {
                    path: path.clone(),
                    reason: "it is not exactly 32 bytes long",
                })?;
            Ok(InstallationKey(key))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !may_create {
                return Err(OpenError::KeyMissing {
                    path: dir.to_path_buf(),
                });
            }
            let key = source().map_err(|reason| OpenError::KeyGeneration { reason })?;
            let tmp = dir.join(format!("{KEY_FILE}.tmp"));
            let io = |source| OpenError::Io {
                path: tmp.clone(),
                source,
            };
            let _ = fs::remove_file(&tmp);
            let mut file = crate::lock::open_private(&tmp).map_err(io)?;
            file.write_all(&key).map_err(io)?;
            file.sync_all().map_err(io)?;
            fs::rename(&tmp, &path).map_err(io)?;
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            Ok(InstallationKey(key))
        }
        Err(source) => Err(OpenError::Io { path, source }),
    }
}

#[cfg(unix)]
fn check_private(file: &File, path: &Path) -> Result<(), OpenError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = file
        .metadata()
        .map_err(|source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(OpenError::KeyInvalid {
            path: path.to_path_buf(),
            reason: "it is readable or writable by other users (mode must be 0600)",
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_file: &File, _path: &Path) -> Result<(), OpenError> {
    Ok(())
}
