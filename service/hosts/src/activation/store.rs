//! The activation store: every skill body ctx activates, written once into
//! `<store_root>/<sha256 of SKILL.md>/SKILL.md`, so host entries only point at content that can
//! never change under them (spec/activation.md §3, §5).
//!
//! A store directory is created under a unique staging name, filled, fsynced and renamed into
//! place without replacing anything (`RENAME_NOREPLACE`), then the root is fsynced: a reader sees
//! a complete directory or none. An existing directory is reused only after its content is
//! checked against its name; one that does not match is reported and left for a person.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ctx_model::sha256_hex_bytes;

use super::error::ActivationError;
use ctx_fs::{MODE_GROUP_OTHER, MODE_GROUP_OTHER_WRITE, effective_uid};

use super::fsx::{Content, Dir};

/// The one file of a store directory.
pub const SKILL_FILE: &str = "SKILL.md";
/// Prefix of the store's staging directories.
const STAGE_PREFIX: &str = ".stage-";

/// A materialized skill: its store directory (absolute, canonical) and content digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredSkill {
    pub(crate) dir: PathBuf,
    pub(crate) sha256: String,
}

static STAGE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `body` into the store under `root` (created owner-only when missing), or reuses the
/// directory an earlier activation wrote.
pub(crate) fn materialize(root: &Path, body: &[u8]) -> Result<StoredSkill, ActivationError> {
    let store = Dir::ensure(root)?;
    check_private(&store)?;
    let canonical = std::fs::canonicalize(root).map_err(ActivationError::io("resolve", root))?;
    let sha = sha256_hex_bytes(body);
    let stored = StoredSkill {
        dir: canonical.join(&sha),
        sha256: sha.clone(),
    };
    if store.entry_type(&sha)?.is_some() {
        verify(&store, &sha, body.len())?;
        return Ok(stored);
    }
    let stage = format!(
        "{STAGE_PREFIX}{sha}-{}-{}",
        std::process::id(),
        STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    store.mkdir(&stage)?;
    let staged = store.open_child(&stage)?;
    let filled = staged
        .write_new(SKILL_FILE, body)
        .and_then(|()| staged.sync());
    if let Err(e) = filled {
        discard(&store, &stage);
        return Err(e);
    }
    match store.rename_noreplace(&stage, &store, &sha) {
        Ok(()) => store.sync()?,
        Err(e) if e.raw_os_error().is_some_and(is_exists) => {
            // Another activation stored the same body first: use its directory.
            discard(&store, &stage);
            verify(&store, &sha, body.len())?;
        }
        Err(source) => {
            discard(&store, &stage);
            return Err(ActivationError::Io {
                action: "publish the store directory",
                path: store.child(&sha),
                source,
            });
        }
    }
    Ok(stored)
}

fn is_exists(errno: i32) -> bool {
    let e = rustix::io::Errno::from_raw_os_error(errno);
    e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY
}

/// Removes a staging directory this call created (best effort: a leftover is inert and named
/// so it can never be taken for a content address).
fn discard(store: &Dir, stage: &str) {
    if let Ok(dir) = store.open_child(stage) {
        let _ = dir.unlink(SKILL_FILE);
    }
    let _ = store.rmdir(stage);
}

/// The store root must belong to this user and be writable by no one else: a host follows links
/// into it and runs what it finds.
fn check_private(store: &Dir) -> Result<(), ActivationError> {
    let (uid, mode) = store.owner_and_mode()?;
    if uid != effective_uid() || mode & MODE_GROUP_OTHER_WRITE != 0 {
        return Err(ActivationError::UnsafeDirectory {
            path: store.path().to_path_buf(),
            reason: "the store root must be owned by this user and writable by no one else",
        });
    }
    Ok(())
}

/// Checks the store directory `sha`: a private directory holding exactly `SKILL.md` whose
/// SHA-256 is its name.
pub(crate) fn verify(store: &Dir, sha: &str, len: usize) -> Result<(), ActivationError> {
    let corrupt = |reason| ActivationError::StoreCorrupt {
        path: store.child(sha),
        reason,
    };
    let dir = store
        .open_child(sha)
        .map_err(|_| corrupt("it is not a directory"))?;
    let (uid, mode) = dir.owner_and_mode()?;
    if uid != effective_uid() || mode & MODE_GROUP_OTHER != 0 {
        return Err(corrupt("it is not a directory only this user can use"));
    }
    if dir.names()? != [SKILL_FILE] {
        return Err(corrupt("it holds more or less than SKILL.md"));
    }
    match dir.read_file(SKILL_FILE, len) {
        Ok(Content::Bytes(bytes)) if sha256_hex_bytes(&bytes) == sha => Ok(()),
        _ => Err(corrupt(
            "its SKILL.md does not have the content its name says",
        )),
    }
}
